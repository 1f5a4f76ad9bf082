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
// values a level takes).  Each diagonal block is
// factorised once as a band matrix without pivoting (principal submatrices of a
// column diagonally dominant M-matrix need none).  One application is a forward
// and a backward sweep over the blocks with exact block solves.
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

#include "aqmchain/interrupt.hpp"
#include "aqmchain/operators/operator.hpp"
#include "aqmchain/model/queue_generator.hpp"

namespace aqm::detail {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// A diagonal block in band storage, LU-factorised in place without pivoting.
struct BandLU {
  int32_t start = 0, size = 0, p = 0, q = 0;  // first row, rows, lower and upper bandwidth
  std::vector<double> a;                        // a[i * (p + q + 1) + (j - i + p)]
  int w() const { return p + q + 1; }
  double& at(int32_t i, int32_t j) { return a[static_cast<size_t>(i) * w() + (j - i + p)]; }
  double at(int32_t i, int32_t j) const { return a[static_cast<size_t>(i) * w() + (j - i + p)]; }

  void factor() {
    for (int32_t k = 0; k < size; ++k) {
      const double piv = at(k, k);
      if (!(std::abs(piv) > 0.0) || !std::isfinite(piv))
        throw SolverError(detail::cat("krylov: zero pivot in a diagonal block of the preconditioner (row ", start + k,
                                      ")"));
      const int32_t ilast = std::min(size - 1, k + p), jlast = std::min(size - 1, k + q);
      for (int32_t i = k + 1; i <= ilast; ++i) {
        double& lik = at(i, k);
        if (lik == 0.0) continue;
        lik /= piv;
        for (int32_t j = k + 1; j <= jlast; ++j) at(i, j) -= lik * at(k, j);
      }
    }
  }
  /// x <- D^{-1} x.
  void solve(double* x) const {
    for (int32_t i = 0; i < size; ++i) {
      double s = x[i];
      for (int32_t j = std::max(0, i - p); j < i; ++j) s -= at(i, j) * x[j];
      x[i] = s;
    }
    for (int32_t i = size - 1; i >= 0; --i) {
      double s = x[i];
      const int32_t jlast = std::min(size - 1, i + q);
      for (int32_t j = i + 1; j <= jlast; ++j) s -= at(i, j) * x[j];
      x[i] = s / at(i, i);
    }
  }
};

/// B in CSR over the block-ordered indices, with each row split into the part
/// left of its block, inside it and right of it.
struct Reduced {
  int32_t n = 0, K = 0;                   // size, fixed state (block-ordered index)
  std::vector<int32_t> perm, inv;         // perm[new] = old, inv[old] = new
  std::vector<int32_t> rp, ci, lo_end, up_begin, bstart;
  std::vector<double> v, b;
  std::vector<BandLU> blocks;
  mutable long precond_applications = 0;

  void matvec(const double* x, double* y) const {
    CsrOperator(n, rp.data(), ci.data(), v.data()).apply_transpose(x, y);  // y = B x, a gather over rows
  }

  /// z = M^{-1} r, M = (D + L) D^{-1} (D + U) over the blocks.
  void precond(const double* r, double* z) const {
    ++precond_applications;
    const int32_t nb = static_cast<int32_t>(blocks.size());
    for (int32_t bi = 0; bi < nb; ++bi) {  // forward: (D + L) y = r
      const BandLU& B = blocks[bi];
      double* t = z + B.start;
      for (int32_t j = B.start; j < B.start + B.size; ++j) {
        double s = r[j];
        for (int32_t e = rp[j]; e < lo_end[j]; ++e) s -= v[e] * z[ci[e]];
        t[j - B.start] = s;
      }
      B.solve(t);
    }
    std::vector<double> t;
    for (int32_t bi = nb - 1; bi >= 0; --bi) {  // backward: z = y - D^{-1} U z
      const BandLU& B = blocks[bi];
      t.assign(static_cast<size_t>(B.size), 0.0);
      bool any = false;
      for (int32_t j = B.start; j < B.start + B.size; ++j) {
        double s = 0.0;
        for (int32_t e = up_begin[j]; e < rp[j + 1]; ++e) s += v[e] * z[ci[e]];
        t[j - B.start] = s;
        any = any || s != 0.0;
      }
      if (!any) continue;
      B.solve(t.data());
      for (int32_t i = 0; i < B.size; ++i) z[B.start + i] -= t[i];
    }
  }
};

Reduced reduce(const Chain& c, const std::vector<int32_t>& block_of, int32_t k) {
  Reduced R;
  const int32_t n = c.n;
  R.n = n;
  // block order: by block, then by state index (so (n, modulator) order inside)
  // (a stable counting sort: blocks are numbered 0 .. nb - 1)
  int32_t nblocks = 0;
  for (int32_t b : block_of) nblocks = std::max(nblocks, b + 1);
  std::vector<int32_t> first(static_cast<size_t>(nblocks) + 1, 0);
  for (int32_t b : block_of) ++first[b + 1];
  for (int32_t b = 0; b < nblocks; ++b) first[b + 1] += first[b];
  R.perm.resize(n);
  for (int32_t i = 0; i < n; ++i) R.perm[first[block_of[i]]++] = i;
  R.inv.resize(n);
  for (int32_t i = 0; i < n; ++i) R.inv[R.perm[i]] = i;
  R.K = R.inv[k];
  for (int32_t i = 0; i < n; ++i)
    if (i == 0 || block_of[R.perm[i]] != block_of[R.perm[i - 1]]) R.bstart.push_back(i);
  R.bstart.push_back(n);

  // rows of B = columns of P: count (one slot more per row, for the diagonal), then fill.
  std::vector<int32_t> cnt(static_cast<size_t>(n) + 1, 0);
  for (int32_t i = 0; i < n; ++i) {
    if (i == k) continue;
    for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e)
      if (c.col[e] != k) ++cnt[R.inv[c.col[e]] + 1];
  }
  R.rp.assign(static_cast<size_t>(n) + 1, 0);
  for (int32_t j = 0; j < n; ++j) R.rp[j + 1] = R.rp[j] + cnt[j + 1] + 1;
  R.ci.resize(R.rp[n]);
  R.v.resize(R.rp[n]);
  // Scanning the rows of P in block order appends to each row of B in increasing
  // column order; the diagonal 1 is then inserted at its place (merged with -P_jj).
  std::vector<int32_t> fill(R.rp.begin(), R.rp.end() - 1);
  for (int32_t& f : fill) ++f;  // the row's first slot stays free for the diagonal
  R.b.assign(n, 0.0);
  for (int32_t I = 0; I < n; ++I) {
    const int32_t i = R.perm[I];
    for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e) {
      const int32_t j = c.col[e];
      if (j == k) continue;
      if (i == k) {
        R.b[R.inv[j]] = c.val[e];
        continue;
      }
      const int32_t J = R.inv[j];
      R.ci[fill[J]] = I;
      R.v[fill[J]++] = -c.val[e];
    }
  }
  int32_t out = 0;
  std::vector<int32_t> rp2(static_cast<size_t>(n) + 1, 0);
  for (int32_t j = 0; j < n; ++j) {
    // Compaction in place: the entries sit at [rp[j] + 1, fill[j]) and out <= rp[j],
    // so a write (at most one ahead, for the diagonal) never passes an unread entry.
    const int32_t lo = R.rp[j] + 1, hi = fill[j];
    bool diag = false;
    for (int32_t e = lo; e < hi; ++e) {
      const int32_t col = R.ci[e];
      const double val = R.v[e];
      if (!diag && col >= j) {
        diag = true;
        R.ci[out] = j;
        if (col == j) {
          R.v[out++] = 1.0 + val;
          continue;
        }
        R.v[out++] = 1.0;
      }
      R.ci[out] = col;
      R.v[out++] = val;
    }
    if (!diag) {
      R.ci[out] = j;
      R.v[out++] = 1.0;
    }
    rp2[j + 1] = out;
  }
  R.rp.swap(rp2);
  R.ci.resize(out);
  R.v.resize(out);
  R.ci.shrink_to_fit();
  R.v.shrink_to_fit();

  // split rows at their block, bandwidths, band factorisations
  R.lo_end.resize(n);
  R.up_begin.resize(n);
  const int32_t nb = static_cast<int32_t>(R.bstart.size()) - 1;
  R.blocks.resize(nb);
  for (int32_t bi = 0; bi < nb; ++bi) {
    BandLU& B = R.blocks[bi];
    B.start = R.bstart[bi];
    B.size = R.bstart[bi + 1] - B.start;
    const int32_t lo = B.start, hi = B.start + B.size;
    for (int32_t j = lo; j < hi; ++j) {
      int32_t e = R.rp[j];
      while (e < R.rp[j + 1] && R.ci[e] < lo) ++e;
      R.lo_end[j] = e;
      while (e < R.rp[j + 1] && R.ci[e] < hi) {
        B.p = std::max(B.p, j - R.ci[e]);
        B.q = std::max(B.q, R.ci[e] - j);
        ++e;
      }
      R.up_begin[j] = e;
    }
    B.a.assign(static_cast<size_t>(B.size) * B.w(), 0.0);
    for (int32_t j = lo; j < hi; ++j)
      for (int32_t e = R.lo_end[j]; e < R.up_begin[j]; ++e) B.at(j - lo, R.ci[e] - lo) += R.v[e];
    B.factor();
  }
  return R;
}

double dot(const std::vector<double>& a, const double* b, int32_t n) {
  double s = 0.0;
  const double* ap = a.data();
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > 50000)
  for (int32_t i = 0; i < n; ++i) s += ap[i] * b[i];
  return s;
}

}  // namespace

std::vector<int32_t> slow_component_blocks(const Chain& c) {
  std::vector<int> slow;
  for (int i = 0; i < c.space.count(); ++i) {
    const std::string& name = c.space.component(i).name;
    // REDwM's s follows the queue (s ~ b_1 q): it belongs in the block with n, like the modulator
    if (name != component::level && name != component::modulator && name != component::s) slow.push_back(i);
  }
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
                  StationaryResult& r) {
  r.method = Method::Krylov;
  auto t0 = Clock::now();
  const Reduced R = reduce(c, block_of, k);
  const int32_t n = R.n;
  int band = 0;
  int32_t largest = 0;
  for (const auto& B : R.blocks) band = std::max(band, B.w()), largest = std::max(largest, B.size);
  r.seconds.push_back({"setup", since(t0)});
  r.extra.push_back({"blocks", static_cast<double>(R.blocks.size())});
  r.extra.push_back({"largest_block", static_cast<double>(largest)});
  r.extra.push_back({"band_width", static_cast<double>(band)});
  r.extra.push_back({"fixed_state", static_cast<double>(k)});

  t0 = Clock::now();
  const int m = std::max(2, std::min<int>(o.krylov_basis, std::max(2, n)));
  const long maxit = o.max_iter > 0 ? o.max_iter : 2000;
  std::vector<double> x(n, 0.0), res(n), w(n), z(n);
  if (!o.x0.empty() && o.x0[k] > 0.0) {
    for (int32_t i = 0; i < n; ++i) x[R.inv[i]] = o.x0[i] / o.x0[k];
  } else {
    R.precond(R.b.data(), x.data());
  }
  x[R.K] = 0.0;
  std::vector<std::vector<double>> V(static_cast<size_t>(m) + 1, std::vector<double>(n));
  std::vector<double> H(static_cast<size_t>(m + 1) * m), cs(m), sn(m), g(m + 1), y(m), zsum(m);
  auto h = [&](int i, int j) -> double& { return H[static_cast<size_t>(i) * m + j]; };
  long its = 0, operator_applications = 0;
  double fac = 1.0, best = INFINITY;
  int no_progress = 0;
  bool converged = false, stalled = false;
  double true_res = INFINITY, S = 1.0;
  bool negative_mass = false;
  // res = b - B xv; returns the residual of the normalised vector, sets S = 1 + sum xv.
  // A vector whose mass 1 + sum xv is not positive cannot be normalised: its residual
  // is +infinity (the fixed state's probability is too small to fix; the caller
  // re-solves with another one).
  auto residual_of = [&](const std::vector<double>& xv) {
    R.matvec(xv.data(), w.data());
    ++operator_applications;
    long double r1 = 0.0L, rs = 0.0L, sx = 0.0L;
    for (int32_t j = 0; j < n; ++j) {
      res[j] = R.b[j] - w[j];
      r1 += std::abs(res[j]);
      rs += res[j];
      sx += xv[j];
    }
    S = static_cast<double>(1.0L + sx);
    if (!(1.0L + sx > 0.0L)) {
      negative_mass = true;
      return static_cast<double>(INFINITY);
    }
    return static_cast<double>((r1 + std::abs(rs)) / (1.0L + sx));
  };
  auto solve_y = [&](int steps) {  // H y = g (upper triangular after the rotations)
    for (int i = steps - 1; i >= 0; --i) {
      double s = g[i];
      for (int l = i + 1; l < steps; ++l) s -= h(i, l) * y[l];
      y[i] = h(i, i) != 0.0 ? s / h(i, i) : 0.0;
    }
  };
  std::vector<double> xc(n);
  auto candidate = [&](int steps) {  // xc = x + M^{-1} V y
    solve_y(steps);
    std::fill(w.begin(), w.end(), 0.0);
    for (int i = 0; i < steps; ++i) {
      const double yi = y[i];
      const double* vi = V[i].data();
      double* wp = w.data();
#pragma omp parallel for schedule(static) if (n > 50000)
      for (int32_t l = 0; l < n; ++l) wp[l] += yi * vi[l];
    }
    R.precond(w.data(), z.data());
    for (int32_t l = 0; l < n; ++l) xc[l] = x[l] + z[l];
    xc[R.K] = 0.0;
  };
  true_res = residual_of(x);
  while (!converged) {
    check_interrupt();
    if (!std::isfinite(true_res)) break;
    if (true_res <= 0.5 * o.tol) {
      converged = true;
      break;
    }
    if (true_res < 0.99 * best) {
      best = true_res;
      no_progress = 0;
    } else if (++no_progress >= 10) {
      stalled = true;
      break;
    }
    if (its >= maxit) break;
    // one GMRES cycle on B M^{-1} u = res (res from the last residual_of)
    const double beta = std::sqrt(dot(res, res.data(), n));
    if (!(beta > 0.0)) {
      converged = true;
      break;
    }
    for (int32_t j = 0; j < n; ++j) V[0][j] = res[j] / beta;
    std::fill(g.begin(), g.end(), 0.0);
    g[0] = beta;
    const double S0 = S;
    int steps = 0;
    for (int j = 0; j < m && its < maxit; ++j) {
      R.precond(V[j].data(), z.data());
      zsum[j] = std::accumulate(z.begin(), z.end(), 0.0);
      R.matvec(z.data(), w.data());
      ++operator_applications;
      ++its;
      // modified Gram-Schmidt, each update fused with the next projection (one
      // sweep per basis vector, row chunks split over threads)
      double next = dot(V[0], w.data(), n);
      for (int i = 0; i <= j; ++i) {
        const double hij = next;
        h(i, j) = hij;
        const double* vi = V[i].data();
        const double* vn = i < j ? V[i + 1].data() : nullptr;
        double acc = 0.0;
        double* wp = w.data();
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n > 50000)
        for (int32_t l = 0; l < n; ++l) {
          const double v = wp[l] - hij * vi[l];
          wp[l] = v;
          acc += vn ? vn[l] * v : v * v;
        }
        next = acc;
      }
      const double hnext = std::sqrt(next);
      for (int i = 0; i < j; ++i) {  // previous rotations on column j
        const double a = h(i, j), bb = h(i + 1, j);
        h(i, j) = cs[i] * a + sn[i] * bb;
        h(i + 1, j) = -sn[i] * a + cs[i] * bb;
      }
      const double d = std::hypot(h(j, j), hnext);
      cs[j] = d > 0 ? h(j, j) / d : 1.0;
      sn[j] = d > 0 ? hnext / d : 0.0;
      h(j, j) = d;
      g[j + 1] = -sn[j] * g[j];
      g[j] = cs[j] * g[j];
      steps = j + 1;
      const bool happy = !(hnext > 1e-14 * beta);
      if (!happy)
        for (int32_t l = 0; l < n; ++l) V[j + 1][l] = w[l] / hnext;
      // The test scales with sum z = 1 + sum x, which the cycle changes (by orders
      // of magnitude when pi_k is small): sum of the candidate from zsum and y.
      solve_y(steps);
      double sj = S0;
      for (int i = 0; i < steps; ++i) sj += y[i] * zsum[i];
      const double stop = fac * 0.5 * o.tol * std::max(sj, 1.0);
      if (std::abs(g[j + 1]) <= stop || happy) {
        // The estimate (2-norm) says done: check the true residual of the
        // candidate without discarding the basis; on failure ask for more.
        candidate(steps);
        const double cr = residual_of(xc);
        if (cr <= 0.5 * o.tol || happy) {
          x.swap(xc);
          true_res = cr;
          converged = cr <= 0.5 * o.tol;
          steps = -1;  // x is updated
          break;
        }
        fac *= 0.1;
      }
    }
    if (steps < 0) {
      if (!converged) true_res = residual_of(x);
      continue;
    }
    candidate(steps);  // the basis is full: restart from the candidate
    x.swap(xc);
    true_res = residual_of(x);
  }
  r.seconds.push_back({"iterate", since(t0)});
  r.iterations = its;
  r.operator_applications = operator_applications;
  r.extra.push_back({"preconditioner_applications", static_cast<double>(R.precond_applications)});
  r.extra.push_back({"reduced_residual", true_res});
  if (negative_mass) r.extra.push_back({"negative_mass", 1.0});
  r.pi.assign(n, 0.0);
  for (int32_t i = 0; i < n; ++i) r.pi[i] = x[R.inv[i]];
  r.pi[k] = 1.0;
  if (stalled) r.status = Status::Stalled;
  if (!converged)
    r.note = negative_mass ? detail::cat("krylov: an iterate had mass 1 + sum x <= 0 with state ", k,
                                         " fixed (its probability is too small to fix)")
             : stalled ? detail::cat("krylov stalled: the residual did not fall by 1 % in 10 restarts (", true_res, ")")
                       : detail::cat("krylov stopped after ", its, " of max_iter = ", maxit, " steps, residual ", true_res);
}

}  // namespace aqm::detail
