"""First passage: the time until the chain first enters a target set of states.

``T = min{t >= 0 : X_t in target}`` for a target such as ``"queue>=250"`` (time to
overflow), ``"queue==0"`` (time to drain) or ``"avg>=150 and modulator==1"``, from an
initial law ``p0``.  :func:`passage` returns the distribution ``P(T <= t)`` at output
times, ``P(T < inf)``, ``E[T]`` and expected rewards (drops, marks, ...) accumulated
before ``T`` or over ``[0, t)``.  Slotted models: ``X_t`` is the state at the start of
slot ``t``; continuous-time models: the state at time ``t``.  The methods and their error
accounts are described in docs/passage.md.
"""

from __future__ import annotations

import dataclasses
import math
import time as _time
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from . import _checks, _core
from ._targets import Target, parse_target
from .stationary import NonConvergenceError, StationaryResult, build_chain, refine_grid

__all__ = ["passage", "PassageResult", "PassageInfo", "PASSAGE_METHODS", "REWARD_SUMS", "PASSAGE_DEFAULTS"]

PASSAGE_METHODS: tuple[str, ...] = tuple(_core.passage_methods())
"""The ``method`` names of :func:`passage`, defined once in the C++ core."""
#: The options of the analysis with their defaults (the C++ core's).
PASSAGE_DEFAULTS: dict[str, Any] = {k: v for k, v in _core.PassageAnalysisOptions.defaults().items()
                                    if k not in ("kernel", "reward_names", "rewards", "progress", "method")}
REWARD_SUMS: dict[str, tuple[str, ...]] = {
    "drops": ("aqm_drop", "overflow", "flow_compare", "pushed_out"),
    "aqm_drops": ("aqm_drop",),
    "overflows": ("overflow",),
    "marks": ("mark",),
    "arrivals": ("arrival",),
    "admissions": ("admit",),
    "departures": ("depart",),
}
"""Rewards of :func:`passage` named by what they count, each the sum of the chain's per-state event
weights listed (probability per slot, or rate per unit time).  The event names themselves
(``chain.events``; the simulator's :data:`PASSAGE_REWARDS`: arrival, aqm_drop, mark, ...) are
accepted too."""


@dataclasses.dataclass(frozen=True)
class PassageInfo:
    """Accounts of one first-passage run."""

    method: str  #: the method that ran
    requested: str  #: what the caller asked for
    status: str  #: "converged" | "not_converged" | ...
    error_bound: float  #: largest bound (estimate for krylov) on |cdf error| over the output times
    mean_residual: float  #: L1 residual of the linear solve for E[T], relative to the right-hand side
    mass_error: float  #: largest |cdf + survival - 1| over the output times
    iterations: int  #: slots stepped (step, quasi_stationary) or kernel steps
    matvecs: int  #: products with the matrix (GMRES steps included)
    solves: int  #: linear solves (mean, quasi-stationary law)
    gmres_iterations: int
    rho: float  #: quasi_stationary: decay factor per slot of the survival (0: not computed)
    basis: int  #: rational_krylov (slotted): Krylov basis size
    shift: float  #: rational_krylov (slotted): its shift gamma
    qsd_residual: float  #: ||v P - rho v||_1 of the quasi-stationary law v
    switch_time: float  #: slot after which the outputs come from the Krylov space / the quasi-stationary tail (-1: every output stepped)
    cumulative_error: float  #: estimate of the error of rewards_cumulative per unit reward
    states: int
    target_states: int
    never_states: int  #: states from which the target cannot be reached
    seconds: dict[str, float]
    tol: float
    note: str
    extra: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready)."""
        return dataclasses.asdict(self)


class PassageResult:
    """First passage into :attr:`target`: :attr:`cdf` = P(T <= t) and :attr:`survival` at
    :attr:`times`, :attr:`reach_probability` = P(T < inf), :attr:`mean` = E[T],
    :attr:`rewards_until` (E[reward accumulated before T]) and :attr:`rewards_cumulative`
    (E[reward accumulated over [0, t)] at each time, without stopping at T)."""

    def __init__(self, raw: Any, target: Target, chain: _core.Chain, tol: float, seconds: dict):
        self.target = str(target)  #: canonical text of the target
        self.times = np.asarray(raw.times, dtype=float)
        self.cdf = np.asarray(raw.cdf, dtype=float)
        self.survival = np.asarray(raw.survival, dtype=float)
        self.error_bound = np.asarray(raw.error_bound, dtype=float)  #: per output time
        self.reach_probability = float(raw.reach_probability)
        self.mean = float(raw.mean)
        self.rewards_until = {n: float(v) for n, v in zip(raw.reward_names, raw.rewards_until)}
        self.rewards_cumulative = {n: np.asarray(v, dtype=float) for n, v in zip(raw.reward_names,
                                                                              raw.rewards_cumulative)}
        self.continuous = chain.time == "continuous"
        self.states = chain.n
        secs = dict(seconds)
        secs.update({f"passage_{k}": v for k, v in raw.seconds.items()})
        mass = float(np.max(np.abs(self.cdf + self.survival - 1.0))) if self.cdf.size else 0.0
        self.info = PassageInfo(
            method=raw.method, requested=raw.requested, status=raw.status,
            error_bound=float(np.max(self.error_bound)) if self.error_bound.size else 0.0,
            mean_residual=raw.mean_residual, mass_error=mass, iterations=raw.iterations,
            matvecs=raw.operator_applications, solves=raw.solves, gmres_iterations=raw.gmres_iterations,
            rho=raw.rho, basis=raw.basis, shift=raw.gamma, qsd_residual=raw.qsd_residual, switch_time=raw.switch_time,
            cumulative_error=raw.cumulative_error, states=raw.states, target_states=raw.target_states,
            never_states=raw.never_states, seconds=secs, tol=tol, note=raw.note, extra=dict(raw.extra))

    def within(self, t: float) -> float:
        """P(T <= t) at one of the output times."""
        k = np.flatnonzero(self.times == float(t))
        if not k.size:
            raise _checks.model_error("t", "one of the output times", t)
        return float(self.cdf[k[0]])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the target, times, cdf, survival, the scalars and the accounts."""
        def num(x: float) -> Any:
            return x if math.isfinite(x) else str(x)
        out: dict[str, Any] = {"target": self.target, "times": self.times.tolist(), "cdf": self.cdf.tolist(),
                               "survival": self.survival.tolist(), "error_bound": self.error_bound.tolist(),
                               "reach_probability": self.reach_probability, "mean": num(self.mean),
                               "rewards_until": {k: num(v) for k, v in self.rewards_until.items()},
                               "rewards_cumulative": {k: v.tolist() for k, v in self.rewards_cumulative.items()},
                               "states": self.states}
        info = self.info.as_dict()
        out["solver"] = {"method": info["method"], "requested": info["requested"], "status": info["status"],
                         "error_bound": info["error_bound"], "seconds": info["seconds"].get("passage_total", 0.0),
                         "accounts": info}
        return out

    as_dict = to_dict

    def csv_rows(self) -> tuple[list[str], list[list[float]]]:
        """Header and rows (one per output time): time, cdf, survival, error bound, cumulative rewards."""
        names = list(self.rewards_cumulative)
        head = ["time", "cdf", "survival", "error_bound"] + [f"cumulative_{n}" for n in names]
        rows = [[float(t), float(self.cdf[k]), float(self.survival[k]), float(self.error_bound[k])]
                + [float(self.rewards_cumulative[n][k]) for n in names] for k, t in enumerate(self.times)]
        return head, rows

    def plot(self, ax: Any = None, *, survival: bool = False, name: str | None = None, **kwargs: Any) -> Any:
        """P(T <= t) (or P(T > t)) over time on log-log axes, the mean marked; returns the figure
        (:func:`aqmchain.plots.passage`).  Creates a :class:`matplotlib.figure.Figure` (no backend
        is chosen) unless ``ax`` is given."""
        from .plots import passage as _plot

        return _plot(self, ax=ax, survival=survival, name=name, **kwargs)

    def __repr__(self) -> str:
        return (f"PassageResult(target={self.target!r}, {len(self.times)} times, mean={self.mean:.6g}, "
                f"reach_probability={self.reach_probability:.6g}, method={self.info.method!r}, "
                f"status={self.info.status!r})")


def _chain_of(model: Any, memory_limit_gb: float | None, max_states: int | None) -> _core.Chain:
    if isinstance(model, StationaryResult):
        return model.chain
    if isinstance(model, _core.Chain):
        return model
    if isinstance(model, _core.Model):
        return build_chain(refine_grid(model, memory_limit_gb=memory_limit_gb)[0], memory_limit_gb,
                           max_states=max_states)
    raise _checks.model_error("model", "a Model, Chain or StationaryResult", model)


def _state_keys(chain: _core.Chain, names: Sequence[str], radix: Sequence[int]) -> np.ndarray:
    key = np.zeros(chain.n, dtype=np.int64)
    for name, r in zip(names, radix):
        key = key * int(r) + np.asarray(chain.labels[name], dtype=np.int64)
    return key


def _law_from_other_chain(p0: StationaryResult, chain: _core.Chain) -> np.ndarray:
    """The law of another chain (e.g. the model before a load step) carried over to ``chain``
    by the states' component values."""
    other = p0.chain
    names = [c.name for c in chain.space.components]
    if [c.name for c in other.space.components] != names:
        raise _checks.model_error("p0", "a StationaryResult of a chain with the same components ("
                                  + ", ".join(names) + ")", [c.name for c in other.space.components])
    radix = [int(max(np.max(chain.labels[n], initial=0), np.max(other.labels[n], initial=0))) + 1 for n in names]
    if float(np.prod([float(r) for r in radix])) >= 2.0**62:
        raise _checks.model_error("p0", "a chain whose states can be matched by their component values", "too many")
    ka, kb = _state_keys(chain, names, radix), _state_keys(other, names, radix)
    order = np.argsort(ka)
    pos = np.searchsorted(ka, kb, sorter=order)
    pos = np.minimum(pos, len(order) - 1)
    found = ka[order[pos]] == kb
    pi = np.asarray(p0.pi, dtype=float)
    lost = float(pi[~found].sum())
    if lost > 1e-12:
        raise _checks.model_error("p0", "a law on states of this chain (component values it has)",
                                  f"{lost:.3g} of its mass on states the chain does not have")
    out = np.zeros(chain.n)
    np.add.at(out, order[pos[found]], pi[found])
    return out / out.sum()


def _initial_law(p0: Any, chain: _core.Chain) -> np.ndarray:
    if p0 is None or (isinstance(p0, str) and p0 == "empty"):
        return np.asarray(_core.empty_system_law(chain))
    if isinstance(p0, str):
        raise _checks.model_error("p0", "'empty', a state (dict of component values), a StationaryResult or a vector",
                                  p0)
    if isinstance(p0, StationaryResult):
        if p0.chain.n == chain.n and p0.chain is chain:
            return np.asarray(p0.pi, dtype=float)
        return _law_from_other_chain(p0, chain)
    if isinstance(p0, dict):
        names = [c.name for c in chain.space.components]
        unknown = sorted(set(p0) - set(names))
        if unknown:
            raise _checks.model_error(f"p0.{unknown[0]}", "a state component (" + ", ".join(names) + ")",
                                      p0[unknown[0]])
        values = [_checks.integer(f"p0.{n}", p0.get(n, 0), 0, 2**31 - 1) for n in names]
        return np.asarray(_core.point_law(chain, values))
    arr = np.asarray(p0, dtype=float)
    if arr.ndim != 1 or arr.shape[0] != chain.n:
        raise _checks.model_error("p0", f"a vector of {chain.n} entries (one per state)",
                                  f"an array of shape {arr.shape}")
    return arr


def target_mask(chain: _core.Chain, target: Target) -> np.ndarray:
    """The states of ``chain`` in ``target`` (a boolean array over the states)."""
    labels = chain.labels
    queue = np.asarray(labels["level"])
    avg = np.asarray(chain.grid)[np.asarray(chain.grid_index)] if "avg" in target.quantities() else 0.0
    modulator = np.asarray(labels["modulator"]) if "modulator" in labels else np.zeros(chain.n, dtype=np.int32)
    return np.broadcast_to(target.holds(queue, avg, modulator), (chain.n,)).copy()


def _reward_vectors(chain: _core.Chain, rewards: Any) -> dict[str, np.ndarray]:
    if isinstance(rewards, str):
        rewards = [r.strip() for r in rewards.split(",") if r.strip()]
    events = chain.events
    out: dict[str, np.ndarray] = {}
    items = rewards.items() if isinstance(rewards, Mapping) else ((r, None) for r in rewards)
    for name, given in items:
        if given is not None:
            arr = np.asarray(given, dtype=float).ravel()
            if arr.shape != (chain.n,) or not np.all(np.isfinite(arr)):
                raise _checks.model_error(f"rewards['{name}']", f"finite values, one per state ({chain.n})",
                                          f"shape {arr.shape}")
            out[str(name)] = arr
            continue
        if name in REWARD_SUMS:
            parts = [e for e in REWARD_SUMS[name] if e in events]
            out[name] = np.sum([np.asarray(events[e]) for e in parts], axis=0) if parts else np.zeros(chain.n)
        elif name in events:
            out[name] = np.asarray(events[name], dtype=float)
        else:
            raise _checks.model_error("rewards", "names in " + ", ".join(list(REWARD_SUMS) + sorted(events))
                                      + " (or a dict name -> one value per state)", name)
    return out


def passage(model: Any, to: Any, *, times: Iterable[float] | None = None, p0: Any = None, rewards: Any = (),
            method: str = "auto", tol: float | None = None, max_steps: int | None = None,
            solve_tol: float | None = None, exact_slots: int | None = None, shift: float | None = None,
            krylov_dim: int | None = None, threads: int | None = None, cumulative: bool = True,
            memory_limit_gb: float | None = None, max_states: int | None = None,
            progress: Callable[[float, float], None] | None = None) -> PassageResult:
    """First passage of ``model`` (a Model, a built Chain or a StationaryResult) into the target
    ``to`` (``"queue>=250"``, ``"queue==0"``, ``"avg>=150 and modulator==1"``; clauses on queue,
    avg and modulator joined by ``and``).

    ``times``: sorted output times (whole slots for slotted models; default: none, only the
    scalars).  ``p0``: initial law: ``None``/"empty" (empty system, avg 0, modulator
    stationary), a dict of component values (``{"level": 200}``; the rest 0), a
    :class:`StationaryResult` (of this chain, or of another model's chain with the same
    components, e.g. the model before a load step) or a probability vector.  ``rewards``:
    names of :data:`REWARD_SUMS` or of the chain's events ("drops,marks"), or a dict
    ``{name: one value per state}``.  ``method``: one of :data:`PASSAGE_METHODS` ("auto":
    quasi_stationary for slotted models; uniformization or rational_krylov for continuous
    time, as :func:`solve_transient` chooses).  ``tol``: target on the cdf's absolute error
    (default :data:`PASSAGE_DEFAULTS` ["tol"]).  ``max_steps``: budget of slots stepped.
    ``solve_tol``: relative L1 residual of the linear solves.  rational_krylov on a slotted
    model: ``exact_slots`` slots are stepped exactly first (default 1024),
    ``shift`` is the Krylov space's shift (default: those slots), ``krylov_dim`` its largest size.  ``threads``: threads for this
    call (default: :func:`num_threads`).  ``cumulative``: also the rewards over [0, t)
    (not stopped at T; continuous time: from Poisson's equation, docs/passage.md).  A budget that runs out raises :class:`NonConvergenceError` carrying
    the partial result.
    """
    t_start = _time.perf_counter()
    if method not in PASSAGE_METHODS:
        raise _checks.model_error("method", "one of " + ", ".join(PASSAGE_METHODS), method)
    target = parse_target(to, "to")
    t = np.asarray([] if times is None else (list(times) if not isinstance(times, np.ndarray) else times),
                   dtype=float).ravel()
    if t.size and not np.all(np.isfinite(t)):
        raise _checks.model_error("times", "finite times", t[~np.isfinite(t)][0])
    if t.size and np.any(np.diff(t) < 0):
        k = int(np.flatnonzero(np.diff(t) < 0)[0])
        raise _checks.model_error("times", "sorted (non-decreasing)", f"{t[k + 1]:g} after {t[k]:g}")
    opts = _core.PassageAnalysisOptions()
    opts.method = method
    if tol is not None:
        opts.tol = _checks.real("tol", tol)
    if max_steps is not None:
        opts.max_steps = _checks.integer("max_steps", max_steps, 1, 10**12, allow_integral_float=True)
    if solve_tol is not None:
        opts.solve_tol = _checks.real("solve_tol", solve_tol)
    if exact_slots is not None:
        opts.exact_slots = _checks.integer("exact_slots", exact_slots, 0, 10**12, allow_integral_float=True)
    if shift is not None:
        opts.shift = _checks.real("shift", shift)
    if krylov_dim is not None:
        opts.krylov_dim = _checks.integer("krylov_dim", krylov_dim, 2, 1000)
    opts.cumulative = bool(cumulative)
    opts.validate()
    chain = _chain_of(model, memory_limit_gb, max_states)
    build = {"build": _time.perf_counter() - t_start}
    mask = target_mask(chain, target)
    if not mask.any():
        raise _checks.model_error("to", "a target with at least one state of the chain", str(target))
    law = _initial_law(p0, chain)
    rv = _reward_vectors(chain, rewards)
    opts.reward_names = list(rv)
    opts.rewards = [np.ascontiguousarray(v) for v in rv.values()]
    if progress is not None:
        opts.progress = progress
    if not t.size:
        t = np.zeros(1)
        keep = False
    else:
        keep = True
    old_threads = None
    if threads is not None:
        threads = _checks.integer("threads", threads, 1, 4096)
        old_threads = _core.num_threads()
        _core.set_num_threads(threads)
    try:
        raw = _core.analyse_passage(chain, mask.astype(np.int32).tolist(), law.tolist(), t.tolist(), opts)
    finally:
        if old_threads is not None:
            _core.set_num_threads(old_threads)
    result = PassageResult(raw, target, chain, opts.tol, build)
    if not keep:  # no output times asked: only the scalars
        result.times, result.cdf, result.survival, result.error_bound = (np.empty(0),) * 4
        result.rewards_cumulative = {k: np.empty(0) for k in result.rewards_cumulative}
    if raw.status != "converged":
        raise NonConvergenceError(f"first passage stopped ({raw.method}, {raw.status}) after {raw.outputs} of "
                                  f"{len(t)} output times: {raw.note}", result)
    return result
