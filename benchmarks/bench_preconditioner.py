"""Krylov on the chains with state components beyond (queue, avg, modulator), before and
after a change of the solver: each case built and solved (method "krylov", tol 1e-12) in a
fresh process of each Python given, alternately, and the iterations, residual, build and
solve seconds and peak memory put side by side.

    .venv/bin/python benchmarks/bench_preconditioner.py --before OLD/.venv/bin/python
    .venv/bin/python benchmarks/bench_preconditioner.py --cases geo_count geo_k4 --no-write

Cases (the RED scenario of "Implementation of modified AQM mechanisms in IP routers":
buffer 250, RED 100 / 200 / 0.1, Bernoulli(0.5) = GEO or SSMP(5, 1.927562, 31.6) = SSMP
arrivals, geometric service):

- geo_count, geo_wait: drop spacing `count` / `wait`, w = 0.07, uniform avg grid of step 1
  (the exact count range: 2.02M and 4.03M states);
- geo_adaptive: adaptive RED, w = 0.07, avg step 1/4 uniform, interval 5000, geometric
  clock, p_max step 0.01;
- mice_ecn, flows: the two-class examples (examples/classes/);
- geo_k4, ssmp_k4, ssmp_k16: plain RED, w = 0.002, the automatic avg grid of base step
  1/k (the no-regression cases).

A run that does not converge is reported as such and not ranked.  Writes the table into
docs/performance.md between the BENCH:preconditioner markers unless --no-write.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
import aqmchain as a

case, root = sys.argv[1], sys.argv[2]
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
}
m = cases[case]()
t = time.perf_counter()
chain = a.build_chain(m)
out = {"build": time.perf_counter() - t, "states": chain.n, "nnz": chain.nnz}
t = time.perf_counter()
try:
    r = a.solve_stationary(chain, method="krylov", tol=1e-12, response="none")  # the solver alone
    info, out["converged"] = r.info, True
except a.NonConvergenceError as e:
    info, out["converged"] = e.result.info, False
out["solve"] = time.perf_counter() - t
out["iterations"] = info.iterations
out["residual"] = info.residual
out["peak_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(json.dumps(out))
"""

CASES = ("geo_count", "geo_wait", "geo_adaptive", "mice_ecn", "flows", "geo_k4", "ssmp_k4", "ssmp_k16")


def run(python: str, case: str, timeout: float) -> dict:
    try:
        p = subprocess.run([python, "-c", CHILD, case, str(ROOT)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["failed"])[-1][:120]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def cell(r: dict | None) -> str:
    if r is None:
        return "not run"
    if "error" in r:
        return r["error"]
    flag = "" if r["converged"] else " (not converged)"
    return (f"{r['iterations']} it, {r['solve']:.2f} s{flag}, res {r['residual']:.1e}, "
            f"build {r['build']:.2f} s, {r['peak_gb']:.2f} GB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", help="the Python of the build to compare against (omit: after only)")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run (default 900)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    rows = []
    for case in args.cases:
        before = run(args.before, case, args.timeout) if args.before else None
        after = run(sys.executable, case, args.timeout)
        states = after.get("states") or (before or {}).get("states", "")
        rows.append(f"| {case} | {states:,} | {cell(before)} | {cell(after)} |" if isinstance(states, int)
                    else f"| {case} | | {cell(before)} | {cell(after)} |")
        print(rows[-1], flush=True)
    table = "\n".join(["| case | states | before | after |", "|---|---|---|---|", *rows])
    print(table)
    if not args.no_write:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from bench_stationary import write_block

        write_block("preconditioner", table, note=", krylov, tol 1e-12, one fresh process per run"
                    + (" (before and after alternately)" if args.before else ""))

if __name__ == "__main__":
    main()
