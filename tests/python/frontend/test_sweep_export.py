"""Sweeps on Dask (a LocalCluster of 2 workers, a point that fails), the sweep-curve plot, and
the exports read back: Matrix Market by SciPy, PRISM's .tra / .sta / .lab by a parser written
here, the stationary vector as .npy / CSV."""

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import aqmchain
from cli_helpers import run_cli, to_toml
from conftest import BASE_DOC, solution_distance_bound


@pytest.fixture(scope="module")
def client():
    """Two worker processes with one thread each (the machine has 2 cores); closed after."""
    from dask.distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                           silence_logs=50)
    c = Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def base_model():
    return aqmchain.model_from_dict(BASE_DOC)[0]


def test_sweep_on_a_local_cluster_records_a_failing_point(client):
    m = base_model()
    grid = {"aqm.w": [0.05, 0.2, 1.5], "service.mu": [0.45, 0.6]}  # w = 1.5 is refused by the model
    res = aqmchain.sweep(m, grid, scheduler=client)
    assert isinstance(res, aqmchain.SweepResult) and len(res) == 6
    assert list(res["aqm.w"]) == [0.05, 0.05, 0.2, 0.2, 1.5, 1.5]  # grid order, first key slowest
    bad = res[res["aqm.w"] == 1.5]
    assert (bad["status"] == "invalid").all()
    assert all("aqm.w" in e and "1.5" in e for e in bad["error"])
    ok = res[res["status"] == "ok"]
    assert len(ok) == 4
    for _, row in ok.iterrows():
        # each point against an independent solve in this process
        point = m.replace(aqm={"w": row["aqm.w"]}, service={"mu": row["service.mu"]})
        ref = aqmchain.solve_stationary(point)
        # both solves converged: their laws are within the distance their residuals guarantee, the
        # mean queue within N times that, the loss (a ratio of two sums of weights in [0, 1])
        # within (1 + loss) / arrival rate times that
        r = row["result"]  # the object came back from a worker (without its chain)
        P = aqmchain.transition_matrix(aqmchain.build_chain(point))
        d = solution_distance_bound(P, ref.pi, r.info.residual, ref.info.residual)
        assert abs(row["mean_queue"] - ref.mean_queue) <= point.buffer * d
        assert abs(row["loss"] - ref.loss) <= (1 + ref.loss) * d / ref.arrival_rate
        assert row["states"] == ref.states
        assert r.mean_response == pytest.approx(ref.mean_response, rel=1e-10)
        assert np.abs(r.queue_pmf - ref.queue_pmf).max() <= d
        assert r.chain is None
    # a failing solve (non-convergence) is recorded too, with the rest going on
    res2 = aqmchain.sweep(m, {"service.mu": [0.45, 0.6]}, solver={"method": "power", "max_iter": 1},
                          scheduler=client)
    assert (res2["status"] == "failed").all() and all("did not converge" in e for e in res2["error"])
    # a task that fails on the cluster itself (not inside a point) is reported per task, not fatal
    from importlib import import_module

    run_tasks = import_module("aqmchain.sweep").run_tasks
    out = run_tasks(math.sqrt, [(4.0,), (-1.0,)], scheduler=client, on_error=lambda i, e: f"{i}: {e}")
    assert out == [2.0, "1: math domain error"]
    with pytest.raises(ValueError, match="math domain error"):
        run_tasks(math.sqrt, [(-1.0,)], scheduler=client)
    # a loaded model's [solver] table travels with it into the sweep
    loaded = aqmchain.model_from_dict(dict(BASE_DOC, solver={"method": "power", "max_iter": 1}))
    carried = aqmchain.modelfile.attach_solver(loaded[0], loaded[1])
    res3 = aqmchain.sweep(carried, {"service.mu": [0.45]}, scheduler="sync")
    assert res3.loc[0, "status"] == "failed"
    assert res2["mean_queue"].isna().all() and (res2["states"] > 0).all()


def test_sweep_sync_simulation_and_plot():
    import matplotlib
    from matplotlib.figure import Figure

    backend = matplotlib.get_backend()
    m = base_model()
    res = aqmchain.sweep(m, {"aqm.p_max": "0.1:0.3:3", "service.mu": [0.45, 0.6]}, simulate=True,
                         sim_options={"slots": 200_000, "batches": 10, "replications": 2}, scheduler="sync")
    assert (res["status"] == "ok").all() and len(res) == 6
    assert list(res["aqm.p_max"]) == pytest.approx([0.1, 0.1, 0.2, 0.2, 0.3, 0.3])
    # the chain is exact for its grid, the simulation averages continuously: agree within the intervals
    z = (res["sim_throughput"] - res["throughput"]).abs() / (res["sim_throughput_ci"] / 1.96)
    assert (z < 5).all()
    assert isinstance(res.loc[0, "simulation"], aqmchain.SimulationResult)
    fig = res.plot_curves("mean_queue")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert len(ax.get_lines()) >= 2  # one line per value of service.mu
    assert "aqm.p_max" in ax.get_xlabel() and "packets" in ax.get_ylabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["service.mu = 0.45", "service.mu = 0.6"]
    assert matplotlib.get_backend() == backend
    with pytest.raises(aqmchain.ModelError, match="metric"):
        res.plot_curves("no_such_metric")


def test_sweep_rejects_bad_keys_before_running():
    m = base_model()
    with pytest.raises(aqmchain.ModelError, match="section.key"):
        aqmchain.sweep(m, {"w": [0.1]}, scheduler="sync")
    with pytest.raises(aqmchain.ModelError, match="LO:HI:N"):
        aqmchain.sweep(m, {"aqm.w": "0.1:0.2:0"}, scheduler="sync")
    with pytest.raises(aqmchain.OptionError, match="scheduler"):
        aqmchain.sweep(m, {"aqm.w": [0.1]}, scheduler="nowhere")
    assert aqmchain.sweep.__module__ == "aqmchain.sweep"


def test_scheduler_from_the_environment(monkeypatch):
    from importlib import import_module

    mod = import_module("aqmchain.sweep")
    monkeypatch.setenv(mod.SCHEDULER_ENV, "sync")
    assert mod.resolve_scheduler(None) == "sync"
    res = aqmchain.sweep(base_model(), {"aqm.policy": ["tail", "front"]})  # no cluster started
    assert list(res["status"]) == ["ok", "ok"] and res.loc[1, "mean_response"] < res.loc[0, "mean_response"]
    assert "<table" in res._repr_html_() and "aqmchain sweep" in res._repr_html_()
    monkeypatch.delenv(mod.SCHEDULER_ENV)
    assert mod.resolve_scheduler(None) == "local"


def test_parse_values():
    from importlib import import_module

    pv = import_module("aqmchain.sweep").parse_values
    assert pv("k", "0.25:0.5:6") == pytest.approx(np.linspace(0.25, 0.5, 6))
    assert pv("k", "log:1e-3:1e-1:3") == pytest.approx([1e-3, 1e-2, 1e-1])
    assert pv("k", "tail,front,random") == ["tail", "front", "random"]
    assert pv("k", "[0.1,0,0],[0.2,0,0]") == [[0.1, 0, 0], [0.2, 0, 0]]
    assert pv("k", "100,200") == [100, 200]


def test_sweep_cli_outputs_and_exit_3(root, tmp_path):
    f = tmp_path / "m.toml"
    f.write_text(to_toml(BASE_DOC))
    code, out, err = run_cli("sweep", f, "--param", "aqm.w=0.05,2", "--param", "service.mu=0.45:0.6:2",
                             "--scheduler", "sync", "--csv", tmp_path / "s.csv", "--json", tmp_path / "s.json",
                             "--plot", tmp_path / "s.png")
    assert code == 3, err
    assert "aqm.w = 2" in err and "invalid" in err
    assert "nan" not in out.lower() and "n/a" in out  # the failed points in the table
    rows = list(csv.DictReader(io.StringIO((tmp_path / "s.csv").read_text())))
    assert len(rows) == 4 and [r["status"] for r in rows] == ["ok", "ok", "invalid", "invalid"]
    doc = json.loads((tmp_path / "s.json").read_text())
    assert doc["sweep"]["failed"] == 2 and doc["rows"][0]["mean_queue"] == float(rows[0]["mean_queue"])
    assert doc["rows"][3]["mean_queue"] is None
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_optimize_starts_on_the_sweep_machinery(client, tmp_path):
    m = base_model()
    kw = dict(params="aqm.w", objective="mean_queue", bounds={"aqm.w": (0.01, 0.5)}, max_evals=12)
    seq = aqmchain.optimize(m, starts=[[0.1]], **kw)
    par = aqmchain.optimize(m, starts=[[0.1]], scheduler="sync", **kw)
    assert par.x == seq.x and par.value == seq.value and par.evaluations == seq.evaluations
    assert [r["x"] for r in par.trace] == [r["x"] for r in seq.trace]
    f = tmp_path / "m.toml"
    f.write_text(to_toml(BASE_DOC))
    code, out, err = run_cli("optimize", f, "--params", "aqm.w", "--objective", "mean_queue", "--bounds",
                             "aqm.w=0.01:0.5", "--starts", "0.1", "--max-evals", "12", "--scheduler", "sync",
                             "--json", "-", "-q")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["value"] == seq.value and doc["x"] == seq.x and doc["input_model"]["aqm"]["w"] == 0.1
    two = aqmchain.optimize(m, starts=[[0.1], [0.3]], scheduler=client, **kw)
    assert len(two.starts) == 2 and two.evaluations <= 12
    best = min((r for r in two.trace if r["status"] == "ok"), key=lambda r: r["value"])
    assert two.value == best["value"] and two.x == best["x"]


# ---------------------------------------------------------------- exports


def parse_tra(path: Path) -> sp.csr_matrix:
    """PRISM explicit .tra: 'n m', then 'i j x' lines."""
    lines = path.read_text().splitlines()
    n, m = map(int, lines[0].split())
    assert len(lines) == 1 + m
    rows, cols, vals = [], [], []
    for ln in lines[1:]:
        i, j, x = ln.split()
        rows.append(int(i))
        cols.append(int(j))
        vals.append(float(x))
    assert sorted(zip(rows, cols)) == list(zip(rows, cols))  # row order
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, n))


def parse_sta(path: Path) -> tuple[list[str], np.ndarray]:
    lines = path.read_text().splitlines()
    names = lines[0].strip("()").split(",")
    vals = []
    for k, ln in enumerate(lines[1:]):
        i, tup = ln.split(":", 1)
        assert int(i) == k
        vals.append([int(v) for v in tup.strip("()").split(",")])
    return names, np.array(vals)


def parse_lab(path: Path) -> dict[str, set[int]]:
    lines = path.read_text().splitlines()
    decl = {}
    for item in lines[0].split():
        k, name = item.split("=")
        decl[int(k)] = name.strip('"')
    out = {name: set() for name in decl.values()}
    for ln in lines[1:]:
        i, labs = ln.split(":")
        for k in labs.split():
            out[decl[int(k)]].add(int(i))
    return out


@pytest.mark.parametrize("example", ["small_ecn.toml", "red_ctmc.toml"])
def test_exports_read_back_exactly(root, tmp_path, example):
    m = aqmchain.load_model(root / "examples" / example).replace(grid={"refine": "none"})
    r = aqmchain.solve_stationary(m)
    P = r.transition_matrix()
    path = aqmchain.export_matrix(r, tmp_path / "P.mtx")
    A = scipy.io.mmread(path).tocsr()
    assert A.shape == P.shape and (A != P).nnz == 0  # entry for entry, no rounding
    files = aqmchain.export_prism(r, tmp_path / "chain")
    T = parse_tra(files["tra"])
    if m.time == "discrete":
        assert (T != P).nnz == 0
    else:  # a CTMC's .tra holds the rates; the diagonal is implied
        off = P - sp.diags(P.diagonal())
        off.eliminate_zeros()
        assert (T != off).nnz == 0 and np.allclose(np.asarray(P.sum(axis=1)).ravel(), 0, atol=1e-12)
    names, vals = parse_sta(files["sta"])
    labels = r.state_labels()
    assert names == list(r.chain.labels)
    for c, name in enumerate(names):
        assert np.array_equal(vals[:, c], labels[name])
    lab = parse_lab(files["lab"])
    level = labels["level"]
    assert lab["empty"] == set(np.flatnonzero(level == 0)) and lab["full"] == set(np.flatnonzero(level == m.buffer))
    assert lab["deadlock"] == set() and len(lab["init"]) == 1
    (i,) = lab["init"]
    assert level[i] == 0 and labels["avg_index"][i] == 0
    # the stationary vector with its labels
    for ext in ("npy", "csv"):
        f = aqmchain.export_stationary(r, tmp_path / f"pi.{ext}")
        if ext == "npy":
            a = np.load(f)
            prob, lv, avg = a["probability"], a["level"], a["avg"]
        else:
            rows = list(csv.DictReader(io.StringIO(f.read_text())))
            prob = np.array([float(x["probability"]) for x in rows])
            lv = np.array([int(x["level"]) for x in rows])
            avg = np.array([float(x["avg"]) for x in rows])
        assert np.array_equal(prob, r.pi) and np.array_equal(lv, level) and np.array_equal(avg, labels["avg"])
        assert math.isclose(prob.sum(), 1.0, abs_tol=1e-12)


def test_export_cli(root, tmp_path):
    f = tmp_path / "m.toml"
    f.write_text(to_toml(BASE_DOC))
    code, out, err = run_cli("export", f, "--matrix", tmp_path / "P.mtx", "--prism", tmp_path / "b",
                             "--stationary", tmp_path / "pi.npy")
    assert code == 0, err
    r = aqmchain.solve_stationary(aqmchain.load_model(f))
    assert (scipy.io.mmread(tmp_path / "P.mtx").tocsr() != r.transition_matrix()).nnz == 0
    assert np.array_equal(np.load(tmp_path / "pi.npy")["probability"], r.pi)
    assert f"{r.states} states" in out
