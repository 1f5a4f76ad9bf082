"""SPEC 8(d): seed 001 Tables I-III, GEO rows with w = 0.07, at K = 4.

With SPEC's conventions the printed "queue length" is our mean_queue (waiting
packets), "waiting time" is mean_response (R = D - A) and loss is all losses.
Tolerance 1.5 % (the grid K = 4 is an approximation of continuous avg, SPEC 4).
"""

import json

import pytest

import aqmchain
from conftest import REFERENCE_TABLES

TABLES = REFERENCE_TABLES

# shared/reference/README.md: the DSRED gamma = 0.5, mu = 0.5, w = 0.07 mean queue is
# misprinted (54.87); a 1e10-slot simulation gives 54.04 and the row's own loss and
# waiting time imply 54.09 by Little's law.  We compare with the implied value.
MISPRINTS = {("DSRED", 0.5, 0.5, 0.07, "mean_queue"): 54.09}


def rows():
    if not TABLES.exists():
        pytest.skip(f"reference tables not found at {TABLES}")
    data = json.loads(TABLES.read_text())
    return [r for r in data["rows"] if r["source"] == "GEO" and r["w"] == 0.07]


def model_for(row):
    drop = (aqmchain.DropFunction.red(100, 200, 0.1) if row["alg"] == "RED"
            else aqmchain.DropFunction.dsred(100, 200, row["gamma"]))
    return aqmchain.Model(buffer=250, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(row["mu"]),
                          aqm=aqmchain.Aqm(drop=drop, w=0.07), grid=aqmchain.GridSpec(k=4))


@pytest.fixture(scope="module")
def solved():
    return [(row, aqmchain.solve_stationary(model_for(row))) for row in rows()]


def test_eight_geo_rows_present(solved):
    assert len(solved) == 8


@pytest.mark.parametrize("ours,theirs", [("mean_queue", "mean_queue"), ("loss", "loss"),
                                         ("mean_response", "mean_wait")])
def test_within_1p5_percent(solved, ours, theirs):
    for row, r in solved:
        key = (row["alg"], row["gamma"], row["mu"], row["w"], theirs)
        expected = MISPRINTS.get(key, row[theirs])
        got = getattr(r, ours)
        assert got == pytest.approx(expected, rel=0.015), f"{row['alg']} gamma={row['gamma']} mu={row['mu']}: {ours}"


def test_solves_are_exact_for_the_chain(solved):
    for _, r in solved:
        assert r.info.residual <= 1e-12
        assert r.littles_law_error < 1e-9
