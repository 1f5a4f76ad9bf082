// Umbrella header: model -> chain builder -> solvers -> metrics.
#pragma once
#include "aqmchain/chain.hpp"
#include "aqmchain/errors.hpp"
#include "aqmchain/metrics.hpp"
#include "aqmchain/model.hpp"
#include "aqmchain/response.hpp"
#include "aqmchain/simulator.hpp"
#include "aqmchain/solvers.hpp"
