"""The approximation study of docs/classes.md: the two-class chain (random-order
approximation) against the exact class-sequence chain and the simulator (discretised avg,
the chains' exact law), over a grid of loads and class shares at a small buffer.

    python benchmarks/classes_study.py [--slots 2000000] [--replications 4] [--quick] [--json OUT]

Prints one markdown table per scenario family with, per (load, share of class "a"), the
per-class loss and mean number in the system from the approximate chain, the exact chain
and the simulator (95 % half-width), the approximation's relative error against the exact
chain, and the state counts of both chains.  Families:

  iid        Bernoulli arrivals, tail drop, class-2 ECN-capable (the classes differ only in
             ECN marking); the waiting packets' classes are not exchangeable here because
             marked packets are admitted where others are dropped.
  bursty     a two-state MMBP whose states carry different class mixes (class a arrives
             mostly in the bursty state), tail drop, no ECN.
  modified   the modified RED of "Modified RED Algorithm to Improve The
             Performance of Web Traffic" (front variant), class a = mice, class b elephants
             half of them ECN-capable.
  compare    the flow comparison of "FDynamicAutoRED: An Algorithm to Stabilize
             the Queue in Internet Routers", class a one flow, class b two flows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import aqmchain

BUFFER = 8
MU = 0.5


def model(family: str, load: float, share: float) -> aqmchain.Model:
    alpha = min(load * MU, 0.999)
    aqm = {"drop": "red", "min_th": 2, "max_th": 6, "p_max": 0.3, "w": 0.25}
    classes = [{"name": "a", "share": share}, {"name": "b", "share": 1 - share}]
    source = {"kind": "bernoulli", "alpha": alpha}
    if family == "iid":
        classes[1]["ecn"] = 1.0
    elif family == "bursty":
        # states: calm (rate alpha / 2) and bursty (rate 2 alpha, capped); class a arrives
        # mostly when bursty, with the overall share of arrivals of class a near `share`
        lo, hi = alpha / 2, min(2 * alpha, 0.999)
        p_hi = (alpha - lo) / (hi - lo)  # stationary P(bursty) for the mean rate alpha
        stay = 0.9
        source = {"kind": "mmbp", "matrix": [[1 - (1 - stay) * p_hi / (1 - p_hi), (1 - stay) * p_hi / (1 - p_hi)],
                                             [1 - stay, stay]], "arrival": [lo, hi]}
        # share per state: a in the bursty state s_hi, in the calm state s_lo, mean = share
        s_hi = min(1.0, 1.6 * share)
        s_lo = max(0.0, (share * alpha - p_hi * hi * s_hi) / ((1 - p_hi) * lo))
        s_lo = min(s_lo, 1.0)
        classes[0]["share"] = [s_lo, s_hi]
        classes[1]["share"] = [1 - s_lo, 1 - s_hi]
    elif family == "modified":
        aqm["modified"] = "front"
        classes[0]["mice"] = True
        classes[1]["ecn"] = 0.5
    elif family == "compare":
        aqm["flow_compare"] = True
        classes[1]["flows"] = 2
    doc = {"model": {"buffer": BUFFER}, "source": source, "service": {"mu": MU}, "aqm": aqm,
           "grid": {"k": 2, "refine": "none"}, "class": classes}
    return aqmchain.model_from_dict(doc)[0]


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else abs(a - b)


def run(family: str, load: float, share: float, slots: int, replications: int) -> dict:
    m = model(family, load, share)
    t0 = time.perf_counter()
    ap = aqmchain.solve_stationary(m, classes="approx")
    t1 = time.perf_counter()
    ex = aqmchain.solve_stationary(m, classes="exact")
    t2 = time.perf_counter()
    sim = aqmchain.simulate(m, slots=slots, replications=replications, discretised=True, seed=11)
    row = {"family": family, "load": load, "share": share, "states_approx": ap.states, "states_exact": ex.states,
           "seconds_approx": t1 - t0, "seconds_exact": t2 - t1}
    for c in ("a", "b"):
        for k in ("loss", "mean_queue"):
            row[f"{k}_{c}_approx"] = getattr(ap.classes[c], k)
            row[f"{k}_{c}_exact"] = getattr(ex.classes[c], k)
            row[f"{k}_{c}_sim"] = getattr(sim.classes[c], k)
            row[f"{k}_{c}_sim_ci"] = sim.classes[c].ci[k]
            row[f"{k}_{c}_err"] = rel(row[f"{k}_{c}_approx"], row[f"{k}_{c}_exact"])
    return row


def table(rows: list[dict]) -> str:
    head = ("| load | share a | loss a: approx / exact / sim | loss b: approx / exact / sim | "
            "in system a: approx / exact / sim | rel. error loss a, b | rel. error in system a, b | states approx / exact |")
    out = [head, "|" + "---|" * 8]
    for r in rows:
        def trio(k, c):
            return (f"{r[f'{k}_{c}_approx']:.4g} / {r[f'{k}_{c}_exact']:.4g} / "
                    f"{r[f'{k}_{c}_sim']:.4g} ± {r[f'{k}_{c}_sim_ci']:.1g}")
        out.append(f"| {r['load']} | {r['share']} | {trio('loss', 'a')} | {trio('loss', 'b')} | "
                   f"{trio('mean_queue', 'a')} | {r['loss_a_err']:.1e}, {r['loss_b_err']:.1e} | "
                   f"{r['mean_queue_a_err']:.1e}, {r['mean_queue_b_err']:.1e} | "
                   f"{r['states_approx']} / {r['states_exact']} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slots", type=int, default=2_000_000, help="simulated slots per replication (2e6)")
    p.add_argument("--replications", type=int, default=4)
    p.add_argument("--quick", action="store_true", help="two loads, two shares, 200k slots")
    p.add_argument("--families", default="iid,bursty,modified,compare")
    p.add_argument("--json", metavar="OUT", help="write the rows as JSON")
    a = p.parse_args(argv)
    loads = (0.6, 1.2) if a.quick else (0.6, 0.9, 1.2)
    shares = (0.2, 0.5) if a.quick else (0.1, 0.3, 0.5)
    slots = 200_000 if a.quick else a.slots
    rows = []
    for fam in a.families.split(","):
        fam_rows = [run(fam, load, share, slots, a.replications) for load in loads for share in shares]
        rows += fam_rows
        print(f"\n### {fam} (N = {BUFFER}, mu = {MU})\n")
        print(table(fam_rows))
        sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
