// Solvers: agreement across methods, non-convergence status, reducible chains, options.
#include <gtest/gtest.h>

#include <cmath>

#include "aqmchain/aqmchain.hpp"

using namespace aqm;

namespace {
Chain ssmp_red_chain(UpdateRule rule) {
  Model m;
  m.buffer = 20;
  m.source = Source::ssmp(3, 1.5, 4.0);
  m.service = Service::geometric(0.6);
  m.aqm.drop = DropFunction::red(5, 15, 0.3);
  m.aqm.w = 0.2;
  m.aqm.update = rule;
  m.aqm.ecn = 0.25;
  m.grid.k = 2;
  return build_chain(m);
}
}  // namespace

TEST(Solvers, AllMethodsAgree) {
  for (UpdateRule rule : {UpdateRule::PerSlot, UpdateRule::PerArrival}) {
    const Chain c = ssmp_red_chain(rule);
    StationaryOptions o;
    o.method = Method::Direct;
    const auto ref = solve_stationary(c, o);
    ASSERT_TRUE(ref.converged());
    for (Method m : {Method::Arnoldi, Method::GaussSeidel, Method::Power}) {
      o.method = m;
      const auto r = solve_stationary(c, o);
      ASSERT_TRUE(r.converged()) << to_string(m) << ": " << r.note;
      EXPECT_EQ(r.method, m);
      double d = 0;
      for (int32_t i = 0; i < c.n; ++i) d += std::abs(r.pi[i] - ref.pi[i]);
      EXPECT_LT(d, 1e-10) << to_string(m);
    }
  }
}

TEST(Solvers, MaxIterOneReportsNonConvergence) {
  const Chain c = ssmp_red_chain(UpdateRule::PerSlot);
  for (Method m : {Method::GaussSeidel, Method::Power, Method::Arnoldi}) {
    StationaryOptions o;
    o.method = m;
    o.max_iter = 1;
    const auto r = solve_stationary(c, o);
    EXPECT_FALSE(r.converged()) << to_string(m);
    EXPECT_EQ(static_cast<int32_t>(r.pi.size()), c.n);
    EXPECT_GT(r.residual, o.tol);
    EXPECT_FALSE(r.note.empty());
  }
}

TEST(Solvers, TransientStatesGetZeroMass) {
  // alpha = mu = 1: the empty system is left in the first slot and never re-entered.
  Model m;
  m.buffer = 4;
  m.source = Source::bernoulli(1.0);
  m.service = Service::geometric(1.0);
  m.aqm.drop = DropFunction::table({{0.0, 0.0}, {0.1, 0.0}});
  m.aqm.w = 1.0;
  m.grid.k = 1;
  const Chain c = build_chain(m);
  EXPECT_EQ(c.report.closed_classes, 1);
  EXPECT_GE(c.report.transient_states, 1);
  const auto r = solve_stationary(c);
  ASSERT_TRUE(r.converged());
  EXPECT_NEAR(r.pi[c.index_of({1, 0, 0})], 1.0, 1e-14);
}

TEST(Solvers, TwoClosedClassesAreRefused) {
  // 0 -> {1, 2}, 1 and 2 absorbing: two closed classes, no unique stationary vector.
  Chain c;
  c.n = 3;
  c.rowptr = {0, 2, 3, 4};
  c.col = {1, 2, 1, 2};
  c.val = {0.5, 0.5, 1.0, 1.0};
  classify(c);
  EXPECT_EQ(c.report.closed_classes, 2);
  EXPECT_EQ(c.recurrent_state, -1);
  EXPECT_THROW(solve_stationary(c), ReducibleChain);
  c.val = {0.5, 0.5, 1.0, 1.0};
  c.col = {1, 2, 2, 2};  // 1 -> 2: now one closed class {2}
  classify(c);
  EXPECT_EQ(c.report.closed_classes, 1);
  EXPECT_EQ(c.report.transient_states, 2);
  StationaryOptions o;
  o.method = Method::Direct;
  const auto r = solve_stationary(c, o);
  ASSERT_TRUE(r.converged());
  EXPECT_NEAR(r.pi[2], 1.0, 1e-15);
}

TEST(Solvers, BadOptions) {
  const Chain c = ssmp_red_chain(UpdateRule::PerSlot);
  StationaryOptions o;
  o.tol = -1;
  EXPECT_THROW(solve_stationary(c, o), OptionError);
  EXPECT_THROW(method_from("lu"), OptionError);
  o = StationaryOptions{};
  o.x0 = {1.0, 2.0};
  EXPECT_THROW(solve_stationary(c, o), OptionError);
}

TEST(Solvers, DirectSolverReusesSymbolicAnalysisForTheSamePattern) {
  Model m;
  m.buffer = 20;
  m.source = Source::bernoulli(0.5);
  m.aqm.drop = DropFunction::red(4, 15, 0.2);
  m.aqm.w = 0.2;
  m.grid.k = 2;
  DirectSolver ds;
  std::vector<double> means;
  for (double mu : {0.3, 0.5, 0.7}) {
    m.service = Service::geometric(mu);
    const Chain c = build_chain(m);
    const auto r = ds.solve(c);
    ASSERT_TRUE(r.converged());
    // same answer as a fresh solve
    StationaryOptions o;
    o.method = Method::Direct;
    const auto fresh = solve_stationary(c, o);
    double d = 0;
    for (int32_t i = 0; i < c.n; ++i) d += std::abs(r.pi[i] - fresh.pi[i]);
    EXPECT_LT(d, 1e-13);
  }
  EXPECT_GE(ds.solves(), 3);
  const long after_sweep = ds.analyses();
  EXPECT_LE(after_sweep, 2);  // 2 when the first fixed state was improbable and re-solved once
  m.aqm.w = 0.3;  // another reachable set: analysed again
  EXPECT_TRUE(ds.solve(build_chain(m)).converged());
  EXPECT_GT(ds.analyses(), after_sweep);
}
