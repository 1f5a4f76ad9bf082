// Internal: multilevel aggregation solver (see multilevel.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "aqmchain/solvers/stationary.hpp"
#include "aqmchain/threads.hpp"

namespace aqm::detail {
/// One forward Gauss-Seidel sweep on x_j = sum_{i != j} P_ij x_i / e_j with P^T in CSR
/// (rp, ci, v) and e_j = sum_{l != j} P_jl the probability of leaving j (see
/// exit_probabilities), followed by normalisation to sum 1 when `normalised` (a run of sweeps
/// may normalise after its last: the sweep is linear in x).  States with e_j = 0 (absorbing)
/// keep their value.  Shared by the Gauss-Seidel method and the multilevel smoother.  On
/// more than kParallelLoopItems states it runs over the library's threads (loop_threads()): the states
/// split into as many contiguous ranges, each swept in order with the other ranges' values
/// from the sweep's start (one thread: the plain sweep).
void gauss_seidel_sweep(int32_t n, const int32_t* rp, const int32_t* ci, const double* v, const double* exit,
                        std::vector<double>& x, bool normalised = true);

/// x /= sum(x), over the library's threads (the sum in a fixed order: the same on any number).
void normalise(std::vector<double>& x);

/// e_j = sum_{l != j} P_jl for P^T in CSR (rp, ci, v): the diagonal of I - P without the
/// cancellation of 1 - P_jj, which loses a state left with probability near round-off
/// (1 - 1e-300 is stored as 1).
std::vector<double> exit_probabilities(int32_t n, const int32_t* rp, const int32_t* ci, const double* v);

/// Fills r.pi (not normalised residual accounting: the caller finishes), r.iterations,
/// r.operator_applications, r.seconds and r.extra.
/// `fail_fast` (auto, with a fallback behind): stalled when the residual has not halved in
/// 20 cycles (else 100), or once the rate of the last 10 cycles cannot reach tol within
/// max_iter (with a margin of 2).
/// A coarsening that stalls above the dense coarsest solve's size throws CoarseningStalled, or with
/// `sweep_stalled_coarsest` (at least one coarser level, at most 10,000 states) leaves that
/// level solved by Gauss-Seidel sweeps (r.extra "coarsest_sweeps": their number, 0 for the
/// exact solve).
/// `hand_over_cycles` (with fail_fast; 0: none): stops (status stalled, r.extra
/// "projected_cycles": the cycles still needed) once the rate of the last 10 cycles projects
/// more cycles than this in all (a projection past twice the cycles left of max_iter stops it
/// early as before, without "projected_cycles").
void solve_multilevel(const MarkovOperator& c, const StationaryOptions& o, StationaryResult& r, bool fail_fast = false,
                      bool sweep_stalled_coarsest = false, long hand_over_cycles = 0);

/// Multilevel's refusal of a coarsening that stalled above the dense coarsest solve's size.
/// `sweepable`: the level could have been swept (sweep_stalled_coarsest would have run it).
class CoarseningStalled : public SolverError {
 public:
  CoarseningStalled(const std::string& what, bool sweepable) : SolverError(what), sweepable(sweepable) {}
  bool sweepable;
};
}  // namespace aqm::detail
