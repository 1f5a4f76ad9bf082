"""First passage (aqmchain.passage) against independent absorbing-chain computations written
here with dense numpy / scipy from the chain's matrix: the non-target block's powers and
fundamental matrix (slotted), the exponential of the generator with the target made absorbing
(continuous time), and a birth-death closed form."""

import numpy as np
import pytest
import scipy.linalg

import aqmchain
from conftest import model_of, stepping_error, summation_error  # noqa: F401  (the shared spec helper; models are built from documents here)

EPS = float(np.finfo(float).eps)

SLOTTED_DOC = {"model": {"buffer": 8},
               "source": {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.2, 0.8]], "arrival": [0.2, 0.7]},
               "service": {"mu": 0.5},
               "aqm": {"drop": "red", "min_th": 2, "max_th": 6, "p_max": 0.2, "w": 0.5, "spacing": "count",
                       "ecn": 0.3},
               "grid": {"k": 1, "refine": "none"}}
CONTINUOUS_DOC = {"model": {"buffer": 10, "time": "continuous"},
                  "source": {"kind": "mmpp", "generator": [[-1.0, 1.0], [2.0, -2.0]], "rates": [0.3, 1.5]},
                  "service": {"kind": "exponential", "mu": 0.8},
                  "aqm": {"drop": "red", "min_th": 2, "max_th": 7, "p_max": 0.3, "w": 0.5, "ecn": 0.3},
                  "grid": {"k": 2, "refine": "none"}}


def chain_of(doc):
    return aqmchain.build_chain(aqmchain.model_from_dict(doc)[0])


def dense(chain):
    return aqmchain.transition_matrix(chain).toarray()


def point(chain, **values):
    """The index of the state with these component values (the others 0), found from the labels."""
    lab = chain.labels
    ok = np.ones(chain.n, dtype=bool)
    for name in lab:
        ok &= np.asarray(lab[name]) == values.get(name, 0)
    (idx,) = np.flatnonzero(ok)
    p = np.zeros(chain.n)
    p[idx] = 1.0
    return p


def slotted_oracle(P, target, p0, times, rewards):
    """S(t) = p0_N P_NN^t 1 (vector iteration with P's sparse copy), E[T] = p0_N (I - P_NN)^-1 1 (dense
    inverse), rewards before T and over [0, t) (the unstopped chain's law, iterated)."""
    import scipy.sparse as sp

    N = ~target
    PNN = np.asarray(P)[np.ix_(N, N)]
    A, B = sp.csr_matrix(PNN).T.tocsr(), sp.csr_matrix(P).T.tocsr()
    u, s, cdf = p0[N].copy(), 0, []
    for t in times:
        while s < t:
            u = A @ u
            s += 1
        cdf.append(1.0 - u.sum())
    F = np.linalg.inv(np.eye(N.sum()) - PNN)
    mean = p0[N] @ F @ np.ones(N.sum())
    until = {k: p0[N] @ F @ r[N] for k, r in rewards.items()}
    cum = {}
    for k, r in rewards.items():
        vals, p, acc, s = [], p0.copy(), 0.0, 0
        for t in times:
            while s < t:
                acc += p @ r
                p = B @ p
                s += 1
            vals.append(acc)
        cum[k] = np.array(vals)
    return np.array(cdf), mean, until, cum, float(np.max(F @ np.ones(N.sum())))


def test_slotted_cdf_mean_and_rewards_equal_dense_absorbing_chain():
    chain = chain_of(SLOTTED_DOC)
    assert "count" in chain.labels and "modulator" in chain.labels
    P = dense(chain)
    target = np.asarray(chain.labels["level"]) >= 7
    p0 = point(chain, modulator=1)
    times = [0, 1, 2, 7, 30, 100, 250, 600]
    ev = chain.events
    rewards = {"drops": np.asarray(ev["aqm_drop"]) + np.asarray(ev["overflow"]), "marks": np.asarray(ev["mark"])}
    cdf, mean, until, cum, mmax = slotted_oracle(P, target, p0, times, rewards)
    r = aqmchain.passage(chain, "queue>=7", times=times, p0={"modulator": 1}, rewards="drops,marks", method="step")
    assert r.target == "queue>=7"
    assert r.info.method == "step" and r.info.status == "converged"
    np.testing.assert_allclose(r.cdf, cdf, rtol=0, atol=1e-12)
    np.testing.assert_allclose(r.survival, 1 - cdf, rtol=0, atol=1e-12)
    assert r.reach_probability == 1.0  # every state reaches the target (graph search): exactly 1
    # the solve's residual bounds the mean's error through ||(I - P_NN)^-1||_inf (mmax)
    tol_mean = r.info.mean_residual * mmax + 1e3 * EPS * mean
    assert abs(r.mean - mean) <= tol_mean + 1e-10 * mean, (r.mean, mean)
    for k in rewards:
        assert abs(r.rewards_until[k] - until[k]) <= 1e-10 * max(until[k], 1) + r.info.mean_residual * mmax
        np.testing.assert_allclose(r.rewards_cumulative[k], cum[k], rtol=1e-12, atol=1e-12)
    assert r.rewards_until["marks"] > 0 and r.rewards_until["drops"] > 0
    assert r.within(100) == r.cdf[5]


def test_large_t_methods_match_the_oracle_within_their_accounts():
    # auto (rational_krylov) steps 1024 slots exactly and takes every later time from one
    # shift-and-invert Krylov space; quasi_stationary extrapolates with a rigorous bound
    chain = chain_of(SLOTTED_DOC)
    P = dense(chain)
    target = np.asarray(chain.labels["level"]) >= 8
    p0 = np.asarray(aqmchain._core.empty_system_law(chain))
    times = [0, 10, 100, 1000, 3000, 10000, 20000]
    cdf, mean, *_ = slotted_oracle(P, target, p0, times, {})
    r = aqmchain.passage(chain, "queue>=8", times=times, tol=1e-11)
    assert r.info.method == "rational_krylov" and r.info.switch_time == 1024
    assert np.all(r.error_bound <= 1e-11 + 1e-12)
    # an estimate, not a bound: compared with the exact values with a margin of 10
    assert np.all(np.abs(r.cdf - cdf) <= 10 * r.error_bound + 1e-12), (r.cdf - cdf, r.error_bound)
    q = aqmchain.passage(chain, "queue>=8", times=times, tol=1e-11, method="quasi_stationary")
    assert q.info.switch_time > 0, q.info.note  # the tail was extrapolated
    assert 0 < q.info.rho < 1
    assert np.all(np.abs(q.cdf - cdf) <= q.error_bound + 1e-12), (q.cdf - cdf, q.error_bound)
    # both against stepping (exact) at the same times
    s = aqmchain.passage(chain, "queue>=8", times=times, method="step")
    assert np.all(np.abs(q.cdf - s.cdf) <= q.error_bound + s.error_bound)
    assert np.all(np.abs(r.cdf - s.cdf) <= 10 * r.error_bound + s.error_bound)


def test_cumulative_rewards_over_the_krylov_tail():
    chain = chain_of(SLOTTED_DOC)
    P = dense(chain)
    target = np.asarray(chain.labels["level"]) >= 8
    p0 = np.asarray(aqmchain._core.empty_system_law(chain))
    times = [0, 50, 600, 1500]
    marks = np.asarray(chain.events["mark"])
    *_, cum, _ = slotted_oracle(P, target, p0, times, {"marks": marks})
    r = aqmchain.passage(chain, "queue>=8", times=times, rewards=["marks"], method="rational_krylov", exact_slots=100,
                         tol=1e-11)
    err = np.abs(r.rewards_cumulative["marks"] - cum["marks"])
    assert np.all(err <= 10 * r.info.cumulative_error * marks.max() + 1e-9 * np.maximum(cum["marks"], 1)), err


def test_stationary_start_and_drain_time():
    model = aqmchain.model_from_dict(SLOTTED_DOC)[0]
    st = aqmchain.solve_stationary(model, tol=1e-13)
    chain = st.chain
    P = dense(chain)
    target = np.asarray(chain.labels["level"]) == 0
    pi = np.asarray(st.pi)
    times = [0, 1, 5, 50]
    cdf, mean, *_ , mmax = slotted_oracle(P, target, pi, times, {})
    r = aqmchain.passage(st, "queue==0", times=times, p0=st)
    # T = 0 when the start is in the target: the same sum, in another order
    assert r.cdf[0] == pytest.approx(pi[target].sum(), abs=summation_error(chain.n))
    np.testing.assert_allclose(r.cdf, cdf, rtol=0, atol=1e-12)
    assert abs(r.mean - mean) <= r.info.mean_residual * mmax + 1e-10 * mean
    # time to drain from a full buffer
    idx = int(np.flatnonzero(np.asarray(chain.labels["level"]) == 8)[0])
    state = {name: int(v[idx]) for name, v in chain.labels.items()}
    p0 = point(chain, **state)
    cdf, mean, *_, mmax = slotted_oracle(P, target, p0, times, {})
    r = aqmchain.passage(chain, "queue==0", times=times, p0=state)
    np.testing.assert_allclose(r.cdf, cdf, rtol=0, atol=1e-12)
    assert abs(r.mean - mean) <= r.info.mean_residual * mmax + 1e-10 * mean


def test_continuous_time_equals_expm_of_the_absorbing_generator():
    chain = chain_of(CONTINUOUS_DOC)
    G = dense(chain)
    G = G - np.diag(np.diag(G))
    G -= np.diag(G.sum(axis=1))
    target = (np.asarray(chain.labels["level"]) >= 8) & (np.asarray(chain.labels["modulator"]) == 1)
    Ga = G.copy()
    Ga[target] = 0.0
    p0 = point(chain)
    times = [0.0, 0.5, 3.0, 20.0, 80.0]
    ref = np.array([(p0 @ scipy.linalg.expm(t * Ga))[target].sum() for t in times])
    N = ~target
    F = np.linalg.inv(-G[np.ix_(N, N)])
    mean = p0[N] @ F @ np.ones(N.sum())
    marks = np.asarray(chain.events["mark"])
    for method in ("uniformization", "krylov", "rational_krylov"):
        r = aqmchain.passage(chain, "queue>=8 and modulator==1", times=times, p0={}, rewards=["marks"], method=method,
                             tol=1e-12)
        assert r.info.method == method
        np.testing.assert_allclose(r.cdf, ref, rtol=0, atol=1e-10)
        assert r.mean == pytest.approx(mean, rel=1e-10)
        assert r.rewards_until["marks"] == pytest.approx(p0[N] @ F @ marks[N], rel=1e-10)
        # rewards over [0, t) of the unstopped chain: the augmented exponential
        # expm(t [[G, r], [0, 0]]) holds integral_0^t expm(s G) r ds in its last column
        A = np.zeros((chain.n + 1, chain.n + 1))
        A[:-1, :-1], A[:-1, -1] = G, marks
        cum = np.array([(p0 @ scipy.linalg.expm(t * A)[:-1, -1]) for t in times])
        got = r.rewards_cumulative["marks"]
        bound = r.info.cumulative_error * marks.max() + 1e-12 * np.maximum(cum, 1.0)
        assert np.all(np.abs(got - cum) <= bound + 1e-12), (method, got - cum, bound)
        assert r.info.cumulative_error < 1e-8


def test_continuous_cumulative_rewards_grow_at_the_stationary_rate():
    # long horizon: E[integral_0^t r] = t pi r + (p(t) - p0) h, the slope the stationary law's
    chain = chain_of(CONTINUOUS_DOC)
    st = aqmchain.solve_stationary(chain)
    drops = np.asarray(chain.events["aqm_drop"]) + np.asarray(chain.events["overflow"])
    times = [1e3, 2e3, 1e4]
    r = aqmchain.passage(chain, "queue>=10", times=times, p0={}, rewards=["drops"], method="rational_krylov",
                         tol=1e-12)
    c = r.rewards_cumulative["drops"]
    slope = (c[1] - c[0]) / 1e3
    assert slope == pytest.approx(float(st.pi @ drops), rel=1e-9)
    assert c[2] == pytest.approx(c[0] + (times[2] - times[0]) * slope, rel=1e-9)


def test_birth_death_closed_form_mean_hitting_times():
    lam, mu, N = 0.4, 0.7, 15
    model = aqmchain.Model(buffer=N, time="continuous", source=aqmchain.Source.poisson(lam),
                           service=aqmchain.Service.exponential(mu), aqm=aqmchain.Aqm(w=0.5),
                           grid=aqmchain.GridSpec(k=1))
    chain = aqmchain.build_chain(model)
    # time to drain from level k: sum of the down-crossing times m_n = 1/mu + (lam/mu) m_{n+1}, m_N = 1/mu
    m = np.zeros(N + 2)
    for n in range(N, 0, -1):
        m[n] = 1 / mu + (lam / mu) * (m[n + 1] if n < N else 0.0)
    k = 9
    r = aqmchain.passage(chain, "queue==0", p0={"level": k})
    assert r.mean == pytest.approx(m[1:k + 1].sum(), rel=1e-11)
    # up-crossing from 0 to N (gambler's ruin): u_0 = 1/lam, u_n = 1/lam + (mu/lam) u_{n-1}
    u = np.zeros(N)
    for n in range(N):
        u[n] = 1 / lam + ((mu / lam) * u[n - 1] if n else 0.0)
    r = aqmchain.passage(chain, f"queue>={N}", p0={"level": 0})
    assert r.mean == pytest.approx(u.sum(), rel=1e-11)
    assert r.reach_probability == 1.0  # every state reaches the target (graph search): exactly 1


def test_targets_that_can_be_missed():
    # alpha = 1, w = 1: the empty state, (1, avg 0) and (2, avg 0) are transient; from (1, avg 0) the
    # queue stays at 1 while a departure meets each arrival and reaches (2, avg 0) at the first slot
    # without one; the closed class never returns to avg 0
    doc = {"model": {"buffer": 4}, "source": {"kind": "bernoulli", "alpha": 1.0}, "service": {"mu": 0.5},
           "aqm": {"drop": "red", "min_th": 1, "max_th": 3, "p_max": 0.5, "w": 1.0},
           "grid": {"k": 1, "refine": "none"}}
    chain = chain_of(doc)
    P = dense(chain)
    level, avg = (np.asarray(chain.labels[k]) for k in ("level", "avg_index"))
    target = (level >= 2) & (avg == 0)
    N = ~target
    drops = np.asarray(chain.events["aqm_drop"]) + np.asarray(chain.events["overflow"])

    def survival_sum(p0):  # E[T] = sum_t P(T > t), mass never leaking out of the states that reach the target
        u, total = p0[N].copy(), 0.0
        while u.sum() > 1e-18:
            total += u.sum()
            u = u @ P[np.ix_(N, N)]
        return total

    # from empty: some states cannot reach the target, but none of them can be entered before T
    r = aqmchain.passage(chain, "queue>=2 and avg<=0", rewards=["drops"])
    p0 = point(chain)
    assert r.info.never_states >= 1 and r.reach_probability == 1.0
    # E[T] = z 1 with z's error at most its relative residual times the longest expected passage (3 slots)
    tol = 3.0 * (r.info.mean_residual + summation_error(64))
    assert r.mean == pytest.approx(survival_sum(p0), abs=tol) and r.mean == pytest.approx(3.0, abs=tol)
    # from a law that puts 0.3 on (1, avg 0) and 0.7 on a state of the closed class: P(T < inf) = 0.3
    start = point(chain, level=1)
    stuck = point(chain, level=3, avg_index=1)
    law = 0.3 * start + 0.7 * stuck
    big = np.linalg.matrix_power(np.where(target[:, None], np.eye(chain.n), P), 1 << 12)  # absorbed by now
    r = aqmchain.passage(chain, "queue>=2 and avg<=0", p0=law, times=[1, 2, 64], rewards=["drops"])
    # z b off by at most the residual times 3 slots; the 12 squarings of the power each round n terms
    tol = 3.0 * r.info.mean_residual + 12 * summation_error(chain.n)
    assert r.reach_probability == pytest.approx((law @ big)[target].sum(), abs=tol)
    assert r.reach_probability == pytest.approx(0.3, abs=tol)
    assert r.mean == np.inf and r.rewards_until["drops"] == np.inf and "P(T = inf)" in r.info.note
    assert drops[~target].max() > 0  # drops happen in the closed class: their sum before T is unbounded
    # by t = 64 all but 0.3 * 0.5^63 of the mass that can arrive has, up to 64 steps' rounding
    assert r.cdf[-1] == pytest.approx(0.3, abs=0.3 * 0.5 ** 63 + stepping_error(P, 64))


def test_bad_input_is_named():
    chain = chain_of(SLOTTED_DOC)
    with pytest.raises(aqmchain.ModelError, match="to") as e:
        aqmchain.passage(chain, "delay>=3", times=[1])
    assert "queue" in str(e.value)
    with pytest.raises(aqmchain.ModelError, match="'to'"):
        aqmchain.passage(chain, "queue>=100", times=[1])  # no state of the chain
    with pytest.raises(aqmchain.ModelError, match="'times'.*sorted"):
        aqmchain.passage(chain, "queue>=5", times=[10, 3])
    with pytest.raises(aqmchain.ModelError, match="'times'.*whole"):
        aqmchain.passage(chain, "queue>=5", times=[1.5])
    with pytest.raises(aqmchain.ModelError, match="'method'"):
        aqmchain.passage(chain, "queue>=5", times=[1], method="magic")
    with pytest.raises(aqmchain.OptionError, match="method 'uniformization' needs a continuous"):
        aqmchain.passage(chain, "queue>=5", times=[1], method="uniformization")  # slotted model
    with pytest.raises(aqmchain.ModelError, match="'rewards'"):
        aqmchain.passage(chain, "queue>=5", times=[1], rewards="bananas")
    with pytest.raises(aqmchain.ModelError, match="'p0.level'"):
        aqmchain.passage(chain, "queue>=5", times=[1], p0={"level": -1})


def test_unreachable_target_and_budget():
    # a target that no path reaches from p0: the level cannot fall to 0 when service is impossible
    doc = {"model": {"buffer": 6}, "source": {"kind": "bernoulli", "alpha": 0.5}, "service": {"mu": 0.5},
           "aqm": {"drop": "red", "min_th": 2, "max_th": 5, "p_max": 0.2, "w": 0.5},
           "grid": {"k": 1, "refine": "none"}}
    chain = chain_of(doc)
    r = aqmchain.passage(chain, "queue>=6", times=[1, 10])
    assert r.reach_probability == 1.0  # every state reaches the target (graph search): exactly 1
    with pytest.raises(aqmchain.NonConvergenceError) as e:
        aqmchain.passage(chain, "queue>=6", times=[5, 1000], max_steps=100, method="step")
    part = e.value.result
    assert len(part.times) == 1 and part.info.status == "not_converged" and "max_steps" in part.info.note


def test_chain_cdf_and_mean_within_the_simulators_intervals():
    # the simulator on the chain's avg grid (discretised) samples the same process: the chain's
    # P(T <= t) lies within twice the 95 % Wilson half-width at every time (a margin that a
    # correct chain fails with probability far below 1e-3 over the five times), and so does E[T]
    doc = {**SLOTTED_DOC, "aqm": {k: v for k, v in SLOTTED_DOC["aqm"].items() if k != "spacing"}}
    model = aqmchain.model_from_dict(doc)[0]
    times = [5, 20, 50, 100, 300]
    r = aqmchain.passage(model, "queue>=7", times=times, rewards=["mark"])
    sim = aqmchain.simulate_passage(model, "queue>=7", horizon=5000, replications=4000, seed=11, discretised=True,
                                    times=times, rewards=["mark"])
    for k, t in enumerate(times):
        lo, hi = sim.cdf_lo[k], sim.cdf_hi[k]
        half = 0.5 * (hi - lo)
        assert lo - half <= r.cdf[k] <= hi + half, (t, r.cdf[k], lo, hi)
    assert sim.censored == 0
    assert abs(r.mean - sim.mean) <= 2 * sim.mean_hw, (r.mean, sim.mean, sim.mean_hw)
    # the marks before T: the chain's r(X_0) + ... + r(X_{T-1}), the simulator's count up to T
    marks = sim.rewards["mark"]
    assert abs(r.rewards_until["mark"] - marks["until_hit"]) <= 2 * marks["until_hit_hw"], (r.rewards_until, marks)
