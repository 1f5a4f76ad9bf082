// Internal: the one-slot transition of SPEC 3, shared by the chain builder and
// the tagged-packet builder so that both use one definition of a slot.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "aqmchain/model/filter.hpp"
#include "aqmchain/model/model.hpp"
#include "aqmchain/model/queue_generator.hpp"
#include "model/stateful.hpp"

namespace aqm::detail {

/// Where the stateful AQM's components (docs/stateful-aqm.md) sit in the keys of a state
/// space: strides (0 for an absent component) and sizes.
struct StatefulKeys {
  int64_t scnt = 0, sk = 0, sph = 0, smt = 0;
  int64_t ncount = 1, npmax = 1, nphase = 1;
  StatefulKeys() = default;
  StatefulKeys(const StateSpace& space, const StatefulLayout& L)
      : ncount(L.count_size()), npmax(static_cast<int64_t>(L.pmax.size())), nphase(L.phases) {
    auto stride = [&](const std::string& name) {
      const int i = space.find(name);
      return i < 0 ? int64_t{0} : space.stride(i);
    };
    scnt = stride(component::count);
    sk = stride(component::pmax);
    sph = stride(component::phase);
    smt = stride(component::maxth);
  }
  /// count (-1..cap), p_max index, clock phase, cur_max_th index
  struct Value {
    int64_t c;
    int k;
    int64_t ph;
    int j;
  };
  Value decode(int64_t key) const {
    return {scnt ? (key / scnt) % ncount - 1 : -1, sk ? static_cast<int>((key / sk) % npmax) : 0,
            sph ? (key / sph) % nphase : 0, smt ? static_cast<int>((key / smt) % 2) : 0};
  }
  int64_t encode(int64_t c, int k, int64_t ph, int j) const { return (c + 1) * scnt + k * sk + ph * sph + j * smt; }
};

struct SlotKernel {
  // The filter's part of the state is one "cell" c: the avg grid index g for the EWMA,
  // c = g S + j for REDwM (A on grid point g; j the mixed-radix index of s^(1..R) on their
  // grids, s^(R) fastest).  Keys are n sn + c sc + m sm: the descriptor puts s_index,
  // s2_index, ... right after avg_index, so the stride of avg is S times that of s^(R) and
  // one stride serves all.
  int N, G, S, M;  // buffer, avg grid points, s cells (product of the s grids' sizes; 1 for the EWMA), modulator states
  double mu;
  /// ECN-capable probability of an arrival in modulator state m: sum_c share_c(m) ecn_c (one
  /// class: its ecn in every state).  The plain kernel of a class model whose dynamics do not
  /// read the classes (no modified RED, no flow comparison) is the exact lumping of its class
  /// chain onto (n, avg, modulator[, the stateful AQM]): the response-time analysis of
  /// docs/classes.md uses it.
  std::vector<double> ecn_m;
  /// Per class c: its share of the arrivals in modulator state m (cls_share[c][m]) and its
  /// ECN probability (the tagged packet's own class in the per-class response times).
  std::vector<std::vector<double>> cls_share;
  std::vector<double> cls_ecn;
  EwmaFilter filter;
  bool redwm;
  RedwmFilter rfilter;
  Grid grid;
  std::vector<Grid> sgrids;  // s^(1..R) (REDwM; the single point 0 for the EWMA)
  int R = 1;                 // auxiliary sums
  StateSpace space;
  int64_t sn, sc, sm;  // key strides of n, the filter cell and the modulator (from the descriptor)
  bool packed = false;  // sm = 1, sc = M, sn = G S M: the descriptor as the queue models build it
  std::vector<double> pdrop;  // p(g_i) of cell c's avg grid point, per cell
  std::vector<std::vector<std::pair<int, double>>> mrows;
  std::vector<double> lam;
  /// Batch sources with B > 1 (docs/batch-arrivals.md): per modulator state the pmf of the
  /// number of arrivals in a slot, k = 0..B; empty otherwise (B = 1: lam holds the arrival
  /// probabilities, and a batch source with B = 1 is its MMBP exactly).
  int B = 1;
  std::vector<std::vector<double>> bpmf;
  // Stateful AQM (docs/stateful-aqm.md): components count, pmax_index, maxth_index, phase
  // (EWMA filter only: the cell is the avg index).
  bool stateful = false;
  std::optional<StatefulLayout> sa;
  StatefulKeys keys;  // where they sit in this kernel's keys

  explicit SlotKernel(const Model& m)
      : N(m.buffer),
        mu(m.service.mu),
        filter(m),
        redwm(m.aqm.filter == FilterKind::Redwm),
        rfilter(redwm ? RedwmFilter(m.aqm) : RedwmFilter(ewma_as_redwm(m.aqm))),
        grid(m.grid.resolve(m.buffer), m.grid.mapping),
        space(queue_state_space(m)),
        lam(m.source.arrival) {
    G = grid.size();
    for (const auto& pts : redwm ? redwm_s_grids(m) : std::vector<std::vector<double>>{{0.0}})
      sgrids.emplace_back(pts, s_mapping(m.grid.mapping));
    R = static_cast<int>(sgrids.size());
    S = 1;
    for (const Grid& sg : sgrids) S *= sg.size();
    M = m.source.states();
    sn = space.stride(space.at(component::level));
    sc = space.stride(space.at(redwm ? redwm_s_component(R) : component::avg));
    sm = space.stride(space.at(component::modulator));
    packed = sm == 1 && sc == sm * M && sn == sc * G * S && space.product() == sn * (N + 1);
    const DropFunction drop = m.resolved_drop();
    pdrop.resize(static_cast<size_t>(G) * S);
    for (int i = 0; i < G; ++i) std::fill_n(pdrop.begin() + static_cast<ptrdiff_t>(i) * S, S, drop(grid.points()[i]));
    for (int c = 0; c < m.class_count(); ++c) {
      cls_ecn.push_back(m.class_ecn(c));
      cls_share.emplace_back(static_cast<size_t>(M));
      for (int i = 0; i < M; ++i) cls_share.back()[static_cast<size_t>(i)] = m.class_share(c, i);
    }
    ecn_m.assign(static_cast<size_t>(M), 0.0);
    for (int i = 0; i < M; ++i)
      for (size_t c = 0; c < cls_ecn.size(); ++c) ecn_m[static_cast<size_t>(i)] += cls_share[c][static_cast<size_t>(i)] * cls_ecn[c];
    mrows.resize(M);
    for (int i = 0; i < M; ++i) {
      // validation accepts rows within 1e-12 of stochastic; normalise so that P's
      // rows sum to 1 within round-off (checked at 1e-14 by the builder)
      double sum = 0.0;
      for (int j = 0; j < M; ++j) sum += m.source.matrix[i][j];
      for (int j = 0; j < M; ++j)
        if (m.source.matrix[i][j] > 0.0) mrows[i].push_back({j, m.source.matrix[i][j] / sum});
    }
    if (m.source.max_batch() > 1) {
      B = m.source.max_batch();
      bpmf = m.source.count_pmf();
    }
    if (m.aqm.stateful()) {
      stateful = true;
      sa.emplace(m, grid.points());
      keys = StatefulKeys(space, *sa);
    }
  }

  /// s is mapped like A, except under `flags` (a grid of A's own): split.
  static Mapping s_mapping(Mapping avg) { return avg == Mapping::Flags ? Mapping::Split : avg; }
  /// Placeholder coefficients for the unused REDwM member of an EWMA kernel.
  static Aqm ewma_as_redwm(const Aqm& a) {
    Aqm r = a;
    r.a = {1.0 - a.w};
    r.b = {a.w};
    return r;
  }

  int64_t id(int n, int c, int m) const { return n * sn + c * sc + m * sm; }
  void decode(int64_t key, int& n, int& c, int& m) const {
    if (packed) {  // the only components, in this order: 2 divisions
      n = static_cast<int>(key / sn);
      const int64_t r2 = key - n * sn;
      c = static_cast<int>(r2 / sc);
      m = static_cast<int>(r2 - c * sc);
      return;
    }
    n = static_cast<int>((key / sn) % (N + 1));
    c = static_cast<int>((key / sc) % (static_cast<int64_t>(G) * S));
    m = static_cast<int>((key / sm) % M);
  }

  /// Step 1 of a slot: the filter's targets from cell c with q waiting packets, at most
  /// 4 (REDwM: A and s mapped independently); returns their number.
  /// `maxth`: the cur_max_th index at the start of the slot (AutoRED's weight reads it).
  int targets(int c, int q, int* tc, double* tp, int maxth = 0) const {
    if (redwm) return redwm_targets(c, q, tc, tp);
    const GridTarget t = grid.map(filter.next(grid.points()[c], q, maxth));
    tc[0] = t.lo, tp[0] = t.p_lo;
    if (t.p_lo >= 1.0) return 1;
    tc[1] = t.lo + 1, tp[1] = 1.0 - t.p_lo;
    return 2;
  }
  /// targets() of REDwM, out of line so that the EWMA's stays small enough to inline.
  /// Every sum mapped independently: the targets are the products of A's (outermost) and
  /// each s^(i)'s neighbours (s^(R) innermost); for R = 1 the order and the products of
  /// the form with one s.
  [[gnu::noinline]] int redwm_targets(int c, int q, int* tc, double* tp) const {
    const int g = c / S;
    int J = c - g * S;
    double sv[kMaxRedwmSums], s2[kMaxRedwmSums];
    int stride[kMaxRedwmSums];
    for (int i = R - 1, st = 1; i >= 0; --i) {
      const int z = sgrids[static_cast<size_t>(i)].size();
      stride[i] = st, st *= z;
      sv[i] = sgrids[static_cast<size_t>(i)].points()[static_cast<size_t>(J % z)];
      J /= z;
    }
    double yA;
    rfilter.next(grid.points()[g], sv, q, yA, s2);
    const GridTarget ta = grid.map(yA);
    int cnt = 0;
    for (int u = 0; u < (ta.p_lo < 1.0 ? 2 : 1); ++u) {
      tc[cnt] = (ta.lo + u) * S;
      tp[cnt++] = u == 0 ? ta.p_lo : 1.0 - ta.p_lo;
    }
    for (int i = 0; i < R; ++i) {
      const GridTarget ts = sgrids[static_cast<size_t>(i)].map(s2[i]);
      const int two = ts.p_lo < 1.0 ? 2 : 1;
      // expand in place, back to front: entry e becomes entries e two .. e two + two - 1
      for (int e = cnt - 1; e >= 0; --e)
        for (int v = two - 1; v >= 0; --v) {
          tc[e * two + v] = tc[e] + (ts.lo + v) * stride[i];
          tp[e * two + v] = tp[e] * (v == 0 ? ts.p_lo : 1.0 - ts.p_lo);
        }
      cnt *= two;
    }
    return cnt;
  }
  /// Most targets targets() returns (kMaxTargets at most).
  int max_targets() const {
    if (!redwm) return 2;
    int t = 2;
    for (const Grid& sg : sgrids) t *= sg.size() > 1 ? 2 : 1;
    return t;
  }
  static constexpr int kMaxTargets = 2 << kMaxRedwmSums;

  /// Steps 1-4 of a slot from (n, cell g, m), as branches f(g2, m2, weight, a, rej, mark):
  /// with probability `weight` the filter lands on cell g2 and the modulator on m2;
  /// then an arrival happens with probability a, and is rejected (overflow or
  /// AQM drop) with probability rej, ECN-marked with probability mark.  `maxth` as in
  /// targets().
  template <class F>
  void branches(int n, int g, int m, F&& f, int maxth = 0) const {
    const int q = std::max(n - 1, 0);
    int gt[kMaxTargets];
    double pg[kMaxTargets];
    const int ng = targets(g, q, gt, pg, maxth);
    const bool per_arrival = !filter.per_slot();
    for (const auto& [m2, pm] : mrows[m]) {
      const double a = lam[m2];
      if (per_arrival && a < 1.0) f(g, m2, pm * (1.0 - a), 0.0, 0.0, 0.0);  // no arrival: no update
      if (per_arrival && a <= 0.0) continue;
      for (int k = 0; k < ng; ++k) {
        const double pd = pdrop[gt[k]];
        const double e = ecn_m[static_cast<size_t>(m2)];
        const double rej = n == N ? 1.0 : (1.0 - e) * pd;
        const double mark = n == N ? 0.0 : e * pd;
        if (per_arrival)
          f(gt[k], m2, pm * a * pg[k], 1.0, rej, mark);
        else
          f(gt[k], m2, pm * pg[k], a, rej, mark);
      }
    }
  }

  /// Steps 1-3 of a slot with a batch source (B > 1) from (n, cell g, m), as branches
  /// f(g2, m2, weight, pk): with probability `weight` the filter lands on cell g2 and the
  /// modulator on m2, and then k = 0..B packets arrive with probability pk[k] (pk sums to 1,
  /// or, under the per-arrival rule, to the probability of the arrivals that go with the
  /// branch: the filter steps in a slot with at least one arrival, once).
  template <class F>
  void batch_branches(int n, int g, int m, F&& f) const {
    const int q = std::max(n - 1, 0);
    int gt[kMaxTargets];
    double pg[kMaxTargets];
    const int ng = targets(g, q, gt, pg);
    const bool per_arrival = !filter.per_slot();
    double none[kMaxBatch + 1] = {}, some[kMaxBatch + 1] = {};
    for (const auto& [m2, pm] : mrows[m]) {
      const double* b = bpmf[static_cast<size_t>(m2)].data();
      if (!per_arrival) {
        for (int k = 0; k < ng; ++k) f(gt[k], m2, pm * pg[k], b);
        continue;
      }
      none[0] = b[0];
      bool any = false;
      for (int k = 1; k <= B; ++k) any |= (some[k] = b[k]) > 0.0;
      if (b[0] > 0.0) f(g, m2, pm, none);  // no arrival: no update
      if (any)
        for (int k = 0; k < ng; ++k) f(gt[k], m2, pm * pg[k], some);
    }
  }

  /// Event weights in the order of queue_event_names().
  struct Events {
    double arrival = 0, aqm = 0, mark = 0, overflow = 0, admit = 0, depart = 0;
    void store(double* out) const {
      out[0] = arrival, out[1] = aqm, out[2] = mark, out[3] = overflow, out[4] = admit, out[5] = depart;
    }
  };

  /// Calls emit(n', g', m', p) for every transition out of (n, g, m) with p > 0
  /// (a target may be emitted more than once; callers merge), and fills `ev`.
  template <class Emit>
  void successors(int n, int g, int m, Emit&& emit, Events* ev) const {
    if (B > 1) return batch_successors(n, g, m, emit, ev);
    const double dep = n >= 1 ? mu : 0.0;
    Events e;
    e.depart = dep;
    branches(n, g, m, [&](int g2, int m2, double wgt, double a, double rej, double mark) {
      const double adm = a * (1.0 - rej);  // rej = 1 when n = N
      const double up = wgt * adm * (1.0 - dep), down = wgt * (1.0 - adm) * dep;
      const double stay = wgt * (adm * dep + (1.0 - adm) * (1.0 - dep));
      if (up > 0.0) emit(n + 1, g2, m2, up);
      if (down > 0.0) emit(n - 1, g2, m2, down);
      if (stay > 0.0) emit(n, g2, m2, stay);
      e.arrival += wgt * a;
      if (n == N)
        e.overflow += wgt * a;
      else
        e.aqm += wgt * a * rej;
      e.mark += wgt * a * mark;
      e.admit += wgt * adm;
    });
    if (ev) *ev = e;
  }

  /// successors() with a batch source (docs/batch-arrivals.md): the k packets of the slot
  /// meet the buffer one after another, with n and the packets of the batch admitted before
  /// them in the system (space s = N - n: the departure of the slot frees none); a packet
  /// that finds the system full overflows without an AQM test, else the AQM drops it with
  /// probability (1 - ecn) p(avg_t), marks it with ecn p(avg_t), admits it otherwise
  /// (marked packets are admitted), each packet independently.  So the admitted count is
  /// min(Binomial(k, 1 - (1 - ecn) p), s), computed by the recursion over the packets.
  template <class Emit>
  void batch_successors(int n, int g, int m, Emit&& emit, Events* ev) const {
    const double dep = n >= 1 ? mu : 0.0;
    const int s = N - n;
    Events e;
    e.depart = dep;
    double cur[kMaxBatch + 1], lev[kMaxBatch + 1];
    batch_branches(n, g, m, [&](int g2, int m2, double wgt, const double* pk) {
      const double pd = pdrop[static_cast<size_t>(g2)], ecn = ecn_m[static_cast<size_t>(m2)];
      const double alpha = 1.0 - (1.0 - ecn) * pd;  // a packet that meets the AQM test stays
      const int amax = std::min(B, s);
      std::fill_n(lev, amax + 1, 0.0);
      // cur[a]: P(a packets of the batch admitted so far), a = 0..top (top = min(i, s))
      cur[0] = 1.0;
      int top = 0;
      double decisions = 0.0;  // expected AQM tests among the packets so far
      auto tally = [&](int k) {
        const double w = pk[k];
        if (!(w > 0.0)) return;
        double mean = 0.0;
        for (int a = 0; a <= top; ++a) lev[a] += w * cur[a], mean += a * cur[a];
        e.arrival += wgt * w * k;
        e.admit += wgt * w * mean;
        e.aqm += wgt * w * decisions * (1.0 - ecn) * pd;
        e.mark += wgt * w * decisions * ecn * pd;
        e.overflow += wgt * w * (k - decisions);
      };
      tally(0);
      for (int k = 1; k <= B; ++k) {
        decisions += top < s ? 1.0 : 1.0 - cur[s];  // packet k is tested unless s are in
        const int nt = std::min(top + 1, s);
        for (int a = nt; a >= 0; --a) {
          const double here = a <= top ? cur[a] : 0.0;
          cur[a] = (a < s ? here * (1.0 - alpha) : here) + (a >= 1 ? cur[a - 1] * alpha : 0.0);
        }
        top = nt;
        tally(k);
      }
      // level n + a - (departure): each target once per branch
      for (int a = -1; a <= amax; ++a) {
        const double p = wgt * ((a >= 0 ? lev[a] * (1.0 - dep) : 0.0) + (a + 1 <= amax ? lev[a + 1] * dep : 0.0));
        if (p > 0.0) emit(n + a, g2, m2, p);
      }
    });
    if (ev) *ev = e;
  }

  /// The adaptive clock of a slot from phase ph: its outcomes (fires, probability) and
  /// the next phase (stateful kernels only).
  struct ClockStep {
    std::pair<bool, double> out[2];
    int n = 0;
    int64_t ph2 = 0;
  };
  ClockStep clock_step(int64_t ph) const {
    const StatefulLayout& S = *sa;
    ClockStep c;
    if (!S.adaptive || S.pmax.size() < 2) {
      c.out[c.n++] = {false, 1.0};
    } else if (S.opt.clock == AdaptiveClock::Exact) {
      c.ph2 = (ph + 1) % S.phases;
      c.out[c.n++] = {c.ph2 == 0, 1.0};
    } else {
      const double f = 1.0 / static_cast<double>(S.opt.interval);
      c.out[c.n++] = {true, f};
      if (f < 1.0) c.out[c.n++] = {false, 1.0 - f};
    }
    return c;
  }
  /// The p_max index after the clock, from index k with the updated avg on grid point g2:
  /// at most 3 (index, probability) merged by index (a move that stays, or a clock that
  /// cannot move p_max, gives weight pf + (1 - pf) = 1 exactly: the plain chain).
  int pmax_targets(const ClockStep& ck, int k, int g2, std::pair<int, double>* ks) const {
    int nk = 0;
    auto add_k = [&](int k2, double p) {
      if (!(p > 0.0)) return;
      for (int i = 0; i < nk; ++i)
        if (ks[i].first == k2) {
          ks[i].second += p;
          return;
        }
      ks[nk++] = {k2, p};
    };
    for (int ci = 0; ci < ck.n; ++ci) {
      const auto [fires, pf] = ck.out[ci];
      const GridTarget t = fires ? sa->target(k, grid.points()[g2]) : GridTarget{k, 1.0};
      add_k(t.lo, pf * t.p_lo);
      if (t.p_lo < 1.0) add_k(t.lo + 1, pf * (1.0 - t.p_lo));
    }
    return nk;
  }
  /// Dynamic max_th: the cur_max_th index of the slot, moved first from index j by
  /// P_t = p(avg_{t-1}) (or q / N) and Q_t, with n packets and avg on grid point g.
  int maxth_step(int j, int n, int g) const {
    const StatefulLayout& S = *sa;
    if (!S.dyn_maxth) return 0;
    const int q = std::max(n - 1, 0);
    return maxth_next(j, S.p_by_queue ? static_cast<double>(q) / N : S.mt_pdrop[j][static_cast<size_t>(g)], q,
                      S.mt_drop[0].hi);
  }
  /// The drop function's value p_b on avg grid point g2 with p_max index k2 and cur_max_th index j2.
  double stateful_pb(int k2, int j2, int g2) const {
    const StatefulLayout& S = *sa;
    return S.dyn_maxth ? S.mt_pdrop[j2][static_cast<size_t>(g2)] : S.pdrop[static_cast<size_t>(k2)][static_cast<size_t>(g2)];
  }

  /// Steps 1-3 of the stateful slot from (n, g, m) with p_max index k, the clock `ck` and
  /// cur_max_th index j at the start of the slot (AutoRED's weight reads it):
  /// f(g2, m2, k2, w, a) per branch of the filter, the modulator and the clock's p_max move.
  template <class F>
  void stateful_branches(int n, int g, int m, int k, int j, const ClockStep& ck, F&& f) const {
    branches(n, g, m, [&](int g2, int m2, double wgt, double a, double, double) {
      std::pair<int, double> ks[3];
      const int nk = pmax_targets(ck, k, g2, ks);
      for (int i = 0; i < nk; ++i) f(g2, m2, ks[i].first, wgt * ks[i].second, a);
    }, j);
  }

  /// The stateful slot (docs/stateful-aqm.md): from the key with count c (value -1..cap),
  /// p_max index k and clock phase ph.  Order: filter update (step 1), then the adaptive
  /// clock and p_max move with the updated avg, then steps 2-6 with p_b = p(avg; p_max) and
  /// the spacing rule for an arrival that reaches the AQM test (an overflow leaves the
  /// count unchanged).  Calls emit(key', p) (targets may repeat: callers merge).
  template <class Emit>
  void successors_stateful(int64_t key, Emit&& emit, Events* ev) const {
    const int n = static_cast<int>((key / sn) % (N + 1));
    const int g = static_cast<int>((key / sc) % G);
    const int m = static_cast<int>((key / sm) % M);
    const StatefulLayout& S = *sa;
    const StatefulKeys::Value v = keys.decode(key);
    const int64_t c = v.c;
    // dynamic max_th: cur_max_th moves first, from P_t = p(avg_{t-1}) (or q / N) and Q_t
    const int j2 = maxth_step(v.j, n, g);
    const ClockStep ck = clock_step(v.ph);
    const double dep = n >= 1 ? mu : 0.0;
    Events e;
    e.depart = dep;
    auto out = [&](int n2, int g2, int m2, int64_t c2, int k2, double p) {
      if (!(p > 0.0)) return;
      c2 = std::min(c2, S.cap_at(g2));  // a truncated count saturates at the cap of its avg point
      emit(n2 * sn + g2 * sc + m2 * sm + keys.encode(c2, k2, ck.ph2, j2), p);
    };
    // an outcome of total probability `mass` (per unit branch weight w) of which `adm` admits
    // the arrival, all leaving the count at c2: the level moves as in the plain kernel
    auto level = [&](int g2, int m2, int64_t c2, int k2, double w, double mass, double adm) {
      const double rest = mass - adm;
      out(n + 1, g2, m2, c2, k2, w * adm * (1.0 - dep));
      out(n - 1, g2, m2, c2, k2, w * rest * dep);
      out(n, g2, m2, c2, k2, w * (adm * dep + rest * (1.0 - dep)));
    };
    stateful_branches(n, g, m, v.k, v.j, ck, [&](int g2, int m2, int k2, double w, double a) {
      e.arrival += w * a;
      if (n == N) {  // overflow: no AQM test, the count stays
        e.overflow += w * a;
        level(g2, m2, c, k2, w, 1.0, 0.0);
        return;
      }
      const double pb = stateful_pb(k2, j2, g2);
      const SpacingStep st = spacing_step(S.spacing, c, pb, S.count_cap);
      const double ecn = ecn_m[static_cast<size_t>(m2)];
      const double rej = st.decision * (1.0 - ecn);
      e.aqm += w * a * rej;
      e.mark += w * a * st.decision * ecn;
      if (st.after_decision == c && st.after_none == c) {  // the count stays whatever happens
        const double adm = a * (1.0 - rej);
        e.admit += w * adm;
        level(g2, m2, c, k2, w, 1.0, adm);
        return;
      }
      e.admit += w * a * (1.0 - rej);
      if (a < 1.0) level(g2, m2, c, k2, w, 1.0 - a, 0.0);  // no arrival
      if (!(a > 0.0)) return;
      const double dec = a * st.decision, none = a * (1.0 - st.decision);
      if (dec > 0.0) level(g2, m2, st.after_decision, k2, w, dec, dec * ecn);
      if (none > 0.0) level(g2, m2, st.after_none, k2, w, none, none);
    });
    if (ev) *ev = e;
  }

  /// What happens to the arrival of a slot (the tagged-packet chain's view).
  enum class Fate { None, Admit, Mark, Drop, Overflow };
  /// Steps 1-4 of the stateful slot from `key` (n packets) as outcomes f(fate, p, rest):
  /// with probability p the arrival meets `fate` and the state, but for its level, becomes
  /// `rest` (the key without the level component).  The same rules as successors_stateful(),
  /// enumerated per arrival fate instead of per level move.  `cls` >= 0: the fates of an
  /// arrival of that class only (its share and its own ECN probability; no None).
  template <class F>
  void stateful_outcomes(int64_t key, int n, F&& f, int cls = -1) const {
    const int g = static_cast<int>((key / sc) % G);
    const int m = static_cast<int>((key / sm) % M);
    const StatefulLayout& S = *sa;
    const StatefulKeys::Value v = keys.decode(key);
    const int j2 = maxth_step(v.j, n, g);
    const ClockStep ck = clock_step(v.ph);
    stateful_branches(n, g, m, v.k, v.j, ck, [&](int g2, int m2, int k2, double w, double a) {
      auto rest = [&](int64_t c2) {
        return g2 * sc + m2 * sm + keys.encode(std::min(c2, S.cap_at(g2)), k2, ck.ph2, j2);
      };
      if (a < 1.0 && cls < 0) f(Fate::None, w * (1.0 - a), rest(v.c));
      const double a_c = cls < 0 ? a : a * cls_share[static_cast<size_t>(cls)][static_cast<size_t>(m2)];
      const double ecn = cls < 0 ? ecn_m[static_cast<size_t>(m2)] : cls_ecn[static_cast<size_t>(cls)];
      if (!(a_c > 0.0)) return;
      if (n == N) return f(Fate::Overflow, w * a_c, rest(v.c));  // no AQM test, the count stays
      const SpacingStep st = spacing_step(S.spacing, v.c, stateful_pb(k2, j2, g2), S.count_cap);
      const double dec = a_c * st.decision;
      if (dec < a_c) f(Fate::Admit, w * (a_c - dec), rest(st.after_none));
      // successors_stateful merges the fates when the count stays: a drop whose admission
      // complement a (1 - rej) rounds to 1 has no transition there, so none here either
      const bool merged = st.after_decision == v.c && st.after_none == v.c;
      const bool drops = !merged || a * (1.0 - st.decision * (1.0 - ecn_m[static_cast<size_t>(m2)])) < 1.0;
      if (dec > 0.0) {
        if (ecn < 1.0 && drops) f(Fate::Drop, w * dec * (1.0 - ecn), rest(st.after_decision));
        if (ecn > 0.0) f(Fate::Mark, w * dec * ecn, rest(st.after_decision));
      }
    });
  }
};

}  // namespace aqm::detail
