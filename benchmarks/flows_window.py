"""Per-flow loss on the flows example under the flow comparison (docs/classes.md, "The window
chain"): the two-class chain (random order of the waiting packets) against the window chain
(the classes of the first L waiting packets in order), and the simulator on the chain's grid
(discretised=True: the law the window chain approaches as L grows) and with continuous avg.

    .venv/bin/python benchmarks/flows_window.py [--windows 3,4,5] [--slots 4000000] [--replications 4]

Grid: step 1/4 on [0, 20] (where avg lives), then 35 and 50.  Prints one markdown row per
(AQM, chain): one tcp flow's and the udp flow's loss and throughput, Jain's index, the relative
errors of the flows' losses against both simulator columns, states and solve seconds (the
whole solve_stationary call; timings on a shared machine are not benchmarks).  The simulator's
tcp flows are exchangeable, so a tcp flow's loss is compared with their pooled estimate (the
class's loss), the range of the 20 flows' own estimates beside it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import aqmchain

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "classes"))
from tables import add_flow_run_options, flow_grid, flow_run  # noqa: E402

GRID = flow_grid(0.25)


def flow(r, cls: str) -> dict:
    return next(f for f in r.flows if f["class"] == cls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", default="3,4,5", help="window lengths L to solve (comma separated)")
    add_flow_run_options(ap, 8_000_000, "the builder's memory bound (L = 5: its upper bound is 40 GB; it ran on a "
                         "24 GB machine; L = 5 has 5.5 million states)")
    a = ap.parse_args()
    sim, models = flow_run(a)
    print("| AQM | chain | tcp flow loss | udp loss | tcp flow throughput | udp throughput | fairness | "
          "tcp / udp loss vs sim grid | tcp / udp loss vs sim | states | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, m in models:
        mg = m.with_grid(aqmchain.GridSpec(points=GRID))
        refs = {"sim grid": aqmchain.simulate(mg, discretised=True, **sim), "sim": aqmchain.simulate(m, **sim)}
        for name, d in refs.items():
            # the tcp flows are exchangeable: a tcp flow's loss is the class's (their pooled
            # estimate, the tighter half-width); the 20 flows' own estimates in brackets
            t, u, k = flow(d, "tcp"), flow(d, "udp"), d.classes["tcp"]
            each = [f["loss"] for f in d.flows if f["class"] == "tcp"]
            print(f"| {label} | {name} | {k.loss:.5f} ± {k.ci['loss']:.5f} [{min(each):.4f}, {max(each):.4f}] | "
                  f"{u['loss']:.5f} ± {u['ci']['loss']:.5f} | {t['throughput']:.6f} | {u['throughput']:.5f} | "
                  f"{d.fairness:.4f} ± {d.ci['fairness']:.4f} | | | | |")
            sys.stdout.flush()
        for chain in ["approx"] + [f"window:{L}" for L in a.windows.split(",") if L]:
            t0 = time.perf_counter()
            try:
                r = aqmchain.solve_stationary(mg, classes=chain, response="none", method="multilevel",
                                              memory_limit_gb=a.memory_limit_gb, max_states=a.max_states)
            except aqmchain.StateSpaceTooLarge as e:  # the builder's upper bound; --memory-limit-gb raises it
                print(f"| {label} | {chain} | refused: {e} | | | | | | | | |")
                continue
            sec = time.perf_counter() - t0
            t, u = flow(r, "tcp"), flow(r, "udp")
            rel = []
            for d in refs.values():
                rel.append(" / ".join(f"{100 * (x['loss'] / d.classes[c].loss - 1):+.1f} %"
                                      for c, x in (("tcp", t), ("udp", u))))
            print(f"| {label} | {chain} | {t['loss']:.5f} | {u['loss']:.5f} | {t['throughput']:.6f} | "
                  f"{u['throughput']:.5f} | {r.fairness:.4f} | {rel[0]} | {rel[1]} | {r.states} | {sec:.0f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
