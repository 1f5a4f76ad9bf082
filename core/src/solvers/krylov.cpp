// Preconditioned GMRES for pi P = pi (method "krylov").
//
// The reduced system: fix pi_k = 1 for a recurrent, probable state k; the other
// balance equations are B x = b with B = ((I - P) without row and column k)^T
// and b_j = P_kj.  B is kept at full size with row and column k replaced by the
// identity (b_k = 0), so no index is shifted.  B is a nonsingular M-matrix,
// diagonally dominant by columns.
//
// Preconditioner: symmetric block Gauss-Seidel over blocks of states that share
// the values of every component the generator did not flag in_block (the state
// descriptor: MarkovOperator::block_partition), ordered by state index inside, so
// that each diagonal block is banded when the flagged components are the fast ones
// (for the queue models: one block per point of the average's grid), each diagonal
// block factorised once as a band matrix.  The system, the preconditioner and GMRES
// live in block_system.hpp (the rational Krylov exponential solves with them too).
//
// GMRES (Saad & Schultz 1986) with right preconditioning, block modified Gram-Schmidt
// and Givens rotations, restarted after `krylov_basis` steps.  The stopping test
// is the true residual of the normalised vector, exact and cheap for the
// reduced system: with r = b - B x and z = (x, pi_k = 1),
//     ||z P - z||_1 / sum z = (||r||_1 + |sum_j r_j|) / (1 + sum x),
// since the k-th balance equation is minus the sum of the others.
#include "solvers/krylov.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <numeric>

#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"
#include "aqmchain/threads.hpp"
#include "solvers/block_system.hpp"
#include "solvers/stationary_common.hpp"

namespace aqm::detail {

namespace {

/// Components slower than this fraction of the fastest (total weight of the transitions
/// that change them, from P) define the coarse space of the two-level preconditioner.
constexpr double kSlowRate = 1e-2;
/// At most this many groups of states sharing the slow components' values.
constexpr int32_t kMaxGroups = 400;
/// The coarse space's groups: the slow groups split into bins of the other components outside
/// the blocks, about one per this many blocks and at most kMaxCoarse (measured on adaptive
/// RED, GEO buffer 60, 0.3M states, 12k blocks: 255 groups -> 22 GMRES steps, 714 -> 15,
/// 1020 -> 17, 2040 -> 24, 4080 -> 34; GEO buffer 250, 1.2M states, 44k blocks: 306 -> 49,
/// 1020 -> 23, 2040 -> 16, 2703 -> 16, 4080 -> 19; SSMP, 5.9M states: 1020 -> 31, 2703 -> 43;
/// 34k states, 2k blocks: 102 -> 14, 1020 -> 21).
constexpr int32_t kBlocksPerCoarseGroup = 16;
constexpr int32_t kMaxCoarse = 1024;
static_assert(kMaxCoarse <= BlockSystem::kMaxCoarseGroups && kMaxGroups <= BlockSystem::kMaxCoarseGroups,
              "set_coarse takes every coarse space slow_groups makes");
/// GMRES steps when max_iter is 0 (the default).
constexpr long kDefaultSteps = 2000;

/// Each group's own chain is solved to this residual for the coarse space's weights (measured
/// on adaptive RED, 1.2M states: 1e-3 -> 95 GMRES steps, 1e-4 -> 40, 1e-6 and 1e-8 -> 23).
constexpr double kShapeTol = 1e-6;
/// GMRES steps per group chain (a group that does not reach kShapeTol keeps its last iterate).
constexpr long kShapeSteps = 200;
/// Runs of consecutive group chains (group_shapes), each group but a run's first started from
/// the group before it: fewer runs start more groups from a neighbour, more spread over more
/// threads.
constexpr int kShapeRuns = 8;
/// group_shapes reads the rows of a group's members this many members ahead.
constexpr int32_t kShapePrefetch = 8;


struct SlowGroups {
  std::vector<int32_t> group;  ///< state -> group (empty: no slow component)
  std::vector<int> slow;       ///< the slow components (descriptor order)
  int32_t G = 0;
  std::vector<int32_t> coarse; ///< state -> coarse group: its group split into bins (see slow_groups)
  int32_t CG = 0;
  double rate_ratio = 0.0;     ///< the slowest component's rate over the fastest's
};

/// `again` continues `first`: their counts add up, and first's phases come first, named
/// "first_<phase>".
void carry(const StationaryResult& first, StationaryResult& again) {
  again.iterations += first.iterations;
  again.operator_applications += first.operator_applications;
  auto phases = again.seconds;
  again.seconds.clear();
  for (const auto& [phase, sec] : first.seconds) again.seconds.push_back({"first_" + phase, sec});
  again.seconds.insert(again.seconds.end(), phases.begin(), phases.end());
}

/// The groups of states sharing the values of the slow components (e.g. adaptive RED's
/// p_max, which moves every few thousand slots): a nearly decomposable chain, whose mass
/// between the groups is the mode the block sweeps leave slow.
SlowGroups slow_groups(const MarkovOperator& c, int32_t blocks = 0) {
  SlowGroups a;
  const auto& space = c.space();
  const auto& labels = c.labels();
  const int D = space.count();
  if (D < 2 || labels.size() < static_cast<size_t>(D)) return a;
  const int32_t n = c.rows();
  const ComponentMoves& moves = c.component_moves();  // one pass over P, shared with the block order
  std::vector<double> rate(static_cast<size_t>(D));
  for (int d = 0; d < D; ++d) rate[d] = moves.up[d] + moves.down[d];
  const double fastest = *std::max_element(rate.begin(), rate.end());
  std::vector<int> slow;
  double slowest = fastest;
  for (int d = 0; d < D; ++d)
    if (!space.component(d).in_block && rate[d] > 0.0 && rate[d] < kSlowRate * fastest)
      slow.push_back(d), slowest = std::min(slowest, rate[d]);
  if (slow.empty()) return a;
  // the groups: the distinct values of the slow components' mixed-radix key, numbered in key
  // order (a table over the key range when it is small, else a sort)
  int64_t range = 1;
  for (int d : slow) range = range > (int64_t{1} << 40) ? range : range * std::max<int64_t>(1, space.component(d).size);
  std::vector<int64_t> key(n, 0);
  for (int d : slow)
    for (int32_t s = 0; s < n; ++s) key[s] = key[s] * space.component(d).size + labels[d][s];
  if (range <= static_cast<int64_t>(n) + (int64_t{1} << 20)) {
    std::vector<int32_t> id(static_cast<size_t>(range), -1);
    for (int32_t s = 0; s < n; ++s) id[key[s]] = 0;
    int32_t G = 0;
    for (auto& v : id)
      if (v == 0) v = G++;
    if (G < 2 || G > kMaxGroups) return a;
    a.G = G;
    a.group.resize(n);
    for (int32_t s = 0; s < n; ++s) a.group[s] = id[key[s]];
  } else {
    std::vector<int64_t> sorted(key);
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    if (sorted.size() < 2 || sorted.size() > static_cast<size_t>(kMaxGroups)) return a;
    a.G = static_cast<int32_t>(sorted.size());
    a.group.resize(n);
    for (int32_t s = 0; s < n; ++s)
      a.group[s] = static_cast<int32_t>(std::lower_bound(sorted.begin(), sorted.end(), key[s]) - sorted.begin());
  }
  a.slow = slow;
  a.rate_ratio = slowest / fastest;
  // The coarse groups: each group split into bins of equal ranges of the values of the other
  // components outside the blocks (for adaptive RED: avg), about one per kBlocksPerCoarseGroup
  // of the `blocks` blocks (0: no bins) and at most kMaxCoarse: the
  // coarse correction then also moves mass along them inside a group, where the weights of
  // the group chains (group_shapes) are least right.
  a.coarse = a.group;
  a.CG = a.G;
  std::vector<int> other;
  for (int d = 0; d < D; ++d)
    if (!space.component(d).in_block && std::find(slow.begin(), slow.end(), d) == slow.end()) other.push_back(d);
  if (other.empty()) return a;
  const int32_t per = static_cast<int32_t>(
      std::floor(std::pow(static_cast<double>(std::min(kMaxCoarse, blocks / kBlocksPerCoarseGroup)) / a.G,
                          1.0 / static_cast<double>(other.size())) + 1e-9));
  if (per < 2) return a;
  std::vector<int64_t> fine(a.group.begin(), a.group.end());
  int64_t cells = a.G;
  for (int d : other) {
    const auto [lo, hi] = std::minmax_element(labels[d].begin(), labels[d].begin() + n);
    const int64_t span = static_cast<int64_t>(*hi) - *lo + 1, nb = std::min<int64_t>(per, span);
    for (int32_t s = 0; s < n; ++s) fine[s] = fine[s] * nb + (static_cast<int64_t>(labels[d][s]) - *lo) * nb / span;
    cells *= nb;
  }
  std::vector<int32_t> id(static_cast<size_t>(cells), -1);  // cells <= kMaxCoarse
  for (int32_t s = 0; s < n; ++s) id[fine[s]] = 0;
  int32_t CG = 0;
  for (auto& v : id)
    if (v == 0) v = CG++;
  for (int32_t s = 0; s < n; ++s) a.coarse[s] = id[fine[s]];
  a.CG = CG;
  return a;
}

/// The prolongation weights from each group's own chain: the transitions inside the group,
/// its exits put back on the diagonal (for adaptive RED: the plain chain at one p_max), the
/// stationary vector of that chain solved with the same block preconditioner restricted to
/// the group (the first disaggregation of Koury, McAllister & Stewart's iterative
/// aggregation-disaggregation, "Iterative methods for computing stationary distributions of
/// nearly completely decomposable Markov chains", 1984).  The state fixed in a group is the
/// one that agrees with the chain's recurrent state on every component but the slow ones; a
/// group without one, or whose solve fails, gets zero weights (set_coarse: uniform).  The
/// groups are solved in parallel.
struct GroupShapes {
  std::vector<double> z;  ///< per state, summing to 1 over each solved group
  long steps = 0;         ///< GMRES steps over all groups
  double work = 0.0;      ///< the same in steps on the whole chain (steps x group size / n)
  int32_t unsolved = 0;   ///< groups left with zero weights
};

GroupShapes group_shapes(const MarkovOperator& c, const std::vector<int32_t>& block_of, const SlowGroups& slow,
                         int basis) {
  const int32_t n = c.rows(), G = slow.G;
  const auto& labels = c.labels();
  GroupShapes out;
  out.z.assign(static_cast<size_t>(n), 0.0);
  std::vector<int32_t> start(static_cast<size_t>(G) + 1, 0), members(static_cast<size_t>(n)),
      local(static_cast<size_t>(n)), anchor(static_cast<size_t>(G), -1);
  for (int32_t s = 0; s < n; ++s) ++start[slow.group[s] + 1];
  for (int32_t g = 0; g < G; ++g) start[g + 1] += start[g];
  {
    std::vector<int32_t> fill(start.begin(), start.end() - 1);
    for (int32_t s = 0; s < n; ++s) {
      const int32_t g = slow.group[s];
      local[s] = fill[g] - start[g];
      members[fill[g]++] = s;
    }
  }
  const int32_t r0 = c.recurrent_state();
  std::vector<char> is_slow(labels.size(), 0);
  for (int d : slow.slow) is_slow[d] = 1;
  for (int32_t s = 0; s < n; ++s) {
    bool same = true;
    for (size_t d = 0; d < labels.size() && same; ++d) same = is_slow[d] || labels[d][s] == labels[d][r0];
    if (same) anchor[slow.group[s]] = s;
  }
  // The key of the components other than the slow ones: the states are numbered in key order,
  // so a group's members come in the order of this key, and the members of two groups pair up
  // (same values of every other component) by one merge.  Groups next to each other (the slow
  // components' neighbouring values: adaptive RED's p_max one step apart) have nearly the same
  // shape, so each group starts from the one before it in its run: the groups are split into
  // kShapeRuns runs of consecutive groups, given to the threads as they come free: which group
  // starts from which does not depend on the thread count (the weights' last bits may, through
  // the reductions inside a large group's solve).  No start where the key overflows, the group
  // before was not solved, or the pairing leaves the anchor without a value.
  std::vector<int64_t> other(static_cast<size_t>(n), 0);
  bool keyed = true;
  {
    int64_t range = 1;
    for (size_t d = 0; d < labels.size() && keyed; ++d) {
      if (is_slow[d]) continue;
      const int64_t size = std::max<int64_t>(1, c.space().component(static_cast<int>(d)).size);
      keyed = range <= (int64_t{1} << 62) / size;
      range *= size;
      for (int32_t s = 0; keyed && s < n; ++s) other[s] = other[s] * size + labels[d][s];
    }
  }
  const int32_t* rp = c.rowptr();
  const int32_t* col = c.col();
  const double* val = c.matrix().val();
  std::vector<long> steps(static_cast<size_t>(G), 0);
  std::vector<char> solved(static_cast<size_t>(G), 0);
  std::exception_ptr error;
  const int runs = std::min<int>(kShapeRuns, G);
#pragma omp parallel for schedule(dynamic, 1) num_threads(std::max(1, std::min(loop_threads(), runs)))
  for (int t = 0; t < runs; ++t) {
    // the last group this run solved (its weights are in out.z), for the next one
    int32_t last = -1;
    for (int32_t g = static_cast<int32_t>(static_cast<int64_t>(G) * t / runs);
         g < static_cast<int32_t>(static_cast<int64_t>(G) * (t + 1) / runs); ++g) {
      const int32_t m = start[g + 1] - start[g];
      if (anchor[g] < 0 || m < 2) continue;
      try {
        const int32_t* mem = members.data() + start[g];
        std::vector<int32_t> lrp(static_cast<size_t>(m) + 1, 0), lcol, lblock(static_cast<size_t>(m));
        std::vector<double> lval;
        size_t room = 0;  // the members' entries: at most this many are inside the group
        for (int32_t i = 0; i < m; ++i) room += static_cast<size_t>(rp[mem[i] + 1] - rp[mem[i]]);
        lcol.resize(room);
        lval.resize(room);
        {
          // the members lie apart in P (one state in every few, for adaptive RED's p_max slices):
          // their rows are fetched a few members ahead
          const int32_t* gp = slow.group.data();
          const int32_t* lp = local.data();
          int32_t* oc = lcol.data();
          double* ov = lval.data();
          int32_t k = 0;
          for (int32_t i = 0; i < m; ++i) {
            if (i + kShapePrefetch < m) {
              const int32_t ahead = rp[mem[i + kShapePrefetch]];
              __builtin_prefetch(col + ahead);
              __builtin_prefetch(val + ahead);
              __builtin_prefetch(val + ahead + 8);
            }
            const int32_t s = mem[i];
            lblock[i] = block_of[s];
            for (int32_t e = rp[s]; e < rp[s + 1]; ++e) {
              const int32_t j = col[e];
              if (gp[j] == g) oc[k] = lp[j], ov[k] = val[e], ++k;
            }
            lrp[i + 1] = k;
          }
          lcol.resize(static_cast<size_t>(k));
          lval.resize(static_cast<size_t>(k));
        }
        BlockSystem S = block_system(m, lrp.data(), lcol.data(), lval.data(), lblock, 1.0, 1.0, local[anchor[g]], 0,
                                     1.0, c.rate());
        std::vector<double> x(static_cast<size_t>(m), 0.0);
        bool warm = false;
        if (keyed && last == g - 1) {
          // the group before's weights at the members that pair up, scaled to 1 at the anchor
          std::vector<double> guess(static_cast<size_t>(m), 0.0);
          const int32_t* prev = members.data() + start[g - 1];
          const int32_t pm = start[g] - start[g - 1];
          for (int32_t i = 0, p = 0; i < m && p < pm;) {
            const int64_t a = other[mem[i]], b = other[prev[p]];
            if (a == b) guess[i++] = out.z[prev[p++]];
            else if (a < b) ++i;
            else ++p;
          }
          const double at_anchor = guess[local[anchor[g]]];
          if (at_anchor > 0.0) {
            for (int32_t I = 0; I < m; ++I) x[I] = guess[S.perm[I]] / at_anchor;
            warm = true;
          }
        }
        if (!warm) S.precond(S.b.data(), x.data());
        x[S.K] = 0.0;
        Gmres::Test test;
        test.target = kShapeTol;
        test.measure = [m](const std::vector<double>& xv, const std::vector<double>& res) {
          long double r1 = 0.0L, rs = 0.0L, sx = 0.0L;
          for (int32_t j = 0; j < m; ++j) r1 += std::abs(res[j]), rs += res[j], sx += xv[j];
          return 1.0L + sx > 0.0L ? static_cast<double>((r1 + std::abs(rs)) / (1.0L + sx)) : INFINITY;
        };
        test.scale = [](double sum) { return std::max(1.0 + sum, 1.0); };
        Gmres::Limits limits;
        limits.max_iter = kShapeSteps;
        limits.stall_restarts = 3;
        Gmres gm(m, basis);
        const Gmres::Outcome o = gm.solve(S, S.b.data(), x, test, limits);
        steps[g] = o.iterations;
        double sum = 1.0;
        for (int32_t I = 0; I < m; ++I)
          if (I != S.K) sum += std::max(x[I], 0.0);
        if (!(sum > 0.0) || !std::isfinite(sum)) continue;
        for (int32_t I = 0; I < m; ++I) out.z[mem[S.perm[I]]] = (I == S.K ? 1.0 : std::max(x[I], 0.0)) / sum;
        solved[g] = 1;
        last = g;
      } catch (const SolverError&) {
        // a zero pivot in the group's blocks (a state with no transition inside its group): the
        // group keeps zero weights
      } catch (...) {
#pragma omp critical(aqm_group_shapes)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
  for (int32_t g = 0; g < G; ++g) {
    out.steps += steps[g];
    out.work += static_cast<double>(steps[g]) * (start[g + 1] - start[g]) / n;
    if (!solved[g]) {
      ++out.unsolved;
      for (int32_t i = start[g]; i < start[g + 1]; ++i) out.z[members[i]] = 0.0;
    }
  }
  return out;
}

}  // namespace

int coarse_components(const MarkovOperator& c) { return static_cast<int>(slow_groups(c).slow.size()); }

void solve_krylov(const MarkovOperator& c, const std::vector<int32_t>& block_of, int32_t k, const StationaryOptions& o,
                  StationaryResult& r, bool fail_fast, int32_t* better_k, ReusedBlocks* reuse) {
  r.method = Method::Krylov;
  auto t0 = Clock::now();
  // B = I - P^T with (I - P)_jj the exit probability of j (no cancellation in 1 - P_jj)
  // (for a generator, the off-diagonal entries of P = I + G / Lambda: G_ij / Lambda)
  // a warm state of a chain with these states, solved in the same block order: its recycled directions
  const WarmState* warm = o.warm && o.warm->n == c.rows() ? o.warm.get() : nullptr;
  BlockSystem R = block_system(c.rows(), c.rowptr(), c.col(), c.matrix().val(), block_of, 1.0, 1.0, k, 0, 1.0,
                               c.rate(), reuse);
  // the blocks stay for a re-solve of this call (moved out as the solve ends, whatever its end)
  struct Keep {
    BlockSystem& R;
    ReusedBlocks* reuse;
    ~Keep() {
      if (!reuse) return;
      reuse->blocks = std::move(R.blocks);
      reuse->K = R.K;
      reuse->order = hash_indices(R.perm);
    }
  } keep{R, reuse};
  const int32_t n = R.n;
  const uint64_t order = hash_indices(R.perm);
  r.seconds.push_back({"setup", since(t0)});
  Recycled recycled;
  long recycle_products = 0;
  if (warm && warm->order == order && !warm->U.empty()) {
    recycle_products = static_cast<long>(warm->U.size());
    t0 = Clock::now();
    recycled = Recycled::make(R, warm->U);
    r.seconds.push_back({"recycle", since(t0)});
  }
  if (o.warm) r.extra.push_back({"warm_recycled_vectors", static_cast<double>(recycled.k())});
  r.extra.push_back({"blocks", static_cast<double>(R.blocks.size())});
  r.extra.push_back({"largest_block", static_cast<double>(R.largest_block())});
  r.extra.push_back({"band_width", static_cast<double>(R.band_width())});
  r.extra.push_back({"sparse_blocks", static_cast<double>(R.sparse_blocks())});
  r.extra.push_back({"block_storage", static_cast<double>(R.block_storage())});
  if (reuse) r.extra.push_back({"blocks_reused", static_cast<double>(reuse->taken)});
  r.extra.push_back({"fixed_state", static_cast<double>(k)});
  // the block sweeps' level schedule (block_system.hpp): levels, and whether they run by levels
  r.extra.push_back({"sweep_levels_forward", static_cast<double>(R.forward_levels.count())});
  r.extra.push_back({"sweep_levels_backward", static_cast<double>(R.backward_levels.count())});
  r.extra.push_back({"sweep_gain_forward", R.forward_levels.speedup2});  // predicted, two threads
  r.extra.push_back({"sweep_gain_backward", R.backward_levels.speedup2});
  r.extra.push_back({"sweep_work_forward", static_cast<double>(R.forward_levels.work)});
  // the far entries of the widely fed rows the backward sweeps leave out (BlockSystem::up_end)
  r.extra.push_back({"sweep_far_entries_left_out", static_cast<double>(R.up_left_out())});
  r.extra.push_back({"sweep_far_rows", static_cast<double>(R.up_rows_cut())});
  // the entries of L and U' the sweeps read from copies (0: from B's rows; BlockSystem::lrp, urp)
  r.extra.push_back({"sweep_copied_lower", static_cast<double>(R.lci.size())});
  r.extra.push_back({"sweep_copied_upper", static_cast<double>(R.uci.size())});
  r.extra.push_back({"matrix_entries", static_cast<double>(R.ci.size())});

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
  // better_k: an iterate (pi_k = 1) with a state above 1 / kFixedStateRatio ends the solve at once
  // (measure +infinity) naming that state, the caller's better fixed state
  int32_t far_state = -1;
  test.measure = [n, &negative_mass, &far_state, better_k, &R](const std::vector<double>& xv,
                                                              const std::vector<double>& res) {
    if (better_k && far_state < 0) {
      const auto it = std::max_element(xv.begin(), xv.end());
      if (it != xv.end() && *it * kFixedStateRatio > 1.0) {
        far_state = R.perm[static_cast<int32_t>(it - xv.begin())];
        return static_cast<double>(INFINITY);
      }
    }
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
  limits.max_iter = o.max_iter > 0 ? o.max_iter : kDefaultSteps;
  if (fail_fast) {
    limits.fail_fast = true;
    limits.stall_restarts = 3;
  }
  Gmres gmres(n, o.krylov_basis);
  // the first steps of the last cycle give the directions recycled by a warm re-solve
  if (o.krylov_recycle > 0) gmres.keep_directions(kRitzStepsPerVector * o.krylov_recycle);
  // A nearly decomposable chain (slow_groups): the two-level preconditioner's coarse space
  // (a Galerkin correction of the mass between the coarse groups) is weighed by the
  // stationary vectors of the group chains (group_shapes) and kept for the whole solve; a
  // starting vector (a warm start from a previous solution) weighs it instead, and then the
  // iterate at every restart (also when the group chains give a singular coarse matrix).
  const bool from_x0 = !o.x0.empty() && o.x0[k] > 0.0;
  const SlowGroups slow =
      slow_groups(c, block_of.empty() ? 0 : *std::max_element(block_of.begin(), block_of.end()) + 1);
  int coarse_updates = 0;
  if (slow.G > 0) {
    auto reweigh = [&R, &slow, &coarse_updates, n](const std::vector<double>& xb) {
      std::vector<double> z(n);
      for (int32_t i = 0; i < n; ++i) z[R.perm[i]] = xb[i];
      z[R.perm[R.K]] = 1.0;
      if (R.set_coarse(slow.coarse, slow.CG, z)) ++coarse_updates;
    };
    r.extra.push_back({"coarse_groups", static_cast<double>(slow.CG)});
    r.extra.push_back({"coarse_slices", static_cast<double>(slow.G)});
    r.extra.push_back({"coarse_rate_ratio", slow.rate_ratio});
    if (from_x0) {
      reweigh(x);
      test.at_restart = reweigh;
      r.extra.push_back({"coarse_from_x0", 1.0});
    } else {
      const auto t_shapes = Clock::now();
      const GroupShapes shapes = group_shapes(c, block_of, slow, o.krylov_basis);
      if (R.set_coarse(slow.coarse, slow.CG, shapes.z))
        ++coarse_updates;
      else
        test.at_restart = reweigh;
      r.extra.push_back({"coarse_shape_steps", static_cast<double>(shapes.steps)});
      r.extra.push_back({"coarse_shape_work", shapes.work});
      r.extra.push_back({"coarse_shape_unsolved", static_cast<double>(shapes.unsolved)});
      r.seconds.push_back({"coarse_shapes", since(t_shapes)});
      t0 += Clock::now() - t_shapes;  // "iterate" without it
    }
  }
  const Gmres::Outcome g = gmres.solve(R, R.b.data(), x, test, limits, recycled.k() > 0 ? &recycled : nullptr);
  if (o.krylov_recycle > 0 && far_state < 0) {
    // the warm state: the harmonic Ritz vectors of this solve's last cycle with the slowest of
    // the recycled ones (they span the slow modes GMRES no longer saw)
    const auto t_keep = Clock::now();
    auto ws = std::make_shared<WarmState>();
    ws->n = n;
    ws->order = order;
    const int cap = o.krylov_recycle;
    std::vector<std::vector<double>> fresh = gmres.harmonic_ritz(cap);
    const int nfresh = std::min<int>(static_cast<int>(fresh.size()), std::max(cap - recycled.k(), cap / 2));
    for (int l = 0; l < recycled.k() && l < cap - nfresh; ++l) ws->U.push_back(std::move(recycled.U[l]));
    for (int l = 0; l < nfresh; ++l) ws->U.push_back(std::move(fresh[l]));
    r.warm_state = std::move(ws);
    r.seconds.push_back({"keep", since(t_keep)});
    t0 += Clock::now() - t_keep;  // "iterate" without it
  }
  if (far_state >= 0) {
    *better_k = far_state;
    r.seconds.push_back({"iterate", since(t0)});
    r.iterations = g.iterations;
    r.operator_applications = g.products + recycle_products;
    r.pi.assign(n, 0.0);  // the iterate, for the next start (negative entries clipped)
    for (int32_t i = 0; i < n; ++i) r.pi[i] = std::max(0.0, x[R.inv[i]]);
    r.pi[k] = 1.0;
    return;
  }
  if (slow.G > 0) r.extra.push_back({"coarse_updates", static_cast<double>(coarse_updates)});
  r.seconds.push_back({"iterate", since(t0)});
  r.iterations = g.iterations;
  r.operator_applications = g.products + recycle_products;  // C = B U: one product per recycled direction
  r.extra.push_back({"preconditioner_applications", static_cast<double>(R.precond_applications)});
  r.extra.push_back({"preconditioner_seconds", R.precond_seconds});
  r.extra.push_back({"sweep_seconds", R.sweep_seconds});
  if (R.forward_levels.parallel || R.backward_levels.parallel) {  // how often levels ran, how fast
    r.extra.push_back({"level_sweeps", static_cast<double>(R.forward_levels.level_sweeps + R.backward_levels.level_sweeps)});
    for (const auto* lv : {&R.forward_levels, &R.backward_levels}) {
      const std::string name = lv == &R.forward_levels ? "forward" : "backward";
      r.extra.push_back({name + "_sweep_seconds_sequential", lv->seq_seconds});  // the last of each
      r.extra.push_back({name + "_sweep_seconds_levels", lv->level_seconds});
    }
  }
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


namespace {
/// o for a re-solve after `used` GMRES steps of the same call: max_iter, when given, is what
/// is left of it (at least one step), so that max_iter bounds the call's steps.
StationaryOptions after_steps(const StationaryOptions& o, long used) {
  StationaryOptions r = o;
  if (o.max_iter > 0) r.max_iter = std::max(1L, o.max_iter - used);
  return r;
}
}  // namespace

/// Krylov with a recurrent fixed state; re-solved once from its own answer with
/// k = argmax pi when pi_k / max pi < 1e-8 (the reduced system's conditioning
/// grows like 1 / pi_k).
void solve_krylov_finished(const MarkovOperator& c, const StationaryOptions& o, StationaryResult& r, const Attempt& a) {
  const bool fail_fast = a.fail_fast;
  const auto blocks = c.block_partition();
  ReusedBlocks factors;  // every solve of this call factorises only the blocks its fixed state changes
  // The fixed state must be recurrent (on a chain with transient states, fixing one of
  // them makes the reduced system singular): the most probable state of x0 among the
  // states in recurrent_state's closed class, else recurrent_state.  (Keeping the cold
  // solve's fixed state under a warm start, so that only the start differs, was tried:
  // after a 1 % change of p_max GMRES took 13 iterations instead of 16, after one of mu 27
  // instead of 19, on GEO K = 4.)
  int32_t k = c.recurrent_state();
  if (!o.x0.empty()) {
    const std::vector<int32_t> keep = closed_class(c);  // empty: every state is recurrent
    int32_t best_x0 = -1;
    auto consider = [&](int32_t s) {
      if (best_x0 < 0 || o.x0[s] > o.x0[best_x0]) best_x0 = s;
    };
    if (keep.empty())
      for (int32_t s = 0; s < c.rows(); ++s) consider(s);
    else
      for (int32_t s : keep) consider(s);
    if (best_x0 >= 0 && o.x0[best_x0] > 0.0) k = best_x0;
  }
  if (o.x0.empty()) {
    // the first restart's iterate may show the fixed state (the empty system) far less probable
    // than others (a loaded chain): fix the most probable recurrent one and start again from it
    int32_t better = -1;
    const int32_t k0 = k;
    solve_krylov(c, blocks, k, o, r, fail_fast, &better, &factors);
    if (better >= 0) {
      const std::vector<int32_t> keep = closed_class(c);
      if (keep.empty() || std::binary_search(keep.begin(), keep.end(), better)) k = better;
      const auto requested = r.requested;
      const auto accounts = r.seconds;
      const int first_iterations = r.iterations;
      const long first_apps = r.operator_applications;
      StationaryOptions o2 = after_steps(o, first_iterations);
      o2.x0 = std::move(r.pi);
      r = StationaryResult{};
      r.requested = requested;
      solve_krylov(c, blocks, k, o2, r, fail_fast, nullptr, &factors);
      r.iterations += first_iterations;
      r.operator_applications += first_apps;
      for (auto it = accounts.rbegin(); it != accounts.rend(); ++it)
        r.seconds.insert(r.seconds.begin(), {"first_" + it->first, it->second});
      if (k != k0)
        r.note = detail::cat("state ", k, " fixed (an iterate put state ", k0, " below ", kFixedStateRatio,
                             " of it)") + (r.note.empty() ? "" : "; " + r.note);
    }
  } else {
    solve_krylov(c, blocks, k, o, r, fail_fast, nullptr, &factors);
  }
  finish(c, r, o.tol);
  const bool negative_mass =
      std::any_of(r.extra.begin(), r.extra.end(), [](const auto& e) { return e.first == "negative_mass"; });
  if (!r.converged() && negative_mass) {
    // The fixed state is so improbable that the iterates lost their sign (e.g. the empty
    // system of a heavily loaded REDwM chain, pi_k ~ 1e-77): fix a probable recurrent
    // state of a cheap estimate instead (as the direct method does from the start).
    StationaryResult again;
    again.requested = r.requested;
    const std::vector<int32_t> keep = closed_class(c);
    int32_t k2 = probable_state(c, o, again);
    if (!keep.empty() && !std::binary_search(keep.begin(), keep.end(), k2)) k2 = k;
    if (k2 != k) {
      const auto accounts = again.seconds;
      const long apps = again.operator_applications;
      again = StationaryResult{};
      again.requested = r.requested;
      solve_krylov(c, blocks, k2, after_steps(o, r.iterations), again, fail_fast, nullptr, &factors);
      finish(c, again, o.tol);
      again.iterations += r.iterations;
      again.operator_applications += r.operator_applications + apps;
      for (const auto& [phase, sec] : accounts) again.seconds.insert(again.seconds.begin(), {phase, sec});
      for (const auto& [phase, sec] : r.seconds) again.seconds.insert(again.seconds.begin(), {"first_" + phase, sec});
      again.note = detail::cat("re-solved with state ", k2, " fixed (with state ", k,
                               " fixed an iterate had non-positive mass)") + (again.note.empty() ? "" : "; " + again.note);
      r = std::move(again);
      k = k2;
    }
  }
  const long steps_left = (o.max_iter > 0 ? o.max_iter : kDefaultSteps) - static_cast<long>(r.iterations);
  if (!r.converged() && o.krylov_basis < kStallBasis && r.residual > kStallRetryResidual && steps_left > 0 &&
      static_cast<double>(c.rows()) * kStallBasis * sizeof(double) <= kStallBasisBytes) {
    // Restarted GMRES stalls (or loses the iterate's sign) where a longer basis does not (ns-3's
    // RED at overload: GMRES(50) stalled at 5.9e-7, GMRES(150) converged in 79 steps): once more
    // with the longer basis, from the last iterate, its most probable state fixed
    StationaryOptions o3 = o;
    o3.krylov_basis = kStallBasis;
    o3.max_iter = static_cast<int>(steps_left);  // within the caller's max_iter
    o3.x0 = r.pi;
    const std::vector<int32_t> keep = closed_class(c);
    int32_t k3 = k;
    for (int32_t s2 = 0; s2 < c.rows(); ++s2)
      if ((keep.empty() || std::binary_search(keep.begin(), keep.end(), s2)) && o3.x0[s2] > o3.x0[k3]) k3 = s2;
    if (o3.x0[k3] > 0.0) {
      StationaryResult again;
      again.requested = r.requested;
      solve_krylov(c, blocks, k3, o3, again, fail_fast, nullptr, &factors);
      finish(c, again, o.tol);
      carry(r, again);
      again.note = detail::cat("GMRES(", o.krylov_basis, ") did not converge (residual ", r.residual,
                               "): re-solved with basis ", kStallBasis, " from its iterate") +
                   (again.note.empty() ? "" : "; " + again.note);
      r = std::move(again);
      k = k3;
    }
  }
  const auto it = std::max_element(r.pi.begin(), r.pi.end());
  const int32_t best = static_cast<int32_t>(it - r.pi.begin());
  if (!(r.pi[k] < 1e-8 * *it) || best == k) return;
  StationaryOptions o2 = after_steps(o, r.iterations);
  o2.x0 = r.pi;
  StationaryResult again;
  again.requested = r.requested;
  solve_krylov(c, blocks, best, o2, again, fail_fast, nullptr, &factors);
  finish(c, again, o.tol);
  carry(r, again);
  again.note = detail::cat("re-solved with the most probable state fixed (the first had pi_k / max pi = ",
                           r.pi[k] / *it, ")") + (again.note.empty() ? "" : "; " + again.note);
  r = std::move(again);
}

template <>
const MethodSolver& method_solver<Method::Krylov>() {
  static const MethodSolver entry{solve_krylov_finished, /*whole_chain=*/true, /*fails_fast=*/true};
  return entry;
}

}  // namespace aqm::detail

namespace aqm {
WarmStateInfo warm_state_info(const WarmState& w) {
  WarmStateInfo i;
  i.states = w.n;
  i.vectors = static_cast<int>(w.U.size());
  i.bytes = 8.0 * static_cast<double>(i.vectors) * w.n;
  return i;
}
}  // namespace aqm
