#include "aqmchain/state/time_kind.hpp"

#include "aqmchain/errors.hpp"

namespace aqm {

std::string to_string(TimeKind t) { return t == TimeKind::Discrete ? "discrete" : "continuous"; }
TimeKind time_kind_from(const std::string& s) {
  if (s == "discrete") return TimeKind::Discrete;
  if (s == "continuous") return TimeKind::Continuous;
  fail_param("model.time", "one of discrete, continuous", "'" + s + "'");
}

}  // namespace aqm
