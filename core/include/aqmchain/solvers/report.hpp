// One convergence report for every solver family (stationary, response-time,
// later transient), the idea of KrylovKit's ConvergenceInfo: what was asked
// for, what ran, how well it did and what it cost.  Non-convergence is a
// status with the partial result, never an exception.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace aqm {

enum class Status {
  Converged,       ///< the stopping test holds
  NotConverged,    ///< the iteration or step budget ran out first
  Stalled,         ///< progress stopped before the budget ran out
  NumericalIssue,  ///< the method produced no usable vector (non-finite, no positive mass)
  NotComputed,     ///< nothing was run (yet)
};
std::string to_string(Status);
/// Every status, in declaration order (names from to_string).
inline constexpr Status kAllStatuses[] = {Status::Converged, Status::NotConverged, Status::Stalled,
                                          Status::NumericalIssue, Status::NotComputed};

/// `M` is the family's method enum.
template <class M>
struct ConvergenceReport {
  Status status = Status::NotComputed;
  M requested{};            ///< what the caller asked for
  M method{};               ///< what produced the result
  bool fallback = false;    ///< `method` is an automatic fallback
  std::string note;         ///< why a fallback happened, or what stopped the method
  double residual = 0.0;    ///< the family's stopping quantity (stationary: ||pi P - pi||_1)
  long iterations = 0;      ///< sweeps, cycles, restarts, steps
  long operator_applications = 0;  ///< products with the operator, counted
  std::vector<std::pair<std::string, double>> seconds;  ///< phase -> wall seconds
  std::vector<std::pair<std::string, double>> extra;    ///< back-end numbers
  bool converged() const { return status == Status::Converged; }
  /// extra's number `name`, or `otherwise` when the back end did not report it.
  double extra_value(const std::string& name, double otherwise = 0.0) const {
    for (const auto& [key, v] : extra)
      if (key == name) return v;
    return otherwise;
  }
};

}  // namespace aqm
