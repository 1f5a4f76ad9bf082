"""The chain columns of the two tables of docs/classes.md (run from the repository root):

    .venv/bin/python examples/classes/chain_tables.py [--slots 4000000] [--replications 4] [--tables mice,flows]

The same models as examples/classes/tables.py, solved by the two-class chain (random-order
approximation).  A buffer of 100 with avg on the uniform grid of step 1/4 would give 4
million states per model; the chain uses the grid GRID instead: step 1/8 on [8, 20), where
avg lives in these scenarios (w = 0.002 makes the split mapping's noise matter: step 1/2
there is 12 % off in loss), 1/2 on [0, 8) and [20, 30), 5 above (1.5 million states for
the first table).
Beside the chain, the simulator on the same grid (`discretised=True`: the chain's exact
law, so chain minus this column is the random-order approximation's error) and with
continuous avg (this column minus the discretised one is the grid's error).  Response
times: closed form (tail) or the tagged-packet chain (front, random); under modified RED
skipped here (response="none": the tagged chain on the two-class chain would have about 100
million states at this buffer; examples/classes/response_b40.py compares them at buffer 40).
Fairness from the chain (result.fairness): the flows of a class with uniform weights share
its throughput equally (the chain knows classes, not flows).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import aqmchain

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tables import flow_models, mice_models  # noqa: E402

GRID = [float(x) for x in np.concatenate([np.arange(0.0, 8.0, 0.5), np.arange(8.0, 20.0, 0.125),
                                          np.arange(20.0, 30.0, 0.5), np.arange(30.0, 100.001, 5.0)])]


def on_grid(m: aqmchain.Model) -> aqmchain.Model:
    return m.with_grid(aqmchain.GridSpec(points=[x for x in GRID if x <= m.buffer]))


def fmt(v, spec=".4f"):
    return "n/a" if v is None or not np.isfinite(v) else f"{v:{spec}}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", type=int, default=4_000_000)
    ap.add_argument("--replications", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--method", default="multilevel", help="stationary solver (multilevel)")
    ap.add_argument("--tables", default="mice,flows", help="which tables: mice, flows or both (mice,flows)")
    a = ap.parse_args()
    sim = {"slots": a.slots, "replications": a.replications, "seed": a.seed}
    tables = a.tables.split(",")
    if "mice" in tables:
        mice_table(a, sim)
    if "flows" in tables:
        flows_table(a, sim)


def mice_table(a, sim) -> None:
    print("| policy | ECN | web loss: chain / sim grid / sim | web mean R: chain / sim grid | "
          "ftp loss: chain / sim grid / sim | ftp mean R: chain / sim grid | states | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for label, ecn, m in mice_models():
        mg = on_grid(m)
        t0 = time.perf_counter()
        steered = m.aqm.modified != "none"
        r = aqmchain.solve_stationary(mg, method=a.method, response="none" if steered else "auto")
        sec = time.perf_counter() - t0
        d = aqmchain.simulate(mg, discretised=True, **sim)
        c = aqmchain.simulate(m, **sim)
        cells = []
        for name in ("web", "ftp"):
            k, kd, kc = r.classes[name], d.classes[name], c.classes[name]
            cells.append(f"{fmt(k.loss)} / {fmt(kd.loss)} / {fmt(kc.loss)}")
            cells.append(f"{fmt(k.mean_response, '.2f')} / {fmt(kd.mean_response, '.2f')}")
        print(f"| {label} | {ecn:g} | " + " | ".join(cells) + f" | {r.states} | {sec:.0f} |")
        sys.stdout.flush()


def flows_table(a, sim) -> None:
    print()
    print("| AQM | udp throughput share: chain / sim grid / sim | tcp loss: chain / sim grid | "
          "udp loss: chain / sim grid | fairness: chain / sim grid | states |")
    print("|---|---|---|---|---|---|")
    for label, m in flow_models():
        mg = on_grid(m)
        d = aqmchain.simulate(mg, discretised=True, **sim)
        c = aqmchain.simulate(m, **sim)
        r = aqmchain.solve_stationary(mg, method=a.method, response="none")
        t, u = r.classes["tcp"], r.classes["udp"]
        print(f"| {label} | {u.throughput_share:.4f} / {d.classes['udp'].throughput_share:.4f} / "
              f"{c.classes['udp'].throughput_share:.4f} | {t.loss:.4f} / {d.classes['tcp'].loss:.4f} | "
              f"{u.loss:.4f} / {d.classes['udp'].loss:.4f} | {r.fairness:.4f} / {d.fairness:.4f} | {r.states} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
