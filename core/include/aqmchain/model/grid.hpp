// The avg grid and its mappings (SPEC 4).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aqmchain/errors.hpp"

namespace aqm {

// ---------------------------------------------------------------- grid (4)

enum class Mapping { Split, Nearest, Flags };

/// At most this many avg grid intervals (k x buffer for the uniform grid): checked by
/// validate() and resolve() before anything is allocated.
constexpr int64_t kMaxGridIntervals = 10000000;

struct GridSpec {
  int k = 4;                   ///< uniform step 1/k on [0, N] (ignored when `points` given or Flags)
  std::vector<double> points;  ///< custom grid (0 = g_0 < ... < g_L = N); empty = uniform
  Mapping mapping = Mapping::Split;
  /// REDwM's second filter variable s (model/filter.hpp, redwm_s_grid): uniform step
  /// 1/s_k (0: automatic, a quarter of the finest step of the avg grid), or custom points
  /// (0 = s_0 < ... , the last at or above s's largest value).  Unused by the EWMA.
  int s_k = 0;
  std::vector<double> s_points;
  /// Grid points for buffer size N (throws ModelError above kMaxGridIntervals + 1 points).
  std::vector<double> resolve(int buffer) const;
  /// Number of grid points resolve(buffer) returns, without allocating them.
  int64_t size(int buffer) const;
  void validate(int buffer, const std::string& prefix = "grid") const;
};

/// Where the continuous update value y lands: grid index `lo` with probability
/// `p_lo`, else `lo + 1` (p_lo == 1 means a single target).
struct GridTarget {
  int32_t lo;
  double p_lo;
};

/// A resolved grid with its mapping; `map` is SPEC 4 exactly.
class Grid {
 public:
  Grid(std::vector<double> points, Mapping mapping);
  GridTarget map(double y) const;
  const std::vector<double>& points() const { return pts_; }
  int size() const { return static_cast<int>(pts_.size()); }
  Mapping mapping() const { return mapping_; }

 private:
  std::vector<double> pts_;
  Mapping mapping_;
  double uniform_step_ = 0.0;  ///< > 0 when the points are uniform (fast path)
};

}  // namespace aqm
