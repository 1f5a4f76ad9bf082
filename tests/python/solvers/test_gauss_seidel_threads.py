"""Gauss-Seidel sweeps over at least 50,000 states run on two threads as two ranges of states
(Gauss-Seidel inside a range, the other range's values from the sweep's start): the
gauss_seidel method on a plain RED chain and multilevel (whose smoother they are) on a
two-class chain, on two threads fixed, must give vectors whose residual ||pi P - pi||_1,
computed here from the exported matrix, meets the tolerance."""

import json
import os
import subprocess
import sys

import numpy as np

import aqmchain
from conftest import ROOT, residual_evaluation_error, summation_error

MODELS = r"""
import aqmchain as a
def plain():  # 60,141 states
    return a.Model(buffer=60, source=a.Source.bernoulli(0.45), service=a.Service(0.5),
                   aqm=a.Aqm(drop=a.DropFunction.red(15, 30, 0.1), w=0.05), grid=a.GridSpec(k=48, refine="none"))
def classes(root):  # the mice/ECN example at buffer 25: 63,147 states
    return a.load_model(root + "/examples/classes/mice_ecn.toml").replace(model={"buffer": 25})
"""

CHILD = MODELS + r"""
import json, sys
import numpy as np
a.set_num_threads(2)
out = {}
for method, model in (("gauss_seidel", plain()), ("multilevel", classes(sys.argv[2]))):
    c = a.build_chain(model)
    r = a.solve_stationary(c, method=method, tol=1e-10, max_iter=20000, response="none")
    np.save(sys.argv[1] + "_" + method + ".npy", np.asarray(r.pi))
    out[method] = {"residual": r.info.residual, "states": c.n}
print(json.dumps(out))
"""


def test_sweeps_on_two_threads_meet_their_tolerance(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["AQMCHAIN_ADAPTIVE_THREADS"] = "0"  # two threads whatever else runs
    base = str(tmp_path / "pi")
    p = subprocess.run([sys.executable, "-c", CHILD, base, str(ROOT)], env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    space = {}
    exec(MODELS, space)
    for method, model in (("gauss_seidel", space["plain"]()), ("multilevel", space["classes"](str(ROOT)))):
        chain = aqmchain.build_chain(model)
        assert chain.n == out[method]["states"] >= 50_000
        P = aqmchain.transition_matrix(chain)
        pi = np.load(f"{base}_{method}.npy")
        assert pi.min() >= 0.0 and abs(pi.sum() - 1.0) <= 2 * summation_error(chain.n)
        residual = np.abs(P.T @ pi - pi).sum()
        assert residual <= 1e-10 + residual_evaluation_error(P), method
