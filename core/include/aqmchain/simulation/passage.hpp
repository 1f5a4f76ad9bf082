// Simulated hitting times: T = min{t >= 0 : X_t in target}, one replication run until its
// first hit or the horizon, to check the chain's first-passage answers (docs/simulation.md,
// "Hitting times").
//
// Slotted models: X_t is the state after t slots (the state the slotted chain describes at
// the start of slot t: n packets in the system, avg, the modulator), checked at t = 0 and
// after every slot; the slot loop is the simulator's (simulation/engine.hpp).  It runs in
// stretches of up to 4096 slots; a stretch whose end-of-slot levels never meet the target's
// queue range cannot hold a hit, any other one is run again slot by slot from its saved
// start (same state, same stream: the same path).
// Continuous-time models (simulation/event_engine.hpp): the state is piecewise constant in n
// and the modulator; T is the first time the state is in the target.  avg on the chain's grid
// (discretised) or under the ns-3 semantics jumps at events, so the target is checked at
// events; the exact avg moves between events along avg(s) = q + (avg_0 - q) e^{-w s}, which
// is monotone, and the time it enters the target's avg range is computed in closed form.
//
// Replication r uses the stream of `seed` advanced by r jumps of 2^128: each hitting time
// depends on the seed and r only, not on the number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aqmchain/model/model.hpp"

namespace aqm {

/// One comparison `quantity op value` of a target (quantity: queue, avg, modulator; op: >=,
/// <=, ==, >, <).  A target is their conjunction.
struct PassageClause {
  std::string quantity, op;
  double value = 0.0;
};

/// Names of the accumulated rewards (the chain's event names): arrival, aqm_drop, mark,
/// overflow, admit, depart.
const std::vector<std::string>& passage_reward_names();

/// The law of the start state: entries (level, avg, modulator) with weights (each
/// replication draws one entry with probability weight / sum).  avg_index[i] >= 0 names a
/// point of the model's resolved grid, -1 takes the value avg[i] (discretised runs: it must
/// be a grid point).  No entry: the empty system, avg 0, the modulator from its stationary
/// law (the chain's default initial law).
struct PassageStart {
  std::vector<int> level, modulator, avg_index;
  std::vector<double> avg, weight;
};

struct PassageOptions {
  int replications = 1000;   ///< in [2, 1e6]
  uint64_t seed = 1;
  int threads = 0;           ///< 0: all cores; at most 1024
  bool discretised = false;  ///< avg on the chain's grid with its mapping (the chain is then the exact law)
  double horizon = 0.0;      ///< runs not in the target by then are censored; slotted: whole slots
  std::vector<std::string> rewards;  ///< accumulated rewards to record (passage_reward_names())
  double memory_limit_bytes = 4.0 * 1024 * 1024 * 1024;
  /// Throws ModelError naming the option.
  void validate() const;
};

/// Per replication r: hit[r] = T (+infinity when the target was not reached by the horizon),
/// start[r] = the entry of the start law it drew (-1: the empty start).  Per reward k:
/// at_hit[k][r] = its count in [0, min(T, horizon)] (slotted: the slots 1..min(T, horizon)),
/// at_times[k][r * times.size() + i] = its count up to min(times[i], T).
struct PassageSimResult {
  std::vector<double> times;
  std::vector<double> hit;
  std::vector<int32_t> start;
  std::vector<std::string> rewards;
  std::vector<std::vector<double>> at_hit, at_times;
  int replications = 0, threads = 0;
  int64_t steps = 0;  ///< slots (slotted) or events (continuous time) simulated over all replications
  double seconds = 0.0;
};

/// Simulate `options.replications` runs of `model` from `start` until the target (the
/// conjunction of `target`) or `options.horizon`.  `times`: output times, strictly
/// increasing, in [0, horizon] (slotted: whole slots).  ModelError naming the parameter
/// ("to (clause)", "p0...", "times[i]", an option) on bad input; StateSpaceTooLarge over
/// the memory budget; Interrupted when asked to stop.
PassageSimResult simulate_passage(const Model& model, const std::vector<PassageClause>& target,
                                  const PassageStart& start, const std::vector<double>& times,
                                  const PassageOptions& options);

}  // namespace aqm
