"""Ensembles of simulated replications of piecewise-constant scenarios against the exact transient law.

With ``discretised=True`` the chain is the simulator's exact law, so the ensemble mean at
time t estimates p_t = p_0 P_1^t1 P_2^t2 ... (p_0: empty system, avg 0, modulator
stationary) computed densely here with numpy.  The checks compare within a few 95 %
half-widths: they fail when the law is wrong, and no value is pinned to a seed.
"""

import numpy as np
import pytest

import aqmchain

from ensemble_oracle import DenseLaw, check_against_law, model, z


def test_single_phase_matches_the_exact_transient_law():
    sc = aqmchain.Scenario([aqmchain.Phase(300, model())])
    times = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 300]
    res = aqmchain.simulate_scenario(sc, times, replications=4000, seed=5, discretised=True)
    law = DenseLaw(sc).at(times)
    assert res.replications == 4000 and list(res.times) == times
    assert res.mean_queue[0] == 0.0 and res.mean_queue_hw[0] == 0.0  # n <= 1 after one slot
    check_against_law(res, law, "single phase")
    # the check can fail: a law with a different service rate is far outside
    other = DenseLaw(aqmchain.Scenario([aqmchain.Phase(300, model(mu=0.45))])).at(times)
    assert np.max(z(res.mean_queue, res.mean_queue_hw, other["mq"])) > 6


def test_two_phase_load_step_rises_then_falls_and_follows_the_law():
    low, high = model(alpha=0.25), model(alpha=0.85)
    sc = aqmchain.Scenario([aqmchain.Phase(200, low, "low"), aqmchain.Phase(200, high, "high"),
                            aqmchain.Phase(200, low, "low again")])
    times = np.arange(10, 601, 10)
    res = aqmchain.simulate_scenario(sc, times, replications=2000, seed=8, discretised=True)
    i200, i400, i600 = 19, 39, 59
    assert res.mean_queue[i400] - res.mean_queue[i200] > 10 * (res.mean_queue_hw[i400] + res.mean_queue_hw[i200])
    assert res.mean_queue[i400] - res.mean_queue[i600] > 10 * (res.mean_queue_hw[i400] + res.mean_queue_hw[i600])
    assert res.losses[i400] > res.losses[i200] and res.loss_rate[i400] > 0.1
    check_against_law(res, DenseLaw(sc).at(times), "load step")


def test_state_carries_across_a_phase_boundary():
    # The slots right after the boundary follow p_b P_2^s: the queue built up in the first
    # phase is still there (no restart from the empty system), and the second phase's
    # parameters hold from slot b + 1 on.
    high, low = model(alpha=0.9), model(alpha=0.1)
    sc = aqmchain.Scenario([aqmchain.Phase(100, high), aqmchain.Phase(100, low)])
    times = [98, 99, 100, 101, 102, 103, 105, 110, 130, 200]
    res = aqmchain.simulate_scenario(sc, times, replications=4000, seed=2, discretised=True)
    law = DenseLaw(sc).at(times)
    check_against_law(res, law, "boundary")
    # a system restarted empty at the boundary, or switched one slot late, is rejected
    late = DenseLaw(aqmchain.Scenario([aqmchain.Phase(101, high), aqmchain.Phase(99, low)])).at(times)
    assert np.max(z(res.mean_queue, res.mean_queue_hw, late["mq"])) > 6
    fresh = DenseLaw(aqmchain.Scenario([aqmchain.Phase(100, low)])).at([1, 2, 3, 5, 10, 30, 100])
    assert res.mean_queue[3] - fresh["mq"][0] > 10 * res.mean_queue_hw[3]


def test_continuous_avg_ensemble_is_close_to_the_chain():
    # continuous avg is not the chain's exact law; the means agree to the grid's resolution
    sc = aqmchain.Scenario([aqmchain.Phase(150, model(alpha=0.6))])
    times = [50, 100, 150]
    res = aqmchain.simulate_scenario(sc, times, replications=3000, seed=4)
    law = DenseLaw(sc).at(times)
    assert np.all(np.abs(res.mean_queue - law["mq"]) < 0.1 * law["mq"] + res.mean_queue_hw)


def test_results_do_not_depend_on_the_thread_count():
    sc = aqmchain.Scenario([aqmchain.Phase(500, model(alpha=0.5)), aqmchain.Phase(500, model(alpha=0.9))])
    times = np.arange(1, 1001, 7)
    runs = [aqmchain.simulate_scenario(sc, times, replications=37, seed=11, threads=th, discretised=d)
            for d in (False, True) for th in (1, 2, 5)]
    for a, b in ((runs[0], runs[1]), (runs[0], runs[2]), (runs[3], runs[4]), (runs[3], runs[5])):
        for name in aqmchain.EnsembleResult.array_names():
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert runs[1].threads == 2 and runs[2].threads == 5
    other = aqmchain.simulate_scenario(sc, times, replications=37, seed=12)
    assert not np.array_equal(other.mean_queue, runs[0].mean_queue)


def test_output_arrays_and_intervals():
    sc = aqmchain.Scenario([aqmchain.Phase(50, model(alpha=0.5)), aqmchain.Phase(70, model(alpha=0.7))])
    res = aqmchain.simulate_scenario(sc, np.array([10.0, 50, 51, 120]), replications=50)
    assert res.times.dtype == np.int64 and list(res.times) == [10, 50, 51, 120]
    for name in aqmchain.EnsembleResult.array_names():
        arr = getattr(res, name)
        # p_max over time only under adaptive RED
        assert arr.shape == ((0,) if name.startswith("mean_p_max") else (4,)) and not arr.flags.writeable
    # interval (50, 51] holds one slot: at most one arrival per replication
    assert 0 <= res.arrivals[2] <= 1 and res.arrivals[0] <= 10
    assert res.replications == 50


def expect(param, fn):
    with pytest.raises(aqmchain.ModelError) as exc:
        fn()
    assert param in str(exc.value), str(exc.value)
    return exc.value


def test_bad_inputs_name_the_parameter():
    sc = aqmchain.Scenario([aqmchain.Phase(100, model(alpha=0.5))])
    run = aqmchain.simulate_scenario
    expect("times", lambda: run(sc, []))
    assert expect("times[1]", lambda: run(sc, [5, 5])).param == "times[1]"
    expect("times[2]", lambda: run(sc, [5, 6, 4]))
    expect("times[0]", lambda: run(sc, [-1]))  # t = 0 is the initial state (accepted)
    expect("times[1]", lambda: run(sc, [5, 101]))
    expect("times[0]", lambda: run(sc, [2.5]))
    expect("times[0]", lambda: run(sc, [float("nan")]))
    expect("times", lambda: run(sc, [[1, 2], [3, 4]]))
    expect("times", lambda: run(sc, ["a"]))
    expect("times", lambda: run(sc, "10"))
    assert expect("replications", lambda: run(sc, [10], replications=1)).param == "replications"
    expect("replications", lambda: run(sc, [10], replications=2.5))
    expect("threads", lambda: run(sc, [10], threads=-1))
    expect("discretised", lambda: run(sc, [10], discretised="yes"))
    expect("seed", lambda: run(sc, [10], seed=-1))
    expect("memory_limit_bytes", lambda: run(sc, [10], memory_limit_bytes=0))
    expect("replicas", lambda: run(sc, [10], replicas=10))
    expect("scenario", lambda: run(model(alpha=0.5), [10]))
    with pytest.raises(aqmchain.StateSpaceTooLarge):
        run(sc, np.arange(1, 101), memory_limit_bytes=1000)
    # continuous-time scenarios are simulated event by event, at whole output times (time units)
    cont = aqmchain.Scenario([aqmchain.Phase(10.0, model(time="continuous"))])
    assert expect("times[0]", lambda: run(cont, [2.5])).param == "times[0]"
    # scenario construction: named phase errors
    expect("phase[1].buffer", lambda: aqmchain.Scenario([aqmchain.Phase(10, model(alpha=0.5)),
                                                         aqmchain.Phase(10, model(alpha=0.5, buffer=12))]))
    expect("phase[0].duration", lambda: aqmchain.Scenario([aqmchain.Phase(0, model(alpha=0.5))]))
    expect("phase[0].slots", lambda: aqmchain.Scenario([aqmchain.Phase(2.5, model(alpha=0.5))]))
    expect("scenario.phase", lambda: aqmchain.Scenario([]))
    expect("phase[1]", lambda: aqmchain.Scenario([aqmchain.Phase(10, model(alpha=0.5)), "x"]))
    expect("phase.model", lambda: aqmchain.Phase(10, "not a model"))
    expect("phase.duration", lambda: aqmchain.Phase("ten", model(alpha=0.5)))


def test_scenario_binding():
    a, b = model(alpha=0.3), model(alpha=0.9)
    sc = aqmchain.Scenario([aqmchain.Phase(3000, a, "low"), aqmchain.Phase(duration=3000, model=b, label="high"),
                            aqmchain.Phase(3000, a)])
    assert len(sc) == 3 and sc.total_duration() == 9000
    assert list(sc.boundaries()) == [0, 3000, 6000, 9000]
    assert sc.phase_at(2999) == 0 and sc.phase_at(3000) == 1 and sc.phase_at(9000) == 2
    assert [p.label for p in sc.phases] == ["low", "high", ""]
    assert sc.phases[1].model.source.arrival == [0.9] and sc.phases[0].duration == 3000
    sc.validate()


def test_discretised_ensemble_resolves_an_automatic_grid():
    # an automatic grid is resolved once for the scenario, as solve_transient resolves it:
    # the ensemble then follows the transient chain's law
    auto = [aqmchain.Model(buffer=m.buffer, source=m.source, service=m.service, aqm=m.aqm,
                           grid=aqmchain.GridSpec(k=2, refine="auto")) for m in (model(alpha=0.4), model(alpha=0.8))]
    sc = aqmchain.Scenario([aqmchain.Phase(60, auto[0]), aqmchain.Phase(80, auto[1])])
    times = np.arange(5, 141, 5)
    ens = aqmchain.simulate_scenario(sc, times, replications=4000, seed=21, discretised=True, threads=1)
    tr = aqmchain.solve_transient(sc, times)
    z = np.abs(tr.mean_queue - ens.mean_queue) / np.maximum(ens.mean_queue_hw, 1e-12)
    assert np.mean(z > 1.96) < 0.2 and z.max() < 4.5
