"""Monte Carlo simulation of a model (slotted, or event-driven in continuous time) and the
chain-vs-simulation comparison."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from . import _checks, _core
from ._classes import ClassMetrics
from .stationary import refine_grid

__all__ = ["simulate", "SimulationResult", "compare", "Comparison", "simulate_scenario"]

SCALARS = ("arrival_rate", "throughput", "loss", "loss_aqm", "loss_overflow", "mark_prob", "pushed_out_prob",
           "mean_system", "var_system", "mean_queue", "var_queue", "mean_avg", "mean_response", "var_response")


_UNDEFINED_WHY = {name: "no arrival" for name in ("loss", "loss_aqm", "loss_overflow", "mark_prob")}
_UNDEFINED_WHY.update({name: "no admitted packet" for name in ("pushed_out_prob", "mean_response", "var_response")})


def _num(v: Any, spec: str) -> str:
    """A number for a table: 'n/a' instead of nan / inf."""
    return format(v, spec) if v is not None and np.isfinite(v) else "n/a"


class SimulationResult:
    """Simulation estimates under the output names of docs/model-file.md; ``ci[name]`` is the 95 % half-width.

    pmfs: ``queue_pmf``, ``system_pmf``, ``response_pmf`` with half-widths in
    ``queue_pmf_ci`` etc.  ``series`` holds the time series of replication 0
    (``slot``, ``level``, ``avg``, ``drops``) when ``sample_every`` was given.

    Continuous-time models: rates are per unit time, ``queue_pmf`` and ``system_pmf`` are
    time averages, ``response_pmf`` is empty (the sojourn time has a density: mean and
    variance only), ``measured_slots`` is the measured time and ``events`` /
    ``events_per_second`` count the simulated events.

    Models with traffic classes, modified RED or the flow comparison (docs/classes.md)
    add ``classes`` (class name -> :class:`ClassMetrics`, each with its own ``ci``),
    ``flows`` (one dict per flow: ``class``, ``flow``, ``throughput``, ``loss``, ``ci``),
    ``fairness`` (Jain's index over the flows' throughputs) and ``loss_flow_compare``;
    otherwise ``classes`` is empty and those are None.
    """

    def __init__(self, model: _core.Model, options: _core.SimOptions, raw: _core.SimResult):
        self.model, self.options = model, options
        self.ci: dict[str, float] = {}
        self.mean_count = self.mean_p_max = self.mean_max_th = None  # stateful AQM only (docs/stateful-aqm.md)
        for name, (value, hw) in raw.estimates.items():
            setattr(self, name, value)
            self.ci[name] = hw
        for name, (value, hw) in raw.pmfs.items():
            setattr(self, name, value)
            setattr(self, name + "_ci", hw)
            self.ci[name] = hw.tolist()
        self.classes: dict[str, ClassMetrics] = {}
        self.flows: list[dict[str, Any]] = []
        self.fairness = self.loss_flow_compare = None
        if raw.class_aware:
            self.fairness, self.ci["fairness"] = raw.estimates["fairness"]
            self.loss_flow_compare, self.ci["loss_flow_compare"] = raw.estimates["loss_flow_compare"]
            for c in raw.class_estimates:
                est = c["estimates"]
                pmf, pmf_hw = c["response_pmf"]
                ci: dict[str, Any] = {k: hw for k, (_, hw) in est.items()}
                ci["response_pmf"] = pmf_hw.tolist()
                self.classes[c["name"]] = ClassMetrics(c["name"], {k: v for k, (v, _) in est.items()}, pmf, ci, pmf_hw)
            names = list(self.classes)
            for f in raw.flow_estimates:
                self.flows.append({"class": names[f["class"]], "flow": f["flow"], "throughput": f["throughput"][0],
                                   "loss": f["loss"][0], "ci": {"throughput": f["throughput"][1],
                                                                "loss": f["loss"][1]}})
        self.series = raw.series
        self.measured_slots, self.served_packets = raw.measured_slots, raw.served_packets
        if self.served_packets == 0:  # no response time was observed: undefined (None in the JSON, as solve's)
            self.mean_response = self.var_response = float("nan")
        self.observations, self.seconds = raw.observations, raw.seconds
        self.slots_per_second, self.threads = raw.slots_per_second, raw.threads
        self.continuous = model.time == "continuous"
        self.events, self.events_per_second = raw.events, raw.events_per_second

    @property
    def warmup(self) -> int:
        """Slots (continuous time: time units) discarded per replication (the default is slots // 10)."""
        w = int(self.options.warmup)
        return int(self.options.slots) // 10 if w < 0 else w

    def __repr__(self) -> str:
        return (f"<SimulationResult mean_queue={self.mean_queue:.6g} ± {self.ci['mean_queue']:.2g} "
                f"loss={self.loss:.6g} ± {self.ci['loss']:.2g} slots={self.options.replications} x "
                f"{self.options.slots} seed={self.options.seed}>")

    def _repr_html_(self) -> str:
        from ._objects import html_table

        rows = [(ln[:ln.index("  ")].strip(), ln[ln.index("  "):].strip()) if "  " in ln else (ln, "")
                for ln in self.summary().splitlines()]
        return html_table("aqmchain simulation (95 % intervals)", rows)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of the estimates and their 95 % half-widths (non-finite values as None)."""
        fin = lambda v: float(v) if np.isfinite(v) else None  # noqa: E731  (JSON has no infinity)
        d: dict[str, Any] = {name: fin(getattr(self, name)) for name in SCALARS}
        for name in ("mean_count", "mean_p_max", "mean_max_th", "fairness", "loss_flow_compare"):
            if getattr(self, name) is not None:
                d[name] = fin(getattr(self, name))
        if self.classes:
            d["classes"] = {name: c.to_dict() for name, c in self.classes.items()}
            d["flows"] = [{"class": f["class"], "flow": f["flow"], "throughput": fin(f["throughput"]),
                           "loss": fin(f["loss"]), "ci": {k: fin(v) for k, v in f["ci"].items()}}
                          for f in self.flows]
        for name in ("queue_pmf", "system_pmf", "response_pmf"):
            d[name] = [float(v) for v in getattr(self, name)]
        if self.continuous:
            d["response_pmf"] = None
            d["response_note"] = "continuous time: the sojourn time has a density (mean and variance only)"
        elif self.served_packets == 0:
            d["response_pmf"] = None
            d["response_note"] = "no packet was served in the measured slots"
        d["ci"] = {k: [fin(x) for x in v] if isinstance(v, list) else fin(v) for k, v in self.ci.items()}
        d["simulation"] = {"slots": int(self.options.slots), "warmup": self.warmup,
                           "replications": int(self.options.replications), "seed": int(self.options.seed),
                           "batches": int(self.options.batches), "discretised": bool(self.options.discretised),
                           "measured_slots": int(self.measured_slots), "served_packets": int(self.served_packets),
                           "seconds": self.seconds, "slots_per_second": self.slots_per_second,
                           "threads": self.threads}
        # what slots, warmup and measured_slots count: slots, or the model's time units (continuous time)
        d["simulation"]["unit"] = "time" if self.continuous else "slot"
        if self.continuous:
            d["simulation"].update(events=int(self.events), events_per_second=self.events_per_second)
        return d

    def summary(self) -> str:
        """A text report: each metric with its 95 % half-width."""
        w = max(len(n) for n in SCALARS)
        lines = []
        for n in SCALARS:
            v, hw = getattr(self, n), self.ci[n]
            if not np.isfinite(v):
                lines.append(f"{n:<{w}}  n/a")
            elif not np.isfinite(hw):
                lines.append(f"{n:<{w}}  {v:.6g} (no interval: {_UNDEFINED_WHY.get(n, 'no observation')})")
            else:
                lines.append(f"{n:<{w}}  {v:.6g} ± {hw:.2g}")
        if self.classes:
            rate = "arrivals/time" if self.continuous else "arrivals/slot"
            lines.append(f"{'class':<{w}}  {rate:>13}  {'loss':>19}  {'mean_response':>13}  "
                         f"{'thr. share':>10}  {'queue share':>11}")
            for name, c in self.classes.items():
                lines.append(f"{name:<{w}}  {_num(c.arrival_rate, '13.6g')}  {_num(c.loss, '.6g'):>8} +- "
                             f"{_num(c.ci['loss'], '<8.2g')}  {_num(c.mean_response, '13.6g')}  "
                             f"{_num(c.throughput_share, '10.4f')}  {_num(c.queue_share, '11.4f')}")
            lines.append(f"{'fairness':<{w}}  {_num(self.fairness, '.6g')} +- {_num(self.ci['fairness'], '.2g')} "
                         f"(Jain's index over {len(self.flows)} flows)")
        unit = "time" if self.continuous else "slots"
        if self.arrival_rate == 0:
            lines.append(f"no packet arrived in the measured {unit}: per-arrival metrics and response times are "
                         "undefined (reported as 0 without an interval)")
        if self.continuous:
            lines.append(f"{'time':<{w}}  {self.options.replications} x {self.options.slots} time units "
                         f"({self.events} events, {self.events_per_second / 1e6:.1f} M events/s on {self.threads} "
                         f"threads, {self.seconds:.2f} s)")
        else:
            lines.append(f"{'slots':<{w}}  {self.options.replications} x {self.options.slots} "
                         f"({self.slots_per_second / 1e6:.1f} M slots/s on {self.threads} threads, "
                         f"{self.seconds:.2f} s)")
        return "\n".join(lines)


def simulate(model: _core.Model, *, slots: int = 10_000_000, replications: int = 4, seed: int = 1,
             warmup: int | None = None, batches: int = 20, discretised: bool = False, sample_every: int = 0,
             threads: int = 0) -> SimulationResult:
    """Simulate ``model`` (continuous avg unless ``discretised``) and return estimates with 95 % intervals.

    ``slots`` counts the slots of one replication including ``warmup`` (default slots // 10).
    Continuous-time models (``time = "continuous"``) are simulated event by event: ``slots``
    is then the simulated time of one replication and ``warmup`` and ``sample_every`` are
    times too, all in the model's time unit (whole numbers).
    Replication r uses the xoshiro256** stream of ``seed`` jumped r times, so the result
    depends on the seed only.
    """
    if not isinstance(model, _core.Model):
        raise _checks.model_error("model", "an aqmchain.Model", model)
    # SimOptions checks types and ranges (ModelError naming the option): an integral seed, a boolean
    # `discretised`, warmup -1 (slots / 10) or in [0, slots), counts below their upper bounds
    if discretised is True and model.grid.refine == "auto":
        # the chain's law on its automatic grid: resolve that grid the way solve_stationary does
        model = refine_grid(model)[0]
    opts = _core.SimOptions(slots=slots, warmup=-1 if warmup is None else warmup, replications=replications,
                            seed=seed, batches=batches, discretised=discretised, sample_every=sample_every,
                            threads=threads)
    return SimulationResult(model, opts, _core.simulate(model, opts))


def simulate_scenario(scenario: _core.Scenario, times: Any, **options: Any) -> _core.EnsembleResult:
    """Ensemble of independent replications of a piecewise-constant scenario, observed at ``times``.

    ``times`` are output slots (whole numbers, strictly increasing, in [0, total duration]);
    the state is observed at the end of each of them (after t slots; t = 0 is the initial state).  Every replication
    starts from the empty system with avg 0 and the modulator drawn from its stationary law,
    and carries its state across the phase boundaries.  ``options`` are the fields of
    :class:`EnsembleOptions` (``replications``, ``seed``, ``threads``, ``discretised``,
    ``memory_limit_bytes``; defaults from the C++ core).  Replication r uses the
    xoshiro256** stream of ``seed`` jumped r times, so the result does not depend on
    ``threads``.

    Returns an :class:`EnsembleResult`: per output slot ``mean_queue`` (waiting packets),
    ``mean_system``, ``mean_avg`` with 95 % half-widths (``*_hw``, Student t over the
    replications) and ``var_queue``; per interval ending there ``arrivals``, ``losses``
    (mean per replication) and ``loss_rate`` (lost / arrived) with half-widths.
    Continuous-time scenarios are simulated event by event (:func:`simulate`): ``times`` are
    then whole numbers of time units and the state is observed at those times.  With
    ``discretised=True`` an automatic grid is resolved as :func:`solve_transient` resolves
    it, so the ensemble follows the transient chain's grid.
    """
    if not isinstance(scenario, _core.Scenario):
        raise _checks.model_error("scenario", "an aqmchain.Scenario", scenario)
    if isinstance(times, (str, bytes, dict)):
        raise _checks.model_error("times", "a list of output slots", times)
    try:
        t = np.asarray(times, dtype=float)
    except (TypeError, ValueError):
        raise _checks.model_error("times", "a list of output slots (numbers)", times) from None
    if t.ndim != 1:
        raise _checks.model_error("times", "a one-dimensional list of output slots", times)
    if options.get("discretised") and any(p.model.grid.refine == "auto" and not len(p.model.grid.points)
                                          for p in scenario.phases):
        # the chain's grid: one automatic grid for all phases, as solve_transient builds it
        scenario = refine_grid(scenario)[0]
    return _core.simulate_scenario(scenario, t, _core.EnsembleOptions(**options))


class Comparison:
    """Analytic and simulated metrics side by side with z-scores."""

    METRICS = ("arrival_rate", "throughput", "loss", "loss_aqm", "loss_overflow", "mark_prob", "mean_queue",
               "var_queue", "mean_system", "var_system", "mean_response", "var_response")

    PER_ARRIVAL = ("loss", "loss_aqm", "loss_overflow", "mark_prob")
    PER_SLOT = ("arrival_rate", "throughput")
    #: per-class metrics compared for models with traffic classes (rows named ``class.metric``)
    CLASS_METRICS = ("arrival_rate", "throughput", "loss", "mark_prob", "mean_queue", "mean_response")

    def __init__(self, analytic, simulated: SimulationResult):
        self.analytic, self.simulated = analytic, simulated
        self.rows = []
        for name in self.METRICS:
            a = getattr(analytic, name)
            if a is None:
                continue
            s, hw = getattr(simulated, name), simulated.ci[name]
            self.rows.append((name, a, s, hw, self._z(name, a, s, hw, simulated.arrival_rate)))
        #: per-class rows (``class.metric``, analytic, simulated, half-width, z) of a model with
        #: traffic classes, chain against simulator class by class
        self.class_rows = []
        a_classes = getattr(analytic, "classes", None) or {}
        if simulated.classes and a_classes:
            for cname, sc in simulated.classes.items():
                ac = a_classes.get(cname)
                if ac is None:
                    continue
                for name in self.CLASS_METRICS:
                    a, s, hw = getattr(ac, name), getattr(sc, name), (sc.ci or {}).get(name, float("nan"))
                    self.class_rows.append((f"{cname}.{name}", a, s, hw, self._z(name, a, s, hw, sc.arrival_rate)))

    def _z(self, name: str, a: float, s: float, hw: float, arrival_rate: float) -> float:
        sd = hw / 1.96
        sim = self.simulated
        if sd == 0 and name in self.PER_ARRIVAL + self.PER_SLOT:
            # no event seen in any batch: the interval is degenerate; use the Poisson
            # standard deviation of the count the analytic rate predicts.
            trials = sim.measured_slots * (arrival_rate if name in self.PER_ARRIVAL else 1.0)
            sd = np.sqrt(a / trials) if a > 0 and trials > 0 else 0.0
        if not (np.isfinite(a) and np.isfinite(s) and np.isfinite(sd)) or (
                sd == 0 and arrival_rate == 0 and abs(s - a) >= 1e-9):
            return float("nan")  # undefined: no arrival / no admitted packet in the simulation
        return (s - a) / sd if sd > 0 else (0.0 if abs(s - a) < 1e-9 else float("inf"))

    @property
    def chain_law(self) -> str:
        """What the chain is to the simulated system: "exact" (single class, or the exact class
        chain) or "approx" (the two-class random-order approximation)."""
        return "approx" if getattr(self.analytic, "class_chain", "single") == "approx" else "exact"

    def max_abs_z(self) -> float:
        """The largest |z| over the (aggregate) metrics where z is defined (0 when none is)."""
        zs = [abs(r[4]) for r in self.rows if not np.isnan(r[4])]
        return max(zs) if zs else 0.0

    def undefined(self) -> list[str]:
        """Metrics without a z-score: the simulation saw no event to estimate them from."""
        return [r[0] for r in self.rows if np.isnan(r[4])]

    def table(self) -> str:
        """A text table, one row per metric: analytic, simulated, 95 % half-width, z-score."""
        w = max([16] + [len(r[0]) + 2 for r in self.class_rows])
        head = f"{'metric':<{w}}{'analytic':>14}{'simulated':>14}{'+-95%':>11}{'z':>8}"
        lines = [head, "-" * len(head)]

        def row(name, a, s, hw, z) -> str:
            zs = "n/a" if np.isnan(z) else ("inf" if np.isinf(z) else f"{z:.2f}")
            return f"{name:<{w}}{_num(a, '.6g'):>14}{_num(s, '.6g'):>14}{_num(hw, '.2g'):>11}{zs:>8}"

        lines += [row(*r) for r in self.rows]
        if self.class_rows:
            approx = self.chain_law == "approx"
            lines.append("per class (chain: " + ("the two-class random-order approximation, not the exact law; "
                                                 "z measures its error too)" if approx else "exact class chain)"))
            lines += [row(*r) for r in self.class_rows]
        if self.simulated.arrival_rate == 0:
            lines.append("no packet arrived in the simulation: per-arrival metrics and response times have no "
                         "interval, their z is n/a")
        elif self.undefined():
            lines.append(f"z n/a (no event observed in the simulation): {', '.join(self.undefined())}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Comparison of {len(self.rows)} metrics, max |z| = {self.max_abs_z():.2f}>"

    def _repr_html_(self) -> str:
        from ._objects import html_table

        return html_table("chain vs simulation (95 % intervals, z-scores)",
                          [tuple((re.split(r"\s{2,}", ln.strip(), maxsplit=1) + [""])[:2])
                           for ln in self.table().splitlines()])

    def to_dict(self) -> dict[str, Any]:
        """The comparison as JSON-ready data: one row per metric and max |z|."""
        fin = lambda v: float(v) if v is not None and np.isfinite(v) else None  # noqa: E731
        row = lambda n, a, s, hw, z: {"metric": n, "analytic": fin(a), "simulated": fin(s),  # noqa: E731
                                      "half_width": fin(hw), "z": fin(z)}
        d = {"metrics": [row(*r) for r in self.rows], "max_abs_z": self.max_abs_z(), "z_undefined": self.undefined()}
        if self.class_rows:
            d["classes"] = [row(*r) for r in self.class_rows]
            d["chain_law"] = self.chain_law
        return d

    def plot(self, path: str | None = None, *, ax: Any = None, name: str | None = None) -> Any:
        """The queue pmf overlay (chain line, simulation points with 95 % bars, log scale,
        min_th..max_th band; :func:`aqmchain.plots.queue_pmf`) as a Figure; also written
        to ``path`` (PNG, ...) when one is given.  No backend is chosen or changed."""
        from .plots import queue_pmf

        from .plots import save

        fig = queue_pmf(self.analytic, self.simulated, ax=ax, name=name)
        if path is not None:
            save(fig, path, dpi=120)
        return fig


def compare(model: _core.Model, *, solver: dict | None = None, **sim_options: Any) -> Comparison:
    """Solve the chain and simulate the same model; see :class:`Comparison`."""
    from .stationary import solve_stationary

    return Comparison(solve_stationary(model, **(solver or {})), simulate(model, **sim_options))
