"""ns-3 semantics (docs/ns3.md): the chain against a generator written here from ns-3's rules.

The oracle re-implements, in plain Python on small models, the rules of ns-3's
RedQueueDisc as docs/ns3.md states them (per-arrival EWMA, the idle period's law from
scipy's matrix exponential, count/wait spacing, m_old, nQueued > 1, forced drops, ECN and
hard drop) and the split mapping onto the avg grid, builds the generator with its own
state numbering and solves it with a sparse LU. The chain must give the same metrics.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import aqmchain
from aqmchain import ModelError

SNAP = 1e-12
EPS = float(np.finfo(float).eps)


def p_of(kind, lo, hi, pmax, a):
    if a < lo:
        return 0.0
    x = (a - lo) / (hi - lo)
    if a < hi:
        return (1.5 * x * x if "nlred" in kind else x) * pmax
    if kind.startswith("gentle") and a < 2 * hi:
        return pmax + (1 - pmax) * (a - hi) / hi
    return 1.0


def split(points, y):
    """[(index, probability)] of the split mapping (mean kept)."""
    if y <= points[0]:
        return [(0, 1.0)]
    if y >= points[-1]:
        return [(len(points) - 1, 1.0)]
    i = int(np.searchsorted(points, y, side="right")) - 1
    a, b = points[i], points[i + 1]
    plo = (b - y) / (b - a)
    if plo >= 1 - SNAP:
        return [(i, 1.0)]
    if plo <= SNAP:
        return [(i + 1, 1.0)]
    return [(i, plo), (i + 1, 1 - plo)]


def idle_law(Q, lam, ptc, kmax=4000):
    """law[i][j][k] = P(floor(ptc T) = k | idle from modulator i, arrival in j)."""
    M = len(lam)
    D0 = np.array(Q, dtype=float) - np.diag(lam)
    tau = 1.0 / ptc
    E = scipy.linalg.expm(D0 * tau)
    H = np.linalg.solve(D0.T, (E - np.eye(M)).T).T  # (E - I) D0^{-1}
    law = []
    Ek = np.eye(M)
    while len(law) < kmax and Ek.sum(axis=1).max() > 1e-17:  # P(idle longer than k tau) from every state
        law.append((Ek @ H) * np.asarray(lam)[None, :])
        Ek = Ek @ E
    law = np.stack(law, axis=2)
    return law / law.sum(axis=2, keepdims=True)


def oracle(N, points, kind, lo, hi, pmax, w, Q, lam, mu, spacing="wait", ecn=0.0, hard=True, ptc=None,
           idle=True):
    points = np.asarray(points, dtype=float)
    G, M = len(points), len(lam)
    ptc = mu if ptc is None else ptc
    pb = [p_of(kind, lo, hi, pmax, a) for a in points]
    pos = [p for p in pb if p > 0]
    reach = 2.0 if spacing == "wait" else 1.0
    C = int(math.ceil(reach / min(pos))) + 2 if spacing != "none" and pos else 1
    law = idle_law(Q, lam, ptc) if idle else None
    index, rows = {}, []

    def sid(s):
        if s not in index:
            index[s] = len(index)
            rows.append(s)
        return index[s]

    trans, ev = [], {}
    sid((0, 0, 0, -1, 0))
    k = 0
    while k < len(rows):
        n, g, m, c, i0 = s = rows[k]  # c = -1: old = 0; else old = 1 with count c
        me = sid(s)
        e = dict(arrival=0.0, aqm=0.0, mark=0.0, overflow=0.0, admit=0.0)

        def add(t, r):
            if r > 0:
                trans.append((me, sid(t), r))

        for m2 in range(M):
            if m2 != m:
                add((n, g, m2, c, i0), Q[m][m2])
        if n >= 1:
            add((n - 1, g, m, c, m if n == 1 else 0), mu)
        nq = max(n - 1, 0)
        if n == 0 and idle:
            ys = [(points[g] * (1 - w) ** (kk + 1), law[i0, m, kk]) for kk in range(law.shape[2])]
        else:
            ys = [((1 - w) * points[g] + w * nq, 1.0)]
        for y, py in ys:
            for g2, pg in split(points, y):
                r0 = lam[m] * py * pg
                if r0 <= 0:
                    continue
                e["arrival"] += r0
                cnt = min(c + 1, C) if c >= 0 else None
                outs = []  # (probability, c after, admitted, dropped, marked)
                if points[g2] >= lo and nq > 1:
                    p = pb[g2]
                    if p >= 1:
                        eh = 0.0 if hard else ecn
                        outs += [(eh, c if c < 0 else cnt, True, 0, 1), (1 - eh, c if c < 0 else cnt, False, 1, 0)]
                    elif c < 0:
                        outs.append((1.0, 1, True, 0, 0))
                    else:
                        x = cnt * p
                        if spacing == "wait":
                            pa = 0.0 if x < 1 else (p / (2 - x) if x < 2 else 1.0)
                        elif spacing == "count":
                            pa = p / (1 - x) if x < 1 else 1.0
                        else:
                            pa = p
                        pa = min(pa, 1.0)
                        outs += [(pa * ecn, 0, True, 0, 1), (pa * (1 - ecn), 0, False, 1, 0),
                                 (1 - pa, cnt, True, 0, 0)]
                else:
                    outs.append((1.0, -1, True, 0, 0))
                for po, c2, adm, dr, mk in outs:
                    r = r0 * po
                    if r <= 0:
                        continue
                    if spacing == "none" and c2 >= 0:
                        c2 = 0
                    e["aqm"] += r * dr
                    e["mark"] += r * mk
                    if adm and n < N:
                        e["admit"] += r
                        add((n + 1, g2, m, c2, 0), r)
                    else:
                        if adm:
                            e["overflow"] += r
                        add((n, g2, m, c2, 0 if n else i0), r)
        ev[me] = e
        k += 1
    S = len(rows)
    i, j, v = zip(*[(a, b, r) for a, b, r in trans if a != b])
    Gm = sp.coo_matrix((v, (i, j)), shape=(S, S)).tocsr()
    Gm = Gm - sp.diags(np.asarray(Gm.sum(axis=1)).ravel())
    A = Gm.T.tolil()
    A[0, :] = 1.0
    b = np.zeros(S)
    b[0] = 1.0
    pi = spla.spsolve(A.tocsc(), b)
    st = np.array(rows)
    E = {key: np.array([ev[s][key] for s in range(S)]) for key in ("arrival", "aqm", "mark", "overflow", "admit")}
    lam_bar = pi @ E["arrival"]
    return {"mean_queue": pi @ np.maximum(st[:, 0] - 1, 0), "mean_system": pi @ st[:, 0],
            "mean_avg": pi @ points[st[:, 1]], "loss": (pi @ (E["aqm"] + E["overflow"])) / lam_bar,
            "loss_aqm": (pi @ E["aqm"]) / lam_bar, "loss_overflow": (pi @ E["overflow"]) / lam_bar,
            "mark_prob": (pi @ E["mark"]) / lam_bar, "throughput": pi @ E["admit"]}


POINTS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
MMPP_Q = [[-0.3, 0.3], [0.7, -0.7]]
MMPP_L = [0.4, 1.6]

CASES = {
    # name: (source, drop kind, spacing, ecn, hard_drop, ptc, idle_correction)
    "poisson-red-wait": ("poisson", "red", "wait", 0.0, True, None, True),
    "mmpp-gentle-count-ecn": ("mmpp", "gentle_red", "count", 0.5, False, None, True),
    "poisson-nlred-none-no-idle": ("poisson", "nlred", "none", 0.0, True, None, False),
    "mmpp-gentle_nlred-wait-ptc": ("mmpp", "gentle_nlred", "wait", 0.3, True, 2.5, True),
}


def build(case, N=6, lo=1.0, hi=3.0, pmax=0.3, w=0.2, mu=1.0):
    src, kind, spacing, ecn, hard, ptc, idle = CASES[case]
    source = aqmchain.Source.poisson(0.9) if src == "poisson" else aqmchain.Source.mmpp(MMPP_Q, MMPP_L)
    drop = getattr(aqmchain.DropFunction, kind)(lo, hi, pmax) if hasattr(aqmchain.DropFunction, kind) else \
        aqmchain.DropFunction.make(kind, min_th=lo, max_th=hi, p_max=pmax)
    kw = dict(semantics="ns3", spacing=spacing, ecn=ecn, hard_drop=hard, idle_correction=idle, count_tail=0.0)
    if ptc:
        kw["ptc"] = ptc
    model = aqmchain.Model(buffer=N, time="continuous", source=source, service=aqmchain.Service.exponential(mu),
                           aqm=aqmchain.Aqm(drop=drop, w=w, **kw), grid=aqmchain.GridSpec(points=POINTS))
    lam = [0.9] if src == "poisson" else MMPP_L
    Q = [[0.0]] if src == "poisson" else MMPP_Q
    ref = oracle(N, POINTS, kind, lo, hi, pmax, w, Q, lam, mu, spacing, ecn, hard, ptc, idle)
    return model, ref


@pytest.mark.parametrize("case", sorted(CASES))
def test_chain_equals_the_generator_written_from_ns3s_rules(case):
    model, ref = build(case)
    r = aqmchain.solve_stationary(model, method="direct")
    # the direct solve's residual bounds its error; both sides solve to round-off
    tol = 1e-9
    assert r.count_tail_mass == 0.0
    for key, want in ref.items():
        got = getattr(r, key)
        assert abs(got - want) <= tol * max(1.0, abs(want)), (key, got, want)
    # the rules act: early decisions (and, where marked, marks) happen
    assert r.loss_aqm > 1e-4
    if CASES[case][3] > 0:
        assert r.mark_prob > 1e-4


def test_idle_correction_and_ptc_change_the_answer():
    """The idle correction lowers avg; a faster ptc lowers it more (each a real effect)."""
    base, _ = build("poisson-red-wait")
    a = aqmchain.solve_stationary(base, method="direct").mean_avg
    b = aqmchain.solve_stationary(base.replace(aqm={"idle_correction": False}), method="direct").mean_avg
    c = aqmchain.solve_stationary(base.replace(aqm={"ptc": 5.0}), method="direct").mean_avg
    assert c < a < b


@pytest.mark.parametrize("lam", [0.5, 1.3])
def test_no_early_drop_is_the_mm1n_queue(lam):
    """semantics = "ns3" with p_max = 0 (and max_th above every avg) is M/M/1/N (closed forms)."""
    N, mu = 12, 1.0
    m = aqmchain.Model(buffer=N, time="continuous", source=aqmchain.Source.poisson(lam),
                       service=aqmchain.Service.exponential(mu),
                       aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(3, N - 0.5, 0.0), w=0.05, semantics="ns3"),
                       grid=aqmchain.GridSpec(k=2))
    r = aqmchain.solve_stationary(m)
    rho = lam / mu
    p = rho ** np.arange(N + 1)
    p /= p.sum()
    bound = 1e3 * r.info.residual + 1e-13
    assert abs(r.loss - p[-1]) <= bound
    assert abs(r.mean_system - np.arange(N + 1) @ p) <= N * bound
    assert abs(r.mean_queue - np.maximum(np.arange(N + 1) - 1, 0) @ p) <= N * bound


NS3_FILE = """
[model]
time = "continuous"
[source]
kind = "poisson"
rate = 0.9
[service]
kind = "exponential"
mu = 1.0
[aqm]
{aqm}
[grid]
k = 2
refine = "none"
"""


def load(tmp_path, aqm_lines, model_extra=""):
    p = tmp_path / "m.toml"
    text = NS3_FILE.format(aqm=aqm_lines)
    if model_extra:
        text = text.replace('time = "continuous"', 'time = "continuous"\n' + model_extra)
    p.write_text(text)
    return aqmchain.load_model(p)


def test_ns3_attribute_names_give_the_native_model(tmp_path):
    ns = load(tmp_path, 'MinTh = 4\nMaxTh = 12\nLInterm = 20\nQW = 0.01\nGentle = false\nWait = false\n'
                        'MaxSize = "15p"\nUseEcn = true\nUseHardDrop = false\nLinkBandwidth = "1Mbps"\n'
                        'MeanPktSize = 1000')
    native = load(tmp_path, 'semantics = "ns3"\ndrop = "red"\nmin_th = 4\nmax_th = 12\np_max = 0.05\nw = 0.01\n'
                            'spacing = "count"\necn = 1.0\nhard_drop = false\nptc = 125.0', "buffer = 16")
    assert aqmchain.model_to_dict(ns) == aqmchain.model_to_dict(native)
    assert ns.buffer == 16 and ns.aqm.ptc == 125.0 and ns.aqm.drop.kind == "red"


def test_ns3_defaults_and_automatic_weight(tmp_path):
    m = load(tmp_path, 'Gentle = true', "buffer = 26")
    d = m.aqm.drop
    assert (d.kind, d.lo, d.hi, d.p_max, m.aqm.w, m.aqm.spacing) == ("gentle_red", 5.0, 15.0, 0.02, 0.002, "wait")
    m = load(tmp_path, 'QW = 0\nLinkBandwidth = "1.5Mbps"', "buffer = 26")
    # ns-3's 1 - exp(-1 / C): against -expm1 (no cancellation); 1 - exp(-x) rounded loses up to
    # about 2 eps / w of w relative to the exact value (the subtraction of two numbers near 1)
    w = -math.expm1(-1 / 375.0)
    assert m.aqm.w == pytest.approx(w, rel=4 * EPS / w)
    m = load(tmp_path, 'QW = -1\nLinkBandwidth = "1.5Mbps"\nLinkDelay = "20ms"', "buffer = 26")
    rtt = max(3 * (0.02 + 1 / 375.0), 0.1)
    w = -math.expm1(-1 / (10 * rtt * 375.0))
    assert m.aqm.w == pytest.approx(w, rel=4 * EPS / w)


@pytest.mark.parametrize("aqm, model_extra, key, text", [
    ('MinTh = 5\nmin_th = 5', "buffer = 26", "aqm.MinTh", "not both"),
    ('MaxSize = "25p"', "buffer = 26", "aqm.MaxSize", "not both"),
    ('ARED = true', "buffer = 26", "aqm.ARED", "not supported"),
    ('MaxSize = "3000B"', "", "aqm.MaxSize", "byte mode"),
    ('LinkBandwidth = "fast"', "buffer = 26", "aqm.LinkBandwidth", "data rate"),
    ('QW = 0', "buffer = 26", "aqm.QW", "LinkBandwidth"),
    ('semantics = "ns3"\nptc = -1', "buffer = 26", "aqm.ptc", "[0, 1e12]"),
    ('ptc = 3', "buffer = 26", "aqm.ptc", 'semantics = "ns3"'),
])
def test_bad_ns3_input_names_the_key(tmp_path, aqm, model_extra, key, text):
    with pytest.raises(ModelError, match=re.escape(text)) as e:
        load(tmp_path, aqm, model_extra)
    assert e.value.param == key


def test_ns3_semantics_needs_continuous_time():
    with pytest.raises(ModelError, match=r"aqm\.semantics.*continuous"):
        aqmchain.Model(buffer=10, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service.geometric(0.6),
                       aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(2, 6, 0.1), semantics="ns3"))


@pytest.mark.parametrize("spacing", ["wait", "count"])
def test_automatic_grids_presolve_truncates_ns3s_count_and_its_estimate_counts_the_start_caps(spacing):
    """The automatic grid's pre-solve of an ns-3 model caps its count as a slotted model's does:
    at min(start cap, 32) at each point of the uniform pre-solve grid (it only locates avg's
    mass; uncapped, it was the largest chain of the call).  The state estimate the grid is
    chosen by counts each pre-solve point's states times max(4, start cap / pre-solve cap)
    (docs/stateful-aqm.md), read at the refined point's nearest pre-solve point: written here
    from the pre-solve chain's own states."""
    m = aqmchain.Model(buffer=20, time="continuous", source=aqmchain.Source.poisson(1.0),
                       service=aqmchain.Service.exponential(1.0),
                       aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(3, 9, 0.02), w=0.05, semantics="ns3",
                                        spacing=spacing),
                       grid=aqmchain.GridSpec(k=2, refine="auto"))
    refined, report = aqmchain.refine_grid(m)
    k = m.grid.presolve_k
    pre = m.replace(grid={"k": k, "refine": "none"})
    start = np.asarray(aqmchain.stateful_info(pre.with_count_cap(1))["count_start_at"], dtype=float)
    cap = np.minimum(start, 32)
    capped = aqmchain.build_chain(pre.with_count_caps(cap.astype(int).tolist()))
    exact = aqmchain.build_chain(pre.with_count_cap(0))
    assert report["presolve_states"] == capped.n < exact.n
    assert start.max() > 4 * 32  # a point whose start cap sets the estimate's factor
    per_point = np.bincount(np.asarray(capped.grid_index), minlength=len(start)) * np.maximum(4.0, start / cap)
    x = np.asarray(refined.grid.points)
    at = np.clip(np.floor(x * k + 0.5).astype(int), 0, len(start) - 1)
    want = per_point[at].sum()
    assert report["estimated_states"] == pytest.approx(want, rel=len(x) * EPS)
