"""Poisson's equation (I - P) h = b (continuous: -G h = b) by the core's preconditioned GMRES
(used by the adjoint solves of the sensitivities and by continuous-time rewards over [0, t)),
against dense solves written here."""

import numpy as np
import pytest

import aqmchain
from aqmchain import _core

SLOTTED = {"model": {"buffer": 8},
           "source": {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.2, 0.8]], "arrival": [0.2, 0.7]},
           "service": {"mu": 0.5},
           "aqm": {"drop": "red", "min_th": 2, "max_th": 6, "p_max": 0.2, "w": 0.5, "spacing": "count"},
           "grid": {"k": 1, "refine": "none"}}
CONTINUOUS = {"model": {"buffer": 10, "time": "continuous"},
              "source": {"kind": "mmpp", "generator": [[-1.0, 1.0], [2.0, -2.0]], "rates": [0.3, 1.5]},
              "service": {"kind": "exponential", "mu": 0.8},
              "aqm": {"drop": "red", "min_th": 2, "max_th": 7, "p_max": 0.3, "w": 0.5},
              "grid": {"k": 2, "refine": "none"}}


@pytest.mark.parametrize("doc", [SLOTTED, CONTINUOUS], ids=["slotted", "continuous"])
def test_poisson_equation_equals_the_dense_solve(doc):
    chain = aqmchain.build_chain(aqmchain.model_from_dict(doc)[0])
    M = aqmchain.transition_matrix(chain).toarray()
    n = chain.n
    if chain.time == "continuous":
        M = M - np.diag(M.sum(axis=1))  # the generator, rows summing to 0 whatever the diagonal stored
        A = -M
    else:
        A = np.eye(n) - M
    pi = aqmchain.solve_stationary(chain, method="direct", response="none").pi
    rng = np.random.default_rng(7)
    rhs = []
    for _ in range(3):
        b = rng.standard_normal(n)
        rhs.append(b - (pi @ b))  # pi b = 0: the full equation is solvable
    k = int(np.argmax(pi))
    out = _core.solve_poisson(chain, rhs, k, 1e-13, 2000)
    assert out["status"] == "converged" and out["fixed_state"] == k and len(out["iterations"]) == 3
    keep = np.r_[0:k, k + 1:n]
    B = A[np.ix_(keep, keep)]
    for j, b in enumerate(rhs):
        ref = np.zeros(n)
        ref[keep] = np.linalg.solve(B, b[keep])
        h = out["h"][j]
        assert h[k] == 0.0
        # the reduced solve's error: its relative residual times the condition of B
        bound = np.linalg.cond(B, 1) * (out["residuals"][j] + 1e-15 * n) * np.abs(ref).max()
        assert np.abs(h - ref).max() <= bound, (np.abs(h - ref).max(), bound)
        # and, pi b = 0, the full equation holds, row k included
        assert np.abs(A @ h - b).max() <= 10 * bound * np.abs(A).max()


def test_bad_input_is_named():
    chain = aqmchain.build_chain(aqmchain.model_from_dict(SLOTTED)[0])
    with pytest.raises(aqmchain.ModelError, match="'k'"):
        _core.solve_poisson(chain, [np.zeros(chain.n)], chain.n, 1e-13, 100)
    with pytest.raises(aqmchain.ModelError, match="'rhs'"):
        _core.solve_poisson(chain, [np.zeros(3)], -1, 1e-13, 100)
    with pytest.raises(aqmchain.OptionError, match="'tol'"):
        _core.solve_poisson(chain, [np.zeros(chain.n)], -1, 0.0, 100)
