"""Krylov on the chains with state components beyond (queue, avg, modulator), before and
after a change of the solver: each case built and solved (method "krylov", or the one given
by --method, tol 1e-12) in a fresh process of each Python given, alternately, and the
iterations, residual, build and solve seconds and peak memory put side by side.

    .venv/bin/python benchmarks/bench_preconditioner.py --before OLD/.venv/bin/python
    .venv/bin/python benchmarks/bench_preconditioner.py --cases geo_count geo_k4 --no-write
    .venv/bin/python benchmarks/bench_preconditioner.py --targets --method auto --before OLD/.venv/bin/python

With --targets the table gets each case's target (solve seconds and GMRES iterations; for
count_default the whole call and its peak memory) and whether the after column meets it, and
goes between the BENCH:targets markers.

Cases (the RED scenario of "Implementation of modified AQM mechanisms in IP routers":
buffer 250, RED 100 / 200 / 0.1, Bernoulli(0.5) = GEO or SSMP(5, 1.927562, 31.6) = SSMP
arrivals, geometric service):

- geo_count, geo_wait: drop spacing `count` / `wait`, w = 0.07, uniform avg grid of step 1
  (the exact count range: 2.02M and 4.03M states);
- geo_adaptive: adaptive RED, w = 0.07, avg step 1/4 uniform, interval 5000, geometric
  clock, p_max step 0.01;
- mice_ecn, flows: the two-class examples (examples/classes/);
- geo_k4, ssmp_k4, ssmp_k16: plain RED, w = 0.002, the automatic avg grid of base step
  1/k (the no-regression cases); plain_10m: SSMP, mu = 0.25, k = 38 (10.25M states);
- geo_adaptive_auto, ssmp_adaptive: adaptive RED as geo_adaptive on the automatic avg grid of
  base step 1/4, GEO and SSMP, mu = 0.5 (1.55M and 5.92M states);
- mice_ecn_100: the mice/ECN example at buffer 100 (4.05M states);
- count_default: drop spacing `count`, buffer 250, RED 100 / 200 / 0.1, w = 0.01, GEO,
  mu = 0.45, every other setting default (the automatic grid, the truncated count): solved
  from the model, so the time is the whole call (grid pre-solve, the count's cap rounds).

A run that does not converge is reported as such and not ranked.  Writes the table into
docs/performance.md between the BENCH:preconditioner markers unless --no-write.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_stationary import block_rows, run_json_child, write_block  # noqa: E402

CHILD = r"""
import json, resource, sys, time
import aqmchain as a

case, root, method = sys.argv[1], sys.argv[2], sys.argv[3]
red = a.DropFunction.red(100, 200, 0.1)
geo, ssmp = a.Source.bernoulli(0.5), a.Source.ssmp(5, 1.927562, 31.6)

def model(src, mu, k, refine="auto", **aqm):
    return a.Model(buffer=250, source=src, service=a.Service(mu), aqm=a.Aqm(drop=red, **aqm),
                   grid=a.GridSpec(k=k, refine=refine))

cases = {
    "geo_count": lambda: model(geo, 0.5, 1, "none", w=0.07, spacing="count", count_max=20000),
    "geo_wait": lambda: model(geo, 0.5, 1, "none", w=0.07, spacing="wait", count_max=20000),
    "geo_adaptive": lambda: model(geo, 0.5, 4, "none", w=0.07, adaptive=True, interval=5000, p_max_step=0.01),
    "mice_ecn": lambda: a.load_model(root + "/examples/classes/mice_ecn.toml"),
    "flows": lambda: a.load_model(root + "/examples/classes/flows.toml"),
    "geo_k4": lambda: model(geo, 0.5, 4, w=0.002),
    "ssmp_k4": lambda: model(ssmp, 0.5, 4, w=0.002),
    "ssmp_k16": lambda: model(ssmp, 0.25, 16, w=0.002),
    "plain_10m": lambda: model(ssmp, 0.25, 38, w=0.002),
    "geo_adaptive_auto": lambda: model(geo, 0.5, 4, w=0.07, adaptive=True, interval=5000, p_max_step=0.01),
    "ssmp_adaptive": lambda: model(ssmp, 0.5, 4, w=0.07, adaptive=True, interval=5000, p_max_step=0.01),
    "mice_ecn_100": lambda: a.load_model(root + "/examples/classes/mice_ecn.toml").replace(model={"buffer": 100}),
    "count_default": lambda: a.Model(buffer=250, source=geo, service=a.Service(0.45),
                                     aqm=a.Aqm(drop=red, w=0.01, spacing="count"), grid=a.GridSpec(refine="auto")),
}
m = cases[case]()
if case == "count_default":  # the whole call: the grid's pre-solve and the count's cap rounds
    t = time.perf_counter()
    try:
        r = a.solve_stationary(m, method=method, tol=1e-12, response="none")
        info, out = r.info, {"converged": True}
    except a.NonConvergenceError as e:
        r, info, out = e.result, e.result.info, {"converged": False}
    out.update(build=0.0, states=int(r.states), nnz=0)
else:
    t = time.perf_counter()
    chain = a.build_chain(m, memory_limit_gb=20, max_states=12_000_000)  # ssmp_adaptive: 5.9M states
    out = {"build": time.perf_counter() - t, "states": chain.n, "nnz": chain.nnz}
    t = time.perf_counter()
    try:
        r = a.solve_stationary(chain, method=method, tol=1e-12, response="none")  # the solver alone
        info, out["converged"] = r.info, True
    except a.NonConvergenceError as e:
        info, out["converged"] = e.result.info, False
out["solve"] = time.perf_counter() - t
out["iterations"] = info.iterations
out["residual"] = info.residual
out["method"] = str(info.method)
out["peak_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(json.dumps(out))
"""

CASES = ("geo_count", "geo_wait", "geo_adaptive", "mice_ecn", "flows", "geo_k4", "ssmp_k4", "ssmp_k16",
         "plain_10m", "geo_adaptive_auto", "ssmp_adaptive", "mice_ecn_100", "count_default")

#: The solver's targets on a quiet 2-core machine: solve seconds (count_default: the whole
#: call, and at most 3 GB) and GMRES iterations (None: no iteration target).
TARGETS = {
    "geo_count": (5.0, 60), "geo_wait": (15.0, 60), "geo_adaptive_auto": (5.0, 60), "ssmp_adaptive": (60.0, 60),
    "mice_ecn": (15.0, 60), "mice_ecn_100": (15.0, 60), "flows": (3.0, 60), "count_default": (30.0, None),
    "geo_k4": (0.3, None), "ssmp_k16": (15.0, None), "plain_10m": (35.0, None),
}
COUNT_DEFAULT_GB = 3.0


def run(python: str, case: str, timeout: float, method: str) -> dict:
    return run_json_child([python, "-c", CHILD, case, str(ROOT), method], timeout)


def cell(r: dict | None) -> str:
    if r is None:
        return "not run"
    if "error" in r:
        return r["error"]
    flag = "" if r["converged"] else " (not converged)"
    ran = f" ({r['method']})" if "method" in r and r["method"] != "krylov" else ""
    return (f"{r['iterations']} it{ran}, {r['solve']:.2f} s{flag}, res {r['residual']:.1e}, "
            f"build {r['build']:.2f} s, {r['peak_gb']:.2f} GB")


def target_cell(case: str) -> str:
    if case not in TARGETS:
        return ""
    sec, its = TARGETS[case]
    what = "whole call" if case == "count_default" else "solve"
    extra = f", <= {COUNT_DEFAULT_GB:g} GB" if case == "count_default" else ""
    return f"{what} <= {sec:g} s" + (f", <= {its} it" if its else "") + extra


def status(case: str, r: dict | None) -> str:
    """Whether the run meets its target ('met' or what misses it)."""
    if case not in TARGETS or r is None:
        return ""
    if "error" in r or not r["converged"]:
        return "not converged"
    sec, its = TARGETS[case]
    miss = []
    if r["solve"] > sec:
        miss.append(f"{r['solve'] / sec:.1f}x the time")
    if its is not None and r["iterations"] > its:
        miss.append(f"{r['iterations']} > {its} it")
    if case == "count_default" and r["peak_gb"] > COUNT_DEFAULT_GB:
        miss.append(f"{r['peak_gb']:.1f} GB")
    return "met" if not miss else "not met: " + ", ".join(miss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", help="the Python of the build to compare against (omit: after only)")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run (default 900)")
    ap.add_argument("--method", default="krylov", help="the stationary method (default krylov; auto: the library's choice)")
    ap.add_argument("--targets", action="store_true", help="target and status columns; the BENCH:targets block")
    ap.add_argument("--before-cases", nargs="+", choices=CASES,
                    help="the cases that get the before column (default: all with --before)")
    ap.add_argument("--append", action="store_true",
                    help="keep the other cases' rows of the block (this run's cases replace theirs)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    rows = []
    for case in args.cases:
        with_before = args.before and (args.before_cases is None or case in args.before_cases)
        before = run(args.before, case, args.timeout, args.method) if with_before else None
        after = run(sys.executable, case, args.timeout, args.method)
        states = after.get("states") or (before or {}).get("states", "")
        states = f"{states:,}" if isinstance(states, int) else ""
        cells = [case, states] + ([target_cell(case)] if args.targets else []) + [cell(before), cell(after)]
        if args.targets:
            cells.append(status(case, after))
        rows.append("| " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    head = ["case", "states"] + (["target"] if args.targets else []) + ["before", "after"] + \
        (["after: target"] if args.targets else [])
    marker = "targets" if args.targets else "preconditioner"
    if args.append:  # the block's rows of other cases stay, in their order; this run's replace theirs
        old = block_rows(marker)
        mine = {r.split(" | ", 1)[0]: r for r in rows}
        rows = [mine.pop(ln.split(" | ", 1)[0], ln) for ln in old] + list(mine.values())
    table = "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows])
    print(table)
    if not args.no_write:
        write_block(marker, table, keep_commands=args.append,
                    note=f", {args.method}, tol 1e-12, one fresh process per run"
                    + (" (before and after alternately)" if args.before else ""))

if __name__ == "__main__":
    main()
