"""Traffic classes, modified RED and the flow comparison in the continuous-time event simulator
(docs/classes.md "Continuous time", docs/simulation.md "Continuous time").

Oracles:
- the classless continuous-time simulator on the same random stream: one class of one flow
  draws nothing extra, so the numbers are equal, not close;
- modified RED without mice or ECN-capable packets discards what front (random) drop
  discards, with the same draws: equal numbers;
- the M/M/1/N queue in closed form (tail drop, nothing dropped early): every class, blind to
  its label, sees the blocking probability and the mean sojourn time of the whole queue;
- the flow comparison with one flow per class, min_th = 0 and p = 0 below max_th = N: a
  continuous-time chain on the FIFO's sequence of flows, written here (at most 2^(N+1) - 1
  states), solved densely.

Tolerances are in the simulation's own 95 % half-widths (3 to 4 of them: 6 to 8 standard
deviations), so a correct simulator fails with negligible probability for any seed.
"""

import copy
import itertools

import numpy as np
import pytest

import aqmchain
from class_oracle import model_from
from conftest import summation_error

DOC = {"model": {"buffer": 12, "time": "continuous"}, "source": {"kind": "poisson", "rate": 0.8},
       "service": {"kind": "exponential", "mu": 1.0},
       "aqm": {"drop": "red", "min_th": 2, "max_th": 8, "p_max": 0.2, "w": 0.5}, "grid": {"k": 2}}
SIM = {"slots": 100_000, "replications": 2, "seed": 7, "threads": 1}
ALL = ("arrival_rate", "throughput", "loss", "loss_aqm", "loss_overflow", "mark_prob", "pushed_out_prob",
       "mean_system", "var_system", "mean_queue", "var_queue", "mean_avg", "mean_response", "var_response")


def model(aqm=None, classes=None, **top):
    return model_from(DOC, aqm, classes, **top)


def same(a, b, names=ALL):
    assert a.events == b.events
    for n in names:
        assert getattr(a, n) == getattr(b, n), (n, getattr(a, n), getattr(b, n))
        assert a.ci[n] == b.ci[n] or (np.isinf(a.ci[n]) and np.isinf(b.ci[n])), n
    np.testing.assert_array_equal(a.system_pmf, b.system_pmf)


def within(x, name, exact, k=3.0):
    v, hw = getattr(x, name), x.ci[name]
    assert np.isfinite(hw) and hw > 0, (name, hw)
    assert abs(v - exact) <= k * hw, f"{name}: simulated {v} +- {hw}, exact {exact}"


def mm1n(N, lam, mu):
    """The M/M/1/N queue: blocking probability (PASTA) and mean sojourn time of the admitted."""
    p = (lam / mu) ** np.arange(N + 1)
    p /= p.sum()
    found = p[:N] / (1 - p[N])
    return p[N], ((np.arange(N) + 1) / mu * found).sum(), (np.arange(N + 1) * p).sum()


@pytest.mark.parametrize("case", [
    {"aqm": {"ecn": 0.4}},                                            # exact avg, ECN marks
    {"aqm": {"policy": "random"}, "discretised": True},               # avg on the grid, push-out
    {"aqm": {"policy": "front", "p_max": 0.5}, "source": {"kind": "mmpp", "rates": [0.3, 1.6],
                                                          "generator": [[-0.2, 0.2], [0.3, -0.3]]}},
])
def test_one_class_of_one_flow_is_the_classless_run_bit_for_bit(case):
    aqm = case["aqm"]
    top = {"source": case["source"]} if "source" in case else {}
    plain = model(aqm, **top)
    ecn = aqm.get("ecn", 0.0)
    one = model({k: v for k, v in aqm.items() if k != "ecn"}, [{"name": "all", "share": 1.0, "ecn": ecn}], **top)
    d = case.get("discretised", False)
    a = aqmchain.simulate(plain, discretised=d, **SIM)
    b = aqmchain.simulate(one, discretised=d, **SIM)
    same(a, b)
    c = b.classes["all"]
    # equal, not close, on any machine: the class's counts are the same integers as the run's,
    # its sums of sojourn times the same double additions of the same terms in the same order
    # (the engine adds each departure's r to both), and the ratios are formed by the same code
    for n in ("mark_prob", "mean_response", "var_response", "throughput", "arrival_rate"):
        assert getattr(c, n) == getattr(a, n), (n, getattr(c, n), getattr(a, n))
    # three rounded ratios summed against two: each ratio within eps / 2 of its quotient, each
    # addition eps / 2 more, so each side within 5 eps / 2 of the exact loss (all terms >= 0)
    eps = np.finfo(float).eps
    loss = a.loss_aqm + a.loss_overflow
    assert abs(c.loss_aqm + c.loss_overflow + c.loss_pushed_out - loss) <= 5.0 * eps * loss
    # the class's queue area and the run's queue-length histogram: sums of the same nonnegative
    # terms (one per event) in another order
    assert abs(c.mean_queue - a.mean_system) <= summation_error(b.events) * a.mean_system
    assert c.throughput_share == 1.0 and c.queue_share == 1.0 and b.fairness == 1.0
    assert len(c.response_pmf) == 0  # a density in continuous time: mean and variance only
    # the check can fail: another class split changes the draws
    two = aqmchain.simulate(model({k: v for k, v in aqm.items() if k != "ecn"},
                                  [{"name": "x", "share": 0.5, "ecn": ecn}, {"name": "y", "share": 0.5, "ecn": ecn}],
                                  **top), discretised=d, **SIM)
    assert two.mean_queue != a.mean_queue


def test_class_blind_red_treats_classes_alike():
    """Classes differ only by label: each sees the overall loss and response, and gets its
    offered share of the throughput."""
    classes = [{"name": "a", "share": 0.3, "flows": 2}, {"name": "b", "share": 0.7, "flows": 3}]
    r = aqmchain.simulate(model({"p_max": 0.3}, classes, source={"rate": 1.0}), slots=200_000, replications=4,
                          seed=3, threads=1)
    assert r.loss_aqm > 0.01
    for name, share in (("a", 0.3), ("b", 0.7)):
        c = r.classes[name]
        for n in ("loss", "loss_aqm", "mean_response"):
            assert abs(getattr(c, n) - getattr(r, n)) <= 4 * np.hypot(c.ci[n], r.ci[n]), (name, n)
        for n in ("throughput_share", "queue_share"):
            assert abs(getattr(c, n) - share) <= 4 * c.ci[n], (name, n, getattr(c, n), c.ci[n])
        assert abs(c.arrival_rate - share * 1.0) <= 4 * c.ci["arrival_rate"]
    # the accounts add up: per unit time, over classes and flows
    assert sum(c.throughput for c in r.classes.values()) == pytest.approx(r.throughput, rel=1e-12)
    assert sum(c.mean_queue for c in r.classes.values()) == pytest.approx(r.mean_system, rel=1e-9)
    assert sum(f["throughput"] for f in r.flows) == pytest.approx(r.throughput, rel=1e-12)
    # Jain's index of throughputs in the offered proportions (0.3 / 2, 0.3 / 2, 0.7 / 3 x 3): exactly 0.96
    within(r, "fairness", 0.96, k=4.0)
    for c in r.classes.values():  # Little's law per class (no push-out: every admitted packet is served)
        assert c.mean_queue == pytest.approx(c.throughput * c.mean_response, rel=0.02)


@pytest.mark.parametrize("red", [(2, 10, 0.0), (9.5, 10, 0.5)])
def test_tail_drop_classes_see_the_mm1n_blocking_and_sojourn(red):
    """p_max = 0 below max_th = N, or min_th above N - 1: avg <= N - 1 never meets a drop, M/M/1/N."""
    N, lam, mu = 10, 0.9, 1.0
    block, resp, _ = mm1n(N, lam, mu)
    lo, hi, p = red
    classes = [{"name": "a", "share": 0.25}, {"name": "b", "share": 0.75, "flows": 2, "ecn": 0.5}]
    r = aqmchain.simulate(model({"min_th": lo, "max_th": hi, "p_max": p}, classes, model={"buffer": N},
                                source={"rate": lam}, service={"mu": mu}),
                          slots=200_000, replications=4, seed=5, threads=1)
    within(r, "loss", block)
    within(r, "mean_response", resp)
    assert r.loss_aqm == 0.0 and r.mark_prob == 0.0
    for c in r.classes.values():
        within(c, "loss", block, k=4.0)
        within(c, "loss_overflow", block, k=4.0)
        within(c, "mean_response", resp, k=4.0)


@pytest.mark.parametrize("variant", ["front", "random"])
def test_modified_without_protected_packets_is_front_or_random_drop(variant):
    """Without mice or ECN-capable packets every packet is an elephant: modified front (random)
    drop discards what front (random) drop discards, with the same draws."""
    classes = [{"name": "a", "share": 0.4, "flows": 3}, {"name": "b", "share": 0.6}]
    top = {"source": {"rate": 1.1}}
    plain = aqmchain.simulate(model({"policy": variant}, classes, **top), **SIM)
    mod = aqmchain.simulate(model({"policy": variant, "modified": variant}, classes, **top), **SIM)
    same(plain, mod)
    for name in ("a", "b"):
        for n in ("loss", "loss_aqm", "loss_pushed_out", "mean_response", "mean_queue", "throughput"):
            assert getattr(plain.classes[name], n) == getattr(mod.classes[name], n)
    assert plain.pushed_out_prob > 0 and plain.loss_aqm > 0
    # the check can fail: with a protected class the search spares it
    prot = aqmchain.simulate(model({"policy": variant, "modified": variant},
                                   [{"name": "a", "share": 0.4, "flows": 3, "mice": True}, {"name": "b", "share": 0.6}],
                                   **top), **SIM)
    pa, qa = plain.classes["a"], prot.classes["a"]
    assert qa.loss < pa.loss - 4 * np.hypot(qa.ci["loss"], pa.ci["loss"])


def test_modified_red_spares_mice_and_ecn_and_marks_only_protected():
    classes = [{"name": "web", "share": 0.2, "mice": True}, {"name": "ecn", "share": 0.2, "ecn": 1.0},
               {"name": "ftp", "share": 0.6}]
    r = aqmchain.simulate(model({"modified": "front", "p_max": 0.4}, classes, source={"rate": 1.1}), **SIM)
    web, ecn, ftp = (r.classes[n] for n in ("web", "ecn", "ftp"))
    assert web.mark_prob == 0.0 and ftp.mark_prob == 0.0 and ecn.mark_prob > 0
    assert web.loss_pushed_out == 0.0 and ecn.loss_pushed_out == 0.0 and ftp.loss_pushed_out > 0
    assert web.loss < ftp.loss / 2 and ecn.loss < ftp.loss / 2
    for c in r.classes.values():
        assert c.loss == pytest.approx(c.loss_aqm + c.loss_overflow + c.loss_flow_compare + c.loss_pushed_out,
                                       rel=1e-12)
        assert c.throughput == pytest.approx(c.arrival_rate * (1 - c.loss), rel=0.02)


def flow_chain(N, lam, mu, shares):
    """The flow comparison with min_th = 0 and p = 0 below max_th = N, one flow per class: the
    continuous-time chain on the FIFO's sequence of flows.  An arrival of flow f (rate
    lam share_f) is lost at n = N; with packets waiting it draws one of them uniformly and,
    the same flow, both are lost; else it joins.  Returns the stationary law's readings."""
    states = [s for n in range(N + 1) for s in itertools.product(range(len(shares)), repeat=n)]
    index = {s: i for i, s in enumerate(states)}
    S = len(states)
    Q = np.zeros((S, S))
    fc = np.zeros((len(shares), S))  # rate of matches of flow f (each loses two packets) in the state
    for s in states:
        i, n = index[s], len(s)
        if n > 0:
            Q[i, index[s[1:]]] += mu
        if n == N:
            continue
        for f, sh in enumerate(shares):
            rate = lam * sh
            if n >= 2:
                for j in range(1, n):
                    if s[j] == f:
                        Q[i, index[s[:j] + s[j + 1:]]] += rate / (n - 1)
                        fc[f, i] += rate / (n - 1)
                    else:
                        Q[i, index[s + (f,)]] += rate / (n - 1)
            else:
                Q[i, index[s + (f,)]] += rate
    np.fill_diagonal(Q, Q.diagonal() - Q.sum(axis=1))
    A = np.vstack([Q.T, np.ones(S)])
    b = np.zeros(S + 1)
    b[-1] = 1.0
    pi = np.linalg.lstsq(A, b, rcond=None)[0]
    assert np.abs(pi @ Q).max() < 1e-12
    n = np.array([len(s) for s in states])
    out = {"mean_system": pi @ n, "loss_flow_compare": 2 * (pi @ fc.sum(axis=0)) / lam, "throughput": mu * pi[n > 0].sum(),
           "overflow": pi[n == N].sum()}
    for f in range(len(shares)):
        nf = np.array([s.count(f) for s in states])
        head = np.array([len(s) > 0 and s[0] == f for s in states])
        out[f"queue{f}"] = pi @ nf
        out[f"throughput{f}"] = mu * pi[head].sum()
        out[f"fc{f}"] = 2 * (pi @ fc[f]) / (lam * shares[f])
    return out


def test_flow_comparison_one_flow_per_class_against_the_sequence_chain():
    N, lam, mu, shares = 5, 1.2, 1.0, (0.65, 0.35)
    exact = flow_chain(N, lam, mu, shares)
    classes = [{"name": "big", "share": shares[0]}, {"name": "small", "share": shares[1]}]
    m = model({"min_th": 0, "max_th": N, "p_max": 0.0, "flow_compare": True}, classes, model={"buffer": N},
              source={"rate": lam}, service={"mu": mu})
    r = aqmchain.simulate(m, slots=200_000, replications=4, seed=9, threads=1)
    for name in ("mean_system", "loss_flow_compare", "throughput"):
        within(r, name, exact[name], k=4.0)
    assert r.loss_aqm == 0.0
    for f, name in enumerate(("big", "small")):
        c = r.classes[name]
        within(c, "mean_queue", exact[f"queue{f}"], k=4.0)
        within(c, "throughput", exact[f"throughput{f}"], k=4.0)
    # each match loses one packet of each side of the same flow: per class the losses add up
    fc = sum(c.loss_flow_compare * c.arrival_rate for c in r.classes.values()) / r.arrival_rate
    assert fc == pytest.approx(r.loss_flow_compare, rel=1e-12)
    # per class: a match of flow f loses two packets of f
    for f, name in enumerate(("big", "small")):
        within(r.classes[name], "loss_flow_compare", exact[f"fc{f}"], k=4.0)
    assert exact["fc0"] > 1.2 * exact["fc1"]  # the heavier flow matches more often
    assert [f["class"] for f in r.flows] == ["big", "small"]
    # the oracle can fail: without the comparison the numbers are M/M/1/N's
    _, _, plain_n = mm1n(N, lam, mu)
    assert abs(plain_n - exact["mean_system"]) > 10 * r.ci["mean_system"]


def test_flow_comparison_one_flow_closed_form():
    """One class of one flow, min_th = 0, p = 0 below max_th = N: every arrival that finds a
    waiting packet loses itself and it, so n stays in {0, 1, 2}: 0 -> 1 at lam, 1 -> 0 at mu,
    1 -> 2 at lam, 2 -> 1 at mu + lam."""
    lam, mu = 0.9, 0.6
    p1 = lam / mu
    p2 = p1 * lam / (lam + mu)
    pi = np.array([1.0, p1, p2]) / (1 + p1 + p2)
    m = model({"min_th": 0, "max_th": 6, "p_max": 0.0, "flow_compare": True}, [{"name": "all", "share": 1.0}],
              model={"buffer": 6}, source={"rate": lam}, service={"mu": mu})
    r = aqmchain.simulate(m, slots=200_000, replications=4, seed=2, threads=1)
    expect = {"mean_system": pi[1] + 2 * pi[2], "loss_flow_compare": 2 * pi[2], "loss": 2 * pi[2],
              "throughput": mu * (pi[1] + pi[2])}
    for n, v in expect.items():
        within(r, n, v, k=4.0)
    assert r.loss_aqm == 0.0 and r.loss_overflow == 0.0 and r.system_pmf[3:].sum() == 0.0
    assert r.classes["all"].loss_flow_compare == pytest.approx(r.loss_flow_compare, rel=1e-12)


@pytest.mark.parametrize("aqm,classes", [
    ({"modified": "front", "policy": "front"},
     [{"name": "web", "share": 0.3, "mice": True}, {"name": "ftp", "share": 0.7, "ecn": 0.5}]),
    ({"modified": "random", "policy": "random", "flow_compare": True},
     [{"name": "a", "share": 0.4, "flows": 2}, {"name": "b", "share": 0.6, "ecn": 0.3}]),
], ids=["modified-front", "modified-random+compare"])
def test_the_exact_chain_is_the_law_of_the_simulator_on_its_grid(aqm, classes):
    """The exact class chain in continuous time (the FIFO's sequence of classes, and of flows
    where the comparison reads them) is the simulator's law on the chain's grid: per-class
    losses and their parts, marks, throughputs and queues within 4 of the simulator's 95 %
    half-widths (8 standard deviations)."""
    m = model(dict(aqm, w=0.5), classes, model={"buffer": 6}, source={"rate": 1.0}, service={"mu": 1.0},
              grid={"k": 1, "refine": "none"})
    chain = aqmchain.solve_stationary(m, classes="exact")
    sim = aqmchain.simulate(m, slots=400_000, replications=4, seed=11, threads=1, discretised=True)
    for name, c in chain.classes.items():
        s = sim.classes[name]
        for metric in ("loss", "throughput", "mean_queue", "loss_pushed_out", "loss_flow_compare", "mark_prob"):
            v, hw, exact = getattr(s, metric), s.ci[metric], getattr(c, metric)
            assert abs(v - exact) <= 4.0 * hw + 1e-12, f"{name}.{metric}: simulated {v} +- {hw}, chain {exact}"


def test_ns3_semantics_refuse_the_comparison():
    ns3 = copy.deepcopy(DOC)
    ns3["aqm"].update({"semantics": "ns3", "w": 0.002, "flow_compare": True})
    with pytest.raises(aqmchain.ModelError, match="ns3") as e:
        aqmchain.model_from_dict(ns3)
    assert e.value.param == "aqm.flow_compare"


def test_scenarios_with_classes_follow_the_classless_transient_chain():
    """Classes that differ only by label have the classless model's aggregate law; on the
    chain's grid the transient chain of the classless scenario is that law."""
    def sc(classes):
        low = model({"w": 0.5}, classes, model={"buffer": 15}, source={"rate": 0.3}, service={"mu": 0.6})
        high = model({"w": 0.5}, classes, model={"buffer": 15}, source={"rate": 1.2}, service={"mu": 0.6})
        return aqmchain.Scenario([aqmchain.Phase(20.0, low), aqmchain.Phase(30.5, high), aqmchain.Phase(29.5, low)])
    times = [0, 5, 20, 21, 25, 35, 50, 55, 80]
    two = [{"name": "a", "share": 0.4, "flows": 2}, {"name": "b", "share": 0.6}]
    res = aqmchain.simulate_scenario(sc(two), times, replications=3000, seed=4, discretised=True)
    law = aqmchain.solve_transient(sc(None), times)
    for name in ("mean_queue", "mean_system", "mean_avg"):
        sim, hw, exact = getattr(res, name), getattr(res, name + "_hw"), np.asarray(getattr(law, name))
        assert np.all(np.abs(sim - exact) <= np.maximum(3 * hw, 1e-9)), (name, sim, hw, exact)
    # one class of one flow: the classless ensemble, draw for draw
    opts = dict(replications=200, seed=8, threads=1)
    a = aqmchain.simulate_scenario(sc(None), times, **opts)
    b = aqmchain.simulate_scenario(sc([{"name": "all", "share": 1.0}]), times, **opts)
    for name in ("mean_queue", "mean_avg", "losses"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_hitting_times_with_classes():
    lam, mu, L = 0.6, 1.0, 6
    none = {"drop": "none", "min_th": None, "max_th": None, "p_max": None}
    classes = [{"name": "a", "share": 0.3, "flows": 2}, {"name": "b", "share": 0.7, "ecn": 0.5}]
    m = model(none, classes, model={"buffer": 30}, source={"rate": lam}, service={"mu": mu})
    res = aqmchain.simulate_passage(m, f"queue>={L}", horizon=1e6, replications=4000)
    # M/M/1: E[T_{0 -> L}] = sum_{n < L} (1 / lam) sum_{k <= n} (mu / lam)^k, blind to the labels
    exact = sum(sum((mu / lam) ** k for k in range(n + 1)) / lam for n in range(L))
    assert abs(res.mean - exact) <= 3 * res.mean_hw, (res.mean, res.mean_hw, exact)
    # one class of one flow: the classless run's hitting times, draw for draw
    plain = aqmchain.simulate_passage(model(), "queue>=5", horizon=1e4, replications=300, threads=1)
    one = aqmchain.simulate_passage(model(None, [{"name": "all", "share": 1.0}]), "queue>=5", horizon=1e4,
                                    replications=300, threads=1)
    np.testing.assert_array_equal(plain.samples, one.samples)
