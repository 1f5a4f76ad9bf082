// Operators: what solvers see of a matrix (the idea of Spectra's perform_op).
//
// Orientation (SPEC 1): probability vectors are rows, so the basic product is
// y = x A (apply); y = A x is apply_transpose.  A CsrOperator is a non-owning
// view of CSR arrays (rows = "from" state) and counts its applications.  A
// MarkovOperator is a chain's matrix seen both ways a solver needs it:
//   - stochastic(): a row-stochastic P with the same stationary vector
//     (P itself for a discrete chain; the uniformised P = I + G / Lambda,
//     Lambda = max_i |G_ii|, for a continuous one) -- stationary solvers;
//   - apply_generator(): y = x G (G = P - I for a discrete chain, SPEC 6's
//     reading of e^{P tau}) -- transient exponentials.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

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

class MarkovOperator {
 public:
  /// The operator of a built chain (kept by reference: the chain must outlive it).
  explicit MarkovOperator(const Chain& chain);
  TimeKind kind() const { return kind_; }
  int32_t rows() const { return P_.rows(); }
  /// Lambda of the uniformisation (1 for a discrete chain).
  double rate() const { return rate_; }
  /// Row-stochastic matrix with the chain's stationary vector.
  const CsrOperator& stochastic() const { return P_; }
  /// y = x G.
  void apply_generator(const double* x, double* y) const;
  /// ||x P - x||_1 for the stochastic() P (for a continuous chain ||x G||_1 / Lambda).
  double residual(const std::vector<double>& x) const;

 private:
  TimeKind kind_;
  double rate_ = 1.0;
  std::vector<int32_t> own_rowptr_, own_col_;  // uniformised copy (continuous chains)
  std::vector<double> own_val_;
  CsrOperator P_;
};

/// A discrete-time copy of a continuous chain with P = I + G / Lambda in place of
/// G (same states, labels and events; `rate` receives Lambda).  Solvers that
/// still read a Chain's CSR arrays use it for continuous-time models.
Chain uniformised_chain(const Chain& chain, double* rate = nullptr);

}  // namespace aqm
