"""CLI: `aqmchain solve MODEL --json OUT` writes every SPEC 8 key; exit codes 0 / 2 / 3."""

import json
import subprocess
import sys

import pytest

SPEC8_KEYS = ["states", "nnz", "arrival_rate", "mean_queue", "var_queue", "queue_pmf", "mean_system", "var_system",
              "system_pmf", "loss", "loss_aqm", "loss_overflow", "mark_prob", "throughput", "mean_response",
              "var_response", "solver"]


def run(*args):
    return subprocess.run([sys.executable, "-m", "aqmchain", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("example", ["red_geo.toml", "small_ecn.toml", "dsred_ssmp.toml"])
def test_solve_writes_spec8_json(root, tmp_path, example):
    out = tmp_path / "out.json"
    p = run("solve", str(root / "examples" / example), "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    for key in SPEC8_KEYS:
        assert key in doc and doc[key] is not None, key
    for key in ("method", "residual", "iterations", "seconds"):
        assert key in doc["solver"]
    assert doc["solver"]["residual"] <= 1e-12
    assert abs(sum(doc["queue_pmf"]) - 1) < 1e-12 and abs(sum(doc["system_pmf"]) - 1) < 1e-12
    assert len(doc["system_pmf"]) == len(doc["queue_pmf"]) + 1
    assert "mean queue" in p.stdout


def test_bad_input_exit_2_names_key(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text('[model]\nbuffer = 10\n[source]\nkind = "bernoulli"\nalpha = 1.7\n[service]\nmu = 0.5\n')
    p = run("solve", str(f))
    assert p.returncode == 2
    assert "source.alpha" in p.stderr and "1.7" in p.stderr
    f.write_text("this is not toml = = \n")
    p = run("solve", str(f))
    assert p.returncode == 2 and "malformed" in p.stderr


def test_non_convergence_exit_3_with_partial_json(root, tmp_path):
    out = tmp_path / "partial.json"
    p = run("solve", str(root / "examples" / "small_ecn.toml"), "--method", "power", "--max-iter", "1",
            "--json", str(out))
    assert p.returncode == 3
    assert "did not converge" in p.stderr
    doc = json.loads(out.read_text())
    assert doc["solver"]["status"] == "not_converged" and "error" in doc


def test_estimate(root):
    p = run("estimate", str(root / "examples" / "red_geo.toml"))
    assert p.returncode == 0
    assert json.loads(p.stdout)["product_states"] == 251 * 1001
