"""The core's layers: the state space, operators and solvers know no queue model, and the
queue models' descriptor tells the solvers and the Python readers what they need."""

import re

import numpy as np

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
