"""Transient exponential kernels p(t) = p0 exp(t G).  Oracles: scipy.linalg.expm on dense
generators, the kernels against uniformisation on a large sparse generator built here with
scipy.sparse (and against its stationary law, from a sparse solve, at long horizons), Poisson
weights against logarithms computed in decimal arithmetic."""

import math
from decimal import Decimal, getcontext
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import aqmchain
from aqmchain import _core
from conftest import summation_error

ROOT = Path(__file__).resolve().parents[3]


def random_generator(n, seed, density=0.3, spread=0.0):
    """Dense generator: random rates on a random pattern, row scales 10^U(-spread, spread)."""
    rng = np.random.default_rng(seed)
    G = rng.random((n, n)) * (rng.random((n, n)) < density)
    if spread:
        G *= 10.0 ** rng.uniform(-spread, spread, (n, 1))
    np.fill_diagonal(G, 0.0)
    G -= np.diag(G.sum(axis=1))
    return G


def csr(G):
    S = sp.csr_matrix(G)
    S.sort_indices()
    return S.indptr.astype(np.int32), S.indices.astype(np.int32), S.data


def options(**kw):
    o = _core.TransientOptions()
    for k, v in kw.items():
        setattr(o, k, v)
    return o


def expm_multiply(G, p0, times, method, blocks=None, **kw):
    indptr, indices, data = G if isinstance(G, tuple) else csr(G)
    return _core.expm_multiply_csr(indptr, indices, data, np.asarray(p0, float), np.asarray(times, float), method,
                                   options(**kw), blocks)


def l1_rows(A, B):
    return np.abs(A - B).sum(axis=-1)


# ------------------------------------------------------------------ names and defaults written once

def test_names_and_defaults_come_from_the_core():
    assert _core.transient_methods() == ["auto", "step", "krylov", "rational_krylov", "uniformization"]
    assert list(_core.TransientMethod.__members__) == _core.transient_methods()
    assert aqmchain.TRANSIENT_METHODS == tuple(_core.transient_methods())
    names = _core.TransientOptions.option_names()
    assert names == ["tol", "krylov_dim", "max_steps", "max_applications", "breakdown", "project", "shift_ratio",
                     "inner_max_iter"]
    d = _core.TransientOptions.defaults()
    assert d["tol"] == 1e-8 and d["krylov_dim"] == 30 and d["project"] is True
    assert d["shift_ratio"] == 0.1 and d["inner_max_iter"] == 1000
    _core.TransientOptions().validate()


# ------------------------------------------------------------------ dense Pade

@pytest.mark.parametrize("n,spread", [(2, 0.0), (30, 0.0), (120, 3.0), (300, 0.0), (300, 2.0)])
def test_pade_against_scipy(n, spread):
    G = random_generator(n, seed=n, spread=spread)
    for t in (0.0, 1e-6, 0.1, 1.0, 30.0):  # up to ||t G||_inf = 1.2e6
        E = _core.expm_dense(t * G)
        R = sla.expm(t * G)
        # rows are probability laws: the L1 distance is a relative error
        assert l1_rows(E, R).max() <= 1e-10, (n, spread, t)
        # rows of exp(tG) sum to 1; each of the s squarings (and the Pade solve) adds about n eps to
        # a row sum's error, s the scaling that brings ||t G||_inf below 1/2 (the kernel's rule)
        norm = float(np.abs(t * G).sum(axis=1).max())
        s = max(0, math.frexp(norm)[1] + 1) if norm > 0 else 0
        np.testing.assert_allclose(E.sum(axis=1), 1.0, rtol=0, atol=4 * (s + 2) * n * np.finfo(float).eps)


def stationary(G):
    """pi G = 0, sum pi = 1 by a dense solve with two refinement steps."""
    A = G.T.copy()
    A[-1, :] = 1.0
    b = np.zeros(len(G))
    b[-1] = 1.0
    pi = np.linalg.solve(A, b)
    for _ in range(2):
        pi += np.linalg.solve(A, b - A @ pi)
    return pi


@pytest.mark.parametrize("n,spread", [(120, 3.0), (300, 2.0)])
def test_pade_long_times_are_stationary(n, spread):
    # ||t G|| up to 4e9 (about 33 squarings; measured errors 5e-14 at t = 1e4, 1.6e-11 at 1e5).
    # Here scipy's own rows miss 1 by up to 8e-10, so the oracle is the stationary law.
    G = random_generator(n, seed=n, spread=spread)
    pi = stationary(G)
    for t in (1e4, 1e5):
        E = _core.expm_dense(t * G)
        assert l1_rows(E, pi).max() <= 1e-10, t


def test_pade_general_matrix_and_bad_input():
    rng = np.random.default_rng(7)
    A = rng.standard_normal((12, 12))
    R = sla.expm(A)
    assert np.abs(_core.expm_dense(A) - R).max() <= 1e-12 * np.abs(R).max()
    with pytest.raises(aqmchain.ModelError, match="matrix"):
        _core.expm_dense(np.full((3, 3), np.nan))
    with pytest.raises(aqmchain.ModelError, match="square"):
        _core.expm_dense(np.zeros((2, 3)))


# ------------------------------------------------------------------ Krylov and uniformisation against scipy

@pytest.mark.parametrize("method", ["krylov", "rational_krylov", "uniformization"])
@pytest.mark.parametrize("n,spread,times", [
    (5, 0.0, [0.0, 0.01, 1.0, 50.0]),
    (80, 0.0, [1e-4, 0.5, 3.0]),
    (300, 0.0, [0.0, 0.2, 2.0, 2.0, 40.0]),
    (200, 1.5, [1e-3, 0.1, 1.0]),  # stiff: diagonal from about 0.2 to 2000
])
def test_kernels_against_scipy(method, n, spread, times):
    G = random_generator(n, seed=100 + n, density=0.05 if n > 100 else 0.3, spread=spread)
    rng = np.random.default_rng(n)
    p0 = rng.random(n)
    p0 /= p0.sum()
    Y, r = expm_multiply(G, p0, times, method, tol=1e-12)
    assert r.converged and r.status == "converged", r.note
    assert r.method == method and r.outputs == len(times)
    ref = np.array([p0 @ sla.expm(t * G) for t in times])
    err = l1_rows(Y, ref)
    assert err.max() <= 1e-10, err
    np.testing.assert_array_equal(r.p, Y[-1])
    assert r.t_reached == times[-1]
    assert r.operator_applications > 0 and r.steps > 0


def test_krylov_small_basis_and_happy_breakdown():
    # m >= n: the basis is invariant (a happy breakdown) and the step goes to the output time at once
    G = random_generator(6, seed=3)
    p0 = np.full(6, 1 / 6)
    Y, r = expm_multiply(G, p0, [0.5, 4.0], "krylov", krylov_dim=30, tol=1e-12)
    assert r.krylov_dim == 6 and r.breakdown and r.breakdown_dim <= 6
    ref = np.array([p0 @ sla.expm(t * G) for t in (0.5, 4.0)])
    assert l1_rows(Y, ref).max() <= 1e-12
    # small bases converge with many small steps (m = 2: 5921 steps here; m = 1 has a local
    # error O(tau^2) against the tolerance tau tol, so its steps are about tol long)
    G = random_generator(40, seed=4)
    p0 = np.eye(40)[0]
    steps = []
    for m in (2, 3, 5):
        Y, r = expm_multiply(G, p0, [0.3], "krylov", krylov_dim=m, tol=1e-8)
        assert r.converged and r.krylov_dim == m
        assert l1_rows(Y[0], p0 @ sla.expm(0.3 * G)) <= 1e-8
        steps.append(r.steps)
    assert steps == sorted(steps, reverse=True)


# ------------------------------------------------------------------ a large generator: Krylov against uniformisation

def mmpp_queue(levels, M, seed, lam_max=2.0):
    """Queue with a modulated arrival process: state (level, modulator), level-major; built
    with Kronecker products (M modulator states with a random generator Q, arrival rate
    lam_m ~ U(0, lam_max), service rate 1, buffer levels - 1)."""
    rng = np.random.default_rng(seed)
    Q = rng.random((M, M))
    np.fill_diagonal(Q, 0.0)
    Q -= np.diag(Q.sum(axis=1))
    lam = rng.uniform(0.0, lam_max, M)
    up = sp.diags([np.ones(levels - 1)], [1], shape=(levels, levels))
    down = sp.diags([np.ones(levels - 1)], [-1], shape=(levels, levels))
    off = (sp.kron(sp.identity(levels), sp.csr_matrix(Q - np.diag(np.diag(Q)))) + sp.kron(up, sp.diags(lam))
           + sp.kron(down, sp.identity(M))).tocsr()
    G = (off - sp.diags(np.asarray(off.sum(axis=1)).ravel())).tocsr()
    G.sort_indices()
    w, v = np.linalg.eig(Q.T)
    pm = np.abs(np.real(v[:, np.argmin(np.abs(w))]))
    p0 = np.zeros(G.shape[0])
    p0[:M] = pm / pm.sum()  # empty queue, modulator stationary
    return G, p0


def test_krylov_against_uniformization_on_1e5_states():
    G, p0 = mmpp_queue(10000, 10, seed=3)
    assert G.shape[0] == 100000
    arrays = (G.indptr.astype(np.int32), G.indices.astype(np.int32), G.data)
    times = [0.0, 0.5, 5.0, 20.0, 60.0]
    U, ru = expm_multiply(arrays, p0, times, "uniformization", tol=1e-10)
    K, rk = expm_multiply(arrays, p0, times, "krylov")  # the default tol = 1e-8 (measured: 7e-11)
    assert ru.converged and rk.converged
    assert l1_rows(K, U).max() <= 1e-8
    for Y in (U, K):
        np.testing.assert_allclose(Y[0], p0, rtol=summation_error(np.count_nonzero(p0)), atol=0)  # p0 renormalised
        assert Y.min() >= 0.0
        np.testing.assert_allclose(Y.sum(axis=1), 1.0, atol=summation_error(G.shape[0]))
    # the accounts: products, truncation points, error sums within tol
    assert ru.poisson_left <= ru.poisson_mean_max <= ru.poisson_right
    assert ru.error_sum <= 1e-10 and ru.rate == pytest.approx(-G.diagonal().min())
    assert rk.krylov_dim == 30 and rk.operator_applications == 31 * rk.steps
    assert rk.roundoff < 1e-12 and rk.clipped_mass < 1e-12


def sparse_stationary(G):
    """pi G = 0, sum pi = 1 by a sparse solve with state 0 fixed (G^T without row and column 0)."""
    A = G.T.tocsc()
    x = spla.spsolve(A[1:, 1:].tocsc(), -A[1:, 0].toarray().ravel())
    pi = np.concatenate([[1.0], x])
    return pi / pi.sum()


def test_rational_krylov_against_uniformization_and_stationary_on_1e5_states():
    # load about 0.7: the law settles within a few hundred time units
    G, p0 = mmpp_queue(10000, 10, seed=3, lam_max=1.4)
    n = G.shape[0]
    arrays = (G.indptr.astype(np.int32), G.indices.astype(np.int32), G.data)
    times = [0.0, 0.5, 5.0, 20.0, 60.0]
    U, ru = expm_multiply(arrays, p0, times, "uniformization", tol=1e-10)
    # level-major with 10 modulator states: G has bandwidth 10, so one block makes the
    # preconditioner's band LU an exact solve of (I - gamma G)^T
    one_block = np.zeros(n, np.int32)
    R, rr = expm_multiply(arrays, p0, times, "rational_krylov", blocks=one_block)  # the default tol = 1e-8
    assert ru.converged and rr.converged, rr.note
    assert rr.method == "rational_krylov" and rr.outputs == len(times)
    assert l1_rows(R, U).max() <= 1e-8
    np.testing.assert_allclose(R[0], p0, rtol=summation_error(np.count_nonzero(p0)), atol=0)  # p0 renormalised
    assert R.min() >= 0.0
    np.testing.assert_allclose(R.sum(axis=1), 1.0, atol=summation_error(n))
    # the accounts: every basis vector is one solve; a solve costs one product when the
    # preconditioner is exact (the residual check), more with GMRES steps
    assert rr.inner_solves > 0 and rr.inner_iterations <= rr.inner_solves
    assert rr.operator_applications >= rr.inner_solves
    assert 2 <= rr.basis_max <= rr.krylov_dim == 30 and rr.steps >= 1
    assert 0 < rr.gamma_min <= rr.gamma_max and rr.shifts >= 1
    assert rr.error_sum <= 1e-8 * rr.steps and rr.error_max <= 1e-8
    # the mass defect of the propagated vector is part of the error (the estimate bounds it)
    assert rr.exponentials > 0 and rr.roundoff <= rr.error_sum
    assert set(rr.seconds) == {"preconditioner", "solves", "arnoldi", "projection", "run"}
    assert rr.extra["inner_solves"] == rr.inner_solves
    # long horizons: the stationary law, from a basis or two
    pi = sparse_stationary(G)
    L, rl = expm_multiply(arrays, p0, [1e4, 1e6], "rational_krylov", blocks=one_block)
    assert rl.converged and rl.steps <= 4
    assert l1_rows(L, pi).max() <= 1e-8
    # the default preconditioner (one state per block, point Gauss-Seidel) needs GMRES steps
    P, rp = expm_multiply(arrays, p0, [0.5, 5.0], "rational_krylov")
    assert rp.converged and l1_rows(P, U[1:3]).max() <= 1e-8
    assert rp.inner_iterations > rp.inner_solves


def test_rational_krylov_blocks_are_checked():
    G, p0 = mmpp_queue(50, 3, seed=1)
    n = G.shape[0]
    arrays = (G.indptr.astype(np.int32), G.indices.astype(np.int32), G.data)
    for bad in (np.zeros(n - 1, np.int32), np.full(n, n, np.int32), -np.ones(n, np.int32)):
        with pytest.raises(aqmchain.ModelError, match="blocks") as e:
            expm_multiply(arrays, p0, [1.0], "rational_krylov", blocks=bad)
        assert e.value.param == "blocks"
    # any numbering works: blocks by modulator (every third state) instead of one block
    Y, r = expm_multiply(arrays, p0, [2.0], "rational_krylov", blocks=(np.arange(n) % 3 * 7).astype(np.int32),
                         tol=1e-10)
    ref = p0 @ sla.expm(2.0 * G.toarray())
    assert r.converged and l1_rows(Y[0], ref) <= 1e-9


def test_model_chain_krylov_against_uniformization():
    chain = aqmchain.build_chain(aqmchain.load_model(ROOT / "examples" / "red_ctmc.toml"))
    p0 = np.zeros(chain.n)
    p0[0] = 1.0  # the empty system
    arrays = (np.asarray(chain.indptr), np.asarray(chain.indices), np.asarray(chain.data))
    times = [10.0, 100.0, 400.0]
    K, rk = expm_multiply(arrays, p0, times, "krylov", tol=1e-10)
    U, ru = expm_multiply(arrays, p0, times, "auto", tol=1e-10)
    assert rk.converged and ru.converged and ru.method == "krylov" and ru.requested == "auto"
    R, rr = expm_multiply(arrays, p0, times, "rational_krylov", tol=1e-10)
    U, ru = expm_multiply(arrays, p0, times, "uniformization", tol=1e-10)
    assert ru.converged and rr.converged
    assert l1_rows(K, U).max() <= 1e-8
    assert l1_rows(R, U).max() <= 1e-8


# ------------------------------------------------------------------ projection, budgets, outputs

def test_projection_and_outputs():
    G = random_generator(50, seed=11, spread=1.0)
    p0 = np.eye(50)[3]
    times = [0.0, 0.0, 0.7, 0.7, 2.0]
    Y, r = expm_multiply(G, p0, times, "krylov", tol=1e-9)
    np.testing.assert_array_equal(Y[0], p0)
    np.testing.assert_array_equal(Y[1], p0)
    np.testing.assert_array_equal(Y[2], Y[3])
    assert (Y >= 0).all() and np.allclose(Y.sum(axis=1), 1.0, rtol=0, atol=summation_error(len(p0)))
    Yr, rr = expm_multiply(G, p0, times, "krylov", tol=1e-9, project=False)
    assert l1_rows(Yr, Y).max() <= 1e-12  # the projection moves round-off only
    assert rr.clipped_mass == 0.0


@pytest.mark.parametrize("method", ["krylov", "rational_krylov", "uniformization"])
def test_budgets_give_partial_results(method):
    G = random_generator(60, seed=5, spread=1.0)
    p0 = np.eye(60)[0]
    times = [0.0, 1e-6, 5.0, 50.0]
    Y, r = expm_multiply(G, p0, times, method, max_steps=1)
    assert r.status == "not_converged" and not r.converged
    assert "max_steps" in r.note
    assert 1 <= r.outputs < len(times)
    assert np.isfinite(Y[:r.outputs]).all() and np.isnan(Y[r.outputs:]).all()
    assert len(r.p) == 60 and 0.0 <= r.t_reached < times[-1]
    assert r.p.sum() == pytest.approx(1.0, abs=1e-12) and r.p.min() >= 0.0
    Y, r = expm_multiply(G, p0, times, method, max_applications=20)
    assert r.status == "not_converged" and "max_applications" in r.note
    assert r.operator_applications <= 20 and r.outputs < len(times)


def test_rational_krylov_inner_solves_that_do_not_converge_stop_the_run():
    G = random_generator(60, seed=5, spread=1.0)
    p0 = np.eye(60)[0]
    times = [0.0, 0.5, 5.0]
    Y, r = expm_multiply(G, p0, times, "rational_krylov", inner_max_iter=1, tol=1e-12)
    assert r.status == "not_converged" and not r.converged
    assert "did not converge" in r.note and "inner_max_iter = 1" in r.note
    assert r.outputs == 1 and r.t_reached == 0.0
    np.testing.assert_array_equal(Y[0], p0)
    np.testing.assert_array_equal(r.p, p0)
    assert np.isnan(Y[1:]).all()
    assert r.inner_iterations_max <= 1 and r.inner_solves >= 1
    # with the default inner budget the same run converges
    Y, r = expm_multiply(G, p0, times, "rational_krylov", tol=1e-12)
    assert r.converged
    assert l1_rows(Y, np.array([p0 @ sla.expm(t * G) for t in times])).max() <= 1e-10


# ------------------------------------------------------------------ errors naming what is wrong

@pytest.mark.parametrize("field,value", [
    ("tol", 0.0), ("tol", 0.5), ("tol", float("nan")), ("krylov_dim", 0), ("krylov_dim", 1001),
    ("max_steps", 0), ("max_applications", -1), ("breakdown", -1e-12), ("breakdown", 0.1),
    ("shift_ratio", 0.0), ("shift_ratio", 11.0), ("shift_ratio", float("nan")), ("inner_max_iter", 0),
    ("inner_max_iter", 10**7),
])
def test_bad_options_are_named(field, value):
    G = random_generator(4, seed=1)
    with pytest.raises(aqmchain.OptionError, match=field):
        expm_multiply(G, np.eye(4)[0], [1.0], "krylov", **{field: value})
    with pytest.raises(ValueError, match=field):
        options(**{field: value}).validate()


def test_rational_krylov_needs_two_basis_vectors():
    G = random_generator(4, seed=1)
    with pytest.raises(aqmchain.OptionError, match="krylov_dim.*rational_krylov"):
        expm_multiply(G, np.eye(4)[0], [1.0], "rational_krylov", krylov_dim=1)
    # two states, two vectors: the space is the whole space (a happy breakdown), every step exact
    G = np.array([[-3.0, 3.0], [0.5, -0.5]])
    times = [0.0, 0.3, 2.0, 50.0]
    Y, r = expm_multiply(G, [1.0, 0.0], times, "rational_krylov", krylov_dim=2, tol=1e-12)
    assert r.converged and r.krylov_dim == 2 and r.breakdown
    p = 0.5 / 3.5 + (1.0 - 0.5 / 3.5) * np.exp(-3.5 * np.array(times))
    # within the method's own account (truncation and round-off estimates, itself held to tol)
    # plus the closed form's evaluation (a few roundings of numbers below 1)
    assert r.error_sum <= 1e-12
    np.testing.assert_allclose(Y[:, 0], p, rtol=0, atol=r.error_sum + r.roundoff + 8 * np.finfo(float).eps)


def test_bad_methods_are_named():
    G = random_generator(4, seed=1)
    with pytest.raises(aqmchain.OptionError, match="method"):
        expm_multiply(G, np.eye(4)[0], [1.0], "pade")
    with pytest.raises(aqmchain.OptionError, match="step"):
        expm_multiply(G, np.eye(4)[0], [1.0], "step")


@pytest.mark.parametrize("p0,times,param", [
    (np.eye(5)[0], [1.0], "p0"),                     # wrong length
    (np.array([1.5, -0.5, 0, 0]), [1.0], "p0"),      # negative entry
    (np.array([np.nan, 1, 0, 0]), [1.0], "p0"),      # NaN
    (np.array([0.5, 0.2, 0, 0]), [1.0], "p0"),       # does not sum to 1
    (np.eye(4)[0], [2.0, 1.0], "times"),             # not sorted
    (np.eye(4)[0], [-1.0, 1.0], "times"),            # negative
    (np.eye(4)[0], [0.0, np.inf], "times"),          # not finite
])
@pytest.mark.parametrize("method", ["krylov", "rational_krylov", "uniformization"])
def test_bad_inputs_are_named(p0, times, param, method):
    G = random_generator(4, seed=2)
    with pytest.raises(aqmchain.ModelError, match=param) as e:
        expm_multiply(G, p0, times, method)
    assert e.value.param == param


def test_bad_generators_are_named():
    G = random_generator(4, seed=2)
    indptr, indices, data = csr(G)
    p0 = np.eye(4)[0]
    bad = data.copy()
    bad[np.nonzero(indices != np.repeat(np.arange(4), np.diff(indptr)))[0][0]] = -1.0
    with pytest.raises(aqmchain.ModelError, match="val"):
        _core.expm_multiply_csr(indptr, indices, bad, p0, [1.0])
    with pytest.raises(aqmchain.ModelError, match="sums to 0|summing"):
        _core.expm_multiply_csr(indptr, indices, data + 0.1, p0, [1.0])
    with pytest.raises(aqmchain.ModelError, match="col"):
        _core.expm_multiply_csr(indptr, indices[:-1], data, p0, [1.0])
    wrong = indices.copy()
    wrong[0] = 7
    with pytest.raises(aqmchain.ModelError, match="col"):
        _core.expm_multiply_csr(indptr, wrong, data, p0, [1.0])


# ------------------------------------------------------------------ Poisson weights

def decimal_log_poisson(k, q):
    """log Poisson(k; q) in 50-digit decimal arithmetic, log k! by Stirling's series (k >= 1000)."""
    getcontext().prec = 50
    k, q = Decimal(int(k)), Decimal(repr(q))
    log_fact = ((k + Decimal("0.5")) * k.ln() - k + (2 * Decimal(math.pi)).ln() / 2 + 1 / (12 * k)
                - 1 / (360 * k ** 3) + 1 / (1260 * k ** 5))
    return -q + k * q.ln() - log_fact


@pytest.mark.parametrize("q", [0.0, 1e-9, 0.3, 5.0, 80.0, 1e3, 1e5, 1e7, 1e9])
@pytest.mark.parametrize("eps", [1e-6, 1e-12])
def test_poisson_weights(q, eps):
    left, right, w, bound = _core.poisson_weights(q, eps)
    assert bound <= eps and len(w) == right - left + 1 and left <= q <= right + 1
    assert w.sum() == pytest.approx(1.0, abs=summation_error(len(w)))
    k = np.arange(left, right + 1)
    if q <= 100:  # exact weights from the series; the tails summed directly
        kk = np.arange(0, right + 200)
        ref = np.exp(-q + kk * math.log(q) - np.array([math.lgamma(x + 1) for x in kk])) if q > 0 else (kk == 0) * 1.0
        tails = ref[:left].sum() + ref[right + 1:].sum()
        assert 2 * tails <= bound * (1 + 1e-9)
        # each weight exp(x_k) with x_k = -q + k log q - log k!: both sides round x_k to within a
        # few eps |terms| and exp passes that on as relative error; the truncation adds `bound`
        terms = q + k * abs(math.log(q)) + np.array([math.lgamma(x + 1) for x in k]) + 1.0 if q > 0 else np.ones(len(k))
        allowed = 8 * np.finfo(float).eps * terms * ref[left:right + 1] + bound
        assert np.all(np.abs(w - ref[left:right + 1]) <= allowed)
    else:  # a few weights against decimal logarithms (scipy's pmf loses digits at large q)
        for j in np.unique(np.linspace(0, len(k) - 1, 7).astype(int)):
            ref = float(decimal_log_poisson(k[j], q).exp())
            assert w[j] == pytest.approx(ref, rel=1e-12 + bound)
