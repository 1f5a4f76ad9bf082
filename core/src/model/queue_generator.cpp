// Transition generators of the queue models: the slot kernel (SPEC 3) for
// discrete time, the rate kernel (SPEC 6) for continuous time.
#include "aqmchain/model/queue_generator.hpp"

#include <algorithm>
#include <cmath>

#include "aqmchain/interrupt.hpp"
#include "model/ns3_generator.hpp"
#include "model/slot_kernel.hpp"
#include "model/stateful.hpp"

namespace aqm {

const std::vector<std::string>& queue_event_names() {
  static const std::vector<std::string> names{event::arrival, event::aqm_drop, event::mark,
                                              event::overflow, event::admit,    event::depart};
  return names;
}

StateSpace queue_state_space(const Model& model) {
  StateSpace s;
  // in_block: the preconditioner's diagonal blocks hold n, the modulator and REDwM's s (s ~ b_1 q follows
  // the queue); avg and the stateful components index the blocks
  s.add(component::level, model.buffer + 1, /*coarsen=*/true, /*in_block=*/true);
  s.add(component::avg, static_cast<int32_t>(model.grid.size(model.buffer)));  // counted, not allocated
  if (model.aqm.filter == FilterKind::Redwm) {  // right after avg_index (the slot kernel's filter cell)
    const std::vector<int64_t> sizes = redwm_s_grid_sizes(model);
    // the keys (and the simulator's discretised cells) number avg x s^(1) x ... x s^(R):
    // refuse, naming the s grid's step, a product the 62-bit keys cannot hold
    double product = static_cast<double>(s.product());
    for (int64_t z : sizes) product *= static_cast<double>(z);
    product *= static_cast<double>(model.source.states()) * 4.0;  // modulator and the class / AQM components' room
    if (sizes.size() > 1 && !(product < std::ldexp(1.0, 62))) {
      std::string dims;
      for (int64_t z : sizes) dims += detail::cat(dims.empty() ? "" : " x ", z);
      throw StateSpaceTooLarge(
          "grid.s_k",
          detail::cat("REDwM with r = ", sizes.size(), " auxiliary sums multiplies the state space by the sizes of "
                      "their grids (", dims, "): the product space has about ", detail::short_num(product / 4.0),
                      " keys, above 2^62 (coarsen the s grids: a smaller grid.s_k or fewer grid.s_points; "
                      "or a coarser avg grid)"));
    }
    for (size_t i = 0; i < sizes.size(); ++i)
      s.add(i == 0 ? component::s : redwm_s_component(static_cast<int>(i) + 1), static_cast<int32_t>(sizes[i]),
            /*coarsen=*/true, /*in_block=*/true);
  }
  s.add(component::modulator, model.source.states(), /*coarsen=*/false, /*in_block=*/true);
  if (model.aqm.ns3()) {
    // docs/ns3.md: m_count + 1 with m_old (index 0: old = 0), the idle period's start state (MMPP)
    GridSpec g = model.grid;
    if (g.refine == Refine::Auto && g.points.empty()) g.refine = Refine::None;
    const detail::StatefulLayout L(model, g.resolve(model.buffer));
    s.add(component::count, static_cast<int32_t>(L.spacing == Spacing::None ? 2 : L.count_size()),
          /*coarsen=*/L.spacing != Spacing::None);  // an ordinal count: multilevel merges its pairs
    if (model.source.states() > 1)
      s.add(component::idle, model.source.states(), /*coarsen=*/false, /*in_block=*/true);
    return s;
  }
  if (!model.aqm.stateful() || model.time != TimeKind::Discrete) return s;
  // docs/stateful-aqm.md: the count, p_max's grid index and the exact clock's phase
  GridSpec g = model.grid;
  if (g.refine == Refine::Auto && g.points.empty()) g.refine = Refine::None;  // sizes on the uniform 1/k grid
  const detail::StatefulLayout L(model, g.resolve(model.buffer));
  if (L.spacing != Spacing::None) s.add(component::count, static_cast<int32_t>(L.count_size()), /*coarsen=*/false);
  if (L.adaptive) s.add(component::pmax, static_cast<int32_t>(L.pmax.size()), /*coarsen=*/false);
  if (L.dyn_maxth) s.add(component::maxth, 2, /*coarsen=*/false);
  if (L.phases > 1) {
    const double product = static_cast<double>(model.buffer + 1) * static_cast<double>(g.size(model.buffer)) *
                           model.source.states() * static_cast<double>(L.count_size()) *
                           static_cast<double>(L.pmax.size()) * static_cast<double>(L.phases);
    if (product > model.aqm.adaptive.max_clock_states)
      throw StateSpaceTooLarge(
          "aqm.max_clock_states",
          detail::cat("aqm.clock = 'exact' multiplies the state space by interval = ", L.phases,
                      ": the product space has ", product, " states, above aqm.max_clock_states = ",
                      model.aqm.adaptive.max_clock_states,
                      " (use clock = 'geometric', a smaller interval, or raise aqm.max_clock_states)"));
    s.add(component::phase, static_cast<int32_t>(L.phases), /*coarsen=*/false);
  }
  return s;
}

StatefulInfo stateful_info(const Model& model) {
  GridSpec g = model.grid;
  if (g.refine == Refine::Auto && g.points.empty()) g.refine = Refine::None;
  const detail::StatefulLayout L(model, g.resolve(model.buffer));
  StatefulInfo out;
  out.count_cap = L.count_cap, out.count_cap_exact = L.count_cap_exact, out.count_start = L.count_start;
  out.count_cap_at = L.cap_at_point, out.count_start_at = L.start_at_point;
  out.count_truncated = L.count_truncated();
  out.pmax = L.pmax, out.pmax_start = L.pmax_start, out.phases = L.phases;
  return out;
}

namespace detail {

/// An upper bound on the reachable states of a REDwM chain (SPEC 2.3), far below the
/// product G S (N + 1) M: A and s are strongly tied.  A state (n', A' = g_i, s' = s_j)
/// is entered by a filter step from some (A, s, q) with a_1 A + b_0 q + s within one
/// grid cell of g_i (every mapping moves a value to a neighbouring point at most), and
/// then s' is a neighbour of a_2 A + b_1 q.  Under per_slot q is within one of n'
/// (q in [n' - 2, n']), under per_arrival anything.  For each (n', i) the range of
/// a_2 A + b_1 q over that polygon in (A, q) (a linear programme in two variables:
/// its extremes lie on vertices) gives the s points that can follow.
int64_t redwm_reachable_bound(const SlotKernel& K) {
  // r > 1 sums: the product (loose; the builder explores, reachable_bound_tight)
  if (K.R > 1) return K.space.product();
  const auto& g = K.grid.points();
  const auto& sg = K.sgrids[0].points();
  const double a1 = K.rfilter.a1(), a2 = K.rfilter.a2(), b0 = K.rfilter.b0(), b1 = K.rfilter.b1();
  const double N = K.N, s_top = sg.back();
  const int G = K.G;
  auto count = [&](int i, double q_lo, double q_hi) -> int64_t {
    const double L = (i > 0 ? g[i - 1] : -1e300) - s_top, U = i + 1 < G ? g[i + 1] : 1e300;
    const double tol = 1e-9 * (1.0 + N);
    double lo = 1e300, hi = -1e300;
    auto visit = [&](double A, double q) {
      if (A < -tol || A > N + tol || q < q_lo - tol || q > q_hi + tol) return;
      const double y = a1 * A + b0 * q;
      if (y < L - tol || y > U + tol) return;
      const double v = a2 * A + b1 * q;
      lo = std::min(lo, v), hi = std::max(hi, v);
    };
    for (double A : {0.0, N})
      for (double q : {q_lo, q_hi}) visit(A, q);
    for (double c : {L, U}) {
      if (b0 > 0.0)
        for (double A : {0.0, N}) visit(A, (c - a1 * A) / b0);
      if (a1 > 0.0)
        for (double q : {q_lo, q_hi}) visit((c - b0 * q) / a1, q);
    }
    if (lo > hi) return 0;
    const double pad = 1e-9 * (1.0 + hi);
    // neighbours of the range: the last point <= lo and the first point >= hi
    const auto j_lo = std::max<ptrdiff_t>(0, std::upper_bound(sg.begin(), sg.end(), lo - pad) - sg.begin() - 1);
    const auto j_hi = std::min<ptrdiff_t>(static_cast<ptrdiff_t>(sg.size()) - 1,
                                          std::lower_bound(sg.begin(), sg.end(), hi + pad) - sg.begin());
    return std::max<int64_t>(1, j_hi - j_lo + 1);
  };
  int64_t total = 0;
  if (K.filter.per_slot()) {
    for (int n = 0; n <= K.N; ++n) {
      const double q_lo = std::max(n - 2, 0), q_hi = std::min(n, K.N - 1);
      for (int i = 0; i < G; ++i) total += count(i, q_lo, q_hi);
      if ((n & 15) == 0) check_interrupt();
    }
  } else {
    int64_t per_level = 0;
    for (int i = 0; i < G; ++i) per_level += count(i, 0.0, K.N - 1.0);
    total = per_level * (K.N + 1);
  }
  return std::min(total * K.M, K.space.product());
}

}  // namespace detail

namespace {

/// n = 0, avg index 0, every modulator state (count -1, p_max at its start, phase 0).
std::vector<int64_t> empty_system(const StateSpace& s, int modulators, int64_t offset = 0) {
  std::vector<int64_t> keys;
  const int64_t sm = s.stride(s.at(component::modulator));
  for (int m = 0; m < modulators; ++m) keys.push_back(m * sm + offset);
  return keys;
}

/// Discrete time: one slot of SPEC 3.
class SlotGenerator final : public TransitionGenerator {
 public:
  explicit SlotGenerator(const Model& m) : K_(m), max_(max_successors()) {}
  const StateSpace& space() const override { return K_.space; }
  TimeKind time() const override { return TimeKind::Discrete; }
  const std::vector<std::string>& event_names() const override { return queue_event_names(); }
  std::vector<int64_t> initial_states() const override {
    return empty_system(K_.space, K_.M, K_.stateful ? K_.keys.encode(-1, K_.sa->pmax_start, 0, 0) : 0);
  }
  int max_successors() const override {
    // (emitted, before merging) <= 2 grid targets (REDwM: 4) (+1 without update) x modulator row x 3 levels
    size_t row = 1;
    for (const auto& r : K_.mrows) row = std::max(row, r.size());
    if (K_.B > 1)  // batch: x (levels n - 1 .. n + B, merged per branch)
      return static_cast<int>((K_.B + 2) * (K_.max_targets() + (K_.filter.per_slot() ? 0 : 1)) * row);
    if (K_.stateful)  // x 2 clock outcomes x 2 p_max targets x 4 arrival outcomes x 2 levels
      return static_cast<int>(16 * (K_.filter.per_slot() ? 2 : 3) * row);
    return static_cast<int>(3 * (K_.max_targets() + (K_.filter.per_slot() ? 0 : 1)) * row);
  }
  int64_t reachable_bound() const override { return K_.redwm ? detail::redwm_reachable_bound(K_) : K_.space.product(); }
  /// The stateful AQM's components are bounded by their product, which the dynamics reach in
  /// part only (the count stays below about 1 / p_b(avg), p_max's reachable points depend on
  /// where avg lives, cur_max_th is raised only under congestion): the builder explores.
  bool reachable_bound_tight() const override { return !K_.stateful && K_.R == 1; }
  void successors(int64_t key, Successors& out, double* events) const override {
    detail::SlotKernel::Events ev;
    if (K_.stateful) {
      K_.successors_stateful(key, [&](int64_t k2, double p) { out.push_back({k2, p}); }, events ? &ev : nullptr);
      if (events) ev.store(events);
      return;
    }
    int n, g, m;
    K_.decode(key, n, g, m);
    if (max_ <= kBuffer) {
      // Collect in a local array and append once: push_back per transition keeps the
      // vector's end pointer in memory (it may alias) and dominated the builder's time.
      std::pair<int64_t, double> buf[kBuffer];
      int cnt = 0;
      K_.successors(n, g, m, [&](int n2, int g2, int m2, double p) { buf[cnt++] = {K_.id(n2, g2, m2), p}; },
                    events ? &ev : nullptr);
      out.insert(out.end(), buf, buf + cnt);
    } else {
      K_.successors(n, g, m, [&](int n2, int g2, int m2, double p) { out.push_back({K_.id(n2, g2, m2), p}); },
                    events ? &ev : nullptr);
    }
    if (events) ev.store(events);
  }

 private:
  static constexpr int kBuffer = 64;
  detail::SlotKernel K_;
  int max_;
};

/// Continuous time (SPEC 6): Poisson/MMPP arrivals, exponential service, the
/// EWMA as d avg/dt = w (q - avg) by upwind rates between grid points.
class RateGenerator final : public TransitionGenerator {
 public:
  explicit RateGenerator(const Model& m)
      : N_(m.buffer),
        M_(m.source.states()),
        mu_(m.service.mu),
        ecn_(m.class_ecn(0)),
        filter_(m.aqm),
        grid_(m.grid.resolve(m.buffer)),
        space_(queue_state_space(m)),
        Q_(m.source.matrix),
        lam_(m.source.arrival) {
    const DropFunction drop = m.resolved_drop();
    for (double g : grid_) pdrop_.push_back(drop(g));
    sn_ = space_.stride(space_.at(component::level));
    sg_ = space_.stride(space_.at(component::avg));
    sm_ = space_.stride(space_.at(component::modulator));
  }
  const StateSpace& space() const override { return space_; }
  TimeKind time() const override { return TimeKind::Continuous; }
  const std::vector<std::string>& event_names() const override { return queue_event_names(); }
  std::vector<int64_t> initial_states() const override { return empty_system(space_, M_); }
  int max_successors() const override { return 5 + M_; }
  void successors(int64_t key, Successors& out, double* events) const override {
    const int n = static_cast<int>((key / sn_) % (N_ + 1)), g = static_cast<int>((key / sg_) % grid_.size()),
              m = static_cast<int>((key / sm_) % M_);
    const int64_t sn = sn_, sg = sg_;
    for (int m2 = 0; m2 < M_; ++m2)
      if (m2 != m && Q_[m][m2] > 0.0) out.push_back({key + (m2 - m) * sm_, Q_[m][m2]});
    const double lam = lam_[m];
    const double pd = pdrop_[g];
    const double rej = n == N_ ? 1.0 : (1.0 - ecn_) * pd;
    const double admit = lam * (1.0 - rej);
    if (admit > 0.0) out.push_back({key + sn, admit});
    const double dep = n >= 1 ? mu_ : 0.0;
    if (dep > 0.0) out.push_back({key - sn, dep});
    double up, down;
    filter_.upwind_rates(grid_, g, std::max(n - 1, 0), up, down);
    if (up > 0.0) out.push_back({key + sg, up});
    if (down > 0.0) out.push_back({key - sg, down});
    if (events) {
      detail::SlotKernel::Events e;
      e.arrival = lam;
      if (n == N_)
        e.overflow = lam;
      else
        e.aqm = lam * rej;
      e.mark = n == N_ ? 0.0 : lam * ecn_ * pd;
      e.admit = admit;
      e.depart = dep;
      e.store(events);
    }
  }

 private:
  int N_, M_;
  int64_t sn_ = 0, sg_ = 0, sm_ = 0;
  double mu_, ecn_;
  EwmaFilter filter_;
  std::vector<double> grid_, pdrop_;
  StateSpace space_;
  std::vector<std::vector<double>> Q_;
  std::vector<double> lam_;
};

}  // namespace

std::unique_ptr<TransitionGenerator> lumped_queue_generator(const Model& model) {
  model.validate();
  if (model.aqm.modified != Modified::None)
    fail_param("aqm.modified", "\"none\" for the lumped (n, avg, modulator) chain", "'" + to_string(model.aqm.modified) + "'");
  if (model.aqm.flow_compare) fail_param("aqm.flow_compare", "false for the lumped (n, avg, modulator) chain", "true");
  if (model.time != TimeKind::Discrete)
    fail_param("class", "a slotted model for the lumped chain", "another model");
  return std::make_unique<SlotGenerator>(model);
}

std::unique_ptr<TransitionGenerator> queue_generator(const Model& model, ClassChain classes, int class_window) {
  if (needs_class_chain(model)) return class_generator(model, classes, class_window);
  if (model.aqm.ns3()) return detail::ns3_generator(model);
  if (model.time == TimeKind::Continuous) return std::make_unique<RateGenerator>(model);
  return std::make_unique<SlotGenerator>(model);
}

}  // namespace aqm
