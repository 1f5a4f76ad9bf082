// Ensembles of simulated replications of a piecewise-constant scenario: the transient
// law over time (mean queue, mean avg, losses) with confidence intervals, to compare
// with the chain's p_t = p_0 P^t.
//
// Each replication starts from the empty system (n = 0, avg = 0, modulator drawn from
// the stationary law of the first phase's modulator: the chain's default initial law)
// and runs the phases in order, carrying the system (packets in the FIFO, avg,
// modulator) across phase boundaries; phase i's parameters hold in its slots.  The
// slot loop is the simulator's (simulation/simulator.hpp), so is the order of events.
// Replication r uses the stream of `seed` advanced by r jumps of 2^128 and the
// ensemble is reduced in replication order: the result depends on the seed and the
// replication count only, not on the number of threads.
#pragma once

#include <cstdint>
#include <vector>

#include "aqmchain/model/scenario.hpp"

namespace aqm {

/// Bounds checked by EnsembleOptions::validate() and simulate_scenario().
struct EnsembleLimits {
  static constexpr int max_replications = 1000000;
  static constexpr int max_threads = 1024;
  static constexpr int64_t max_times = 100000000;  ///< output times
  /// The checks of a run of independent replications: 2 <= replications <= max_replications,
  /// 0 <= threads <= max_threads (ModelError naming the field).
  static void check(int replications, int threads);
};

struct EnsembleOptions {
  int replications = 200;    ///< independent replications, in [2, 1e6]
  uint64_t seed = 1;
  int threads = 0;           ///< 0: all cores; at most 1024
  bool discretised = false;  ///< avg on the chain's grid with its mapping (the chain is then the exact law)
  /// Memory budget: simulate_scenario() refuses (StateSpaceTooLarge naming the parameter
  /// that needs the most) when its estimate exceeds it, before allocating.
  double memory_limit_bytes = 4.0 * 1024 * 1024 * 1024;
  /// Throws ModelError naming the option.
  void validate() const;
};

/// Per output time t_i (the state at the end of slot t_i, after t_i slots): the ensemble
/// mean and the 95 % half-width (Student t with replications - 1 degrees of freedom) of
/// q = max(n - 1, 0), n and avg, and the variance of q over the replications.  Per
/// interval (t_{i-1}, t_i] (t_{-1} = 0): the mean number of arrivals and of lost packets
/// (AQM drops + overflow drops; ECN marks are not losses) per replication, and the loss
/// rate sum(lost) / sum(arrivals) over the replications with its half-width by the delta
/// method (0 with an infinite half-width when no replication had an arrival in the
/// interval: no number is ever NaN).
struct EnsembleResult {
  std::vector<int64_t> times;
  std::vector<double> mean_queue, mean_queue_hw, var_queue;
  std::vector<double> mean_system, mean_system_hw;
  std::vector<double> mean_avg, mean_avg_hw;
  std::vector<double> arrivals, arrivals_hw, losses, losses_hw, loss_rate, loss_rate_hw;
  /// Adaptive RED (the first phase's aqm.adaptive): p_max at the output times; else empty.
  std::vector<double> mean_p_max, mean_p_max_hw;
  int replications = 0;
  int threads = 0;
  double seconds = 0.0;
};

/// Simulate `replications` runs of `scenario` and report the ensemble at `times`: whole
/// numbers of slots (continuous time: of time units, the event engine of
/// simulation/event_engine.hpp running the phases), strictly increasing, in [0, total duration].
/// Throws ModelError naming the parameter ("times[i]", "phase[i]...", an option) on bad
/// input, StateSpaceTooLarge over the memory budget, Interrupted when asked to stop.
EnsembleResult simulate_scenario(const Scenario& scenario, const std::vector<double>& times,
                                 const EnsembleOptions& options = {});

}  // namespace aqm
