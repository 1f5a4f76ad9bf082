"""The two tables of docs/classes.md, simulator columns (run from the repository root):

    .venv/bin/python examples/classes/tables.py [--slots 4000000] [--replications 4]

Table 1 (mice_ecn.toml's shape): the five drop policies of the modified-RED paper (tail,
front, random, modified front, modified random), without and with ECN, per-class loss
and mean response time with 95 % half-widths.
Table 2 (flows.toml's shape): RED, RED with the flow comparison, and FDynamicAutoRED
(AutoRED's weight, dynamic max_th, flow comparison): throughput shares, the throughput of
one tcp flow against the udp flow, per-class loss and Jain's fairness index.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import aqmchain

HERE = Path(__file__).resolve().parent

POLICIES = [("tail", {"policy": "tail"}), ("front", {"policy": "front"}), ("random", {"policy": "random"}),
            ("modified front", {"policy": "front", "modified": "front"}),
            ("modified random", {"policy": "random", "modified": "random"})]
FLOW_AQMS = [("RED", {}), ("RED + flow comparison", {"flow_compare": True}),
             ("FDynamicAutoRED", {"weight": "autored", "dynamic_max_th": True, "flow_compare": True})]


def pm(v: float, hw: float, spec: str = ".4f") -> str:
    return f"{v:{spec}} ± {hw:{spec}}"


#: The study's buffer: mice_ecn.toml itself has a smaller one, so that `aqmchain solve` on it is
#: quick (the two-class chain grows as N^2: 4M states at N = 100 on its grid).
STUDY_BUFFER = 100


def mice_models():
    doc = aqmchain.modelfile.load_document(HERE / "mice_ecn.toml")
    doc["model"]["buffer"] = STUDY_BUFFER
    for ecn in (0.0, 0.5):
        for label, aqm in POLICIES:
            d = copy.deepcopy(doc)
            for key in ("policy", "modified"):
                d["aqm"].pop(key, None)
            d["aqm"].update(aqm)
            for c in d["class"]:
                c["ecn"] = ecn
            yield label, ecn, aqmchain.model_from_dict(d)[0]


def flow_grid(step: float) -> list[float]:
    """The flows examples' avg grid where avg lives: step `step` on [0, 20], then 35 and 50."""
    n = round(20.0 / step)
    return [i * step for i in range(n + 1)] + [35.0, 50.0]


def add_flow_run_options(ap: argparse.ArgumentParser, max_states: int, memory_help: str) -> None:
    """The options the flows scripts share: the simulator's run and the chains' budgets."""
    ap.add_argument("--slots", type=int, default=4_000_000)
    ap.add_argument("--replications", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--memory-limit-gb", type=float, default=40.0, help=memory_help)
    ap.add_argument("--max-states", type=int, default=max_states, help="solver option max_states")
    ap.add_argument("--aqms", default="RED + flow comparison,FDynamicAutoRED", help="the AQMs of flow_models to run")


def flow_run(a: argparse.Namespace) -> tuple[dict, list]:
    """From add_flow_run_options' options: the simulator's keywords and the (label, model) pairs asked for."""
    wanted = a.aqms.split(",")
    sim = {"slots": a.slots, "replications": a.replications, "seed": a.seed}
    return sim, [(label, m) for label, m in flow_models() if label in wanted]


def flow_models():
    doc = aqmchain.modelfile.load_document(HERE / "flows.toml")
    for label, aqm in FLOW_AQMS:
        d = copy.deepcopy(doc)
        for key in ("weight", "dynamic_max_th", "flow_compare"):
            d["aqm"].pop(key, None)
        d["aqm"].update(aqm)
        yield label, aqmchain.model_from_dict(d)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", type=int, default=4_000_000)
    ap.add_argument("--replications", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    sim = {"slots": a.slots, "replications": a.replications, "seed": a.seed}
    print("| policy | ECN | web loss | web mean R | ftp loss | ftp mean R | web marks | ftp marks |")
    print("|---|---|---|---|---|---|---|---|")
    for label, ecn, m in mice_models():
        r = aqmchain.simulate(m, **sim)
        w, f = r.classes["web"], r.classes["ftp"]
        print(f"| {label} | {ecn:g} | {pm(w.loss, w.ci['loss'])} | {pm(w.mean_response, w.ci['mean_response'], '.2f')} "
              f"| {pm(f.loss, f.ci['loss'])} | {pm(f.mean_response, f.ci['mean_response'], '.2f')} "
              f"| {w.mark_prob:.4f} | {f.mark_prob:.4f} |")
    print()
    print("| AQM | udp throughput share | one tcp flow / udp flow | tcp loss | udp loss | of which flow comparison (udp) "
          "| fairness |")
    print("|---|---|---|---|---|---|---|")
    for label, m in flow_models():
        r = aqmchain.simulate(m, **sim)
        t, u = r.classes["tcp"], r.classes["udp"]
        ratio = r.flows[0]["throughput"] / r.flows[-1]["throughput"]
        print(f"| {label} | {pm(u.throughput_share, u.ci['throughput_share'])} | {ratio:.4f} "
              f"| {pm(t.loss, t.ci['loss'])} | {pm(u.loss, u.ci['loss'])} | {u.loss_flow_compare:.4f} "
              f"| {pm(r.fairness, r.ci['fairness'])} |")


if __name__ == "__main__":
    main()
