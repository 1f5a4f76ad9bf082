"""From a packet trace to a source model (docs/trace-fitting.md).

:func:`fit_source` reads arrival timestamps (pcap/pcapng through dpkt, CSV, NumPy) or
per-slot counts, and fits a ``bernoulli``, ``mmbp``, ``ssmp`` or ``mmpp`` source by
moment matching: the mean, the variance-time curve (the index of dispersion over
several decades of time scales), the lag-1..L autocorrelations and the first moments of
the inter-arrival times, in the spirit of "KPC-Toolbox: Simple Yet Effective Trace
Fitting Using Markovian Arrival Processes" and of the moment-matching procedures of
"BuTools 2: a Rich Toolbox for Markovian Performance Evaluation".  The model side of
every statistic is computed in closed form (no simulation), so the fit is
deterministic given the trace.

:func:`simulate_trace` replays a trace through a model's queue (the C++ simulator with
the trace's per-slot counts as arrivals), so that the fitted chain can be checked
against the trace itself.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import _checks, _core

__all__ = ["FIT_KINDS", "MULTIPLE_RULES", "FitResult", "fit_source", "read_trace", "slot_counts", "trace_statistics",
           "source_statistics", "simulate_trace", "fgn_trace", "mmpp_trace", "source_toml"]

FIT_KINDS = {
    "bernoulli": "Bernoulli: the mean only (no correlation)",
    "mmbp": "Markov-modulated Bernoulli with K states (default 2)",
    "ssmp": "the self-similar MMBP (n, q, a) of Robert and Le Boudec; n = --states, or the best n in 2..8",
    "mmpp": "Markov-modulated Poisson process with K states (default 2), continuous time",
}
"""The source kinds :func:`fit_source` fits: name -> one-line description (written only here)."""

MULTIPLE_RULES = {
    "clip": "a slot with several packets counts as one arrival; the fraction of slots and packets affected is reported",
    "refuse": "a slot with several packets is an error (choose a smaller slot)",
    "batch": "keep the counts: a batch Bernoulli source with the trace's count pmf (kind bernoulli only)",
}
"""What a slotted fit does with a slot holding several packets: name -> description."""

DEFAULT_LAGS = 10
DEFAULT_STATES = {"mmbp": 2, "mmpp": 2}
SSMP_SEARCH = (2, 8)
MAX_FIT_STATES = 6
#: the default slot is this quantile of the inter-arrival times (about this fraction of the
#: packets then share their slot with an earlier one)
DEFAULT_SLOT_QUANTILE = 0.01
#: the variance-time curve is fitted up to the level with this many blocks left in the trace
MIN_BLOCKS = 128


def _err(param: str, bound: str, value: Any) -> _core.ModelError:
    return _checks.model_error(param, bound, value)


# ------------------------------------------------------------------ reading traces
def _pcap_times(path: Path) -> np.ndarray:
    try:
        import dpkt
    except ImportError:  # pragma: no cover - the message names the extra
        raise _err("trace", "a pcap file read with dpkt (pip install 'aqmchain[trace]' or pip install dpkt)",
                   str(path)) from None
    with open(path, "rb") as f:
        magic = f.read(4)
        f.seek(0)
        try:
            reader = dpkt.pcapng.Reader(f) if magic == b"\x0a\x0d\x0d\x0a" else dpkt.pcap.Reader(f)
            ts = np.fromiter((t for t, _ in reader), dtype=float)
        except (ValueError, dpkt.dpkt.Error) as exc:
            raise _err("trace", "a readable pcap or pcapng file", f"{path} ({exc})") from None
    return ts


def read_trace(path: str | os.PathLike, *, column: str | int | None = None) -> np.ndarray:
    """The values of a trace file as a float array: arrival timestamps in seconds from
    ``.pcap``/``.pcapng`` (dpkt; the capture's own timestamps), or the numbers of a
    ``.csv`` file (``column``: its name in the header row, or its index; default the first
    column) or of a ``.npy`` file (one-dimensional).  Whether the numbers are timestamps
    or per-slot counts is said to :func:`fit_source` (``counts``)."""
    p = Path(path)
    if not p.is_file():
        raise _err("trace", "an existing file", str(p))
    suffix = p.suffix.lower()
    with open(p, "rb") as f:
        magic = f.read(4)
    if suffix in (".pcap", ".pcapng", ".cap") or magic in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4",
                                                           b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d",
                                                           b"\x0a\x0d\x0d\x0a"):
        return _pcap_times(p)
    if suffix == ".npy":
        try:
            a = np.load(p, allow_pickle=False)
        except ValueError as exc:
            raise _err("trace", "a .npy file of numbers", f"{p} ({exc})") from None
        if a.ndim != 1:
            raise _err("trace", "a one-dimensional .npy array", f"shape {a.shape}")
        return np.asarray(a, dtype=float)
    if suffix in (".csv", ".txt", ".tsv"):
        import pandas as pd

        sep = "\t" if suffix == ".tsv" else ","
        first = p.read_text(errors="replace").split("\n", 1)[0].split(sep)
        header = not all(_is_number(c) for c in first)
        try:
            df = pd.read_csv(p, sep=sep, header=0 if header else None, comment="#")
        except (ValueError, pd.errors.ParserError) as exc:
            raise _err("trace", "a readable CSV file", f"{p} ({exc})") from None
        if column is None:
            col = df.columns[0]
        elif isinstance(column, int) or (isinstance(column, str) and column.isdigit()):
            i = int(column)
            if not 0 <= i < df.shape[1]:
                raise _err("column", f"a column index in [0, {df.shape[1] - 1}]", column)
            col = df.columns[i]
        else:
            if column not in df.columns:
                raise _err("column", "one of the CSV header's names " + ", ".join(map(str, df.columns)), column)
            col = column
        try:
            return df[col].to_numpy(dtype=float)
        except (ValueError, TypeError):
            raise _err("trace", f"numbers in column {col!r} of {p}", "a non-numeric entry") from None
    raise _err("trace", "a .pcap, .pcapng, .csv, .txt, .tsv or .npy file", str(p))


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _timestamps(t: Any) -> np.ndarray:
    a = np.asarray(t, dtype=float)
    if a.ndim != 1 or a.size < 16:
        raise _err("trace", "at least 16 arrival timestamps", f"{a.size} values")
    if not np.all(np.isfinite(a)):
        raise _err("trace", "finite timestamps", "a non-finite value")
    if np.any(np.diff(a) < 0):
        a = np.sort(a)  # captures may hold slightly reordered packets
    if not a[-1] > a[0]:
        raise _err("trace", "timestamps spanning a positive time", f"all equal to {a[0]:g}")
    return a


def _counts(x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1 or a.size < 16:
        raise _err("trace", "at least 16 per-slot counts", f"{a.size} values")
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
            raise _err("trace", "per-slot counts (whole numbers >= 0)", "a non-integer value")
    if a.dtype.kind not in "uif" or np.any(a < 0):
        raise _err("trace", "per-slot counts (whole numbers >= 0)", "a negative or non-numeric value")
    return a.astype(np.int64, copy=False)


def default_slot(timestamps: np.ndarray) -> float:
    """The default slot: the 1 % quantile of the positive inter-arrival times (so about 1 %
    of the packets share their slot with an earlier packet)."""
    gaps = np.diff(timestamps)
    gaps = gaps[gaps > 0]
    if gaps.size == 0:
        raise _err("trace", "timestamps with at least two distinct values", "all equal")
    return float(np.quantile(gaps, DEFAULT_SLOT_QUANTILE))


def slot_counts(timestamps: Any, slot: float) -> np.ndarray:
    """The number of packets in each slot [t0 + i slot, t0 + (i + 1) slot) of the trace
    (t0: the first timestamp); int64."""
    t = _timestamps(timestamps)
    slot = _checks.real("slot", slot)
    if not (slot > 0):
        raise _err("slot", "> 0 seconds", slot)
    span = t[-1] - t[0]
    if span / slot > 2**31:
        raise _err("slot", f">= {span / 2**31:.3g} s (at most 2^31 slots over the trace's {span:.6g} s)", slot)
    idx = np.floor((t - t[0]) / slot).astype(np.int64)
    return np.bincount(idx, minlength=int(idx[-1]) + 1).astype(np.int64)


# ------------------------------------------------------------------ statistics
@dataclasses.dataclass
class Statistics:
    """The statistics a fit matches (trace or model).

    ``mean``: arrivals per slot (per second for continuous time); ``levels``: aggregation
    levels m (slots; continuous time: multiples of the base bin ``bin``); ``variance``:
    Var X^(m) of the mean count per slot over blocks of m slots (continuous: Var N(m bin));
    ``acf``: lag-1..L autocorrelations of the counts (slotted) or of the inter-arrival
    times (continuous); ``gap_moments``: E[G], E[G^2], E[G^3] of the inter-arrival times
    (slots or seconds); ``gap_lag1``: their lag-1 autocorrelation."""

    mean: float
    levels: np.ndarray
    variance: np.ndarray
    acf: np.ndarray
    gap_moments: np.ndarray
    gap_lag1: float
    bin: float = 1.0
    #: trace side: the standard errors the residuals are divided by (relative for the mean,
    #: the variances and the gap moments, absolute for the correlations); None on the model side
    se: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"mean": self.mean, "levels": self.levels.tolist(), "variance": self.variance.tolist(),
                "acf": self.acf.tolist(), "gap_moments": self.gap_moments.tolist(), "gap_lag1": self.gap_lag1,
                "bin": self.bin}


def _aggregated(x: np.ndarray, jmax: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Var of the block means at m = 2^0..2^jmax about the trace mean (pairwise halving, O(T))."""
    mean = float(x.mean())
    b = np.asarray(x, dtype=float)
    levels, var, blocks = [], [], []
    for j in range(jmax + 1):
        if j:
            k = b.size // 2
            b = 0.5 * (b[: 2 * k: 2] + b[1: 2 * k: 2])
        levels.append(2.0**j)
        var.append(float(np.mean((b - mean) ** 2)))
        blocks.append(b.size)
    return np.asarray(levels), np.asarray(var), np.asarray(blocks, dtype=float)


def _acf(x: np.ndarray, lags: int) -> np.ndarray:
    d = np.asarray(x, dtype=float) - float(np.mean(x))
    v = float(np.dot(d, d)) / d.size
    if v == 0:
        return np.zeros(lags)
    return np.array([float(np.dot(d[:-k], d[k:])) / (d.size - k) / v for k in range(1, lags + 1)])


def _gap_stats(gaps: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    g = np.asarray(gaps, dtype=float)
    if g.size < 3:
        return np.full(3, np.nan), float("nan"), np.full(3, np.nan)
    pw = [g, g * g, g * g * g]
    mom = np.array([np.mean(p) for p in pw])
    se = np.array([np.std(p) / math.sqrt(g.size) for p in pw]) / mom  # relative, as if independent
    return mom, float(_acf(g, 1)[0]), se


#: floors of the standard errors: no statistic is trusted beyond this relative accuracy
#: (keeps a mis-specified fit from being steered by the few most precise numbers alone)
SE_FLOOR = 0.002


def _se(n: int, blocks: np.ndarray, gap_se: np.ndarray, gaps: int, acf: np.ndarray) -> dict[str, Any]:
    scale = max(float(np.max(np.abs(acf))), 1e-3)
    return {"mean": 1e-4, "variance": np.sqrt(2.0 / blocks + SE_FLOOR**2),
            "acf": math.sqrt(1.0 / n + (SE_FLOOR * scale) ** 2),
            "gap_moments": np.sqrt(gap_se**2 + SE_FLOOR**2), "gap_lag1": math.sqrt(1.0 / max(gaps, 1) + SE_FLOOR**2)}


def _jmax(T: int) -> int:
    return max(1, int(math.floor(math.log2(max(T / MIN_BLOCKS, 2.0)))))


def trace_statistics(counts: Any = None, *, timestamps: Any = None, bin: float | None = None,
                     lags: int = DEFAULT_LAGS) -> Statistics:
    """The fitted statistics of a trace: per-slot ``counts`` (slotted), or ``timestamps``
    (continuous time: counts in bins of ``bin`` seconds, default the mean inter-arrival
    time, and the inter-arrival times)."""
    lags = _checks.integer("lags", lags, 1, 1000)
    if timestamps is not None:
        t = _timestamps(timestamps)
        gaps = np.diff(t)
        width = float(np.mean(gaps)) if bin is None else _checks.real("slot", bin)
        if not width > 0:
            raise _err("slot", "> 0 seconds", width)
        n = slot_counts(t, width)
        levels, var, blocks = _aggregated(n, _jmax(n.size))
        var = var * levels**2  # Var N(m bin): the counts summed over m bins
        mom, lag1, gse = _gap_stats(gaps)
        acf = _acf(gaps, lags)
        return Statistics(float(gaps.size / (t[-1] - t[0])), levels, var, acf, mom, lag1, width,
                          _se(gaps.size, blocks, gse, gaps.size, acf))
    x = _counts(counts)
    levels, var, blocks = _aggregated(x, _jmax(x.size))
    idx = np.flatnonzero(x)
    gaps = np.diff(idx)
    mom, lag1, gse = _gap_stats(gaps)
    acf = _acf(x, lags)
    return Statistics(float(x.mean()), levels, var, acf, mom, lag1, 1.0, _se(x.size, blocks, gse, gaps.size, acf))


def _stationary(P: np.ndarray, continuous: bool) -> np.ndarray:
    K = P.shape[0]
    A = (P.T if continuous else P.T - np.eye(K)).copy()
    A[-1, :] = 1.0
    rhs = np.zeros(K)
    rhs[-1] = 1.0
    pi = np.linalg.solve(A, rhs)
    return np.maximum(pi, 0.0) / np.maximum(pi, 0.0).sum()


def _expm(A: np.ndarray) -> np.ndarray:
    """exp(A) of a small generator by scaling and squaring of a 16-term Taylor series (the
    norm is scaled below 1/2, where the truncation error is below 1e-19)."""
    nrm = float(np.max(np.sum(np.abs(A), axis=1)))
    s = max(0, int(math.ceil(math.log2(nrm / 0.5)))) if nrm > 0.5 else 0
    B = A / 2.0**s
    E, term = np.eye(A.shape[0]), np.eye(A.shape[0])
    for k in range(1, 17):
        term = term @ B / k
        E = E + term
    for _ in range(s):
        E = E @ E
    return E


def _model_stats(P: np.ndarray, a: np.ndarray, levels: np.ndarray, lags: int, continuous: bool, bin: float = 1.0,
                 second: np.ndarray | None = None) -> Statistics:
    """Closed-form statistics of an MMBP (P stochastic, a arrival probabilities; ``second``:
    E[X^2] per state for a batch source) or an MMPP (P generator, a rates; bins of ``bin``)."""
    K = P.shape[0]
    pi = _stationary(P, continuous)
    lam = float(pi @ a)
    one = np.ones(K)
    Pi = np.outer(one, pi)
    jmax = int(round(math.log2(levels[-1])))
    if continuous:
        Z = np.linalg.inv(Pi - P)
        pl = pi * a
        c1 = float(pl @ Z @ a) - lam * lam
        Z2 = Z @ Z
        E = _expm(P * bin)
        var = []
        for j in range(jmax + 1):
            t = bin * 2.0**j
            var.append(lam * t + 2.0 * t * c1 - 2.0 * float(pl @ Z2 @ (np.eye(K) - E) @ a))
            E = E @ E
        D0, D1 = P - np.diag(a), np.diag(a)
        try:
            M = np.linalg.inv(-D0)
        except np.linalg.LinAlgError:
            M = np.full((K, K), np.nan)
        phi = pl / lam
        m1 = M @ one
        mom = np.array([float(phi @ m1), 2.0 * float(phi @ M @ m1), 6.0 * float(phi @ M @ M @ m1)])
        vg = mom[1] - mom[0] ** 2
        acf = []
        v = M @ one  # (M D1)^k M 1, k = 1..L
        for _ in range(lags):
            v = M @ (D1 @ v)
            acf.append((float(phi @ M @ v) - mom[0] ** 2) / vg if vg > 0 else 0.0)
        acf = np.asarray(acf)
        return Statistics(lam, np.asarray(levels[: jmax + 1], float), np.asarray(var), acf, mom, float(acf[0]), bin)
    A = P - Pi
    ex2 = pi @ (a if second is None else second)
    sigma2 = float(ex2) - lam * lam
    pD = pi * a
    # doubling: T(m) = sum_{k<m} A^k, U(m) = sum_{k<m} k A^k; sum_{k=1}^{m-1} (m - k) A^k = m T - U - m I
    Am, Tm, Um = A.copy(), np.eye(K), np.zeros((K, K))
    var = []
    for j in range(jmax + 1):
        m = 2.0**j
        S = m * Tm - Um - m * np.eye(K)
        var.append((sigma2 + 2.0 / m * float(pD @ S @ a)) / m)
        Um = Um + Am @ (Um + m * Tm)
        Tm = Tm + Am @ Tm
        Am = Am @ Am
    acf, v = [], a.copy()
    for _ in range(lags):
        v = A @ v
        acf.append(float(pD @ v) / sigma2 if sigma2 > 0 else 0.0)
    if second is None and lam > 0:
        D0, D1 = P * (1.0 - a)[None, :], P * a[None, :]
        try:
            N = np.linalg.inv(np.eye(K) - D0)
        except np.linalg.LinAlgError:  # no arrival ever again from some state: no gap law
            N = np.full((K, K), np.nan)
        phi = pD / lam
        n1 = N @ one
        n2 = N @ n1
        n3 = N @ n2
        mom = np.array([float(phi @ n1), float(phi @ (n2 + D0 @ n2)), float(phi @ (n3 + 4 * D0 @ n3 + D0 @ D0 @ n3))])
        vg = mom[1] - mom[0] ** 2
        lag1 = (float(phi @ N @ N @ D1 @ n1) - mom[0] ** 2) / vg if vg > 0 else 0.0
    else:
        mom, lag1 = np.full(3, np.nan), float("nan")
    return Statistics(lam, np.asarray(levels[: jmax + 1], float), np.asarray(var), np.asarray(acf), mom, lag1, 1.0)


def source_statistics(source: _core.Source, levels: Sequence[float], lags: int = DEFAULT_LAGS,
                      bin: float = 1.0) -> Statistics:
    """The statistics of a source in closed form (levels: powers of two from 1; an MMPP's
    counts in bins of ``bin`` time units)."""
    if not isinstance(source, _core.Source):
        raise _err("source", "an aqmchain.Source", source)
    lv = np.asarray(levels, float)
    P = np.asarray(source.matrix, float)
    if source.kind == "batch":
        pmf = np.asarray(source.counts, float)
        k = np.arange(pmf.shape[1])
        return _model_stats(P, pmf @ k, lv, lags, False, second=pmf @ (k * k))
    return _model_stats(P, np.asarray(source.arrival, float), lv, lags, source.continuous, bin)


# ------------------------------------------------------------------ the fit
def _sig(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _logit(p: Any) -> np.ndarray:
    p = np.clip(np.asarray(p, float), 1e-12, 1 - 1e-12)
    return np.log(p / (1 - p))


def _mmbp_from(theta: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
    if K == 2:
        p01, p10, a0, a1 = _sig(theta)
        return np.array([[1 - p01, p01], [p10, 1 - p10]]), np.array([a0, a1])
    r = _sig(theta[:K])
    w = np.exp(np.concatenate([[0.0], theta[K: 2 * K - 1]]))
    w /= w.sum()
    a = _sig(theta[2 * K - 1:])
    P = np.diag(1 - r) + np.outer(r, w)
    return P, a


def _mmpp_from(theta: np.ndarray, K: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    rates = scale * np.exp(theta[:K])
    if K == 2:
        r01, r10 = scale * np.exp(theta[2:4])
        return np.array([[-r01, r01], [r10, -r10]]), rates
    r = scale * np.exp(theta[K: 2 * K])
    w = np.exp(np.concatenate([[0.0], theta[2 * K: 3 * K - 1]]))
    w /= w.sum()
    Q = np.outer(r, w)
    np.fill_diagonal(Q, 0.0)
    Q -= np.diag(Q.sum(axis=1))
    return Q, rates


def _residuals(model: Statistics, trace: Statistics, use_gaps: bool = True) -> np.ndarray:
    """(model - trace) / standard error, statistic by statistic (log scale for the mean,
    the variances and the gap moments)."""
    se = trace.se
    with np.errstate(divide="ignore", invalid="ignore"):
        r = [np.array([(model.mean / trace.mean - 1.0) / se["mean"]])]
        ok = (trace.variance > 0) & np.isfinite(trace.variance)
        lv = np.log(np.maximum(model.variance[ok], 1e-300)) - np.log(trace.variance[ok])
        r.append(lv / se["variance"][ok])
        r.append((model.acf - trace.acf) / se["acf"])
        if use_gaps and np.all(np.isfinite(trace.gap_moments)):  # a non-finite model side costs 1e8 below
            r.append((np.log(np.maximum(model.gap_moments[1:], 1e-300)) - np.log(trace.gap_moments[1:]))
                     / se["gap_moments"][1:])
            r.append(np.array([(model.gap_lag1 - trace.gap_lag1) / se["gap_lag1"]]))
    out = np.concatenate(r)
    return np.where(np.isfinite(out), out, 1e8)


def _least_squares(fun, starts: list[np.ndarray]) -> tuple[np.ndarray, float, int]:
    from scipy.optimize import least_squares

    best, cost, evals = None, math.inf, 0
    for x0 in starts:
        res = least_squares(fun, x0, method="trf", x_scale=1.0, max_nfev=50 * len(x0), xtol=1e-8, ftol=1e-10)
        evals += int(res.nfev)
        if res.cost < cost:
            best, cost = res.x, float(res.cost)
    return best, cost, evals


def _fit_mmbp(st: Statistics, K: int, lags: int) -> tuple[_core.Source, float, int]:
    lam = min(max(st.mean, 1e-9), 1 - 1e-9)
    rho1 = float(np.clip(st.acf[0], 0.0, 0.99))
    rho2 = float(np.clip(st.acf[1], 0.0, 0.99)) if st.acf.size > 1 else rho1 * rho1
    theta_g = min(max(rho2 / rho1 if rho1 > 1e-6 else 0.5, 0.05), 0.9999)

    def fun(x):
        P, a = _mmbp_from(x, K)
        return _residuals(_model_stats(P, a, st.levels, lags, False), st, True)

    starts = []
    if K == 2:
        for spread in (0.5, 0.9):
            for share in (0.3, 0.7):
                s = (1.0 - theta_g)  # p01 + p10
                p01, p10 = s * share, s * (1 - share)
                pi1 = p01 / s
                a0 = max(lam - spread * lam * pi1, 1e-4)
                a1 = min((lam - (1 - pi1) * a0) / pi1, 1 - 1e-4)
                starts.append(np.concatenate([_logit([p01, p10]), _logit([a0, a1])]))
    else:  # one start: K >= 3 has 3K - 1 parameters (each start costs that many evaluations per step)
        for spread in (0.7,):
            r = np.geomspace(max(1 - theta_g, 1e-5), 0.5, K)
            a = np.clip(lam * (1 + spread * np.linspace(-1, 2, K)), 1e-4, 1 - 1e-4)
            starts.append(np.concatenate([_logit(r), np.zeros(K - 1), _logit(a)]))
    x, cost, evals = _least_squares(fun, starts)
    P, a = _mmbp_from(x, K)
    P = P / P.sum(axis=1, keepdims=True)
    P[:, -1] = 1.0 - P[:, :-1].sum(axis=1)
    P = np.clip(P, 0.0, 1.0)
    return _core.Source.mmbp(P.tolist(), [float(v) for v in a]), cost, evals


def _ssmp_amin(n: int) -> float:
    from scipy.optimize import brentq

    if n == 2:
        return 1.0  # a^-1 <= 1
    f = lambda a: sum(a ** -j for j in range(1, n)) - 1.0  # noqa: E731  (decreasing, > 0 at a = 1)
    return float(brentq(f, 1.0, float(n))) * (1 + 1e-9)


def _fit_ssmp(st: Statistics, n_range: tuple[int, int], lags: int) -> tuple[_core.Source, float, int]:
    from scipy.optimize import minimize_scalar

    best, evals = (None, math.inf), 0
    for n in range(n_range[0], n_range[1] + 1):
        amin = _ssmp_amin(n)

        def src(la: float, n=n) -> _core.Source | None:
            try:
                return _core.Source.ssmp_from_mean(st.mean, float(math.exp(la)), n)
            except _core.ModelError:
                return None

        def cost(la: float) -> float:
            s = src(la)
            if s is None:
                return 1e12
            r = _residuals(source_statistics(s, st.levels, lags), st)
            return float(r @ r) / 2

        lo = math.log(amin)
        # the mean must be reachable: pi_0(q = a) >= mean grows with a
        res = minimize_scalar(cost, bounds=(lo, lo + math.log(1e4)), method="bounded",
                              options={"xatol": 1e-6, "maxiter": 200})
        evals += int(res.nfev)
        if res.fun < best[1] and src(res.x) is not None:
            best = (src(res.x), float(res.fun))
    if best[0] is None:
        raise _err("trace", "a mean arrival rate an SSMP can reach (< pi_0(q = a))", st.mean)
    return best[0], best[1], evals


def _fit_mmpp(st: Statistics, K: int, lags: int) -> tuple[_core.Source, float, int]:
    lam = st.mean

    def fun(x):
        Q, r = _mmpp_from(x, K, lam)
        return _residuals(_model_stats(Q, r, st.levels, lags, True, st.bin), st, True)

    starts = []
    for spread in (0.5, 0.9):
        for slow in (1e-3, 1e-2):
            if K == 2:
                rates = lam * np.array([1 - spread, 1 + spread])
                starts.append(np.concatenate([np.log(rates / lam), np.log([slow, slow])]))
            else:
                rates = lam * np.clip(1 + spread * np.linspace(-1, 2, K), 0.05, None)
                starts.append(np.concatenate([np.log(rates / lam), np.log(np.geomspace(slow, 0.3, K)), np.zeros(K - 1)]))
    x, cost, evals = _least_squares(fun, starts)
    Q, r = _mmpp_from(x, K, lam)
    np.fill_diagonal(Q, 0.0)
    Q -= np.diag(Q.sum(axis=1))
    return _core.Source.mmpp(Q.tolist(), [float(v) for v in r]), cost, evals


def _hurst(levels: np.ndarray, var: np.ndarray, lo: float, hi: float) -> float:
    sel = (levels >= lo) & (levels <= hi) & (var > 0)
    if sel.sum() < 2:
        return float("nan")
    slope = np.polyfit(np.log(levels[sel]), np.log(var[sel]), 1)[0]
    return float(1.0 + slope / 2.0)


@dataclasses.dataclass
class FitResult:
    """A fitted source with the quality of its fit.

    ``source``: the fitted :class:`aqmchain.Source`; ``kind``; ``slot``: the slot in
    seconds (None: the trace was given as per-slot counts; for ``mmpp`` the width of the
    count bins of the variance-time curve); ``time_unit``: the model's unit of time in
    seconds (the slot, or 1 s for ``mmpp``); ``trace``/``model``: the matched
    :class:`Statistics`; ``errors``: relative errors per statistic; ``hurst_trace`` /
    ``hurst_model``: variance-time slopes H = 1 + slope/2 of the trace's and the model's
    curves over the same levels; ``multiple``: the rule applied to slots with several
    packets and ``multiple_slots`` / ``multiple_packets``: the fractions of non-empty
    slots and of packets concerned; ``cost``: the least-squares cost; ``evaluations``:
    the model evaluations it took; ``seconds``: the fit's wall time; ``counts``: the
    per-slot counts (slotted kinds) used by :func:`simulate_trace`."""

    source: _core.Source
    kind: str
    slot: float | None
    time_unit: float
    trace: Statistics
    model: Statistics
    errors: dict[str, Any]
    hurst_trace: float
    hurst_model: float
    hurst_range: tuple[float, float]
    multiple: str
    multiple_slots: float
    multiple_packets: float
    packets: int
    cost: float
    evaluations: int
    seconds: float
    counts: np.ndarray | None = dataclasses.field(default=None, repr=False)

    def source_table(self) -> dict[str, Any]:
        """The ``[source]`` table as a dict (``kind`` and the registry's parameters)."""
        return {"kind": self.source.kind, **self.source.args()}

    def to_toml(self) -> str:
        """The ``[source]`` table ready to paste into a model file, with the fit as comments."""
        return source_toml(self.source, comments=self._comments())

    def model_section(self, buffer: int = 40, mu: float | None = None) -> str:
        """A complete model file around the fitted source: ``[model]``, ``[source]``,
        ``[service]`` (geometric/exponential with ``mu``, default the mean arrival rate /
        0.8: load 0.8) and a RED ``[aqm]`` whose thresholds are 25 % and 75 % of ``buffer``."""
        buffer = _checks.integer("buffer", buffer, 2, 10**6)
        cont = self.source.continuous
        rate = self.source.mean_rate()
        mu = rate / 0.8 if mu is None else _checks.real("mu", mu)
        if not cont:
            mu = min(mu, 1.0)
        lines = ["[model]", f"buffer = {buffer}"] + (['time = "continuous"'] if cont else []) + [""]
        lines.append(self.to_toml().rstrip())
        lines += ["", "[service]", f'kind = "{"exponential" if cont else "geometric"}"', f"mu = {mu:.10g}", "",
                  "[aqm]", 'drop = "red"', f"min_th = {0.25 * buffer:g}", f"max_th = {0.75 * buffer:g}",
                  "p_max = 0.1", f"w = {0.02 if not cont else 0.02 * mu:g}", ""]
        return "\n".join(lines)

    def _comments(self) -> list[str]:
        c = [f"fitted by aqmchain fit ({self.kind}) to {self.packets} packets"]
        if self.slot is not None:
            c.append(f"slot = {self.slot:.6g} s" + (" (count bins of the variance-time curve)"
                                                   if self.kind == "mmpp" else " (the model's unit of time)"))
        c.append(f"mean: trace {self.trace.mean:.6g}, model {self.model.mean:.6g}; "
                 f"variance-time max rel. error {self.errors['variance_time_max']:.3g}")
        c.append(f"Hurst (variance-time, m = {self.hurst_range[0]:g}..{self.hurst_range[1]:g}): "
                 f"trace {self.hurst_trace:.3f}, model {self.hurst_model:.3f}")
        if self.multiple_slots > 0:
            c.append(f"slots with several packets: {self.multiple_slots:.3g} of the non-empty slots, "
                     f"{self.multiple_packets:.3g} of the packets ({self.multiple})")
        return c

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: the source table, the statistics of both sides and the errors."""
        fin = lambda v: float(v) if v is not None and np.isfinite(v) else None  # noqa: E731
        return {"kind": self.kind, "source": self.source_table(), "slot": self.slot, "time_unit": self.time_unit,
                "packets": self.packets, "trace": self.trace.to_dict(), "model": self.model.to_dict(),
                "errors": {k: ([fin(x) for x in v] if isinstance(v, list) else fin(v)) for k, v in self.errors.items()},
                "hurst": {"trace": fin(self.hurst_trace), "model": fin(self.hurst_model),
                          "range": list(self.hurst_range), "estimator": "variance_time"},
                "multiple": {"rule": self.multiple, "slots": self.multiple_slots, "packets": self.multiple_packets},
                "cost": self.cost, "evaluations": self.evaluations, "seconds": self.seconds}

    def summary(self) -> str:
        """A text report of the fitted source and the quality of the fit."""
        e = self.errors
        lines = [f"fitted {self.kind}: {self.source_table()}",
                 f"mean            trace {self.trace.mean:.6g}  model {self.model.mean:.6g}  rel. error {e['mean']:.2e}",
                 f"variance-time   max rel. error {e['variance_time_max']:.3g} over m = "
                 f"{self.trace.levels[0]:g}..{self.trace.levels[-1]:g}",
                 f"autocorrelation max abs. error {e['acf_max']:.3g} over lags 1..{self.trace.acf.size}",
                 f"Hurst (variance-time slope, m = {self.hurst_range[0]:g}..{self.hurst_range[1]:g}): "
                 f"trace {self.hurst_trace:.4f}, model {self.hurst_model:.4f}"]
        if self.multiple_slots > 0:
            lines.append(f"slots with several packets: {self.multiple_slots:.3g} of the non-empty slots, "
                         f"{self.multiple_packets:.3g} of the packets ({self.multiple}: {MULTIPLE_RULES[self.multiple]})")
        lines.append(f"{self.evaluations} model evaluations, {self.seconds:.2f} s")
        return "\n".join(lines)

    def plot(self, ax: Any = None) -> Any:
        """The trace's and the model's variance-time curves overlaid (:func:`aqmchain.plots.fit_quality`)."""
        from .plots import fit_quality

        return fit_quality(self, ax=ax)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple, np.ndarray)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {type(v).__name__}")


def source_toml(source: _core.Source, comments: Sequence[str] = ()) -> str:
    """A source as a ``[source]`` table of a model file (full precision)."""
    if not isinstance(source, _core.Source):
        raise _err("source", "an aqmchain.Source", source)
    lines = [f"# {c}" for c in comments] + ["[source]", f"kind = {_toml_value(source.kind)}"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in source.args().items()]
    return "\n".join(lines) + "\n"


def fit_source(trace: Any, kind: str = "mmbp", *, slot: float | None = None, states: int | None = None,
               counts: bool = False, multiple: str = "clip", lags: int = DEFAULT_LAGS,
               column: str | int | None = None) -> FitResult:
    """Fit a source of ``kind`` (one of :data:`FIT_KINDS`) to a packet trace.

    ``trace``: a file (see :func:`read_trace`) or an array of arrival timestamps in
    seconds; with ``counts=True`` the values are per-slot packet counts instead (the slot
    is then the unit of time and ``slot`` is not used).  Slotted kinds cut the timestamps
    into slots of ``slot`` seconds (default: the 1 % quantile of the inter-arrival times);
    a slot holding several packets is handled by ``multiple`` (:data:`MULTIPLE_RULES`).
    ``mmpp`` keeps continuous time (unit: seconds) and uses ``slot`` only as the width of
    the count bins of its variance-time curve (default: the mean inter-arrival time).
    ``states``: the number of modulator states (mmbp/mmpp: default 2, at most 6; ssmp:
    its n, default the best n in 2..8).  ``lags``: the autocorrelation lags matched.
    """
    import time

    t0 = time.perf_counter()
    if kind not in FIT_KINDS:
        raise _err("kind", "one of " + ", ".join(FIT_KINDS), kind)
    if multiple not in MULTIPLE_RULES:
        raise _err("multiple", "one of " + ", ".join(MULTIPLE_RULES), multiple)
    if multiple == "batch" and kind != "bernoulli":
        raise _err("multiple", "'clip' or 'refuse' for kind " + kind + " ('batch' fits kind bernoulli only)",
                   multiple)
    lags = _checks.integer("lags", lags, 1, 1000)
    if states is not None:
        if kind == "bernoulli":
            raise _err("states", "not given for kind bernoulli (one state)", states)
        hi = _max_ssmp_n() if kind == "ssmp" else MAX_FIT_STATES
        states = _checks.integer("states", states, 2, hi)
    if counts and kind == "mmpp":
        raise _err("counts", "False for kind mmpp (it fits arrival timestamps)", counts)
    if isinstance(trace, (str, os.PathLike)):
        values = read_trace(trace, column=column)
    else:
        values = np.asarray(trace)
    if kind == "mmpp":
        t = _timestamps(values)
        st = trace_statistics(timestamps=t, bin=slot, lags=lags)
        src, cost, evals = _fit_mmpp(st, states or DEFAULT_STATES["mmpp"], lags)
        model = source_statistics(src, st.levels, lags, st.bin)
        return _result(src, kind, st.bin, 1.0, st, model, "clip", 0.0, 0.0, int(t.size), cost, evals,
                       time.perf_counter() - t0, None)
    if counts:
        x = _counts(values)
        used_slot = None
    else:
        t = _timestamps(values)
        used_slot = default_slot(t) if slot is None else _checks.real("slot", slot)
        x = slot_counts(t, used_slot)
    packets = int(x.sum())
    if packets < 2:
        raise _err("trace", "at least 2 packets", packets)
    busy = int(np.count_nonzero(x))
    several = x > 1
    m_slots = float(np.count_nonzero(several)) / busy
    m_packets = float((x[several] - 1).sum()) / packets
    if m_slots > 0 and multiple == "refuse":
        raise _err("slot", f"a slot with at most one packet each ({m_slots:.3g} of the non-empty slots hold several; "
                   "a smaller slot, or multiple = 'clip' or 'batch')", used_slot if used_slot is not None else 1)
    if multiple == "batch" and x.max() > 1:
        B = int(x.max())
        if B > _max_batch():
            raise _err("slot", f"at most {_max_batch()} packets in a slot for a batch source",
                       f"{used_slot} (a slot holds {B})")
        pmf = np.bincount(x, minlength=B + 1) / x.size
        pmf = pmf / pmf.sum()
        src = _core.Source.batch([[1.0]], [pmf.tolist()])
        st = trace_statistics(x, lags=lags)
        model = source_statistics(src, st.levels, lags)
        return _result(src, kind, used_slot, used_slot or 1.0, st, model, multiple, m_slots, m_packets, packets, 0.0,
                       1, time.perf_counter() - t0, x)
    if m_slots > 0:
        x = np.minimum(x, 1)
    st = trace_statistics(x, lags=lags)
    if not 0 < st.mean < 1:
        raise _err("trace", "a mean arrival rate per slot in (0, 1)", st.mean)
    if kind == "bernoulli":
        src, cost, evals = _core.Source.bernoulli(st.mean), 0.0, 1
    elif kind == "mmbp":
        src, cost, evals = _fit_mmbp(st, states or DEFAULT_STATES["mmbp"], lags)
    else:
        src, cost, evals = _fit_ssmp(st, (states, states) if states else SSMP_SEARCH, lags)
    model = source_statistics(src, st.levels, lags)
    return _result(src, kind, used_slot, used_slot or 1.0, st, model, multiple, m_slots, m_packets, packets, cost,
                   evals, time.perf_counter() - t0, x.astype(np.int32))


def _max_ssmp_n() -> int:
    """The largest SSMP n a fit tries (the core's bound, at most 64)."""
    return min(int(_core.Source.max_ssmp_n), 64)


def _max_batch() -> int:
    return int(_core.Source.max_batch_size)


def _result(src, kind, slot, unit, st, model, multiple, m_slots, m_packets, packets, cost, evals, seconds,
            x) -> FitResult:
    with np.errstate(divide="ignore", invalid="ignore"):
        vt = np.abs(model.variance / st.variance - 1.0)
        gm = np.abs(model.gap_moments / st.gap_moments - 1.0)
    errors = {"mean": abs(model.mean / st.mean - 1.0), "variance_time": vt.tolist(),
              "variance_time_max": float(np.nanmax(vt)), "acf": np.abs(model.acf - st.acf).tolist(),
              "acf_max": float(np.max(np.abs(model.acf - st.acf))), "gap_moments": gm.tolist()}
    lo, hi = float(st.levels[0]), float(st.levels[-1])
    # H from the variance of the mean count per bin (mmpp's curve holds the count sums)
    per = (lambda s: s.variance / s.levels**2) if kind == "mmpp" else (lambda s: s.variance)
    return FitResult(src, kind, slot, unit, st, model, errors, _hurst(st.levels, per(st), lo, hi),
                     _hurst(model.levels, per(model), lo, hi), (lo, hi), multiple, m_slots, m_packets, packets,
                     float(cost), int(evals), float(seconds), x)


# ------------------------------------------------------------------ trace-driven simulation
def simulate_trace(model: _core.Model, counts: Any, *, warmup: int | None = None, batches: int = 20,
                   seed: int = 1) -> Any:
    """Replay per-slot packet counts (a :class:`FitResult`'s ``counts``, or any array)
    through ``model``'s queue: the model's source is replaced by the trace, a slot with k
    packets being a batch of k (docs/batch-arrivals.md).  One pass over the trace; the
    first ``warmup`` slots (default 1/10) are not measured and the rest is cut into
    ``batches`` contiguous batches, whose means give 95 % Student-t intervals (they
    include the trace's own variability only as far as the batches are independent: for
    a long-range-dependent trace the intervals are too narrow).  Returns a
    :class:`SimulationResult` (``compare``-ready: ``Comparison(solve(fitted), result)``);
    response times are not measured (NaN)."""
    from scipy.stats import t as student

    from .simulation import SimulationResult

    if not isinstance(model, _core.Model):
        raise _err("model", "an aqmchain.Model", model)
    if isinstance(counts, FitResult):
        if counts.counts is None:
            raise _err("counts", "the per-slot counts of a slotted fit (kind mmpp keeps timestamps)", counts.kind)
        counts = counts.counts
    x = _counts(counts)
    if x.max() > 2**31 - 1:
        raise _err("counts", "at most 2^31 - 1 packets in a slot", int(x.max()))
    batches = _checks.integer("batches", batches, 2, 10000)
    seed = _checks.integer("seed", seed, 0, 2**64 - 1)
    warmup = x.size // 10 if warmup is None else _checks.integer("warmup", warmup, 0, x.size - 1)
    import time

    t0 = time.perf_counter()
    raw = _core.simulate_trace(model, x.astype(np.int32), int(warmup), int(batches), int(seed))
    seconds = time.perf_counter() - t0
    L = raw["length"].astype(float)
    tq = float(student.ppf(0.975, batches - 1))

    def est(num: np.ndarray, den: np.ndarray) -> tuple[float, float]:
        num, den = np.asarray(num, float), np.asarray(den, float)
        if den.sum() == 0:
            return float("nan"), float("nan")
        value = float(num.sum() / den.sum())
        ok = den > 0
        per = num[ok] / den[ok]
        hw = tq * float(np.std(per, ddof=1)) / math.sqrt(ok.sum()) if ok.sum() > 1 else float("nan")
        return value, hw

    arr = raw["arrivals"]
    est_ = {"arrival_rate": est(arr, L), "throughput": est(raw["departures"], L),
            "loss": est(raw["aqm"] + raw["overflow"], arr), "loss_aqm": est(raw["aqm"], arr),
            "loss_overflow": est(raw["overflow"], arr), "mark_prob": est(raw["marks"], arr),
            "pushed_out_prob": (float("nan"), float("nan")),
            "mean_system": est(raw["sum_n"], L), "mean_queue": est(raw["sum_q"], L),
            "mean_avg": est(raw["sum_avg"], L), "mean_response": (float("nan"), float("nan")),
            "var_response": (float("nan"), float("nan"))}
    for name, s, s2 in (("var_system", "sum_n", "sum_n2"), ("var_queue", "sum_q", "sum_q2")):
        m1, m2 = raw[s] / L, raw[s2] / L
        v = m2 - m1 * m1
        tot = float(raw[s2].sum() / L.sum() - (raw[s].sum() / L.sum()) ** 2)
        est_[name] = (tot, tq * float(np.std(v, ddof=1)) / math.sqrt(batches))
    hist = raw["hist_n"].astype(float)
    sys_pmf = hist / hist.sum()
    queue_pmf = np.concatenate([[sys_pmf[0] + sys_pmf[1]], sys_pmf[2:], [0.0]]) if sys_pmf.size > 1 else sys_pmf
    nan_pmf = np.full_like(sys_pmf, np.nan)

    class _Raw:
        pass

    r = _Raw()
    r.estimates = est_
    r.pmfs = {"queue_pmf": (queue_pmf, nan_pmf.copy()), "system_pmf": (sys_pmf, nan_pmf.copy()),
              "response_pmf": (np.array([]), np.array([]))}
    r.class_aware = False
    r.series = {}
    r.measured_slots = int(L.sum())
    r.served_packets = 0
    r.observations = int(L.sum())
    r.seconds = seconds
    r.slots_per_second = x.size / max(seconds, 1e-9)
    r.threads = 1
    opts = _core.SimOptions()  # the run's description (set field by field: a short trace is allowed here)
    opts.slots, opts.warmup, opts.replications, opts.seed, opts.batches = int(x.size), int(warmup), 1, seed, batches
    return SimulationResult(model, opts, r)


# ------------------------------------------------------------------ synthetic traces
def fgn_trace(slots: int, hurst: float, mean: float, seed: int = 1) -> np.ndarray:
    """Per-slot arrival indicators (0/1, uint8) from fractional Gaussian noise of Hurst
    parameter ``hurst``: X_t = 1 when Z_t exceeds the normal quantile that makes P(X_t = 1)
    = ``mean`` (a thresholded Gaussian keeps the long-range dependence, with the same H).
    The noise is exact (circulant embedding, "Simulation of fractional Brownian motion"
    by Dieker); numpy's PCG64 stream of ``seed``."""
    from scipy.stats import norm

    slots = _checks.integer("slots", slots, 16, 2**28)
    hurst = _checks.real("hurst", hurst)
    if not 0 < hurst < 1:
        raise _err("hurst", "in (0, 1)", hurst)
    mean = _checks.real("mean", mean)
    if not 0 < mean < 1:
        raise _err("mean", "in (0, 1)", mean)
    n = 1 << int(math.ceil(math.log2(slots)))
    k = np.arange(n + 1, dtype=float)
    g = 0.5 * (np.abs(k + 1) ** (2 * hurst) - 2 * k ** (2 * hurst) + np.abs(k - 1) ** (2 * hurst))
    c = np.concatenate([g, g[-2:0:-1]])
    lam = np.maximum(np.fft.rfft(c).real, 0.0)
    rng = np.random.default_rng(seed)
    m = c.size
    w = rng.standard_normal(m) + 1j * rng.standard_normal(m)
    z = np.fft.fft(np.sqrt(np.concatenate([lam, lam[-2:0:-1]]) / m) * w).real[:slots]
    return (z > norm.ppf(1 - mean)).astype(np.uint8)


def mmpp_trace(source: _core.Source, packets: int, seed: int = 1) -> np.ndarray:
    """Arrival timestamps of an MMPP source (``packets`` of them; modulator started from
    its stationary law; numpy's PCG64 stream of ``seed``)."""
    if not isinstance(source, _core.Source) or source.kind not in ("mmpp", "poisson"):
        raise _err("source", "an MMPP or Poisson aqmchain.Source", source)
    packets = _checks.integer("packets", packets, 1, 2**31)
    rng = np.random.default_rng(seed)
    Q = np.asarray(source.matrix, float)
    r = np.asarray(source.arrival, float)
    K = r.size
    pi = _stationary(Q, True)
    out = np.empty(packets)
    filled, t, s = 0, 0.0, int(rng.choice(K, p=pi))
    while filled < packets:  # one sojourn per step: vectorised over the arrivals in it
        rate = -Q[s, s]
        d = rng.exponential(1.0 / rate) if rate > 0 else math.inf
        k = min(rng.poisson(r[s] * d) if np.isfinite(d) else packets - filled, packets - filled)
        if k:
            out[filled: filled + k] = t + np.sort(rng.uniform(0.0, d if np.isfinite(d) else k / r[s], k))
            filled += k
        t += d if np.isfinite(d) else 0.0
        if rate > 0:
            p = np.maximum(Q[s], 0.0)
            p[s] = 0.0
            s = int(rng.choice(K, p=p / p.sum()))
    return out
