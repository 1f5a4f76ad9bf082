"""Self-similarity of arrival sources: Hurst-parameter estimators (docs/hurst.md).

The Hurst parameter of a traffic source is not one number: it is read off the slope of
a curve over a range of time scales, and each estimator reads a different curve.

- ``"exact"``: variance-time slope on the exact aggregated-variance curve Var X^(m)
  (closed form from the source's autocovariance; no simulation, no sampling error);
- ``"variance_time"``: the same slope measured on simulated arrival traces;
- ``"rs"``: rescaled-range (R/S) statistic on simulated traces, with the Anis-Lloyd
  small-sample correction;
- ``"asymptotic"``: the SSMP's closed form H = 1 - ln q / (2 ln(a/q)) (the limit of its
  local slope over the scales it covers, as n grows).

A fit is made over aggregation levels (block sizes) m = 2^j inside ``range`` =
(lo, hi) slots.  The trace estimators run ``replications`` independent traces and
report the mean with a 95 % Student-t interval over them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from . import _checks, _core

__all__ = ["HURST_ESTIMATORS", "HurstEstimate", "estimate_hurst", "hurst_from_trace", "aggregated_variance",
           "rescaled_range", "expected_rs", "arrival_trace"]

HURST_ESTIMATORS = {
    "exact": "variance-time slope on the exact aggregated-variance curve (closed form)",
    "variance_time": "variance-time slope on simulated arrival traces",
    "rs": "rescaled-range (R/S) slope on simulated traces, Anis-Lloyd corrected",
    "asymptotic": "SSMP closed form 1 - ln q / (2 ln(a/q))",
}
"""The estimators of :func:`estimate_hurst`: name -> one-line description (the names are written only
here)."""
MAX_LOG2_LEVEL = 30
#: default ranges (slots); None = up to the trace length / 64 (variance-time) or / 16 (R/S)
DEFAULT_RANGE = {"exact": (1, 2**20), "variance_time": (1, None), "rs": (16, None), "asymptotic": (1, 2**20)}


def _err(param: str, bound: str, value: Any) -> _core.ModelError:
    return _checks.model_error(param, bound, value)


@dataclasses.dataclass
class HurstEstimate:
    """One Hurst estimate with the curve it was read from.

    ``levels``/``values``: the curve (Var X^(m), or the mean R/S statistic, at m = 2^j;
    for trace estimators the mean over the replications); ``slope``/``intercept``: the
    least-squares line of log value against log m over ``range``; ``local``: the local
    H between consecutive levels; ``replicates``: H of each trace, ``ci`` the 95 %
    half-width over them (trace estimators with 2 or more replications)."""

    estimator: str
    H: float
    range: tuple[float, float]
    levels: np.ndarray
    values: np.ndarray
    slope: float
    intercept: float
    local: np.ndarray
    source: str = ""
    ci: float | None = None
    replicates: list[float] | None = None
    slots: int | None = None
    seed: int | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: the estimate, its interval, range, line and curve."""
        return {"estimator": self.estimator, "description": HURST_ESTIMATORS.get(self.estimator, ""),
                "H": self.H, "ci": self.ci, "range": list(self.range), "slope": self.slope,
                "intercept": self.intercept, "levels": [float(x) for x in self.levels],
                "values": [float(x) for x in self.values], "local_H": [float(x) for x in self.local],
                "replicates": self.replicates, "slots": self.slots, "seed": self.seed, "source": self.source,
                "note": self.note}

    def summary(self) -> str:
        """H (with its 95 % half-width for trace estimators), the estimator and its range; then the note, if any."""
        ci = f" ± {self.ci:.3f} (95 %, {len(self.replicates or [])} traces of {self.slots} slots)" \
            if self.ci is not None else ""
        from .plots import level_text

        rng = (f"m = {level_text(self.range[0])}..{level_text(self.range[1])} slots" if self.estimator != "asymptotic"
               else "closed form")
        return f"H = {self.H:.4f}{ci}  [{self.estimator}: {HURST_ESTIMATORS[self.estimator]}; {rng}]" + \
            (f"\n{self.note}" if self.note else "")

    def plot(self, ax: Any = None, **kwargs: Any) -> Any:
        """The curve and the fitted line (:func:`aqmchain.plots.variance_time`); returns the Figure."""
        from .plots import variance_time

        return variance_time(self, ax=ax, **kwargs)

    def __repr__(self) -> str:
        ci = f" ± {self.ci:.3f}" if self.ci is not None else ""
        return f"<HurstEstimate {self.estimator} H={self.H:.4f}{ci} range={self.range[0]:g}..{self.range[1]:g}>"


# ------------------------------------------------------------------ traces
def arrival_trace(source: _core.Source, slots: int, seed: int = 1) -> np.ndarray:
    """Arrival indicators X_1..X_slots (uint8) of a slotted source on its own: the
    modulator starts from its stationary law and in each slot moves, then a packet
    arrives with the probability of its new state (a batch source: X_t is the number of
    arrivals, drawn from the pmf of the new state).  xoshiro256** stream of ``seed``."""
    if not isinstance(source, _core.Source):
        raise _err("source", "an aqmchain.Source", source)
    slots = _checks.integer("slots", slots, 1, 2**31)
    seed = _checks.integer("seed", seed, 0, 2**64 - 1)
    return _core.arrival_trace(source, slots, seed)


def _trace(x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim != 1 or a.size < 4:
        raise _err("trace", "a one-dimensional array of at least 4 values", f"shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise _err("trace", "finite values", "a non-finite value")
    return a


def _levels(lo: float, hi: float, what: str = "range") -> np.ndarray:
    j0, j1 = math.ceil(math.log2(lo) - 1e-12), math.floor(math.log2(hi) + 1e-12)
    if j1 - j0 < 1:
        raise _err(what, "lo:hi containing at least two powers of two (lo >= 1)", f"{lo:g}:{hi:g}")
    return 2.0 ** np.arange(j0, j1 + 1)


def aggregated_variance(x: Any, levels: Sequence[float], mean: float | None = None) -> np.ndarray:
    """Var X^(m) of a trace for each aggregation level m: the variance of the means of
    consecutive non-overlapping blocks of m values (the last incomplete block dropped).
    ``mean``: the process mean when known (then the variance is taken about it, which
    removes the downward bias the sample mean causes under long-range dependence);
    otherwise the blocks' sample variance (ddof 1)."""
    a = _trace(x)
    out = []
    for m in levels:
        m = int(m)
        k = a.size // m
        if k < 2:
            raise _err("levels", f"at most len(trace) / 2 = {a.size // 2}", m)
        b = a[: k * m].reshape(k, m).mean(axis=1)
        out.append(float(np.mean((b - mean) ** 2)) if mean is not None else float(np.var(b, ddof=1)))
    return np.asarray(out)


def expected_rs(n: Any) -> np.ndarray:
    """E[R/S] of n i.i.d. normal values (Anis & Lloyd's formula,
    Gamma((n-1)/2) / (sqrt(pi) Gamma(n/2)) sum_{i<n} sqrt((n-i)/i)): the baseline the R/S
    estimator divides by so that an uncorrelated trace gives H = 1/2 at every block size,
    not only asymptotically.  (Peters' extra factor (n - 1/2)/n is not applied: with R
    and S as computed by :func:`rescaled_range` the plain formula matches simulated
    normal noise to 0.1 % from n = 16 on, the corrected one overshoots by 3 % at n = 16.)"""
    from scipy.special import gammaln

    out = []
    for v in np.atleast_1d(np.asarray(n, dtype=float)):
        i = np.arange(1.0, v)
        g = math.exp(gammaln((v - 1) / 2) - gammaln(v / 2)) / math.sqrt(math.pi)
        out.append(g * float(np.sum(np.sqrt((v - i) / i))))
    return np.asarray(out)


def rescaled_range(x: Any, sizes: Sequence[float]) -> np.ndarray:
    """The mean rescaled range R/S over the non-overlapping blocks of each size n: R is
    the range of the partial sums of the block's deviations from its mean (0 included),
    S its standard deviation; blocks with S = 0 (constant, e.g. no arrival at all) are
    skipped.  NaN for a size whose blocks are all constant."""
    a = _trace(x)
    out = []
    for n in sizes:
        n = int(n)
        k = a.size // n
        if k < 1 or n < 2:
            raise _err("sizes", f"in [2, len(trace) = {a.size}]", n)
        y = a[: k * n].reshape(k, n)
        dev = y - y.mean(axis=1, keepdims=True)
        z = np.cumsum(dev, axis=1)
        r = np.maximum(z.max(axis=1), 0.0) - np.minimum(z.min(axis=1), 0.0)
        s = y.std(axis=1)
        ok = s > 0
        out.append(float(np.mean(r[ok] / s[ok])) if ok.any() else float("nan"))
    return np.asarray(out)


def _fit(levels: np.ndarray, values: np.ndarray, lo: float, hi: float) -> tuple[float, float]:
    sel = (levels >= lo) & (levels <= hi) & np.isfinite(values) & (values > 0)
    if sel.sum() < 2:
        raise _err("range", "a range with at least two levels where the curve is defined", f"{lo:g}:{hi:g}")
    slope, intercept = np.polyfit(np.log(levels[sel]), np.log(values[sel]), 1)
    return float(slope), float(intercept)


def _local(levels: np.ndarray, values: np.ndarray, rs: bool) -> np.ndarray:
    """Local H between consecutive levels: 1 + slope/2 of the variance-time curve, or for
    R/S 1/2 + the slope of log(R/S / E_iid[R/S])."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if rs:
            return 0.5 + np.diff(np.log(values / expected_rs(levels))) / np.diff(np.log(levels))
        return 1.0 + np.diff(np.log(values)) / np.diff(np.log(levels)) / 2.0


def hurst_from_trace(x: Any, estimator: str = "variance_time", *, range: tuple[float, float] | None = None,
                     mean: float | None = None) -> HurstEstimate:
    """Estimate H from one trace (any real-valued series: arrival indicators, byte
    counts, fractional Gaussian noise, ...).  ``estimator`` is ``"variance_time"``
    (slope -beta of log Var X^(m) against log m, H = 1 - beta/2; ``mean`` as in
    :func:`aggregated_variance`) or ``"rs"`` (slope of log R/S - log E_iid[R/S] against
    log n, plus 1/2).  ``range``: the levels / block sizes fitted, in samples (powers of
    two inside it; default 1..len/64 for variance-time, 16..len/16 for R/S)."""
    a = _trace(x)
    if estimator not in ("variance_time", "rs"):
        raise _err("estimator", "'variance_time' or 'rs' for a trace", estimator)
    lo, hi = range if range is not None else (DEFAULT_RANGE[estimator][0], a.size // (64 if estimator ==
                                                                                     "variance_time" else 16))
    lo, hi = float(lo), float(hi)
    if not (1 <= lo < hi):
        raise _err("range", "lo:hi with 1 <= lo < hi", f"{lo:g}:{hi:g}")
    cap = a.size // 2 if estimator == "variance_time" else a.size
    if hi > cap:
        raise _err("range", f"hi <= {cap} (the trace has {a.size} values)", f"{lo:g}:{hi:g}")
    levels = _levels(max(lo, 2.0 if estimator == "rs" else 1.0), hi)
    if estimator == "variance_time":
        values = aggregated_variance(a, levels, mean)
        slope, intercept = _fit(levels, values, lo, hi)
        H = 1.0 + slope / 2.0
    else:
        values = rescaled_range(a, levels)
        slope, intercept = _fit(levels, values, lo, hi)
        ok = np.isfinite(values) & (values > 0)
        b = np.polyfit(np.log(levels[ok]), np.log(values[ok]) - np.log(expected_rs(levels[ok])), 1)[0]
        H = 0.5 + float(b)
    return HurstEstimate(estimator=estimator, H=float(H), range=(lo, hi), levels=levels, values=values, slope=slope,
                         intercept=intercept, local=_local(levels, values, estimator == "rs"), slots=int(a.size))


def _student_hw(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    from scipy.stats import t

    return float(t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / math.sqrt(len(values)))


def estimate_hurst(source: _core.Source, estimator: str = "exact", *, range: tuple[float, float] | None = None,
                   slots: int = 2**20, replications: int = 8, seed: int = 1, known_mean: bool = False) -> HurstEstimate:
    """The Hurst parameter of a slotted arrival source by one of :data:`HURST_ESTIMATORS`.

    ``range`` = (lo, hi): the aggregation levels m (block sizes n for R/S) fitted, in
    slots; the powers of two inside it are used.  Defaults: 1..2^20 for ``exact``,
    1..slots/64 for ``variance_time``, 16..slots/16 for ``rs``.  The trace estimators
    simulate ``replications`` traces of ``slots`` slots (seeds seed, seed + 1, ...) and
    return the mean H with a 95 % interval; ``known_mean`` takes the variance about the
    source's exact mean rate instead of each trace's sample mean.

    For the SSMP of "Implementation of modified AQM mechanisms in IP routers" (n = 5,
    q = 1.927562, a = 31.6, the paper's "H = 0.78") the exact curve gives 0.819 over
    m = 1..2^20 and the asymptotic formula 0.883; docs/hurst.md explains which range
    gives which value.
    """
    if not isinstance(source, _core.Source):
        raise _err("source", "an aqmchain.Source", source)
    if estimator not in HURST_ESTIMATORS:
        raise _err("estimator", "one of " + ", ".join(HURST_ESTIMATORS), estimator)
    if source.continuous:
        slotted = ", ".join(k["name"] for k in _core.Source.kinds if not k["continuous"])  # the core's registry
        raise _err("source.kind", f"a slotted source ({slotted})", source.kind)
    desc = repr(source) if "object at" not in repr(source) else source.kind
    if source.kind == "ssmp":
        desc = f"SSMP(n={source.n}, q={source.q:.6g}, a={source.a:g})"
    elif source.kind == "bernoulli":
        desc = f"Bernoulli({source.arrival[0]:g})"
    if estimator == "asymptotic":
        rep = _core.hurst(source, 0, 1)
        if not rep.asymptotic_valid:
            raise _err("source", "an SSMP source with q > 1 and a > q^2 for the asymptotic formula", desc)
        lv = np.array([1.0])
        return HurstEstimate(estimator, float(rep.asymptotic), (float("nan"), float("nan")), lv, lv, float("nan"),
                             float("nan"), np.array([]), source=desc,
                             note="the limit of the local slope of the variance-time curve over the time "
                                  "scales the modulator covers, as the number of states n grows")
    if estimator == "exact":
        lo, hi = range if range is not None else DEFAULT_RANGE["exact"]
        lo, hi = float(lo), float(hi)
        if not (1 <= lo < hi <= 2.0**MAX_LOG2_LEVEL):
            raise _err("range", f"lo:hi with 1 <= lo < hi <= 2^{MAX_LOG2_LEVEL}", f"{lo:g}:{hi:g}")
        fit_levels = _levels(lo, hi)
        top = max(20, int(round(math.log2(fit_levels[-1]))))
        rep = _core.hurst(source, 0, top)  # the whole curve 1..2^top, for the local slopes and the plot
        levels = np.asarray(rep.levels, float)
        values = np.asarray(rep.variances, float)
        slope, intercept = _fit(levels, values, lo, hi)
        return HurstEstimate("exact", 1.0 + slope / 2.0, (lo, hi), levels, values, slope, intercept,
                             _local(levels, values, False), source=desc)
    slots = _checks.integer("slots", slots, 64, 2**31)
    replications = _checks.integer("replications", replications, 1, 10000)
    seed = _checks.integer("seed", seed, 0, 2**64 - 1 - replications)
    mean = source.mean_rate() if known_mean else None
    runs = []
    for r in np.arange(replications):  # one trace at a time: memory stays at one trace
        x = arrival_trace(source, slots, seed + int(r))
        runs.append(hurst_from_trace(x, estimator, range=range, mean=mean))
    hs = [e.H for e in runs]
    levels = runs[0].levels
    with np.errstate(invalid="ignore"):
        values = np.nanmean(np.vstack([e.values for e in runs]), axis=0) if replications > 1 else runs[0].values
    slope, intercept = _fit(levels, values, *runs[0].range)
    return HurstEstimate(estimator, float(np.mean(hs)), runs[0].range, levels, values, slope, intercept,
                         _local(levels, values, estimator == "rs"), source=desc, ci=_student_hw(hs), replicates=hs,
                         slots=slots, seed=seed)
