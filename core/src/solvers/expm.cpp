// p(t) = p0 exp(t G) by Krylov steps (the scheme of Sidje's Expokit, DMEXPV,
// written anew for row vectors), and the dense Pade exponential it uses.
//
// In column form the kernel computes exp(t A) v for A = G^T (x G = (A x^T)^T),
// so the Arnoldi process runs on the product x -> x G and the norm bound is
// ||A||_inf = ||G||_1 (GeneratorOperator::norm1).
#include <algorithm>
#include <cmath>

#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"
#include "solvers/transient_common.hpp"

namespace aqm {

using namespace transient_detail;

// ------------------------------------------------------------------ dense exponential

Eigen::MatrixXd expm_pade(const Eigen::MatrixXd& A, int* squarings) {
  if (A.rows() != A.cols()) fail_param("matrix", "square", detail::cat(A.rows(), " x ", A.cols()));
  if (!A.allFinite()) fail_param("matrix", "finite", "a non-finite entry");
  const Eigen::Index n = A.rows();
  // Scaling: ||A / 2^s||_inf < 1/2, where the (6,6) approximant's error is below
  // round-off (its leading term is (6!)^2 / (12! 13!) x^13, about 2e-17 at x = 1/2).
  const double norm = n ? A.cwiseAbs().rowwise().sum().maxCoeff() : 0.0;
  int s = 0;
  if (norm > 0.0) {
    int e = 0;
    std::frexp(norm, &e);  // norm < 2^e
    s = std::max(0, e + 1);
  }
  if (squarings) *squarings = s;
  const Eigen::MatrixXd X = A * std::ldexp(1.0, -s);
  // Diagonal Pade (6,6): N(x) = sum_k c_k x^k with c_0 = 1,
  // c_k = c_{k-1} (7 - k) / (k (13 - k)), and D(x) = N(-x).  With the even part
  // E(x) = c_0 + c_2 x^2 + c_4 x^4 + c_6 x^6 and the odd part O(x) = x (c_1 + c_3 x^2 + c_5 x^4),
  // N / D = (E + O) / (E - O) = I + 2 (E - O)^{-1} O, which loses no accuracy to the
  // cancellation of N - D.
  double c[7];
  c[0] = 1.0;
  for (int k = 1; k <= 6; ++k) c[k] = c[k - 1] * (7 - k) / (k * (13.0 - k));
  const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(n, n);
  const Eigen::MatrixXd X2 = X * X;
  const Eigen::MatrixXd E = ((c[6] * X2 + c[4] * I) * X2 + c[2] * I) * X2 + c[0] * I;
  const Eigen::MatrixXd O = X * ((c[5] * X2 + c[3] * I) * X2 + c[1] * I);
  // Squaring in the form Z = R - I, (I + Z)^2 = I + (2 Z + Z^2): while Z is small
  // its round-off is relative to Z, not to I (for a generator, the rows of Z keep
  // their zero sums to that accuracy), so the early squarings, whose errors the
  // later ones double, add far less.
  Eigen::MatrixXd Z = 2.0 * (E - O).partialPivLu().solve(O);
  for (int k = 0; k < s; ++k) Z = (2.0 * Z + Z * Z).eval();
  Z.diagonal().array() += 1.0;
  return Z;
}

// ------------------------------------------------------------------ Krylov steps

namespace {

/// Expokit's first step size, from the a-priori bound on the Krylov error for
/// ||tau A|| (in logarithms: the power of (m+1)/e overflows for large m).
double first_step(double tol, int m, double beta, double anorm) {
  const double mp = m + 1.0;
  const double log_p = std::log(tol) + mp * std::log(mp / 2.72) + 0.5 * std::log(2.0 * 3.14 * mp);
  return round_step(std::exp(-std::log(anorm) + (log_p - std::log(4.0 * beta * anorm)) / m));
}

}  // namespace

TransientResult krylov_expv(const GeneratorOperator& G, const std::vector<double>& p0,
                            const std::vector<double>& times, const TransientOptions& o,
                            const TransientObserver& observer) {
  check_inputs(G, p0, times, o);
  const auto t_start = Clock::now();
  TransientResult r;
  r.requested = r.method = TransientMethod::Krylov;
  const int32_t n = G.n;
  const int m = std::min<int>(o.krylov_dim, n);
  r.krylov_dim = m;
  r.rate = G.rate;
  const long apps0 = G.applications();
  Outputs out(times, o, observer, r);

  std::vector<double> w = p0, w_new(static_cast<size_t>(n));
  const double mass0 = sum(p0);
  const double beta0 = norm2(p0);
  double t_now = 0.0;
  const double t_end = times.empty() ? 0.0 : times.back();
  const double anorm = G.norm1;
  const double break_tol = o.breakdown * anorm;

  auto finish = [&] {
    out.finish(t_now, w);
    r.operator_applications = G.applications() - apps0;
    r.iterations = r.steps;
    r.residual = r.error_sum;
    if (r.status == Status::NotComputed) r.status = Status::Converged;
    r.extra = {{"krylov_dim", m},        {"exponentials", static_cast<double>(r.exponentials)},
               {"squarings", static_cast<double>(r.squarings)},
               {"breakdown", r.breakdown ? 1.0 : 0.0}, {"breakdown_dim", r.breakdown_dim},
               {"breakdown_time", r.breakdown_time}, {"norm1", anorm}};
    r.seconds.push_back({"run", since(t_start)});
    return r;
  };

  if (!out.emit_up_to(0.0, w)) return finish();
  if (out.done()) return finish();
  if (!(anorm > 0.0)) {  // G = 0: p(t) = p0
    t_now = t_end;
    out.emit_up_to(t_end, w);
    return finish();
  }

  // V: the basis v_1 .. v_{m+1} as columns; H: the (m+2) x (m+2) augmented matrix.
  Eigen::MatrixXd V(n, m + 1);
  Eigen::MatrixXd H(m + 2, m + 2);
  Eigen::VectorXd av(n);  // A v_{m+1}
  double beta = beta0;
  double t_new = first_step(o.tol, m, beta, anorm);
  r.step_min = t_end;

  while (!out.done()) {
    const double target = times[out.next()];
    const std::string stop = budget_note(o, r.steps, G.applications() - apps0, m + 1, t_now, r.outputs, times.size());
    if (!stop.empty()) {
      r.status = Status::NotConverged;
      r.note = stop;
      break;
    }
    check_interrupt();
    const double gap = target - t_now;
    double t_step = std::min(gap, t_new);

    // Arnoldi with modified Gram-Schmidt.
    H.setZero();
    V.col(0) = Eigen::Map<const Eigen::VectorXd>(w.data(), n) / beta;
    int mb = m;            // basis size
    bool happy = false;
    double h_break = 0.0;  // h_{mb+1,mb} at a breakdown
    for (int j = 0; j < m; ++j) {
      G.apply(V.col(j).data(), V.col(j + 1).data());
      auto p = V.col(j + 1);
      const double s = orthogonalise(V, j + 1, H.col(j).data());
      if (!(s > break_tol)) {  // happy breakdown: K_{j+1} is invariant up to s (also s = 0 with breakdown = 0)
        happy = true;
        mb = j + 1;
        h_break = s;
        break;
      }
      H(j + 1, j) = s;
      p /= s;
    }
    double avnorm = 0.0;
    if (!happy) {
      G.apply(V.col(m).data(), av.data());
      avnorm = av.norm();
      H(m + 1, m) = 1.0;  // the corrected scheme's extra column
    } else {
      t_step = gap;  // the basis is exact up to h_break: try to reach the next output at once
      if (!r.breakdown) {
        r.breakdown = true;
        r.breakdown_dim = mb;
        r.breakdown_time = t_now;
      }
    }

    // Step-size control: the basis does not depend on the step, rejections only
    // re-evaluate the small exponential.
    const int mx = happy ? mb : m + 2;
    Eigen::MatrixXd F;
    double err = 0.0, xm = 1.0 / m;
    bool stalled = false;
    for (;;) {
      int sq = 0;
      F = expm_pade(t_step * H.topLeftCorner(mx, mx), &sq);
      ++r.exponentials;
      r.squarings += sq;
      if (happy) {
        // The neglected residual h_break v_{mb+1} e_mb^T, integrated over the step.
        err = beta * h_break * t_step * std::abs(F(mb - 1, 0));
        xm = 1.0 / mb;
      } else {
        const double p1 = std::abs(F(m, 0)) * beta;
        const double p2 = std::abs(F(m + 1, 0)) * beta * avnorm;
        if (p1 > 10.0 * p2) {
          err = p2;
          xm = 1.0 / m;
        } else if (p1 > p2) {
          err = p1 * p2 / (p1 - p2);
          xm = 1.0 / m;
        } else {
          err = p1;
          xm = 1.0 / std::max(1, m - 1);
        }
      }
      if (err <= 1.2 * t_step * o.tol) break;
      ++r.rejected_steps;
      const double shrunk = round_step(0.9 * t_step * std::pow(t_step * o.tol / err, xm));
      if (!(shrunk > 0.0) || !(shrunk < t_step) || t_now + shrunk == t_now) {
        stalled = true;
        break;
      }
      t_step = shrunk;
    }
    if (stalled) {
      r.status = Status::Stalled;
      r.note = detail::cat("the step size fell to ", t_step, " at t = ", t_now, " without meeting the error test (err ",
                           err, " > 1.2 tau tol): tol = ", o.tol, " is out of reach in double precision");
      break;
    }

    // w <- beta V F e_1 (with v_{m+1} in the corrected scheme).
    const int used = happy ? mb : m + 1;
    Eigen::Map<Eigen::VectorXd> wn(w_new.data(), n);
    wn.noalias() = V.leftCols(used) * (beta * F.col(0).head(used));
    const double beta_new = wn.norm();
    if (!std::isfinite(beta_new) || !(beta_new > 0.0)) {
      r.status = Status::NumericalIssue;
      r.note = detail::cat("the Krylov step at t = ", t_now, " produced a non-finite or zero vector");
      break;
    }
    w.swap(w_new);
    beta = beta_new;

    // Accounts and the next step size.
    record_step(r, t_step, err, beta, beta0, sum(w), mass0);
    if (!happy) {
      t_new = err > 0.0 ? round_step(0.9 * t_step * std::pow(t_step * o.tol / err, xm)) : t_end - t_now;
      if (!(t_new > 0.0) || !std::isfinite(t_new)) t_new = t_end - t_now;
    }
    t_now = t_step == gap ? target : t_now + t_step;
    if (!out.emit_up_to(t_now, w)) break;
  }
  if (r.steps == 0) r.step_min = 0.0;
  return finish();
}

}  // namespace aqm
