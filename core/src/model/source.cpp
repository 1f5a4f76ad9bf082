// Sources (SPEC 2.1): construction, validation, modulator stationary vector, Hurst report.
#include "aqmchain/model/source.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "model/validate.hpp"

namespace aqm {

using namespace detail;

// ---------------------------------------------------------------- sources

Source Source::bernoulli(double alpha) {
  require_prob("source.alpha", alpha);
  Source s;
  s.kind = Kind::Bernoulli;
  s.matrix = {{1.0}};
  s.arrival = {alpha};
  return s;
}

namespace {
/// A modulated source of the given kind, validated.
Source modulated(Source::Kind kind, std::vector<std::vector<double>> matrix, std::vector<double> arrival) {
  Source s;
  s.kind = kind;
  s.matrix = std::move(matrix);
  s.arrival = std::move(arrival);
  s.validate();
  return s;
}
}  // namespace

Source Source::mmbp(std::vector<std::vector<double>> matrix, std::vector<double> arrival) {
  return modulated(Kind::MMBP, std::move(matrix), std::move(arrival));
}

namespace {
void require_modulator_states(const std::string& param, int64_t n, int64_t max = kMaxModulatorStates) {
  if (n > max) fail_param(param, detail::cat("<= ", max, " (modulator states)"), n);
}
}  // namespace

Source Source::ssmp(int n, double q, double a) {
  if (n < 2) fail_param("source.n", ">= 2", n);
  require_finite("source.a", a);
  if (!(a > 0.0)) fail_param("source.a", "> 0", a);
  require_finite("source.q", q);
  if (!(q > 0.0 && q <= a)) fail_param("source.q", detail::cat("in (0, a] = (0, ", a, "]"), q);
  // Underflow first (it explains the bound better when both apply): M[0][j] = a^-j and
  // M[j][0] = (q/a)^j must be positive doubles, else state j is unreachable (or absorbing).
  const int jmax = std::min(n - 1, kMaxSsmpStates);
  for (int j = 1; j <= jmax; ++j)
    if (!(std::pow(a, -j) > 0.0) || !(std::pow(q / a, j) > 0.0))
      throw ModelError("source.n",
                       detail::cat("parameter 'source.n' must be <= ", j, " for a = ", a, ", q = ", q,
                                   ": the modulator entries ", std::pow(a, -j) > 0.0 ? "(q/a)^j" : "a^-j",
                                   " underflow to 0 in double precision for j >= ", j,
                                   ", so states ", j, "..n-1 would be unreachable; got n = ", n));
  require_modulator_states("source.n", n, kMaxSsmpStates);
  double out = 0.0;
  for (int j = 1; j < n; ++j) out += std::pow(a, -j);
  if (out > 1.0 + 1e-15)
    throw ModelError("source.a", detail::cat("parameter 'source.a' must satisfy sum_{j=1..n-1} a^-j <= 1 ",
                                             "(n = ", n, "), got a = ", a, " with sum ", out));
  Source s;
  s.kind = Kind::SSMP;
  s.ssmp_n = n;
  s.ssmp_q = q;
  s.ssmp_a = a;
  s.matrix.assign(n, std::vector<double>(n, 0.0));
  s.arrival.assign(n, 0.0);
  s.arrival[0] = 1.0;
  s.matrix[0][0] = std::max(0.0, 1.0 - out);
  for (int j = 1; j < n; ++j) {
    s.matrix[0][j] = std::pow(a, -j);
    const double back = std::pow(q / a, j);
    s.matrix[j][0] = back;
    s.matrix[j][j] = 1.0 - back;
  }
  return s;
}

double ssmp_q_for_mean(double mean, double a, int n) {
  if (n < 2) fail_param("source.n", ">= 2", n);
  require_modulator_states("source.n", n, kMaxSsmpStates);
  require_finite("source.a", a);
  if (!(a > 0.0)) fail_param("source.a", "> 0", a);
  require_finite("source.mean", mean);
  // pi_0(q) = q^(n-1) / (1 + q + ... + q^(n-1)), increasing in q, -> 0 as q -> 0.
  // Summed in the direction that cannot overflow: for q >= 1 as 1 / sum_j q^-j
  // (terms <= 1, underflow harmless), for q < 1 as q^(n-1) / sum_j q^j.  O(n).
  auto pi0 = [n](double q) {
    const double r = q >= 1.0 ? 1.0 / q : q;
    double s = 0.0, p = 1.0;
    for (int j = 0; j < n; ++j) {
      s += p;
      if (j < n - 1) p *= r;
    }
    return q >= 1.0 ? 1.0 / s : p / s;
  };
  const double top = pi0(a);
  if (!(mean > 0.0 && mean <= top))
    fail_param("source.mean", detail::cat("in (0, pi_0(q = a)] = (0, ", top, "] for a = ", a, ", n = ", n), mean);
  double lo = std::log(1e-300) / 4, hi = std::log(a);
  for (int it = 0; it < 300 && hi - lo > 1e-16 * std::max(1.0, std::abs(hi)); ++it) {
    const double mid = 0.5 * (lo + hi);
    (pi0(std::exp(mid)) < mean ? lo : hi) = mid;
  }
  return std::exp(0.5 * (lo + hi));
}

Source Source::ssmp_from_mean(double mean, double a, int n) { return ssmp(n, ssmp_q_for_mean(mean, a, n), a); }

// ---------------------------------------------------------------- continuous-time sources (SPEC 6)

namespace {

/// Rows of a generator must sum to 0 with off-diagonals >= 0; rates >= 0.
void validate_continuous(const Source& s, const std::string& prefix) {
  const size_t n = s.arrival.size();
  const std::string rates = prefix + (s.kind == Source::Kind::Poisson ? ".rate" : ".rates");
  if (n == 0) fail_param(rates, "a non-empty list", "[]");
  if (n > static_cast<size_t>(kMaxModulatorStates))
    fail_param(rates, detail::cat("at most ", kMaxModulatorStates, " modulator states"), n);
  if (s.matrix.size() != n)
    throw ModelError(prefix + ".generator", detail::cat("parameter '", prefix, ".generator' must have ", n,
                                                         " rows (one per rate), got ", s.matrix.size()));
  for (size_t i = 0; i < n; ++i) {
    const std::string ri = n == 1 && s.kind == Source::Kind::Poisson ? rates : detail::cat(rates, "[", i, "]");
    require_finite(ri, s.arrival[i]);
    if (s.arrival[i] < 0.0) fail_param(ri, ">= 0", s.arrival[i]);
    if (s.arrival[i] > 1e12) fail_param(ri, "<= 1e12", s.arrival[i]);
    if (s.matrix[i].size() != n)
      throw ModelError(prefix + ".generator", detail::cat("parameter '", prefix, ".generator' must be square ", n,
                                                           " x ", n, ", row ", i, " has ", s.matrix[i].size(),
                                                           " entries"));
    long double sum = 0.0L, scale = 0.0L;
    for (size_t j = 0; j < n; ++j) {
      const std::string gij = detail::cat(prefix, ".generator[", i, "][", j, "]");
      require_finite(gij, s.matrix[i][j]);
      if (j != i && s.matrix[i][j] < 0.0) fail_param(gij, ">= 0 (an off-diagonal rate)", s.matrix[i][j]);
      if (std::abs(s.matrix[i][j]) > 1e12) fail_param(gij, "of magnitude <= 1e12", s.matrix[i][j]);
      sum += s.matrix[i][j];
      scale += std::abs(s.matrix[i][j]);
    }
    if (std::abs(static_cast<double>(sum)) > 1e-12 * std::max<double>(1.0, static_cast<double>(scale)))
      fail_param(detail::cat(prefix, ".generator[", i, "]"), "a generator row (sum 0 within 1e-12)",
                 detail::cat("row sum ", static_cast<double>(sum)));
  }
  (void)s.modulator_stationary();  // throws if not irreducible
}

/// The uniformised modulator P = I + Q / q (q = max |Q_ii|): same stationary vector.
Source uniformised(const Source& s) {
  Source u;
  u.kind = Source::Kind::MMBP;
  u.arrival.assign(s.arrival.size(), 0.0);
  u.matrix = s.matrix;
  double q = 0.0;
  for (size_t i = 0; i < s.matrix.size(); ++i) q = std::max(q, -s.matrix[i][i]);
  for (size_t i = 0; i < u.matrix.size(); ++i)
    for (size_t j = 0; j < u.matrix.size(); ++j)
      u.matrix[i][j] = (i == j ? 1.0 : 0.0) + (q > 0 ? s.matrix[i][j] / q : 0.0);
  return u;
}

}  // namespace

Source Source::poisson(double rate) {
  return modulated(Kind::Poisson, {{0.0}}, {rate});
}

Source Source::mmpp(std::vector<std::vector<double>> generator, std::vector<double> rates) {
  return modulated(Kind::MMPP, std::move(generator), std::move(rates));
}

Source Source::batch_mmbp(std::vector<std::vector<double>> matrix, std::vector<std::vector<double>> counts) {
  Source s;
  s.kind = Kind::Batch;
  s.matrix = std::move(matrix);
  s.batch = std::move(counts);
  s.arrival.assign(s.batch.size(), 0.0);
  for (size_t i = 0; i < s.batch.size(); ++i)
    for (size_t k = 1; k < s.batch[i].size(); ++k) s.arrival[i] += static_cast<double>(k) * s.batch[i][k];
  s.validate();
  return s;
}

std::vector<std::vector<double>> Source::count_pmf() const {
  if (!batch.empty()) return batch;  // any kind with a count law (not only Kind::Batch)
  std::vector<std::vector<double>> out;
  for (double a : arrival) out.push_back({1.0 - a, a});
  return out;
}

namespace {
/// The batch rows: one per modulator state, of equal length B + 1 (1 <= B <= kMaxBatch),
/// probabilities summing to 1 within 1e-12.
void validate_batch(const Source& s, const std::string& prefix) {
  const std::string counts = prefix + ".counts";
  const size_t n = s.batch.size();
  if (n == 0) fail_param(counts, "a non-empty list (one pmf per modulator state)", "[]");
  if (s.matrix.size() != n)
    throw ModelError(prefix + ".matrix", detail::cat("parameter '", prefix, ".matrix' must have ", n,
                                                     " rows (one per row of ", counts, "), got ", s.matrix.size()));
  const size_t len = s.batch[0].size();
  if (len < 2 || len > static_cast<size_t>(kMaxBatch) + 1)
    fail_param(counts + "[0]", detail::cat("a pmf over k = 0..B with 1 <= B <= ", kMaxBatch, " (2 to ", kMaxBatch + 1,
                                           " entries)"),
               detail::cat(len, " entries"));
  for (size_t i = 0; i < n; ++i) {
    const std::string ri = detail::cat(counts, "[", i, "]");
    if (s.batch[i].size() != len)
      fail_param(ri, detail::cat(len, " entries (the length of ", counts, "[0]: every state has the same B)"),
                 detail::cat(s.batch[i].size(), " entries"));
    double sum = 0.0;
    for (size_t k = 0; k < len; ++k) {
      require_prob(detail::cat(ri, "[", k, "]"), s.batch[i][k]);
      sum += s.batch[i][k];
    }
    if (std::abs(sum - 1.0) > 1e-12) fail_param(ri, "a pmf (sum 1 within 1e-12)", detail::cat("sum ", sum));
  }
}
}  // namespace

void Source::validate(const std::string& prefix) const {
  if (continuous()) return validate_continuous(*this, prefix);
  if (kind == Kind::Batch || !batch.empty()) validate_batch(*this, prefix);
  const size_t n = arrival.size();
  if (n == 0) fail_param(prefix + ".arrival", "a non-empty list", "[]");
  if (kind == Kind::SSMP)
    require_modulator_states(prefix + ".n", static_cast<int64_t>(n), kMaxSsmpStates);
  else
    require_modulator_states(prefix + ".arrival", static_cast<int64_t>(n));
  if (matrix.size() != n)
    throw ModelError(prefix + ".matrix",
                     detail::cat("parameter '", prefix, ".matrix' must have ", n, " rows (one per arrival entry), got ",
                                 matrix.size()));
  for (size_t i = 0; i < n; ++i) {
    if (batch.empty()) require_prob(detail::cat(prefix, ".arrival[", i, "]"), arrival[i]);
    if (matrix[i].size() != n)
      throw ModelError(prefix + ".matrix", detail::cat("parameter '", prefix, ".matrix' must be square ", n, " x ",
                                                       n, ", row ", i, " has ", matrix[i].size(), " entries"));
    double sum = 0.0;
    for (size_t j = 0; j < n; ++j) {
      require_prob(detail::cat(prefix, ".matrix[", i, "][", j, "]"), matrix[i][j]);
      sum += matrix[i][j];
    }
    if (std::abs(sum - 1.0) > 1e-12)
      fail_param(detail::cat(prefix, ".matrix[", i, "]"), "a stochastic row (sum 1 within 1e-12)",
                 detail::cat("row sum ", sum));
  }
  (void)modulator_stationary();  // throws if not unique
}

std::vector<double> Source::modulator_stationary() const {
  if (continuous()) return uniformised(*this).modulator_stationary();
  const int n = states();
  require_modulator_states(kind == Kind::SSMP ? "source.n" : "source.matrix", n,
                           kind == Kind::SSMP ? kMaxSsmpStates : kMaxModulatorStates);
  if (static_cast<int>(matrix.size()) != n)
    throw ModelError("source.matrix", detail::cat("parameter 'source.matrix' must have ", n, " rows, got ", matrix.size()));
  for (const auto& row : matrix)
    if (static_cast<int>(row.size()) != n)
      throw ModelError("source.matrix", detail::cat("parameter 'source.matrix' must be square ", n, " x ", n));
  // 1. Irreducibility on the graph of the positive entries (a subnormal entry is an
  //    edge): every state reaches 0 and is reached from 0.  O(n^2).
  for (int dir = 0; dir < 2; ++dir) {
    std::vector<char> seen(n, 0);
    std::vector<int> todo{0};
    seen[0] = 1;
    while (!todo.empty()) {
      const int v = todo.back();
      todo.pop_back();
      for (int u = 0; u < n; ++u)
        if (!seen[u] && (dir == 0 ? matrix[v][u] : matrix[u][v]) > 0.0) {
          seen[u] = 1;
          todo.push_back(u);
        }
    }
    for (int k = 0; k < n; ++k)
      if (!seen[k])
        throw ModelError("source.matrix",
                         detail::cat("parameter 'source.matrix' must be an irreducible modulator, got one where state ",
                                     dir == 0 ? 0 : k, " cannot reach state ", dir == 0 ? k : 0,
                                     " (no path of positive entries)"));
  }
  // 2. Grassmann-Taksar-Heyman elimination: subtraction-free, accurate to round-off
  //    even for the SSMP's rates of a^-j (Stewart, Introduction to the Numerical
  //    Solution of Markov Chains, sec. 2.7).  The update is A_ij += A_ik (A_kj / s) with
  //    A_kj / s <= 1, so a tiny s (subnormal entries) cannot overflow it; rows with
  //    A_ik = 0 are skipped (the SSMP's elimination is O(n^2)).
  std::vector<std::vector<double>> A = matrix;
  std::vector<double> out(n, 0.0), ratio(n, 0.0);
  for (int k = n - 1; k >= 1; --k) {
    double s = 0.0;
    for (int j = 0; j < k; ++j) s += A[k][j];
    if (!(s > 0.0))
      throw ModelError("source.matrix",
                       detail::cat("parameter 'source.matrix' has entries too small for double precision: the ",
                                   "elimination of state ", k, " underflows (its path back to states 0..", k - 1,
                                   " has probability below 1e-308)"));
    out[k] = s;
    for (int j = 0; j < k; ++j) ratio[j] = A[k][j] / s;
    for (int i = 0; i < k; ++i) {
      const double f = A[i][k];
      if (f != 0.0)
        for (int j = 0; j < k; ++j) A[i][j] += f * ratio[j];
    }
  }
  // 3. Back substitution pi_k = sum_i pi_i A_ik / out_k, rescaled so that the largest
  //    entry so far is 1 (pi_k / pi_0 can exceed the double range when out_k is tiny).
  std::vector<double> pi(n, 0.0);
  pi[0] = 1.0;
  for (int k = 1; k < n; ++k) {
    double acc = 0.0;
    for (int i = 0; i < k; ++i) acc += pi[i] * A[i][k];  // <= k: pi <= 1, A_ik <= 1
    if (acc > out[k]) {  // pi_k > 1: scale the others down by out_k / acc instead
      const double c = out[k] / acc;
      for (int i = 0; i < k; ++i) pi[i] *= c;
      pi[k] = 1.0;
    } else {
      pi[k] = acc / out[k];
    }
  }
  long double total = 0.0L;
  for (double v : pi) total += v;
  for (auto& v : pi) v = static_cast<double>(v / total);
  for (int k = 0; k < n; ++k)
    if (!(pi[k] > 0.0))
      throw ModelError("source.matrix",
                       detail::cat("parameter 'source.matrix' has entries too small for double precision: the ",
                                   "stationary probability of modulator state ", k,
                                   " underflows to 0 (below about 1e-308 of the most probable state)"));
  return pi;
}

double Source::mean_rate() const {
  const auto pi = modulator_stationary();
  double r = 0.0;
  for (int i = 0; i < states(); ++i) r += pi[i] * arrival[i];
  return r;
}

// ---------------------------------------------------------------- the registry

namespace {

ParamSpec real(std::string name, std::string bound, std::string doc, bool required = true) {
  return ParamSpec{std::move(name), ParamType::Real, required, 0.0, std::move(bound), std::move(doc)};
}
ParamSpec typed(std::string name, ParamType type, std::string bound, std::string doc) {
  return ParamSpec{std::move(name), type, true, 0.0, std::move(bound), std::move(doc)};
}
double num(const ParamValues& v, const char* name) { return param_value(v, name).real; }

Source make_bernoulli(const ParamValues& v) { return Source::bernoulli(num(v, "alpha")); }
Source make_mmbp(const ParamValues& v) {
  return Source::mmbp(param_value(v, "matrix").matrix, param_value(v, "arrival").list);
}
Source make_ssmp(const ParamValues& v) {
  const ParamValue &q = param_value(v, "q"), &mean = param_value(v, "mean");
  if (q.given == mean.given)
    throw ModelError("source.q", "source kind 'ssmp' needs exactly one of 'source.q' and 'source.mean'");
  const int n = static_cast<int>(param_value(v, "n").integer);
  return q.given ? Source::ssmp(n, q.real, num(v, "a")) : Source::ssmp_from_mean(mean.real, num(v, "a"), n);
}
Source make_poisson(const ParamValues& v) { return Source::poisson(num(v, "rate")); }
Source make_mmpp(const ParamValues& v) {
  return Source::mmpp(param_value(v, "generator").matrix, param_value(v, "rates").list);
}
Source make_batch(const ParamValues& v) {
  const ParamValue& m = param_value(v, "matrix");
  return Source::batch_mmbp(m.given ? m.matrix : std::vector<std::vector<double>>{{1.0}},
                            param_value(v, "counts").matrix);
}

ParamValues args_first(const Source& s, const char* name) { return {{name, ParamValue::of(s.arrival[0])}}; }
ParamValues args_bernoulli(const Source& s) { return args_first(s, "alpha"); }
ParamValues args_poisson(const Source& s) { return args_first(s, "rate"); }
ParamValues args_mmbp(const Source& s) {
  return {{"matrix", ParamValue::of(s.matrix)}, {"arrival", ParamValue::of(s.arrival)}};
}
ParamValues args_mmpp(const Source& s) {
  return {{"generator", ParamValue::of(s.matrix)}, {"rates", ParamValue::of(s.arrival)}};
}
ParamValues args_batch(const Source& s) {
  ParamValues v;
  if (s.states() > 1) v.push_back({"matrix", ParamValue::of(s.matrix)});
  v.push_back({"counts", ParamValue::of(s.batch)});
  return v;
}
ParamValues args_ssmp(const Source& s) {
  return {{"n", ParamValue::of_int(s.ssmp_n)}, {"q", ParamValue::of(s.ssmp_q)}, {"a", ParamValue::of(s.ssmp_a)}};
}

std::string d_bernoulli(const Source& s) { return detail::cat("Bernoulli(alpha=", s.arrival[0], ")"); }
std::string d_mmbp(const Source& s) { return detail::cat("MMBP(", s.states(), " states)"); }
std::string d_ssmp(const Source& s) { return detail::cat("SSMP(n=", s.ssmp_n, ", q=", s.ssmp_q, ", a=", s.ssmp_a, ")"); }
std::string d_poisson(const Source& s) { return detail::cat("Poisson(rate=", s.arrival[0], ")"); }
std::string d_mmpp(const Source& s) { return detail::cat("MMPP(", s.states(), " states)"); }
std::string d_batch(const Source& s) {
  if (s.states() > 1) return detail::cat("batch MMBP(", s.states(), " states, B=", s.max_batch(), ")");
  std::string pmf;
  for (double p : s.batch[0]) pmf += detail::cat(pmf.empty() ? "" : ", ", p);
  return detail::cat("batch Bernoulli(counts=[", pmf, "])");
}

/// The registry: one entry per kind, in the order of Source::Kind.
std::vector<SourceKindSpec> make_source_kinds() {
  using K = Source::Kind;
  using T = ParamType;
  ParamSpec ssmp_n = typed("n", T::Int, detail::cat("in [2, ", kMaxSsmpStates, "]"), "number of modulator states");
  ssmp_n.int_lo = 2, ssmp_n.int_hi = kMaxSsmpStates;
  std::vector<SourceKindSpec> t;
  t.emplace_back(K::Bernoulli, "bernoulli", "Bernoulli arrivals: one arrival per slot with probability alpha (the papers' \"geometric source\").", false,
                 std::vector{real("alpha", "in [0, 1]", "arrival probability per slot")}, make_bernoulli,
                 args_bernoulli, d_bernoulli);
  t.emplace_back(K::MMBP, "mmbp",
                 "Markov-modulated Bernoulli: the modulator moves (row-stochastic matrix), then a packet arrives with "
                 "probability arrival[m].", false,
                 std::vector{typed("matrix", T::RealMatrix,
                                   detail::cat("n x n, rows sum to 1 within 1e-12, irreducible, at most ", kMaxModulatorStates, " states"),
                                   "the modulator's transition matrix"),
                             typed("arrival", T::RealList, "in [0, 1], one per modulator state",
                                   "arrival probability per slot in each modulator state")},
                 make_mmbp, args_mmbp, d_mmbp);
  t.emplace_back(K::SSMP, "ssmp", "The self-similar MMBP of Robert and Le Boudec (\"New models for pseudo self-similar traffic\"); `mean` "
                 "solves pi_0(q) = mean for q.", false,
                 std::vector{ssmp_n, real("q", "in (0, a]; exactly one of q and mean", "the parameter q", false),
                             real("a", "> 0, sum_{j=1..n-1} a^-j <= 1", "the parameter a"),
                             real("mean", "in (0, pi_0(q = a)]; exactly one of q and mean",
                                  "the mean arrival rate (q solved for)", false)},
                 make_ssmp, args_ssmp, d_ssmp);
  t.emplace_back(K::Poisson, "poisson", "Poisson arrivals (continuous time), rate per unit time.", true,
                 std::vector{real("rate", "in [0, 1e12]", "arrival rate per unit time")}, make_poisson, args_poisson,
                 d_poisson);
  t.emplace_back(K::MMPP, "mmpp",
                 "Markov-modulated Poisson process (continuous time): arrivals at rate rates[m] while the modulator "
                 "(generator) is in m.", true,
                 std::vector{typed("generator", T::RealMatrix,
                                   detail::cat("n x n, off-diagonals >= 0, rows sum to 0 within 1e-12, irreducible, at most ",
                                               kMaxModulatorStates, " states"),
                                   "the modulator's generator"),
                             typed("rates", T::RealList, "in [0, 1e12], one per modulator state",
                                   "arrival rate in each modulator state")},
                 make_mmpp, args_mmpp, d_mmpp);
  ParamSpec batch_matrix = typed("matrix", T::RealMatrix,
                                 detail::cat("n x n, rows sum to 1 within 1e-12, irreducible, at most ",
                                             kMaxModulatorStates, " states; default [[1]] (batch Bernoulli)"),
                                 "the modulator's transition matrix");
  batch_matrix.required = false;
  t.emplace_back(K::Batch, "batch",
                 "Batch arrivals: the modulator moves (row-stochastic matrix), then k = 0..B packets arrive with "
                 "probability counts[m][k]; with the plain EWMA queue only (no stateful AQM, traffic classes or REDwM).", false,
                 std::vector{batch_matrix,
                             typed("counts", T::RealMatrix,
                                   detail::cat("one row per modulator state (a flat list: one state), rows of equal length "
                                               "B + 1 (1 <= B <= ", kMaxBatch, "), entries in [0, 1] summing to 1 within 1e-12"),
                                   "per modulator state the pmf of the number of arrivals in a slot")},
                 make_batch, args_batch, d_batch);
  for (size_t i = 0; i < t.size(); ++i)
    if (static_cast<size_t>(t[i].kind) != i)
      throw std::logic_error("source registry: entry " + t[i].name + " out of the order of Source::Kind");
  return t;
}

}  // namespace

SourceKindSpec::SourceKindSpec(Source::Kind kind_, std::string name_, std::string doc_, bool continuous_,
                               std::vector<ParamSpec> params_, Make make_, Args args_, Describe describe_)
    : kind(kind_), name(std::move(name_)), doc(std::move(doc_)), continuous(continuous_), params(std::move(params_)),
      make(make_), args(args_), describe(describe_) {
  if (!make || !args || !describe) throw std::logic_error("source registry: " + name + " needs make, args, describe");
}

const std::vector<SourceKindSpec>& source_kinds() {
  static const std::vector<SourceKindSpec> table = make_source_kinds();
  return table;
}

const SourceKindSpec& source_kind(Source::Kind kind) {
  const auto& t = source_kinds();
  const auto i = static_cast<size_t>(kind);
  if (i >= t.size()) throw std::logic_error(detail::cat("source registry: no entry for Source::Kind ", i));
  return t[i];
}

const SourceKindSpec& source_kind(const std::string& name, const std::string& param) {
  std::string all;
  for (const auto& k : source_kinds()) {
    if (k.name == name) return k;
    all += (all.empty() ? "" : ", ") + k.name;
  }
  fail_param(param, "one of " + all, "'" + name + "'");
}

Source Source::make(const std::string& kind_name, const ParamValues& values) {
  const SourceKindSpec& spec = source_kind(kind_name);
  for (const auto& [name, v] : values) {
    bool known = false;
    for (const auto& ps : spec.params) known = known || ps.name == name;
    if (!known && v.given) {
      std::vector<std::string> names;
      for (const auto& ps : spec.params) names.push_back(ps.name);
      fail_param("source." + name, "absent for source kind '" + kind_name + "' (it takes " + or_list(names) + ")",
                 "a value");
    }
  }
  for (const auto& ps : spec.params)
    if (ps.required && !param_value(values, ps.name).given)
      fail_param("source." + ps.name, "given for source kind '" + kind_name + "'", "nothing");
  return spec.make(values);
}

ParamValues Source::args() const { return source_kind(kind).args(*this); }

std::string Source::kind_name() const { return source_kind(kind).name; }

bool Source::continuous() const { return source_kind(kind).continuous; }

std::string source_kinds_named(bool continuous) {
  std::vector<std::string> names;
  for (const auto& k : source_kinds())
    if (k.continuous == continuous) names.push_back(k.name);
  return or_list(names);
}

std::string Source::describe() const { return source_kind(kind).describe(*this); }

HurstReport hurst(const Source& s, int log2_lo, int log2_hi) {
  if (log2_lo < 0) fail_param("log2_lo", ">= 0", log2_lo);
  if (log2_hi <= log2_lo || log2_hi > 30) fail_param("log2_hi", detail::cat("in (log2_lo, 30] = (", log2_lo, ", 30]"), log2_hi);
  HurstReport r;
  if (s.kind == Source::Kind::SSMP && s.ssmp_q > 1.0 && s.ssmp_a > s.ssmp_q * s.ssmp_q) {
    r.asymptotic_valid = true;
    r.asymptotic = 1.0 - std::log(s.ssmp_q) / (2.0 * std::log(s.ssmp_a / s.ssmp_q));
  }
  const int n = s.states();
  const auto pi = s.modulator_stationary();
  const double mean = s.mean_rate();
  // X_t = arrivals in slot t (an indicator but for batch sources). c_0 = Var X = mean - mean^2; for k >= 1
  // c_k = sum_i pi_i lam_i (M^k (lam - mean 1))_i  (centred: no cancellation).
  // M's nonzeros per row: the SSMP has 3n of them, so a lag costs O(n), not O(n^2).
  std::vector<std::vector<std::pair<int, double>>> rows(n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (s.matrix[i][j] != 0.0) rows[i].push_back({j, s.matrix[i][j]});
  std::vector<double> u(n), un(n), pl(n);
  for (int i = 0; i < n; ++i) {
    u[i] = s.arrival[i] - mean;
    pl[i] = pi[i] * s.arrival[i];
  }
  const long long mmax = 1LL << log2_hi;
  long double s1 = 0.0L, s2 = 0.0L;  // sum_{k<m} c_k, sum_{k<m} k c_k
  // (a batch source: c_0 = sum_i pi_i E[X^2 | i] - mean^2)
  long double c0 = mean - mean * mean;
  if (!s.batch.empty()) {
    long double second = 0.0L;
    for (int i = 0; i < n; ++i)
      for (size_t k = 1; k < s.batch[static_cast<size_t>(i)].size(); ++k)
        second += static_cast<long double>(pi[i]) * static_cast<long double>(k * k) * s.batch[static_cast<size_t>(i)][k];
    c0 = second - static_cast<long double>(mean) * mean;
  }
  long long next_level = 1LL << log2_lo;
  for (long long k = 1; k <= mmax; ++k) {
    if (k == next_level) {  // level m = k uses lags 1..m-1
      const long double m = static_cast<long double>(k);
      const long double var = (m * c0 + 2.0L * (m * s1 - s2)) / (m * m);
      r.levels.push_back(k);
      r.variances.push_back(static_cast<double>(var));
      next_level *= 2;
    }
    if (k == mmax) break;
    for (int i = 0; i < n; ++i) {
      double acc = 0.0;
      for (const auto& [j, v] : rows[i]) acc += v * u[j];
      un[i] = acc;
    }
    u.swap(un);
    long double ck = 0.0L;
    for (int i = 0; i < n; ++i) ck += pl[i] * u[i];
    s1 += ck;
    s2 += static_cast<long double>(k) * ck;
  }
  // Least-squares slope of log Var against log m: slope = -beta, H = 1 - beta / 2.
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double cnt = static_cast<double>(r.levels.size());
  for (size_t i = 0; i < r.levels.size(); ++i) {
    if (!(r.variances[i] > 0.0)) throw ModelError("source", "variance-time estimate needs a non-degenerate source");
    const double x = std::log(static_cast<double>(r.levels[i])), y = std::log(r.variances[i]);
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double slope = (cnt * sxy - sx * sy) / (cnt * sxx - sx * sx);
  r.variance_time = 1.0 + slope / 2.0;
  return r;
}

}  // namespace aqm
