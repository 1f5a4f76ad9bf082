// Builder: reachable states from the generator's initial states, CSR assembly
// of P or G, per-state event weights and the communicating-class analysis.
// Nothing here names a state component: the generator and the descriptor do.
#include "aqmchain/state/chain.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <unordered_map>

#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"
#include "aqmchain/operators/operator.hpp"

namespace aqm {

/// The builder's access to a chain's key index (private to Chain).
struct ChainIndex {
  static std::vector<int32_t>& rank(Chain& c) { return c.rank_; }
  static const std::vector<int32_t>& rank(const Chain& c) { return c.rank_; }
  static std::vector<int64_t>& keys(Chain& c) { return c.keys_; }
};

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Number of bottom (closed) strongly connected components and one state in the
/// first found; iterative Tarjan, O(nnz).
struct ClassInfo {
  int closed = 0;
  int32_t closed_state = -1, second_state = -1;
  int64_t closed_size = 0;
};

/// Whether entry k is an edge of the graph over the entries of at least min_entry in absolute
/// value (min_entry <= 0: every stored entry).
bool kept_entry(const Chain& c, int32_t k, double min_entry) {
  return min_entry <= 0.0 || std::abs(c.val[k]) >= min_entry;
}

/// Over the entries of at least min_entry in absolute value (0: every stored entry).
/// One pass over the edges: an edge to a state whose component is complete (visited, off
/// the stack) leaves the current component, an edge to a state on the stack stays inside
/// it (every state on Tarjan's stack reaches the state being explored), so a component is
/// closed when none of its states saw a leaving edge, without a second pass over its edges.
ClassInfo closed_classes(const Chain& c, double min_entry = 0.0) {
  auto edge = [&](int32_t k) { return kept_entry(c, k, min_entry); };
  const int32_t n = c.n;
  constexpr int32_t kDone = std::numeric_limits<int32_t>::max();  // low of a state off the stack
  // per state: its DFS index and low link (kDone once its component is popped), or -1
  std::vector<std::array<int32_t, 2>> il(static_cast<size_t>(n), {-1, 0});
  std::vector<char> leaks(static_cast<size_t>(n), 0);
  std::vector<int32_t> stack, call_v, call_e;
  stack.reserve(1024);
  int32_t counter = 0;
  ClassInfo info;
  for (int32_t root = 0; root < n; ++root) {
    if (il[root][0] >= 0) continue;
    call_v.push_back(root);
    call_e.push_back(c.rowptr[root]);
    il[root] = {counter, counter};
    ++counter;
    stack.push_back(root);
    while (!call_v.empty()) {
      const int32_t v = call_v.back();
      int32_t& e = call_e.back();
      const int32_t end = c.rowptr[v + 1];
      bool descended = false;
      while (e < end) {
        const int32_t k = e++;
        if (!edge(k)) continue;
        const int32_t u = c.col[k];
        const int32_t iu = il[u][0];
        if (iu < 0) {
          il[u] = {counter, counter};
          ++counter;
          stack.push_back(u);
          call_v.push_back(u);
          call_e.push_back(c.rowptr[u]);
          descended = true;
          break;
        }
        if (il[u][1] == kDone)
          leaks[v] = 1;  // u's component is complete: another one
        else
          il[v][1] = std::min(il[v][1], iu);
      }
      if (descended) continue;
      call_v.pop_back();
      call_e.pop_back();
      const int32_t low = il[v][1];
      if (!call_v.empty()) {
        const int32_t parent = call_v.back();
        if (low == il[v][0]) leaks[parent] = 1;  // v's component is popped below: the parent leaves it
        il[parent][1] = std::min(il[parent][1], low);
      }
      if (low != il[v][0]) continue;
      // v roots a component: the stack from v up
      size_t base = stack.size();
      do --base; while (stack[base] != v);
      bool closed = true;
      for (size_t q = base; q < stack.size(); ++q) {
        closed = closed && !leaks[stack[q]];
        il[stack[q]][1] = kDone;
      }
      const int64_t size = static_cast<int64_t>(stack.size() - base);
      stack.resize(base);
      if (closed) {
        if (info.closed == 0) {
          info.closed_state = v;
          info.closed_size = size;
        } else if (info.closed == 1) {
          info.second_state = v;
        }
        ++info.closed;
      }
    }
  }
  return info;
}

/// Whether every state of `sources` reaches state r over the entries of at least min_entry
/// in absolute value (every stored entry when min_entry is 0), shown cheaply when it holds
/// (false: not shown, perhaps false).  Each source is searched depth first, lowest-numbered
/// target first (the states are numbered in key order: low numbers hold low values of the
/// leading components, such as a short queue, and most states have a successor there), until it meets a state already
/// shown to reach r, which shows the whole search path; the searches stop after about
/// `budget` entries in all.
bool all_reach(const Chain& c, int32_t r, double min_entry, const std::vector<int32_t>& sources, int64_t budget) {
  const int32_t n = c.n;
  auto kept = [&](int32_t k) { return kept_entry(c, k, min_entry); };
  std::vector<char> shown(static_cast<size_t>(n), 0);
  std::vector<int32_t> seen(static_cast<size_t>(n), -1);  // the search that last visited a state
  shown[r] = 1;
  std::vector<int32_t> path, next;
  for (size_t si = 0; si < sources.size(); ++si) {
    const int32_t s = sources[si];
    if (shown[s]) continue;
    const int32_t id = static_cast<int32_t>(si);
    path.assign(1, s);
    next.assign(1, c.rowptr[s]);
    seen[s] = id;
    bool met = false;
    while (!path.empty()) {
      const int32_t v = path.back();
      int32_t& e = next.back();
      if (e == c.rowptr[v]) {  // first visit: a kept entry to a shown state ends the search
        for (int32_t k = c.rowptr[v]; k < c.rowptr[v + 1] && !met; ++k)
          met = c.col[k] != v && kept(k) && shown[c.col[k]];
        budget -= c.rowptr[v + 1] - c.rowptr[v] + 1;
        if (met) break;
      }
      bool descended = false;
      while (e < c.rowptr[v + 1]) {
        const int32_t k = e++;
        const int32_t u = c.col[k];
        if (u == v || !kept(k) || seen[u] == id) continue;
        seen[u] = id;
        path.push_back(u);
        next.push_back(c.rowptr[u]);
        descended = true;
        break;
      }
      if (budget < 0) return false;
      if (!descended) path.pop_back(), next.pop_back();
    }
    if (!met) return false;  // s reaches no shown state: the full analysis decides
    for (int32_t v : path) shown[v] = 1;
  }
  return true;
}

/// Whether the chain is one closed class of all its states, shown cheaply (false: not shown):
/// state 0 reaches every state (breadth first) and every state reaches state 0 (all_reach,
/// the states in order: most meet a lower-numbered state at once).
bool irreducible_from_0(const Chain& c) {
  const int32_t n = c.n;
  if (n <= 0) return false;
  std::vector<char> reached(static_cast<size_t>(n), 0);
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(n));
  order.push_back(0);
  reached[0] = 1;
  for (size_t h = 0; h < order.size(); ++h)
    for (int32_t k = c.rowptr[order[h]]; k < c.rowptr[order[h] + 1]; ++k)
      if (!reached[c.col[k]]) reached[c.col[k]] = 1, order.push_back(c.col[k]);
  if (static_cast<int32_t>(order.size()) != n) return false;
  std::iota(order.begin(), order.end(), 0);
  return all_reach(c, 0, 0.0, order, 2 * static_cast<int64_t>(c.col.size()) + n);
}

/// Bytes of a dense key -> state index over the product space.
double dense_index_bytes(int64_t product) { return static_cast<double>(product) * sizeof(int32_t); }

/// A dense index is used while it costs at most this share of the budget.
constexpr double kDenseShare = 0.25;

}  // namespace

ChainEstimate estimate_chain(const TransitionGenerator& g) {
  ChainEstimate e;
  e.product_states = g.space().product();
  e.reachable_bound = std::min(e.product_states, g.reachable_bound());
  e.bound_tight = g.reachable_bound_tight();
  // All in double: the product space may be far beyond what fits (that is what
  // the estimate is for), and int64 products of it would overflow.  The dense index
  // spans the product; the rest is per reachable state.
  const double P = static_cast<double>(e.reachable_bound);
  const double nnz = P * std::max(1, g.max_successors());
  e.max_nnz = nnz >= 9.2e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(nnz);
  const double events = static_cast<double>(g.event_names().size());
  const double labels = static_cast<double>(g.space().count());
  // index (dense over the product, or hashed over the reachable states), keys of
  // the BFS, labels and event weights per state; CSR plus the solver's copy.
  const double per_state = 8 + 4 * labels + 8 * events + 4 * 8;
  const double index = std::min(dense_index_bytes(e.product_states), P * 40.0);
  e.bytes = index + P * per_state + nnz * 2 * (4 + 8);
  return e;
}

const std::vector<int32_t>& Chain::component(const std::string& name) const {
  return labels.at(static_cast<size_t>(space.at(name)));
}

const std::vector<double>& Chain::event(const std::string& name) const {
  for (size_t e = 0; e < event_names.size(); ++e)
    if (event_names[e] == name) return events[e];
  throw std::out_of_range("the chain has no event '" + name + "'");
}

int32_t Chain::hashed_index_of(int64_t key) const {
  const auto it = std::lower_bound(keys_.begin(), keys_.end(), key);
  return it != keys_.end() && *it == key ? static_cast<int32_t>(it - keys_.begin()) : -1;
}

int32_t Chain::index_of(const std::vector<int32_t>& values) const {
  return index_of_key(space.encode_checked(values));
}

void Chain::indices_of(const std::vector<const int64_t*>& columns, int64_t count, int32_t* out) const {
  const int D = space.count();
  if (static_cast<int>(columns.size()) != D)
    throw std::invalid_argument(detail::cat("indices_of: ", columns.size(), " columns for ", D, " components"));
  std::vector<int64_t> stride(static_cast<size_t>(D)), size(static_cast<size_t>(D));
  for (int d = 0; d < D; ++d) stride[static_cast<size_t>(d)] = space.stride(d), size[static_cast<size_t>(d)] = space.component(d).size;
  for (int64_t i = 0; i < count; ++i) {
    int64_t key = 0;
    bool inside = true;
    for (size_t d = 0; d < static_cast<size_t>(D) && inside; ++d) {
      const int64_t v = columns[d][i];
      inside = v >= 0 && v < size[d];
      if (inside) key += stride[d] * v;
    }
    out[i] = inside ? index_of_key(key) : -1;
  }
}

namespace {

/// A chain with its descriptor and budget decisions, before exploration.
Chain skeleton(const TransitionGenerator& gen, const BuildOptions& options) {
  if (!(options.memory_limit_bytes > 0.0))
    fail_param("memory_limit_gb", "> 0", options.memory_limit_bytes / (1024.0 * 1024 * 1024));
  if (options.max_states < 1 || options.max_states > kMaxStatesMax)
    throw OptionError(detail::cat("solver option 'max_states' must be in [1, ", kMaxStatesMax, "], got ",
                                  options.max_states),
                      "max_states");
  const ChainEstimate est = estimate_chain(gen);
  const double limit = options.memory_limit_bytes;
  // The dense product bound is loose for sparse reachable sets (e.g. several
  // filter variables): refuse on it only when the space could not be hashed either,
  // and not when the generator says its bound is loose (drop spacing's count): then the
  // exploration refuses once the reachable states exceed the budget.
  const bool dense = dense_index_bytes(est.product_states) <= kDenseShare * limit &&
                     est.product_states < std::numeric_limits<int32_t>::max();
  if (dense && est.bytes > limit && est.bound_tight)
    throw StateSpaceTooLarge(
        "memory_limit_gb",
        detail::cat("state space too large: up to ", est.reachable_bound, " states and ", est.max_nnz,
                    " transitions need up to ", detail::short_num(est.bytes / 1e9), " GB, above memory_limit_gb = ",
                    detail::short_num(limit / (1024.0 * 1024 * 1024)), " GB (raise memory_limit_gb to at least ",
                    std::ceil(est.bytes / (1024.0 * 1024 * 1024)), ", or coarsen the grid)"));

  Chain c;
  c.time = gen.time();
  c.space = gen.space();
  c.event_names = gen.event_names();
  c.report.product_states = est.product_states;
  c.report.estimated_bytes = est.bytes;
  c.report.hashed_index = !dense;

  return c;
}

/// The exploration found more than max_states states: say how many it found so far, the
/// bound, and what to raise.
[[noreturn]] void over_max_states(const ChainEstimate& est, const BuildOptions& o, size_t found, size_t explored) {
  const bool done = found == explored;
  throw StateSpaceTooLarge(
      "max_states",
      detail::cat("state space too large: ", done ? "" : "more than ", found, " reachable states", done ? "" : " (",
                  done ? "" : detail::cat(explored, " explored so far"), done ? "" : ")",
                  ", above solver option 'max_states' = ", o.max_states, " (the model's bound is ",
                  est.reachable_bound, " states): raise solver option 'max_states' to at least ",
                  done ? static_cast<int64_t>(found) : est.reachable_bound,
                  " (the memory too, if needed), or make the model smaller (a coarser grid, a smaller buffer)"));
}

/// Explore the keys reachable from the initial states of every generator in
/// `explorers` under any of them (one generator for a plain chain, one per phase
/// for a scenario); number them in key order into c (index) and `queue` (keys).
/// Returns, per generator of `explorers`, an upper bound on its matrix's transitions.
std::vector<int64_t> explore(Chain& c, const TransitionGenerator& gen, const std::vector<const TransitionGenerator*>& explorers,
                const BuildOptions& options, std::vector<int64_t>& queue, std::unordered_map<int64_t, int32_t>& hashed) {
  const ChainEstimate est = estimate_chain(gen);
  const double limit = options.memory_limit_bytes;
  const bool dense = !c.report.hashed_index;
  const StateSpace& space = gen.space();
  const size_t n_events = gen.event_names().size();
  // --- 1. reachability (BFS over keys).
  auto t0 = Clock::now();
  queue.clear();
  for (const TransitionGenerator* g : explorers) {
    const auto init = g->initial_states();
    queue.insert(queue.end(), init.begin(), init.end());
  }
  // bytes per state: key, labels, events and index, plus its transitions (column and value,
  // twice: the matrix and a transposed copy); the transitions per state are bounded by
  // max_successors until 4096 states have been explored, then measured (emitted so far)
  const double fixed = 8.0 + 4.0 * space.count() + 8.0 * n_events + 40.0;
  auto max_states = [&](size_t explored, int64_t emitted_total) {
    const double per_state =
        fixed + (explored >= 4096 ? static_cast<double>(emitted_total) / static_cast<double>(explored)
                                  : static_cast<double>(gen.max_successors()) * static_cast<double>(explorers.size())) *
                    2.0 * (4 + 8);
    // clamped in double: limit / per_state may exceed int64's range (a huge memory_limit_gb)
    return static_cast<int64_t>(std::min(static_cast<double>(std::numeric_limits<int32_t>::max() - 1), limit / per_state));
  };
  auto mark = [&](int64_t key) -> bool {  // true when the key is new
    if (dense) {
      if (ChainIndex::rank(c)[static_cast<size_t>(key)] != -1) return false;
      ChainIndex::rank(c)[static_cast<size_t>(key)] = -2;
      return true;
    }
    return hashed.emplace(key, -2).second;
  };
  if (dense) ChainIndex::rank(c).assign(static_cast<size_t>(est.product_states), -1);
  {
    std::vector<int64_t> init;
    init.swap(queue);
    for (int64_t k : init)
      if (k < 0 || k >= est.product_states) throw std::logic_error("internal error: initial state outside the space");
      else if (mark(k)) queue.push_back(k);
  }
  Successors succ;
  // transitions emitted by each generator, duplicates included: upper bounds on the nnz
  std::vector<int64_t> emitted(explorers.size(), 0);
  for (size_t head = 0; head < queue.size(); ++head) {
    for (size_t gi = 0; gi < explorers.size(); ++gi) {
      succ.clear();
      explorers[gi]->successors(queue[head], succ, nullptr);
      emitted[gi] += static_cast<int64_t>(succ.size()) + (c.time == TimeKind::Continuous);
      for (const auto& [k, p] : succ) {
        if (k < 0 || k >= est.product_states)
          throw std::logic_error("internal error: a transition leaves the state space");
        if (mark(k)) queue.push_back(k);
      }
    }
    if ((head & 65535) == 0) check_interrupt();
    if ((head & 4095) != 0) continue;
    int64_t emitted_total = 0;
    for (int64_t e : emitted) emitted_total += e;
    const int64_t fit = max_states(head + 1, emitted_total);
    if (static_cast<int64_t>(queue.size()) > options.max_states) over_max_states(est, options, queue.size(), head + 1);
    if (static_cast<int64_t>(queue.size()) > fit)
      throw StateSpaceTooLarge("memory_limit_gb",
                               detail::cat("state space too large: more than ", fit,
                                           " reachable states do not fit memory_limit_gb = ",
                                           detail::short_num(limit / (1024.0 * 1024 * 1024)),
                                           " GB (raise memory_limit_gb: the model's bound of ", est.reachable_bound,
                                           " states needs up to ", std::ceil(est.bytes / (1024.0 * 1024 * 1024)),
                                           "; or coarsen the grid)"));
  }
  if (static_cast<int64_t>(queue.size()) > options.max_states) over_max_states(est, options, queue.size(), queue.size());
  // Number the states in key order (a dense index is scanned, which is cheaper
  // than sorting the keys; a hashed one is sorted).
  const int64_t states = static_cast<int64_t>(queue.size());
  if (dense) {
    int64_t s = 0;
    for (int64_t k = 0; k < est.product_states; ++k)
      if (ChainIndex::rank(c)[static_cast<size_t>(k)] == -2) {
        queue[s] = k;
        ChainIndex::rank(c)[static_cast<size_t>(k)] = static_cast<int32_t>(s++);
      }
  } else {
    std::sort(queue.begin(), queue.end());
    for (int32_t s = 0; s < states; ++s) hashed[queue[s]] = s;
  }
  c.n = static_cast<int32_t>(states);
  c.report.seconds_explore = since(t0);
  return emitted;
}

/// CSR of `gen` over the states numbered in c (keys in `queue`, in key order).
template <class Rank>
void assemble(Chain& c, const TransitionGenerator& gen, const std::vector<int64_t>& queue, int64_t emitted, Rank rank) {
  const StateSpace& space = gen.space();
  const size_t n_events = gen.event_names().size();
  const int64_t states = c.n;
  Successors succ;
  auto t0 = Clock::now();

  // CSR assembly in key order.
  const bool continuous = c.time == TimeKind::Continuous;
  c.rowptr.assign(static_cast<size_t>(states) + 1, 0);
  c.col.reserve(static_cast<size_t>(emitted));  // no regrowth while assembling
  c.val.reserve(static_cast<size_t>(emitted));
  c.labels.assign(space.count(), std::vector<int32_t>(static_cast<size_t>(states)));
  c.events.assign(n_events, std::vector<double>(static_cast<size_t>(states)));
  std::vector<double> ev(n_events);
  std::vector<int32_t> tuple(space.count());
  double max_err = 0.0;
  for (int32_t s = 0; s < c.n; ++s) {
    const int64_t key = queue[s];
    succ.clear();
    gen.successors(key, succ, ev.data());
    double out_rate = 0.0;
    if (continuous) {
      size_t kept = 0;
      for (const auto& e : succ)
        if (!(e.second >= 0.0))
          throw std::logic_error(detail::cat("internal error: state ", s, " has a negative rate ", e.second));
        else if (e.first != key) {  // a self-loop is no transition in continuous time
          out_rate += e.second;
          succ[kept++] = e;
        }
      succ.resize(kept);
      succ.push_back({key, -out_rate});
    }
    // States are numbered in key order, so sorting by key sorts by column.
    std::sort(succ.begin(), succ.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    double sum = 0.0;
    int64_t last = -1;
    for (const auto& [k, p] : succ) {
      if (!std::isfinite(p) || (p < 0.0 && !(continuous && k == key)))
        throw std::logic_error(detail::cat("internal error: state ", s, " has a transition weight ", p));
      if (k == last) {
        c.val.back() += p;
      } else {
        c.col.push_back(rank(k));
        c.val.push_back(p);
        last = k;
      }
      sum += p;
    }
    if (c.col.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      throw StateSpaceTooLarge("memory_limit_gb", "more than 2^31 - 1 transitions: too large for 32-bit CSR");
    c.rowptr[s + 1] = static_cast<int32_t>(c.col.size());
    const double err = continuous ? (out_rate > 0 ? std::abs(sum) / out_rate : 0.0) : std::abs(sum - 1.0);
    max_err = std::max(max_err, err);
    space.decode(key, tuple.data());
    for (int k = 0; k < space.count(); ++k) c.labels[k][s] = tuple[k];
    for (size_t e = 0; e < n_events; ++e) c.events[e][s] = ev[e];
    if ((s & 65535) == 0) check_interrupt();
  }
  if (c.col.capacity() > c.col.size() + c.col.size() / 8) {  // merged duplicates left much unused: copy
    c.col.shrink_to_fit();
    c.val.shrink_to_fit();
  }
  c.report.max_row_error = max_err;
  if (max_err > 1e-14)
    throw std::logic_error(detail::cat("internal error: a row of ", continuous ? "G sums to 0 +- " : "P sums to 1 +- ",
                                       max_err, " (> 1e-14)"));
  c.report.seconds_assemble = since(t0);
}

}  // namespace

namespace {
/// A successor outside the previous chain's states (build_on_states falls back).
struct NotSameStates {};

/// The chain of `gen` on the states of `prev` (dense index only): true when it starts from
/// prev's initial states and its matrix has prev's support (so the exploration would have
/// found exactly prev's states), the class analysis then copied; false (c unusable) otherwise.
bool build_on_states(Chain& c, const TransitionGenerator& gen, const Chain& prev, const BuildOptions& options) {
  if (c.report.hashed_index || prev.report.hashed_index || !(c.space == prev.space) || c.time != prev.time ||
      static_cast<int64_t>(ChainIndex::rank(prev).size()) != c.report.product_states || prev.n <= 0 ||
      prev.recurrent_state < 0 || prev.n > options.max_states)
    return false;
  // the same initial states over the same support (checked below) reach the same set
  std::vector<int64_t> init = gen.initial_states();
  std::sort(init.begin(), init.end());
  init.erase(std::unique(init.begin(), init.end()), init.end());
  if (prev.report.initial_keys.empty() || init != prev.report.initial_keys) return false;
  c.report.initial_keys = std::move(init);
  auto t0 = Clock::now();
  ChainIndex::rank(c) = ChainIndex::rank(prev);
  const std::vector<int32_t>& rank = ChainIndex::rank(c);
  std::vector<int64_t> queue(static_cast<size_t>(prev.n));
  for (int64_t k = 0; k < static_cast<int64_t>(rank.size()); ++k)
    if (rank[static_cast<size_t>(k)] >= 0) queue[static_cast<size_t>(rank[static_cast<size_t>(k)])] = k;
  c.n = prev.n;
  c.report.seconds_explore = since(t0);
  // each entry's column checked against prev's as it is assembled: a chain whose states or
  // support differ is given up at its first difference, not after a whole assembly
  size_t at = 0;
  try {
    assemble(c, gen, queue, static_cast<int64_t>(prev.col.size()) + prev.n, [&rank, &prev, &at](int64_t key) {
      const int32_t s = rank[static_cast<size_t>(key)];
      if (s < 0 || at >= prev.col.size() || prev.col[at] != s) throw NotSameStates{};
      ++at;
      return s;
    });
  } catch (const NotSameStates&) {
    return false;
  }
  if (c.rowptr != prev.rowptr || c.col != prev.col) return false;
  for (size_t e = 0; e < c.val.size(); ++e)
    if ((c.val[e] != 0.0) != (prev.val[e] != 0.0)) return false;
  c.report.closed_classes = prev.report.closed_classes;
  c.report.transient_states = prev.report.transient_states;
  c.recurrent_state = prev.recurrent_state;
  c.report.seconds_classes = 0.0;
  c.report.states_reused = true;
  return true;
}
}  // namespace

Chain build_chain(const TransitionGenerator& gen, const BuildOptions& options) {
  if (options.same_states_as) {
    Chain c = skeleton(gen, options);
    if (build_on_states(c, gen, *options.same_states_as, options)) return c;
  }
  Chain c = skeleton(gen, options);
  c.report.initial_keys = gen.initial_states();
  std::sort(c.report.initial_keys.begin(), c.report.initial_keys.end());
  c.report.initial_keys.erase(std::unique(c.report.initial_keys.begin(), c.report.initial_keys.end()),
                              c.report.initial_keys.end());
  std::vector<int64_t> queue;
  std::unordered_map<int64_t, int32_t> hashed;
  const int64_t emitted = explore(c, gen, {&gen}, options, queue, hashed)[0];
  if (c.report.hashed_index)
    assemble(c, gen, queue, emitted, [&](int64_t key) { return hashed.find(key)->second; });
  else
    assemble(c, gen, queue, emitted, [&](int64_t key) { return ChainIndex::rank(c)[static_cast<size_t>(key)]; });
  if (c.report.hashed_index) ChainIndex::keys(c).swap(queue);
  const auto t0 = Clock::now();
  classify(c);
  c.report.seconds_classes = since(t0);
  return c;
}

ReachableCount count_reachable(const TransitionGenerator& gen, const BuildOptions& options) {
  Chain c = skeleton(gen, options);
  std::vector<int64_t> queue;
  std::unordered_map<int64_t, int32_t> hashed;
  ReachableCount out;
  out.transitions_bound = explore(c, gen, {&gen}, options, queue, hashed)[0];
  out.states = c.n;
  out.seconds = c.report.seconds_explore;
  out.hashed_index = c.report.hashed_index;
  const StateSpace& space = gen.space();
  out.component_counts.resize(static_cast<size_t>(space.count()));
  for (int k = 0; k < space.count(); ++k)
    out.component_counts[k].assign(static_cast<size_t>(space.component(k).size), 0);
  std::vector<int32_t> tuple(space.count());
  for (int32_t s = 0; s < c.n; ++s) {
    space.decode(queue[s], tuple.data());
    for (int k = 0; k < space.count(); ++k) ++out.component_counts[k][tuple[k]];
    if ((s & 65535) == 0) check_interrupt();
  }
  return out;
}

std::vector<Chain> build_chains(const std::vector<const TransitionGenerator*>& gens, const BuildOptions& options) {
  if (gens.empty()) throw std::invalid_argument("build_chains needs at least one generator");
  for (size_t i = 1; i < gens.size(); ++i)
    if (!(gens[i]->space() == gens[0]->space()) || gens[i]->time() != gens[0]->time())
      throw std::invalid_argument(detail::cat("generator ", i, " has another state space or time kind than generator 0"));
  const std::vector<const TransitionGenerator*>& explorers = gens;
  std::vector<Chain> chains;
  std::vector<int64_t> queue;
  std::unordered_map<int64_t, int32_t> hashed;
  Chain first = skeleton(*gens[0], options);
  const std::vector<int64_t> emitted_by = explore(first, *gens[0], explorers, options, queue, hashed);
  for (size_t i = 0; i < gens.size(); ++i) {
    Chain c;
    if (i == 0) {
      c = std::move(first);
    } else {
      c = skeleton(*gens[i], options);
      c.n = chains[0].n;
      ChainIndex::rank(c) = ChainIndex::rank(chains[0]);
      c.report.seconds_explore = 0.0;
    }
    const int64_t emitted = emitted_by[i];
    if (c.report.hashed_index)
      assemble(c, *gens[i], queue, emitted, [&](int64_t key) { return hashed.find(key)->second; });
    else
      assemble(c, *gens[i], queue, emitted, [&](int64_t key) { return ChainIndex::rank(c)[static_cast<size_t>(key)]; });
    if (c.report.hashed_index) ChainIndex::keys(c) = queue;
    const auto t0 = Clock::now();
    classify(c);
    c.report.seconds_classes = since(t0);
    chains.push_back(std::move(c));
  }
  return chains;
}

void classify(Chain& c) {
  // the usual case, an irreducible chain, without the class analysis (the same answer: its
  // only class is found from state 0)
  if (irreducible_from_0(c)) {
    c.report.closed_classes = 1;
    c.report.transient_states = 0;
    c.recurrent_state = 0;
    return;
  }
  const ClassInfo ci = closed_classes(c);
  c.report.closed_classes = ci.closed;
  c.report.transient_states = c.n - ci.closed_size;
  c.recurrent_state = ci.closed == 1 ? ci.closed_state : -1;
}

ClosedClasses closed_classes_above(const Chain& c, double min_entry) {
  // the usual case, a few rows with tiny entries in an irreducible chain: shown without a
  // class analysis when those rows still reach the recurrent state (searches of at most nnz
  // entries in all, then the analysis of the whole graph)
  if (c.report.closed_classes == 1 && c.recurrent_state >= 0 && c.recurrent_state < c.n && min_entry > 0.0) {
    // every state reaches the recurrent state over all entries, so a path that uses a
    // left-out entry first leaves at a row holding one: it is enough that those rows reach it
    std::vector<int32_t> rows;
    for (int32_t i = 0; i < c.n; ++i)
      for (int32_t k = c.rowptr[i]; k < c.rowptr[i + 1]; ++k)
        if (c.col[k] != i && !kept_entry(c, k, min_entry)) {
          rows.push_back(i);
          break;
        }
    if (all_reach(c, c.recurrent_state, min_entry, rows, static_cast<int64_t>(c.col.size())))
      return {1, c.recurrent_state, -1};
  }
  const ClassInfo ci = closed_classes(c, min_entry);
  return {ci.closed, ci.closed_state, ci.second_state};
}

void left_multiply(const Chain& c, const double* x, double* y) {
  CsrOperator(c.n, c.rowptr.data(), c.col.data(), c.val.data()).apply(x, y);
}

double exit_rate(const Chain& c) {
  const bool discrete = c.time == TimeKind::Discrete;
  double rate = 0.0;
  for (int32_t i = 0; i < c.n; ++i) {
    double out = discrete ? 1.0 : 0.0;  // no diagonal entry: P_ii = 0, resp. G_ii = 0
    for (int32_t k = c.rowptr[i]; k < c.rowptr[i + 1]; ++k)
      if (c.col[k] == i) out = discrete ? 1.0 - c.val[k] : -c.val[k];
    rate = std::max(rate, out);
  }
  return rate;
}

double stationary_residual(const Chain& c, const std::vector<double>& pi) {
  if (static_cast<int32_t>(pi.size()) != c.n)
    throw std::invalid_argument(detail::cat("pi has ", pi.size(), " entries, the chain ", c.n, " states"));
  std::vector<double> y(c.n);
  left_multiply(c, pi.data(), y.data());
  long double r = 0.0L;
  if (c.time == TimeKind::Discrete) {
    for (int32_t i = 0; i < c.n; ++i) r += std::abs(y[i] - pi[i]);
    return static_cast<double>(r);
  }
  const double lambda = exit_rate(c);
  for (int32_t i = 0; i < c.n; ++i) r += std::abs(y[i]);
  return lambda > 0 ? static_cast<double>(r) / lambda : static_cast<double>(r);
}

}  // namespace aqm
