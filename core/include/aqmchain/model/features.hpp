// The stateful AQM's features (drop spacing, adaptive RED, AutoRED's weight, the dynamic
// max_th) and the moving averages (aqm.filter): tables of their switches and the keys each one
// reads, written once.
#pragma once

#include <string>
#include <vector>

#include "aqmchain/model/model.hpp"

namespace aqm {

/// One switchable AQM feature: the registry entry.
struct AqmFeature {
  std::string name;               ///< the switch's key ("adaptive", "spacing", ...)
  std::string off;                ///< the switch's value when off, as a model file writes it
  std::vector<std::string> keys;  ///< the keys only this feature reads (dropped with it when it is switched off)
  bool refuse_when_off;           ///< a key of `keys` given while the feature is off is an error naming it
  std::string doc;                ///< one line
  std::string on = "true";        ///< a value that switches it on, as errors write it
};

/// Every stateful AQM feature (docs/stateful-aqm.md).
const std::vector<AqmFeature>& aqm_features();

/// One moving average (aqm.filter): the registry entry.
struct FilterSpec {
  FilterKind kind;
  std::string name;               ///< the value of aqm.filter
  std::vector<std::string> keys;  ///< the aqm keys it reads (refused with the other filters)
  std::string doc;
};

/// Every moving average, in the order of FilterKind.
const std::vector<FilterSpec>& filter_kinds();

}  // namespace aqm
