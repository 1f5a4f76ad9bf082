// Internal: what every stationary method's file shares -- the accounts (settle, finish),
// the registry entry a method file defines, the closed-class handling (Target) and the
// helpers more than one method calls (probable_state, solve_direct).
//
// A method lives in core/src/solvers/<name>.cpp and defines its entry,
//     template <> const MethodSolver& method_solver<Method::Name>() { ... }
// with the function that runs it on a MarkovOperator (an irreducible one unless the
// entry says whole_chain) and fills and finishes the result (finish() below).  Its name,
// enumerator and one-line description are one line of AQM_STATIONARY_METHODS
// (aqmchain/solvers/stationary.hpp); dispatch, names, the bindings' and the tests' lists
// follow from there.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "aqmchain/operators/operator.hpp"
#include "aqmchain/solvers/stationary.hpp"

namespace aqm::detail {

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// The status after the residual is known: converged when it holds; otherwise what
/// the method said (stalled, numerical issue), or not converged.
Status settle(Status said, double residual, double tol);

/// Clip negative round-off, normalise, and fill residual / mass error (and settle the status).
void finish(const MarkovOperator& op, StationaryResult& r, double tol);

/// How one attempt runs: auto passes fail_fast (a fallback is behind it) and direct's
/// work budget; an explicit method runs with the defaults.
struct Attempt {
  bool fail_fast = false;
  double max_flops = INFINITY;  ///< direct: refuse a factorisation whose estimated work exceeds this
  /// multilevel: sweep a stalled coarsest level even when failing fast (auto, after krylov's budget)
  bool sweep_stalled_coarsest = false;
  /// multilevel, failing fast: stop once its rate projects more cycles than this (0: never)
  long hand_over_cycles = 0;
};

/// A method's registry entry (defined in its own file; see the top of this header).
struct MethodSolver {
  /// Runs the method on `op` with options `o`: fills r (method, pi, accounts, note) and
  /// finishes it.  Throws SolverError on a back-end failure.
  void (*solve)(const MarkovOperator& op, const StationaryOptions& o, StationaryResult& r, const Attempt& a) = nullptr;
  /// Runs on the whole chain when it has transient states (else on its closed class).
  bool whole_chain = false;
  /// Honours Attempt::fail_fast (auto may put it before another method).
  bool fails_fast = false;
};
template <Method M>
const MethodSolver& method_solver();
/// The entry of `m` (a switch over AQM_STATIONARY_METHODS).
const MethodSolver& solver_of(Method m);

/// The unique closed class as a sorted list of states, or empty when it is the whole chain.
std::vector<int32_t> closed_class(const MarkovOperator& op);

/// A probable state of an irreducible chain: the argmax of a cheap estimate of pi.  Accounts go to r.
int32_t probable_state(const MarkovOperator& op, const StationaryOptions& o, StationaryResult& r);

/// The direct method (direct.cpp), with an optional cache of the symbolic analysis.
void solve_direct(const MarkovOperator& op, const StationaryOptions& o, StationaryResult& r,
                  DirectCache* cache = nullptr, double max_flops = INFINITY);

/// What a method solves on.  A whole_chain method works on the whole chain: with a recurrent
/// state fixed its reduced system stays nonsingular when transient states are present, and
/// no copy of the matrix is made.  Every other method solves on the closed class (a
/// restricted copy, made once, on demand; a continuous chain's class keeps its Lambda).
/// Transient states end with probability exactly 0 either way.
class Target {
 public:
  Target(const MarkovOperator& full, const StationaryOptions& o);
  ~Target();
  /// Runs f(op, options, x) on the whole chain (whole_chain) or the closed class, and
  /// expands x to the whole chain with its residual recomputed there.
  template <class F>
  void run(bool whole_chain, StationaryResult& x, F&& f) {
    run_on(o_, whole_chain, x, f);
  }
  /// run() started from x0 (one entry per state of the whole chain) instead of the options' x0.
  template <class F>
  void run_from(const std::vector<double>& x0, bool whole_chain, StationaryResult& x, F&& f) {
    StationaryOptions o = o_;
    o.x0 = x0;
    run_on(o, whole_chain, x, f);
  }
  void run(Method m, StationaryResult& x, const Attempt& a = {});
  const StationaryOptions& options() const { return o_; }
  const MarkovOperator& full() const { return full_; }

 private:
  template <class F>
  void run_on(const StationaryOptions& o, bool whole_chain, StationaryResult& x, F&& f) {
    if (keep_.empty()) return f(full_, o, x);
    if (whole_chain) {
      f(full_, o, x);
      restrict_result(x);
    } else {
      const MarkovOperator& op = restricted();
      f(op, restricted_options(o), x);
    }
    expand(x);
  }
  const MarkovOperator& restricted();
  /// o for the restricted chain: x0 restricted too (uniform when it has no mass there).
  StationaryOptions restricted_options(const StationaryOptions& o) const;
  void restrict_result(StationaryResult& x) const;
  void expand(StationaryResult& x) const;
  const MarkovOperator& full_;
  const StationaryOptions& o_;
  std::vector<int32_t> keep_;
  struct Restricted;
  std::unique_ptr<Restricted> restricted_;
};

/// The checks before a solve: options, x0's size, a unique closed class, a stationary law
/// determined to tol (ReducibleChain otherwise).
void check_solvable(const MarkovOperator& op, const StationaryOptions& o);
/// Records a continuous chain's Lambda in r.extra ("uniformization_rate").
void add_rate(const MarkovOperator& op, StationaryResult& r);

/// Auto (auto.cpp): methods in turn by the chain's size and structure.
void solve_auto(Target& t, StationaryResult& r);

}  // namespace aqm::detail
