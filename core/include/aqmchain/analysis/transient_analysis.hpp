// Transient analysis of a model or a piecewise-constant scenario (SPEC 6):
// the law of the chain at a grid of times from a given initial law, and the
// metrics of each law (mean and variance of q and n, mean avg, loss, AQM drop
// and mark probabilities, throughput) plus the queue pmf at chosen times.
//
// Methods: "step" (slotted models: exact p_0 P^t by stepping, with steady-state
// detection), "krylov", "rational_krylov" and "uniformization" (p_0 exp(t G) for
// a continuous-time model's G, or for G = P - I of a slotted one: the slotted
// chain observed at the jumps of a rate-1 Poisson clock), "auto" (step for
// slotted models; for continuous-time ones uniformization when it needs at most
// 1e4 products, about Lambda t, rational_krylov above).  Phases run in order,
// each from the law the previous one ended with, on one state space
// (state/chain.hpp: build_scenario_chains).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "aqmchain/model/scenario.hpp"
#include "aqmchain/solvers/stepping.hpp"
#include "aqmchain/solvers/transient.hpp"
#include "aqmchain/model/queue_chain.hpp"

namespace aqm {

/// Names of the scalar metrics reported over time, in the order of
/// TransientAnalysis::values (written once; the bindings and the CLI read it).
inline const std::vector<std::string>& transient_metric_names() {
  static const std::vector<std::string> names = {
      "mean_queue", "var_queue", "mean_system", "var_system", "mean_avg", "arrival_rate",
      "throughput", "loss",      "loss_aqm",    "loss_overflow", "mark_prob"};
  return names;
}

struct TransientAnalysisOptions {
  TransientMethod method = TransientMethod::Auto;
  TransientOptions kernel;  ///< krylov / uniformization: tol, basis, budgets, projection
  StepOptions step;         ///< step: steady-state detection, step budget
  /// Times at which the queue pmf is kept (each must be one of the output times).
  std::vector<double> pmf_times;
  /// Further metrics over time: E[f] under the law at each output time, for state
  /// functions f (one value per state of the chain), e.g. p_max of adaptive RED.
  std::vector<std::string> observable_names;
  std::vector<std::vector<double>> observables;
  /// Called after each output time with (time reached, last time); runs on the
  /// computing thread.
  std::function<void(double, double)> progress;
  void validate() const;
};

struct TransientAnalysis : ConvergenceReport<TransientMethod> {
  std::vector<double> times;               ///< output times (absolute)
  std::vector<int32_t> phase;              ///< phase whose parameters hold just after each time
  std::vector<std::vector<double>> values;  ///< values[m][k]: metric transient_metric_names()[m] at times[k]
  std::vector<double> pmf_times;
  std::vector<std::vector<double>> queue_pmf;  ///< queue pmf at each of pmf_times
  std::vector<std::vector<double>> observable_values;  ///< [i][k]: E[observables[i]] at times[k]
  std::vector<double> final_law;           ///< the law at the last time reached
  size_t outputs = 0;                      ///< times[0 .. outputs) were produced
  // accounts, summed over the phases
  long steps = 0;                          ///< slots stepped / Krylov steps / Poisson chunks
  long rejected_steps = 0;
  double error_sum = 0.0;                  ///< Krylov local error estimates / truncation bounds
  double hump = 1.0, roundoff = 0.0, clipped_mass = 0.0;
  std::vector<double> steady_at;           ///< per phase: time steady state was detected, or -1
  std::vector<double> phase_boundaries;    ///< start of each phase, then the end of the last
};

/// The default initial law: the empty system (every component 0, except adaptive RED's
/// p_max at its start value) with the modulator in its stationary law.
std::vector<double> empty_system_law(const QueueChain& chain);
/// All mass on the state with these component values (descriptor order); ModelError
/// naming 'p0' when the tuple is out of range or not a state of the chain.
std::vector<double> point_law(const QueueChain& chain, const std::vector<int32_t>& values);

/// Checks output times: at least one, each finite and >= 0, sorted; ModelError naming 'times'.
void check_output_times(const std::vector<double>& times);

/// Checks that `p` is a probability vector over n states (n entries, each finite and >= 0,
/// summing to 1 within 1e-8); ModelError naming 'p0' otherwise.
void check_initial_law(const std::vector<double>& p, int32_t n);

/// One phase per chain (chains from build_scenario_chains, or a single chain with a
/// one-phase scenario of duration >= the last time).  `p0` empty: empty_system_law.
/// Non-convergence (a budget) is the status, with the outputs produced so far.
TransientAnalysis analyse_transient(const std::vector<const QueueChain*>& chains, const Scenario& scenario,
                                    const std::vector<double>& p0, const std::vector<double>& times,
                                    const TransientAnalysisOptions& options = {});

}  // namespace aqm
