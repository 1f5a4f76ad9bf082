"""Simulated hitting times (aqmchain.simulate_passage) against independent oracles.

- Without AQM drops a slotted queue is a birth-death chain per slot (from n >= 1: up with
  lam (1 - mu), down with (1 - lam) mu; from 0 up with lam; at N an arrival overflows): the
  mean time to climb to a level and to drain by the recursions written here.
- Continuous-time M/M/1: E[T_{0 -> L}] = sum_{n < L} (1 / lam) sum_{k <= n} (mu / lam)^k.
- Discretised runs follow the chain's grid, so the chain is their exact law: the cdf of T
  is the mass absorbed in the target, computed here by stepping the chain's matrix with the
  target made absorbing (dense, small model).
- Wald's identity: the arrivals until T have mean lam E[T].
- The exact avg between events enters its target at ln((q - a) / (q - c)) / w.

Tolerances are the replications' own intervals: means within 3 Student-t half-widths (about 6
standard deviations), cdf values within twice the Wilson interval's half-length (about 4 standard
deviations at each time); no value is pinned to one stream of random numbers.
"""

import math
import re

import numpy as np
import pytest

import aqmchain
from conftest import interrupt_started


def slotted(N=20, lam=0.3, mu=0.5, drop=None, k=2, **aqm):
    drop = drop or aqmchain.DropFunction.none()
    return aqmchain.Model(buffer=N, source=aqmchain.Source.bernoulli(lam), service=aqmchain.Service(mu),
                          aqm=aqmchain.Aqm(drop=drop, w=0.2, **aqm), grid=aqmchain.GridSpec(k=k))


def continuous(N=30, lam=0.6, mu=1.0, w=0.5, drop=None, k=2):
    drop = drop or aqmchain.DropFunction.none()
    return aqmchain.Model(buffer=N, time="continuous", source=aqmchain.Source.poisson(lam),
                          service=aqmchain.Service.exponential(mu), aqm=aqmchain.Aqm(drop=drop, w=w),
                          grid=aqmchain.GridSpec(k=k))


def birth_death(N, lam, mu):
    """Per-slot up and down probabilities of n = 0..N without AQM drops."""
    up = np.full(N + 1, lam * (1 - mu))
    down = np.full(N + 1, (1 - lam) * mu)
    up[0], down[0] = lam, 0.0
    up[N], down[N] = 0.0, mu  # an arrival at N overflows; the departure frees a place
    return up, down


def climb_times(N, lam, mu):
    """h[n] = E[time from n to n + 1]: h_n = (1 + down_n h_{n-1}) / up_n."""
    up, down = birth_death(N, lam, mu)
    h = np.zeros(N)
    for n in range(N):
        h[n] = (1 + down[n] * (h[n - 1] if n else 0.0)) / up[n]
    return h


def drain_times(N, lam, mu):
    """g[n] = E[time from n to n - 1]: g_n = (1 + up_n g_{n+1}) / down_n."""
    up, down = birth_death(N, lam, mu)
    g = np.zeros(N + 1)
    for n in range(N, 0, -1):
        g[n] = (1 + up[n] * (g[n + 1] if n < N else 0.0)) / down[n]
    return g


def within_mean(value, hw, exact, k=3.0):
    assert np.isfinite(hw) and hw > 0
    assert abs(value - exact) <= k * hw, f"simulated {value} +- {hw}, exact {exact}"


def within_cdf(res, exact):
    half = (res.cdf_hi - res.cdf_lo) / 2
    centre = (res.cdf_hi + res.cdf_lo) / 2
    bad = np.abs(centre - exact) > 2 * half + 1e-12
    assert not bad.any(), list(zip(res.times[bad], res.cdf[bad], exact[bad]))


def test_slotted_climb_from_empty_is_the_birth_death_mean():
    N, lam, mu, L = 20, 0.3, 0.5, 8
    res = aqmchain.simulate_passage(slotted(N, lam, mu), "queue>=8", horizon=10**7, replications=4000,
                                    rewards=("arrival", "aqm_drop", "overflow"))
    assert res.target == "queue>=8" and res.censored == 0
    exact = climb_times(N, lam, mu)[:L].sum()
    within_mean(res.mean, res.mean_hw, exact)
    assert np.all(res.samples == np.rint(res.samples)) and res.samples.min() >= L  # whole slots, >= L arrivals
    # Wald: E[arrivals in slots 1..T] = lam E[T]; nothing is dropped below the buffer
    r = res.rewards["arrival"]
    within_mean(r["until_hit"], r["until_hit_hw"], lam * exact)
    assert res.rewards["aqm_drop"]["until_hit"] == 0 and res.rewards["overflow"]["until_hit"] == 0
    assert r["at_times"][-1] == r["until_hit"]  # no run censored: up to min(horizon, T) = until T


def test_slotted_from_a_state_climb_and_drain():
    N, lam, mu = 12, 0.4, 0.5
    m = slotted(N, lam, mu)
    up = aqmchain.simulate_passage(m, "queue>=10", p0={"level": 4}, horizon=10**6, replications=3000)
    within_mean(up.mean, up.mean_hw, climb_times(N, lam, mu)[4:10].sum())
    down = aqmchain.simulate_passage(m, "queue==0", p0={"level": 7, "avg": 3.0}, horizon=10**6, replications=3000)
    within_mean(down.mean, down.mean_hw, drain_times(N, lam, mu)[1:8].sum())
    assert down.start == "state" and np.all(down.start_index == 0)
    at0 = aqmchain.simulate_passage(m, "queue>=3", p0={"level": 5}, horizon=10, replications=10)
    assert np.all(at0.samples == 0)  # the start state is checked at t = 0


def test_stationary_start_after_a_load_step():
    # start from the stationary law of the model with lam = 0.2, then the load steps up to 0.45
    N, mu, L = 15, 0.5, 10
    before = aqmchain.solve_stationary(slotted(N, 0.2, mu))
    after = slotted(N, 0.45, mu)
    res = aqmchain.simulate_passage(after, "queue>=10", p0=before, horizon=10**7, replications=4000)
    assert res.start == "stationary"
    up, down = birth_death(N, 0.2, mu)
    pi = np.concatenate([[1.0], np.cumprod(up[:-1] / down[1:])])  # detailed balance of the pre-step chain
    pi /= pi.sum()
    h = climb_times(N, 0.45, mu)
    from_level = np.array([h[n:L].sum() if n < L else 0.0 for n in range(N + 1)])
    within_mean(res.mean, res.mean_hw, float(pi @ from_level))
    # the drawn start states follow pi: level >= L (T = 0) as often as pi says, within a Wilson-like margin
    zero = np.mean(res.samples == 0)
    p = pi[L:].sum()
    assert abs(zero - p) <= 4 * math.sqrt(p * (1 - p) / res.replications) + 1e-12


def dense_absorbing(chain, target_mask):
    """The chain's transition matrix, dense, with the target's states made absorbing."""
    n = chain.n
    P = np.zeros((n, n))
    rows = np.repeat(np.arange(n), np.diff(chain.indptr))
    np.add.at(P, (rows, np.asarray(chain.indices)), np.asarray(chain.data))
    P[target_mask] = 0.0
    P[target_mask, target_mask] = 1.0
    return P


def absorbed(chain, start, target_mask, times):
    """P(T <= t): the chain's law stepped with the target absorbing (dense matrix)."""
    n = chain.n
    P = dense_absorbing(chain, target_mask)
    p = np.zeros(n)
    p[start] = 1.0
    out, t = [], 0
    for target_t in times:
        while t < target_t:
            p = p @ P
            t += 1
        out.append(p[target_mask].sum())
    return np.array(out)


def test_discretised_cdf_is_the_absorbing_chain():
    N = 12
    m = slotted(N, 0.4, 0.45, drop=aqmchain.DropFunction.red(2, 8, 0.3), k=2)
    chain = aqmchain.build_chain(m)
    labels = chain.labels
    grid = np.asarray(chain.grid)
    mask = np.asarray(aqmchain._targets.parse_target("queue>=6 and avg>=1.5").holds(
        labels["level"], grid[labels["avg_index"]]))
    start = chain.index_of([0, 0, 0])
    times = np.array([0, 5, 10, 20, 40, 80, 160, 320])
    exact = absorbed(chain, start, mask, times)
    res = aqmchain.simulate_passage(m, "queue>=6 and avg>=1.5", horizon=320, replications=4000, discretised=True,
                                    times=times)
    assert 0.05 < exact[3] and exact[-1] < 0.99  # the times cover the distribution's body
    within_cdf(res, exact)
    # the same runs from the state (5, avg index 3)
    start = chain.index_of([5, 3, 0])
    exact = absorbed(chain, start, mask, times)
    res = aqmchain.simulate_passage(m, "queue>=6 and avg>=1.5", p0={"level": 5, "avg_index": 3}, horizon=320,
                                    replications=4000, discretised=True, times=times)
    within_cdf(res, exact)


def test_continuous_time_mm1_climb():
    lam, mu, L = 0.6, 1.0, 6
    res = aqmchain.simulate_passage(continuous(30, lam, mu), "queue>=6", horizon=1e6, replications=4000,
                                    rewards=("arrival",))
    exact = sum(sum((mu / lam) ** k for k in range(n + 1)) / lam for n in range(L))
    within_mean(res.mean, res.mean_hw, exact)
    # Wald / optional stopping for the Poisson count: E[arrivals until T] = lam E[T]
    r = res.rewards["arrival"]
    within_mean(r["until_hit"], r["until_hit_hw"], lam * exact)


def test_continuous_avg_enters_its_range_in_closed_form():
    # no event for ~1e8 time units: avg = q (1 - e^{-w t}) with q = 4 reaches 2 at ln(2) / w
    w = 0.5
    m = aqmchain.Model(buffer=10, time="continuous", source=aqmchain.Source.poisson(1e-9),
                       service=aqmchain.Service.exponential(1e-9), aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.none(), w=w))
    res = aqmchain.simulate_passage(m, "avg>=2", p0={"level": 5, "avg": 0.0}, horizon=100.0, replications=20)
    np.testing.assert_allclose(res.samples, math.log(2) / w, rtol=1e-12)
    # from above: avg = 4 + (9 - 4) e^{-w t} falls to 6 at ln(5 / 2) / w
    res = aqmchain.simulate_passage(m, "avg<6 and queue==5", p0={"level": 5, "avg": 9.0}, horizon=100.0,
                                    replications=20)
    np.testing.assert_allclose(res.samples, math.log(5 / 2) / w, rtol=1e-12)
    # q = 4 < 5: avg never reaches 5, every run is censored
    res = aqmchain.simulate_passage(m, "avg>=5", p0={"level": 5}, horizon=100.0, replications=20)
    assert res.censored == 20 and np.isnan(res.mean) and "restricted_mean" in res.note


def test_result_does_not_depend_on_threads_and_serialises():
    m = slotted(15, 0.3, 0.5)
    a = aqmchain.simulate_passage(m, "queue>=6", horizon=200, replications=300, threads=1, seed=7,
                                  rewards=("arrival",))
    b = aqmchain.simulate_passage(m, "queue>=6", horizon=200, replications=300, threads=2, seed=7,
                                  rewards=("arrival",))
    np.testing.assert_array_equal(a.samples, b.samples)
    np.testing.assert_array_equal(a.rewards["arrival"]["at_times"], b.rewards["arrival"]["at_times"])
    assert a.censored == np.count_nonzero(np.isinf(a.samples))
    d = a.to_dict()
    assert d["target"] == "queue>=6" and len(d["samples"]) == 300 and d["censored"] == a.censored
    assert (d["mean"] is None) == (a.censored > 0)
    assert sum(s is None for s in d["samples"]) == a.censored
    # the cdf is the empirical one of the samples
    np.testing.assert_array_equal(a.cdf, [(a.samples <= t).mean() for t in a.times])
    assert np.all(a.cdf_lo <= a.cdf) and np.all(a.cdf <= a.cdf_hi)


def test_bad_input_names_the_parameter():
    m = slotted(10)
    cases = [
        (dict(to="size>3", horizon=10), "to"),
        (dict(to="queue>3", horizon=10.5), "horizon"),
        (dict(to="queue>3", horizon=10, times=[0, 11]), "times[1]"),
        (dict(to="queue>3", horizon=10, times=[3, 2]), "times[1]"),
        (dict(to="queue>3", horizon=10, rewards=("drops",)), "rewards[0]"),
        (dict(to="queue>3", horizon=10, replications=1), "replications"),
        (dict(to="queue>3", horizon=10, p0={"count": 1}), "p0.count"),
        (dict(to="queue>3", horizon=10, p0={"level": 11}), "p0.level"),
        (dict(to="queue>3", horizon=10, p0={"level": 1, "modulator": 1}), "p0.modulator"),
        (dict(to="queue>3", horizon=10, p0={"avg": 0.3}, discretised=True), "p0.avg"),
        (dict(to="queue>3", horizon=10, p0="full"), "p0"),
    ]
    for kwargs, param in cases:
        with pytest.raises(aqmchain.ModelError, match=rf"'{re.escape(param)}['\s]"):
            aqmchain.simulate_passage(m, **kwargs)
    # over the memory budget: refused before anything is allocated, naming what needs the most
    with pytest.raises(aqmchain.StateSpaceTooLarge, match="times"):
        aqmchain.simulate_passage(m, "queue>3", horizon=10**4, replications=10**6, times=np.arange(10**4 + 1),
                                  rewards=("arrival",))
    # a stateful AQM's count cannot be set: only the empty start
    spaced = slotted(10, drop=aqmchain.DropFunction.red(2, 8, 0.1), spacing="count")
    with pytest.raises(aqmchain.ModelError, match="'p0'"):
        aqmchain.simulate_passage(spaced, "queue>3", p0={"level": 2}, horizon=10)
    assert aqmchain.simulate_passage(spaced, "queue>3", horizon=10, replications=2).replications == 2


def test_discretised_modulated_from_stationary_cdf_and_marks_are_the_chain():
    # MMBP arrivals, per-arrival updates, ECN marks; start from the model's stationary law
    src = aqmchain.Source.mmbp([[0.9, 0.1], [0.2, 0.8]], [0.2, 0.7])
    m = aqmchain.Model(buffer=10, source=src, service=aqmchain.Service(0.5),
                       aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(2, 7, 0.3), w=0.3, ecn=0.5,
                                        update="per_arrival"), grid=aqmchain.GridSpec(k=2))
    st = aqmchain.solve_stationary(m)
    chain = st.chain
    labels = chain.labels
    target = "queue>=6 and modulator==1"
    mask = np.asarray(aqmchain._targets.parse_target(target).holds(labels["level"], 0.0, labels["modulator"]))
    n = chain.n
    P = dense_absorbing(chain, mask)
    mark = np.where(mask, 0.0, np.asarray(chain.events["mark"]))  # expected marks in the next slot, outside the target
    times = np.array([0, 2, 5, 10, 20, 40, 80])
    p, cdf, marks, acc = np.asarray(st.pi, dtype=float), [], [], 0.0
    for t in range(times[-1] + 1):
        if t in times:
            cdf.append(p[mask].sum())
            marks.append(acc)
        acc += p @ mark
        p = p @ P
    res = aqmchain.simulate_passage(m, target, p0=st, horizon=80, replications=4000, discretised=True, times=times,
                                    rewards=("mark",))
    assert 0.05 < cdf[1] and cdf[-1] < 0.99
    within_cdf(res, np.array(cdf))
    r = res.rewards["mark"]
    for i in range(1, len(times)):
        within_mean(r["at_times"][i], r["at_times_hw"][i], marks[i])


def test_continuous_discretised_cdf_is_the_absorbing_generator():
    from scipy.linalg import expm

    m = continuous(N=10, lam=0.8, mu=1.0, w=0.5, drop=aqmchain.DropFunction.red(2, 7, 0.3), k=2)
    chain = aqmchain.build_chain(m)
    labels = chain.labels
    grid = np.asarray(chain.grid)
    target = "queue>=6 and avg>=1.5"
    mask = np.asarray(aqmchain._targets.parse_target(target).holds(labels["level"], grid[labels["avg_index"]]))
    n = chain.n
    G = np.zeros((n, n))
    rows = np.repeat(np.arange(n), np.diff(chain.indptr))
    np.add.at(G, (rows, np.asarray(chain.indices)), np.asarray(chain.data))
    G[mask] = 0.0
    p0 = np.zeros(n)
    p0[chain.index_of([0, 0, 0])] = 1.0
    times = np.array([0.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0])
    exact = np.array([(p0 @ expm(G * t))[mask].sum() for t in times])
    res = aqmchain.simulate_passage(m, target, horizon=80.0, replications=4000, discretised=True, times=times)
    assert 0.05 < exact[3] and exact[-1] < 0.99
    within_cdf(res, exact)


ENDLESS = r"""
import aqmchain
m = aqmchain.Model(buffer=10, source=aqmchain.Source.bernoulli(0.3), service=aqmchain.Service(0.5))
c = aqmchain.Model(buffer=10, time="continuous", source=aqmchain.Source.poisson(0.3),
                   service=aqmchain.Service.exponential(0.5))
print("started", flush=True)
try:
    # never in the target (queue > buffer), 1e13 slots / time units: only Ctrl-C ends them
    aqmchain.simulate_passage(m if {ct} == 0 else c, "queue>=11", horizon=1e13, replications=2, threads=1)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.parametrize("ct", [0, 1])
def test_ctrl_c_stops_a_run(ct):
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", ENDLESS.format(ct=ct)], stdout=subprocess.PIPE, text=True)
    out, _ = interrupt_started(p)
    assert out.strip() == "interrupted"
