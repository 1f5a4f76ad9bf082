// ARPACK-ng implicitly restarted Arnoldi for the eigenvalue 1 of P^T (method "arnoldi").
#include <arpack/arpack.h>

#include <algorithm>

#include "aqmchain/interrupt.hpp"
#include "solvers/stationary_common.hpp"

namespace aqm::detail {

namespace {
void solve_arnoldi(const MarkovOperator& c, const StationaryOptions& o, StationaryResult& r, const Attempt&) {
  r.method = Method::Arnoldi;
  const a_int n = c.rows();
  if (n < 3) {  // ARPACK needs nev + 2 <= ncv <= n
    solve_direct(c, o, r);
    r.fallback = true;
    r.note = "ARPACK needs at least 3 states; solved directly";
    return;
  }
  const a_int nev = 1;
  const a_int ncv = o.ncv > 0 ? std::min<a_int>(std::max<a_int>(o.ncv, 3), n) : std::min<a_int>(30, n);
  const long maxit = o.max_iter > 0 ? o.max_iter : 3000;
  // Basis V (n x ncv), workd (3n), resid, y, the eigenvector and workl (3 ncv^2 + 6 ncv).
  const double need = 8.0 * (static_cast<double>(n) * (static_cast<double>(ncv) + 6.0) + 3.0 * ncv * ncv + 9.0 * ncv);
  if (need > o.arnoldi_max_gb * 1e9)
    throw StateSpaceTooLarge("ncv", detail::cat("solver option 'ncv' must keep the Arnoldi work arrays within arnoldi_max_gb = ",
                                                o.arnoldi_max_gb, " GB: ", n, " states x ncv = ", ncv, " need ",
                                                need / 1e9, " GB (lower ncv or use another method)"));
  std::vector<double> resid = o.x0.empty() ? std::vector<double>(n, 1.0 / n) : o.x0;
  std::vector<double> V(static_cast<size_t>(n) * ncv), workd(3 * static_cast<size_t>(n));
  const a_int lworkl = 3 * ncv * ncv + 6 * ncv;
  std::vector<double> workl(lworkl);
  std::vector<double> y(n);
  double atol = o.tol;
  const auto t0 = Clock::now();
  // Up to 4 rounds: ARPACK's tolerance is a relative 2-norm Ritz estimate, ours
  // an L1 residual of the normalised vector; tighten and restart from the
  // current vector until ours holds.
  for (int round = 0; round < 4; ++round) {
    a_int iparam[11] = {0}, ipntr[14] = {0};
    iparam[0] = 1;  // exact shifts
    iparam[2] = static_cast<a_int>(maxit);
    iparam[6] = 1;  // mode 1: standard problem
    a_int ido = 0, info = 1;  // info = 1: use resid as the start vector
    while (true) {
      check_interrupt();
      dnaupd_c(&ido, "I", n, "LR", nev, atol, resid.data(), ncv, V.data(), n, iparam, ipntr, workd.data(),
               workl.data(), lworkl, &info);
      if (ido != -1 && ido != 1) break;
      c.apply(&workd[ipntr[0] - 1], &workd[ipntr[1] - 1]);
      ++r.operator_applications;
    }
    r.iterations += iparam[2];
    if (info < 0) throw SolverError(detail::cat("ARPACK dnaupd failed with info = ", info));
    const bool arpack_ok = info == 0 && iparam[4] >= 1;
    std::vector<double> pi(n);
    if (arpack_ok) {
      std::vector<a_int> select(ncv, 1);
      std::vector<double> dr(nev + 1), di(nev + 1), Z(static_cast<size_t>(n) * (nev + 1)), workev(3 * ncv);
      a_int ierr = 0;
      dneupd_c(1, "A", select.data(), dr.data(), di.data(), Z.data(), n, 0.0, 0.0, workev.data(), "I", n, "LR", nev,
               atol, resid.data(), ncv, V.data(), n, iparam, ipntr, workd.data(), workl.data(), lworkl, &ierr);
      if (ierr != 0) throw SolverError(detail::cat("ARPACK dneupd failed with info = ", ierr));
      r.extra.push_back({"eigenvalue", dr[0]});
      std::copy(Z.begin(), Z.begin() + n, pi.begin());
    } else {
      std::copy(V.begin(), V.begin() + n, pi.begin());  // current first Arnoldi vector
    }
    long double s = 0.0L;
    for (double v : pi) s += v;
    if (s < 0) for (double& v : pi) v = -v;
    r.pi = pi;
    finish(c, r, o.tol);
    if (!arpack_ok) {
      r.status = Status::NotConverged;
      r.note = detail::cat("ARPACK stopped with info = ", info, " after ", r.iterations,
                           " restarts (max_iter = ", maxit, ")");
      break;
    }
    if (r.converged()) break;
    resid = r.pi;
    atol = std::max(atol * std::max(1e-3, 0.5 * o.tol / r.residual), 1e-15);
  }
  r.seconds.insert(r.seconds.begin(), {"iterate", since(t0)});
  if (!r.converged() && r.note.empty())
    r.note = detail::cat("Arnoldi reached residual ", r.residual, " > tol ", o.tol);
}

}  // namespace

template <>
const MethodSolver& method_solver<Method::Arnoldi>() {
  static const MethodSolver entry{solve_arnoldi};
  return entry;
}

}  // namespace aqm::detail
