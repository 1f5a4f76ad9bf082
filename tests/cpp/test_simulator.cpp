// Simulator: determinism, the Geo/Geo/1/N closed form within confidence intervals.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "aqmchain/aqmchain.hpp"
#include "fixtures.hpp"
#include "simulation/engine.hpp"

using namespace aqm;

namespace {
const auto geo = test::geo_model;
}  // namespace

TEST(Xoshiro, JumpGivesDistinctStreamsAndUniformIsInUnitInterval) {
  Xoshiro256 a(42), b(42);
  b.jump();
  int equal = 0;
  double mn = 1, mx = 0, sum = 0;
  for (int i = 0; i < 100000; ++i) {
    equal += a.next() == b.next();
    const double u = a.uniform();
    mn = std::min(mn, u), mx = std::max(mx, u), sum += u;
  }
  EXPECT_EQ(equal, 0);
  EXPECT_GE(mn, 0.0);
  EXPECT_LT(mx, 1.0);
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
}

TEST(Simulator, SameSeedSameAnswerAnyThreadCount) {
  SimOptions o;
  o.slots = 200000;
  o.replications = 3;
  o.seed = 7;
  o.threads = 1;
  const auto a = simulate(geo(10, 0.4, 0.5), o);
  o.threads = 3;
  const auto b = simulate(geo(10, 0.4, 0.5), o);
  EXPECT_EQ(a.mean_queue.value, b.mean_queue.value);
  EXPECT_EQ(a.loss.value, b.loss.value);
  o.seed = 8;
  const auto c = simulate(geo(10, 0.4, 0.5), o);
  EXPECT_NE(a.mean_queue.value, c.mean_queue.value);
}

TEST(Simulator, GeoGeo1WithinConfidenceInterval) {
  SimOptions o;
  o.slots = 2000000;
  o.replications = 2;
  const auto r = simulate(geo(60, 0.3, 0.5), o);
  EXPECT_LT(std::abs(r.mean_system.value - 1.05), 4 * r.mean_system.half_width / 1.96 + 1e-12);
  EXPECT_LT(std::abs(r.mean_response.value - 3.5), 4 * r.mean_response.half_width / 1.96 + 1e-12);
  EXPECT_LT(std::abs(r.throughput.value - 0.3), 4 * r.throughput.half_width / 1.96 + 1e-12);
  EXPECT_GT(r.mean_system.half_width, 0.0);
}

/// The M/M/1/N queue as a continuous-time model (no drop function).
Model mm1n(int N, double lam, double mu) {
  Model m = geo(N, 0.4, 0.5);
  m.time = TimeKind::Continuous;
  m.source = Source::poisson(lam);
  m.service = Service::exponential(mu);
  m.aqm.w = 0.3;
  return m;
}

TEST(SimulatorContinuous, MM1NWithinConfidenceIntervalAndThreadIndependent) {
  // closed form: pi_n = rho^n / sum rho^k; loss = pi_N (PASTA); E[R] by Little; E[avg] = E[q]
  const int N = 12;
  const double lam = 0.8, mu = 1.0, rho = lam / mu;
  double Z = 0, L = 0, Q = 0;
  for (int n = 0; n <= N; ++n) Z += std::pow(rho, n);
  for (int n = 0; n <= N; ++n) L += n * std::pow(rho, n) / Z, Q += std::max(n - 1, 0) * std::pow(rho, n) / Z;
  const double loss = std::pow(rho, N) / Z, thr = lam * (1 - loss);
  SimOptions o;
  o.slots = 400000;  // time units
  o.replications = 4;
  o.seed = 3;
  o.threads = 1;
  const auto r = simulate(mm1n(N, lam, mu), o);
  auto near = [](const Estimate& e, double exact) {  // 3 half-widths: about 6 standard deviations
    EXPECT_GT(e.half_width, 0.0);
    EXPECT_LE(std::abs(e.value - exact), 3 * e.half_width) << e.value << " +- " << e.half_width << " vs " << exact;
  };
  near(r.mean_system, L);
  near(r.mean_queue, Q);
  near(r.mean_avg, Q);
  near(r.loss, loss);
  near(r.throughput, thr);
  near(r.arrival_rate, lam);
  near(r.mean_response, L / thr);
  EXPECT_TRUE(r.response_pmf.value.empty());
  EXPECT_GT(r.events, 0);
  o.threads = 3;
  const auto b = simulate(mm1n(N, lam, mu), o);
  EXPECT_EQ(r.mean_queue.value, b.mean_queue.value);
  EXPECT_EQ(r.mean_avg.half_width, b.mean_avg.half_width);
  EXPECT_EQ(r.events, b.events);
}

TEST(Simulator, BadOptionsAreNamed) {
  SimOptions o;
  o.slots = 1000;
  o.warmup = 990;
  try {
    simulate(geo(5, 0.3, 0.5), o);
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "slots");
  }
}

TEST(Simulator, MemoryIsCheckedBeforeAllocating) {
  // buffer 1e7 with the default options: 80 occupancy histograms of 1e7 + 1 counts
  // (6.4 GB) used to end in std::bad_alloc and an aborted process.
  const auto t0 = std::chrono::steady_clock::now();
  SimOptions o;
  try {
    simulate(geo(10000000, 0.5, 0.5), o);
    FAIL();
  } catch (const StateSpaceTooLarge& e) {
    EXPECT_EQ(e.param(), "model.buffer");
    EXPECT_NE(std::string(e.what()).find("memory_limit_bytes"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  // the estimate grows with what drives it
  const auto need = sim_memory(geo(10000000, 0.5, 0.5), o);
  EXPECT_GT(need.total, 4 * 20 * 1e7 * 8.0);
  EXPECT_EQ(need.largest(), "model.buffer");
  // a time series of 1e10 samples
  o.slots = 10000000000LL;
  o.sample_every = 1;
  try {
    simulate(geo(10, 0.5, 0.5), o);
    FAIL();
  } catch (const StateSpaceTooLarge& e) {
    EXPECT_EQ(e.param(), "sample_every");
  }
  // a small run fits, and a budget below its estimate is refused
  SimOptions small;
  small.slots = 200000;
  small.replications = 2;
  EXPECT_LT(sim_memory(geo(10, 0.5, 0.5), small).total, 1e7);
  small.memory_limit_bytes = 1000;
  EXPECT_THROW(simulate(geo(10, 0.5, 0.5), small), StateSpaceTooLarge);
}

TEST(Simulator, CountOptionsAreBounded) {
  auto expect_param = [](auto set, const std::string& param) {
    SimOptions o;
    o.slots = 200000;
    set(o);
    try {
      o.validate();
      ADD_FAILURE() << "no error for " << param;
    } catch (const ModelError& e) {
      EXPECT_EQ(e.param(), param) << e.what();
    }
  };
  expect_param([](SimOptions& o) { o.slots = 100000000000000LL; }, "slots");
  expect_param([](SimOptions& o) { o.replications = 10001; }, "replications");
  expect_param([](SimOptions& o) { o.batches = 10001; }, "batches");
  expect_param([](SimOptions& o) { o.threads = 5000; }, "threads");
  expect_param([](SimOptions& o) { o.max_response = 10000000000LL; }, "max_response");
  expect_param([](SimOptions& o) { o.warmup = -5; }, "warmup");
  expect_param([](SimOptions& o) { o.memory_limit_bytes = 0; }, "memory_limit_bytes");
}

TEST(Simulator, StopsWhenInterrupted) {
  SimOptions o;
  o.slots = 100000000;
  o.replications = 2;
  request_interrupt();
  EXPECT_THROW(simulate(geo(10, 0.4, 0.5), o), Interrupted);
  Scenario sc;
  sc.phases.push_back(Phase{1e9, geo(10, 0.4, 0.5), ""});
  EXPECT_THROW(simulate_scenario(sc, {1e9}, EnsembleOptions{}), Interrupted);
  clear_interrupt();
  o.slots = 100000;
  EXPECT_NO_THROW(simulate(geo(10, 0.4, 0.5), o));
}

TEST(Ensemble, GeoGeo1TransientMeanAndThreadIndependence) {
  // Geo/Geo/1/N from empty, no AQM: E n_1 = alpha exactly (one slot, no departure possible).
  Scenario sc;
  sc.phases.push_back(Phase{50, geo(60, 0.3, 0.5), "a"});
  sc.phases.push_back(Phase{50, geo(60, 0.6, 0.5), "b"});
  EnsembleOptions o;
  o.replications = 3000;
  o.threads = 1;
  const auto a = simulate_scenario(sc, {1, 50, 100}, o);
  EXPECT_LT(std::abs(a.mean_system[0] - 0.3), 4 * a.mean_system_hw[0] / 1.96);
  EXPECT_LT(std::abs(a.arrivals[0] - 0.3), 4 * a.arrivals_hw[0] / 1.96);
  EXPECT_GT(a.mean_system[2], a.mean_system[1]);
  EXPECT_EQ(a.mean_queue[0], 0.0);
  o.threads = 3;
  const auto b = simulate_scenario(sc, {1, 50, 100}, o);
  EXPECT_EQ(a.mean_queue, b.mean_queue);
  EXPECT_EQ(a.mean_avg, b.mean_avg);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(b.threads, 3);
}

TEST(Ensemble, BadInputIsNamed) {
  Scenario sc;
  sc.phases.push_back(Phase{100, geo(10, 0.4, 0.5), ""});
  auto expect_param = [&](const std::vector<double>& times, EnsembleOptions o, const std::string& param,
                          const Scenario* other = nullptr) {
    try {
      simulate_scenario(other ? *other : sc, times, o);
      ADD_FAILURE() << "no error for " << param;
    } catch (const ModelError& e) {
      EXPECT_EQ(e.param(), param) << e.what();
    }
  };
  EnsembleOptions o;
  expect_param({}, o, "times");
  expect_param({3, 2}, o, "times[1]");
  expect_param({101}, o, "times[0]");
  expect_param({0.5}, o, "times[0]");
  o.replications = 1;
  expect_param({10}, o, "replications");
  o = {};
  o.threads = -2;
  expect_param({10}, o, "threads");
  o = {};
  o.memory_limit_bytes = 100;
  EXPECT_THROW(simulate_scenario(sc, {10}, o), StateSpaceTooLarge);
  Scenario cont;
  Model m = geo(10, 0.4, 0.5);
  m.time = TimeKind::Continuous;
  m.source = Source::poisson(0.4);
  m.service = Service::exponential(1.0);
  cont.phases.push_back(Phase{10, m, ""});
  expect_param({2.5}, EnsembleOptions{}, "times[0]", &cont);  // whole time units
  EXPECT_EQ(simulate_scenario(cont, {5, 10}, EnsembleOptions{}).times.size(), 2u);
}

// ---------------------------------------------------------------- traffic classes (docs/classes.md)

TEST(SimulatorClasses, OneClassDrawsWhatTheStatefulLoopDraws) {
  // a single class of a single flow takes no extra draw: bit-equal to the classless run
  Model plain = geo(20, 0.5, 0.45);
  plain.aqm.drop = DropFunction::red(4, 12, 0.2);
  plain.aqm.w = 0.05;
  plain.aqm.spacing = Spacing::Count;
  plain.aqm.ecn = 0.3;
  Model one = plain;
  one.aqm.ecn = 0.0;
  one.classes = {TrafficClass{"all", {1.0}, 0.3, false, 1, {}}};
  SimOptions o;
  o.slots = 200000;
  o.replications = 2;
  o.threads = 1;
  const SimResult a = simulate(plain, o), b = simulate(one, o);
  EXPECT_EQ(a.mean_queue.value, b.mean_queue.value);
  EXPECT_EQ(a.loss_aqm.value, b.loss_aqm.value);
  EXPECT_EQ(a.mark_prob.value, b.mark_prob.value);
  EXPECT_EQ(a.mean_response.value, b.mean_response.value);
  EXPECT_FALSE(a.class_aware);
  ASSERT_TRUE(b.class_aware);
  ASSERT_EQ(b.classes.size(), 1u);
  EXPECT_NEAR(b.classes[0].loss.value, a.loss.value, 1e-15);
  EXPECT_NEAR(b.classes[0].mean_queue.value, a.mean_system.value, 1e-12);
}

TEST(SimulatorClasses, FlowComparisonWithOneFlowDropsBothWheneverSomethingWaits) {
  // min_th = 0 (always compared), p = 0 below max_th = N: n stays in {0, 1, 2}
  const double a = 0.6, mu = 0.3;
  Model m = geo(6, a, mu);
  m.aqm.drop = DropFunction::red(0, 6, 0.0);
  m.aqm.flow_compare = true;
  // stationary law of the three-state chain, by its balance equations
  const double p01 = a, p10 = (1 - a) * mu, p12 = a * (1 - mu), p20 = a * mu, p21 = a * (1 - mu) + (1 - a) * mu;
  // pi0 p01 = pi1 p10 + pi2 p20;  pi2 (p20 + p21) = pi1 p12
  const double r2 = p12 / (p20 + p21);      // pi2 / pi1
  const double r0 = (p10 + r2 * p20) / p01; // pi0 / pi1
  const double pi1 = 1 / (1 + r0 + r2), pi2 = r2 * pi1;
  SimOptions o;
  o.slots = 1000000;
  o.replications = 2;
  o.threads = 1;
  const SimResult r = simulate(m, o);
  EXPECT_NEAR(r.loss_flow_compare.value, 2 * pi2, 4 * r.loss_flow_compare.half_width);
  EXPECT_NEAR(r.mean_system.value, pi1 + 2 * pi2, 4 * r.mean_system.half_width);
  EXPECT_EQ(r.loss_aqm.value, 0.0);
  EXPECT_EQ(r.system_pmf.value[3], 0.0);
}

TEST(SimulatorContinuous, OneClassOfOneFlowIsTheClasslessRunBitForBit) {
  // the event loop with its class part compiled in draws nothing extra for one class of one flow
  Model plain = mm1n(12, 0.9, 1.0);
  plain.aqm.drop = DropFunction::red(2, 8, 0.3);
  plain.aqm.ecn = 0.4;
  plain.aqm.policy = DropPolicy::Random;
  Model one = plain;
  one.aqm.ecn = 0.0;
  one.classes = {TrafficClass{"all", {1.0}, 0.4, false, 1, {}}};
  SimOptions o;
  o.slots = 50000;  // time units
  o.replications = 2;
  o.threads = 1;
  for (bool disc : {false, true}) {
    o.discretised = disc;
    const SimResult a = simulate(plain, o), b = simulate(one, o);
    EXPECT_EQ(a.events, b.events);
    EXPECT_EQ(a.mean_queue.value, b.mean_queue.value);
    EXPECT_EQ(a.mean_avg.value, b.mean_avg.value);
    EXPECT_EQ(a.loss_aqm.value, b.loss_aqm.value);
    EXPECT_EQ(a.mark_prob.value, b.mark_prob.value);
    EXPECT_EQ(a.pushed_out_prob.value, b.pushed_out_prob.value);
    EXPECT_EQ(a.mean_response.value, b.mean_response.value);
    EXPECT_GT(a.mark_prob.value, 0.0);
    EXPECT_FALSE(a.class_aware);
    ASSERT_TRUE(b.class_aware);
    ASSERT_EQ(b.classes.size(), 1u);
    EXPECT_EQ(b.classes[0].mean_response.value, a.mean_response.value);
    EXPECT_EQ(b.classes[0].throughput.value, a.throughput.value);
    EXPECT_NEAR(b.classes[0].mean_queue.value, a.mean_system.value, 1e-12 * a.mean_system.value);
  }
}

TEST(SimulatorContinuous, FlowComparisonWithOneFlowDropsBothWheneverSomethingWaits) {
  // min_th = 0 (always compared), p = 0 below max_th = N: n stays in {0, 1, 2};
  // rates 0 -> 1 lam, 1 -> 0 mu, 1 -> 2 lam, 2 -> 1 mu + lam (a match loses two packets)
  const double lam = 0.9, mu = 0.6;
  Model m = mm1n(6, lam, mu);
  m.aqm.drop = DropFunction::red(0, 6, 0.0);
  m.aqm.flow_compare = true;
  const double r1 = lam / mu, r2 = r1 * lam / (lam + mu), pi1 = r1 / (1 + r1 + r2), pi2 = r2 / (1 + r1 + r2);
  SimOptions o;
  o.slots = 200000;
  o.replications = 2;
  o.threads = 1;
  const SimResult r = simulate(m, o);
  EXPECT_NEAR(r.loss_flow_compare.value, 2 * pi2, 4 * r.loss_flow_compare.half_width);
  EXPECT_NEAR(r.loss.value, 2 * pi2, 4 * r.loss.half_width);
  EXPECT_NEAR(r.mean_system.value, pi1 + 2 * pi2, 4 * r.mean_system.half_width);
  EXPECT_NEAR(r.throughput.value, mu * (pi1 + pi2), 4 * r.throughput.half_width);
  EXPECT_EQ(r.loss_aqm.value, 0.0);
  EXPECT_EQ(r.system_pmf.value[3], 0.0);
}

// arrival_trace: the source alone.  Bernoulli: the count is Binomial (mean within 5 sd);
// a two-state MMBP: the fraction of slots in each modulator state shows in the rate, and
// the lag-1 covariance matches the closed form pi_i lam_i M_ij lam_j - mean^2 within 5 sd.
TEST(ArrivalTrace, BernoulliAndMmbpMomentsAndErrors) {
  const int64_t n = 1 << 20;
  const auto b = arrival_trace(Source::bernoulli(0.3), n, 7);
  ASSERT_EQ(static_cast<int64_t>(b.size()), n);
  double s = 0;
  for (auto x : b) s += x;
  EXPECT_NEAR(s / n, 0.3, 5 * std::sqrt(0.21 / n));
  EXPECT_EQ(arrival_trace(Source::bernoulli(0.3), 1000, 7), arrival_trace(Source::bernoulli(0.3), 1000, 7));
  EXPECT_NE(arrival_trace(Source::bernoulli(0.3), 1000, 7), arrival_trace(Source::bernoulli(0.3), 1000, 8));

  const auto m = Source::mmbp({{0.9, 0.1}, {0.2, 0.8}}, {0.1, 0.9});
  const double pi0 = 2.0 / 3.0, pi1 = 1.0 / 3.0, mean = pi0 * 0.1 + pi1 * 0.9;
  // E[X_t X_{t+1}] = sum_ij pi_i lam_i M_ij lam_j
  const double exy = pi0 * 0.1 * (0.9 * 0.1 + 0.1 * 0.9) + pi1 * 0.9 * (0.2 * 0.1 + 0.8 * 0.9);
  double sum = 0, lag = 0, sum_runs = 0;
  const int runs = 8;
  std::vector<double> means;
  for (int r = 0; r < runs; ++r) {
    const auto x = arrival_trace(m, n, 100 + r);
    double a = 0, c = 0;
    for (int64_t t = 0; t < n; ++t) {
      a += x[t];
      if (t + 1 < n) c += x[t] * x[t + 1];
    }
    means.push_back(a / n);
    sum += a;
    lag += c / (n - 1);
    sum_runs += 1;
  }
  double mu = sum / (runs * static_cast<double>(n)), var = 0;
  for (double v : means) var += (v - mu) * (v - mu);
  const double sd = std::sqrt(var / (runs - 1) / runs);
  EXPECT_NEAR(mu, mean, 5 * sd + 1e-12);
  EXPECT_NEAR(lag / sum_runs, exy, 0.01);
  EXPECT_GT(lag / sum_runs - mean * mean, 0.05);  // positively correlated (0.0996), unlike Bernoulli

  EXPECT_THROW(arrival_trace(Source::bernoulli(0.3), 0, 1), ModelError);
  EXPECT_THROW(arrival_trace(Source::bernoulli(0.3), (int64_t{1} << 31) + 1, 1), ModelError);
  EXPECT_THROW(arrival_trace(Source::poisson(1.0), 10, 1), ModelError);
}

TEST(SlotLoop, EveryModelDrawsTheModulatorThenTheGridMapping) {
  // One slot of the slot loop from n = 5, avg on grid point 0, modulator state 0, with a
  // modulator row (1/2, 1/2) and a split grid target: the first uniform of the slot moves the
  // modulator, the second maps avg on the grid (docs/conventions.md), for the single-uniform
  // path (RED, no stateful AQM) and for a model with the stateful AQM (drop spacing) alike.
  // Seeds where the two orders give different outcomes show that the order is checked.
  for (const bool stateful : {false, true}) {
    Model m = geo(12, 0.3, 0.4);
    m.source = Source::mmbp({{0.5, 0.5}, {0.5, 0.5}}, {0.3, 0.6});
    m.aqm.drop = DropFunction::red(2, 10, 0.2);
    m.aqm.w = 0.1;
    m.grid.k = 1;
    if (stateful) m.aqm.spacing = Spacing::Count;
    m.validate();
    const sim::SlotParams P(m, true, false, 2);
    ASSERT_EQ(P.sa.has_value(), stateful);
    const GridTarget target = P.grid->map(P.filter.next(P.points[0], 4));
    ASSERT_GT(target.p_lo, 0.0);
    ASSERT_LT(target.p_lo, 1.0);
    const auto fn = sim::chunk_function(P, false);
    int distinguishing = 0;
    for (uint64_t seed = 1; seed <= 64; ++seed) {
      Xoshiro256 rng(seed), peek(seed);
      const double u1 = peek.uniform(), u2 = peek.uniform();
      sim::SimState s(m.buffer);
      s.n = 5, s.g = 0, s.m = 0, s.avg = 0.0;
      std::vector<int64_t> hist(static_cast<size_t>(m.buffer) + 1, 0);
      sim::Tally T;
      T.hist_n = hist.data();
      fn(P, s, rng, 1, 1, T);
      const int m_new = u1 < 0.5 ? 0 : 1, g_new = target.lo + static_cast<int>(!(u2 < target.p_lo));
      const int m_old = u2 < 0.5 ? 0 : 1, g_old = target.lo + static_cast<int>(!(u1 < target.p_lo));
      EXPECT_EQ(s.m, m_new) << "seed " << seed << (stateful ? " stateful" : "");
      EXPECT_EQ(s.g, g_new) << "seed " << seed << (stateful ? " stateful" : "");
      distinguishing += m_new != m_old || g_new != g_old;
    }
    EXPECT_GT(distinguishing, 10);
  }
}
