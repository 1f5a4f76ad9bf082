"""Multilevel aggregation: the exact answer is a fixed point of its cycle (which checks the
aggregated chains built from the merged entries of level 0), on one thread and on two, and
iterant recombination of the cycles reaches the same answer in fewer cycles."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import aqmchain
from conftest import ROOT, residual_evaluation_error, solution_distance_bound

CHILD = r"""
import json, sys
import numpy as np
import aqmchain as a
threads, what = int(sys.argv[2]), sys.argv[3]
a.set_num_threads(threads)
c = a.build_chain(a.load_model(sys.argv[1] + "/examples/classes/mice_ecn.toml").replace(model={"buffer": 25}))
out = {"states": c.n, "threads": a.num_threads()}
if what.endswith(".npy"):  # the exact answer, from the parent's direct solve
    r = a.solve_stationary(c, method="multilevel", x0=np.load(what), max_iter=1, tol=1e-12, response="none")
    out.update(cycle=r.info.residual, cycles=r.info.iterations)
else:
    for gamma in (1, 2):
        for depth in (0, 3):
            r = a.solve_stationary(c, method="multilevel", recombination_depth=depth, cycle_gamma=gamma, response="none")
            np.save(f"{what}_{gamma}_{depth}.npy", np.asarray(r.pi))
            out[f"{gamma}_{depth}"] = [r.info.iterations, r.info.extra["recombined_cycles"], r.info.residual]
print(json.dumps(out))
"""


def mice_ecn(buffer=25):  # 63,147 states at buffer 25: the threaded passes run from 50,000 on
    return aqmchain.load_model(str(ROOT / "examples/classes/mice_ecn.toml")).replace(model={"buffer": buffer})


def run_child(threads: int, what: str) -> dict:
    """The child on `threads` threads fixed (not lowered when other processes run)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["AQMCHAIN_ADAPTIVE_THREADS"] = "0"
    p = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(threads), what], env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    if out["threads"] != threads:
        pytest.skip(f"this build runs {out['threads']} thread(s), not {threads}")
    return out


@pytest.fixture(scope="module")
def solved():
    chain = aqmchain.build_chain(mice_ecn())
    ref = aqmchain.solve_stationary(chain, method="direct", response="none")
    return chain, aqmchain.transition_matrix(chain), ref


@pytest.mark.parametrize("threads", [1, 2])
def test_one_cycle_from_the_exact_answer_stays_there(solved, threads, tmp_path):
    """At pi the aggregated chains' answers are pi's aggregates, so a cycle returns pi up to
    the rounding of its own arithmetic, taken here as one residual evaluation's error: a
    wrong coarse entry (a merged transition lost or counted twice) moves it by far more (a
    relative change of 1e-6 in pi leaves a residual of 1e-9 after one cycle here).  Two
    threads build level 0's merged entries in two ranges of coarse rows."""
    chain, P, ref = solved
    np.save(tmp_path / "pi.npy", ref.pi)
    out = run_child(threads, str(tmp_path / "pi.npy"))
    assert out["states"] == chain.n >= 50_000 and out["cycles"] == 1
    assert out["cycle"] <= ref.info.residual + residual_evaluation_error(P)


def test_recombination_takes_fewer_cycles_to_the_same_answer(solved, tmp_path):
    """On one thread fixed the cycles are the same arithmetic on any machine: 38 and 33
    cycles without recombination (V- and W-cycles), 34 and 25 with the default depth 3."""
    chain, P, ref = solved
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        out = run_child(1, "pi")
    finally:
        os.chdir(cwd)
    worst = max(out[f"{g}_{d}"][2] for g in (1, 2) for d in (0, 3))
    bound = solution_distance_bound(P, ref.pi, worst, ref.info.residual)
    for gamma in (1, 2):
        plain, fast = out[f"{gamma}_0"], out[f"{gamma}_3"]
        assert plain[1] == 0 and fast[1] >= 1  # recombined cycles
        assert fast[0] < plain[0]
        for depth in (0, 3):
            pi = np.load(tmp_path / f"pi_{gamma}_{depth}.npy")
            assert out[f"{gamma}_{depth}"][2] <= 1e-12
            assert np.abs(pi - ref.pi).sum() <= bound


def test_recombination_depth_is_checked():
    with pytest.raises(aqmchain.OptionError, match=r"recombination_depth.*\[0, 50\]"):
        aqmchain.solve_stationary(mice_ecn(10), method="multilevel", recombination_depth=51)
