// Shared test models.
#pragma once

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "aqmchain/aqmchain.hpp"

namespace aqm::test {

/// Geo/Geo/1/N with the AQM off (w and the grid only shape the state space).
inline Model geo_model(int N, double alpha, double mu) {
  Model m;
  m.buffer = N;
  m.source = Source::bernoulli(alpha);
  m.service = Service::geometric(mu);
  m.aqm.drop = DropFunction::none();
  m.aqm.w = 0.5;
  m.grid.k = 1;
  return m;
}

/// How far apart two probability vectors of a chain with one closed class may be, given their
/// residuals ||x P - x||_1: x - pi = r A# for r = x (I - P), and the group inverse A# is bounded
/// by 2 ||B^-1||_inf with B = I - P without the row and column of a state of the closed class
/// (the state with the largest pi).  Each residual is also only known to within the error of
/// evaluating it, 2 (c + 1) eps with c the most entries in a column.  Dense: small chains only.
/// The bound is what the arithmetic guarantees, so it holds on any machine and BLAS.
inline double solution_distance_bound(const Chain& c, const std::vector<double>& pi, double residual_x,
                                      double residual_y) {
  const int32_t n = c.n;
  const int32_t k = static_cast<int32_t>(std::max_element(pi.begin(), pi.end()) - pi.begin());
  Eigen::MatrixXd B = Eigen::MatrixXd::Identity(n - 1, n - 1);
  std::vector<int32_t> per_column(static_cast<size_t>(n), 0);
  auto at = [k](int32_t i) { return i < k ? i : i - 1; };
  for (int32_t i = 0; i < n; ++i)
    for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e) {
      ++per_column[static_cast<size_t>(c.col[e])];
      if (i != k && c.col[e] != k) B(at(i), at(c.col[e])) -= c.val[e];
    }
  // B is a nonsingular M-matrix (B^-1 = sum of powers of P without state k, entrywise >= 0), so
  // ||B^-1||_inf = max(B^-1 1): the longest expected time to reach state k
  const Eigen::VectorXd hit = B.partialPivLu().solve(Eigen::VectorXd::Ones(n - 1));
  const double kappa = 2.0 * hit.maxCoeff();
  const double eval = 2.0 * (*std::max_element(per_column.begin(), per_column.end()) + 1) *
                      std::numeric_limits<double>::epsilon();
  return kappa * (residual_x + residual_y + 2.0 * eval);
}

}  // namespace aqm::test
