#include "aqmchain/analysis/metrics.hpp"

#include "aqmchain/interrupt.hpp"
#include "aqmchain/model/queue_generator.hpp"

#include <algorithm>
#include <cmath>

namespace aqm {

namespace {

/// The response-time law of packets that are served, from a tagged-chain result, into the
/// metrics of all packets or of one class (left unset when no packet is served).
template <class Target>
void take_served(const ResponseResult& r, Target& t) {
  if (!(r.served_prob > 0)) return;
  t.response_pmf = r.served_pmf;
  for (double& v : t.response_pmf) v /= r.served_prob;
  t.mean_response = r.mean_response;
  t.var_response = r.var_response;
  t.response_available = r.converged();
}

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

int event_index(const QueueChain& c, const std::string& name) {
  for (size_t e = 0; e < c.event_names.size(); ++e)
    if (c.event_names[e] == name) return static_cast<int>(e);
  return -1;
}

void copy_response(const Metrics& from, ClassMetrics& to) {
  to.response_available = from.response_available;
  to.response_note = from.response_note;
  to.response_pmf = from.response_pmf;
  to.mean_response = from.mean_response;
  to.var_response = from.var_response;
}

/// A chain without class components: its one class is the whole traffic.
void single_class_metrics(const QueueChain& c, const std::vector<double>& pi, Metrics& m) {
  ClassMetrics k;
  k.name = c.model.class_name(0);
  k.arrival_rate = m.arrival_rate;
  k.loss = m.loss, k.loss_aqm = m.loss_aqm, k.loss_overflow = m.loss_overflow, k.mark_prob = m.mark_prob;
  k.loss_flow_compare = 0.0;
  // front / random: a rejection with a packet waiting (n >= 2) discards that packet (pushed
  // out, the simulator's cause); the arrival is lost only when nothing waits
  if (c.model.aqm.policy != DropPolicy::Tail && m.arrival_rate > 0) {
    const auto& level = c.component(component::level);
    const auto &p_aqm = c.event(event::aqm_drop), &p_ovf = c.event(event::overflow);
    long double pushed = 0, aqm = 0, ovf = 0;
    for (int32_t s = 0; s < c.n; ++s) {
      const long double p = pi[s];
      if (level[s] >= 2)
        pushed += p * (p_aqm[s] + p_ovf[s]);
      else
        aqm += p * p_aqm[s], ovf += p * p_ovf[s];
    }
    k.loss_pushed_out = static_cast<double>(pushed / m.arrival_rate);
    k.loss_aqm = static_cast<double>(aqm / m.arrival_rate);
    k.loss_overflow = static_cast<double>(ovf / m.arrival_rate);
  }
  k.throughput = m.throughput;
  k.throughput_share = m.throughput > 0 ? 1.0 : 0.0;
  k.mean_queue = m.mean_system;
  k.queue_share = m.mean_system > 0 ? 1.0 : 0.0;
  copy_response(m, k);
  m.classes.assign(1, k);
}

/// A class chain: the per-class events "<event>.c<k>" (model/queue_generator.hpp).
void class_metrics(const QueueChain& c, const std::vector<double>& pi, const MetricsOptions& o, Metrics& m,
                   const std::vector<ResponseResult>& tagged) {
  const int C = c.model.class_count(), N = c.model.buffer;
  const auto& level = c.component(component::level);
  long double dep_total = 0, in_total = 0;
  m.classes.assign(static_cast<size_t>(C), ClassMetrics{});
  for (int k = 0; k < C; ++k) {
    auto sum = [&](const std::string& ev) {
      const auto& w = c.event(class_event(ev, k + 1));
      long double t = 0;
      for (int32_t s = 0; s < c.n; ++s) t += static_cast<long double>(pi[s]) * w[s];
      return t;
    };
    ClassMetrics& x = m.classes[static_cast<size_t>(k)];
    x.name = c.model.class_name(k);
    const long double arr = sum(event::arrival);
    x.arrival_rate = static_cast<double>(arr);
    if (arr > 0) {
      x.loss_aqm = static_cast<double>(sum(event::aqm_drop) / arr);
      x.loss_overflow = static_cast<double>(sum(event::overflow) / arr);
      x.loss_flow_compare = static_cast<double>(sum(event::flow_compare) / arr);
      x.loss_pushed_out = static_cast<double>(sum(event::pushed_out) / arr);
      x.mark_prob = static_cast<double>(sum(event::mark) / arr);
      x.loss = x.loss_aqm + x.loss_overflow + x.loss_flow_compare + x.loss_pushed_out;
    }
    const long double dep = sum(event::depart), in = sum(event::in_system);
    x.throughput = static_cast<double>(dep);
    x.mean_queue = static_cast<double>(in);
    dep_total += dep, in_total += in;
    // response time: the tagged chain's entry for the class, or under tail (closed form)
    // R depends only on the n an admitted packet of the class finds
    if (!tagged.empty()) {
      const ResponseResult& r = tagged[static_cast<size_t>(k) + 1];
      take_served(r, x);
      x.response_note = r.converged() ? std::string() : m.response_note;
    } else if (!m.response_available || m.response_method != "closed_form") {
      x.response_note = m.response_note;
    } else {
      const auto& adm = c.event(class_event("admit", k + 1));
      std::vector<long double> at(static_cast<size_t>(N), 0.0L);
      long double total = 0;
      for (int32_t s = 0; s < c.n; ++s)
        if (level[s] < N) {
          const long double w = static_cast<long double>(pi[s]) * adm[s];
          at[static_cast<size_t>(level[s])] += w;
          total += w;
        }
      if (!(total > 0)) {
        x.response_note = "no packet of the class is ever admitted";
      } else {
        for (auto& v : at) v /= total;
        Metrics r;
        if (c.time == TimeKind::Continuous)
          exponential_response(at, c.model.service.mu, r);
        else
          tail_response(at, c.model.service.mu, o, r);
        r.response_available = true;
        copy_response(r, x);
      }
    }
  }
  for (auto& x : m.classes) {
    x.throughput_share = dep_total > 0 ? static_cast<double>(x.throughput / dep_total) : 0.0;
    x.queue_share = in_total > 0 ? static_cast<double>(x.mean_queue / in_total) : 0.0;
  }
}

}  // namespace

Metrics compute_metrics(const QueueChain& c, const std::vector<double>& pi, const MetricsOptions& o) {
  if (static_cast<int32_t>(pi.size()) != c.n)
    throw std::invalid_argument(detail::cat("pi has ", pi.size(), " entries, the chain ", c.n, " states"));
  const int N = c.model.buffer;
  Metrics m;
  // Components and events through the descriptor: any further components (filter
  // variables, counters, class counts) are summed over.
  const auto& level = c.component(component::level);
  const auto& avg_index = c.grid_index();
  const auto &p_arrival = c.event(event::arrival), &p_aqm = c.event(event::aqm_drop), &p_mark = c.event(event::mark),
             &p_overflow = c.event(event::overflow), &p_depart = c.event(event::depart),
             &p_admit = c.event(event::admit);
  long double arr = 0, aqm = 0, mark = 0, ovf = 0, dep = 0, adm = 0, fc = 0;
  const int fc_event = event_index(c, event::flow_compare);  // class chains only
  std::vector<long double> sys(N + 1, 0.0L), avg(c.grid.size(), 0.0L), admit_at(N, 0.0L);
  for (int32_t s = 0; s < c.n; ++s) {
    const long double p = pi[s];
    arr += p * p_arrival[s];
    aqm += p * p_aqm[s];
    mark += p * p_mark[s];
    ovf += p * p_overflow[s];
    dep += p * p_depart[s];
    adm += p * p_admit[s];
    if (fc_event >= 0) fc += p * c.events[static_cast<size_t>(fc_event)][s];
    sys[level[s]] += p;
    avg[avg_index[s]] += p;
    if (level[s] < N) admit_at[level[s]] += p * p_admit[s];
  }
  m.arrival_rate = static_cast<double>(arr);
  m.throughput = static_cast<double>(dep);
  if (arr > 0) {
    m.loss_aqm = static_cast<double>(aqm / arr);
    m.loss_overflow = static_cast<double>(ovf / arr);
    m.loss = static_cast<double>((aqm + ovf + fc) / arr);
    m.loss_flow_compare = static_cast<double>(fc / arr);
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
  const bool class_chain = c.space.find(component::class2) >= 0 || c.space.find(component::sequence) >= 0 ||
                           c.space.find(component::window) >= 0;
  // the classes of the queued packets steer the queue (the response then depends on them)
  const bool steered = c.model.aqm.modified != Modified::None || c.model.aqm.flow_compare;
  std::vector<ResponseResult> per_class;  // class chains under the tagged chain: all, then each class
  if (o.response == "none") {
    m.response_note = "response times not requested";
  } else if (c.model.source.max_batch() > 1) {
    m.response_note = "response times are not computed by the chain for batch arrivals (the simulator measures them)";
  } else if (class_chain && steered && c.space.find(component::class2) < 0) {
    m.response_note = "response times under modified RED or the flow comparison are computed on the two-class chain "
                      "(classes = \"approx\"), not on the exact or window chain";
  } else if (class_chain && c.time == TimeKind::Continuous && (!tail || o.response == "tagged") &&
             c.space.find(component::class2) < 0) {
    m.response_note = "response times under front or random drop in continuous time are computed on the two-class "
                      "chain (classes = \"approx\"), not on the exact or window chain";
  } else if (!(adm > 0)) {
    m.response_note = "no packet is ever admitted";
  } else if (c.time == TimeKind::Continuous && !(class_chain && steered) && tail && o.response != "tagged") {
    // PASTA: an admitted arrival sees n with probability prop. to pi(n) x admission
    // rate; R is the sum of n + 1 exponential(mu) times (memoryless service).  (Under
    // front or random drop, modified RED or the flow comparison a waiting packet may be
    // discarded: the tagged chain below.)
    for (auto& x : admit_at) x /= adm;
    exponential_response(admit_at, c.model.service.mu, m);
    m.response_available = true;
    m.response_method = "closed_form";
    m.mean_sojourn = m.mean_response;
  } else if (c.time == TimeKind::Continuous && c.model.aqm.ns3()) {
    m.response_note = "response times of ns-3 semantics are computed under tail drop only";
  } else if (tail && o.response != "tagged" && !(class_chain && steered)) {
    for (auto& x : admit_at) x /= adm;
    tail_response(admit_at, c.model.service.mu, o, m);
    m.response_available = true;
    m.response_method = "closed_form";
    m.mean_sojourn = m.mean_response;
  } else {
    // continuous time: the tagged packet on the two-class chain (a chain without classes: on
    // its one-class two-class chain), stepped on its uniformised chain or, if that is slow,
    // solved for the moments (absorbing_moments); slotted class-blind models: on the lumped chain
    const bool continuous = c.time == TimeKind::Continuous;
    if (class_chain)
      per_class = steered || continuous ? class_steered_response(c, pi, o.tagged) : class_tagged_response(c, pi, o.tagged);
    const ResponseResult r = class_chain ? per_class[0]
                             : continuous ? continuous_tagged_response(c, pi, o.tagged)
                                          : tagged_response(c, pi, o.tagged);
    m.response_method = "tagged_chain";
    m.response_steps = r.iterations;
    m.response_states = r.states;
    m.admitted_rate = r.admitted_rate;
    m.pushed_out_prob = r.pushed_out_prob;
    m.mean_sojourn = r.mean_sojourn;
    m.response_truncated = r.remaining_mass;
    take_served(r, m);
    if (!r.converged())
      m.response_note = detail::cat("tagged-packet chain stopped after ", r.iterations, " steps with mass ",
                                    r.remaining_mass, " still in the system (tail_mass ", o.tagged.tail_mass, ")");
  }
  if (m.response_available && m.mean_system > 0)
    m.littles_law_error = std::abs(m.mean_system - m.admitted_rate * m.mean_sojourn) / m.mean_system;
  if (class_chain)
    class_metrics(c, pi, o, m, per_class);
  else
    single_class_metrics(c, pi, m);
  return m;
}

}  // namespace aqm
