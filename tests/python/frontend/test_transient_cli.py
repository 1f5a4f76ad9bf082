"""`aqmchain transient` and scenario files: JSON / CSV / PNG outputs, exit codes, named errors."""

import json

import numpy as np
import pytest

import aqmchain
from cli_helpers import TRACEBACK, run_cli
from conftest import stepping_error

LOAD = "examples/load_step"


def test_transient_cli_writes_times_and_one_list_per_metric(root, tmp_path):
    out, csv, png = tmp_path / "t.json", tmp_path / "t.csv", tmp_path / "t.png"
    code, stdout, err = run_cli("transient", root / LOAD / "red.toml", "--scenario", root / LOAD / "scenario.toml",
                                "--times", "lin:0:10000:21", "--pmf-times", "3000,6000", "--json", out, "--csv", csv,
                                "--plot", png)
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["times"] == [float(t) for t in range(0, 10001, 500)]
    for name in aqmchain.TRANSIENT_METRICS:
        assert len(doc[name]) == 21 and all(isinstance(x, float) for x in doc[name]), name
    assert doc["phase_boundaries"] == [0, 3000, 6000, 10000] and doc["phase_labels"] == ["light", "heavy", "light"]
    assert doc["solver"]["method"] == "step" and doc["solver"]["status"] == "converged"
    assert doc["queue_pmf"]["times"] == [3000.0, 6000.0] and abs(sum(doc["queue_pmf"]["pmf"][1]) - 1) < 1e-12
    # the same numbers from the Python API on the same scenario
    sc = aqmchain.load_scenario(root / LOAD / "scenario.toml", root / LOAD / "red.toml")
    r = aqmchain.solve_transient(sc, doc["times"])
    # two runs of the same steps may add in another order (another thread count): their laws stay
    # within the stepping drift over all the steps, so the mean queues within N times that
    drift = max(stepping_error(aqmchain.transition_matrix(aqmchain.build_chain(ph.model)), int(sc.total_duration()))
                for ph in sc.phases)
    buffer = sc.phases[0].model.buffer
    np.testing.assert_allclose(doc["mean_queue"], r.mean_queue, rtol=0, atol=buffer * drift)
    rows = csv.read_text().splitlines()
    assert rows[0].startswith("time,phase,mean_queue") and len(rows) == 22
    assert png.stat().st_size > 10000
    # heavy load raises the mean queue, the light phase after it brings it down again
    q = np.array(doc["mean_queue"])
    assert q[12] > 5 * q[6] and q[-1] < 0.2 * q[12]


def test_transient_cli_errors_name_the_key(root, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[phase]]\nslots = 10\nalpah = 0.3\n")
    code, _, err = run_cli("transient", root / LOAD / "red.toml", "--scenario", bad, "--times", "1,2")
    assert code == 2 and "phase[0].alpah" in err and TRACEBACK not in err
    bad.write_text("[[phase]]\nslots = 10\nalpha = 1.3\n")
    code, _, err = run_cli("transient", root / LOAD / "red.toml", "--scenario", bad, "--times", "1,2")
    assert code == 2 and "source.alpha" in err and "1.3" in err
    bad.write_text("[[phase]]\nslots = 10\nbuffer = 20\n")
    code, _, err = run_cli("transient", root / LOAD / "red.toml", "--scenario", bad, "--times", "1")
    assert code == 2 and "phase[0].buffer" in err
    bad.write_text("[[phase]]\nalpha = 0.3\n")
    code, _, err = run_cli("transient", root / LOAD / "red.toml", "--scenario", bad, "--times", "1")
    assert code == 2 and "phase[0].slots" in err
    code, _, err = run_cli("transient", root / LOAD / "red.toml", "--times", "log:0:10:5")
    assert code == 2 and "--times" in err
    code, _, err = run_cli("transient", root / LOAD / "red.toml", "--times", "5,3")
    assert code == 2 and "times" in err
    code, _, err = run_cli("transient", root / "examples" / "red_ctmc.toml", "--times", "1", "--method", "step")
    assert code == 2 and "step" in err


def test_scenario_phase_changes_are_relative_to_the_base_model(root):
    sc = aqmchain.make_scenario(aqmchain.load_model(root / LOAD / "red.toml"),
                                [{"slots": 5, "mu": 0.7}, {"slots": 5, "aqm": {"p_max": 0.3}},
                                 {"slots": 5, "drop": "dsred", "k_l": 5, "k_h": 20, "gamma": 0.5}])
    m0, m1, m2 = (p.model for p in sc.phases)
    assert m0.service.mu == 0.7 and m1.service.mu == 0.5  # phase 1 starts from the base again
    assert m1.aqm.drop.p_max == 0.3 and m2.aqm.drop.kind == "dsred" and m2.aqm.w == m0.aqm.w
    with pytest.raises(aqmchain.ModelError, match="phase"):
        aqmchain.make_scenario(m0, [])
    with pytest.raises(aqmchain.ModelError, match=r"phase\[0\]\.grid"):
        aqmchain.make_scenario(m0, [{"slots": 5, "grid": {"k": 3}}])


def test_a_phase_giving_ssmp_mean_replaces_the_base_q(root):
    base = aqmchain.load_model(root / "examples" / "dsred_ssmp.toml")
    doc = aqmchain.model_to_dict(base)
    assert "q" in doc["source"]
    sc = aqmchain.make_scenario(doc, [{"slots": 5, "mean": 0.3}, {"slots": 5, "q": doc["source"]["q"]}])
    m0, m1 = (p.model for p in sc.phases)
    # an independent check of the mean: the stationary arrival probability of the modulator
    pi = np.asarray(m0.source.modulator_stationary())
    assert pi @ np.asarray(m0.source.arrival) == pytest.approx(0.3, rel=1e-9)
    assert m1.source.q == pytest.approx(base.source.q)


def test_pmf_times_are_rounded_like_the_times(root, tmp_path):
    out = tmp_path / "t.json"
    code, _, err = run_cli("transient", root / LOAD / "red.toml", "--times", "log:1:1000:7", "--pmf-times",
                           "log:1:1000:7", "--json", out, "-q")
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["queue_pmf"]["times"] == doc["times"] and len(doc["queue_pmf"]["pmf"]) == 7
