// Slotted transient stepping with steady-state detection.
#include "aqmchain/solvers/stepping.hpp"

#include <cmath>
#include <string>

#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"

namespace aqm {

void StepOptions::validate() const {
  if (!(steady_tol >= 0.0 && steady_tol < 1.0))
    throw OptionError(detail::cat("transient option 'steady_tol' must be in [0, 1) (0: no detection), got ", steady_tol));
  if (max_steps < 0) throw OptionError(detail::cat("transient option 'max_steps' must be >= 0 (0: none), got ", max_steps));
}

StepAccount step_slots(const TransposedCsr& PT, std::vector<double>& p, int64_t slots,
                       const std::vector<int64_t>& outputs, const StepOptions& o,
                       const std::function<void(size_t, const double*)>& observer) {
  o.validate();
  if (static_cast<int32_t>(p.size()) != PT.n)
    throw OptionError(detail::cat("the initial law has ", p.size(), " entries, the chain ", PT.n, " states"));
  StepAccount a;
  std::vector<double> q(p.size()), snap;
  size_t k = 0;
  auto emit = [&](int64_t t) {
    while (k < outputs.size() && outputs[k] <= t) observer(k++, p.data());
  };
  emit(0);
  int64_t next_check = 1024;  // snapshot at 1024, compare at 2048 (and snapshot), ...
  for (int64_t t = 0; t < slots;) {
    if (o.max_steps > 0 && a.steps >= o.max_steps) {
      a.budget_exhausted = true;
      a.reached = t;
      return a;
    }
    PT.apply(p.data(), q.data());
    p.swap(q);
    ++a.steps;
    ++t;
    emit(t);
    if ((t & 1023) == 0) check_interrupt();
    if (o.steady_tol > 0.0 && t == next_check) {
      if (!snap.empty()) {
        // ||p_t - p_{t/2}|| and ||p_t - p_{t-1}|| (q holds p_{t-1} after the swap):
        // the second keeps a periodic chain whose period divides t/2 from looking steady
        long double d = 0.0L, d1 = 0.0L;
        for (size_t i = 0; i < p.size(); ++i) {
          d += std::abs(p[i] - snap[i]);
          d1 += std::abs(p[i] - q[i]);
        }
        if (d <= o.steady_tol && d1 <= o.steady_tol) {
          a.steady = true;
          a.steady_slot = t;
          a.steady_change = static_cast<double>(d);
          emit(slots);
          a.reached = slots;
          return a;
        }
      }
      snap = p;
      next_check = 2 * t;
    }
  }
  a.reached = slots;
  return a;
}

}  // namespace aqm
