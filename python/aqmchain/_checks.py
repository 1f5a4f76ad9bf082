"""Argument checks in front of the C++ core.

The pybind11 constructors take C integers (int32 for buffer, k, n, ncv; int64 for
max_iter and slots; uint64 for the seed) and doubles: a Python integer outside that
range, a string or ``None`` reaches them as a ``TypeError`` that names no parameter.
This module checks types and ranges first and raises :class:`ModelError` (model
parameters, simulation options, with ``.param`` set) or :class:`OptionError` (solver
options) naming the parameter, the bound and the value: the model-file loader and the
CLI use them, and :func:`install` puts them in front of the options classes' constructors
(SimOptions, StationaryOptions, EnsembleOptions) once, at import.  The model's types check
their arguments in the bindings (the kinds from the core's registries).
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
UINT64_MAX = 2**64 - 1

# Ranges of counts: defined once, in the C++ core, and read from it here.
MAX_BUFFER = _core.Model.max_buffer
MAX_SSMP_N = _core.Source.max_ssmp_n  # the SSMP modulator is a dense n x n matrix
SOLVER_INT_BOUNDS: dict[str, tuple[int, int]] = dict(_core.StationaryOptions.int_ranges())
STATEFUL_INT_BOUNDS: dict[str, tuple[int, int]] = dict(_core.Aqm.stateful_ranges())
SIM_INT_BOUNDS: dict[str, tuple[int, int]] = {
    **_core.SimOptions.int_ranges(),  # slots, replications, batches, threads
    "seed": (0, UINT64_MAX),  # the C types' ranges
    "sample_every": (0, INT64_MAX),
}
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


def solver_options(options: dict, *, prefix: str = "", err: Callable = option_error) -> dict:
    """Type and range checks of the keyword options of :func:`solve_stationary` (values are
    returned converted; names are shown as ``prefix + name``)."""
    out = dict(options)
    for key, value in options.items():
        p = prefix + key
        if key in SOLVER_INT_BOUNDS:
            lo, hi = SOLVER_INT_BOUNDS[key]
            out[key] = integer(p, value, lo, hi, err=err)
        elif key == "tol":
            v = real(p, value, err=err)
            if not 0.0 < v < 1.0:
                raise err(p, "in (0, 1)", value)
            out[key] = v
        elif key in ("direct_max_gb", "auto_direct_max_flops", "arnoldi_max_gb"):
            v = real(p, value, err=err)
            if not v > 0.0:
                raise err(p, "> 0", value)
            out[key] = v
        elif key == "memory_limit_gb":
            out[key] = memory_limit_gb(p, value, err=err)
        elif key in ("method", "ordering", "strategy"):
            out[key] = string(p, value, err=err)
        elif key == "x0":
            out[key] = reals(p, value, err=err)
    return out


def sim_options(slots: Any, warmup: Any, replications: Any, seed: Any, batches: Any, discretised: Any,
                sample_every: Any, threads: Any, *, names: dict[str, str] | None = None,
                err: Callable = model_error) -> dict:
    """Checked simulation options (``names`` maps an option to the name shown, e.g. ``--slots``)."""
    names = names or {}
    out = {}
    for key, value in (("slots", slots), ("replications", replications), ("seed", seed), ("batches", batches),
                       ("sample_every", sample_every), ("threads", threads)):
        lo, hi = SIM_INT_BOUNDS[key]
        out[key] = integer(names.get(key, key), value, lo, hi, err=err, allow_integral_float=True)
    if warmup is None:
        out["warmup"] = -1
    else:
        wname = names.get("warmup", "warmup")
        w = integer(wname, warmup, -INT64_MAX, INT64_MAX, err=err, allow_integral_float=True)
        if w < -1 or w >= out["slots"]:
            raise err(wname, f"-1 (the default, slots / 10) or in [0, slots = {out['slots']})", w)
        out["warmup"] = w
    out["discretised"] = boolean(names.get("discretised", "discretised"), discretised, err=err)
    return out


# ------------------------------------------------------------------ wrapping the core

def _wrap_options(cls: Any, check: Callable[..., dict]) -> None:
    """Options classes are built empty (the C++ defaults), then each checked keyword is
    assigned through the class's own property and the whole is validated in C++."""
    orig = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if args:
            raise TypeError(f"{cls.__name__}() takes keyword arguments only")
        orig(self)
        for key, value in check(**kwargs).items():
            setattr(self, key, value)
        self.validate()

    __init__.__doc__ = orig.__doc__
    setattr(cls, "__init__", __init__)


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


# The stateful AQM's keys by the feature that uses them (docs/stateful-aqm.md; names from the core).
_FEATURES = {f["name"]: f for f in _core.Aqm.features}  # the core's table of the stateful AQM's features
SPACING_KEYS = tuple(_FEATURES["spacing"]["keys"])
WEIGHT_KEYS = ("autored_p",)  # AutoRED's weight, also read by the dynamic max_th
MAXTH_KEYS = tuple(_FEATURES["dynamic_max_th"]["keys"])
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


def _simopt_kwargs(**kwargs: Any) -> dict:
    return _simopt_checked(**kwargs) if kwargs else {}


def _simopt_checked(*, slots: Any, warmup: Any = -1, replications: Any = 4, seed: Any = 1, batches: Any = 20,
                   discretised: Any = False, sample_every: Any = 0, threads: Any = 0) -> dict:
    return sim_options(slots, warmup, replications, seed, batches, discretised, sample_every, threads)


def _ensemble_kwargs(**kwargs: Any) -> dict:
    """Types of the EnsembleOptions fields (names and defaults come from the C++ class;
    ranges are checked by its validate())."""
    if not kwargs:
        return {}
    names = list(_core.EnsembleOptions.option_names())
    defaults = _core.EnsembleOptions()
    out = {}
    for key, value in kwargs.items():
        if key not in names:
            hint = did_you_mean(key, names)
            raise model_error(key, f"one of the options {', '.join(names)}" + hint, f"an unknown option {key!r}")
        default = getattr(defaults, key)
        if isinstance(default, bool):
            out[key] = boolean(key, value)
        elif isinstance(default, int):
            lo, hi = (0, UINT64_MAX) if key == "seed" else (-INT32_MAX - 1, INT32_MAX)
            out[key] = integer(key, value, lo, hi, allow_integral_float=True)
        else:
            out[key] = real(key, value)
    return out


def _stationary_kwargs(**options: Any) -> dict:
    return solver_options(options)


def install() -> None:
    """Wrap the constructors of the solver and simulation options of ``aqmchain._core`` (idempotent).

    The model's types (Source, DropFunction, Service, Aqm, GridSpec, TrafficClass, Model, Phase,
    Scenario) check their arguments in the bindings: nothing is wrapped over them."""
    if getattr(_core, "_checks_installed", False):
        return
    _core._checks_installed = True

    _wrap_options(_core.SimOptions, _simopt_kwargs)
    _wrap_options(_core.StationaryOptions, _stationary_kwargs)
    _wrap_options(_core.EnsembleOptions, _ensemble_kwargs)
