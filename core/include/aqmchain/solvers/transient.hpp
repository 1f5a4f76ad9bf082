// Transient exponential kernels: p(t) = p0 exp(t G) for a generator G (rows sum
// to 0, off-diagonals >= 0).  Probability vectors are rows, so the product the
// kernels use is y = x G (GeneratorOperator::apply).
//
// Three kernels, written to be checked against each other:
//   - krylov_expv: Arnoldi projection with a small exponential of the augmented
//     Hessenberg matrix by irreducible Pade (6,6) with scaling and squaring, a
//     local error estimate and step-size control (after Sidje, "Expokit: a
//     software package for computing matrix exponentials", ACM TOMS 1998);
//   - rational_krylov_expv: shift-and-invert Arnoldi on (I - gamma G)^{-1} (after
//     van den Eshof and Hochbruck, "Preconditioning Lanczos approximations to
//     the matrix exponential", SIAM J. Sci. Comput. 2006), whose steps are not
//     bounded by ||G||; its linear systems are solved by GMRES with a block
//     Gauss-Seidel preconditioner;
//   - uniformization: p0 sum_k Poisson(k; Lambda t) P^k with P = I + G / Lambda,
//     Poisson weights with left and right truncation points (after Fox and Glynn,
//     "Computing Poisson probabilities", CACM 1988).
// Both step through a sorted grid of output times without restarting from 0, and
// hand each output to an observer.  A budget that runs out is a status
// (NotConverged) with the partial result, never an exception.  docs/conventions.md,
// "Exponential kernels", describes the step control and the accounts.
#pragma once

#include <Eigen/Dense>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "aqmchain/operators/operator.hpp"
#include "aqmchain/solvers/report.hpp"
#include "aqmchain/state/descriptor.hpp"

namespace aqm {

class Chain;

enum class TransientMethod {
  Auto,            ///< chosen by the caller's layer (the raw-generator entry point runs Krylov)
  Step,            ///< exact p0 P^t of a slotted chain (dispatched by the caller's layer)
  Krylov,          ///< Arnoldi projection with step-size control
  RationalKrylov,  ///< shift-and-invert Arnoldi on (I - gamma G)^{-1}, preconditioned inner solves
  Uniformization,  ///< Poisson-weighted powers of P = I + G / Lambda
};
/// Every method, in the order the docs list them (names from to_string).
inline constexpr TransientMethod kAllTransientMethods[] = {TransientMethod::Auto, TransientMethod::Step,
                                                          TransientMethod::Krylov, TransientMethod::RationalKrylov,
                                                          TransientMethod::Uniformization};
std::string to_string(TransientMethod);
/// The method called `name` ("auto", "step", "krylov", "rational_krylov", "uniformization");
/// OptionError otherwise.
TransientMethod transient_method_from(const std::string& name);

/// y = x G for a generator G, with the two norms the kernels need and a counter.
struct GeneratorOperator {
  int32_t n = 0;
  /// Upper bound on ||G||_1 = ||G^T||_inf, the largest absolute column sum of G
  /// (Expokit's anorm for the operator x -> x G).
  double norm1 = 0.0;
  /// Lambda >= max_i |G_ii| (the uniformisation rate; 0 only for G = 0).
  double rate = 0.0;
  /// The product y = x G (y does not alias x); called through apply().
  std::function<void(const double* x, double* y)> product;

  /// The matrix behind the product, for the kernel that solves linear systems
  /// with it (rational_krylov): M in CSR with rows = from-state, viewed (the
  /// arrays must outlive the operator); G = M, or G = M - I when M is a slotted
  /// chain's P.  Empty (rowptr null) for an operator given only as a product.
  /// The preconditioner's blocks: `blocks` when set (block_of[state], numbered
  /// from 0), else the descriptor's blocks (in_block_partition, operator.hpp) when
  /// `space` is set, else one state per block (point Gauss-Seidel).
  struct Matrix {
    const int32_t* rowptr = nullptr;
    const int32_t* col = nullptr;
    const double* val = nullptr;
    bool slotted = false;          ///< M = P of a slotted chain: G = P - I
    const StateSpace* space = nullptr;                     ///< the descriptor of M's states, or null
    const std::vector<std::vector<int32_t>>* labels = nullptr;  ///< their labels (with `space`)
    std::vector<int32_t> blocks;   ///< block of each state, or empty
  };
  Matrix matrix;

  int32_t rows() const { return n; }
  /// y = x G, counted.
  void apply(const double* x, double* y) const {
    product(x, y);
    ++applications_;
  }
  long applications() const { return applications_; }
  void reset_applications() const { applications_ = 0; }

  /// A generator given as CSR arrays (rows = "from" state), viewed (not copied):
  /// the arrays must outlive the result.  Checks the arrays (ModelError naming
  /// 'rowptr', 'col' or 'val'): sizes, column range, off-diagonals >= 0, and row
  /// sums 0 within `row_tol` times the row's largest entry.
  static GeneratorOperator from_csr(int32_t n, const int32_t* rowptr, const int32_t* col, const double* val,
                                    double row_tol = 1e-10);
  /// G of a chain's operator (its generator, or P - I of a slotted chain) through a
  /// transposed copy of the matrix: the product is a gather over rows of G^T,
  /// split over threads.  Owns the copy (about nnz x 12 bytes); `matrix` views
  /// the chain's own arrays, so the chain must outlive the result.  (A Chain
  /// converts to its operator.)
  static GeneratorOperator from_operator(const MarkovOperator& op);

 private:
  mutable long applications_ = 0;
};

struct TransientOptions {
  /// Krylov: accepted steps satisfy err_loc <= 1.2 tau tol (Euclidean norm, per
  /// unit time, Expokit's criterion).  Rational Krylov: the estimated L1 error of
  /// every step (and of every output inside it) is at most tol.  Uniformisation:
  /// the Poisson truncation error over [0, last time] is at most tol (L1 norm).
  /// In (0, 0.1].
  double tol = 1e-8;
  /// Krylov basis size m, in [1, 1000]; at most the number of states (clamped).
  /// Rational Krylov: the largest basis (a basis stops growing once it reaches
  /// its target step); it needs at least 2.
  int krylov_dim = 30;
  /// Budget on steps (Krylov: accepted steps; uniformisation: Poisson chunks), in [1, 1e9].
  long max_steps = 100000;
  /// Budget on products x G, in [0, 1e12] (0: no limit).  Rational Krylov counts
  /// the products inside its linear solves.
  long max_applications = 0;
  /// Krylov happy breakdown: h_{j+1,j} <= breakdown * norm1 (relative to the
  /// generator's norm, so to the norm of the step tau G as well), in [0, 1e-3].
  /// Rational Krylov: h_{j+1,j} <= breakdown (its operator (I - gamma G)^{-1} has
  /// L1 norm 1).
  double breakdown = 1e-12;
  /// Rational Krylov: the shift gamma is shift_ratio times the step the basis
  /// aims at (gamma ~ tau / 10 in the literature), in [1e-3, 10].
  double shift_ratio = 0.1;
  /// Rational Krylov: GMRES steps allowed to one linear solve, in [1, 1e6];
  /// a solve that does not reach its tolerance within them stops the run
  /// (status not_converged).
  long inner_max_iter = 1000;
  /// Outputs (observer and result) are projected on probability vectors:
  /// negatives clipped, renormalised to sum 1.  The propagated vector is not.
  bool project = true;
  /// OptionError naming the option, the bound and the value.
  void validate() const;
};

/// The accounts of a transient run (the report's residual is error_sum,
/// iterations are steps, operator_applications are products x G).
struct TransientResult : ConvergenceReport<TransientMethod> {
  std::vector<double> p;        ///< the vector at t_reached (projected when options.project)
  double t_reached = 0.0;       ///< the last time the kernel reached (the end time when converged)
  size_t outputs = 0;           ///< times[0 .. outputs) were produced (all when converged)
  long steps = 0;               ///< accepted steps (Krylov) / Poisson chunks (uniformisation)
  long rejected_steps = 0;      ///< Krylov step sizes rejected by the error test
  double error_sum = 0.0;       ///< sum of local error estimates / of truncation bounds
  double error_max = 0.0;       ///< largest local error estimate / truncation bound
  double hump = 1.0;            ///< max ||p(s)||_2 / ||p0||_2 over the steps (Expokit's hump)
  double roundoff = 0.0;        ///< max |sum p(s) - 1| of the propagated (unprojected) vector
  double clipped_mass = 0.0;    ///< largest negative mass clipped at an output
  double step_min = 0.0, step_max = 0.0;  ///< smallest and largest accepted step
  // Krylov
  int krylov_dim = 0;           ///< basis size used (options.krylov_dim clamped to the states)
  long exponentials = 0;        ///< small (Hessenberg) exponentials evaluated
  long squarings = 0;           ///< squarings in their scaling and squaring
  bool breakdown = false;       ///< a happy breakdown occurred
  int breakdown_dim = 0;        ///< basis size at the first breakdown
  double breakdown_time = 0.0;  ///< time of the first breakdown
  // Rational Krylov (exponentials, squarings, krylov_dim as above; rejected_steps
  // counts bases dropped because they reached no output time)
  long inner_solves = 0;        ///< linear solves with I - gamma G (one per basis vector)
  long inner_iterations = 0;    ///< GMRES steps over all solves
  long inner_iterations_max = 0;  ///< GMRES steps of the longest solve
  double inner_residual_max = 0.0;  ///< largest L1 residual of a solve (right-hand sides of 2-norm 1)
  long shifts = 0;              ///< preconditioner set-ups (one per distinct gamma)
  double gamma_min = 0.0, gamma_max = 0.0;  ///< smallest and largest shift used
  int basis_max = 0;            ///< largest basis built
  // Uniformisation
  double rate = 0.0;            ///< Lambda
  double poisson_mean_max = 0.0;  ///< largest Poisson mean Lambda dt of a chunk
  long poisson_left = 0, poisson_right = 0;  ///< truncation points of that chunk
};

/// Called once per produced output time: index k into `times`, the time, and the
/// n entries of p(t) (projected when options.project).  The pointer is valid only
/// during the call.
using TransientObserver = std::function<void(size_t k, double t, const double* p)>;

/// p(t) = p0 exp(t G) at each of `times` (sorted, >= 0, finite) by Krylov steps.
/// p0: n entries, finite, >= 0, summing to 1 within 1e-8 (ModelError naming 'p0'
/// otherwise); bad times give ModelError naming 'times'.
TransientResult krylov_expv(const GeneratorOperator& G, const std::vector<double>& p0,
                            const std::vector<double>& times, const TransientOptions& options = {},
                            const TransientObserver& observer = {});

/// The same by shift-and-invert (rational) Krylov steps.  G must carry its matrix
/// (from_operator or from_csr; OptionError otherwise); krylov_dim >= 2.
TransientResult rational_krylov_expv(const GeneratorOperator& G, const std::vector<double>& p0,
                                     const std::vector<double>& times, const TransientOptions& options = {},
                                     const TransientObserver& observer = {});

/// The same by uniformisation.
TransientResult uniformization(const GeneratorOperator& G, const std::vector<double>& p0,
                               const std::vector<double>& times, const TransientOptions& options = {},
                               const TransientObserver& observer = {});

/// Krylov, RationalKrylov or Uniformization by `method`; Auto runs Krylov
/// (requested = Auto); Step throws OptionError (it needs a slotted chain's P,
/// not a generator).
TransientResult expm_multiply(const GeneratorOperator& G, const std::vector<double>& p0,
                              const std::vector<double>& times, TransientMethod method,
                              const TransientOptions& options = {}, const TransientObserver& observer = {});

/// exp(A) of a dense matrix by irreducible Pade (6,6) with scaling and squaring;
/// `squarings` receives the number of squarings.  Non-finite entries: ModelError.
Eigen::MatrixXd expm_pade(const Eigen::MatrixXd& A, int* squarings = nullptr);

/// Poisson(q) weights w_k for k in [left, right] with the tails outside bounded:
/// sum_{k < left} + sum_{k > right} <= bound <= eps (left = 0 when that tail is empty).
struct PoissonWeights {
  long left = 0, right = 0;
  std::vector<double> w;  ///< w[k - left], summing to 1 (normalised over [left, right])
  double bound = 0.0;     ///< upper bound on the mass outside [left, right]
};
/// q >= 0 finite, eps in (0, 0.5].  Safe for any q (weights from the mode outwards, normalised).
PoissonWeights poisson_weights(double q, double eps);

}  // namespace aqm
