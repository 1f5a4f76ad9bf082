// Multilevel aggregation for pi P = pi (Horton & Leutenegger 1994; the
// aggregation-disaggregation of Koury, McAllister & Stewart applied recursively).
//
// The chain lives on the lattice of its state descriptor.  Level l + 1 merges the
// states of level l whose coarsened components (flag `coarsen`) agree after halving
// and whose other components agree (for the queue models: (n, g, m) with the same
// (n / 2, g / 2, m)).  Given a positive
// iterate x on level l, the coarse chain is the aggregated chain
//     P_c(I, J) = sum_{i in I, j in J} x_i P_ij / sum_{i in I} x_i,
// whose stationary vector x_c is found recursively; x is then rescaled
// aggregate by aggregate (x_i *= x_c(I) / x(I)) and smoothed by Gauss-Seidel.
// At the exact solution the coarse chain's stationary vector is the aggregate of
// pi, so pi is a fixed point of the cycle.  Every level stores P^T in CSR (rows =
// "to" states): Gauss-Seidel and the coarse construction then read rows.  The
// coarse pattern and, for every fine nonzero, its slot in the coarse values are
// computed once; a cycle only recomputes values (one pass over the nonzeros).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "aqmchain/interrupt.hpp"
#include "aqmchain/solvers/stationary.hpp"
#include "aqmchain/threads.hpp"
#include "solvers/multilevel.hpp"
#include "solvers/stationary_common.hpp"

namespace aqm::detail {

namespace {

struct Level {
  int32_t n = 0;
  std::vector<int32_t> rp, ci;  // CSR of P^T
  std::vector<double> v, exit;  // exit: the probability of leaving each state (exit_probabilities)
  std::vector<std::vector<int32_t>> coord;  // lattice coordinates, one vector per state component
  std::vector<char> halve;                  // per component: merged in pairs (1) or kept apart (0)
  // link to the next (coarser) level
  std::vector<int32_t> agg;     // fine state -> coarse state
  std::vector<int32_t> size;    // members per coarse state
  std::vector<int32_t> pos;     // fine nonzero -> coarse nonzero
  std::vector<double> xs, wgt;  // aggregate sums and disaggregation weights
};

void find_exits(Level& L) { L.exit = exit_probabilities(L.n, L.rp.data(), L.ci.data(), L.v.data()); }

/// Coarse level from `f`: aggregates, pattern and the fine -> coarse slot map.
Level coarsen(Level& f) {
  Level c;
  // aggregate ids in lexicographic order of the coarse coordinates
  std::vector<int64_t> key(f.n);
  // coarse coordinates: halved where the component is coarsened; key in mixed radix
  const size_t D = f.coord.size();
  std::vector<int64_t> radix(D, 1);
  for (size_t d = 0; d < D; ++d)
    for (int32_t i = 0; i < f.n; ++i) radix[d] = std::max<int64_t>(radix[d], (f.halve[d] ? f.coord[d][i] / 2 : f.coord[d][i]) + 1);
  auto cc = [&](size_t d, int32_t i) { return f.halve[d] ? f.coord[d][i] / 2 : f.coord[d][i]; };
  for (int32_t i = 0; i < f.n; ++i) {
    int64_t k = 0;
    for (size_t d = 0; d < D; ++d) k = k * radix[d] + cc(d, i);
    key[i] = k;
  }
  std::vector<int32_t> order(f.n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key[a] < key[b]; });
  f.agg.assign(f.n, -1);
  int32_t nc = 0;
  for (int32_t k = 0; k < f.n; ++k) {
    if (k > 0 && key[order[k]] != key[order[k - 1]]) ++nc;
    f.agg[order[k]] = nc;
  }
  c.n = f.n > 0 ? nc + 1 : 0;
  f.size.assign(c.n, 0);
  c.halve = f.halve;
  c.coord.assign(D, std::vector<int32_t>(c.n));
  for (int32_t i = 0; i < f.n; ++i) {
    const int32_t I = f.agg[i];
    ++f.size[I];
    for (size_t d = 0; d < D; ++d) c.coord[d][I] = cc(d, i);
  }
  // members of each coarse row (fine rows j with agg[j] = J), in CSR form
  std::vector<int32_t> mp(c.n + 1, 0), mem(f.n);
  for (int32_t j = 0; j < f.n; ++j) ++mp[f.agg[j] + 1];
  for (int32_t J = 0; J < c.n; ++J) mp[J + 1] += mp[J];
  {
    std::vector<int32_t> fill(mp.begin(), mp.end() - 1);
    for (int32_t j = 0; j < f.n; ++j) mem[fill[f.agg[j]]++] = j;
  }
  // coarse pattern and slot map
  f.pos.assign(f.ci.size(), -1);
  std::vector<int32_t> mark(c.n, -1);
  c.rp.assign(c.n + 1, 0);
  for (int32_t J = 0; J < c.n; ++J) {
    const int32_t start = static_cast<int32_t>(c.ci.size());
    for (int32_t k = mp[J]; k < mp[J + 1]; ++k) {
      const int32_t j = mem[k];
      for (int32_t e = f.rp[j]; e < f.rp[j + 1]; ++e) {
        const int32_t I = f.agg[f.ci[e]];
        if (mark[I] < start) {
          mark[I] = static_cast<int32_t>(c.ci.size());
          c.ci.push_back(I);
        }
        f.pos[e] = mark[I];
      }
    }
    c.rp[J + 1] = static_cast<int32_t>(c.ci.size());
  }
  c.v.assign(c.ci.size(), 0.0);
  f.xs.assign(c.n, 0.0);
  f.wgt.assign(f.n, 0.0);
  return c;
}

/// Coarse values from the fine iterate x (weights x_i / x(I)).
void restrict_values(Level& f, Level& c, const std::vector<double>& x) {
  std::fill(f.xs.begin(), f.xs.end(), 0.0);
  for (int32_t i = 0; i < f.n; ++i) f.xs[f.agg[i]] += x[i];
  for (int32_t i = 0; i < f.n; ++i) {
    const int32_t I = f.agg[i];
    f.wgt[i] = f.xs[I] > 0.0 ? x[i] / f.xs[I] : 1.0 / f.size[I];
  }
  std::fill(c.v.begin(), c.v.end(), 0.0);
  for (int32_t j = 0; j < f.n; ++j)
    for (int32_t e = f.rp[j]; e < f.rp[j + 1]; ++e) c.v[f.pos[e]] += f.wgt[f.ci[e]] * f.v[e];
  find_exits(c);
}

void normalise(std::vector<double>& x) {
  long double s = 0.0L;
  for (double v : x) s += v;
  for (double& v : x) v = static_cast<double>(v / s);
}

void smooth(const Level& L, std::vector<double>& x, int sweeps) {
  for (int s = 0; s < sweeps; ++s) {
    check_interrupt();  // a W-cycle smooths each level many times: poll per sweep, not per cycle
    gauss_seidel_sweep(L.n, L.rp.data(), L.ci.data(), L.v.data(), L.exit.data(), x);
  }
}

/// Exact stationary vector of a small level by GTH (subtraction-free).
void solve_dense(const Level& L, std::vector<double>& x) {
  const int32_t n = L.n;
  std::vector<double> A(static_cast<size_t>(n) * n, 0.0);  // A[i*n + j] = P_ij
  for (int32_t j = 0; j < n; ++j)
    for (int32_t e = L.rp[j]; e < L.rp[j + 1]; ++e) A[static_cast<size_t>(L.ci[e]) * n + j] += L.v[e];
  std::vector<double> s(n, 0.0);
  for (int32_t k = n - 1; k >= 1; --k) {
    double t = 0.0;
    for (int32_t j = 0; j < k; ++j) t += A[static_cast<size_t>(k) * n + j];
    s[k] = t;
    if (!(t > 0.0))
      throw SolverError(detail::cat("multilevel: the coarsest aggregated chain is reducible (state ", k,
                                    " reaches no lower state)"));
    for (int32_t i = 0; i < k; ++i) {
      const double f = A[static_cast<size_t>(i) * n + k] / t;
      if (f == 0.0) continue;
      for (int32_t j = 0; j < k; ++j) A[static_cast<size_t>(i) * n + j] += f * A[static_cast<size_t>(k) * n + j];
    }
  }
  x.assign(n, 0.0);
  x[0] = 1.0;
  for (int32_t k = 1; k < n; ++k) {
    double acc = 0.0;
    for (int32_t i = 0; i < k; ++i) acc += x[i] * A[static_cast<size_t>(i) * n + k];
    x[k] = s[k] > 0.0 ? acc / s[k] : 0.0;
    // ratios between aggregates can exceed the double range: rescale the
    // partial vector (what underflows is negligible after normalisation)
    if (x[k] > 1e100)
      for (int32_t i = 0; i <= k; ++i) x[i] *= 1e-100;
  }
  normalise(x);
}

void cycle(std::vector<Level>& lv, size_t l, std::vector<double>& x, int pre, int post, int gamma) {
  Level& f = lv[l];
  if (l + 1 == lv.size()) {
    solve_dense(f, x);
    return;
  }
  smooth(f, x, pre);
  Level& c = lv[l + 1];
  restrict_values(f, c, x);
  std::vector<double> xc(f.xs);
  for (int g = 0; g < gamma; ++g) cycle(lv, l + 1, xc, pre, post, gamma);  // gamma = 1: V-cycle, 2: W-cycle
  for (int32_t i = 0; i < f.n; ++i) {
    const int32_t I = f.agg[i];
    x[i] = f.xs[I] > 0.0 ? x[i] * (xc[I] / f.xs[I]) : xc[I] / f.size[I];
  }
  smooth(f, x, post);
}

}  // namespace

std::vector<double> exit_probabilities(int32_t n, const int32_t* rp, const int32_t* ci, const double* v) {
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  for (int32_t j = 0; j < n; ++j)
    for (int32_t e = rp[j]; e < rp[j + 1]; ++e)
      if (ci[e] != j) out[ci[e]] += v[e];  // P^T_{j, i} = P_{i, j}: a way out of i
  return out;
}

void gauss_seidel_sweep(int32_t n, const int32_t* rp, const int32_t* ci, const double* v, const double* exit,
                        std::vector<double>& x) {
  const int T = n >= kParallelSweepStates ? loop_threads() : 1;
  if (T <= 1) {
    for (int32_t j = 0; j < n; ++j) {
      if (!(exit[j] > 0.0)) continue;  // absorbing state: keep its value
      double acc = 0.0;
      for (int32_t e = rp[j]; e < rp[j + 1]; ++e)
        if (ci[e] != j) acc += v[e] * x[ci[e]];
      x[j] = acc / exit[j];
    }
    normalise(x);
    return;
  }
  // Over T threads: T contiguous ranges of states, each swept in order (Gauss-Seidel inside
  // it) with the other ranges' values from the sweep's start (Jacobi between ranges).  The
  // states are numbered by their components' keys, so the couplings between ranges are the
  // few transitions across the ranges' borders in the slowest component.
  const std::vector<double> start(x);  // freed with the sweep (no copy of n doubles kept per thread)
  const double* x0 = start.data();
  double* xs = x.data();
#pragma omp parallel for schedule(static, 1) num_threads(T)
  for (int t = 0; t < T; ++t) {
    const int32_t lo = static_cast<int32_t>(static_cast<int64_t>(n) * t / T);
    const int32_t hi = static_cast<int32_t>(static_cast<int64_t>(n) * (t + 1) / T);
    for (int32_t j = lo; j < hi; ++j) {
      if (!(exit[j] > 0.0)) continue;
      double acc = 0.0;
      for (int32_t e = rp[j]; e < rp[j + 1]; ++e) {
        const int32_t c = ci[e];
        if (c != j) acc += v[e] * (c >= lo && c < hi ? xs[c] : x0[c]);
      }
      xs[j] = acc / exit[j];
    }
  }
  normalise(x);
}

void solve_multilevel(const MarkovOperator& c, const StationaryOptions& o, StationaryResult& r, bool fail_fast) {
  r.method = Method::Multilevel;
  // Aggregation follows the state descriptor: components marked `coarsen` are
  // merged in pairs level by level, the others (categorical ones) are kept apart.
  const int32_t n = c.rows();
  const StateSpace& space = c.space();
  const auto& labels = c.labels();
  bool labelled = space.count() > 0 && static_cast<int>(labels.size()) == space.count();
  for (const auto& l : labels) labelled = labelled && static_cast<int32_t>(l.size()) == n;
  if (!labelled) throw SolverError("multilevel: the chain has no state labels to aggregate on");
  auto t0 = Clock::now();
  std::vector<Level> lv(1);
  {
    TransposedCsr PT = c.transpose();
    Level& L = lv[0];
    L.n = n;
    L.rp = std::move(PT.rowptr);
    L.ci = std::move(PT.col);
    L.v = std::move(PT.val);
    L.coord = labels;
    for (int d = 0; d < space.count(); ++d) L.halve.push_back(space.component(d).coarsen ? 1 : 0);
    find_exits(L);
  }
  const int32_t coarse_size = o.coarse_size;
  while (lv.back().n > coarse_size) {
    check_interrupt();
    Level next = coarsen(lv.back());
    if (next.n * 1.3 > lv.back().n) {  // coarsening stalls: stop here
      lv.back().agg.clear();
      break;
    }
    lv.push_back(std::move(next));
  }
  if (lv.back().n > std::max(2 * coarse_size, 1000))
    throw SolverError(detail::cat("multilevel: coarsening stalled at ", lv.back().n, " states (> max(2 x coarse_size, ",
                                  "1000) with coarse_size = ", coarse_size, "): too large for the dense coarsest solve"));
  r.seconds.push_back({"setup", since(t0)});
  r.extra.push_back({"levels", static_cast<double>(lv.size())});
  r.extra.push_back({"coarsest_states", static_cast<double>(lv.back().n)});

  t0 = Clock::now();
  std::vector<double> x = o.x0.empty() ? std::vector<double>(n, 1.0 / n) : o.x0;
  normalise(x);
  const long maxit = o.max_iter > 0 ? o.max_iter : 1000;
  long it = 0, last_halving = 0;
  double res = INFINITY, best = INFINITY;
  const long stall = fail_fast ? 20 : 100;  // give up when the best residual has not halved for this many cycles
  constexpr long window = 10;               // fail_fast: the rate over this many cycles
  std::vector<double> history;
  while (it < maxit) {
    check_interrupt();
    cycle(lv, 0, x, o.smoothing_sweeps, o.smoothing_sweeps, o.cycle_gamma);
    ++it;
    res = c.residual(x);
    if (!std::isfinite(res)) throw SolverError(detail::cat("multilevel: non-finite residual after cycle ", it));
    if (res <= 0.5 * o.tol) break;
    if (fail_fast) {
      history.push_back(res);
      if (static_cast<long>(history.size()) > window && res > 0.0) {
        const double before = history[history.size() - 1 - window];
        const double rate = before > 0.0 ? std::log(before / res) / window : 0.0;
        const double need = rate > 0.0 ? std::log(res / (0.5 * o.tol)) / rate : INFINITY;
        if (need > 2.0 * static_cast<double>(maxit - it)) {
          r.note = detail::cat("multilevel stopped early: at its rate of the last ", window, " cycles the residual ", res,
                               " would need about ", detail::short_num(need), " more cycles, over twice the ",
                               maxit - it, " left of max_iter = ", maxit);
          r.status = Status::Stalled;
          break;
        }
      }
    }
    if (res <= 0.5 * best) {
      best = res;
      last_halving = it;
    } else if (it - last_halving >= stall) {
      r.note = detail::cat("multilevel stalled: the residual has not halved in ", stall, " cycles");
      r.status = Status::Stalled;
      break;
    }
  }
  r.iterations = it;
  r.operator_applications = it * (2 * o.smoothing_sweeps + 2);  // fine-level passes over the nonzeros per cycle
  r.seconds.push_back({"iterate", since(t0)});
  r.pi = std::move(x);
}


/// Multilevel aggregation with the accounts every method reports.
void solve_multilevel_finished(const MarkovOperator& c, const StationaryOptions& o, StationaryResult& r,
                               const Attempt& a) {
  solve_multilevel(c, o, r, a.fail_fast);
  finish(c, r, o.tol);
  if (!r.converged())
    r.note = detail::cat("multilevel stopped after ", r.iterations, " cycles, residual ", r.residual) +
             (r.note.empty() ? "" : " (" + r.note + ")");
}

template <>
const MethodSolver& method_solver<Method::Multilevel>() {
  static const MethodSolver entry{solve_multilevel_finished, /*whole_chain=*/false, /*fails_fast=*/true};
  return entry;
}

}  // namespace aqm::detail
