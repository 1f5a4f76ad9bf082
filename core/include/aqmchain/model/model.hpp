// Model description (SPEC sections 2 and 4): what the queue is, not how it is solved.
//
// Every type validates on construction (factories) and again in Model::validate(),
// throwing aqm::ModelError with a message that names the parameter, the bound and
// the value.  Nothing here knows about state spaces or matrices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aqmchain/errors.hpp"
#include "aqmchain/model/drop.hpp"
#include "aqmchain/model/grid.hpp"
#include "aqmchain/model/source.hpp"
#include "aqmchain/state/time_kind.hpp"  // TimeKind: Model::time

namespace aqm {

// ---------------------------------------------------------------- service (2.2)

struct Service {
  enum class Kind { Geometric, Exponential };
  Kind kind = Kind::Geometric;
  /// Geometric: completion probability per slot, in (0, 1].
  /// Exponential (continuous time): service rate per unit time, > 0.
  double mu = 0.5;
  static Service geometric(double mu);
  static Service exponential(double mu);
  void validate(const std::string& prefix = "service") const;
};

// ---------------------------------------------------------------- AQM (2.3, 2.5)

enum class UpdateRule { PerSlot, PerArrival };
/// Whose RED rules the queue follows (docs/ns3.md): aqmchain's (the papers' models), or ns-3's
/// RedQueueDisc in continuous time (per-arrival EWMA jumps, idle-time correction, count spacing
/// with the first-arrival exemption, tests only when more than one packet waits).
enum class Semantics { Default, Ns3 };
enum class DropPolicy { Tail, Front, Random };
/// The moving average (SPEC 2.3): RED's EWMA (weight w) or REDwM's recursion of
/// order (k, m) with coefficients a_1..a_k and b_0..b_m.
enum class FilterKind { Ewma, Redwm };

/// At most this many coefficients in each of REDwM's lists a and b.
constexpr int kMaxFilterCoefficients = 64;
/// The coefficients of a REDwM filter sum to 1 within this.
constexpr double kFilterSumTolerance = 1e-12;
/// Drop spacing of the early-drop decision (docs/stateful-aqm.md): none (p_a = p_b),
/// count (Floyd & Jacobson: p_a = p_b / (1 - count p_b)), wait (ns-3: p_b / (2 - count p_b)
/// once count p_b >= 1, 0 before).
enum class Spacing { None, Count, Wait };
/// Adaptive RED's interval clock: a phase counter (exact) or an update in each slot with
/// probability 1/interval (geometric, same mean interval).
enum class AdaptiveClock { Exact, Geometric };
/// The EWMA weight: static (w) or AutoRED's dynamic weight (docs/stateful-aqm.md), with
/// P_t read as the drop function's value p(avg_{t-1}) or as q_{t-1} / N.
enum class Weight { Static, AutoRED };
enum class AutoredP { Drop, Queue };

/// Adaptive RED ("Adaptive RED: An Algorithm for Increasing the Robustness of RED's Active
/// Queue Management"): every `interval` slots p_max moves up by min(increment, p_max/4) if
/// avg > min_th + target_hi (max_th - min_th) and p_max <= p_max_high, down by the factor
/// `decrease` if avg < min_th + target_lo (max_th - min_th) and p_max >= p_max_low.
/// The chain keeps p_max on a uniform grid of step p_max_step through the start value.
struct Adaptive {
  bool enabled = false;
  int64_t interval = 5000;  ///< slots between updates (mean interval for the geometric clock)
  double target_lo = 0.4, target_hi = 0.6;
  double increment = 0.01;  ///< the additive step is min(increment, p_max / 4)
  double decrease = 0.9;
  double p_max_high = 0.5, p_max_low = 0.01;
  AdaptiveClock clock = AdaptiveClock::Geometric;
  double p_max_step = 0.0025;       ///< chain (and discretised simulation): p_max grid step
  double max_clock_states = 2e6;    ///< exact clock: refuse product spaces larger than this
  void validate(const std::string& prefix = "aqm") const;
};

/// Modified RED for mice and ECN-capable packets ("Modified RED Algorithm to Improve The
/// Performance of Web Traffic"; rules and readings in docs/classes.md): below max_th an early
/// drop admits the arrival and discards a waiting elephant (neither mice nor ECN-capable)
/// instead: the first from the head (`Front`) or one found in up to three uniform picks among
/// the waiting packets (`Random`; the third pick is discarded if none was an elephant).
enum class Modified { None, Front, Random };

/// Ranges of the integer model keys (the bindings expose them; Python and the docs read them).
constexpr int kMaxBuffer = 10000000;             ///< model.buffer in [1, kMaxBuffer]
constexpr int kMaxCountMax = 100000000;          ///< aqm.count_max in [1, kMaxCountMax]
constexpr double kMaxCountTail = 1e-3;           ///< aqm.count_tail in [0, kMaxCountTail]
constexpr int64_t kMaxAdaptiveInterval = 1000000000000LL;  ///< aqm.interval in [1, kMaxAdaptiveInterval] slots

/// At most this many traffic classes, and flows over all classes.
constexpr int kMaxClasses = 64;
constexpr int kMaxFlows = 1000000;
/// Class shares (and flow weights) sum to 1 within this.
constexpr double kShareSumTolerance = 1e-12;

/// One traffic class: arrivals are of class c with probability share[m] in modulator state m.
struct TrafficClass {
  std::string name;                  ///< unique, [A-Za-z0-9_-]+
  std::vector<double> share;         ///< one value (every modulator state) or one per modulator state
  double ecn = 0.0;                  ///< probability an arrival of the class is ECN-capable
  bool mice = false;                 ///< protected by modified RED
  int flows = 1;                     ///< F_c >= 1
  std::vector<double> flow_weights;  ///< empty: uniform over the F_c flows; else F_c weights summing to 1
  /// Ranges of this class alone ("<prefix>.share[i]", ...); the shares' sums are the model's.
  void validate(const std::string& prefix, int modulator_states) const;
  /// The share in modulator state m (a single value holds in every state).
  double share_in(int m) const { return share.size() == 1 ? share[0] : share[static_cast<size_t>(m)]; }
  /// Probability of flow f in 0..flows-1.
  double flow_weight(int f) const { return flow_weights.empty() ? 1.0 / flows : flow_weights[static_cast<size_t>(f)]; }
};

struct Aqm {
  DropFunction drop = DropFunction::none();
  double w = 0.002;  ///< EWMA weight in (0, 1]
  UpdateRule update = UpdateRule::PerSlot;
  DropPolicy policy = DropPolicy::Tail;
  double ecn = 0.0;  ///< probability an arrival is ECN-capable
  Spacing spacing = Spacing::None;
  int count_max = 10000;  ///< largest count the chain may carry (spacing count / wait)
  /// Largest stationary mass allowed at a truncated count's cap (docs/stateful-aqm.md): the
  /// stationary solve enlarges the cap until the mass at it is at most this.
  double count_tail = 1e-12;
  /// The count's working cap (not a model-file key): 0 = the exact cap (p_a = 1 beyond it);
  /// c > 0 = min(c, exact cap), the count saturating at c. Set by the stationary solve.
  int64_t count_trunc = 0;
  /// Per avg grid point (the resolved grid's order), the count's working cap there (a count
  /// entering that point saturates at it); empty: count_trunc everywhere. Not a model-file key.
  std::vector<int64_t> count_trunc_at;
  Adaptive adaptive;
  Weight weight = Weight::Static;
  AutoredP autored_p = AutoredP::Drop;
  /// Dynamic max_th (FDynamicAutoRED's rule, docs/stateful-aqm.md): cur_max_th in
  /// {max_th, max_th (1 + max_th_growth)}, with P_t read as `autored_p` says.
  bool dynamic_max_th = false;
  double max_th_growth = 0.1;
  /// Modified RED (mice / ECN protection); needs a drop function with min_th, max_th.
  Modified modified = Modified::None;
  /// FDynamicAutoRED's flow comparison (after CHOKe): when avg >= min_th an arrival is compared with
  /// one uniformly chosen waiting packet; if both belong to the same flow both are dropped.
  bool flow_compare = false;
  /// Whether the AQM keeps state beyond avg (spacing or adaptive p_max).
  bool stateful() const { return spacing != Spacing::None || adaptive.enabled || dynamic_max_th; }
  FilterKind filter = FilterKind::Ewma;
  /// ns-3 semantics (docs/ns3.md): w is then QW, the weight of each arrival's update.
  Semantics semantics = Semantics::Default;
  /// ns-3's packet time constant m_ptc (packets per unit time) of the idle-time correction;
  /// 0: the service rate.
  double ptc = 0.0;
  /// ns-3's idle-time correction (avg decays by (1 - QW)^k, k = floor(ptc x idle time)).
  bool idle_correction = true;
  /// ns-3's UseHardDrop: forced decisions (p_b >= 1) always drop, even ECN-capable arrivals.
  bool hard_drop = true;
  bool ns3() const { return semantics == Semantics::Ns3; }
  /// REDwM: A_t = sum_{j=1..k} a[j-1] A_{t-j} + sum_{i=0..m} b[i] q_{t-1-i}; a may be
  /// empty (k = 0), b holds at least b_0; all >= 0, summing to 1, sum(b) > 0.
  std::vector<double> a, b;
  /// `w_is_rate`: continuous time, where w is a rate per unit time (any w > 0).
  void validate(const std::string& prefix = "aqm", bool w_is_rate = false) const;
  /// a and b of the seed's triple [x, y, z] (SPEC 2.3): b_0 = x, b_1 = y, a_2 = z,
  /// a_1 = 1 - x - y - z.  Throws ModelError naming "<prefix>.triple[i]" (each in
  /// [0, 1]) or "<prefix>.triple" (x + y + z <= 1, x + y > 0).
  static void from_triple(const std::vector<double>& triple, std::vector<double>& a, std::vector<double>& b,
                          const std::string& prefix = "aqm");
  /// REDwM's effective order: k = index of the last non-zero a_j (0 when none), m = that of b_i.
  int order_k() const;
  int order_m() const;
};

// ---------------------------------------------------------------- model

struct Model {
  int buffer = 250;  ///< N, counts the packet in service
  TimeKind time = TimeKind::Discrete;
  Source source = Source::bernoulli(0.5);
  Service service;
  Aqm aqm;
  GridSpec grid;
  /// Traffic classes (docs/classes.md); empty = one implicit class whose ECN probability is aqm.ecn.
  std::vector<TrafficClass> classes;

  void validate() const;
  /// max(1, classes.size())
  int class_count() const { return classes.empty() ? 1 : static_cast<int>(classes.size()); }
  /// Probability that an arrival in modulator state m is of class c (1 for the implicit class).
  double class_share(int c, int m) const { return classes.empty() ? 1.0 : classes[static_cast<size_t>(c)].share_in(m); }
  /// classes[c].ecn, or aqm.ecn for the implicit class.
  double class_ecn(int c) const { return classes.empty() ? aqm.ecn : classes[static_cast<size_t>(c)].ecn; }
  /// Whether class c is protected by modified RED (false for the implicit class).
  bool class_mice(int c) const { return !classes.empty() && classes[static_cast<size_t>(c)].mice; }
  /// The class name ("all" for the implicit class).
  std::string class_name(int c) const { return classes.empty() ? std::string("all") : classes[static_cast<size_t>(c)].name; }
  /// Flows of class c (1 for the implicit class) and over all classes.
  int class_flows(int c) const { return classes.empty() ? 1 : classes[static_cast<size_t>(c)].flows; }
  int total_flows() const;
  /// The drop function with defaults that depend on N filled in (SRED q_max).
  DropFunction resolved_drop() const;
};

std::string to_string(UpdateRule);
std::string to_string(Semantics);
Semantics semantics_from(const std::string&);
std::string to_string(Modified);
Modified modified_from(const std::string&);
std::string to_string(Spacing);
std::string to_string(AdaptiveClock);
Spacing spacing_from(const std::string&);
std::string to_string(Weight);
std::string to_string(AutoredP);
Weight weight_from(const std::string&);
AutoredP autored_p_from(const std::string&);
AdaptiveClock clock_from(const std::string&);
std::string to_string(DropPolicy);
std::string to_string(Mapping);
std::string to_string(Refine);
Refine refine_from(const std::string&);
std::string to_string(FilterKind);
UpdateRule update_rule_from(const std::string&);
DropPolicy drop_policy_from(const std::string&);
Mapping mapping_from(const std::string&);
FilterKind filter_kind_from(const std::string&);

}  // namespace aqm
