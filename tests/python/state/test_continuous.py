"""Continuous-time queue: Poisson or MMPP arrivals, exponential service, the EWMA as
d avg/dt = w (q - avg) by upwind rates on the grid.  Oracles: the M/M/1/N closed form,
a dense generator written here independently of the builder, agreement across methods."""

import itertools
import json

import numpy as np
import pytest
import scipy.sparse as sp

import aqmchain
from conftest import construction_error, residual_evaluation_error, solution_distance_bound, uniformised

METHODS = aqmchain.stationary.METHODS  # the core's registry: a new method cannot miss these tests


def mm1n(N, lam, mu, k=2, w=0.5):
    return aqmchain.Model(buffer=N, time="continuous", source=aqmchain.Source.poisson(lam),
                          service=aqmchain.Service.exponential(mu), aqm=aqmchain.Aqm(w=w), grid=aqmchain.GridSpec(k=k))


@pytest.mark.parametrize("N,lam,mu", [(10, 0.3, 0.5), (25, 0.9, 0.6), (4, 2.0, 0.5)])
def test_mm1n_closed_form(N, lam, mu):
    r = aqmchain.solve_stationary(mm1n(N, lam, mu))
    rho = lam / mu
    p = rho ** np.arange(N + 1)
    p /= p.sum()
    n = np.arange(N + 1)
    # how far the solver's pi may be from the true one (its residual and the chain's conditioning):
    # every law below is a sum of pi's entries
    P = uniformised(r.transition_matrix(), r.info.extra["uniformization_rate"])
    err = solution_distance_bound(P, r.pi, r.info.residual)
    assert err < 1e-9  # the checks below stay sharp
    np.testing.assert_allclose(r.system_pmf, p, rtol=0, atol=err)
    assert r.mean_system == pytest.approx((n * p).sum(), abs=N * err)
    assert r.loss == pytest.approx(p[N], abs=err)  # PASTA
    assert r.throughput == pytest.approx(mu * (1 - p[0]), rel=1e-12)  # departures per unit time
    assert r.throughput == pytest.approx(lam * (1 - p[N]), rel=1e-12)
    # Little's law: E[n] = admitted rate x E[R]
    assert r.mean_response == pytest.approx((n * p).sum() / (lam * (1 - p[N])), rel=1e-12)
    assert r.response_pmf is None  # R has a density in continuous time


def dense_generator(N, rates, Q, mu, grid, drop, w, ecn=0.0):
    """SPEC 6 written out over the product space (n, g, m); returns (G, states) restricted
    to the states reachable from the empty system."""
    M, L = len(rates), len(grid)
    idx = {s: i for i, s in enumerate(itertools.product(range(N + 1), range(L), range(M)))}
    G = np.zeros((len(idx), len(idx)))
    for (n, g, m), i in idx.items():
        def add(t, r):
            if r > 0:
                G[i, idx[t]] += r
        for m2 in range(M):
            if m2 != m:
                add((n, g, m2), Q[m][m2])
        if n < N:
            add((n + 1, g, m), rates[m] * (1 - (1 - ecn) * drop(grid[g])))
        if n >= 1:
            add((n - 1, g, m), mu)
        q = max(n - 1, 0)
        if g + 1 < L and q > grid[g]:
            add((n, g + 1, m), w * (q - grid[g]) / (grid[g + 1] - grid[g]))
        if g > 0 and q < grid[g]:
            add((n, g - 1, m), w * (grid[g] - q) / (grid[g] - grid[g - 1]))
        G[i, i] = -G[i].sum()
    # reachable from (0, 0, m)
    seen, stack = set(), [idx[(0, 0, m)] for m in range(M)]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        stack.extend(np.nonzero(G[i])[0].tolist())
    keep = sorted(seen)
    states = [s for s, i in sorted(idx.items(), key=lambda kv: kv[1]) if i in seen]
    return G[np.ix_(keep, keep)], states


CASES = [
    dict(N=8, rates=[0.7], Q=[[0.0]], mu=0.5, k=2, w=0.4, red=(1, 5, 0.3), ecn=0.0),
    dict(N=12, rates=[0.2, 1.3], Q=[[-0.1, 0.1], [0.4, -0.4]], mu=0.6, k=2, w=1.5, red=(2, 8, 0.2), ecn=0.3),
    dict(N=10, rates=[0.0, 0.5, 2.0], Q=[[-0.3, 0.2, 0.1], [0.05, -0.1, 0.05], [0.5, 0.5, -1.0]], mu=0.9, k=1,
         w=0.25, red=(3, 7, 0.5), ecn=0.0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"N{c['N']}_M{len(c['rates'])}")
def test_generator_equals_independent_dense_one(case):
    src = (aqmchain.Source.poisson(case["rates"][0]) if len(case["rates"]) == 1
           else aqmchain.Source.mmpp(case["Q"], case["rates"]))
    drop = aqmchain.DropFunction.red(*case["red"])
    model = aqmchain.Model(buffer=case["N"], time="continuous", source=src,
                           service=aqmchain.Service.exponential(case["mu"]),
                           aqm=aqmchain.Aqm(drop=drop, w=case["w"], ecn=case["ecn"]),
                           grid=aqmchain.GridSpec(k=case["k"]))
    chain = aqmchain.build_chain(model)
    assert chain.time == "continuous"
    grid = np.asarray(chain.grid)
    G, states = dense_generator(case["N"], case["rates"], case["Q"], case["mu"], grid, drop, case["w"], case["ecn"])
    labels = aqmchain.state_labels(chain)
    built = list(zip(labels["level"].tolist(), labels["avg_index"].tolist(), labels["modulator"].tolist()))
    assert built == states
    B = sp.csr_matrix((chain.data, chain.indices, chain.indptr), shape=(chain.n, chain.n)).toarray()
    # rates, not probabilities: each entry within construction_error of its row's largest
    # magnitude (the diagonal sums the row's out-rates)
    np.testing.assert_allclose(B, G, rtol=0, atol=construction_error(G) * float(np.abs(G).max()))
    # every method agrees to 1e-10 with a dense solve of pi G = 0
    A = np.vstack([G.T, np.ones(len(G))])
    b = np.zeros(len(G) + 1)
    b[-1] = 1
    pi = np.linalg.lstsq(A, b, rcond=None)[0]
    for method in METHODS:
        r = aqmchain.solve_stationary(chain, method=method, tol=1e-13)
        P = uniformised(G, r.info.extra["uniformization_rate"])  # what the solver's residual is of
        bound = solution_distance_bound(P, pi, r.info.residual, np.abs(pi @ P - pi).sum())
        assert np.abs(r.pi - pi).sum() <= bound, method
        # converged means the tolerance asked for, and the residual reported is the answer's
        assert r.info.status == "converged" and r.info.residual <= r.info.tol, method
        assert abs(np.abs(r.pi @ P - r.pi).sum() - r.info.residual) <= residual_evaluation_error(P), method


def test_event_rates_are_per_unit_time():
    model = aqmchain.Model(buffer=20, time="continuous", source=aqmchain.Source.mmpp([[-1, 1], [2, -2]], [0.3, 3.0]),
                           service=aqmchain.Service.exponential(1.2),
                           aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(2, 10, 0.2), w=0.5, ecn=0.25))
    r = aqmchain.solve_stationary(model)
    assert r.arrival_rate == pytest.approx(2 / 3 * 0.3 + 1 / 3 * 3.0, rel=1e-12)  # modulator pi = (2/3, 1/3)
    # flow conservation: admitted = departed
    assert r.throughput == pytest.approx(r.arrival_rate * (1 - r.loss), rel=1e-10)
    assert r.littles_law_error < 1e-10
    assert 0 < r.mark_prob < 1


@pytest.mark.parametrize("source,param", [
    ({"kind": "mmpp", "generator": [[-1.0, 0.5], [2.0, -2.0]], "rates": [0.3, 3.0]}, "source.generator[0]"),
    ({"kind": "mmpp", "generator": [[1.0, -1.0], [2.0, -2.0]], "rates": [0.3, 3.0]}, "source.generator[0][1]"),
    ({"kind": "mmpp", "generator": [[-1.0, 1.0], [2.0, -2.0]], "rates": [0.3, -3.0]}, "source.rates[1]"),
    ({"kind": "poisson", "rate": -1.0}, "source.rate"),
    ({"kind": "bernoulli", "alpha": 0.5}, "source.kind"),
])
def test_bad_continuous_sources_are_named(source, param):
    doc = {"model": {"buffer": 5, "time": "continuous"}, "source": source,
           "service": {"kind": "exponential", "mu": 1.0}}
    with pytest.raises(aqmchain.ModelError) as exc:
        aqmchain.model_from_dict(doc)
    assert exc.value.param == param


def test_cli_solves_the_continuous_example(root, tmp_path, capsys):
    from aqmchain import cli

    out = tmp_path / "ctmc.json"
    assert cli.main(["solve", str(root / "examples" / "red_ctmc.toml"), "--json", str(out)]) in (0, None)
    d = json.loads(out.read_text())
    assert d["states"] > 1000
    assert d["loss"] == pytest.approx(d["loss_aqm"] + d["loss_overflow"], rel=1e-12)
    assert d["throughput"] == pytest.approx(d["arrival_rate"] * (1 - d["loss"]), rel=1e-9)
    assert d["solver"]["residual"] <= 1e-12
