// The block system, its block Gauss-Seidel preconditioner and GMRES
// (block_system.hpp says what each is for).
#include "solvers/block_system.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <utility>

#include <Eigen/Dense>
#include <Eigen/SparseLU>

#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"
#include "aqmchain/operators/operator.hpp"
#include "aqmchain/threads.hpp"

namespace aqm::detail {

// ------------------------------------------------------------------ band blocks

void BandLU::factor() {
  for (int32_t k = 0; k < size; ++k) {
    const double piv = at(k, k);
    if (!(std::abs(piv) > 0.0) || !std::isfinite(piv))
      throw SolverError(
          cat("zero pivot in a diagonal block of the block Gauss-Seidel preconditioner (row ", start + k, ")"));
    const int32_t ilast = std::min(size - 1, k + p), jlast = std::min(size - 1, k + q);
    for (int32_t i = k + 1; i <= ilast; ++i) {
      double& lik = at(i, k);
      if (lik == 0.0) continue;
      lik /= piv;
      for (int32_t j = k + 1; j <= jlast; ++j) at(i, j) -= lik * at(k, j);
    }
  }
  inv_diag.resize(static_cast<size_t>(size));
  for (int32_t k = 0; k < size; ++k) inv_diag[k] = 1.0 / at(k, k);
}

void BandLU::solve(double* x) const {
  // Row i of the band starts at a[i w]; its entry (i, j) is row[j] with row = a + i w + p - i.
  // Both sweeps take the entry next to the diagonal last, from a register: the chain
  // from one row to the next is then one multiply-add (and the scaling by 1 / U_ii),
  // and no load waits on the store just made.
  const int wd = w();
  const double* base = a.data() + p;
  double prev = 0.0;
  for (int32_t i = 0; i < size; ++i) {  // L y = x (unit diagonal)
    const double* row = base + static_cast<std::ptrdiff_t>(i) * wd - i;
    double s = x[i];
    for (int32_t j = std::max(0, i - p); j < i - 1; ++j) s -= row[j] * x[j];
    if (i > 0 && p > 0) s -= row[i - 1] * prev;
    x[i] = prev = s;
  }
  for (int32_t i = size - 1; i >= 0; --i) {  // U x = y
    const double* row = base + static_cast<std::ptrdiff_t>(i) * wd - i;
    double s = x[i];
    for (int32_t j = std::min(size - 1, i + q); j > i + 1; --j) s -= row[j] * x[j];
    if (i + 1 < size && q > 0) s -= row[i + 1] * prev;
    x[i] = prev = s * inv_diag[i];
  }
}

// ------------------------------------------------------------------ the system

void BlockSystem::matvec(const double* x, double* y) const {
  CsrOperator(n, rp.data(), ci.data(), v.data()).apply_transpose(x, y);  // y = B x, a gather over rows
}

struct BlockSystem::CoarseLU {
  Eigen::SparseLU<Eigen::SparseMatrix<double>, Eigen::COLAMDOrdering<int>> lu;
};

bool BlockSystem::set_coarse(const std::vector<int32_t>& group_of, int32_t G, const std::vector<double>& z) {
  Coarse c;
  c.G = G;
  c.group.resize(static_cast<size_t>(n));
  c.w.resize(static_cast<size_t>(n));
  std::vector<double> sum(static_cast<size_t>(G), 0.0);
  std::vector<int32_t> members(static_cast<size_t>(G), 0);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t g = c.group[i] = group_of[perm[i]];
    c.w[i] = std::max(z[perm[i]], 0.0);
    sum[g] += c.w[i];
    ++members[g];
  }
  for (int32_t i = 0; i < n; ++i) {
    const int32_t g = c.group[i];
    c.w[i] = sum[g] > 0.0 ? c.w[i] / sum[g] : 1.0 / members[g];
  }
  // (B P)(i, J) = sum_{j in J} B_ij w_j and A_c(I, J) = sum_{i in I} (B P)(i, J)
  std::vector<Eigen::Triplet<double>> ac;
  Eigen::SparseMatrix<double> Ac(G, G);
  c.bp_rp.assign(static_cast<size_t>(n) + 1, 0);
  c.bp_g.reserve(static_cast<size_t>(n));
  c.bp_v.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const size_t row = c.bp_g.size();
    for (int32_t e = rp[i]; e < rp[i + 1]; ++e) {
      const int32_t J = c.group[ci[e]];
      const double x = v[e] * c.w[ci[e]];
      size_t at = row;
      while (at < c.bp_g.size() && c.bp_g[at] != J) ++at;  // a row meets few groups
      if (at == c.bp_g.size()) c.bp_g.push_back(J), c.bp_v.push_back(x);
      else c.bp_v[at] += x;
    }
    c.bp_rp[i + 1] = static_cast<int32_t>(c.bp_g.size());
    for (size_t at = row; at < c.bp_g.size(); ++at) ac.emplace_back(c.group[i], c.bp_g[at], c.bp_v[at]);
    if (ac.size() >= (size_t{1} << 22) || i + 1 == n) {  // summed in batches (bounded memory)
      Eigen::SparseMatrix<double> part(G, G);
      part.setFromTriplets(ac.begin(), ac.end());
      Ac += part;
      ac.clear();
    }
  }
  Ac.makeCompressed();
  auto lu = std::make_shared<CoarseLU>();
  lu->lu.compute(Ac);
  if (lu->lu.info() != Eigen::Success) return false;  // A_c singular
  c.lu = std::move(lu);
  coarse = std::move(c);
  return true;
}

void BlockSystem::precond(const double* r, double* z) const {
  ++precond_applications;
  if (coarse.G > 0) {
    precond_two_level(r, z);
    return;
  }
  forward_sweep(r, z);  // (D + L) y = r
  const int32_t nb = static_cast<int32_t>(blocks.size());
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

void BlockSystem::forward_sweep(const double* r, double* z) const {
  const int32_t nb = static_cast<int32_t>(blocks.size());
  for (int32_t bi = 0; bi < nb; ++bi) {  // (D + L) z = r
    const BandLU& B = blocks[bi];
    double* t = z + B.start;
    for (int32_t j = B.start; j < B.start + B.size; ++j) {
      double s = r[j];
      for (int32_t e = rp[j]; e < lo_end[j]; ++e) s -= v[e] * z[ci[e]];
      t[j - B.start] = s;
    }
    B.solve(t);
  }
}

void BlockSystem::backward_sweep(const double* r, double* z) const {
  const int32_t nb = static_cast<int32_t>(blocks.size());
  for (int32_t bi = nb - 1; bi >= 0; --bi) {  // (D + U) z = r
    const BandLU& B = blocks[bi];
    double* t = z + B.start;
    for (int32_t j = B.start; j < B.start + B.size; ++j) {
      double s = r[j];
      for (int32_t e = up_begin[j]; e < rp[j + 1]; ++e) s -= v[e] * z[ci[e]];
      t[j - B.start] = s;
    }
    B.solve(t);
  }
}

void BlockSystem::precond_two_level(const double* r, double* z) const {
  const int32_t G = coarse.G;
  std::vector<double>& d = scratch_d_;
  std::vector<double>& y = scratch_y_;
  d.resize(static_cast<size_t>(n));
  y.resize(static_cast<size_t>(n));
  forward_sweep(r, z);  // z = (D + L)^{-1} r, so r - B z = -U z
  const int32_t* up = up_begin.data();
  const int32_t* rpp = rp.data();
  const int32_t* cip = ci.data();
  const double* vp = v.data();
  double* dp = d.data();
#pragma omp parallel for schedule(static) if (n > 50000) num_threads(loop_threads())
  for (int32_t i = 0; i < n; ++i) {
    double s = 0.0;
    for (int32_t e = up[i]; e < rpp[i + 1]; ++e) s += vp[e] * z[cip[e]];
    dp[i] = -s;
  }
  Eigen::VectorXd rc = Eigen::VectorXd::Zero(G);
  for (int32_t i = 0; i < n; ++i) rc[coarse.group[i]] += d[i];  // restricted to the groups
  const Eigen::VectorXd ec = coarse.lu->lu.solve(rc);
  // the coarse correction z += P ec, and the residual r - B z = d - (B P) ec
  const int32_t* grp = coarse.group.data();
  const double* wp = coarse.w.data();
  const int32_t* brp = coarse.bp_rp.data();
  const int32_t* bg = coarse.bp_g.data();
  const double* bv = coarse.bp_v.data();
  const double* ecp = ec.data();
#pragma omp parallel for schedule(static) if (n > 50000) num_threads(loop_threads())
  for (int32_t i = 0; i < n; ++i) {
    z[i] += wp[i] * ecp[grp[i]];
    double s = 0.0;
    for (int32_t e = brp[i]; e < brp[i + 1]; ++e) s += bv[e] * ecp[bg[e]];
    dp[i] -= s;
  }
  std::fill(y.begin(), y.end(), 0.0);
  backward_sweep(d.data(), y.data());  // z += (D + U)^{-1} (r - B z)
  for (int32_t i = 0; i < n; ++i) z[i] += y[i];
  if (K >= 0) z[K] = r[K];  // the fixed state's row is the identity
}

int BlockSystem::band_width() const {
  int w = 0;
  for (const auto& B : blocks) w = std::max(w, B.w());
  return w;
}

int32_t BlockSystem::largest_block() const {
  int32_t s = 0;
  for (const auto& B : blocks) s = std::max(s, B.size);
  return s;
}

uint64_t hash_indices(const std::vector<int32_t>& v, uint64_t h) {
  constexpr uint64_t prime = 1099511628211ULL;
  h = (h ^ static_cast<uint64_t>(v.size())) * prime;
  for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * prime;
  return h;
}

BlockSystem block_system(int32_t n, const int32_t* rowptr, const int32_t* col, const double* val,
                         const std::vector<int32_t>& block_of, double a, double b, int32_t k,
                         int64_t max_band_entries, double row_total, double divisor) {
  BlockSystem R;
  R.n = n;
  // block order: by block, then by state index (the key order of the components inside)
  // (a stable counting sort: blocks are numbered 0 .. nb - 1)
  int32_t nblocks = 0;
  for (int32_t bl : block_of) nblocks = std::max(nblocks, bl + 1);
  std::vector<int32_t> first(static_cast<size_t>(nblocks) + 1, 0);
  for (int32_t bl : block_of) ++first[bl + 1];
  for (int32_t bl = 0; bl < nblocks; ++bl) first[bl + 1] += first[bl];
  R.perm.resize(n);
  for (int32_t i = 0; i < n; ++i) R.perm[first[block_of[i]]++] = i;
  R.inv.resize(n);
  for (int32_t i = 0; i < n; ++i) R.inv[R.perm[i]] = i;
  R.K = k >= 0 ? R.inv[k] : -1;
  for (int32_t i = 0; i < n; ++i)
    if (i == 0 || block_of[R.perm[i]] != block_of[R.perm[i - 1]]) R.bstart.push_back(i);
  R.bstart.push_back(n);

  // rows of B = columns of M: count (one slot more per row, for the diagonal), then fill.
  std::vector<int32_t> cnt(static_cast<size_t>(n) + 1, 0);
  for (int32_t i = 0; i < n; ++i) {
    if (i == k) continue;
    for (int32_t e = rowptr[i]; e < rowptr[i + 1]; ++e)
      if (col[e] != k) ++cnt[R.inv[col[e]] + 1];
  }
  R.rp.assign(static_cast<size_t>(n) + 1, 0);
  for (int32_t j = 0; j < n; ++j) R.rp[j + 1] = R.rp[j] + cnt[j + 1] + 1;
  R.ci.resize(R.rp[n]);
  R.v.resize(R.rp[n]);
  // Scanning the rows of M in block order appends to each row of B in increasing
  // column order; the diagonal a is then inserted at its place (merged with -b M_jj).
  std::vector<int32_t> fill(R.rp.begin(), R.rp.end() - 1);
  for (int32_t& f : fill) ++f;  // the row's first slot stays free for the diagonal
  if (k >= 0) R.b.assign(n, 0.0);
  const bool exact_diagonal = std::isfinite(row_total);
  std::vector<double> exit(exact_diagonal ? static_cast<size_t>(n) : 0, 0.0);  // by block-ordered index
  for (int32_t I = 0; I < n; ++I) {
    const int32_t i = R.perm[I];
    for (int32_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
      const int32_t j = col[e];
      const double m = val[e] / divisor;
      if (exact_diagonal && j != i) exit[I] += m;
      if (j == k) continue;
      if (i == k) {
        R.b[R.inv[j]] = b * m;
        continue;
      }
      const int32_t J = R.inv[j];
      R.ci[fill[J]] = I;
      R.v[fill[J]++] = -b * m;
    }
  }
  int32_t out = 0;
  std::vector<int32_t> rp2(static_cast<size_t>(n) + 1, 0);
  for (int32_t j = 0; j < n; ++j) {
    // Compaction in place: the entries sit at [rp[j] + 1, fill[j]) and out <= rp[j],
    // so a write (at most one ahead, for the diagonal) never passes an unread entry.
    const int32_t lo = R.rp[j] + 1, hi = fill[j];
    const double diag_value = j == R.K ? 1.0 : a;  // the fixed state's row is the identity's
    // with the exact diagonal, a - b M_jj (whatever M_jj is stored) from the other entries
    const double exact = j == R.K ? 1.0 : exact_diagonal ? (a - b * row_total) + b * exit[j] : 0.0;
    bool diag = false;
    for (int32_t e = lo; e < hi; ++e) {
      const int32_t c = R.ci[e];
      const double x = R.v[e];
      if (!diag && c >= j) {
        diag = true;
        R.ci[out] = j;
        if (c == j) {
          R.v[out++] = exact_diagonal ? exact : diag_value + x;
          continue;
        }
        R.v[out++] = exact_diagonal ? exact : diag_value;
      }
      R.ci[out] = c;
      R.v[out++] = x;
    }
    if (!diag) {
      R.ci[out] = j;
      R.v[out++] = exact_diagonal ? exact : diag_value;
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
  int64_t band_entries = 0;
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
    band_entries += static_cast<int64_t>(B.size) * B.w();
  }
  if (max_band_entries > 0 && band_entries > max_band_entries)
    throw ModelError("blocks", cat("parameter 'blocks' must give diagonal blocks whose band storage (sum of size x "
                                   "bandwidth) is at most ", max_band_entries, " entries, got ", band_entries,
                                   ": use smaller blocks, or number the states of a block near each other"));
  for (int32_t bi = 0; bi < nb; ++bi) {
    check_interrupt();  // one block's band LU is O(size p q): a few per millisecond
    BandLU& B = R.blocks[bi];
    const int32_t lo = B.start, hi = B.start + B.size;
    B.a.assign(static_cast<size_t>(B.size) * B.w(), 0.0);
    for (int32_t j = lo; j < hi; ++j)
      for (int32_t e = R.lo_end[j]; e < R.up_begin[j]; ++e) B.at(j - lo, R.ci[e] - lo) += R.v[e];
    B.factor();
  }
  return R;
}

// ------------------------------------------------------------------ GMRES

namespace {
double dot(const std::vector<double>& a, const double* b, int32_t n) {
  double s = 0.0;
  const double* ap = a.data();
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > 50000) num_threads(loop_threads())
  for (int32_t i = 0; i < n; ++i) s += ap[i] * b[i];
  return s;
}
}  // namespace

Gmres::Gmres(int32_t n, int basis)
    : n_(n),
      m_(std::max(2, std::min<int>(basis, std::max<int32_t>(2, n)))),
      V_(static_cast<size_t>(m_) + 1),  // allocated as the basis grows (a solve that converges in
                                         // fewer steps than the basis size never touches the rest)
      H_(static_cast<size_t>(m_ + 1) * m_),
      Hraw_(static_cast<size_t>(m_ + 1) * m_),
      cs_(m_),
      sn_(m_),
      g_(m_ + 1),
      y_(m_),
      zsum_(m_),
      res_(n),
      w_(n),
      z_(n),
      xc_(n) {}

Gmres::Outcome Gmres::solve(const BlockSystem& B, const double* rhs, std::vector<double>& x, const Test& test,
                            const Limits& limits, const Recycled* recycled) {
  const int32_t n = n_;
  const int m = m_;
  auto& V = V_;
  auto& res = res_;
  auto& w = w_;
  auto& z = z_;
  auto& xc = xc_;
  auto h = [&](int i, int j) -> double& { return H_[static_cast<size_t>(i) * m + j]; };
  // the recycled space (empty: plain GMRES); E(l, j) = c_l . B z_j, removed from each new direction
  const int kr = recycled ? recycled->k() : 0;
  if (kr > 0) E_.assign(static_cast<size_t>(kr) * m, 0.0);
  auto e = [&](int l, int j) -> double& { return E_[static_cast<size_t>(l) * m + j]; };
  cycle_steps_ = 0;
  Outcome out;
  long& its = out.iterations;
  long& products = out.products;
  const double target = test.target;
  double fac = test.fac0, best = INFINITY;
  int no_progress = 0;
  std::vector<std::pair<long, double>> history;  // (steps, measure) at each restart (fail_fast)
  bool converged = false, stalled = false, budget_stop = false;
  double true_res = INFINITY, xsum = 0.0;
  auto budget_left = [&] { return limits.max_products <= 0 || products < limits.max_products; };
  // res = rhs - B xv; returns the caller's measure, sets xsum = sum xv (when scaled).
  auto residual_of = [&](const std::vector<double>& xv) {
    B.matvec(xv.data(), w.data());
    ++products;
    for (int32_t j = 0; j < n; ++j) res[j] = rhs[j] - w[j];
    if (test.scale) {
      long double s = 0.0L;
      for (int32_t j = 0; j < n; ++j) s += xv[j];
      xsum = static_cast<double>(s);
    }
    return test.measure(xv, res);
  };
  auto solve_y = [&](int steps) {  // H y = g (upper triangular after the rotations)
    for (int i = steps - 1; i >= 0; --i) {
      double s = g_[i];
      for (int l = i + 1; l < steps; ++l) s -= h(i, l) * y_[l];
      y_[i] = h(i, i) != 0.0 ? s / h(i, i) : 0.0;
    }
  };
  auto candidate = [&](int steps) {  // xc = x + M^{-1} V y
    solve_y(steps);
    std::fill(w.begin(), w.end(), 0.0);
    for (int i = 0; i < steps; ++i) {
      const double yi = y_[i];
      const double* vi = V[i].data();
      double* wp = w.data();
#pragma omp parallel for schedule(static) if (n > 50000) num_threads(loop_threads())
      for (int32_t l = 0; l < n; ++l) wp[l] += yi * vi[l];
    }
    B.precond(w.data(), z.data());
    for (int32_t l = 0; l < n; ++l) xc[l] = x[l] + z[l];
    for (int l = 0; l < kr; ++l) {  // minus U E y: what the deflation took from each direction
      double s = 0.0;
      for (int i = 0; i < steps; ++i) s += e(l, i) * y_[i];
      const double* ul = recycled->U[l].data();
      double* xp = xc.data();
#pragma omp parallel for schedule(static) if (n > 50000) num_threads(loop_threads())
      for (int32_t q = 0; q < n; ++q) xp[q] -= s * ul[q];
    }
    if (B.K >= 0) xc[B.K] = 0.0;
  };
  if (kr > 0 && limits.max_products <= 0) {
    // x takes the part of the residual the recycled space removes: x += U C^T r (then r is
    // orthogonal to C, and every cycle's residual stays so)
    residual_of(x);
    for (int l = 0; l < kr; ++l) {
      const double a = dot(recycled->C[l], res.data(), n);
      const double* ul = recycled->U[l].data();
      for (int32_t q = 0; q < n; ++q) x[q] += a * ul[q];
    }
    if (B.K >= 0) x[B.K] = 0.0;
  }
  if (budget_left())
    true_res = residual_of(x);
  else
    budget_stop = true;
  while (!converged && !budget_stop) {
    check_interrupt();
    if (!std::isfinite(true_res)) break;
    if (true_res <= target) {
      converged = true;
      break;
    }
    if (true_res < 0.99 * best) {
      best = true_res;
      no_progress = 0;
    } else if (++no_progress >= limits.stall_restarts) {
      stalled = true;
      break;
    }
    if (its >= limits.max_iter) break;
    if (limits.fail_fast) {
      history.push_back({its, true_res});
      const size_t h = history.size();
      if (h >= 4 && history[h - 4].second > 0.0 && true_res > 0.0) {
        // log-reduction per step over the last 3 restarts, projected to the target
        const double steps_done = static_cast<double>(its - history[h - 4].first);
        const double rate = steps_done > 0 ? std::log(history[h - 4].second / true_res) / steps_done : 0.0;
        const double need = rate > 0.0 ? std::log(true_res / target) / rate : INFINITY;
        if (need > 2.0 * static_cast<double>(limits.max_iter - its)) {
          stalled = true;
          out.projected = true;
          out.projected_steps = need;
          break;
        }
      }
    }
    if (!budget_left()) {
      budget_stop = true;
      break;
    }
    // one GMRES cycle on B M^{-1} u = res (res from the last residual_of)
    const double beta = std::sqrt(dot(res, res.data(), n));
    if (!(beta > 0.0)) {
      converged = true;
      break;
    }
    if (V[0].empty()) V[0].resize(static_cast<size_t>(n));
    for (int32_t j = 0; j < n; ++j) V[0][j] = res[j] / beta;
    std::fill(g_.begin(), g_.end(), 0.0);
    g_[0] = beta;
    const double xsum0 = xsum;
    int steps = 0;
    cycle_steps_ = 0;
    // a step needs one product, a candidate's residual another
    for (int j = 0; j < m && its < limits.max_iter &&
                    (limits.max_products <= 0 || products + 2 <= limits.max_products);
         ++j) {
      check_interrupt();  // a cycle of up to krylov_basis steps can take seconds on a large chain
      B.precond(V[j].data(), z.data());
      zsum_[j] = std::accumulate(z.begin(), z.end(), 0.0);
      if (j < keep_) {
        if (Z_.size() <= static_cast<size_t>(j)) Z_.resize(static_cast<size_t>(j) + 1);
        Z_[j] = z;
      }
      B.matvec(z.data(), w.data());
      ++products;
      ++its;
      for (int l = 0; l < kr; ++l) {  // w -= C C^T w (the deflated operator)
        const double el = e(l, j) = dot(recycled->C[l], w.data(), n);
        const double* cl = recycled->C[l].data();
        double* wp = w.data();
#pragma omp parallel for schedule(static) if (n > 50000) num_threads(loop_threads())
        for (int32_t q = 0; q < n; ++q) wp[q] -= el * cl[q];
      }
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
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n > 50000) num_threads(loop_threads())
        for (int32_t l = 0; l < n; ++l) {
          const double v = wp[l] - hij * vi[l];
          wp[l] = v;
          acc += vn ? vn[l] * v : v * v;
        }
        next = acc;
      }
      const double hnext = std::sqrt(next);
      for (int i = 0; i <= j; ++i) Hraw_[static_cast<size_t>(i) * m + j] = h(i, j);  // before the rotations
      Hraw_[static_cast<size_t>(j + 1) * m + j] = hnext;
      cycle_steps_ = j + 1;
      for (int i = 0; i < j; ++i) {  // previous rotations on column j
        const double a = h(i, j), bb = h(i + 1, j);
        h(i, j) = cs_[i] * a + sn_[i] * bb;
        h(i + 1, j) = -sn_[i] * a + cs_[i] * bb;
      }
      const double d = std::hypot(h(j, j), hnext);
      cs_[j] = d > 0 ? h(j, j) / d : 1.0;
      sn_[j] = d > 0 ? hnext / d : 0.0;
      h(j, j) = d;
      g_[j + 1] = -sn_[j] * g_[j];
      g_[j] = cs_[j] * g_[j];
      steps = j + 1;
      const bool happy = !(hnext > 1e-14 * beta);
      if (!happy) {
        if (V[j + 1].empty()) V[j + 1].resize(static_cast<size_t>(n));
        for (int32_t l = 0; l < n; ++l) V[j + 1][l] = w[l] / hnext;
      }
      // The test may scale with the candidate's sum, which the cycle changes (for the
      // stationary system by orders of magnitude when pi_k is small): its sum from zsum and y.
      double scale = 1.0;
      if (test.scale) {
        solve_y(steps);
        double sj = xsum0;
        for (int i = 0; i < steps; ++i) sj += y_[i] * zsum_[i];
        for (int l = 0; l < kr; ++l) {
          double s = 0.0;
          for (int i = 0; i < steps; ++i) s += e(l, i) * y_[i];
          sj -= s * recycled->usum[l];
        }
        scale = test.scale(sj);
      }
      const double stop = fac * target * scale;
      if (std::abs(g_[j + 1]) <= stop || happy) {
        // The estimate (2-norm) says done: check the true residual of the
        // candidate without discarding the basis; on failure ask for more.
        candidate(steps);
        const double cr = residual_of(xc);
        if (cr <= target || happy) {
          x.swap(xc);
          true_res = cr;
          converged = cr <= target;
          steps = -1;  // x is updated
          break;
        }
        // learn_ratio: the estimate level at which the measure would meet the target
        // is about target |g| / cr; ask for half of it (stop = fac target scale).
        const double g_abs = std::abs(g_[j + 1]);
        fac = test.learn_ratio && g_abs > 0.0 && cr > 0.0 && stop > 0.0
                  ? std::min(0.5 * fac, 0.5 * fac * (target * g_abs) / (cr * stop))
                  : 0.1 * fac;
      }
    }
    if (steps < 0) {
      if (converged) continue;
      if (!budget_left()) {
        budget_stop = true;
        break;
      }
      true_res = residual_of(x);
      continue;
    }
    if (steps == 0) {  // the product budget allows no step
      budget_stop = true;
      break;
    }
    candidate(steps);  // the basis is full (or a budget ran out): restart from the candidate
    x.swap(xc);
    if (test.at_restart) test.at_restart(x);
    if (!budget_left()) {
      true_res = INFINITY;  // not measured
      budget_stop = true;
      break;
    }
    true_res = residual_of(x);
  }
  out.measure = true_res;
  out.converged = converged;
  out.stalled = stalled;
  out.out_of_products = !converged && budget_stop;
  return out;
}

// ------------------------------------------------------------------ recycling

Recycled Recycled::make(const BlockSystem& B, std::vector<std::vector<double>> dirs) {
  Recycled r;
  const int32_t n = B.n;
  std::vector<double> c(static_cast<size_t>(n));
  for (auto& u : dirs) {
    if (static_cast<int32_t>(u.size()) != n) continue;
    if (B.K >= 0) u[B.K] = 0.0;
    B.matvec(u.data(), c.data());
    const double norm0 = std::sqrt(dot(c, c.data(), n));
    if (!(norm0 > 0.0) || !std::isfinite(norm0)) continue;
    for (int pass = 0; pass < 2; ++pass)
      for (int l = 0; l < r.k(); ++l) {
        const double a = dot(r.C[l], c.data(), n);
        const double *cl = r.C[l].data(), *ul = r.U[l].data();
        for (int32_t q = 0; q < n; ++q) c[q] -= a * cl[q], u[q] -= a * ul[q];
      }
    const double norm = std::sqrt(dot(c, c.data(), n));
    if (!(norm > 1e-8 * norm0)) continue;  // (nearly) in the span of the earlier ones
    for (int32_t q = 0; q < n; ++q) c[q] /= norm, u[q] /= norm;
    r.usum.push_back(std::accumulate(u.begin(), u.end(), 0.0));
    r.C.push_back(c);
    r.U.push_back(std::move(u));
  }
  return r;
}

std::vector<std::vector<double>> Gmres::harmonic_ritz(int k) const {
  const int j = std::min(cycle_steps_, std::min(keep_, static_cast<int>(Z_.size())));
  if (j < 2 || k <= 0) return {};
  const int m = m_;
  Eigen::MatrixXd H(j, j);
  for (int a = 0; a < j; ++a)
    for (int b = 0; b < j; ++b) H(a, b) = a <= b + 1 ? Hraw_[static_cast<size_t>(a) * m + b] : 0.0;
  const double hn = Hraw_[static_cast<size_t>(j) * m + j - 1];
  // harmonic Ritz values: eigenvalues of H + hn^2 H^{-T} e_j e_j^T
  Eigen::VectorXd ej = Eigen::VectorXd::Zero(j);
  ej(j - 1) = 1.0;
  const Eigen::FullPivLU<Eigen::MatrixXd> lu(H.transpose());
  if (!lu.isInvertible()) return {};
  const Eigen::VectorXd f = lu.solve(ej);
  if (!f.allFinite()) return {};
  Eigen::MatrixXd A = H;
  A.col(j - 1) += hn * hn * f;
  const Eigen::EigenSolver<Eigen::MatrixXd> es(A);
  if (es.info() != Eigen::Success) return {};
  std::vector<int> order(static_cast<size_t>(j));
  std::iota(order.begin(), order.end(), 0);
  const auto& ev = es.eigenvalues();
  std::sort(order.begin(), order.end(), [&ev](int a, int b) { return std::abs(ev(a)) < std::abs(ev(b)); });
  std::vector<Eigen::VectorXd> g;
  for (int i : order) {
    if (static_cast<int>(g.size()) >= k) break;
    const Eigen::VectorXcd v = es.eigenvectors().col(i);
    if (ev(i).imag() < 0.0) continue;  // the pair's other member gives the same two real vectors
    g.push_back(v.real());
    if (ev(i).imag() > 0.0 && static_cast<int>(g.size()) < k) g.push_back(v.imag());
  }
  // U = Z g, one pass over the kept directions
  const int32_t n = n_;
  std::vector<std::vector<double>> U(g.size(), std::vector<double>(static_cast<size_t>(n), 0.0));
  for (size_t c = 0; c < g.size(); ++c) {
    double* u = U[c].data();
    for (int i = 0; i < j; ++i) {
      const double gi = g[c](i);
      const double* zi = Z_[i].data();
#pragma omp parallel for schedule(static) if (n > 50000) num_threads(loop_threads())
      for (int32_t q = 0; q < n; ++q) u[q] += gi * zi[q];
    }
  }
  return U;
}

}  // namespace aqm::detail
