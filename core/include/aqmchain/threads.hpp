// Threads of the core's parallel loops (OpenMP: products with P, Krylov and
// Gauss-Seidel sweeps on large chains).  The simulator takes its thread count
// from SimOptions::threads instead.
#pragma once

namespace aqm {

/// A loop over more items than this (states, rows) runs over the threads; a shorter one on one
/// (its threads would cost more than they save).
constexpr long long kParallelLoopItems = 50000;

/// Use at most n threads in the parallel loops (n >= 1); returns the previous
/// setting.  Without OpenMP the core is serial and this returns 1.
int set_num_threads(int n);
/// The current setting (1 without OpenMP).
int num_threads();

/// Threads for the parallel loop about to start: the setting, lowered to the cores that no
/// other process is running on now.  On a laptop or a shared node another process may hold
/// a core; a loop that waits at its end for a thread that is not scheduled costs a time
/// slice, so a two-thread solve would run slower than a one-thread one.  The cores come from
/// the kernel's count of runnable tasks (Linux: /proc/loadavg, less this process's own
/// running threads), read at most every 20 ms; one busy reading lowers the count at once,
/// two idle readings in a row raise it again.  Off (the setting is used as it is) with
/// AQMCHAIN_ADAPTIVE_THREADS=0, with OMP_WAIT_POLICY=active (the machine is the caller's
/// alone), or where the counts cannot be read.
int loop_threads();

/// Threads for a loop whose threads each fill a part of their own (a count per row, a table):
/// loop_threads(), at most `cap`; 1 for at most kParallelLoopItems items, and 1 inside a parallel region
/// (without nesting the loop runs on one thread, and the parts would only take memory).
int part_threads(long long items, int cap);

}  // namespace aqm
