// First passage into a target set (analysis/passage.hpp): absorbing-chain
// quantities by stepping, the quasi-stationary tail, the transient kernels and
// preconditioned GMRES solves.
#include "aqmchain/analysis/passage.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>

#include "aqmchain/analysis/poisson.hpp"
#include "aqmchain/analysis/transient_analysis.hpp"
#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"
#include "aqmchain/operators/operator.hpp"
#include "aqmchain/solvers/stationary.hpp"
#include "analysis/row_solver.hpp"
#include "solvers/block_system.hpp"
#include "solvers/power_krylov.hpp"

namespace aqm {

std::string to_string(PassageMethod m) {
  switch (m) {
    case PassageMethod::Auto: return "auto";
    case PassageMethod::Step: return "step";
    case PassageMethod::QuasiStationary: return "quasi_stationary";
    case PassageMethod::Krylov: return "krylov";
    case PassageMethod::RationalKrylov: return "rational_krylov";
    case PassageMethod::Uniformization: return "uniformization";
  }
  return "?";
}

PassageMethod passage_method_from(const std::string& s) { return detail::enum_from("passage", s, kAllPassageMethods); }

void PassageAnalysisOptions::validate() const {
  if (!(tol > 0.0 && tol <= 0.1)) throw OptionError(detail::cat("passage option 'tol' must be in (0, 0.1], got ", tol), "tol");
  detail::require_option_in<int64_t>("passage", "max_steps", max_steps, 1, 1000000000000LL);
  detail::require_option_in<double>("passage", "solve_tol", solve_tol, 1e-16, 1e-4);
  detail::require_option_in<long>("passage", "solve_max_iter", solve_max_iter, 1, 10000000);
  detail::require_option_in<int64_t>("passage", "check_every", check_every, 1, 1000000);
  detail::require_option_in<int>("passage", "max_inverse_iterations", max_inverse_iterations, 1, 1000);
  detail::require_option_in<int64_t>("passage", "exact_slots", exact_slots, 0, 1000000000000LL);
  detail::require_option_in<double>("passage", "shift", shift, 0.0, 1e12);
  detail::require_option_in<int>("passage", "krylov_dim", krylov_dim, 2, 1000);
  kernel.validate();
  if (reward_names.size() != rewards.size())
    throw OptionError(detail::cat("passage option 'rewards' must have one name per vector: ", reward_names.size(),
                                  " names, ", rewards.size(), " vectors"), "rewards");
  for (size_t i = 0; i < rewards.size(); ++i)
    for (double v : rewards[i])
      if (!std::isfinite(v))
        throw OptionError(detail::cat("passage option 'rewards' ('", reward_names[i], "') must hold finite values, got ", v),
                          "rewards");
}

namespace {

using analysis_detail::Clock;
using analysis_detail::kEps;
using analysis_detail::RowSolver;
using analysis_detail::since;
using analysis_detail::SubMatrix;
using analysis_detail::blocks_of;
using analysis_detail::restrict_matrix;
/// quasi_stationary: the quasi-stationary law is computed once this many slots are stepped.
constexpr int64_t kQsdAfter = 1024;
/// rational_krylov (slotted): slots stepped exactly before the Krylov space takes over
/// (they damp every mode with 1 - |lambda| above about 30 / 1024).
constexpr int64_t kExactSlots = 1024;
/// Auto (continuous time): uniformization up to this many products (about Lambda t),
/// rational Krylov above, as the transient analysis chooses.
constexpr double kAutoUniformizationProducts = 1e4;

long double dot(const std::vector<double>& a, const std::vector<double>& b) {
  long double s = 0.0L;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<long double>(a[i]) * b[i];
  return s;
}
long double total(const std::vector<double>& a) {
  long double s = 0.0L;
  for (double v : a) s += v;
  return s;
}


/// Rewards accumulated over [0, t) by the unstopped continuous-time chain (generator G, full
/// matrix F with its diagonal), for each reward vector r:
///   E[ integral_0^t r(X_s) ds ] = t g + (p(t) - p0) h,   g = pi r,   G h = r - g 1,
/// because y(t) = integral_0^t p(s) ds satisfies y(t) G = p(t) - p0 and y(t) 1 = t, so that
/// y(t) r = y(t) (G h + g 1) = (p(t) - p0) h + t g.  pi is the stationary vector; h (Poisson's
/// equation, defined up to a constant) is solved with h = 0 at the likeliest state k, from the
/// transposed generator without row and column k, nonsingular for a chain with one closed class.
/// Error account (per unit reward): (kernel error + t ||pi G||_1) span(h) / 2, since
/// |(x - pi) r| = |x G h| <= ||x G||_1 span(h) / 2.
void continuous_cumulative(const QueueChain& c, const SubMatrix& F, const std::vector<double>& p0,
                           const std::vector<double>& times, TransientMethod tm, const TransientOptions& ko,
                           const PassageAnalysisOptions& o, double rate, PassageAnalysis& r) {
  const int32_t n = F.n;
  const size_t nr = o.rewards.size();
  auto t0 = Clock::now();
  StationaryOptions so;
  so.tol = std::max(o.solve_tol, 1e-14);
  const StationaryResult st = solve_stationary(MarkovOperator(c), so);
  r.operator_applications += st.operator_applications;
  if (!st.converged()) {
    r.note = (r.note.empty() ? "" : r.note + "; ") +
             "rewards over [0, t) not computed: the stationary solve they need did not converge (" + st.note + ")";
    r.rewards_cumulative.clear();
    return;
  }
  r.seconds.push_back({"cumulative_stationary", since(t0)});
  t0 = Clock::now();
  const int32_t k = static_cast<int32_t>(std::max_element(st.pi.begin(), st.pi.end()) - st.pi.begin());
  // -G h = g - r with h_k = 0
  std::vector<double> g(nr, 0.0), span(nr, 0.0), scale(nr, 0.0);
  std::vector<std::vector<double>> b(nr, std::vector<double>(static_cast<size_t>(n)));
  for (size_t q = 0; q < nr; ++q) {
    long double sum = 0.0L;
    for (int32_t i = 0; i < n; ++i) sum += static_cast<long double>(st.pi[static_cast<size_t>(i)]) * o.rewards[q][static_cast<size_t>(i)];
    g[q] = static_cast<double>(sum);
    for (int32_t i = 0; i < n; ++i) {
      b[q][static_cast<size_t>(i)] = g[q] - o.rewards[q][static_cast<size_t>(i)];
      scale[q] = std::max(scale[q], std::abs(o.rewards[q][static_cast<size_t>(i)]));
    }
  }
  const PoissonSolution ps = solve_poisson(c, b, k, o.solve_tol, o.solve_max_iter);
  r.gmres_iterations += ps.iterations;
  r.operator_applications += ps.iterations;
  if (!ps.converged()) {
    r.note = (r.note.empty() ? "" : r.note + "; ") + "rewards over [0, t) not computed: Poisson's equation: " + ps.note;
    r.rewards_cumulative.clear();
    return;
  }
  const std::vector<std::vector<double>>& h = ps.h;
  for (size_t q = 0; q < nr; ++q) {
    const auto [lo, hi] = std::minmax_element(h[q].begin(), h[q].end());
    span[q] = *hi - *lo;
  }
  r.seconds.push_back({"cumulative_poisson", since(t0)});
  t0 = Clock::now();
  GeneratorOperator G = GeneratorOperator::from_csr(n, F.rowptr.data(), F.col.data(), F.val.data(), 1e-9);
  G.matrix.space = &c.space;
  G.matrix.labels = &c.labels;
  r.rewards_cumulative.assign(nr, std::vector<double>(times.size(), 0.0));
  const TransientResult x = expm_multiply(G, p0, times, tm, ko, [&](size_t kk, double t, const double* p) {
    for (size_t q = 0; q < nr; ++q) {
      long double d = 0.0L;
      for (int32_t i = 0; i < n; ++i)
        d += static_cast<long double>(p[i] - p0[static_cast<size_t>(i)]) * h[q][static_cast<size_t>(i)];
      r.rewards_cumulative[q][kk] = std::max(0.0, static_cast<double>(static_cast<long double>(t) * g[q] + d));
    }
  });
  r.operator_applications += x.operator_applications;
  const double pi_residual = st.residual * rate;  // ||pi G||_1
  for (size_t q = 0; q < nr; ++q)
    if (scale[q] > 0.0)
      r.cumulative_error = std::max(r.cumulative_error,
                                    (x.error_sum + x.roundoff + times.back() * pi_residual) * span[q] / 2.0 / scale[q]);
  r.extra.push_back({"cumulative_reference_state", static_cast<double>(k)});
  r.seconds.push_back({"cumulative_kernel", since(t0)});
  if (!x.converged()) {
    r.note = (r.note.empty() ? "" : r.note + "; ") + "rewards over [0, t): " + x.note;
    r.rewards_cumulative.clear();
  }
}

}  // namespace

PassageAnalysis analyse_passage(const QueueChain& c, const std::vector<char>& target, const std::vector<double>& p0,
                                const std::vector<double>& times, const PassageAnalysisOptions& o) {
  const auto t_start = Clock::now();
  o.validate();
  const int32_t n = c.n;
  const bool continuous = c.time == TimeKind::Continuous;
  if (static_cast<int32_t>(target.size()) != n)
    throw ModelError("to", detail::cat("parameter 'to' must mark ", n, " states (one per state), got ", target.size()));
  check_initial_law(p0, n);
  check_output_times(times);
  for (size_t k = 0; k < times.size(); ++k) {
    if (!continuous && (times[k] != std::floor(times[k]) || times[k] > 9e15))
      throw ModelError("times", detail::cat("parameter 'times' must hold whole numbers of slots for a slotted model, got ",
                                            times[k]));
  }
  for (size_t i = 0; i < o.rewards.size(); ++i)
    if (static_cast<int32_t>(o.rewards[i].size()) != n)
      throw OptionError(detail::cat("passage option 'rewards' ('", o.reward_names[i], "') must give one value per state (",
                                    n, "), got ", o.rewards[i].size()), "rewards");

  PassageMethod method = o.method;
  if (!continuous && (method == PassageMethod::Krylov || method == PassageMethod::Uniformization))
    throw OptionError(detail::cat("passage method '", to_string(method),
                                  "' needs a continuous-time model; a slotted one takes step, quasi_stationary or "
                                  "rational_krylov"),
                      "method");
  if (continuous && (method == PassageMethod::Step || method == PassageMethod::QuasiStationary))
    throw OptionError(detail::cat("passage method '", to_string(method),
                                  "' needs a slotted model; a continuous-time one takes krylov, rational_krylov or "
                                  "uniformization"),
                      "method");
  const double rate = exit_rate(c);
  std::string auto_note;
  if (method == PassageMethod::Auto) {
    if (!continuous) {
      method = PassageMethod::RationalKrylov;
    } else {
      const double products = rate * times.back();
      method = products <= kAutoUniformizationProducts ? PassageMethod::Uniformization : PassageMethod::RationalKrylov;
      auto_note = detail::cat("auto: ", to_string(method), " (uniformization needs about ", products,
                              " products; it is chosen up to ", kAutoUniformizationProducts, ")");
    }
  }

  PassageAnalysis r;
  r.requested = o.method;
  r.method = method;
  r.note = auto_note;
  r.times = times;
  r.reward_names = o.reward_names;
  r.states = n;

  // ---- the target, the states that can reach it (backward search), the rest
  const auto t_setup = Clock::now();
  std::vector<int32_t> rrp(static_cast<size_t>(n) + 1, 0), rci(c.col.size());
  for (int32_t i = 0; i < n; ++i)
    for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e)
      if (c.val[e] > 0.0) ++rrp[static_cast<size_t>(c.col[e]) + 1];
  for (int32_t j = 0; j < n; ++j) rrp[j + 1] += rrp[j];
  {
    std::vector<int32_t> fill(rrp.begin(), rrp.end() - 1);
    for (int32_t i = 0; i < n; ++i)
      for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e)
        if (c.val[e] > 0.0) rci[static_cast<size_t>(fill[c.col[e]]++)] = i;
  }
  std::vector<char> reach(static_cast<size_t>(n), 0);
  std::vector<int32_t> queue;
  for (int32_t i = 0; i < n; ++i)
    if (target[static_cast<size_t>(i)]) {
      reach[static_cast<size_t>(i)] = 1;
      queue.push_back(i);
      ++r.target_states;
    }
  if (r.target_states == 0)
    throw ModelError("to", "parameter 'to' selects no state of this chain (the target set is empty)");
  for (size_t q = 0; q < queue.size(); ++q) {
    const int32_t j = queue[q];
    for (int32_t e = rrp[j]; e < rrp[j + 1]; ++e) {
      const int32_t i = rci[static_cast<size_t>(e)];
      if (!reach[static_cast<size_t>(i)]) {
        reach[static_cast<size_t>(i)] = 1;
        queue.push_back(i);
      }
    }
  }
  long double p_target = 0.0L, p_reach = 0.0L;
  for (int32_t i = 0; i < n; ++i) {
    if (target[static_cast<size_t>(i)]) p_target += p0[static_cast<size_t>(i)];
    if (reach[static_cast<size_t>(i)]) p_reach += p0[static_cast<size_t>(i)];
    if (!reach[static_cast<size_t>(i)]) ++r.never_states;
  }
  if (!(p_reach > 0.0L))
    throw ModelError("to", "parameter 'to': the target cannot be reached from the initial law p0 (no path leads there)");

  // N: the non-target states (stepping); A: those that can reach the target (solves)
  std::vector<int32_t> localN(static_cast<size_t>(n), -1), localA(static_cast<size_t>(n), -1), statesN, statesA;
  for (int32_t i = 0; i < n; ++i) {
    if (target[static_cast<size_t>(i)]) continue;
    localN[static_cast<size_t>(i)] = static_cast<int32_t>(statesN.size());
    statesN.push_back(i);
    if (reach[static_cast<size_t>(i)]) {
      localA[static_cast<size_t>(i)] = static_cast<int32_t>(statesA.size());
      statesA.push_back(i);
    }
  }
  const bool never_empty = r.never_states == 0;
  // The states p0 can enter before T (a forward search from p0's support that stops at the
  // target): P(T = inf) > 0 exactly when one of them cannot reach the target.
  std::vector<char> before_t(static_cast<size_t>(n), 0);
  bool escapes = false;
  if (!never_empty) {
    std::vector<int32_t> front;
    for (int32_t i = 0; i < n; ++i)
      if (p0[static_cast<size_t>(i)] > 0.0 && !target[static_cast<size_t>(i)]) {
        before_t[static_cast<size_t>(i)] = 1;
        front.push_back(i);
      }
    for (size_t q = 0; q < front.size(); ++q) {
      const int32_t i = front[q];
      escapes = escapes || !reach[static_cast<size_t>(i)];
      for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e) {
        const int32_t j = c.col[e];
        if (c.val[e] > 0.0 && j != i && !target[static_cast<size_t>(j)] && !before_t[static_cast<size_t>(j)]) {
          before_t[static_cast<size_t>(j)] = 1;
          front.push_back(j);
        }
      }
    }
  }
  // flow into the target from each non-target state (per slot, or a rate)
  auto flow_into_target = [&](const std::vector<int32_t>& states) {
    std::vector<double> b(states.size(), 0.0);
    for (size_t li = 0; li < states.size(); ++li) {
      const int32_t i = states[li];
      long double s = 0.0L;
      for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e)
        if (target[static_cast<size_t>(c.col[e])] && c.col[e] != i) s += c.val[e];
      b[li] = static_cast<double>(s);
    }
    return b;
  };
  r.seconds.push_back({"setup", since(t_setup)});

  // ---- mean, reach probability, rewards before T: z (I - P_AA) = p0_A
  std::unique_ptr<RowSolver> solverA;
  SubMatrix MA;
  bool failed = false;
  {
    const auto t0 = Clock::now();
    MA = restrict_matrix(c, localA, statesA, continuous);
    std::vector<double> rhs(statesA.size());
    for (size_t li = 0; li < statesA.size(); ++li) rhs[li] = p0[static_cast<size_t>(statesA[li])];
    r.reach_probability = static_cast<double>(p_target);
    r.mean = 0.0;
    r.rewards_until.assign(o.rewards.size(), 0.0);
    if (!statesA.empty()) {
      solverA = std::make_unique<RowSolver>(c, MA, continuous, rate, o.solve_tol, o.solve_max_iter);
      std::vector<double> z;
      std::string note;
      double res = solverA->solve(rhs, z, note);
      if (res < 0.0) {
        failed = true;
        r.status = Status::NotConverged;
        r.note = (r.note.empty() ? "" : r.note + "; ") + "mean: " + note;
      }
      // Iterative refinement with the residual formed in extended precision: the solve's own
      // residual cannot fall below about eps ||B|| ||z||, which for a rare target (E[T] of
      // 1e12) is far above the right-hand side's round-off.  Two corrections at most.
      auto residual = [&](std::vector<double>& out) {  // rhs - z (I - M) (continuous: rhs - z (-G))
        std::vector<long double> acc(statesA.size(), 0.0L);
        for (size_t li = 0; li < statesA.size(); ++li) acc[li] = rhs[li];
        for (int32_t li = 0; li < MA.n; ++li) {
          const long double zi = z[static_cast<size_t>(li)];
          if (zi == 0.0L) continue;
          if (!continuous) acc[static_cast<size_t>(li)] -= zi;
          for (int32_t e = MA.rowptr[li]; e < MA.rowptr[li + 1]; ++e)
            acc[static_cast<size_t>(MA.col[e])] += zi * MA.val[e];
        }
        long double l1 = 0.0L;
        out.resize(statesA.size());
        for (size_t li = 0; li < statesA.size(); ++li) {
          out[li] = static_cast<double>(acc[li]);
          l1 += std::abs(acc[li]);
        }
        return static_cast<double>(l1);
      };
      long double rhs_l1 = 0.0L;
      for (double v : rhs) rhs_l1 += std::abs(v);
      std::vector<double> rres, dz;
      for (int pass = 0; pass < 2 && res >= 0.0 && rhs_l1 > 0.0L; ++pass) {
        const double before = residual(rres) / static_cast<double>(rhs_l1);
        if (pass == 0) r.extra.push_back({"mean_residual_before_refinement", before});
        if (!(before > 1e3 * kEps)) {
          res = before;
          break;
        }
        std::string n2;
        if (solverA->solve(rres, dz, n2) < 0.0) break;  // a correction that does not converge is not applied
        std::vector<double> z_old = z;
        for (size_t li = 0; li < z.size(); ++li) z[li] += dz[li];
        const double after = residual(rres) / static_cast<double>(rhs_l1);
        if (!(after < before)) {
          z = z_old;
          res = before;
          break;
        }
        res = after;
      }
      r.mean_residual = std::max(res, 0.0);
      const std::vector<double> b = flow_into_target(statesA);
      r.reach_probability = static_cast<double>(p_target + dot(z, b));
      r.mean = static_cast<double>(total(z));
      for (size_t k = 0; k < o.rewards.size(); ++k) {
        long double s = 0.0L;
        for (size_t li = 0; li < statesA.size(); ++li) s += static_cast<long double>(z[li]) * o.rewards[k][statesA[li]];
        r.rewards_until[k] = static_cast<double>(s);
      }
    }
    r.reach_probability = std::min(1.0, r.reach_probability);
    // every state p0 can enter before T can reach the target: a finite chain then enters it
    // with probability 1 (the solve's value is kept as a check of its accuracy)
    r.extra.push_back({"reach_probability_from_solve", r.reach_probability});
    if (!escapes) r.reach_probability = 1.0;
    r.never_probability = escapes ? std::max(0.0, 1.0 - r.reach_probability) : 0.0;
    if (escapes) {
      r.mean = std::numeric_limits<double>::infinity();
      for (size_t k = 0; k < o.rewards.size(); ++k) {
        // rewards keep accumulating on the paths that never reach the target
        bool positive = false;
        for (int32_t i = 0; i < n; ++i)
          if (before_t[static_cast<size_t>(i)] && !reach[static_cast<size_t>(i)] &&
              o.rewards[k][static_cast<size_t>(i)] != 0.0)
            positive = true;
        if (positive) r.rewards_until[k] = std::numeric_limits<double>::infinity();
      }
      r.note = (r.note.empty() ? "" : r.note + "; ") +
               detail::cat(r.never_states, " states cannot reach the target and p0 can enter some of them: P(T = inf) = ",
                           r.never_probability, ", so E[T] = inf");
    }
    r.seconds.push_back({"mean", since(t0)});
  }

  // ---- cdf at the output times
  r.cdf.assign(times.size(), 0.0);
  r.survival.assign(times.size(), 0.0);
  r.error_bound.assign(times.size(), 0.0);
  const size_t nr = o.rewards.size();
  const bool cumulative = o.cumulative && nr > 0 && !continuous;
  if (cumulative || (o.cumulative && nr > 0)) r.rewards_cumulative.assign(nr, std::vector<double>(times.size(), 0.0));
  auto emitted = [&](size_t k) {
    r.outputs = k + 1;
    if (o.progress) o.progress(times[k], times.back());
  };

  if (continuous) {
    const auto t0 = Clock::now();
    // G' with the target absorbing (empty rows), diagonal explicit
    std::vector<int32_t> all(static_cast<size_t>(n)), id(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    std::iota(id.begin(), id.end(), 0);
    SubMatrix F = restrict_matrix(c, id, all, true);
    const SubMatrix full = o.cumulative && nr > 0 ? F : SubMatrix{};
    {
      SubMatrix K;
      K.n = n;
      K.rowptr.assign(static_cast<size_t>(n) + 1, 0);
      for (int32_t i = 0; i < n; ++i) {
        if (!target[static_cast<size_t>(i)])
          for (int32_t e = F.rowptr[i]; e < F.rowptr[i + 1]; ++e) {
            K.col.push_back(F.col[e]);
            K.val.push_back(F.val[e]);
          }
        K.rowptr[static_cast<size_t>(i) + 1] = static_cast<int32_t>(K.col.size());
      }
      F = std::move(K);
    }
    GeneratorOperator G = GeneratorOperator::from_csr(n, F.rowptr.data(), F.col.data(), F.val.data(), 1e-9);
    G.matrix.space = &c.space;
    G.matrix.labels = &c.labels;
    TransientOptions ko = o.kernel;
    ko.tol = o.tol;
    ko.project = false;
    const TransientMethod tm = method == PassageMethod::Krylov           ? TransientMethod::Krylov
                               : method == PassageMethod::RationalKrylov ? TransientMethod::RationalKrylov
                                                                         : TransientMethod::Uniformization;
    TransientResult x = expm_multiply(G, p0, times, tm, ko, [&](size_t k, double, const double* p) {
      long double s = 0.0L, a = 0.0L;
      for (int32_t i = 0; i < n; ++i) (target[static_cast<size_t>(i)] ? a : s) += p[i];
      r.cdf[k] = std::clamp(static_cast<double>(a), 0.0, 1.0);
      r.survival[k] = std::clamp(static_cast<double>(s), 0.0, 1.0);
      emitted(k);
    });
    for (size_t k = 0; k < times.size(); ++k) r.error_bound[k] = x.error_sum + x.roundoff;
    r.steps = x.steps;
    r.operator_applications += x.operator_applications;
    r.residual = x.error_sum;
    for (const auto& e : x.extra) r.extra.push_back({"kernel_" + e.first, e.second});
    if (!x.converged()) {
      failed = true;
      r.status = x.status;
      r.note = (r.note.empty() ? "" : r.note + "; ") + x.note;
    }
    r.seconds.push_back({"kernel", since(t0)});
    if (o.cumulative && nr > 0) continuous_cumulative(c, full, p0, times, tm, ko, o, rate, r);
  } else {
    // slotted: u_t = p0_N P_NN^t
    const auto t0 = Clock::now();
    const SubMatrix MN = restrict_matrix(c, localN, statesN, false);
    const TransposedCsr PNT(CsrOperator(MN.n, MN.rowptr.data(), MN.col.data(), MN.val.data()));
    const std::vector<double> bN = flow_into_target(statesN);
    std::vector<double> u(statesN.size()), w(statesN.size());
    for (size_t li = 0; li < statesN.size(); ++li) u[li] = p0[static_cast<size_t>(statesN[li])];
    long double cdf = p_target;
    double S = static_cast<double>(total(u));
    // the unstopped chain for the cumulative rewards
    std::unique_ptr<TransposedCsr> PT;
    std::vector<double> p, q, snap;
    std::vector<long double> cum(nr, 0.0L);
    int64_t tp = 0, next_check = 1024;
    bool frozen = false;
    double frozen_change = 0.0;
    int64_t frozen_at = 0;
    double reward_sup = 0.0;
    if (cumulative) {
      PT = std::make_unique<TransposedCsr>(CsrOperator(n, c.rowptr.data(), c.col.data(), c.val.data()));
      p = p0;
      q.resize(p.size());
      for (const auto& rv : o.rewards)
        for (double v : rv) reward_sup = std::max(reward_sup, std::abs(v));
    }
    auto advance_p = [&](int64_t to) {  // the unstopped law to slot `to`, accumulating r(X_s), s < to
      while (tp < to) {
        if (frozen) {
          for (size_t k = 0; k < nr; ++k) cum[k] += static_cast<long double>(to - tp) * dot(p, o.rewards[k]);
          tp = to;
          break;
        }
        for (size_t k = 0; k < nr; ++k) cum[k] += dot(p, o.rewards[k]);
        PT->apply(p.data(), q.data());
        p.swap(q);
        ++tp;
        ++r.operator_applications;
        if ((tp & 1023) == 0) check_interrupt();
        if (tp == next_check) {
          if (!snap.empty()) {
            long double d = 0.0L, d1 = 0.0L;
            for (size_t i = 0; i < p.size(); ++i) {
              d += std::abs(p[i] - snap[i]);
              d1 += std::abs(p[i] - q[i]);
            }
            if (d <= 1e-13 && d1 <= 1e-13) {
              frozen = true;
              frozen_change = static_cast<double>(std::max(d, d1));
              frozen_at = tp;
            }
          }
          snap = p;
          next_check = 2 * tp;
        }
      }
    };
    auto record_cum = [&](size_t k) {
      if (!cumulative) return;
      advance_p(static_cast<int64_t>(times[k]));
      for (size_t j = 0; j < nr; ++j) r.rewards_cumulative[j][k] = static_cast<double>(cum[j]);
      if (frozen && reward_sup > 0.0)
        r.cumulative_error = std::max(r.cumulative_error, (times[k] - static_cast<double>(frozen_at)) * frozen_change);
    };

    bool qs = method == PassageMethod::QuasiStationary;
    const bool rk = method == PassageMethod::RationalKrylov;
    const int64_t t_exact = o.exact_slots > 0 ? o.exact_slots : kExactSlots;
    if (rk && t_exact >= static_cast<int64_t>(times.back()))
      r.note = (r.note.empty() ? "" : r.note + "; ") +
               detail::cat("rational_krylov: every output is within the ", t_exact, " exact slots (stepped)");
    if (qs && !never_empty) {
      r.note = (r.note.empty() ? "" : r.note + "; ") +
               "quasi_stationary: states that cannot reach the target hold the survival: stepping every slot";
    }
    std::vector<double> v;  // the quasi-stationary law (local over N)
    double rho = 0.0, rres = 0.0;
    bool switched = false;
    int64_t t = 0, t_switch = -1;
    double S_switch = 0.0, d_switch = 0.0;
    long double cdf_switch = 0.0L;
    double qsd_seconds = 0.0, tail_seconds = 0.0;
    const int64_t last = static_cast<int64_t>(times.back());
    size_t k = 0;
    auto emit_stepped = [&](int64_t tt) {
      while (k < times.size() && static_cast<int64_t>(times[k]) <= tt) {
        r.cdf[k] = std::clamp(static_cast<double>(cdf), 0.0, 1.0);
        r.survival[k] = std::clamp(S, 0.0, 1.0);
        // round-off of the propagation: the defect of S + cdf = 1, and a per-product share
        r.error_bound[k] = std::abs(static_cast<double>(cdf) + S - 1.0) + 4.0 * kEps * static_cast<double>(tt + 1);
        record_cum(k);
        emitted(k);
        ++k;
      }
    };
    emit_stepped(0);
    while (k < times.size() && !failed) {
      if (switched) {
        const auto ts = Clock::now();
        const double s = times[k] - static_cast<double>(t_switch);
        const double decay = std::exp(s * std::log(rho));
        r.survival[k] = S_switch * decay;
        r.cdf[k] = std::clamp(static_cast<double>(cdf_switch) - S_switch * std::expm1(s * std::log(rho)), 0.0, 1.0);
        r.error_bound[k] = S_switch * (d_switch + rres * std::min(s, 1.0 / (1.0 - rho))) +
                           4.0 * kEps * static_cast<double>(t_switch + 1);
        tail_seconds += since(ts);
        record_cum(k);
        emitted(k);
        ++k;
        continue;
      }
      if (r.steps >= o.max_steps) {
        failed = true;
        r.status = Status::NotConverged;
        r.note = (r.note.empty() ? "" : r.note + "; ") +
                 detail::cat("step budget max_steps = ", o.max_steps, " ran out at t = ", t, " (", k, " of ",
                             times.size(), " output times produced)");
        break;
      }
      cdf += dot(u, bN);
      PNT.apply(u.data(), w.data());
      u.swap(w);
      ++t;
      ++r.steps;
      ++r.operator_applications;
      S = static_cast<double>(total(u));
      if ((t & 255) == 0) check_interrupt();
      emit_stepped(t);
      if (rk && t >= t_exact && k < times.size()) {
        const auto tk = Clock::now();
        std::vector<int64_t> svec;
        for (size_t j = k; j < times.size(); ++j) svec.push_back(static_cast<int64_t>(times[j]) - t);
        // the survival 1^T u P_NN^s, and the cdf's increment as the sum of the flows into the
        // target (no cancellation when P(T <= t) is small)
        const std::vector<double> ones(u.size(), 1.0);
        const double gamma = o.shift > 0.0 ? o.shift : static_cast<double>(t);
        r.gamma = gamma;
        const detail::PowerKrylovResult pk = detail::power_krylov(
            MN.n, MN.rowptr.data(), MN.col.data(), MN.val.data(), blocks_of(c, statesN), u, {&ones, &bN}, {1.0, 1.0},
            {0, 1}, {1.0, 1.0}, svec, gamma, o.tol, o.krylov_dim, o.solve_tol, o.solve_max_iter);
        r.basis = pk.basis;
        r.solves += pk.solves;
        r.gmres_iterations += pk.gmres_iterations;
        r.operator_applications += pk.gmres_iterations;
        r.extra.push_back({"krylov_setup_seconds", pk.seconds_setup});
        r.extra.push_back({"krylov_solve_seconds", pk.seconds_solves});
        r.extra.push_back({"krylov_ritz_max", pk.ritz_max});
        r.extra.push_back({"krylov_clamped", static_cast<double>(pk.clamped)});
        // the unstopped chain's rewards over the tail, from its law at t, by its own basis
        detail::PowerKrylovResult pc;
        if (cumulative) {
          advance_p(t);
          if (!frozen) {
            // error target: tol relative to the largest possible sum, sup|r| times the last step
            std::vector<const std::vector<double>*> fs;
            std::vector<double> sc;
            for (const auto& rv : o.rewards) {
              fs.push_back(&rv);
              double m = 0.0;
              for (double v : rv) m = std::max(m, std::abs(v));
              sc.push_back((m > 0.0 ? m : 1.0) * static_cast<double>(std::max<int64_t>(svec.back(), 1)));
            }
            pc = detail::power_krylov(n, c.rowptr.data(), c.col.data(), c.val.data(),
                                      in_block_partition(c.space, c.labels, n), p, fs, sc,
                                      std::vector<char>(fs.size(), 1),
                                      std::vector<double>(fs.size(), std::numeric_limits<double>::infinity()), svec, gamma, o.tol, o.krylov_dim, o.solve_tol,
                                      o.solve_max_iter);
            r.solves += pc.solves;
            r.gmres_iterations += pc.gmres_iterations;
            r.operator_applications += pc.gmres_iterations;
            if (!pc.converged) {
              failed = true;
              r.status = Status::NotConverged;
              r.note = (r.note.empty() ? "" : r.note + "; ") + "rational_krylov (cumulative rewards): " + pc.note;
            }
          }
        }
        if (!pk.converged) {
          failed = true;
          r.status = Status::NotConverged;
          r.note = (r.note.empty() ? "" : r.note + "; ") + "rational_krylov: " + pk.note;
        }
        tail_seconds += since(tk);
        if (failed) break;
        const double S0 = S;
        const long double cdf0 = cdf;
        for (size_t j = 0; j < svec.size(); ++j, ++k) {
          r.survival[k] = std::clamp(pk.values[0][j], 0.0, 1.0);
          r.cdf[k] = std::clamp(static_cast<double>(cdf0) + pk.sums[1][j], 0.0, 1.0);
          (void)S0;
          r.error_bound[k] = pk.estimate[j] + 4.0 * kEps * static_cast<double>(t + 1);
          if (cumulative) {
            for (size_t q = 0; q < nr; ++q)
              r.rewards_cumulative[q][k] =
                  static_cast<double>(cum[q]) + (frozen ? static_cast<double>(svec[j]) * static_cast<double>(dot(p, o.rewards[q]))
                                                        : pc.sums[q][j]);
            if (!frozen)
              r.cumulative_error = std::max(r.cumulative_error,
                                            pc.estimate[j] * static_cast<double>(std::max<int64_t>(svec.back(), 1)));
            else r.cumulative_error = std::max(r.cumulative_error, (times[k] - static_cast<double>(frozen_at)) * frozen_change);
          }
          emitted(k);
        }
        r.switch_time = static_cast<double>(t);
        break;
      }
      if (!qs || !never_empty || k >= times.size()) continue;
      if (v.empty() && t >= kQsdAfter && last > t + o.check_every && S > 0.0) {
        // the quasi-stationary law by inverse iteration from the conditioned law
        const auto tq = Clock::now();
        v.resize(u.size());
        for (size_t i = 0; i < u.size(); ++i) v[i] = u[i] / S;
        std::vector<double> x;
        double change = 1.0;
        for (int it = 0; it < o.max_inverse_iterations; ++it) {
          std::string note;
          if (solverA->solve(v, x, note) < 0.0) {
            failed = true;
            r.status = Status::NotConverged;
            r.note = (r.note.empty() ? "" : r.note + "; ") + "quasi-stationary law: " + note;
            break;
          }
          ++r.inverse_iterations;
          long double sx = 0.0L;
          for (double& xi : x) {
            xi = std::max(xi, 0.0);
            sx += xi;
          }
          change = 0.0;
          for (size_t i = 0; i < x.size(); ++i) {
            const double vi = static_cast<double>(x[i] / sx);
            change += std::abs(vi - v[i]);
            v[i] = vi;
          }
          if (change <= 64.0 * kEps) break;
        }
        if (failed) break;
        PNT.apply(v.data(), w.data());
        ++r.operator_applications;
        rho = static_cast<double>(total(w));
        long double rr = 0.0L;
        for (size_t i = 0; i < v.size(); ++i) rr += std::abs(w[i] - rho * v[i]);
        rres = static_cast<double>(rr);
        r.rho = rho;
        r.qsd_residual = rres;
        r.extra.push_back({"qsd_last_change", change});
        qsd_seconds += since(tq);
        if (!(rho > 0.0 && rho < 1.0)) {
          r.note = (r.note.empty() ? "" : r.note + "; ") +
                   detail::cat("quasi_stationary: decay factor rho = ", rho, " not in (0, 1): stepping every slot");
          v.clear();
          rho = 0.0;
          qs = false;
          continue;
        }
      }
      if (!v.empty() && t % o.check_every == 0) {
        long double d = 0.0L;
        for (size_t i = 0; i < u.size(); ++i) d += std::abs(u[i] / S - v[i]);
        const double s_max = static_cast<double>(last - t);
        const double bound = S * (static_cast<double>(d) + rres * std::min(s_max, 1.0 / (1.0 - rho)));
        if (bound <= o.tol || S == 0.0) {
          switched = true;
          t_switch = t;
          S_switch = S;
          d_switch = static_cast<double>(d);
          cdf_switch = cdf;
          r.switch_time = static_cast<double>(t);
          r.extra.push_back({"qsd_distance_at_switch", d_switch});
        }
      }
    }
    r.residual = *std::max_element(r.error_bound.begin(), r.error_bound.end());
    r.seconds.push_back({"step", since(t0) - qsd_seconds - tail_seconds});
    r.seconds.push_back({"quasi_stationary", qsd_seconds});
    r.seconds.push_back({rk ? "krylov" : "tail", tail_seconds});
    if (method == PassageMethod::QuasiStationary && r.switch_time < 0 && !failed && never_empty)
      r.note = (r.note.empty() ? "" : r.note + "; ") + "quasi_stationary: every output was reached by stepping (exact)";
    if (cumulative && frozen)
      r.extra.push_back({"cumulative_steady_at", static_cast<double>(frozen_at)});
  }
  if (solverA) {
    r.solves += solverA->solves;
    r.gmres_iterations += solverA->iterations;
    r.operator_applications += solverA->iterations;
    r.seconds.push_back({"solve_setup", solverA->setup_seconds});
    r.seconds.push_back({"solves", solverA->solve_seconds});
  }
  r.iterations = r.steps;
  if (!failed && r.outputs == times.size()) {
    r.status = Status::Converged;
  } else if (r.status == Status::NotComputed || r.status == Status::Converged) {
    r.status = Status::NotConverged;
  }
  r.times.resize(r.outputs);
  r.cdf.resize(r.outputs);
  r.survival.resize(r.outputs);
  r.error_bound.resize(r.outputs);
  for (auto& cv : r.rewards_cumulative) cv.resize(r.outputs);
  r.seconds.push_back({"total", since(t_start)});
  return r;
}

}  // namespace aqm
