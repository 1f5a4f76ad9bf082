// Discretisation error estimate of a metric from its values on a sequence of grids
// (docs/fidelity.md): observed order and Richardson extrapolation in the grid step h,
// or a straight-line fit in h when the order is not clean.
#pragma once

#include <string>
#include <vector>

namespace aqm {

struct Extrapolation {
  double value = 0.0;         ///< on the finest grid
  double extrapolated = 0.0;  ///< the estimate of the h -> 0 limit
  double error = 0.0;         ///< half-width of the interval around `extrapolated` meant to hold the limit
  double order = 0.0;         ///< observed order p (0 when not determined)
  std::string method;         ///< "richardson", "fit" or "converged"
};

/// `h` strictly decreasing grid steps (relative sizes suffice), `v` the metric on each; at
/// least three.  The last three decide: with d1 = v[-3] - v[-2], d2 = v[-2] - v[-1] and
/// r = h[-2] / h[-1], a clean order p = log(d1 / d2) / log(r) in [0.5, 2] (the split
/// mapping's noise is first order in the step; a larger observed order is taken as
/// pre-asymptotic) gives
/// Richardson's v[-1] - d2 / (r^p - 1) with 1.25 times the correction as the error (the
/// safety factor of Roache's grid convergence index); no change above round-off is
/// "converged"; otherwise a least-squares line a + b h through all points gives a, with
/// error max(|a - v[-1]|, |d2|) + the largest residual.
Extrapolation extrapolate(const std::vector<double>& h, const std::vector<double>& v);

}  // namespace aqm
