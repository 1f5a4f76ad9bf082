// Exact slotted transient: p_t = p_0 P^t by stepping (SPEC 6), with steady-state
// detection.  The kernel of the transient analysis for slotted models; the
// transient driver (analysis/transient.hpp) runs it phase by phase.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "aqmchain/operators/operator.hpp"

namespace aqm {

struct StepOptions {
  /// Steady-state detection: stop stepping once ||p_t - p_{t/2}||_1 and
  /// ||p_t - p_{t-1}||_1 are both <= steady_tol, compared at t = 2^j slots after the
  /// start (j >= 11), and hold p_t from then on.
  /// 0 disables it (every slot is stepped).
  double steady_tol = 1e-10;
  /// Budget of steps per call (0: none); past it the call stops, not converged.
  int64_t max_steps = 0;
  void validate() const;
};

struct StepAccount {
  int64_t steps = 0;          ///< products with P
  bool steady = false;        ///< steady state was detected
  int64_t steady_slot = -1;   ///< slots after the start at which it was detected
  double steady_change = 0;   ///< ||p_t - p_{t/2}||_1 there
  bool budget_exhausted = false;
  int64_t reached = 0;        ///< slots after the start that p stands at
};

/// Advance p (in place) by `slots` steps of P, calling observer(k, p) when p is
/// p_0 P^{outputs[k]} (outputs sorted, within [0, slots], relative to the start).
/// With steady-state detection the remaining outputs see the steady vector.
StepAccount step_slots(const TransposedCsr& PT, std::vector<double>& p, int64_t slots,
                       const std::vector<int64_t>& outputs, const StepOptions& options,
                       const std::function<void(size_t, const double*)>& observer);

}  // namespace aqm
