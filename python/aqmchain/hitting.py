"""Simulated hitting times: the first time the simulated queue enters a target set.

``T = min{t >= 0 : X_t in target}`` with the target of :func:`aqmchain._targets.parse_target`
(``"queue>=200"``, ``"queue==0"``, ``"avg>=150 and modulator==1"``).  Slotted models: X_t is
the state after t slots (n packets in the system, avg, the modulator), checked at t = 0 and
after every slot.  Continuous-time models: the first time the state is in the target (avg
exact between events, its entry time in closed form; on the grid or under the ns-3 semantics
at events).  Independent replications give the distribution of T with 95 % intervals, to
check the chain's first-passage answers (docs/simulation.md, "Hitting times").
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from . import _checks, _core
from ._targets import parse_target
from .stationary import StationaryResult, refine_grid

__all__ = ["simulate_passage", "PassageSimulation", "PASSAGE_REWARDS"]

PASSAGE_REWARDS: tuple[str, ...] = tuple(_core.passage_reward_names())
"""Names of the rewards a hitting-time run can accumulate (counts of the chain's events of those
names: arrival, aqm_drop, mark, overflow, admit, depart), defined once in the C++ core."""

_Z = 1.959963984540054  # standard normal 0.975 quantile
_SETTABLE = ("level", "avg_index", "avg", "modulator")  # start-state components the simulator sets


def _wilson(k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """95 % Wilson score interval of a binomial proportion k / n (per entry)."""
    p = k / n
    z2 = _Z * _Z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = _Z / (1 + z2 / n) * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    lo = np.where(k == 0, 0.0, np.clip(centre - half, 0.0, 1.0))  # exact at the ends (no round-off)
    hi = np.where(k == n, 1.0, np.clip(centre + half, 0.0, 1.0))
    return lo, hi


def _t975(dof: int) -> float:
    from scipy.special import stdtrit

    return float(stdtrit(dof, 0.975))


def _mean_hw(x: np.ndarray, axis: int = 0) -> tuple[Any, Any]:
    """Mean and 95 % half-width (Student t over the replications) along ``axis``."""
    n = x.shape[axis]
    return x.mean(axis=axis), _t975(n - 1) * x.std(axis=axis, ddof=1) / math.sqrt(n)


class PassageSimulation:
    """Simulated hitting times of a target.

    ``samples``: T per replication (``inf``: not in the target by ``horizon``, counted in
    ``censored``).  ``cdf[i]`` = the fraction of replications with T <= ``times[i]``, with
    its 95 % Wilson interval ``cdf_lo[i]``, ``cdf_hi[i]``.  ``mean`` and ``mean_hw`` (95 %
    half-width, Student t): E[T] when no run is censored, else ``nan`` (``note`` says so) and
    ``restricted_mean`` / ``restricted_mean_hw`` estimate E[min(T, horizon)].  ``rewards``:
    per requested reward (``arrival``, ``aqm_drop``, ``mark``, ``overflow``, ``admit``,
    ``depart``: counts of those events) ``at_times`` = E[count up to min(t, T)] at ``times``
    with ``at_times_hw``, and ``until_hit`` = E[count up to T] with ``until_hit_hw`` (up to
    min(T, horizon) when runs are censored: ``until_hit_restricted``).
    """

    def __init__(self, model: _core.Model, target: str, raw: dict, times: np.ndarray, horizon: float,
                 seed: int, discretised: bool, start: str):
        self.model = model
        self.target = target  #: canonical text of the target
        self.continuous = model.time == "continuous"
        self.unit = "time" if self.continuous else "slot"
        self.horizon = float(horizon)
        self.times = times
        self.seed, self.discretised, self.start = seed, discretised, start
        self.samples = np.asarray(raw["hit"], dtype=float)
        self.start_index = np.asarray(raw["start"])  #: the start-law entry each replication drew (-1: empty)
        self.replications = int(raw["replications"])
        self.threads, self.steps, self.seconds = int(raw["threads"]), int(raw["steps"]), float(raw["seconds"])
        R = self.replications
        hit = np.isfinite(self.samples)
        self.censored = int(R - np.count_nonzero(hit))
        ordered = np.sort(self.samples)
        k = np.searchsorted(ordered, times, side="right").astype(float)
        self.cdf = k / R
        self.cdf_lo, self.cdf_hi = _wilson(k, R)
        restricted = np.minimum(self.samples, self.horizon)
        self.restricted_mean, self.restricted_mean_hw = (float(v) for v in _mean_hw(restricted))
        if self.censored == 0:
            self.mean, self.mean_hw = self.restricted_mean, self.restricted_mean_hw
            self.note = ""
        else:
            self.mean = self.mean_hw = float("nan")
            self.note = (f"{self.censored} of {R} runs did not reach {target} by the horizon {self.horizon:g}: "
                         f"E[T] is not estimated; restricted_mean estimates E[min(T, {self.horizon:g})] "
                         "(a lower bound of E[T])")
        self.rewards: dict[str, dict[str, Any]] = {}
        for name, at_hit in raw["at_hit"].items():
            at_t = np.asarray(raw["at_times"][name], dtype=float)
            m, hw = _mean_hw(at_t) if len(times) else (np.empty(0), np.empty(0))
            u, uhw = _mean_hw(np.asarray(at_hit, dtype=float))
            self.rewards[name] = {"at_times": np.asarray(m), "at_times_hw": np.asarray(hw), "until_hit": float(u),
                                  "until_hit_hw": float(uhw), "until_hit_restricted": self.censored > 0}

    def quantile(self, q: float) -> float:
        """The empirical q-quantile of T (``inf`` when it lies beyond the horizon)."""
        q = _checks.real("q", q)
        if not 0.0 < q < 1.0:
            raise _checks.model_error("q", "in (0, 1)", q)
        ordered = np.sort(self.samples)
        return float(ordered[min(int(math.ceil(q * self.replications)) - 1, self.replications - 1)])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the target, the cdf with its intervals, the means, the rewards, the samples
        (``None`` for a censored run) and the accounts of the run."""
        fin = lambda v: float(v) if np.isfinite(v) else None  # noqa: E731  (JSON has no infinity)
        d: dict[str, Any] = {
            "target": self.target, "unit": self.unit, "horizon": self.horizon, "start": self.start,
            "replications": self.replications, "censored": self.censored,
            "times": self.times.tolist(), "cdf": self.cdf.tolist(), "cdf_lo": self.cdf_lo.tolist(),
            "cdf_hi": self.cdf_hi.tolist(), "mean": fin(self.mean), "mean_hw": fin(self.mean_hw),
            "restricted_mean": fin(self.restricted_mean), "restricted_mean_hw": fin(self.restricted_mean_hw),
            "note": self.note,
            "rewards": {k: {"at_times": v["at_times"].tolist(), "at_times_hw": [fin(x) for x in v["at_times_hw"]],
                            "until_hit": fin(v["until_hit"]), "until_hit_hw": fin(v["until_hit_hw"]),
                            "until_hit_restricted": v["until_hit_restricted"]} for k, v in self.rewards.items()},
            "samples": [fin(x) for x in self.samples],
            "simulation": {"seed": self.seed, "discretised": self.discretised, "threads": self.threads,
                           "steps": self.steps, "seconds": self.seconds},
        }
        return d

    as_dict = to_dict

    def summary(self) -> str:
        """A text report: the mean with its interval (or the censoring note) and the cdf at a few times."""
        lines = [f"time to {self.target} ({self.start} start), {self.replications} replications, "
                 f"horizon {self.horizon:g} {self.unit}s"]
        if self.censored == 0:
            lines.append(f"mean  {self.mean:.6g} ± {self.mean_hw:.2g}")
        else:
            lines.append(f"mean  n/a: {self.note}")
            lines.append(f"restricted mean  {self.restricted_mean:.6g} ± {self.restricted_mean_hw:.2g}")
        step = max(1, len(self.times) // 10)
        for i in range(0, len(self.times), step):
            lines.append(f"P(T <= {self.times[i]:g})  {self.cdf[i]:.4f}  [{self.cdf_lo[i]:.4f}, {self.cdf_hi[i]:.4f}]")
        for name, v in self.rewards.items():
            lines.append(f"{name} until T  {v['until_hit']:.6g} ± {v['until_hit_hw']:.2g}"
                         + (" (up to the horizon for censored runs)" if v["until_hit_restricted"] else ""))
        return "\n".join(lines)

    def plot(self, ax: Any = None) -> Any:
        """The cdf with its 95 % band as a step plot; returns the figure (no backend is chosen)."""
        if ax is None:
            from matplotlib.figure import Figure

            fig = Figure()
            ax = fig.add_subplot()
        else:
            fig = ax.figure
        ax.step(self.times, self.cdf, where="post", label=f"P(T <= t), {self.replications} runs")
        ax.fill_between(self.times, self.cdf_lo, self.cdf_hi, step="post", alpha=0.3, label="95 % interval")
        ax.set_xlabel(f"t ({self.unit}s)")
        ax.set_ylabel("probability")
        ax.set_title(f"time to {self.target}")
        ax.legend()
        return fig

    def __repr__(self) -> str:
        m = f"mean={self.mean:.6g} ± {self.mean_hw:.2g}" if self.censored == 0 else f"censored={self.censored}"
        return f"<PassageSimulation to {self.target!r} {m} replications={self.replications}>"


def _start_law(p0: Any, model: _core.Model) -> tuple[dict[str, list], str]:
    """The start law as the core reads it: entries level, modulator, avg_index (-1: by value), avg, weight."""
    empty = {"level": [], "modulator": [], "avg_index": [], "avg": [], "weight": []}
    if p0 is None or (isinstance(p0, str) and p0 == "empty"):
        return empty, "empty"
    if isinstance(p0, dict):
        for key in p0:
            if key not in _SETTABLE:
                raise _checks.model_error(f"p0.{key}", "a component the simulator can set (level, avg_index or avg, "
                                          "modulator)", p0[key])
        if "avg" in p0 and "avg_index" in p0:
            raise _checks.model_error("p0", "avg_index or avg, not both", p0)
        level = _checks.integer("p0.level", p0.get("level", 0), 0, _checks.INT32_MAX)
        modulator = _checks.integer("p0.modulator", p0.get("modulator", 0), 0, _checks.INT32_MAX)
        index, value = -1, 0.0
        if "avg_index" in p0:
            index = _checks.integer("p0.avg_index", p0["avg_index"], 0, _checks.INT32_MAX)
        elif "avg" in p0:
            value = _checks.real("p0.avg", p0["avg"])
        return {"level": [level], "modulator": [modulator], "avg_index": [index], "avg": [value], "weight": [1.0]}, "state"
    if isinstance(p0, StationaryResult):
        chain = p0.chain
        labels = chain.labels
        for name in labels:
            if name not in _SETTABLE and np.any(np.asarray(labels[name]) != 0):
                raise _checks.model_error("p0", f"a stationary law over level, avg_index and modulator (the "
                                          f"simulator cannot set the component {name!r})", f"a law over {list(labels)}")
        pi = np.asarray(p0.pi, dtype=float)
        keep = np.flatnonzero(pi > 0)
        level = np.asarray(labels["level"])[keep]
        grid = np.asarray(chain.grid)
        avg = grid[np.asarray(labels["avg_index"])[keep]] if "avg_index" in labels else np.zeros(len(keep))
        modulator = np.asarray(labels["modulator"])[keep] if "modulator" in labels else np.zeros(len(keep), int)
        return {"level": level.astype(int).tolist(), "modulator": modulator.astype(int).tolist(),
                "avg_index": [-1] * len(keep), "avg": avg.tolist(), "weight": pi[keep].tolist()}, "stationary"
    raise _checks.model_error("p0", "'empty', a state (dict of level, avg_index or avg, modulator) or a "
                              "StationaryResult", p0)


def simulate_passage(model: Any, to: Any, *, p0: Any = None, horizon: float, replications: int = 1000,
                     seed: int | None = None, threads: int | None = None, discretised: bool = False,
                     times: Any = None, rewards: Sequence[str] = ()) -> PassageSimulation:
    """Simulate the time until the queue first enters the target ``to`` (``"queue>=200"``, ...).

    ``model``: a Model (or a StationaryResult / Chain: its model).  ``p0``: the start law:
    ``None`` / ``"empty"`` (empty system, avg 0, the modulator from its stationary law, as
    :func:`solve_transient`), a state ``{"level": n, "avg_index": i or "avg": value,
    "modulator": m}`` (missing components 0; ``avg_index`` on the grid the chain is built on),
    or a :class:`StationaryResult` (each replication draws its start from pi: e.g. the
    stationary law of the model before a load step).  ``horizon``: runs still outside the
    target then are censored (slotted: whole slots).  ``times``: where the cdf and the rewards
    are reported (default 101 points from 0 to the horizon; slotted: whole slots).
    ``rewards``: names from :data:`PASSAGE_REWARDS` to accumulate.  ``discretised``: avg on
    the chain's grid (the chain is then the exact law).  Replication r uses the xoshiro256**
    stream of ``seed`` (default 1) jumped r times: the result does not depend on ``threads``
    (default: all cores).
    """
    if isinstance(model, StationaryResult):
        model = model.model
    elif isinstance(model, _core.Chain):
        model = model.model
    if not isinstance(model, _core.Model):
        raise _checks.model_error("model", "an aqmchain.Model", model)
    target = parse_target(to, "to")
    continuous = model.time == "continuous"
    horizon = _checks.real("horizon", horizon)
    # types here; the ranges of replications and threads are the core's (PassageOptions::validate)
    replications = _checks.integer("replications", replications, -_checks.INT32_MAX - 1, _checks.INT32_MAX)
    seed = 1 if seed is None else _checks.integer("seed", seed, 0, 2**64 - 1)
    threads = 0 if threads is None else _checks.integer("threads", threads, -_checks.INT32_MAX - 1,
                                                        _checks.INT32_MAX)
    discretised = _checks.boolean("discretised", discretised)
    if isinstance(rewards, str):
        rewards = [rewards]
    rewards = [_checks.string("rewards", r) for r in rewards]
    if times is None:
        if not (math.isfinite(horizon) and horizon >= 0):
            raise _checks.model_error("horizon", "finite and >= 0", horizon)
        t = np.linspace(0.0, horizon, 101)
        if not continuous:
            t = np.unique(np.rint(t))
    else:
        if isinstance(times, (str, bytes, dict)):
            raise _checks.model_error("times", "a list of output times", times)
        try:
            t = np.asarray(times, dtype=float).ravel()
        except (TypeError, ValueError):
            raise _checks.model_error("times", "a list of output times (numbers)", times) from None
    start, kind = _start_law(p0, model)
    if model.grid.refine == "auto" and not len(model.grid.points) and (
            discretised or any(i >= 0 for i in start["avg_index"])):
        model = refine_grid(model)[0]  # the chain's grid, resolved as solve_stationary resolves it
    raw = _core.simulate_passage(model, [(c.quantity, c.op, float(c.value)) for c in target.clauses],
                                 start["level"], start["modulator"], start["avg_index"], start["avg"],
                                 start["weight"], t.tolist(), replications, seed, threads, discretised, horizon,
                                 rewards)
    return PassageSimulation(model, str(target), raw, t, horizon, seed, discretised, kind)
