"""Per-flow throughput and loss on the flows example, extrapolated to a continuous avg
(docs/classes.md, "The grid's share, extrapolated"): the window chain on a grid fine where avg
lives and on its every-2nd and every-4th point grids (`error_estimate=True`), against the
simulator with continuous avg, in the same run.

    .venv/bin/python benchmarks/flows_extrapolated.py [--step 0.125] [--window 4] [--slots 4000000]
    .venv/bin/python benchmarks/flows_extrapolated.py --window 5 --memory-limit-gb 80   # docs/classes.md's table

With `--window 5` the finest grid's chain has 10.8 million states and the run peaks at about
18 GB; the builder's upper bound of its memory is above the default 40 GB under RED with the
comparison (77.6 GB), hence `--memory-limit-gb 80` (a bound checked before building, not
memory taken).

Grid: step `--step` on [0, 20] (where avg lives), then 35 and 50.  Prints one markdown row per
(AQM, flow metric): the chain on the grid, the extrapolation with its error bar and method,
the simulator's estimate with its 95 % half-width, and their relative difference.  The
simulator's tcp flows are exchangeable, so a tcp flow's loss is their pooled estimate (the
class's) and a tcp flow's throughput the class's over the flows; the chain's are the same
by construction (docs/classes.md).  Seconds are the whole solve_stationary call.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import aqmchain

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "classes"))
from tables import add_flow_run_options, flow_grid, flow_run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--step", type=float, default=0.125, help="the avg grid's step on [0, 20]")
    ap.add_argument("--window", type=int, default=4, help="the window chain's L")
    add_flow_run_options(ap, 12_000_000, "the builder's memory bound (an upper bound of the window chain's; it ran on 24 GB)")
    a = ap.parse_args()
    grid = flow_grid(a.step)
    sim, models = flow_run(a)
    print("| AQM | flow metric | chain on the grid | extrapolated ± error bar (method) | simulator, continuous avg "
          "| extrapolated vs simulator |")
    print("|---|---|---|---|---|---|")
    for label, m in models:
        d = aqmchain.simulate(m, **sim)
        t0 = time.perf_counter()
        r = aqmchain.solve_stationary(m.with_grid(aqmchain.GridSpec(points=grid)), classes=f"window:{a.window}",
                                      response="none", method="multilevel", error_estimate=True,
                                      memory_limit_gb=a.memory_limit_gb, max_states=a.max_states)
        sec = time.perf_counter() - t0
        nflows = {c: sum(1 for f in d.flows if f["class"] == c) for c in ("tcp", "udp")}
        for cls in ("tcp", "udp"):
            k = d.classes[cls]
            for metric, scale in (("loss", 1.0), ("throughput", 1.0 / nflows[cls])):
                e = r.error_estimate[f"{cls}.{metric}"]
                ref, hw = getattr(k, metric) * scale, k.ci[metric] * scale
                method = f"{e.method}, order {e.order:.2f}" if e.method == "richardson" else e.method
                print(f"| {label} | {cls} flow {metric} | {e.value * scale:.6f} | "
                      f"{e.extrapolated * scale:.6f} ± {e.error * scale:.6f} ({method}) | {ref:.6f} ± {hw:.6f} | "
                      f"{100 * (e.extrapolated / getattr(k, metric) - 1):+.2f} % |")
        grids = ", ".join(f"{g['states']:,}" for g in r.error_estimate.grids)
        print(f"| {label} | states, the grids with 4x, 2x and 1x the step | {grids} | {sec:.0f} s in all | | |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
