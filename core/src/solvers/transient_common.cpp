// Transient kernels: method names, options, the generator operator, input checks
// and outputs shared by krylov_expv (expm.cpp) and uniformization (uniformization.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "aqmchain/errors.hpp"
#include "aqmchain/operators/operator.hpp"
#include "aqmchain/solvers/stepping.hpp"
#include "aqmchain/state/chain.hpp"
#include "aqmchain/threads.hpp"
#include "solvers/block_system.hpp"
#include "solvers/transient_common.hpp"

namespace aqm {

std::string to_string(TransientMethod m) {
  switch (m) {
    case TransientMethod::Auto: return "auto";
    case TransientMethod::Step: return "step";
    case TransientMethod::Krylov: return "krylov";
    case TransientMethod::RationalKrylov: return "rational_krylov";
    case TransientMethod::Uniformization: return "uniformization";
  }
  return "?";
}

TransientMethod transient_method_from(const std::string& s) {
  return detail::enum_from("transient", s, kAllTransientMethods);
}

namespace {
template <class T>
void require_in(const char* name, T v, T lo, T hi, const char* what = "") {
  detail::require_option_in("transient", name, v, lo, hi, what);
}
}  // namespace

void TransientOptions::validate() const {
  if (!(tol > 0.0 && tol <= 0.1))
    throw OptionError(detail::cat("transient option 'tol' must be in (0, 0.1], got ", tol));
  require_in<int>("krylov_dim", krylov_dim, 1, 1000, " (clamped to the number of states)");
  require_in<long>("max_steps", max_steps, 1, 1000000000L);
  require_in<long>("max_applications", max_applications, 0, 1000000000000L, " (0: no limit)");
  require_in<double>("breakdown", breakdown, 0.0, 1e-3);
  require_in<double>("shift_ratio", shift_ratio, 1e-3, 10.0);
  require_in<long>("inner_max_iter", inner_max_iter, 1, 1000000L);
}

// ------------------------------------------------------------------ the generator operator

GeneratorOperator GeneratorOperator::from_operator(const MarkovOperator& op) {
  const bool discrete = !op.continuous();
  const CsrOperator& M = op.matrix();
  auto T = std::make_shared<TransposedCsr>(M);
  GeneratorOperator g;
  g.n = M.rows();
  // rows of T are columns of the matrix: ||G||_1 = max_j sum_i |G_ij|; rate = max_i |G_ii|
  double norm1 = 0.0;
  for (int32_t j = 0; j < T->n; ++j) {
    double s = 0.0;
    bool diag = false;
    for (int32_t e = T->rowptr[j]; e < T->rowptr[j + 1]; ++e) {
      const double v = T->val[e];
      const bool d = T->col[e] == j;
      diag = diag || d;
      s += d && discrete ? std::abs(v - 1.0) : std::abs(v);
    }
    if (discrete && !diag) s += 1.0;  // P_jj = 0: G_jj = -1
    norm1 = std::max(norm1, s);
  }
  g.norm1 = norm1;
  // the uniformisation rate: max_i |G_ii| (continuous), or max_i (1 - P_ii) (discrete;
  // 1 for a row without a diagonal entry)
  std::vector<double> d(static_cast<size_t>(g.n));
  M.diagonal(d.data());
  double rate = 0.0;
  for (double v : d) rate = std::max(rate, discrete ? 1.0 - v : -v);
  g.rate = rate;
  g.matrix = {M.rowptr(), M.col(), M.val(), discrete, &op.space(), &op.labels(), {}};
  if (discrete) {
    g.product = [T](const double* x, double* y) {
      T->apply(x, y);
      const int32_t n = T->n;
#pragma omp parallel for schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
      for (int32_t i = 0; i < n; ++i) y[i] -= x[i];
    };
  } else {
    g.product = [T](const double* x, double* y) { T->apply(x, y); };
  }
  return g;
}

GeneratorOperator GeneratorOperator::from_csr(int32_t n, const int32_t* rowptr, const int32_t* col,
                                              const double* val, double row_tol) {
  if (n < 1) fail_param("rowptr", "of length n + 1 >= 2 (at least one state)", detail::cat("n = ", n));
  if (rowptr[0] != 0) fail_param("rowptr", "starting at 0", rowptr[0]);
  for (int32_t i = 0; i < n; ++i)
    if (rowptr[i + 1] < rowptr[i])
      fail_param("rowptr", "non-decreasing", detail::cat("rowptr[", i + 1, "] = ", rowptr[i + 1], " < ", rowptr[i]));
  std::vector<double> colsum(static_cast<size_t>(n), 0.0);
  double rate = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    long double s = 0.0L;
    double scale = 0.0, diag = 0.0;
    for (int32_t k = rowptr[i]; k < rowptr[i + 1]; ++k) {
      const int32_t j = col[k];
      const double v = val[k];
      if (j < 0 || j >= n) fail_param("col", detail::cat("in [0, ", n, ")"), detail::cat(j, " in row ", i));
      if (!std::isfinite(v)) fail_param("val", "finite", detail::cat(v, " at (", i, ", ", j, ")"));
      if (j != i && v < 0.0)
        fail_param("val", "a generator's (off-diagonal entries >= 0)", detail::cat(v, " at (", i, ", ", j, ")"));
      if (j == i) diag += v;
      s += v;
      scale = std::max(scale, std::abs(v));
      colsum[j] += std::abs(v);
    }
    if (std::abs(static_cast<double>(s)) > row_tol * scale)
      fail_param("val", detail::cat("a generator's (every row sums to 0 within ", row_tol, " of its largest entry)"),
                 detail::cat("row ", i, " summing to ", static_cast<double>(s)));
    rate = std::max(rate, -diag);
  }
  GeneratorOperator g;
  g.n = n;
  g.norm1 = *std::max_element(colsum.begin(), colsum.end());
  g.rate = rate;
  g.matrix = {rowptr, col, val, false, nullptr, nullptr, {}};
  const CsrOperator A(n, rowptr, col, val);
  g.product = [A](const double* x, double* y) { A.apply(x, y); };
  return g;
}

// ------------------------------------------------------------------ dispatch for a raw generator

TransientResult expm_multiply(const GeneratorOperator& G, const std::vector<double>& p0,
                              const std::vector<double>& times, TransientMethod method,
                              const TransientOptions& options, const TransientObserver& observer) {
  switch (method) {
    case TransientMethod::Auto: {
      TransientResult r = krylov_expv(G, p0, times, options, observer);
      r.requested = TransientMethod::Auto;
      return r;
    }
    case TransientMethod::Krylov: return krylov_expv(G, p0, times, options, observer);
    case TransientMethod::RationalKrylov: return rational_krylov_expv(G, p0, times, options, observer);
    case TransientMethod::Uniformization: return uniformization(G, p0, times, options, observer);
    case TransientMethod::Step: break;
  }
  throw OptionError("transient option 'method' = 'step' needs a slotted chain's P, not a generator: use "
                    "'krylov', 'rational_krylov', 'uniformization' or 'auto'");
}

namespace transient_detail {

double sum(const std::vector<double>& x) {
  long double s = 0.0L;
  for (double v : x) s += v;
  return static_cast<double>(s);
}

double norm2(const std::vector<double>& x) {
  // Scaled to stay finite for any finite entries.
  double m = 0.0;
  for (double v : x) m = std::max(m, std::abs(v));
  if (!(m > 0.0) || !std::isfinite(m)) return m;
  long double s = 0.0L;
  for (double v : x) s += (v / m) * (v / m);
  return m * std::sqrt(static_cast<double>(s));
}

void check_inputs(const GeneratorOperator& G, const std::vector<double>& p0, const std::vector<double>& times,
                  const TransientOptions& o) {
  o.validate();
  if (G.n < 1 || !G.product) fail_param("generator", "an operator with at least one state", G.n);
  if (!(G.norm1 >= 0.0) || !std::isfinite(G.norm1)) fail_param("generator.norm1", ">= 0 and finite", G.norm1);
  if (!(G.rate >= 0.0) || !std::isfinite(G.rate)) fail_param("generator.rate", ">= 0 and finite", G.rate);
  if (p0.size() != static_cast<size_t>(G.n))
    fail_param("p0", detail::cat("of length ", G.n, " (one entry per state)"), p0.size());
  long double s = 0.0L;
  for (size_t i = 0; i < p0.size(); ++i) {
    if (!std::isfinite(p0[i]) || p0[i] < 0.0)
      fail_param("p0", "a probability vector (entries finite and >= 0)", detail::cat(p0[i], " at state ", i));
    s += p0[i];
  }
  if (std::abs(static_cast<double>(s) - 1.0) > 1e-8)
    fail_param("p0", "a probability vector (summing to 1 within 1e-8)", detail::cat("a sum of ", static_cast<double>(s)));
  for (size_t k = 0; k < times.size(); ++k) {
    if (!std::isfinite(times[k]) || times[k] < 0.0)
      fail_param("times", "finite and >= 0", detail::cat(times[k], " at index ", k));
    if (k > 0 && times[k] < times[k - 1])
      fail_param("times", "sorted (non-decreasing)", detail::cat(times[k], " after ", times[k - 1], " at index ", k));
  }
}

bool Outputs::prepare(const std::vector<double>& w) {
  if (!project_) {
    buf_ = w;
    return std::isfinite(sum(w));
  }
  long double pos = 0.0L, neg = 0.0L;
  for (double v : w) (v > 0 ? pos : neg) += std::abs(v);
  if (!(pos > 0.0L) || !std::isfinite(static_cast<double>(pos + neg))) return false;
  buf_.resize(w.size());
  for (size_t i = 0; i < w.size(); ++i) buf_[i] = w[i] > 0 ? static_cast<double>(w[i] / pos) : 0.0;
  r_.clipped_mass = std::max(r_.clipped_mass, static_cast<double>(neg / pos));
  return true;
}

bool Outputs::emit_up_to(double t, const std::vector<double>& w) {
  if (done() || times_[r_.outputs] > t) return true;
  if (!prepare(w)) {
    r_.status = Status::NumericalIssue;
    r_.note = detail::cat("the vector at t = ", t, " has no usable mass (non-finite or no positive entry)");
    return false;
  }
  for (; !done() && times_[r_.outputs] <= t; ++r_.outputs)
    if (observer_) observer_(r_.outputs, times_[r_.outputs], buf_.data());
  return true;
}

void Outputs::finish(double t, const std::vector<double>& w) {
  r_.t_reached = t;
  if (prepare(w)) {
    r_.p = buf_;
  } else {
    r_.p = w;
    if (r_.status != Status::NumericalIssue) {
      r_.status = Status::NumericalIssue;
      r_.note = detail::cat("the vector at t = ", t, " has no usable mass (non-finite or no positive entry)");
    }
  }
}

double round_step(double t) {
  if (!(t > 0.0) || !std::isfinite(t)) return t;
  const double scale = std::pow(10.0, std::floor(std::log10(t)) - 1.0);
  const double r = std::round(t / scale) * scale;
  return r > 0.0 ? r : t;
}

double orthogonalise(Eigen::MatrixXd& V, int k, double* h) {
  if (V.rows() > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("orthogonalise: more rows than a state index holds");
  std::vector<const double*> cols(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) cols[static_cast<size_t>(i)] = V.col(i).data();
  return std::sqrt(detail::block_mgs(cols.data(), k, V.col(k).data(), h, static_cast<int32_t>(V.rows())));
}

std::string budget_note(const TransientOptions& o, long steps, long applications, long cost, double t_now,
                        size_t produced, size_t total) {
  const std::string where = detail::cat(" at t = ", t_now, " (", produced, " of ", total, " output times produced)");
  if (steps >= o.max_steps) return detail::cat("the step budget max_steps = ", o.max_steps, " ran out", where);
  if (o.max_applications > 0 && applications + cost > o.max_applications)
    return detail::cat("the product budget max_applications = ", o.max_applications, " ran out (", applications,
                       " used, the next step needs ", cost, ")", where);
  return {};
}

}  // namespace transient_detail
}  // namespace aqm
