// Builder: stochasticity, structure, the Geo/Geo/1/N closed form, memory budget.
#include <gtest/gtest.h>

#include <cmath>

#include "aqmchain/aqmchain.hpp"
#include "fixtures.hpp"

using namespace aqm;

namespace {
const auto geo = test::geo_model;
}  // namespace

TEST(Chain, RowsAreStochasticAndStructured) {
  Model m = geo(20, 0.4, 0.5);
  m.aqm.drop = DropFunction::red(4, 12, 0.2);
  m.grid.k = 2;
  const QueueChain c = build_chain(m);
  ASSERT_GT(c.n, 0);
  EXPECT_LE(c.report.max_row_error, 1e-14);
  EXPECT_EQ(c.report.closed_classes, 1);
  for (int32_t i = 0; i < c.n; ++i) {
    for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e) {
      EXPECT_GT(c.val[e], 0.0);
      EXPECT_LE(std::abs(c.component("level")[c.col[e]] - c.component("level")[i]), 1);  // block tridiagonal in n
      if (e > c.rowptr[i]) EXPECT_LT(c.col[e - 1], c.col[e]);
    }
  }
  EXPECT_EQ(c.index_of({0, 0, 0}), 0);
}

TEST(Chain, GeoGeo1NClosedForm) {
  // Birth-death with delayed access: pi_1 (1-a) mu = pi_0 a; pi_{n+1} (1-a) mu = pi_n a (1-mu);
  // pi_N mu = pi_{N-1} a (1-mu).
  const int N = 12;
  const double a = 0.3, mu = 0.5;
  std::vector<double> p(N + 1);
  p[0] = 1.0;
  p[1] = a / ((1 - a) * mu);
  for (int n = 1; n < N - 1; ++n) p[n + 1] = p[n] * a * (1 - mu) / ((1 - a) * mu);
  p[N] = p[N - 1] * a * (1 - mu) / mu;
  double s = 0;
  for (double v : p) s += v;
  for (double& v : p) v /= s;
  const QueueChain c = build_chain(geo(N, a, mu));
  for (Method meth : {Method::Direct, Method::Arnoldi, Method::GaussSeidel, Method::Power}) {
    StationaryOptions o;
    o.method = meth;
    const auto r = solve_stationary(c, o);
    ASSERT_TRUE(r.converged()) << to_string(meth) << " " << r.note;
    EXPECT_LE(r.residual, 1e-12);
    const Metrics mt = compute_metrics(c, r.pi);
    for (int n = 0; n <= N; ++n) EXPECT_NEAR(mt.system_pmf[n], p[n], 1e-11) << to_string(meth) << " n=" << n;
    EXPECT_NEAR(mt.loss, p[N], 1e-11);  // Bernoulli arrivals see time averages
    EXPECT_NEAR(mt.loss_overflow, p[N], 1e-11);
    EXPECT_LT(mt.littles_law_error, 1e-10);
  }
}

TEST(Chain, LargeBufferMatchesSpecPoint) {
  const QueueChain c = build_chain(geo(60, 0.3, 0.5));
  const auto r = solve_stationary(c);
  ASSERT_TRUE(r.converged());
  const Metrics m = compute_metrics(c, r.pi);
  EXPECT_NEAR(m.mean_system, 1.05, 1e-10);
  EXPECT_NEAR(m.var_system, 1.5225, 1e-10);
  EXPECT_NEAR(m.mean_queue, 0.45, 1e-10);
  EXPECT_NEAR(m.var_queue, 0.9225, 1e-10);
  EXPECT_NEAR(m.mean_response, 3.5, 1e-10);
  double mean = 0;
  for (size_t r2 = 0; r2 < m.response_pmf.size(); ++r2) mean += r2 * m.response_pmf[r2];
  EXPECT_NEAR(mean, 3.5, 1e-10);
}

TEST(Chain, MemoryBudgetRefuses) {
  Model m = geo(250, 0.5, 0.5);
  m.grid.k = 64;
  BuildOptions o;
  o.memory_limit_bytes = 1e6;
  EXPECT_THROW(build_chain(m, o), StateSpaceTooLarge);
}

// Stateful AQM (docs/stateful-aqm.md): the components, their ranges, stochastic rows, and the
// settings that switch the state off reduce to the plain chain.
TEST(Chain, StatefulComponents) {
  Model m = geo(12, 0.45, 0.5);
  m.aqm.drop = DropFunction::red(2, 6, 0.3);
  m.aqm.w = 0.3;
  m.grid.k = 2;
  const QueueChain plain = build_chain(m);
  Model s = m;
  s.aqm.spacing = Spacing::Count;
  const StatefulInfo info = stateful_info(s);
  // smallest nonzero p_b on the grid: 0.3 * 0.5 / 4 = 0.0375, so count p_b < 1 up to 26
  EXPECT_EQ(info.count_cap, 26);
  const QueueChain c = build_chain(s);
  EXPECT_LE(c.report.max_row_error, 1e-14);
  EXPECT_GT(c.n, plain.n);
  int max_count = 0;
  for (int32_t i = 0; i < c.n; ++i) max_count = std::max(max_count, c.component("count")[i] - 1);
  EXPECT_LE(max_count, 26);
  EXPECT_GT(max_count, 0);
  // adaptive RED without moves: one p_max point, no clock, the plain chain
  Model a = m;
  a.aqm.adaptive.enabled = true;
  a.aqm.adaptive.increment = 0.0;
  a.aqm.adaptive.decrease = 1.0;
  a.aqm.adaptive.clock = AdaptiveClock::Exact;
  const QueueChain ca = build_chain(a);
  ASSERT_EQ(ca.n, plain.n);
  EXPECT_EQ(ca.val, plain.val);
  EXPECT_EQ(ca.col, plain.col);
  // the exact clock's budget
  a.aqm.adaptive.increment = 0.01;
  a.aqm.adaptive.decrease = 0.9;
  a.aqm.adaptive.max_clock_states = 1e5;
  try {
    build_chain(a);
    FAIL() << "exact clock above its budget accepted";
  } catch (const StateSpaceTooLarge& e) {
    EXPECT_EQ(e.param(), "aqm.max_clock_states");
  }
}

TEST(Filter, AutoredWeight) {
  // P = 0.5, q - avg = 0: x = 5.923, w = 0.25 * 2x / ln x / N
  const double x = 5.923;
  EXPECT_DOUBLE_EQ(autored_weight(1e-6, 0.5, 3.0, 3.0, 10), 0.25 * (2 * x / std::log(x)) / 10);
  // x clipped at e: J = 2e; floor and ceiling
  EXPECT_DOUBLE_EQ(autored_weight(1e-6, 0.5, 0.0, 10.0, 10), 0.25 * 2 * std::exp(1.0) / 10);
  EXPECT_EQ(autored_weight(0.002, 0.0, 5.0, 1.0, 10), 0.002);
  EXPECT_EQ(autored_weight(0.002, 0.5, 1000.0, 0.0, 1), 1.0);
}

// docs/classes.md: the two-class chain of two identical classes lumps onto the plain chain;
// the per-class events add up to the aggregate ones; the refusals name the parameter.
TEST(Chain, ClassChainsLumpAndRefuse) {
  Model m = geo(8, 0.55, 0.5);
  m.aqm.drop = DropFunction::red(2, 6, 0.3);
  m.aqm.w = 0.3;
  m.aqm.policy = DropPolicy::Random;
  m.grid.k = 2;
  m.aqm.ecn = 0.25;
  const QueueChain plain = build_chain(m);
  const StationaryResult pp = solve_stationary(plain);
  const Metrics mp = compute_metrics(plain, pp.pi);
  Model c = m;
  c.aqm.ecn = 0.0;
  TrafficClass a, b;
  a.name = "a", a.share = {0.3}, a.ecn = 0.25;
  b.name = "b", b.share = {0.7}, b.ecn = 0.25;
  c.classes = {a, b};
  for (ClassChain kind : {ClassChain::Approx, ClassChain::Exact}) {
    const QueueChain ch = build_chain(c, BuildOptions{}, kind);
    EXPECT_LE(ch.report.max_row_error, 1e-14);
    EXPECT_GT(ch.n, plain.n);
    const StationaryResult p = solve_stationary(ch);
    const Metrics mc = compute_metrics(ch, p.pi);
    EXPECT_NEAR(mc.loss, mp.loss, 1e-12);
    EXPECT_NEAR(mc.mean_system, mp.mean_system, 1e-11);
    EXPECT_NEAR(mc.mean_response, mp.mean_response, 1e-10);
    ASSERT_EQ(mc.classes.size(), 2u);
    EXPECT_NEAR(mc.classes[0].arrival_rate, 0.3 * mp.arrival_rate, 1e-15);
    double lost = 0, in = 0;
    for (const ClassMetrics& k : mc.classes) lost += k.loss * k.arrival_rate, in += k.mean_queue;
    EXPECT_NEAR(lost, mp.loss * mp.arrival_rate, 1e-12);
    EXPECT_NEAR(in, mp.mean_system, 1e-11);
    // identical classes, Bernoulli arrivals: the random-order approximation is exact
    EXPECT_NEAR(mc.classes[0].throughput_share, 0.3, 1e-11);
    EXPECT_NEAR(mc.classes[0].mean_response, mp.mean_response, 1e-10);
  }
  Model three = c;
  TrafficClass x = b;
  x.name = "x", x.share = {0.2};
  three.classes[1].share = {0.5};
  three.classes.push_back(x);
  try {
    build_chain(three);
    FAIL() << "three classes accepted by the chain";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "class");
  }
  Model big = c;
  big.buffer = 20;
  try {
    build_chain(big, BuildOptions{}, ClassChain::Exact);
    FAIL() << "an exact chain of 2^21 sequences accepted";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "model.buffer");
  }
}

TEST(Chain, CountReachableIsTheBuildersStateSet) {
  // The exploration alone numbers exactly the states build_chain assembles; the per-component
  // counts are the histograms of the chain's labels.
  for (int k : {1, 2, 4}) {
    Model m = geo(30, 0.45, 0.5);
    m.aqm.drop = DropFunction::red(8, 20, 0.2);
    m.aqm.w = 0.05;
    m.grid.k = k;
    const QueueChain c = build_chain(m);
    const ReachableCount r = count_reachable(m);
    EXPECT_EQ(r.states, c.n);
    EXPECT_GE(r.transitions_bound, c.nnz());
    ASSERT_EQ(static_cast<int>(r.component_counts.size()), c.space.count());
    for (int comp = 0; comp < c.space.count(); ++comp) {
      std::vector<int64_t> hist(r.component_counts[comp].size(), 0);
      for (int32_t s = 0; s < c.n; ++s) ++hist[c.labels[comp][s]];
      EXPECT_EQ(hist, r.component_counts[comp]) << c.space.component(comp).name;
    }
    EXPECT_LE(r.states, estimate_chain(m).reachable_bound);
  }
  Model m = geo(250, 0.5, 0.5);  // the budget of Chain.MemoryBudgetRefuses: exploring alone refuses too
  m.grid.k = 64;
  BuildOptions tiny;
  tiny.memory_limit_bytes = 1e6;
  EXPECT_THROW(count_reachable(m, tiny), StateSpaceTooLarge);
}

TEST(Chain, BatchArrivalsMoveTheLevelByUpToBAndCountEveryPacket) {
  // batch Bernoulli 0..3 packets per slot, AQM off: from level n the level moves by -1..+3,
  // capped at N; the arrival weight of every state is the mean batch, the admitted weight
  // E min(k, N - n) (no AQM: a packet is lost only to overflow)
  const std::vector<double> b{0.4, 0.3, 0.2, 0.1};
  Model m = geo(8, 0.5, 0.6);
  m.source = Source::batch_mmbp({{1.0}}, {b});
  ASSERT_EQ(m.source.max_batch(), 3);
  const Chain c = build_chain(m);
  EXPECT_LE(c.report.max_row_error, 1e-14);
  const auto& level = c.component("level");
  const auto &arr = c.event("arrival"), &adm = c.event("admit"), &ovf = c.event("overflow");
  int up3 = 0;
  for (int32_t i = 0; i < c.n; ++i) {
    const int n = level[i];
    double admitted = 0.0;
    for (int k = 0; k < 4; ++k) admitted += b[k] * std::min(k, 8 - n);
    EXPECT_NEAR(arr[i], 1.0, 4e-15);  // 0.3 + 0.4 + 0.3
    EXPECT_NEAR(adm[i], admitted, 4e-15);
    EXPECT_NEAR(ovf[i], 1.0 - admitted, 4e-15);
    for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e) {
      const int d = level[c.col[e]] - n;
      EXPECT_GE(d, -1);
      EXPECT_LE(d, std::min(3, 8 - n));
      up3 += d == 3;
    }
  }
  EXPECT_GT(up3, 0);
  // B = 1: the MMBP's chain, bit for bit
  Model one = geo(8, 0.5, 0.6), plain = geo(8, 0.5, 0.6);
  one.source = Source::batch_mmbp({{0.8, 0.2}, {0.3, 0.7}}, {{0.9, 0.1}, {0.35, 0.65}});
  plain.source = Source::mmbp({{0.8, 0.2}, {0.3, 0.7}}, {0.1, 0.65});
  one.aqm.drop = plain.aqm.drop = DropFunction::red(2, 6, 0.3);
  const Chain a = build_chain(one), p = build_chain(plain);
  EXPECT_EQ(a.col, p.col);
  EXPECT_EQ(a.val, p.val);
  EXPECT_EQ(a.event("aqm_drop"), p.event("aqm_drop"));
}

namespace {
/// Slotted RED, buffer 12, on the integer grid: with w = 0.5 some updates land exactly on grid
/// points, so w - h adds states (the mass splits onto a neighbour) and w + h does not.
struct RedShape {
  int buffer = 12, k = 1;
  double alpha = 0.45, min_th = 3, max_th = 9;
};
Model red_model(double p_max, double w, const RedShape& q = {}) {
  Model m = geo(q.buffer, q.alpha, 0.5);
  m.aqm.drop = DropFunction::red(q.min_th, q.max_th, p_max);
  m.aqm.w = w;
  m.grid.k = q.k;
  return m;
}
double dense_product(const Chain& a, const std::vector<double>& x, const std::vector<double>& y, int32_t row) {
  double s = 0.0;
  for (int32_t e = a.rowptr[row]; e < a.rowptr[row + 1]; ++e) s += a.val[e] * y[static_cast<size_t>(a.col[e])];
  return x[static_cast<size_t>(row)] * s;
}
}  // namespace

TEST(ChainDifference, ProductsAreThoseOfTheBuiltChainsAndAddedStatesTheirs) {
  const double h = 1e-5, eps = std::numeric_limits<double>::epsilon();
  const QueueChain c = build_chain(red_model(0.2, 0.5));
  std::vector<double> pi(static_cast<size_t>(c.n)), y(static_cast<size_t>(c.n));
  for (int32_t i = 0; i < c.n; ++i) pi[i] = 1.0 + 0.01 * i, y[i] = std::sin(1.0 + i);  // any x and y: a bilinear form
  // p_max: the same states and entries at both sides; the products are those of the built chains
  {
    const Model mp = red_model(0.2 + h, 0.5), mm = red_model(0.2 - h, 0.5);
    const QueueChain cp = build_chain(mp), cm = build_chain(mm);
    ASSERT_EQ(cp.n, c.n);
    ASSERT_EQ(cm.n, c.n);
    const auto gp = queue_generator(mp), gm = queue_generator(mm);
    const ChainDifference d = chain_difference(c, *gp, *gm, h, pi.data(), {y.data(), 1}, c.n);
    ASSERT_TRUE(d.valid) << d.why;
    EXPECT_TRUE(d.plus_same_support && d.minus_same_support && !d.plus_drops && !d.minus_drops);
    EXPECT_EQ(d.added_plus.count() + d.added_minus.count(), 0);
    double plus = 0.0, minus = 0.0, base = 0.0, mass = 0.0;
    for (int32_t s = 0; s < c.n; ++s) {
      plus += dense_product(cp, pi, y, s), minus += dense_product(cm, pi, y, s), base += dense_product(c, pi, y, s);
      mass += pi[s];
    }
    // a sum of m products is within m eps of the sum of their magnitudes, here at most
    // sum_s pi_s (|y| <= 1, rows of P sum to 1); each side's sum has at most 3 nnz terms
    const double round = 3.0 * static_cast<double>(c.nnz()) * eps * mass;
    EXPECT_NEAR(d.products[0] * 2.0 * h, plus - minus, 2.0 * round);
    EXPECT_NEAR(d.products_plus[0], plus - base, 2.0 * round);
    EXPECT_NEAR(d.products_minus[0], minus - base, 2.0 * round);
    EXPECT_GT(std::abs(plus - minus), 100.0 * round);  // the difference is not round-off
    for (size_t e = 0; e < c.event_names.size(); ++e) {
      EXPECT_EQ(d.events_plus[e], cp.events[e]);  // the same generator calls
      EXPECT_EQ(d.events_minus[e], cm.events[e]);
    }
    // a smooth parameter: the entries' second differences are round-off
    EXPECT_LE(d.kink_excess, 1e-6 * d.kink_scale);
  }
  // w - h adds states: they are the built chain's extra states, with its rows, and pi's flow into them
  {
    const Model mp = red_model(0.2, 0.5 + h), mm = red_model(0.2, 0.5 - h);
    const QueueChain cm = build_chain(mm);
    ASSERT_GT(cm.n, c.n);
    const auto gp = queue_generator(mp), gm = queue_generator(mm);
    const ChainDifference d = chain_difference(c, *gp, *gm, h, pi.data(), {y.data(), 1}, c.n);
    ASSERT_TRUE(d.valid) << d.why;
    EXPECT_EQ(d.added_plus.count(), 0);
    ASSERT_EQ(d.added_minus.count(), cm.n - c.n);
    EXPECT_FALSE(d.minus_same_support);
    EXPECT_FALSE(d.minus_drops);  // states are only added: every state of the chain stays reachable
    const AddedStates& a = d.added_minus;
    std::vector<double> inflow(static_cast<size_t>(a.count()), 0.0);
    std::vector<int> terms(static_cast<size_t>(a.count()), 0);
    double minus = 0.0, base = 0.0, mass = 0.0;  // pi (P- - P) y over the chain's own states
    for (int32_t s = 0; s < c.n; ++s) {
      const int32_t sm = cm.index_of_key(c.key_of(s));
      ASSERT_GE(sm, 0);
      base += dense_product(c, pi, y, s), mass += pi[s];
      for (int32_t e = cm.rowptr[sm]; e < cm.rowptr[sm + 1]; ++e) {
        const int64_t k = cm.key_of(cm.col[e]);
        const int32_t t = c.index_of_key(k);
        if (t >= 0) {
          minus += pi[s] * cm.val[e] * y[static_cast<size_t>(t)];
          continue;
        }
        const size_t i = static_cast<size_t>(std::lower_bound(a.keys.begin(), a.keys.end(), k) - a.keys.begin());
        inflow[i] += pi[s] * cm.val[e], ++terms[i];
      }
    }
    EXPECT_NEAR(d.products_minus[0], minus - base, 2.0 * 3.0 * static_cast<double>(cm.nnz()) * eps * mass);
    for (int64_t i = 0; i < a.count(); ++i) {
      const int32_t t = cm.index_of_key(a.keys[static_cast<size_t>(i)]);
      ASSERT_GE(t, 0);
      EXPECT_LT(c.index_of_key(a.keys[static_cast<size_t>(i)]), 0);
      // sums of the same positive terms, perhaps in another order: within terms x eps of the sum
      EXPECT_NEAR(a.inflow[static_cast<size_t>(i)], inflow[static_cast<size_t>(i)],
                  (terms[static_cast<size_t>(i)] + 1) * eps * inflow[static_cast<size_t>(i)]);
      ASSERT_EQ(a.rowptr[i + 1] - a.rowptr[i], cm.rowptr[t + 1] - cm.rowptr[t]);
      for (int32_t e = a.rowptr[i], f = cm.rowptr[t]; e < a.rowptr[i + 1]; ++e, ++f) {
        const int32_t col = a.col[e];
        const int64_t key = col < c.n ? c.key_of(col) : a.keys[static_cast<size_t>(col - c.n)];
        EXPECT_EQ(key, cm.key_of(cm.col[f]));
        EXPECT_EQ(a.val[e], cm.val[f]);
      }
      for (size_t e = 0; e < c.event_names.size(); ++e) EXPECT_EQ(a.events[e][i], cm.events[e][t]);
    }
    // a budget below the added states leaves the result invalid, saying why
    const ChainDifference small = chain_difference(c, *gp, *gm, h, pi.data(), {y.data(), 1}, a.count() - 1);
    EXPECT_FALSE(small.valid);
    EXPECT_NE(small.why.find("states are added"), std::string::npos);
  }
  // a parameter that leaves P alone: both sides are the chain's own model, nothing moves
  {
    const auto g = queue_generator(red_model(0.2, 0.5));
    const ChainDifference d = chain_difference(c, *g, *g, h, pi.data(), {y.data(), 1}, c.n);
    ASSERT_TRUE(d.valid) << d.why;
    EXPECT_TRUE(d.plus_same_support && d.minus_same_support && d.sides_same_support);
    EXPECT_EQ(d.kink_scale, 0.0);  // the differences of the duplicates' summation order count as 0
    EXPECT_EQ(d.products[0], 0.0);
  }
  // another descriptor (a grid with more points) is refused, not misread
  {
    Model other = red_model(0.2, 0.5);
    other.grid.k = 2;
    const auto g = queue_generator(other);
    const ChainDifference d = chain_difference(c, *g, *g, h, pi.data(), {y.data(), 1}, c.n);
    EXPECT_FALSE(d.valid);
    EXPECT_NE(d.why.find("descriptor"), std::string::npos);
  }
}

namespace {
/// Row s of the base chain `c` in a chain `a` built at another parameter value (matched by key):
/// its product with y over the base chain's states, and whether its support differs from the
/// base row's (entries gained, lost, or into states the base chain lacks).
std::pair<double, bool> side_row(const Chain& a, const Chain& c, const std::vector<double>& y, int32_t s) {
  const int32_t r = a.index_of_key(c.key_of(s));
  EXPECT_GE(r, 0);
  double sum = 0.0;
  std::vector<int32_t> cols;
  bool outside = false;
  for (int32_t e = a.rowptr[r]; e < a.rowptr[r + 1]; ++e) {
    const int32_t t = c.index_of_key(a.key_of(a.col[e]));
    if (t < 0) {
      outside = true;
      continue;
    }
    sum += a.val[e] * y[static_cast<size_t>(t)], cols.push_back(t);
  }
  std::sort(cols.begin(), cols.end());
  const std::vector<int32_t> base(c.col.begin() + c.rowptr[s], c.col.begin() + c.rowptr[s + 1]);
  return {sum, outside || cols != base};
}
}  // namespace

TEST(ChainDifference, ASmallStepRedoesTheRowsNotSmoothAndKeepsTheOthersCentral) {
  const double h = 1e-5, hs = 1e-7, eps = std::numeric_limits<double>::epsilon();
  const QueueChain c = build_chain(red_model(0.2, 0.5));
  std::vector<double> pi(static_cast<size_t>(c.n)), y(static_cast<size_t>(c.n));
  double mass = 0.0;
  for (int32_t i = 0; i < c.n; ++i) pi[i] = 1.0 + 0.01 * i, y[i] = std::sin(1.0 + i), mass += pi[i];
  // w: w - h adds states (updates that landed on grid points split), so those rows are redone
  const Model mp = red_model(0.2, 0.5 + h), mm = red_model(0.2, 0.5 - h);
  const Model msp = red_model(0.2, 0.5 + hs), msm = red_model(0.2, 0.5 - hs);
  const auto gp = queue_generator(mp), gm = queue_generator(mm), gsp = queue_generator(msp), gsm = queue_generator(msm);
  const SmallStep small{gsp.get(), gsm.get(), hs, 1e-6};
  const ChainDifference d = chain_difference(c, *gp, *gm, h, pi.data(), {y.data(), 1}, c.n, &small);
  ASSERT_TRUE(d.valid) << d.why;
  ASSERT_TRUE(d.small != nullptr);
  const ChainDifference& sd = *d.small;
  ASSERT_TRUE(sd.valid);
  ASSERT_EQ(d.redone.size(), static_cast<size_t>(c.n));
  EXPECT_GT(d.rows_redone, 0);
  EXPECT_LT(d.rows_redone, c.n);  // the others keep their central quotient
  // at h, every result is that of the pass without a second step
  const ChainDifference plain = chain_difference(c, *gp, *gm, h, pi.data(), {y.data(), 1}, c.n);
  EXPECT_EQ(d.products, plain.products);
  EXPECT_EQ(d.products_minus, plain.products_minus);
  EXPECT_EQ(d.added_minus.keys, plain.added_minus.keys);
  EXPECT_EQ(d.kink_excess, plain.kink_excess);
  // the effective sides from the built chains, row by row
  const QueueChain cp = build_chain(mp), cm = build_chain(mm), csp = build_chain(msp), csm = build_chain(msm);
  double plus = 0.0, minus = 0.0, central = 0.0;
  int64_t redone = 0;
  for (int32_t s = 0; s < c.n; ++s) {
    const auto [p0, changed_p] = side_row(cp, c, y, s);
    const auto [m0, changed_m] = side_row(cm, c, y, s);
    const double b = dense_product(c, pi, y, s) / pi[static_cast<size_t>(s)];
    const double w = pi[static_cast<size_t>(s)];
    if (changed_p || changed_m) EXPECT_TRUE(d.redone[static_cast<size_t>(s)]) << "state " << s;  // a support change is redone
    if (d.redone[static_cast<size_t>(s)]) {
      ++redone;
      const double p1 = side_row(csp, c, y, s).first, m1 = side_row(csm, c, y, s).first;
      plus += w * (p1 - b), minus += w * (m1 - b), central += w * (p1 - m1);
    } else {
      const double kept = hs / (2.0 * h) * (p0 - m0);
      plus += w * kept, minus -= w * kept, central += w * 2.0 * kept;
    }
  }
  EXPECT_EQ(redone, d.rows_redone);
  // sums of at most 3 nnz terms per side (|y| <= 1, rows of P sum to 1), each within its eps;
  // the kept rows' quotient has h / hs of the difference's rounding
  const double round = 4.0 * static_cast<double>(c.nnz()) * eps * mass;
  EXPECT_NEAR(sd.products_plus[0], plus, 2.0 * round);
  EXPECT_NEAR(sd.products_minus[0], minus, 2.0 * round);
  EXPECT_NEAR(sd.products[0] * 2.0 * hs, central, 2.0 * round);
  EXPECT_GT(std::abs(sd.products_minus[0]), 100.0 * round);
  // the states w - hs adds are the built chain's, explored from the redone rows
  EXPECT_EQ(sd.added_minus.count(), csm.n - c.n);
  EXPECT_EQ(sd.added_plus.count(), csp.n - c.n);
  for (size_t e = 0; e < c.event_names.size(); ++e)
    for (int32_t s = 0; s < c.n; ++s)
      if (d.redone[static_cast<size_t>(s)])
        EXPECT_EQ(sd.events_minus[e][static_cast<size_t>(s)], csm.events[e][static_cast<size_t>(csm.index_of_key(c.key_of(s)))]);
  // p_max: every row smooth, none redone, no result at the small step
  {
    const Model pp = red_model(0.2 + h, 0.5), pm = red_model(0.2 - h, 0.5), psp = red_model(0.2 + hs, 0.5),
                psm = red_model(0.2 - hs, 0.5);
    const auto a = queue_generator(pp), b = queue_generator(pm), sa = queue_generator(psp), sb = queue_generator(psm);
    const SmallStep st{sa.get(), sb.get(), hs, 1e-6};
    const ChainDifference e = chain_difference(c, *a, *b, h, pi.data(), {y.data(), 1}, c.n, &st);
    ASSERT_TRUE(e.valid);
    EXPECT_EQ(e.rows_redone, 0);
    EXPECT_TRUE(e.small == nullptr);  // the result at h is the answer
  }
  // a second step that is not smaller is refused, naming it
  const SmallStep wrong{gsp.get(), gsm.get(), 2.0 * h, 1e-6};
  EXPECT_THROW(chain_difference(c, *gp, *gm, h, pi.data(), {y.data(), 1}, c.n, &wrong), ModelError);
}

TEST(ChainDifference, EventsNotKeptAreNotStoredButStillTested) {
  // w: some rows redone at a second step, so the small step's events are checked too
  const double h = 1e-5, hs = 1e-7;
  const QueueChain c = build_chain(red_model(0.2, 0.5));
  ASSERT_GE(c.event_names.size(), 3u);
  std::vector<double> pi(static_cast<size_t>(c.n)), y(2 * static_cast<size_t>(c.n));
  for (int32_t i = 0; i < c.n; ++i) pi[i] = 1.0 + 0.01 * i, y[2 * i] = std::sin(1.0 + i), y[2 * i + 1] = std::cos(2.0 * i);
  const Model mp = red_model(0.2, 0.5 + h), mm = red_model(0.2, 0.5 - h);
  const Model msp = red_model(0.2, 0.5 + hs), msm = red_model(0.2, 0.5 - hs);
  const auto gp = queue_generator(mp), gm = queue_generator(mm), gsp = queue_generator(msp), gsm = queue_generator(msm);
  const SmallStep small{gsp.get(), gsm.get(), hs, 1e-6};
  const ChainDifference all = chain_difference(c, *gp, *gm, h, pi.data(), {y.data(), 2}, c.n, &small);
  std::vector<char> kept(c.event_names.size(), 0);
  kept[0] = kept[2] = 1;  // the first and the third event
  const ChainDifference some = chain_difference(c, *gp, *gm, h, pi.data(), {y.data(), 2}, c.n, &small, kept);
  ASSERT_TRUE(all.valid && some.valid);
  ASSERT_TRUE(all.small && some.small);
  const std::pair<const ChainDifference*, const ChainDifference*> steps[] = {{&all, &some},
                                                                             {all.small.get(), some.small.get()}};
  for (const auto& [pa, pb] : steps) {
    const ChainDifference& a = *pa;
    const ChainDifference& b = *pb;
    for (size_t q = 0; q < c.event_names.size(); ++q) {
      if (q == 0 || q == 2) {
        EXPECT_EQ(b.events_plus[q], a.events_plus[q]) << c.event_names[q];
        EXPECT_EQ(b.events_minus[q], a.events_minus[q]) << c.event_names[q];
      } else {
        EXPECT_TRUE(b.events_plus[q].empty() && b.events_minus[q].empty()) << c.event_names[q];
      }
    }
    // the products (two adjoint vectors, interleaved) and the smoothness numbers are the same
    EXPECT_EQ(b.products, a.products);
    EXPECT_EQ(b.products_plus, a.products_plus);
    EXPECT_EQ(b.kink_excess, a.kink_excess);
    EXPECT_EQ(b.kink_scale, a.kink_scale);
    EXPECT_EQ(b.distance_plus, a.distance_plus);
  }
  EXPECT_EQ(some.rows_redone, all.rows_redone);
  // the second adjoint vector's products are those of a pass with it alone
  std::vector<double> y2(static_cast<size_t>(c.n));
  for (int32_t i = 0; i < c.n; ++i) y2[i] = y[2 * i + 1];
  const ChainDifference second = chain_difference(c, *gp, *gm, h, pi.data(), {y2.data(), 1}, c.n);
  EXPECT_EQ(second.products_plus[0], all.products_plus[1]);
  EXPECT_EQ(second.products[0], all.products[1]);
}

TEST(ChainDifference, ThreadsGiveTheSameProducts) {
  // above the size where the pass runs on the core's threads (20,000 states)
  const RedShape big{100, 8, 0.48, 30, 70};
  const Model m = red_model(0.1, 0.01, big);
  const QueueChain c = build_chain(m);
  ASSERT_GT(c.n, 20000);
  const double h = 1e-3, eps = std::numeric_limits<double>::epsilon();
  std::vector<double> pi(static_cast<size_t>(c.n)), y(static_cast<size_t>(c.n));
  double mass = 0.0;
  for (int32_t i = 0; i < c.n; ++i) pi[i] = 1.0 / (1.0 + i), y[i] = std::cos(0.1 * i), mass += pi[i];
  const Model mp = red_model(0.1 + h, 0.01, big), mm = red_model(0.1 - h, 0.01, big);
  const auto gp = queue_generator(mp), gm = queue_generator(mm);
  const int before = set_num_threads(1);
  const ChainDifference one = chain_difference(c, *gp, *gm, h, pi.data(), {y.data(), 1}, c.n);
  set_num_threads(2);
  const ChainDifference two = chain_difference(c, *gp, *gm, h, pi.data(), {y.data(), 1}, c.n);
  set_num_threads(before);
  ASSERT_TRUE(one.valid && two.valid);
  // the same terms summed in other chunks: within (terms) eps of the sum of their magnitudes
  const double round = 3.0 * static_cast<double>(c.nnz()) * eps * mass;
  EXPECT_NEAR(one.products_plus[0], two.products_plus[0], 2.0 * round);
  EXPECT_NEAR(one.products_minus[0], two.products_minus[0], 2.0 * round);
  EXPECT_NEAR(one.products[0], two.products[0], 2.0 * round / (2.0 * h));
  EXPECT_GT(std::abs(one.products_plus[0]), 100.0 * round);
  EXPECT_EQ(one.events_plus, two.events_plus);  // per state: no sums across states
  EXPECT_EQ(one.kink_scale, two.kink_scale);
  EXPECT_EQ(one.distance_minus, two.distance_minus);
  // a second step on the rows min_th kinks (min_th sits on a grid point): the same rows
  // redone, the same sums within their rounding
  {
    RedShape lo = big, hi = big, slo = big, shi = big;
    const double hs = 1e-5;
    hi.min_th += h, lo.min_th -= h, shi.min_th += hs, slo.min_th -= hs;
    const auto a = queue_generator(red_model(0.1, 0.01, hi)), b = queue_generator(red_model(0.1, 0.01, lo));
    const auto sa = queue_generator(red_model(0.1, 0.01, shi)), sb = queue_generator(red_model(0.1, 0.01, slo));
    const SmallStep st{sa.get(), sb.get(), hs, 1e-6};
    set_num_threads(1);
    const ChainDifference s1 = chain_difference(c, *a, *b, h, pi.data(), {y.data(), 1}, c.n, &st);
    set_num_threads(2);
    const ChainDifference s2 = chain_difference(c, *a, *b, h, pi.data(), {y.data(), 1}, c.n, &st);
    set_num_threads(before);
    ASSERT_TRUE(s1.valid && s2.valid && s1.small && s2.small);
    EXPECT_GT(s1.rows_redone, 0);
    EXPECT_LT(s1.rows_redone, c.n / 10);
    EXPECT_EQ(s1.redone, s2.redone);
    EXPECT_EQ(s1.small->events_minus, s2.small->events_minus);
    EXPECT_EQ(s1.small->kink_scale, s2.small->kink_scale);
    EXPECT_EQ(s1.small->kept_distance, s2.small->kept_distance);
    EXPECT_NEAR(s1.small->products_plus[0], s2.small->products_plus[0], 2.0 * round);
    EXPECT_NEAR(s1.small->products_minus[0], s2.small->products_minus[0], 2.0 * round);
  }
}

// The tagged packet of an M/M/1 queue with push-outs, from position j (j packets ahead): it
// moves ahead at the service rate mu, is served from position 0 at rate mu and pushed out at
// rate g from every position.  Closed forms: with s = mu / (mu + g) the probability of passing
// one position, P(served | j) = s^(j+1); given served, R is Erlang(j + 1, mu + g) (each stage
// lasts an exponential(mu + g) time whatever happens), so E[R 1_served] = s^(j+1) (j+1) / (mu + g)
// and E[R^2 1_served] = s^(j+1) (j+1)(j+2) / (mu + g)^2; the sojourn is the time to the
// first of the (j+1) stages' ends or a push-out.
TEST(TaggedChain, ContinuousMomentsBySolvesEqualTheClosedForm) {
  const int J = 6;
  const double mu = 0.7, g = 0.2, r = mu + g, s = mu / r;
  TaggedRows tr;
  tr.states = J + 1;  // state j + 1 never entered: an empty row (state J)
  tr.rp.assign(static_cast<size_t>(J) + 2, 0);
  tr.served.assign(static_cast<size_t>(J) + 1, 0.0);
  tr.pushed.assign(static_cast<size_t>(J) + 1, 0.0);
  for (int j = 0; j < J; ++j) {
    if (j > 0) tr.col.push_back(j - 1), tr.val.push_back(mu);
    tr.col.push_back(j), tr.val.push_back(-r);
    tr.rp[static_cast<size_t>(j) + 1] = static_cast<int32_t>(tr.col.size());
    tr.served[static_cast<size_t>(j)] = j == 0 ? mu : 0.0;
    tr.pushed[static_cast<size_t>(j)] = g;
  }
  tr.rp[static_cast<size_t>(J) + 1] = tr.rp[static_cast<size_t>(J)];
  std::vector<double> v(static_cast<size_t>(J) + 1, 0.0);
  v[1] = 0.25, v[3] = 0.75;  // the law of the tagged arrival's position
  ResponseResult res;
  ASSERT_TRUE(absorbing_moments(tr, v, ResponseOptions{}, res));
  double ps = 0, m1 = 0, m2 = 0, soj = 0;
  for (int j = 0; j < J; ++j) {
    const double w = v[static_cast<size_t>(j)], k = j + 1, pj = std::pow(s, k);
    ps += w * pj, m1 += w * pj * k / r, m2 += w * pj * k * (k + 1) / (r * r);
    soj += w * (1.0 - pj) / g;  // E[min(stages' end, push-out)] = P(pushed) / g (push-outs at rate g)
  }
  // the solves' residuals are at most 1e-12 relative; A's condition here is about (mu + g) / g
  // times J, so the moments are good to well within 1e-10
  EXPECT_NEAR(res.served_prob, ps, 1e-10 * ps);
  EXPECT_NEAR(res.pushed_out_prob, 1.0 - ps, 1e-10);
  EXPECT_NEAR(res.mean_response, m1 / ps, 1e-10 * m1 / ps);
  EXPECT_NEAR(res.var_response, m2 / ps - (m1 / ps) * (m1 / ps), 1e-9 * m2 / ps);
  EXPECT_NEAR(res.mean_sojourn, soj, 1e-10 * soj);
  EXPECT_TRUE(res.served_pmf.empty());
  EXPECT_EQ(res.remaining_mass, 0.0);
  // beyond the memory budget, or with a row's columns out of order, the solves are declined
  // (the caller steps instead) and the result is left alone
  ResponseOptions small;
  small.memory_limit_bytes = 100.0;
  ResponseResult untouched;
  EXPECT_FALSE(absorbing_moments(tr, v, small, untouched));
  EXPECT_EQ(untouched.served_prob, 0.0);
  TaggedRows swapped = tr;
  std::swap(swapped.col[1], swapped.col[2]), std::swap(swapped.val[1], swapped.val[2]);  // row 1: (1, 0)
  EXPECT_FALSE(absorbing_moments(swapped, v, ResponseOptions{}, untouched));
  EXPECT_EQ(untouched.served_prob, 0.0);
}
