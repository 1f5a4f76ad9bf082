"""Transient benchmarks (aqmchain against SciPy on the same generator, in the same run).

    .venv/bin/python benchmarks/bench_transient.py                  # both cases, writes docs/performance.md
    .venv/bin/python benchmarks/bench_transient.py --cases ctmc --no-docs

step:  exact slotted stepping of the seeds' GEO RED chain (alpha 0.5, mu 0.5, buffer 250,
       RED 100/200/0.1, w = 0.002, K = 4; 235k states) from the empty system to t = 1e6 on a
       log grid of 61 times, with steady-state detection (steady_tol 1e-10); the distance of
       the last law to the stationary solution is reported.
ctmc:  the continuous-time counterpart of the seeds' SSMP RED model (the SSMP modulator
       P_M read as the MMPP generator P_M - I with the same arrival rates, exponential
       service mu = 0.5, w = 0.002 per unit time, K = 4; about 1.2M states) from the empty
       system to t = 1e4: krylov and uniformization at tol 1e-8 and
       scipy.sparse.linalg.expm_multiply on the same generator, each checked against a
       krylov run at tol 1e-11 (L1 distance).  A run whose error is above 1e-6 is not ranked.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench_stationary import command_line, model_for, write_block

T_CTMC = 1e4


def ctmc_model():
    import aqmchain

    s = aqmchain.Source.ssmp(5, 1.927562, 31.6)
    Q = (np.array(s.matrix) - np.eye(5)).tolist()
    src = aqmchain.Source.mmpp(Q, list(s.arrival))
    return aqmchain.Model(buffer=250, source=src, service=aqmchain.Service.exponential(0.5),
                          aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(100, 200, 0.1), w=0.002),
                          grid=aqmchain.GridSpec(k=4), time="continuous")


def bench_step() -> list[str]:
    import aqmchain

    chain = aqmchain.build_chain(model_for("geo_k4"))
    times = aqmchain.time_grid("log", 1, 1e6, 61, integer=True)
    t = time.perf_counter()
    r = aqmchain.solve_transient(chain, times, steady_tol=1e-10)
    sec = time.perf_counter() - t
    st = aqmchain.solve_stationary(chain, response="none")
    dist = float(np.abs(r.final_law - st.pi).sum())
    row = (f"| step, GEO K = 4 | {chain.n} | {chain.nnz} | to t = 1e6 (61 log-spaced outputs) | {sec:.1f} | "
           f"{r.info.iterations} | steady at t = {r.info.steady_at[0]:.0f} | {dist:.1e} |")
    print(row, flush=True)
    return ["| case | states | nnz | run | seconds | products | steady state | L1 distance to stationary |",
            "|" + "---|" * 8, row]


def bench_ctmc() -> list[str]:
    import scipy.sparse.linalg as sla

    import aqmchain
    from aqmchain import _core

    chain = aqmchain.build_chain(ctmc_model())
    G = aqmchain.transition_matrix(chain)
    p0 = _core.empty_system_law(chain)
    runs = {}
    for name, method, tol in (("reference (krylov, tol 1e-11)", "krylov", 1e-11), ("aqmchain krylov", "krylov", 1e-8),
                              ("aqmchain uniformization", "uniformization", 1e-8)):
        t = time.perf_counter()
        r = aqmchain.solve_transient(chain, [T_CTMC], method=method, tol=tol, max_steps=10**7)
        runs[name] = (time.perf_counter() - t, r.final_law, r.info.matvecs, r.info.iterations)
        print(name, runs[name][0], runs[name][2], flush=True)
    t = time.perf_counter()
    At = G.T.tocsr()
    x = sla.expm_multiply(At * T_CTMC, p0)
    runs["scipy expm_multiply"] = (time.perf_counter() - t, np.asarray(x), None, None)
    print("scipy", runs["scipy expm_multiply"][0], flush=True)
    ref = runs["reference (krylov, tol 1e-11)"][1]
    scipy_s = runs["scipy expm_multiply"][0]
    lines = ["| case | states | nnz | method | seconds | products | steps | L1 error vs reference | vs SciPy |",
             "|" + "---|" * 9]
    for name, (sec, law, mv, steps) in runs.items():
        err = float(np.abs(law - ref).sum()) if "reference" not in name else 0.0
        ok = err <= 1e-6
        speed = "" if name.startswith(("scipy", "reference")) else (f"{scipy_s / sec:.1f}x" if ok else "not ranked")
        lines.append(f"| ctmc SSMP K = 4, t = 1e4 | {chain.n} | {chain.nnz} | {name} | {sec:.1f} | "
                     f"{mv if mv is not None else '—'} | {steps if steps is not None else '—'} | "
                     f"{err:.1e} | {speed} |")
    print("\n".join(lines), flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["step", "ctmc"], choices=["step", "ctmc"])
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    for case in args.cases:
        lines = bench_step() if case == "step" else bench_ctmc()
        if not args.no_docs:
            write_block(f"transient_{case}", "\n".join(lines))


if __name__ == "__main__":
    main()
