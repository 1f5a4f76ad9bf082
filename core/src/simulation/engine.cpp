// The simulator's slot loop (see engine.hpp for the order of events and of the draws).
#include "simulation/engine.hpp"

#include <cstring>
#include <string>
#include <type_traits>

namespace aqm::sim {

namespace {
constexpr double kTableMaxBytes = 64.0 * 1024 * 1024;
constexpr double kTableEntryBytes = sizeof(int32_t) + sizeof(uint64_t);
}  // namespace

double t975(int dof) {
  // Student t quantile 0.975: exact table for small dof, Cornish-Fisher expansion beyond.
  static const double table[] = {0, 12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281};
  if (dof <= 10) return table[std::max(dof, 1)];
  const double z = 1.959963984540054, v = dof;
  return z + (z * z * z + z) / (4 * v) + (5 * std::pow(z, 5) + 16 * z * z * z + 3 * z) / (96 * v * v) +
         (3 * std::pow(z, 7) + 19 * std::pow(z, 5) + 17 * z * z * z - 15 * z) / (384 * v * v * v);
}

double target_table_bytes(const Model& m, double total_slots) {
  if (m.aqm.filter == FilterKind::Redwm) return 0.0;  // REDwM maps (A, s) in the loop
  const double entries = static_cast<double>(m.grid.size(m.buffer)) * m.buffer;
  const double bytes = entries * kTableEntryBytes;
  return bytes <= kTableMaxBytes && total_slots > entries ? bytes : 0.0;
}

ClassParams::ClassParams(const Model& m, const DropFunction& drop)
    : C(m.class_count()), F(m.total_flows()), modified(m.aqm.modified), flow_compare(m.aqm.flow_compare),
      min_th(drop.lo), max_th(drop.hi) {
  const int M = m.source.states();
  ccdf.resize(static_cast<size_t>(M));
  for (int i = 0; i < M; ++i) {
    double c = 0.0;
    for (int j = 0; j < C; ++j) ccdf[static_cast<size_t>(i)].push_back(c += m.class_share(j, i));
    ccdf[static_cast<size_t>(i)].back() = 1.0;
  }
  fcdf.resize(static_cast<size_t>(C));
  for (int c = 0; c < C; ++c) {
    flows.push_back(m.class_flows(c));
    offset.push_back(static_cast<int>(flow_class.size()));
    flow_class.insert(flow_class.end(), m.class_flows(c), c);
    ecn.push_back(m.class_ecn(c));
    mice.push_back(m.class_mice(c));
    if (!m.classes.empty() && !m.classes[c].flow_weights.empty()) {
      double acc = 0.0;
      for (double w : m.classes[c].flow_weights) fcdf[static_cast<size_t>(c)].push_back(acc += w);
      fcdf[static_cast<size_t>(c)].back() = 1.0;
    }
  }
}

SlotParams::SlotParams(const Model& m, bool disc, bool target_table, int64_t max_response)
    : N(m.buffer),
      M(m.source.states()),
      filter(m),
      per_slot(m.aqm.update == UpdateRule::PerSlot),
      ecn(m.aqm.ecn),
      policy(m.aqm.policy),
      drop(m.resolved_drop()),
      discretised(disc),
      max_r(max_response) {
  if (m.aqm.filter == FilterKind::Redwm) {
    redwm = true;
    ra.assign(m.aqm.a.begin(), m.aqm.a.begin() + m.aqm.order_k());
    rb.assign(m.aqm.b.begin(), m.aqm.b.begin() + m.aqm.order_m() + 1);
    if (disc) {
      rfilter.emplace(m.aqm);  // r <= kMaxRedwmSums (ModelError naming the coefficient otherwise)
      R = rfilter->sums();
      spoints = redwm_s_grids(m);
      for (const auto& pts : spoints) sgrids.emplace_back(pts, m.grid.mapping == Mapping::Flags ? Mapping::Split : m.grid.mapping);
    }
  }
  for (double l : m.source.arrival) lam53.push_back(std::min(l, 1.0) * kTwo53);
  if (m.source.max_batch() > 1) {
    B = m.source.max_batch();
    for (const auto& row : m.source.count_pmf()) {
      double c = 0.0;
      bcdf.emplace_back();
      for (double p : row) bcdf.back().push_back(c += p);
      bcdf.back().back() = 1.0;
    }
  }
  mcdf.resize(M);
  for (int i = 0; i < M; ++i) {
    double c = 0;
    for (int j = 0; j < M; ++j) mcdf[i].push_back(c += m.source.matrix[i][j]);
    mcdf[i].back() = 1.0;
  }
  pi = M > 1 ? m.source.modulator_stationary() : std::vector<double>{1.0};
  mu_thr = threshold(m.service.mu);
  switch (drop.kind) {
    case DropFunction::Kind::None: drop_kind = DropKind::None; break;
    case DropFunction::Kind::RED:
      drop_kind = DropKind::Red;
      red_lo = drop.lo, red_hi = drop.hi, red_pmax = drop.p_max;
      break;
    default: drop_kind = DropKind::Any;
  }
  if (m.aqm.stateful()) {
    if (disc) {
      sa.emplace(m, m.grid.resolve(m.buffer));
    } else {
      Model c = m;  // continuous avg: no grid, count and p_max exact (no count cap)
      c.aqm.spacing = Spacing::None;
      sa.emplace(c, std::vector<double>{});
      sa->spacing = m.aqm.spacing;
    }
  }
  if (class_aware(m)) cls.emplace(m, drop);
  if (!discretised) return;
  grid.emplace(m.grid.resolve(m.buffer), m.grid.mapping);
  points = grid->points();
  pdrop.resize(points.size());
  for (size_t i = 0; i < points.size(); ++i) pdrop[i] = drop(points[i]);
  if (target_table && !redwm) {
    const size_t G = points.size();
    tgt_lo.resize(G * N);
    tgt_thr.resize(G * N);
    for (size_t g = 0; g < G; ++g)
      for (int q = 0; q < N; ++q) {
        const GridTarget t = grid->map(filter.next(points[g], q));
        tgt_lo[g * N + q] = t.lo;
        tgt_thr[g * N + q] = threshold(t.p_lo);
      }
  }
}

namespace {

/// c ? a : b by masks: exact, and without a branch on a condition the predictor cannot
/// learn (an arrival under the per-arrival filter rule).
inline double select(bool c, double a, double b) {
  uint64_t ua, ub;
  std::memcpy(&ua, &a, 8);
  std::memcpy(&ub, &b, 8);
  const uint64_t m = -static_cast<uint64_t>(c);
  const uint64_t u = (ua & m) | (ub & ~m);
  double out;
  std::memcpy(&out, &u, 8);
  return out;
}
inline int select(bool c, int a, int b) {
  const int m = -static_cast<int>(c);
  return (a & m) | (b & ~m);
}

/// Step 2: the modulator's next state from m, by inversion of its row's cdf with one uniform.
inline int next_modulator(const SlotParams& P, int m, double u) {
  const double* c = P.mcdf[static_cast<size_t>(m)].data();
  int j = 0;
  while (j < P.M - 1 && u >= c[j]) ++j;
  return j;
}

/// Remove FIFO position j (0 = head) of a FIFO of n packets, shifting the shorter side.
void erase(int64_t* buf, uint64_t mask, uint64_t& head, int n, int j) {
  if (j < n - 1 - j) {
    for (int i = j; i > 0; --i) buf[(head + i) & mask] = buf[(head + i - 1) & mask];
    ++head;
  } else {
    for (int i = j; i < n - 1; ++i) buf[(head + i) & mask] = buf[(head + i + 1) & mask];
  }
}

/// Count a response time r in histogram h: grow h (doubling, under the shared budget) to
/// hold r, or, for r >= max_r - 1, count it in the last bin and add r, r^2 to the tail
/// sums.  `per` names what a bin is per in the budget error ("batch", "class and batch").
void add_response(std::vector<int64_t>& h, int64_t& tail_r, __int128& tail_r2, ResponseBudget& budget, int64_t r,
                  int64_t max_r, const char* per) {
  const int64_t last = max_r - 1;
  const int64_t hsize = static_cast<int64_t>(h.size());
  if (r >= hsize && hsize < max_r) {
    const int64_t want = r >= last ? max_r : std::min<int64_t>(max_r, std::max<int64_t>(r + 1, 2 * hsize));
    const int64_t grow = 8 * (want - hsize);
    if (budget.bytes_left.fetch_sub(grow) < grow)
      throw StateSpaceTooLarge(
          "max_response",
          detail::cat("simulate: the response-time histograms outgrew the memory budget (a response time of ", r,
                      " slots needs ", want, " bins per ", per, "; memory_limit_bytes = ", budget.limit / 1e9,
                      " GB): lower 'max_response' (longer response times go to its last bin) or 'batches'"));
    h.resize(static_cast<size_t>(want), 0);
  }
  if (r >= last) {
    ++h[static_cast<size_t>(last)];
    tail_r += r;
    tail_r2 += static_cast<__int128>(r) * r;
  } else {
    ++h[static_cast<size_t>(r)];
  }
}

/// A response time r at or above the histogram's current limit (the recording loops' cold
/// path): add_response on the tally's histogram.  Returns the (possibly moved) data;
/// `hsize` and `lim` (the smallest r that comes here next time) follow.
[[gnu::noinline, gnu::cold]] int64_t* response_tail(Tally& T, int64_t r, int64_t max_r, int64_t& hsize,
                                                    int64_t& lim) {
  std::vector<int64_t>& h = *T.hist_r;
  add_response(h, T.tail_r, T.tail_r2, *T.budget, r, max_r, "batch");
  hsize = static_cast<int64_t>(h.size());
  lim = hsize == max_r ? max_r - 1 : hsize;
  return h.data();
}

/// A response time r of a packet of class c (class-aware recording loops), on the class's
/// own histogram.
void class_response(Tally& T, int c, int64_t r, int64_t max_r) {
  const size_t k = static_cast<size_t>(c);
  add_response(T.ct->hist_r[k], T.ct->tail_r[k], T.ct->tail_r2[k], *T.budget, r, max_r, "class and batch");
}

/// Continuous avg by drop function (NoDrop, Red, AnyDrop) or on the chain's grid (Grid);
/// REDwM with continuous A (Redwm) or on the chain's two grids (RedwmGrid).
enum class AvgKind { NoDrop, Red, AnyDrop, Grid, Redwm, RedwmGrid };

/// The features of a model the slot loop is compiled for; each is an `if constexpr` part of
/// the one loop (chunk below), so a model pays only for the features it has.
///  - Modulated: a source with several modulator states (a modulator move per slot);
///  - K: how avg is kept (AvgKind);
///  - Record: response times are recorded (hist_r);
///  - Plain: the filter advances in every slot and no arrival is ECN-capable (no mark test
///    and no selection of avg on the critical path);
///  - Classes: traffic classes and flows, ECN per class, modified RED, the flow comparison
///    (docs/classes.md); per FIFO place the flow id and ECN capability, per-class tallies;
///  - Batch: a batch source, 0..B arrivals per slot (docs/batch-arrivals.md);
///  - Stateful: the stateful AQM (drop spacing, adaptive p_max, AutoRED's weight, dynamic
///    max_th; docs/stateful-aqm.md).
/// A model with none of Classes, Batch, Stateful decides arrival, AQM drop and ECN mark with
/// one uniform against disjoint intervals (OneUniform, engine.hpp); the others draw the AQM
/// decision, ECN and the per-arrival choices separately.
template <bool Modulated_, AvgKind K_, bool Record_, bool Plain_, bool Classes_ = false, bool Batch_ = false,
          bool Stateful_ = false>
struct Features {
  static constexpr bool Modulated = Modulated_, Record = Record_, Plain = Plain_;
  static constexpr AvgKind K = K_;
  static constexpr bool Classes = Classes_, Batch = Batch_, Stateful = Stateful_;
  static constexpr bool OneUniform = !Classes && !Batch && !Stateful;
  static constexpr bool Discretised = K == AvgKind::Grid || K == AvgKind::RedwmGrid;
  static_assert(!(Classes && Batch), "batch sources run without traffic classes");
  static_assert(OneUniform || (!Plain && (K == AvgKind::AnyDrop || K == AvgKind::Grid ||
                                          (Classes && !Stateful && (K == AvgKind::Redwm || K == AvgKind::RedwmGrid)))),
                "batch arrivals and the stateful AQM run with the EWMA filter, classes with the EWMA or REDwM, not Plain");
};

/// The slot loop: slots t..t_end of one model, the order of events of engine.hpp, the
/// draws in the order engine.hpp lists.  The skeleton (stateful max_th move, modulator move,
/// filter update or grid mapping, arrivals, filter advance, adaptive p_max, the fates of
/// the arrivals, departure, push-out, response time, observation) is written once; each
/// feature of F is an `if constexpr` part of it.
template <class F>
void chunk(const SlotParams& P, SimState& s, Xoshiro256& rng_ref, int64_t t, const int64_t t_end, Tally& T) {
  constexpr AvgKind K = F::K;
  constexpr bool Disc = F::Discretised, Cls = F::Classes, Stf = F::Stateful, One = F::OneUniform;
  Xoshiro256 rng = rng_ref;  // a local copy stays in registers
  const int N = P.N;
  const uint64_t mask = s.mask;
  int64_t* const buf = s.buf.data();
  uint64_t head = s.head;
  int n = s.n, m = s.m, g = s.g;
  double avg = s.avg;
  const bool per_slot = P.per_slot;
  const double ecn = P.ecn;
  const uint64_t mu_thr = P.mu_thr;
  const bool pushout = P.policy != DropPolicy::Tail;
  // the target table holds the filter without cur_max_th (the stateful AQM maps in the loop)
  const bool table = !Stf && !P.tgt_lo.empty();
  double lam53 = P.lam53[static_cast<size_t>(m)];
  // OneUniform: admissions and departures follow at the end: admitted = arrivals - AQM drops
  // - overflows + push-outs (the arrival that pushes a waiting packet out is admitted),
  // departed = n at the start + admitted - pushed out - n at the end; the others count them
  const int n0 = n;
  int64_t c_arr = 0, c_aqm = 0, c_mark = 0, c_ovf = 0, c_push = 0, c_fc = 0, c_adm = 0, c_dep = 0;
  double sum_avg = 0.0;
  [[maybe_unused]] double sum_count = 0.0, sum_pmax = 0.0, sum_maxth = 0.0;
  int64_t* const hn = T.hist_n;
  int64_t hsize = 0, lim = 0;
  int64_t* hr = nullptr;
  if constexpr (F::Record && !Cls) {
    hsize = static_cast<int64_t>(T.hist_r->size());
    hr = T.hist_r->data();
    lim = hsize == P.max_r ? P.max_r - 1 : hsize;
  }
  // the stateful AQM: count, p_max, clock, cur_max_th in s; its drop function with the current p_max
  [[maybe_unused]] const detail::StatefulLayout* const S = Stf ? &*P.sa : nullptr;
  [[maybe_unused]] double fire = 0.0;
  [[maybe_unused]] std::conditional_t<Stf, DropFunction, char> drop_now{};
  [[maybe_unused]] const DropFunction* drop = &P.drop;
  if constexpr (Stf) {
    if (!s.aqm_ready) {
      s.count = -1, s.phase = 0, s.k = S->pmax_start, s.pmax = S->pmax[static_cast<size_t>(S->pmax_start)];
      s.j = 0;
      s.aqm_ready = true;
    }
    s.k = std::min<int>(s.k, static_cast<int>(S->pmax.size()) - 1);
    drop_now = P.drop;
    drop_now.p_max = s.pmax;
    drop = &drop_now;
    if (S->adaptive) fire = 1.0 / static_cast<double>(S->opt.interval);
  }
  // classes: per FIFO place the packet's record (flow << 1 | ECN-capable), the per-class counts
  [[maybe_unused]] const SlotParams::Classes* const Kp = Cls ? &*P.cls : nullptr;
  [[maybe_unused]] uint32_t* meta = nullptr;
  [[maybe_unused]] ClassTally* const ct = T.ct;
  // (the helpers capture no hot local by reference: rng, head, n, avg, g stay in registers)
  [[maybe_unused]] auto elephant = [Kp](uint32_t rec) {
    if constexpr (Cls) return Kp->elephant(rec);
    return false;
  };
  [[maybe_unused]] auto at = [&meta, mask](uint64_t h, int j) -> uint32_t& { return meta[(h + static_cast<uint64_t>(j)) & mask]; };
  if constexpr (Cls) {
    if (s.meta.size() != s.buf.size()) s.meta.assign(s.buf.size(), 0);
    if (s.in_sys.size() != static_cast<size_t>(Kp->C)) s.in_sys.assign(static_cast<size_t>(Kp->C), 0);
    meta = s.meta.data();
    // the per-class counts and the elephants, recounted from the packets (a scenario phase may
    // change the mice flags; O(n) per stretch of up to 4096 slots)
    std::fill(s.in_sys.begin(), s.in_sys.end(), 0);
    s.elephants = 0;
    for (int j = 0; j < n; ++j) {
      ++s.in_sys[static_cast<size_t>(Kp->flow_class[at(head, j) >> 1])];
      s.elephants += static_cast<int>(elephant(at(head, j)));
    }
  }
  // the AQM's drop probability p_b of an arrival that reaches the test (not OneUniform)
  [[maybe_unused]] auto p_b = [&P, S, &s, drop](int g, double avg) {
    if constexpr (Stf) {
      if (S->dyn_maxth) return Disc ? S->mt_pdrop[s.j][static_cast<size_t>(g)] : S->mt_drop[s.j](avg);
      return Disc ? S->pdrop[static_cast<size_t>(s.k)][static_cast<size_t>(g)] : (*drop)(avg);
    }
    return Disc ? P.pdrop[static_cast<size_t>(g)] : (*drop)(avg);
  };
  // the AQM decision (with the spacing rule of the stateful AQM; not OneUniform)
  [[maybe_unused]] auto decide = [S, &s](Xoshiro256& rng, double pb) {
    if constexpr (Stf) {
      const detail::SpacingStep st = detail::spacing_step(S->spacing, s.count, pb);
      const bool decision = rng.uniform() < st.decision;
      s.count = decision ? st.after_decision : st.after_none;
      return decision;
    }
    return rng.uniform() < pb;
  };
  for (; t <= t_end; ++t) {
    const int q = n > 0 ? n - 1 : 0;
    // dynamic max_th: from P_t = p(avg_{t-1}) (or q / N) and Q_t; AutoRED's weight reads P_t
    // with cur_max_th at the start of the slot (j0)
    [[maybe_unused]] int j0 = 0;
    if constexpr (Stf) {
      j0 = s.j;
      if (S->dyn_maxth) {
        const double Pt = S->p_by_queue ? static_cast<double>(q) / N
                                        : (Disc ? S->mt_pdrop[s.j][static_cast<size_t>(g)] : S->mt_drop[s.j](avg));
        s.j = detail::maxth_next(s.j, Pt, q, S->mt_drop[0].hi);
      }
    }
    // modulator move
    if constexpr (F::Modulated) {
      m = next_modulator(P, m, rng.uniform());
      lam53 = P.lam53[static_cast<size_t>(m)];
    }
    // filter update: the candidate avg_t (taken when the filter advances) and, OneUniform, p(avg_t)
    double cand;
    [[maybe_unused]] double p = 0.0;
    int gc = 0;
    [[maybe_unused]] int gsc[K == AvgKind::RedwmGrid ? kMaxRedwmSums : 1];
    if constexpr (K == AvgKind::RedwmGrid) {
      // the chain's step (docs/redwm.md): A' and s^(1..R)' from the grid values, each mapped
      // on its grid (one draw for A, then one per sum)
      const int R = P.R;
      const uint64_t kA = rng.next() >> 11;
      uint64_t kS[kMaxRedwmSums];
      double sv[kMaxRedwmSums], ys[kMaxRedwmSums];
      for (int i = 0; i < R; ++i) {
        kS[i] = rng.next() >> 11;
        sv[i] = P.spoints[static_cast<size_t>(i)][static_cast<size_t>(s.gs[i])];
      }
      double yA;
      P.rfilter->next(P.points[static_cast<size_t>(g)], sv, q, yA, ys);
      const GridTarget ta = P.grid->map(yA);
      gc = ta.lo + static_cast<int>(kA >= threshold(ta.p_lo));
      for (int i = 0; i < R; ++i) {
        const GridTarget ts = P.sgrids[static_cast<size_t>(i)].map(ys[i]);
        gsc[i] = ts.lo + static_cast<int>(kS[i] >= threshold(ts.p_lo));
      }
      cand = P.points[static_cast<size_t>(gc)];
      p = P.pdrop[static_cast<size_t>(gc)];
    } else if constexpr (K == AvgKind::Redwm) {
      // A_t = sum_j a_j A_{t-j} + b_0 q_{t-1} + sum_{i >= 1} b_i q_{t-1-i}
      const int rk = static_cast<int>(P.ra.size()), rm = static_cast<int>(P.rb.size()) - 1;
      double y = P.rb[0] * q;
      for (int j = 0; j < rk; ++j) y += P.ra[static_cast<size_t>(j)] * s.ha[j];
      for (int i = 1; i <= rm; ++i) y += P.rb[static_cast<size_t>(i)] * s.hq[i - 1];
      cand = y;
      p = P.drop(cand);
    } else if constexpr (K == AvgKind::Grid) {
      const uint64_t k = rng.next() >> 11;
      int32_t lo;
      uint64_t thr;
      if (table) {
        const size_t i = static_cast<size_t>(g) * static_cast<size_t>(N) + static_cast<size_t>(q);
        lo = P.tgt_lo[i];
        thr = P.tgt_thr[i];
      } else {
        const GridTarget gt = P.grid->map(P.filter.next(P.points[static_cast<size_t>(g)], q, j0));
        lo = gt.lo;
        thr = threshold(gt.p_lo);
      }
      gc = lo + static_cast<int>(k >= thr);
      cand = P.points[static_cast<size_t>(gc)];
      if constexpr (One) p = P.pdrop[static_cast<size_t>(gc)];
    } else {
      cand = P.filter.next(avg, q, j0);
      if constexpr (K == AvgKind::Red) p = P.red(cand);
      else if constexpr (K == AvgKind::AnyDrop && One) p = P.drop(cand);
    }
    auto advance = [&](bool arr) {
      if constexpr (F::Plain) {
        avg = cand;
        if constexpr (Disc) g = gc;
        if constexpr (K == AvgKind::RedwmGrid) std::copy_n(gsc, P.R, s.gs);
      } else {
        const bool adv = per_slot | arr;
        avg = select(adv, cand, avg);
        if constexpr (Disc) g = select(adv, gc, g);
        if constexpr (K == AvgKind::RedwmGrid)
          for (int i = 0; i < P.R; ++i) s.gs[i] = select(adv, gsc[i], s.gs[i]);
      }
      if constexpr (K == AvgKind::Redwm) {
        if (F::Plain || per_slot || arr) {  // the filter stepped: shift the histories
          const int rk = static_cast<int>(P.ra.size()), rm = static_cast<int>(P.rb.size()) - 1;
          for (int j = rk - 1; j > 0; --j) s.ha[j] = s.ha[j - 1];
          if (rk > 0) s.ha[0] = cand;
          for (int i = rm - 1; i > 0; --i) s.hq[i] = s.hq[i - 1];
          if (rm > 0) s.hq[0] = q;
        }
      }
    };
    // arrivals: Batch, their number by inversion of the slot's count cdf; else one uniform u
    // against lam (OneUniform: the same u decides the arrival's fate below)
    int arrivals;
    [[maybe_unused]] double u = 0.0;
    if constexpr (F::Batch) {
      const double ub = rng.uniform();
      const double* c = P.bcdf[static_cast<size_t>(m)].data();
      arrivals = 0;
      while (arrivals < P.B && ub >= c[arrivals]) ++arrivals;
    } else {
      u = static_cast<double>(rng.next() >> 11);
      arrivals = u < lam53;
    }
    const bool arr = arrivals > 0;
    // the filter advances (in every slot, or with an arrival); the single-uniform path does
    // it after the departure draw below (the same values: no draw depends on it)
    if constexpr (!One) advance(arr);
    // adaptive p_max: its clock (exact, or geometric: one uniform), its move (discretised: mapped with one uniform)
    if constexpr (Stf) {
      if (S->adaptive) {
        bool fires;
        if (S->opt.clock == AdaptiveClock::Exact) {
          s.phase = (s.phase + 1) % S->opt.interval;
          fires = s.phase == 0;
        } else {
          fires = rng.uniform() < fire;
        }
        if (fires) {
          if constexpr (Disc) {
            const GridTarget pt = S->target(s.k, avg);
            s.k = pt.lo + static_cast<int>(pt.p_lo < 1.0 && !(rng.uniform() < pt.p_lo));
            s.pmax = S->pmax[static_cast<size_t>(s.k)];
          } else {
            s.pmax = detail::adaptive_move(S->opt, S->lo_th, S->hi_th, s.pmax, avg);
          }
          drop_now.p_max = s.pmax;
        }
      }
    }
    // the fates of the arrivals, the departure of the packet in service at the start of the
    // slot (one uniform against mu, drawn in every slot) and the FIFO: `now` packets after
    // the arrivals and push-outs, before the departure
    bool dep;
    int now;
    enum Loss { None, Aqm, Overflow, Compare };
    if constexpr (One) {
      // one uniform against disjoint intervals (engine.hpp)
      const double lp = lam53 * p;
      const bool full = n == N;
      const bool decision = !full & (u < lp);
      bool mark = false;
      if constexpr (!F::Plain) mark = decision & (u < lp * ecn);
      const bool dropped = decision & !mark;
      const bool ovf = full & arr;
      const bool adm = arr & !full & !dropped;
      dep = (n > 0) & ((rng.next() >> 11) < mu_thr);
      advance(arr);
      buf[(head + static_cast<uint64_t>(n)) & mask] = t;  // the arrival's slot; kept only if admitted
      if (pushout && (dropped | ovf) && n > 1) [[unlikely]] {
        // admit the arrival, discard a waiting packet (never the one in service)
        const int waiting = n - 1;
        const int j = P.policy == DropPolicy::Front ? 1 : 1 + static_cast<int>(rng.uniform() * waiting);
        erase(buf, mask, head, n, std::min(j, waiting));
        buf[(head + static_cast<uint64_t>(n - 1)) & mask] = t;
        ++c_push;
      }
      now = n + static_cast<int>(adm);
      c_arr += arr;
      c_aqm += dropped;
      c_mark += mark;
      c_ovf += ovf;
    } else if constexpr (F::Batch) {
      // the fates of the k packets, one after another: each finds n plus the packets of the
      // batch admitted before it (the departure of the slot frees no room for them)
      Loss fate[kMaxBatch];
      int admitted = 0;
      for (int i = 0; i < arrivals; ++i) {
        if (n + admitted == N) {
          ++c_ovf, fate[i] = Overflow;
          continue;
        }
        fate[i] = None;
        if (decide(rng, p_b(g, avg))) {
          const bool mark = ecn > 0.0 && rng.uniform() < ecn;
          c_mark += mark;
          if (!mark) ++c_aqm, fate[i] = Aqm;
        }
        admitted += fate[i] == None;
      }
      dep = (n > 0) & ((rng.next() >> 11) < mu_thr);
      // the FIFO in the batch's order: an admitted packet joins the tail; a rejected one goes
      // to the drop policy, which may admit it and discard a waiting packet instead (never
      // the one in service; packets of the batch admitted before it count as waiting)
      now = n;
      for (int i = 0; i < arrivals; ++i) {
        if (fate[i] != None) {
          if (!pushout || now < 2) continue;
          const int waiting = now - 1;
          const int j = P.policy == DropPolicy::Front ? 1 : 1 + static_cast<int>(rng.uniform() * waiting);
          erase(buf, mask, head, now, std::min(j, waiting));
          --now;
          ++c_push;
        }
        buf[(head + static_cast<uint64_t>(now)) & mask] = t;
        ++now;
        ++c_adm;
      }
      c_arr += arrivals;
    } else {
      // the arrival's class, flow and (modified RED) ECN capability
      int c = 0, fl = 0;
      bool capable = false;
      if constexpr (Cls) {
        if (arr) {
          const uint32_t rec = Kp->draw(m, rng, c);
          fl = static_cast<int>(rec >> 1);
          capable = rec & 1u;
        }
      }
      // the arrival's fate: what is lost (the arrival, a waiting packet `victim`) and why
      Loss lost = None;          // the arrival's loss
      int victim = 0;            // FIFO position of a discarded waiting packet (0: none)
      Loss victim_cause = None;  // Aqm / Overflow: pushed out; Compare: flow comparison
      bool mark = false, to_policy = false;
      [[maybe_unused]] bool search = false, direct = false;
      if (arr) {
        if (n == N) {
          ++c_ovf;
          to_policy = true;
          lost = Overflow;
        } else {
          bool matched = false;
          if constexpr (Cls) {
            if (Kp->flow_compare && avg >= Kp->min_th && n > 1) {
              const int j = pick_waiting(rng, n - 1);
              if (static_cast<int>(at(head, j) >> 1) == fl) matched = true, victim = j, victim_cause = Compare, lost = Compare;
            }
          }
          if (!matched && decide(rng, p_b(g, avg))) {
            if (!Cls || Kp->modified == Modified::None) {
              const double e = Cls ? Kp->ecn[static_cast<size_t>(c)] : ecn;
              mark = e > 0.0 && rng.uniform() < e;
              to_policy = !mark;
            } else if constexpr (Cls) {
              // modified RED (docs/classes.md): below max_th an early drop takes a waiting elephant
              // (first from the head, or by three random trials) whatever the arrival's class; with
              // no elephant waiting a protected arrival is admitted (marked when ECN-capable) and an
              // elephant arrival is dropped.  At or above max_th the arrival is dropped as in RED.
              double cur_max_th = Kp->max_th;
              if constexpr (Stf)
                if (S->dyn_maxth) cur_max_th = S->mt_drop[s.j].hi;
              const bool protect = capable || Kp->mice[static_cast<size_t>(c)];
              const int waiting_elephants = s.elephants - static_cast<int>(n > 0 && elephant(at(head, 0)));
              if (!(avg < cur_max_th)) to_policy = true;
              else if (waiting_elephants > 0) search = true;
              else if (protect) mark = capable;
              else direct = true;  // the arrival is the only elephant: it is the one dropped
            }
            if (to_policy || search || direct) ++c_aqm, lost = Aqm;
          }
        }
      }
      dep = (n > 0) & ((rng.next() >> 11) < mu_thr);
      if (to_policy && pushout && n > 1) {  // admit the arrival, discard a waiting packet (never the one in service)
        const int waiting = n - 1;
        const int j = P.policy == DropPolicy::Front ? 1 : 1 + static_cast<int>(rng.uniform() * waiting);
        victim = std::min(j, waiting), victim_cause = lost, lost = None;
      }
      if constexpr (Cls) {
        if (search) {  // modified RED: an elephant leaves instead of the protected arrival
          victim = Kp->modified_victim(rng, n - 1, [&at, head](int j) { return at(head, j); });
          victim_cause = Aqm, lost = None;
        }
      }
      now = n;
      if (victim > 0) {
        if constexpr (Cls) {
          const uint32_t rec = at(head, victim);
          const int vc = Kp->flow_class[rec >> 1];
          --s.in_sys[static_cast<size_t>(vc)];
          s.elephants -= static_cast<int>(elephant(rec));
          if (victim_cause == Compare) c_fc += 1;
          if (ct) {
            ++(victim_cause == Compare ? ct->fc : ct->push)[static_cast<size_t>(vc)];
            ++ct->f_lost[rec >> 1];
          }
          erase2(buf, meta, mask, head, n, victim);
        } else {
          erase(buf, mask, head, n, victim);
        }
        ++c_push;
        --now;
      }
      if (arr) {
        ++c_arr;
        c_mark += mark;
        if constexpr (Cls) {
          if (ct) {
            ++ct->arr[static_cast<size_t>(c)];
            ++ct->f_arr[static_cast<size_t>(fl)];
            ct->marks[static_cast<size_t>(c)] += mark;
          }
        }
        if (lost == None) {
          buf[(head + static_cast<uint64_t>(now)) & mask] = t;
          if constexpr (Cls) {
            const uint32_t rec = (static_cast<uint32_t>(fl) << 1) | static_cast<uint32_t>(capable);
            meta[(head + static_cast<uint64_t>(now)) & mask] = rec;
            ++s.in_sys[static_cast<size_t>(c)];
            s.elephants += static_cast<int>(elephant(rec));
          }
          ++now;
          ++c_adm;
        } else if constexpr (Cls) {
          if (lost == Compare) c_fc += 1;
          if (ct) {
            ++(lost == Aqm ? ct->aqm : lost == Overflow ? ct->ovf : ct->fc)[static_cast<size_t>(c)];
            ++ct->f_lost[static_cast<size_t>(fl)];
          }
        }
      }
    }
    // the response time of the departing packet
    if constexpr (Cls) {
      if (dep) {
        const uint32_t rec = at(head, 0);
        const int dc = Kp->flow_class[rec >> 1];
        --s.in_sys[static_cast<size_t>(dc)];
        s.elephants -= static_cast<int>(elephant(rec));
        const int64_t r = t - buf[head & mask];
        if (ct) {
          ++ct->dep[static_cast<size_t>(dc)];
          ++ct->f_dep[rec >> 1];
          if constexpr (F::Record) class_response(T, dc, r, P.max_r);
        }
        if constexpr (F::Record) add_response(*T.hist_r, T.tail_r, T.tail_r2, *T.budget, r, P.max_r, "batch");
      }
    } else if constexpr (F::Record) {
      // 0 without a departure (masked, not branched: a departure is a coin toss the branch
      // predictor cannot learn); bin 0 is the sink
      const int64_t r = (t - buf[head & mask]) & -static_cast<int64_t>(dep);
      if (r >= lim) [[unlikely]]
        hr = response_tail(T, r, P.max_r, hsize, lim);
      else
        ++hr[r];
    }
    head += dep;
    n = now - static_cast<int>(dep);
    if constexpr (!One) c_dep += dep;
    // observation
    ++hn[n];
    sum_avg += avg;
    if constexpr (Cls) {
      if (ct)
        for (int k = 0; k < Kp->C; ++k) ct->sum_n[static_cast<size_t>(k)] += s.in_sys[static_cast<size_t>(k)];
    }
    if constexpr (Stf) {
      sum_count += static_cast<double>(s.count);
      sum_pmax += s.pmax;
      sum_maxth += S->mt_drop[s.j].hi;
    }
  }
  s.n = n, s.m = m, s.g = g, s.avg = avg, s.head = head;
  if constexpr (One) {
    c_adm = c_arr - c_aqm - c_ovf + c_push;
    c_dep = n0 + c_adm - c_push - n;
  }
  T.arrivals += c_arr, T.aqm += c_aqm, T.marks += c_mark, T.overflow += c_ovf, T.flow_compare += c_fc;
  T.departures += c_dep, T.admitted += c_adm, T.pushed += c_push;
  T.sum_avg += sum_avg;
  if constexpr (Stf) {
    T.sum_count += sum_count;
    T.sum_pmax += sum_pmax;
    T.sum_maxth += sum_maxth;
  }
  rng_ref = rng;
}

template <bool Mod, bool Rec, bool Plain>
ChunkFn pick(const SlotParams& P) {
  using K = AvgKind;
  if (P.redwm)
    return P.discretised ? &chunk<Features<Mod, K::RedwmGrid, Rec, Plain>> : &chunk<Features<Mod, K::Redwm, Rec, Plain>>;
  if (P.discretised) return &chunk<Features<Mod, K::Grid, Rec, Plain>>;
  switch (P.drop_kind) {
    case SlotParams::DropKind::None: return &chunk<Features<Mod, K::NoDrop, Rec, Plain>>;
    case SlotParams::DropKind::Red: return &chunk<Features<Mod, K::Red, Rec, Plain>>;
    default: return &chunk<Features<Mod, K::AnyDrop, Rec, Plain>>;
  }
}

template <bool Mod, bool Rec>
ChunkFn pick(const SlotParams& P) {
  return P.per_slot && P.ecn == 0.0 ? pick<Mod, Rec, true>(P) : pick<Mod, Rec, false>(P);
}

/// Classes, batch arrivals, the stateful AQM: continuous avg by the drop function or on the grid.
template <bool Rec, bool Cls, bool Batch, bool Stf>
ChunkFn pick_general(const SlotParams& P) {
  using K = AvgKind;
  if constexpr (Cls && !Stf) {  // classes with REDwM (continuous A, or on the chain's grids)
    if (P.redwm) {
      if (P.M > 1)
        return P.discretised ? &chunk<Features<true, K::RedwmGrid, Rec, false, Cls, Batch, Stf>>
                             : &chunk<Features<true, K::Redwm, Rec, false, Cls, Batch, Stf>>;
      return P.discretised ? &chunk<Features<false, K::RedwmGrid, Rec, false, Cls, Batch, Stf>>
                           : &chunk<Features<false, K::Redwm, Rec, false, Cls, Batch, Stf>>;
    }
  }
  if (P.M > 1)
    return P.discretised ? &chunk<Features<true, K::Grid, Rec, false, Cls, Batch, Stf>>
                         : &chunk<Features<true, K::AnyDrop, Rec, false, Cls, Batch, Stf>>;
  return P.discretised ? &chunk<Features<false, K::Grid, Rec, false, Cls, Batch, Stf>>
                       : &chunk<Features<false, K::AnyDrop, Rec, false, Cls, Batch, Stf>>;
}

template <bool Rec>
ChunkFn pick_general(const SlotParams& P) {
  const bool stf = P.sa.has_value();
  if (P.cls) return stf ? pick_general<Rec, true, false, true>(P) : pick_general<Rec, true, false, false>(P);
  if (P.B > 1) return stf ? pick_general<Rec, false, true, true>(P) : pick_general<Rec, false, true, false>(P);
  return pick_general<Rec, false, false, true>(P);
}

}  // namespace

ChunkFn chunk_function(const SlotParams& P, bool record) {
  if (P.cls || P.B > 1 || P.sa) return record ? pick_general<true>(P) : pick_general<false>(P);
  if (record) return P.M > 1 ? pick<true, true>(P) : pick<false, true>(P);
  return P.M > 1 ? pick<true, false>(P) : pick<false, false>(P);
}

void response_sums(const std::vector<int64_t>& h, int64_t max_r, const Tally& T, int64_t& sum_r, __int128& sum_r2) {
  __int128 s1 = T.tail_r, s2 = T.tail_r2;
  const size_t end = std::min(h.size(), static_cast<size_t>(max_r - 1));  // the last bin holds the tail
  for (size_t k = 1; k < end; ++k) {
    s1 += static_cast<__int128>(k) * h[k];
    s2 += static_cast<__int128>(k) * k * h[k];
  }
  sum_r = static_cast<int64_t>(s1);
  sum_r2 = s2;
}

}  // namespace aqm::sim
