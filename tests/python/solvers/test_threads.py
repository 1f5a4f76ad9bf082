"""The core's parallel loops on a shared machine: no more threads than the cores no other
process is running on (docs/performance.md, "Shared machines")."""

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
