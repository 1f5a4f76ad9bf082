// p(t) = p0 exp(t G) by uniformisation: exp(t G) = sum_k Poisson(k; Lambda t) P^k
// with P = I + G / Lambda (non-negative, row-stochastic for Lambda >= max |G_ii|).
// Poisson weights with left and right truncation points in the manner of Fox and
// Glynn, "Computing Poisson probabilities" (CACM 1988): computed from the mode
// outwards by the ratios w_{k+1} / w_k = q / (k + 1), normalised by their sum, so
// that no exp(-q), q^k or k! is ever formed and any q is safe.
#include <algorithm>
#include <cmath>

#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"
#include "solvers/transient_common.hpp"

namespace aqm {

using namespace transient_detail;

PoissonWeights poisson_weights(double q, double eps) {
  if (!(q >= 0.0) || !std::isfinite(q) || q > 1e15) fail_param("q", "in [0, 1e15]", q);
  if (!(eps > 0.0 && eps <= 0.5)) fail_param("eps", "in (0, 0.5]", eps);
  PoissonWeights pw;
  // Unnormalised weights u_k = w_k / w_mode, mode = floor(q).  Each tail gets eps / 4:
  // the reported bound is (left tail + right tail) + the same again for the
  // normalisation over [left, right] (the weights sum to 1 there, not to 1 - tails).
  const double tail_eps = eps / 4.0;
  const long mode = static_cast<long>(std::floor(q));
  std::vector<double> left_side;  // u_{mode-1}, u_{mode-2}, ...
  long double W = 1.0L;           // sum of the u_k taken so far
  double tail_left = 0.0, tail_right = 0.0;  // bounds on the tails' u-sums
  // Left: for k <= L - 1 < q the ratios w_{k-1} / w_k = k / q <= (L - 1) / q, so
  // sum_{k < L} w_k <= w_{L-1} / (1 - (L - 1) / q).
  long L = mode;
  double u = 1.0;
  while (L > 0) {
    const double below = u * static_cast<double>(L) / q;                  // u_{L-1}
    const double bound = below / (1.0 - static_cast<double>(L - 1) / q);  // L - 1 < q
    if (bound <= tail_eps * static_cast<double>(W)) {
      tail_left = bound;
      break;
    }
    u = below;
    left_side.push_back(u);
    W += u;
    --L;
  }
  // Right: for k >= R + 1 with R + 2 > q the ratios w_{k+1} / w_k = q / (k + 1) <= q / (R + 2),
  // so sum_{k > R} w_k <= w_{R+1} / (1 - q / (R + 2)).
  std::vector<double> right_side;  // u_{mode+1}, ...
  long R = mode;
  u = 1.0;
  for (;;) {
    const double above = u * q / static_cast<double>(R + 1);  // u_{R+1}
    const double ratio = q / static_cast<double>(R + 2);
    if (ratio < 1.0) {
      const double bound = above / (1.0 - ratio);
      if (bound <= tail_eps * static_cast<double>(W)) {
        tail_right = bound;
        break;
      }
    }
    u = above;
    right_side.push_back(u);
    W += u;
    ++R;
  }
  pw.left = L;
  pw.right = R;
  pw.w.reserve(static_cast<size_t>(R - L + 1));
  for (auto it = left_side.rbegin(); it != left_side.rend(); ++it) pw.w.push_back(*it);
  pw.w.push_back(1.0);
  pw.w.insert(pw.w.end(), right_side.begin(), right_side.end());
  // The weights sum to 1 over [L, R]; the true ones to 1 - (tails), which the
  // normalised sum over-counts by the same amount.
  long double s = 0.0L;
  for (double v : pw.w) s += v;
  for (double& v : pw.w) v = static_cast<double>(v / s);
  pw.bound = 2.0 * (tail_left + tail_right) / static_cast<double>(s);
  return pw;
}

namespace {
/// Chunks of an interval have Poisson means at most this (weights stay accurate
/// to a few 1e-12 relative: the ratios are multiplied over about 10 sqrt(q) terms).
constexpr double kMaxChunkMean = 1e7;
/// Interrupt checks every this many products.
constexpr long kCheckEvery = 256;
}  // namespace

TransientResult uniformization(const GeneratorOperator& G, const std::vector<double>& p0,
                               const std::vector<double>& times, const TransientOptions& o,
                               const TransientObserver& observer) {
  check_inputs(G, p0, times, o);
  const auto t_start = Clock::now();
  TransientResult r;
  r.requested = r.method = TransientMethod::Uniformization;
  const int32_t n = G.n;
  const double lambda = G.rate;
  r.rate = lambda;
  const long apps0 = G.applications();
  Outputs out(times, o, observer, r);

  std::vector<double> x = p0, cur(static_cast<size_t>(n)), gx(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  const double mass0 = sum(p0);
  const double beta0 = norm2(p0);
  double t_now = 0.0;
  const double t_end = times.empty() ? 0.0 : times.back();

  auto finish = [&] {
    out.finish(t_now, x);
    r.operator_applications = G.applications() - apps0;
    r.iterations = r.steps;
    r.residual = r.error_sum;
    if (r.status == Status::NotComputed) r.status = Status::Converged;
    r.extra = {{"rate", lambda},
               {"poisson_mean_max", r.poisson_mean_max},
               {"poisson_left", static_cast<double>(r.poisson_left)},
               {"poisson_right", static_cast<double>(r.poisson_right)}};
    r.seconds.push_back({"run", since(t_start)});
    return r;
  };

  if (!out.emit_up_to(0.0, x)) return finish();
  if (out.done()) return finish();
  if (!(lambda > 0.0)) {  // G = 0: p(t) = p0
    t_now = t_end;
    out.emit_up_to(t_end, x);
    return finish();
  }
  r.step_min = t_end;
  long since_check = 0;
  bool stopped = false;
  while (!out.done() && !stopped) {
    const double target = times[out.next()];
    const double gap = target - t_now;
    const long chunks = std::max(1L, static_cast<long>(std::ceil(lambda * gap / kMaxChunkMean)));
    for (long c = 0; c < chunks; ++c) {
      const double dt = c + 1 == chunks ? target - t_now : gap / static_cast<double>(chunks);
      const double q = lambda * dt;
      // The whole run's truncation error is at most tol: each chunk gets its share of [0, t_end].
      const double eps = std::min(0.5, std::max(o.tol * dt / t_end, 1e-300));
      const PoissonWeights pw = poisson_weights(q, eps);
      const std::string stop =
          budget_note(o, r.steps, G.applications() - apps0, pw.right, t_now, r.outputs, times.size());
      if (!stop.empty()) {
        r.status = Status::NotConverged;
        r.note = stop;
        stopped = true;
        break;
      }
      check_interrupt();
      // y = sum_{k=L}^{R} w_k x P^k, with x P^k carried in `cur`.
      std::fill(y.begin(), y.end(), 0.0);
      cur = x;
      for (long k = 0;; ++k) {
        if (k >= pw.left) {
          const double wk = pw.w[static_cast<size_t>(k - pw.left)];
          for (int32_t i = 0; i < n; ++i) y[i] += wk * cur[i];
        }
        if (k == pw.right) break;
        G.apply(cur.data(), gx.data());
        for (int32_t i = 0; i < n; ++i) cur[i] += gx[i] / lambda;
        if (++since_check >= kCheckEvery) {
          since_check = 0;
          check_interrupt();
        }
      }
      const double mass = sum(y);
      if (!std::isfinite(mass)) {
        r.status = Status::NumericalIssue;
        r.note = detail::cat("uniformisation produced a non-finite vector at t = ", t_now + dt);
        stopped = true;
        break;
      }
      x.swap(y);
      t_now = c + 1 == chunks ? target : t_now + dt;
      ++r.steps;
      r.step_min = std::min(r.step_min, dt);
      r.step_max = std::max(r.step_max, dt);
      r.error_sum += pw.bound;
      r.error_max = std::max(r.error_max, pw.bound);
      r.roundoff = std::max(r.roundoff, std::abs(mass - mass0));
      r.hump = std::max(r.hump, norm2(x) / beta0);
      if (q >= r.poisson_mean_max) {
        r.poisson_mean_max = q;
        r.poisson_left = pw.left;
        r.poisson_right = pw.right;
      }
    }
    if (!stopped && !out.emit_up_to(t_now, x)) break;
  }
  if (r.steps == 0) r.step_min = 0.0;
  return finish();
}

}  // namespace aqm
