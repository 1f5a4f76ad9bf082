"""Sensitivities (docs/sensitivities.md) against central finite differences of full solves.

The oracle solves the model at theta +- H and theta +- 2H from its own model-file document
(the resolved avg points written out, so the grid does not move; REDwM's coefficients and
the class shares moved with the compensation the docs name) and differences the metrics.
Tolerance, derived and not tuned:
  * truncation of the oracle's central difference D(H): Richardson, |D(2H) - D(H)| is 3x the
    H^2 term, taken twice;
  * round-off: every metric of a solve with residual vector r is off by r . y (y the metric's
    adjoint vector), at most ||r||_1 max|y|; the difference quotient carries 2 of them over 2H;
  * the sensitivities' own target, 1e-6 relative (the central difference of P's entries at
    h = 1e-4 theta: h^2 times the entries' third derivative, zero for entries linear or
    quadratic in theta).
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

import aqmchain
from aqmchain import sensitivity as S
from conftest import summation_error

SOLVE = {"method": "direct", "tol": 1e-13}

RED = {"drop": "red", "min_th": 3, "max_th": 9, "p_max": 0.2, "w": 0.3}
SLOTTED = {"model": {"buffer": 12}, "source": {"kind": "bernoulli", "alpha": 0.45}, "service": {"mu": 0.5},
           "aqm": dict(RED), "grid": {"k": 2, "refine": "none"}}
MMBP_ECN = {"model": {"buffer": 10},
            "source": {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.2, 0.8]], "arrival": [0.3, 0.7]},
            "service": {"mu": 0.55},
            "aqm": {"drop": "gentle_red", "min_th": 2, "max_th": 6, "p_max": 0.3, "w": 0.2345,
                    "update": "per_arrival", "ecn": 0.4},
            "grid": {"k": 2, "refine": "none"}}
CONTINUOUS = {"model": {"buffer": 12, "time": "continuous"}, "source": {"kind": "poisson", "rate": 0.5},
              "service": {"kind": "exponential", "mu": 0.6}, "aqm": dict(RED, w=0.4), "grid": {"k": 2, "refine": "none"}}
REDWM = {"model": {"buffer": 8}, "source": {"kind": "bernoulli", "alpha": 0.45}, "service": {"mu": 0.5},
         "aqm": {"drop": "red", "min_th": 2, "max_th": 6, "p_max": 0.2, "filter": "redwm", "triple": [0.3, 0.1234, 0.0876]},
         "grid": {"k": 1, "refine": "none"}}
CLASSES = {"model": {"buffer": 8}, "source": {"kind": "bernoulli", "alpha": 0.45}, "service": {"mu": 0.5},
           "aqm": dict(RED, min_th=2, max_th=6), "grid": {"k": 1, "refine": "none"},
           "class": [{"name": "a", "share": 0.3, "ecn": 0.5}, {"name": "b", "share": 0.7}]}
# p_max 0.27: 1 / p_b is no integer at any grid point (the exact cap of the count then moves
# with p_max, a change of the states)
SPACING = {"model": {"buffer": 10}, "source": {"kind": "bernoulli", "alpha": 0.45}, "service": {"mu": 0.5},
           "aqm": dict(RED, p_max=0.27, spacing="count"), "grid": {"k": 1, "refine": "none"}}


#: thresholds on grid points: P is piecewise linear in them (avg's updates land on the moving
#: grid point), one-sided derivatives
THRESHOLDS = ("aqm.min_th", "aqm.max_th")


def _solve(doc):
    return aqmchain.solve_stationary(aqmchain.model_from_dict(doc)[0], **SOLVE)


def _fixed(doc, result):
    """The document on the result's resolved grid (its points written out)."""
    d = copy.deepcopy(doc)
    d["grid"] = {"points": [float(x) for x in result.avg_grid], "refine": "none"}
    if doc["aqm"].get("filter") == "redwm":  # and the s grid's points (its top above s's largest value)
        d["grid"]["s_points"] = [float(x) for x in aqmchain.redwm_s_grid(result.chain.model)]
    if d["aqm"].get("filter") == "redwm":  # the triple as coefficients: [a_1, a_2], [b_0, b_1]
        m = result.chain.model
        d["aqm"].pop("triple")
        d["aqm"].update(a=list(m.aqm.a), b=list(m.aqm.b))
    return d


def _moved(doc, key, delta, move_grid=True):
    """The document with ``key`` moved by delta (written here, not with the library's helper):
    REDwM's b[j] / a[i] against a[0]; a class share against the last class's."""
    d = copy.deepcopy(doc)
    sec, _, name = key.partition(".")
    idx = None
    if name.endswith("]"):
        name, _, i = name[:-1].partition("[")
        idx = int(i)
    table = d["class"][int(sec[6:-1])] if sec.startswith("class[") else d[sec]
    if name in ("min_th", "max_th") and move_grid:  # the grid point on the threshold moves with it
        d["grid"]["points"] = [table[name] + delta if x == table[name] else x for x in d["grid"]["points"]]
    if idx is None:
        table[name] = table.get(name, 0.0) + delta
    else:
        table[name] = list(table[name])
        table[name][idx] += delta
    if sec == "aqm" and name in ("a", "b"):
        d["aqm"]["a"] = list(d["aqm"]["a"])
        d["aqm"]["a"][0] -= delta
        # s's largest value (a_2 + b_1) N: an s grid whose top sat on it keeps it there
        top = lambda t: (t["aqm"]["a"][1] + t["aqm"]["b"][1]) * t["model"]["buffer"]  # noqa: E731
        pts = d["grid"].get("s_points")
        if pts and abs(pts[-1] - top(doc)) <= 1e-12 * top(doc) and top(d) > pts[-2]:
            d["grid"]["s_points"] = [*pts[:-1], top(d)]
    if sec.startswith("class[") and name == "share":
        d["class"][-1]["share"] = d["class"][-1]["share"] - delta
    return d


def _fd(doc, key, theta, metrics, classes="approx"):
    """Central differences D(H), D(2H) of full solves, and the round-off of one metric value."""
    H = 1e-3 * abs(theta) if theta else 1e-4
    vals = {}
    res = []
    for s in (-2, -1, 1, 2):
        m = aqmchain.model_from_dict(_moved(doc, key, s * H))[0]
        r = aqmchain.solve_stationary(m, classes=classes, **SOLVE)
        res.append(r.info.residual)
        vals[s] = {k: getattr(r, k) for k in metrics}
    d1 = {k: (vals[1][k] - vals[-1][k]) / (2 * H) for k in metrics}
    d2 = {k: (vals[2][k] - vals[-2][k]) / (4 * H) for k in metrics}
    return d1, d2, H, max(res)


def _check(doc, metrics=("mean_queue", "loss", "throughput", "mean_response", "var_queue"), params=None,
           expect_notes=()):
    base = _solve(doc)
    sens = base.sensitivities(metrics=[m for m in metrics if m in S.sensitivity_metrics(base)])
    fixed = _fixed(doc, base)
    params = params or list(sens.parameters)
    assert params, "no parameter"
    checked = 0
    for p in params:
        if p in sens.notes:
            assert p in expect_notes or "bound" in sens.notes[p], (p, sens.notes[p])
            checked += _check_one_sided(fixed, base, sens, p)
            continue
        d1, d2, H, res = _fd(fixed, p, sens.parameters[p], list(sens.values))
        for m in sens.values:
            y = sens.adjoints[m]
            roundoff = 2 * res * float(np.abs(y).max()) / (2 * H)
            tol = 2 * abs(d2[m] - d1[m]) + roundoff + 1e-6 * abs(d1[m]) + 1e-14
            got = sens.values[m][p]
            assert abs(got - d1[m]) <= tol, (p, m, got, d1[m], d2[m], tol)
            checked += 1
    return base, sens, checked


def _valid(doc, p, delta):
    try:
        aqmchain.model_from_dict(_moved(doc, p, delta))
        return True
    except aqmchain.ModelError:  # the parameter is at a bound on this side
        return False


def _check_one_sided(fixed, base, sens, p):
    """P not smooth in p: each one-sided derivative against a one-sided difference of full solves
    (first order: its truncation error estimated by |D(H) - D(2H)|, taken twice)."""
    theta = sens.parameters[p]
    H = 1e-4 * abs(theta) if theta else 1e-6
    checked = 0
    for side, sign in (("left", -1.0), ("right", 1.0)):
        f = {}
        if not _valid(fixed, p, sign * 2 * H):
            continue
        res = base.info.residual
        for j in (1, 2):
            r = aqmchain.solve_stationary(aqmchain.model_from_dict(_moved(fixed, p, sign * j * H))[0], **SOLVE)
            res = max(res, r.info.residual)
            f[j] = {m: getattr(r, m) for m in sens.values}
        for m in sens.values:
            lr = sens.one_sided.get(m, {}).get(p)
            if lr is None:  # at a bound: the value is the one-sided derivative on the valid side
                lr = [sens.values[m][p]] * 2
            if math.isnan(lr[side == "right"]):
                continue
            f0 = getattr(base, m)
            d1, d2 = (f[1][m] - f0) / (sign * H), (f[2][m] - f0) / (sign * 2 * H)
            roundoff = 2 * res * float(np.abs(sens.adjoints[m]).max()) / H
            tol = 2 * abs(d2 - d1) + roundoff + 1e-6 * abs(d1) + 1e-14
            assert abs(lr[side == "right"] - d1) <= tol, (p, m, side, lr, d1, d2, tol)
            checked += 1
    return checked


def test_slotted_red_every_parameter():
    base, sens, checked = _check(SLOTTED, expect_notes=THRESHOLDS)
    assert set(sens.parameters) >= {"source.alpha", "service.mu", "aqm.min_th", "aqm.max_th", "aqm.p_max", "aqm.w"}
    assert checked >= 5 * 5
    # the elasticity is theta / F dF/dtheta
    e = sens.elasticities["mean_queue"]["aqm.p_max"]
    # F there is the ratio of pi's sums formed in Python, here the core's: two sums of n
    # nonnegative terms each, in another order, and three roundings of the quotient and products
    rel = 2 * summation_error(base.states) + 3 * np.finfo(float).eps
    want = sens.parameters["aqm.p_max"] / base.mean_queue * sens.values["mean_queue"]["aqm.p_max"]
    assert sens.parameters["aqm.p_max"] == 0.2 and e == pytest.approx(want, rel=rel)


def test_mmbp_gentle_ecn_per_arrival():
    _, sens, checked = _check(MMBP_ECN, metrics=("mean_queue", "loss", "mark_prob", "mean_avg", "mean_response"),
                              expect_notes=THRESHOLDS)
    assert {"source.arrival[0]", "source.arrival[1]", "aqm.ecn"} <= set(sens.parameters)


def test_ssmp_source():
    doc = {**SLOTTED, "source": {"kind": "ssmp", "n": 3, "q": 1.7, "a": 5.0}}
    _, sens, _ = _check(doc, metrics=("mean_queue", "loss", "mean_response"), expect_notes=THRESHOLDS)
    assert {"source.q", "source.a"} <= set(sens.parameters) and "source.n" not in sens.parameters


def test_continuous_time():
    base, sens, _ = _check(CONTINUOUS, metrics=("mean_queue", "loss", "mean_response", "var_system"),
                           expect_notes=THRESHOLDS)
    assert base.chain.time == "continuous" and "source.rate" in sens.parameters


def test_redwm_coefficients():
    _, sens, _ = _check(REDWM, metrics=("mean_queue", "loss", "mean_avg"), expect_notes=THRESHOLDS + ("aqm.ecn",))
    assert {"aqm.b[0]", "aqm.b[1]", "aqm.a[1]"} <= set(sens.parameters) and "aqm.w" not in sens.parameters


def test_redwm_updates_on_grid_points():
    """Round coefficients: some updates land exactly on grid points, and moving a coefficient
    adds states (the mass splits onto a neighbour): one-sided derivatives on the union of the
    states, each against a one-sided difference of full solves."""
    doc = copy.deepcopy(REDWM)
    doc["aqm"]["triple"] = [0.3, 0.15, 0.1]
    _, sens, checked = _check(doc, metrics=("mean_queue", "loss"),
                              expect_notes=THRESHOLDS + ("aqm.ecn", "aqm.b[0]", "aqm.b[1]", "aqm.a[1]"))
    assert "states" in sens.notes["aqm.b[1]"] and checked >= 10
    # raising b[1] or a[1] raises s's largest value, on which the s grid's top sits: the top
    # moves with it, so both sides are formed (each against full solves above)
    for p in ("aqm.b[1]", "aqm.a[1]"):
        assert not any(math.isnan(v) for v in sens.one_sided["mean_queue"][p]), (p, sens.one_sided["mean_queue"][p])


def test_classes_shares():
    _, sens, _ = _check(CLASSES, metrics=("mean_queue", "loss", "mark_prob"), expect_notes=THRESHOLDS)
    assert {"class[0].share", "class[0].ecn", "class[1].ecn"} <= set(sens.parameters)
    assert "class[1].share" not in sens.parameters  # the last share is the dependent one


def test_classes_exact_chain():
    """The exact class chain (the FIFO's sequence of classes) is rebuilt as the exact chain."""
    doc = copy.deepcopy(CLASSES)
    doc["model"]["buffer"] = 5
    base = aqmchain.solve_stationary(aqmchain.model_from_dict(doc)[0], classes="exact", **SOLVE)
    assert base.class_chain == "exact"
    sens = base.sensitivities(metrics=["loss", "mean_queue"], params=["aqm.p_max", "class[0].share"])
    fixed = _fixed(doc, base)
    for p in sens.parameters:
        d1, d2, H, res = _fd(fixed, p, sens.parameters[p], list(sens.values), classes="exact")
        for m in sens.values:
            roundoff = 2 * res * float(np.abs(sens.adjoints[m]).max()) / (2 * H)
            tol = 2 * abs(d2[m] - d1[m]) + roundoff + 1e-6 * abs(d1[m]) + 1e-14
            assert abs(sens.values[m][p] - d1[m]) <= tol, (p, m, sens.values[m][p], d1[m], tol)


def test_drop_spacing():
    base, sens, _ = _check(SPACING, metrics=("mean_queue", "loss", "mean_count"), expect_notes=THRESHOLDS + ("aqm.ecn",))
    assert base.count_cap is not None


def test_adjoint_matters_and_metrics_do_not_mix():
    """mean_queue's vectors do not depend on p_max: its derivative is the adjoint term alone
    (an adjoint of the wrong metric, or of the wrong sign, fails the finite differences above);
    the adjoint of each metric is its own: asking for one metric or for several gives the same."""
    base = _solve(SLOTTED)
    both = base.sensitivities(metrics=["loss", "mean_queue"], params=["aqm.p_max"])
    one = base.sensitivities(metrics=["mean_queue"], params=["aqm.p_max"])
    assert one.values["mean_queue"]["aqm.p_max"] == pytest.approx(both.values["mean_queue"]["aqm.p_max"], rel=1e-12)
    assert both.values["loss"]["aqm.p_max"] != pytest.approx(both.values["mean_queue"]["aqm.p_max"], rel=1e-3)
    # the adjoint solves' residuals are reported
    assert max(both.info["residuals"].values()) < 1e-10


@pytest.mark.parametrize("method", ["auto", "direct"])
def test_equal_right_hand_sides_share_one_solve(method):
    """Without ECN marking every AQM decision is a drop: loss_aqm and aqm_decision_prob have the
    same vectors, so the same adjoint system; it is solved once and both metrics take its
    solution.  Each shared metric's derivatives equal those of a call that asks for it alone
    (its own solve) within the sensitivities' accuracy target (1e-6 relative)."""
    base = _solve(SLOTTED)
    params = ["aqm.p_max", "aqm.w", "service.mu"]
    every = base.sensitivities(params=params, method=method)
    assert every.info["shared_adjoints"]["aqm_decision_prob"] == "loss_aqm"
    for m, first in every.info["shared_adjoints"].items():
        assert np.array_equal(every.adjoints[m], every.adjoints[first])
        assert every.info["iterations"][m] == every.info["iterations"][first]
        alone = base.sensitivities(metrics=[m], params=params, method=method)
        assert alone.info["adjoint_solves"] == 1 and not alone.info["shared_adjoints"]
        for p in params:
            assert every.values[m][p] == pytest.approx(alone.values[m][p], rel=1e-6, abs=1e-12), (m, p)
    # metrics with other right-hand sides keep their own solves (loss counts overflow too)
    assert "loss" not in every.info["shared_adjoints"] and "mean_queue" not in every.info["shared_adjoints"]


def test_rows_return_only_the_events_the_metrics_read():
    """The events a metric's vectors read are noted as they are read: a chain that carries only
    those gives the same vectors, and one without any of them cannot make them (mean_queue reads
    none: its vector is the level; loss: arrivals, AQM drops, overflows).  A pass returns the
    sides' weights of the events asked for, and the same derivatives; an unknown event is refused."""
    base = _solve(SLOTTED)
    chain, pi = base.chain, np.asarray(base.pi)
    full = S._metric_vectors(chain, None)
    for m in full:
        read = S._Point(chain, None, [m]).events_read
        carried = S._SideChain(chain, chain.model, {e: chain.events[e] for e in read}, chain.grid)
        got = S._metric_vectors(carried, None, [m])[m]
        assert got.kind == full[m].kind and len(got.pairs) == len(full[m].pairs), m
        for (a, b), (a0, b0) in zip(got.pairs, full[m].pairs):
            assert np.array_equal(a, a0) and np.array_equal(b, b0), m
        for e in read:
            fewer = S._SideChain(chain, chain.model, {k: chain.events[k] for k in read if k != e}, chain.grid)
            with pytest.raises(KeyError):
                S._metric_vectors(fewer, None, [m])
    assert S._Point(chain, None, ["mean_queue", "var_queue"]).events_read == []
    assert set(S._Point(chain, None, ["loss"]).events_read) == {"arrival", "aqm_drop", "overflow"}
    doc = S._frozen_doc(chain)
    h = 1e-4 * S._get(doc, "service.mu")
    plus, minus = (S._model_at(chain.model, doc, "service.mu", d, True) for d in (h, -h))
    Y = np.ones((chain.n, 1))
    every = aqmchain._core.chain_difference(chain, plus, minus, "approx", h, pi, Y, chain.n)
    some = aqmchain._core.chain_difference(chain, plus, minus, "approx", h, pi, Y, chain.n, events=["arrival"])
    assert set(some["events_plus"]) == {"arrival"} and set(every["events_plus"]) == set(chain.events)
    assert np.array_equal(some["events_plus"]["arrival"], every["events_plus"]["arrival"])
    assert some["products"] == every["products"] and some["kink_scale"] == every["kink_scale"]
    with pytest.raises(ValueError, match="'events' must name events of the chain .*got 'arrivals'"):
        aqmchain._core.chain_difference(chain, plus, minus, "approx", h, pi, Y, chain.n, events=["arrivals"])


@pytest.mark.parametrize("doc", [SLOTTED, CONTINUOUS, CLASSES], ids=["slotted", "continuous", "classes"])
def test_adjoint_methods_agree(doc):
    """The core's Krylov adjoint (auto's first choice), SuperLU and SciPy's GMRES: the same
    derivatives within the sensitivities' own accuracy target (1e-6 relative), every adjoint
    residual within its tolerance."""
    base = _solve(doc)
    params = ["aqm.p_max", "service.mu"]
    got = {m: base.sensitivities(metrics=["loss", "mean_queue"], params=params, method=m, tol=1e-12)
           for m in ("auto", "direct", "gmres")}
    assert got["auto"].info["method"] == "krylov" and not got["auto"].info["note"]
    for m, sens in got.items():
        assert max(sens.info["residuals"].values()) < 1e-10, (m, sens.info["residuals"])
        for metric in ("loss", "mean_queue"):
            for p in params:
                ref = got["direct"].values[metric][p]
                assert sens.values[metric][p] == pytest.approx(ref, rel=1e-6, abs=1e-12), (m, metric, p)


ROUND_COEFS = copy.deepcopy(REDWM)
ROUND_COEFS["aqm"]["triple"] = [0.3, 0.15, 0.1]


@pytest.mark.parametrize("doc, rows", [
    (SLOTTED, "all"), (MMBP_ECN, "all"), (CONTINUOUS, "all"), (CLASSES, "all"),
    (REDWM, ("aqm.min_th", "aqm.b[0]", "aqm.a[1]")), (SPACING, ("aqm.p_max", "aqm.min_th")),
    # states added at a side (min_th moves a grid point an update lands on): the added states' rows
    (ROUND_COEFS, ("aqm.min_th", "aqm.max_th", "aqm.b[0]", "aqm.b[1]", "aqm.a[1]")),
], ids=["slotted", "mmbp_ecn", "continuous", "classes", "redwm", "spacing", "redwm_states_added"])
def test_rows_equal_built_chains(doc, rows):
    """The rows of P at theta +- h generated on the chain's states (the default) give the
    derivatives of the chains built at theta +- h, notes and one-sided values included, within
    their round-off: each is a sum over the entries of pi dP y and of the vectors' differences,
    whose rounding is a few eps of the magnitudes summed, divided by the step.  (Where P is not
    smooth the rows smooth at the first step keep its central quotient; the built chains take
    the smaller step's one-sided quotient on every row.  The two are equal where those rows'
    entries are linear in the parameter, as on these models.)"""
    base = _solve(doc)
    metrics = [m for m in ("mean_queue", "loss", "mean_response", "mark_prob") if m in S.sensitivity_metrics(base)]
    got = base.sensitivities(metrics=metrics)
    ref = base.sensitivities(metrics=metrics, differences="chains")
    used = got.info["differences"]
    assert set(used.values()) <= {"rows", "chains"} and set(ref.info["differences"].values()) == {"chains"}
    assert all(used[p] == "rows" for p in (used if rows == "all" else rows)), used
    assert got.notes == ref.notes
    if doc is ROUND_COEFS:  # the case it stands for: a side adds states, whose rows the pass returns
        assert "reachable states change" in got.notes["aqm.min_th"]
    _assert_same_derivatives(base, got, ref, metrics)


def _assert_same_derivatives(base, got, ref, metrics):
    """got's derivatives (values and one-sided) equal ref's within the rounding of their
    difference quotients."""
    eps = np.finfo(float).eps
    for m in metrics:
        y = float(np.abs(got.adjoints[m]).max())
        for p, v in ref.values[m].items():
            # |P| rows sum to at most 2 (continuous: |G| over its exit rate, uniformised to 2);
            # the metrics' vectors are at most their scale
            scale = y * 2.0 * max(1.0, float(np.abs(np.asarray(base.chain.data)).max())) + S._scale(S._metric_vectors(
                base.chain, base.response_method if base.response_available else None, [m])[m])
            tol = 64 * eps * scale / got.steps[p] + 1e-12 * abs(v)
            pairs = [(got.values[m][p], v)] + list(zip(got.one_sided.get(m, {}).get(p, []),
                                                        ref.one_sided.get(m, {}).get(p, [])))
            for a, b in pairs:
                assert (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol, (m, p, a, b, tol)


@pytest.mark.parametrize("doc", [CONTINUOUS, SPACING], ids=["continuous", "spacing"])
def test_rows_with_an_odd_number_of_steps_equal_built_chains(doc):
    """Three step factors: the first pass takes the second step on the rows that need it, the
    third step is a pass of its own, whose jump test compares P's change on every row with the
    second step's effective sides (not with the redone rows' change alone, which made the
    thresholds' smooth rows look like a jump)."""
    base = _solve(doc)
    got = base.sensitivities(metrics=["mean_queue"], shrink=(1.0, 1e-2, 1e-4))
    ref = base.sensitivities(metrics=["mean_queue"], shrink=(1.0, 1e-2, 1e-4), differences="chains")
    assert all(got.info["differences"][p] == "rows" for p in ("aqm.min_th", "aqm.max_th")), got.info["differences"]
    assert got.notes == ref.notes
    assert not any("jumps" in note for note in got.notes.values()), got.notes
    _assert_same_derivatives(base, got, ref, ["mean_queue"])


def test_rows_when_the_first_step_loses_entries():
    """On the GEO RED chain of the papers (buffer 250, K = 4: 234,622 states) the thresholds'
    first step loses entries of the chain at both sides; those rows (and only those, with the
    ones whose entries kink) are generated again at the smaller step in the same pass, and the
    first step's distances on them feed the jump test, so the rows still answer in one pass per
    parameter, with the built chains' one-sided derivatives and notes."""
    doc = {"model": {"buffer": 250}, "source": {"kind": "bernoulli", "alpha": 0.5}, "service": {"mu": 0.5},
           "aqm": {"drop": "red", "min_th": 100, "max_th": 200, "p_max": 0.1, "w": 0.002},
           "grid": {"k": 4, "refine": "none"}}
    base = aqmchain.solve_stationary(aqmchain.model_from_dict(doc)[0], method="krylov", tol=1e-13)
    params = ["aqm.min_th", "aqm.max_th"]
    got = base.sensitivities(metrics=["mean_queue"], params=params)
    ref = base.sensitivities(metrics=["mean_queue"], params=params, differences="chains")
    assert got.info["differences"] == {p: "rows" for p in params}
    # one pass each; the rows redone at the smaller step are those near the threshold's grid point
    for p in params:
        assert len(got.info["row_passes"][p]) == 1 and 0 < got.info["row_passes"][p][0] < base.states // 100, got.info
    assert got.notes == ref.notes and all("not smooth" in got.notes[p] for p in params)
    y = float(np.abs(got.adjoints["mean_queue"]).max())
    for p in params:
        tol = 64 * np.finfo(float).eps * 2 * y / got.steps[p]  # the quotients' rounding (rows of P sum to 1)
        for a, b in zip(got.one_sided["mean_queue"][p], ref.one_sided["mean_queue"][p]):
            assert abs(a - b) <= tol + 1e-12 * abs(b), (p, a, b, tol)


def test_json_and_bad_input(tmp_path):
    base = _solve(SLOTTED)
    sens = base.sensitivities(metrics="loss", params=["aqm.p_max", "service.mu"])
    doc = json.loads(json.dumps(sens.to_dict(), allow_nan=False))
    assert set(doc["sensitivities"]["loss"]) == {"aqm.p_max", "service.mu"}
    with pytest.raises(aqmchain.OptionError, match="params"):
        base.sensitivities(params=["aqm.nonsense"])
    with pytest.raises(aqmchain.OptionError, match="metrics"):
        base.sensitivities(metrics=["littles_law_error"])
    for bad in ({"rel_step": 0.5}, {"method": "lu"}, {"max_iter": 0}, {"tol": -1.0}, {"shrink": []},
                {"differences": "matrices"}, {"nonsense": 1}):
        with pytest.raises(aqmchain.OptionError, match=next(iter(bad))):
            base.sensitivities(**bad)


def test_threshold_on_grid_point_is_one_sided():
    """min_th on a grid point: p(avg) has a kink there, so P is piecewise in min_th; the
    one-sided derivatives come with a note, and each matches a one-sided difference of full
    solves."""
    base = _solve(SLOTTED)
    sens = base.sensitivities(metrics=["mean_queue"], params=["aqm.min_th", "aqm.max_th"], move_breakpoints=False)
    assert "aqm.min_th" in sens.notes
    # RED's p jumps from p_max to 1 at max_th: on the right of max_th, P jumps (no derivative)
    assert "jumps" in sens.notes["aqm.max_th"] and math.isnan(sens.one_sided["mean_queue"]["aqm.max_th"][1])
    left, right = sens.one_sided["mean_queue"]["aqm.min_th"]
    fixed = _fixed(SLOTTED, base)
    H = 1e-5
    f0 = base.mean_queue
    fr = aqmchain.solve_stationary(aqmchain.model_from_dict(_moved(fixed, "aqm.min_th", H, False))[0], **SOLVE).mean_queue
    fl = aqmchain.solve_stationary(aqmchain.model_from_dict(_moved(fixed, "aqm.min_th", -H, False))[0], **SOLVE).mean_queue
    assert (fr - f0) / H == pytest.approx(right, rel=1e-3)
    assert (f0 - fl) / H == pytest.approx(left, rel=1e-3)
    assert abs(left - right) > 1e-3 * abs(right)


def test_cli_sensitivities(tmp_path):
    from cli_helpers import run_cli

    model = tmp_path / "m.toml"
    model.write_text('[model]\nbuffer = 12\n[source]\nkind = "bernoulli"\nalpha = 0.45\n[service]\nmu = 0.5\n'
                     '[aqm]\ndrop = "red"\nmin_th = 3\nmax_th = 9\np_max = 0.2\nw = 0.3\n[grid]\nk = 2\nrefine = "none"\n')
    out = tmp_path / "out.json"
    code, _, err = run_cli("solve", model, "--sensitivities", "--json", out, "-q")
    assert code == 0, err
    doc = json.loads(out.read_text())
    api = _solve(SLOTTED).sensitivities()
    assert doc["sensitivities"]["mean_queue"]["aqm.p_max"] == pytest.approx(
        api.values["mean_queue"]["aqm.p_max"], rel=1e-9)
    # only some metrics and parameters: the same numbers, nothing else computed
    code, text, err = run_cli("solve", model, "--sensitivity-metrics", "var_queue", "loss", "loss",
                              "--sensitivity-params", "aqm.w", "service.mu", "aqm.w", "--json", out)
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert set(doc["sensitivities"]) == {"var_queue", "loss"}
    assert all(set(row) == {"aqm.w", "service.mu"} for row in doc["sensitivities"].values())
    for m in ("var_queue", "loss"):
        for p in ("aqm.w", "service.mu"):
            assert doc["sensitivities"][m][p] == pytest.approx(api.values[m][p], rel=1e-9), (m, p)
    assert "var_queue" in text and "more metrics" not in text  # (a name given twice counts once)
    assert text.count("dloss/dp") == 1, text
    # a wrong name is refused naming the flag, the bound and the value
    code, _, err = run_cli("solve", model, "--sensitivity-metrics", "mean_queu", "-q")
    assert code == 2 and "--sensitivity-metrics" in err and "mean_queue" in err and "'mean_queu'" in err, err
    code, _, err = run_cli("solve", model, "--sensitivity-params", "aqm.pmax", "-q")
    assert code == 2 and "--sensitivity-params" in err and "aqm.p_max" in err and "'aqm.pmax'" in err, err


def test_tornado_plot(tmp_path):
    import matplotlib

    backend = matplotlib.get_backend()
    base = _solve(SLOTTED)
    sens = base.sensitivities(metrics=["mean_queue"])
    fig = aqmchain.plots.sensitivities(sens, "mean_queue")
    ax = fig.axes[0]
    finite = {p: e for p, e in sens.elasticities["mean_queue"].items() if math.isfinite(e)}
    widths = sorted((b.get_width() for b in ax.patches), key=abs, reverse=True)
    assert widths == sorted(finite.values(), key=abs, reverse=True)  # largest on top, one bar per parameter
    aqmchain.plots.save(fig, tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0
    assert matplotlib.get_backend() == backend  # the library picks no backend
    with pytest.raises(ValueError, match="mean_queue"):
        aqmchain.plots.sensitivities(sens, "loss")
