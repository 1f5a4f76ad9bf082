"""First-passage benchmark: time to overflow of the seeds' GEO RED chain (alpha 0.5, mu 0.5,
buffer 250, RED 100/200/0.1, w = 0.002, K = 4; about 235k states) from the empty system,
T = first slot with queue >= 250, P(T <= t) on 61 log-spaced times up to 1e6 and E[T].

    .venv/bin/python benchmarks/bench_passage.py              # writes docs/performance.md
    .venv/bin/python benchmarks/bench_passage.py --no-docs

Rows, all in one run on the same matrix:
  - aqmchain passage, auto (1024 exact slots, then one shift-and-invert Krylov space);
  - aqmchain passage, step (exact) up to --check slots: the reference for the outputs it reaches;
  - SciPy: csr products u <- u P_NN slot by slot (the same exact recursion), timed over
    --scipy-slots slots and extrapolated to 1e6 (marked as such), and spsolve for the mean
    (I - P_NN) m = 1 against aqmchain's preconditioned GMRES.
A run that did not converge is reported with its status and not ranked.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench_stationary import model_for, write_block

TARGET = "queue>=250"


def main() -> None:
    import scipy.sparse as sp
    import scipy.sparse.linalg as sla

    import aqmchain

    ap = argparse.ArgumentParser()
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--tol", type=float, default=1e-10)
    ap.add_argument("--check", type=int, default=16384, help="slots of the exact stepping reference")
    ap.add_argument("--scipy-slots", type=int, default=2000, help="slots timed for SciPy's stepping")
    args = ap.parse_args()

    chain = aqmchain.build_chain(model_for("geo_k4"))
    times = aqmchain.time_grid("log", 1, 1e6, 61, integer=True)
    rows = []

    t = time.perf_counter()
    status = "converged"
    try:
        r = aqmchain.passage(chain, TARGET, times=times, tol=args.tol)
    except aqmchain.NonConvergenceError as exc:
        r, status = exc.result, "NOT converged: " + r_note(exc)
    sec_auto = time.perf_counter() - t
    i = r.info

    t = time.perf_counter()
    check_times = times[times <= args.check]
    s = aqmchain.passage(chain, TARGET, times=check_times, method="step")
    sec_step = time.perf_counter() - t
    common = np.isin(r.times, s.times)
    a, b = r.cdf[common], s.cdf[np.isin(s.times, r.times)]
    diff = float(np.max(np.abs(a - b))) if common.any() else float("nan")
    pos = b > 0
    rel = float(np.max(np.abs(a[pos] - b[pos]) / b[pos])) if pos.any() else float("nan")
    beyond = r.times > 1024

    # SciPy on the same matrix: the non-target block
    P = aqmchain.transition_matrix(chain)
    from aqmchain._targets import parse_target
    from aqmchain.passage import target_mask

    mask = target_mask(chain, parse_target(TARGET))
    N = ~mask
    PNN = P[N][:, N].tocsr()
    At = PNN.T.tocsr()
    u = np.asarray(aqmchain._core.empty_system_law(chain))[N]
    t = time.perf_counter()
    for _ in range(args.scipy_slots):
        u = At @ u
    per_slot = (time.perf_counter() - t) / args.scipy_slots
    t = time.perf_counter()
    B = sp.identity(PNN.shape[0], format="csc") - PNN.tocsc()
    lu = sla.splu(B)
    m = lu.solve(np.ones(PNN.shape[0]))
    sec_spsolve = time.perf_counter() - t
    m_refined = m + lu.solve(np.ones(PNN.shape[0]) - B @ m)  # one step of iterative refinement
    p0 = np.asarray(aqmchain._core.empty_system_law(chain))[N]
    mean_scipy, mean_refined = float(p0 @ m), float(p0 @ m_refined)

    head = ["| run | states | nnz | seconds | outputs | products / solves | cdf error | E[T] | note |",
            "|" + "---|" * 9]
    rows.append(f"| aqmchain passage auto ({i.method}), tol {args.tol:g}, to t = 1e6 | {chain.n} | {chain.nnz} | "
                f"{sec_auto:.1f} | {len(r.times)} | {i.iterations} slots, {i.solves} solves "
                f"({i.gmres_iterations} GMRES steps), basis {i.basis} | estimate {i.error_bound:.1e}; "
                f"vs exact stepping (t <= {args.check}) {diff:.1e} (relative {rel:.1e}) | {r.mean:.8g} (GMRES relative residual {i.mean_residual:.1e}) | {status}; "
                f"{int(beyond.sum())} outputs from the Krylov space |")
    rows.append(f"| aqmchain passage step (exact), to t = {args.check} | {chain.n} | {chain.nnz} | {sec_step:.1f} | "
                f"{len(s.times)} | {s.info.iterations} slots | reference | {s.mean:.6g} | "
                f"{sec_step / max(s.info.iterations, 1) * 1e6:.0f} µs per slot |")
    rows.append(f"| SciPy csr u P_NN per slot, to t = 1e6 | {chain.n} | {chain.nnz} | {per_slot * 1e6:.0f} "
                f"(extrapolated from {args.scipy_slots} slots) | | 1e6 products | exact | | not run to the end |")
    rows.append(f"| SciPy splu (I - P_NN) m = 1 | {PNN.shape[0]} | {PNN.nnz} | {sec_spsolve:.1f} | | 1 direct solve | "
                f"| {mean_scipy:.8g} | relative difference to aqmchain's E[T] "
                f"{abs(mean_scipy - r.mean) / mean_scipy:.1e}; after one refinement step {mean_refined:.8g} "
                f"({abs(mean_refined - r.mean) / mean_refined:.1e}) |")
    lines = head + rows
    print("\n".join(lines), flush=True)
    if status != "converged":
        print("the auto run did not converge: not ranked", flush=True)
    if not args.no_docs:
        write_block("passage_geo", "\n".join(lines))


def r_note(exc: Exception) -> str:
    return str(exc).split(": ", 1)[-1][:120]


if __name__ == "__main__":
    main()
