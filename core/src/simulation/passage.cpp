// Simulated hitting times (see aqmchain/simulation/passage.hpp): replications run until their
// first hit or the horizon, slotted by the simulator's slot loop, continuous-time by the
// event engine.
#include "aqmchain/simulation/passage.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <new>
#include <thread>

#include "aqmchain/interrupt.hpp"
#include "aqmchain/simulation/ensemble.hpp"
#include "simulation/engine.hpp"
#include "simulation/event_engine.hpp"
#include "simulation/passage_target.hpp"

namespace aqm {

const std::vector<std::string>& passage_reward_names() {
  static const std::vector<std::string> names = {"arrival", "aqm_drop", "mark", "overflow", "admit", "depart"};
  return names;
}

void PassageOptions::validate() const {
  EnsembleLimits::check(replications, threads);
  if (!std::isfinite(horizon) || horizon < 0.0 || horizon > static_cast<double>(SimLimits::max_slots))
    fail_param("horizon", detail::cat("finite, in [0, ", static_cast<double>(SimLimits::max_slots), "]"), horizon);
  const auto& known = passage_reward_names();
  for (size_t i = 0; i < rewards.size(); ++i) {
    if (std::find(known.begin(), known.end(), rewards[i]) == known.end())
      fail_param(detail::cat("rewards[", i, "]"), "one of arrival, aqm_drop, mark, overflow, admit, depart",
                 "'" + rewards[i] + "'");
    for (size_t j = 0; j < i; ++j)
      if (rewards[j] == rewards[i]) fail_param(detail::cat("rewards[", i, "]"), "a reward not named before", "'" + rewards[i] + "'");
  }
  if (!(memory_limit_bytes > 0.0) || !std::isfinite(memory_limit_bytes))
    fail_param("memory_limit_bytes", "> 0 and finite", memory_limit_bytes);
}

namespace {

sim::Target compile_target(const std::vector<PassageClause>& clauses) {
  if (clauses.empty()) fail_param("to", "at least one clause such as 'queue>=200'", "no clause");
  sim::Target X;
  for (const PassageClause& c : clauses) {
    const std::string p = "to (" + c.quantity + c.op + detail::cat(c.value) + ")";
    sim::Range* r = c.quantity == "queue" ? &X.queue : c.quantity == "avg" ? &X.avg
                    : c.quantity == "modulator" ? &X.modulator : nullptr;
    if (!r) fail_param(p, "a quantity in queue, avg, modulator", "'" + c.quantity + "'");
    if (!std::isfinite(c.value)) fail_param(p, "a finite number", c.value);
    if (c.op == ">=") r->at_least(c.value, true);
    else if (c.op == ">") r->at_least(c.value, false);
    else if (c.op == "<=") r->at_most(c.value, true);
    else if (c.op == "<") r->at_most(c.value, false);
    else if (c.op == "==") r->at_least(c.value, true), r->at_most(c.value, true);
    else fail_param(p, "an operator in >= <= == > <", "'" + c.op + "'");
  }
  return X;
}

/// The smallest and largest whole n in r, clipped to [0, N] (lo > hi: none).
void level_range(const sim::Range& r, int N, int& lo, int& hi) {
  double a = std::ceil(r.lo), b = std::floor(r.hi);
  if (a == r.lo && !r.lo_closed) a += 1;
  if (b == r.hi && !r.hi_closed) b -= 1;
  lo = static_cast<int>(std::max(a, 0.0));
  hi = static_cast<int>(std::min(b, static_cast<double>(N)));
}

/// One entry of the start law, resolved for the run: n, m, grid index, avg value.
struct StartEntry {
  int n = 0, m = 0, g = 0;
  double avg = 0.0;
};

}  // namespace

PassageSimResult simulate_passage(const Model& model, const std::vector<PassageClause>& clauses,
                                  const PassageStart& start, const std::vector<double>& times,
                                  const PassageOptions& o) {
  model.validate();
  o.validate();
  const sim::Target X = compile_target(clauses);
  const bool continuous = model.time == TimeKind::Continuous;
  const int N = model.buffer, M = model.source.states();
  if (!continuous && o.horizon != std::floor(o.horizon))
    fail_param("horizon", "a whole number of slots", o.horizon);

  // output times
  if (static_cast<int64_t>(times.size()) > EnsembleLimits::max_times)
    fail_param("times", detail::cat("at most ", EnsembleLimits::max_times, " output times"), times.size());
  for (size_t i = 0; i < times.size(); ++i) {
    const std::string p = detail::cat("times[", i, "]");
    const double t = times[i];
    if (!std::isfinite(t)) fail_param(p, "a finite time", std::isnan(t) ? std::string("not a number") : detail::cat(t));
    if (!continuous && t != std::floor(t)) fail_param(p, "a whole number of slots", t);
    if (t < 0.0 || t > o.horizon) fail_param(p, detail::cat("in [0, horizon = ", o.horizon, "]"), t);
    if (i > 0 && !(t > times[i - 1])) fail_param(p, detail::cat("> times[", i - 1, "] = ", times[i - 1], " (strictly increasing)"), t);
  }

  // the start law: checked against the model, resolved to (n, m, grid index, avg)
  const size_t S = start.weight.size();
  if (start.level.size() != S || start.modulator.size() != S || start.avg_index.size() != S || start.avg.size() != S)
    fail_param("p0", "level, modulator, avg_index, avg and weight of equal length",
               detail::cat(start.level.size(), ", ", start.modulator.size(), ", ", start.avg_index.size(), ", ",
                           start.avg.size(), ", ", S));
  if (S > 0) {
    const char* why = nullptr;
    if (sim::class_aware(model)) why = "traffic classes, modified RED or the flow comparison (the packets' classes and flows)";
    else if (model.aqm.stateful()) why = "a stateful AQM (its count, p_max or max_th)";
    else if (model.aqm.filter == FilterKind::Redwm) why = "the REDwM filter (its second variable and histories)";
    else if (model.aqm.ns3()) why = "the ns-3 semantics (count, idle time and the old flag)";
    if (why)
      fail_param("p0", detail::cat("'empty' for a model with ", why, ": the simulator cannot set that part of a start state"),
                 "a start state");
  }
  std::vector<double> points;
  if (o.discretised || std::any_of(start.avg_index.begin(), start.avg_index.end(), [](int g) { return g >= 0; }))
    points = model.grid.resolve(N);
  std::vector<StartEntry> law(S);
  std::vector<double> cdf(S);
  double total = 0.0;
  for (size_t i = 0; i < S; ++i) {
    StartEntry& e = law[i];
    const std::string at = S > 1 ? detail::cat("[", i, "]") : std::string();
    if (start.level[i] < 0 || start.level[i] > N)
      fail_param("p0.level" + at, detail::cat("in [0, ", N, "] (the buffer)"), start.level[i]);
    if (start.modulator[i] < 0 || start.modulator[i] >= M)
      fail_param("p0.modulator" + at, detail::cat("in [0, ", M - 1, "] (the source's modulator states)"), start.modulator[i]);
    if (!(start.weight[i] >= 0.0) || !std::isfinite(start.weight[i]))
      fail_param("p0" + at, "a finite weight >= 0", start.weight[i]);
    e.n = start.level[i], e.m = start.modulator[i];
    if (start.avg_index[i] >= 0) {
      if (start.avg_index[i] >= static_cast<int>(points.size()))
        fail_param("p0.avg_index" + at, detail::cat("in [0, ", points.size() - 1, "] (the model's avg grid)"),
                   start.avg_index[i]);
      e.g = start.avg_index[i];
      e.avg = points[static_cast<size_t>(e.g)];
    } else {
      const double a = start.avg[i];
      if (!std::isfinite(a) || a < 0.0 || a > N) fail_param("p0.avg" + at, detail::cat("in [0, ", N, "]"), a);
      e.avg = a;
      if (o.discretised) {  // a point of the grid the run moves on
        const auto it = std::lower_bound(points.begin(), points.end(), a - 1e-12 * std::max(1.0, a));
        if (it == points.end() || std::abs(*it - a) > 1e-12 * std::max(1.0, a))
          fail_param("p0.avg" + at, detail::cat("a point of the model's avg grid (", points.size(),
                                                " points; discretised runs move on it)"), a);
        e.g = static_cast<int>(it - points.begin());
        e.avg = *it;
      }
    }
    total += start.weight[i];
    cdf[i] = total;
  }
  if (S > 0 && !(total > 0.0)) fail_param("p0", "weights with a positive sum", total);

  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = std::min(o.replications, o.threads > 0 ? o.threads : hw);
  const size_t R = static_cast<size_t>(o.replications), T = times.size(), K = o.rewards.size();
  std::vector<int> reward_index;
  for (const std::string& r : o.rewards)
    reward_index.push_back(static_cast<int>(std::find(passage_reward_names().begin(), passage_reward_names().end(), r) -
                                            passage_reward_names().begin()));

  // memory, before anything is allocated
  // per replication its hitting time, start entry and stream, its rewards until T and at the
  // output times; the start law; per thread the counts at the output times and the FIFO; the
  // discretised grid's table of targets
  const double per_times = static_cast<double>(R) * 8.0 * K * static_cast<double>(T) + threads * 48.0 * T;
  const double per_rep = static_cast<double>(R) * (8.0 + 4.0 + 32.0 + 8.0 * K);
  const double need = per_times + per_rep + static_cast<double>(S) * (8.0 * 3 + 8.0) + threads * 24.0 * (N + 8.0) +
                      (o.discretised ? 16.0 * static_cast<double>(model.grid.size(N)) * std::max(N, 1) : 0.0);
  if (need > o.memory_limit_bytes) {
    const std::string largest = per_times > per_rep ? "times" : "replications";
    throw StateSpaceTooLarge(largest, detail::cat("simulate_passage: needs about ", need / 1e9, " GB (", R,
                                                  " replications, ", T, " output times, ", K,
                                                  " rewards), above memory_limit_bytes = ", o.memory_limit_bytes / 1e9,
                                                  " GB: lower '", largest, "'"));
  }

  const auto t0 = std::chrono::steady_clock::now();
  PassageSimResult res;
  try {
    res.times = times;
    res.rewards = o.rewards;
    res.hit.assign(R, INFINITY);
    res.start.assign(R, -1);
    res.at_hit.assign(K, std::vector<double>(R, 0.0));
    res.at_times.assign(K, std::vector<double>(R * T, 0.0));
    const std::vector<Xoshiro256> streams = replication_streams(o.seed, o.replications);
    std::atomic<bool> stop{false};
    std::atomic<int64_t> steps{0};

    // each replication's start entry: one uniform of its stream when the law has several
    auto draw_start = [&](Xoshiro256& rng) -> int {
      if (S == 0) return -1;
      if (S == 1) return 0;
      const double u = rng.uniform() * total;
      return static_cast<int>(std::min<size_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin(), S - 1));
    };
    auto store = [&](size_t r, const sim::Counts& hit, const std::vector<sim::Counts>& at) {
      for (size_t k = 0; k < K; ++k) {
        const size_t j = static_cast<size_t>(reward_index[k]);
        res.at_hit[k][r] = static_cast<double>(hit[j]);
        for (size_t i = 0; i < T; ++i) res.at_times[k][r * T + i] = static_cast<double>(at[i][j]);
      }
    };

    if (continuous) {
      const sim::ct::Params P(model, o.discretised);
      sim::run_replications(threads, o.replications, stop, [&](int r) -> bool {
        Xoshiro256 rng = streams[static_cast<size_t>(r)];
        const int e = draw_start(rng);
        sim::ct::PassageStart st;
        if (e >= 0) {
          const StartEntry& x = law[static_cast<size_t>(e)];
          st.empty = false, st.n = x.n, st.m = x.m, st.g = x.g, st.avg = x.avg;
        }
        std::vector<sim::Counts> at(T);
        sim::Counts hit{};
        int64_t events = 0;
        const double Th = sim::ct::run_passage(P, X, st, rng, o.horizon, times, at, hit, events, stop);
        if (std::isnan(Th)) return false;
        res.hit[static_cast<size_t>(r)] = Th;
        res.start[static_cast<size_t>(r)] = e;
        store(static_cast<size_t>(r), hit, at);
        steps += events;
        return true;
      });
    } else {
      const int64_t horizon = static_cast<int64_t>(o.horizon);
      const bool table = o.discretised && sim::target_table_bytes(model, static_cast<double>(horizon) * R) > 0.0;
      const sim::SlotParams P(model, o.discretised, table, 2);
      const sim::ChunkFn step = sim::chunk_function(P, false);
      int qlo, qhi;
      level_range(X.queue, N, qlo, qhi);
      const bool levels_only = X.avg.whole() && X.modulator.whole();
      // a stretch can hold a hit only if an end-of-slot level lies in [qlo, qhi]: the cheaper
      // of the range and its complement is summed (the histogram is cumulative)
      const bool inner = qhi - qlo + 1 <= N + 1 - (qhi - qlo + 1);
      auto in_range = [&](const std::vector<int64_t>& h, int64_t slots) -> int64_t {
        if (qlo > qhi) return 0;
        int64_t s = 0;
        if (inner) {
          for (int n = qlo; n <= qhi; ++n) s += h[static_cast<size_t>(n)];
          return s;
        }
        for (int n = 0; n < qlo; ++n) s += h[static_cast<size_t>(n)];
        for (int n = qhi + 1; n <= N; ++n) s += h[static_cast<size_t>(n)];
        return slots - s;
      };
      sim::run_replications(threads, o.replications, stop, [&](int r) -> bool {
        Xoshiro256 rng = streams[static_cast<size_t>(r)];
        const int e = draw_start(rng);
        sim::SimState s(N);
        s.start(P.pi, rng);  // the empty system (the start law's entry replaces it below)
        if (e >= 0) {
          const StartEntry& x = law[static_cast<size_t>(e)];
          s.n = x.n, s.m = x.m, s.g = x.g, s.avg = x.avg;
          std::fill(s.buf.begin(), s.buf.end(), 0);  // the packets' arrival slots (response times are not read)
        }
        std::vector<int64_t> hist(static_cast<size_t>(N) + 1, 0);
        sim::Tally tally;
        tally.hist_n = hist.data();
        int64_t slots_run = 0;  // slots the histogram counted (replays included)
        auto counts = [&tally]() {
          return sim::Counts{tally.arrivals, tally.aqm, tally.marks, tally.overflow, tally.admitted, tally.departures};
        };
        std::vector<sim::Counts> at(T);
        size_t k = 0;
        int64_t t = 0;
        double Th = INFINITY;
        auto holds = [&]() { return X.holds(s.n, s.avg, s.m); };
        if (holds()) Th = 0.0;
        while (std::isinf(Th) && t < horizon) {
          while (k < T && static_cast<int64_t>(times[k]) == t) at[k++] = counts();
          const int64_t last = std::min({horizon, t + 4096, k < T ? static_cast<int64_t>(times[k]) : horizon});
          bool replay = !levels_only;
          if (!replay) {
            const sim::SimState s0 = s;
            const Xoshiro256 rng0 = rng;
            const sim::Tally tally0 = tally;
            const int64_t before = in_range(hist, slots_run);
            step(P, s, rng, t + 1, last, tally);
            slots_run += last - t;
            if (in_range(hist, slots_run) > before) {  // a hit in the stretch: run it again slot by slot
              s = s0, rng = rng0, tally = tally0;
              replay = true;
            }
          }
          if (replay) {
            for (int64_t u = t + 1; u <= last; ++u) {
              step(P, s, rng, u, u, tally);
              ++slots_run;
              if (holds()) {
                Th = static_cast<double>(u);
                t = u;
                break;
              }
            }
          }
          if (std::isinf(Th)) t = last;
          if (stop.load(std::memory_order_relaxed)) return false;
          check_interrupt();
        }
        const sim::Counts hit = counts();
        while (k < T) at[k++] = hit;
        res.hit[static_cast<size_t>(r)] = Th;
        res.start[static_cast<size_t>(r)] = e;
        store(static_cast<size_t>(r), hit, at);
        steps += t;
        return true;
      });
    }
    res.replications = o.replications;
    res.threads = threads;
    res.steps = steps.load();
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
  } catch (const std::bad_alloc&) {
    throw StateSpaceTooLarge("replications", detail::cat("simulate_passage: out of memory (std::bad_alloc) although "
                                                         "the estimate, ", need / 1e9, " GB, was within "
                                                         "memory_limit_bytes = ", o.memory_limit_bytes / 1e9, " GB"));
  }
}

}  // namespace aqm
