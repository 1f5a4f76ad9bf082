// State descriptor and generic builder: key round trips, a generator with an
// extra component the builder knows nothing about, continuous-time checks.
#include <gtest/gtest.h>

#include <random>

#include "aqmchain/aqmchain.hpp"
#include "aqmchain/model/queue_generator.hpp"
#include "fixtures.hpp"

using namespace aqm;

TEST(StateSpace, EncodeDecodeRoundTripOnRandomTuples) {
  StateSpace s;
  s.add("a", 7);
  s.add("b", 1);
  s.add("c", 1000, false);
  s.add("d", 3);
  EXPECT_EQ(s.product(), 7 * 1000 * 3);
  std::mt19937_64 rng(12345);
  std::vector<int32_t> v(4), w(4);
  for (int t = 0; t < 10000; ++t) {
    for (int i = 0; i < s.count(); ++i) v[i] = static_cast<int32_t>(rng() % s.component(i).size);
    const int64_t k = s.encode_checked(v);
    ASSERT_GE(k, 0);
    ASSERT_LT(k, s.product());
    s.decode(k, w.data());
    ASSERT_EQ(v, w);
    for (int i = 0; i < s.count(); ++i) ASSERT_EQ(s.value(k, i), v[i]);
  }
  // keys sort lexicographically by the components in the order they were added
  EXPECT_LT(s.encode_checked({0, 0, 999, 2}), s.encode_checked({1, 0, 0, 0}));
  EXPECT_THROW(s.encode_checked({7, 0, 0, 0}), std::out_of_range);
  EXPECT_THROW(s.add("a", 2), std::invalid_argument);
  EXPECT_THROW(s.add("e", 0), std::invalid_argument);
  EXPECT_EQ(s.find("c"), 2);
  EXPECT_EQ(s.find("zz"), -1);
}

namespace {
/// Wraps a generator and appends a component "dummy" of size 3 that stays at 1.
class WithDummy final : public TransitionGenerator {
 public:
  explicit WithDummy(std::unique_ptr<TransitionGenerator> inner) : inner_(std::move(inner)), space_(inner_->space()) {
    space_.add("dummy", 3);
  }
  const StateSpace& space() const override { return space_; }
  TimeKind time() const override { return inner_->time(); }
  const std::vector<std::string>& event_names() const override { return inner_->event_names(); }
  std::vector<int64_t> initial_states() const override {
    std::vector<int64_t> keys = inner_->initial_states();
    for (auto& k : keys) k = k * 3 + 1;
    return keys;
  }
  int max_successors() const override { return inner_->max_successors(); }
  void successors(int64_t key, Successors& out, double* events) const override {
    inner_->successors(key / 3, out, events);
    for (auto& [k, p] : out) k = k * 3 + 1;
  }

 private:
  std::unique_ptr<TransitionGenerator> inner_;
  StateSpace space_;
};

void expect_same_metrics(const Model& m) {
  const QueueChain plain = build_chain(m);
  const QueueChain extended = build_chain(WithDummy(queue_generator(m)), m);
  ASSERT_EQ(plain.n, extended.n);
  ASSERT_EQ(plain.nnz(), extended.nnz());
  EXPECT_EQ(extended.space.count(), 4);
  for (int32_t s = 0; s < extended.n; ++s) ASSERT_EQ(extended.component("dummy")[s], 1);
  const auto a = compute_metrics(plain, solve_stationary(plain).pi);
  const auto b = compute_metrics(extended, solve_stationary(extended).pi);
  EXPECT_NEAR(a.mean_queue, b.mean_queue, 1e-10);
  EXPECT_NEAR(a.var_queue, b.var_queue, 1e-9);
  EXPECT_NEAR(a.loss, b.loss, 1e-12);
  EXPECT_NEAR(a.mean_response, b.mean_response, 1e-9);
  EXPECT_NEAR(a.mean_avg, b.mean_avg, 1e-10);
  // krylov's blocks come from the descriptor: the extra component is a slow one
  StationaryOptions o;
  o.method = Method::Krylov;
  const auto kr = solve_stationary(extended, o);
  ASSERT_TRUE(kr.converged());
  EXPECT_EQ(kr.method, Method::Krylov);
  const auto c = compute_metrics(extended, kr.pi);
  EXPECT_NEAR(a.mean_queue, c.mean_queue, 1e-9);
  EXPECT_NEAR(a.loss, c.loss, 1e-11);
}
}  // namespace

TEST(Builder, ExtraComponentThatNeverChangesGivesTheSameMetrics) {
  Model m = test::geo_model(30, 0.45, 0.5);
  m.aqm.drop = DropFunction::red(5, 20, 0.2);
  m.aqm.w = 0.1;
  m.grid.k = 2;
  expect_same_metrics(m);
  m.source = Source::ssmp(3, 1.5, 4.0);
  expect_same_metrics(m);
}

TEST(Builder, ContinuousModelGivesAGenerator) {
  Model m = test::geo_model(15, 0.5, 0.5);
  m.time = TimeKind::Continuous;
  m.source = Source::mmpp({{-0.2, 0.2}, {0.5, -0.5}}, {0.2, 1.1});
  m.service = Service::exponential(0.8);
  m.aqm.drop = DropFunction::red(3, 10, 0.3);
  m.aqm.w = 0.7;
  const QueueChain c = build_chain(m);
  EXPECT_EQ(c.time, TimeKind::Continuous);
  EXPECT_LE(c.report.max_row_error, 1e-14);
  for (int32_t i = 0; i < c.n; ++i) {
    double sum = 0.0;
    for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e) {
      sum += c.val[e];
      if (c.col[e] != i) EXPECT_GT(c.val[e], 0.0);
      else EXPECT_LT(c.val[e], 0.0);
    }
    EXPECT_NEAR(sum, 0.0, 1e-14);
  }
  // the stationary vector of the generator: ||pi G||_1 / max|G_ii| small, and
  // the operator's uniformised P has the same stationary vector
  const auto r = solve_stationary(c);
  ASSERT_TRUE(r.converged());
  EXPECT_LE(stationary_residual(c, r.pi), 1e-12);
  const MarkovOperator op(c);
  EXPECT_LE(op.residual(r.pi), 1e-12);
  std::vector<double> y(c.n);
  op.apply_generator(r.pi.data(), y.data());
  double norm = 0.0;
  for (double v : y) norm += std::abs(v);
  EXPECT_LE(norm, 1e-12 * op.rate());
}

TEST(Builder, BadGeneratorsAndMixedTimeKindsAreNamed) {
  try {
    Source::mmpp({{-0.2, 0.3}, {0.5, -0.5}}, {0.2, 1.1});
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "source.generator[0]");
  }
  try {
    Source::mmpp({{0.2, -0.2}, {0.5, -0.5}}, {0.2, 1.1});
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "source.generator[0][1]");
  }
  try {
    Source::mmpp({{-0.2, 0.2}, {0.5, -0.5}}, {0.2, -1.0});
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "source.rates[1]");
  }
  Model m = test::geo_model(5, 0.5, 0.5);
  m.time = TimeKind::Continuous;
  try {
    m.validate();
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "source.kind");
  }
}

namespace {
/// A reflecting random walk on 0..K-1 (up with probability u, down with d), no queue in it:
/// the generic builder and the solvers need no model.
class Walk final : public TransitionGenerator {
 public:
  Walk(int K, double u, double d) : K_(K), u_(u), d_(d) { space_.add("x", K); }
  const StateSpace& space() const override { return space_; }
  TimeKind time() const override { return TimeKind::Discrete; }
  const std::vector<std::string>& event_names() const override { return names_; }
  std::vector<int64_t> initial_states() const override { return {0}; }
  int max_successors() const override { return 3; }
  void successors(int64_t x, Successors& out, double* events) const override {
    const double up = x + 1 < K_ ? u_ : 0.0, down = x > 0 ? d_ : 0.0;
    if (up > 0) out.push_back({x + 1, up});
    if (down > 0) out.push_back({x - 1, down});
    out.push_back({x, 1.0 - up - down});
    if (events) events[0] = up;
  }

 private:
  int K_;
  double u_, d_;
  StateSpace space_;
  std::vector<std::string> names_{"up"};
};
}  // namespace

TEST(Builder, GenericBuilderTakesAGeneratorOnly) {
  // pi_x proportional to (u/d)^x: the birth-death closed form
  const int K = 12;
  const double u = 0.3, d = 0.45;
  const Walk w(K, u, d);
  const Chain c = build_chain(w);
  ASSERT_EQ(c.n, K);
  EXPECT_EQ(c.report.closed_classes, 1);
  const ReachableCount rc = count_reachable(w);
  EXPECT_EQ(rc.states, K);
  const StationaryResult r = solve_stationary(c);
  ASSERT_TRUE(r.converged());
  double z = 0.0;
  for (int x = 0; x < K; ++x) z += std::pow(u / d, x);
  for (int x = 0; x < K; ++x) EXPECT_NEAR(r.pi[x], std::pow(u / d, x) / z, 1e-12);
  // two generators on one set of states: the union of their reachable states, numbered once
  const Walk w2(K, 0.2, 0.6);
  const std::vector<Chain> both = build_chains({&w, &w2});
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].n, K);
  EXPECT_EQ(both[1].n, K);
  EXPECT_NEAR(both[1].event("up")[0], 0.2, 0.0);
  const Walk other(K + 1, u, d);
  EXPECT_THROW(build_chains({&w, &other}), std::invalid_argument);
}

TEST(Builder, QueueGeneratorsFlagTheBlockComponents) {
  // level, REDwM's s_index and the modulator are inside the preconditioner's blocks (and the
  // two-class chain's contents while small); avg and the stateful AQM's components index them
  auto flagged = [](const Chain& c) {
    std::vector<std::string> in;
    for (const Component& k : c.space.components())
      if (k.in_block) in.push_back(k.name);
    return in;
  };
  const std::vector<std::string> plain{component::level, component::modulator};
  Model m = test::geo_model(12, 0.4, 0.5);
  m.aqm.drop = DropFunction::red(3, 9, 0.2);
  m.aqm.w = 0.2;
  EXPECT_EQ(flagged(build_chain(m)), plain);
  Model r = m;
  r.aqm.filter = FilterKind::Redwm;
  r.aqm.a = {0.8};
  r.aqm.b = {0.2};
  EXPECT_EQ(flagged(build_chain(r)), (std::vector<std::string>{component::level, component::s, component::modulator}));
  Model c = m;
  TrafficClass a, b;
  a.name = "a", a.share = {0.3}, a.ecn = 0.25;
  b.name = "b", b.share = {0.7}, b.ecn = 0.25;
  c.classes = {a, b};
  {
    // the two-class chain's contents move with the level: inside the blocks while their band
    // storage is small, outside for a large buffer; the exact chain's sequence stays outside
    Model small = c;
    small.buffer = 5;
    EXPECT_EQ(flagged(build_chain(small, BuildOptions{}, ClassChain::Approx)),
              (std::vector<std::string>{component::level, component::modulator, component::class2, component::head}));
    EXPECT_EQ(flagged(build_chain(small, BuildOptions{}, ClassChain::Exact)), plain);
    Model large = c;
    large.buffer = 120;  // with the test model's grid: about 5e9 band entries
    std::vector<std::string> in;
    const auto gen = class_generator(large, ClassChain::Approx);
    for (const Component& k : gen->space().components())
      if (k.in_block) in.push_back(k.name);
    EXPECT_EQ(in, plain);
  }
  Model s = m;
  s.aqm.spacing = Spacing::Count;
  const QueueChain sc = build_chain(s);
  ASSERT_GE(sc.space.find(component::count), 0);
  EXPECT_EQ(flagged(sc), plain);
}

TEST(Builder, BudgetsOutOfRangeNameTheirOption) {
  const Model m = test::geo_model(10, 0.4, 0.5);
  for (int64_t bad : {int64_t{0}, kMaxStatesMax + 1}) {
    BuildOptions o;
    o.max_states = bad;
    try {
      build_chain(m, o);
      FAIL() << bad;
    } catch (const OptionError& e) {
      EXPECT_EQ(e.param(), "max_states");
    }
  }
  ResponseOptions r;
  r.max_states = 0;
  try {
    r.validate();
    FAIL();
  } catch (const OptionError& e) {
    EXPECT_EQ(e.param(), "tagged_max_states");
  }
}
