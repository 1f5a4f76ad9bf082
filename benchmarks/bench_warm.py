"""Warm-started re-solves against cold solves after a 1 % parameter change.

For each case (the RED scenarios of bench_stationary.py: GEO K = 4, SSMP K = 4) and each
parameter (aqm.p_max, aqm.w, service.mu), the base model is solved once; then, repeatedly
and alternating, the model with the parameter 1 % higher is solved cold
(``solve_stationary(model)``) and warm (``solve_stationary(model, warm=base_result)``).
Times are wall seconds of the whole call (build, solve, metrics), medians over the
repetitions; iterations are the solver's.  Every warm answer is checked against the cold
one: the largest difference of the scalar metrics relative to their value is reported.
Writes the table to docs/performance.md (between the BENCH:warm markers).

    .venv/bin/python benchmarks/bench_warm.py                       # both cases, 5 repetitions
    .venv/bin/python benchmarks/bench_warm.py --cases geo_k4 --reps 3 --no-docs
    .venv/bin/python benchmarks/bench_warm.py --cases geo_k4 ssmp_k4 adaptive_b60 --reps 3
    .venv/bin/python benchmarks/bench_warm.py --append --recycle 8 --cases geo_k4 ssmp_k4 --reps 3

``--recycle K``: every solve keeps K directions of its Krylov space (solver option
``krylov_recycle``) and the warm one recycles the base solve's (cold solves pay the keeping).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_stationary import model_for as stationary_model, write_block  # noqa: E402


def model_for(case: str):
    """bench_stationary.py's cases, and ``adaptive_b60``: adaptive RED (p_max moves every 5000
    slots: a chain with two components outside krylov's blocks, nearly decomposable, which
    ``auto`` solves with krylov and its slices' coarse space), buffer 60, RED 15 / 45 / 0.1,
    w = 0.07, GEO alpha = mu = 0.5, K = 4."""
    if case != "adaptive_b60":
        return stationary_model(case)
    import aqmchain

    return aqmchain.Model(buffer=60, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.5),
                          aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(15, 45, 0.1), w=0.07, adaptive=True,
                                           interval=5000, p_max_step=0.01),
                          grid=aqmchain.GridSpec(k=4))

TOL = 1e-12
#: the parameters changed, how to change them, and their model-file keys
CHANGES = {
    "aqm.p_max": lambda m, f: m.replace(aqm={"p_max": m.aqm.drop.p_max * f}),
    "aqm.w": lambda m, f: m.replace(aqm={"w": m.aqm.w * f}),
    "service.mu": lambda m, f: m.replace(service={"mu": m.service.mu * f}),
}
METRICS = ("mean_queue", "var_queue", "loss", "throughput", "mean_avg")


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def run_case(case: str, params: list[str], reps: int, factor: float, method: str = "auto",
             recycle: int = 0) -> list[dict]:
    import aqmchain

    base = model_for(case)
    opts = {"tol": TOL, "method": method, "krylov_recycle": recycle}
    t_base, prev = timed(lambda: aqmchain.solve_stationary(base, **opts))
    print(f"{case}: base solve {t_base:.2f} s, {prev.states} states, {prev.info.method}, "
          f"{prev.info.iterations} iterations", flush=True)
    rows = []
    for key in params:
        model = CHANGES[key](base, factor)
        cold_t, warm_t, cold_it, warm_it, diff = [], [], [], [], 0.0
        warm_info = None
        build_c, build_w, solve_c, solve_w, cold_mv, warm_mv = [], [], [], [], [], []
        for _ in range(reps):
            tc, rc = timed(lambda: aqmchain.solve_stationary(model, **opts))
            tw, rw = timed(lambda: aqmchain.solve_stationary(model, warm=prev, **opts))
            cold_t.append(tc)
            warm_t.append(tw)
            cold_it.append(rc.info.iterations)
            warm_it.append(rw.info.iterations)
            cold_mv.append(rc.info.matvecs)
            warm_mv.append(rw.info.matvecs)
            warm_info = rw.warm
            assert rc.info.residual <= TOL and rw.info.residual <= TOL
            diff = max(diff, *(abs(getattr(rw, n) - getattr(rc, n)) / abs(getattr(rc, n)) for n in METRICS))
            build_c.append(sum(v for k, v in rc.info.seconds.items() if k.startswith("build_")))
            build_w.append(sum(v for k, v in rw.info.seconds.items() if k.startswith("build_")))
            solve_c.append(rc.info.seconds.get("solve", 0.0))
            solve_w.append(rw.info.seconds.get("solve", 0.0))
        med = statistics.median
        row = {"case": case, "param": key, "states": int(rc.states), "requested": method, "method": rw.info.method,
               "recycle": recycle, "reuse": warm_info.get("reuse", ""),
               "recycled_vectors": warm_info.get("recycled_vectors", 0),
               "cold_matvecs": med(cold_mv), "warm_matvecs": med(warm_mv),
               "cold_s": med(cold_t), "warm_s": med(warm_t),
               "cold_iterations": med(cold_it), "warm_iterations": med(warm_it),
               "metric_rel_diff": diff, "matched_mass": warm_info["matched_mass"],
               "build_s": med(build_c), "build_warm_s": med(build_w), "states_reused": warm_info.get("states", ""),
               "solve_cold_s": med(solve_c), "solve_warm_s": med(solve_w), "reps": reps}
        row["ratio"] = row["warm_s"] / row["cold_s"]
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| case | states | change | method | cold s | warm s | warm / cold | iterations cold / warm | "
             "products cold / warm | build s cold / warm | solve s cold / warm | "
             "largest metric difference (relative) |",
             "|" + "---|" * 12]
    for r in rows:
        method = r["method"] if r["requested"] != "auto" else f"auto ({r['method']})"
        if r.get("recycle"):
            method += f", recycle {r['recycle']} ({r.get('recycled_vectors', 0)} used)"
        mv = (f"{r['cold_matvecs']:g} / {r['warm_matvecs']:g}" if "cold_matvecs" in r else "—")
        build = f"{r['build_s']:.3f} / " + (f"{r['build_warm_s']:.3f}" if "build_warm_s" in r else "—")
        if r.get("states_reused") == "reused":
            build += " (states reused)"
        lines.append(f"| {r['case']} | {r['states']} | {r['param']} +1 % | {method} | {r['cold_s']:.3f} | "
                     f"{r['warm_s']:.3f} | "
                     f"{100 * r['ratio']:.0f} % | {r['cold_iterations']:g} / {r['warm_iterations']:g} | {mv} | "
                     f"{build} | {r['solve_cold_s']:.3f} / {r['solve_warm_s']:.3f} | "
                     f"{r['metric_rel_diff']:.1e} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["geo_k4", "ssmp_k4"])
    ap.add_argument("--params", nargs="+", default=list(CHANGES), choices=list(CHANGES))
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each cold / warm pair (medians reported)")
    ap.add_argument("--factor", type=float, default=1.01, help="the parameter change (1.01: +1 %%)")
    ap.add_argument("--json", default=str(ROOT / "build" / "bench_warm.json"))
    ap.add_argument("--method", default="auto", help="the solver method of every solve (default auto)")
    ap.add_argument("--recycle", type=int, default=0,
                    help="solver option krylov_recycle of every solve (default 0: nothing recycled)")
    ap.add_argument("--append", action="store_true",
                    help="add to the rows of the previous --json file (a re-run case/param/method replaces its row)")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/performance.md")
    args = ap.parse_args()
    rows = json.loads(Path(args.json).read_text()) if args.append and Path(args.json).exists() else []
    load = [os.getloadavg()[0]]
    for case in args.cases:
        for r in run_case(case, args.params, args.reps, args.factor, args.method, args.recycle):
            rows = [x for x in rows if (x["case"], x["param"], x["requested"], x.get("recycle", 0))
                    != (case, r["param"], args.method, args.recycle)]
            rows.append(r)
        load.append(os.getloadavg()[0])
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1))
    order = ["geo_k4", "ssmp_k4", "adaptive_b60"]
    rows.sort(key=lambda r: (order.index(r["case"]) if r["case"] in order else len(order), r["case"],
                             r["requested"] != "auto", r.get("recycle", 0), list(CHANGES).index(r["param"])))
    md = table(rows)
    print(md)
    if not args.no_docs:
        # the run's own two threads count in the load average: above 2.5 something else ran
        who = "other jobs on the machine" if max(load) > 2.5 else "nothing else running; the run's own threads count in it"
        note = f"; 1-minute load average {min(load):.1f}-{max(load):.1f} during the run ({who})"
        write_block("warm", md, keep_commands=args.append, note=note)


if __name__ == "__main__":
    main()
