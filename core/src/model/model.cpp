// Service, AQM and the whole model: validation and string conversions.
#include "aqmchain/model/model.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>
#include <sstream>

#include "aqmchain/model/features.hpp"
#include "aqmchain/model/filter.hpp"
#include "model/validate.hpp"

namespace aqm {

using namespace detail;

// ---------------------------------------------------------------- service

Service Service::geometric(double mu) {
  Service s;
  s.mu = mu;
  s.validate();
  return s;
}

Service Service::exponential(double mu) {
  Service s;
  s.kind = Kind::Exponential;
  s.mu = mu;
  s.validate();
  return s;
}

void Service::validate(const std::string& prefix) const {
  require_finite(prefix + ".mu", mu);
  if (kind == Kind::Exponential) {
    if (!(mu > 0.0 && mu <= 1e12)) fail_param(prefix + ".mu", "a rate in (0, 1e12]", mu);
    return;
  }
  if (!(mu > 0.0 && mu <= 1.0)) fail_param(prefix + ".mu", "in (0, 1]", mu);
}

// ---------------------------------------------------------------- AQM

const std::vector<AqmFeature>& aqm_features() {
  static const std::vector<AqmFeature> table = {
      {"adaptive", "false",
       {"interval", "target_lo", "target_hi", "increment", "decrease", "p_max_high", "p_max_low", "clock",
        "p_max_step", "max_clock_states"},
       true, "adaptive RED: p_max moves every interval slots toward the target band of avg"},
      {"spacing", "none", {"count_max", "count_tail"}, false, "drop spacing by the count of packets since the last drop"},
      {"dynamic_max_th", "false", {"max_th_growth"}, true, "FDynamicAutoRED's dynamic max_th"},
      {"weight", "static", {}, false, "AutoRED's dynamic EWMA weight (reads autored_p, as does the dynamic max_th)"},
      {"semantics", "default", {"ptc", "idle_correction", "hard_drop"}, true,
       "ns-3 RedQueueDisc's rules in continuous time (docs/ns3.md)", "\"ns3\""},
  };
  return table;
}

void Aqm::validate(const std::string& p, bool w_is_rate) const {
  require_finite(p + ".w", w);
  if (w_is_rate) {
    if (!(w > 0.0 && w <= 1e12)) fail_param(p + ".w", "a rate in (0, 1e12] (continuous time)", w);
  } else if (!(w > 0.0 && w <= 1.0)) {
    fail_param(p + ".w", "in (0, 1]", w);
  }
  require_prob(p + ".ecn", ecn);
  require_finite(p + ".ptc", ptc);
  if (!(ptc >= 0.0 && ptc <= 1e12)) fail_param(p + ".ptc", "a rate in [0, 1e12] (0: the service rate)", ptc);
  drop.validate(p);
  if (count_max < 1 || count_max > kMaxCountMax) fail_param(p + ".count_max", cat("in [1, ", kMaxCountMax, "]"), count_max);
  require_finite(p + ".count_tail", count_tail);
  if (!(count_tail >= 0.0 && count_tail <= kMaxCountTail))
    fail_param(p + ".count_tail", cat("in [0, ", kMaxCountTail, "]"), count_tail);
  if (count_trunc < 0) fail_param(p + ".count_trunc", ">= 0", count_trunc);
  for (int64_t c : count_trunc_at)
    if (c < 0) fail_param(p + ".count_trunc_at", "entries >= 0", c);
  adaptive.validate(p);
  if (dynamic_max_th) {
    require_finite(p + ".max_th_growth", max_th_growth);
    if (!(max_th_growth > 0.0 && max_th_growth <= 10.0)) fail_param(p + ".max_th_growth", "in (0, 10]", max_th_growth);
    if (!drop_has(drop, DropKindSpec::kScalesPMax))
      fail_param(p + ".dynamic_max_th",
                 "false unless drop is " + drop_kinds_with(DropKindSpec::kScalesPMax) + " (a drop function with max_th)",
                 "true with drop = '" + drop.name() + "'");
    if (adaptive.enabled)
      fail_param(p + ".dynamic_max_th", "false when aqm.adaptive = true (not combined)", "true");
  }
  if (weight == Weight::AutoRED && adaptive.enabled)
    fail_param(p + ".weight", "static when aqm.adaptive = true (AutoRED's weight reads p(avg) with a fixed p_max)",
               "'autored'");
  if (adaptive.enabled && !drop_has(drop, DropKindSpec::kScalesPMax))
    fail_param(p + ".adaptive",
               "false unless drop is " + drop_kinds_with(DropKindSpec::kScalesPMax) + " (a drop function with p_max)",
               "true with drop = '" + drop.name() + "'");
  if (filter == FilterKind::Redwm && (stateful() || weight != Weight::Static))
    fail_param(p + ".filter", "ewma when a stateful AQM (spacing, adaptive, dynamic_max_th) or AutoRED's weight is "
               "used (not combined with REDwM)", "'redwm'");
  if (filter == FilterKind::Ewma) {
    if (!a.empty() || !b.empty())
      fail_param(p + (a.empty() ? ".b" : ".a"), "absent unless aqm.filter = \"redwm\" (the EWMA takes w)", "a list");
    return;
  }
  // REDwM (SPEC 2.3): a_j >= 0, b_i >= 0, sum a_j + sum b_i = 1, and the queue enters (sum b_i > 0).
  if (a.size() > static_cast<size_t>(kMaxFilterCoefficients))
    fail_param(p + ".a", cat("at most ", kMaxFilterCoefficients, " coefficients a_1 .. a_k"), a.size());
  if (b.empty() || b.size() > static_cast<size_t>(kMaxFilterCoefficients))
    fail_param(p + ".b", cat("1 to ", kMaxFilterCoefficients, " coefficients b_0 .. b_m"), b.size());
  long double sum = 0.0L, sum_b = 0.0L;
  std::string terms;
  for (size_t j = 0; j < a.size(); ++j) {
    const std::string name = cat(p, ".a[", j, "]");
    require_finite(name, a[j]);
    if (!(a[j] >= 0.0)) fail_param(name, cat(">= 0 (a_", j + 1, ", the weight of A_{t-", j + 1, "})"), shortest(a[j]));
    sum += a[j];
    terms += cat(terms.empty() ? "" : " + ", "a_", j + 1, " ", shortest(a[j]));
  }
  for (size_t i = 0; i < b.size(); ++i) {
    const std::string name = cat(p, ".b[", i, "]");
    require_finite(name, b[i]);
    if (!(b[i] >= 0.0)) fail_param(name, cat(">= 0 (b_", i, ", the weight of q_{t-", i + 1, "})"), shortest(b[i]));
    sum += b[i];
    sum_b += b[i];
    terms += cat(terms.empty() ? "" : " + ", "b_", i, " ", shortest(b[i]));
  }
  if (!(std::abs(static_cast<double>(sum) - 1.0) <= kFilterSumTolerance))
    throw ModelError(p + ".a", cat("parameters '", p, ".a' and '", p, ".b' must sum to 1 (within ", kFilterSumTolerance,
                                   "), got sum ", shortest(static_cast<double>(sum)), " = ", terms));
  if (!(sum_b > 0.0L))
    fail_param(p + ".b", "a list with a positive sum (the queue must enter the average; b = 0 freezes A at 0)", "all zeros");
}

void Aqm::from_triple(const std::vector<double>& t, std::vector<double>& a_out, std::vector<double>& b_out,
                      const std::string& p) {
  if (t.size() != 3) fail_param(p + ".triple", "three numbers [x, y, z] (b_0 = x, b_1 = y, a_2 = z)", cat(t.size(), " numbers"));
  const char* role[] = {"b_0, the weight of q_{t-1}", "b_1, the weight of q_{t-2}", "a_2, the weight of A_{t-2}"};
  for (size_t i = 0; i < 3; ++i) {
    const std::string name = cat(p, ".triple[", i, "]");
    require_finite(name, t[i]);
    if (!(t[i] >= 0.0 && t[i] <= 1.0)) fail_param(name, cat("in [0, 1] (", role[i], ")"), shortest(t[i]));
  }
  const double x = t[0], y = t[1], z = t[2];
  // a_1 = 1 - x - y - z, evaluated left to right: for [w, 0, 0] it is bitwise the EWMA's 1 - w
  const double a1 = 1.0 - x - y - z;
  if (a1 < -kFilterSumTolerance)
    throw ModelError(p + ".triple", cat("parameter '", p, ".triple' must have x + y + z <= 1 (a_1 = 1 - x - y - z >= 0), "
                                        "got x + y + z = ", shortest(x + y + z), " (", shortest(x), " + ", shortest(y), " + ",
                                        shortest(z), ")"));
  if (!(x + y > 0.0))
    throw ModelError(p + ".triple", cat("parameter '", p, ".triple' must have x + y > 0 (the queue must enter the average), "
                                        "got x = ", shortest(x), ", y = ", shortest(y)));
  a_out = {std::max(a1, 0.0), z};
  b_out = {x, y};
}

int Aqm::order_k() const {
  int k = 0;
  for (size_t j = 0; j < a.size(); ++j)
    if (a[j] != 0.0) k = static_cast<int>(j) + 1;
  return k;
}

int Aqm::order_m() const {
  int m = 0;
  for (size_t i = 0; i < b.size(); ++i)
    if (b[i] != 0.0) m = static_cast<int>(i);
  return m;
}

void Adaptive::validate(const std::string& p) const {
  if (!enabled) return;
  if (interval < 1 || interval > kMaxAdaptiveInterval)
    fail_param(p + ".interval", cat("in [1, ", kMaxAdaptiveInterval, "] slots"), interval);
  require_finite(p + ".target_lo", target_lo);
  require_finite(p + ".target_hi", target_hi);
  if (!(target_lo >= 0.0 && target_lo <= 1.0)) fail_param(p + ".target_lo", "in [0, 1]", target_lo);
  if (!(target_hi >= target_lo && target_hi <= 1.0))
    fail_param(p + ".target_hi", detail::cat("in [target_lo, 1] = [", target_lo, ", 1]"), target_hi);
  require_finite(p + ".increment", increment);
  if (!(increment >= 0.0 && increment <= 1.0)) fail_param(p + ".increment", "in [0, 1]", increment);
  require_finite(p + ".decrease", decrease);
  if (!(decrease > 0.0 && decrease <= 1.0)) fail_param(p + ".decrease", "in (0, 1]", decrease);
  if (!(p_max_high >= 0.0 && p_max_high <= 1.0)) fail_param(p + ".p_max_high", "in [0, 1]", p_max_high);
  if (!(p_max_low >= 0.0 && p_max_low <= 1.0)) fail_param(p + ".p_max_low", "in [0, 1]", p_max_low);
  if (!(p_max_step >= 1e-6 && p_max_step <= 1.0)) fail_param(p + ".p_max_step", "in [1e-6, 1]", p_max_step);
  if (!(max_clock_states >= 1.0)) fail_param(p + ".max_clock_states", ">= 1", max_clock_states);
}

// ---------------------------------------------------------------- traffic classes

void TrafficClass::validate(const std::string& p, int modulator_states) const {
  if (name.empty() || name.size() > 64)
    fail_param(p + ".name", "1 to 64 characters from [A-Za-z0-9_-]", "'" + name + "'");
  for (char ch : name)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-'))
      fail_param(p + ".name", "1 to 64 characters from [A-Za-z0-9_-]", "'" + name + "'");
  if (share.size() != 1 && share.size() != static_cast<size_t>(modulator_states))
    fail_param(p + ".share", cat("one number, or one per modulator state (", modulator_states, ")"),
               cat(share.size(), " numbers"));
  for (size_t i = 0; i < share.size(); ++i) require_prob(share.size() == 1 ? p + ".share" : cat(p, ".share[", i, "]"), share[i]);
  require_prob(p + ".ecn", ecn);
  if (flows < 1 || flows > kMaxFlows) fail_param(p + ".flows", cat("in [1, ", kMaxFlows, "]"), flows);
  if (!flow_weights.empty()) {
    if (flow_weights.size() != static_cast<size_t>(flows))
      fail_param(p + ".flow_weights", cat("one weight per flow (", flows, ") or absent (uniform)"),
                 cat(flow_weights.size(), " numbers"));
    long double sum = 0.0L;
    for (size_t f = 0; f < flow_weights.size(); ++f) {
      require_prob(cat(p, ".flow_weights[", f, "]"), flow_weights[f]);
      sum += flow_weights[f];
    }
    if (!(std::abs(static_cast<double>(sum) - 1.0) <= kShareSumTolerance))
      fail_param(p + ".flow_weights", cat("weights summing to 1 (within ", shortest(kShareSumTolerance), ")"),
                 cat("sum ", shortest(static_cast<double>(sum))));
  }
}

int Model::total_flows() const {
  int total = 0;
  for (int c = 0; c < class_count(); ++c) total += class_flows(c);
  return total;
}

namespace {
bool has_thresholds(const DropFunction& f) { return drop_has(f, DropKindSpec::kThresholds); }

void validate_classes(const Model& md) {
  const Aqm& aqm = md.aqm;
  if (aqm.modified != Modified::None && !has_thresholds(aqm.drop))
    fail_param("aqm.modified", "none unless drop is " + drop_kinds_with(DropKindSpec::kThresholds) +
               " (a drop function with min_th and max_th)", "'" + to_string(aqm.modified) + "' with drop = '" + aqm.drop.name() + "'");
  if (aqm.flow_compare && !has_thresholds(aqm.drop))
    fail_param("aqm.flow_compare", "false unless drop is " + drop_kinds_with(DropKindSpec::kThresholds) +
               " (a drop function with min_th and max_th)", "true with drop = '" + aqm.drop.name() + "'");
  if (md.classes.empty()) return;
  if (md.classes.size() > static_cast<size_t>(kMaxClasses))
    fail_param("class", cat("at most ", kMaxClasses, " [[class]] tables"), md.classes.size());
  if (aqm.ecn != 0.0)
    fail_param("aqm.ecn", "0 when [[class]] tables are given (each class carries its own ecn)", aqm.ecn);
  const int states = md.source.states();
  long long flows = 0;
  for (size_t c = 0; c < md.classes.size(); ++c) {
    const std::string p = cat("class[", c, "]");
    md.classes[c].validate(p, states);
    for (size_t d = 0; d < c; ++d)
      if (md.classes[d].name == md.classes[c].name)
        fail_param(p + ".name", cat("unique (class[", d, "] has the same name)"), "'" + md.classes[c].name + "'");
    flows += md.classes[c].flows;
  }
  if (flows > kMaxFlows) fail_param("class", cat("at most ", kMaxFlows, " flows over all classes"), flows);
  for (int m = 0; m < states; ++m) {
    long double sum = 0.0L;
    for (const TrafficClass& k : md.classes) sum += k.share_in(m);
    if (!(std::abs(static_cast<double>(sum) - 1.0) <= kShareSumTolerance))
      fail_param(states == 1 ? std::string("class.share") : cat("class.share[", m, "]"),
                 cat("class shares summing to 1 (within ", shortest(kShareSumTolerance), ")",
                     states == 1 ? std::string() : cat(" in modulator state ", m)),
                 cat("sum ", shortest(static_cast<double>(sum))));
  }
}
}  // namespace

// ---------------------------------------------------------------- model

void Model::validate() const {
  if (buffer < 1) fail_param("model.buffer", ">= 1", buffer);
  if (buffer > kMaxBuffer) fail_param("model.buffer", cat("<= ", kMaxBuffer), buffer);
  source.validate("source");
  if (time == TimeKind::Continuous) {
    // SPEC 6: Poisson/MMPP arrivals, exponential service, the EWMA as an ODE.
    if (!source.continuous())
      fail_param("source.kind", source_kinds_named(true) + " when model.time = \"continuous\"", "'" + source.describe() + "'");
    if (service.kind != Service::Kind::Exponential)
      fail_param("service.kind", "exponential when model.time = \"continuous\"", "'geometric'");
    if (aqm.update != UpdateRule::PerSlot)
      fail_param("aqm.update", "per_slot (the default) when model.time = \"continuous\": avg follows "
                               "d avg/dt = w (q - avg) at all times", "'" + to_string(aqm.update) + "'");
    if (aqm.spacing != Spacing::None && !aqm.ns3())
      fail_param("aqm.spacing", "none when model.time = \"continuous\" (the count is per slotted arrival; "
                 "aqm.semantics = \"ns3\" counts arrivals in continuous time)", "'" + to_string(aqm.spacing) + "'");
    if (aqm.ns3()) {
      if (!classes.empty()) fail_param("class", "no traffic classes with aqm.semantics = \"ns3\"", cat(classes.size(), " classes"));
      if (aqm.modified != Modified::None)
        fail_param("aqm.modified", "\"none\" with aqm.semantics = \"ns3\"", "'" + to_string(aqm.modified) + "'");
    }
    if (aqm.weight != Weight::Static)
      fail_param("aqm.weight", "static when model.time = \"continuous\" (the dynamic weight is per slot)",
                 "'" + to_string(aqm.weight) + "'");
    if (aqm.dynamic_max_th)
      fail_param("aqm.dynamic_max_th", "false when model.time = \"continuous\" (the rule is per slot)", "true");
    if (aqm.adaptive.enabled)
      fail_param("aqm.adaptive", "false when model.time = \"continuous\" (the interval is counted in slots)",
                 "true");
    if (grid.mapping != Mapping::Split)
      fail_param("grid.mapping", "split (the default) when model.time = \"continuous\": avg moves between "
                                 "neighbouring grid points at upwind rates", "'" + to_string(grid.mapping) + "'");
    if (aqm.filter != FilterKind::Ewma)
      fail_param("aqm.filter", "ewma (the default) when model.time = \"continuous\": REDwM is a recursion over "
                               "slots and has no continuous-time form here", "'" + to_string(aqm.filter) + "'");
  } else {
    if (aqm.ns3())
      fail_param("aqm.semantics", "\"default\" when model.time = \"discrete\" (ns-3's RedQueueDisc runs on a "
                                  "continuous clock: set model.time = \"continuous\")", "'ns3'");
    if (source.continuous())
      fail_param("source.kind", source_kinds_named(false) + " when model.time = \"discrete\"",
                 "'" + source.describe() + "'");
    if (service.kind != Service::Kind::Geometric)
      fail_param("service.kind", "geometric when model.time = \"discrete\"", "'exponential'");
    if (source.max_batch() > 1) {
      // batch arrivals (docs/batch-arrivals.md): the plain EWMA queue; the stateful AQM's
      // count and the class chains are written for one arrival per slot
      const std::string b = cat(" with a batch source (B = ", source.max_batch(), " arrivals per slot)");
      if (aqm.spacing != Spacing::None) fail_param("aqm.spacing", "none" + b, "'" + to_string(aqm.spacing) + "'");
      if (aqm.adaptive.enabled) fail_param("aqm.adaptive", "false" + b, "true");
      if (aqm.dynamic_max_th) fail_param("aqm.dynamic_max_th", "false" + b, "true");
      if (aqm.filter != FilterKind::Ewma) fail_param("aqm.filter", "ewma" + b, "'" + to_string(aqm.filter) + "'");
      if (!classes.empty()) fail_param("class", "no traffic classes" + b, cat(classes.size(), " classes"));
      if (aqm.modified != Modified::None)
        fail_param("aqm.modified", "\"none\"" + b, "'" + to_string(aqm.modified) + "'");
      if (aqm.flow_compare) fail_param("aqm.flow_compare", "false" + b, "true");
    }
  }
  service.validate("service");
  aqm.validate("aqm", time == TimeKind::Continuous && !aqm.ns3());
  resolved_drop().validate("aqm");
  grid.validate(buffer, "grid");
  if (aqm.filter == FilterKind::Ewma && (grid.s_k != 0 || !grid.s_points.empty()))
    fail_param(grid.s_k != 0 ? "grid.s_k" : "grid.s_points",
               "absent unless aqm.filter = \"redwm\" (the grid of REDwM's second variable s)",
               grid.s_k != 0 ? cat(grid.s_k) : std::string("a list"));
  redwm_s_grid_size(*this);  // validates grid.s_k / grid.s_points against the coefficients
  validate_classes(*this);
}

DropFunction Model::resolved_drop() const {
  DropFunction d = aqm.drop;
  if (d.kind == DropFunction::Kind::SRED && d.hi <= 0.0) d.hi = buffer;
  if (d.kind == DropFunction::Kind::SRED && d.seg <= 0.0) d.seg = 0.6 * d.hi;
  return d;
}

std::string to_string(Spacing s) {
  return s == Spacing::None ? "none" : s == Spacing::Count ? "count" : "wait";
}
std::string to_string(Semantics s) { return s == Semantics::Default ? "default" : "ns3"; }
Semantics semantics_from(const std::string& s) {
  if (s == "default") return Semantics::Default;
  if (s == "ns3") return Semantics::Ns3;
  fail_param("aqm.semantics", "one of default, ns3", "'" + s + "'");
}
std::string to_string(Weight w) { return w == Weight::Static ? "static" : "autored"; }
std::string to_string(AutoredP p) { return p == AutoredP::Drop ? "drop" : "queue"; }
Weight weight_from(const std::string& s) {
  if (s == "static") return Weight::Static;
  if (s == "autored") return Weight::AutoRED;
  fail_param("aqm.weight", "one of static, autored", "'" + s + "'");
}
AutoredP autored_p_from(const std::string& s) {
  if (s == "drop") return AutoredP::Drop;
  if (s == "queue") return AutoredP::Queue;
  fail_param("aqm.autored_p", "one of drop, queue", "'" + s + "'");
}
std::string to_string(AdaptiveClock c) { return c == AdaptiveClock::Exact ? "exact" : "geometric"; }
Spacing spacing_from(const std::string& s) {
  if (s == "none") return Spacing::None;
  if (s == "count") return Spacing::Count;
  if (s == "wait") return Spacing::Wait;
  fail_param("aqm.spacing", "one of none, count, wait", "'" + s + "'");
}
AdaptiveClock clock_from(const std::string& s) {
  if (s == "exact") return AdaptiveClock::Exact;
  if (s == "geometric") return AdaptiveClock::Geometric;
  fail_param("aqm.clock", "one of exact, geometric", "'" + s + "'");
}

std::string to_string(Modified m) { return m == Modified::None ? "none" : m == Modified::Front ? "front" : "random"; }
Modified modified_from(const std::string& s) {
  if (s == "none") return Modified::None;
  if (s == "front") return Modified::Front;
  if (s == "random") return Modified::Random;
  fail_param("aqm.modified", "one of none, front, random", "'" + s + "'");
}

std::string to_string(UpdateRule u) { return u == UpdateRule::PerSlot ? "per_slot" : "per_arrival"; }
std::string to_string(DropPolicy p) {
  return p == DropPolicy::Tail ? "tail" : p == DropPolicy::Front ? "front" : "random";
}
std::string to_string(Refine r) { return r == Refine::None ? "none" : "auto"; }
Refine refine_from(const std::string& s) {
  if (s == "none") return Refine::None;
  if (s == "auto") return Refine::Auto;
  fail_param("grid.refine", "one of none, auto", "'" + s + "'");
}
const std::vector<FilterSpec>& filter_kinds() {
  static const std::vector<FilterSpec> table = {
      {FilterKind::Ewma, "ewma", {"w"}, "RED's exponentially weighted moving average, weight w"},
      {FilterKind::Redwm, "redwm", {"a", "b", "triple"},
       "REDwM's recursion over past averages (a) and queue samples (b), or the triple"},
  };
  return table;
}
std::string to_string(FilterKind f) { return filter_kinds().at(static_cast<size_t>(f)).name; }
FilterKind filter_kind_from(const std::string& s) {
  std::string names;
  for (const auto& f : filter_kinds()) {
    if (f.name == s) return f.kind;
    names += (names.empty() ? "" : ", ") + f.name;
  }
  fail_param("aqm.filter", "one of " + names, "'" + s + "'");
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
