"""Simulator throughput on the seeds' GEO RED model (issue: simulator).

    .venv/bin/python benchmarks/bench_simulator.py     # writes the simulator table of docs/performance.md

Slots per second per core, single thread and all cores, continuous and discretised avg,
with the estimates the run produced (so a fast but wrong run is visible).
"""

import os
import platform
import time
from pathlib import Path

import aqmchain

ROOT = Path(__file__).resolve().parents[1]
TARGET = 50e6


def main() -> None:
    rows = ["| case | avg | threads | slots | seconds | M slots/s | M slots/s/core | vs 50 M target | mean queue +- 95% |",
            "|" + "---|" * 9]
    cores = os.cpu_count() or 1
    for name, path, mu in (("RED GEO mu=0.5 w=0.07", "red_geo.toml", 0.5),):
        model = aqmchain.load_model(ROOT / "examples" / path)
        for disc in (False, True):
            for threads in (1, cores):
                reps = threads
                slots = 100_000_000
                s = aqmchain.simulate(model, slots=slots, replications=reps, seed=1, discretised=disc, threads=threads)
                per_core = s.slots_per_second / s.threads
                rows.append(f"| {name} | {'discretised' if disc else 'continuous'} | {s.threads} | {reps} x {slots:.0e} | "
                            f"{s.seconds:.2f} | {s.slots_per_second / 1e6:.1f} | {per_core / 1e6:.1f} | "
                            f"{100 * per_core / TARGET:.0f}% | {s.mean_queue:.2f} +- {s.ci['mean_queue']:.2f} |")
                print(rows[-1], flush=True)
    doc = ROOT / "docs" / "performance.md"
    text = doc.read_text()
    head, rest = text.split("<!-- BENCH:simulator -->", 1)
    _, tail = rest.split("<!-- /BENCH:simulator -->", 1)
    block = (f"<!-- BENCH:simulator -->\nCommand: `python benchmarks/bench_simulator.py` on {platform.machine()}, "
             f"{cores} cores, {time.strftime('%Y-%m-%d')}.\n\n" + "\n".join(rows) + "\n<!-- /BENCH:simulator -->")
    doc.write_text(head + block + tail)


if __name__ == "__main__":
    main()
