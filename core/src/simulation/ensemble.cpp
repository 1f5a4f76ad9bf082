// Ensembles of replications of a piecewise-constant scenario (SPEC 6 and 7): the
// simulator's slot loop run phase after phase, the state recorded at the output times.
#include "aqmchain/simulation/ensemble.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include "aqmchain/interrupt.hpp"
#include "simulation/engine.hpp"
#include "simulation/event_engine.hpp"

namespace aqm {

void EnsembleLimits::check(int replications, int threads) {
  if (replications < 2 || replications > max_replications)
    fail_param("replications", detail::cat("in [2, ", max_replications, "] (two or more for a confidence interval)"),
               replications);
  if (threads < 0 || threads > max_threads)
    fail_param("threads", detail::cat("in [0, ", max_threads, "] (0: all cores)"), threads);
}

void EnsembleOptions::validate() const {
  EnsembleLimits::check(replications, threads);
  if (!(memory_limit_bytes > 0.0) || !std::isfinite(memory_limit_bytes))
    fail_param("memory_limit_bytes", "> 0 and finite", memory_limit_bytes);
}

namespace {

/// One replication's observations: the state at each output time and the arrivals and
/// losses in the interval that ends there.
struct Record {
  std::vector<int32_t> n;
  std::vector<double> avg, pmax;  ///< pmax: adaptive RED's p_max (0 without)
  std::vector<int64_t> arrivals, losses;
  explicit Record(size_t T) : n(T), avg(T), pmax(T), arrivals(T), losses(T) {}
};
constexpr double kRecordBytes = 4 + 8 + 8 + 8 + 8;

/// Sums over the replications, in replication order.
struct Sums {
  std::vector<long double> q, q2, n, n2, a, a2, arr, arr2, loss, loss2, cross, pm, pm2;
  explicit Sums(size_t T)
      : q(T), q2(T), n(T), n2(T), a(T), a2(T), arr(T), arr2(T), loss(T), loss2(T), cross(T), pm(T), pm2(T) {}
  void add(const Record& r) {
    for (size_t i = 0; i < q.size(); ++i) {
      const long double ni = r.n[i], qi = ni > 0 ? ni - 1 : 0, ai = r.avg[i], A = r.arrivals[i], L = r.losses[i];
      q[i] += qi, q2[i] += qi * qi, n[i] += ni, n2[i] += ni * ni, a[i] += ai, a2[i] += ai * ai;
      arr[i] += A, arr2[i] += A * A, loss[i] += L, loss2[i] += L * L, cross[i] += L * A;
      pm[i] += r.pmax[i], pm2[i] += static_cast<long double>(r.pmax[i]) * r.pmax[i];
    }
  }
};
constexpr double kSumsBytes = 13 * sizeof(long double);
constexpr double kResultBytes = 8 + 15 * 8;

/// The whole number of slots (continuous time: time units) in `times[i]`, checked.
std::vector<int64_t> output_slots(const std::vector<double>& times, double total, const char* unit) {
  if (times.empty()) fail_param("times", "a non-empty list of output slots", "an empty list");
  if (static_cast<int64_t>(times.size()) > EnsembleLimits::max_times)
    fail_param("times", detail::cat("at most ", EnsembleLimits::max_times, " output slots"), times.size());
  std::vector<int64_t> out(times.size());
  for (size_t i = 0; i < times.size(); ++i) {
    const std::string p = detail::cat("times[", i, "]");
    const double t = times[i];
    if (!std::isfinite(t) || t != std::floor(t))
      fail_param(p, detail::cat("a whole number of ", unit), std::isnan(t) ? std::string("not a number") : detail::cat(t));
    if (t < 0.0 || t > total)
      fail_param(p, detail::cat("in [0, ", total, "] (0: the initial state; the scenario's total duration in ", unit, ")"),
                 t);
    if (i > 0 && !(t > times[i - 1]))
      fail_param(p, detail::cat("> times[", i - 1, "] = ", times[i - 1], " (strictly increasing)"), t);
    out[i] = static_cast<int64_t>(t);
  }
  return out;
}

}  // namespace

EnsembleResult simulate_scenario(const Scenario& sc, const std::vector<double>& times, const EnsembleOptions& o) {
  sc.validate();
  const bool continuous = sc.phases.front().model.time == TimeKind::Continuous;
  {  // class-aware phases (docs/classes.md): the packets carry their flow, so every phase has the same flows
    const Model& first = sc.phases.front().model;
    for (size_t i = 0; i < sc.phases.size(); ++i) {
      const Model& m = sc.phases[i].model;
      if (sim::class_aware(m) != sim::class_aware(first) || m.class_count() != first.class_count() ||
          m.total_flows() != first.total_flows())
        fail_param(detail::cat("phase[", i, "].class"), "the traffic classes and flows of phase[0] (packets carry "
                   "their class and flow across the phase boundaries)",
                   detail::cat(m.class_count(), " classes with ", m.total_flows(), " flows against ",
                               first.class_count(), " with ", first.total_flows()));
    }
  }
  o.validate();
  const double total = sc.total_duration();
  const std::vector<int64_t> out = output_slots(times, total, continuous ? "time units" : "slots");
  const size_t T = out.size();
  const int64_t horizon = out.back();  // nothing after the last output slot is simulated
  const std::vector<double> bounds = sc.boundaries();
  size_t phases = 1;  // the phases that start before the horizon (the first also for a horizon of 0)
  while (phases < sc.phases.size() && static_cast<int64_t>(bounds[phases]) < horizon) ++phases;

  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = std::min(o.replications, o.threads > 0 ? o.threads : hw);

  // Memory, before anything is allocated: per phase its parameters (modulator rows,
  // grid, the table of grid targets where it pays), per output time the records of the
  // replications in flight (at most two per thread in practice), the sums and the result.
  const int N = sc.phases.front().model.buffer;
  const int M = sc.phases.front().model.source.states();
  const double table_cap = 256.0 * 1024 * 1024;
  std::vector<bool> use_table(phases, false);
  double tables = 0.0, params = 0.0;
  for (size_t i = 0; i < phases; ++i) {
    const Model& m = sc.phases[i].model;
    const double slots = std::min<double>(bounds[i + 1], static_cast<double>(horizon)) - bounds[i];
    params += 8.0 * M * M + 8.0 * M * 3 + (o.discretised ? 8.0 * 4 * static_cast<double>(m.grid.size(N)) : 0.0);
    const double tb = o.discretised && !continuous ? sim::target_table_bytes(m, slots * o.replications) : 0.0;
    if (tb > 0.0 && tables + tb <= table_cap) use_table[i] = true, tables += tb;
  }
  const double per_time = static_cast<double>(T) * (2.0 * threads * kRecordBytes + kSumsBytes + kResultBytes + 8.0);
  const double streams = 32.0 * o.replications;
  const double need = params + tables + per_time + streams + threads * 16.0 * (N + 8.0);
  if (need > o.memory_limit_bytes) {
    const std::string largest = per_time >= params + tables ? "times" : (tables > params ? "grid.k" : "scenario.phase");
    throw StateSpaceTooLarge(
        largest, detail::cat("simulate_scenario: needs about ", need / 1e9, " GB (", T, " output slots, ", phases,
                             " phases, ", o.replications, " replications on ", threads,
                             " threads), above memory_limit_bytes = ", o.memory_limit_bytes / 1e9, " GB: lower '",
                             largest, "'"));
  }

  const auto t0 = std::chrono::steady_clock::now();
  try {
    std::vector<std::unique_ptr<sim::SlotParams>> P;
    std::vector<sim::ChunkFn> step;
    std::vector<std::unique_ptr<sim::ct::Params>> CP;  // continuous time: the event engine's phases
    for (size_t i = 0; i < phases; ++i) {
      if (continuous) {
        CP.push_back(std::make_unique<sim::ct::Params>(sc.phases[i].model, o.discretised));
        if (CP.back()->points.size() != CP.front()->points.size())
          fail_param(detail::cat("phase[", i, "].grid"), detail::cat("phase[0]'s grid (", CP.front()->points.size(),
                     " points; the discretised avg carries its grid index across phases)"),
                     detail::cat(CP.back()->points.size(), " points"));
        continue;
      }
      P.push_back(std::make_unique<sim::SlotParams>(sc.phases[i].model, o.discretised, use_table[i], 2));
      step.push_back(sim::chunk_function(*P.back(), false));  // response times are not reported here
    }
    const std::vector<Xoshiro256> streams_ = replication_streams(o.seed, o.replications);

    Sums sums(T);
    std::map<int, Record> pending;  // finished replications waiting for their turn in the sums
    int next_merge = 0;
    std::mutex merge_mutex;
    // a finished replication joins the sums in replication order (results independent of threads)
    auto merge = [&](int r, Record&& rec) {
      std::lock_guard<std::mutex> lock(merge_mutex);
      pending.emplace(r, std::move(rec));
      for (auto it = pending.find(next_merge); it != pending.end(); it = pending.find(next_merge)) {
        sums.add(it->second);
        pending.erase(it);
        ++next_merge;
      }
    };
    std::atomic<bool> stop{false};

    // continuous time: the event engine, phase after phase; the state at each output time
    auto replicate_ct = [&](int r) -> bool {
      Xoshiro256 rng = streams_[static_cast<size_t>(r)];
      Record rec(T);
      sim::ct::Replica rep(*CP.front(), rng);
      int64_t seen_arrivals = 0, seen_losses = 0;
      size_t k = 0;
      auto record = [&](const sim::ct::Params& Pi) {
        rec.n[k] = rep.n();
        rec.avg[k] = rep.avg(Pi);
        rec.pmax[k] = 0.0;
        rec.arrivals[k] = rep.arrivals() - seen_arrivals;
        rec.losses[k] = rep.losses() - seen_losses;
        seen_arrivals = rep.arrivals();
        seen_losses = rep.losses();
        ++k;
      };
      while (k < T && out[k] == 0) record(*CP.front());
      for (size_t i = 0; i < phases && k < T; ++i) {
        if (i > 0) rep.enter(*CP[i], rng);
        const double end = std::min(bounds[i + 1], static_cast<double>(horizon));
        while (k < T && static_cast<double>(out[k]) <= end) {
          rep.run_until(*CP[i], rng, static_cast<double>(out[k]), stop);
          if (stop.load(std::memory_order_relaxed)) return false;
          record(*CP[i]);
        }
        if (k < T) rep.run_until(*CP[i], rng, end, stop);
        if (stop.load(std::memory_order_relaxed)) return false;
      }
      merge(r, std::move(rec));
      return true;
    };
    auto replicate = [&](int r) -> bool {
      if (continuous) return replicate_ct(r);
      Xoshiro256 rng = streams_[static_cast<size_t>(r)];
      Record rec(T);
      sim::SimState s(N);
      s.start(P.front()->pi, rng);
      std::vector<int64_t> hn(static_cast<size_t>(N) + 1, 0);
      sim::Tally tally;
      tally.hist_n = hn.data();
      int64_t t = 0, seen_arrivals = 0, seen_losses = 0;
      size_t k = 0;
      auto record = [&]() {  // the state after out[k] slots and the arrivals / losses since the previous output
        rec.n[k] = s.n;
        rec.avg[k] = s.avg;
        rec.pmax[k] = s.pmax;
        rec.arrivals[k] = tally.arrivals - seen_arrivals;
        rec.losses[k] = tally.aqm + tally.overflow + tally.flow_compare - seen_losses;
        seen_arrivals = tally.arrivals;
        seen_losses = tally.aqm + tally.overflow + tally.flow_compare;
        ++k;
      };
      while (k < T && out[k] == 0) record();  // t = 0: the initial state, no slot run yet
      for (size_t i = 0; i < phases && k < T; ++i) {
        const int64_t end = std::min(static_cast<int64_t>(bounds[i + 1]), horizon);
        while (t < end) {
          const int64_t last = std::min({end, t + 4096, out[k]});
          step[i](*P[i], s, rng, t + 1, last, tally);
          t = last;
          if (t == out[k]) record();
          if (stop.load(std::memory_order_relaxed)) return false;
          check_interrupt();
        }
      }
      merge(r, std::move(rec));
      return true;
    };
    sim::run_replications(threads, o.replications, stop, replicate);

    EnsembleResult res;
    res.times = out;
    res.replications = o.replications;
    res.threads = threads;
    const long double R = o.replications;
    const double tq = sim::t975(o.replications - 1);
    auto mean_var = [&](long double s, long double s2, double& mean, double& var) {
      const long double m = s / R;
      mean = static_cast<double>(m);
      var = static_cast<double>(std::max<long double>(0, (s2 - R * m * m) / (R - 1)));
    };
    auto half = [&](double var) { return tq * std::sqrt(var / static_cast<double>(R)); };
    for (auto* v : {&res.mean_queue, &res.mean_queue_hw, &res.var_queue, &res.mean_system, &res.mean_system_hw,
                    &res.mean_avg, &res.mean_avg_hw, &res.arrivals, &res.arrivals_hw, &res.losses, &res.losses_hw,
                    &res.loss_rate, &res.loss_rate_hw})
      v->resize(T);
    const bool adaptive = sc.phases.front().model.aqm.adaptive.enabled;
    if (adaptive) res.mean_p_max.resize(T), res.mean_p_max_hw.resize(T);
    for (size_t i = 0; i < T; ++i) {
      double m, v;
      if (adaptive) {
        mean_var(sums.pm[i], sums.pm2[i], m, v);
        res.mean_p_max[i] = m, res.mean_p_max_hw[i] = half(v);
      }
      mean_var(sums.q[i], sums.q2[i], m, v);
      res.mean_queue[i] = m, res.var_queue[i] = v, res.mean_queue_hw[i] = half(v);
      mean_var(sums.n[i], sums.n2[i], m, v);
      res.mean_system[i] = m, res.mean_system_hw[i] = half(v);
      mean_var(sums.a[i], sums.a2[i], m, v);
      res.mean_avg[i] = m, res.mean_avg_hw[i] = half(v);
      mean_var(sums.arr[i], sums.arr2[i], m, v);
      res.arrivals[i] = m, res.arrivals_hw[i] = half(v);
      mean_var(sums.loss[i], sums.loss2[i], m, v);
      res.losses[i] = m, res.losses_hw[i] = half(v);
      if (sums.arr[i] > 0) {
        // ratio of means; delta method: residuals L_r - rate A_r over the replications
        const long double rate = sums.loss[i] / sums.arr[i];
        const long double ss = sums.loss2[i] - 2 * rate * sums.cross[i] + rate * rate * sums.arr2[i];
        const long double var = std::max<long double>(0, ss / (R - 1));
        res.loss_rate[i] = static_cast<double>(rate);
        res.loss_rate_hw[i] = static_cast<double>(tq * std::sqrt(var / R) / (sums.arr[i] / R));
      } else {
        res.loss_rate[i] = 0.0;  // no arrival: nothing was lost; the interval is unbounded
        res.loss_rate_hw[i] = INFINITY;
      }
    }
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
  } catch (const std::bad_alloc&) {
    throw StateSpaceTooLarge("times", detail::cat("simulate_scenario: out of memory (std::bad_alloc) although the "
                                                  "estimate, ",
                                                  need / 1e9, " GB, was within memory_limit_bytes = ",
                                                  o.memory_limit_bytes / 1e9, " GB: lower 'times' or the limit"));
  }
}

}  // namespace aqm
