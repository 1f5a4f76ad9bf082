"""Per-class results (docs/classes.md): one object per traffic class, the same names for the
chain and the simulator, and the JSON form ``classes: {name: {...}}``."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _output

__all__ = ["CLASS_METRICS", "ClassMetrics"]

CLASS_METRICS = ("arrival_rate", "loss", "loss_aqm", "loss_overflow", "loss_flow_compare", "loss_pushed_out",
                 "mark_prob", "throughput", "throughput_share", "mean_response", "var_response", "mean_queue",
                 "queue_share")
"""The scalar metrics of a traffic class (attributes of :class:`ClassMetrics`), written once: the chain
and the simulator report these names."""


def _fin(v: Any) -> Any:
    return float(v) if v is not None and np.isfinite(v) else None  # JSON has no infinity or NaN


class ClassMetrics:
    """Metrics of one traffic class.

    Rates are per slot (``arrival_rate``, ``throughput``); losses are per arrival of the
    class, split by cause: ``loss_aqm`` (the arrival dropped by an AQM decision),
    ``loss_overflow`` (dropped on a full buffer), ``loss_flow_compare`` (the arrival or a
    queued packet of the class lost to the flow comparison) and ``loss_pushed_out`` (a
    queued packet of the class discarded by the front/random drop policy or by the
    modified-RED search); ``loss`` is their sum.  ``mark_prob``: ECN marks per arrival.
    ``throughput_share``: the class's share of all departures.  ``mean_response``,
    ``var_response``, ``response_pmf``: response time R = D - A of its served packets.
    ``mean_queue``: mean packets of the class in the system (waiting or in service);
    ``queue_share``: its share of all packets in the system.  Simulation results carry
    ``ci`` (95 % half-widths by metric name) and ``response_pmf_ci``.
    """

    def __init__(self, name: str, values: dict[str, float], response_pmf: Any, ci: dict[str, Any] | None = None,
                 response_pmf_ci: Any = None):
        self.name = name
        for key in CLASS_METRICS:
            setattr(self, key, float(values[key]))
        self.response_pmf = np.asarray(response_pmf, dtype=float)
        self.ci = ci
        if response_pmf_ci is not None:
            self.response_pmf_ci = np.asarray(response_pmf_ci, dtype=float)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, the response-time pmf capped like the top-level pmfs."""
        short, info = _output.capped(self)
        d: dict[str, Any] = {key: _fin(getattr(self, key)) for key in CLASS_METRICS}
        d["response_pmf"] = [float(v) for v in short.response_pmf]
        d.update(info)
        if self.ci is not None:
            d["ci"] = {k: [_fin(x) for x in v] if isinstance(v, list) else _fin(v) for k, v in short.ci.items()}
        return d

    def __repr__(self) -> str:
        return (f"ClassMetrics('{self.name}', loss={self.loss:.6g}, throughput={self.throughput:.6g}, "
                f"mean_response={self.mean_response:.6g}, mean_queue={self.mean_queue:.6g})")
