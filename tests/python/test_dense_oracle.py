"""SPEC 8(b): the built P equals a dense matrix written independently from SPEC 3."""

import itertools

import numpy as np
import pytest

import aqmchain
from conftest import model_of, construction_error
from oracle import reference_chain

SOURCES = {
    "bernoulli": {"kind": "bernoulli", "alpha": 0.45},
    "ssmp": {"kind": "ssmp", "n": 3, "q": 1.5, "a": 4.0},
    "mmbp": {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.25, 0.75]], "arrival": [0.2, 0.9]},
}
DROPS = {
    "none": {"drop": "none"},
    "red": {"drop": "red", "min_th": 3, "max_th": 9, "p_max": 0.3},
    "gentle_red": {"drop": "gentle_red", "min_th": 2, "max_th": 6, "p_max": 0.2},
    "dsred": {"drop": "dsred", "k_l": 3, "k_h": 10, "gamma": 0.4},
    "sred": {"drop": "sred", "min_th": 2},
    "nlred": {"drop": "nlred", "min_th": 3, "max_th": 9, "p_max": 0.5},
    "polynomial": {"drop": "polynomial", "min_th": 2, "max_th": 10, "coeffs": [0.05, 0.3, -0.1, 0.6]},
    "table": {"drop": "table", "points": [[1.0, 0.0], [4.0, 0.3], [8.0, 0.9]]},
}


def compare(spec):
    states, P_ref = reference_chain(spec)
    chain = aqmchain.build_chain(model_of(spec))
    labels = aqmchain.state_labels(chain)
    built = list(zip(labels["level"].tolist(), labels["avg_index"].tolist(), labels["modulator"].tolist()))
    assert built == states, "reachable state sets differ"
    P = aqmchain.transition_matrix(chain).toarray()
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=construction_error(P_ref))
    # no structural entry the oracle does not have
    assert chain.nnz == np.count_nonzero(P_ref)


@pytest.mark.parametrize("source,drop,update,mapping",
                         [(s, d, u, m) for s, d, u, m in itertools.product(
                             SOURCES, DROPS, ("per_slot", "per_arrival"), ("split", "nearest"))])
def test_matrix_equals_spec(source, drop, update, mapping):
    spec = {"buffer": 12, "mu": 0.55, "w": 0.3, "k": 2, "mapping": mapping, "update": update,
            "source": SOURCES[source], **DROPS[drop]}
    if mapping == "nearest":
        with pytest.warns(RuntimeWarning, match="freezes avg"):
            compare(spec)
    else:
        compare(spec)


@pytest.mark.parametrize("source", ["bernoulli", "ssmp"])
def test_larger_buffer_with_ecn(source):
    spec = {"buffer": 30, "mu": 0.4, "w": 0.15, "k": 2, "mapping": "split", "update": "per_slot",
            "ecn": 0.3, "source": SOURCES[source], **DROPS["red"]}
    spec.update(min_th=8, max_th=20)
    compare(spec)


def test_flags_mapping():
    spec = {"buffer": 10, "mu": 0.5, "w": 0.2, "mapping": "flags", "update": "per_slot",
            "source": SOURCES["bernoulli"], **DROPS["red"]}
    compare(spec)
