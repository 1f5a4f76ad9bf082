// Automatic grids (graded_points, coarsen_points, refine_grid) and the extrapolation of the
// discretisation error estimate.
#include <gtest/gtest.h>

#include <cmath>

#include "aqmchain/aqmchain.hpp"

using namespace aqm;

namespace {
GridFocus focus(double lo, double hi, DropFunction d) { return GridFocus{lo, hi, std::move(d)}; }

/// Heavy load on a small buffer: avg sits on max_th = 40 where RED's p jumps to 1.
Model heavy_red() {
  Model m;
  m.buffer = 60;
  m.source = Source::bernoulli(0.5);
  m.service.mu = 0.3;
  m.aqm.drop = DropFunction::red(20, 40, 0.1);
  m.aqm.w = 0.02;
  m.grid.refine = Refine::Auto;
  return m;
}
}  // namespace

TEST(Breakpoints, PerDropFunction) {
  EXPECT_EQ(DropFunction::red(100, 200, 0.1).breakpoints(250), (std::vector<double>{100, 200}));
  EXPECT_EQ(DropFunction::gentle_red(50, 100, 0.1).breakpoints(250), (std::vector<double>{50, 100, 200}));
  EXPECT_EQ(DropFunction::gentle_red(100, 200, 0.1).breakpoints(250), (std::vector<double>{100, 200}));  // 400 outside
  EXPECT_EQ(DropFunction::dsred(100, 200, 0.5).breakpoints(250), (std::vector<double>{100, 150, 200}));
  EXPECT_EQ(DropFunction::table({{0, 0}, {30, 0.2}, {60, 1}}).breakpoints(50), (std::vector<double>{30}));
  EXPECT_TRUE(DropFunction::none().breakpoints(250).empty());
}

TEST(GradedPoints, UniformWithoutFoci) {
  const auto p = graded_points(10, 0.25, {}, RefineOptions{});
  ASSERT_EQ(p.size(), 41u);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], 0.25 * i, 1e-12);
}

TEST(GradedPoints, GradesTowardAJumpInsideTheMass) {
  RefineOptions o;
  const auto red = DropFunction::red(100, 200, 0.1);
  const auto p = graded_points(250, 0.25, {focus(180, 220, red)}, o);
  // every breakpoint is a point, strictly increasing, ends at 0 and N
  EXPECT_EQ(p.front(), 0.0);
  EXPECT_EQ(p.back(), 250.0);
  EXPECT_TRUE(std::binary_search(p.begin(), p.end(), 100.0));
  EXPECT_TRUE(std::binary_search(p.begin(), p.end(), 200.0));
  double hmin = 1e9, ratio = 0.0;
  for (size_t i = 1; i < p.size(); ++i) {
    const double h = p[i] - p[i - 1];
    ASSERT_GT(h, 0.0);
    EXPECT_LE(h, 0.25 * (1 + 1e-9));
    hmin = std::min(hmin, h);
    if (i > 1 && p[i] < 199.0 && p[i] > 150.0) ratio = std::max(ratio, h / (p[i - 1] - p[i - 2]));
  }
  EXPECT_NEAR(hmin, o.step_min, 0.5 * o.step_min);  // finest at the jump, never below step_min / 2 (segment ends)
  EXPECT_LE(ratio, o.growth * (1 + 1e-6));            // graded: neighbouring steps grow by at most `growth`
  // the steps next to the jump are the finest; 5 units away they are back to the coarse step
  const auto at = [&](double x) {
    const size_t i = std::upper_bound(p.begin(), p.end(), x) - p.begin();
    return p[i] - p[i - 1];
  };
  EXPECT_LT(at(200.001), 2 * o.step_min);
  EXPECT_NEAR(at(192.0), 0.25, 1e-9);
  // the RED slope 0.001 per packet keeps |dp| <= p_step = 1e-3 with the coarse step: no refinement there
  EXPECT_NEAR(at(150.3), 0.25, 1e-9);
  // scale doubles every step
  EXPECT_NEAR(static_cast<double>(graded_points(250, 0.25, {focus(180, 220, red)}, o, 2.0).size()), 0.5 * p.size(),
              0.05 * p.size());
}

TEST(GradedPoints, SteepContinuousPartRefinedOnlyWhereTheMassIs) {
  RefineOptions o;  // p_step 1e-3; DSRED gamma 0.5 slope 0.01 -> step 0.1
  const auto d = DropFunction::dsred(100, 200, 0.5);
  const auto p = graded_points(250, 0.25, {focus(120, 140, d)}, o);
  const auto at = [&](double x) {
    const size_t i = std::upper_bound(p.begin(), p.end(), x) - p.begin();
    return p[i] - p[i - 1];
  };
  EXPECT_NEAR(at(130.05), 0.1, 1e-9);
  EXPECT_NEAR(at(170.1), 0.25, 1e-9);
  EXPECT_NEAR(at(50.1), 0.25, 1e-9);
}

TEST(GradedPoints, BadOptionsNamed) {
  RefineOptions o;
  o.growth = 3.0;
  try {
    graded_points(250, 0.25, {}, o);
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("grid.growth"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("2"), std::string::npos);
  }
  o = RefineOptions{};
  o.step_min = 0.0;
  EXPECT_THROW(graded_points(250, 0.25, {}, o), ModelError);
  EXPECT_THROW(graded_points(250, -1.0, {}, RefineOptions{}), ModelError);
}

TEST(CoarsenPoints, EveryOtherKeepingForced) {
  const std::vector<double> p = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(coarsen_points(p, 2), (std::vector<double>{0, 2, 4, 6, 7}));
  EXPECT_EQ(coarsen_points(p, 2, {3}), (std::vector<double>{0, 2, 3, 5, 7}));
  EXPECT_EQ(coarsen_points(p, 1), p);
  EXPECT_THROW(coarsen_points(p, 0), ModelError);
}

TEST(Extrapolate, RichardsonExactOnAPowerLaw) {
  // v(h) = 3 + 2 h^1.5: the observed order is 1.5 and the limit is recovered exactly
  const std::vector<double> h = {4, 2, 1};
  std::vector<double> v;
  for (double x : h) v.push_back(3.0 + 2.0 * std::pow(0.01 * x, 1.5));
  const Extrapolation e = extrapolate(h, v);
  EXPECT_EQ(e.method, "richardson");
  EXPECT_NEAR(e.order, 1.5, 1e-9);
  EXPECT_NEAR(e.extrapolated, 3.0, 1e-13);
  EXPECT_NEAR(e.error, 1.25 * (v[2] - 3.0), 1e-12);
  EXPECT_EQ(e.value, v[2]);
}

TEST(Extrapolate, ConvergedAndFit) {
  const Extrapolation c = extrapolate({4, 2, 1}, {0.5, 0.5, 0.5});
  EXPECT_EQ(c.method, "converged");
  EXPECT_EQ(c.extrapolated, 0.5);
  EXPECT_LT(c.error, 1e-9);
  // oscillating values: no clean order, the line a + b h through the points is used
  const Extrapolation f = extrapolate({4, 2, 1}, {1.0, 1.2, 1.1});
  EXPECT_EQ(f.method, "fit");
  // least squares through (4,1), (2,1.2), (1,1.1): b = -1/14 * ..., checked by the normal equations
  const double sh = 7, sv = 3.3, shh = 21, shv = 4 + 2.4 + 1.1, n = 3;
  const double b = (n * shv - sh * sv) / (n * shh - sh * sh), a = (sv - b * sh) / n;
  EXPECT_NEAR(f.extrapolated, a, 1e-12);
  EXPECT_GE(f.error, std::abs(a - 1.1));
  // an observed order above 2 (here 3) is taken as pre-asymptotic: the line fit, not Richardson
  const Extrapolation fast = extrapolate({4, 2, 1}, {1.0 + 64e-3, 1.0 + 8e-3, 1.0 + 1e-3});
  EXPECT_EQ(fast.method, "fit");
  EXPECT_GE(fast.error, 7e-3);  // at least the last change
  EXPECT_THROW(extrapolate({1, 2, 4}, {1, 2, 3}), ModelError);  // h must decrease
  EXPECT_THROW(extrapolate({2, 1}, {1, 2}), ModelError);        // at least three
}

TEST(RefineGrid, HeavyLoadRedRefinesAtMaxTh) {
  Model m = heavy_red();
  const RefinedGrid g = refine_grid({m});
  EXPECT_TRUE(g.report.refined);
  EXPECT_EQ(g.grid.refine, Refine::None);
  ASSERT_EQ(g.report.jumps, (std::vector<double>{40.0}));  // the jump to 1 at max_th is where avg sits
  ASSERT_FALSE(g.report.refined_ranges.empty());
  EXPECT_LT(g.report.refined_ranges[0][0], 40.0);
  EXPECT_GT(g.report.refined_ranges[0][1], 40.0);
  EXPECT_NEAR(g.report.min_step, m.grid.refine_options.step_min, 0.5 * m.grid.refine_options.step_min);
  // the estimate is close to what is built
  Model r = m;
  r.grid = g.grid;
  const QueueChain c = build_chain(r);
  EXPECT_NEAR(g.report.estimated_states / c.n, 1.0, 0.25);
  // a model on a plain grid is left alone
  Model plain = m;
  plain.grid.refine = Refine::None;
  EXPECT_FALSE(refine_grid({plain}).report.refined);
  // build_chain refuses an unresolved automatic grid, naming the key
  try {
    build_chain(m);
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("grid.refine"), std::string::npos);
  }
}

TEST(RefineGrid, BudgetBindsTheRefinement) {
  Model m = heavy_red();
  const RefinedGrid free = refine_grid({m});
  m.grid.refine_options.state_budget = 0.8 * free.report.estimated_states;
  const RefinedGrid bound = refine_grid({m});
  EXPECT_TRUE(bound.report.budget_limited);
  EXPECT_GT(bound.report.budget_factor, 1.0);
  EXPECT_LE(bound.report.estimated_states, m.grid.refine_options.state_budget);
  EXPECT_FALSE(bound.report.note.empty());
}
