// Automatic avg grids (docs/fidelity.md).
//
// The chain's answer depends on the avg grid: the split mapping adds noise to avg of
// about the step times the drift per update, and where p(avg) jumps or is steep inside
// the range avg actually visits that noise moves the numbers (a heavy-load RED queue
// variance comes out twice the continuous-avg value on a uniform 1/4 grid).  refine_grid()
// solves a coarse chain first, reads where avg's mass sits, and grades the grid down
// toward the jumps and steep parts of p there (graded_points), keeping the estimated
// state count within the budget.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aqmchain/model/model.hpp"
#include "aqmchain/solvers/stationary.hpp"
#include "aqmchain/model/queue_chain.hpp"

namespace aqm {

/// What refine_grid() did.
struct GridReport {
  bool refined = false;                               ///< false: the model's own grid was kept
  int64_t presolve_states = 0;                        ///< states of the pre-solve chains, summed
  double presolve_seconds = 0.0;                      ///< their build and solve
  std::vector<std::pair<double, double>> mass_ranges;  ///< per model: avg's mass range (margins included)
  std::vector<double> jumps;                          ///< jumps of p the grid is graded toward
  int64_t points = 0;                                 ///< grid points
  double min_step = 0.0, max_step = 0.0;
  /// Maximal ranges [lo, hi] where the step is below half the coarse step 1/k, with the smallest step there.
  std::vector<std::array<double, 3>> refined_ranges;
  double estimated_states = 0.0;  ///< from the pre-solve's states per avg value
  double budget_factor = 1.0;     ///< > 1: step_min and p_step were multiplied by this to fit state_budget
  bool budget_limited = false;    ///< the budget bound the refinement
  std::string note;
};

/// The pre-solve's answer on its own chain: a starting vector for the solve on the refined
/// grid, carried to its states by their labels (the avg index to the nearest refined point).
struct Presolve {
  std::vector<double> pi;                    ///< stationary vector (to the pre-solve's tolerance)
  std::vector<std::string> names;            ///< the chain's components, descriptor order
  std::vector<std::vector<int32_t>> labels;  ///< per component, each state's value
  std::vector<double> grid;                  ///< the pre-solve's avg grid values
};

struct RefinedGrid {
  GridSpec grid;  ///< explicit points, refine = none: what the chain is built on
  GridReport report;
  Presolve presolve;  ///< with keep_presolve and one model only (else empty): its pre-solve's answer
};

/// The automatic grid for `models` (one model, or the phases of a scenario: one grid
/// serving all, the finest step any of them asks for).  The models share the buffer and
/// grid options (models[0].grid: k is the coarse step, refine_options the rest).  Each
/// is pre-solved on the uniform grid 1/presolve_k with `presolve` (its tol relaxed to at
/// least 1e-8).  A model with refine = none is returned as it is (refined = false).
/// keep_presolve: the pre-solve's answer of a single model is returned too (RefinedGrid::presolve).
RefinedGrid refine_grid(const std::vector<Model>& models, const StationaryOptions& presolve = {},
                        const BuildOptions& build = {}, bool keep_presolve = false);

/// The report of an explicit grid (points, steps, refined ranges against coarse step 1/k).
void describe_grid(const std::vector<double>& points, int k, GridReport& report);

}  // namespace aqm
