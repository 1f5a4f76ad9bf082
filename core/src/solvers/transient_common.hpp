// What the transient kernels share: input checks, output projection, budgets.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "aqmchain/solvers/transient.hpp"

namespace aqm::transient_detail {

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Options validated; p0 (ModelError 'p0') and times (ModelError 'times') checked
/// against the operator.
void check_inputs(const GeneratorOperator& G, const std::vector<double>& p0, const std::vector<double>& times,
                  const TransientOptions& options);

/// sum_i x_i (long double accumulation) and the Euclidean norm.
double sum(const std::vector<double>& x);
double norm2(const std::vector<double>& x);

/// Hands outputs to the observer (projected when asked) and keeps the accounts
/// that outputs carry (clipped mass, the produced count, the final vector).
class Outputs {
 public:
  Outputs(const std::vector<double>& times, const TransientOptions& o, const TransientObserver& observer,
          TransientResult& r)
      : times_(times), project_(o.project), observer_(observer), r_(r) {}
  /// Emit every output time <= t with the vector w (the propagated, raw vector).
  /// False when w has no usable mass (status NumericalIssue set).
  bool emit_up_to(double t, const std::vector<double>& w);
  /// The next output time not yet produced (index).
  size_t next() const { return r_.outputs; }
  bool done() const { return r_.outputs == times_.size(); }
  /// Fill r.p and r.t_reached from the raw vector w at time t.
  void finish(double t, const std::vector<double>& w);

 private:
  /// buf_ <- the projection of w (or w itself); false without usable mass.
  bool prepare(const std::vector<double>& w);
  const std::vector<double>& times_;
  bool project_;
  const TransientObserver& observer_;
  TransientResult& r_;
  std::vector<double> buf_;
};

/// The accounts of one accepted step of length `step` with local error `err`, after which
/// the propagated vector has 2-norm `beta` (beta0 at the start) and mass `mass` (mass0).
inline void record_step(TransientResult& r, double step, double err, double beta, double beta0, double mass,
                        double mass0) {
  ++r.steps;
  r.step_min = std::min(r.step_min, step);
  r.step_max = std::max(r.step_max, step);
  r.error_sum += err;
  r.error_max = std::max(r.error_max, err);
  r.hump = std::max(r.hump, beta / beta0);
  r.roundoff = std::max(r.roundoff, std::abs(mass - mass0));
}

/// A step size rounded to two significant digits (Expokit rounds its step sizes so).
double round_step(double t);

/// Column k of V orthogonalised against columns 0 .. k-1 (orthonormal) by block modified
/// Gram-Schmidt (detail::block_mgs, GMRES's: blocks of 4 columns, one pass over the column
/// per block).  Writes the coefficients to h[0 .. k-1] and returns ||p||_2 after.
double orthogonalise(Eigen::MatrixXd& V, int k, double* h);

/// The budget left before a step that needs `cost` products: empty when it may run,
/// else the note naming the option that ran out.
std::string budget_note(const TransientOptions& o, long steps, long applications, long cost, double t_now,
                        size_t produced, size_t total);

}  // namespace aqm::transient_detail
