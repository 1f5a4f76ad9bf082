"""Bad input at the front end (model files, command line, Python API): exit code 2 and a
one-line message naming the key, or ModelError / OptionError naming the parameter; never a
traceback, TypeError, OverflowError, RecursionError, UnicodeDecodeError or MemoryError."""

import copy
import json
import math
import warnings

import pytest

import aqmchain
from aqmchain import _output
from cli_helpers import TRACEBACK, run_cli, to_toml

from conftest import BASE_DOC as BASE  # noqa: E402
SSMP = {"kind": "ssmp", "n": 5, "q": 1.927562, "a": 31.6}
SIM = ["--slots", "20000", "--batches", "5", "--replications", "2"]


def write(tmp_path, doc, name="m.toml"):
    f = tmp_path / name
    f.write_text(to_toml(doc) if isinstance(doc, dict) else doc)
    return f


def with_(path, value, doc=None):
    doc = copy.deepcopy(doc or BASE)
    sec, key = path.split(".")
    doc.setdefault(sec, {})
    if value is None:
        doc[sec].pop(key, None)
    else:
        doc[sec][key] = value
    return doc


def expect_2(code, out, err, *texts):
    assert code == 2, (code, out, err)
    assert TRACEBACK not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("aqmchain: error:")]
    assert len(lines) == 1, err
    for t in texts:
        assert t in lines[0], (t, lines[0])
    assert "nan" not in lines[0].replace("nan.", "")


# ---------------------------------------------------------------- 1. integers outside the C range

@pytest.mark.parametrize("path,value,doc", [
    ("model.buffer", 2147483648, None),
    ("grid.k", 2147483648, None),
    ("source.n", 2147483648, {**BASE, "source": dict(SSMP)}),
    ("solver.ncv", 2147483648, None),
    ("solver.max_iter", 2**63, None),
    ("model.buffer", -(10**20), None),
])
def test_integer_out_of_c_range(tmp_path, path, value, doc):
    f = write(tmp_path, with_(path, value, doc))
    for cmd in ("solve", "estimate"):
        expect_2(*run_cli(cmd, f), path, str(value))


def test_integer_of_thousands_of_digits(tmp_path):
    big = "9" * 5000
    f = write(tmp_path, to_toml(BASE).replace("buffer = 20", f"buffer = {big}"))
    expect_2(*run_cli("solve", f), "model.buffer", "10000000", "5000 digits")
    f = write(tmp_path, to_toml(BASE).replace("k = 2", "k = " + "9" * 60000))
    expect_2(*run_cli("solve", f), "grid.k", "digits")
    f = write(tmp_path, to_toml(BASE).replace("alpha = 0.5", f"alpha = {big}"))
    expect_2(*run_cli("solve", f), "source.alpha", "finite number")


@pytest.mark.parametrize("opt,value,bound", [("--seed", "-1", ">= 0"), ("--seed", str(2**64), "<="),
                                             ("--replications", "2147483648", "<= 10000"),
                                             ("--slots", str(10**13 + 1), "<="), ("--batches", "0", ">= 1")])
def test_simulation_options_out_of_range(root, opt, value, bound):
    for cmd in ("simulate", "compare"):
        expect_2(*run_cli(cmd, root / "examples" / "red_geo.toml", opt, value), opt, value, bound)


def test_api_out_of_range_is_model_error_not_type_error():
    src, svc = aqmchain.Source.bernoulli(0.5), aqmchain.Service(0.5)
    calls = [
        ("model.buffer", lambda: aqmchain.Model(buffer=2**31, source=src, service=svc)),
        ("model.buffer", lambda: aqmchain.Model(buffer="20", source=src, service=svc)),
        ("source", lambda: aqmchain.Model(buffer=20, source="bernoulli", service=svc)),
        ("grid.k", lambda: aqmchain.GridSpec(k=2**40)),
        ("source.n", lambda: aqmchain.Source.ssmp(2**40, 1.0, 31.6)),
        ("source.n", lambda: aqmchain.ssmp_q_for_mean(0.5, 31.6, 2**31)),
        ("source.q", lambda: aqmchain.Source.ssmp(5, 10**400, 31.6)),
        ("source.arrival[0]", lambda: aqmchain.Source.mmbp([[1.0]], [10**500])),
        ("service.mu", lambda: aqmchain.Service(mu=None)),
        ("aqm.w", lambda: aqmchain.Aqm(w=10**400)),
        ("aqm.max_th", lambda: aqmchain.DropFunction.red(min_th=1, max_th="2", p_max=0.1)),
        ("log2_hi", lambda: aqmchain.hurst(src, 0, 2**40)),
    ]
    for param, call in calls:
        with pytest.raises(aqmchain.ModelError) as exc:
            call()
        assert exc.value.param == param and param in str(exc.value)


def test_api_solver_options_out_of_range():
    m = aqmchain.model_from_dict(BASE)[0]
    for key, value in (("ncv", 2**40), ("max_iter", 2**70), ("smoothing_sweeps", 101), ("refine_steps", 101),
                       ("check_every", 10**7), ("coarse_size", 2001), ("ncv", 1001), ("tol", math.nan),
                       ("ncv", "30"), ("ncv", 2.0)):
        with pytest.raises(aqmchain.OptionError, match=f"'{key}'"):
            aqmchain.solve_stationary(m, **{key: value})
    with pytest.raises(aqmchain.OptionError, match="'ncv'"):
        aqmchain.DirectSolver(ncv=-1)
    for value in (-1, "8", 10**400, math.inf):
        with pytest.raises(aqmchain.ModelError, match="memory_limit_gb") as exc:
            aqmchain.solve_stationary(m, memory_limit_gb=value)
        assert exc.value.param == "memory_limit_gb"


# ---------------------------------------------------------------- 2. files

def test_non_utf8_file(tmp_path):
    f = tmp_path / "m.toml"
    f.write_bytes(b"\xff\xfe[model]\nbuffer = 3\n")
    expect_2(*run_cli("solve", f), "not UTF-8", str(f))
    with pytest.raises(aqmchain.ModelError, match="UTF-8"):
        aqmchain.load_model(f)


def test_deeply_nested_toml(tmp_path):
    f = write(tmp_path, "a = " + "[" * 5000 + "]" * 5000 + "\n")
    expect_2(*run_cli("solve", f), "nested too deeply")
    f = write(tmp_path, "a = " + "{b = " * 3000 + "1" + "}" * 3000 + "\n")
    expect_2(*run_cli("estimate", f))


def test_huge_file_and_dev_zero(tmp_path):
    f = tmp_path / "big.toml"
    f.write_text(to_toml(BASE) + "# " + "x" * (5 * 1024 * 1024) + "\n")
    expect_2(*run_cli("solve", f), "larger than 4 MiB")
    expect_2(*run_cli("estimate", "/dev/zero"), "/dev/zero", "larger than 4 MiB")


def test_directory_and_missing_file(tmp_path):
    expect_2(*run_cli("solve", tmp_path), "cannot read model file", str(tmp_path))
    expect_2(*run_cli("simulate", tmp_path / "nope.toml"), "cannot read model file", "nope.toml")


# ---------------------------------------------------------------- 3. no traffic

def test_policies_alpha_zero(tmp_path):
    f = write(tmp_path, with_("source.alpha", 0))
    code, out, err = run_cli("policies", f)
    assert code == 0 and TRACEBACK not in err, err
    assert "n/a" in out and "no packet is ever admitted" in out
    assert "nan" not in out.lower() and "None" not in out
    code, out, err = run_cli("policies", f, "--json", "-")
    rows = json.loads(out)["policies"]
    assert all(r["relative_to_tail"] is None and r["mean_response"] is None for r in rows)
    cmp = aqmchain.compare_policies(aqmchain.load_model(f))
    assert "n/a" in cmp.table() and cmp.rows()[0]["relative_to_tail"] is None


@pytest.mark.parametrize("alpha", [0, 1e-9])
def test_compare_and_simulate_no_traffic(tmp_path, alpha):
    f = write(tmp_path, with_("source.alpha", alpha))
    code, out, err = run_cli("compare", f, *SIM)
    assert code == 0, err
    assert "nan" not in out.lower() and "inf" not in out.lower()
    assert "no packet arrived" in out
    code, out, err = run_cli("simulate", f, *SIM)
    assert code == 0 and "nan" not in out.lower() and "inf" not in out.lower()
    code, out, err = run_cli("simulate", f, *SIM, "--json", "-")
    assert code == 0 and json.loads(out)["ci"]["loss"] is None


# ---------------------------------------------------------------- 4. output paths

def test_json_into_missing_directory(tmp_path, root):
    model = root / "examples" / "red_geo.toml"
    target = tmp_path / "missing" / "out.json"
    for cmd, extra in (("solve", []), ("simulate", SIM), ("policies", [])):
        code, out, err = run_cli(cmd, model, *extra, "--json", target)
        expect_2(code, out, err, "--json", str(target), "does not exist")
        assert out == ""  # refused before the work
    code, out, err = run_cli("compare", model, *SIM, "--plot", tmp_path / "missing" / "p.png")
    expect_2(code, out, err, "--plot", "p.png")
    assert out == ""
    expect_2(*run_cli("solve", model, "--json", tmp_path), "--json", "is a directory")


def test_solve_json_to_stdout_is_only_json(root):
    code, out, err = run_cli("solve", root / "examples" / "small_ecn.toml", "--json", "-")
    assert code == 0
    doc = json.loads(out)
    assert doc["states"] > 0 and "mean queue" in err
    code, out, err = run_cli("simulate", root / "examples" / "small_ecn.toml", *SIM, "--json", "-")
    assert code == 0 and "mean_queue" in json.loads(out) and "±" in err


# ---------------------------------------------------------------- 5. bad input accepted before

@pytest.mark.parametrize("key,value", [("q_max", 0), ("q_max", -5.0), ("seg", 0), ("seg", -1)])
def test_sred_explicit_nonpositive_is_an_error(tmp_path, key, value):
    doc = copy.deepcopy(BASE)
    doc["aqm"] = {"drop": "sred", "min_th": 5, "w": 0.1, key: value}
    expect_2(*run_cli("solve", write(tmp_path, doc)), f"aqm.{key}", "> 0", str(value))
    with pytest.raises(aqmchain.ModelError) as exc:
        aqmchain.model_from_dict(doc)
    assert exc.value.param == f"aqm.{key}"
    del doc["aqm"][key]
    aqmchain.model_from_dict(doc)  # absent: the default


@pytest.mark.parametrize("key,value,text", [("tol", -1, "(0, 1)"), ("memory_limit_gb", -1, "(0, "),
                                            ("tol", "1e-9", "finite number"), ("method", "fast", "one of")])
def test_solver_table_checked_by_every_command(tmp_path, key, value, text):
    f = write(tmp_path, with_(f"solver.{key}", value))
    for cmd, extra in (("solve", []), ("estimate", []), ("simulate", SIM), ("policies", []),
                       ("compare", SIM)):
        expect_2(*run_cli(cmd, f, *extra), f"solver.{key}", text)


def test_memory_limit_named_in_gb(tmp_path):
    doc = with_("grid.k", 400)
    doc["solver"] = {"memory_limit_gb": 0.001}
    code, out, err = run_cli("solve", write(tmp_path, doc))
    expect_2(code, out, err, "solver.memory_limit_gb", "0.001 GB")
    assert "'memory_limit'" not in err and "bytes" not in err
    code, out, err = run_cli("solve", write(tmp_path, with_("grid.k", 400)), "--memory-limit-gb", "0.001")
    expect_2(code, out, err, "--memory-limit-gb")
    doc = with_("aqm.policy", "front", with_("aqm.max_th", 25, with_("model.buffer", 30, with_("grid.k", 4))))
    doc["solver"] = {"memory_limit_gb": 0.005}  # the chain fits, the tagged-packet chain does not
    expect_2(*run_cli("solve", write(tmp_path, doc), "-q"), "tagged-packet chain", "solver.memory_limit_gb = 0.005 GB")


def test_warmup_seed_discretised(root):
    model = root / "examples" / "red_geo.toml"
    expect_2(*run_cli("simulate", model, *SIM, "--warmup", "-7"), "--warmup", "-7", "-1")
    expect_2(*run_cli("simulate", model, "--slots", "1000", "--warmup", "5000"), "--warmup", "5000")
    m = aqmchain.load_model(model)
    for kwargs, param in (({"seed": 1.5}, "seed"), ({"discretised": "yes"}, "discretised"),
                          ({"warmup": -7}, "warmup"), ({"seed": -1}, "seed"), ({"slots": "1e6"}, "slots")):
        with pytest.raises(aqmchain.ModelError) as exc:
            aqmchain.simulate(m, **{"slots": 20_000, "batches": 5, **kwargs})
        assert exc.value.param == param


# ---------------------------------------------------------------- 6. valid input, reported well

def test_ssmp_mean_with_huge_a_prints_no_nan(tmp_path):
    doc = copy.deepcopy(BASE)
    doc["source"] = {"kind": "ssmp", "n": 5, "mean": 0.5, "a": 1e300}
    code, out, err = run_cli("solve", write(tmp_path, doc))
    assert code in (0, 2) and TRACEBACK not in err
    assert "nan" not in err.lower() and "nan" not in out.lower()


def test_model_errors_from_the_core_exit_2(tmp_path):
    doc = copy.deepcopy(BASE)
    doc["source"] = {"kind": "ssmp", "n": 4000, "q": 2, "a": 2}
    code, out, err = run_cli("estimate", write(tmp_path, doc))
    assert code in (0, 2) and TRACEBACK not in err
    doc["source"] = {"kind": "mmbp", "matrix": [[1 - 5e-324, 5e-324], [0.5, 0.5]], "arrival": [0.1, 0.2]}
    code, out, err = run_cli("solve", write(tmp_path, doc))
    assert code in (0, 2) and TRACEBACK not in err
    if code == 2:
        assert "source." in err


# ---------------------------------------------------------------- 7. output size

def test_slow_server_json_is_capped(tmp_path):
    f = write(tmp_path, with_("service.mu", 1e-6, with_("source.alpha", 5e-7)))
    out = tmp_path / "out.json"
    code, _, err = run_cli("solve", f, "--json", out, "-q")
    assert code == 0, err
    assert out.stat().st_size < 5_000_000
    doc = json.loads(out.read_text())
    assert doc["response_pmf_truncated"] is True
    assert len(doc["response_pmf"]) == _output.MAX_LEN
    assert doc["response_pmf_full_length"] > _output.MAX_LEN and 0 < doc["response_pmf_cut_mass"] < 1
    assert doc["queue_pmf_truncated"] is False


def test_cap_cuts_negligible_tail_only_for_response():
    class R:
        response_pmf = [0.5, 0.5 - 1e-17, 1e-17, 0.0]
        queue_pmf = [0.5, 0.5 - 1e-17, 1e-17]
    short, info = _output.capped(R())
    assert len(short.response_pmf) == 2 and info["response_pmf_truncated"]
    assert info["response_pmf_cut_mass"] == pytest.approx(1e-17) and info["response_pmf_full_length"] == 4
    assert len(short.queue_pmf) == 3 and info["queue_pmf_truncated"] is False
    assert R.response_pmf == [0.5, 0.5 - 1e-17, 1e-17, 0.0]  # the result itself is untouched


# ---------------------------------------------------------------- 8. upper bounds on counts

@pytest.mark.parametrize("key,value,bound", [("smoothing_sweeps", 101, "in [1, 100]"), ("refine_steps", 101, "in [0, 100]"),
                                             ("check_every", 10**6 + 1, "in [1, 1000000]"),
                                             ("coarse_size", 2001, "in [2, 2000]"), ("ncv", 1001, "in [0, 1000]"),
                                             ("max_iter", 10**9 + 1, "in [0, 1000000000]"),
                                             ("cycle_gamma", 3, "in [1, 2]")])
def test_solver_count_bounds(tmp_path, key, value, bound):
    expect_2(*run_cli("solve", write(tmp_path, with_(f"solver.{key}", value))), f"solver.{key}", bound, str(value))


@pytest.mark.parametrize("opt,value,bound", [("--replications", "10001", "<= 10000"),
                                             ("--batches", "10001", "<= 10000"),
                                             ("--slots", str(10**13 + 1), "<= 10000000000000")])
def test_simulation_count_bounds(root, opt, value, bound):
    expect_2(*run_cli("simulate", root / "examples" / "red_geo.toml", opt, value), opt, bound)


def test_cli_max_iter_and_tol_bounds(root):
    model = root / "examples" / "red_geo.toml"
    expect_2(*run_cli("solve", model, "--max-iter", str(10**10)), "--max-iter", "in [0, 1000000000]")
    expect_2(*run_cli("solve", model, "--tol", "nan"), "--tol", "finite")
    expect_2(*run_cli("solve", model, "--tol", "2"), "--tol", "(0, 1)")


# ---------------------------------------------------------------- 9. min_th above the buffer

def test_min_th_above_buffer_warns(tmp_path):
    doc = with_("aqm.max_th", 40, with_("aqm.min_th", 30))
    f = write(tmp_path, doc)
    with pytest.warns(UserWarning, match=r"aqm\.min_th = 30 .*model\.buffer = 20"):
        aqmchain.load_model(f)
    with pytest.warns(UserWarning, match="min_th"):
        aqmchain.Model(buffer=20, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.5),
                       aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(30, 40, 0.1)))
    code, out, err = run_cli("solve", f)
    assert code == 0 and err.count("aqmchain: warning: aqm.min_th") == 1
    code, out, err = run_cli("policies", f)
    assert code == 0 and err.count("aqmchain: warning: aqm.min_th") == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        aqmchain.model_from_dict(BASE)  # below the buffer: no warning
