// Internal: the simulator's slot loop, shared by simulate() and simulate_scenario().
//
// One slot follows the order of events of docs/conventions.md ("Time and the order of
// events in a slot"):
// filter update, modulator move, arrival, rejection test (overflow, else an AQM drop or
// ECN mark with probability p(avg_t)), departure of the packet in service at the start of
// the slot, observation.  There is one loop (chunk in engine.cpp), a template over the
// features of a model (modulated source, avg kind, response recording, plain filter,
// traffic classes, batch source, stateful AQM), each an `if constexpr` part of it.  The
// random numbers it draws per slot, in this order, are
//
//   1. modulator move (modulated sources only): one uniform, compared with the
//      cumulative row of the modulator matrix;
//   2. grid mapping (discretised avg only): one uniform, compared with the split
//      probability of the target (drawn in every slot, also when the target is a single
//      grid point or, under the per-arrival rule, when no packet arrives); REDwM draws a
//      second one for its variable s, in the same way;
//   3. arrival: one uniform (a batch source: the number of arrivals, by inversion of the
//      count cdf of the modulator state).
// Models without classes, batch source or stateful AQM (the single-uniform path) go on:
//   4. the arrival's fate, with the SAME uniform u compared with the disjoint intervals
//        [0, lam p e)        arrival, AQM decision, ECN-capable: marked
//        [lam p e, lam p)    arrival, AQM decision, not ECN-capable: dropped
//        [lam p, lam)        arrival, no AQM decision: admitted (if the buffer has room)
//        [lam, 1)            no arrival
//      (lam = arrival probability of the slot, p = p(avg_t), e = ECN-capable probability;
//      when the buffer is full every arrival, u < lam, overflows).  The intervals have
//      lengths lam p e, lam p (1 - e), lam (1 - p), 1 - lam, which are exactly the
//      probabilities of the three independent draws "arrival", "drop decision", "ECN
//      capable" of the model; so the law is the model's, not an approximation;
//   5. departure: one uniform, compared with mu, drawn in every slot (used only when the
//      system held a packet at the start of the slot);
//   6. push-out victim (random discard policy, only when a rejected arrival finds
//      waiting packets): one uniform.
// This path is written without data-dependent branches on the common path, and is what
// benchmarks/bare_sim.c reproduces draw for draw.  A bare Bernoulli source with
// continuous avg therefore takes two draws per slot.
// Models with traffic classes (modified RED, flow comparison: docs/classes.md), a batch
// source or a stateful AQM draw after step 3: the stateful AQM's clock (geometric) and
// p_max mapping (discretised, when the clock fires), then per arrival its class (only with
// two or more classes), its flow (only when its class has several), its ECN capability
// (modified RED, when the class's probability is strictly between 0 and 1), the packet the
// flow comparison picks, the AQM decision and ECN; then the departure (5), and after it
// the push-out victims and the victims of the modified random search.
// Comparisons are made on the integer k = x >> 11 of a 64-bit draw x (u = k 2^-53):
// u < p  <=>  k < p 2^53  <=>  k < ceil(p 2^53), and the scaling by 2^53 is exact.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "aqmchain/model/filter.hpp"
#include "aqmchain/model/model.hpp"
#include "aqmchain/simulation/simulator.hpp"
#include "model/stateful.hpp"

namespace aqm::sim {

/// Runs replication(r) for r = 0 .. count - 1 on `threads` threads (the calling one
/// included), each claiming the next r.  replication returns false to stop early.
/// An exception must not leave a std::thread (std::terminate): the first one is
/// kept, `stop` is raised so the other replications end, and it is rethrown after
/// the join.
template <class F>
void run_replications(int threads, int count, std::atomic<bool>& stop, F&& replication) {
  std::atomic<int> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto worker = [&]() {
    try {
      for (int r; !stop && (r = next++) < count;)
        if (!replication(r)) break;
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      stop = true;
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
}


constexpr double kTwo53 = 9007199254740992.0;

/// ceil(p 2^53) in [0, 2^53]: with k = x >> 11 of a draw x, k < threshold(p) iff u < p.
inline uint64_t threshold(double p) {
  if (!(p > 0.0)) return 0;
  if (p >= 1.0) return uint64_t{1} << 53;
  return static_cast<uint64_t>(std::ceil(p * kTwo53));
}

/// Student t quantile 0.975 with `dof` degrees of freedom.
double t975(int dof);

/// Whether discretised runs precompute the grid target of every (grid point, queue)
/// pair: when the table is at most 64 MiB and the run has more slots than the table
/// has entries.  Its bytes (0 when not used).
double target_table_bytes(const Model& m, double total_slots);

/// Whether a model runs the class-aware loop: traffic classes, modified RED or the flow comparison.
inline bool class_aware(const Model& m) {
  return !m.classes.empty() || m.aqm.modified != Modified::None || m.aqm.flow_compare;
}

/// Index of the first entry of the cumulative `cdf` above u (the last one when none is).
inline int pick_cdf(const std::vector<double>& cdf, double u) {
  const auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
  return std::min(static_cast<int>(it - cdf.begin()), static_cast<int>(cdf.size()) - 1);
}

/// One of `waiting` packets behind the one in service, drawn uniformly: FIFO position 1 .. waiting.
inline int pick_waiting(Xoshiro256& rng, int waiting) {
  return 1 + std::min(waiting - 1, static_cast<int>(rng.uniform() * waiting));
}

/// What the class-aware loops (the slot loop and the continuous-time event loop) read about
/// the classes and flows of a model (docs/classes.md).  A packet's record is
/// (global flow id << 1) | ECN-capable.
struct ClassParams {
  int C = 1, F = 1;
  std::vector<std::vector<double>> ccdf;  ///< [m][c]: cumulative class shares in modulator state m
  std::vector<std::vector<double>> fcdf;  ///< [c]: cumulative flow weights (empty: uniform)
  std::vector<int> flows, offset;         ///< flows of class c, first global flow id of class c
  std::vector<int> flow_class;            ///< class of a global flow id
  std::vector<double> ecn;                ///< ECN-capable probability of class c
  std::vector<char> mice;
  Modified modified = Modified::None;
  bool flow_compare = false;
  double min_th = 0.0, max_th = 0.0;      ///< the drop function's thresholds

  ClassParams() = default;
  /// `drop`: the model's resolved drop function (its thresholds).
  ClassParams(const Model& m, const DropFunction& drop);

  int cls(uint32_t rec) const { return flow_class[rec >> 1]; }
  /// Neither mice nor ECN-capable: what modified RED discards.
  bool elephant(uint32_t rec) const { return !(rec & 1u) && !mice[static_cast<size_t>(cls(rec))]; }

  /// An arrival's class (only with two or more classes), its flow (only when its class has
  /// several) and, under modified RED, whether it is ECN-capable (only when the class's
  /// probability is strictly between 0 and 1), in modulator state m, in this order.
  /// Returns its record.
  uint32_t draw(int m, Xoshiro256& rng, int& c) const {
    c = C > 1 ? pick_cdf(ccdf[static_cast<size_t>(m)], rng.uniform()) : 0;
    const size_t k = static_cast<size_t>(c);
    const int Fc = flows[k];
    int fl = offset[k];
    if (Fc > 1) {
      const double uf = rng.uniform();
      fl += fcdf[k].empty() ? std::min(Fc - 1, static_cast<int>(uf * Fc)) : pick_cdf(fcdf[k], uf);
    }
    const double e = ecn[k];
    const bool capable = modified != Modified::None && (e >= 1.0 || (e > 0.0 && rng.uniform() < e));
    return (static_cast<uint32_t>(fl) << 1) | static_cast<uint32_t>(capable);
  }

  /// Modified RED's victim among `waiting` packets (FIFO positions 1 .. waiting, `rec(j)` their
  /// records) when an elephant waits: front = the first elephant from the head; random = up
  /// to three uniform picks, the first elephant picked, else the third pick.
  template <class Rec>
  int modified_victim(Xoshiro256& rng, int waiting, Rec&& rec) const {
    if (modified == Modified::Front) {
      int j = 1;
      while (!elephant(rec(j))) ++j;  // one waits (the caller counted them)
      return j;
    }
    int victim = 1;
    for (int trial = 0; trial < 3; ++trial) {
      victim = pick_waiting(rng, waiting);
      if (elephant(rec(victim))) break;
    }
    return victim;
  }
};

/// Remove FIFO position j (0 = head) of n packets from the arrival times and the packet
/// records together, shifting the shorter side.
template <class T>
void erase2(T* buf, uint32_t* meta, uint64_t mask, uint64_t& head, int n, int j) {
  if (j < n - 1 - j) {
    for (int i = j; i > 0; --i) {
      buf[(head + i) & mask] = buf[(head + i - 1) & mask];
      meta[(head + i) & mask] = meta[(head + i - 1) & mask];
    }
    ++head;
  } else {
    for (int i = j; i < n - 1; ++i) {
      buf[(head + i) & mask] = buf[(head + i + 1) & mask];
      meta[(head + i) & mask] = meta[(head + i + 1) & mask];
    }
  }
}

/// Everything the slot loop reads about one model (one phase of a scenario).
struct SlotParams {
  int N = 0, M = 1;
  std::vector<double> lam53;               ///< arrival probability per modulator state, times 2^53
  std::vector<std::vector<double>> mcdf;   ///< cumulative modulator rows (last entry 1)
  std::vector<double> pi;                  ///< stationary modulator law (initial state)
  /// Batch sources (B > 1): per modulator state the cumulative pmf of the number of
  /// arrivals in a slot (last entry 1); empty for B = 1 (lam53 then)
  int B = 1;
  std::vector<std::vector<double>> bcdf;
  uint64_t mu_thr = 0;                     ///< departure iff k < mu_thr
  EwmaFilter filter;
  bool per_slot = true;
  /// REDwM (SPEC 2.3): coefficients a_1..a_k and b_0..b_m (any order; continuous A runs
  /// on the histories of SimState), and the chain's (A, s) form for discretised runs.
  bool redwm = false;
  std::vector<double> ra, rb;
  std::optional<RedwmFilter> rfilter;
  int R = 1;                               ///< discretised REDwM: the auxiliary sums s^(1..R)
  std::vector<std::vector<double>> spoints;  ///< discretised REDwM: the grids of s^(1..R)
  std::vector<Grid> sgrids;
  double ecn = 0.0;
  DropPolicy policy = DropPolicy::Tail;
  DropFunction drop;
  enum class DropKind { None, Red, Any } drop_kind = DropKind::Any;
  double red_lo = 0.0, red_hi = 0.0, red_pmax = 0.0;
  bool discretised = false;
  std::vector<double> points, pdrop;       ///< discretised: grid points and p at them
  std::optional<Grid> grid;
  /// Discretised: the target of the update from grid point g with q waiting packets,
  /// entry g * N + q: grid index `lo` and the threshold of ceil(p_lo 2^53) (lo + 1
  /// above it).  Empty: mapped in the loop.
  std::vector<int32_t> tgt_lo;
  std::vector<uint64_t> tgt_thr;
  int64_t max_r = 2;                       ///< response histogram length
  /// Stateful AQM (spacing, adaptive p_max): the layout shared with the chain; its p_max
  /// grid and count cap are used by discretised runs only (continuous runs keep count and
  /// p_max exactly).
  std::optional<detail::StatefulLayout> sa;
  /// Class-aware runs (docs/classes.md).
  using Classes = ClassParams;
  std::optional<Classes> cls;

  SlotParams(const Model& m, bool discretised, bool target_table, int64_t max_response);

  /// RED exactly as DropFunction::operator() writes it.
  double red(double avg) const {
    return avg < red_lo ? 0.0 : (avg < red_hi ? red_pmax * (avg - red_lo) / (red_hi - red_lo) : 1.0);
  }
};

/// The simulated system: n, avg (or its grid index), modulator, and the FIFO of the
/// arrival slots of the packets in the system (head = the packet in service).
struct SimState {
  int n = 0, m = 0, g = 0;
  int gs[kMaxRedwmSums] = {};  ///< discretised REDwM: index of s^(i + 1) on its grid
  double avg = 0.0;
  // stateful AQM: count (-1 = below min_th), p_max (its grid index when discretised), clock phase
  int64_t count = -1, phase = 0;
  double pmax = 0.0;
  int k = 0, j = 0;  ///< p_max grid index; cur_max_th index (dynamic max_th)
  bool aqm_ready = false;  ///< set by the first stateful slot after start()
  /// REDwM with continuous A: ha[j] = A_{t-1-j} (j < k), hq[i] = q_{t-2-i} (i < m), the
  /// values at the filter's previous steps (0 before the first).
  double ha[kMaxFilterCoefficients] = {}, hq[kMaxFilterCoefficients] = {};
  uint64_t head = 0, mask = 0;
  std::vector<int64_t> buf;
  /// Class-aware runs: per FIFO place (flow id << 1) | ECN-capable; packets of each class
  /// in the system; elephants (neither mice nor ECN-capable) in the system.
  std::vector<uint32_t> meta;
  std::vector<int> in_sys;
  int elephants = 0;
  explicit SimState(int N) {
    size_t c = 1;
    while (c < static_cast<size_t>(N) + 1) c <<= 1;  // N + 1 slots: an unconditional write at head + n never hits a packet
    buf.assign(c, 0);
    mask = c - 1;
  }
  /// Empty system, avg 0, modulator drawn from `pi` (one uniform when it has several states).
  void start(const std::vector<double>& pi, Xoshiro256& rng) {
    std::fill(std::begin(gs), std::end(gs), 0);
    n = 0, g = 0, avg = 0.0, head = 0, m = 0, elephants = 0;
    std::fill(in_sys.begin(), in_sys.end(), 0);
    aqm_ready = false;
    std::fill(std::begin(ha), std::end(ha), 0.0);
    std::fill(std::begin(hq), std::end(hq), 0.0);
    if (pi.size() > 1) {
      const double u = rng.uniform();
      double c = 0;
      m = static_cast<int>(pi.size()) - 1;
      for (size_t i = 0; i < pi.size(); ++i)
        if (u < (c += pi[i])) {
          m = static_cast<int>(i);
          break;
        }
    }
  }
  int queue() const { return n > 0 ? n - 1 : 0; }
};

/// Bytes the response histograms may still take (shared by the replications).
struct ResponseBudget {
  std::atomic<int64_t> bytes_left{0};
  double limit = 0.0;
};

/// What a stretch of slots adds up per class and per flow (class-aware runs).
struct ClassTally {
  std::vector<int64_t> arr, aqm, ovf, fc, push, marks, dep, sum_n;  ///< per class
  std::vector<std::vector<int64_t>> hist_r;                         ///< per class, as Tally::hist_r
  std::vector<int64_t> tail_r;
  std::vector<__int128> tail_r2;
  std::vector<int64_t> f_arr, f_lost, f_dep;                        ///< per flow
  void reset(int C, int F, bool record) {
    for (auto* v : {&arr, &aqm, &ovf, &fc, &push, &marks, &dep, &sum_n}) v->assign(static_cast<size_t>(C), 0);
    hist_r.assign(record ? static_cast<size_t>(C) : 0, std::vector<int64_t>(2, 0));
    tail_r.assign(static_cast<size_t>(C), 0);
    tail_r2.assign(static_cast<size_t>(C), 0);
    for (auto* v : {&f_arr, &f_lost, &f_dep}) v->assign(static_cast<size_t>(F), 0);
  }
};

/// What a stretch of slots adds up.
struct Tally {
  int64_t arrivals = 0, aqm = 0, marks = 0, overflow = 0, departures = 0, admitted = 0, pushed = 0;
  long double sum_avg = 0;
  long double sum_count = 0, sum_pmax = 0, sum_maxth = 0;  ///< stateful AQM: count, p_max, cur_max_th at slot ends
  int64_t* hist_n = nullptr;  ///< N + 1 bins, n at the end of each slot
  /// Response times (recording loops only): hist_r[r] counts R = r for r < max_r - 1, the
  /// last bin R >= max_r - 1, whose sum and sum of squares are tail_r, tail_r2; bin 0
  /// collects the slots without a departure (R >= 1).  Grows under `budget`.
  std::vector<int64_t>* hist_r = nullptr;
  int64_t tail_r = 0;
  __int128 tail_r2 = 0;
  ResponseBudget* budget = nullptr;
  int64_t flow_compare = 0;    ///< packets lost to the flow comparison (two per match)
  ClassTally* ct = nullptr;    ///< class-aware runs that report classes (else not tallied)
};

/// Slots t0..t1 (inclusive, at most 4096 of them: the avg sum of the stretch is a double).
using ChunkFn = void (*)(const SlotParams&, SimState&, Xoshiro256&, int64_t t0, int64_t t1, Tally&);
/// The loop for P's source kind and avg mode; `record`: with response times (hist_r and
/// budget set in the tally), else without them (warm-up, scenario ensembles).
ChunkFn chunk_function(const SlotParams& P, bool record);

/// Sum and sum of squares of the response times a recording tally saw (histogram and tail).
void response_sums(const std::vector<int64_t>& hist_r, int64_t max_r, const Tally& T, int64_t& sum_r,
                   __int128& sum_r2);

}  // namespace aqm::sim
