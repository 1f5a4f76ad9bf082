// Forward Gauss-Seidel sweeps on pi (I - P) = 0 (method "gauss_seidel"); the sweep itself
// (shared with the multilevel smoother) is in multilevel.cpp.
#include "aqmchain/interrupt.hpp"
#include "solvers/multilevel.hpp"
#include "solvers/stationary_common.hpp"

namespace aqm::detail {

namespace {
void solve_gauss_seidel(const MarkovOperator& c, const StationaryOptions& o, StationaryResult& r, const Attempt&) {
  r.method = Method::GaussSeidel;
  const int32_t n = c.rows();
  const long maxit = o.max_iter > 0 ? o.max_iter : 100000;
  auto t0 = Clock::now();
  // Column access: transpose of P (rows of PT = columns of P).
  const TransposedCsr PT = c.transpose();
  const std::vector<double> exit = exit_probabilities(n, PT.rowptr.data(), PT.col.data(), PT.val.data());
  r.seconds.push_back({"setup", since(t0)});
  std::vector<double> x = o.x0.empty() ? std::vector<double>(n, 1.0 / n) : o.x0;
  t0 = Clock::now();
  long it = 0;
  double res = INFINITY;
  while (it < maxit) {
    check_interrupt();
    gauss_seidel_sweep(n, PT.rowptr.data(), PT.col.data(), PT.val.data(), exit.data(), x);
    ++it;
    if (it % o.check_every == 0 || it == maxit) {
      res = c.residual(x);
      ++r.operator_applications;
      if (res <= 0.5 * o.tol) break;
    }
  }
  r.iterations = it;
  r.operator_applications += it;
  r.seconds.push_back({"iterate", since(t0)});
  r.pi = std::move(x);
  finish(c, r, o.tol);
  if (!r.converged())
    r.note = detail::cat("Gauss-Seidel stopped after ", it, " of max_iter = ", maxit, " sweeps, residual ", r.residual);
}
}  // namespace

template <>
const MethodSolver& method_solver<Method::GaussSeidel>() {
  static const MethodSolver entry{solve_gauss_seidel};
  return entry;
}

}  // namespace aqm::detail
