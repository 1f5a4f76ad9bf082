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
// coarse pattern and the fine entries summed by coarse nonzero and source state are
// computed once; a cycle only recomputes values (one pass over those sums).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "aqmchain/interrupt.hpp"
#include "aqmchain/solvers/stationary.hpp"
#include "aqmchain/threads.hpp"
#include "solvers/multilevel.hpp"
#include "solvers/stationary_common.hpp"

namespace aqm::detail {

namespace {

/// Levels below level 0 with fewer states take one coarse correction whatever cycle_gamma
/// says (see cycle).
constexpr int32_t kWCycleStates = 20000;

/// The coarsest level is solved exactly (GTH, dense, about n^3 / 3 operations a visit, the
/// aggregated chain changing with every cycle) up to max(2 x coarse_size, this many) states.
constexpr int32_t kDenseCoarsestStates = 1000;
/// A coarsening that stalls above that size (the drop-spacing chains on fine grids: the count
/// or wait component, kept apart, leaves 1,000-2,400 states), up to kSweptCoarsestStates,
/// leaves a coarsest level solved by this many Gauss-Seidel sweeps from its restricted vector
/// instead.  The cycle's fixed point stays the stationary vector (its restriction is the
/// aggregated chain's stationary vector, which the sweeps keep).  Measured on GEO RED with
/// count spacing (2.0M states, coarsest 1,236): 5, 20 and 100 sweeps each took 15 cycles, as
/// the exact solve did with a larger coarse_size; on wait spacing (4.0M, coarsest 2,422) 15
/// cycles.
constexpr int kCoarsestSweeps = 20;
/// The largest stalled coarsest level swept (a larger one is refused as before: a few sweeps
/// a visit would leave its own slow modes to the cycles).
constexpr int32_t kSweptCoarsestStates = 10 * kDenseCoarsestStates;

struct Level {
  int32_t n = 0;
  std::vector<int32_t> rp, ci;  // CSR of P^T
  std::vector<double> v, exit;  // exit: the probability of leaving each state (exit_probabilities)
  std::vector<std::vector<int32_t>> coord;  // lattice coordinates, one vector per state component
  std::vector<char> halve;                  // per component: merged in pairs (1) or kept apart (0)
  // link to the next (coarser) level
  std::vector<int32_t> agg;     // fine state -> coarse state
  std::vector<int32_t> size;    // members per coarse state
  std::vector<int32_t> mp, mem;  // members of each coarse state in CSR form (increasing fine index)
  std::vector<int32_t> pos;     // fine nonzero -> coarse nonzero (a level whose values change)
  // level 0: Q(i, J) = sum_{j in J} P_ij by coarse nonzero e: entries qp[e] .. qe[e] - 1 of
  // qi (the source i) and qv (the value); qi and qv hold room for every fine nonzero, and
  // the room left unused is never touched (on Linux a large allocation is mapped page by
  // page as it is first written, so untouched room is address space, not resident memory)
  bool merged = false;  // Q kept (level 0) rather than pos
  std::vector<int32_t> qp, qe;
  std::unique_ptr<int32_t[]> qi;
  std::unique_ptr<double[]> qv;
  std::vector<double> xs, wgt;  // aggregate sums and disaggregation weights
  int coarsest_sweeps = 0;       // the coarsest level: 0 = solved exactly (GTH), else these sweeps
};

void find_exits(Level& L) { L.exit = exit_probabilities(L.n, L.rp.data(), L.ci.data(), L.v.data()); }

/// Threads for a pass over a level of n states (one up to kParallelLoopItems).
int level_threads(int32_t n) { return n > kParallelLoopItems ? loop_threads() : 1; }

/// The coarse pattern of a level whose values change (see coarsen): c.ci, c.rp (rows J in
/// order, each one's columns in the order first met) and f.pos.
void map_entries(Level& f, Level& c) {
  std::vector<int32_t> mark(c.n, -1);
  f.pos.assign(f.ci.size(), -1);
  for (int32_t J = 0; J < c.n; ++J) {
    const int32_t start = static_cast<int32_t>(c.ci.size());
    for (int32_t k = f.mp[J]; k < f.mp[J + 1]; ++k) {
      const int32_t j = f.mem[k];
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
}

/// The coarse pattern of level 0 (the same as map_entries gives) and Q (see coarsen), for
/// the coarse rows J0 .. J1 - 1 with offsets from 0: cols (coarse columns, row after row),
/// row_end (each row's end in cols), q_end (each coarse nonzero's end in qi, qv).  Written
/// into the arrays given, which have room for every entry of the members' rows (upto[J]:
/// the members' entries of the coarse rows before J).
struct MergedRows {
  int32_t* cols;
  int32_t* qi;
  double* qv;
  std::vector<int32_t> row_end, q_end;
  int32_t ncols = 0;
};

void merge_rows(const Level& f, const std::vector<int64_t>& upto, int32_t J0, int32_t J1, MergedRows& out) {
  // mark: a coarse column's place in cols if met in the current row; seen: a fine source's
  // merged entry if met in the current row (both compared with the row's first place)
  std::vector<int32_t> mark(f.size.size(), -1), seen(static_cast<size_t>(f.n), -1);
  std::vector<int32_t> li, ls, cnt;  // the row's merged entries: source, coarse column in the row
  std::vector<double> lv;
  out.row_end.reserve(static_cast<size_t>(J1 - J0));
  int32_t ncols = 0, base = 0;
  for (int32_t J = J0; J < J1; ++J) {
    const int32_t start = ncols;
    const size_t most = static_cast<size_t>(upto[J + 1] - upto[J]);
    if (li.size() < most) {
      li.resize(most);
      ls.resize(most);
      lv.resize(most);
    }
    int32_t m = 0;
    for (int32_t k = f.mp[J]; k < f.mp[J + 1]; ++k) {
      const int32_t j = f.mem[k];
      for (int32_t e = f.rp[j]; e < f.rp[j + 1]; ++e) {
        const int32_t i = f.ci[e];
        const int32_t I = f.agg[i];
        if (mark[I] < start) {
          mark[I] = ncols;
          out.cols[ncols++] = I;
        }
        if (seen[i] < base) {
          seen[i] = base + m;
          li[m] = i;
          ls[m] = mark[I] - start;
          lv[m++] = f.v[e];
        } else {
          lv[seen[i] - base] += f.v[e];
        }
      }
    }
    out.row_end.push_back(ncols);
    // the row's merged entries by coarse column (a counting sort: first met first)
    const int32_t slots = ncols - start;
    cnt.assign(static_cast<size_t>(slots) + 1, 0);
    for (int32_t u = 0; u < m; ++u) ++cnt[ls[u] + 1];
    for (int32_t t = 0; t < slots; ++t) {
      cnt[t + 1] += cnt[t];
      out.q_end.push_back(base + cnt[t + 1]);
    }
    for (int32_t u = 0; u < m; ++u) {
      const int32_t q = base + cnt[ls[u]]++;
      out.qi[q] = li[u];
      out.qv[q] = lv[u];
    }
    base += m;
  }
  out.ncols = ncols;
}

/// merge_rows over the threads, each on a range of coarse rows with about equal entries
/// (the results are the same on any thread count), joined into c.ci, c.rp, f.qp, f.qi and
/// f.qv.  Range t writes Q from the place of its rows' first fine entry on: at most as many
/// merged entries as fine ones, so the ranges cannot overlap and nothing is copied (the room
/// a range leaves unused is never touched; see Level::qi).
void merge_entries(Level& f, Level& c) {
  const int64_t nnz = static_cast<int64_t>(f.ci.size());
  const int T = std::max(1, std::min(level_threads(f.n), c.n));
  std::vector<int64_t> upto(static_cast<size_t>(c.n) + 1, 0);  // fine entries of the rows before
  for (int32_t J = 0; J < c.n; ++J) {
    int64_t e = 0;
    for (int32_t k = f.mp[J]; k < f.mp[J + 1]; ++k) e += f.rp[f.mem[k] + 1] - f.rp[f.mem[k]];
    upto[J + 1] = upto[J] + e;
  }
  std::vector<int32_t> first(T + 1, c.n);
  for (int t = 1; t < T; ++t)
    first[t] = static_cast<int32_t>(std::lower_bound(upto.begin(), upto.end(), nnz * t / T) - upto.begin());
  first[0] = 0;
  std::unique_ptr<int32_t[]> cols(new int32_t[nnz + 1]);  // not initialised
  f.qi.reset(new int32_t[nnz + 1]);
  f.qv.reset(new double[nnz + 1]);
  std::vector<MergedRows> part(T);
  for (int t = 0; t < T; ++t) {
    const int64_t at = upto[first[t]];
    part[t].cols = cols.get() + at;
    part[t].qi = f.qi.get() + at;
    part[t].qv = f.qv.get() + at;
  }
#pragma omp parallel for schedule(static, 1) num_threads(T)
  for (int t = 0; t < T; ++t) merge_rows(f, upto, first[t], first[t + 1], part[t]);
  int32_t ncols = 0;
  f.qp.clear();
  f.qe.clear();
  c.ci.resize(0);
  for (int t = 0; t < T; ++t) {
    const MergedRows& p = part[t];
    const int32_t at = static_cast<int32_t>(upto[first[t]]);
    for (int32_t J = first[t]; J < first[t + 1]; ++J) c.rp[J + 1] = ncols + p.row_end[J - first[t]];
    c.ci.insert(c.ci.end(), p.cols, p.cols + p.ncols);
    f.qp.reserve(f.qp.size() + p.q_end.size());
    f.qe.reserve(f.qe.size() + p.q_end.size());
    int32_t begin = at;  // the range's first nonzero starts where the range does
    for (int32_t q : p.q_end) {
      f.qp.push_back(begin);
      f.qe.push_back(begin = at + q);
    }
    ncols += p.ncols;
  }
}

/// Whether coarsening a level of n states to one of `next` states stalls (the loop of
/// solve_multilevel stops at the level of n states).
bool coarsening_stalls(int32_t next, int32_t n) { return next * 1.3 > n; }

/// State i's coordinate d on the next coarser level: halved where the component is coarsened.
int32_t coarse_coordinate(const std::vector<std::vector<int32_t>>& coord, const std::vector<char>& halve, size_t d,
                          int32_t i) {
  return halve[d] ? coord[d][i] / 2 : coord[d][i];
}

/// The aggregate keys of a level of n states: each state's coarse coordinates in mixed radix
/// (`radix` receives each component's largest coarse coordinate + 1), so that two states share
/// an aggregate exactly when their keys agree, and the keys sort as the coarse coordinates do
/// lexicographically.  coarsen numbers its aggregates by them, level_sizes counts them.
std::vector<int64_t> aggregate_keys(const std::vector<std::vector<int32_t>>& coord, const std::vector<char>& halve,
                                    int32_t n, std::vector<int64_t>& radix) {
  const size_t D = coord.size();
  radix.assign(D, 1);
  for (size_t d = 0; d < D; ++d)
    for (int32_t i = 0; i < n; ++i) radix[d] = std::max<int64_t>(radix[d], coarse_coordinate(coord, halve, d, i) + 1);
  std::vector<int64_t> key(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    int64_t k = 0;
    for (size_t d = 0; d < D; ++d) k = k * radix[d] + coarse_coordinate(coord, halve, d, i);
    key[i] = k;
  }
  return key;
}

/// The sizes of the levels solve_multilevel's coarsening makes, from the lattice coordinates
/// alone (the states' labels: `coord`, one vector per component; `halve` as Level::halve):
/// level l + 1 holds the distinct tuples of level l with the flagged components halved, as
/// coarsen's aggregates do.  The last entry is the coarsest level: at most coarse_size
/// states, or the level whose next one would stall.  About one sort of the states' keys:
/// a refusal for a stalled coarsening is known before any coarse matrix is built.
std::vector<int32_t> level_sizes(const std::vector<std::vector<int32_t>>& coord, const std::vector<char>& halve,
                                 int32_t coarse_size) {
  const size_t D = coord.size();
  int32_t n = D > 0 ? static_cast<int32_t>(coord[0].size()) : 0;
  std::vector<int32_t> sizes{n};
  std::vector<std::vector<int32_t>> level;  // the tuples of the current level (empty: coord's)
  std::vector<int64_t> radix;
  while (n > coarse_size) {
    std::vector<int64_t> key = aggregate_keys(level.empty() ? coord : level, halve, n, radix);
    std::sort(key.begin(), key.end());
    key.erase(std::unique(key.begin(), key.end()), key.end());
    const int32_t next = static_cast<int32_t>(key.size());
    if (coarsening_stalls(next, n)) break;
    std::vector<std::vector<int32_t>> tuples(D, std::vector<int32_t>(static_cast<size_t>(next)));
    for (int32_t I = 0; I < next; ++I) {
      int64_t k = key[I];
      for (size_t d = D; d-- > 0;) {
        tuples[d][I] = static_cast<int32_t>(k % radix[d]);
        k /= radix[d];
      }
    }
    level = std::move(tuples);
    n = next;
    sizes.push_back(n);
  }
  return sizes;
}

/// Coarse level from `f`: aggregates, pattern and the fine -> coarse map (`merge`: f's
/// values are fixed, see Q below).
Level coarsen(Level& f, bool merge) {
  Level c;
  // aggregate ids in lexicographic order of the coarse coordinates
  const size_t D = f.coord.size();
  std::vector<int64_t> radix;
  const std::vector<int64_t> key = aggregate_keys(f.coord, f.halve, f.n, radix);
  auto cc = [&](size_t d, int32_t i) { return coarse_coordinate(f.coord, f.halve, d, i); };
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
  std::vector<int32_t>& mp = f.mp;
  std::vector<int32_t>& mem = f.mem;
  mp.assign(c.n + 1, 0);
  mem.resize(f.n);
  for (int32_t j = 0; j < f.n; ++j) ++mp[f.agg[j] + 1];
  for (int32_t J = 0; J < c.n; ++J) mp[J + 1] += mp[J];
  {
    std::vector<int32_t> fill(mp.begin(), mp.end() - 1);
    for (int32_t j = 0; j < f.n; ++j) mem[fill[f.agg[j]]++] = j;
  }
  // The coarse pattern.  On level 0, whose values are P's and never change, the fine
  // entries merged by (coarse nonzero, fine source state) as well:
  // P_c(I, J) = sum_{i in I} w_i Q(i, J) with Q(i, J) = sum_{j in J} P_ij, so a cycle reads
  // Q (on the two-class chains about half as many numbers as P) and no slot per entry.  Q
  // is kept by coarse nonzero (qp, qe), each one's sources in the order first met.  The coarser
  // levels' values change with every cycle: their entries keep their coarse nonzero (pos).
  c.rp.assign(c.n + 1, 0);
  f.merged = merge;
  if (merge)
    merge_entries(f, c);
  else
    map_entries(f, c);
  c.v.assign(c.ci.size(), 0.0);
  f.xs.assign(c.n, 0.0);
  f.wgt.assign(f.n, 0.0);
  return c;
}

/// sum_e v[e] value(ci[e]) over the entries begin .. end of row j, leaving out its diagonal
/// entry when `skip` is j (-1: none), in four partial sums (a single sum is a chain of
/// dependent additions; on the sweeps, which are bound by gathering x, no difference was
/// measured).
template <class Value>
inline double row_sum(const int32_t* ci, const double* v, int32_t begin, int32_t end, int32_t skip, Value value) {
  double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
  int32_t e = begin;
  for (; e + 4 <= end; e += 4) {
    const int32_t c0 = ci[e], c1 = ci[e + 1], c2 = ci[e + 2], c3 = ci[e + 3];
    a0 += (c0 != skip ? v[e] : 0.0) * value(c0);
    a1 += (c1 != skip ? v[e + 1] : 0.0) * value(c1);
    a2 += (c2 != skip ? v[e + 2] : 0.0) * value(c2);
    a3 += (c3 != skip ? v[e + 3] : 0.0) * value(c3);
  }
  for (; e < end; ++e) a0 += (ci[e] != skip ? v[e] : 0.0) * value(ci[e]);
  return (a0 + a1) + (a2 + a3);
}

/// Coarse values from the fine iterate x (weights w_i = x_i / x(I)).  Every coarse nonzero
/// (I, J) is sum_{i in I} w_i Q(i, J) on level 0, the sum of w_i P_ij over the entries of the
/// members j of J's rows on the others: the coarse rows are independent, so the passes are
/// split over the threads, each sum in a fixed order (the same numbers on any thread count).
void restrict_values(Level& f, Level& c, const std::vector<double>& x) {
  const int T = level_threads(f.n);
  const int32_t* mp = f.mp.data();
  const int32_t* mem = f.mem.data();
  const bool merged = f.merged;
#pragma omp parallel num_threads(T)
  {
#pragma omp for schedule(static)
    for (int32_t I = 0; I < c.n; ++I) {
      double s = 0.0;
      for (int32_t k = mp[I]; k < mp[I + 1]; ++k) s += x[mem[k]];
      f.xs[I] = s;
    }
#pragma omp for schedule(static)
    for (int32_t i = 0; i < f.n; ++i) {
      const int32_t I = f.agg[i];
      f.wgt[i] = f.xs[I] > 0.0 ? x[i] / f.xs[I] : 1.0 / f.size[I];
    }
    if (merged) {
#pragma omp for schedule(static)
      for (int32_t J = 0; J < c.n; ++J)
        for (int32_t e = c.rp[J]; e < c.rp[J + 1]; ++e) {
          double s = 0.0;
          for (int32_t k = f.qp[e]; k < f.qe[e]; ++k) s += f.wgt[f.qi[k]] * f.qv[k];
          c.v[e] = s;
        }
    } else {
#pragma omp for schedule(static)
      for (int32_t J = 0; J < c.n; ++J) {
        for (int32_t e = c.rp[J]; e < c.rp[J + 1]; ++e) c.v[e] = 0.0;
        for (int32_t k = mp[J]; k < mp[J + 1]; ++k) {
          const int32_t j = mem[k];
          for (int32_t e = f.rp[j]; e < f.rp[j + 1]; ++e) c.v[f.pos[e]] += f.wgt[f.ci[e]] * f.v[e];
        }
      }
    }
  }
  find_exits(c);
}

/// r = x P - x from level 0's P^T (rows = "to" states; for a generator the uniformised P),
/// over the threads; returns ||r||_1 (the operator's residual, summed in another order).
double residual_vector(const Level& L, const std::vector<double>& x, std::vector<double>& r) {
  const int T = level_threads(L.n);
  r.resize(static_cast<size_t>(L.n));
  double sum = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : sum) num_threads(T)
  for (int32_t j = 0; j < L.n; ++j) {
    const double acc = row_sum(L.ci.data(), L.v.data(), L.rp[j], L.rp[j + 1], -1, [&x](int32_t c) { return x[c]; });
    r[j] = acc - x[j];
    sum += std::abs(r[j]);
  }
  return sum;
}

/// A smoothing run normalises after its last sweep and at least after every this many (the
/// cycle is scale-free: the restriction's weights, the prolongation's ratios and a sweep do
/// not depend on x's sum, which a sweep changes little).
constexpr int kSweepsBetweenNormalisations = 5;

void smooth(const Level& L, std::vector<double>& x, int sweeps) {
  for (int s = 0; s < sweeps; ++s) {
    check_interrupt();  // a W-cycle smooths each level many times: poll per sweep, not per cycle
    const bool last = s + 1 == sweeps || (s + 1) % kSweepsBetweenNormalisations == 0;
    gauss_seidel_sweep(L.n, L.rp.data(), L.ci.data(), L.v.data(), L.exit.data(), x, last);
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

/// Iterant recombination of the cycles (De Sterck, Miller, Sanders & Winlaw, "Recursively
/// accelerated multilevel aggregation for Markov chains", 2010; of the family of Anderson
/// acceleration, Walker & Ni, "Anderson acceleration for fixed-point iterations", 2011, but
/// over the outputs' own residuals).  The last `depth` cycle outputs y_k, all summing to 1,
/// and their residuals r_k = y_k P - y_k are kept; the next cycle starts from
/// z = sum_k a_k y_k with sum_k a_k = 1 and a minimising ||sum_k a_k r_k||_2 (r is linear in
/// y, so that is z's residual).  The answer is always a cycle's output with its own
/// residual: the combination only chooses where a cycle starts.  Entries of z that are not
/// positive (aggregation needs positive weights) take the last output's value.  Depth 0 or
/// 1: nothing is kept or combined.
class Recombination {
 public:
  Recombination(int depth, int32_t n) : depth_(depth >= 2 ? depth : 0), n_(n), G_(depth_, depth_) {}

  /// Keeps the output y and its residual r, taken by swapping (the oldest pair makes room;
  /// y and r are left holding that pair's storage, or empty).  Depth 0: nothing happens.
  void push(std::vector<double>& y, std::vector<double>& r) {
    if (depth_ == 0) return;
    const int slot = static_cast<int>(count_ % depth_);
    if (static_cast<int>(y_.size()) < depth_) {
      y_.emplace_back();
      r_.emplace_back();
    }
    y_[slot].swap(y);
    r_[slot].swap(r);
    ++count_;
    last_ = slot;
    const int k = size();
    // the new residual's dot products with every kept one, in one pass
    std::vector<const double*> rs(k);
    for (int i = 0; i < k; ++i) rs[i] = r_[i].data();
    std::vector<double> d(k, 0.0);
    double* dp = d.data();
    const double* rn = r_[slot].data();
    const int T = level_threads(n_);
#pragma omp parallel for schedule(static) reduction(+ : dp[:k]) num_threads(T)
    for (int32_t j = 0; j < n_; ++j)
      for (int i = 0; i < k; ++i) dp[i] += rn[j] * rs[i][j];
    for (int i = 0; i < k; ++i) G_(slot, i) = G_(i, slot) = d[i];
  }

  /// The next cycle's start in x (after a push): the combination of the kept outputs (true),
  /// or the last output itself (false: fewer than two kept, or a degenerate least-squares
  /// problem).  Depth 0: x is left as it is.
  bool start(std::vector<double>& x) {
    if (depth_ == 0) return false;
    if (combine(x)) return true;
    x = y_[last_];
    return false;
  }

 private:
  bool combine(std::vector<double>& x) {
    const int k = size();
    if (k < 2) return false;
    // a = G^{-1} 1 / (1^T G^{-1} 1), G the residuals' Gram matrix, scaled to a unit diagonal
    Eigen::VectorXd s(k);
    for (int i = 0; i < k; ++i) s(i) = std::sqrt(G_(i, i));
    if (!(s.minCoeff() > 0.0) || !std::isfinite(s.maxCoeff())) return false;
    Eigen::MatrixXd Gs(k, k);
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < k; ++j) Gs(i, j) = G_(i, j) / (s(i) * s(j));
    Gs.diagonal().array() += 1e-12;  // a ridge: residuals close to parallel still give a solvable system
    const Eigen::LDLT<Eigen::MatrixXd> ldlt(Gs);
    if (ldlt.info() != Eigen::Success) return reset();
    Eigen::VectorXd a = ldlt.solve(s.cwiseInverse()).cwiseQuotient(s);
    const double sum = a.sum();
    if (!std::isfinite(sum) || !(std::abs(sum) > 0.0)) return reset();
    a /= sum;
    if (!(a.cwiseAbs().maxCoeff() <= kMaxCoefficient)) return reset();
    std::vector<const double*> ys(k);
    for (int i = 0; i < k; ++i) ys[i] = y_[i].data();
    const double* ap = a.data();
    const int T = level_threads(n_);
    const double* last = y_[last_].data();
    x.resize(static_cast<size_t>(n_));
#pragma omp parallel for schedule(static) num_threads(T)
    for (int32_t j = 0; j < n_; ++j) {
      double z = 0.0;
      for (int i = 0; i < k; ++i) z += ap[i] * ys[i][j];
      x[j] = z > 0.0 ? z : last[j];
    }
    normalise(x);
    return true;
  }

  /// Coefficients beyond this (residuals nearly dependent) restart the history.
  static constexpr double kMaxCoefficient = 1e4;
  int size() const { return static_cast<int>(std::min<long>(count_, depth_)); }
  bool reset() {  // keep only the last pair
    if (last_ != 0) {
      std::swap(y_[0], y_[last_]);
      std::swap(r_[0], r_[last_]);
      G_(0, 0) = G_(last_, last_);
    }
    y_.resize(1);
    r_.resize(1);
    count_ = 1;
    last_ = 0;
    return false;
  }
  int depth_;
  int32_t n_;
  long count_ = 0;
  int last_ = 0;
  std::vector<std::vector<double>> y_, r_;
  Eigen::MatrixXd G_;
};

void cycle(std::vector<Level>& lv, size_t l, std::vector<double>& x, int pre, int post, int gamma) {
  Level& f = lv[l];
  if (l + 1 == lv.size()) {
    if (f.coarsest_sweeps > 0)
      smooth(f, x, f.coarsest_sweeps);
    else
      solve_dense(f, x);
    return;
  }
  smooth(f, x, pre);
  Level& c = lv[l + 1];
  restrict_values(f, c, x);
  std::vector<double> xc(f.xs);
  // gamma = 1: V-cycle, 2: W-cycle, which visits level l 2^l times: below level 0 only the
  // levels of at least kWCycleStates states take gamma corrections (on the count chains'
  // nine levels the 256 visits of the coarsest, each a dense solve, took a third of a cycle)
  const int corrections = l == 0 || f.n >= kWCycleStates ? gamma : 1;
  for (int g = 0; g < corrections; ++g) cycle(lv, l + 1, xc, pre, post, gamma);
  const int T = level_threads(f.n);
#pragma omp parallel for schedule(static) num_threads(T)
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

void normalise(std::vector<double>& x) {
  // the sum by blocks of a fixed length, each in double, the blocks' sums in long double in
  // their order: the same sum on any number of threads
  constexpr int64_t kBlock = 1 << 14;
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> part(static_cast<size_t>(blocks));
  double* xs = x.data();
  const int T = level_threads(static_cast<int32_t>(n));
#pragma omp parallel num_threads(T)
  {
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
      const int64_t end = std::min(n, (b + 1) * kBlock);
      int64_t i = b * kBlock;
      for (; i + 4 <= end; i += 4) a0 += xs[i], a1 += xs[i + 1], a2 += xs[i + 2], a3 += xs[i + 3];
      for (; i < end; ++i) a0 += xs[i];
      part[static_cast<size_t>(b)] = (a0 + a1) + (a2 + a3);
    }
#pragma omp single
    {
      long double s = 0.0L;
      for (double p : part) s += p;
      part.assign(1, static_cast<double>(1.0L / s));
    }
    const double scale = part[0];
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) xs[i] *= scale;
  }
}

void gauss_seidel_sweep(int32_t n, const int32_t* rp, const int32_t* ci, const double* v, const double* exit,
                        std::vector<double>& x, bool normalised) {
  const int T = level_threads(n);
  if (T <= 1) {
    double* xs = x.data();
    for (int32_t j = 0; j < n; ++j) {
      if (!(exit[j] > 0.0)) continue;  // absorbing state: keep its value
      xs[j] = row_sum(ci, v, rp[j], rp[j + 1], j, [xs](int32_t c) { return xs[c]; }) / exit[j];
    }
    if (normalised) normalise(x);
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
    const uint32_t width = static_cast<uint32_t>(hi - lo);
    const auto value = [=](int32_t c) {
      return (static_cast<uint32_t>(c - lo) < width ? xs : x0)[c];  // own range: this sweep's values
    };
    for (int32_t j = lo; j < hi; ++j) {
      if (!(exit[j] > 0.0)) continue;
      xs[j] = row_sum(ci, v, rp[j], rp[j + 1], j, value) / exit[j];
    }
  }
  if (normalised) normalise(x);
}

void solve_multilevel(const MarkovOperator& c, const StationaryOptions& o, StationaryResult& r, bool fail_fast,
                      bool sweep_stalled_coarsest, long hand_over_cycles) {
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
  std::vector<char> halve;
  for (int d = 0; d < space.count(); ++d) halve.push_back(space.component(d).coarsen ? 1 : 0);
  const int32_t coarse_size = o.coarse_size;
  // The levels' sizes first, from the labels: a coarsening that stalls is refused before the
  // transpose and the levels are built (on GEO RED with count spacing, 2.0M states, that
  // took 0.6 s).
  const std::vector<int32_t> sizes = level_sizes(labels, halve, coarse_size);
  int coarsest_sweeps = 0;
  if (sizes.back() > std::max(2 * coarse_size, kDenseCoarsestStates)) {
    const bool coarser = sizes.size() > 1;  // the chain coarsens at least once
    const bool sweepable = coarser && sizes.back() <= kSweptCoarsestStates;
    if (!sweep_stalled_coarsest || !sweepable) {
      const std::string why = !coarser ? " (no coarser level)"
                              : sweep_stalled_coarsest ? detail::cat(" and above the ", kSweptCoarsestStates, " states swept instead")
                                                       : "";
      throw CoarseningStalled(detail::cat("multilevel: coarsening stalled at ", sizes.back(), " states (> max(2 x coarse_size, ",
                                          kDenseCoarsestStates, ") with coarse_size = ", coarse_size,
                                          "): too large for the dense coarsest solve", why),
                              sweepable);
    }
    coarsest_sweeps = kCoarsestSweeps;
  }
  std::vector<Level> lv(1);
  {
    TransposedCsr PT = c.transpose();
    Level& L = lv[0];
    L.n = n;
    L.rp = std::move(PT.rowptr);
    L.ci = std::move(PT.col);
    L.v = std::move(PT.val);
    L.coord = labels;
    L.halve = halve;
    find_exits(L);
  }
  while (lv.back().n > coarse_size) {
    check_interrupt();
    Level next = coarsen(lv.back(), /*merge=*/lv.size() == 1);
    if (coarsening_stalls(next.n, lv.back().n)) {  // stop here, and free the links
      Level& last = lv.back();
      Level kept;  // the chain of the coarsest level, without the links coarsen made
      kept.n = last.n;
      kept.rp = std::move(last.rp);
      kept.ci = std::move(last.ci);
      kept.v = std::move(last.v);
      kept.exit = std::move(last.exit);
      last = std::move(kept);
      break;
    }
    lv.push_back(std::move(next));
  }
  if (lv.size() != sizes.size() || lv.back().n != sizes.back())
    throw std::logic_error(detail::cat("internal error: multilevel built ", lv.size(), " levels down to ", lv.back().n,
                                       " states where their sizes said ", sizes.size(), " down to ", sizes.back()));
  lv.back().coarsest_sweeps = coarsest_sweeps;
  r.seconds.push_back({"setup", since(t0)});
  r.extra.push_back({"levels", static_cast<double>(lv.size())});
  r.extra.push_back({"coarsest_states", static_cast<double>(lv.back().n)});
  r.extra.push_back({"coarsest_sweeps", static_cast<double>(lv.back().coarsest_sweeps)});

  t0 = Clock::now();
  std::vector<double> x = o.x0.empty() ? std::vector<double>(n, 1.0 / n) : o.x0;
  normalise(x);
  const long maxit = o.max_iter > 0 ? o.max_iter : 1000;
  long it = 0, last_halving = 0, recombined = 0;
  double res = INFINITY, best = INFINITY;
  const long stall = fail_fast ? 20 : 100;  // give up when the best residual has not halved for this many cycles
  constexpr long window = 10;               // fail_fast: the rate over this many cycles
  std::vector<double> history, rv;
  Recombination recomb(o.recombination_depth, n);
  while (true) {
    check_interrupt();
    cycle(lv, 0, x, o.smoothing_sweeps, o.smoothing_sweeps, o.cycle_gamma);
    ++it;
    res = residual_vector(lv[0], x, rv);
    if (!std::isfinite(res)) throw SolverError(detail::cat("multilevel: non-finite residual after cycle ", it));
    if (res <= 0.5 * o.tol || it >= maxit) break;
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
        if (hand_over_cycles > 0 && static_cast<double>(it) + need > static_cast<double>(hand_over_cycles)) {
          r.note = detail::cat("multilevel handed over: at its rate of the last ", window, " cycles the residual ", res,
                               " would need about ", detail::short_num(need), " more cycles, over ", hand_over_cycles,
                               " in all");
          r.status = Status::Stalled;
          r.extra.push_back({"projected_cycles", need});
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
    // x (the answer if the loop stopped here) holds this cycle's output; the next cycle
    // starts from the combination of the last outputs
    recomb.push(x, rv);
    if (recomb.start(x)) ++recombined;
  }
  r.iterations = it;
  r.operator_applications = it * (2 * o.smoothing_sweeps + 2);  // fine-level passes over the nonzeros per cycle
  r.extra.push_back({"recombined_cycles", static_cast<double>(recombined)});
  r.seconds.push_back({"iterate", since(t0)});
  r.pi = std::move(x);
}


/// Multilevel aggregation with the accounts every method reports.
void solve_multilevel_finished(const MarkovOperator& c, const StationaryOptions& o, StationaryResult& r,
                               const Attempt& a) {
  // an attempt with a fallback behind it (auto) hands a stalled coarsening over to the fallback
  // (on the drop-spacing chains krylov: as fast, see kCoarsestSweeps) unless auto asks for the
  // sweeps (after krylov's step budget); asked for on its own, multilevel sweeps the level
  solve_multilevel(c, o, r, a.fail_fast, /*sweep_stalled_coarsest=*/!a.fail_fast || a.sweep_stalled_coarsest,
                   a.fail_fast ? a.hand_over_cycles : 0);
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
