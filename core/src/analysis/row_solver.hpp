// Internal to the analysis layer: linear solves with a chain's matrix restricted to a subset
// of its states, as row systems x (a I - b M) = rhs, by restarted GMRES with the block
// Gauss-Seidel preconditioner of the stationary solvers (first passage, Poisson's equation).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "aqmchain/errors.hpp"
#include "aqmchain/state/chain.hpp"
#include "solvers/block_system.hpp"

namespace aqm::analysis_detail {

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
constexpr double kEps = std::numeric_limits<double>::epsilon();

/// A CSR matrix over a subset of the states, renumbered (local index = position in `states`).
struct SubMatrix {
  int32_t n = 0;
  std::vector<int32_t> states;  // local -> global
  std::vector<int32_t> rowptr, col;
  std::vector<double> val;
};

/// The rows and columns of `keep` (global local[] >= 0) of the chain's matrix; continuous:
/// every row's diagonal set to minus the sum of the full row's off-diagonal entries.
SubMatrix restrict_matrix(const Chain& c, const std::vector<int32_t>& local, const std::vector<int32_t>& states,
                          bool continuous);

/// Labels of the states of a submatrix (for the preconditioner's blocks).
std::vector<int32_t> blocks_of(const Chain& c, const std::vector<int32_t>& states);

/// F's transpose without the row and column of state k (local index i - (i > k)); `states`
/// lists the remaining states of F (global numbering).
SubMatrix transposed_without(const SubMatrix& F, int32_t k);
/// The same for a CSR matrix of n rows given by its arrays (`states` empty: the rows' own
/// numbering), without a copy of it first.
SubMatrix transposed_without(int32_t n, const int32_t* rowptr, const int32_t* col, const double* val,
                             const std::vector<int32_t>& states, int32_t k);

/// Solves x (a I - b M / divisor) = rhs (row vectors) for the submatrix M.
struct RowSolver {
  std::unique_ptr<detail::BlockSystem> sys;
  std::unique_ptr<detail::Gmres> gmres;
  double scale = 1.0;  // x is returned times it (continuous: 1 / Lambda)
  double solve_tol = 1e-13;
  long max_iter = 1000;
  long solves = 0, iterations = 0;
  double setup_seconds = 0.0, solve_seconds = 0.0;

  RowSolver(const Chain& c, const SubMatrix& M, bool continuous, double rate, double tol, long max_iterations)
      : solve_tol(tol), max_iter(max_iterations) {
    const auto t0 = Clock::now();
    const std::vector<int32_t> block_of = blocks_of(c, M.states);
    if (continuous) {
      // x (-G / Lambda) = rhs: a = 0, b = 1, M read as G / Lambda (diagonal included)
      sys = std::make_unique<detail::BlockSystem>(detail::block_system(
          M.n, M.rowptr.data(), M.col.data(), M.val.data(), block_of, 0.0, 1.0, -1, 0, std::nan(""), rate));
      scale = 1.0 / rate;
    } else {
      sys = std::make_unique<detail::BlockSystem>(detail::block_system(M.n, M.rowptr.data(), M.col.data(),
                                                                       M.val.data(), block_of, 1.0, 1.0, -1));
    }
    gmres = std::make_unique<detail::Gmres>(M.n, 40);
    setup_seconds = since(t0);
  }

  /// x (global-free, local order) for rhs (local order); returns the L1 residual relative
  /// to ||rhs||_1, or -1 when GMRES did not reach solve_tol.
  double solve(const std::vector<double>& rhs, std::vector<double>& x, std::string& note) {
    const auto t0 = Clock::now();
    const int32_t n = sys->n;
    std::vector<double> r(static_cast<size_t>(n)), xb(static_cast<size_t>(n));
    double rhs_l1 = 0.0, rhs_max = 0.0, rhs_sq = 0.0;
    for (int32_t i = 0; i < n; ++i) {
      const double v = rhs[static_cast<size_t>(i)];
      r[sys->inv[i]] = v;
      rhs_l1 += std::abs(v), rhs_max = std::max(rhs_max, std::abs(v));
    }
    for (int32_t i = 0; rhs_max > 0.0 && i < n; ++i) {  // scaled: no underflow or overflow
      const double v = rhs[static_cast<size_t>(i)] / rhs_max;
      rhs_sq += v * v;
    }
    x.assign(static_cast<size_t>(n), 0.0);
    if (!(rhs_l1 > 0.0)) return 0.0;
    sys->precond(r.data(), xb.data());
    detail::Gmres::Test test;
    test.target = solve_tol * rhs_l1;
    // the estimate is a 2-norm, the target an L1 norm: their ratio on the right-hand side as a
    // first guess for the residual's (learn_ratio corrects it from the first candidate)
    test.fac0 = rhs_max * std::sqrt(rhs_sq) / rhs_l1;
    test.learn_ratio = true;
    // What double precision allows: the residual of a rounded solution is about
    // eps (||B||_1 ||x||_1 + ||rhs||_1) with ||B||_1 <= 2 here; the target is never below 4 eps ||B|| ||x||.
    double last_res = 0.0;
    const double want = solve_tol * rhs_l1;
    test.measure = [n, &last_res, want](const std::vector<double>& xv, const std::vector<double>& res) {
      long double s = 0.0L, sx = 0.0L;
      for (int32_t i = 0; i < n; ++i) {
        s += std::abs(res[static_cast<size_t>(i)]);
        sx += std::abs(xv[static_cast<size_t>(i)]);
      }
      last_res = static_cast<double>(s);
      const double floor = 4.0 * kEps * (2.0 * static_cast<double>(sx));
      return floor > want ? last_res * want / floor : last_res;
    };
    detail::Gmres::Limits limits;
    limits.max_iter = max_iter;
    const detail::Gmres::Outcome g = gmres->solve(*sys, r.data(), xb, test, limits);
    ++solves;
    iterations += g.iterations;
    for (int32_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = xb[sys->inv[i]] * scale;
    solve_seconds += since(t0);
    if (!g.converged) {
      note = detail::cat("a linear solve with the non-target block did not converge: relative L1 residual ",
                         last_res / rhs_l1, " > solve_tol = ", solve_tol, " after ", g.iterations,
                         " GMRES steps (solve_max_iter = ", max_iter, g.stalled ? ", stalled" : "", ")");
      return -1.0;
    }
    return last_res / rhs_l1;
  }
};

}  // namespace aqm::analysis_detail
