// Internal: the AQM state beyond avg (docs/stateful-aqm.md), shared by the chain's slot
// kernel and the simulator so that both use one definition of the rules:
//  - drop spacing ("Random Early Detection Gateways for Congestion Avoidance"; the ns-3
//    "wait" variant): the count of arrivals since the last early drop;
//  - adaptive RED ("Adaptive RED: An Algorithm for Increasing the Robustness of RED's
//    Active Queue Management"): p_max moved every `interval` slots by avg's position.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include "aqmchain/interrupt.hpp"
#include "aqmchain/model/grid.hpp"
#include "aqmchain/model/model.hpp"

namespace aqm::detail {

/// The early-drop probability p_a of an arrival that sees p_b with `count` arrivals since
/// the last decision (count already incremented for this arrival), clipped to [0, 1].
inline double spaced_probability(Spacing s, int64_t count, double pb) {
  const double c = static_cast<double>(count) * pb;
  if (s == Spacing::Count) return c >= 1.0 ? 1.0 : std::min(1.0, pb / (1.0 - c));
  if (s == Spacing::Wait) return c < 1.0 ? 0.0 : (c >= 2.0 ? 1.0 : std::min(1.0, pb / (2.0 - c)));
  return pb;
}

/// Outcome of the spacing rule for an arrival that reaches the AQM test: probability of an
/// early decision (drop or mark), the count after a decision and after none.
struct SpacingStep {
  double decision;
  int64_t after_decision, after_none;
};
/// `cap`: the chain's truncated count saturates there (an arrival not dropped at count cap
/// keeps count cap; p_a is still taken at cap + 1). The simulator passes no cap.
inline SpacingStep spacing_step(Spacing s, int64_t count, double pb,
                                int64_t cap = std::numeric_limits<int64_t>::max()) {
  if (s == Spacing::None) return {pb, count, count};
  if (!(pb > 0.0)) return {0.0, -1, -1};
  if (pb >= 1.0) return {1.0, 0, 0};
  const int64_t c1 = count + 1;
  return {spaced_probability(s, c1, pb), 0, std::min(c1, cap)};
}

/// Relative tolerance of adaptive RED's bounds tests on p_max: p_max accumulates round-off
/// (0.1 + 40 x 0.01 lands just above 0.5), and a bound hit in exact arithmetic must count
/// as hit, in the simulator as on the chain's p_max grid.
constexpr double kPmaxBoundTol = 1e-9;

/// Adaptive RED's move of p_max from p when the clock fires with avg (the bounds p_max_high
/// and p_max_low tested as in exact arithmetic, within kPmaxBoundTol).
inline double adaptive_move(const Adaptive& a, double lo_th, double hi_th, double p, double avg) {
  const double span = hi_th - lo_th;
  if (avg > lo_th + a.target_hi * span && p <= a.p_max_high * (1.0 + kPmaxBoundTol))
    return std::min(1.0, p + std::min(a.increment, p / 4.0));
  if (avg < lo_th + a.target_lo * span && p >= a.p_max_low * (1.0 - kPmaxBoundTol)) return p * a.decrease;
  return p;
}

/// Dynamic max_th (FDynamicAutoRED): the next index of cur_max_th (0: max_th, 1: raised)
/// from P_t and the queue Q_t at the start of the slot.
inline int maxth_next(int j, double P, double q, double max_th) {
  if (P < 0.55 && q < max_th && j == 1) return 0;
  if (P >= 0.55 && P < 0.88 && q >= max_th && j == 0) return 1;
  return j;
}

/// Everything the chain (and the discretised simulator) needs: the count range and the
/// p_max grid with the drop probabilities on (p_max grid) x (avg grid).
struct StatefulLayout {
  Spacing spacing = Spacing::None;
  int64_t count_cap = 0;  ///< count in -1..count_cap (chain component index count + 1)
  /// The exact cap (p_a = 1 for every p_b on the grids beyond it); count_cap < count_cap_exact:
  /// truncated, the count saturates at count_cap (docs/stateful-aqm.md).
  int64_t count_cap_exact = 0;
  /// The stationary solve's first cap: min(exact cap, count_max, the power of two >= max(64,
  /// 4 / p_ref)), p_ref the drop probability (start p_max) at the middle of avg's band where
  /// 0 < p_b < 1 on the grid.
  int64_t count_start = 0;
  /// Per avg point, the count's cap there (a count entering the point saturates at it);
  /// empty: count_cap everywhere. count_cap is their largest.
  std::vector<int64_t> cap_at_point;
  /// Per avg point, the stationary solve's first cap (docs/stateful-aqm.md).
  std::vector<int64_t> start_at_point;
  int64_t cap_at(int g) const { return cap_at_point.empty() ? count_cap : cap_at_point[static_cast<size_t>(g)]; }
  bool count_truncated() const {
    if (spacing == Spacing::None) return false;
    for (int64_t c : cap_at_point)
      if (c < count_cap_exact) return true;
    return count_cap < count_cap_exact;
  }
  bool adaptive = false;
  Adaptive opt;
  double lo_th = 0.0, hi_th = 0.0;
  std::vector<double> pmax;  ///< the p_max grid (one point without adaptive)
  int pmax_start = 0;
  std::optional<Grid> pgrid;              ///< split mapping on pmax (>= 2 points)
  std::vector<std::vector<double>> pdrop;  ///< [p_max index][avg index]
  int64_t phases = 1;                     ///< exact clock: interval; else 1
  /// Dynamic max_th: the drop functions with cur_max_th = max_th and raised, their values
  /// on the avg grid, and the reading of P_t.
  bool dyn_maxth = false, p_by_queue = false;
  int N = 1;
  DropFunction mt_drop[2];
  std::vector<double> mt_pdrop[2];
  /// P_t from avg (grid index g when on the grid, else the value) with cur_max_th index j.
  double maxth_P(int j, double avg, double q) const {
    return p_by_queue ? q / static_cast<double>(N) : mt_drop[j](avg);
  }

  int64_t count_size() const { return spacing == Spacing::None ? 1 : count_cap + 2; }

  /// p_max index after the clock fired with avg, as a split between two grid points.
  GridTarget target(int k, double avg) const {
    if (!pgrid) return {static_cast<int32_t>(k), 1.0};  // a single p_max value
    return pgrid->map(adaptive_move(opt, lo_th, hi_th, pmax[static_cast<size_t>(k)], avg));
  }

  StatefulLayout(const Model& m, const std::vector<double>& avg_points) {
    const Aqm& q = m.aqm;
    spacing = q.spacing;
    adaptive = q.adaptive.enabled;
    opt = q.adaptive;
    const DropFunction base = m.resolved_drop();
    lo_th = base.lo, hi_th = base.hi;
    const double p0 = base.p_max;
    pmax = {p0};
    if (adaptive) {
      const double h = opt.p_max_step;
      const double hi = opt.increment > 0.0 ? std::max(p0, opt.p_max_high + std::min(opt.increment, opt.p_max_high / 4))
                                            : p0;
      const double lo = opt.decrease < 1.0 ? std::min(p0, opt.p_max_low * opt.decrease) : p0;
      // points inside [lo, hi] (moves beyond the end points are clamped to them): a point
      // below lo could be absorbing (p_max = 0 never moves up again)
      const int64_t jlo = static_cast<int64_t>(std::ceil((lo - p0) / h - 1e-9));
      const int64_t jhi = std::min(static_cast<int64_t>(std::floor((hi - p0) / h + 1e-9)),
                                   static_cast<int64_t>(std::floor((1.0 - p0) / h + 1e-9)));
      if (jhi - jlo + 1 > 100000)
        fail_param("aqm.p_max_step", "large enough for at most 1e5 p_max grid points", h);
      pmax.clear();
      for (int64_t j = jlo; j <= jhi; ++j) pmax.push_back(std::clamp(p0 + static_cast<double>(j) * h, 0.0, 1.0));
      pmax_start = static_cast<int>(-jlo);
      pmax[static_cast<size_t>(pmax_start)] = p0;
      if (pmax.size() >= 2) pgrid.emplace(pmax, Mapping::Split);
      // a p_max that cannot move needs no clock: the chain is the plain one
      if (opt.clock == AdaptiveClock::Exact && pmax.size() > 1) phases = opt.interval;
    }
    if (static_cast<double>(pmax.size()) * static_cast<double>(avg_points.size()) > 5e7)
      throw StateSpaceTooLarge("aqm.p_max_step",
                               cat("the drop table over ", pmax.size(), " p_max points x ", avg_points.size(),
                                   " avg points exceeds 5e7 entries: raise aqm.p_max_step (", opt.p_max_step,
                                   ") or coarsen the avg grid"));
    pdrop.assign(pmax.size(), std::vector<double>(avg_points.size()));
    double pmin = 2.0, at = 0.0;
    if (q.dynamic_max_th) {
      dyn_maxth = true;
      p_by_queue = q.autored_p == AutoredP::Queue;
      N = m.buffer;
      mt_drop[0] = mt_drop[1] = base;
      mt_drop[1].hi = base.hi * (1.0 + q.max_th_growth);
      for (int j = 0; j < 2; ++j) {
        mt_pdrop[j].resize(avg_points.size());
        for (size_t i = 0; i < avg_points.size(); ++i) {
          const double p = mt_pdrop[j][i] = mt_drop[j](avg_points[i]);
          if (p > 0.0 && p < pmin) pmin = p, at = avg_points[i];
        }
      }
    }
    for (size_t k = 0; k < pmax.size(); ++k) {
      DropFunction d = base;
      d.p_max = pmax[k];
      if ((k & 63) == 63) check_interrupt();
      for (size_t i = 0; i < avg_points.size(); ++i) {
        const double p = pdrop[k][i] = d(avg_points[i]);
        if (p > 0.0 && p < pmin) pmin = p, at = avg_points[i];
      }
    }
    if (spacing == Spacing::None) return;
    const double reach = spacing == Spacing::Count ? 1.0 : 2.0;  // p_a = 1 once count p_b >= reach
    count_cap_exact = 0;
    if (pmin < 1.0) {
      // the largest cc with cc pmin < reach (the same products as spaced_probability's), held
      // below 2^62 (a p_b that small is far beyond any count_max)
      const double c = std::min(std::ceil(reach / pmin), 4.6e18);
      int64_t cc = static_cast<int64_t>(c) - 1;
      while (cc < (int64_t{1} << 62) && static_cast<double>(cc + 1) * pmin < reach) ++cc;
      while (cc > 0 && static_cast<double>(cc) * pmin >= reach) --cc;
      count_cap_exact = cc;
    }
    // the start cap: from p_b at the middle of the band 0 < p_b < 1 (start p_max)
    {
      double a = -1.0, b = -1.0;
      const std::vector<double>& p0row = pdrop[static_cast<size_t>(pmax_start)];
      for (size_t i = 0; i < avg_points.size(); ++i)
        if (p0row[i] > 0.0 && p0row[i] < 1.0) {
          if (a < 0.0) a = avg_points[i];
          b = avg_points[i];
        }
      DropFunction d = base;
      d.p_max = pmax[static_cast<size_t>(pmax_start)];
      double pref = a >= 0.0 ? d(0.5 * (a + b)) : pmin;
      if (!(pref > 0.0 && pref < 1.0)) pref = pmin < 1.0 ? pmin : 0.5;
      const double want = std::max(64.0, 4.0 / pref);
      int64_t start = 64;
      while (static_cast<double>(start) < want && start < (int64_t{1} << 40)) start *= 2;
      count_start = std::min({start, count_cap_exact, static_cast<int64_t>(q.count_max)});
    }
    // per point: twice the count at which p_a = 1 there (its smallest nonzero p_b < 1), within
    // [16, count_start]; 16 where p_b is 0 or 1 (a count there is reset or decided by the next
    // arrival). Larger first caps make a chain the block preconditioner converges on slowly
    // from a cold start; grown caps start from the previous solution.
    start_at_point.assign(avg_points.size(), 0);
    for (size_t i = 0; i < avg_points.size(); ++i) {
      double pg = 2.0;
      for (const auto& row : pdrop)
        if (row[i] > 0.0 && row[i] < 1.0) pg = std::min(pg, row[i]);
      for (int j = 0; j < 2 && dyn_maxth; ++j)
        if (mt_pdrop[j][i] > 0.0 && mt_pdrop[j][i] < 1.0) pg = std::min(pg, mt_pdrop[j][i]);
      const double want = pg < 1.0 ? std::ceil(2.0 * reach / pg) : 0.0;
      const int64_t s0 = static_cast<int64_t>(std::clamp(want, 16.0, static_cast<double>(std::max<int64_t>(16, count_start))));
      start_at_point[i] = std::min({s0, count_cap_exact, static_cast<int64_t>(q.count_max)});
    }
    count_cap = q.count_trunc > 0 ? std::min(q.count_trunc, count_cap_exact) : count_cap_exact;
    if (!q.count_trunc_at.empty()) {
      if (q.count_trunc_at.size() != avg_points.size())
        fail_param("count_caps", cat("one cap per avg grid point (", avg_points.size(), ")"),
                   cat(q.count_trunc_at.size(), " caps"));
      cap_at_point.resize(avg_points.size());
      count_cap = 0;
      for (size_t i = 0; i < avg_points.size(); ++i) {
        const int64_t c = q.count_trunc_at[i];
        cap_at_point[i] = c > 0 ? std::min(c, count_cap_exact) : count_cap_exact;
        count_cap = std::max(count_cap, cap_at_point[i]);
      }
    }
    if (count_cap > q.count_max) {
      if (q.count_trunc > 0 || !q.count_trunc_at.empty())
        throw ModelError("aqm.count_max", cat("parameter 'aqm.count_max' must be >= the count's cap ", count_cap,
                                              "; got ", q.count_max));
      throw ModelError("aqm.count_max",
                       cat("parameter 'aqm.count_max' must be >= ", count_cap, " for spacing = '", to_string(spacing),
                           "': the smallest nonzero drop probability on the grid is p_b = ", pmin, " (avg = ", at,
                           "), so the count reaches ", count_cap, " before p_a = 1; got ", q.count_max,
                           " (raise aqm.count_max, solve with the stationary solve, which truncates the count where "
                           "its probability is below aqm.count_tail, or use a grid without points where p_b is that "
                           "small)"));
    }
  }
};

}  // namespace aqm::detail
