"""Argument checks of the Python layer.

The core's types convert and check their own arguments in the bindings (the model's kinds
from the core's registries; StationaryOptions from the core's table of solver options;
SimOptions and EnsembleOptions field by field): a wrong type or range is a
:class:`ModelError` or :class:`OptionError` naming the parameter, the bound and the value.
This module holds the same checks for the values only the Python layer reads (a sweep's
points, an optimiser's bounds, the builder's memory budget, ...), the rendering of values in
messages, and the renaming of a core error's parameter to the name the user gave (a model-file
key such as ``solver.tol``, a command-line option such as ``--tol``).
"""

from __future__ import annotations

import math
import numbers
import operator
import re
from typing import Any, Callable

import numpy as np

from . import _core
from ._core import ModelError, OptionError

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# Ranges of counts: defined once, in the C++ core, and read from it here.
MAX_BUFFER = _core.Model.max_buffer
STATEFUL_INT_BOUNDS: dict[str, tuple[int, int]] = dict(_core.Aqm.stateful_ranges())
MAX_MEMORY_GB = 1e6  # a memory budget above 1 PB is a typo


def fmt(value: Any, limit: int = 60) -> str:
    """A short, one-line rendering of a value for an error message (never fails)."""
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, numbers.Integral):
        v = int(value)
        if v.bit_length() > 200:  # over ~60 digits (str() fails beyond 4300)
            digits = int((v.bit_length() - 1) * math.log10(2))
            while abs(v) >= 10**digits:
                digits += 1
            return f"{'-' if v < 0 else ''}an integer of {digits} digits"
        return str(v)
    if isinstance(value, float):  # numpy floats too: the shortest round-trip form, never np.float64(...)
        if not math.isfinite(value):
            return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return repr(float(value))
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001  (a repr that fails: huge ints inside a list, ...)
        text = f"a {type(value).__name__}"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def name(key: str) -> str:
    """A TOML key as it can be shown in a one-line message."""
    if re.fullmatch(r"[A-Za-z0-9_\-.\[\]]{1,80}", key):
        return key
    return fmt(key)


def model_error(param: str, bound: str, value: Any) -> ModelError:
    what = "option" if param.startswith("--") else "parameter"  # a command-line option, e.g. --plot
    e = ModelError(f"{what} '{param}' must be {bound}, got {fmt(value)}")
    e.param = param
    return e


def option_error(param: str, bound: str, value: Any) -> OptionError:
    e = OptionError(f"solver option '{param}' must be {bound}, got {fmt(value)}")
    e.param = param
    return e


def integer(param: str, value: Any, lo: int, hi: int, *, err: Callable = model_error,
            allow_integral_float: bool = False) -> int:
    """``value`` as an int in [lo, hi] (bool and non-integral floats are refused)."""
    if isinstance(value, bool):
        raise err(param, f"an integer in [{lo}, {hi}]", value)
    if allow_integral_float and isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        f = float(value)
        if not (math.isfinite(f) and f.is_integer()):
            raise err(param, f"an integer in [{lo}, {hi}]", value)
        value = int(f)
    try:
        v = operator.index(value)
    except TypeError:
        raise err(param, f"an integer in [{lo}, {hi}]", value) from None
    if v < lo:
        raise err(param, f">= {lo}", v)
    if v > hi:
        raise err(param, f"<= {hi}", v)
    return v


def real(param: str, value: Any, *, err: Callable = model_error) -> float:
    """``value`` as a finite float (bool, strings and overflowing integers are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise err(param, "a finite number", value)
    try:
        f = float(value)
    except (OverflowError, ValueError):
        raise err(param, "a finite number", value) from None
    if not math.isfinite(f):
        raise err(param, "a finite number", value)
    return f


def reals(param: str, value: Any, depth: int = 1, *, err: Callable = model_error) -> list:
    """A list (depth 1) or list of lists (depth 2) of finite floats."""
    if depth == 0:
        return real(param, value, err=err)
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise err(param, "a list" if depth == 1 else "a list of lists", value)
    if depth == 1 and isinstance(value, list) and all(type(x) is float for x in value) \
            and math.isfinite(sum(value)):  # plain floats with a finite sum: all finite (a long grid's points)
        return list(value)
    return [reals(f"{param}[{i}]", x, depth - 1, err=err) for i, x in enumerate(value)]


def string(param: str, value: Any, *, err: Callable = model_error) -> str:
    if not isinstance(value, str):
        raise err(param, "a string", value)
    return value


def boolean(param: str, value: Any, *, err: Callable = model_error) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise err(param, "a boolean (true or false)", value)
    return bool(value)


def memory_limit_gb(param: str, value: Any, *, err: Callable = model_error) -> float:
    v = real(param, value, err=err)
    if not 0.0 < v <= MAX_MEMORY_GB:
        raise err(param, f"in (0, {MAX_MEMORY_GB:g}] (GB)", value)
    return v


def renamed(exc: Exception, shown: str, err: Callable) -> Exception:
    """The core's error ``"... option 'x' must be B, got V"`` (or ``parameter 'x' ...``) with the
    parameter shown as the user gave it (``solver.tol``, ``--tol``), in the kind of error ``err``
    makes (its message prefix and class, ``.param = shown``)."""
    m = re.match(r"(?:solver option|parameter|option) '[^']*' (must .*)", str(exc), re.S)
    if not m:
        return exc
    head = err(shown, "\0", 0)
    new = type(head)(str(head).split(" must be \0")[0] + " " + m.group(1))
    new.param = shown
    return new


def solver_options(options: dict, *, prefix: str = "", names: dict[str, str] | None = None,
                   err: Callable = option_error) -> dict:
    """The solver options converted and checked by the core's table (``StationaryOptions``; the
    builder's ``memory_limit_gb`` here); an error names ``names.get(key, prefix + key)``."""
    names = names or {}
    out = {}
    for key, value in options.items():
        shown = names.get(key, prefix + key)
        if key == "memory_limit_gb":
            out[key] = memory_limit_gb(shown, value, err=err)
            continue
        try:
            out[key] = getattr(_core.StationaryOptions(**{key: value}), key)
        except (OptionError, ModelError) as e:
            raise renamed(e, shown, err) from None
    return out


def sim_options(slots: Any, warmup: Any, replications: Any, seed: Any, batches: Any, discretised: Any,
                sample_every: Any, threads: Any, *, names: dict[str, str] | None = None,
                err: Callable = model_error) -> dict:
    """Simulation options checked by ``SimOptions`` (``names`` maps an option to the name shown,
    e.g. ``--slots``)."""
    kw = {"slots": slots, "warmup": -1 if warmup is None else warmup, "replications": replications, "seed": seed,
          "batches": batches, "discretised": discretised, "sample_every": sample_every, "threads": threads}
    try:
        o = _core.SimOptions(**kw)
    except ModelError as e:
        p = getattr(e, "param", None)
        raise (renamed(e, (names or {}).get(p, p), err) if p else e) from None
    return {k: getattr(o, k) for k in kw}


def stateful_value(key: str, value: Any, default: Any, *, err: Callable = model_error) -> Any:
    """Type check of a stateful-AQM key, by the type of its default, and the range of an
    integer key (both defined in the core)."""
    param = f"aqm.{key}"
    if isinstance(default, bool):
        return boolean(param, value, err=err)
    if isinstance(default, int):
        lo, hi = STATEFUL_INT_BOUNDS.get(key, (-INT64_MAX, INT64_MAX))
        return integer(param, value, lo, hi, err=err)
    if isinstance(default, str):
        return string(param, value, err=err)
    return real(param, value, err=err)


# The adaptive RED's keys (docs/stateful-aqm.md; names from the core's table of features).
_FEATURES = {f["name"]: f for f in _core.Aqm.features}  # the core's table of the stateful AQM's features
ADAPTIVE_KEYS = tuple(sorted(_FEATURES["adaptive"]["keys"]))


def did_you_mean(key: str, known: Any, prefix: str = "") -> str:
    """`` (did you mean 'x'?)`` for a misspelt key with a close known one, else ``""``."""
    import difflib

    if not isinstance(key, str):
        return ""
    close = difflib.get_close_matches(key, [k for k in known if isinstance(k, str)], n=2, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(f"'{prefix}{c}'" for c in close) + "?)"


def coefficients(param: str, value: Any, *, err: Callable = model_error) -> list:
    """A list of at most ``Aqm.max_coefficients`` finite numbers (REDwM's a, b or triple)."""
    v = reals(param, value, err=err)
    if len(v) > _core.Aqm.max_coefficients:
        raise err(param, f"a list of at most {_core.Aqm.max_coefficients} coefficients", f"{len(v)} coefficients")
    return v
