"""The command line as a new user meets it: every --help example runs when pasted from the
repository root, exit codes 0 / 2 / 3 / 130, --version, --set, --threads, self-describing
JSON, CSV outputs, progress bars only where they belong, info's exact counts."""

import csv
import io
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import aqmchain
from aqmchain import _progress, cli
from cli_helpers import TRACEBACK, run_cli, to_toml
from conftest import BASE_DOC, ROOT, solution_distance_bound, summation_error


def help_examples() -> list[tuple[str, str]]:
    """(command, example line) for every example in every command's --help."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    out = []
    for name in cli.COMMANDS:
        text = sub.choices[name].format_help()
        lines = text.split("examples (from the repository root):", 1)[1].splitlines()
        ex = [ln.strip() for ln in lines if ln.startswith("  aqmchain ")]
        assert ex, f"{name} --help has no example"
        out += [(name, e) for e in ex]
    return out


def small(argv: list[str]) -> list[str]:
    """The example with small slot counts (the tests' budget), otherwise as pasted."""
    argv = list(argv)
    if argv[1] in ("simulate", "compare", "sweep") and "--slots" in argv:  # the simulator's budget
        argv[argv.index("--slots") + 1] = "200000"
    return argv


def small_file(tmp_path) -> Path:
    """examples/small_ecn.toml: a gentle-RED queue of 30 places with ECN on a two-state modulated
    source, on its plain grid (about 3,000 states)."""
    return ROOT / "examples" / "small_ecn.toml"


def test_every_command_has_a_description_and_an_example():
    examples = help_examples()
    assert {c for c, _ in examples} == set(cli.COMMANDS)
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, (desc, _) in cli.COMMANDS.items():
        assert desc and "\n" not in desc
        assert desc[0].upper() + desc[1:] in sub.choices[name].format_help().replace("\n", " ").replace("  ", " ") \
            or desc.split()[0] in sub.choices[name].format_help()
    # the alias of info
    assert "estimate" in sub.choices and sub.choices["estimate"] is sub.choices["info"]


@pytest.mark.parametrize("command,example", help_examples())
def test_help_example_runs_when_pasted(tmp_path, monkeypatch, command, example):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    argv = small(shlex.split(example))
    assert argv[0] == "aqmchain" and argv[1] == command
    code, out, err = run_cli(*argv[1:])
    assert code == 0, (example, out, err)
    assert TRACEBACK not in err
    # every output file named in the example was written
    for opt in ("--json", "--csv", "--plot", "--matrix", "--stationary"):
        if opt in argv and argv[argv.index(opt) + 1] != "-":
            assert (tmp_path / argv[argv.index(opt) + 1]).stat().st_size > 0, (example, opt)
    if "--prism" in argv:
        for ext in ("tra", "sta", "lab"):
            assert (tmp_path / f"{argv[argv.index('--prism') + 1]}.{ext}").stat().st_size > 0


def test_top_level_help_lists_every_command():
    code, out, err = run_cli("--help")
    assert code == 0 and TRACEBACK not in err, err
    for name in cli.COMMANDS:
        assert name in out
    assert "130" in out  # the exit codes
    for name in cli.COMMANDS:
        code, out, err = run_cli(name, "--help")
        assert code == 0 and "examples (from the repository root):" in out, (name, err)


def test_version():
    code, out, err = run_cli("--version")
    assert code == 0 and out.strip() == f"aqmchain {aqmchain.__version__}"


def test_exit_codes_2_and_3(root, tmp_path):
    model = small_file(tmp_path)
    code, out, err = run_cli("solve", model, "--set", "aqm.w=1.5")
    assert code == 2 and "aqm.w" in err and "1.5" in err and TRACEBACK not in err
    code, out, err = run_cli("solve", model, "--set", "aqm.nonsense=1")
    assert code == 2 and "aqm.nonsense" in err
    code, out, err = run_cli("solve", model, "--set", "w")
    assert code == 2 and "--set" in err
    code, out, err = run_cli("solve", model, "--method", "power", "--max-iter", "1")
    assert code == 3 and "did not converge" in err
    code, out, err = run_cli("solve", model, "--threads", "-1")
    assert code == 2 and "--threads" in err
    code, out, err = run_cli("sweep", model, "--param", "aqm.w=1:2:x")
    assert code == 2 and "--param aqm.w" in err
    code, out, err = run_cli("export", model)
    assert code == 2 and "--matrix" in err
    code, out, err = run_cli("export", model, "--stationary", tmp_path / "pi.txt")
    assert code == 2 and ".npy or .csv" in err
    code, out, err = run_cli("sweep", model, "--param", "aqm.w=0.1", "--csv", tmp_path / "nodir" / "x.csv")
    assert code == 2 and "does not exist" in err and out == ""


def test_set_overrides_a_key_like_the_python_replace(root, tmp_path):
    model = small_file(tmp_path)
    out = tmp_path / "o.json"
    code, _, err = run_cli("solve", model, "--set", "aqm.w=0.02", "--set", "service.mu=0.6", "--json", out, "-q")
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["model"]["aqm"]["w"] == 0.02 and doc["model"]["service"]["mu"] == 0.6
    m = aqmchain.load_model(model).replace(aqm={"w": 0.02}, service={"mu": 0.6})
    r = aqmchain.solve_stationary(m)
    assert doc["states"] == r.states
    # two solves of one chain: their vectors are as far apart as their residuals allow, and the
    # mean queue (q <= N - 1) moves by at most (N - 1) times that distance
    dist = solution_distance_bound(r.transition_matrix(), r.pi, r.info.residual, doc["solver"]["residual"])
    assert abs(doc["mean_queue"] - r.mean_queue) <= (m.buffer - 1) * (dist + summation_error(r.states))


def test_every_json_describes_itself(root, tmp_path):
    model = small_file(tmp_path)
    sim = ["--slots", "100000", "--batches", "5", "--replications", "2"]
    runs = {"solve": [], "simulate": sim, "compare": sim, "policies": [], "info": [],
            "sweep": ["--param", "aqm.w=0.1,0.2", "--scheduler", "sync"]}
    for cmd, extra in runs.items():
        out = tmp_path / f"{cmd}.json"
        code, _, err = run_cli(cmd, model, *extra, "--json", out, "-q")
        assert code == 0, (cmd, err)
        doc = json.loads(out.read_text())
        assert doc["version"] == aqmchain.__version__, cmd
        assert doc["command"].startswith(f"aqmchain {cmd} ") and str(model) in doc["command"], cmd
        assert doc["model"]["model"]["buffer"] == 30 and doc["model"]["aqm"]["drop"] == "gentle_red", cmd
    sim_doc = json.loads((tmp_path / "simulate.json").read_text())
    assert sim_doc["simulation"]["warmup"] == 100000 // 10  # the warm-up used, not -1
    cmp_doc = json.loads((tmp_path / "compare.json").read_text())
    rows = {r["metric"]: r for r in cmp_doc["comparison"]["metrics"]}
    # the comparison's row and the analytic block are the same number written twice (JSON keeps every digit)
    assert rows["mean_queue"]["analytic"] == cmp_doc["analytic"]["mean_queue"]


def test_csv_outputs(root, tmp_path):
    model = small_file(tmp_path)
    code, out, err = run_cli("solve", model, "--csv", "-")
    assert code == 0 and "mean queue" in err  # the summary moves to stderr
    rows = {r["metric"]: r["value"] for r in csv.DictReader(io.StringIO(out))}
    r = aqmchain.solve_stationary(aqmchain.load_model(model))
    assert float(rows["mean_queue"]) == r.mean_queue and float(rows["loss"]) == r.loss
    code, out, err = run_cli("policies", model, "--csv", "-", "-q")
    assert code == 0
    pol = list(csv.DictReader(io.StringIO(out)))
    assert [p["policy"] for p in pol] == ["tail", "front", "random"]
    assert float(pol[0]["mean_response"]) == pytest.approx(r.mean_response, rel=1e-12)


def test_load_model_honours_the_solver_table(tmp_path):
    doc = dict(BASE_DOC, solver={"method": "power", "max_iter": 1})
    f = tmp_path / "m.toml"
    f.write_text(to_toml(doc))
    m = aqmchain.load_model(f)
    assert m.solver_options == {"method": "power", "max_iter": 1} if hasattr(m, "solver_options") else True
    assert aqmchain.solver_options(m) == {"method": "power", "max_iter": 1}
    with pytest.raises(aqmchain.NonConvergenceError):
        aqmchain.solve_stationary(m)
    r = aqmchain.solve_stationary(m, method="direct", max_iter=0)  # given options win
    assert r.info.method == "direct"
    # the table travels with replace(); a model built in Python carries none
    with pytest.raises(aqmchain.NonConvergenceError):
        aqmchain.solve_stationary(m.replace(aqm={"w": 0.2}))
    assert aqmchain.solver_options(aqmchain.model_from_dict(BASE_DOC)[0]) == {}


def test_info_counts_exactly_when_cheap(root):
    for name in ("small_ecn.toml", "red_geo.toml", "dsred_ssmp.toml"):
        m = aqmchain.load_model(root / "examples" / name)
        info = aqmchain.model_info(m)
        assert info["exact"], name
        chain = aqmchain.build_chain(m)
        assert info["reachable_states"] == chain.n, name
        b = info.get("refined_bounds", info)  # an automatic grid: the bounds of the refined grid
        assert info["reachable_states"] <= b["reachable_bound"] <= b["product_states"]
        assert chain.nnz <= info["transitions_bound"] <= b["max_nnz"]
        # the tagged-packet chain: one state per packet position in each state
        assert info["tagged_states"] == int(np.sum(np.asarray(chain.labels["level"], dtype=np.int64)))
    # bounds only
    m = aqmchain.load_model(root / "examples" / "red_geo.toml")
    b = aqmchain.model_info(m, explore=False)
    assert not b["exact"] and "reachable_states" not in b and b["tagged_states_bound"] >= info["tagged_states"]


def test_info_cli_and_estimate_alias(root):
    f = root / "examples" / "red_geo.toml"
    code, out, err = run_cli("info", f)
    assert code == 0 and "(exact" in out and "tagged-packet chain" in out
    code, out, err = run_cli("estimate", f)
    doc = json.loads(out)
    m = aqmchain.load_model(f)
    assert doc["reachable_states"] == aqmchain.solve_stationary(m, response="none").states
    assert doc["product_states"] == int(np.prod(list(doc["components"].values()))) == 251 * 1001
    assert doc["refined_bounds"]["reachable_bound"] >= doc["reachable_states"]


def test_threads_option(root):
    code, out, err = run_cli("simulate", root / "examples" / "small_ecn.toml", "--slots", "100000", "--batches",
                             "5", "--replications", "2", "--threads", "1", "--json", "-", "-q")
    assert code == 0 and json.loads(out)["simulation"]["threads"] == 1
    old = aqmchain.set_num_threads(1)
    try:
        assert aqmchain.num_threads() == 1
    finally:
        aqmchain.set_num_threads(old)
    with pytest.raises(aqmchain.ModelError, match="threads"):
        aqmchain.set_num_threads(0)


def test_progress_bars_only_on_a_terminal_or_when_asked(root, monkeypatch, tmp_path):
    monkeypatch.delenv(_progress.ENV, raising=False)
    assert not _progress.enabled(False)  # pytest's stderr is not a terminal
    monkeypatch.setenv(_progress.ENV, "1")
    assert _progress.enabled(False) and not _progress.enabled(True)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with _progress.activity(True, "aqmchain: working", delay=0.0):
        time.sleep(0.6)
    assert "aqmchain: working" in err.getvalue()
    model = small_file(tmp_path)
    code, out, err = run_cli("sweep", model, "--param", "aqm.w=0.1,0.2", "--scheduler", "sync")
    assert code == 0 and "aqmchain: sweep" in err
    code, out, err = run_cli("sweep", model, "--param", "aqm.w=0.1,0.2", "--scheduler", "sync", "-q")
    assert code == 0 and err == "" and out == ""


def test_min_th_above_the_buffer_warns(tmp_path):
    doc = dict(BASE_DOC, aqm=dict(BASE_DOC["aqm"], min_th=25, max_th=30))
    with pytest.warns(UserWarning, match="aqm.min_th = 25 is not below the buffer"):
        aqmchain.model_from_dict(doc)
    f = tmp_path / "m.toml"
    f.write_text(to_toml(doc))
    code, out, err = run_cli("info", f)
    assert code == 0 and "warning: aqm.min_th = 25" in err


def test_reprs_replace_and_pickle():
    import pickle

    m = aqmchain.model_from_dict(BASE_DOC)[0]
    text = repr(m)
    for part in ("Model(buffer=20", "Bernoulli(alpha=0.5)", "DropFunction.red(min_th=5, max_th=15, p_max=0.1)",
                 "w=0.1", "GridSpec(k=2"):
        assert part in text, (part, text)
    assert "0x" not in text and "0x" not in repr(m.grid) and "0x" not in repr(m.aqm.drop)
    assert "<table>" in m._repr_html_()
    m2 = m.replace(aqm={"w": 0.02})
    assert m2.aqm.w == 0.02 and m.aqm.w == 0.1
    d1, d2 = aqmchain.model_to_dict(m), aqmchain.model_to_dict(m2)
    d2["aqm"]["w"] = 0.1
    assert d1 == d2
    m3 = m.replace(aqm={"drop": "dsred", "k_l": 5, "k_h": 15, "gamma": 0.5})
    assert m3.aqm.drop.kind == "dsred" and "min_th" not in aqmchain.model_to_dict(m3)["aqm"]
    with pytest.raises(aqmchain.ModelError, match="aqm.w"):
        m.replace(aqm={"w": -1})
    assert aqmchain.model_to_dict(pickle.loads(pickle.dumps(m))) == d1
    r = aqmchain.solve_stationary(m)
    assert "mean_queue=" in repr(r) and "<table>" in r._repr_html_()
    r2 = pickle.loads(pickle.dumps(r))
    assert r2.mean_queue == r.mean_queue and np.array_equal(r2.pi, r.pi) and r2.chain is None
    with pytest.raises(ValueError, match="without its chain"):
        r2.transition_matrix()
    s = aqmchain.simulate(m, slots=50_000, batches=5, replications=2)
    assert "±" in repr(s) and pickle.loads(pickle.dumps(s)).mean_queue == s.mean_queue
    cmp = aqmchain.simulation.Comparison(r, s)
    fig = cmp.plot()
    from matplotlib.figure import Figure

    assert isinstance(fig, Figure) and fig.axes[0].get_xlabel()
    assert "max |z|" in repr(cmp)


def test_a_closed_pipe_stops_quietly(root):
    p = subprocess.run(f"'{sys.executable}' -m aqmchain info examples/red_geo.toml | head -1", shell=True, cwd=root,
                       capture_output=True, text=True, timeout=120)
    assert p.stdout.startswith("model examples/red_geo.toml") and TRACEBACK not in p.stderr, p.stderr
    assert "BrokenPipe" not in p.stderr


def test_info_on_a_continuous_time_model(root):
    model = aqmchain.load_model(root / "examples" / "red_ctmc.toml")
    info = aqmchain.model_info(model)
    # front and random drop build a tagged-packet chain in continuous time too: one state per
    # (chain state, packets ahead), the sum of the levels over the chain's states
    levels = np.asarray(aqmchain.state_labels(aqmchain.build_chain(model))["level"], dtype=np.int64)
    assert info["exact"] and info["tagged_states"] == int(levels.sum())
    assert "front and random drop" in info["policy_cost"]
