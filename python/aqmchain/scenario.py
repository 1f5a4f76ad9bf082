"""Load-step scenarios: phases that change a model's parameters over time.

A scenario is a base model plus a list of phases; each phase lasts ``slots`` slots
(slotted models) or ``duration`` time units (continuous-time models) and changes
any rate or probability of the base model.  A scenario file is TOML with one
``[[phase]]`` table per phase::

    [[phase]]
    slots = 3000
    alpha = 0.3          # source.alpha

    [[phase]]
    slots = 3000
    alpha = 0.9
    label = "heavy"

    [[phase]]
    slots = 3000
    alpha = 0.3

A phase's keys are the model file's keys, either short (``alpha``, ``mu``,
``p_max``, ...) or with their section (``source.alpha``, or a ``[phase.aqm]``
sub-table).  Each phase starts from the *base* model, not from the previous phase.
Setting ``drop`` replaces the base drop function with its keys.  What fixes the
state space (buffer, time kind, source kind and modulator size, grid, EWMA
update rule) must stay the same in every phase.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterable

from . import _checks, _core
from ._core import ModelError
from .modelfile import _DROP_KEYS, _AQM_COMMON, _FILTER_KEYS, load_document, model_from_dict, model_to_dict

__all__ = ["load_scenario", "make_scenario", "PHASE_KEYS"]

# Short phase keys -> their model-file section.
_SOURCE_KEYS = ("alpha", "q", "a", "mean", "n", "matrix", "arrival", "rate", "generator", "rates")
# REDwM's `a` is written in a [phase.aqm] table (a short `a` is the SSMP source's)
_FILTER_KEYS_ALL = {k for keys in _FILTER_KEYS.values() for k in keys}
_AQM_KEYS = tuple(sorted((_AQM_COMMON | _FILTER_KEYS_ALL | {k for keys in _DROP_KEYS.values() for k in keys})
                         - set(_SOURCE_KEYS)))
PHASE_KEYS: dict[str, str] = {**{k: "source" for k in _SOURCE_KEYS}, "mu": "service",
                              **{k: "aqm" for k in _AQM_KEYS}}
_SECTIONS = ("source", "service", "aqm")
_LENGTH_KEYS = ("slots", "duration")


def _err(key: str, bound: str, value: Any) -> ModelError:
    return _checks.model_error(key, bound, value)


def _phase_doc(base: dict, phase: dict, i: int) -> tuple[dict, float, str]:
    """The model document of phase i (base + the phase's changes), its length and label."""
    name = f"phase[{i}]"
    if not isinstance(phase, dict):
        raise _err(name, "a table of parameter changes", phase)
    doc = copy.deepcopy(base)
    time = doc.get("model", {}).get("time", "discrete")
    length_key = "slots" if time == "discrete" else "duration"
    other = "duration" if length_key == "slots" else "slots"
    if other in phase:
        raise _err(f"{name}.{other}", f"absent: a {time}-time model's phases give '{length_key}'", phase[other])
    if length_key not in phase:
        e = ModelError(f"missing required key '{name}.{length_key}'")
        e.param = f"{name}.{length_key}"
        raise e
    if length_key == "slots":
        length = float(_checks.integer(f"{name}.slots", phase["slots"], 1, 10**13))
    else:
        length = _checks.real(f"{name}.duration", phase["duration"])
        if not length > 0:
            raise _err(f"{name}.duration", "> 0", phase["duration"])
    label = phase.get("label", "")
    if not isinstance(label, str):
        raise _err(f"{name}.label", "a string", label)
    changes: dict[str, dict] = {s: {} for s in _SECTIONS}
    for key, value in phase.items():
        if key in _LENGTH_KEYS or key == "label":
            continue
        if key in _SECTIONS:
            if not isinstance(value, dict):
                raise _err(f"{name}.{key}", "a table", value)
            changes[key].update(value)
        elif key in PHASE_KEYS:
            changes[PHASE_KEYS[key]][key] = value
        else:
            e = ModelError(f"unknown key '{name}.{_checks.name(key)}' (a phase takes {', '.join(_LENGTH_KEYS)}, "
                           f"label, the sections {', '.join(_SECTIONS)} or their keys: {', '.join(PHASE_KEYS)})")
            e.param = f"{name}.{_checks.name(key)}"
            raise e
    for sec in _SECTIONS:
        if not changes[sec]:
            continue
        table = doc.setdefault(sec, {})
        if sec == "aqm" and "drop" in changes["aqm"]:  # a new drop function brings its own keys
            table = {k: v for k, v in table.items() if k in _AQM_COMMON or k in _FILTER_KEYS_ALL}
            doc["aqm"] = table
        if sec == "aqm":  # REDwM's triple or (a, b): a phase's form replaces the base's other
            for mine, others in (("triple", ("a", "b")), ("a", ("triple",)), ("b", ("triple",))):
                if mine in changes["aqm"]:
                    for o in others:
                        if o not in changes["aqm"]:
                            table.pop(o, None)
        if sec == "source":  # an SSMP source takes q or mean: a phase's one replaces the base's other
            for a, b in (("q", "mean"), ("mean", "q")):
                if a in changes["source"] and b not in changes["source"]:
                    table.pop(b, None)
        table.update(changes[sec])
    return doc, length, label


def make_scenario(base: _core.Model | dict, phases: Iterable[dict]) -> _core.Scenario:
    """A :class:`Scenario` from a base model (or model-file document) and a list of
    phase dicts as in a scenario file (``{"slots": 3000, "alpha": 0.9}``, ...)."""
    base_doc = model_to_dict(base) if isinstance(base, _core.Model) else base
    if not isinstance(base_doc, dict):
        raise _err("base", "a Model or a model-file document", base)
    base_doc = {k: v for k, v in base_doc.items() if k != "solver"}
    out = []
    for i, phase in enumerate(list(phases)):
        doc, length, label = _phase_doc(base_doc, phase, i)
        try:
            model, _ = model_from_dict(doc)
        except ModelError as exc:
            e = ModelError(f"phase[{i}]: {exc}")
            e.param = f"phase[{i}].{getattr(exc, 'param', '')}".rstrip(".")
            raise e from None
        out.append(_core.Phase(length, model, label))
    if not out:
        e = ModelError("a scenario needs at least one phase ('[[phase]]' table)")
        e.param = "phase"
        raise e
    return _core.Scenario(out)


def load_scenario(path: str | Path, base: _core.Model | dict | str | Path) -> _core.Scenario:
    """Read a scenario file (``[[phase]]`` tables) against a base model (a Model, a
    model-file document, or the path of a model file)."""
    if isinstance(base, (str, Path)):
        base = load_document(base)
    doc = load_document(path, what="scenario file")
    extra = sorted(set(doc) - {"phase"})
    if extra:
        e = ModelError(f"unknown key '{_checks.name(extra[0])}' in scenario file '{path}' (it holds [[phase]] tables)")
        e.param = _checks.name(extra[0])
        raise e
    phases = doc.get("phase", [])
    if not isinstance(phases, list):
        raise _err("phase", "an array of tables ([[phase]])", phases)
    return make_scenario(base, phases)
