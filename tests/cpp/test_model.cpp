// Model description: drop functions (SPEC 2.4), SSMP (2.1), grid mapping (4), validation.
#include <gtest/gtest.h>

#include <cmath>

#include "aqmchain/aqmchain.hpp"

using namespace aqm;

TEST(DropFunction, RedBranches) {
  const auto f = DropFunction::red(100, 200, 0.1);
  EXPECT_EQ(f(99.999), 0.0);
  EXPECT_DOUBLE_EQ(f(100), 0.0);
  EXPECT_DOUBLE_EQ(f(150), 0.05);
  EXPECT_DOUBLE_EQ(f(199.5), 0.1 * 99.5 / 100);
  EXPECT_EQ(f(200), 1.0);
}

TEST(DropFunction, GentleRedDsredSredNlred) {
  const auto g = DropFunction::gentle_red(100, 200, 0.1);
  EXPECT_DOUBLE_EQ(g(300), 0.1 + 0.9 * 0.5);
  EXPECT_EQ(g(400), 1.0);
  const auto d = DropFunction::dsred(100, 200, 0.5);
  EXPECT_DOUBLE_EQ(d(125), 2 * 0.5 / 100 * 25);  // alpha_s (avg - K_l)
  EXPECT_DOUBLE_EQ(d(150), 0.5);                 // 1 - gamma at K_m
  EXPECT_DOUBLE_EQ(d(175), 0.5 + 2 * 0.5 / 100 * 25);
  const auto s = DropFunction::sred(50, 250);  // seg = 150, p_seg = (100/200)^2
  EXPECT_DOUBLE_EQ(s(100), 0.0625);
  EXPECT_DOUBLE_EQ(s(200), 0.25 + 0.75 * 0.25);
  EXPECT_EQ(s(250), 1.0);
  const auto n = DropFunction::nlred(100, 200, 0.1);
  EXPECT_DOUBLE_EQ(n(150), 1.5 * 0.1 * 0.25);
  const auto p = DropFunction::polynomial(0, 10, {0.0, 0.5, 2.0});  // clipped to 1
  EXPECT_DOUBLE_EQ(p(5), 0.25 + 0.5);
  EXPECT_EQ(p(9), 1.0);
  const auto t = DropFunction::table({{10, 0.0}, {20, 0.4}});
  EXPECT_DOUBLE_EQ(t(15), 0.2);
  EXPECT_EQ(t(0), 0.0);
  EXPECT_DOUBLE_EQ(t(30), 0.4);
}

TEST(DropFunction, ValidationNamesParameter) {
  try {
    DropFunction::red(200, 100, 0.1);
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "aqm.max_th");
    EXPECT_NE(std::string(e.what()).find("100"), std::string::npos);
  }
  EXPECT_THROW(DropFunction::red(1, 2, 1.5), ModelError);
  EXPECT_THROW(DropFunction::dsred(1, 2, -0.1), ModelError);
  EXPECT_THROW(DropFunction::nlred(1, 2, 0.9), ModelError);
  EXPECT_THROW(DropFunction::table({{2, 0.1}, {1, 0.2}}), ModelError);
}

TEST(Registry, EveryDropKindHasAnEntryInOrder) {
  // the table is indexed by DropFunction::Kind: entry i is kind i, names unique, each with
  // its formula, breakpoints and checks (the entry's constructor refuses a missing one)
  const auto& kinds = drop_kinds();
  ASSERT_GE(kinds.size(), static_cast<size_t>(DropFunction::Kind::Table) + 1);
  // an enumerator without its entry is refused by name (never read past the table)
  EXPECT_THROW(drop_kind(static_cast<DropFunction::Kind>(kinds.size())), std::logic_error);
  for (size_t i = 0; i < kinds.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(kinds[i].kind), i);
    EXPECT_TRUE(kinds[i].p && kinds[i].breakpoints && kinds[i].validate) << kinds[i].name;
    for (size_t j = 0; j < i; ++j) EXPECT_NE(kinds[i].name, kinds[j].name);
    EXPECT_EQ(&drop_kind(kinds[i].name), &kinds[i]);
  }
  EXPECT_THROW(DropKindSpec(DropFunction::Kind::RED, "x", "", "", {}, nullptr, nullptr, nullptr, 0, ""),
               std::logic_error);
  try {
    drop_kind("no_such_kind");
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "aqm.drop");
    EXPECT_NE(std::string(e.what()).find("red, gentle_red, dsred"), std::string::npos) << e.what();
  }
}

TEST(Registry, MakeFromNamedValuesIsTheFactory) {
  // make(kind, args) rebuilds every kind; the thresholds' breakpoints are those of the formula
  const std::vector<DropFunction> fs = {
      DropFunction::none(),          DropFunction::red(2, 8, 0.1),          DropFunction::gentle_red(2, 8, 0.1),
      DropFunction::dsred(2, 8, 0.3), DropFunction::sred(2, 9, 4),         DropFunction::nlred(2, 8, 0.5),
      DropFunction::polynomial(1, 5, {0.1, 0.2}), DropFunction::table({{1, 0.0}, {3, 0.5}})};
  for (const auto& f : fs) {
    const DropFunction g = DropFunction::make(f.name(), f.args());
    for (double x = 0.0; x <= 20.0; x += 0.25) EXPECT_EQ(f(x), g(x)) << f.name() << " at " << x;
    EXPECT_EQ(f.breakpoints(20), g.breakpoints(20));
  }
  EXPECT_EQ(DropFunction::dsred(2, 8, 0.3).breakpoints(20), (std::vector<double>{2, 5, 8}));
  // q_max 0: the buffer, so seg = 0.6 * 20 = 12 and q_max = 20 is not inside (0, buffer)
  EXPECT_EQ(DropFunction::sred(2).breakpoints(20), (std::vector<double>{2, 12}));
  try {
    DropFunction::make("red", {{"min_th", ParamValue::of(1.0)}, {"max_th", ParamValue::of(2.0)}});
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "aqm.p_max");
  }
  try {
    DropFunction::make("none", {{"p_max", ParamValue::of(0.1)}});
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "aqm.p_max");
  }
  for (const auto& k : source_kinds()) EXPECT_EQ(&source_kind(k.name), &k);
  const Source s = Source::make("ssmp", {{"n", ParamValue::of_int(5)}, {"q", ParamValue::of(1.927562)},
                                          {"a", ParamValue::of(31.6)}});
  EXPECT_EQ(s.kind_name(), "ssmp");
  EXPECT_EQ(s.matrix, Source::ssmp(5, 1.927562, 31.6).matrix);
  EXPECT_EQ(Source::make(s.kind_name(), s.args()).matrix, s.matrix);
  EXPECT_THROW(Source::make("ssmp", {{"n", ParamValue::of_int(5)}, {"a", ParamValue::of(31.6)}}), ModelError);
}

TEST(Registry, KindListsInMessagesComeFromTraits) {
  // the lists name exactly the kinds with the trait, in the registry's order
  for (unsigned trait : {unsigned(DropKindSpec::kScalesPMax), unsigned(DropKindSpec::kThresholds)}) {
    std::vector<std::string> with;
    for (const auto& k : drop_kinds())
      if (k.traits & trait) with.push_back(k.name);
    EXPECT_EQ(drop_kinds_with(trait), or_list(with));
  }
  // the thresholds of the RED family, not DSRED's K_l / K_h or a table's points
  const std::string scales = drop_kinds_with(DropKindSpec::kScalesPMax);
  const std::string thresholds = drop_kinds_with(DropKindSpec::kThresholds);
  for (const char* name : {"red", "gentle_red", "nlred"}) {
    EXPECT_NE(scales.find(name), std::string::npos) << name;
    EXPECT_NE(thresholds.find(name), std::string::npos) << name;
  }
  EXPECT_NE(thresholds.find("polynomial"), std::string::npos);
  for (const char* name : {"dsred", "table", "none"}) {
    EXPECT_EQ(scales.find(name), std::string::npos) << name;
    EXPECT_EQ(thresholds.find(name), std::string::npos) << name;
  }
}

TEST(Source, SsmpStationaryAndMean) {
  const auto s = Source::ssmp(5, 1.927562, 31.6);
  const auto pi = s.modulator_stationary();
  for (int j = 1; j < 5; ++j) EXPECT_NEAR(pi[j], pi[0] * std::pow(1.927562, -j), 1e-14);
  EXPECT_NEAR(s.mean_rate(), (1 - 1 / 1.927562) / (1 - std::pow(1.927562, -5)), 1e-14);
  EXPECT_NEAR(s.mean_rate(), 0.5, 2e-7);  // the seeds' "mean 0.5"
  const double q = ssmp_q_for_mean(0.5, 31.6, 5);
  EXPECT_NEAR(Source::ssmp(5, q, 31.6).mean_rate(), 0.5, 1e-13);
  EXPECT_NEAR(q, 1.927562, 1e-5);
  EXPECT_THROW(Source::ssmp(5, 40, 31.6), ModelError);  // q > a
  EXPECT_THROW(Source::ssmp(5, 1.0, 1.2), ModelError);  // sum a^-j > 1
}

TEST(Source, HurstOfSsmp) {
  const auto s = Source::ssmp(5, 1.927562, 31.6);
  const auto h = hurst(s, 0, 20);
  EXPECT_TRUE(h.asymptotic_valid);
  EXPECT_NEAR(h.asymptotic, 1 - std::log(1.927562) / (2 * std::log(31.6 / 1.927562)), 1e-14);
  EXPECT_GT(h.variance_time, 0.7);
  EXPECT_LT(h.variance_time, 0.85);
  // Bernoulli: no correlation, Var(X^(m)) = Var X / m exactly -> H = 1/2.
  const auto b = hurst(Source::bernoulli(0.3), 0, 10);
  EXPECT_NEAR(b.variance_time, 0.5, 1e-12);
  EXPECT_NEAR(b.variances[3], 0.21 / 8, 1e-15);
}

TEST(Source, MmbpValidation) {
  EXPECT_THROW(Source::mmbp({{0.5, 0.4}, {0.5, 0.5}}, {0.1, 0.2}), ModelError);
  EXPECT_THROW(Source::mmbp({{1.0, 0.0}, {0.0, 1.0}}, {0.1, 0.2}), ModelError);  // reducible
  EXPECT_THROW(Source::mmbp({{0.5, 0.5}, {0.5, 0.5}}, {0.1, 1.2}), ModelError);
  EXPECT_NEAR(Source::mmbp({{0.9, 0.1}, {0.3, 0.7}}, {0.2, 0.6}).mean_rate(), 0.75 * 0.2 + 0.25 * 0.6, 1e-15);
}

TEST(Source, BatchValidationMeanAndCounts) {
  const Source s = Source::batch_mmbp({{1.0}}, {{0.5, 0.25, 0.25}});
  EXPECT_EQ(s.max_batch(), 2);
  EXPECT_DOUBLE_EQ(s.mean_rate(), 0.75);
  EXPECT_EQ(s.count_pmf(), (std::vector<std::vector<double>>{{0.5, 0.25, 0.25}}));
  EXPECT_EQ(Source::bernoulli(0.25).count_pmf(), (std::vector<std::vector<double>>{{0.75, 0.25}}));
  auto param = [](auto&& f) {
    try {
      f();
    } catch (const ModelError& e) {
      return e.param();
    }
    return std::string("no error");
  };
  EXPECT_EQ(param([] { Source::batch_mmbp({{1.0}}, {{0.5, 0.6}}); }), "source.counts[0]");
  EXPECT_EQ(param([] { Source::batch_mmbp({{1.0}}, {{1.0}}); }), "source.counts[0]");
  EXPECT_EQ(param([] { Source::batch_mmbp({{0.5, 0.5}, {0.5, 0.5}}, {{0.5, 0.5}, {1.0}}); }), "source.counts[1]");
  EXPECT_EQ(param([] { Source::batch_mmbp({{1.0}}, {{-0.5, 1.5}}); }), "source.counts[0][0]");
  EXPECT_EQ(param([] { Source::batch_mmbp({{0.5, 0.5}, {0.5, 0.5}}, {{0.5, 0.5}}); }), "source.matrix");
}

TEST(Grid, SplitIsMeanPreserving) {
  Grid g(GridSpec{4, {}, Mapping::Split}.resolve(10), Mapping::Split);
  const auto t = g.map(1.3);
  EXPECT_EQ(t.lo, 5);
  EXPECT_NEAR(t.p_lo * 1.25 + (1 - t.p_lo) * 1.5, 1.3, 1e-15);
  EXPECT_EQ(g.map(2.0).p_lo, 1.0);
  EXPECT_EQ(g.map(2.0).lo, 8);
  Grid nn(GridSpec{4, {}, Mapping::Nearest}.resolve(10), Mapping::Nearest);
  EXPECT_EQ(nn.map(1.3).lo, 5);
  EXPECT_EQ(nn.map(1.4).lo, 6);
}

TEST(Grid, FlagsFollowThePublishedGrid) {
  GridSpec spec;
  spec.mapping = Mapping::Flags;
  Grid g(spec.resolve(3), Mapping::Flags);
  EXPECT_EQ(g.size(), 16);
  EXPECT_DOUBLE_EQ(g.points()[g.map(1.0).lo], 1.0);
  EXPECT_DOUBLE_EQ(g.points()[g.map(1.1).lo], 1.125);
  EXPECT_DOUBLE_EQ(g.points()[g.map(1.3).lo], 1.375);
  EXPECT_DOUBLE_EQ(g.points()[g.map(1.99).lo], 1.875);
}

TEST(Model, ValidationMessages) {
  Model m;
  m.buffer = 0;
  EXPECT_THROW(m.validate(), ModelError);
  m.buffer = 10;
  m.aqm.w = 0.0;
  try {
    m.validate();
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "aqm.w");
    EXPECT_NE(std::string(e.what()).find("(0, 1]"), std::string::npos);
  }
  m.aqm.w = 0.5;
  m.service.mu = 0.0;
  EXPECT_THROW(m.validate(), ModelError);
  m.service.mu = 0.5;
  m.grid.points = {0, 5, 9};
  EXPECT_THROW(m.validate(), ModelError);
}

// ---------------------------------------------------------------- bounds before allocation

namespace {
template <class F>
ModelError expect_model_error(F f, const std::string& param) {
  try {
    f();
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), param) << e.what();
    EXPECT_EQ(std::string(e.what()).find("nan"), std::string::npos) << e.what();
    return e;
  }
  ADD_FAILURE() << "no ModelError for " << param;
  return ModelError(param, "");
}
}  // namespace

TEST(Bounds, GridSizeIsCheckedBeforeResolving) {
  Model m;
  m.buffer = 10000;
  m.grid.k = 10000;  // 1e8 grid intervals: 800 MB if resolved
  const auto e = expect_model_error([&] { m.validate(); }, "grid.k");
  EXPECT_NE(std::string(e.what()).find("1000"), std::string::npos);
  expect_model_error([&] { (void)m.grid.resolve(m.buffer); }, "grid.k");
  EXPECT_EQ(m.grid.size(m.buffer), 100000001);
  m.grid.k = 1000;  // 1e7: the bound itself is allowed
  EXPECT_NO_THROW(m.grid.validate(m.buffer));
  GridSpec flags;
  flags.mapping = Mapping::Flags;
  expect_model_error([&] { flags.validate(3000000); }, "model.buffer");
}

TEST(Bounds, ModulatorStatesAreBoundedBeforeTheMatrixIsBuilt) {
  expect_model_error([] { Source::ssmp(30000, 1.5, 1.6); }, "source.n");
  expect_model_error([] { ssmp_q_for_mean(0.5, 1.6, 30000); }, "source.n");
  expect_model_error([] { Source::ssmp_from_mean(0.5, 1.6, 30000); }, "source.n");
  // 1000 states are fine, and the SSMP's elimination is O(n^2)
  const auto s = Source::ssmp(1000, 1.5, 2.0);
  EXPECT_NEAR(s.mean_rate(), (1 - 1 / 1.5) / (1 - std::pow(1.5, -1000)), 1e-14);
  Source big;
  big.kind = Source::Kind::MMBP;
  big.arrival.assign(1001, 0.5);
  big.matrix.assign(1001, std::vector<double>(1001, 1.0 / 1001));
  expect_model_error([&] { big.validate(); }, "source.arrival");
}

TEST(Bounds, SsmpStatesUpToTheirOwnBound) {
  // the SSMP's bound (4096) is its own, not the dense modulators' (1000)
  const auto s = Source::ssmp(1001, 1.0, 2.0);
  EXPECT_EQ(s.states(), 1001);
  EXPECT_NO_THROW(s.validate());
  const auto e = expect_model_error([] { Source::ssmp(kMaxSsmpStates + 1, 1.0, 1.0001); }, "source.n");
  EXPECT_NE(std::string(e.what()).find("<= 4096"), std::string::npos) << e.what();
}

TEST(Messages, NumbersInTheirShortestRoundTripForm) {
  const auto e = expect_model_error([] { Service::geometric(-0.1); }, "service.mu");
  EXPECT_NE(std::string(e.what()).find("got -0.1"), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).find("0000000"), std::string::npos) << e.what();
  EXPECT_EQ(detail::cat(0.55, " ", 1e-300, " ", 3, " ", 0.1f), "0.55 1e-300 3 0.1");
  // the notation of Python's repr: plain for exponents in [-4, 16), scientific outside
  EXPECT_EQ(detail::cat(1e9, " ", 1e15, " ", 1e16, " ", 0.0001, " ", 0.00001, " ", -2.5, " ", 0.0),
            "1000000000 1000000000000000 1e+16 0.0001 1e-05 -2.5 0");
  EXPECT_EQ(detail::cat(std::nan(""), " ", -INFINITY), "nan -inf");
}

TEST(DropFunction, SredRefusesNegativeQmaxAndSeg) {
  expect_model_error([] { DropFunction::sred(5, -1); }, "aqm.q_max");
  expect_model_error([] { DropFunction::sred(5, 0, -2); }, "aqm.seg");
  EXPECT_NO_THROW(DropFunction::sred(5));  // 0, 0: the defaults (the buffer, 0.6 q_max)
}

TEST(Bounds, SsmpUnderflowIsNamedNotCalledReducible) {
  // a^-j underflows to 0 for j >= 679 when a = 3: those states are unreachable in doubles
  const auto e = expect_model_error([] { Source::ssmp(1000, 2.0, 3.0); }, "source.n");
  const std::string w = e.what();
  EXPECT_NE(w.find("underflow"), std::string::npos) << w;
  EXPECT_EQ(w.find("irreducible"), std::string::npos) << w;
  EXPECT_NE(w.find("<= 679"), std::string::npos) << w;
  EXPECT_NO_THROW(Source::ssmp(679, 2.0, 3.0));
  // n = 4000, q = a = 2: 2^-j underflows from j = 1075 on
  expect_model_error([] { Source::ssmp(4000, 2.0, 2.0); }, "source.n");
  // mean 0.5 with a = 1e300: pi_0(q = a) is computed without overflow (no "nan" bound),
  // and a^-2 = 1e-600 underflows, so n = 5 is refused by name; n = 2 is fine.
  expect_model_error([] { Source::ssmp_from_mean(0.5, 1e300, 5); }, "source.n");
  const auto two = Source::ssmp_from_mean(0.5, 1e300, 2);
  EXPECT_NEAR(two.mean_rate(), 0.5, 1e-12);
  const auto bad = expect_model_error([] { ssmp_q_for_mean(1.5, 1e300, 5); }, "source.mean");
  EXPECT_NE(std::string(bad.what()).find("(0, 1]"), std::string::npos) << bad.what();
  expect_model_error([] { ssmp_q_for_mean(std::nan(""), 31.6, 5); }, "source.mean");
}

TEST(Bounds, SubnormalModulatorEntriesAreIrreducible) {
  const double d = 1e-310;  // subnormal
  // balance: pi_0 M01 = pi_1 M10
  const auto back = Source::mmbp({{0.5, 0.5}, {d, 1.0 - d}}, {0.2, 0.6}).modulator_stationary();
  EXPECT_NEAR(back[0] / (back[1] * d / 0.5), 1.0, 1e-9);
  EXPECT_NEAR(back[1], 1.0, 1e-15);
  const auto fwd = Source::mmbp({{1.0 - d, d}, {0.5, 0.5}}, {0.2, 0.6}).modulator_stationary();
  EXPECT_NEAR(fwd[1] / (fwd[0] * d / 0.5), 1.0, 1e-9);
  // a structural zero is still reducible, and said so
  const auto e = expect_model_error([] { Source::mmbp({{1.0, 0.0}, {0.5, 0.5}}, {0.2, 0.6}); }, "source.matrix");
  EXPECT_NE(std::string(e.what()).find("irreducible"), std::string::npos);
  // GTH against the closed form on a 3-state chain with a 1e-300 link
  const double t = 1e-300;
  const auto pi = Source::mmbp({{0.5, 0.5, 0.0}, {0.25, 0.75 - t, t}, {0.0, 1.0, 0.0}}, {0.1, 0.2, 0.3})
                      .modulator_stationary();
  // detailed balance (a birth-death modulator): pi_1 = 2 pi_0, pi_2 = t pi_1
  EXPECT_NEAR(pi[1] / pi[0], 2.0, 1e-14);
  EXPECT_NEAR(pi[2] / (t * pi[1]), 1.0, 1e-12);
}

// ---------------------------------------------------------------- REDwM (SPEC 2.3)

namespace {
Model redwm_model(std::vector<double> triple, int N = 20) {
  Model m;
  m.buffer = N;
  m.source = Source::bernoulli(0.5);
  m.service = Service::geometric(0.5);
  m.aqm.drop = DropFunction::red(5, 15, 0.1);
  m.aqm.filter = FilterKind::Redwm;
  Aqm::from_triple(triple, m.aqm.a, m.aqm.b);
  m.grid.k = 2;
  return m;
}
std::string error_of(const Model& m) {
  try {
    m.validate();
  } catch (const ModelError& e) {
    return e.param() + ": " + e.what();
  }
  return "";
}
}  // namespace

TEST(Redwm, TripleReadsAsB0B1A2) {
  const Model m = redwm_model({0.08, 0.0014, 0.001});
  ASSERT_EQ(m.aqm.a.size(), 2u);
  EXPECT_EQ(m.aqm.b, (std::vector<double>{0.08, 0.0014}));
  EXPECT_EQ(m.aqm.a[1], 0.001);
  EXPECT_EQ(m.aqm.a[0], 1.0 - 0.08 - 0.0014 - 0.001);
  EXPECT_NO_THROW(m.validate());
  EXPECT_EQ(m.aqm.order_k(), 2);
  EXPECT_EQ(m.aqm.order_m(), 1);
}

TEST(Redwm, EwmaAsRedwmStepIsBitwiseTheEwmaStep) {
  for (double w : {0.002, 0.07, 0.3}) {
    Model m = redwm_model({w, 0.0, 0.0});
    Aqm e;
    e.w = w;
    const EwmaFilter ewma(e);
    const RedwmFilter red(m.aqm);
    for (double A : {0.0, 0.25, 17.75, 99.5})
      for (double q : {0.0, 3.0, 19.0}) {
        double A2, s2;
        red.next(A, 0.0, q, A2, s2);
        EXPECT_EQ(A2, ewma.next(A, q));
        EXPECT_EQ(s2, 0.0);
      }
    EXPECT_EQ(redwm_s_grid(m), std::vector<double>{0.0});
  }
}

TEST(Redwm, SGridSpansTheRangeOfS) {
  Model m = redwm_model({0.2, 0.1, 0.05});  // (a2 + b1) N = 3, avg step 1/2: s step 1/8
  const auto g = redwm_s_grid(m);
  ASSERT_EQ(g.size(), 25u);
  EXPECT_EQ(g[1], 0.125);
  EXPECT_EQ(g.back(), 3.0);
  m.grid.s_k = 3;
  EXPECT_EQ(redwm_s_grid(m).back(), 3.0);
  EXPECT_EQ(redwm_s_grid(m).size(), 10u);
  m.grid.s_k = 0;
  m.grid.s_points = {0.0, 1.0, 2.9};
  EXPECT_NE(error_of(m).find("grid.s_points[2]: parameter 'grid.s_points[2]' must be >= (a_2 + b_1) N = 3"),
            std::string::npos)
      << error_of(m);
}

TEST(Redwm, ValidationNamesCoefficientBoundAndValue) {
  Model m = redwm_model({0.2, 0.1, 0.05});
  m.aqm.a = {0.7, -0.05};
  EXPECT_NE(error_of(m).find("aqm.a[1]: parameter 'aqm.a[1]' must be >= 0 (a_2"), std::string::npos) << error_of(m);
  EXPECT_NE(error_of(m).find("got -0.05"), std::string::npos) << error_of(m);
  m.aqm.a = {0.6, 0.05};
  EXPECT_NE(error_of(m).find("must sum to 1"), std::string::npos) << error_of(m);
  EXPECT_NE(error_of(m).find("got sum 0.95 = a_1 0.6 + a_2 0.05 + b_0 0.2 + b_1 0.1"), std::string::npos)
      << error_of(m);
  std::vector<double> a, b;
  try {
    Aqm::from_triple({0.5, 0.4, 0.3}, a, b);
    FAIL() << "x + y + z > 1 accepted";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "aqm.triple");
    EXPECT_NE(std::string(e.what()).find("x + y + z = 1.2"), std::string::npos) << e.what();
  }
  m = redwm_model({0.2, 0.1, 0.05});
  m.time = TimeKind::Continuous;
  m.source = Source::poisson(0.5);
  m.service = Service::exponential(1.0);
  EXPECT_NE(error_of(m).find("aqm.filter: parameter 'aqm.filter' must be ewma"), std::string::npos) << error_of(m);
}

TEST(Redwm, ChainCarriesAnyOrderUpToTheSumsBound) {
  Model m = redwm_model({0.2, 0.1, 0.05});
  m.aqm.b = {0.2, 0.05, 0.05};  // m = 2: two sums
  EXPECT_NO_THROW(m.validate());
  const RedwmFilter two(m.aqm);
  EXPECT_EQ(two.sums(), 2);
  // the transposed form unrolls to the recursion: s1 = a_2 A + b_1 q + s2, s2 = b_2 q
  double s[2] = {0.5, 0.25}, s2[2], A2;
  two.next(3.0, s, 4.0, A2, s2);
  EXPECT_EQ(A2, m.aqm.a[0] * 3.0 + 0.2 * 4.0 + 0.5);
  EXPECT_EQ(s2[0], m.aqm.a[1] * 3.0 + 0.05 * 4.0 + 0.25);
  EXPECT_EQ(s2[1], 0.0 * 3.0 + 0.05 * 4.0);
  EXPECT_EQ(redwm_s_grids(m).size(), 2u);
  m.aqm.b = std::vector<double>(kMaxRedwmSums + 2, 0.0);  // m = kMaxRedwmSums + 1: one sum too many
  m.aqm.b[0] = 0.2, m.aqm.b.back() = 0.15;
  m.aqm.a = {0.65};
  EXPECT_NO_THROW(m.validate());  // a valid filter: the simulator with continuous A runs it
  try {
    RedwmFilter f(m.aqm);
    FAIL() << "r > kMaxRedwmSums accepted by the chain's filter";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), detail::cat("aqm.b[", kMaxRedwmSums + 1, "]"));
  }
}

// ---------------------------------------------------------------- traffic classes (docs/classes.md)

namespace {
Model class_model() {
  Model m;
  m.buffer = 20;
  m.source = Source::mmbp({{0.9, 0.1}, {0.2, 0.8}}, {0.3, 0.6});
  m.service = Service::geometric(0.5);
  m.aqm.drop = DropFunction::red(4, 12, 0.1);
  m.classes = {TrafficClass{"web", {0.25, 0.5}, 0.0, true, 3, {}}, TrafficClass{"ftp", {0.75, 0.5}, 0.5, false, 1, {}}};
  return m;
}
std::string param_of(const Model& m) {
  try {
    m.validate();
  } catch (const ModelError& e) {
    return e.param();
  }
  return "";
}
}  // namespace

TEST(TrafficClasses, AccessorsAndImplicitClass) {
  Model m = class_model();
  m.validate();
  EXPECT_EQ(m.class_count(), 2);
  EXPECT_EQ(m.class_share(0, 1), 0.5);
  EXPECT_EQ(m.class_share(1, 1), 0.5);
  EXPECT_EQ((TrafficClass{"x", {0.4}, 0.0, false, 1, {}}).share_in(1), 0.4);  // one share holds in every state
  EXPECT_EQ(m.class_ecn(1), 0.5);
  EXPECT_EQ(m.total_flows(), 4);
  Model plain;
  plain.aqm.ecn = 0.3;
  EXPECT_EQ(plain.class_count(), 1);
  EXPECT_EQ(plain.class_share(0, 0), 1.0);
  EXPECT_EQ(plain.class_ecn(0), 0.3);
  EXPECT_EQ(to_string(modified_from("random")), "random");
  EXPECT_THROW(modified_from("rear"), ModelError);
}

TEST(TrafficClasses, ValidationNamesTheParameter) {
  Model m = class_model();
  m.classes[0].share = {0.25, 0.4};  // state 1 sums to 0.9
  EXPECT_EQ(param_of(m), "class.share[1]");
  m = class_model();
  m.classes[1].name = "web";
  EXPECT_EQ(param_of(m), "class[1].name");
  m = class_model();
  m.classes[1].name = "f t p";
  EXPECT_EQ(param_of(m), "class[1].name");
  m = class_model();
  m.classes[0].share = {0.25, 0.5, 0.1};  // two modulator states
  EXPECT_EQ(param_of(m), "class[0].share");
  m = class_model();
  m.classes[0].flow_weights = {0.5, 0.5};  // three flows
  EXPECT_EQ(param_of(m), "class[0].flow_weights");
  m.classes[0].flow_weights = {0.5, 0.4, 0.2};
  EXPECT_EQ(param_of(m), "class[0].flow_weights");
  m = class_model();
  m.classes[1].ecn = 1.5;
  EXPECT_EQ(param_of(m), "class[1].ecn");
  m = class_model();
  m.classes[0].flows = 0;
  EXPECT_EQ(param_of(m), "class[0].flows");
  m = class_model();
  m.aqm.ecn = 0.2;  // classes carry their own ecn
  EXPECT_EQ(param_of(m), "aqm.ecn");
  m = class_model();
  m.aqm.drop = DropFunction::dsred(4, 12, 0.5);
  m.aqm.modified = Modified::Front;
  EXPECT_EQ(param_of(m), "aqm.modified");
  m.aqm.modified = Modified::None;
  m.aqm.flow_compare = true;
  EXPECT_EQ(param_of(m), "aqm.flow_compare");
  m = class_model();
  m.aqm.modified = Modified::Random;
  m.aqm.flow_compare = true;
  EXPECT_EQ(param_of(m), "");
}
