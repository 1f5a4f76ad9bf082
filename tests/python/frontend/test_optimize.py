"""The parameter search (aqmchain.optimize): known minima, constraints, failed evaluations,
the cache, start grids and the CLI."""

import copy
import csv
import io
import json
import math

import numpy as np
import pytest

import aqmchain
from aqmchain.optimize import CONSTRAINT_RTOL, GRADIENT_METHODS, PAPER_GRID_STARTS, triple_of
from cli_helpers import run_cli

DOC = {"model": {"buffer": 20}, "source": {"kind": "bernoulli", "alpha": 0.55}, "service": {"mu": 0.5},
       "aqm": {"drop": "red", "min_th": 4, "max_th": 14, "p_max": 0.2, "filter": "redwm", "triple": [0.2, 0.1, 0.05]},
       "grid": {"k": 2, "refine": "none"}}
MODEL = aqmchain.model_from_dict(DOC)[0]
TARGET = np.array([0.03, 0.004, 0.002])
SCALE = np.array([0.01, 0.001, 0.001])


def quadratic(model):
    """A smooth function of the triple with its minimum 1 at TARGET (the model itself is the 'result')."""
    x = np.array(triple_of(model))
    return 1.0 + float(np.sum(((x - TARGET) / SCALE) ** 2))


class Counting:
    """evaluate(): the model itself, counting the calls and checking every model it sees is valid."""

    def __init__(self):
        self.calls = 0

    def __call__(self, model):
        self.calls += 1
        x = triple_of(model)
        assert min(x) >= 0 and sum(x) <= 1 + 1e-12
        return model


def quadratic_gradient(model, names):
    assert names == ["aqm.triple[0]", "aqm.triple[1]", "aqm.triple[2]"]
    return 2.0 * (np.array(triple_of(model)) - TARGET) / SCALE**2


@pytest.mark.parametrize("method", aqmchain.OPTIMIZE_METHODS)
def test_finds_the_minimum_of_a_smooth_function(method):
    ev = Counting()
    grad = quadratic_gradient if method in GRADIENT_METHODS else None
    res = aqmchain.optimize(MODEL, "triple", quadratic, method=method, starts=[[0.06, 0.0, 0.006]], evaluate=ev,
                            min_step=[1e-5, 1e-6, 1e-6], gradient=grad)
    assert res.success and res.value == pytest.approx(1.0, abs=1e-3)
    assert np.all(np.abs(np.array(list(res.x.values())) - TARGET) <= [1e-4, 1e-5, 1e-5]), res.x
    assert ev.calls == res.evaluations == sum(r["status"] == "ok" for r in res.trace)
    assert res.cache_hits > 0 or method != "hooke_jeeves"  # pattern search revisits its base points
    assert res.gradients == (0 if grad is None else len({tuple(r["x"].values()) for r in res.trace}))


def test_respects_constraints_and_never_evaluates_infeasible_points():
    ev = Counting()
    # minimise -(x + 2 y + 3 z): the search is driven onto the face x + y + z = 1 (a_1 = 0)
    res = aqmchain.optimize(MODEL, "triple", lambda m: -float(np.dot(triple_of(m),
                                                                    [1, 2, 3])),
                            starts=[[0.2, 0.1, 0.05]], step=[0.1, 0.1, 0.1], evaluate=ev)
    infeasible = [r for r in res.trace if r["status"] == "infeasible"]
    assert infeasible and all(r["value"] == math.inf for r in infeasible)
    assert ev.calls == res.evaluations  # nothing infeasible was evaluated
    for r in res.trace:
        x = np.array(list(r["x"].values()))
        feasible = x.min() >= 0 and x.max() <= 1 and x.sum() <= 1 + 1e-12 and x[0] + x[1] > 0
        assert (r["status"] == "ok") == feasible, r
    assert 1 - 2 * 0.1 / 64 <= sum(res.x.values()) <= 1 + 1e-12  # on the face, within the last step
    assert res.value < res.trace[0]["value"]
    assert any("x + y + z <= 1" in r["message"] for r in infeasible)
    # user bounds are constraints too
    res = aqmchain.optimize(MODEL, "triple", lambda m: -triple_of(m)[0], starts=[[0.1, 0.01, 0.01]],
                            bounds={"aqm.triple[0]": (0.05, 0.15)}, evaluate=Counting())
    assert all(0.05 <= r["x"]["aqm.triple[0]"] <= 0.15 for r in res.trace if r["status"] == "ok")
    assert any(r["x"]["aqm.triple[0]"] > 0.15 and r["status"] == "infeasible" for r in res.trace)
    assert res.x["aqm.triple[0]"] == pytest.approx(0.15, abs=0.01 / 64)


def test_failed_evaluations_are_recorded_not_fatal():
    def flaky(model):
        x = triple_of(model)
        if x[0] > 0.22:
            raise aqmchain.NonConvergenceError("stationary solve did not converge (test)", None)
        return aqmchain.solve_stationary(model)

    res = aqmchain.optimize(MODEL, "triple", "mean_queue", starts=[[0.2, 0.1, 0.05]], evaluate=flaky, max_evals=40)
    failed = [r for r in res.trace if r["status"] == "failed"]
    assert failed and all(r["value"] == math.inf and "did not converge" in r["message"] for r in failed)
    assert res.failed == len(failed) and res.success
    assert res.x["aqm.triple[0]"] <= 0.22
    # every evaluation failing: no exception, no best point, the messages kept
    res = aqmchain.optimize(MODEL, "triple", "mean_response", starts=[[0.2, 0.1, 0.05], [0.3, 0.0, 0.0]],
                            solver={"method": "power", "max_iter": 1})
    assert not res.success and res.x is None and res.failed == res.evaluations == 2
    assert all("did not converge" in r["message"] for r in res.trace)
    assert all(s["value"] == math.inf and "failed" in s["message"] for s in res.starts)


def test_search_on_a_real_chain_improves_and_reports_the_point_it_found():
    res = aqmchain.optimize(MODEL, "triple", "mean_response", starts=[[0.2, 0.1, 0.05]], step=[0.05, 0.02, 0.02],
                            min_step=[0.01, 0.005, 0.005])
    start = aqmchain.solve_stationary(MODEL).mean_response
    again = aqmchain.solve_stationary(res.model).mean_response
    assert res.value == again < start
    assert list(res.model.aqm.b) == [res.x["aqm.triple[0]"], res.x["aqm.triple[1]"]]
    assert res.evaluations == len({tuple(r["x"].values()) for r in res.trace if r["status"] != "infeasible"})


def test_ewma_models_search_w_or_start_the_triple_from_w():
    ewma = copy.deepcopy(DOC)
    ewma["aqm"] = {"drop": "red", "min_th": 4, "max_th": 14, "p_max": 0.2, "w": 0.05}
    m = aqmchain.model_from_dict(ewma)[0]
    res = aqmchain.optimize(m, ["w"], "mean_queue", max_evals=30)
    assert res.params == ["aqm.w"] and res.trace[0]["x"] == {"aqm.w": 0.05}
    assert res.value <= aqmchain.solve_stationary(m).mean_queue
    res = aqmchain.optimize(m, "triple", "mean_queue", max_evals=1)
    assert res.trace[0]["x"] == {"aqm.triple[0]": 0.05, "aqm.triple[1]": 0.0, "aqm.triple[2]": 0.0}
    assert res.value == aqmchain.solve_stationary(m).mean_queue  # [w, 0, 0] is the EWMA chain
    assert res.stopped and "max_evals" in res.message


def test_start_grids_and_bad_arguments():
    grid = PAPER_GRID_STARTS
    assert len(grid) == 1000 and grid[0] == (0.001, 0.0, 0.0) and grid[-1] == (0.091, 0.009, 0.009)
    for name in ("paper", "paper-grid"):
        res = aqmchain.optimize(MODEL, "triple", quadratic, evaluate=lambda m: m, max_evals=5, starts=name)
        assert res.stopped and res.evaluations == 5
        assert tuple(res.trace[0]["x"].values()) == grid[0]
    res = aqmchain.optimize(MODEL, ["aqm.p_max", "service.mu"], lambda m: m.aqm.drop.p_max + m.service.mu,
                            evaluate=lambda m: m, starts={"p_max": [0.1, 0.2], "mu": [0.4, 0.6]},
                            bounds={"aqm.p_max": (0.05, 1), "service.mu": (0.3, 1)}, min_step=0.01)
    assert len(res.starts) == 4 and res.x == pytest.approx({"aqm.p_max": 0.05, "service.mu": 0.3}, abs=0.01)
    for kwargs, param in [({"params": "aqm.nothing"}, "params"), ({"params": "a"}, "params"),
                          ({"objective": "mean_nothing"}, "objective"), ({"method": "simplex"}, "method"),
                          ({"starts": "seed000"}, "starts"), ({"starts": [[0.1, 0.2]]}, "starts[0]"),
                          ({"params": ["aqm.p_max"], "starts": "paper-grid"}, "starts"),
                          ({"step": [0.1, -0.1, 0.1]}, "step")]:
        with pytest.raises(aqmchain.ModelError) as exc:
            aqmchain.optimize(MODEL, **kwargs)
        assert exc.value.param == param, (kwargs, str(exc.value))


def test_trace_csv_and_json_and_the_cli(tmp_path, root):
    res = aqmchain.optimize(MODEL, "triple", "mean_response", starts=[[0.2, 0.1, 0.05]], max_evals=6)
    rows = list(csv.DictReader(io.StringIO(res.trace_csv())))
    assert len(rows) == len(res.trace) and rows[0]["aqm.triple[0]"] == "0.2" and rows[0]["status"] == "ok"
    json.dumps(res.to_dict(), allow_nan=False)
    path = tmp_path / "m.toml"
    path.write_text(
        '[model]\nbuffer = 20\n[source]\nkind = "bernoulli"\nalpha = 0.55\n[service]\nmu = 0.5\n'
        '[aqm]\ndrop = "red"\nmin_th = 4\nmax_th = 14\np_max = 0.2\nfilter = "redwm"\ntriple = [0.2, 0.1, 0.05]\n'
        '[grid]\nk = 2\n')
    out, trace = tmp_path / "o.json", tmp_path / "t.csv"
    code, _, err = run_cli("optimize", path, "--params", "triple", "--objective", "mean_response",
                           "--starts", "0.2,0.1,0.05;0.1,0,0", "--max-evals", "8", "--json", out, "--csv", trace)
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["evaluations"] == 8 and len(d["starts"]) >= 1 and d["x"] is not None
    assert "optimize: start 1" in err and trace.read_text().startswith("index,start,aqm.triple[0]")
    for name in ("paper", "paper-grid"):  # the REDwM paper's start grid, under both names
        code, _, err = run_cli("optimize", path, "--starts", name, "--max-evals", "3", "--json", out, "-q")
        assert code == 0, err
        assert json.loads(out.read_text())["trace"][0]["x"]["aqm.triple[0]"] == 0.001
    code, _, err = run_cli("optimize", path, "--starts", "seed000")
    assert code == 2 and "--starts" in err
    code, _, err = run_cli("optimize", path, "--objective", "mean_nothing")
    assert code == 2 and "objective" in err
    code, _, err = run_cli("optimize", path, "--starts", "0.9,0.9,0.9", "-q")
    assert code == 3  # the only start is infeasible: nothing evaluated


# ------------------------------------------------------------------ gradient methods on real chains

RED = {"model": {"buffer": 30}, "source": {"kind": "bernoulli", "alpha": 0.5}, "service": {"mu": 0.5},
       "aqm": {"drop": "red", "min_th": 5, "max_th": 15, "p_max": 0.1, "w": 0.2}, "grid": {"k": 2, "refine": "none"}}


def red_at(**aqm):
    doc = copy.deepcopy(RED)
    doc["aqm"].update(aqm)
    return aqmchain.model_from_dict(doc)[0]


def test_gradient_methods_find_the_constrained_optimum_of_a_red_chain():
    """Minimise the loss over p_max subject to mean_queue <= 5: the loss grows and the mean queue
    falls with p_max, so the optimum is the p_max where mean_queue = 5, found here independently by
    bisection on the chain's solves."""
    from scipy.optimize import brentq

    root = brentq(lambda p: aqmchain.solve_stationary(red_at(p_max=p), tol=1e-13).mean_queue - 5.0, 0.01, 1.0,
                  xtol=1e-12)
    for method, start in (("slsqp", 0.9), ("slsqp", 0.05), ("hooke_jeeves", 0.9)):
        res = aqmchain.optimize(red_at(), ["aqm.p_max"], "loss", method=method, starts=[[start]],
                                bounds={"aqm.p_max": (0.01, 1.0)}, constraints="mean_queue<=5",
                                min_step=1e-6)
        assert res.success, res.summary()
        best = aqmchain.solve_stationary(res.model)
        assert best.mean_queue <= 5.0 * (1 + CONSTRAINT_RTOL)
        tol = 1e-6 if method == "slsqp" else 2e-6  # SLSQP ends on the constraint, the pattern search within a step
        assert res.x["aqm.p_max"] == pytest.approx(root, abs=tol), (method, start, res.x)
        assert res.value == best.loss
        if method == "slsqp":
            assert res.gradients >= 1 and res.gradient_seconds > 0 and "successfully" in res.starts[0]["message"]
            assert res.evaluations <= 30  # the exact gradients: tens of solves, not hundreds
    # the direct search never takes a violating point as its best: every 'ok' record better than the
    # best violates the constraint
    viol = [r for r in res.trace if r["status"] == "infeasible" and "violates" in r["message"]]
    assert viol and all(r["x"]["aqm.p_max"] < root for r in viol)


def test_lbfgsb_ends_on_the_bound_where_the_metric_is_monotone():
    # the loss grows with p_max: the minimum over [0.02, 0.8] is at 0.02
    res = aqmchain.optimize(red_at(p_max=0.5), ["aqm.p_max", "aqm.w"], "loss", method="lbfgsb",
                            bounds={"aqm.p_max": (0.02, 0.8), "aqm.w": (0.2, 0.2)})
    assert res.success and res.x["aqm.p_max"] == pytest.approx(0.02, abs=1e-9)
    assert res.value == pytest.approx(aqmchain.solve_stationary(red_at(p_max=0.02)).loss, rel=1e-9)


def test_gradient_methods_refuse_what_has_no_gradient():
    m = red_at()
    cases = [({"objective": lambda r: r.loss}, "gradient"),  # a callable objective needs its gradient
             ({"params": ["model.buffer"]}, "params"),  # not a continuous parameter
             ({"evaluate": lambda mm: aqmchain.solve_stationary(mm)}, "gradient"),
             ({"constraints": "loss<0.1"}, "constraints[0]"), ({"constraints": "nothing<=1"}, "constraints[0]"),
             ({"constraints": "loss<=0.1", "gradient": lambda r, n: [0.0], "objective": lambda r: r.loss},
              "constraints")]
    for kwargs, param in cases:
        kwargs = {"params": ["aqm.p_max"], "objective": "loss", "method": "slsqp", **kwargs}
        with pytest.raises(aqmchain.ModelError) as exc:
            aqmchain.optimize(m, **kwargs)
        assert exc.value.param == param, (kwargs, str(exc.value))
    with pytest.raises(aqmchain.ModelError) as exc:  # a gradient for a direct search is a mistake
        aqmchain.optimize(m, ["aqm.p_max"], "loss", gradient=lambda r, n: [0.0])
    assert exc.value.param == "gradient"
    # front drop's response time comes from the tagged-packet chain: no sensitivity, so no gradient
    front = aqmchain.model_from_dict({**RED, "aqm": {**RED["aqm"], "policy": "front"}})[0]
    with pytest.raises(aqmchain.ModelError) as exc:
        aqmchain.optimize(front, ["aqm.p_max"], "mean_response", method="slsqp", bounds={"aqm.p_max": (0.01, 1)})
    assert exc.value.param == "objective"


def test_the_cli_runs_a_constrained_gradient_search(tmp_path):
    path = tmp_path / "red.toml"
    path.write_text('[model]\nbuffer = 30\n[source]\nkind = "bernoulli"\nalpha = 0.5\n[service]\nmu = 0.5\n'
                    '[aqm]\ndrop = "red"\nmin_th = 5\nmax_th = 15\np_max = 0.1\nw = 0.2\n'
                    '[grid]\nk = 2\nrefine = "none"\n')
    out = tmp_path / "o.json"
    code, _, err = run_cli("optimize", path, "--params", "aqm.p_max", "--objective", "loss", "--method", "slsqp",
                           "--constraint", "mean_queue<=5", "--bounds", "aqm.p_max=0.01:1", "--json", out, "-q")
    assert code == 0, err
    d = json.loads(out.read_text())
    again = aqmchain.solve_stationary(red_at(p_max=d["x"]["aqm.p_max"]))
    assert again.mean_queue <= 5 * (1 + 1e-9) and d["value"] == again.loss and d["gradients"] >= 1
    code, _, err = run_cli("optimize", path, "--params", "aqm.p_max", "--objective", "loss", "--method", "slsqp",
                           "--constraint", "mean_queue=5", "-q")
    assert code == 2 and "--constraint" in err
    code, _, err = run_cli("optimize", path, "--params", "aqm.p_max", "--objective", "loss", "--method", "slsqp",
                           "--constraint", "mean_queue<=5", "--bounds", "aqm.p_max=0.01:1", "--fidelity",
                           "grid.k=1,grid.refine=none", "--json", out, "-q")
    assert code == 0, err
    multi = json.loads(out.read_text())
    assert [lv["level"] for lv in multi["levels"]] == [0, 1] and multi["value_error"] > 0
    assert multi["x"]["aqm.p_max"] == pytest.approx(d["x"]["aqm.p_max"], abs=1e-7)
    code, _, err = run_cli("optimize", path, "--params", "aqm.p_max", "--fidelity", "grid.k", "-q")
    assert code == 2 and "--fidelity" in err


# ------------------------------------------------------------------ multi-fidelity

def test_multi_fidelity_levels_error_bar_and_early_stop():
    """A smooth objective plus a 'discretisation error' 0.3 / k that shrinks with the grid's k."""
    coarse = [{"grid.k": 1}, {"grid.k": 2}]
    model = aqmchain.model_from_dict({**DOC, "grid": {"k": 4, "refine": "none"}})[0]

    def objective(m):
        return quadratic(m) + 0.3 / m.grid.k

    res = aqmchain.optimize(model, "triple", objective, starts=[[0.06, 0.0, 0.006], [0.01, 0.008, 0.0]],
                            evaluate=lambda m: m, fidelity=coarse, min_step=[1e-5, 1e-6, 1e-6])
    assert res.success and [lv["level"] for lv in res.levels][:2] == [0, 1]
    assert res.levels[0]["starts"] == 2 and res.levels[1]["starts"] <= 2  # the distinct best end points go on
    # level 1 starts at level 0's optimum: the search improves by less than the error 0.3/1 - 0.3/2 = 0.15, so
    # the point is evaluated on the finest level only, and the error bar is 0.3/2 - 0.3/4
    assert res.levels[1]["discretisation_error"] == pytest.approx(0.15, abs=1e-9)
    assert res.levels[1]["improvement"] < 0.15 and "evaluated" in res.levels[-1]["note"]
    assert res.levels[-1]["level"] == 2 and res.levels[-1]["evaluations"] == 1
    assert res.value == pytest.approx(1.0 + 0.3 / 4, abs=1e-3) and res.value_error == pytest.approx(0.075, abs=1e-9)
    assert np.all(np.abs(np.array(list(res.x.values())) - TARGET) <= [1e-4, 1e-5, 1e-5])
    assert {r["level"] for r in res.trace} == {0, 1, 2} and res.evaluations == sum(
        r["status"] == "ok" for r in res.trace)
    assert "+- 0.075" in res.summary()
    every = aqmchain.optimize(model, "triple", objective, starts=[[0.06, 0.0, 0.006]], evaluate=lambda m: m,
                              fidelity=coarse, min_step=[1e-5, 1e-6, 1e-6], fidelity_stop=False)
    assert [lv["level"] for lv in every.levels] == [0, 1, 2] and not any(lv["note"] for lv in every.levels)
    assert every.value_error == pytest.approx(0.075, abs=1e-9)
    json.dumps(res.to_dict(), allow_nan=False)
    # bad fidelity lists name the parameter
    for bad, param in (({"grid.k": 1}, "fidelity"), ([], "fidelity"), ([{"grid.k": -1}], "fidelity[0]"),
                       (["grid.k=1"], "fidelity[0]")):
        with pytest.raises(aqmchain.ModelError) as exc:
            aqmchain.optimize(model, "triple", objective, evaluate=lambda m: m, fidelity=bad)
        assert exc.value.param == param


def test_multi_fidelity_on_a_red_chain_matches_the_single_level_search():
    model = red_at()
    kw = dict(method="slsqp", bounds={"aqm.p_max": (0.01, 1.0)}, constraints="mean_queue<=5", starts=[[0.9]])
    single = aqmchain.optimize(model, ["aqm.p_max"], "loss", **kw)
    multi = aqmchain.optimize(model, ["aqm.p_max"], "loss", fidelity=[{"grid.k": 1}], **kw)
    assert multi.x["aqm.p_max"] == pytest.approx(single.x["aqm.p_max"], abs=1e-7)
    assert multi.value == pytest.approx(single.value, rel=1e-9)
    coarse = aqmchain.solve_stationary(aqmchain.replace(model, grid={"k": 1}).replace(aqm={"p_max": multi.x["aqm.p_max"]}))
    assert multi.value_error == pytest.approx(abs(multi.value - coarse.loss), rel=1e-6)
    assert multi.levels[0]["evaluations"] > multi.levels[1]["evaluations"]  # the coarse level did the searching


@pytest.mark.parametrize("method", ["slsqp", "hooke_jeeves"])
def test_linear_constraints_on_the_parameters(method):
    """min sum(((x - T) / S)^2) subject to a.x <= b has the closed form x* = T - lam S^2 a,
    lam = (a.T - b) / (a.S^2 a), when the constraint cuts T off."""
    a, b = np.array([1.0, 10.0, 0.0]), 0.05
    lam = (a @ TARGET - b) / (a @ (SCALE**2 * a))
    expect = TARGET - lam * SCALE**2 * a
    ev = Counting()
    res = aqmchain.optimize(MODEL, "triple", quadratic, method=method, starts=[[0.01, 0.001, 0.0]], evaluate=ev,
                            constraints=["aqm.triple[0] + 10*aqm.triple[1] <= 0.05"], min_step=[1e-6, 1e-7, 1e-7],
                            gradient=quadratic_gradient if method == "slsqp" else None)
    got = np.array(list(res.x.values()))
    assert a @ got <= b * (1 + 1e-9)
    assert got == pytest.approx(expect, abs=1e-5 if method == "slsqp" else 2e-4)
    cut = [r for r in res.trace if r["status"] == "infeasible"]
    assert all("does not hold" in r["message"] or "x + y + z" in r["message"] for r in cut)
    assert ev.calls == res.evaluations  # a point off the linear constraint is never built
    for bad in ("aqm.triple[0] + service.mu <= 1", "2 * <= 1", "aqm.triple[0] + aqm.triple[1] <= x"):
        with pytest.raises(aqmchain.ModelError) as exc:
            aqmchain.optimize(MODEL, "triple", quadratic, evaluate=ev, constraints=[bad])
        assert exc.value.param == "constraints[0]", bad


def test_screening_a_global_design_searches_from_its_best_points():
    ev = Counting()
    res = aqmchain.optimize(MODEL, "triple", quadratic, evaluate=ev, starts="paper", screen=3,
                            bounds={"aqm.triple[0]": (0.001, 0.05)}, min_step=[1e-5, 1e-6, 1e-6])
    inside = [p for p in PAPER_GRID_STARTS if p[0] <= 0.05]
    screen = res.levels[0]
    assert screen["starts"] == screen["evaluations"] == len(inside) == 500 and "screening" in screen["note"]
    # the three best grid points by the objective start the searches
    best3 = sorted(inside, key=lambda p: float(np.sum(((np.array(p) - TARGET) / SCALE) ** 2)))[:3]
    assert [tuple(s["start"].values()) for s in res.starts] == best3
    assert np.all(np.abs(np.array(list(res.x.values())) - TARGET) <= [1e-4, 1e-5, 1e-5])
    assert ev.calls == res.evaluations
