// Discrete (slotted, stochastic P) or continuous time (generator G), SPEC 1 and 6:
// what a transition generator emits and what a chain's matrix is.
#pragma once

#include <string>

namespace aqm {

enum class TimeKind { Discrete, Continuous };
std::string to_string(TimeKind);
/// "discrete" or "continuous"; ModelError naming model.time otherwise.
TimeKind time_kind_from(const std::string&);

}  // namespace aqm
