"""Plots of results, on :class:`matplotlib.figure.Figure` objects.

Every function draws on ``ax`` when one is given and otherwise creates a new
:class:`~matplotlib.figure.Figure` (never through pyplot, never choosing a backend), and
returns the figure; ``fig.savefig("out.png")`` writes it, and in a notebook the figure
is displayed when it is the value of a cell.

- ``queue_pmf``: queue-length pmf on a log scale, chain (line) against simulation
  (points with 95 % bars), min_th..max_th band;
- ``response_pmf``: response-time pmf R = D - A, one line per drop policy;
- ``heatmap``: the stationary joint law of (q, avg), log colour scale;
- ``transient``: metrics over time, phase boundaries marked;
- ``variance_time``: the variance-time curve of a source (Hurst estimation);
- ``local_hurst``: the local Hurst parameter against the time scale;
- ``fit_quality``: a fitted source against its trace: variance-time curves and autocorrelations.
- ``sensitivities``: a tornado chart of one metric's elasticities by the model's parameters.

Conventions: the x-axes are in packets (queue length q = waiting packets, avg) or
slots (response time, time); probabilities use log scales wherever tails matter, and
the y-range is fitted to the data shown (at most ``decades`` powers of ten below the
largest value: the solvers' round-off floor is near 1e-16 of the total mass).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from . import _core

__all__ = ["queue_pmf", "response_pmf", "heatmap", "joint_pmf", "transient", "variance_time", "local_hurst", "fit_quality",
           "sensitivities",
           "model_label", "threshold_band", "figure_format", "save"]

#: default depth of the log y-axes, in powers of ten below the largest value shown
DECADES = 14.0

_DROP_SPECS = {k["name"]: k for k in _core.DropFunction.kinds}  # the core's registry (title, band, params)


# ------------------------------------------------------------------ writing


def figure_format(path: Any, param: str = "path") -> str:
    """The image format of ``path`` by its suffix (``png``, ``pdf``, ``svg``, ... as matplotlib
    writes them); a path without a suffix is written as PNG, to exactly that path.  An empty
    path or a suffix that is not an image format raises :class:`aqmchain.ModelError` naming
    ``param`` (checked before any work is done)."""
    from pathlib import Path

    from matplotlib.backend_bases import FigureCanvasBase

    from ._checks import model_error

    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise model_error(param, "a file name", path)
    suffix = Path(path).suffix[1:].lower()
    if not suffix:
        return "png"
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix not in formats:
        raise model_error(param, "a file name ending in an image format (" + ", ".join(f".{k}" for k in sorted(formats))
                          + "; none: PNG)", str(path))
    return suffix


def save(fig: Any, path: Any, param: str = "path", **kwargs: Any) -> None:
    """Write ``fig`` to exactly ``path`` in the format :func:`figure_format` gives (no suffix
    is ever appended)."""
    fig.savefig(path, format=figure_format(path, param), **kwargs)


# ------------------------------------------------------------------ helpers
def _axes(ax: Any, figsize: tuple[float, float] = (7.0, 4.2)) -> tuple[Any, Any]:
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def _num(v: float) -> str:
    return f"{v:g}"


def model_label(model: Any, name: str | None = None) -> str:
    """A short description of a model for titles: drop function, source, service, filter.

    ``name`` (e.g. the model file's name) is put in front."""
    d = model.aqm.drop
    spec = _DROP_SPECS[d.kind]
    drop = spec["title"]
    params = spec["params"]
    if params and all(p["type"] == "a number" and p["required"] for p in params):  # RED(10, 30, p_max 0.1)
        args = d.args()
        drop += "(" + ", ".join(_num(args[p["name"]]) if i < 2 else f"{p['name']} {_num(args[p['name']])}"
                                for i, p in enumerate(params)) + ")"
    src = repr(model.source)  # the core's description of the source
    mu = f"mu {_num(model.service.mu)}"
    filt = f"w {_num(model.aqm.w)}" if model.aqm.filter == "ewma" else "REDwM"
    pol = "" if model.aqm.policy == "tail" else f", {model.aqm.policy} drop"
    text = f"{drop}, {src}, {mu}, {filt}, N {model.buffer}{pol}"
    return f"{name}: {text}" if name else text


def threshold_band(model: Any) -> tuple[float, float, str] | None:
    """(lo, hi, label) of the drop function's active region (min_th..max_th for the RED
    family, K_l..K_h for DSRED, min_th..q_max for SRED), or ``None`` where none applies."""
    d = model.resolved_drop()  # SRED's q_max 0: the buffer
    label = _DROP_SPECS[d.kind]["band"]
    if not label:
        return None
    lo, hi = float(d.lo), float(d.hi)
    return (lo, hi, label) if hi > lo else None


def _band(ax: Any, model: Any, *, horizontal: bool = False) -> None:
    band = threshold_band(model)
    if band is None:
        return
    lo, hi, label = band
    span = ax.axhspan if horizontal else ax.axvspan
    span(lo, hi, color="tab:orange", alpha=0.12, lw=0, label=f"{label} (avg)")


def level_text(m: float) -> str:
    """An aggregation level for a label: 2^k for powers of two from 1024 on."""
    k = math.log2(m) if m > 0 and math.isfinite(m) else 0.0
    return f"2^{int(k)}" if m >= 1024 and k == int(k) else f"{m:g}"


def _log_ylim(ax: Any, values: Sequence[np.ndarray], decades: float) -> tuple[float, float]:
    pos = np.concatenate([np.asarray(v, float)[np.asarray(v, float) > 0] for v in values] or [np.array([])])
    if pos.size == 0:
        return 1e-3, 1.0
    top = float(pos.max())
    bottom = max(float(pos.min()), top * 10.0 ** -decades)
    lim = (bottom / 2.0, min(top * 2.0, 1.0) if top <= 1.0 else top * 2.0)
    ax.set_ylim(*lim)
    return lim


def _support_end(pmf: np.ndarray, floor: float) -> int:
    """The last index whose value is at least ``floor`` (0 when none is)."""
    idx = np.flatnonzero(np.asarray(pmf) >= floor)
    return int(idx[-1]) if idx.size else 0


# ------------------------------------------------------------------ queue pmf
def queue_pmf(result: Any, simulated: Any = None, *, ax: Any = None, which: str = "queue", name: str | None = None,
              band: bool = True, decades: float = DECADES) -> Any:
    """The queue-length pmf on a log scale; with ``simulated`` (a :class:`SimulationResult`
    of the same model), the simulation's pmf as points with 95 % confidence bars.

    ``result`` is a :class:`StationaryResult` (or a :class:`Comparison`, whose two results
    are used).  ``which`` is ``"queue"`` (waiting packets q, the papers' queue length) or
    ``"system"`` (packets n including the one in service).  The x-axis ends where the
    pmfs fall below the y-range; ``band`` shades min_th..max_th (the drop function's
    active region of avg, in the same packets).  The analytic line's y-data is the pmf
    itself (zeros are masked by the log scale).
    """
    if which not in ("queue", "system"):
        from ._checks import model_error

        raise model_error("which", "'queue' or 'system'", which)
    if simulated is None and hasattr(result, "simulated") and hasattr(result, "analytic"):
        result, simulated = result.analytic, result.simulated
    fig, ax = _axes(ax)
    pmf = np.asarray(getattr(result, f"{which}_pmf"), float)
    k = np.arange(len(pmf))
    model = result.model
    if band:
        _band(ax, model)
    ax.plot(k, pmf, lw=1.6, color="tab:blue", label="chain (analytic)")
    shown = [pmf]
    if simulated is not None:
        s = np.asarray(getattr(simulated, f"{which}_pmf"), float)
        hw = np.asarray(getattr(simulated, f"{which}_pmf_ci"), float)
        has = s > 0
        ks = np.arange(len(s))[has]
        v, h = s[has], hw[has]
        ax.errorbar(ks, v, yerr=[np.minimum(h, 0.9 * v), h], fmt="o", ms=2.5, lw=0.7, color="tab:red",
                    capsize=0, label="simulation ± 95 % CI")
        shown.append(v)
    ax.set_yscale("log", nonpositive="mask")
    bottom, _ = _log_ylim(ax, shown, decades)
    end = max(_support_end(v, bottom) for v in ([pmf] + ([s] if simulated is not None else [])))
    band_hi = threshold_band(model)[1] if band and threshold_band(model) else 0.0
    ax.set_xlim(-0.5, max(end, min(band_hi, len(pmf) - 1), 1) * 1.04 + 0.5)
    what = "waiting packets q" if which == "queue" else "packets in the system n"
    ax.set_xlabel(f"{what} (packets)")
    ax.set_ylabel(f"P({which[0]})")
    ax.set_title(f"{'queue-length' if which == 'queue' else 'system'} distribution\n{model_label(model, name)}",
                 fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return fig


# ------------------------------------------------------------------ response pmf
def response_pmf(results: Any, *, ax: Any = None, log: bool = True, name: str | None = None,
                 decades: float = 10.0) -> Any:
    """The response-time pmf (R = D - A slots between arrival and departure of a served
    packet), one line per result.

    ``results`` is a :class:`PolicyComparison` (one line per drop policy: tail, front,
    random), a mapping label -> :class:`StationaryResult`, or one result.  The legend
    gives each line's mean E[R].  ``log=False`` draws a linear y-axis like the papers'
    waiting-time figures.
    """
    if hasattr(results, "results") and isinstance(results.results, Mapping):
        results = results.results
    if not isinstance(results, Mapping):
        results = {results.model.aqm.policy: results}
    fig, ax = _axes(ax)
    shown = []
    model = None
    for label, r in results.items():
        model = model or r.model
        if r.response_pmf is None:
            continue
        pmf = np.asarray(r.response_pmf, float)
        ax.plot(np.arange(len(pmf)), pmf, lw=1.4,
                label=f"{label} (E[R] = {r.mean_response:.4g} slots)" if r.mean_response is not None else str(label))
        shown.append(pmf)
    if not shown:
        ax.text(0.5, 0.5, "no response-time pmf (no packet admitted, or a continuous-time model)",
                ha="center", va="center", transform=ax.transAxes)
    elif log:
        ax.set_yscale("log", nonpositive="mask")
        bottom, _ = _log_ylim(ax, shown, decades)
        ax.set_xlim(-0.5, max(_support_end(p, bottom) for p in shown) * 1.04 + 0.5)
    else:
        top = max(float(p.max()) for p in shown)
        ax.set_ylim(0, top * 1.08)
        ax.set_xlim(-0.5, max(_support_end(p, top * 1e-3) for p in shown) * 1.04 + 0.5)
    ax.set_xlabel("response time R (slots)")
    ax.set_ylabel("P(R = r)")
    if model is not None:
        base = model_label(model, name).replace(f", {model.aqm.policy} drop", "")
        ax.set_title(f"response-time distribution per drop policy\n{base}", fontsize=9)
    ax.grid(True, alpha=0.3)
    if shown:
        ax.legend(loc="best", fontsize=8)
    return fig


# ------------------------------------------------------------------ heat map
def joint_pmf(result: Any) -> tuple[np.ndarray, np.ndarray]:
    """The stationary joint pmf of (avg grid point, q) as a matrix ``P[i, q]`` and the avg
    grid (``result.avg_grid``).  Summed over the other components (modulator, count, ...)."""
    from .stationary import COMPONENTS

    labels = result.state_labels()
    grid = np.asarray(result.avg_grid, float)
    nq = int(labels["queue"].max()) + 1
    flat = np.bincount(labels[COMPONENTS["avg"]] * nq + labels["queue"], weights=np.asarray(result.pi, float),
                       minlength=len(grid) * nq)
    return flat.reshape(len(grid), nq), grid


def heatmap(result: Any, *, ax: Any = None, name: str | None = None, decades: float = 12.0, band: bool = True) -> Any:
    """The stationary distribution of (q, avg) as a heat map with a log colour scale.

    x: waiting packets q; y: the moving average avg on the chain's grid (cells are
    centred on the grid points, so a refined grid shows as thinner rows).  Cells below
    10^-``decades`` of the largest probability are left blank.  The dashed lines mark
    min_th and max_th on the avg axis; the dotted diagonal is avg = q.
    """
    from matplotlib.colors import LogNorm

    P, grid = joint_pmf(result)
    fig, ax = _axes(ax, figsize=(7.0, 5.0))
    top = float(P.max())
    vmin = max(float(P[P > 0].min()), top * 10.0 ** -decades)
    masked = np.ma.masked_less(P, vmin)
    q_edges = np.arange(P.shape[1] + 1) - 0.5
    if len(grid) > 1:
        mid = 0.5 * (grid[1:] + grid[:-1])
        a_edges = np.concatenate([[grid[0] - (mid[0] - grid[0])], mid, [grid[-1] + (grid[-1] - mid[-1])]])
    else:
        a_edges = np.array([grid[0] - 0.5, grid[0] + 0.5])
    mesh = ax.pcolormesh(q_edges, a_edges, masked, norm=LogNorm(vmin=vmin, vmax=top), cmap="viridis",
                         shading="flat", rasterized=True)
    fig.colorbar(mesh, ax=ax, label="P(q, avg)")
    rows, cols = np.nonzero(P >= vmin)
    if rows.size:
        ax.set_xlim(-0.5, cols.max() + 1.5)
        ax.set_ylim(a_edges[0], a_edges[min(rows.max() + 2, len(a_edges) - 1)])
    b = threshold_band(result.model) if band else None
    if b is not None:
        for v, lab in ((b[0], b[2].split("..")[0]), (b[1], b[2].split("..")[1])):
            ax.axhline(v, color="tab:red", lw=0.8, ls="--")
            ax.annotate(lab, (0.0, v), xycoords=("axes fraction", "data"), xytext=(4, 2),
                        textcoords="offset points", ha="left", va="bottom", color="tab:red", fontsize=8)
    lim = max(ax.get_xlim()[1], ax.get_ylim()[1])
    ax.plot([0, lim], [0, lim], color="0.5", lw=0.6, ls=":", label="avg = q")
    ax.set_xlabel("waiting packets q (packets)")
    ax.set_ylabel("moving average avg (packets)")
    ax.set_title(f"stationary law of (q, avg)\n{model_label(result.model, name)}", fontsize=9)
    return fig


# ------------------------------------------------------------------ transient
def transient(result: Any, *, ax: Any = None, metrics: Sequence[str] = ("mean_queue", "mean_avg"),
              name: str | None = None, band: bool = True, simulated: Any = None) -> Any:
    """Metrics of a :class:`TransientResult` over time, the phase boundaries as dashed
    lines.  ``simulated`` (an :class:`EnsembleResult` of the same scenario) adds the
    simulated mean queue / mean avg with 95 % bands.  Queue-like metrics are in packets,
    time in slots (time units for continuous-time models)."""
    fig, ax = _axes(ax)
    t = np.asarray(result.times, float)
    scenario = getattr(result, "scenario", None)
    model = scenario.phases[0].model if scenario is not None and len(scenario.phases) else None
    if band and model is not None:
        _band(ax, model, horizontal=True)
    for m in metrics:
        line, = ax.plot(t, np.asarray(result.metrics[m], float), lw=1.5, label=m.replace("_", " "))
        if simulated is not None and hasattr(simulated, m) and hasattr(simulated, m + "_hw"):
            st = np.asarray(simulated.times, float)
            v, hw = np.asarray(getattr(simulated, m)), np.asarray(getattr(simulated, m + "_hw"))
            ax.fill_between(st, v - hw, v + hw, color=line.get_color(), alpha=0.25, lw=0,
                            label=f"{m.replace('_', ' ')}, simulation ± 95 % CI")
    bounds = list(result.phase_boundaries)
    for b in bounds[1:-1]:
        ax.axvline(b, color="0.5", lw=0.8, ls="--")
    labels = list(getattr(result, "phase_labels", []) or [])
    if len(labels) > 1 and any(labels):
        for (a, b), lab in zip(zip(bounds[:-1], bounds[1:]), labels):
            if lab:
                ax.annotate(lab, (0.5 * (a + b), 1.0), xycoords=("data", "axes fraction"), xytext=(0, -3),
                            textcoords="offset points", ha="center", va="top", fontsize=8, color="0.3")
    unit = "time units" if result.continuous else "slots"
    ax.set_xlabel(f"time ({unit})")
    packets = all(m in ("mean_queue", "mean_avg", "mean_system", "var_queue") for m in metrics)
    ax.set_ylabel("packets" if packets and "var_queue" not in metrics else "value")
    title = "transient metrics"
    if model is not None:
        title += "\n" + model_label(model, name)
    elif name:
        title += f" — {name}"
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return fig


# ------------------------------------------------------------------ Hurst
def variance_time(estimate: Any, *, ax: Any = None, title: str | None = None) -> Any:
    """The variance-time plot of a :class:`HurstEstimate`: log Var(X^(m)) against log m,
    the least-squares line over the fitted range (slope -beta, H = 1 - beta/2) and the
    slope -1 of an uncorrelated source (H = 1/2) for reference.  For the R/S estimator,
    log E[R/S] against the block size n, with the line of slope H."""
    fig, ax = _axes(ax)
    m = np.asarray(estimate.levels, float)
    v = np.asarray(estimate.values, float)
    rs = estimate.estimator == "rs"
    ax.loglog(m, v, "o-", ms=3.5, lw=1.0, label=("E[R/S] (simulated trace)" if rs else
                                                 "Var X^(m) " + ("(exact)" if estimate.estimator == "exact"
                                                                 else "(simulated trace)")))
    lo, hi = estimate.range
    sel = (m >= lo) & (m <= hi)
    if sel.any():
        x = m[sel]
        what = f"slope {estimate.slope:.3f}" + (f" (classic R/S H), corrected H = {estimate.H:.3f}" if rs
                                                else f", H = {estimate.H:.3f}")
        ax.loglog(x, np.exp(estimate.intercept) * x ** estimate.slope, "-", lw=2.0, alpha=0.7,
                  label=f"fit over m = {level_text(lo)}..{level_text(hi)}: {what}")
        ref = 0.5 if rs else -1.0
        ax.loglog(m, v[sel][0] * (m / x[0]) ** ref, ":", color="0.4", lw=1.0,
                  label=f"slope {ref:g} (uncorrelated, H = 0.5)")
    ax.set_xlabel("block size n (slots)" if rs else "aggregation level m (slots)")
    ax.set_ylabel("R/S" if rs else "Var X^(m) (arrivals per slot, squared)")
    ax.set_title(title or f"{'rescaled range' if rs else 'variance-time'} plot, {estimate.source}", fontsize=9)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="best", fontsize=8)
    return fig


def local_hurst(estimates: Any, *, ax: Any = None, title: str | None = None) -> Any:
    """The local Hurst parameter between consecutive levels, H(m) = 1 + (1/2) d log Var X^(m)
    / d log m (for R/S: the local slope), one line per :class:`HurstEstimate`, each
    estimate's H as a dashed line over its fitted range.  Shows at which time scales a
    source looks self-similar: where H(m) is flat."""
    if not isinstance(estimates, (list, tuple)):
        estimates = [estimates]
    fig, ax = _axes(ax)
    for e in estimates:
        if e.estimator == "asymptotic":
            ax.axhline(e.H, color="0.3", lw=1.0, ls="-.", label=f"asymptotic formula: H = {e.H:.3f}")
            continue
        m = np.asarray(e.levels, float)
        mid = np.sqrt(m[1:] * m[:-1])
        line, = ax.semilogx(mid, np.asarray(e.local, float), "o-", ms=3, lw=1.0, label=f"local H, {e.estimator}")
        lo, hi = e.range
        ax.plot([lo, hi], [e.H, e.H], "--", color=line.get_color(), lw=1.6,
                label=f"{e.estimator}: H = {e.H:.3f} over {level_text(lo)}..{level_text(hi)}")
    ax.axhline(0.5, color="0.6", lw=0.8, ls=":")
    ax.set_xlabel("aggregation level m (slots)")
    ax.set_ylabel("local Hurst parameter H(m)")
    ax.set_title(title or f"local Hurst parameter, {estimates[0].source}", fontsize=9)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="best", fontsize=8)
    return fig


def fit_quality(fit: Any, *, ax: Any = None, title: str | None = None) -> Any:
    """A :class:`~aqmchain.fit.FitResult`: the trace's and the fitted model's variance-time
    curves overlaid (log-log, with the variance-time Hurst estimate of each) and, on a
    second axis when no ``ax`` is given, their autocorrelations at lags 1..L."""
    if ax is None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(11.0, 4.2), layout="constrained")
        ax, ax2 = fig.subplots(1, 2)
    else:
        fig, ax2 = ax.figure, None
    tr, md = fit.trace, fit.model
    cont = fit.kind == "mmpp"
    unit = f"bins of {fit.trace.bin:.3g} s" if cont else "slots"
    ax.loglog(tr.levels, tr.variance, "o", ms=4, label=f"trace (H = {fit.hurst_trace:.3f})")
    ax.loglog(md.levels, md.variance, "-", lw=1.8, label=f"fitted {fit.kind} (H = {fit.hurst_model:.3f})")
    ax.set_xlabel(f"aggregation level m ({unit})")
    ax.set_ylabel("Var N(m bins)" if cont else "Var X^(m) (arrivals per slot, squared)")
    ax.set_title(title or f"variance-time curves, max rel. error {fit.errors['variance_time_max']:.2g}", fontsize=9)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="best", fontsize=8)
    if ax2 is not None:
        lags = np.arange(1, tr.acf.size + 1)
        what = "inter-arrival times" if cont else "per-slot counts"
        ax2.plot(lags, tr.acf, "o", ms=4, label="trace")
        ax2.plot(lags, md.acf, "-", lw=1.8, label=f"fitted {fit.kind}")
        ax2.set_xlabel("lag")
        ax2.set_ylabel(f"autocorrelation of the {what}")
        ax2.set_title(f"autocorrelations, max abs. error {fit.errors['acf_max']:.2g}", fontsize=9)
        ax2.grid(True, alpha=0.25)
        ax2.legend(loc="best", fontsize=8)
    return fig


def sensitivities(sens: Any, metric: str = "mean_queue", *, ax: Any = None, top: int | None = None,
                  title: str | None = None) -> Any:
    """A tornado chart of one metric's elasticities (theta / F dF/dtheta: the metric's relative
    change per relative change of each parameter) from :class:`aqmchain.Sensitivities`, largest
    magnitude on top (``top``: only the largest ones).  Parameters whose derivative is one-sided
    (P not smooth there) are hatched; parameters at 0 (no elasticity) are left out."""
    if metric not in sens.elasticities:
        raise ValueError(f"no sensitivities of '{metric}' (they cover: {', '.join(sens.elasticities)})")
    el = {p: e for p, e in sens.elasticities[metric].items() if math.isfinite(e)}
    order = sorted(el, key=lambda p: abs(el[p]), reverse=True)[:top]
    fig, ax = _axes(ax, (7.0, max(2.0, 0.32 * len(order) + 1.0)))
    y = np.arange(len(order))[::-1]
    values = [el[p] for p in order]
    bars = ax.barh(y, values, color=["tab:red" if v > 0 else "tab:blue" for v in values], height=0.7)
    for bar, p in zip(bars, order):
        if p in sens.notes and "bound" not in sens.notes[p]:
            bar.set_hatch("//")
    ax.set_yticks(y, order, fontsize=8)
    ax.axvline(0.0, color="0.3", lw=0.8)
    ax.set_xlabel(f"elasticity of {metric} (relative change per relative change of the parameter)")
    ax.set_title(title or f"{metric} = {sens.metrics[metric]:.4g}: elasticities", fontsize=9)
    ax.grid(True, axis="x", alpha=0.25)
    return fig


def passage(result: Any, *, ax: Any = None, survival: bool = False, name: str | None = None,
            label: str | None = None, simulated: Any = None) -> Any:
    """P(T <= t) (``survival``: P(T > t)) of a :class:`PassageResult` over time on log-log axes,
    with E[T] marked when finite.  ``simulated``: an object with ``times``, ``cdf`` and
    ``cdf_lo`` / ``cdf_hi`` (95 % band) drawn around it."""
    fig, ax = _axes(ax)
    t = np.asarray(result.times, float)
    y = np.asarray(result.survival if survival else result.cdf, float)
    keep = (t > 0) & (y > 0)
    what = "P(T > t)" if survival else "P(T <= t)"
    line, = ax.loglog(t[keep], y[keep], lw=1.6, label=label or f"{what}, T = first time {result.target}")
    if simulated is not None:
        st = np.asarray(simulated.times, float)
        lo, hi = np.asarray(simulated.cdf_lo, float), np.asarray(simulated.cdf_hi, float)
        if survival:
            lo, hi = 1.0 - hi, 1.0 - lo
        ax.fill_between(st, np.maximum(lo, 1e-300), np.maximum(hi, 1e-300), color=line.get_color(), alpha=0.25,
                        lw=0, label="simulation ± 95 % CI")
    if np.isfinite(result.mean) and result.mean > 0:
        ax.axvline(result.mean, color="0.4", lw=0.8, ls="--", label=f"E[T] = {result.mean:.4g}")
    unit = "time units" if result.continuous else "slots"
    ax.set_xlabel(f"t ({unit})")
    ax.set_ylabel(what)
    if name:
        ax.set_title(name)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig
