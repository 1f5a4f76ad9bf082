"""Argument checks in front of the C++ core.

The pybind11 constructors take C integers (int32 for buffer, k, n, ncv; int64 for
max_iter and slots; uint64 for the seed) and doubles: a Python integer outside that
range, a string or ``None`` reaches them as a ``TypeError`` that names no parameter.
This module checks types and ranges first and raises :class:`ModelError` (model
parameters, simulation options, with ``.param`` set) or :class:`OptionError` (solver
options) naming the parameter, the bound and the value.  :func:`install` wraps the
public constructors of ``aqmchain._core`` with these checks once, at import.
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
import re
import warnings
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

# the lower threshold's key of each drop function with an early-drop region (the core's registry)
_DROP_MIN = {k["name"]: k["params"][0]["name"] for k in _core.DropFunction.kinds if k["band"]}


def _warn_thresholds(model: _core.Model) -> None:
    d = model.aqm.drop
    key = _DROP_MIN.get(d.kind)
    if key is not None and d.lo >= model.buffer:
        warnings.warn(f"aqm.{key} = {d.lo:g} is not below the buffer (model.buffer = {model.buffer}): avg never "
                      f"exceeds it, so the AQM never drops or marks", UserWarning, stacklevel=3)


def _checked(orig: Callable, check: Callable[..., tuple[tuple, dict]]) -> Callable:
    """``orig`` behind ``check``, which returns the converted (args, kwargs)."""

    @functools.wraps(orig)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        a, k = check(*args, **kwargs)
        return orig(*a, **k)

    return wrapped


def _wrap_static(cls: Any, attr: str, check: Callable[..., tuple[tuple, dict]]) -> None:
    setattr(cls, attr, staticmethod(_checked(getattr(cls, attr), check)))


def _wrap_function(mod: Any, attr: str, check: Callable[..., tuple[tuple, dict]]) -> None:
    setattr(mod, attr, _checked(getattr(mod, attr), check))


def _wrap_init(cls: Any, check: Callable[..., dict], after: Callable[[Any], None] | None = None) -> None:
    orig = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if args:
            raise TypeError(f"{cls.__name__}() takes keyword arguments only")
        orig(self, **check(**kwargs))
        if after is not None:
            after(self)

    __init__.__doc__ = orig.__doc__
    setattr(cls, "__init__", __init__)


def _wrap_args(cls: Any, check: Callable[..., dict]) -> None:
    """Positional or keyword arguments, checked and passed on as keywords."""
    orig = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig(self, **check(*args, **kwargs))

    __init__.__doc__ = orig.__doc__
    setattr(cls, "__init__", __init__)


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


def _model_kwargs(*, buffer: Any, source: Any, service: Any, aqm: Any = None, grid: Any = None,
                  time: Any = "discrete", classes: Any = None) -> dict:
    k = {"buffer": integer("model.buffer", buffer, 1, MAX_BUFFER), "time": string("model.time", time)}
    if classes is not None:
        if isinstance(classes, (str, bytes)) or not hasattr(classes, "__iter__"):
            raise model_error("classes", "a list of aqmchain.TrafficClass", classes)
        classes = list(classes)
        for i, c in enumerate(classes):
            if not isinstance(c, _core.TrafficClass):
                raise model_error(f"class[{i}]", "an aqmchain.TrafficClass", c)
        k["classes"] = classes
    for key, value, cls in (("source", source, _core.Source), ("service", service, _core.Service),
                            ("aqm", aqm, _core.Aqm), ("grid", grid, _core.GridSpec)):
        if value is None and key in ("aqm", "grid"):
            continue
        if not isinstance(value, cls):
            raise model_error(key, f"an aqmchain.{cls.__name__}", value)
        k[key] = value
    return k


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


def _aqm_kwargs(*, drop: Any = None, w: Any = 0.002, update: Any = "per_slot", policy: Any = "tail",
                ecn: Any = 0.0, filter: Any = "ewma", a: Any = None, b: Any = None, triple: Any = None,
                **stateful: Any) -> dict:
    k = {"w": real("aqm.w", w), "update": string("aqm.update", update), "policy": string("aqm.policy", policy),
         "ecn": real("aqm.ecn", ecn), "filter": string("aqm.filter", filter)}
    for key, value in (("a", a), ("b", b), ("triple", triple)):
        if value is not None:
            k[key] = coefficients(f"aqm.{key}", value)
    defaults = {**_core.Aqm.stateful_defaults(), **_core.Aqm.class_defaults()}
    for key, value in stateful.items():
        if key not in defaults:
            raise TypeError(f"Aqm() got an unexpected keyword argument '{key}'" + did_you_mean(
                key, ["drop", "w", "update", "policy", "ecn", "filter", "a", "b", "triple", *defaults]))
        k[key] = stateful_value(key, value, defaults[key])
    feature_keys(k, stateful)
    if drop is not None:
        if not isinstance(drop, _core.DropFunction):
            raise model_error("aqm.drop", "an aqmchain.DropFunction", drop)
        k["drop"] = drop
    return k


# The stateful AQM's keys by the feature that uses them (docs/stateful-aqm.md; names from the core).
SPACING_KEYS = ("count_max",)
WEIGHT_KEYS = ("autored_p",)  # AutoRED's weight, also read by the dynamic max_th
MAXTH_KEYS = ("max_th_growth",)
ADAPTIVE_KEYS = tuple(sorted(set(_core.Aqm.stateful_defaults()) - {"spacing", "weight", "dynamic_max_th", "adaptive"}
                             - set(SPACING_KEYS) - set(WEIGHT_KEYS) - set(MAXTH_KEYS)))


def feature_keys(values: dict, given: dict, *, err: Callable = model_error) -> None:
    """Refuse a key given for a feature that is off (``aqm.autored_p`` without AutoRED's weight or
    the dynamic max_th, an adaptive-RED key without ``aqm.adaptive = true``, ...): one check for
    :class:`aqmchain.Aqm` and the model file.  ``values``: the keyword arguments (checked),
    ``given``: those the caller gave (their values are shown)."""
    dyn = values.get("dynamic_max_th", False)
    if values.get("weight", "static") == "static" and not dyn and "autored_p" in given:
        raise err("aqm.autored_p", 'given only with aqm.weight = "autored" or aqm.dynamic_max_th = true',
                  given["autored_p"])
    if not dyn and "max_th_growth" in given:
        raise err("aqm.max_th_growth", "given only with aqm.dynamic_max_th = true", given["max_th_growth"])
    if not values.get("adaptive", False):
        extra = sorted(set(ADAPTIVE_KEYS) & set(given))
        if extra:
            raise err(f"aqm.{extra[0]}", "given only with aqm.adaptive = true", given[extra[0]])


def did_you_mean(key: str, known: Any, prefix: str = "") -> str:
    """`` (did you mean 'x'?)`` for a misspelt key with a close known one, else ``""``."""
    import difflib

    if not isinstance(key, str):
        return ""
    close = difflib.get_close_matches(key, [k for k in known if isinstance(k, str)], n=2, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(f"'{prefix}{c}'" for c in close) + "?)"


def _class_kwargs(name: Any, share: Any, ecn: Any = 0.0, mice: Any = False, flows: Any = 1,
                  flow_weights: Any = None) -> dict:
    k = {"name": string("class.name", name), "ecn": real("class.ecn", ecn), "mice": boolean("class.mice", mice),
         "flows": integer("class.flows", flows, 1, INT32_MAX)}
    k["share"] = [real("class.share", share)] if isinstance(share, numbers.Real) and not isinstance(share, bool) \
        else reals("class.share", share)
    if flow_weights is not None:
        k["flow_weights"] = reals("class.flow_weights", flow_weights)
    return k


def _grid_kwargs(*, k: Any = 4, points: Any = None, mapping: Any = "split", refine: Any = "none", s_k: Any = 0,
                 s_points: Any = None, **refine_options: Any) -> dict:
    """Types only: ranges and defaults of the refinement options live in the core."""
    out = {"k": integer("grid.k", k, 1, INT32_MAX), "mapping": string("grid.mapping", mapping),
           "refine": string("grid.refine", refine), "s_k": integer("grid.s_k", s_k, 0, INT32_MAX)}
    if points is not None:
        out["points"] = reals("grid.points", points)
    if s_points is not None:
        out["s_points"] = reals("grid.s_points", s_points)
    known = _core.GridSpec.refine_defaults()
    for name, value in refine_options.items():
        if name not in known:
            raise TypeError(f"GridSpec() got an unexpected keyword argument '{name}'" + did_you_mean(
                name, ["k", "points", "mapping", "refine", "s_k", "s_points", *known]))
        out[name] = (integer(f"grid.{name}", value, -INT32_MAX, INT32_MAX) if isinstance(known[name], int)
                     else real(f"grid.{name}", value))
    return out


def coefficients(param: str, value: Any, *, err: Callable = model_error) -> list:
    """A list of at most ``Aqm.max_coefficients`` finite numbers (REDwM's a, b or triple)."""
    v = reals(param, value, err=err)
    if len(v) > _core.Aqm.max_coefficients:
        raise err(param, f"a list of at most {_core.Aqm.max_coefficients} coefficients", f"{len(v)} coefficients")
    return v


def _service_kwargs(mu: Any) -> dict:
    return {"mu": real("service.mu", mu)}


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


def _phase_kwargs(duration: Any, model: Any, label: Any = "") -> dict:
    if not isinstance(model, _core.Model):
        raise model_error("phase.model", "an aqmchain.Model", model)
    return {"duration": real("phase.duration", duration), "model": model, "label": string("phase.label", label)}


def _scenario_kwargs(phases: Any) -> dict:
    if isinstance(phases, (str, bytes, dict)) or not hasattr(phases, "__iter__"):
        raise model_error("scenario.phase", "a list of aqmchain.Phase", phases)
    phases = list(phases)
    for i, p in enumerate(phases):
        if not isinstance(p, _core.Phase):
            raise model_error(f"phase[{i}]", "an aqmchain.Phase", p)
    return {"phases": phases}


def _stationary_kwargs(**options: Any) -> dict:
    return solver_options(options)


def install() -> None:
    """Wrap the public constructors and entry points of ``aqmchain._core`` (idempotent)."""
    if getattr(_core, "_checks_installed", False):
        return
    _core._checks_installed = True

    _wrap_init(_core.Model, _model_kwargs, after=_warn_thresholds)
    _wrap_init(_core.Aqm, _aqm_kwargs)
    _wrap_init(_core.GridSpec, _grid_kwargs)
    _wrap_options(_core.SimOptions, _simopt_kwargs)
    _wrap_options(_core.StationaryOptions, _stationary_kwargs)
    _wrap_options(_core.EnsembleOptions, _ensemble_kwargs)
    for cls, check in ((_core.Phase, _phase_kwargs), (_core.Scenario, _scenario_kwargs),
                       (_core.TrafficClass, _class_kwargs)):
        _wrap_args(cls, check)
    svc_init = _core.Service.__init__

    def service_init(self: Any, mu: Any = None, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"Service() got unexpected keyword arguments {sorted(kwargs)}")
        svc_init(self, **_service_kwargs(mu))

    _core.Service.__init__ = service_init
    _wrap_static(_core.Service, "geometric", lambda mu: ((), _service_kwargs(mu)))
    _wrap_static(_core.Service, "exponential", lambda mu: ((), _service_kwargs(mu)))

    # Source, DropFunction, ssmp_q_for_mean and hurst check their arguments' types in the
    # bindings (the constructors come from the core's registries): ModelError naming the parameter.
