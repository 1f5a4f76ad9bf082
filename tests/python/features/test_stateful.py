"""Stateful AQM (docs/stateful-aqm.md): drop spacing (count, wait) and adaptive RED.

The built P is compared entry by entry with a dense matrix written independently from the
rules (oracle.stateful_chain); degenerate settings give the plain RED chain exactly; the
chain's law is compared with the simulator following the chain's grids; bad input raises
errors that name the key.
"""

import copy

import numpy as np
import pytest

import aqmchain
from conftest import BASE_DOC, model_of, construction_error, stepping_error, summation_error
from oracle import reference_chain, stateful_chain
from conftest import assert_tagged_equals_closed_form

BERN = {"kind": "bernoulli", "alpha": 0.45}
MMBP = {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.25, 0.75]], "arrival": [0.2, 0.9]}
RED = {"drop": "red", "min_th": 2, "max_th": 6, "p_max": 0.3}


def labels_of(chain):
    lab = aqmchain.state_labels(chain)
    n = len(lab["level"])
    zero = np.zeros(n, dtype=int)
    cols = [lab["level"], lab["avg_index"], lab["modulator"], lab.get("count", zero), lab.get("pmax_index", zero),
            lab.get("maxth_index", zero), lab.get("phase", zero)]
    return list(zip(*(c.tolist() for c in cols)))


def compare(spec):
    states, P_ref, info = stateful_chain(spec)
    model = model_of(spec)
    chain = aqmchain.build_chain(model)
    assert labels_of(chain) == states, "reachable state sets differ"
    P = aqmchain.transition_matrix(chain).toarray()
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=construction_error(P_ref))
    assert chain.nnz == np.count_nonzero(P_ref)
    lay = aqmchain.stateful_info(model)
    assert lay["count_cap"] == info["count_cap"]
    # the p_max grid: start + k steps, accumulated in another order by the oracle
    values = np.asarray(info["p_max_values"])
    np.testing.assert_allclose(lay["p_max_values"], values, rtol=0,
                               atol=summation_error(len(values)) * np.abs(values).max())
    return chain


@pytest.mark.parametrize("spacing", ["count", "wait"])
@pytest.mark.parametrize("source", ["bernoulli", "mmbp"])
@pytest.mark.parametrize("update,ecn", [("per_slot", 0.0), ("per_arrival", 0.3)])
def test_spacing_matrix_equals_rules(spacing, source, update, ecn):
    spec = {"buffer": 12, "mu": 0.55, "w": 0.3, "k": 2, "mapping": "split", "update": update, "ecn": ecn,
            "source": BERN if source == "bernoulli" else MMBP, **RED, "spacing": spacing}
    chain = compare(spec)
    assert "count" in aqmchain.state_labels(chain)


@pytest.mark.parametrize("clock", ["geometric", "exact"])
@pytest.mark.parametrize("update", ["per_slot", "per_arrival"])
def test_adaptive_matrix_equals_rules(clock, update):
    spec = {"buffer": 8, "mu": 0.5, "w": 0.3, "k": 1, "mapping": "split", "update": update, "source": BERN,
            **RED, "adaptive": True, "interval": 3, "clock": clock, "p_max_step": 0.1, "increment": 0.05}
    compare(spec)


def test_spacing_and_adaptive_together():
    spec = {"buffer": 5, "mu": 0.5, "w": 0.4, "k": 1, "mapping": "split", "source": MMBP,
            "drop": "gentle_red", "min_th": 1, "max_th": 3, "p_max": 0.2, "spacing": "count",
            "adaptive": True, "interval": 4, "p_max_step": 0.1, "p_max_low": 0.2, "decrease": 0.5,
            "increment": 0.1, "ecn": 0.2}
    compare(spec)


# ---------------------------------------------------------------- degenerate settings
def plain_and(spec, **extra):
    plain = aqmchain.build_chain(model_of(spec))
    other = aqmchain.build_chain(model_of({**spec, **extra}))
    P0 = aqmchain.transition_matrix(plain)
    P1 = aqmchain.transition_matrix(other)
    assert P0.shape == P1.shape
    assert (P0 != P1).nnz == 0, "not exactly the plain chain"
    return plain, other


def test_spacing_without_early_drops_is_plain():
    # p_b = 0 wherever avg goes (min_th above the buffer's reach) and p_b = 0 everywhere
    spec = {"buffer": 12, "mu": 0.6, "w": 0.2, "k": 2, "mapping": "split", "source": BERN, "drop": "none"}
    for s in ("count", "wait"):
        plain_and(spec, spacing=s)


def test_adaptive_without_moves_is_plain():
    spec = {"buffer": 12, "mu": 0.5, "w": 0.2, "k": 2, "mapping": "split", "source": MMBP, **RED}
    for clock in ("geometric", "exact"):
        _, other = plain_and(spec, adaptive=True, increment=0.0, decrease=1.0, interval=3, clock=clock)
        if clock == "geometric":
            assert aqmchain.stateful_info(other.model)["p_max_values"] == [0.3]
    # a clock that fires but moves that never apply (avg never above max_th = N, p_max below
    # p_max_low): a p_max grid of many points of which only the start is reached
    _, other = plain_and({**spec, "p_max": 0.005, "max_th": 12}, adaptive=True, target_hi=1.0, interval=2)
    assert len(aqmchain.stateful_info(other.model)["p_max_values"]) > 100


def test_spacing_stationary_count_pmf():
    doc = copy.deepcopy(BASE_DOC)
    doc["aqm"].update(spacing="count", p_max=0.2)
    model = aqmchain.model_from_dict(doc)[0]
    r = aqmchain.solve_stationary(model)
    pmf = r.count_pmf
    assert abs(sum(pmf) - 1) < 1e-12 and len(pmf) == aqmchain.stateful_info(model)["count_cap"] + 2
    # spacing makes drops more regular than geometric: loss close to plain RED's, not equal
    plain = aqmchain.solve_stationary(aqmchain.model_from_dict(BASE_DOC | {"aqm": {**BASE_DOC["aqm"], "p_max": 0.2}})[0])
    assert r.loss_aqm != plain.loss_aqm
    assert r.mean_count == pytest.approx(float(np.dot(np.arange(-1, len(pmf) - 1), pmf)), abs=1e-12)


# ---------------------------------------------------------------- chain against the simulator
def within(chain_value, sim, name, k=4.0):
    hw = sim.ci[name]
    assert abs(chain_value - getattr(sim, name)) <= k * hw + 1e-9, (name, chain_value, getattr(sim, name), hw)


SIM_DOC = {"model": {"buffer": 20}, "source": {"kind": "bernoulli", "alpha": 0.5}, "service": {"mu": 0.5},
           "aqm": {"drop": "red", "min_th": 4, "max_th": 12, "p_max": 0.2, "w": 0.2},
           "grid": {"k": 2, "refine": "none"}}


@pytest.mark.parametrize("aqm", [{"spacing": "count"}, {"spacing": "wait", "ecn": 0.3},
                                 {"adaptive": True, "interval": 20, "p_max_step": 0.02},
                                 {"adaptive": True, "interval": 20, "p_max_step": 0.02, "clock": "exact"}])
def test_chain_matches_discretised_simulation(aqm):
    doc = copy.deepcopy(SIM_DOC)
    doc["aqm"].update(aqm)
    model = aqmchain.model_from_dict(doc)[0]
    r = aqmchain.solve_stationary(model)
    sim = aqmchain.simulate(model, slots=400_000, replications=2, seed=7, discretised=True, threads=1)
    for name in ("mean_queue", "var_queue", "loss_aqm", "mean_response"):
        within(getattr(r, name), sim, name)
    if "spacing" in aqm:
        within(r.mean_count, sim, "mean_count")
    else:
        within(r.mean_p_max, sim, "mean_p_max")
        assert sim.mean_p_max != pytest.approx(0.2, abs=1e-3)  # p_max does move


@pytest.mark.parametrize("aqm", [{"spacing": "count"}, {"adaptive": True, "interval": 20, "p_max_step": 0.02},
                                 {"weight": "autored", "dynamic_max_th": True, "autored_p": "queue",
                                  "max_th_growth": 0.3}])
def test_chain_matches_continuous_simulation_within_grid_error(aqm):
    """The real algorithm (avg and p_max exact) against the chain: its grid error estimate
    (the chain on the grids of 1, 2 and 4 times the step, extrapolated to step 0) must
    cover the simulator's value within the simulator's noise."""
    doc = copy.deepcopy(SIM_DOC)
    doc["aqm"].update(aqm)
    doc["grid"]["k"] = 4
    model = aqmchain.model_from_dict(doc)[0]
    r = aqmchain.solve_stationary(model, error_estimate=True)
    sim = aqmchain.simulate(model, slots=1_000_000, replications=4, seed=9, discretised=False)
    for name in ("mean_queue", "var_queue", "loss_aqm"):
        e = r.error_estimate[name]
        assert abs(getattr(sim, name) - e.extrapolated) <= e.error + 4 * sim.ci[name], (name, e, getattr(sim, name))


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("key,value,param", [
    ("spacing", "often", "aqm.spacing"),
    ("count_max", 0, "aqm.count_max"),
    ("clock", "exact", "aqm.clock"),  # only with adaptive = true
])
def test_bad_stateful_keys(key, value, param):
    doc = copy.deepcopy(BASE_DOC)
    doc["aqm"][key] = value
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == param


@pytest.mark.parametrize("extra,param", [
    ({"decrease": 0.0}, "aqm.decrease"),
    ({"interval": 0}, "aqm.interval"),
    ({"target_lo": 0.7}, "aqm.target_hi"),
    ({"increment": -0.1}, "aqm.increment"),
    ({"clock": "sometimes"}, "aqm.clock"),
])
def test_bad_adaptive_values(extra, param):
    doc = copy.deepcopy(BASE_DOC)
    doc["aqm"].update(adaptive=True, **extra)
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == param


def test_count_bound_is_loose_and_not_refused_on_it():
    # the count stays below about 1 / p_b(avg): its product bound is loose, so a build whose
    # bound exceeds the budget explores and succeeds when the reachable states fit
    doc = copy.deepcopy(SIM_DOC)
    doc["aqm"].update(spacing="count", p_max=0.02)
    model = aqmchain.model_from_dict(doc)[0]
    est = aqmchain.estimate_chain(model)
    assert not est["bound_tight"]
    limit = est["bytes"] / 4 / 2**30
    chain = aqmchain.build_chain(model, memory_limit_gb=limit)
    assert chain.n < est["reachable_bound"] / 4
    # a plain model's bound is tight: refused before exploring
    plain = aqmchain.model_from_dict(SIM_DOC)[0]
    pest = aqmchain.estimate_chain(plain)
    assert pest["bound_tight"]
    with pytest.raises(aqmchain.StateSpaceTooLarge):
        aqmchain.build_chain(plain, memory_limit_gb=pest["bytes"] / 4 / 2**30)
    # and a count whose reachable states do not fit is refused during the exploration
    with pytest.raises(aqmchain.StateSpaceTooLarge, match="reachable states"):
        aqmchain.build_chain(model, memory_limit_gb=chain.n * 50 / 2**30)


def test_adaptive_bound_is_loose_and_the_exploration_measures_the_need():
    """p_max's points are reached only where avg lives: adaptive RED's product bound is
    loose, so the builder explores and checks the budget against the transitions it
    actually emits (not the bound's worst case)."""
    doc = copy.deepcopy(SIM_DOC)
    doc["aqm"].update(adaptive=True, interval=50, p_max_step=0.01)
    model = aqmchain.model_from_dict(doc)[0]
    est = aqmchain.estimate_chain(model)
    assert not est["bound_tight"]
    chain = aqmchain.build_chain(model, memory_limit_gb=est["bytes"] / 8 / 2**30)
    assert chain.n < est["reachable_bound"] / 2
    # the CSR matrix alone (a column index and a value per nonzero) is a lower bound of the
    # need: a quarter of it must be refused, during the exploration
    with pytest.raises(aqmchain.StateSpaceTooLarge, match="reachable states"):
        aqmchain.build_chain(model, memory_limit_gb=chain.nnz * 12 / 4 / 2**30)


def test_count_cap_above_count_max():
    doc = copy.deepcopy(BASE_DOC)
    doc["aqm"].update(spacing="count", p_max=0.001, count_max=50)
    model = aqmchain.model_from_dict(doc)[0]
    with pytest.raises(aqmchain.ModelError, match=r"aqm.count_max.*p_b = ") as e:
        aqmchain.build_chain(model)
    assert e.value.param == "aqm.count_max"


def test_exact_clock_above_budget():
    doc = copy.deepcopy(BASE_DOC)
    doc["aqm"].update(adaptive=True, clock="exact")  # interval 5000
    model = aqmchain.model_from_dict(doc)[0]
    with pytest.raises(aqmchain.ModelError, match="geometric") as e:
        aqmchain.build_chain(model)
    assert e.value.param == "aqm.max_clock_states"


def test_adaptive_needs_p_max():
    doc = copy.deepcopy(BASE_DOC)
    doc["aqm"] = {"drop": "dsred", "k_l": 3, "k_h": 10, "gamma": 0.4, "adaptive": True}
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "aqm.adaptive"


def test_continuous_time_refused():
    doc = {"model": {"buffer": 10, "time": "continuous"}, "source": {"kind": "poisson", "rate": 0.5},
           "service": {"kind": "exponential", "mu": 1.0},
           "aqm": {"drop": "red", "min_th": 2, "max_th": 8, "p_max": 0.1, "w": 0.1, "spacing": "count"},
           "grid": {"k": 2, "refine": "none"}}
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "aqm.spacing"


def test_model_round_trip():
    doc = copy.deepcopy(BASE_DOC)
    doc["aqm"].update(spacing="wait", adaptive=True, interval=100, clock="exact", p_max_step=0.01)
    model = aqmchain.model_from_dict(doc)[0]
    d = aqmchain.model_to_dict(model)
    assert d["aqm"]["spacing"] == "wait" and d["aqm"]["interval"] == 100 and d["aqm"]["clock"] == "exact"
    again = aqmchain.model_from_dict(d)[0]
    assert aqmchain.model_to_dict(again) == d


# ---------------------------------------------------------------- AutoRED's dynamic weight
@pytest.mark.parametrize("reading", ["drop", "queue"])
@pytest.mark.parametrize("source", ["bernoulli", "mmbp"])
def test_autored_matrix_equals_rules(reading, source):
    # w = 0.01 is the floor; P (1 - P) J / N reaches ~0.2 at N = 12
    spec = {"buffer": 12, "mu": 0.5, "w": 0.01, "k": 2, "mapping": "split", "update": "per_slot",
            "source": BERN if source == "bernoulli" else MMBP, **RED, "weight": "autored", "autored_p": reading}
    states, P_ref = reference_chain(spec)
    chain = aqmchain.build_chain(model_of(spec))
    lab = aqmchain.state_labels(chain)
    assert list(zip(lab["level"].tolist(), lab["avg_index"].tolist(), lab["modulator"].tolist())) == states
    np.testing.assert_allclose(aqmchain.transition_matrix(chain).toarray(), P_ref, rtol=0,
                               atol=construction_error(P_ref))
    static = {k: v for k, v in spec.items() if k not in ("weight", "autored_p")}
    plain = aqmchain.build_chain(model_of(static))
    assert chain.n != plain.n or (aqmchain.transition_matrix(chain) != aqmchain.transition_matrix(plain)).nnz > 0


def test_autored_below_its_floor_is_plain():
    # P (1 - P) 2x / ln x / N <= 0.25 * 12.4 / 12 < 0.3 = w at N = 12: the weight is w throughout
    spec = {"buffer": 12, "mu": 0.5, "w": 0.3, "k": 2, "mapping": "split", "source": MMBP, **RED}
    plain_and(spec, weight="autored")
    plain_and(spec, weight="autored", autored_p="queue")


@pytest.mark.parametrize("reading", ["drop", "queue"])
def test_autored_chain_matches_discretised_simulation(reading):
    doc = copy.deepcopy(SIM_DOC)
    doc["aqm"].update(w=0.02, weight="autored", autored_p=reading)
    model = aqmchain.model_from_dict(doc)[0]
    r = aqmchain.solve_stationary(model)
    sim = aqmchain.simulate(model, slots=400_000, replications=2, seed=11, discretised=True, threads=1)
    for name in ("mean_queue", "var_queue", "loss_aqm", "mean_avg"):
        within(getattr(r, name), sim, name)


def test_autored_bad_input():
    doc = copy.deepcopy(BASE_DOC)
    doc["aqm"].update(weight="sometimes")
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "aqm.weight"
    doc["aqm"].update(weight="static", autored_p="queue")
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "aqm.autored_p"
    doc["aqm"].update(weight="autored", autored_p="drop", adaptive=True)
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "aqm.weight"


# ---------------------------------------------------------------- dynamic max_th
@pytest.mark.parametrize("reading", ["drop", "queue"])
@pytest.mark.parametrize("spacing", ["none", "count"])
def test_dynamic_max_th_matrix_equals_rules(reading, spacing):
    # p_max 0.7 so that P_t = p(avg) reaches the band [0.55, 0.88) below max_th
    spec = {"buffer": 12, "mu": 0.5, "w": 0.3, "k": 2, "mapping": "split", "source": MMBP,
            "drop": "red", "min_th": 2, "max_th": 6, "p_max": 0.7, "dynamic_max_th": True,
            "max_th_growth": 0.5, "autored_p": reading, "spacing": spacing}
    chain = compare(spec)
    lab = aqmchain.state_labels(chain)
    assert set(lab["maxth_index"].tolist()) == {0, 1}


@pytest.mark.parametrize("reading", ["drop", "queue"])
def test_dynamic_max_th_with_autored_matrix_equals_rules(reading):
    # FDynamicAutoRED's AQM without its flow comparison: AutoRED's weight (floor 0.01) reads
    # P_t with the cur_max_th the slot starts with
    spec = {"buffer": 12, "mu": 0.5, "w": 0.01, "k": 2, "mapping": "split", "source": MMBP,
            "drop": "red", "min_th": 2, "max_th": 6, "p_max": 0.7, "dynamic_max_th": True,
            "max_th_growth": 0.5, "autored_p": reading, "weight": "autored"}
    chain = compare(spec)
    assert set(aqmchain.state_labels(chain)["maxth_index"].tolist()) == {0, 1}
    # the weight is not the floor everywhere, and the raised max_th changes it
    static = {k: v for k, v in spec.items() if k != "weight"}
    P, Ps = aqmchain.transition_matrix(chain), aqmchain.transition_matrix(aqmchain.build_chain(model_of(static)))
    assert P.shape != Ps.shape or (P != Ps).nnz > 0


def test_dynamic_max_th_with_autored_matches_discretised_simulation():
    doc = copy.deepcopy(SIM_DOC)
    doc["aqm"].update(p_max=0.7, w=0.02, dynamic_max_th=True, max_th_growth=0.4, weight="autored")
    model = aqmchain.model_from_dict(doc)[0]
    r = aqmchain.solve_stationary(model)
    sim = aqmchain.simulate(model, slots=400_000, replications=2, seed=17, discretised=True, threads=1)
    for name in ("mean_queue", "var_queue", "loss_aqm", "mean_max_th", "mean_avg"):
        within(getattr(r, name), sim, name)


def test_dynamic_max_th_never_triggered_is_plain():
    # P_t = p(avg) <= p_max = 0.3 < 0.55: cur_max_th stays at max_th
    spec = {"buffer": 12, "mu": 0.5, "w": 0.3, "k": 2, "mapping": "split", "source": MMBP, **RED}
    plain_and(spec, dynamic_max_th=True)


def test_dynamic_max_th_chain_matches_discretised_simulation():
    doc = copy.deepcopy(SIM_DOC)
    doc["aqm"].update(p_max=0.7, dynamic_max_th=True, max_th_growth=0.4)
    model = aqmchain.model_from_dict(doc)[0]
    r = aqmchain.solve_stationary(model)
    assert 12 < r.mean_max_th < 12 * 1.4
    sim = aqmchain.simulate(model, slots=400_000, replications=2, seed=13, discretised=True, threads=1)
    for name in ("mean_queue", "var_queue", "loss_aqm", "mean_max_th"):
        within(getattr(r, name), sim, name)


def test_dynamic_max_th_bad_input():
    doc = copy.deepcopy(BASE_DOC)
    doc["aqm"].update(max_th_growth=0.2)
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "aqm.max_th_growth"
    doc["aqm"].update(dynamic_max_th=True, max_th_growth=-1.0)
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "aqm.max_th_growth"


def test_redwm_with_stateful_refused():
    doc = copy.deepcopy(BASE_DOC)
    doc["aqm"].pop("w")
    doc["aqm"].update(filter="redwm", triple=[0.08, 0.0014, 0.001], spacing="count")
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "aqm.filter"


def test_transient_scenario_with_spacing():
    # a load step with count spacing: the phases share the count range, so p_max may not change
    doc = copy.deepcopy(SIM_DOC)
    doc["aqm"].update(spacing="count")
    sc = aqmchain.make_scenario(doc, [{"slots": 200, "alpha": 0.3}, {"slots": 400, "alpha": 0.7}])
    tr = aqmchain.solve_transient(sc, [100, 200, 600])
    assert tr.mean_queue[2] > tr.mean_queue[1]
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.make_scenario(doc, [{"slots": 200}, {"slots": 200, "aqm": {"p_max": 0.3}}])
    assert e.value.param.endswith(".aqm")
    # the count's time course is reported: E[count] from the empty system (count -1)
    assert tr.mean_count.shape == (3,) and -1.0 <= tr.mean_count[0] < tr.mean_count[2]


def test_adaptive_load_step_p_max_over_time():
    # adaptive RED through a load step 0.3 -> 0.7 -> 0.3: p_max starts at the model's value,
    # falls while the load is light, climbs under the heavy load and falls again; the chain's
    # E[p_max] over time against the ensemble that follows the chain's grids (its exact law)
    doc = copy.deepcopy(SIM_DOC)
    doc["aqm"].update(adaptive=True, interval=20, p_max_step=0.02, w=0.1)
    sc = aqmchain.make_scenario(doc, [{"slots": 300, "alpha": 0.3}, {"slots": 500, "alpha": 0.75},
                                      {"slots": 400, "alpha": 0.3}])
    times = np.arange(20, 1201, 20)
    tr = aqmchain.solve_transient(sc, times)
    assert abs(tr.mean_p_max[0] - 0.2) < 0.02  # from the start value (one clock tick at most)
    i300, i800 = 14, 39  # t = 300, 800
    assert tr.mean_p_max[i300] < 0.15 < tr.mean_p_max[i800] and tr.mean_p_max[-1] < tr.mean_p_max[i800]
    ens = aqmchain.simulate_scenario(sc, times, replications=600, seed=5, discretised=True, threads=1)
    for name in ("mean_p_max", "mean_queue"):
        hw = getattr(ens, name + "_hw")
        z = np.abs(getattr(tr, name) - getattr(ens, name)) / np.maximum(hw, 1e-9)
        assert np.mean(z > 1.96) < 0.15 and z.max() < 4.5, (name, z.max())
    # the caller's own observables: P(p_max above its start)
    above = (aqmchain.stateful_observables(sc.phases[0].model, aqmchain.build_chain(sc.phases[0].model))["p_max"]
             > 0.2 + 1e-12)
    tr2 = aqmchain.solve_transient(sc, times, observables={"p_max_raised": above})
    # the same stepping again: at most the drift of another order of additions, times p_max <= 1
    P = aqmchain.transition_matrix(aqmchain.build_chain(sc.phases[1].model))
    np.testing.assert_allclose(tr2.mean_p_max, tr.mean_p_max, rtol=0, atol=stepping_error(P, int(max(times))))
    assert np.all((tr2.p_max_raised >= 0) & (tr2.p_max_raised <= 1)) and tr2.p_max_raised[i800] > 0.5
    with pytest.raises(aqmchain.OptionError):
        aqmchain.solve_transient(sc, times, observables={"mean_queue": above})
    with pytest.raises(aqmchain.OptionError):
        aqmchain.solve_transient(sc, times, observables={"short": above[:3]})


def test_automatic_grid_refines_at_the_raised_max_th():
    # overload: avg lives around max_th and the raised max_th (44); the automatic grid grades
    # toward both jumps of p, not only toward the static drop function's
    model = aqmchain.Model(buffer=50, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(mu=0.25),
                           aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(20, 40, 0.1), w=0.05, weight="autored",
                                            autored_p="queue", dynamic_max_th=True),
                           grid=aqmchain.GridSpec(k=2, refine="auto"))
    resolved, report = aqmchain.refine_grid(model)
    assert any(abs(j - 44.0) < 1e-9 for j in report["jumps"]) and any(abs(j - 40.0) < 1e-9 for j in report["jumps"])
    pts = np.asarray(resolved.grid.points)
    assert np.min(np.abs(pts - 44.0)) < 1e-9 and np.min(np.diff(pts[(pts > 43) & (pts < 45)])) < 0.01


def test_adaptive_upper_bound_reached_as_in_exact_arithmetic():
    """Overloaded queue: p_max climbs from 0.1 by 0.01 to p_max_high = 0.5 and once more to
    0.51 (0.5 <= p_max_high holds in exact arithmetic). The simulator's accumulated p_max
    (0.1 + 40 x 0.01 rounds just above 0.5) must still take that step: with avg exact it
    agrees with the chain, whose p_max grid reaches 0.51."""
    spec = {"buffer": 20, "mu": 0.3, "w": 0.2, "k": 2, "mapping": "split", "source": {"kind": "bernoulli", "alpha": 0.9},
            "drop": "red", "min_th": 2, "max_th": 6, "p_max": 0.1, "adaptive": True, "interval": 5,
            "p_max_step": 0.01}
    m = model_of(spec)
    r = aqmchain.solve_stationary(m)
    assert r.p_max_values[-1] == pytest.approx(0.51) and r.p_max_pmf[-1] > 0.8
    for disc in (False, True):
        s = aqmchain.simulate(m, slots=200_000, replications=4, seed=3, discretised=disc)
        assert abs(s.mean_p_max - r.mean_p_max) <= 4 * s.ci["mean_p_max"], (disc, s.mean_p_max, r.mean_p_max)


# ---------------------------------------------------------------- response times (tagged-packet chain)
RESPONSE_AQM = {
    "count": {"spacing": "count"},
    "adaptive_exact_ecn": {"adaptive": True, "interval": 3, "clock": "exact", "p_max_step": 0.1, "increment": 0.05,
                           "ecn": 0.3},
    "fdynamic": {"weight": "autored", "dynamic_max_th": True, "autored_p": "queue", "max_th_growth": 0.3},
}


def response_spec(aqm, **kw):
    return {"buffer": 14, "mu": 0.45, "w": 0.3, "k": 2, "mapping": "split", "source": MMBP, **RED, "p_max": 0.5,
            **aqm, **kw}


@pytest.mark.parametrize("aqm", list(RESPONSE_AQM))
def test_tagged_chain_under_tail_equals_closed_form(aqm):
    """Under tail drop R follows from the level an admitted packet finds (closed form); the
    tagged-packet chain, which follows the count, p_max and cur_max_th slot by slot, must
    give the same law."""
    assert_tagged_equals_closed_form(model_of(response_spec(RESPONSE_AQM[aqm])))


@pytest.mark.parametrize("policy", ["front", "random"])
@pytest.mark.parametrize("aqm", list(RESPONSE_AQM))
def test_tagged_chain_push_out_policies(aqm, policy):
    """Front and random drop: mass balance and Little's law on the chain, and the response
    law against the simulator following the chain's grids (its exact law)."""
    model = model_of(response_spec(RESPONSE_AQM[aqm], policy=policy))
    r = aqmchain.solve_stationary(model)
    assert r.response_method == "tagged_chain" and r.pushed_out_prob > 0.01
    served = r.admitted_rate * (1 - r.pushed_out_prob - r.response_truncated)
    assert served == pytest.approx(r.throughput, rel=1e-9)
    assert r.littles_law_error < 1e-9
    sim = aqmchain.simulate(model, slots=1_000_000, replications=4, seed=17, discretised=True)
    for metric in ("mean_response", "var_response", "pushed_out_prob"):
        a, s, hw = getattr(r, metric), getattr(sim, metric), sim.ci[metric]
        assert abs(s - a) <= 4.5 * hw, (metric, a, s, hw)
