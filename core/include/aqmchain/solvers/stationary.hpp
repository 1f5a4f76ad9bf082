// Stationary solvers: options struct in, result struct out (Spectra / KrylovKit style).
//
// Convergence criterion for every method: the residual ||pi P - pi||_1 of the
// normalised, non-negative vector is <= tol.  A method that stops short returns
// status NotConverged with its partial result; it never throws for that.
// Exceptions are reserved for misuse (OptionError), a chain without a unique
// stationary vector (ReducibleChain) and back-end failures (SolverError).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "aqmchain/errors.hpp"
#include "aqmchain/solvers/report.hpp"
#include "aqmchain/operators/operator.hpp"
#include "aqmchain/state/chain.hpp"

namespace aqm {

/// The stationary methods, written once: X(enumerator, name, one-line description, "use it
/// when", "cost and limits"), in the order the docs list them (the last two are the method's
/// row of the solvers guide's method table, markdown).  A method's code and its registry entry (the function,
/// whether it runs on the whole chain, whether it can fail fast for auto) live in
/// core/src/solvers/<name>.cpp (see core/src/solvers/stationary_common.hpp); everything
/// else (dispatch, to_string / method_from, the bindings' Method enum and method list,
/// the tests' method lists) follows from this table.
#define AQM_STATIONARY_METHODS(X) \
  X(Auto, "auto", "by the chain's size and structure; falls back to the next method in turn", \
    "always, unless below", \
    "by size and structure: `direct` first on chains below 20,000 states (`auto_krylov_min_states`) when its LU takes at most 10^4 flops per entry of P (else `krylov`, or `multilevel` on chains with traffic classes, REDwM sums or a stateful AQM, then `direct` with the full budget); `krylov` first on larger plain chains (and on those whose only extra component changes under 1 % as often as the queue, such as adaptive RED's p_max: krylov's coarse space takes it); on larger chains with traffic classes or a stateful AQM `multilevel`, then a quick `direct` (at most 1e11 flops), then `krylov` (where multilevel's coarsening stalls at a level it can sweep, at most `auto_stalled_krylov_steps` GMRES steps, then `multilevel` sweeping that level); a `multilevel` whose rate projects more than `auto_multilevel_cycles` (60) cycles hands over to `krylov` (1.5 GMRES steps per cycle it still needs) and goes on from its own iterate if krylov does not converge. Gauss–Seidel last. An attempt with a method behind it fails fast (stagnation is detected after 3 GMRES restarts or 20 cycles). The result says what ran and why (`info.method`, `info.fallback`, `info.note`, `info.methods_tried` with the seconds of each attempt; JSON `solver.methods_tried`)") \
  X(Direct, "direct", "UMFPACK LU of the balance equations with one unknown fixed", \
    "small and medium chains (up to a few 10⁵ states), or when you solve many chains with the same pattern (`aqmchain.DirectSolver` keeps UMFPACK's symbolic analysis across a sweep over mu, alpha or p_max)", \
    "LU fill grows quickly with the avg grid; refused before factorising above `direct_max_gb` (8 GB). Ctrl-C returns at once: the analysis and the factorisation run on a worker thread that an interruption abandons (it finishes, then frees its memory)") \
  X(Krylov, "krylov", "GMRES on the reduced system, block Gauss-Seidel preconditioner over the descriptor's blocks (numbered with the most one-directional component first)", \
    "large chains (10⁵–10⁷ states): preconditioned restarted GMRES, the fastest method here", \
    "memory ~ `krylov_basis` (50) vectors, allocated as the basis grows, plus the block preconditioner; measured 0.3 s for 235k states, 13 s for 4.4M states (one thread)") \
  X(Arnoldi, "arnoldi", "ARPACK-ng implicitly restarted Arnoldi, eigenvalue 1 of P^T", \
    "checking the dominant eigenvalue/eigenvector independently (ARPACK)", \
    "slower; refuses a basis above `arnoldi_max_gb`") \
  X(GaussSeidel, "gauss_seidel", "forward Gauss-Seidel sweeps on pi (I - P) = 0", \
    "tiny chains, tests, teaching", \
    "converges slowly on nearly decomposable chains (small w, bursty sources)") \
  X(Power, "power", "the power iteration pi <- pi P", \
    "tiny chains, as an independent oracle", \
    "very slow: the error shrinks by the second eigenvalue per product") \
  X(Multilevel, "multilevel", "multilevel aggregation over the state lattice with Gauss-Seidel smoothing", \
    "a second opinion on large chains, when GMRES stagnates, or on drop-spacing chains (count, wait) to hold less memory than krylov at about its time", \
    "aggregation on the (n, avg) lattice; no convergence guarantee (non-convergence is reported); the V-cycle stalls on SSMP sources")

enum class Method {
#define AQM_METHOD_ENUMERATOR(e, name, doc, use, cost) e,
  AQM_STATIONARY_METHODS(AQM_METHOD_ENUMERATOR)
#undef AQM_METHOD_ENUMERATOR
};
/// A method's name, one-line description and its row of the solvers guide's method table.
struct MethodInfo {
  Method method;
  const char* name;
  const char* description;
  const char* use_when;  ///< "use it when" (markdown)
  const char* cost;      ///< "cost and limits" (markdown)
};
inline constexpr MethodInfo kMethodInfo[] = {
#define AQM_METHOD_INFO(e, name, doc, use, cost) {Method::e, name, doc, use, cost},
    AQM_STATIONARY_METHODS(AQM_METHOD_INFO)
#undef AQM_METHOD_INFO
};
/// Every method, in the order the docs list them (names from to_string).
inline constexpr Method kAllMethods[] = {
#define AQM_METHOD_VALUE(e, name, doc, use, cost) Method::e,
    AQM_STATIONARY_METHODS(AQM_METHOD_VALUE)
#undef AQM_METHOD_VALUE
};
std::string to_string(Method);
Method method_from(const std::string&);

struct StationaryOptions;

/// The type of a solver option (how the bindings and the model-file loader convert it).
enum class OptionType { Int, Real, Choice, RealList };

/// One solver option: name, type, bounds / allowed values, doc line and field (read and
/// written through the get / set of its type; the default is the field's initialiser).
/// StationaryOptions::validate() checks every row; the bindings define one property and
/// one keyword of the constructor per row and expose the table (Python's option_names(),
/// defaults() and options(), the model-file [solver] keys and the docs read it).
struct OptionRow {
  const char* name;
  OptionType type;
  double lo, hi;          ///< Int: [lo, hi]; Real: lo < v (lo <= v if !lo_open), v < hi (v <= hi if !hi_open), finite
  bool lo_open, hi_open;  ///< Real only
  const char* choices;    ///< Choice: the allowed values, ", "-separated (nullptr: method_from checks)
  const char* note;       ///< appended to the bound in messages
  const char* doc;        ///< one line for the docs and help()
  long (*get_int)(const StationaryOptions&) = nullptr;
  bool (*set_int)(StationaryOptions&, long) = nullptr;  ///< false when the value does not fit the field's type
  double StationaryOptions::*real = nullptr;
  std::string (*get_text)(const StationaryOptions&) = nullptr;
  void (*set_text)(StationaryOptions&, const std::string&) = nullptr;
  std::vector<double> StationaryOptions::*list = nullptr;
};

/// The bound of a row as messages show it: "in [0, 100]", "in (0, 1)", "> 0 and finite", ...
std::string option_bound(const OptionRow& r);

/// What a krylov solve leaves for a warm re-solve of a chain with the same states
/// (solvers/krylov.cpp): `krylov_recycle` directions of its Krylov space (harmonic Ritz
/// vectors), recycled by the next solve.  Opaque; warm_state_info() says what it holds.
struct WarmState;
struct WarmStateInfo {
  int32_t states = 0;
  int vectors = 0;     ///< recycled directions (n entries each)
  double bytes = 0.0;  ///< memory held
};
WarmStateInfo warm_state_info(const WarmState& w);
/// A handle on a warm state (what the bindings hold).
struct WarmStateHandle {
  std::shared_ptr<const WarmState> state;
};

struct StationaryOptions {
  Method method = Method::Auto;
  double tol = 1e-12;        ///< target for ||pi P - pi||_1
  // Every field has its row (type, bounds, doc) in kStationaryOptions, below.
  long max_iter = 0;         ///< 0: method default (GS/power 100000 sweeps, Arnoldi 3000 restarts, multilevel 1000 cycles)
  int ncv = 0;               ///< Arnoldi basis size; 0: min(n, 30); at most the number of states (clamped)
  int refine_steps = 6;      ///< Direct: extra iterative-refinement steps if the residual is above tol
  int check_every = 10;      ///< GS: residual check period in sweeps
  int coarse_size = 500;     ///< multilevel: coarsest level solved exactly (GTH) at or below this size
  int smoothing_sweeps = 3;  ///< multilevel: Gauss-Seidel sweeps before and after each coarse correction
  int cycle_gamma = 2;       ///< multilevel: coarse corrections per level (1: V-cycle, 2: W-cycle; levels past 0 of < 20,000 states: 1)
  int recombination_depth = 3;  ///< multilevel: cycle outputs recombined to start the next cycle (0 or 1: none)
  /// Direct: UMFPACK fill-reducing ordering: "amd" (AMD/COLAMD), "metis", "cholmod", "best", "none".
  std::string ordering = "amd";
  /// Direct: UMFPACK strategy: "auto", "symmetric", "unsymmetric".
  std::string strategy = "auto";
  /// Direct: refuse (SolverError, before factorising) when UMFPACK's estimate of its
  /// peak memory exceeds this many GB.  Auto also skips direct when the estimated
  /// factorisation work is above `auto_direct_max_flops`.
  double direct_max_gb = 8.0;
  double auto_direct_max_flops = 2e12;
  /// Auto tries krylov first (then direct, multilevel, Gauss-Seidel) on plain chains with at
  /// least this many states, direct first below it and multilevel first on the coupled
  /// structures (more than one component outside krylov's blocks that the chain moves: its
  /// preconditioner does not see them).
  int auto_krylov_min_states = 20000;
  /// Auto on a chain whose multilevel coarsening stalled at a level small enough to sweep:
  /// krylov gets at most this many GMRES steps, then multilevel sweeping that level runs
  /// (then krylov without the limit, from the best iterate).  0: no limit (krylov alone).
  int auto_stalled_krylov_steps = 100;
  /// Auto's first multilevel attempt on a coupled chain, once its rate over 10 cycles projects
  /// more cycles than this in all, hands over to krylov with 1.5 x the cycles it still needs as
  /// GMRES steps, and goes on from its own iterate if krylov does not converge.  0: never.
  int auto_multilevel_cycles = 60;
  int krylov_basis = 50;     ///< krylov: GMRES basis size (restart length)
  /// Arnoldi: refuse (StateSpaceTooLarge naming 'ncv', before allocating) when the
  /// basis and work arrays, about (states x (ncv + 4) + 3 ncv^2) doubles, exceed this many GB.
  double arnoldi_max_gb = 8.0;
  std::vector<double> x0;    ///< optional starting vector (iterative methods)
  /// Budgets of what a solve builds (read by the callers that build: the builder refuses a
  /// chain with more reachable states than max_states, in [1, 2^31 - 2]; the response times
  /// refuse a tagged-packet chain with more than tagged_max_states states, before the solve).
  long max_states = kDefaultMaxStates;
  long tagged_max_states = kDefaultTaggedMaxStates;
  /// krylov: directions of its Krylov space kept in the result's warm state (recycled by a
  /// warm re-solve; 0: none, the default: docs/performance.md measures why)
  int krylov_recycle = 0;
  /// Not an option row: what an earlier krylov solve of a chain with the same states left
  /// (StationaryResult::warm_state; null: nothing), reused by this solve when it fits.
  std::shared_ptr<const WarmState> warm;
  void validate() const;
};

/// The solver options, written once: a new one is its field above and one row here.
#define AQM_INT_OPTION(field, lo, hi, note, doc)                                                                 \
  OptionRow {                                                                                                    \
    #field, OptionType::Int, static_cast<double>(lo), static_cast<double>(hi), false, false, nullptr, note, doc, \
        [](const StationaryOptions& o) { return static_cast<long>(o.field); },                                   \
        [](StationaryOptions& o, long v) {                                                                       \
          using T = decltype(StationaryOptions::field);                                                          \
          if (static_cast<long>(static_cast<T>(v)) != v) return false;                                           \
          o.field = static_cast<T>(v);                                                                           \
          return true;                                                                                           \
        }                                                                                                        \
  }
#define AQM_REAL_OPTION(field, lo, hi, lo_open, hi_open, doc) \
  OptionRow { #field, OptionType::Real, lo, hi, lo_open, hi_open, nullptr, "", doc, nullptr, nullptr, &StationaryOptions::field }
#define AQM_CHOICE_OPTION(field, choices, doc)                                                                \
  OptionRow {                                                                                                 \
    #field, OptionType::Choice, 0, 0, false, false, choices, "", doc, nullptr, nullptr, nullptr,              \
        [](const StationaryOptions& o) { return std::string(o.field); },                                      \
        [](StationaryOptions& o, const std::string& v) { o.field = v; }                                       \
  }
inline constexpr double kUnbounded = 1.7976931348623157e308;  // DBL_MAX: "finite" is the only upper bound
inline constexpr OptionRow kStationaryOptions[] = {
    OptionRow{"method", OptionType::Choice, 0, 0, false, false, nullptr, "", "the stationary method (see the table of methods)",
              nullptr, nullptr, nullptr, [](const StationaryOptions& o) { return to_string(o.method); },
              [](StationaryOptions& o, const std::string& v) { o.method = method_from(v); }},
    AQM_REAL_OPTION(tol, 0.0, 1.0, true, true, "target for the residual ||pi P - pi||_1"),
    AQM_INT_OPTION(max_iter, 0, 1000000000L, " (0: the method's default)",
                   "iteration budget (sweeps, cycles, restarts, GMRES steps); 0: the method's default"),
    AQM_INT_OPTION(ncv, 0, 1000, " (0: min(states, 30))", "Arnoldi basis size; 0: min(states, 30)"),
    AQM_INT_OPTION(refine_steps, 0, 100, "", "direct: iterative-refinement steps if the residual is above tol"),
    AQM_INT_OPTION(check_every, 1, 1000000, "", "Gauss-Seidel: residual check period in sweeps"),
    AQM_INT_OPTION(coarse_size, 2, 2000, "", "multilevel: coarsest level solved exactly at or below this size"),
    AQM_INT_OPTION(smoothing_sweeps, 1, 100, "", "multilevel: Gauss-Seidel sweeps before and after each coarse correction"),
    AQM_INT_OPTION(cycle_gamma, 1, 2, " (1: V-cycle, 2: W-cycle)",
                   "multilevel: coarse corrections per level (1: V-cycle, 2: W-cycle; one below 20,000 states past level 0)"),
    AQM_INT_OPTION(recombination_depth, 0, 50, " (0 or 1: none)",
                   "multilevel: last cycle outputs recombined to start the next cycle (0 or 1: none; keeps 2 x depth vectors)"),
    AQM_INT_OPTION(krylov_basis, 2, 500, "", "krylov: GMRES basis size (restart length)"),
    AQM_INT_OPTION(krylov_recycle, 0, 50, " (0: none)",
                   "krylov: directions of its Krylov space kept for a warm re-solve to recycle (0: none)"),
    AQM_INT_OPTION(auto_krylov_min_states, 0, 2147483647L, "",
                   "auto: krylov first on plain chains with at least this many states"),
    AQM_INT_OPTION(auto_multilevel_cycles, 0, 1000000000L, " (0: never)",
                   "auto: its first multilevel attempt on a coupled chain hands over to krylov (1.5 GMRES steps per "
                   "cycle still needed) once its rate projects more cycles than this in all, and goes on if krylov does "
                   "not converge (0: never)"),
    AQM_INT_OPTION(auto_stalled_krylov_steps, 0, 1000000000L, " (0: no limit)",
                   "auto: GMRES steps of krylov on a chain whose multilevel coarsening stalled at a level it can sweep, "
                   "before multilevel sweeping that level runs (0: no limit)"),
    AQM_CHOICE_OPTION(ordering, "amd, metis, cholmod, best, none", "direct: UMFPACK fill-reducing ordering"),
    AQM_CHOICE_OPTION(strategy, "auto, symmetric, unsymmetric", "direct: UMFPACK strategy"),
    AQM_REAL_OPTION(direct_max_gb, 0.0, kUnbounded, true, false,
                    "direct: refuse before factorising when UMFPACK's memory estimate exceeds this (GB)"),
    AQM_REAL_OPTION(auto_direct_max_flops, 0.0, kUnbounded, true, false,
                    "auto: skip direct when the estimated factorisation work exceeds this (flops)"),
    AQM_REAL_OPTION(arnoldi_max_gb, 0.0, kUnbounded, true, false,
                    "Arnoldi: refuse before allocating when the basis would exceed this (GB)"),
    OptionRow{"x0", OptionType::RealList, 0.0, kUnbounded, false, false, nullptr, "",
              "starting vector of the iterative methods (one non-negative entry per state, positive sum); empty: uniform",
              nullptr, nullptr, nullptr, nullptr, nullptr, &StationaryOptions::x0},
    AQM_INT_OPTION(max_states, 1, static_cast<long>(kMaxStatesMax), "",
                   "the builder refuses a chain with more reachable states"),
    AQM_INT_OPTION(tagged_max_states, 1, static_cast<long>(kTaggedMaxStatesMax), "",
                   "response times: refuse a tagged-packet chain with more states, before the solve"),
};
#undef AQM_INT_OPTION
#undef AQM_REAL_OPTION
#undef AQM_CHOICE_OPTION

/// One method auto ran: which, for how long, with what outcome (`why` empty when it converged).
struct MethodAttempt {
  Method method = Method::Auto;
  double seconds = 0.0;
  Status status = Status::NotComputed;
  long iterations = 0;  ///< the attempt's sweeps / cycles / steps
  std::string why;
};



/// pi and the convergence report every solver family shares (solvers/report.hpp):
/// the report's residual is ||pi P - pi||_1, iterations are sweeps / cycles /
/// restarts / GMRES steps / refinement steps, operator applications count products
/// with P (a Gauss-Seidel sweep counts as one).
struct StationaryResult : ConvergenceReport<Method> {
  std::vector<double> pi;
  double mass_error = 0.0;    ///< |sum pi - 1|
  double clipped_mass = 0.0;  ///< negative round-off mass set to 0 before normalising
  /// The methods run, in order (auto: each attempt; one entry for an explicit method).
  std::vector<MethodAttempt> methods_tried;
  /// What this solve leaves for a warm re-solve (krylov; null for the other methods):
  /// StationaryOptions::warm of the next solve.
  std::shared_ptr<const WarmState> warm_state;
};

struct DirectCache;

/// The direct method with its symbolic analysis kept: a later solve() whose
/// reduced matrix has the same sparsity pattern (e.g. a sweep over mu, alpha or
/// p_max, which keep the reachable set and the support of P) reuses it and only
/// refactorises.  result.extra["symbolic_reused"] says which happened.
class DirectSolver {
 public:
  explicit DirectSolver(StationaryOptions options = {});
  ~DirectSolver();
  DirectSolver(DirectSolver&&) noexcept;
  DirectSolver& operator=(DirectSolver&&) noexcept;
  /// (A Chain converts to its operator.)
  StationaryResult solve(const MarkovOperator& op);
  long analyses() const;  ///< symbolic analyses performed so far
  long solves() const;

 private:
  StationaryOptions options_;
  std::unique_ptr<DirectCache> cache_;
};

/// Solve pi P = pi, sum pi = 1, for the operator's stochastic P (for a continuous chain
/// the uniformised P = I + G / Lambda, formed on the fly: pi G = 0; the residual reported
/// is ||pi P - pi||_1 = ||pi G||_1 / Lambda).  Throws ReducibleChain unless the chain has
/// exactly one closed class.  (A Chain converts to its operator.)
StationaryResult solve_stationary(const MarkovOperator& op, const StationaryOptions& options = {});

}  // namespace aqm
