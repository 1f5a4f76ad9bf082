// The AQM's congestion estimate avg (SPEC 2.3 and 6), written once and shared
// by the chain kernels and the simulator.
//
// EWMA: avg_t = (1 - w) avg_{t-1} + w q_{t-1}, advanced in every slot
// (per_slot) or only in slots with an arrival (per_arrival).  In continuous
// time d avg/dt = w (q - avg), discretised on the grid as upwind rates.
//
// REDwM (seed 000's second-order moving average): A_t = sum_j a_j A_{t-j} +
// sum_i b_i q_{t-1-i}.  The simulator runs any order (k, m) on the histories of
// A and q.  The chain takes k <= 2, m <= 1 in the form of SPEC 2.3:
//     A_t = a_1 A_{t-1} + b_0 q_{t-1} + s_{t-1},   s_t = a_2 A_{t-1} + b_1 q_{t-1},
// with A on the avg grid (state component avg_index) and s on a grid of its own
// (component s_index, redwm_s_grid), each value mapped by the model's mapping
// independently.  Under per_arrival the recursion runs over the filter's steps
// (slots with an arrival): A_{t-j} and q_{t-1-i} are the values at earlier steps.
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
      drop_[0] = drop_[1] = m.resolved_drop();
      // FDynamicAutoRED: P_t = p(avg_{t-1}) with the slot's cur_max_th (index 1: raised)
      if (m.aqm.dynamic_max_th) drop_[1].hi = drop_[0].hi * (1.0 + m.aqm.max_th_growth);
      N_ = m.buffer;
    }
  }
  double w() const { return w_; }
  bool dynamic() const { return dynamic_; }
  /// The weight of the update from `avg` with q waiting packets; `maxth` is the index of
  /// cur_max_th at the start of the slot under dynamic max_th (0: max_th, 1: raised).
  double weight(double avg, double q, int maxth = 0) const {
    if (!dynamic_) return w_;
    const double P = by_queue_ ? q / static_cast<double>(N_) : drop_[maxth](avg);
    return autored_weight(w_, P, q, avg, N_);
  }
  /// The value after one update from `avg` with q waiting packets.
  double next(double avg, double q, int maxth = 0) const {
    if (!dynamic_) return (1.0 - w_) * avg + w_ * q;
    const double w = weight(avg, q, maxth);
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
  DropFunction drop_[2];
  int N_ = 1;
};

/// REDwM of order k <= 2, m <= 1 over (A, s) (the chain's form, SPEC 2.3); shorter
/// coefficient lists are padded with zeros.  Throws ModelError naming aqm.a / aqm.b
/// when the filter has a non-zero a_j, j > 2, or b_i, i > 1.
class RedwmFilter {
 public:
  explicit RedwmFilter(const Aqm& aqm);
  /// One step from (A, s) with q waiting packets: A' = a_1 A + b_0 q + s, s' = a_2 A + b_1 q.
  /// With a_2 = b_1 = 0 and s = 0, A' is bitwise the EWMA's (1 - w) A + w q for
  /// a_1 = 1 - w, b_0 = w (the triple [w, 0, 0]).
  void next(double A, double s, double q, double& A2, double& s2) const {
    A2 = a1_ * A + b0_ * q + s;
    s2 = a2_ * A + b1_ * q;
  }
  bool per_slot() const { return per_slot_; }
  double a1() const { return a1_; }
  double a2() const { return a2_; }
  double b0() const { return b0_; }
  double b1() const { return b1_; }
  /// The largest value s can take is a_2 N + b_1 (N - 1) <= (a_2 + b_1) N.
  double s_max(int buffer) const { return (a2_ + b1_) * buffer; }

 private:
  double a1_ = 0, a2_ = 0, b0_ = 0, b1_ = 0;
  bool per_slot_ = true;
};

/// The automatic s grid is this many times finer than the avg step 1/k.
/// Measured on the REDwM paper's scenario (GEO and SSMP, buffer 250, avg step 1/4): with
/// s on the avg step the Krylov solver needs 30-90 iterations and the mean response
/// moves by up to 0.02 % when s is refined; four times finer, s is nearly a function of
/// (n, A) (the chain grows by 1-10 %), 12-14 iterations, and within 0.005 % of the
/// 16-times-finer grid.
constexpr int kAutoSRefinement = 4;

/// The chain's grid for REDwM's s (SPEC 2.3): s lives in [0, S], S = (a_2 + b_1) N.
/// grid.s_points when given (validated: s_0 = 0, strictly increasing, the last >= S);
/// else uniform with step 1/s_k from 0 up to the first point >= S, where s_k = 0
/// (automatic) takes a quarter of the avg step 1/k (s_k = 4 k for the
/// uniform grid).  S = 0 (EWMA written as REDwM) gives the single point 0.  Throws
/// ModelError naming grid.s_k / grid.s_points.
std::vector<double> redwm_s_grid(const Model& model);
/// Number of points redwm_s_grid(model) returns, without allocating them (validated).
int64_t redwm_s_grid_size(const Model& model);

}  // namespace aqm
