// Simulator: determinism, the Geo/Geo/1/N closed form within confidence intervals.
#include <gtest/gtest.h>

#include <cmath>

#include "aqmchain/aqmchain.hpp"
#include "fixtures.hpp"

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
