"""SPEC 8(b): the built P equals a dense matrix written independently from SPEC 3."""

import itertools

import numpy as np
import pytest

import aqmchain
from conftest import model_of, construction_error
from oracle import DROPS, SOURCES, reference_chain


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
