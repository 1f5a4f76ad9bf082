"""The class chains (docs/classes.md): the two-class chain against a dense matrix written
independently in the test, the degenerate cases against the single-class chain, modified RED
and the flow comparison against closed forms, the exact class-sequence chain against the
approximation (where the approximation is exact) and against the simulator."""

import itertools

import numpy as np
import pytest

import aqmchain
from class_oracle import assert_classes_match_simulation, class_chain, two
from conftest import (construction_error, lumping_tolerances, residual_evaluation_error, solution_distance_bound,
                      spec_to_doc, summation_error)

MMBP = {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.3, 0.7]], "arrival": [0.25, 0.85]}
BERN = {"kind": "bernoulli", "alpha": 0.55}
RED = {"drop": "red", "min_th": 2, "max_th": 6, "p_max": 0.4}


def model_of(spec: dict) -> "aqmchain.Model":
    doc = spec_to_doc(spec)
    for key in ("modified", "flow_compare"):
        if key in spec:
            doc["aqm"][key] = spec[key]
    if spec.get("classes"):
        doc["class"] = [dict(c) for c in spec["classes"]]
    return aqmchain.model_from_dict(doc)[0]


def spec(**kw):
    s = {"buffer": 9, "mu": 0.5, "w": 0.35, "k": 2, "mapping": "split", "update": "per_slot", "source": MMBP, **RED}
    s.update(kw)
    return s


# ---------------------------------------------------------------- the dense oracle
CASES = {
    "tail": dict(classes=two([0.2, 0.7])),
    "front_ecn": dict(policy="front", classes=two([0.2, 0.7], a_ecn=0.6)),
    "random_ecn": dict(policy="random", classes=two(0.4, b_ecn=0.3)),
    "modified_front": dict(modified="front", classes=two([0.3, 0.6], a_mice=True, b_ecn=0.25)),
    "modified_random": dict(modified="random", classes=two([0.3, 0.6], a_mice=True, a_ecn=0.2, b_ecn=0.4)),
    "modified_front_policy_front": dict(modified="front", policy="front",
                                        classes=two(0.5, a_mice=True, b_ecn=0.5)),
    "flow_compare": dict(flow_compare=True, classes=two([0.4, 0.8], b_flows=3, b_flow_weights=[0.6, 0.3, 0.1])),
    "flow_compare_random": dict(flow_compare=True, policy="random", source=BERN,
                                classes=two(0.5, a_flows=2, b_flows=1)),
    "one_class_flow_compare": dict(flow_compare=True, classes=[{"name": "all", "share": 1.0, "flows": 2}]),
}


def assert_equals_dense_oracle(s: dict, labels=("level", "avg_index", "modulator", "class2", "head_class"),
                               same_nnz=False):
    """The built chain's states (the labels named) and P against class_oracle's, in the
    oracle's order (sorted tuples), and with `same_nnz` its structure too; returns the chain."""
    states, P_ref = class_chain(s)
    chain = aqmchain.build_chain(model_of(s))
    lab = aqmchain.state_labels(chain)
    zero = np.zeros(chain.n, dtype=int)
    built = list(zip(*(np.asarray(lab.get(k, zero)).tolist() for k in labels)))
    order = sorted(range(chain.n), key=built.__getitem__)  # the keys put the stateful AQM before the classes
    assert [built[i] for i in order] == states, "reachable state sets differ"
    P = aqmchain.transition_matrix(chain).toarray()[np.ix_(order, order)]
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=construction_error(P_ref))
    if same_nnz:
        assert chain.nnz == np.count_nonzero(P_ref)
    return chain


@pytest.mark.parametrize("case", list(CASES))
def test_two_class_matrix_equals_dense_oracle(case):
    assert_equals_dense_oracle(spec(**CASES[case]))


# ---------------------------------------------------------------- with a stateful AQM (docs/stateful-aqm.md)
FDYN = dict(weight="autored", dynamic_max_th=True, max_th_growth=0.3)
#: small enough for the dense oracle (a count's range grows as 1 / the smallest p_b)
SMALL = dict(buffer=6, k=1, source=BERN, min_th=1, max_th=4, p_max=0.6)
STATEFUL_CASES = {
    # FDynamicAutoRED: AutoRED's weight, dynamic max_th and the flow comparison
    "fdynamic_queue_reading": dict(**FDYN, autored_p="queue", flow_compare=True,
                                   classes=two([0.4, 0.8], b_flows=2, b_flow_weights=[0.7, 0.3])),
    "fdynamic_drop_reading_modified": dict(**FDYN, buffer=7, p_max=0.7, w=0.05, modified="front", flow_compare=True,
                                           classes=two(0.4, a_mice=True, b_flows=2)),
    "spacing_count_front_ecn": dict(**SMALL, spacing="count", policy="front", classes=two(0.3, a_ecn=0.6)),
    "spacing_wait_flow_compare": dict(**SMALL, spacing="wait", flow_compare=True, classes=two(0.5, a_flows=2)),
    "spacing_dynamic_max_th": dict(**SMALL, spacing="count", dynamic_max_th=True, autored_p="queue",
                                   max_th_growth=0.3, modified="random",
                                   classes=two(0.4, a_mice=True, b_ecn=0.25)),
    "adaptive_geometric_modified": dict(**dict(SMALL, p_max=0.3), adaptive=True, interval=3, p_max_step=0.1,
                                        increment=0.05, modified="random",
                                        classes=two(0.4, a_mice=True, a_ecn=0.2)),
    "adaptive_exact_ecn": dict(**dict(SMALL, buffer=5, p_max=0.3), adaptive=True, clock="exact", interval=2,
                               p_max_step=0.2, increment=0.05, classes=two(0.4, b_ecn=0.3)),
}
STATEFUL_LABELS = ("level", "avg_index", "modulator", "class2", "head_class", "count", "pmax_index", "maxth_index",
                   "phase")


@pytest.mark.parametrize("case", list(STATEFUL_CASES))
def test_stateful_two_class_matrix_equals_dense_oracle(case):
    chain = assert_equals_dense_oracle(spec(**STATEFUL_CASES[case]), STATEFUL_LABELS, same_nnz=True)
    lab = aqmchain.state_labels(chain)
    # the rules fire: the count moves, p_max moves, cur_max_th is raised somewhere
    for name in ("count", "pmax_index", "maxth_index"):
        if name in lab:
            assert len(set(np.asarray(lab[name]).tolist())) > 1, name


@pytest.mark.parametrize("chain_kind", ["approx", "exact", "window"])
@pytest.mark.parametrize("aqm", [dict(spacing="count", adaptive=True, interval=4, p_max=0.3, p_max_low=0.3,
                                      p_max_step=0.1, increment=0.05),
                                 dict(weight="autored", dynamic_max_th=True, autored_p="queue", max_th_growth=0.3,
                                      p_max=0.6, spacing="wait")])
def test_identical_classes_with_stateful_aqm_split_the_single_class_chain(chain_kind, aqm):
    """Two classes that differ only in their name (and their share per modulator state): the
    class chain lumps onto the single-class stateful chain, the same law of the count, p_max
    and cur_max_th."""
    base = spec(buffer=6 if chain_kind == "exact" else 8, k=1, min_th=1, max_th=4, ecn=0.3, **aqm)
    plain = aqmchain.solve_stationary(model_of(base))
    r = aqmchain.solve_stationary(model_of(dict(base, ecn=0.0, classes=two([0.35, 0.8], a_ecn=0.3, b_ecn=0.3))),
                                  classes=chain_kind)
    assert r.class_chain == chain_kind and r.states > plain.states
    tol = lumping_tolerances(plain, r)
    for k in ("loss", "loss_aqm", "mark_prob", "mean_queue", "var_queue", "throughput", "mean_avg", "mean_count",
              "mean_p_max", "mean_max_th", "mean_response"):
        if getattr(plain, k) is not None:
            assert abs(getattr(r, k) - getattr(plain, k)) <= tol[k], (k, getattr(r, k), getattr(plain, k), tol[k])
    for name in ("count_pmf", "p_max_pmf", "max_th_pmf"):
        if getattr(plain, name) is not None:
            np.testing.assert_allclose(getattr(r, name), getattr(plain, name), atol=1e-11)
    # per class under tail: R follows from the level an admitted packet of the class finds
    both = sum(k.throughput * k.mean_response for k in r.classes.values())
    assert both == pytest.approx(plain.throughput * plain.mean_response, rel=1e-9)


# ---------------------------------------------------------------- degenerate cases
def test_one_class_gives_the_plain_chain_exactly():
    plain = aqmchain.solve_stationary(model_of(spec(ecn=0.3, policy="front")))
    named = aqmchain.solve_stationary(model_of(spec(policy="front", classes=[{"name": "x", "share": 1.0,
                                                                                "ecn": 0.3}])))
    assert plain.states == named.states and named.class_chain == "single"
    for k in ("loss", "loss_aqm", "mark_prob", "mean_queue", "var_queue", "throughput", "mean_response"):
        assert getattr(plain, k) == getattr(named, k)
    x = named.classes["x"]
    # the same pi over the same states, the sums grouped by class: a ratio of two sums of n terms
    # each within n eps (summation_error), the sides together 4 n eps
    rounding = 4 * summation_error(named.states)
    assert x.loss == pytest.approx(plain.loss, rel=rounding, abs=0.0)
    assert x.mean_queue == pytest.approx(plain.mean_system, rel=rounding, abs=0.0) and x.throughput_share == 1.0
    # front drop: the losses are queued packets pushed out unless nothing waits
    assert x.loss_pushed_out > 0.5 * x.loss and x.loss_aqm + x.loss_overflow + x.loss_pushed_out == pytest.approx(x.loss)
    assert list(plain.classes) == ["all"]


@pytest.mark.parametrize("chain_kind", ["approx", "exact", "window"])
@pytest.mark.parametrize("policy", ["tail", "random"])
def test_two_identical_classes_split_the_single_class_chain(chain_kind, policy):
    buffer = 6 if chain_kind == "exact" else 9
    base = spec(buffer=buffer, policy=policy, ecn=0.3, min_th=1, max_th=4)
    plain = aqmchain.solve_stationary(model_of(base))
    shares = [0.35, 0.8]
    two_spec = dict(base, ecn=0.0, classes=two(shares, a_ecn=0.3, b_ecn=0.3))
    r = aqmchain.solve_stationary(model_of(two_spec), classes=chain_kind)
    assert r.class_chain == chain_kind and r.states > plain.states
    tol = lumping_tolerances(plain, r)
    for k in ("arrival_rate", "loss", "loss_aqm", "loss_overflow", "mark_prob", "mean_queue", "var_queue",
              "throughput", "mean_avg"):
        assert abs(getattr(r, k) - getattr(plain, k)) <= tol[k], (k, getattr(r, k), getattr(plain, k), tol[k])
    # class shares of the arrivals as given (per modulator state, weighted by the arrivals there)
    M = np.array(MMBP["matrix"])
    w, v = np.linalg.eig(M.T)
    pi_m = np.real(v[:, np.argmin(abs(w - 1))])
    pi_m /= pi_m.sum()
    lam = np.array(MMBP["arrival"])
    a_rate = float(np.sum(pi_m * lam * np.array(shares)))
    assert r.classes["a"].arrival_rate == pytest.approx(a_rate, rel=1e-12)
    assert r.classes["a"].arrival_rate + r.classes["b"].arrival_rate == pytest.approx(plain.arrival_rate, rel=1e-12)
    total = sum(k.loss * k.arrival_rate for k in r.classes.values())
    assert total == pytest.approx(plain.loss * plain.arrival_rate, rel=1e-10)
    assert sum(k.mean_queue for k in r.classes.values()) == pytest.approx(plain.mean_system, rel=1e-10)
    if policy == "tail":
        # the classes arrive in different modulator states and see different queues, but
        # together they are the single class: throughput-weighted R is the aggregate R
        assert r.classes["a"].mean_response != pytest.approx(r.classes["b"].mean_response, rel=1e-3)
        both = sum(k.throughput * k.mean_response for k in r.classes.values())
        assert both == pytest.approx(plain.throughput * plain.mean_response, rel=1e-9)


def test_exact_equals_approx_when_classes_are_iid():
    """Class-blind dynamics and shares that do not depend on the modulator: the waiting
    packets' classes are exchangeable given the counts, so the random-order approximation
    is exact; the two chains must agree per class."""
    s = spec(buffer=7, source=BERN, policy="front", classes=two(0.3))
    ra = aqmchain.solve_stationary(model_of(s), classes="approx")
    rx = aqmchain.solve_stationary(model_of(s), classes="exact")
    for name in ("a", "b"):
        for k in ("loss", "loss_pushed_out", "throughput", "mean_queue", "throughput_share"):
            assert getattr(ra.classes[name], k) == pytest.approx(getattr(rx.classes[name], k), rel=1e-9), (name, k)


def test_exact_chain_little_law_per_class_under_tail():
    """The exact chain carries the FIFO: per class, mean packets in system = throughput x mean R."""
    s = spec(buffer=7, classes=two([0.2, 0.7], a_ecn=0.8))
    r = aqmchain.solve_stationary(model_of(s), classes="exact")
    for k in r.classes.values():
        assert k.response_available
        assert k.mean_queue == pytest.approx(k.throughput * k.mean_response, rel=1e-9)
        assert k.response_pmf.sum() == pytest.approx(1.0, abs=1e-10)


# ---------------------------------------------------------------- modified RED
@pytest.mark.parametrize("variant", ["front", "random"])
@pytest.mark.parametrize("policy", ["tail", "front"])
def test_modified_without_mice_or_ecn_is_plain_red(variant, policy):
    plain = aqmchain.solve_stationary(model_of(spec(policy=policy)))
    r = aqmchain.solve_stationary(model_of(spec(policy=policy, modified=variant, classes=two([0.3, 0.6]))))
    for k in ("loss", "loss_aqm", "loss_overflow", "mean_queue", "var_queue", "throughput"):
        assert getattr(r, k) == pytest.approx(getattr(plain, k), rel=1e-10), k


@pytest.mark.parametrize("ecn", [0.0, 1.0])
@pytest.mark.parametrize("variant", ["front", "random"])
def test_all_mice_lose_only_above_max_th_or_on_overflow(variant, ecn):
    """Every arrival is protected (mice): below max_th an early decision finds no elephant
    and admits the arrival (marked when ECN-capable); an arrival is lost only when its
    slot's avg is >= max_th (then p = 1 and the tail policy drops it) or the buffer is full."""
    s = spec(modified=variant, classes=two([0.3, 0.6], a_mice=True, a_ecn=ecn, b_mice=True, b_ecn=ecn))
    r = aqmchain.solve_stationary(model_of(s))
    lab = aqmchain.state_labels(r.chain)
    pi = np.asarray(r.pi)
    # P(the slot's updated avg is >= max_th | state): the filter target, read off P's columns
    # (the target does not depend on the modulator move nor the arrival)
    lands_above = r.transition_matrix()[:, np.flatnonzero(lab["avg"] >= s["max_th"])].sum(axis=1).A1
    arrival = np.asarray(r.chain.events["arrival"])
    expected = float(np.sum(pi * arrival * lands_above * (lab["level"] < s["buffer"])))
    assert (r.mark_prob > 0.01 if ecn else r.mark_prob == 0.0) and expected > 1e-4
    assert r.loss_aqm * r.arrival_rate == pytest.approx(expected, rel=1e-10)
    for k in r.classes.values():
        assert k.loss_pushed_out == 0.0
    # max_th at the buffer: avg (<= N - 1) never reaches it, only overflow loses packets
    r2 = aqmchain.solve_stationary(model_of(dict(s, max_th=s["buffer"])))
    assert r2.loss_aqm == 0.0 and (r2.mark_prob > 0.01 if ecn else r2.mark_prob == 0.0)
    for k in r2.classes.values():
        assert k.loss_aqm == 0.0 and k.loss == k.loss_overflow > 0


# ---------------------------------------------------------------- flow comparison
def test_flow_comparison_single_flow_closed_form():
    """One flow: with w = 1 on the integer grid avg = q exactly; with p_max = 0 and max_th
    above the buffer the only losses are the comparison's: whenever avg >= min_th = 1 (so
    something waits) an arrival and a waiting packet are both dropped.  Then n lives on
    {0, 1, 2}; its 3x3 chain is written here."""
    N, a, mu = 6, 0.6, 0.3
    s = {"buffer": N, "mu": mu, "w": 1.0, "k": 1, "mapping": "split", "update": "per_slot",
         "source": {"kind": "bernoulli", "alpha": a}, "drop": "red", "min_th": 1, "max_th": N, "p_max": 0.0,
         "flow_compare": True}
    r = aqmchain.solve_stationary(model_of(s))
    # n = 0: arrival -> 1 (no departure from an empty system)
    # n = 1: q = 0 < min_th: arrival admitted; departure with mu
    # n = 2: q = 1: an arrival drops itself and the waiting packet; the one in service leaves w.p. mu
    # n = 2 with an arrival: n -> 1 (comparison) then -> 0 (departure, mu) or stays 1
    P = np.array([[1 - a, a, 0],
                  [(1 - a) * mu, a * mu + (1 - a) * (1 - mu), a * (1 - mu)],
                  [a * mu, a * (1 - mu) + (1 - a) * mu, (1 - a) * (1 - mu)]])
    w, v = np.linalg.eig(P.T)
    pi = np.real(v[:, np.argmin(abs(w - 1))])
    pi /= pi.sum()
    # the chain's vector summed over avg is a probability vector of P (the chain lumps onto it
    # exactly) whose residual is the solve's plus the lumped rows' rounding; the eigenvector's
    # residual as evaluated here, within its evaluation error: their distance from
    # solution_distance_bound, plus the lumping sums' rounding
    eig_residual = float(np.abs(pi @ P - pi).sum()) + residual_evaluation_error(P)
    d = solution_distance_bound(P, pi, r.info.residual + 3 * construction_error(P), eig_residual)
    assert np.abs(r.system_pmf[:3] - pi).sum() <= d + summation_error(r.states)
    assert np.all(r.system_pmf[3:] == 0.0)  # no state has n >= 3
    lost = 2 * a * pi[2]  # both packets
    assert r.loss_flow_compare == pytest.approx(lost / a, rel=1e-10)
    assert r.loss == pytest.approx(lost / a, rel=1e-10) and r.loss_aqm == 0.0
    k = r.classes["all"]
    assert k.loss_flow_compare == pytest.approx(lost / a, rel=1e-10) and k.loss_pushed_out == 0.0
    assert r.throughput == pytest.approx(a * (1 - 2 * pi[2]), rel=1e-10)  # flow balance


# ---------------------------------------------------------------- errors
def test_class_chain_refusals():
    three = [{"name": n, "share": 1 / 3} for n in "xyz"]
    three[2]["share"] = 1 - 2 / 3
    with pytest.raises(aqmchain.ModelError, match="'class'.*at most 2"):
        aqmchain.build_chain(model_of(spec(classes=three)))
    with pytest.raises(aqmchain.ModelError, match="model.buffer.*exact class chain.*N <= 15"):
        aqmchain.build_chain(model_of(spec(buffer=20, classes=two(0.5))), classes="exact")
    with pytest.raises(aqmchain.OptionError, match="classes"):
        aqmchain.solve_stationary(model_of(spec(classes=two(0.5))), classes="lumped")


def test_json_classes_and_response_note(tmp_path):
    r = aqmchain.solve_stationary(model_of(spec(modified="front", classes=two(0.5, a_mice=True))))
    d = r.to_dict()
    assert set(d["classes"]) == {"a", "b"} and d["class_chain"] == "approx"
    # modified RED: the tagged-packet chain on the two-class chain (tests/python/analysis/test_class_response.py)
    assert d["classes"]["a"]["mean_response"] == pytest.approx(r.classes["a"].mean_response)
    assert r.classes["a"].mean_response > 0
    assert not r.classes["a"].response_note and r.response_method == "tagged_chain"
    ex = aqmchain.solve_stationary(model_of(spec(buffer=5, modified="front", classes=two(0.5, a_mice=True))),
                                   classes="exact")
    assert ex.to_dict()["classes"]["a"]["mean_response"] is None
    assert "two-class chain" in ex.classes["a"].response_note
    assert d["classes"]["b"]["loss"] == pytest.approx(r.classes["b"].loss)


# ---------------------------------------------------------------- response times per class
def test_class_response_tagged_chain_equals_closed_form_under_tail():
    s = spec(classes=two([0.2, 0.7], a_ecn=0.8))
    closed = aqmchain.solve_stationary(model_of(s))
    tagged = aqmchain.solve_stationary(model_of(s), response="tagged")
    assert closed.response_method == "closed_form" and tagged.response_method == "tagged_chain"
    assert tagged.mean_response == pytest.approx(closed.mean_response, rel=1e-9)
    for name in ("a", "b"):
        c, t = closed.classes[name], tagged.classes[name]
        assert t.mean_response == pytest.approx(c.mean_response, rel=1e-9)
        assert t.var_response == pytest.approx(c.var_response, rel=1e-8)
        n = min(len(c.response_pmf), len(t.response_pmf))
        np.testing.assert_allclose(t.response_pmf[:n], c.response_pmf[:n], atol=1e-11)


@pytest.mark.parametrize("aqm", ["plain", "stateful"])
@pytest.mark.parametrize("policy", ["front", "random"])
def test_class_response_under_push_out_policies(policy, aqm):
    """Front / random drop with class-dependent ECN: the queue is class-blind, so both class
    chains lump exactly onto (n, avg, modulator) (and, with a stateful AQM, the count, p_max
    and cur_max_th) and give the same per-class response times; two identical classes weigh
    up to the single-class tagged chain; the simulator on the chain's grid agrees."""
    stateful = dict(spacing="count", weight="autored", dynamic_max_th=True, autored_p="queue", max_th_growth=0.3,
                    p_max=0.6, k=1, min_th=1, max_th=4)
    s = spec(buffer=6, policy=policy, classes=two([0.2, 0.7], a_ecn=0.8), **(stateful if aqm == "stateful" else {}))
    ra = aqmchain.solve_stationary(model_of(s), classes="approx")
    rx = aqmchain.solve_stationary(model_of(s), classes="exact")
    for name in ("a", "b"):
        assert ra.classes[name].response_available
        assert ra.classes[name].mean_response == pytest.approx(rx.classes[name].mean_response, rel=1e-9)
    # the ECN-capable class is marked where the other is dropped: it waits longer
    assert ra.classes["a"].mean_response != pytest.approx(ra.classes["b"].mean_response, rel=1e-3)
    same = dict(s, ecn=0.3, classes=None)
    plain = aqmchain.solve_stationary(model_of(same))
    # (the exact chain: per-class throughput depends on the FIFO order, which the
    # approximation does not keep when the shares depend on the modulator state)
    r = aqmchain.solve_stationary(model_of(dict(s, classes=two([0.2, 0.7], a_ecn=0.3, b_ecn=0.3))), classes="exact")
    assert r.mean_response == pytest.approx(plain.mean_response, rel=1e-9)
    assert r.pushed_out_prob == pytest.approx(plain.pushed_out_prob, rel=1e-9)
    served = {k: v.throughput for k, v in r.classes.items()}
    both = sum(served[k] * r.classes[k].mean_response for k in served)
    assert both == pytest.approx(plain.throughput * plain.mean_response, rel=1e-9)
    sim = aqmchain.simulate(model_of(s), slots=1_000_000, replications=4, discretised=True, seed=23)
    for name in ("a", "b"):
        c, m, hw = rx.classes[name].mean_response, sim.classes[name].mean_response, sim.classes[name].ci["mean_response"]
        assert abs(c - m) <= 4.5 * hw, (name, c, m, hw)


# ---------------------------------------------------------------- the exact chain against the simulator
SIM_CASES = {
    # FDynamicAutoRED: AutoRED's weight, dynamic max_th (raised under the queue reading) and
    # the flow comparison with unequal flows
    "fdynamic": dict(buffer=6, mu=0.35, min_th=1, max_th=4, weight="autored", autored_p="queue", dynamic_max_th=True,
                     max_th_growth=0.3, flow_compare=True,
                     classes=two([0.5, 0.5], a_flows=1, b_flows=2, b_flow_weights=[0.7, 0.3])),
    # drop spacing with modified RED's search
    "spacing_modified": dict(buffer=6, min_th=1, max_th=4, spacing="count", modified="random",
                             classes=two([0.3, 0.6], a_mice=True, b_ecn=0.3)),
    # bursty class mixes, class-dependent ECN, modified front drop with mice
    "modified_front": dict(buffer=6, modified="front", policy="front",
                           classes=two([0.2, 0.7], a_mice=True, b_ecn=0.5)),
    # flow comparison, unequal flows, random drop
    "flow_compare": dict(buffer=6, flow_compare=True, policy="random",
                         classes=two([0.5, 0.5], a_flows=1, b_flows=2, b_flow_weights=[0.7, 0.3])),
}


@pytest.mark.parametrize("case", list(SIM_CASES))
def test_exact_chain_against_discretised_simulator(case):
    """The simulator with the chain's grid has the exact chain's law: every per-class
    metric within a few of its 95 % half-widths (4.5 x: 16 comparisons per case)."""
    m = model_of(spec(**SIM_CASES[case]))
    ex = aqmchain.solve_stationary(m, classes="exact")
    sim = aqmchain.simulate(m, slots=400_000, replications=4, discretised=True, seed=7)
    assert_classes_match_simulation(ex, sim, ("a", "b"), 4 * 360_000)
    assert ex.loss == pytest.approx(sim.loss, abs=4.5 * sim.ci["loss"])
    for k in ("mean_count", "mean_max_th"):
        if getattr(ex, k) is not None:
            assert abs(getattr(ex, k) - getattr(sim, k)) <= 4.5 * sim.ci[k] + 1e-9, (k, getattr(ex, k), getattr(sim, k))
    if case == "fdynamic":
        assert ex.max_th_pmf[1] > 0.01  # the raise matters
