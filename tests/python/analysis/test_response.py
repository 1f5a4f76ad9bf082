"""Response times under tail, front and random drop (SPEC 5, 2.5)."""

import numpy as np
import pytest

import aqmchain
from conftest import assert_tagged_equals_closed_form, model_of
from oracle import reference_chain, tagged_response_oracle

SMALL = {"buffer": 12, "mu": 0.45, "w": 0.3, "k": 2, "mapping": "split", "ecn": 0.2,
         "source": {"kind": "ssmp", "n": 3, "q": 1.5, "a": 4.0}, "drop": "red", "min_th": 2, "max_th": 8,
         "p_max": 0.5}


@pytest.mark.parametrize("policy", ["tail", "front", "random"])
@pytest.mark.parametrize("update", ["per_slot", "per_arrival"])
def test_matches_independent_dense_tagged_chain(policy, update):
    spec = dict(SMALL, policy=policy, update=update)
    r = aqmchain.solve_stationary(model_of(spec), response_tail=1e-14)
    states, _ = reference_chain(spec)
    labels = r.state_labels()
    built = list(zip(labels["level"].tolist(), labels["avg_index"].tolist(), labels["modulator"].tolist()))
    assert built == states
    pmf, pushed, admitted = tagged_response_oracle(spec, np.asarray(r.pi), states)
    served = 1 - pushed
    n = min(len(pmf), len(r.response_pmf))
    np.testing.assert_allclose(r.response_pmf[:n], pmf[:n] / served, rtol=0, atol=1e-12)
    assert r.pushed_out_prob == pytest.approx(pushed, abs=1e-12)
    assert r.admitted_rate == pytest.approx(admitted, rel=1e-12)
    rr = np.arange(len(pmf))
    assert r.mean_response == pytest.approx(np.dot(rr, pmf) / served, rel=1e-10)


@pytest.mark.parametrize("update", ["per_slot", "per_arrival"])
def test_tagged_chain_under_tail_equals_closed_form(update):
    assert_tagged_equals_closed_form(model_of(dict(SMALL, buffer=25, min_th=5, max_th=18, update=update)))


@pytest.mark.parametrize("policy", ["tail", "front", "random"])
def test_mass_balance_and_littles_law(policy):
    model = model_of(dict(SMALL, buffer=30, min_th=5, max_th=20, policy=policy))
    r = aqmchain.solve_stationary(model)
    # admitted = served + pushed out (+ the mass left when the iteration stopped)
    served = r.admitted_rate * (1 - r.pushed_out_prob - r.response_truncated)
    assert served == pytest.approx(r.throughput, rel=1e-9)
    assert r.admitted_rate * r.pushed_out_prob + r.throughput == pytest.approx(r.admitted_rate, rel=1e-9)
    assert r.littles_law_error < 1e-9
    if policy != "tail":  # every AQM or overflow rejection with someone waiting pushes a packet out
        assert r.pushed_out_prob > 0


def test_policies_against_the_simulator():
    spec = dict(SMALL, buffer=30, min_th=5, max_th=20, p_max=0.4, mu=0.4, w=0.2)
    cmp = aqmchain.compare_policies(model_of(spec))
    tail = cmp.results["tail"].mean_response
    for policy, ana in cmp.results.items():
        sim = aqmchain.simulate(model_of(dict(spec, policy=policy)), slots=4_000_000, replications=2, seed=31,
                                discretised=True)
        for metric in ("mean_response", "var_response", "pushed_out_prob", "loss", "mean_queue"):
            a, s, hw = getattr(ana, metric), getattr(sim, metric), sim.ci[metric]
            assert abs(s - a) < 4 * hw / 1.96 + 1e-12, (policy, metric, a, s, hw)
    assert cmp.results["front"].mean_response < cmp.results["random"].mean_response < tail
    rows = {row["policy"]: row for row in cmp.rows()}
    assert rows["tail"]["relative_to_tail"] == 0.0 and rows["front"]["relative_to_tail"] < 0
