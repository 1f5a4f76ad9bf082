"""Peers on the same matrices: aqmchain's krylov against PETSc (petsc4py), PyAMG and SciPy on
the exported transition matrix of each chain, in the same run.

    .venv/bin/python benchmarks/bench_peers.py --quick                  # small analogues of every case
    .venv/bin/python benchmarks/bench_peers.py --cases geo_count geo_k4 --timeout 600
    .venv/bin/python benchmarks/bench_peers.py --cases flows --peers aqmchain:krylov petsc:gamg_ua pyamg:air

Per case: one process builds the chain, writes P with ``aqmchain.export_matrix`` (Matrix
Market), reads the file back and stores the reduced system that every peer solves (below) as
NumPy arrays; then every solver runs in a process of its own under a wall-clock limit
(``--timeout``) and an address-space limit (``--mem-gb``): aqmchain in this interpreter
(it builds the same chain again, its build not timed), PETSc in the interpreter that has
petsc4py (``--petsc-python``, Debian's ``/usr/bin/python3``), PyAMG and SciPy in this one.
Each reports its set-up and solve seconds, iterations and peak resident memory
(``getrusage``); its vector comes back to this process, which computes the residual
``||pi P - pi||_1`` of the normalised vector from the exported P, the same way for everyone.
A run above 1e-12, stopped by its limit or failed is listed and marked, never ranked.

The system the peers solve (the one aqmchain's krylov and direct methods solve): fix pi_k = 1
for the chain's recurrent state k; the other balance equations are
``A x = b`` with ``A = ((I - P) without row and column k)^T`` and ``b = P[k, :]`` without
entry k, a nonsingular M-matrix.  With ``r = b - A x`` and ``z = (x, 1)``,
``||z P - z||_1 / sum z = (||r||_1 + |sum r|) / (1 + sum x)``, so each peer iterates
(GMRES, right-preconditioned, so that its 2-norm is the true residual's) until that measure
is below tol / 2: a first solve to a 2-norm target, then restarts from its own answer with
the target scaled by the measured ratio, the iterations and seconds of every pass summed.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-12
MARKER = "peers"

#: Each case: (what it is, builder).  The builders are looked up by name in the worker, so
#: that the export and the aqmchain run build the same model.  ``quick`` = a small analogue
#: (buffer 40, RED 15 / 30) with the same components, for a smoke run.
CASES = {
    "geo_count": "GEO RED, drop spacing count (buffer 250, avg step 1)",
    "geo_wait": "GEO RED, drop spacing wait (buffer 250, avg step 1)",
    "geo_adaptive": "GEO adaptive RED (automatic grid, p_max step 0.01)",
    "ssmp_adaptive": "SSMP adaptive RED (automatic grid, p_max step 0.01)",
    "mice_ecn": "two classes, mice / ECN (examples/classes/mice_ecn.toml, buffer 100)",
    "flows": "flow comparison, AutoRED, dynamic max_th (examples/classes/flows.toml)",
    "count_default_grid": "drop spacing count on the default grid (mu 0.45, w 0.01): its last cap round's chain",
    "geo_k4": "plain RED, GEO, avg step 1/4",
    "ssmp_k4": "plain RED, SSMP, avg step 1/4",
    "ssmp_k16_mu025": "plain RED, SSMP, mu 0.25, avg step 1/16",
}
DEFAULT_CASES = list(CASES)

#: Peers: runtime and settings.  PETSc: options database entries (GMRES(restart), right
#: preconditioning and Gram-Schmidt refinement where needed are set for every PETSc peer).  ``max_states``: not run above it.
PEERS: dict[str, dict] = {
    "aqmchain:krylov": {"runtime": "aqmchain", "method": "krylov"},
    "aqmchain:auto": {"runtime": "aqmchain", "method": "auto"},  # the library's choice (multilevel on some)
    "petsc:ilu2": {"runtime": "petsc", "opts": {"pc_type": "ilu", "pc_factor_levels": 2}},
    "petsc:asm": {"runtime": "petsc", "opts": {"pc_type": "asm", "pc_asm_blocks": 8, "pc_asm_overlap": 1,
                                               "sub_pc_type": "ilu", "sub_pc_factor_levels": 1}},
    "petsc:gamg_ua": {"runtime": "petsc", "opts": {"pc_type": "gamg", "pc_gamg_type": "agg", "pc_gamg_agg_nsmooths": 0,
                                                   "mg_levels_ksp_type": "richardson",
                                                   "mg_levels_pc_type": "sor"}},
    "petsc:gamg_sa": {"runtime": "petsc", "opts": {"pc_type": "gamg", "pc_gamg_type": "agg", "pc_gamg_agg_nsmooths": 1,
                                                   "mg_levels_ksp_type": "richardson",
                                                   "mg_levels_pc_type": "sor"}},
    "petsc:boomeramg": {"runtime": "petsc", "opts": {"pc_type": "hypre", "pc_hypre_type": "boomeramg"}},
    "petsc:boomeramg_air": {"runtime": "petsc", "opts": {
        "pc_type": "hypre", "pc_hypre_type": "boomeramg", "pc_hypre_boomeramg_restriction_type": 1,
        "pc_hypre_boomeramg_coarsen_type": "PMIS", "pc_hypre_boomeramg_relax_type_all": "Jacobi"}},
    "petsc:lu": {"runtime": "petsc", "opts": {"pc_type": "lu", "pc_factor_mat_solver_type": "mumps"}},
    "pyamg:air": {"runtime": "pyamg", "solver": "air_solver", "kwargs": {}},
    "pyamg:sa": {"runtime": "pyamg", "solver": "smoothed_aggregation_solver", "kwargs": {"symmetry": "nonsymmetric"}},
    "pyamg:ua": {"runtime": "pyamg", "solver": "smoothed_aggregation_solver",
                 "kwargs": {"symmetry": "nonsymmetric", "smooth": None}},
    "scipy:spilu": {"runtime": "scipy", "max_states": 2.5e6},
}
DEFAULT_PEERS = list(PEERS)
COLUMNS = ("case", "states", "nnz", "solver", "iterations", "set-up s", "solve s", "total s", "residual", "peak GB",
           "converged")


# ----------------------------------------------------------------------------- pure helpers

def residual(P, v) -> float:
    """||pi P - pi||_1 of pi = v / sum v (P: the exported transition matrix, CSR); +inf when
    v has no positive mass or is not finite."""
    import numpy as np

    v = np.asarray(v, dtype=float)
    s = float(v.sum())
    if not (s > 0.0) or not np.all(np.isfinite(v)):
        return math.inf
    pi = v / s
    return float(np.abs(P.T @ pi - pi).sum())


def reduced_measure(A, b, x) -> float:
    """The residual of z = (x, pi_k = 1) from the reduced system's residual:
    (||r||_1 + |sum r|) / (1 + sum x), r = b - A x (+inf when 1 + sum x <= 0)."""
    import numpy as np

    r = b - A @ x
    mass = 1.0 + float(np.sum(x))
    if not (mass > 0.0):
        return math.inf
    return float((np.abs(r).sum() + abs(r.sum())) / mass)


def reduced_system(P, k: int):
    """(A, b): A = ((I - P) without row and column k)^T as CSR, b = P[k, :] without entry k."""
    import numpy as np
    import scipy.sparse as sp

    n = P.shape[0]
    keep = np.r_[0:k, k + 1:n]
    A = (sp.identity(n, format="csr") - P).T.tocsr()[keep][:, keep].tocsr()
    A.sort_indices()
    b = np.asarray(P[k].toarray()).ravel()[keep]
    return A, b


def full_vector(x, k: int):
    """(x with 1 inserted at position k): the unnormalised stationary vector."""
    import numpy as np

    return np.insert(np.asarray(x, dtype=float), k, 1.0)


def converged(row: dict) -> bool:
    return row.get("residual") is not None and row["residual"] <= TOL and not row.get("note")


def fmt(x, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def table(rows: list[dict]) -> str:
    """The markdown table: one line per (case, solver); per case the fastest converged run
    (set-up + solve) in bold, unconverged runs marked and never in bold."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    by_case: dict[str, list[dict]] = {}
    for r in rows:
        by_case.setdefault(r["case"], []).append(r)
    for case, rs in by_case.items():
        ok = [r for r in rs if converged(r)]
        best = min(ok, key=lambda r: r["setup_s"] + r["solve_s"]) if ok else None
        for r in rs:
            total = (r["setup_s"] + r["solve_s"]) if r.get("setup_s") is not None and r.get("solve_s") is not None \
                else None
            solver = r["solver"] + (f" ({r['ran']})" if r.get("ran") and not r["solver"].endswith(r["ran"]) else "")
            name = f"**{solver}**" if r is best else solver
            if converged(r):
                conv = "yes"
            else:
                conv = "no" + (f": {r['note']}" if r.get("note") else
                               f" (residual > {TOL:g})" if r.get("residual") is not None else "")
            lines.append("| " + " | ".join([
                case, fmt(r.get("states"), ","), fmt(r.get("nnz"), ","), name, fmt(r.get("iterations"), "d"),
                fmt(r.get("setup_s"), ".2f"), fmt(r.get("solve_s"), ".2f"), fmt(total, ".2f"),
                fmt(r.get("residual"), ".1e"), fmt(r.get("peak_gb"), ".2f"), conv]) + " |")
    return "\n".join(lines)


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


class Stop(Exception):
    """Raised by a solver step that cannot go on (diverged, or its iterations used up)."""


def solve_to_tol(step, A, b, x, tol: float, max_passes: int = 8) -> tuple:
    """Drive an iterative solver until the reduced measure is <= tol / 2.

    ``step(x0, atol2) -> (x, iterations)`` runs the solver from x0 until the 2-norm of
    b - A x is <= atol2 (or raises :class:`Stop` with ``(x, iterations)``).  First target: ||b||_2 * 1e-12; after each pass the target is
    scaled by (tol / 2) / measure (halved for margin); a pass that does not halve the
    measure ends the restarts.  Returns (x, iterations, passes,
    measure)."""
    import numpy as np

    target = 0.5 * tol
    atol2 = 1e-12 * float(np.linalg.norm(b))
    its = 0
    m = math.inf
    for p in range(1, max_passes + 1):
        before = m
        try:
            x, k = step(x, atol2)
        except Stop as stop:
            x, k = stop.args
            its += k
            return x, its, p, reduced_measure(A, b, x)
        its += k
        m = reduced_measure(A, b, x)
        if m <= target:
            return x, its, p, m
        r2 = float(np.linalg.norm(b - A @ x))
        if not math.isfinite(m) or r2 == 0.0 or not m < 0.5 * before:  # no progress: stop
            return x, its, p, m
        atol2 = min(atol2, r2) * min(0.5 * target / m, 0.5)
    return x, its, max_passes, m


# ----------------------------------------------------------------------------- models

def model_for(case: str, quick: bool):
    import aqmchain

    sys.path.insert(0, str(ROOT / "benchmarks"))
    if case in ("geo_k4", "ssmp_k4", "ssmp_k16_mu025"):
        if quick:
            src = aqmchain.Source.bernoulli(0.5) if case == "geo_k4" else aqmchain.Source.ssmp(5, 1.927562, 31.6)
            return aqmchain.Model(buffer=40, source=src, service=aqmchain.Service(0.25 if "mu025" in case else 0.5),
                                  aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(15, 30, 0.1), w=0.002),
                                  grid=aqmchain.GridSpec(k=16 if "k16" in case else 4))
        from bench_stationary import model_for as plain
        return plain(case)
    if case in ("mice_ecn", "flows"):
        doc = aqmchain.modelfile.load_document(ROOT / "examples" / "classes" / f"{case}.toml")
        if case == "mice_ecn":
            doc["model"]["buffer"] = 100
        if quick:
            doc["model"]["buffer"] = 15
        return aqmchain.model_from_dict(doc)[0]
    buffer, lo, hi = (40, 15, 30) if quick else (250, 100, 200)
    red = aqmchain.DropFunction.red(lo, hi, 0.1)
    if case == "count_default_grid":  # quick: avg step 1 (the default grid at buffer 40 has 2.6M states)
        return aqmchain.Model(buffer=buffer, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.45),
                              aqm=aqmchain.Aqm(drop=red, w=0.01, spacing="count"),
                              grid=aqmchain.GridSpec(k=1, refine="none") if quick else aqmchain.GridSpec(refine="auto"))
    from stateful_paper_scenario import FEATURES
    feature = {"geo_count": "count", "geo_wait": "wait", "geo_adaptive": "adaptive", "ssmp_adaptive": "adaptive"}[case]
    aqm, k = FEATURES[feature]
    refine = "none" if feature in ("count", "wait") else "auto"
    if quick and feature == "adaptive":  # p_max on 10 points, avg step 1: some 10^5 states, not 10^6
        aqm, k, refine = dict(aqm, p_max_step=0.05), 1, "none"
    src = aqmchain.Source.ssmp(n=5, q=1.927562, a=31.6) if case.startswith("ssmp") else aqmchain.Source.bernoulli(0.5)
    return aqmchain.Model(buffer=buffer, source=src, service=aqmchain.Service(mu=0.5),
                          aqm=aqmchain.Aqm(drop=red, **aqm), grid=aqmchain.GridSpec(k=k, refine=refine))


def build(case: str, quick: bool, mem_gb: float):
    import aqmchain

    model = model_for(case, quick)
    if case == "count_default_grid" and not quick:
        # the count's exact range on the default grid is 10^9 states: the chain the library
        # solves is that of the count's last cap round (solve_stationary on the model; in the
        # aqmchain worker that solve is not timed, but its memory is in the peak)
        return aqmchain.solve_stationary(model, tol=TOL, response="none", memory_limit_gb=mem_gb).chain
    return aqmchain.build_chain(model, memory_limit_gb=mem_gb, max_states=50_000_000)


# ----------------------------------------------------------------------------- workers

def _limit_memory(mem_gb: float) -> None:
    limit = int(mem_gb * 1024**3)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # fail cleanly instead of waking the OOM killer


def work_export(case: str, quick: bool, d: Path, mem_gb: float) -> dict:
    import numpy as np
    import scipy.io
    import scipy.sparse as sp

    import aqmchain

    t = time.perf_counter()
    chain = build(case, quick, mem_gb)
    build_s = time.perf_counter() - t
    n, nnz, k = int(chain.n), int(chain.nnz), int(chain.recurrent_state)
    if chain.time != "discrete":
        raise SystemExit(f"{case}: a continuous-time chain; this benchmark takes transition matrices")
    t = time.perf_counter()
    path = aqmchain.export_matrix(chain, d / "P.mtx", comment=f"bench_peers case {case}")
    del chain
    P = sp.csr_matrix(scipy.io.mmread(str(path)))
    P.sort_indices()
    export_s = time.perf_counter() - t
    A, b = reduced_system(P, k)
    np.savez(d / "P.npz", indptr=P.indptr, indices=P.indices, data=P.data, shape=np.array(P.shape))
    np.savez(d / "system.npz", indptr=A.indptr.astype(np.int32), indices=A.indices.astype(np.int32), data=A.data,
             b=b, k=np.array(k), n=np.array(n))
    return {"states": n, "nnz": nnz, "matrix_nnz": int(P.nnz), "fixed_state": k, "build_s": build_s,
            "export_s": export_s, "mtx_bytes": path.stat().st_size}


def work_aqmchain(case: str, quick: bool, d: Path, mem_gb: float, restart: int, method: str = "krylov") -> dict:
    import numpy as np

    import aqmchain

    chain = build(case, quick, mem_gb)
    n, nnz = int(chain.n), int(chain.nnz)
    try:
        r = aqmchain.solve_stationary(chain, method=method, tol=TOL, response="none", memory_limit_gb=mem_gb)
        note = ""
    except aqmchain.NonConvergenceError as exc:
        r, note = exc.result, "aqmchain: " + str(exc).splitlines()[0][:160]
    s = dict(r.info.seconds)
    # the solve's phases: its iterations (every "..._iterate" of the method that ran last) and the
    # rest of the whole solve as set-up (the preconditioner, krylov's slice chains
    # "solve_coarse_shapes", the residual check, and auto's attempts before it)
    solve = sum(v for key, v in s.items() if key.endswith("iterate"))
    setup = s.get("solve", solve) - solve
    np.save(d / f"pi_aqmchain_{method}.npy", np.asarray(r.pi, dtype=float))
    return {"states": n, "nnz": nnz, "iterations": int(r.info.iterations), "setup_s": setup, "solve_s": solve,
            "own_residual": float(r.info.residual), "seconds": s, "note": note, "ran": str(r.info.method)}


def _load_system(d: Path):
    import numpy as np

    z = np.load(d / "system.npz")
    return z["indptr"], z["indices"], z["data"], z["b"], int(z["k"]), int(z["n"])


def work_petsc(name: str, d: Path, restart: int, max_it: int) -> dict:
    import numpy as np
    import petsc4py

    petsc4py.init([sys.argv[0]])
    from petsc4py import PETSc

    indptr, indices, data, b, k, n = _load_system(d)
    m = n - 1
    A = PETSc.Mat().createAIJ(size=(m, m), csr=(indptr, indices, data), comm=PETSc.COMM_SELF)
    A.assemble()
    opts = PETSc.Options()
    prefix = "peer_"
    # classical Gram-Schmidt with re-orthogonalisation where needed: without it GMRES loses
    # orthogonality on these matrices and stops with DIVERGED_BREAKDOWN at a restart
    opts[prefix + "ksp_gmres_cgs_refinement_type"] = "REFINE_IFNEEDED"
    for key, val in PEERS[name]["opts"].items():
        opts[prefix + key] = val
    ksp = PETSc.KSP().create(comm=PETSc.COMM_SELF)
    ksp.setOptionsPrefix(prefix)
    ksp.setOperators(A)
    ksp.setType("gmres")
    ksp.setGMRESRestart(restart)
    ksp.setPCSide(PETSc.PC.Side.RIGHT)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    ksp.setFromOptions()
    t = time.perf_counter()
    ksp.setUp()
    ksp.getPC().setUp()
    setup = time.perf_counter() - t
    bv = PETSc.Vec().createWithArray(b.copy(), comm=PETSc.COMM_SELF)
    xv = bv.duplicate()
    xv.set(0.0)
    ksp.setInitialGuessNonzero(True)
    Ad = _Csr(indptr, indices, data, m)
    left = [max_it]

    def step(x0, atol2):
        xv.setArray(x0)
        ksp.setTolerances(rtol=0.0, atol=atol2, max_it=max(left[0], 1))
        ksp.solve(bv, xv)
        its = ksp.getIterationNumber()
        left[0] -= its
        if ksp.getConvergedReason() < 0 or left[0] <= 0:
            raise Stop(xv.getArray().copy(), its)
        return xv.getArray().copy(), its

    t = time.perf_counter()
    x, its, passes, meas = solve_to_tol(step, Ad, b, np.zeros(m), TOL)
    solve = time.perf_counter() - t
    np.save(d / f"pi_{name.replace(':', '_')}.npy", full_vector(x, k))
    reason = int(ksp.getConvergedReason())
    names = {v: k for k, v in vars(PETSc.KSP.ConvergedReason).items() if isinstance(v, int)}
    out = {"iterations": its, "setup_s": setup, "solve_s": solve, "passes": passes, "measure": meas,
           "reason": names.get(reason, str(reason))}
    if reason < 0:
        out["note"] = f"PETSc {names.get(reason, reason)}"
    return out


class _Csr:
    """A CSR matrix product with NumPy only (the PETSc interpreter may have no SciPy)."""

    def __init__(self, indptr, indices, data, m):
        import numpy as np

        self.rows = np.repeat(np.arange(m), np.diff(indptr))
        self.indices, self.data, self.m = indices, data, m

    def __matmul__(self, x):
        import numpy as np

        return np.bincount(self.rows, weights=self.data * x[self.indices], minlength=self.m)


def _scipy_gmres(A, b, M, restart: int, max_it: int):
    """A step for :func:`solve_to_tol`: SciPy's GMRES one restart cycle at a time, ending
    when the 2-norm target or the reduced measure's target is met (SciPy checks the true
    residual, which stalls at its round-off floor above a too strict 2-norm target) or when a
    cycle does not lower the measure (the caller tightens the target), raising
    :class:`Stop` when the iterations are used up or the iterate is not finite."""
    import numpy as np
    import scipy.sparse.linalg as sla

    left = [max_it]

    def step(x0, atol2):
        count = [0]

        def cb(_):
            count[0] += 1
        x, best = x0, reduced_measure(A, b, x0)
        while True:
            before = count[0]
            x, _info = sla.gmres(A, b, x0=x, rtol=0.0, atol=atol2, restart=restart, maxiter=1, M=M, callback=cb,
                                 callback_type="pr_norm")
            left[0] -= count[0] - before
            m = reduced_measure(A, b, x)
            if m <= 0.5 * TOL or float(np.linalg.norm(b - A @ x)) <= atol2:
                return x, count[0]
            if not np.all(np.isfinite(x)) or left[0] <= 0:
                raise Stop(x, count[0])
            if not m < best:  # SciPy's own estimate says converged: a tighter 2-norm target next
                return x, count[0]
            best = m
    return step


def work_python(name: str, d: Path, restart: int, max_it: int) -> dict:
    import numpy as np
    import scipy.sparse as sp
    import scipy.sparse.linalg as sla

    indptr, indices, data, b, k, n = _load_system(d)
    A = sp.csr_matrix((data, indices, indptr), shape=(n - 1, n - 1))
    t = time.perf_counter()
    spec = PEERS[name]
    if spec["runtime"] == "pyamg":
        import pyamg

        M = getattr(pyamg, spec["solver"])(A, **spec["kwargs"]).aspreconditioner()
    elif name == "scipy:spilu":
        ilu = sla.spilu(A.tocsc())
        M = sla.LinearOperator(A.shape, ilu.solve)
    else:
        raise SystemExit(f"unknown peer {name}")
    setup = time.perf_counter() - t
    t = time.perf_counter()
    x, its, passes, meas = solve_to_tol(_scipy_gmres(A, b, M, restart, max_it), A, b, np.zeros(n - 1), TOL)
    solve = time.perf_counter() - t
    np.save(d / f"pi_{name.replace(':', '_')}.npy", full_vector(x, k))
    return {"iterations": its, "setup_s": setup, "solve_s": solve, "passes": passes, "measure": meas}


def worker(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what")
    ap.add_argument("--case", default="")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--mem-gb", type=float, default=20)
    ap.add_argument("--restart", type=int, default=100)
    ap.add_argument("--max-it", type=int, default=3000)
    a = ap.parse_args(argv)
    _limit_memory(a.mem_gb)
    if a.what == "export":
        out = work_export(a.case, a.quick, a.dir, a.mem_gb)
    elif PEERS[a.what]["runtime"] == "aqmchain":
        out = work_aqmchain(a.case, a.quick, a.dir, a.mem_gb, a.restart, PEERS[a.what]["method"])
    elif PEERS[a.what]["runtime"] == "petsc":
        out = work_petsc(a.what, a.dir, a.restart, a.max_it)
    else:
        out = work_python(a.what, a.dir, a.restart, a.max_it)
    out["peak_gb"] = peak_gb()
    print("RESULT " + json.dumps(out), flush=True)


# ----------------------------------------------------------------------------- driver

def petsc_env() -> dict:
    """The environment of the PETSc interpreter: Debian's petsc4py finds PETSc through
    PETSC_DIR (or the /usr/lib/petsc link, which only the -dev package installs)."""
    env = dict(os.environ)
    if "PETSC_DIR" not in env and not Path("/usr/lib/petsc").exists():
        found = sorted(glob.glob("/usr/lib/petscdir/petsc*/x86_64-linux-gnu-real"))
        if found:
            env["PETSC_DIR"] = found[-1]
    return env


def run_worker(python: str, what: str, args: list[str], timeout: float, env: dict | None = None) -> dict:
    cmd = [python, str(Path(__file__).resolve()), "--worker", what] + args
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"note": f"stopped at the {timeout:g} s limit"}
    wall = time.perf_counter() - t
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[7:])
            out["wall_s"] = wall
            return out
    err = (p.stderr.strip().splitlines() or ["no output"])[-1][:200]
    return {"note": f"failed (exit {p.returncode}): {err}"}


def run_case(case: str, a, d: Path) -> list[dict]:
    import numpy as np
    import scipy.sparse as sp

    common = ["--case", case, "--dir", str(d), "--mem-gb", str(a.mem_gb), "--restart", str(a.restart),
              "--max-it", str(a.max_it)] + (["--quick"] if a.quick else [])
    exp = run_worker(sys.executable, "export", common, a.timeout)
    print(f"[{case}] export: {json.dumps(exp)}", flush=True)
    if "note" in exp:
        return [{"case": case, "solver": "export", "note": exp["note"]}]
    z = np.load(d / "P.npz")
    P = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
    rows = []
    for name in a.peers:
        row = {"case": case, "solver": name, "states": exp["states"], "nnz": exp["nnz"]}
        spec = PEERS[name]
        if exp["states"] > spec.get("max_states", math.inf):
            row["note"] = f"not run: {exp['states']:,} states > {spec['max_states']:g}"
        else:
            python = a.petsc_python if spec["runtime"] == "petsc" else sys.executable
            env = petsc_env() if spec["runtime"] == "petsc" else None
            out = run_worker(python, name, common, a.timeout, env)
            out.pop("states", None)
            out.pop("nnz", None)
            row.update(out)
            vec = d / f"pi_{name.replace(':', '_')}.npy"
            if vec.exists():
                row["residual"] = residual(P, np.load(vec))
                vec.unlink()
        print(f"[{case}] {json.dumps(row)}", flush=True)
        rows.append(row)
    return rows


def command_line() -> str:
    import platform

    cmd = f"python benchmarks/{Path(sys.argv[0]).name} " + " ".join(sys.argv[1:])
    return (f"Command: `{cmd.strip()}` on {platform.machine()}, {os.cpu_count()} cores, "
            f"{time.strftime('%Y-%m-%d')}.")


def write_block(md: str, marker: str = MARKER, page: Path | None = None) -> None:
    """Replace the text between <!-- BENCH:marker --> and <!-- /BENCH:marker --> in the page
    (docs/performance.md) by this command line and the table."""
    doc = page or ROOT / "docs" / "performance.md"
    head, rest = doc.read_text().split(f"<!-- BENCH:{marker} -->", 1)
    _, tail = rest.split(f"<!-- /BENCH:{marker} -->", 1)
    doc.write_text(head + f"<!-- BENCH:{marker} -->\n{command_line()}\n\n{md}\n<!-- /BENCH:{marker} -->" + tail)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=DEFAULT_CASES, choices=list(CASES), metavar="CASE",
                    help="cases (default all): " + ", ".join(CASES))
    ap.add_argument("--peers", nargs="+", default=DEFAULT_PEERS, choices=list(PEERS), metavar="SOLVER",
                    help="solvers (default all): " + ", ".join(PEERS))
    ap.add_argument("--timeout", type=float, default=600, help="wall-clock limit of each run, export included (s)")
    ap.add_argument("--mem-gb", type=float, default=20, help="address-space limit of each run (GB)")
    ap.add_argument("--quick", action="store_true", help="small analogues of each case (a smoke run)")
    ap.add_argument("--restart", type=int, default=100, help="GMRES restart length of the peers")
    ap.add_argument("--max-it", type=int, default=3000, help="GMRES iterations allowed to a peer")
    ap.add_argument("--petsc-python", default="/usr/bin/python3", help="the interpreter that has petsc4py")
    ap.add_argument("--workdir", type=Path, help="keep each case's exported files in WORKDIR/CASE (default: a "
                    "temporary directory, removed after the case)")
    ap.add_argument("--json", type=Path, default=ROOT / "build" / "bench_peers.json")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/performance.md")
    a = ap.parse_args(argv)
    rows = []
    for case in a.cases:
        if a.workdir:
            d = a.workdir / (case + ("_quick" if a.quick else ""))
            d.mkdir(parents=True, exist_ok=True)
            rows += run_case(case, a, d)
            continue
        with tempfile.TemporaryDirectory(prefix=f"bench_peers_{case}_") as tmp:
            rows += run_case(case, a, Path(tmp))
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(rows, indent=1))
    md = table(rows)
    print(md)
    if not a.no_docs:
        write_block(md)


if __name__ == "__main__":
    main()
