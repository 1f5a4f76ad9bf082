"""The core's registries of drop functions and sources drive the constructors, their type
checks (named errors, no wrapper installed over the core), the model-file keys, the reprs and
the kind lists inside error messages."""

import numpy as np
import pytest

import aqmchain
from aqmchain import _core, modelfile

DROPS = _core.DropFunction.kinds
SOURCES = _core.Source.kinds
GOOD = {"a number": 1.0, "an integer": 2, "a list of numbers": [1.0], "a list of lists of numbers": [[1.0]],
        "a list of [x, y] pairs": [[1.0, 0.5]]}
BAD = [("x", "a finite number"), (None, "a finite number"), (True, "a finite number"),
       (float("nan"), "a finite number"), (10**400, "a finite number")]


def cases():
    for cls, kinds, prefix in ((_core.DropFunction, DROPS, "aqm."), (_core.Source, SOURCES, "source.")):
        for k in kinds:
            for i, p in enumerate(k["params"]):
                yield pytest.param(cls, k, prefix, i, id=f"{k['name']}.{p['name']}")


@pytest.mark.parametrize("cls, kind, prefix, i", list(cases()))
def test_a_wrong_type_names_the_parameter(cls, kind, prefix, i):
    """Every parameter of every kind: a value of the wrong type is a ModelError naming it,
    raised by the core's constructor itself (nothing is wrapped over it at import)."""
    ctor = getattr(cls, kind["name"])
    assert type(ctor).__name__ == "builtin_function_or_method", "a Python wrapper over the core's constructor"
    params = kind["params"]
    p = params[i]
    args = {q["name"]: GOOD[q["type"]] for q in params[:i] if q["required"]}
    bad = "x" if p["type"] == "a number" else ("x" if p["type"] == "an integer" else 5.0)
    with pytest.raises(aqmchain.ModelError) as e:
        ctor(**args, **{p["name"]: bad})
    assert e.value.param == prefix + p["name"]
    assert f"parameter '{prefix}{p['name']}' must be" in str(e.value) and ("'x'" in str(e.value) or "5.0" in str(e.value))


@pytest.mark.parametrize("value, bound", BAD)
def test_bad_numbers_are_named_errors(value, bound):
    with pytest.raises(aqmchain.ModelError, match=rf"parameter 'source\.alpha' must be {bound}") as e:
        _core.Source.bernoulli(value)
    assert e.value.param == "source.alpha"
    with pytest.raises(aqmchain.ModelError, match=r"parameter 'source\.n' must be an integer in \[2, "):
        _core.Source.ssmp(2.5, 1.5, 31.6)
    with pytest.raises(aqmchain.ModelError, match=rf"'source\.n' must be <= {_core.Source.max_ssmp_n}, got "):
        _core.Source.ssmp(_core.Source.max_ssmp_n + 1, 1.5, 31.6)
    with pytest.raises(aqmchain.ModelError, match=r"parameter 'aqm\.points\[1\]' must be a pair \[avg, p\]"):
        _core.DropFunction.table([[1, 0.1], [2, 0.2, 0.3]])


#: A valid value of every drop-function parameter name (by name, so that a new kind made of
#: known parameters is sampled without an edit here).
TYPICAL = {"min_th": 2.0, "max_th": 8.0, "p_max": 0.1, "k_l": 2.0, "k_h": 8.0, "gamma": 0.3, "q_max": 9.0,
           "seg": 4.0, "coeffs": [0.1, 0.2], "points": [[1.0, 0.0], [3.0, 0.5]]}
#: One function of every kind of the registry, built from the typical values of its parameters.
SAMPLES = [aqmchain.DropFunction.make(k["name"], **{p["name"]: TYPICAL[p["name"]] for p in k["params"]})
           for k in DROPS]


def test_every_kind_has_a_sample_and_rebuilds_from_its_args():
    assert [f.kind for f in SAMPLES] == [k["name"] for k in DROPS] and len(SAMPLES) >= 8
    x = np.linspace(0, 12, 97)
    for f in SAMPLES:
        g = aqmchain.DropFunction.make(f.kind, **f.args())
        np.testing.assert_array_equal(f(x), g(x))
        assert repr(f) == repr(g) and repr(f).startswith(f"DropFunction.{f.kind}(")
        assert list(f.args()) == [p["name"] for k in DROPS if k["name"] == f.kind for p in k["params"]]


def test_the_loader_reads_its_keys_from_the_registries():
    assert set(modelfile._DROP_KEYS) == {k["name"] for k in DROPS}
    for k in DROPS:
        assert modelfile._DROP_KEYS[k["name"]] == {p["name"]: p["required"] for p in k["params"]}
    assert set(modelfile._SOURCE_KINDS["continuous"]) == {k["name"] for k in SOURCES if k["continuous"]}
    assert set(modelfile._SOURCE_KINDS["discrete"]) == {k["name"] for k in SOURCES if not k["continuous"]}
    src = aqmchain.Source.ssmp(5, 1.927562, 31.6)
    assert src.kind == "ssmp" and src.args() == {"n": 5, "q": 1.927562, "a": 31.6}
    doc = {"model": {"buffer": 10}, "source": {"kind": "ssmp", **src.args()}, "service": {"mu": 0.6},
           "aqm": {"drop": "dsred", "k_l": 2, "k_h": 8, "gamma": 0.3}}
    m = aqmchain.model_from_dict(doc)[0]
    assert m.source.matrix == src.matrix and m.aqm.drop.args() == {"k_l": 2.0, "k_h": 8.0, "gamma": 0.3}


def test_kind_lists_in_messages_are_the_registry_traits():
    scales = [k["name"] for k in DROPS if k["scales_p_max"]]
    thresholds = [k["name"] for k in DROPS if k["thresholds"]]
    listed = lambda names: ", ".join(names[:-1]) + " or " + names[-1]  # noqa: E731
    with pytest.raises(aqmchain.ModelError, match=f"false unless drop is {listed(scales)} "):
        aqmchain.Aqm(drop=aqmchain.DropFunction.dsred(2, 8, 0.3), adaptive=True)
    with pytest.raises(aqmchain.ModelError, match=f"false unless drop is {listed(scales)} "):
        aqmchain.Aqm(drop=aqmchain.DropFunction.dsred(2, 8, 0.3), dynamic_max_th=True)
    with pytest.raises(aqmchain.ModelError, match=f"none unless drop is {listed(thresholds)} "):
        aqmchain.Model(buffer=10, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.6),
                       aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.table([(1, 0.0), (3, 0.5)]), modified="front"),
                       classes=[aqmchain.TrafficClass("a", 1.0, mice=True)])


MODEL_TYPES = [_core.Service, _core.TrafficClass, _core.Aqm, _core.GridSpec, _core.Model, _core.Phase, _core.Scenario]


def test_model_types_check_their_arguments_in_the_bindings():
    """No Python wrapper is installed over the model's constructors: the bindings convert each
    argument and name the parameter of a wrong type (the API and the model file alike)."""
    for cls in MODEL_TYPES:
        assert type(cls.__init__).__name__ != "function", f"{cls.__name__}.__init__ is a Python wrapper"
    src, svc = _core.Source.bernoulli(0.5), _core.Service(0.5)
    m = _core.Model(buffer=10, source=src, service=svc)
    calls = [
        ("service.mu", lambda: _core.Service("0.5")),
        ("service.mu", lambda: _core.Service.exponential([1])),
        ("class.flows", lambda: _core.TrafficClass("a", 1.0, flows=1.5)),
        ("class.mice", lambda: _core.TrafficClass("a", 1.0, mice=1)),
        ("class.share[1]", lambda: _core.TrafficClass("a", [0.5, "x"])),
        ("aqm.ecn", lambda: _core.Aqm(ecn="0.1")),
        ("aqm.count_max", lambda: _core.Aqm(spacing="count", count_max=2**40)),
        ("aqm.interval", lambda: _core.Aqm(adaptive=True, interval="5")),
        ("aqm.drop", lambda: _core.Aqm(drop="red")),
        ("aqm.increment", lambda: _core.Aqm(increment=0.1)),  # a key of adaptive RED while it is off
        ("aqm.a", lambda: _core.Aqm(filter="redwm", a=[0.0] * 65, b=[1.0])),
        ("grid.k", lambda: _core.GridSpec(k=0)),
        ("grid.step_min", lambda: _core.GridSpec(step_min="x")),
        ("model.buffer", lambda: _core.Model(buffer=2.5, source=src, service=svc)),
        ("model.time", lambda: _core.Model(buffer=5, source=src, service=svc, time=1)),
        ("grid", lambda: _core.Model(buffer=5, source=src, service=svc, grid=3)),
        ("class[0]", lambda: _core.Model(buffer=5, source=src, service=svc, classes=["a"])),
        ("phase.duration", lambda: _core.Phase("x", m)),
        ("phase.model", lambda: _core.Phase(10, None)),
        ("phase[1]", lambda: _core.Scenario([_core.Phase(10, m), 3])),
    ]
    for param, call in calls:
        with pytest.raises(aqmchain.ModelError) as e:
            call()
        assert e.value.param == param and f"'{param}'" in str(e.value), (param, str(e.value))
    with pytest.raises(TypeError, match=r"did you mean 'count_max'"):
        _core.Aqm(count_mx=5)
    with pytest.raises(TypeError, match=r"did you mean 'step_min'"):
        _core.GridSpec(stepmin=0.1)
    with pytest.warns(UserWarning, match=r"aqm\.k_l = 12 is not below the buffer \(model\.buffer = 10\)"):
        _core.Model(buffer=10, source=src, service=svc, aqm=_core.Aqm(drop=_core.DropFunction.dsred(12, 20, 0.5)))


def test_the_stateful_features_are_one_table():
    """Every stateful key belongs to its feature in the core's table (or is a switch, or
    autored_p, read by two features); the loader's and the checks' key lists come from it."""
    features = _core.Aqm.features
    switches = {f["name"] for f in features}
    keys = [k for f in features for k in f["keys"]]
    assert len(keys) == len(set(keys))
    assert set(_core.Aqm.stateful_defaults()) == switches | set(keys) | {"autored_p"}
    assert {n: keys for n, (off, keys) in modelfile._FEATURE_KEYS.items()} == {f["name"]: tuple(f["keys"])
                                                                              for f in features}
    for f in features:
        if f["refuse_when_off"]:
            key = f["keys"][0]
            with pytest.raises(aqmchain.ModelError, match=rf"'aqm\.{key}' must be given only with aqm\.{f['name']} = {f['on']}"):
                aqmchain.Aqm(**{key: _core.Aqm.stateful_defaults()[key]})


def test_ssmp_n_has_one_bound_for_the_api_the_file_and_the_chain():
    """n = 1001 (above the dense-modulator bound of MMBP matrices) is accepted by the API, the
    model file and the chain alike; the one bound is the core's (Source.max_ssmp_n)."""
    top = _core.Source.max_ssmp_n
    doc = {"model": {"buffer": 3}, "source": {"kind": "ssmp", "n": 1001, "q": 2.0, "a": 2.0},
           "service": {"mu": 0.9}, "grid": {"k": 1, "refine": "none"}}
    m = aqmchain.model_from_dict(doc)[0]
    assert m.source.states == 1001
    r = aqmchain.solve_stationary(m)
    assert r.states >= 1001 and abs(r.pi.sum() - 1) < 1e-12 and 0 <= r.loss < 1
    for call in (lambda: aqmchain.Source.ssmp(top + 1, 2.0, 2.0),
                 lambda: aqmchain.model_from_dict({**doc, "source": {**doc["source"], "n": top + 1}})):
        with pytest.raises(aqmchain.ModelError, match=rf"'source\.n' must be <= {top}, got {top + 1}"):
            call()


def test_the_filters_are_one_table():
    assert list(_core.Aqm.filter_keys) == list(_core.Aqm.filters) == ["ewma", "redwm"]
    assert modelfile._FILTER_KEYS == {f: set(k) for f, k in _core.Aqm.filter_keys.items()}
    with pytest.raises(aqmchain.ModelError, match=r"'aqm\.filter' must be one of ewma, redwm, got 'ewm'"):
        aqmchain.Aqm(filter="ewm")
