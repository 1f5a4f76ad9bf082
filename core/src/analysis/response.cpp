// Tagged-packet absorbing chain for response times (SPEC 5, drop policies of 2.5).
#include "aqmchain/analysis/response.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "aqmchain/operators/operator.hpp"
#include "model/slot_kernel.hpp"

namespace aqm {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Step 4 of a slot seen by the tagged packet (j ahead, n in the system):
/// calls out(p, n4, j4) for each outcome and returns the push-out probability.
/// `wgt` is the branch weight, a the arrival and rej the rejection probability.
template <class Out>
double step4(DropPolicy pol, int n, int j, double wgt, double a, double rej, Out&& out) {
  double pushed = 0.0;
  out(wgt * (1.0 - a), n, j);              // no arrival
  out(wgt * a * (1.0 - rej), n + 1, j);    // the arrival joins behind (rej = 1 when n = N)
  const double reject = wgt * a * rej;
  if (reject <= 0.0) return 0.0;
  const int waiting = n - 1;
  if (pol == DropPolicy::Tail || waiting == 0) {
    out(reject, n, j);  // the arrival itself is discarded
  } else if (pol == DropPolicy::Front) {
    // the arrival is admitted, the oldest waiting packet (position 1) is discarded
    if (j == 1)
      pushed += reject;
    else
      out(reject, n, j >= 2 ? j - 1 : j);
  } else {
    // a uniformly chosen waiting packet: positions 1..j-1 ahead, j the tagged one, j+1..n-1 behind
    const double p = reject / waiting;
    if (j >= 1) pushed += p;
    if (j >= 2) out(p * (j - 1), n, j - 1);
    out(p * (n - 1 - j), n, j);
  }
  return pushed;
}
}  // namespace

std::string to_string(ResponseMethod) { return "tagged_chain"; }

void ResponseOptions::validate() const {
  if (!(tail_mass > 0.0 && tail_mass < 1.0)) fail_param("response.tail_mass", "in (0, 1)", tail_mass);
  if (max_steps < 1) fail_param("response.max_steps", ">= 1", max_steps);
  if (!(memory_limit_bytes > 0.0)) fail_param("memory_limit", "> 0 bytes", memory_limit_bytes);
}

ResponseResult tagged_response(const Chain& c, const std::vector<double>& pi, const ResponseOptions& o) {
  o.validate();
  if (static_cast<int32_t>(pi.size()) != c.n)
    throw std::invalid_argument(detail::cat("pi has ", pi.size(), " entries, the chain ", c.n, " states"));
  if (c.time != TimeKind::Discrete)
    throw std::invalid_argument("the tagged-packet chain is defined for slotted (discrete-time) models only");
  const detail::SlotKernel K(c.model);
  const auto& level = c.component(component::level);
  const DropPolicy pol = c.model.aqm.policy;
  const double mu = K.mu;
  ResponseResult res;
  res.requested = res.method = ResponseMethod::TaggedChain;
  auto t0 = Clock::now();

  // Tagged states (j, s), j = 0..n(s)-1, numbered off[s] + j.
  std::vector<int64_t> off(static_cast<size_t>(c.n) + 1, 0);
  for (int32_t s = 0; s < c.n; ++s) off[s + 1] = off[s] + level[s];
  const int64_t T = off[c.n];
  const double bytes = static_cast<double>(T) * (4 + 3 * 8) + static_cast<double>(T) * 16 * 12;
  if (T >= std::numeric_limits<int32_t>::max() || bytes > o.memory_limit_bytes)
    throw StateSpaceTooLarge("memory_limit",
                             detail::cat("the tagged-packet chain has ", T, " states and needs up to ", bytes / 1e9,
                                         " GB, above the memory limit of ", o.memory_limit_bytes / 1e9, " GB"));
  res.states = T;
  auto target = [&](int n, int g, int m, int j) -> int32_t {
    const int32_t s = c.index_of_key(K.id(n, g, m));
    if (s < 0 || j < 0 || j >= n) throw std::logic_error("internal error: tagged transition leaves the chain");
    return static_cast<int32_t>(off[s] + j);
  };

  // Sub-stochastic T (CSR, rows = from) with absorption into served / pushed out.
  std::vector<int32_t> rp(static_cast<size_t>(T) + 1, 0), col;
  std::vector<double> val, served(T, 0.0), pushed(T, 0.0);
  col.reserve(static_cast<size_t>(T) * 10);
  val.reserve(static_cast<size_t>(T) * 10);
  std::vector<std::pair<int32_t, double>> row;
  double worst = 0.0;
  for (int32_t s = 0; s < c.n; ++s) {
    int n, g, m;
    K.decode(c.key_of(s), n, g, m);
    for (int j = 0; j < n; ++j) {
      const int64_t i = off[s] + j;
      row.clear();
      double sv = 0.0, pu = 0.0;
      K.branches(n, g, m, [&](int g2, int m2, double wgt, double a, double rej, double) {
        pu += step4(pol, n, j, wgt, a, rej, [&](double p, int n4, int j4) {
          if (p <= 0.0) return;
          if (j4 == 0)
            sv += p * mu;  // the tagged packet is in service and completes
          else if (mu > 0.0)
            row.push_back({target(n4 - 1, g2, m2, j4 - 1), p * mu});
          if (mu < 1.0) row.push_back({target(n4, g2, m2, j4), p * (1.0 - mu)});
        });
      });
      std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      double sum = sv + pu;
      for (size_t k = 0; k < row.size(); ++k) {
        if (k > 0 && row[k].first == row[k - 1].first)
          val.back() += row[k].second;
        else {
          col.push_back(row[k].first);
          val.push_back(row[k].second);
        }
        sum += row[k].second;
      }
      if (col.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        throw StateSpaceTooLarge("memory_limit", "the tagged-packet chain has more than 2^31 - 1 transitions");
      rp[i + 1] = static_cast<int32_t>(col.size());
      served[i] = sv;
      pushed[i] = pu;
      worst = std::max(worst, std::abs(sum - 1.0));
    }
  }
  if (worst > 1e-13) throw std::logic_error(detail::cat("internal error: tagged chain rows sum to 1 +- ", worst));
  res.nnz = static_cast<int64_t>(col.size());

  // State of the tagged packet at the end of its arrival slot A.
  std::vector<double> v(T, 0.0), y(T, 0.0);
  long double admitted = 0.0L;
  for (int32_t s = 0; s < c.n; ++s) {
    if (!(pi[s] > 0.0)) continue;
    int n, g, m;
    K.decode(c.key_of(s), n, g, m);
    K.branches(n, g, m, [&](int g2, int m2, double wgt, double a, double rej, double) {
      auto enter = [&](double p, int n4, int j0) {
        if (p <= 0.0) return;
        admitted += pi[s] * p;
        if (n >= 1) {  // the packet in service at the start of slot A may complete
          v[target(n4 - 1, g2, m2, j0 - 1)] += pi[s] * p * mu;
          if (mu < 1.0) v[target(n4, g2, m2, j0)] += pi[s] * p * (1.0 - mu);
        } else {
          v[target(n4, g2, m2, j0)] += pi[s] * p;
        }
      };
      enter(wgt * a * (1.0 - rej), n + 1, n);                                   // joins behind all n
      if (pol != DropPolicy::Tail && n - 1 >= 1) enter(wgt * a * rej, n, n - 1);  // a waiting packet ahead is discarded
    });
  }
  res.admitted_rate = static_cast<double>(admitted);
  if (!(admitted > 0.0L)) {
    res.status = Status::Converged;
    res.seconds.push_back({"build", since(t0)});
    return res;
  }
  for (auto& x : v) x = static_cast<double>(x / admitted);
  res.seconds.push_back({"build", since(t0)});

  // Transient steps v_r = v_{r-1} T (the sub-stochastic T as an operator; the
  // absorption probabilities served/pushed are read from v before each step).
  const CsrOperator Top(static_cast<int32_t>(T), rp.data(), col.data(), val.data());
  t0 = Clock::now();
  res.served_pmf.assign(1, 0.0);
  long double served_total = 0, pushed_total = 0, m1 = 0, m2 = 0, sojourn = 1.0L, mass = 1.0L;
  long r = 0;
  while (r < o.max_steps) {
    ++r;
    long double sr = 0, pr = 0;
    for (int64_t i = 0; i < T; ++i) {
      sr += v[i] * served[i];
      pr += v[i] * pushed[i];
    }
    Top.apply(v.data(), y.data());
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
  if (!res.converged()) {
    res.status = Status::NotConverged;
    res.note = detail::cat("max_steps = ", o.max_steps, " reached with mass ", static_cast<double>(mass),
                           " still in the system");
  }
  res.iterations = r;
  res.operator_applications = Top.applications();
  res.residual = static_cast<double>(mass);
  res.remaining_mass = static_cast<double>(mass);
  res.served_prob = static_cast<double>(served_total);
  res.pushed_out_prob = static_cast<double>(pushed_total);
  res.mean_sojourn = static_cast<double>(sojourn);
  if (served_total > 0) {
    const long double mean = m1 / served_total;
    res.mean_response = static_cast<double>(mean);
    res.var_response = static_cast<double>(m2 / served_total - mean * mean);
  }
  res.seconds.push_back({"iterate", since(t0)});
  return res;
}

}  // namespace aqm
