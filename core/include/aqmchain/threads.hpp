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

/// Threads for the parallel loop about to start: the setting, lowered to the cores that are
/// idle now.  On a laptop or a shared node another process may hold a core; a loop that
/// waits at its end for a thread that is not scheduled costs a time slice, so a two-thread
/// solve would run several times slower than a one-thread one.  Idle cores are read from
/// the kernel's count of runnable tasks (Linux: /proc/loadavg) at most every 20 ms; one
/// busy reading lowers the count at once, two idle readings in a row raise it again.  On
/// when the threads wait passively (OMP_WAIT_POLICY=passive, which `import aqmchain` sets
/// unless the user set another value); otherwise, or where that count cannot be read, the
/// setting is used as it is.
int loop_threads();

}  // namespace aqm
