"""SPEC 8(e): every class of bad input raises a named error naming parameter, bound and value."""

import copy

import pytest

import aqmchain

from conftest import BASE_DOC as BASE, construction_error  # noqa: E402


def with_(path, value):
    doc = copy.deepcopy(BASE)
    sec, key = path.split(".")
    if value is None:
        del doc[sec][key]
    else:
        doc[sec][key] = value
    return doc


CASES = [
    # (section.key, bad value, parameter named, text that must appear)
    ("source.alpha", 1.5, "source.alpha", ["[0, 1]", "1.5"]),
    ("source.alpha", -0.1, "source.alpha", ["[0, 1]", "-0.1"]),
    ("aqm.p_max", 1.2, "aqm.p_max", ["[0, 1]", "1.2"]),
    ("aqm.ecn", 2.0, "aqm.ecn", ["[0, 1]", "2"]),
    ("aqm.max_th", 3, "aqm.max_th", ["> aqm.min_th", "3"]),
    ("aqm.min_th", -1, "aqm.min_th", [">= 0", "-1"]),
    ("model.buffer", 0, "model.buffer", [">= 1", "0"]),
    ("aqm.w", 0.0, "aqm.w", ["(0, 1]", "0"]),
    ("aqm.w", 1.5, "aqm.w", ["(0, 1]", "1.5"]),
    ("service.mu", 0.0, "service.mu", ["(0, 1]", "0"]),
    ("grid.k", 0, "grid.k", [">= 1", "0"]),
    ("grid.mapping", "linear", "grid.mapping", ["split", "linear"]),
    ("aqm.update", "sometimes", "aqm.update", ["per_slot", "sometimes"]),
    ("aqm.policy", "middle", "aqm.policy", ["front", "middle"]),
    ("aqm.drop", "blue", "aqm.drop", ["red", "blue"]),
    ("aqm.gamma", 0.5, "aqm.gamma", ["unknown key", "red"]),
    ("model.buffer", "250", "model.buffer", ["integer", "250"]),
    ("aqm.p_max", None, "aqm.p_max", ["missing"]),
    ("model.colour", "blue", "model.colour", ["unknown key"]),
]


@pytest.mark.parametrize("path,value,param,texts", CASES)
def test_bad_parameter(path, value, param, texts):
    with pytest.raises(aqmchain.ModelError) as exc:
        aqmchain.model_from_dict(with_(path, value))
    assert getattr(exc.value, "param", None) == param
    for t in texts:
        assert t in str(exc.value), str(exc.value)


def test_non_stochastic_modulator():
    doc = copy.deepcopy(BASE)
    doc["source"] = {"kind": "mmbp", "matrix": [[0.5, 0.4], [0.5, 0.5]], "arrival": [0.1, 0.2]}
    with pytest.raises(aqmchain.ModelError, match=r"source\.matrix\[0\].*stochastic.*0\.9") as exc:
        aqmchain.model_from_dict(doc)
    assert exc.value.param == "source.matrix[0]"


def test_reducible_modulator():
    with pytest.raises(aqmchain.ModelError, match="irreducible"):
        aqmchain.Source.mmbp([[1.0, 0.0], [0.0, 1.0]], [0.2, 0.3])


def test_ssmp_bounds():
    with pytest.raises(aqmchain.ModelError, match="source.q"):
        aqmchain.Source.ssmp(5, 40.0, 31.6)
    with pytest.raises(aqmchain.ModelError, match="source.a"):
        aqmchain.Source.ssmp(5, 1.0, 1.5)
    with pytest.raises(aqmchain.ModelError, match="source.mean"):
        aqmchain.Source.ssmp_from_mean(0.99, 31.6, 5)
    doc = copy.deepcopy(BASE)
    doc["source"] = {"kind": "ssmp", "n": 5, "a": 31.6}
    with pytest.raises(aqmchain.ModelError, match="exactly one of"):
        aqmchain.model_from_dict(doc)


def test_unknown_section_and_missing_section():
    doc = copy.deepcopy(BASE)
    doc["queue"] = {}
    with pytest.raises(aqmchain.ModelError, match=r"unknown section '\[queue\]'"):
        aqmchain.model_from_dict(doc)
    doc = copy.deepcopy(BASE)
    del doc["service"]
    with pytest.raises(aqmchain.ModelError, match=r"missing required section '\[service\]'"):
        aqmchain.model_from_dict(doc)


def test_malformed_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\nbuffer = 3\n")
    with pytest.raises(aqmchain.ModelError, match="malformed model file"):
        aqmchain.load_model(bad)
    with pytest.raises(aqmchain.ModelError, match="cannot read model file"):
        aqmchain.load_model(tmp_path / "nope.toml")


def test_continuous_time_needs_a_continuous_source():
    with pytest.raises(aqmchain.ModelError, match="continuous"):
        aqmchain.model_from_dict(with_("model.time", "continuous"))


def test_state_space_over_memory_limit():
    model = aqmchain.model_from_dict(with_("grid.k", 1000))[0]
    with pytest.raises(aqmchain.StateSpaceTooLarge, match="memory_limit_gb = 0.01") as exc:
        aqmchain.solve_stationary(model, memory_limit_gb=0.01)
    assert exc.value.param == "memory_limit_gb"
    assert isinstance(exc.value, aqmchain.ModelError)


def test_drop_function_constructors():
    with pytest.raises(aqmchain.ModelError, match="gamma"):
        aqmchain.DropFunction.dsred(100, 200, 1.5)
    with pytest.raises(aqmchain.ModelError, match=r"2/3"):
        aqmchain.DropFunction.nlred(100, 200, 0.8)
    with pytest.raises(aqmchain.ModelError, match="increasing"):
        aqmchain.DropFunction.table([(5.0, 0.1), (2.0, 0.3)])
    with pytest.raises(aqmchain.ModelError, match="seg"):
        aqmchain.Model(buffer=100, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.5),
                       aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.sred(80.0)))


def test_nearly_stochastic_modulator_builds():
    # rows within the 1e-12 validation tolerance are normalised by the builder
    m = aqmchain.Model(buffer=10, source=aqmchain.Source.mmbp([[0.7, 0.3 + 5e-13], [0.5, 0.5]], [0.2, 0.6]),
                       service=aqmchain.Service(0.5), aqm=aqmchain.Aqm(w=0.5), grid=aqmchain.GridSpec(k=1))
    r = aqmchain.solve_stationary(m, tol=1e-12)
    # rows sum to 1 within the rounding of forming them (the construction bound of the matrix built)
    P = aqmchain.transition_matrix(aqmchain.build_chain(m))
    assert r.build["max_row_error"] <= construction_error(P.toarray())
    assert r.info.status == "converged" and r.info.residual <= 1e-12  # the requested tol


def test_x0_must_have_mass():
    m = aqmchain.model_from_dict(BASE)[0]
    n = aqmchain.build_chain(m).n
    with pytest.raises(aqmchain.OptionError, match="positive sum"):
        aqmchain.solve_stationary(m, method="power", x0=[0.0] * n)
    with pytest.raises(aqmchain.OptionError, match="x0"):
        aqmchain.solve_stationary(m, method="power", x0=[1.0, 2.0])
