#include "aqmchain/operators/operator.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "aqmchain/state/chain.hpp"
#include "aqmchain/threads.hpp"
#include "operators/gather_rows.hpp"

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
#pragma omp parallel for schedule(static) if (n_ > kParallelLoopItems) num_threads(loop_threads())
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

MarkovOperator::MarkovOperator(const Chain& c) : MarkovOperator(c, -1.0) {}

MarkovOperator::MarkovOperator(const Chain& c, double rate)
    : chain_(&c), kind_(c.time), M_(c.n, c.rowptr.data(), c.col.data(), c.val.data()) {
  if (kind_ == TimeKind::Continuous) {
    rate_ = rate > 0.0 ? rate : exit_rate(c);
    if (!(rate_ > 0.0)) rate_ = 1.0;  // G = 0: every state absorbing, P = I
  }
}

void MarkovOperator::apply(const double* x, double* y) const {
  ++applications_;
  if (kind_ != TimeKind::Continuous) return M_.apply(x, y);
  // the entries of P = I + G / Lambda as the uniformised copy held them, in the same order
  const int32_t n = rows();
  const int32_t *rp = M_.rowptr(), *ci = M_.col();
  const double* v = M_.val();
  std::fill(y, y + n, 0.0);
  for (int32_t i = 0; i < n; ++i) {
    const double xi = x[i];
    if (xi == 0.0) continue;
    bool diag = false;
    for (int32_t k = rp[i]; k < rp[i + 1]; ++k) {
      const int32_t j = ci[k];
      if (j == i) {
        y[j] += xi * (1.0 + v[k] / rate_);
        diag = true;
      } else {
        y[j] += xi * (v[k] / rate_);
      }
    }
    if (!diag) y[i] += xi * 1.0;  // a row without outflow: P_ii = 1
  }
}

void MarkovOperator::apply_transpose(const double* x, double* y) const {
  ++applications_;
  if (kind_ != TimeKind::Continuous) return M_.apply_transpose(x, y);
  const int32_t n = rows();
  const int32_t* rp = M_.rowptr();
#pragma omp parallel for schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
  for (int32_t i = 0; i < n; ++i) {
    double s = 0.0;
    bool diag = false;
    for (int32_t k = rp[i]; k < rp[i + 1]; ++k) {
      const int32_t j = M_.col()[k];
      if (!diag && j > i) s += 1.0 * x[i];  // a row without outflow: P_ii = 1, in column order
      diag = diag || j >= i;
      s += p_uniformised(i, k) * x[j];
    }
    if (!diag) s += 1.0 * x[i];
    y[i] = s;
  }
}

void MarkovOperator::diagonal(double* d) const {
  const int32_t n = rows();
  for (int32_t i = 0; i < n; ++i) {
    d[i] = kind_ == TimeKind::Continuous ? 1.0 : 0.0;
    for (int32_t k = M_.rowptr()[i]; k < M_.rowptr()[i + 1]; ++k)
      if (M_.col()[k] == i) d[i] = kind_ == TimeKind::Continuous ? p_uniformised(i, k) : d[i] + M_.val()[k];
  }
}

namespace {
/// T = the transpose of the rows row(i, sink) of a matrix of n rows (see gather_rows).
template <class Row>
void transpose_rows(int32_t n, Row row, TransposedCsr& T) {
  T.n = n;
  detail::gather_rows(n, n, row, [](int32_t) { return 0; }, T.rowptr, T.col, T.val);
}
}  // namespace

TransposedCsr::TransposedCsr(const CsrOperator& P) {
  const int32_t *rp = P.rowptr(), *ci = P.col();
  const double* v = P.val();
  transpose_rows(
      P.rows(),
      [rp, ci, v](int32_t i, auto&& sink, auto) {
        for (int32_t e = rp[i]; e < rp[i + 1]; ++e) sink(ci[e], [v, e] { return v[e]; });
      },
      *this);
}

void TransposedCsr::apply(const double* x, double* y) const {
  CsrOperator(n, rowptr.data(), col.data(), val.data()).apply_transpose(x, y);  // rows of P^T: a gather
}

TransposedCsr MarkovOperator::transpose() const {
  if (kind_ != TimeKind::Continuous) return TransposedCsr(M_);
  const int32_t *rp = M_.rowptr(), *ci = M_.col();
  // P = I + G / Lambda: a row of G without a diagonal entry has P_ii = 1, placed before the
  // row's own entries (T's row i gets column i when row i of P is scanned: in column order)
  TransposedCsr T;
  transpose_rows(
      rows(),
      [this, rp, ci](int32_t i, auto&& sink, auto) {
        bool has_diag = false;
        for (int32_t k = rp[i]; k < rp[i + 1] && !has_diag; ++k) has_diag = ci[k] == i;
        if (!has_diag) sink(i, [] { return 1.0; });
        for (int32_t k = rp[i]; k < rp[i + 1]; ++k) sink(ci[k], [this, i, k] { return p_uniformised(i, k); });
      },
      T);
  return T;
}

void MarkovOperator::apply_generator(const double* x, double* y) const {
  if (kind_ == TimeKind::Continuous) {
    M_.apply(x, y);
    ++applications_;
    return;
  }
  apply(x, y);
  for (int32_t i = 0; i < rows(); ++i) y[i] = y[i] - x[i];
}

double MarkovOperator::residual(const std::vector<double>& x) const {
  std::vector<double> y(x.size());
  apply(x.data(), y.data());
  long double r = 0.0L;
  for (size_t i = 0; i < x.size(); ++i) r += std::abs(y[i] - x[i]);
  return static_cast<double>(r);
}

const StateSpace& MarkovOperator::space() const { return chain_->space; }
const std::vector<std::vector<int32_t>>& MarkovOperator::labels() const { return chain_->labels; }
int32_t MarkovOperator::recurrent_state() const { return chain_->recurrent_state; }
int MarkovOperator::closed_classes() const { return chain_->report.closed_classes; }
int64_t MarkovOperator::transient_states() const { return chain_->report.transient_states; }

int MarkovOperator::closed_classes_above(double min_entry, int32_t* first, int32_t* second) const {
  // an entry of P off the diagonal is G_ij / Lambda for a generator (the diagonal, a
  // self-loop, does not change the classes)
  const ClosedClasses cc = aqm::closed_classes_above(*chain_, continuous() ? min_entry * rate_ : min_entry);
  if (first) *first = cc.first;
  if (second) *second = cc.second;
  return cc.count;
}

const ComponentMoves& MarkovOperator::component_moves() const {
  if (!moves_)
    moves_ = std::make_shared<const ComponentMoves>(
        aqm::component_moves(chain_->space, chain_->labels, M_.rows(), M_.rowptr(), M_.col(), M_.val()));
  return *moves_;
}

std::vector<int32_t> MarkovOperator::block_partition() const {
  if (components_outside_block() < 2) return in_block_partition(chain_->space, chain_->labels, rows());
  return in_block_partition(chain_->space, chain_->labels, rows(), sweep_order(chain_->space, component_moves()));
}

int MarkovOperator::components_outside_block() const {
  int out = 0;
  for (const Component& c : chain_->space.components()) out += c.in_block ? 0 : 1;
  return out;
}

ComponentMoves component_moves(const StateSpace& space, const std::vector<std::vector<int32_t>>& labels, int32_t n,
                               const int32_t* rowptr, const int32_t* col, const double* val) {
  const int D = space.count();
  ComponentMoves m;
  m.up.assign(static_cast<size_t>(D), 0.0);
  m.down.assign(static_cast<size_t>(D), 0.0);
  if (labels.size() < static_cast<size_t>(D)) return m;
  for (int32_t i = 0; i < n; ++i)
    for (int32_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
      const int32_t j = col[e];
      if (j == i) continue;
      const double w = std::abs(val[e]);
      for (int d = 0; d < D; ++d) {
        const int32_t a = labels[d][i], b = labels[d][j];
        if (b > a) m.up[d] += w;
        else if (b < a) m.down[d] += w;
      }
    }
  return m;
}

std::vector<int> sweep_order(const StateSpace& space, const ComponentMoves& moves) {
  std::vector<int> outside;
  for (int i = 0; i < space.count(); ++i)
    if (!space.component(i).in_block) outside.push_back(i);
  // the most one-directional component first: its moves then lie on one side of the
  // block diagonal, where one Gauss-Seidel sweep carries them exactly
  auto bias = [&](int d) {
    const double up = moves.up[d], down = moves.down[d];
    return up + down > 0.0 ? std::abs(up - down) / (up + down) : 0.0;
  };
  std::stable_sort(outside.begin(), outside.end(), [&](int a, int b) { return bias(a) > bias(b) + 1e-3; });
  return outside;
}

std::vector<int32_t> in_block_partition(const StateSpace& space, const std::vector<std::vector<int32_t>>& labels,
                                        int32_t n, std::vector<int> outside) {
  if (outside.empty())
    for (int i = 0; i < space.count(); ++i)
      if (!space.component(i).in_block) outside.push_back(i);
  std::vector<int64_t> key(n, 0);
  for (int i : outside)
    for (int32_t s = 0; s < n; ++s) key[s] = key[s] * space.component(i).size + labels[i][s];
  // number the distinct keys in increasing order: through a dense marker array
  // when the key range is small (the usual case), else by sorting
  int64_t range = 1;  // the keys fit int64 (the descriptor's product does), so does this
  for (int i : outside) range *= space.component(i).size;
  std::vector<int32_t> block(n);
  if (range <= std::max<int64_t>(4 * static_cast<int64_t>(n), 1 << 20)) {
    std::vector<int32_t> id(static_cast<size_t>(range), -1);
    for (int64_t k : key) id[static_cast<size_t>(k)] = 0;
    int32_t next = 0;
    for (auto& v : id)
      if (v == 0) v = next++;
    for (int32_t s = 0; s < n; ++s) block[s] = id[static_cast<size_t>(key[s])];
    return block;
  }
  std::vector<int64_t> sorted(key);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (int32_t s = 0; s < n; ++s)
    block[s] = static_cast<int32_t>(std::lower_bound(sorted.begin(), sorted.end(), key[s]) - sorted.begin());
  return block;
}

}  // namespace aqm
