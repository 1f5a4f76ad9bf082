"""One pass over the rows of P at theta +- h (the sensitivities' differences along one
parameter, docs/sensitivities.md), timed alone: the core's chain_difference on a solved
chain, on one and on two threads, best and median of --reps calls.

    .venv/bin/python benchmarks/bench_row_pass.py --cases ssmp_k4 --params aqm.p_max service.mu
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> None:
    import aqmchain
    from aqmchain import _core
    from aqmchain import sensitivity as S
    from bench_stationary import model_for

    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["ssmp_k4"])
    ap.add_argument("--params", nargs="+", default=["aqm.p_max", "service.mu"])
    ap.add_argument("--adjoints", type=int, default=1, help="adjoint vectors the pass multiplies into (J)")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    for case in args.cases:
        r = aqmchain.solve_stationary(model_for(case), method="krylov", tol=1e-13)
        chain, pi = r.chain, np.asarray(r.pi)
        Y = np.random.default_rng(1).random((chain.n, args.adjoints))
        doc = S._frozen_doc(chain)
        for threads in (1, 2):
            previous = _core.set_num_threads(threads)
            for key in args.params:
                theta = S._get(doc, key)
                h = 1e-4 * abs(theta)
                plus = S._model_at(chain.model, doc, key, h, True)
                minus = S._model_at(chain.model, doc, key, -h, True)
                adjoints = Y
                try:  # builds before the n x J matrix took the adjoint vectors as a list
                    _core.chain_difference(chain, plus, minus, "approx", h, pi, Y, chain.n)
                except (TypeError, ValueError):
                    adjoints = [np.ascontiguousarray(Y[:, j]) for j in range(Y.shape[1])]
                seconds = []
                for _ in range(args.reps):
                    t = time.perf_counter()
                    d = _core.chain_difference(chain, plus, minus, "approx", h, pi, adjoints, chain.n)
                    seconds.append(time.perf_counter() - t)
                print(json.dumps({"case": case, "states": int(chain.n), "param": key, "threads": threads,
                                  "adjoints": args.adjoints, "best_s": min(seconds),
                                  "median_s": float(np.median(seconds)), "valid": bool(d["valid"])}), flush=True)
            _core.set_num_threads(previous)


if __name__ == "__main__":
    main()
