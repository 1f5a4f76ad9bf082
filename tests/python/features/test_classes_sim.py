"""Traffic classes and flow-aware AQM in the simulator (docs/classes.md).

Oracles: the classless simulator on the same random stream (a single class of a single
flow draws nothing extra, so the numbers are equal, not close); the same model with the
mechanism switched off where the mechanism cannot act (modified RED without protected
packets, or with nothing but protected ones); a three-state chain written in the test
for the flow comparison with one flow; Little's law per class; Jain's index of equal flows.
"""

import copy
import json

import numpy as np
import pytest

import aqmchain
from class_oracle import model_from
from cli_helpers import run_cli

DOC = {"model": {"buffer": 20}, "source": {"kind": "bernoulli", "alpha": 0.5}, "service": {"mu": 0.45},
       "aqm": {"drop": "red", "min_th": 4, "max_th": 12, "p_max": 0.2, "w": 0.05},
       "grid": {"k": 2, "refine": "none"}}
SIM = {"slots": 300_000, "replications": 2, "seed": 11, "threads": 1}
#: a ratio of integer counts formed in two orders (a division, a product, a subtraction of
#: means for a variance): each side within 4 roundings, so 8 eps apart
RATIO_EPS = 8 * np.finfo(float).eps
ALL = ("arrival_rate", "throughput", "loss", "loss_aqm", "loss_overflow", "mark_prob", "pushed_out_prob",
       "mean_system", "var_system", "mean_queue", "var_queue", "mean_avg", "mean_response", "var_response")


def model(aqm=None, classes=None, **top):
    return model_from(DOC, aqm, classes, **top)


def same(a, b, names=ALL):
    for n in names:
        assert getattr(a, n) == getattr(b, n), (n, getattr(a, n), getattr(b, n))
        assert a.ci[n] == b.ci[n] or (np.isinf(a.ci[n]) and np.isinf(b.ci[n])), n
    np.testing.assert_array_equal(a.response_pmf, b.response_pmf)
    np.testing.assert_array_equal(a.system_pmf, b.system_pmf)


def close(a, b, name, k=4.0):
    """Two independent estimates agree within k combined half-widths."""
    va, vb = getattr(a, name), getattr(b, name)
    assert abs(va - vb) <= k * np.hypot(a.ci[name], b.ci[name]) + 1e-12, (name, va, vb, a.ci[name], b.ci[name])


@pytest.mark.parametrize("discretised", [False, True])
@pytest.mark.parametrize("aqm", [{"spacing": "count", "ecn": 0.3}, {"p_max": 0.7, "dynamic_max_th": True,
                                                                     "max_th_growth": 0.4, "policy": "random"}])
def test_one_class_is_the_classless_model_exactly(aqm, discretised):
    """One class of one flow draws nothing extra: the classless stateful model's numbers, bit for bit."""
    plain = model(aqm)
    ecn = aqm.get("ecn", 0.0)
    one = model({k: v for k, v in aqm.items() if k != "ecn"}, [{"name": "all", "share": 1.0, "ecn": ecn}])
    a = aqmchain.simulate(plain, discretised=discretised, **SIM)
    b = aqmchain.simulate(one, discretised=discretised, **SIM)
    same(a, b)
    c = b.classes["all"]
    # both sides are ratios of the same integer counts (exact in double), formed in another order:
    # a few roundings apart, within RATIO_EPS relative
    for n in ("loss", "mark_prob", "mean_response", "var_response", "throughput"):
        assert getattr(c, n) == pytest.approx(getattr(a, n), rel=RATIO_EPS, abs=0.0), n
    # per class a push-out is the loss of the packet pushed out; the aggregate counts the decision
    assert c.loss_aqm + c.loss_overflow + c.loss_pushed_out == pytest.approx(a.loss_aqm + a.loss_overflow, rel=1e-12)
    assert c.loss_pushed_out == pytest.approx(a.pushed_out_prob * (1 - c.loss_aqm - c.loss_overflow), rel=1e-12)
    assert c.mean_queue == pytest.approx(a.mean_system, rel=1e-12)
    assert c.throughput_share == 1.0 and c.queue_share == 1.0
    np.testing.assert_allclose(c.response_pmf[1:], a.response_pmf[1:len(c.response_pmf)], rtol=RATIO_EPS, atol=0.0)
    assert b.fairness == 1.0


def test_two_identical_classes_split_as_given():
    plain = model({"ecn": 0.2})
    two = model(None, [{"name": "a", "share": 0.3, "ecn": 0.2}, {"name": "b", "share": 0.7, "ecn": 0.2, "flows": 2}])
    a = aqmchain.simulate(plain, **SIM)
    b = aqmchain.simulate(two, **SIM)
    for n in ("mean_queue", "var_queue", "loss", "loss_aqm", "mark_prob", "throughput", "mean_response"):
        close(a, b, n)
    ca, cb = b.classes["a"], b.classes["b"]
    for n in ("arrival_rate", "throughput", "mean_queue"):
        assert getattr(ca, n) + getattr(cb, n) == pytest.approx(getattr(b, n if n != "mean_queue" else "mean_system"),
                                                              rel=1e-12)
    for c, share in ((ca, 0.3), (cb, 0.7)):
        assert abs(c.arrival_rate / b.arrival_rate - share) <= 4 * c.ci["arrival_rate"] / b.arrival_rate + 1e-3
        for n in ("throughput_share", "queue_share"):
            assert abs(getattr(c, n) - share) <= 4 * c.ci[n] + 1e-9, (c.name, n, getattr(c, n), c.ci[n])
        # identical treatment: the class sees the aggregate loss and response time
        for n in ("loss", "mark_prob", "mean_response"):
            assert abs(getattr(c, n) - getattr(b, n)) <= 4 * c.ci[n] + 1e-9, (c.name, n)
    # the class and flow accounts add up
    assert sum(f["throughput"] for f in b.flows) == pytest.approx(b.throughput, rel=1e-12)
    assert [f["class"] for f in b.flows] == ["a", "b", "b"] and [f["flow"] for f in b.flows] == [0, 0, 1]


@pytest.mark.parametrize("aqm", [{}, {"modified": "front", "policy": "random"}])
def test_little_law_per_class(aqm):
    classes = [{"name": "web", "share": 0.2, "mice": True}, {"name": "ftp", "share": 0.8, "ecn": 0.5}]
    r = aqmchain.simulate(model(aqm, classes), **SIM)
    for c in r.classes.values():
        # without push-outs every admitted packet is served: E n_c = throughput_c E R_c
        if not aqm:
            assert c.mean_queue == pytest.approx(c.throughput * c.mean_response, rel=2e-3), c.name
        loss = c.loss_aqm + c.loss_overflow + c.loss_flow_compare + c.loss_pushed_out
        assert c.loss == pytest.approx(loss, rel=1e-12)
        # conservation: what arrives leaves or is lost
        assert c.throughput == pytest.approx(c.arrival_rate * (1 - c.loss), rel=2e-3)


@pytest.mark.parametrize("variant", ["front", "random"])
def test_modified_without_protected_packets_is_plain_red(variant):
    """Without mice or ECN-capable packets every packet is an elephant: modified front (random)
    drop is front (random) drop, with the same draws."""
    policy = variant
    classes = [{"name": "a", "share": 0.4, "flows": 3}, {"name": "b", "share": 0.6}]
    plain = aqmchain.simulate(model({"policy": policy}, classes), **SIM)
    mod = aqmchain.simulate(model({"policy": policy, "modified": variant}, classes), **SIM)
    same(plain, mod)
    for name in ("a", "b"):
        for n in ("loss", "loss_aqm", "loss_pushed_out", "mean_response", "mean_queue"):
            assert getattr(plain.classes[name], n) == getattr(mod.classes[name], n)
    assert plain.pushed_out_prob > 0
    # under tail drop the modified search still takes a waiting elephant: front drop in the early region
    tail = aqmchain.simulate(model({"modified": variant}, classes), **SIM)
    assert tail.pushed_out_prob > 0 and tail.loss_aqm == pytest.approx(plain.loss_aqm, abs=4 * plain.ci["loss_aqm"]
                                                                        + 4 * tail.ci["loss_aqm"])


@pytest.mark.parametrize("variant", ["front", "random"])
def test_all_mice_drop_only_at_or_above_max_th_or_on_overflow(variant):
    """With nothing but mice, an early decision below max_th admits the arrival: the same
    law, and here the same random stream, as RED with p_max = 0 (which decides nothing
    below max_th and drops everything at or above it)."""
    mice = [{"name": "web", "share": 1.0, "mice": True}]
    a = aqmchain.simulate(model({"p_max": 0.5, "modified": variant, "w": 0.2}, mice), **SIM)
    b = aqmchain.simulate(model({"p_max": 0.0, "w": 0.2}, mice), **SIM)
    same(a, b)
    assert a.loss_aqm > 0 and a.classes["web"].loss_pushed_out == 0.0


def test_modified_red_spares_mice_and_ecn():
    classes = [{"name": "web", "share": 0.2, "mice": True}, {"name": "ecn", "share": 0.2, "ecn": 1.0},
               {"name": "ftp", "share": 0.6}]
    r = aqmchain.simulate(model({"modified": "front", "w": 0.2}, classes), **SIM)
    web, ecn, ftp = (r.classes[n] for n in ("web", "ecn", "ftp"))
    assert web.mark_prob == 0.0 and ftp.mark_prob == 0.0 and ftp.loss_aqm > 0
    # protected packets are never pushed out by the front search (an elephant always exists when it runs)
    assert web.loss_pushed_out == 0.0 and ecn.loss_pushed_out == 0.0
    assert ftp.loss_pushed_out > 0
    assert web.loss < ftp.loss / 2 and ecn.loss < ftp.loss / 2
    plain = aqmchain.simulate(model({"w": 0.2}, classes), **SIM)
    # plain RED marks ECN-capable arrivals instead of dropping them, and drops mice like elephants
    assert plain.classes["ecn"].mark_prob > 0 and plain.classes["ecn"].loss_pushed_out == 0.0
    assert abs(plain.classes["web"].loss - plain.classes["ftp"].loss) < 4 * (plain.classes["web"].ci["loss"]
                                                                             + plain.classes["ftp"].ci["loss"])
    assert web.mean_response < plain.classes["web"].mean_response


def test_flow_comparison_with_one_flow_closed_form():
    """min_th = 0 and p_max = 0 below max_th = N: every arrival that finds a waiting packet
    loses itself and that packet (one flow: every comparison matches), so n never exceeds
    2 and the chain on n in {0, 1, 2} is written here."""
    a, mu = 0.6, 0.3
    m = model({"min_th": 0, "max_th": 6, "p_max": 0.0, "flow_compare": True},
              model={"buffer": 6}, source={"alpha": a}, service={"mu": mu})
    P = np.array([[1 - a, a, 0],
                  [(1 - a) * mu, a * mu + (1 - a) * (1 - mu), a * (1 - mu)],
                  [a * mu, a * (1 - mu) + (1 - a) * mu, (1 - a) * (1 - mu)]])
    w, v = np.linalg.eig(P.T)
    pi = np.real(v[:, np.argmin(abs(w - 1))])
    pi /= pi.sum()
    r = aqmchain.simulate(m, slots=1_000_000, replications=2, seed=5, threads=1)
    expect = {"mean_system": pi[1] + 2 * pi[2], "loss_flow_compare": 2 * pi[2], "loss": 2 * pi[2],
              "throughput": mu * (pi[1] + pi[2]), "loss_aqm": 0.0, "loss_overflow": 0.0}
    for n, v in expect.items():
        assert abs(getattr(r, n) - v) <= 4 * r.ci[n] + 1e-12, (n, getattr(r, n), v, r.ci[n])
    assert r.system_pmf[3:].sum() == 0.0
    c = r.classes["all"]
    assert c.loss_flow_compare == pytest.approx(r.loss_flow_compare, rel=1e-12) and c.loss_pushed_out == 0.0


def test_flow_comparison_hits_the_heavy_flow():
    """The shape of "FDynamicAutoRED: An Algorithm to Stabilize the Queue in Internet Routers": ten
    light flows and one heavy one; the comparison takes more from the heavy flow."""
    classes = [{"name": "light", "share": 0.5, "flows": 10}, {"name": "heavy", "share": 0.5}]
    aqm = {"w": 0.2, "min_th": 3, "max_th": 12}
    red = aqmchain.simulate(model(aqm, classes), **SIM)
    fc = aqmchain.simulate(model({**aqm, "flow_compare": True}, classes), **SIM)
    assert fc.classes["heavy"].loss_flow_compare > 5 * fc.classes["light"].loss_flow_compare
    assert fc.classes["heavy"].throughput_share < red.classes["heavy"].throughput_share - 0.02
    assert fc.fairness > red.fairness
    assert red.loss_flow_compare == 0.0 and fc.loss_flow_compare > 0


def test_fairness_of_equal_flows_is_one():
    r = aqmchain.simulate(model(None, [{"name": "x", "share": 1.0, "flows": 8}]), **SIM)
    assert 1 - r.fairness < 2e-3 and r.fairness <= 1.0
    w = aqmchain.simulate(model(None, [{"name": "x", "share": 1.0, "flows": 2, "flow_weights": [0.8, 0.2]}]), **SIM)
    # throughputs in the ratio 4 : 1 give (5)^2 / (2 (16 + 1)) = 0.735...
    assert abs(w.fairness - 25 / 34) <= 4 * w.ci["fairness"] + 1e-3


def test_mmbp_shares_per_modulator_state():
    doc_src = {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.3, 0.7]], "arrival": [0.2, 0.8]}
    classes = [{"name": "a", "share": [1.0, 0.0]}, {"name": "b", "share": [0.0, 1.0]}]
    r = aqmchain.simulate(model(None, classes, source=doc_src), **SIM)
    pi = np.array([0.75, 0.25])
    rates = pi * np.array([0.2, 0.8])
    for c, lam in zip(("a", "b"), rates):
        assert abs(r.classes[c].arrival_rate - lam) <= 4 * r.classes[c].ci["arrival_rate"] + 1e-9


@pytest.mark.parametrize("discretised", [False, True])
def test_fdynamic_autored_one_class_is_the_stateful_loop(discretised):
    """AutoRED's weight with dynamic max_th (the band reached: p_max = 0.7): the class loop
    reads P_t as the stateful loop does, draw for draw."""
    aqm = {"weight": "autored", "dynamic_max_th": True, "p_max": 0.7, "max_th_growth": 0.4, "w": 0.01}
    a = aqmchain.simulate(model(aqm), discretised=discretised, **SIM)
    b = aqmchain.simulate(model(aqm, [{"name": "all", "share": 1.0}]), discretised=discretised, **SIM)
    same(a, b, ALL + ("mean_max_th",))
    assert a.mean_max_th > 12.0


def test_fdynamic_autored_with_flow_comparison_simulated_and_solved():
    aqm = {"weight": "autored", "dynamic_max_th": True, "flow_compare": True, "p_max": 0.7, "max_th_growth": 0.4}
    m = model(aqm, [{"name": "tcp", "share": 0.7, "flows": 5}, {"name": "udp", "share": 0.3}])
    r = aqmchain.simulate(m, **SIM)
    assert r.mean_max_th >= 12 and r.loss_flow_compare > 0 and 0 < r.fairness <= 1
    assert r.classes["udp"].loss_flow_compare > r.classes["tcp"].loss_flow_compare
    # the two-class chain carries cur_max_th beside the classes (docs/classes.md): the same
    # law of cur_max_th, and the flow comparison hits the single-flow class harder
    c = aqmchain.solve_stationary(m)
    assert c.class_chain == "approx" and "maxth_index" in c.state_labels()
    assert abs(c.mean_max_th - r.mean_max_th) <= 4 * r.ci["mean_max_th"]
    assert c.classes["udp"].loss_flow_compare > 1.5 * c.classes["tcp"].loss_flow_compare


def test_bad_input_names_the_key():
    doc = copy.deepcopy(DOC)
    doc["class"] = [{"name": "a", "share": 0.5}, {"name": "b", "share": 0.6}]
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "class.share" and "1.1" in str(e.value)
    doc["class"] = [{"name": "a", "share": 0.5}, {"name": "a", "share": 0.5}]
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "class[1].name"
    doc["class"] = [{"name": "a", "share": 1.0}]
    doc["aqm"]["ecn"] = 0.5
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "aqm.ecn"
    doc = copy.deepcopy(DOC)
    doc["aqm"].update(drop="dsred", k_l=2, k_h=8, gamma=0.5, modified="front")
    for k in ("min_th", "max_th", "p_max"):
        doc["aqm"].pop(k)
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.model_from_dict(doc)
    assert e.value.param == "aqm.modified"
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.TrafficClass("a b", 1.0)
    assert e.value.param == "class.name"
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.Model(buffer=10, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.5),
                       classes=["a"])
    assert e.value.param == "class[0]"


def test_scenario_phases_must_share_the_flows():
    two = model(None, [{"name": "a", "share": 0.5}, {"name": "b", "share": 0.5, "flows": 2}])
    one = model(None, [{"name": "a", "share": 1.0}])
    sc = aqmchain.Scenario([aqmchain.Phase(100, two), aqmchain.Phase(100, one)])
    with pytest.raises(aqmchain.ModelError) as e:
        aqmchain.simulate_scenario(sc, [50, 150], replications=2, threads=1)
    assert e.value.param == "phase[1].class"
    ok = aqmchain.Scenario([aqmchain.Phase(2000, two), aqmchain.Phase(2000, model({"flow_compare": True},
                                                                                  [{"name": "a", "share": 0.2},
                                                                                   {"name": "b", "share": 0.8,
                                                                                    "flows": 2}]))])
    r = aqmchain.simulate_scenario(ok, [1000, 4000], replications=4, threads=1)
    assert np.all(np.isfinite(r.mean_queue))


def test_json_and_round_trip(tmp_path):
    m = model({"modified": "random", "policy": "random"},
              [{"name": "web", "share": 0.3, "mice": True}, {"name": "ftp", "share": 0.7, "ecn": 0.4, "flows": 2,
                                                             "flow_weights": [0.25, 0.75]}])
    doc = aqmchain.model_to_dict(m)
    assert aqmchain.model_from_dict(doc)[0].classes[1].flow_weights == [0.25, 0.75]
    d = aqmchain.simulate(m, **SIM).to_dict()
    json.dumps(d, allow_nan=False)
    assert set(d["classes"]) == {"web", "ftp"}
    web = d["classes"]["web"]
    for key in aqmchain.CLASS_METRICS + ("response_pmf", "ci"):
        assert key in web, key
    assert len(d["flows"]) == 3 and "fairness" in d and "fairness" in d["ci"]


def test_cli_simulate_writes_classes(tmp_path, root):
    out = tmp_path / "r.json"
    code, stdout, stderr = run_cli("simulate", root / "examples" / "classes" / "flows.toml", "--slots", "200000",
                                   "--replications", "2", "--json", out)
    assert code == 0, stderr
    d = json.loads(out.read_text())
    assert set(d["classes"]) == {"tcp", "udp"} and len(d["flows"]) == 21
    assert d["classes"]["udp"]["loss_flow_compare"] > d["classes"]["tcp"]["loss_flow_compare"]
    assert "fairness" in stdout and "udp" in stdout


def test_random_search_may_take_a_protected_packet_front_never():
    classes = [{"name": "web", "share": 0.5, "mice": True}, {"name": "ftp", "share": 0.5}]
    front = aqmchain.simulate(model({"modified": "front", "w": 0.2}, classes), **SIM)
    rand = aqmchain.simulate(model({"modified": "random", "w": 0.2}, classes), **SIM)
    assert front.classes["web"].loss_pushed_out == 0.0
    # three picks all protected: about E[(1 - elephant fraction)^3] of the searches take a mice packet
    assert rand.classes["web"].loss_pushed_out > 10 * rand.classes["web"].ci["loss_pushed_out"] > 0
    assert rand.classes["web"].loss_pushed_out < rand.classes["ftp"].loss_pushed_out / 2
    # the search does not change how many packets are lost, only whose
    close(front, rand, "loss")
    close(front, rand, "mean_queue")


def test_scenario_phase_may_change_the_mice_flag():
    a = model({"modified": "front"}, [{"name": "web", "share": 0.3, "mice": True}, {"name": "ftp", "share": 0.7}])
    b = model({"modified": "front"}, [{"name": "web", "share": 0.3}, {"name": "ftp", "share": 0.7, "mice": True}])
    sc = aqmchain.Scenario([aqmchain.Phase(3000, a), aqmchain.Phase(3000, b), aqmchain.Phase(3000, a)])
    r = aqmchain.simulate_scenario(sc, [3000, 6000, 9000], replications=8, threads=1)
    assert np.all(np.isfinite(r.mean_queue)) and np.all(r.loss_rate >= 0)


def test_per_class_ecn_against_the_classless_chain():
    """Class draws are independent of the state: with one class always ECN-capable (share e)
    and one never, the chain of the classless model with aqm.ecn = e gives each class's
    numbers: the ECN class is marked at mark_prob / e, the other dropped at loss_aqm / (1 - e),
    both see the aggregate overflow; the served mix has the chain's response time."""
    e = 0.3
    top = {"model": {"buffer": 12}, "grid": {"k": 2, "refine": "none"}}
    plain = model({"ecn": e, "w": 0.2, "min_th": 2, "max_th": 8, "p_max": 0.3}, **top)
    chain = aqmchain.solve_stationary(plain)
    classes = [{"name": "ecn", "share": e, "ecn": 1.0}, {"name": "plain", "share": 1 - e}]
    r = aqmchain.simulate(model({"w": 0.2, "min_th": 2, "max_th": 8, "p_max": 0.3}, classes, **top),
                          discretised=True, slots=1_000_000, replications=2, seed=3, threads=1)
    a, b = r.classes["ecn"], r.classes["plain"]
    expect = [(a, "mark_prob", chain.mark_prob / e), (a, "loss_aqm", 0.0), (b, "mark_prob", 0.0),
              (b, "loss_aqm", chain.loss_aqm / (1 - e)), (a, "loss_overflow", chain.loss_overflow),
              (b, "loss_overflow", chain.loss_overflow), (a, "throughput", e * chain.throughput * (1 - chain.loss_overflow)
                                                                           / (1 - chain.loss)),
              (b, "throughput", (1 - e) * chain.throughput * (1 - chain.loss_aqm / (1 - e) - chain.loss_overflow)
                                / (1 - chain.loss))]
    for c, name, v in expect:
        assert abs(getattr(c, name) - v) <= 4 * c.ci[name] + 1e-12, (c.name, name, getattr(c, name), v, c.ci[name])
    # marked packets enter at high occupancy: the ECN class waits longer; the mix is the chain's
    assert a.mean_response > b.mean_response
    mix = (a.throughput * a.mean_response + b.throughput * b.mean_response) / (a.throughput + b.throughput)
    assert abs(mix - chain.mean_response) <= 4 * r.ci["mean_response"]


# ---------------------------------------------------------------- an exact oracle on FIFO strings
def string_chain(N, a, mu, labels, fate):
    """Stationary law of the FIFO's label string (head first) when the AQM's action does not
    depend on avg: written here from the rules of docs/classes.md.  fate(s, l) lists
    (probability, string after the arrival's fate, {label: packets lost}); the packet in
    service at the start of the slot then leaves with probability mu.  Returns the states,
    pi and the expected losses per slot by label."""
    index, states, rows = {(): 0}, [()], []
    k = 0
    while k < len(states):
        s = states[k]
        out, loss = {}, {}
        branches = [(1 - a, s, {})] + [(a * pl * pf, s2, lo) for l, pl in labels.items() for pf, s2, lo in fate(s, l)]
        for p, s2, lo in branches:
            for lab, cnt in lo.items():
                loss[lab] = loss.get(lab, 0.0) + p * cnt
            for pd, s3 in (((mu, s2[1:]), (1 - mu, s2)) if s else ((1.0, s2),)):
                if s3 not in index:
                    index[s3] = len(states)
                    states.append(s3)
                out[index[s3]] = out.get(index[s3], 0.0) + p * pd
        rows.append((out, loss))
        k += 1
    P = np.zeros((len(states), len(states)))
    for i, (out, _) in enumerate(rows):
        for j, p in out.items():
            P[i, j] += p
    A = np.vstack([P.T - np.eye(len(states)), np.ones(len(states))])
    pi = np.linalg.lstsq(A, np.r_[np.zeros(len(states)), 1.0], rcond=None)[0]
    lost = {l: sum(pi[i] * rows[i][1].get(l, 0.0) for i in range(len(states))) for l in labels}
    return states, pi, lost


def modified_fate(N, variant, p):
    def fate(s, l):
        if len(s) == N:
            return [(1.0, s, {l: 1})]
        return [(1 - p, s + (l,), {})] + [(p * q, s2, lo) for q, s2, lo in decided(s, l)]

    def decided(s, l):
        w = len(s) - 1
        eles = [j for j in range(1, len(s)) if s[j] == "E"]
        if not eles:  # no elephant waits: mice admitted, an elephant arrival dropped
            return [(1.0, s + (l,), {})] if l == "M" else [(1.0, s, {"E": 1})]
        if variant == "front":
            j = eles[0]
            return [(1.0, s[:j] + s[j + 1:] + (l,), {"E": 1})]
        r = (w - len(eles)) / w  # a pick is not an elephant
        out = []
        for j in range(1, len(s)):
            pj = (1 + r + r * r) / w if s[j] == "E" else r * r / w
            if pj > 0:
                out.append((pj, s[:j] + s[j + 1:] + (l,), {s[j]: 1}))
        return out
    return fate


def compare_strings(r, states, pi, lost, shares, a, names):
    for lab, name in names.items():
        c = r.classes[name]
        exp_loss = lost[lab] / (a * shares[lab])
        exp_n = sum(p * s.count(lab) for s, p in zip(states, pi))
        assert abs(c.loss - exp_loss) <= 4 * c.ci["loss"] + 1e-12, (name, "loss", c.loss, exp_loss, c.ci["loss"])
        assert abs(c.mean_queue - exp_n) <= 4 * c.ci["mean_queue"] + 1e-12, (name, c.mean_queue, exp_n)


@pytest.mark.parametrize("variant", ["front", "random"])
def test_modified_red_against_the_string_chain(variant):
    """p = 0.5 below max_th = N (polynomial with c_0 = 0.5): an arrival meets an early decision
    with probability 0.5 whatever avg, so the FIFO's mice/elephant string is a Markov chain
    (all 127 strings of length <= 6)."""
    N, a, mu, sm = 6, 0.7, 0.5, 0.4
    states, pi, lost = string_chain(N, a, mu, {"M": sm, "E": 1 - sm}, modified_fate(N, variant, 0.5))
    assert len(states) == 127
    m = model({"drop": "polynomial", "min_th": 0, "max_th": N, "coeffs": [0.5], "modified": variant,
               "p_max": None}, [{"name": "web", "share": sm, "mice": True}, {"name": "ftp", "share": 1 - sm}],
              model={"buffer": N}, source={"alpha": a}, service={"mu": mu})
    r = aqmchain.simulate(m, slots=1_000_000, replications=2, seed=9, threads=1)
    compare_strings(r, states, pi, lost, {"M": sm, "E": 1 - sm}, a, {"M": "web", "E": "ftp"})


def test_flow_comparison_against_the_string_chain():
    """Two flows (one per class), min_th = 0 and p = 0 below max_th = N: every arrival that
    finds a waiting packet is compared with a uniform one of them."""
    N, a, mu, sa = 6, 0.7, 0.45, 0.7

    def fate(s, l):
        if len(s) == N:
            return [(1.0, s, {l: 1})]
        if len(s) <= 1:
            return [(1.0, s + (l,), {})]
        w = len(s) - 1
        return [(1 / w, s[:j] + s[j + 1:], {l: 2}) if s[j] == l else (1 / w, s + (l,), {})
                for j in range(1, len(s))]

    states, pi, lost = string_chain(N, a, mu, {"A": sa, "B": 1 - sa}, fate)
    m = model({"min_th": 0, "max_th": N, "p_max": 0.0, "flow_compare": True},
              [{"name": "heavy", "share": sa}, {"name": "light", "share": 1 - sa}],
              model={"buffer": N}, source={"alpha": a}, service={"mu": mu})
    r = aqmchain.simulate(m, slots=1_000_000, replications=2, seed=4, threads=1)
    compare_strings(r, states, pi, lost, {"A": sa, "B": 1 - sa}, a, {"A": "heavy", "B": "light"})
    assert r.classes["heavy"].loss_flow_compare > r.classes["light"].loss_flow_compare


@pytest.mark.parametrize("aqm", [
    {"modified": "front", "policy": "random"},
    {"modified": "random", "policy": "front", "spacing": "count"},
    {"flow_compare": True, "adaptive": True, "interval": 500},
    {"flow_compare": True, "modified": "random", "spacing": "wait", "policy": "random"},
    {"flow_compare": True, "weight": "autored", "dynamic_max_th": True, "p_max": 0.7, "update": "per_arrival"},
])
@pytest.mark.parametrize("discretised", [False, True])
def test_accounts_add_up(aqm, discretised):
    """Every lost packet is counted once: per class by the packet's class, at the top by the
    decision (one packet each, two for a flow-comparison match)."""
    classes = [{"name": "web", "share": 0.3, "mice": True, "ecn": 0.5, "flows": 2},
               {"name": "ftp", "share": 0.7, "ecn": 0.3, "flows": 3}]
    src = {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.3, 0.7]], "arrival": [0.3, 0.9]}
    r = aqmchain.simulate(model(aqm, classes, source=src), discretised=discretised, slots=200_000, replications=2,
                          seed=2, threads=1)
    cs = r.classes.values()
    # each side is the same integer counts over the same slots, a few roundings apart: per class
    # two (rate, ratio) and one product, then a sum of two; at most 2 x 4 roundings (RATIO_EPS);
    # a count of 0 gives 0 on both sides exactly
    lost = sum(c.arrival_rate * c.loss for c in cs)
    assert lost == pytest.approx(r.arrival_rate * r.loss, rel=RATIO_EPS, abs=0.0)
    assert sum(c.arrival_rate * c.mark_prob for c in cs) == pytest.approx(r.arrival_rate * r.mark_prob, rel=RATIO_EPS,
                                                                        abs=0.0)
    assert sum(c.arrival_rate * c.loss_flow_compare for c in cs) == pytest.approx(
        r.arrival_rate * r.loss_flow_compare, rel=RATIO_EPS, abs=0.0)
    assert sum(c.throughput for c in cs) == pytest.approx(r.throughput, rel=1e-12)
    assert sum(f["throughput"] for f in r.flows) == pytest.approx(r.throughput, rel=1e-12)
    assert sum(c.mean_queue for c in cs) == pytest.approx(r.mean_system, rel=1e-12)
    for name, c in r.classes.items():
        fl = [f for f in r.flows if f["class"] == name]
        assert sum(f["throughput"] for f in fl) == pytest.approx(c.throughput, rel=1e-12)
