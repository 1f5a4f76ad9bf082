"""Per-class results (docs/classes.md): one object per traffic class, the same names for the
chain and the simulator, and the JSON form ``classes: {name: {...}}``."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _output

__all__ = ["CLASS_METRICS", "ClassMetrics", "chain_flows"]

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


def jain(x: Any) -> float:
    """Jain's index (sum x)^2 / (F sum x^2) of the throughputs x of F flows."""
    x = np.asarray(x, dtype=float)
    s2 = float(np.sum(x * x))
    return float(np.sum(x)) ** 2 / (len(x) * s2) if s2 > 0 else 1.0


def chain_flows(model: Any, classes: dict[str, "ClassMetrics"]) -> tuple[list | None, float | None, str]:
    """Per-flow throughput and loss and Jain's index from a chain's per-class results
    (docs/classes.md): without the flow comparison nothing reads a packet's flow, so a flow of
    weight p in its class has the class's loss and p times its throughput, exactly; with the
    comparison the flows of a class with equal weights are exchangeable and share the class's
    numbers equally (a flow's loss is the class's: how close it is to the real one is how close
    the chain's class loss is; the window chain, ``classes="window"``, narrows that gap); unequal
    weights under the comparison are refused (the chain does not carry the flows): returns
    (None, None, the reason)."""
    specs = list(model.classes) or [None]
    if model.aqm.flow_compare:
        for k in specs:
            if k is not None and k.flow_weights and len(set(k.flow_weights)) > 1:
                return None, None, (f"per-flow metrics under the flow comparison need equal flow weights (class "
                                    f"'{k.name}' has flow_weights {list(k.flow_weights)}): the chain carries classes, "
                                    f"not flows; the simulator measures them")
    flows = []
    for k, (name, c) in zip(specs, classes.items()):
        F = 1 if k is None else k.flows
        weights = list(k.flow_weights) if k is not None and k.flow_weights else [1.0 / F] * F
        total = sum(weights)
        for f, wt in enumerate(weights):
            flows.append({"class": name, "flow": f, "throughput": c.throughput * wt / total, "loss": c.loss})
    return flows, jain([f["throughput"] for f in flows]), ""
