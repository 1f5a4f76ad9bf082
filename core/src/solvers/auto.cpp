// Method "auto": the methods in turn, by the chain's size and structure.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "solvers/krylov.hpp"
#include "solvers/multilevel.hpp"
#include "solvers/stationary_common.hpp"

namespace aqm::detail {

namespace {

/// Sweep budget of the last-resort Gauss-Seidel in auto: max_iter when given, else
/// about 1e10 multiply-adds (seconds, not hours, on a large chain).
long auto_gs_sweeps(const MarkovOperator& c, const StationaryOptions& o) {
  if (o.max_iter > 0) return o.max_iter;
  const double nnz = std::max<double>(1.0, static_cast<double>(c.nnz()));
  return static_cast<long>(std::clamp(1e10 / nnz, 100.0, 100000.0));
}

/// Auto's first LU on a large coupled chain: at most this much work (about a minute), so
/// that a chain whose LU fills badly goes on to krylov soon; the full
/// auto_direct_max_flops is tried after krylov.
constexpr double kAutoQuickDirectFlops = 1e11;
/// Auto's first LU on a small chain: at most this much work per stored entry of P (with a
/// floor), about the work of the few hundred products an iterative solve of such a chain
/// takes; a chain whose LU fills badly (REDwM's sums, several stateful components) goes on
/// to the iterative methods, and the full auto_direct_max_flops is tried after krylov.
constexpr double kAutoSmallDirectFlopsPerEntry = 1e4;
constexpr double kAutoSmallDirectFlopsFloor = 1e9;
/// Auto skips direct on a large chain, without UMFPACK's analysis (which takes a minute on a
/// few million states), when the envelope estimate exceeds direct_max_gb this many times.
constexpr double kEnvelopeFactor = 4.0;

/// The LU's memory (values and indices) if it filled the envelope of P in the natural
/// (key) order: per row the span to its leftmost column, per column to its topmost row.
/// O(nnz); within a factor of about 4 of UMFPACK's estimate with AMD on the class and
/// stateful chains (a proxy of the fill against the state count, not a bound).
double envelope_lu_bytes(const MarkovOperator& c) {
  const int32_t n = c.rows();
  std::vector<int32_t> top(static_cast<size_t>(n));
  for (int32_t j = 0; j < n; ++j) top[j] = j;
  long double nnz = n;
  for (int32_t i = 0; i < n; ++i) {
    int32_t left = i;
    for (int32_t e = c.rowptr()[i]; e < c.rowptr()[i + 1]; ++e) {
      const int32_t j = c.col()[e];
      left = std::min(left, j);
      top[j] = std::min(top[j], i);
    }
    nnz += i - left;
  }
  for (int32_t j = 0; j < n; ++j) nnz += j - top[j];
  return static_cast<double>(nnz) * 12.0;
}

/// Whether krylov's preconditioner misses couplings: its diagonal blocks are the planes of
/// the components outside the block (descriptor flag in_block); with more than one such
/// component (for the queue models: the traffic classes' contents, a stateful AQM's count,
/// p_max, clock or cur_max_th beside the average) they couple states inside and across the
/// blocks, and GMRES then stalls where the LU (whose fill on these chains stays moderate)
/// is quick.  A component the chain never moves (dynamic max_th that never leaves max_th)
/// couples nothing, and the slow components krylov's two-level preconditioner takes into its
/// coarse space (coarse_components: adaptive RED's p_max) are followed: neither counts.
bool coupled_structure(const MarkovOperator& c) {
  if (c.components_outside_block() < 2) return false;
  const ComponentMoves& moves = c.component_moves();  // one pass over P, shared with the block order
  int moving = 0;
  for (int d = 0; d < c.space().count(); ++d)
    if (!c.space().component(d).in_block && moves.up[d] + moves.down[d] > 0.0) ++moving;
  return moving - coarse_components(c) > 1;
}

/// One attempt of auto's order.
struct Step {
  Method method;
  double flops = 0.0;          ///< direct: the work budget (0: none)
  long max_iter = 0;           ///< a budget below the options' max_iter (0: the options')
  bool sweep_stalled = false;  ///< multilevel: sweep a stalled coarsest level (Attempt::sweep_stalled_coarsest)
  long hand_over_cycles = 0;   ///< multilevel: Attempt::hand_over_cycles
  enum class Start { Options, Best, HandedOver } start = Start::Options;  ///< x0: the options', the best
                                                                         ///< iterate so far, the handed-over one
};

/// A multilevel attempt handing over to krylov gives it this many GMRES steps per cycle it
/// still needs.  A step costs 0.32-0.47 cycles on ns-3's chains (measured), so krylov's
/// budget is at most about 0.7 x the time multilevel would still take.
constexpr double kHandOverStepsPerCycle = 1.5;

}  // namespace

/// Auto, by the chain's size and structure: direct first on chains below
/// auto_krylov_min_states states (with a work budget proportional to the chain's entries)
/// and on coupled structures (coupled_structure), krylov first on the other large chains; then the other of the two, multilevel aggregation and
/// Gauss-Seidel with a bounded number of sweeps.  Direct factorises only when UMFPACK's
/// symbolic estimates fit direct_max_gb and auto_direct_max_flops (the analysis is cheap:
/// a refusal costs little); an iterative attempt with a method behind it fails fast
/// (krylov: stalled after 3 restarts without progress, or once its rate cannot reach tol
/// within max_iter).  The first converged result is returned; if none converges, the one
/// with the smallest residual (never throws for non-convergence, only when no method
/// produced a vector at all).  r.methods_tried lists each attempt.
/// A multilevel attempt refused for a coarsening that stalled at a level it could sweep
/// (the drop-spacing chains: their count or wait component keeps 1,000-2,500 states apart)
/// gives the krylov after it auto_stalled_krylov_steps GMRES steps; unconverged there (a
/// count chain whose drops are frequent: 427 steps where multilevel sweeping that level takes
/// 23 cycles), multilevel sweeping the level runs, then krylov without the limit.
/// The first multilevel attempt on a coupled chain hands over to krylov once its rate
/// projects more than auto_multilevel_cycles cycles (ns-3's RED at load 0.5: about 150
/// cycles, where GMRES takes 6 steps): krylov gets kHandOverStepsPerCycle steps per cycle
/// still needed, and multilevel goes on from its own iterate if krylov does not converge.
void solve_auto(Target& t, StationaryResult& r) {
  const StationaryOptions& o = t.options();
  const bool coupled = coupled_structure(t.full());
  const bool small = t.full().rows() < o.auto_krylov_min_states;
  // direct's work budgets: a large coupled chain tries a quick LU first and the
  // full budget again after krylov; a large plain chain starts with krylov
  const double quick = std::min(o.auto_direct_max_flops, kAutoQuickDirectFlops);
  const double quick_small =
      std::min(o.auto_direct_max_flops, std::max(kAutoSmallDirectFlopsFloor,
                                                 kAutoSmallDirectFlopsPerEntry * static_cast<double>(t.full().nnz())));
  Step multilevel_first{Method::Multilevel};  // on a coupled chain, before krylov: may hand over to it
  multilevel_first.hand_over_cycles = o.auto_multilevel_cycles;
  std::vector<Step> order = [&]() -> std::vector<Step> {
    if (small && coupled)
      return {{Method::Direct, quick_small}, multilevel_first, {Method::Krylov}, {Method::GaussSeidel}};
    if (small) return {{Method::Direct, quick_small}, {Method::Krylov}, {Method::Multilevel}, {Method::GaussSeidel}};
    if (coupled)  // aggregation over the lattice follows every component, GMRES's blocks do not
      return {multilevel_first, {Method::Direct, quick}, {Method::Krylov}, {Method::GaussSeidel}};
    return {{Method::Krylov}, {Method::Direct, o.auto_direct_max_flops}, {Method::Multilevel}, {Method::GaussSeidel}};
  }();
  // a large chain whose LU would plainly not fit skips direct without its (then slow) analysis
  const double envelope = small ? 0.0 : envelope_lu_bytes(t.full());
  const Method first = order.front().method;
  StationaryResult best;
  bool have = false;
  std::string history;
  std::vector<MethodAttempt> tried;
  std::vector<double> handed_over;  // the iterate of a multilevel attempt that handed over to krylov
  bool hand_over = false;
  for (size_t i = 0; i < order.size(); ++i) {
    const Step step = order[i];  // a copy: the order may grow below
    const Method m = step.method;
    const bool last = i + 1 == order.size();
    StationaryResult x;
    x.requested = Method::Auto;
    std::string why;
    const auto t0 = Clock::now();
    bool quick_refusal = false, sweepable_stall = false;
    if (m == Method::Direct && envelope > kEnvelopeFactor * o.direct_max_gb * 1e9) {
      why = detail::cat("skipped: the LU would need about ", detail::short_num(envelope / 1e9),
                        " GB by the envelope of P, over ", kEnvelopeFactor, " x direct_max_gb = ", o.direct_max_gb);
      tried.push_back({m, since(t0), Status::NotComputed, 0, why});
      history += (history.empty() ? "" : "; ") + to_string(m) + " " + why;
      continue;
    }
    try {
      const MethodSolver& s = solver_of(m);
      Attempt a;
      a.fail_fast = s.fails_fast && !last;  // a fallback is behind it
      a.max_flops = step.flops > 0.0 ? step.flops : INFINITY;
      a.sweep_stalled_coarsest = step.sweep_stalled;
      a.hand_over_cycles = step.hand_over_cycles;
      auto solve = [&s, &a, m, &step](const MarkovOperator& c, const StationaryOptions& oc, StationaryResult& y) {
        if (m != Method::GaussSeidel && step.max_iter == 0) return s.solve(c, oc, y, a);
        StationaryOptions og = oc;
        if (m == Method::GaussSeidel)  // the last resort: a bounded number of sweeps
          og.max_iter = auto_gs_sweeps(c, oc);
        else
          og.max_iter = oc.max_iter > 0 ? std::min<long>(oc.max_iter, step.max_iter) : step.max_iter;
        s.solve(c, og, y, a);
      };
      if (step.start == Step::Start::HandedOver) {
        t.run_from(handed_over, s.whole_chain, x, solve);
        std::vector<double>().swap(handed_over);
      } else if (step.start == Step::Start::Best && have) {
        t.run_from(best.pi, s.whole_chain, x, solve);  // finished: non-negative, sum 1
      } else {
        t.run(s.whole_chain, x, solve);
      }
      if (!x.converged()) why = x.note.empty() ? detail::cat("residual ", x.residual, " > tol ", o.tol) : x.note;
    } catch (const SolverError& e) {
      x.pi.clear();
      x.status = Status::NumericalIssue;
      why = e.what();
      quick_refusal = m == Method::Direct && step.flops < o.auto_direct_max_flops &&
                      why.find("auto_direct_max_flops") != std::string::npos;
      const auto* stall = dynamic_cast<const CoarseningStalled*>(&e);
      sweepable_stall = stall && stall->sweepable && o.auto_stalled_krylov_steps > 0;
    }
    if (quick_refusal)
      why.replace(why.find("auto_direct_max_flops = "), std::string("auto_direct_max_flops = ").size(),
                  small ? "auto's first-try budget for a small chain (10^4 flops per entry of P; auto_direct_max_flops "
                          "applies after krylov) = "
                        : "auto's first-try budget for a large coupled chain (auto_direct_max_flops applies after "
                          "krylov) = ");
    tried.push_back({m, since(t0), x.pi.empty() ? Status::NotComputed : x.status, x.iterations, why});
    // the quick LU was refused for its work alone: the full budget after the last krylov to come
    if (quick_refusal) {
      auto at = order.end();
      for (auto e = order.begin() + static_cast<long>(i) + 1; e != order.end(); ++e)
        if (e->method == Method::Krylov) at = e + 1;
      order.insert(at, {Method::Direct, o.auto_direct_max_flops});
    }
    // multilevel could sweep its stalled coarsest level: the next krylov gets a step budget, then
    // multilevel sweeping that level runs (from its own start), and krylov without the budget
    // from the best iterate
    if (sweepable_stall) {
      auto at = std::find_if(order.begin() + static_cast<long>(i) + 1, order.end(),
                             [](const Step& e) { return e.method == Method::Krylov; });
      if (at != order.end()) {
        at->max_iter = o.auto_stalled_krylov_steps;
        Step swept{Method::Multilevel};
        // from its own start: from a GMRES iterate its cycles stalled (the ring of 1,100 states
        // of the C++ tests)
        swept.sweep_stalled = true;
        Step rest{Method::Krylov};
        rest.start = Step::Start::Best;
        order.insert(at + 1, {swept, rest});
      }
    }
    // multilevel would need more than hand_over_cycles: krylov with a step budget of about the
    // time multilevel still needs, then multilevel again from where it stopped
    const double projected = x.extra_value("projected_cycles");
    if (m == Method::Multilevel && !x.converged() && std::isfinite(projected) && projected > 0.0 && !x.pi.empty()) {
      handed_over = x.pi;
      hand_over = true;
      Step probe{Method::Krylov};
      probe.max_iter = static_cast<long>(std::ceil(std::min(kHandOverStepsPerCycle * projected, 1e9)));
      Step resume{Method::Multilevel};
      resume.start = Step::Start::HandedOver;
      if (o.max_iter > 0) resume.max_iter = std::max(1L, o.max_iter - x.iterations);  // within the options' max_iter
      for (auto e = order.begin() + static_cast<long>(i) + 1; e != order.end(); ++e)
        if (e->method == Method::Krylov) e->start = Step::Start::Best;  // not the probe's steps again
      order.insert(order.begin() + static_cast<long>(i) + 1, {probe, resume});
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
  best.extra.push_back({"auto_multilevel_handed_over", hand_over ? 1.0 : 0.0});
  best.methods_tried = std::move(tried);
  r = std::move(best);
}

template <>
const MethodSolver& method_solver<Method::Auto>() {
  static const MethodSolver entry{};  // no solve: solve_stationary runs solve_auto over the Target
  return entry;
}

}  // namespace aqm::detail
