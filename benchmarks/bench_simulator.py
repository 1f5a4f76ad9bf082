"""Simulator throughput on the seeds' GEO RED model, against a bare C loop of the same model.

    .venv/bin/python benchmarks/bench_simulator.py              # writes the simulator table of docs/performance.md
    .venv/bin/python benchmarks/bench_simulator.py --no-write   # prints it only
    .venv/bin/python benchmarks/bench_simulator.py --repeat 5 --slots 100000000

`benchmarks/bare_sim.c` (an independent minimal simulator: the obvious loop, mean queue and
loss only) is compiled here with the system C compiler (`cc -O2`) and run in the same
session as ours, one process per thread.  Each configuration (continuous and discretised
avg, one thread and all cores) is run `--repeat` times, alternating ours and the bare
loop; the table shows the best and the median slots per second and the ratio of the
bests.  Both simulators' mean queue and loss are printed with their 95 % half-widths and
the z-score of their difference, so that a fast but wrong run is visible.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aqmchain

ROOT = Path(__file__).resolve().parents[1]
TARGET = 50e6


def compile_bare(tmp: Path) -> Path:
    exe = tmp / "bare_sim"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(ROOT / "benchmarks" / "bare_sim.c"), "-lm"], check=True)
    return exe


def bare_args(model, slots: int, warmup: int, seed: int, k: int) -> list[str]:
    d = model.aqm.drop
    assert model.source.kind == "bernoulli" and d.kind == "red" and model.aqm.update == "per_slot"
    assert model.aqm.policy == "tail" and model.aqm.ecn == 0.0
    return [repr(model.source.arrival[0]), repr(model.service.mu), str(model.buffer), repr(d.lo), repr(d.hi),
            repr(d.p_max), repr(model.aqm.w), str(slots), str(warmup), str(seed), str(k)]


def run_bare(exe: Path, model, slots: int, seed: int, threads: int, k: int) -> dict:
    """`threads` processes at once (seeds seed, seed + 1, ...); slots/s over the wall time of all."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen([str(exe), *bare_args(model, slots, slots // 10, seed + i, k)], stdout=subprocess.PIPE,
                              text=True) for i in range(threads)]
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - t0
    if any(p.returncode for p in procs):
        raise RuntimeError("bare_sim failed")
    runs = [dict(kv.split("=") for kv in out.split()) for out in outs]
    f = lambda key: [float(r[key]) for r in runs]  # noqa: E731
    # equal-length runs: the pooled estimate is the average, its half-width sqrt(sum hw^2) / P
    pool = lambda key: (statistics.fmean(f(key)), math.sqrt(sum(h * h for h in f(key + "_hw"))) / threads)  # noqa: E731
    own = sum(f("slots")) / max(f("seconds"))  # the processes' own loop timing (no start-up)
    return {"sps": threads * slots / wall, "sps_loop": own, "mean_queue": pool("mean_queue"), "loss": pool("loss")}


def run_ours(model, slots: int, seed: int, threads: int, disc: bool) -> dict:
    s = aqmchain.simulate(model, slots=slots, replications=threads, seed=seed, discretised=disc, threads=threads)
    return {"sps": s.slots_per_second, "mean_queue": (s.mean_queue, s.ci["mean_queue"]),
            "loss": (s.loss, s.ci["loss"])}


def z(a: tuple[float, float], b: tuple[float, float]) -> float:
    sd = math.hypot(a[1], b[1]) / 1.96
    return abs(a[0] - b[0]) / sd if sd > 0 else (0.0 if a[0] == b[0] else math.inf)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", type=int, default=100_000_000, help="slots per replication (and per bare process)")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each configuration (best and median reported)")
    ap.add_argument("--threads", type=int, nargs="*", default=None, help="thread counts (default: 1 and all cores)")
    ap.add_argument("--no-write", action="store_true", help="print the table, leave docs/performance.md alone")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    thread_counts = args.threads or sorted({1, cores})
    model = aqmchain.load_model(ROOT / "examples" / "red_geo.toml")
    k = model.grid.k
    load_before = os.getloadavg()
    rows = ["| avg | threads | slots per run | ours M slots/s best (median) | bare C M slots/s best (median) | "
            "ours / bare | ours vs 50 M/core | mean queue: ours, bare (z) | loss: ours, bare (z) |",
            "|" + "---|" * 9]
    worst_z = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        exe = compile_bare(Path(tmp))
        for disc in (False, True):
            for threads in thread_counts:
                ours, bare = [], []
                for i in range(args.repeat):  # alternate, so that a busy moment hits both
                    ours.append(run_ours(model, args.slots, 1 + 100 * i, threads, disc))
                    bare.append(run_bare(exe, model, args.slots, 7 + 100 * i, threads, k if disc else 0))
                o_sps = [r["sps"] for r in ours]
                b_sps = [r["sps"] for r in bare]
                o, b = ours[-1], bare[-1]
                zq, zl = z(o["mean_queue"], b["mean_queue"]), z(o["loss"], b["loss"])
                worst_z = max(worst_z, zq, zl)
                per_core = max(o_sps) / threads
                rows.append(
                    f"| {'discretised' if disc else 'continuous'} | {threads} | {threads} x {args.slots:.0e} | "
                    f"{max(o_sps) / 1e6:.1f} ({statistics.median(o_sps) / 1e6:.1f}) | "
                    f"{max(b_sps) / 1e6:.1f} ({statistics.median(b_sps) / 1e6:.1f}) | "
                    f"{max(o_sps) / max(b_sps):.2f} | {100 * per_core / TARGET:.0f}% | "
                    f"{o['mean_queue'][0]:.2f} +- {o['mean_queue'][1]:.2f}, {b['mean_queue'][0]:.2f} +- "
                    f"{b['mean_queue'][1]:.2f} ({zq:.1f}) | {o['loss'][0]:.5f}, {b['loss'][0]:.5f} ({zl:.1f}) |")
                print(rows[-1], flush=True)
    load_after = os.getloadavg()
    verdict = "agree" if worst_z < 4 else "DISAGREE"
    note = (f"Largest |z| between the two simulators: {worst_z:.1f} ({verdict}). Load average (1 min) "
            f"{load_before[0]:.2f} before, {load_after[0]:.2f} after.")
    print(note)
    if worst_z >= 4:
        print("warning: our simulator and the bare loop disagree beyond |z| = 4", file=sys.stderr)
    if args.no_write:
        return
    doc = ROOT / "docs" / "performance.md"
    text = doc.read_text()
    head, rest = text.split("<!-- BENCH:simulator -->", 1)
    _, tail = rest.split("<!-- /BENCH:simulator -->", 1)
    block = (f"<!-- BENCH:simulator -->\nCommand: `python benchmarks/bench_simulator.py --repeat {args.repeat} "
             f"--slots {args.slots}` on {platform.machine()}, {cores} cores, {time.strftime('%Y-%m-%d')}; "
             f"bare loop compiled with `cc -O2`.\n\n" + "\n".join(rows) + f"\n\n{note}\n<!-- /BENCH:simulator -->")
    doc.write_text(head + block + tail)


if __name__ == "__main__":
    main()
