// Model description (SPEC sections 2 and 4): what the queue is, not how it is solved.
//
// Every type validates on construction (factories) and again in Model::validate(),
// throwing aqm::ModelError with a message that names the parameter, the bound and
// the value.  Nothing here knows about state spaces or matrices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aqmchain/errors.hpp"
#include "aqmchain/model/drop.hpp"
#include "aqmchain/model/grid.hpp"
#include "aqmchain/model/source.hpp"

namespace aqm {

// ---------------------------------------------------------------- service (2.2)

struct Service {
  enum class Kind { Geometric, Exponential };
  Kind kind = Kind::Geometric;
  /// Geometric: completion probability per slot, in (0, 1].
  /// Exponential (continuous time): service rate per unit time, > 0.
  double mu = 0.5;
  static Service geometric(double mu);
  static Service exponential(double mu);
  void validate(const std::string& prefix = "service") const;
};

// ---------------------------------------------------------------- AQM (2.3, 2.5)

enum class UpdateRule { PerSlot, PerArrival };
enum class DropPolicy { Tail, Front, Random };
/// The moving average (SPEC 2.3): RED's EWMA (weight w) or REDwM's recursion of
/// order (k, m) with coefficients a_1..a_k and b_0..b_m.
enum class FilterKind { Ewma, Redwm };

/// At most this many coefficients in each of REDwM's lists a and b.
constexpr int kMaxFilterCoefficients = 64;
/// The coefficients of a REDwM filter sum to 1 within this.
constexpr double kFilterSumTolerance = 1e-12;

struct Aqm {
  DropFunction drop = DropFunction::none();
  double w = 0.002;  ///< EWMA weight in (0, 1]
  UpdateRule update = UpdateRule::PerSlot;
  DropPolicy policy = DropPolicy::Tail;
  double ecn = 0.0;  ///< probability an arrival is ECN-capable
  FilterKind filter = FilterKind::Ewma;
  /// REDwM: A_t = sum_{j=1..k} a[j-1] A_{t-j} + sum_{i=0..m} b[i] q_{t-1-i}; a may be
  /// empty (k = 0), b holds at least b_0; all >= 0, summing to 1, sum(b) > 0.
  std::vector<double> a, b;
  /// `w_is_rate`: continuous time, where w is a rate per unit time (any w > 0).
  void validate(const std::string& prefix = "aqm", bool w_is_rate = false) const;
  /// a and b of the seed's triple [x, y, z] (SPEC 2.3): b_0 = x, b_1 = y, a_2 = z,
  /// a_1 = 1 - x - y - z.  Throws ModelError naming "<prefix>.triple[i]" (each in
  /// [0, 1]) or "<prefix>.triple" (x + y + z <= 1, x + y > 0).
  static void from_triple(const std::vector<double>& triple, std::vector<double>& a, std::vector<double>& b,
                          const std::string& prefix = "aqm");
  /// REDwM's effective order: k = index of the last non-zero a_j (0 when none), m = that of b_i.
  int order_k() const;
  int order_m() const;
};

// ---------------------------------------------------------------- model

/// Discrete (slotted, stochastic P) or continuous time (generator G), SPEC 1 and 6.
enum class TimeKind { Discrete, Continuous };
std::string to_string(TimeKind);
TimeKind time_kind_from(const std::string&);

struct Model {
  int buffer = 250;  ///< N, counts the packet in service
  TimeKind time = TimeKind::Discrete;
  Source source = Source::bernoulli(0.5);
  Service service;
  Aqm aqm;
  GridSpec grid;

  void validate() const;
  /// The drop function with defaults that depend on N filled in (SRED q_max).
  DropFunction resolved_drop() const;
};

std::string to_string(UpdateRule);
std::string to_string(DropPolicy);
std::string to_string(Mapping);
std::string to_string(Refine);
Refine refine_from(const std::string&);
std::string to_string(FilterKind);
UpdateRule update_rule_from(const std::string&);
DropPolicy drop_policy_from(const std::string&);
Mapping mapping_from(const std::string&);
FilterKind filter_kind_from(const std::string&);

}  // namespace aqm
