"""Chains with transitions near or below round-off: the solvers keep rare exits exact (the
diagonal of I - P from the other entries of its row, not 1 - P_ii), and a chain that only
such transitions hold together is refused: no residual can tell how it shares its probability."""

import numpy as np
import pytest

import aqmchain
from conftest import solution_distance_bound
from conftest import geo_model, geo_pmf

EPS = float(np.finfo(float).eps)


def test_rare_exits_keep_their_precision():
    # every state is left with probability about 1e-9: 1 - P_ii would keep about 7 digits of it
    N, alpha, mu = 10, 1e-9, 2e-9
    r = aqmchain.solve_stationary(geo_model(N, alpha, mu), method="direct")
    p = geo_pmf(N, alpha, mu)
    # componentwise: entries built to a few eps (products of at most 8 factors) move pi by at most
    # 2 n times their relative error (perturbation bound of an M-matrix with exact diagonal)
    np.testing.assert_allclose(r.system_pmf, p, rtol=2 * r.states * 8 * EPS, atol=0)
    # the iterative methods: within what their residuals guarantee
    P = r.transition_matrix()
    for method in ("krylov", "gauss_seidel", "multilevel"):
        x = aqmchain.solve_stationary(geo_model(N, alpha, mu), method=method, tol=1e-13)
        assert np.abs(x.pi - r.pi).sum() <= solution_distance_bound(P, r.pi, x.info.residual, r.info.residual)


def test_a_rare_exit_that_splits_nothing_is_solved():
    # mu = 1e-300: the full system is left only by a service, but it is the only closed class
    # once the rare transitions are dropped: the law is determined (all mass at N)
    N = 6
    r = aqmchain.solve_stationary(geo_model(N, 0.4, 1e-300))
    assert r.system_pmf[N] == pytest.approx(1.0, abs=1e-250)
    assert r.loss == pytest.approx(1.0, abs=1e-250)


def red_mu(mu):
    return aqmchain.Model(buffer=10, source=aqmchain.Source.bernoulli(0.4), service=aqmchain.Service(mu),
                          aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(2, 5, 0.5), w=0.5),
                          grid=aqmchain.GridSpec(k=1, refine="none"))


@pytest.mark.parametrize("method", ["auto", "direct", "krylov", "gauss_seidel"])
def test_a_chain_held_together_by_round_off_is_refused(method):
    # mu = 1e-300: once avg passes max_th every arrival is dropped, and each queue length above
    # it holds the chain until a service (probability 1e-300): several nearly closed classes whose
    # shares no residual can see (three methods gave mean queues of 20, 27 and 34 on such a chain)
    with pytest.raises(aqmchain.ReducibleChainError, match=r"not determined to tol = .* closed classes .*level="):
        aqmchain.solve_stationary(red_mu(1e-300), method=method)
    # the same model with a service probability the residual can see is solved
    r = aqmchain.solve_stationary(red_mu(1e-6), method=method)
    assert r.info.status == "converged"
