"""REDwM (second-order moving average, SPEC 2.3): chain against an independent dense matrix,
EWMA written as REDwM against the EWMA chain, the simulator against an independent
slot-by-slot simulation and against the chain, and the named errors of bad coefficients."""

import copy
import itertools

import numpy as np
import pytest

import aqmchain
from conftest import construction_error
from oracle import redwm_reference_chain, redwm_s_points
from oracle import DROPS, SOURCES

BASE = {"model": {"buffer": 20}, "source": {"kind": "bernoulli", "alpha": 0.5}, "service": {"mu": 0.5},
        "aqm": {"drop": "red", "min_th": 5, "max_th": 15, "p_max": 0.1, "filter": "redwm", "triple": [0.2, 0.1, 0.05]},
        "grid": {"k": 2, "refine": "none"}}


def doc_of(spec: dict) -> dict:
    """The oracle's flat spec as a model-file document."""
    aqm = {k: v for k, v in spec.items() if k in ("drop", "min_th", "max_th", "p_max", "k_l", "k_h", "gamma",
                                                   "coeffs", "points", "update", "ecn", "policy", "triple", "a",
                                                   "b")}
    aqm["filter"] = "redwm"
    grid = {"k": spec.get("k", 4), "mapping": spec["mapping"], "refine": "none"}
    for key in ("s_k", "s_points"):
        if key in spec:
            grid[key] = spec[key]
    return {"model": {"buffer": spec["buffer"]}, "source": dict(spec["source"]), "service": {"mu": spec["mu"]},
            "aqm": aqm, "grid": grid}


def model_of(spec: dict) -> aqmchain.Model:
    return aqmchain.model_from_dict(doc_of(spec))[0]


def compare(spec: dict) -> aqmchain.Chain:
    states, P_ref = redwm_reference_chain(spec)
    chain = aqmchain.build_chain(model_of(spec))
    lab = aqmchain.state_labels(chain)
    built = list(zip(*(lab[c].tolist() for c in ("level", "avg_index", "s_index", "modulator"))))
    assert built == states, "reachable state sets differ"
    P = aqmchain.transition_matrix(chain).toarray()
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=construction_error(P_ref))
    assert chain.nnz == np.count_nonzero(P_ref)
    np.testing.assert_array_equal(aqmchain.redwm_s_grid(chain.model), redwm_s_points(spec))
    return chain


# ------------------------------------------------------------------ the chain against SPEC 2.3


@pytest.mark.parametrize("source,drop,update,mapping", [
    (s, d, u, m) for s, d, u, m in itertools.product(SOURCES, ("red", "dsred", "table"), ("per_slot", "per_arrival"),
                                                     ("split", "nearest"))])
def test_matrix_equals_spec(source, drop, update, mapping):
    spec = {"buffer": 12, "mu": 0.55, "k": 2, "mapping": mapping, "update": update, "source": SOURCES[source],
            "triple": [0.25, 0.15, 0.1], **DROPS[drop]}
    chain = None
    if mapping == "nearest":
        with pytest.warns(RuntimeWarning, match="freezes avg"):
            chain = compare(spec)
    else:
        chain = compare(spec)
    assert len(aqmchain.redwm_s_grid(chain.model)) > 2  # s really moves on a grid of its own


@pytest.mark.parametrize("s_grid", [{"s_k": 3}, {"s_points": [0.0, 0.3, 0.5, 1.7, 4.0, 6.0]}])
def test_matrix_equals_spec_with_own_s_grid_and_ecn(s_grid):
    spec = {"buffer": 20, "mu": 0.45, "k": 2, "mapping": "split", "update": "per_slot", "ecn": 0.3,
            "policy": "front", "source": SOURCES["mmbp"], "a": [0.5, 0.2], "b": [0.2, 0.1], **DROPS["gentle_red"],
            **s_grid}
    compare(spec)


def test_flags_mapping_maps_s_by_split():
    spec = {"buffer": 10, "mu": 0.5, "mapping": "flags", "update": "per_slot", "source": SOURCES["bernoulli"],
            "triple": [0.3, 0.2, 0.1], **DROPS["red"]}
    compare(spec)


def test_reachable_bound_covers_the_built_chain():
    for triple, update, src in itertools.product(([0.2, 0.1, 0.05], [0.004, 0.009, 0.0], [0.08, 0.0014, 0.001]),
                                                 ("per_slot", "per_arrival"), ("bernoulli", "ssmp")):
        doc = copy.deepcopy(BASE)
        doc["model"]["buffer"] = 40
        doc["source"] = SOURCES[src]
        doc["aqm"].update(triple=triple, update=update, min_th=10, max_th=30)
        m = aqmchain.model_from_dict(doc)[0]
        est = aqmchain.estimate_chain(m)
        n = aqmchain.build_chain(m).n
        assert n <= est["reachable_bound"] <= est["product_states"], (triple, update, src)
        assert est["components"]["s_index"] == len(aqmchain.redwm_s_grid(m))


# ------------------------------------------------------------------ EWMA written as REDwM


@pytest.mark.parametrize("src,update,mapping,policy", [
    ("bernoulli", "per_slot", "split", "tail"), ("ssmp", "per_slot", "split", "tail"),
    ("mmbp", "per_arrival", "split", "front"), ("bernoulli", "per_slot", "flags", "random"),
    ("ssmp", "per_arrival", "split", "random")])
def test_ewma_as_redwm_is_the_ewma_chain_exactly(src, update, mapping, policy):
    w = 0.07
    ewma = copy.deepcopy(BASE)
    ewma["model"]["buffer"] = 30
    ewma["source"] = SOURCES[src]
    ewma["aqm"] = {"drop": "red", "min_th": 8, "max_th": 22, "p_max": 0.2, "w": w, "update": update, "policy": policy}
    ewma["grid"] = {"k": 3, "mapping": mapping, "refine": "none"}
    redwm = copy.deepcopy(ewma)
    del redwm["aqm"]["w"]
    redwm["aqm"].update(filter="redwm", triple=[w, 0.0, 0.0])
    m1, m2 = aqmchain.model_from_dict(ewma)[0], aqmchain.model_from_dict(redwm)[0]
    assert list(aqmchain.redwm_s_grid(m2)) == [0.0]  # s collapses to the single point 0
    c1, c2 = aqmchain.build_chain(m1), aqmchain.build_chain(m2)
    assert c1.n == c2.n and c1.nnz == c2.nnz
    for a, b in ((c1.indptr, c2.indptr), (c1.indices, c2.indices), (c1.data, c2.data)):
        np.testing.assert_array_equal(a, b)
    l1, l2 = aqmchain.state_labels(c1), aqmchain.state_labels(c2)
    for key in ("level", "avg_index", "modulator"):
        np.testing.assert_array_equal(l1[key], l2[key])
    assert not l2["s_index"].any()
    r1, r2 = aqmchain.solve_stationary(c1, method="direct"), aqmchain.solve_stationary(c2, method="direct")
    np.testing.assert_array_equal(r1.pi, r2.pi)
    for name, _ in aqmchain.stationary.SCALAR_METRICS:
        assert getattr(r1, name) == getattr(r2, name), name
    np.testing.assert_array_equal(r1.queue_pmf, r2.queue_pmf)
    np.testing.assert_array_equal(r1.response_pmf, r2.response_pmf)


# ------------------------------------------------------------------ response times, transient analysis


def test_tagged_chain_on_redwm_equals_closed_form_under_tail():
    m = aqmchain.model_from_dict(BASE)[0]
    auto = aqmchain.solve_stationary(m)
    tagged = aqmchain.solve_stationary(m, response="tagged", response_tail=1e-14)
    assert auto.response_method == "closed_form" and tagged.response_method == "tagged_chain"
    assert tagged.mean_response == pytest.approx(auto.mean_response, rel=1e-10)
    assert tagged.var_response == pytest.approx(auto.var_response, rel=1e-8)
    assert tagged.littles_law_error < 1e-10


def test_front_drop_response_is_computed_and_obeys_littles_law():
    doc = copy.deepcopy(BASE)
    doc["aqm"]["policy"] = "front"
    r = aqmchain.solve_stationary(aqmchain.model_from_dict(doc)[0])
    assert r.response_method == "tagged_chain" and r.pushed_out_prob > 0
    assert r.littles_law_error < 1e-10  # E[n] = admitted rate x E[sojourn]


def test_transient_reaches_the_stationary_law():
    m = aqmchain.model_from_dict(BASE)[0]
    st = aqmchain.solve_stationary(m)
    tr = aqmchain.solve_transient(m, [20000])
    assert tr.mean_queue[-1] == pytest.approx(st.mean_queue, rel=1e-8)
    assert tr.mean_avg[-1] == pytest.approx(st.mean_avg, rel=1e-8)


# ------------------------------------------------------------------ simulator


def python_simulation(a, b, alpha, mu, N, lo, hi, pmax, slots, warmup, reps, seed):
    """Slot-by-slot simulation of SPEC 2.3 and 3 (per_slot, tail drop, Bernoulli source, RED),
    written from the text, vectorised over independent replications.  Returns per-replication
    time averages of q and A and the counts of arrivals and losses."""
    rng = np.random.default_rng(seed)
    k, m = len(a), len(b) - 1
    n = np.zeros(reps, dtype=np.int64)
    hA = np.zeros((k, reps))        # A_{t-1}, ..., A_{t-k}
    hq = np.zeros((max(m, 1), reps))  # q_{t-2}, ..., q_{t-1-m}
    sum_q = np.zeros(reps)
    sum_A = np.zeros(reps)
    arrivals = np.zeros(reps)
    losses = np.zeros(reps)
    for t in range(slots):
        q = np.maximum(n - 1, 0).astype(float)
        A = b[0] * q + sum(a[j] * hA[j] for j in range(k)) + sum(b[i] * hq[i - 1] for i in range(1, m + 1))
        hA = np.roll(hA, 1, axis=0)
        hA[0] = A
        if m > 0:
            hq = np.roll(hq, 1, axis=0)
            hq[0] = q
        p = np.where(A < lo, 0.0, np.where(A < hi, pmax * (A - lo) / (hi - lo), 1.0))
        arr = rng.random(reps) < alpha
        rejected = arr & ((n == N) | (rng.random(reps) < p))
        dep = (n >= 1) & (rng.random(reps) < mu)
        n = n + (arr & ~rejected) - dep
        if t >= warmup:
            sum_q += np.maximum(n - 1, 0)
            sum_A += A
            arrivals += arr
            losses += rejected
    T = slots - warmup
    return sum_q / T, sum_A / T, arrivals, losses


def z_score(a, a_hw, b, b_hw):
    return abs(a - b) / np.hypot(a_hw / 1.96, b_hw / 1.96)


def test_simulator_against_independent_python_simulation_any_order():
    a, b = [0.55, 0.15, 0.05], [0.12, 0.08, 0.05]  # k = 3, m = 2: beyond the chain's order
    N, alpha, mu, lo, hi, pmax = 15, 0.45, 0.5, 3.0, 10.0, 0.4
    doc = {"model": {"buffer": N}, "source": {"kind": "bernoulli", "alpha": alpha}, "service": {"mu": mu},
           "aqm": {"drop": "red", "min_th": lo, "max_th": hi, "p_max": pmax, "filter": "redwm", "a": a, "b": b}}
    model = aqmchain.model_from_dict(doc)[0]
    assert model.aqm.order == (3, 2)
    ours = aqmchain.simulate(model, slots=4_000_000, replications=4, seed=11)
    mq, mA, arr, loss = python_simulation(a, b, alpha, mu, N, lo, hi, pmax, slots=3000, warmup=1000, reps=2000,
                                          seed=5)
    R = len(mq)
    hw = lambda x: 1.96 * np.std(x, ddof=1) / np.sqrt(R)  # noqa: E731
    ratio = losses_ratio(arr, loss)
    assert z_score(ours.mean_queue, ours.ci["mean_queue"], mq.mean(), hw(mq)) < 4.5
    assert z_score(ours.mean_avg, ours.ci["mean_avg"], mA.mean(), hw(mA)) < 4.5
    assert z_score(ours.loss, ours.ci["loss"], *ratio) < 4.5


@pytest.mark.parametrize("a,b", [([0.7, 0.2], [0.02, 0.03, 0.05]), ([0.6, 0.1, 0.05, 0.05], [0.2]),
                                 ([], [0.5, 0.3, 0.2])])
def test_simulated_trajectory_follows_the_recursion(a, b):
    """Every slot's A (time series with sample_every = 1) is the recursion of SPEC 2.3 applied to
    the recorded queue lengths and the earlier A values (zero before slot 1)."""
    doc = {"model": {"buffer": 15}, "source": {"kind": "bernoulli", "alpha": 0.6}, "service": {"mu": 0.5},
           "aqm": {"drop": "red", "min_th": 3, "max_th": 10, "p_max": 0.4, "filter": "redwm", "a": a, "b": b}}
    model = aqmchain.model_from_dict(doc)[0]
    sim = aqmchain.simulate(model, slots=3000, replications=2, batches=1, warmup=0, seed=4, sample_every=1)
    ser = sim.series
    assert list(ser["slot"]) == list(range(1, 3001))
    n = np.concatenate([[0], ser["level"]])          # n_0 = 0, n_t at the end of slot t
    q = np.maximum(n - 1, 0).astype(float)          # q[t] = q at the end of slot t
    A = np.concatenate([[0.0], ser["avg"]])         # A[t] after slot t's update, A_0 = 0
    for t in range(1, 3001):
        want = sum(a[j] * (A[t - 1 - j] if t - 1 - j >= 0 else 0.0) for j in range(len(a))) + \
            sum(b[i] * (q[t - 1 - i] if t - 1 - i >= 0 else 0.0) for i in range(len(b)))
        assert A[t] == pytest.approx(want, rel=1e-12, abs=1e-12), t
    assert q.max() >= 5  # the queue moved, so the check saw the filter at work


def losses_ratio(arrivals, losses):
    """Loss ratio over replications and its 95 % half-width (delta method)."""
    R = len(arrivals)
    rate = losses.sum() / arrivals.sum()
    resid = losses - rate * arrivals
    return rate, 1.96 * np.std(resid, ddof=1) / np.sqrt(R) / arrivals.mean()


@pytest.mark.parametrize("update,policy,src", [("per_slot", "tail", "bernoulli"), ("per_arrival", "random", "mmbp"),
                                               ("per_slot", "front", "ssmp")])
def test_discretised_simulation_has_the_chains_law(update, policy, src):
    doc = copy.deepcopy(BASE)
    doc["source"] = SOURCES[src]
    doc["aqm"].update(update=update, policy=policy, drop="gentle_red", min_th=4, max_th=10, p_max=0.2)
    model = aqmchain.model_from_dict(doc)[0]
    chain = aqmchain.solve_stationary(model)
    sim = aqmchain.simulate(model, slots=3_000_000, replications=4, discretised=True, seed=21)
    for name in ("mean_queue", "var_queue", "loss", "mean_avg", "mean_response", "throughput"):
        a, s, hw = getattr(chain, name), getattr(sim, name), sim.ci[name]
        assert abs(s - a) < 4.5 * hw / 1.96, (name, a, s, hw)


def test_chain_converges_to_the_continuous_simulation_as_the_grids_refine():
    doc = copy.deepcopy(BASE)
    doc["model"]["buffer"] = 30
    doc["source"] = {"kind": "bernoulli", "alpha": 0.6}
    doc["aqm"].update(min_th=6, max_th=20, p_max=0.3, triple=[0.05, 0.03, 0.02])
    chain = {}
    for k in (1, 2, 4, 8, 16):  # the s grid follows (step 1/(4k))
        doc["grid"]["k"] = k
        model = aqmchain.model_from_dict(doc)[0]
        chain[k] = aqmchain.solve_stationary(model).mean_queue
    sim = aqmchain.simulate(model, slots=4_000_000, replications=4, seed=17)
    err = {k: abs(v - sim.mean_queue) for k, v in chain.items()}
    assert err[1] > err[2] > err[4] > sim.ci["mean_queue"]  # the grid error, well above the noise at first
    # at k = 16 within the refinement's own error estimate (the last step's change) plus the noise
    assert err[16] < abs(chain[16] - chain[8]) + 4.5 * sim.ci["mean_queue"] / 1.96


def test_discretised_simulation_and_chain_take_order_three():
    """k = 3 (beyond the one-sum form): the chain carries two sums (docs/redwm.md; the dense
    oracle and the simulator's law in test_redwm_combos.py)."""
    doc = copy.deepcopy(BASE)
    doc["aqm"].pop("triple")
    doc["aqm"].update(a=[0.5, 0.2, 0.1], b=[0.2])
    model = aqmchain.model_from_dict(doc)[0]
    chain = aqmchain.build_chain(model)
    assert {"s_index", "s2_index"} <= set(chain.labels)


# ------------------------------------------------------------------ model file and bad input


def test_model_file_round_trip_keeps_the_coefficients():
    doc = copy.deepcopy(BASE)
    doc["grid"]["s_points"] = [0.0, 0.5, 1.0, 2.0, 5.0]
    m = aqmchain.model_from_dict(doc)[0]
    assert m.aqm.filter == "redwm"
    a, b = aqmchain.Aqm.triple_coefficients([0.2, 0.1, 0.05])
    assert list(m.aqm.a) == a == [1.0 - 0.2 - 0.1 - 0.05, 0.05] and list(m.aqm.b) == b == [0.2, 0.1]
    d = aqmchain.model_to_dict(m)
    assert "w" not in d["aqm"] and d["aqm"]["filter"] == "redwm"
    m2 = aqmchain.model_from_dict(d)[0]
    assert list(m2.aqm.a) == list(m.aqm.a) and list(m2.aqm.b) == list(m.aqm.b)
    assert list(m2.grid.s_points) == list(m.grid.s_points)
    np.testing.assert_array_equal(aqmchain.build_chain(m2).data, aqmchain.build_chain(m).data)


def with_aqm(**changes):
    doc = copy.deepcopy(BASE)
    for k, v in changes.items():
        if v is None:
            doc["aqm"].pop(k, None)
        else:
            doc["aqm"][k] = v
    return doc


BAD = [
    # (aqm changes, parameter named, texts in the message)
    ({"triple": [-0.1, 0.1, 0.0]}, "aqm.triple[0]", ["[0, 1]", "-0.1", "b_0"]),
    ({"triple": [0.1, 0.1, 1.2]}, "aqm.triple[2]", ["[0, 1]", "1.2", "a_2"]),
    ({"triple": [0.6, 0.3, 0.2]}, "aqm.triple", ["x + y + z <= 1", "(0.6 + 0.3 + 0.2)"]),
    ({"triple": [0.0, 0.0, 0.3]}, "aqm.triple", ["x + y > 0"]),
    ({"triple": [0.1, 0.1]}, "aqm.triple", ["three numbers", "2"]),
    ({"triple": None, "a": [-0.2, 0.4], "b": [0.8]}, "aqm.a[0]", [">= 0", "-0.2", "a_1"]),
    ({"triple": None, "a": [0.6], "b": [0.5, -0.1]}, "aqm.b[1]", [">= 0", "-0.1", "b_1"]),
    ({"triple": None, "a": [0.6, 0.1], "b": [0.2, 0.05]}, "aqm.a", ["sum to 1", "0.95", "a_1 0.6", "b_1 0.05"]),
    ({"triple": None, "a": [1.0], "b": [0.0]}, "aqm.b", ["positive sum", "all zeros"]),
    ({"triple": None, "a": [0.5]}, "aqm.b", ["aqm.triple", "aqm.b"]),
    ({"triple": None}, "aqm.triple", ["needs either"]),
    ({"a": [0.9], "b": [0.1]}, "aqm.triple", ["needs either"]),
    ({"filter": "fir"}, "aqm.filter", ["ewma, redwm", "fir"]),
    ({"w": 0.1}, "aqm.w", ["unknown key", 'filter = "redwm"']),
    ({"filter": "ewma", "w": 0.1}, "aqm.triple", ["unknown key", 'filter = "ewma"']),
]


@pytest.mark.parametrize("changes,param,texts", BAD)
def test_bad_coefficients_name_key_bound_and_value(changes, param, texts):
    with pytest.raises(aqmchain.ModelError) as exc:
        aqmchain.model_from_dict(with_aqm(**changes))
    assert exc.value.param == param, str(exc.value)
    for t in texts:
        assert t in str(exc.value), str(exc.value)


def test_bad_s_grid_and_unsupported_combinations():
    doc = copy.deepcopy(BASE)  # (a2 + b1) N = (0.05 + 0.1) 20 = 3
    doc["grid"]["s_points"] = [0.0, 1.0, 2.5]
    with pytest.raises(aqmchain.ModelError, match=r"grid\.s_points\[2\].*>= \(a_2 \+ b_1\) N = 3.*2\.5") as exc:
        aqmchain.model_from_dict(doc)
    assert exc.value.param == "grid.s_points[2]"
    doc["grid"]["s_points"] = [0.0, 2.0, 1.0, 3.0]
    with pytest.raises(aqmchain.ModelError, match=r"grid\.s_points\[2\].*increasing"):
        aqmchain.model_from_dict(doc)
    doc = copy.deepcopy(BASE)
    doc["grid"]["s_k"] = 0
    with pytest.raises(aqmchain.ModelError, match=r"grid\.s_k.*>= 1"):
        aqmchain.model_from_dict(doc)
    ewma = copy.deepcopy(BASE)
    ewma["aqm"] = {"drop": "red", "min_th": 5, "max_th": 15, "p_max": 0.1, "w": 0.1}
    ewma["grid"]["s_k"] = 4
    with pytest.raises(aqmchain.ModelError, match=r"grid\.s_k.*redwm") as exc:
        aqmchain.model_from_dict(ewma)
    assert exc.value.param == "grid.s_k"
    ct = copy.deepcopy(BASE)
    ct["model"]["time"] = "continuous"
    ct["source"] = {"kind": "poisson", "rate": 0.5}
    ct["service"] = {"kind": "exponential", "mu": 0.6}
    with pytest.raises(aqmchain.ModelError, match=r"aqm\.filter.*ewma.*continuous.*redwm") as exc:
        aqmchain.model_from_dict(ct)
    assert exc.value.param == "aqm.filter"
    with pytest.raises(aqmchain.ModelError, match=r"aqm\.triple.*absent unless"):
        aqmchain.Aqm(triple=[0.1, 0.0, 0.0])


def test_scenario_phases_keep_the_filter():
    base = aqmchain.model_from_dict(BASE)[0]
    sc = aqmchain.make_scenario(base, [{"slots": 50, "mu": 0.6}, {"slots": 50, "triple": [0.2, 0.05, 0.1]}])
    assert list(sc.phases[1].model.aqm.b) == [0.2, 0.05]
    ewma = copy.deepcopy(BASE)
    ewma["aqm"] = {"drop": "red", "min_th": 5, "max_th": 15, "p_max": 0.1, "w": 0.1}
    with pytest.raises(aqmchain.ModelError, match=r"phase\[1\]\.aqm\.filter") as exc:
        aqmchain.Scenario([aqmchain.Phase(5, base), aqmchain.Phase(5, aqmchain.model_from_dict(ewma)[0])])
    assert exc.value.param == "phase[1].aqm.filter"
    res = aqmchain.solve_transient(sc, [50, 100])
    sim = aqmchain.simulate_scenario(sc, [50, 100], replications=200, seed=3)
    for k in range(2):
        assert abs(sim.mean_queue[k] - res.mean_queue[k]) < 4.5 * sim.mean_queue_hw[k] / 1.96
