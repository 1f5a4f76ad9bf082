// Internal: validation helpers shared by the model translation units.
#pragma once

#include <charconv>
#include <cmath>
#include <string>

#include "aqmchain/errors.hpp"

namespace aqm::detail {

/// A double for a message: NaN is spelled out (no message shows "nan").
inline std::string show(double v) {
  if (std::isnan(v)) return "not a number";
  return detail::cat(v);
}

/// The shortest text that reads back as v (0.6, not 0.59999999999999998).
inline std::string shortest(double v) {
  if (std::isnan(v)) return "not a number";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

inline void require_finite(const std::string& param, double v) {
  if (!std::isfinite(v)) fail_param(param, "a finite number", show(v));
}

inline void require_prob(const std::string& param, double v) {
  require_finite(param, v);
  if (v < 0.0 || v > 1.0) fail_param(param, "in [0, 1]", v);
}

inline void require_nonneg(const std::string& param, double v) {
  require_finite(param, v);
  if (v < 0.0) fail_param(param, ">= 0", v);
}

inline void require_ordered(const std::string& lo_name, double lo, const std::string& hi_name, double hi) {
  require_nonneg(lo_name, lo);
  require_finite(hi_name, hi);
  if (!(lo < hi))
    throw ModelError(hi_name, detail::cat("parameter '", hi_name, "' must be > ", lo_name, " = ", lo,
                                          ", got ", hi));
}

}  // namespace aqm::detail
