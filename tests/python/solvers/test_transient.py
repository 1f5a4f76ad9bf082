"""Transient analysis against independent oracles: dense P^t written in the test
(oracle.reference_chain), scipy's matrix exponential, the stationary solution at
large t, and the two exponential kernels against each other."""

import numpy as np
import pytest
import scipy.linalg

import aqmchain
from aqmchain import _core
from conftest import model_of, stepping_error
from oracle import reference_chain, source_matrices

MMBP = {"buffer": 12, "mu": 0.5, "w": 0.3, "k": 2, "mapping": "split",
        "source": {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.2, 0.8]], "arrival": [0.2, 0.7]},
        "drop": "red", "min_th": 3, "max_th": 9, "p_max": 0.2}


def empty_law(states, spec):
    """n = 0, avg index 0, modulator stationary (computed here from the modulator matrix)."""
    M, _ = source_matrices(spec["source"])
    w, v = np.linalg.eig(M.T)
    pi_m = np.real(v[:, np.argmin(np.abs(w - 1))])
    pi_m /= pi_m.sum()
    p = np.zeros(len(states))
    for i, (n, g, m) in enumerate(states):
        if n == 0 and g == 0:
            p[i] = pi_m[m]
    return p


EPS = float(np.finfo(float).eps)


def law_error(P, steps_core: int, dense_products: int) -> float:
    """How far (in L1) a law after `steps_core` slots stepped by the core may be from the same law
    by `dense_products` dense vector-matrix or matrix-matrix products of the oracle: the core's
    sparse steps drift by stepping_error, each dense product rounds over n terms, and a product
    of stochastic factors adds these up."""
    return stepping_error(P, steps_core) + 2 * EPS * dense_products * len(P)


def oracle_series(spec, times, P=None, p=None):
    states, P0 = reference_chain(spec)
    P = P0 if P is None else P
    p = empty_law(states, spec) if p is None else p
    n = np.array([s[0] for s in states])
    q = np.maximum(n - 1, 0)
    out, t_now = [], 0
    for t in times:
        p = p @ np.linalg.matrix_power(P, int(t - t_now))
        t_now = t
        out.append((p @ q, p @ q**2 - (p @ q) ** 2, p @ n))
    return np.array(out), p, states


def test_stepping_matches_dense_matrix_powers():
    times = [0, 1, 2, 5, 17, 100, 333]
    ref, _, _ = oracle_series(MMBP, times)
    r = aqmchain.solve_transient(model_of(MMBP), times, steady_tol=0)
    assert r.info.method == "step" and r.info.status == "converged"
    assert r.info.iterations == 333
    # the oracle's matrix_power squares: at most 2 log2(dt) + 1 dense products per output time
    _, P = reference_chain(MMBP)
    products = np.cumsum([2 * int(np.ceil(np.log2(max(dt, 1)))) + 1 for dt in np.diff([0] + times)])
    err = np.array([law_error(P, t, k) for t, k in zip(times, products)])
    N = MMBP["buffer"]  # q <= N - 1, n <= N
    np.testing.assert_array_less(np.abs(r.mean_queue - ref[:, 0]), N * err + 1e-300)
    np.testing.assert_array_less(np.abs(r.var_queue - ref[:, 1]), 3 * N**2 * err + 1e-300)
    np.testing.assert_array_less(np.abs(r.mean_system - ref[:, 2]), N * err + 1e-300)
    assert r.mean_queue[0] == 0.0 and r.mean_avg[0] == 0.0


def test_large_t_equals_stationary_and_steady_state_stops_stepping():
    model = model_of(MMBP)
    st = aqmchain.solve_stationary(model)
    r = aqmchain.solve_transient(model, [10, 10**6, 10**9], steady_tol=1e-13)
    assert r.info.steady_at[0] > 0 and r.info.iterations < 100_000  # stopped long before 1e9 slots
    assert abs(r.mean_queue[-1] - st.mean_queue) < 1e-8 * max(1.0, st.mean_queue)
    assert np.abs(r.final_law - st.pi).sum() < 1e-8
    assert r.loss[-1] == pytest.approx(st.loss, rel=1e-8)
    # starting from the stationary law nothing moves
    r2 = aqmchain.solve_transient(model, [0, 50, 5000], p0=st, steady_tol=0)
    np.testing.assert_allclose(r2.mean_queue, st.mean_queue, rtol=1e-10)


def test_point_state_and_vector_initial_laws():
    model = model_of(MMBP)
    chain = aqmchain.build_chain(model)
    r = aqmchain.solve_transient(chain, [0, 3], p0={"level": 5, "avg_index": 2, "modulator": 1}, steady_tol=0)
    assert r.mean_system[0] == 5.0 and r.mean_queue[0] == 4.0
    s = chain.index_of([5, 2, 1])
    p = np.zeros(chain.n)
    p[s] = 1.0
    r2 = aqmchain.solve_transient(chain, [0, 3], p0=p, steady_tol=0)
    # the same law by two routes: at most the drift of 3 steps in another order, times max q
    drift = stepping_error(aqmchain.transition_matrix(chain), 3)
    np.testing.assert_allclose(r2.mean_queue, r.mean_queue, rtol=0, atol=model.buffer * drift)
    with pytest.raises(aqmchain.ModelError, match="p0"):
        aqmchain.solve_transient(chain, [1], p0=np.ones(3))
    with pytest.raises(aqmchain.ModelError, match="p0"):
        aqmchain.solve_transient(chain, [1], p0={"level": 999})
    with pytest.raises(aqmchain.ModelError, match="p0"):
        aqmchain.solve_transient(chain, [1], p0=-p)


def test_scenario_phases_on_the_union_state_space_match_dense_stepping():
    light = dict(MMBP, source={"kind": "mmbp", "matrix": [[0.9, 0.1], [0.2, 0.8]], "arrival": [0.05, 0.2]})
    heavy = dict(light, mu=0.3)
    sc = aqmchain.make_scenario(model_of(light), [{"slots": 40}, {"slots": 30, "mu": 0.3}, {"slots": 50}])
    times = [0, 10, 40, 41, 55, 70, 100, 120]
    r = aqmchain.solve_transient(sc, times, steady_tol=0, pmf_times=[55])
    # oracle: the states reachable under either parameter set, and both dense matrices on
    # that union, row by row from the oracle's slot kernel
    s_light, _ = reference_chain(light)
    s_heavy, _ = reference_chain(heavy)
    union = sorted(set(s_light) | set(s_heavy))
    idx = {s: i for i, s in enumerate(union)}

    from oracle import grid_points, slot
    def full(spec):
        pts = grid_points(spec["buffer"], spec["k"], spec["mapping"])
        M, lam = source_matrices(spec["source"])
        P = np.zeros((len(union), len(union)))
        for s in union:
            for t, pr in slot(spec, s, pts, M, lam).items():
                P[idx[s], idx[t]] += pr
        return P
    P1, P2 = full(light), full(heavy)
    assert np.allclose(P1.sum(axis=1), 1) and np.allclose(P2.sum(axis=1), 1)
    p = empty_law(union, light)
    q = np.maximum(np.array([s[0] for s in union]) - 1, 0)
    ref, t_now = [], 0
    for t in times:
        while t_now < t:
            p = p @ (P2 if 40 <= t_now < 70 else P1)
            t_now += 1
        ref.append(p @ q)
        if t == 55:
            pmf55 = np.bincount(q, weights=p, minlength=MMBP["buffer"])
    # one dense vector-matrix product per slot here; either matrix's pattern
    err = np.array([law_error(P1 + P2, t, t) for t in times])
    np.testing.assert_array_less(np.abs(r.mean_queue - ref), MMBP["buffer"] * err + 1e-300)
    np.testing.assert_array_equal(r.phase, [0, 0, 1, 1, 1, 2, 2, 2])
    assert np.abs(r.queue_pmf[55.0] - pmf55).sum() <= law_error(P1 + P2, 55, 55)
    assert r.phase_boundaries.tolist() == [0, 40, 70, 120]


def test_krylov_on_a_slotted_model_is_exp_of_p_minus_i():
    model = model_of(MMBP)
    chain = aqmchain.build_chain(model)
    P = aqmchain.transition_matrix(chain).toarray()
    p0 = _core.empty_system_law(chain)
    times = [0.5, 3.0, 40.0]
    q = np.maximum(chain.labels["level"] - 1, 0)
    for method in ("krylov", "rational_krylov", "uniformization"):
        r = aqmchain.solve_transient(chain, times, method=method, tol=1e-12)
        ref = [p0 @ scipy.linalg.expm(t * (P - np.eye(chain.n))) @ q for t in times]
        np.testing.assert_allclose(r.mean_queue, ref, rtol=1e-9)
        assert r.info.method == method


def test_continuous_model_krylov_uniformization_and_scipy_agree():
    doc = {"model": {"buffer": 30, "time": "continuous"}, "source": {"kind": "poisson", "rate": 0.9},
           "service": {"kind": "exponential", "mu": 1.0},
           "aqm": {"drop": "red", "min_th": 5, "max_th": 20, "p_max": 0.2, "w": 0.5}, "grid": {"k": 2, "refine": "none"}}
    model = aqmchain.model_from_dict(doc)[0]
    chain = aqmchain.build_chain(model)
    G = aqmchain.transition_matrix(chain)
    p0 = _core.empty_system_law(chain)
    times = [0.1, 1.0, 10.0, 200.0]
    from scipy.sparse.linalg import expm_multiply
    q = np.maximum(chain.labels["level"] - 1, 0)
    ref = np.array([expm_multiply(G.T * t, p0) @ q for t in times])
    a = aqmchain.solve_transient(chain, times, method="krylov", tol=1e-10)
    b = aqmchain.solve_transient(chain, times, tol=1e-10)
    # auto: uniformization here (Lambda t is small), and it says so
    assert b.info.method == "uniformization" and "uniformization needs about" in b.info.note
    assert a.info.method == "krylov"
    np.testing.assert_allclose(a.mean_queue, ref, rtol=1e-7)
    np.testing.assert_allclose(b.mean_queue, a.mean_queue, rtol=1e-8)
    # long horizon: the stationary solution
    st = aqmchain.solve_stationary(chain)
    c = aqmchain.solve_transient(chain, [1e5], tol=1e-10)
    assert c.info.method == "rational_krylov"  # Lambda t above 1e4 products: auto runs rational_krylov
    assert "rational_krylov" in c.info.note
    assert c.mean_queue[-1] == pytest.approx(st.mean_queue, rel=1e-7)
    d = aqmchain.solve_transient(chain, times, method="rational_krylov", tol=1e-10)
    assert d.info.method == "rational_krylov"
    np.testing.assert_allclose(d.mean_queue, ref, rtol=1e-7)
    with pytest.raises(aqmchain.OptionError, match="step"):
        aqmchain.solve_transient(chain, [1.0], method="step")


def test_budgets_raise_with_the_partial_result():
    model = model_of(MMBP)
    with pytest.raises(aqmchain.NonConvergenceError) as exc:
        aqmchain.solve_transient(model, [1, 2, 50], max_steps=10, steady_tol=0)
    r = exc.value.result
    assert r.info.status == "not_converged" and list(r.times) == [1, 2] and len(r.mean_queue) == 2
    with pytest.raises(aqmchain.NonConvergenceError) as exc:
        aqmchain.solve_transient(model, [1, 2, 500], method="krylov", max_steps=1)
    r = exc.value.result
    assert r.info.status == "not_converged" and len(r.times) < 3 and len(r.mean_queue) == len(r.times)
    # rational Krylov: its step budget, its product budget (the solves' products count) and
    # a linear solve that does not converge within inner_max_iter
    for kw, what in (({"max_steps": 1}, "max_steps"), ({"max_applications": 30}, "max_applications"),
                     ({"inner_max_iter": 1, "tol": 1e-12}, "inner_max_iter")):
        with pytest.raises(aqmchain.NonConvergenceError, match=what) as exc:
            aqmchain.solve_transient(model, [1, 2, 500], method="rational_krylov", **kw)
        r = exc.value.result
        assert r.info.status == "not_converged" and what in r.info.note
        assert len(r.times) < 3 and len(r.mean_queue) == len(r.times)
        if what == "max_applications":
            assert r.info.matvecs <= 30


def test_bad_times_and_options_name_the_parameter():
    model = model_of(MMBP)
    for times, match in (([3, 1], "times"), ([-1], "times"), ([1.5], "times"), ([], "times"),
                         ([float("nan")], "times")):
        with pytest.raises((aqmchain.ModelError, aqmchain.OptionError), match=match):
            aqmchain.solve_transient(model, times)
    with pytest.raises(aqmchain.OptionError, match="pmf_times"):
        aqmchain.solve_transient(model, [1, 2], pmf_times=[3])
    with pytest.raises(aqmchain.OptionError, match="method"):
        aqmchain.solve_transient(model, [1], method="euler")
    with pytest.raises(aqmchain.OptionError, match="steady_tol"):
        aqmchain.solve_transient(model, [1], steady_tol=2.0)
    with pytest.raises(aqmchain.OptionError, match="shift_ratio"):
        aqmchain.solve_transient(model, [1], method="rational_krylov", shift_ratio=0.0)
    with pytest.raises(aqmchain.OptionError, match="inner_max_iter"):
        aqmchain.solve_transient(model, [1], method="rational_krylov", inner_max_iter=0)
    with pytest.raises(aqmchain.OptionError, match="krylov_dim"):
        aqmchain.solve_transient(model, [1], method="rational_krylov", krylov_dim=1)
    sc = aqmchain.make_scenario(model, [{"slots": 10}])
    with pytest.raises(aqmchain.ModelError, match="times"):
        aqmchain.solve_transient(sc, [11])


def test_time_grid():
    t = aqmchain.time_grid("log", 1, 1e6, 50, integer=True)
    assert t[0] == 1 and t[-1] == 1e6 and np.all(np.diff(t) > 0) and np.all(t == np.rint(t))
    assert len(aqmchain.time_grid("linear", 0, 10, 11)) == 11
    with pytest.raises(aqmchain.OptionError, match="start"):
        aqmchain.time_grid("log", 0, 10, 5)


def test_scenario_mean_queue_within_the_simulator_ensemble_band():
    """The chain's mean queue over a load step against independent simulator replications
    of the same scenario (discretised avg: the chain is the simulator's exact law)."""
    light = dict(MMBP, source={"kind": "bernoulli", "alpha": 0.2}, buffer=15)
    base = model_of(light)
    sc = aqmchain.make_scenario(base, [{"slots": 60, "alpha": 0.2}, {"slots": 60, "alpha": 0.7},
                                       {"slots": 80, "alpha": 0.2}])
    times = np.arange(10, 201, 10)
    r = aqmchain.solve_transient(sc, times)
    sim = aqmchain.simulate_scenario(sc, times, replications=6000, seed=7, discretised=True)
    z = np.abs(r.mean_queue - sim.mean_queue) / (sim.mean_queue_hw / 1.96)
    assert np.all(z < 4.5), z.max()
    zavg = np.abs(r.mean_avg - sim.mean_avg) / np.maximum(sim.mean_avg_hw / 1.96, 1e-12)
    assert np.all(zavg < 4.5), zavg.max()
    # the comparison has power: the heavy phase one step later is far outside the band
    late = aqmchain.make_scenario(base, [{"slots": 70, "alpha": 0.2}, {"slots": 60, "alpha": 0.7},
                                         {"slots": 70, "alpha": 0.2}])
    r2 = aqmchain.solve_transient(late, times)
    z2 = np.abs(r2.mean_queue - sim.mean_queue) / (sim.mean_queue_hw / 1.96)
    assert z2.max() > 10


def test_steady_state_detection_is_not_fooled_by_a_periodic_chain():
    """A modulator that alternates deterministically (arrivals every other slot, mu = 1)
    started from one state: p_t = p_{t/2} at every even t, yet the law alternates, so
    stepping must not stop (an odd output time would get the even law)."""
    m = aqmchain.Model(buffer=3, source=aqmchain.Source.mmbp([[0, 1], [1, 0]], [1.0, 0.0]),
                       service=aqmchain.Service(1.0), aqm=aqmchain.Aqm(w=1.0), grid=aqmchain.GridSpec(k=1))
    chain = aqmchain.build_chain(m)
    P = aqmchain.transition_matrix(chain).toarray()
    start = {"level": 0, "avg_index": 0, "modulator": 0}
    p0 = _core.point_law(chain, [0, 0, 0])
    times = [4095, 4096, 10**5 - 1, 10**5]
    r = aqmchain.solve_transient(chain, times, p0=start, steady_tol=1e-10)
    ref = [p0 @ np.linalg.matrix_power(P, t) @ np.asarray(chain.labels["level"]) for t in times]
    np.testing.assert_allclose(r.mean_system, ref, atol=1e-12)
    assert r.info.steady_at == [-1.0] and r.info.iterations == 10**5


def test_final_law_of_a_stopped_kernel_is_the_law_it_reached():
    model = model_of(MMBP)
    chain = aqmchain.build_chain(model)
    with pytest.raises(aqmchain.NonConvergenceError) as exc:
        aqmchain.solve_transient(chain, [0.5, 400.0], method="uniformization", max_steps=1, tol=1e-12)
    r = exc.value.result
    p0 = _core.empty_system_law(chain)
    assert len(r.times) >= 1 and np.abs(r.final_law - p0).sum() > 1e-3
