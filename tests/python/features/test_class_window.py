"""The window class chain (docs/classes.md, "The window chain"): its matrix against a dense
construction written independently in the test (class_window_oracle), the full window against
the exact chain that carries every flow, the class-blind case against the two-class chain,
per-flow losses against the simulator on the chain's grid, and the refusals."""

import numpy as np
import pytest

import aqmchain
from class_window_oracle import window_chain
from conftest import spec_to_doc, summation_error

MMBP = {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.3, 0.7]], "arrival": [0.25, 0.85]}
BERN = {"kind": "bernoulli", "alpha": 0.6}
EPS = np.finfo(float).eps


def model_of(spec: dict) -> "aqmchain.Model":
    doc = spec_to_doc(spec)
    if "flow_compare" in spec:
        doc["aqm"]["flow_compare"] = spec["flow_compare"]
    doc["class"] = [dict(c) for c in spec["classes"]]
    return aqmchain.model_from_dict(doc)[0]


def spec(**kw):
    s = {"buffer": 6, "mu": 0.5, "w": 0.35, "k": 2, "mapping": "split", "update": "per_slot", "source": BERN,
         "drop": "red", "min_th": 1, "max_th": 4, "p_max": 0.3, "flow_compare": True,
         "classes": [{"name": "tcp", "share": 0.5, "flows": 3}, {"name": "udp", "share": 0.5}]}
    s.update(kw)
    return s


CASES = {
    # the flow comparison, tail drop, a rest behind a window of 2
    "tail_L2": (dict(), 2),
    # front drop (the oldest waiting packet is known), bursty arrivals with per-state shares, ECN marks
    "front_mmbp_ecn_L3": (dict(policy="front", source=MMBP,
                               classes=[{"name": "a", "share": [0.2, 0.7], "flows": 2, "ecn": 0.4},
                                        {"name": "b", "share": [0.8, 0.3], "flows": 3}]), 3),
    # random drop and overflow victims among window and rest, a window of 1
    "random_L1": (dict(policy="random", buffer=5, classes=[{"name": "a", "share": 0.4, "flows": 2},
                                                           {"name": "b", "share": 0.6, "flows": 2}]), 1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_window_matrix_equals_dense_oracle(case):
    kw, L = CASES[case]
    s = spec(**kw)
    states, P_ref = window_chain(s, L)
    chain = aqmchain.build_chain(model_of(s), classes=f"window:{L}")
    lab = aqmchain.state_labels(chain)
    zero = np.zeros(chain.n, dtype=int)
    built = list(zip(*(np.asarray(lab.get(k, zero)).tolist() for k in ("level", "avg_index", "modulator", "window"))))
    order = sorted(range(chain.n), key=built.__getitem__)
    assert [built[i] for i in order] == states, "reachable state sets differ"
    P = aqmchain.transition_matrix(chain).toarray()[np.ix_(order, order)]
    # each entry sums at most a row's worth of products of probabilities: round-off within
    # a few eps per term
    terms = int(np.count_nonzero(P_ref, axis=1).max()) * 4
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=4 * terms * EPS)
    # the rest behind the window is used (not only the exact short queues)
    assert max(n for n, *_ in states) - 1 > L


def _class_numbers(r, names):
    return {(n, k): getattr(r.classes[n], k) for n in names
            for k in ("loss", "loss_flow_compare", "loss_aqm", "loss_overflow", "throughput", "mean_queue")}


#: FDynamicAutoRED (AutoRED's weight, dynamic max_th) on a buffer small enough for the exact chain
FDYN = dict(k=1, min_th=1, max_th=4, p_max=0.6, weight="autored", autored_p="queue", dynamic_max_th=True,
            max_th_growth=0.3)


@pytest.mark.parametrize("aqm", [{}, FDYN], ids=["red", "fdynamic"])
def test_full_window_equals_the_exact_chain_that_carries_flows(aqm):
    """Equal flow weights: the arrival's flow is independent of the queue, so the class
    sequence alone is a Markov chain with the same law as the flow sequence: the window chain
    with L = buffer - 1 (every waiting position in order, 2^n contents) gives the exact chain's
    class numbers (3^n contents with two tcp flows and a udp flow)."""
    s = spec(buffer=6, classes=[{"name": "tcp", "share": 0.5, "flows": 2}, {"name": "udp", "share": 0.5}], **aqm)
    m = model_of(s)
    ex = aqmchain.solve_stationary(m, classes="exact", response="none")
    wi = aqmchain.solve_stationary(m, classes="window:5", response="none")
    assert wi.class_chain == "window:5" and ex.class_chain == "exact"
    assert wi.states < ex.states / 4
    a, b = _class_numbers(wi, ("tcp", "udp")), _class_numbers(ex, ("tcp", "udp"))
    for key in a:
        assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), key
    # per flow: the tcp flows share the class's numbers (equal weights, exchangeable)
    tcp = [f for f in wi.flows if f["class"] == "tcp"]
    assert len(tcp) == 2 and all(f["loss"] == wi.classes["tcp"].loss for f in tcp)
    # each flow's is the class's times its weight (one rounding), summed over the flows
    assert sum(f["throughput"] for f in tcp) == pytest.approx(wi.classes["tcp"].throughput,
                                                               rel=2 * summation_error(len(tcp)))


def test_without_the_comparison_the_window_gives_the_class_numbers():
    """Class-blind dynamics (no comparison, tail drop, shares independent of the modulator):
    the waiting classes are exchangeable given the counts, so every chain is exact and the
    window chain gives the two-class chain's numbers for any L."""
    m = model_of(spec(flow_compare=False, buffer=8))
    ra = aqmchain.solve_stationary(m, classes="approx", method="direct", response="none")
    for L in (1, 3):
        rw = aqmchain.solve_stationary(m, classes=f"window:{L}", method="direct", response="none")
        assert _class_numbers(rw, ("tcp", "udp")) == pytest.approx(_class_numbers(ra, ("tcp", "udp")), rel=1e-9)
        assert rw.fairness == pytest.approx(ra.fairness, rel=1e-9)


def test_window_chain_per_flow_loss_against_the_simulator():
    """Per-flow loss on the chain's grid (the simulator with discretised avg): the window
    chain's only approximation is the random order behind the window, so the allowance is
    its own distance to the full window (exact, computed here), plus the simulator's 95 %
    half-width (4.5 x: several flows compared)."""
    s = spec(buffer=8, min_th=2, max_th=6, p_max=0.2, w=0.2)
    m = model_of(s)
    full = aqmchain.solve_stationary(m, classes="window:7", response="none")
    win = aqmchain.solve_stationary(m, classes="window:2", response="none")
    approx = aqmchain.solve_stationary(m, classes="approx", response="none")
    sim = aqmchain.simulate(m, slots=400_000, replications=4, discretised=True, seed=11)
    assert len(sim.flows) == len(win.flows) == 4
    for f_sim, f_full, f_win in zip(sim.flows, full.flows, win.flows):
        assert (f_sim["class"], f_sim["flow"]) == (f_win["class"], f_win["flow"])
        hw = f_sim["ci"]["loss"]
        assert abs(f_full["loss"] - f_sim["loss"]) <= 4.5 * hw, (f_sim, f_full)
        allowance = abs(f_win["loss"] - f_full["loss"])
        assert abs(f_win["loss"] - f_sim["loss"]) <= 4.5 * hw + allowance, (f_sim, f_win)
    # the window is closer to the exact law than the two-class chain's random order
    for name in ("tcp", "udp"):
        exact = full.classes[name].loss
        assert abs(win.classes[name].loss - exact) < abs(approx.classes[name].loss - exact), name
    assert win.fairness == pytest.approx(sim.fairness, abs=4.5 * sim.ci["fairness"] + abs(win.fairness - full.fairness))


def test_window_chain_refusals():
    m = model_of(spec())
    for bad in ("window:0", "window:17", "window:x", "approx:3"):
        with pytest.raises(aqmchain.OptionError, match="classes"):
            aqmchain.build_chain(m, classes=bad)
    doc = spec_to_doc(spec())
    doc["aqm"]["modified"] = "front"
    doc["class"] = [{"name": "web", "share": 0.3, "mice": True}, {"name": "ftp", "share": 0.7}]
    mm = aqmchain.model_from_dict(doc)[0]
    with pytest.raises(aqmchain.ModelError, match="aqm.modified"):
        aqmchain.build_chain(mm, classes="window")


def test_cli_solves_on_the_window_chain(tmp_path):
    import json

    from cli_helpers import run_cli, to_toml

    s = spec(buffer=6)
    doc = spec_to_doc(s)
    doc["aqm"]["flow_compare"] = True
    doc["class"] = [dict(c) for c in s["classes"]]
    path = tmp_path / "m.toml"
    path.write_text(to_toml(doc))
    out_json = tmp_path / "r.json"
    code, _, err = run_cli("solve", path, "--classes", "window:2", "--json", out_json)
    assert code == 0, err
    d = json.loads(out_json.read_text())
    r = aqmchain.solve_stationary(model_of(s), classes="window:2")
    assert d["class_chain"] == r.class_chain == "window:2" and d["states"] == r.states
    assert d["classes"]["tcp"]["loss"] == pytest.approx(r.classes["tcp"].loss, rel=1e-12)
    code, _, err = run_cli("solve", path, "--classes", "window:x")
    assert code == 2 and "window:L" in err


def test_window_chain_content_bound_names_the_buffer():
    """2^(L+1) (N - L) contents must fit the state component (32-bit): refused above, naming the buffer."""
    m = model_of(spec(buffer=40_000, k=1))
    with pytest.raises(aqmchain.ModelError, match="model.buffer.*40000"):
        aqmchain.build_chain(m, classes="window:16")


def test_full_window_equals_the_exact_chain_in_continuous_time():
    """The same in continuous time (the class rules at the arrival instant, docs/classes.md
    "Continuous time"): the full window's class numbers are the exact chain's."""
    doc = {"model": {"buffer": 5, "time": "continuous"}, "source": {"kind": "poisson", "rate": 1.0},
           "service": {"kind": "exponential", "mu": 1.0},
           "aqm": {"drop": "red", "min_th": 1, "max_th": 4, "p_max": 0.2, "w": 0.5, "flow_compare": True,
                   "policy": "random"},
           "grid": {"k": 1, "refine": "none"},
           "class": [{"name": "tcp", "share": 0.5, "flows": 2}, {"name": "udp", "share": 0.5}]}
    m = aqmchain.model_from_dict(doc)[0]
    ex = aqmchain.solve_stationary(m, classes="exact", response="none")
    wi = aqmchain.solve_stationary(m, classes="window:4", response="none")
    ap = aqmchain.solve_stationary(m, classes="approx", response="none")
    a, b = _class_numbers(wi, ("tcp", "udp")), _class_numbers(ex, ("tcp", "udp"))
    for key in a:
        assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), key
    assert abs(ap.classes["tcp"].loss - ex.classes["tcp"].loss) > 1e-4  # the approximation is not exact here
