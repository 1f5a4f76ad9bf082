"""Simulator throughput on the seeds' GEO RED model, against a bare C loop of the same model.

    .venv/bin/python benchmarks/bench_simulator.py              # writes the simulator table of docs/performance.md
    .venv/bin/python benchmarks/bench_simulator.py --no-write   # prints it only
    .venv/bin/python benchmarks/bench_simulator.py --repeat 5 --slots 100000000
    .venv/bin/python benchmarks/bench_simulator.py --loops --slots 20000000   # each slot loop, ours only

`--loops` times each of the simulator's loop configurations on one thread (ours only, no bare
loop, nothing written): the classless loop on the GEO RED model (continuous and discretised
avg), the class-aware loop on examples/classes/mice_ecn.toml, the stateful loop on
examples/load_step/adaptive_red.toml and batch arrivals on examples/batch_red.toml, each `--repeat` times, best and median slots per second.

`benchmarks/bare_sim.c` (an independent minimal simulator with mean queue and loss only, in
two loops: `plain`, the obvious code with a branch per random decision, and `branch-free`,
the decisions as 0/1 arithmetic) is compiled here with the system C compiler (`cc -O2`) and
run in the same session as ours, one process per thread.  Each configuration (continuous
and discretised avg, one thread and all cores) is run `--repeat` times, alternating ours
and the two bare loops; the table shows the best and the median slots per second and the
ratios of the bests.  Our mean queue and loss are printed beside the plain loop's with the
z-score of their difference, so that a fast but wrong run is visible.  The branch-free loop
draws its random numbers in the order ours does (docs/conventions.md), so with the same
seed on one thread it must reproduce our mean queue and loss to rounding: the last
column says whether it did.
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


def run_bare(exe: Path, model, slots: int, seed: int, threads: int, k: int, branch_free: bool) -> dict:
    """`threads` processes at once (seeds seed, seed + 1, ...); slots/s over the wall time of all."""
    flag = ["-b"] if branch_free else []
    t0 = time.perf_counter()
    procs = [subprocess.Popen([str(exe), *flag, *bare_args(model, slots, slots // 10, seed + i, k)],
                              stdout=subprocess.PIPE, text=True) for i in range(threads)]
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - t0
    if any(p.returncode for p in procs):
        raise RuntimeError("bare_sim failed")
    runs = [dict(kv.split("=") for kv in out.split()) for out in outs]
    f = lambda key: [float(r[key]) for r in runs]  # noqa: E731
    # equal-length runs: the pooled estimate is the average, its half-width sqrt(sum hw^2) / P
    pool = lambda key: (statistics.fmean(f(key)), math.sqrt(sum(h * h for h in f(key + "_hw"))) / threads)  # noqa: E731
    return {"sps": threads * slots / wall, "mean_queue": pool("mean_queue"), "loss": pool("loss")}


def run_ours(model, slots: int, seed: int, threads: int, disc: bool) -> dict:
    s = aqmchain.simulate(model, slots=slots, replications=threads, seed=seed, discretised=disc, threads=threads)
    return {"sps": s.slots_per_second, "mean_queue": (s.mean_queue, s.ci["mean_queue"]),
            "loss": (s.loss, s.ci["loss"])}


def z(a: tuple[float, float], b: tuple[float, float]) -> float:
    sd = math.hypot(a[1], b[1]) / 1.96
    return abs(a[0] - b[0]) / sd if sd > 0 else (0.0 if a[0] == b[0] else math.inf)


LOOPS = (("classless, continuous avg", "examples/red_geo.toml", False),
         ("classless, discretised avg", "examples/red_geo.toml", True),
         ("class-aware (mice_ecn)", "examples/classes/mice_ecn.toml", False),
         ("stateful (adaptive_red)", "examples/load_step/adaptive_red.toml", False),
         ("batch arrivals (batch_red)", "examples/batch_red.toml", False))


def bench_loops(slots: int, repeat: int) -> None:
    """Best and median slots/s of each loop configuration on one thread, per wall second and per
    second of the thread's CPU time (the replication runs on the calling thread): on a busy
    machine the second is the steadier measure of the loop itself."""
    load_before = os.getloadavg()
    print("| loop | slots per run | M slots/s best (median) | per CPU second: best (median) |\n|---|---|---|---|")
    for name, path, disc in LOOPS:
        model = aqmchain.load_model(ROOT / path)
        wall, cpu = [], []
        for i in range(repeat):
            t0, c0 = time.perf_counter(), time.thread_time()
            sps = run_ours(model, slots, 1 + 100 * i, 1, disc)["sps"]
            dt, dc = time.perf_counter() - t0, time.thread_time() - c0
            wall.append(sps)
            cpu.append(sps * dt / dc if dc > 0 else sps)
        cell = lambda v: f"{max(v) / 1e6:.1f} ({statistics.median(v) / 1e6:.1f})"  # noqa: E731
        print(f"| {name} | {slots:.0e} | {cell(wall)} | {cell(cpu)} |", flush=True)
    print(f"Load average (1 min) {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", type=int, default=100_000_000, help="slots per replication (and per bare process)")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each configuration (best and median reported)")
    ap.add_argument("--threads", type=int, nargs="*", default=None, help="thread counts (default: 1 and all cores)")
    ap.add_argument("--no-write", action="store_true", help="print the table, leave docs/performance.md alone")
    ap.add_argument("--loops", action="store_true", help="time each slot loop (ours only, one thread), write nothing")
    args = ap.parse_args()
    if args.loops:
        return bench_loops(args.slots, args.repeat)
    cores = os.cpu_count() or 1
    thread_counts = args.threads or sorted({1, cores})
    model = aqmchain.load_model(ROOT / "examples" / "red_geo.toml")
    k = model.grid.k
    load_before = os.getloadavg()
    rows = ["| avg | threads | slots per run | ours: M slots/s best (median) | bare plain | bare branch-free | "
            "ours / plain | ours / branch-free | ours per core vs 50 M | mean queue: ours, plain (z) | "
            "loss: ours, plain (z) | branch-free, same stream: same answer |",
            "|" + "---|" * 12]
    worst_z, same_all = 0.0, True
    with tempfile.TemporaryDirectory() as tmp:
        exe = compile_bare(Path(tmp))
        for disc in (False, True):
            for threads in thread_counts:
                ours, plain, free = [], [], []
                for i in range(args.repeat):  # alternate, so that a busy moment hits all three
                    seed = 1 + 100 * i
                    ours.append(run_ours(model, args.slots, seed, threads, disc))
                    plain.append(run_bare(exe, model, args.slots, seed + 50, threads, k if disc else 0, False))
                    free.append(run_bare(exe, model, args.slots, seed, threads, k if disc else 0, True))
                best = {name: max(r["sps"] for r in runs) for name, runs in (("o", ours), ("p", plain), ("f", free))}
                med = {name: statistics.median(r["sps"] for r in runs)
                       for name, runs in (("o", ours), ("p", plain), ("f", free))}
                o, p = ours[-1], plain[-1]
                zq, zl = z(o["mean_queue"], p["mean_queue"]), z(o["loss"], p["loss"])
                worst_z = max(worst_z, zq, zl)
                if threads == 1:
                    same = all(math.isclose(a[key][0], b[key][0], rel_tol=1e-11)
                               for a, b in zip(ours, free) for key in ("mean_queue", "loss"))
                    same_all &= same
                    same_txt = "yes" if same else "NO"
                else:
                    same_txt = "(other streams)"
                cell = lambda key: f"{best[key] / 1e6:.1f} ({med[key] / 1e6:.1f})"  # noqa: E731
                rows.append(
                    f"| {'discretised' if disc else 'continuous'} | {threads} | {threads} x {args.slots:.0e} | "
                    f"{cell('o')} | {cell('p')} | {cell('f')} | {best['o'] / best['p']:.2f} | "
                    f"{best['o'] / best['f']:.2f} | {100 * best['o'] / threads / TARGET:.0f}% | "
                    f"{o['mean_queue'][0]:.2f} +- {o['mean_queue'][1]:.2f}, {p['mean_queue'][0]:.2f} +- "
                    f"{p['mean_queue'][1]:.2f} ({zq:.1f}) | {o['loss'][0]:.5f}, {p['loss'][0]:.5f} ({zl:.1f}) | "
                    f"{same_txt} |")
                print(rows[-1], flush=True)
    load_after = os.getloadavg()
    verdict = "agree" if worst_z < 4 else "DISAGREE"
    note = (f"Largest |z| between ours and the plain bare loop: {worst_z:.1f} ({verdict}); the branch-free bare "
            f"loop on our stream {'reproduced' if same_all else 'did NOT reproduce'} our answers. Load average "
            f"(1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after.")
    print(note)
    if worst_z >= 4 or not same_all:
        print("warning: our simulator and the bare loops disagree", file=sys.stderr)
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
