"""Exports for other tools: the transition matrix P (or generator G) as Matrix Market, PRISM's
explicit model files (``.tra``, ``.sta``, ``.lab``), and the stationary vector with its state
labels as ``.npy`` or CSV.

States are numbered as in the chain (0-based, in key order: ``level`` = n packets in the
system slowest, then ``avg_index``, REDwM's ``s_index``, the stateful AQM's components, and the
``modulator`` fastest), so the files of one chain agree with each other and with
``result.pi``.  Numbers are written with 17 significant digits: reading them back gives the
same doubles.

PRISM's explicit format ("Explicit Model Files" in the PRISM manual): the ``.tra`` file starts
with ``n m`` (states, transitions), then ``i j x`` per transition in row order (probabilities
for a DTMC; rates for a CTMC, diagonal left out); the ``.sta`` file lists the state variables
``(level,avg_index,modulator)`` and ``i:(v1,...,vk)`` per state; the ``.lab`` file declares
``0="init" 1="deadlock" 2="empty" 3="full"`` and lists ``i: labels`` for the states that carry
any.  Import into PRISM with ``prism -importmodel BASE.tra,sta,lab -dtmc`` (``-ctmc`` for a
continuous-time model).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np

from . import _checks, _core

__all__ = ["export_matrix", "export_prism", "export_stationary", "stationary_table", "PRISM_LABELS"]

#: The labels of the ``.lab`` file, in their index order.
PRISM_LABELS = ("init", "deadlock", "empty", "full")


def _chain_of(obj: Any) -> _core.Chain:
    if isinstance(obj, _core.Chain):
        return obj
    chain = getattr(obj, "chain", None)
    if isinstance(chain, _core.Chain):
        return chain
    if isinstance(obj, _core.Model):
        from .stationary import build_chain

        return build_chain(obj)
    if hasattr(obj, "_need_chain"):
        return obj._need_chain()
    raise _checks.model_error("chain", "an aqmchain.Chain, a StationaryResult or a Model", obj)


def export_matrix(obj: Any, path: str | Path, *, comment: str = "") -> Path:
    """Write P (discrete time) or the generator G (continuous time) as a Matrix Market
    coordinate file (real, general; rows = from-state).  ``obj``: a chain, a
    :class:`StationaryResult` or a model (built first).  ``scipy.io.mmread(path)`` gives the
    matrix back entry for entry."""
    import scipy.io

    from .stationary import COMPONENTS, transition_matrix

    chain = _chain_of(obj)
    P = transition_matrix(chain)
    what = "transition matrix P (rows = from-state, rows sum to 1)" if chain.time == "discrete" else \
        "generator G (rows = from-state, rows sum to 0)"
    text = f"aqmchain {what}; states numbered as in the chain (docs/sweeps-and-export.md)"
    if comment:
        text += "\n" + comment
    path = Path(path)
    scipy.io.mmwrite(str(path), P.tocoo(), comment=text, field="real", precision=17, symmetry="general")
    if not path.exists() and Path(str(path) + ".mtx").exists():  # scipy adds .mtx to a bare name
        path = Path(str(path) + ".mtx")
    return path


def _components(chain: _core.Chain) -> dict[str, np.ndarray]:
    return {name: np.asarray(v) for name, v in chain.labels.items()}


def _write_lines(path: Path, header: str, frame) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(header)
        frame.to_csv(fh, sep=" ", header=False, index=False, lineterminator="\n")


def prism_paths(base: str | Path, param: str = "base") -> dict[str, Path]:
    """The files ``BASE.tra``, ``BASE.sta``, ``BASE.lab`` by extension; a base that names no
    file (empty, a directory such as ``/`` or ``out/``) raises :class:`aqmchain.ModelError`
    naming ``param``."""
    text = str(base) if isinstance(base, (str, Path)) else None
    if text is None or not text.strip() or text.endswith(("/", os.sep)) or not Path(text).name:
        raise _checks.model_error(param, "a file-name prefix such as 'out/chain' (BASE.tra, BASE.sta, BASE.lab are "
                                  "written), not a directory", base)
    p = Path(text)
    return {ext: p.with_name(p.name + "." + ext) for ext in ("tra", "sta", "lab")}


def export_prism(obj: Any, base: str | Path) -> dict[str, Path]:
    """Write PRISM's explicit files ``BASE.tra``, ``BASE.sta`` and ``BASE.lab`` (see the module
    docstring).  The ``.sta`` variables are the chain's integer state components; labels:
    ``init`` (the empty system with every other component at 0), ``deadlock`` (no state: every
    state of these chains has a successor), ``empty`` (n = 0), ``full`` (n = buffer).
    Returns the paths by extension."""
    import pandas as pd

    from .stationary import COMPONENTS, transition_matrix

    paths = prism_paths(base)
    chain = _chain_of(obj)
    P = transition_matrix(chain).tocoo()
    rows, cols, vals = P.row, P.col, P.data
    if chain.time == "continuous":  # PRISM's CTMC files hold the rates, not the diagonal
        keep = rows != cols
        rows, cols, vals = rows[keep], cols[keep], vals[keep]
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    _write_lines(paths["tra"], f"{chain.n} {len(vals)}\n", pd.DataFrame({"i": rows, "j": cols, "x": vals}))

    comps = _components(chain)
    names = list(comps)
    idx = pd.Series(np.arange(chain.n)).astype(str)
    tup = comps[names[0]].astype(str)
    tup = pd.Series(tup)
    for n in names[1:]:
        tup = tup + "," + pd.Series(comps[n].astype(str))
    lines = idx + ":(" + tup + ")"
    with open(paths["sta"], "w", encoding="utf-8", newline="\n") as fh:
        fh.write("(" + ",".join(names) + ")\n")
        fh.write("\n".join(lines.tolist()) + "\n")

    level_name, modulator = COMPONENTS["level"], COMPONENTS["modulator"]
    level = comps[level_name]
    init = level == 0
    for n in names:
        if n not in (level_name, modulator):
            init &= comps[n] == 0
    if modulator in comps and init.any():  # one initial state: the first modulator value among them
        init &= comps[modulator] == comps[modulator][init].min()
    empty = level == 0
    full = level == chain.model.buffer
    flags = [init, np.zeros(chain.n, dtype=bool), empty, full]
    has = np.zeros(chain.n, dtype=bool)
    text = pd.Series([""] * chain.n, dtype=object)
    for k, f in enumerate(flags):
        text[f] = text[f] + f" {k}"
        has |= f
    body = (pd.Series(np.arange(chain.n))[has].astype(str) + ":" + text[has]).tolist()
    with open(paths["lab"], "w", encoding="utf-8", newline="\n") as fh:
        fh.write(" ".join(f'{k}="{name}"' for k, name in enumerate(PRISM_LABELS)) + "\n")
        fh.write("\n".join(body) + ("\n" if body else ""))
    return paths


def stationary_table(result: Any):
    """pandas DataFrame, one row per state: ``state``, the state components, ``queue``, ``avg``
    (REDwM: ``s``) and ``probability`` (pi)."""
    import pandas as pd

    from .stationary import state_labels

    chain = result._need_chain() if hasattr(result, "_need_chain") else _chain_of(result)
    labels = state_labels(chain)
    cols = {"state": np.arange(chain.n)}
    cols.update(labels)
    cols["probability"] = np.asarray(result.pi, dtype=float)
    return pd.DataFrame(cols)


def export_stationary(result: Any, path: str | Path) -> Path:
    """Write the stationary vector with its state labels: ``.npy`` (a structured array with
    fields ``state``, the components, ``queue``, ``avg``, ``probability``; ``np.load`` reads it
    without pickle) or ``.csv`` (the same columns, a header line, 17 significant digits)."""
    path = Path(path)
    table = stationary_table(result)
    if path.suffix == ".npy":
        arr = table.to_records(index=False)
        np.save(path, np.asarray(arr), allow_pickle=False)
    elif path.suffix == ".csv":
        buf = io.StringIO()
        table.to_csv(buf, index=False, lineterminator="\n")
        path.write_text(buf.getvalue(), encoding="utf-8")
    else:
        raise _checks.model_error("stationary path", "a file name ending in .npy or .csv", str(path))
    return path
