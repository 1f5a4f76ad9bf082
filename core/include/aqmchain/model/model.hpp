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

struct Aqm {
  DropFunction drop = DropFunction::none();
  double w = 0.002;  ///< EWMA weight in (0, 1]
  UpdateRule update = UpdateRule::PerSlot;
  DropPolicy policy = DropPolicy::Tail;
  double ecn = 0.0;  ///< probability an arrival is ECN-capable
  /// `w_is_rate`: continuous time, where w is a rate per unit time (any w > 0).
  void validate(const std::string& prefix = "aqm", bool w_is_rate = false) const;
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
UpdateRule update_rule_from(const std::string&);
DropPolicy drop_policy_from(const std::string&);
Mapping mapping_from(const std::string&);

}  // namespace aqm
