// Automatic avg grids: pre-solve, mass range, graded points within a state budget.
#include "aqmchain/analysis/grid_refinement.hpp"

#include "aqmchain/model/queue_generator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"

namespace aqm {

namespace {

using Clock = std::chrono::steady_clock;

/// Drop spacing: the states per avg point of the final chain against the pre-solve's, whose
/// count is truncated at kPresolveCountCap, at least (the start caps over the pre-solve's
/// where that is more; docs/stateful-aqm.md).
constexpr double kSpacingGrowth = 4.0;
/// Drop spacing: the pre-solve's count cap at every avg point (it only locates avg's mass).
constexpr int64_t kPresolveCountCap = 32;

/// States per pre-solve grid point (the largest over the models): the estimate of how
/// many (n, modulator) combinations a refined grid point will carry.
struct Density {
  int k = 1;
  std::vector<double> per_point;
  double estimate(const std::vector<double>& pts) const {
    double s = 0.0;
    const long last = static_cast<long>(per_point.size()) - 1;
    for (double x : pts) s += per_point[static_cast<size_t>(std::clamp(std::lround(x * k), 0L, last))];
    return s;
  }
};

}  // namespace

void describe_grid(const std::vector<double>& pts, int k, GridReport& r) {
  r.points = static_cast<int64_t>(pts.size());
  r.min_step = r.max_step = pts.size() > 1 ? pts[1] - pts[0] : 0.0;
  r.refined_ranges.clear();
  const double coarse = 1.0 / k;
  bool open = false;
  for (size_t i = 1; i < pts.size(); ++i) {
    const double h = pts[i] - pts[i - 1];
    r.min_step = std::min(r.min_step, h);
    r.max_step = std::max(r.max_step, h);
    if (h < 0.5 * coarse * (1.0 - 1e-9)) {
      if (!open) r.refined_ranges.push_back({pts[i - 1], pts[i], h});
      auto& run = r.refined_ranges.back();
      run[1] = pts[i];
      run[2] = std::min(run[2], h);
      open = true;
    } else {
      open = false;
    }
  }
}

namespace {
/// The model with its count truncated at cap 1 (drop spacing; else unchanged): its layout gives
/// the start caps and the p_max grid without the exact cap's aqm.count_max test.
Model count_truncated(Model m) {
  if (m.aqm.spacing != Spacing::None) {
    m.aqm.count_trunc = 1;
    m.aqm.count_trunc_at.clear();
  }
  return m;
}
}  // namespace

RefinedGrid refine_grid(const std::vector<Model>& models, const StationaryOptions& presolve, const BuildOptions& build,
                        bool keep_presolve) {
  if (models.empty()) fail_param("models", "at least one model", 0);
  const Model& first = models.front();
  for (const Model& m : models) {
    m.validate();
    if (m.buffer != first.buffer) fail_param("model.buffer", detail::cat("the same in every model (", first.buffer, ")"), m.buffer);
  }
  RefinedGrid out;
  out.grid = first.grid;
  if (first.grid.refine == Refine::None) {
    if (first.grid.mapping != Mapping::Flags) describe_grid(first.grid.resolve(first.buffer), first.grid.k, out.report);
    return out;
  }
  const RefineOptions& o = first.grid.refine_options;
  const int N = first.buffer;
  const auto t0 = Clock::now();
  StationaryOptions so = presolve;
  so.tol = std::max(so.tol, 1e-8);
  so.x0.clear();
  Density density;
  bool spaced = false;  // drop spacing in some model: the count multiplies the states per avg point
  for (const Model& m : models) spaced = spaced || m.aqm.spacing != Spacing::None;
  density.k = o.presolve_k;
  density.per_point.assign(static_cast<size_t>(o.presolve_k) * N + 1, 0.0);
  std::vector<GridFocus> foci;
  const double margin = std::max(1.0, 2.0 / o.presolve_k);
  for (const Model& m : models) {
    Model pm = m;  // the same model (REDwM's s grid too) on the uniform avg grid 1/presolve_k
    pm.grid.refine = Refine::None;
    pm.grid.points.clear();
    pm.grid.k = o.presolve_k;
    // drop spacing (slotted, or ns-3's count in continuous time): the pre-solve only locates
    // avg's mass, so its count is truncated at the count's start caps (the stationary solve's
    // first caps derive from them), at most kPresolveCountCap (docs/stateful-aqm.md)
    std::vector<int64_t> start_caps;  // per pre-solve point: the count's start cap there (count_start_at)
    if (pm.aqm.spacing != Spacing::None) {
      start_caps = stateful_info(count_truncated(pm)).count_start_at;
      pm.aqm.count_trunc = 0;
      pm.aqm.count_trunc_at = start_caps;
      for (int64_t& c : pm.aqm.count_trunc_at) c = std::min<int64_t>(c, kPresolveCountCap);
    }
    const QueueChain c = build_chain(pm, build);
    const StationaryResult r = solve_stationary(MarkovOperator(c), so);
    if (!r.converged() && !(r.residual <= 1e-6))
      throw SolverError(detail::cat("grid refinement: the pre-solve on the uniform grid 1/", o.presolve_k,
                                    " did not converge (", to_string(r.method), ", residual ", r.residual,
                                    "); set grid.refine = \"none\" or choose another solver method"));
    out.report.presolve_states += c.n;
    if (keep_presolve && models.size() == 1) {  // the refined grid's solve may start from it
      out.presolve.pi = r.pi;
      out.presolve.grid = c.grid;
      out.presolve.labels = c.labels;
      for (int i = 0; i < c.space.count(); ++i) out.presolve.names.push_back(c.space.component(i).name);
    }
    const auto& avg = c.grid_index();
    std::vector<double> mass(c.grid.size(), 0.0), count(c.grid.size(), 0.0);
    for (size_t s = 0; s < avg.size(); ++s) {
      mass[static_cast<size_t>(avg[s])] += r.pi[s];
      count[static_cast<size_t>(avg[s])] += 1.0;
    }
    if (!start_caps.empty() && start_caps.size() != count.size())
      throw std::logic_error(detail::cat("internal error: ", start_caps.size(), " start caps for ", count.size(),
                                         " pre-solve grid points"));
    // drop spacing: the stationary solve's caps are above the pre-solve's, by the start caps
    // over the pre-solve's, and by at least kSpacingGrowth (they grow where the count's tail
    // has mass; docs/stateful-aqm.md)
    for (size_t i = 0; i < count.size(); ++i) {
      const double grow =
          start_caps.empty() ? 1.0
                             : std::max(kSpacingGrowth, static_cast<double>(std::max<int64_t>(1, start_caps[i])) /
                                                            static_cast<double>(std::max<int64_t>(1, pm.aqm.count_trunc_at[i])));
      density.per_point[i] = std::max(density.per_point[i], grow * count[i]);
    }
    double cdf = 0.0, total = 0.0;
    for (double v : mass) total += v;
    size_t lo = 0, hi = mass.size() - 1;
    bool have_lo = false;
    for (size_t i = 0; i < mass.size(); ++i) {
      cdf += mass[i] / total;
      if (!have_lo && cdf >= o.mass_tol) lo = i, have_lo = true;
      if (cdf >= 1.0 - o.mass_tol) {
        hi = i;
        break;
      }
    }
    GridFocus f;
    f.mass_lo = std::max(0.0, c.grid[lo] - margin);
    f.mass_hi = std::min(static_cast<double>(N), c.grid[hi] + margin);
    f.drop = m.resolved_drop();
    out.report.mass_ranges.emplace_back(f.mass_lo, f.mass_hi);
    for (double b : focus_jumps(f, N, o.p_step)) out.report.jumps.push_back(b);
    // a stateful AQM moves the drop function: grade toward the raised max_th's jump
    // (dynamic max_th) and to the steepest slope adaptive RED's p_max can reach
    std::vector<GridFocus> moved;
    if (m.aqm.dynamic_max_th) {
      GridFocus g = f;
      g.drop.hi = f.drop.hi * (1.0 + m.aqm.max_th_growth);
      moved.push_back(g);
    }
    if (m.aqm.adaptive.enabled) {
      // the p_max grid only, of the count truncated (the exact cap on the model's grid may
      // exceed aqm.count_max, which only the untruncated layout refuses)
      const std::vector<double> pm = stateful_info(count_truncated(m)).pmax;
      GridFocus g = f;
      g.drop.p_max = *std::max_element(pm.begin(), pm.end());
      moved.push_back(g);
    }
    foci.push_back(std::move(f));
    for (GridFocus& g : moved) {
      for (double b : focus_jumps(g, N, o.p_step)) out.report.jumps.push_back(b);
      foci.push_back(std::move(g));
    }
  }
  std::sort(out.report.jumps.begin(), out.report.jumps.end());
  out.report.jumps.erase(std::unique(out.report.jumps.begin(), out.report.jumps.end()), out.report.jumps.end());
  const auto t1 = Clock::now();
  out.report.presolve_seconds = std::chrono::duration<double>(t1 - t0).count();

  // Coarsen the refinement (never the coarse step) until the estimate fits the budget.
  const double coarse = 1.0 / first.grid.k;
  RefineOptions ro = o;
  std::vector<double> pts = graded_points(N, coarse, foci, ro);
  double est = density.estimate(pts);
  while (est > o.state_budget && ro.step_min < coarse && ro.p_step < 1.0) {
    ro.step_min = std::min(2.0 * ro.step_min, 1.0);
    ro.p_step = std::min(2.0 * ro.p_step, 1.0);
    out.report.budget_factor *= 2.0;
    pts = graded_points(N, coarse, foci, ro);
    est = density.estimate(pts);
  }
  // drop spacing: the count's range multiplies every point's states, so the base step coarsens
  // too (x2 up to the pre-solve's step) while the estimate is above the budget
  double base = coarse;
  while (spaced && est > o.state_budget && base * 2.0 <= 1.0 / o.presolve_k + 1e-12) {
    base *= 2.0;
    out.report.budget_factor *= 2.0;
    pts = graded_points(N, base, foci, ro);
    est = density.estimate(pts);
  }
  out.report.budget_limited = out.report.budget_factor > 1.0;
  if (base > coarse)
    out.report.note = detail::cat("drop spacing: grid.state_budget = ", o.state_budget, " coarsened the base step from 1/",
                                  first.grid.k, " to ", base, " (and the refinement x", out.report.budget_factor, ")");
  else if (est > o.state_budget)
    out.report.note = detail::cat("the grid with step 1/", first.grid.k, " alone needs about ", std::llround(est),
                                  " states, above grid.state_budget = ", o.state_budget, "; refinement dropped");
  else if (out.report.budget_limited)
    out.report.note = detail::cat("grid.state_budget = ", o.state_budget, " bound the refinement: step_min and p_step x",
                                  out.report.budget_factor);
  out.report.estimated_states = est;
  out.report.refined = true;
  describe_grid(pts, std::max(1, static_cast<int>(std::lround(1.0 / base))), out.report);
  out.grid.points = std::move(pts);
  out.grid.refine = Refine::None;
  return out;
}

}  // namespace aqm
