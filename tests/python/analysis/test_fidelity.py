"""Automatic grids and the discretisation error estimate.

Oracles: the same model on a much finer uniform grid (the chain converges to the
continuous-avg model as the step goes to 0), the simulator with continuous avg (within its
confidence interval), and the grids' own construction rules.
"""

import json

import numpy as np
import pytest

import aqmchain
from aqmchain import _core
from cli_helpers import run_cli, to_toml
from conftest import BASE_DOC

# Heavy load on a small buffer: RED must drop 40 % of the packets, so avg sits on max_th = 40
# where p jumps from 0.1 to 1 -- the case where a uniform grid is badly off.
HEAVY = dict(buffer=60, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.3),
             aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(20, 40, 0.1), w=0.02))


def heavy(**grid):
    return aqmchain.Model(grid=aqmchain.GridSpec(**grid), **HEAVY)


@pytest.fixture(scope="module")
def fine():
    """Uniform step 1/256 everywhere: 15,361 grid points (the reference for the coarser grids)."""
    return aqmchain.solve_stationary(heavy(k=256))


@pytest.fixture(scope="module")
def auto():
    return aqmchain.solve_stationary(heavy(k=4, refine="auto"), error_estimate=True)


def test_uniform_quarter_grid_is_badly_off_and_the_automatic_grid_is_not(fine, auto):
    k4 = aqmchain.solve_stationary(heavy(k=4))
    assert abs(k4.var_queue / fine.var_queue - 1) > 0.2  # the failure the refinement cures
    for name in ("mean_queue", "loss", "mean_response"):
        assert getattr(auto, name) == pytest.approx(getattr(fine, name), rel=0.01), name
    for name in ("var_queue", "var_response"):
        assert getattr(auto, name) == pytest.approx(getattr(fine, name), rel=0.03), name
    # far fewer states than the uniform fine grid
    assert auto.states < 0.1 * fine.states


def test_grid_report_describes_the_refinement(auto):
    g = auto.grid
    assert g["refined"] and g["refine"] == "auto"
    assert g["jumps"] == [40.0]
    (lo, hi), = g["mass_ranges"]
    assert lo < 40 < hi
    assert g["min_step"] == pytest.approx(1 / 256, rel=0.5)
    assert g["max_step"] == pytest.approx(0.25)
    assert any(a < 40 < b for a, b, _ in g["refined_ranges"])
    assert g["points"] == len(auto.avg_grid)
    assert g["states"] == auto.states
    assert abs(g["estimated_states"] / auto.states - 1) < 0.25
    assert 40.0 in list(auto.avg_grid)  # breakpoints are grid points
    assert "grid_presolve" in auto.info.seconds


def test_error_bar_holds_the_fine_grid_value(fine, auto):
    est = auto.error_estimate
    assert [g["step_factor"] for g in est.grids] == [4, 2, 1]
    assert est.grids[0]["states"] < est.grids[1]["states"] < est.grids[2]["states"] == auto.states
    for name in ("mean_queue", "var_queue", "loss", "mean_response", "var_response", "mean_avg"):
        e = est[name]
        assert e.value == getattr(auto, name)
        lo, hi = est.interval(name)
        assert lo <= getattr(fine, name) <= hi, (name, e, getattr(fine, name))
        assert e.method in ("richardson", "fit", "converged")
    # the bar is informative, not a blanket
    assert est["var_queue"].error < 0.05 * auto.var_queue


def test_automatic_grid_against_continuous_avg_simulation(auto):
    """The simulator integrates avg exactly (no grid); its 95 % interval meets the error bar."""
    sim = aqmchain.simulate(heavy(k=4), slots=20_000_000, replications=4, seed=11)
    for name in ("mean_queue", "var_queue", "loss", "mean_response"):
        lo, hi = auto.error_estimate.interval(name)
        s, hw = getattr(sim, name), sim.ci[name]
        assert hi >= s - 2 * hw and lo <= s + 2 * hw, (name, lo, hi, s, hw)


def test_richardson_order_on_a_model_with_clean_convergence():
    """On a uniform-grid model the grids 1, 1/2, 1/4 converge at a clean order and the
    extrapolation lands closer to the fine-grid value than the finest grid does."""
    m = heavy(k=16)
    r = aqmchain.solve_stationary(m, error_estimate=True)
    ref = aqmchain.solve_stationary(heavy(k=256))
    e = r.error_estimate["var_queue"]
    assert e.method == "richardson" and 0.5 <= e.order <= 2
    assert abs(e.extrapolated - ref.var_queue) < abs(e.value - ref.var_queue)


@pytest.fixture
def one_thread():
    before = aqmchain.num_threads()
    aqmchain.set_num_threads(1)
    yield
    aqmchain.set_num_threads(before)


def test_every_class_metric_is_extrapolated_from_the_same_three_grids(one_thread):
    """With traffic classes the estimate covers each class's metrics ("<class>.<metric>"):
    the same extrapolation of the class's values on the grids with 4x, 2x and 1x the step,
    here solved again one by one on the every-4th and every-2nd point grids (breakpoints kept).
    One thread: the same solves then give the same bits whatever else the machine runs."""
    m = aqmchain.Model(grid=aqmchain.GridSpec(k=2),
                       classes=[aqmchain.TrafficClass("a", 0.3), aqmchain.TrafficClass("b", 0.7)],
                       **dict(HEAVY, buffer=20, aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(6, 14, 0.1), w=0.02)))
    r = aqmchain.solve_stationary(m, error_estimate=True)
    est = r.error_estimate
    points = [float(x) for x in r.avg_grid]
    keep = m.resolved_drop().breakpoints(m.buffer)
    coarse = [aqmchain.solve_stationary(m.with_grid(aqmchain.GridSpec(points=_core.coarsen_points(points, f, keep))))
              for f in (4, 2)]
    for cls in ("a", "b"):
        for key in ("loss", "throughput", "mean_queue", "mean_response"):
            e = est[f"{cls}.{key}"]
            vals = [getattr(c.classes[cls], key) for c in coarse] + [getattr(r.classes[cls], key)]
            ref = _core.extrapolate([4.0, 2.0, 1.0], vals)
            assert e.value == getattr(r.classes[cls], key)
            assert (e.extrapolated, e.error, e.method) == (ref.extrapolated, ref.error, ref.method), (cls, key)
    assert "a.loss" in est.to_json()["error_estimate"]
    # without classes no per-class names
    assert not any("." in k for k in aqmchain.solve_stationary(heavy(k=2), error_estimate=True).error_estimate.metrics)


def test_plain_grid_left_alone_and_budget_reported():
    r = aqmchain.solve_stationary(heavy(k=4))
    assert r.grid["refined"] is False and r.grid["refine"] == "none"
    assert r.grid["points"] == 241
    free = aqmchain.refine_grid(heavy(k=4, refine="auto"))[1]
    assert free["estimated_states"] > 1.1 * r.states
    budget = 0.5 * (free["estimated_states"] + r.states)
    b = aqmchain.solve_stationary(heavy(k=4, refine="auto", state_budget=budget))
    assert b.grid["budget_limited"] and b.grid["budget_factor"] >= 2 and "state_budget" in b.grid["note"]
    assert b.grid["estimated_states"] <= budget
    assert b.grid["min_step"] > free["min_step"]
    # a budget below the plain grid itself: no refinement, said so
    low = aqmchain.refine_grid(heavy(k=4, refine="auto", state_budget=1000))[1]
    assert "refinement dropped" in low["note"]


def test_scenario_shares_one_automatic_grid():
    light = aqmchain.Model(grid=aqmchain.GridSpec(k=4, refine="auto"),
                           **{**HEAVY, "service": aqmchain.Service(0.6)})
    sc = aqmchain.Scenario([aqmchain.Phase(200, light), aqmchain.Phase(300, heavy(k=4, refine="auto"))])
    refined, rep = aqmchain.refine_grid(sc)
    assert len(rep["mass_ranges"]) == 2 and rep["jumps"] == [40.0]
    assert list(refined.phases[0].model.grid.points) == list(refined.phases[1].model.grid.points)
    tr = aqmchain.solve_transient(sc, [100, 500])
    assert tr.mean_queue[-1] > tr.mean_queue[0]
    assert len(tr.avg_grid) == rep["points"]


def test_build_chain_and_discretised_simulation_resolve_the_grid():
    m = heavy(k=4, refine="auto")
    c = aqmchain.build_chain(m)
    refined, rep = aqmchain.refine_grid(m)
    assert c.n == aqmchain.build_chain(refined).n
    assert len(c.grid) == rep["points"]
    with pytest.raises(aqmchain.ModelError, match="grid.refine"):
        _core.build_chain(m)  # the core refuses an unresolved automatic grid, naming the key
    s = aqmchain.simulate(m, slots=200_000, replications=2, discretised=True)
    assert s.mean_queue > 30


def test_model_file_defaults_to_auto_and_round_trips():
    doc = json.loads(json.dumps(BASE_DOC))
    del doc["grid"]["refine"]
    m, _ = aqmchain.model_from_dict(doc)
    assert m.grid.refine == "auto" and m.grid.step_min == pytest.approx(1 / 256)
    back = aqmchain.model_to_dict(m)
    assert back["grid"]["refine"] == "auto" and back["grid"]["state_budget"] == 4e6
    doc["grid"] = {"points": [0, 5, 20]}
    assert aqmchain.model_from_dict(doc)[0].grid.refine == "none"
    doc["grid"] = {"mapping": "nearest"}
    assert aqmchain.model_from_dict(doc)[0].grid.refine == "none"
    doc["grid"] = {"k": 2, "refine": "auto", "step_min": 0.01, "state_budget": 1e5, "growth": 1.2}
    g = aqmchain.model_from_dict(doc)[0].grid
    assert (g.step_min, g.state_budget, g.growth) == (0.01, 1e5, 1.2)


@pytest.mark.parametrize("grid,param,bound", [
    ({"refine": "sometimes"}, "grid.refine", "one of auto, none"),
    ({"refine": "auto", "mapping": "nearest"}, "grid.refine", "split"),
    ({"refine": "auto", "points": [0, 20]}, "grid.points", "absent"),
    ({"step_min": 0}, "grid.step_min", "(0, 1]"),
    ({"growth": 3}, "grid.growth", "[1.01, 2]"),
    ({"mass_tol": 0.5}, "grid.mass_tol", "(0, 0.01]"),
    ({"state_budget": 10}, "grid.state_budget", "[1000, 1000000000]"),
    ({"presolve_k": 100}, "grid.presolve_k", "[1, 64]"),
    ({"p_step": "x"}, "grid.p_step", "number"),
])
def test_bad_grid_options_are_named(grid, param, bound):
    doc = json.loads(json.dumps(BASE_DOC))
    doc["grid"] = grid
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == param and bound in str(e.value), str(e.value)


def test_error_estimate_refuses_flags_mapping():
    m = aqmchain.Model(grid=aqmchain.GridSpec(mapping="flags"), **HEAVY)
    with pytest.raises(aqmchain.OptionError, match="error_estimate"):
        aqmchain.solve_stationary(m, error_estimate=True)


def test_cli_error_estimate_json(tmp_path):
    doc = json.loads(json.dumps(BASE_DOC))
    doc["grid"] = {"k": 4}  # the file default: automatic
    doc["service"]["mu"] = 0.3
    f = tmp_path / "m.toml"
    f.write_text(to_toml(doc))
    out = tmp_path / "out.json"
    code, stdout, stderr = run_cli("solve", str(f), "--error-estimate", "--json", str(out))
    assert code == 0, stderr
    res = json.loads(out.read_text())
    assert "discretisation error estimate" in stdout
    assert res["grid"]["refine"] == "auto"
    for name in ("mean_queue", "var_queue", "loss", "mean_response", "var_response"):
        e = res["error_estimate"][name]
        assert e["value"] == res[name]  # the plain keys are the values on the grid used
        assert set(e) == {"value", "extrapolated", "error", "order", "method"}
        assert np.isfinite(e["extrapolated"]) and e["error"] >= 0
    assert [g["step_factor"] for g in res["error_estimate_grids"]] == [4, 2, 1]
