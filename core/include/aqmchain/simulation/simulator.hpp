// Monte Carlo simulator of the same model (SPEC section 7): slotted models by the slot loop
// (simulation/engine.hpp), continuous-time models (model.time = "continuous") by the event
// engine (simulation/event_engine.hpp), with the same options and result.
//
// Real packets in a FIFO (so front/random discard the right packet and every
// served packet's response time R = D - A is measured), continuous avg by
// default; `discretised` uses the chain's grid and mapping so that the chain is
// the simulator's exact law.  Replications are independent streams of
// xoshiro256** (replication r starts r jumps of 2^128 after the seed's state),
// so the answer depends on the seed only, not on the number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aqmchain/model/model.hpp"

namespace aqm {

/// xoshiro256** 1.0 (Blackman & Vigna), seeded through splitmix64.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Advance by 2^128 steps (independent sub-stream).
  void jump();

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

/// The starting points of replications 0..replications-1: the stream of `seed` advanced
/// by r jumps for replication r.
std::vector<Xoshiro256> replication_streams(uint64_t seed, int replications);

/// The arrival indicators X_1 .. X_slots of a slotted source on its own (no queue): the
/// modulator starts from its stationary law, then in every slot it moves and a packet
/// arrives with the probability of its new state (the simulator's order of events); a batch
/// source: X_t is the number of arrivals, by inversion of its pmf in the new state.
/// xoshiro256** stream of `seed`.  `slots` in [1, 2^31]; continuous-time sources are
/// refused (ModelError naming the parameter).  Polls for interruption.
std::vector<uint8_t> arrival_trace(const Source& source, int64_t slots, uint64_t seed);

/// Trace-driven simulation (docs/trace-fitting.md): the model's queue (buffer, service,
/// EWMA filter, drop function, ECN) fed by the per-slot packet counts `counts` instead of
/// its source.  A slot with k packets is a batch of k (docs/batch-arrivals.md): filter
/// update, the k packets one after another (overflow, else the AQM test with avg_t), the
/// departure of the packet in service at the start of the slot.  One pass over the trace;
/// the first `warmup` slots are not measured, the rest is cut into `batches` contiguous
/// batches whose sums are returned (batch means give the confidence intervals).  The AQM
/// and service draws use the xoshiro256** stream of `seed`.  Refused (ModelError naming
/// the key): continuous time, REDwM, a stateful AQM, traffic classes.
struct TraceSimResult {
  int64_t slots = 0, warmup = 0;
  int batches = 0;
  std::vector<int64_t> arrivals, aqm, marks, overflow, departures, length;  ///< per batch
  std::vector<double> sum_n, sum_n2, sum_q, sum_q2, sum_avg;                 ///< per batch, at slot ends
  std::vector<int64_t> hist_n;  ///< n at the end of each measured slot, 0..N
};
TraceSimResult simulate_trace(const Model& model, const std::vector<int32_t>& counts, int64_t warmup, int batches,
                              uint64_t seed);

/// Bounds checked by SimOptions::validate() (ModelError naming the option).
struct SimLimits {
  static constexpr int64_t max_slots = 10000000000000LL;  ///< 1e13 slots per replication
  static constexpr int max_replications = 10000;
  static constexpr int max_batches = 10000;
  static constexpr int max_threads = 1024;
  static constexpr int64_t max_response = 1000000000LL;  ///< response-histogram bins
};

/// Continuous-time models read `slots`, `warmup` and `sample_every` as times in the model's
/// time unit (the horizon of a replication, its warm-up, the time-series period).
struct SimOptions {
  int64_t slots = 10000000;  ///< slots per replication, warm-up included, in [1, 1e13]
  int64_t warmup = -1;       ///< slots discarded at the start (-1: slots / 10)
  int replications = 4;      ///< in [1, 10000]
  uint64_t seed = 1;
  int batches = 20;          ///< batch means per replication, in [1, 10000]
  bool discretised = false;  ///< avg on the chain's grid with its mapping
  int64_t sample_every = 0;  ///< time series period in slots (0: none), replication 0 only
  int threads = 0;           ///< 0: all cores; at most 1024
  int64_t max_response = 1 << 22;  ///< response-time histogram length (longer R counted in the last bin), in [2, 1e9]
  /// Memory budget: simulate() refuses (StateSpaceTooLarge naming the parameter that
  /// needs the most, before allocating) when sim_memory() exceeds it, and stops with
  /// the same error if the response histograms grow past it while running.
  double memory_limit_bytes = 4.0 * 1024 * 1024 * 1024;
  void validate() const;
};

/// Memory the simulator needs for `model` and `options`, by what drives it: bytes
/// per parameter name ("model.buffer": FIFO per thread, occupancy histograms per batch
/// and their merge; "max_response": response histograms at their expected length
/// (about 20 mean sojourns, capped by max_response), "sample_every": the time series;
/// "grid.k": the discretised grid).  Nothing is allocated.
struct SimMemory {
  std::vector<std::pair<std::string, double>> parts;
  double total = 0.0;
  int threads = 1;
  std::string largest() const;  ///< name of the largest part
};
SimMemory sim_memory(const Model& model, const SimOptions& options);

/// Point estimate and 95 % half-width (Student t over all batches of all replications);
/// the half-width is +infinity when fewer than two batches carry data for the metric.
struct Estimate {
  double value = 0.0;
  double half_width = 0.0;
};

struct PmfEstimate {
  std::vector<double> value;
  std::vector<double> half_width;
};

struct TimeSeries {
  std::vector<int64_t> slot;
  std::vector<int32_t> level;    ///< n at the end of the slot
  std::vector<double> avg;       ///< avg after the slot's update
  std::vector<int64_t> drops;    ///< AQM + overflow drops in the slots since the previous sample
};

/// One traffic class (docs/classes.md): rates per slot, losses per arrival of the class,
/// split by cause (the arrival dropped by an AQM decision, on overflow, or by the flow
/// comparison together with a queued packet of its flow; a queued packet of the class
/// discarded by the drop policy or the modified-RED search), response times of its served
/// packets, and its mean number of packets in the system.
struct ClassEstimate {
  std::string name;
  Estimate arrival_rate, loss, loss_aqm, loss_overflow, loss_flow_compare, loss_pushed_out, mark_prob;
  Estimate throughput, throughput_share, mean_response, var_response, mean_queue, queue_share;
  PmfEstimate response_pmf;
};

/// One flow: its class (index), its index in the class, throughput per slot and loss per arrival.
struct FlowEstimate {
  int cls = 0, flow = 0;
  Estimate throughput, loss;
};

struct SimResult {
  /// Class-aware runs (a model with [[class]] tables, modified RED or the flow comparison):
  /// one entry per class, one per flow (over all classes), Jain's fairness index over the
  /// flows' throughputs, and the loss to the flow comparison (both packets of a match).
  std::vector<ClassEstimate> classes;
  std::vector<FlowEstimate> flows;
  Estimate fairness, loss_flow_compare;
  bool class_aware = false;
  Estimate arrival_rate, throughput, loss, loss_aqm, loss_overflow, mark_prob, pushed_out_prob;
  Estimate mean_system, var_system, mean_queue, var_queue, mean_avg;
  Estimate mean_response, var_response;
  /// Stateful AQM only (docs/stateful-aqm.md): time averages of count (spacing) and of
  /// p_max (adaptive) at slot ends; `stateful` says whether they were measured.
  Estimate mean_count, mean_p_max, mean_max_th;
  bool stateful = false;
  PmfEstimate system_pmf, queue_pmf, response_pmf;
  int64_t measured_slots = 0;   ///< post-warm-up slots over all replications (continuous time: time units)
  int64_t served_packets = 0;
  int observations = 0;         ///< batches used for the intervals
  double seconds = 0.0;
  double slots_per_second = 0.0;  ///< all slots (warm-up included) / wall time (continuous time: time units)
  /// Continuous time: events simulated (arrivals, departures, modulator and grid moves; warm-up
  /// included) and their number per second of wall time; 0 for slotted models.
  int64_t events = 0;
  double events_per_second = 0.0;
  int threads = 0;
  TimeSeries series;
};

SimResult simulate(const Model& model, const SimOptions& options = {});

}  // namespace aqm
