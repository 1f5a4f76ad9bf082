// Metrics of SPEC section 5 from a stationary vector.
#pragma once

#include <string>
#include <vector>

#include "aqmchain/model/queue_chain.hpp"
#include "aqmchain/analysis/response.hpp"

namespace aqm {

struct MetricsOptions {
  /// The response-time pmf is extended until the mass not yet placed is below this.
  double response_tail = 1e-16;
  /// ... or until this many slots (the rest is reported as `response_truncated`).
  long response_max_len = 20000000;
  /// "auto": closed form under tail, tagged-packet chain under front/random;
  /// "tagged": the tagged chain for every policy (a cross-check under tail);
  /// "none": skip response times.
  std::string response = "auto";
  ResponseOptions tagged;  ///< options of the tagged-packet chain
};

/// Metrics of one traffic class (docs/classes.md).  Rates are per slot; losses are the
/// class's packets lost per arrival of the class, by disjoint causes: loss_aqm (the
/// arrival dropped by an AQM decision), loss_overflow (the arrival dropped on a full
/// buffer), loss_flow_compare (the arrival or a queued packet lost to the flow
/// comparison), loss_pushed_out (a queued packet discarded by the front / random drop
/// policy or modified RED's search); loss is their sum.
struct ClassMetrics {
  std::string name;
  double arrival_rate = 0, loss = 0, loss_aqm = 0, loss_overflow = 0, loss_flow_compare = 0, loss_pushed_out = 0;
  double mark_prob = 0;
  double throughput = 0;        ///< departures of the class per slot
  double throughput_share = 0;  ///< throughput / total throughput
  double mean_queue = 0;        ///< mean packets of the class in the system (waiting + in service)
  double queue_share = 0;       ///< mean_queue / mean packets in the system
  bool response_available = false;
  std::string response_note;
  std::vector<double> response_pmf;  ///< R of the class's served packets, index r = 0, 1, ...
  double mean_response = 0, var_response = 0;
};

struct Metrics {
  double arrival_rate = 0;   ///< lambda = P(arrival in a slot)
  double throughput = 0;     ///< P(departure in a slot)
  double loss = 0;           ///< (AQM drops + overflow drops) / arrivals
  double loss_aqm = 0;       ///< AQM drops / arrivals (marks are not losses)
  double loss_overflow = 0;  ///< overflow drops / arrivals
  double mark_prob = 0;      ///< ECN marks / arrivals
  double aqm_decision_prob = 0;  ///< (AQM drops + marks) / arrivals
  double loss_flow_compare = 0;  ///< packets lost to the flow comparison / arrivals (part of loss)

  std::vector<double> system_pmf;  ///< n = 0..N
  std::vector<double> queue_pmf;   ///< q = max(n - 1, 0) = 0..N-1
  std::vector<double> avg_pmf;     ///< on the grid points
  double mean_system = 0, var_system = 0, mean_queue = 0, var_queue = 0, mean_avg = 0;

  /// Response time R = D - A (SPEC 5) of packets that are served.
  bool response_available = false;
  std::string response_note;
  std::string response_method;    ///< "closed_form" or "tagged_chain"
  double pushed_out_prob = 0;     ///< P(an admitted packet is later discarded) (front/random)
  double admitted_rate = 0;       ///< packets entering the buffer per slot
  double mean_sojourn = 0;        ///< boundaries in the system per admitted packet (served or pushed out)
  long response_steps = 0;        ///< tagged chain: transient steps
  int64_t response_states = 0;    ///< tagged chain: states
  std::vector<double> response_pmf;  ///< index r = 0, 1, ... (pmf[0] = 0)
  double mean_response = 0, var_response = 0;
  double response_truncated = 0;  ///< mass beyond the end of response_pmf
  /// Little's law, exact for the chain: |E[n] - admitted_rate E[sojourn]| / E[n]
  /// (under tail the sojourn is R and admitted_rate = throughput).
  double littles_law_error = 0;

  /// One entry per traffic class (a model without classes: one class, "all").
  std::vector<ClassMetrics> classes;
};

Metrics compute_metrics(const QueueChain& chain, const std::vector<double>& pi, const MetricsOptions& options = {});

}  // namespace aqm
