"""Krylov with its blocks numbered in sweep order (the most one-directional component outside
the blocks first) against the direct LU on small chains of every kind that adds a component:
drop spacing (count and wait), adaptive RED's p_max, two traffic classes, REDwM's s and a
continuous-time chain.  The two answers must agree within the distance their residuals allow
(solution_distance_bound), and within 1e-10 in the 1-norm."""

import numpy as np
import pytest

import aqmchain
from conftest import solution_distance_bound, uniformised

RED = aqmchain.DropFunction.red(6, 14, 0.2)


def _model(**kw):
    aqm = dict(drop=RED, w=0.2)
    aqm.update(kw.pop("aqm", {}))
    base = dict(buffer=20, source=aqmchain.Source.bernoulli(0.45), service=aqmchain.Service(0.5),
                aqm=aqmchain.Aqm(**aqm), grid=aqmchain.GridSpec(k=2, refine="none"))
    base.update(kw)
    return aqmchain.Model(**base)


KINDS = {
    "count": lambda: _model(aqm=dict(spacing="count", count_tail=0.0)),
    "wait": lambda: _model(aqm=dict(spacing="wait", count_tail=0.0)),
    "adaptive": lambda: _model(aqm=dict(adaptive=True, interval=50, p_max_step=0.05)),
    "redwm": lambda: _model(aqm=dict(filter="redwm", triple=[0.1, 0.02, 0.01])),
    "ctmc": lambda: _model(time="continuous", source=aqmchain.Source.poisson(0.45),
                           service=aqmchain.Service.exponential(0.5), aqm=dict(spacing="none")),
    "classes": lambda: _model(buffer=12, aqm=dict(drop=aqmchain.DropFunction.red(3, 9, 0.2)),
                              classes=[aqmchain.TrafficClass("a", 0.6), aqmchain.TrafficClass("b", 0.4)]),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_krylov_agrees_with_direct_on_chains_with_more_components(kind):
    model = KINDS[kind]()
    chain = aqmchain.build_chain(model, max_states=300_000)
    if chain.n > 120_000:
        pytest.fail(f"the {kind} test chain grew to {chain.n} states: make it smaller")
    kr = aqmchain.solve_stationary(chain, method="krylov", tol=1e-13)
    di = aqmchain.solve_stationary(chain, method="direct", tol=1e-13)
    assert kr.info.method == "krylov" and di.info.method == "direct"
    P = aqmchain.transition_matrix(chain)
    if chain.time == "continuous":  # the residuals are of the uniformised P = I + G / Lambda
        P = uniformised(P, di.info.extra["uniformization_rate"])
    bound = solution_distance_bound(P, di.pi, kr.info.residual, di.info.residual)
    gap = np.abs(kr.pi - di.pi).sum()
    assert gap <= bound, (kind, gap, bound)
    assert gap <= 1e-10, (kind, gap)
    if kind == "classes":  # the class contents widen the blocks' band: some are factorised sparsely
        assert kr.info.extra["sparse_blocks"] > 0
    if kind == "count":  # a drop resets the count from every value: the rows of its first value
        # gather hundreds of entries from states far after them, which the backward sweeps leave
        # out (BlockSystem::up_end); the answer is the same
        assert kr.info.extra["sweep_far_rows"] > 0


def test_a_better_fixed_state_refactorises_only_the_blocks_it_changes():
    """A loaded two-class chain: the empty system, krylov's first fixed state, falls below 1e-8
    of the most probable state, so the solve starts again with that one fixed.  The second
    system takes over the factors of every block that holds neither fixed state, sparse ones
    included, and the answer is the direct method's."""
    model = _model(buffer=12, source=aqmchain.Source.bernoulli(0.95), service=aqmchain.Service(0.3),
                   aqm=dict(drop=aqmchain.DropFunction.red(3, 9, 0.2)),
                   classes=[aqmchain.TrafficClass("a", 0.6), aqmchain.TrafficClass("b", 0.4)])
    chain = aqmchain.build_chain(model)
    kr = aqmchain.solve_stationary(chain, method="krylov", tol=1e-13)
    di = aqmchain.solve_stationary(chain, method="direct", tol=1e-13)
    extra = kr.info.extra
    assert "fixed (an iterate put state 0 below" in kr.info.note
    assert extra["sparse_blocks"] > 0
    # two blocks change (one if both states share a block)
    assert extra["blocks_reused"] in (extra["blocks"] - 2, extra["blocks"] - 1)
    P = aqmchain.transition_matrix(chain)
    bound = solution_distance_bound(P, di.pi, kr.info.residual, di.info.residual)
    assert np.abs(kr.pi - di.pi).sum() <= bound
