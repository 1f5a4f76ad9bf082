// Transient analysis over the phases of a scenario: dispatch to the stepping
// and exponential kernels, metrics of each output law.
#include "aqmchain/analysis/transient_analysis.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "aqmchain/analysis/metrics.hpp"
#include "aqmchain/errors.hpp"
#include "aqmchain/model/queue_generator.hpp"
#include "aqmchain/operators/operator.hpp"

namespace aqm {

namespace {
/// Auto (continuous time) runs uniformization when it needs at most this many
/// products (about Lambda t: no linear solves, a truncation error that is a
/// bound, cheap for short horizons), rational Krylov above (long horizons, stiff
/// generators: its steps are not bounded by ||G||, and on the SSMP RED chains a
/// basis of 15 to 30 solves reaches t = 1e4 at once).  Measured on the
/// continuous SSMP RED chain with 72600 states (one thread, a loaded machine):
/// Lambda t = 5.7e3, uniformization 1.8 s against 4.4 s; Lambda t = 1.8e4 with
/// 201 output times, 11 s against 4.3 s.
constexpr double kAutoUniformizationProducts = 1e4;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

void check_output_times(const std::vector<double>& times) {
  if (times.empty()) throw ModelError("times", "parameter 'times' must hold at least one time");
  for (size_t k = 0; k < times.size(); ++k) {
    if (!std::isfinite(times[k]) || times[k] < 0.0)
      throw ModelError("times", detail::cat("parameter 'times' must hold finite times >= 0, got ", times[k]));
    if (k > 0 && times[k] < times[k - 1])
      throw ModelError("times", detail::cat("parameter 'times' must be sorted: ", times[k], " after ", times[k - 1]));
  }
}

void check_initial_law(const std::vector<double>& p, int32_t n) {
  if (static_cast<int32_t>(p.size()) != n)
    throw ModelError("p0", detail::cat("parameter 'p0' must have ", n, " entries (one per state), got ", p.size()));
  long double s = 0.0L;
  for (size_t i = 0; i < p.size(); ++i) {
    if (!std::isfinite(p[i]) || p[i] < 0.0)
      throw ModelError("p0", detail::cat("parameter 'p0' must be a probability vector: entry ", i, " is ", p[i]));
    s += p[i];
  }
  if (std::abs(static_cast<double>(s) - 1.0) > 1e-8)
    throw ModelError("p0", detail::cat("parameter 'p0' must sum to 1 (within 1e-8), got ", static_cast<double>(s)));
}

void TransientAnalysisOptions::validate() const {
  kernel.validate();
  step.validate();
  for (double t : pmf_times)
    if (!std::isfinite(t) || t < 0.0)
      throw OptionError(detail::cat("transient option 'pmf_times' must hold finite times >= 0, got ", t));
  if (observable_names.size() != observables.size())
    throw OptionError(detail::cat("transient option 'observables' must have one name per function: ",
                                  observable_names.size(), " names, ", observables.size(), " functions"));
  for (size_t i = 0; i < observables.size(); ++i)
    for (double v : observables[i])
      if (!std::isfinite(v))
        throw OptionError(detail::cat("transient option 'observables' ('", observable_names[i],
                                      "') must hold finite values, got ", v));
}

std::vector<double> empty_system_law(const QueueChain& c) {
  std::vector<double> p(static_cast<size_t>(c.n), 0.0);
  const int mod = c.space.find(component::modulator);
  std::vector<double> weights{1.0};
  if (mod >= 0) weights = c.model.source.modulator_stationary();
  std::vector<int32_t> values(static_cast<size_t>(c.space.count()), 0);
  // adaptive RED: p_max starts at the model's p_max, not at the lowest grid point
  const int pm = c.space.find(component::pmax);
  if (pm >= 0) values[static_cast<size_t>(pm)] = stateful_info(c.model).pmax_start;
  long double placed = 0.0L;
  for (size_t m = 0; m < weights.size(); ++m) {
    if (mod >= 0) values[static_cast<size_t>(mod)] = static_cast<int32_t>(m);
    const int32_t s = c.index_of(values);
    if (s < 0) continue;
    p[static_cast<size_t>(s)] += weights[m];
    placed += weights[m];
  }
  if (!(placed > 0.0L))
    throw ModelError("p0", "the empty system is not a state of this chain: give the initial law 'p0'");
  for (double& v : p) v = static_cast<double>(v / placed);
  return p;
}

std::vector<double> point_law(const QueueChain& c, const std::vector<int32_t>& values) {
  if (static_cast<int>(values.size()) != c.space.count())
    throw ModelError("p0", detail::cat("parameter 'p0' (a state) must give ", c.space.count(), " component values, got ",
                                       values.size()));
  int32_t s = -1;
  try {
    s = c.index_of(values);
  } catch (const std::exception& e) {
    throw ModelError("p0", std::string("parameter 'p0' is not a state: ") + e.what());
  }
  if (s < 0) throw ModelError("p0", "parameter 'p0' names a state that is not reachable in this chain");
  std::vector<double> p(static_cast<size_t>(c.n), 0.0);
  p[static_cast<size_t>(s)] = 1.0;
  return p;
}

TransientAnalysis analyse_transient(const std::vector<const QueueChain*>& chains, const Scenario& scenario,
                                    const std::vector<double>& p0, const std::vector<double>& times,
                                    const TransientAnalysisOptions& o) {
  const auto t_start = Clock::now();
  o.validate();
  scenario.validate();
  if (chains.size() != scenario.phases.size() || chains.empty())
    throw OptionError(detail::cat("transient analysis needs one chain per phase: ", chains.size(), " chains for ",
                                  scenario.phases.size(), " phases"));
  const QueueChain& c0 = *chains[0];
  for (const QueueChain* c : chains)
    if (c->n != c0.n || c->time != c0.time)
      throw OptionError("the chains of a scenario must share one state space (build them with build_scenario_chains)");
  const bool discrete = c0.time == TimeKind::Discrete;
  const double total = scenario.total_duration();

  check_output_times(times);
  for (size_t k = 0; k < times.size(); ++k) {
    if (times[k] > total)
      throw ModelError("times", detail::cat("parameter 'times' must end within the scenario's ", total,
                                            " time units, got ", times[k]));
  }
  TransientMethod method = o.method;
  double uniformization_products = 0.0;  // sum over phases of Lambda x the time stepped in it
  if (method == TransientMethod::Auto && !discrete) {
    const auto b = scenario.boundaries();
    for (size_t i = 0; i < chains.size(); ++i) {
      const double span = std::max(0.0, std::min(b[i + 1], times.back()) - b[i]);
      uniformization_products += exit_rate(*chains[i]) * span;
    }
  }
  if (method == TransientMethod::Auto)
    method = discrete ? TransientMethod::Step
                      : uniformization_products <= kAutoUniformizationProducts ? TransientMethod::Uniformization
                                                                               : TransientMethod::RationalKrylov;
  if (method == TransientMethod::Step) {
    if (!discrete)
      throw OptionError("transient method 'step' needs a slotted (discrete-time) model; use krylov, rational_krylov or "
                        "uniformization");
    for (double t : times)
      if (t != std::floor(t) || t > 9e15)
        throw ModelError("times", detail::cat("parameter 'times' must hold whole numbers of slots for method 'step', got ", t));
  }
  for (double t : o.pmf_times)
    if (!std::binary_search(times.begin(), times.end(), t))
      throw OptionError(detail::cat("transient option 'pmf_times': ", t, " is not one of the output times"));

  std::vector<double> p = p0.empty() ? empty_system_law(c0) : p0;
  check_initial_law(p, c0.n);

  TransientAnalysis r;
  r.requested = o.method;
  r.method = method;
  if (o.method == TransientMethod::Auto && !discrete)
    r.note = detail::cat("auto: ", to_string(method), " (uniformization needs about ", uniformization_products,
                         " products; it is chosen up to ", kAutoUniformizationProducts, ")");
  r.times = times;
  r.phase_boundaries = scenario.boundaries();
  r.pmf_times = o.pmf_times;
  r.queue_pmf.resize(o.pmf_times.size());
  const auto& names = transient_metric_names();
  r.values.assign(names.size(), std::vector<double>(times.size(), 0.0));
  for (size_t i = 0; i < o.observables.size(); ++i)
    if (static_cast<int64_t>(o.observables[i].size()) != c0.n)
      throw OptionError(detail::cat("transient option 'observables' ('", o.observable_names[i], "') must give one value per state (",
                                    c0.n, "), got ", o.observables[i].size()));
  r.observable_values.assign(o.observables.size(), std::vector<double>(times.size(), 0.0));
  r.phase.assign(times.size(), 0);
  r.steady_at.assign(chains.size(), -1.0);

  MetricsOptions mo;
  mo.response = "none";
  std::vector<double> law(static_cast<size_t>(c0.n));
  double metrics_seconds = 0.0;
  auto record = [&](size_t k, const double* pv) {
    const auto t0 = Clock::now();
    const int ph = scenario.phase_at(times[k]);
    std::copy(pv, pv + c0.n, law.begin());
    const Metrics m = compute_metrics(*chains[static_cast<size_t>(ph)], law, mo);
    const double v[] = {m.mean_queue, m.var_queue,  m.mean_system, m.var_system,    m.mean_avg, m.arrival_rate,
                        m.throughput, m.loss,       m.loss_aqm,    m.loss_overflow, m.mark_prob};
    for (size_t j = 0; j < names.size(); ++j) r.values[j][k] = v[j];
    for (size_t j = 0; j < o.observables.size(); ++j) {
      long double e = 0.0L;
      const double* f = o.observables[j].data();
      for (int64_t i = 0; i < c0.n; ++i) e += static_cast<long double>(law[static_cast<size_t>(i)]) * f[i];
      r.observable_values[j][k] = static_cast<double>(e);
    }
    r.phase[k] = ph;
    for (size_t j = 0; j < o.pmf_times.size(); ++j)
      if (o.pmf_times[j] == times[k] && r.queue_pmf[j].empty()) r.queue_pmf[j] = m.queue_pmf;
    r.outputs = std::max(r.outputs, k + 1);
    metrics_seconds += since(t0);
    if (o.progress) o.progress(times[k], times.back());
  };

  const double last = times.back();
  size_t k = 0;  // next output
  double kernel_seconds = 0.0;
  std::vector<std::pair<std::string, double>> kernel_phases;  // the kernels' own seconds, summed over phases
  bool stopped = false;
  for (size_t i = 0; i < chains.size() && !stopped && k < times.size(); ++i) {
    const double start = r.phase_boundaries[i], end = std::min(r.phase_boundaries[i + 1], last);
    if (start > last) break;
    const bool is_last = i + 1 == chains.size() || r.phase_boundaries[i + 1] >= last;
    // outputs in [start, end) (the last phase: [start, end])
    size_t k_end = k;
    while (k_end < times.size() && (times[k_end] < end || (is_last && times[k_end] <= end))) ++k_end;
    const QueueChain& c = *chains[i];
    const auto t0 = Clock::now();
    if (method == TransientMethod::Step) {
      const TransposedCsr PT(CsrOperator(c.n, c.rowptr.data(), c.col.data(), c.val.data()));
      std::vector<int64_t> outs;
      for (size_t j = k; j < k_end; ++j) outs.push_back(static_cast<int64_t>(times[j] - start));
      const size_t base = k;
      const StepAccount a = step_slots(PT, p, static_cast<int64_t>(end - start), outs, o.step,
                                       [&](size_t j, const double* pv) { record(base + j, pv); });
      r.steps += static_cast<long>(a.steps);
      r.operator_applications += static_cast<long>(a.steps);
      if (a.steady) r.steady_at[i] = start + static_cast<double>(a.steady_slot);
      if (a.budget_exhausted) {
        stopped = true;
        r.note = detail::cat("step budget max_steps = ", o.step.max_steps, " ran out in phase ", i, " at t = ",
                             start + static_cast<double>(a.reached));
      }
    } else {
      const GeneratorOperator G = GeneratorOperator::from_operator(c);
      std::vector<double> local;
      for (size_t j = k; j < k_end; ++j) local.push_back(times[j] - start);
      const size_t n_out = local.size();
      if (local.empty() || local.back() < end - start) local.push_back(end - start);
      const size_t base = k;
      TransientResult x = expm_multiply(G, p, local, method, o.kernel, [&](size_t j, double, const double* pv) {
        if (j < n_out) record(base + j, pv);
      });
      r.steps += x.steps;
      r.rejected_steps += x.rejected_steps;
      r.error_sum += x.error_sum;
      r.hump = std::max(r.hump, x.hump);
      r.roundoff = std::max(r.roundoff, x.roundoff);
      r.clipped_mass = std::max(r.clipped_mass, x.clipped_mass);
      r.operator_applications += x.operator_applications;
      for (const auto& e : x.extra) r.extra.push_back({detail::cat("phase", i, "_", e.first), e.second});
      for (const auto& [name, sec] : x.seconds) {
        if (name == "run") continue;  // "kernel" below
        auto it = std::find_if(kernel_phases.begin(), kernel_phases.end(),
                               [&](const auto& q) { return q.first == name; });
        if (it == kernel_phases.end())
          kernel_phases.push_back({name, sec});
        else
          it->second += sec;
      }
      if (!x.p.empty()) p = x.p;  // the law at the last time the kernel reached
      if (!x.converged()) {
        stopped = true;
        r.status = x.status;
        r.note = (r.note.empty() ? "" : r.note + "; ") + detail::cat("phase ", i, ": ", x.note);
      }
    }
    kernel_seconds += since(t0);
    k = k_end;
  }
  r.final_law = p;
  r.iterations = r.steps;
  if (!stopped && r.outputs == times.size()) {
    r.status = Status::Converged;
  } else if (r.status == Status::NotComputed || r.status == Status::Converged) {
    r.status = Status::NotConverged;
  }
  // partial result: only what was produced
  for (auto& v : r.values) v.resize(r.outputs);
  r.phase.resize(r.outputs);
  r.times.resize(r.outputs);
  r.residual = r.error_sum;
  r.seconds.push_back({"kernel", kernel_seconds - metrics_seconds});
  for (const auto& [name, sec] : kernel_phases) r.seconds.push_back({"kernel_" + name, sec});
  r.seconds.push_back({"metrics", metrics_seconds});
  r.seconds.push_back({"total", since(t_start)});
  return r;
}

}  // namespace aqm
