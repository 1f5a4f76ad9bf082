// Response time of an admitted packet by the tagged-packet absorbing chain (SPEC 5).
//
// The tagged packet's state after a slot boundary is (j, s): j packets ahead of
// it (j = 0: it is in service) and s = (n, avg, modulator), a state of the main
// chain.  Each slot follows SPEC 3 with the drop policy of SPEC 2.5 acting on
// real positions: under `front` the oldest waiting packet (position 1) is
// discarded, under `random` a uniformly chosen waiting packet; the tagged
// packet can be the victim (pushed out).  Absorption in "served" in slot A + r
// gives R = r.  The distribution is obtained by transient steps
// v_r = v_{r-1} T (sparse, row-vector convention) until the mass still in the
// system is below `tail_mass`.  Under `tail` the same chain reproduces the
// closed form of metrics.cpp, which the tests use as a cross-check.
#pragma once

#include <string>
#include <vector>

#include "aqmchain/solvers/report.hpp"
#include "aqmchain/model/queue_chain.hpp"

namespace aqm {

// The tagged-packet chain's state budget, kDefaultTaggedMaxStates and kTaggedMaxStatesMax
// (solver option `tagged_max_states`), is in state/chain.hpp beside the builder's.

struct ResponseOptions {
  double tail_mass = 1e-12;          ///< stop when the mass still in the system is below this
  long max_steps = 10000000;         ///< ... or after this many slots (status not converged)
  double memory_limit_bytes = 8.0 * 1024 * 1024 * 1024;
  /// Refuse (StateSpaceTooLarge naming tagged_max_states) a tagged chain with more states.
  int64_t max_states = kDefaultTaggedMaxStates;
  void validate() const;
};

enum class ResponseMethod { TaggedChain };
std::string to_string(ResponseMethod);

/// The report's residual is the mass still in the system when stepping
/// stopped; iterations and operator applications count the steps.
struct ResponseResult : ConvergenceReport<ResponseMethod> {
  std::vector<double> served_pmf;  ///< P(served with R = r), r = 0.. (index 0 is 0); sums to served_prob
  double admitted_rate = 0;      ///< packets entering the buffer per slot
  double served_prob = 0;        ///< P(an admitted packet is eventually served)
  double pushed_out_prob = 0;    ///< P(an admitted packet is later discarded)
  double mean_response = 0, var_response = 0;  ///< of R, given served
  double mean_sojourn = 0;       ///< boundaries spent in the system, served or pushed out
  double remaining_mass = 0;     ///< mass still in the system when stopped
  int64_t states = 0, nnz = 0;
};

/// Peak memory of a tagged-packet chain with this many states and about
/// `transitions_per_state` nonzeros per state (at most twice the chain's per state: a
/// stateful AQM has more than the plain chain's 16); what tagged_response checks against
/// memory_limit_bytes before allocating.
double tagged_chain_bytes(int64_t states, double transitions_per_state = 16.0);

/// States of the tagged-packet chain that compute_metrics(chain, pi, response) will build
/// (0 when it builds none: tail drop without response = "tagged", response = "none", batch
/// arrivals, an exact or window class chain where the two-class chain's is needed); for a
/// class chain of a class-blind slotted model, that of its lumped chain.  Exact, from the
/// chain's labels, before any solve.
int64_t tagged_states_needed(const QueueChain& chain, const std::string& response = "auto");

/// Refuse (StateSpaceTooLarge naming tagged_max_states or memory_limit_gb, with the value
/// that would do) when that tagged chain exceeds the options' budgets; returns its states.
int64_t check_tagged_budget(const QueueChain& chain, const std::string& response, const ResponseOptions& options);

/// Tagged-packet analysis for the chain's policy (tail, front or random).
ResponseResult tagged_response(const QueueChain& chain, const std::vector<double>& pi, const ResponseOptions& options = {});

/// A tagged-packet chain's rows (sub-stochastic T in CSR, rows = from, row-vector convention) and
/// the probabilities of absorption into "served" and "pushed out" per state.
struct TaggedRows {
  int64_t states = 0;
  std::vector<int32_t> rp, col;
  std::vector<double> val, served, pushed;
};

/// Transient steps v_r = v_{r-1} T from the tagged packet's normalised law v at the end of its
/// arrival slot until the mass still in the system is below options.tail_mass: R's pmf, moments
/// and the absorption probabilities into res (status NotConverged after max_steps).
void tagged_absorption(const TaggedRows& rows, std::vector<double> v, const ResponseOptions& options,
                       ResponseResult& res);

/// Continuous time: the tagged packet's absorption from its generator rows (`rows` holds rates:
/// the diagonal minus the exit rate, `served` and `pushed` the rates into the two absorbing
/// states; an empty row is a state never entered) by linear solves with A = -G_TT from the
/// normalised law v, one ILU(0)-preconditioned BiCGSTAB (on A^T) for each of z A = v (the
/// expected time in each state: P(served) = z served, P(pushed out) = z pushed, the sojourn
/// z 1), w A = z (E[R 1_served] = w served) and w2 A = w (E[R^2 1_served] = 2 w2 served).
/// Fills res (no pmf: R has a density) and returns true when every solve's relative L1
/// residual is at most 1e-12 (after up to three corrections x += A^-T (b - A^T x)); false
/// (res untouched) otherwise, or when A^T, its ILU(0) and the solver's vectors would exceed
/// options.memory_limit_bytes, or a row's columns are not sorted and merged; the caller then
/// steps the uniformised chain instead.
bool absorbing_moments(const TaggedRows& rows, const std::vector<double>& v, const ResponseOptions& options,
                       ResponseResult& res);
/// Continuous time: steps of the uniformised tagged chain tried before absorbing_moments (a
/// chain whose exit rates are far above its service rate needs tens of thousands of steps;
/// a slow one is absorbed within these, cheaper than the solves' preconditioner and iterations).
constexpr long kStepsBeforeSolves = 500;

/// Refuse (StateSpaceTooLarge naming tagged_max_states or memory_limit_gb) a tagged chain of
/// `states` states with about `transitions_per_state` nonzeros per state beyond the budgets.
void require_tagged_states(int64_t states, double transitions_per_state, const ResponseOptions& options);

/// Response times per class on a two-class chain (classes = "approx") under modified RED or the
/// flow comparison (docs/classes.md): the tagged packet's state is the chain's state plus its
/// position k (packets ahead of it); the other waiting packets follow the chain's random-order
/// rules, the tagged packet's class and ECN bit are known, and every victim of a search, a pick
/// or a drop policy is ahead of it, the tagged packet itself (pushed out) or behind it.  Entry 0:
/// all admitted packets, entry k + 1: class k (as class_tagged_response).
std::vector<ResponseResult> class_steered_response(const QueueChain& class_chain, const std::vector<double>& pi,
                                                   const ResponseOptions& options = {});

/// Response times under front or random drop (or tail drop with the tagged chain asked for) of
/// a continuous-time chain without classes: the tagged packet of class_steered_response on the
/// model's one-class two-class chain, which has the chain's states and generator (exact: every
/// waiting packet is alike), uniformised at its largest exit rate (docs/response-times.md).
ResponseResult continuous_tagged_response(const QueueChain& chain, const std::vector<double>& pi,
                                          const ResponseOptions& options = {});

/// Whether the (n, avg, modulator) part of a class model's chain is a Markov chain of its
/// own (docs/classes.md): no modified RED, no flow comparison, nothing else that reads the
/// classes of queued packets.  Then the class chain lumps exactly onto the plain kernel with
/// the arrivals' ECN probability mixed per modulator state.
bool class_blind(const Model& model);

/// Response times per class from a class chain (approximate or exact) of a class-blind
/// model: pi is lumped onto (n, avg, modulator[, the stateful AQM's components]), the
/// tagged-packet chain is built on the
/// lumped chain, and the tagged packet starts as an admitted packet of all classes
/// (entry 0) or of class k (entry k + 1).  Exact for both class chains.
std::vector<ResponseResult> class_tagged_response(const QueueChain& class_chain, const std::vector<double>& pi,
                                                  const ResponseOptions& options = {});

}  // namespace aqm
