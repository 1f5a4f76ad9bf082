"""SPEC 8(c): every stationary method agrees; failures are reported, not hidden."""

import numpy as np
import pytest

import aqmchain
from conftest import ROOT, model_of, residual_evaluation_error, solution_distance_bound, summation_error, uniformised

# every method but auto, from the core's registry (a new method cannot miss these tests)
METHODS = [m for m in aqmchain.stationary.METHODS if m != "auto"]

MODELS = {
    "geo_red": {"buffer": 40, "mu": 0.5, "w": 0.1, "k": 2, "mapping": "split",
                "source": {"kind": "bernoulli", "alpha": 0.55}, "drop": "red", "min_th": 10, "max_th": 30,
                "p_max": 0.2},
    "ssmp_dsred_arrival": {"buffer": 30, "mu": 0.6, "w": 0.2, "k": 2, "mapping": "split",
                           "update": "per_arrival", "source": {"kind": "ssmp", "n": 4, "q": 1.6, "a": 6.0},
                           "drop": "dsred", "k_l": 8, "k_h": 20, "gamma": 0.3},
    "mmbp_sred_ecn": {"buffer": 25, "mu": 0.45, "w": 0.25, "k": 3, "mapping": "split", "ecn": 0.4,
                      "source": {"kind": "mmbp", "matrix": [[0.8, 0.2], [0.3, 0.7]], "arrival": [0.1, 0.8]},
                      "drop": "sred", "min_th": 5},
}


@pytest.mark.parametrize("name", list(MODELS))
def test_methods_agree(name):
    model = model_of(MODELS[name])
    chain = aqmchain.build_chain(model)
    tol = 1e-13
    results = {m: aqmchain.solve_stationary(chain, method=m, tol=tol) for m in METHODS}
    ref = results["direct"]
    P = aqmchain.transition_matrix(chain)
    for m, r in results.items():
        assert r.info.method == m and r.info.status == "converged" and not r.info.fallback
        # converged: the residual, evaluated here from the exported matrix, within tol up to the
        # error of evaluating it; pi sums to 1 up to the rounding of the normalising sum
        assert np.abs(P.T @ r.pi - r.pi).sum() <= tol + residual_evaluation_error(P)
        assert r.info.mass_error <= summation_error(chain.n)
        bound = solution_distance_bound(P, ref.pi, r.info.residual, ref.info.residual)
        assert np.abs(r.pi - ref.pi).sum() <= bound, m
        assert r.info.matvecs >= 1 and "solve" in r.info.seconds
        # |E_x[q] - E_pi[q]| <= max q * ||x - pi||_1
        assert abs(r.mean_queue - ref.mean_queue) <= model.buffer * bound
    # the residual reported is the residual of pi: recompute it with scipy
    for r in results.values():
        assert np.abs(r.pi @ P - r.pi).sum() == pytest.approx(r.info.residual, abs=residual_evaluation_error(P))


def test_matches_numpy_dense_solve():
    spec = dict(MODELS["ssmp_dsred_arrival"], buffer=14, k_l=4, k_h=10)
    r = aqmchain.solve_stationary(model_of(spec))
    P = r.transition_matrix().toarray()
    n = P.shape[0]
    A = P.T - np.eye(n)
    A[-1, :] = 1.0  # replace one balance equation by the normalisation
    b = np.zeros(n)
    b[-1] = 1.0
    x = np.linalg.solve(A, b)
    x_residual = np.abs(x @ P - x).sum()
    assert np.abs(x - r.pi).sum() <= solution_distance_bound(P, r.pi, r.info.residual, x_residual)


@pytest.mark.parametrize("method", [m for m in METHODS if m != "direct"])  # the iterative ones
def test_max_iter_one_raises_with_partial_result(method):
    model = model_of(MODELS["geo_red"])
    with pytest.raises(aqmchain.NonConvergenceError) as exc:
        aqmchain.solve_stationary(model, method=method, max_iter=1)
    res = exc.value.result
    assert res.info.status == "not_converged"
    assert res.info.residual > 1e-12
    assert res.pi.shape == (res.states,)
    assert abs(res.pi.sum() - 1) < 1e-12
    assert "residual" in str(exc.value)


def test_unknown_option_and_bad_values():
    model = model_of(MODELS["geo_red"])
    with pytest.raises(aqmchain.OptionError, match="unknown solver option 'tolerance'"):
        aqmchain.solve_stationary(model, tolerance=1e-9)
    with pytest.raises(aqmchain.OptionError, match="method"):
        aqmchain.solve_stationary(model, method="lu")
    with pytest.raises(aqmchain.OptionError, match="tol"):
        aqmchain.solve_stationary(model, tol=0.0)


def test_transient_states_are_fine_and_reported():
    # alpha = mu = 1: the empty state is left forever after the first slot.
    m = aqmchain.Model(buffer=3, source=aqmchain.Source.bernoulli(1.0), service=aqmchain.Service(1.0),
                       aqm=aqmchain.Aqm(w=1.0), grid=aqmchain.GridSpec(k=1))
    r = aqmchain.solve_stationary(m)
    assert r.build["transient_states"] >= 1
    # the transient states get exactly 0 and the one recurrent state (n = 1) the rest: 1 up to
    # the rounding of the normalising sum
    assert r.system_pmf[1] == pytest.approx(1.0, abs=summation_error(r.states))


def test_direct_solver_reuses_the_symbolic_analysis_in_a_sweep():
    spec = MODELS["geo_red"]
    ds = aqmchain.DirectSolver()
    first = None
    for mu in (0.4, 0.5, 0.6):
        r = ds.solve(model_of(dict(spec, mu=mu)))
        fresh = aqmchain.solve_stationary(model_of(dict(spec, mu=mu)), method="direct")
        # the same LU from a reused analysis, but pivots and BLAS kernels may round otherwise:
        # the two answers agree to what their residuals and the chain's conditioning allow
        P = fresh.transition_matrix()
        assert np.abs(r.pi - fresh.pi).sum() <= solution_distance_bound(P, fresh.pi, r.info.residual,
                                                                          fresh.info.residual)
        if first is None:
            first = ds.analyses  # 1, or 2 when the first fixed state was improbable (re-solved)
        else:
            assert r.info.extra["symbolic_reused"] == 1.0
    assert ds.analyses == first  # mu keeps the pattern: no new analysis in the sweep
    ds.solve(model_of(dict(spec, w=0.2)))  # another reachable set
    assert ds.analyses > first
    with pytest.raises(aqmchain.OptionError, match="direct"):
        aqmchain.DirectSolver(method="power")


@pytest.mark.parametrize("gamma", [1, 2])
def test_multilevel_on_a_slowly_mixing_chain(gamma):
    """w = 0.005 with a fine grid: thousands of Gauss-Seidel sweeps, tens of cycles."""
    spec = {"buffer": 60, "mu": 0.5, "w": 0.005, "k": 4, "mapping": "split",
            "source": {"kind": "ssmp", "n": 4, "q": 1.8, "a": 12.0}, "drop": "red", "min_th": 20, "max_th": 50,
            "p_max": 0.1}
    chain = aqmchain.build_chain(model_of(spec))
    ref = aqmchain.solve_stationary(chain, method="direct", response="none")
    r = aqmchain.solve_stationary(chain, method="multilevel", cycle_gamma=gamma, response="none")
    assert r.info.residual <= 1e-12 and r.info.extra["levels"] >= 3
    P = aqmchain.transition_matrix(chain)
    assert np.abs(r.pi - ref.pi).sum() <= solution_distance_bound(P, ref.pi, r.info.residual, ref.info.residual)
    assert r.info.iterations < 200


def test_direct_refuses_an_lu_over_its_memory_budget():
    model = model_of(MODELS["geo_red"])
    with pytest.raises(aqmchain.SolverError, match=r"GB for the LU factorisation .* above direct_max_gb"):
        aqmchain.solve_stationary(model, method="direct", direct_max_gb=1e-6)
    with pytest.raises(aqmchain.OptionError, match="direct_max_gb"):
        aqmchain.solve_stationary(model, direct_max_gb=0.0)
    with pytest.raises(aqmchain.OptionError, match="auto_direct_max_flops"):
        aqmchain.solve_stationary(model, auto_direct_max_flops=-1.0)


def test_auto_factorises_within_its_budgets_and_says_so_otherwise():
    chain = aqmchain.build_chain(model_of(MODELS["ssmp_dsred_arrival"]))
    ref = aqmchain.solve_stationary(chain, method="direct", response="none")
    r = aqmchain.solve_stationary(chain, response="none")
    assert r.info.method == "direct" and not r.info.fallback
    assert 0 < r.info.extra["lu_flops"] <= r.info.extra["lu_flops_estimate"]
    # a work budget below UMFPACK's estimate: auto must run the next method (krylov) and say why
    r = aqmchain.solve_stationary(chain, response="none", auto_direct_max_flops=1.0)
    assert r.info.method == "krylov" and r.info.fallback
    assert "auto_direct_max_flops" in r.info.note
    assert np.abs(r.pi - ref.pi).sum() < 1e-10
    # the same for the memory budget
    r = aqmchain.solve_stationary(chain, response="none", direct_max_gb=1e-9)
    assert r.info.method == "krylov" and "direct_max_gb" in r.info.note


def test_auto_leaves_a_badly_filling_lu_of_a_small_chain_to_the_iterative_methods():
    # REDwM with three sums: 8,446 states whose LU UMFPACK estimates at about 1e10 flops,
    # over auto's first-try budget of 10^4 flops per entry of P
    doc = {"model": {"buffer": 10}, "source": {"kind": "bernoulli", "alpha": 0.45}, "service": {"mu": 0.5},
           "aqm": {"drop": "red", "min_th": 3, "max_th": 6, "p_max": 0.2, "filter": "redwm",
                   "a": [0.5, 0.1, 0.05, 0.05], "b": [0.2, 0.1]},
           "grid": {"k": 2, "refine": "none"}}
    chain = aqmchain.build_chain(aqmchain.model_from_dict(doc)[0])
    nnz = aqmchain.transition_matrix(chain).nnz
    ref = aqmchain.solve_stationary(chain, method="direct", response="none")
    assert ref.info.extra["lu_flops_estimate"] > max(1e9, 1e4 * nnz)
    r = aqmchain.solve_stationary(chain, response="none")
    first = r.info.methods_tried[0]
    assert first["method"] == "direct" and "small chain" in first["why"] and r.info.method != "direct"
    assert r.info.residual <= 1e-12
    P = aqmchain.transition_matrix(chain)
    assert np.abs(r.pi - ref.pi).sum() <= solution_distance_bound(P, ref.pi, r.info.residual, ref.info.residual)
    # an LU within that budget still runs first (a plain RED chain of the same size class)
    small = aqmchain.solve_stationary(model_of(MODELS["ssmp_dsred_arrival"]), response="none")
    assert small.info.method == "direct" and not small.info.fallback


def test_auto_runs_krylov_first_on_large_chains_and_transient_states_get_zero():
    # ssmp_dsred_arrival has one transient state (outside the closed class): krylov
    # solves on the whole chain, the others on the closed class; all give 0 there
    chain = aqmchain.build_chain(model_of(MODELS["ssmp_dsred_arrival"]))
    assert chain.report["transient_states"] == 1
    ref = aqmchain.solve_stationary(chain, method="direct", response="none")
    r = aqmchain.solve_stationary(chain, response="none", auto_krylov_min_states=chain.n)
    assert r.info.method == "krylov" and not r.info.fallback and r.info.status == "converged"
    P = aqmchain.transition_matrix(chain)
    assert np.abs(r.pi - ref.pi).sum() <= solution_distance_bound(P, ref.pi, r.info.residual, ref.info.residual)
    assert r.info.extra["transient_states"] == 1
    # here the transient state is the one no other state leads to
    A = P.tolil()
    A.setdiag(0)
    A = A.tocsr()
    A.eliminate_zeros()
    unreached = np.flatnonzero(np.asarray((A != 0).sum(axis=0)).ravel() == 0)
    assert len(unreached) == 1 and r.pi[unreached[0]] == 0.0 and ref.pi[unreached[0]] == 0.0
    # the residual is the whole chain's
    assert np.abs(r.pi @ P - r.pi).sum() == pytest.approx(r.info.residual, abs=residual_evaluation_error(P))
    # one state more than the chain: direct first again
    r = aqmchain.solve_stationary(chain, response="none", auto_krylov_min_states=chain.n + 1)
    assert r.info.method == "direct"
    with pytest.raises(aqmchain.OptionError, match="auto_krylov_min_states"):
        aqmchain.solve_stationary(chain, auto_krylov_min_states=-1)


def test_krylov_never_fixes_a_transient_state_from_x0():
    # x0 with its largest entry on the transient state: the fixed state must still be recurrent
    chain = aqmchain.build_chain(model_of(MODELS["ssmp_dsred_arrival"]))
    ref = aqmchain.solve_stationary(chain, method="direct", response="none")
    P = aqmchain.transition_matrix(chain).tolil()
    P.setdiag(0)
    A = P.tocsr()
    A.eliminate_zeros()
    transient = int(np.flatnonzero(np.asarray((A != 0).sum(axis=0)).ravel() == 0)[0])
    x0 = np.full(chain.n, 1.0 / chain.n)
    x0[transient] = 0.5
    x0 /= x0.sum()
    r = aqmchain.solve_stationary(chain, method="krylov", x0=x0, response="none")
    assert r.info.status == "converged" and r.info.extra["fixed_state"] != transient
    P = aqmchain.transition_matrix(chain)
    assert np.abs(r.pi - ref.pi).sum() <= solution_distance_bound(P, ref.pi, r.info.residual, ref.info.residual)


def test_method_names_and_integer_options_come_from_the_core_tables():
    core = aqmchain._core
    # one table of methods: names in the docs' order, each with its one-line description
    assert list(core.stationary_method_descriptions()) == list(aqmchain.stationary.METHODS)
    assert all(len(d) > 10 for d in core.stationary_method_descriptions().values())
    # one table of integer options: each row is a property (no binding code per option)
    ranges = core.StationaryOptions.int_ranges()
    o = core.StationaryOptions()
    for name, (lo, hi) in ranges.items():
        assert isinstance(getattr(o, name), int), name
        setattr(o, name, lo)
        assert getattr(o, name) == lo
    # a value that does not fit the field is refused naming the option and its range
    with pytest.raises(aqmchain.OptionError, match=r"solver option 'ncv' must be in \[0, 1000\]"):
        o.ncv = 2**40
    o = core.StationaryOptions()
    with pytest.raises(aqmchain.OptionError, match=r"'krylov_basis' must be in \[2, 500\].*got 501"):
        o.krylov_basis = 501  # the property checks the row's range (validate() checks it again)
    assert o.krylov_basis == 50


def test_every_method_of_the_registry_has_a_row_in_the_solvers_guide():
    # the guide's method table is generated from the core's method table (mkdocs_hooks.py)
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "mkdocs_hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)

    guide = (ROOT / "docs" / "solvers.md").read_text()
    assert "<!-- registry: methods -->" in guide.split("## Stationary distribution", 1)[1].split("\n## ", 1)[0]
    table = hooks.registry_markdown("methods")
    rows = re.findall(r"^\| `(\w+)`", table, flags=re.M)
    assert rows == list(aqmchain.stationary.METHODS) and len(rows) >= 7
    for m in aqmchain._core.stationary_method_guide():
        assert m["use_when"] and m["cost"] and f"| {m['use_when']} | {m['cost']} |" in table


def _ns3_chain(rate: float, buffer: int):
    # ns-3's RED (continuous time, Poisson arrivals at `rate`, service 1) on the uniform avg grid
    # of step 1/2: 6,242 (buffer 9) or 8,331 (buffer 12) states, below the 50,000 from which
    # passes run over threads (so the counts below do not depend on them); the solvers'
    # residuals are those of the uniformised chain
    doc = {"model": {"buffer": buffer, "time": "continuous"}, "source": {"kind": "poisson", "rate": rate},
           "service": {"kind": "exponential", "mu": 1.0},
           "aqm": {"semantics": "ns3", "drop": "gentle_red", "min_th": 2, "max_th": 6, "p_max": 0.1, "w": 0.005,
                   "spacing": "wait"},
           "grid": {"k": 2, "refine": "none"}}
    return aqmchain.build_chain(aqmchain.model_from_dict(doc)[0])


def test_auto_hands_a_slow_multilevel_over_to_krylov():
    # at load 0.5 multilevel takes about 70 cycles, GMRES about 8 steps
    chain = _ns3_chain(0.5, 9)
    ref = aqmchain.solve_stationary(chain, method="multilevel", response="none")
    P = uniformised(aqmchain.transition_matrix(chain), ref.info.extra["uniformization_rate"])
    opts = dict(response="none", auto_krylov_min_states=0)  # the large chains' order: multilevel first
    plain = aqmchain.solve_stationary(chain, auto_multilevel_cycles=0, **opts)
    assert [t["method"] for t in plain.info.methods_tried] == ["multilevel"]
    cycles = plain.info.iterations
    assert cycles > 30
    # above 30 cycles: its rate over the first 10 projects more, so krylov gets 1.5 steps per
    # cycle still needed, and converges
    r = aqmchain.solve_stationary(chain, auto_multilevel_cycles=30, **opts)
    tried = r.info.methods_tried
    assert [t["method"] for t in tried] == ["multilevel", "krylov"], r.info.note
    assert tried[0]["status"] == "stalled" and "handed over" in tried[0]["why"] and tried[0]["iterations"] < 30
    assert r.info.method == "krylov" and r.info.status == "converged" and r.info.fallback
    assert r.info.extra["auto_multilevel_handed_over"] == 1.0
    for x in (r, ref):  # the residuals the bound takes, evaluated here
        assert np.abs(x.pi @ P - x.pi).sum() == pytest.approx(x.info.residual, abs=residual_evaluation_error(P))
    assert np.abs(r.pi - ref.pi).sum() <= solution_distance_bound(P, ref.pi, r.info.residual, ref.info.residual)
    with pytest.raises(aqmchain.OptionError, match="auto_multilevel_cycles"):
        aqmchain.solve_stationary(chain, auto_multilevel_cycles=-1)


def test_auto_resumes_a_handed_over_multilevel_when_krylov_fails():
    # at load 2 multilevel takes about 40 cycles, GMRES about 90 steps: with a hand-over above
    # 12 cycles krylov's budget (1.5 steps per cycle still needed) runs out, and multilevel goes
    # on from its own iterate, in the cycles it still needed
    chain = _ns3_chain(2.0, 12)
    opts = dict(response="none", auto_krylov_min_states=0)
    plain = aqmchain.solve_stationary(chain, auto_multilevel_cycles=0, **opts)
    P = uniformised(aqmchain.transition_matrix(chain), plain.info.extra["uniformization_rate"])
    assert [t["method"] for t in plain.info.methods_tried] == ["multilevel"]
    cycles = plain.info.iterations
    krylov_steps = aqmchain.solve_stationary(chain, method="krylov", response="none").info.iterations
    assert 1.5 * cycles < krylov_steps  # the budget is below what krylov needs
    r = aqmchain.solve_stationary(chain, auto_multilevel_cycles=12, **opts)
    tried = r.info.methods_tried
    assert [t["method"] for t in tried] == ["multilevel", "krylov", "multilevel"], r.info.note
    assert "handed over" in tried[0]["why"]
    assert tried[1]["status"] != "converged" and tried[1]["iterations"] <= 1.5 * cycles
    assert tried[2]["status"] == "converged" and tried[2]["iterations"] < cycles
    assert r.info.method == "multilevel" and r.info.residual <= 1e-12
    for x in (r, plain):  # the residuals the bound takes, evaluated here
        assert np.abs(x.pi @ P - x.pi).sum() == pytest.approx(x.info.residual, abs=residual_evaluation_error(P))
    assert np.abs(r.pi - plain.pi).sum() <= solution_distance_bound(P, plain.pi, r.info.residual,
                                                                     plain.info.residual)
