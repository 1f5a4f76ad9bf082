// The continuous-time chain of ns-3's RedQueueDisc (docs/ns3.md): per-arrival EWMA jumps of
// weight QW, the idle-time correction, count-based drop spacing with ns-3's Wait variant, the
// first-arrival exemption (m_old), early and forced tests only when more than one packet
// waits, Gentle, ECN and hard drop.  The rules are read from ns-3's red-queue-disc.cc
// (DoEnqueue, Estimator, DropEarly, CalculatePNew, ModifyP, DoDequeue).
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "aqmchain/model/queue_generator.hpp"
#include "model/ns3_generator.hpp"
#include "model/slot_kernel.hpp"
#include "model/stateful.hpp"

namespace aqm::detail {

namespace {

/// exp(A) of a small dense matrix: scaling and squaring with a Taylor series (A's norm scaled
/// below 1/2: 24 terms leave a relative error far below round-off).
Eigen::MatrixXd small_expm(const Eigen::MatrixXd& A) {
  const double norm = A.cwiseAbs().rowwise().sum().maxCoeff();
  int squarings = 0;
  double scale = 1.0;
  while (norm * scale > 0.5) scale *= 0.5, ++squarings;
  const Eigen::MatrixXd B = A * scale;
  Eigen::MatrixXd term = Eigen::MatrixXd::Identity(A.rows(), A.cols()), sum = term;
  for (int k = 1; k <= 24; ++k) {
    term = term * B / static_cast<double>(k);
    sum += term;
  }
  for (int s = 0; s < squarings; ++s) sum = sum * sum;
  return sum;
}

}  // namespace

std::vector<std::vector<std::vector<double>>> idle_step_law(const Source& src, double ptc) {
  // Idle period from modulator state i (the state when the server went idle) to the first
  // arrival, in state j after time T: the arrival's density is [exp(D0 s)]_ij lambda_j with
  // D0 = Q - diag(lambda).  Over s in [k tau, (k + 1) tau), tau = 1 / ptc, its mass is
  // [E^k H]_ij lambda_j with E = exp(D0 tau) and H = int_0^tau exp(D0 s) ds, both blocks of
  // exp([[D0, I], [0, 0]] tau).  Returned: law[i][j][k] = P(k | i, j).
  const int M = src.states();
  const double tau = 1.0 / ptc;
  Eigen::MatrixXd aug = Eigen::MatrixXd::Zero(2 * M, 2 * M);
  for (int i = 0; i < M; ++i) {
    double out = 0.0;
    for (int j = 0; j < M; ++j)
      if (j != i) aug(i, j) = src.matrix[i][j] * tau, out += src.matrix[i][j];
    aug(i, i) = -(out + src.arrival[i]) * tau;
    aug(i, M + i) = tau;
  }
  const Eigen::MatrixXd X = small_expm(aug);
  const Eigen::MatrixXd E = X.topLeftCorner(M, M), H = X.topRightCorner(M, M);
  std::vector<std::vector<std::vector<double>>> law(M, std::vector<std::vector<double>>(M));
  Eigen::MatrixXd Ek = Eigen::MatrixXd::Identity(M, M);
  // stop when every state's probability of an idle period beyond k tau is below 1e-17
  for (int k = 0; k < kMaxIdleSteps; ++k) {
    const Eigen::MatrixXd W = Ek * H;
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < M; ++j) law[i][j].push_back(std::max(0.0, W(i, j)) * src.arrival[j]);
    Ek = Ek * E;
    if (Ek.rowwise().sum().maxCoeff() < 1e-17) break;
    if (k + 1 == kMaxIdleSteps)
      fail_param("aqm.ptc",
                 cat("small enough against the arrival rates that an idle period spans fewer than ", kMaxIdleSteps,
                     " packet times 1 / ptc (within probability 1e-17)"),
                 ptc);
  }
  for (auto& row : law)
    for (auto& v : row) {
      double s = 0.0;
      for (double x : v) s += x;
      if (s > 0.0)
        for (double& x : v) x /= s;
      while (v.size() > 1 && v.back() < 1e-300) v.pop_back();
    }
  return law;
}

namespace {

class Ns3Generator final : public TransitionGenerator {
 public:
  explicit Ns3Generator(const Model& m)
      : N_(m.buffer),
        M_(m.source.states()),
        mu_(m.service.mu),
        w_(m.aqm.w),
        ecn_(m.aqm.ecn),
        hard_(m.aqm.hard_drop),
        idle_fix_(m.aqm.idle_correction),
        spacing_(m.aqm.spacing),
        points_(m.grid.resolve(m.buffer)),
        grid_(points_, Mapping::Split),
        layout_(m, points_),
        space_(queue_state_space(m)),
        Q_(m.source.matrix),
        lam_(m.source.arrival) {
    const DropFunction drop = m.resolved_drop();
    const bool thresholds = drop_has(drop, DropKindSpec::kThresholds);
    for (double g : points_) {
      pdrop_.push_back(drop(g));
      region_.push_back(thresholds ? g >= drop.lo : pdrop_.back() > 0.0);
    }
    sn_ = space_.stride(space_.at(component::level));
    sg_ = space_.stride(space_.at(component::avg));
    sm_ = space_.stride(space_.at(component::modulator));
    sc_ = space_.stride(space_.at(component::count));
    si_ = M_ > 1 ? space_.stride(space_.at(component::idle)) : 0;
    count_states_ = space_.component(space_.at(component::count)).size;
    const double ptc = m.aqm.ptc > 0.0 ? m.aqm.ptc : mu_;
    if (idle_fix_) law_ = idle_step_law(m.source, ptc);
    size_t steps = 1;
    for (const auto& row : law_)
      for (const auto& v : row) steps = std::max(steps, v.size());
    max_ = static_cast<int>(4 * 2 * steps + M_ + 4);
  }
  const StateSpace& space() const override { return space_; }
  TimeKind time() const override { return TimeKind::Continuous; }
  const std::vector<std::string>& event_names() const override { return queue_event_names(); }
  std::vector<int64_t> initial_states() const override {
    std::vector<int64_t> keys;  // empty system, avg 0, old = 0; idle since time 0 in modulator state m
    for (int m = 0; m < M_; ++m) keys.push_back(m * sm_ + m * si_);
    return keys;
  }
  int max_successors() const override { return max_; }
  bool reachable_bound_tight() const override { return false; }
  /// The count (with old = 1) lives only at avg points in the early region (an arrival that lands
  /// below min_th, or with nQueued <= 1, sets old = 0), and below where p_a = 1 there (a test at
  /// count + 1 with (count + 1) p_b >= 2 under Wait, >= 1 without, always decides and resets it):
  /// at most ceil(reach / p_b) + 1 values; the cap where p_b = 0 (at min_th) or p_b >= 1 (forced
  /// decisions do not reset it). The idle period's start state multiplies the n = 0 states.
  int64_t reachable_bound() const override {
    const double reach = spacing_ == Spacing::Count ? 1.0 : 2.0;
    const double per_count = static_cast<double>(N_ + 1) * M_ + static_cast<double>(M_) * (M_ - 1);
    double total = 0.0;
    for (size_t g = 0; g < points_.size(); ++g) {
      double counts = 1.0;  // old = 0
      if (region_[g]) {
        const double cap = static_cast<double>(count_states_ - 1);
        const double p = pdrop_[g];
        counts += spacing_ == Spacing::None ? 1.0
                  : (p > 0.0 && p < 1.0)    ? std::min(cap, std::ceil(reach / p) + 1.0)
                                            : cap;
      }
      total += counts * per_count;
    }
    return static_cast<int64_t>(std::min(total, static_cast<double>(space_.product())));
  }
  void successors(int64_t key, Successors& out, double* events) const override {
    const int n = static_cast<int>((key / sn_) % (N_ + 1)), g = static_cast<int>((key / sg_) % points_.size()),
              m = static_cast<int>((key / sm_) % M_), ci = static_cast<int>((key / sc_) % count_states_),
              i0 = M_ > 1 ? static_cast<int>((key / si_) % M_) : 0;
    const int64_t base = key - n * sn_ - g * sg_ - ci * sc_ - i0 * si_;  // the modulator's part
    for (int m2 = 0; m2 < M_; ++m2)
      if (m2 != m && Q_[m][m2] > 0.0) out.push_back({key + (m2 - m) * sm_, Q_[m][m2]});
    const double dep = n >= 1 ? mu_ : 0.0;
    if (dep > 0.0) {
      // the server goes idle at a departure that empties the system (DoDequeue finds the
      // queue disc empty): the idle period's start state is remembered for its law
      const int64_t to = base + (n - 1) * sn_ + g * sg_ + ci * sc_ + (n == 1 ? m * si_ : 0);
      out.push_back({to, dep});
    }
    Events ev;
    const double lam = lam_[m];
    if (lam > 0.0) {
      const int nq = std::max(n - 1, 0);  // packets waiting in the queue disc
      const double avg = points_[static_cast<size_t>(g)];
      auto land = [&](double y, double p) {
        const GridTarget t = grid_.map(y);
        arrive(base, n, nq, t.lo, ci, lam * p * t.p_lo, out, ev);
        if (t.p_lo < 1.0) arrive(base, n, nq, t.lo + 1, ci, lam * p * (1.0 - t.p_lo), out, ev);
      };
      if (n == 0 && idle_fix_) {
        // the idle correction: avg (1 - w)^(k + 1) with k = floor(ptc x idle time)
        const std::vector<double>& pk = law_[static_cast<size_t>(i0)][static_cast<size_t>(m)];
        double f = 1.0 - w_;
        for (size_t k = 0; k < pk.size(); ++k, f *= 1.0 - w_)
          if (pk[k] > 0.0) land(avg * f, pk[k]);
      } else {
        land((1.0 - w_) * avg + w_ * nq, 1.0);
      }
      ev.arrival = lam;
    }
    ev.depart = dep;
    if (events) ev.store(events);
  }

 private:
  using Events = SlotKernel::Events;

  /// An arrival whose update lands avg on point g2 (weight `rate`): the tests of DoEnqueue,
  /// then admission or overflow.
  void arrive(int64_t base, int n, int nq, int g2, int ci, double rate, Successors& out, Events& ev) const {
    if (!(rate > 0.0)) return;
    const bool old = ci > 0;
    const int64_t count = ci - 1;  // with old: m_count before this arrival's increment
    const int64_t cap = layout_.cap_at(g2);
    auto sat = [&](int64_t c) -> int {  // the count index after the arrival, saturated at the cap
      if (spacing_ == Spacing::None) return 1;
      return static_cast<int>(std::min(c, cap) + 1);
    };
    // (probability, count index after, admitted)
    struct Outcome {
      double p;
      int ci;
      bool admitted;
      double drop, mark;
    };
    Outcome o[3];
    int k = 0;
    const double pb = pdrop_[static_cast<size_t>(g2)];
    if (region_[static_cast<size_t>(g2)] && nq > 1) {
      const int keep = old ? sat(count + 1) : 0;
      if (pb >= 1.0) {  // forced: dropped (marked and admitted if ECN-capable without hard drop)
        const double e = hard_ ? 0.0 : ecn_;
        if (e > 0.0) o[k++] = {e, keep, true, 0.0, 1.0};
        if (e < 1.0) o[k++] = {1.0 - e, keep, false, 1.0, 0.0};
      } else if (!old) {  // the first arrival in the region: count = 1, never dropped
        o[k++] = {1.0, sat(1), true, 0.0, 0.0};
      } else {
        const double pa = spaced_probability(spacing_, count + 1, pb);
        const int reset = 1;  // count = 0, old stays 1
        if (pa > 0.0) {
          if (ecn_ > 0.0) o[k++] = {pa * ecn_, reset, true, 0.0, 1.0};
          if (ecn_ < 1.0) o[k++] = {pa * (1.0 - ecn_), reset, false, 1.0, 0.0};
        }
        if (pa < 1.0) o[k++] = {1.0 - pa, sat(count + 1), true, 0.0, 0.0};
      }
    } else {
      o[k++] = {1.0, 0, true, 0.0, 0.0};  // not tested: old = 0
    }
    for (int j = 0; j < k; ++j) {
      const double r = rate * o[j].p;
      const bool in = o[j].admitted && n < N_;
      const int n2 = in ? n + 1 : n;
      // the idle period's start state is kept while n = 0 only (an arrival at n = 0 is admitted)
      out.push_back({base + n2 * sn_ + g2 * sg_ + o[j].ci * sc_, r});
      ev.aqm += r * o[j].drop;
      ev.mark += r * o[j].mark;
      if (in) ev.admit += r;
      else if (o[j].admitted) ev.overflow += r;
    }
  }

  int N_, M_;
  double mu_, w_, ecn_;
  bool hard_, idle_fix_;
  Spacing spacing_;
  std::vector<double> points_;
  Grid grid_;
  StatefulLayout layout_;
  StateSpace space_;
  std::vector<std::vector<double>> Q_;
  std::vector<double> lam_;
  std::vector<double> pdrop_;
  std::vector<bool> region_;
  int64_t sn_ = 0, sg_ = 0, sm_ = 0, sc_ = 0, si_ = 0;
  int64_t count_states_ = 1;
  std::vector<std::vector<std::vector<double>>> law_;
  int max_ = 16;
};

}  // namespace

std::unique_ptr<TransitionGenerator> ns3_generator(const Model& model) {
  return std::make_unique<Ns3Generator>(model);
}

}  // namespace aqm::detail
