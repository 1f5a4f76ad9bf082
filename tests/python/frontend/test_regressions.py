"""Rough edges a new user meets (Model.replace, compare on class models, number formatting,
integer options, unknown keys) and defects found by fuzzing (tracebacks, work lost after the
computation, wrong output, messages naming another key, valid input refused, invalid input
accepted).  Every test here failed before its fix."""

import json
import math
import re
import time
import tomllib

import numpy as np
import pytest
from cli_helpers import run_cli, to_toml
from conftest import BASE_DOC, ROOT

import aqmchain
from aqmchain import cli

SMALL = ROOT / "examples" / "small_ecn.toml"

ADAPTIVE_DOC = {**BASE_DOC, "aqm": {**BASE_DOC["aqm"], "adaptive": True, "interval": 50, "clock": "exact",
                                    "p_max_step": 0.05}}

CLASS_TOML = """
[model]
buffer = 6
[source]
kind = "bernoulli"
alpha = 0.45
[service]
mu = 0.5
[aqm]
drop = "red"
min_th = 1
max_th = 5
p_max = 0.3
w = 0.2
[grid]
k = 2
refine = "none"
[[class]]
name = "a"
share = 0.3
[[class]]
name = "b"
share = 0.7
flows = 2
"""


def write(tmp_path, doc, name="m.toml"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else to_toml(doc))
    return p


def forbid(monkeypatch, *names):
    """Make cli.<name> fail the test if called: the input must be refused before the work."""
    for name in names:
        def boom(*a, _name=name, **k):
            raise AssertionError(f"{_name} ran although the input is refused")
        monkeypatch.setattr(cli, name, boom)


# ------------------------------------------------------------------ Model.replace


def test_replace_accepts_the_model_section():
    m = aqmchain.model_from_dict(BASE_DOC)[0]
    m2 = m.replace(model={"buffer": 25})
    assert m2.buffer == 25 and m.buffer == 20
    assert aqmchain.replace(m, model={"buffer": 30}, aqm={"w": 0.05}).aqm.w == 0.05


def test_replace_switching_a_feature_off_drops_its_keys():
    m = aqmchain.model_from_dict(ADAPTIVE_DOC)[0]
    assert m.aqm.adaptive and m.aqm.clock == "exact"
    m2 = m.replace(aqm={"adaptive": False})
    assert not m2.aqm.adaptive and m2.aqm.drop.p_max == m.aqm.drop.p_max
    assert "interval" not in aqmchain.model_to_dict(m2)["aqm"]
    # the same through --set on the command line
    doc = aqmchain.apply_overrides(ADAPTIVE_DOC, ["aqm.adaptive=false"])
    assert not aqmchain.model_from_dict(doc)[0].aqm.adaptive
    # spacing off drops count_max; the dynamic max_th off drops its growth (and AutoRED's reading)
    sp = aqmchain.model_from_dict({**BASE_DOC, "aqm": {**BASE_DOC["aqm"], "spacing": "count", "count_max": 500}})[0]
    assert sp.replace(aqm={"spacing": "none"}).aqm.spacing == "none"
    dyn = aqmchain.model_from_dict({**BASE_DOC, "aqm": {**BASE_DOC["aqm"], "dynamic_max_th": True,
                                                        "autored_p": "queue", "max_th_growth": 0.2}})[0]
    off = dyn.replace(aqm={"dynamic_max_th": False})
    assert not off.aqm.dynamic_max_th and off.aqm.autored_p == "drop"
    # a key of the feature given with the switch is refused by name, whatever the order of the dict
    with pytest.raises(aqmchain.ModelError) as e:
        m.replace(aqm={"interval": 10, "adaptive": False})
    assert e.value.param == "aqm.interval"


def test_replace_errors_are_clear():
    m = aqmchain.model_from_dict(BASE_DOC)[0]
    with pytest.raises(aqmchain.ModelError, match=r"unknown section 'serivce'.*did you mean 'service'"):
        m.replace(serivce={"mu": 0.4})
    with pytest.raises(aqmchain.ModelError, match=r"'aqm' must be a dict"):
        m.replace(aqm=0.01)
    with pytest.raises(aqmchain.ModelError, match=r"did you mean 'aqm.p_max'"):
        m.replace(aqm={"pmax": 0.2})
    cm = aqmchain.model_from_dict(dict(__import__("tomllib").loads(CLASS_TOML)))[0]
    assert cm.replace(**{"class[1]": {"flows": 3}}).classes[1].flows == 3


# ------------------------------------------------------------------ compare on a class model


def test_compare_on_a_class_model_gives_per_class_rows_and_says_the_chain_approximates(tmp_path):
    f = write(tmp_path, CLASS_TOML)
    out = tmp_path / "cmp.json"
    code, stdout, err = run_cli("compare", f, "--slots", "300000", "--replications", "2", "--discretised",
                                "--json", out)
    assert code == 0, err
    assert "the chain is its exact law" not in stdout and "approximation" in stdout
    d = json.loads(out.read_text())["comparison"]
    assert d["chain_law"] == "approx"
    rows = {r["metric"]: r for r in d["classes"]}
    for c in ("a", "b"):
        for name in ("arrival_rate", "loss", "mean_response"):
            assert f"{c}.{name}" in rows
    # the class arrival rates are exact in both: alpha x share
    assert rows["a.arrival_rate"]["analytic"] == pytest.approx(0.45 * 0.3, rel=1e-9)
    assert rows["b.arrival_rate"]["simulated"] == pytest.approx(0.45 * 0.7, abs=5 * rows["b.arrival_rate"]["half_width"])
    assert re.search(r"^b\.loss\s", stdout, re.M)


# ------------------------------------------------------------------ numbers


def test_numbers_print_in_their_shortest_round_trip_form(tmp_path):
    assert repr(aqmchain.Source.bernoulli(0.55)) == "Bernoulli(alpha=0.55)"
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.Service.geometric(-0.1)
    assert str(e.value).endswith("got -0.1")
    w = 0.0123456789012345
    assert f"w={w!r}" in repr(aqmchain.Aqm(w=w))  # not rounded to 10 digits
    # the sweep's CSV: 0.05, not 0.050000000000000003
    res = aqmchain.sweep(BASE_DOC, {"aqm.w": [0.05, 0.1]}, scheduler="sync")
    text = res.to_csv_text()
    assert "\n0.05," in text and "0000000" not in text.split("\n", 1)[1].split(",", 1)[0]


def test_integer_options_accept_integral_floats(tmp_path):
    out = tmp_path / "s.json"
    code, _, err = run_cli("simulate", SMALL, "--slots", "2e5", "--replications", "2.0", "--json", out, "-q")
    assert code == 0, err
    d = json.loads(out.read_text())["simulation"]
    assert d["slots"] == 200000 and d["replications"] == 2
    code, _, err = run_cli("simulate", SMALL, "--slots", "2.5e0", "-q")
    assert code == 2 and "--slots" in err and "integer" in err


def test_unknown_key_gets_did_you_mean_and_a_short_message(tmp_path):
    code, _, err = run_cli("info", SMALL, "--set", "aqm.mni_th=3")
    assert code == 2 and "did you mean 'aqm.min_th'" in err and len(err) < 200, err
    doc = {**BASE_DOC, "grid": {**BASE_DOC["grid"], "kk": 3}}
    with pytest.raises(aqmchain.ModelError, match=r"unknown key 'grid\.kk' \(did you mean 'grid\.k'"):
        aqmchain.model_from_dict(doc)
    # no close name: no list of 30 names either
    doc = {**BASE_DOC, "aqm": {**BASE_DOC["aqm"], "zzzz": 1}}
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "aqm.zzzz" and str(e.value).count(",") < 5
    # the API's options too
    with pytest.raises(aqmchain.OptionError, match=r"unknown solver option 'methd' \(did you mean 'method'\?\)$"):
        aqmchain.solve_stationary(aqmchain.model_from_dict(BASE_DOC)[0], methd="direct")
    with pytest.raises(TypeError, match=r"did you mean 'count_max'"):
        aqmchain.Aqm(countmax=5)


def test_simulate_scenario_observes_time_zero():
    m = aqmchain.model_from_dict(BASE_DOC)[0]
    sc = aqmchain.Scenario([aqmchain.Phase(100, m)])
    r = aqmchain.simulate_scenario(sc, [0, 50, 100], replications=4, seed=3)
    assert list(r.times) == [0, 50, 100]
    assert r.mean_queue[0] == 0 and r.mean_system[0] == 0 and r.mean_avg[0] == 0 and r.arrivals[0] == 0
    assert r.arrivals[1] > 0
    # the rest is what the run without t = 0 gives (same streams)
    r2 = aqmchain.simulate_scenario(sc, [50, 100], replications=4, seed=3)
    assert np.array_equal(np.asarray(r.mean_queue[1:]), np.asarray(r2.mean_queue))


def test_optimize_progress_omits_unknown_state_counts(tmp_path):
    code, _, err = run_cli("optimize", SMALL, "--params", "aqm.w", "--bounds", "aqm.w=0.01:0.5", "--max-evals", "2",
                           "--set", "solver.memory_limit_gb=0.000001")
    assert "None states" not in err and "failed (" in err, err


# ------------------------------------------------------------------ tracebacks


def test_huge_integer_in_set_is_a_clean_error(tmp_path):
    code, _, err = run_cli("info", SMALL, "--set", "grid.k=" + "9" * 5000)
    assert code == 2 and "grid.k" in err and "Traceback" not in err, err[-300:]


def test_count_max_out_of_range_names_the_documented_range(tmp_path):
    doc = {**BASE_DOC, "aqm": {**BASE_DOC["aqm"], "spacing": "count", "count_max": 2147483648}}
    code, _, err = run_cli("info", write(tmp_path, doc))
    assert code == 2 and "aqm.count_max" in err and "100000000" in err, err
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.Aqm(count_max=2**63)
    assert e.value.param == "aqm.count_max" and "must be <= 100000000," in str(e.value)
    assert "9223372036854775807" not in str(e.value)  # not the int64 range


# ------------------------------------------------------------------ work lost after the computation


def test_plot_format_is_checked_before_the_solve(tmp_path, monkeypatch):
    forbid(monkeypatch, "solve_stationary", "solve_transient")
    code, _, err = run_cli("solve", SMALL, "--plot", tmp_path / "out.pdfx")
    assert code == 2 and "--plot" in err and ".png" in err, err
    code, _, err = run_cli("transient", SMALL, "--times", "1,2", "--plot", tmp_path / "tr.xyz")
    assert code == 2 and "--plot" in err, err
    assert not list(tmp_path.iterdir())


def test_export_prism_to_a_directory_is_refused_before_the_build(tmp_path, monkeypatch):
    import aqmchain.stationary

    monkeypatch.setattr(aqmchain.stationary, "build_chain", lambda *a, **k: pytest.fail("built"))
    for base in ("/", str(tmp_path) + "/", ""):
        code, _, err = run_cli("export", SMALL, "--prism", base)
        assert code == 2 and "--prism" in err and "Traceback" not in err, (base, err)
    with pytest.raises(aqmchain.ModelError):
        aqmchain.export_prism(aqmchain.build_chain(aqmchain.model_from_dict(BASE_DOC)[0]), "/")


def test_plot_path_gets_no_silent_suffix(tmp_path):
    p = tmp_path / "figure"
    code, _, err = run_cli("solve", SMALL, "--plot", p, "-q")
    assert code == 0, err
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "figure.png").exists()
    code, _, err = run_cli("solve", SMALL, "--plot", "/dev/full", "-q")
    assert code == 2 and "/dev/full" in err, err


# ------------------------------------------------------------------ wrong output


def test_simulate_without_arrivals_writes_null_response_metrics(tmp_path):
    doc = {**BASE_DOC, "source": {"kind": "bernoulli", "alpha": 0.0}}
    out = tmp_path / "s.json"
    code, _, err = run_cli("simulate", write(tmp_path, doc), "--slots", "20000", "--json", out, "-q")
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["mean_response"] is None and d["var_response"] is None and d["response_pmf"] is None
    solved = tmp_path / "solve.json"
    assert run_cli("solve", write(tmp_path, doc), "--json", solved, "-q")[0] == 0
    assert json.loads(solved.read_text())["mean_response"] is None  # as solve writes it


def test_optimize_bad_input_is_exit_2_on_stderr(tmp_path):
    code, out, err = run_cli("optimize", SMALL, "--params", "aqm.w", "--bounds", "aqm.w=0.01:0.05", "-q")
    assert code == 2 and out == "" and "--starts" in err and "aqm.w" in err, (out, err)
    code, out, err = run_cli("optimize", SMALL, "--params", "aqm.w", "--starts", "0.7", "--bounds",
                             "aqm.w=0.01:0.5", "-q")
    assert code == 2 and out == "" and "0.7" in err, (out, err)
    # the flow comparison's response times come from the tagged chain on the two-class chain: defined
    fc = CLASS_TOML.replace("w = 0.2", "w = 0.2\nflow_compare = true")
    out_json = tmp_path / "o.json"
    code, out, err = run_cli("optimize", write(tmp_path, fc), "--params", "aqm.w", "--objective", "mean_response",
                             "--max-evals", "3", "--json", out_json, "-q")
    assert code == 0 and math.isfinite(json.loads(out_json.read_text())["value"]), err
    # on the exact class chain they are not: bad input naming the objective, not a failed point
    with pytest.raises(aqmchain.ModelError) as exc:
        aqmchain.optimize(aqmchain.model_from_dict(tomllib.loads(fc))[0], ["aqm.w"], "mean_response",
                          solver={"classes": "exact"}, max_evals=3)
    assert exc.value.param == "objective" and "flow comparison" in str(exc.value)


# ------------------------------------------------------------------ messages naming the right key


def test_empty_triple_is_reported_as_the_triple():
    code, _, err = run_cli("info", ROOT / "examples" / "redwm_ssmp.toml", "--set", "aqm.triple=[]")
    assert code == 2 and "aqm.triple" in err and "aqm.b" not in err, err


def test_transient_horizon_beyond_the_limit_names_times(monkeypatch):
    forbid(monkeypatch, "solve_transient")
    code, _, err = run_cli("transient", ROOT / "examples" / "red_ctmc.toml", "--times", "1e15")
    assert code == 2 and "--times" in err and "phase[0]" not in err, err
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.solve_transient(aqmchain.model_from_dict(BASE_DOC)[0], [1e15])
    assert e.value.param == "times"


def test_unreachable_scheduler_names_the_option_and_fails_fast():
    for cmd in (["optimize", SMALL, "--params", "aqm.w"], ["sweep", SMALL, "--param", "aqm.w=0.1,0.2"]):
        t0 = time.perf_counter()
        code, _, err = run_cli(*cmd, "--scheduler", "tcp://127.0.0.1:1", "-q")
        assert code == 2 and "--scheduler" in err and "solver.scheduler" not in err, err
        assert time.perf_counter() - t0 < 8.0  # the connection is refused at once (Dask would retry for 10 s)


def test_class_keys_can_be_overridden_from_the_command_line(tmp_path):
    f = write(tmp_path, CLASS_TOML)
    out = tmp_path / "i.json"
    code, _, err = run_cli("info", f, "--set", "class[0].flows=5", "--json", out, "-q")
    assert code == 0, err
    assert json.loads(out.read_text())["model"]["class"][0]["flows"] == 5
    code, _, err = run_cli("info", f, "--set", "class[2].flows=5")
    assert code == 2 and "class[2]" in err and "'key'" not in err, err
    code, _, err = run_cli("info", f, "--set", "class[0].flows=0")
    assert code == 2 and "class[0].flows" in err, err


# ------------------------------------------------------------------ bounds defined once


def test_ssmp_n_up_to_the_documented_bound_is_accepted(tmp_path):
    assert aqmchain.Source.max_ssmp_n == 4096
    s = aqmchain.Source.ssmp(1001, 1.0, 2.0)
    assert s.n == 1001 and abs(sum(s.modulator_stationary()) - 1) < 1e-12
    doc = {**BASE_DOC, "source": {"kind": "ssmp", "n": 1001, "q": 1.0, "a": 2.0}}
    assert aqmchain.model_from_dict(doc)[0].source.n == 1001
    with pytest.raises(aqmchain.ModelError, match="4096"):
        aqmchain.model_from_dict({**doc, "source": {**doc["source"], "n": 4097}})


def test_documented_bounds_are_the_cores():
    text = (ROOT / "docs" / "model-file.md").read_text()

    def num(s):
        return int(float(s))

    def documented(name):
        m = re.search(rf"`{re.escape(name)}`[^\[\n]*?in \[(-?[\d.e+]+), ([\d.e+^ -]+)\]", text)
        assert m, name
        hi = m.group(2).replace(" ", "")
        return num(m.group(1)), (2**64 - 1 if hi == "2^64-1" else num(hi))

    for name, (lo, hi) in aqmchain._core.StationaryOptions.int_ranges().items():
        if f"`{name}` in [" in text:
            assert documented(name) == (lo, hi), name
    for name, (lo, hi) in aqmchain.SimOptions.int_ranges().items():
        if f"`--{name}` in [" in text:
            assert documented(f"--{name}") == (lo, hi), name
    for name, (lo, hi) in aqmchain.Aqm.stateful_ranges().items():
        assert documented(name) == (lo, hi), name
    # SSMP n: docs/model-file.md's source table is generated from the core's registry, whose
    # range is the bound the core checks (one constant)
    ssmp = next(k for k in aqmchain.Source.kinds if k["name"] == "ssmp")
    n = next(p for p in ssmp["params"] if p["name"] == "n")
    assert tuple(n["int_range"]) == (2, aqmchain.Source.max_ssmp_n)
    assert f"in [2, {aqmchain.Source.max_ssmp_n}]" == n["bound"]
    m = re.search(r"`model\.buffer` <= ([\de.]+)", text)
    assert num(m.group(1)) == aqmchain.Model.max_buffer
    assert f"`source.n` <= {aqmchain.Source.max_ssmp_n}" in text


# ------------------------------------------------------------------ invalid input accepted


@pytest.mark.parametrize("option", ["--json", "--csv", "--plot"])
def test_empty_output_path_is_refused(option, monkeypatch):
    forbid(monkeypatch, "solve_stationary")
    code, _, err = run_cli("solve", SMALL, option, "")
    assert code == 2 and option in err, err


def test_api_and_file_share_one_validation():
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.DropFunction.sred(5, -1)
    assert e.value.param == "aqm.q_max"
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.DropFunction.sred(5, 0, -2)
    assert e.value.param == "aqm.seg"
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.Aqm(autored_p="queue")
    assert e.value.param == "aqm.autored_p"
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.Aqm(interval=100)
    assert e.value.param == "aqm.interval"
    assert aqmchain.Aqm(weight="autored", autored_p="queue").autored_p == "queue"
    # the file says the same
    doc = {**BASE_DOC, "aqm": {**BASE_DOC["aqm"], "autored_p": "queue"}}
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "aqm.autored_p"
    assert math.isfinite(aqmchain.DropFunction.sred(5)(10.0))
