#include "aqmchain/operators/operator.hpp"

#include <algorithm>
#include <cmath>

#include "aqmchain/state/chain.hpp"
#include "aqmchain/threads.hpp"

namespace aqm {

void CsrOperator::apply(const double* x, double* y) const {
  std::fill(y, y + n_, 0.0);
  for (int32_t i = 0; i < n_; ++i) {
    const double xi = x[i];
    if (xi == 0.0) continue;
    for (int32_t k = rowptr_[i]; k < rowptr_[i + 1]; ++k) y[col_[k]] += xi * val_[k];
  }
  ++applications_;
}

void CsrOperator::apply_transpose(const double* x, double* y) const {
#pragma omp parallel for schedule(static) if (n_ > 50000) num_threads(loop_threads())
  for (int32_t i = 0; i < n_; ++i) {
    double s = 0.0;
    for (int32_t k = rowptr_[i]; k < rowptr_[i + 1]; ++k) s += val_[k] * x[col_[k]];
    y[i] = s;
  }
  ++applications_;
}

void CsrOperator::diagonal(double* d) const {
  for (int32_t i = 0; i < n_; ++i) {
    d[i] = 0.0;
    for (int32_t k = rowptr_[i]; k < rowptr_[i + 1]; ++k)
      if (col_[k] == i) d[i] += val_[k];
  }
}

namespace {
/// Uniformised P = I + G / Lambda of a generator, with a diagonal entry in every row.
double uniformise(const Chain& c, std::vector<int32_t>& rp, std::vector<int32_t>& ci, std::vector<double>& v) {
  double lambda = exit_rate(c);
  if (!(lambda > 0.0)) lambda = 1.0;  // G = 0: every state absorbing, P = I
  rp.assign(static_cast<size_t>(c.n) + 1, 0);
  ci.clear();
  v.clear();
  ci.reserve(c.col.size() + static_cast<size_t>(c.n));
  v.reserve(c.val.size() + static_cast<size_t>(c.n));
  for (int32_t i = 0; i < c.n; ++i) {
    bool diag = false;
    for (int32_t k = c.rowptr[i]; k < c.rowptr[i + 1]; ++k) {
      const int32_t j = c.col[k];
      if (!diag && j > i) {  // a row without a diagonal entry (no outflow)
        ci.push_back(i);
        v.push_back(1.0);
        diag = true;
      }
      ci.push_back(j);
      v.push_back(j == i ? 1.0 + c.val[k] / lambda : c.val[k] / lambda);
      diag = diag || j == i;
    }
    if (!diag) {
      ci.push_back(i);
      v.push_back(1.0);
    }
    rp[i + 1] = static_cast<int32_t>(ci.size());
  }
  return lambda;
}
}  // namespace

MarkovOperator::MarkovOperator(const Chain& c)
    : kind_(c.time), P_(c.n, c.rowptr.data(), c.col.data(), c.val.data()) {
  if (kind_ == TimeKind::Continuous) {
    rate_ = uniformise(c, own_rowptr_, own_col_, own_val_);
    P_ = CsrOperator(c.n, own_rowptr_.data(), own_col_.data(), own_val_.data());
  }
}

Chain uniformised_chain(const Chain& c, double* rate) {
  // What the solvers read: the matrix, the descriptor with its labels, the classes
  // (the event weights stay with the original chain, which the metrics read).
  Chain u;
  u.space = c.space;
  u.n = c.n;
  u.labels = c.labels;
  u.recurrent_state = c.recurrent_state;
  u.report = c.report;
  const double lambda = uniformise(c, u.rowptr, u.col, u.val);
  if (rate) *rate = lambda;
  u.time = TimeKind::Discrete;
  return u;
}

void MarkovOperator::apply_generator(const double* x, double* y) const {
  P_.apply(x, y);
  for (int32_t i = 0; i < P_.rows(); ++i) y[i] = rate_ * (y[i] - x[i]);
}

double MarkovOperator::residual(const std::vector<double>& x) const {
  std::vector<double> y(x.size());
  P_.apply(x.data(), y.data());
  long double r = 0.0L;
  for (size_t i = 0; i < x.size(); ++i) r += std::abs(y[i] - x[i]);
  return static_cast<double>(r);
}

}  // namespace aqm
