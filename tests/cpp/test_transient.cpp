// Transient exponential kernels against oracles written here: the two-state
// chain's closed form, and a birth-death generator's exponential through the
// symmetric eigenproblem of its reversible form D^{1/2} G D^{-1/2} (and its
// stationary law by detailed balance).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include <Eigen/Eigenvalues>

#include "aqmchain/aqmchain.hpp"

using namespace aqm;

namespace {

struct Csr {
  int32_t n = 0;
  std::vector<int32_t> rowptr{0}, col;
  std::vector<double> val;
  GeneratorOperator op() const { return GeneratorOperator::from_csr(n, rowptr.data(), col.data(), val.data()); }
};

/// Birth-death generator on 0..N with birth rates lam(i) and death rates mu(i).
Csr birth_death(int N, double lam0, double mu0) {
  Csr g;
  g.n = N + 1;
  for (int i = 0; i <= N; ++i) {
    const double b = i < N ? lam0 * (1.0 + 0.1 * i) : 0.0, d = i > 0 ? mu0 * i : 0.0;
    if (i > 0) g.col.push_back(i - 1), g.val.push_back(d);
    g.col.push_back(i), g.val.push_back(-(b + d));
    if (i < N) g.col.push_back(i + 1), g.val.push_back(b);
    g.rowptr.push_back(static_cast<int32_t>(g.col.size()));
  }
  return g;
}

/// p0 exp(t G) for a reversible (birth-death) G: with pi the stationary law and
/// D = diag(pi), S = D^{1/2} G D^{-1/2} is symmetric, S = U diag(s) U^T and
/// p0 exp(tG) = p0 D^{-1/2} U diag(e^{t s}) U^T D^{1/2}.
std::vector<double> reversible_oracle(const Csr& g, const std::vector<double>& p0, double t) {
  const int n = g.n;
  Eigen::MatrixXd G = Eigen::MatrixXd::Zero(n, n);
  for (int i = 0; i < n; ++i)
    for (int k = g.rowptr[i]; k < g.rowptr[i + 1]; ++k) G(i, g.col[k]) = g.val[k];
  Eigen::VectorXd pi(n);
  pi(0) = 1.0;
  for (int i = 1; i < n; ++i) pi(i) = pi(i - 1) * G(i - 1, i) / G(i, i - 1);
  pi /= pi.sum();
  const Eigen::VectorXd r = pi.cwiseSqrt();
  const Eigen::MatrixXd S = r.asDiagonal() * G * r.cwiseInverse().asDiagonal();
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(0.5 * (S + S.transpose()));
  const Eigen::MatrixXd& U = es.eigenvectors();
  const Eigen::VectorXd e = (t * es.eigenvalues()).array().exp();
  const Eigen::RowVectorXd x = Eigen::Map<const Eigen::RowVectorXd>(p0.data(), n) * r.cwiseInverse().asDiagonal();
  const Eigen::RowVectorXd y = ((x * U) * e.asDiagonal()) * U.transpose() * r.asDiagonal();
  return std::vector<double>(y.data(), y.data() + n);
}

double l1(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d += std::abs(a[i] - b[i]);
  return d;
}

/// Runs a kernel and collects its outputs.
template <class Kernel>
std::vector<std::vector<double>> run(Kernel kernel, const GeneratorOperator& G, const std::vector<double>& p0,
                                     const std::vector<double>& times, const TransientOptions& o,
                                     TransientResult* res = nullptr) {
  std::vector<std::vector<double>> out(times.size());
  const TransientResult r = kernel(G, p0, times, o, [&](size_t k, double, const double* p) {
    out[k].assign(p, p + G.n);
  });
  if (res) *res = r;
  return out;
}

}  // namespace

TEST(Transient, TwoStateClosedForm) {
  // G = [[-a, a], [b, -b]]: p_0(t) = b/(a+b) + (p_0(0) - b/(a+b)) e^{-(a+b) t}.
  const double a = 3.0, b = 0.5;
  Csr g;
  g.n = 2;
  g.rowptr = {0, 2, 4};
  g.col = {0, 1, 0, 1};
  g.val = {-a, a, b, -b};
  const std::vector<double> times = {0.0, 0.01, 0.3, 1.0, 7.5};
  TransientOptions o;
  o.tol = 1e-12;
  for (auto kernel : {&krylov_expv, &rational_krylov_expv, &uniformization}) {
    const GeneratorOperator G = g.op();
    TransientResult r;
    const auto out = run(kernel, G, {1.0, 0.0}, times, o, &r);
    ASSERT_TRUE(r.converged()) << r.note;
    for (size_t k = 0; k < times.size(); ++k) {
      const double p = b / (a + b) + (1.0 - b / (a + b)) * std::exp(-(a + b) * times[k]);
      EXPECT_NEAR(out[k][0], p, 1e-12) << to_string(r.method) << " t = " << times[k];
      EXPECT_NEAR(out[k][0] + out[k][1], 1.0, 1e-15);
    }
  }
}

TEST(Transient, BirthDeathAgainstSymmetricEigenproblem) {
  const Csr g = birth_death(40, 2.0, 0.3);
  std::vector<double> p0(g.n, 0.0);
  p0[0] = 0.5;
  p0[5] = 0.5;
  const std::vector<double> times = {0.0, 0.05, 0.5, 2.0, 2.0, 10.0, 60.0};
  TransientOptions o;
  o.tol = 1e-11;
  o.krylov_dim = 20;
  for (auto kernel : {&krylov_expv, &rational_krylov_expv, &uniformization}) {
    const GeneratorOperator G = g.op();
    TransientResult r;
    const auto out = run(kernel, G, p0, times, o, &r);
    ASSERT_TRUE(r.converged()) << r.note;
    EXPECT_EQ(r.outputs, times.size());
    // rational Krylov's products are inside its linear solves, not through G.apply
    EXPECT_EQ(r.operator_applications, G.applications() + (r.method == TransientMethod::RationalKrylov
                                                               ? r.operator_applications
                                                               : 0));
    EXPECT_GT(r.steps, 0);
    for (size_t k = 0; k < times.size(); ++k) {
      const auto ref = reversible_oracle(g, p0, times[k]);
      EXPECT_LT(l1(out[k], ref), 1e-9) << to_string(r.method) << " t = " << times[k];
    }
    EXPECT_EQ(r.p, out.back());
    EXPECT_EQ(r.t_reached, times.back());
  }
}

TEST(Transient, PadeAgainstEigenproblem) {
  const Csr g = birth_death(15, 1.0, 0.7);
  Eigen::MatrixXd G = Eigen::MatrixXd::Zero(g.n, g.n);
  for (int i = 0; i < g.n; ++i)
    for (int k = g.rowptr[i]; k < g.rowptr[i + 1]; ++k) G(i, g.col[k]) = g.val[k];
  // The oracle loses a few digits through D^{-1/2} where pi is small (1e-12 at state 15).
  for (double t : {0.0, 1e-3, 0.7, 40.0}) {
    int sq = -1;
    const Eigen::MatrixXd E = expm_pade(t * G, &sq);
    EXPECT_GE(sq, 0);
    for (int i = 0; i < g.n; ++i) {
      std::vector<double> e(g.n, 0.0), row(g.n);
      e[i] = 1.0;
      const auto ref = reversible_oracle(g, e, t);
      for (int j = 0; j < g.n; ++j) row[j] = E(i, j);
      EXPECT_LT(l1(row, ref), 1e-11) << "t = " << t << " row " << i;
    }
  }
  // Long times: every row is the stationary law (detailed balance, by products).
  std::vector<double> pi(g.n, 1.0);
  for (int i = 1; i < g.n; ++i) pi[i] = pi[i - 1] * G(i - 1, i) / G(i, i - 1);
  double z = 0.0;
  for (double v : pi) z += v;
  for (double& v : pi) v /= z;
  int sq = 0;
  const Eigen::MatrixXd E = expm_pade(3000.0 * G, &sq);
  EXPECT_GT(sq, 10);
  for (int i = 0; i < g.n; ++i) {
    std::vector<double> row(g.n);
    for (int j = 0; j < g.n; ++j) row[j] = E(i, j);
    EXPECT_LT(l1(row, pi), 1e-11) << "row " << i << " after " << sq << " squarings";
  }
}

TEST(Transient, MarkovOperatorOfContinuousAndSlottedChains) {
  // A continuous M/M/1/N chain: from_operator (a gather over G^T) against
  // from_csr (the chain's G itself).
  Model m;
  m.buffer = 12;
  m.time = TimeKind::Continuous;
  m.source = Source::poisson(0.8);
  m.service = Service::exponential(1.1);
  m.aqm.w = 0.5;
  m.grid.k = 1;
  const QueueChain c = build_chain(m);
  const GeneratorOperator Gm = GeneratorOperator::from_operator(c);
  const GeneratorOperator Gc = GeneratorOperator::from_csr(c.n, c.rowptr.data(), c.col.data(), c.val.data());
  EXPECT_NEAR(Gm.rate, Gc.rate, 1e-12 * Gc.rate);
  EXPECT_NEAR(Gm.norm1, Gc.norm1, 1e-12 * Gc.norm1);
  std::vector<double> p0(c.n, 0.0);
  p0[0] = 1.0;
  const std::vector<double> times = {1.0, 5.0};
  TransientOptions o;
  o.tol = 1e-10;
  const auto a = run(&krylov_expv, Gm, p0, times, o);
  const auto b = run(&uniformization, Gc, p0, times, o);
  TransientResult rr;
  const auto e = run(&rational_krylov_expv, Gm, p0, times, o, &rr);  // preconditioner blocks: the avg planes
  ASSERT_TRUE(rr.converged()) << rr.note;
  EXPECT_EQ(rr.extra.back().first, "norm1");
  for (size_t k = 0; k < times.size(); ++k) {
    EXPECT_LT(l1(a[k], b[k]), 1e-8);
    EXPECT_LT(l1(e[k], b[k]), 1e-8);
  }

  // A slotted chain: G = P - I, Lambda <= 1.
  const QueueChain d = build_chain([] {
    Model s;
    s.buffer = 10;
    s.source = Source::bernoulli(0.3);
    s.service = Service::geometric(0.5);
    s.aqm.w = 0.5;
    s.grid.k = 1;
    return s;
  }());
  const GeneratorOperator Gd = GeneratorOperator::from_operator(d);
  EXPECT_LE(Gd.rate, 1.0);
  std::vector<double> q0(d.n, 0.0);
  q0[0] = 1.0;
  const auto x = run(&krylov_expv, Gd, q0, {3.0, 30.0}, o);
  const auto y = run(&uniformization, Gd, q0, {3.0, 30.0}, o);
  const auto z = run(&rational_krylov_expv, Gd, q0, {3.0, 30.0}, o);  // systems (1 + gamma) I - gamma P
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_LT(l1(x[k], y[k]), 1e-8);
    EXPECT_LT(l1(z[k], y[k]), 1e-8);
  }
}

TEST(Transient, BudgetsGivePartialResults) {
  const Csr g = birth_death(60, 5.0, 1.0);
  std::vector<double> p0(g.n, 0.0);
  p0[0] = 1.0;
  const std::vector<double> times = {0.0, 1e-4, 50.0};
  TransientOptions o;
  o.max_steps = 1;
  const GeneratorOperator G = g.op();
  TransientResult r;
  run(&krylov_expv, G, p0, times, o, &r);
  EXPECT_EQ(r.status, Status::NotConverged);
  EXPECT_NE(r.note.find("max_steps"), std::string::npos) << r.note;
  EXPECT_LT(r.outputs, times.size());
  EXPECT_GE(r.outputs, 1u);
  EXPECT_EQ(r.p.size(), static_cast<size_t>(g.n));
  EXPECT_LT(r.t_reached, times.back());
  o = {};
  o.max_applications = 10;
  run(&uniformization, G, p0, times, o, &r);
  EXPECT_EQ(r.status, Status::NotConverged);
  EXPECT_NE(r.note.find("max_applications"), std::string::npos) << r.note;
  EXPECT_LE(r.operator_applications, 10);

  // rational Krylov: both budgets count its solves' products, and a solve that
  // does not converge within inner_max_iter stops the run where it is
  for (int which = 0; which < 3; ++which) {
    o = {};
    const char* what = which == 0 ? "max_steps" : which == 1 ? "max_applications" : "inner_max_iter";
    if (which == 0) o.max_steps = 1;
    if (which == 1) o.max_applications = 25;
    if (which == 2) o.inner_max_iter = 1, o.tol = 1e-12;
    const auto out = run(&rational_krylov_expv, G, p0, times, o, &r);
    EXPECT_EQ(r.status, Status::NotConverged) << what;
    EXPECT_NE(r.note.find(what), std::string::npos) << r.note;
    EXPECT_GE(r.outputs, 1u);
    EXPECT_LT(r.outputs, times.size());
    EXPECT_EQ(r.p.size(), static_cast<size_t>(g.n));
    EXPECT_LT(r.t_reached, times.back());
    EXPECT_NEAR(std::accumulate(r.p.begin(), r.p.end(), 0.0), 1.0, 1e-12);
    if (which == 1) EXPECT_LE(r.operator_applications, 25);
    if (which == 2) EXPECT_EQ(r.inner_iterations_max, 1);
  }
}

TEST(Transient, RationalKrylovNeedsTheMatrixAndTwoVectors) {
  const Csr g = birth_death(20, 1.0, 1.0);
  std::vector<double> p0(g.n, 0.0);
  p0[0] = 1.0;
  GeneratorOperator G = g.op();
  TransientOptions o;
  o.krylov_dim = 1;
  EXPECT_THROW(rational_krylov_expv(G, p0, {1.0}, o), OptionError);
  o = {};
  o.shift_ratio = 0.0;
  EXPECT_THROW(o.validate(), OptionError);
  o = {};
  o.inner_max_iter = 0;
  EXPECT_THROW(o.validate(), OptionError);
  // blocks: one number per state, in range
  G.matrix.blocks.assign(g.n - 1, 0);
  try {
    rational_krylov_expv(G, p0, {1.0});
    ADD_FAILURE() << "no error";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.param(), "blocks");
  }
  // one block: the band LU of the tridiagonal (I - gamma G)^T solves each system exactly
  G.matrix.blocks.assign(g.n, 5);
  TransientResult r = rational_krylov_expv(G, p0, {2.0, 40.0});
  ASSERT_TRUE(r.converged()) << r.note;
  EXPECT_EQ(r.inner_iterations, 0);
  EXPECT_EQ(r.operator_applications, r.inner_solves);  // one residual check per solve
  EXPECT_LT(l1(r.p, reversible_oracle(g, p0, 40.0)), 1e-8);
  // an operator known only by its product cannot be solved with
  GeneratorOperator product_only;
  product_only.n = G.n;
  product_only.norm1 = G.norm1;
  product_only.rate = G.rate;
  product_only.product = G.product;
  EXPECT_THROW(rational_krylov_expv(product_only, p0, {1.0}), OptionError);
  EXPECT_TRUE(krylov_expv(product_only, p0, {1.0}).converged());
}

TEST(Transient, RationalKrylovReachesTheStationaryLaw) {
  // Long horizons from a point mass: the stationary law by detailed balance, in a step or two.
  const Csr g = birth_death(60, 3.0, 0.4);
  std::vector<double> p0(g.n, 0.0);
  p0[60] = 1.0;
  std::vector<double> pi(g.n, 1.0);
  for (int i = 1; i < g.n; ++i) pi[i] = pi[i - 1] * (3.0 * (1.0 + 0.1 * (i - 1))) / (0.4 * i);
  const double z = std::accumulate(pi.begin(), pi.end(), 0.0);
  for (double& v : pi) v /= z;
  TransientResult r;
  const auto out = run(&rational_krylov_expv, g.op(), p0, {1e4, 1e8}, TransientOptions{}, &r);
  ASSERT_TRUE(r.converged()) << r.note;
  EXPECT_LE(r.steps, 3);
  for (const auto& p : out) EXPECT_LT(l1(p, pi), 1e-8);
}

TEST(Transient, BadInputsAreNamed) {
  const Csr g = birth_death(5, 1.0, 1.0);
  const GeneratorOperator G = g.op();
  const std::vector<double> p0 = {1, 0, 0, 0, 0, 0};
  auto param_of = [&](auto&& f) {
    try {
      f();
    } catch (const ModelError& e) {
      return e.param();
    }
    return std::string("none");
  };
  EXPECT_EQ(param_of([&] { krylov_expv(G, {1, 0}, {1.0}); }), "p0");
  EXPECT_EQ(param_of([&] { krylov_expv(G, {1.5, -0.5, 0, 0, 0, 0}, {1.0}); }), "p0");
  EXPECT_EQ(param_of([&] { uniformization(G, p0, {2.0, 1.0}); }), "times");
  EXPECT_EQ(param_of([&] { uniformization(G, p0, {-1.0}); }), "times");
  TransientOptions o;
  o.krylov_dim = 0;
  EXPECT_THROW(krylov_expv(G, p0, {1.0}, o), OptionError);
  o = {};
  o.tol = 0.5;
  EXPECT_THROW(o.validate(), OptionError);
  EXPECT_THROW(transient_method_from("pade"), OptionError);
  EXPECT_THROW(expm_multiply(G, p0, {1.0}, TransientMethod::Step), OptionError);
  Csr bad = g;
  bad.val[1] = -0.5;  // an off-diagonal entry < 0
  EXPECT_EQ(param_of([&] { bad.op(); }), "val");
}

TEST(Transient, PoissonWeightsBoundTheirTails) {
  for (double q : {0.0, 1e-8, 0.5, 3.0, 40.0, 1e4, 1e7}) {
    const PoissonWeights pw = poisson_weights(q, 1e-10);
    EXPECT_LE(pw.bound, 1e-10);
    double s = 0.0;
    for (double w : pw.w) s += w;
    EXPECT_NEAR(s, 1.0, 1e-13);
    // The mode's weight against Stirling-free logarithms (moderate q only).
    if (q >= 1.0 && q <= 1e4) {
      const long k = static_cast<long>(q);
      const double ref = std::exp(-q + k * std::log(q) - std::lgamma(k + 1.0));
      EXPECT_NEAR(pw.w[static_cast<size_t>(k - pw.left)], ref, 1e-12 * ref + 1e-10 * ref);
    }
  }
}

TEST(Transient, OneStateAndZeroGenerator) {
  Csr g;
  g.n = 1;
  g.rowptr = {0, 1};
  g.col = {0};
  g.val = {0.0};
  for (auto kernel : {&krylov_expv, &rational_krylov_expv, &uniformization}) {
    TransientResult r;
    const auto out = run(kernel, g.op(), {1.0}, {0.0, 2.0, 1e9}, TransientOptions{}, &r);
    ASSERT_TRUE(r.converged()) << r.note;
    for (const auto& p : out) EXPECT_EQ(p, std::vector<double>{1.0});
    EXPECT_EQ(r.t_reached, 1e9);
  }
}

TEST(Transient, InterruptStopsEveryKernel) {
  const Csr g = birth_death(30, 1.0, 1.0);
  std::vector<double> p0(g.n, 0.0);
  p0[0] = 1.0;
  request_interrupt();
  EXPECT_THROW(krylov_expv(g.op(), p0, {5.0}), Interrupted);
  EXPECT_THROW(uniformization(g.op(), p0, {5.0}), Interrupted);
  EXPECT_THROW(rational_krylov_expv(g.op(), p0, {5.0}), Interrupted);
  clear_interrupt();
  EXPECT_TRUE(krylov_expv(g.op(), p0, {5.0}).converged());
}

TEST(Transient, ExactBreakdownWithZeroThreshold) {
  // p0 is stationary for the symmetric two-state chain: G v_1 = 0, h_21 = 0 exactly.
  Csr g;
  g.n = 2;
  g.rowptr = {0, 2, 4};
  g.col = {0, 1, 0, 1};
  g.val = {-1.0, 1.0, 1.0, -1.0};
  TransientOptions o;
  o.breakdown = 0.0;
  TransientResult r;
  const auto out = run(&krylov_expv, g.op(), {0.5, 0.5}, {1.0, 100.0}, o, &r);
  ASSERT_TRUE(r.converged()) << r.note;
  EXPECT_TRUE(r.breakdown);
  EXPECT_EQ(r.breakdown_dim, 1);
  for (const auto& p : out) EXPECT_NEAR(p[0], 0.5, 1e-15);
}

TEST(Passage, BirthDeathMeanHittingTimesAndNamedErrors) {
  // M/M/1/N without AQM drops: E[time from 0 to N] = sum_n u_n, u_0 = 1/lam,
  // u_n = 1/lam + (mu/lam) u_{n-1} (gambler's ruin); the drain time from k is sum of the
  // down-crossings m_n = 1/mu + (lam/mu) m_{n+1}, m_N = 1/mu.
  const double lam = 0.4, mu = 0.7;
  const int N = 12;
  Model m;
  m.buffer = N;
  m.time = TimeKind::Continuous;
  m.source = Source::poisson(lam);
  m.service = Service::exponential(mu);
  m.aqm.w = 0.5;
  m.grid.k = 1;
  const QueueChain c = build_chain(m);
  const auto& level = c.component(component::level);
  std::vector<char> full(c.n), empty(c.n);
  for (int32_t s = 0; s < c.n; ++s) {
    full[s] = level[s] == N;
    empty[s] = level[s] == 0;
  }
  double up = 0.0, u = 0.0;
  for (int n = 0; n < N; ++n) {
    u = 1.0 / lam + (n ? (mu / lam) * u : 0.0);
    up += u;
  }
  std::vector<double> p0 = empty_system_law(c);
  PassageAnalysisOptions o;
  const PassageAnalysis a = analyse_passage(c, full, p0, {0.0, 10.0}, o);
  ASSERT_TRUE(a.converged()) << a.note;
  EXPECT_NEAR(a.mean, up, 1e-10 * up);
  EXPECT_EQ(a.reach_probability, 1.0);
  EXPECT_EQ(a.cdf[0], 0.0);
  // drain from the full buffer
  std::vector<double> q0(c.n, 0.0);
  for (int32_t s = 0; s < c.n; ++s)
    if (level[s] == N) q0[s] = 1.0;
  double total = 0.0;
  for (double v : q0) total += v;
  for (double& v : q0) v /= total;
  double down = 0.0, next = 0.0;
  for (int n = N; n >= 1; --n) {
    next = 1.0 / mu + (n < N ? (lam / mu) * next : 0.0);
    down += next;
  }
  const PassageAnalysis d = analyse_passage(c, empty, q0, {1.0}, o);
  EXPECT_NEAR(d.mean, down, 1e-10 * down);
  // an empty target and unsorted times are named
  const std::vector<char> none(c.n, 0);
  try {
    analyse_passage(c, none, p0, {1.0}, o);
    FAIL() << "an empty target was accepted";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("'to'"), std::string::npos);
  }
  EXPECT_THROW(analyse_passage(c, full, p0, {3.0, 1.0}, o), ModelError);
}
