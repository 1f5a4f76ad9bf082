"""No silent giants: the budgets (max_states, memory_limit_gb, tagged_max_states) refuse with
the key and the value that would do, before the expensive work; every command that builds a
chain reports the estimate made before building (JSON key ``estimate``, stderr when large);
the automatic method chooses by the chain's structure, fails fast and says what it tried."""

import json

import numpy as np
import pytest

import aqmchain
from aqmchain import _core
from cli_helpers import TRACEBACK, run_cli
from conftest import ROOT, solution_distance_bound, spec_to_doc

RED = {"drop": "red", "min_th": 2, "max_th": 6, "p_max": 0.4}
MMBP = {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.3, 0.7]], "arrival": [0.25, 0.85]}


def model_of(spec: dict, classes=None, **aqm) -> "aqmchain.Model":
    doc = spec_to_doc(spec)
    doc["aqm"].update(aqm)
    if classes:
        doc["class"] = classes
    return aqmchain.model_from_dict(doc)[0]


def small(**kw):
    s = {"buffer": 12, "mu": 0.5, "w": 0.35, "k": 2, "mapping": "split", "source": MMBP, **RED}
    s.update(kw)
    return s


CLASSES = [{"name": "a", "share": 0.3, "ecn": 0.5}, {"name": "b", "share": 0.7}]


def write_model(tmp_path, spec, name="m.toml", classes=None, **aqm) -> str:
    from cli_helpers import toml_value

    doc = spec_to_doc(spec)
    doc["aqm"].update(aqm)
    lines = []
    for section, table in doc.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
    for c in classes or []:
        lines.append("[[class]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in c.items()]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


# ---------------------------------------------------------------- max_states


def test_max_states_refuses_with_the_key_and_the_count_that_would_do():
    model = model_of(small())
    states = int(_core.count_reachable(model)["states"])  # the exploration alone, no budget
    assert aqmchain.stationary.OPTION_DEFAULTS["max_states"] >= 4_000_000  # the automatic grid's budget fits
    with pytest.raises(aqmchain.StateSpaceTooLarge) as e:
        aqmchain.solve_stationary(model, max_states=states - 1)
    assert e.value.param == "max_states"
    assert "max_states" in str(e.value) and f"to at least {states}" in str(e.value)
    # exactly the count is allowed, the same answer as without a budget
    r = aqmchain.solve_stationary(model, max_states=states)
    assert r.states == states
    with pytest.raises(aqmchain.OptionError, match="max_states"):
        aqmchain.solve_stationary(model, max_states=0)


def test_max_states_stops_the_exploration_early(monkeypatch):
    """A chain far above the budget is refused while it is explored: nothing is assembled."""
    model = model_of(small(buffer=200, w=0.002, k=4))
    with pytest.raises(aqmchain.StateSpaceTooLarge, match=r"more than \d+ reachable states \(\d+ explored so far\)"):
        aqmchain.build_chain(model, max_states=5000)


def test_cli_refusal_names_the_model_file_key(tmp_path):
    path = write_model(tmp_path, small())
    code, out, err = run_cli("solve", path, "--set", "solver.max_states=100", "-q")
    assert code == 2 and TRACEBACK not in err
    assert "solver.max_states" in err and "raise" in err and out == ""


# ---------------------------------------------------------------- the tagged chain


def test_tagged_chain_budget_refuses_before_the_solve(monkeypatch):
    model = model_of(small(), policy="front")
    chain = aqmchain.build_chain(model)
    tagged = int(np.asarray(chain.labels["level"], dtype=np.int64).sum())  # one state per packet position
    assert _core.check_tagged_budget(chain, "auto") == tagged
    assert _core.check_tagged_budget(chain, "none") == 0
    calls = []
    real = _core.solve_stationary
    monkeypatch.setattr(_core, "solve_stationary", lambda *a, **k: calls.append(1) or real(*a, **k))
    with pytest.raises(aqmchain.StateSpaceTooLarge) as e:
        aqmchain.solve_stationary(model, tagged_max_states=tagged - 1)
    assert e.value.param == "tagged_max_states" and f"to at least {tagged}" in str(e.value)
    assert calls == []  # refused before the stationary solve
    r = aqmchain.solve_stationary(model, tagged_max_states=tagged)
    assert r.response_states == tagged and calls == [1]
    # tail drop builds no tagged chain: no budget applies
    aqmchain.solve_stationary(model_of(small()), tagged_max_states=1)


def test_policies_refuse_the_tagged_chain_with_the_key(tmp_path):
    path = write_model(tmp_path, small())
    code, out, err = run_cli("policies", path, "--set", "solver.tagged_max_states=10", "-q")
    assert code == 2 and TRACEBACK not in err and "solver.tagged_max_states" in err


# ---------------------------------------------------------------- the estimate


def test_every_building_command_reports_the_estimate_in_its_json(tmp_path):
    path = write_model(tmp_path, small())
    model = aqmchain.load_model(path)
    bound = int(_core.estimate_chain(model)["reachable_bound"])
    for cmd, extra in (("solve", []), ("policies", []), ("transient", ["--times", "1,10"]),
                       ("compare", ["--slots", "20000"]), ("sweep", ["--param", "aqm.w=0.3,0.35", "--scheduler",
                                                                       "sync"])):
        out = tmp_path / f"{cmd}.json"
        code, _, err = run_cli(cmd, path, *extra, "--json", str(out), "-q")
        assert code == 0, err
        est = json.loads(out.read_text())["estimate"]
        assert est["states_bound"] == bound
        assert est["bytes"] > 0 and est["seconds"] > 0 and est["structure"] == "plain"
        assert est["budgets"]["max_states"] == aqmchain.stationary.OPTION_DEFAULTS["max_states"]
        assert est["large"] is False
    code, out, err = run_cli("info", path, "--json", "-")
    assert json.loads(out)["estimate"]["states_bound"] == bound


def test_a_large_model_is_announced_before_building_and_not_under_quiet(tmp_path):
    # over a budget counts as large: the announcement names it before the exploration refuses
    path = write_model(tmp_path, small(buffer=200, w=0.002, k=4))
    code, out, err = run_cli("solve", path, "--set", "solver.max_states=1000")
    assert code == 2
    first = err.index("large model: up to")
    assert "over a budget: max_states" in err and first < err.index("aqmchain: error")
    code, out, err = run_cli("solve", path, "--set", "solver.max_states=1000", "-q")
    assert code == 2 and "large model" not in err and "solver.max_states" in err


def test_solve_estimate_counts_the_class_chain_and_its_structure():
    plain = aqmchain.solve_estimate(model_of(small()))
    cls = aqmchain.solve_estimate(model_of(small(), classes=CLASSES))
    # the two-class chain holds the class-2 count and the class in service: about 2n contents per level
    assert cls["structure"] == "classes" and cls["states_bound"] > plain["states_bound"]
    assert cls["solve_seconds"] > plain["solve_seconds"]
    front = aqmchain.solve_estimate(model_of(small(), policy="front"))
    assert front["tagged_states_bound"] >= _core.check_tagged_budget(aqmchain.build_chain(model_of(small(),
                                                                                                    policy="front")))
    assert "tagged_states_bound" not in plain


# ---------------------------------------------------------------- auto


def class_model(buffer=10):
    return model_of(small(buffer=buffer), classes=CLASSES)


def test_a_component_the_chain_never_moves_does_not_make_it_coupled():
    """FDynamicAutoRED with the flow comparison where P_t stays below 0.55: dynamic max_th
    never leaves max_th, so its component, outside krylov's blocks beside avg, couples nothing
    and auto starts with krylov (as large), which solves it."""
    model = aqmchain.load_model(ROOT / "examples" / "classes" / "flows.toml").replace(
        model={"buffer": 12}, aqm={"min_th": 3, "max_th": 9})
    chain = aqmchain.build_chain(model)
    assert np.ptp(chain.labels["maxth_index"]) == 0 and np.ptp(chain.labels["avg_index"]) > 0
    r = aqmchain.solve_stationary(chain, response="none", auto_krylov_min_states=100)
    assert [a["method"] for a in r.info.methods_tried] == ["krylov"] and r.info.extra["auto_coupled_structure"] == 0
    ref = aqmchain.solve_stationary(chain, method="direct", response="none")
    P = aqmchain.transition_matrix(chain)
    assert np.abs(r.pi - ref.pi).sum() <= solution_distance_bound(P, ref.pi, r.info.residual, ref.info.residual)


def test_auto_chooses_by_structure_and_reports_the_order():
    # classes with drop spacing: the count and avg both index the blocks (the class contents
    # are inside them), a coupled structure
    chain = aqmchain.build_chain(model_of(small(buffer=10), classes=CLASSES, spacing="count"))
    ref = aqmchain.solve_stationary(chain, method="direct", response="none")
    # as large: a coupled chain starts with multilevel, a plain one with krylov
    r = aqmchain.solve_stationary(chain, response="none", auto_krylov_min_states=100)
    assert r.info.methods_tried[0]["method"] == "multilevel" and r.info.extra["auto_coupled_structure"] == 1
    assert r.info.methods_tried[-1]["status"] == "converged" and r.info.method == r.info.methods_tried[-1]["method"]
    assert np.abs(r.pi - ref.pi).sum() < 1e-10
    plain = aqmchain.build_chain(model_of(small()))
    r = aqmchain.solve_stationary(plain, response="none", auto_krylov_min_states=100)
    assert [a["method"] for a in r.info.methods_tried] == ["krylov"] and r.info.extra["auto_coupled_structure"] == 0
    # below auto_krylov_min_states: direct first whatever the structure, within 1e4 estimated
    # flops per entry of P; this coupled chain's LU is estimated above that, so multilevel follows
    nnz = aqmchain.transition_matrix(chain).nnz
    assert ref.info.extra["lu_flops_estimate"] > max(1e9, 1e4 * nnz)
    r = aqmchain.solve_stationary(chain, response="none")
    assert [a["method"] for a in r.info.methods_tried] == ["direct", "multilevel"]
    assert "small chain" in r.info.methods_tried[0]["why"] and r.info.method == "multilevel"
    assert np.abs(r.pi - ref.pi).sum() < 1e-10
    # the plain chain's LU is within it: direct alone
    r = aqmchain.solve_stationary(plain, response="none")
    assert [a["method"] for a in r.info.methods_tried] == ["direct"]
    d = r.to_dict()["solver"]["methods_tried"]
    assert d[0]["method"] == "direct" and d[0]["status"] == "converged" and d[0]["seconds"] > 0


def test_auto_fails_fast_when_a_method_stays_behind():
    """A target below round-off: every method stalls.  Krylov with methods behind it gives up
    after 3 restarts without progress (alone: 10), multilevel after 20 cycles without halving
    (alone: 100); every attempt is reported, and the smallest residual is kept."""
    chain = aqmchain.build_chain(model_of(small(buffer=30, w=0.05)))
    opts = dict(response="none", tol=1e-17, auto_krylov_min_states=100)
    with pytest.raises(aqmchain.NonConvergenceError) as e:
        aqmchain.solve_stationary(chain, **opts)
    tried = e.value.result.info.methods_tried
    assert [a["method"] for a in tried] == ["krylov", "direct", "multilevel", "gauss_seidel"]
    assert all(a["why"] and a["status"] != "converged" for a in tried)
    assert "3 restarts" in tried[0]["why"] or "stopped early" in tried[0]["why"]
    with pytest.raises(aqmchain.NonConvergenceError) as alone:
        aqmchain.solve_stationary(chain, method="krylov", **opts)
    assert "10 restarts" in alone.value.result.info.note
    # 7 restarts of 30 steps fewer, give or take the restarts' own progress
    assert tried[0]["iterations"] <= alone.value.result.info.iterations - 5 * 30
    with pytest.raises(aqmchain.NonConvergenceError) as alone:
        aqmchain.solve_stationary(chain, method="multilevel", **opts)
    assert tried[2]["iterations"] < alone.value.result.info.iterations


def test_auto_skips_direct_whose_lu_plainly_does_not_fit():
    chain = aqmchain.build_chain(model_of(small(buffer=16), classes=CLASSES, spacing="count"))  # coupled
    with pytest.raises(aqmchain.NonConvergenceError) as e:  # max_iter = 1: every iterative method stops
        aqmchain.solve_stationary(chain, response="none", auto_krylov_min_states=100, direct_max_gb=1e-6, max_iter=1)
    tried = e.value.result.info.methods_tried
    assert [a["method"] for a in tried] == ["multilevel", "direct", "krylov", "gauss_seidel"]
    assert tried[1]["why"].startswith("skipped: the LU would need about") and tried[1]["seconds"] < 0.5


def test_cli_summary_and_json_show_the_methods_tried(tmp_path):
    # a plain chain "large" from 100 states: krylov first, stopped by max_iter = 2, then direct
    path = write_model(tmp_path, small(buffer=30, w=0.05))
    out = tmp_path / "r.json"
    code, stdout, err = run_cli("solve", path, "--set", "solver.auto_krylov_min_states=100",
                                "--set", "solver.max_iter=2", "--json", str(out))
    assert code == 0, err
    tried = json.loads(out.read_text())["solver"]["methods_tried"]
    assert [a["method"] for a in tried] == ["krylov", "direct"] and tried[0]["iterations"] == 2
    assert tried[1]["status"] == "converged" and tried[1]["why"] == ""
    assert "methods tried" in stdout and "krylov (failed" in stdout and "direct (converged" in stdout


def test_the_example_model_files_are_not_giants(root):
    """Every model file of examples/ (README's included) is solved in seconds: the estimate
    made from the model alone is within the budgets and well under a minute."""
    files = [p for p in sorted((root / "examples").rglob("*.toml")) if p.name != "scenario.toml"]
    assert any(p.name == "mice_ecn.toml" for p in files)
    for path in files:
        est = aqmchain.solve_estimate(aqmchain.load_model(path))
        assert est["states_bound"] <= est["budgets"]["max_states"] // 2, path
        assert est["seconds"] < 60, (path, est["seconds"])
