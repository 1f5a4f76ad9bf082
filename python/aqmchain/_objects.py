"""Python conveniences on the core's value types, installed once at import:
informative ``repr``, ``Model.replace(...)``, and pickling through the model-file document
(so that models and results travel to Dask workers and back)."""

from __future__ import annotations

import copyreg
import html
import warnings
from typing import Any

from . import _core


def _num(v: Any) -> str:
    """A value as Python writes it: floats in their shortest round-trip form (0.55, not
    0.55000000000000004 nor a rounded 0.5500000000)."""
    if isinstance(v, float):
        text = repr(float(v))
        return text[:-2] if text.endswith(".0") else text  # 5, as the core writes it (std::to_chars)
    if isinstance(v, (list, tuple)):
        if len(v) > 6:
            return "[" + ", ".join(_num(x) for x in v[:3]) + f", ... ({len(v)} values)]"
        return "[" + ", ".join(_num(x) for x in v) + "]"
    return repr(v)


def _kv(d: dict) -> str:
    return ", ".join(f"{k}={_num(v)}" for k, v in d.items())


def _drop_repr(d: _core.DropFunction) -> str:
    return f"DropFunction.{d.kind}({_kv(d.args())})"  # the parameters of the core's registry


def _grid_dict(g: _core.GridSpec) -> dict:
    d: dict[str, Any] = {}
    if g.points:
        d["points"] = list(g.points)
    else:
        d["k"] = g.k
    d["mapping"], d["refine"] = g.mapping, g.refine
    if g.s_k:
        d["s_k"] = g.s_k
    if g.s_points:
        d["s_points"] = list(g.s_points)
    return d


def _grid_repr(g: _core.GridSpec) -> str:
    return f"GridSpec({_kv(_grid_dict(g))})"


def _aqm_repr(a: _core.Aqm) -> str:
    parts = [f"drop={_drop_repr(a.drop)}"]
    if a.filter == "redwm":
        parts.append(f"filter='redwm', a={_num(list(a.a))}, b={_num(list(a.b))}")
    else:
        parts.append(f"w={_num(a.w)}")
    if a.update != "per_slot":
        parts.append(f"update={a.update!r}")
    if a.policy != "tail":
        parts.append(f"policy={a.policy!r}")
    if a.ecn:
        parts.append(f"ecn={_num(a.ecn)}")
    if a.semantics != "default":
        parts.append(f"semantics={a.semantics!r}")
    if a.spacing != "none":
        parts.append(f"spacing={a.spacing!r}")
    if a.adaptive:
        parts.append("adaptive=True")
    if a.weight != "static":
        parts.append(f"weight={a.weight!r}")
    if a.dynamic_max_th:
        parts.append("dynamic_max_th=True")
    return "Aqm(" + ", ".join(parts) + ")"


def _model_repr(m: _core.Model) -> str:
    time = "" if m.time == "discrete" else ", time='continuous'"
    return (f"Model(buffer={m.buffer}, source={m.source!r}, service={m.service!r}, aqm={_aqm_repr(m.aqm)}, "
            f"grid={_grid_repr(m.grid)}{time})")


def _model_html(m: _core.Model) -> str:
    from .modelfile import model_to_dict

    rows = []
    for sec, table in model_to_dict(m).items():
        for k, v in table.items():
            rows.append(f"<tr><td style='text-align:left'>{sec}.{k}</td><td style='text-align:left'>"
                        f"{html.escape(_num(v))}</td></tr>")
    return "<table><tr><th>key</th><th>value</th></tr>" + "".join(rows) + "</table>"


# ------------------------------------------------------------------ pickling


def _model_from_doc(doc: dict) -> _core.Model:
    from .modelfile import model_from_dict

    with warnings.catch_warnings():  # the model's warnings were given when it was first built
        warnings.simplefilter("ignore")
        return model_from_dict(doc)[0]


def _reduce_model(m: _core.Model):
    from .modelfile import model_to_dict

    return _model_from_doc, (model_to_dict(m),)


_SIM_FIELDS = ("slots", "warmup", "replications", "seed", "batches", "discretised", "sample_every", "threads",
               "max_response", "memory_limit_bytes")


def _simoptions_from(fields: dict) -> _core.SimOptions:
    o = _core.SimOptions()
    for k, v in fields.items():
        setattr(o, k, v)
    return o


def _reduce_simoptions(o: _core.SimOptions):
    return _simoptions_from, ({k: getattr(o, k) for k in _SIM_FIELDS},)


def _replace(self: _core.Model, /, **sections: Any) -> _core.Model:
    """A copy of this model with model-file keys changed, each dict merged into its section:
    ``model.replace(model={"buffer": 25}, aqm={"w": 0.01})``; a feature switched off takes its
    keys with it (``aqm={"adaptive": False}``).  See :func:`aqmchain.modelfile.replace`."""
    from .modelfile import replace

    return replace(self, **sections)


def _chain_repr(c: _core.Chain) -> str:
    comps = ", ".join(f"{x.name}={x.size}" for x in c.space.components)
    what = "P" if c.time == "discrete" else "G"
    return f"<Chain {c.n} states, {c.nnz} nonzeros in {what}, components {comps}>"


def _scenario_repr(s: _core.Scenario) -> str:
    return "Scenario([" + ", ".join(repr(p) for p in s.phases) + "])"


def _hurst_repr(h: Any) -> str:
    return (f"<HurstReport asymptotic={h.asymptotic:.4g}{'' if h.asymptotic_valid else ' (not valid)'} "
            f"variance_time={h.variance_time:.4g}>")


def install() -> None:
    if getattr(_core, "_objects_installed", False):
        return
    _core._objects_installed = True
    _core.Model.__repr__ = _model_repr
    _core.Model._repr_html_ = _model_html
    _core.Model.replace = _replace
    _core.Aqm.__repr__ = _aqm_repr
    _core.GridSpec.__repr__ = _grid_repr
    _core.DropFunction.__repr__ = _drop_repr
    _core.Chain.__repr__ = _chain_repr
    _core.Scenario.__repr__ = _scenario_repr
    _core.HurstReport.__repr__ = _hurst_repr
    copyreg.pickle(_core.Model, _reduce_model)
    copyreg.pickle(_core.SimOptions, _reduce_simoptions)


def html_table(title: str, rows: list[tuple[str, str]]) -> str:
    """A two-column HTML table for notebooks (results' ``_repr_html_``)."""
    body = "".join(f"<tr><td style='text-align:left'>{html.escape(k)}</td>"
                   f"<td style='text-align:left'>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table><caption style='text-align:left'><b>{html.escape(title)}</b></caption>{body}</table>"
