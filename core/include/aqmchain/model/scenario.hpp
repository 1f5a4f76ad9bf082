// Piecewise-constant scenarios (SPEC 6): a list of phases, each a duration and
// the model that holds during it (e.g. a load step: alpha 0.3 for 3000 slots,
// 0.9 for 3000, 0.3 again).  The phases must share one state space: same time
// kind, buffer, grid, source kind and modulator size, filter update rule, filter
// kind (and for REDwM the s grid); what may change is any rate or probability
// (source parameters, mu, the drop function, w or REDwM's coefficients, ECN, the
// discard policy).  Chains for a scenario are built on the union of
// the states reachable under each phase (state/chain.hpp: build_scenario_chains).
#pragma once

#include <string>
#include <vector>

#include "aqmchain/model/model.hpp"

namespace aqm {

/// The longest scenario (sum of the durations; also the latest output time of a transient solve).
constexpr double kMaxScenarioDuration = 1e13;

struct Phase {
  /// Slots (discrete time: a positive integer) or time units (continuous), > 0.
  double duration = 0.0;
  Model model;
  std::string label;  ///< free text for tables and plots ("" allowed)
};

struct Scenario {
  std::vector<Phase> phases;

  /// At least one phase; every model valid; positive durations (integers for
  /// slotted models, total <= kMaxScenarioDuration); the phases compatible as described above.
  /// Throws ModelError naming `phase[i].<parameter>`.
  void validate() const;
  /// Sum of the durations.
  double total_duration() const;
  /// Start time of each phase (phase 0 starts at 0) followed by the total.
  std::vector<double> boundaries() const;
  /// The phase active at time t (t in [start, end); the last phase for t >= total).
  int phase_at(double t) const;
};

}  // namespace aqm
