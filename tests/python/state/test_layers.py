"""The core's layers: the state space, operators and solvers know no queue model, and the
queue models' descriptor tells the solvers and the Python readers what they need."""

import re

import numpy as np
import pytest

import aqmchain
from aqmchain import _core
from conftest import BASE_DOC, ROOT

GENERIC = [ROOT / "core" / part / sub for part in ("include/aqmchain", "src")
           for sub in ("state", "operators", "solvers")]


def test_generic_layers_include_no_model_header():
    # comments included: a file of these layers names no model/ path at all
    files = [p for d in GENERIC for p in sorted(d.iterdir()) if p.suffix in (".hpp", ".cpp")]
    assert len(files) > 20
    offenders = [str(p.relative_to(ROOT)) for p in files if "model/" in p.read_text(encoding="utf-8")]
    assert offenders == []
    # and the solvers name no queue component (the roles whose names are no common words)
    names = {n for role, n in _core.queue_components().items() if role not in ("count", "phase")}
    solvers = [p for d in GENERIC if d.name == "solvers" for p in d.iterdir() if p.suffix in (".hpp", ".cpp")]
    for p in solvers:
        code = re.sub(r"//[^\n]*", "", p.read_text(encoding="utf-8"))
        assert not [n for n in names if f'"{n}"' in code], p.name
        assert "component::" not in code, p.name


def _chain():
    return aqmchain.build_chain(aqmchain.model_from_dict(BASE_DOC)[0])


def test_descriptor_flags_the_block_components():
    names = _core.queue_components()
    c = _chain()
    flags = {k.name: k.in_block for k in c.space.components}
    assert flags == {names["level"]: True, names["avg"]: False, names["modulator"]: True}
    # the grid index is the labels of the avg component, read through the chain
    assert np.array_equal(np.asarray(c.grid_index), np.asarray(c.labels[names["avg"]]))
    assert isinstance(c, _core.MarkovChain)


def test_a_hand_made_descriptor_keeps_its_flags():
    s = _core.StateSpace()
    s.add("x", 3, coarsen=False, in_block=True)
    s.add("y", 2)
    assert [(k.name, k.coarsen, k.in_block) for k in s.components] == [("x", False, True), ("y", True, False)]


def test_test_modules_live_in_a_layer_or_feature_folder():
    # tests/python/<layer or feature>/test_*.py; the top holds only the shared oracles and helpers
    top = ROOT / "tests" / "python"
    assert sorted(p.name for p in top.glob("test_*.py")) == []
    folders = {p.parent.name for p in top.rglob("test_*.py")}
    assert folders == {"model", "state", "solvers", "analysis", "simulation", "features", "frontend", "docs"}


def test_indices_of_finds_every_state_by_its_labels():
    """Chain.indices_of against index_of state by state: a chain's own labels give 0..n-1 in
    any order, values outside a component's range or of no state give -1, other names are
    ignored, a missing component or unequal lengths are refused naming them."""
    doc = {**BASE_DOC, "model": {"buffer": 6}, "aqm": {**BASE_DOC["aqm"], "min_th": 2, "max_th": 4},
           "grid": {"k": 2}}
    chain = aqmchain.build_chain(aqmchain.model_from_dict(doc)[0])
    labels = {k: np.asarray(v) for k, v in chain.labels.items()}
    names = list(labels)
    rng = np.random.default_rng(5)
    order = rng.permutation(chain.n)
    got = np.asarray(chain.indices_of({k: v[order] for k, v in labels.items()}))
    assert got.dtype == np.int32 and np.array_equal(got, order)
    # every tuple of the product space and one value past each end, against index_of one by one
    sizes = {c.name: c.size for c in chain.space.components}
    grid = np.stack(np.meshgrid(*[np.arange(-1, sizes[k] + 1) for k in names], indexing="ij"), -1)
    grid = grid.reshape(-1, len(names))
    got = np.asarray(chain.indices_of({k: grid[:, i] for i, k in enumerate(names)} | {"other": grid[:, 0]}))
    inside = np.all((grid >= 0) & (grid < np.array([sizes[k] for k in names])), axis=1)
    want = np.array([chain.index_of([int(x) for x in t]) if ok else -1 for t, ok in zip(grid, inside)])
    assert np.array_equal(got, want) and (want >= 0).sum() == chain.n and (~inside).sum() > 0
    with pytest.raises(KeyError, match=f"no component '{names[-1]}'"):
        chain.indices_of({k: labels[k] for k in names[:-1]})
    with pytest.raises(ValueError, match="entries"):
        chain.indices_of({**labels, names[0]: labels[names[0]][:-1]})
