"""REDwM beyond k = 2, m = 1 (the transposed direct form with r auxiliary sums) and REDwM
with traffic classes (docs/redwm.md, docs/classes.md): the chains against dense oracles
written from the docs' text (oracle.RedwmCells, class_oracle), against the simulator's
discretised mode (the chain is its exact law), and the named refusals."""

import copy

import numpy as np
import pytest

import aqmchain
from conftest import construction_error
from class_oracle import assert_classes_match_simulation, class_chain, two
from oracle import SOURCES, DROPS, redwm_cells_reference_chain, redwm_reference_chain

# ------------------------------------------------------------------ any order: the dense oracle

ORDERS = {
    "k3_m0": {"a": [0.5, 0.15, 0.1], "b": [0.25]},                  # r = 2 by a_3
    "k1_m2": {"a": [0.6], "b": [0.2, 0.12, 0.08]},                  # r = 2 by b_2
    "k3_m2": {"a": [0.45, 0.1, 0.05], "b": [0.2, 0.12, 0.08]},      # r = 2
    "k4_m1": {"a": [0.5, 0.1, 0.05, 0.05], "b": [0.2, 0.1]},        # r = 3
}


def doc_of(spec: dict) -> dict:
    aqm = {k: v for k, v in spec.items() if k in ("drop", "min_th", "max_th", "p_max", "update", "ecn", "policy",
                                                   "triple", "a", "b")}
    aqm["filter"] = "redwm"
    grid = {"k": spec.get("k", 4), "mapping": spec["mapping"], "refine": "none"}
    for key in ("s_k", "s_points"):
        if key in spec:
            grid[key] = spec[key]
    doc = {"model": {"buffer": spec["buffer"]}, "source": dict(spec["source"]), "service": {"mu": spec["mu"]},
           "aqm": aqm, "grid": grid}
    for key in ("modified", "flow_compare"):
        if key in spec:
            doc["aqm"][key] = spec[key]
    if spec.get("classes"):
        doc["class"] = [dict(c) for c in spec["classes"]]
    return doc


def model_of(spec: dict) -> aqmchain.Model:
    return aqmchain.model_from_dict(doc_of(spec))[0]


def s_labels(r: int) -> list[str]:
    return ["s_index"] + [f"s{i}_index" for i in range(2, r + 1)]


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("source,update,mapping", [("bernoulli", "per_slot", "split"),
                                                   ("mmbp", "per_arrival", "split"),
                                                   ("bernoulli", "per_slot", "flags")])
def test_any_order_matrix_equals_dense_oracle(order, source, update, mapping):
    spec = {"buffer": 6 if order == "k4_m1" else 8, "mu": 0.5, "k": 1, "s_k": 2, "mapping": mapping, "update": update,
            "source": SOURCES[source], **DROPS["red"], **ORDERS[order]}
    states, P_ref, F = redwm_cells_reference_chain(spec)
    model = model_of(spec)
    chain = aqmchain.build_chain(model)
    lab = aqmchain.state_labels(chain)
    names = ["level", "avg_index"] + s_labels(F.r) + ["modulator"]
    assert [c for c in chain.labels if c.startswith("s")] == s_labels(F.r)
    built = list(zip(*(lab[c].tolist() for c in names)))
    assert built == states, "reachable state sets differ"
    P = aqmchain.transition_matrix(chain).toarray()
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=construction_error(P_ref))
    assert chain.nnz == np.count_nonzero(P_ref)
    assert F.r >= 2 and all(len(g) >= 2 for g in F.grids)  # every sum moves on a grid of its own
    np.testing.assert_array_equal(aqmchain.redwm_s_grid(model), F.grids[0])


def test_order_two_one_is_the_one_sum_chain_of_the_oracle_and_the_general_form():
    """k <= 2, m <= 1: the general oracle, the one-sum oracle and the chain agree entry for entry."""
    spec = {"buffer": 12, "mu": 0.55, "k": 2, "mapping": "split", "update": "per_slot", "source": SOURCES["mmbp"],
            "triple": [0.25, 0.15, 0.1], **DROPS["gentle_red"]}
    st1, P1 = redwm_reference_chain(spec)
    st2, P2, F = redwm_cells_reference_chain(spec)
    assert F.r == 1 and st1 == st2
    np.testing.assert_allclose(P1, P2, rtol=0, atol=construction_error(P1))  # the same products, in another order
    chain = aqmchain.build_chain(model_of(spec))
    assert [c for c in chain.labels if c.startswith("s")] == ["s_index"]
    np.testing.assert_allclose(aqmchain.transition_matrix(chain).toarray(), P1, rtol=0, atol=construction_error(P1))


@pytest.mark.parametrize("order,update,policy", [("k3_m2", "per_slot", "tail"), ("k4_m1", "per_arrival", "front")])
def test_discretised_simulation_has_the_any_order_chains_law(order, update, policy):
    spec = {"buffer": 12, "mu": 0.5, "k": 2 if order == "k3_m2" else 1, "mapping": "split", "update": update,
            "policy": policy,
            "source": SOURCES["mmbp"], "drop": "red", "min_th": 3, "max_th": 10, "p_max": 0.3, **ORDERS[order]}
    model = model_of(spec)
    chain = aqmchain.solve_stationary(model, method="multilevel")  # residual ~1e-12 (direct LU fills in on r = 3)
    sim = aqmchain.simulate(model, slots=1_000_000, replications=4, discretised=True, seed=31)
    for name in ("mean_queue", "var_queue", "loss", "mean_avg", "mean_response", "throughput"):
        a, s, hw = getattr(chain, name), getattr(sim, name), sim.ci[name]
        assert abs(s - a) < 4.5 * hw / 1.96, (name, a, s, hw)


def test_orders_beyond_the_chain_are_refused_by_name():
    b = [0.05] * 10 + [0.2]  # m = 10: r = 10 sums
    doc = {"model": {"buffer": 10}, "source": {"kind": "bernoulli", "alpha": 0.5}, "service": {"mu": 0.5},
           "aqm": {"drop": "red", "min_th": 2, "max_th": 8, "p_max": 0.1, "filter": "redwm", "a": [0.3], "b": b}}
    model = aqmchain.model_from_dict(doc)[0]
    with pytest.raises(aqmchain.ModelError, match=r"aqm\.b\[10\].*r = max\(k, m \+ 1\) - 1 <= 8.*r = 10.*0\.2") as exc:
        aqmchain.build_chain(model)
    assert exc.value.param == "aqm.b[10]"
    with pytest.raises(aqmchain.ModelError, match=r"aqm\.b\[10\]"):
        aqmchain.simulate(model, slots=10000, replications=2, discretised=True)
    aqmchain.simulate(model, slots=10000, replications=2)  # continuous A takes any order


def test_s_grids_product_guard_names_the_step():
    doc = {"model": {"buffer": 1000}, "source": {"kind": "bernoulli", "alpha": 0.5}, "service": {"mu": 0.5},
           "aqm": {"drop": "red", "min_th": 200, "max_th": 800, "p_max": 0.1, "filter": "redwm",
                   "a": [0.2] + [0.05] * 8, "b": [0.2, 0.1, 0.1]},
           "grid": {"k": 1, "refine": "none", "s_k": 8}}
    model = aqmchain.model_from_dict(doc)[0]
    with pytest.raises(aqmchain.ModelError, match=r"r = 8 auxiliary sums.*4801 x 3601.*above 2\^62.*grid\.s_k") as exc:
        aqmchain.build_chain(model)
    assert exc.value.param == "grid.s_k"


# ------------------------------------------------------------------ classes with REDwM

MMBP = {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.3, 0.7]], "arrival": [0.25, 0.85]}
RED = {"drop": "red", "min_th": 2, "max_th": 6, "p_max": 0.4}



def cspec(**kw):
    s = {"buffer": 7, "mu": 0.5, "k": 1, "s_k": 2, "mapping": "split", "update": "per_slot", "source": MMBP,
         "filter": "redwm", "triple": [0.3, 0.15, 0.1], **RED}
    s.update(kw)
    return s


CLASS_CASES = {
    "tail": dict(classes=two([0.2, 0.7])),
    "front_ecn": dict(policy="front", classes=two([0.2, 0.7], a_ecn=0.6)),
    "modified_front": dict(modified="front", classes=two([0.3, 0.6], a_mice=True, b_ecn=0.25)),
    "modified_random_order3": dict(buffer=5, modified="random", a=[0.4, 0.1, 0.1], b=[0.25, 0.15], triple=None,
                                   classes=two([0.3, 0.6], a_mice=True, a_ecn=0.2, b_ecn=0.4)),
    "flow_compare": dict(flow_compare=True, classes=two([0.4, 0.8], b_flows=3, b_flow_weights=[0.6, 0.3, 0.1])),
}


def clean(s: dict) -> dict:
    return {k: v for k, v in s.items() if v is not None}


@pytest.mark.parametrize("case", list(CLASS_CASES))
def test_two_class_redwm_matrix_equals_dense_oracle(case):
    s = clean(cspec(**CLASS_CASES[case]))
    states, P_ref = class_chain(s)
    r = len(states[0][1]) - 1
    flat = [(st[0], *st[1], *st[2:]) for st in states]
    chain = aqmchain.build_chain(model_of(s))
    lab = aqmchain.state_labels(chain)
    names = ["level", "avg_index"] + s_labels(r) + ["modulator", "class2", "head_class"]
    built = list(zip(*(lab[k].tolist() for k in names)))
    order = sorted(range(chain.n), key=built.__getitem__)
    assert [built[i] for i in order] == flat, "reachable state sets differ"
    P = aqmchain.transition_matrix(chain).toarray()[np.ix_(order, order)]
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=construction_error(P_ref))
    assert lab["s_index"].max() > 1  # s moves


def test_identical_classes_with_redwm_split_the_single_class_chain():
    """Two classes that differ only in name: the class chain lumps onto the plain REDwM chain
    (its stationary law summed over the class contents is the plain chain's)."""
    base = cspec(classes=two(0.4), buffer=10, k=2)
    plain = {k: v for k, v in base.items() if k != "classes"}
    rc = aqmchain.solve_stationary(model_of(base), method="direct")
    rp = aqmchain.solve_stationary(model_of(plain), method="direct")
    for name in ("mean_queue", "loss", "mean_avg", "throughput"):
        assert getattr(rc, name) == pytest.approx(getattr(rp, name), rel=1e-9), name
    assert rc.classes["a"].arrival_rate == pytest.approx(0.4 * rp.arrival_rate, rel=1e-9)


SIM_CASES = {
    "modified_front": dict(buffer=6, modified="front", policy="front", classes=two([0.2, 0.7], a_mice=True, b_ecn=0.5)),
    "flow_compare_order3": dict(buffer=5, flow_compare=True, policy="random", a=[0.4, 0.1, 0.1], b=[0.25, 0.15],
                                triple=None, classes=two([0.5, 0.5], a_flows=1, b_flows=2, b_flow_weights=[0.7, 0.3])),
}


@pytest.mark.parametrize("case", list(SIM_CASES))
def test_exact_class_chain_with_redwm_against_discretised_simulator(case):
    """The simulator's discretised mode follows the chain's grids for A and the s sums: the
    exact class chain is its law; every per-class metric within 4.5 of its 95 % half-widths."""
    m = model_of(clean(cspec(**SIM_CASES[case])))
    ex = aqmchain.solve_stationary(m, classes="exact")
    sim = aqmchain.simulate(m, slots=400_000, replications=4, discretised=True, seed=9)
    assert_classes_match_simulation(ex, sim, ("a", "b"), 4 * 360_000)
    for k in ("mean_queue", "loss", "mean_avg"):
        assert abs(getattr(ex, k) - getattr(sim, k)) <= 4.5 * sim.ci[k] / 1.96 + 1e-12, k


def test_classes_with_redwm_continuous_a_simulates():
    """The class-aware loop with REDwM's continuous A (any order) runs and keeps its per-class
    books: arrivals split by the shares, per-class losses summing to the total."""
    m = model_of(clean(cspec(buffer=12, a=[0.5, 0.1, 0.1], b=[0.2, 0.1], triple=None, modified="front",
                             classes=two(0.3, a_mice=True))))
    sim = aqmchain.simulate(m, slots=200_000, replications=2, seed=5)
    total = sum(sim.classes[c].arrival_rate for c in "ab")
    assert total == pytest.approx(sim.arrival_rate, rel=1e-12)
    assert sim.classes["a"].loss_aqm == 0.0 or sim.classes["a"].loss_aqm < sim.classes["b"].loss_aqm


@pytest.mark.parametrize("policy", ["front", "random"])
def test_class_response_times_with_redwm_under_push_out(policy):
    """Front / random drop with class-dependent ECN and REDwM of order (3, 1): the queue is
    class-blind, so both class chains lump exactly onto (n, A, the sums, modulator); they give
    the same per-class response times, the per-class sojourns weigh up to the single-class
    tagged chain (Little), and the simulator on the chain's grids agrees."""
    s = clean(cspec(buffer=6, policy=policy, a=[0.4, 0.1, 0.1], b=[0.25, 0.15], triple=None,
                    classes=two([0.2, 0.7], a_ecn=0.8)))
    ra = aqmchain.solve_stationary(model_of(s), classes="approx")
    rx = aqmchain.solve_stationary(model_of(s), classes="exact")
    for name in ("a", "b"):
        assert ra.classes[name].response_available
        assert ra.classes[name].mean_response == pytest.approx(rx.classes[name].mean_response, rel=1e-9)
    assert "s2_index" in ra.state_labels()
    same = dict(s, ecn=0.3, classes=None)
    plain = aqmchain.solve_stationary(model_of(same))
    r = aqmchain.solve_stationary(model_of(dict(s, classes=two([0.2, 0.7], a_ecn=0.3, b_ecn=0.3))), classes="exact")
    served = {k: v.throughput for k, v in r.classes.items()}
    both = sum(served[k] * r.classes[k].mean_response for k in served)
    assert both == pytest.approx(plain.throughput * plain.mean_response, rel=1e-9)
    sim = aqmchain.simulate(model_of(s), slots=1_000_000, replications=4, discretised=True, seed=29)
    for name in ("a", "b"):
        c, m, hw = rx.classes[name].mean_response, sim.classes[name].mean_response, sim.classes[name].ci["mean_response"]
        assert abs(c - m) <= 4.5 * hw, (name, c, m, hw)


def test_scenario_with_classes_and_redwm_transient_against_simulation():
    """Scenario phases of a class model with REDwM: the transient chain and the ensemble
    simulator on the chain's grids agree at the phase ends."""
    m = model_of(clean(cspec(classes=two([0.2, 0.7]), buffer=8, k=2)))
    sc = aqmchain.make_scenario(m, [{"slots": 200, "mu": 0.6}, {"slots": 200, "mu": 0.3}])
    res = aqmchain.solve_transient(sc, [200, 400])
    sim = aqmchain.simulate_scenario(sc, [200, 400], replications=1000, seed=3, discretised=True)
    for k in range(2):
        assert abs(sim.mean_queue[k] - res.mean_queue[k]) < 4.5 * sim.mean_queue_hw[k] / 1.96
    assert res.mean_queue[1] > 3 * res.mean_queue[0]  # the load step shows
