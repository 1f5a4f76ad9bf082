// p(t) = p0 exp(t G) by shift-and-invert ("rational") Krylov steps, after van
// den Eshof and Hochbruck, "Preconditioning Lanczos approximations to the matrix
// exponential" (SIAM J. Sci. Comput. 2006) and Moret and Novati, "RD-rational
// approximations of the matrix exponential" (BIT 2004).
//
// Column form, as in expm.cpp: A = G^T, w the current vector (the row vector p
// read as a column).  A step builds an orthonormal basis V_m of the Krylov space
// of (I - gamma A)^{-1} from w by Arnoldi,
//     (I - gamma A)^{-1} V_m = V_{m+1} Htilde_m,
// and takes
//     w(t + tau) ~ beta V_m exp(tau S_m) e_1,   S_m = (I - H_m^{-1}) / gamma,
// (H_m^{-1} approximates (I - gamma A)^{-1} on the space, so S_m approximates A).
// Because the basis does not depend on tau, one basis serves every output time
// it reaches, and the error of the rational approximation depends on tau /
// gamma and m, not on ||A||: the steps are not bounded by the stiffness.
//
// The linear systems (I - gamma A) x = v_j are the row systems
// x (I - gamma G) = v_j: GMRES with the block Gauss-Seidel preconditioner of the
// stationary krylov solver (block_system.hpp), the descriptor's blocks (in_block_partition).
//
// Error estimate of a step of length tau with m basis vectors (L1 norm):
//     est = max(||beta V_m (u_m - [u_{m-1}; 0])||_1, |1^T y_m - 1^T w|) + inner,
// where u_k = exp(tau S_k) e_1: the change from the (m-1)- to the m-vector
// approximation (which bounds the error of the m-vector one when the
// approximations converge), the mass defect (a lower bound on the error, which
// catches an approximation that has decayed altogether), and a bound on the
// effect of the inexact solves.  With residuals s_j = v_j - (I - gamma A) x_j the
// computed basis satisfies V_{m+1} Htilde_m = (I - gamma A)^{-1} (V_m - S_m),
// S_m = [s_1 .. s_m], so y_m = beta V_m u carries the term
// beta (I - gamma A)^{-1} S_m H_m^{-1} u, and (I - gamma A)^{-1} has L1 norm 1:
//     inner = beta sum_j ||s_j||_1 |(H_m^{-1} u)_j|,
// the analogue of the residual-gap bounds of inexact Krylov solvers for linear
// systems (measured against perturbed exact solves: 5 to 15 times the effect).
// The solves' tolerances are relaxed as the coefficients |(H^{-1} u)_j| decay.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>

#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"
#include "aqmchain/threads.hpp"
#include "solvers/block_system.hpp"
#include "solvers/krylov.hpp"
#include "solvers/transient_common.hpp"

namespace aqm {

using namespace transient_detail;

namespace {

constexpr double kEps = std::numeric_limits<double>::epsilon();
/// GMRES restart length of the inner solves.
constexpr int kInnerBasis = 30;
/// A basis that reaches no output time tries steps doubling from its target
/// (short of the output), else halving from it down to this fraction of its shift
/// before it is dropped (a basis serves steps of about gamma to 10 gamma).
constexpr double kPartialFloor = 0.5;
/// The target step grows at most by this factor from one step to the next and is
/// at most this multiple of the gap to the next output (so that gamma stays near
/// the output times' scale).
constexpr double kGrowth = 2.0, kGapMultiple = 10.0;

/// The small-matrix side of a basis of m vectors with the shift gamma.
struct Projection {
  int m = 0;
  double gamma = 0.0;
  Eigen::MatrixXd Hinv, S;  // H_m^{-1} and S_m = (I - H_m^{-1}) / gamma
  bool ok = false;          // H_m invertible
  Projection(const Eigen::MatrixXd& H, int m_, double gamma_) : m(m_), gamma(gamma_) {
    const Eigen::MatrixXd Hm = H.topLeftCorner(m, m);
    Eigen::FullPivLU<Eigen::MatrixXd> lu(Hm);
    if (!lu.isInvertible() || !Hm.allFinite()) return;
    Hinv = lu.inverse();
    if (!Hinv.allFinite()) return;
    S = (Eigen::MatrixXd::Identity(m, m) - Hinv) / gamma;
    ok = true;
  }
};

}  // namespace

TransientResult rational_krylov_expv(const GeneratorOperator& G, const std::vector<double>& p0,
                                     const std::vector<double>& times, const TransientOptions& o,
                                     const TransientObserver& observer) {
  check_inputs(G, p0, times, o);
  if (!G.matrix.rowptr)
    throw OptionError("transient method 'rational_krylov' needs the generator's matrix (an operator from a chain or "
                      "from CSR arrays), not a product alone");
  if (o.krylov_dim < 2)
    throw OptionError(detail::cat("transient option 'krylov_dim' must be in [2, 1000] for rational_krylov (it compares "
                                  "the last two approximations), got ", o.krylov_dim));
  const auto t_start = Clock::now();
  TransientResult r;
  r.requested = r.method = TransientMethod::RationalKrylov;
  const int32_t n = G.n;
  const int mmax = std::max(1, std::min<int>(o.krylov_dim, n));
  r.krylov_dim = mmax;
  r.rate = G.rate;
  const long apps0 = G.applications();
  long inner_products = 0;
  double t_setup = 0.0, t_solve = 0.0, t_arnoldi = 0.0, t_projection = 0.0;
  Outputs out(times, o, observer, r);

  std::vector<double> w = p0;
  const double mass0 = sum(p0);
  const double beta0 = norm2(p0);
  double t_now = 0.0;
  const double t_end = times.empty() ? 0.0 : times.back();

  std::unique_ptr<detail::BlockSystem> sys;
  auto finish = [&] {
    out.finish(t_now, w);
    r.operator_applications = G.applications() - apps0 + inner_products;
    r.iterations = r.steps;
    r.residual = r.error_sum;
    if (r.status == Status::NotComputed) r.status = Status::Converged;
    r.extra = {{"krylov_dim", mmax},
               {"exponentials", static_cast<double>(r.exponentials)},
               {"squarings", static_cast<double>(r.squarings)},
               {"inner_solves", static_cast<double>(r.inner_solves)},
               {"inner_iterations", static_cast<double>(r.inner_iterations)},
               {"inner_iterations_max", static_cast<double>(r.inner_iterations_max)},
               {"inner_residual_max", r.inner_residual_max},
               {"shifts", static_cast<double>(r.shifts)},
               {"gamma_min", r.gamma_min},
               {"gamma_max", r.gamma_max},
               {"basis_max", r.basis_max},
               {"breakdown", r.breakdown ? 1.0 : 0.0},
               {"preconditioner_applications", sys ? static_cast<double>(sys->precond_applications) : 0.0},
               {"preconditioner_blocks", sys ? static_cast<double>(sys->blocks.size()) : 0.0},
               {"norm1", G.norm1}};
    r.seconds = {{"preconditioner", t_setup}, {"solves", t_solve},     {"arnoldi", t_arnoldi},
                 {"projection", t_projection}, {"run", since(t_start)}};
    return r;
  };

  if (!out.emit_up_to(0.0, w)) return finish();
  if (out.done()) return finish();
  if (!(G.norm1 > 0.0)) {  // G = 0: p(t) = p0
    t_now = t_end;
    out.emit_up_to(t_end, w);
    return finish();
  }

  // Preconditioner blocks: given, else the descriptor's (in_block flags), else one state per block.
  std::vector<int32_t> block_of;
  if (!G.matrix.blocks.empty()) {
    const auto& b = G.matrix.blocks;
    if (b.size() != static_cast<size_t>(n))
      fail_param("blocks", detail::cat("of length ", n, " (one block number per state)"), b.size());
    std::vector<char> seen(static_cast<size_t>(n), 0);
    for (size_t i = 0; i < b.size(); ++i) {
      if (b[i] < 0 || b[i] >= n)
        fail_param("blocks", detail::cat("block numbers in [0, ", n, ")"), detail::cat(b[i], " at state ", i));
      seen[static_cast<size_t>(b[i])] = 1;
    }
    // renumber densely (block_system numbers blocks 0 .. nb - 1 and skips none)
    std::vector<int32_t> id(static_cast<size_t>(n), -1);
    int32_t next = 0;
    for (int32_t v = 0; v < n; ++v)
      if (seen[static_cast<size_t>(v)]) id[static_cast<size_t>(v)] = next++;
    block_of.resize(b.size());
    for (size_t i = 0; i < b.size(); ++i) block_of[i] = id[static_cast<size_t>(b[i])];
  } else if (G.matrix.space && G.matrix.labels) {
    block_of = in_block_partition(*G.matrix.space, *G.matrix.labels, n);
  } else {
    block_of.resize(static_cast<size_t>(n));
    std::iota(block_of.begin(), block_of.end(), 0);
  }
  const bool slotted = G.matrix.slotted;
  double sys_gamma = -1.0;  // the shift of *sys
  // The shift's cap: the solves' residuals cannot fall much below eps ||I - gamma G||_1 =
  // eps (1 + 2 gamma Lambda) (relative to the right-hand side), and beta ||s_1||_1 enters
  // the estimate in full; gamma stays where 512 eps (1 + 2 gamma Lambda) <= tol.  Longer
  // steps then rest on the basis capturing the slow modes (the estimate decides).
  const double gamma_cap = G.rate > 0.0 && o.tol > 512.0 * kEps
                               ? (o.tol / (512.0 * kEps) - 1.0) / (2.0 * G.rate)
                               : std::numeric_limits<double>::infinity();
  // Given blocks may have wide bands: their band LU is refused beyond 16 (n + nnz) entries.
  const int64_t band_limit = G.matrix.blocks.empty() ? 0 : 16 * (static_cast<int64_t>(n) + G.matrix.rowptr[n]);

  Eigen::MatrixXd V(n, mmax + 1);
  Eigen::MatrixXd H = Eigen::MatrixXd::Zero(mmax + 1, mmax);
  std::vector<double> colsum(static_cast<size_t>(mmax) + 1, 0.0);  // 1^T v_j
  std::vector<double> inner_res(static_cast<size_t>(mmax), 0.0);   // ||s_j||_1
  std::vector<double> x1(static_cast<size_t>(n));  // the basis's first solution (mass corrected)
  double x1_mass = 0.0, x1_image_l1 = 0.0;
  std::vector<double> rhs(static_cast<size_t>(n)), xb(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  detail::Gmres gmres(n, kInnerBasis);
  r.step_min = t_end;

  // V_k c (the first k columns), written to dst.
  auto combine = [&](int k, const Eigen::VectorXd& c, std::vector<double>& dst) {
    Eigen::Map<Eigen::VectorXd> d(dst.data(), n);
    d.noalias() = V.leftCols(k) * c;
  };
  // ||V_k c||_1 without storing the vector: row chunks split over threads.
  auto l1_combination = [&](int k, const Eigen::VectorXd& c) {
    constexpr Eigen::Index kChunk = 4096;
    const Eigen::Index chunks = (n + kChunk - 1) / kChunk;
    double s = 0.0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > kParallelLoopItems) num_threads(loop_threads())
    for (Eigen::Index b = 0; b < chunks; ++b) {
      const Eigen::Index r0 = b * kChunk, len = std::min<Eigen::Index>(kChunk, n - r0);
      s += (V.block(r0, 0, len, k) * c).cwiseAbs().sum();
    }
    return s;
  };

  // The estimate at tau for a basis of m vectors (m >= 1): u = exp(tau S_m) e_1, the
  // weights of the solves' residuals and est (infinite when H_m is singular).
  // `full` computes the L1 change when the 2-norm one (a lower bound) passes.
  struct Estimate {
    double total = INFINITY, change = 0.0, defect = 0.0, inner = 0.0;
    Eigen::VectorXd u;
    Eigen::VectorXd coef;  // |(H_m^{-1} u)_j|, the weights of the solves' residuals
  };
  double beta = beta0, mass_w = mass0;
  auto estimate = [&](int m, double gamma, double tau, bool happy, double h_last, bool full) {
    const auto t0 = Clock::now();
    Estimate e;
    const Projection P(H, m, gamma);
    if (!P.ok) {
      t_projection += since(t0);
      return e;
    }
    int sq = 0;
    const Eigen::MatrixXd F = expm_pade(tau * P.S, &sq);
    ++r.exponentials;
    r.squarings += sq;
    e.u = F.col(0);
    // the inexact solves: sum_j ||s_j||_1 |(H^{-1} u)_j|
    e.coef = (P.Hinv * e.u).cwiseAbs();
    for (int j = 0; j < m; ++j) e.inner += inner_res[j] * e.coef[j];
    e.inner *= beta;
    double mass = 0.0;
    for (int j = 0; j < m; ++j) mass += colsum[j] * e.u[j];
    e.defect = std::abs(beta * mass - mass_w);
    if (happy) {
      // the space is invariant up to h_last: the neglected term is of that size
      e.change = beta * h_last * (tau / gamma) * e.u.cwiseAbs().maxCoeff();
    } else if (m < 2) {
      e.change = INFINITY;
    } else {
      const Projection P1(H, m - 1, gamma);
      if (!P1.ok) {
        t_projection += since(t0);
        return e;
      }
      const Eigen::MatrixXd F1 = expm_pade(tau * P1.S, &sq);
      ++r.exponentials;
      r.squarings += sq;
      Eigen::VectorXd d = e.u;
      d.head(m - 1) -= F1.col(0);
      d *= beta;
      e.change = d.norm();  // ||V d||_2 = ||d||_2 <= ||V d||_1
      if (full && std::max(e.change, e.defect) + e.inner <= o.tol) e.change = l1_combination(m, d);
    }
    e.total = std::max(e.change, e.defect) + e.inner;
    if (!std::isfinite(e.total)) e.total = INFINITY;
    t_projection += since(t0);
    return e;
  };

  // How the last basis ended: the first step aims at the next output time; after a
  // step that reached an output the target follows the last step (growing when
  // that basis converged early or its error was well within tol) but stays within
  // kGapMultiple gaps of the next output and reaches at least that output; after a
  // partial step it stays short of the next output; after a dropped basis it is a
  // quarter of the last target.
  enum class Last { None, Output, Partial, Dropped } last = Last::None;
  double tau_target = 0.0, last_step = 0.0;
  bool grew = false;
  while (!out.done()) {
    const double target = times[out.next()];
    const double gap = target - t_now, remaining = t_end - t_now;
    {
      const std::string stop =
          budget_note(o, r.steps, G.applications() - apps0 + inner_products, 2, t_now, r.outputs, times.size());
      if (!stop.empty()) {
        r.status = Status::NotConverged;
        r.note = stop;
        break;
      }
    }
    check_interrupt();
    const double growth = grew ? kGrowth : 1.0;
    switch (last) {
      case Last::None: tau_target = gap; break;
      case Last::Output: tau_target = std::max(gap, std::min(growth * last_step, kGapMultiple * gap)); break;
      case Last::Partial: tau_target = std::min(gap, growth * last_step); break;
      case Last::Dropped: break;
    }
    tau_target = std::min(tau_target, remaining);
    const double gamma = round_step(std::min(o.shift_ratio * tau_target, gamma_cap));
    if (!(gamma > 0.0) || t_now + tau_target == t_now) {
      r.status = Status::Stalled;
      r.note = detail::cat("the step fell to ", tau_target, " at t = ", t_now, ": tol = ", o.tol,
                           " is out of reach in double precision");
      break;
    }
    if (gamma != sys_gamma) {
      const auto t0 = Clock::now();
      sys.reset();  // one system at a time
      sys = std::make_unique<detail::BlockSystem>(detail::block_system(
          n, G.matrix.rowptr, G.matrix.col, G.matrix.val, block_of, slotted ? 1.0 + gamma : 1.0, gamma, -1,
          band_limit));
      sys_gamma = gamma;
      ++r.shifts;
      r.gamma_min = r.shifts == 1 ? gamma : std::min(r.gamma_min, gamma);
      r.gamma_max = std::max(r.gamma_max, gamma);
      t_setup += since(t0);
    }
    // ||I - gamma G||_1 = 1 + 2 gamma Lambda: what bounds the attainable residuals
    const double norm_B = 1.0 + 2.0 * gamma * G.rate;

    // Arnoldi on (I - gamma A)^{-1}, stopped once the target step passes the estimate.
    H.setZero();
    V.col(0) = Eigen::Map<const Eigen::VectorXd>(w.data(), n) / beta;
    colsum[0] = V.col(0).sum();
    x1_mass = 0.0;
    int m = 0;
    bool happy = false, failed = false;
    double h_last = 0.0;
    double weight = 1.0;  // about |(H^{-1} u)_j| of the next vector

    for (int j = 0; j < mmax; ++j) {
      check_interrupt();
      const long used = G.applications() - apps0 + inner_products;
      const std::string stop = budget_note(o, r.steps, used, 2, t_now, r.outputs, times.size());
      if (!stop.empty()) {
        r.status = Status::NotConverged;
        r.note = stop;
        failed = true;
        break;
      }
      // The solve's L1 residual target: its share of tol / 4 over mmax solves through
      // the term beta ||s_j||_1 |(H^{-1} u)_j| of the estimate (relaxed as the
      // coefficients decay), at most 1 % of the right-hand side and no less than
      // what round-off allows.
      const double rhs_l1 = V.col(j).cwiseAbs().sum();
      const double floor = 64.0 * kEps * (norm_B + 1.0) * rhs_l1;
      const double eta = std::max(floor, std::min(0.01 * rhs_l1, 0.25 * o.tol / (mmax * beta * weight)));
      {
        const auto t0 = Clock::now();
        for (int32_t i = 0; i < n; ++i) rhs[sys->inv[i]] = V(i, j);
        sys->precond(rhs.data(), xb.data());
        detail::Gmres::Test test;
        test.target = eta;
        test.fac0 = 1.0 / rhs_l1;  // L1 / 2-norm of the right-hand side, as a first guess for the residual's
        test.learn_ratio = true;
        test.measure = [n](const std::vector<double>&, const std::vector<double>& res) {
          long double s = 0.0L;
          for (int32_t i = 0; i < n; ++i) s += std::abs(res[i]);
          return static_cast<double>(s);
        };
        detail::Gmres::Limits limits;
        limits.max_iter = o.inner_max_iter;
        if (o.max_applications > 0) limits.max_products = o.max_applications - used;
        const detail::Gmres::Outcome g = gmres.solve(*sys, rhs.data(), xb, test, limits);
        inner_products += g.products;
        ++r.inner_solves;
        r.inner_iterations += g.iterations;
        r.inner_iterations_max = std::max(r.inner_iterations_max, g.iterations);
        t_solve += since(t0);
        if (!g.converged) {
          r.status = Status::NotConverged;
          if (g.out_of_products)
            r.note = budget_note(o, r.steps, G.applications() - apps0 + inner_products, 2, t_now, r.outputs,
                                 times.size());
          if (r.note.empty())
            r.note = detail::cat("the linear solve with I - gamma G (gamma = ", gamma, ", basis vector ", j + 1,
                                 ") did not converge: L1 residual ", g.measure, " > ", eta, " after ", g.iterations,
                                 " GMRES steps (inner_max_iter = ", o.inner_max_iter, g.stalled ? ", stalled" : "",
                                 ") at t = ", t_now, " (", r.outputs, " of ", times.size(), " output times produced)");
          failed = true;
          break;
        }
        // Mass: every column of I - gamma G^T sums to 1, so the exact solution keeps the
        // right-hand side's sum, 1^T x = 1^T v; the computed one misses it by the sum of its
        // residual, which the projected exponential would turn into a steady drift of the
        // mass.  The first solution is rescaled to the right sum, the others corrected
        // along it: the residuals then sum to 0, and their L1 norms are bounded anew.
        long double sx = 0.0L;
        for (int32_t i = 0; i < n; ++i) sx += xb[i];
        const double mass_x = static_cast<double>(sx), mass_v = colsum[j];
        double res = g.measure;
        if (j == 0) {
          const double c = mass_x != 0.0 ? mass_v / mass_x : 1.0;
          for (double& v : xb) v *= c;
          res = std::abs(1.0 - c) * rhs_l1 + std::abs(c) * res;
          for (int32_t i = 0; i < n; ++i) x1[i] = xb[sys->inv[i]];
          x1_mass = mass_v;
          x1_image_l1 = rhs_l1 + res;  // ||(I - gamma A) x_1||_1 <= ||v_1||_1 + ||s_1||_1
        } else if (x1_mass != 0.0) {
          const double f = (mass_v - mass_x) / x1_mass;
          for (int32_t i = 0; i < n; ++i) xb[sys->inv[i]] += f * x1[i];
          res += std::abs(f) * x1_image_l1;
        }
        inner_res[j] = res;
        r.inner_residual_max = std::max(r.inner_residual_max, res);
        for (int32_t i = 0; i < n; ++i) V(i, j + 1) = xb[sys->inv[i]];
      }
      const auto t0 = Clock::now();
      // Modified Gram-Schmidt twice (the shifted inverse's basis loses orthogonality
      // faster than a polynomial one; the second pass costs a fraction of a solve).
      Eigen::VectorXd h2(j + 1);
      double hn = orthogonalise(V, j + 1, H.col(j).data());
      hn = orthogonalise(V, j + 1, h2.data());
      H.col(j).head(j + 1) += h2;
      t_arnoldi += since(t0);
      m = j + 1;
      if (!(hn > o.breakdown)) {  // happy breakdown: the space is invariant up to hn
        happy = true;
        h_last = hn;
        if (!r.breakdown) {
          r.breakdown = true;
          r.breakdown_dim = m;
          r.breakdown_time = t_now;
        }
        break;
      }
      H(j + 1, j) = hn;
      V.col(j + 1) /= hn;
      colsum[j + 1] = V.col(j + 1).sum();
      if (m == mmax) break;
      const Estimate e = estimate(m, gamma, tau_target, false, 0.0, true);
      if (e.total <= o.tol) break;
      // The next vector's coefficient is at most about the current error (its
      // contribution corrects it): relax only as the approximation converges.
      weight = std::min(1.0, 10.0 * std::max(e.change, e.defect) / beta);
      if (!(weight > 0.0)) weight = 1.0;
    }
    if (failed) break;
    r.basis_max = std::max(r.basis_max, m);

    // The step: every output the basis reaches within tol, in order; else the
    // longest of a few fractions of the target short of the next output; else
    // drop the basis and aim shorter (with a smaller shift).
    double reached = 0.0, t_reached = t_now, step_err = 0.0;
    bool bad_vector = false;
    auto take = [&](double t, const Estimate& e) {  // y = beta V u(t - t_now)
      const auto t0 = Clock::now();
      combine(m, beta * e.u, y);
      t_projection += since(t0);
      const double b = norm2(y);
      if (!std::isfinite(b) || !(b > 0.0)) {
        bad_vector = true;
        return false;
      }
      reached = t - t_now;
      t_reached = t;
      step_err = e.total;
      return true;
    };
    bool at_output = false;
    while (!out.done()) {
      const double t = times[out.next()];
      const Estimate e = estimate(m, gamma, t - t_now, happy, h_last, true);
      if (!(e.total <= o.tol) || !take(t, e)) break;
      at_output = true;
      if (!out.emit_up_to(t, y)) break;
    }
    if (r.status == Status::NumericalIssue) break;
    if (!at_output && !bad_vector) {
      // Short of the next output: the longest of the target doubled while it passes
      // (the estimate was only asked to pass at the target), else of the target
      // halved down to kPartialFloor gamma.
      double best_tau = 0.0;
      Estimate best;
      const double tau0 = std::min(tau_target, 0.5 * gap);
      for (double tau = tau0; tau < gap; tau *= 2.0) {
        Estimate e = estimate(m, gamma, tau, happy, h_last, true);
        if (!(e.total <= o.tol)) break;
        best_tau = tau;
        best = std::move(e);
      }
      for (double tau = 0.5 * tau0; best_tau == 0.0 && tau >= kPartialFloor * gamma; tau *= 0.5) {
        Estimate e = estimate(m, gamma, tau, happy, h_last, true);
        if (e.total <= o.tol) {
          best_tau = tau;
          best = std::move(e);
        }
      }
      if (best_tau > 0.0) take(t_now + best_tau, best);
    }
    if (bad_vector) {
      r.status = Status::NumericalIssue;
      r.note = detail::cat("the rational Krylov step at t = ", t_now, " produced a non-finite or zero vector");
      break;
    }
    if (reached == 0.0) {  // the basis reaches nothing
      ++r.rejected_steps;
      tau_target = std::min(tau_target, gap) / 4.0;
      last = Last::Dropped;
      continue;
    }
    w.swap(y);
    beta = norm2(w);
    mass_w = sum(w);
    t_now = t_reached;
    record_step(r, reached, step_err, beta, beta0, mass_w, mass0);
    grew = m < mmax || step_err <= 0.25 * o.tol;
    last_step = reached;
    last = at_output ? Last::Output : Last::Partial;
  }
  if (r.steps == 0) r.step_min = 0.0;
  return finish();
}

}  // namespace aqm
