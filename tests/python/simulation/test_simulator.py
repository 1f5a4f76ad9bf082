"""Simulator (SPEC 7) against independent oracles.

Discretised mode has the chain as its exact law: every scalar metric must agree
within |z| < 4, z from the 95 % batch-means interval.  With ~60 comparisons the
family-wise false-alarm rate is below 1 % for a given seed; the seeds are fixed so
CI is reproducible, and no value is pinned to a seed.
"""

import numpy as np
import pytest

import aqmchain
from conftest import model_of, reference_rows

SMALL = {
    "geo_red": {"buffer": 30, "mu": 0.5, "w": 0.1, "k": 2, "mapping": "split",
                "source": {"kind": "bernoulli", "alpha": 0.55}, "drop": "red", "min_th": 6, "max_th": 20,
                "p_max": 0.3},
    "ssmp_red_arrival": {"buffer": 25, "mu": 0.6, "w": 0.2, "k": 2, "mapping": "split", "update": "per_arrival",
                         "source": {"kind": "ssmp", "n": 4, "q": 1.6, "a": 6.0}, "drop": "red", "min_th": 5,
                         "max_th": 18, "p_max": 0.2},
    "geo_dsred_ecn": {"buffer": 30, "mu": 0.45, "w": 0.15, "k": 2, "mapping": "split", "ecn": 0.3,
                      "source": {"kind": "bernoulli", "alpha": 0.5}, "drop": "dsred", "k_l": 5, "k_h": 20,
                      "gamma": 0.4},
    "ssmp_sred": {"buffer": 25, "mu": 0.5, "w": 0.25, "k": 3, "mapping": "split",
                  "source": {"kind": "ssmp", "n": 3, "q": 1.5, "a": 4.0}, "drop": "sred", "min_th": 4},
    # overloaded, steep RED: sensitive to the filter (per_slot instead of per_arrival gives |z| > 100,
    # w = 0.06 instead of 0.05 gives |z| ~ 18 at this sample size)
    "geo_red_overload_arrival": {"buffer": 25, "mu": 0.25, "w": 0.05, "k": 2, "mapping": "split",
                                 "update": "per_arrival", "source": {"kind": "bernoulli", "alpha": 0.3},
                                 "drop": "red", "min_th": 3, "max_th": 12, "p_max": 0.6},
    "mmbp_flags": {"buffer": 20, "mu": 0.5, "w": 0.3, "mapping": "flags",
                   "source": {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.2, 0.8]], "arrival": [0.2, 0.8]},
                   "drop": "gentle_red", "min_th": 4, "max_th": 10, "p_max": 0.2},
}


@pytest.mark.parametrize("name", list(SMALL))
def test_discretised_simulation_matches_chain(name):
    model = model_of(SMALL[name])
    cmp = aqmchain.compare(model, slots=3_000_000, replications=2, seed=11, discretised=True)
    for metric, a, s, hw, z in cmp.rows:
        assert abs(z) < 4, f"{name}: {metric} analytic {a} simulated {s} +- {hw} (z = {z:.2f})"
    sim, ana = cmp.simulated, cmp.analytic
    big = ana.queue_pmf > 1e-3
    zq = (sim.queue_pmf[big] - ana.queue_pmf[big]) / np.maximum(sim.queue_pmf_ci[big] / 1.96, 1e-12)
    assert np.max(np.abs(zq)) < 5


def test_continuous_mode_reproduces_the_published_heavy_load_rows():
    """The GEO, w = 0.07, mu = 0.25 rows of Tables I-III of "Implementation of modified AQM
    mechanisms in IP routers"."""
    rows = [r for r in reference_rows("GEO") if r["w"] == 0.07 and r["mu"] == 0.25]
    assert len(rows) == 4
    for row in rows:
        drop = (aqmchain.DropFunction.red(100, 200, 0.1) if row["alg"] == "RED"
                else aqmchain.DropFunction.dsred(100, 200, row["gamma"]))
        model = aqmchain.Model(buffer=250, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.25),
                               aqm=aqmchain.Aqm(drop=drop, w=0.07))
        s = aqmchain.simulate(model, slots=4_000_000, replications=2, seed=5, warmup=200_000)
        for ours, theirs in (("mean_queue", "mean_queue"), ("loss", "loss"), ("mean_response", "mean_wait")):
            got, hw, ref = getattr(s, ours), s.ci[ours], row[theirs]
            assert abs(got - ref) <= hw + 0.01 * abs(ref), f"{row['alg']} {row['gamma']}: {ours} {got} +- {hw} vs {ref}"


def test_policies_share_queue_law_but_not_response_times():
    spec = dict(SMALL["geo_red"], buffer=40, min_th=5, max_th=30, p_max=0.5, mu=0.45)
    res = {}
    for policy in ("tail", "front", "random"):
        res[policy] = aqmchain.simulate(model_of(dict(spec, policy=policy)), slots=3_000_000, replications=2,
                                        seed=21)
    t = res["tail"]
    for p in ("front", "random"):
        r = res[p]
        for metric in ("loss", "mean_queue", "var_queue", "throughput"):
            sd = np.hypot(t.ci[metric], r.ci[metric]) / 1.96
            assert abs(getattr(r, metric) - getattr(t, metric)) < 4 * sd, (p, metric)
        assert r.pushed_out_prob > 0.01
        sd = np.hypot(t.ci["mean_response"], r.ci["mean_response"]) / 1.96
        assert t.mean_response - r.mean_response > 4 * sd, p  # served packets wait less
    assert t.pushed_out_prob == 0.0
    # front discards the oldest waiting packet: shorter waits than a random victim
    assert res["front"].mean_response < res["random"].mean_response


def test_same_seed_same_answer_and_series():
    model = model_of(SMALL["geo_red"])
    a = aqmchain.simulate(model, slots=300_000, replications=3, seed=9, sample_every=1000)
    b = aqmchain.simulate(model, slots=300_000, replications=3, seed=9, threads=1)
    c = aqmchain.simulate(model, slots=300_000, replications=3, seed=10)
    assert a.mean_queue == b.mean_queue and a.loss == b.loss
    assert a.mean_queue != c.mean_queue
    assert len(a.series["slot"]) == 300 and a.series["level"].max() <= 30
    assert np.all(a.series["avg"] >= 0)


def test_bad_simulation_input():
    model = model_of(SMALL["geo_red"])
    with pytest.raises(aqmchain.ModelError, match="slots") as exc:
        aqmchain.simulate(model, slots=10_000, warmup=9_990)
    assert exc.value.param == "slots"
    with pytest.raises(aqmchain.ModelError, match="replications"):
        aqmchain.simulate(model, slots=100_000, replications=0)
    with pytest.raises(aqmchain.ModelError, match="source.alpha"):
        aqmchain.model_from_dict({"model": {"buffer": 5}, "source": {"kind": "bernoulli", "alpha": 2},
                                  "service": {"mu": 0.5}})


@pytest.mark.parametrize("policy", ["tail", "front", "random"])
def test_packet_balance_is_exact(policy):
    # departures = admissions - push-outs - (n at the end - n at the start of the measurement),
    # and an admission that pushes a packet out replaces a lost one: throughput = arrival_rate
    # x (1 - loss) up to N packets per replication
    spec = dict(SMALL["geo_dsred_ecn"], policy=policy)
    s = aqmchain.simulate(model_of(spec), slots=400_000, replications=3, seed=4)
    slack = spec["buffer"] * 3 / s.measured_slots
    assert abs(s.throughput - s.arrival_rate * (1 - s.loss)) <= slack + 1e-12
    assert s.mark_prob > 0 and (s.pushed_out_prob > 0) == (policy != "tail")
    # Little's law over served packets (tail: every admitted packet is served)
    if policy == "tail":
        assert s.mean_system == pytest.approx(s.throughput * s.mean_response, rel=0.01)
