"""Target sets of first-passage questions: parsing, errors, and the mask they select."""

import numpy as np
import pytest

from aqmchain import ModelError
from aqmchain._targets import parse_target


def test_clauses_and_canonical_text():
    t = parse_target("queue >= 200")
    assert str(t) == "queue>=200"
    t = parse_target("avg>=150.5 and modulator==1")
    assert str(t) == "avg>=150.5 and modulator==1"
    assert t.quantities() == ("avg", "modulator")
    assert parse_target(t) is t


def test_mask_is_the_conjunction():
    q = np.arange(6)
    avg = np.array([0.0, 1.0, 2.5, 3.0, 4.0, 5.0])
    mod = np.array([0, 1, 1, 0, 1, 1])
    assert parse_target("queue>=3").holds(q).tolist() == [False, False, False, True, True, True]
    assert parse_target("queue==0").holds(q).tolist() == [True] + [False] * 5
    assert parse_target("queue<2").holds(q).tolist() == [True, True, False, False, False, False]
    got = parse_target("avg>2 and modulator==1").holds(q, avg, mod)
    assert got.tolist() == [False, False, True, False, True, True]


@pytest.mark.parametrize("text, where", [
    ("", "to"), ("queue>", "to"), ("length>=3", "to (length>=3)"), ("queue>=2.5", "to (queue>=2.5)"),
    ("avg>=1e999", "to (avg>=1e999)"), ("avg>=inf", "to"), ("queue>=1 or avg<2", "to"),
])
def test_errors_name_the_parameter(text, where):
    with pytest.raises(ModelError) as e:
        parse_target(text)
    assert e.value.param == where
    with pytest.raises(ModelError):
        parse_target(None)
