// Stationary solvers: what every method shares -- the accounts, the closed class, the
// checks before a solve, the dispatch over the method registry (AQM_STATIONARY_METHODS in
// aqmchain/solvers/stationary.hpp, each method's entry in its own file) -- and
// solve_stationary.  Orientation: pi is a row vector, pi P = pi (SPEC 1).
#include "aqmchain/solvers/stationary.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "aqmchain/interrupt.hpp"
#include "solvers/multilevel.hpp"
#include "solvers/stationary_common.hpp"

namespace aqm {
namespace detail {

/// The status after the residual is known: converged when it holds; otherwise what
/// the method said (stalled, numerical issue), or not converged.
Status settle(Status said, double residual, double tol) {
  if (residual <= tol && std::isfinite(residual)) return Status::Converged;
  if (!std::isfinite(residual)) return Status::NumericalIssue;
  return said == Status::Stalled || said == Status::NumericalIssue ? said : Status::NotConverged;
}

/// Clip negative round-off, normalise, and fill residual / mass error.
void finish(const MarkovOperator& c, StationaryResult& r, double tol) {
  auto& pi = r.pi;
  long double pos = 0.0L, neg = 0.0L;
  for (double v : pi) (v > 0 ? pos : neg) += std::abs(v);
  if (!(pos > 0.0L) || !std::isfinite(static_cast<double>(pos))) {
    // Nothing usable: report the uniform vector as the partial result.
    std::fill(pi.begin(), pi.end(), 1.0 / c.rows());
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
  r.residual = c.residual(pi);
  ++r.operator_applications;
  r.seconds.push_back({"residual", since(t0)});
  r.status = settle(r.status, r.residual, tol);
}

/// A probable state of an irreducible chain: the argmax of a cheap estimate of pi.
/// The estimate is two multilevel W-cycles from the uniform vector: their coarsest
/// level is solved exactly, so they see where the mass is even when the chain mixes
/// slowly (geo_k4, RED w = 0.002: the argmax of 2 cycles has the largest true pi, that
/// of 30 Gauss-Seidel sweeps pi / max pi = 5e-177).  Chains without lattice labels
/// (hand-built) use Gauss-Seidel sweeps instead.  Accounts go to r.
int32_t probable_state(const MarkovOperator& c, const StationaryOptions& o, StationaryResult& r) {
  const int32_t n = c.rows();
  if (n < 2) return 0;
  const auto t0 = Clock::now();
  std::vector<double> x;
  try {
    StationaryOptions e = o;
    e.max_iter = 2;
    e.x0.clear();
    StationaryResult ml;
    solve_multilevel(c, e, ml);
    r.operator_applications += ml.operator_applications;
    x = std::move(ml.pi);
  } catch (const SolverError&) {
    const TransposedCsr PT = c.transpose();
    const std::vector<double> exit = exit_probabilities(n, PT.rowptr.data(), PT.col.data(), PT.val.data());
    x.assign(n, 1.0 / n);
    constexpr int sweeps = 30;
    for (int s = 0; s < sweeps; ++s) gauss_seidel_sweep(n, PT.rowptr.data(), PT.col.data(), PT.val.data(), exit.data(), x);
    r.operator_applications += sweeps;
  }
  r.seconds.push_back({"estimate", since(t0)});
  int32_t best = 0;
  for (int32_t i = 1; i < n && i < static_cast<int32_t>(x.size()); ++i)
    if (x[i] > x[best]) best = i;  // NaN-safe: a NaN never wins
  return best;
}


// The unique closed class (stationary_common.hpp): a sorted list of states, or empty when it is the whole
/// chain (the builder found no transient state).  Everything reachable from a state
/// of a closed class is that class, so one search from chain.recurrent_state over the
/// positive entries of P finds it (O(nnz)).
std::vector<int32_t> closed_class(const MarkovOperator& c) {
  if (c.transient_states() == 0) return {};
  const int32_t n = c.rows();
  const int32_t s0 = c.recurrent_state();
  if (s0 < 0 || s0 >= n)
    throw ReducibleChain(detail::cat("the chain records no state of its closed class (recurrent_state = ", s0,
                                     "); call classify() after editing the matrix"));
  std::vector<char> seen(n, 0);
  std::vector<int32_t> todo{s0};
  seen[s0] = 1;
  int64_t count = 1;
  while (!todo.empty()) {
    const int32_t v = todo.back();
    todo.pop_back();
    for (int32_t e = c.rowptr()[v]; e < c.rowptr()[v + 1]; ++e) {
      const int32_t u = c.col()[e];
      if (c.p(v, e) > 0.0 && !seen[u]) {
        seen[u] = 1;
        ++count;
        todo.push_back(u);
      }
    }
  }
  if (count == n) return {};
  std::vector<int32_t> keep;
  keep.reserve(static_cast<size_t>(count));
  for (int32_t i = 0; i < n; ++i)
    if (seen[i]) keep.push_back(i);
  return keep;
}

/// The matrix restricted to the closed class `keep` (rows of P stay stochastic, rows of G
/// sum to 0: no edge leaves a closed class).  Labels come along (multilevel aggregates on them).
Chain restrict_to(const MarkovOperator& c, const std::vector<int32_t>& keep) {
  std::vector<int32_t> map(c.rows(), -1);
  for (size_t i = 0; i < keep.size(); ++i) map[keep[i]] = static_cast<int32_t>(i);
  Chain s;
  s.n = static_cast<int32_t>(keep.size());
  s.rowptr.assign(static_cast<size_t>(s.n) + 1, 0);
  s.col.reserve(static_cast<size_t>(c.nnz()));
  s.val.reserve(static_cast<size_t>(c.nnz()));
  const int32_t *rp = c.rowptr(), *ci = c.col();
  const double* val = c.matrix().val();
  for (int32_t i = 0; i < s.n; ++i) {
    const int32_t v = keep[i];
    for (int32_t e = rp[v]; e < rp[v + 1]; ++e)
      if (map[ci[e]] >= 0) {
        s.col.push_back(map[ci[e]]);
        s.val.push_back(val[e]);
      }
    s.rowptr[i + 1] = static_cast<int32_t>(s.col.size());
  }
  s.time = c.kind();
  s.space = c.space();
  const auto& labels = c.labels();
  s.labels.resize(labels.size());
  for (size_t k = 0; k < labels.size(); ++k) {
    if (static_cast<int32_t>(labels[k].size()) != c.rows()) continue;
    s.labels[k].resize(keep.size());
    for (size_t i = 0; i < keep.size(); ++i) s.labels[k][i] = labels[k][keep[i]];
  }
  s.recurrent_state = 0;
  s.report.closed_classes = 1;
  s.report.transient_states = 0;
  return s;
}

struct Target::Restricted {
  Chain chain;
  MarkovOperator op;
  Restricted(Chain c, double rate) : chain(std::move(c)), op(chain, rate) {}
};

Target::Target(const MarkovOperator& full, const StationaryOptions& o) : full_(full), o_(o), keep_(closed_class(full)) {}
Target::~Target() = default;

const MarkovOperator& Target::restricted() {
  if (!restricted_) restricted_ = std::make_unique<Restricted>(restrict_to(full_, keep_), full_.rate());
  return restricted_->op;
}

StationaryOptions Target::restricted_options(const StationaryOptions& o) const {
  StationaryOptions r = o;
  if (o.x0.empty()) return r;
  r.x0.resize(keep_.size());
  double sum = 0.0;
  for (size_t i = 0; i < keep_.size(); ++i) sum += r.x0[i] = o.x0[keep_[i]];
  if (!(sum > 0.0)) r.x0.clear();
  return r;
}

void Target::restrict_result(StationaryResult& x) const {
  std::vector<double> sub(keep_.size());
  for (size_t i = 0; i < keep_.size(); ++i) sub[i] = x.pi[keep_[i]];
  long double mass = 0.0L;
  for (double v : sub) mass += v;
  if (mass > 0.0L)
    for (double& v : sub) v = static_cast<double>(v / mass);
  x.pi = std::move(sub);
}

/// pi on the closed class -> pi on all states (exactly 0 on the transient ones); the
/// residual is recomputed on the whole chain.
void Target::expand(StationaryResult& r) const {
  const MarkovOperator& c = full_;
  const std::vector<int32_t>& keep = keep_;
  const double tol = o_.tol;
  std::vector<double> pi(c.rows(), 0.0);
  for (size_t i = 0; i < keep.size() && i < r.pi.size(); ++i) pi[keep[i]] = r.pi[i];
  r.pi = std::move(pi);
  const auto t0 = Clock::now();
  r.residual = c.residual(r.pi);
  ++r.operator_applications;
  r.seconds.push_back({"residual_full", since(t0)});
  r.status = settle(r.status, r.residual, tol);
  r.extra.push_back({"closed_class_states", static_cast<double>(keep.size())});
  r.extra.push_back({"transient_states", static_cast<double>(c.rows() - static_cast<int64_t>(keep.size()))});
}

void Target::run(Method m, StationaryResult& x, const Attempt& a) {
  const MethodSolver& s = solver_of(m);
  if (!s.solve) throw std::logic_error("internal error: Target::run(" + to_string(m) + ")");
  run(s.whole_chain, x, [&s, &a](const MarkovOperator& op, const StationaryOptions& o, StationaryResult& y) {
    s.solve(op, o, y, a);
  });
}

const MethodSolver& solver_of(Method m) {
  switch (m) {
#define AQM_METHOD_CASE(e, name, doc, use, cost) \
  case Method::e:                     \
    return method_solver<Method::e>();
    AQM_STATIONARY_METHODS(AQM_METHOD_CASE)
#undef AQM_METHOD_CASE
  }
  throw std::logic_error("internal error: solver_of(an unknown method)");
}

void add_rate(const MarkovOperator& op, StationaryResult& r) {
  if (op.continuous()) r.extra.push_back({"uniformization_rate", op.rate()});
}

namespace {
/// "(name=3, other=7)": a state by its labels.
std::string state_text(const MarkovOperator& c, int32_t s) {
  std::string out = "(";
  for (int d = 0; d < c.space().count(); ++d) {
    if (d > 0) out += ", ";
    out += detail::cat(c.space().component(d).name, "=",
                       d < static_cast<int>(c.labels().size()) ? c.labels()[d][s] : -1);
  }
  return out + ")";
}

/// A residual at tol cannot see transitions of probability below tol.  When the chain
/// falls apart into several closed classes without them, how the probability is shared
/// between those classes is fixed only by flows below tol: every way of sharing it has a
/// residual below tol, and each method returns another (service.mu = 1e-300: mean queues
/// of 20, 27 and 34 from three methods, all "converged").  Refused, naming the rarest
/// transition.  O(nnz), and a class analysis only when some entry is below tol.
void check_determined(const MarkovOperator& c, double tol) {
  double smallest = INFINITY;
  int32_t from = -1;
  for (int32_t i = 0; i < c.rows(); ++i)
    for (int32_t e = c.rowptr()[i]; e < c.rowptr()[i + 1]; ++e) {
      if (c.col()[e] == i) continue;
      const double p = c.p_off(e);
      if (p > 0.0 && p < smallest) {
        smallest = p;
        from = i;
      }
    }
  if (!(smallest < tol)) return;
  ClosedClasses cc;
  cc.count = c.closed_classes_above(tol, &cc.first, &cc.second);
  if (cc.count <= 1) return;
  throw ReducibleChain(detail::cat(
      "the stationary law is not determined to tol = ", tol, ": without its transitions of probability below tol the ",
      "chain falls apart into ", cc.count, " closed classes (one holds state ", state_text(c, cc.first),
      ", another ", state_text(c, cc.second), "), and every way of sharing the probability between them has a ",
      "residual below tol, so no method can tell them apart; the rarest transition has probability ", smallest,
      " (from state ", state_text(c, from), "): raise the model's rarest rates (e.g. service.mu)"));
}

}  // namespace

void check_solvable(const MarkovOperator& op, const StationaryOptions& o) {
  o.validate();
  if (!o.x0.empty() && static_cast<int32_t>(o.x0.size()) != op.rows())
    throw OptionError(detail::cat("solver option 'x0' must have ", op.rows(), " entries (one per state), got ", o.x0.size()),
                      "x0");
  if (op.closed_classes() != 1)
    throw ReducibleChain(detail::cat("the chain has ", op.closed_classes(),
                                     " closed communicating classes: no unique stationary distribution"));
  check_determined(op, o.tol);
}


}  // namespace detail

using namespace detail;

std::string to_string(Method m) {
  for (const MethodInfo& x : kMethodInfo)
    if (x.method == m) return x.name;
  return "?";
}

Method method_from(const std::string& s) { return detail::enum_from("solver", s, kAllMethods); }


std::string option_bound(const OptionRow& r) {
  switch (r.type) {
    case OptionType::Int: return detail::cat("in [", static_cast<long>(r.lo), ", ", static_cast<long>(r.hi), "]", r.note);
    case OptionType::Real:
      if (r.hi >= kUnbounded) return detail::cat(r.lo_open ? "> " : ">= ", r.lo, " and finite");
      return detail::cat("in ", r.lo_open ? "(" : "[", r.lo, ", ", r.hi, r.hi_open ? ")" : "]");
    case OptionType::Choice: {
      if (r.choices) return detail::cat("one of ", r.choices);
      std::string names;  // the method: the names of the table of methods
      for (const MethodInfo& m : kMethodInfo) names += (names.empty() ? "" : ", ") + std::string(m.name);
      return "one of " + names;
    }
    case OptionType::RealList: return "a list of finite non-negative numbers with a positive sum";
  }
  return "";
}

namespace {
[[noreturn]] void bad_option(const OptionRow& r, const std::string& got) {
  throw OptionError(detail::cat("solver option '", r.name, "' must be ", option_bound(r), ", got ", got), r.name);
}
bool is_choice(const char* choices, const std::string& v) {
  const std::string all = std::string(", ") + choices + ", ";
  return !v.empty() && v.find(',') == std::string::npos && all.find(", " + v + ", ") != std::string::npos;
}
}  // namespace

void StationaryOptions::validate() const {
  // Every count has an upper bound: a huge value is a typo, not a request (an
  // unbounded smoothing_sweeps or max_iter turns a solve into a hang).
  for (const OptionRow& r : kStationaryOptions) {
    switch (r.type) {
      case OptionType::Int: {
        const long v = r.get_int(*this);
        if (!(v >= r.lo && v <= r.hi)) bad_option(r, detail::cat(v));
        break;
      }
      case OptionType::Real: {
        const double v = this->*r.real;
        const bool ok = std::isfinite(v) && (r.lo_open ? v > r.lo : v >= r.lo) && (r.hi_open ? v < r.hi : v <= r.hi);
        if (!ok) bad_option(r, detail::cat(v));
        break;
      }
      case OptionType::Choice: {
        const std::string v = r.get_text(*this);
        if (r.choices && !is_choice(r.choices, v)) bad_option(r, "'" + v + "'");
        break;
      }
      case OptionType::RealList: {
        const std::vector<double>& x = this->*r.list;
        double sum = 0.0;
        for (double v : x) {
          if (!std::isfinite(v) || v < 0.0)
            throw OptionError(detail::cat("solver option '", r.name, "' must be finite and non-negative, got an entry ", v),
                              r.name);
          sum += v;
        }
        if (!x.empty() && !(sum > 0.0))
          throw OptionError(detail::cat("solver option '", r.name, "' must have a positive sum, got ", sum), r.name);
        break;
      }
    }
  }
}

StationaryResult solve_stationary(const MarkovOperator& op, const StationaryOptions& o) {
  check_solvable(op, o);
  StationaryResult r;
  const auto t0 = Clock::now();
  Target target(op, o);
  if (o.method == Method::Auto) {
    solve_auto(target, r);
  } else {
    target.run(o.method, r);
    r.methods_tried = {{o.method, since(t0), r.status, r.iterations, r.converged() ? std::string() : r.note}};
  }
  r.requested = o.method;
  r.seconds.push_back({"total", since(t0)});
  add_rate(op, r);
  return r;
}

}  // namespace aqm
