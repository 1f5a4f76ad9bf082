"""Chain-builder benchmark: nonzeros of P assembled per second, phase by phase.

Each case builds in a child process of its own (so peak RSS is that build's);
the best of ``--repeat`` builds is reported.  Writes the table to
docs/performance.md between the BENCH:builder markers.

    .venv/bin/python benchmarks/bench_builder.py
    .venv/bin/python benchmarks/bench_builder.py --cases geo_k4 --repeat 5
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stationary import model_for, write_block  # noqa: E402

TARGET = 20e6  # nonzeros per second (issue: stationary solves at the seeds' scale)


def build_case(case: str, repeat: int, queue) -> None:
    import aqmchain

    model = model_for(case)
    best = None
    for _ in range(repeat):
        t = time.perf_counter()
        chain = aqmchain.build_chain(model, memory_limit_gb=20, max_states=20_000_000)
        total = time.perf_counter() - t
        if best is None or total < best["total_s"]:
            rep = chain.report
            best = {"case": case, "states": chain.n, "nnz": chain.nnz, "total_s": total,
                    "explore_s": rep["seconds_explore"], "assemble_s": rep["seconds_assemble"],
                    "classes_s": rep["seconds_classes"]}
        del chain
    best["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put(best)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["geo_k4", "ssmp_k4", "ssmp_k16_mu025"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    lines = ["| case | states | nnz | explore s | assemble s | classes s | total s | M nnz/s | vs 20M target | "
             "peak MB |", "|" + "---|" * 10]
    for case in args.cases:
        q = ctx.Queue()
        p = ctx.Process(target=build_case, args=(case, args.repeat, q))
        p.start()
        r = q.get()
        p.join()
        rate = r["nnz"] / r["total_s"]
        lines.append(f"| {case} | {r['states']} | {r['nnz']} | {r['explore_s']:.3f} | {r['assemble_s']:.3f} | "
                     f"{r['classes_s']:.3f} | {r['total_s']:.3f} | {rate / 1e6:.1f} | "
                     f"{'met' if rate >= TARGET else 'missed'} ({rate / TARGET:.0%}) | {r['peak_mb']:.0f} |")
        print(lines[-1], flush=True)
    md = "\n".join(lines)
    if not args.no_docs:
        write_block("builder", md, note=f" (best of {args.repeat} builds; total = explore + assemble + classes "
                                        "+ overhead)")

if __name__ == "__main__":
    main()
