// Model description: construction, validation and the SPEC formulas that do not
// involve the state space (drop functions 2.4, SSMP 2.1, grid mapping 4).
#include "aqmchain/model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

namespace aqm {

namespace {

void require_finite(const std::string& param, double v) {
  if (!std::isfinite(v)) fail_param(param, "a finite number", v);
}

void require_prob(const std::string& param, double v) {
  require_finite(param, v);
  if (v < 0.0 || v > 1.0) fail_param(param, "in [0, 1]", v);
}

void require_nonneg(const std::string& param, double v) {
  require_finite(param, v);
  if (v < 0.0) fail_param(param, ">= 0", v);
}

void require_ordered(const std::string& lo_name, double lo, const std::string& hi_name, double hi) {
  require_nonneg(lo_name, lo);
  require_finite(hi_name, hi);
  if (!(lo < hi))
    throw ModelError(hi_name, detail::cat("parameter '", hi_name, "' must be > ", lo_name, " = ", lo,
                                          ", got ", hi));
}

}  // namespace

// ---------------------------------------------------------------- sources

Source Source::bernoulli(double alpha) {
  require_prob("source.alpha", alpha);
  Source s;
  s.kind = Kind::Bernoulli;
  s.matrix = {{1.0}};
  s.arrival = {alpha};
  return s;
}

Source Source::mmbp(std::vector<std::vector<double>> matrix, std::vector<double> arrival) {
  Source s;
  s.kind = Kind::MMBP;
  s.matrix = std::move(matrix);
  s.arrival = std::move(arrival);
  s.validate();
  return s;
}

Source Source::ssmp(int n, double q, double a) {
  if (n < 2) fail_param("source.n", ">= 2", n);
  require_finite("source.a", a);
  if (!(a > 0.0)) fail_param("source.a", "> 0", a);
  require_finite("source.q", q);
  if (!(q > 0.0 && q <= a)) fail_param("source.q", detail::cat("in (0, a] = (0, ", a, "]"), q);
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
  require_finite("source.a", a);
  if (!(a > 0.0)) fail_param("source.a", "> 0", a);
  require_finite("source.mean", mean);
  // pi_0(q) = q^(n-1) / (1 + q + ... + q^(n-1)), increasing in q, -> 0 as q -> 0.
  auto pi0 = [n](double q) {
    double s = 0.0, p = 1.0;
    for (int j = 0; j < n; ++j) {
      s += p;
      if (j < n - 1) p *= q;
    }
    return p / s;
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

void Source::validate(const std::string& prefix) const {
  const size_t n = arrival.size();
  if (n == 0) fail_param(prefix + ".arrival", "a non-empty list", "[]");
  if (matrix.size() != n)
    throw ModelError(prefix + ".matrix",
                     detail::cat("parameter '", prefix, ".matrix' must have ", n, " rows (one per arrival entry), got ",
                                 matrix.size()));
  for (size_t i = 0; i < n; ++i) {
    require_prob(detail::cat(prefix, ".arrival[", i, "]"), arrival[i]);
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
  // Grassmann-Taksar-Heyman elimination: subtraction-free, accurate to round-off
  // even for the SSMP's rates of a^-j (Stewart, Introduction to the Numerical
  // Solution of Markov Chains, sec. 2.7).
  const int n = states();
  std::vector<std::vector<double>> A = matrix;
  std::vector<double> out(n, 0.0);
  for (int k = n - 1; k >= 1; --k) {
    double s = 0.0;
    for (int j = 0; j < k; ++j) s += A[k][j];
    if (!(s > 0.0))
      throw ModelError("source.matrix",
                       detail::cat("parameter 'source.matrix' must be an irreducible modulator, got one whose state ", k,
                                   " cannot reach states 0..", k - 1));
    out[k] = s;
    for (int i = 0; i < k; ++i) {
      const double f = A[i][k] / s;
      if (f != 0.0)
        for (int j = 0; j < k; ++j) A[i][j] += f * A[k][j];
    }
  }
  std::vector<double> pi(n, 0.0);
  pi[0] = 1.0;
  double total = 1.0;
  for (int k = 1; k < n; ++k) {
    double acc = 0.0;
    for (int i = 0; i < k; ++i) acc += pi[i] * A[i][k];
    pi[k] = acc / out[k];
    total += pi[k];
  }
  for (auto& v : pi) v /= total;
  for (int k = 0; k < n; ++k)
    if (!(pi[k] > 0.0))
      throw ModelError("source.matrix", detail::cat("parameter 'source.matrix' must be an irreducible modulator, got ",
                                                    "stationary probability 0 for state ", k));
  return pi;
}

double Source::mean_rate() const {
  const auto pi = modulator_stationary();
  double r = 0.0;
  for (int i = 0; i < states(); ++i) r += pi[i] * arrival[i];
  return r;
}

std::string Source::describe() const {
  switch (kind) {
    case Kind::Bernoulli: return detail::cat("Bernoulli(alpha=", arrival[0], ")");
    case Kind::SSMP: return detail::cat("SSMP(n=", ssmp_n, ", q=", ssmp_q, ", a=", ssmp_a, ")");
    default: return detail::cat("MMBP(", states(), " states)");
  }
}

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
  // X_t = arrival indicator. c_0 = Var X = mean - mean^2; for k >= 1
  // c_k = sum_i pi_i lam_i (M^k (lam - mean 1))_i  (centred: no cancellation).
  std::vector<double> u(n), un(n), pl(n);
  for (int i = 0; i < n; ++i) {
    u[i] = s.arrival[i] - mean;
    pl[i] = pi[i] * s.arrival[i];
  }
  const long long mmax = 1LL << log2_hi;
  long double s1 = 0.0L, s2 = 0.0L;  // sum_{k<m} c_k, sum_{k<m} k c_k
  const long double c0 = mean - mean * mean;
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
      for (int j = 0; j < n; ++j) acc += s.matrix[i][j] * u[j];
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

// ---------------------------------------------------------------- service

Service Service::geometric(double mu) {
  Service s;
  s.mu = mu;
  s.validate();
  return s;
}

void Service::validate(const std::string& prefix) const {
  require_finite(prefix + ".mu", mu);
  if (!(mu > 0.0 && mu <= 1.0)) fail_param(prefix + ".mu", "in (0, 1]", mu);
}

// ---------------------------------------------------------------- drop functions

DropFunction DropFunction::none() { return DropFunction{}; }

#define AQM_MAKE(KIND, ...)  \
  DropFunction f;            \
  f.kind = Kind::KIND;       \
  __VA_ARGS__;               \
  f.validate();              \
  return f

DropFunction DropFunction::red(double min_th, double max_th, double p_max) {
  AQM_MAKE(RED, f.lo = min_th, f.hi = max_th, f.p_max = p_max);
}
DropFunction DropFunction::gentle_red(double min_th, double max_th, double p_max) {
  AQM_MAKE(GentleRED, f.lo = min_th, f.hi = max_th, f.p_max = p_max);
}
DropFunction DropFunction::dsred(double k_l, double k_h, double gamma) {
  AQM_MAKE(DSRED, f.lo = k_l, f.hi = k_h, f.gamma = gamma);
}
DropFunction DropFunction::sred(double min_th, double q_max, double seg) {
  AQM_MAKE(SRED, f.lo = min_th, f.hi = q_max, f.seg = seg);
}
DropFunction DropFunction::nlred(double min_th, double max_th, double p_max) {
  AQM_MAKE(NLRED, f.lo = min_th, f.hi = max_th, f.p_max = p_max);
}
DropFunction DropFunction::polynomial(double min_th, double max_th, std::vector<double> coeffs) {
  AQM_MAKE(Polynomial, f.lo = min_th, f.hi = max_th, f.coeffs = std::move(coeffs));
}
DropFunction DropFunction::table(std::vector<std::pair<double, double>> points) {
  AQM_MAKE(Table, f.points = std::move(points));
}
#undef AQM_MAKE

void DropFunction::validate(const std::string& p) const {
  switch (kind) {
    case Kind::None: return;
    case Kind::RED:
    case Kind::GentleRED:
      require_ordered(p + ".min_th", lo, p + ".max_th", hi);
      require_prob(p + ".p_max", p_max);
      return;
    case Kind::NLRED:
      require_ordered(p + ".min_th", lo, p + ".max_th", hi);
      require_prob(p + ".p_max", p_max);
      if (1.5 * p_max > 1.0) fail_param(p + ".p_max", "<= 2/3 (NLRED reaches 1.5 p_max at max_th)", p_max);
      return;
    case Kind::DSRED:
      require_ordered(p + ".k_l", lo, p + ".k_h", hi);
      require_prob(p + ".gamma", gamma);
      return;
    case Kind::SRED: {
      require_nonneg(p + ".min_th", lo);
      if (hi <= 0.0) return;  // q_max not resolved yet (defaults to the buffer)
      require_ordered(p + ".min_th", lo, p + ".q_max", hi);
      const double s = seg > 0.0 ? seg : 0.6 * hi;
      if (seg != 0.0) require_finite(p + ".seg", seg);
      if (!(s > lo && s < hi))
        fail_param(p + ".seg", detail::cat("in (min_th, q_max) = (", lo, ", ", hi, ")"), s);
      return;
    }
    case Kind::Polynomial:
      require_ordered(p + ".min_th", lo, p + ".max_th", hi);
      if (coeffs.empty()) fail_param(p + ".coeffs", "a non-empty list", "[]");
      for (size_t i = 0; i < coeffs.size(); ++i) require_finite(detail::cat(p, ".coeffs[", i, "]"), coeffs[i]);
      return;
    case Kind::Table:
      if (points.empty()) fail_param(p + ".points", "a non-empty list of [avg, p]", "[]");
      for (size_t i = 0; i < points.size(); ++i) {
        require_finite(detail::cat(p, ".points[", i, "][0]"), points[i].first);
        require_prob(detail::cat(p, ".points[", i, "][1]"), points[i].second);
        if (i > 0 && !(points[i].first > points[i - 1].first))
          fail_param(detail::cat(p, ".points[", i, "][0]"),
                     detail::cat("> the previous avg ", points[i - 1].first, " (strictly increasing)"),
                     points[i].first);
      }
      return;
  }
}

double DropFunction::operator()(double avg) const {
  switch (kind) {
    case Kind::None: return 0.0;
    case Kind::RED:
      if (avg < lo) return 0.0;
      if (avg < hi) return p_max * (avg - lo) / (hi - lo);
      return 1.0;
    case Kind::GentleRED:
      if (avg < lo) return 0.0;
      if (avg < hi) return p_max * (avg - lo) / (hi - lo);
      if (avg < 2.0 * hi) return p_max + (1.0 - p_max) * (avg - hi) / hi;
      return 1.0;
    case Kind::DSRED: {
      if (avg < lo) return 0.0;
      if (avg >= hi) return 1.0;
      const double km = 0.5 * (lo + hi);
      if (avg < km) return 2.0 * (1.0 - gamma) / (hi - lo) * (avg - lo);
      return 1.0 - gamma + 2.0 * gamma / (hi - lo) * (avg - km);
    }
    case Kind::SRED: {
      if (avg < lo) return 0.0;
      if (avg >= hi) return 1.0;
      const double s = seg > 0.0 ? seg : 0.6 * hi;
      if (avg < s) {
        const double x = (avg - lo) / (hi - lo);
        return x * x;
      }
      const double xs = (s - lo) / (hi - lo), pseg = xs * xs;
      const double x = (avg - s) / (hi - s);
      return pseg + (1.0 - pseg) * x * x;
    }
    case Kind::NLRED: {
      if (avg < lo) return 0.0;
      if (avg >= hi) return 1.0;
      const double x = (avg - lo) / (hi - lo);
      return 1.5 * p_max * x * x;
    }
    case Kind::Polynomial: {
      if (avg < lo) return 0.0;
      if (avg >= hi) return 1.0;
      const double x = (avg - lo) / (hi - lo);
      double v = 0.0;
      for (size_t k = coeffs.size(); k-- > 0;) v = v * x + coeffs[k];
      return std::clamp(v, 0.0, 1.0);
    }
    case Kind::Table: {
      if (avg <= points.front().first) return points.front().second;
      if (avg >= points.back().first) return points.back().second;
      const auto it = std::upper_bound(points.begin(), points.end(), avg,
                                       [](double a, const std::pair<double, double>& pt) { return a < pt.first; });
      const auto& b = *it;
      const auto& a = *(it - 1);
      return a.second + (b.second - a.second) * (avg - a.first) / (b.first - a.first);
    }
  }
  return 0.0;
}

std::string DropFunction::name() const {
  switch (kind) {
    case Kind::None: return "none";
    case Kind::RED: return "red";
    case Kind::GentleRED: return "gentle_red";
    case Kind::DSRED: return "dsred";
    case Kind::SRED: return "sred";
    case Kind::NLRED: return "nlred";
    case Kind::Polynomial: return "polynomial";
    case Kind::Table: return "table";
  }
  return "?";
}

// ---------------------------------------------------------------- AQM

void Aqm::validate(const std::string& p) const {
  require_finite(p + ".w", w);
  if (!(w > 0.0 && w <= 1.0)) fail_param(p + ".w", "in (0, 1]", w);
  require_prob(p + ".ecn", ecn);
  drop.validate(p);
}

// ---------------------------------------------------------------- grid

std::vector<double> GridSpec::resolve(int buffer) const {
  std::vector<double> g;
  if (mapping == Mapping::Flags) {
    // Seed 001: integer part plus four flags at (2i - 1)/8, i = 1..4; no flag = the integer.
    g.reserve(5 * static_cast<size_t>(buffer) + 1);
    for (int i = 0; i < buffer; ++i)
      for (double f : {0.0, 0.125, 0.375, 0.625, 0.875}) g.push_back(i + f);
    g.push_back(buffer);
  } else if (!points.empty()) {
    g = points;
  } else {
    const long long L = static_cast<long long>(k) * buffer;
    g.resize(static_cast<size_t>(L + 1));
    for (long long i = 0; i <= L; ++i) g[i] = static_cast<double>(i) / k;
  }
  return g;
}

void GridSpec::validate(int buffer, const std::string& p) const {
  if (mapping == Mapping::Flags) {
    if (!points.empty()) fail_param(p + ".points", "absent with mapping = \"flags\" (flags fix the grid)", "a list");
    return;
  }
  if (points.empty()) {
    if (k < 1) fail_param(p + ".k", ">= 1", k);
    if (static_cast<long long>(k) * buffer > 100000000LL)
      fail_param(p + ".k", detail::cat("<= 1e8 / buffer = ", 100000000LL / buffer), k);
    return;
  }
  if (points.size() < 2) fail_param(p + ".points", "at least 2 points (0 and the buffer)", points.size());
  if (points.front() != 0.0) fail_param(p + ".points[0]", "0", points.front());
  if (points.back() != buffer) fail_param(detail::cat(p, ".points[-1]"), detail::cat("the buffer size ", buffer), points.back());
  for (size_t i = 1; i < points.size(); ++i) {
    require_finite(detail::cat(p, ".points[", i, "]"), points[i]);
    if (!(points[i] > points[i - 1]))
      fail_param(detail::cat(p, ".points[", i, "]"), detail::cat("> ", points[i - 1], " (strictly increasing)"), points[i]);
  }
}

Grid::Grid(std::vector<double> points, Mapping mapping) : pts_(std::move(points)), mapping_(mapping) {
  if (pts_.size() < 2) fail_param("grid.points", "at least 2 points", pts_.size());
  if (mapping_ != Mapping::Flags) {
    const double h = pts_[1] - pts_[0];
    bool uniform = pts_[0] == 0.0;
    for (size_t i = 1; uniform && i < pts_.size(); ++i)
      uniform = std::abs(pts_[i] - static_cast<double>(i) * h) <= 1e-12 * std::max(1.0, pts_[i]);
    if (uniform) uniform_step_ = h;
  }
}

GridTarget Grid::map(double y) const {
  const int last = size() - 1;
  if (y <= pts_.front()) return {0, 1.0};
  if (y >= pts_.back()) return {last, 1.0};
  if (mapping_ == Mapping::Flags) {
    // integer part i, fractional part f: f == 0 -> i; f in [(j-1)/4, j/4) -> flag j (value i + (2j-1)/8).
    const double fl = std::floor(y);
    const double f = y - fl;
    const int i = static_cast<int>(fl);
    if (f <= 1e-12 * std::max(1.0, y)) return {5 * i, 1.0};
    const int j = std::min(3, static_cast<int>(f * 4.0));
    return {std::min(last, 5 * i + 1 + j), 1.0};
  }
  int i;
  if (uniform_step_ > 0.0) {
    i = std::min(last - 1, static_cast<int>(y / uniform_step_));
    while (i > 0 && pts_[i] > y) --i;
    while (i < last - 1 && pts_[i + 1] <= y) ++i;
  } else {
    i = static_cast<int>(std::upper_bound(pts_.begin(), pts_.end(), y) - pts_.begin()) - 1;
    i = std::clamp(i, 0, last - 1);
  }
  const double a = pts_[i], b = pts_[i + 1];
  double p_lo = (b - y) / (b - a);
  // Values within 1e-12 of a cell width from a grid point are taken as on it
  // (floating-point noise of (1 - w) g + w q must not create transitions of 1e-17).
  if (p_lo >= 1.0 - 1e-12) return {i, 1.0};
  if (p_lo <= 1e-12) return {i + 1, 1.0};
  if (mapping_ == Mapping::Nearest) return {p_lo >= 0.5 ? i : i + 1, 1.0};  // ties go to the lower point
  return {i, p_lo};
}

// ---------------------------------------------------------------- model

void Model::validate() const {
  if (buffer < 1) fail_param("model.buffer", ">= 1", buffer);
  if (buffer > 10000000) fail_param("model.buffer", "<= 1e7", buffer);
  source.validate("source");
  service.validate("service");
  aqm.validate("aqm");
  resolved_drop().validate("aqm");
  grid.validate(buffer, "grid");
}

DropFunction Model::resolved_drop() const {
  DropFunction d = aqm.drop;
  if (d.kind == DropFunction::Kind::SRED && d.hi <= 0.0) d.hi = buffer;
  return d;
}

std::string to_string(UpdateRule u) { return u == UpdateRule::PerSlot ? "per_slot" : "per_arrival"; }
std::string to_string(DropPolicy p) {
  return p == DropPolicy::Tail ? "tail" : p == DropPolicy::Front ? "front" : "random";
}
std::string to_string(Mapping m) { return m == Mapping::Split ? "split" : m == Mapping::Nearest ? "nearest" : "flags"; }

UpdateRule update_rule_from(const std::string& s) {
  if (s == "per_slot") return UpdateRule::PerSlot;
  if (s == "per_arrival") return UpdateRule::PerArrival;
  fail_param("aqm.update", "one of per_slot, per_arrival", "'" + s + "'");
}
DropPolicy drop_policy_from(const std::string& s) {
  if (s == "tail") return DropPolicy::Tail;
  if (s == "front") return DropPolicy::Front;
  if (s == "random") return DropPolicy::Random;
  fail_param("aqm.policy", "one of tail, front, random", "'" + s + "'");
}
Mapping mapping_from(const std::string& s) {
  if (s == "split") return Mapping::Split;
  if (s == "nearest") return Mapping::Nearest;
  if (s == "flags") return Mapping::Flags;
  fail_param("grid.mapping", "one of split, nearest, flags", "'" + s + "'");
}

}  // namespace aqm
