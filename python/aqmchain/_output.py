"""Bounded JSON output: pmf lists are capped before they are turned into JSON.

A valid but pathological model (``mu = 1e-7``) has a response-time pmf of tens of
millions of entries.  :func:`capped` returns a shallow copy of a result whose pmfs are
cut where the tail beyond holds less than ``REL_TAIL`` of the mass (response-time pmf
only: queue and system pmfs keep their far tail, which is what exact analysis is for) and
at ``MAX_LEN`` entries in any case, plus the fields that say what was cut:
``<pmf>_truncated`` (always), ``<pmf>_cut_mass`` and ``<pmf>_full_length`` (when cut).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

MAX_LEN = 100_000
REL_TAIL = 1e-15

# pmf name -> (cut the negligible tail?, extra entries allowed, arrays cut to the same length)
_PMFS = {
    "response_pmf": (True, 0, ()),
    "queue_pmf": (False, 0, ()),
    "system_pmf": (False, 1, ()),  # n = 0..N beside q = 0..N-1
    "avg_pmf": (False, 0, ("avg_grid",)),
}


def capped(result: Any, max_len: int = MAX_LEN, rel_tail: float = REL_TAIL) -> tuple[Any, dict[str, Any]]:
    """``(copy of result with capped pmfs, {"<pmf>_truncated": ..., ...})``."""
    out = copy.copy(result)
    info: dict[str, Any] = {}
    ci = getattr(result, "ci", None)
    if isinstance(ci, dict):
        out.ci = dict(ci)
    for name, (tail_cut, extra, paired) in _PMFS.items():
        a = getattr(result, name, None)
        if a is None:
            continue
        a = np.asarray(a, dtype=float)
        n = len(a)
        keep = n
        if tail_cut and n:
            total = float(np.sum(a))
            if total > 0 and math.isfinite(total):
                suffix = np.cumsum(a[::-1])[::-1]  # suffix[i] = P(X >= i)
                keep = max(1, int(np.count_nonzero(suffix > rel_tail * total)))
        keep = min(keep, max_len + extra)
        info[f"{name}_truncated"] = keep < n
        if keep < n:
            info[f"{name}_cut_mass"] = float(np.sum(a[keep:]))
            info[f"{name}_full_length"] = n
            setattr(out, name, a[:keep])
            for other in paired + (name + "_ci",):
                b = getattr(result, other, None)
                if b is not None:
                    setattr(out, other, np.asarray(b)[:keep])
            if isinstance(ci, dict) and isinstance(ci.get(name), list):
                out.ci[name] = ci[name][:keep]
    return out, info


def json_safe(obj: Any) -> Any:
    """``obj`` with numpy scalars as Python numbers and nan / inf as ``None`` (JSON has neither)."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [json_safe(v) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    return obj
