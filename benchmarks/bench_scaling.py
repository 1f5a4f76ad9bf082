"""Iterations against chain size: each kind of chain solved at three buffer sizes (RED's
thresholds scaled with the buffer), method "auto" (the library's choice, with
auto_krylov_min_states 0: the iterative methods it runs on large chains, no LU first on the
small ones), tol 1e-12, each solve in a fresh process.  A preconditioner that knows the chain's components keeps its
iteration count about flat as the chain grows; the seconds grow with the states.

    .venv/bin/python benchmarks/bench_scaling.py
    .venv/bin/python benchmarks/bench_scaling.py --families count wait --no-write

Families (the RED scenario of "Implementation of modified AQM mechanisms in IP routers":
RED min_th / max_th at 0.4 / 0.8 of the buffer, p_max 0.1, Bernoulli(0.5) = GEO or
SSMP(5, 1.927562, 31.6) = SSMP arrivals, geometric service mu 0.5; buffers 60, 120, 250):

- plain_geo, plain_ssmp: plain RED, w = 0.002, the automatic avg grid of base step 1/4;
- count, wait: GEO, drop spacing `count` / `wait`, w = 0.07, uniform avg grid of step 1,
  count_max 20000 (truncated where negligible);
- adaptive_geo, adaptive_ssmp: adaptive RED, w = 0.07, interval 5000, p_max step 0.01, the
  automatic avg grid of base step 1/4;
- classes: the two-class example examples/classes/mice_ecn.toml (RED 5 / 15 kept) at buffers
  40, 70 and 100;
- redwm: examples/redwm_ssmp.toml (RED with the REDwM filter, SSMP, mu 0.25, avg step 1/4);
- ctmc: examples/red_ctmc.toml (continuous time, Poisson arrivals, exponential service, RED
  at 1/6 and 2/3 of the buffer).

With --method the families are solved by that method instead (e.g. multilevel), and
--append adds the rows after the block's.  Iterations are GMRES steps (krylov) or cycles
(multilevel), the method used in brackets; they
do not depend on the machine's load, the seconds do.  Writes the table into
docs/performance.md between the BENCH:scaling markers unless --no-write.
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

family, buffer, root, method = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
geo, ssmp = a.Source.bernoulli(0.5), a.Source.ssmp(5, 1.927562, 31.6)
red = a.DropFunction.red(0.4 * buffer, 0.8 * buffer, 0.1)

def model(src, k, refine="auto", **aqm):
    return a.Model(buffer=buffer, source=src, service=a.Service(0.5), aqm=a.Aqm(drop=red, **aqm),
                   grid=a.GridSpec(k=k, refine=refine))

def example(path, **aqm):
    m = a.load_model(root + "/examples/" + path)
    return m.replace(model={"buffer": buffer}, aqm=aqm) if aqm else m.replace(model={"buffer": buffer})

adaptive = dict(w=0.07, adaptive=True, interval=5000, p_max_step=0.01)
families = {
    "plain_geo": lambda: model(geo, 4, w=0.002),
    "plain_ssmp": lambda: model(ssmp, 4, w=0.002),
    "count": lambda: model(geo, 1, "none", w=0.07, spacing="count", count_max=20000),
    "wait": lambda: model(geo, 1, "none", w=0.07, spacing="wait", count_max=20000),
    "adaptive_geo": lambda: model(geo, 4, **adaptive),
    "adaptive_ssmp": lambda: model(ssmp, 4, **adaptive),
    "classes": lambda: example("classes/mice_ecn.toml"),
    "redwm": lambda: example("redwm_ssmp.toml", min_th=0.4 * buffer, max_th=0.8 * buffer),
    "ctmc": lambda: example("red_ctmc.toml", min_th=buffer / 6, max_th=2 * buffer / 3),
}
t = time.perf_counter()
chain = a.build_chain(families[family](), memory_limit_gb=20, max_states=12_000_000)
out = {"build": time.perf_counter() - t, "states": chain.n, "nnz": chain.nnz}
t = time.perf_counter()
try:
    # auto_krylov_min_states 0: the small buffers take the iterative route auto takes on large
    # chains (not an LU first), so that the rows compare iterations
    r = a.solve_stationary(chain, method=method, tol=1e-12, response="none", auto_krylov_min_states=0)
    info, out["converged"] = r.info, True
except a.NonConvergenceError as e:
    info, out["converged"] = e.result.info, False
out.update(solve=time.perf_counter() - t, iterations=info.iterations, residual=info.residual,
           method=str(info.method), peak_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
print(json.dumps(out))
"""

FAMILIES = ("plain_geo", "plain_ssmp", "count", "wait", "adaptive_geo", "adaptive_ssmp", "classes", "redwm", "ctmc")
BUFFERS = {"classes": (40, 70, 100)}
DEFAULT_BUFFERS = (60, 120, 250)


def run(family: str, buffer: int, timeout: float, method: str) -> dict:
    return run_json_child([sys.executable, "-c", CHILD, family, str(buffer), str(ROOT), method], timeout)


def row(family: str, buffer: int, r: dict) -> str:
    if "error" in r:
        return f"| {family} | {buffer} | | | {r['error']} | | | | |"
    flag = "" if r["converged"] else " (not converged)"
    return (f"| {family} | {buffer} | {r['states']:,} | {r['nnz']:,} | {r['iterations']} ({r['method']}){flag} | "
            f"{r['residual']:.1e} | {r['build']:.2f} | {r['solve']:.2f} | {r['peak_gb']:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run (default 600)")
    ap.add_argument("--method", default="auto", help="the stationary method (default auto)")
    ap.add_argument("--append", action="store_true", help="add this run's rows to the block's (its command too)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    rows = []
    for family in args.families:
        for buffer in BUFFERS.get(family, DEFAULT_BUFFERS):
            rows.append(row(family, buffer, run(family, buffer, args.timeout, args.method)))
            print(rows[-1], flush=True)
    head = ["family", "buffer", "states", "nnz", "iterations (method)", "residual", "build s", "solve s", "peak GB"]
    if args.append:  # after the block's rows
        rows = block_rows("scaling") + rows
    table = "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows])
    print(table)
    if not args.no_write:
        write_block("scaling", table, keep_commands=args.append,
                    note=f", {args.method}, tol 1e-12, one fresh process per run")


if __name__ == "__main__":
    main()
