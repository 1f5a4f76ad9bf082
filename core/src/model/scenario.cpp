// Scenario validation: phases that can share one state space.
#include "aqmchain/model/scenario.hpp"

#include <algorithm>
#include <cmath>

#include "aqmchain/model/filter.hpp"
#include "aqmchain/model/queue_generator.hpp"
#include "model/validate.hpp"

namespace aqm {

using namespace detail;

void Scenario::validate() const {
  if (phases.empty()) fail_param("scenario.phase", "at least one phase", 0);
  if (phases.size() > 100000) fail_param("scenario.phase", "at most 100000 phases", static_cast<double>(phases.size()));
  const Model& first = phases.front().model;
  double total = 0.0;
  for (size_t i = 0; i < phases.size(); ++i) {
    const Phase& ph = phases[i];
    const std::string p = cat("phase[", i, "]");
    ph.model.validate();
    require_finite(p + ".duration", ph.duration);
    if (!(ph.duration > 0.0)) fail_param(p + ".duration", "> 0", ph.duration);
    if (ph.model.time == TimeKind::Discrete && ph.duration != std::floor(ph.duration))
      fail_param(p + ".slots", "a whole number of slots", ph.duration);
    total += ph.duration;
    if (!(total <= kMaxScenarioDuration))
      fail_param(p + ".duration", cat("a scenario total <= ", kMaxScenarioDuration), total);
    const Model& m = ph.model;
    if (m.time != first.time)
      throw ModelError(p + ".time", cat(p, ".time = \"", to_string(m.time), "\" differs from phase[0]'s \"", to_string(first.time),
                           "\" (the phases of a scenario share one state space)"));
    if (m.buffer != first.buffer)
      throw ModelError(p + ".buffer", cat(p, ".buffer = ", m.buffer, " differs from phase[0]'s ", first.buffer,
                           " (the phases of a scenario share one state space)"));
    if (m.source.kind != first.source.kind || m.source.states() != first.source.states())
      throw ModelError(p + ".source", cat(p, ".source: kind and modulator size must match phase[0]'s (", first.source.states(),
                           " modulator states; the phases share one state space)"));
    if (m.grid.k != first.grid.k || m.grid.points != first.grid.points || m.grid.mapping != first.grid.mapping)
      throw ModelError(p + ".grid", cat(p, ".grid must equal phase[0]'s grid (the phases share one state space)"));
    if (m.aqm.filter != first.aqm.filter)
      throw ModelError(p + ".aqm.filter", cat(p, ".aqm.filter = \"", to_string(m.aqm.filter), "\" differs from phase[0]'s \"",
                           to_string(first.aqm.filter), "\" (the filter's state carries over between phases)"));
    if (m.aqm.filter == FilterKind::Redwm && redwm_s_grids(m) != redwm_s_grids(first))
      throw ModelError(p + ".grid.s_points", cat(p, ": REDwM's s grid (grid.s_k / grid.s_points and (a_2 + b_1) N) must equal "
                           "phase[0]'s (the phases share one state space)"));
    if (m.aqm.update != first.aqm.update)
      throw ModelError(p + ".aqm.update", cat(p, ".aqm.update = \"", to_string(m.aqm.update), "\" differs from phase[0]'s \"",
                           to_string(first.aqm.update), "\""));
    if (m.aqm.stateful() || first.aqm.stateful()) {  // docs/stateful-aqm.md: the components carry over
      const StatefulInfo si = stateful_info(m), s0 = stateful_info(first);
      if (m.aqm.spacing != first.aqm.spacing || m.aqm.adaptive.enabled != first.aqm.adaptive.enabled ||
          m.aqm.dynamic_max_th != first.aqm.dynamic_max_th || si.count_cap != s0.count_cap || si.pmax != s0.pmax ||
          si.phases != s0.phases)
        throw ModelError(p + ".aqm", cat(p, ": the stateful AQM (spacing and its count range, adaptive RED's p_max grid "
                                            "and clock, dynamic max_th) must match phase[0]'s (the phases share one "
                                            "state space)"));
    }
  }
}

double Scenario::total_duration() const {
  double t = 0.0;
  for (const auto& ph : phases) t += ph.duration;
  return t;
}

std::vector<double> Scenario::boundaries() const {
  std::vector<double> b{0.0};
  for (const auto& ph : phases) b.push_back(b.back() + ph.duration);
  return b;
}

int Scenario::phase_at(double t) const {
  const auto b = boundaries();
  const auto it = std::upper_bound(b.begin() + 1, b.end() - 1, t);
  return static_cast<int>(it - (b.begin() + 1));
}

}  // namespace aqm
