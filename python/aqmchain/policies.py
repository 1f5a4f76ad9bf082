"""Solve one model under the three drop policies (tail, front, random) and tabulate response times."""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

from . import _core
from .modelfile import model_from_dict, model_to_dict
from .stationary import StationaryResult, _limit_bytes, _max_states, solve_stationary

__all__ = ["compare_policies", "PolicyComparison"]

POLICIES = ("tail", "front", "random")


def _num(v: Any, spec: str) -> str:
    return format(v, spec) if v is not None and math.isfinite(v) else "n/a"


class PolicyComparison:
    """``results[policy]`` is the :class:`StationaryResult` of the model under that policy."""

    def __init__(self, results: dict[str, StationaryResult]):
        self.results = results

    def rows(self) -> list[dict[str, Any]]:
        """One dict per policy; response fields are ``None`` where no packet is admitted (no traffic)."""
        tail = self.results["tail"].mean_response
        out = []
        for p, r in self.results.items():
            rel = None
            if r.mean_response is not None and tail is not None and tail > 0:
                rel = (r.mean_response - tail) / tail
            out.append({"policy": p, "mean_response": r.mean_response, "var_response": r.var_response,
                        "pushed_out_prob": r.pushed_out_prob, "loss": r.loss, "mean_queue": r.mean_queue,
                        "relative_to_tail": rel,
                        "method": r.response_method, "littles_law_error": r.littles_law_error})
        return out

    def __repr__(self) -> str:
        parts = [f"{r['policy']}: E[R]={r['mean_response']:.6g}" if r["mean_response"] is not None
                 else f"{r['policy']}: E[R]=n/a" for r in self.rows()]
        return "<PolicyComparison " + ", ".join(parts) + ">"

    def _repr_html_(self) -> str:
        import html

        return "<pre>" + html.escape(self.table()) + "</pre>"

    def note(self) -> str | None:
        """Why response times are missing (no packet admitted), or ``None``."""
        r = self.results["tail"]
        return None if r.mean_response is not None else f"response times n/a: {r.response_note}"

    def table(self) -> str:
        """A text table, one row per policy: E[R], Var[R], the change against tail drop, the
        pushed-out probability, loss and mean queue."""
        head = (f"{'policy':<8}{'E[R]':>12}{'Var[R]':>14}{'vs tail':>10}{'pushed out':>13}{'loss':>12}"
                f"{'mean queue':>12}")
        lines = [head, "-" * len(head)]
        for row in self.rows():
            rel = row["relative_to_tail"]
            lines.append(f"{row['policy']:<8}{_num(row['mean_response'], '.6g'):>12}"
                         f"{_num(row['var_response'], '.6g'):>14}"
                         f"{'n/a' if rel is None or not math.isfinite(rel) else format(100 * rel, '.2f') + '%':>10}"
                         f"{_num(row['pushed_out_prob'], '.4g'):>13}"
                         f"{_num(row['loss'], '.6g'):>12}{_num(row['mean_queue'], '.6g'):>12}")
        if self.note():
            lines.append(self.note())
        return "\n".join(lines)


def compare_policies(model: _core.Model, *, progress: Callable[[int, int, str], None] | None = None,
                     **options: Any) -> PolicyComparison:
    """The model solved under tail, front and random drop (the queue-length law is the same;
    the chain is solved once per policy so that every answer carries its own accounts).
    Front and random drop build the tagged-packet chain (one state per packet position in
    each state: :func:`aqmchain.info` reports its size).  ``progress(i, 3, policy)`` is called
    before each policy is solved."""
    from .modelfile import solver_options

    options = {**solver_options(model), **options}
    if "memory_limit_gb" in options and options["memory_limit_gb"] is None:
        options.pop("memory_limit_gb")
    doc = model_to_dict(model)
    results = {}
    for i, policy in enumerate(POLICIES):
        if progress is not None:
            progress(i, len(POLICIES), policy)
        doc["aqm"]["policy"] = policy
        with warnings.catch_warnings():  # the model's own warnings were given when it was built
            warnings.simplefilter("ignore", UserWarning)
            variant = model_from_dict(doc)[0]
        results[policy] = solve_stationary(variant, **options)
        if i == 0:  # before any tagged-packet chain: its budgets, from the chain just built
            opts = {k: v for k, v in options.items() if k in ("tagged_max_states", "memory_limit_gb")}
            _core.check_tagged_budget(results[policy].chain, "tagged", _limit_bytes(opts.get("memory_limit_gb")),
                                      _max_states(opts.get("tagged_max_states"), "tagged_max_states"))
    if progress is not None:
        progress(len(POLICIES), len(POLICIES), "")
    return PolicyComparison(results)
