// Stationary solvers.  Orientation: pi is a row vector, pi P = pi (SPEC 1).
#include "aqmchain/solvers/stationary.hpp"

#include <arpack/arpack.h>
#include <umfpack.h>

#include "aqmchain/operators/operator.hpp"
#include "aqmchain/interrupt.hpp"
#include "solvers/krylov.hpp"
#include "solvers/multilevel.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <iterator>
#include <memory>
#include <iterator>
#include <numeric>
#include <string_view>
#include <utility>

namespace aqm {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// The status after the residual is known: converged when it holds; otherwise what
/// the method said (stalled, numerical issue), or not converged.
Status settle(Status said, double residual, double tol) {
  if (residual <= tol && std::isfinite(residual)) return Status::Converged;
  if (!std::isfinite(residual)) return Status::NumericalIssue;
  return said == Status::Stalled || said == Status::NumericalIssue ? said : Status::NotConverged;
}

/// Clip negative round-off, normalise, and fill residual / mass error.
void finish(const Chain& c, StationaryResult& r, double tol) {
  auto& pi = r.pi;
  long double pos = 0.0L, neg = 0.0L;
  for (double v : pi) (v > 0 ? pos : neg) += std::abs(v);
  if (!(pos > 0.0L) || !std::isfinite(static_cast<double>(pos))) {
    // Nothing usable: report the uniform vector as the partial result.
    std::fill(pi.begin(), pi.end(), 1.0 / c.n);
    pos = 1.0L;
    neg = 0.0L;
    r.status = Status::NumericalIssue;
    if (r.note.empty()) r.note = "the method produced no non-negative vector";
  }
  r.clipped_mass = static_cast<double>(neg / pos);
  for (double& v : pi) v = v > 0 ? static_cast<double>(v / pos) : 0.0;
  long double s = 0.0L;
  for (double v : pi) s += v;
  r.mass_error = static_cast<double>(std::abs(s - 1.0L));
  const auto t0 = Clock::now();
  r.residual = stationary_residual(c, pi);
  ++r.operator_applications;
  r.seconds.push_back({"residual", since(t0)});
  r.status = settle(r.status, r.residual, tol);
}

// ------------------------------------------------------------------ direct (UMFPACK)

// UMFPACK's analysis and factorisation make no interrupt checks and take minutes on
// large chains: they run through run_abandonable (interrupt.hpp), so Ctrl-C returns at
// once and an abandoned factorisation finishes on its own thread.  Everything they
// touch is therefore shared: the reduced system, the control array, the handles.

struct UmfSymbolic {
  void* p = nullptr;
  UmfSymbolic() = default;
  UmfSymbolic(const UmfSymbolic&) = delete;
  UmfSymbolic& operator=(const UmfSymbolic&) = delete;
  ~UmfSymbolic() {
    if (p) umfpack_dl_free_symbolic(&p);
  }
};

struct UmfNumeric {
  void* p = nullptr;
  UmfNumeric() = default;
  UmfNumeric(const UmfNumeric&) = delete;
  UmfNumeric& operator=(const UmfNumeric&) = delete;
  ~UmfNumeric() {
    if (p) umfpack_dl_free_numeric(&p);
  }
};

std::string umf_status(int s) {
  switch (s) {
    case UMFPACK_ERROR_out_of_memory: return "out of memory";
    case UMFPACK_WARNING_singular_matrix: return "singular matrix";
    case UMFPACK_ERROR_invalid_matrix: return "invalid matrix";
    default: return detail::cat("status ", s);
  }
}

}  // namespace

/// Symbolic analysis kept between solves whose reduced matrix has the same pattern.
struct DirectCache {
  std::shared_ptr<UmfSymbolic> symbolic;  // shared with a factorisation that may outlive a Ctrl-C
  int32_t k = -1;
  std::vector<SuiteSparse_long> Ap, Ai;
  std::vector<int32_t> chain_rowptr, chain_col;  // pattern of P the analysis was made for
  long analyses = 0, solves = 0;
  double est_bytes = 0.0, est_flops = 0.0;  // UMFPACK's estimates from the analysis
  bool same_chain(const Chain& c) const {
    return symbolic && c.rowptr == chain_rowptr && c.col == chain_col;
  }
  bool matches(int32_t kk, const std::vector<SuiteSparse_long>& ap, const std::vector<SuiteSparse_long>& ai) const {
    return symbolic && kk == k && ap == Ap && ai == Ai;
  }
};

namespace {

using Idx = SuiteSparse_long;  // 64-bit UMFPACK: the 32-bit interface cannot address LUs of 10^6 states

/// B x = b with B = ((I - P) without row/column k)^T and b_j = P_kj: the balance
/// equations with pi_k = 1 fixed.  The CSR arrays of (I - P)_red are the CSC
/// arrays of B, as UMFPACK wants.
struct ReducedSystem {
  int32_t n = 0, k = 0, m = 0;
  std::vector<Idx> Ap, Ai;
  std::vector<double> Ax, b;
  int32_t red(int32_t i) const { return i - (i > k); }
  /// pi with pi_k = 1 from the reduced unknowns.
  std::vector<double> expand(const std::vector<double>& x) const {
    std::vector<double> pi(n);
    for (int32_t i = 0; i < n; ++i) pi[i] = i == k ? 1.0 : x[red(i)];
    return pi;
  }
  /// res = b - B x (from the CSC arrays).
  void residual(const std::vector<double>& x, std::vector<double>& res) const {
    std::copy(b.begin(), b.end(), res.begin());
    for (int32_t j = 0; j < m; ++j)
      for (Idx e = Ap[j]; e < Ap[j + 1]; ++e) res[Ai[e]] -= Ax[e] * x[j];
  }
};

/// Probability of leaving state i in one step: the sum of row i's entries off the diagonal.
double exit_probability(const Chain& c, int32_t i) {
  double out = 0.0;
  for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e)
    if (c.col[e] != i) out += c.val[e];
  return out;
}

ReducedSystem reduced_system(const Chain& c, int32_t k) {
  ReducedSystem s;
  s.n = c.n;
  s.k = k;
  s.m = c.n - 1;
  s.Ap.assign(static_cast<size_t>(s.m) + 1, 0);
  s.b.assign(s.m, 0.0);
  s.Ai.reserve(static_cast<size_t>(c.nnz()) + c.n);
  s.Ax.reserve(static_cast<size_t>(c.nnz()) + c.n);
  for (int32_t i = 0, ri = 0; i < c.n; ++i) {
    if (i == k) {
      for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e)
        if (c.col[e] != k) s.b[s.red(c.col[e])] = c.val[e];
      continue;
    }
    // (I - P)_ii as the sum of the row's other entries, not 1 - P_ii: a state left with a
    // probability near or below round-off (P_ii = 1 - 1e-300 is stored as 1) keeps its exact
    // exit rate, and the system stays a nonsingular M-matrix (no cancellation).
    const double exit = exit_probability(c, i);
    bool diag = false;
    for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e) {
      const int32_t j = c.col[e];
      if (j == k) continue;
      if (!diag && j >= i) {
        diag = true;
        s.Ai.push_back(s.red(i));
        s.Ax.push_back(exit);
        if (j == i) continue;
      }
      s.Ai.push_back(s.red(j));
      s.Ax.push_back(-c.val[e]);
    }
    if (!diag) {
      s.Ai.push_back(s.red(i));
      s.Ax.push_back(exit);
    }
    s.Ap[++ri] = static_cast<Idx>(s.Ai.size());
  }
  return s;
}

void umfpack_control(const StationaryOptions& o, double* control) {
  umfpack_dl_defaults(control);
  control[UMFPACK_ORDERING] = o.ordering == "amd"       ? UMFPACK_ORDERING_AMD
                              : o.ordering == "metis"   ? UMFPACK_ORDERING_METIS
                              : o.ordering == "cholmod" ? UMFPACK_ORDERING_CHOLMOD
                              : o.ordering == "best"    ? UMFPACK_ORDERING_BEST
                                                        : UMFPACK_ORDERING_NONE;
  control[UMFPACK_STRATEGY] = o.strategy == "symmetric"     ? UMFPACK_STRATEGY_SYMMETRIC
                              : o.strategy == "unsymmetric" ? UMFPACK_STRATEGY_UNSYMMETRIC
                                                            : UMFPACK_STRATEGY_AUTO;
  // No UMFPACK-internal refinement: ours runs only when the residual misses tol.
  control[UMFPACK_IRSTEP] = 0;
}

using Control = std::array<double, UMFPACK_CONTROL>;

/// The symbolic analysis (reused from `cache` when the pattern and k match), its
/// estimates checked against the budgets before anything is factorised.
std::shared_ptr<UmfSymbolic> analyse(const Chain& c, const std::shared_ptr<const ReducedSystem>& sys,
                                     const StationaryOptions& o, const std::shared_ptr<const Control>& control,
                                     StationaryResult& r, DirectCache* cache, double max_flops) {
  const ReducedSystem& s = *sys;
  const bool reuse = cache && cache->matches(s.k, s.Ap, s.Ai);
  double est_bytes = reuse ? cache->est_bytes : 0.0, est_flops = reuse ? cache->est_flops : 0.0;
  std::shared_ptr<UmfSymbolic> symbolic = reuse ? cache->symbolic : nullptr;
  if (!reuse) {
    const auto t0 = Clock::now();
    struct Job {
      std::shared_ptr<UmfSymbolic> symbolic = std::make_shared<UmfSymbolic>();
      int status = UMFPACK_OK;
      double info[UMFPACK_INFO];
    };
    auto job = std::make_shared<Job>();
    run_abandonable([job, sys, control] {
      job->status = umfpack_dl_symbolic(sys->m, sys->m, sys->Ap.data(), sys->Ai.data(), sys->Ax.data(),
                                        &job->symbolic->p, control->data(), job->info);
    });
    r.seconds.push_back({"analyse", since(t0)});
    if (job->status != UMFPACK_OK) throw SolverError("UMFPACK symbolic analysis failed: " + umf_status(job->status));
    est_bytes = job->info[UMFPACK_PEAK_MEMORY_ESTIMATE] * job->info[UMFPACK_SIZE_OF_UNIT];
    est_flops = job->info[UMFPACK_FLOPS_ESTIMATE];
    symbolic = job->symbolic;
    if (cache) {  // hand the analysis over to the cache
      cache->est_bytes = est_bytes;
      cache->est_flops = est_flops;
      cache->symbolic = symbolic;
      cache->k = s.k;
      cache->Ap = s.Ap;
      cache->Ai = s.Ai;
      cache->chain_rowptr = c.rowptr;
      cache->chain_col = c.col;
      ++cache->analyses;
    }
  }
  r.extra.push_back({"symbolic_reused", reuse ? 1.0 : 0.0});
  r.extra.push_back({"lu_bytes_estimate", est_bytes});
  r.extra.push_back({"lu_flops_estimate", est_flops});
  // UMFPACK's estimates are upper bounds (the real fill is usually below them).
  if (est_bytes > o.direct_max_gb * 1e9)
    throw SolverError(detail::cat("direct: UMFPACK estimates ", est_bytes / 1e9, " GB for the LU factorisation of ",
                                  s.m, " unknowns, above direct_max_gb = ", o.direct_max_gb,
                                  " (raise direct_max_gb, or use method = \"krylov\")"));
  if (est_flops > max_flops)
    throw SolverError(detail::cat("direct: UMFPACK estimates ", est_flops, " flops for the factorisation, above ",
                                  "auto_direct_max_flops = ", max_flops));
  if (cache) ++cache->solves;
  return symbolic;
}

/// Iterative refinement on B x = b while the residual of pi misses tol.
void refine(const Chain& c, const ReducedSystem& s, const StationaryOptions& o, const double* control,
            void* numeric, std::vector<double>& x, StationaryResult& r) {
  double info[UMFPACK_INFO];
  const auto t0 = Clock::now();
  std::vector<double> res(s.m), d(s.m);
  for (int step = 0; step < o.refine_steps && !r.converged(); ++step) {
    check_interrupt();
    s.residual(x, res);
    if (umfpack_dl_solve(UMFPACK_A, s.Ap.data(), s.Ai.data(), s.Ax.data(), d.data(), res.data(), numeric, control,
                         info) != UMFPACK_OK)
      break;
    for (int32_t j = 0; j < s.m; ++j) x[j] += d[j];
    StationaryResult trial = r;
    trial.pi = s.expand(x);
    trial.seconds.clear();
    finish(c, trial, o.tol);
    ++r.iterations;
    r.operator_applications += 2;
    if (!(trial.residual < r.residual)) break;
    r.pi = std::move(trial.pi);
    r.residual = trial.residual;
    r.mass_error = trial.mass_error;
    r.clipped_mass = trial.clipped_mass;
    r.status = trial.status;
  }
  if (r.iterations > 0) r.seconds.push_back({"refine", since(t0)});
}

/// Fix pi_k = 1 for a recurrent state k, factorise the reduced system and solve.
void solve_direct_at(const Chain& c, const StationaryOptions& o, StationaryResult& r, DirectCache* cache,
                     const int32_t k, double max_flops) {
  r.method = Method::Direct;
  if (c.n == 1) {
    r.pi = {1.0};
    finish(c, r, o.tol);
    return;
  }
  auto t0 = Clock::now();
  const auto sys = std::make_shared<const ReducedSystem>(reduced_system(c, k));
  const ReducedSystem& s = *sys;
  r.seconds.push_back({"assemble", since(t0)});
  auto control_array = std::make_shared<Control>();
  umfpack_control(o, control_array->data());
  const std::shared_ptr<const Control> controls = control_array;
  const double* control = controls->data();
  const std::shared_ptr<UmfSymbolic> symbolic = analyse(c, sys, o, controls, r, cache, max_flops);
  check_interrupt();
  t0 = Clock::now();
  struct Job {
    UmfNumeric numeric;
    int status = UMFPACK_OK;
    double info[UMFPACK_INFO];
  };
  auto job = std::make_shared<Job>();
  run_abandonable([job, sys, symbolic, controls] {
    job->status = umfpack_dl_numeric(sys->Ap.data(), sys->Ai.data(), sys->Ax.data(), symbolic->p, &job->numeric.p,
                                     controls->data(), job->info);
  });
  r.seconds.push_back({"factorise", since(t0)});
  const double* info = job->info;
  int st = job->status;
  UmfNumeric& h = job->numeric;
  if (st != UMFPACK_OK)
    throw SolverError("UMFPACK factorisation failed: " + umf_status(st) +
                      (st == UMFPACK_WARNING_singular_matrix ? " (is the chain reducible?)" : ""));
  r.extra.push_back({"lu_nnz", info[UMFPACK_LNZ] + info[UMFPACK_UNZ]});
  r.extra.push_back({"lu_flops", info[UMFPACK_FLOPS]});
  r.extra.push_back({"umfpack_ordering_used", info[UMFPACK_ORDERING_USED]});
  r.extra.push_back({"umfpack_strategy_used", info[UMFPACK_STRATEGY_USED]});
  r.extra.push_back({"umfpack_peak_bytes", info[UMFPACK_PEAK_MEMORY] * info[UMFPACK_SIZE_OF_UNIT]});

  std::vector<double> x(s.m);
  t0 = Clock::now();
  double solve_info[UMFPACK_INFO];
  st = umfpack_dl_solve(UMFPACK_A, s.Ap.data(), s.Ai.data(), s.Ax.data(), x.data(), s.b.data(), h.p, control,
                        solve_info);
  r.seconds.push_back({"solve", since(t0)});
  if (st != UMFPACK_OK) throw SolverError("UMFPACK solve failed: " + umf_status(st));
  r.pi = s.expand(x);
  finish(c, r, o.tol);
  refine(c, s, o, control, h.p, x, r);
  if (!r.converged())
    r.note = detail::cat("direct solve reached residual ", r.residual, " > tol ", o.tol, " after ", r.iterations,
                         " refinement steps");
}

/// A probable state of an irreducible chain: the argmax of a cheap estimate of pi.
/// The estimate is two multilevel W-cycles from the uniform vector: their coarsest
/// level is solved exactly, so they see where the mass is even when the chain mixes
/// slowly (geo_k4, RED w = 0.002: the argmax of 2 cycles has the largest true pi, that
/// of 30 Gauss-Seidel sweeps pi / max pi = 5e-177).  Chains without lattice labels
/// (hand-built) use Gauss-Seidel sweeps instead.  Accounts go to r.
int32_t probable_state(const Chain& c, const StationaryOptions& o, StationaryResult& r) {
  if (c.n < 2) return 0;
  const auto t0 = Clock::now();
  std::vector<double> x;
  try {
    StationaryOptions e = o;
    e.max_iter = 2;
    e.x0.clear();
    StationaryResult ml;
    detail::solve_multilevel(c, e, ml);
    r.operator_applications += ml.operator_applications;
    x = std::move(ml.pi);
  } catch (const SolverError&) {
    const SpMat PT = SpMat(c.matrix().transpose());
    const std::vector<double> exit =
        detail::exit_probabilities(c.n, PT.outerIndexPtr(), PT.innerIndexPtr(), PT.valuePtr());
    x.assign(c.n, 1.0 / c.n);
    constexpr int sweeps = 30;
    for (int s = 0; s < sweeps; ++s)
      detail::gauss_seidel_sweep(c.n, PT.outerIndexPtr(), PT.innerIndexPtr(), PT.valuePtr(), exit.data(), x);
    r.operator_applications += sweeps;
  }
  r.seconds.push_back({"estimate", since(t0)});
  int32_t best = 0;
  for (int32_t i = 1; i < c.n && i < static_cast<int32_t>(x.size()); ++i)
    if (x[i] > x[best]) best = i;  // NaN-safe: a NaN never wins
  return best;
}

/// The reduced system's condition number grows like the mean return time to the
/// fixed state k, i.e. like 1 / pi_k (Stewart 1994, sec. 2.3).  `c` is irreducible
/// (solve_stationary restricts the chain to its closed class first), so every state
/// is recurrent; k is the argmax of a cheap estimate of pi (probable_state).  If the
/// residual still misses tol, solve again with k = argmax pi.
void solve_direct(const Chain& c, const StationaryOptions& o, StationaryResult& r, DirectCache* cache = nullptr,
                  double max_flops = INFINITY) {
  int32_t k;
  if (cache && cache->same_chain(c))
    k = cache->k;  // same states and pattern: keep the k of the sweep (and its symbolic analysis)
  else
    k = probable_state(c, o, r);
  solve_direct_at(c, o, r, cache, k, max_flops);
  if (c.n < 2) return;
  const auto it = std::max_element(r.pi.begin(), r.pi.end());
  const int32_t best = static_cast<int32_t>(it - r.pi.begin());
  r.extra.push_back({"fixed_state_probability", r.pi[k] / *it});
  // Re-solve only when the residual misses tol and a more probable k exists: the
  // residual is the promise, and a second factorisation doubles the cost.
  if (r.converged() || k == best) return;
  StationaryResult again;
  again.requested = r.requested;
  solve_direct_at(c, o, again, cache, best, INFINITY);
  for (const auto& [phase, sec] : r.seconds) again.seconds.insert(again.seconds.begin(), {"first_" + phase, sec});
  again.operator_applications += r.operator_applications;
  again.extra.push_back({"fixed_state_probability", 1.0});
  again.note = detail::cat("re-solved with the most probable state fixed (the first choice had pi_k / max pi = ",
                           r.pi[k] / *it, ", residual ", r.residual, ")") +
               (again.note.empty() ? "" : "; " + again.note);
  r = std::move(again);
}

/// Multilevel aggregation with the accounts every method reports.
void solve_multilevel_finished(const Chain& c, const StationaryOptions& o, StationaryResult& r, bool fail_fast = false) {
  detail::solve_multilevel(c, o, r, fail_fast);
  finish(c, r, o.tol);
  if (!r.converged())
    r.note = detail::cat("multilevel stopped after ", r.iterations, " cycles, residual ", r.residual) +
             (r.note.empty() ? "" : " (" + r.note + ")");
}

std::vector<int32_t> closed_class(const Chain& c);  // below

/// Krylov with a recurrent fixed state; re-solved once from its own answer with
/// k = argmax pi when pi_k / max pi < 1e-8 (the reduced system's conditioning
/// grows like 1 / pi_k).
void solve_krylov_finished(const Chain& c, const StationaryOptions& o, StationaryResult& r, bool fail_fast = false) {
  const auto blocks = detail::slow_component_blocks(c);
  // The fixed state must be recurrent (on a chain with transient states, fixing one of
  // them makes the reduced system singular): the most probable state of x0 among the
  // states in recurrent_state's closed class, else recurrent_state.
  int32_t k = c.recurrent_state;
  if (!o.x0.empty()) {
    const std::vector<int32_t> keep = closed_class(c);  // empty: every state is recurrent
    int32_t best_x0 = -1;
    auto consider = [&](int32_t s) {
      if (best_x0 < 0 || o.x0[s] > o.x0[best_x0]) best_x0 = s;
    };
    if (keep.empty())
      for (int32_t s = 0; s < c.n; ++s) consider(s);
    else
      for (int32_t s : keep) consider(s);
    if (best_x0 >= 0 && o.x0[best_x0] > 0.0) k = best_x0;
  }
  detail::solve_krylov(c, blocks, k, o, r, fail_fast);
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
      detail::solve_krylov(c, blocks, k2, o, again, fail_fast);
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
  const auto it = std::max_element(r.pi.begin(), r.pi.end());
  const int32_t best = static_cast<int32_t>(it - r.pi.begin());
  if (!(r.pi[k] < 1e-8 * *it) || best == k) return;
  StationaryOptions o2 = o;
  o2.x0 = r.pi;
  StationaryResult again;
  again.requested = r.requested;
  detail::solve_krylov(c, blocks, best, o2, again, fail_fast);
  finish(c, again, o.tol);
  again.iterations += r.iterations;
  again.operator_applications += r.operator_applications;
  for (const auto& [phase, sec] : r.seconds) again.seconds.insert(again.seconds.begin(), {"first_" + phase, sec});
  again.note = detail::cat("re-solved with the most probable state fixed (the first had pi_k / max pi = ",
                           r.pi[k] / *it, ")") + (again.note.empty() ? "" : "; " + again.note);
  r = std::move(again);
}

// ------------------------------------------------------------------ iterative

void solve_power(const Chain& c, const StationaryOptions& o, StationaryResult& r) {
  r.method = Method::Power;
  const long maxit = o.max_iter > 0 ? o.max_iter : 100000;
  std::vector<double> x = o.x0.empty() ? std::vector<double>(c.n, 1.0 / c.n) : o.x0, y(c.n);
  const auto t0 = Clock::now();
  double res = INFINITY;
  long it = 0;
  while (it < maxit) {
    check_interrupt();
    left_multiply(c, x.data(), y.data());
    ++it;
    long double s = 0.0L, d = 0.0L;
    for (int32_t i = 0; i < c.n; ++i) s += y[i];
    for (int32_t i = 0; i < c.n; ++i) {
      y[i] = static_cast<double>(y[i] / s);
      d += std::abs(y[i] - x[i]);
    }
    x.swap(y);
    res = static_cast<double>(d);
    if (res <= 0.5 * o.tol) break;
  }
  r.iterations = it;
  r.operator_applications = it;
  r.seconds.push_back({"iterate", since(t0)});
  r.pi = std::move(x);
  finish(c, r, o.tol);
  if (!r.converged()) r.note = detail::cat("power iteration stopped after ", it, " of max_iter = ", maxit, " products");
}

void solve_gauss_seidel(const Chain& c, const StationaryOptions& o, StationaryResult& r) {
  r.method = Method::GaussSeidel;
  const long maxit = o.max_iter > 0 ? o.max_iter : 100000;
  auto t0 = Clock::now();
  // Column access: transpose of P (rows of PT = columns of P).
  const SpMat PT = SpMat(c.matrix().transpose());
  const std::vector<double> exit = detail::exit_probabilities(c.n, PT.outerIndexPtr(), PT.innerIndexPtr(), PT.valuePtr());
  r.seconds.push_back({"setup", since(t0)});
  std::vector<double> x = o.x0.empty() ? std::vector<double>(c.n, 1.0 / c.n) : o.x0;
  t0 = Clock::now();
  long it = 0;
  double res = INFINITY;
  while (it < maxit) {
    check_interrupt();
    detail::gauss_seidel_sweep(c.n, PT.outerIndexPtr(), PT.innerIndexPtr(), PT.valuePtr(), exit.data(), x);
    ++it;
    if (it % o.check_every == 0 || it == maxit) {
      res = stationary_residual(c, x);
      ++r.operator_applications;
      if (res <= 0.5 * o.tol) break;
    }
  }
  r.iterations = it;
  r.operator_applications += it;
  r.seconds.push_back({"iterate", since(t0)});
  r.pi = std::move(x);
  finish(c, r, o.tol);
  if (!r.converged())
    r.note = detail::cat("Gauss-Seidel stopped after ", it, " of max_iter = ", maxit, " sweeps, residual ", r.residual);
}

void solve_arnoldi(const Chain& c, const StationaryOptions& o, StationaryResult& r) {
  r.method = Method::Arnoldi;
  const a_int n = c.n;
  if (n < 3) {  // ARPACK needs nev + 2 <= ncv <= n
    solve_direct(c, o, r);
    r.fallback = true;
    r.note = "ARPACK needs at least 3 states; solved directly";
    return;
  }
  const a_int nev = 1;
  const a_int ncv = o.ncv > 0 ? std::min<a_int>(std::max<a_int>(o.ncv, 3), n) : std::min<a_int>(30, n);
  const long maxit = o.max_iter > 0 ? o.max_iter : 3000;
  // Basis V (n x ncv), workd (3n), resid, y, the eigenvector and workl (3 ncv^2 + 6 ncv).
  const double need = 8.0 * (static_cast<double>(n) * (static_cast<double>(ncv) + 6.0) + 3.0 * ncv * ncv + 9.0 * ncv);
  if (need > o.arnoldi_max_gb * 1e9)
    throw StateSpaceTooLarge("ncv", detail::cat("solver option 'ncv' must keep the Arnoldi work arrays within arnoldi_max_gb = ",
                                                o.arnoldi_max_gb, " GB: ", n, " states x ncv = ", ncv, " need ",
                                                need / 1e9, " GB (lower ncv or use another method)"));
  std::vector<double> resid = o.x0.empty() ? std::vector<double>(n, 1.0 / n) : o.x0;
  std::vector<double> V(static_cast<size_t>(n) * ncv), workd(3 * static_cast<size_t>(n));
  const a_int lworkl = 3 * ncv * ncv + 6 * ncv;
  std::vector<double> workl(lworkl);
  std::vector<double> y(n);
  double atol = o.tol;
  const auto t0 = Clock::now();
  // Up to 4 rounds: ARPACK's tolerance is a relative 2-norm Ritz estimate, ours
  // an L1 residual of the normalised vector; tighten and restart from the
  // current vector until ours holds.
  for (int round = 0; round < 4; ++round) {
    a_int iparam[11] = {0}, ipntr[14] = {0};
    iparam[0] = 1;  // exact shifts
    iparam[2] = static_cast<a_int>(maxit);
    iparam[6] = 1;  // mode 1: standard problem
    a_int ido = 0, info = 1;  // info = 1: use resid as the start vector
    while (true) {
      check_interrupt();
      dnaupd_c(&ido, "I", n, "LR", nev, atol, resid.data(), ncv, V.data(), n, iparam, ipntr, workd.data(),
               workl.data(), lworkl, &info);
      if (ido != -1 && ido != 1) break;
      left_multiply(c, &workd[ipntr[0] - 1], &workd[ipntr[1] - 1]);
      ++r.operator_applications;
    }
    r.iterations += iparam[2];
    if (info < 0) throw SolverError(detail::cat("ARPACK dnaupd failed with info = ", info));
    const bool arpack_ok = info == 0 && iparam[4] >= 1;
    std::vector<double> pi(n);
    if (arpack_ok) {
      std::vector<a_int> select(ncv, 1);
      std::vector<double> dr(nev + 1), di(nev + 1), Z(static_cast<size_t>(n) * (nev + 1)), workev(3 * ncv);
      a_int ierr = 0;
      dneupd_c(1, "A", select.data(), dr.data(), di.data(), Z.data(), n, 0.0, 0.0, workev.data(), "I", n, "LR", nev,
               atol, resid.data(), ncv, V.data(), n, iparam, ipntr, workd.data(), workl.data(), lworkl, &ierr);
      if (ierr != 0) throw SolverError(detail::cat("ARPACK dneupd failed with info = ", ierr));
      r.extra.push_back({"eigenvalue", dr[0]});
      std::copy(Z.begin(), Z.begin() + n, pi.begin());
    } else {
      std::copy(V.begin(), V.begin() + n, pi.begin());  // current first Arnoldi vector
    }
    long double s = 0.0L;
    for (double v : pi) s += v;
    if (s < 0) for (double& v : pi) v = -v;
    r.pi = pi;
    finish(c, r, o.tol);
    if (!arpack_ok) {
      r.status = Status::NotConverged;
      r.note = detail::cat("ARPACK stopped with info = ", info, " after ", r.iterations,
                           " restarts (max_iter = ", maxit, ")");
      break;
    }
    if (r.converged()) break;
    resid = r.pi;
    atol = std::max(atol * std::max(1e-3, 0.5 * o.tol / r.residual), 1e-15);
  }
  r.seconds.insert(r.seconds.begin(), {"iterate", since(t0)});
  if (!r.converged() && r.note.empty())
    r.note = detail::cat("Arnoldi reached residual ", r.residual, " > tol ", o.tol);
}

}  // namespace

std::string to_string(Method m) {
  switch (m) {
    case Method::Auto: return "auto";
    case Method::Direct: return "direct";
    case Method::Arnoldi: return "arnoldi";
    case Method::GaussSeidel: return "gauss_seidel";
    case Method::Power: return "power";
    case Method::Multilevel: return "multilevel";
    case Method::Krylov: return "krylov";
  }
  return "?";
}

Method method_from(const std::string& s) { return detail::enum_from("solver", s, kAllMethods); }

namespace {
/// "solver option 'name' must be in [lo, hi], got v" unless lo <= v <= hi.
template <class T>
void require_in(const char* name, T v, T lo, T hi, const char* what = "") {
  detail::require_option_in("solver", name, v, lo, hi, what);
}
}  // namespace

void StationaryOptions::validate() const {
  if (!(tol > 0.0 && tol < 1.0))
    throw OptionError(detail::cat("solver option 'tol' must be in (0, 1), got ", tol));
  // Every count has an upper bound: a huge value is a typo, not a request (an
  // unbounded smoothing_sweeps or max_iter turns a solve into a hang).
  const std::pair<const char*, long> values[] = {
      {"max_iter", max_iter},         {"ncv", ncv},
      {"refine_steps", refine_steps}, {"check_every", check_every},
      {"coarse_size", coarse_size},   {"smoothing_sweeps", smoothing_sweeps},
      {"cycle_gamma", cycle_gamma},   {"krylov_basis", krylov_basis},
      {"auto_krylov_min_states", auto_krylov_min_states},
      {"max_states", max_states},     {"tagged_max_states", tagged_max_states}};
  static_assert(std::size(values) == std::size(kIntOptionRanges), "one value per integer option");
  for (const auto& [name, v] : values)
    for (const IntOptionRange& r : kIntOptionRanges)
      if (std::string_view(r.name) == name) require_in<long>(r.name, v, r.lo, r.hi, r.note);
  if (ordering != "amd" && ordering != "metis" && ordering != "cholmod" && ordering != "best" && ordering != "none")
    throw OptionError("solver option 'ordering' must be one of amd, metis, cholmod, best, none, got '" + ordering + "'");
  if (!(direct_max_gb > 0.0) || !std::isfinite(direct_max_gb))
    throw OptionError(detail::cat("solver option 'direct_max_gb' must be > 0 and finite, got ", direct_max_gb));
  if (!(auto_direct_max_flops > 0.0))
    throw OptionError(detail::cat("solver option 'auto_direct_max_flops' must be > 0, got ", auto_direct_max_flops));
  if (!(arnoldi_max_gb > 0.0) || !std::isfinite(arnoldi_max_gb))
    throw OptionError(detail::cat("solver option 'arnoldi_max_gb' must be > 0 and finite, got ", arnoldi_max_gb));
  if (strategy != "auto" && strategy != "symmetric" && strategy != "unsymmetric")
    throw OptionError("solver option 'strategy' must be one of auto, symmetric, unsymmetric, got '" + strategy + "'");
  double x0_sum = 0.0;
  for (double v : x0) {
    if (!std::isfinite(v) || v < 0.0)
      throw OptionError(detail::cat("solver option 'x0' must be finite and non-negative, got an entry ", v));
    x0_sum += v;
  }
  if (!x0.empty() && !(x0_sum > 0.0))
    throw OptionError(detail::cat("solver option 'x0' must have a positive sum, got ", x0_sum));
}

namespace {
/// "(level=3, avg_index=7, modulator=0)": a state by its labels.
std::string state_text(const Chain& c, int32_t s) {
  std::string out = "(";
  for (int d = 0; d < c.space.count(); ++d) {
    if (d > 0) out += ", ";
    out += detail::cat(c.space.component(d).name, "=",
                       d < static_cast<int>(c.labels.size()) ? c.labels[d][s] : -1);
  }
  return out + ")";
}

/// A residual at tol cannot see transitions of probability below tol.  When the chain
/// falls apart into several closed classes without them, how the probability is shared
/// between those classes is fixed only by flows below tol: every way of sharing it has a
/// residual below tol, and each method returns another (service.mu = 1e-300: mean queues
/// of 20, 27 and 34 from three methods, all "converged").  Refused, naming the rarest
/// transition.  O(nnz), and a class analysis only when some entry is below tol.
void check_determined(const Chain& c, double tol) {
  double smallest = INFINITY;
  int32_t from = -1;
  for (int32_t i = 0; i < c.n; ++i)
    for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e)
      if (c.col[e] != i && c.val[e] > 0.0 && c.val[e] < smallest) {
        smallest = c.val[e];
        from = i;
      }
  if (!(smallest < tol)) return;
  const ClosedClasses cc = closed_classes_above(c, tol);
  if (cc.count <= 1) return;
  throw ReducibleChain(detail::cat(
      "the stationary law is not determined to tol = ", tol, ": without its transitions of probability below tol the ",
      "chain falls apart into ", cc.count, " closed classes (one holds state ", state_text(c, cc.first),
      ", another ", state_text(c, cc.second), "), and every way of sharing the probability between them has a ",
      "residual below tol, so no method can tell them apart; the rarest transition has probability ", smallest,
      " (from state ", state_text(c, from), "): raise the model's rarest rates (e.g. service.mu)"));
}

void check_solvable(const Chain& chain, const StationaryOptions& o) {
  o.validate();
  if (!o.x0.empty() && static_cast<int32_t>(o.x0.size()) != chain.n)
    throw OptionError(detail::cat("solver option 'x0' must have ", chain.n, " entries (one per state), got ", o.x0.size()));
  if (chain.report.closed_classes != 1)
    throw ReducibleChain(detail::cat("the chain has ", chain.report.closed_classes,
                                     " closed communicating classes: no unique stationary distribution"));
  check_determined(chain, o.tol);
}

/// The unique closed class as a sorted list of states, or empty when it is the whole
/// chain (the builder found no transient state).  Everything reachable from a state
/// of a closed class is that class, so one search from chain.recurrent_state over the
/// positive entries of P finds it (O(nnz)).
std::vector<int32_t> closed_class(const Chain& c) {
  if (c.report.transient_states == 0) return {};
  const int32_t s0 = c.recurrent_state;
  if (s0 < 0 || s0 >= c.n)
    throw ReducibleChain(detail::cat("the chain records no state of its closed class (recurrent_state = ", s0,
                                     "); call classify() after editing the matrix"));
  std::vector<char> seen(c.n, 0);
  std::vector<int32_t> todo{s0};
  seen[s0] = 1;
  int64_t count = 1;
  while (!todo.empty()) {
    const int32_t v = todo.back();
    todo.pop_back();
    for (int32_t e = c.rowptr[v]; e < c.rowptr[v + 1]; ++e) {
      const int32_t u = c.col[e];
      if (c.val[e] > 0.0 && !seen[u]) {
        seen[u] = 1;
        ++count;
        todo.push_back(u);
      }
    }
  }
  if (count == c.n) return {};
  std::vector<int32_t> keep;
  keep.reserve(static_cast<size_t>(count));
  for (int32_t i = 0; i < c.n; ++i)
    if (seen[i]) keep.push_back(i);
  return keep;
}

/// P restricted to the closed class `keep` (rows stay stochastic: no edge leaves a
/// closed class).  Labels come along (multilevel aggregates on them).
Chain restrict_to(const Chain& c, const std::vector<int32_t>& keep) {
  std::vector<int32_t> map(c.n, -1);
  for (size_t i = 0; i < keep.size(); ++i) map[keep[i]] = static_cast<int32_t>(i);
  Chain s;
  s.n = static_cast<int32_t>(keep.size());
  s.rowptr.assign(static_cast<size_t>(s.n) + 1, 0);
  s.col.reserve(c.col.size());
  s.val.reserve(c.val.size());
  for (int32_t i = 0; i < s.n; ++i) {
    const int32_t v = keep[i];
    for (int32_t e = c.rowptr[v]; e < c.rowptr[v + 1]; ++e)
      if (map[c.col[e]] >= 0) {
        s.col.push_back(map[c.col[e]]);
        s.val.push_back(c.val[e]);
      }
    s.rowptr[i + 1] = static_cast<int32_t>(s.col.size());
  }
  s.time = c.time;
  s.space = c.space;
  s.labels.resize(c.labels.size());
  for (size_t k = 0; k < c.labels.size(); ++k) {
    if (static_cast<int32_t>(c.labels[k].size()) != c.n) continue;
    s.labels[k].resize(keep.size());
    for (size_t i = 0; i < keep.size(); ++i) s.labels[k][i] = c.labels[k][keep[i]];
  }
  s.recurrent_state = 0;
  s.report.closed_classes = 1;
  s.report.transient_states = 0;
  return s;
}

/// Options for the restricted chain: x0 restricted too (uniform when it has no mass there).
StationaryOptions restrict_options(const StationaryOptions& o, const std::vector<int32_t>& keep) {
  StationaryOptions r = o;
  if (o.x0.empty()) return r;
  r.x0.resize(keep.size());
  double sum = 0.0;
  for (size_t i = 0; i < keep.size(); ++i) sum += r.x0[i] = o.x0[keep[i]];
  if (!(sum > 0.0)) r.x0.clear();
  return r;
}

/// pi on the closed class -> pi on all states (exactly 0 on the transient ones); the
/// residual is recomputed on the whole chain.
void expand_to(const Chain& c, const std::vector<int32_t>& keep, double tol, StationaryResult& r) {
  std::vector<double> pi(c.n, 0.0);
  for (size_t i = 0; i < keep.size() && i < r.pi.size(); ++i) pi[keep[i]] = r.pi[i];
  r.pi = std::move(pi);
  const auto t0 = Clock::now();
  r.residual = stationary_residual(c, r.pi);
  ++r.operator_applications;
  r.seconds.push_back({"residual_full", since(t0)});
  r.status = settle(r.status, r.residual, tol);
  r.extra.push_back({"closed_class_states", static_cast<double>(keep.size())});
  r.extra.push_back({"transient_states", static_cast<double>(c.n - static_cast<int64_t>(keep.size()))});
}

/// Sweep budget of the last-resort Gauss-Seidel in auto: max_iter when given, else
/// about 1e10 multiply-adds (seconds, not hours, on a large chain).
long auto_gs_sweeps(const Chain& c, const StationaryOptions& o) {
  if (o.max_iter > 0) return o.max_iter;
  const double nnz = std::max<double>(1.0, static_cast<double>(c.nnz()));
  return static_cast<long>(std::clamp(1e10 / nnz, 100.0, 100000.0));
}

/// What a method solves on.  Krylov works on the whole chain: with a recurrent state
/// fixed its reduced system stays nonsingular when transient states are present, and
/// no copy of the matrix is made.  Every other method solves on the closed class (a
/// restricted copy, made once, on demand).  Transient states end with probability
/// exactly 0 either way.
class Target {
 public:
  Target(const Chain& full, const StationaryOptions& o) : full_(full), o_(o), keep_(closed_class(full)) {}

  template <class F>  // f(const Chain&, const StationaryOptions&, StationaryResult&)
  void run(Method m, StationaryResult& x, F&& f) {
    if (keep_.empty()) return f(full_, o_, x);
    if (m == Method::Krylov) {
      f(full_, o_, x);
      std::vector<double> sub(keep_.size());
      for (size_t i = 0; i < keep_.size(); ++i) sub[i] = x.pi[keep_[i]];
      long double mass = 0.0L;
      for (double v : sub) mass += v;
      if (mass > 0.0L)
        for (double& v : sub) v = static_cast<double>(v / mass);
      x.pi = std::move(sub);
    } else {
      if (!restricted_) {
        restricted_ = std::make_unique<Chain>(restrict_to(full_, keep_));
        ro_ = restrict_options(o_, keep_);
      }
      f(*restricted_, ro_, x);
    }
    expand_to(full_, keep_, o_.tol, x);
  }
  const StationaryOptions& options() const { return o_; }
  int32_t states() const { return full_.n; }
  const Chain& chain() const { return full_; }

 private:
  const Chain& full_;
  const StationaryOptions& o_;
  std::vector<int32_t> keep_;
  std::unique_ptr<Chain> restricted_;
  StationaryOptions ro_;
};

void run_method(Method m, Target& t, StationaryResult& r) {
  t.run(m, r, [m](const Chain& c, const StationaryOptions& o, StationaryResult& x) {
    switch (m) {
      case Method::Auto: throw std::logic_error("internal error: run_method(auto)");
      case Method::Direct: solve_direct(c, o, x); break;
      case Method::Arnoldi: solve_arnoldi(c, o, x); break;
      case Method::GaussSeidel: solve_gauss_seidel(c, o, x); break;
      case Method::Power: solve_power(c, o, x); break;
      case Method::Multilevel: solve_multilevel_finished(c, o, x); break;
      case Method::Krylov: solve_krylov_finished(c, o, x); break;
    }
  });
}

/// Whether the chain has a component krylov's preconditioner does not follow: the
/// traffic classes' contents or a stateful AQM's (count, p_max, clock, cur_max_th).  Its
/// blocks are the avg planes; these components couple states inside and across them, and
/// GMRES then stalls where the LU (whose fill on these chains stays moderate) is quick.
/// Auto's first LU on a large coupled chain: at most this much work (about a minute), so
/// that a chain whose LU fills badly goes on to krylov soon; the full
/// auto_direct_max_flops is tried after krylov.
constexpr double kAutoQuickDirectFlops = 1e11;
/// Auto skips direct on a large chain, without UMFPACK's analysis (which takes a minute on a
/// few million states), when the envelope estimate exceeds direct_max_gb this many times.
constexpr double kEnvelopeFactor = 4.0;

/// The LU's memory (values and indices) if it filled the envelope of P in the natural
/// (key) order: per row the span to its leftmost column, per column to its topmost row.
/// O(nnz); within a factor of about 4 of UMFPACK's estimate with AMD on the class and
/// stateful chains (a proxy of the fill against the state count, not a bound).
double envelope_lu_bytes(const Chain& c) {
  std::vector<int32_t> top(static_cast<size_t>(c.n));
  for (int32_t j = 0; j < c.n; ++j) top[j] = j;
  long double nnz = c.n;
  for (int32_t i = 0; i < c.n; ++i) {
    int32_t left = i;
    for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e) {
      const int32_t j = c.col[e];
      left = std::min(left, j);
      top[j] = std::min(top[j], i);
    }
    nnz += i - left;
  }
  for (int32_t j = 0; j < c.n; ++j) nnz += j - top[j];
  return static_cast<double>(nnz) * 12.0;
}

bool coupled_structure(const Chain& c) {
  // more than one component outside the preconditioner's blocks (the queue models: avg plus
  // the class content or a stateful AQM's components)
  int outside = 0;
  for (const Component& k : c.space.components()) outside += !k.in_block;
  return outside > 1;
}

/// Auto, by the chain's size and structure: direct first on chains below
/// auto_krylov_min_states states and on coupled structures (coupled_structure), krylov
/// first on the other large chains; then the other of the two, multilevel aggregation and
/// Gauss-Seidel with a bounded number of sweeps.  Direct factorises only when UMFPACK's
/// symbolic estimates fit direct_max_gb and auto_direct_max_flops (the analysis is cheap:
/// a refusal costs little); an iterative attempt with a method behind it fails fast
/// (krylov: stalled after 3 restarts without progress, or once its rate cannot reach tol
/// within max_iter).  The first converged result is returned; if none converges, the one
/// with the smallest residual (never throws for non-convergence, only when no method
/// produced a vector at all).  r.methods_tried lists each attempt.
void solve_auto(Target& t, StationaryResult& r) {
  const StationaryOptions& o = t.options();
  const bool coupled = coupled_structure(t.chain());
  const bool small = t.states() < o.auto_krylov_min_states;
  // (method, direct's work budget): a large coupled chain tries a quick LU first and the
  // full budget again after krylov; a large plain chain starts with krylov
  const double quick = std::min(o.auto_direct_max_flops, kAutoQuickDirectFlops);
  std::vector<std::pair<Method, double>> order;
  if (small)
    order = {{Method::Direct, o.auto_direct_max_flops}, {Method::Krylov, 0.0}, {Method::Multilevel, 0.0}};
  else if (coupled)  // aggregation over the lattice follows the class / AQM components, GMRES's blocks do not
    order = {{Method::Multilevel, 0.0}, {Method::Direct, quick}, {Method::Krylov, 0.0}};
  else
    order = {{Method::Krylov, 0.0}, {Method::Direct, o.auto_direct_max_flops}, {Method::Multilevel, 0.0}};
  order.push_back({Method::GaussSeidel, 0.0});
  // a large chain whose LU would plainly not fit skips direct without its (then slow) analysis
  const double envelope = small ? 0.0 : envelope_lu_bytes(t.chain());
  const Method first = order.front().first;
  StationaryResult best;
  bool have = false;
  std::string history;
  std::vector<MethodAttempt> tried;
  for (size_t i = 0; i < order.size(); ++i) {
    const Method m = order[i].first;
    const double flops = order[i].second;
    const bool last = i + 1 == order.size();
    StationaryResult x;
    x.requested = Method::Auto;
    std::string why;
    const auto t0 = Clock::now();
    bool quick_refusal = false;
    if (m == Method::Direct && envelope > kEnvelopeFactor * o.direct_max_gb * 1e9) {
      why = detail::cat("skipped: the LU would need about ", detail::short_num(envelope / 1e9),
                        " GB by the envelope of P, over ", kEnvelopeFactor, " x direct_max_gb = ", o.direct_max_gb);
      tried.push_back({m, since(t0), Status::NotComputed, 0, why});
      history += (history.empty() ? "" : "; ") + to_string(m) + " " + why;
      continue;
    }
    try {
      t.run(m, x, [m, flops, last](const Chain& c, const StationaryOptions& oc, StationaryResult& y) {
        if (m == Method::Direct) {
          solve_direct(c, oc, y, nullptr, flops);
        } else if (m == Method::Krylov) {
          solve_krylov_finished(c, oc, y, !last);
        } else if (m == Method::Multilevel) {
          solve_multilevel_finished(c, oc, y, !last);
        } else {
          StationaryOptions og = oc;
          og.max_iter = auto_gs_sweeps(c, oc);
          solve_gauss_seidel(c, og, y);
        }
      });
      if (!x.converged()) why = x.note.empty() ? detail::cat("residual ", x.residual, " > tol ", o.tol) : x.note;
    } catch (const SolverError& e) {
      x.pi.clear();
      x.status = Status::NumericalIssue;
      why = e.what();
      quick_refusal = m == Method::Direct && flops < o.auto_direct_max_flops &&
                      why.find("auto_direct_max_flops") != std::string::npos;
    }
    if (quick_refusal)
      why.replace(why.find("auto_direct_max_flops = "), std::string("auto_direct_max_flops = ").size(),
                  "auto's first-try budget for a large coupled chain (auto_direct_max_flops applies after krylov) = ");
    tried.push_back({m, since(t0), x.pi.empty() ? Status::NotComputed : x.status, x.iterations, why});
    // the quick LU was refused for its work alone: the full budget after krylov
    if (quick_refusal) {
      auto at = std::find_if(order.begin() + static_cast<long>(i) + 1, order.end(),
                             [](const auto& e) { return e.first == Method::Krylov; });
      order.insert(at == order.end() ? at : at + 1, {Method::Direct, o.auto_direct_max_flops});
    }
    if (!x.pi.empty() && (!have || x.residual < best.residual)) {
      best = std::move(x);
      have = true;
    }
    if (why.empty()) break;
    history += (history.empty() ? "" : "; ") + to_string(m) + " failed (" + why + ")";
  }
  if (!have) throw SolverError("auto: " + history);
  best.fallback = best.method != first;
  if (!history.empty())
    best.note = history + (best.converged() ? "; fell back to " : "; kept the smallest residual, from ") +
                to_string(best.method);
  best.extra.push_back({"auto_coupled_structure", coupled ? 1.0 : 0.0});
  best.methods_tried = std::move(tried);
  r = std::move(best);
}
}  // namespace

/// pi G = 0 is solved as pi P = pi for the uniformised P = I + G / Lambda (same
/// stationary vector); the residual reported is ||pi P - pi||_1 = ||pi G||_1 / Lambda.
template <class Solve>
StationaryResult with_uniformised(const Chain& chain, Solve&& solve) {
  double lambda = 1.0;
  const auto t0 = Clock::now();
  const Chain u = uniformised_chain(chain, &lambda);
  const double setup = since(t0);
  StationaryResult r = solve(u);
  r.seconds.insert(r.seconds.begin(), {"uniformise", setup});
  r.extra.push_back({"uniformization_rate", lambda});
  return r;
}

DirectSolver::DirectSolver(StationaryOptions options) : options_(std::move(options)), cache_(new DirectCache) {
  options_.validate();
}
DirectSolver::~DirectSolver() = default;
DirectSolver::DirectSolver(DirectSolver&&) noexcept = default;
DirectSolver& DirectSolver::operator=(DirectSolver&&) noexcept = default;
long DirectSolver::analyses() const { return cache_->analyses; }
long DirectSolver::solves() const { return cache_->solves; }

StationaryResult DirectSolver::solve(const Chain& chain) {
  if (chain.time == TimeKind::Continuous) return with_uniformised(chain, [&](const Chain& u) { return solve(u); });
  check_solvable(chain, options_);
  StationaryResult r;
  const auto t0 = Clock::now();
  const std::vector<int32_t> keep = closed_class(chain);
  if (keep.empty()) {
    solve_direct(chain, options_, r, cache_.get());
  } else {
    solve_direct(restrict_to(chain, keep), options_, r, cache_.get());
    expand_to(chain, keep, options_.tol, r);
  }
  r.requested = Method::Direct;
  r.seconds.push_back({"total", since(t0)});
  return r;
}

StationaryResult solve_stationary(const Chain& chain, const StationaryOptions& o) {
  if (chain.time == TimeKind::Continuous)
    return with_uniformised(chain, [&](const Chain& u) { return solve_stationary(u, o); });
  check_solvable(chain, o);
  StationaryResult r;
  const auto t0 = Clock::now();
  Target target(chain, o);
  if (o.method == Method::Auto) {
    solve_auto(target, r);
  } else {
    run_method(o.method, target, r);
    r.methods_tried = {{o.method, since(t0), r.status, r.iterations, r.converged() ? std::string() : r.note}};
  }
  r.requested = o.method;
  r.seconds.push_back({"total", since(t0)});
  return r;
}

}  // namespace aqm
