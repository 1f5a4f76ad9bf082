// The differences of a chain's matrix along one parameter, contracted with the stationary
// vector and adjoint vectors, row by row (docs/sensitivities.md).
//
// For the derivative of a metric along theta the adjoint method needs
//
//   pi (dP/dtheta) y_j     for the adjoint vectors y_j (one per metric),
//
// and the derivatives of the event weights.  With P+ and P- the matrices of the models at
// theta + h and theta - h, the central difference is pi (P+ - P-) y_j / (2h): each state's
// row is generated at both sides by the models' transition generators on the chain's own
// states and multiplied into y at once, so no chain is explored or assembled and no matrix
// is kept.  The rows are merged as the builder merges them (duplicates summed, in the order
// the generator gives them; continuous time: self-loops dropped, the diagonal minus the row's
// out-rate), and an entry
// one side has and another lacks counts as 0 there, so the result is the product with the
// difference of the two chains the builder would give, when those chains have the base
// chain's states.  They do when every successor is a state of the base chain, the
// descriptor and the initial states are the same, and no entry of the base chain is missing
// at a side (a side whose rows only gain entries reaches the same states).  A successor
// outside the chain's states adds states at that side: they are explored and returned with
// their rows (`added_plus`, `added_minus`), so that the caller can form the one-sided
// derivative on the union of the states.  A missing entry is reported per side
// (`plus_drops`, `minus_drops`): the caller then builds the chains.  Smoothness across [theta - h, theta + h]
// is reported as the supports' changes and the largest excess of |dp - dm| over a quarter of
// |dp| + |dm| (dp = P+ - P, dm = P - P-, entry by entry, and the same for the event weights).
//
// A second, smaller step (`SmallStep`, h_s < h) is taken in the same pass on the rows that are
// not smooth at h (their supports change, they lack an entry, or their own excess exceeds the
// kink tolerance times their own scale): those rows are generated again at theta +- h_s, and
// the others keep their central quotient at h.  The result at the small step (`small`) is that
// of the "effective" sides P_s+- : the rows generated at theta +- h_s where a row was redone,
// and P +- h_s (P+ - P-) / (2h) elsewhere.  Its one-sided quotients are then the right and
// left derivatives where only the redone rows have kinks, with the smooth rows' central
// quotient at h (second order) instead of a one-sided one at h_s; its central quotient is the
// central one at h_s where every redone row is smooth there.  A threshold that sits on a grid
// point kinks a few rows, so a parameter that is not smooth costs one pass, not two.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aqmchain/state/chain.hpp"
#include "aqmchain/state/generator.hpp"

namespace aqm {

/// The states a side reaches that the base chain lacks (an update that landed exactly on a
/// grid point now splits onto a neighbour), explored from the base rows' entries into them.
struct AddedStates {
  std::vector<int64_t> keys;                 ///< sorted; state n + i of the side's chain is keys[i]
  std::vector<std::vector<int32_t>> labels;  ///< per component (descriptor order), per added state
  std::vector<std::vector<double>> events;   ///< per event, per added state
  /// The added states' rows (merged as the builder merges them): columns < n are the base
  /// chain's states, n + i the i-th added state.
  std::vector<int32_t> rowptr, col;
  std::vector<double> val;
  std::vector<double> inflow;  ///< per added state t: sum_s pi_s P_side[s, t] over the base states s
  int64_t count() const { return static_cast<int64_t>(keys.size()); }
};

struct ChainDifference {
  /// The chains at both sides have the base chain's states (see above).  When false only `why`
  /// is filled.
  bool valid = false;
  std::string why;  ///< why not, when valid is false
  /// Whether a side's rows have exactly the base rows' entries (else they gain some), and
  /// whether the two sides have the same entries.
  bool plus_same_support = true, minus_same_support = true, sides_same_support = true;
  /// The states each side adds (none: the side has the base chain's states, given no drops).
  /// The products above leave out the entries into them (their y is not known).
  AddedStates added_plus, added_minus;
  /// Whether a side lacks an entry of the base chain (its chain might not reach every state:
  /// its differences are then only good for the distances below).
  bool plus_drops = false, minus_drops = false;
  /// Per adjoint vector j: sum_s pi_s sum_t (P+ - P-)_st y_j,t / (2h) (continuous time: G).
  std::vector<double> products;
  /// Per adjoint vector j: pi (P+ - P) y_j and pi (P- - P) y_j (not divided by h: the one-sided
  /// differences where P is not smooth, or a bound's second-order difference with `minus` at
  /// theta + 2h).
  std::vector<double> products_plus, products_minus;
  /// max |P+ - P| and max |P- - P| over the entries and the event weights.
  double distance_plus = 0.0, distance_minus = 0.0;
  /// Per event (the base chain's event_names order), per state: the weights at theta + h and
  /// theta - h (empty for an event not kept, see chain_difference).
  std::vector<std::vector<double>> events_plus, events_minus;
  /// max over the entries of P and the event weights of |dp - dm| - (|dp| + |dm|) / 4, and of
  /// max(|dp|, |dm|).
  double kink_excess = 0.0, kink_scale = 0.0;
  double seconds = 0.0;
  /// With a second step: per state 1 where the row was generated again at the small step, their
  /// number, and max |P+ - P| and max |P- - P| over those rows at h (P's change there at the
  /// step h, for a test whether P jumps).
  std::vector<uint8_t> redone;
  int64_t rows_redone = 0;
  double redone_distance_plus = 0.0, redone_distance_minus = 0.0;
  /// With a second step: the fields above at the small step for the effective sides (see the
  /// top of this file; `products` divided by 2 h_s).  The supports, drops, distances and added
  /// states are those of the redone rows; `kink_scale` also counts the other rows' entries at h
  /// scaled by h_s / h; `events_plus` / `events_minus` are the redone rows' weights at
  /// theta +- h_s and the weights at theta +- h elsewhere.  Null without a second step, when no
  /// row was redone (every row is smooth at h), when the small step adds more than
  /// `max_added` states (a pass of its own refuses the same), or when `valid` is false.
  std::unique_ptr<ChainDifference> small;
  /// In `small`: max |P_s+- - P| over the kept rows' entries and event weights, h_s / (2h)
  /// |P+ - P-| (with the redone rows' distances, the effective sides' largest change).
  double kept_distance = 0.0;
};

/// The adjoint vectors y_j as the columns of a row-major n x J matrix (y_j at state t is
/// data[t J + j]): the J values an entry of P is multiplied into are adjacent (one or two
/// cache lines instead of J scattered reads).
struct Adjoints {
  const double* data;
  size_t count;
  Adjoints(const double* d, size_t j) : data(d), count(j) {}
  size_t size() const { return count; }
};

/// The generators at theta +- h_s for the rows that are not smooth at h, and the relative
/// excess over which a row counts as not smooth (a row's excess above kink_tolerance times
/// its own scale).
struct SmallStep {
  const TransitionGenerator* plus = nullptr;
  const TransitionGenerator* minus = nullptr;
  double h = 0.0;
  double kink_tolerance = 0.0;
};

/// The difference along one parameter of `base` (built from a generator of the same family)
/// between the generators at theta + h (`plus`) and theta - h (`minus`, or any other point for
/// the raw products), h > 0; `pi` the
/// stationary vector and `adjoints` the vectors y_j (of the chain's size: the caller checks);
/// a side that adds more than `max_added` states leaves the result invalid.  `small`: the
/// second step (0 < h_s < h) taken on the rows not smooth at h, or null.  `events_kept`: one
/// flag per event (the base chain's event_names order), its weights returned in `events_plus` /
/// `events_minus` when set (the others are left empty; every event still counts in the
/// smoothness test and the distances); empty: every event.  Runs over the
/// states on the core's threads; honours check_interrupt().
ChainDifference chain_difference(const Chain& base, const TransitionGenerator& plus, const TransitionGenerator& minus,
                                 double h, const double* pi, const Adjoints& adjoints,
                                 int64_t max_added, const SmallStep* small = nullptr,
                                 const std::vector<char>& events_kept = {});

}  // namespace aqm
