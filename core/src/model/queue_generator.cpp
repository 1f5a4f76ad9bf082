// Transition generators of the queue models: the slot kernel (SPEC 3) for
// discrete time, the rate kernel (SPEC 6) for continuous time.
#include "aqmchain/model/queue_generator.hpp"

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
  s.add(component::level, model.buffer + 1);
  s.add(component::avg, static_cast<int32_t>(model.grid.size(model.buffer)));  // counted, not allocated
  s.add(component::modulator, model.source.states(), /*coarsen=*/false);
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
  return {L.count_cap, L.pmax, L.pmax_start, L.phases};
}

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
    return empty_system(K_.space, K_.M, K_.stateful ? K_.sa->pmax_start * K_.sk : 0);
  }
  int max_successors() const override {
    // (emitted, before merging) <= 2 grid targets (+1 without update) x modulator row x 3 levels
    size_t row = 1;
    for (const auto& r : K_.mrows) row = std::max(row, r.size());
    if (K_.stateful)  // x 2 clock outcomes x 2 p_max targets x 4 arrival outcomes x 2 levels
      return static_cast<int>(16 * (K_.filter.per_slot() ? 2 : 3) * row);
    return static_cast<int>(3 * (K_.filter.per_slot() ? 2 : 3) * row);
  }
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
        ecn_(m.aqm.ecn),
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

std::unique_ptr<TransitionGenerator> queue_generator(const Model& model) {
  if (model.time == TimeKind::Continuous) return std::make_unique<RateGenerator>(model);
  return std::make_unique<SlotGenerator>(model);
}

}  // namespace aqm
