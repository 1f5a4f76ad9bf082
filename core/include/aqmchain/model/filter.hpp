// The AQM's congestion estimate avg (SPEC 2.3 and 6), written once and shared
// by the chain kernels and the simulator.
//
// EWMA: avg_t = (1 - w) avg_{t-1} + w q_{t-1}, advanced in every slot
// (per_slot) or only in slots with an arrival (per_arrival).  In continuous
// time d avg/dt = w (q - avg), discretised on the grid as upwind rates.
//
// Seam for further filters: a filter whose next value depends on more than
// (avg, q) — REDwM's second-order recursion A_t = a1 A_{t-1} + b0 q_{t-1} +
// s_{t-1}, s_t = a2 A_{t-1} + b1 q_{t-1} — carries its extra variable as a state
// component of its own (descriptor), maps it on its own grid, and is added here
// as another class with the same next()/advances() interface over (A, s).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "aqmchain/model/model.hpp"

namespace aqm {

/// AutoRED's dynamic weight (docs/stateful-aqm.md): w_t = T J K with T = P (1 - P),
/// J = 2 x / ln x, x = max(e, 5.923 + (q - avg)), K = 1 / N; P = p(avg) (the drop function
/// before the update) or q / N; w_t is kept in [w, 1] (the static w is the floor).
inline double autored_weight(double w_floor, double P, double q, double avg, int N) {
  const double x = std::max(2.718281828459045, 5.923 + (q - avg));
  const double wt = P * (1.0 - P) * (2.0 * x / std::log(x)) / static_cast<double>(N);
  return std::min(1.0, std::max(w_floor, wt));
}

class EwmaFilter {
 public:
  explicit EwmaFilter(const Aqm& aqm) : w_(aqm.w), per_slot_(aqm.update == UpdateRule::PerSlot) {}
  /// With the model: AutoRED's dynamic weight when aqm.weight = autored.
  explicit EwmaFilter(const Model& m) : EwmaFilter(m.aqm) {
    if (m.aqm.weight == Weight::AutoRED) {
      dynamic_ = true;
      by_queue_ = m.aqm.autored_p == AutoredP::Queue;
      drop_ = m.resolved_drop();
      N_ = m.buffer;
    }
  }
  double w() const { return w_; }
  bool dynamic() const { return dynamic_; }
  /// The weight of the update from `avg` with q waiting packets.
  double weight(double avg, double q) const {
    if (!dynamic_) return w_;
    const double P = by_queue_ ? q / static_cast<double>(N_) : drop_(avg);
    return autored_weight(w_, P, q, avg, N_);
  }
  /// The value after one update from `avg` with q waiting packets.
  double next(double avg, double q) const {
    if (!dynamic_) return (1.0 - w_) * avg + w_ * q;
    const double w = weight(avg, q);
    return (1.0 - w) * avg + w * q;
  }
  /// Whether the filter advances in a slot (with or without an arrival).
  bool advances(bool arrival) const { return per_slot_ || arrival; }
  bool per_slot() const { return per_slot_; }
  /// Continuous time: rates of one grid step up and down from point i of
  /// `grid` with q waiting packets, w max(q - g_i, 0) / (g_{i+1} - g_i) and
  /// w max(g_i - q, 0) / (g_i - g_{i-1}); the mean drift is w (q - g_i).
  void upwind_rates(const std::vector<double>& grid, int i, double q, double& up, double& down) const {
    const double g = grid[static_cast<size_t>(i)];
    up = i + 1 < static_cast<int>(grid.size()) ? w_ * std::max(q - g, 0.0) / (grid[i + 1] - g) : 0.0;
    down = i > 0 ? w_ * std::max(g - q, 0.0) / (g - grid[i - 1]) : 0.0;
  }

 private:
  double w_;
  bool per_slot_;
  bool dynamic_ = false, by_queue_ = false;
  DropFunction drop_;
  int N_ = 1;
};

}  // namespace aqm
