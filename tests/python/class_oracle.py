"""Independent dense construction of the two-class chain (docs/classes.md), in plain Python.

Written from the rules of the documentation (one slot of the queue, the drop policies, ECN
marking, modified RED's search, the flow comparison, the random-order approximation with
the class of the packet in service carried), without calling the aqmchain builder.  The
searches are computed differently from the C++ kernel on purpose: the first elephant met by
the front search is uniform among the elephants (a binomial sum, not a recursion), and the
three random trials are enumerated pick by pick.

State: (n, avg index, modulator, e = class-2 packets in the system, h = class of the packet
in service), h = e = 0 when the system is empty; classes are 0 and 1 here (1 = "class 2").
"""

from __future__ import annotations

import itertools
from math import comb

from oracle import drop_prob, explore_dense, grid_map, grid_points, source_matrices


def _binom(w: int, q: float) -> list[float]:
    return [comb(w, k) * q**k * (1 - q) ** (w - k) for k in range(w + 1)]


def _elephant_prob(cls: dict) -> float:
    return 0.0 if cls.get("mice", False) else 1.0 - cls.get("ecn", 0.0)


def front_search(w1: int, w2: int, q1: float, q2: float) -> tuple[float, float]:
    """P(the first waiting elephant from the head is of class 1), (... class 2)."""
    p1 = p2 = 0.0
    for e1, b1 in enumerate(_binom(w1, q1)):
        for e2, b2 in enumerate(_binom(w2, q2)):
            if e1 + e2:
                p1 += b1 * b2 * e1 / (e1 + e2)
                p2 += b1 * b2 * e2 / (e1 + e2)
    return p1, p2


def random_search(w1: int, w2: int, q1: float, q2: float) -> tuple[float, float]:
    """Three uniform trials with replacement, only when an elephant waits: P(victim of class 1), (2)."""
    w = w1 + w2
    p = [0.0, 0.0]
    for e1, b1 in enumerate(_binom(w1, q1)):
        for e2, b2 in enumerate(_binom(w2, q2)):
            if e1 + e2 == 0:
                continue
            # categories: (class, elephant) with their pick probabilities
            cats = [((0, True), e1 / w), ((0, False), (w1 - e1) / w), ((1, True), e2 / w), ((1, False), (w2 - e2) / w)]
            for seq in itertools.product(cats, repeat=3):
                pr = b1 * b2
                for _, pc in seq:
                    pr *= pc
                if pr == 0:
                    continue
                victim = next((c for (c, el), _ in seq if el), seq[2][0][0])
                p[victim] += pr
    return p[0], p[1]


def class_slot(spec: dict, state, pts, M, lam) -> dict:
    N, mu, w_f = spec["buffer"], spec["mu"], spec["w"]
    classes = spec["classes"]
    policy = spec.get("policy", "tail")
    modified = spec.get("modified", "none")
    fc = spec.get("flow_compare", False)
    n, g, m, e, h = state
    w = max(n - 1, 0)
    w2 = e - h if n >= 1 else 0
    w1 = w - w2
    y = (1 - w_f) * pts[g] + w_f * w
    same_flow = []
    for c in classes:
        F = c.get("flows", 1)
        wts = c.get("flow_weights") or [1.0 / F] * F
        same_flow.append(sum(x * x for x in wts))
    q = [_elephant_prob(c) for c in classes]
    if len(q) == 1:
        q.append(q[0])
    out: dict = {}

    def add(key, p):
        if p > 0:
            out[key] = out.get(key, 0.0) + p

    def finish(g2, m2, p, pre):
        # pre = (count, head class, old waiting class-1, old waiting class-2, arrival class or None)
        cnt, hh, a1, a2, arr = pre
        if n == 0 or mu == 0:
            outcomes = [(1.0, None)]
        else:
            outcomes = [(1 - mu, None), (mu, "dep")]
        for pd, what in outcomes:
            if pd == 0:
                continue
            if what is None:
                if cnt == 0:
                    add((0, g2, m2, 0, 0), p * pd)
                else:
                    add((cnt, g2, m2, hh + a2 + (arr == 1), hh), p * pd)
                continue
            c2 = cnt - 1
            if c2 == 0:
                add((0, g2, m2, 0, 0), p * pd)
            elif a1 + a2 == 0:  # the arrival enters service
                add((c2, g2, m2, arr, arr), p * pd)
            else:
                for nh, pn in ((0, a1 / (a1 + a2)), (1, a2 / (a1 + a2))):
                    if pn > 0:
                        rest2 = a2 - nh + (arr == 1)
                        add((c2, g2, m2, nh + rest2, nh), p * pd * pn)

    def joined(pre, c):
        cnt, hh, a1, a2, _ = pre
        if cnt == 0:
            return (1, c, 0, 0, None)
        return (cnt + 1, hh, a1, a2, c)

    def without(pre, k):
        cnt, hh, a1, a2, arr = pre
        return (cnt - 1, hh, a1 - (k == 0), a2 - (k == 1), arr)

    base_pre = (n, h, w1, w2, None)
    for m2 in range(len(lam)):
        pm = M[m, m2]
        if pm == 0:
            continue
        a = lam[m2]
        for g2, pg in grid_map(pts, spec["mapping"], y):
            wgt = pm * pg
            if a < 1:
                finish(g2, m2, wgt * (1 - a), base_pre)
            if a == 0:
                continue
            for ci, cls in enumerate(classes):
                share = cls["share"] if not isinstance(cls["share"], list) else cls["share"][m2]
                ecn = cls.get("ecn", 0.0)
                for bit, pb in ((0, 1 - ecn), (1, ecn)):
                    pv = wgt * a * share * pb
                    if pv <= 0:
                        continue

                    def victims(mass, rule):  # remove a waiting packet, admit the arrival
                        if rule == "uniform":
                            pk = (w1 / w, w2 / w)
                        elif rule == "front":
                            pk = front_search(w1, w2, q[0], q[1])
                        else:
                            pk = random_search(w1, w2, q[0], q[1])
                        for k in (0, 1):
                            if pk[k] > 0:
                                finish(g2, m2, mass * pk[k], joined(without(base_pre, k), ci))
                        return sum(pk)

                    def policy_drop(mass):
                        if policy == "tail" or w == 0:
                            finish(g2, m2, mass, base_pre)
                        else:  # oldest or uniform: both are class 2 w.p. w2 / w under random order
                            victims(mass, "uniform")

                    if n == N:
                        policy_drop(pv)
                        continue
                    avg = pts[g2]
                    go = pv
                    if fc and avg >= spec["min_th"] and w >= 1:
                        wk = (w1, w2)[ci] / w * same_flow[ci]
                        if wk > 0:
                            finish(g2, m2, pv * wk, without(base_pre, ci))
                        go = pv * (1 - wk)
                    pd = drop_prob(spec, avg, N)
                    finish(g2, m2, go * (1 - pd), joined(base_pre, ci))
                    dec = go * pd
                    if dec <= 0:
                        continue
                    if modified == "none":
                        if bit:
                            finish(g2, m2, dec, joined(base_pre, ci))
                        else:
                            policy_drop(dec)
                    elif avg < spec["max_th"]:
                        # a waiting elephant is discarded for any arrival; with none, a protected
                        # arrival enters (an ECN-capable one marked), an elephant arrival is dropped
                        found = victims(dec, modified) if w >= 1 else 0.0
                        rest = dec * (1 - found)
                        if rest > 1e-300:
                            if bit or cls.get("mice", False):
                                finish(g2, m2, rest, joined(base_pre, ci))
                            else:
                                finish(g2, m2, rest, base_pre)
                    else:
                        policy_drop(dec)
    return out


def class_chain(spec: dict):
    """(states sorted by (n, g, m, e, h), dense P) reachable from the empty system."""
    pts = grid_points(spec["buffer"], spec.get("k", 4), spec["mapping"])
    M, lam = source_matrices(spec["source"])
    return explore_dense([(0, 0, m, 0, 0) for m in range(len(lam))], lambda s: class_slot(spec, s, pts, M, lam))
