// Internal: the event-driven simulator of continuous-time models (model.time = "continuous").
//
// The system: Poisson or MMPP arrivals, one exponential server, a buffer of N places counting
// the packet in service, real packets in a FIFO (their arrival times, so that every served
// packet's sojourn time is measured).  Between two events nothing but avg changes, and every
// event rate (arrival lam[m], departure mu when n >= 1, modulator moves, and with a grid avg's
// moves) is constant there, so the next event is one exponential draw of the total rate and
// its kind one uniform against the rates.  The random numbers: at the start the modulator
// state (one uniform, MMPP only) and the first event time; then per event, in this order,
//   1. the kind of the event: u R against the cumulative rates of the state in the order
//      arrival, departure, avg up, avg down (grid only), modulator move (the target in the
//      same draw);
//   2. an arrival's fate: one uniform u against disjoint intervals (default semantics:
//      [0, p e) marked, [p e, p) dropped, [p, 1) admitted; at n = N it is lost whatever u);
//   3. a push-out victim (random discard policy, a rejected arrival with waiting packets);
//   4. the time to the next event, -log(1 - u) / R' with R' the total rate of the new state.
// Class-aware models (traffic classes, modified RED, the flow comparison: docs/classes.md,
// "Continuous time") run the same loop with its class part compiled in: every FIFO place
// also holds the packet's record (flow, hence class, and ECN capability).  An arrival draws,
// before its fate's uniform, its class (only with two or more classes), its flow (only when
// its class has several) and its ECN capability (modified RED, when the class's probability
// is strictly between 0 and 1), as the slot loop does; after the fate's uniform the packet
// the flow comparison picks (avg >= min_th, packets waiting), then the push-out victim or
// modified RED's search.  Without modified RED the fate's uniform reads the class's ECN
// probability e in the intervals above; under modified RED u < p is the AQM decision.  One
// class of one flow therefore draws what the classless model draws: its numbers, bit for bit.
//
// avg, by semantics:
// - default, continuous: d avg/dt = w (q - avg) with q = max(n - 1, 0) waiting packets,
//   integrated exactly between events (avg(t0 + s) = q + (avg(t0) - q) e^{-w s}), and its
//   time integral in closed form (q s + (avg(t0) - q)(1 - e^{-w s}) / w);
// - default, discretised: avg on the chain's resolved grid, one point up at rate
//   w max(q - g_i, 0) / (g_{i+1} - g_i) and down at rate w max(g_i - q, 0) / (g_i - g_{i-1})
//   (the chain's upwind dynamics, so the chain is the simulator's exact law);
// - ns-3 (aqm.semantics = "ns3", docs/ns3.md): avg jumps at every arrival, piecewise constant
//   in between; the rules of ns-3's RedQueueDisc (idle correction, count / wait spacing,
//   nQueued > 1, the first-arrival exemption, forced drops, ECN and hard drop) are written
//   here on their own, not shared with the chain.  The count is exact (no cap).  Discretised:
//   after each arrival's update avg is split between its two neighbouring grid points (mean
//   kept; one more uniform, drawn before the fate's) and the tests read that point, as the
//   chain does; the chain's count cap, where its truncated mass is negligible, is not applied.
//   An arrival's fate: forced, ECN-capable iff u < ecn; early, dropped iff u < p_a, marked
//   instead iff u < p_a ecn.
//
// Time is the model's time unit.  The warm-up and the batches are stretches of time: an event
// drawn beyond the end of a stretch stays pending (the rates are constant, so the draw stays
// valid) and the state is only advanced to the boundary.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "aqmchain/model/model.hpp"
#include "aqmchain/simulation/simulator.hpp"
#include "simulation/engine.hpp"
#include "simulation/passage_target.hpp"

namespace aqm::sim::ct {

/// What a stretch of simulated time adds up.
struct Batch {
  double time = 0.0;  ///< length of the stretch
  int64_t arrivals = 0, aqm = 0, marks = 0, overflow = 0, departures = 0, admitted = 0, pushed = 0;
  int64_t forced = 0;                     ///< ns-3 semantics: of `aqm`, the forced drops
  double sum_avg = 0.0;                   ///< time integral of avg
  double sum_r = 0.0, sum_r2 = 0.0;       ///< sojourn times of the packets that left in the stretch
  std::vector<double> time_n;             ///< N + 1 bins: time spent with n packets in the system
  /// Class-aware runs: packets lost to the flow comparison (two per match), the counts per
  /// class and flow (ClassTally: its response histograms and sum_n stay empty / zero), and
  /// per class the time integral of its packets in the system and the sum and sum of
  /// squares of the sojourn times of its packets that left.
  int64_t flow_compare = 0;
  sim::ClassTally ct;
  std::vector<double> class_time, class_r, class_r2;
};

/// Everything the event loop reads about one model.
struct Params {
  enum class Mode { Exact, Grid, Ns3 };
  Mode mode = Mode::Exact;
  int N = 1, M = 1;
  double mu = 1.0, w = 0.0, ecn = 0.0;
  std::vector<double> lam;   ///< arrival rate per modulator state
  std::vector<double> qout;  ///< rate of leaving modulator state m
  /// Per modulator state the targets with a positive rate and their cumulative rates.
  std::vector<std::vector<int>> qto;
  std::vector<std::vector<double>> qcum;
  std::vector<double> pi;  ///< stationary modulator law (initial state)
  DropPolicy policy = DropPolicy::Tail;
  DropFunction drop;
  DropKindSpec::Eval p_eval = nullptr;  ///< the drop kind's formula (the registry's)
  double p(double avg) const { return p_eval(drop, avg); }
  /// Grid: points, p at them, w / (g_{i+1} - g_i) (0 at the top), w / (g_i - g_{i-1}) (0 at 0).
  std::vector<double> points, pdrop, up, down;
  /// ns-3 semantics: the per-arrival weight's log(1 - w), ptc, the switches, the spacing and
  /// where the early region starts (min_th; kinds without thresholds: where p_b > 0).
  double log1mw = 0.0, ptc = 0.0, min_th = 0.0;
  bool idle_correction = true, hard_drop = true, thresholds = true;
  /// ns-3 semantics, discretised: avg mapped to the grid (`points`, p at them in `pdrop`)
  /// after each arrival's update by the split mapping (two neighbours, mean kept).
  bool ns3_grid = false;
  Spacing spacing = Spacing::None;
  /// Traffic classes, modified RED, the flow comparison (docs/classes.md): the packets carry
  /// their flow and ECN capability.  Empty: the classless loop.
  std::optional<ClassParams> cls;

  Params(const Model& m, bool discretised);
  /// An empty tally of one stretch for this model (N + 1 time bins; the class counts).
  Batch empty_batch() const;
};

/// One replication: the empty system at time 0 (avg 0, the modulator from its stationary
/// law), warm-up [0, warmup), then `out.size()` batches of equal length up to `horizon`;
/// replication 0 records the time series (`ts`, every `sample_every` time units) when asked.
/// Returns the number of events simulated (warm-up included).  Polls `stop` and interrupts.
int64_t run(const Params& P, double horizon, double warmup, int64_t sample_every, Xoshiro256 rng,
            std::vector<Batch>& out, TimeSeries* ts, const std::atomic<bool>& stop);

/// The start of a hitting-time run: the empty system (avg 0, the modulator from its
/// stationary law; `empty`) or n packets, the modulator state m, avg (grid index g when the
/// run is discretised).
struct PassageStart {
  bool empty = true;
  int n = 0, m = 0, g = 0;
  double avg = 0.0;
};

/// One hitting-time run (simulation/passage.hpp): from `start` until the state is in
/// `target` or `horizon`.  Returns T (+infinity: not by the horizon; NaN: stopped).
/// at_out[i] = the counts up to min(out[i], T); at_hit = the counts up to min(T, horizon);
/// `events` grows by the events simulated.  Polls `stop` and interrupts.
double run_passage(const Params& P, const Target& target, const PassageStart& start, Xoshiro256 rng,
                   double horizon, const std::vector<double>& out, std::vector<Counts>& at_out, Counts& at_hit,
                   int64_t& events, const std::atomic<bool>& stop);

/// One replication of a scenario (simulate_scenario): the system carried across phases.
/// Every phase's Params must have the first one's N, modulator size and grid size.
class Replica {
 public:
  /// The empty system at time 0, avg 0, the modulator from `first`'s stationary law.
  Replica(const Params& first, Xoshiro256& rng);
  ~Replica();
  /// A new phase begins at the current time: its rates hold from now (the pending event is
  /// drawn again from them; the exponential clocks have no memory).
  void enter(const Params& P, Xoshiro256& rng);
  /// Events of phase P up to time `until` (>= the current time).  Polls `stop` and interrupts.
  void run_until(const Params& P, Xoshiro256& rng, double until, const std::atomic<bool>& stop);
  int n() const;
  double avg(const Params& P) const;
  int64_t arrivals() const;
  int64_t losses() const;  ///< AQM drops, overflows and flow-comparison losses (ECN marks are not losses)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace aqm::sim::ct
