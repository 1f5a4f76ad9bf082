"""Stateful AQM on the RED scenario of the papers (buffer 250, RED 100 / 200 / 0.1, GEO =
Bernoulli(0.5) or SELF = SSMP(n = 5, q = 1.927562, a = 31.6) arrivals, geometric service
mu = 0.5 or 0.25): for each feature the chain beside the simulator, and the state count the
feature costs.

    .venv/bin/python benchmarks/stateful_paper_scenario.py              # every row (cached in out/)
    .venv/bin/python benchmarks/stateful_paper_scenario.py --only GEO   # one source
    .venv/bin/python benchmarks/stateful_paper_scenario.py --table      # print the table from the cache

Per row: the chain (states, nonzeros, seconds to build and solve, mean queue, its
variance, loss, the feature's own quantity), the simulator following the chain's grids
("discretised": the chain's exact law, so the two must agree within the interval) and the
simulator with avg (and p_max) exact ("continuous": the real algorithm; the gap is the
discretisation error of the chain's grid).  Features:

- plain RED, w = 0.07 and w = 0.002 (the references; the automatic avg grid of step 1/4
  refined where avg lives and p jumps, as every row but two);
- drop spacing `count` and `wait` (w = 0.07, uniform avg step 1: the count's range follows
  from the smallest nonzero p_b on the grid, 0.001 there against 0.00025 at step 1/4), with
  plain RED on the same uniform grid as their reference;
- adaptive RED (w = 0.07, avg step 1/4, interval 5000 slots, geometric clock, p_max step 0.01);
- AutoRED's weight (floor w = 0.002, P_t = p(avg));
- FDynamicAutoRED's AQM: AutoRED's weight and dynamic max_th, P_t = Q_t / N (with P_t = p(avg)
  <= p_max = 0.1 the max_th rule never fires).

A chain whose state space is beyond this machine's budget in the time allowed is skipped
with the reason (`--max-states`), and its size estimated from the GEO rows.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "out" / "stateful_paper_scenario.json"
#: memory_limit_gb of the builds and solves: the machine's memory (the builder checks the
#: reachable states and their transitions against it, not the loose product bound)
MEMORY_GB = 20

FEATURES = {
    "plain w=0.07": ({"w": 0.07}, 4),
    "plain w=0.07 step 1": ({"w": 0.07}, 1),
    "count": ({"w": 0.07, "spacing": "count", "count_max": 20000}, 1),
    "wait": ({"w": 0.07, "spacing": "wait", "count_max": 20000}, 1),
    "adaptive": ({"w": 0.07, "adaptive": True, "interval": 5000, "p_max_step": 0.01}, 4),
    "plain w=0.002": ({"w": 0.002}, 4),
    "autored": ({"w": 0.002, "weight": "autored"}, 4),
    "fdynamic": ({"w": 0.002, "weight": "autored", "autored_p": "queue", "dynamic_max_th": True}, 4),
}
EXTRA = {"count": "mean_count", "wait": "mean_count", "adaptive": "mean_p_max", "fdynamic": "mean_max_th"}
METRICS = ("mean_queue", "var_queue", "loss")


def model(source: str, mu: float, feature: str, plain_k: int | None = None):
    import aqmchain

    aqm, k = FEATURES[feature]
    src = aqmchain.Source.bernoulli(0.5) if source == "GEO" else aqmchain.Source.ssmp(n=5, q=1.927562, a=31.6)
    return aqmchain.Model(buffer=250, source=src, service=aqmchain.Service(mu=mu),
                          aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(100, 200, 0.1), **aqm),
                          grid=aqmchain.GridSpec(k=plain_k or k, refine="none" if feature in ("count", "wait", "plain w=0.07 step 1")
                                                 else "auto"))


def run_row(source: str, mu: float, feature: str, slots: int, max_states: float, skip: str | None) -> dict:
    import aqmchain

    m = model(source, mu, feature)
    if not skip and m.grid.refine == "auto":  # one pre-solve for the chain and the discretised simulator
        m = aqmchain.refine_grid(m, memory_limit_gb=MEMORY_GB)[0]
    row: dict = {"source": source, "mu": mu, "feature": feature, "k": FEATURES[feature][1]}
    extra = EXTRA.get(feature)
    t0 = time.perf_counter()
    chain = None
    if skip:
        row["chain_skipped"] = skip
    try:
        if not skip:
            chain = aqmchain.build_chain(m, memory_limit_gb=MEMORY_GB, max_states=50_000_000)
    except aqmchain.StateSpaceTooLarge as exc:
        row["chain_skipped"] = str(exc)
    if chain is not None:
        row["states"], row["nnz"] = int(chain.n), int(chain.nnz)
        row["build_s"] = time.perf_counter() - t0
        if chain.n > max_states:
            row["chain_skipped"] = f"{chain.n} states > --max-states {max_states:g}"
        else:
            t1 = time.perf_counter()
            r = aqmchain.solve_stationary(chain, response="none", memory_limit_gb=MEMORY_GB)
            row["solve_s"] = time.perf_counter() - t1
            row["method"], row["iterations"], row["residual"] = r.info.method, r.info.iterations, r.info.residual
            row["chain"] = {name: float(getattr(r, name)) for name in METRICS + ((extra,) if extra else ())}
        del chain
    # without a chain there is nothing for the discretised run to check (and an automatic
    # grid's pre-solve would build the large chain): the real algorithm only
    for mode, disc in (("discretised", True), ("continuous", False))[1 if skip else 0:]:
        t1 = time.perf_counter()
        s = aqmchain.simulate(m, slots=slots, replications=4, seed=2026, discretised=disc, batches=20)
        row[mode] = {name: [float(getattr(s, name)), float(s.ci[name])] for name in METRICS + ((extra,) if extra else ())}
        row[mode + "_s"] = time.perf_counter() - t1
    return row


def fmt(v: float) -> str:
    return f"{v:.4g}" if abs(v) >= 1e-3 else f"{v:.3e}"


ORDER = ["plain w=0.07", "adaptive", "plain w=0.07 step 1", "count", "wait", "plain w=0.002", "autored", "fdynamic"]
LABEL = {"plain w=0.07": "RED, w = 0.07", "adaptive": "adaptive RED", "plain w=0.07 step 1": "RED, w = 0.07, step 1",
         "count": "spacing count", "wait": "spacing wait", "plain w=0.002": "RED, w = 0.002",
         "autored": "AutoRED weight", "fdynamic": "AutoRED + dynamic max_th"}
REF = {"adaptive": "plain w=0.07", "count": "plain w=0.07 step 1", "wait": "plain w=0.07 step 1",
       "autored": "plain w=0.002", "fdynamic": "plain w=0.002"}


def table(rows: list[dict]) -> str:
    """One line per (source, mu, feature): each metric as chain / simulator on the chain's
    grids / simulator with avg exact (half-widths of the 95 % intervals in parentheses)."""
    out = ["| source, mu | feature (avg step) | states (x its RED) | mean queue | queue variance | loss | "
           "feature's quantity | chain s |", "|---|---|---|---|---|---|---|---|"]
    by = {(r["source"], r["mu"], r["feature"]): r for r in rows}
    order = sorted(by, key=lambda k: (k[0] != "GEO", -k[1], ORDER.index(k[2]) if k[2] in ORDER else 99))
    for key in order:
        r = by[key]
        extra = EXTRA.get(r["feature"])
        ref = by.get((r["source"], r["mu"], REF.get(r["feature"], "")), {}).get("states")
        st = r.get("states")
        size = (f"{st:,}" + (f" ({st / ref:.0f}x)" if ref else "")) if st else "not built"

        def cell(name):
            parts = [fmt(r["chain"][name]) if "chain" in r else "—"]
            for mode in ("discretised", "continuous"):
                parts.append(f"{fmt(r[mode][name][0])} ({fmt(r[mode][name][1])})" if mode in r else "—")
            return " / ".join(parts)
        secs = f"{r.get('build_s', 0) + r.get('solve_s', 0):.1f}" if "chain" in r else "—"
        out.append(f"| {r['source']}, {r['mu']} | {LABEL.get(r['feature'], r['feature'])} ({1 / r['k']:g}) | {size} | "
                   f"{cell('mean_queue')} | {cell('var_queue')} | {cell('loss')} | "
                   f"{(extra.replace('mean_', '') + ': ' + cell(extra)) if extra else ''} | {secs} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["GEO", "SELF"])
    ap.add_argument("--features", help="comma-separated subset of: " + ", ".join(FEATURES))
    ap.add_argument("--slots", type=int, default=50_000_000, help="slots per replication (4 replications)")
    ap.add_argument("--max-states", type=float, default=6e6, help="skip solving chains above this")
    ap.add_argument("--skip-chain", dest="skip_chain", help="features whose chain is not run (simulator only)")
    ap.add_argument("--reason", default="beyond the time budget of this run", help="why (--skip-chain)")
    ap.add_argument("--table", action="store_true", help="print the table from the cache and stop")
    args = ap.parse_args()
    cache = json.loads(CACHE.read_text()) if CACHE.exists() else {}
    if not args.table:
        feats = args.features.split(",") if args.features else list(FEATURES)
        for source in (["GEO", "SELF"] if not args.only else [args.only]):
            for mu in (0.5, 0.25):
                for f in feats:
                    key = f"{source}|{mu}|{f}"
                    if key in cache:
                        continue
                    skip = args.reason if args.skip_chain and f in args.skip_chain.split(",") else None
                    cache[key] = run_row(source, mu, f, args.slots, args.max_states, skip)
                    CACHE.parent.mkdir(exist_ok=True)
                    CACHE.write_text(json.dumps(cache, indent=1))
                    print(key, json.dumps(cache[key]), flush=True)
    print(table(list(cache.values())))


if __name__ == "__main__":
    main()
