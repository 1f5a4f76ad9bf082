"""Batch arrivals (docs/batch-arrivals.md): 0..B packets per slot, in the chain and the simulator.

The chain is checked entry by entry against a dense oracle that enumerates every sequence of
packet fates (tests/python/oracle.py, batch_slot), and against the simulator on the chain's
grid (its exact law) within confidence intervals; a batch source with B = 1 is its MMBP,
bit for bit, in both.
"""

import itertools

import numpy as np
import pytest

import aqmchain
from aqmchain import ModelError
from conftest import model_of, solution_distance_bound, summation_error
from oracle import batch_reference_chain

EPS = float(np.finfo(float).eps)

SOURCES = {
    "batch_bernoulli": {"kind": "batch", "counts": [0.45, 0.25, 0.2, 0.1]},
    "batch_mmbp": {"kind": "batch", "matrix": [[0.9, 0.1], [0.3, 0.7]],
                   "counts": [[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]]},
}
DROPS = {
    "none": {"drop": "none"},
    "red": {"drop": "red", "min_th": 1, "max_th": 5, "p_max": 0.4},
    "gentle_red": {"drop": "gentle_red", "min_th": 1, "max_th": 3, "p_max": 0.3},
}


def batch_spec(source, drop="red", **kw):
    spec = {"buffer": 6, "mu": 0.6, "w": 0.3, "k": 2, "mapping": "split", "source": SOURCES[source], **DROPS[drop]}
    spec.update(kw)
    return spec


@pytest.mark.parametrize("source,drop,update,ecn", list(itertools.product(
    SOURCES, DROPS, ("per_slot", "per_arrival"), (0.0, 0.4))))
def test_matrix_equals_the_batch_oracle(source, drop, update, ecn):
    spec = batch_spec(source, drop, update=update, ecn=ecn)
    terms: dict = {}
    states, P_ref = batch_reference_chain(spec, terms)
    chain = aqmchain.build_chain(model_of(spec))
    labels = aqmchain.state_labels(chain)
    built = list(zip(labels["level"].tolist(), labels["avg_index"].tolist(), labels["modulator"].tolist()))
    assert built == states, "reachable state sets differ"
    P = aqmchain.transition_matrix(chain).toarray()
    # each entry: the oracle sums T paths of at most B + 5 factors; the kernel sums at most
    # c branches of products through B steps of its recursion (at most 3 B + 8 roundings each)
    B = len(spec["source"]["counts"][0]) - 1 if "matrix" in spec["source"] else len(spec["source"]["counts"]) - 1
    c = int(np.count_nonzero(P_ref, axis=1).max())
    tol = 2.0 * (max(terms.values()) + c + 3 * B + 8) * EPS
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=tol)
    assert chain.nnz == np.count_nonzero(P_ref)
    # the levels move by -1 .. +B: some row reaches n + B
    assert any(P_ref[i, j] > 0 and states[j][0] - states[i][0] == B
               for i in range(len(states)) for j in range(len(states)))


def test_event_weights_against_the_enumeration():
    """Arrival, AQM drop, mark, overflow and admission weights of one state: the kernel's
    recursion against the paths of the batch enumerated by hand (n = N - 1: the second packet
    of a batch finds the system full after an admission)."""
    spec = batch_spec("batch_bernoulli", ecn=0.25, update="per_slot")
    model = model_of(spec)
    chain = aqmchain.build_chain(model)
    labels = aqmchain.state_labels(chain)
    N = spec["buffer"]
    i = int(np.flatnonzero((labels["level"] == N - 1) & (labels["avg_index"] == 2 * 3))[0])  # avg = 3
    b = spec["source"]["counts"]
    # avg_t = 0.7 * 3 + 0.3 * (N - 2) = 3.3: grid points 3 (probability 0.4) and 3.5 (0.6)
    ev = {name: chain.events[name][i] for name in ("arrival", "aqm_drop", "mark", "overflow", "admit")}
    want = dict.fromkeys(ev, 0.0)
    for avg, pg in ((3.0, 0.4), (3.5, 0.6)):
        p = 0.4 * (avg - 1) / 4  # RED 1 / 5 / 0.4
        drop, mark, stay = 0.75 * p, 0.25 * p, 1 - 0.75 * p
        for k, pk in enumerate(b):
            w = pg * pk
            want["arrival"] += w * k
            if k == 0:
                continue
            # the first packet is tested; each later one is tested while the first ones were rejected
            tested = sum((1 - stay) ** i for i in range(k))
            want["aqm_drop"] += w * drop * tested
            want["mark"] += w * mark * tested
            want["overflow"] += w * (k - tested)
            want["admit"] += w * (1 - (1 - stay) ** k)
    # every weight is a sum of nonnegative terms (at most 2 grid points x B batch sizes x B
    # tested packets), each a product of at most B + 5 factors: each side is within
    # (terms + factors) eps of the exact sum, relatively (a zero weight is 0 on both sides)
    B = len(b) - 1
    rel = 2.0 * (2 * B * B + B + 5) * np.finfo(float).eps
    for name in ev:
        assert abs(ev[name] - want[name]) <= rel * want[name], (name, ev[name], want[name])


def test_batch_of_one_is_the_mmbp_chain_exactly():
    matrix, arrival = [[0.9, 0.1], [0.25, 0.75]], [0.2, 0.9]
    base = {"buffer": 12, "mu": 0.55, "w": 0.3, "k": 2, "mapping": "split", "ecn": 0.2, **DROPS["red"],
            "min_th": 3, "max_th": 9}
    for update in ("per_slot", "per_arrival"):
        mmbp = model_of(dict(base, update=update, source={"kind": "mmbp", "matrix": matrix, "arrival": arrival}))
        batch = model_of(dict(base, update=update, source={"kind": "batch", "matrix": matrix,
                                                           "counts": [[1 - a, a] for a in arrival]}))
        assert batch.source.kind == "batch" and batch.source.max_batch == 1
        a, b = aqmchain.build_chain(mmbp), aqmchain.build_chain(batch)
        assert (aqmchain.transition_matrix(a) != aqmchain.transition_matrix(b)).nnz == 0
        for name, v in a.events.items():
            np.testing.assert_array_equal(v, b.events[name], err_msg=name)
        for disc in (False, True):
            sa = aqmchain.simulate(mmbp, slots=200_000, replications=2, seed=3, discretised=disc)
            sb = aqmchain.simulate(batch, slots=200_000, replications=2, seed=3, discretised=disc)
            for name in ("mean_queue", "loss", "mark_prob", "mean_response", "throughput"):
                assert getattr(sa, name) == getattr(sb, name), name


@pytest.mark.parametrize("source,policy,update", [("batch_bernoulli", "tail", "per_slot"),
                                                  ("batch_mmbp", "random", "per_arrival")])
def test_discretised_simulation_matches_the_batch_chain(source, policy, update):
    """On the chain's grid the chain is the simulator's exact law: every scalar within |z| < 4."""
    spec = {"buffer": 20, "mu": 0.7, "w": 0.15, "k": 2, "mapping": "split", "source": SOURCES[source],
            "drop": "red", "min_th": 4, "max_th": 14, "p_max": 0.3, "ecn": 0.3, "policy": policy, "update": update}
    model = model_of(spec)
    cmp = aqmchain.compare(model, slots=2_000_000, replications=2, seed=17, discretised=True)
    names = {row[0] for row in cmp.rows}
    assert {"loss", "mean_queue", "throughput"} <= names
    for metric, a, s, hw, z in cmp.rows:
        assert abs(z) < 4, f"{metric}: analytic {a} simulated {s} +- {hw} (z = {z:.2f})"
    sim, ana = cmp.simulated, cmp.analytic
    assert ana.arrival_rate == pytest.approx(model.source.mean_rate(), rel=1e-12)
    big = ana.queue_pmf > 1e-3
    zq = (sim.queue_pmf[big] - ana.queue_pmf[big]) / np.maximum(sim.queue_pmf_ci[big] / 1.96, 1e-12)
    assert np.max(np.abs(zq)) < 5
    # the simulator counts every packet: admitted = arrivals - AQM drops - overflows (+ push-outs)
    assert sim.loss_overflow > 0 and sim.loss_aqm > 0


def test_source_mean_describe_and_count_pmf():
    s = aqmchain.Source.batch([[1.0]], [[0.5, 0.3, 0.2]])
    assert s.kind == "batch" and s.max_batch == 2 and s.states == 1
    assert abs(s.mean_rate() - 0.7) <= 0.7 * summation_error(2 * 3)  # 3 products, added
    assert s.count_pmf() == [[0.5, 0.3, 0.2]]
    assert repr(s) == "batch Bernoulli(counts=[0.5, 0.3, 0.2])"
    m = aqmchain.Source.batch([[0.5, 0.5], [0.2, 0.8]], [[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]])
    # against the two-state closed form pi = (0.2, 0.5) / 0.7: the library's modulator vector
    # within the distance its residual allows (the residual evaluated here, plus its rounding and
    # that of the closed form), and the rate (at most 1.5 a slot) within twice that
    Q = np.array([[0.5, 0.5], [0.2, 0.8]])
    exact = np.array([0.2, 0.5]) / 0.7
    pi = np.array(m.modulator_stationary())
    d = solution_distance_bound(Q, exact, float(np.abs(pi @ Q - pi).sum()) + 4 * summation_error(2))
    assert np.abs(pi - exact).sum() <= d
    assert abs(m.mean_rate() - exact[1] * 1.5) <= 2.0 * d + 1.5 * summation_error(2 * 3)
    assert "batch MMBP(2 states, B=2)" == repr(m)
    assert aqmchain.Source.bernoulli(0.3).count_pmf() == [[0.7, 0.3]]
    assert aqmchain.Source.bernoulli(0.3).max_batch == 1


def test_hurst_variance_of_iid_batches():
    """An i.i.d. batch source: Var X^(m) = Var X / m with Var X = E X^2 - (E X)^2."""
    b = [0.5, 0.3, 0.2]
    var = (0.3 + 4 * 0.2) - 0.7 ** 2
    r = aqmchain.hurst(aqmchain.Source.batch([[1.0]], [b]), 0, 4)
    # the core forms Var X^(m) = (m c_0 + 2 (m s_1 - s_2)) / m^2 from the autocovariances c_k
    # (s_1, s_2 their sums and k-weighted sums up to m - 1); each c_k is a difference of
    # moments of size E X^2, rounded to a few eps of that, so the m-weighted sums carry about
    # (2 m + 2) such errors: relative to Var X / m that is (2 m + 2) 4 eps E X^2 m / (m Var X)
    ex2 = 0.3 + 4 * 0.2
    eps = np.finfo(float).eps
    for m, v in zip(r.levels, r.variances):
        assert abs(v - var / m) <= (2 * m + 2) * 4 * eps * ex2 / var * (var / m), (m, v)


def test_arrival_trace_counts():
    b = [0.5, 0.1, 0.1, 0.3]
    x = np.asarray(aqmchain.arrival_trace(aqmchain.Source.batch([[1.0]], [b]), slots=400_000, seed=5))
    assert x.max() == 3 and x.min() == 0
    freq = np.bincount(x, minlength=4) / x.size
    sd = np.sqrt(np.array(b) * (1 - np.array(b)) / x.size)
    assert np.all(np.abs(freq - b) < 5 * sd)


@pytest.mark.parametrize("counts,matrix,param,fragment", [
    ([[0.5, 0.6]], [[1.0]], "source.counts[0]", "sum 1"),
    ([[1.0]], [[1.0]], "source.counts[0]", "1 <= B <= 64"),
    ([[0.5, 0.5], [0.2, 0.3, 0.5]], [[0.5, 0.5], [0.5, 0.5]], "source.counts[1]", "2 entries"),
    ([[1.2, -0.2]], [[1.0]], "source.counts[0][0]", "1.2"),
    ([[0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]], "source.matrix", "must have 1 rows"),
    ([[1.0 / 66] * 66], [[1.0]], "source.counts[0]", "66 entries"),
])
def test_bad_batch_source_names_the_parameter(counts, matrix, param, fragment):
    with pytest.raises(ModelError) as e:
        aqmchain.Source.batch(matrix, counts)
    assert e.value.param == param and fragment in str(e.value), str(e.value)


@pytest.mark.parametrize("aqm,param", [({"spacing": "count"}, "aqm.spacing"),
                                       ({"adaptive": True}, "aqm.adaptive"),
                                       ({"modified": "front", "policy": "front"}, "aqm.modified")])
def test_batch_source_refuses_the_single_arrival_features(aqm, param):
    doc = {"model": {"buffer": 20}, "source": {"kind": "batch", "counts": [0.5, 0.3, 0.2]},
           "service": {"mu": 0.5}, "aqm": {"drop": "red", "min_th": 5, "max_th": 15, "p_max": 0.1, **aqm},
           "grid": {"k": 2, "refine": "none"}}
    with pytest.raises(ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == param and "batch source" in str(e.value)


def test_model_file_round_trip(tmp_path):
    for source in SOURCES.values():
        model = model_of(batch_spec(next(k for k, v in SOURCES.items() if v is source)))
        doc = aqmchain.model_to_dict(model)
        # written with one row of counts per modulator state (a file may give one state's as a flat list)
        flat = not isinstance(source["counts"][0], list)
        assert doc["source"] == ({**source, "counts": [source["counts"]]} if flat else source)
        again = aqmchain.model_from_dict(doc)[0]
        assert again.source.count_pmf() == model.source.count_pmf()
        assert repr(again.source) == repr(model.source)
    (tmp_path / "b.toml").write_text('[model]\nbuffer = 10\n[source]\nkind = "batch"\ncounts = [0.6, 0.3, 0.1]\n'
                                     '[service]\nmu = 0.6\n[aqm]\ndrop = "red"\nmin_th = 2\nmax_th = 8\np_max = 0.2\n')
    model = aqmchain.load_model(tmp_path / "b.toml")
    assert model.source.max_batch == 2
    r = aqmchain.solve_stationary(model)
    assert r.arrival_rate == pytest.approx(0.5, rel=1e-12)
    assert not r.response_available and "batch" in r.response_note
    assert "batch arrivals" in aqmchain.model_info(model)["policy_cost"]
    (tmp_path / "bad.toml").write_text('[model]\nbuffer = 10\n[source]\nkind = "batch"\ncounts = [0.6, 0.3, 0.1]\n'
                                       'arrival = [0.4]\n[service]\nmu = 0.6\n')
    with pytest.raises(ModelError) as e:
        aqmchain.load_model(tmp_path / "bad.toml")
    assert "source.arrival" in str(e.value)


def test_batch_scenario_follows_the_exact_transient_law():
    """A load step between two batch MMBPs and back: the ensemble of discretised replications
    against the exact transient law of the phases' chains (dense, tests/python)."""
    from ensemble_oracle import MMBP, DenseLaw, check_against_law, model, z

    def with_source(source, mu=0.5):
        m = model(mu=mu)
        return aqmchain.Model(buffer=m.buffer, source=source, service=m.service, aqm=m.aqm, grid=m.grid)

    low = with_source(aqmchain.Source.batch(MMBP[0], [[0.85, 0.1, 0.05], [0.6, 0.3, 0.1]]))
    high = with_source(aqmchain.Source.batch(MMBP[0], [[0.6, 0.2, 0.2], [0.1, 0.3, 0.6]]))
    sc = aqmchain.Scenario([aqmchain.Phase(100, low), aqmchain.Phase(100, high), aqmchain.Phase(100, low)])
    times = np.arange(10, 301, 10)
    res = aqmchain.simulate_scenario(sc, times, replications=2000, seed=4, discretised=True)
    law = DenseLaw(sc).at(times)
    check_against_law(res, law, "batch load step")
    assert law["mq"][19] > 2 * law["mq"][9]  # the heavier batches fill the queue
    # the check can fail: the law with a slower server is far outside
    slow = [with_source(m.source, mu=0.4) for m in (low, high)]
    other = DenseLaw(aqmchain.Scenario([aqmchain.Phase(100, slow[0]), aqmchain.Phase(100, slow[1]),
                                        aqmchain.Phase(100, slow[0])])).at(times)
    assert np.max(z(res.mean_queue, res.mean_queue_hw, other["mq"])) > 6


def test_solve_estimate_counts_no_tagged_chain_for_batch_arrivals():
    # the chain builds no tagged-packet chain for a batch source (its response times come from
    # the simulator), so the estimate neither bounds one nor holds it against tagged_max_states
    doc = {"model": {"buffer": 10}, "source": {"kind": "batch", "counts": [0.6, 0.3, 0.1]}, "service": {"mu": 0.6},
           "aqm": {"drop": "red", "min_th": 2, "max_th": 8, "p_max": 0.2, "policy": "front"}}
    est = aqmchain.solve_estimate(aqmchain.model_from_dict(doc)[0], tagged_max_states=1)
    assert "tagged_states_bound" not in est and est["over_budget"] == []
    doc["source"] = {"kind": "bernoulli", "alpha": 0.5}  # one arrival per slot: the tagged chain is bounded
    assert aqmchain.solve_estimate(aqmchain.model_from_dict(doc)[0])["tagged_states_bound"] > 0
