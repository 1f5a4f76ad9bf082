// Umbrella header, by layer: model -> state (descriptor, generator, builder) ->
// operators -> solvers -> analysis; simulation reads the model only.
#pragma once
#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"
#include "aqmchain/model/filter.hpp"
#include "aqmchain/model/model.hpp"
#include "aqmchain/model/queue_generator.hpp"
#include "aqmchain/model/scenario.hpp"
#include "aqmchain/state/descriptor.hpp"
#include "aqmchain/state/generator.hpp"
#include "aqmchain/state/chain.hpp"
#include "aqmchain/operators/operator.hpp"
#include "aqmchain/solvers/stationary.hpp"
#include "aqmchain/analysis/metrics.hpp"
#include "aqmchain/analysis/response.hpp"
#include "aqmchain/simulation/simulator.hpp"
#include "aqmchain/simulation/ensemble.hpp"
