"""Slotted Monte Carlo simulation of a model (SPEC 7) and the chain-vs-simulation comparison."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core

__all__ = ["simulate", "SimulationResult", "compare", "Comparison"]

SCALARS = ("arrival_rate", "throughput", "loss", "loss_aqm", "loss_overflow", "mark_prob", "pushed_out_prob",
           "mean_system", "var_system", "mean_queue", "var_queue", "mean_avg", "mean_response", "var_response")


class SimulationResult:
    """Simulation estimates under the SPEC 8 names; ``ci[name]`` is the 95 % half-width.

    pmfs: ``queue_pmf``, ``system_pmf``, ``response_pmf`` with half-widths in
    ``queue_pmf_ci`` etc.  ``series`` holds the time series of replication 0
    (``slot``, ``level``, ``avg``, ``drops``) when ``sample_every`` was given.
    """

    def __init__(self, model: _core.Model, options: _core.SimOptions, raw: _core.SimResult):
        self.model, self.options = model, options
        self.ci: dict[str, float] = {}
        for name, (value, hw) in raw.estimates.items():
            setattr(self, name, value)
            self.ci[name] = hw
        for name, (value, hw) in raw.pmfs.items():
            setattr(self, name, value)
            setattr(self, name + "_ci", hw)
            self.ci[name] = hw.tolist()
        self.series = raw.series
        self.measured_slots, self.served_packets = raw.measured_slots, raw.served_packets
        self.observations, self.seconds = raw.observations, raw.seconds
        self.slots_per_second, self.threads = raw.slots_per_second, raw.threads

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {name: float(getattr(self, name)) for name in SCALARS}
        for name in ("queue_pmf", "system_pmf", "response_pmf"):
            d[name] = [float(v) for v in getattr(self, name)]
        fin = lambda v: float(v) if np.isfinite(v) else None  # noqa: E731  (JSON has no infinity)
        d["ci"] = {k: [fin(x) for x in v] if isinstance(v, list) else fin(v) for k, v in self.ci.items()}
        d["simulation"] = {"slots": int(self.options.slots), "warmup": int(self.options.warmup),
                           "replications": int(self.options.replications), "seed": int(self.options.seed),
                           "batches": int(self.options.batches), "discretised": bool(self.options.discretised),
                           "measured_slots": int(self.measured_slots), "served_packets": int(self.served_packets),
                           "seconds": self.seconds, "slots_per_second": self.slots_per_second,
                           "threads": self.threads}
        return d

    def summary(self) -> str:
        w = max(len(n) for n in SCALARS)
        lines = [f"{n:<{w}}  {getattr(self, n):.6g} +- {self.ci[n]:.2g}" for n in SCALARS]
        lines.append(f"{'slots':<{w}}  {self.options.replications} x {self.options.slots} "
                     f"({self.slots_per_second / 1e6:.1f} M slots/s on {self.threads} threads, {self.seconds:.2f} s)")
        return "\n".join(lines)


def simulate(model: _core.Model, *, slots: int = 10_000_000, replications: int = 4, seed: int = 1,
             warmup: int | None = None, batches: int = 20, discretised: bool = False, sample_every: int = 0,
             threads: int = 0) -> SimulationResult:
    """Simulate ``model`` (continuous avg unless ``discretised``) and return estimates with 95 % intervals.

    ``slots`` counts the slots of one replication including ``warmup`` (default slots // 10).
    Replication r uses the xoshiro256** stream of ``seed`` jumped r times, so the result
    depends on the seed only.
    """
    opts = _core.sim_options(slots=int(slots), warmup=-1 if warmup is None else int(warmup),
                            replications=int(replications), seed=int(seed), batches=int(batches),
                            discretised=bool(discretised), sample_every=int(sample_every), threads=int(threads))
    return SimulationResult(model, opts, _core.simulate(model, opts))


class Comparison:
    """Analytic and simulated metrics side by side with z-scores."""

    METRICS = ("arrival_rate", "throughput", "loss", "loss_aqm", "loss_overflow", "mark_prob", "mean_queue",
               "var_queue", "mean_system", "var_system", "mean_response", "var_response")

    PER_ARRIVAL = ("loss", "loss_aqm", "loss_overflow", "mark_prob")
    PER_SLOT = ("arrival_rate", "throughput")

    def __init__(self, analytic, simulated: SimulationResult):
        self.analytic, self.simulated = analytic, simulated
        self.rows = []
        for name in self.METRICS:
            a = getattr(analytic, name)
            if a is None:
                continue
            s, hw = getattr(simulated, name), simulated.ci[name]
            sd = hw / 1.96
            if sd == 0 and name in self.PER_ARRIVAL + self.PER_SLOT:
                # no event seen in any batch: the interval is degenerate; use the Poisson
                # standard deviation of the count the analytic rate predicts.
                trials = simulated.measured_slots * (simulated.arrival_rate if name in self.PER_ARRIVAL else 1.0)
                sd = np.sqrt(a / trials) if a > 0 and trials > 0 else 0.0
            z = (s - a) / sd if sd > 0 else (0.0 if abs(s - a) < 1e-9 else float("inf"))
            self.rows.append((name, a, s, hw, z))

    def max_abs_z(self) -> float:
        return max(abs(r[4]) for r in self.rows)

    def table(self) -> str:
        head = f"{'metric':<16}{'analytic':>14}{'simulated':>14}{'+-95%':>11}{'z':>8}"
        lines = [head, "-" * len(head)]
        for name, a, s, hw, z in self.rows:
            lines.append(f"{name:<16}{a:>14.6g}{s:>14.6g}{hw:>11.2g}{z:>8.2f}")
        return "\n".join(lines)

    def plot(self, path: str) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        a, s = self.analytic, self.simulated
        fig, ax = plt.subplots(figsize=(7, 4))
        k = np.arange(len(a.queue_pmf))
        ax.semilogy(k, np.maximum(a.queue_pmf, 1e-300), lw=1.5, label="chain (analytic)")
        has = s.queue_pmf > 0
        v, hw = s.queue_pmf[has], s.queue_pmf_ci[has]
        ax.errorbar(k[has], v, yerr=[np.minimum(hw, 0.9 * v), hw], fmt=".", ms=3, lw=0.6,
                    label="simulation +- 95%")
        ax.set_ylim(1e-15, 1)
        ax.set_xlabel("waiting packets q")
        ax.set_ylabel("P(q)")
        ax.set_title("queue-length distribution: chain vs simulation")
        ax.legend(loc="lower left")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)


def compare(model: _core.Model, *, solver: dict | None = None, **sim_options: Any) -> Comparison:
    """Solve the chain and simulate the same model; see :class:`Comparison`."""
    from .stationary import solve_stationary

    return Comparison(solve_stationary(model, **(solver or {})), simulate(model, **sim_options))
