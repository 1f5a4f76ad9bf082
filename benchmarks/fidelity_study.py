"""Coverage study of the automatic grid and the discretisation error estimate against the
simulator with continuous avg (the model the grid approximates).

    .venv/bin/python benchmarks/fidelity_study.py                      # all models, docs/fidelity.md
    .venv/bin/python benchmarks/fidelity_study.py --models red_w005_heavy --slots 1e8 --no-docs
    .venv/bin/python benchmarks/fidelity_study.py --cache /tmp/fid_sims.json   # reuse earlier simulations

For each model: the chain on the uniform grid k = 4, on the automatic grid with its error
estimate (grids with 4x, 2x, 1x the steps), and a continuous-avg simulation (replications x
slots, 95 % intervals).  Per metric it reports whether the error bar [extrapolated - error,
extrapolated + error] meets the simulator's interval, and whether the automatic grid alone is
within 1 % (means, loss) / 3 % (variances) of the simulated value (the simulator's own
half-width allowed on top).  Also draws the convergence plots of docs/img/.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench_stationary import ROOT, write_block

METRICS = [("mean_queue", 1.0), ("var_queue", 3.0), ("loss", 1.0), ("mean_response", 1.0), ("var_response", 3.0)]


def models() -> dict:
    import aqmchain as a

    D = a.DropFunction
    geo, ssmp = a.Source.bernoulli(0.5), a.Source.ssmp_from_mean(mean=0.5, a=31.6, n=5)

    def m(drop, w, mu, *, source=geo, buffer=250, update="per_slot"):
        return a.Model(buffer=buffer, source=source, service=a.Service(mu), aqm=a.Aqm(drop=drop, w=w, update=update),
                       grid=a.GridSpec(k=4, refine="auto"))

    red = D.red(100, 200, 0.1)
    return {
        "red_w005_heavy": m(red, 0.005, 0.25),
        "red_w02_heavy": m(red, 0.02, 0.3),
        "red_w07_mu045": m(red, 0.07, 0.45),
        "red_w002_mu03": m(red, 0.002, 0.3),
        "red_50_150_w02": m(D.red(50, 150, 0.2), 0.02, 0.4),
        "red_30_90_w005_light": m(D.red(30, 90, 0.1), 0.005, 0.55),
        "gentle_w005_heavy": m(D.gentle_red(60, 120, 0.1), 0.005, 0.25),
        "gentle_w02_critical": m(D.gentle_red(60, 120, 0.1), 0.02, 0.5),
        "sred_w02": m(D.sred(100, 250), 0.02, 0.3),
        "nlred_w005": m(D.nlred(100, 200, 0.1), 0.005, 0.35),
        "dsred_g03_w02": m(D.dsred(100, 200, 0.3), 0.02, 0.3),
        "red_per_arrival_w02": m(red, 0.02, 0.3, update="per_arrival"),
        "ssmp_red_w02": m(red, 0.02, 0.3, source=ssmp),
        "ssmp_red_w005_light": m(red, 0.005, 0.55, source=ssmp),
    }


def chain_side(model) -> dict:
    import aqmchain

    t0 = time.perf_counter()
    k4 = aqmchain.solve_stationary(model.with_grid(aqmchain.GridSpec(k=4)))
    t1 = time.perf_counter()
    auto = aqmchain.solve_stationary(model, error_estimate=True)
    t2 = time.perf_counter()
    est = auto.error_estimate
    return {"states_k4": int(k4.states), "states_auto": int(auto.states), "seconds_k4": t1 - t0,
            "seconds_auto_with_estimate": t2 - t1, "grid": {k: auto.grid[k] for k in ("points", "min_step", "refined_ranges")},
            "metrics": {name: {"k4": getattr(k4, name), "auto": est[name].value, "extrapolated": est[name].extrapolated,
                               "error": est[name].error, "order": est[name].order, "method": est[name].method}
                        for name, _ in METRICS}}


def sim_side(model, slots: int, replications: int, seed: int) -> dict:
    import aqmchain

    t0 = time.perf_counter()
    s = aqmchain.simulate(model, slots=slots, replications=replications, seed=seed)
    return {"slots": slots, "replications": replications, "seed": seed, "seconds": time.perf_counter() - t0,
            "metrics": {name: {"value": getattr(s, name), "hw": s.ci[name]} for name, _ in METRICS}}


def judge(chain: dict, sim: dict) -> dict:
    out = {}
    for name, tol in METRICS:
        c, s = chain["metrics"][name], sim["metrics"][name]
        lo, hi = c["extrapolated"] - c["error"], c["extrapolated"] + c["error"]
        covered = hi >= s["value"] - s["hw"] and lo <= s["value"] + s["hw"]
        dev = abs(c["auto"] - s["value"])
        within = dev <= tol / 100 * abs(s["value"]) + s["hw"]
        scale = max(abs(s["value"]), 1e-300)
        out[name] = {"covered": covered, "auto_within": within, "auto_rel": (c["auto"] - s["value"]) / scale,
                     "k4_rel": (c["k4"] - s["value"]) / scale}
    return out


def markdown(results: dict) -> str:
    lines = ["| model | metric | simulated +- 95 % | k = 4 | diff | auto grid | diff | extrapolated +- error | covers |",
             "|---|---|---:|---:|---:|---:|---:|---:|:---:|"]
    for key, r in results.items():
        for i, (name, _) in enumerate(METRICS):
            c, s, j = r["chain"]["metrics"][name], r["sim"]["metrics"][name], r["judge"][name]
            lines.append(f"| {key + ' (' + str(r['chain']['states_auto']) + ' states)' if i == 0 else ''} | {name} | "
                         f"{s['value']:.6g} +- {s['hw']:.2g} | {c['k4']:.6g} | {100 * j['k4_rel']:+.2f}% | "
                         f"{c['auto']:.6g} | {100 * j['auto_rel']:+.2f}%{'' if j['auto_within'] else ' (!)'} | "
                         f"{c['extrapolated']:.6g} +- {c['error']:.2g} | {'yes' if j['covered'] else 'no'} |")
    return "\n".join(lines)


def summary(results: dict) -> str:
    n = sum(len(r["judge"]) for r in results.values())
    cov = sum(j["covered"] for r in results.values() for j in r["judge"].values())
    ok = sum(j["auto_within"] for r in results.values() for j in r["judge"].values())
    k4 = sum(abs(j["k4_rel"]) * 100 <= tol + 100 * r["sim"]["metrics"][name]["hw"] / abs(r["sim"]["metrics"][name]["value"])
             for r in results.values() for name, tol in METRICS for j in [r["judge"][name]])
    worst = max(((abs(j["auto_rel"]) * 100 / tol, f"{key} {name} {100 * j['auto_rel']:+.2f}%")
                 for key, r in results.items() for name, tol in METRICS for j in [r["judge"][name]]))
    secs = [r["chain"]["seconds_auto_with_estimate"] for r in results.values()]
    return (f"{len(results)} models, {n} metrics.  Error bar meets the simulator's interval: {cov} / {n} "
            f"({100 * cov / n:.0f} %).  Automatic grid within 1 % / 3 % (+ the simulator's half-width): {ok} / {n}; "
            f"uniform k = 4: {k4} / {n}.  Worst automatic-grid metric relative to its target: {worst[1]}.  "
            f"Chain with error estimate: {min(secs):.1f}..{max(secs):.1f} s per model.")


def plot(results: dict, models_: dict, keys: list[str], path: Path) -> None:
    """Metric against the relative step h (grids with 8x .. 1x the steps of the automatic grid)."""
    import matplotlib

    matplotlib.use("Agg")  # a script, not the library: it may choose the backend
    import matplotlib.pyplot as plt

    import aqmchain
    from aqmchain import _core

    fig, axes = plt.subplots(len(keys), 2, figsize=(10, 3.2 * len(keys)), squeeze=False)
    for row, key in enumerate(keys):
        model = models_[key]
        refined, _ = aqmchain.refine_grid(model)
        pts = list(refined.grid.points)
        keep = model.resolved_drop().breakpoints(model.buffer)
        hs, vals = [16, 8, 4, 2, 1], {"var_queue": [], "var_response": []}
        for f in hs:
            r = aqmchain.solve_stationary(model.with_grid(aqmchain.GridSpec(points=_core.coarsen_points(pts, f, keep))))
            for name in vals:
                vals[name].append(getattr(r, name))
        k4 = results[key]["chain"]["metrics"]
        for col, name in enumerate(vals):
            ax = axes[row][col]
            s = results[key]["sim"]["metrics"][name]
            ax.axhspan(s["value"] - s["hw"], s["value"] + s["hw"], color="tab:orange", alpha=0.3,
                       label="simulation, continuous avg (95 %)")
            ax.plot(hs, vals[name], "o-", label="chain, automatic grid coarsened")
            c = k4[name]
            ax.errorbar([0.0], [c["extrapolated"]], yerr=[c["error"]], fmt="s", color="tab:green", capsize=4,
                        label="extrapolated +- error")
            ax.axhline(c["k4"], color="tab:red", ls="--", lw=1, label="uniform grid k = 4")
            ax.set_xlabel("step relative to the automatic grid (h)")
            ax.set_title(f"{key}: {name}")
            if row == 0 and col == 0:
                ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", help="subset of the model keys")
    ap.add_argument("--slots", type=float, default=5e8, help="slots per replication (5e8)")
    ap.add_argument("--replications", type=int, default=8)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--cache", help="JSON file of simulations to reuse and extend")
    ap.add_argument("--json", help="write all results here")
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    ms = models()
    keys = args.models or list(ms)
    cache = json.loads(Path(args.cache).read_text()) if args.cache and Path(args.cache).exists() else {}
    results = {}
    for key in keys:
        chain = chain_side(ms[key])
        sim = cache.get(key)
        if sim is None or sim["slots"] != int(args.slots) or sim["replications"] != args.replications:
            sim = sim_side(ms[key], int(args.slots), args.replications, args.seed)
            cache[key] = sim
            if args.cache:
                Path(args.cache).write_text(json.dumps(cache, indent=1))
        results[key] = {"chain": chain, "sim": sim, "judge": judge(chain, sim)}
        bad = [n for n, j in results[key]["judge"].items() if not j["covered"] or not j["auto_within"]]
        print(f"{key:<22} {chain['states_auto']:>8} states  chain {chain['seconds_auto_with_estimate']:5.1f} s  "
              f"sim {sim['seconds']:5.1f} s  {'ok' if not bad else 'check: ' + ', '.join(bad)}", flush=True)
    md = markdown(results)
    print(md)
    print(summary(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if not args.no_docs:
        write_block("coverage", md + "\n\n" + summary(results), page="fidelity.md")
        img = ROOT / "docs" / "img"
        img.mkdir(exist_ok=True)
        plot(results, ms, [k for k in ("red_w005_heavy", "gentle_w005_heavy") if k in results],
             img / "fidelity_convergence.png")


if __name__ == "__main__":
    main()
