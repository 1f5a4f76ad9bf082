"""REDwM on the scenario of "A RED modified weighted moving average for soft real-time
application" (Domańska, Domański, Augustyn, Klamka): chain and simulator beside the
paper's scores, a coarse coefficient search, plain RED's best w, and the queue and
response-time distributions (analytic and simulated on one plot).

    .venv/bin/python benchmarks/redwm_study.py --out out/redwm            # everything (about an hour on 2 busy cores)
    .venv/bin/python benchmarks/redwm_study.py --out out/redwm --parts table plots
    .venv/bin/python benchmarks/redwm_study.py --out out/redwm --parts search --max-evals 300
    .venv/bin/python benchmarks/redwm_study.py --out out/redwm --parts table --sim-slots 0   # the chain columns alone

Scenario: SSMP source n = 5, q = 1.927562, a = 31.6 (mean rate 0.5), buffer 250, RED
min_th 100, max_th 200, p_max 0.1, geometric service mu = 0.25 or 0.5; the triple
[x, y, z] is read as b_0 = x, b_1 = y, a_2 = z, a_1 = 1 - x - y - z (docs/redwm.md).
Results go to OUT/results.json (and the plots to OUT/*.png); the script prints the
markdown tables of docs/redwm.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

import aqmchain

ROOT = Path(__file__).resolve().parents[1]
#: (triple, mu) -> the paper's mean waiting time (slots), from benchmarks/reference/
PAPER_SCORES = {(tuple(r["triple"]), r["mu"]): r["mean_wait"] for r in json.loads(
    (ROOT / "benchmarks" / "reference" / "redwm_waiting_times.json").read_text(encoding="utf-8"))["rows"]}
TRIPLES = [(0.002, 0.0, 0.0), (0.004, 0.009, 0.0), (0.08, 0.0014, 0.001)]
MUS = (0.25, 0.5)
# A coarse subset of the paper's 10 x 10 x 10 start grid (x = 0.001 + 0.01 i, y, z = 0.001 j).
COARSE_STARTS = [(x, y, z) for x in (0.011, 0.051, 0.091) for y in (0.0, 0.005) for z in (0.0, 0.005)]


def model(mu: float, triple=None, w=None, source: str = "ssmp") -> aqmchain.Model:
    aqm = {"drop": "red", "min_th": 100, "max_th": 200, "p_max": 0.1}
    aqm.update({"filter": "redwm", "triple": list(triple)} if triple is not None else {"w": w})
    src = ({"kind": "ssmp", "n": 5, "q": 1.927562, "a": 31.6} if source == "ssmp"
           else {"kind": "bernoulli", "alpha": 0.5})
    return aqmchain.model_from_dict({"model": {"buffer": 250}, "source": src, "service": {"mu": mu}, "aqm": aqm})[0]


def table(args, results: dict) -> None:
    rows = results["table"] = []
    for mu in MUS:
        for t in TRIPLES:
            m = model(mu, t)
            est = aqmchain.estimate_chain(m)
            t0 = time.perf_counter()
            r = aqmchain.solve_stationary(m)
            secs = time.perf_counter() - t0
            row = {"triple": t, "mu": mu, "states": r.states, "reachable_bound": est["reachable_bound"],
                   "s_points": est["components"]["s_index"], "chain_seconds": secs,
                   "chain_method": r.info.method, "chain_iterations": r.info.iterations,
                   "chain_mean_response": r.mean_response, "chain_mean_queue": r.mean_queue,
                   "chain_var_queue": r.var_queue, "chain_loss": r.loss, "paper_score": PAPER_SCORES.get((t, mu))}
            if args.sim_slots > 0:
                sim = aqmchain.simulate(m, slots=args.sim_slots, replications=args.replications, seed=args.seed,
                                        threads=args.threads)
                row.update({"sim_mean_response": sim.mean_response, "sim_mean_response_hw": sim.ci["mean_response"],
                            "sim_mean_queue": sim.mean_queue, "sim_mean_queue_hw": sim.ci["mean_queue"],
                            "sim_loss": sim.loss, "sim_loss_hw": sim.ci["loss"],
                            "sim_slots": args.sim_slots * args.replications, "sim_seconds": sim.seconds})
            rows.append(row)
            print(json.dumps(row), flush=True)
    # plain RED beyond the paper's range: does a larger weight keep helping? (chain and simulator)
    red = results["red"] = []
    for mu in MUS:
        for w in (0.08, 0.2, 1.0):
            m = model(mu, w=w)
            r = aqmchain.solve_stationary(m)
            red.append({"w": w, "mu": mu, "states": r.states, "chain_mean_response": r.mean_response})
            if args.sim_slots > 0:
                sim = aqmchain.simulate(m, slots=args.sim_slots, replications=args.replications, seed=args.seed,
                                        threads=args.threads)
                red[-1].update({"sim_mean_response": sim.mean_response, "sim_mean_response_hw": sim.ci["mean_response"]})
            print(json.dumps(red[-1]), flush=True)


# The region of the paper's start grid (x up to 0.091, y and z up to 0.009) plus about one step.
REGION = {"aqm.triple[0]": (0.001, 0.1), "aqm.triple[1]": (0.0, 0.01), "aqm.triple[2]": (0.0, 0.01)}
RED_W = (0.002, 0.01, 0.02, 0.05, 0.08, 0.12, 0.2, 0.3, 0.5, 0.8, 1.0)


def search(args, results: dict) -> None:
    out = results["search"] = {}
    for source, starts, budget in (("ssmp", COARSE_STARTS, args.max_evals), ("geo", COARSE_STARTS[::3], 60)):
        mu = 0.25
        base = model(mu, (0.08, 0.0014, 0.001), source=source)

        def progress(rec, tag=f"{source} mu={mu}"):
            x = ", ".join(f"{v:.5g}" for v in rec["x"].values())
            print(f"[{tag}] start {rec['start'] + 1}: [{x}] {rec['status']} {rec['value']:.6g} "
                  f"({rec['seconds']:.1f} s)", flush=True)

        res = aqmchain.optimize(base, "triple", "mean_response", starts=starts, bounds=REGION, max_evals=budget,
                                min_step=[0.01 / 8, 0.001 / 8, 0.001 / 8], callback=progress)
        states = [r["states"] for r in res.trace if r["states"]]
        out[f"{source}_mu{mu}"] = {"starts": len(res.starts), "evaluations": res.evaluations,
                                   "cache_hits": res.cache_hits, "infeasible": res.infeasible,
                                   "failed": res.failed, "seconds": res.seconds,
                                   "evaluations_per_minute": res.evaluations_per_minute,
                                   "states_min": min(states), "states_max": max(states),
                                   "x": res.x, "value": res.value, "stopped": res.stopped,
                                   "per_start": [{k: s[k] for k in ("start", "end", "value", "evaluations")}
                                                 for s in res.starts]}
        print(res.summary(), flush=True)
        (Path(args.out) / f"trace_{source}_mu{mu}.csv").write_text(res.trace_csv())
    red = results["red_search"] = {}
    for mu in MUS:
        # the chain over a range of w, and a pattern search for w in the paper's range
        scan = []
        for w in RED_W:
            r = aqmchain.solve_stationary(model(mu, w=w))
            scan.append({"w": w, "states": r.states, "mean_response": r.mean_response})
            print(json.dumps({"mu": mu, **scan[-1]}), flush=True)
        res = aqmchain.optimize(model(mu, w=0.02), ["aqm.w"], "mean_response", step=[0.01], min_step=[0.0005],
                                bounds={"aqm.w": (0.001, 0.1)}, max_evals=60)
        red[f"mu{mu}"] = {"scan": scan, "w_in_range": res.x["aqm.w"], "value_in_range": res.value,
                          "evaluations": res.evaluations, "seconds": res.seconds}
        print(f"plain RED mu={mu}: best w in [0.001, 0.1] = {res.x['aqm.w']:.4g}, R = {res.value:.6g} "
              f"({res.evaluations} evaluations, {res.seconds:.0f} s)", flush=True)


def plots(args, results: dict) -> None:
    """Queue and response-time pmfs as in the paper's Figures 2-7: each REDwM triple against RED
    w = 0.002, chain (lines) and simulator with continuous A (dots; response times in bins of 10
    slots)."""
    from matplotlib.figure import Figure

    cases = [(0.25, (0.004, 0.009, 0.0)), (0.25, (0.08, 0.0014, 0.001)), (0.5, (0.08, 0.0014, 0.001))]
    solved = {}
    for mu, t in cases:
        for tt in (t, (0.002, 0.0, 0.0)):
            if (mu, tt) not in solved:
                m = model(mu, tt)
                solved[mu, tt] = (aqmchain.solve_stationary(m),
                                  aqmchain.simulate(m, slots=args.plot_slots, replications=args.replications,
                                                    seed=args.seed, threads=args.threads))
    for kind in ("queue", "response"):
        fig = Figure(figsize=(11, 3.6))
        for i, (mu, t) in enumerate(cases):
            ax = fig.add_subplot(1, 3, i + 1)
            for tt, colour in ((t, "C0"), ((0.002, 0.0, 0.0), "C1")):
                r, s = solved[mu, tt]
                a = r.queue_pmf if kind == "queue" else r.response_pmf
                b = s.queue_pmf if kind == "queue" else s.response_pmf
                label = f"[{tt[0]:g}, {tt[1]:g}, {tt[2]:g}]"
                ax.plot(np.arange(len(a)), a, color=colour, lw=1.2, label=f"{label} chain")
                if kind == "response":
                    n = len(b) // 10 * 10
                    ax.plot(np.arange(0, n, 10) + 4.5, b[:n].reshape(-1, 10).mean(axis=1), ".", ms=2.5,
                            color=colour, label=f"{label} simulated")
                else:
                    ax.plot(np.arange(len(b)), b, ".", ms=2.5, color=colour, label=f"{label} simulated")
            ax.set_title(f"mu = {mu}", fontsize=9)
            ax.set_xlabel("waiting packets q" if kind == "queue" else "response time R (slots)", fontsize=8)
            ax.set_xlim(0, 250 if kind == "queue" else (3000 if mu == 0.25 else 1500))
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=6)
        fig.tight_layout()
        path = Path(args.plot_dir) / f"redwm_{kind}.png"
        fig.savefig(path, dpi=80)
        print(f"wrote {path}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="out/redwm", help="directory for results.json and the search traces")
    ap.add_argument("--plot-dir", default=None, help="directory for the PNG plots (default: --out)")
    ap.add_argument("--parts", nargs="*", default=["table", "search", "plots"], choices=["table", "search", "plots"])
    ap.add_argument("--sim-slots", type=int, default=250_000_000, help="slots per replication (table; 0: chain only)")
    ap.add_argument("--plot-slots", type=int, default=50_000_000, help="slots per replication (plots)")
    ap.add_argument("--replications", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--max-evals", type=int, default=400, help="solves in the SSMP coefficient search")
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    args.plot_dir = args.plot_dir or args.out
    Path(args.plot_dir).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}"
    for part in args.parts:
        {"table": table, "search": search, "plots": plots}[part](args, results)
        path.write_text(json.dumps(results, indent=1, default=float))
    print(f"results in {path}")


if __name__ == "__main__":
    main()
