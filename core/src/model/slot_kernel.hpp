// Internal: the one-slot transition of SPEC 3, shared by the chain builder and
// the tagged-packet builder so that both use one definition of a slot.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "aqmchain/model/filter.hpp"
#include "aqmchain/model/model.hpp"
#include "aqmchain/model/queue_generator.hpp"

namespace aqm::detail {

struct SlotKernel {
  // The filter's part of the state is one "cell" c: the avg grid index g for the EWMA,
  // c = g S + j for REDwM (A on grid point g, s on s-grid point j).  Keys are
  // n sn + c sc + m sm: the descriptor puts s_index right after avg_index, so the
  // stride of avg is S times that of s and one stride serves both.
  int N, G, S, M;  // buffer, avg grid points, s grid points (1 for the EWMA), modulator states
  double mu, ecn;
  EwmaFilter filter;
  bool redwm;
  RedwmFilter rfilter;
  Grid grid, sgrid;
  StateSpace space;
  int64_t sn, sc, sm;  // key strides of n, the filter cell and the modulator (from the descriptor)
  bool packed = false;  // sm = 1, sc = M, sn = G S M: the descriptor as the queue models build it
  std::vector<double> pdrop;  // p(g_i) of cell c's avg grid point, per cell
  std::vector<std::vector<std::pair<int, double>>> mrows;
  std::vector<double> lam;

  explicit SlotKernel(const Model& m)
      : N(m.buffer),
        mu(m.service.mu),
        ecn(m.aqm.ecn),
        filter(m.aqm),
        redwm(m.aqm.filter == FilterKind::Redwm),
        rfilter(redwm ? RedwmFilter(m.aqm) : RedwmFilter(ewma_as_redwm(m.aqm))),
        grid(m.grid.resolve(m.buffer), m.grid.mapping),
        sgrid(redwm ? redwm_s_grid(m) : std::vector<double>{0.0}, s_mapping(m.grid.mapping)),
        space(queue_state_space(m)),
        lam(m.source.arrival) {
    G = grid.size();
    S = sgrid.size();
    M = m.source.states();
    sn = space.stride(space.at(component::level));
    sc = space.stride(space.at(redwm ? component::s : component::avg));
    sm = space.stride(space.at(component::modulator));
    packed = sm == 1 && sc == sm * M && sn == sc * G * S && space.product() == sn * (N + 1);
    const DropFunction drop = m.resolved_drop();
    pdrop.resize(static_cast<size_t>(G) * S);
    for (int i = 0; i < G; ++i) std::fill_n(pdrop.begin() + static_cast<ptrdiff_t>(i) * S, S, drop(grid.points()[i]));
    mrows.resize(M);
    for (int i = 0; i < M; ++i) {
      // validation accepts rows within 1e-12 of stochastic; normalise so that P's
      // rows sum to 1 within round-off (checked at 1e-14 by the builder)
      double sum = 0.0;
      for (int j = 0; j < M; ++j) sum += m.source.matrix[i][j];
      for (int j = 0; j < M; ++j)
        if (m.source.matrix[i][j] > 0.0) mrows[i].push_back({j, m.source.matrix[i][j] / sum});
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
  int targets(int c, int q, int* tc, double* tp) const {
    if (redwm) return redwm_targets(c, q, tc, tp);
    const GridTarget t = grid.map(filter.next(grid.points()[c], q));
    tc[0] = t.lo, tp[0] = t.p_lo;
    if (t.p_lo >= 1.0) return 1;
    tc[1] = t.lo + 1, tp[1] = 1.0 - t.p_lo;
    return 2;
  }
  /// targets() of REDwM, out of line so that the EWMA's stays small enough to inline.
  [[gnu::noinline]] int redwm_targets(int c, int q, int* tc, double* tp) const {
    const int g = c / S, j = c - g * S;
    double yA, ys;
    rfilter.next(grid.points()[g], sgrid.points()[j], q, yA, ys);
    const GridTarget ta = grid.map(yA), ts = sgrid.map(ys);
    int cnt = 0;
    for (int u = 0; u < (ta.p_lo < 1.0 ? 2 : 1); ++u)
      for (int v = 0; v < (ts.p_lo < 1.0 ? 2 : 1); ++v) {
        tc[cnt] = (ta.lo + u) * S + ts.lo + v;
        tp[cnt++] = (u == 0 ? ta.p_lo : 1.0 - ta.p_lo) * (v == 0 ? ts.p_lo : 1.0 - ts.p_lo);
      }
    return cnt;
  }
  /// Most targets targets() returns.
  int max_targets() const { return redwm && S > 1 ? 4 : 2; }

  /// Steps 1-4 of a slot from (n, cell g, m), as branches f(g2, m2, weight, a, rej, mark):
  /// with probability `weight` the filter lands on cell g2 and the modulator on m2;
  /// then an arrival happens with probability a, and is rejected (overflow or
  /// AQM drop) with probability rej, ECN-marked with probability mark.
  template <class F>
  void branches(int n, int g, int m, F&& f) const {
    const int q = std::max(n - 1, 0);
    int gt[4];
    double pg[4];
    const int ng = targets(g, q, gt, pg);
    const bool per_arrival = !filter.per_slot();
    for (const auto& [m2, pm] : mrows[m]) {
      const double a = lam[m2];
      if (per_arrival && a < 1.0) f(g, m2, pm * (1.0 - a), 0.0, 0.0, 0.0);  // no arrival: no update
      if (per_arrival && a <= 0.0) continue;
      for (int k = 0; k < ng; ++k) {
        const double pd = pdrop[gt[k]];
        const double rej = n == N ? 1.0 : (1.0 - ecn) * pd;
        const double mark = n == N ? 0.0 : ecn * pd;
        if (per_arrival)
          f(gt[k], m2, pm * a * pg[k], 1.0, rej, mark);
        else
          f(gt[k], m2, pm * pg[k], a, rej, mark);
      }
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
};

}  // namespace aqm::detail
