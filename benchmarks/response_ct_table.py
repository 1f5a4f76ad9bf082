"""Response times under tail, front and random drop in continuous time (docs/response-times.md,
"In continuous time"): the chain (tail drop: the closed form; front and random drop: the
tagged-packet chain on the uniformised chain) against the simulator on the chain's avg grid
(`discretised=True`, the chain's exact law) and with continuous avg.

    .venv/bin/python benchmarks/response_ct_table.py [--model examples/red_ctmc.toml] [--time 1000000]

Prints one markdown row per policy; the simulator's numbers with their 95 % half-widths over
`--replications` runs of `--time` time units each.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import aqmchain

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "examples" / "red_ctmc.toml"))
    ap.add_argument("--time", type=float, default=1_000_000, help="simulated time per replication")
    ap.add_argument("--replications", type=int, default=4)
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    base = aqmchain.load_model(a.model)
    if base.time != "continuous":
        raise SystemExit(f"--model: a continuous-time model is needed, got {a.model} ({base.time} time)")
    print("| policy | E[R]: chain / simulator on the grid / continuous avg | Var[R]: chain / on the grid | "
          "pushed out: chain / on the grid | Little's law error | tagged states | seconds |")
    print("|---|---|---|---|---|---|---|")
    sim = {"slots": int(a.time), "replications": a.replications, "seed": a.seed}
    for policy in ("tail", "front", "random"):
        m = base.replace(aqm={"policy": policy})
        t = time.perf_counter()
        r = aqmchain.solve_stationary(m)
        sec = time.perf_counter() - t
        g = aqmchain.simulate(m, discretised=True, **sim)
        c = aqmchain.simulate(m, **sim)
        print(f"| {policy} | {r.mean_response:.3f} / {g.mean_response:.3f} ± {g.ci['mean_response']:.3f} / "
              f"{c.mean_response:.3f} ± {c.ci['mean_response']:.3f} | {r.var_response:.1f} / "
              f"{g.var_response:.1f} ± {g.ci['var_response']:.1f} | {r.pushed_out_prob:.5f} / "
              f"{g.pushed_out_prob:.5f} ± {g.ci['pushed_out_prob']:.5f} | {r.littles_law_error:.1e} | "
              f"{r.response_states or '—'} | {sec:.1f} |", flush=True)


if __name__ == "__main__":
    main()
