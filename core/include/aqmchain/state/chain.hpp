// State space and transition builder (SPEC sections 3 and 4).
//
// States are (n, avg grid index, modulator state), restricted to those reachable
// from the empty system (n = 0, avg = 0, any modulator state).  They are numbered
// in lexicographic (n, avg, modulator) order, so P is block-tridiagonal in n.
// P is row-stochastic, stored CSR with 32-bit indices, rows = "from" state
// (row-vector convention pi P = pi, SPEC 1).
#pragma once

#include <Eigen/SparseCore>
#include <cstdint>
#include <string>
#include <vector>

#include "aqmchain/model/model.hpp"

namespace aqm {

using SpMat = Eigen::SparseMatrix<double, Eigen::RowMajor, int32_t>;
using SpMap = Eigen::Map<const SpMat>;

struct BuildOptions {
  /// Refuse to build when the estimate of section `estimate_chain` exceeds this.
  double memory_limit_bytes = 8.0 * 1024 * 1024 * 1024;
};

/// Upper bounds computed from the model before anything is built.
struct ChainEstimate {
  int64_t product_states = 0;  ///< (N + 1) x grid points x modulator states
  int64_t max_nnz = 0;         ///< upper bound on the transitions
  double bytes = 0.0;          ///< upper bound on the builder's peak memory
};
ChainEstimate estimate_chain(const Model& model);

struct BuildReport {
  int64_t product_states = 0;
  double estimated_bytes = 0.0;
  double seconds_explore = 0.0;   ///< reachability search
  double seconds_assemble = 0.0;  ///< CSR assembly
  double seconds_classes = 0.0;   ///< communicating-class analysis
  double max_row_error = 0.0;     ///< max_i |sum_j P_ij - 1|
  int closed_classes = 0;         ///< 1 for a chain with a unique stationary vector
  int64_t transient_states = 0;   ///< reachable states outside the closed class(es)
  std::vector<std::string> warnings;
};

class Chain {
 public:
  Model model;
  std::vector<double> grid;  ///< avg grid points g_0 .. g_L

  // P in CSR (row-major, 32-bit indices).
  int32_t n = 0;
  std::vector<int32_t> rowptr, col;
  std::vector<double> val;

  // State labels.
  std::vector<int32_t> level;     ///< n: packets in the system
  std::vector<int32_t> avg_index; ///< index into `grid`
  std::vector<int32_t> modulator; ///< modulator state

  // Per-state probabilities of the events in one slot starting in that state
  // (SPEC 3): an arrival; an AQM drop (not marked); an ECN mark; an overflow
  // drop; an arrival admitted (n grows by it); a departure.
  std::vector<double> p_arrival, p_aqm_drop, p_mark, p_overflow, p_admit, p_depart;

  int32_t recurrent_state = -1;  ///< a state of the closed class when it is unique
  BuildReport report;

  int64_t nnz() const { return static_cast<int64_t>(val.size()); }
  SpMap matrix() const { return SpMap(n, n, nnz(), rowptr.data(), col.data(), val.data()); }
  /// Index of (n, avg_index, modulator), or -1 if that state is not reachable.
  int32_t index_of(int32_t level, int32_t avg_index, int32_t modulator) const;

 private:
  friend Chain build_chain(const Model&, const BuildOptions&);
  std::vector<int32_t> rank_;  ///< product id -> state index (-1: unreachable)
};

/// Explore, assemble and classify the chain of `model` (validated first).
Chain build_chain(const Model& model, const BuildOptions& options = {});

/// Communicating-class analysis of the CSR graph (Tarjan, O(nnz)): fills
/// report.closed_classes, report.transient_states and recurrent_state.
/// build_chain calls it; call it again after editing the matrix by hand.
void classify(Chain& chain);

/// y = x P (row vector times P), i.e. y = P^T x.
void left_multiply(const Chain& c, const double* x, double* y);

/// ||pi P - pi||_1.
double stationary_residual(const Chain& c, const std::vector<double>& pi);

}  // namespace aqm
