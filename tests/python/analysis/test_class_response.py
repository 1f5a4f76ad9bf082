"""Per-class response times under modified RED and the flow comparison (docs/classes.md): the
tagged-packet chain on the two-class chain against the plain policies where the two coincide,
against an exact tagged computation on the FIFO's actual content written independently in
class_tag_oracle.py, and that oracle against the simulator on the chain's grid; per-flow
metrics of the chain."""

import numpy as np
import pytest

import aqmchain
from class_tag_oracle import exact_class_response
from conftest import spec_to_doc

MMBP = {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.3, 0.7]], "arrival": [0.3, 0.9]}
BERN = {"kind": "bernoulli", "alpha": 0.6}


def model_of(spec: dict) -> "aqmchain.Model":
    doc = spec_to_doc(spec)
    for key in ("modified", "flow_compare"):
        if key in spec:
            doc["aqm"][key] = spec[key]
    doc["class"] = [dict(c) for c in spec["classes"]]
    return aqmchain.model_from_dict(doc)[0]


def spec(**kw):
    s = {"buffer": 5, "mu": 0.5, "w": 0.35, "k": 2, "mapping": "split", "update": "per_slot", "source": MMBP,
         "drop": "red", "min_th": 1, "max_th": 4, "p_max": 0.4}
    s.update(kw)
    return s


def two(a: dict, b: dict, share=(0.3, 0.6)):
    """Classes a and b; `share`: a's share per modulator state (one number: in every state)."""
    sa, sb = list(share), [1 - x for x in share]
    if len(share) == 1:
        sa, sb = sa[0], sb[0]
    return [{"name": "a", "share": sa, **a}, {"name": "b", "share": sb, **b}]


# ---------------------------------------------------------------- where the search is a drop policy
STATEFUL = dict(spacing="count", weight="autored", dynamic_max_th=True, autored_p="queue", max_th_growth=0.3,
                p_max=0.6, k=1)


@pytest.mark.parametrize("aqm", ["plain", "stateful"])
@pytest.mark.parametrize("variant", ["front", "random"])
def test_modified_red_without_protected_packets_is_the_plain_policy(variant, aqm):
    """No mice, no ECN: modified front (random) drop is front (random) drop draw for draw, and
    the queue is class-blind there, where the lumped tagged chain is exact: the tagged chain on
    the two-class chain must give the same per-class response laws (classes arriving in
    different modulator states see different queues), with a stateful AQM too (drop spacing,
    AutoRED's weight, dynamic max_th)."""
    s = spec(policy=variant, classes=two({}, {}), **(STATEFUL if aqm == "stateful" else {}))
    plain = aqmchain.solve_stationary(model_of(s))
    mod = aqmchain.solve_stationary(model_of(dict(s, modified=variant)))
    assert mod.response_method == "tagged_chain" and mod.response_available
    assert plain.classes["a"].mean_response != pytest.approx(plain.classes["b"].mean_response, rel=1e-3)
    for name in ("a", "b"):
        p, m = plain.classes[name], mod.classes[name]
        assert m.mean_response == pytest.approx(p.mean_response, rel=1e-9), name
        assert m.var_response == pytest.approx(p.var_response, rel=1e-8), name
        n = min(len(p.response_pmf), len(m.response_pmf))
        np.testing.assert_allclose(m.response_pmf[:n], p.response_pmf[:n], atol=1e-11)
    assert mod.mean_response == pytest.approx(plain.mean_response, rel=1e-9)
    assert mod.pushed_out_prob == pytest.approx(plain.pushed_out_prob, rel=1e-9)


def test_exact_oracle_equals_the_lumped_chain_where_that_is_exact():
    """The oracle itself, on a class-blind queue (front drop, ECN per class): the library's
    lumped tagged chain is exact there."""
    s = spec(policy="front", source=BERN, classes=two({"ecn": 0.7}, {}, share=(0.4,)))
    lib = aqmchain.solve_stationary(model_of(s))
    ex = exact_class_response(s)
    for ci, name in enumerate(("a", "b")):
        mean, var, pushed, _ = ex[ci]
        assert lib.classes[name].mean_response == pytest.approx(mean, rel=1e-9)
        assert lib.classes[name].var_response == pytest.approx(var, rel=1e-8)


# ---------------------------------------------------------------- the approximation against the exact tag
CASES = {
    "modified_front": dict(modified="front", policy="front", classes=two({"mice": True}, {"ecn": 0.5}, (0.3,))),
    "modified_random": dict(modified="random", policy="random", classes=two({"mice": True, "ecn": 0.3},
                                                                              {"ecn": 0.3}, (0.3,))),
    "flow_compare": dict(flow_compare=True, classes=two({"flows": 1}, {"flows": 2}, (0.5,))),
}
#: relative error of the random-order approximation's per-class mean response against the exact
#: tagged computation, measured on these cases (buffer 5, strong RED): at most 0.35 %; the bound
#: leaves room for nothing but the approximation (a wrong rule shifts the means by 10 % and more)
APPROX_BOUND = 0.02


#: small enough for the plain-Python oracle (a few thousand FIFO contents)
SMALL = dict(k=1, source=BERN)


@pytest.mark.parametrize("case", list(CASES))
def test_tagged_two_class_chain_against_exact_tag(case):
    s = spec(**SMALL, **CASES[case])
    r = aqmchain.solve_stationary(model_of(s))
    assert r.class_chain == "approx" and r.response_method == "tagged_chain"
    ex = exact_class_response(s)
    for ci, name in enumerate(("a", "b")):
        k = r.classes[name]
        assert k.response_available, k.response_note
        mean = ex[ci][0]
        assert abs(k.mean_response / mean - 1) < APPROX_BOUND, (name, k.mean_response, mean)
        # the tagged chain's pmf sums to its served probability and gives its mean
        pmf = np.asarray(k.response_pmf)
        assert np.sum(np.arange(len(pmf)) * pmf) / np.sum(pmf) == pytest.approx(k.mean_response, rel=1e-9)
    # the aggregate: the classes weighted by their served packets
    served = {n: r.classes[n].throughput for n in ("a", "b")}
    both = sum(served[n] * r.classes[n].mean_response for n in served) / sum(served.values())
    assert both == pytest.approx(r.mean_response, rel=2e-2)


def test_exact_tag_against_discretised_simulator():
    """The simulator on the chain's grid runs the slotted system whose tagged packet the oracle
    follows exactly: per-class mean response within 4.5 half-widths."""
    s = spec(**SMALL, **CASES["modified_front"])
    ex = exact_class_response(s)
    sim = aqmchain.simulate(model_of(s), slots=600_000, replications=4, discretised=True)
    for ci, name in enumerate(("a", "b")):
        c = sim.classes[name]
        assert abs(c.mean_response - ex[ci][0]) <= 4.5 * c.ci["mean_response"], (name, c.mean_response, ex[ci][0])


# ---------------------------------------------------------------- per-flow metrics
def test_chain_flows_and_fairness():
    s = spec(flow_compare=True, classes=two({"flows": 1}, {"flows": 3}, share=(0.5, 0.5)))
    r = aqmchain.solve_stationary(model_of(s))
    assert len(r.flows) == 4 and [f["class"] for f in r.flows] == ["a", "b", "b", "b"]
    for name, F in (("a", 1), ("b", 3)):
        mine = [f for f in r.flows if f["class"] == name]
        assert sum(f["throughput"] for f in mine) == pytest.approx(r.classes[name].throughput, rel=1e-12)
        assert all(f["loss"] == r.classes[name].loss for f in mine)
    x = np.array([f["throughput"] for f in r.flows])
    assert r.fairness == pytest.approx(x.sum() ** 2 / (4 * (x * x).sum()), rel=1e-12)
    d = r.to_dict()
    assert len(d["flows"]) == 4 and d["fairness"] == pytest.approx(r.fairness)
    # without the comparison nothing reads a flow: a flow of weight p has p of its class
    r2 = aqmchain.solve_stationary(model_of(dict(s, flow_compare=False, policy="front",
                                                 classes=two({}, {"flows": 2, "flow_weights": [0.8, 0.2]}))))
    b = [f for f in r2.flows if f["class"] == "b"]
    assert b[0]["throughput"] == pytest.approx(0.8 * r2.classes["b"].throughput, rel=1e-12)
    # unequal flows under the comparison: refused with the reason
    r3 = aqmchain.solve_stationary(model_of(dict(s, classes=two({}, {"flows": 2, "flow_weights": [0.8, 0.2]}))))
    assert r3.flows is None and r3.fairness is None and "flow_weights" in r3.flows_note


def test_a_tagged_chain_stopped_by_max_steps_says_so():
    """The tagged chain of the two-class chain (modified RED) stopped after 3 steps, far from
    absorbed: the response times carry the note and the mass left, not a silent answer."""
    s = spec(policy="front", modified="front", classes=two({"mice": True}, {"ecn": 0.5}))
    r = aqmchain.solve_stationary(model_of(s), response="none")
    chain = r.chain
    m = aqmchain._core.compute_metrics(chain, np.asarray(r.pi), "auto", max_steps=3)
    assert "stopped after 3 steps" in m.response_note
    assert m.response_truncated > 1e-3
