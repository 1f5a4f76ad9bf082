"""Multilevel aggregation: the exact answer is a fixed point of its cycle (which checks the
aggregated chains built from the merged entries of level 0), and Anderson acceleration of
the cycles reaches the same answer in fewer cycles."""

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
a.set_num_threads(2)
c = a.build_chain(a.load_model(sys.argv[1] + "/examples/classes/mice_ecn.toml").replace(model={"buffer": 25}))
ref = a.solve_stationary(c, method="direct", response="none")
r = a.solve_stationary(c, method="multilevel", x0=np.asarray(ref.pi), max_iter=1, tol=1e-12, response="none")
print(json.dumps({"states": c.n, "direct": ref.info.residual, "cycle": r.info.residual, "cycles": r.info.iterations}))
"""


def mice_ecn(buffer=25):  # 63,147 states at buffer 25: the threaded passes run from 50,000 on
    return aqmchain.load_model(str(ROOT / "examples/classes/mice_ecn.toml")).replace(model={"buffer": buffer})


@pytest.fixture(scope="module")
def solved():
    chain = aqmchain.build_chain(mice_ecn())
    ref = aqmchain.solve_stationary(chain, method="direct", response="none")
    return chain, aqmchain.transition_matrix(chain), ref


def test_one_cycle_from_the_exact_answer_stays_there(solved):
    """At pi the aggregated chains' answers are pi's aggregates, so a cycle returns pi: a
    wrong coarse entry (a merged transition lost or counted twice) moves it by far more than
    its residual (a relative change of 1e-6 in pi leaves 1e-9 after one cycle here)."""
    chain, P, ref = solved
    assert chain.n >= 50_000
    r = aqmchain.solve_stationary(chain, method="multilevel", x0=np.asarray(ref.pi), max_iter=1, response="none")
    assert r.info.iterations == 1
    assert r.info.residual <= ref.info.residual + residual_evaluation_error(P)
    assert np.abs(r.pi - ref.pi).sum() <= solution_distance_bound(P, ref.pi, r.info.residual, ref.info.residual)


def test_one_cycle_from_the_exact_answer_stays_there_on_two_threads(solved):
    """The same with two threads fixed: the merged entries of level 0 are built in two
    ranges of coarse rows, and the restriction, smoothing and residual run on both."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["AQMCHAIN_ADAPTIVE_THREADS"] = "0"  # two threads whatever else runs
    p = subprocess.run([sys.executable, "-c", CHILD, str(ROOT)], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    P = solved[1]
    assert out["states"] >= 50_000 and out["cycles"] == 1
    assert out["cycle"] <= out["direct"] + residual_evaluation_error(P)


@pytest.mark.parametrize("gamma", [1, 2])
def test_anderson_acceleration_takes_fewer_cycles_to_the_same_answer(solved, gamma):
    chain, P, ref = solved
    plain = aqmchain.solve_stationary(chain, method="multilevel", anderson_depth=0, cycle_gamma=gamma, response="none")
    fast = aqmchain.solve_stationary(chain, method="multilevel", cycle_gamma=gamma, response="none")
    assert plain.info.extra["accelerated_cycles"] == 0
    assert fast.info.extra["accelerated_cycles"] >= 1
    # 33-38 cycles without, 24-34 with the default depth of 3 (W- and V-cycles) when measured
    assert fast.info.iterations < plain.info.iterations
    bound = solution_distance_bound(P, ref.pi, max(plain.info.residual, fast.info.residual), ref.info.residual)
    for r in (plain, fast):
        assert r.info.residual <= 1e-12
        assert np.abs(r.pi - ref.pi).sum() <= bound


def test_anderson_depth_is_checked():
    with pytest.raises(aqmchain.OptionError, match=r"anderson_depth.*\[0, 50\]"):
        aqmchain.solve_stationary(mice_ecn(10), method="multilevel", anderson_depth=51)
