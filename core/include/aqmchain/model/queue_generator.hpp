// The transition generator of the queue models (SPEC 3 and 6): state (n, avg
// grid index, [REDwM: s grid index,] modulator), successors from the slot kernel (discrete time) or
// the rate kernel (continuous time).  This is the one place where the queue's
// components are named for the builder.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "aqmchain/model/model.hpp"
#include "aqmchain/state/generator.hpp"

namespace aqm {

/// Component names of the queue models' descriptor, in key order.
namespace component {
inline const std::string level = "level";      ///< n: packets in the system (waiting + in service)
inline const std::string avg = "avg_index";    ///< index of avg on the grid (REDwM: of A)
inline const std::string s = "s_index";        ///< REDwM only: index of s on its grid (model/filter.hpp)
inline const std::string modulator = "modulator";  ///< source modulator state
inline const std::string count = "count";          ///< drop spacing: count + 1 (count in -1..cap)
inline const std::string pmax = "pmax_index";      ///< adaptive RED: index of p_max on its grid
inline const std::string maxth = "maxth_index";   ///< dynamic max_th: 0 = max_th, 1 = raised
inline const std::string phase = "phase";          ///< adaptive RED, exact clock: slots since the last update
inline const std::string class2 = "class2";        ///< two-class chain: class-2 packets in the system (docs/classes.md)
inline const std::string head = "head_class";      ///< two-class chain: class of the packet in service (0, 1)
inline const std::string sequence = "sequence";    ///< exact class chain: the FIFO's packet types, base-A digits
inline const std::string window = "window";      ///< window class chain: head, window classes, class-2 behind (docs/classes.md)
inline const std::string idle = "idle_modulator";  ///< ns-3 semantics, MMPP: the modulator state when the server went idle (n = 0)
}  // namespace component

/// Event names of the queue models, in the order of their weights.
namespace event {
inline const std::string arrival = "arrival";    ///< an arrival
inline const std::string aqm_drop = "aqm_drop";  ///< an AQM drop (not marked)
inline const std::string mark = "mark";          ///< an ECN mark
inline const std::string overflow = "overflow";  ///< an overflow drop
inline const std::string admit = "admit";        ///< an arrival admitted (n grows by it)
inline const std::string depart = "depart";      ///< a departure
}  // namespace event
const std::vector<std::string>& queue_event_names();

/// Which chain a model with traffic classes gets (docs/classes.md): the two-class chain
/// with the random-order approximation (`Approx`, state adds class2 and head_class), or
/// the exact chain that carries the FIFO's sequence of packet types (`Exact`, small N).
enum class ClassChain { Approx, Exact, Window };
std::string to_string(ClassChain);
ClassChain class_chain_from(const std::string&);

/// Whether `model` needs a class chain: two or more classes, modified RED or the flow
/// comparison.  Otherwise the queue chain is the plain one (a single class is the whole
/// traffic).
bool needs_class_chain(const Model& model);

/// Per-class event names of a class chain: "<event>.c<k>" for class k = 1..C, with
/// <event> one of arrival, admit, aqm_drop, overflow, flow_compare, pushed_out, mark,
/// depart, in_system (packets of class k in the system: a state function, not a rate).
std::string class_event(const std::string& ev, int k);
namespace event {
inline const std::string flow_compare = "flow_compare";  ///< packets lost to the flow comparison
inline const std::string pushed_out = "pushed_out";      ///< queued packets discarded (a part of the losses)
inline const std::string in_system = "in_system";        ///< per class: packets of the class in the system
}  // namespace event

/// The exact chain's bound: the number of sequences sum_{n=0..N} A^n (A packet types).
constexpr double kMaxExactSequences = 65536;

/// The descriptor of `model`'s queue chain: n in 0..N, avg on the resolved grid,
/// (REDwM: s on its grid,) the modulator (not coarsened by multilevel aggregation).
StateSpace queue_state_space(const Model& model);

/// The chain's view of a stateful AQM (docs/stateful-aqm.md): count in -1..count_cap
/// (spacing), the p_max grid and its start index (adaptive), the exact clock's phases.
struct StatefulInfo {
  int64_t count_cap = 0;
  int64_t count_cap_exact = 0;  ///< the exact cap; count_cap below it: the count is truncated
  int64_t count_start = 0;      ///< the stationary solve's first cap (docs/stateful-aqm.md)
  std::vector<int64_t> count_cap_at;    ///< per avg point: the count's cap there (empty: count_cap)
  std::vector<int64_t> count_start_at;  ///< per avg point: the stationary solve's first cap there
  bool count_truncated = false;         ///< a cap below the exact one somewhere
  std::vector<double> pmax;
  int pmax_start = 0;
  int64_t phases = 1;
};
StatefulInfo stateful_info(const Model& model);

/// Generator of the queue chain of a validated model (discrete or continuous).
/// A model with classes (needs_class_chain) gets the class chain `classes` asks for.
/// `class_window`: the window chain's length (BuildOptions::class_window; 0 the default).
std::unique_ptr<TransitionGenerator> queue_generator(const Model& model, ClassChain classes = ClassChain::Approx,
                                                     int class_window = 0);

/// The plain queue chain of a model with classes whose dynamics are class-blind (no
/// modified RED, no flow comparison; ECN mixed per modulator state): the exact lumping of
/// its class chains onto (n, avg, modulator) and the stateful AQM's components, if any.
/// Throws ModelError naming the feature otherwise.
std::unique_ptr<TransitionGenerator> lumped_queue_generator(const Model& model);

/// The class chain's generator (docs/classes.md); throws ModelError naming `class` (or the
/// combination) when the model is outside what the class chains build.
std::unique_ptr<TransitionGenerator> class_generator(const Model& model, ClassChain classes, int class_window = 0);
/// The window chain's default length (waiting positions carried in order) and the largest allowed.
constexpr int kClassWindow = 4, kClassWindowMax = 16;

}  // namespace aqm
