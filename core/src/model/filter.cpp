// REDwM's chain form and the grid of its second variable s (SPEC 2.3, 4).
#include "aqmchain/model/filter.hpp"

#include <cmath>
#include <limits>

#include "model/validate.hpp"

namespace aqm {

using namespace detail;

RedwmFilter::RedwmFilter(const Aqm& aqm) : per_slot_(aqm.update == UpdateRule::PerSlot) {
  if (aqm.order_k() > 2)
    fail_param(cat("aqm.a[", aqm.order_k() - 1, "]"),
               "0 for the chain and the discretised simulation, which carry REDwM with k <= 2 (a_1, a_2; the simulation with continuous A takes any order)",
               shortest(aqm.a[static_cast<size_t>(aqm.order_k() - 1)]));
  if (aqm.order_m() > 1)
    fail_param(cat("aqm.b[", aqm.order_m(), "]"),
               "0 for the chain and the discretised simulation, which carry REDwM with m <= 1 (b_0, b_1; the simulation with continuous A takes any order)",
               shortest(aqm.b[static_cast<size_t>(aqm.order_m())]));
  auto at = [](const std::vector<double>& v, size_t i) { return i < v.size() ? v[i] : 0.0; };
  a1_ = at(aqm.a, 0), a2_ = at(aqm.a, 1), b0_ = at(aqm.b, 0), b1_ = at(aqm.b, 1);
}

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
/// (a_2 + b_1) N: s's largest value (a_2, b_1 are 0 when the lists are shorter).
double s_top(const Model& m) {
  const auto& a = m.aqm.a;
  const auto& b = m.aqm.b;
  return ((a.size() > 1 ? a[1] : 0.0) + (b.size() > 1 ? b[1] : 0.0)) * m.buffer;
}
}  // namespace

int64_t redwm_s_grid_size(const Model& m) {
  // A filter beyond the chain's order (k > 2 or m > 1) has no s: the chain and the
  // discretised simulation refuse it by name (RedwmFilter), the simulation with
  // continuous A takes it.
  if (m.aqm.filter != FilterKind::Redwm || m.aqm.order_k() > 2 || m.aqm.order_m() > 1) return 1;
  const double S = s_top(m);
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
                 cat(">= (a_2 + b_1) N = ", shortest(S), " (the largest value of s = a_2 A + b_1 q)"), shortest(p.back()));
    return static_cast<int64_t>(p.size());
  }
  double h;
  int k;
  int64_t L;
  uniform_s(m, S, h, k, L);
  return L + 1;
}

std::vector<double> redwm_s_grid(const Model& m) {
  const int64_t size = redwm_s_grid_size(m);  // validates
  if (!m.grid.s_points.empty()) return m.grid.s_points;
  if (size == 1) return {0.0};
  double h;
  int k;
  int64_t L;
  uniform_s(m, s_top(m), h, k, L);
  std::vector<double> g(static_cast<size_t>(L + 1));
  // i / k exactly as the avg grid forms its points
  for (int64_t i = 0; i <= L; ++i) g[static_cast<size_t>(i)] = k > 0 ? static_cast<double>(i) / k : static_cast<double>(i) * h;
  return g;
}

}  // namespace aqm
