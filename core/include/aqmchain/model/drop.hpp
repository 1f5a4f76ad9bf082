// Drop functions p(avg) (SPEC 2.4).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aqmchain/errors.hpp"
#include "aqmchain/model/registry.hpp"

namespace aqm {

// ---------------------------------------------------------------- drop functions (2.4)

struct DropFunction {
  enum class Kind { None, RED, GentleRED, DSRED, SRED, NLRED, Polynomial, Table, GentleNLRED };
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

  /// The drop function `kind` (a registry name) from its parameters by name, validated;
  /// ModelError names an unknown kind, a missing or unknown parameter.
  static DropFunction make(const std::string& kind, const ParamValues& values);
  /// This function's parameters by name (the registry's, in its order): make(name(), args()) == *this.
  ParamValues args() const;
};

/// Where a drop function's parameter lives in `DropFunction`.
enum class DropField { Lo, Hi, PMax, Gamma, Seg, Coeffs, Points };

/// One kind of drop function: the registry entry.  Every member is given to the
/// constructor (a new kind cannot leave out its formula, breakpoints or checks).
struct DropKindSpec {
  /// Which AQM features a kind supports (the kind lists in their error messages are read from here).
  enum Trait : unsigned {
    kNoTraits = 0,
    kScalesPMax = 1u << 0,   ///< p(avg) scales with p_max up to max_th (adaptive RED, the dynamic max_th)
    kThresholds = 1u << 1,   ///< min_th and max_th bound the early-drop region (modified RED, flow comparison)
  };
  using Eval = double (*)(const DropFunction&, double avg);
  /// Kinks and jumps of p(avg) (the grids keep them as points); `buffer`: the model's buffer
  /// (for defaults such as SRED's q_max 0); sorting and clipping to (0, buffer) is done by the caller.
  using Breakpoints = std::vector<double> (*)(const DropFunction&, double buffer);
  /// Checks beyond each parameter's type (ModelError naming prefix.parameter).
  using Validate = void (*)(const DropFunction&, const std::string& prefix);

  DropFunction::Kind kind;
  std::string name;
  std::string doc;    ///< one line: the formula in words
  std::string title;  ///< for plot labels ("RED", "tail drop")
  std::vector<std::pair<ParamSpec, DropField>> params;
  Eval p;
  Breakpoints breakpoints;
  Validate validate;
  unsigned traits;
  std::string band;  ///< the early-drop region's name for plots ("min_th..max_th"), "" for none

  DropKindSpec(DropFunction::Kind kind, std::string name, std::string doc, std::string title,
               std::vector<std::pair<ParamSpec, DropField>> params, Eval p, Breakpoints breakpoints,
               Validate validate, unsigned traits, std::string band);
};

/// Every drop function kind, in the order of DropFunction::Kind.
const std::vector<DropKindSpec>& drop_kinds();
const DropKindSpec& drop_kind(DropFunction::Kind kind);
/// ModelError naming `param` (one of the kinds) for an unknown name.
const DropKindSpec& drop_kind(const std::string& name, const std::string& param = "aqm.drop");
/// The kinds with all of `traits`, as "a, b or c" (error messages).
std::string drop_kinds_with(unsigned traits);
bool drop_has(const DropFunction& f, unsigned traits);

}  // namespace aqm
