// Threads of the core's parallel loops (OpenMP: products with P, Krylov and
// Gauss-Seidel sweeps on large chains).  The simulator takes its thread count
// from SimOptions::threads instead.
#pragma once

namespace aqm {

/// Use at most n threads in the parallel loops (n >= 1); returns the previous
/// setting.  Without OpenMP the core is serial and this returns 1.
int set_num_threads(int n);
/// The current setting (1 without OpenMP).
int num_threads();

}  // namespace aqm
