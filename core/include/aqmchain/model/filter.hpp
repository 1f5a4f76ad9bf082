// The AQM's congestion estimate avg (SPEC 2.3 and 6), written once and shared
// by the chain kernels and the simulator.
//
// EWMA: avg_t = (1 - w) avg_{t-1} + w q_{t-1}, advanced in every slot
// (per_slot) or only in slots with an arrival (per_arrival).  In continuous
// time d avg/dt = w (q - avg), discretised on the grid as upwind rates.
//
// REDwM (the second-order moving average): A_t = sum_j a_j A_{t-j} +
// sum_i b_i q_{t-1-i}.  The simulator runs any order (k, m) on the histories of
// A and q.  The chain (and the simulator's discretised mode) takes the transposed
// direct form with r = max(k, m + 1) - 1 auxiliary sums (k <= 2, m <= 1: one):
//     A_t = a_1 A_{t-1} + b_0 q_{t-1} + s_{t-1},   s_t = a_2 A_{t-1} + b_1 q_{t-1},
// with A on the avg grid (state component avg_index) and each s^(i) on a grid of its own
// (components s_index, s2_index, ...; redwm_s_grids), each value mapped by the model's mapping
// independently.  Under per_arrival the recursion runs over the filter's steps
// (slots with an arrival): A_{t-j} and q_{t-1-i} are the values at earlier steps.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
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

/// The chain carries at most this many auxiliary sums s^(1..r) (r = max(k, m + 1) - 1):
/// one filter step maps A and every s^(i) to two neighbouring points each, 2^(r + 1)
/// targets per slot, and the state space multiplies by the r s grids.
constexpr int kMaxRedwmSums = 8;

/// REDwM of any order (k, m) with r = max(k, m + 1) - 1 <= kMaxRedwmSums in the transposed
/// direct form (docs/redwm.md): the state (A, s^(1), ..., s^(R)), R = max(r, 1),
///     A_t = a_1 A_{t-1} + b_0 q_{t-1} + s^(1)_{t-1},
///     s^(i)_t = a_{i+1} A_{t-1} + b_i q_{t-1} + s^(i+1)_{t-1}   (s^(R+1) = 0),
/// which unrolls to A_t = sum_j a_j A_{t-j} + sum_i b_i q_{t-1-i}.  Coefficients beyond
/// the lists are 0; k <= 1, m = 0 keeps one sum, identically 0 (RED written as REDwM).
/// Throws ModelError naming aqm.a / aqm.b when r > kMaxRedwmSums.
class RedwmFilter {
 public:
  explicit RedwmFilter(const Aqm& aqm);
  /// One step from (A, s) with q waiting packets: A' = a_1 A + b_0 q + s, s' = a_2 A + b_1 q
  /// (R = 1; bitwise the general step).  With a_2 = b_1 = 0 and s = 0, A' is bitwise the
  /// EWMA's (1 - w) A + w q for a_1 = 1 - w, b_0 = w (the triple [w, 0, 0]).
  void next(double A, double s, double q, double& A2, double& s2) const {
    A2 = a1() * A + b0() * q + s;
    s2 = a2() * A + b1() * q;
  }
  /// One step of the general form: s and s2 hold R values each.
  void next(double A, const double* s, double q, double& A2, double* s2) const {
    A2 = a_[0] * A + b_[0] * q + s[0];
    for (int i = 0; i < R_; ++i) {
      s2[i] = a_[static_cast<size_t>(i) + 1] * A + b_[static_cast<size_t>(i) + 1] * q;
      if (i + 1 < R_) s2[i] += s[i + 1];
    }
  }
  bool per_slot() const { return per_slot_; }
  /// Number of auxiliary sums the state carries, R = max(r, 1).
  int sums() const { return R_; }
  /// a_j (j >= 1) and b_i (i >= 0), 0 beyond the lists.
  double a(int j) const { return a_[static_cast<size_t>(j) - 1]; }
  double b(int i) const { return b_[static_cast<size_t>(i)]; }
  double a1() const { return a_[0]; }
  double a2() const { return a_[1]; }
  double b0() const { return b_[0]; }
  double b1() const { return b_[1]; }
  /// The largest value s^(i) (1-based) can take: (sum_{j >= i} a_{j+1} + b_j) N.
  double s_max(int i, int buffer) const {
    double t = 0.0;
    for (int j = i; j <= R_; ++j) t += a_[static_cast<size_t>(j)] + b_[static_cast<size_t>(j)];
    return t * buffer;
  }
  double s_max(int buffer) const { return s_max(1, buffer); }

 private:
  int R_ = 1;
  std::vector<double> a_, b_;  // a_1 .. a_{R+1}, b_0 .. b_R (zero-padded)
  bool per_slot_ = true;
};

/// The automatic s grid is this many times finer than the avg step 1/k.
/// Measured on the REDwM paper's scenario (GEO and SSMP, buffer 250, avg step 1/4): with
/// s on the avg step the Krylov solver needs 30-90 iterations and the mean response
/// moves by up to 0.02 % when s is refined; four times finer, s is nearly a function of
/// (n, A) (the chain grows by 1-10 %), 12-14 iterations, and within 0.005 % of the
/// 16-times-finer grid.
constexpr int kAutoSRefinement = 4;

/// The chain's grid for REDwM's s = s^(1) (SPEC 2.3): s lives in [0, S], S = (a_2 + b_1) N
/// for k <= 2, m <= 1 (in general the top of s^(1), RedwmFilter::s_max).
/// grid.s_points when given (validated: s_0 = 0, strictly increasing, the last >= S);
/// else uniform with step 1/s_k from 0 up to the first point >= S, where s_k = 0
/// (automatic) takes a quarter of the avg step 1/k (s_k = 4 k for the
/// uniform grid).  S = 0 (EWMA written as REDwM) gives the single point 0.  Throws
/// ModelError naming grid.s_k / grid.s_points.
std::vector<double> redwm_s_grid(const Model& model);
/// Number of points redwm_s_grid(model) returns, without allocating them (validated).
int64_t redwm_s_grid_size(const Model& model);
/// The grids of every auxiliary sum s^(1..R) (R = RedwmFilter::sums()): s^(i) on the same
/// step (or the same custom points) from 0 up to the first point >= its top s_max(i).
/// The first is redwm_s_grid(model).
std::vector<std::vector<double>> redwm_s_grids(const Model& model);
/// Their sizes, without allocating them (validated).
std::vector<int64_t> redwm_s_grid_sizes(const Model& model);
/// The component name of s^(i) (1-based): "s_index" for i = 1, "s<i>_index" beyond.
std::string redwm_s_component(int i);

}  // namespace aqm
