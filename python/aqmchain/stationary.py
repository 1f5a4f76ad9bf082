"""Stationary analysis: build the chain, solve pi P = pi, compute the metrics.

The numerical work happens in the C++ core; this module only arranges the
calls and presents the answer (numpy arrays, the output names of docs/model-file.md).
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any

import numpy as np

from . import _checks, _core
from ._classes import CLASS_METRICS, ClassMetrics, chain_flows
from ._core import OptionError

__all__ = ["solve_stationary", "StationaryResult", "SolverInfo", "NonConvergenceError", "CountTruncationError",
           "build_chain", "DirectSolver", "refine_grid", "ErrorEstimate", "ERROR_ESTIMATE_FACTORS", "WarmStart",
           "WARM_GRIDS"]

GIB = 1024.0**3
#: Scalar metric names, defined once in the bindings: (name, exists only with response times).
SCALAR_METRICS: tuple[tuple[str, bool], ...] = tuple(tuple(x) for x in _core.Metrics.scalar_names())
#: Solver option names and defaults, defined once in the C++ core.
OPTION_DEFAULTS: dict[str, Any] = _core.StationaryOptions.defaults()
METHODS: tuple[str, ...] = tuple(_core.stationary_methods())
#: The error estimate's grids: the grid used, with 4x and 2x its steps (every 4th / 2nd point).
ERROR_ESTIMATE_FACTORS: tuple[int, ...] = (4, 2, 1)
#: The chains of a model with traffic classes (``solve_stationary(..., classes=...)``):
#: "approx" (two classes, random-order approximation), "exact" (the FIFO's class sequence, small N),
#: "window" (the classes of the first waiting packets in order, random order behind them; "window:L" for L of them).
CLASS_CHAINS: tuple[str, ...] = tuple(_core.class_chains())
#: Scalar metrics that are diagnostics, not quantities with a discretisation error.
#: the queue models' state components by role (level, avg, s, modulator, count, pmax, maxth, phase,
#: class2, head, sequence): their names in the chain's descriptor, written once in the core
COMPONENTS: dict[str, str] = dict(_core.queue_components())
_NOT_EXTRAPOLATED = frozenset({"response_truncated", "littles_law_error"})


class NonConvergenceError(RuntimeError):
    """The solver stopped before ``||pi P - pi||_1 <= tol``.

    ``.result`` holds the partial :class:`StationaryResult` (its ``info`` says
    how far the method got)."""

    def __init__(self, message: str, result: "StationaryResult"):
        super().__init__(message)
        self.result = result


class CountTruncationError(NonConvergenceError):
    """The drop-spacing count's stationary mass at its cap is above ``aqm.count_tail``
    (docs/stateful-aqm.md): the cap could not grow further (``aqm.count_max``), or the chain
    given was built with a cap too small.  ``.result`` holds the result on the last cap
    (``result.count_tail_mass``, ``result.count_cap``); ``.param`` names the key to change."""

    def __init__(self, message: str, result: "StationaryResult", param: str = "aqm.count_max"):
        super().__init__(message, result)
        self.param = param


@dataclasses.dataclass(frozen=True)
class SolverInfo:
    """Accounts of one stationary solve."""

    method: str  #: the method that produced pi
    requested: str  #: what the caller asked for
    fallback: bool  #: True when ``method`` is an automatic fallback
    status: str  #: "converged" | "not_converged" | "stalled" | "numerical_issue" (names of aqmchain._core.Status)
    residual: float  #: ||pi P - pi||_1
    mass_error: float  #: |sum(pi) - 1|
    clipped_mass: float  #: negative round-off removed before normalising
    iterations: int
    matvecs: int
    seconds: dict[str, float]  #: phase -> wall seconds (build phases included)
    tol: float
    note: str
    extra: dict[str, float]
    #: the methods run, in order: ``{"method", "seconds", "status", "iterations", "why"}`` (``why`` empty when
    #: it converged)
    methods_tried: list = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready)."""
        return dataclasses.asdict(self)


def _limit_bytes(memory_limit_gb: float | None) -> float:
    return 8.0 * GIB if memory_limit_gb is None else _checks.memory_limit_gb("memory_limit_gb", memory_limit_gb) * GIB


def _class_chain(classes: str) -> str:
    if classes not in CLASS_CHAINS and not (isinstance(classes, str) and re.fullmatch(r"window:[0-9]{1,4}", classes)):
        raise _checks.option_error("classes", "one of " + ", ".join(CLASS_CHAINS) + " or window:L", classes)
    return classes


def _max_states(max_states: int | None, name: str = "max_states") -> int:
    if max_states is None:
        return int(OPTION_DEFAULTS[name])
    return _checks.solver_options({name: max_states})[name]  # the core's table of options


def build_chain(model: _core.Model, memory_limit_gb: float | None = None, classes: str = "approx",
                max_states: int | None = None, like: _core.Chain | None = None) -> _core.Chain:
    """Build the chain of ``model`` (reachable states from the empty system); an automatic
    grid is resolved first (:func:`refine_grid`, a pre-solve on a coarse grid).  A model
    with traffic classes gets the chain ``classes`` names (:data:`CLASS_CHAINS`).  Raises
    :class:`StateSpaceTooLarge` (naming the budget) above ``memory_limit_gb`` or, as soon as
    the exploration has seen more, above ``max_states`` reachable states (default
    ``OPTION_DEFAULTS["max_states"]``).  ``like``: a chain believed to have the same states
    (a warm re-solve): the chain is assembled on its states without exploring and takes its
    class analysis when the matrix has its support (``chain.report["states_reused"]``), else
    it is built from scratch; the chain is the same either way."""
    _class_chain(classes)
    max_states = _max_states(max_states)
    if model.grid.refine == "auto":
        model = refine_grid(model, memory_limit_gb=memory_limit_gb)[0]
    chain = _core.build_chain(model, _limit_bytes(memory_limit_gb), classes, max_states, like)
    for msg in chain.report["warnings"]:
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
    return chain


def _quantile(pmf: np.ndarray, p: float) -> int:
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile level p must be in (0, 1), got {p!r}")
    cdf = np.cumsum(pmf)
    return int(min(np.searchsorted(cdf, p * cdf[-1], side="left"), len(pmf) - 1))


def _tail(pmf: np.ndarray) -> np.ndarray:
    """P(X >= k) for k = 0..len-1, summed from the top (accurate far below 1e-15)."""
    return np.cumsum(pmf[::-1])[::-1]


def stateful_observables(model: _core.Model, chain: _core.Chain) -> dict[str, np.ndarray]:
    """The stateful AQM's quantities as functions of the state (one value per state of
    ``chain``): ``count`` (drop spacing), ``p_max`` (adaptive RED), ``max_th`` (dynamic
    max_th), for the components the chain has; empty for a plain model."""
    labels = chain.labels
    out: dict[str, np.ndarray] = {}
    count, pmax, maxth = COMPONENTS["count"], COMPONENTS["pmax"], COMPONENTS["maxth"]
    if count in labels:
        out["count"] = np.asarray(labels[count], dtype=float) - 1.0
    if pmax in labels:
        out["p_max"] = np.asarray(_core.stateful_info(model)["p_max_values"])[np.asarray(labels[pmax])]
    if maxth in labels:
        hi = model.aqm.drop.hi
        out["max_th"] = np.array([hi, hi * (1 + model.aqm.max_th_growth)])[np.asarray(labels[maxth])]
    return out


class StationaryResult:
    """Stationary solution of a model with its metrics under the output names of docs/model-file.md.

    Attributes: ``states``, ``nnz``, ``arrival_rate``, ``mean_queue``, ``var_queue``,
    ``queue_pmf`` (waiting packets q), ``mean_system``, ``var_system``, ``system_pmf`` (n),
    ``loss``, ``loss_aqm``, ``loss_overflow``, ``mark_prob``, ``throughput``,
    ``mean_response``, ``var_response``, ``response_pmf`` (R = D - A in slots of packets
    that are served: closed form under tail, tagged-packet chain under front/random),
    ``pushed_out_prob`` (admitted packets later discarded), ``avg_pmf`` on ``avg_grid``,
    ``mean_avg``, ``pi`` and ``info`` (:class:`SolverInfo`).  Response fields are ``None``
    when ``response="none"`` was asked for.
    """

    def __init__(self, model: _core.Model, chain: _core.Chain, raw: _core.StationaryResult,
                 metrics: _core.Metrics, tol: float, build_seconds: dict[str, float]):
        self.model, self.chain = model, chain
        self.pi = raw.pi
        seconds = dict(build_seconds)
        seconds.update({f"solve_{k}" if k != "total" else "solve": v for k, v in raw.seconds.items()})
        self.info = SolverInfo(method=raw.method, requested=raw.requested, fallback=raw.fallback,
                               status=raw.status, residual=raw.residual, mass_error=raw.mass_error,
                               clipped_mass=raw.clipped_mass, iterations=raw.iterations, matvecs=raw.matvecs,
                               seconds=seconds, tol=tol, note=raw.note, extra=raw.extra,
                               methods_tried=list(raw.methods_tried))
        self.build = chain.report
        self.states, self.nnz = chain.n, chain.nnz
        for name, response in SCALAR_METRICS:
            setattr(self, name, getattr(metrics, name) if metrics.response_available or not response else None)
        self.system_pmf = metrics.system_pmf
        self.queue_pmf = metrics.queue_pmf
        self.avg_pmf = metrics.avg_pmf
        self.avg_grid = np.asarray(chain.grid)
        self._stateful_marginals(model, chain, np.asarray(self.pi))
        self.response_available = metrics.response_available
        self.response_note = metrics.response_note
        #: name -> :class:`ClassMetrics` (a model without classes: one class, "all")
        self.classes = {k.name: _class_result(k) for k in metrics.classes}
        #: which chain produced the per-class numbers: "single" (no class state), "approx", "exact", "window"
        #: or "window:L" (as ``classes`` asked)
        labels = chain.labels
        self.class_chain = ("exact" if COMPONENTS["sequence"] in labels else "window" if COMPONENTS["window"] in labels else
                            "approx" if COMPONENTS["class2"] in labels else "single")
        #: per flow (``class``, ``flow``, ``throughput``, ``loss``) and Jain's index over the flows'
        #: throughputs, as the simulator's ([] and None without classes; None with ``flows_note``
        #: where the chain cannot say)
        has_classes = len(model.classes) or self.class_chain != "single"
        self.flows, self.fairness, self.flows_note = chain_flows(model, self.classes) if has_classes else ([], None, "")
        self.response_method = metrics.response_method or None
        self.time_unit = "slots" if chain.time == "discrete" else "time units"
        self.grid: dict[str, Any] | None = None  #: what the automatic grid did (refine_grid's report)
        #: what a warm start reused (``solve_stationary(..., warm=previous)``; None for a cold solve):
        #: ``x0`` (True when a starting vector was made from the previous solution), ``grid``
        #: ("reused": the previous resolved grid, no pre-solve; "refined": a pre-solve of its own;
        #: "explicit": the model's grid is not automatic), ``previous_states``, ``matched_states``
        #: (states of this chain found among the previous one's labels), ``matched_mass`` (the
        #: previous solution's mass on them), ``previous_iterations``; what the builder and the
        #: solver reused: ``states`` ("reused": the chain was assembled on the previous chain's
        #: states, without exploring or a class analysis, its support being the same; "explored":
        #: built from scratch), ``reuse`` ("recycled", or "none (...)" / "refused (the states
        #: changed)" with the reason) and ``recycled_vectors`` (directions of the previous Krylov
        #: space recycled: solver option ``krylov_recycle``)
        self.warm: dict[str, Any] | None = None
        self._input_model = None  # the model as given to solve_stationary (a warm start's grid reuse)
        self._warm_state = None  # the solver's warm state (_core.WarmState: recycled directions)
        self.error_estimate: ErrorEstimate | None = None
        if metrics.response_available:
            # continuous time: R has a density, not a pmf (mean and variance only)
            self.response_pmf = metrics.response_pmf if chain.time == "discrete" else None
            self.response_steps, self.response_states = metrics.response_steps, metrics.response_states
        else:
            self.response_pmf = None
            self.response_steps = self.response_states = None

    def _stateful_marginals(self, model, chain, pi) -> None:
        """count_pmf (count -1..cap), p_max_pmf over p_max_values, their means; None when absent.
        A truncated count (cap below the exact cap): ``count_tail_mass`` is the mass at the cap,
        which stands for count >= cap (docs/stateful-aqm.md); 0 on the exact cap."""
        self.count_pmf = self.mean_count = self.p_max_pmf = self.p_max_values = self.mean_p_max = None
        self.max_th_values = self.max_th_pmf = self.mean_max_th = None
        self.count_cap = self.count_cap_exact = self.count_tail_mass = self.count_truncated = None
        #: the caps the stationary solve tried: {"cap" (the largest), "points_truncated" (avg points whose cap is
        #: below the exact one), "states", "tail_mass", "iterations", "tol", "method" (the one that solved the
        #: round), "start" (what the round started from: "pre-solve", "warm", "x0", "previous caps" or "none"),
        #: "multilevel_skipped" (only on rounds where auto did not try multilevel because it had
        #: failed on an earlier round: why it failed), "seconds"}
        self.count_caps: list[dict[str, Any]] = []
        labels = chain.labels
        count, pmax, maxth = COMPONENTS["count"], COMPONENTS["pmax"], COMPONENTS["maxth"]
        if count in labels:
            info = _core.stateful_info(model)
            self.count_pmf = np.bincount(np.asarray(labels[count]), weights=pi,
                                         minlength=info["count_cap"] + 2)
            self.mean_count = float(np.dot(np.arange(-1, len(self.count_pmf) - 1), self.count_pmf))
            self.count_cap, self.count_cap_exact = int(info["count_cap"]), int(info["count_cap_exact"])
            self.count_truncated = bool(info["count_truncated"])
            self.count_tail_mass = float(_cap_masses(chain, pi).sum()) if self.count_truncated else 0.0
        if pmax in labels:
            info = _core.stateful_info(model)
            self.p_max_values = np.asarray(info["p_max_values"])
            self.p_max_pmf = np.bincount(np.asarray(labels[pmax]), weights=pi,
                                         minlength=len(self.p_max_values))
            self.mean_p_max = float(np.dot(self.p_max_values, self.p_max_pmf))
        if maxth in labels:
            hi = model.aqm.drop.hi
            self.max_th_values = np.array([hi, hi * (1 + model.aqm.max_th_growth)])
            self.max_th_pmf = np.bincount(np.asarray(labels[maxth]), weights=pi, minlength=2)
            self.mean_max_th = float(np.dot(self.max_th_values, self.max_th_pmf))

    def sensitivities(self, metrics=None, params=None, **options: Any):
        """d(metric)/d(parameter) for the scalar metrics (or ``metrics``) and the model's
        continuous parameters by their model-file keys (or ``params``), by one adjoint solve
        per metric: an :class:`aqmchain.Sensitivities` (values, elasticities,
        notes); docs/sensitivities.md."""
        from .sensitivity import sensitivities

        return sensitivities(self, metrics=metrics, params=params, **options)

    def component_pmf(self, name: str) -> np.ndarray:
        """Stationary law of one state component (by its index values), e.g. ``"count"``."""
        labels = self._need_chain().labels
        if name not in labels:
            raise KeyError(f"no state component '{name}' (the chain has: {', '.join(labels)})")
        return np.bincount(np.asarray(labels[name]), weights=np.asarray(self.pi))

    # -- distributions -------------------------------------------------------
    def queue_quantile(self, p: float) -> int:
        """Smallest k with P(q <= k) >= p."""
        return _quantile(self.queue_pmf, p)

    def system_quantile(self, p: float) -> int:
        """Smallest k with P(n <= k) >= p, n the packets in the system (the one in service counted)."""
        return _quantile(self.system_pmf, p)

    def response_quantile(self, p: float) -> int:
        """Smallest r with P(R <= r | served) >= p."""
        if self.response_pmf is None:
            raise ValueError(f"no response-time distribution: {self.response_note}")
        return _quantile(self.response_pmf, p)

    def queue_tail(self) -> np.ndarray:
        """P(q >= k), k = 0..N-1."""
        return _tail(self.queue_pmf)

    def system_tail(self) -> np.ndarray:
        """P(n >= k), k = 0..N, n the packets in the system (the one in service counted)."""
        return _tail(self.system_pmf)

    # -- the chain -----------------------------------------------------------
    def transition_matrix(self):
        """P (or G) as ``scipy.sparse.csr_matrix``, rows = from-state."""
        return transition_matrix(self._need_chain())

    def state_labels(self) -> dict[str, np.ndarray]:
        """One array per state component, plus ``queue`` and ``avg`` (see :func:`state_labels`)."""
        return state_labels(self._need_chain())

    # -- output ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON object of docs/model-file.md (plus response pmf, avg pmf and the full solver accounts)."""
        f = lambda x: None if x is None else float(x)  # noqa: E731
        lst = lambda a: None if a is None else [float(v) for v in a]  # noqa: E731
        return {
            "states": int(self.states), "nnz": int(self.nnz),
            **{name: f(getattr(self, name)) for name, _ in SCALAR_METRICS},
            "queue_pmf": lst(self.queue_pmf), "system_pmf": lst(self.system_pmf),
            "response_pmf": lst(self.response_pmf), "response_note": self.response_note or None,
            "response_method": self.response_method,
            "avg_grid": lst(self.avg_grid), "avg_pmf": lst(self.avg_pmf),
            **({"count_pmf": lst(self.count_pmf), "mean_count": self.mean_count, "count_cap": self.count_cap,
                "count_cap_exact": self.count_cap_exact, "count_truncated": self.count_truncated,
                "count_tail_mass": self.count_tail_mass,
                "count_caps": self.count_caps} if self.count_pmf is not None else {}),
            **({"p_max_values": lst(self.p_max_values), "p_max_pmf": lst(self.p_max_pmf),
                "mean_p_max": self.mean_p_max} if self.p_max_pmf is not None else {}),
            **({"max_th_values": lst(self.max_th_values), "max_th_pmf": lst(self.max_th_pmf),
                "mean_max_th": self.mean_max_th} if self.max_th_pmf is not None else {}),
            # as simulate: per-class output for models with [[class]] tables, modified RED or the
            # flow comparison (a classless model's one class repeats the top level)
            **({"classes": {name: k.to_dict() for name, k in self.classes.items()}, "class_chain": self.class_chain,
                "flows": self.flows, "fairness": self.fairness, "flows_note": self.flows_note or None}
               if len(self.model.classes) or self.class_chain != "single" else {}),
            **({"grid": self.grid} if self.grid is not None else {}),
            **(self.error_estimate.to_json() if self.error_estimate is not None else {}),
            "solver": {
                "method": self.info.method, "requested": self.info.requested, "fallback": self.info.fallback,
                "status": self.info.status, "residual": self.info.residual, "mass_error": self.info.mass_error,
                "iterations": int(self.info.iterations), "matvecs": int(self.info.matvecs),
                "operator_applications": int(self.info.matvecs),
                "seconds": self.info.seconds, "tol": self.info.tol, "note": self.info.note,
                "methods_tried": self.info.methods_tried, "warm": self.warm,
            },
        }

    def summary(self) -> str:
        """A text report: the chain's size, the metrics and the solver's accounts."""
        i = self.info
        fc = getattr(self, "loss_flow_compare", None)
        # the stateful AQM's components (docs/stateful-aqm.md)
        stateful = [(label, f"{value:.6g}") for label, value in (("mean count", self.mean_count),
                    ("mean p_max", self.mean_p_max), ("mean cur_max_th", self.mean_max_th)) if value is not None]
        if self.count_cap is not None:
            stateful.append(("count cap / tail mass", f"{self.count_cap} / {self.count_tail_mass:.3g}" + (
                " (exact cap)" if not self.count_truncated else
                f" (truncated; exact cap {self.count_cap_exact})")))
        rows = [
            ("states / nnz", f"{self.states} / {self.nnz}"),
            ("arrival rate", f"{self.arrival_rate:.6g}"),
            ("throughput", f"{self.throughput:.6g}"),
            ("mean queue (waiting)", f"{self.mean_queue:.6g}"),
            ("var queue", f"{self.var_queue:.6g}"),
            ("mean system", f"{self.mean_system:.6g}"),
            ("loss (aqm + overflow + flow comparison)", f"{self.loss:.6g} ({self.loss_aqm:.6g} + "
             f"{self.loss_overflow:.6g} + {fc:.6g})") if fc else
            ("loss (aqm + overflow)", f"{self.loss:.6g} ({self.loss_aqm:.6g} + {self.loss_overflow:.6g})"),
            ("ECN marks", f"{self.mark_prob:.6g}"),
            *stateful,
            ("mean response R", "n/a: " + self.response_note if self.mean_response is None
             else f"{self.mean_response:.6g} {self.time_unit} ({self.response_method})"),
            ("pushed out", "n/a" if self.pushed_out_prob is None else f"{self.pushed_out_prob:.6g}"),
            ("var response R", "n/a" if self.var_response is None else f"{self.var_response:.6g}"),
            ("solver", f"{i.method}{' (fallback)' if i.fallback else ''}, {i.status}, residual {i.residual:.2e}, "
                       f"{i.iterations} iterations, {i.matvecs} matvecs"),
            ("time", ", ".join(f"{k} {v:.3g}s" for k, v in i.seconds.items())),
        ]
        if self.warm:
            w = self.warm
            rows.insert(-1, ("warm start", (f"from {w['previous_states']} states ({w['matched_states']} matched, "
                                            f"{w['matched_mass']:.6g} of the mass)" if w.get("x0") else
                                            "no state matched: cold") + f"; grid {w['grid']}"
                                           + (f"; reuse {w['reuse']}" if "reuse" in w else "")
                                           + (f" ({w['recycled_vectors']} directions)" if "recycled_vectors" in w
                                              else "")))
        if len(i.methods_tried) > 1:
            rows.insert(-1, ("methods tried", ", ".join(
                f"{a['method']} ({'converged' if not a['why'] else 'skipped' if a['why'].startswith('skipped') else 'failed'}"
                f", {a['seconds']:.3g}s)"
                for a in i.methods_tried)))
        if len(self.classes) > 1 or self.class_chain != "single":
            for name, k in self.classes.items():
                resp = "n/a" if not k.response_available else f"{k.mean_response:.6g}"
                rows.append((f"class {name} ({self.class_chain})",
                             f"arrivals {k.arrival_rate:.6g}, loss {k.loss:.6g}, marks {k.mark_prob:.6g}, "
                             f"throughput share {k.throughput_share:.6g}, mean in system {k.mean_queue:.6g}, "
                             f"mean response {resp}"))
        w = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)

    def __repr__(self) -> str:
        resp = "" if self.mean_response is None else f" mean_response={self.mean_response:.6g}"
        return (f"<StationaryResult states={self.states} mean_queue={self.mean_queue:.6g} loss={self.loss:.6g}{resp} "
                f"method={self.info.method} residual={self.info.residual:.2e}>")

    def _repr_html_(self) -> str:
        from ._objects import html_table

        rows = [tuple(line.split("  ", 1)) for line in self.summary().splitlines()]
        return html_table("aqmchain stationary result", [(k.strip(), v.strip()) for k, v in rows])

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the chain (a result sent back from a Dask worker): metrics, pmfs,
        pi and the accounts travel, ``transition_matrix()`` needs the chain (rebuild it with
        :func:`build_chain`)."""
        state = dict(self.__dict__)
        state["chain"] = None
        state["_warm_state"] = None  # the solver's, not picklable (a warm start needs the chain anyway)
        state["pi"] = np.asarray(self.pi)
        if self.error_estimate is not None:
            state["error_estimate"] = None
            state["_error_estimate_json"] = self.error_estimate.to_json()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __copy__(self) -> "StationaryResult":
        """A shallow copy that keeps the chain (pickling alone leaves it behind)."""
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__)
        return out

    def _need_chain(self) -> _core.Chain:
        if self.chain is None:
            raise ValueError("this result was pickled without its chain (e.g. it came back from a Dask worker); "
                             "rebuild it with aqmchain.build_chain(result.model)")
        return self.chain


def _class_result(k) -> ClassMetrics:
    """The Python object of one class's metrics (response fields NaN when not computed)."""
    values = {}
    for name in CLASS_METRICS:
        v = getattr(k, name)
        values[name] = v if k.response_available or name not in ("mean_response", "var_response") else float("nan")
    out = ClassMetrics(k.name, values, k.response_pmf if k.response_available else [])
    out.response_available, out.response_note = k.response_available, k.response_note
    return out


def transition_matrix(chain: _core.Chain):
    """P as ``scipy.sparse.csr_matrix`` (rows = from-state, pi P = pi)."""
    import scipy.sparse as sp

    return sp.csr_matrix((np.array(chain.data), np.array(chain.indices), np.array(chain.indptr)),
                         shape=(chain.n, chain.n))


def state_labels(chain: _core.Chain) -> dict[str, np.ndarray]:
    """State labels as arrays, one per state component (``level`` = n, ``avg_index``,
    ``modulator``, and whatever components a model adds, e.g. REDwM's ``s_index``), plus
    the derived ``queue`` (q = max(n - 1, 0)), ``avg`` (the grid value; REDwM's A) and, for
    REDwM, ``s`` (the value of its second variable on its grid)."""
    labels = {name: np.asarray(values) for name, values in chain.labels.items()}
    labels["queue"] = np.maximum(labels[COMPONENTS["level"]] - 1, 0)
    labels["avg"] = np.asarray(chain.grid)[np.asarray(chain.grid_index)]
    if COMPONENTS["s"] in labels:
        labels["s"] = np.asarray(_core.redwm_s_grid(chain.model))[labels[COMPONENTS["s"]]]
    return labels


def refine_grid(model: _core.Model | _core.Scenario | list, *, memory_limit_gb: float | None = None,
                **options: Any) -> tuple[Any, dict[str, Any]]:
    """Resolve an automatic grid (``GridSpec(refine="auto")``): pre-solve on a coarse uniform
    grid, find where avg's mass sits, refine there where p(avg) jumps or is steep.

    ``model`` is a model, a scenario (one grid for all phases) or a list of models.
    Returns ``(refined, report)``: the model(s) on an explicit grid (the input unchanged
    when its grid is not automatic) and a dict (``refined``, ``points``, ``min_step``,
    ``refined_ranges`` [lo, hi, smallest step], ``mass_ranges``, ``jumps``,
    ``estimated_states``, ``budget_limited``, ``presolve_states``, ``presolve_seconds``,
    ``note``).  Solver ``options`` are used by the pre-solve (its tol relaxed to 1e-8).
    """
    if isinstance(model, _core.Scenario):
        models = [p.model for p in model.phases]
    elif isinstance(model, (list, tuple)):
        models = list(model)
    else:
        models = [model]
    if not models or not all(isinstance(m, _core.Model) for m in models):
        raise _checks.model_error("model", "an aqmchain.Model, a Scenario or a list of models", model)
    return _refine_grid(model, models, memory_limit_gb, options)[:2]


def _refine_grid(model, models: list, memory_limit_gb, options: dict,
                 keep_presolve: bool = False) -> tuple[Any, dict[str, Any], "WarmStart | None"]:
    """refine_grid, and with keep_presolve the pre-solve's answer as a WarmStart (one model
    whose grid was refined; else None)."""
    opts = _options(dict(options))
    grid, report, presolve = _core.refine_grid(models, opts, _limit_bytes(memory_limit_gb), keep_presolve)
    report = dict(report, refine=models[0].grid.refine)
    if not report["refined"]:
        return model, report, None
    refined = [m.with_grid(grid) for m in models]
    if isinstance(model, _core.Scenario):
        return (_core.Scenario([_core.Phase(p.duration, m, p.label) for p, m in zip(model.phases, refined)]),
                report, None)
    if isinstance(model, (list, tuple)):
        return refined, report, None
    return refined[0], report, None if presolve is None else WarmStart.of_presolve(presolve, refined[0])


class ErrorEstimate:
    """Discretisation error of every scalar metric (and of every traffic class's, named
    ``"<class>.<metric>"``), from the grid used and the grids with 2x and 4x its steps:
    ``metrics[name]`` is an :class:`aqmchain._core.Extrapolation`
    (``value`` on the grid used, ``extrapolated`` to step 0, ``error`` the half-width of
    the interval around ``extrapolated`` meant to hold the limit, observed ``order``,
    ``method``); ``grids`` lists each grid's step factor, points, states and seconds."""

    _HEADLINE = ("mean_queue", "var_queue", "loss", "mean_response", "var_response")  # shown by repr

    def __init__(self, metrics: dict[str, Any], grids: list[dict[str, Any]]):
        self.metrics, self.grids = metrics, grids

    def __getitem__(self, name: str):
        return self.metrics[name]

    def __repr__(self) -> str:
        factors = ", ".join(f"{g['step_factor']:g}" for g in self.grids)
        states = " / ".join(f"{g['states']:,}" for g in self.grids)
        names = [n for n in self._HEADLINE if n in self.metrics] or list(self.metrics)[:len(self._HEADLINE)]
        shown = [f"{n} {self.metrics[n].extrapolated:.6g} +- {self.metrics[n].error:.2g}" for n in names]
        more = len(self.metrics) - len(names)
        return (f"<ErrorEstimate of {len(self.metrics)} metrics on grids with step factors {factors} "
                f"({states} states): {'; '.join(shown)}" + (f"; {more} more in .table()>" if more else ">"))

    def interval(self, name: str) -> tuple[float, float]:
        """The interval ``extrapolated -+ error`` meant to hold the metric's limit at step 0."""
        e = self.metrics[name]
        return e.extrapolated - e.error, e.extrapolated + e.error

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: ``error_estimate`` (per metric: value, extrapolated, error, order, method)
        and ``error_estimate_grids``."""
        return {"error_estimate": {name: {"value": e.value, "extrapolated": e.extrapolated, "error": e.error,
                                          "order": e.order, "method": e.method} for name, e in self.metrics.items()},
                "error_estimate_grids": self.grids}

    def table(self) -> str:
        """A text table, one row per metric: value, extrapolated value, error, order, method."""
        rows = [f"{'metric':<16} {'value':>14} {'extrapolated':>14} {'error':>10} {'order':>6}  method"]
        for name, e in self.metrics.items():
            rows.append(f"{name:<16} {e.value:>14.7g} {e.extrapolated:>14.7g} {e.error:>10.2e} {e.order:>6.2f}  {e.method}")
        return "\n".join(rows)


def _build_solve_seconds(r: StationaryResult) -> float:
    """Build and solve wall seconds (the phases' total, not their sum with the sub-phases)."""
    sec = r.info.seconds
    return float(sum(v for k, v in sec.items() if k.startswith("build_")) + sec.get("solve", 0.0))


def _error_estimate(result: StationaryResult, options: dict, memory_limit_gb, response, response_tail,
                    classes: str = "approx") -> ErrorEstimate:
    model = result.chain.model
    if model.grid.mapping != "split":
        raise OptionError(f"option 'error_estimate' needs grid.mapping = 'split' (coarsened grids of the same "
                          f"family), got mapping '{model.grid.mapping}'")
    points = [float(x) for x in result.avg_grid]
    keep = model.resolved_drop().breakpoints(model.buffer)
    coarse_options = {k: v for k, v in options.items() if k != "x0"}
    runs, grids = [], []
    for factor in ERROR_ESTIMATE_FACTORS[:-1]:
        pts = _core.coarsen_points(points, factor, keep)
        coarse = model.with_grid(_core.GridSpec(points=pts))
        if len(model.aqm.count_trunc_at):  # the count's caps at the points kept (their p_b are the same)
            caps = np.asarray(model.aqm.count_trunc_at)[np.searchsorted(points, pts)]
            coarse = coarse.with_count_caps(caps.tolist())
        r = solve_stationary(coarse, memory_limit_gb=memory_limit_gb,
                             response=response, response_tail=response_tail, classes=classes, **coarse_options)
        runs.append(r)
        grids.append({"step_factor": factor, "points": len(pts), "states": int(r.states), "seconds": _build_solve_seconds(r)})
    runs.append(result)
    grids.append({"step_factor": 1, "points": len(points), "states": int(result.states),
                  "seconds": _build_solve_seconds(result)})
    h = [float(f) for f in ERROR_ESTIMATE_FACTORS]
    metrics = {}
    for name, _ in SCALAR_METRICS:
        vals = [getattr(r, name) for r in runs]
        if name in _NOT_EXTRAPOLATED or any(v is None or not np.isfinite(v) for v in vals):
            continue
        metrics[name] = _core.extrapolate(h, [float(v) for v in vals])
    for cls in result.classes if len(model.classes) else ():  # per traffic class: "<class>.<metric>"
        for key in CLASS_METRICS:
            vals = [getattr(r.classes[cls], key) if r.classes and cls in r.classes else None for r in runs]
            if any(v is None or not np.isfinite(v) for v in vals):
                continue
            metrics[f"{cls}.{key}"] = _core.extrapolate(h, [float(v) for v in vals])
    return ErrorEstimate(metrics, grids)


def solve_stationary(model: _core.Model | _core.Chain, *, memory_limit_gb: float | None = None,
                     response: str = "auto", response_tail: float = 1e-12, error_estimate: bool = False,
                     classes: str = "approx", warm: "StationaryResult | WarmStart | None" = None,
                     warm_grid: str = "auto", **options: Any) -> StationaryResult:
    """Stationary distribution and metrics of ``model`` (or of an already built chain).

    Options (all keyword): ``method`` (one of :data:`METHODS`), ``tol`` (target for ||pi P - pi||_1, default 1e-12),
    ``max_iter``, ``ncv``, ``refine_steps``, ``check_every``, ``x0``, ``ordering``,
    ``strategy``, ``coarse_size``, ``smoothing_sweeps``, ``cycle_gamma``, ``recombination_depth``
    (multilevel's last cycle outputs recombined to start the next cycle, default 3; 0 or 1: none),
    ``direct_max_gb`` (LU memory budget, default 8), ``auto_direct_max_flops``
    (auto factorises only below this UMFPACK work estimate, default 2e12),
    ``auto_krylov_min_states`` (auto tries krylov before direct on plain chains from this
    size, default 20000), ``auto_stalled_krylov_steps`` (auto's GMRES steps on a chain whose
    multilevel coarsening stalled at a level it can sweep, before multilevel sweeping it runs;
    default 100, 0: no limit), ``auto_multilevel_cycles`` (auto's first multilevel attempt hands
    over to krylov once its rate projects more cycles than this; default 60, 0: never),
    ``krylov_basis``, ``krylov_recycle`` (directions of krylov's Krylov space
    kept for a warm re-solve to recycle, default 0), the budgets ``max_states`` (reachable states of
    the chain, default 5e6) and ``tagged_max_states`` (states of the tagged-packet chain of
    front / random drop, default 2e7); the full list and defaults are :data:`OPTION_DEFAULTS`;
    ``memory_limit_gb`` for the builder (and the tagged-packet chain).  ``result.info.methods_tried``
    lists what ran, in order (auto: by the chain's size and structure, docs/solvers.md).

    Response times: ``response="auto"`` (closed form under tail, tagged-packet chain
    under front/random, stopped when the mass still in the system is below
    ``response_tail``), ``"tagged"`` (tagged chain for every policy), ``"none"``.

    Traffic classes (docs/classes.md): ``result.classes[name]`` holds each class's metrics.
    A model with two classes, modified RED or the flow comparison is solved on the
    two-class chain with the random-order approximation (``classes="approx"``, the state
    adds the class-2 count and the class of the packet in service) or on the exact chain of
    the FIFO's sequence of packet types (``classes="exact"``, small buffers only: at most
    65536 sequences), or on the window chain (``classes="window"``, or ``"window:L"``: the
    classes of the first L waiting packets carried in order, the random-order approximation
    behind them; exact for L >= buffer - 1; no modified RED).  Under modified RED or the flow comparison the per-class response
    times come from a tagged-packet chain on the two-class chain (its state and the tagged
    packet's position; every policy, tail included; not on the exact chain), and
    ``result.flows`` / ``result.fairness`` give per-flow throughput, loss and Jain's index.

    Grids: a model with ``GridSpec(refine="auto")`` is first refined (:func:`refine_grid`);
    ``result.grid`` reports what the grid became.  ``error_estimate=True`` also solves on
    the grids with 2x and 4x the steps and extrapolates every scalar metric to step 0
    (``result.error_estimate``, an :class:`ErrorEstimate`).

    Warm starts (docs/solvers.md): ``warm=previous`` (a :class:`StationaryResult` of the same
    kind of model, e.g. before a small parameter change) starts the iterative methods from
    the previous solution carried to this chain's states by their labels (states not in the
    previous chain start at 0; the average's index goes to the nearest point when the grid
    moved), normalised; the answer is the cold one to the solver's tolerance.  An automatic
    grid is reused as ``warm_grid`` says (:data:`WARM_GRIDS`).  ``result.warm`` says what was
    reused.

    Raises :class:`NonConvergenceError` (with ``.result``) when the residual target
    is not met, :class:`ReducibleChainError` when there is no unique stationary
    vector, :class:`ModelError` / :class:`OptionError` on bad input.
    """
    if not isinstance(error_estimate, bool):
        raise _checks.option_error("error_estimate", "True or False", error_estimate)
    _class_chain(classes)
    if warm_grid not in WARM_GRIDS:
        raise _checks.option_error("warm_grid", "one of " + ", ".join(WARM_GRIDS), warm_grid)
    ws = None if warm is None else WarmStart.of(warm)
    if ws is not None and "x0" in options:
        raise _checks.option_error("warm", "None when solver option 'x0' is given (both are starting vectors)",
                                   "a result")
    warm_info: dict[str, Any] = {}
    carried = _carried_options(model)
    if carried:  # the model file's [solver] table (load_model), under the options given here
        if memory_limit_gb is None:
            memory_limit_gb = carried.get("memory_limit_gb")
        carried.pop("memory_limit_gb", None)
        options = {**carried, **options}
    opts = _options(options)
    caps: list[dict[str, Any]] = []
    input_model = None
    if isinstance(model, _core.Chain):
        chain, grid = model, None
        raw = None
    else:
        input_model = model
        # the automatic grid's pre-solve answer: the count truncation's first start (in a box,
        # which the truncation empties: the vector is not held through the later rounds)
        presolve: list = []
        if ws is not None and model.grid.refine == "auto" and ws.grid_report and ws.grid_report.get("refined") \
                and ws.resolved_grid.refine != "auto" and (
                warm_grid == "same" or (warm_grid == "auto" and _same_model(model, ws.input_model))):
            # the previous resolved grid: no pre-solve
            model = model.with_grid(ws.resolved_grid)
            grid = dict(ws.grid_report, presolve_seconds=0.0, presolve_states=0, reused=True)
            warm_info["grid"] = "reused"
        else:
            # the pre-solve runs with the default solver options: it only has to locate avg's mass
            warm_info["grid"] = "refined" if model.grid.refine == "auto" else "explicit"
            keep = ws is None and "x0" not in options and _presolve_starts(model, options)
            model, grid, start = _refine_grid(model, [model], memory_limit_gb, {}, keep)
            presolve = [start] if start is not None else []
            start = None
        if model.aqm.spacing != "none" and (model.time == "discrete" or model.aqm.semantics == "ns3"):
            chain, raw, opts = _solve_count_truncated(model, options, opts, memory_limit_gb, classes, response, caps,
                                                      ws, warm_info, presolve)
        else:
            like = ws.chain if ws is not None and ws.chain is not None and ws.chain.time == model.time else None
            chain, raw = build_chain(model, memory_limit_gb, classes, opts.max_states, like), None
            if like is not None:
                warm_info["states"] = "reused" if chain.report["states_reused"] else "explored"
        grid["states"] = int(chain.n)
    if raw is None:
        x0, state = None, None
        if ws is not None:
            x0, info = ws.x0(chain)
            warm_info.update(info, x0=x0 is not None)
            state = ws.state_for(chain, warm_info)
        opts = _prepare(chain, options, opts, memory_limit_gb, response, x0)
        raw = _core.solve_stationary(chain, opts, state)
        if state is not None:
            _reuse_report(raw, warm_info)
    result = _finish(chain, raw, opts, memory_limit_gb, response, response_tail, grid, caps,
                     warm_info if ws is not None else None)
    result._input_model = input_model
    if result.class_chain == "window" and classes != "window":
        result.class_chain = classes  # "window:L" as asked (sensitivities rebuild the same chain)
    if error_estimate:
        result.error_estimate = _error_estimate(result, options, memory_limit_gb, response, response_tail, classes)
    return result


def _solve_warm(model, warm: "WarmStart | None", **kwargs: Any) -> StationaryResult:
    """:func:`solve_stationary` from ``warm`` when it fits the model's chain, else cold (sweeps and
    searches: a key that changes the chain's kind, e.g. its state components, or an ``x0`` given)."""
    if warm is None or "x0" in kwargs or (isinstance(model, _core.Model) and model.time != warm.time):
        return solve_stationary(model, **kwargs)
    try:
        return solve_stationary(model, warm=warm, **kwargs)
    except OptionError as exc:
        if getattr(exc, "param", None) != "warm":
            raise
    return solve_stationary(model, **kwargs)


def _reuse_report(raw, warm_info: dict) -> None:
    """What the solver reused of the warm state (krylov; another method reuses nothing)."""
    extra = raw.extra
    if "warm_recycled_vectors" not in extra:
        warm_info["reuse"] = f"none ({raw.method} does not recycle)"
        return
    warm_info["recycled_vectors"] = int(extra["warm_recycled_vectors"])
    warm_info["reuse"] = "recycled" if warm_info["recycled_vectors"] else "none (the block order changed)"


def _prepare(chain, options: dict, opts, memory_limit_gb, response, x0=None, tol=None):
    """The checks and option choices before a solve of ``chain`` (``x0``: a starting vector;
    ``tol``: a tolerance other than the options')."""
    # the tagged-packet chain's budgets, before the solve (exact, from the chain's labels)
    _core.check_tagged_budget(chain, response, _limit_bytes(memory_limit_gb), opts.tagged_max_states)
    extra = {} if x0 is None else {"x0": x0}
    if tol is not None:
        extra["tol"] = tol
    class_order = COMPONENTS["sequence"] in chain.labels or COMPONENTS["window"] in chain.labels
    if class_order and "method" not in options and "auto_krylov_min_states" not in options:
        # the exact class chain's rows are dense (a discard may take any position of the
        # sequence): LU fill-in makes direct slow from a few thousand states, krylov goes first;
        # so on the window chain (6054 states: direct 5.6 s, krylov 0.05 s)
        extra["auto_krylov_min_states"] = 0
    return _options({**options, **extra}) if extra else opts


def _cap_masses(chain, pi) -> np.ndarray:
    """Per avg point, the stationary mass of the states whose count sits at that point's cap
    where the cap is below the exact one (they stand for count >= cap; docs/stateful-aqm.md)."""
    info = _core.stateful_info(chain.model)
    G = len(chain.grid)
    cap_at = np.asarray(info["count_cap_at"], dtype=np.int64) if len(info["count_cap_at"]) else \
        np.full(G, int(info["count_cap"]), dtype=np.int64)
    g = np.asarray(chain.grid_index)
    c = np.asarray(chain.labels[COMPONENTS["count"]], dtype=np.int64) - 1
    at = (c == cap_at[g]) & (cap_at[g] < int(info["count_cap_exact"]))
    return np.bincount(g[at], weights=np.asarray(pi)[at], minlength=G)


def _map_by_labels(old: dict, old_pi, chain) -> tuple[np.ndarray, int, float]:
    """``old_pi`` (on the states labelled ``old``) carried to the states of ``chain``: states
    matched by their labels (all components of the chain), the others 0.  Returns (x, matched
    states, matched mass); x is not normalised."""
    idx = np.asarray(chain.indices_of(old))
    hit = idx >= 0
    old_pi = np.asarray(old_pi, dtype=float)
    # several old states may land on one new state (a coarser grid): their masses add up
    x = np.bincount(idx[hit], weights=old_pi[hit], minlength=chain.n)
    return x, int(np.count_nonzero(x)), float(old_pi[hit].sum())


def _warm_start(old, old_pi, new_chain) -> np.ndarray:
    """The previous caps' solution (``old``: its chain's labels) on the larger caps' states
    (matched by their labels; the new states start at 0), normalised: the next solve's x0."""
    x0 = _map_by_labels(old, old_pi, new_chain)[0]
    return x0 / x0.sum()


#: ``warm_grid`` of :func:`solve_stationary`, what a warm start does with an automatic grid
#: (``grid.refine = "auto"``): "auto" reuses the previous resolved grid only when the model is
#: the one solved before (the pre-solve would find the same grid: a re-solve with other solver
#: options), "same" always reuses it (no pre-solve; the answer is then the one on the previous
#: grid), "refine" always runs the pre-solve
WARM_GRIDS: tuple[str, ...] = ("auto", "same", "refine")


class WarmStart:
    """What a warm start keeps of a solved model: the chain's time kind and state labels, the
    stationary vector, the values of the average's grid and of REDwM's s grid (to carry an
    index to the nearest point when a grid moved), the model as given (to tell whether an
    automatic grid can be reused), its resolved grid, the solve's iterations, the previous chain (a new chain with the same support is assembled on
    its states: no exploration, no class analysis) and the solver's warm state (krylov with
    ``krylov_recycle > 0``: that many directions of its Krylov space, recycled by a chain with
    the same states; ``state.bytes`` says what it holds).  :meth:`of` makes one from a
    :class:`StationaryResult`."""

    __slots__ = ("time", "labels", "pi", "grid", "s_grid", "input_model", "resolved_grid", "grid_report",
                 "iterations", "state", "chain")

    @classmethod
    def of(cls, result: "StationaryResult | WarmStart", param: str = "warm") -> "WarmStart":
        """The warm start of ``result`` (itself when it is one); a clear error naming ``param``
        when it is neither a result nor a warm start, or a result that lost its chain."""
        if isinstance(result, WarmStart):
            return result
        if not isinstance(result, StationaryResult):
            raise _checks.option_error(param, "a StationaryResult of an earlier solve_stationary (or None)", result)
        chain = result.chain
        if chain is None:
            raise _checks.option_error(param, "a result with its chain (a result pickled, e.g. back from a Dask "
                                       "worker, has none: solve again in this process)", "a result without its chain")
        w = cls()
        w.time = chain.time
        w.labels = {k: np.asarray(v) for k, v in chain.labels.items()}
        w.pi = np.asarray(result.pi, dtype=float)
        w.grid = np.asarray(chain.grid, dtype=float)
        w.s_grid = (np.asarray(_core.redwm_s_grid(chain.model), dtype=float)
                    if COMPONENTS["s"] in w.labels else None)
        w.input_model = getattr(result, "_input_model", None)
        w.resolved_grid = chain.model.grid
        w.grid_report = dict(result.grid) if result.grid else None
        w.iterations = int(result.info.iterations)
        w.state = getattr(result, "_warm_state", None)
        # the previous chain, whose states (and class analysis) a chain with the same support
        # reuses instead of exploring: held while the warm start is (its matrix too)
        w.chain = chain
        return w

    @classmethod
    def of_presolve(cls, presolve: dict, model: _core.Model) -> "WarmStart":
        """The automatic grid's pre-solve answer (``presolve``: pi, labels and avg grid of its
        chain, from the core's refine_grid) as a start for ``model``, the model on the refined grid."""
        w = cls()
        w.time = model.time
        w.labels = {k: np.asarray(v) for k, v in presolve["labels"].items()}
        w.pi = np.asarray(presolve["pi"], dtype=float)
        w.grid = np.asarray(presolve["grid"], dtype=float)
        w.s_grid = None  # the pre-solve moves the avg grid and the count's caps, not an s grid
        w.input_model = w.resolved_grid = w.grid_report = w.state = w.chain = None
        w.iterations = 0
        return w

    def same_kind(self, chain: _core.Chain) -> bool:
        """Whether ``chain`` is of the previous chain's kind (time, state components)."""
        return chain.time == self.time and sorted(chain.labels) == sorted(self.labels)

    def same_states(self, chain: _core.Chain) -> bool:
        """Whether ``chain`` has the previous chain's states, in the same order (same labels)."""
        labels = chain.labels
        return (chain.n == len(self.pi) and sorted(labels) == sorted(self.labels)
                and np.array_equal(np.asarray(chain.grid, dtype=float), self.grid)
                and all(np.array_equal(np.asarray(labels[k]), self.labels[k]) for k in labels))

    def state_for(self, chain: _core.Chain, warm_info: dict) -> Any:
        """The solver's warm state (recycled directions) when ``chain`` has the previous chain's
        states, else None; the reason into ``warm_info``."""
        if self.state is None:
            warm_info["reuse"] = "none (the previous solve kept nothing: krylov with krylov_recycle > 0 keeps it)"
            return None
        if not self.same_states(chain):
            warm_info["reuse"] = "refused (the states changed)"
            return None
        return self.state

    def describe(self) -> str:
        """"a discrete-time chain with components level, avg_index, modulator"."""
        return f"a {self.time}-time chain with components {', '.join(self.labels)}"

    def x0(self, chain: _core.Chain, param: str = "warm") -> tuple[np.ndarray | None, dict[str, Any]]:
        """The starting vector on ``chain`` (None when no state matches) and the accounts.
        The chain must be of the same kind (time, state components), else an error naming ``param``."""
        names = list(chain.labels)
        if not self.same_kind(chain):
            raise _checks.option_error(param, f"a result of the same kind of model as the one solved ("
                                       f"a {chain.time}-time chain with components {', '.join(names)})",
                                       f"a result of {self.describe()}")
        old = dict(self.labels)
        new_grid = np.asarray(chain.grid, dtype=float)
        avg = COMPONENTS["avg"]
        if avg in old and not (len(new_grid) == len(self.grid) and np.array_equal(new_grid, self.grid)):
            old[avg] = _nearest(new_grid, self.grid[old[avg]])  # the grid moved: its nearest point
        if self.s_grid is not None:
            s_new = np.asarray(_core.redwm_s_grid(chain.model), dtype=float)
            if not (len(s_new) == len(self.s_grid) and np.array_equal(s_new, self.s_grid)):
                old[COMPONENTS["s"]] = _nearest(s_new, self.s_grid[old[COMPONENTS["s"]]])
        if chain.n == len(self.pi) and self.same_states(chain):  # the same states: no search
            x, matched, mass = np.array(self.pi, dtype=float), int(np.count_nonzero(self.pi)), float(np.sum(self.pi))
        else:
            x, matched, mass = _map_by_labels(old, self.pi, chain)
        info = {"previous_states": int(len(self.pi)), "matched_states": matched, "matched_mass": mass,
                "previous_iterations": self.iterations}
        total = float(x.sum())
        if not total > 0.0:
            return None, info
        return x / total, info


def _nearest(points: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Index of the nearest of the sorted ``points`` to each value."""
    i = np.clip(np.searchsorted(points, values), 1, max(len(points) - 1, 1))
    if len(points) == 1:
        return np.zeros(len(values), dtype=np.int64)
    left = values - points[i - 1] <= points[i] - values
    return np.where(left, i - 1, i).astype(np.int64)


def _same_model(a: Any, b: Any) -> bool:
    """Whether two models (as given to solve_stationary) are the same model."""
    if a is None or b is None:
        return False
    from .modelfile import model_to_dict

    try:
        return model_to_dict(a) == model_to_dict(b)
    except (ValueError, TypeError, _core.ModelError):
        return False


#: drop spacing: a chain with the exact cap of at most this many states is solved as it is (no
#: truncation); above, the count is truncated (docs/stateful-aqm.md)
EXACT_COUNT_STATES = 200_000
#: the same for ns-3's semantics (docs/ns3.md): its count climbs at every arrival and Wait keeps p_a = 0
#: until count p_b >= 1, so the count lives far above the first truncated caps and their solves are
#: slow (GMRES 80-110 iterations each at caps 128-512 on ns-3's defaults, 17 s in all, against 1.9 s for
#: the exact chain of 580,000 states)
EXACT_COUNT_STATES_NS3 = 3_000_000
#: and its first truncated caps are this many times the slotted ones
NS3_FIRST_CAP_FACTOR = 8

#: the tail mass below which the count truncation's caps grow x8 instead of x2 (after a round
#: solved to tol: below _LOOSE_ROUNDS_TAIL)
_FAST_GROWTH_TAIL = 1e-6
#: The count truncation's rounds whose caps will grow are solved only as far as their decision
#: needs (_solve_count_truncated): the first to this tolerance, ...
_ROUND_TOL_FIRST = 1e-8
#: ... one after a tail mass above _LOOSE_ROUNDS_TAIL to this times that tail; the rounds after a
#: smaller tail are solved to tol (the accuracy a loose round leaves out is then gained on the
#: smaller chains of the middle rounds: on the count-spacing model of docs/stateful-aqm.md,
#: with loose rounds down to a tail of 1e-6 the last, largest chain took 18 iterations to
#: reach tol instead of 1)
_ROUND_TOL_FACTOR = 1e-4
_LOOSE_ROUNDS_TAIL = 1e-5


def _solve_count_truncated(model, options: dict, opts, memory_limit_gb, classes, response, caps: list,
                           warm: WarmStart | None = None, warm_info: dict | None = None,
                           presolve_box: list | None = None):
    """Drop spacing (docs/stateful-aqm.md): solve with the count truncated at a cap per avg
    point (stateful_info's count_start_at first), growing the caps (up to the exact cap and
    aqm.count_max) at the points whose mass at the cap is above aqm.count_tail / points, until
    the mass at the caps is at most aqm.count_tail; each solve starts from the previous one.
    The caps double while the tail mass is above 1e-6 (from a solution far off, the count's
    mass moving into much larger caps took GMRES 300 iterations where doubled caps took 10
    to 16) and grow x8 below it, or below 1e-5 after a round solved to tol (one iteration
    from there).  A round whose caps will still
    grow needs the tail's size, not tol: the first is solved to _ROUND_TOL_FIRST, one after a
    tail above _LOOSE_ROUNDS_TAIL to _ROUND_TOL_FACTOR times that tail (never below tol); a loose round
    whose tail is within aqm.count_tail is solved again to tol from its own answer, so the
    caps are accepted only on a solve to tol."""
    import time

    tail_tol, count_max = float(model.aqm.count_tail), int(model.aqm.count_max)
    # the grid's pre-solve answer (solve_stationary asks for it only where _presolve_starts)
    presolve = presolve_box.pop() if presolve_box else None
    info = _core.stateful_info(model.with_count_cap(1))
    exact = int(info["count_cap_exact"])
    if tail_tol == 0.0:
        cap_at = None  # the exact cap
    elif len(model.aqm.count_trunc_at):
        cap_at = np.asarray(model.aqm.count_trunc_at, dtype=np.int64)
    elif model.aqm.count_trunc:
        cap_at = np.full(len(info["count_start_at"]), int(model.aqm.count_trunc), dtype=np.int64)
    else:
        cap_at = np.asarray(info["count_start_at"], dtype=np.int64)
        if model.aqm.semantics == "ns3":  # see EXACT_COUNT_STATES_NS3: the count lives far above the first caps
            cap_at = cap_at * NS3_FIRST_CAP_FACTOR
    if cap_at is not None:
        cap_at = np.where(cap_at > 0, np.minimum(cap_at, exact), exact)
    exact_limit = EXACT_COUNT_STATES_NS3 if model.aqm.semantics == "ns3" else EXACT_COUNT_STATES
    if cap_at is not None and not len(model.aqm.count_trunc_at) and not model.aqm.count_trunc \
            and exact_limit > 0:
        # a small chain is solved on the exact cap at once (one solve, no tail); the exploration
        # stops as soon as it has seen more than EXACT_COUNT_STATES states
        try:
            t0 = time.perf_counter()
            chain = build_chain(model.with_count_cap(0), memory_limit_gb, classes,
                                min(int(opts.max_states), exact_limit))
        except (_core.StateSpaceTooLarge, _core.ModelError):
            chain = None
        if chain is not None:
            x0, start = _first_x0(warm, chain, warm_info, presolve, "x0" in options)
            o = _prepare(chain, options, opts, memory_limit_gb, response, x0)
            raw = _core.solve_stationary(chain, o)
            caps.append({"cap": exact, "points_truncated": 0, "states": int(chain.n), "tail_mass": 0.0,
                         "iterations": int(raw.iterations), "start": start, "seconds": time.perf_counter() - t0})
            return chain, raw, o
    prev = None
    prev_tail = None
    # auto's multilevel failing on a round's chain (its coarsening stalls) is not tried again on
    # the larger chains of the rounds after it: they take the method that solved that round
    # (multilevel by name when auto's swept multilevel solved it)
    carried: dict[str, str] | None = None
    asked_auto = options.get("method", "auto") == "auto"
    while True:
        t0 = time.perf_counter()
        if caps and "x0" in options:  # the options' x0 (on the first caps' states) started the first round only
            options = {k: v for k, v in options.items() if k != "x0"}
            opts = _options(options)
        m = model.with_count_cap(0) if cap_at is None else model.with_count_caps(cap_at.tolist())
        chain = build_chain(m, memory_limit_gb, classes, opts.max_states)
        x0 = _warm_start(prev[0], prev[1], chain) if prev is not None else None
        start = "previous caps" if x0 is not None else "none"
        if prev is None and not caps:  # the first caps: the options' x0, the warm start or the grid's pre-solve
            x0, start = _first_x0(warm, chain, warm_info, presolve, "x0" in options)
            presolve = None
        prev = None
        loose = None  # this round's tolerance when its caps will likely grow (see above)
        if cap_at is not None:
            loose = _ROUND_TOL_FIRST if prev_tail is None else \
                _ROUND_TOL_FACTOR * prev_tail if prev_tail > _LOOSE_ROUNDS_TAIL else None
            loose = loose if loose is not None and loose > opts.tol else None
        round_options = options if carried is None else {**options, "method": carried["method"]}
        o = _prepare(chain, round_options, opts, memory_limit_gb, response, x0, loose)
        raw = _core.solve_stationary(chain, o)
        iterations = int(raw.iterations)
        skipped = carried is not None
        if carried is None and asked_auto and raw.converged:
            # a multilevel that handed over to krylov by its rate is no reason to skip it later;
            # one refused for a stalled coarsening whose level the swept multilevel then solved
            # is carried as multilevel (by name it sweeps that level at once)
            handed_over = raw.extra.get("auto_multilevel_handed_over", 0.0) > 0.0
            failed = [] if handed_over else [t for t in raw.methods_tried
                                             if t["method"] == "multilevel" and t["status"] != "converged"]
            swept = raw.method == "multilevel" and raw.extra.get("coarsest_sweeps", 0) > 0
            if failed and (raw.method != "multilevel" or swept):
                carried = {"method": str(raw.method), "why": failed[0]["why"]}
        mass = _cap_masses(chain, raw.pi)
        tail = float(mass.sum())
        if loose is not None and raw.converged:
            if tail <= tail_tol or not _growing(mass, cap_at, exact, count_max, tail_tol).any():
                # the round ends here: its answer is taken at tol
                o = _prepare(chain, round_options, opts, memory_limit_gb, response, np.asarray(raw.pi))
                raw = _core.solve_stationary(chain, o)
                iterations += int(raw.iterations)
                mass = _cap_masses(chain, raw.pi)
                tail = float(mass.sum())
                loose = None
        caps.append({"cap": int(exact if cap_at is None else cap_at.max()),
                     "points_truncated": 0 if cap_at is None else int(np.sum(cap_at < exact)),
                     "states": int(chain.n), "tail_mass": tail, "iterations": iterations,
                     "tol": float(opts.tol if loose is None else loose), "method": str(raw.method), "start": start,
                     **({"multilevel_skipped": carried["why"]} if skipped else {}),
                     "seconds": time.perf_counter() - t0})
        prev_tail = tail
        if not raw.converged or tail <= tail_tol or cap_at is None:
            return chain, raw, o
        grow = _growing(mass, cap_at, exact, count_max, tail_tol)
        if not grow.any():  # the caps that hold the mass are at aqm.count_max: _finish raises
            return chain, raw, o
        # x2 while the tail is large; x8 once it is small (then the previous solution is close
        # whatever the new caps: GMRES took 1 iteration from tails below 1e-6), and below
        # _LOOSE_ROUNDS_TAIL after a round solved to tol (its answer is then close to the next
        # chain's on the states they share: 1 iteration from a tail of 1.5e-6 on count_default)
        accurate = loose is None
        factor = 8 if tail <= _FAST_GROWTH_TAIL or (accurate and tail <= _LOOSE_ROUNDS_TAIL) else 2
        cap_at[grow] = np.minimum(np.minimum(factor * cap_at[grow], exact), count_max)
        # the labels and pi only, copied (the labels are views that would keep the chain): the
        # previous chain is freed before the next one is built
        prev = ({k: np.array(v) for k, v in chain.labels.items()}, np.array(raw.pi))
        chain = raw = None


def _growing(mass: np.ndarray, cap_at: np.ndarray, exact: int, count_max: int, tail_tol: float) -> np.ndarray:
    """The avg points whose caps grow after a round with these masses at the caps: those above
    tail_tol / points (else the one holding the most), below the exact cap and aqm.count_max."""
    grow = (mass > tail_tol / len(cap_at)) & (cap_at < exact)
    if not grow.any():
        grow = mass == mass.max()
    return grow & (cap_at < count_max)


def _presolve_starts(model, options: dict) -> bool:
    """Whether the count truncation's first round starts from the automatic grid's pre-solve:
    for `auto` and `multilevel` on a slotted model with drop spacing, without adaptive RED
    (ns-3's semantics: the pre-solve does not cap its count as the rounds do; not measured).  Multilevel's cycles each cut
    the error by a fixed factor, so a close start saves cycles (count_default: 16 -> 10).  Krylov
    is not helped: GMRES's slow first phase stays (45 iterations instead of 32 on a count model
    of buffer 80), and with adaptive RED a start weighs krylov's coarse space instead of the p_max
    slices' own chains (36 iterations instead of 16 on a model of buffer 30)."""
    return (options.get("method", "auto") in ("auto", "multilevel") and not model.aqm.adaptive
            and model.aqm.spacing != "none" and model.time == "discrete" and model.aqm.semantics != "ns3")


def _first_x0(warm: WarmStart | None, chain, warm_info: dict | None, presolve: WarmStart | None,
              given_x0: bool) -> tuple[np.ndarray | None, str]:
    """The starting vector on the first chain of the count truncation and what it came from:
    the options' x0 (``given_x0``: the solve passes it), the warm start's (accounts into
    warm_info), or the automatic grid's pre-solve answer (see _presolve_starts; solve_stationary
    asks for it only without x0 and warm), else none.  The pre-solve starts only a chain of its
    kind: it builds the approximate class chain, classes="exact" or "window" solve another."""
    if given_x0:
        return None, "x0"
    if warm is not None:
        x0, info = warm.x0(chain)
        if warm_info is not None:
            warm_info.update(info, x0=x0 is not None)
        return x0, "warm" if x0 is not None else "none"
    if presolve is not None and presolve.same_kind(chain):
        x0 = presolve.x0(chain)[0]
        return x0, "pre-solve" if x0 is not None else "none"
    return None, "none"

def _carried_options(model: Any) -> dict:
    from .modelfile import solver_options

    return solver_options(model)


def _options(options: dict) -> _core.StationaryOptions:
    unknown = sorted(set(options) - set(OPTION_DEFAULTS))
    if unknown:
        known = [*OPTION_DEFAULTS, "memory_limit_gb"]
        raise OptionError(f"unknown solver option '{unknown[0]}'"
                          + (_checks.did_you_mean(unknown[0], known) or f" (known: {', '.join(known)})"))
    return _core.StationaryOptions(**options)


def _finish(chain, raw, opts, memory_limit_gb, response, response_tail, grid=None, caps=None,
            warm_info=None) -> StationaryResult:
    rep = chain.report
    build_seconds = {"build_explore": rep["seconds_explore"], "build_assemble": rep["seconds_assemble"],
                     "build_classes": rep["seconds_classes"]}
    metrics = _core.compute_metrics(chain, raw.pi, response=response, tail_mass=float(response_tail),
                                    memory_limit=_limit_bytes(memory_limit_gb), tagged_max_states=opts.tagged_max_states)
    result = StationaryResult(chain.model, chain, raw, metrics, opts.tol, build_seconds)
    result._warm_state = raw.warm_state  # what a warm re-solve reuses (WarmStart)
    result.grid = grid
    result.warm = warm_info
    if grid is not None and grid.get("refined") and not grid.get("reused"):
        result.info.seconds["grid_presolve"] = grid["presolve_seconds"]
    if not raw.converged:
        raise NonConvergenceError(
            f"stationary solve did not converge ({raw.method}): residual {raw.residual:.3e} > tol {opts.tol:.1e}; "
            f"{raw.note}", result)
    if result.count_cap is not None:
        model = chain.model
        result.count_caps = list(caps) if caps else [{
            "cap": result.count_cap, "states": int(chain.n), "tail_mass": result.count_tail_mass,
            "iterations": int(raw.iterations),
            "start": "warm" if warm_info and warm_info.get("x0") else "x0" if len(opts.x0) else "none",
            "seconds": float(raw.seconds.get("total", 0.0))}]
        if caps and len(caps) > 1:  # the smaller caps solved before (their build and solve)
            result.info.seconds["count_cap_search"] = float(sum(c["seconds"] for c in caps[:-1]))
        skipped = [i for i, c in enumerate(caps or []) if "multilevel_skipped" in c]
        if skipped:
            why = caps[skipped[0]]["multilevel_skipped"]
            rounds = f"round {len(caps)}" if skipped[0] + 1 == len(caps) else f"rounds {skipped[0] + 1}-{len(caps)}"
            result.info = dataclasses.replace(result.info, requested="auto", note="; ".join(x for x in (
                result.info.note, f"auto did not try multilevel on the count's cap {rounds} (it failed on round "
                f"{skipped[0]}'s smaller chain: {why})") if x))
        if result.count_tail_mass > model.aqm.count_tail:
            at_max = bool(caps) and len(caps) > 0 and result.count_cap >= model.aqm.count_max
            raise CountTruncationError(
                f"the drop-spacing count truncated at cap {result.count_cap} (exact cap {result.count_cap_exact}) "
                f"keeps stationary mass {result.count_tail_mass:.3e} at its cap, above aqm.count_tail = "
                f"{model.aqm.count_tail:g}: "
                + (f"the cap cannot grow beyond aqm.count_max = {model.aqm.count_max}; raise aqm.count_max or "
                   f"aqm.count_tail" if at_max else
                   "solve the model (not a built chain) so that the cap can grow, or raise aqm.count_tail"),
                result, "aqm.count_max" if at_max else "aqm.count_tail")
    return result


class DirectSolver:
    """Direct solves that keep UMFPACK's symbolic analysis between calls.

    A sweep over parameters that keep the sparsity pattern of P (mu, alpha, p_max,
    ... but not w or the grid, which change the reachable states) analyses once and
    only refactorises afterwards; ``result.info.extra["symbolic_reused"]`` and
    :attr:`analyses` say what happened.  Keyword options as for :func:`solve_stationary`.
    """

    def __init__(self, *, memory_limit_gb: float | None = None, response: str = "auto",
                 response_tail: float = 1e-12, **options: Any):
        if options.get("method", "direct") != "direct":
            raise OptionError(f"DirectSolver runs method 'direct', got method={options['method']!r}")
        options["method"] = "direct"
        self._opts = _options(options)
        self._solver = _core.DirectSolver(self._opts)
        self._memory_limit_gb, self._response, self._response_tail = memory_limit_gb, response, response_tail

    @property
    def analyses(self) -> int:
        """How many symbolic analyses (UMFPACK) were made so far: 1 while the sparsity pattern is the same."""
        return self._solver.analyses

    def solve(self, model: _core.Model | _core.Chain) -> StationaryResult:
        """Solve ``model`` (or a built chain) directly, reusing the symbolic analysis when the
        chain's sparsity pattern is the one analysed before."""
        grid = None
        if not isinstance(model, _core.Chain):
            model, grid = refine_grid(model, memory_limit_gb=self._memory_limit_gb)
        chain = model if isinstance(model, _core.Chain) else build_chain(model, self._memory_limit_gb,
                                                                         max_states=self._opts.max_states)
        return _finish(chain, self._solver.solve(chain), self._opts, self._memory_limit_gb, self._response,
                       self._response_tail, grid)
