"""Tail accuracy of the krylov solver against the direct (LU) solver on the same chain.

    .venv/bin/python benchmarks/tail_accuracy.py                       # geo_a04_k4, geo_k4, ssmp_k4
    .venv/bin/python benchmarks/tail_accuracy.py --cases geo_k4 --no-docs

For each case: the tail T(k) = P(q >= k) of the queue from both solves, and per decade
of the tail (T in [1e-d-1, 1e-d)) the worst relative error |T_krylov - T_direct| / T_direct.
Both solves run to tol = 1e-12 (krylov also to 1e-14, to show how the error scales with
the residual).  Writes a table to docs/performance.md between the BENCH:tails markers.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from bench_stationary import model_for, write_block


def decades(t_ref: np.ndarray, t: np.ndarray) -> dict[int, float]:
    out: dict[int, float] = {}
    for a, b in zip(t_ref, t):
        if not a > 0:
            continue
        d = int(math.floor(-math.log10(a)))
        out[d] = max(out.get(d, 0.0), abs(b - a) / a)
    return out


def main() -> None:
    import aqmchain

    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["geo_a04_k4", "geo_k4", "ssmp_k4"])
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    rows = []
    for case in args.cases:
        chain = aqmchain.build_chain(model_for(case), memory_limit_gb=20)
        ref = aqmchain.solve_stationary(chain, method="direct", tol=1e-12, response="none")
        for tol in (1e-12, 1e-14):
            r = aqmchain.solve_stationary(chain, method="krylov", tol=tol, response="none")
            err = decades(ref.queue_tail(), r.queue_tail())
            rows.append((case, tol, r.info.residual, ref.info.residual, err))
            print(case, tol, r.info.residual, {f"1e-{d}": f"{e:.1e}" for d, e in sorted(err.items())}, flush=True)
    # one column per three decades (the worst of the three)
    deepest = max(max(e) for *_, e in rows)
    groups = [range(g, min(g + 3, deepest + 1)) for g in range(0, deepest + 1, 3)]
    head = ["case", "krylov tol", "krylov residual", "direct residual"] + [
        f"T in [1e-{g[-1] + 1}, 1e-{g[0]})" for g in groups]
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case, tol, res, dres, err in rows:
        cells = [case, f"{tol:.0e}", f"{res:.1e}", f"{dres:.1e}"]
        for g in groups:
            have = [err[d] for d in g if d in err]
            cells.append(f"{max(have):.1e}" if have else "—")
        md.append("| " + " | ".join(cells) + " |")
    text = "\n".join(md)
    print(text)
    if not args.no_docs:
        write_block("tails", text)


if __name__ == "__main__":
    main()
