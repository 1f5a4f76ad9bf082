// The event-driven simulator of continuous-time models (see event_engine.hpp).
#include "simulation/event_engine.hpp"

#include <algorithm>
#include <cmath>

#include "aqmchain/interrupt.hpp"

namespace aqm::sim::ct {

Params::Params(const Model& m, bool discretised)
    : N(m.buffer),
      M(m.source.states()),
      mu(m.service.mu),
      w(m.aqm.w),
      ecn(m.aqm.ecn),
      lam(m.source.arrival),
      policy(m.aqm.policy),
      drop(m.resolved_drop()),
      p_eval(drop_kind(drop.kind).p) {
  qout.assign(static_cast<size_t>(M), 0.0);
  qto.resize(static_cast<size_t>(M));
  qcum.resize(static_cast<size_t>(M));
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < M; ++j) {
      const double r = m.source.matrix[static_cast<size_t>(i)][static_cast<size_t>(j)];
      if (j == i || !(r > 0.0)) continue;
      qout[static_cast<size_t>(i)] += r;
      qto[static_cast<size_t>(i)].push_back(j);
      qcum[static_cast<size_t>(i)].push_back(qout[static_cast<size_t>(i)]);
    }
  pi = M > 1 ? m.source.modulator_stationary() : std::vector<double>{1.0};
  if (class_aware(m)) cls.emplace(m, drop);
  mode = discretised ? Mode::Grid : Mode::Exact;
  if (m.aqm.ns3()) {  // ns-3's RedQueueDisc (docs/ns3.md): w is QW, the per-arrival weight
    mode = Mode::Ns3;
    ns3_grid = discretised;
    log1mw = std::log1p(-w);
    ptc = m.aqm.ptc > 0.0 ? m.aqm.ptc : mu;
    idle_correction = m.aqm.idle_correction;
    hard_drop = m.aqm.hard_drop;
    spacing = m.aqm.spacing;
    thresholds = drop_has(drop, DropKindSpec::kThresholds);
    min_th = drop.lo;
    if (discretised) {
      points = m.grid.resolve(m.buffer);
      for (double g : points) pdrop.push_back(drop(g));
    }
    return;
  }
  if (mode == Mode::Grid) {
    points = m.grid.resolve(m.buffer);
    const size_t G = points.size();
    pdrop.resize(G);
    up.assign(G, 0.0);
    down.assign(G, 0.0);
    for (size_t i = 0; i < G; ++i) {
      pdrop[i] = drop(points[i]);
      if (i + 1 < G) up[i] = w / (points[i + 1] - points[i]);
      if (i > 0) down[i] = w / (points[i] - points[i - 1]);
    }
  }
}

Batch Params::empty_batch() const {
  Batch b;
  b.time_n.assign(static_cast<size_t>(N) + 1, 0.0);
  if (cls) {
    b.ct.reset(cls->C, cls->F, false);
    for (auto* v : {&b.class_time, &b.class_r, &b.class_r2}) v->assign(static_cast<size_t>(cls->C), 0.0);
  }
  return b;
}

namespace {

using Mode = Params::Mode;

/// The simulated system: n, the modulator, avg (or its grid index), the pending event, the
/// FIFO of the arrival times of the packets in the system (head = the packet in service);
/// class-aware runs: per FIFO place the packet's record, the packets of each class in the
/// system and the elephants (neither mice nor ECN-capable) in the system.
struct State {
  int n = 0, m = 0, g = 0;
  double avg = 0.0, t = 0.0;
  double next = 0.0;                       ///< time of the pending event
  double c1 = 0, c2 = 0, c3 = 0, c4 = 0, R = 0;  ///< cumulative rates of the current state
  int64_t count = 0;                       ///< ns-3: m_count
  bool old = false, idle = true;           ///< ns-3: m_old, m_idle
  double idle_time = 0.0;                  ///< ns-3: m_idleTime
  uint64_t head = 0, mask = 0;
  std::vector<double> fifo;
  std::vector<uint32_t> meta;
  std::vector<int> in_sys;
  int elephants = 0;
  int64_t events = 0, drops = 0;
  explicit State(const Params& P) {
    size_t c = 1;
    while (c < static_cast<size_t>(P.N) + 1) c <<= 1;
    fifo.assign(c, 0.0);
    mask = c - 1;
    if (P.cls) {
      meta.assign(c, 0u);
      in_sys.assign(static_cast<size_t>(P.cls->C), 0);
    }
  }
  uint32_t& rec(int j) { return meta[(head + static_cast<uint64_t>(j)) & mask]; }
  int queue() const { return n > 0 ? n - 1 : 0; }
};

/// The total rate of the current state and its cumulative parts (arrival, departure, avg up,
/// avg down; the modulator's moves fill the rest up to R).
template <Mode K, bool Mod>
inline void rates(const Params& P, State& s) {
  s.c1 = P.lam[static_cast<size_t>(Mod ? s.m : 0)];
  s.c2 = s.c1 + (s.n > 0 ? P.mu : 0.0);
  s.c3 = s.c4 = s.c2;
  if constexpr (K == Mode::Grid) {
    const double q = s.queue(), gi = P.points[static_cast<size_t>(s.g)];
    s.c3 = s.c2 + P.up[static_cast<size_t>(s.g)] * std::max(q - gi, 0.0);
    s.c4 = s.c3 + P.down[static_cast<size_t>(s.g)] * std::max(gi - q, 0.0);
  }
  s.R = Mod ? s.c4 + P.qout[static_cast<size_t>(s.m)] : s.c4;
}

/// Draws the time of the next event from the current state's total rate.
inline void schedule(State& s, Xoshiro256& rng) {
  const double u = rng.uniform();
  s.next = s.R > 0.0 ? s.t - std::log1p(-u) / s.R : INFINITY;
}

/// Advances the state by `tau` with no event and adds the time integrals.
template <Mode K, bool Cls = false>
inline void advance(const Params& P, State& s, double tau, Batch& B) {
  B.time_n[static_cast<size_t>(s.n)] += tau;
  if constexpr (Cls)
    for (size_t c = 0; c < s.in_sys.size(); ++c) B.class_time[c] += s.in_sys[c] * tau;
  if constexpr (K == Mode::Exact) {
    // d avg/dt = w (q - avg): avg(tau) = q + (avg - q) e^{-w tau}, integral q tau + (avg - q)(1 - e^{-w tau}) / w
    const double q = s.queue(), d = s.avg - q;
    const double e1 = -std::expm1(-P.w * tau);
    B.sum_avg += q * tau + d * e1 / P.w;
    s.avg = q + d * (1.0 - e1);
  } else if constexpr (K == Mode::Grid) {
    B.sum_avg += P.points[static_cast<size_t>(s.g)] * tau;
  } else {
    B.sum_avg += s.avg * tau;
  }
}

inline void admit(State& s, Batch& B) {
  s.fifo[(s.head + static_cast<uint64_t>(s.n)) & s.mask] = s.t;
  ++s.n;
  ++B.admitted;
}

/// A rejected arrival: lost, or under front / random discard (when packets wait) admitted in
/// place of a waiting packet (the oldest, or one drawn uniformly; never the one in service).
inline void reject(const Params& P, State& s, Xoshiro256& rng, Batch& B) {
  if (P.policy == DropPolicy::Tail || s.n < 2) return;
  const int j = P.policy == DropPolicy::Front ? 1 : pick_waiting(rng, s.n - 1);
  for (int i = j; i + 1 < s.n; ++i)
    s.fifo[(s.head + static_cast<uint64_t>(i)) & s.mask] = s.fifo[(s.head + static_cast<uint64_t>(i + 1)) & s.mask];
  s.fifo[(s.head + static_cast<uint64_t>(s.n - 1)) & s.mask] = s.t;
  ++B.pushed;
  ++B.admitted;
}

/// An arrival under the default semantics: lost at n = N; else with u against the disjoint
/// intervals [0, p e) marked and admitted, [p e, p) dropped, [p, 1) admitted.
template <Mode K>
inline void arrival(const Params& P, State& s, Xoshiro256& rng, Batch& B) {
  ++B.arrivals;
  const double u = rng.uniform();
  if (s.n == P.N) {
    ++B.overflow, ++s.drops;
    reject(P, s, rng, B);
    return;
  }
  const double p = K == Mode::Exact ? P.p(s.avg) : P.pdrop[static_cast<size_t>(s.g)];
  if (u < p) {
    if (u < p * P.ecn) {
      ++B.marks;
      admit(s, B);
    } else {
      ++B.aqm, ++s.drops;
      reject(P, s, rng, B);
    }
    return;
  }
  admit(s, B);
}

/// Class-aware runs: a packet with record `rec` of class c joins the tail.
inline void admit_cls(const ClassParams& KC, State& s, uint32_t rec, int c, Batch& B) {
  s.rec(s.n) = rec;
  ++s.in_sys[static_cast<size_t>(c)];
  s.elephants += static_cast<int>(KC.elephant(rec));
  admit(s, B);
}

/// Class-aware runs: waiting packet j (1 .. n - 1) leaves the FIFO lost, counted in its
/// class's entry of `per_class` and in its flow's losses.
inline void discard(const ClassParams& KC, State& s, int j, std::vector<int64_t>& per_class, Batch& B) {
  const uint32_t rec = s.rec(j);
  const size_t vc = static_cast<size_t>(KC.cls(rec));
  ++per_class[vc];
  ++B.ct.f_lost[rec >> 1];
  --s.in_sys[vc];
  s.elephants -= static_cast<int>(KC.elephant(rec));
  erase2(s.fifo.data(), s.meta.data(), s.mask, s.head, s.n, j);
  --s.n;
}

/// Class-aware runs: the arrival (record rec, class c) rejected by `aqm.policy`: lost
/// (counted in its class's entry of `lost`), or under front / random discard, when packets
/// wait, admitted in place of a waiting packet (the oldest, or one drawn uniformly).
inline void reject_cls(const Params& P, State& s, Xoshiro256& rng, Batch& B, uint32_t rec, int c,
                       std::vector<int64_t>& lost) {
  const ClassParams& KC = *P.cls;
  if (P.policy == DropPolicy::Tail || s.n < 2) {
    ++lost[static_cast<size_t>(c)];
    ++B.ct.f_lost[rec >> 1];
    return;
  }
  discard(KC, s, P.policy == DropPolicy::Front ? 1 : pick_waiting(rng, s.n - 1), B.ct.push, B);
  admit_cls(KC, s, rec, c, B);
  ++B.pushed;
}

/// A class-aware arrival (docs/classes.md, "Continuous time"), at the current avg: its class,
/// flow and ECN capability; the fate's uniform u; at n = N the overflow by `aqm.policy`;
/// else the flow comparison (avg >= min_th, packets waiting: one waiting packet drawn, the
/// same flow loses both), then u < p(avg) the AQM decision: without modified RED marked
/// (u < p e, e the class's ECN probability) or rejected by the policy; under modified RED
/// at or above max_th rejected by the policy, below it a waiting elephant discarded by the
/// search and the arrival admitted, else a protected arrival admitted (marked when
/// ECN-capable) and an elephant arrival dropped.
template <Mode K, bool Mod>
inline void arrival_cls(const Params& P, State& s, Xoshiro256& rng, Batch& B) {
  const ClassParams& KC = *P.cls;
  sim::ClassTally& T = B.ct;
  ++B.arrivals;
  int c = 0;
  const uint32_t rec = KC.draw(Mod ? s.m : 0, rng, c);
  const size_t k = static_cast<size_t>(c);
  ++T.arr[k];
  ++T.f_arr[rec >> 1];
  const double u = rng.uniform();
  if (s.n == P.N) {
    ++B.overflow, ++s.drops;
    reject_cls(P, s, rng, B, rec, c, T.ovf);
    return;
  }
  const double avg = K == Mode::Exact ? s.avg : P.points[static_cast<size_t>(s.g)];
  if (KC.flow_compare && s.n > 1 && avg >= KC.min_th) {
    const int j = pick_waiting(rng, s.n - 1);
    if ((s.rec(j) >> 1) == (rec >> 1)) {  // the same flow: both lost
      discard(KC, s, j, T.fc, B);
      ++T.fc[k];
      ++T.f_lost[rec >> 1];
      B.flow_compare += 2, s.drops += 2;
      return;
    }
  }
  const double p = K == Mode::Exact ? P.p(s.avg) : P.pdrop[static_cast<size_t>(s.g)];
  if (!(u < p)) {
    admit_cls(KC, s, rec, c, B);
    return;
  }
  if (KC.modified == Modified::None || !(avg < KC.max_th)) {
    if (KC.modified == Modified::None && u < p * KC.ecn[k]) {
      ++B.marks, ++T.marks[k];
      admit_cls(KC, s, rec, c, B);
      return;
    }
    ++B.aqm, ++s.drops;
    reject_cls(P, s, rng, B, rec, c, T.aqm);
    return;
  }
  const int waiting_elephants = s.elephants - static_cast<int>(s.n > 0 && KC.elephant(s.rec(0)));
  if (waiting_elephants > 0) {  // an elephant leaves instead of the arrival
    ++B.aqm, ++s.drops;
    discard(KC, s, KC.modified_victim(rng, s.n - 1, [&s](int j) { return s.rec(j); }), T.push, B);
    admit_cls(KC, s, rec, c, B);
    ++B.pushed;
    return;
  }
  if (!KC.elephant(rec)) {  // protected: admitted, marked when ECN-capable
    if (rec & 1u) ++B.marks, ++T.marks[k];
    admit_cls(KC, s, rec, c, B);
    return;
  }
  ++B.aqm, ++s.drops;  // the arrival is the only elephant: it is the one dropped
  ++T.aqm[k];
  ++T.f_lost[rec >> 1];
}

/// ns-3's RedQueueDisc::DoEnqueue for one arrival, in its order: the idle correction, the
/// EWMA jump (for every arrival), count + 1, the drop decision when avg is in the early
/// region and more than one packet waits (forced when p_b >= 1; the first-arrival
/// exemption; the early test with p_a from the spacing), then the admission.  One uniform u
/// decides: forced, ECN-capable iff u < ecn; early, dropped iff u < p_a, marked instead
/// iff u < p_a ecn.
inline void arrival_ns3(const Params& P, State& s, Xoshiro256& rng, Batch& B) {
  ++B.arrivals;
  const int nq = s.queue();
  int64_t k = 0;
  if (s.idle) {
    if (P.idle_correction) k = static_cast<int64_t>(std::floor(P.ptc * (s.t - s.idle_time)));
    s.idle = false;
  }
  s.avg = (k == 0 ? s.avg * (1.0 - P.w) : s.avg * std::exp(static_cast<double>(k + 1) * P.log1mw)) + P.w * nq;
  if (P.ns3_grid) {
    // discretised: the new value split between its two neighbouring grid points, mean kept
    const double y = s.avg, v = rng.uniform();
    const auto it = std::upper_bound(P.points.begin(), P.points.end(), y);
    if (it == P.points.end()) {
      s.g = static_cast<int>(P.points.size()) - 1;
    } else if (it == P.points.begin()) {
      s.g = 0;
    } else {
      const int i = static_cast<int>(it - P.points.begin()) - 1;
      const double lo = P.points[static_cast<size_t>(i)], hi = P.points[static_cast<size_t>(i) + 1];
      s.g = v < (hi - y) / (hi - lo) ? i : i + 1;
    }
    s.avg = P.points[static_cast<size_t>(s.g)];
  }
  ++s.count;
  const double u = rng.uniform();
  bool drop = false, mark = false, forced = false;
  double pb = 0.0;
  auto p_of = [&]() { return P.ns3_grid ? P.pdrop[static_cast<size_t>(s.g)] : P.p(s.avg); };
  const bool early = nq > 1 && (P.thresholds ? s.avg >= P.min_th : (pb = p_of()) > 0.0);
  if (early) {
    if (P.thresholds) pb = p_of();
    if (pb >= 1.0) {  // forced: count and old unchanged
      forced = true;
      (!P.hard_drop && u < P.ecn ? mark : drop) = true;
    } else if (!s.old) {
      s.count = 1;
      s.old = true;
    } else {
      const double cp = static_cast<double>(s.count) * pb;
      double pa = pb;
      if (P.spacing == Spacing::Wait)
        pa = cp < 1.0 ? 0.0 : (cp < 2.0 ? pb / (2.0 - cp) : 1.0);
      else if (P.spacing == Spacing::Count)
        pa = cp < 1.0 ? pb / (1.0 - cp) : 1.0;
      pa = std::min(pa, 1.0);  // ModifyP's last line: both forms exceed 1 near their switch
      if (u < pa) {
        s.count = 0;
        (u < pa * P.ecn ? mark : drop) = true;
      }
    }
  } else {
    s.old = false;
  }
  if (drop) {
    ++B.aqm, ++s.drops;
    B.forced += forced;
    return;
  }
  if (mark) ++B.marks;
  if (s.n == P.N) {
    ++B.overflow, ++s.drops;
    return;
  }
  admit(s, B);
}

/// The pending event, at the current time s.t (the state already advanced to it): its kind,
/// its effect, the rates of the new state and the time of the next event.
template <Mode K, bool Mod, bool Cls = false>
inline void event(const Params& P, State& s, Xoshiro256& rng, Batch& B) {
  ++s.events;
  const double x = rng.uniform() * s.R;
  if (x < s.c1) {
    if constexpr (K == Mode::Ns3)
      arrival_ns3(P, s, rng, B);
    else if constexpr (Cls)
      arrival_cls<K, Mod>(P, s, rng, B);
    else
      arrival<K>(P, s, rng, B);
  } else if (x < s.c2) {
    const double r = s.t - s.fifo[s.head & s.mask];
    if constexpr (Cls) {
      const uint32_t rec = s.rec(0);
      const size_t dc = static_cast<size_t>(P.cls->cls(rec));
      --s.in_sys[dc];
      s.elephants -= static_cast<int>(P.cls->elephant(rec));
      ++B.ct.dep[dc];
      ++B.ct.f_dep[rec >> 1];
      B.class_r[dc] += r;
      B.class_r2[dc] += r * r;
    }
    ++s.head;
    --s.n;
    B.sum_r += r;
    B.sum_r2 += r * r;
    ++B.departures;
    if constexpr (K == Mode::Ns3)
      if (s.n == 0) s.idle = true, s.idle_time = s.t;
  } else if (K == Mode::Grid && x < s.c3) {
    ++s.g;
  } else if (K == Mode::Grid && x < s.c4) {
    --s.g;
  } else if constexpr (Mod) {
    const double y = x - s.c4;
    const auto& cum = P.qcum[static_cast<size_t>(s.m)];
    const auto& to = P.qto[static_cast<size_t>(s.m)];
    size_t i = 0;
    while (i + 1 < cum.size() && !(y < cum[i])) ++i;
    s.m = to[i];
  }
  rates<K, Mod>(P, s);
  schedule(s, rng);
}

/// Events until the pending one lies at or beyond `until` (the state is then advanced to
/// `until`: true) or `max_events` have happened (false).
template <Mode K, bool Mod, bool Cls = false>
bool step(const Params& P, State& s, Xoshiro256& rng, double until, Batch& B, int64_t max_events) {
  for (int64_t e = 0; e < max_events; ++e) {
    if (!(s.next < until)) {
      advance<K, Cls>(P, s, until - s.t, B);
      s.t = until;
      return true;
    }
    advance<K, Cls>(P, s, s.next - s.t, B);
    s.t = s.next;
    event<K, Mod, Cls>(P, s, rng, B);
  }
  return false;
}

using StepFn = bool (*)(const Params&, State&, Xoshiro256&, double, Batch&, int64_t);

StepFn step_function(const Params& P) {
  const bool mod = P.M > 1;
  if (P.cls) {  // the class part compiled in (classless models run without it); never ns-3 (refused)
    if (P.mode == Mode::Grid) return mod ? &step<Mode::Grid, true, true> : &step<Mode::Grid, false, true>;
    return mod ? &step<Mode::Exact, true, true> : &step<Mode::Exact, false, true>;
  }
  switch (P.mode) {
    case Mode::Exact: return mod ? &step<Mode::Exact, true> : &step<Mode::Exact, false>;
    case Mode::Grid: return mod ? &step<Mode::Grid, true> : &step<Mode::Grid, false>;
    case Mode::Ns3: break;
  }
  return mod ? &step<Mode::Ns3, true> : &step<Mode::Ns3, false>;
}

void start_rates(const Params& P, State& s) {
  const bool mod = P.M > 1;
  switch (P.mode) {
    case Mode::Exact: return mod ? rates<Mode::Exact, true>(P, s) : rates<Mode::Exact, false>(P, s);
    case Mode::Grid: return mod ? rates<Mode::Grid, true>(P, s) : rates<Mode::Grid, false>(P, s);
    case Mode::Ns3: return mod ? rates<Mode::Ns3, true>(P, s) : rates<Mode::Ns3, false>(P, s);
  }
}

constexpr int64_t kEventsPerPoll = 1 << 16;

void start_state(const Params& P, State& s, Xoshiro256& rng) {
  if (P.pi.size() > 1) {  // the modulator from its stationary law
    const double u = rng.uniform();
    double c = 0.0;
    s.m = static_cast<int>(P.pi.size()) - 1;
    for (size_t i = 0; i < P.pi.size(); ++i)
      if (u < (c += P.pi[i])) {
        s.m = static_cast<int>(i);
        break;
      }
  }
  start_rates(P, s);
  schedule(s, rng);
}

/// run_passage for one mode: stretches of constant n and modulator between events; in each
/// the time the state enters the target (exact avg: in closed form along its trajectory).
template <Mode K, bool Mod, bool Cls>
double passage_loop(const Params& P, const Target& X, State& s, Xoshiro256& rng, double horizon,
                    const std::vector<double>& out, std::vector<Counts>& at_out, Counts& at_hit, Batch& B,
                    const std::atomic<bool>& stop) {
  size_t k = 0;
  auto counts = [&B]() { return Counts{B.arrivals, B.aqm, B.marks, B.overflow, B.admitted, B.departures}; };
  const bool avg_free = X.avg.whole();
  for (int64_t e = 1;; ++e) {
    // the state is constant on [s.t, end) but for the exact avg
    const double end = std::min(s.next, horizon);
    double entry = INFINITY;
    if (X.queue.holds(s.n) && X.modulator.holds(Mod ? s.m : 0)) {
      if (avg_free) entry = 0.0;
      else if constexpr (K == Mode::Exact) entry = avg_entry(X.avg, s.avg, s.queue(), P.w);
      else entry = X.avg.holds(K == Mode::Grid ? P.points[static_cast<size_t>(s.g)] : s.avg) ? 0.0 : INFINITY;
    }
    if (entry < INFINITY && s.t + entry <= end) {  // no event before the hit: the counts are final
      at_hit = counts();
      while (k < out.size()) at_out[k++] = at_hit;
      return s.t + entry;
    }
    while (k < out.size() && out[k] < end) at_out[k++] = counts();
    if (!(s.next < horizon)) {
      advance<K, Cls>(P, s, horizon - s.t, B);
      s.t = horizon;
      at_hit = counts();
      while (k < out.size()) at_out[k++] = at_hit;
      return INFINITY;
    }
    advance<K, Cls>(P, s, s.next - s.t, B);
    s.t = s.next;
    event<K, Mod, Cls>(P, s, rng, B);
    if (e % kEventsPerPoll == 0) {
      if (stop.load(std::memory_order_relaxed)) return NAN;
      check_interrupt();
    }
  }
}

}  // namespace

double run_passage(const Params& P, const Target& target, const PassageStart& start, Xoshiro256 rng,
                   double horizon, const std::vector<double>& out, std::vector<Counts>& at_out, Counts& at_hit,
                   int64_t& events, const std::atomic<bool>& stop) {
  State s(P);
  Batch B = P.empty_batch();
  if (start.empty) {
    start_state(P, s, rng);
  } else {
    s.n = start.n, s.m = start.m, s.g = start.g, s.avg = start.avg;
    if (P.mode == Mode::Grid) s.avg = P.points[static_cast<size_t>(s.g)];
    s.idle = s.n == 0;
    start_rates(P, s);
    schedule(s, rng);
  }
  const bool mod = P.M > 1;
  double T;
  auto loop = [&](auto fn) { return fn(P, target, s, rng, horizon, out, at_out, at_hit, B, stop); };
  if (P.cls) {  // class-aware (never ns-3: refused)
    if (P.mode == Mode::Grid)
      T = mod ? loop(passage_loop<Mode::Grid, true, true>) : loop(passage_loop<Mode::Grid, false, true>);
    else
      T = mod ? loop(passage_loop<Mode::Exact, true, true>) : loop(passage_loop<Mode::Exact, false, true>);
  } else {
    switch (P.mode) {
      case Mode::Exact:
        T = mod ? loop(passage_loop<Mode::Exact, true, false>) : loop(passage_loop<Mode::Exact, false, false>);
        break;
      case Mode::Grid:
        T = mod ? loop(passage_loop<Mode::Grid, true, false>) : loop(passage_loop<Mode::Grid, false, false>);
        break;
      default:
        T = mod ? loop(passage_loop<Mode::Ns3, true, false>) : loop(passage_loop<Mode::Ns3, false, false>);
    }
  }
  events += s.events;
  return T;
}

struct Replica::Impl {
  State s;
  Batch tally;
  explicit Impl(const Params& P) : s(P), tally(P.empty_batch()) {}
};

Replica::Replica(const Params& first, Xoshiro256& rng) : impl_(std::make_unique<Impl>(first)) {
  start_state(first, impl_->s, rng);
}
Replica::~Replica() = default;

void Replica::enter(const Params& P, Xoshiro256& rng) {
  State& s = impl_->s;
  if (P.cls) {  // the per-class counts and the elephants, recounted (a phase may change the mice flags)
    std::fill(s.in_sys.begin(), s.in_sys.end(), 0);
    s.elephants = 0;
    for (int j = 0; j < s.n; ++j) {
      ++s.in_sys[static_cast<size_t>(P.cls->cls(s.rec(j)))];
      s.elephants += static_cast<int>(P.cls->elephant(s.rec(j)));
    }
  }
  start_rates(P, impl_->s);
  schedule(impl_->s, rng);
}

void Replica::run_until(const Params& P, Xoshiro256& rng, double until, const std::atomic<bool>& stop) {
  const StepFn fn = step_function(P);
  while (!fn(P, impl_->s, rng, until, impl_->tally, kEventsPerPoll)) {
    if (stop.load(std::memory_order_relaxed)) return;
    check_interrupt();
  }
}

int Replica::n() const { return impl_->s.n; }
double Replica::avg(const Params& P) const {
  return P.mode == Mode::Grid ? P.points[static_cast<size_t>(impl_->s.g)] : impl_->s.avg;
}
int64_t Replica::arrivals() const { return impl_->tally.arrivals; }
int64_t Replica::losses() const { return impl_->tally.aqm + impl_->tally.overflow + impl_->tally.flow_compare; }

int64_t run(const Params& P, double horizon, double warmup, int64_t sample_every, Xoshiro256 rng,
            std::vector<Batch>& out, TimeSeries* ts, const std::atomic<bool>& stop) {
  const StepFn fn = step_function(P);
  State s(P);
  start_state(P, s, rng);
  for (auto& b : out) b = P.empty_batch();
  Batch warm = P.empty_batch();
  const int nb = static_cast<int>(out.size());
  const double len = (horizon - warmup) / nb;
  const bool sampling = ts && sample_every > 0;
  double next_sample = sampling && static_cast<double>(sample_every) <= horizon ? static_cast<double>(sample_every)
                                                                                  : INFINITY;
  int64_t sample_k = 1, last_drops = 0;
  if (sampling) {  // exact size: counted by sim_memory
    const size_t samples = static_cast<size_t>(horizon / static_cast<double>(sample_every));
    ts->slot.reserve(samples);
    ts->level.reserve(samples);
    ts->avg.reserve(samples);
    ts->drops.reserve(samples);
  }
  int b = -1;
  double start = 0.0, end = warmup;
  Batch* cur = &warm;
  for (;;) {
    const double until = std::min(end, next_sample);
    while (!fn(P, s, rng, until, *cur, kEventsPerPoll)) {
      if (stop.load(std::memory_order_relaxed)) return s.events;
      check_interrupt();
    }
    if (stop.load(std::memory_order_relaxed)) return s.events;
    check_interrupt();
    if (until == next_sample) {
      ts->slot.push_back(sample_k * sample_every);
      ts->level.push_back(s.n);
      ts->avg.push_back(P.mode == Mode::Grid ? P.points[static_cast<size_t>(s.g)] : s.avg);
      ts->drops.push_back(s.drops - last_drops);
      last_drops = s.drops;
      ++sample_k;
      next_sample = static_cast<double>(sample_k * sample_every);
      if (next_sample > horizon) next_sample = INFINITY;
    }
    if (until == end) {
      if (b >= 0) cur->time = end - start;
      if (++b == nb) break;
      cur = &out[static_cast<size_t>(b)];
      start = end;
      end = b + 1 == nb ? horizon : warmup + (b + 1) * len;
    }
  }
  return s.events;
}

}  // namespace aqm::sim::ct
