// Solvers: agreement across methods, non-convergence status, reducible chains, options.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <tuple>
#include <utility>

#include <Eigen/Dense>

#include "aqmchain/aqmchain.hpp"
#include "fixtures.hpp"
#include "solvers/block_system.hpp"
#include "solvers/multilevel.hpp"
#include "solvers/stationary_common.hpp"

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
  const QueueChain c = build_chain(m);
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

namespace {
/// Closed classes of the graph of the entries with |val| >= min_entry (every stored entry
/// when min_entry is 0), from the transitive closure (Warshall): per state its class's
/// smallest state when that class is closed, else -1.
std::vector<int32_t> closed_by_closure(const Chain& c, double min_entry) {
  const int32_t n = c.n;
  std::vector<std::vector<char>> reach(n, std::vector<char>(n, 0));
  for (int32_t i = 0; i < n; ++i) {
    reach[i][i] = 1;
    for (int32_t k = c.rowptr[i]; k < c.rowptr[i + 1]; ++k)
      if (min_entry <= 0.0 || std::abs(c.val[k]) >= min_entry) reach[i][c.col[k]] = 1;
  }
  for (int32_t m = 0; m < n; ++m)
    for (int32_t i = 0; i < n; ++i)
      if (reach[i][m])
        for (int32_t j = 0; j < n; ++j) reach[i][j] = reach[i][j] || reach[m][j];
  std::vector<int32_t> out(n, -1);
  for (int32_t i = 0; i < n; ++i) {
    bool closed = true;  // everything i reaches reaches i back
    int32_t smallest = i;
    for (int32_t j = 0; j < n; ++j) {
      if (reach[i][j] && !reach[j][i]) closed = false;
      if (reach[i][j] && reach[j][i]) smallest = std::min(smallest, j);
    }
    if (closed) out[i] = smallest;
  }
  return out;
}
}  // namespace

TEST(Classes, ClosedClassesAgreeWithTheTransitiveClosure) {
  // Random graphs, most of them one closed class held together by entries of 1e-3 or more,
  // with entries of 1e-15 laid over them: without those, one closed class holding the
  // recurrent state, one closed class that does not (the recurrent state left transient), or
  // several.  classify (irreducible graphs shown by searches from state 0, the others by
  // the class analysis) and closed_classes_above against the closure, for every kind.
  std::mt19937 rng(20261128);
  int kinds[3] = {0, 0, 0}, irreducible = 0, reducible = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 24);
    std::vector<std::vector<std::pair<int32_t, double>>> rows(n);
    const int shape = static_cast<int>(rng() % 3);
    for (int32_t i = 0; i < n; ++i) {
      if (shape > 0 && n > 1) rows[i].push_back({(i + 1) % n, 0.5});  // a cycle through every state
      const int extra = static_cast<int>(rng() % 3);
      for (int e = 0; e < extra; ++e) {
        const int32_t j = static_cast<int32_t>(rng() % n);
        rows[i].push_back({j, rng() % 2 ? 1e-15 : 1e-3});
      }
      if (shape == 2 && n > 1 && rng() % 3 == 0) rows[i][0].second = 1e-15;  // cut the cycle here
      if (rows[i].empty()) rows[i].push_back({i, 1.0});
    }
    Chain c;
    c.n = n;
    c.rowptr.assign(1, 0);
    for (auto& r : rows) {
      std::sort(r.begin(), r.end());
      for (auto [j, v] : r) c.col.push_back(j), c.val.push_back(v);
      c.rowptr.push_back(static_cast<int32_t>(c.col.size()));
    }
    classify(c);
    const std::vector<int32_t> all = closed_by_closure(c, 0.0);
    std::vector<int32_t> roots;
    for (int32_t i = 0; i < n; ++i)
      if (all[i] >= 0 && std::find(roots.begin(), roots.end(), all[i]) == roots.end()) roots.push_back(all[i]);
    ASSERT_EQ(c.report.closed_classes, static_cast<int>(roots.size())) << "trial " << trial;
    ++(roots.size() == 1 && std::count(all.begin(), all.end(), roots[0]) == n ? irreducible : reducible);
    if (roots.size() != 1) {
      ASSERT_EQ(c.recurrent_state, -1);
      continue;
    }
    const int64_t in_closed = std::count_if(all.begin(), all.end(), [](int32_t v) { return v >= 0; });
    ASSERT_EQ(c.report.transient_states, n - in_closed) << "trial " << trial;
    ASSERT_GE(all[c.recurrent_state], 0) << "trial " << trial;
    const std::vector<int32_t> above = closed_by_closure(c, 1e-12);
    std::vector<int32_t> above_roots;
    for (int32_t i = 0; i < n; ++i)
      if (above[i] >= 0 && std::find(above_roots.begin(), above_roots.end(), above[i]) == above_roots.end())
        above_roots.push_back(above[i]);
    const ClosedClasses cc = closed_classes_above(c, 1e-12);
    ASSERT_EQ(cc.count, static_cast<int>(above_roots.size())) << "trial " << trial;
    ASSERT_GE(cc.first, 0);
    ASSERT_GE(above[cc.first], 0) << "trial " << trial;  // a state of a closed class
    if (cc.count > 1) {
      ASSERT_GE(cc.second, 0);
      ASSERT_GE(above[cc.second], 0);
      ASSERT_NE(above[cc.first], above[cc.second]);
    }
    ++kinds[cc.count > 1 ? 2 : above[c.recurrent_state] >= 0 ? 0 : 1];
  }
  // every kind was met (the cheap proofs of one class, their fallbacks, the split)
  EXPECT_GT(irreducible, 300);
  EXPECT_GT(reducible, 300);
  EXPECT_GT(kinds[0], 100);
  EXPECT_GT(kinds[1], 20);
  EXPECT_GT(kinds[2], 100);
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
    const QueueChain c = build_chain(m);
    const auto r = ds.solve(c);
    ASSERT_TRUE(r.converged());
    // same answer as a fresh solve
    StationaryOptions o;
    o.method = Method::Direct;
    const auto fresh = solve_stationary(c, o);
    double d = 0;
    for (int32_t i = 0; i < c.n; ++i) d += std::abs(r.pi[i] - fresh.pi[i]);
    EXPECT_LE(d, test::solution_distance_bound(c, fresh.pi, r.residual, fresh.residual));
  }
  EXPECT_GE(ds.solves(), 3);
  const long after_sweep = ds.analyses();
  EXPECT_LE(after_sweep, 2);  // 2 when the first fixed state was improbable and re-solved once
  m.aqm.w = 0.3;  // another reachable set: analysed again
  EXPECT_TRUE(ds.solve(build_chain(m)).converged());
  EXPECT_GT(ds.analyses(), after_sweep);
}

// ---------------------------------------------------------------- closed class / fixed state

namespace {
/// Bernoulli(1) arrivals into S-RED(4, 18, seg 10), w = 0.2: the empty system is
/// left in the first slot and never re-entered (a transient state 0), and states with
/// probabilities down to 1e-25 sit next to probable ones.
Chain sred_transient_chain(double mu, int k) {
  Model m;
  m.buffer = 20;
  m.source = Source::bernoulli(1.0);
  m.service = Service::geometric(mu);
  m.aqm.drop = DropFunction::sred(4, 18, 10);
  m.aqm.w = 0.2;
  m.grid.k = k;
  return build_chain(m);
}

/// Oracle: i is in the closed class iff every state reachable from i reaches i back
/// (reachability by one search per state, independent of the builder's Tarjan pass).
std::vector<char> closed_class_oracle(const Chain& c) {
  std::vector<std::vector<char>> reach(c.n, std::vector<char>(c.n, 0));
  for (int32_t s = 0; s < c.n; ++s) {
    std::vector<int32_t> todo{s};
    reach[s][s] = 1;
    while (!todo.empty()) {
      const int32_t v = todo.back();
      todo.pop_back();
      for (int32_t e = c.rowptr[v]; e < c.rowptr[v + 1]; ++e)
        if (c.val[e] > 0 && !reach[s][c.col[e]]) {
          reach[s][c.col[e]] = 1;
          todo.push_back(c.col[e]);
        }
    }
  }
  std::vector<char> closed(c.n, 1);
  for (int32_t i = 0; i < c.n; ++i)
    for (int32_t j = 0; j < c.n && closed[i]; ++j)
      if (reach[i][j] && !reach[j][i]) closed[i] = 0;
  return closed;
}

double l1(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::abs(a[i] - b[i]);
  return d;
}
}  // namespace

TEST(Solvers, AutoConvergesWithTransientStatesAndImprobableStates) {
  // The fuzzer's model (k = 1) and k = 2, where fixing pi_k = 1 at the builder's
  // recurrent state (pi ~ 1e-20) used to leave direct at residual 0.3.
  for (int k : {1, 2})
    for (double mu : {0.3, 0.5, 0.9}) {
      const Chain c = sred_transient_chain(mu, k);
      ASSERT_EQ(c.report.closed_classes, 1);
      ASSERT_GE(c.report.transient_states, 1);
      const auto a = solve_stationary(c);
      ASSERT_TRUE(a.converged()) << "mu " << mu << " k " << k << ": " << a.note;
      EXPECT_LE(a.residual, 1e-12);
      EXPECT_EQ(a.method, Method::Direct) << a.note;
      // the fixed state is a probable one (the estimate's argmax), not any closed-class state
      EXPECT_GT(a.extra_value("fixed_state_probability"), 1e-3);
      StationaryOptions o;
      o.method = Method::GaussSeidel;
      const auto g = solve_stationary(c, o);
      ASSERT_TRUE(g.converged()) << g.note;
      EXPECT_LT(l1(a.pi, g.pi), 1e-10) << "mu " << mu << " k " << k;
    }
}

TEST(Solvers, StatesOutsideTheClosedClassGetExactlyZeroForEveryMethod) {
  for (int k : {1, 2}) {
    const Chain c = sred_transient_chain(0.5, k);
    const auto closed = closed_class_oracle(c);
    int64_t transient = 0;
    for (char x : closed) transient += !x;
    ASSERT_EQ(transient, c.report.transient_states);
    StationaryOptions o;
    o.method = Method::Direct;
    const auto ref = solve_stationary(c, o);
    for (Method m : kAllMethods) {  // the registry: a new method cannot miss this test
      o.method = m;
      const auto r = solve_stationary(c, o);
      ASSERT_TRUE(r.converged()) << to_string(m) << ": " << r.note;
      for (int32_t i = 0; i < c.n; ++i) {
        if (!closed[i])
          EXPECT_EQ(r.pi[i], 0.0) << to_string(m) << " state " << i;
        else if (m == Method::Direct)  // iterative methods may clip a 1e-25 to 0 (round-off)
          EXPECT_GT(r.pi[i], 0.0) << to_string(m) << " state " << i;
      }
      EXPECT_LT(l1(r.pi, ref.pi), 1e-10) << to_string(m);
    }
    // a starting vector with mass only on transient states still works
    o.method = Method::GaussSeidel;
    o.x0.assign(c.n, 0.0);
    for (int32_t i = 0; i < c.n; ++i)
      if (!closed[i]) o.x0[i] = 1.0;
    const auto r = solve_stationary(c, o);
    EXPECT_TRUE(r.converged()) << r.note;
  }
}

TEST(Solvers, TargetRunFromRestrictsItsStartToTheClosedClassAndExpandsTheAnswer) {
  // What auto's later attempts start from (a handed-over iterate, the best answer so far):
  // a vector over the whole chain, given to a method that runs on the closed class.
  const Chain c = sred_transient_chain(0.5, 1);
  const auto closed = closed_class_oracle(c);
  std::vector<int32_t> keep;
  for (int32_t i = 0; i < c.n; ++i)
    if (closed[i]) keep.push_back(i);
  ASSERT_LT(static_cast<int32_t>(keep.size()), c.n);
  StationaryOptions od;
  od.method = Method::Direct;
  const auto ref = solve_stationary(c, od);
  ASSERT_TRUE(ref.converged()) << ref.note;
  const MarkovOperator op(c);
  StationaryOptions o;
  o.method = Method::GaussSeidel;
  detail::Target t(op, o);
  const auto& gs = detail::solver_of(Method::GaussSeidel);
  ASSERT_FALSE(gs.whole_chain);
  std::vector<double> seen;
  int64_t seen_rows = -1;
  auto run_gs = [&](const MarkovOperator& sub, const StationaryOptions& so, StationaryResult& y) {
    seen = so.x0;
    seen_rows = sub.rows();
    gs.solve(sub, so, y, {});
  };
  auto check_answer = [&](const StationaryResult& x, const char* what) {
    ASSERT_TRUE(x.converged()) << what << ": " << x.note;
    ASSERT_EQ(static_cast<int32_t>(x.pi.size()), c.n) << what;
    for (int32_t i = 0; i < c.n; ++i)
      if (!closed[i]) EXPECT_EQ(x.pi[i], 0.0) << what << ", transient state " << i;
    EXPECT_EQ(x.residual, op.residual(x.pi)) << what << ": the residual is the whole chain's";
    EXPECT_LT(l1(x.pi, ref.pi), 1e-10) << what;
  };
  StationaryResult cold;
  t.run(false, cold, run_gs);
  check_answer(cold, "cold");
  EXPECT_TRUE(seen.empty());

  // the answer on the closed class, something else on the transient states: the method sees
  // the closed class's entries in order and starts at the answer
  std::vector<double> x0 = ref.pi;
  for (int32_t i = 0; i < c.n; ++i)
    if (!closed[i]) x0[i] = 0.25;
  StationaryResult warm;
  t.run_from(x0, false, warm, run_gs);
  EXPECT_EQ(seen_rows, static_cast<int64_t>(keep.size()));
  ASSERT_EQ(seen.size(), keep.size());
  for (size_t k = 0; k < keep.size(); ++k) EXPECT_EQ(seen[k], x0[keep[k]]) << "closed-class state " << k;
  check_answer(warm, "from the answer");
  EXPECT_LT(warm.iterations, cold.iterations);
  EXPECT_TRUE(t.options().x0.empty()) << "run_from leaves the options' start alone";

  // mass on the transient states only: nothing to restrict, the method starts uniform
  std::vector<double> off(c.n, 0.0);
  for (int32_t i = 0; i < c.n; ++i)
    if (!closed[i]) off[i] = 1.0;
  StationaryResult from_off;
  t.run_from(off, false, from_off, run_gs);
  EXPECT_TRUE(seen.empty());
  check_answer(from_off, "from the transient states");
  EXPECT_EQ(from_off.iterations, cold.iterations);

  // a whole-chain method gets the vector as given and its answer is restricted, then expanded
  StationaryResult whole;
  t.run_from(x0, true, whole, run_gs);
  EXPECT_EQ(seen_rows, c.n);
  EXPECT_EQ(seen, x0);
  check_answer(whole, "on the whole chain");
}

TEST(Solvers, DirectSolverRestrictsToTheClosedClassToo) {
  const Chain c = sred_transient_chain(0.5, 2);
  DirectSolver ds;
  const auto r = ds.solve(c);
  ASSERT_TRUE(r.converged()) << r.note;
  const auto again = ds.solve(c);  // same pattern: the symbolic analysis is reused
  EXPECT_EQ(ds.analyses(), 1);
  EXPECT_LE(l1(r.pi, again.pi), test::solution_distance_bound(c, r.pi, r.residual, again.residual));
}

TEST(Solvers, CountOptionsAreBounded) {
  const Chain c = ssmp_red_chain(UpdateRule::PerSlot);
  auto expect_bound = [&](auto set, const std::string& text) {
    StationaryOptions o;
    set(o);
    try {
      solve_stationary(c, o);
      ADD_FAILURE() << "no error for " << text;
    } catch (const OptionError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expect_bound([](StationaryOptions& o) { o.smoothing_sweeps = 2147483647; },
               "solver option 'smoothing_sweeps' must be in [1, 100], got 2147483647");
  expect_bound([](StationaryOptions& o) { o.refine_steps = 101; }, "'refine_steps' must be in [0, 100]");
  expect_bound([](StationaryOptions& o) { o.check_every = 2000000; }, "'check_every' must be in [1, 1000000]");
  expect_bound([](StationaryOptions& o) { o.ncv = 100000; }, "'ncv' must be in [0, 1000]");
  expect_bound([](StationaryOptions& o) { o.max_iter = 2000000000L; }, "'max_iter' must be in [0, 1000000000]");
  expect_bound([](StationaryOptions& o) { o.coarse_size = 5000; }, "'coarse_size' must be in [2, 2000]");
}

TEST(Solvers, EveryRowOfTheOptionTableIsValidated) {
  // Generated from kStationaryOptions: a value just outside each row's bound is refused by
  // validate() with an OptionError naming the option (param) and stating the row's bound.
  for (const OptionRow& r : kStationaryOptions) {
    StationaryOptions o;
    switch (r.type) {
      case OptionType::Int: ASSERT_TRUE(r.set_int(o, static_cast<long>(r.hi) + 1) || r.set_int(o, static_cast<long>(r.lo) - 1)) << r.name; break;
      case OptionType::Real: o.*r.real = r.lo_open ? r.lo : r.lo - 1.0; break;
      case OptionType::Choice:
        if (!r.choices) {  // the method: method_from refuses an unknown name, naming the option
          try {
            r.set_text(o, "lu");
            ADD_FAILURE() << r.name;
          } catch (const OptionError& e) {
            EXPECT_EQ(e.param(), r.name);
          }
          continue;
        }
        r.set_text(o, "no-such-value");
        break;
      case OptionType::RealList: o.*r.list = {1.0, -1.0}; break;
    }
    try {
      o.validate();
      ADD_FAILURE() << "no error for " << r.name;
    } catch (const OptionError& e) {
      EXPECT_EQ(e.param(), r.name) << e.what();
      const std::string want = std::string("solver option '") + r.name + "' must ";
      EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
      if (r.type != OptionType::RealList)
        EXPECT_NE(std::string(e.what()).find("must be " + option_bound(r)), std::string::npos) << e.what();
    }
    StationaryOptions d;  // and the defaults are inside every row's bound
    EXPECT_NO_THROW(d.validate());
  }
}

TEST(Solvers, ArnoldiBasisIsCheckedAgainstItsBudgetBeforeAllocating) {
  const Chain c = ssmp_red_chain(UpdateRule::PerSlot);
  StationaryOptions o;
  o.method = Method::Arnoldi;
  o.ncv = 1000;  // clamped to the number of states
  o.arnoldi_max_gb = 1e-6;
  try {
    solve_stationary(c, o);
    FAIL();
  } catch (const StateSpaceTooLarge& e) {
    EXPECT_EQ(e.param(), "ncv");
    EXPECT_NE(std::string(e.what()).find("arnoldi_max_gb"), std::string::npos);
  }
}

TEST(Solvers, MultilevelNeedsStateLabels) {
  Chain c;  // hand-built, no (level, avg, modulator) labels
  c.n = 2;
  c.rowptr = {0, 2, 4};
  c.col = {0, 1, 0, 1};
  c.val = {0.5, 0.5, 0.25, 0.75};
  classify(c);
  StationaryOptions o;
  o.method = Method::Multilevel;
  EXPECT_THROW(solve_stationary(c, o), SolverError);
  o.method = Method::Auto;  // direct works
  const auto r = solve_stationary(c, o);
  ASSERT_TRUE(r.converged());
  EXPECT_NEAR(r.pi[0], 1.0 / 3.0, 1e-15);
}

namespace {
/// Two independent components: "pair" (2 values, merged by the aggregation) flips 0 -> 1
/// with probability 0.3 and 1 -> 0 with 0.1; "ring" (1,100 values, kept apart: coarsen =
/// false) steps up with probability 0.4 and down with 0.1 (a reflecting birth-death chain).
/// Each slot moves one of them, chosen with probability 1/2.  The aggregation merges the
/// pair once, then stalls at the ring's 1,100 states, above the dense coarsest solve's
/// 1,000.  The stationary vector is the product of the two components' own (closed forms):
/// pi_pair = (0.1, 0.3) / 0.4, pi_ring(i) ~ 4^(i - R + 1).
struct StalledCoarsening {
  static constexpr int32_t R = 1100;
  Chain c;
  std::vector<double> exact;
  double exact_residual = 0.0;  ///< the closed form's own ||pi P - pi||_1
  StalledCoarsening() {
    c.space.add("pair", 2, /*coarsen=*/true, /*in_block=*/false);
    c.space.add("ring", R, /*coarsen=*/false, /*in_block=*/false);
    c.n = 2 * R;
    c.labels.assign(2, std::vector<int32_t>(static_cast<size_t>(c.n)));
    c.rowptr = {0};
    for (int32_t p = 0; p < 2; ++p)
      for (int32_t i = 0; i < R; ++i) {
        c.labels[0][static_cast<size_t>(id(p, i))] = p;
        c.labels[1][static_cast<size_t>(id(p, i))] = i;
        const double flip = 0.5 * (p == 0 ? 0.3 : 0.1);
        const double up = i + 1 < R ? 0.5 * 0.4 : 0.0, down = i > 0 ? 0.5 * 0.1 : 0.0;
        std::vector<std::pair<int32_t, double>> row = {{id(1 - p, i), flip}};
        if (up > 0) row.push_back({id(p, i + 1), up});
        if (down > 0) row.push_back({id(p, i - 1), down});
        row.push_back({id(p, i), 1.0 - flip - up - down});
        std::sort(row.begin(), row.end());
        for (auto [j, v] : row) c.col.push_back(j), c.val.push_back(v);
        c.rowptr.push_back(static_cast<int32_t>(c.col.size()));
      }
    classify(c);
    std::vector<double> ring(static_cast<size_t>(R));
    double total = 0.0;
    for (int32_t i = 0; i < R; ++i) total += ring[static_cast<size_t>(i)] = std::pow(0.1 / 0.4, R - 1 - i);
    exact.resize(static_cast<size_t>(c.n));
    for (int32_t p = 0; p < 2; ++p)
      for (int32_t i = 0; i < R; ++i)
        exact[static_cast<size_t>(id(p, i))] = (p == 0 ? 0.25 : 0.75) * ring[static_cast<size_t>(i)] / total;
    exact_residual = residual_of(exact);
  }
  static int32_t id(int32_t p, int32_t i) { return p * R + i; }
  /// ||x P - x||_1, evaluated here (not the solver's report).
  double residual_of(const std::vector<double>& x) const {
    std::vector<double> xp(static_cast<size_t>(c.n), 0.0);
    for (int32_t i = 0; i < c.n; ++i)
      for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e) xp[static_cast<size_t>(c.col[e])] += x[static_cast<size_t>(i)] * c.val[e];
    double s = 0.0;
    for (int32_t j = 0; j < c.n; ++j) s += std::abs(xp[static_cast<size_t>(j)] - x[static_cast<size_t>(j)]);
    return s;
  }
  /// r.pi within the rigorous distance bound of the closed form, for its residual evaluated here.
  void expect_exact(const StationaryResult& r) const {
    double dist = 0.0;
    for (int32_t s = 0; s < c.n; ++s) dist += std::abs(r.pi[static_cast<size_t>(s)] - exact[static_cast<size_t>(s)]);
    const double residual = residual_of(r.pi);
    EXPECT_LE(residual, 1e-12) << "reported " << r.residual;
    EXPECT_LE(dist, test::solution_distance_bound(c, exact, residual, exact_residual)) << "residual " << residual;
  }
};

}  // namespace

TEST(Solvers, MultilevelSweepsACoarsestLevelWhoseCoarseningStalls) {
  const StalledCoarsening f;
  StationaryOptions o;
  o.method = Method::Multilevel;
  o.tol = 1e-12;
  const auto r = solve_stationary(f.c, o);
  ASSERT_TRUE(r.converged()) << r.note;
  EXPECT_EQ(r.extra_value("coarsest_states", -1), StalledCoarsening::R);
  EXPECT_GT(r.extra_value("coarsest_sweeps", -1), 0);
  f.expect_exact(r);
  // an attempt with a fallback behind it (auto's) refuses the stalled coarsening, saying that
  // the level could be swept
  detail::Attempt with_fallback;
  with_fallback.fail_fast = true;
  StationaryResult refused;
  try {
    detail::solver_of(Method::Multilevel).solve(MarkovOperator(f.c), o, refused, with_fallback);
    ADD_FAILURE() << "no refusal";
  } catch (const detail::CoarseningStalled& e) {
    EXPECT_TRUE(e.sweepable);
  }
  with_fallback.sweep_stalled_coarsest = true;  // unless asked to sweep (auto, after krylov's budget)
  StationaryResult swept_in_auto;
  detail::solver_of(Method::Multilevel).solve(MarkovOperator(f.c), o, swept_in_auto, with_fallback);
  EXPECT_TRUE(swept_in_auto.converged()) << swept_in_auto.note;
  f.expect_exact(swept_in_auto);
  detail::Attempt alone;  // and alone it sweeps the level
  StationaryResult swept;
  detail::solver_of(Method::Multilevel).solve(MarkovOperator(f.c), o, swept, alone);
  EXPECT_TRUE(swept.converged()) << swept.note;
  f.expect_exact(swept);
}

TEST(Solvers, AutoSweepsAStalledCoarseningAfterKrylovsStepBudget) {
  // auto's order on a large coupled chain: multilevel (refused: its coarsening stalls at a
  // level it could sweep), direct (skipped here: direct_max_gb), krylov with a budget of
  // auto_stalled_krylov_steps GMRES steps, then multilevel sweeping that level (from its own
  // start)
  const StalledCoarsening f;
  StationaryOptions o;
  o.tol = 1e-12;
  o.auto_krylov_min_states = 0;  // the large chains' order
  o.direct_max_gb = 1e-9;
  o.auto_stalled_krylov_steps = 2;
  const auto r = solve_stationary(f.c, o);
  ASSERT_TRUE(r.converged()) << r.note;
  EXPECT_EQ(r.method, Method::Multilevel);
  ASSERT_EQ(r.methods_tried.size(), 4u) << r.note;
  const Method order[] = {Method::Multilevel, Method::Direct, Method::Krylov, Method::Multilevel};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(r.methods_tried[i].method, order[i]) << i;
  EXPECT_NE(r.methods_tried[0].why.find("coarsening stalled"), std::string::npos) << r.methods_tried[0].why;
  EXPECT_LE(r.methods_tried[2].iterations, 2);
  EXPECT_NE(r.methods_tried[2].status, Status::Converged);
  EXPECT_EQ(r.methods_tried[3].status, Status::Converged);
  EXPECT_GT(r.extra_value("coarsest_sweeps", -1), 0);
  f.expect_exact(r);
  // without the budget krylov goes on alone, as before (on this chain it stalls and
  // Gauss-Seidel comes next)
  o.auto_stalled_krylov_steps = 0;
  const auto k = solve_stationary(f.c, o);
  ASSERT_GE(k.methods_tried.size(), 3u) << k.note;
  EXPECT_EQ(k.methods_tried[2].method, Method::Krylov);
  EXPECT_GT(k.methods_tried[2].iterations, 2);
  for (size_t i = 1; i < k.methods_tried.size(); ++i) EXPECT_NE(k.methods_tried[i].method, Method::Multilevel) << i;
}

TEST(Solvers, DirectFixesAProbableStateOnASlowlyMixingChain) {
  // RED with w = 0.002: avg moves slowly, and a few local sweeps from the uniform
  // vector point at states with pi / max pi ~ 1e-11.  The fixed state must be a
  // probable one whatever the mixing time.
  Model m;
  m.buffer = 100;
  m.source = Source::bernoulli(0.5);
  m.service = Service::geometric(0.5);
  m.aqm.drop = DropFunction::red(40, 80, 0.1);
  m.aqm.w = 0.002;
  m.grid.k = 2;
  const QueueChain c = build_chain(m);
  StationaryOptions o;
  o.method = Method::Direct;
  const auto r = solve_stationary(c, o);
  ASSERT_TRUE(r.converged()) << r.note;
  EXPECT_GT(r.extra_value("fixed_state_probability"), 0.1);
  o.method = Method::Multilevel;
  const auto ml = solve_stationary(c, o);
  ASSERT_TRUE(ml.converged()) << ml.note;
  EXPECT_LT(l1(r.pi, ml.pi), 1e-9);
}

TEST(Solvers, EveryMethodStopsWhenInterrupted) {
  const Chain c = ssmp_red_chain(UpdateRule::PerSlot);
  request_interrupt();
  for (Method m : kAllMethods) {
    StationaryOptions o;
    o.method = m;
    EXPECT_THROW(solve_stationary(c, o), Interrupted) << to_string(m);
  }
  StationaryOptions o;
  o.method = Method::Direct;
  DirectSolver direct(o);
  EXPECT_THROW(direct.solve(c), Interrupted);
  clear_interrupt();
  EXPECT_TRUE(solve_stationary(c, o).converged());
}

TEST(Interrupt, RunAbandonableReturnsResultsAndErrors) {
  auto out = std::make_shared<int>(0);
  run_abandonable([out] { *out = 42; });
  EXPECT_EQ(*out, 42);
  EXPECT_THROW(run_abandonable([] { throw SolverError("from the worker"); }), SolverError);
}

TEST(Interrupt, RunAbandonableLeavesAWorkerThatMakesNoChecks) {
  // The worker blocks until released (a library call that never polls): the caller must
  // return with Interrupted long before that, and the worker must finish on its own.
  struct State {
    std::atomic<bool> release{false}, finished{false};
  };
  auto st = std::make_shared<State>();
  clear_interrupt();
  std::thread asker([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    request_interrupt();
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(run_abandonable([st] {
                 while (!st->release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                 st->finished = true;
               }),
               Interrupted);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  asker.join();
  clear_interrupt();
  EXPECT_FALSE(st->finished);  // abandoned, still running
  EXPECT_LT(waited, 5.0);      // 50 ms and one 10 ms poll; generous for a loaded machine
  st->release = true;
  for (int i = 0; i < 5000 && !st->finished; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(st->finished);
}

namespace {
/// A continuous chain by hand: G of 4 states, state 3 absorbing-free but with a row of G
/// that has no diagonal entry stored (state 2: no outflow, G's row 2 empty), labels on a
/// descriptor whose names are deliberately those of the queue models.
Chain hand_generator() {
  Chain c;
  c.time = TimeKind::Continuous;
  c.n = 4;
  // rows: 0 -> 1 (2.0), 0 -> 3 (0.5); 1 -> 0 (1.0), 1 -> 2 (3.0); 2: none; 3 -> 0 (4.0)
  c.rowptr = {0, 3, 6, 6, 8};
  c.col = {0, 1, 3, 0, 1, 2, 0, 3};
  c.val = {-2.5, 2.0, 0.5, 1.0, -4.0, 3.0, 4.0, -4.0};
  c.space.add("level", 2, true, false);  // a queue name, not flagged: outside the block
  c.space.add("x", 2, true, true);       // flagged: inside
  c.labels = {{0, 0, 1, 1}, {0, 1, 0, 1}};
  return c;
}
std::vector<double> dense_uniformised(const Chain& c, double lambda) {
  std::vector<double> P(static_cast<size_t>(c.n) * c.n, 0.0);
  for (int32_t i = 0; i < c.n; ++i) {
    P[static_cast<size_t>(i) * c.n + i] = 1.0;
    for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e) P[static_cast<size_t>(i) * c.n + c.col[e]] += c.val[e] / lambda;
  }
  return P;
}
}  // namespace

TEST(Operator, FormsTheUniformisedMatrixOfAGeneratorOnTheFly) {
  const Chain c = hand_generator();
  const MarkovOperator op(c);
  EXPECT_TRUE(op.continuous());
  EXPECT_EQ(op.rate(), 4.0);  // max_i |G_ii|
  const std::vector<double> P = dense_uniformised(c, 4.0);
  const int n = c.n;
  const std::vector<double> x = {0.1, 0.2, 0.3, 0.4};
  std::vector<double> y(n), yt(n), d(n);
  op.apply(x.data(), y.data());
  op.apply_transpose(x.data(), yt.data());
  op.diagonal(d.data());
  for (int j = 0; j < n; ++j) {
    double xp = 0.0, px = 0.0;
    for (int i = 0; i < n; ++i) {
      xp += x[i] * P[i * n + j];
      px += P[j * n + i] * x[i];
    }
    EXPECT_NEAR(y[j], xp, 1e-15) << j;
    EXPECT_NEAR(yt[j], px, 1e-15) << j;
    EXPECT_EQ(d[j], P[j * n + j]) << j;
  }
  // P^T in CSR: every entry of P, a diagonal in every row, columns sorted
  const TransposedCsr T = op.transpose();
  std::vector<double> back(static_cast<size_t>(n) * n, 0.0);
  for (int j = 0; j < n; ++j) {
    bool diag = false;
    for (int32_t e = T.rowptr[j]; e < T.rowptr[j + 1]; ++e) {
      if (e > T.rowptr[j]) EXPECT_LT(T.col[e - 1], T.col[e]);
      diag = diag || T.col[e] == j;
      back[static_cast<size_t>(T.col[e]) * n + j] = T.val[e];
    }
    EXPECT_TRUE(diag) << j;
  }
  for (size_t k = 0; k < back.size(); ++k) EXPECT_EQ(back[k], P[k]) << k;
  // the residual is ||x P - x||_1 = ||x G||_1 / Lambda
  double r = 0.0;
  std::vector<double> g(n);
  op.apply_generator(x.data(), g.data());
  for (int j = 0; j < n; ++j) r += std::abs(g[j]) / 4.0;
  EXPECT_NEAR(op.residual(x), r, 1e-15);
}

TEST(Operator, PreconditionerBlocksComeFromTheDescriptorFlagsNotNames) {
  const Chain c = hand_generator();
  // blocks: the states with equal values of the components outside the block ("level")
  EXPECT_EQ(MarkovOperator(c).block_partition(), (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(MarkovOperator(c).components_outside_block(), 1);
  // the queue models flag their fast components: one block per point of the average's grid
  Model m = test::geo_model(6, 0.4, 0.6);
  m.grid.k = 2;
  const Chain q = build_chain(m);
  const MarkovOperator op(q);
  const std::vector<int32_t> blocks = op.block_partition();
  const std::vector<int32_t>& avg = q.component(component::avg);
  for (int32_t s = 0; s < q.n; ++s) EXPECT_EQ(blocks[s], avg[s]) << s;
  for (const Component& x : q.space.components()) EXPECT_EQ(x.in_block, x.name != component::avg) << x.name;
}

TEST(Operator, BlocksAreNumberedWithTheMostOneDirectionalComponentFirst) {
  // Three components on a 3 x 3 x 2 lattice: "walk" (declared first) moves up and down with
  // equal weight (|up - down| / (up + down) = 0), "counter" climbs by one with weight 0.5
  // and is reset to 0 with weight 0.1 (6 against 1.2 over the lattice: 2 / 3), "fast" is
  // inside the block.
  StateSpace space;
  space.add("walk", 3, true, false);
  space.add("counter", 3, false, false);
  space.add("fast", 2, true, true);
  const int32_t n = 18;
  std::vector<std::vector<int32_t>> labels(3, std::vector<int32_t>(n));
  auto id = [](int w, int c, int f) { return (w * 3 + c) * 2 + f; };
  for (int w = 0; w < 3; ++w)
    for (int c = 0; c < 3; ++c)
      for (int f = 0; f < 2; ++f) labels[0][id(w, c, f)] = w, labels[1][id(w, c, f)] = c, labels[2][id(w, c, f)] = f;
  std::vector<int32_t> rp{0}, col;
  std::vector<double> val;
  double up[2] = {0, 0}, down[2] = {0, 0};  // the oracle's sums: walk, counter
  for (int w = 0; w < 3; ++w)
    for (int c = 0; c < 3; ++c)
      for (int f = 0; f < 2; ++f) {
        std::vector<std::pair<int32_t, double>> row;
        if (w + 1 < 3) row.push_back({id(w + 1, c, f), 0.2}), up[0] += 0.2;
        if (w > 0) row.push_back({id(w - 1, c, f), 0.2}), down[0] += 0.2;
        if (c + 1 < 3) row.push_back({id(w, c + 1, f), 0.5}), up[1] += 0.5;
        if (c > 0) row.push_back({id(w, 0, f), 0.1}), down[1] += 0.1;
        row.push_back({id(w, c, 1 - f), 0.05});
        std::sort(row.begin(), row.end());
        for (auto [j, v] : row) col.push_back(j), val.push_back(v);
        rp.push_back(static_cast<int32_t>(col.size()));
      }
  ASSERT_LT(std::abs(up[0] - down[0]) / (up[0] + down[0]), std::abs(up[1] - down[1]) / (up[1] + down[1]));
  EXPECT_EQ(sweep_order(space, component_moves(space, labels, n, rp.data(), col.data(), val.data())), (std::vector<int>{1, 0}));
  // numbered with the counter as the major key: block = counter * 3 + walk
  const std::vector<int32_t> blocks = in_block_partition(space, labels, n, {1, 0});
  for (int32_t s = 0; s < n; ++s) EXPECT_EQ(blocks[s], labels[1][s] * 3 + labels[0][s]) << s;
  // the descriptor's order without a matrix
  const std::vector<int32_t> plain = in_block_partition(space, labels, n);
  for (int32_t s = 0; s < n; ++s) EXPECT_EQ(plain[s], labels[0][s] * 3 + labels[1][s]) << s;
  // a walk that only climbs (a one-directional walk) would come first again: the rule, not the names
  for (size_t e = 0; e < col.size(); ++e) {
    const int32_t i = static_cast<int32_t>(std::upper_bound(rp.begin(), rp.end(), static_cast<int32_t>(e)) - rp.begin()) - 1;
    if (labels[0][col[e]] < labels[0][i]) val[e] = 0.0;
    if (labels[1][col[e]] < labels[1][i]) val[e] = 0.3;
  }
  EXPECT_EQ(sweep_order(space, component_moves(space, labels, n, rp.data(), col.data(), val.data())), (std::vector<int>{0, 1}));
}

TEST(Operator, ContinuousChainsSolveWithoutACopyAndAgreeWithTheDenseOracle) {
  const Chain c = hand_generator();
  // state 2 has no outflow: the closed class is {2}; make it irreducible instead
  Chain g = c;
  g.rowptr = {0, 3, 6, 8, 10};
  g.col = {0, 1, 3, 0, 1, 2, 0, 2, 0, 3};
  g.val = {-2.5, 2.0, 0.5, 1.0, -4.0, 3.0, 0.5, -0.5, 4.0, -4.0};
  classify(g);
  // pi G = 0 by the dense oracle: the null vector of G^T with one equation replaced by sum pi = 1
  const int n = g.n;
  std::vector<double> A(static_cast<size_t>(n) * n, 0.0), b(n, 0.0);
  for (int32_t i = 0; i < n; ++i)
    for (int32_t e = g.rowptr[i]; e < g.rowptr[i + 1]; ++e) A[static_cast<size_t>(g.col[e]) * n + i] += g.val[e];
  for (int j = 0; j < n; ++j) A[static_cast<size_t>(n - 1) * n + j] = 1.0;
  b[n - 1] = 1.0;
  for (int k = 0; k < n; ++k)  // Gaussian elimination with partial pivoting
    for (int i = k + 1; i < n; ++i) {
      int p = k;
      for (int r = k + 1; r < n; ++r)
        if (std::abs(A[r * n + k]) > std::abs(A[p * n + k])) p = r;
      if (p != k) {
        for (int j = 0; j < n; ++j) std::swap(A[k * n + j], A[p * n + j]);
        std::swap(b[k], b[p]);
      }
      const double f = A[i * n + k] / A[k * n + k];
      for (int j = k; j < n; ++j) A[i * n + j] -= f * A[k * n + j];
      b[i] -= f * b[k];
    }
  std::vector<double> pi(n);
  for (int i = n - 1; i >= 0; --i) {
    double s = b[i];
    for (int j = i + 1; j < n; ++j) s -= A[i * n + j] * pi[j];
    pi[i] = s / A[i * n + i];
  }
  for (Method m : kAllMethods) {
    if (m == Method::Multilevel) continue;  // 4 states: below any coarsening
    StationaryOptions o;
    o.method = m;
    const StationaryResult r = solve_stationary(MarkovOperator(g), o);
    ASSERT_TRUE(r.converged()) << to_string(m) << ": " << r.note;
    EXPECT_LT(l1(r.pi, pi), 1e-12) << to_string(m);
    ASSERT_FALSE(r.extra.empty());
    EXPECT_EQ(r.extra.back().first, "uniformization_rate");
    EXPECT_EQ(r.extra.back().second, 4.0);
  }
}

TEST(Registry, NamesDescriptionsAndDispatchComeFromOneTable) {
  ASSERT_EQ(std::size(kAllMethods), std::size(kMethodInfo));
  for (size_t i = 0; i < std::size(kMethodInfo); ++i) {
    const MethodInfo& x = kMethodInfo[i];
    EXPECT_EQ(kAllMethods[i], x.method);
    EXPECT_EQ(to_string(x.method), x.name);
    EXPECT_EQ(method_from(x.name), x.method);
    EXPECT_GT(std::string(x.description).size(), 10u) << x.name;
  }
  try {
    method_from("jacobi-like");
    FAIL();
  } catch (const OptionError& e) {
    for (const MethodInfo& x : kMethodInfo) EXPECT_NE(std::string(e.what()).find(x.name), std::string::npos) << x.name;
  }
}

// ------------------------------------------------------------------ the preconditioner's blocks
namespace {
/// A random walk on (z, x, y), z < Z, x, y < S (rows = from-state, stochastic): the
/// preconditioner's blocks are the planes z, each an S x S grid whose band (in state order) is
/// 2 S + 1 wide while a fill-reducing order needs far less: the sparse LU's case.
struct PlaneChain {
  int32_t n = 0;
  std::vector<int32_t> rowptr{0}, col, block_of;
  std::vector<double> val;
};
PlaneChain plane_chain(int32_t Z, int32_t S, unsigned seed) {
  PlaneChain c;
  c.n = Z * S * S;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.02, 0.2);
  auto at = [S](int32_t z, int32_t x, int32_t y) { return (z * S + x) * S + y; };
  for (int32_t z = 0; z < Z; ++z)
    for (int32_t x = 0; x < S; ++x)
      for (int32_t y = 0; y < S; ++y) {
        std::vector<std::pair<int32_t, double>> row;
        double out = 0.0;
        auto add = [&](int32_t j) {
          const double p = u(rng);
          row.push_back({j, p});
          out += p;
        };
        if (x > 0) add(at(z, x - 1, y));
        if (x + 1 < S) add(at(z, x + 1, y));
        if (y > 0) add(at(z, x, y - 1));
        if (y + 1 < S) add(at(z, x, y + 1));
        if (z > 0) add(at(z - 1, x, y));
        if (z + 1 < Z) add(at(z + 1, x, y));
        row.push_back({at(z, x, y), 1.0 - out});
        std::sort(row.begin(), row.end());
        for (const auto& [j, p] : row) c.col.push_back(j), c.val.push_back(p);
        c.rowptr.push_back(static_cast<int32_t>(c.col.size()));
        c.block_of.push_back(z);
      }
  return c;
}
}  // namespace

TEST(BlockSystem, WideBlocksAreFactorisedSparselyAndSolveToTheirResidual) {
  const PlaneChain c = plane_chain(3, 24, 7);
  const int32_t fixed = 5;
  detail::BlockSystem B =
      detail::block_system(c.n, c.rowptr.data(), c.col.data(), c.val.data(), c.block_of, 1.0, 1.0, fixed);
  ASSERT_EQ(B.blocks.size(), 3u);
  EXPECT_EQ(B.sparse_blocks(), 3);  // band 2 * 24 + 1 = 49 > 32, and the sparse factors far smaller
  const double eps = std::numeric_limits<double>::epsilon();
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (const detail::BlockLU& L : B.blocks) {
    ASSERT_TRUE(L.is_sparse());
    EXPECT_LT(L.storage(), static_cast<int64_t>(L.size) * L.w() / 2);
    // the block as a dense matrix (rows of B inside the block)
    Eigen::MatrixXd D = Eigen::MatrixXd::Zero(L.size, L.size);
    for (int32_t j = L.start; j < L.start + L.size; ++j)
      for (int32_t e = B.lo_end[j]; e < B.up_begin[j]; ++e) D(j - L.start, B.ci[e] - L.start) += B.v[e];
    Eigen::VectorXd b(L.size);
    for (int32_t i = 0; i < L.size; ++i) b[i] = u(rng);
    std::vector<double> x(b.data(), b.data() + L.size);
    L.solve(x.data());
    const Eigen::VectorXd xs = Eigen::Map<const Eigen::VectorXd>(x.data(), L.size);
    // The stored factors as dense matrices, in the block's AMD order (perm[new] = old)
    const detail::SparseLU& F = L.sparse;
    ASSERT_EQ(F.lx.size(), F.ri.size());  // kept in single precision (more than one block)
    ASSERT_TRUE(F.lxd.empty());
    Eigen::MatrixXd Lf = Eigen::MatrixXd::Identity(L.size, L.size), Uf = Eigen::MatrixXd::Zero(L.size, L.size);
    for (int32_t j = 0; j < L.size; ++j) {
      Uf(j, j) = 1.0 / F.inv_diag[j];
      for (int32_t e = F.cp[j]; e < F.cp[j + 1]; ++e) {
        Lf(F.ri[e], j) = static_cast<double>(F.lx[e]);
        Uf(j, F.ri[e]) = static_cast<double>(F.ux[e]);
      }
    }
    Eigen::MatrixXd Dp(L.size, L.size);
    for (int32_t a = 0; a < L.size; ++a)
      for (int32_t c2 = 0; c2 < L.size; ++c2) Dp(a, c2) = D(F.perm[a], F.perm[c2]);
    const Eigen::MatrixXd LU = Lf.cwiseAbs() * Uf.cwiseAbs();
    // the factors are D's (LU without pivoting of a column diagonally dominant matrix needs
    // none), formed in double and stored in single precision: each entry of L and U within
    // u_f = 2^-24 of its double value, so Lf Uf within (2 u_f + u_f^2) |L||U| of D, plus the
    // double rounding of the elimination's sums and of this product (gamma_n, n the block's
    // size: no sum has more terms)
    const double uf = std::ldexp(1.0, -24);
    const double gamma = 2.0 * L.size * eps;
    const Eigen::MatrixXd E = (Lf * Uf - Dp).cwiseAbs();
    for (int32_t a = 0; a < L.size; ++a)
      for (int32_t c2 = 0; c2 < L.size; ++c2)
        ASSERT_LE(E(a, c2), (2.0 * uf + uf * uf + 2.0 * gamma) * LU(a, c2) + 1e-300) << a << "," << c2;
    // the solve with them: (Lf Uf + dF) x = b with |dF| <= gamma |Lf||Uf| (Higham, "Accuracy and
    // Stability of Numerical Algorithms", 8.1, 9.3), so D's residual within (E + gamma |L||U|) |x|
    // (in the block's order); the forward error then within ||D^-1|| of it
    Eigen::VectorXd xp(L.size), bp(L.size);
    for (int32_t a = 0; a < L.size; ++a) xp[a] = xs[F.perm[a]], bp[a] = b[F.perm[a]];
    const Eigen::VectorXd bound_each = (E + gamma * LU) * xp.cwiseAbs() + gamma * bp.cwiseAbs();
    const Eigen::VectorXd res = (Dp * xp - bp).cwiseAbs();
    for (int32_t a = 0; a < L.size; ++a) ASSERT_LE(res[a], 2.0 * bound_each[a]) << a;
    const double backward = 2.0 * bound_each.maxCoeff();
    const Eigen::MatrixXd Dinv = D.inverse();
    const Eigen::VectorXd xr = Dinv * b;
    const double inv_norm = Dinv.cwiseAbs().rowwise().sum().maxCoeff();
    EXPECT_LE((xs - xr).cwiseAbs().maxCoeff(), 2.0 * inv_norm * backward);
  }
}

namespace {
/// A band block's stored LU factors as dense matrices: L with its unit diagonal, U with its
/// diagonal as the solves apply it (1 / inv_diag), the other entries from the single-precision
/// factors, or the double ones where those are kept (a system of one block).
std::pair<Eigen::MatrixXd, Eigen::MatrixXd> dense_band_factors(const detail::BlockLU& L) {
  Eigen::MatrixXd Lf = Eigen::MatrixXd::Identity(L.size, L.size), Uf = Eigen::MatrixXd::Zero(L.size, L.size);
  for (int32_t i = 0; i < L.size; ++i)
    for (int32_t j = std::max(0, i - L.p); j <= std::min(L.size - 1, i + L.q); ++j) {
      const size_t at = static_cast<size_t>(i) * L.w() + (j - i + L.p);
      (j < i ? Lf : Uf)(i, j) = j == i ? 1.0 / L.inv_diag[i] : L.f.empty() ? L.a[at] : static_cast<double>(L.f[at]);
    }
  return {Lf, Uf};
}
}  // namespace

TEST(BlockSystem, BandFactorsAreKeptInSinglePrecisionAndSolveToTheirResidual) {
  const PlaneChain c = plane_chain(3, 10, 5);  // bands of 2 * 10 + 1 = 21 entries a row: band factors
  detail::BlockSystem B =
      detail::block_system(c.n, c.rowptr.data(), c.col.data(), c.val.data(), c.block_of, 1.0, 1.0, 5);
  ASSERT_EQ(B.blocks.size(), 3u);
  const double eps = std::numeric_limits<double>::epsilon(), uf = std::ldexp(1.0, -24);
  for (const detail::BlockLU& L : B.blocks) {
    ASSERT_FALSE(L.is_sparse());
    ASSERT_TRUE(L.a.empty() && !L.f.empty());  // the double LU released, the single one kept
    Eigen::MatrixXd D = Eigen::MatrixXd::Zero(L.size, L.size);
    for (int32_t j = L.start; j < L.start + L.size; ++j)
      for (int32_t e = B.lo_end[j]; e < B.up_begin[j]; ++e) D(j - L.start, B.ci[e] - L.start) += B.v[e];
    // the diagonal of U is applied as inv_diag (double), the rest from the single factors
    const auto [Lf, Uf] = dense_band_factors(L);
    // as the sparse factors (above): Lf Uf within (2 u_f + u_f^2 + 2 gamma_n) |L||U| of D, the
    // solve's residual within (E + gamma_n |L||U|) |x| + gamma_n |b|
    const double gamma = 2.0 * L.size * eps;
    const Eigen::MatrixXd LU = Lf.cwiseAbs() * Uf.cwiseAbs(), E = (Lf * Uf - D).cwiseAbs();
    for (int32_t a = 0; a < L.size; ++a)
      for (int32_t c2 = 0; c2 < L.size; ++c2)
        ASSERT_LE(E(a, c2), (2.0 * uf + uf * uf + 2.0 * gamma) * LU(a, c2) + 1e-300) << a << "," << c2;
    Eigen::VectorXd b(L.size);
    for (int32_t i = 0; i < L.size; ++i) b[i] = std::cos(0.3 * i + L.start);
    std::vector<double> x(b.data(), b.data() + L.size);
    L.solve(x.data());
    const Eigen::VectorXd xs = Eigen::Map<const Eigen::VectorXd>(x.data(), L.size);
    const Eigen::VectorXd bound = (E + gamma * LU) * xs.cwiseAbs() + gamma * b.cwiseAbs();
    const Eigen::VectorXd res = (D * xs - b).cwiseAbs();
    for (int32_t a = 0; a < L.size; ++a) ASSERT_LE(res[a], 2.0 * bound[a]) << a;
  }
  // one block: the factors stay in double, and the block solve is the exact one: its residual
  // within the double-precision bound of LU without pivoting of a column diagonally dominant
  // matrix (growth <= 2; Higham 9.3), which single-precision factors (residual ~1e-8) exceed
  std::vector<int32_t> one(static_cast<size_t>(c.n), 0);
  detail::BlockSystem S = detail::block_system(c.n, c.rowptr.data(), c.col.data(), c.val.data(), one, 1.0, 1.0, 5);
  ASSERT_EQ(S.blocks.size(), 1u);
  const detail::BlockLU& O = S.blocks[0];
  ASSERT_TRUE(O.f.empty() && O.sparse.lx.empty());
  ASSERT_TRUE(O.is_sparse() ? O.sparse.lxd.size() == O.sparse.ri.size() : !O.a.empty());
  Eigen::MatrixXd D = Eigen::MatrixXd::Zero(O.size, O.size);
  for (int32_t j = 0; j < O.size; ++j)
    for (int32_t e = S.lo_end[j]; e < S.up_begin[j]; ++e) D(j, S.ci[e]) += S.v[e];
  Eigen::VectorXd b(O.size);
  for (int32_t i = 0; i < O.size; ++i) b[i] = std::cos(0.3 * i);
  std::vector<double> x(b.data(), b.data() + O.size);
  O.solve(x.data());
  const Eigen::VectorXd xs = Eigen::Map<const Eigen::VectorXd>(x.data(), O.size);
  const double per_row = O.is_sparse() ? 2.0 * static_cast<double>(O.sparse.entries()) / O.size + 1.0 : O.w();
  const double anorm = D.cwiseAbs().rowwise().sum().maxCoeff();
  EXPECT_LE((D * xs - b).cwiseAbs().maxCoeff(),
            4.0 * (2.0 * per_row + 1.0) * eps * (anorm * xs.cwiseAbs().maxCoeff() + b.cwiseAbs().maxCoeff()));
}

TEST(BlockSystem, TridiagonalBlocksSolveToTheirResidual) {
  // Tridiagonal blocks (one modulator state: a queue's levels) take each row from the row two
  // before it (two interleaved chains); the result must still solve the stored factors'
  // system to the bound of the row-by-row substitution (as above: L U within the factors'
  // rounding of D, the residual within (E + gamma |L||U|) |x| + gamma |b|), in single and in
  // double precision, on every size the two chains split differently (even, odd, 2 and 3 rows)
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.02, 0.3);
  const double eps = std::numeric_limits<double>::epsilon();
  for (bool exact : {false, true})
    for (int32_t size : {2, 3, 4, 5, 30, 31}) {
      detail::BlockLU L;
      L.size = size, L.p = 1, L.q = 1;
      L.a.assign(static_cast<size_t>(size) * 3, 0.0);
      Eigen::MatrixXd D = Eigen::MatrixXd::Zero(size, size);
      for (int32_t i = 0; i < size; ++i) {
        if (i > 0) D(i, i - 1) = -u(rng);
        if (i + 1 < size) D(i, i + 1) = -u(rng);
      }
      for (int32_t j = 0; j < size; ++j) D(j, j) = 0.05 + D.col(j).cwiseAbs().sum();  // column dominant
      for (int32_t i = 0; i < size; ++i)
        for (int32_t j = std::max(0, i - 1); j <= std::min(size - 1, i + 1); ++j) L.at(i, j) = D(i, j);
      L.factor(exact);
      ASSERT_EQ(L.f.empty(), exact);
      const auto [Lf, Uf] = dense_band_factors(L);
      const double uf = exact ? 0.0 : std::ldexp(1.0, -24), gamma = 2.0 * size * eps;
      const Eigen::MatrixXd LU = Lf.cwiseAbs() * Uf.cwiseAbs(), E = (Lf * Uf - D).cwiseAbs();
      ASSERT_LE((E - (2.0 * uf + uf * uf + 2.0 * gamma) * LU).maxCoeff(), 1e-300) << size;
      for (int k = 0; k < 3; ++k) {
        Eigen::VectorXd b(size);
        for (int32_t i = 0; i < size; ++i) b[i] = k == 0 ? 1.0 : std::cos(0.7 * i * k + 0.2);
        std::vector<double> x(b.data(), b.data() + size);
        L.solve(x.data());
        const Eigen::VectorXd xs = Eigen::Map<const Eigen::VectorXd>(x.data(), size);
        const Eigen::VectorXd bound = (E + gamma * LU) * xs.cwiseAbs() + gamma * b.cwiseAbs();
        const Eigen::VectorXd res = (D * xs - b).cwiseAbs();
        for (int32_t a = 0; a < size; ++a) ASSERT_LE(res[a], 2.0 * bound[a]) << size << " " << exact << " " << a;
      }
    }
}

TEST(BlockSystem, AnotherFixedStateRefactorisesOnlyTheBlocksItChanges) {
  const PlaneChain c = plane_chain(4, 6, 3);  // bands of 13: banded blocks
  const int32_t k1 = 2, k2 = 3 * 36 + 7;      // in planes 0 and 3
  detail::ReusedBlocks reuse;
  {
    detail::BlockSystem first = detail::block_system(c.n, c.rowptr.data(), c.col.data(), c.val.data(), c.block_of,
                                                     1.0, 1.0, k1, 0, 1.0, 1.0);
    reuse.blocks = std::move(first.blocks);
    reuse.K = first.K;
    reuse.order = detail::hash_indices(first.perm);
  }
  const detail::BlockSystem again = detail::block_system(c.n, c.rowptr.data(), c.col.data(), c.val.data(),
                                                         c.block_of, 1.0, 1.0, k2, 0, 1.0, 1.0, &reuse);
  EXPECT_EQ(reuse.taken, 2);  // planes 1 and 2 hold neither fixed state
  const detail::BlockSystem fresh = detail::block_system(c.n, c.rowptr.data(), c.col.data(), c.val.data(),
                                                         c.block_of, 1.0, 1.0, k2, 0, 1.0, 1.0);
  std::vector<double> r(static_cast<size_t>(c.n)), z1(r.size()), z2(r.size());
  for (int32_t i = 0; i < c.n; ++i) r[i] = std::sin(1.0 + i);
  again.precond(r.data(), z1.data());
  fresh.precond(r.data(), z2.data());
  EXPECT_EQ(z1, z2);  // the same factors of the same blocks, applied in the same order: bitwise
  // a reuse from another block order takes nothing
  detail::ReusedBlocks other;
  other.blocks = fresh.blocks;
  other.K = fresh.K;
  other.order = detail::hash_indices(fresh.perm) + 1;
  detail::block_system(c.n, c.rowptr.data(), c.col.data(), c.val.data(), c.block_of, 1.0, 1.0, k1, 0, 1.0, 1.0,
                       &other);
  EXPECT_EQ(other.taken, 0);
}

// ------------------------------------------------------------------ level-scheduled block sweeps

namespace {
/// Restores the thread setting on scope exit.
struct ThreadSetting {
  int old;
  explicit ThreadSetting(int n) : old(set_num_threads(n)) {}
  ~ThreadSetting() { set_num_threads(old); }
};
}  // namespace

TEST(GaussSeidel, NormaliseIsTheSameOnOneAndTwoThreadsAndAnUnnormalisedSweepIsTheSweepRescaled) {
  // 300,007 entries (above kParallelLoopItems, not a multiple of the sum's blocks) spread
  // over twelve decades
  const int32_t n = 300007;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-12.0, 0.0);
  std::vector<double> x(n);
  for (double& v : x) v = std::pow(10.0, u(rng));
  long double exact = 0.0L;
  for (double v : x) exact += v;
  std::vector<std::vector<double>> out;
  for (int threads : {1, 2}) {
    const ThreadSetting setting(threads);
    out.push_back(x);
    aqm::detail::normalise(out.back());
  }
  ASSERT_EQ(out[0], out[1]);  // bit for bit
  long double sum = 0.0L;
  for (int32_t i = 0; i < n; ++i) {
    // each entry x_i / sum(x) to a few units of round-off (the sum by blocks in double)
    const double want = static_cast<double>(x[i] / exact);
    ASSERT_NEAR(out[0][i], want, 1e-14 * want) << i;
    sum += out[0][i];
  }
  EXPECT_NEAR(static_cast<double>(sum), 1.0, 1e-14);

  // a sweep: P^T of a random chain (rows = "to" states), each state left with probability
  // 1/2; the unnormalised sweep then normalise() equals the normalised sweep bit for bit
  std::vector<std::vector<std::pair<int32_t, double>>> rows(n);
  for (int32_t i = 0; i < n; ++i)
    for (int k = 0; k < 3; ++k) rows[(i + 1 + k * 7919) % n].push_back({i, 1.0 / 6.0});
  std::vector<int32_t> rp{0}, ci;
  std::vector<double> v;
  for (auto& row : rows) {
    std::sort(row.begin(), row.end());
    for (auto [c, p] : row) ci.push_back(c), v.push_back(p);
    rp.push_back(static_cast<int32_t>(ci.size()));
  }
  const std::vector<double> exit = aqm::detail::exit_probabilities(n, rp.data(), ci.data(), v.data());
  for (int threads : {1, 2}) {
    const ThreadSetting setting(threads);
    std::vector<double> a = x, b = x;
    aqm::detail::gauss_seidel_sweep(n, rp.data(), ci.data(), v.data(), exit.data(), a, true);
    aqm::detail::gauss_seidel_sweep(n, rp.data(), ci.data(), v.data(), exit.data(), b, false);
    EXPECT_NE(a, b) << threads;
    aqm::detail::normalise(b);
    EXPECT_EQ(a, b) << threads;
  }
}

TEST(BlockSweeps, RowsOfBAreIMinusMTransposedInBlockOrderHoweverTheBlocksLie) {
  // B = a I - b M^T in block order, from a dense M written here, for blocks whose states lie
  // together in M's numbering (M's rows read in block order) and for blocks whose states lie
  // 100 apart (M's rows read in M's own order, the columns then sorted): every row of B is the
  // dense row's nonzeros with the diagonal, in increasing column order.  A few rows are fed
  // from 60 states (longer than the insertion sort's rows).
  const int32_t n = 2000;
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int32_t> pick(0, n - 1);
  std::uniform_real_distribution<double> u(0.01, 0.2);
  std::vector<std::vector<std::pair<int32_t, double>>> rows(n);
  for (int32_t i = 0; i < n; ++i) {
    std::vector<int32_t> to{i + 1 < n ? i + 1 : 0, pick(rng), pick(rng)};
    if (i % 3 == 0) to.push_back(i);  // a stored M_ii
    if (i % 40 == 0) to.push_back(7);  // row 7 of M^T fed from many states
    std::sort(to.begin(), to.end());
    to.erase(std::unique(to.begin(), to.end()), to.end());
    for (int32_t j : to) rows[i].push_back({j, u(rng)});
  }
  std::vector<int32_t> rp{0}, ci;
  std::vector<double> v;
  for (const auto& r : rows) {
    for (auto [j, x] : r) ci.push_back(j), v.push_back(x);
    rp.push_back(static_cast<int32_t>(ci.size()));
  }
  const double a = 1.0, b = 0.5;
  for (int layout : {0, 1}) {
    std::vector<int32_t> block_of(n);
    for (int32_t i = 0; i < n; ++i) block_of[i] = layout == 0 ? i / 20 : i % 100;
    const detail::BlockSystem B = detail::block_system(n, rp.data(), ci.data(), v.data(), block_of, a, b, -1);
    // the dense oracle, in block order
    std::vector<std::map<int32_t, double>> want(n);
    for (int32_t J = 0; J < n; ++J) want[J][J] = a;
    for (int32_t i = 0; i < n; ++i)
      for (auto [j, x] : rows[i]) want[B.inv[j]][B.inv[i]] += -b * x;
    for (int32_t J = 0; J < n; ++J) {
      ASSERT_EQ(B.rp[J + 1] - B.rp[J], static_cast<int32_t>(want[J].size())) << "layout " << layout << " row " << J;
      int32_t e = B.rp[J];
      for (auto [I, x] : want[J]) {
        ASSERT_EQ(B.ci[e], I) << "layout " << layout << " row " << J;
        ASSERT_EQ(B.v[e], x) << "layout " << layout << " row " << J;  // each a single product, or a - b M_jj
        ++e;
      }
    }
  }
}

TEST(BlockSweeps, LevelsOfAHandMadeBlockPattern) {
  // 6 blocks of 2 states; M (rows = from-state) moves between blocks along the edges below,
  // inside each block between its two states, and stays with the rest of each row.  Row J of
  // B = I - M^T / 2 has an entry in a column of block I when M moves from I to J.
  //   forward (I < J):  0->1, 0->2, 1->3, 2->3, 3->5, 4->5
  //   backward (I > J): 5->0, 3->2, 2->1
  const std::vector<std::pair<int, int>> edges{{0, 1}, {0, 2}, {1, 3}, {2, 3}, {3, 5}, {4, 5}, {5, 0}, {3, 2}, {2, 1}};
  const int32_t n = 12;
  std::vector<std::vector<std::pair<int32_t, double>>> rows(n);
  for (int32_t s = 0; s < n; ++s) rows[s].push_back({s ^ 1, 0.1});  // the block's other state
  for (auto [from, to] : edges) rows[2 * from + 1].push_back({2 * to, 0.1});
  std::vector<int32_t> rp{0}, col, block_of(n);
  std::vector<double> val;
  for (int32_t s = 0; s < n; ++s) {
    double out = 0.0;
    for (auto [j, v] : rows[s]) out += v;
    rows[s].push_back({s, 1.0 - out});
    std::sort(rows[s].begin(), rows[s].end());
    for (auto [j, v] : rows[s]) col.push_back(j), val.push_back(v);
    rp.push_back(static_cast<int32_t>(col.size()));
    block_of[s] = s / 2;
  }
  const detail::BlockSystem B = detail::block_system(n, rp.data(), col.data(), val.data(), block_of, 1.0, 0.5, -1);
  EXPECT_EQ(B.forward_levels.level, (std::vector<int32_t>{0, 1, 1, 2, 0, 3}));
  EXPECT_EQ(B.forward_levels.ptr, (std::vector<int32_t>{0, 2, 4, 5, 6}));
  EXPECT_EQ(B.forward_levels.block, (std::vector<int32_t>{0, 4, 1, 2, 3, 5}));
  EXPECT_EQ(B.backward_levels.level, (std::vector<int32_t>{1, 2, 1, 0, 0, 0}));
  EXPECT_EQ(B.backward_levels.ptr, (std::vector<int32_t>{0, 3, 5, 6}));
  EXPECT_EQ(B.backward_levels.block, (std::vector<int32_t>{3, 4, 5, 0, 2, 1}));
  // six tiny blocks: no gain worth a barrier per level, the rule keeps the sequential loop
  EXPECT_FALSE(B.forward_levels.parallel);
  EXPECT_FALSE(B.backward_levels.parallel);
}

namespace {
/// A count-spacing RED chain: blocks (count, avg) with the queue inside, a block depending on
/// the blocks of the count before it and of lower avg (and a drop resetting the count from
/// every value), and its stationary system with state 0 fixed.
QueueChain small_count_chain() {
  Model m = test::geo_model(12, 0.45, 0.5);
  m.aqm.drop = DropFunction::red(2, 6, 0.3);
  m.aqm.w = 0.3;
  m.grid.k = 2;
  m.aqm.spacing = Spacing::Count;
  return build_chain(m);
}

detail::BlockSystem count_chain_system(const QueueChain& c) {
  const MarkovOperator op(c);
  return detail::block_system(c.n, c.rowptr.data(), c.col.data(), c.val.data(), op.block_partition(), 1.0, 1.0, 0, 0,
                              1.0);
}
}  // namespace

TEST(BlockSweeps, TwoLevelPreconditionerIsTheCoarseCorrectionThenTheBackwardThenTheForwardSweep) {
  // The two-level preconditioner: the coarse correction C = P A_c^{-1} R (A_c = R B P), then
  // the symmetric block Gauss-Seidel preconditioner on the residual it leaves, backward sweep
  // first:  M^{-1} = C + M_f D M_b (I - B C),  M_f = (D + L)^{-1}, M_b = (D + U')^{-1}, D the
  // blocks as their stored factors multiply out (with D the blocks of B, its error propagation
  // is I - M^{-1} B = (I - M_f B) (I - M_b B) (I - C B)).  Checked against dense matrices formed
  // here from B's entries (L and U' as the sweeps read them), the factors and the coarse space;
  // the other order (forward sweep, coarse correction, backward sweep) is far from it.
  Model m = test::geo_model(5, 0.45, 0.5);  // small_count_chain's kind, small enough for dense inverses
  m.aqm.drop = DropFunction::red(1, 4, 0.5);
  m.aqm.w = 0.3;
  m.grid.k = 2;
  m.aqm.spacing = Spacing::Count;
  const QueueChain c = build_chain(m);
  detail::BlockSystem B = count_chain_system(c);
  const int32_t n = B.n, G = 6;
  ASSERT_GT(B.blocks.size(), 20u);
  std::vector<int32_t> group_of(static_cast<size_t>(n));
  std::vector<double> weight(static_cast<size_t>(n));
  for (int32_t s = 0; s < n; ++s) group_of[s] = (s / 7) % G, weight[s] = 1.0 + 0.5 * std::sin(0.37 * s);
  ASSERT_TRUE(B.set_coarse(group_of, G, weight));
  Eigen::MatrixXd A = Eigen::MatrixXd::Zero(n, n), Lo = A, Up = A, D = A, P = Eigen::MatrixXd::Zero(n, G),
                  R = Eigen::MatrixXd::Zero(G, n);
  std::vector<int32_t> block(static_cast<size_t>(n));
  for (int32_t k = 0; k < static_cast<int32_t>(B.blocks.size()); ++k)
    for (int32_t j = B.blocks[k].start; j < B.blocks[k].start + B.blocks[k].size; ++j) block[j] = k;
  for (int32_t j = 0; j < n; ++j)
    for (int32_t e = B.rp[j]; e < B.rp[j + 1]; ++e) {
      A(j, B.ci[e]) += B.v[e];
      if (block[B.ci[e]] < block[j] && B.lrp.empty()) Lo(j, B.ci[e]) += B.v[e];
      if (block[B.ci[e]] > block[j] && e < B.up_end[j] && B.urp.empty()) Up(j, B.ci[e]) += B.v[e];
    }
  // the sweeps read L and U' from their single-precision copies where there are copies
  for (int32_t j = 0; j < n && !B.lrp.empty(); ++j)
    for (int32_t e = B.lrp[j]; e < B.lrp[j + 1]; ++e) Lo(j, B.lci[e]) += static_cast<double>(B.lv[e]);
  for (int32_t j = 0; j < n && !B.urp.empty(); ++j)
    for (int32_t e = B.urp[j]; e < B.urp[j + 1]; ++e) Up(j, B.uci[e]) += static_cast<double>(B.uv[e]);
  for (const detail::BlockLU& L : B.blocks) {
    ASSERT_FALSE(L.is_sparse());
    const auto [Lf, Uf] = dense_band_factors(L);
    D.block(L.start, L.start, L.size, L.size) = Lf * Uf;
  }
  for (int32_t i = 0; i < n; ++i) P(i, B.coarse.group[i]) = B.coarse.w[i], R(B.coarse.group[i], i) = 1.0;
  const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(n, n), Ac = R * A * P;
  const Eigen::MatrixXd C = P * Ac.inverse() * R, Mf = (D + Lo).inverse(), Mb = (D + Up).inverse();
  const Eigen::MatrixXd M = C + Mf * D * Mb * (I - A * C);
  const Eigen::MatrixXd T = Mf + C * (I - A * Mf), other = T + Mb * (I - A * T);  // forward, coarse, backward
  auto norm = [](const Eigen::MatrixXd& m) { return m.cwiseAbs().rowwise().sum().maxCoeff(); };
  // rounding: the coarse solve's forward error (cond(A_c) eps, relative), carried through the
  // sweeps, and each sweep's own (a few eps of the products it forms, entry by entry)
  const double eps = std::numeric_limits<double>::epsilon();
  const double cond = norm(Ac) * norm(Ac.inverse());
  int32_t widest = 0;
  for (int32_t j = 0; j < n; ++j) widest = std::max(widest, B.rp[j + 1] - B.rp[j]);
  for (int k = 0; k < 3; ++k) {
    Eigen::VectorXd r(n);
    for (int32_t i = 0; i < n; ++i) r[i] = k == 0 ? 1.0 : std::cos(0.61 * i * k) + 0.3;
    std::vector<double> z(static_cast<size_t>(n), 0.0);
    B.precond(r.data(), z.data());
    const Eigen::VectorXd got = Eigen::Map<const Eigen::VectorXd>(z.data(), n), want = M * r;
    const double tol = 4.0 * widest * eps *
                       (cond * (C * r).cwiseAbs().maxCoeff() * (1.0 + norm(Mf * D * Mb * A)) +
                        norm(Mf) * norm(D) * norm(Mb) * ((I - A * C) * r).cwiseAbs().maxCoeff());
    EXPECT_LE((got - want).cwiseAbs().maxCoeff(), tol) << "vector " << k;
    EXPECT_GT((got - other * r).cwiseAbs().maxCoeff(), 1e3 * tol) << "vector " << k;  // a bound that tells them apart
  }
}

TEST(BlockSweeps, ByLevelsEqualsTheSequentialSweepBitForBit) {
  // Bitwise equality holds because each block runs the same out-of-line function (solve_block, correct_block) on
  // the same operands in both schedules: a block's level is above every block it reads, so
  // every value it reads is final when it runs, as in the sequential order, and it writes only
  // its own entries.
  const QueueChain c = small_count_chain();
  detail::BlockSystem B = count_chain_system(c);
  const int32_t nb = static_cast<int32_t>(B.blocks.size());
  // a nontrivial schedule: fewer levels than blocks, yet more than one
  ASSERT_GT(B.forward_levels.count(), 1);
  ASSERT_LT(B.forward_levels.count(), nb);
  ASSERT_GT(B.backward_levels.count(), 1);
  ASSERT_LT(B.backward_levels.count(), nb);
  std::vector<double> r(static_cast<size_t>(c.n));
  for (int32_t i = 0; i < c.n; ++i) r[i] = std::sin(1.0 + i) + (i % 7 == 0 ? 2.0 : 0.0);
  auto apply = [&](detail::BlockSystem::Schedule s) {
    B.schedule = s;
    std::vector<std::vector<double>> out(3, std::vector<double>(static_cast<size_t>(c.n), 0.0));
    B.forward_sweep(r.data(), out[0].data());
    B.backward_sweep(r.data(), out[1].data());
    B.precond(r.data(), out[2].data());
    return out;
  };
  const auto sequential = apply(detail::BlockSystem::Schedule::Sequential);
  for (int threads : {1, 2}) {
    const ThreadSetting setting(threads);
    const auto levels = apply(detail::BlockSystem::Schedule::Levels);
    for (int k = 0; k < 3; ++k)
      for (int32_t i = 0; i < c.n; ++i) ASSERT_EQ(levels[k][i], sequential[k][i]) << "sweep " << k << " state " << i << " threads " << threads;
  }
  // and the sweep does solve its triangular system (D + L) z = r (both schedules could share a
  // mistake): normwise, the residual of LU without pivoting of a column diagonally dominant
  // block and its two triangular solves, plus the off-block products, is at most
  // 3 gamma_k || |D + L| ||_inf ||z||_inf, k the entries one row reads (the off-block part and
  // twice the band), gamma_k = k eps / (1 - k eps) ("Accuracy and Stability of Numerical
  // Algorithms", Higham, chapters 8-9); the factors are kept in single precision (more than
  // one block), each entry within u = 2^-24 of its double value, which adds at most
  // (2 u + u^2) / (1 - u)^2 |L||U| |z| row by row (L, U the stored factors)
  const auto& z = sequential[0];
  double lu_term = 0.0;
  for (const detail::BlockLU& L : B.blocks) {
    ASSERT_FALSE(L.is_sparse());
    ASSERT_TRUE(L.a.empty() && !L.f.empty());  // kept in single precision
    const double uf = std::ldexp(1.0, -24);
    const int wd = L.w();
    auto f = [&](int32_t i, int32_t j) { return std::abs(static_cast<double>(L.f[static_cast<size_t>(i) * wd + (j - i + L.p)])); };
    std::vector<double> uz(static_cast<size_t>(L.size));  // |U| |z| of the block
    for (int32_t i = 0; i < L.size; ++i)
      for (int32_t j = i; j <= std::min(L.size - 1, i + L.q); ++j) uz[i] += f(i, j) * std::abs(z[L.start + j]);
    for (int32_t i = 0; i < L.size; ++i) {
      double row = uz[i];  // L's unit diagonal
      for (int32_t j = std::max(0, i - L.p); j < i; ++j) row += f(i, j) * uz[j];
      lu_term = std::max(lu_term, (2.0 * uf + uf * uf) / ((1.0 - uf) * (1.0 - uf)) * row);
    }
  }
  // L's entries, read from the sweeps' single-precision copy when there is one (copy_share),
  // each within u of its value: at most u |L| |z| more in a row
  const bool copied = !B.lrp.empty();
  double copy_term = 0.0, res = 0.0, norm_a = 0.0, norm_z = 0.0;
  int32_t k = 0;
  for (int32_t j = 0; j < c.n; ++j) {
    double s = 0.0, a = 0.0, lz = 0.0;
    for (int32_t e = B.rp[j]; e < B.lo_end[j]; ++e) lz += std::abs(B.v[e] * z[B.ci[e]]);
    if (copied) copy_term = std::max(copy_term, std::ldexp(1.0, -24) * lz);
    for (int32_t e = B.rp[j]; e < B.up_begin[j]; ++e) s += B.v[e] * z[B.ci[e]], a += std::abs(B.v[e]);
    res = std::max(res, std::abs(s - r[j]));
    norm_a = std::max(norm_a, a);
    norm_z = std::max(norm_z, std::abs(z[j]));
    k = std::max(k, B.lo_end[j] - B.rp[j] + 2 * B.band_width());
  }
  const double eps = std::numeric_limits<double>::epsilon();
  EXPECT_LE(res, 3.0 * k * eps / (1.0 - k * eps) * norm_a * norm_z + lu_term + copy_term);
  EXPECT_GT(norm_z, 0.0);
}

TEST(BlockSweeps, CopiesOfLAndUAreTheRowsInSinglePrecision) {
  // The sweeps read L and U' from single-precision copies where copy_share allows: bit for bit
  // the sweeps of the same system, without copies, whose L and U' entries in B are rounded to
  // single precision (the same products, added in the same order).
  const QueueChain c = small_count_chain();
  detail::BlockSystem B = count_chain_system(c);
  int64_t lower = 0, upper = 0;
  for (int32_t j = 0; j < c.n; ++j) lower += B.lo_end[j] - B.rp[j], upper += B.up_end[j] - B.up_begin[j];
  const double entries = static_cast<double>(B.ci.size());
  ASSERT_GT(lower, 0);
  ASSERT_GT(upper, 0);
  // the first rule at its bound: a part is copied when it holds at most copy_share of the
  // entries (the second off)
  B.copy_over_blocks = 0.0;
  auto copied_parts = [&](double share) {
    B.copy_share = share;
    B.schedule_levels();
    EXPECT_EQ(B.lci.size(), B.lrp.empty() ? 0u : static_cast<size_t>(lower));
    EXPECT_EQ(B.uci.size(), B.urp.empty() ? 0u : static_cast<size_t>(upper));
    return std::make_pair(!B.lrp.empty(), !B.urp.empty());
  };
  // shares half an entry either side of each part's own (clear of the rounding of share x entries)
  auto share = [&](int64_t count, double half) { return (static_cast<double>(count) + half) / entries; };
  EXPECT_EQ(copied_parts(share(lower, 0.5)), std::make_pair(true, upper <= lower));
  EXPECT_EQ(copied_parts(share(lower, -0.5)), std::make_pair(false, upper < lower));
  EXPECT_EQ(copied_parts(share(upper, 0.5)), std::make_pair(lower <= upper, true));
  EXPECT_EQ(copied_parts(share(upper, -0.5)), std::make_pair(lower < upper, false));
  EXPECT_EQ(copied_parts(0.0), std::make_pair(false, false));
  // the second at its bound: a part is copied when it holds at least copy_over_blocks times the
  // numbers of the blocks' factors (the first off: copy_share 0)
  const double storage = static_cast<double>(B.block_storage());
  ASSERT_GT(storage, 0.0);
  auto over = [&](int64_t count, double half) {
    B.copy_over_blocks = (static_cast<double>(count) + half) / storage;
    return copied_parts(0.0);
  };
  EXPECT_EQ(over(lower, -0.5), std::make_pair(true, upper >= lower));
  EXPECT_EQ(over(lower, 0.5), std::make_pair(false, upper > lower));
  EXPECT_EQ(over(upper, -0.5), std::make_pair(lower >= upper, true));
  EXPECT_EQ(over(upper, 0.5), std::make_pair(lower > upper, false));
  B.copy_over_blocks = 0.0;
  ASSERT_EQ(copied_parts(1.0), std::make_pair(true, true));
  for (int32_t j = 0; j < c.n; ++j) {
    ASSERT_EQ(B.lrp[j + 1] - B.lrp[j], B.lo_end[j] - B.rp[j]);
    for (int32_t e = B.rp[j]; e < B.lo_end[j]; ++e) {
      EXPECT_EQ(B.lci[B.lrp[j] + (e - B.rp[j])], B.ci[e]);
      EXPECT_EQ(B.lv[B.lrp[j] + (e - B.rp[j])], static_cast<float>(B.v[e]));
    }
  }
  detail::BlockSystem rounded = B;
  for (int32_t j = 0; j < c.n; ++j) {
    for (int32_t e = B.rp[j]; e < B.lo_end[j]; ++e) rounded.v[e] = static_cast<float>(B.v[e]);
    for (int32_t e = B.up_begin[j]; e < B.up_end[j]; ++e) rounded.v[e] = static_cast<float>(B.v[e]);
  }
  rounded.copy_share = rounded.copy_over_blocks = 0.0;
  rounded.schedule_levels();
  ASSERT_TRUE(rounded.lrp.empty() && rounded.urp.empty());
  std::vector<double> r(static_cast<size_t>(c.n));
  for (int32_t i = 0; i < c.n; ++i) r[i] = std::cos(0.5 + i) + (i % 5 == 0 ? 1.5 : 0.0);
  for (auto schedule : {detail::BlockSystem::Schedule::Sequential, detail::BlockSystem::Schedule::Levels}) {
    std::vector<std::vector<double>> z(6, std::vector<double>(static_cast<size_t>(c.n), 0.0));
    B.schedule = rounded.schedule = schedule;
    B.forward_sweep(r.data(), z[0].data());
    rounded.forward_sweep(r.data(), z[1].data());
    B.backward_sweep(r.data(), z[2].data());
    rounded.backward_sweep(r.data(), z[3].data());
    B.precond(r.data(), z[4].data());
    rounded.precond(r.data(), z[5].data());
    for (int k = 0; k < 3; ++k)
      for (int32_t i = 0; i < c.n; ++i) ASSERT_EQ(z[2 * k][i], z[2 * k + 1][i]) << "sweep " << k << " state " << i;
  }
}

TEST(BlockSweeps, TheFarEntriesRuleAtItsBounds) {
  // 12 states, one block each; every state i > 0 resets to 0 (M_i0 = 0.1) and steps to
  // i + 1, so row 0 of B = I - M^T has U entries in columns 1 .. 11 (distance = column).
  const int32_t n = 12;
  std::vector<int32_t> rp{0}, col, block_of(n);
  std::vector<double> val;
  for (int32_t s = 0; s < n; ++s) {
    std::vector<std::pair<int32_t, double>> row;
    if (s > 0) row.push_back({0, 0.1});
    if (s + 1 < n) row.push_back({s + 1, 0.5});
    double out = 0.0;
    for (auto [j, v] : row) out += v;
    row.push_back({s, 1.0 - out});
    std::sort(row.begin(), row.end());
    for (auto [j, v] : row) col.push_back(j), val.push_back(v);
    rp.push_back(static_cast<int32_t>(col.size()));
    block_of[s] = s;
  }
  detail::BlockSystem B = detail::block_system(n, rp.data(), col.data(), val.data(), block_of, 1.0, 1.0, -1);
  auto first_column_left_out = [&](int32_t far_states, int32_t wide_row) {
    B.far_states = far_states;
    B.wide_row = wide_row;
    B.schedule_levels();
    return B.up_end[0] < B.rp[1] ? B.ci[B.up_end[0]] : -1;
  };
  // far: more than 5 after the row, i.e. columns 6 .. 11 (six entries); column 5 stays
  EXPECT_EQ(first_column_left_out(5, 6), 6);
  EXPECT_EQ(B.up_left_out(), 6);
  EXPECT_EQ(B.up_rows_cut(), 1);
  EXPECT_EQ(first_column_left_out(5, 7), -1);  // six far entries: below a width of seven
  EXPECT_EQ(B.up_left_out(), 0);
  EXPECT_EQ(first_column_left_out(4, 7), 5);  // columns 5 .. 11
  EXPECT_EQ(first_column_left_out(0, 7), -1);  // 0: nothing is left out
  for (int32_t j = 1; j < n; ++j) EXPECT_EQ(B.up_end[j], B.rp[j + 1]);
}

TEST(BlockSweeps, BackwardSweepsLeaveOutTheFarEntriesOfWidelyFedRows) {
  // The count-spacing chain of ByLevelsEqualsTheSequentialSweepBitForBit: a drop resets the
  // count, so a row of the count's first value gathers entries from the blocks of every count.
  const QueueChain c = small_count_chain();
  detail::BlockSystem B = count_chain_system(c);
  // the default rule: nothing of this small chain is 4096 states away
  EXPECT_EQ(B.up_left_out(), 0);
  EXPECT_EQ(B.up_end, std::vector<int32_t>(B.rp.begin() + 1, B.rp.end()));
  const detail::BlockSystem full = B;
  // The rule's bounds taken from the chain, so that both are met exactly somewhere: far_states
  // the median distance of a U entry from its row (an entry exactly that far stays), wide_row
  // the largest number of farther entries in one row (a row with exactly that many is cut,
  // one with fewer is not).
  std::vector<int32_t> dist;
  for (int32_t j = 0; j < c.n; ++j)
    for (int32_t e = B.up_begin[j]; e < B.rp[j + 1]; ++e) dist.push_back(B.ci[e] - j);
  ASSERT_FALSE(dist.empty());
  std::nth_element(dist.begin(), dist.begin() + dist.size() / 2, dist.end());
  const int32_t F = dist[dist.size() / 2];
  std::vector<int32_t> far(static_cast<size_t>(c.n), 0);
  for (int32_t j = 0; j < c.n; ++j)
    far[j] = static_cast<int32_t>(std::count_if(B.ci.begin() + B.up_begin[j], B.ci.begin() + B.rp[j + 1],
                                                [j, F](int32_t col) { return col - j > F; }));
  const int32_t W = *std::max_element(far.begin(), far.end());
  ASSERT_GE(W, 2);
  B.far_states = F;
  B.wide_row = W;
  B.copy_share = 1.0;  // U' (and L) from the copies: zeroed below reads its own copies too
  B.copy_over_blocks = 0.0;  // copy_share alone decides (0 below: nothing copied)
  B.schedule_levels();
  // the entries left out, from the definition: a row's entries more than far_states after it,
  // when it has at least wide_row of them
  int64_t out = 0;
  int32_t rows = 0, kept_with_far = 0;
  for (int32_t j = 0; j < c.n; ++j) {
    const bool cut = far[j] >= W;
    EXPECT_EQ(B.up_end[j], cut ? B.rp[j + 1] - far[j] : B.rp[j + 1]) << "row " << j;
    out += cut ? far[j] : 0;
    rows += cut ? 1 : 0;
    kept_with_far += !cut && far[j] > 0 ? 1 : 0;
  }
  ASSERT_GT(rows, 0);
  ASSERT_GT(kept_with_far, 0);  // rows below the width keep their far entries
  EXPECT_EQ(B.up_left_out(), out);
  EXPECT_EQ(B.up_rows_cut(), rows);
  // Leaving an entry out is the sweep of the same system with that entry zero: bit for bit, in
  // both sweeps that read U (the symmetric preconditioner and the backward sweep), on both schedules.
  detail::BlockSystem zeroed = full;
  for (int32_t j = 0; j < c.n; ++j)
    for (int32_t e = B.up_end[j]; e < B.rp[j + 1]; ++e) zeroed.v[e] = 0.0;
  zeroed.copy_share = 1.0;
  zeroed.copy_over_blocks = 0.0;
  zeroed.schedule_levels();  // v edited: the sweeps' copies of L and U' again
  std::vector<double> r(static_cast<size_t>(c.n));
  for (int32_t i = 0; i < c.n; ++i) r[i] = std::sin(1.0 + i) + (i % 7 == 0 ? 2.0 : 0.0);
  auto apply = [&](detail::BlockSystem& S, detail::BlockSystem::Schedule s) {
    S.schedule = s;
    std::vector<std::vector<double>> z(2, std::vector<double>(static_cast<size_t>(c.n), 0.0));
    S.backward_sweep(r.data(), z[0].data());
    S.precond(r.data(), z[1].data());
    return z;
  };
  for (double share : {1.0, 0.0}) {  // L and U' read from their copies, and from B's rows
    B.copy_share = zeroed.copy_share = share;
    B.schedule_levels();
    zeroed.schedule_levels();
    const auto reference = apply(zeroed, detail::BlockSystem::Schedule::Sequential);
    for (auto s : {detail::BlockSystem::Schedule::Sequential, detail::BlockSystem::Schedule::Levels})
      for (int threads : {1, 2}) {
        const ThreadSetting setting(threads);
        const auto got = apply(B, s);
        for (int k = 0; k < 2; ++k)
          for (int32_t i = 0; i < c.n; ++i)
            ASSERT_EQ(got[k][i], reference[k][i]) << "sweep " << k << " state " << i << " copy_share " << share;
      }
  }
  const auto reference = apply(zeroed, detail::BlockSystem::Schedule::Sequential);
  // and the entries left out did matter: the full sweeps differ
  detail::BlockSystem whole = full;
  const auto with_all = apply(whole, detail::BlockSystem::Schedule::Sequential);
  for (int k = 0; k < 2; ++k) EXPECT_NE(with_all[k], reference[k]) << "sweep " << k;
}

namespace {
/// A random sparse M of n rows above the 50,000 where the transposes split over the threads:
/// 0-6 entries a row at random columns (sorted, distinct), each in (0, 0.1], about half the
/// rows with their diagonal.
struct RandomCsr {
  int32_t n = 60000;
  std::vector<int32_t> rp{0}, col;
  std::vector<double> val;
  RandomCsr() {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> any(0, n - 1), count(0, 6);
    std::uniform_real_distribution<double> u(0.0, 0.1);
    for (int32_t i = 0; i < n; ++i) {
      std::vector<int32_t> c;
      for (int k = count(rng); k > 0; --k) c.push_back(any(rng));
      if (rng() % 2) c.push_back(i);
      std::sort(c.begin(), c.end());
      c.erase(std::unique(c.begin(), c.end()), c.end());
      for (int32_t j : c) col.push_back(j), val.push_back(u(rng) + 1e-3);
      rp.push_back(static_cast<int32_t>(col.size()));
    }
  }
};

/// The oracle of a transpose: its triplets (row j, column i, value), sorted, as CSR of n rows.
struct SortedTriplets {
  std::vector<int32_t> rp, col;
  std::vector<double> val;
  SortedTriplets(int32_t n, std::vector<std::tuple<int32_t, int32_t, double>> t) : rp(static_cast<size_t>(n) + 1, 0) {
    std::sort(t.begin(), t.end());
    for (auto [j, i, v] : t) ++rp[j + 1], col.push_back(i), val.push_back(v);
    for (int32_t j = 0; j < n; ++j) rp[j + 1] += rp[j];
  }
};
}  // namespace

TEST(Operator, TransposeIsTheSortedTripletsOnOneAndTwoThreads) {
  const RandomCsr m;
  // the oracle: the triplets (j, i, value) sorted
  std::vector<std::tuple<int32_t, int32_t, double>> t;
  for (int32_t i = 0; i < m.n; ++i)
    for (int32_t e = m.rp[i]; e < m.rp[i + 1]; ++e) t.emplace_back(m.col[e], i, m.val[e]);
  const SortedTriplets want(m.n, std::move(t));
  for (int threads : {1, 2}) {
    const int old = set_num_threads(threads);
    const TransposedCsr T(CsrOperator(m.n, m.rp.data(), m.col.data(), m.val.data()));
    set_num_threads(old);
    EXPECT_EQ(T.n, m.n);
    EXPECT_EQ(T.rowptr, want.rp) << threads;
    EXPECT_EQ(T.col, want.col) << threads;
    EXPECT_EQ(T.val, want.val) << threads;
  }
}

TEST(Operator, GeneratorTransposeIsTheSortedTripletsOnOneAndTwoThreads) {
  // a generator of 60,000 states: half the rows absorbing (no entry: P_ii = 1 is inserted),
  // the others with 1-6 rates and their diagonal
  const int32_t n = 60000;
  Chain c;
  c.time = TimeKind::Continuous;
  c.n = n;
  c.rowptr = {0};
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> any(0, n - 1), count(1, 6);
  std::uniform_real_distribution<double> u(0.1, 2.0);
  for (int32_t i = 0; i < n; ++i) {
    if (rng() % 2) {
      std::vector<std::pair<int32_t, double>> row;
      for (int k = count(rng); k > 0; --k) {
        const int32_t j = any(rng);
        if (j != i && std::none_of(row.begin(), row.end(), [j](const auto& e) { return e.first == j; }))
          row.push_back({j, u(rng)});
      }
      double out = 0.0;
      for (const auto& e : row) out += e.second;
      row.push_back({i, -out});
      std::sort(row.begin(), row.end());
      for (const auto& [j, v] : row) c.col.push_back(j), c.val.push_back(v);
    }
    c.rowptr.push_back(static_cast<int32_t>(c.col.size()));
  }
  c.space.add("level", n, true, false);
  c.labels = {std::vector<int32_t>(static_cast<size_t>(n))};
  std::iota(c.labels[0].begin(), c.labels[0].end(), 0);
  const MarkovOperator op(c);
  const double lambda = op.rate();
  // the oracle: P = I + G / lambda as sorted triplets (j, i, P_ij)
  std::vector<std::tuple<int32_t, int32_t, double>> t;
  for (int32_t i = 0; i < n; ++i) {
    if (c.rowptr[i] == c.rowptr[i + 1]) t.emplace_back(i, i, 1.0);
    for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e)
      t.emplace_back(c.col[e], i, c.col[e] == i ? 1.0 + c.val[e] / lambda : c.val[e] / lambda);
  }
  const SortedTriplets want(n, std::move(t));
  for (int threads : {1, 2}) {
    const int old = set_num_threads(threads);
    const TransposedCsr T = op.transpose();
    set_num_threads(old);
    EXPECT_EQ(T.rowptr, want.rp) << threads;
    EXPECT_EQ(T.col, want.col) << threads;
    EXPECT_EQ(T.val, want.val) << threads;
  }
}

TEST(BlockSystem, RowsAreTheSameOnOneAndTwoThreadsAndGiveTheProduct) {
  // B = a I - b M^T in the block order, state k fixed (its row the identity's, its column
  // moved to the right-hand side b M(k, .)); blocks of 10 states scattered over the indices
  const RandomCsr m;
  const int32_t n = m.n, k = 12345;
  std::vector<int32_t> block_of(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) block_of[i] = static_cast<int32_t>((static_cast<int64_t>(i) * 7919) % (n / 10));
  const double a = 1.0, b = 0.9;
  std::vector<detail::BlockSystem> S;
  for (int threads : {1, 2}) {
    const int old = set_num_threads(threads);
    S.push_back(detail::block_system(n, m.rp.data(), m.col.data(), m.val.data(), block_of, a, b, k));
    set_num_threads(old);
  }
  EXPECT_EQ(S[0].rp, S[1].rp);
  EXPECT_EQ(S[0].ci, S[1].ci);
  EXPECT_EQ(S[0].v, S[1].v);
  EXPECT_EQ(S[0].b, S[1].b);
  const detail::BlockSystem& B = S[1];
  // every row sorted, with its diagonal
  for (int32_t J = 0; J < n; ++J) {
    int diag = 0;
    for (int32_t e = B.rp[J]; e < B.rp[J + 1]; ++e) {
      if (e > B.rp[J]) ASSERT_LT(B.ci[e - 1], B.ci[e]) << J;
      diag += B.ci[e] == J;
    }
    ASSERT_EQ(diag, 1) << J;
  }
  // B x against the formula, from M's rows (x in the block order)
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> x(static_cast<size_t>(n)), y(static_cast<size_t>(n)), want(static_cast<size_t>(n), 0.0),
      rhs(static_cast<size_t>(n), 0.0);
  for (double& xi : x) xi = u(rng);
  B.matvec(x.data(), y.data());
  for (int32_t J = 0; J < n; ++J) want[J] = J == B.K ? x[J] : a * x[J];
  for (int32_t i = 0; i < n; ++i)
    for (int32_t e = m.rp[i]; e < m.rp[i + 1]; ++e) {
      const int32_t j = m.col[e];
      if (j == k) continue;
      if (i == k)
        rhs[B.inv[j]] = b * m.val[e];
      else
        want[B.inv[j]] -= b * m.val[e] * x[B.inv[i]];
    }
  ASSERT_EQ(B.K, B.inv[k]);
  for (int32_t J = 0; J < n; ++J) {
    EXPECT_NEAR(y[J], want[J], 1e-15 * 8) << J;  // at most 8 terms of size <= 1
    EXPECT_EQ(B.b[J], rhs[J]) << J;
  }
  // with the exact diagonal (row total 1, M divided by 2, as krylov forms it): a - b + b x the
  // row's exits, whatever M_jj is stored
  const double divisor = 2.0;
  std::vector<detail::BlockSystem> E;
  for (int threads : {1, 2}) {
    const int old = set_num_threads(threads);
    E.push_back(detail::block_system(n, m.rp.data(), m.col.data(), m.val.data(), block_of, a, b, k, 0, 1.0, divisor));
    set_num_threads(old);
  }
  EXPECT_EQ(E[0].rp, E[1].rp);
  EXPECT_EQ(E[0].ci, E[1].ci);
  EXPECT_EQ(E[0].v, E[1].v);
  E[1].matvec(x.data(), y.data());
  std::vector<double> exits(static_cast<size_t>(n), 0.0);
  std::fill(want.begin(), want.end(), 0.0);
  for (int32_t i = 0; i < n; ++i)
    for (int32_t e = m.rp[i]; e < m.rp[i + 1]; ++e) {
      const int32_t j = m.col[e];
      if (j == i) continue;
      exits[E[1].inv[i]] += m.val[e] / divisor;
      if (j != k && i != k) want[E[1].inv[j]] -= b * m.val[e] / divisor * x[E[1].inv[i]];
    }
  for (int32_t J = 0; J < n; ++J) {
    const double diag = J == E[1].K ? 1.0 : (a - b) + b * exits[J];
    EXPECT_NEAR(y[J], want[J] + diag * x[J], 1e-15 * 8) << J;
  }
}

TEST(Gmres, BlockGramSchmidtProjectsOutTheBasisForEveryBlockRemainder) {
  // An orthonormal basis (Eigen's QR of a random matrix) and a w with parts along it and off
  // it: block_mgs must leave w - V V^T w and the coefficients V^T w (to the round-off of sums of
  // n products) for every count, so for a last block of 1, 2, 3 and 4 vectors; on a vector long
  // enough for the threaded loops and on a short one.  The same call twice on the short one (one
  // thread) gives the same bits.
  for (const int32_t n : {1000, 120001}) {
    const int m = 11;
    std::mt19937 gen(7);
    std::normal_distribution<double> nd;
    Eigen::MatrixXd A(n, m);
    for (int32_t i = 0; i < n; ++i)
      for (int k = 0; k < m; ++k) A(i, k) = nd(gen);
    const Eigen::MatrixXd Q = Eigen::HouseholderQR<Eigen::MatrixXd>(A).householderQ() * Eigen::MatrixXd::Identity(n, m);
    std::vector<std::vector<double>> V(m, std::vector<double>(static_cast<size_t>(n)));
    for (int k = 0; k < m; ++k)
      for (int32_t i = 0; i < n; ++i) V[k][i] = Q(i, k);
    Eigen::VectorXd w0(n);
    for (int32_t i = 0; i < n; ++i) w0(i) = nd(gen);
    for (int k = 0; k < m; ++k) w0 += (k + 1.0) * Q.col(k);
    for (int count = 1; count <= m; ++count) {
      const Eigen::VectorXd h_ref = Q.leftCols(count).transpose() * w0;
      const Eigen::VectorXd w_ref = w0 - Q.leftCols(count) * h_ref;
      std::vector<double> w(w0.data(), w0.data() + n), h(static_cast<size_t>(count));
      const double norm2 = detail::block_mgs(V, count, w.data(), h.data(), n);
      // each coefficient is a sum of n products whose magnitudes add up to at most |w| (Cauchy-
      // Schwarz): its round-off is within n eps |w|; 64 x that is a wide margin and still far
      // below a term left out (about |w| / sqrt(n))
      const double tol = 64.0 * n * std::numeric_limits<double>::epsilon() * w0.norm();
      for (int k = 0; k < count; ++k) EXPECT_NEAR(h[k], h_ref(k), tol) << "n " << n << " count " << count << " k " << k;
      double err = 0.0;
      for (int32_t i = 0; i < n; ++i) err = std::max(err, std::abs(w[i] - w_ref(i)));
      EXPECT_LE(err, tol) << "n " << n << " count " << count;
      EXPECT_NEAR(norm2, w_ref.squaredNorm(), 2.0 * tol * w0.norm()) << "n " << n << " count " << count;
      if (n > 50000) continue;  // threaded: the thread count may adapt between calls (loop_threads)
      std::vector<double> w2(w0.data(), w0.data() + n), h2(static_cast<size_t>(count));
      const double again = detail::block_mgs(V, count, w2.data(), h2.data(), n);
      EXPECT_EQ(again, norm2);
      EXPECT_EQ(h2, h);
      EXPECT_EQ(w2, w);
    }
  }
}
