// Drop functions (SPEC 2.4).
#include "aqmchain/model/drop.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "model/validate.hpp"

namespace aqm {

using namespace detail;

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

namespace {

// ---------------------------------------------------------------- the formulas, one per kind

double p_none(const DropFunction&, double) { return 0.0; }

double p_red(const DropFunction& f, double avg) {
  if (avg < f.lo) return 0.0;
  if (avg < f.hi) return f.p_max * (avg - f.lo) / (f.hi - f.lo);
  return 1.0;
}

double p_gentle_red(const DropFunction& f, double avg) {
  if (avg < f.lo) return 0.0;
  if (avg < f.hi) return f.p_max * (avg - f.lo) / (f.hi - f.lo);
  if (avg < 2.0 * f.hi) return f.p_max + (1.0 - f.p_max) * (avg - f.hi) / f.hi;
  return 1.0;
}

double p_dsred(const DropFunction& f, double avg) {
  const double lo = f.lo, hi = f.hi, gamma = f.gamma;
  if (avg < lo) return 0.0;
  if (avg >= hi) return 1.0;
  const double km = 0.5 * (lo + hi);
  if (avg < km) return 2.0 * (1.0 - gamma) / (hi - lo) * (avg - lo);
  return 1.0 - gamma + 2.0 * gamma / (hi - lo) * (avg - km);
}

double p_sred(const DropFunction& f, double avg) {
  const double lo = f.lo, hi = f.hi;
  if (avg < lo) return 0.0;
  if (avg >= hi) return 1.0;
  const double s = f.seg > 0.0 ? f.seg : 0.6 * hi;
  if (avg < s) {
    const double x = (avg - lo) / (hi - lo);
    return x * x;
  }
  const double xs = (s - lo) / (hi - lo), pseg = xs * xs;
  const double x = (avg - s) / (hi - s);
  return pseg + (1.0 - pseg) * x * x;
}

double p_nlred(const DropFunction& f, double avg) {
  if (avg < f.lo) return 0.0;
  if (avg >= f.hi) return 1.0;
  const double x = (avg - f.lo) / (f.hi - f.lo);
  return 1.5 * f.p_max * x * x;
}

double p_gentle_nlred(const DropFunction& f, double avg) {
  if (avg < f.lo) return 0.0;
  if (avg < f.hi) {
    const double x = (avg - f.lo) / (f.hi - f.lo);
    return 1.5 * f.p_max * x * x;
  }
  if (avg < 2.0 * f.hi) return f.p_max + (1.0 - f.p_max) * (avg - f.hi) / f.hi;
  return 1.0;
}

double p_polynomial(const DropFunction& f, double avg) {
  if (avg < f.lo) return 0.0;
  if (avg >= f.hi) return 1.0;
  const double x = (avg - f.lo) / (f.hi - f.lo);
  double v = 0.0;
  for (size_t k = f.coeffs.size(); k-- > 0;) v = v * x + f.coeffs[k];
  return std::clamp(v, 0.0, 1.0);
}

double p_table(const DropFunction& f, double avg) {
  const auto& points = f.points;
  if (avg <= points.front().first) return points.front().second;
  if (avg >= points.back().first) return points.back().second;
  const auto it = std::upper_bound(points.begin(), points.end(), avg,
                                   [](double a, const std::pair<double, double>& pt) { return a < pt.first; });
  const auto& b = *it;
  const auto& a = *(it - 1);
  return a.second + (b.second - a.second) * (avg - a.first) / (b.first - a.first);
}

// ---------------------------------------------------------------- breakpoints, one per kind

std::vector<double> bp_none(const DropFunction&, double) { return {}; }
std::vector<double> bp_thresholds(const DropFunction& f, double) { return {f.lo, f.hi}; }
std::vector<double> bp_gentle_red(const DropFunction& f, double) { return {f.lo, f.hi, 2.0 * f.hi}; }
std::vector<double> bp_dsred(const DropFunction& f, double) { return {f.lo, 0.5 * (f.lo + f.hi), f.hi}; }
std::vector<double> bp_sred(const DropFunction& f, double buffer) {
  const double top = f.hi > 0.0 ? f.hi : buffer;  // q_max 0: the buffer
  return {f.lo, f.seg > 0.0 ? f.seg : 0.6 * top, top};
}
std::vector<double> bp_table(const DropFunction& f, double) {
  std::vector<double> b;
  for (const auto& pt : f.points) b.push_back(pt.first);
  return b;
}

// ---------------------------------------------------------------- checks, one per kind

void v_none(const DropFunction&, const std::string&) {}

void v_red(const DropFunction& f, const std::string& p) {
  require_ordered(p + ".min_th", f.lo, p + ".max_th", f.hi);
  require_prob(p + ".p_max", f.p_max);
}

void v_nlred(const DropFunction& f, const std::string& p) {
  v_red(f, p);
  if (1.5 * f.p_max > 1.0) fail_param(p + ".p_max", "<= 2/3 (NLRED reaches 1.5 p_max at max_th)", f.p_max);
}

void v_dsred(const DropFunction& f, const std::string& p) {
  require_ordered(p + ".k_l", f.lo, p + ".k_h", f.hi);
  require_prob(p + ".gamma", f.gamma);
}

void v_sred(const DropFunction& f, const std::string& p) {
  const double lo = f.lo, hi = f.hi, seg = f.seg;
  require_nonneg(p + ".min_th", lo);
  // q_max = 0 and seg = 0 mean the defaults (the buffer, 0.6 q_max); a negative one is an error
  require_finite(p + ".q_max", hi);
  if (hi < 0.0) fail_param(p + ".q_max", "> 0 (or 0: the buffer)", hi);
  require_finite(p + ".seg", seg);
  if (seg < 0.0) fail_param(p + ".seg", "> 0 (or 0: 0.6 q_max)", seg);
  if (hi == 0.0) return;  // q_max not resolved yet (defaults to the buffer)
  require_ordered(p + ".min_th", lo, p + ".q_max", hi);
  const double s = seg > 0.0 ? seg : 0.6 * hi;
  if (!(s > lo && s < hi)) fail_param(p + ".seg", detail::cat("in (min_th, q_max) = (", lo, ", ", hi, ")"), s);
}

void v_polynomial(const DropFunction& f, const std::string& p) {
  require_ordered(p + ".min_th", f.lo, p + ".max_th", f.hi);
  if (f.coeffs.empty()) fail_param(p + ".coeffs", "a non-empty list", "[]");
  for (size_t i = 0; i < f.coeffs.size(); ++i) require_finite(detail::cat(p, ".coeffs[", i, "]"), f.coeffs[i]);
}

void v_table(const DropFunction& f, const std::string& p) {
  const auto& points = f.points;
  if (points.empty()) fail_param(p + ".points", "a non-empty list of [avg, p]", "[]");
  for (size_t i = 0; i < points.size(); ++i) {
    require_finite(detail::cat(p, ".points[", i, "][0]"), points[i].first);
    require_prob(detail::cat(p, ".points[", i, "][1]"), points[i].second);
    if (i > 0 && !(points[i].first > points[i - 1].first))
      fail_param(detail::cat(p, ".points[", i, "][0]"),
                 detail::cat("> the previous avg ", points[i - 1].first, " (strictly increasing)"), points[i].first);
  }
}

// ---------------------------------------------------------------- the parameters

using K = DropFunction::Kind;
using F = DropField;
using T = DropKindSpec::Trait;

ParamSpec real(std::string name, std::string bound, std::string doc) {
  return ParamSpec{std::move(name), ParamType::Real, true, 0.0, std::move(bound), std::move(doc)};
}
ParamSpec optional_real(std::string name, std::string bound, std::string doc) {
  ParamSpec p{std::move(name), ParamType::Real, false, 0.0, std::move(bound), std::move(doc)};
  p.zero_default = true;
  return p;
}
std::pair<ParamSpec, DropField> min_th() {
  return {real("min_th", ">= 0", "lower threshold: no early drop below it"), F::Lo};
}
std::pair<ParamSpec, DropField> max_th() {
  return {real("max_th", "> min_th", "upper threshold: p = 1 at and above it"), F::Hi};
}
std::pair<ParamSpec, DropField> p_max() {
  return {real("p_max", "in [0, 1]", "drop probability reached at max_th"), F::PMax};
}

/// The registry: one entry per kind, in the order of DropFunction::Kind.
std::vector<DropKindSpec> make_drop_kinds() {
  std::vector<DropKindSpec> t;
  t.emplace_back(K::None, "none", "p = 0: no early drop (the buffer still overflows).", "tail drop",
                 std::vector<std::pair<ParamSpec, DropField>>{}, p_none, bp_none, v_none, T::kNoTraits, "");
  t.emplace_back(K::RED, "red", "RED: 0 below min_th, p_max x between the thresholds, 1 at or above max_th.",
                 "RED", std::vector{min_th(), max_th(), p_max()}, p_red, bp_thresholds, v_red,
                 T::kScalesPMax | T::kThresholds, "min_th..max_th");
  t.emplace_back(K::GentleRED, "gentle_red",
                 "Gentle RED: as RED below max_th, then linearly from p_max to 1 at 2 max_th.", "GENTLE RED",
                 std::vector{min_th(), max_th(), p_max()}, p_gentle_red, bp_gentle_red, v_red,
                 T::kScalesPMax | T::kThresholds, "min_th..max_th");
  t.emplace_back(K::DSRED, "dsred",
                 "DSRED: two linear segments from 0 at k_l through 1 - gamma at (k_l + k_h) / 2 to 1 at k_h.", "DSRED",
                 std::vector<std::pair<ParamSpec, DropField>>{
                     {real("k_l", ">= 0", "lower threshold K_l"), F::Lo},
                     {real("k_h", "> k_l", "upper threshold K_h: p = 1 at and above it"), F::Hi},
                     {real("gamma", "in [0, 1]", "1 - gamma is the drop probability at (k_l + k_h) / 2"), F::Gamma}},
                 p_dsred, bp_dsred, v_dsred, T::kNoTraits, "K_l..K_h");
  t.emplace_back(K::SRED, "sred",
                 "S-RED: a continuous two-segment quadratic from 0 at min_th through seg (default 0.6 q_max) to 1 "
                 "at q_max (default: the buffer); our reading of \"Research on the Improved Way of RED Algorithm "
                 "S-RED\".",
                 "SRED",
                 std::vector<std::pair<ParamSpec, DropField>>{
                     min_th(),
                     {optional_real("q_max", "> min_th (0 or absent: the buffer)", "p = 1 at and above it"), F::Hi},
                     {optional_real("seg", "in (min_th, q_max) (0 or absent: 0.6 q_max)", "the segment point"),
                      F::Seg}},
                 p_sred, bp_sred, v_sred, T::kNoTraits, "min_th..q_max");
  t.emplace_back(K::NLRED, "nlred",
                 "Nonlinear RED: 1.5 p_max x^2 between the thresholds (x the fraction of the way), 1 above.", "NLRED",
                 std::vector{min_th(), max_th(),
                             std::pair<ParamSpec, DropField>{
                                 real("p_max", "in [0, 2/3]", "p reaches 1.5 p_max at max_th"), F::PMax}},
                 p_nlred, bp_thresholds, v_nlred, T::kScalesPMax | T::kThresholds, "min_th..max_th");
  t.emplace_back(K::Polynomial, "polynomial",
                 "sum_k c_k x^k clipped to [0, 1] between the thresholds (x the fraction of the way), 1 above.",
                 "polynomial",
                 std::vector{min_th(), max_th(),
                             std::pair<ParamSpec, DropField>{
                                 ParamSpec{"coeffs", ParamType::RealList, true, 0.0, "a non-empty list",
                                           "the coefficients c_0, c_1, ... in x"},
                                 F::Coeffs}},
                 p_polynomial, bp_thresholds, v_polynomial, T::kThresholds, "min_th..max_th");
  t.emplace_back(K::Table, "table", "Piecewise linear through the (avg, p) points, constant outside them.", "table",
                 std::vector<std::pair<ParamSpec, DropField>>{
                     {ParamSpec{"points", ParamType::PointList, true, 0.0,
                                "a non-empty list, avg strictly increasing, p in [0, 1]", "the [avg, p] points"},
                      F::Points}},
                 p_table, bp_table, v_table, T::kNoTraits, "");
  t.emplace_back(K::GentleNLRED, "gentle_nlred",
                 "Nonlinear RED with ns-3's Gentle tail: 1.5 p_max x^2 between the thresholds, then linearly from "
                 "p_max at max_th to 1 at 2 max_th.",
                 "gentle NLRED",
                 std::vector{min_th(), max_th(),
                             std::pair<ParamSpec, DropField>{
                                 real("p_max", "in [0, 2/3]", "p reaches 1.5 p_max just below max_th, p_max at it"),
                                 F::PMax}},
                 p_gentle_nlred, bp_gentle_red, v_nlred, T::kScalesPMax | T::kThresholds, "min_th..max_th");
  for (size_t i = 0; i < t.size(); ++i)
    if (static_cast<size_t>(t[i].kind) != i)
      throw std::logic_error("drop function registry: entry " + t[i].name + " out of the order of DropFunction::Kind");
  return t;
}

}  // namespace

DropKindSpec::DropKindSpec(DropFunction::Kind kind_, std::string name_, std::string doc_, std::string title_,
                           std::vector<std::pair<ParamSpec, DropField>> params_, Eval p_, Breakpoints breakpoints_,
                           Validate validate_, unsigned traits_, std::string band_)
    : kind(kind_), name(std::move(name_)), doc(std::move(doc_)), title(std::move(title_)),
      params(std::move(params_)), p(p_), breakpoints(breakpoints_), validate(validate_), traits(traits_),
      band(std::move(band_)) {
  if (!p || !breakpoints || !validate)
    throw std::logic_error("drop function registry: " + name + " needs p, breakpoints and validate");
}

const std::vector<DropKindSpec>& drop_kinds() {
  static const std::vector<DropKindSpec> table = make_drop_kinds();
  return table;
}

const DropKindSpec& drop_kind(DropFunction::Kind kind) {
  const auto& t = drop_kinds();
  const auto i = static_cast<size_t>(kind);
  if (i >= t.size())
    throw std::logic_error(detail::cat("drop function registry: no entry for DropFunction::Kind ", i));
  return t[i];
}

const DropKindSpec& drop_kind(const std::string& name, const std::string& param) {
  for (const auto& k : drop_kinds())
    if (k.name == name) return k;
  std::vector<std::string> names;
  for (const auto& k : drop_kinds()) names.push_back(k.name);
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  fail_param(param, "one of " + all, "'" + name + "'");
}

std::string drop_kinds_with(unsigned traits) {
  std::vector<std::string> names;
  for (const auto& k : drop_kinds())
    if ((k.traits & traits) == traits) names.push_back(k.name);
  return or_list(names);
}

bool drop_has(const DropFunction& f, unsigned traits) { return (drop_kind(f.kind).traits & traits) == traits; }

void DropFunction::validate(const std::string& p) const { drop_kind(kind).validate(*this, p); }

double DropFunction::operator()(double avg) const { return drop_kind(kind).p(*this, avg); }

std::vector<double> DropFunction::breakpoints(int buffer) const {
  std::vector<double> b = drop_kind(kind).breakpoints(*this, static_cast<double>(buffer));
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  b.erase(std::remove_if(b.begin(), b.end(), [&](double x) { return !(x > 0.0 && x < buffer); }), b.end());
  return b;
}

std::string DropFunction::name() const { return drop_kind(kind).name; }

namespace {
double& scalar_field(DropFunction& f, DropField field) {
  switch (field) {
    case DropField::Lo: return f.lo;
    case DropField::Hi: return f.hi;
    case DropField::PMax: return f.p_max;
    case DropField::Gamma: return f.gamma;
    case DropField::Seg: return f.seg;
    default: break;
  }
  throw std::logic_error("drop function registry: a list parameter read as a number");
}
}  // namespace

DropFunction DropFunction::make(const std::string& kind_name, const ParamValues& values) {
  const DropKindSpec& spec = drop_kind(kind_name);
  for (const auto& [name, v] : values) {
    bool known = false;
    for (const auto& [ps, field] : spec.params) known = known || ps.name == name;
    if (!known && v.given) {
      std::vector<std::string> names;
      for (const auto& [ps, field] : spec.params) names.push_back(ps.name);
      fail_param("aqm." + name, "absent for drop = '" + kind_name + "' (it takes " +
                                    (names.empty() ? std::string("no parameters") : or_list(names)) + ")",
                 "a value");
    }
  }
  DropFunction f;
  f.kind = spec.kind;
  for (const auto& [ps, field] : spec.params) {
    const ParamValue& v = param_value(values, ps.name);
    if (!v.given) {
      if (ps.required) fail_param("aqm." + ps.name, "given for drop = '" + kind_name + "'", "nothing");
      if (ps.type == ParamType::Real) scalar_field(f, field) = ps.fallback;
      continue;
    }
    switch (ps.type) {
      case ParamType::Real:
      case ParamType::Int: scalar_field(f, field) = v.real; break;
      case ParamType::RealList: f.coeffs = v.list; break;
      case ParamType::RealMatrix:
      case ParamType::PointList:
        f.points.clear();
        for (size_t i = 0; i < v.matrix.size(); ++i) {
          if (v.matrix[i].size() != 2)
            fail_param(detail::cat("aqm.", ps.name, "[", i, "]"), "a pair [avg, p]",
                       detail::cat("a list of ", v.matrix[i].size(), " numbers"));
          f.points.emplace_back(v.matrix[i][0], v.matrix[i][1]);
        }
        break;
    }
  }
  f.validate();
  return f;
}

ParamValues DropFunction::args() const {
  ParamValues out;
  DropFunction copy = *this;
  for (const auto& [ps, field] : drop_kind(kind).params) {
    switch (ps.type) {
      case ParamType::Real:
      case ParamType::Int: out.emplace_back(ps.name, ParamValue::of(scalar_field(copy, field))); break;
      case ParamType::RealList: out.emplace_back(ps.name, ParamValue::of(coeffs)); break;
      case ParamType::RealMatrix:
      case ParamType::PointList: {
        std::vector<std::vector<double>> m;
        for (const auto& [x, y] : points) m.push_back({x, y});
        out.emplace_back(ps.name, ParamValue::of(std::move(m)));
        break;
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------- registry helpers

std::string to_string(ParamType t) {
  switch (t) {
    case ParamType::Real: return "a number";
    case ParamType::Int: return "an integer";
    case ParamType::RealList: return "a list of numbers";
    case ParamType::RealMatrix: return "a list of lists of numbers";
    case ParamType::PointList: return "a list of [x, y] pairs";
  }
  return "?";
}

const ParamValue& param_value(const ParamValues& v, const std::string& name) {
  static const ParamValue absent{};
  for (const auto& [n, x] : v)
    if (n == name) return x;
  return absent;
}

std::string or_list(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

}  // namespace aqm
