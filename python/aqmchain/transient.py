"""Transient analysis: the law of the queue over time, for a model or a scenario.

Slotted models are stepped exactly (p_t = p_0 P^t, method ``"step"``, with
steady-state detection); continuous-time models use a Krylov (Arnoldi / Pade)
exponential with error control (``"krylov"``), a shift-and-invert (rational)
Krylov exponential whose steps are not bounded by the generator's norm
(``"rational_krylov"``) or uniformisation (``"uniformization"``).  On a slotted
model the exponential methods compute p_0 exp(t (P - I)): the slotted chain
observed at the jumps of a rate-1 Poisson clock, not after t slots
(docs/transient.md).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from . import _checks, _core
from .stationary import NonConvergenceError, StationaryResult, _limit_bytes, _max_states, build_chain, refine_grid, stateful_observables

__all__ = ["solve_transient", "TransientResult", "TransientInfo", "time_grid", "TRANSIENT_METHODS", "TRANSIENT_METRICS"]

TRANSIENT_METHODS: tuple[str, ...] = tuple(_core.transient_methods())
"""The ``method`` names of :func:`solve_transient` (model file ``transient.method``), defined once in the
C++ core."""
TRANSIENT_METRICS: tuple[str, ...] = tuple(_core.transient_metric_names())
"""The scalar metrics reported at every output time (attributes of :class:`TransientResult`), defined
once in the C++ core."""
#: Kernel options (Krylov, rational Krylov, uniformisation) and stepping options with their defaults.
KERNEL_DEFAULTS: dict[str, Any] = _core.TransientOptions.defaults()
STEP_DEFAULTS: dict[str, Any] = _core.StepOptions.defaults()
#: Largest step budget of the Krylov and uniformization kernels (TransientOptions::validate).
KERNEL_MAX_STEPS = 10**9


def time_grid(kind: str, start: float, stop: float, num: int, *, integer: bool = False) -> np.ndarray:
    """Output times: ``kind`` "log" (geometric from start > 0) or "linear", ``num`` points
    from start to stop inclusive; ``integer=True`` rounds to whole slots and drops repeats."""
    if kind not in ("log", "linear"):
        raise _checks.option_error("kind", "one of log, linear", kind)
    start = _checks.real("start", start)
    stop = _checks.real("stop", stop)
    num = _checks.integer("num", num, 1, 10_000_000)
    if not (0 <= start <= stop):
        raise _checks.option_error("start", f"in [0, stop = {stop!r}]", start)
    if kind == "log":
        if not start > 0:
            raise _checks.option_error("start", "> 0 for a log grid", start)
        t = np.geomspace(start, stop, num)
    else:
        t = np.linspace(start, stop, num)
    if integer:
        t = np.unique(np.rint(t))
    return t


@dataclasses.dataclass(frozen=True)
class TransientInfo:
    """Accounts of one transient run."""

    method: str  #: the method that ran
    requested: str  #: what the caller asked for
    status: str  #: "converged" | "not_converged" | ... (names of aqmchain._core.Status)
    residual: float  #: sum of local error estimates (Krylov methods) or truncation bounds (uniformization); step: 0
    iterations: int  #: slots stepped / Krylov steps / Poisson chunks
    matvecs: int  #: products with P or G (rational_krylov: those inside its linear solves included)
    rejected_steps: int  #: Krylov step sizes rejected by the error test / rational Krylov bases dropped
    hump: float  #: max ||p(s)||_2 / ||p(0)||_2 (Krylov)
    roundoff: float  #: max |sum p - 1| of the propagated vector
    clipped_mass: float  #: largest negative mass clipped at an output
    steady_at: list[float]  #: per phase: time steady state was detected (step), or -1
    seconds: dict[str, float]
    tol: float
    note: str
    extra: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready)."""
        return dataclasses.asdict(self)


class TransientResult:
    """Metrics over time.  Every name in :data:`TRANSIENT_METRICS` is an attribute
    (a numpy array over :attr:`times`), and so is every observable (``mean_p_max`` and the
    like for a stateful AQM, the caller's); :attr:`metrics` holds them all by name;
    :attr:`queue_pmf` maps each requested pmf time to the queue pmf there."""

    def __init__(self, raw: Any, scenario: _core.Scenario, chain: _core.Chain, tol: float, build_seconds: dict,
                 observable_names: Sequence[str] = ()):
        self.times = np.asarray(raw.times, dtype=float)
        self.phase = np.asarray(raw.phase, dtype=np.int32)
        self.phase_boundaries = np.asarray(raw.phase_boundaries, dtype=float)
        self.phase_labels = [p.label for p in scenario.phases]
        self.scenario = scenario  #: the scenario that was solved (one phase for a single model)
        self.continuous = chain.time == "continuous"
        self.metrics = {name: np.asarray(v) for name, v in zip(TRANSIENT_METRICS, raw.values)}
        # observables (a stateful AQM's components, the caller's functions) after the fixed metrics
        self.metrics.update({name: np.asarray(v) for name, v in zip(observable_names, raw.observable_values)})
        self.queue_pmf = {float(t): np.asarray(p) for t, p in zip(raw.pmf_times, raw.queue_pmf) if len(p)}
        self.final_law = np.asarray(raw.final_law)
        self.states = chain.n
        self.nnz = chain.nnz
        self.avg_grid = np.asarray(chain.grid)  #: the avg grid the chain was built on
        seconds = dict(build_seconds)
        seconds.update({f"transient_{k}": v for k, v in raw.seconds.items()})
        self.info = TransientInfo(
            method=raw.method, requested=raw.requested, status=raw.status, residual=raw.residual,
            iterations=raw.iterations, matvecs=raw.operator_applications, rejected_steps=raw.rejected_steps,
            hump=raw.hump, roundoff=raw.roundoff, clipped_mass=raw.clipped_mass, steady_at=list(raw.steady_at),
            seconds=seconds, tol=tol, note=raw.note, extra=dict(raw.extra))

    def __getattr__(self, name: str) -> np.ndarray:
        metrics = self.__dict__.get("metrics", {})
        if name in metrics:
            return metrics[name]
        raise AttributeError(name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``times``, one list per metric, the phases and the solver accounts."""
        out: dict[str, Any] = {"times": self.times.tolist()}
        out.update({k: v.tolist() for k, v in self.metrics.items()})
        out["phase"] = self.phase.tolist()
        out["phase_boundaries"] = self.phase_boundaries.tolist()
        out["phase_labels"] = list(self.phase_labels)
        out["queue_pmf"] = {"times": list(self.queue_pmf), "pmf": [p.tolist() for p in self.queue_pmf.values()]}
        out["states"], out["nnz"] = self.states, self.nnz
        info = self.info.as_dict()
        out["solver"] = {"method": info["method"], "requested": info["requested"], "status": info["status"],
                         "residual": info["residual"], "iterations": info["iterations"],
                         "seconds": info["seconds"].get("transient_total", 0.0), "accounts": info}
        return out

    def plot(self, ax: Any = None, metrics: Sequence[str] = ("mean_queue", "mean_avg"), **kwargs: Any) -> Any:
        """Plot metrics over time with the phase boundaries marked; returns the figure
        (:func:`aqmchain.plots.transient`: units, title, min_th..max_th band).
        Creates a :class:`matplotlib.figure.Figure` (no backend is chosen) unless ``ax`` is given."""
        from .plots import transient

        return transient(self, ax=ax, metrics=metrics, **kwargs)

    def __repr__(self) -> str:
        return (f"TransientResult({len(self.times)} times, {len(self.phase_boundaries) - 1} phase(s), "
                f"method={self.info.method!r}, status={self.info.status!r})")


def _scenario_and_chains(model: Any, last: float, memory_limit_gb: float | None, max_states: int | None = None):
    if isinstance(model, StationaryResult):
        model = model.chain
    if isinstance(model, _core.Chain):
        dur = max(last, 1.0) if model.time == "discrete" else max(last, 1e-300)
        if model.time == "discrete":
            dur = float(math.ceil(dur))
        return _core.Scenario([_core.Phase(dur, model.model)]), [model]
    if isinstance(model, _core.Model):
        # an automatic grid is resolved from the model's stationary law (refine_grid)
        chain = build_chain(refine_grid(model, memory_limit_gb=memory_limit_gb)[0], memory_limit_gb,
                            max_states=max_states)
        return _scenario_and_chains(chain, last, memory_limit_gb)
    if isinstance(model, (list, tuple)):
        phases = [p if isinstance(p, _core.Phase) else _core.Phase(*p) for p in model]
        model = _core.Scenario(phases)
    if isinstance(model, _core.Scenario):
        # one automatic grid for all phases: the finest step any phase's stationary law asks for
        model = refine_grid(model, memory_limit_gb=memory_limit_gb)[0]
        return model, _core.build_scenario_chains(model, _limit_bytes(memory_limit_gb), _max_states(max_states))
    raise _checks.model_error("model", "a Model, Chain, StationaryResult, Scenario or list of phases", model)


def _initial_law(p0: Any, chain: _core.Chain) -> np.ndarray:
    if p0 is None or (isinstance(p0, str) and p0 == "empty"):
        return np.empty(0)
    if isinstance(p0, str):
        raise _checks.model_error("p0", "'empty', a state (dict of component values), a StationaryResult or a vector",
                                  p0)
    if isinstance(p0, StationaryResult):
        p0 = p0.pi
    if isinstance(p0, dict):
        names = [c.name for c in chain.space.components]
        unknown = sorted(set(p0) - set(names))
        if unknown:
            raise _checks.model_error(f"p0.{unknown[0]}", "a state component (" + ", ".join(names) + ")", p0[unknown[0]])
        values = [_checks.integer(f"p0.{n}", p0.get(n, 0), 0, 2**31 - 1) for n in names]
        return np.asarray(_core.point_law(chain, values))
    arr = np.asarray(p0, dtype=float)
    if arr.ndim != 1:
        raise _checks.model_error("p0", "a vector (one entry per state)", f"an array of shape {arr.shape}")
    return arr


def solve_transient(model: Any, times: Iterable[float], method: str = "auto", *, p0: Any = None,
                    tol: float | None = None, pmf_times: Iterable[float] = (), steady_tol: float | None = None,
                    krylov_dim: int | None = None, max_steps: int | None = None, max_applications: int | None = None,
                    shift_ratio: float | None = None, inner_max_iter: int | None = None,
                    project: bool = True, memory_limit_gb: float | None = None, max_states: int | None = None,
                    progress: Callable[[float, float], None] | None = None,
                    observables: dict[str, Any] | None = None) -> TransientResult:
    """Metrics over time of ``model`` (a Model, a built Chain, or a Scenario / list of
    ``(duration, model[, label])`` phases) at the sorted output ``times``.

    ``method``: one of :data:`TRANSIENT_METHODS` ("auto": step for slotted models; for
    continuous-time ones uniformization when it needs at most 1e4 products (about
    Lambda t), rational_krylov above; ``info.note`` says which and why).  ``p0``: initial law: ``None``/"empty" (empty
    system, avg 0, modulator stationary), a dict of component values (a point state),
    a :class:`StationaryResult`, or a probability vector over the chain's states.
    ``tol``: Krylov local error / rational Krylov L1 error per step /
    uniformisation truncation target (default :data:`KERNEL_DEFAULTS` ["tol"]).
    ``krylov_dim``: Krylov basis size (rational_krylov: its largest basis, >= 2).
    ``shift_ratio`` (rational_krylov): the shift gamma as a fraction of the step a
    basis aims at; ``inner_max_iter`` (rational_krylov): GMRES steps allowed to
    one linear solve (when one does not converge, :class:`NonConvergenceError`
    carries the partial result).  ``steady_tol`` (default
    :data:`STEP_DEFAULTS` ["steady_tol"]): stepping stops once
    ||p_t - p_{t/2}||_1 is below it (0 disables).  ``max_steps`` (slots for
    stepping; Krylov steps or Poisson chunks for the kernels, at most 1e9) /
    ``max_applications``: budgets; when one runs out :class:`NonConvergenceError` carries the partial result.
    ``memory_limit_gb`` and ``max_states`` (default 5e6 reachable states) are the
    builder's budgets (:func:`build_chain`).  ``progress(t, last)`` is called after each output time.  ``observables``: further
    metrics over time, ``{name: f}`` with f one value per state of the chain (e.g. built
    from ``chain.labels``); the result reports E[f] at each time under ``name``.  A
    stateful AQM's components are reported without asking: ``mean_count``,
    ``mean_p_max``, ``mean_max_th`` (docs/stateful-aqm.md).
    """
    if method not in TRANSIENT_METHODS:
        raise _checks.option_error("method", "one of " + ", ".join(TRANSIENT_METHODS), method)
    t = np.asarray(list(times) if not isinstance(times, np.ndarray) else times, dtype=float).ravel()
    if t.size == 0:
        raise _checks.model_error("times", "at least one time", "[]")
    if not np.all(np.isfinite(t)):
        raise _checks.model_error("times", "finite times", t[~np.isfinite(t)][0])
    if np.max(t) > _core.Scenario.max_duration:  # the horizon a scenario may have (defined in the core)
        raise _checks.model_error("times", f"<= {_core.Scenario.max_duration:g} (the longest horizon)",
                                  float(np.max(t)))
    opts = _core.TransientAnalysisOptions()
    opts.method = method
    kernel = _core.TransientOptions()
    step = _core.StepOptions()
    if tol is not None:
        kernel.tol = _checks.real("tol", tol)
    # types here (the C fields' ranges); the ranges of the options are the core's (validate() below)
    if krylov_dim is not None:
        kernel.krylov_dim = _checks.integer("krylov_dim", krylov_dim, -_checks.INT32_MAX - 1, _checks.INT32_MAX)
    if max_steps is not None:
        # slots for stepping (any int64); the kernels' steps are bounded by their own maximum
        step.max_steps = _checks.integer("max_steps", max_steps, 1, _checks.INT64_MAX)
        kernel.max_steps = min(step.max_steps, KERNEL_MAX_STEPS)
    if max_applications is not None:
        kernel.max_applications = _checks.integer("max_applications", max_applications, -_checks.INT64_MAX,
                                                  _checks.INT64_MAX)
    if shift_ratio is not None:
        kernel.shift_ratio = _checks.real("shift_ratio", shift_ratio)
    if inner_max_iter is not None:
        kernel.inner_max_iter = _checks.integer("inner_max_iter", inner_max_iter, -_checks.INT64_MAX,
                                                _checks.INT64_MAX)
    kernel.project = bool(project)
    kernel.validate()  # before any chain is built
    if steady_tol is not None:
        step.steady_tol = _checks.real("steady_tol", steady_tol)
    opts.kernel, opts.step = kernel, step
    scenario, chains = _scenario_and_chains(model, float(np.max(t)), memory_limit_gb, max_states)
    opts.pmf_times = [float(x) for x in pmf_times]
    if progress is not None:
        opts.progress = progress
    chain = chains[0]
    # the stateful AQM's components over time (mean_count, mean_p_max, mean_max_th), then the caller's
    funcs = {f"mean_{k}": v for k, v in stateful_observables(chain.model, chain).items()}
    for name, f in (observables or {}).items():
        if not isinstance(name, str) or not name.isidentifier() or name in TRANSIENT_METRICS or name in funcs:
            raise _checks.option_error("observables", "names that are identifiers and not metrics already reported",
                                       name)
        arr = np.asarray(f, dtype=float).ravel()
        if arr.shape != (chain.n,):
            raise _checks.option_error(f"observables['{name}']", f"one value per state ({chain.n})", arr.shape)
        funcs[name] = arr
    opts.observable_names = list(funcs)
    opts.observables = [np.ascontiguousarray(v, dtype=float) for v in funcs.values()]
    raw = _core.analyse_transient(chains, scenario, _initial_law(p0, chain), t.tolist(), opts)
    rep = chain.report
    build = {"build_explore": rep["seconds_explore"], "build_assemble": rep["seconds_assemble"],
             "build_classes": rep["seconds_classes"]}
    result = TransientResult(raw, scenario, chain, kernel.tol, build, opts.observable_names)
    if raw.status != "converged":
        raise NonConvergenceError(f"transient analysis stopped ({raw.method}, {raw.status}) after "
                                  f"{raw.outputs} of {len(t)} output times: {raw.note}", result)
    return result
