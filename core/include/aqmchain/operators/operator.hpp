// Operators: what solvers see of a matrix (the idea of Spectra's perform_op).
//
// Orientation (SPEC 1): probability vectors are rows, so the basic product is
// y = x A (apply); y = A x is apply_transpose.  A CsrOperator is a non-owning
// view of CSR arrays (rows = "from" state) and counts its applications.  A
// MarkovOperator is what every solver takes: a view of a built chain's matrix,
// its state descriptor and labels, its closed-class information, its time kind
// and its uniformisation rate.  Solvers see the chain through the row-stochastic
// P with the chain's stationary vector: P itself for a discrete chain, the
// uniformised P = I + G / Lambda (Lambda = max_i |G_ii|) for a continuous one,
// formed entry by entry on the fly from G (G is stored once, never copied).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "aqmchain/state/descriptor.hpp"
#include "aqmchain/state/time_kind.hpp"

namespace aqm {

class Chain;

class CsrOperator {
 public:
  CsrOperator(int32_t n, const int32_t* rowptr, const int32_t* col, const double* val)
      : n_(n), rowptr_(rowptr), col_(col), val_(val) {}
  int32_t rows() const { return n_; }
  int64_t nnz() const { return rowptr_[n_]; }
  const int32_t* rowptr() const { return rowptr_; }
  const int32_t* col() const { return col_; }
  const double* val() const { return val_; }
  /// y = x A (row vector times A); y must not alias x.
  void apply(const double* x, double* y) const;
  /// y = A x.
  void apply_transpose(const double* x, double* y) const;
  /// d_i = A_ii.
  void diagonal(double* d) const;
  /// Products with A or A^T made so far.
  long applications() const { return applications_; }

 private:
  int32_t n_;
  const int32_t *rowptr_, *col_;
  const double* val_;
  mutable long applications_ = 0;
};

/// P^T in CSR, owned (rows = "to" state): y_j = sum_i x_i P_ij as a gather, which is
/// faster than the scatter over P's rows and splits over threads.
struct TransposedCsr {
  int32_t n = 0;
  std::vector<int32_t> rowptr, col;
  std::vector<double> val;
  TransposedCsr() = default;
  /// The transpose of P (counting sort: every row of P^T comes out sorted).
  explicit TransposedCsr(const CsrOperator& P);
  /// y = x P (y must not alias x).
  void apply(const double* x, double* y) const;
};

/// How a matrix moves each state component (component_moves).
struct ComponentMoves {
  std::vector<double> up, down;
};

class MarkovOperator {
 public:
  /// The operator of a built chain: a view of its arrays, descriptor, labels and classes
  /// (nothing is copied; the chain must outlive the operator).  Implicit, so that a Chain
  /// is accepted where a solver takes its operator.
  MarkovOperator(const Chain& chain);  // NOLINT(google-explicit-constructor)
  /// The same with Lambda given (a closed class cut out of a continuous chain keeps the
  /// whole chain's Lambda, so its P is the whole P's restriction).
  MarkovOperator(const Chain& chain, double rate);

  TimeKind kind() const { return kind_; }
  bool continuous() const { return kind_ == TimeKind::Continuous; }
  int32_t rows() const { return M_.rows(); }
  int64_t nnz() const { return M_.nnz(); }
  /// Lambda of the uniformisation (1 for a discrete chain).
  double rate() const { return rate_; }
  /// The matrix as stored: P (discrete) or G (continuous), rows = "from" state.
  const CsrOperator& matrix() const { return M_; }
  const int32_t* rowptr() const { return M_.rowptr(); }
  const int32_t* col() const { return M_.col(); }

  /// Entry e (of row i) of the stochastic P: for a generator 1 + G_ii / Lambda on the
  /// diagonal and G_ij / Lambda off it.
  double p(int32_t i, int64_t e) const { return kind_ != TimeKind::Continuous ? M_.val()[e] : p_uniformised(i, e); }
  /// Entry e of P off the diagonal (its column is not its row).
  double p_off(int64_t e) const {
    const double v = M_.val()[e];
    return kind_ == TimeKind::Continuous ? v / rate_ : v;
  }
  /// y = x P (y must not alias x).
  void apply(const double* x, double* y) const;
  /// y = P x.
  void apply_transpose(const double* x, double* y) const;
  /// d_i = P_ii.
  void diagonal(double* d) const;
  /// P^T in CSR (rows = "to" state, columns sorted), a diagonal entry in every row where P
  /// has one (for a generator: every row): for the methods that sweep over columns of P.
  TransposedCsr transpose() const;
  /// y = x G (G = P - I for a discrete chain).
  void apply_generator(const double* x, double* y) const;
  /// ||x P - x||_1 for the stochastic P (for a continuous chain ||x G||_1 / Lambda).
  double residual(const std::vector<double>& x) const;
  /// Products with P made so far (apply, apply_transpose, residual).
  long applications() const { return applications_; }

  // What the chain's builder found, for the solvers' checks.
  const StateSpace& space() const;
  /// labels()[c][s]: value of component c (descriptor order) in state s.
  const std::vector<std::vector<int32_t>>& labels() const;
  /// A state of the closed class when it is unique (-1 otherwise).
  int32_t recurrent_state() const;
  int closed_classes() const;
  int64_t transient_states() const;
  /// Closed classes of the graph of the entries of P at least `min_entry`.
  int closed_classes_above(double min_entry, int32_t* first = nullptr, int32_t* second = nullptr) const;
  /// Blocks of the states that share the values of every component not flagged in_block
  /// (descriptor.hpp), numbered 0 .. blocks - 1 in increasing order of those values, the
  /// components taken in sweep_order (the most one-directional first): the
  /// diagonal blocks of krylov's preconditioner.  One block when every component is in it,
  /// one block per state without labels.
  std::vector<int32_t> block_partition() const;
  /// The number of components outside the block (see block_partition).
  int components_outside_block() const;
  /// component_moves of this operator's matrix, computed once (P's off-diagonal entries for
  /// a discrete chain, G's for a continuous one: the same ratios).
  const ComponentMoves& component_moves() const;

 private:
  /// Entry e of row i of P = I + G / Lambda (continuous chains; the loops that handle only
  /// them call it without p()'s test of the kind).
  double p_uniformised(int32_t i, int64_t e) const {
    const double v = M_.val()[e];
    return M_.col()[e] == i ? 1.0 + v / rate_ : v / rate_;
  }
  const Chain* chain_;
  TimeKind kind_;
  double rate_ = 1.0;
  CsrOperator M_;
  mutable long applications_ = 0;
  mutable std::shared_ptr<const ComponentMoves> moves_;
};

/// The blocks of MarkovOperator::block_partition() from a descriptor and its labels: the
/// states sharing the values of the components outside the block, numbered in the
/// lexicographic order of those values with the components taken in the order `outside`
/// (empty: descriptor order).
std::vector<int32_t> in_block_partition(const StateSpace& space, const std::vector<std::vector<int32_t>>& labels,
                                        int32_t n, std::vector<int> outside = {});
/// The weights of a matrix's off-diagonal entries (rows = from-state) that raise (up) or
/// lower (down) each component, in descriptor order: how often and in which direction each
/// component moves (one pass over the entries).
ComponentMoves component_moves(const StateSpace& space, const std::vector<std::vector<int32_t>>& labels, int32_t n,
                               const int32_t* rowptr, const int32_t* col, const double* val);
/// The components outside the block, most one-directional first: ordered by |up - down| /
/// (up + down) (e.g. a counter that climbs one step per arrival and is reset rarely comes
/// before a moving average that moves both ways).  Numbering the blocks with that component
/// as the major key puts its moves on one side of the block diagonal, where the forward
/// Gauss-Seidel sweep carries them exactly.
std::vector<int> sweep_order(const StateSpace& space, const ComponentMoves& moves);

}  // namespace aqm
