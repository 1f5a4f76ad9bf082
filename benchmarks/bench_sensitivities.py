"""Sensitivities benchmark: one gradient (every parameter, one metric) against the solve, and
the derivatives against central finite differences of full solves, on the chains of
benchmarks/bench_stationary.py (GEO K = 4, SSMP K = 4).

    .venv/bin/python benchmarks/bench_sensitivities.py --cases geo_k4 ssmp_k4 --fd
    .venv/bin/python benchmarks/bench_sensitivities.py --differences chains rows   # before / after

The finite differences solve the model at theta +- H and theta +- 2H (H = 1e-4 theta) on the
solve's grid; |D(2H) - D(H)| estimates their truncation error (Richardson), and the solves'
round-off enters as residual x max|y| / H (y the metric's adjoint vector).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> None:
    import aqmchain
    from aqmchain import sensitivity as S
    from bench_stationary import model_for

    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["geo_k4", "ssmp_k4"])
    ap.add_argument("--metric", default="mean_queue", help="a metric, or all (every metric of the result at once)")
    ap.add_argument("--method", default="auto", choices=S.SENSITIVITY_METHODS)
    ap.add_argument("--differences", nargs="+", default=["rows"], choices=S.SENSITIVITY_DIFFERENCES,
                    help="how dP/dtheta is formed; several: one gradient each, in this order, in the same run")
    ap.add_argument("--fd", action="store_true", help="also check against finite differences of full solves")
    ap.add_argument("--fd-params", nargs="+", default=["aqm.p_max", "service.mu", "source.alpha", "source.q"])
    ap.add_argument("--fd-step", type=float, default=1e-4, help="H relative to the parameter (1e-4)")
    args = ap.parse_args()
    if args.fd and args.metric == "all":
        ap.error("--fd checks one metric: give --metric NAME")
    rows = []
    for case in args.cases:
        model = model_for(case)
        t = time.perf_counter()
        r = aqmchain.solve_stationary(model, method="krylov", tol=1e-13)
        solve = time.perf_counter() - t
        for differences in args.differences:
            t = time.perf_counter()
            every = args.metric == "all"
            sens = r.sensitivities(metrics=None if every else [args.metric], method=args.method,
                                   differences=differences)
            grad = time.perf_counter() - t
            shown = list(sens.metrics) if every else [args.metric]
            row = {"case": case, "states": int(r.states), "differences": differences, "solve_s": solve,
                   "gradient_s": grad, "ratio": grad / solve, "parameters": len(sens.parameters),
                   "metrics": len(shown), "adjoint_solves": sens.info.get("adjoint_solves"),
                   "adjoint": sens.info["method"],
                   "adjoint_iterations": {m: sens.info["iterations"][m] for m in shown},
                   "solve_iterations": r.info.iterations, "seconds": sens.info["seconds"],
                   "residual": max(sens.info["residuals"][m] for m in shown), "formed": sens.info["differences"],
                   "notes": sens.notes, "values": {m: sens.values[m] for m in shown}}
            print(json.dumps(row, indent=1), flush=True)
        if args.fd:
            doc = S._frozen_doc(r.chain)
            y = abs(sens.adjoints[args.metric]).max()
            for p in args.fd_params:
                if p not in sens.parameters or p in sens.notes:
                    continue
                theta = sens.parameters[p]
                H = args.fd_step * abs(theta)
                f, res = {}, r.info.residual
                for s in (-2, -1, 1, 2):
                    d = copy.deepcopy(doc)
                    S._move(d, p, s * H)
                    rs = aqmchain.solve_stationary(aqmchain.model_from_dict(d)[0], method="krylov", tol=1e-13)
                    f[s], res = getattr(rs, args.metric), max(res, rs.info.residual)
                d1 = (f[1] - f[-1]) / (2 * H)
                d2 = (f[2] - f[-2]) / (4 * H)
                dr = (4 * d1 - d2) / 3  # Richardson: the H^2 term removed
                got = sens.values[args.metric][p]
                print(f"  {case} {p}: adjoint {got:.10g}  fd {d1:.10g} (Richardson {dr:.10g})  rel diff "
                      f"{abs(got - d1) / abs(d1):.2e} ({abs(got - dr) / abs(dr):.2e})  fd truncation "
                      f"~{abs(d2 - d1) / 3 / abs(d1):.1e}  round-off ~{res * y / H / abs(d1):.1e}", flush=True)
        rows.append(row)


if __name__ == "__main__":
    main()
