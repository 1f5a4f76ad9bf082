// The power iteration pi <- pi P (method "power").
#include "aqmchain/interrupt.hpp"
#include "solvers/stationary_common.hpp"

namespace aqm::detail {

namespace {
void solve_power(const MarkovOperator& c, const StationaryOptions& o, StationaryResult& r, const Attempt&) {
  r.method = Method::Power;
  const int32_t n = c.rows();
  const long maxit = o.max_iter > 0 ? o.max_iter : 100000;
  std::vector<double> x = o.x0.empty() ? std::vector<double>(n, 1.0 / n) : o.x0, y(n);
  const auto t0 = Clock::now();
  double res = INFINITY;
  long it = 0;
  while (it < maxit) {
    check_interrupt();
    c.apply(x.data(), y.data());
    ++it;
    long double s = 0.0L, d = 0.0L;
    for (int32_t i = 0; i < n; ++i) s += y[i];
    for (int32_t i = 0; i < n; ++i) {
      y[i] = static_cast<double>(y[i] / s);
      d += std::abs(y[i] - x[i]);
    }
    x.swap(y);
    res = static_cast<double>(d);
    if (res <= 0.5 * o.tol) break;
  }
  r.iterations = it;
  r.operator_applications = it;
  r.seconds.push_back({"iterate", since(t0)});
  r.pi = std::move(x);
  finish(c, r, o.tol);
  if (!r.converged()) r.note = detail::cat("power iteration stopped after ", it, " of max_iter = ", maxit, " products");
}
}  // namespace

template <>
const MethodSolver& method_solver<Method::Power>() {
  static const MethodSolver entry{solve_power};
  return entry;
}

}  // namespace aqm::detail
