// Internal: preconditioned GMRES on the reduced stationary system (see krylov.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "aqmchain/solvers/stationary.hpp"
#include "solvers/block_system.hpp"

namespace aqm {
/// What a krylov solve leaves for a warm re-solve (aqmchain/solvers/stationary.hpp): the
/// block order it solved in (n and the hash of the permutation) and the recycled directions
/// (block-ordered).
struct WarmState {
  int32_t n = 0;
  uint64_t order = 0;
  std::vector<std::vector<double>> U;
};
}  // namespace aqm

namespace aqm::detail {

/// Solve pi P = pi with pi_k fixed (k recurrent) by restarted GMRES, right-
/// preconditioned by symmetric block Gauss-Seidel over `block_of` (MarkovOperator::block_partition), the
/// blocks solved with their LU factors kept in single precision (exact for one block).  Fills r.pi (unnormalised, pi_k = 1), r.iterations,
/// r.operator_applications, r.seconds, r.extra, r.note, r.status (the caller finishes).
/// `fail_fast` (auto, with a fallback behind): stalled after 3 restarts without progress, or
/// as soon as the rate of the last restarts cannot reach tol within max_iter.
/// `better_k` (optional): when an iterate measured at a restart (or as a candidate) puts the fixed
/// state below kFixedStateRatio of its most probable one, the solve stops there and sets
/// *better_k to that state (the reduced system's conditioning grows like 1 / pi_k).
/// `reuse` (optional): the diagonal blocks of an earlier solve of this chain, taken over where
/// the fixed state change leaves them alone; this solve's blocks are left there on return.
void solve_krylov(const MarkovOperator& c, const std::vector<int32_t>& block_of, int32_t k, const StationaryOptions& o,
                  StationaryResult& r, bool fail_fast = false, int32_t* better_k = nullptr,
                  ReusedBlocks* reuse = nullptr);

/// The components krylov's two-level preconditioner takes into its coarse space: those
/// outside the blocks that change less than 1e-2 as often as the fastest (measured on P),
/// when the groups of states sharing their values number 2 to 400 (0: no coarse space).
int coarse_components(const MarkovOperator& c);

/// The warm state's harmonic Ritz vectors come from the first this-many steps per vector of
/// the last cycle (kept during the solve: krylov_recycle x this vectors of n entries).
constexpr int kRitzStepsPerVector = 2;
/// A fixed state below this fraction of the most probable state's probability is replaced.
constexpr double kFixedStateRatio = 1e-8;
/// A stalled GMRES is run once more with this basis, when its vectors fit kStallBasisBytes.
constexpr int kStallBasis = 150;
constexpr double kStallBasisBytes = 2e9;
/// ... and only when its residual is above this (below, the target is at round-off: a longer
/// basis cannot help).
constexpr double kStallRetryResidual = 1e-13;

}  // namespace aqm::detail
