"""Robustness: closed-class solves, bounds checked before allocation, no hangs, accurate messages."""

import time

import numpy as np
import pytest
from scipy.sparse.csgraph import connected_components

import aqmchain


def sred_model(mu, k=1):
    """The fuzzer's model: Bernoulli(1) into S-RED(4, 18, seg 10), w = 0.2, buffer 20."""
    return aqmchain.Model(buffer=20, source=aqmchain.Source.bernoulli(1.0), service=aqmchain.Service(mu),
                          aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.sred(4, 18, 10), w=0.2),
                          grid=aqmchain.GridSpec(k=k))


def closed_class(P):
    """Oracle (SciPy): the strongly connected components no edge leaves."""
    ncomp, label = connected_components(P, directed=True, connection="strong")
    P = P.tocoo()
    leaves = np.zeros(ncomp, bool)
    leaves[label[P.row[label[P.row] != label[P.col]]]] = True
    closed = [c for c in range(ncomp) if not leaves[c]]
    assert len(closed) == 1
    return label == closed[0]


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("mu", [0.3, 0.5, 0.9])
def test_auto_converges_on_the_fuzzers_model(mu, k):
    m = sred_model(mu, k)
    r = aqmchain.solve_stationary(m, response="none")
    assert r.info.status == "converged" and r.info.residual <= 1e-12, r.info.note
    g = aqmchain.solve_stationary(m, method="gauss_seidel", response="none")
    assert g.info.status == "converged"
    assert np.abs(r.pi - g.pi).sum() < 1e-10
    # the state fixed at pi_k = 1 is a probable one
    assert r.info.extra["fixed_state_probability"] > 1e-3


@pytest.mark.parametrize("method", aqmchain.stationary.METHODS)
def test_states_outside_the_closed_class_get_exactly_zero(method):
    m = sred_model(0.5, 2)
    r = aqmchain.solve_stationary(m, method=method, response="none")
    assert r.info.status == "converged", r.info.note
    inside = closed_class(r.transition_matrix())
    assert (~inside).sum() == r.build["transient_states"] >= 1
    assert np.all(r.pi[~inside] == 0.0)
    ref = aqmchain.solve_stationary(m, method="direct", response="none")
    assert np.abs(r.pi - ref.pi).sum() < 1e-10


def test_grid_size_is_refused_before_it_is_allocated():
    t0 = time.perf_counter()
    with pytest.raises(aqmchain.ModelError, match=r"grid\.k.*<= 1e7 / buffer = 1000") as exc:
        m = aqmchain.Model(buffer=10000, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.5),
                           aqm=aqmchain.Aqm(w=0.2), grid=aqmchain.GridSpec(k=10000))
        aqmchain.solve_stationary(m)
    assert exc.value.param == "grid.k" and time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("make", [lambda: aqmchain.Source.ssmp(30000, 1.5, 1.6),
                                  lambda: aqmchain.Source.ssmp_from_mean(0.5, 1.6, 30000),
                                  lambda: aqmchain.Source.ssmp(4000, 2.0, 2.0)])
def test_modulator_size_is_refused_at_once(make):
    t0 = time.perf_counter()
    with pytest.raises(aqmchain.ModelError, match=r"source\.n") as exc:
        make()
    assert exc.value.param == "source.n" and time.perf_counter() - t0 < 1.0


def test_underflowing_ssmp_is_named_and_nan_free():
    with pytest.raises(aqmchain.ModelError, match="underflow") as exc:
        aqmchain.Source.ssmp(1000, 2.0, 3.0)
    assert exc.value.param == "source.n" and "irreducible" not in str(exc.value)
    with pytest.raises(aqmchain.ModelError) as exc:
        aqmchain.Source.ssmp_from_mean(0.5, 1e300, 5)
    assert "nan" not in str(exc.value).lower() and exc.value.param == "source.n"
    with pytest.raises(aqmchain.ModelError) as exc:
        aqmchain.Source.ssmp_from_mean(1.5, 1e300, 5)
    assert "nan" not in str(exc.value).lower() and "(0, 1]" in str(exc.value)


def test_subnormal_modulator_entry_is_accepted():
    d = 1e-310
    pi = np.array(aqmchain.Source.mmbp([[0.5, 0.5], [d, 1.0 - d]], [0.2, 0.6]).modulator_stationary())
    assert pi[0] / (pi[1] * d / 0.5) == pytest.approx(1.0, rel=1e-9)


def test_solver_counts_are_bounded():
    m = sred_model(0.5)
    t0 = time.perf_counter()
    with pytest.raises(aqmchain.OptionError, match=r"'smoothing_sweeps' must be in \[1, 100\], got 2147483647"):
        aqmchain.solve_stationary(m, method="multilevel", smoothing_sweeps=2147483647)
    with pytest.raises(aqmchain.OptionError, match=r"'ncv' must be in \[0, 1000\]"):
        aqmchain.solve_stationary(m, method="arnoldi", ncv=100000)
    assert time.perf_counter() - t0 < 5.0


def test_simulator_memory_is_refused_before_allocating():
    m = aqmchain.Model(buffer=10_000_000, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.5),
                       aqm=aqmchain.Aqm(w=0.2), grid=aqmchain.GridSpec(k=1))
    t0 = time.perf_counter()
    with pytest.raises(aqmchain.StateSpaceTooLarge, match="memory_limit_bytes") as exc:
        aqmchain.simulate(m, slots=1_000_000)
    assert exc.value.param == "model.buffer" and time.perf_counter() - t0 < 1.0
    with pytest.raises(aqmchain.StateSpaceTooLarge) as exc:
        aqmchain.simulate(sred_model(0.5), slots=10**10, sample_every=1)
    assert exc.value.param == "sample_every"
    with pytest.raises(aqmchain.ModelError, match=r"<= 10000"):
        aqmchain.simulate(sred_model(0.5), slots=10**6, replications=20000)


def test_tagged_chain_with_a_rejection_below_rounding():
    """p_max = 1e-300 with certain arrivals: the main chain has no rejected-arrival
    transition (1 - a (1 - rej) rounds to 0), so the tagged chain must not have one
    either (it used to reach a state outside the chain)."""
    m = aqmchain.Model(buffer=3, source=aqmchain.Source.bernoulli(1.0), service=aqmchain.Service(0.5),
                       aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(0, 2, 1e-300), w=1.0, policy="front"),
                       grid=aqmchain.GridSpec(k=1))
    r = aqmchain.solve_stationary(m)
    assert r.response_method == "tagged_chain"
    assert r.littles_law_error < 1e-10
