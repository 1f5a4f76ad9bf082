// Functionals of w M^s by a shift-and-invert Krylov space (power_krylov.hpp).
#include "solvers/power_krylov.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"
#include "solvers/block_system.hpp"
#include "solvers/transient_common.hpp"

namespace aqm::detail {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// For sorted steps s_k: X_k = M^{s_k} e1 and (optionally) Y_k = sum_{i < s_k} M^i e1.  The
/// pairs (M^(2^b), sum_{i < 2^b} M^i) are formed once by doubling; each increment between
/// outputs is then applied to the vectors bit by bit (matrix-vector products only).
void powers(const Eigen::MatrixXd& M, const std::vector<int64_t>& steps, bool sums, std::vector<Eigen::VectorXd>& X,
            std::vector<Eigen::VectorXd>& Y) {
  const int m = static_cast<int>(M.rows());
  int64_t largest = 0;
  for (size_t k = 0; k < steps.size(); ++k) largest = std::max(largest, steps[k] - (k ? steps[k - 1] : 0));
  std::vector<Eigen::MatrixXd> Pb{M}, Sb{Eigen::MatrixXd::Identity(m, m)};
  while ((int64_t{1} << Pb.size()) <= largest) {
    const Eigen::MatrixXd& P = Pb.back();
    if (sums) Sb.push_back(Sb.back() + P * Sb.back());
    Pb.push_back(P * P);
  }
  Eigen::VectorXd x = Eigen::VectorXd::Zero(m), y = Eigen::VectorXd::Zero(m);
  x(0) = 1.0;
  int64_t at = 0;
  X.assign(steps.size(), Eigen::VectorXd());
  Y.assign(steps.size(), Eigen::VectorXd());
  for (size_t k = 0; k < steps.size(); ++k) {
    int64_t d = steps[k] - at;
    for (size_t b = 0; d > 0; ++b, d >>= 1) {
      if (!(d & 1)) continue;
      if (sums) y += Sb[b] * x;  // the sums over this chunk, from the current power
      x = Pb[b] * x;
    }
    at = steps[k];
    X[k] = x;
    if (sums) Y[k] = y;
  }
}
}  // namespace

PowerKrylovResult power_krylov(int32_t n, const int32_t* rowptr, const int32_t* col, const double* val,
                               const std::vector<int32_t>& block_of, const std::vector<double>& w,
                               const std::vector<const std::vector<double>*>& f, const std::vector<double>& scale,
                               const std::vector<char>& sum_of, const std::vector<double>& sum_cap,
                               const std::vector<int64_t>& steps, double gamma, double tol, int mmax,
                               double solve_tol, long solve_max_iter) {
  PowerKrylovResult r;
  const bool want_sums = std::any_of(sum_of.begin(), sum_of.end(), [](char c) { return c != 0; });
  const size_t nq = f.size(), ns = steps.size();
  r.values.assign(nq, std::vector<double>(ns, 0.0));
  if (want_sums) r.sums.assign(nq, std::vector<double>(ns, 0.0));
  r.estimate.assign(ns, 0.0);
  mmax = std::max(2, std::min<int>(mmax, n));
  const auto t0 = Clock::now();
  const BlockSystem sys = block_system(n, rowptr, col, val, block_of, 1.0 + gamma, gamma, -1);
  r.seconds_setup = since(t0);
  Gmres gmres(n, 40);

  Eigen::Map<const Eigen::VectorXd> wv(w.data(), n);
  const double beta = wv.norm();
  if (!(beta > 0.0)) {
    r.converged = true;
    return r;
  }
  Eigen::MatrixXd V(n, mmax + 1);
  Eigen::MatrixXd H = Eigen::MatrixXd::Zero(mmax + 1, mmax);
  V.col(0) = wv / beta;
  Eigen::MatrixXd C(nq, mmax + 1);  // C(q, j) = f_q^T v_j
  auto project_f = [&](int j) {
    for (size_t q = 0; q < nq; ++q) C(static_cast<Eigen::Index>(q), j) = V.col(j).dot(Eigen::Map<const Eigen::VectorXd>(f[q]->data(), n));
  };
  project_f(0);
  std::vector<double> fmax(nq, 0.0);  // ||f_q||_inf: the inexact solves' L1 error times it bounds their effect
  for (size_t q = 0; q < nq; ++q)
    for (double v : *f[q]) fmax[q] = std::max(fmax[q], std::abs(v));
  std::vector<double> inner(static_cast<size_t>(mmax), 0.0);
  std::vector<double> rhs(static_cast<size_t>(n)), xb(static_cast<size_t>(n));
  std::vector<std::vector<double>> prev_values, prev_sums;
  const double norm_B = 1.0 + 2.0 * gamma;

  auto evaluate = [&](int m, bool happy, std::vector<std::vector<double>>& vals, std::vector<std::vector<double>>& sms,
                      std::vector<double>& inner_est) -> bool {
    const Eigen::MatrixXd Hm = H.topLeftCorner(m, m);
    Eigen::FullPivLU<Eigen::MatrixXd> lu(Hm);
    if (!lu.isInvertible()) return false;
    const Eigen::MatrixXd Hinv = lu.inverse();
    Eigen::MatrixXd Mm = Eigen::MatrixXd::Identity(m, m) + (Eigen::MatrixXd::Identity(m, m) - Hinv) / gamma;
    if (!Mm.allFinite()) return false;
    // The matrix is substochastic: its spectral radius is at most 1, but Ritz values of a
    // non-normal operator may fall outside its spectrum, and their powers then grow.  Such
    // values are pulled back to the unit circle (the estimate judges the result).
    {
      Eigen::ComplexEigenSolver<Eigen::MatrixXd> es(Mm);
      if (es.info() == Eigen::Success) {
        Eigen::VectorXcd lam = es.eigenvalues();
        double worst = 0.0;
        for (int i = 0; i < m; ++i) worst = std::max(worst, std::abs(lam(i)));
        r.ritz_max = worst;
        if (worst > 1.0) {
          for (int i = 0; i < m; ++i)
            if (std::abs(lam(i)) > 1.0) lam(i) /= std::abs(lam(i));
          const Eigen::MatrixXcd W = es.eigenvectors();
          const Eigen::MatrixXcd R = W * lam.asDiagonal() * W.inverse();
          if (R.allFinite()) Mm = R.real();
          ++r.clamped;
        }
      }
    }
    std::vector<Eigen::VectorXd> X, Y;
    powers(Mm, steps, want_sums, X, Y);
    vals.assign(nq, std::vector<double>(ns, 0.0));
    sms.assign(want_sums ? nq : 0, std::vector<double>(ns, 0.0));
    inner_est.assign(ns, 0.0);
    for (size_t k = 0; k < ns; ++k) {
      for (size_t q = 0; q < nq; ++q) {
        const Eigen::RowVectorXd c = C.row(static_cast<Eigen::Index>(q)).head(m);
        vals[q][k] = beta * c.dot(X[k]);
        if (want_sums) sms[q][k] = beta * c.dot(Y[k]);
      }
      // the inexact solves: beta sum_j ||s_j||_1 |(H^{-1} x)_j| (per unit functional)
      const Eigen::VectorXd g = Hinv * X[k];
      double e = 0.0;
      for (int j = 0; j < m; ++j) e += inner[static_cast<size_t>(j)] * std::abs(g(j));
      inner_est[k] = beta * e;
      (void)happy;
    }
    return true;
  };

  int m = 0;
  bool happy = false;
  for (int j = 0; j < mmax; ++j) {
    check_interrupt();
    const double rhs_l1 = V.col(j).cwiseAbs().sum();
    const double floor = 64.0 * std::numeric_limits<double>::epsilon() * (norm_B + 1.0) * rhs_l1;
    const double eta = std::max(floor, solve_tol * rhs_l1);
    const auto ts = Clock::now();
    for (int32_t i = 0; i < n; ++i) rhs[static_cast<size_t>(sys.inv[i])] = V(i, j);
    sys.precond(rhs.data(), xb.data());
    Gmres::Test test;
    test.target = eta;
    test.fac0 = 1.0 / rhs_l1;
    test.learn_ratio = true;
    test.measure = [n](const std::vector<double>&, const std::vector<double>& res) {
      long double s = 0.0L;
      for (int32_t i = 0; i < n; ++i) s += std::abs(res[static_cast<size_t>(i)]);
      return static_cast<double>(s);
    };
    Gmres::Limits limits;
    limits.max_iter = solve_max_iter;
    const Gmres::Outcome g = gmres.solve(sys, rhs.data(), xb, test, limits);
    ++r.solves;
    r.gmres_iterations += g.iterations;
    r.seconds_solves += since(ts);
    if (!g.converged) {
      r.note = cat("a linear solve with I - gamma (P - I) (gamma = ", gamma, ", basis vector ", j + 1,
                   ") did not converge: L1 residual ", g.measure, " > ", eta, " after ", g.iterations, " GMRES steps");
      return r;
    }
    inner[static_cast<size_t>(j)] = g.measure;
    for (int32_t i = 0; i < n; ++i) V(i, j + 1) = xb[static_cast<size_t>(sys.inv[i])];
    Eigen::VectorXd h2(j + 1);
    double hn = transient_detail::orthogonalise(V, j + 1, H.col(j).data());
    hn = transient_detail::orthogonalise(V, j + 1, h2.data());
    H.col(j).head(j + 1) += h2;
    m = j + 1;
    if (!(hn > 1e-14)) {
      happy = true;
      r.breakdown = true;
    } else {
      H(j + 1, j) = hn;
      V.col(j + 1) /= hn;
      project_f(j + 1);
    }
    std::vector<std::vector<double>> vals, sms;
    std::vector<double> inner_est;
    if (!evaluate(m, happy, vals, sms, inner_est)) {
      if (happy) break;
      continue;
    }
    if (!prev_values.empty() || happy) {
      double worst = 0.0;
      for (size_t k = 0; k < ns; ++k) {
        double e = 0.0;
        for (size_t q = 0; q < nq; ++q) {
          if (sum_of[q]) {
            const double cs = happy ? 0.0 : std::abs(sms[q][k] - prev_sums[q][k]);
            // the solves' effect on a sum: at most s times the effect on one value
            const double reach = std::min(sum_cap[q], fmax[q] * static_cast<double>(std::max<int64_t>(steps[k], 1)));
            e = std::max(e, (cs + inner_est[k] * reach) / scale[q]);
          } else {
            const double change = happy ? 0.0 : std::abs(vals[q][k] - prev_values[q][k]);
            e = std::max(e, (change + inner_est[k] * fmax[q]) / scale[q]);
          }
        }
        r.estimate[k] = e;
        worst = std::max(worst, e);
      }
      if (worst <= tol || happy) {
        r.values = vals;
        if (want_sums) r.sums = sms;
        r.basis = m;
        r.converged = worst <= tol;
        if (!r.converged) r.note = cat("the estimate ", worst, " > tol = ", tol, " at an invariant space of ", m);
        return r;
      }
    }
    prev_values = std::move(vals);
    prev_sums = std::move(sms);
    if (happy) break;
  }
  r.basis = m;
  if (!prev_values.empty()) {
    r.values = prev_values;
    if (want_sums) r.sums = prev_sums;
  }
  double worst = 0.0;
  for (double e : r.estimate) worst = std::max(worst, e);
  r.note = cat("the Krylov basis reached its largest size ", m, " with the estimate ", worst, " > tol = ", tol);
  return r;
}

}  // namespace aqm::detail
