// The queue models' chains: their generators handed to the generic builder.
#include "aqmchain/model/queue_chain.hpp"

#include <memory>
#include <string>
#include <utility>

#include "aqmchain/errors.hpp"

namespace aqm {

QueueChain::QueueChain(Chain chain, const Model& m, std::vector<double> g)
    : Chain(std::move(chain)), model(m), grid(std::move(g)) {}

const std::vector<int32_t>& QueueChain::grid_index() const { return component(component::avg); }

namespace {
/// Rough costs on one core of this library's reference machine (2 cores, shared), for the
/// time estimate only: building per transition of the bound (the bound is often several
/// times the chain: 9 s for the 4.0M-state class chain whose bound is 259M transitions), and
/// the stationary solve per state of the bound (krylov on a plain chain: 13 s for 4.4M
/// states; multilevel on that class chain 30 s; krylov on a 2M-state drop-spacing chain
/// 170 s: the coupled structures mix more slowly).
constexpr double kBuildSecondsPerTransition = 5e-8;
constexpr double kSolveSecondsPerStatePlain = 3e-6;
constexpr double kSolveSecondsPerStateCoupled = 2e-5;

std::string structure_of(const StateSpace& space) {
  const bool classes = space.find(component::class2) >= 0 || space.find(component::sequence) >= 0 ||
                       space.find(component::window) >= 0;
  const bool stateful = space.find(component::count) >= 0 || space.find(component::pmax) >= 0 ||
                        space.find(component::maxth) >= 0 || space.find(component::phase) >= 0;
  return classes && stateful ? "classes+stateful" : classes ? "classes" : stateful ? "stateful" : "plain";
}

void add_time(ChainEstimate& e, const TransitionGenerator& g) {
  e.structure = structure_of(g.space());
  const double states = static_cast<double>(e.reachable_bound);
  e.build_seconds = static_cast<double>(e.max_nnz) * kBuildSecondsPerTransition;
  e.solve_seconds = states * (e.structure == "plain" ? kSolveSecondsPerStatePlain : kSolveSecondsPerStateCoupled);
  e.large = e.reachable_bound >= kLargeStates || e.build_seconds + e.solve_seconds >= kLargeSeconds;
}

/// The model with an automatic grid replaced by its uniform 1/k grid (before refinement).
Model uniform_grid(const Model& model) {
  Model m = model;
  if (m.grid.refine == Refine::Auto) m.grid.refine = Refine::None;
  return m;
}
}  // namespace

ChainEstimate estimate_chain(const Model& model, ClassChain classes) {
  model.validate();
  const auto g = queue_generator(uniform_grid(model), classes);
  ChainEstimate e = estimate_chain(*g);
  add_time(e, *g);
  return e;
}

QueueChain build_chain(const TransitionGenerator& generator, const Model& model, const BuildOptions& options) {
  std::vector<double> grid = model.grid.resolve(model.buffer);  // refuses an unresolved automatic grid first
  return QueueChain(build_chain(generator, options), model, std::move(grid));
}

QueueChain build_chain(const Model& model, const BuildOptions& options, ClassChain classes) {
  model.validate();
  const auto gen = queue_generator(model, classes, options.class_window);
  QueueChain c = build_chain(*gen, model, options);
  if (model.grid.mapping == Mapping::Nearest)
    c.report.warnings.push_back(detail::cat(
        "grid.mapping = \"nearest\" freezes avg whenever w |q - avg| < h/2 (here |q - avg| < ",
        0.5 * (c.grid[1] - c.grid[0]) / model.aqm.w, " packets on the first cell); prefer \"split\""));
  return c;
}

ReachableCount count_reachable(const Model& model, const BuildOptions& options) {
  model.validate();
  return count_reachable(*queue_generator(uniform_grid(model)), options);
}

std::vector<QueueChain> build_scenario_chains(const Scenario& scenario, const BuildOptions& options) {
  scenario.validate();
  std::vector<std::unique_ptr<TransitionGenerator>> gens;
  std::vector<const TransitionGenerator*> explorers;
  for (const Phase& ph : scenario.phases) {
    gens.push_back(queue_generator(ph.model));
    explorers.push_back(gens.back().get());
  }
  for (size_t i = 1; i < gens.size(); ++i)
    if (!(gens[i]->space() == gens[0]->space()))
      throw ModelError(detail::cat("phase[", i, "]"),
                       detail::cat("phase[", i, "] has another state space than phase[0] (the phases of a scenario "
                                   "share one state space: same buffer, grid, source kind and modulator size)"));
  std::vector<Chain> chains = build_chains(explorers, options);
  std::vector<QueueChain> out;
  out.reserve(chains.size());
  for (size_t i = 0; i < chains.size(); ++i) {
    const Model& m = scenario.phases[i].model;
    out.emplace_back(std::move(chains[i]), m, m.grid.resolve(m.buffer));
  }
  return out;
}

}  // namespace aqm
