"""Two builds of aqmchain side by side: builder, krylov and the simulator's loops.

A change to the library's structure must not cost speed.  This benchmark times the same
work with two Python environments (each with its own build of aqmchain installed), in one
session, alternating them run by run so that a change of machine load hits both alike:

    .venv/bin/python benchmarks/bench_architecture.py --before /path/to/old/.venv/bin/python
    .venv/bin/python benchmarks/bench_architecture.py --before OLD_PY --after NEW_PY --repeat 5 --no-write

Cases (each run in a fresh child process of the environment):

- ``build``: the chain of the RED queue with Bernoulli(0.5) arrivals, mu = 0.5, buffer 250,
  RED 100/200/0.1, w = 0.002 on the 1/4 grid (235k states): seconds of ``build_chain``;
- ``krylov``: its stationary solve with ``method = "krylov"`` (seconds; iterations and residual
  are printed so that a faster but different solve is visible);
- ``sim-plain``, ``sim-classes``, ``sim-stateful``: one-thread simulator throughput (slots/s)
  of the same queue with a continuous avg, with two traffic classes (the class-aware loop),
  and with count-based drop spacing (the stateful loop).

The table gives the best and the median of ``--repeat`` runs per build and the ratio of the
bests (after / before: below 1 is faster for time, above 1 faster for slots/s).  The
mean queue of each simulation is printed for both builds: they must agree within noise.
Writes the table into docs/performance.md between the BENCH:architecture markers unless
``--no-write``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import aqmchain as a

case = sys.argv[1]
slots = int(sys.argv[2])
red = a.DropFunction.red(100, 200, 0.1)

def model(**aqm):
    return a.Model(buffer=250, source=a.Source.bernoulli(0.5), service=a.Service(0.5),
                   aqm=a.Aqm(drop=red, w=0.002, **aqm), grid=a.GridSpec(k=4))

out = {}
if case in ("build", "krylov"):
    m = model()
    t = time.perf_counter()
    chain = a.build_chain(m)
    out["build"] = time.perf_counter() - t
    out["states"] = chain.n
    if case == "krylov":
        t = time.perf_counter()
        r = a.solve_stationary(chain, method="krylov", tol=1e-12)
        out["krylov"] = time.perf_counter() - t
        out["iterations"] = r.info.iterations
        out["residual"] = r.info.residual
else:
    if case == "sim-plain":
        m = model()
    elif case == "sim-classes":
        m = a.load_model(sys.argv[3])
    elif case == "sim-stateful":
        m = model(spacing="count")
    t = time.perf_counter()
    s = a.simulate(m, slots=slots, replications=1, seed=1, threads=1)
    dt = time.perf_counter() - t
    out[case] = slots / dt
    out["mean_queue"] = s.mean_queue
print(json.dumps(out))
"""

CASES = ["build", "krylov", "sim-plain", "sim-classes", "sim-stateful"]
TIME_CASES = {"build", "krylov"}


def run(py: str, case: str, slots: int, classes_file: Path) -> dict:
    p = subprocess.run([py, "-c", CHILD, case, str(slots), str(classes_file)], capture_output=True, text=True,
                       cwd=ROOT, check=False)
    if p.returncode != 0:
        raise SystemExit(f"{py} {case} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="python of the environment with the old build")
    ap.add_argument("--after", default=sys.executable, help="python of the environment with the new build")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--slots", type=int, default=20_000_000)
    ap.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    classes_file = ROOT / "benchmarks" / "reference" / "two_classes_red.toml"
    res: dict[str, dict[str, list[dict]]] = {c: {"before": [], "after": []} for c in args.cases}
    for _ in range(args.repeat):
        for case in args.cases:
            for side, py in (("before", args.before), ("after", args.after)):
                res[case][side].append(run(py, case, args.slots, classes_file))
    lines = ["| case | unit | before best | before median | after best | after median | after / before (best) | check |",
             "|---|---|---|---|---|---|---|---|"]
    for case in args.cases:
        key = case
        unit = "s" if case in TIME_CASES else "M slots/s"
        scale = 1.0 if case in TIME_CASES else 1e-6
        vals = {s: [r[key] * scale for r in res[case][s]] for s in ("before", "after")}
        best = {s: (min(v) if case in TIME_CASES else max(v)) for s, v in vals.items()}
        med = {s: statistics.median(v) for s, v in vals.items()}
        if case == "krylov":
            check = "iterations {} / {}, residual {:.1e} / {:.1e}".format(
                res[case]["before"][0]["iterations"], res[case]["after"][0]["iterations"],
                res[case]["before"][0]["residual"], res[case]["after"][0]["residual"])
        elif case == "build":
            check = "states {} / {}".format(res[case]["before"][0]["states"], res[case]["after"][0]["states"])
        else:
            mq = {s: statistics.mean(r["mean_queue"] for r in res[case][s]) for s in ("before", "after")}
            check = "mean queue {:.3f} / {:.3f}".format(mq["before"], mq["after"])
        lines.append(f"| {case} | {unit} | {best['before']:.3g} | {med['before']:.3g} | {best['after']:.3g} | "
                     f"{med['after']:.3g} | {best['after'] / best['before']:.3f} | {check} |")
    table = "\n".join(lines)
    cmd = ("    .venv/bin/python benchmarks/bench_architecture.py --before OLD/.venv/bin/python "
           f"--repeat {args.repeat} --slots {args.slots}")
    text = (f"{table}\n\n{platform.processor() or platform.machine()}, {args.repeat} alternating runs per build, "
            f"{args.slots} slots per simulation, one thread; produced by\n\n{cmd}\n")
    print(text)
    if not args.no_write:
        doc = ROOT / "docs" / "performance.md"
        s = doc.read_text()
        a, b = "<!-- BENCH:architecture -->", "<!-- /BENCH:architecture -->"
        if a in s and b in s:
            s = s[:s.index(a) + len(a)] + "\n" + text + s[s.index(b):]
        else:
            s += f"\n## Before and after a restructuring\n\n{a}\n{text}{b}\n"
        doc.write_text(s)


if __name__ == "__main__":
    main()
