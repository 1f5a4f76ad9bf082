// Poisson's equation of a chain (docs/sensitivities.md, docs/passage.md):
//
//   (I - P) h = b  (slotted)        -G h = b  (continuous time, G the generator)
//
// for column vectors b.  The matrix is singular (its null space holds the constants), so
// h is fixed by h_k = 0 at a state k of the chain's only closed class and the equation of
// row k is dropped: the remaining system is nonsingular (I - P without the row and
// column of a recurrent state is a nonsingular M-matrix) and its solution solves the full
// equation exactly when pi b = 0 (pi the stationary law).  Each right-hand side is one
// restarted GMRES solve of the transposed system, written as a row system, with the block
// Gauss-Seidel preconditioner of the stationary solvers.  Used by the adjoint solves of
// the sensitivities and by the rewards over [0, t) of continuous-time first passage.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aqmchain/solvers/report.hpp"
#include "aqmchain/state/chain.hpp"

namespace aqm {

struct PoissonSolution {
  Status status = Status::NotComputed;
  std::string note;                       ///< why a solve did not converge
  std::vector<std::vector<double>> h;     ///< one per right-hand side; h[k] = 0
  std::vector<double> residuals;          ///< ||b' - A' h'||_1 / ||b'||_1 of each (reduced system)
  int32_t fixed_state = -1;               ///< k
  long iterations = 0;                    ///< GMRES steps over all right-hand sides
  std::vector<long> iterations_each;      ///< GMRES steps of each right-hand side
  std::vector<std::pair<std::string, double>> seconds;  ///< setup, solves
  bool converged() const { return status == Status::Converged; }
};

/// h for every right-hand side of `rhs` (each of the chain's size); k: the fixed state
/// (-1: the chain's recurrent state).  tol: relative L1 residual of each reduced solve.
PoissonSolution solve_poisson(const Chain& chain, const std::vector<std::vector<double>>& rhs, int32_t k = -1,
                              double tol = 1e-13, long max_iter = 2000);

}  // namespace aqm
