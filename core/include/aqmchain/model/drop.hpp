// Drop functions p(avg) (SPEC 2.4).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aqmchain/errors.hpp"

namespace aqm {

// ---------------------------------------------------------------- drop functions (2.4)

struct DropFunction {
  enum class Kind { None, RED, GentleRED, DSRED, SRED, NLRED, Polynomial, Table };
  Kind kind = Kind::None;
  double lo = 0.0, hi = 0.0;  ///< min_th / max_th (RED family), K_l / K_h (DSRED), min_th / q_max (SRED)
  double p_max = 0.0;         ///< RED, GentleRED, NLRED
  double gamma = 0.0;         ///< DSRED
  double seg = 0.0;           ///< SRED segment point (0 = default 0.6 q_max)
  std::vector<double> coeffs;                     ///< Polynomial
  std::vector<std::pair<double, double>> points;  ///< Table

  static DropFunction none();
  static DropFunction red(double min_th, double max_th, double p_max);
  static DropFunction gentle_red(double min_th, double max_th, double p_max);
  static DropFunction dsred(double k_l, double k_h, double gamma);
  /// q_max <= 0 means "the buffer size", resolved by Model::resolved_drop().
  static DropFunction sred(double min_th, double q_max = 0.0, double seg = 0.0);
  static DropFunction nlred(double min_th, double max_th, double p_max);
  static DropFunction polynomial(double min_th, double max_th, std::vector<double> coeffs);
  static DropFunction table(std::vector<std::pair<double, double>> points);

  /// p(avg) in [0, 1].
  double operator()(double avg) const;
  /// Where p(avg) has a kink or a jump (thresholds, segment points, table points), sorted,
  /// within (0, buffer).  Grids keep them as points; refinement grades toward the jumps.
  std::vector<double> breakpoints(int buffer) const;
  void validate(const std::string& prefix = "aqm") const;
  std::string name() const;
};

}  // namespace aqm
