// Simulator (SPEC 7): the order of events of SPEC 3 with real packets; continuous-time models
// run on the event engine (simulation/event_engine.hpp) with the same options and statistics.
#include "aqmchain/simulation/simulator.hpp"

#include "aqmchain/interrupt.hpp"
#include "aqmchain/model/filter.hpp"
#include "simulation/engine.hpp"
#include "simulation/event_engine.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>

namespace aqm {

// ------------------------------------------------------------------ RNG

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

Xoshiro256::Xoshiro256(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

void Xoshiro256::jump() {
  static const uint64_t J[] = {0x180ec6d33cfd0abaULL, 0xd5a61266f0c9392cULL, 0xa9582618e03fc9aaULL,
                               0x39abdc4529b1661cULL};
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (uint64_t j : J)
    for (int b = 0; b < 64; ++b) {
      if (j & (1ULL << b)) {
        s0 ^= s_[0];
        s1 ^= s_[1];
        s2 ^= s_[2];
        s3 ^= s_[3];
      }
      next();
    }
  s_[0] = s0;
  s_[1] = s1;
  s_[2] = s2;
  s_[3] = s3;
}

std::vector<Xoshiro256> replication_streams(uint64_t seed, int replications) {
  std::vector<Xoshiro256> v;
  v.reserve(static_cast<size_t>(std::max(replications, 0)));
  Xoshiro256 rng(seed);
  for (int r = 0; r < replications; ++r) {
    if (r > 0) rng.jump();
    v.push_back(rng);
  }
  return v;
}

// ------------------------------------------------------------------ options

void SimOptions::validate() const {
  if (slots < 1 || slots > SimLimits::max_slots) fail_param("slots", "in [1, 1e13]", slots);
  if (replications < 1 || replications > SimLimits::max_replications)
    fail_param("replications", detail::cat("in [1, ", SimLimits::max_replications, "]"), replications);
  if (batches < 1 || batches > SimLimits::max_batches)
    fail_param("batches", detail::cat("in [1, ", SimLimits::max_batches, "]"), batches);
  if (replications * static_cast<int64_t>(batches) < 2)
    fail_param("batches", "such that replications x batches >= 2 (needed for a confidence interval)", batches);
  if (warmup < -1 || warmup >= slots)
    fail_param("warmup", detail::cat("-1 (the default, slots / 10) or in [0, slots = ", slots, ")"), warmup);
  const int64_t w = warmup < 0 ? slots / 10 : warmup;
  if (slots - w < 100 * static_cast<int64_t>(batches))
    fail_param("slots", detail::cat("> warmup + 100 x batches = ", w + 100 * static_cast<int64_t>(batches),
                                    " (warmup ", w, ", batches ", batches, ")"),
               slots);
  if (sample_every < 0) fail_param("sample_every", ">= 0", sample_every);
  if (threads < 0 || threads > SimLimits::max_threads)
    fail_param("threads", detail::cat("in [0, ", SimLimits::max_threads, "] (0: all cores)"), threads);
  if (max_response < 2 || max_response > SimLimits::max_response)
    fail_param("max_response", "in [2, 1e9]", max_response);
  if (!(memory_limit_bytes > 0.0) || !std::isfinite(memory_limit_bytes))
    fail_param("memory_limit_bytes", "> 0 and finite", memory_limit_bytes);
}

namespace {
int thread_count(const SimOptions& o) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::min(o.replications, o.threads > 0 ? o.threads : hw);
}

/// Expected length of a response histogram: R is at most the service of the packets
/// ahead (<= N) plus its own, mean <= (N + 1) / mu; 20 means (plus slack) hold all but a
/// vanishing fraction.  Longer ones grow the histogram at run time, under the budget.
int64_t expected_response_bins(const Model& m, const SimOptions& o) {
  const double guess = 20.0 * (m.buffer + 1.0) / m.service.mu + 1024.0;
  return static_cast<int64_t>(std::min({guess, static_cast<double>(o.max_response), static_cast<double>(o.slots) + 1.0}));
}
}  // namespace

std::string SimMemory::largest() const {
  std::string name = "model.buffer";
  double most = -1.0;
  for (const auto& [k, v] : parts)
    if (v > most) most = v, name = k;
  return name;
}

SimMemory sim_memory(const Model& m, const SimOptions& o) {
  SimMemory r;
  r.threads = thread_count(o);
  const double N1 = m.buffer + 1.0;
  const double RB = static_cast<double>(o.replications) * o.batches;
  double fifo = 1.0;
  while (fifo < N1) fifo *= 2.0;
  if (m.time == TimeKind::Continuous) {
    // the event engine: a FIFO of arrival times per running replication, the time spent at
    // each n per batch and their merge; no response histogram (sums per batch); the grid
    // (points, p, two rates) when discretised
    const double buffer = r.threads * fifo * 8.0 + (RB + 2.0) * N1 * 8.0 + N1 * (8.0 + 2 * 16.0 + 2 * 16.0);
    const double series = o.sample_every > 0 ? static_cast<double>(o.slots / o.sample_every) * (8 + 4 + 8 + 8) : 0.0;
    const double grid = o.discretised ? static_cast<double>(m.grid.size(m.buffer)) * 8.0 * 4.0 : 0.0;
    // class-aware runs: the packet records of the FIFO, per-flow and per-class counters per batch
    const double flows = sim::class_aware(m) ? r.threads * fifo * 4.0 + (RB + 2.0) * m.total_flows() * 3.0 * 8.0 +
                                                   (RB + 2.0) * m.class_count() * 12.0 * 8.0
                                             : 0.0;
    r.parts = {{"model.buffer", buffer}, {"max_response", 0.0}, {"sample_every", series}, {"grid.k", grid},
               {"class.flows", flows}};
    for (const auto& p : r.parts) r.total += p.second;
    return r;
  }
  // FIFO per running replication; occupancy histogram per batch; the merge (summed
  // histogram, two pmfs with half-widths, long double totals).
  const double buffer = r.threads * fifo * 8.0 + RB * N1 * 8.0 + N1 * (8.0 + 2 * 16.0 + 2 * 16.0);
  // Response histograms (capacity up to twice the length: they grow by doubling) and the response pmf.
  const double bins = static_cast<double>(expected_response_bins(m, o));
  const double response = RB * 2.0 * bins * 8.0 + bins * (16.0 + 16.0);
  const double series = o.sample_every > 0 ? static_cast<double>(o.slots / o.sample_every) * (8 + 4 + 8 + 8) : 0.0;
  // grid points, p at them, and the table of update targets when it is used
  const double grid = o.discretised ? static_cast<double>(m.grid.size(m.buffer)) * 8.0 * 3.0 +
                                          sim::target_table_bytes(m, static_cast<double>(o.slots) * o.replications)
                                    : 0.0;
  // class-aware runs: the packet records of the FIFO, per-flow counters per batch (the
  // per-class response histograms grow at run time, under the budget)
  const double flows = sim::class_aware(m) ? r.threads * fifo * 4.0 + RB * m.total_flows() * 3.0 * 8.0 +
                                                 RB * m.class_count() * 12.0 * 8.0
                                           : 0.0;
  r.parts = {{"model.buffer", buffer}, {"max_response", response}, {"sample_every", series}, {"grid.k", grid},
             {"class.flows", flows}};
  for (const auto& p : r.parts) r.total += p.second;
  return r;
}

// ------------------------------------------------------------------ one replication

namespace {

struct Batch {
  int64_t slots = 0, arrivals = 0, aqm = 0, marks = 0, overflow = 0, departures = 0, admitted = 0, pushed = 0;
  int64_t flow_compare = 0;
  sim::ClassTally ct;  ///< class-aware runs
  std::vector<int64_t> csum_r;
  std::vector<__int128> csum_r2;
  long double sum_avg = 0, sum_count = 0, sum_pmax = 0, sum_maxth = 0;
  int64_t sum_r = 0;
  __int128 sum_r2 = 0;
  std::vector<int64_t> hist_n, hist_r;
};

/// The slots of one replication, in stretches of at most 4096 slots (each ends on a
/// batch boundary and a time-series sample where there is one), with a stop and
/// interrupt check between stretches.
void run(const sim::SlotParams& P, sim::ChunkFn warm_step, sim::ChunkFn step, const SimOptions& o, int64_t warmup, Xoshiro256 rng,
         std::vector<Batch>& batches, TimeSeries* ts, sim::ResponseBudget& budget, const std::atomic<bool>& stop) {
  const int64_t measured = o.slots - warmup;
  const int64_t per_batch = measured / o.batches;
  const size_t hist_r0 = static_cast<size_t>(std::min<int64_t>(2, o.max_response));
  batches.assign(o.batches, Batch{});
  for (auto& b : batches) {
    b.hist_n.assign(P.N + 1, 0);
    b.hist_r.assign(hist_r0, 0);
  }
  sim::SimState s(P.N);
  // Start: empty system, avg 0, modulator drawn from its stationary law.
  s.start(P.pi, rng);
  const int64_t every = ts ? o.sample_every : 0;
  if (every > 0) {  // exact size: counted by sim_memory
    const size_t samples = static_cast<size_t>(o.slots / every);
    ts->slot.reserve(samples);
    ts->level.reserve(samples);
    ts->avg.reserve(samples);
    ts->drops.reserve(samples);
  }
  int64_t t = 1, ts_drops = 0;
  auto stretch = [&](sim::ChunkFn fn, sim::Tally& T, int64_t end) {
    while (t <= end) {
      int64_t last = std::min(end, t + 4095);
      if (every > 0) last = std::min(last, (t + every - 1) / every * every);  // the next sample slot
      const int64_t drops_before = T.aqm + T.overflow + T.flow_compare;
      fn(P, s, rng, t, last, T);
      ts_drops += T.aqm + T.overflow + T.flow_compare - drops_before;
      t = last + 1;
      if (every > 0 && last % every == 0) {
        ts->slot.push_back(last);
        ts->level.push_back(s.n);
        ts->avg.push_back(s.avg);
        ts->drops.push_back(ts_drops);
        ts_drops = 0;
      }
      if (stop.load(std::memory_order_relaxed)) return false;
      check_interrupt();
    }
    return true;
  };
  {  // warm-up: no response times; tallied into a scratch histogram that is dropped
    std::vector<int64_t> hn(P.N + 1, 0);
    sim::Tally warm;
    warm.hist_n = hn.data();
    if (!stretch(warm_step, warm, warmup)) return;
  }
  for (int b = 0; b < o.batches; ++b) {
    Batch& B = batches[b];
    const int64_t first = t, end = b + 1 < o.batches ? warmup + (b + 1) * per_batch : o.slots;
    sim::Tally T;
    T.hist_n = B.hist_n.data();
    T.hist_r = &B.hist_r;
    T.budget = &budget;
    if (P.cls) {
      B.ct.reset(P.cls->C, P.cls->F, true);
      T.ct = &B.ct;
    }
    const bool go_on = stretch(step, T, end);
    B.flow_compare = T.flow_compare;
    if (P.cls) {
      const int C = P.cls->C;
      B.csum_r.assign(static_cast<size_t>(C), 0);
      B.csum_r2.assign(static_cast<size_t>(C), 0);
      for (int c = 0; c < C; ++c) {
        sim::Tally tc;  // the class's histogram and tail sums in the shape response_sums reads
        tc.tail_r = B.ct.tail_r[static_cast<size_t>(c)];
        tc.tail_r2 = B.ct.tail_r2[static_cast<size_t>(c)];
        sim::response_sums(B.ct.hist_r[static_cast<size_t>(c)], o.max_response, tc, B.csum_r[static_cast<size_t>(c)],
                           B.csum_r2[static_cast<size_t>(c)]);
      }
    }
    B.slots = t - first;
    B.arrivals = T.arrivals, B.aqm = T.aqm, B.marks = T.marks, B.overflow = T.overflow;
    B.departures = T.departures, B.admitted = T.admitted, B.pushed = T.pushed;
    B.sum_avg = T.sum_avg;
    B.sum_count = T.sum_count, B.sum_pmax = T.sum_pmax, B.sum_maxth = T.sum_maxth;
    B.hist_r[0] = 0;  // bin 0 counted the slots without a departure (R >= 1)
    sim::response_sums(B.hist_r, o.max_response, T, B.sum_r, B.sum_r2);
    if (!go_on) return;
  }
}

// ------------------------------------------------------------------ statistics

/// Half-width from batch values (NaN-free: batches without data are skipped).
double half_width(const std::vector<double>& x) {
  std::vector<double> v;
  for (double a : x)
    if (std::isfinite(a)) v.push_back(a);
  if (v.size() < 2) return INFINITY;  // no interval from fewer than two batches with data
  long double m = 0, s2 = 0;
  for (double a : v) m += a;
  m /= v.size();
  for (double a : v) s2 += (a - m) * (a - m);
  s2 /= (v.size() - 1);
  return sim::t975(static_cast<int>(v.size()) - 1) * std::sqrt(static_cast<double>(s2 / v.size()));
}

template <class BS, class F>
Estimate ratio(const BS& bs, F num_den) {
  long double num = 0, den = 0;
  std::vector<double> xs;
  for (const auto& b : bs) {
    const auto [a, d] = num_den(b);
    num += a;
    den += d;
    xs.push_back(d > 0 ? static_cast<double>(a / d) : NAN);
  }
  return {den > 0 ? static_cast<double>(num / den) : 0.0, half_width(xs)};
}

struct Mom {
  double mean, var;
};
template <class T>
Mom hist_moments(const std::vector<T>& h, int shift) {
  long double n = 0, s = 0, s2 = 0;
  for (size_t k = 0; k < h.size(); ++k) {
    const long double x = std::max<long double>(static_cast<long double>(k) - shift, 0);
    n += h[k];
    s += x * h[k];
    s2 += x * x * h[k];
  }
  if (n == 0) return {NAN, NAN};
  const long double mean = s / n;
  return {static_cast<double>(mean), static_cast<double>(s2 / n - mean * mean)};
}

template <class BS, class H>
PmfEstimate pmf_estimate_of(const BS& bs, H hist, size_t len, bool queue) {
  // Bin t of the output counts n = t (system) or q = t, i.e. n = t + 1 and, for t = 0,
  // n = 0 too (queue).  One bin at a time: O(batches + len) memory.
  PmfEstimate out;
  const size_t L = queue ? len - 1 : len;
  auto count = [&](const auto& v, size_t t) -> long double {
    auto at = [&](size_t k) -> long double { return k < v.size() && k < len ? static_cast<long double>(v[k]) : 0; };
    if (!queue) return at(t);
    return t == 0 ? at(0) + at(1) : at(t + 1);
  };
  std::vector<long double> sums(bs.size(), 0);
  long double all = 0;
  for (size_t b = 0; b < bs.size(); ++b) {
    for (auto c : hist(bs[b])) sums[b] += c;
    all += sums[b];
  }
  out.value.resize(L);
  out.half_width.resize(L);
  std::vector<double> per(bs.size());
  for (size_t t = 0; t < L; ++t) {
    long double tot = 0;
    for (size_t b = 0; b < bs.size(); ++b) {
      const long double f = count(hist(bs[b]), t);
      tot += f;
      per[b] = sums[b] > 0 ? static_cast<double>(f / sums[b]) : NAN;
    }
    out.value[t] = all > 0 ? static_cast<double>(tot / all) : 0.0;
    out.half_width[t] = half_width(per);
  }
  return out;
}

PmfEstimate pmf_estimate(const std::vector<Batch>& bs, const std::vector<int64_t> Batch::*h, size_t len,
                         bool queue) {
  return pmf_estimate_of(bs, [h](const Batch& b) -> const std::vector<int64_t>& { return b.*h; }, len, queue);
}

// What class_estimates reads of a batch, slotted (Batch) or continuous-time (sim::ct::Batch):
// its length (slots or time), per class the time (slot) integral of its packets in the system
// and the sum and sum of squares of its packets' response times.
long double length(const Batch& b) { return b.slots; }
long double length(const sim::ct::Batch& b) { return b.time; }
long double class_area(const Batch& b, size_t k) { return b.ct.sum_n[k]; }
long double class_area(const sim::ct::Batch& b, size_t k) { return b.class_time[k]; }
long double class_r(const Batch& b, size_t k) { return static_cast<long double>(b.csum_r[k]); }
long double class_r(const sim::ct::Batch& b, size_t k) { return b.class_r[k]; }
long double class_r2(const Batch& b, size_t k) { return static_cast<long double>(b.csum_r2[k]); }
long double class_r2(const sim::ct::Batch& b, size_t k) { return b.class_r2[k]; }

/// Per-class and per-flow estimates and Jain's fairness index (class-aware runs); rates per
/// slot or per unit time.  The response-time pmf per class: slotted runs only (in continuous
/// time the sojourn time has a density).
template <class B>
void class_estimates(const Model& model, const std::vector<B>& bs, SimResult& res) {
  using LD = long double;
  using Batch = B;
  const int C = model.class_count(), F = model.total_flows();
  res.class_aware = true;
  res.loss_flow_compare = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.flow_compare, b.arrivals); });
  for (int c = 0; c < C; ++c) {
    const size_t k = static_cast<size_t>(c);
    ClassEstimate e;
    e.name = model.class_name(c);
    auto per_arrival = [&](const std::vector<int64_t> sim::ClassTally::*v) {
      return ratio(bs, [&](const Batch& b) { return std::pair<LD, LD>((b.ct.*v)[k], b.ct.arr[k]); });
    };
    e.arrival_rate = ratio(bs, [&](const Batch& b) { return std::pair<LD, LD>(b.ct.arr[k], length(b)); });
    e.loss_aqm = per_arrival(&sim::ClassTally::aqm);
    e.loss_overflow = per_arrival(&sim::ClassTally::ovf);
    e.loss_flow_compare = per_arrival(&sim::ClassTally::fc);
    e.loss_pushed_out = per_arrival(&sim::ClassTally::push);
    e.mark_prob = per_arrival(&sim::ClassTally::marks);
    e.loss = ratio(bs, [&](const Batch& b) {
      return std::pair<LD, LD>(b.ct.aqm[k] + b.ct.ovf[k] + b.ct.fc[k] + b.ct.push[k], b.ct.arr[k]);
    });
    e.throughput = ratio(bs, [&](const Batch& b) { return std::pair<LD, LD>(b.ct.dep[k], length(b)); });
    e.throughput_share = ratio(bs, [&](const Batch& b) { return std::pair<LD, LD>(b.ct.dep[k], b.departures); });
    e.mean_queue = ratio(bs, [&](const Batch& b) { return std::pair<LD, LD>(class_area(b, k), length(b)); });
    e.queue_share = ratio(bs, [&](const Batch& b) {
      LD all = 0;
      for (size_t j = 0; j < static_cast<size_t>(C); ++j) all += class_area(b, j);
      return std::pair<LD, LD>(class_area(b, k), all);
    });
    e.mean_response = ratio(bs, [&](const Batch& b) { return std::pair<LD, LD>(class_r(b, k), b.ct.dep[k]); });
    LD sr = 0, sr2 = 0, nd = 0;
    std::vector<double> bv;
    for (const auto& b : bs) {
      const LD r1 = class_r(b, k), r2 = class_r2(b, k), d = b.ct.dep[k];
      sr += r1, sr2 += r2, nd += d;
      bv.push_back(d > 1 ? static_cast<double>(r2 / d - (r1 / d) * (r1 / d)) : NAN);
    }
    e.var_response = {nd > 0 ? static_cast<double>(sr2 / nd - (sr / nd) * (sr / nd)) : 0.0, half_width(bv)};
    if constexpr (std::is_same_v<B, ::aqm::Batch>) {
      size_t rlen = 2;
      for (const auto& b : bs) rlen = std::max(rlen, b.ct.hist_r[k].size());
      e.response_pmf = pmf_estimate_of(
          bs, [k](const Batch& b) -> const std::vector<int64_t>& { return b.ct.hist_r[k]; }, rlen, false);
      if (!e.response_pmf.value.empty()) e.response_pmf.value[0] = 0.0, e.response_pmf.half_width[0] = 0.0;
    }
    res.classes.push_back(std::move(e));
  }
  std::vector<int> flow_class;
  for (int c = 0; c < C; ++c) flow_class.insert(flow_class.end(), model.class_flows(c), c);
  for (int f = 0, first = 0; f < F; ++f) {
    if (f > 0 && flow_class[static_cast<size_t>(f)] != flow_class[static_cast<size_t>(f - 1)]) first = f;
    FlowEstimate e;
    e.cls = flow_class[static_cast<size_t>(f)];
    e.flow = f - first;
    const size_t k = static_cast<size_t>(f);
    e.throughput = ratio(bs, [&](const Batch& b) { return std::pair<LD, LD>(b.ct.f_dep[k], length(b)); });
    e.loss = ratio(bs, [&](const Batch& b) { return std::pair<LD, LD>(b.ct.f_lost[k], b.ct.f_arr[k]); });
    res.flows.push_back(std::move(e));
  }
  // Jain's index (sum x)^2 / (F sum x^2) over the flows' throughputs: pooled, and per batch for the interval
  auto jain = [F](auto x_of) {
    LD s1 = 0, s2 = 0;
    for (int f = 0; f < F; ++f) {
      const LD x = x_of(f);
      s1 += x, s2 += x * x;
    }
    return s2 > 0 ? static_cast<double>(s1 * s1 / (F * s2)) : NAN;
  };
  std::vector<double> per;
  for (const auto& b : bs) per.push_back(jain([&](int f) { return static_cast<LD>(b.ct.f_dep[static_cast<size_t>(f)]); }));
  const double pooled = jain([&](int f) {
    LD d = 0;
    for (const auto& b : bs) d += b.ct.f_dep[static_cast<size_t>(f)];
    return d;
  });
  res.fairness = {std::isfinite(pooled) ? pooled : 0.0, half_width(per)};
}

}  // namespace

namespace {
std::string memory_breakdown(const SimMemory& need) {
  std::string s;
  for (const auto& [k, v] : need.parts)
    if (v > 0) s += detail::cat(s.empty() ? "" : ", ", k, " ", v / 1e9, " GB");
  return s;
}

SimResult simulate_impl(const Model& model, const SimOptions& o, const SimMemory& need) {
  const double total_slots = static_cast<double>(o.slots) * o.replications;
  const sim::SlotParams P(model, o.discretised, o.discretised && sim::target_table_bytes(model, total_slots) > 0.0,
                          o.max_response);
  const sim::ChunkFn step = sim::chunk_function(P, true), warm_step = sim::chunk_function(P, false);
  const int64_t warmup = o.warmup < 0 ? o.slots / 10 : o.warmup;
  const std::vector<Xoshiro256> streams = replication_streams(o.seed, o.replications);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<Batch>> per_rep(o.replications);
  SimResult res;
  const int threads = need.threads;
  std::atomic<bool> stop{false};
  sim::ResponseBudget budget;
  budget.limit = o.memory_limit_bytes;
  double response_part = 0.0;
  for (const auto& [k, v] : need.parts)
    if (k == "max_response") response_part = v;
  // The response histograms may use the budget the rest of the estimate leaves.
  budget.bytes_left = static_cast<int64_t>(std::max(0.0, o.memory_limit_bytes - (need.total - response_part)));
  sim::run_replications(threads, o.replications, stop, [&](int r) {
    run(P, warm_step, step, o, warmup, streams[r], per_rep[r], r == 0 ? &res.series : nullptr, budget, stop);
    return true;
  });
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.threads = threads;
  res.slots_per_second = static_cast<double>(o.slots) * o.replications / std::max(res.seconds, 1e-9);

  std::vector<Batch> bs;
  for (auto& v : per_rep)
    for (auto& b : v) bs.push_back(std::move(b));
  res.observations = static_cast<int>(bs.size());
  for (const auto& b : bs) {
    res.measured_slots += b.slots;
    res.served_packets += b.departures;
  }
  using LD = long double;
  res.arrival_rate = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.arrivals, b.slots); });
  res.throughput = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.departures, b.slots); });
  res.loss = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.aqm + b.overflow + b.flow_compare, b.arrivals); });
  res.loss_aqm = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.aqm, b.arrivals); });
  res.loss_overflow = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.overflow, b.arrivals); });
  res.mark_prob = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.marks, b.arrivals); });
  res.pushed_out_prob = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.pushed, b.admitted); });
  res.mean_avg = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.sum_avg, b.slots); });
  if (model.aqm.stateful()) {
    res.stateful = true;
    res.mean_count = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.sum_count, b.slots); });
    res.mean_p_max = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.sum_pmax, b.slots); });
    res.mean_max_th = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.sum_maxth, b.slots); });
  }
  res.mean_response =
      ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(static_cast<LD>(b.sum_r), b.departures); });

  std::vector<int64_t> hn(model.buffer + 1, 0);
  LD sr = 0, sr2 = 0, nd = 0;
  std::vector<double> bms, bvs, bmq, bvq, bvr;
  for (const auto& b : bs) {
    for (size_t k = 0; k < hn.size(); ++k) hn[k] += b.hist_n[k];
    const LD br = static_cast<LD>(b.sum_r), br2 = static_cast<LD>(b.sum_r2);
    sr += br;
    sr2 += br2;
    nd += b.departures;
    const Mom s = hist_moments(b.hist_n, 0), q = hist_moments(b.hist_n, 1);
    bms.push_back(s.mean);
    bvs.push_back(s.var);
    bmq.push_back(q.mean);
    bvq.push_back(q.var);
    bvr.push_back(b.departures > 1 ? static_cast<double>(br2 / b.departures - (br / b.departures) * (br / b.departures))
                                   : NAN);
  }
  const Mom s = hist_moments(hn, 0), q = hist_moments(hn, 1);
  res.mean_system = {s.mean, half_width(bms)};
  res.var_system = {s.var, half_width(bvs)};
  res.mean_queue = {q.mean, half_width(bmq)};
  res.var_queue = {q.var, half_width(bvq)};
  res.var_response = {nd > 0 ? static_cast<double>(sr2 / nd - (sr / nd) * (sr / nd)) : 0.0, half_width(bvr)};
  res.system_pmf = pmf_estimate(bs, &Batch::hist_n, model.buffer + 1, false);
  res.queue_pmf = pmf_estimate(bs, &Batch::hist_n, model.buffer + 1, true);
  size_t rlen = 2;
  for (const auto& b : bs) rlen = std::max(rlen, b.hist_r.size());
  res.response_pmf = pmf_estimate(bs, &Batch::hist_r, rlen, false);
  if (P.cls) class_estimates(model, bs, res);
  return res;
}

/// Continuous-time models: the event engine (simulation/event_engine.hpp), `slots` read as the
/// horizon and `warmup` as the warm-up in the model's time unit; time averages per unit time.
SimResult simulate_continuous(const Model& model, const SimOptions& o, const SimMemory& need) {
  using LD = long double;
  using sim::ct::Batch;
  const sim::ct::Params P(model, o.discretised);
  const double horizon = static_cast<double>(o.slots);
  const double warmup = static_cast<double>(o.warmup < 0 ? o.slots / 10 : o.warmup);
  const std::vector<Xoshiro256> streams = replication_streams(o.seed, o.replications);
  std::vector<std::vector<Batch>> per_rep(static_cast<size_t>(o.replications),
                                          std::vector<Batch>(static_cast<size_t>(o.batches)));
  std::vector<int64_t> events(static_cast<size_t>(o.replications), 0);
  SimResult res;
  std::atomic<bool> stop{false};
  const auto t0 = std::chrono::steady_clock::now();
  sim::run_replications(need.threads, o.replications, stop, [&](int r) {
    events[static_cast<size_t>(r)] = sim::ct::run(P, horizon, warmup, o.sample_every, streams[static_cast<size_t>(r)],
                                                  per_rep[static_cast<size_t>(r)], r == 0 ? &res.series : nullptr, stop);
    return true;
  });
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.threads = need.threads;
  res.slots_per_second = horizon * o.replications / std::max(res.seconds, 1e-9);
  for (int64_t e : events) res.events += e;
  res.events_per_second = static_cast<double>(res.events) / std::max(res.seconds, 1e-9);

  std::vector<Batch> bs;
  for (auto& v : per_rep)
    for (auto& b : v) bs.push_back(std::move(b));
  res.observations = static_cast<int>(bs.size());
  double measured = 0.0;
  for (const auto& b : bs) {
    measured += b.time;
    res.served_packets += b.departures;
  }
  res.measured_slots = static_cast<int64_t>(std::llround(measured));
  res.arrival_rate = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.arrivals, b.time); });
  res.throughput = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.departures, b.time); });
  res.loss = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.aqm + b.overflow + b.flow_compare, b.arrivals); });
  res.loss_aqm = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.aqm, b.arrivals); });
  res.loss_overflow = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.overflow, b.arrivals); });
  res.mark_prob = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.marks, b.arrivals); });
  res.pushed_out_prob = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.pushed, b.admitted); });
  res.mean_avg = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.sum_avg, b.time); });
  res.mean_response = ratio(bs, [](const Batch& b) { return std::pair<LD, LD>(b.sum_r, b.departures); });
  std::vector<double> hn(static_cast<size_t>(model.buffer) + 1, 0.0);
  LD sr = 0, sr2 = 0, nd = 0;
  std::vector<double> bms, bvs, bmq, bvq, bvr;
  for (const auto& b : bs) {
    for (size_t k = 0; k < hn.size(); ++k) hn[k] += b.time_n[k];
    sr += b.sum_r, sr2 += b.sum_r2, nd += b.departures;
    const Mom sm = hist_moments(b.time_n, 0), qm = hist_moments(b.time_n, 1);
    bms.push_back(sm.mean), bvs.push_back(sm.var), bmq.push_back(qm.mean), bvq.push_back(qm.var);
    const LD d = b.departures;
    bvr.push_back(d > 1 ? static_cast<double>(b.sum_r2 / d - (b.sum_r / d) * (b.sum_r / d)) : NAN);
  }
  const Mom sm = hist_moments(hn, 0), qm = hist_moments(hn, 1);
  res.mean_system = {sm.mean, half_width(bms)};
  res.var_system = {sm.var, half_width(bvs)};
  res.mean_queue = {qm.mean, half_width(bmq)};
  res.var_queue = {qm.var, half_width(bvq)};
  res.var_response = {nd > 0 ? static_cast<double>(sr2 / nd - (sr / nd) * (sr / nd)) : 0.0, half_width(bvr)};
  auto time_n = [](const Batch& b) -> const std::vector<double>& { return b.time_n; };
  res.system_pmf = pmf_estimate_of(bs, time_n, hn.size(), false);
  res.queue_pmf = pmf_estimate_of(bs, time_n, hn.size(), true);
  // the sojourn time has a density: mean and variance only (response_pmf stays empty)
  if (P.cls) class_estimates(model, bs, res);
  return res;
}
}  // namespace

SimResult simulate(const Model& model, const SimOptions& o) {
  model.validate();
  const bool continuous = model.time == TimeKind::Continuous;
  o.validate();
  // Everything proportional to the input is counted before anything is allocated.
  const SimMemory need = sim_memory(model, o);
  if (need.total > o.memory_limit_bytes)
    throw StateSpaceTooLarge(
        need.largest(),
        detail::cat("simulation too large: it needs about ", need.total / 1e9, " GB (", memory_breakdown(need),
                    "; buffer ", model.buffer, ", ", o.replications, " replications x ", o.batches, " batches, ",
                    need.threads, " threads), above memory_limit_bytes = ", o.memory_limit_bytes / 1e9,
                    " GB: lower '", need.largest(), "'"));
  try {
    if (continuous) return simulate_continuous(model, o, need);
    return simulate_impl(model, o, need);
  } catch (const std::bad_alloc&) {
    throw StateSpaceTooLarge(
        need.largest(),
        detail::cat("simulate: out of memory (std::bad_alloc) although the estimate, ", need.total / 1e9, " GB (",
                    memory_breakdown(need), "), was within memory_limit_bytes = ", o.memory_limit_bytes / 1e9,
                    " GB: lower '", need.largest(), "' or the memory limit"));
  }
}

std::vector<uint8_t> arrival_trace(const Source& source, int64_t slots, uint64_t seed) {
  source.validate();
  if (source.continuous())
    fail_param("source.kind", "a slotted source (" + source_kinds_named(false) + ") for an arrival trace",
               source.describe());
  constexpr int64_t kMaxTrace = int64_t{1} << 31;
  if (slots < 1 || slots > kMaxTrace) fail_param("slots", "in [1, 2^31]", slots);
  const int M = source.states();
  std::vector<std::vector<double>> cdf(static_cast<size_t>(M));
  for (int i = 0; i < M; ++i) {
    double c = 0.0;
    for (int j = 0; j < M; ++j) cdf[static_cast<size_t>(i)].push_back(c += source.matrix[i][j]);
    cdf[static_cast<size_t>(i)].back() = 1.0;
  }
  std::vector<uint64_t> thr(static_cast<size_t>(M));
  for (int i = 0; i < M; ++i) thr[static_cast<size_t>(i)] = sim::threshold(source.arrival[i]);
  // a batch source: the number of arrivals, by inversion of its cumulative pmf (one uniform)
  const int B = source.max_batch();
  std::vector<std::vector<double>> bcdf;
  if (B > 1)
    for (const auto& row : source.count_pmf()) {
      double c = 0.0;
      bcdf.emplace_back();
      for (double p : row) bcdf.back().push_back(c += p);
      bcdf.back().back() = 1.0;
    }
  Xoshiro256 rng(seed);
  int m = 0;
  if (M > 1) {  // the stationary law of the modulator
    const auto pi = source.modulator_stationary();
    double u = rng.uniform(), c = 0.0;
    while (m < M - 1 && u >= (c += pi[static_cast<size_t>(m)])) ++m;
  }
  std::vector<uint8_t> x(static_cast<size_t>(slots));
  for (int64_t t = 0; t < slots; ++t) {
    if ((t & 0xFFFFF) == 0) check_interrupt();
    if (M > 1) {
      const double u = rng.uniform();
      const double* c = cdf[static_cast<size_t>(m)].data();
      int j = 0;
      while (j < M - 1 && u >= c[j]) ++j;
      m = j;
    }
    if (B > 1) {
      const double u = rng.uniform();
      const double* c = bcdf[static_cast<size_t>(m)].data();
      int k = 0;
      while (k < B && u >= c[k]) ++k;
      x[static_cast<size_t>(t)] = static_cast<uint8_t>(k);
    } else {
      x[static_cast<size_t>(t)] = static_cast<uint8_t>((rng.next() >> 11) < thr[static_cast<size_t>(m)]);
    }
  }
  return x;
}

}  // namespace aqm
