"""Warm starts: solve_stationary(..., warm=previous) against cold solves of the same model
(within the distance the two residuals guarantee), the starting vector carried by state labels
when states are added or removed or the grid moves, the automatic grid's reuse, bad input, and
the warm sweeps and searches against cold ones."""

import re

import numpy as np
import pytest

import aqmchain
from conftest import BASE_DOC, solution_distance_bound

#: RED on a Bernoulli source, 2,000-odd states: big enough for GMRES to need several iterations
DOC = {**BASE_DOC, "model": {"buffer": 60}, "aqm": {**BASE_DOC["aqm"], "min_th": 15, "max_th": 45, "w": 0.05},
       "grid": {"k": 4, "refine": "none"}}
KRYLOV = {"method": "krylov", "tol": 1e-12}


def model(**changes):
    m = aqmchain.model_from_dict(DOC)[0]
    return m.replace(**changes) if changes else m


def assert_same_law(a, b):
    """Two converged solves of one chain: their vectors within the distance their residuals allow,
    the mean queue within N times it (q <= N), the loss within (1 + loss) / arrival rate times it."""
    P = a.transition_matrix()
    if a.chain.time == "continuous":  # the residuals are those of the uniformised P = I + G / Lambda
        import scipy.sparse as sp

        P = sp.identity(P.shape[0], format="csr") + sp.csr_matrix(P) / a.info.extra["uniformization_rate"]
    d = solution_distance_bound(P, a.pi, a.info.residual, b.info.residual)
    assert np.abs(np.asarray(a.pi) - np.asarray(b.pi)).sum() <= d
    assert abs(a.mean_queue - b.mean_queue) <= a.model.buffer * d
    assert abs(a.loss - b.loss) <= (1 + a.loss) * d / a.arrival_rate
    return d


def test_warm_after_a_parameter_change_equals_cold_and_reports_what_it_reused():
    prev = aqmchain.solve_stationary(model(), **KRYLOV)
    assert prev.warm is None  # a cold solve
    m = model(aqm={"p_max": 0.101})
    cold = aqmchain.solve_stationary(m, **KRYLOV)
    warm = aqmchain.solve_stationary(m, warm=prev, **KRYLOV)
    assert warm.info.status == "converged" and warm.info.residual <= 1e-12
    assert_same_law(cold, warm)
    assert warm.states == cold.states
    w = warm.warm
    assert w["x0"] is True and w["grid"] == "explicit"
    # p_max changes no transition's support: every state is matched, all the previous mass carried
    assert w["matched_states"] == warm.states == w["previous_states"]
    assert w["matched_mass"] == pytest.approx(1.0, abs=1e-12)
    assert w["previous_iterations"] == prev.info.iterations
    assert warm.to_dict()["solver"]["warm"] == w
    assert re.search(rf"warm start +from {prev.states} states \({prev.states} matched", warm.summary())
    assert "warm start" not in cold.summary()


def test_warm_from_the_solution_itself_needs_fewer_iterations():
    # the same model again: the starting vector already meets the tolerance, so GMRES has
    # nothing (or next to nothing) left to do, where the cold solve iterates
    m = model()
    cold = aqmchain.solve_stationary(m, **KRYLOV)
    assert cold.info.iterations >= 3
    warm = aqmchain.solve_stationary(m, warm=cold, **KRYLOV)
    assert warm.info.iterations < cold.info.iterations
    assert warm.info.residual <= 1e-12
    assert_same_law(cold, warm)


@pytest.mark.parametrize("changes", [{"model": {"buffer": 70}}, {"model": {"buffer": 50}},
                                     {"grid": {"k": 3}}, {"aqm": {"w": 0.2}}])
def test_warm_when_states_are_added_or_removed(changes):
    prev = aqmchain.solve_stationary(model(), **KRYLOV)
    m = aqmchain.model_from_dict({**DOC, **{k: {**DOC[k], **v} for k, v in changes.items()}})[0]
    cold = aqmchain.solve_stationary(m, **KRYLOV)
    warm = aqmchain.solve_stationary(m, warm=prev, **KRYLOV)
    assert warm.states == cold.states and warm.info.residual <= 1e-12
    assert_same_law(cold, warm)
    w = warm.warm
    assert w["x0"] is True and 0 < w["matched_states"] <= warm.states
    assert 0.0 < w["matched_mass"] <= 1.0 + 1e-12
    if "model" in changes:  # a state space that grew or shrank: some states on one side only
        assert w["matched_states"] < max(warm.states, prev.states)


def test_warm_on_a_built_chain_and_from_a_warm_start_object():
    prev = aqmchain.solve_stationary(model(), **KRYLOV)
    chain = aqmchain.build_chain(model(service={"mu": 0.505}))
    ws = aqmchain.WarmStart.of(prev)
    warm = aqmchain.solve_stationary(chain, warm=ws, **KRYLOV)
    cold = aqmchain.solve_stationary(chain, **KRYLOV)
    assert_same_law(cold, warm)
    assert warm.warm["x0"] is True


def test_bad_warm_input_names_the_parameter():
    prev = aqmchain.solve_stationary(model(), **KRYLOV)
    m = model(aqm={"p_max": 0.11})
    with pytest.raises(aqmchain.OptionError, match="'warm'.*StationaryResult.*got 'previous'"):
        aqmchain.solve_stationary(m, warm="previous")
    # a result of another kind of model: continuous time
    ctmc = aqmchain.load_model(aqmchain_root() / "examples" / "red_ctmc.toml")
    other = aqmchain.solve_stationary(ctmc)
    with pytest.raises(aqmchain.OptionError, match="'warm'.*same kind of model.*discrete-time.*continuous-time"):
        aqmchain.solve_stationary(m, warm=other)
    # ... and another state space (REDwM's second variable)
    redwm = m.replace(aqm={"filter": "redwm", "triple": [0.05, 0.0, 0.0]})
    with pytest.raises(aqmchain.OptionError, match="'warm'.*same kind of model"):
        aqmchain.solve_stationary(redwm, warm=prev)
    with pytest.raises(aqmchain.OptionError, match="'warm'.*x0"):
        aqmchain.solve_stationary(m, warm=prev, x0=np.ones(prev.states))
    with pytest.raises(aqmchain.OptionError, match="'warm_grid'.*auto, same, refine.*'never'"):
        aqmchain.solve_stationary(m, warm=prev, warm_grid="never")
    import pickle

    lost = pickle.loads(pickle.dumps(prev))  # the chain stays behind
    with pytest.raises(aqmchain.OptionError, match="'warm'.*chain"):
        aqmchain.solve_stationary(m, warm=lost)


def aqmchain_root():
    from conftest import ROOT

    return ROOT


def test_automatic_grid_reused_only_when_asked_or_unchanged():
    auto = aqmchain.model_from_dict({**DOC, "grid": {"k": 2, "refine": "auto"}})[0]
    prev = aqmchain.solve_stationary(auto, **KRYLOV)
    assert prev.grid["refined"]
    # the same model (other solver options): the pre-solve would find the same grid
    again = aqmchain.solve_stationary(auto, warm=prev, method="krylov", tol=1e-13)
    assert again.warm["grid"] == "reused" and again.grid["reused"]
    assert "grid_presolve" not in again.info.seconds
    assert np.array_equal(again.avg_grid, prev.avg_grid)
    # another model: refined again by default (the cold answer) ...
    m = auto.replace(aqm={"p_max": 0.101})
    refined = aqmchain.solve_stationary(m, warm=prev, **KRYLOV)
    assert refined.warm["grid"] == "refined"
    cold = aqmchain.solve_stationary(m, **KRYLOV)
    assert np.array_equal(refined.avg_grid, cold.avg_grid)
    assert_same_law(cold, refined)
    # ... or on the previous grid when asked: the answer of the model on that grid
    same = aqmchain.solve_stationary(m, warm=prev, warm_grid="same", **KRYLOV)
    assert same.warm["grid"] == "reused" and np.array_equal(same.avg_grid, prev.avg_grid)
    on_prev = aqmchain.solve_stationary(m.with_grid(prev.model.grid), **KRYLOV)
    assert_same_law(on_prev, same)


def test_warm_sweep_equals_cold_sweep():
    m = model()
    grid = {"aqm.p_max": [0.1, 0.102, 0.104], "service.mu": [0.5, 0.51]}
    warm = aqmchain.sweep(m, grid, solver=KRYLOV, scheduler="sync")
    cold = aqmchain.sweep(m, grid, solver=KRYLOV, scheduler="sync", warm=False)
    assert (warm["status"] == "ok").all() and (cold["status"] == "ok").all()
    assert list(warm["warm_started"]) == [False] + [True] * 5  # one run in this process
    assert not cold["warm_started"].any()
    for (_, a), (_, b) in zip(cold.iterrows(), warm.iterrows()):
        assert_same_law(a["result"], b["result"])
    with pytest.raises(aqmchain.ModelError, match="'warm'"):
        aqmchain.sweep(m, grid, scheduler="sync", warm="yes")


def test_warm_sweep_runs_on_workers_cut_into_runs():
    from importlib import import_module

    runs = import_module("aqmchain.sweep")._runs
    assert runs(10, "sync", None, True) == [range(0, 10)]
    assert runs(3, "local", 2, False) == [range(0, 1), range(1, 2), range(2, 3)]
    cut = runs(10, "local", 2, True)  # 2 runs per worker, consecutive, covering every point once
    assert len(cut) == 4 and [i for r in cut for i in r] == list(range(10))
    long = runs(100, "local", 2, True)  # runs of at most 10 points
    assert len(long) == 10 and [i for r in long for i in r] == list(range(100))


def test_warm_search_evaluates_the_same_values_as_a_cold_one():
    m = model()
    kw = dict(params=["aqm.p_max"], objective="mean_queue", bounds={"aqm.p_max": (0.05, 0.5)}, max_evals=8,
              solver=KRYLOV)
    warm = aqmchain.optimize(m, **kw)
    cold = aqmchain.optimize(m, warm=False, **kw)
    assert [t["x"] for t in warm.trace] == [t["x"] for t in cold.trace]
    for a, b in zip(warm.trace, cold.trace):
        # both solves converged (residual <= tol): the mean queue within N times the distance
        # the two residuals allow
        ref = aqmchain.solve_stationary(m.replace(aqm={"p_max": a["x"]["aqm.p_max"]}), **KRYLOV)
        d = solution_distance_bound(ref.transition_matrix(), ref.pi, KRYLOV["tol"], KRYLOV["tol"])
        assert abs(a["value"] - b["value"]) <= m.buffer * d
    assert warm.x == cold.x


def test_warm_on_a_nearly_decomposable_chain_weighs_krylov_coarse_space_from_the_start():
    # adaptive RED: p_max moves every 5000 slots, krylov adds a coarse correction over its
    # values whose weights a cold solve takes from the chains of its p_max slices (solved
    # first: `coarse_shape_work`, here about 5 steps' worth) and a warm solve from the
    # previous solution, for free (measured after service.mu + 0.1 %: 14 iterations cold plus
    # the slice chains, 14 warm; after + 1 %: 14 plus the slice chains, 19 warm)
    m = aqmchain.Model(buffer=20, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.5),
                       aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(5, 15, 0.1), w=0.07, adaptive=True,
                                        interval=5000, p_max_step=0.01), grid=aqmchain.GridSpec(k=1))
    prev = aqmchain.solve_stationary(m, **KRYLOV)
    m2 = m.replace(service={"mu": 0.5005})
    cold = aqmchain.solve_stationary(m2, **KRYLOV)
    warm = aqmchain.solve_stationary(m2, warm=prev, **KRYLOV)
    assert cold.info.extra["coarse_groups"] > 1 and warm.info.extra["coarse_from_x0"] == 1.0
    assert warm.info.iterations < cold.info.iterations + cold.info.extra["coarse_shape_work"]
    assert_same_law(cold, warm)


# ------------------------------------------------------------------ recycling (krylov_recycle)

#: krylov keeping 8 directions of its Krylov space for the next solve
RECYCLE = {**KRYLOV, "krylov_recycle": 8}


def _ctmc_model(**changes):
    m = aqmchain.load_model(aqmchain_root() / "examples" / "red_ctmc.toml")
    return m.replace(**changes) if changes else m


@pytest.mark.parametrize("kind", ["slotted p_max", "slotted mu", "continuous mu"])
def test_recycling_on_the_same_states_keeps_the_answer_and_says_so(kind):
    base = _ctmc_model() if kind.startswith("continuous") else model()
    change = {"aqm": {"p_max": 0.101}} if kind.endswith("p_max") else {"service": {"mu": base.service.mu * 1.01}}
    prev = aqmchain.solve_stationary(base, **RECYCLE)
    ws = prev._warm_state
    assert ws is not None and 0 < ws.vectors <= RECYCLE["krylov_recycle"]
    assert ws.states == prev.states and ws.bytes == 8 * ws.vectors * prev.states
    m = base.replace(**change)
    cold = aqmchain.solve_stationary(m, **KRYLOV)
    warm = aqmchain.solve_stationary(m, warm=prev, **RECYCLE)
    assert warm.states == cold.states == prev.states
    assert warm.info.residual <= 1e-12 and cold.info.residual <= 1e-12
    assert_same_law(cold, warm)
    w = warm.warm
    # a parameter that keeps every transition's support: the same states, recycled
    assert w["reuse"] == "recycled" and 0 < w["recycled_vectors"] <= ws.vectors
    assert warm.info.extra["warm_recycled_vectors"] == w["recycled_vectors"]
    assert "solve_recycle" in warm.info.seconds and "reuse recycled" in warm.summary()
    assert warm.to_dict()["solver"]["warm"] == w


def test_the_recycled_space_changes_the_iterations_not_the_answer():
    # the same warm start (x0) with and without the recycled directions: both meet the same
    # stopping test, so they agree within the distance the residuals allow
    prev = aqmchain.solve_stationary(model(), **RECYCLE)
    m = model(aqm={"p_max": 0.102})
    with_state = aqmchain.solve_stationary(m, warm=prev, **RECYCLE)
    bare = aqmchain.WarmStart.of(prev)
    bare.state = None
    without = aqmchain.solve_stationary(m, warm=bare, **KRYLOV)
    assert with_state.warm["reuse"] == "recycled" and without.warm["reuse"].startswith("none")
    assert "warm_recycled_vectors" not in without.info.extra
    assert_same_law(with_state, without)
    assert with_state.info.iterations != without.info.iterations or with_state.info.matvecs != without.info.matvecs
    # a chain of warm re-solves keeps recycling (the space passes on) and keeps the answer
    m3 = model(aqm={"p_max": 0.103})
    third = aqmchain.solve_stationary(m3, warm=with_state, **RECYCLE)
    assert third.warm["reuse"] == "recycled"
    assert_same_law(aqmchain.solve_stationary(m3, **KRYLOV), third)


def test_recycling_refused_when_the_states_change_and_off_by_default():
    prev = aqmchain.solve_stationary(model(), **RECYCLE)
    m = model(model={"buffer": 61})  # one level more: other states
    warm = aqmchain.solve_stationary(m, warm=prev, **RECYCLE)
    assert warm.warm["reuse"] == "refused (the states changed)" and "recycled_vectors" not in warm.warm
    assert "warm_recycled_vectors" not in warm.info.extra and warm.info.residual <= 1e-12
    assert warm.warm["x0"] is True  # the vector is still carried by the labels
    assert_same_law(aqmchain.solve_stationary(m, **KRYLOV), warm)
    # by default a solve keeps nothing; a warm start then reuses the vector only
    off = aqmchain.solve_stationary(model(), **KRYLOV)
    assert off._warm_state is None
    again = aqmchain.solve_stationary(model(aqm={"p_max": 0.101}), warm=off, **KRYLOV)
    assert again.warm["reuse"].startswith("none") and again.warm["x0"] is True
    assert aqmchain.solve_stationary(model(), method="direct", krylov_recycle=8)._warm_state is None


def test_multilevel_warm_from_a_recycling_krylov_result_takes_the_vector_only():
    prev = aqmchain.solve_stationary(model(), **RECYCLE)
    m = model(aqm={"p_max": 0.101})
    ml = {"method": "multilevel", "tol": 1e-12}
    warm = aqmchain.solve_stationary(m, warm=prev, **ml)
    cold = aqmchain.solve_stationary(m, **ml)
    assert warm.warm["reuse"] == "none (multilevel does not recycle)"
    assert_same_law(cold, warm)


# ------------------------------------------------------------------ the builder on the previous states

def _same_chain(a, b):
    """Two chains equal: states (labels), matrix (positions and values, bit for bit: the same
    assembly) and class analysis."""
    assert a.n == b.n and sorted(a.labels) == sorted(b.labels)
    for k in a.labels:
        assert np.array_equal(np.asarray(a.labels[k]), np.asarray(b.labels[k])), k
    for part in ("indptr", "indices", "data"):
        assert np.array_equal(np.asarray(getattr(a, part)), np.asarray(getattr(b, part))), part
    assert a.recurrent_state == b.recurrent_state
    for key in ("closed_classes", "transient_states"):
        assert a.report[key] == b.report[key], key


@pytest.mark.parametrize("changes,reused", [
    ({"aqm": {"p_max": 0.101}}, True),       # values only: the same support
    ({"service": {"mu": 0.505}}, True),
    ({"aqm": {"p_max": 1.0}}, None),          # drop probability 1 at max_th: support may shrink
    ({"aqm": {"w": 0.2}}, False),             # the average moves otherwise: other states
    ({"model": {"buffer": 59}}, False),       # another state space
])
def test_a_chain_built_on_the_previous_states_is_the_chain_built_from_scratch(changes, reused):
    prev = aqmchain.build_chain(model())
    m = model(**changes)
    fresh = aqmchain.build_chain(m)
    like = aqmchain.build_chain(m, like=prev)
    assert fresh.report["states_reused"] is False
    if reused is not None:
        assert like.report["states_reused"] is reused
    if like.report["states_reused"]:
        assert like.report["seconds_classes"] == 0.0
    _same_chain(fresh, like)


def test_warm_solve_reuses_the_states_when_the_support_is_the_same():
    prev = aqmchain.solve_stationary(model(), **KRYLOV)
    warm = aqmchain.solve_stationary(model(aqm={"p_max": 0.101}), warm=prev, **KRYLOV)
    assert warm.warm["states"] == "reused" and warm.chain.report["states_reused"]
    assert "states" not in (aqmchain.solve_stationary(model(), **KRYLOV).warm or {})
    other = aqmchain.solve_stationary(model(aqm={"w": 0.2}), warm=prev, **KRYLOV)
    assert other.warm["states"] == "explored"
    # a warm start object keeps the chain; a search drops it from all but its newest solution
    ws = aqmchain.WarmStart.of(prev)
    assert ws.chain is prev.chain
    ws.chain = None
    again = aqmchain.solve_stationary(model(aqm={"p_max": 0.102}), warm=ws, **KRYLOV)
    assert "states" not in again.warm and again.warm["x0"] is True


def test_a_chain_on_the_previous_states_starts_where_the_exploration_would():
    # adaptive RED starts at its p_max: another p_max is another initial state, whose
    # exploration may reach other transient states even where the support is the same
    m = aqmchain.Model(buffer=20, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.5),
                       aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(5, 15, 0.1), w=0.07, adaptive=True,
                                        interval=5000, p_max_step=0.01), grid=aqmchain.GridSpec(k=1))
    prev = aqmchain.build_chain(m)
    for changes in ({"aqm": {"p_max": 0.15}}, {"service": {"mu": 0.505}}):
        m2 = m.replace(**changes)
        _same_chain(aqmchain.build_chain(m2), aqmchain.build_chain(m2, like=prev))
    assert aqmchain.build_chain(m.replace(service={"mu": 0.505}), like=prev).report["states_reused"]
