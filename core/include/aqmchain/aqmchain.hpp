// Umbrella header: model -> chain builder -> solvers -> metrics.
#pragma once
#include "aqmchain/state/chain.hpp"
#include "aqmchain/errors.hpp"
#include "aqmchain/analysis/metrics.hpp"
#include "aqmchain/model/model.hpp"
#include "aqmchain/analysis/response.hpp"
#include "aqmchain/simulation/simulator.hpp"
#include "aqmchain/solvers/stationary.hpp"
