// Preconditioned GMRES for pi P = pi (method "krylov").
//
// The reduced system: fix pi_k = 1 for a recurrent, probable state k; the other
// balance equations are B x = b with B = ((I - P) without row and column k)^T
// and b_j = P_kj.  B is kept at full size with row and column k replaced by the
// identity (b_k = 0), so no index is shifted.  B is a nonsingular M-matrix,
// diagonally dominant by columns.
//
// Preconditioner: symmetric block Gauss-Seidel over blocks of states that share
// every component except `level`, `modulator` and REDwM's `s_index` (for the queue
// models: one block per avg grid point, ordered by (n, [s,] modulator) inside, so
// each diagonal block is banded in n with sub-blocks of the few (s, modulator)
// values a level takes), each diagonal block factorised once as a band matrix.  The system, the preconditioner and GMRES
// live in block_system.hpp (the rational Krylov exponential solves with them too).
//
// GMRES (Saad & Schultz 1986) with right preconditioning, modified Gram-Schmidt
// and Givens rotations, restarted after `krylov_basis` steps.  The stopping test
// is the true residual of the normalised vector, exact and cheap for the
// reduced system: with r = b - B x and z = (x, pi_k = 1),
//     ||z P - z||_1 / sum z = (||r||_1 + |sum_j r_j|) / (1 + sum x),
// since the k-th balance equation is minus the sum of the others.
#include "solvers/krylov.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "solvers/block_system.hpp"

namespace aqm::detail {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

std::vector<int32_t> slow_component_blocks(const Chain& c) {
  std::vector<int> slow;
  for (int i = 0; i < c.space.count(); ++i)
    if (!c.space.component(i).in_block) slow.push_back(i);  // the generator flags the block's components
  std::vector<int64_t> key(c.n, 0);
  for (int i : slow)
    for (int32_t s = 0; s < c.n; ++s) key[s] = key[s] * c.space.component(i).size + c.labels[i][s];
  // number the distinct keys in increasing order: through a dense marker array
  // when the key range is small (the usual case: the avg grid), else by sorting
  int64_t range = 1;  // the keys fit int64 (the descriptor's product does), so does this
  for (int i : slow) range *= c.space.component(i).size;
  std::vector<int32_t> block(c.n);
  if (range <= std::max<int64_t>(4 * static_cast<int64_t>(c.n), 1 << 20)) {
    std::vector<int32_t> id(static_cast<size_t>(range), -1);
    for (int64_t k : key) id[static_cast<size_t>(k)] = 0;
    int32_t next = 0;
    for (auto& v : id)
      if (v == 0) v = next++;
    for (int32_t s = 0; s < c.n; ++s) block[s] = id[static_cast<size_t>(key[s])];
    return block;
  }
  std::vector<int64_t> sorted(key);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (int32_t s = 0; s < c.n; ++s)
    block[s] = static_cast<int32_t>(std::lower_bound(sorted.begin(), sorted.end(), key[s]) - sorted.begin());
  return block;
}

void solve_krylov(const Chain& c, const std::vector<int32_t>& block_of, int32_t k, const StationaryOptions& o,
                  StationaryResult& r, bool fail_fast) {
  r.method = Method::Krylov;
  auto t0 = Clock::now();
  // B = I - P^T with (I - P)_jj the exit probability of j (no cancellation in 1 - P_jj)
  const BlockSystem R = block_system(c.n, c.rowptr.data(), c.col.data(), c.val.data(), block_of, 1.0, 1.0, k,
                                     0, 1.0);
  const int32_t n = R.n;
  r.seconds.push_back({"setup", since(t0)});
  r.extra.push_back({"blocks", static_cast<double>(R.blocks.size())});
  r.extra.push_back({"largest_block", static_cast<double>(R.largest_block())});
  r.extra.push_back({"band_width", static_cast<double>(R.band_width())});
  r.extra.push_back({"fixed_state", static_cast<double>(k)});

  t0 = Clock::now();
  std::vector<double> x(n, 0.0);
  if (!o.x0.empty() && o.x0[k] > 0.0) {
    for (int32_t i = 0; i < n; ++i) x[R.inv[i]] = o.x0[i] / o.x0[k];
  } else {
    R.precond(R.b.data(), x.data());
  }
  x[R.K] = 0.0;
  // The residual of the normalised vector z = (x, pi_k = 1):
  // ||z P - z||_1 / sum z = (||r||_1 + |sum_j r_j|) / (1 + sum x); GMRES's 2-norm
  // estimate is compared with the target times sum z of the candidate.
  Gmres::Test test;
  test.target = 0.5 * o.tol;
  // A vector whose mass 1 + sum x is not positive cannot be normalised: its measure is
  // +infinity, which ends GMRES (the fixed state's probability is too small to fix; the
  // caller re-solves with another one).
  bool negative_mass = false;
  test.measure = [n, &negative_mass](const std::vector<double>& xv, const std::vector<double>& res) {
    long double r1 = 0.0L, rs = 0.0L, sx = 0.0L;
    for (int32_t j = 0; j < n; ++j) {
      r1 += std::abs(res[j]);
      rs += res[j];
      sx += xv[j];
    }
    if (!(1.0L + sx > 0.0L)) {
      negative_mass = true;
      return static_cast<double>(INFINITY);
    }
    return static_cast<double>((r1 + std::abs(rs)) / (1.0L + sx));
  };
  test.scale = [](double sum) { return std::max(1.0 + sum, 1.0); };
  Gmres::Limits limits;
  limits.max_iter = o.max_iter > 0 ? o.max_iter : 2000;
  if (fail_fast) {
    limits.fail_fast = true;
    limits.stall_restarts = 3;
  }
  Gmres gmres(n, o.krylov_basis);
  const Gmres::Outcome g = gmres.solve(R, R.b.data(), x, test, limits);
  r.seconds.push_back({"iterate", since(t0)});
  r.iterations = g.iterations;
  r.operator_applications = g.products;
  r.extra.push_back({"preconditioner_applications", static_cast<double>(R.precond_applications)});
  r.extra.push_back({"reduced_residual", g.measure});
  if (negative_mass) r.extra.push_back({"negative_mass", 1.0});
  r.pi.assign(n, 0.0);
  for (int32_t i = 0; i < n; ++i) r.pi[i] = x[R.inv[i]];
  r.pi[k] = 1.0;
  if (g.stalled) r.status = Status::Stalled;
  if (!g.converged)
    r.note = negative_mass ? detail::cat("krylov: an iterate had mass 1 + sum x <= 0 with state ", k,
                                         " fixed (its probability is too small to fix)")
             : g.projected ? detail::cat("krylov stopped early: at its rate of the last restarts the residual ",
                                         g.measure, " would need about ", detail::short_num(g.projected_steps),
                                         " more steps to reach tol, over twice the ", limits.max_iter - g.iterations,
                                         " left of max_iter = ", limits.max_iter)
             : g.stalled ? detail::cat("krylov stalled: the residual did not fall by 1 % in ", limits.stall_restarts,
                                       " restarts (", g.measure, ")")
                       : detail::cat("krylov stopped after ", g.iterations, " of max_iter = ", limits.max_iter,
                                     " steps, residual ", g.measure);
}

}  // namespace aqm::detail
