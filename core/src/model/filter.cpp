// REDwM's chain form (the transposed direct form) and the grids of its auxiliary sums s^(i).
#include "aqmchain/model/filter.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "model/validate.hpp"

namespace aqm {

using namespace detail;

RedwmFilter::RedwmFilter(const Aqm& aqm) : per_slot_(aqm.update == UpdateRule::PerSlot) {
  const int k = aqm.order_k(), m = aqm.order_m();
  const int r = std::max(k, m + 1) - 1;
  if (r > kMaxRedwmSums) {
    // name the coefficient that sets the order
    const bool by_a = k - 1 >= m;
    const std::string why = cat("0 for the chain and the discretised simulation, which carry REDwM with r = max(k, m + 1) - 1 <= ",
                                kMaxRedwmSums, " auxiliary sums (each a grid of its own and 2^(r + 1) targets per slot; "
                                "here k = ", k, ", m = ", m, ", r = ", r, "; the simulation with continuous A takes any order)");
    if (by_a) fail_param(cat("aqm.a[", k - 1, "]"), why, shortest(aqm.a[static_cast<size_t>(k - 1)]));
    fail_param(cat("aqm.b[", m, "]"), why, shortest(aqm.b[static_cast<size_t>(m)]));
  }
  R_ = std::max(r, 1);
  auto at = [](const std::vector<double>& v, size_t i) { return i < v.size() ? v[i] : 0.0; };
  a_.resize(static_cast<size_t>(R_) + 1), b_.resize(static_cast<size_t>(R_) + 1);
  for (size_t i = 0; i <= static_cast<size_t>(R_); ++i) a_[i] = at(aqm.a, i), b_[i] = at(aqm.b, i);
}

std::string redwm_s_component(int i) { return i == 1 ? std::string("s_index") : cat("s", i, "_index"); }

namespace {

/// Step, points per unit (0 when the step is not 1/integer) and number of intervals
/// of the uniform s grid (validated).
void uniform_s(const Model& m, double S, double& h, int& k, int64_t& L) {
  const bool automatic = m.grid.s_k == 0;
  if (m.grid.s_k < 0)
    fail_param("grid.s_k", ">= 1 (or 0: automatic, a quarter of the avg step 1/k)", m.grid.s_k);
  // automatic: a quarter of 1/k, the avg grid's step away from refined ranges (the same for
  // a uniform grid, an automatic one and custom points, so refinement leaves s alone)
  k = automatic ? (m.grid.k <= std::numeric_limits<int>::max() / kAutoSRefinement ? kAutoSRefinement * m.grid.k : 0)
                : m.grid.s_k;
  h = k > 0 ? 1.0 / k : 1.0 / (static_cast<double>(kAutoSRefinement) * m.grid.k);
  const double intervals = S > 0.0 ? std::ceil(S / h - 1e-9) : 0.0;
  if (!(intervals <= static_cast<double>(kMaxGridIntervals)))
    fail_param("grid.s_k",
               cat("such that (a_2 + b_1) N x s_k <= 1e7 s-grid intervals (here (a_2 + b_1) N = ", S,
                   automatic ? "; automatic s_k takes a quarter of the avg step 1/k, " : "; step ", h,
                   "): set grid.s_k or grid.s_points"),
               automatic ? cat("0 (automatic, step ", h, ")") : cat(m.grid.s_k));
  L = static_cast<int64_t>(intervals);
}

}  // namespace

namespace {
/// The tops of s^(1..R) (RedwmFilter::s_max) of a filter the chain carries; {} when it is
/// beyond the chain's order (refused by RedwmFilter where the chain is built).
std::vector<double> s_tops(const Model& m) {
  const int k = m.aqm.order_k(), o = m.aqm.order_m();
  if (std::max(k, o + 1) - 1 > kMaxRedwmSums) return {};
  const RedwmFilter f(m.aqm);
  std::vector<double> t;
  for (int i = 1; i <= f.sums(); ++i) t.push_back(f.s_max(i, m.buffer));
  return t;
}

/// The size of the grid of a sum whose top is S, from the points p of s^(1)'s grid
/// (custom) or the uniform step.
int64_t size_below(const Model& m, const std::vector<double>& p, double S) {
  if (!p.empty()) {
    // the first point >= S (s^(1)'s last point is >= its top, the largest)
    const auto it = std::lower_bound(p.begin(), p.end(), S * (1.0 - 1e-12));
    return std::min<int64_t>(static_cast<int64_t>(p.size()), (it - p.begin()) + 1);
  }
  double h;
  int k;
  int64_t L;
  uniform_s(m, S, h, k, L);
  return L + 1;
}
}  // namespace

std::vector<int64_t> redwm_s_grid_sizes(const Model& m) {
  // A filter beyond the chain's order has no s grids: the chain and the discretised
  // simulation refuse it by name (RedwmFilter), the simulation with continuous A takes it.
  if (m.aqm.filter != FilterKind::Redwm) return {1};
  const std::vector<double> tops = s_tops(m);
  if (tops.empty()) return {1};
  const double S = tops[0];
  const auto& p = m.grid.s_points;
  if (!p.empty()) {
    if (static_cast<int64_t>(p.size()) > kMaxGridIntervals + 1)
      fail_param("grid.s_points", cat("at most ", kMaxGridIntervals + 1, " points"), p.size());
    if (p.front() != 0.0) fail_param("grid.s_points[0]", "0", p.front());
    for (size_t i = 1; i < p.size(); ++i) {
      require_finite(cat("grid.s_points[", i, "]"), p[i]);
      if (!(p[i] > p[i - 1]))
        fail_param(cat("grid.s_points[", i, "]"), cat("> ", p[i - 1], " (strictly increasing)"), p[i]);
    }
    if (p.back() < S * (1.0 - 1e-12))
      fail_param(cat("grid.s_points[", p.size() - 1, "]"),
                 cat(">= ", tops.size() > 1 ? "the top of s^(1), (sum_{j >= 1} a_{j+1} + b_j) N = " : "(a_2 + b_1) N = ",
                     shortest(S), tops.size() > 1 ? "" : " (the largest value of s = a_2 A + b_1 q)"),
                 shortest(p.back()));
  }
  std::vector<int64_t> sizes;
  for (double t : tops) sizes.push_back(size_below(m, p, t));
  return sizes;
}

int64_t redwm_s_grid_size(const Model& m) { return redwm_s_grid_sizes(m)[0]; }

std::vector<std::vector<double>> redwm_s_grids(const Model& m) {
  const std::vector<int64_t> sizes = redwm_s_grid_sizes(m);  // validates
  std::vector<std::vector<double>> out;
  const auto& p = m.grid.s_points;
  double h = 1.0;
  int k = 0;
  if (p.empty()) {
    int64_t L;
    uniform_s(m, 0.0, h, k, L);  // the step (the same for every sum)
  }
  for (int64_t size : sizes) {
    if (!p.empty()) {
      out.emplace_back(p.begin(), p.begin() + size);
      continue;
    }
    std::vector<double> g(static_cast<size_t>(size));
    // i / k exactly as the avg grid forms its points
    for (int64_t i = 0; i < size; ++i) g[static_cast<size_t>(i)] = k > 0 ? static_cast<double>(i) / k : static_cast<double>(i) * h;
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<double> redwm_s_grid(const Model& m) { return redwm_s_grids(m)[0]; }

}  // namespace aqm
