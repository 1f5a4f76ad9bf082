"""`aqmchain passage`: JSON / CSV / PNG outputs equal to the Python API's, named errors."""

import json

import numpy as np

import aqmchain
from cli_helpers import TRACEBACK, run_cli


def test_passage_cli_writes_the_api_numbers(root, tmp_path):
    out, csv, png = tmp_path / "p.json", tmp_path / "p.csv", tmp_path / "p.png"
    model = root / "examples" / "small_ecn.toml"
    code, stdout, err = run_cli("passage", model, "--to", "queue>=25", "--times", "0,10,100,1000",
                                "--rewards", "drops,mark", "--json", out, "--csv", csv, "--plot", png, "-q")
    assert code == 0, err
    doc = json.loads(out.read_text())
    r = aqmchain.passage(aqmchain.load_model(model), "queue>=25", times=[0, 10, 100, 1000], rewards="drops,mark")
    assert doc["target"] == "queue>=25" and doc["times"] == [0.0, 10.0, 100.0, 1000.0]
    assert doc["cdf"] == r.cdf.tolist() and doc["mean"] == r.mean
    assert doc["rewards_until"] == r.rewards_until
    assert doc["rewards_cumulative"]["mark"] == r.rewards_cumulative["mark"].tolist()
    assert doc["solver"]["status"] == "converged"
    rows = csv.read_text().splitlines()
    assert rows[0].split(",")[:4] == ["time", "cdf", "survival", "error_bound"] and len(rows) == 5
    assert png.stat().st_size > 0
    assert np.all(np.diff(r.cdf) >= 0) and r.cdf[0] == 0.0


def test_passage_cli_names_the_option(root):
    model = root / "examples" / "small_ecn.toml"
    code, out, err = run_cli("passage", model, "--to", "delay>=3", "--times", "1")
    assert code == 2 and TRACEBACK not in err and "--to" in err, err
    code, out, err = run_cli("passage", model, "--to", "queue>=5", "--times", "10,3")
    assert code == 2 and "--times" in err, err
    code, out, err = run_cli("passage", model, "--to", "queue>=5", "--times", "1", "--p0", "level=500")
    assert code == 2 and "--p0" in err, err
    code, out, err = run_cli("passage", model, "--to", "queue>=5", "--times", "1", "--rewards", "bananas")
    assert code == 2 and "--rewards" in err, err
    # a budget that runs out: exit 3, the partial result written
    code, out, err = run_cli("passage", model, "--to", "queue>=30", "--times", "10,100000", "--method", "step",
                             "--max-steps", "50", "-q")
    assert code == 3 and "max_steps" in err, err
