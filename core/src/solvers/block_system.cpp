// The block system, its block Gauss-Seidel preconditioner and GMRES
// (block_system.hpp says what each is for).
#include "solvers/block_system.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <type_traits>
#include <utility>

#include <Eigen/Dense>
#include <Eigen/SparseLU>
#include <amd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"
#include "aqmchain/operators/operator.hpp"
#include "aqmchain/threads.hpp"
#include "operators/gather_rows.hpp"

namespace aqm::detail {

// ------------------------------------------------------------------ band blocks

void BlockLU::factor(bool exact) {
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
  if (exact) return;
  f.assign(a.begin(), a.end());
  std::vector<double>().swap(a);
}

int64_t BlockLU::storage() const {
  return is_sparse() ? 2 * sparse.entries() + size : static_cast<int64_t>(size) * w();
}

namespace {
/// The calling thread's number in its parallel region (0 outside one).
int gs_thread() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/// acc[k] = the sum over threads t = 0 .. T - 1 of part[t A + k], k < A (a thread OpenMP did
/// not start left its zeros); acc may be part's own first A entries.
void add_in_thread_order(const std::vector<double>& part, int T, int A, double* acc) {
  for (int k = 0; k < A; ++k) {
    double a = 0.0;
    for (int t = 0; t < T; ++t) a += part[static_cast<size_t>(t) * A + k];
    acc[k] = a;
  }
}

/// band_solve for a tridiagonal block (p = q = 1, at least 2 rows).  A substitution row by row
/// is a chain of one multiply and one add a row, latency bound (a block is too long for the
/// core to overlap it with the next one), so each row is taken from the row two before it,
///   y_i = (x_i - l_i x_{i-1}) + (l_i l_{i-1}) y_{i-2},
///   x_i = (s_i - u_i s_{i+1}) + (u_i u_{i+1}) x_{i+2},  s_i = y_i / U_ii, u_i = U_i,i+1 / U_ii:
/// two interleaved chains of half the length, the other products off the chains.
template <class T>
void tridiagonal_solve(const T* base, int32_t size, const double* inv_diag, double* x) {
  // entry (i, i - 1) at base[3 i - 1], (i, i + 1) at base[3 i + 1]
  double l1 = static_cast<double>(base[2]);  // l_{i-1}
  double x1 = x[1];                          // x_{i-1} as given
  double y2 = x[0], y1 = x1 - l1 * y2;       // y_{i-2}, y_{i-1}
  x[1] = y1;
  for (int32_t i = 2; i < size; ++i) {
    const double l = static_cast<double>(base[3 * i - 1]), xi = x[i];
    const double y = (xi - l * x1) + (l * l1) * y2;
    x[i] = y;
    l1 = l, x1 = xi, y2 = y1, y1 = y;
  }
  const int32_t m = size - 1;
  double z2 = x[m] * inv_diag[m];                                      // x_{i+2}
  x[m] = z2;
  double s1 = x[m - 1] * inv_diag[m - 1];                              // s_{i+1}
  double u1 = static_cast<double>(base[3 * (m - 1) + 1]) * inv_diag[m - 1];  // u_{i+1}
  double z1 = s1 - u1 * z2;                                            // x_{i+1}
  x[m - 1] = z1;
  for (int32_t i = m - 2; i >= 0; --i) {
    const double d = inv_diag[i];
    const double u = static_cast<double>(base[3 * i + 1]) * d, si = x[i] * d;
    const double z = (si - u * s1) + (u * u1) * z2;
    x[i] = z;
    u1 = u, s1 = si, z2 = z1, z1 = z;
  }
}

/// x <- (LU)^{-1} x for the band factors `base` (= the factors' storage + p) of type T.
template <class T>
void band_solve(const T* base, int32_t size, int p, int q, int wd, const double* inv_diag, double* x) {
  // Row i of the band starts at a[i w]; its entry (i, j) is row[j] with row = a + i w + p - i.
  // Both sweeps take the entry next to the diagonal last, from a register: the chain
  // from one row to the next is then one multiply-add (and the scaling by 1 / U_ii),
  // and no load waits on the store just made.  (Scaling U's entries by 1 / U_ii instead, off
  // the chain, took SSMP K = 4's solve from 1.68-1.73 s to 1.87-1.89 s: a multiply more an entry.)
  if (p == 1 && q == 1 && size >= 2) {
    tridiagonal_solve(base, size, inv_diag, x);
    return;
  }
  double prev = 0.0;
  for (int32_t i = 0; i < size; ++i) {  // L y = x (unit diagonal)
    const T* row = base + static_cast<std::ptrdiff_t>(i) * wd - i;
    double s = x[i];
    for (int32_t j = std::max(0, i - p); j < i - 1; ++j) s -= static_cast<double>(row[j]) * x[j];
    if (i > 0 && p > 0) s -= static_cast<double>(row[i - 1]) * prev;
    x[i] = prev = s;
  }
  for (int32_t i = size - 1; i >= 0; --i) {  // U x = y
    const T* row = base + static_cast<std::ptrdiff_t>(i) * wd - i;
    double s = x[i];
    for (int32_t j = std::min(size - 1, i + q); j > i + 1; --j) s -= static_cast<double>(row[j]) * x[j];
    if (i + 1 < size && q > 0) s -= static_cast<double>(row[i + 1]) * prev;
    x[i] = prev = s * inv_diag[i];
  }
}

/// x <- C^{-1} x for the sparse factors of F with values lx, ux of type T.
template <class T>
void sparse_solve(const SparseLU& F, const T* lx, const T* ux, double* x) {
  thread_local std::vector<double> t;
  const int32_t size = F.size;
  t.resize(static_cast<size_t>(size));
  for (int32_t k = 0; k < size; ++k) t[k] = x[F.perm[k]];
  for (int32_t j = 0; j < size; ++j) {  // L y = x (unit diagonal), by columns
    const double tj = t[j];
    if (tj == 0.0) continue;
    for (int32_t e = F.cp[j]; e < F.cp[j + 1]; ++e) t[F.ri[e]] -= static_cast<double>(lx[e]) * tj;
  }
  for (int32_t j = size - 1; j >= 0; --j) {  // U x = y, row j of U at column j's pattern
    double s = t[j];
    for (int32_t e = F.cp[j]; e < F.cp[j + 1]; ++e) s -= static_cast<double>(ux[e]) * t[F.ri[e]];
    t[j] = s * F.inv_diag[j];
  }
  for (int32_t k = 0; k < size; ++k) x[F.perm[k]] = t[k];
}
}  // namespace

void BlockLU::solve(double* x) const {
  if (is_sparse()) {
    sparse.solve(x);
    return;
  }
  if (f.empty())
    band_solve(a.data() + p, size, p, q, w(), inv_diag.data(), x);
  else
    band_solve(f.data() + p, size, p, q, w(), inv_diag.data(), x);
}

// ------------------------------------------------------------------ sparse blocks

SparseLU SparseLU::symbolic(int32_t size, const std::vector<int32_t>& rp, const std::vector<int32_t>& ci) {
  SparseLU F;
  F.size = size;
  F.perm.resize(static_cast<size_t>(size));
  // AMD on the pattern of C + C^T (it symmetrises what it is given: C's rows as columns)
  const int status = amd_order(size, rp.data(), ci.data(), F.perm.data(), nullptr, nullptr);
  if (status != AMD_OK && status != AMD_OK_BUT_JUMBLED)
    throw SolverError(cat("AMD ordering of a diagonal block failed (status ", status, ")"));
  std::vector<int32_t> pinv(static_cast<size_t>(size));
  for (int32_t k = 0; k < size; ++k) pinv[F.perm[k]] = k;
  // the upper part of the symmetric pattern by columns, in the new order: upper[k] = {i < k}
  std::vector<int32_t> up_p(static_cast<size_t>(size) + 1, 0);
  for (int32_t r = 0; r < size; ++r)
    for (int32_t e = rp[r]; e < rp[r + 1]; ++e)
      if (ci[e] != r) ++up_p[std::max(pinv[r], pinv[ci[e]]) + 1];
  for (int32_t k = 0; k < size; ++k) up_p[k + 1] += up_p[k];
  std::vector<int32_t> up_i(static_cast<size_t>(up_p[size]));
  {
    std::vector<int32_t> fill(up_p.begin(), up_p.end() - 1);
    for (int32_t r = 0; r < size; ++r)
      for (int32_t e = rp[r]; e < rp[r + 1]; ++e)
        if (ci[e] != r) {
          const int32_t a = pinv[r], b = pinv[ci[e]];
          up_i[fill[std::max(a, b)]++] = std::min(a, b);
        }
  }
  // elimination tree (Liu's algorithm with path compression)
  std::vector<int32_t> parent(static_cast<size_t>(size), -1), ancestor(static_cast<size_t>(size), -1);
  for (int32_t k = 0; k < size; ++k)
    for (int32_t e = up_p[k]; e < up_p[k + 1]; ++e)
      for (int32_t i = up_i[e]; i != -1 && i < k;) {
        const int32_t next = ancestor[i];
        ancestor[i] = k;
        if (next == -1) parent[i] = k;
        i = next;
      }
  // row k of L: the nodes on the tree paths from upper[k] up to k (exclusive); counted by column,
  // then placed: a column's rows come out ascending since k increases
  std::vector<int32_t> mark(static_cast<size_t>(size), -1);
  auto row_pattern = [&](int32_t k, auto&& visit) {
    mark[k] = k;
    for (int32_t e = up_p[k]; e < up_p[k + 1]; ++e)
      for (int32_t i = up_i[e]; mark[i] != k; i = parent[i]) {
        mark[i] = k;
        visit(i);
      }
  };
  F.cp.assign(static_cast<size_t>(size) + 1, 0);
  for (int32_t k = 0; k < size; ++k) row_pattern(k, [&](int32_t j) { ++F.cp[j + 1]; });
  for (int32_t k = 0; k < size; ++k) F.cp[k + 1] += F.cp[k];
  F.ri.resize(static_cast<size_t>(F.cp[size]));
  std::fill(mark.begin(), mark.end(), -1);
  std::vector<int32_t> fill(F.cp.begin(), F.cp.end() - 1);
  for (int32_t k = 0; k < size; ++k) row_pattern(k, [&](int32_t j) { F.ri[fill[j]++] = k; });
  return F;
}

void SparseLU::factor(const std::vector<int32_t>& rp, const std::vector<int32_t>& ci, const std::vector<double>& v,
                      int32_t first_row, bool exact) {
  const int32_t n = size;
  std::vector<int32_t> pinv(static_cast<size_t>(n));
  for (int32_t k = 0; k < n; ++k) pinv[perm[k]] = k;
  // C(perm, perm) split: its lower part by rows (row k: columns j < k), its upper part by
  // columns (column k: rows i < k), its diagonal
  std::vector<int32_t> lo_p(static_cast<size_t>(n) + 1, 0), hi_p(static_cast<size_t>(n) + 1, 0);
  std::vector<double> diag(static_cast<size_t>(n), 0.0);
  for (int32_t r = 0; r < n; ++r)
    for (int32_t e = rp[r]; e < rp[r + 1]; ++e) {
      const int32_t a = pinv[r], b = pinv[ci[e]];
      if (a > b) ++lo_p[a + 1];
      else if (a < b) ++hi_p[b + 1];
    }
  for (int32_t k = 0; k < n; ++k) lo_p[k + 1] += lo_p[k], hi_p[k + 1] += hi_p[k];
  std::vector<int32_t> lo_j(static_cast<size_t>(lo_p[n])), hi_i(static_cast<size_t>(hi_p[n]));
  std::vector<double> lo_v(lo_j.size()), hi_v(hi_i.size());
  {
    std::vector<int32_t> fl(lo_p.begin(), lo_p.end() - 1), fh(hi_p.begin(), hi_p.end() - 1);
    for (int32_t r = 0; r < n; ++r)
      for (int32_t e = rp[r]; e < rp[r + 1]; ++e) {
        const int32_t a = pinv[r], b = pinv[ci[e]];
        if (a > b) lo_j[fl[a]] = b, lo_v[fl[a]++] = v[e];
        else if (a < b) hi_i[fh[b]] = a, hi_v[fh[b]++] = v[e];
        else diag[a] += v[e];
      }
  }
  // row k's pattern (the columns j < k with L_kj in the pattern) and where each entry lives:
  // the transpose of the column pattern, built once
  std::vector<int32_t> rowp(static_cast<size_t>(n) + 1, 0);
  for (int32_t e = 0; e < cp[n]; ++e) ++rowp[ri[e] + 1];
  for (int32_t k = 0; k < n; ++k) rowp[k + 1] += rowp[k];
  std::vector<int32_t> slot(ri.size()), colj(ri.size());
  {
    std::vector<int32_t> f(rowp.begin(), rowp.end() - 1);
    for (int32_t j = 0; j < n; ++j)
      for (int32_t e = cp[j]; e < cp[j + 1]; ++e) {  // row k's columns ascending
        colj[f[ri[e]]] = j;
        slot[f[ri[e]]++] = e;
      }
  }
  std::vector<double> dl(ri.size(), 0.0), du(ri.size(), 0.0);  // L and U in double while formed
  inv_diag.assign(static_cast<size_t>(n), 0.0);
  std::vector<double> wu(static_cast<size_t>(n), 0.0), wl(static_cast<size_t>(n), 0.0);
  // Up-looking: U's column k solves L u = C(0:k, k), L's row k solves l U = C(k, 0:k), both on
  // row k's pattern, ascending (a topological order of either triangular solve).
  for (int32_t k = 0; k < n; ++k) {
    for (int32_t e = hi_p[k]; e < hi_p[k + 1]; ++e) wu[hi_i[e]] += hi_v[e];
    for (int32_t e = lo_p[k]; e < lo_p[k + 1]; ++e) wl[lo_j[e]] += lo_v[e];
    double d = diag[k];
    for (int32_t t = rowp[k]; t < rowp[k + 1]; ++t) {
      // s is the entry (k, j) of column j; the column's entries before it are its rows < k
      const int32_t s = slot[t], j = colj[t];
      const double u = wu[j], l = wl[j] * inv_diag[j];
      wu[j] = wl[j] = 0.0;
      for (int32_t e = cp[j]; e < s; ++e) {
        wu[ri[e]] -= dl[e] * u;
        wl[ri[e]] -= du[e] * l;
      }
      dl[s] = l;
      du[s] = u;
      d -= l * u;
    }
    if (!(std::abs(d) > 0.0) || !std::isfinite(d))
      throw SolverError(cat("zero pivot in a diagonal block of the block Gauss-Seidel preconditioner (row ",
                            first_row + perm[k], ")"));
    inv_diag[k] = 1.0 / d;
  }
  if (exact) {
    lx.clear(), ux.clear();
    lxd = std::move(dl), uxd = std::move(du);
    return;
  }
  lxd.clear(), uxd.clear();
  lx.assign(dl.begin(), dl.end());
  ux.assign(du.begin(), du.end());
}

void SparseLU::solve(double* x) const {
  if (lx.empty() && !lxd.empty())
    sparse_solve(*this, lxd.data(), uxd.data(), x);
  else
    sparse_solve(*this, lx.data(), ux.data(), x);
}

// ------------------------------------------------------------------ the system

void BlockSystem::matvec(const double* x, double* y) const {
  CsrOperator(n, rp.data(), ci.data(), v.data()).apply_transpose(x, y);  // y = B x, a gather over rows
}

struct BlockSystem::CoarseLU {
  Eigen::SparseLU<Eigen::SparseMatrix<double>, Eigen::COLAMDOrdering<int>> lu;
};

bool BlockSystem::set_coarse(const std::vector<int32_t>& group_of, int32_t G, const std::vector<double>& z) {
  if (G < 1 || G > kMaxCoarseGroups) fail_param("G", cat("in [1, ", kMaxCoarseGroups, "] (coarse groups)"), G);
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
  // (B P)(i, J) = sum_{j in J} B_ij w_j and A_c(I, J) = sum_{i in I} (B P)(i, J): row i of B P
  // holds its groups in the order row i of B first meets them (a row meets few groups), each
  // summed in the row's order; first the rows' counts, then the rows, over the threads
  const int32_t* gp = c.group.data();
  const double* cw = c.w.data();
  auto bp_row = [this, gp, cw](int32_t i, int32_t* g, double* x) {  // returns the groups met
    int32_t m = 0;
    for (int32_t e = rp[i]; e < rp[i + 1]; ++e) {
      const int32_t J = gp[ci[e]];
      const double xe = v[e] * cw[ci[e]];
      int32_t at = 0;
      while (at < m && g[at] != J) ++at;
      if (at == m) {
        g[m] = J;
        if (x) x[m] = xe;
        ++m;
      } else if (x) {
        x[at] += xe;
      }
    }
    return m;
  };
  c.bp_rp.assign(static_cast<size_t>(n) + 1, 0);
  int32_t widest = 0;
  for (int32_t i = 0; i < n; ++i) widest = std::max(widest, rp[i + 1] - rp[i]);
  const int T = part_threads(n, 8);
  std::vector<int32_t> seen(static_cast<size_t>(T) * widest);  // each thread's groups of a row
#pragma omp parallel num_threads(T)
  {
    int32_t* g = seen.data() + static_cast<size_t>(gs_thread()) * widest;
#pragma omp for schedule(static)
    for (int32_t i = 0; i < n; ++i) c.bp_rp[i + 1] = bp_row(i, g, nullptr);
  }
  for (int32_t i = 0; i < n; ++i) c.bp_rp[i + 1] += c.bp_rp[i];
  c.bp_g.resize(static_cast<size_t>(c.bp_rp[n]));
  c.bp_v.resize(static_cast<size_t>(c.bp_rp[n]));
#pragma omp parallel for schedule(static) num_threads(T)
  for (int32_t i = 0; i < n; ++i) bp_row(i, c.bp_g.data() + c.bp_rp[i], c.bp_v.data() + c.bp_rp[i]);
  // A_c(I, J) = sum_{i in I} (B P)(i, J): each thread sums its static range of rows into a dense
  // G x G table of its own (G <= kMaxCoarseGroups: 8 MiB a table), the tables added in thread
  // order (A_c's last bits follow the thread count, as the dot products' do)
  std::vector<double> table(static_cast<size_t>(T) * G * G, 0.0);
#pragma omp parallel num_threads(T)
  {
    double* acc = table.data() + static_cast<size_t>(gs_thread()) * G * G;
#pragma omp for schedule(static)
    for (int32_t i = 0; i < n; ++i) {
      double* row = acc + static_cast<size_t>(gp[i]) * G;
      for (int32_t at = c.bp_rp[i]; at < c.bp_rp[i + 1]; ++at) row[c.bp_g[at]] += c.bp_v[at];
    }
  }
  add_in_thread_order(table, T, G * G, table.data());  // into the first table
  std::vector<Eigen::Triplet<double>> ac;
  for (int32_t I = 0; I < G; ++I)
    for (int32_t J = 0; J < G; ++J)
      if (const double a = table[static_cast<size_t>(I) * G + J]; a != 0.0) ac.emplace_back(I, J, a);
  std::vector<double>().swap(table);
  Eigen::SparseMatrix<double> Ac(G, G);
  Ac.setFromTriplets(ac.begin(), ac.end());
  Ac.makeCompressed();
  auto lu = std::make_shared<CoarseLU>();
  lu->lu.compute(Ac);
  if (lu->lu.info() != Eigen::Success) return false;  // A_c singular
  c.lu = std::move(lu);
  coarse = std::move(c);
  return true;
}

// ------------------------------------------------------------------ the block sweeps

namespace {

/// A barrier between two levels of a parallel sweep costs about as much time as this much sweep
/// work (work: a block's rows times its bandwidth + 1, plus its off-block entries): a barrier
/// of two running threads takes about 1 us, a unit of work about 2 ns (a sequential forward
/// sweep of the count-spacing chain of docs/performance.md: 16 ms for 6.9M units).
constexpr int64_t kBarrierWork = 500;
/// The rule: sweep by levels when two threads are predicted to make a sweep at least this much
/// faster.  The prediction, from the level schedule: a level takes the larger of half its work
/// and its largest block's work, plus one barrier; the sequential sweep takes the total work.
/// A plain RED chain (each block depends on the one before: as many levels as blocks) predicts
/// less than 1 and keeps the sequential loop; so does a chain of few blocks per level, or of
/// levels too small to pay for their barrier.
constexpr double kMinSweepSpeedup = 1.25;
/// The sweeps time themselves (two clock readings a sweep): a level sweep slower than the last
/// sequential one (another process holds a core, and a barrier waits for a thread that is not
/// running: up to a time slice per level) makes the next kSweepHold sweeps sequential, after
/// which levels are tried again (the hold doubling, up to kSweepHoldMax, while they keep losing);
/// while levels run, every kSweepRemeasure-th sweep is sequential to keep its time current.
/// Either way the result is the same.
constexpr int kSweepHold = 16;
constexpr int kSweepHoldMax = 1024;
constexpr int kSweepRemeasure = 32;
/// A level sweep that has taken kSweepBail times the last sequential sweep's seconds (checked
/// every kSweepBailLevels levels, one barrier more each) finishes its remaining levels on one
/// thread: a core taken in mid-sweep costs at most that, not a time slice per level.
constexpr double kSweepBail = 2.0;
constexpr int32_t kSweepBailLevels = 16;

// The work on one block, shared by the sequential loop and the level-parallel one (the same
// out-of-line function in both: the same operations in the same order, hence the same bits).

/// op(value, column) on row j's entries of L (Upper false) or U' (true), in entry order: from the
/// sweeps' copy of the part when there is one (BlockSystem::lrp, urp), else from B's row.
template <bool Upper, class Op>
inline void for_part(const BlockSystem& S, int32_t j, Op&& op) {
  const std::vector<int32_t>& prp = Upper ? S.urp : S.lrp;
  if (prp.empty()) {
    const int32_t begin = Upper ? S.up_begin[j] : S.rp[j], end = Upper ? S.up_end[j] : S.lo_end[j];
    for (int32_t e = begin; e < end; ++e) op(S.v[e], S.ci[e]);
  } else {
    const float* pv = Upper ? S.uv.data() : S.lv.data();
    const int32_t* pci = Upper ? S.uci.data() : S.lci.data();
    for (int32_t e = prp[j]; e < prp[j + 1]; ++e) op(static_cast<double>(pv[e]), pci[e]);
  }
}

/// z_J = D_J^{-1} (r_J - L_J z) (Upper false: the forward sweep's step on block J) or
/// D_J^{-1} (r_J - U'_J z) (true: the backward sweep's), keeping the right-hand side the block
/// is solved for in keep_J when Keep (r may be z: each row reads its own r_j first).
template <bool Upper, bool Keep = false>
[[gnu::noinline]] void solve_block(const BlockSystem& S, int32_t bi, const double* r, double* z, double* keep) {
  const BlockLU& B = S.blocks[bi];
  double* t = z + B.start;
  for (int32_t j = B.start; j < B.start + B.size; ++j) {
    double s = r[j];
    for_part<Upper>(S, j, [&s, z](double a, int32_t col) { s -= a * z[col]; });
    t[j - B.start] = s;
    if constexpr (Keep) keep[j] = s;
  }
  B.solve(t);
}

/// z_J -= D_J^{-1} U'_J z: the symmetric preconditioner's backward step on block J (t: scratch).
[[gnu::noinline]] void correct_block(const BlockSystem& S, int32_t bi, double* z, std::vector<double>& t) {
  const BlockLU& B = S.blocks[bi];
  t.assign(static_cast<size_t>(B.size), 0.0);
  bool any = false;
  for (int32_t j = B.start; j < B.start + B.size; ++j) {
    double s = 0.0;
    for_part<true>(S, j, [&s, z](double a, int32_t col) { s += a * z[col]; });
    t[j - B.start] = s;
    any = any || s != 0.0;
  }
  if (!any) return;
  B.solve(t.data());
  for (int32_t i = 0; i < B.size; ++i) z[B.start + i] -= t[i];
}

/// f(block, scratch) on every block: in block order (reverse: from the last) on one thread, or
/// level by level on the threads sweep_threads gives, the blocks of a level split evenly and a
/// barrier between levels.  No exception may leave f (an OpenMP region cannot pass it on): an
/// interruption is checked between applications (GMRES, every step), never inside a sweep.
template <class F>
void sweep(const BlockSystem& S, const BlockSystem::Levels& lv, bool reverse, F f) {
  int threads = S.sweep_threads(lv);
  const int32_t nb = static_cast<int32_t>(S.blocks.size());
  // the sweeps' own clock (kSweepHold): only where the rule chose levels
  const bool timed = S.schedule == BlockSystem::Schedule::Automatic && lv.parallel;
  if (timed && threads > 0) {
    if (lv.hold > 0) {
      --lv.hold;
      threads = 0;
    } else if (lv.seq_seconds <= 0.0 || ++lv.since_sequential >= kSweepRemeasure) {
      threads = 0;  // the sequential time first, and now and then again
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (threads <= 0) {
    std::vector<double> t;
    if (reverse)
      for (int32_t bi = nb - 1; bi >= 0; --bi) f(bi, t);
    else
      for (int32_t bi = 0; bi < nb; ++bi) f(bi, t);
  } else {
    if (threads > 1) ++lv.level_sweeps;
    const int32_t L = lv.count();
    const double limit = timed ? kSweepBail * lv.seq_seconds : INFINITY;
#pragma omp parallel num_threads(threads)
    {
      std::vector<double> t;
      bool stop = false;  // the same in every thread (copyprivate)
      int32_t l = 0;
      for (; l < L && !stop; ++l) {
#pragma omp for schedule(static)
        for (int32_t k = lv.ptr[l]; k < lv.ptr[l + 1]; ++k) f(lv.block[k], t);
        if (timed && (l + 1) % kSweepBailLevels == 0) {
#pragma omp single copyprivate(stop)
          stop = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit;
        }
      }
      if (stop) {  // the remaining levels in order on one thread
#pragma omp single
        for (int32_t m = l; m < L; ++m)
          for (int32_t k = lv.ptr[m]; k < lv.ptr[m + 1]; ++k) f(lv.block[k], t);
      }
    }
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  S.sweep_seconds += dt;
  if (!timed) return;
  if (threads <= 0) {
    lv.seq_seconds = dt;
    lv.since_sequential = 0;
  } else {
    lv.level_seconds = dt;
    if (dt > lv.seq_seconds) {
      lv.hold = std::max(kSweepHold, lv.next_hold);
      lv.next_hold = std::min(kSweepHoldMax, 2 * lv.hold);
    } else {
      lv.next_hold = kSweepHold;
    }
  }
}

/// The level schedule of one sweep from each block's level (counting sort) and its work.
void finish_levels(BlockSystem::Levels& lv, const std::vector<int64_t>& work) {
  const int32_t nb = static_cast<int32_t>(lv.level.size());
  int32_t L = 0;
  for (int32_t l : lv.level) L = std::max(L, l + 1);
  lv.ptr.assign(static_cast<size_t>(L) + 1, 0);
  for (int32_t l : lv.level) ++lv.ptr[l + 1];
  for (int32_t l = 0; l < L; ++l) lv.ptr[l + 1] += lv.ptr[l];
  std::vector<int32_t> fill(lv.ptr.begin(), lv.ptr.end() - 1);
  lv.block.resize(static_cast<size_t>(nb));
  for (int32_t bi = 0; bi < nb; ++bi) lv.block[fill[lv.level[bi]]++] = bi;
  lv.work = 0;
  double span = 0.0;  // predicted time of two threads, in entries
  for (int32_t l = 0; l < L; ++l) {
    int64_t sum = 0, largest = 0;
    for (int32_t k = lv.ptr[l]; k < lv.ptr[l + 1]; ++k) sum += work[lv.block[k]], largest = std::max(largest, work[lv.block[k]]);
    lv.work += sum;
    span += static_cast<double>(std::max(largest, (sum + 1) / 2) + kBarrierWork);
  }
  lv.speedup2 = span > 0.0 ? static_cast<double>(lv.work) / span : 1.0;
  lv.parallel = lv.speedup2 >= kMinSweepSpeedup;
}

}  // namespace

void BlockSystem::copy_rows(const int32_t* begin, const int32_t* end, double most, double least,
                            std::vector<int32_t>& prp, std::vector<int32_t>& pci, std::vector<float>& pv) const {
  int64_t count = 0;
  for (int32_t j = 0; j < n; ++j) count += end[j] - begin[j];
  const double c = static_cast<double>(count);
  if (count == 0 || (c > most && !(c >= least))) {  // not copied: the sweeps read B's rows
    std::vector<int32_t>().swap(prp);
    std::vector<int32_t>().swap(pci);
    std::vector<float>().swap(pv);
    return;
  }
  prp.assign(static_cast<size_t>(n) + 1, 0);
  for (int32_t j = 0; j < n; ++j) prp[j + 1] = prp[j] + (end[j] - begin[j]);
  pci.resize(static_cast<size_t>(prp[n]));
  pv.resize(static_cast<size_t>(prp[n]));
#pragma omp parallel for schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
  for (int32_t j = 0; j < n; ++j) {
    std::copy(ci.begin() + begin[j], ci.begin() + end[j], pci.begin() + prp[j]);
    for (int32_t e = begin[j]; e < end[j]; ++e) pv[prp[j] + (e - begin[j])] = static_cast<float>(v[e]);
  }
}

void BlockSystem::schedule_levels() {
  // U': a row's entries more than far_states after it are sorted last (columns ascend)
  up_end.assign(rp.begin() + 1, rp.end());
  if (far_states > 0 && wide_row > 0)
    for (int32_t j = 0; j < n; ++j) {
      int32_t e = up_begin[j];
      while (e < rp[j + 1] && ci[e] - j <= far_states) ++e;
      if (rp[j + 1] - e >= wide_row) up_end[j] = e;
    }
  const double most = copy_share * static_cast<double>(ci.size());
  const double least = copy_over_blocks > 0.0 ? copy_over_blocks * static_cast<double>(block_storage()) : INFINITY;
  copy_rows(rp.data(), lo_end.data(), most, least, lrp, lci, lv);
  copy_rows(up_begin.data(), up_end.data(), most, least, urp, uci, uv);
  const int32_t nb = static_cast<int32_t>(blocks.size());
  std::vector<int32_t> block_of(static_cast<size_t>(n));
  for (int32_t bi = 0; bi < nb; ++bi)
    std::fill(block_of.begin() + blocks[bi].start, block_of.begin() + blocks[bi].start + blocks[bi].size, bi);
  std::vector<int64_t> wf(static_cast<size_t>(nb)), wb(static_cast<size_t>(nb));
  forward_levels.level.assign(static_cast<size_t>(nb), 0);
  backward_levels.level.assign(static_cast<size_t>(nb), 0);
  for (int32_t bi = 0; bi < nb; ++bi) {  // in block order: every dependency's level is known
    const BlockLU& B = blocks[bi];
    int32_t lev = 0;
    int64_t w = static_cast<int64_t>(B.size) * (B.w() + 1);
    for (int32_t j = B.start; j < B.start + B.size; ++j) {
      w += lo_end[j] - rp[j];
      for (int32_t e = rp[j]; e < lo_end[j]; ++e) lev = std::max(lev, forward_levels.level[block_of[ci[e]]] + 1);
    }
    forward_levels.level[bi] = lev;
    wf[bi] = w;
  }
  for (int32_t bi = nb - 1; bi >= 0; --bi) {
    const BlockLU& B = blocks[bi];
    int32_t lev = 0;
    int64_t w = static_cast<int64_t>(B.size) * (B.w() + 1);
    for (int32_t j = B.start; j < B.start + B.size; ++j) {
      w += up_end[j] - up_begin[j];
      for (int32_t e = up_begin[j]; e < up_end[j]; ++e) lev = std::max(lev, backward_levels.level[block_of[ci[e]]] + 1);
    }
    backward_levels.level[bi] = lev;
    wb[bi] = w;
  }
  finish_levels(forward_levels, wf);
  finish_levels(backward_levels, wb);
}

int64_t BlockSystem::up_left_out() const {
  int64_t k = 0;
  for (int32_t j = 0; j < n; ++j) k += rp[j + 1] - up_end[j];
  return k;
}

int32_t BlockSystem::up_rows_cut() const {
  int32_t k = 0;
  for (int32_t j = 0; j < n; ++j) k += up_end[j] < rp[j + 1] ? 1 : 0;
  return k;
}

int BlockSystem::sweep_threads(const Levels& lv) const {
  switch (schedule) {
    case Schedule::Sequential:
      return 0;
    case Schedule::Levels:
      return std::max(1, num_threads());  // by levels even on one thread (tests)
    case Schedule::Automatic:
      break;
  }
  // AQMCHAIN_LEVEL_SWEEPS=0: always the sequential loop (to compare; the results are the same)
  static const bool off = [] {
    const char* e = std::getenv("AQMCHAIN_LEVEL_SWEEPS");
    return e && std::strcmp(e, "0") == 0;
  }();
  if (off || !lv.parallel) return 0;
  const int t = loop_threads();
  return t > 1 ? t : 0;  // one thread: the plain loop, no region, no barriers
}

void BlockSystem::precond(const double* r, double* z) const {
  ++precond_applications;
  const auto t0 = std::chrono::steady_clock::now();
  if (coarse.G > 0) {
    precond_two_level(r, z);
  } else {
    forward_sweep(r, z);  // (D + L) y = r
    // backward: z = y - D^{-1} U' z
    sweep(*this, backward_levels, true, [this, z](int32_t bi, std::vector<double>& t) { correct_block(*this, bi, z, t); });
  }
  precond_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BlockSystem::forward_sweep(const double* r, double* z) const {  // (D + L) z = r
  sweep(*this, forward_levels, false, [this, r, z](int32_t bi, std::vector<double>&) { solve_block<false>(*this, bi, r, z, nullptr); });
}

void BlockSystem::backward_sweep(const double* r, double* z) const {  // (D + U') z = r
  sweep(*this, backward_levels, true, [this, r, z](int32_t bi, std::vector<double>&) { solve_block<true>(*this, bi, r, z, nullptr); });
}

void BlockSystem::backward_sweep_keep(const double* r, double* z, double* s) const {
  sweep(*this, backward_levels, true,
        [this, r, z, s](int32_t bi, std::vector<double>&) { solve_block<true, true>(*this, bi, r, z, s); });
}

void BlockSystem::precond_two_level(const double* r, double* z) const {
  const int32_t G = coarse.G;
  std::vector<double>& s = scratch_s_;
  std::vector<double>& y = scratch_y_;
  s.resize(static_cast<size_t>(n));
  y.resize(static_cast<size_t>(n));
  // The coarse correction first, then the symmetric block Gauss-Seidel preconditioner on the
  // residual it leaves, backward sweep first:
  //   M^{-1} = C + (D + L)^{-1} D (D + U')^{-1} (I - B C),  C = P A_c^{-1} R.
  // Its error propagation, (I - M_f B) (I - M_b B) (I - C B), is a cyclic shift of that of a
  // forward sweep, the correction and a backward sweep (the same eigenvalues), but it takes no
  // product with U: after y1 = (D + U')^{-1} d, (D + L)^{-1} D y1 = (D + L)^{-1} (d - U' y1), and
  // d - U' y1 is what the backward sweep solved its blocks for (kept in s).  (The other order
  // formed the residual r - B z = -U z after its forward sweep: U is 61 % of B's entries on the
  // adaptive RED chain of docs/performance.md.)  D: the blocks as their factors multiply out.
  // e_c = A_c^{-1} R r, z = P e_c, and the residual d = r - B P e_c
  Eigen::VectorXd rc = Eigen::VectorXd::Zero(G);
  for (int32_t i = 0; i < n; ++i) rc[coarse.group[i]] += r[i];
  const Eigen::VectorXd ec = coarse.lu->lu.solve(rc);
  const int32_t* grp = coarse.group.data();
  const double* wp = coarse.w.data();
  const int32_t* brp = coarse.bp_rp.data();
  const int32_t* bg = coarse.bp_g.data();
  const double* bv = coarse.bp_v.data();
  const double* ecp = ec.data();
  double* yp = y.data();
#pragma omp parallel for schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
  for (int32_t i = 0; i < n; ++i) {
    z[i] = wp[i] * ecp[grp[i]];
    double t = 0.0;
    for (int32_t e = brp[i]; e < brp[i + 1]; ++e) t += bv[e] * ecp[bg[e]];
    yp[i] = r[i] - t;
  }
  // y1 = (D + U')^{-1} d in y (d read row by row before it is overwritten), then
  // y = (D + L)^{-1} (d - U' y1)
  backward_sweep_keep(y.data(), y.data(), s.data());
  forward_sweep(s.data(), y.data());
#pragma omp parallel for schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
  for (int32_t i = 0; i < n; ++i) z[i] += yp[i];
  if (K >= 0) z[K] = r[K];  // the fixed state's row is the identity
}

int BlockSystem::band_width() const {
  int w = 0;
  for (const auto& B : blocks)
    if (!B.is_sparse()) w = std::max(w, B.w());
  return w;
}

int64_t BlockSystem::block_storage() const {
  int64_t k = 0;
  for (const auto& B : blocks) k += B.storage();
  return k;
}

int32_t BlockSystem::sparse_blocks() const {
  int32_t k = 0;
  for (const auto& B : blocks) k += B.is_sparse() ? 1 : 0;
  return k;
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

namespace {
/// Blocks whose band (p + q + 1) is wider than this are offered the sparse LU (plain RED's
/// blocks have bands of 3 to 31: they stay banded without the ordering's cost).
constexpr int kSparseMinBand = 32;
/// The sparse LU is used when its storage times this is below the band's: the band solve
/// streams through contiguous rows, the sparse one gathers, so it must save clearly more.
constexpr double kSparseStorageRatio = 2.0;

/// f(0) .. f(nb - 1) over the library's threads (blocks of work that are independent), in
/// dynamic order; the first exception any of them throws is rethrown, an interruption is
/// honoured between blocks.
template <class F>
void parallel_blocks(int32_t nb, F&& f) {
  std::exception_ptr error;
  std::atomic<bool> failed{false};
#pragma omp parallel for schedule(dynamic) if (nb > 1) num_threads(loop_threads())
  for (int32_t bi = 0; bi < nb; ++bi) {
    if (failed.load(std::memory_order_relaxed) || interrupt_requested()) continue;
    try {
      f(bi);
    } catch (...) {
#pragma omp critical(aqm_parallel_blocks)
      if (!error) error = std::current_exception();
      failed.store(true, std::memory_order_relaxed);
    }
  }
  if (error) std::rethrow_exception(error);
  check_interrupt();
}

/// block_system: states of block order this far apart in M's numbering are a jump across M.
constexpr int32_t kNearStates = 64;
/// Rows of B up to this many entries are sorted by insertion, longer ones by std::sort.
constexpr int32_t kInsertionSortEntries = 32;

/// B's rows gathered from M's rows in M's order hold M's state numbers, increasing: each row's
/// columns taken to block order (inv) and sorted.  The columns of a row are distinct, so the
/// order is the one block order gives, on any thread count.  A row without M_jj has its first
/// slot free (has_diag).
void sort_to_block_order(BlockSystem& R, const std::vector<char>& has_diag, int T) {
  const int32_t* inv = R.inv.data();
#pragma omp parallel num_threads(T)
  {
    std::vector<std::pair<int32_t, double>> row;  // a long row's entries, sorted apart
#pragma omp for schedule(dynamic, 4096)
    for (int32_t j = 0; j < R.n; ++j) {
      const int32_t lo = R.rp[j] + (has_diag[j] ? 0 : 1), hi = R.rp[j + 1];
      if (hi - lo > kInsertionSortEntries) {  // the drop resets of the spacing count feed rows from thousands
        row.clear();
        for (int32_t e = lo; e < hi; ++e) row.emplace_back(inv[R.ci[e]], R.v[e]);
        std::sort(row.begin(), row.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
        for (int32_t e = lo; e < hi; ++e) R.ci[e] = row[e - lo].first, R.v[e] = row[e - lo].second;
        continue;
      }
      for (int32_t e = lo; e < hi; ++e) {
        const int32_t c = inv[R.ci[e]];
        const double x = R.v[e];
        int32_t f = e;
        for (; f > lo && R.ci[f - 1] > c; --f) R.ci[f] = R.ci[f - 1], R.v[f] = R.v[f - 1];
        R.ci[f] = c;
        R.v[f] = x;
      }
    }
  }
}
}  // namespace

BlockSystem block_system(int32_t n, const int32_t* rowptr, const int32_t* col, const double* val,
                         const std::vector<int32_t>& block_of, double a, double b, int32_t k,
                         int64_t max_band_entries, double row_total, double divisor, ReusedBlocks* reuse) {
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

  // Rows of B = columns of M, gathered from M's rows into the rows of B they feed, the fixed
  // state's row and column left out.  Where block order keeps M's rows near each other, M's
  // rows are read in block order (source row I is state perm[I]; gather_rows gives every row
  // of B in increasing column order); where it scatters them (most consecutive blocks' states
  // far apart in M: adaptive RED's blocks take every level of one avg and p_max), each read
  // jumped across M, and they are read in M's own order instead, each row's columns then taken
  // to block order and sorted: the same B.  A row of B without M_jj keeps a first slot free for
  // the diagonal a, put in its sorted place afterwards (where M_jj is stored, a merges with
  // -b M_jj).  Whether M_jj is stored comes with the counting pass, the row's exits (the exact
  // diagonal) and the right-hand side b M(k, .) with the filling one.
  const int T = part_threads(n, 8);
  const bool exact_diagonal = std::isfinite(row_total);
  std::vector<char> has_diag(static_cast<size_t>(n), 0);  // M_jj stored (row K: never)
  std::vector<double> exit(exact_diagonal ? static_cast<size_t>(n) : 0, 0.0);  // by block-ordered index
  if (k >= 0) R.b.assign(n, 0.0);
  const int32_t *perm = R.perm.data(), *inv = R.inv.data();
  double* rhs = R.b.data();
  char* diag = has_diag.data();
  double* exits = exit.data();
  int32_t far_steps = 0;  // consecutive states of block order more than kNearStates apart in M
  for (int32_t I = 1; I < n; ++I) far_steps += std::abs(perm[I] - perm[I - 1]) > kNearStates ? 1 : 0;
  const bool own_order = far_steps > n / 2;
  gather_rows(
      n, n,
      [perm, inv, rhs, diag, exits, rowptr, col, val, divisor, exact_diagonal, k, b, own_order](int32_t s, auto&& sink,
                                                                                              auto fill) {
        const int32_t i = own_order ? s : perm[s];  // M's row: in M's order or in block order
        const int32_t I = own_order ? inv[s] : s;
        for (int32_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
          const int32_t j = col[e];
          if constexpr (decltype(fill)::value) {
            const double m = val[e] / divisor;
            if (exact_diagonal && j != i) exits[I] += m;
            if (j == k) continue;
            if (i == k)
              rhs[inv[j]] = b * m;
            else
              sink(inv[j], [b, m] { return -b * m; });
          } else if (i != k && j != k) {
            sink(inv[j], 0);
            if (j == i) diag[I] = 1;
          }
        }
      },
      [&has_diag](int32_t J) { return has_diag[J] ? 0 : 1; }, R.rp, R.ci, R.v);
  if (own_order) sort_to_block_order(R, has_diag, T);
#pragma omp parallel for schedule(static) num_threads(T)
  for (int32_t j = 0; j < n; ++j) {
    const double diag_value = j == R.K ? 1.0 : a;  // the fixed state's row is the identity's
    // with the exact diagonal, a - b M_jj (whatever M_jj is stored) from the other entries
    const double exact = j == R.K ? 1.0 : exact_diagonal ? (a - b * row_total) + b * exit[j] : 0.0;
    int32_t e = R.rp[j];
    if (has_diag[j]) {
      while (R.ci[e] != j) ++e;
      R.v[e] = exact_diagonal ? exact : diag_value + R.v[e];
    } else {  // the entries left of the diagonal move one slot to the left, into the free one
      for (; e + 1 < R.rp[j + 1] && R.ci[e + 1] < j; ++e) R.ci[e] = R.ci[e + 1], R.v[e] = R.v[e + 1];
      R.ci[e] = j;
      R.v[e] = exact_diagonal ? exact : diag_value;
    }
  }

  // split rows at their block, bandwidths, band factorisations
  R.lo_end.resize(n);
  R.up_begin.resize(n);
  const int32_t nb = static_cast<int32_t>(R.bstart.size()) - 1;
  R.blocks.resize(nb);
  for (int32_t bi = 0; bi < nb; ++bi) {
    BlockLU& B = R.blocks[bi];
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
  }
  // Each block's factors: the band LU, or the sparse one where the band is wide and its
  // sparse factors take a fraction of its storage (the blocks of two-class chains, whose
  // class contents widen the band to about 6 N entries with 8 per row filled).  The blocks
  // are independent: first each wide block's ordering and pattern, then (the storage
  // checked) the factorisations, over the threads.
  auto block_csr = [&R](const BlockLU& B, std::vector<int32_t>& brp, std::vector<int32_t>& bci,
                        std::vector<double>* bv) {
    const int32_t lo = B.start, hi = B.start + B.size;
    brp.assign(1, 0);
    bci.clear();
    if (bv) bv->clear();
    for (int32_t j = lo; j < hi; ++j) {
      for (int32_t e = R.lo_end[j]; e < R.up_begin[j]; ++e) {
        bci.push_back(R.ci[e] - lo);
        if (bv) bv->push_back(R.v[e]);
      }
      brp.push_back(static_cast<int32_t>(bci.size()));
    }
  };
  // blocks of an earlier system with another fixed state: those containing neither are the same
  std::vector<char> taken(static_cast<size_t>(nb), 0);
  if (reuse) {
    reuse->taken = 0;
    if (reuse->order == hash_indices(R.perm) && reuse->blocks.size() == static_cast<size_t>(nb))
      for (int32_t bi = 0; bi < nb; ++bi) {
        BlockLU& old = reuse->blocks[bi];
        const BlockLU& B = R.blocks[bi];
        auto inside = [&B](int32_t s) { return s >= B.start && s < B.start + B.size; };
        if (old.start != B.start || old.size != B.size || old.p != B.p || old.q != B.q || inside(R.K) ||
            inside(reuse->K))
          continue;
        R.blocks[bi] = std::move(old);
        taken[bi] = 1;
        ++reuse->taken;
      }
    reuse->blocks.clear();
    reuse->blocks.shrink_to_fit();
  }
  std::vector<int64_t> storage(static_cast<size_t>(nb), 0);
  parallel_blocks(nb, [&](int32_t bi) {
    BlockLU& B = R.blocks[bi];
    storage[bi] = static_cast<int64_t>(B.size) * B.w();
    if (taken[bi]) {
      storage[bi] = B.storage();
      return;
    }
    if (B.w() <= kSparseMinBand) return;
    std::vector<int32_t> brp, bci;
    block_csr(B, brp, bci, nullptr);
    SparseLU F = SparseLU::symbolic(B.size, brp, bci);
    const int64_t sparse = 2 * F.entries() + B.size;
    if (kSparseStorageRatio * static_cast<double>(sparse) < static_cast<double>(storage[bi])) {
      storage[bi] = sparse;
      B.sparse = std::move(F);
    }
  });
  const int64_t stored = std::accumulate(storage.begin(), storage.end(), int64_t{0});
  if (max_band_entries > 0 && stored > max_band_entries)
    throw ModelError("blocks", cat("parameter 'blocks' must give diagonal blocks whose factors (band: size x "
                                   "bandwidth; sparse: twice the factor's entries + size) take at most ",
                                   max_band_entries, " numbers, got ", stored,
                                   ": use smaller blocks, or number the states of a block near each other"));
  // one block: the preconditioner is the exact solve, its factors kept in double
  const bool exact = nb == 1;
  parallel_blocks(nb, [&](int32_t bi) {  // one block's LU: a few per millisecond
    if (taken[bi]) return;
    BlockLU& B = R.blocks[bi];
    const int32_t lo = B.start, hi = B.start + B.size;
    if (B.is_sparse()) {
      std::vector<int32_t> brp, bci;
      std::vector<double> bv;
      block_csr(B, brp, bci, &bv);
      B.sparse.factor(brp, bci, bv, lo, exact);
      return;
    }
    B.a.assign(static_cast<size_t>(B.size) * B.w(), 0.0);
    for (int32_t j = lo; j < hi; ++j)
      for (int32_t e = R.lo_end[j]; e < R.up_begin[j]; ++e) B.at(j - lo, R.ci[e] - lo) += R.v[e];
    B.factor(exact);
  });
  R.schedule_levels();
  return R;
}

// ------------------------------------------------------------------ GMRES

namespace {
double dot(const std::vector<double>& a, const double* b, int32_t n) {
  double s = 0.0;
  const double* ap = a.data();
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
  for (int32_t i = 0; i < n; ++i) s += ap[i] * b[i];
  return s;
}

/// Block modified Gram-Schmidt (Jalby & Philippe, "Stability analysis and improvement of the
/// block Gram-Schmidt algorithm", 1991) with blocks of kGsBlock basis vectors: a block's
/// coefficients are taken from the same w (the block's vectors are orthonormal to each other,
/// so this differs from modified Gram-Schmidt by the basis's loss of orthogonality only), and
/// each pass over w subtracts one block and forms the next block's coefficients (or w's squared
/// norm after the last): 8 (2 B) + 16 bytes a state for B projections, against 32 B for the
/// fused projection-at-a-time loop.  B and NB (the next block's size, 0: the norm) are
/// template parameters so that the inner loops unroll.
constexpr int kGsBlock = 4;

/// Threads for a pass over n entries whose partial sums are added in thread order
/// (add_in_thread_order: the same sums whatever thread ends first).
int gs_threads(int32_t n) { return n > kParallelLoopItems ? std::max(1, loop_threads()) : 1; }

template <int B, int NB>
void gs_pass(double* w, const double* const* cur, const double* h, const double* const* nxt, double* acc,
             int32_t n) {
  constexpr int A = NB > 0 ? NB : 1;  // the next block's coefficients, or w's squared norm
  const int T = gs_threads(n);
  std::vector<double> part(static_cast<size_t>(T) * A, 0.0);
#pragma omp parallel num_threads(T)
  {
    double la[A] = {};
#pragma omp for schedule(static)
    for (int32_t l = 0; l < n; ++l) {
      double v = w[l];
      for (int k = 0; k < B; ++k) v -= h[k] * cur[k][l];
      if constexpr (B > 0) w[l] = v;  // B = 0: the first block's coefficients only
      if constexpr (NB > 0) {
        for (int k = 0; k < NB; ++k) la[k] += nxt[k][l] * v;
      } else {
        la[0] += v * v;
      }
    }
    const int t = gs_thread();
    for (int k = 0; k < A; ++k) part[static_cast<size_t>(t) * A + k] = la[k];
  }
  add_in_thread_order(part, T, A, acc);
}

/// Calls f(std::integral_constant<int, k>) for the runtime k in [0, K].
template <int K, class F>
void with_size(int k, F&& f) {
  if constexpr (K > 0) {
    if (k < K) return with_size<K - 1>(k, std::forward<F>(f));
  }
  f(std::integral_constant<int, K>{});
}

/// The sum of x[0..n) as partial sums of the threads' static ranges, added in thread order.
double sum_in_thread_order(const double* x, int32_t n) {
  const int T = gs_threads(n);
  std::vector<double> part(static_cast<size_t>(T), 0.0);
#pragma omp parallel num_threads(T)
  {
    double s = 0.0;
#pragma omp for schedule(static)
    for (int32_t l = 0; l < n; ++l) s += x[l];
    part[static_cast<size_t>(gs_thread())] = s;
  }
  double s = 0.0;
  add_in_thread_order(part, T, 1, &s);
  return s;
}

/// w = sum_i y_i V_i (i < steps), kGsBlock vectors a pass; each entry's terms are added in the
/// order of i, as one pass per vector would.
void combine(const double* const* V, const double* y, int steps, double* w, int32_t n) {
  if (steps <= 0) {
    std::fill(w, w + n, 0.0);
    return;
  }
  for (int b0 = 0; b0 < steps; b0 += kGsBlock) {
    const int bl = std::min(kGsBlock, steps - b0);
    const double* v[kGsBlock] = {};
    double c[kGsBlock] = {};
    for (int k = 0; k < bl; ++k) v[k] = V[b0 + k], c[k] = y[b0 + k];
    const bool first = b0 == 0;
#pragma omp parallel for schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
    for (int32_t l = 0; l < n; ++l) {
      double s = first ? 0.0 : w[l];
      for (int k = 0; k < bl; ++k) s += c[k] * v[k][l];
      w[l] = s;
    }
  }
}

}  // namespace

void Gmres::new_basis_vector(int j, const double* w, double norm) {
  const int32_t n = n_;
  if (!V_[static_cast<size_t>(j)]) {
    V_[static_cast<size_t>(j)].reset(new double[static_cast<size_t>(n)]);  // written whole below
    Vp_[static_cast<size_t>(j)] = V_[static_cast<size_t>(j)].get();
  }
  double* v = V_[static_cast<size_t>(j)].get();
#pragma omp parallel for schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
  for (int32_t l = 0; l < n; ++l) v[l] = w[l] / norm;
}

double block_mgs(const std::vector<std::vector<double>>& V, int count, double* w, double* h, int32_t n) {
  if (count < 1 || static_cast<size_t>(count) > V.size())
    fail_param("count", detail::cat("in [1, ", V.size(), "] (the basis vectors)"), count);
  std::vector<const double*> cols(static_cast<size_t>(count));
  for (int k = 0; k < count; ++k) cols[static_cast<size_t>(k)] = V[static_cast<size_t>(k)].data();
  return block_mgs(cols.data(), count, w, h, n);
}

double block_mgs(const double* const* V, int count, double* w, double* h, int32_t n) {
  if (count < 1) fail_param("count", ">= 1 basis vectors", count);
  const double* cur[kGsBlock];
  const double* nxt[kGsBlock];
  int b0 = 0, bl = std::min(kGsBlock, count);
  for (int k = 0; k < bl; ++k) nxt[k] = V[static_cast<size_t>(k)];
  with_size<kGsBlock>(bl, [&](auto B) { gs_pass<0, decltype(B)::value>(w, cur, nullptr, nxt, h, n); });
  for (;;) {
    const int nb0 = b0 + bl, nbl = std::min(kGsBlock, count - nb0);
    for (int k = 0; k < bl; ++k) cur[k] = V[static_cast<size_t>(b0 + k)];
    for (int k = 0; k < nbl; ++k) nxt[k] = V[static_cast<size_t>(nb0 + k)];
    double norm2 = 0.0;
    double* acc = nbl > 0 ? h + nb0 : &norm2;
    with_size<kGsBlock>(bl, [&](auto B) {
      with_size<kGsBlock>(nbl, [&](auto NB) {
        if constexpr (decltype(B)::value > 0) gs_pass<decltype(B)::value, decltype(NB)::value>(w, cur, h + b0, nxt, acc, n);
      });
    });
    if (nbl == 0) return norm2;
    b0 = nb0;
    bl = nbl;
  }
}

Gmres::Gmres(int32_t n, int basis)
    : n_(n),
      m_(std::max(2, std::min<int>(basis, std::max<int32_t>(2, n)))),
      V_(static_cast<size_t>(m_) + 1),  // allocated as the basis grows (a solve that converges in
                                         // fewer steps than the basis size never touches the rest)
      Vp_(static_cast<size_t>(m_) + 1, nullptr),
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
    {
      const double* wp = w.data();
      double* rp = res.data();
#pragma omp parallel for schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
      for (int32_t j = 0; j < n; ++j) rp[j] = rhs[j] - wp[j];
    }
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
    combine(Vp_.data(), y_.data(), steps, w.data(), n);
    B.precond(w.data(), z.data());
    {
      const double *xp = x.data(), *zp = z.data();
      double* cp = xc.data();
#pragma omp parallel for schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
      for (int32_t l = 0; l < n; ++l) cp[l] = xp[l] + zp[l];
    }
    for (int l = 0; l < kr; ++l) {  // minus U E y: what the deflation took from each direction
      double s = 0.0;
      for (int i = 0; i < steps; ++i) s += e(l, i) * y_[i];
      const double* ul = recycled->U[l].data();
      double* xp = xc.data();
#pragma omp parallel for schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
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
    new_basis_vector(0, res.data(), beta);
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
      B.precond(V_[static_cast<size_t>(j)].get(), z.data());
      zsum_[j] = sum_in_thread_order(z.data(), n);
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
#pragma omp parallel for schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
        for (int32_t q = 0; q < n; ++q) wp[q] -= el * cl[q];
      }
      // block modified Gram-Schmidt (block_mgs: one pass over w per kGsBlock basis vectors)
      hcol_.resize(static_cast<size_t>(j) + 1);
      const double next = block_mgs(Vp_.data(), j + 1, w.data(), hcol_.data(), n);
      for (int i = 0; i <= j; ++i) h(i, j) = hcol_[i];
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
      if (!happy) new_basis_vector(j + 1, w.data(), hnext);
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
#pragma omp parallel for schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
      for (int32_t q = 0; q < n; ++q) u[q] += gi * zi[q];
    }
  }
  return U;
}

}  // namespace aqm::detail
