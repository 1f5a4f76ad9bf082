// Transition generator: what a model family supplies to the builder (the idea of
// Storm's NextStateGenerator).  From a state key it lists successor keys with
// their weights and fills the state's event weights; the builder explores the
// keys reachable from the initial states and assembles the matrix without
// naming any component.
//
// Discrete-time models (TimeKind::Discrete) emit probabilities: the row of the
// stochastic matrix P, summing to 1.  Continuous-time models
// (TimeKind::Continuous) emit the off-diagonal rates of the generator G (>= 0);
// the builder adds the diagonal so that rows sum to 0.  Event weights are
// probabilities per slot (discrete) or rates per unit time (continuous).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aqmchain/state/descriptor.hpp"
#include "aqmchain/state/time_kind.hpp"

namespace aqm {

/// Successors of one state: (key, weight) pairs; a key may appear more than once
/// (the builder merges duplicates).
using Successors = std::vector<std::pair<int64_t, double>>;

class TransitionGenerator {
 public:
  virtual ~TransitionGenerator() = default;
  virtual const StateSpace& space() const = 0;
  virtual TimeKind time() const = 0;
  /// Names of the per-state event weights successors() fills, in order.
  virtual const std::vector<std::string>& event_names() const = 0;
  /// Keys the exploration starts from.
  virtual std::vector<int64_t> initial_states() const = 0;
  /// Upper bound on the successors of one state (after merging), for memory estimates.
  virtual int max_successors() const = 0;
  /// Upper bound on the reachable states, for memory estimates (default: the product
  /// of the component sizes; a model whose components are strongly correlated, such
  /// as REDwM's A and s, gives a tighter one).
  virtual int64_t reachable_bound() const { return space().product(); }
  /// Whether reachable_bound() is close to the reachable count (a build above the memory
  /// budget by the bound is then refused before exploring).  False when most of the
  /// product is unreachable, e.g. drop spacing's count, which stays below about 1 / p_b(avg):
  /// the builder then explores and refuses only if the reachable states do not fit.
  virtual bool reachable_bound_tight() const { return true; }
  /// Append the successors of `key` to `out` (cleared by the caller) and, when
  /// `events` is not null, write event_names().size() weights to it.
  virtual void successors(int64_t key, Successors& out, double* events) const = 0;
};

}  // namespace aqm
