// State space and matrix builder (SPEC sections 3, 4 and 6).
//
// A TransitionGenerator (state/generator.hpp) describes the model; the builder
// explores the states reachable from its initial states, numbers them in key
// order (lexicographic in the descriptor's components, so P is banded in the
// first component) and assembles the matrix in CSR with 32-bit indices, rows =
// "from" state (row-vector convention, SPEC 1).  Discrete generators give a
// row-stochastic P (rows sum to 1), continuous ones a generator G (rows sum to 0,
// off-diagonals >= 0); the builder checks which at build time.  Nothing here knows
// which model the generator describes: a model family wraps the Chain with what its
// analysis reads (the queue models: QueueChain, in the model layer).
#pragma once

#include <Eigen/SparseCore>
#include <cstdint>
#include <string>
#include <vector>

#include "aqmchain/state/descriptor.hpp"
#include "aqmchain/state/generator.hpp"
#include "aqmchain/state/time_kind.hpp"

namespace aqm {

using SpMat = Eigen::SparseMatrix<double, Eigen::RowMajor, int32_t>;
using SpMap = Eigen::Map<const SpMat>;

/// The state budget's default and bounds (solver option `max_states`): the builder refuses a
/// chain with more reachable states, as soon as its exploration has seen more.  The
/// default admits the automatic grid's largest chains (grid.state_budget, 4e6) and stops
/// the many-million-state chains of class and stateful models early.
inline constexpr int64_t kDefaultMaxStates = 5000000;
inline constexpr int64_t kMaxStatesMax = 2147483646;  ///< the CSR's 32-bit state indices
/// The tagged-packet chain's state budget (solver option `tagged_max_states`, analysis/response.hpp):
/// its default and upper bound.  The chain has one state per packet position in each state of the
/// queue's chain (sum over the states of n), about 220 bytes each.
inline constexpr int64_t kDefaultTaggedMaxStates = 20000000;
inline constexpr int64_t kTaggedMaxStatesMax = 2147483646;

class Chain;

struct BuildOptions {
  /// Refuse to build when the estimate of `estimate_chain` exceeds this.
  double memory_limit_bytes = 8.0 * 1024 * 1024 * 1024;
  /// Refuse (StateSpaceTooLarge naming max_states) a chain with more reachable states.
  int64_t max_states = kDefaultMaxStates;
  /// The window class chain (docs/classes.md): waiting positions whose classes it carries in
  /// order; 0 picks kClassWindow (both capped at buffer - 1).
  int class_window = 0;
  /// A chain of the same generator family believed to have the same states (a warm re-solve
  /// after a parameter change that keeps every transition's support): its states are
  /// assembled without exploring, and when the matrix has exactly its support (the same
  /// positions and the same non-zero entries) its class analysis is taken too; otherwise the
  /// chain is built from scratch.  Only with a dense index (report.states_reused says).
  const Chain* same_states_as = nullptr;
};

/// Upper bounds computed from the model before anything is built.
struct ChainEstimate {
  int64_t product_states = 0;  ///< product of the component sizes
  int64_t reachable_bound = 0; ///< upper bound on the reachable states (the generator's; <= product_states)
  int64_t max_nnz = 0;         ///< upper bound on the transitions
  double bytes = 0.0;          ///< upper bound on the builder's peak memory
  bool bound_tight = true;     ///< the generator's reachable_bound_tight(): false when the bound is far above the reachable count
  /// Rough wall seconds on one core, from the bounds: building, and the stationary solve
  /// (filled by the model family's estimate, e.g. the queue models').
  double build_seconds = 0.0, solve_seconds = 0.0;
  std::string structure = "plain";  ///< the model family's name for the chain's structure
  bool large = false;  ///< worth announcing before building (at least kLargeStates states or kLargeSeconds)
};
/// A chain is announced before it is built (CLI, JSON) from this many states or seconds.
inline constexpr int64_t kLargeStates = 1000000;
inline constexpr double kLargeSeconds = 30.0;
/// The bounds of a generator's chain (states, transitions, memory), before exploring.
ChainEstimate estimate_chain(const TransitionGenerator& generator);

struct BuildReport {
  int64_t product_states = 0;
  double estimated_bytes = 0.0;
  double seconds_explore = 0.0;   ///< reachability search
  double seconds_assemble = 0.0;  ///< CSR assembly
  double seconds_classes = 0.0;   ///< communicating-class analysis
  double max_row_error = 0.0;     ///< max_i |sum_j P_ij - 1| (discrete) or |sum_j G_ij| / |G_ii| (continuous)
  int closed_classes = 0;         ///< 1 for a chain with a unique stationary vector
  int64_t transient_states = 0;   ///< reachable states outside the closed class(es)
  bool hashed_index = false;      ///< states indexed by a hash map (product space too large for a dense index)
  /// Built on the states of a previous chain (BuildOptions::same_states_as): no exploration,
  /// no class analysis (the matrix has the previous one's support).
  bool states_reused = false;
  /// The keys the exploration started from, sorted (build_chain): a chain built on these
  /// states must start from the same ones to reach the same set.
  std::vector<int64_t> initial_keys;
  std::vector<std::string> warnings;
};

class Chain {
 public:
  TimeKind time = TimeKind::Discrete;
  StateSpace space;           ///< the state descriptor

  // P (discrete) or G (continuous) in CSR (row-major, 32-bit indices).
  int32_t n = 0;
  std::vector<int32_t> rowptr, col;
  std::vector<double> val;

  /// labels[c][s]: value of component c (descriptor order) in state s.
  std::vector<std::vector<int32_t>> labels;
  /// events[e][s]: weight of event event_names[e] in state s (probability per
  /// slot, or rate per unit time for continuous models).
  std::vector<std::string> event_names;
  std::vector<std::vector<double>> events;

  int32_t recurrent_state = -1;  ///< a state of the closed class when it is unique
  BuildReport report;

  int64_t nnz() const { return static_cast<int64_t>(val.size()); }
  SpMap matrix() const { return SpMap(n, n, nnz(), rowptr.data(), col.data(), val.data()); }

  /// Labels of the component called `name` (std::out_of_range when absent).
  const std::vector<int32_t>& component(const std::string& name) const;
  /// Weights of the event called `name` (std::out_of_range when absent).
  const std::vector<double>& event(const std::string& name) const;
  /// Key of state s.
  int64_t key_of(int32_t s) const {
    int64_t k = 0;
    for (int c = 0; c < space.count(); ++c) k += space.stride(c) * labels[static_cast<size_t>(c)][static_cast<size_t>(s)];
    return k;
  }
  /// Index of the state with this key, or -1 when it is not reachable (inline: on the hot
  /// path of every pass over the rows).
  int32_t index_of_key(int64_t key) const {
    if (key < 0 || key >= space.product()) return -1;
    if (!rank_.empty()) return rank_[static_cast<size_t>(key)];
    return hashed_index_of(key);
  }
  /// Index of the state with these component values, or -1 (std::out_of_range on a bad tuple).
  int32_t index_of(const std::vector<int32_t>& values) const;
  /// out[i] = the index of the state whose component d has value columns[d][i] (one column per
  /// component, descriptor order, `count` values each), or -1 where a value is outside its
  /// component's range or no state has them.
  void indices_of(const std::vector<const int64_t*>& columns, int64_t count, int32_t* out) const;

 private:
  friend struct ChainIndex;  // the builder
  int32_t hashed_index_of(int64_t key) const;
  std::vector<int32_t> rank_;   ///< dense index: key -> state (-1: unreachable); empty when hashed
  std::vector<int64_t> keys_;   ///< hashed index: sorted keys of the states
};

/// Explore, assemble and classify the chain of `generator` (the queue models' chain of a
/// Model: build_chain(const Model&) in the model layer).
Chain build_chain(const TransitionGenerator& generator, const BuildOptions& options = {});

/// The reachable states of a generator counted by the builder's exploration alone
/// (no matrix is assembled): what `info` reports when it is cheap.
struct ReachableCount {
  int64_t states = 0;             ///< reachable states (exactly those build_chain numbers)
  int64_t transitions_bound = 0;  ///< transitions emitted while exploring (duplicates included): >= nnz
  /// component_counts[c][v]: reachable states whose component c (descriptor order) has value v.
  std::vector<std::vector<int64_t>> component_counts;
  double seconds = 0.0;           ///< exploration time
  bool hashed_index = false;      ///< states indexed by a hash map
};
/// Explore the states of `generator` within the memory budget.
ReachableCount count_reachable(const TransitionGenerator& generator, const BuildOptions& options = {});

/// One chain per generator, all on the same states: the union of the states reachable
/// under any of the generators, numbered once, so a probability vector of one chain is one
/// of every other's.  The generators must share one descriptor (std::invalid_argument
/// otherwise).  A chain may have transient states (reachable only under another generator).
std::vector<Chain> build_chains(const std::vector<const TransitionGenerator*>& generators,
                                const BuildOptions& options = {});

/// Communicating-class analysis of the CSR graph (O(nnz): an irreducible chain shown by
/// searches from state 0, any other by Tarjan's algorithm): fills report.closed_classes,
/// report.transient_states and recurrent_state.
/// build_chain calls it; call it again after editing the matrix by hand.
void classify(Chain& chain);

/// Closed communicating classes of the graph of the transitions of probability (or rate)
/// at least `min_entry` (O(nnz): one closed class shown by searches from the rows holding
/// smaller entries when the chain has one class, else Tarjan's algorithm): how many, and a
/// state of each of the first two.
struct ClosedClasses {
  int count = 0;
  int32_t first = -1, second = -1;
};
ClosedClasses closed_classes_above(const Chain& chain, double min_entry);

/// y = x P (row vector times P), i.e. y = P^T x.
void left_multiply(const Chain& c, const double* x, double* y);

/// The largest rate of leaving a state: max_i |G_ii| (continuous), or max_i (1 - P_ii)
/// (discrete; 1 for a row without a diagonal entry).  The uniformisation rate.
double exit_rate(const Chain& c);

/// ||pi P - pi||_1 (discrete) or ||pi G||_1 / max_i |G_ii| (continuous: the
/// residual of the uniformised chain P = I + G / max_i |G_ii|).
double stationary_residual(const Chain& c, const std::vector<double>& pi);

}  // namespace aqm
