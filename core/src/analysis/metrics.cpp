#include "aqmchain/analysis/metrics.hpp"

#include "aqmchain/interrupt.hpp"
#include "aqmchain/model/queue_generator.hpp"

#include <algorithm>
#include <cmath>

namespace aqm {

namespace {

struct Moments {
  double mean, var;
};
Moments moments(const std::vector<double>& pmf) {
  long double m = 0.0L, m2 = 0.0L;
  for (size_t k = 0; k < pmf.size(); ++k) m += static_cast<long double>(k) * pmf[k];
  for (size_t k = 0; k < pmf.size(); ++k) {
    const long double d = static_cast<long double>(k) - m;
    m2 += d * d * pmf[k];
  }
  return {static_cast<double>(m), static_cast<double>(m2)};
}

/// Under tail drop an admitted arrival that finds n packets (SPEC 3, step 4
/// sees n_{t-1}) leaves after the (n + 1)-th completion counted from slot t when
/// n >= 1, and after the first completion counted from slot t + 1 when n = 0
/// (delayed access): R | n ~ NegBin(n + 1, mu) - 1, resp. Geometric(mu).
void tail_response(const std::vector<long double>& c, double mu, const MetricsOptions& o, Metrics& out) {
  const int N1 = static_cast<int>(c.size());  // c[n], n = 0..N-1, sums to 1
  long double mean = 0.0L, second = 0.0L;
  for (int n = 0; n < N1; ++n) {
    const long double k = n == 0 ? 1.0L : n + 1.0L;
    const long double e = n == 0 ? 1.0L / mu : k / mu - 1.0L;
    const long double v = k * (1.0L - mu) / (static_cast<long double>(mu) * mu);
    mean += c[n] * e;
    second += c[n] * (v + e * e);
  }
  out.mean_response = static_cast<double>(mean);
  out.var_response = static_cast<double>(second - mean * mean);
  // pmf: v[j] = P(j completions still needed) after slot t; each later slot
  // completes one with probability mu.
  std::vector<long double> v(N1 + 2, 0.0L);
  for (int n = 0; n < N1; ++n) {
    if (n == 0) {
      v[1] += c[0];
    } else {
      v[n + 1] += c[n] * (1.0L - mu);
      v[n] += c[n] * mu;
    }
  }
  int top = N1 + 1;
  long double remaining = 1.0L;
  out.response_pmf.assign(1, 0.0);
  for (long r = 1; r <= o.response_max_len && remaining > o.response_tail; ++r) {
    if ((r & 255) == 0) check_interrupt();  // a slow server: millions of slots of O(N) work
    const long double absorbed = mu * v[1];
    remaining = 0.0L;  // summed from v, not as 1 - sum(absorbed): no cancellation
    for (int j = 1; j < top; ++j) remaining += (v[j] = (1.0L - mu) * v[j] + mu * v[j + 1]);
    remaining += (v[top] *= (1.0L - mu));
    while (top > 1 && v[top] < 1e-300L) --top;
    out.response_pmf.push_back(static_cast<double>(absorbed));
  }
  out.response_truncated = static_cast<double>(std::max(0.0L, remaining));
}

/// Continuous time, tail drop: R | n ~ Erlang(n + 1, mu); no pmf (R has a density).
void exponential_response(const std::vector<long double>& c, double mu, Metrics& out) {
  long double mean = 0.0L, second = 0.0L;
  for (size_t n = 0; n < c.size(); ++n) {
    const long double k = n + 1.0L;
    mean += c[n] * k / mu;
    second += c[n] * (k + k * k) / (static_cast<long double>(mu) * mu);
  }
  out.mean_response = static_cast<double>(mean);
  out.var_response = static_cast<double>(second - mean * mean);
  out.response_pmf.clear();
}

}  // namespace

Metrics compute_metrics(const Chain& c, const std::vector<double>& pi, const MetricsOptions& o) {
  if (static_cast<int32_t>(pi.size()) != c.n)
    throw std::invalid_argument(detail::cat("pi has ", pi.size(), " entries, the chain ", c.n, " states"));
  const int N = c.model.buffer;
  Metrics m;
  // Components and events through the descriptor: any further components (filter
  // variables, counters, class counts) are summed over.
  const auto& level = c.component(component::level);
  const auto& avg_index = c.component(component::avg);
  const auto &p_arrival = c.event(event::arrival), &p_aqm = c.event(event::aqm_drop), &p_mark = c.event(event::mark),
             &p_overflow = c.event(event::overflow), &p_depart = c.event(event::depart),
             &p_admit = c.event(event::admit);
  long double arr = 0, aqm = 0, mark = 0, ovf = 0, dep = 0, adm = 0;
  std::vector<long double> sys(N + 1, 0.0L), avg(c.grid.size(), 0.0L), admit_at(N, 0.0L);
  for (int32_t s = 0; s < c.n; ++s) {
    const long double p = pi[s];
    arr += p * p_arrival[s];
    aqm += p * p_aqm[s];
    mark += p * p_mark[s];
    ovf += p * p_overflow[s];
    dep += p * p_depart[s];
    adm += p * p_admit[s];
    sys[level[s]] += p;
    avg[avg_index[s]] += p;
    if (level[s] < N) admit_at[level[s]] += p * p_admit[s];
  }
  m.arrival_rate = static_cast<double>(arr);
  m.throughput = static_cast<double>(dep);
  if (arr > 0) {
    m.loss_aqm = static_cast<double>(aqm / arr);
    m.loss_overflow = static_cast<double>(ovf / arr);
    m.loss = static_cast<double>((aqm + ovf) / arr);
    m.mark_prob = static_cast<double>(mark / arr);
    m.aqm_decision_prob = static_cast<double>((aqm + mark) / arr);
  }
  m.system_pmf.assign(sys.begin(), sys.end());
  m.queue_pmf.assign(N, 0.0);
  m.queue_pmf[0] = static_cast<double>(sys[0] + (N >= 1 ? sys[1] : 0.0L));
  for (int n = 2; n <= N; ++n) m.queue_pmf[n - 1] = static_cast<double>(sys[n]);
  m.avg_pmf.assign(avg.begin(), avg.end());
  const Moments ms = moments(m.system_pmf), mq = moments(m.queue_pmf);
  m.mean_system = ms.mean;
  m.var_system = ms.var;
  m.mean_queue = mq.mean;
  m.var_queue = mq.var;
  long double ma = 0;
  for (size_t i = 0; i < avg.size(); ++i) ma += avg[i] * c.grid[i];
  m.mean_avg = static_cast<double>(ma);

  m.admitted_rate = static_cast<double>(adm);
  const bool tail = c.model.aqm.policy == DropPolicy::Tail;
  if (o.response == "none") {
    m.response_note = "response times not requested";
  } else if (!(adm > 0)) {
    m.response_note = "no packet is ever admitted";
  } else if (c.time == TimeKind::Continuous) {
    // PASTA: an admitted arrival sees n with probability prop. to pi(n) x admission
    // rate; R is the sum of n + 1 exponential(mu) times (memoryless service).
    if (!tail || o.response == "tagged") {
      m.response_note = "response times under front/random drop are not computed for continuous-time models";
    } else {
      for (auto& x : admit_at) x /= adm;
      exponential_response(admit_at, c.model.service.mu, m);
      m.response_available = true;
      m.response_method = "closed_form";
      m.mean_sojourn = m.mean_response;
    }
  } else if (tail && o.response != "tagged") {
    for (auto& x : admit_at) x /= adm;
    tail_response(admit_at, c.model.service.mu, o, m);
    m.response_available = true;
    m.response_method = "closed_form";
    m.mean_sojourn = m.mean_response;
  } else if (c.model.aqm.stateful()) {
    m.response_note = "the tagged-packet chain (front/random drop policy) is not built for a stateful AQM "
                      "(aqm.spacing or aqm.adaptive): response times are computed under the tail policy only";
  } else {
    const ResponseResult r = tagged_response(c, pi, o.tagged);
    m.response_method = "tagged_chain";
    m.response_steps = r.iterations;
    m.response_states = r.states;
    m.admitted_rate = r.admitted_rate;
    m.pushed_out_prob = r.pushed_out_prob;
    m.mean_sojourn = r.mean_sojourn;
    m.response_truncated = r.remaining_mass;
    if (r.served_prob > 0) {
      m.response_pmf = r.served_pmf;
      for (double& x : m.response_pmf) x /= r.served_prob;
      m.mean_response = r.mean_response;
      m.var_response = r.var_response;
      m.response_available = r.converged();
    }
    if (!r.converged())
      m.response_note = detail::cat("tagged-packet chain stopped after ", r.iterations, " steps with mass ",
                                    r.remaining_mass, " still in the system (tail_mass ", o.tagged.tail_mass, ")");
  }
  if (m.response_available && m.mean_system > 0)
    m.littles_law_error = std::abs(m.mean_system - m.admitted_rate * m.mean_sojourn) / m.mean_system;
  return m;
}

}  // namespace aqm
