// Builder: reachable states from the empty system, CSR assembly of P, per-state
// event probabilities and the communicating-class analysis (Tarjan).
#include "aqmchain/state/chain.hpp"

#include "model/slot_kernel.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace aqm {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Number of bottom (closed) strongly connected components and one state in the
/// first found; iterative Tarjan, O(nnz).
struct ClassInfo {
  int closed = 0;
  int32_t closed_state = -1;
  int64_t closed_size = 0;
};

ClassInfo closed_classes(const Chain& c) {
  const int32_t n = c.n;
  std::vector<int32_t> index(n, -1), low(n, 0), comp(n, -1), stack, call_v, call_e;
  std::vector<char> on_stack(n, 0);
  stack.reserve(1024);
  int32_t counter = 0, ncomp = 0;
  ClassInfo info;
  for (int32_t root = 0; root < n; ++root) {
    if (index[root] >= 0) continue;
    call_v.push_back(root);
    call_e.push_back(c.rowptr[root]);
    index[root] = low[root] = counter++;
    stack.push_back(root);
    on_stack[root] = 1;
    while (!call_v.empty()) {
      const int32_t v = call_v.back();
      int32_t& e = call_e.back();
      if (e < c.rowptr[v + 1]) {
        const int32_t u = c.col[e++];
        if (index[u] < 0) {
          index[u] = low[u] = counter++;
          stack.push_back(u);
          on_stack[u] = 1;
          call_v.push_back(u);
          call_e.push_back(c.rowptr[u]);
        } else if (on_stack[u]) {
          low[v] = std::min(low[v], index[u]);
        }
        continue;
      }
      call_v.pop_back();
      call_e.pop_back();
      if (!call_v.empty()) low[call_v.back()] = std::min(low[call_v.back()], low[v]);
      if (low[v] != index[v]) continue;
      // v roots a component: the stack from v up.  Label it, check whether any edge
      // leaves it, then pop it (no per-component allocation).
      size_t base = stack.size();
      do --base; while (stack[base] != v);
      for (size_t q = base; q < stack.size(); ++q) {
        comp[stack[q]] = ncomp;
        on_stack[stack[q]] = 0;
      }
      bool closed = true;
      for (size_t q = base; q < stack.size() && closed; ++q) {
        const int32_t s = stack[q];
        for (int32_t k = c.rowptr[s]; k < c.rowptr[s + 1] && closed; ++k) closed = comp[c.col[k]] == ncomp;
      }
      const int64_t size = static_cast<int64_t>(stack.size() - base);
      stack.resize(base);
      if (closed) {
        if (info.closed == 0) {
          info.closed_state = v;
          info.closed_size = size;
        }
        ++info.closed;
      }
      ++ncomp;
    }
  }
  return info;
}

}  // namespace

ChainEstimate estimate_chain(const Model& model) {
  model.validate();
  ChainEstimate e;
  const int64_t G = static_cast<int64_t>(model.grid.resolve(model.buffer).size());
  const int64_t M = model.source.states();
  int64_t mod_nnz = 0;
  for (const auto& row : model.source.matrix)
    for (double v : row) mod_nnz += v > 0.0;
  e.product_states = (static_cast<int64_t>(model.buffer) + 1) * G * M;
  // per row: <= 2 grid targets (+1 without update) x modulator row x 3 levels
  const int64_t per_row = 3 * (model.aqm.update == UpdateRule::PerArrival ? 3 : 2) * ((mod_nnz + M - 1) / M + 1);
  e.max_nnz = e.product_states * std::min<int64_t>(per_row, 3 * 3 * M);
  // product maps (rank + visited), CSR, labels and 6 event vectors per state,
  // BFS queue; plus the solver's copy of the matrix (another CSR) and vectors.
  e.bytes = static_cast<double>(e.product_states) * (4 + 1 + 8 + 3 * 4 + 6 * 8 + 4 * 8) +
            static_cast<double>(e.max_nnz) * 2 * (4 + 8);
  return e;
}

int32_t Chain::index_of(int32_t l, int32_t g, int32_t m) const {
  const int64_t G = static_cast<int64_t>(grid.size()), M = model.source.states();
  if (l < 0 || l > model.buffer || g < 0 || g >= G || m < 0 || m >= M) return -1;
  return rank_[(static_cast<int64_t>(l) * G + g) * M + m];
}

Chain build_chain(const Model& model, const BuildOptions& options) {
  const ChainEstimate est = estimate_chain(model);  // validates
  if (!(options.memory_limit_bytes > 0.0))
    throw ModelError("memory_limit", detail::cat("parameter 'memory_limit' must be > 0 bytes, got ", options.memory_limit_bytes));
  if (est.bytes > options.memory_limit_bytes)
    throw StateSpaceTooLarge(
        "memory_limit",
        detail::cat("state space too large: up to ", est.product_states, " states and ", est.max_nnz,
                    " transitions need up to ", est.bytes / 1e9, " GB, above the memory limit of ",
                    options.memory_limit_bytes / 1e9, " GB (raise 'memory_limit' or coarsen the grid)"));
  if (est.product_states >= std::numeric_limits<int32_t>::max() ||
      est.max_nnz >= static_cast<int64_t>(std::numeric_limits<int32_t>::max()) * 4)
    throw StateSpaceTooLarge("grid.k", detail::cat("state space too large for 32-bit indices: ", est.product_states,
                                                   " product states"));

  const detail::SlotKernel K(model);
  Chain c;
  c.model = model;
  c.grid = K.grid.points();
  c.report.product_states = est.product_states;
  c.report.estimated_bytes = est.bytes;
  if (model.grid.mapping == Mapping::Nearest)
    c.report.warnings.push_back(detail::cat(
        "grid.mapping = \"nearest\" freezes avg whenever w |q - avg| < h/2 (here |q - avg| < ",
        0.5 * (c.grid[1] - c.grid[0]) / model.aqm.w, " packets on the first cell); prefer \"split\""));

  // --- 1. reachability from the empty system (BFS over product ids).
  auto t0 = Clock::now();
  const int64_t P = est.product_states;
  c.rank_.assign(static_cast<size_t>(P), -1);  // -2 = seen (before ranking)
  std::vector<int64_t> queue;
  int64_t emitted = 0;  // transitions emitted, duplicates included: an upper bound on nnz
  for (int m = 0; m < K.M; ++m) {
    queue.push_back(K.id(0, 0, m));
    c.rank_[queue.back()] = -2;
  }
  for (size_t head = 0; head < queue.size(); ++head) {
    const int64_t id = queue[head];
    const int m = static_cast<int>(id % K.M), g = static_cast<int>((id / K.M) % K.G),
              l = static_cast<int>(id / (static_cast<int64_t>(K.M) * K.G));
    K.successors(l, g, m,
                 [&](int l2, int g2, int m2, double) {
                   ++emitted;
                   const int64_t id2 = K.id(l2, g2, m2);
                   if (c.rank_[id2] == -1) {
                     c.rank_[id2] = -2;
                     queue.push_back(id2);
                   }
                 },
                 nullptr);
  }
  const int64_t states = static_cast<int64_t>(queue.size());
  std::vector<int64_t>().swap(queue);
  int32_t next = 0;
  for (int64_t id = 0; id < P; ++id)
    if (c.rank_[id] == -2) c.rank_[id] = next++;
  c.n = next;
  c.report.seconds_explore = since(t0);

  // --- 2. CSR assembly in (n, avg, modulator) order.
  t0 = Clock::now();
  c.rowptr.assign(static_cast<size_t>(states) + 1, 0);
  c.col.reserve(static_cast<size_t>(emitted));  // no regrowth while assembling
  c.val.reserve(static_cast<size_t>(emitted));
  for (auto* v : {&c.level, &c.avg_index, &c.modulator}) v->resize(states);
  for (auto* v : {&c.p_arrival, &c.p_aqm_drop, &c.p_mark, &c.p_overflow, &c.p_admit, &c.p_depart}) v->resize(states);
  std::vector<std::pair<int32_t, double>> row;
  int32_t s = 0;
  double max_err = 0.0;
  for (int64_t id = 0; id < P; ++id) {
    if (c.rank_[id] < 0) continue;
    const int m = static_cast<int>(id % K.M), g = static_cast<int>((id / K.M) % K.G),
              l = static_cast<int>(id / (static_cast<int64_t>(K.M) * K.G));
    row.clear();
    detail::SlotKernel::Events ev;
    K.successors(l, g, m, [&](int l2, int g2, int m2, double p) { row.push_back({c.rank_[K.id(l2, g2, m2)], p}); },
                 &ev);
    std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    double sum = 0.0;
    for (size_t k = 0; k < row.size(); ++k) {
      if (!c.col.empty() && static_cast<int64_t>(c.col.size()) > c.rowptr[s] && c.col.back() == row[k].first)
        c.val.back() += row[k].second;
      else {
        c.col.push_back(row[k].first);
        c.val.push_back(row[k].second);
      }
      sum += row[k].second;
    }
    if (c.col.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      throw StateSpaceTooLarge("grid.k", "more than 2^31 - 1 transitions: too large for 32-bit CSR");
    c.rowptr[s + 1] = static_cast<int32_t>(c.col.size());
    max_err = std::max(max_err, std::abs(sum - 1.0));
    c.level[s] = l;
    c.avg_index[s] = g;
    c.modulator[s] = m;
    c.p_arrival[s] = ev.arrival;
    c.p_aqm_drop[s] = ev.aqm;
    c.p_mark[s] = ev.mark;
    c.p_overflow[s] = ev.overflow;
    c.p_admit[s] = ev.admit;
    c.p_depart[s] = ev.depart;
    ++s;
  }
  if (c.col.capacity() > c.col.size() + c.col.size() / 8) {  // merged duplicates left much unused: copy
    c.col.shrink_to_fit();
    c.val.shrink_to_fit();
  }
  c.report.max_row_error = max_err;
  if (max_err > 1e-14)
    throw std::logic_error(detail::cat("internal error: a row of P sums to 1 +- ", max_err, " (> 1e-14)"));
  c.report.seconds_assemble = since(t0);

  // --- 3. communicating classes.
  t0 = Clock::now();
  classify(c);
  c.report.seconds_classes = since(t0);
  return c;
}

void classify(Chain& c) {
  const ClassInfo ci = closed_classes(c);
  c.report.closed_classes = ci.closed;
  c.report.transient_states = c.n - ci.closed_size;
  c.recurrent_state = ci.closed == 1 ? ci.closed_state : -1;
}

void left_multiply(const Chain& c, const double* x, double* y) {
  std::fill(y, y + c.n, 0.0);
  for (int32_t i = 0; i < c.n; ++i) {
    const double xi = x[i];
    if (xi == 0.0) continue;
    for (int32_t k = c.rowptr[i]; k < c.rowptr[i + 1]; ++k) y[c.col[k]] += xi * c.val[k];
  }
}

double stationary_residual(const Chain& c, const std::vector<double>& pi) {
  if (static_cast<int32_t>(pi.size()) != c.n)
    throw std::invalid_argument(detail::cat("pi has ", pi.size(), " entries, the chain ", c.n, " states"));
  std::vector<double> y(c.n);
  left_multiply(c, pi.data(), y.data());
  long double r = 0.0L;
  for (int32_t i = 0; i < c.n; ++i) r += std::abs(y[i] - pi[i]);
  return static_cast<double>(r);
}

}  // namespace aqm
