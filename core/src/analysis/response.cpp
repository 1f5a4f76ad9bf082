// Tagged-packet absorbing chain for response times (SPEC 5, drop policies of 2.5).
#include "aqmchain/analysis/response.hpp"

#include <Eigen/IterativeLinearSolvers>
#include <Eigen/Sparse>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "aqmchain/interrupt.hpp"
#include "aqmchain/operators/operator.hpp"
#include "model/slot_kernel.hpp"

namespace aqm {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// The rejection weight as the main chain sees it: the slot kernel moves mass to
/// "no admission" with weight 1 - a (1 - rej), which is exactly 0 when an arrival
/// is certain and rej is below the rounding of 1 (e.g. p_max = 1e-300).  Then the
/// main chain has no rejected-arrival transition, and the tagged chain must not
/// have one either (its target may not be a state of the chain).
inline double rejection(double wgt, double a, double rej) { return a * (1.0 - rej) >= 1.0 ? 0.0 : wgt * a * rej; }

using Fate = detail::SlotKernel::Fate;

/// Step 4 of a slot seen by the tagged packet (j ahead, n in the system) for one fate of
/// the slot's arrival, of probability p: calls out(q, n4, j4) for each outcome and returns
/// the push-out probability.  A rejected arrival (AQM drop or overflow) goes to the drop
/// policy, which may discard a waiting packet instead.
template <class Out>
double step4(DropPolicy pol, int n, int j, Fate fate, double p, Out&& out) {
  if (fate == Fate::None) return out(p, n, j), 0.0;
  if (fate == Fate::Admit || fate == Fate::Mark) return out(p, n + 1, j), 0.0;  // joins behind
  if (p <= 0.0) return 0.0;
  double pushed = 0.0;
  const int waiting = n - 1;
  if (pol == DropPolicy::Tail || waiting == 0) {
    out(p, n, j);  // the arrival itself is discarded
  } else if (pol == DropPolicy::Front) {
    // the arrival is admitted, the oldest waiting packet (position 1) is discarded
    if (j == 1)
      pushed += p;
    else
      out(p, n, j >= 2 ? j - 1 : j);
  } else {
    // a uniformly chosen waiting packet: positions 1..j-1 ahead, j the tagged one, j+1..n-1 behind
    const double q = p / waiting;
    if (j >= 1) pushed += q;
    if (j >= 2) out(q * (j - 1), n, j - 1);
    out(q * (n - 1 - j), n, j);
  }
  return pushed;
}

/// Steps 1-4 of the slot from the state `key` with n packets as outcomes f(fate, p, rest),
/// rest the next key without its level: the stateful kernel enumerates them; the plain
/// kernel's branches give no arrival, an admission (marked or not) and a rejection.  A
/// rejection the chain's row rounds away is not emitted (its target may not be a state).
/// `cls` >= 0: the fates of an arrival of that class (its share, its own ECN probability).
template <class F>
void slot_outcomes(const detail::SlotKernel& K, int64_t key, int n, F&& f, int cls = -1) {
  if (K.stateful) return K.stateful_outcomes(key, n, f, cls);
  int n0, g, m;
  K.decode(key, n0, g, m);
  K.branches(n, g, m, [&](int g2, int m2, double wgt, double a, double rej, double) {
    const int64_t rest = g2 * K.sc + m2 * K.sm;
    if (cls < 0) {
      f(Fate::None, wgt * (1.0 - a), rest);
      f(Fate::Admit, wgt * a * (1.0 - rej), rest);  // rej = 1 when n = N
      f(n == K.N ? Fate::Overflow : Fate::Drop, rejection(wgt, a, rej), rest);
      return;
    }
    const bool rejects = rejection(wgt, a, rej) > 0.0;
    const double r = n == K.N ? 1.0 : (1.0 - K.cls_ecn[static_cast<size_t>(cls)]) * K.pdrop[static_cast<size_t>(g2)];
    a *= K.cls_share[static_cast<size_t>(cls)][static_cast<size_t>(m2)];
    f(Fate::Admit, wgt * a * (1.0 - r), rest);
    f(n == K.N ? Fate::Overflow : Fate::Drop, rejects ? wgt * a * r : 0.0, rest);
  });
}
}  // namespace

std::string to_string(ResponseMethod) { return "tagged_chain"; }

double tagged_chain_bytes(int64_t states, double transitions_per_state) {
  return static_cast<double>(states) * (4 + 3 * 8) + static_cast<double>(states) * transitions_per_state * 12;
}

void ResponseOptions::validate() const {
  if (!(tail_mass > 0.0 && tail_mass < 1.0)) fail_param("response.tail_mass", "in (0, 1)", tail_mass);
  if (max_steps < 1) fail_param("response.max_steps", ">= 1", max_steps);
  if (!(memory_limit_bytes > 0.0)) fail_param("memory_limit_gb", "> 0", memory_limit_bytes / (1024.0 * 1024 * 1024));
  if (max_states < 1 || max_states > kTaggedMaxStatesMax)
    throw OptionError(detail::cat("solver option 'tagged_max_states' must be in [1, ", kTaggedMaxStatesMax, "], got ",
                                  max_states),
                      "tagged_max_states");
}

int64_t tagged_states_needed(const QueueChain& c, const std::string& response) {
  const bool class_chain = c.space.find(component::class2) >= 0 || c.space.find(component::sequence) >= 0 ||
                           c.space.find(component::window) >= 0;
  const bool steered = class_chain && (c.model.aqm.modified != Modified::None || c.model.aqm.flow_compare);
  if (response == "none" || c.n == 0 || c.model.source.max_batch() > 1) return 0;
  const auto& level = c.component(component::level);
  int64_t total = 0;
  if (c.time == TimeKind::Continuous && !steered) {
    // tail drop: the closed form; else the tagged packet on the two-class chain (without
    // classes: on the one-class chain, which has the chain's states), uniformised
    const bool tagged = c.model.aqm.policy != DropPolicy::Tail || response == "tagged";
    if (!tagged || c.model.aqm.ns3() || (class_chain && c.space.find(component::class2) < 0)) return 0;
    for (int32_t s = 0; s < c.n; ++s) total += level[s];
    return total;
  }
  if (class_chain && !class_blind(c.model)) {  // class_steered_response: (s, k) on the two-class chain
    if (c.space.find(component::class2) < 0) return 0;
    for (int32_t s = 0; s < c.n; ++s) total += level[s];
    return total;
  }
  if (c.model.aqm.policy == DropPolicy::Tail && response != "tagged") return 0;
  if (!class_chain) {
    for (int32_t s = 0; s < c.n; ++s) total += level[s];
    return total;
  }
  // the lumped chain: one state per distinct (every component but the class contents)
  std::vector<int> keep;
  for (int i = 0; i < c.space.count(); ++i) {
    const std::string& name = c.space.component(i).name;
    if (name != component::class2 && name != component::head && name != component::sequence && name != component::window)
      keep.push_back(i);
  }
  std::vector<int64_t> keys(static_cast<size_t>(c.n), 0);
  for (int32_t s = 0; s < c.n; ++s)
    for (int i : keep) keys[s] = keys[s] * c.space.component(i).size + c.labels[i][s];
  std::vector<int32_t> order(static_cast<size_t>(c.n));
  for (int32_t s = 0; s < c.n; ++s) order[s] = s;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
  for (size_t i = 0; i < order.size(); ++i)
    if (i == 0 || keys[order[i]] != keys[order[i - 1]]) total += level[order[i]];
  return total;
}

namespace {
/// The budgets of a tagged chain of `states` states with `per` transitions per state.
void require_tagged_budget(int64_t states, double per, const ResponseOptions& o) {
  const double bytes = tagged_chain_bytes(states, std::max(16.0, per));
  if (states > o.max_states)
    throw StateSpaceTooLarge(
        "tagged_max_states",
        detail::cat("the tagged-packet chain for response times under front / random drop would have ", states,
                    " states (about ", detail::short_num(bytes / 1e9), " GB), above solver option 'tagged_max_states' = ",
                    o.max_states, ": raise solver option 'tagged_max_states' to at least ", states,
                    bytes > o.memory_limit_bytes
                        ? detail::cat(" and memory_limit_gb to at least ", std::ceil(bytes / (1024.0 * 1024 * 1024)))
                        : std::string(),
                    ", or skip response times (response = \"none\") or use tail drop"));
  if (states >= std::numeric_limits<int32_t>::max() || bytes > o.memory_limit_bytes)
    throw StateSpaceTooLarge("memory_limit_gb",
                             detail::cat("the tagged-packet chain has ", states, " states and needs up to ",
                                         detail::short_num(bytes / 1e9), " GB, above memory_limit_gb = ",
                                         detail::short_num(o.memory_limit_bytes / (1024.0 * 1024 * 1024)),
                                         " GB (raise memory_limit_gb to at least ",
                                         std::ceil(bytes / (1024.0 * 1024 * 1024)), ")"));
}
}  // namespace

int64_t check_tagged_budget(const QueueChain& c, const std::string& response, const ResponseOptions& o) {
  o.validate();
  const int64_t states = tagged_states_needed(c, response);
  if (states > 0) require_tagged_budget(states, c.n > 0 ? 2.0 * static_cast<double>(c.nnz()) / c.n : 0.0, o);
  return states;
}

namespace {

/// The tagged packet's chain: states (j, s), j = 0..n(s)-1 packets ahead of it,
/// numbered off[s] + j; sub-stochastic T in CSR (rows = from) with the
/// probabilities of absorption into "served" and "pushed out" per state.
struct TaggedChain {
  std::vector<int64_t> off;
  int64_t states = 0;
  std::vector<int32_t> rp, col;
  std::vector<double> val, served, pushed;
  /// The tagged state of chain key n sn + rest with j packets ahead.
  int32_t index(const QueueChain& c, const detail::SlotKernel& K, int n, int64_t rest, int j) const {
    const int32_t s = c.index_of_key(n * K.sn + rest);
    if (s < 0 || j < 0 || j >= n) throw std::logic_error("internal error: tagged transition leaves the chain");
    return static_cast<int32_t>(off[s] + j);
  }
};

/// Number the tagged states and check their memory before anything is allocated.
TaggedChain tagged_index(const QueueChain& c, const ResponseOptions& o) {
  TaggedChain tc;
  const auto& level = c.component(component::level);
  tc.off.assign(static_cast<size_t>(c.n) + 1, 0);
  for (int32_t s = 0; s < c.n; ++s) tc.off[s + 1] = tc.off[s] + level[s];
  tc.states = tc.off[c.n];
  // a tagged row has at most the transitions of its chain row, each split in two by a push-out
  require_tagged_budget(tc.states, c.n > 0 ? 2.0 * static_cast<double>(c.nnz()) / c.n : 0.0, o);
  return tc;
}

/// Rows of T: one slot of SPEC 3 seen by the tagged packet (drop policy of 2.5).
void tagged_matrix(const QueueChain& c, const detail::SlotKernel& K, DropPolicy pol, TaggedChain& tc) {
  const int64_t T = tc.states;
  const double mu = K.mu;
  tc.rp.assign(static_cast<size_t>(T) + 1, 0);
  tc.served.assign(T, 0.0);
  tc.pushed.assign(T, 0.0);
  tc.col.reserve(static_cast<size_t>(T) * 10);
  tc.val.reserve(static_cast<size_t>(T) * 10);
  std::vector<std::pair<int32_t, double>> row;
  double worst = 0.0;
  const auto& level = c.component(component::level);
  for (int32_t s = 0; s < c.n; ++s) {
    if ((s & 1023) == 0) check_interrupt();  // Ctrl-C while the tagged chain is assembled
    const int64_t key = c.key_of(s);
    const int n = level[s];
    for (int j = 0; j < n; ++j) {
      const int64_t i = tc.off[s] + j;
      row.clear();
      double sv = 0.0, pu = 0.0;
      slot_outcomes(K, key, n, [&](Fate fate, double p0, int64_t rest) {
        pu += step4(pol, n, j, fate, p0, [&](double p, int n4, int j4) {
          if (p <= 0.0) return;
          if (j4 == 0)
            sv += p * mu;  // the tagged packet is in service and completes
          else if (mu > 0.0)
            row.push_back({tc.index(c, K, n4 - 1, rest, j4 - 1), p * mu});
          if (mu < 1.0) row.push_back({tc.index(c, K, n4, rest, j4), p * (1.0 - mu)});
        });
      });
      std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      double sum = sv + pu;
      for (size_t k = 0; k < row.size(); ++k) {
        if (k > 0 && row[k].first == row[k - 1].first)
          tc.val.back() += row[k].second;
        else {
          tc.col.push_back(row[k].first);
          tc.val.push_back(row[k].second);
        }
        sum += row[k].second;
      }
      if (tc.col.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        throw StateSpaceTooLarge("memory_limit_gb", "the tagged-packet chain has more than 2^31 - 1 transitions");
      tc.rp[i + 1] = static_cast<int32_t>(tc.col.size());
      tc.served[i] = sv;
      tc.pushed[i] = pu;
      worst = std::max(worst, std::abs(sum - 1.0));
    }
  }
  if (worst > 1e-13) throw std::logic_error(detail::cat("internal error: tagged chain rows sum to 1 +- ", worst));
}

/// The tagged packet's law at the end of its arrival slot A (unnormalised);
/// returns the admission probability per slot.
long double initial_law(const QueueChain& c, const detail::SlotKernel& K, DropPolicy pol, const std::vector<double>& pi,
                        const TaggedChain& tc, std::vector<double>& v, int cls = -1) {
  const double mu = K.mu;
  v.assign(static_cast<size_t>(tc.states), 0.0);
  long double admitted = 0.0L;
  const auto& level = c.component(component::level);
  for (int32_t s = 0; s < c.n; ++s) {
    if (!(pi[s] > 0.0)) continue;
    const int64_t key = c.key_of(s);
    const int n = level[s];
    auto enter = [&](double p, int n4, int j0, int64_t rest) {
      if (p <= 0.0) return;
      admitted += pi[s] * p;
      if (n >= 1) {  // the packet in service at the start of slot A may complete
        v[tc.index(c, K, n4 - 1, rest, j0 - 1)] += pi[s] * p * mu;
        if (mu < 1.0) v[tc.index(c, K, n4, rest, j0)] += pi[s] * p * (1.0 - mu);
      } else {
        v[tc.index(c, K, n4, rest, j0)] += pi[s] * p;
      }
    };
    const bool pushout = pol != DropPolicy::Tail && n - 1 >= 1;  // a waiting packet ahead may be discarded
    slot_outcomes(K, key, n, [&](Fate fate, double p, int64_t rest) {
      if (fate == Fate::Admit || fate == Fate::Mark)
        enter(p, n + 1, n, rest);  // joins behind all n
      else if (fate != Fate::None && pushout)
        enter(p, n, n - 1, rest);
    }, cls);
  }
  return admitted;
}

/// Transient steps v_r = v_{r-1} T until the mass still in the system is below
/// tail_mass (or max_steps); accumulates R's pmf and moments.
template <class TC>
void step_until_absorbed(const TC& tc, std::vector<double> v, const ResponseOptions& o, ResponseResult& res) {
  const CsrOperator T(static_cast<int32_t>(tc.states), tc.rp.data(), tc.col.data(), tc.val.data());
  std::vector<double> y(v.size());
  res.served_pmf.assign(1, 0.0);
  res.status = Status::NotConverged;  // until the mass is below tail_mass (whatever res held)
  long double served_total = 0, pushed_total = 0, m1 = 0, m2 = 0, sojourn = 1.0L, mass = 1.0L;
  long r = 0;
  while (r < o.max_steps) {
    ++r;
    check_interrupt();  // one step is a product with T: polling per step is free
    long double sr = 0, pr = 0;  // absorbed in this slot, read from v before the step
    for (size_t i = 0; i < v.size(); ++i) {
      sr += v[i] * tc.served[i];
      pr += v[i] * tc.pushed[i];
    }
    T.apply(v.data(), y.data());
    res.served_pmf.push_back(static_cast<double>(sr));
    served_total += sr;
    pushed_total += pr;
    m1 += sr * r;
    m2 += sr * static_cast<long double>(r) * r;
    mass = 0.0L;
    for (double x : y) mass += x;
    sojourn += mass;  // P(sojourn > r)
    v.swap(y);
    if (mass < o.tail_mass) {
      res.status = Status::Converged;
      break;
    }
  }
  if (!res.converged())
    res.note = detail::cat("max_steps = ", o.max_steps, " reached with mass ", static_cast<double>(mass),
                           " still in the system");
  res.iterations = r;
  res.operator_applications = T.applications();
  res.residual = res.remaining_mass = static_cast<double>(mass);
  res.served_prob = static_cast<double>(served_total);
  res.pushed_out_prob = static_cast<double>(pushed_total);
  res.mean_sojourn = static_cast<double>(sojourn);
  if (served_total > 0) {
    const long double mean = m1 / served_total;
    res.mean_response = static_cast<double>(mean);
    res.var_response = static_cast<double>(m2 / served_total - mean * mean);
  }
}

}  // namespace

void tagged_absorption(const TaggedRows& rows, std::vector<double> v, const ResponseOptions& o, ResponseResult& res) {
  step_until_absorbed(rows, std::move(v), o, res);
}

namespace {
/// ILU(0) of a row-major sparse matrix whose rows hold their diagonal entry (columns sorted):
/// L (unit lower) and U on the matrix's own pattern, a preconditioner for Eigen's iterative
/// solvers.  Time and memory are those of the matrix (no fill), so it serves tagged chains of
/// millions of states where a threshold ILU's fill does not.  A zero pivot leaves info() at
/// NumericalIssue.
class Ilu0 {
 public:
  template <class M>
  Ilu0& analyzePattern(const M&) {
    return *this;
  }
  template <class M>
  Ilu0& factorize(const M& a) {
    const auto n = static_cast<int32_t>(a.rows());
    rp_.assign(a.outerIndexPtr(), a.outerIndexPtr() + n + 1);
    col_.assign(a.innerIndexPtr(), a.innerIndexPtr() + rp_.back());
    val_.assign(a.valuePtr(), a.valuePtr() + rp_.back());
    diag_.assign(static_cast<size_t>(n), -1);
    info_ = Eigen::Success;
    std::vector<int32_t> at(static_cast<size_t>(n), -1);  // position of column j in the current row
    for (int32_t i = 0; i < n; ++i) {
      for (int32_t e = rp_[i]; e < rp_[i + 1]; ++e) {
        at[static_cast<size_t>(col_[e])] = e;
        if (col_[e] == i) diag_[static_cast<size_t>(i)] = e;
      }
      if (diag_[static_cast<size_t>(i)] < 0) {
        info_ = Eigen::NumericalIssue;
        return *this;
      }
      for (int32_t e = rp_[i]; e < rp_[i + 1] && col_[e] < i; ++e) {
        const int32_t k = col_[e];
        const double lik = val_[e] /= val_[diag_[static_cast<size_t>(k)]];
        for (int32_t f = diag_[static_cast<size_t>(k)] + 1; f < rp_[k + 1]; ++f) {
          const int32_t pos = at[static_cast<size_t>(col_[f])];
          if (pos >= 0) val_[pos] -= lik * val_[f];
        }
      }
      for (int32_t e = rp_[i]; e < rp_[i + 1]; ++e) at[static_cast<size_t>(col_[e])] = -1;
      if (!(val_[diag_[static_cast<size_t>(i)]] != 0.0) || !std::isfinite(val_[diag_[static_cast<size_t>(i)]])) {
        info_ = Eigen::NumericalIssue;
        return *this;
      }
    }
    return *this;
  }
  template <class M>
  Ilu0& compute(const M& a) {
    return factorize(a);
  }
  Eigen::VectorXd solve(const Eigen::VectorXd& b) const {
    const auto n = static_cast<int32_t>(diag_.size());
    Eigen::VectorXd x = b;
    for (int32_t i = 0; i < n; ++i) {  // L y = b
      double t = x[i];
      for (int32_t e = rp_[i]; e < diag_[static_cast<size_t>(i)]; ++e) t -= val_[e] * x[col_[e]];
      x[i] = t;
    }
    for (int32_t i = n - 1; i >= 0; --i) {  // U x = y
      double t = x[i];
      for (int32_t e = diag_[static_cast<size_t>(i)] + 1; e < rp_[i + 1]; ++e) t -= val_[e] * x[col_[e]];
      x[i] = t / val_[diag_[static_cast<size_t>(i)]];
    }
    return x;
  }
  Eigen::ComputationInfo info() const { return info_; }

 private:
  std::vector<int32_t> rp_, col_, diag_;
  std::vector<double> val_;
  Eigen::ComputationInfo info_ = Eigen::Success;
};
}  // namespace

bool absorbing_moments(const TaggedRows& rows, const std::vector<double>& v, const ResponseOptions& o,
                       ResponseResult& res) {
  using Sp = Eigen::SparseMatrix<double, Eigen::RowMajor, int32_t>;
  const auto t0 = Clock::now();
  const int64_t T = rows.states;
  if (T < 1 || static_cast<int64_t>(v.size()) != T) return false;
  // A = -G_TT (rows = from); the solves are with its transpose, from the law v (row systems
  // z A = v), so three give every moment.  An empty row (a state never entered) gets a 1 on the
  // diagonal.  The transpose's memory and its ILU(0)'s (12 bytes an entry each) and the
  // solver's vectors are checked against memory_limit first: the steps need none of it.
  Eigen::VectorXi sizes = Eigen::VectorXi::Zero(T);  // entries per row of A^T: per column of A
  double entries = 0.0;
  for (int64_t i = 0; i < T; ++i) {
    const int32_t b = rows.rp[static_cast<size_t>(i)], e = rows.rp[static_cast<size_t>(i) + 1];
    if (b == e) ++sizes[i];
    for (int32_t k = b; k < e; ++k) {
      if (k > b && !(rows.col[static_cast<size_t>(k)] > rows.col[static_cast<size_t>(k) - 1]))
        return false;  // the rows' columns must be sorted and merged
      ++sizes[rows.col[static_cast<size_t>(k)]];
    }
    entries += std::max(1, e - b);
  }
  if (24.0 * entries + 8.0 * 16.0 * static_cast<double>(T) > o.memory_limit_bytes) return false;
  Sp At(T, T);
  At.reserve(sizes);
  for (int64_t i = 0; i < T; ++i) {
    const int32_t b = rows.rp[static_cast<size_t>(i)], e = rows.rp[static_cast<size_t>(i) + 1];
    if (b == e) At.insert(i, i) = 1.0;
    for (int32_t k = b; k < e; ++k) At.insert(rows.col[static_cast<size_t>(k)], i) = -rows.val[static_cast<size_t>(k)];
  }
  At.makeCompressed();
  Eigen::BiCGSTAB<Sp, Ilu0> solver;
  solver.setTolerance(1e-15);
  solver.setMaxIterations(static_cast<Eigen::Index>(std::min<long>(o.max_steps, 2000)));
  solver.compute(At);
  if (solver.info() != Eigen::Success) return false;
  check_interrupt();
  long iterations = 0, products = 0;  // BiCGSTAB's steps (two products each) and the residuals' products
  double worst = 0.0;
  // x with A^T x = b, or an empty vector when its relative L1 residual stays above 1e-12: the
  // solver's recursive residual drifts from the true one, so up to three corrections
  // x += A^-T (b - A^T x) follow while the true residual is above the target
  auto solve = [&](const Eigen::VectorXd& b) -> Eigen::VectorXd {
    const double bn = b.lpNorm<1>();
    if (!(bn > 0.0)) return Eigen::VectorXd::Zero(b.size());
    Eigen::VectorXd x = solver.solve(b);
    iterations += static_cast<long>(solver.iterations());
    Eigen::VectorXd residual = b - At * x;
    ++products;
    double r = residual.lpNorm<1>() / bn;
    for (int round = 0; round < 3 && !(r <= 1e-12) && x.allFinite(); ++round) {
      check_interrupt();
      x += solver.solve(residual);
      iterations += static_cast<long>(solver.iterations());
      residual = b - At * x;
      ++products;
      r = residual.lpNorm<1>() / bn;
    }
    check_interrupt();
    worst = std::max(worst, r);
    if (!(r <= 1e-12) || !x.allFinite()) return {};
    return x;
  };
  // z = v A^-1 (the expected time spent in each state), w = z A^-1, w2 = w A^-1: with the exit
  // rates into served and pushed, P(served) = z served, P(pushed) = z pushed, the sojourn
  // z 1 (over the states entered), E[R 1_served] = w served, E[R^2 1_served] = 2 w2 served
  const Eigen::VectorXd z = solve(Eigen::Map<const Eigen::VectorXd>(v.data(), T));
  if (z.size() == 0) return false;
  const Eigen::VectorXd w = solve(z);
  if (w.size() == 0) return false;
  const Eigen::VectorXd w2 = solve(w);
  if (w2.size() == 0) return false;
  const Eigen::Map<const Eigen::VectorXd> served(rows.served.data(), T), pushed(rows.pushed.data(), T);
  double sojourn = 0.0;
  for (int64_t i = 0; i < T; ++i)
    if (rows.rp[static_cast<size_t>(i)] != rows.rp[static_cast<size_t>(i) + 1]) sojourn += z[i];
  const double ps = z.dot(served);
  res.served_prob = ps;
  res.pushed_out_prob = z.dot(pushed);
  res.mean_sojourn = sojourn;
  if (ps > 0.0) {
    res.mean_response = w.dot(served) / ps;
    res.var_response = 2.0 * w2.dot(served) / ps - res.mean_response * res.mean_response;
  }
  res.served_pmf.clear();
  res.remaining_mass = 0.0;
  res.residual = worst;
  res.iterations = iterations;
  res.operator_applications = 2 * iterations + products;
  res.status = Status::Converged;
  res.note = "continuous time: moments by linear solves with the tagged generator (ILU(0)-preconditioned BiCGSTAB)";
  res.seconds.push_back({"solves", since(t0)});
  return true;
}

void require_tagged_states(int64_t states, double transitions_per_state, const ResponseOptions& o) {
  require_tagged_budget(states, transitions_per_state, o);
}

ResponseResult tagged_response(const QueueChain& c, const std::vector<double>& pi, const ResponseOptions& o) {
  o.validate();
  if (static_cast<int32_t>(pi.size()) != c.n)
    throw std::invalid_argument(detail::cat("pi has ", pi.size(), " entries, the chain ", c.n, " states"));
  if (c.time != TimeKind::Discrete)
    throw std::invalid_argument("the tagged-packet chain is defined for slotted (discrete-time) models only");
  ResponseResult res;
  res.requested = res.method = ResponseMethod::TaggedChain;
  auto t0 = Clock::now();
  const detail::SlotKernel K(c.model);
  TaggedChain tc = tagged_index(c, o);
  res.states = tc.states;
  tagged_matrix(c, K, c.model.aqm.policy, tc);
  res.nnz = static_cast<int64_t>(tc.col.size());
  std::vector<double> v;
  const long double admitted = initial_law(c, K, c.model.aqm.policy, pi, tc, v);
  res.admitted_rate = static_cast<double>(admitted);
  res.seconds.push_back({"build", since(t0)});
  if (!(admitted > 0.0L)) {
    res.status = Status::Converged;  // nothing is admitted: nothing to wait for
    return res;
  }
  for (auto& x : v) x = static_cast<double>(x / admitted);
  t0 = Clock::now();
  step_until_absorbed(tc, std::move(v), o, res);
  res.seconds.push_back({"iterate", since(t0)});
  return res;
}

bool class_blind(const Model& m) {
  return m.aqm.modified == Modified::None && !m.aqm.flow_compare && m.time == TimeKind::Discrete;
}

std::vector<ResponseResult> class_tagged_response(const QueueChain& cc, const std::vector<double>& pi,
                                                  const ResponseOptions& o) {
  o.validate();
  if (static_cast<int32_t>(pi.size()) != cc.n)
    throw std::invalid_argument(detail::cat("pi has ", pi.size(), " entries, the chain ", cc.n, " states"));
  if (!class_blind(cc.model))
    throw std::invalid_argument("class_tagged_response: the model's dynamics read the classes (no lumped chain)");
  auto t0 = Clock::now();
  const Model& md = cc.model;
  BuildOptions b;
  b.memory_limit_bytes = o.memory_limit_bytes;
  const QueueChain L = build_chain(*lumped_queue_generator(md), md, b);
  const detail::SlotKernel K(md);
  // pi lumped onto (n, avg, modulator, the stateful AQM's components)
  std::vector<double> lp(static_cast<size_t>(L.n), 0.0);
  const auto &level = cc.component(component::level), &avg = cc.component(component::avg),
             &mod = cc.component(component::modulator);
  const std::vector<int32_t> none(static_cast<size_t>(cc.n), 0);
  auto label = [&](const std::string& name) -> const std::vector<int32_t>& {
    return cc.space.find(name) >= 0 ? cc.component(name) : none;
  };
  const auto &cnt = label(component::count), &pk = label(component::pmax), &ph = label(component::phase),
             &mt = label(component::maxth);
  // REDwM: the filter cell spans avg and the sums s^(1..R) (s^(R) fastest, docs/redwm.md)
  std::vector<const std::vector<int32_t>*> sums;
  if (K.redwm)
    for (int i = 1; i <= K.R; ++i) sums.push_back(&cc.component(redwm_s_component(i)));
  for (int32_t s = 0; s < cc.n; ++s) {
    const int64_t aqm = K.stateful ? K.keys.encode(cnt[s] - 1, pk[s], ph[s], mt[s]) : 0;
    int64_t cell = avg[s];
    for (size_t i = 0; i < sums.size(); ++i) cell = cell * K.sgrids[i].size() + (*sums[i])[static_cast<size_t>(s)];
    const int32_t i = L.index_of_key(K.id(level[s], static_cast<int>(cell), mod[s]) + aqm);
    if (i < 0) throw std::logic_error("internal error: a class-chain state has no lumped state");
    lp[static_cast<size_t>(i)] += pi[s];
  }
  TaggedChain tc = tagged_index(L, o);
  tagged_matrix(L, K, md.aqm.policy, tc);
  const double build = since(t0);
  std::vector<ResponseResult> out;
  for (int cls = -1; cls < md.class_count(); ++cls) {
    ResponseResult res;
    res.requested = res.method = ResponseMethod::TaggedChain;
    res.states = tc.states;
    res.nnz = static_cast<int64_t>(tc.col.size());
    res.seconds.push_back({"build", cls < 0 ? build : 0.0});
    std::vector<double> v;
    const long double admitted = initial_law(L, K, md.aqm.policy, lp, tc, v, cls);
    res.admitted_rate = static_cast<double>(admitted);
    if (!(admitted > 0.0L)) {
      res.status = Status::Converged;
      out.push_back(std::move(res));
      continue;
    }
    for (auto& x : v) x = static_cast<double>(x / admitted);
    t0 = Clock::now();
    step_until_absorbed(tc, std::move(v), o, res);
    res.seconds.push_back({"iterate", since(t0)});
    out.push_back(std::move(res));
  }
  return out;
}

}  // namespace aqm
