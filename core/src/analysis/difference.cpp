#include "aqmchain/analysis/difference.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <stdexcept>
#include <unordered_map>

#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"
#include "aqmchain/threads.hpp"

namespace aqm {

namespace {

/// The builder's row of `key` from `gen` (state/builder.cpp): successors sorted by key,
/// duplicates summed; continuous time: self-loops dropped and the diagonal set to minus the
/// out-rate.  `succ` is scratch; the merged row goes to `row`.
void merged_row(const TransitionGenerator& gen, int64_t key, bool continuous, Successors& succ, Successors& row,
                double* events) {
  succ.clear();
  gen.successors(key, succ, events);
  if (continuous) {
    size_t kept = 0;
    double out_rate = 0.0;
    for (const auto& e : succ)
      if (e.first != key) out_rate += e.second, succ[kept++] = e;
    succ.resize(kept);
    succ.push_back({key, -out_rate});
  }
  std::sort(succ.begin(), succ.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  row.clear();
  for (const auto& [k, p] : succ)
    if (!row.empty() && row.back().first == k)
      row.back().second += p;
    else
      row.push_back({k, p});
}

}  // namespace

ChainDifference chain_difference(const Chain& base, const TransitionGenerator& plus, const TransitionGenerator& minus,
                                 double h, const double* pi, const std::vector<const double*>& adjoints,
                                 int64_t max_added) {
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t n = base.n;
  if (!(h > 0.0 && std::isfinite(h))) fail_param("h", "a finite number > 0", h);
  if (max_added < 0) fail_param("max_added", ">= 0", max_added);
  ChainDifference d;
  auto refuse = [&](std::string why) {
    ChainDifference r;
    r.why = std::move(why);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };
  for (const TransitionGenerator* g : {&plus, &minus}) {
    if (!(g->space() == base.space)) return refuse("the state descriptor changes");
    if (g->time() != base.time) return refuse("the time kind changes");
    if (g->event_names() != base.event_names) return refuse("the event names change");
    std::vector<int64_t> init = g->initial_states();
    std::sort(init.begin(), init.end());
    init.erase(std::unique(init.begin(), init.end()), init.end());
    if (base.report.initial_keys.empty())
      return refuse("the chain does not record the initial states it was explored from");
    if (init != base.report.initial_keys) return refuse("the initial states change");
  }
  const bool continuous = base.time == TimeKind::Continuous;
  const size_t J = adjoints.size(), E = base.event_names.size();
  const int64_t product = base.space.product();
  constexpr double kEps = std::numeric_limits<double>::epsilon();
  d.events_plus.assign(E, std::vector<double>(static_cast<size_t>(n)));
  d.events_minus.assign(E, std::vector<double>(static_cast<size_t>(n)));
  // Contiguous chunks of states, each with its own sums; the chunks' sums and entries into
  // added states are combined in chunk order.  16 chunks per thread of the setting (so the
  // sums depend on the setting, not on the machine's load), taken as threads come free: rows
  // differ in cost, and another process may hold a core for a while.
  const int setting = n > 20000 ? std::max(1, num_threads()) : 1;
  const int T = setting > 1 ? 16 * setting : 1;
  const int threads = setting > 1 ? std::max(1, loop_threads()) : 1;
  struct Outside {
    int32_t s;
    int64_t key;
    double v;
  };
  struct alignas(64) Chunk {  // (a cache line apart: each is written by one thread)
    std::vector<double> acc, acc_p, acc_m;
    double excess = 0.0, scale = 0.0, dist_p = 0.0, dist_m = 0.0;
    bool plus_same = true, minus_same = true, sides_same = true, plus_drops = false, minus_drops = false;
    std::vector<Outside> out[2];  // entries into states outside the chain, per side
    std::exception_ptr error;
    /// One entry's (or event weight's) dp = side+ - base and dm = base - side- into the
    /// smoothness test and the distances.
    void note(double dp, double dm) {
      excess = std::max(excess, std::abs(dp - dm) - 0.25 * (std::abs(dp) + std::abs(dm)));
      scale = std::max(scale, std::max(std::abs(dp), std::abs(dm)));
      dist_p = std::max(dist_p, std::abs(dp)), dist_m = std::max(dist_m, std::abs(dm));
    }
  };
  std::vector<Chunk> chunks(static_cast<size_t>(T));
  std::atomic<bool> stop{false};
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int t = 0; t < T; ++t) {
    Chunk& ch = chunks[static_cast<size_t>(t)];
    const int32_t lo = static_cast<int32_t>(static_cast<int64_t>(n) * t / T);
    const int32_t hi = static_cast<int32_t>(static_cast<int64_t>(n) * (t + 1) / T);
    try {  // nothing may leave the parallel region: errors (allocation included) are kept per chunk
      ch.acc.assign(J, 0.0), ch.acc_p.assign(J, 0.0), ch.acc_m.assign(J, 0.0);
      Successors succ, extra[2];
      std::vector<double> evp(E), evm(E);
      std::vector<int32_t> ucol;       // the union of the three rows' columns
      std::vector<double> u0, up, um;  // their values (0 where a row lacks the entry)
      std::vector<char> hp, hm;        // whether each side has the base row's entries
      for (int32_t s = lo; s < hi && !stop.load(std::memory_order_relaxed); ++s) {
        if (((s - lo) & 16383) == 0) check_interrupt();
        const int64_t key = base.key_of(s);
        const int32_t b = base.rowptr[s], e = base.rowptr[s + 1];
        const size_t len0 = static_cast<size_t>(e - b);
        // The union of the rows' entries: the base row's first (its columns sorted), then the
        // entries only a side has.  Each side's generated row is scattered onto it (a binary
        // search in the base row's columns), duplicates summed; continuous time: self-loops
        // dropped and the diagonal minus the out-rate, as the builder merges a row.
        ucol.assign(base.col.begin() + b, base.col.begin() + e);
        u0.assign(base.val.begin() + b, base.val.begin() + e);
        up.assign(len0, 0.0), um.assign(len0, 0.0);
        hp.assign(len0, 0), hm.assign(len0, 0);
        extra[0].clear(), extra[1].clear();
        size_t nsucc[2] = {0, 0};
        for (int side = 0; side < 2; ++side) {
          std::vector<double>& u = side == 0 ? up : um;
          std::vector<char>& has = side == 0 ? hp : hm;
          succ.clear();
          (side == 0 ? plus : minus).successors(key, succ, E ? (side == 0 ? evp : evm).data() : nullptr);
          nsucc[side] = succ.size();
          double out_rate = 0.0;
          for (const auto& [k, v] : succ) {
            if (continuous) {
              if (k == key) continue;  // a self-loop is no transition in continuous time
              out_rate += v;
            }
            if (k < 0 || k >= product)
              throw std::logic_error(detail::cat("internal error: state ", s, " has a successor key ", k,
                                                 " outside the descriptor"));
            const int32_t st = base.index_of_key(k);
            if (st < 0) {  // a state outside the chain: set aside
              ch.out[side].push_back({s, k, v});
              continue;
            }
            const size_t pos = static_cast<size_t>(std::lower_bound(ucol.begin(), ucol.begin() + len0, st) - ucol.begin());
            if (pos < len0 && ucol[pos] == st)
              u[pos] += v, has[pos] = 1;
            else
              extra[side].push_back({st, v});
          }
          if (continuous) {
            const size_t pos = static_cast<size_t>(std::lower_bound(ucol.begin(), ucol.begin() + len0, s) - ucol.begin());
            if (pos < len0 && ucol[pos] == s)
              u[pos] += -out_rate, has[pos] = 1;
            else
              extra[side].push_back({s, -out_rate});
          }
          if (!ch.out[side].empty() && ch.out[side].back().s == s) (side == 0 ? ch.plus_same : ch.minus_same) = false;
        }
        if (!ch.out[0].empty() && ch.out[0].back().s == s) ch.sides_same = false;
        if (!ch.out[1].empty() && ch.out[1].back().s == s) ch.sides_same = false;
        for (size_t i = 0; i < len0; ++i) {
          ch.plus_drops |= !hp[i], ch.minus_drops |= !hm[i], ch.sides_same &= hp[i] == hm[i];
        }
        if (!extra[0].empty() || !extra[1].empty()) {  // entries the base row lacks (rare): merged by column
          for (int side = 0; side < 2; ++side) {
            auto& x = extra[side];
            std::sort(x.begin(), x.end(), [](const auto& a, const auto& c) { return a.first < c.first; });
            size_t w = 0;
            for (size_t i = 0; i < x.size(); ++i)
              if (w > 0 && x[w - 1].first == x[i].first)
                x[w - 1].second += x[i].second;
              else
                x[w++] = x[i];
            x.resize(w);
            if (w) (side == 0 ? ch.plus_same : ch.minus_same) = false;
          }
          for (size_t ip = 0, im = 0; ip < extra[0].size() || im < extra[1].size();) {
            const int64_t big = std::numeric_limits<int64_t>::max();
            const int64_t cp = ip < extra[0].size() ? extra[0][ip].first : big;
            const int64_t cm = im < extra[1].size() ? extra[1][im].first : big;
            const int64_t c = std::min(cp, cm);
            ch.sides_same &= cp == cm;
            ucol.push_back(static_cast<int32_t>(c));
            u0.push_back(0.0);
            up.push_back(cp == c ? extra[0][ip++].second : 0.0);
            um.push_back(cm == c ? extra[1][im++].second : 0.0);
          }
        }
        const size_t len = ucol.size();
        // The builder sums an entry's duplicates in its sort's order, the scatter in the
        // generator's: an entry theta does not move may differ from the base by the rounding
        // of that sum, at most (successors) eps |value|.  Such differences count as 0 in the
        // smoothness test and the distances (so a parameter that leaves P alone is smooth).
        const double round = static_cast<double>(std::max(nsucc[0], nsucc[1]) + 1) * kEps;
        for (size_t i = 0; i < len; ++i) {
          const double floor = round * std::max(std::abs(u0[i]), std::max(std::abs(up[i]), std::abs(um[i])));
          double dp = up[i] - u0[i], dm = u0[i] - um[i];
          if (std::abs(dp) <= floor) dp = 0.0;
          if (std::abs(dm) <= floor) dm = 0.0;
          ch.note(dp, dm);
        }
        const double w = pi[static_cast<size_t>(s)];
        if (w != 0.0)
          for (size_t j = 0; j < J; ++j) {
            const double* y = adjoints[j];
            double r = 0.0, r_p = 0.0, r_m = 0.0;
            for (size_t i = 0; i < len; ++i) {
              const double yk = y[ucol[i]];
              r += (up[i] - um[i]) * yk, r_p += (up[i] - u0[i]) * yk, r_m += (um[i] - u0[i]) * yk;
            }
            ch.acc[j] += w * r, ch.acc_p[j] += w * r_p, ch.acc_m[j] += w * r_m;
          }
        for (size_t q = 0; q < E; ++q) {  // the event weights count in the smoothness and distances too
          const double e0 = base.events[q][static_cast<size_t>(s)];
          ch.note(evp[q] - e0, e0 - evm[q]);
          d.events_plus[q][static_cast<size_t>(s)] = evp[q];
          d.events_minus[q][static_cast<size_t>(s)] = evm[q];
        }
      }
    } catch (...) {
      ch.error = std::current_exception();
      stop.store(true, std::memory_order_relaxed);
    }
  }
  for (const Chunk& ch : chunks)
    if (ch.error) std::rethrow_exception(ch.error);
  d.products.assign(J, 0.0);
  d.products_plus.assign(J, 0.0);
  d.products_minus.assign(J, 0.0);
  for (const Chunk& ch : chunks) {
    for (size_t j = 0; j < J; ++j)
      d.products[j] += ch.acc[j], d.products_plus[j] += ch.acc_p[j], d.products_minus[j] += ch.acc_m[j];
    d.kink_excess = std::max(d.kink_excess, ch.excess), d.kink_scale = std::max(d.kink_scale, ch.scale);
    d.distance_plus = std::max(d.distance_plus, ch.dist_p), d.distance_minus = std::max(d.distance_minus, ch.dist_m);
    d.plus_same_support = d.plus_same_support && ch.plus_same;
    d.minus_same_support = d.minus_same_support && ch.minus_same;
    d.sides_same_support = d.sides_same_support && ch.sides_same;
    d.plus_drops = d.plus_drops || ch.plus_drops, d.minus_drops = d.minus_drops || ch.minus_drops;
  }
  for (double& v : d.products) v /= 2.0 * h;
  // The states a side adds: explored from the entries into them with that side's generator.
  for (int side = 0; side < 2; ++side) {
    std::vector<Outside> out;
    for (const Chunk& ch : chunks) out.insert(out.end(), ch.out[side].begin(), ch.out[side].end());
    if (out.empty()) continue;
    const TransitionGenerator& g = side == 0 ? plus : minus;
    AddedStates& a = side == 0 ? d.added_plus : d.added_minus;
    std::unordered_map<int64_t, int32_t> local;  // added key -> exploration order
    std::vector<int64_t> order;
    auto visit = [&](int64_t k) {
      if (local.emplace(k, static_cast<int32_t>(order.size())).second) order.push_back(k);
    };
    for (const Outside& o : out) visit(o.key);
    Successors succ, row;
    std::vector<std::vector<std::pair<int64_t, double>>> rows;  // by exploration order, keys
    std::vector<std::vector<double>> events;
    const int64_t budget = std::min(max_added, static_cast<int64_t>(kMaxStatesMax) - n);  // n + i stays an int32
    for (size_t i = 0; i < order.size(); ++i) {
      if (static_cast<int64_t>(order.size()) > budget)
        return refuse(detail::cat("more than ", budget, " states are added at theta ", side == 0 ? "+" : "-", " h"));
      if ((i & 4095) == 0) check_interrupt();
      std::vector<double> ev(E);
      merged_row(g, order[i], continuous, succ, row, E ? ev.data() : nullptr);
      for (const auto& [k, v] : row)
        if (base.index_of_key(k) < 0) visit(k);
      rows.emplace_back(row.begin(), row.end());
      events.push_back(std::move(ev));
    }
    // numbered in key order: state n + i is the i-th added key
    std::vector<int32_t> by_key(order.size());
    for (size_t i = 0; i < by_key.size(); ++i) by_key[i] = static_cast<int32_t>(i);
    std::sort(by_key.begin(), by_key.end(), [&](int32_t x, int32_t y) { return order[x] < order[y]; });
    std::vector<int32_t> rank(order.size());
    for (size_t i = 0; i < by_key.size(); ++i) rank[static_cast<size_t>(by_key[i])] = static_cast<int32_t>(i);
    const size_t m = order.size();
    a.keys.resize(m);
    a.labels.assign(static_cast<size_t>(base.space.count()), std::vector<int32_t>(m));
    a.events.assign(E, std::vector<double>(m));
    a.inflow.assign(m, 0.0);
    a.rowptr.assign(m + 1, 0);
    std::vector<int32_t> tuple(static_cast<size_t>(base.space.count()));
    for (size_t i = 0; i < m; ++i) {
      const int32_t x = by_key[i];
      a.keys[i] = order[static_cast<size_t>(x)];
      base.space.decode(a.keys[i], tuple.data());
      for (int c = 0; c < base.space.count(); ++c) a.labels[static_cast<size_t>(c)][i] = tuple[static_cast<size_t>(c)];
      for (size_t q = 0; q < E; ++q) a.events[q][i] = events[static_cast<size_t>(x)][q];
      for (const auto& [k, v] : rows[static_cast<size_t>(x)]) {
        const int32_t st = base.index_of_key(k);
        a.col.push_back(st >= 0 ? st : n + rank[static_cast<size_t>(local.at(k))]);
        a.val.push_back(v);
      }
      a.rowptr[i + 1] = static_cast<int32_t>(a.col.size());
    }
    for (const Outside& o : out) a.inflow[static_cast<size_t>(rank[static_cast<size_t>(local.at(o.key))])] += pi[o.s] * o.v;
  }
  d.valid = true;
  d.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return d;
}

}  // namespace aqm
