// Grid resolution and the mappings of SPEC 4.
#include "aqmchain/model/grid.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

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

void GridSpec::validate(int buffer, const std::string& p) const {
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
