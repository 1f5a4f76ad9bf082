"""Model files (docs/model-file.md): TOML in, :class:`aqmchain.Model` out.

Every key is checked: unknown keys, missing required keys, wrong types and
out-of-range values raise :class:`aqmchain.ModelError` naming the key (``aqm.p_max``),
the bound and the value.
"""

from __future__ import annotations

import math
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

from . import _checks, _core, _ns3names
from ._core import ModelError

__all__ = ["load_model", "load_config", "load_document", "model_from_dict", "model_to_dict", "apply_overrides",
           "parse_value", "set_key", "replace", "solver_options"]

# The drop functions and sources, their keys and types: the core's registries.
_DROP_SPECS: dict[str, dict] = {k["name"]: k for k in _core.DropFunction.kinds}
_DROP_KEYS: dict[str, dict[str, bool]] = {  # key -> required (beyond the common AQM keys)
    name: {p["name"]: p["required"] for p in k["params"]} for name, k in _DROP_SPECS.items()}
# Stateful AQM (docs/stateful-aqm.md): names and defaults from the core.
_STATEFUL_DEFAULTS = _core.Aqm.stateful_defaults()
_ADAPTIVE_KEYS = set(_checks.ADAPTIVE_KEYS)
# A feature switched off (by --set or replace) takes the keys only it uses with it.
_FEATURE_KEYS: dict[str, tuple[Any, tuple[str, ...]]] = {  # switch -> (its off value, its keys): the core's table
    f["name"]: ({"false": False, "true": True}.get(f["off"], f["off"]), tuple(f["keys"])) for f in _core.Aqm.features}
# Class-aware AQM (docs/classes.md): modified RED and flow comparison.
_CLASS_AQM_DEFAULTS = _core.Aqm.class_defaults()
_AQM_COMMON = {"drop", "filter", "update", "policy", "ecn"} | set(_STATEFUL_DEFAULTS) | set(_CLASS_AQM_DEFAULTS)
_CLASS_KEYS = ("name", "share", "ecn", "mice", "flows", "flow_weights")
# Keys each moving average takes (the core's table of filters).
_FILTER_KEYS: dict[str, set[str]] = {f: set(keys) for f, keys in _core.Aqm.filter_keys.items()}
# Solver keys: the options the core defines (names and defaults written once, in C++),
# less the starting vector, plus the builder's memory budget.
_SOLVER_DEFAULTS = {k: v for k, v in _core.StationaryOptions.defaults().items() if k != "x0"}
_SOLVER_KEYS = set(_SOLVER_DEFAULTS) | {"memory_limit_gb"}
_SOURCE_SPECS: dict[str, dict] = {k["name"]: k for k in _core.Source.kinds}
_SOURCE_KINDS = {time: tuple(n for n, k in _SOURCE_SPECS.items() if k["continuous"] == (time == "continuous"))
                 for time in ("discrete", "continuous")}
_SERVICE_KINDS = {"discrete": "geometric", "continuous": "exponential"}
_SOURCE_KEYS = {n: ("kind", *(p["name"] for p in k["params"])) for n, k in _SOURCE_SPECS.items()}
# Model files refine the avg grid automatically unless they give points or a mapping other
# than split (GridSpec() itself defaults to the plain grid it describes).
FILE_REFINE_DEFAULT = "auto"
_REFINE_DEFAULTS = _core.GridSpec.refine_defaults()


def _err(key: str, bound: str, value: Any) -> ModelError:
    return _checks.model_error(key, bound, value)


class _Section:
    """A TOML table whose keys are consumed one by one; leftovers are errors."""

    def __init__(self, name: str, table: Any):
        if not isinstance(table, dict):
            raise _err(name, "a table", table)
        self.name, self.table, self.used = name, table, set()

    def _get(self, key: str, default: Any, required: bool) -> Any:
        full = f"{self.name}.{key}"
        if key not in self.table:
            if required:
                e = ModelError(f"missing required key '{full}'")
                e.param = full
                raise e
            return default
        self.used.add(key)
        return self.table[key]

    def number(self, key: str, default: Any = None, required: bool = False) -> float:
        if key not in self.table:
            return self._get(key, default, required)
        return _checks.real(f"{self.name}.{key}", self._get(key, default, required))

    def integer(self, key: str, default: Any = None, required: bool = False, *, lo: int = -_checks.INT64_MAX,
                hi: int = _checks.INT64_MAX) -> int:
        if key not in self.table:
            return self._get(key, default, required)
        return _checks.integer(f"{self.name}.{key}", self._get(key, default, required), lo, hi)

    def string(self, key: str, choices: tuple[str, ...], default: Any = None, required: bool = False,
               context: str = "") -> str:
        v = self._get(key, default, required)
        if v is default and key not in self.table:
            return v
        if not isinstance(v, str) or v not in choices:
            raise _err(f"{self.name}.{key}", "one of " + ", ".join(choices) + (f" when {context}" if context else ""), v)
        return v

    def numbers(self, key: str, required: bool = False, depth: int = 1) -> Any:
        v = self._get(key, None, required)
        if v is None:
            return None
        return _checks.reals(f"{self.name}.{key}", v, depth)

    def finish(self, known: Any = ()) -> None:
        """Refuse the keys not consumed; ``known``: every key this table may hold (for the
        "did you mean" of a misspelt one)."""
        extra = sorted(set(self.table) - self.used, key=str)
        if extra:
            raise _unknown_key(self.name, extra[0], set(known) | self.used)


def _unknown_key(section: str, key: Any, known: Any, why: str = "") -> ModelError:
    """ModelError for an unknown key: the close known names ("did you mean"), else the known
    names when they are few, else where they are listed."""
    full = f"{section}.{_checks.name(key) if isinstance(key, str) else _checks.fmt(key)}"
    hint = _checks.did_you_mean(key, known, f"{section}.")
    if not hint:
        names = sorted(k for k in known if isinstance(k, str))
        hint = (f" (known here: {', '.join(names)})" if 0 < len(names) <= 8
                else f" (see docs/model-file.md for the keys of [{section.split('[')[0]}])")
    e = ModelError(f"unknown key '{full}'{why}{hint}")
    e.param = full
    return e


def _ssmp_log_pi0(log_q: float, n: int) -> float:
    """log pi_0(q) = log(q^(n-1) / (1 + q + ... + q^(n-1))) without overflow for any q > 0."""
    if log_q > 0:
        return math.log(-math.expm1(-log_q)) - math.log(-math.expm1(-n * log_q))
    if log_q < 0:
        return (n - 1) * log_q + math.log(-math.expm1(log_q)) - math.log(-math.expm1(n * log_q))
    return -math.log(n)


def _ssmp_q_for_mean(mean: float, a: float, n: int) -> float:
    """q with pi_0(q) = mean, by bisection on log q (used where a^(n-1) overflows a double)."""
    log_top = _ssmp_log_pi0(math.log(a), n)
    if not (mean > 0 and math.log(mean) <= log_top):
        raise _err("source.mean", f"in (0, pi_0(q = a)] = (0, {math.exp(log_top)!r}] for a = {a!r}, n = {n}",
                   mean)
    lo, hi, log_mean = math.log(1e-300) / 4, math.log(a), math.log(mean)
    for _ in range(300):
        if hi - lo <= 1e-16 * max(1.0, abs(hi)):
            break
        mid = 0.5 * (lo + hi)
        if _ssmp_log_pi0(mid, n) < log_mean:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi))


def _param(sec: _Section, p: dict) -> Any:
    """A kind's parameter from its table, by the type the core's registry gives it (None: absent)."""
    key = p["name"]
    if key not in sec.table:
        return sec._get(key, None, p["required"])
    if p["type"] == "an integer":
        lo, hi = p["int_range"]
        return sec.integer(key, lo=lo, hi=hi)
    if p["type"] == "a number":
        v = sec.number(key)
        if p.get("zero_default") and not v > 0:  # 0 means the default in the API: a file omits the key
            raise _err(f"{sec.name}.{key}", "> 0 (omit the key for the default)", sec.table[key])
        return v
    if p["type"] == "a list of numbers":
        return sec.numbers(key)
    raw = sec.table[key]
    if (p["type"] == "a list of lists of numbers" and isinstance(raw, list) and raw
            and not any(isinstance(x, list) for x in raw)):
        return [sec.numbers(key)]  # a one-row matrix written as a flat list (e.g. batch Bernoulli's counts)
    v = sec.numbers(key, depth=2)
    if p["type"] == "a list of [x, y] pairs":
        for i, pt in enumerate(v):
            if len(pt) != 2:
                raise _err(f"{sec.name}.{key}[{i}]", "a pair [avg, p]", pt)
    return v


def _params(sec: _Section, spec: dict) -> dict:
    values = {p["name"]: _param(sec, p) for p in spec["params"]}
    return {k: v for k, v in values.items() if v is not None}


def _source(sec: _Section, time: str) -> _core.Source:
    kind = sec.string("kind", _SOURCE_KINDS[time], required=True, context=f'model.time = "{time}"')
    values = _params(sec, _SOURCE_SPECS[kind])
    try:
        src = _core.Source.make(kind, **values)
    except ModelError as exc:
        a, n = values.get("a"), values.get("n")
        if not (kind == "ssmp" and "mean" in values and "q" not in values and "nan" in str(exc) and a > 0):
            raise
        # the core's bound pi_0(q = a) overflowed (a^(n-1) > 1e308): solve for q in log space
        src = _core.Source.ssmp(n, _ssmp_q_for_mean(values["mean"], a, n), a)
    sec.finish(_SOURCE_KEYS[kind])
    return src


def _aqm(sec: _Section) -> _core.Aqm:
    drop = sec.string("drop", tuple(_DROP_KEYS), default="none")
    filt = sec.string("filter", tuple(_core.Aqm.filters), default="ewma")
    allowed = _DROP_KEYS[drop]
    known = _AQM_COMMON | set(allowed) | _FILTER_KEYS[filt]
    for key in sec.table:
        if key not in known:
            filters = [f for f, keys in _FILTER_KEYS.items() if key in keys]
            drops = [d for d, keys in _DROP_KEYS.items() if key in keys]
            why = (f' (a key of filter = "{filters[0]}", not of filter = "{filt}")' if filters else
                   f' (a key of drop = "{drops[0]}", not of drop = "{drop}")' if drops else "")
            if why:
                e = ModelError(f"unknown key 'aqm.{_checks.name(key)}'{why}")
                e.param = f"aqm.{_checks.name(key)}"
                raise e
            raise _unknown_key("aqm", key, known)
    coef: dict[str, Any] = {}
    if filt == "redwm":
        has = {k for k in ("a", "b", "triple") if k in sec.table}
        if has not in ({"triple"}, {"a", "b"}):
            key = "aqm.triple" if not has else ("aqm.b" if has == {"a"} else "aqm.a" if has == {"b"} else "aqm.triple")
            e = ModelError(f"filter = \"redwm\" needs either 'aqm.triple' = [x, y, z] or both 'aqm.a' = [a1, ..., ak] "
                           f"and 'aqm.b' = [b0, ..., bm] (got: {', '.join(sorted(has)) or 'neither'})")
            e.param = key
            raise e
        for key in sorted(has):
            coef[key] = _checks.coefficients(f"aqm.{key}", sec.numbers(key, required=True))
    f = _core.DropFunction.make(drop, **_params(sec, _DROP_SPECS[drop]))
    stateful = {}
    for key in sorted(set(_STATEFUL_DEFAULTS) & set(sec.table)):
        stateful[key] = _checks.stateful_value(key, sec._get(key, None, False), _STATEFUL_DEFAULTS[key])
    # keys given for a feature that is off are refused by Aqm() (the API's check, _checks.feature_keys)
    if "modified" in sec.table:
        stateful["modified"] = sec.string("modified", tuple(_core.Modified.__members__), "none")
    if "flow_compare" in sec.table:
        stateful["flow_compare"] = _checks.boolean("aqm.flow_compare", sec._get("flow_compare", False, False))
    extra = {"w": sec.number("w", 0.002)} if filt == "ewma" else coef
    aqm = _core.Aqm(drop=f, filter=filt,
                    update=sec.string("update", tuple(_core.UpdateRule.__members__), "per_slot"),
                    policy=sec.string("policy", tuple(_core.DropPolicy.__members__), "tail"),
                    ecn=sec.number("ecn", 0.0), **extra, **stateful)
    sec.finish(known)
    return aqm


def _classes(tables: Any) -> list:
    """The ``[[class]]`` tables (docs/classes.md) as :class:`aqmchain.TrafficClass` objects."""
    if not isinstance(tables, list) or not tables:
        raise _err("class", "an array of tables ([[class]] ... )", tables)
    out = []
    for i, table in enumerate(tables):
        sec = _Section(f"class[{i}]", table)
        name = sec._get("name", None, True)
        if not isinstance(name, str):
            raise _err(f"class[{i}].name", "a string", name)
        share = sec._get("share", None, True)
        share = ([_checks.real(f"class[{i}].share", share)] if not isinstance(share, list)
                 else _checks.reals(f"class[{i}].share", share))
        kwargs: dict[str, Any] = {"ecn": sec.number("ecn", 0.0), "flows": sec.integer("flows", 1, lo=1,
                                                                                        hi=_checks.INT32_MAX)}
        if "mice" in sec.table:
            kwargs["mice"] = _checks.boolean(f"class[{i}].mice", sec._get("mice", False, False))
        w = sec.numbers("flow_weights")
        if w is not None:
            kwargs["flow_weights"] = w
        sec.finish(_CLASS_KEYS)
        try:
            out.append(_core.TrafficClass(name, share, **kwargs))
        except ModelError as exc:  # name the table: class.share -> class[i].share
            param = getattr(exc, "param", "") or ""
            if param.startswith("class."):
                e = ModelError(str(exc).replace(f"'{param}'", f"'class[{i}].{param[6:]}'", 1))
                e.param = f"class[{i}].{param[6:]}"
                raise e from None
            raise
    return out


def model_from_dict(doc: dict) -> tuple[_core.Model, dict]:
    """Build ``(model, solver_options)`` from a parsed TOML document."""
    if not isinstance(doc, dict):
        raise _err("<document>", "a table", doc)
    known = {"model", "source", "service", "aqm", "grid", "solver", "class"}
    for key in doc:
        if key not in known:
            e = ModelError(f"unknown section '[{_checks.name(key)}]'"
                           + (_checks.did_you_mean(key, known) or f" (known: {', '.join(sorted(known))})"))
            e.param = _checks.name(key)
            raise e
    doc = _ns3names.translate(doc)  # ns-3 attribute names (docs/ns3.md)
    for key in ("model", "source", "service"):
        if key not in doc:
            e = ModelError(f"missing required section '[{key}]'")
            e.param = key
            raise e
    m = _Section("model", doc["model"])
    buffer = m.integer("buffer", required=True, lo=1, hi=_checks.MAX_BUFFER)
    time = m.string("time", ("discrete", "continuous"), "discrete")
    m.finish(("buffer", "time"))
    source = _source(_Section("source", doc["source"]), time)
    s = _Section("service", doc["service"])
    kind = s.string("kind", (_SERVICE_KINDS[time],), _SERVICE_KINDS[time])
    service = getattr(_core.Service, kind)(s.number("mu", required=True))
    s.finish(("kind", "mu"))
    aqm = _aqm(_Section("aqm", doc.get("aqm", {})))
    g = _Section("grid", doc.get("grid", {}))
    pts = g.numbers("points")
    mapping = g.string("mapping", ("split", "nearest", "flags"), "split")
    refine = g.string("refine", ("auto", "none"), FILE_REFINE_DEFAULT if not pts and mapping == "split" else "none")
    refine_opts = {key: (g.integer(key, default, lo=-_checks.INT32_MAX, hi=_checks.INT32_MAX)
                         if isinstance(default, int) else g.number(key, default))
                   for key, default in _REFINE_DEFAULTS.items()}
    s_pts = g.numbers("s_points")
    grid = _core.GridSpec(k=g.integer("k", 4, lo=1, hi=_checks.INT32_MAX), points=pts or [], mapping=mapping,
                          refine=refine, s_k=g.integer("s_k", 0, lo=1, hi=_checks.INT32_MAX), s_points=s_pts or [],
                          **refine_opts)
    g.finish(("k", "points", "mapping", "refine", "s_k", "s_points", *_REFINE_DEFAULTS))
    sv = _Section("solver", doc.get("solver", {}))
    solver: dict[str, Any] = {}
    for key in sorted(_SOLVER_KEYS & set(sv.table)):  # types and bounds: the core's table of solver options
        solver[key] = sv._get(key, None, False)
    sv.finish(_SOLVER_KEYS)
    solver = _checks.solver_options(solver, prefix="solver.", err=_checks.model_error)
    classes = _classes(doc["class"]) if "class" in doc else []
    model = _core.Model(buffer=buffer, source=source, service=service, aqm=aqm, grid=grid, time=time,
                        classes=classes)
    return model, solver


MAX_FILE_BYTES = 4 * 1024 * 1024  # a model file is a few kB; refuse /dev/zero or a stray data file
_MAX_INT_DIGITS = 50_000  # TOML integers longer than this are refused unparsed (int() is quadratic)


def _file_error(p: Path, what: str) -> ModelError:
    e = ModelError(f"model file '{p}': {what}")
    e.param = "path"
    return e


def _huge_integer_key(text: str) -> str:
    """The key (section.key) of the first integer literal longer than the parser's digit limit."""
    m = re.search(r"[0-9_]{%d,}" % _MAX_INT_DIGITS, text)
    if m is None:
        return "an integer"
    before = text[: m.start()]
    line = before[before.rfind("\n") + 1:]
    key = line.split("=", 1)[0].strip() if "=" in line else "?"
    section = re.findall(r"(?m)^\s*\[+\s*([^\]]+?)\s*\]", before)
    full = f"{section[-1]}.{key}" if section else key
    return f"key '{_checks.name(full)}' (line {before.count(chr(10)) + 1})"


def load_config(path: str | Path) -> tuple[_core.Model, dict]:
    """Read a model file; return ``(model, solver_options)`` (the ``[solver]`` table).

    Files larger than 4 MiB, that are not UTF-8 text or not TOML are refused with a
    :class:`ModelError` (``param = "path"``) before anything is built."""
    return model_from_dict(load_document(path))


def load_document(path: str | Path, what: str = "model file") -> dict:
    """The parsed TOML of a model (or scenario) file, with the checks of :func:`load_config`."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        e = ModelError(f"cannot read {what} '{p}': {exc.strerror or exc}")
        e.param = "path"
        raise e from exc
    if len(data) > MAX_FILE_BYTES:
        raise _file_error(p, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB; a {what} is a few kB of TOML")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _file_error(p, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    text = text.removeprefix("\ufeff")
    old_limit = sys.get_int_max_str_digits()
    try:
        sys.set_int_max_str_digits(max(old_limit, _MAX_INT_DIGITS) if old_limit else 0)
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        e = ModelError(f"malformed {what} '{p}': {exc}")
        e.param = "path"
        raise e from None
    except RecursionError:
        raise _file_error(p, "values nested too deeply (a model file nests at most a few levels)") from None
    except ValueError:  # an integer literal above the digit limit
        raise _file_error(p, f"{_huge_integer_key(text)} holds an integer of more than {_MAX_INT_DIGITS} digits, "
                             "outside every range") from None
    except MemoryError:
        raise _file_error(p, "too large to parse") from None
    finally:
        sys.set_int_max_str_digits(old_limit)
    return doc


def load_model(path: str | Path) -> _core.Model:
    """Read the TOML model file (docs/model-file.md) into a validated :class:`Model`.

    The file's ``[solver]`` table travels with the model (``model.solver``): functions that
    solve it (:func:`aqmchain.solve_stationary`, :func:`aqmchain.compare`, sweeps, ...) use
    those options unless given others."""
    model, solver = load_config(path)
    return attach_solver(model, solver)


# model id -> its file's [solver] table, for as long as the model lives
_SOLVER_TABLES: dict[int, dict] = {}


def attach_solver(model: _core.Model, solver: dict) -> _core.Model:
    """Let ``model`` carry solver options (``model.solver``); returns the model."""
    import weakref

    if solver:
        key = id(model)
        if key not in _SOLVER_TABLES:
            weakref.finalize(model, _SOLVER_TABLES.pop, key, None)
        _SOLVER_TABLES[key] = dict(solver)
    return model


def solver_options(model: Any) -> dict:
    """The solver options a model carries from its file's ``[solver]`` table (``{}`` if none)."""
    return dict(_SOLVER_TABLES.get(id(model), {})) if isinstance(model, _core.Model) else {}


def model_to_dict(model: _core.Model) -> dict:
    """The model as a JSON/TOML-ready dict with the model-file key names."""
    src = model.source
    source = {"kind": src.kind, **src.args()}
    d = model.resolved_drop()  # the defaults that depend on the buffer written out (SRED's q_max)
    aqm: dict[str, Any] = {"drop": d.kind, **d.args()}
    if model.aqm.filter == "redwm":
        aqm.update(filter="redwm", a=list(model.aqm.a), b=list(model.aqm.b))
    else:
        aqm.update(w=model.aqm.w)
    aqm.update(update=model.aqm.update, policy=model.aqm.policy, ecn=model.aqm.ecn)
    if model.aqm.semantics != "default":
        aqm.update(semantics=model.aqm.semantics, ptc=model.aqm.ptc, idle_correction=model.aqm.idle_correction,
                   hard_drop=model.aqm.hard_drop)
    if model.aqm.spacing != "none":
        aqm.update(spacing=model.aqm.spacing, count_max=model.aqm.count_max, count_tail=model.aqm.count_tail)
    if model.aqm.weight != "static" or model.aqm.dynamic_max_th:
        aqm.update(weight=model.aqm.weight, autored_p=model.aqm.autored_p)
    if model.aqm.dynamic_max_th:
        aqm.update(dynamic_max_th=True, max_th_growth=model.aqm.max_th_growth)
    if model.aqm.adaptive:
        aqm.update({k: getattr(model.aqm, k) for k in sorted(_ADAPTIVE_KEYS | {"adaptive"})})
    if model.aqm.modified != "none":
        aqm["modified"] = model.aqm.modified
    if model.aqm.flow_compare:
        aqm["flow_compare"] = True
    grid: dict[str, Any] = {"k": model.grid.k, "mapping": model.grid.mapping, "refine": model.grid.refine}
    if model.grid.points:
        grid["points"] = list(model.grid.points)
    if model.grid.refine == "auto":
        grid.update({key: getattr(model.grid, key) for key in _REFINE_DEFAULTS})
    if model.grid.s_k:
        grid["s_k"] = model.grid.s_k
    if model.grid.s_points:
        grid["s_points"] = list(model.grid.s_points)
    out = {"model": {"buffer": model.buffer, "time": model.time}, "source": source,
           "service": {"kind": model.service.kind, "mu": model.service.mu}, "aqm": aqm, "grid": grid}
    if model.classes:
        out["class"] = []
        for c in model.classes:
            t: dict[str, Any] = {"name": c.name, "share": c.share[0] if len(c.share) == 1 else list(c.share),
                                 "ecn": c.ecn, "mice": c.mice, "flows": c.flows}
            if c.flow_weights:
                t["flow_weights"] = list(c.flow_weights)
            out["class"].append(t)
    return out


# ------------------------------------------------------------------ overrides

_KEY_PATH = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*)(?:\[(\d+)\])?\.([A-Za-z_][A-Za-z_0-9]*)(?:\[(\d+)\])?$")


def parse_value(text: str, key: str = "--set") -> Any:
    """A command-line value as TOML reads it (``0.01``, ``250``, ``true``, ``[0.1, 0, 0]``,
    ``"dsred"``); a bare word that is not TOML (``dsred``) is taken as a string.  An integer
    longer than a model file may hold is refused (ModelError naming ``key``)."""
    old_limit = sys.get_int_max_str_digits()
    try:
        sys.set_int_max_str_digits(max(old_limit, _MAX_INT_DIGITS) if old_limit else 0)
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text.strip()
    except ValueError:  # an integer literal above the digit limit
        raise _err(key, "a number in the key's range", f"an integer of more than {_MAX_INT_DIGITS} digits") from None
    except RecursionError:
        raise _err(key, "a value nested at most a few levels", "a deeply nested value") from None
    finally:
        sys.set_int_max_str_digits(old_limit)


def set_key(doc: dict, key: str, value: Any) -> dict:
    """Set ``section.key`` (or ``section.key[i]``, an entry of a list) in a model document, in place.

    An integral float given for a key whose current value is an integer becomes an integer
    (``model.buffer = 200.0`` from a range).  Raises :class:`ModelError` naming the key when
    the path is malformed or indexes past a list; the value itself is checked when the
    document is turned into a model."""
    m = _KEY_PATH.match(key.strip()) if isinstance(key, str) else None
    if m is None or (m.group(2) is not None and m.group(1) != "class"):
        raise _err("--set", "KEY=VALUE with KEY 'section.key', 'section.key[i]' or 'class[i].key' (e.g. aqm.w, "
                   "aqm.triple[0], class[0].flows)", key)
    sec, sec_idx, name, idx = m.groups()
    if sec == "class":  # [[class]] tables: class[i].key
        tables = doc.get("class")
        n = len(tables) if isinstance(tables, list) else 0
        if sec_idx is None or int(sec_idx) >= n:
            raise _err(f"class[{sec_idx}]" if sec_idx is not None else "class",
                       f"an existing [[class]] table, class[0] .. class[{n - 1}]" if n else
                       "a [[class]] table of the model (it has none)", key)
        sec = f"class[{int(sec_idx)}]"
        table = tables[int(sec_idx)]
    else:
        table = doc.setdefault(sec, {})
    if not isinstance(table, dict):
        raise _err(sec, "a table", table)
    old = table.get(name)
    if idx is not None:
        if not isinstance(old, list) or int(idx) >= len(old):
            raise _err(f"{sec}.{name}[{idx}]", f"an entry of the list '{sec}.{name}' "
                       f"({'absent' if old is None else _checks.fmt(old)})", value)
        lst = list(old)
        lst[int(idx)] = value
        table[name] = lst
        return doc
    if isinstance(old, int) and not isinstance(old, bool) and isinstance(value, float) and value.is_integer():
        value = int(value)
    table[name] = value
    if sec == "aqm" and name == "drop" and isinstance(old, str) and old != value:
        for k in _DROP_KEYS.get(old, {}):  # the old drop function's keys go with it
            if k not in _DROP_KEYS.get(value, {}):
                table.pop(k, None)
    if sec == "source" and name == "kind" and isinstance(old, str) and old != value:
        for k in _SOURCE_KEYS.get(old, ()):  # the old source's keys go with it
            if k not in _SOURCE_KEYS.get(value, ()):
                table.pop(k, None)
    if sec == "aqm" and name == "filter" and old != value:
        for k in _FILTER_KEYS.get(old or "ewma", set()):
            table.pop(k, None)
    if sec == "aqm" and name in ("triple", "a", "b"):
        table.pop("w", None)
        table.setdefault("filter", "redwm")
        for k in ({"a", "b"} if name == "triple" else {"triple"}):
            table.pop(k, None)
    if sec == "aqm" and name in _FEATURE_KEYS and old != value:
        off, keys = _FEATURE_KEYS[name]
        if value is off or (isinstance(value, str) and value == off):  # a feature switched off: its keys go
            for k in keys:
                table.pop(k, None)
            if table.get("weight", "static") == "static" and table.get("dynamic_max_th", False) is False:
                table.pop("autored_p", None)  # read by AutoRED's weight and the dynamic max_th only
    return doc


def apply_overrides(doc: dict, overrides: dict[str, Any] | list[str]) -> dict:
    """A copy of ``doc`` with ``overrides`` applied: a dict ``{"aqm.w": 0.01}`` or command-line
    strings ``["aqm.w=0.01", "grid.k=8"]`` (values parsed by :func:`parse_value`)."""
    import copy

    out = copy.deepcopy(doc)
    items = overrides.items() if isinstance(overrides, dict) else []
    if not isinstance(overrides, dict):
        parsed = []
        for text in overrides:
            key, sep, value = str(text).partition("=")
            if not sep or not key.strip():
                raise _err("--set", "KEY=VALUE (e.g. aqm.w=0.01)", text)
            parsed.append((key.strip(), parse_value(value, key.strip())))
        items = parsed
    for key, value in items:
        set_key(out, key, value)
    return out


def replace(model: _core.Model, /, **sections: Any) -> _core.Model:
    """A copy of ``model`` with model-file keys changed, section by section:
    ``replace(model, aqm={"w": 0.01}, service={"mu": 0.4}, model={"buffer": 25})`` (also
    ``model.replace(...)``); ``solver={...}`` changes the solver options the model carries.

    Keys and values are those of the model file (docs/model-file.md) and are checked the same
    way.  Each dict is merged into its section: the keys not named keep their values.  A model
    with traffic classes takes ``**{"class[0]": {"flows": 5}}``.  A new ``aqm.drop`` drops the keys
    of the old drop function that it does not take; a feature switched off drops the keys only
    it uses (``aqm={"adaptive": False}`` drops ``interval``, ``clock``, ...; ``spacing = "none"``
    drops ``count_max``); switches are applied before the other keys of their section."""
    if not isinstance(model, _core.Model):
        raise _err("model", "an aqmchain.Model", model)
    doc = model_to_dict(model)
    solver = solver_options(model)
    known = ("model", "source", "service", "aqm", "grid", "solver")
    for sec, table in sections.items():
        is_class = re.fullmatch(r"class\[\d+\]", sec) is not None
        if sec not in known and not is_class:
            e = ModelError(f"unknown section '{_checks.name(sec)}' for replace()"
                           + (_checks.did_you_mean(sec, known) or f" (known: {', '.join(known)}, class[i])"))
            e.param = _checks.name(sec)
            raise e
        if sec == "solver":
            if not isinstance(table, dict):
                raise _err(sec, "a dict of solver options", table)
            solver.update(table)
            continue
        if not isinstance(table, dict):
            raise _err(sec, f"a dict of model-file keys, e.g. {sec}={{'{_EXAMPLE_KEY.get(sec, 'key')}': ...}}", table)
        # switches first (a feature turned off takes its keys; keys given with it are then checked)
        switches = ("drop", "filter", *_FEATURE_KEYS) if sec == "aqm" else ("kind",)
        for key, value in sorted(table.items(), key=lambda kv: kv[0] not in switches):
            if not isinstance(key, str):
                raise _err(sec, "a dict with string keys", key)
            set_key(doc, f"{sec}.{key}", value)
    model2, _ = model_from_dict({**doc, "solver": solver})
    return attach_solver(model2, solver)


_EXAMPLE_KEY = {"model": "buffer", "source": "alpha", "service": "mu", "aqm": "w", "grid": "k"}
