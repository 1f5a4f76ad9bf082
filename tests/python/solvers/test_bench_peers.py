"""The peer benchmark's own helpers (benchmarks/bench_peers.py) on a small chain, without the
peers installed: the residual every answer is judged by, the reduced system the peers solve,
the restart loop that drives them to the tolerance, and the table and its docs block."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import scipy.sparse.linalg as sla

import aqmchain

from conftest import ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_peers", ROOT / "benchmarks" / "bench_peers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def small():
    model = aqmchain.Model(buffer=12, source=aqmchain.Source.bernoulli(0.45), service=aqmchain.Service(0.5),
                           aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(3, 8, 0.2), w=0.1, spacing="count"),
                           grid=aqmchain.GridSpec(k=1, refine="none"))
    chain = aqmchain.build_chain(model)
    P = aqmchain.transition_matrix(chain).tocsr()
    direct = aqmchain.solve_stationary(chain, method="direct", tol=1e-14)
    return chain, P, np.asarray(direct.pi)


def test_reduced_system_solved_directly_is_the_stationary_vector(bench, small):
    chain, P, pi = small
    k = int(chain.recurrent_state)
    A, b = bench.reduced_system(P, k)
    assert A.shape == (chain.n - 1, chain.n - 1)
    x = sla.spsolve(A.tocsc(), b)
    v = bench.full_vector(x, k)
    assert v[k] == 1.0 and len(v) == chain.n
    # the same vector as aqmchain's direct method, and a residual at round-off level
    cond_bound = 1e3 * np.finfo(float).eps * chain.n
    assert np.abs(v / v.sum() - pi).sum() <= cond_bound
    assert bench.residual(P, v) <= cond_bound


def test_reduced_measure_is_the_residual_of_the_normalised_vector(bench, small):
    chain, P, pi = small
    k = int(chain.recurrent_state)
    A, b = bench.reduced_system(P, k)
    rng = np.random.default_rng(7)
    x = pi[np.r_[0:k, k + 1:chain.n]] / pi[k] * (1 + 1e-3 * rng.standard_normal(chain.n - 1))
    m, res = bench.reduced_measure(A, b, x), bench.residual(P, bench.full_vector(x, k))
    assert res > 1e-8  # a perturbed vector: far from converged
    assert m == pytest.approx(res, rel=1e-9)


def test_residual_refuses_vectors_without_mass(bench, small):
    chain, P, _ = small
    assert bench.residual(P, np.zeros(chain.n)) == math.inf
    assert bench.residual(P, -np.ones(chain.n)) == math.inf
    v = np.ones(chain.n)
    v[0] = np.nan
    assert bench.residual(P, v) == math.inf


def test_numpy_csr_product_matches_scipy(bench, small):
    chain, P, _ = small
    A, _ = bench.reduced_system(P, int(chain.recurrent_state))
    x = np.random.default_rng(3).random(A.shape[0])
    mine = bench._Csr(A.indptr, A.indices, A.data, A.shape[0]) @ x
    # the same products summed in another order: each row within c eps sum_j |a_ij x_j| of the exact
    # sum (c: the most entries in a row), on both sides
    c = int(np.diff(A.indptr).max())
    bound = 2 * c * np.finfo(float).eps * (abs(A) @ np.abs(x))
    assert np.all(np.abs(mine - A @ x) <= bound)


def test_restarts_drive_gmres_with_spilu_to_the_tolerance(bench, small):
    chain, P, _ = small
    k = int(chain.recurrent_state)
    A, b = bench.reduced_system(P, k)
    ilu = sla.spilu(A.tocsc(), drop_tol=1e-2, fill_factor=2)  # a weak ILU: several GMRES steps
    M = sla.LinearOperator(A.shape, ilu.solve)
    x, its, passes, m = bench.solve_to_tol(bench._scipy_gmres(A, b, M, 20, 2000), A, b, np.zeros(A.shape[0]),
                                           bench.TOL)
    assert m <= bench.TOL / 2 and its >= 1 and passes >= 1
    assert bench.residual(P, bench.full_vector(x, k)) <= bench.TOL


def test_restarts_end_when_a_pass_makes_no_progress(bench, small):
    chain, P, _ = small
    A, b = bench.reduced_system(P, int(chain.recurrent_state))
    x, its, passes, m = bench.solve_to_tol(lambda x0, atol2: (x0, 1), A, b, np.zeros(A.shape[0]), bench.TOL,
                                           max_passes=5)
    assert passes == 2 and its == 2 and m > bench.TOL  # the second pass did not halve the measure


def _rows():
    base = {"case": "c", "states": 1000, "nnz": 5000, "peak_gb": 0.1}
    return [dict(base, solver="aqmchain:krylov", iterations=12, setup_s=0.5, solve_s=1.0, residual=3e-13),
            dict(base, solver="petsc:ilu2", iterations=40, setup_s=0.1, solve_s=0.2, residual=5e-9),
            dict(base, solver="petsc:lu", iterations=1, setup_s=2.0, solve_s=0.1, residual=1e-15),
            dict(base, solver="pyamg:air", note="stopped at the 600 s limit")]


def test_table_ranks_only_converged_runs(bench):
    lines = bench.table(_rows()).splitlines()
    assert lines[0] == "| " + " | ".join(bench.COLUMNS) + " |"
    by = {ln.split(" | ")[3]: ln for ln in lines[2:]}
    # the unconverged ILU run is the fastest but is marked, not bold
    assert "**aqmchain:krylov**" in by and "| 1.50 |" in by["**aqmchain:krylov**"]
    assert by["petsc:ilu2"].endswith("| no (residual > 1e-12) |")
    assert by["petsc:lu"].endswith("| yes |") and "| 2.10 |" in by["petsc:lu"]
    assert by["pyamg:air"].endswith("| no: stopped at the 600 s limit |") and "| — |" in by["pyamg:air"]


def test_write_block_replaces_only_its_block(bench, tmp_path):
    page = tmp_path / "performance.md"
    page.write_text("before\n<!-- BENCH:peers -->\nold\n<!-- /BENCH:peers -->\nafter\n")
    bench.write_block("| new |", page=page)
    text = page.read_text()
    assert text.startswith("before\n<!-- BENCH:peers -->\nCommand: `python benchmarks/")
    assert "| new |\n<!-- /BENCH:peers -->\nafter\n" in text and "old" not in text


def test_every_case_and_peer_is_named_once(bench):
    assert set(bench.DEFAULT_CASES) == set(bench.CASES) and len(bench.CASES) == 10 and "pyamg:ua" in bench.PEERS
    runtimes = {spec["runtime"] for spec in bench.PEERS.values()}
    assert runtimes == {"aqmchain", "petsc", "pyamg", "scipy"}
    assert all("pc_type" in spec["opts"] for spec in bench.PEERS.values() if spec["runtime"] == "petsc")


def test_a_step_that_stops_ends_the_restarts(bench, small):
    chain, P, _ = small
    A, b = bench.reduced_system(P, int(chain.recurrent_state))

    def diverged(x0, atol2):
        raise bench.Stop(np.full_like(x0, np.nan), 5)
    x, its, passes, m = bench.solve_to_tol(diverged, A, b, np.zeros(A.shape[0]), bench.TOL)
    assert (its, passes) == (5, 1) and not m <= bench.TOL
    assert bench.residual(P, bench.full_vector(x, int(chain.recurrent_state))) == math.inf
