"""Event-driven simulator of continuous-time models against independent oracles.

- p_max = 0: the M/M/1/N queue in closed form (written here): occupancy law, loss (PASTA),
  throughput, mean and variance of the sojourn time (Erlang(k + 1, mu) for an admitted
  arrival that finds k packets), and mean avg = mean queue (d avg/dt = w (q - avg) has
  E[avg] = E[q] in steady state, whatever w).
- discretised = True: avg on the chain's grid with the chain's upwind rates, so the chain
  (solve_stationary of the same model) is the simulator's exact law.
- continuous avg: the chain's grid limit (its error estimate's extrapolation and error).

Tolerances are in the simulation's own 95 % half-widths: 3 half-widths are about 6
standard deviations, so a correct simulator fails with negligible probability for any
seed; no value is pinned to a seed.
"""

import json
from pathlib import Path

import numpy as np
import pytest

import aqmchain

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def model(N=10, rates=(0.3,), Q=None, mu=0.5, red=None, drop=None, w=0.5, ecn=0.0, k=2, policy="tail"):
    src = aqmchain.Source.poisson(rates[0]) if Q is None else aqmchain.Source.mmpp(Q, list(rates))
    if drop is None:
        drop = aqmchain.DropFunction.red(*red) if red else aqmchain.DropFunction.none()
    return aqmchain.Model(buffer=N, time="continuous", source=src, service=aqmchain.Service.exponential(mu),
                          aqm=aqmchain.Aqm(drop=drop, w=w, ecn=ecn, policy=policy), grid=aqmchain.GridSpec(k=k))


def mm1n(N, lam, mu):
    """The M/M/1/N queue: time-stationary law of n, loss (PASTA), throughput, E[R], Var[R]."""
    rho = lam / mu
    p = rho ** np.arange(N + 1)
    p /= p.sum()
    n = np.arange(N + 1)
    found = p[:N] / (1 - p[N])  # what an admitted arrival finds (PASTA)
    k = np.arange(N)
    er = ((k + 1) / mu * found).sum()
    er2 = ((k + 1) * (k + 2) / mu**2 * found).sum()  # Erlang(k + 1, mu): E[R^2] = (k + 1)(k + 2) / mu^2
    q = np.maximum(n - 1, 0)
    return {"system_pmf": p, "mean_system": (n * p).sum(), "var_system": (n * n * p).sum() - (n * p).sum() ** 2,
            "mean_queue": (q * p).sum(), "var_queue": (q * q * p).sum() - (q * p).sum() ** 2,
            "loss": p[N], "loss_overflow": p[N], "loss_aqm": 0.0, "throughput": lam * (1 - p[N]),
            "arrival_rate": lam, "mean_response": er, "var_response": er2 - er**2}


def within(sim, name, exact, k=3.0, tiny=1e-12):
    v, hw = getattr(sim, name), sim.ci[name]
    assert np.isfinite(hw), name
    assert abs(v - exact) <= max(k * hw, tiny), f"{name}: simulated {v} +- {hw}, exact {exact}"


@pytest.mark.parametrize("N,lam,mu,red", [(10, 0.3, 0.5, None), (8, 2.0, 0.5, (2, 8, 0.0)), (15, 0.9, 1.0, None)])
def test_p_max_zero_is_the_mm1n_queue(N, lam, mu, red):
    # RED with p_max = 0 and max_th = N: avg <= N - 1 < max_th, so nothing is dropped early
    sim = aqmchain.simulate(model(N, (lam,), mu=mu, red=red, w=0.3), slots=200_000, replications=4, seed=3)
    exact = mm1n(N, lam, mu)
    for name, value in exact.items():
        if name != "system_pmf":
            within(sim, name, value)
    # E[avg] = E[q] in steady state (the ODE's time average), integrated exactly between events
    within(sim, "mean_avg", exact["mean_queue"])
    for n in range(N + 1):
        assert abs(sim.system_pmf[n] - exact["system_pmf"][n]) <= max(3 * sim.system_pmf_ci[n], 1e-12), n
    assert sim.mark_prob == 0.0 and sim.pushed_out_prob == 0.0
    # per unit time, and the events counted: about 2 per admitted packet plus the losses
    assert sim.events == pytest.approx(4 * 200_000 * (lam + exact["throughput"]), rel=0.02)
    assert sim.response_pmf.size == 0 and sim.to_dict()["response_pmf"] is None


DISCRETISED = {
    "poisson_red": dict(N=20, rates=(0.55,), mu=0.5, red=(3, 12, 0.3), w=0.4, k=2),
    "mmpp_red_ecn": dict(N=16, rates=(0.2, 1.5), Q=[[-0.2, 0.2], [0.5, -0.5]], mu=0.7, red=(2, 9, 0.4), w=1.0,
                         ecn=0.3, k=2),
    "poisson_gentle_front": dict(N=12, rates=(0.9,), mu=0.6, drop=aqmchain.DropFunction.gentle_red(2, 5, 0.2),
                                 w=0.8, k=2, policy="front"),
    "mmpp_red_random": dict(N=10, rates=(0.2, 1.5), Q=[[-0.2, 0.2], [0.5, -0.5]], mu=0.7, red=(2, 7, 0.4), w=1.0,
                            ecn=0.3, k=2, policy="random"),
}


@pytest.mark.parametrize("name", list(DISCRETISED))
def test_discretised_simulation_has_the_chain_as_its_law(name):
    cmp = aqmchain.compare(model(**DISCRETISED[name]), slots=1_000_000, replications=4, seed=5, discretised=True)
    sim, ana = cmp.simulated, cmp.analytic
    # z = (simulated - chain) / (half-width / 1.96): |z| <= 3 x 1.96 is 3 half-widths; a rare event the
    # simulation never saw (half-width 0) gets the Poisson deviation of the count the chain predicts
    for metric, a, s, hw, z in cmp.rows:
        assert abs(z) <= 3 * 1.96, f"{name}: {metric} chain {a} simulated {s} +- {hw} (z = {z:.2f})"
    for metric in ("mean_queue", "loss", "mean_avg", "mark_prob"):
        within(sim, metric, getattr(ana, metric))
    big = ana.queue_pmf > 1e-3
    assert np.all(np.abs(sim.queue_pmf[big] - ana.queue_pmf[big]) <= 3 * sim.queue_pmf_ci[big])
    if DISCRETISED[name].get("policy") in ("front", "random"):
        # packets are pushed out; the response times come from the tagged-packet chain (its
        # mean and variance are among the rows above), and so does the push-out probability
        assert ana.response_method == "tagged_chain"
        assert sim.pushed_out_prob > 0
        within(sim, "pushed_out_prob", ana.pushed_out_prob)


@pytest.mark.parametrize("spec", [dict(N=20, rates=(0.55,), mu=0.5, red=(3, 12, 0.3), w=0.4, k=4),
                                  dict(N=16, rates=(0.2, 1.5), Q=[[-0.2, 0.2], [0.5, -0.5]], mu=0.7,
                                       red=(2, 9, 0.4), w=1.0, ecn=0.3, k=4)], ids=["poisson", "mmpp"])
def test_continuous_avg_against_the_chain_grid_limit(spec):
    # the chain's upwind grid converges to d avg/dt = w (q - avg) as its step goes to 0; its error
    # estimate (grids with 1x, 2x, 4x the step) bounds the distance of the fine grid to that limit
    ana = aqmchain.solve_stationary(model(**spec), error_estimate=True)
    sim = aqmchain.simulate(model(**spec), slots=100_000, replications=4, seed=7)
    for metric in ("mean_queue", "loss", "mean_avg", "mean_response", "throughput"):
        e = ana.error_estimate[metric]
        v, hw = getattr(sim, metric), sim.ci[metric]
        assert abs(v - e.extrapolated) <= 3 * hw + e.error, \
            f"{metric}: simulated {v} +- {hw}, chain limit {e.extrapolated} +- {e.error}"


def test_seeds_reproducible_across_thread_counts():
    m = model(N=12, rates=(0.2, 1.5), Q=[[-0.2, 0.2], [0.5, -0.5]], mu=0.7, red=(2, 9, 0.4), w=1.0, ecn=0.3)
    for disc in (False, True):
        runs = [aqmchain.simulate(m, slots=20_000, replications=5, seed=11, threads=t, discretised=disc)
                for t in (1, 2, 3)]
        for r in runs[1:]:
            for name in ("mean_queue", "loss", "mean_avg", "mean_response", "mark_prob", "var_system"):
                assert getattr(r, name) == getattr(runs[0], name) and r.ci[name] == runs[0].ci[name], name
            assert np.array_equal(r.queue_pmf, runs[0].queue_pmf) and r.events == runs[0].events
        other = aqmchain.simulate(m, slots=20_000, replications=5, seed=12, threads=2, discretised=disc)
        assert other.mean_queue != runs[0].mean_queue


def test_time_series_and_warmup_in_time_units():
    m = model(N=10, rates=(0.4,), mu=0.5, red=(2, 6, 0.2))
    sim = aqmchain.simulate(m, slots=5_000, warmup=1_000, batches=10, replications=2, sample_every=250, seed=1)
    assert list(sim.series["slot"]) == list(range(250, 5_001, 250))
    assert set(np.unique(sim.series["level"])) <= set(range(11))
    assert sim.measured_slots == 2 * 4_000 and sim.warmup == 1_000
    d = sim.to_dict()["simulation"]
    assert d["unit"] == "time" and d["events"] == sim.events > 0


def test_command_line_compare_of_a_continuous_time_model(tmp_path):
    from cli_helpers import run_cli

    out = tmp_path / "cmp.json"
    code, text, err = run_cli("compare", EXAMPLES / "red_ctmc.toml", "--slots", "200000", "--replications", "4",
                              "--discretised", "--json", out, "-q")
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["simulation"]["simulation"]["unit"] == "time" and d["simulation"]["response_pmf"] is None
    for row in d["comparison"]["metrics"]:  # the chain is the discretised simulation's exact law
        assert row["z"] is not None and abs(row["z"]) <= 3 * 1.96, row


def test_bad_input_names_the_parameter():
    m = model(N=10, rates=(0.4,), mu=0.5, red=(2, 6, 0.2))
    with pytest.raises(aqmchain.ModelError, match="warmup") as e:
        aqmchain.simulate(m, slots=5_000, warmup=5_000)
    assert e.value.param == "warmup"
    with pytest.raises(aqmchain.ModelError, match="slots") as e:
        aqmchain.simulate(m, slots=0)
    assert e.value.param == "slots"


def test_continuous_time_scenario_follows_the_transient_chain():
    # discretised: the chain is the ensemble's exact law, p_t = p_0 e^{G_1 t} ... phase after phase
    low = model(N=15, rates=(0.3,), mu=0.6, red=(2, 8, 0.3), w=0.5, k=2)
    high = model(N=15, rates=(1.2,), mu=0.6, red=(2, 8, 0.3), w=0.5, k=2)
    sc = aqmchain.Scenario([aqmchain.Phase(20.0, low), aqmchain.Phase(30.5, high), aqmchain.Phase(29.5, low)])
    times = [0, 1, 5, 10, 20, 21, 25, 35, 50, 51, 55, 60, 80]
    res = aqmchain.simulate_scenario(sc, times, replications=4000, seed=4, discretised=True)
    law = aqmchain.solve_transient(sc, times)
    assert res.times.dtype == np.int64 and list(res.times) == times
    assert res.mean_queue[0] == 0.0 and res.mean_avg[0] == 0.0
    for name in ("mean_queue", "mean_system", "mean_avg"):
        sim, hw, exact = getattr(res, name), getattr(res, name + "_hw"), np.asarray(getattr(law, name))
        assert np.all(np.abs(sim - exact) <= np.maximum(3 * hw, 1e-9)), (name, sim, hw, exact)
    # the check can fail: the high phase switched on 5 time units late is far outside
    late = aqmchain.solve_transient(aqmchain.Scenario([aqmchain.Phase(25.0, low), aqmchain.Phase(25.5, high),
                                                       aqmchain.Phase(29.5, low)]), times)
    assert np.max(np.abs(res.mean_queue - np.asarray(late.mean_queue)) / np.maximum(res.mean_queue_hw, 1e-9)) > 6
    with pytest.raises(aqmchain.ModelError, match="whole number of time units"):
        aqmchain.simulate_scenario(sc, [2.5], replications=10)


# ---------------------------------------------------------------- ns-3 semantics (docs/ns3.md)

def ns3(N=12, rates=(0.9,), Q=None, mu=1.0, drop=None, w=0.2, ecn=0.0, k=2, spacing="wait", ptc=0.0, idle=True,
        hard=True):
    src = aqmchain.Source.poisson(rates[0]) if Q is None else aqmchain.Source.mmpp(Q, list(rates))
    return aqmchain.Model(buffer=N, time="continuous", source=src, service=aqmchain.Service.exponential(mu),
                          aqm=aqmchain.Aqm(drop=drop, w=w, ecn=ecn, semantics="ns3", spacing=spacing, ptc=ptc,
                                           idle_correction=idle, hard_drop=hard),
                          grid=aqmchain.GridSpec(k=k))


@pytest.mark.parametrize("N,lam", [(10, 0.7), (8, 1.6)])
def test_ns3_without_early_region_is_the_mm1n_queue(N, lam):
    # p_max = 0 and max_th = N (avg < N: never forced): the tests run (exemption, count) but never drop
    red = aqmchain.DropFunction.red(2, N, 0.0)
    sim = aqmchain.simulate(ns3(N, (lam,), drop=red, w=0.1, idle=False), slots=200_000, replications=4, seed=3)
    exact = mm1n(N, lam, 1.0)
    for name in ("mean_system", "mean_queue", "loss", "throughput", "mean_response", "var_response", "var_system"):
        within(sim, name, exact[name])
    assert sim.loss_aqm == 0.0 and sim.mark_prob == 0.0
    # avg jumps at the Poisson arrivals: avg+ = (1 - w) avg- + w q; in steady state E[avg-] = E[q seen by an
    # arrival] = E[q], and avg's time average is E[avg-] (arrivals see time averages)
    within(sim, "mean_avg", exact["mean_queue"])
    # the idle correction (ptc = mu by default) decays avg after every idle period: strictly below (at light
    # load, where the server is often idle); n is not affected
    decayed = aqmchain.simulate(ns3(N, (lam,), drop=red, w=0.1, idle=True), slots=200_000, replications=4, seed=3)
    within(decayed, "mean_queue", exact["mean_queue"])
    if lam < 1.0:
        assert decayed.mean_avg < exact["mean_queue"] - 3 * decayed.ci["mean_avg"]


NS3 = {
    "gentle_wait": dict(drop=aqmchain.DropFunction.gentle_red(2, 5, 0.2), w=0.2),
    "red_count_ecn_soft": dict(N=10, rates=(1.1,), drop=aqmchain.DropFunction.red(1.5, 4, 0.3), w=0.3, ecn=0.4,
                               spacing="count", hard=False, ptc=3.0),
    "gentle_ecn_hard_no_idle": dict(N=10, rates=(1.1,), drop=aqmchain.DropFunction.gentle_red(1.5, 4, 0.3), w=0.3,
                                    ecn=0.4, spacing="wait", idle=False),
    "mmpp_gentle_nlred_none": dict(N=10, rates=(0.3, 2.0), Q=[[-0.3, 0.3], [0.6, -0.6]], w=0.25, spacing="none",
                                   ptc=0.5, drop=aqmchain.DropFunction.make("gentle_nlred", min_th=2, max_th=4,
                                                                            p_max=0.3)),
}


@pytest.mark.parametrize("name", list(NS3))
def test_ns3_discretised_simulation_has_the_chain_as_its_law(name):
    # the chain splits avg onto its grid after each arrival's update; so does the discretised simulation, which
    # keeps the count exact (the chain's cap only cuts a negligible mass); the rules are written twice,
    # independently, so a misread rule on either side shows up here
    cmp = aqmchain.compare(ns3(**NS3[name]), slots=300_000, replications=4, seed=2, discretised=True)
    for metric, a, s, hw, z in cmp.rows:
        assert abs(z) <= 3 * 1.96, f"{name}: {metric} chain {a} simulated {s} +- {hw} (z = {z:.2f})"
    within(cmp.simulated, "mean_avg", cmp.analytic.mean_avg)
    if NS3[name].get("ecn"):
        assert cmp.simulated.mark_prob > 0.05


def test_ns3_continuous_avg_against_the_chain_grid_limit():
    m = ns3(**dict(NS3["gentle_wait"], k=4))
    ana = aqmchain.solve_stationary(m, error_estimate=True)
    sim = aqmchain.simulate(m, slots=300_000, replications=4, seed=7)
    for metric in ("mean_queue", "loss", "mean_avg", "mean_response"):
        e = ana.error_estimate[metric]
        v, hw = getattr(sim, metric), sim.ci[metric]
        assert abs(v - e.extrapolated) <= 3 * hw + e.error, \
            f"{metric}: simulated {v} +- {hw}, chain limit {e.extrapolated} +- {e.error}"


def test_ns3_seeds_reproducible_across_thread_counts():
    m = ns3(**NS3["mmpp_gentle_nlred_none"])
    for disc in (False, True):
        a, b = (aqmchain.simulate(m, slots=20_000, replications=3, seed=5, threads=t, discretised=disc) for t in (1, 3))
        assert (a.mean_queue, a.loss, a.mean_avg, a.ci["loss"], a.events) == \
            (b.mean_queue, b.loss, b.mean_avg, b.ci["loss"], b.events)
