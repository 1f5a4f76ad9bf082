// The avg grid and its mappings (SPEC 4).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aqmchain/errors.hpp"
#include "aqmchain/model/drop.hpp"

namespace aqm {

// ---------------------------------------------------------------- grid (4)

enum class Mapping { Split, Nearest, Flags };

/// `none`: the grid is what `k` / `points` say.  `auto`: a pre-solve locates where avg's
/// mass sits and the grid is refined there where p(avg) is steep or jumps (refine_grid()).
enum class Refine { None, Auto };

/// Options of the automatic grid (docs/fidelity.md); ranges checked by validate():
/// step_min (0, 1], p_step (0, 1], growth [1.01, 2], mass_tol (0, 0.01],
/// state_budget [1e3, 1e9], presolve_k [1, 64].
struct RefineOptions {
  double step_min = 1.0 / 256;  ///< the finest step, at a jump of p(avg) where avg has mass
  double p_step = 1e-3;         ///< largest change of p(avg) across one step where avg has mass
  double growth = 1.1;          ///< largest ratio of neighbouring steps (grading away from a jump)
  double mass_tol = 1e-6;       ///< avg's mass range: its mass_tol .. 1 - mass_tol quantiles
  double state_budget = 4e6;    ///< estimated states of the refined chain at most this
  int presolve_k = 1;           ///< the pre-solve's uniform step 1/presolve_k
  void validate(const std::string& prefix = "grid") const;
};

/// At most this many avg grid intervals (k x buffer for the uniform grid): checked by
/// validate() and resolve() before anything is allocated.
constexpr int64_t kMaxGridIntervals = 10000000;

struct GridSpec {
  int k = 4;                   ///< uniform step 1/k on [0, N] (ignored when `points` given or Flags)
  std::vector<double> points;  ///< custom grid (0 = g_0 < ... < g_L = N); empty = uniform
  Mapping mapping = Mapping::Split;
  Refine refine = Refine::None;  ///< auto: k is the step away from the refined ranges
  RefineOptions refine_options;
  /// REDwM's second filter variable s (model/filter.hpp, redwm_s_grid): uniform step
  /// 1/s_k (0: automatic, a quarter of the avg step 1/k), or custom points
  /// (0 = s_0 < ... , the last at or above s's largest value).  Unused by the EWMA.
  int s_k = 0;
  std::vector<double> s_points;
  /// Grid points for buffer size N (throws ModelError above kMaxGridIntervals + 1 points).
  std::vector<double> resolve(int buffer) const;  // refine = auto without points: ModelError
  /// Number of grid points resolve(buffer) returns, without allocating them.
  int64_t size(int buffer) const;
  void validate(int buffer, const std::string& prefix = "grid") const;
};

/// Where one model's avg lives and what its drop function does there (input of graded_points).
struct GridFocus {
  double mass_lo = 0.0, mass_hi = 0.0;  ///< avg's mass range, margins included
  DropFunction drop;                    ///< resolved (Model::resolved_drop())
};

/// The breakpoints of the focus's drop function inside its mass range where p jumps by
/// more than `p_step` (the points the automatic grid grades toward), sorted.
std::vector<double> focus_jumps(const GridFocus& focus, int buffer, double p_step);

/// The points of an automatic grid on [0, buffer].  The step is `coarse_step` except inside a
/// focus's mass range, where it keeps |p(g_{i+1}) - p(g_i)| <= p_step and shrinks
/// geometrically (ratio `growth`) to step_min at every jump of p; never below step_min.
/// Every breakpoint of every focus's drop function is a point.  All steps are multiplied by
/// `scale`.  Throws ModelError when more than kMaxGridIntervals intervals would result.
std::vector<double> graded_points(int buffer, double coarse_step, const std::vector<GridFocus>& foci,
                                  const RefineOptions& options, double scale = 1.0);

/// Every `factor`-th point of `points` (a grid with `factor` times the steps), keeping the
/// first and last points and every point listed in `keep`.
std::vector<double> coarsen_points(const std::vector<double>& points, int factor, const std::vector<double>& keep = {});

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
