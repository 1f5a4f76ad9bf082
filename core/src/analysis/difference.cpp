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

struct Outside {  // an entry into a state outside the chain
  int32_t s;
  int64_t key;
  double v;
};

/// One step's sums over a chunk of rows.
struct StepSums {
  std::vector<double> acc, acc_p, acc_m;
  double excess = 0.0, scale = 0.0, dist_p = 0.0, dist_m = 0.0;
  bool plus_same = true, minus_same = true, sides_same = true, plus_drops = false, minus_drops = false;
  std::vector<Outside> out[2];  // entries into states outside the chain, per side
  void start(size_t J) { acc.assign(J, 0.0), acc_p.assign(J, 0.0), acc_m.assign(J, 0.0); }
  /// A row's products (per adjoint vector: (P+ - P-) y, (P+ - P) y, (P- - P) y) weighted by pi_s.
  void add(double w, const std::vector<double>& rc, const std::vector<double>& rp, const std::vector<double>& rm) {
    for (size_t j = 0; j < acc.size(); ++j) acc[j] += w * rc[j], acc_p[j] += w * rp[j], acc_m[j] += w * rm[j];
  }
};

/// One row generated at both sides and scattered onto the base row's columns, with the row's
/// own smoothness numbers and its products with the adjoint vectors.
struct RowPair {
  Successors succ, extra[2];
  std::vector<double> evp, evm;    // the event weights at both sides
  std::vector<int32_t> ucol;       // the union of the three rows' columns
  std::vector<double> u0, up, um;  // their values (0 where a row lacks the entry)
  std::vector<char> hp, hm;        // whether each side has the base row's entries
  std::vector<double> rc, rp, rm;  // per adjoint vector: (P+ - P-) y, (P+ - P) y, (P- - P) y over the row
  double excess = 0.0, scale = 0.0, dist_p = 0.0, dist_m = 0.0;
  double dist_c = 0.0;   // max |P+ - P-| over the row's entries and event weights
  bool changed = false;  // the row's support changes at a side (entries gained or lost, or outside the chain)
  /// One entry's (or event weight's) dp = side+ - base and dm = base - side- into the row's
  /// smoothness test and distances.
  void note(double dp, double dm) {
    excess = std::max(excess, std::abs(dp - dm) - 0.25 * (std::abs(dp) + std::abs(dm)));
    scale = std::max(scale, std::max(std::abs(dp), std::abs(dm)));
    dist_p = std::max(dist_p, std::abs(dp)), dist_m = std::max(dist_m, std::abs(dm));
    dist_c = std::max(dist_c, std::abs(dp + dm));
  }
};

/// The row of state s (key `key`) at both sides, into r, with its flags folded into st (entries
/// outside the chain set aside there); the products with the adjoints when `w` (pi_s) is not 0.
void pair_row(const Chain& base, const TransitionGenerator& plus, const TransitionGenerator& minus, int32_t s,
              int64_t key, double w, const Adjoints& adjoints, RowPair& r, StepSums& st) {
  constexpr double kEps = std::numeric_limits<double>::epsilon();
  const bool continuous = base.time == TimeKind::Continuous;
  const int64_t product = base.space.product();
  const size_t E = base.event_names.size(), J = adjoints.size();
  const int32_t b = base.rowptr[s], e = base.rowptr[s + 1];
  const size_t len0 = static_cast<size_t>(e - b);
  // The union of the rows' entries: the base row's first (its columns sorted), then the
  // entries only a side has.  Each side's generated row is scattered onto it (a binary
  // search in the base row's columns), duplicates summed; continuous time: self-loops
  // dropped and the diagonal minus the out-rate, as the builder merges a row.
  r.ucol.assign(base.col.begin() + b, base.col.begin() + e);
  r.u0.assign(base.val.begin() + b, base.val.begin() + e);
  r.up.assign(len0, 0.0), r.um.assign(len0, 0.0);
  r.hp.assign(len0, 0), r.hm.assign(len0, 0);
  r.evp.resize(E), r.evm.resize(E);
  r.extra[0].clear(), r.extra[1].clear();
  r.excess = r.scale = r.dist_p = r.dist_m = r.dist_c = 0.0;
  r.changed = false;
  // the position of column t in the base row (its columns sorted), len0 when it has none
  auto position = [&](int32_t t) {
    const auto end = r.ucol.begin() + static_cast<std::ptrdiff_t>(len0), it = std::lower_bound(r.ucol.begin(), end, t);
    return it != end && *it == t ? static_cast<size_t>(it - r.ucol.begin()) : len0;
  };
  size_t nsucc[2] = {0, 0};
  for (int side = 0; side < 2; ++side) {
    std::vector<double>& u = side == 0 ? r.up : r.um;
    std::vector<char>& has = side == 0 ? r.hp : r.hm;
    r.succ.clear();
    (side == 0 ? plus : minus).successors(key, r.succ, E ? (side == 0 ? r.evp : r.evm).data() : nullptr);
    nsucc[side] = r.succ.size();
    double out_rate = 0.0;
    const size_t outside = st.out[side].size();
    for (const auto& [k, v] : r.succ) {
      if (continuous) {
        if (k == key) continue;  // a self-loop is no transition in continuous time
        out_rate += v;
      }
      if (k < 0 || k >= product)
        throw std::logic_error(
            detail::cat("internal error: state ", s, " has a successor key ", k, " outside the descriptor"));
      const int32_t t = base.index_of_key(k);
      if (t < 0) {  // a state outside the chain: set aside
        st.out[side].push_back({s, k, v});
        continue;
      }
      const size_t pos = position(t);
      if (pos < len0)
        u[pos] += v, has[pos] = 1;
      else
        r.extra[side].push_back({t, v});
    }
    if (continuous) {
      const size_t pos = position(s);
      if (pos < len0)
        u[pos] += -out_rate, has[pos] = 1;
      else
        r.extra[side].push_back({s, -out_rate});
    }
    if (st.out[side].size() > outside) (side == 0 ? st.plus_same : st.minus_same) = false, st.sides_same = false, r.changed = true;
  }
  for (size_t i = 0; i < len0; ++i) {
    st.plus_drops |= !r.hp[i], st.minus_drops |= !r.hm[i], st.sides_same &= r.hp[i] == r.hm[i];
    r.changed |= !r.hp[i] || !r.hm[i];
  }
  if (!r.extra[0].empty() || !r.extra[1].empty()) {  // entries the base row lacks (rare): merged by column
    r.changed = true;
    for (int side = 0; side < 2; ++side) {
      auto& x = r.extra[side];
      std::sort(x.begin(), x.end(), [](const auto& a, const auto& c) { return a.first < c.first; });
      size_t n = 0;
      for (size_t i = 0; i < x.size(); ++i)
        if (n > 0 && x[n - 1].first == x[i].first)
          x[n - 1].second += x[i].second;
        else
          x[n++] = x[i];
      x.resize(n);
      if (n) (side == 0 ? st.plus_same : st.minus_same) = false;
    }
    for (size_t ip = 0, im = 0; ip < r.extra[0].size() || im < r.extra[1].size();) {
      const int64_t big = std::numeric_limits<int64_t>::max();
      const int64_t cp = ip < r.extra[0].size() ? r.extra[0][ip].first : big;
      const int64_t cm = im < r.extra[1].size() ? r.extra[1][im].first : big;
      const int64_t c = std::min(cp, cm);
      st.sides_same &= cp == cm;
      r.ucol.push_back(static_cast<int32_t>(c));
      r.u0.push_back(0.0);
      r.up.push_back(cp == c ? r.extra[0][ip++].second : 0.0);
      r.um.push_back(cm == c ? r.extra[1][im++].second : 0.0);
    }
  }
  const size_t len = r.ucol.size();
  // The builder sums an entry's duplicates in its sort's order, the scatter in the
  // generator's: an entry theta does not move may differ from the base by the rounding
  // of that sum, at most (successors) eps |value|.  Such differences count as 0 in the
  // smoothness test and the distances (so a parameter that leaves P alone is smooth).
  const double round = static_cast<double>(std::max(nsucc[0], nsucc[1]) + 1) * kEps;
  for (size_t i = 0; i < len; ++i) {
    const double floor = round * std::max(std::abs(r.u0[i]), std::max(std::abs(r.up[i]), std::abs(r.um[i])));
    double dp = r.up[i] - r.u0[i], dm = r.u0[i] - r.um[i];
    if (std::abs(dp) <= floor) dp = 0.0;
    if (std::abs(dm) <= floor) dm = 0.0;
    r.note(dp, dm);
  }
  for (size_t q = 0; q < E; ++q) {  // the event weights count in the smoothness and distances too
    const double e0 = base.events[q][static_cast<size_t>(s)];
    r.note(r.evp[q] - e0, e0 - r.evm[q]);
  }
  st.excess = std::max(st.excess, r.excess), st.scale = std::max(st.scale, r.scale);
  st.dist_p = std::max(st.dist_p, r.dist_p), st.dist_m = std::max(st.dist_m, r.dist_m);
  r.rc.assign(J, 0.0), r.rp.assign(J, 0.0), r.rm.assign(J, 0.0);
  if (w != 0.0) {
    // entry by entry, its J adjoint values adjacent; each sum still runs over the entries in
    // order (the same sums as one vector at a time)
    double* rc = r.rc.data();
    double* rp = r.rp.data();
    double* rm = r.rm.data();
    for (size_t i = 0; i < len; ++i) {
      const double* yk = adjoints.data + static_cast<size_t>(r.ucol[i]) * J;
      const double c = r.up[i] - r.um[i], p = r.up[i] - r.u0[i], m = r.um[i] - r.u0[i];
      for (size_t j = 0; j < J; ++j) rc[j] += c * yk[j], rp[j] += p * yk[j], rm[j] += m * yk[j];
    }
  }
}

/// The states a side adds, explored from the entries `out` into them with that side's
/// generator (AddedStates above); false when more than `max_added` are added.
bool added_states(const Chain& base, const TransitionGenerator& g, const std::vector<Outside>& out, const double* pi,
                  int64_t max_added, AddedStates& a) {
  if (out.empty()) return true;
  const int32_t n = base.n;
  const bool continuous = base.time == TimeKind::Continuous;
  const size_t E = base.event_names.size();
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
    if (static_cast<int64_t>(order.size()) > budget) return false;
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
  return true;
}

}  // namespace

ChainDifference chain_difference(const Chain& base, const TransitionGenerator& plus, const TransitionGenerator& minus,
                                 double h, const double* pi, const Adjoints& adjoints,
                                 int64_t max_added, const SmallStep* small, const std::vector<char>& events_kept) {
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t n = base.n;
  if (!(h > 0.0 && std::isfinite(h))) fail_param("h", "a finite number > 0", h);
  if (max_added < 0) fail_param("max_added", ">= 0", max_added);
  if (small) {
    if (!small->plus || !small->minus) fail_param("small", "generators at both sides", "a null generator");
    if (!(small->h > 0.0 && small->h < h)) fail_param("h_small", detail::cat("in (0, h = ", h, ")"), small->h);
    if (!(small->kink_tolerance >= 0.0 && std::isfinite(small->kink_tolerance)))
      fail_param("kink_tolerance", "a finite number >= 0", small->kink_tolerance);
  }
  ChainDifference d;
  auto refuse = [&](std::string why) {
    ChainDifference r;
    r.why = std::move(why);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };
  std::vector<const TransitionGenerator*> gens{&plus, &minus};
  if (small) gens.push_back(small->plus), gens.push_back(small->minus);
  for (const TransitionGenerator* g : gens) {
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
  const size_t J = adjoints.size(), E = base.event_names.size();
  // the weights of the events kept (the others are tested for smoothness, not stored)
  if (!events_kept.empty() && events_kept.size() != E)
    fail_param("events_kept", detail::cat("a flag per event of the chain (", E, ")"), static_cast<double>(events_kept.size()));
  const std::vector<char> kept = events_kept.empty() ? std::vector<char>(E, 1) : events_kept;
  d.events_plus.assign(E, {});
  d.events_minus.assign(E, {});
  for (size_t q = 0; q < E; ++q)
    if (kept[q]) d.events_plus[q].resize(static_cast<size_t>(n)), d.events_minus[q].resize(static_cast<size_t>(n));
  std::unique_ptr<ChainDifference> sd;
  if (small) {
    sd = std::make_unique<ChainDifference>();
    d.redone.assign(static_cast<size_t>(n), 0);
  }
  // the effective sides' rows where a row is kept: P +- h_s (P+ - P-) / (2h)
  const double ratio = small ? small->h / h : 0.0;
  // Contiguous chunks of states, each with its own sums; the chunks' sums and entries into
  // added states are combined in chunk order.  16 chunks per thread of the setting (so the
  // sums depend on the setting, not on the machine's load), taken as threads come free: rows
  // differ in cost, and another process may hold a core for a while.
  const int setting = n > 20000 ? std::max(1, num_threads()) : 1;
  const int T = setting > 1 ? 16 * setting : 1;
  const int threads = setting > 1 ? std::max(1, loop_threads()) : 1;
  struct alignas(64) Chunk {  // (a cache line apart: each is written by one thread)
    StepSums at, at_small;  // at h over every row; at h_s over the redone rows (sums over all)
    double kept_scale = 0.0, kept_dist = 0.0, redone_dist_p = 0.0, redone_dist_m = 0.0;
    int64_t redone = 0;
    std::vector<std::vector<std::pair<int32_t, std::pair<double, double>>>> events_small;  // per event: the redone rows' weights
    std::exception_ptr error;
  };
  std::vector<Chunk> chunks(static_cast<size_t>(T));
  std::atomic<bool> stop{false};
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int t = 0; t < T; ++t) {
    Chunk& ch = chunks[static_cast<size_t>(t)];
    const int32_t lo = static_cast<int32_t>(static_cast<int64_t>(n) * t / T);
    const int32_t hi = static_cast<int32_t>(static_cast<int64_t>(n) * (t + 1) / T);
    try {  // nothing may leave the parallel region: errors (allocation included) are kept per chunk
      ch.at.start(J), ch.at_small.start(J);
      if (small) ch.events_small.assign(E, {});
      RowPair r;
      for (int32_t s = lo; s < hi && !stop.load(std::memory_order_relaxed); ++s) {
        if (((s - lo) & 16383) == 0) check_interrupt();
        const int64_t key = base.key_of(s);
        const double w = pi[static_cast<size_t>(s)];
        pair_row(base, plus, minus, s, key, w, adjoints, r, ch.at);
        ch.at.add(w, r.rc, r.rp, r.rm);
        for (size_t q = 0; q < E; ++q)
          if (kept[q]) {
            d.events_plus[q][static_cast<size_t>(s)] = r.evp[q];
            d.events_minus[q][static_cast<size_t>(s)] = r.evm[q];
          }
        if (!small) continue;
        if (r.changed || (r.scale > 0.0 && r.excess > small->kink_tolerance * r.scale)) {  // redone at h_s
          d.redone[static_cast<size_t>(s)] = 1, ++ch.redone;
          ch.redone_dist_p = std::max(ch.redone_dist_p, r.dist_p), ch.redone_dist_m = std::max(ch.redone_dist_m, r.dist_m);
          pair_row(base, *small->plus, *small->minus, s, key, w, adjoints, r, ch.at_small);
          ch.at_small.add(w, r.rc, r.rp, r.rm);
          for (size_t q = 0; q < E; ++q)
            if (kept[q]) ch.events_small[q].push_back({s, {r.evp[q], r.evm[q]}});
        } else {  // kept: (P_s+ - P_s-) = ratio (P+ - P-), P_s+- - P = +- ratio / 2 (P+ - P-)
          ch.kept_scale = std::max(ch.kept_scale, ratio * r.scale);
          ch.kept_dist = std::max(ch.kept_dist, 0.5 * ratio * r.dist_c);
          for (size_t j = 0; j < J; ++j) {
            const double c = w * r.rc[j] * ratio;
            ch.at_small.acc[j] += c, ch.at_small.acc_p[j] += 0.5 * c, ch.at_small.acc_m[j] -= 0.5 * c;
          }
        }
      }
    } catch (...) {
      ch.error = std::current_exception();
      stop.store(true, std::memory_order_relaxed);
    }
  }
  for (const Chunk& ch : chunks)
    if (ch.error) std::rethrow_exception(ch.error);
  // the chunks' sums into a result, in chunk order
  auto combine = [&](ChainDifference& x, StepSums Chunk::*part, double step) {
    x.products.assign(J, 0.0), x.products_plus.assign(J, 0.0), x.products_minus.assign(J, 0.0);
    for (const Chunk& ch : chunks) {
      const StepSums& p = ch.*part;
      for (size_t j = 0; j < J; ++j)
        x.products[j] += p.acc[j], x.products_plus[j] += p.acc_p[j], x.products_minus[j] += p.acc_m[j];
      x.kink_excess = std::max(x.kink_excess, p.excess), x.kink_scale = std::max(x.kink_scale, p.scale);
      x.distance_plus = std::max(x.distance_plus, p.dist_p), x.distance_minus = std::max(x.distance_minus, p.dist_m);
      x.plus_same_support = x.plus_same_support && p.plus_same;
      x.minus_same_support = x.minus_same_support && p.minus_same;
      x.sides_same_support = x.sides_same_support && p.sides_same;
      x.plus_drops = x.plus_drops || p.plus_drops, x.minus_drops = x.minus_drops || p.minus_drops;
    }
    for (double& v : x.products) v /= 2.0 * step;
  };
  combine(d, &Chunk::at, h);
  // the states a side adds: explored from the entries into them with that side's generator
  auto add = [&](ChainDifference& x, StepSums Chunk::*part, const TransitionGenerator& gp,
                 const TransitionGenerator& gm, const char* step) -> bool {
    for (int side = 0; side < 2; ++side) {
      std::vector<Outside> out;
      for (const Chunk& ch : chunks) out.insert(out.end(), (ch.*part).out[side].begin(), (ch.*part).out[side].end());
      if (!added_states(base, side == 0 ? gp : gm, out, pi, max_added, side == 0 ? x.added_plus : x.added_minus)) {
        x.why = detail::cat("more than ", std::min(max_added, static_cast<int64_t>(kMaxStatesMax) - n),
                            " states are added at theta ", side == 0 ? "+" : "-", " ", step);
        return false;
      }
    }
    return true;
  };
  if (!add(d, &Chunk::at, plus, minus, "h")) return refuse(d.why);
  for (const Chunk& ch : chunks) {
    d.rows_redone += ch.redone;
    d.redone_distance_plus = std::max(d.redone_distance_plus, ch.redone_dist_p);
    d.redone_distance_minus = std::max(d.redone_distance_minus, ch.redone_dist_m);
  }
  if (small && d.rows_redone > 0) {  // (every row smooth at h: the result at h is the answer)
    combine(*sd, &Chunk::at_small, small->h);
    for (const Chunk& ch : chunks)
      sd->kink_scale = std::max(sd->kink_scale, ch.kept_scale), sd->kept_distance = std::max(sd->kept_distance, ch.kept_dist);
    // too many states added at the small step: no result there (the one at h stands; a
    // caller that needs the small step takes it in a pass of its own, which refuses the same)
    if (!add(*sd, &Chunk::at_small, *small->plus, *small->minus, "h_small")) sd.reset();
  } else {
    sd.reset();
  }
  if (sd) {
    // the event weights at the small step: the redone rows', the first step's elsewhere
    sd->events_plus = d.events_plus, sd->events_minus = d.events_minus;
    for (const Chunk& ch : chunks)
      for (size_t q = 0; q < E; ++q)
        for (const auto& [s, v] : ch.events_small[q])
          sd->events_plus[q][static_cast<size_t>(s)] = v.first, sd->events_minus[q][static_cast<size_t>(s)] = v.second;
    sd->valid = true;
    sd->seconds = 0.0;
    d.small = std::move(sd);
  }
  d.valid = true;
  d.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return d;
}

}  // namespace aqm
