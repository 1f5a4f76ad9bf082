"""Property-based fuzz test of the command line: valid tiny model files, mutated (keys dropped,
wrong types, huge / negative / NaN / infinite numbers, huge integers, strings for numbers,
unknown keys, nested tables), run in-process through ``solve``, ``estimate``, ``simulate``
and ``policies``.  Every run ends with exit code 0, 2 or 3, never a traceback, and an exit
2 names the offending key (or option).

Derandomized (a fixed sequence of examples, no example database) so CI is reproducible.
"""

import copy
import re
import tempfile
import traceback
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cli_helpers import TRACEBACK, run_cli, to_toml

SECTIONS = ("model", "source", "service", "aqm", "grid", "solver")
KNOWN_KEYS = {
    "model": ["buffer", "time"],
    "source": ["kind", "alpha", "n", "q", "a", "mean", "matrix", "arrival"],
    "service": ["kind", "mu"],
    "aqm": ["drop", "w", "update", "policy", "ecn", "min_th", "max_th", "p_max", "k_l", "k_h", "gamma", "q_max",
            "seg", "coeffs", "points"],
    "grid": ["k", "points", "mapping", "refine", "step_min", "state_budget"],
    "solver": ["method", "tol", "max_iter", "ncv", "refine_steps", "check_every", "memory_limit_gb", "ordering",
               "strategy", "coarse_size", "smoothing_sweeps", "cycle_gamma", "recombination_depth", "direct_max_gb",
               "auto_direct_max_flops"],
}
# An exit-2 message names a key of the file ("aqm.p_max", "[service]") or an option ("--slots").
NAMES_A_KEY = re.compile(r"\b(model|source|service|aqm|grid|solver)\b|--[a-z]|\[[^\]]+\]")

unit = st.floats(0.0, 1.0)
# Values that break things.  Deliberately no small positive floats in (1e-12, 1e-3): a
# service rate that slow is valid and only slow (the response-time computations take long).
WEIRD = st.one_of(
    st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, 2**64, -(2**64), 10**400,
                     10**5000, float("nan"), float("inf"), float("-inf"), 0.0, -0.0, -1.0, 1.5, 2.0, 1e300,
                     1e308, -1e308, 5e-324, True, False, "", "abc", "1e3", "0.5", "red", "direct",
                     "\u00e9\u00e8", [], [1, 2], [[1, 2], [3]], [[[1]]], {}, {"a": {"b": 1}}, {"k": [1, "x"]}])
).map(copy.deepcopy)  # a fresh object each time: a document must not contain itself


@st.composite
def source(draw):
    kind = draw(st.sampled_from(["bernoulli", "ssmp", "ssmp_mean", "mmbp"]))
    if kind == "bernoulli":
        return {"kind": "bernoulli", "alpha": draw(unit)}
    if kind.startswith("ssmp"):
        n, a = draw(st.integers(2, 5)), draw(st.floats(2.0, 40.0))
        if kind == "ssmp":
            return {"kind": "ssmp", "n": n, "q": draw(st.floats(0.05, 1.0)) * a, "a": a}
        return {"kind": "ssmp", "n": n, "mean": draw(st.floats(0.01, 0.9)), "a": a}
    p, r = draw(st.floats(0.01, 0.99)), draw(st.floats(0.01, 0.99))
    return {"kind": "mmbp", "matrix": [[1 - p, p], [r, 1 - r]], "arrival": [draw(unit), draw(unit)]}


@st.composite
def aqm(draw, buffer):
    drop = draw(st.sampled_from(["none", "red", "gentle_red", "nlred", "dsred", "sred", "polynomial", "table"]))
    lo = draw(st.integers(0, max(buffer - 1, 0)))
    hi = draw(st.integers(lo + 1, buffer + 5))
    d = {"drop": drop, "w": draw(st.floats(0.01, 1.0)),
         "policy": draw(st.sampled_from(["tail", "tail", "front", "random"]))}
    if drop in ("red", "gentle_red"):
        d.update(min_th=lo, max_th=hi, p_max=draw(unit))
    elif drop == "nlred":
        d.update(min_th=lo, max_th=hi, p_max=draw(st.floats(0.0, 0.6)))
    elif drop == "dsred":
        d.update(k_l=lo, k_h=hi, gamma=draw(unit))
    elif drop == "sred":
        d.update(min_th=lo)
    elif drop == "polynomial":
        d.update(min_th=lo, max_th=hi, coeffs=draw(st.lists(st.floats(-1, 1), min_size=1, max_size=3)))
    elif drop == "table":
        d.update(points=[[float(lo), 0.0], [float(hi), draw(unit)]])
    if draw(st.booleans()):
        d["ecn"] = draw(unit)
    return d


@st.composite
def valid_doc(draw):
    buffer = draw(st.integers(1, 30))
    doc = {"model": {"buffer": buffer}, "source": draw(source()), "service": {"mu": draw(st.floats(0.05, 1.0))},
           "aqm": draw(aqm(buffer)), "grid": {"k": draw(st.integers(1, 4)),
                                               "mapping": draw(st.sampled_from(["split", "split", "nearest"])),
                                               # the automatic grid (pre-solve) in a quarter of the documents
                                               "refine": draw(st.sampled_from(["none", "none", "none", "auto"]))},
           # keeps a mutation that inflates the state space cheap to refuse
           "solver": {"memory_limit_gb": 0.05, "method": draw(st.sampled_from(["auto", "direct"]))}}
    return doc


@st.composite
def mutated_doc(draw):
    doc = draw(valid_doc())
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["drop", "set", "set", "set", "unknown_key", "section_scalar", "unknown_section",
                                   "nested"]))
        sec = draw(st.sampled_from(SECTIONS))
        if op == "drop":
            table = doc.get(sec)
            if isinstance(table, dict) and table and draw(st.booleans()):
                table.pop(draw(st.sampled_from(sorted(table))))
            else:
                doc.pop(sec, None)
        elif op == "set":
            if not isinstance(doc.get(sec), dict):
                doc[sec] = {}
            doc[sec][draw(st.sampled_from(KNOWN_KEYS[sec]))] = draw(WEIRD)
        elif op == "unknown_key":
            if isinstance(doc.get(sec), dict):
                doc[sec][draw(st.sampled_from(["gamma", "colour", "a b", "x.y", "\u00fc", "K"]))] = draw(WEIRD)
        elif op == "section_scalar":
            doc[sec] = draw(WEIRD)
        elif op == "unknown_section":
            doc[draw(st.sampled_from(["queue", "Model", "simulate"]))] = {"x": 1}
        else:
            doc[sec] = {"inner": doc.get(sec) if isinstance(doc.get(sec), dict) else {}, "k": {"deeper": [1]}}
    return doc


COMMANDS = [
    ["solve", "--json", "{json}"],
    ["estimate"],
    ["simulate", "--slots", "5000", "--batches", "5", "--replications", "2", "-q"],
    ["policies"],
]


# deadline: a hang, not a slow example on a loaded 2-core machine (a few take seconds)
@settings(max_examples=2000, deadline=60_000, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=mutated_doc(), command=st.sampled_from(COMMANDS))
def test_cli_survives_mutated_model_files(doc, command):
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "m.toml"
        f.write_text(to_toml(doc), encoding="utf-8")
        argv = [command[0], str(f)] + [a.replace("{json}", str(Path(tmp) / "out.json")) for a in command[1:]]
        try:
            code, out, err = run_cli(*argv)
        except Exception:  # noqa: BLE001  (an exception escaping main is the bug this test hunts)
            raise AssertionError(f"aqmchain {' '.join(argv)} raised on\n{to_toml(doc)}\n{traceback.format_exc()}")
    event(f"{command[0]}: exit {code}")
    context = f"aqmchain {command[0]} on\n{to_toml(doc)}\nstderr: {err}"
    assert code in (0, 2, 3), context
    assert TRACEBACK not in err, context
    # (the output may echo the command, whose random temporary path can spell "nan")
    assert "nan" not in out.replace(tmp, "").lower().replace("nan.", ""), context
    if code == 2:
        errors = [ln for ln in err.splitlines() if ln.startswith("aqmchain: error:")]
        assert len(errors) == 1, context
        assert NAMES_A_KEY.search(errors[0]), context
