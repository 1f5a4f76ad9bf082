// Trace-driven simulation: the arrivals of the slotted simulator come from a measured (or
// synthetic) trace of per-slot packet counts instead of the model's source.
#include <algorithm>
#include <cmath>

#include "aqmchain/interrupt.hpp"
#include "aqmchain/model/filter.hpp"
#include "aqmchain/simulation/simulator.hpp"
#include "simulation/engine.hpp"

namespace aqm {

TraceSimResult simulate_trace(const Model& model, const std::vector<int32_t>& counts, int64_t warmup, int batches,
                              uint64_t seed) {
  model.validate();
  if (model.time != TimeKind::Discrete)
    fail_param("time", "'discrete' (the trace replay is slotted)", "continuous");
  if (model.aqm.filter != FilterKind::Ewma)
    fail_param("aqm.filter", "'ewma' for a trace replay", "redwm");
  if (model.aqm.stateful())
    fail_param("aqm.spacing", "none, without adaptive p_max or dynamic max_th, for a trace replay",
               "a stateful AQM");
  if (!model.classes.empty() || model.aqm.modified != Modified::None || model.aqm.flow_compare)
    fail_param("classes", "absent (one class, no modified RED or flow comparison) for a trace replay",
               "traffic classes");
  const int64_t slots = static_cast<int64_t>(counts.size());
  if (batches < 2 || batches > 10000) fail_param("batches", "in [2, 10000]", batches);
  if (warmup < 0 || warmup >= slots) fail_param("warmup", detail::cat("in [0, slots = ", slots, ")"), warmup);
  if (slots - warmup < 10 * static_cast<int64_t>(batches))
    fail_param("trace", detail::cat("at least warmup + 10 x batches = ", warmup + 10 * int64_t{batches}, " slots"),
               slots);
  const int N = model.buffer;
  const EwmaFilter filter(model);
  const DropFunction drop = model.resolved_drop();
  const bool per_slot = model.aqm.update == UpdateRule::PerSlot;
  const double ecn = model.aqm.ecn;
  const uint64_t mu_thr = sim::threshold(model.service.mu);
  Xoshiro256 rng(seed);
  TraceSimResult r;
  r.slots = slots, r.warmup = warmup, r.batches = batches;
  for (auto* v : {&r.arrivals, &r.aqm, &r.marks, &r.overflow, &r.departures, &r.length})
    v->assign(static_cast<size_t>(batches), 0);
  for (auto* v : {&r.sum_n, &r.sum_n2, &r.sum_q, &r.sum_q2, &r.sum_avg})
    v->assign(static_cast<size_t>(batches), 0.0);
  r.hist_n.assign(static_cast<size_t>(N) + 1, 0);
  const int64_t measured = slots - warmup;
  int n = 0;
  double avg = 0.0;
  for (int64_t t = 0; t < slots; ++t) {
    if ((t & 0xFFFFF) == 0) check_interrupt();
    // 1. filter update from avg_{t-1} and q_{t-1} (per slot, or in a slot with an arrival)
    const int q = n > 0 ? n - 1 : 0;
    const int k = counts[static_cast<size_t>(t)];
    if (per_slot || k > 0) avg = filter.next(avg, q);
    // 2.-4. (no modulator) the k packets of the slot meet the buffer one after another
    int admitted = 0;
    int64_t aqm_drops = 0, marks = 0, ovf = 0;
    const double p = k > 0 ? drop(avg) : 0.0;
    for (int i = 0; i < k; ++i) {
      if (n + admitted == N) {
        ++ovf;
        continue;
      }
      if (rng.uniform() < p) {
        if (ecn > 0.0 && rng.uniform() < ecn) {
          ++marks;
        } else {
          ++aqm_drops;
          continue;
        }
      }
      ++admitted;
    }
    // 5. departure of the packet in service at the start of the slot
    const bool dep = n > 0 && (rng.next() >> 11) < mu_thr;
    n += admitted - static_cast<int>(dep);
    if (t < warmup) continue;
    const auto b = static_cast<size_t>(std::min<int64_t>((t - warmup) * batches / measured, batches - 1));
    r.arrivals[b] += k, r.aqm[b] += aqm_drops, r.marks[b] += marks, r.overflow[b] += ovf, r.departures[b] += dep;
    ++r.length[b];
    const double qn = n > 0 ? n - 1 : 0;
    r.sum_n[b] += n, r.sum_n2[b] += static_cast<double>(n) * n, r.sum_q[b] += qn, r.sum_q2[b] += qn * qn;
    r.sum_avg[b] += avg;
    ++r.hist_n[static_cast<size_t>(n)];
  }
  return r;
}

}  // namespace aqm
