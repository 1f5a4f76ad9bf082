"""The coefficient search of "A RED modified weighted moving average for soft real-time
application" from a global design, timed: screening + multi-fidelity pattern search against
the plain multi-start search, and plain RED's w.

    .venv/bin/python benchmarks/bench_search.py --out out/search                 # both mu, ~15-40 min
    .venv/bin/python benchmarks/bench_search.py --out out/search --mus 0.25 --design 125

Scenario (as benchmarks/redwm_study.py): SSMP n = 5, q = 1.927562, a = 31.6, buffer 250, RED
100 / 200 / 0.1, mu = 0.25 or 0.5, the paper's box x in [0.001, 0.1], y, z in [0, 0.01].

The design: ``--design 1000`` is the paper's 10 x 10 x 10 start grid, ``125`` every other
point of it in each coordinate (5 x 5 x 5).  Each start is evaluated once on the coarse grid
(``grid.k = 1``), the best ``--screen`` are searched by Hooke and Jeeves there, the best
end points go on to k = 2 and to the model as given (``grid.k = 4``), searched on every level
(the score's differences near the optimum, a few tenths of a slot, are below the coarse
grids' discretisation error), with the discretisation error bar of the optimum.  The reference is the 12-start search of docs/redwm.md (the box
corner [0.0998, 0.0098, 0.0003], R = 734.29 at mu = 0.25): the script reports whether the
found optimum is within the search's last step of it and its value within the error bar.
Timings are wall seconds of this process; run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import aqmchain
from aqmchain.optimize import PAPER_GRID_STARTS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from redwm_study import REGION, model  # noqa: E402

LEVELS = [{"grid.k": 1, "grid.refine": "none"}, {"grid.k": 2, "grid.refine": "none"}]
STEP = [0.01, 0.001, 0.001]
MIN_STEP = [0.01 / 8, 0.001 / 8, 0.001 / 8]
#: the 12-start search's optimum (docs/redwm.md), mu = 0.25
REFERENCE = {0.25: ([0.0998, 0.0098, 0.0003], 734.29)}


def design(n: int) -> list[tuple[float, float, float]]:
    if n == 1000:
        return list(PAPER_GRID_STARTS)
    if n == 125:
        xs = sorted({p[0] for p in PAPER_GRID_STARTS})[::2]
        ys = sorted({p[1] for p in PAPER_GRID_STARTS})[::2]
        return [(x, y, z) for x in xs for y in ys for z in ys]
    raise SystemExit("--design must be 125 or 1000")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mus", type=float, nargs="+", default=[0.25, 0.5])
    ap.add_argument("--design", type=int, default=125)
    ap.add_argument("--screen", type=int, default=3)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {"machine": f"{platform.machine()}, {platform.node()}", "design": args.design, "screen": args.screen,
               "runs": {}}
    starts = design(args.design)
    for mu in args.mus:
        base = model(mu, (0.08, 0.0014, 0.001))
        t0 = time.perf_counter()
        res = aqmchain.optimize(base, "triple", "mean_response", starts=[list(p) for p in starts], bounds=REGION,
                                screen=args.screen, fidelity=LEVELS, step=STEP, min_step=MIN_STEP,
                                fidelity_stop=False)
        seconds = time.perf_counter() - t0
        row = {"mu": mu, "seconds": seconds, "evaluations": res.evaluations, "x": res.x, "value": res.value,
               "value_error": res.value_error, "levels": res.levels}
        ref = REFERENCE.get(mu)
        if ref is not None:
            row["reference"] = {"x": ref[0], "value": ref[1],
                                "same_point": all(abs(res.x[k] - v) <= s for k, v, s in
                                                  zip(res.params, ref[0], STEP)),
                                "difference": res.value - ref[1]}
        print(res.summary(), f"\n{seconds:.1f} s", flush=True)
        # plain RED's w on the same scenario
        t0 = time.perf_counter()
        red = aqmchain.optimize(model(mu, w=0.02), ["aqm.w"], "mean_response", step=[0.01], min_step=[0.0005],
                                bounds={"aqm.w": (0.001, 0.1)}, fidelity=LEVELS[:1])
        row["red_w"] = {"seconds": time.perf_counter() - t0, "evaluations": red.evaluations, "x": red.x,
                        "value": red.value, "value_error": red.value_error}
        print(red.summary(), flush=True)
        results["runs"][f"mu{mu}"] = row
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print("| mu | design | seconds | evaluations | optimum [x, y, z] | mean R +- discretisation | RED w: seconds, w, R |")
    print("|---|---|---|---|---|---|---|")
    for row in results["runs"].values():
        x = ", ".join(f"{v:.4g}" for v in row["x"].values())
        rw = row["red_w"]
        print(f"| {row['mu']} | {args.design} starts, best {args.screen} searched | {row['seconds']:.0f} | "
              f"{row['evaluations']} | [{x}] | {row['value']:.2f} +- {row['value_error'] or 0:.2f} | "
              f"{rw['seconds']:.0f} s, {rw['x']['aqm.w']:.4g}, {rw['value']:.2f} |")


if __name__ == "__main__":
    main()
