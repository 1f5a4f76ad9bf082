// Internal: the chain of ns-3's RedQueueDisc in continuous time (docs/ns3.md).
#pragma once

#include <memory>
#include <vector>

#include "aqmchain/model/model.hpp"
#include "aqmchain/state/generator.hpp"

namespace aqm::detail {

/// At most this many packet times 1 / ptc in an idle period (with probability 1 - 1e-17).
constexpr int kMaxIdleSteps = 1000000;

/// The idle-time correction's law: law[i][j][k] = P(k = floor(ptc T) | the server went idle in
/// modulator state i, the next arrival comes in state j), T the idle period (exact for Poisson
/// and MMPP arrivals).
std::vector<std::vector<std::vector<double>>> idle_step_law(const Source& source, double ptc);

/// The generator of a model with aqm.semantics = "ns3" (continuous time).
std::unique_ptr<TransitionGenerator> ns3_generator(const Model& model);

}  // namespace aqm::detail
