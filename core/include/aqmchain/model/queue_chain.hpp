// The chain of a queue model: the state layer's Chain (matrix, descriptor, labels,
// events) with what the analysis of the queue reads, the model and avg's grid.  The
// builder functions here make the queue's generator (queue_generator.hpp) and hand it
// to the generic builder (state/chain.hpp), which knows no model.
#pragma once

#include <vector>

#include "aqmchain/model/model.hpp"
#include "aqmchain/model/queue_generator.hpp"
#include "aqmchain/model/scenario.hpp"
#include "aqmchain/state/chain.hpp"

namespace aqm {

class QueueChain : public Chain {
 public:
  QueueChain() = default;
  /// The generic chain `chain` of `model`'s generator, with the model and its resolved grid.
  QueueChain(Chain chain, const Model& model, std::vector<double> grid);
  Model model;               ///< the model the chain was built from
  std::vector<double> grid;  ///< avg grid points g_0 .. g_L
  /// Each state's index on `grid` (the filter's avg, REDwM's A is at grid[grid_index()[s]]):
  /// the labels of the component the queue generator keeps it in.
  const std::vector<int32_t>& grid_index() const;
};

/// Explore, assemble and classify the chain of `model` (validated first); `classes`: the
/// class chain of a model with traffic classes (docs/classes.md).
QueueChain build_chain(const Model& model, const BuildOptions& options = {}, ClassChain classes = ClassChain::Approx);
/// The same for any generator; `model` supplies what analysis reads (buffer,
/// grid, service, policy).  Used for models assembled from components by hand.
QueueChain build_chain(const TransitionGenerator& generator, const Model& model, const BuildOptions& options = {});

/// An automatic grid: its uniform 1/k before refinement; `classes`: the class chain built.
/// Adds the rough build and solve seconds and the structure ("plain", "classes", "stateful"
/// or "classes+stateful") to the generator's bounds.
ChainEstimate estimate_chain(const Model& model, ClassChain classes = ClassChain::Approx);

/// Explore the states of `model` (validated first; an automatic grid is explored
/// on its uniform 1/k grid, as in estimate_chain) within the memory budget.
ReachableCount count_reachable(const Model& model, const BuildOptions& options = {});

/// One chain per phase of `scenario` (validated first), all on the same states:
/// the union of the states reachable under any phase's parameters, numbered
/// once, so a probability vector of one phase's chain is one of every other's.
/// Each chain has its phase's matrix, events and model.  A phase's chain may have
/// transient states (reachable only under another phase).
std::vector<QueueChain> build_scenario_chains(const Scenario& scenario, const BuildOptions& options = {});

}  // namespace aqm
