// Richardson extrapolation in the grid step, with a fallback fit.
#include "aqmchain/analysis/extrapolation.hpp"

#include <algorithm>
#include <cmath>

#include "aqmchain/errors.hpp"

namespace aqm {

namespace {
/// Roache's safety factor for a three-grid study with an observed order ("Grid Convergence Index").
constexpr double kSafety = 1.25;
}  // namespace

Extrapolation extrapolate(const std::vector<double>& h, const std::vector<double>& v) {
  if (h.size() != v.size()) fail_param("values", detail::cat("one per grid step (", h.size(), ")"), v.size());
  if (h.size() < 3) fail_param("h", "at least 3 grid steps", h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    if (!std::isfinite(h[i]) || !(h[i] > 0.0)) fail_param(detail::cat("h[", i, "]"), "a finite number > 0", h[i]);
    if (!std::isfinite(v[i])) fail_param(detail::cat("values[", i, "]"), "a finite number", "not finite");
    if (i > 0 && !(h[i] < h[i - 1])) fail_param(detail::cat("h[", i, "]"), detail::cat("< ", h[i - 1], " (decreasing)"), h[i]);
  }
  const size_t n = v.size();
  Extrapolation e;
  e.value = v[n - 1];
  const double d1 = v[n - 3] - v[n - 2], d2 = v[n - 2] - v[n - 1];
  const double r = h[n - 2] / h[n - 1];
  const double noise = 1e-10 * std::max({std::abs(v[n - 1]), std::abs(v[n - 2]), std::abs(v[n - 3])}) + 1e-300;
  if (std::abs(d1) <= noise && std::abs(d2) <= noise) {
    e.extrapolated = e.value;
    e.error = std::max({std::abs(d1), std::abs(d2), noise});
    e.method = "converged";
    return e;
  }
  if (d1 * d2 > 0.0) {
    const double q = d1 / d2, p = std::log(q) / std::log(r);
    if (p >= 0.5 && p <= 2.0) {
      e.order = p;
      e.extrapolated = e.value - d2 / (q - 1.0);
      e.error = std::max(kSafety * std::abs(e.extrapolated - e.value), noise);
      e.method = "richardson";
      return e;
    }
  }
  // least-squares line a + b h through all points
  double sh = 0.0, sv = 0.0, shh = 0.0, shv = 0.0;
  for (size_t i = 0; i < n; ++i) sh += h[i], sv += v[i], shh += h[i] * h[i], shv += h[i] * v[i];
  const double den = n * shh - sh * sh;
  const double b = (n * shv - sh * sv) / den, a = (sv - b * sh) / n;
  double resid = 0.0;
  for (size_t i = 0; i < n; ++i) resid = std::max(resid, std::abs(v[i] - a - b * h[i]));
  e.extrapolated = a;
  e.error = std::max(std::abs(a - e.value), std::abs(d2)) + resid;
  e.method = "fit";
  return e;
}

}  // namespace aqm
