"""Solve one model under the three drop policies of SPEC 2.5 and tabulate response times."""

from __future__ import annotations

from typing import Any

from . import _core
from .modelfile import model_from_dict, model_to_dict
from .stationary import StationaryResult, solve_stationary

__all__ = ["compare_policies", "PolicyComparison"]

POLICIES = ("tail", "front", "random")


class PolicyComparison:
    """``results[policy]`` is the :class:`StationaryResult` of the model under that policy."""

    def __init__(self, results: dict[str, StationaryResult]):
        self.results = results

    def rows(self) -> list[dict[str, Any]]:
        tail = self.results["tail"].mean_response
        out = []
        for p, r in self.results.items():
            out.append({"policy": p, "mean_response": r.mean_response, "var_response": r.var_response,
                        "pushed_out_prob": r.pushed_out_prob, "loss": r.loss, "mean_queue": r.mean_queue,
                        "relative_to_tail": (r.mean_response - tail) / tail,
                        "method": r.response_method, "littles_law_error": r.littles_law_error})
        return out

    def table(self) -> str:
        head = (f"{'policy':<8}{'E[R]':>12}{'Var[R]':>14}{'vs tail':>10}{'pushed out':>13}{'loss':>12}"
                f"{'mean queue':>12}")
        lines = [head, "-" * len(head)]
        for row in self.rows():
            lines.append(f"{row['policy']:<8}{row['mean_response']:>12.6g}{row['var_response']:>14.6g}"
                         f"{100 * row['relative_to_tail']:>9.2f}%{row['pushed_out_prob']:>13.4g}"
                         f"{row['loss']:>12.6g}{row['mean_queue']:>12.6g}")
        return "\n".join(lines)


def compare_policies(model: _core.Model, **options: Any) -> PolicyComparison:
    """The model solved under tail, front and random drop (the queue-length law is the same;
    the chain is solved once per policy so that every answer carries its own accounts)."""
    doc = model_to_dict(model)
    results = {}
    for policy in POLICIES:
        doc["aqm"]["policy"] = policy
        results[policy] = solve_stationary(model_from_dict(doc)[0], **options)
    return PolicyComparison(results)
