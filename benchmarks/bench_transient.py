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
       system to t = 1e4: krylov, rational_krylov and uniformization at tol 1e-8 and
       scipy.sparse.linalg.expm_multiply on the same generator, each checked against a
       uniformization run at tol 1e-11 (L1 distance; its truncation error is a bound).  A
       run whose error is above 1e-6 is not ranked.  Every run is a separate process under
       a wall-clock limit (--limit); --runs picks some of them (the reference always runs).
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


def _ctmc_run(name: str, out: str, q) -> None:
    import aqmchain
    from aqmchain import _core

    chain = aqmchain.build_chain(ctmc_model())
    t = time.perf_counter()
    if name == "scipy":
        import scipy.sparse.linalg as sla

        G = aqmchain.transition_matrix(chain)
        law, mv, steps = np.asarray(sla.expm_multiply(G.T.tocsr() * T_CTMC, _core.empty_system_law(chain))), None, None
    else:
        method, tol = name.split(":")
        r = aqmchain.solve_transient(chain, [T_CTMC], method=method, tol=float(tol), max_steps=10**7)
        law, mv, steps = r.final_law, r.info.matvecs, r.info.iterations
    sec = time.perf_counter() - t
    np.save(out, law)
    q.put({"seconds": sec, "matvecs": mv, "steps": steps, "states": chain.n, "nnz": chain.nnz})


CTMC_RUNS = ("uniformization:1e-11", "krylov:1e-8", "rational_krylov:1e-8", "uniformization:1e-8", "scipy")


def bench_ctmc(limit: float, names=CTMC_RUNS) -> list[str]:
    import multiprocessing as mp
    from pathlib import Path

    build = Path(__file__).resolve().parents[1] / "build"
    build.mkdir(exist_ok=True)
    runs = {}
    # the reference is uniformization at tol 1e-11: its truncation error is a bound, not an estimate
    for name in ["uniformization:1e-11"] + [x for x in names if x != "uniformization:1e-11"]:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        out = str(build / f"bench_transient_{name.replace(':', '_')}.npy")
        p = ctx.Process(target=_ctmc_run, args=(name, out, q))
        p.start()
        p.join(limit)
        if p.is_alive():
            p.kill()
            p.join()
            runs[name] = None
        else:
            res = q.get()
            res["law"] = np.load(out)
            runs[name] = res
        print(name, None if runs[name] is None else runs[name]["seconds"], flush=True)
    ref = runs["uniformization:1e-11"]["law"] if runs["uniformization:1e-11"] else None
    scipy_s = runs["scipy"]["seconds"] if runs["scipy"] else None
    lines = ["| case | states | nnz | method | seconds | products | steps | L1 error vs reference | vs SciPy |",
             "|" + "---|" * 9]
    info = next(r for r in runs.values() if r)
    for name, r in runs.items():
        label = {"uniformization:1e-11": "reference: uniformization, tol 1e-11", "scipy": "scipy expm_multiply"}.get(
            name, "aqmchain " + name.replace(":", ", tol "))
        if r is None:
            lines.append(f"| ctmc SSMP K = 4, t = 1e4 | {info['states']} | {info['nnz']} | {label} | "
                         f"stopped at the {limit:.0f} s limit | | | | |")
            continue
        err = float(np.abs(r["law"] - ref).sum()) if ref is not None and "1e-11" not in name else 0.0
        ok = ref is not None and err <= 1e-6
        if name.startswith(("scipy", "uniformization:1e-11")):
            speed = ""
        elif not ok:
            speed = "not ranked"
        elif scipy_s is not None:
            speed = f"{scipy_s / r['seconds']:.1f}x"
        else:
            speed = f"> {limit / r['seconds']:.1f}x (SciPy stopped at the limit)"
        lines.append(f"| ctmc SSMP K = 4, t = 1e4 | {info['states']} | {info['nnz']} | {label} | {r['seconds']:.1f} | "
                     f"{r['matvecs'] if r['matvecs'] is not None else '—'} | "
                     f"{r['steps'] if r['steps'] is not None else '—'} | {err:.1e} | {speed} |")
    print("\n".join(lines), flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["step", "ctmc"], choices=["step", "ctmc"])
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--limit", type=float, default=1200, help="wall-clock limit per ctmc run (s)")
    ap.add_argument("--runs", nargs="+", default=list(CTMC_RUNS), choices=list(CTMC_RUNS),
                    help="ctmc runs (method:tol or scipy; the reference uniformization:1e-11 always runs)")
    args = ap.parse_args()
    for case in args.cases:
        lines = bench_step() if case == "step" else bench_ctmc(args.limit, args.runs)
        if not args.no_docs:
            write_block(f"transient_{case}", "\n".join(lines))


if __name__ == "__main__":
    main()
