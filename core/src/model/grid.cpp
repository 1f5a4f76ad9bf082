// Grid resolution and the mappings of SPEC 4.
#include "aqmchain/model/grid.hpp"
#include "aqmchain/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "aqmchain/interrupt.hpp"
#include "model/validate.hpp"

namespace aqm {

using namespace detail;

// ---------------------------------------------------------------- grid

int64_t GridSpec::size(int buffer) const {
  if (mapping == Mapping::Flags) return 5 * static_cast<int64_t>(buffer) + 1;
  if (!points.empty()) return static_cast<int64_t>(points.size());
  return static_cast<int64_t>(k) * buffer + 1;
}

namespace {
/// The grid-size bound, checked before any grid vector is allocated.
void check_grid_size(const GridSpec& g, int buffer, const std::string& p) {
  if (buffer < 1) fail_param("model.buffer", ">= 1", buffer);
  if (g.mapping == Mapping::Flags) {
    if (5 * static_cast<int64_t>(buffer) > kMaxGridIntervals)
      fail_param("model.buffer",
                 detail::cat("<= ", kMaxGridIntervals / 5, " with grid.mapping = \"flags\" (5 grid points per packet, at most ",
                             kMaxGridIntervals + 1, " grid points)"),
                 buffer);
    return;
  }
  if (!g.points.empty()) {
    if (static_cast<int64_t>(g.points.size()) > kMaxGridIntervals + 1)
      fail_param(p + ".points", detail::cat("at most ", kMaxGridIntervals + 1, " points"), g.points.size());
    return;
  }
  if (g.k < 1) fail_param(p + ".k", ">= 1", g.k);
  if (static_cast<int64_t>(g.k) * buffer > kMaxGridIntervals)
    fail_param(p + ".k",
               detail::cat("<= 1e7 / buffer = ", kMaxGridIntervals / buffer, " (k x buffer <= 1e7 grid intervals, buffer ",
                           buffer, ")"),
               g.k);
}
}  // namespace

std::vector<double> GridSpec::resolve(int buffer) const {
  check_grid_size(*this, buffer, "grid");
  if (refine == Refine::Auto && points.empty())
    fail_param("grid.refine", "resolved by a pre-solve first (refine_grid) before the chain is built", "'auto'");
  std::vector<double> g;
  if (mapping == Mapping::Flags) {
    // Seed 001: integer part plus four flags at (2i - 1)/8, i = 1..4; no flag = the integer.
    g.reserve(5 * static_cast<size_t>(buffer) + 1);
    for (int i = 0; i < buffer; ++i)
      for (double f : {0.0, 0.125, 0.375, 0.625, 0.875}) g.push_back(i + f);
    g.push_back(buffer);
  } else if (!points.empty()) {
    g = points;
  } else {
    const long long L = static_cast<long long>(k) * buffer;
    g.resize(static_cast<size_t>(L + 1));
    for (long long i = 0; i <= L; ++i) g[i] = static_cast<double>(i) / k;
  }
  return g;
}

void RefineOptions::validate(const std::string& p) const {
  auto in = [&](const char* name, double v, double lo, double hi, bool open_lo) {
    require_finite(p + "." + name, v);
    if ((open_lo ? v <= lo : v < lo) || v > hi)
      fail_param(p + "." + name, detail::cat("in ", open_lo ? "(" : "[", lo, ", ", hi, "]"), v);
  };
  in("step_min", step_min, 0.0, 1.0, true);
  if (step_min < 1e-6) fail_param(p + ".step_min", ">= 1e-6", step_min);
  in("p_step", p_step, 0.0, 1.0, true);
  in("growth", growth, 1.01, 2.0, false);
  in("mass_tol", mass_tol, 0.0, 0.01, true);
  in("state_budget", state_budget, 1e3, 1e9, false);
  if (presolve_k < 1 || presolve_k > 64) fail_param(p + ".presolve_k", "in [1, 64]", presolve_k);
}

void GridSpec::validate(int buffer, const std::string& p) const {
  if (refine == Refine::Auto) {
    if (mapping != Mapping::Split)
      fail_param(p + ".refine", detail::cat("'none' with mapping = \"", to_string(mapping), "\" (refinement needs split)"), "'auto'");
    if (!points.empty()) fail_param(p + ".points", "absent with refine = \"auto\" (the refinement chooses them)", "a list");
    refine_options.validate(p);
  }
  if (mapping == Mapping::Flags) {
    if (!points.empty()) fail_param(p + ".points", "absent with mapping = \"flags\" (flags fix the grid)", "a list");
    check_grid_size(*this, buffer, p);
    return;
  }
  check_grid_size(*this, buffer, p);
  if (points.empty()) return;
  if (points.size() < 2) fail_param(p + ".points", "at least 2 points (0 and the buffer)", points.size());
  if (points.front() != 0.0) fail_param(p + ".points[0]", "0", points.front());
  if (points.back() != buffer) fail_param(detail::cat(p, ".points[-1]"), detail::cat("the buffer size ", buffer), points.back());
  for (size_t i = 1; i < points.size(); ++i) {
    require_finite(detail::cat(p, ".points[", i, "]"), points[i]);
    if (!(points[i] > points[i - 1]))
      fail_param(detail::cat(p, ".points[", i, "]"), detail::cat("> ", points[i - 1], " (strictly increasing)"), points[i]);
  }
}

Grid::Grid(std::vector<double> points, Mapping mapping) : pts_(std::move(points)), mapping_(mapping) {
  // One point is a grid too (REDwM's s when a_2 = b_1 = 0: every value maps to it).
  if (pts_.empty()) fail_param("grid.points", "at least 1 point", pts_.size());
  if (mapping_ != Mapping::Flags && pts_.size() >= 2) {
    const double h = pts_[1] - pts_[0];
    bool uniform = pts_[0] == 0.0;
    for (size_t i = 1; uniform && i < pts_.size(); ++i)
      uniform = std::abs(pts_[i] - static_cast<double>(i) * h) <= 1e-12 * std::max(1.0, pts_[i]);
    if (uniform) uniform_step_ = h;
  }
}

GridTarget Grid::map(double y) const {
  const int last = size() - 1;
  if (y <= pts_.front()) return {0, 1.0};
  if (y >= pts_.back()) return {last, 1.0};
  if (mapping_ == Mapping::Flags) {
    // integer part i, fractional part f: f == 0 -> i; f in [(j-1)/4, j/4) -> flag j (value i + (2j-1)/8).
    const double fl = std::floor(y);
    const double f = y - fl;
    const int i = static_cast<int>(fl);
    if (f <= 1e-12 * std::max(1.0, y)) return {5 * i, 1.0};
    const int j = std::min(3, static_cast<int>(f * 4.0));
    return {std::min(last, 5 * i + 1 + j), 1.0};
  }
  int i;
  if (uniform_step_ > 0.0) {
    i = std::min(last - 1, static_cast<int>(y / uniform_step_));
    while (i > 0 && pts_[i] > y) --i;
    while (i < last - 1 && pts_[i + 1] <= y) ++i;
  } else {
    i = static_cast<int>(std::upper_bound(pts_.begin(), pts_.end(), y) - pts_.begin()) - 1;
    i = std::clamp(i, 0, last - 1);
  }
  const double a = pts_[i], b = pts_[i + 1];
  double p_lo = (b - y) / (b - a);
  // Values within 1e-12 of a cell width from a grid point are taken as on it
  // (floating-point noise of (1 - w) g + w q must not create transitions of 1e-17).
  if (p_lo >= 1.0 - 1e-12) return {i, 1.0};
  if (p_lo <= 1e-12) return {i + 1, 1.0};
  if (mapping_ == Mapping::Nearest) return {p_lo >= 0.5 ? i : i + 1, 1.0};  // ties go to the lower point
  return {i, p_lo};
}

}  // namespace aqm

// ---------------------------------------------------------------- automatic grids

namespace aqm {

std::vector<double> focus_jumps(const GridFocus& f, int buffer, double p_step) {
  std::vector<double> j;
  for (double b : f.drop.breakpoints(buffer)) {
    if (b < f.mass_lo || b > f.mass_hi) continue;
    const double e = 1e-9 * std::max(1.0, b);
    if (std::abs(f.drop(b + e) - f.drop(b - e)) > p_step) j.push_back(b);
  }
  return j;
}

std::vector<double> graded_points(int buffer, double coarse_step, const std::vector<GridFocus>& foci,
                                  const RefineOptions& o, double scale) {
  if (buffer < 1) fail_param("model.buffer", ">= 1", buffer);
  require_finite("grid.coarse_step", coarse_step);
  if (!(coarse_step > 0.0)) fail_param("grid.coarse_step", "> 0", coarse_step);
  require_finite("grid.scale", scale);
  if (!(scale > 0.0)) fail_param("grid.scale", "> 0", scale);
  o.validate("grid");
  const double N = buffer;
  std::vector<std::vector<double>> jumps;
  std::vector<double> forced = {0.0, N};
  for (const GridFocus& f : foci) {
    jumps.push_back(focus_jumps(f, buffer, o.p_step));
    for (double b : f.drop.breakpoints(buffer)) forced.push_back(b);
  }
  std::sort(forced.begin(), forced.end());
  forced.erase(std::unique(forced.begin(), forced.end()), forced.end());
  const double h_min = o.step_min * scale, h_max = std::max(coarse_step * scale, h_min);
  auto step = [&](double x) {
    double s = coarse_step;
    for (size_t k = 0; k < foci.size(); ++k) {
      const GridFocus& f = foci[k];
      if (x < f.mass_lo || x > f.mass_hi) continue;
      // central slope over a small interval (inside a jump it is huge: the grading below rules there)
      const double e = 1e-6 * std::max(1.0, x);
      const double slope = std::abs(f.drop(std::min(x + e, N)) - f.drop(std::max(x - e, 0.0))) / (2.0 * e);
      if (slope > 0.0) s = std::min(s, o.p_step / slope);
      for (double b : jumps[k]) s = std::min(s, o.step_min + (o.growth - 1.0) * std::abs(x - b));
    }
    return std::clamp(s * scale, h_min, h_max);
  };
  std::vector<double> pts = {0.0};
  for (size_t seg = 1; seg < forced.size(); ++seg) {
    const double b = forced[seg];
    double x = pts.back();
    for (;;) {
      check_interrupt();
      const double s = step(x), r = b - x;
      if (r <= s * (1.0 + 1e-9)) break;
      if (s >= h_max * (1.0 - 1e-12)) {
        // unrefined: the next point of the lattice of multiples of h_max (the uniform grid 1/k
        // where nothing is refined), so that a grid family shares its coarse points
        double y = (std::floor(x / h_max + 1e-9) + 1.0) * h_max;
        if (y - x < 0.5 * h_max) y += h_max;
        if (b - y < 0.25 * h_max) break;
        x = y;
      } else {
        x = r < 1.5 * s ? x + 0.5 * r : x + s;
      }
      pts.push_back(x);
      if (static_cast<int64_t>(pts.size()) > kMaxGridIntervals)
        fail_param("grid.step_min", detail::cat("large enough for at most ", kMaxGridIntervals, " grid intervals"), o.step_min);
    }
    pts.push_back(b);
  }
  return pts;
}

std::vector<double> coarsen_points(const std::vector<double>& points, int factor, const std::vector<double>& keep) {
  if (factor < 1) fail_param("factor", ">= 1", factor);
  if (points.size() < 2) fail_param("grid.points", "at least 2 points", points.size());
  std::vector<double> kept(keep);
  std::sort(kept.begin(), kept.end());
  std::vector<double> out = {points.front()};
  size_t since = 0;  // points skipped since the last kept one
  for (size_t i = 1; i + 1 < points.size(); ++i) {
    ++since;
    const bool forced = std::binary_search(kept.begin(), kept.end(), points[i]);
    if (forced || since == static_cast<size_t>(factor)) {
      out.push_back(points[i]);
      since = 0;
    }
  }
  out.push_back(points.back());
  return out;
}

}  // namespace aqm
