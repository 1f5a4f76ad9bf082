// The direct method (UMFPACK LU of the balance equations with one unknown fixed) and
// DirectSolver, which keeps the symbolic analysis between solves.
#include <umfpack.h>

#include <algorithm>
#include <array>
#include <memory>
#include <utility>

#include "aqmchain/interrupt.hpp"
#include "solvers/stationary_common.hpp"

namespace aqm {
namespace detail {

namespace {

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
}  // namespace detail

/// Symbolic analysis kept between solves whose reduced matrix has the same pattern.
struct DirectCache {
  std::shared_ptr<detail::UmfSymbolic> symbolic;  // shared with a factorisation that may outlive a Ctrl-C
  int32_t k = -1;
  std::vector<SuiteSparse_long> Ap, Ai;
  std::vector<int32_t> chain_rowptr, chain_col;  // pattern of P the analysis was made for
  long analyses = 0, solves = 0;
  double est_bytes = 0.0, est_flops = 0.0;  // UMFPACK's estimates from the analysis
  bool same_chain(const MarkovOperator& c) const {
    return symbolic && static_cast<size_t>(c.rows()) + 1 == chain_rowptr.size() &&
           std::equal(chain_rowptr.begin(), chain_rowptr.end(), c.rowptr()) &&
           static_cast<size_t>(c.nnz()) == chain_col.size() && std::equal(chain_col.begin(), chain_col.end(), c.col());
  }
  bool matches(int32_t kk, const std::vector<SuiteSparse_long>& ap, const std::vector<SuiteSparse_long>& ai) const {
    return symbolic && kk == k && ap == Ap && ai == Ai;
  }
};

namespace detail {
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
double exit_probability(const MarkovOperator& c, int32_t i) {
  double out = 0.0;
  for (int32_t e = c.rowptr()[i]; e < c.rowptr()[i + 1]; ++e)
    if (c.col()[e] != i) out += c.p_off(e);
  return out;
}

ReducedSystem reduced_system(const MarkovOperator& c, int32_t k) {
  ReducedSystem s;
  s.n = c.rows();
  s.k = k;
  s.m = c.rows() - 1;
  s.Ap.assign(static_cast<size_t>(s.m) + 1, 0);
  s.b.assign(s.m, 0.0);
  s.Ai.reserve(static_cast<size_t>(c.nnz()) + c.rows());
  s.Ax.reserve(static_cast<size_t>(c.nnz()) + c.rows());
  for (int32_t i = 0, ri = 0; i < c.rows(); ++i) {
    if (i == k) {
      for (int32_t e = c.rowptr()[i]; e < c.rowptr()[i + 1]; ++e)
        if (c.col()[e] != k) s.b[s.red(c.col()[e])] = c.p_off(e);
      continue;
    }
    // (I - P)_ii as the sum of the row's other entries, not 1 - P_ii: a state left with a
    // probability near or below round-off (P_ii = 1 - 1e-300 is stored as 1) keeps its exact
    // exit rate, and the system stays a nonsingular M-matrix (no cancellation).
    const double exit = exit_probability(c, i);
    bool diag = false;
    for (int32_t e = c.rowptr()[i]; e < c.rowptr()[i + 1]; ++e) {
      const int32_t j = c.col()[e];
      if (j == k) continue;
      if (!diag && j >= i) {
        diag = true;
        s.Ai.push_back(s.red(i));
        s.Ax.push_back(exit);
        if (j == i) continue;
      }
      s.Ai.push_back(s.red(j));
      s.Ax.push_back(-c.p_off(e));
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
std::shared_ptr<UmfSymbolic> analyse(const MarkovOperator& c, const std::shared_ptr<const ReducedSystem>& sys,
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
      cache->chain_rowptr.assign(c.rowptr(), c.rowptr() + c.rows() + 1);
      cache->chain_col.assign(c.col(), c.col() + c.nnz());
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
void refine(const MarkovOperator& c, const ReducedSystem& s, const StationaryOptions& o, const double* control,
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
void solve_direct_at(const MarkovOperator& c, const StationaryOptions& o, StationaryResult& r, DirectCache* cache,
                     const int32_t k, double max_flops) {
  r.method = Method::Direct;
  if (c.rows() == 1) {
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

}  // namespace

/// The reduced system's condition number grows like the mean return time to the
/// fixed state k, i.e. like 1 / pi_k (Stewart 1994, sec. 2.3).  `c` is irreducible
/// (solve_stationary restricts the chain to its closed class first), so every state
/// is recurrent; k is the argmax of a cheap estimate of pi (probable_state).  If the
/// residual still misses tol, solve again with k = argmax pi.
void solve_direct(const MarkovOperator& c, const StationaryOptions& o, StationaryResult& r, DirectCache* cache,
                  double max_flops) {
  int32_t k;
  if (cache && cache->same_chain(c))
    k = cache->k;  // same states and pattern: keep the k of the sweep (and its symbolic analysis)
  else
    k = probable_state(c, o, r);
  solve_direct_at(c, o, r, cache, k, max_flops);
  if (c.rows() < 2) return;
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


void direct_attempt(const MarkovOperator& c, const StationaryOptions& o, StationaryResult& r, const Attempt& a) {
  solve_direct(c, o, r, nullptr, a.max_flops);
}

template <>
const MethodSolver& method_solver<Method::Direct>() {
  static const MethodSolver entry{direct_attempt};
  return entry;
}

}  // namespace detail

using namespace detail;

DirectSolver::DirectSolver(StationaryOptions options) : options_(std::move(options)), cache_(new DirectCache) {
  options_.validate();
}
DirectSolver::~DirectSolver() = default;
DirectSolver::DirectSolver(DirectSolver&&) noexcept = default;
DirectSolver& DirectSolver::operator=(DirectSolver&&) noexcept = default;
long DirectSolver::analyses() const { return cache_->analyses; }
long DirectSolver::solves() const { return cache_->solves; }

StationaryResult DirectSolver::solve(const MarkovOperator& op) {
  check_solvable(op, options_);
  StationaryResult r;
  const auto t0 = Clock::now();
  Target target(op, options_);
  target.run(false, r, [this](const MarkovOperator& c, const StationaryOptions& o, StationaryResult& x) {
    solve_direct(c, o, x, cache_.get());
  });
  r.requested = Method::Direct;
  add_rate(op, r);
  r.seconds.push_back({"total", since(t0)});
  return r;
}

}  // namespace aqm
