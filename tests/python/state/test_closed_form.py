"""SPEC 8(a): with drop = "none" and a Bernoulli source the chain is the Geo/Geo/1/N
queue with delayed access; compare with its closed form and with SPEC 3's point."""

import math

import numpy as np
import pytest
from scipy import stats

import aqmchain
from conftest import geo_model, geo_pmf, solution_distance_bound, summation_error


@pytest.mark.parametrize("N,alpha,mu", [(5, 0.3, 0.5), (17, 0.6, 0.5), (40, 0.45, 0.5), (9, 0.9, 0.3)])
def test_finite_buffer_closed_form(N, alpha, mu):
    r = aqmchain.solve_stationary(geo_model(N, alpha, mu, w=0.25, k=2))
    p = geo_pmf(N, alpha, mu)
    # how far the solver's pi may be from the true one: its residual and the chain's conditioning
    err = solution_distance_bound(r.transition_matrix(), r.pi, r.info.residual)
    assert err < 1e-9  # the checks stay sharp
    np.testing.assert_allclose(r.system_pmf, p, rtol=0, atol=err)
    assert r.loss == pytest.approx(p[N], abs=err)  # Bernoulli arrivals see time averages
    assert r.loss_overflow == pytest.approx(p[N], abs=err)
    assert r.loss_aqm == 0.0
    assert r.throughput == pytest.approx(alpha * (1 - p[N]), abs=err)
    assert r.littles_law_error < 1e-9


def test_spec_point():
    r = aqmchain.solve_stationary(geo_model(80, 0.3, 0.5))
    assert r.mean_system == pytest.approx(1.05, abs=1e-10)
    assert r.var_system == pytest.approx(1.5225, abs=1e-10)
    assert r.mean_queue == pytest.approx(0.45, abs=1e-10)
    assert r.var_queue == pytest.approx(0.9225, abs=1e-10)
    assert r.mean_response == pytest.approx(3.5, abs=1e-10)


def test_response_pmf_is_the_negative_binomial_mixture():
    """R | n found = NegBin(n+1, mu) - 1 (n >= 1), Geometric(mu) (n = 0): built here with scipy."""
    N, alpha, mu = 15, 0.4, 0.35
    r = aqmchain.solve_stationary(geo_model(N, alpha, mu))
    err = solution_distance_bound(r.transition_matrix(), r.pi, r.info.residual)
    assert err < 1e-9  # the checks stay sharp
    p = geo_pmf(N, alpha, mu)
    c = p[:N] / p[:N].sum()  # admitted arrivals see n_{t-1} < N with the time-average law
    rr = np.arange(len(r.response_pmf))
    ref = c[0] * stats.geom.pmf(rr, mu)
    for n in range(1, N):
        ref += c[n] * stats.nbinom.pmf(rr + 1 - (n + 1), n + 1, mu)  # failures before the (n+1)-th success
    # the arrival law c is pi's law of n renormalised over the admitting states: L1 error <= 2 err / (1 - p_N)
    np.testing.assert_allclose(r.response_pmf, ref, rtol=0, atol=2 * err / (1 - p[N]) + summation_error(N))
    # the mass the pmf leaves out is the reference's tail beyond it (1 - its sum), within the
    # pmf's tolerance summed over its length; and it is what the pmf's own sum misses (mass kept)
    tail = max(0.0, 1.0 - math.fsum(ref))
    assert abs(r.response_truncated - tail) <= len(rr) * (2 * err / (1 - p[N])) + summation_error(len(rr))
    assert abs(r.response_truncated - (1.0 - math.fsum(r.response_pmf))) <= summation_error(len(rr))
    mean = np.dot(rr, ref)
    assert r.mean_response == pytest.approx(mean, rel=1e-12)
    assert r.var_response == pytest.approx(np.dot(rr**2, ref) - mean**2, rel=1e-10)
    assert r.mean_system == pytest.approx(r.throughput * r.mean_response, rel=1e-9)
