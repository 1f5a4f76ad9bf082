// Internal: functionals of w M^s for a substochastic (or stochastic) matrix M of a
// slotted chain and many integer s at once, by a shift-and-invert Krylov space, after
// van den Eshof and Hochbruck, "Preconditioning Lanczos approximations to the matrix
// exponential" (SIAM J. Sci. Comput. 2006), with z^s in place of exp(tz).
//
// Column form: A = M^T, the basis V_m of the Krylov space of (I - gamma (A - I))^{-1}
// from w by Arnoldi (the solves by GMRES with the block Gauss-Seidel preconditioner of
// block_system.hpp), H_m its projection, and
//     A ~ M_m = I + (I - H_m^{-1}) / gamma   on the space,
//     f^T A^s w ~ beta (V_m^T f)^T M_m^s e_1,   sum_{i<s} f^T A^i w ~ beta (V_m^T f)^T (sum_{i<s} M_m^i) e_1,
// M_m^s by binary powering (integer s; the sums by the doubling (A^2s, S_2s) =
// (A^s A^s, S_s + A^s S_s)).  One basis serves every s.  Error estimate (a posteriori,
// not a bound): the change from the (m-1)- to the m-vector approximation plus the
// effect of the inexact solves beta sum_j ||s_j||_1 |(H_m^{-1} c)_j| (as in
// rational_krylov.cpp).  The start vector should already be smooth (a few thousand
// exact steps damp the modes with 1 - |lambda| >> 1 / t0, which a shift at 1 cannot see).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aqm::detail {

struct PowerKrylovResult {
  /// values[q][k] = f_q^T A^{s_k} w, sums[q][k] = sum_{i < s_k} f_q^T A^i w (when asked)
  std::vector<std::vector<double>> values, sums;
  std::vector<double> estimate;  ///< per s_k: largest estimated error over the functionals (scaled)
  int basis = 0;
  long solves = 0, gmres_iterations = 0;
  bool converged = false, breakdown = false;
  std::string note;
  double seconds_setup = 0, seconds_solves = 0;
  double ritz_max = 0.0;  ///< largest |eigenvalue| of the last projected matrix (before pulling back)
  long clamped = 0;       ///< evaluations whose projected matrix had eigenvalues outside the unit disk
};

/// w (n entries), M in CSR (rows = from-state, n x n), blocks for the preconditioner,
/// functionals f_q (n entries each), for each whether its sums (sum_of[q]) or its values
/// are wanted (and estimated), with the error scales scale_q (the estimate is the error
/// divided by scale_q), sorted steps s_k >= 0.  sum_cap[q] bounds sum_{i<s} |f_q^T A^i x| over
/// ||x||_1 <= 1 and every s (e.g. 1 for the flow into an absorbing set: absorption
/// probabilities); infinity when only s ||f_q||_inf is known.  Stops when the scaled estimate is <= tol
/// at every s_k, or at mmax vectors.
PowerKrylovResult power_krylov(int32_t n, const int32_t* rowptr, const int32_t* col, const double* val,
                               const std::vector<int32_t>& block_of, const std::vector<double>& w,
                               const std::vector<const std::vector<double>*>& f, const std::vector<double>& scale,
                               const std::vector<char>& sum_of, const std::vector<double>& sum_cap,
                               const std::vector<int64_t>& steps, double gamma,
                               double tol, int mmax,
                               double solve_tol, long solve_max_iter);

}  // namespace aqm::detail
