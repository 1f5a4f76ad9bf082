#include "aqmchain/analysis/poisson.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "analysis/row_solver.hpp"
#include "aqmchain/errors.hpp"

namespace aqm {

PoissonSolution solve_poisson(const Chain& c, const std::vector<std::vector<double>>& rhs, int32_t k, double tol,
                              long max_iter) {
  using namespace analysis_detail;
  const int32_t n = c.n;
  if (n < 2) throw ModelError("chain", detail::cat("Poisson's equation needs a chain of at least 2 states, got ", n));
  if (k < 0) k = c.recurrent_state;
  if (k < 0 || k >= n)
    throw ModelError("k", detail::cat("parameter 'k' must be a state of the chain's only closed class (0 <= k < ", n,
                                      "), got ", k, c.recurrent_state < 0 ? " (the chain has no unique closed class)" : ""));
  if (!(tol > 0.0 && tol < 1.0)) throw OptionError(detail::cat("option 'tol' must be in (0, 1), got ", tol), "tol");
  if (max_iter < 1) throw OptionError(detail::cat("option 'max_iter' must be >= 1, got ", max_iter), "max_iter");
  for (size_t q = 0; q < rhs.size(); ++q) {
    if (rhs[q].size() != static_cast<size_t>(n))
      throw ModelError("rhs", detail::cat("parameter 'rhs' must hold vectors of ", n, " values, got ", rhs[q].size(),
                                          " in vector ", q));
    for (double v : rhs[q])
      if (!std::isfinite(v)) throw ModelError("rhs", detail::cat("parameter 'rhs' must be finite, got ", v));
  }
  const bool continuous = c.time == TimeKind::Continuous;
  PoissonSolution s;
  s.fixed_state = k;
  auto t0 = Clock::now();
  // the transposed matrix without row and column k, read as a row system:
  // slotted x (I - P'^T) = b'^T, continuous x (-G'^T) = b'^T (slotted: transposed from the
  // chain's own arrays; continuous: from the generator's rows, the diagonal minus the out-rate)
  const SubMatrix T = [&] {
    if (!continuous) return transposed_without(n, c.rowptr.data(), c.col.data(), c.val.data(), {}, k);
    std::vector<int32_t> id(static_cast<size_t>(n)), all(static_cast<size_t>(n));
    std::iota(id.begin(), id.end(), 0);
    std::iota(all.begin(), all.end(), 0);
    return transposed_without(restrict_matrix(c, id, all, continuous), k);
  }();
  RowSolver solver(c, T, continuous, continuous ? exit_rate(c) : 1.0, tol, max_iter);
  s.seconds.push_back({"setup", since(t0)});
  t0 = Clock::now();
  s.status = Status::Converged;
  for (const auto& b : rhs) {
    std::vector<double> rb(static_cast<size_t>(T.n)), x;
    for (int32_t li = 0; li < T.n; ++li) rb[static_cast<size_t>(li)] = b[static_cast<size_t>(T.states[static_cast<size_t>(li)])];
    std::string note;
    const long before = solver.iterations;
    const double res = solver.solve(rb, x, note);
    s.iterations_each.push_back(solver.iterations - before);
    std::vector<double> h(static_cast<size_t>(n), 0.0);
    if (!x.empty())
      for (int32_t li = 0; li < T.n; ++li) h[static_cast<size_t>(T.states[static_cast<size_t>(li)])] = x[static_cast<size_t>(li)];
    s.h.push_back(std::move(h));
    s.residuals.push_back(res);
    if (res < 0.0) {
      s.status = Status::NotConverged;
      s.note = (s.note.empty() ? "" : s.note + "; ") + note;
    }
  }
  s.iterations = solver.iterations;
  s.seconds.push_back({"solves", since(t0)});
  return s;
}

}  // namespace aqm
