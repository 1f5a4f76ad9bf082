"""The options classes check their own arguments (no wrapper installed at import): every row of
the core's table of solver options, and every field of SimOptions and EnsembleOptions, refuses a
wrong type and a value out of range with an OptionError / ModelError naming the option, its bound
and the value, through the constructor, the property and the model file alike.  The cases are
generated from the tables, so a new option cannot miss them."""

import math
import re

import pytest

import aqmchain
from aqmchain import _core, modelfile

ROWS = _core.StationaryOptions.options()
WRONG_TYPES = {  # values of the wrong Python type, by the row's type
    "int": ["x", 1.5, True, None, [1]],
    "real": ["x", True, None, [0.5], float("nan"), float("inf")],
    "choice": [3, None, True, ["amd"]],
    "real_list": ["x", 3, None, [1.0, "a"], [1.0, float("nan")]],
}
DOC = {"model": {"buffer": 5}, "source": {"kind": "bernoulli", "alpha": 0.3},
       "service": {"kind": "geometric", "mu": 0.5},
       "aqm": {"drop": "red", "min_th": 1, "max_th": 4, "p_max": 0.1, "w": 0.1}, "grid": {"k": 2, "refine": "none"}}


def out_of_range(row: dict) -> list:
    """Values of the right type outside the row's bounds (from the row itself)."""
    t, lo, hi = row["type"], row["lo"], row["hi"]
    if t == "int":
        return [lo - 1, hi + 1, 2**70, -(2**70)]
    if t == "real":
        vals = [lo if row["lo_open"] else lo - 1.0, lo - 1e300]
        if math.isfinite(hi):
            vals += [hi if row["hi_open"] else hi + 1.0]
        return vals
    if t == "choice":
        return ["no-such-value", "", row["choices"][0].upper() + "x"]
    return [[-1.0, 2.0], [0.0, 0.0]]  # real_list: a negative entry, a zero sum


def ids(row: dict) -> str:
    return row["name"]


def test_the_table_is_the_class():
    names = [r["name"] for r in ROWS]
    assert names == list(_core.StationaryOptions.option_names())
    assert {"method", "tol", "max_iter", "ordering", "strategy", "direct_max_gb", "x0"} <= set(names)
    defaults = _core.StationaryOptions.defaults()
    o = _core.StationaryOptions()
    for r in ROWS:  # one property per row, its default the row's
        assert getattr(o, r["name"]) == r["default"] == defaults[r["name"]], r["name"]
        assert r["doc"] and r["bound"], r["name"]
    # the right type within the bounds is taken, by the constructor and the property
    good = {"int": lambda r: r["hi"], "real": lambda r: r["lo"] + (1e-3 if r["lo_open"] else 0.0),
            "choice": lambda r: r["choices"][-1], "real_list": lambda r: [0.0, 2.0]}
    for r in ROWS:
        v = good[r["type"]](r)
        assert getattr(_core.StationaryOptions(**{r["name"]: v}), r["name"]) == v, r["name"]
        setattr(o, r["name"], v)
        assert getattr(o, r["name"]) == v, r["name"]


@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_a_wrong_type_is_an_option_error_naming_the_option(row):
    name = row["name"]
    for v in WRONG_TYPES[row["type"]]:
        with pytest.raises(aqmchain.OptionError, match=rf"^solver option '{name}(\[\d+\])?' must be ") as e:
            _core.StationaryOptions(**{name: v})
        assert e.value.param.startswith(name)
        with pytest.raises(aqmchain.OptionError, match=rf"^solver option '{name}(\[\d+\])?' must be "):
            setattr(_core.StationaryOptions(), name, v)


@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_a_value_out_of_range_is_an_option_error_naming_the_bound(row):
    name = row["name"]
    for v in out_of_range(row):
        with pytest.raises(aqmchain.OptionError, match=rf"^solver option '{name}' must ") as e:
            _core.StationaryOptions(**{name: v})
        assert e.value.param == name
        if row["type"] in ("int", "real", "choice"):  # the row's bound, as the table states it
            assert f"must be {row['bound']}" in str(e.value)
        with pytest.raises(aqmchain.OptionError, match=rf"^solver option '{name}' must "):
            setattr(_core.StationaryOptions(), name, v)


@pytest.mark.parametrize("row", [r for r in ROWS if r["name"] != "x0"], ids=ids)
def test_the_model_files_solver_table_names_the_key(row):
    key = f"solver.{row['name']}"
    for v in WRONG_TYPES[row["type"]][:1] + out_of_range(row)[:1]:
        with pytest.raises(aqmchain.ModelError, match=rf"^parameter '{re.escape(key)}' must ") as e:
            modelfile.model_from_dict({**DOC, "solver": {row["name"]: v}})
        assert e.value.param == key


def test_solve_stationary_names_a_wrong_option():
    model = modelfile.model_from_dict(DOC)[0]
    with pytest.raises(aqmchain.OptionError, match=r"^solver option 'tol' must be a finite number, got 'x'"):
        aqmchain.solve_stationary(model, tol="x")
    with pytest.raises(aqmchain.OptionError, match=r"^solver option 'max_iter' must be an integer in \[0, "):
        aqmchain.solve_stationary(model, max_iter=1.5)


SIM_CLASSES = [_core.SimOptions, _core.EnsembleOptions]


@pytest.mark.parametrize("cls", SIM_CLASSES, ids=lambda c: c.__name__)
def test_simulation_options_refuse_a_wrong_type_naming_the_field(cls):
    defaults = cls.defaults()
    assert set(defaults) == set(cls.option_names())
    for name, default in defaults.items():
        wrong = ["x", None, [1]] + ([1] if isinstance(default, bool) else [True, 1.5] if isinstance(default, int)
                                    else [True, float("nan")])
        for v in wrong:
            with pytest.raises(aqmchain.ModelError, match=rf"^parameter '{name}' must be ") as e:
                cls(**{name: v})
            assert e.value.param == name
            with pytest.raises(aqmchain.ModelError, match=rf"^parameter '{name}' must be "):
                setattr(cls(), name, v)
    with pytest.raises(aqmchain.ModelError, match=r"^parameter 'slotz' must be one of the options .*did you mean 'slots'"):
        _core.SimOptions(slotz=10)


def test_simulation_options_ranges_are_named():
    # the counts' ranges (the core's), a whole float taken for a count
    assert _core.SimOptions(slots=1e6).slots == 1_000_000
    for name, (lo, hi) in _core.SimOptions.int_ranges().items():
        for v in (lo - 1, hi + 1):
            with pytest.raises(aqmchain.ModelError, match=rf"^parameter '{name}' must be "):
                _core.SimOptions(**{name: v})
    with pytest.raises(aqmchain.ModelError, match=r"^parameter 'warmup' must be -1 \(the default, slots / 10\) or "
                                                  r"in \[0, slots = 1000\), got 1000"):
        _core.SimOptions(slots=1000, warmup=1000)
    with pytest.raises(aqmchain.ModelError, match=r"^parameter 'seed' must be <= 18446744073709551615"):
        _core.SimOptions(seed=2**64)
    with pytest.raises(aqmchain.ModelError, match=r"^parameter 'replications' must be in \[2, "):
        _core.EnsembleOptions(replications=1)


def test_no_constructor_is_wrapped_at_import():
    import aqmchain._checks as checks

    assert not hasattr(checks, "install") and not hasattr(_core, "_checks_installed")
    for cls in (_core.StationaryOptions, _core.SimOptions, _core.EnsembleOptions):
        assert type(cls.__init__).__name__ == "instancemethod", cls  # pybind's own constructor
