// Shared test models.
#pragma once

#include "aqmchain/aqmchain.hpp"

namespace aqm::test {

/// Geo/Geo/1/N with the AQM off (w and the grid only shape the state space).
inline Model geo_model(int N, double alpha, double mu) {
  Model m;
  m.buffer = N;
  m.source = Source::bernoulli(alpha);
  m.service = Service::geometric(mu);
  m.aqm.drop = DropFunction::none();
  m.aqm.w = 0.5;
  m.grid.k = 1;
  return m;
}

}  // namespace aqm::test
