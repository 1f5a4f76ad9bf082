"""Model files (SPEC section 8): TOML in, :class:`aqmchain.Model` out.

Every key is checked: unknown keys, missing required keys, wrong types and
out-of-range values raise :class:`aqmchain.ModelError` naming the key (``aqm.p_max``),
the bound and the value.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

from . import _core
from ._core import ModelError

__all__ = ["load_model", "load_config", "model_from_dict", "model_to_dict"]

# Keys each drop function takes (beyond the common AQM keys).
_DROP_KEYS: dict[str, dict[str, bool]] = {  # key -> required
    "none": {},
    "red": {"min_th": True, "max_th": True, "p_max": True},
    "gentle_red": {"min_th": True, "max_th": True, "p_max": True},
    "nlred": {"min_th": True, "max_th": True, "p_max": True},
    "dsred": {"k_l": True, "k_h": True, "gamma": True},
    "sred": {"min_th": True, "q_max": False, "seg": False},
    "polynomial": {"min_th": True, "max_th": True, "coeffs": True},
    "table": {"points": True},
}
_AQM_COMMON = {"drop", "w", "update", "policy", "ecn"}
# Solver keys: the options the core defines (names and defaults written once, in C++),
# less the starting vector, plus the builder's memory budget.
_SOLVER_DEFAULTS = {k: v for k, v in _core.StationaryOptions.defaults().items() if k != "x0"}
_SOLVER_KEYS = set(_SOLVER_DEFAULTS) | {"memory_limit_gb"}
_SOURCE_KINDS = {"discrete": ("bernoulli", "ssmp", "mmbp"), "continuous": ("poisson", "mmpp")}
_SERVICE_KINDS = {"discrete": "geometric", "continuous": "exponential"}


def _err(key: str, bound: str, value: Any) -> ModelError:
    e = ModelError(f"parameter '{key}' must be {bound}, got {value!r}")
    e.param = key
    return e


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
        v = self._get(key, default, required)
        if v is default and key not in self.table:
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise _err(f"{self.name}.{key}", "a finite number", v)
        return float(v)

    def integer(self, key: str, default: Any = None, required: bool = False) -> int:
        v = self._get(key, default, required)
        if v is default and key not in self.table:
            return v
        if isinstance(v, bool) or not isinstance(v, int):
            raise _err(f"{self.name}.{key}", "an integer", v)
        return v

    def string(self, key: str, choices: tuple[str, ...], default: Any = None, required: bool = False,
               context: str = "") -> str:
        v = self._get(key, default, required)
        if v is default and key not in self.table:
            return v
        if v not in choices:
            raise _err(f"{self.name}.{key}", "one of " + ", ".join(choices) + (f" when {context}" if context else ""), v)
        return v

    def numbers(self, key: str, required: bool = False, depth: int = 1) -> Any:
        v = self._get(key, None, required)
        if v is None:
            return None

        def check(x: Any, d: int, path: str) -> Any:
            if d == 0:
                if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                    raise _err(path, "a finite number", x)
                return float(x)
            if not isinstance(x, list):
                raise _err(path, "a list" if d == 1 else "a list of lists", x)
            return [check(y, d - 1, f"{path}[{i}]") for i, y in enumerate(x)]

        return check(v, depth, f"{self.name}.{key}")

    def finish(self) -> None:
        extra = sorted(set(self.table) - self.used)
        if extra:
            key = f"{self.name}.{extra[0]}"
            e = ModelError(f"unknown key '{key}' (known here: {', '.join(sorted(self.used)) or 'none'})")
            e.param = key
            raise e


def _source(sec: _Section, time: str) -> _core.Source:
    kind = sec.string("kind", _SOURCE_KINDS[time], required=True, context=f'model.time = "{time}"')
    if kind == "poisson":
        src = _core.Source.poisson(sec.number("rate", required=True))
    elif kind == "mmpp":
        src = _core.Source.mmpp(sec.numbers("generator", required=True, depth=2), sec.numbers("rates", required=True))
    elif kind == "bernoulli":
        src = _core.Source.bernoulli(sec.number("alpha", required=True))
    elif kind == "ssmp":
        n = sec.integer("n", required=True)
        a = sec.number("a", required=True)
        has_q, has_mean = "q" in sec.table, "mean" in sec.table
        if has_q == has_mean:
            e = ModelError("source kind 'ssmp' needs exactly one of 'source.q' and 'source.mean'")
            e.param = "source.q"
            raise e
        src = (_core.Source.ssmp(n, sec.number("q"), a) if has_q
               else _core.Source.ssmp_from_mean(sec.number("mean"), a, n))
    else:
        src = _core.Source.mmbp(sec.numbers("matrix", required=True, depth=2),
                                sec.numbers("arrival", required=True))
    sec.finish()
    return src


def _aqm(sec: _Section) -> _core.Aqm:
    drop = sec.string("drop", tuple(_DROP_KEYS), default="none")
    allowed = _DROP_KEYS[drop]
    for key in sec.table:
        if key not in _AQM_COMMON and key not in allowed:
            e = ModelError(f"unknown key 'aqm.{key}' for drop = \"{drop}\""
                           f" (it takes: {', '.join(sorted(_AQM_COMMON | set(allowed)))})")
            e.param = f"aqm.{key}"
            raise e
    num = lambda k: sec.number(k, required=allowed[k])  # noqa: E731
    if drop == "none":
        f = _core.DropFunction.none()
    elif drop in ("red", "gentle_red", "nlred"):
        f = getattr(_core.DropFunction, drop)(num("min_th"), num("max_th"), num("p_max"))
    elif drop == "dsred":
        f = _core.DropFunction.dsred(num("k_l"), num("k_h"), num("gamma"))
    elif drop == "sred":
        f = _core.DropFunction.sred(num("min_th"), sec.number("q_max", 0.0), sec.number("seg", 0.0))
    elif drop == "polynomial":
        f = _core.DropFunction.polynomial(num("min_th"), num("max_th"), sec.numbers("coeffs", required=True))
    else:
        pts = sec.numbers("points", required=True, depth=2)
        for i, p in enumerate(pts):
            if len(p) != 2:
                raise _err(f"aqm.points[{i}]", "a pair [avg, p]", p)
        f = _core.DropFunction.table([tuple(p) for p in pts])
    aqm = _core.Aqm(drop=f, w=sec.number("w", 0.002),
                    update=sec.string("update", ("per_slot", "per_arrival"), "per_slot"),
                    policy=sec.string("policy", ("tail", "front", "random"), "tail"),
                    ecn=sec.number("ecn", 0.0))
    sec.finish()
    return aqm


def model_from_dict(doc: dict) -> tuple[_core.Model, dict]:
    """Build ``(model, solver_options)`` from a parsed TOML document."""
    if not isinstance(doc, dict):
        raise _err("<document>", "a table", doc)
    known = {"model", "source", "service", "aqm", "grid", "solver"}
    for key in doc:
        if key not in known:
            e = ModelError(f"unknown section '[{key}]' (known: {', '.join(sorted(known))})")
            e.param = key
            raise e
    for key in ("model", "source", "service"):
        if key not in doc:
            e = ModelError(f"missing required section '[{key}]'")
            e.param = key
            raise e
    m = _Section("model", doc["model"])
    buffer = m.integer("buffer", required=True)
    if buffer < 1:
        raise _err("model.buffer", ">= 1", buffer)
    time = m.string("time", ("discrete", "continuous"), "discrete")
    m.finish()
    source = _source(_Section("source", doc["source"]), time)
    s = _Section("service", doc["service"])
    kind = s.string("kind", (_SERVICE_KINDS[time],), _SERVICE_KINDS[time])
    service = getattr(_core.Service, kind)(s.number("mu", required=True))
    s.finish()
    aqm = _aqm(_Section("aqm", doc.get("aqm", {})))
    g = _Section("grid", doc.get("grid", {}))
    pts = g.numbers("points")
    grid = _core.GridSpec(k=g.integer("k", 4), points=pts or [],
                          mapping=g.string("mapping", ("split", "nearest", "flags"), "split"))
    g.finish()
    sv = _Section("solver", doc.get("solver", {}))
    solver: dict[str, Any] = {}
    for key in sorted(_SOLVER_KEYS & set(sv.table)):
        default = _SOLVER_DEFAULTS.get(key, 0.0)
        if key == "method":
            solver[key] = sv.string(key, tuple(_core.stationary_methods()))
        elif key == "ordering":
            solver[key] = sv.string(key, ("amd", "metis", "cholmod", "best", "none"))
        elif key == "strategy":
            solver[key] = sv.string(key, ("auto", "symmetric", "unsymmetric"))
        elif isinstance(default, int):
            solver[key] = sv.integer(key)
        else:
            solver[key] = sv.number(key)
    sv.finish()
    model = _core.Model(buffer=buffer, source=source, service=service, aqm=aqm, grid=grid, time=time)
    return model, solver


def load_config(path: str | Path) -> tuple[_core.Model, dict]:
    """Read a model file; return ``(model, solver_options)`` (the ``[solver]`` table)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        e = ModelError(f"cannot read model file '{p}': {exc.strerror or exc}")
        e.param = "path"
        raise e from exc
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        e = ModelError(f"malformed model file '{p}': {exc}")
        e.param = "path"
        raise e from exc
    return model_from_dict(doc)


def load_model(path: str | Path) -> _core.Model:
    """Read the TOML model file of SPEC section 8 into a validated :class:`Model`."""
    return load_config(path)[0]


def model_to_dict(model: _core.Model) -> dict:
    """The model as a JSON/TOML-ready dict with the SPEC 8 key names."""
    src = model.source
    if src.kind == "bernoulli":
        source = {"kind": "bernoulli", "alpha": src.arrival[0]}
    elif src.kind == "ssmp":
        source = {"kind": "ssmp", "n": src.n, "q": src.q, "a": src.a}
    elif src.kind == "poisson":
        source = {"kind": "poisson", "rate": src.arrival[0]}
    elif src.kind == "mmpp":
        source = {"kind": "mmpp", "generator": src.matrix, "rates": src.arrival}
    else:
        source = {"kind": "mmbp", "matrix": src.matrix, "arrival": src.arrival}
    d = model.aqm.drop
    aqm: dict[str, Any] = {"drop": d.kind}
    if d.kind in ("red", "gentle_red", "nlred"):
        aqm.update(min_th=d.lo, max_th=d.hi, p_max=d.p_max)
    elif d.kind == "dsred":
        aqm.update(k_l=d.lo, k_h=d.hi, gamma=d.gamma)
    elif d.kind == "sred":
        r = model.resolved_drop()
        aqm.update(min_th=r.lo, q_max=r.hi, seg=r.seg if r.seg > 0 else 0.6 * r.hi)
    elif d.kind == "polynomial":
        aqm.update(min_th=d.lo, max_th=d.hi, coeffs=list(d.coeffs))
    elif d.kind == "table":
        aqm.update(points=[list(p) for p in d.points])
    aqm.update(w=model.aqm.w, update=model.aqm.update, policy=model.aqm.policy, ecn=model.aqm.ecn)
    grid: dict[str, Any] = {"k": model.grid.k, "mapping": model.grid.mapping}
    if model.grid.points:
        grid["points"] = list(model.grid.points)
    return {"model": {"buffer": model.buffer, "time": model.time}, "source": source,
            "service": {"kind": model.service.kind, "mu": model.service.mu}, "aqm": aqm, "grid": grid}
