import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

import aqmchain  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: The published figures the reference tests compare against (shipped in the repository)
REFERENCE_DIR = ROOT / "benchmarks" / "reference"
REFERENCE_TABLES = REFERENCE_DIR / "aqm_router_tables.json"


def reference_rows(source: str | None = None) -> list[dict]:
    """The 24 rows of Tables I-III of "Implementation of modified AQM mechanisms in IP routers"
    (those of one source, "GEO" or "SELF", when given).  A missing file is an error, never a skip."""
    rows = json.loads(REFERENCE_TABLES.read_text(encoding="utf-8"))["rows"]
    return [r for r in rows if source in (None, r["source"])]


#: A small valid model document (RED on a Bernoulli source) that error tests mutate.
BASE_DOC = {
    "model": {"buffer": 20},
    "source": {"kind": "bernoulli", "alpha": 0.5},
    "service": {"mu": 0.5},
    "aqm": {"drop": "red", "min_th": 5, "max_th": 15, "p_max": 0.1, "w": 0.1},
    "grid": {"k": 2, "refine": "none"},
}


def spec_to_doc(spec: dict) -> dict:
    """The oracle's flat spec as a SPEC 8 document (goes through the TOML loader)."""
    aqm = {k: v for k, v in spec.items() if k in ("drop", "min_th", "max_th", "p_max", "k_l", "k_h", "gamma",
                                                   "q_max", "seg", "coeffs", "points", "w", "update", "ecn",
                                                   "policy", "spacing", "count_max", "count_tail", "adaptive", "interval",
                                                   "target_lo", "target_hi", "increment", "decrease",
                                                   "p_max_high", "p_max_low", "clock", "p_max_step",
                                                   "max_clock_states", "weight", "autored_p",
                                                   "dynamic_max_th", "max_th_growth")}
    return {"model": {"buffer": spec["buffer"]}, "source": dict(spec["source"]),
            "service": {"mu": spec["mu"]}, "aqm": aqm,
            "grid": {"k": spec.get("k", 4), "mapping": spec["mapping"], "refine": "none"}}


def model_of(spec: dict) -> "aqmchain.Model":
    return aqmchain.model_from_dict(spec_to_doc(spec))[0]


def uniformised(G, rate: float):
    """P = I + G / rate: the chain the solvers work on for a generator G (their residuals are
    ||pi P - pi||_1 for this P, with rate = info.extra["uniformization_rate"])."""
    import scipy.sparse as sp

    return (sp.identity(G.shape[0], format="csr") + sp.csr_matrix(G) / rate).tocsr()


def solution_distance_bound(P, pi, *residuals) -> float:
    """How far apart probability vectors of a chain with one closed class may be, given their
    residuals ||x P - x||_1 (the solvers' reports): x - pi = r A# for r = x (I - P), and the group
    inverse A# is bounded by 2 ||B^-1||_inf, where B = I - P without the row and column of a state
    k of the closed class (here the state with the largest pi).  B is a nonsingular M-matrix
    (B^-1 >= 0 entrywise), so ||B^-1||_inf = max(B^-1 1), the longest expected time to reach k:
    one sparse solve.  Each residual is known only to within the error of evaluating it,
    2 (c + 1) eps with c the most entries in a column.  This is what the arithmetic guarantees, on
    any machine, BLAS and thread count."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as sla

    P = sp.csr_matrix(P)
    n = P.shape[0]
    k = int(np.argmax(pi))
    keep = np.r_[0:k, k + 1:n]
    B = (sp.identity(n, format="csr") - P)[keep][:, keep].tocsc()
    kappa = 2.0 * float(sla.spsolve(B, np.ones(n - 1)).max())
    per_column = int(np.bincount(P.indices, minlength=n).max())
    evaluation = 2.0 * (per_column + 1) * np.finfo(float).eps
    return kappa * sum(r + evaluation for r in residuals)


def summation_error(n: int) -> float:
    """How far two sums of the same n nonnegative numbers totalling 1, added in different orders
    (the core's loop against NumPy's pairwise sum), may differ: n eps (recursive summation's bound)."""

    return max(n, 2) * float(np.finfo(float).eps)


def construction_error(P_ref) -> float:
    """How far two constructions of the same transition matrix may differ entry by entry (the
    builder's against a dense oracle's, in another order): an entry is a sum of at most c
    branches (c: the most entries in a row) of products of at most 8 factors each in [0, 1],
    so each side is within (c + 8) eps of the exact value."""

    c = int(np.count_nonzero(np.asarray(P_ref), axis=1).max())
    return 2.0 * (c + 8) * float(np.finfo(float).eps)


def stepping_error(P, steps: int) -> float:
    """How far (in L1) two runs of `steps` sparse steps p <- p P may drift apart when their
    additions go in another order (another thread count): each step rounds each entry over at
    most c + 1 terms, c the most entries in a column of P, and stochastic steps add these up."""
    import scipy.sparse as sp

    P = sp.csr_matrix(P)
    c = int(np.bincount(P.indices, minlength=P.shape[0]).max())
    return 2.0 * steps * (c + 1) * float(np.finfo(float).eps)


def residual_evaluation_error(P) -> float:
    """How far two evaluations of ||pi P - pi||_1 (in another order: C++ against SciPy) may
    differ for a probability vector pi: each entry of pi P - pi carries at most (c + 1) eps of
    its column's mass, c the most entries in a column, so the sum at most 2 (c + 1) eps each."""
    import scipy.sparse as sp

    P = sp.csr_matrix(P)
    per_column = int(np.bincount(P.indices, minlength=P.shape[0]).max())
    return 4.0 * (per_column + 1) * np.finfo(float).eps


def metric_tolerances(ref, d: float, rate: float = 1.0, service: float = 1.0) -> dict:
    """How far each scalar metric of a chain's answer may move when its stationary vector moves
    by at most d in L1 (from solution_distance_bound): a mean of f by d max|f|, a ratio a / b by
    d (max|a| + |v| max|b|) / (pi b - d max|b|).  `rate` bounds the arrival weight of a state
    (1 in slots, the largest arrival rate in continuous time), `service` the departure weight."""
    N = ref.chain.model.buffer
    mu = float(ref.chain.model.service.mu)

    def ratio(v, a_max, b, b_max):
        return d * (a_max + abs(v) * b_max) / (b - d * b_max)

    count = len(ref.count_pmf) if ref.count_pmf is not None else 0
    tol = {"arrival_rate": d * rate, "throughput": d * service, "mean_queue": d * N, "mean_system": d * N,
           "mean_avg": d * N, "var_queue": 3 * d * N * N, "mean_count": d * count, "mean_p_max": d,
           "mean_max_th": d * N,
           "mean_response": ratio(ref.mean_response or 0.0, rate * (N + 1) / mu, ref.admitted_rate, rate)}
    for k in ("loss", "loss_aqm", "loss_overflow", "mark_prob"):
        tol[k] = ratio(getattr(ref, k), rate, ref.arrival_rate, rate)
    return tol


def lumping_tolerances(plain, r) -> dict:
    """How far each scalar metric of a class chain that lumps exactly onto the chain of `plain`
    may be from plain's, from the two solves' residuals (nothing tuned to a machine): the
    class chain's stationary vector summed over the class components is a probability vector of
    the plain chain whose residual is at most the class chain's plus the lumped rows' rounding
    (construction_error per entry, c entries a row), so its L1 distance d from plain's pi is
    within solution_distance_bound; the metrics then move as metric_tolerances says."""
    import scipy.sparse as sp

    c = plain.chain
    P = sp.csr_matrix((np.array(c.data), np.array(c.indices), np.array(c.indptr)), shape=(c.n, c.n))
    per_row = int(np.diff(P.indptr).max())
    lumped_residual = r.info.residual + per_row * construction_error(P.toarray())
    d = solution_distance_bound(P, np.asarray(plain.pi), plain.info.residual, lumped_residual)
    return metric_tolerances(plain, d)


def interrupt_started(p, wait: float = 0.5, timeout: float = 60.0) -> tuple[str, float]:
    """For a child process `p` (stdout piped as text) that prints "started" and then runs: SIGINT
    `wait` s later; its remaining stdout and the seconds from the signal to its exit.  A child
    still running `timeout` s after the signal is killed and fails the test."""
    import signal
    import time

    assert p.stdout.readline().strip() == "started"
    time.sleep(wait)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError(f"still running {timeout:g} s after SIGINT")
    return out, time.monotonic() - t0


@pytest.fixture
def root() -> Path:
    return ROOT


def geo_model(N, alpha, mu, w=0.5, k=1):
    return aqmchain.Model(buffer=N, source=aqmchain.Source.bernoulli(alpha), service=aqmchain.Service(mu),
                          aqm=aqmchain.Aqm(w=w), grid=aqmchain.GridSpec(k=k))


def geo_pmf(N, a, mu):
    """Birth-death balance of Geo/Geo/1/N, delayed access, arrivals see n_{t-1}."""
    p = np.zeros(N + 1)
    p[0] = 1.0
    p[1] = a / ((1 - a) * mu)
    for n in range(1, N - 1):
        p[n + 1] = p[n] * a * (1 - mu) / ((1 - a) * mu)
    p[N] = p[N - 1] * a * (1 - mu) / mu
    return p / p.sum()


def assert_tagged_equals_closed_form(model):
    """Under tail drop the tagged-packet chain (response="tagged") must give the closed
    form's response law."""
    closed = aqmchain.solve_stationary(model)
    tagged = aqmchain.solve_stationary(model, response="tagged", response_tail=1e-15)
    assert closed.response_method == "closed_form" and tagged.response_method == "tagged_chain"
    import scipy.sparse as sp

    ch = closed.chain
    P = sp.csr_matrix((ch.data, ch.indices, ch.indptr), shape=(ch.n, ch.n))
    pt, pc = np.asarray(tagged.response_pmf), np.asarray(closed.response_pmf)
    K = len(pt)  # the tagged chain stepped K slots; the closed form's pmf runs on past them
    assert len(pc) >= K
    # the tagged chain's rounding: its columns have at most 2 c + 1 entries (c the chain's: each
    # transition keeps the tagged packet's place or moves it up), so twice the chain's stepping
    # error bounds its L1 drift over K steps; plus the two answers' stationary vectors' distance
    drift = 2.0 * stepping_error(P, K) + float(np.abs(np.asarray(tagged.pi) - np.asarray(closed.pi)).sum())
    np.testing.assert_allclose(pt, pc[:K], rtol=0, atol=drift)
    # the moments: the tagged chain's are those of its K steps (the mass past them is
    # response_truncated); the closed form's are exact, and its pmf gives their part past K
    r = np.arange(len(pc), dtype=float)
    second = closed.var_response + closed.mean_response ** 2
    tol = []
    for j, exact in ((1, closed.mean_response), (2, second)):
        rj = r ** j
        past = float(np.dot(rj[K:], pc[K:]))  # the closed form's mass past K
        beyond = abs(exact - float(np.dot(rj, pc)))  # and past its own pmf (with its rounding)
        tol.append(K ** j * drift + past + beyond + 2 * summation_error(len(pc)) * exact)
    assert abs(tagged.mean_response - closed.mean_response) <= tol[0]
    assert abs(tagged.var_response - closed.var_response) <= tol[1] + (2 * closed.mean_response + tol[0]) * tol[0]
    assert tagged.pushed_out_prob == 0.0
