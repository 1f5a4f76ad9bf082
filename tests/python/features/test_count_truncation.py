"""The drop-spacing count truncated where its probability is negligible (docs/stateful-aqm.md).

The truncated chain's matrix equals a dense one written from the rules with the count
saturating at its cap (oracle.stateful_chain with count_trunc); its metrics are within the
bound the tail mass gives against the chain with the exact cap; the stationary solve grows
the cap until the mass at it is below aqm.count_tail; bad values of the new key are refused
by name; the class chains truncate the same way; the default automatic grid builds a chain
of a sane size.
"""

import copy

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import aqmchain
from conftest import BASE_DOC, construction_error, lumping_tolerances, model_of, solution_distance_bound
from oracle import stateful_chain

BERN = {"kind": "bernoulli", "alpha": 0.45}
MMBP = {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.25, 0.75]], "arrival": [0.2, 0.9]}
RED = {"drop": "red", "min_th": 2, "max_th": 6, "p_max": 0.3}


def _labels(chain):
    lab = aqmchain.state_labels(chain)
    zero = np.zeros(len(lab["level"]), dtype=int)
    cols = [lab["level"], lab["avg_index"], lab["modulator"], lab.get("count", zero), lab.get("pmax_index", zero),
            lab.get("maxth_index", zero), lab.get("phase", zero)]
    return list(zip(*(c.tolist() for c in cols)))


@pytest.mark.parametrize("spacing,source,extra", [
    ("count", BERN, {}),
    ("wait", MMBP, {"ecn": 0.3, "update": "per_arrival"}),
    ("count", BERN, {"adaptive": True, "interval": 3, "p_max_step": 0.1, "increment": 0.05, "buffer": 8, "k": 1}),
])
def test_truncated_matrix_equals_rules(spacing, source, extra):
    spec = {"buffer": 12, "mu": 0.55, "w": 0.3, "k": 2, "mapping": "split", "source": source, **RED,
            "spacing": spacing}
    spec.update(extra)
    exact = aqmchain.stateful_info(model_of(spec))["count_cap_exact"]
    cap = max(1, exact // 3)
    states, P_ref, info = stateful_chain({**spec, "count_trunc": cap})
    assert info["count_cap"] == cap < info["count_cap_exact"] == exact
    model = model_of(spec).with_count_cap(cap)
    lay = aqmchain.stateful_info(model)
    assert (lay["count_cap"], lay["count_cap_exact"], lay["count_truncated"]) == (cap, exact, True)
    chain = aqmchain.build_chain(model)
    assert _labels(chain) == states, "reachable state sets differ"
    P = aqmchain.transition_matrix(chain).toarray()
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=construction_error(P_ref))
    # a cap at or above the exact one is the exact chain
    same = aqmchain.build_chain(model_of(spec).with_count_cap(exact + 5))
    full = aqmchain.build_chain(model_of(spec))
    assert (aqmchain.transition_matrix(same) != aqmchain.transition_matrix(full)).nnz == 0


def test_per_point_caps_matrix_equals_rules():
    """Caps per avg point (Model.with_count_caps): a count entering point g saturates at its cap
    there, whatever the transition (an arrival not dropped, none, an overflow)."""
    spec = {"buffer": 12, "mu": 0.55, "w": 0.3, "k": 2, "mapping": "split", "source": MMBP, **RED,
            "spacing": "count", "ecn": 0.2}
    model = model_of(spec)
    exact = aqmchain.stateful_info(model)["count_cap_exact"]
    G = len(aqmchain.build_chain(model.with_count_cap(1)).grid)
    caps = [(1 + (3 * g) % 7) if g % 4 else 0 for g in range(G)]  # 0: the exact cap at that point
    states, P_ref, info = stateful_chain({**spec, "count_trunc_at": caps})
    m = model.with_count_caps(caps)
    lay = aqmchain.stateful_info(m)
    assert lay["count_cap_at"] == [c if c else exact for c in caps] and lay["count_truncated"]
    chain = aqmchain.build_chain(m)
    assert _labels(chain) == states, "reachable state sets differ"
    np.testing.assert_allclose(aqmchain.transition_matrix(chain).toarray(), P_ref, rtol=0,
                               atol=construction_error(P_ref))
    with pytest.raises(aqmchain.ModelError, match="one cap per avg grid point"):
        aqmchain.build_chain(model.with_count_caps(caps[:-1]))


def _poisson_span(P, pi, f):
    """max h - min h for h = Z f, the Poisson equation's solution (I - P) h = f - pi f of the chain P
    (h fixed by h[k] = 0 at the state of largest pi)."""
    P = sp.csr_matrix(P)
    n = P.shape[0]
    k = int(np.argmax(pi))
    keep = np.r_[0:k, k + 1:n]
    A = (sp.identity(n, format="csr") - P)[keep][:, keep]
    h = np.zeros(n)
    h[keep] = sla.spsolve(A.tocsc(), (f - pi @ f)[keep])
    return float(h.max() - h.min())


def test_truncated_metrics_within_the_tail_bound():
    """pi~ - pi = pi~ (P~ - P) Z: the rows of P~ and P differ only on transitions redirected
    into the cap, whose stationary flow is at most the tail mass eps, and each redirection
    moves probability between two states, so |pi~ f - pi f| <= eps (max Z f - min Z f) for any
    f (Z f computed on the exact chain: the truncated chain's states are states of the exact
    one, checked here), plus what the solves' residuals allow."""
    doc = copy.deepcopy(BASE_DOC)
    doc["aqm"].update(spacing="count", p_max=0.2, w=0.3)
    model = aqmchain.model_from_dict(doc)[0]
    exact = aqmchain.stateful_info(model)["count_cap_exact"]
    full = aqmchain.build_chain(model)
    rf = aqmchain.solve_stationary(full, method="direct")
    assert rf.count_tail_mass == 0.0 and rf.count_cap == exact
    P = aqmchain.transition_matrix(full)
    pi = np.asarray(rf.pi)
    lab_full = {s: i for i, s in enumerate(_labels(full))}
    queue = aqmchain.state_labels(full)["queue"].astype(float)
    checked = 0
    for cap in (exact // 8, exact // 4):
        tm = model.with_count_cap(cap)
        chain = aqmchain.build_chain(tm)
        assert all(s in lab_full for s in _labels(chain)), "a truncated state outside the exact chain"
        with pytest.raises(aqmchain.CountTruncationError) as e:  # a built chain cannot grow its cap
            aqmchain.solve_stationary(chain, method="direct")
        r = e.value.result
        eps = r.count_tail_mass
        assert r.count_cap == cap and eps > tm.aqm.count_tail and e.value.param == "aqm.count_tail"
        span = _poisson_span(P, pi, queue)
        # how far each solution may be from its chain's law, from its residual (l1 distance)
        solved = (solution_distance_bound(P, pi, rf.info.residual)
                  + solution_distance_bound(aqmchain.transition_matrix(chain), np.asarray(r.pi), r.info.residual))
        assert abs(r.mean_queue - rf.mean_queue) <= eps * span + solved * queue.max(), (cap, eps, span)
        # the same bound for the count's tail itself (f the indicator of count >= cap)
        ind = (aqmchain.state_labels(full)["count"] >= cap + 1).astype(float)
        exact_tail = float(rf.count_pmf[cap + 1:].sum())
        assert abs(eps - exact_tail) <= eps * _poisson_span(P, pi, ind) + solved
        checked += 1
    assert checked == 2


@pytest.fixture
def truncate_always(monkeypatch):
    """The small models here have exact-cap chains below aqmchain.stationary.EXACT_COUNT_STATES,
    which the solve would take as they are: truncate them anyway."""
    monkeypatch.setattr(aqmchain.stationary, "EXACT_COUNT_STATES", 0)


GROW_DOC = {"model": {"buffer": 20}, "source": {"kind": "bernoulli", "alpha": 0.5}, "service": {"mu": 0.45},
            "aqm": {"drop": "red", "min_th": 8, "max_th": 16, "p_max": 0.2, "w": 0.2, "spacing": "count"},
            "grid": {"k": 2, "refine": "none"}}


def test_cap_grows_until_the_tail_is_below_tolerance(truncate_always):
    model = aqmchain.model_from_dict(GROW_DOC)[0]
    info = aqmchain.stateful_info(model.with_count_cap(1))
    r = aqmchain.solve_stationary(model, method="direct")
    caps = r.count_caps
    tol = model.aqm.count_tail
    assert len(caps) >= 2 and caps[0]["tail_mass"] > tol >= caps[-1]["tail_mass"] == r.count_tail_mass
    # per point: the final caps are the start caps grown by powers of two (or the exact cap)
    start = np.asarray(info["count_start_at"])
    final = np.asarray(r.chain.model.aqm.count_trunc_at)
    exact = info["count_cap_exact"]
    ratio = final / start
    assert np.all((final == exact) | (np.isin(ratio, [1, 2, 4, 8, 16, 32, 64]))) and np.any(final > start)
    assert r.count_cap == final.max() and len(r.count_pmf) == r.count_cap + 2
    d = r.to_dict()
    assert d["count_tail_mass"] == r.count_tail_mass and d["count_cap"] == r.count_cap
    assert d["count_caps"] == caps and "count cap / tail mass" in r.summary()
    # against the exact cap: within the bound the tail mass gives (and the solves' round-off)
    full = aqmchain.build_chain(model.with_count_cap(0))
    rf = aqmchain.solve_stationary(full, method="direct")
    P = aqmchain.transition_matrix(full)
    queue = aqmchain.state_labels(full)["queue"].astype(float)
    span = _poisson_span(P, np.asarray(rf.pi), queue)
    solved = (solution_distance_bound(P, np.asarray(rf.pi), rf.info.residual)
              + solution_distance_bound(aqmchain.transition_matrix(r.chain), np.asarray(r.pi), r.info.residual))
    assert abs(r.mean_queue - rf.mean_queue) <= r.count_tail_mass * span + solved * queue.max()
    assert r.states < full.n


def test_rounds_whose_caps_grow_are_solved_loosely_and_the_caps_taken_at_tol(truncate_always):
    """The rounds that only decide where the caps grow are solved to 1e-8 (the first) and to
    1e-4 times the previous tail; the round that ends the loop is solved to tol.  The caps and
    the answer are the direct method's, whose every round is exact."""
    model = aqmchain.model_from_dict(GROW_DOC)[0]
    kr = aqmchain.solve_stationary(model, method="krylov")
    di = aqmchain.solve_stationary(model, method="direct")
    caps = kr.count_caps
    tol = kr.info.tol
    assert len(caps) >= 2 and caps[0]["tol"] == aqmchain.stationary._ROUND_TOL_FIRST
    assert caps[1]["tol"] == pytest.approx(aqmchain.stationary._ROUND_TOL_FACTOR * caps[0]["tail_mass"])
    assert caps[-1]["tol"] == tol and kr.info.residual <= tol
    assert np.array_equal(kr.chain.model.aqm.count_trunc_at, di.chain.model.aqm.count_trunc_at)
    P = aqmchain.transition_matrix(kr.chain)
    bound = solution_distance_bound(P, np.asarray(di.pi), kr.info.residual, di.info.residual)
    assert np.abs(np.asarray(kr.pi) - np.asarray(di.pi)).sum() <= bound


def _solve_capped(chain, **kw):
    """The result on a chain built with small caps (its tail mass is above count_tail: the
    solve raises and carries the result)."""
    with pytest.raises(aqmchain.CountTruncationError) as e:
        aqmchain.solve_stationary(chain, method="direct", **kw)
    return e.value.result


@pytest.mark.parametrize("kind", ["approx", "exact", "window"])
def test_class_chain_truncates_as_the_single_chain(kind):
    """Two classes that differ only in their name: the class chain with the same caps per
    avg point lumps onto the single-class truncated chain (the same law of the count, the
    same tail mass, the same metrics)."""
    doc = copy.deepcopy(GROW_DOC)
    doc["model"]["buffer"] = 5 if kind == "exact" else 8
    doc["aqm"].update(min_th=1, max_th=4, p_max=0.1, w=0.3)
    doc["grid"]["k"] = 1
    single = aqmchain.model_from_dict(doc)[0]
    G = len(aqmchain.build_chain(single.with_count_cap(1)).grid)
    exact = aqmchain.stateful_info(single)["count_cap_exact"]
    caps = [2 + (g % 3) for g in range(G)]
    assert max(caps) < exact
    doc["class"] = [{"name": "a", "share": 0.4}, {"name": "b", "share": 0.6}]
    classes = aqmchain.model_from_dict(doc)[0]
    plain = _solve_capped(aqmchain.build_chain(single.with_count_caps(caps)))
    r = _solve_capped(aqmchain.build_chain(classes.with_count_caps(caps), classes=kind))
    assert r.class_chain == kind and r.states > plain.states
    assert np.asarray(aqmchain.state_labels(r.chain)["count"]).max() == max(caps) + 1
    assert r.count_tail_mass == pytest.approx(plain.count_tail_mass, rel=1e-9) and plain.count_tail_mass > 1e-6
    # within what the two solves' residuals allow the lumped vector to move (and the metrics with it)
    tol = lumping_tolerances(plain, r)
    for k in ("loss", "loss_aqm", "mean_queue", "var_queue", "throughput", "mean_count"):
        assert abs(getattr(r, k) - getattr(plain, k)) <= tol[k], k
    np.testing.assert_allclose(r.count_pmf, plain.count_pmf, atol=1e-11)


def test_default_grid_with_spacing_fits_its_budget(truncate_always):
    """A small analogue of RED 100 / 200 / 0.1 with count spacing on the default automatic grid,
    its state budget scaled down with it: the grid coarsens its base step for the count, and the
    truncated chain is far below the exact cap's on the same grid."""
    doc = {"model": {"buffer": 25}, "source": {"kind": "bernoulli", "alpha": 0.5}, "service": {"mu": 0.45},
           "aqm": {"drop": "red", "min_th": 10, "max_th": 20, "p_max": 0.1, "w": 0.02, "spacing": "count"},
           "grid": {"state_budget": 30000}}
    model = aqmchain.model_from_dict(doc)[0]
    r = aqmchain.solve_stationary(model)
    assert "coarsened the base step" in r.grid["note"] and r.grid["min_step"] < 1.0
    assert r.count_tail_mass <= model.aqm.count_tail
    exact = aqmchain.build_chain(r.chain.model.with_count_cap(0), max_states=10**7)
    assert r.states < 0.75 * exact.n
    # the estimate the grid was chosen by holds the chain within a factor of two
    assert r.states <= 2 * r.grid["estimated_states"]


def test_the_first_round_starts_from_the_grids_presolve(truncate_always):
    """On an automatic grid the first round of auto and multilevel starts from the pre-solve's
    answer (the same model on the uniform grid with smaller caps), carried by the labels: every pre-solve state lands on a
    state of the first round (its caps are at least the pre-solve's), avg's mass on the nearest
    refined point.  The answer is the one solved from no start, to the residuals."""
    doc = {"model": {"buffer": 25}, "source": {"kind": "bernoulli", "alpha": 0.5}, "service": {"mu": 0.45},
           "aqm": {"drop": "red", "min_th": 10, "max_th": 20, "p_max": 0.1, "w": 0.02, "spacing": "count"},
           "grid": {"state_budget": 30000}}
    model = aqmchain.model_from_dict(doc)[0]
    refined, report, pre = aqmchain.stationary._refine_grid(model, [model], None, {}, keep_presolve=True)
    assert report["refined"] and pre is not None
    first = aqmchain.build_chain(refined.with_count_caps(
        aqmchain.stateful_info(refined.with_count_cap(1))["count_start_at"]))
    x0, info = pre.x0(first)
    # sums of the same nonnegative terms in other orders: each within (terms) eps of the sum,
    # relatively (the recursive summation bound), so two of them within twice that
    rel = 2.0 * (pre.pi.size + 2) * np.finfo(float).eps
    assert info["matched_mass"] == pytest.approx(pre.pi.sum(), rel=rel, abs=0) and np.all(x0 >= 0)
    # avg's marginal: each pre-solve point's mass on the refined point nearest to it
    grid = np.asarray(first.grid)
    nearest = np.abs(pre.grid[:, None] - grid[None, :]).argmin(axis=1)
    old = np.bincount(pre.labels["avg_index"], weights=pre.pi, minlength=len(pre.grid))
    want = np.bincount(nearest, weights=old, minlength=len(grid)) / old.sum()
    got = np.bincount(np.asarray(first.grid_index), weights=x0, minlength=len(grid))
    np.testing.assert_allclose(got, want, rtol=rel, atol=0)

    warm = aqmchain.solve_stationary(model, method="multilevel", response="none")
    cold = aqmchain.solve_stationary(refined, method="multilevel", response="none")
    assert [c["start"] for c in warm.count_caps] == ["pre-solve"] + ["previous caps"] * (len(warm.count_caps) - 1)
    assert cold.count_caps[0]["start"] == "none" and len(warm.count_caps) >= 2
    assert np.array_equal(warm.chain.model.aqm.count_trunc_at, cold.chain.model.aqm.count_trunc_at)
    P = aqmchain.transition_matrix(warm.chain)
    bound = solution_distance_bound(P, np.asarray(cold.pi), warm.info.residual, cold.info.residual)
    assert np.abs(np.asarray(warm.pi) - np.asarray(cold.pi)).sum() <= bound
    # krylov starts cold (a start does not shorten GMRES's slow first phase)
    kr = aqmchain.solve_stationary(model, method="krylov", response="none")
    assert kr.count_caps[0]["start"] == "none"


@pytest.mark.parametrize("kind", ["approx", "exact"])
def test_class_chains_start_from_the_presolve_only_when_it_has_their_components(truncate_always, kind):
    """The pre-solve builds the approximate class chain: its answer starts the approximate
    chain's first round, while the exact class chain (other components) starts cold."""
    doc = copy.deepcopy(GROW_DOC)
    doc["model"]["buffer"] = 5
    doc["aqm"].update(min_th=1, max_th=4, p_max=0.1, w=0.3)
    doc["grid"] = {"refine": "auto", "state_budget": 20000}
    doc["class"] = [{"name": "a", "share": 0.4}, {"name": "b", "share": 0.6}]
    model = aqmchain.model_from_dict(doc)[0]
    r = aqmchain.solve_stationary(model, classes=kind, response="none")
    assert r.grid["refined"] and r.class_chain == kind
    assert r.count_caps[0]["start"] == ("pre-solve" if kind == "approx" else "none")
    assert r.count_tail_mass <= model.aqm.count_tail


def test_an_x0_starts_the_first_round_only(truncate_always):
    """An x0 in the options is a vector on the first caps' states: it starts the first round,
    and the rounds after it start from the previous caps' answer (they used to be handed the
    same x0 and refuse its length).  The answer is the cold one, to the residuals."""
    model = aqmchain.model_from_dict(GROW_DOC)[0]
    first = aqmchain.build_chain(model.with_count_caps(
        aqmchain.stateful_info(model.with_count_cap(1))["count_start_at"]))
    cold = aqmchain.solve_stationary(model, method="krylov")
    x0 = np.asarray(_solve_capped(first).pi)  # its answer on the first caps (their tail is above count_tail)
    r = aqmchain.solve_stationary(model, method="krylov", x0=x0)
    assert [c["start"] for c in r.count_caps] == ["x0"] + ["previous caps"] * (len(r.count_caps) - 1)
    assert len(r.count_caps) >= 2 and r.count_caps[0]["states"] == first.n
    assert np.array_equal(r.chain.model.aqm.count_trunc_at, cold.chain.model.aqm.count_trunc_at)
    P = aqmchain.transition_matrix(r.chain)
    bound = solution_distance_bound(P, np.asarray(cold.pi), r.info.residual, cold.info.residual)
    assert np.abs(np.asarray(r.pi) - np.asarray(cold.pi)).sum() <= bound


def test_adaptive_count_model_whose_exact_cap_exceeds_count_max_gets_its_automatic_grid():
    """The automatic grid reads adaptive RED's p_max grid from the model with its count
    truncated: the exact cap on the model's grid (3999 here) above aqm.count_max is no reason to
    refuse, since the stationary solve truncates the count anyway.  Built as it is, the model
    is still refused by name."""
    model = aqmchain.Model(buffer=20, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.45),
                           aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(5, 15, 0.1), w=0.2, adaptive=True,
                                            interval=200, p_max_step=0.01, spacing="count", count_max=1000),
                           grid=aqmchain.GridSpec(refine="auto"))
    refined, report = aqmchain.refine_grid(model)
    assert report["refined"] and report["points"] > 21 and report["presolve_states"] > 0
    assert aqmchain.stateful_info(refined.with_count_cap(1))["count_cap_exact"] > model.aqm.count_max
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.build_chain(refined)
    assert e.value.param == "aqm.count_max"


def test_cap_at_count_max_with_tail_above_raises_with_the_result():
    doc = copy.deepcopy(GROW_DOC)
    doc["aqm"]["count_max"] = 20
    model = aqmchain.model_from_dict(doc)[0]
    assert aqmchain.stateful_info(model.with_count_cap(1))["count_cap_exact"] > 20
    with pytest.raises(aqmchain.CountTruncationError, match="aqm.count_max") as e:
        aqmchain.solve_stationary(model, method="direct")
    assert e.value.param == "aqm.count_max" and isinstance(e.value, aqmchain.NonConvergenceError)
    r = e.value.result
    assert r.count_cap == 20 and r.count_tail_mass > model.aqm.count_tail
    # the exact cap above count_max: refused when built outside the stationary solve
    with pytest.raises(aqmchain.ModelError) as e2:
        aqmchain.build_chain(model)
    assert e2.value.param == "aqm.count_max"


def test_small_chain_is_solved_on_the_exact_cap():
    model = aqmchain.model_from_dict(GROW_DOC)[0]
    r = aqmchain.solve_stationary(model)
    assert len(r.count_caps) == 1 and not r.count_truncated and r.count_tail_mass == 0.0
    assert r.count_cap == r.count_cap_exact and r.states <= aqmchain.stationary.EXACT_COUNT_STATES


def test_count_tail_zero_solves_the_exact_cap():
    doc = copy.deepcopy(BASE_DOC)
    doc["aqm"].update(spacing="wait", p_max=0.2, count_tail=0.0)
    model = aqmchain.model_from_dict(doc)[0]
    r = aqmchain.solve_stationary(model)
    assert r.count_cap == r.count_cap_exact == aqmchain.stateful_info(model)["count_cap_exact"]
    assert r.count_tail_mass == 0.0 and len(r.count_caps) == 1


@pytest.mark.parametrize("value,kind", [(-1e-12, "in [0, 0.001]"), (0.5, "in [0, 0.001]"),
                                        (float("nan"), "finite"), ("small", None)])
def test_bad_count_tail(value, kind):
    doc = copy.deepcopy(BASE_DOC)
    doc["aqm"].update(spacing="count", count_tail=value)
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "aqm.count_tail"
    if kind is not None:
        assert kind in str(e.value) and "aqm.count_tail" in str(e.value)


def test_a_multilevel_that_failed_on_a_round_is_not_tried_on_the_rounds_after_it(truncate_always, monkeypatch):
    """auto on the cap rounds: once a round's multilevel attempt failed (on the large count
    chains its coarsening stalls), the rounds after it take the method that solved that round.
    The first round plays it (these small chains never stall): krylov solves it and a failed
    multilevel attempt is put in front of its account; the later rounds are asked for krylov,
    say so, and the answer is the direct method's."""
    model = aqmchain.model_from_dict(GROW_DOC)[0]
    real = aqmchain.stationary._core.solve_stationary
    asked = []

    class FailedMultilevelFirst:
        def __init__(self, raw):
            self._raw = raw

        def __getattr__(self, name):
            return getattr(self._raw, name)

        @property
        def methods_tried(self):
            return [{"method": "multilevel", "status": "not_computed", "iterations": 0, "seconds": 0.0,
                     "why": "coarsening stalled (injected)"}] + list(self._raw.methods_tried)

    def solve(chain, o):
        asked.append(str(o.method))
        if len(asked) > 1:
            return real(chain, o)
        o.method = "krylov"
        raw = real(chain, o)
        o.method = "auto"
        return FailedMultilevelFirst(raw)

    monkeypatch.setattr(aqmchain.stationary._core, "solve_stationary", solve)
    r = aqmchain.solve_stationary(model, method="auto")
    monkeypatch.setattr(aqmchain.stationary._core, "solve_stationary", real)
    caps = r.count_caps
    assert len(caps) >= 2 and asked[0] == "auto" and caps[0]["method"] == "krylov"
    assert asked[1:] == ["krylov"] * (len(asked) - 1)  # every later solve, the final re-solve at tol included
    assert "multilevel_skipped" not in caps[0]
    assert all(c["multilevel_skipped"] == "coarsening stalled (injected)" and c["method"] == "krylov"
               for c in caps[1:])
    assert r.info.requested == "auto" and "did not try multilevel on the count's cap round" in r.info.note
    di = aqmchain.solve_stationary(model, method="direct")
    assert np.array_equal(r.chain.model.aqm.count_trunc_at, di.chain.model.aqm.count_trunc_at)
    P = aqmchain.transition_matrix(r.chain)
    bound = solution_distance_bound(P, np.asarray(di.pi), r.info.residual, di.info.residual)
    assert np.abs(np.asarray(r.pi) - np.asarray(di.pi)).sum() <= bound


def test_caps_grow_x8_after_a_round_solved_to_tol_whose_tail_is_small(truncate_always, monkeypatch):
    """The caps double after a loose round and grow x8 after one solved to tol whose tail is
    below _LOOSE_ROUNDS_TAIL (or after any tail below _FAST_GROWTH_TAIL).  The thresholds are
    moved so that this small model meets both kinds."""
    st = aqmchain.stationary
    monkeypatch.setattr(st, "_FAST_GROWTH_TAIL", 1e-9)
    monkeypatch.setattr(st, "_LOOSE_ROUNDS_TAIL", 3e-3)
    rounds = []
    build = st.build_chain

    def recording(model, *args, **kw):
        chain = build(model, *args, **kw)
        rounds.append(np.asarray(model.aqm.count_trunc_at, dtype=np.int64))
        return chain

    monkeypatch.setattr(st, "build_chain", recording)
    doc = {"model": {"buffer": 20}, "source": {"kind": "bernoulli", "alpha": 0.5}, "service": {"mu": 0.45},
           "aqm": {"drop": "red", "min_th": 8, "max_th": 16, "p_max": 0.05, "w": 0.2, "spacing": "count"},
           "grid": {"k": 2, "refine": "none"}}
    model = aqmchain.model_from_dict(doc)[0]
    r = aqmchain.solve_stationary(model, method="krylov")
    caps, tol = r.count_caps, r.info.tol
    exact = aqmchain.stateful_info(model.with_count_cap(1))["count_cap_exact"]
    assert len(rounds) == len(caps) >= 3
    factors = []
    for i in range(len(caps) - 1):
        before, after = rounds[i], rounds[i + 1]
        assert np.any(after > before)
        grown = (after > before) & (after < exact) & (after < model.aqm.count_max)  # not clipped
        tail, accurate = caps[i]["tail_mass"], caps[i]["tol"] == tol
        want = 8 if tail <= st._FAST_GROWTH_TAIL or (accurate and tail <= st._LOOSE_ROUNDS_TAIL) else 2
        assert np.all(after[grown] == want * before[grown])
        assert np.all(after[after > before] <= want * before[after > before])
        if grown.any():
            factors.append((want, accurate))
    assert (2, False) in factors and (8, True) in factors  # a loose round doubled, one at tol grew x8
    assert r.info.residual <= tol and r.count_tail_mass <= model.aqm.count_tail
