"""The twelve GEO rows of Tables I-III of "Implementation of modified AQM mechanisms in IP
routers" on the automatic grid: mean queue, loss and waiting time within 1 %, the variances
within 3 % of the printed values (the two probable misprints excluded, see docs/fidelity.md).

With the library's conventions the printed "queue length" is mean_queue (waiting packets),
"waiting time" is the response time R = D - A and loss is all losses.  On the uniform 1/4
grid the heavy-load RED rows miss the variance targets (+100 % and +10 %): that is checked too.
"""

import pytest

import aqmchain
from conftest import reference_rows

TARGETS = [("mean_queue", "mean_queue", 0.01), ("var_queue", "var_queue", 0.03), ("loss", "loss", 0.01),
           ("mean_response", "mean_wait", 0.01), ("var_response", "var_wait", 0.03)]
# A 1e10-slot simulation gives 54.04 (the row's own loss and waiting time imply 54.09 by
# Little's law) and 2452.8 for these two printed values.
MISPRINTS = {("DSRED", 0.5, 0.5, 0.07, "mean_queue"), ("DSRED", 0.5, 0.25, 0.07, "var_wait")}


def rows():
    return reference_rows("GEO")


def model_for(row, grid):
    drop = (aqmchain.DropFunction.red(100, 200, 0.1) if row["alg"] == "RED"
            else aqmchain.DropFunction.dsred(100, 200, row["gamma"]))
    return aqmchain.Model(buffer=250, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(row["mu"]),
                          aqm=aqmchain.Aqm(drop=drop, w=row["w"]), grid=grid)


@pytest.fixture(scope="module")
def solved():
    return [(row, aqmchain.solve_stationary(model_for(row, aqmchain.GridSpec(k=4, refine="auto")))) for row in rows()]


def test_twelve_geo_rows_present(solved):
    assert len(solved) == 12


@pytest.mark.parametrize("ours,theirs,tol", TARGETS)
def test_automatic_grid_meets_the_targets(solved, ours, theirs, tol):
    for row, r in solved:
        if (row["alg"], row["gamma"], row["mu"], row["w"], theirs) in MISPRINTS:
            continue
        got = getattr(r, ours)
        assert got == pytest.approx(row[theirs], rel=tol), \
            f"{row['alg']} gamma={row['gamma']} mu={row['mu']} w={row['w']}: {ours}"


def test_uniform_quarter_grid_misses_the_heavy_red_variances():
    for row in rows():
        if row["alg"] == "RED" and row["mu"] == 0.25:
            r = aqmchain.solve_stationary(model_for(row, aqmchain.GridSpec(k=4)), response="none")
            assert r.var_queue > 1.08 * row["var_queue"], row["w"]


def test_solves_are_exact_for_the_chain(solved):
    for _, r in solved:
        assert r.info.residual <= 1e-12
        assert r.littles_law_error < 1e-9
        assert r.grid["refined"]
