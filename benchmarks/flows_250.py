"""FDynamicAutoRED with flows at buffer 250 on the two-class chain (docs/classes.md, "At the
papers' buffer 250"): state counts on the full step-1/4 avg grid (the single-class chain's
reachable states, each with the 2n class contents of its level), then the chain on an avg
grid that is fine only where avg lives, against the simulator on the same grid and with
continuous avg.

    .venv/bin/python benchmarks/flows_250.py                      # both threshold pairs (15-30 min under load)
    .venv/bin/python benchmarks/flows_250.py --parts counts       # the state counts only (seconds)
    .venv/bin/python benchmarks/flows_250.py --variants example   # RED 5 / 15 only

Model: examples/classes/flows.toml (20 tcp flows and one udp flow, half of the arrivals each,
Bernoulli 0.6 against service 0.5, AutoRED's weight, dynamic max_th, the flow comparison) at
buffer 250, with its RED 5 / 15 ("example") or the papers' 100 / 200 ("papers").
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import time
from pathlib import Path

import numpy as np

import aqmchain
from aqmchain.modelfile import load_document

ROOT = Path(__file__).resolve().parents[1]
N = 250
#: avg grids fine where avg lives (checked at N = 50 for the example: the full step-1/4 grid's numbers)
GRIDS = {
    "example": list(np.arange(0, 20 + 1e-9, 0.25)) + list(np.arange(35, N, 15.0)) + [N],
    "papers": [0, 20, 40, 60, 80, 85] + list(np.arange(90, 112 + 1e-9, 0.5)) + list(range(120, N, 10)) + [N],
}
THRESHOLDS = {"example": None, "papers": (100, 200)}


def document(variant: str, points=None, classes: bool = True) -> dict:
    d = load_document(ROOT / "examples" / "classes" / "flows.toml")
    d["model"]["buffer"] = N
    if THRESHOLDS[variant]:
        d["aqm"].update(min_th=THRESHOLDS[variant][0], max_th=THRESHOLDS[variant][1])
    if points is not None:
        d["grid"]["points"] = [float(x) for x in points]
    if not classes:  # the (n, avg, modulator, max_th) skeleton: one class, no comparison
        d.pop("class")
        d["aqm"]["flow_compare"] = False
    return d


def counts(variant: str) -> dict:
    """States of the two-class chain on the full step-1/4 grid: sum over the single-class
    chain's reachable states of the 2n contents of their level (1 when empty)."""
    m = aqmchain.model_from_dict(document(variant, classes=False))[0]
    c = aqmchain.build_chain(m, max_states=50_000_000)
    n = np.asarray(aqmchain.state_labels(c)["level"])
    return {"single_class": int(c.n), "two_class": int(np.where(n == 0, 1, 2 * n).sum()), "grid_points": len(c.grid)}


def metrics(r) -> dict:
    out = {"loss": r.loss, "mean_queue": r.mean_queue}
    for c in ("tcp", "udp"):
        out[f"{c}_loss"] = r.classes[c].loss
        out[f"{c}_share"] = r.classes[c].throughput_share
    return out


def half_widths(s) -> dict:
    out = {"loss": s.ci["loss"], "mean_queue": s.ci["mean_queue"]}
    for c in ("tcp", "udp"):
        out[f"{c}_loss"] = s.classes[c].ci["loss"]
        out[f"{c}_share"] = s.classes[c].ci["throughput_share"]
    return out


def solve(variant: str, slots: float, seed: int) -> dict:
    m = aqmchain.model_from_dict(document(variant, GRIDS[variant]))[0]
    t = time.time()
    r = aqmchain.solve_stationary(m, max_states=8_000_000)
    row = {"states": r.chain.n, "transitions": r.chain.nnz, "seconds": time.time() - t,
           "residual": r.info.residual, "iterations": r.info.iterations, "grid_points": len(r.chain.grid),
           "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, "chain": metrics(r)}
    for name, disc in (("sim_grid", True), ("sim", False)):
        s = aqmchain.simulate(m, slots=slots, replications=4, seed=seed, discretised=disc)
        row[name], row[name + "_hw"] = metrics(s), half_widths(s)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "flows_250")
    ap.add_argument("--parts", nargs="+", default=["counts", "solve"], choices=["counts", "solve"])
    ap.add_argument("--variants", nargs="+", default=list(GRIDS), choices=list(GRIDS))
    ap.add_argument("--slots", type=float, default=4e6, help="slots per replication (4 replications)")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    for v in args.variants:
        if "counts" in args.parts:
            results.setdefault(v, {})["counts"] = counts(v)
            print(v, "full step-1/4 grid:", results[v]["counts"], flush=True)
        if "solve" in args.parts:
            row = results.setdefault(v, {})["solve"] = solve(v, args.slots, args.seed)
            print(f"\n{v}: {row['states']:,} states, {row['transitions']:,} transitions, {row['seconds']:.0f} s, "
                  f"residual {row['residual']:.1e}, {row['peak_gb']:.1f} GB peak")
            print("| | chain | simulator, chain's grid | simulator, continuous avg |\n|---|---|---|---|")
            for k in row["chain"]:
                print(f"| {k} | {row['chain'][k]:.4f} | {row['sim_grid'][k]:.4f} ± {row['sim_grid_hw'][k]:.4f} "
                      f"| {row['sim'][k]:.4f} ± {row['sim_hw'][k]:.4f} |", flush=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
