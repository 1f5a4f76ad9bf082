// Service, AQM and the whole model: validation and string conversions.
#include "aqmchain/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

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

void Aqm::validate(const std::string& p, bool w_is_rate) const {
  require_finite(p + ".w", w);
  if (w_is_rate) {
    if (!(w > 0.0 && w <= 1e12)) fail_param(p + ".w", "a rate in (0, 1e12] (continuous time)", w);
  } else if (!(w > 0.0 && w <= 1.0)) {
    fail_param(p + ".w", "in (0, 1]", w);
  }
  require_prob(p + ".ecn", ecn);
  drop.validate(p);
}

// ---------------------------------------------------------------- model

void Model::validate() const {
  if (buffer < 1) fail_param("model.buffer", ">= 1", buffer);
  if (buffer > 10000000) fail_param("model.buffer", "<= 1e7", buffer);
  source.validate("source");
  if (time == TimeKind::Continuous) {
    // SPEC 6: Poisson/MMPP arrivals, exponential service, the EWMA as an ODE.
    if (!source.continuous())
      fail_param("source.kind", "poisson or mmpp when model.time = \"continuous\"", "'" + source.describe() + "'");
    if (service.kind != Service::Kind::Exponential)
      fail_param("service.kind", "exponential when model.time = \"continuous\"", "'geometric'");
    if (aqm.update != UpdateRule::PerSlot)
      fail_param("aqm.update", "per_slot (the default) when model.time = \"continuous\": avg follows "
                               "d avg/dt = w (q - avg) at all times", "'" + to_string(aqm.update) + "'");
    if (grid.mapping != Mapping::Split)
      fail_param("grid.mapping", "split (the default) when model.time = \"continuous\": avg moves between "
                                 "neighbouring grid points at upwind rates", "'" + to_string(grid.mapping) + "'");
  } else {
    if (source.continuous())
      fail_param("source.kind", "bernoulli, ssmp or mmbp when model.time = \"discrete\"",
                 "'" + source.describe() + "'");
    if (service.kind != Service::Kind::Geometric)
      fail_param("service.kind", "geometric when model.time = \"discrete\"", "'exponential'");
  }
  service.validate("service");
  aqm.validate("aqm", time == TimeKind::Continuous);
  resolved_drop().validate("aqm");
  grid.validate(buffer, "grid");
}

DropFunction Model::resolved_drop() const {
  DropFunction d = aqm.drop;
  if (d.kind == DropFunction::Kind::SRED && d.hi <= 0.0) d.hi = buffer;
  return d;
}

std::string to_string(TimeKind t) { return t == TimeKind::Discrete ? "discrete" : "continuous"; }
TimeKind time_kind_from(const std::string& s) {
  if (s == "discrete") return TimeKind::Discrete;
  if (s == "continuous") return TimeKind::Continuous;
  fail_param("model.time", "one of discrete, continuous", "'" + s + "'");
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
