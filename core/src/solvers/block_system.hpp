// Internal: the preconditioned iterative solver shared by the stationary krylov
// method and the rational Krylov exponential.
//
// BlockSystem is a nonsingular M-matrix B = a I - b M^T, where M is a chain's
// matrix (P or G, rows = from-state), so that B x = r is the row-vector system
// y (a I - b M) = r transposed.  It is kept at full size over block-ordered
// indices (states regrouped by a block partition, by state index inside a
// block), each row split into the part left of its block, inside it and right
// of it, with every diagonal block LU-factorised once as a band matrix without
// pivoting (principal submatrices of a column diagonally dominant M-matrix need
// none).  One state may be fixed: its row and column are replaced by the
// identity and its column moves to a right-hand side.
//
//   - stationary krylov: B = (I - P)^T with a recurrent state fixed (a = b = 1);
//   - rational Krylov: B = (I - gamma G)^T, i.e. a = 1, b = gamma for a
//     generator, a = 1 + gamma, b = gamma for a slotted chain's G = P - I.
//     Every column of B then sums to 1 (B is strictly diagonally dominant by
//     columns) and B^{-1} is non-negative with column sums 1.
//
// The preconditioner is symmetric block Gauss-Seidel, M = (D + L) D^{-1} (D + U')
// over the blocks (U' = U without the far entries of the rows that gather many: up_end), solved with their LU factors (a band LU, or a sparse LU in a fill-reducing
// order where the band would be wide and mostly empty: BlockLU), formed in double and kept
// in single precision (exact for a system of one block), L and U' read from copies of their
// own in single precision too where each holds at most copy_share of B's entries or at least
// copy_over_blocks times the numbers of the blocks' factors (lv, uv);
// Gmres is restarted GMRES
// (Saad & Schultz 1986) with right preconditioning, block modified Gram-Schmidt (block_mgs)
// and Givens rotations, stopping on a quantity the caller defines from the true
// residual.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace aqm::detail {

/// A diagonal block's sparse LU without pivoting: C(perm, perm) = L U, perm from AMD on the
/// pattern of C + C^T, L (unit lower) and U (upper) on the symmetric pattern of the Cholesky
/// factor of C(perm, perm) + C(perm, perm)^T (so no pivot is ever needed for a fill the pattern
/// lacks).  A column diagonally dominant M-matrix needs no pivoting, as for the band LU.
struct SparseLU {
  int32_t size = 0;
  std::vector<int32_t> perm;        ///< perm[new] = old (block-local indices)
  std::vector<int32_t> cp, ri;      ///< the pattern by columns of L: column j's rows ri[cp[j] .. cp[j + 1]) (> j, ascending)
  /// L_ij and U_ji at each pattern entry (i, j), formed in double and kept in single
  /// precision (the solves compute in double): the preconditioner stays a fixed linear map,
  /// and the sweeps, which stream the factors from memory, read 12 bytes an entry instead of
  /// 20.  A system of one block keeps them in double (lxd, uxd): its preconditioner is then
  /// the exact solve.
  std::vector<float> lx, ux;
  std::vector<double> lxd, uxd;
  std::vector<double> inv_diag;     ///< 1 / U_jj
  /// The pattern of the factors of the block C (CSR over block-local indices: rows rp, columns ci),
  /// without values: the entries of L strictly below the diagonal.
  static SparseLU symbolic(int32_t size, const std::vector<int32_t>& rp, const std::vector<int32_t>& ci);
  /// The factors of C (values v on symbolic's pattern rp, ci), kept in double when `exact`;
  /// SolverError naming row `first_row + i` on a zero or non-finite pivot.
  void factor(const std::vector<int32_t>& rp, const std::vector<int32_t>& ci, const std::vector<double>& v,
              int32_t first_row, bool exact = false);
  int64_t entries() const { return static_cast<int64_t>(ri.size()); }
  /// x <- C^{-1} x.
  void solve(double* x) const;
};

/// A diagonal block, LU-factorised without pivoting: in band storage, or sparse (`sparse`
/// non-empty) where the band is wide and mostly empty (block_system chooses).  The factors
/// are formed in double and kept in single precision, but for a system of one block (see
/// SparseLU).
struct BlockLU {
  int32_t start = 0, size = 0, p = 0, q = 0;  // first row, rows, lower and upper bandwidth
  std::vector<double> a;                        // a[i * (p + q + 1) + (j - i + p)]: the block, then its band LU
                                                // when kept in double (else released by factor())
  std::vector<float> f;                         // the band LU in single precision, laid out as `a`
  std::vector<double> inv_diag;                 // 1 / U_ii (after factor())
  SparseLU sparse;                              // used when sparse.size > 0
  bool is_sparse() const { return sparse.size > 0; }
  int w() const { return p + q + 1; }
  double& at(int32_t i, int32_t j) { return a[static_cast<size_t>(i) * w() + (j - i + p)]; }
  double at(int32_t i, int32_t j) const { return a[static_cast<size_t>(i) * w() + (j - i + p)]; }
  /// The band LU of `a`, in double (and the reciprocals of U's diagonal), kept in `a` when
  /// `exact`, else in `f` (`a` released).  SolverError on a zero or non-finite pivot.
  void factor(bool exact = false);
  /// x <- D^{-1} x.
  void solve(double* x) const;
  /// Numbers stored by the factors (band: size x bandwidth; sparse: twice L's entries + size).
  int64_t storage() const;
};

struct BlockSystem {
  int32_t n = 0;
  int32_t K = -1;                          ///< fixed state (block-ordered index), -1: none
  std::vector<int32_t> perm, inv;          ///< perm[new] = old, inv[old] = new
  std::vector<int32_t> rp, ci, lo_end, up_begin, bstart;
  std::vector<double> v;                   ///< B in CSR over block-ordered indices
  /// The end of the part of row j's U = [up_begin[j], rp[j + 1]) that the backward sweeps read:
  /// rp[j + 1], or, for a row that gathers at least `wide_row` entries from states more than
  /// `far_states` after it (block order), its first such entry: the backward sweeps then use
  /// U' = U without those entries (set by schedule_levels; see far_states).
  std::vector<int32_t> up_end;
  /// The rule for up_end.  A row fed from thousands of states spread over the whole chain (the
  /// drop resets of count or wait spacing: every value of the spacing component jumps back to
  /// its first) gathers each of them from another part of the vector, at several times the cost
  /// of a near entry; left out of the backward sweeps, they cost GMRES one or two steps
  /// (docs/performance.md).  0: nothing is left out.
  int32_t far_states = 4096, wide_row = 256;
  /// L and U' copied row after row, their values in single precision like the blocks' factors
  /// (set by schedule_levels), each when it holds at most copy_share of B's entries or at least
  /// copy_over_blocks times the numbers of the blocks' factors (else empty:
  /// the sweeps read B's rows): row j's entries [rp[j], lo_end[j]) are lci / lv[lrp[j] ..
  /// lrp[j + 1]), its entries [up_begin[j], up_end[j]) uci / uv[urp[j] .. urp[j + 1]).  In B's
  /// rows these entries sit among the diagonal blocks' and the far ones, so that each sweep
  /// streamed the whole matrix.  8 bytes an entry copied.
  std::vector<int32_t> lrp, lci, urp, uci;
  std::vector<float> lv, uv;
  /// The rule for the copies: a part holding at most a third of B's entries reads at most a
  /// third of the bytes from its copy.  Measured (docs/performance.md): the GEO count chain
  /// (6 % and 23 % of its entries in L and U') went from 6.7 to 5.3 s; plain SSMP RED (K = 16,
  /// 4.4M states, 40 % in each) from 5.9 s to 7.0 s with both copied, and took 0.36 GB more:
  /// first touching the copies lengthened its set-up by about 1 s, the sweeps gained 0.3 s over
  /// the solve.  0: nothing copied by this rule; 1: both.
  double copy_share = 1.0 / 3.0;
  /// A part is also copied when it holds at least copy_over_blocks times the numbers of the
  /// blocks' factors (block_storage()): a sweep then spends far more on gathering that part
  /// than on the block solves, so that reading it from a copy pays.  Measured
  /// (docs/performance.md): geo_adaptive_auto's U' (61 % of B's entries, 3.0 times its band-3
  /// blocks' numbers) copied took its solve from 5.25-5.87 s to 4.99-5.07 s; ssmp_adaptive's
  /// (64 %, 1.3 times its band-15 blocks') copied took 1.17 GB more and no time off; SSMP
  /// K = 16's parts hold 0.36 times its blocks'.  0: never.
  double copy_over_blocks = 2.0;
  int64_t up_left_out() const;             ///< entries of U the backward sweeps leave out
  int32_t up_rows_cut() const;             ///< rows they are left out of
  std::vector<double> b;                   ///< right-hand side from the fixed state's column (empty without)
  std::vector<BlockLU> blocks;
  mutable long precond_applications = 0;
  /// An optional coarse space (set_coarse): the preconditioner is then the multiplicative
  /// two-level one, a Galerkin correction on the coarse space, then a backward and a forward
  /// block sweep (precond_two_level).  group[i] (block-ordered i) in 0 .. G - 1, w the prolongation's
  /// weights (summing to 1 over each group), lu the sparse LU of A_c = R B P (G x G).
  struct CoarseLU;  ///< the sparse LU of A_c (block_system.cpp)
  struct Coarse {
    int32_t G = 0;
    std::vector<int32_t> group;
    std::vector<double> w;
    std::shared_ptr<const CoarseLU> lu;
    /// B P (n x G, CSR: a row's entries are the groups its columns fall in): the correction's
    /// image, so that the residual after it costs no product with B
    std::vector<int32_t> bp_rp, bp_g;
    std::vector<double> bp_v;
  };
  Coarse coarse;
  /// The level schedule of the block sweeps (wavefronts; set by block_system).  Block J
  /// depends on block I in the forward sweep when a row of J has an entry in a column of I
  /// left of J (I < J), in the backward sweep when it has one of U' right of J (I > J); a block's
  /// level is 1 + the largest level of the blocks it depends on (0 without any).  The blocks
  /// of one level are independent: solved in parallel, each with the arithmetic of the
  /// sequential sweep (which reads every dependency's final value in both orders), so the
  /// parallel sweep gives the sequential one's result bit for bit.
  struct Levels {
    std::vector<int32_t> ptr;     ///< the blocks of level l: block[ptr[l] .. ptr[l + 1])
    std::vector<int32_t> block;   ///< increasing inside a level
    std::vector<int32_t> level;   ///< level of each block
    int64_t work = 0;             ///< sweep work (rows x (bandwidth + 1) + off-block entries), all levels
    double speedup2 = 1.0;        ///< predicted gain of two threads (see kMinSweepSpeedup)
    bool parallel = false;        ///< the rule's choice: sweep by levels when threads allow
    /// The sweeps' own clock (automatic schedule, rule chose levels): the last sequential and
    /// level sweep's seconds, and the sequential sweeps left before levels are tried again
    /// (a level sweep slower than the sequential one: another process holds a core).
    mutable double seq_seconds = 0.0, level_seconds = 0.0;
    mutable int hold = 0, next_hold = 0, since_sequential = 0;
    mutable long level_sweeps = 0;  ///< sweeps run by levels on more than one thread
    int32_t count() const { return ptr.empty() ? 0 : static_cast<int32_t>(ptr.size()) - 1; }
  };
  Levels forward_levels, backward_levels;
  /// Compute up_end (by far_states and wide_row), the copies of L and U' (by copy_share and
  /// copy_over_blocks), then forward_levels and backward_levels from the split rows and the
  /// blocks (block_system calls it; a caller that edits rp / ci / v / lo_end / up_begin /
  /// far_states / wide_row / copy_share / copy_over_blocks calls it again).
  void schedule_levels();
  /// prp / pci / pv: the entries [begin[j], end[j]) of every row j, copied row after row, when
  /// they are at most `most` or at least `least` (else all three emptied).
  void copy_rows(const int32_t* begin, const int32_t* end, double most, double least, std::vector<int32_t>& prp,
                 std::vector<int32_t>& pci, std::vector<float>& pv) const;
  /// Seconds spent in precond (both sweeps and any coarse correction), and in the block sweeps
  /// alone, all applications.
  mutable double precond_seconds = 0.0, sweep_seconds = 0.0;
  /// The coarse space of the groups `group_of` (original state index -> group, G groups)
  /// with prolongation weights from the vector z (original order; its positive part,
  /// normalised per group; a group without positive mass gets uniform weights).  False (and
  /// no coarse space) when A_c is singular.
  bool set_coarse(const std::vector<int32_t>& group_of, int32_t G, const std::vector<double>& z);
  /// The most groups set_coarse takes (its coarse matrix is summed in dense G x G tables).
  static constexpr int32_t kMaxCoarseGroups = 1024;

  /// y = B x (block-ordered vectors), a gather over rows split over threads.
  void matvec(const double* x, double* y) const;
  /// z = M^{-1} r, one forward and one backward block sweep.
  void precond(const double* r, double* z) const;
  /// z = (D + L)^{-1} r and z = (D + U')^{-1} r: one forward or backward block sweep (U': up_end).
  void forward_sweep(const double* r, double* z) const;
  void backward_sweep(const double* r, double* z) const;
  /// The backward sweep keeping, in s, the right-hand side each block was solved for (r - U' z).
  void backward_sweep_keep(const double* r, double* z, double* s) const;
  /// The two-level preconditioner (coarse set): coarse correction, backward sweep, forward sweep.
  void precond_two_level(const double* r, double* z) const;
  mutable std::vector<double> scratch_s_, scratch_y_;  ///< precond_two_level's s and y
  /// Which schedule the sweeps follow: automatic (the rule), or forced sequential or by levels
  /// (tests comparing the two).
  enum class Schedule { Automatic, Sequential, Levels };
  Schedule schedule = Schedule::Automatic;
  /// How the next sweep over `lv` runs: 0, the sequential loop in block order; k >= 1, level by
  /// level on k threads (Automatic: by levels only when the rule chose it and the thread layer
  /// gives more than one thread now).
  int sweep_threads(const Levels& lv) const;
  int band_width() const;        ///< largest p + q + 1 of the band-stored blocks
  int32_t sparse_blocks() const; ///< blocks factorised sparsely
  int64_t block_storage() const; ///< numbers the blocks' factors hold (BlockLU::storage)
  int32_t largest_block() const;
};

/// Diagonal blocks factorised for the same matrix and block order with another fixed state
/// (a re-solve with a better one): block_system takes over every block that contains
/// neither fixed state instead of factorising it again.
struct ReusedBlocks {
  std::vector<BlockLU> blocks;
  int32_t K = -1;        ///< the fixed state they were factorised with (block-ordered)
  uint64_t order = 0;    ///< hash_indices of that system's perm
  int32_t taken = 0;     ///< blocks the last block_system took over
};

/// FNV-1a over the entries of a vector of indices (with its size), continuing from h.
uint64_t hash_indices(const std::vector<int32_t>& v, uint64_t h = 1469598103934665603ULL);

/// B = a I - b M^T for M in CSR (n states, rows = from-state), regrouped by
/// `block_of` (block_of[s] in 0 .. nblocks - 1), with state `fixed` (an original
/// index; -1 for none) replaced by the identity and the right-hand side
/// rhs_j = b M_{fixed, j}.  B must be column diagonally dominant.  With
/// max_band_entries > 0, ModelError naming 'blocks' when the blocks' factors (band:
/// size x bandwidth, sparse: BlockLU::storage) would exceed it.  With a finite row_total (every row of M
/// sums to it: 1 for a stochastic matrix), the diagonal a - b M_jj is formed as
/// a - b row_total + b sum_{l != j} M_jl: no cancellation for a state that M leaves with
/// a probability near round-off (a = b = 1: the exit probability itself).  M's entries are
/// read as val / divisor (a generator G read as its uniformised P's off-diagonal G / Lambda).
/// `reuse` (optional): blocks of an earlier system of the same M, a, b and block_of (ReusedBlocks).
BlockSystem block_system(int32_t n, const int32_t* rowptr, const int32_t* col, const double* val,
                         const std::vector<int32_t>& block_of, double a, double b, int32_t fixed,
                         int64_t max_band_entries = 0, double row_total = std::nan(""), double divisor = 1.0,
                         ReusedBlocks* reuse = nullptr);

/// A recycled subspace for GMRES: directions U of the unknown (block-ordered) with C = B U
/// orthonormal.  A solve given one minimises the residual over x0 + span(U) + the Krylov
/// space of the deflated operator (I - C C^T) B M^{-1} (GCRO with a fixed recycled space:
/// Parks, de Sturler, Mackey, Johnson & Maiti, "Recycling Krylov subspaces for sequences of
/// linear systems", 2006): the modes U holds (the slow ones of an earlier solve of a nearby
/// system) no longer slow GMRES down.  Any U gives the same answer, to the same stopping
/// test; only the iterations differ.
struct Recycled {
  std::vector<std::vector<double>> U, C;
  std::vector<double> usum;  ///< sum of each column of U (the stopping test's scale)
  int k() const { return static_cast<int>(U.size()); }
  /// From the directions `dirs` (block-ordered, n entries each; the fixed state's entry is
  /// zeroed): C = B U (one product each) orthonormalised by modified Gram-Schmidt, twice, U
  /// transformed alike; a direction whose image is dependent on the earlier ones is dropped.
  static Recycled make(const BlockSystem& B, std::vector<std::vector<double>> dirs);
};

/// w -= V[0..count) V[0..count)^T w (count >= 1) for orthonormal V (the GMRES basis), by block modified
/// Gram-Schmidt with blocks of 4 vectors (block_system.cpp); h[0..count) the coefficients.
/// Returns ||w||^2 after.  The threads' partial sums are added in thread order: the same
/// thread count gives the same numbers.
double block_mgs(const std::vector<std::vector<double>>& V, int count, double* w, double* h, int32_t n);
/// The same over the basis vectors V[0..count) given by their first entries (n each).
double block_mgs(const double* const* V, int count, double* w, double* h, int32_t n);

/// Restarted right-preconditioned GMRES on a BlockSystem, with its workspace
/// (basis size + 1 vectors of n entries) kept between solves.

class Gmres {
 public:
  /// What a solve stops on: converged when measure(x, res) <= target for an
  /// iterate x with the true residual res = rhs - B x.  Inside a cycle, the
  /// 2-norm estimate |g_{j+1}| is compared with fac * target * scale(sum of the
  /// candidate's entries) (scale empty: 1) before the true residual is formed.
  /// fac starts at fac0; each time a candidate fails the true test it drops
  /// tenfold, or (learn_ratio) to half the level the failed candidate's ratio of
  /// measure to estimate asks for (at least halving).
  struct Test {
    double target = 0.0;
    std::function<double(const std::vector<double>& x, const std::vector<double>& res)> measure;
    std::function<double(double sum)> scale;
    double fac0 = 1.0;
    bool learn_ratio = false;
    /// Called with the iterate at each restart, before its residual is formed (the
    /// stationary solver re-weighs its coarse space there).
    std::function<void(const std::vector<double>& x)> at_restart;
  };
  struct Limits {
    long max_iter = 2000;      ///< GMRES steps (each: one preconditioner application and one product)
    long max_products = 0;     ///< products with B, residuals included (0: no limit)
    int stall_restarts = 10;   ///< stalled when the measure falls by less than 1 % in this many restarts
    /// Fail fast (an attempt with a fallback behind it): from the 4th restart on, stop
    /// (stalled, `projected`) when the rate of the last 3 restarts cannot reach the
    /// target within max_iter, with a margin of 2.
    bool fail_fast = false;
  };
  struct Outcome {
    long iterations = 0;       ///< GMRES steps
    long products = 0;         ///< products with B (steps and true residuals)
    double measure = 0.0;      ///< the measure of the returned x
    bool converged = false, stalled = false, out_of_products = false;
    bool projected = false;    ///< stalled by the fail-fast projection
    double projected_steps = 0.0;  ///< the steps the projection said were still needed
  };

  Gmres(int32_t n, int basis);
  /// Solve B x = rhs from the initial x (block-ordered, n entries); x receives the
  /// last accepted iterate.  With a fixed state, x[K] is kept at 0.  With `recycled`
  /// (C = B U for this B), x first takes the part of the residual C can remove, and every
  /// cycle runs on the deflated operator (see Recycled).
  Outcome solve(const BlockSystem& B, const double* rhs, std::vector<double>& x, const Test& test,
                const Limits& limits, const Recycled* recycled = nullptr);
  /// Keep the preconditioned directions M^{-1} v_j of the first `steps` steps of each
  /// cycle (0: none, the default): harmonic_ritz() needs them.  `steps` vectors of n entries.
  void keep_directions(int steps) { keep_ = std::max(0, std::min(steps, m_)); }
  /// After a solve: up to k harmonic Ritz vectors of the preconditioned operator (of its
  /// deflated form under a recycled space) with the smallest harmonic Ritz values, from the
  /// Arnoldi relation of the last cycle's first min(steps, keep_directions) steps, mapped to
  /// the unknown's space (U = Z g; a complex pair gives its real and imaginary parts).
  /// Empty when fewer than 2 steps were kept.  (Morgan, "GMRES with deflated restarting",
  /// 2002; the choice of GCRO-DR.)
  std::vector<std::vector<double>> harmonic_ritz(int k) const;

 private:
  /// V_j = w / norm (allocated the first time).
  void new_basis_vector(int j, const double* w, double norm);

  int32_t n_;
  int m_;
  int keep_ = 0, cycle_steps_ = 0;
  /// The basis: vectors of n entries allocated as the basis grows and left uninitialised (each
  /// is written whole, on the threads, before it is read).
  std::vector<std::unique_ptr<double[]>> V_;
  std::vector<const double*> Vp_;
  std::vector<std::vector<double>> Z_;
  std::vector<double> H_, Hraw_, E_, cs_, sn_, g_, y_, zsum_, res_, w_, z_, xc_, hcol_;
};

}  // namespace aqm::detail
