"""Sensitivities: d(metric)/d(parameter) of a solved model by one adjoint solve per metric (metrics
with equal right-hand sides share one).

A metric of a stationary solution is a function of ratios ``r = (pi a) / (pi b)`` of
per-state vectors built from the chain's event weights and state labels (the vectors the
metrics are computed from).  With ``pi (I - P) = 0`` (continuous time: ``pi G = 0``) and
``sum(pi) = 1``, the derivative along a parameter theta is

    dF/dtheta = pi (dP/dtheta) y + sum_i F_i pi (da_i - r_i db_i) / (pi b_i)

where ``F_i = dF/dr_i``, ``c = sum_i F_i (a_i - r_i b_i) / (pi b_i)`` and ``y`` solves the
adjoint system ``(I - P) y = c - (pi c) 1`` (continuous time: ``-G y = c - (pi c) 1`` and
``dG`` in place of ``dP``).  One adjoint solve per metric, then every parameter costs a
sparse product.  The matrix is singular but the system is consistent: ``y`` is fixed to 0
at the state of largest ``pi`` and that state's equation is dropped.

``dP/dtheta`` and the vectors' derivatives come from the chains at ``theta +- h`` on the
same resolved grid (same avg points, REDwM s points and drop-spacing caps) with the same
states: their rows are generated on the solved chain's states and multiplied into the
adjoint vectors in the core (``_core.chain_difference``), and the chains are built only
where a side loses entries of the solved chain's rows (or a model at a step is refused); the
entries of P are low-degree polynomials in most parameters, so central differences of the
entries are accurate to round-off.  Where the grid mapping (or a
threshold on a grid point) makes P piecewise in theta, the step shrinks; when the states or
the sparsity pattern still change within the smallest step, the one-sided derivatives are
reported with a note.  docs/sensitivities.md has the method and examples.
"""

from __future__ import annotations

import functools
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from . import _checks, _core
from .modelfile import _DROP_SPECS, _SOURCE_SPECS, _STATEFUL_DEFAULTS, model_from_dict, model_to_dict
from .stationary import COMPONENTS, SCALAR_METRICS, _limit_bytes

__all__ = ["sensitivities", "sensitivity_parameters", "sensitivity_metrics", "Sensitivities", "SENSITIVITY_METHODS",
           "SENSITIVITY_DEFAULTS", "SENSITIVITY_DIFFERENCES"]

#: adjoint solvers: "krylov" (the core's restarted GMRES with the block preconditioner of the
#: stationary solvers, on the transposed system), "direct" (sparse LU of the reduced system,
#: SuperLU), "gmres" (SciPy's GMRES with an incomplete LU preconditioner), "auto" (krylov; if it
#: does not converge, direct up to ``direct_max_states`` states, else gmres)
SENSITIVITY_METHODS: tuple[str, ...] = ("auto", "krylov", "direct", "gmres")
#: how dP/dtheta is formed: "rows" (the rows of P at theta +- h generated on the chain's states
#: and multiplied into the adjoint vectors in the core, the chains built where that cannot be
#: done), "chains" (the chains at theta +- h built for every parameter)
SENSITIVITY_DIFFERENCES: tuple[str, ...] = ("rows", "chains")
#: the options of :func:`sensitivities` and their defaults, written once
SENSITIVITY_DEFAULTS: dict[str, Any] = {
    "method": "auto",
    "rel_step": 1e-4,  # h = rel_step * |theta| (a parameter at 0: h = abs_step)
    "abs_step": 1e-6,
    "shrink": (1.0, 1e-2),  # the step's factors tried until P is smooth across [theta - h, theta + h]
    "direct_max_states": 300_000,
    "move_breakpoints": True,  # grid points on the drop function's breakpoints move with them
    "tol": 1e-10,  # GMRES: relative residual of the adjoint solve
    "max_iter": 300,  # GMRES: iterations (restarted every 50)
    # "rows": the differences of P along a parameter generated row by row in the core on the
    # chain's states where the chains at theta +- h keep its states and support (no chain is
    # built), the chains built otherwise; "chains": the chains at theta +- h always built
    "differences": "rows",
}
#: scalar metrics that are diagnostics (truncated mass, Little's-law check) or come from the
#: tagged-packet chain only, not from a ratio of pi's functionals: no sensitivity
_NOT_DIFFERENTIATED = frozenset({"response_truncated", "littles_law_error", "pushed_out_prob"})
#: numerical controls that the model file keeps in [aqm] but that are no model parameters
_NUMERICAL_KEYS = frozenset({"count_tail"})


# ------------------------------------------------------------------ metrics as functionals of pi

class _Metric:
    """F(r_1, ..., r_k) of the ratios r_i = (pi a_i) / (pi b_i): kind "ratio" (F = r_1) or
    "variance" (F = r_2 - r_1^2, r_1 and r_2 the first and second moments)."""

    __slots__ = ("kind", "pairs")

    def __init__(self, kind: str, pairs: list[tuple[np.ndarray, np.ndarray]]):
        self.kind, self.pairs = kind, pairs

    def ratios(self, pi: np.ndarray) -> list[float]:
        return [_dot(pi, a) / _dot(pi, b) for a, b in self.pairs]

    def value(self, r: Sequence[float]) -> float:
        return r[0] if self.kind == "ratio" else r[1] - r[0] ** 2

    def weights(self, r: Sequence[float]) -> list[float]:
        """dF/dr_i."""
        return [1.0] if self.kind == "ratio" else [-2.0 * r[0], 1.0]


class _LabelVectors:
    """The metric vectors that depend on a chain's labels only, each made when first asked for:
    the chains at theta +- h on the base chain's states share the base chain's (the same
    arrays, so their differences are known to be 0 without a subtraction)."""

    def __init__(self, chain):
        self._labels, self._n = chain.labels, chain.n

    @functools.cached_property
    def n(self) -> np.ndarray:
        return np.asarray(self._labels[COMPONENTS["level"]], dtype=float)

    @functools.cached_property
    def one(self) -> np.ndarray:
        return np.ones(self._n)

    @functools.cached_property
    def q(self) -> np.ndarray:
        return np.maximum(self.n - 1.0, 0.0)

    @functools.cached_property
    def n2(self) -> np.ndarray:
        return self.n * self.n

    @functools.cached_property
    def q2(self) -> np.ndarray:
        return self.q * self.q

    @functools.cached_property
    def count(self) -> np.ndarray:
        return np.asarray(self._labels[COMPONENTS["count"]], dtype=float) - 1.0


class _Reads(dict):
    """A chain's event weights by name, noting which ones are read (``read``)."""

    def __init__(self, items):
        super().__init__(items)
        self.read: set[str] = set()

    def __getitem__(self, name):
        self.read.add(name)
        return super().__getitem__(name)


def _metric_vectors(chain, response_method: str | None, names=None,
                    label_vectors: _LabelVectors | None = None, reads: set | None = None) -> dict[str, _Metric]:
    """Every differentiable scalar metric of ``chain`` (or those of ``names`` it has) as a
    :class:`_Metric`: the vectors core/src/analysis/metrics.cpp sums (events, the level n,
    q = max(n - 1, 0), avg's grid value; the closed-form response time under tail drop from the
    admissions at each n).  ``label_vectors``: those of the chain's labels, when already made.
    ``reads``: receives the names of the events the vectors read (a side of a difference then
    carries only those)."""
    ev = _Reads((k, np.asarray(v, dtype=float)) for k, v in chain.events.items())
    labels = chain.labels
    lv = label_vectors if label_vectors is not None else _LabelVectors(chain)
    flow_compare = "flow_compare" in ev
    make = {
        "arrival_rate": lambda: _Metric("ratio", [(ev["arrival"], lv.one)]),
        "throughput": lambda: _Metric("ratio", [(ev["depart"], lv.one)]),
        "loss": lambda: _Metric("ratio", [(ev["aqm_drop"] + ev["overflow"]
                                           + (ev["flow_compare"] if flow_compare else 0.0), ev["arrival"])]),
        "loss_aqm": lambda: _Metric("ratio", [(ev["aqm_drop"], ev["arrival"])]),
        "loss_overflow": lambda: _Metric("ratio", [(ev["overflow"], ev["arrival"])]),
        "mark_prob": lambda: _Metric("ratio", [(ev["mark"], ev["arrival"])]),
        "aqm_decision_prob": lambda: _Metric("ratio", [(ev["aqm_drop"] + ev["mark"], ev["arrival"])]),
        "mean_system": lambda: _Metric("ratio", [(lv.n, lv.one)]),
        "var_system": lambda: _Metric("variance", [(lv.n, lv.one), (lv.n2, lv.one)]),
        "mean_queue": lambda: _Metric("ratio", [(lv.q, lv.one)]),
        "var_queue": lambda: _Metric("variance", [(lv.q, lv.one), (lv.q2, lv.one)]),
        "mean_avg": lambda: _Metric("ratio", [(np.asarray(chain.grid)[np.asarray(chain.grid_index)], lv.one)]),
    }
    if flow_compare:
        make["loss_flow_compare"] = lambda: _Metric("ratio", [(ev["flow_compare"], ev["arrival"])])
    if response_method != "tagged_chain":  # the tagged chain's admitted rate is its own
        make["admitted_rate"] = lambda: _Metric("ratio", [(ev["admit"], lv.one)])
    if response_method == "closed_form":
        @functools.cache
        def response():
            model = chain.model
            mu = float(model.service.mu)
            adm = ev["admit"]
            n = lv.n
            w = np.where(n < model.buffer, adm, 0.0)
            if chain.time == "discrete":  # R | n: NegBin(n + 1, mu) - 1 (n >= 1), Geometric(mu) (n = 0)
                k = np.where(n == 0, 1.0, n + 1.0)
                e = np.where(n == 0, 1.0 / mu, k / mu - 1.0)
                second = k * (1.0 - mu) / (mu * mu) + e * e
            else:  # Erlang(n + 1, mu)
                k = n + 1.0
                e = k / mu
                second = (k + k * k) / (mu * mu)
            return {"mean_response": _Metric("ratio", [(w * e, adm)]), "mean_sojourn": _Metric("ratio", [(w * e, adm)]),
                    "var_response": _Metric("variance", [(w * e, adm), (w * second, adm)])}

        for name in ("mean_response", "mean_sojourn", "var_response"):
            make[name] = lambda name=name: response()[name]
    if COMPONENTS["count"] in labels:
        make["mean_count"] = lambda: _Metric("ratio", [(lv.count, lv.one)])
    out = {m: f() for m, f in make.items() if names is None or m in names}
    if reads is not None:
        reads.update(ev.read)
    return out


# ------------------------------------------------------------------ parameters

def _number_keys(spec: dict, table: dict, section: str) -> list[str]:
    """A kind's continuous parameters present in ``table``: its numbers, and each entry of its
    lists of numbers (an MMBP's per-state arrival probabilities, a polynomial's coefficients)."""
    out = []
    for p in spec["params"]:
        v = table.get(p["name"])
        if p["type"] == "a number" and isinstance(v, (int, float)):
            out.append(f"{section}.{p['name']}")
        elif p["type"] == "a list of numbers" and isinstance(v, list):
            out += [f"{section}.{p['name']}[{i}]" for i in range(len(v))]
    return out


def sensitivity_parameters(model: _core.Model) -> list[str]:
    """The continuous parameters of ``model`` by their model-file keys: the source's and the
    drop function's numbers and each entry of their lists of numbers (their registries:
    ``source.alpha``, ``source.arrival[1]``, ``aqm.coeffs[0]``), ``service.mu``, ``aqm.w`` (EWMA) or the
    REDwM coefficients, ``aqm.ecn``, the stateful AQM's numbers and the classes' shares and
    ECN probabilities.

    Constraints: REDwM's coefficients sum to 1, so ``aqm.b[j]`` and ``aqm.a[i]`` (i >= 1) are
    each moved against ``aqm.a[0]`` (the newest average's weight, ``1 - x - y - z`` of the
    paper's triple: the derivatives along ``b[0]``, ``b[1]``, ``a[1]`` are those along the
    triple's x, y, z); the class shares sum to 1 in every modulator state, so
    ``class[i].share`` (i < C - 1) is moved against the last class's share."""
    if not isinstance(model, _core.Model):
        raise _checks.model_error("model", "an aqmchain.Model", model)
    doc = model_to_dict(model)
    out: list[str] = []
    src = doc["source"]
    out += _number_keys(_SOURCE_SPECS[src["kind"]], src, "source")
    out.append("service.mu")
    aqm = doc["aqm"]
    out += _number_keys(_DROP_SPECS[aqm["drop"]], aqm, "aqm")
    if aqm.get("filter") == "redwm":
        out += [f"aqm.b[{j}]" for j in range(len(aqm["b"]))]
        out += [f"aqm.a[{i}]" for i in range(1, len(aqm["a"]))]
    else:
        out.append("aqm.w")
    if not doc.get("class"):
        out.append("aqm.ecn")
    for key, default in _STATEFUL_DEFAULTS.items():
        v = aqm.get(key)
        if (key not in _NUMERICAL_KEYS and isinstance(default, float) and isinstance(v, (int, float))
                and not isinstance(v, bool)):
            out.append(f"aqm.{key}")
    classes = doc.get("class") or []
    for i, c in enumerate(classes):
        if i < len(classes) - 1:
            share = c["share"]
            out += ([f"class[{i}].share"] if not isinstance(share, list)
                    else [f"class[{i}].share[{m}]" for m in range(len(share))])
        out.append(f"class[{i}].ecn")
    return out


def _get(doc: dict, key: str) -> float:
    sec, name, sec_idx, idx = _split(key)
    table = doc["class"][sec_idx] if sec == "class" else doc[sec]
    v = table[name]
    return float(v[idx] if idx is not None else v)


def _split(key: str) -> tuple[str, str, int | None, int | None]:
    import re

    m = re.fullmatch(r"([a-z_]+)(?:\[(\d+)\])?\.([a-z_0-9]+)(?:\[(\d+)\])?", key)
    if m is None:
        raise _checks.model_error("params", "model-file keys such as 'aqm.p_max'", key)
    sec, si, name, i = m.groups()
    return sec, name, None if si is None else int(si), None if i is None else int(i)


def _add(doc: dict, key: str, delta: float) -> None:
    sec, name, sec_idx, idx = _split(key)
    table = doc["class"][sec_idx] if sec == "class" else doc[sec]
    if idx is None:
        table[name] = float(table[name]) + delta
    else:
        table[name] = [float(x) for x in table[name]]
        table[name][idx] += delta


def _move(doc: dict, key: str, delta: float) -> None:
    """Move ``key`` by ``delta`` in place, with the compensating move that keeps a sum constraint."""
    _add(doc, key, delta)
    sec, name, sec_idx, idx = _split(key)
    if sec == "aqm" and name in ("a", "b"):
        _add(doc, "aqm.a[0]", -delta)
    elif sec == "class" and name == "share":
        last = len(doc["class"]) - 1
        _add(doc, f"class[{last}].share" + ("" if idx is None else f"[{idx}]"), -delta)


def _coef(doc: dict, name: str, i: int) -> float:
    v = doc["aqm"].get(name) or []
    return float(v[i]) if len(v) > i else 0.0


def _model_at(base: _core.Model, base_doc: dict, key: str, delta: float, move_breakpoints: bool) -> _core.Model:
    import copy

    doc = copy.deepcopy(base_doc)
    _move(doc, key, delta)
    s_pts = doc["grid"].get("s_points")
    if s_pts and key.startswith("aqm.") and doc["aqm"].get("filter") == "redwm":
        # the s grid's top point on s's largest value (a_2 + b_1) N moves with it (before the
        # document is read: a top below the new largest value is refused)
        top = lambda d: (_coef(d, "a", 1) + _coef(d, "b", 1)) * d["model"]["buffer"]  # noqa: E731
        old_top, new_top = top(base_doc), top(doc)
        if abs(s_pts[-1] - old_top) <= 1e-12 * max(1.0, old_top) and len(s_pts) > 1 and new_top > s_pts[-2]:
            doc["grid"]["s_points"] = [*s_pts[:-1], new_top]
    model, _ = model_from_dict(doc)
    if move_breakpoints and key.startswith("aqm."):
        # the grid points on the drop function's breakpoints (the automatic grid has one at
        # each) move with them: p(avg) keeps its kinks and jumps on grid points
        old = [float(x) for x in base.resolved_drop().breakpoints(base.buffer)]
        new = [float(x) for x in model.resolved_drop().breakpoints(model.buffer)]
        pts = doc["grid"].get("points")
        if pts and len(old) == len(new) and old != new:
            pts = np.asarray(pts, dtype=float)
            for b0, b1 in zip(old, new):
                pts[np.abs(pts - b0) <= 1e-12 * max(1.0, abs(b0))] = b1
            doc["grid"]["points"] = [float(x) for x in pts]
            model, _ = model_from_dict(doc)
    if base.aqm.spacing != "none":  # the same caps of the drop-spacing count
        model = (model.with_count_caps(list(base.aqm.count_trunc_at)) if len(base.aqm.count_trunc_at)
                 else model.with_count_cap(int(base.aqm.count_trunc)))
    return model


def _frozen_doc(chain) -> dict:
    """The model-file document of the chain's model on its resolved grid: explicit avg points
    (and REDwM s points), no refinement, so that a perturbed model keeps the grid."""
    model = chain.model
    doc = model_to_dict(model)
    g = doc["grid"]
    g["refine"] = "none"
    g["points"] = [float(x) for x in np.asarray(chain.grid)]
    for key in list(g):
        if key not in ("points", "mapping", "refine", "s_k", "s_points"):
            g.pop(key)
    if model.aqm.filter == "redwm" and not g.get("s_points"):
        s = [float(x) for x in _core.redwm_s_grid(model)]
        if len(s) > 1:
            g["s_points"] = s
            g.pop("s_k", None)
    return doc


# ------------------------------------------------------------------ the result

class Sensitivities:
    """Derivatives of the metrics of a stationary solution by the model's continuous parameters.

    ``values[metric][param]`` is dF/dtheta (``param`` a model-file key such as ``aqm.p_max``);
    ``elasticities[metric][param] = theta / F * dF/dtheta`` (the relative change of the metric
    per relative change of the parameter; NaN where F or theta is 0); ``metrics`` the metrics'
    values, ``parameters`` the parameters' values.  Where P is not smooth in a parameter
    (``notes[param]`` says why), ``one_sided[metric][param] = [left, right]`` holds the two
    one-sided derivatives (NaN for a side that could not be formed) and ``values`` their mean
    (or the one side that exists).
    ``info``: the adjoint solver, its residuals and the seconds spent."""

    def __init__(self, values, metrics, parameters, notes, one_sided, steps, info, adjoints):
        #: metric -> the adjoint vector y (one entry per state; 0 at info["fixed_state"]): a change
        #: r of pi's equations (pi (I - P) = r) moves the metric by about r . y
        self.adjoints: dict[str, np.ndarray] = adjoints
        self.values: dict[str, dict[str, float]] = values
        self.metrics: dict[str, float] = metrics
        self.parameters: dict[str, float] = parameters
        self.notes: dict[str, str] = notes
        self.one_sided: dict[str, dict[str, list[float]]] = one_sided
        self.steps: dict[str, float] = steps
        self.info: dict[str, Any] = info
        self.elasticities: dict[str, dict[str, float]] = {
            m: {p: _elasticity(d, parameters[p], metrics[m]) for p, d in row.items()} for m, row in values.items()}

    def __getitem__(self, metric: str) -> dict[str, float]:
        return self.values[metric]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``sensitivities`` {metric: {parameter: value}}, ``elasticities``,
        ``sensitivity_parameters`` {parameter: value}, ``sensitivity_notes``,
        ``sensitivities_one_sided``, ``sensitivity_steps`` and ``sensitivity_info``."""
        f = lambda x: None if x is None or not math.isfinite(x) else float(x)  # noqa: E731
        return {
            "sensitivities": {m: {p: f(v) for p, v in row.items()} for m, row in self.values.items()},
            "elasticities": {m: {p: f(v) for p, v in row.items()} for m, row in self.elasticities.items()},
            "sensitivity_parameters": dict(self.parameters),
            "sensitivity_notes": dict(self.notes),
            "sensitivities_one_sided": {m: {p: [f(x) for x in lr] for p, lr in row.items()}
                                        for m, row in self.one_sided.items()},
            "sensitivity_steps": dict(self.steps),
            "sensitivity_info": self.info,
        }

    def table(self, metric: str, elasticities: bool = True) -> str:
        """One metric's derivatives as a text table, largest elasticity first."""
        rows = self.values[metric]
        el = self.elasticities[metric]
        order = sorted(rows, key=lambda p: -abs(el[p]) if math.isfinite(el[p]) else 0.0)
        lines = [f"{'parameter':<22} {'value':>12} {'d' + metric + '/dp':>16} {'elasticity':>11}  note"]
        for p in order:
            lines.append(f"{p:<22} {self.parameters[p]:>12.6g} {rows[p]:>16.6g} {el[p]:>11.4g}  "
                         + self.notes.get(p, ""))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"<Sensitivities of {len(self.values)} metrics by {len(self.parameters)} parameters "
                f"({self.info['method']}, {self.info['seconds']['total']:.3g} s)>")


def _elasticity(d: float, theta: float, f: float) -> float:
    return theta / f * d if f != 0 and theta != 0 and math.isfinite(d) else float("nan")


# ------------------------------------------------------------------ the computation

def _csr(chain):
    import scipy.sparse as sp

    return sp.csr_matrix((np.array(chain.data), np.array(chain.indices), np.array(chain.indptr)),
                         shape=(chain.n, chain.n))


def _matvec(chain, y: np.ndarray) -> np.ndarray:
    """P y (continuous time: G y), in the core on the chain's own arrays."""
    return np.asarray(chain.matvec(np.ascontiguousarray(y, dtype=float)))


def _same_states(a, b) -> bool:
    if a.n != b.n:
        return False
    la, lb = a.labels, b.labels
    return set(la) == set(lb) and all(np.array_equal(np.asarray(la[k]), np.asarray(lb[k])) for k in la)


def _same_pattern(a, b) -> bool:
    return (np.array_equal(np.asarray(a.indptr), np.asarray(b.indptr))
            and np.array_equal(np.asarray(a.indices), np.asarray(b.indices)))


class _Point:
    """A chain at theta + delta: its matrix, its event weights and the vectors of the metrics asked for."""

    def __init__(self, chain, response_method, names):
        self.pos = None  # with states added: the index of each base state in this chain
        self.chain = chain
        self._P = None
        self.label_vectors = _LabelVectors(chain)
        reads: set[str] = set()
        vectors = _metric_vectors(chain, response_method, names, self.label_vectors, reads)
        self.vectors = {m: vectors[m] for m in names}  # in the metrics' order (the adjoints' columns)
        #: the events these vectors read, in the chain's order (the sides of a row pass carry only these)
        self.events_read = [e for e in chain.events if e in reads]

    @functools.cached_property
    def events(self) -> np.ndarray:
        """Every event's weights, one after the other (made when first asked for)."""
        return np.concatenate([np.asarray(v, dtype=float) for v in self.chain.events.values()])

    @property
    def P(self):
        """The matrix in SciPy's CSR (a copy, made when first asked for)."""
        if self._P is None:
            self._P = _csr(self.chain)
        return self._P


#: the smoothness test's tolerance: one-sided quotients of an entry differ by more than a
#: quarter of their magnitudes plus this much of the largest change (relative)
_KINK_TOLERANCE = 1e-6


def _kinked(f_minus, f0, f_plus) -> bool:
    """One-sided quotients (f+ - f0, f0 - f-: the same step) that differ by more than a smooth
    curvature explains: a kink in [-h, h]."""
    dp = f_plus - f0
    dm = f0 - f_minus
    scale = max(float(np.abs(dp).max()), float(np.abs(dm).max()))
    if scale == 0.0:
        return False
    return bool(np.any(np.abs(dp - dm) > 0.25 * (np.abs(dp) + np.abs(dm)) + _KINK_TOLERANCE * scale))


class _Derivative:
    """dP/dtheta (sparse) and, per metric, pi d a_i / dtheta and pi d b_i / dtheta (the vectors'
    derivatives weighted by pi: all the derivative needs of them, :func:`_apply`)."""

    def __init__(self, dP, dvec: dict[str, list[tuple[float, float]]]):
        self.dP, self.dvec = dP, dvec


#: the chunk of states :func:`_pi_diff` takes at a time (its temporaries stay in the cache)
_DIFF_CHUNK = 1 << 16


def _pi_diff(pi: np.ndarray, x1: np.ndarray, x0: np.ndarray) -> float:
    """pi (x1 - x0), chunk by chunk (no temporary of the chain's size); 0 where both are the
    same array (a vector of the labels only, shared by the chains on the same states)."""
    if x1 is x0:
        return 0.0
    return sum(_dot(pi[i:i + _DIFF_CHUNK], x1[i:i + _DIFF_CHUNK] - x0[i:i + _DIFF_CHUNK])
               for i in range(0, len(pi), _DIFF_CHUNK))


def _vec_diff(hi: dict, lo: dict, scale: float, pi: np.ndarray) -> dict:
    """pi (hi - lo) * scale, pair by pair."""
    return {m: [(_pi_diff(pi, a1, a0) * scale, _pi_diff(pi, b1, b0) * scale)
                for (a1, b1), (a0, b0) in zip(hi[m].pairs, lo[m].pairs)]
            for m in hi if m in lo}


def _effective(small: dict, plus: dict, minus: dict, base: dict, mask: np.ndarray, c: float) -> dict:
    """The metric vectors of an effective side (core/include/aqmchain/analysis/difference.hpp):
    ``small``'s where ``mask`` (the redone rows' states), ``base + c (plus - minus)`` elsewhere;
    a vector of the labels only (the same array at every side) stays shared."""
    redone = np.flatnonzero(mask)  # (a few rows: the others are formed in place, one array per vector)

    def one(xs, xp, xm, x0):
        if xs is x0 and xp is x0 and xm is x0:
            return x0
        out = np.subtract(xp, xm)
        out *= c
        out += x0
        out[redone] = xs[redone]
        return out

    out = {}
    for m in small:
        if m not in plus or m not in minus or m not in base:
            continue
        pairs = [(one(a_s, a_p, a_m, a_0), one(b_s, b_p, b_m, b_0)) for (a_s, b_s), (a_p, b_p), (a_m, b_m), (a_0, b_0)
                 in zip(small[m].pairs, plus[m].pairs, minus[m].pairs, base[m].pairs)]
        out[m] = _Metric(small[m].kind, pairs)
    return out


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """x . y without the BLAS: its dot runs on a pool of threads above ten thousand entries
    (OpenBLAS), which then spin for a while and take the second core from the core's passes
    over the rows and its solves that follow (measured: the passes of a gradient on GEO K = 4
    took 0.72-0.84 s after BLAS dots, 0.44-0.52 s with one BLAS thread)."""
    return float(np.einsum("i,i->", x, y))


def _flat(point: _Point) -> np.ndarray:
    """P's entries and the event weights (the metric vectors are functions of these, the labels and mu)."""
    return np.concatenate([point.P.data, point.events])


def _distance(p: _Point, q: _Point) -> float:
    """max |entry of p - entry of q| over P and the event weights (patterns may differ)."""
    d = abs(p.P - q.P)
    return max(float(d.max()) if d.nnz else 0.0, float(np.abs(p.events - q.events).max()))


def _one_sided_note(key, theta, why, h, sides, jumps) -> str:
    """The note of a parameter whose P is not smooth across its last step."""
    jump = f"; P jumps at {theta:g} on the {' and '.join(jumps)} (no derivative there)" if jumps else ""
    return (f"P is not smooth in {key} at {theta:g} ({why} within +-{h:.3g}): one-sided derivatives{jump}"
            if sides else f"no derivative: {why} within +-{h:.3g}{jump}")


def _second_order(d1: dict, d2: dict) -> dict:
    """The vectors' derivatives 2 D(h) - D(2h) (a bound's second-order one-sided difference)."""
    return {m: [(2 * a1 - a2, 2 * b1 - b2) for (a1, b1), (a2, b2) in zip(d1[m], d2[m])] for m in d1}


def _added_states_adjoints(names, vectors, ratios, new_pairs, pi, P_N_old, P_NN, Y, time_kind) -> np.ndarray:
    """y on the states a side adds: their own equations (I - P_NN) y_N = c_N - (pi c) + P_N,old y_old
    (continuous time: -G), c_N from their vectors ``new_pairs`` with the base's ratios and weights;
    ``P_N_old``: their rows' entries into the base chain's states (in its order)."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as sla

    C = np.zeros((P_NN.shape[0], Y.shape[1]))
    for j, m in enumerate(names):
        met, r = vectors[m], ratios[m]
        c_new = sum(w * (a - ri * b) / _dot(pi, b0)
                    for w, ri, (a, b), (_, b0) in zip(met.weights(r), r, new_pairs[m], met.pairs))
        c_old = sum(w * (a - ri * b) / _dot(pi, b) for w, ri, (a, b) in zip(met.weights(r), r, met.pairs))
        C[:, j] = c_new - _dot(pi, c_old)
    A_NN = (sp.identity(P_NN.shape[0], format="csc") - P_NN) if time_kind == "discrete" else -P_NN
    rhs = C + P_N_old @ Y
    return sla.splu(sp.csc_matrix(A_NN)).solve(np.ascontiguousarray(rhs)).reshape(rhs.shape)


def _derivative(key, theta, base_doc, base_model, base: _Point, pi, build, response_method, opts):
    """The derivative of P and of the metric vectors along ``key``: (derivative or None for a side,
    note, step used, sides) where sides = {"central"} or {"left", "right"} derivatives; ``pi``
    (the base's stationary vector) weighs the vectors' derivatives (:func:`_vec_diff`)."""
    h0 = opts["rel_step"] * abs(theta) if theta != 0 else opts["abs_step"]

    def at(delta):
        try:
            m = _model_at(base_model, base_doc, key, delta, opts["move_breakpoints"])
        except _core.ModelError:
            return None, "bound"
        try:
            c = build(m)
        except _core.ModelError as exc:  # e.g. the drop-spacing count's cap (aqm.count_max)
            refused.append(str(exc))
            return None, "refused"
        point = _Point(c, response_method, list(base.vectors))
        if not _same_states(c, base.chain):
            pos = _positions(base.chain, c)
            if pos is None:  # states of the base chain are gone: no derivative on this side
                return None, "states"
            point.pos = pos  # states added (unreachable at theta): a one-sided derivative on the union
            return point, "states"
        return point, ""

    def quotient(p: _Point, q: _Point, h: float) -> _Derivative:
        return _Derivative((p.P - q.P) / h, _vec_diff(p.vectors, q.vectors, 1.0 / h, pi))

    why = ""
    tried, refused = [], []
    base_flat = _flat(base)
    for factor in opts["shrink"]:
        h = h0 * factor
        plus, wp = at(h)
        minus, wm = at(-h)
        if plus is not None and minus is not None and plus.pos is None and minus.pos is None:
            smooth = _same_pattern(plus.chain, base.chain) and _same_pattern(minus.chain, base.chain)
            if smooth:
                smooth = not _kinked(_flat(minus), base_flat, _flat(plus))
            if smooth:
                return {"central": quotient(plus, minus, 2 * h)}, "", h
            why = "the matrix's entries are not smooth (a grid point or threshold is crossed)"
        elif "bound" in (wp, wm) and ((plus is not None and plus.pos is None) or
                                      (minus is not None and minus.pos is None)):
            # at a bound: the second-order one-sided difference on the valid side
            sign = 1.0 if plus is not None else -1.0
            one = plus if plus is not None else minus
            two, _ = at(2 * sign * h)
            # entries may appear at the bound (growing from 0): the pattern is checked on the valid side only
            if two is not None and _same_pattern(one.chain, two.chain):
                d1 = quotient(one, base, sign * h)
                d2 = quotient(two, base, 2 * sign * h)
                d = _Derivative(2 * d1.dP - d2.dP, _second_order(d1.dvec, d2.dvec))
                return {"right" if sign > 0 else "left": d}, "at a bound of the parameter: one-sided derivative", h
            why = "at a bound of the parameter, and the matrix is not smooth on its valid side"
        else:
            why = ("the reachable states change" if "states" in (wp, wm) else
                   f"the perturbed model is refused ({refused[-1]})" if refused else
                   "the parameter is at a bound on both sides")
        tried.append((plus, minus, h))
    plus, minus, h = tried[-1]
    sides, jumps = {}, []
    for side, point, sign in (("right", plus, 1.0), ("left", minus, -1.0)):
        if point is None:
            continue
        if point.pos is not None:  # states added on this side
            sides[side] = _Extended(point, sign * h)
            continue
        q = _distance(point, base) / h
        prev = tried[-2][0 if sign > 0 else 1] if len(tried) > 1 else None
        if prev is not None and prev.pos is None:
            q_prev = _distance(prev, base) / tried[-2][2]
            if q > 10.0 * q_prev:  # the quotient grows like 1 / h: P jumps at theta on this side
                jumps.append(side)
                continue
        sides[side] = quotient(point, base, h) if sign > 0 else quotient(base, point, h)
    return sides, _one_sided_note(key, theta, why, h, sides, jumps), h


class _SideChain:
    """What :func:`_metric_vectors` reads of a chain: the model at theta +- h with its event
    weights and avg grid, on the base chain's states (``labels`` None: its labels) or on the
    states a side adds (their labels)."""

    def __init__(self, base_chain, model, events: dict, grid, labels: dict | None = None):
        self.time, self.model, self.events, self.grid = base_chain.time, model, events, grid
        self.labels = base_chain.labels if labels is None else labels
        self.grid_index = base_chain.grid_index if labels is None else labels[COMPONENTS["avg"]]
        self.n = len(next(iter(self.labels.values())))


class _Contracted:
    """A central derivative already contracted in the core: ``products[j] = pi dP y_j`` per metric
    (the metrics' order), and the vectors' derivatives as in :class:`_Derivative`."""

    def __init__(self, products, dvec: dict[str, list[tuple[float, float]]]):
        self.products, self.dvec = np.asarray(products, dtype=float), dvec


def _row_difference(key, theta, base_doc, base_model, base: _Point, pi, Y, ratios, classes, response_method, opts,
                    passes: list | None = None):
    """:func:`_derivative` from the rows of P at theta +- h generated on the base chain's states
    and multiplied into the adjoint vectors in the core (no chain is built): the same steps,
    smoothness test, one-sided derivatives and bound rule, with :class:`_Contracted` in place of
    :class:`_Derivative`; a side that adds states gets the one-sided derivative of
    :class:`_Extended` from the added states' rows.  None where a chain at a step would lose
    entries of the base chain's rows (and perhaps states), or a model at a step is refused
    (:func:`_derivative` then builds the chains)."""
    h0 = opts["rel_step"] * abs(theta) if theta != 0 else opts["abs_step"]
    adjoints = np.ascontiguousarray(Y)  # a row per state: an entry's J values adjacent
    events = base.events_read  # the sides' event weights the metrics read

    def model(delta):
        try:
            return _model_at(base_model, base_doc, key, delta, opts["move_breakpoints"])
        except _core.ModelError:
            return None

    def prepare(d, plus, minus):
        """The smoothness verdict, distances and the sides' metric vectors of one step's result."""
        # smooth: the supports unchanged (_same_pattern) and _kinked's test on the entries of P
        # and the event weights (the core's excess and scale)
        d["smooth"] = (d["plus_same_support"] and d["minus_same_support"]
                       and not (d["kink_scale"] > 0.0 and d["kink_excess"] > _KINK_TOLERANCE * d["kink_scale"]))
        # P's largest change at each side over the rows the step covers ("dist": as the later step
        # of the jump test, "dist_prev": as the earlier one; they differ on a pass with a second
        # step, see difference())
        d["dist"] = {"plus": d["distance_plus"], "minus": d["distance_minus"]}
        d["dist_prev"] = dict(d["dist"])
        d["model_plus"], d["model_minus"] = plus, minus
        for tag, m in (("plus", plus), ("minus", minus)):
            d["vectors_" + tag] = _metric_vectors(_SideChain(base.chain, m, d["events_" + tag], d["grid_" + tag]),
                                                  response_method, base.vectors, base.label_vectors)

    def difference(plus, minus, h, small=None):
        """The core's difference with the sides' metric vectors; None where a side has states
        the chain lacks.  ``small``: the models at theta +- h_s, for the rows not smooth at h
        (the result's "small" is then the step h_s on the effective sides, or None when every
        row is smooth at h)."""
        extra = {} if small is None else {"plus_small": small[0], "minus_small": small[1], "h_small": small[2],
                                          "kink_tolerance": _KINK_TOLERANCE}
        try:
            d = _core.chain_difference(base.chain, plus, minus, classes, h, pi, adjoints, base.chain.n,
                                       events=events, **extra)
        except _core.ModelError:
            return None
        if not d["valid"]:
            return None
        if passes is not None:
            passes.append(int(d["rows_redone"]))
        prepare(d, plus, minus)
        s = d["small"]
        if s is None:  # every row smooth at h, or no second step
            return d
        prepare(s, small[0], small[1])
        # the effective sides' vectors: at theta +- h_s on the redone rows' states, and the base
        # vectors moved by +- h_s times the central quotient at h elsewhere
        mask, c = d["redone"], small[2] / (2.0 * h)
        for tag, sign in (("plus", 1.0), ("minus", -1.0)):
            s["vectors_" + tag] = _effective(s["vectors_" + tag], d["vectors_plus"], d["vectors_minus"], base.vectors,
                                             mask, sign * c)
        # the jump test compares P's change on the redone rows at both steps; a later pass (an odd
        # number of factors in shrink) compares its change on every row with the effective
        # sides' (the redone rows' at h_s, h_s / (2h) |P+ - P-| on the others)
        d["dist_prev"] = {"plus": d["redone_distance_plus"], "minus": d["redone_distance_minus"]}
        s["dist_prev"] = {tag: max(s["distance_" + tag], s["kept_distance"]) for tag in ("plus", "minus")}
        return d

    def one_side(d, tag, step) -> _Contracted:
        """(P_side - P) / step contracted, with the vectors' quotient (over the base chain's
        states: pi is 0 on added ones)."""
        products = np.asarray(d["products_" + tag], dtype=float)
        added = d["added_" + tag]
        if len(added["keys"]):
            products = products + added["inflow"] @ _added_adjoints(d, tag)
        return _Contracted(products / step, _vec_diff(d["vectors_" + tag], base.vectors, 1.0 / step, pi))

    def _added_adjoints(d, tag) -> np.ndarray:
        """y on the states a side adds (as :class:`_Extended`), from their rows at that side."""
        import scipy.sparse as sp

        added, n = d["added_" + tag], base.chain.n
        m = len(added["keys"])
        rows = sp.csr_matrix((added["val"], added["col"], added["rowptr"]), shape=(m, n + m))
        vec_new = _metric_vectors(_SideChain(base.chain, d["model_" + tag], added["events"], d["grid_" + tag],
                                             added["labels"]), response_method, base.vectors)
        return _added_states_adjoints(list(base.vectors), base.vectors, ratios,
                                      {k: v.pairs for k, v in vec_new.items()}, pi, rows[:, :n], rows[:, n:], Y,
                                      base.chain.time)

    def central(d, h):
        return {"central": _Contracted(d["products"], _vec_diff(d["vectors_plus"], d["vectors_minus"], 0.5 / h, pi))}

    def why_not(d):
        return ("the reachable states change" if len(d["added_plus"]["keys"]) or len(d["added_minus"]["keys"])
                else "the matrix's entries are not smooth (a grid point or threshold is crossed)")

    # each pass takes the next step too, on the rows that are not smooth at this one (so a
    # threshold on a grid point costs one pass, not two)
    tried, why, shrink, i = [], "", list(opts["shrink"]), 0
    while i < len(shrink):
        h = h0 * shrink[i]
        plus, minus = model(h), model(-h)
        if plus is not None and minus is not None:
            small = None
            if i + 1 < len(shrink):
                hs = h0 * shrink[i + 1]
                ps, ms = model(hs), model(-hs)
                small = (ps, ms, hs) if ps is not None and ms is not None and hs < h else None
            d = difference(plus, minus, h, small)
            if d is None:
                return None
            if d["smooth"] and not (d["plus_drops"] or d["minus_drops"]):
                return central(d, h), "", h
            why = why_not(d)
            tried.append((d, h))
            s = d["small"]
            i += 1
            if s is None:
                continue
            if s["smooth"] and not (s["plus_drops"] or s["minus_drops"]):
                return central(s, small[2]), "", small[2]
            why = why_not(s)
            tried.append((s, small[2]))
            i += 1
            continue
        if plus is None and minus is None:
            return None
        # at a bound: the second-order one-sided difference on the valid side (minus at 2 sign h)
        sign = 1.0 if plus is not None else -1.0
        two = model(2 * sign * h)
        d = difference(plus if sign > 0 else minus, two, h) if two is not None else None
        # entries may appear at the bound, not between h and 2h; none of the chain's may go
        if d is None or not d["sides_same_support"] or d["plus_drops"] or d["minus_drops"]:
            return None
        d1 = one_side(d, "plus", sign * h)
        d2 = one_side(d, "minus", 2 * sign * h)
        return ({"right" if sign > 0 else "left": _Contracted(2 * d1.products - d2.products,
                                                              _second_order(d1.dvec, d2.dvec))},
                "at a bound of the parameter: one-sided derivative", h)
    d, h = tried[-1]
    # a side's chain may not reach every state at this step: build them.  (At the previous
    # step only its distances are read, by the jump test; they are P's largest change there
    # whether or not that step's chain kept every state.  The built chains skip the test when
    # it did not, which only keeps a jump from being reported.)
    if d["plus_drops"] or d["minus_drops"]:
        return None
    sides, jumps = {}, []
    for side, tag, sign in (("right", "plus", 1.0), ("left", "minus", -1.0)):
        prev = tried[-2][0] if len(tried) > 1 else None
        if (prev is not None and not len(d["added_" + tag]["keys"]) and not len(prev["added_" + tag]["keys"])
                and d["dist"][tag] / h > 10.0 * prev["dist_prev"][tag] / tried[-2][1]):
            jumps.append(side)  # the quotient grows like 1 / h: P jumps at theta on this side
            continue
        sides[side] = one_side(d, tag, sign * h)
    return sides, _one_sided_note(key, theta, why, h, sides, jumps), h


def _adjoint_solver(A, k: int, method: str, opts: dict):
    """A solver for the reduced system A[keep, keep] y = rhs[keep] (keep: all states but k)."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as sla

    n = A.shape[0]
    keep = np.r_[0:k, k + 1:n]
    A_red = sp.csc_matrix(A[keep][:, keep])
    if method == "direct":
        lu = sla.splu(A_red, permc_spec="COLAMD")
        return keep, A_red, (lambda rhs: (lu.solve(rhs), 0))
    ilu = sla.spilu(A_red, drop_tol=1e-5, fill_factor=20)
    M = sla.LinearOperator(A_red.shape, ilu.solve)

    def solve(rhs):
        its = [0]

        def count(_):
            its[0] += 1

        restart = 50
        y, status = sla.gmres(A_red, rhs, M=M, rtol=opts["tol"], atol=0.0, restart=restart,
                              maxiter=max(1, -(-opts["max_iter"] // restart)),
                              callback=count, callback_type="pr_norm")
        if status != 0:
            raise _core.SolverError(f"the adjoint GMRES solve did not converge in {its[0]} iterations "
                                    f"(rtol {opts['tol']:g}); use method='direct'")
        return y, its[0]

    return keep, A_red, solve


def _chosen(option: str, given: Any, allowed: list, what: str) -> list:
    """``given`` (one name or a list; None: all of ``allowed``), each checked against ``allowed``."""
    if given is None:
        return list(allowed)
    given = list(dict.fromkeys([given] if isinstance(given, str) else given))  # each once, in order
    for g in given:
        if g not in allowed:
            raise _checks.option_error(option, f"{what}: " + ", ".join(allowed), g)
    return given


def sensitivity_metrics(result) -> list[str]:
    """The metrics of a :class:`StationaryResult` that have sensitivities: every scalar metric
    but the diagnostics and the tagged-packet chain's response times (not a ratio of pi's
    functionals), plus ``mean_count`` under drop spacing."""
    chain = result._need_chain()
    return _differentiable(_metric_vectors(chain, result.response_method if result.response_available else None))


def _differentiable(vectors: dict) -> list[str]:
    """The metrics among ``vectors`` (of :func:`_metric_vectors`) that have sensitivities, in
    the result's order."""
    return [m for m, _ in SCALAR_METRICS if m not in _NOT_DIFFERENTIATED and m in vectors] + \
        [m for m in vectors if m not in dict(SCALAR_METRICS)]


def sensitivities(result, metrics: Sequence[str] | None = None, params: Sequence[str] | None = None,
                  **options: Any) -> Sensitivities:
    """d(metric)/d(parameter) of a solved model (a :class:`StationaryResult`, or a model, which
    is solved first) for every differentiable scalar metric (or ``metrics``) and every
    continuous parameter (:func:`sensitivity_parameters`, or ``params``), by one adjoint solve
    per metric.  Options (keyword, defaults :data:`SENSITIVITY_DEFAULTS`): ``method`` (one of
    :data:`SENSITIVITY_METHODS`), ``rel_step`` / ``abs_step`` (the step of the differences of
    P's entries), ``direct_max_states``, ``tol`` and ``max_iter`` (GMRES).  See
    :class:`Sensitivities` and docs/sensitivities.md."""
    from .stationary import StationaryResult, build_chain, solve_stationary

    t_start = time.perf_counter()
    unknown = sorted(set(options) - set(SENSITIVITY_DEFAULTS))
    if unknown:
        raise _checks.option_error(unknown[0], "one of " + ", ".join(SENSITIVITY_DEFAULTS), options[unknown[0]])
    opts = {**SENSITIVITY_DEFAULTS, **options}
    if opts["method"] not in SENSITIVITY_METHODS:
        raise _checks.option_error("method", "one of " + ", ".join(SENSITIVITY_METHODS), opts["method"])
    for key in ("rel_step", "abs_step"):
        if not (isinstance(opts[key], (int, float)) and 0 < opts[key] < 0.1):
            raise _checks.option_error(key, "a number in (0, 0.1)", opts[key])
    if not (isinstance(opts["tol"], (int, float)) and 0 < opts["tol"] < 1):
        raise _checks.option_error("tol", "a number in (0, 1)", opts["tol"])
    for key in ("direct_max_states", "max_iter"):
        if not (isinstance(opts[key], int) and not isinstance(opts[key], bool) and opts[key] >= 1):
            raise _checks.option_error(key, "an integer >= 1", opts[key])
    if opts["differences"] not in SENSITIVITY_DIFFERENCES:
        raise _checks.option_error("differences", "one of " + ", ".join(SENSITIVITY_DIFFERENCES), opts["differences"])
    if not isinstance(opts["move_breakpoints"], bool):
        raise _checks.option_error("move_breakpoints", "True or False", opts["move_breakpoints"])
    shrink = opts["shrink"]
    if not (isinstance(shrink, (tuple, list)) and shrink and all(isinstance(x, (int, float)) and 0 < x <= 1
                                                                 for x in shrink)):
        raise _checks.option_error("shrink", "a non-empty list of factors in (0, 1]", shrink)
    if isinstance(result, _core.Model):
        result = solve_stationary(result)
    if not isinstance(result, StationaryResult):
        raise _checks.option_error("result", "a StationaryResult or an aqmchain.Model", result)
    chain = result._need_chain()
    base_model = chain.model
    pi = np.asarray(result.pi, dtype=float)
    response_method = result.response_method if result.response_available else None

    vectors = _metric_vectors(chain, response_method)
    names = _chosen("metrics", metrics, _differentiable(vectors), "metrics of this result with a sensitivity")
    params = _chosen("params", params, sensitivity_parameters(base_model), "continuous parameters of this model")

    # the metric values from the vectors must be the result's (the same vectors as the metrics)
    values, ratios, skipped = {}, {}, {}
    for m in names:
        r = vectors[m].ratios(pi)
        v = vectors[m].value(r)
        ref = getattr(result, m, None)
        if ref is None or not math.isfinite(ref):
            skipped[m] = "not computed for this result"
            continue
        if abs(v - ref) > 1e-8 * max(abs(ref), 1e-300) + 1e-13 * _scale(vectors[m]):
            raise RuntimeError(f"internal: metric {m} from its vectors is {v!r}, the result has {ref!r}")
        values[m], ratios[m] = float(ref), r
    names = list(values)

    # adjoint solves: (I - P) y = c - (pi c) 1 (continuous: -G y = ...), y_k = 0 at k = argmax pi
    t0 = time.perf_counter()
    k = int(np.argmax(pi))
    method = opts["method"]
    keep = np.r_[0:k, k + 1:chain.n]
    rhs_all = []
    for m in names:
        met, r = vectors[m], ratios[m]
        c = sum(w * (a - ri * b) / _dot(pi, b) for w, ri, (a, b) in zip(met.weights(r), r, met.pairs))
        rhs_all.append(c - _dot(pi, c))
    # metrics whose right-hand sides are equal (their vectors coincide on this model, e.g.
    # loss_aqm and aqm_decision_prob without ECN marking) share one solve: `first[j]` is the
    # metric whose solve metric j takes, `solved` the metrics solved
    first = _first_equal(rhs_all)
    solved = [j for j in range(len(names)) if first[j] == j]
    Y = np.zeros((chain.n, len(names)))
    residuals, iterations = {}, {}
    adjoint_note = ""
    t_factor = 0.0
    if method in ("auto", "krylov") and names:
        out = _core.solve_poisson(chain, [np.ascontiguousarray(rhs_all[j]) for j in solved], k, opts["tol"],
                                  opts["max_iter"])
        t_factor = out["seconds"].get("setup", 0.0)
        if out["status"] == "converged":
            h = np.asarray(out["h"]).T
            column = {j: i for i, j in enumerate(solved)}  # a solved metric's column of h
            for j, m in enumerate(names):
                Y[:, j] = h[:, column[first[j]]]
                iterations[m] = int(out["iterations"][column[first[j]]])
            method = "krylov"
        elif method == "krylov":
            raise _core.SolverError(f"the adjoint solve (krylov) did not converge: {out['note']}; "
                                    "use method='direct' or 'gmres'")
        else:
            adjoint_note = f"krylov did not converge ({out['note']}); "
            method = "direct" if chain.n <= opts["direct_max_states"] else "gmres"
    if method in ("auto", "direct", "gmres") or adjoint_note:
        if method == "auto":
            method = "direct" if chain.n <= opts["direct_max_states"] else "gmres"
        import scipy.sparse as sp  # (the core's krylov needs no SciPy)

        P = _csr(chain)
        A = (sp.identity(chain.n, format="csr") - P) if chain.time == "discrete" else -P
        keep, A_red, solve = _adjoint_solver(A.tocsr(), k, method, opts)
        t_factor += time.perf_counter() - t0
        for j, m in enumerate(names):
            if first[j] != j:  # solved with an earlier metric
                Y[:, j], iterations[m] = Y[:, first[j]], iterations[names[first[j]]]
                continue
            y, its = solve(rhs_all[j][keep])
            Y[keep, j] = y
            iterations[m] = int(its)
    for j, m in enumerate(names):  # max |A y - rhs| over the reduced system's rows, relative
        if first[j] != j:  # the same y and right-hand side as an earlier metric
            residuals[m] = residuals[names[first[j]]]
            continue
        y = Y[:, j]
        Py = _matvec(chain, y)
        Ay = (y - Py) if chain.time == "discrete" else -Py
        rhs = rhs_all[j][keep]
        residuals[m] = float(np.abs(Ay[keep] - rhs).max()) / (float(np.abs(rhs).max()) or 1.0)
    t_adjoint = time.perf_counter() - t0

    # dP/dtheta and the vectors' derivatives at theta +- h, then one sparse product per parameter
    t0 = time.perf_counter()
    classes = result.class_chain if result.class_chain == "exact" or result.class_chain.startswith("window") else "approx"
    memory = None

    def build(model):
        return build_chain(model, memory, classes)

    base_doc = _frozen_doc(chain)
    base = _Point(chain, response_method, names)
    out: dict[str, dict[str, float]] = {m: {} for m in names}
    one_sided: dict[str, dict[str, list[float]]] = {}
    notes, steps, thetas = {}, {}, {}

    differences: dict[str, str] = {}

    def derive(p):
        theta = _get(base_doc, p)
        return p, theta, _derivative(p, theta, base_doc, base_model, base, pi, build, response_method, opts)

    def record(p, theta, sides, note, h):
        thetas[p] = theta
        steps[p] = h
        if note:
            notes[p] = note
        got = {s: _apply(d, pi, Y, names, vectors, ratios, base, chain.time) for s, d in sides.items()}
        for j, m in enumerate(names):
            if "central" in got:
                out[m][p] = got["central"][j]
            elif set(got) == {"right"} or set(got) == {"left"}:  # at a bound: the one side there is
                out[m][p] = next(iter(got.values()))[j]
                if "bound" not in note:
                    one_sided.setdefault(m, {})[p] = [got.get("left", [math.nan] * len(names))[j],
                                                     got.get("right", [math.nan] * len(names))[j]]
            else:
                left = got.get("left", [math.nan] * len(names))[j]
                right = got.get("right", [math.nan] * len(names))[j]
                one_sided.setdefault(m, {})[p] = [left, right]
                out[m][p] = 0.5 * (left + right)

    # first the rows of P at theta +- h on the chain's states, one parameter at a time (the
    # core runs over the states on its threads); the parameters whose chains change states or
    # support, or whose P is not smooth across the step, then get their chains built
    pending = list(params)
    row_passes: dict[str, list[int]] = {}
    if opts["differences"] == "rows" and names:
        pending = []
        for p in params:
            theta = _get(base_doc, p)
            row_passes[p] = []
            got = _row_difference(p, theta, base_doc, base_model, base, pi, Y, ratios, classes, response_method, opts,
                                  row_passes[p])
            if got is None:
                pending.append(p)
            else:
                differences[p] = "rows"
                record(p, theta, *got)
    # the chains are built in parallel (the builder is one thread and releases the GIL), as
    # many parameters at a time as the library's threads, each batch's matrices applied and
    # dropped before the next
    workers = max(1, min(len(pending), _core.num_threads()))
    batches = [pending[i:i + workers] for i in range(0, len(pending), workers)]
    with ThreadPoolExecutor(workers) as pool:
        for p, theta, (sides, note, h) in (d for batch in batches for d in list(pool.map(derive, batch))):
            differences[p] = "chains"
            record(p, theta, sides, note, h)
    t_params = time.perf_counter() - t0
    info = {"method": method, "states": int(chain.n), "fixed_state": k, "residuals": residuals, "note": adjoint_note,
            "iterations": iterations, "skipped_metrics": skipped, "adjoint_solves": len(solved),
            "shared_adjoints": {m: names[first[j]] for j, m in enumerate(names) if first[j] != j},
            "differences": {p: differences[p] for p in params if p in differences},
            "row_passes": {p: v for p, v in row_passes.items() if differences.get(p) == "rows"},
            "seconds": {"adjoint_factor": t_factor, "adjoint": t_adjoint, "parameters": t_params,
                        "total": time.perf_counter() - t_start}}
    return Sensitivities(out, values, thetas, notes, one_sided, steps, info,
                         {m: Y[:, j] for j, m in enumerate(names)})


def _first_equal(vectors: list[np.ndarray]) -> list[int]:
    """Per vector, the index of the first vector equal to it (itself when none before is)."""
    first, seen = [], {}
    for j, v in enumerate(vectors):
        key = hash(np.ascontiguousarray(v).tobytes())
        i = next((i for i in seen.get(key, []) if np.array_equal(vectors[i], v)), j)
        if i == j:
            seen.setdefault(key, []).append(j)
        first.append(i)
    return first


def _scale(metric: _Metric) -> float:
    return max(float(np.abs(a).max()) / max(float(np.abs(b).max()), 1e-300) for a, b in metric.pairs) or 1.0


def _positions(base, chain):
    """The index in ``chain`` of every state of ``base`` (matched by their labels), or None when
    some state of ``base`` is not in ``chain``."""
    la, lb = base.labels, chain.labels
    if set(la) != set(lb):
        return None
    names = list(la)
    dims = [int(max(np.max(la[k]), np.max(lb[k]))) + 1 for k in names]
    key_a = np.ravel_multi_index([np.asarray(la[k], dtype=np.int64) for k in names], dims)
    key_b = np.ravel_multi_index([np.asarray(lb[k], dtype=np.int64) for k in names], dims)
    order = np.argsort(key_b)
    at = np.minimum(np.searchsorted(key_b[order], key_a), len(order) - 1)
    if not np.array_equal(key_b[order][at], key_a):
        return None
    return order[at]


class _Extended:
    """A one-sided derivative where the chain at theta + step has states that are unreachable at
    theta (an update that landed exactly on a grid point now splits onto a neighbour).  pi is 0
    on the new states; their adjoint values y_N solve the new states' own equations
    (I - P_NN) y_N = c_N - (pi c) + P_N,old y_old (continuous time: -G), with their rows from
    the chain at theta + step (an O(step) error in y_N, on entries into them that are O(step))."""

    def __init__(self, point: _Point, step: float):
        self.point, self.step = point, step

    def apply(self, base: _Point, pi, Y, names, vectors, ratios, time_kind: str) -> list[float]:
        import scipy.sparse as sp

        pt, pos = self.point, self.point.pos
        n = pt.chain.n
        new = np.ones(n, dtype=bool)
        new[pos] = False
        new_idx = np.flatnonzero(new)
        P = pt.P
        pi_ext = np.zeros(n)
        pi_ext[pos] = pi
        Y_ext = np.zeros((n, Y.shape[1]))
        Y_ext[pos] = Y
        P_N = P[new_idx]  # the new states' rows: into the base chain's states (pos) and into each other
        new_pairs = {m: [(a[new_idx], b[new_idx]) for a, b in pt.vectors[m].pairs] for m in names}
        Y_ext[new_idx] = _added_states_adjoints(names, vectors, ratios, new_pairs, pi, P_N[:, pos], P_N[:, new_idx], Y,
                                                time_kind)
        P0 = base.P.tocoo()
        P0_ext = sp.csr_matrix((P0.data, (pos[P0.row], pos[P0.col])), shape=(n, n))
        adj = np.einsum("i,ij->j", pi_ext, ((P - P0_ext) / self.step) @ Y_ext)  # the entries' differences: no cancellation
        out = []
        for j, m in enumerate(names):
            met, r = vectors[m], ratios[m]
            direct = sum(w * _dot(pi, (a1[pos] - a0) - ri * (b1[pos] - b0)) / self.step / _dot(pi, b0)
                         for w, ri, (a0, b0), (a1, b1) in zip(met.weights(r), r, met.pairs, pt.vectors[m].pairs))
            out.append(float(adj[j]) + direct)
        return out


def _apply(d, pi, Y, names, vectors, ratios, base=None, time_kind="discrete") -> list[float]:
    """pi dP y_m + sum_i F_i pi (da_i - r_i db_i) / (pi b_i), per metric m."""
    if isinstance(d, _Extended):
        return d.apply(base, pi, Y, names, vectors, ratios, time_kind)
    adj = d.products if isinstance(d, _Contracted) else np.einsum("i,ij->j", pi, d.dP @ Y)
    out = []
    for j, m in enumerate(names):
        met, r = vectors[m], ratios[m]
        direct = sum(w * (da - ri * db) / _dot(pi, b)
                     for w, ri, (a, b), (da, db) in zip(met.weights(r), r, met.pairs, d.dvec[m]))
        out.append(float(adj[j]) + direct)
    return out
