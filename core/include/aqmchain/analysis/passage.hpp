// First passage of a chain into a target set of states (docs/passage.md):
// T = min{t >= 0 : X_t in target}, with the law of X_0 given.
//
//   - cdf(t) = P(T <= t) and the survival S(t) = 1 - cdf(t) at sorted output times;
//   - the reach probability P(T < inf) and the mean E[T] (inf when P(T < inf) < 1);
//   - expected rewards accumulated before T (r(X_0) + ... + r(X_{T-1}) in slots, the
//     integral of the rate r(X_s) over [0, T) in continuous time) and the expected
//     rewards accumulated over [0, t) without stopping at T (continuous time: from
//     Poisson's equation, analysis/poisson.hpp).
//
// Slotted chains: u_t = p0_N P_NN^t over the non-target states N, S(t) = 1^T u_t.
// "step" multiplies by P_NN slot by slot (exact).  "quasi_stationary" steps until
// the conditioned law u_t / S(t) is within a rigorous bound of the quasi-stationary
// law v (the left Perron vector of P_NN, computed by inverse iteration with
// preconditioned GMRES), then S(t0 + s) = S(t0) rho^s with the absolute error
//     S(t0) (||u_t0 / S(t0) - v||_1 + ||v P_NN - rho v||_1 min(s, 1 / (1 - rho)))
// (after Darroch and Seneta, "On quasi-stationary distributions in absorbing
// discrete-time finite Markov chains"; P_NN is substochastic, so ||P_NN^s||_inf <= 1).
// "rational_krylov" steps `exact_slots` slots (damping the fast modes), then evaluates
// 1^T u_t0 P_NN^s for every later output from one shift-and-invert Krylov space
// (solvers/power_krylov.hpp; an a posteriori estimate, not a bound).
// Continuous time: p0 exp(t G') for the generator G' with the target made absorbing,
// by the transient kernels (solvers/transient.hpp); cdf(t) is the mass on the target.
//
// Mean and accumulated rewards: z (I - P_NN) = p0_N (continuous: z (-G_NN) = p0_N),
// the expected visits (time) in each non-target state before T, by GMRES with the
// block Gauss-Seidel preconditioner; E[T] = 1^T z, E[reward before T] = z^T r, and
// P(T < inf) = p0(target) + z^T b with b the one-step (rate) flow into the target.
// States that cannot reach the target (graph search) are excluded from the solve
// (their mass is the probability of never reaching it).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "aqmchain/model/queue_chain.hpp"
#include "aqmchain/solvers/report.hpp"
#include "aqmchain/solvers/transient.hpp"

namespace aqm {

enum class PassageMethod {
  Auto,             ///< slotted: rational_krylov (step when the last time is within the exact slots);
                    ///< continuous: uniformization / rational_krylov (as transient)
  Step,             ///< slotted: exact products with P_NN, one per slot
  QuasiStationary,  ///< slotted: stepping, then the quasi-stationary tail with a rigorous bound
  Krylov,           ///< continuous: Arnoldi exponential of the absorbing generator
  RationalKrylov,   ///< slotted: exact slots, then P_NN^s by a shift-and-invert Krylov space (one basis for
                    ///< every later time); continuous: shift-and-invert Krylov exponential
  Uniformization,   ///< continuous: uniformisation
};
inline constexpr PassageMethod kAllPassageMethods[] = {PassageMethod::Auto,           PassageMethod::Step,
                                                       PassageMethod::QuasiStationary, PassageMethod::Krylov,
                                                       PassageMethod::RationalKrylov, PassageMethod::Uniformization};
std::string to_string(PassageMethod);
/// The method called `name`; OptionError otherwise.
PassageMethod passage_method_from(const std::string& name);

struct PassageAnalysisOptions {
  PassageMethod method = PassageMethod::Auto;
  /// Target on the absolute error of cdf(t) at every output time, in (0, 0.1]
  /// (quasi_stationary: its bound; the kernels: their tol).
  double tol = 1e-10;
  /// Budget of slots stepped (step, quasi_stationary), in [1, 1e12]; the kernels' steps
  /// are TransientOptions::max_steps.
  int64_t max_steps = 100000000;
  /// Linear solves (mean, rewards, quasi-stationary law): stop when the L1 residual is at
  /// most solve_tol times the right-hand side's, in [1e-16, 1e-4].
  double solve_tol = 1e-13;
  /// GMRES steps allowed to one linear solve, in [1, 1e7].
  long solve_max_iter = 20000;
  /// quasi_stationary: the conditioned law is compared with v every this many slots, in [1, 1e6].
  int64_t check_every = 256;
  /// quasi_stationary: inverse iterations for v at most, in [1, 1000].
  int max_inverse_iterations = 60;
  /// rational_krylov (slotted): slots stepped exactly before the Krylov tail (0: automatic,
  /// 1024), in [0, 1e12].
  int64_t exact_slots = 0;
  /// rational_krylov (slotted): the shift gamma of (I - gamma (P - I))^{-1} (0: automatic,
  /// the slots stepped exactly), in [0, 1e12].
  double shift = 0.0;
  /// rational_krylov (slotted): largest Krylov basis, in [2, 1000].
  int krylov_dim = 80;
  /// Options of the continuous-time kernels (their tol is set to `tol`).
  TransientOptions kernel;
  /// Rewards: one value per state (per slot, or a rate in continuous time).
  std::vector<std::string> reward_names;
  std::vector<std::vector<double>> rewards;
  /// Compute the unstopped accumulated rewards over [0, t).
  bool cumulative = true;
  /// Called after each output time with (time, last time), on the computing thread.
  std::function<void(double, double)> progress;
  void validate() const;
};

struct PassageAnalysis : ConvergenceReport<PassageMethod> {
  std::vector<double> times;
  std::vector<double> cdf, survival;  ///< P(T <= t), P(T > t)
  std::vector<double> error_bound;    ///< bound (quasi_stationary, step, uniformization) or estimate (Krylov) on |cdf error|
  size_t outputs = 0;                 ///< times[0 .. outputs) were produced
  double reach_probability = 0.0;     ///< P(T < inf)
  double never_probability = 0.0;     ///< mass on states from which the target cannot be reached
  double mean = 0.0;                  ///< E[T] (inf when reach_probability < 1)
  double mean_residual = 0.0;         ///< L1 residual of the solve for z, relative to ||p0_N||_1
  std::vector<std::string> reward_names;
  std::vector<double> rewards_until;                ///< E[rewards accumulated before T]
  std::vector<std::vector<double>> rewards_cumulative;  ///< [i][k]: E[rewards over [0, times[k])] (slotted: sums, continuous: integrals)
  double cumulative_error = 0.0;      ///< estimate of the cumulative rewards' error (per unit reward)
  int32_t states = 0, target_states = 0, never_states = 0;
  double rho = 0.0;                   ///< quasi_stationary: the decay factor per slot of S(t) (0 if not computed)
  double qsd_residual = 0.0;          ///< ||v P_NN - rho v||_1
  double switch_time = -1.0;          ///< slot from which the tail is extrapolated (-1: never)
  long inverse_iterations = 0, solves = 0, gmres_iterations = 0;
  int basis = 0;                      ///< rational_krylov (slotted): basis size used
  double gamma = 0.0;                 ///< its shift
  long steps = 0;                     ///< slots stepped / kernel steps
};

/// First passage of `chain` into the states with target[s] != 0, from the law p0 (n
/// entries, a probability vector; ModelError naming 'p0'), at the sorted output times
/// (slotted: whole slots).  ModelError naming 'to' when the target is empty or cannot be
/// reached from p0.  Non-convergence is the status, with the outputs produced so far.
PassageAnalysis analyse_passage(const QueueChain& chain, const std::vector<char>& target,
                                const std::vector<double>& p0, const std::vector<double>& times,
                                const PassageAnalysisOptions& options = {});

}  // namespace aqm
