"""Direct search over model parameters: :func:`optimize`.

The objective of a parameter point is a scalar metric (``mean_response`` by default) of the
model with those parameters, solved by the chain (or by any ``evaluate`` callable).  Points
outside the bounds or that the model refuses (negative coefficients, x + y + z > 1 for the
REDwM triple, ...) are infeasible: their value is +inf and nothing is built or solved for
them.  Every point is evaluated at most once (a cache shared by all starts); an evaluation
that fails (the solver does not converge, the state space is too large, ...) is recorded in
the trace with its message and counts as +inf, and the search goes on.

Methods: ``hooke_jeeves`` (Hooke and Jeeves' pattern search, "Direct search solution of
numerical and statistical problems", J. ACM 1961: exploratory moves along each coordinate,
pattern moves while they pay, step halving when nothing does, as in Kelley, "Iterative
Methods for Optimization", 1999) and ``nelder_mead`` (``scipy.optimize.minimize``); and the
gradient methods ``lbfgsb`` and ``slsqp`` (SciPy's L-BFGS-B and SLSQP), whose gradients and
constraint Jacobians are the exact sensitivities of the solved chain (:mod:`aqmchain.sensitivity`:
one adjoint solve per metric).  Constraints on metrics (``"loss<=0.02"``) are passed to SLSQP;
the direct searches and L-BFGS-B treat a point that violates one as infeasible.
Multi-start: one run per starting point (``starts``), the best end point wins.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import io
import itertools
import math
import re
import time
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from . import _checks, _core
from ._core import ModelError, ReducibleChainError, SolverError, StateSpaceTooLarge
from .modelfile import model_from_dict, model_to_dict

__all__ = ["optimize", "OptimizeResult", "OPTIMIZE_METHODS", "GRADIENT_METHODS", "PAPER_GRID_STARTS",
           "PAPER_GRID_NAMES", "triple_of"]

GRADIENT_METHODS = ("lbfgsb", "slsqp")
"""The methods of :func:`optimize` driven by the sensitivities (SciPy's L-BFGS-B and SLSQP)."""
OPTIMIZE_METHODS = ("hooke_jeeves", "nelder_mead") + GRADIENT_METHODS
"""The search methods of :func:`optimize` (``method``): Hooke and Jeeves' pattern search, Nelder-Mead,
and the gradient methods :data:`GRADIENT_METHODS`."""
#: the search's names of the triple -> the sensitivities' names of the same directions
#: (b_0 = x, b_1 = y, a_2 = z, each moved against a_1)
_SENSITIVITY_KEY = {"aqm.triple[0]": "aqm.b[0]", "aqm.triple[1]": "aqm.b[1]", "aqm.triple[2]": "aqm.a[1]"}
#: multi-fidelity search: the end points of one level that start the next
FIDELITY_KEEP = 3
#: a metric within this relative distance beyond its constraint's bound satisfies it (the
#: gradient methods end on the active constraint up to their own tolerance)
CONSTRAINT_RTOL = 1e-9
_CONSTRAINT = re.compile(r"^\s*([a-z_0-9]+)\s*(<=|>=)\s*([-+0-9.eE]+)\s*$")
TRIPLE = ("aqm.triple[0]", "aqm.triple[1]", "aqm.triple[2]")
#: Default first steps of the triple's coordinates (the spacing of the paper's start grid).
TRIPLE_STEP = (0.01, 0.001, 0.001)


def _paper_grid_starts() -> list[tuple[float, float, float]]:
    """The 10 x 10 x 10 start grid of "A RED modified weighted moving average for soft real-time
    application": x = 0.001, 0.011, ..., 0.091; y, z = 0, 0.001, ..., 0.009 (triple notation)."""
    xs = [round(0.001 + 0.01 * i, 10) for i in range(10)]
    ys = [round(0.001 * j, 10) for j in range(10)]
    return [(x, y, z) for x in xs for y in ys for z in ys]


PAPER_GRID_STARTS: tuple[tuple[float, float, float], ...] = tuple(_paper_grid_starts())
#: The ``starts`` values (and ``--starts`` spellings) that select :data:`PAPER_GRID_STARTS`.
PAPER_GRID_NAMES: tuple[str, ...] = ("paper", "paper-grid")


def triple_of(model: _core.Model) -> list[float]:
    """The REDwM triple [x, y, z] (b_0, b_1, a_2) of a model; [w, 0, 0] for an EWMA model."""
    aqm = model.aqm
    if aqm.filter == "ewma":
        return [aqm.w, 0.0, 0.0]
    k, m = aqm.order
    if k > 2 or m > 1:
        raise _checks.model_error("params", "a model whose filter has k <= 2 and m <= 1 for the triple",
                                  f"a REDwM filter of order ({k}, {m})")
    a, b = list(aqm.a) + [0.0, 0.0], list(aqm.b) + [0.0, 0.0]
    return [b[0], b[1], a[1]]


_FAILURES = (SolverError, ReducibleChainError, StateSpaceTooLarge)
#: Warm starts: the solutions kept (the most recent), each evaluation starting from the nearest
WARM_KEEP = 4


class _WarmSolve:
    """The default evaluation with warm starts: :func:`aqmchain.solve_stationary` from the
    nearest of the last :data:`WARM_KEEP` solutions (distance in the search's coordinates,
    each divided by its first step), with the ``solver`` options."""

    takes_point = True  # _Objective passes the point

    def __init__(self, solver: dict, scale: np.ndarray):
        self.solver, self.scale = dict(solver), np.asarray(scale, dtype=float)
        self.kept: list[tuple[np.ndarray, Any]] = []

    def __call__(self, model: _core.Model, x: np.ndarray | None = None) -> Any:
        from .stationary import WarmStart, _solve_warm

        near = None
        if x is not None and self.kept:
            dist = [float(np.linalg.norm((x - y) / self.scale)) for y, _ in self.kept]
            near = self.kept[int(np.argmin(dist))][1]
        result = _solve_warm(model, near, **self.solver)
        if x is not None:
            self.kept.append((np.array(x, dtype=float), WarmStart.of(result)))
            del self.kept[:-WARM_KEEP]
            for _, older in self.kept[:-1]:  # only the newest keeps its chain (its states are reused)
                older.chain = None
        return result


@dataclasses.dataclass(repr=False)
class OptimizeResult:
    """Outcome of :func:`optimize`.

    ``x`` maps each parameter to its best value, ``value`` is the objective there (``inf``
    when no point was evaluated successfully), ``model`` the model at ``x``.  ``starts`` holds
    one record per start (``start``, ``end``, ``value``, ``evaluations``, ``message``);
    ``trace`` one record per point the search asked for that was evaluated or refused
    (``index``, ``start``, the parameter values, ``value``, ``status`` = ok | failed |
    infeasible, ``message``, ``seconds``, ``states``).  ``evaluations`` counts the solves,
    ``cache_hits`` the requests answered from the cache."""

    params: list[str]
    objective: str
    method: str
    x: dict[str, float] | None
    value: float
    model: _core.Model | None
    evaluations: int
    cache_hits: int
    infeasible: int
    failed: int
    seconds: float
    starts: list[dict[str, Any]]
    trace: list[dict[str, Any]]
    stopped: bool = False
    message: str = ""
    gradients: int = 0
    gradient_seconds: float = 0.0
    levels: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    value_error: float | None = None
    min_step: list[float] | None = None

    def __repr__(self) -> str:
        where = "none" if self.x is None else ", ".join(f"{k}={v:.6g}" for k, v in self.x.items())
        return (f"<OptimizeResult {self.method} {self.objective}={self.value:.8g} at {where}; "
                f"{self.evaluations} evaluations, {len(self.starts)} start(s)>")

    def _repr_html_(self) -> str:
        import html

        return "<pre>" + html.escape(self.summary()) + "</pre>"

    @property
    def success(self) -> bool:
        """True when a feasible point with a finite objective was found."""
        return self.x is not None and math.isfinite(self.value)

    @property
    def evaluations_per_minute(self) -> float:
        """Solves per minute of wall time (NaN if no time was measured)."""
        return 60.0 * self.evaluations / self.seconds if self.seconds > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary with the trace (infinite values as ``None``)."""
        fin = lambda v: float(v) if v is not None and math.isfinite(v) else None  # noqa: E731
        return {"params": self.params, "objective": self.objective, "method": self.method, "x": self.x,
                "value": fin(self.value), "success": self.success, "evaluations": self.evaluations,
                "cache_hits": self.cache_hits, "infeasible": self.infeasible, "failed": self.failed,
                "seconds": self.seconds, "evaluations_per_minute": fin(self.evaluations_per_minute),
                "stopped": self.stopped, "message": self.message, "gradients": self.gradients,
                "levels": self.levels, "value_error": fin(self.value_error),
                "gradient_seconds": self.gradient_seconds,
                "model": model_to_dict(self.model) if self.model is not None else None,
                "starts": [{**s, "value": fin(s["value"])} for s in self.starts],
                "trace": [{**r, "value": fin(r["value"])} for r in self.trace]}

    def trace_csv(self) -> str:
        """The trace as CSV text: index, start, one column per parameter, value, status, seconds,
        states, message."""
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(["index", "start", *self.params, "value", "status", "seconds", "states", "message"])
        for r in self.trace:
            w.writerow([r["index"], r["start"], *(repr(r["x"][p]) for p in self.params),
                        repr(r["value"]) if math.isfinite(r["value"]) else "inf", r["status"],
                        f"{r['seconds']:.6g}", "" if r["states"] is None else r["states"], r["message"]])
        return out.getvalue()

    def summary(self) -> str:
        """A text report: the search and its accounts, then the best point and its value."""
        lines = [f"{self.method} on {self.objective} over {', '.join(self.params)}: "
                 f"{len(self.starts)} start(s), {self.evaluations} evaluations ({self.cache_hits} cached, "
                 f"{self.infeasible} infeasible, {self.failed} failed"
                 + (f", {self.gradients} gradients in {self.gradient_seconds:.1f} s" if self.gradients else "")
                 + f") in {self.seconds:.1f} s"]
        for lv in self.levels:
            lines.append(f"level {lv['level']} ({lv['overrides'] or 'the model as given'}): {lv['starts']} start(s), "
                         f"{lv['evaluations']} evaluations, best {lv['value']:.8g}"
                         + (f", improvement {lv['improvement']:.3g} vs discretisation error "
                            f"{lv['discretisation_error']:.3g}" if lv.get("discretisation_error") is not None else ""))
        if self.success:
            lines.append(f"best {self.objective} = {self.value:.8g}"
                         + (f" +- {self.value_error:.2g} (discretisation)" if self.value_error is not None else "")
                         + " at " + ", ".join(f"{p} = {v:.6g}" for p, v in self.x.items()))
        else:
            lines.append("no point was evaluated successfully" + (f": {self.message}" if self.message else ""))
        if self.stopped:
            lines.append(f"stopped early: {self.message}")
        return "\n".join(lines)


# ------------------------------------------------------------------ parameters


_PATH = re.compile(r"^([a-z_]+)\.([a-z_0-9]+)(?:\[(\d+)\])?$")


class _Space:
    """Parameter names -> values in a copy of the base model's document."""

    def __init__(self, model: _core.Model, params: str | Sequence[str]):
        self.doc = model_to_dict(model)
        if isinstance(params, str):
            params = [params]
        if not params:
            raise _checks.model_error("params", "at least one parameter", params)
        names: list[str] = []
        for p in params:
            if not isinstance(p, str):
                raise _checks.model_error("params", "parameter names (strings)", p)
            if p == "triple":
                names.extend(TRIPLE)
            else:
                names.append(self._resolve(p))
        if len(set(names)) != len(names):
            raise _checks.model_error("params", "distinct parameters", params)
        self.names = names
        if any(n.startswith("aqm.triple[") for n in names):
            aqm = self.doc["aqm"]
            t = triple_of(model)
            for key in ("w", "a", "b"):
                aqm.pop(key, None)
            aqm.update(filter="redwm", triple=t)  # an EWMA base becomes [w, 0, 0]: its chain exactly
        self.current = [self._get(n) for n in names]

    def _resolve(self, p: str) -> str:
        """A model-file path ("aqm.p_max", "aqm.a[1]") or a bare key found in one section."""
        if "." not in p:
            hits = [f"{sec}.{p}" for sec, table in self.doc.items() if isinstance(table, dict) and p in table]
            if len(hits) != 1:
                raise _checks.model_error("params", f"a model-file key such as 'aqm.{p}' ('{p}' is in "
                                          f"{len(hits)} sections of this model{': ' + ', '.join(hits) if hits else ''})",
                                          p)
            p = hits[0]
        m = _PATH.match(p)
        if not m:
            raise _checks.model_error("params", "'section.key' or 'section.key[i]' (or 'triple')", p)
        sec, key, idx = m.group(1), m.group(2), m.group(3)
        if key == "triple":
            if idx is None:
                raise _checks.model_error("params", "'triple' (all three) or 'aqm.triple[i]'", p)
            return p
        table = self.doc.get(sec)
        if not isinstance(table, dict) or key not in table:
            raise _checks.model_error("params", f"a key of this model's file (no '{sec}.{key}' here)", p)
        v = table[key]
        if idx is None:
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise _checks.model_error("params", "a numeric key (use 'key[i]' for a list entry)", p)
        elif not isinstance(v, list) or int(idx) >= len(v) or not isinstance(v[int(idx)], (int, float)):
            raise _checks.model_error("params", f"an entry of the list '{sec}.{key}'", p)
        return p

    def _get(self, name: str) -> float:
        sec, key, idx = _PATH.match(name).groups()
        v = self.doc[sec][key]
        return float(v if idx is None else v[int(idx)])

    def model_at(self, x: Sequence[float]) -> _core.Model:
        """The model with the parameters at x (ModelError when it is not a valid model)."""
        doc = copy.deepcopy(self.doc)
        for name, v in zip(self.names, x):
            sec, key, idx = _PATH.match(name).groups()
            if idx is None:
                doc[sec][key] = int(round(v)) if isinstance(doc[sec][key], int) and float(v).is_integer() else float(v)
            else:
                doc[sec][key][int(idx)] = float(v)
        return model_from_dict(doc)[0]


# ------------------------------------------------------------------ the search


class _Stop(Exception):
    pass


class _Objective:
    """f(x) with bounds, model validation, the cache, the trace and the budget."""

    def __init__(self, space: _Space, bounds: np.ndarray, evaluate: Callable, metric: Callable, max_evals: int,
                 callback: Callable | None):
        self.space, self.bounds, self.evaluate, self.metric = space, bounds, evaluate, metric
        self.max_evals, self.callback = max_evals, callback
        self.cache: dict[tuple, float] = {}
        self.trace: list[dict[str, Any]] = []
        self.evaluations = self.cache_hits = self.infeasible = self.failed = 0
        self.start = 0
        self.best = (math.inf, None, None)  # value, x, model
        self.objective_name: str | None = None  # a metric name (None: a callable objective)
        self.stop_message = ""
        self.constraints: list[tuple[str, str, float]] = []  # (metric, "<=" | ">=", bound)
        self.linear: list[tuple[np.ndarray, str, float, str]] = []  # (coefficients, op, bound, text)
        self.enforce_constraints = True  # direct searches: a violating point is infeasible
        self.gradients, self.gradient_seconds = 0, 0.0  # gradient methods: sensitivity computations
        self.run_message = ""  # a gradient method's own account of how it ended
        self.keep_results = 0  # gradient methods: the last results, by point
        self.results: dict[tuple, Any] = {}

    def _record(self, x, value, status, message, seconds, states) -> None:
        rec = {"index": len(self.trace), "start": self.start, "x": dict(zip(self.space.names, map(float, x))),
               "value": float(value), "status": status, "message": message, "seconds": seconds, "states": states}
        self.trace.append(rec)
        if self.callback is not None and self.callback(rec):
            self.stop_message = "the callback asked to stop"
            raise _Stop

    def __call__(self, x) -> float:
        x = np.asarray(x, dtype=float)
        key = tuple(float(f"{v:.12g}") for v in x)
        if key in self.cache:
            self.cache_hits += 1
            return self.cache[key]
        if np.any(x < self.bounds[:, 0]) or np.any(x > self.bounds[:, 1]):
            i = int(np.argmax((x < self.bounds[:, 0]) | (x > self.bounds[:, 1])))
            self.infeasible += 1
            self.cache[key] = math.inf
            self._record(x, math.inf, "infeasible", f"{self.space.names[i]} = {x[i]:.6g} outside "
                         f"[{self.bounds[i, 0]:.6g}, {self.bounds[i, 1]:.6g}]", 0.0, None)
            return math.inf
        for coef, op, bound, text in self.linear:
            v = float(coef @ x)
            slack = CONSTRAINT_RTOL * max(abs(bound), 1.0)
            if v > bound + slack if op == "<=" else v < bound - slack:
                self.infeasible += 1
                self.cache[key] = math.inf
                self._record(x, math.inf, "infeasible", f"{text} does not hold ({v:.6g})", 0.0, None)
                return math.inf
        try:
            model = self.space.model_at(x)
        except ModelError as exc:
            self.infeasible += 1
            self.cache[key] = math.inf
            self._record(x, math.inf, "infeasible", str(exc), 0.0, None)
            return math.inf
        if self.evaluations >= self.max_evals:
            self.stop_message = f"max_evals = {self.max_evals} evaluations reached"
            raise _Stop
        from .stationary import NonConvergenceError

        t0 = time.perf_counter()
        self.evaluations += 1
        states = None
        try:
            result = self.evaluate(model, x) if getattr(self.evaluate, "takes_point", False) else self.evaluate(model)
            states = getattr(result, "states", None)
            value = self.metric(result)
            status, message = "ok", ""
            note = getattr(result, "response_note", None)
            if value is None and self.objective_name is not None and self.evaluations == 1 and note:
                # the model does not define the metric (e.g. response times under the flow comparison):
                # bad input, not a failed point
                raise _checks.model_error("objective", f"a metric this model defines ({self.objective_name}: "
                                          f"{note})", self.objective_name)
            if value is None or not math.isfinite(value):
                status, message, value = "failed", f"objective is {value!r}", math.inf
            elif self.constraints:
                message = _violated(result, self.constraints)
                if message and self.enforce_constraints:
                    status, value = "infeasible", math.inf
            if self.keep_results and status == "ok":
                self.results[key] = result
                while len(self.results) > self.keep_results:
                    del self.results[next(iter(self.results))]
        except (NonConvergenceError, *_FAILURES) as exc:
            value, status, message = math.inf, "failed", " ".join(str(exc).split())
            partial = getattr(exc, "result", None)
            states = getattr(partial, "states", states)
        seconds = time.perf_counter() - t0
        if status == "failed":
            self.failed += 1
        elif status == "infeasible":
            self.infeasible += 1
        value = float(value)
        self.cache[key] = value
        if value < self.best[0] and not (status == "ok" and message):  # a point violating a constraint never wins
            self.best = (value, x.copy(), model)
        self._record(x, value, status, message, seconds, None if states is None else int(states))
        return value


def _violated(result: Any, constraints: list[tuple[str, str, float]]) -> str:
    """The first constraint the result violates by more than :data:`CONSTRAINT_RTOL`, as text
    ("" when none is)."""
    for metric, op, bound in constraints:
        v = getattr(result, metric, None)
        slack = CONSTRAINT_RTOL * max(abs(bound), 1e-300)
        if v is None or not math.isfinite(v) or (v > bound + slack if op == "<=" else v < bound - slack):
            return f"{metric} = {v!r} violates {metric} {op} {bound!r}"
    return ""


_LINEAR_TERM = re.compile(r"\s*([+-])?\s*(?:([0-9.eE+-]+)\s*\*\s*)?([a-z_]+\.[a-z_0-9]+(?:\[\d+\])?|triple)\s*")


def _parse_linear(text: str, where: str, space: "_Space") -> tuple[np.ndarray, str, float]:
    """``"aqm.max_th - aqm.min_th >= 5"`` -> (coefficients over the searched parameters, op, bound)."""
    m = re.match(r"^(.*?)(<=|>=)\s*([-+0-9.eE]+)\s*$", text)
    if not m:
        raise _checks.model_error(where, "'a*PARAM + b*PARAM <= BOUND' (or >=)", text)
    lhs, op, bound = m.group(1), m.group(2), m.group(3)
    coef = np.zeros(len(space.names))
    pos, first = 0, True
    while pos < len(lhs.rstrip()):
        t = _LINEAR_TERM.match(lhs, pos)
        if not t or t.end() == pos or (not first and t.group(1) is None):
            raise _checks.model_error(where, "'a*PARAM + b*PARAM <= BOUND' (or >=) over the searched parameters", text)
        sign = -1.0 if t.group(1) == "-" else 1.0
        try:
            a = float(t.group(2)) if t.group(2) else 1.0
        except ValueError:
            raise _checks.model_error(where, "numeric coefficients", text) from None
        name = t.group(3)
        full = name if name in space.names else space._resolve(name)
        if full not in space.names:
            raise _checks.model_error(where, "a linear constraint on the searched parameters ("
                                      + ", ".join(space.names) + ")", name)
        coef[space.names.index(full)] += sign * a
        pos, first = t.end(), False
    try:
        b = float(bound)
    except ValueError:
        raise _checks.model_error(where, "a numeric bound", text) from None
    return coef, op, _checks.real(where, b)


def _parse_constraints(constraints: Any, space: "_Space | None" = None
                       ) -> tuple[list[tuple[str, str, float]], list[tuple[np.ndarray, str, float, str]]]:
    """Constraints -> (on metrics: [(metric, op, bound)], on parameters: [(coefficients, op, bound, text)]).

    ``"loss<=0.02"`` or ``("loss", "<=", 0.02)`` bounds a metric; ``"aqm.max_th - aqm.min_th >= 5"``
    (a linear combination of the searched parameters) bounds the parameters."""
    from .stationary import SCALAR_METRICS

    if constraints is None:
        return [], []
    if isinstance(constraints, (str, tuple)):
        constraints = [constraints]
    names = [n for n, _ in SCALAR_METRICS]
    out, linear = [], []
    for i, c in enumerate(constraints):
        where = f"constraints[{i}]"
        if isinstance(c, str):
            m = _CONSTRAINT.match(c)
            if not m:
                if "." in c.split("<")[0].split(">")[0] and space is not None:
                    coef, op, bound = _parse_linear(c, where, space)
                    linear.append((coef, op, bound, " ".join(c.split())))
                    continue
                raise _checks.model_error(where, "'METRIC<=BOUND', 'METRIC>=BOUND' or a linear bound on the "
                                          "parameters ('aqm.max_th - aqm.min_th >= 5')", c)
            metric, op, bound = m.group(1), m.group(2), m.group(3)
        elif isinstance(c, (tuple, list)) and len(c) == 3:
            metric, op, bound = c
        else:
            raise _checks.model_error(where, "'METRIC<=BOUND' or (metric, op, bound)", c)
        if metric not in names:
            raise _checks.model_error(where, "a scalar metric (" + ", ".join(names) + ")", metric)
        if op not in ("<=", ">="):
            raise _checks.model_error(where, "'<=' or '>='", op)
        out.append((metric, op, _checks.real(where, float(bound) if isinstance(bound, str) else bound)))
    return out, linear


class _Gradients:
    """The objective's and the constraints' gradients at an evaluated point: the sensitivities of
    its stationary result (or ``gradient(result, names)`` for a custom evaluation), cached by point."""

    def __init__(self, f: _Objective, names: list[str], objective: str | None, gradient: Callable | None):
        self.f, self.names, self.objective, self.gradient = f, names, objective, gradient
        self.keys = [_SENSITIVITY_KEY.get(n, n) for n in names]
        self.cache: dict[tuple, dict[str, np.ndarray]] = {}

    def at(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """{metric: gradient} of the objective (key "objective") and of each constrained metric."""
        key = tuple(float(f"{v:.12g}") for v in x)
        if key in self.cache:
            return self.cache[key]
        result = self.f.results.get(key)
        if result is None:  # the point was not solved (infeasible or failed): no gradient
            return {}
        t0 = time.perf_counter()
        if self.gradient is not None:
            g = {"objective": np.asarray(self.gradient(result, self.names), dtype=float)}
            if g["objective"].shape != (len(self.names),) or not np.all(np.isfinite(g["objective"])):
                raise _checks.model_error("gradient", f"a callable returning {len(self.names)} finite numbers",
                                          g["objective"])
        else:
            from .sensitivity import sensitivities, sensitivity_metrics

            metrics = list(dict.fromkeys([self.objective] + [c[0] for c in self.f.constraints]))
            allowed = sensitivity_metrics(result)
            s = None
            missing = [m for m in metrics if m not in allowed]
            if not missing:
                s = sensitivities(result, metrics=metrics, params=self.keys)
                missing = [m for m in metrics if m not in s.values]
            if missing:
                raise _checks.model_error("objective" if missing[0] == self.objective else "constraints",
                                          "a metric with a sensitivity on this model (" + ", ".join(allowed) + ")",
                                          missing[0])
            g = {m: np.array([s.values[m][k] for k in self.keys]) for m in metrics}
            g["objective"] = g[self.objective]
        self.f.gradients += 1
        self.f.gradient_seconds += time.perf_counter() - t0
        self.cache[key] = g
        while len(self.cache) > 8:
            del self.cache[next(iter(self.cache))]
        return g


def _gradient_search(method: str, grads: _Gradients, bounds: np.ndarray, linear: Any):
    """A run of SciPy's ``method`` from x0 in the coordinates u = x / h, with the exact gradients."""

    def run(f: _Objective, x0: np.ndarray, h: np.ndarray, min_step: np.ndarray) -> tuple[np.ndarray, float]:
        from scipy.optimize import minimize

        f0 = f(x0)
        if not math.isfinite(f0):
            return x0, math.inf
        scale = max(1.0, abs(f0))

        def fun(u):
            x = np.asarray(u, dtype=float) * h
            v = f(x)
            if not math.isfinite(v):
                return math.inf, np.zeros_like(x)
            return v, grads.at(x)["objective"] * h

        ub = [(lo / hk if math.isfinite(lo) else None, hi / hk if math.isfinite(hi) else None)
              for (lo, hi), hk in zip(bounds, h)]
        cons = []
        for i, (metric, op, bound) in enumerate(f.constraints):
            sign = -1.0 if op == "<=" else 1.0

            def c(u, metric=metric, sign=sign, bound=bound):
                x = np.asarray(u, dtype=float) * h
                f(x)
                r = f.results.get(tuple(float(f"{v:.12g}") for v in x))
                return sign * (getattr(r, metric) - bound) if r is not None else -math.inf

            def jac(u, metric=metric, sign=sign):
                x = np.asarray(u, dtype=float) * h
                f(x)
                g = grads.at(x)
                return sign * g[metric] * h if g else np.zeros_like(x)

            cons.append((c, jac))
        sc = [{"type": "ineq", "fun": c, "jac": j} for c, j in cons]
        for a, op, bound, _ in linear:  # a.x <= bound: bound - a.x >= 0; >=: a.x - bound >= 0
            sg = -1.0 if op == "<=" else 1.0
            sc.append({"type": "ineq", "fun": lambda u, a=a, sg=sg, bound=bound: sg * (a @ (u * h) - bound),
                       "jac": lambda u, a=a, sg=sg: sg * a * h})
        with np.errstate(invalid="ignore", over="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SciPy's notes (e.g. a clipped bound); its message is kept
            if method == "lbfgsb":
                res = minimize(fun, x0 / h, jac=True, method="L-BFGS-B", bounds=ub,
                               options={"ftol": 1e-12, "gtol": 1e-9 * scale, "maxiter": 500})
            else:  # slsqp
                res = minimize(fun, x0 / h, jac=True, method="SLSQP", bounds=ub, constraints=sc,
                               options={"ftol": 1e-12 * scale, "maxiter": 500})
        f.run_message = f"{method}: {res.message}"
        x = np.clip(np.asarray(res.x, dtype=float) * h, bounds[:, 0], bounds[:, 1])
        return x, float(f(x))

    return run


def _runner(method: str, f: _Objective, names: list[str], gradient: Callable | None, bounds: np.ndarray) -> Callable:
    """The search function of ``method`` for the objective f (gradient methods keep f's last results)."""
    if method == "hooke_jeeves":
        return _hooke_jeeves
    if method == "nelder_mead":
        return _nelder_mead
    f.keep_results = 8
    f.enforce_constraints = method == "lbfgsb"  # SLSQP takes the constraints itself
    linear = list(f.linear)
    if any(n in TRIPLE for n in names):  # the triple's coefficients: x + y + z <= 1 (a_1 >= 0)
        linear.append((np.array([1.0 if n in TRIPLE else 0.0 for n in names]), "<=", 1.0, "x + y + z <= 1"))
    return _gradient_search(method, _Gradients(f, names, f.objective_name, gradient), bounds, linear)


def _hooke_jeeves(f: _Objective, x0: np.ndarray, step: np.ndarray, min_step: np.ndarray) -> tuple[np.ndarray, float]:
    """Pattern search: exploratory moves (+h_i, else -h_i, per coordinate), pattern moves
    x_p = 2 x_new - x_old while they improve, halving every h_i when no move improves;
    stops when every h_i < min_step_i."""
    h = step.copy()

    def explore(x: np.ndarray, fx: float) -> tuple[np.ndarray, float]:
        x = x.copy()
        for i in range(len(x)):
            for d in (h[i], -h[i]):
                y = x.copy()
                y[i] += d
                fy = f(y)
                if fy < fx:
                    x, fx = y, fy
                    break
        return x, fx

    base = x0.astype(float)
    fb = f(base)
    if not math.isfinite(fb):
        return base, fb
    while np.any(h >= min_step):
        x, fx = explore(base, fb)
        if fx < fb:
            while True:  # pattern moves while they pay
                prev, base, fb = base, x, fx
                xp = base + (base - prev)
                x, fx = explore(xp, f(xp))
                if not fx < fb:
                    break
            continue
        h = h / 2.0
    return base, fb


def _nelder_mead(f: _Objective, x0: np.ndarray, step: np.ndarray, min_step: np.ndarray) -> tuple[np.ndarray, float]:
    from scipy.optimize import minimize

    if not math.isfinite(f(x0)):
        return x0, math.inf
    simplex = np.vstack([x0] + [x0 + np.eye(len(x0))[i] * step[i] for i in range(len(x0))])
    with np.errstate(invalid="ignore", over="ignore"):
        res = minimize(f, x0, method="Nelder-Mead",
                       options={"initial_simplex": simplex, "xatol": float(np.min(min_step)), "fatol": 1e-9,
                                "maxfev": 10**9, "adaptive": len(x0) > 2})
    return np.asarray(res.x, dtype=float), float(f(res.x))


def _starts(starts: Any, space: _Space) -> list[np.ndarray]:
    d = len(space.names)
    if starts is None or (isinstance(starts, str) and starts == "current"):
        return [np.array(space.current, dtype=float)]
    if isinstance(starts, str):
        if starts not in PAPER_GRID_NAMES:
            raise _checks.model_error("starts", f"{' or '.join(map(repr, PAPER_GRID_NAMES))}, 'current', a list of "
                                      "points or a dict of value lists", starts)
        if space.names != list(TRIPLE):
            raise _checks.model_error("starts", "used with params='triple' ('paper' is a grid of triples)", starts)
        return [np.array(p, dtype=float) for p in PAPER_GRID_STARTS]
    if isinstance(starts, dict):  # a grid: the product of per-parameter value lists
        keys = [space._resolve(k) if k != "triple" else k for k in starts]
        if sorted(keys) != sorted(space.names):
            raise _checks.model_error("starts", f"a value list for each of {', '.join(space.names)}", list(starts))
        lists = {k: _checks.reals(f"starts[{k}]", v) for k, v in zip(keys, starts.values())}
        return [np.array(p, dtype=float) for p in itertools.product(*(lists[n] for n in space.names))]
    pts = []
    for i, p in enumerate(starts):
        v = _checks.reals(f"starts[{i}]", p) if not isinstance(p, (int, float)) else [_checks.real(f"starts[{i}]", p)]
        if len(v) != d:
            raise _checks.model_error(f"starts[{i}]", f"{d} values (one per parameter)", p)
        pts.append(np.array(v, dtype=float))
    if not pts:
        raise _checks.model_error("starts", "at least one starting point", starts)
    return pts


def optimize(model: _core.Model, params: str | Sequence[str] = "triple", objective: str | Callable = "mean_response",
             *, bounds: dict[str, tuple[float, float]] | Sequence[tuple[float, float]] | None = None,
             method: str = "hooke_jeeves", starts: Any = None, step: Sequence[float] | None = None,
             min_step: Sequence[float] | float | None = None, max_evals: int = 10**9,
             evaluate: Callable[[_core.Model], Any] | None = None, solver: dict | None = None,
             callback: Callable[[dict], Any] | None = None, scheduler: Any = None,
             workers: int | None = None, warm: bool = True, constraints: Any = None,
             gradient: Callable[[Any, list[str]], Sequence[float]] | None = None,
             fidelity: Sequence[dict[str, Any]] | None = None, keep: int = FIDELITY_KEEP,
             screen: int | None = None, fidelity_stop: bool = True) -> OptimizeResult:
    """Minimise ``objective`` over model parameters by direct search.

    ``params``: ``"triple"`` (REDwM's [x, y, z], the default; an EWMA model starts from
    [w, 0, 0]), or model-file keys (``"aqm.w"``, ``"service.mu"``, ``"aqm.a[1]"``, or a bare key
    found in one section, ``"p_max"``).  ``objective``: a scalar metric name of the result
    (:data:`aqmchain.stationary.SCALAR_METRICS`, e.g. ``"mean_response"``, ``"loss"``,
    ``"mean_queue"``) or a callable ``result -> float``; minimised.  ``bounds``: per parameter
    ``(lo, hi)`` (a dict by name or a list in order; the triple defaults to [0, 1] each, other
    parameters to no bound beyond the model's own validation).  ``starts``: None / "current"
    (the model's values), ``"paper"`` (also ``"paper-grid"``: the 10 x 10 x 10 triple grid of the REDwM paper), a
    list of points, or a dict of value lists (their product).  ``step``: first step per
    parameter (triple: 0.01, 0.001, 0.001; others 10 % of the value, or 0.1 at 0); ``min_step``:
    the search stops below it (default step / 64).  ``max_evals``: budget of solves over all
    starts.  ``evaluate``: ``model -> result`` (default: :func:`solve_stationary` with the
    ``solver`` options).  ``callback(record)`` is called with each trace record; returning
    True stops the search.  ``warm``: the default evaluation starts each solve from the nearest
    of the last few solutions of the same start (coordinates divided by their first steps;
    ``solve_stationary(..., warm=...)``, docs/solvers.md): the values are the cold ones to
    the solver's tolerance; ``warm=False`` solves every point cold.

    Infeasible points (outside the bounds, or refused by the model: negative coefficients,
    x + y + z > 1, ...) get +inf and are never evaluated; a failed evaluation (non-convergence,
    state space too large, a reducible chain) is recorded in the trace and counts as +inf.

    ``method``: one of :data:`OPTIMIZE_METHODS`.  The gradient methods (``lbfgsb``, ``slsqp``:
    SciPy's L-BFGS-B and SLSQP) take the objective's gradient
    from the sensitivities of each solved point (:func:`aqmchain.sensitivity.sensitivities`, one
    adjoint solve per metric; the objective must be a metric with a sensitivity, the parameters
    continuous model parameters) and work in the coordinates x / step.  ``constraints``: bounds
    on metrics, ``"loss<=0.02"`` or ``("loss", "<=", 0.02)`` or a list of them: SLSQP takes
    them with their exact Jacobians (and the triple's x + y + z <= 1 as a
    linear constraint); the direct searches and L-BFGS-B (bounds only) treat a violating point
    as infeasible (+inf, after its solve).  ``gradient(result, params) -> values``: the
    gradient of a callable objective for a gradient method.  A constraint may also bound a
    linear combination of the searched parameters, ``"aqm.max_th - aqm.min_th >= 5"``: SLSQP takes
    it as a linear constraint, the other methods never build a point that breaks it.

    ``fidelity``: multi-fidelity search.  A list of model-file overrides, coarsest first (e.g.
    ``[{"grid.k": 1, "grid.refine": "none"}, {"grid.k": 2, "grid.refine": "none"}]``); the model
    as given is the last, finest level.  Every start runs on the coarsest level; the best
    ``keep`` distinct end points start the search on the next level, with first steps of 4
    ``min_step``; and so on.  At each finer level the objective's discretisation error at the
    level's best start point is the difference of its values on this level and the one below;
    when the search's improvement on a level is smaller than that error, finer searching
    cannot be told from the grid's error: the search stops there and the point is evaluated
    on the finest level (``fidelity_stop=False`` searches every level).  ``value_error`` is the difference of the optimum's objective on the
    two finest levels evaluated, the discretisation error bar; ``levels`` has one record per level.
    ``screen``: evaluate every start once (on the coarsest level) and search only from the best
    ``screen`` of them: a global design of many starts (``starts="paper"``) at the cost of one
    solve per start.

    ``scheduler``: ``None`` runs the starts one after the other in this process, sharing one
    cache of evaluated points and one budget.  Otherwise the starts run as independent tasks
    through the machinery of :func:`aqmchain.sweep` (``run_tasks`` in its module: ``"local"`` a Dask
    LocalCluster of ``workers`` processes, ``"sync"`` in this process, an address or a
    ``dask.distributed.Client``): each start has its own cache and ``max_evals`` is split
    evenly over the starts (at least one evaluation each), so that the result does not depend
    on the order in which the workers finish; ``callback`` sees each start's records when the
    start has finished (returning True cancels the starts not yet finished).  ``evaluate``
    and a callable ``objective`` must then be picklable (module-level functions).
    """
    if not isinstance(model, _core.Model):
        raise _checks.model_error("model", "an aqmchain.Model", model)
    if method not in OPTIMIZE_METHODS:
        raise _checks.model_error("method", "one of " + ", ".join(OPTIMIZE_METHODS), method)
    if fidelity is not None or screen is not None:
        if not isinstance(fidelity_stop, bool):
            raise _checks.model_error("fidelity_stop", "True or False", fidelity_stop)
        return _optimize_levels(model, fidelity or [], keep, screen, fidelity_stop, dict(
            params=params, objective=objective, bounds=bounds, method=method, starts=starts, step=step,
            min_step=min_step, max_evals=max_evals, evaluate=evaluate, solver=solver, callback=callback,
            scheduler=scheduler, workers=workers, warm=warm, constraints=constraints, gradient=gradient))
    space = _Space(model, params)
    d = len(space.names)
    if isinstance(objective, str):
        from .stationary import SCALAR_METRICS

        names = [n for n, _ in SCALAR_METRICS]
        if evaluate is None and objective not in names:
            raise _checks.model_error("objective", "a scalar metric (" + ", ".join(names) + ") or a callable",
                                      objective)
        obj_name = objective
        metric = lambda r: getattr(r, objective)  # noqa: E731
    elif callable(objective):
        obj_name, metric = getattr(objective, "__name__", "objective"), objective
    else:
        raise _checks.model_error("objective", "a metric name or a callable", objective)
    custom_evaluate = evaluate is not None
    cons, linear = _parse_constraints(constraints, space)
    if method in GRADIENT_METHODS:
        if gradient is None and not isinstance(objective, str):
            raise _checks.model_error("gradient", f"a callable (result, params) -> gradient for method {method!r} "
                                      "with a callable objective", gradient)
        if gradient is None and custom_evaluate:
            raise _checks.model_error("gradient", f"a callable (result, params) -> gradient for method {method!r} "
                                      "with a custom evaluate", gradient)
        if cons and gradient is not None:
            raise _checks.model_error("constraints", f"absent with a custom gradient (method {method!r} needs the "
                                      "constraints' gradients, which only the sensitivities give)", constraints)
        if gradient is None:
            from .sensitivity import sensitivity_parameters

            known = sensitivity_parameters(space.model_at(space.current))
            for n in space.names:
                if _SENSITIVITY_KEY.get(n, n) not in known:
                    raise _checks.model_error("params", f"continuous parameters with a sensitivity for method "
                                              f"{method!r} (" + ", ".join(known) + ")", n)
    elif gradient is not None:
        raise _checks.model_error("gradient", f"absent for method {method!r} (only {', '.join(GRADIENT_METHODS)} "
                                  "use it)", gradient)
    if not isinstance(warm, bool):
        raise _checks.model_error("warm", "True or False", warm)
    if evaluate is None:
        from .stationary import solve_stationary

        opts = dict(solver or {})
        evaluate = None if warm else (lambda m: solve_stationary(m, **opts))  # noqa: E731  (warm: below, with h)
    elif solver:
        raise _checks.model_error("solver", "absent when evaluate is given (evaluate solves)", solver)
    # bounds
    b = np.array([[0.0, 1.0] if n.startswith("aqm.triple[") else [-math.inf, math.inf] for n in space.names])
    if bounds is not None:
        items = bounds.items() if isinstance(bounds, dict) else zip(space.names, bounds)
        for name, lohi in items:
            full = name if name in space.names else space._resolve(name)
            if full not in space.names:
                raise _checks.model_error("bounds", f"bounds of the searched parameters ({', '.join(space.names)})",
                                          name)
            lo, hi = (_checks.real(f"bounds[{name}]", v) if v is not None else s for v, s in zip(lohi, (-math.inf, math.inf)))
            if not lo <= hi:
                raise _checks.model_error(f"bounds[{name}]", "(lo, hi) with lo <= hi", lohi)
            b[space.names.index(full)] = (lo, hi)
    # steps
    cur = np.array(space.current, dtype=float)
    if step is None:
        h = np.array([TRIPLE_STEP[TRIPLE.index(n)] if n in TRIPLE else (0.1 * abs(c) if c != 0 else 0.1)
                      for n, c in zip(space.names, cur)])
    else:
        h = np.array(_checks.reals("step", step), dtype=float)
        if h.shape != (d,) or not np.all(h > 0):
            raise _checks.model_error("step", f"{d} positive numbers", step)
    if min_step is None:
        hmin = h / 64.0
    else:
        hmin = np.broadcast_to(np.array(_checks.reals("min_step", np.atleast_1d(min_step)), dtype=float), (d,)).copy()
        if not np.all(hmin > 0):
            raise _checks.model_error("min_step", "positive", min_step)
    max_evals = _checks.integer("max_evals", max_evals, 1, 10**9)
    points = _starts(starts, space)
    inside = [not np.any((x0 < b[:, 0]) | (x0 > b[:, 1])) for x0 in points]
    if isinstance(starts, str) and starts in PAPER_GRID_NAMES and any(inside):
        points = [x0 for x0, ok in zip(points, inside) if ok]  # the part of the grid inside the bounds
    elif not all(inside):  # a start outside the bounds is bad input, not an infeasible point
        i = inside.index(False)
        j = int(np.argmax((points[i] < b[:, 0]) | (points[i] > b[:, 1])))
        where = "the model's current value" if starts is None or starts == "current" else f"starts[{i}]"
        raise _checks.model_error("starts", f"inside the bounds, {space.names[j]} in [{b[j, 0]!r}, {b[j, 1]!r}] "
                                  f"({where})", f"{space.names[j]} = {float(points[i][j])!r}")

    if scheduler is not None:
        return _optimize_distributed(model, space, obj_name, objective, evaluate if custom_evaluate else None,
                                     dict(solver or {}), method, b, points, h, hmin, max_evals, callback,
                                     scheduler, workers, warm, constraints, gradient)
    if evaluate is None:  # warm starts, distances in units of the first steps
        evaluate = _WarmSolve(dict(solver or {}), h)
    f = _Objective(space, b, evaluate, metric, max_evals, callback)
    f.objective_name = obj_name if isinstance(objective, str) else None
    f.constraints, f.linear = cons, linear
    run = _runner(method, f, space.names, gradient, b)
    t0 = time.perf_counter()
    per_start: list[dict[str, Any]] = []
    stopped = False
    for i, x0 in enumerate(points):
        f.start = i
        before = f.evaluations
        rec, stopped = _run_start(f, run, space.names, x0, h, hmin)
        rec["evaluations"] = f.evaluations - before
        per_start.append(rec)
        if stopped:
            break
    seconds = time.perf_counter() - t0
    value, xb, mb = f.best
    return OptimizeResult(params=list(space.names), objective=obj_name, method=method,
                          x=None if xb is None else dict(zip(space.names, map(float, xb))), value=float(value),
                          model=mb, evaluations=f.evaluations, cache_hits=f.cache_hits, infeasible=f.infeasible,
                          failed=f.failed, seconds=seconds, starts=per_start, trace=f.trace, stopped=stopped,
                          gradients=f.gradients, gradient_seconds=f.gradient_seconds, min_step=list(map(float, hmin)),
                          message=f.stop_message if stopped else ("" if xb is not None else
                                                                   "every evaluated point failed or was infeasible"))


def _run_start(f: Any, run: Callable, names: list[str], x0: np.ndarray, h: np.ndarray,
               hmin: np.ndarray) -> tuple[dict[str, Any], bool]:
    """One start of the search from x0: its record (start, end, value, message) and whether
    a budget stopped it."""
    rec = {"start": dict(zip(names, map(float, x0))), "end": None, "value": math.inf, "evaluations": 0,
           "message": ""}
    f.run_message = ""
    try:
        xe, fe = run(f, x0, h, hmin)
        rec.update(end=dict(zip(names, map(float, xe))), value=float(fe), message=f.run_message)
        if not math.isfinite(fe):
            rec["message"] = "the start point is infeasible or its evaluation failed"
    except _Stop:
        rec["message"] = f.stop_message
        return rec, True
    return rec, False


# ------------------------------------------------------------------ starts on Dask


def _start_task(model: _core.Model, params: list[str], objective: Any, evaluate: Callable | None, solver: dict,
                method: str, bounds: np.ndarray, x0: np.ndarray, h: np.ndarray, hmin: np.ndarray, budget: int,
                start: int, warm: bool = True, constraints: list | None = None,
                gradient: Callable | None = None) -> dict[str, Any]:
    """One start of the search, run on a worker: its record, trace and counts."""
    space = _Space(model, params)
    space.names = list(params)  # already resolved by the caller
    metric = (lambda r: getattr(r, objective)) if isinstance(objective, str) else objective  # noqa: E731
    if evaluate is None and warm:
        evaluate = _WarmSolve(solver, h)
    elif evaluate is None:
        from .stationary import solve_stationary

        evaluate = lambda m: solve_stationary(m, **solver)  # noqa: E731
    f = _Objective(space, bounds, evaluate, metric, budget, None)
    f.objective_name = objective if isinstance(objective, str) else None
    f.start = start
    f.constraints, f.linear = _parse_constraints(constraints, space)
    run = _runner(method, f, space.names, gradient, bounds)
    rec, _ = _run_start(f, run, space.names, x0, h, hmin)
    rec["evaluations"] = f.evaluations
    value, xb, _ = f.best
    return {"record": rec, "trace": f.trace, "evaluations": f.evaluations, "cache_hits": f.cache_hits,
            "infeasible": f.infeasible, "failed": f.failed, "gradients": f.gradients,
            "gradient_seconds": f.gradient_seconds, "best_value": float(value),
            "best_x": None if xb is None else [float(v) for v in xb]}


def _optimize_distributed(model, space, obj_name, objective, evaluate, solver, method, bounds, points, h, hmin,
                          max_evals, callback, scheduler, workers, warm=True, constraints=None,
                          gradient=None) -> OptimizeResult:
    from .sweep import run_tasks

    budget = max(1, max_evals // len(points))
    args = [(model, list(space.names), objective, evaluate, solver, method, bounds, x0, h, hmin, budget, i, warm,
             constraints, gradient) for i, x0 in enumerate(points)]
    stopped = [False]

    class _Cancel(Exception):
        pass

    def on_done(i: int, out: dict) -> None:
        if callback is None or stopped[0]:
            return
        for r in out["trace"]:
            if callback(r):
                stopped[0] = True
                raise _Cancel

    def on_error(i: int, exc: BaseException) -> dict[str, Any]:  # the start's task failed (e.g. its worker died)
        if isinstance(exc, ModelError) and not isinstance(exc, StateSpaceTooLarge):
            raise exc  # bad input (an objective the model does not define): not a failed start
        rec = {"start": dict(zip(space.names, map(float, points[i]))), "end": None, "value": math.inf,
               "evaluations": 0, "message": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}
        return {"record": rec, "trace": [], "evaluations": 0, "cache_hits": 0, "infeasible": 0, "failed": 0,
                "gradients": 0, "gradient_seconds": 0.0, "best_value": math.inf, "best_x": None}

    t0 = time.perf_counter()
    try:
        outs = run_tasks(_start_task, args, scheduler=scheduler, workers=workers, on_done=on_done,
                         on_error=on_error)
    except _Cancel:
        outs = None
    seconds = time.perf_counter() - t0
    if outs is None:
        return OptimizeResult(params=list(space.names), objective=obj_name, method=method, x=None, value=math.inf,
                              model=None, evaluations=0, cache_hits=0, infeasible=0, failed=0, seconds=seconds,
                              starts=[], trace=[], stopped=True, message="the callback asked to stop")
    trace, starts = [], []
    best_value, best_x = math.inf, None
    counts = {"evaluations": 0, "cache_hits": 0, "infeasible": 0, "failed": 0, "gradients": 0, "gradient_seconds": 0.0}
    for out in outs:
        for r in out["trace"]:
            trace.append({**r, "index": len(trace)})
        starts.append(out["record"])
        for k in counts:
            counts[k] += out[k]
        if out["best_x"] is not None and out["best_value"] < best_value:
            best_value, best_x = out["best_value"], out["best_x"]
    best_model = space.model_at(best_x) if best_x is not None else None
    return OptimizeResult(params=list(space.names), objective=obj_name, method=method,
                          x=None if best_x is None else dict(zip(space.names, best_x)), value=float(best_value),
                          model=best_model, seconds=seconds, starts=starts, trace=trace, stopped=False,
                          message="" if best_x is not None else "every evaluated point failed or was infeasible",
                          min_step=list(map(float, hmin)), **counts)


# ------------------------------------------------------------------ multi-fidelity


def _optimize_levels(model: _core.Model, fidelity: Any, keep: Any, screen: Any, fidelity_stop: bool,
                     kw: dict[str, Any]) -> OptimizeResult:
    """optimize() over a sequence of models, coarsest first (see ``fidelity`` and ``screen`` in
    :func:`optimize`)."""
    from .modelfile import apply_overrides

    if isinstance(fidelity, (str, dict)) or not isinstance(fidelity, (list, tuple)):
        raise _checks.model_error("fidelity", "a non-empty list of model-file overrides (dicts), coarsest first",
                                  fidelity)
    if not fidelity and screen is None:
        raise _checks.model_error("fidelity", "a non-empty list of model-file overrides (dicts), coarsest first",
                                  fidelity)
    keep = _checks.integer("keep", keep, 1, 10**6)
    if screen is not None:
        screen = _checks.integer("screen", screen, 1, 10**9)
    base = model_to_dict(model)
    models, labels = [], []
    for i, over in enumerate(list(fidelity) + [{}]):
        if not isinstance(over, dict):
            raise _checks.model_error(f"fidelity[{i}]", "a dict of model-file overrides", over)
        try:
            models.append(model_from_dict(apply_overrides(base, over))[0])
        except ModelError as exc:
            raise _checks.model_error(f"fidelity[{i}]", f"overrides giving a valid model ({exc})", over) from None
        labels.append(", ".join(f"{k}={v}" for k, v in over.items()))
    budget = _checks.integer("max_evals", kw.pop("max_evals"), 1, 10**9)
    callback = kw.pop("callback")
    starts = kw.pop("starts")
    t0 = time.perf_counter()
    levels: list[dict[str, Any]] = []
    trace: list[dict[str, Any]] = []
    starts_all: list[dict[str, Any]] = []
    totals = {"evaluations": 0, "cache_hits": 0, "infeasible": 0, "failed": 0, "gradients": 0,
              "gradient_seconds": 0.0}
    final = len(models) - 1

    def run(lv: int, points: Any, limit: int | None = None, **over: Any) -> OptimizeResult:
        left = budget - totals["evaluations"]
        if left < 1:
            raise _Stop
        cb = None if callback is None else (lambda rec: callback({**rec, "level": lv}))
        r = optimize(models[lv], starts=points, max_evals=min(left, limit or left), callback=cb, **{**kw, **over})
        for k in totals:
            totals[k] += getattr(r, k)
        trace.extend({**t, "index": len(trace) + j, "level": lv} for j, t in enumerate(r.trace))
        return r

    def value_at(lv: int, x: dict[str, float]) -> float:
        """The objective at x on level lv (one solve, recorded in the trace)."""
        r = run(lv, [[x[p] for p in x]], 1, method="hooke_jeeves", gradient=None)
        return r.trace[0]["value"] if r.trace else math.inf

    res: OptimizeResult | None = None
    stopped, message, value_error = False, "", None
    try:
        if screen is not None:  # one solve per start on the coarsest level, the best `screen` go on
            t_screen = time.perf_counter()
            space = _Space(models[0], kw["params"])
            values = []
            for p in _starts(starts, space):
                try:
                    r = run(0, [list(p)], 1, method="hooke_jeeves", gradient=None)
                except ModelError as exc:
                    if getattr(exc, "param", None) != "starts":
                        raise
                    continue  # a start of the grid outside the bounds
                values.append((r.trace[0]["value"] if r.trace else math.inf, tuple(map(float, p))))
            if not values:
                raise _checks.model_error("starts", "at least one start inside the bounds", starts)
            ranked = [p for v, p in sorted(values) if math.isfinite(v)]
            levels.append({"level": 0, "overrides": labels[0], "starts": len(values), "evaluations": len(values),
                           "value": min((v for v, _ in values), default=math.inf), "x": None,
                           "seconds": time.perf_counter() - t_screen, "improvement": None,
                           "discretisation_error": None,
                           "note": f"screening: every start evaluated once, the best {screen} searched"})
            starts = [list(p) for p in ranked[:screen]] or [list(values[0][1])]
        for lv in range(len(models)):
            over = {} if lv == 0 else {"step": list(4.0 * np.asarray(res.min_step)), "min_step": list(res.min_step)}
            res_lv = run(lv, starts, **over)
            starts_all.extend({**r, "level": lv} for r in res_lv.starts)
            rec = {"level": lv, "overrides": labels[lv], "starts": len(res_lv.starts),
                   "evaluations": res_lv.evaluations, "value": res_lv.value, "x": res_lv.x,
                   "seconds": res_lv.seconds, "improvement": None, "discretisation_error": None, "note": ""}
            levels.append(rec)
            if not res_lv.success or res_lv.stopped:
                res = res_lv if res_lv.success or res is None else res
                stopped, message = res_lv.stopped, res_lv.message
                break
            if lv > 0:  # the best start of this level: its value here and on the level below
                firsts = {tuple(map(float, p)) for p in starts}
                begun = [r for r in res_lv.trace if r["status"] == "ok" and tuple(r["x"].values()) in firsts]
                if begun:
                    b = min(begun, key=lambda r: r["value"])
                    rec["improvement"] = b["value"] - res_lv.value
                    rec["discretisation_error"] = abs(b["value"] - value_at(lv - 1, b["x"]))
            res = res_lv
            if lv == final:
                value_error = abs(res.value - value_at(lv - 1, res.x)) if lv > 0 else None
                break
            if (fidelity_stop and rec["discretisation_error"] is not None
                    and rec["improvement"] < rec["discretisation_error"]):
                rec["note"] = ("the search's improvement is within the discretisation error: the point is evaluated "
                               "on the finest level, not searched further")
                fin = run(final, [[res.x[p] for p in res.params]], 1, method="hooke_jeeves", gradient=None)
                levels.append({"level": final, "overrides": labels[final], "starts": 1,
                               "evaluations": fin.evaluations, "value": fin.value, "x": fin.x,
                               "seconds": fin.seconds, "improvement": None, "discretisation_error": None,
                               "note": "evaluated only"})
                if fin.success:
                    value_error = abs(fin.value - res.value)
                    res = fin
                break
            ends = sorted((r["value"], tuple(r["end"][p] for p in res_lv.params)) for r in res_lv.starts
                          if r["end"] is not None and math.isfinite(r["value"]))
            starts = [list(x) for x in dict.fromkeys(x for _, x in ends)][:keep]
    except _Stop:
        stopped, message = True, f"max_evals = {budget} evaluations reached"
    seconds = time.perf_counter() - t0
    ok = res is not None and res.success
    return OptimizeResult(params=res.params if res else [], objective=res.objective if res else "",
                          method=kw["method"], x=res.x if ok else None, value=res.value if ok else math.inf,
                          model=res.model if ok else None, seconds=seconds, starts=starts_all, trace=trace,
                          stopped=stopped, message=message or ("" if ok else "no point was evaluated successfully"),
                          levels=levels, value_error=value_error, min_step=res.min_step if res else None, **totals)
