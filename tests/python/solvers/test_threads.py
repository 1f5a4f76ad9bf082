"""The core's parallel loops on a shared machine: no more threads than the cores no other
process is running on (docs/performance.md, "Shared machines")."""

import json
import os
import subprocess
import sys

import pytest

CHILD = r"""
import os, subprocess, sys
import aqmchain
from aqmchain import _core
print("policy", os.environ.get("OMP_WAIT_POLICY"))
aqmchain.set_num_threads(2)
hog = subprocess.Popen([sys.executable, "-c", "print('ready', flush=True)\nwhile True: pass"],
                       stdout=subprocess.PIPE, text=True)
try:
    assert hog.stdout.readline().strip() == "ready"
    # the hog is runnable from now on: every reading of the runnable count includes it
    print("busy", _core.loop_threads())
finally:
    hog.kill()
    hog.wait()
aqmchain.set_num_threads(1)
print("one", _core.loop_threads())
"""


def run_child(policy, adaptive=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "AQMCHAIN_ADAPTIVE_THREADS")}
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    if adaptive is not None:
        env["AQMCHAIN_ADAPTIVE_THREADS"] = adaptive
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return dict(line.split(" ", 1) for line in p.stdout.strip().splitlines())


@pytest.mark.skipif(not os.path.exists("/proc/loadavg"), reason="the runnable count is read from /proc/loadavg")
def test_a_busy_core_takes_a_thread_away():
    out = run_child(None)
    assert out["policy"] == "None"  # the package leaves OpenMP's settings to the user
    assert int(out["busy"]) == 1  # two cores, one held by the busy process (more load only lowers it)
    assert int(out["one"]) == 1


def test_active_waits_or_the_switch_keep_the_thread_count():
    out = run_child("active")
    assert out["policy"] == "active"
    assert int(out["busy"]) == 2  # the user said the machine is theirs: no adaptation
    assert int(out["one"]) == 1
    out = run_child(None, adaptive="0")
    assert int(out["busy"]) == 2 and int(out["one"]) == 1


LEVELS_CHILD = r"""
import hashlib, json
import numpy as np
import aqmchain as a
a.set_num_threads(2)
# a drop-spacing count chain (87,544 states): its backward block sweep has 44 levels of about
# a hundred blocks, so the solver sweeps by levels on two threads
m = a.Model(buffer=40, source=a.Source.bernoulli(0.5), service=a.Service(0.5),
            aqm=a.Aqm(drop=a.DropFunction.red(15, 30, 0.1), w=0.07, spacing="count", count_max=20000),
            grid=a.GridSpec(k=1, refine="none"))
r = a.solve_stationary(a.build_chain(m), method="krylov", tol=1e-12, response="none")
pi = np.ascontiguousarray(r.pi, dtype=np.float64)
print(json.dumps({"pi": hashlib.sha256(pi.tobytes()).hexdigest(), "iterations": r.info.iterations,
                  "residual": r.info.residual, "extra": r.info.extra}))
"""


def solve_in_child(levels):
    # the thread count fixed at two for every loop (the dot products' sums then split the same
    # way in both runs); AQMCHAIN_LEVEL_SWEEPS=0 keeps every block sweep sequential
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "AQMCHAIN_LEVEL_SWEEPS")}
    env["AQMCHAIN_ADAPTIVE_THREADS"] = "0"
    if not levels:
        env["AQMCHAIN_LEVEL_SWEEPS"] = "0"
    p = subprocess.run([sys.executable, "-c", LEVELS_CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_block_sweeps_by_levels_give_the_sequential_solve_bit_for_bit():
    # Each block of a level runs the sequential sweep's own per-block code on values that are
    # final in both orders, so the iterates, and the answer, agree in every bit (docs/performance.md,
    # "Block sweeps by levels").
    seq, lev = solve_in_child(False), solve_in_child(True)
    for out in (seq, lev):
        assert out["extra"]["sweep_gain_backward"] >= 1.25  # the rule chose levels for this chain
        assert 1 < out["extra"]["sweep_levels_backward"] < out["extra"]["blocks"]
    assert seq["extra"]["level_sweeps"] == 0
    # the first sweep is sequential (its time), the second by levels whatever the load
    assert lev["extra"]["level_sweeps"] >= 1
    assert lev["iterations"] == seq["iterations"]
    assert lev["residual"] == seq["residual"]
    assert lev["pi"] == seq["pi"]
