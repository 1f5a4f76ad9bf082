"""Python API: objects, chain export, derived metrics, SSMP and Hurst helpers."""

import numpy as np
import pytest
import scipy.sparse as sp

import aqmchain
from conftest import construction_error, solution_distance_bound, summation_error


@pytest.fixture(scope="module")
def result(request):
    root = request.config.rootpath
    return aqmchain.solve_stationary(aqmchain.load_model(root / "examples" / "small_ecn.toml"))


def test_transition_matrix_and_labels(result):
    P = result.transition_matrix()
    assert isinstance(P, sp.csr_matrix) and P.shape == (result.states, result.states)
    assert P.indices.dtype == np.int32 and P.nnz == result.nnz
    # each row sums to 1 within the construction error of its entries and the summation of them
    per_row = int(np.diff(P.indptr).max())
    np.testing.assert_allclose(np.asarray(P.sum(axis=1)).ravel(), 1.0,
                               atol=construction_error(P.toarray()) + summation_error(per_row))
    lab = result.state_labels()
    assert set(lab) >= {"level", "queue", "avg", "modulator"}
    assert np.all(np.diff(lab["level"]) >= 0)  # ordered by n
    # marginals from the labels agree with the metrics
    # the same entries of pi added in another order
    np.testing.assert_allclose(np.bincount(lab["level"], weights=result.pi, minlength=31), result.system_pmf,
                               atol=summation_error(result.states))
    assert np.dot(lab["avg"], result.pi) == pytest.approx(result.mean_avg, rel=1e-12)


def test_derived_metrics(result):
    assert result.arrival_rate == pytest.approx(2 / 3 * 0.3 + 1 / 3 * 0.8, rel=1e-12)
    assert result.loss == pytest.approx(result.loss_aqm + result.loss_overflow, rel=1e-12)
    # flow balance: admitted = served
    admitted = result.arrival_rate * (1 - result.loss)
    assert result.throughput == pytest.approx(admitted, rel=1e-10)
    assert result.mean_system == pytest.approx(result.throughput * result.mean_response, rel=1e-9)
    tail = result.queue_tail()
    # P(queue >= 0): the pmf's sum, pi normalised in another order (twice the summation bound)
    assert tail[0] == pytest.approx(1.0, abs=2 * summation_error(result.states))
    k = result.queue_quantile(0.9)
    assert tail[k] > 0.1 - 1e-12 or k == 0
    assert result.queue_pmf[:k].sum() < 0.9 <= result.queue_pmf[: k + 1].sum() + 1e-12
    assert result.response_quantile(0.5) >= 1
    assert np.all(tail[:-1] >= tail[1:])


def test_front_policy_has_same_queue_law(request):
    root = request.config.rootpath
    model, _ = aqmchain.load_config(root / "examples" / "small_ecn.toml")
    d = aqmchain.model_to_dict(model)
    d["aqm"]["policy"] = "front"
    tail = aqmchain.solve_stationary(model)
    front = aqmchain.solve_stationary(aqmchain.model_from_dict(d)[0])
    # the same chain (the policy changes which packet leaves, not the queue): the two answers
    # are as far apart as their residuals allow; loss = sum pi_i d_i / lambda with d_i <= 1
    P = tail.transition_matrix()
    assert (abs(front.transition_matrix() - P)).max() == 0.0
    gap = solution_distance_bound(P, tail.pi, tail.info.residual, front.info.residual)
    assert np.abs(front.queue_pmf - tail.queue_pmf).sum() <= gap
    assert front.loss == pytest.approx(tail.loss, abs=gap / tail.arrival_rate)
    assert front.response_method == "tagged_chain" and front.mean_response < tail.mean_response
    assert front.to_dict()["pushed_out_prob"] == pytest.approx(front.pushed_out_prob)
    skipped = aqmchain.solve_stationary(model, response="none")
    assert skipped.mean_response is None and skipped.to_dict()["mean_response"] is None
    with pytest.raises(ValueError, match="no response-time distribution"):
        skipped.response_quantile(0.5)


def test_model_round_trip(request):
    root = request.config.rootpath
    for name in ("red_geo.toml", "small_ecn.toml", "dsred_ssmp.toml"):
        model, _ = aqmchain.load_config(root / "examples" / name)
        again, _ = aqmchain.model_from_dict(aqmchain.model_to_dict(model))
        assert aqmchain.model_to_dict(again) == aqmchain.model_to_dict(model)


def test_ssmp_constructors_and_hurst():
    n, eps = 5, float(np.finfo(float).eps)
    s = aqmchain.Source.ssmp_from_mean(0.5, 31.6, n)
    assert s.q == pytest.approx(1.927562, abs=2e-6)
    # the modulator's law against its closed form pi_j ~ q^-j, as far apart as the residual allows
    pi = np.array(s.modulator_stationary())
    P = np.array(s.matrix)
    residual = float(np.abs(pi @ P - pi).sum())
    exact = s.q ** -np.arange(n)
    exact /= exact.sum()
    dist = solution_distance_bound(P, pi, residual) + summation_error(n)
    assert np.abs(pi - exact).sum() <= dist
    # the mean is pi_0: within that distance of the closed form, which the bisection on log q puts
    # at 0.5 within its width (1e-16 max(1, |log q|), or the doubles' spacing) times
    # d pi_0 / d log q <= (n - 1) pi_0, plus pi_0's own evaluation (summation_error)
    width = max(1e-16, 4 * eps) * max(1.0, abs(np.log(s.q)))
    assert abs(s.mean_rate() - 0.5) <= dist + (n - 1) * 0.5 * width + summation_error(n)
    h = aqmchain.hurst(s)
    assert h.asymptotic_valid
    # the same formula 1 - L1 / (2 L2) evaluated twice: each log, the quotient a / q and the
    # division round once (L2's relative error from a / q is eps / L2 <= eps here), so each side
    # is within 4 eps |L1 / (2 L2)| + eps of the exact value
    ratio = np.log(s.q) / (2 * np.log(31.6 / s.q))
    assert abs(h.asymptotic - (1 - ratio)) <= 2 * (4 * eps * abs(ratio) + eps)
    assert 0.72 < h.variance_time < 0.84  # SPEC 2.1: H ~ 0.78 over levels 2^0..2^20
    assert len(h.levels) == 21 and h.levels[-1] == 2**20
    # exact variance of the aggregated process at m = 1 is Var X = mean (1 - mean): with the
    # computed mean m, |m (1 - m) - 1/4| = (m - 1/2)^2, plus the rounding of m - m^2
    m = s.mean_rate()
    assert abs(h.variances[0] - 0.25) <= (m - 0.5) ** 2 + 2 * eps * 0.25 + eps * abs(m)


def test_drop_function_is_callable_on_arrays():
    f = aqmchain.DropFunction.red(100, 200, 0.1)
    np.testing.assert_allclose(f(np.array([50.0, 150.0, 250.0])), [0.0, 0.05, 1.0])
    assert f(150) == pytest.approx(0.05)


def test_estimate_bounds_the_built_chain():
    m = aqmchain.Model(buffer=40, source=aqmchain.Source.ssmp(3, 1.5, 4.0), service=aqmchain.Service(0.5),
                       aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(10, 30, 0.1), w=0.05))
    est = aqmchain.estimate_chain(m)
    chain = aqmchain.build_chain(m)
    assert chain.n <= est["product_states"] and chain.nnz <= est["max_nnz"]
