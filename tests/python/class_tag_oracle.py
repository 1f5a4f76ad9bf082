"""Exact per-class response times under modified RED and the flow comparison, in plain Python.

Written from the rules of docs/classes.md on the FIFO's actual content (the exact sequence
chain), without calling the aqmchain builder: a state is (packets, avg index, modulator), each
packet a tuple (class, flow, ECN bit, tagged) in FIFO order, position 0 in service.  The tagged
packet's response time follows from the absorbing chain of the states that hold it: the slot
either serves it (absorbed: served), discards it (absorbed: lost) or moves it.  Its mean given
service is v0 (I - Q)^-1 u / v0 u with u = P(served) (sparse LU), v0 its law at the end of
its arrival slot.  Plain RED only (no stateful AQM); slot order of oracle.py (filter, modulator,
arrival, the AQM, departure).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla

from oracle import drop_prob, filter_weight, grid_map, grid_points, source_matrices

SERVED, LOST = "served", "lost"


def _slot(spec: dict, state, pts, M, lam, tag_class=None) -> dict:
    """Next-state law of one slot; `tag_class`: arrivals of that class are tagged."""
    N, mu = spec["buffer"], spec["mu"]
    classes = spec["classes"]
    policy = spec.get("policy", "tail")
    modified = spec.get("modified", "none")
    fc = spec.get("flow_compare", False)
    seq, g, m = state
    n = len(seq)
    w = max(n - 1, 0)
    wq = filter_weight(spec, pts[g], w)
    y = (1 - wq) * pts[g] + wq * w
    out: dict = {}

    def elephant(pkt) -> bool:
        return not classes[pkt[0]].get("mice", False) and not pkt[2]

    def finish(p, packets, g2, m2, lost_tag=False):
        if p <= 0:
            return
        if lost_tag:
            out[LOST] = out.get(LOST, 0.0) + p
            return
        outs = [(1.0, False)] if n == 0 or mu == 0 else [(1 - mu, False), (mu, True)]
        for pd, dep in outs:
            if pd <= 0:
                continue
            rest = packets
            if dep:
                if packets[0][3]:
                    out[SERVED] = out.get(SERVED, 0.0) + p * pd
                    continue
                rest = packets[1:]
            key = (rest, g2, m2)
            out[key] = out.get(key, 0.0) + p * pd

    def remove(p, i, arrival, g2, m2, admit=True):
        """Discard waiting position i; the arrival joins behind when `admit`."""
        victim = seq[i]
        rest = seq[:i] + seq[i + 1:] + ((arrival,) if admit else ())
        finish(p, rest, g2, m2, lost_tag=victim[3])

    def policy_drop(p, arrival, g2, m2):
        if policy == "tail" or w == 0:
            finish(p, seq, g2, m2)
        elif policy == "front":
            remove(p, 1, arrival, g2, m2)
        else:
            for i in range(1, n):
                remove(p / w, i, arrival, g2, m2)

    for m2 in range(len(lam)):
        if M[m, m2] == 0:
            continue
        for g2, pg in grid_map(pts, spec["mapping"], y):
            base = M[m, m2] * pg
            a = lam[m2]
            finish(base * (1 - a), seq, g2, m2)
            if a == 0:
                continue
            avg = pts[g2]
            for ci, cls in enumerate(classes):
                share = cls["share"][m2] if isinstance(cls["share"], list) else cls["share"]
                F = cls.get("flows", 1)
                weights = cls.get("flow_weights") or [1.0 / F] * F
                ecn = cls.get("ecn", 0.0)
                for f, pf in enumerate(weights):
                    for bit, pb in ((0, 1 - ecn), (1, ecn)):
                        pv = base * a * share * pf * pb
                        if pv <= 0:
                            continue
                        # the FIFO keeps what the rules read: the flow under the comparison, the
                        # ECN bit under modified RED
                        keep_bit = modified != "none" and not cls.get("mice", False) and 0 < ecn < 1
                        arrival = (ci, f if fc else 0, bit if keep_bit else int(ecn >= 1), ci == tag_class)
                        if n == N:
                            policy_drop(pv, arrival, g2, m2)
                            continue
                        go = pv
                        if fc and avg >= spec["min_th"] and w >= 1:
                            for i in range(1, n):
                                if seq[i][:2] == (ci, f):  # same class and flow: both lost
                                    remove(pv / w, i, arrival, g2, m2, admit=False)
                                    go -= pv / w
                        pd = drop_prob(spec, avg, N)
                        finish(go * (1 - pd), seq + (arrival,), g2, m2)
                        dec = go * pd
                        if dec <= 0:
                            continue
                        if modified == "none":
                            if bit:
                                finish(dec, seq + (arrival,), g2, m2)  # marked
                            else:
                                policy_drop(dec, arrival, g2, m2)
                        elif avg < spec["max_th"]:
                            els = [i for i in range(1, n) if elephant(seq[i])]
                            if not els:  # no elephant waits: a protected arrival enters
                                if bit or cls.get("mice", False):
                                    finish(dec, seq + (arrival,), g2, m2)
                                else:
                                    finish(dec, seq, g2, m2)
                            elif modified == "front":
                                remove(dec, els[0], arrival, g2, m2)
                            else:  # three uniform picks with replacement: an elephant is taken at
                                # pick j after j - 1 misses, a protected packet only as the third pick
                                miss = 1 - len(els) / w
                                for i in range(1, n):
                                    pi_ = (1 + miss + miss**2) / w if i in els else miss**2 / w
                                    remove(dec * pi_, i, arrival, g2, m2)
                        else:
                            policy_drop(dec, arrival, g2, m2)
    return out


def _explore(start: list, row):
    """The states reachable from `start` under `row`, sorted, and the sparse matrix over them."""
    seen, todo, rows = set(start), list(start), {}
    while todo:
        s = todo.pop()
        rows[s] = row(s)
        for t in rows[s]:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    states = sorted(seen)
    index = {s: i for i, s in enumerate(states)}
    rr, cc, vv = [], [], []
    for s, r in rows.items():
        for t, p in r.items():
            rr.append(index[s]), cc.append(index[t]), vv.append(p)
    return states, sp.csr_matrix((vv, (rr, cc)), shape=(len(states), len(states)))


def exact_class_response(spec: dict) -> dict:
    """{class index: (mean R, var R, P(pushed out), admitted rate)} of each class's served packets."""
    pts = grid_points(spec["buffer"], spec.get("k", 4), spec["mapping"])
    M, lam = source_matrices(spec["source"])
    states, P = _explore([((), 0, m) for m in range(len(lam))], lambda s: _slot(spec, s, pts, M, lam))
    A = (P.T - sp.identity(len(states))).tolil()
    A[0, :] = 1.0
    rhs = np.zeros(len(states))
    rhs[0] = 1.0
    pi = sla.spsolve(A.tocsc(), rhs)
    out = {}
    for ci in range(len(spec["classes"])):
        v0: dict = {}
        for s, p in zip(states, pi):
            for t, q in _slot(spec, s, pts, M, lam, tag_class=ci).items():
                if t not in (SERVED, LOST) and any(x[3] for x in t[0]):
                    v0[t] = v0.get(t, 0.0) + p * q
        # the tagged states reachable from the initial law
        seen, todo, rows = set(v0), list(v0), {}
        while todo:
            s = todo.pop()
            rows[s] = _slot(spec, s, pts, M, lam)
            for t in rows[s]:
                if t not in (SERVED, LOST) and t not in seen:
                    seen.add(t)
                    todo.append(t)
        tagged = sorted(seen)
        idx = {s: i for i, s in enumerate(tagged)}
        rr, cc, vv = [], [], []
        served = np.zeros(len(tagged))
        for s, r in rows.items():
            for t, q in r.items():
                if t == SERVED:
                    served[idx[s]] += q
                elif t != LOST:
                    rr.append(idx[s]), cc.append(idx[t]), vv.append(q)
        Q = sp.csr_matrix((vv, (rr, cc)), shape=(len(tagged), len(tagged)))
        x0 = np.zeros(len(tagged))
        for s, p in v0.items():
            x0[idx[s]] = p
        admitted = x0.sum()
        x0 /= admitted
        lu = sla.splu((sp.identity(len(tagged)) - Q).tocsc())
        u = lu.solve(served)     # P(served) from each state
        t1 = lu.solve(u)         # E[R 1{served}]
        t2 = lu.solve(u + 2 * (t1 - u))  # E[R^2 1{served}]: R^2 = sum (2 r - 1)
        ps = x0 @ u
        mean = x0 @ t1 / ps
        out[ci] = (mean, x0 @ t2 / ps - mean**2, 1 - ps, admitted)
    return out
