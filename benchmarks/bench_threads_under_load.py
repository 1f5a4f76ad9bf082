"""Shared-machine benchmark: the Krylov solve with 1 and 2 OpenMP threads, on a quiet machine
and with another CPU-bound process holding a core (a laptop, a node of several users, a test run beside).

Each configuration runs in a child process of its own: it builds the chain once, then times
`--repeats` krylov solves of it and reports the median solve time.  `fixed` is the old
behaviour (AQMCHAIN_ADAPTIVE_THREADS=0: every parallel loop takes the threads set),
`adaptive` the default (each loop takes the threads set, lowered to the cores no other
process is running on).  OpenMP's wait policy is libgomp's default in both.  The busy
process is a pure-Python loop started before the child and killed after it.  Writes the
table to docs/performance.md.

    .venv/bin/python benchmarks/bench_threads_under_load.py                  # geo_k4, 7 repeats
    .venv/bin/python benchmarks/bench_threads_under_load.py --cases geo_k4 ssmp_k4 --no-docs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench_stationary import write_block

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, statistics, sys
sys.path.insert(0, sys.argv[3])
import aqmchain
from bench_stationary import model_for
aqmchain.set_num_threads(int(sys.argv[2]))
chain = aqmchain.build_chain(model_for(sys.argv[1]), memory_limit_gb=20)
times, its = [], None
for _ in range(int(sys.argv[4])):
    r = aqmchain.solve_stationary(chain, method="krylov", tol=1e-12, response="none")
    times.append(r.info.seconds["solve"])
    its = r.info.iterations
    assert r.info.residual <= 1e-12, r.info.residual
print(json.dumps({"states": chain.n, "median": statistics.median(times), "min": min(times),
                  "max": max(times), "iterations": its}))
"""

BUSY = "while True:\n    pass\n"


def run(case: str, mode: str, threads: int, busy: bool, repeats: int) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "AQMCHAIN_ADAPTIVE_THREADS")}
    if mode == "fixed":
        env["AQMCHAIN_ADAPTIVE_THREADS"] = "0"
    hog = subprocess.Popen([sys.executable, "-c", BUSY]) if busy else None
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, case, str(threads), str(ROOT / "benchmarks"),
                            str(repeats)], env=env, capture_output=True, text=True, check=True)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["geo_k4"])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/performance.md")
    args = ap.parse_args()
    lines = ["| case | states | other process | threads | thread count | median solve s | min - max s | iterations | "
             "vs 1 thread |", "|" + "---|" * 9]
    for case in args.cases:
        for busy in (False, True):
            one = run(case, "fixed", 1, busy, args.repeats)
            rows = [(1, "—", one)] + [(2, m, run(case, m, 2, busy, args.repeats)) for m in ("fixed", "adaptive")]
            for threads, mode, r in rows:
                ratio = r["median"] / one["median"]
                lines.append(f"| {case} | {r['states']} | {'busy' if busy else 'none'} | {threads} | {mode} | "
                             f"{r['median']:.3f} | {r['min']:.3f} - {r['max']:.3f} | {r['iterations']} | "
                             f"{ratio:.2f}x |")
                print(lines[-1], flush=True)
    md = "\n".join(lines)
    print(md)
    if not args.no_docs:
        write_block("threads_under_load", md, note=", nothing else running but the benchmark's own busy process")


if __name__ == "__main__":
    main()
