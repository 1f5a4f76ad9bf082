// Internal: a hitting-time target compiled from its clauses (simulation/passage.hpp): per
// quantity the range the clauses leave (a conjunction of comparisons of one number is one
// interval), and the counts a run accumulates (the rewards, in passage_reward_names() order).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace aqm::sim {

/// An interval with open or closed ends (the whole line by default).
struct Range {
  double lo = -INFINITY, hi = INFINITY;
  bool lo_closed = true, hi_closed = true;
  bool holds(double x) const {
    return (lo_closed ? x >= lo : x > lo) && (hi_closed ? x <= hi : x < hi);
  }
  bool empty() const { return lo > hi || (lo == hi && !(lo_closed && hi_closed)); }
  bool whole() const { return lo == -INFINITY && hi == INFINITY; }
  /// Intersect with [v, inf) (closed) or (v, inf).
  void at_least(double v, bool closed) {
    if (v > lo) lo = v, lo_closed = closed;
    else if (v == lo) lo_closed = lo_closed && closed;
  }
  /// Intersect with (-inf, v] (closed) or (-inf, v).
  void at_most(double v, bool closed) {
    if (v < hi) hi = v, hi_closed = closed;
    else if (v == hi) hi_closed = hi_closed && closed;
  }
};

/// The target: n (packets in the system), avg, modulator each in its range.
struct Target {
  Range queue, avg, modulator;
  bool holds(int n, double a, int m) const { return queue.holds(n) && avg.holds(a) && modulator.holds(m); }
};

/// The earliest s >= 0 at which avg(s) = q + (a - q) e^{-w s} lies in r (its infimum, for an
/// open end), or +infinity: avg moves monotonically from a towards q, so it enters r at s = 0
/// or where it crosses the end of r it approaches.
inline double avg_entry(const Range& r, double a, double q, double w) {
  if (r.holds(a)) return 0.0;
  if (r.empty() || !(w > 0.0)) return INFINITY;
  if (a < r.lo || (a == r.lo && !r.lo_closed)) return q > r.lo ? std::log((q - a) / (q - r.lo)) / w : INFINITY;
  return q < r.hi ? std::log((a - q) / (r.hi - q)) / w : INFINITY;
}

/// arrival, aqm_drop, mark, overflow, admit, depart.
constexpr int kRewards = 6;
using Counts = std::array<int64_t, kRewards>;

}  // namespace aqm::sim
