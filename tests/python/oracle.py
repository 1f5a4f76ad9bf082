"""Independent reference implementation of SPEC sections 2-4 for small models.

Written from the SPEC text alone, in plain Python, without calling the
aqmchain builder: drop functions, grid mappings and the slot of SPEC 3 are
re-implemented here.  Used as the oracle for the built transition matrix.
"""

from __future__ import annotations

import itertools
import math
from collections import deque

import numpy as np

SNAP = 1e-12  # SPEC-level convention shared with the builder: a value within 1e-12 of a cell from a point is on it


# ------------------------------------------------------------------ drop functions (SPEC 2.4)
def drop_prob(spec: dict, avg: float, buffer: int) -> float:
    kind = spec["drop"]
    if kind == "none":
        return 0.0
    if kind == "table":
        pts = spec["points"]
        if avg <= pts[0][0]:
            return pts[0][1]
        if avg >= pts[-1][0]:
            return pts[-1][1]
        for (a0, p0), (a1, p1) in zip(pts, pts[1:]):
            if a0 <= avg < a1:
                return p0 + (p1 - p0) * (avg - a0) / (a1 - a0)
    if kind == "dsred":
        kl, kh, g = spec["k_l"], spec["k_h"], spec["gamma"]
        km = (kl + kh) / 2
        if avg < kl:
            return 0.0
        if avg < km:
            return 2 * (1 - g) / (kh - kl) * (avg - kl)
        if avg < kh:
            return 1 - g + 2 * g / (kh - kl) * (avg - km)
        return 1.0
    if kind == "sred":
        lo = spec["min_th"]
        qmax = spec.get("q_max") or buffer
        seg = spec.get("seg") or 0.6 * qmax
        if avg < lo:
            return 0.0
        if avg < seg:
            return ((avg - lo) / (qmax - lo)) ** 2
        if avg < qmax:
            pseg = ((seg - lo) / (qmax - lo)) ** 2
            return pseg + (1 - pseg) * ((avg - seg) / (qmax - seg)) ** 2
        return 1.0
    lo, hi = spec["min_th"], spec["max_th"]
    x = (avg - lo) / (hi - lo)
    if kind == "gentle_red":
        if avg < lo:
            return 0.0
        if avg < hi:
            return spec["p_max"] * x
        if avg < 2 * hi:
            return spec["p_max"] + (1 - spec["p_max"]) * (avg - hi) / hi
        return 1.0
    if avg < lo:
        return 0.0
    if avg >= hi:
        return 1.0
    if kind == "red":
        return spec["p_max"] * x
    if kind == "nlred":
        return 1.5 * spec["p_max"] * x * x
    if kind == "polynomial":
        return min(1.0, max(0.0, sum(c * x**k for k, c in enumerate(spec["coeffs"]))))
    raise ValueError(kind)


# ------------------------------------------------------------------ grid (SPEC 4)
def grid_points(buffer: int, k: int, mapping: str) -> list[float]:
    if mapping == "flags":
        pts = [i + f for i in range(buffer) for f in (0, 1 / 8, 3 / 8, 5 / 8, 7 / 8)]
        return pts + [float(buffer)]
    return [i / k for i in range(k * buffer + 1)]


def grid_map(points: list[float], mapping: str, y: float) -> list[tuple[int, float]]:
    """[(grid index, probability)] for the continuous update value y."""
    if y <= points[0]:
        return [(0, 1.0)]
    if y >= points[-1]:
        return [(len(points) - 1, 1.0)]
    if mapping == "flags":
        i = math.floor(y)
        f = y - i
        if f <= SNAP * max(1.0, y):
            return [(5 * i, 1.0)]
        return [(5 * i + 1 + min(3, int(f * 4)), 1.0)]
    i = max(j for j in range(len(points) - 1) if points[j] <= y)
    a, b = points[i], points[i + 1]
    p_lo = (b - y) / (b - a)
    if p_lo >= 1 - SNAP:
        return [(i, 1.0)]
    if p_lo <= SNAP:
        return [(i + 1, 1.0)]
    if mapping == "nearest":
        return [(i if p_lo >= 0.5 else i + 1, 1.0)]
    return [(i, p_lo), (i + 1, 1 - p_lo)]


# ------------------------------------------------------------------ sources (SPEC 2.1)
def source_matrices(src: dict) -> tuple[np.ndarray, np.ndarray]:
    if src["kind"] == "bernoulli":
        return np.array([[1.0]]), np.array([src["alpha"]])
    if src["kind"] == "mmbp":
        return np.array(src["matrix"], float), np.array(src["arrival"], float)
    n, q, a = src["n"], src["q"], src["a"]
    M = np.zeros((n, n))
    for j in range(1, n):
        M[0, j] = a**-j
        M[j, 0] = (q / a) ** j
        M[j, j] = 1 - (q / a) ** j
    M[0, 0] = 1 - sum(a**-j for j in range(1, n))
    lam = np.zeros(n)
    lam[0] = 1.0
    return M, lam


# ------------------------------------------------------------------ AutoRED's weight (docs/stateful-aqm.md)
def filter_weight(spec: dict, avg: float, q: int) -> float:
    """w, or AutoRED's w_t = P (1 - P) (2 x / ln x) / N with x = max(e, 5.923 + q - avg),
    P = p(avg) or q / N, kept in [w, 1]."""
    w = spec["w"]
    if spec.get("weight", "static") != "autored":
        return w
    N = spec["buffer"]
    P = q / N if spec.get("autored_p", "drop") == "queue" else drop_prob(spec, avg, N)
    x = max(math.e, 5.923 + (q - avg))
    return min(1.0, max(w, P * (1 - P) * (2 * x / math.log(x)) / N))


# ------------------------------------------------------------------ the slot (SPEC 3)
def slot(spec: dict, state: tuple[int, int, int], pts, M, lam) -> dict[tuple[int, int, int], float]:
    """Distribution of the next state from (n, avg index, modulator)."""
    N, mu, w, ecn = spec["buffer"], spec["mu"], spec["w"], spec.get("ecn", 0.0)
    per_arrival = spec.get("update", "per_slot") == "per_arrival"
    n, g, m = state
    q = max(n - 1, 0)
    w = filter_weight(spec, pts[g], q)
    y = (1 - w) * pts[g] + w * q  # step 1
    out: dict[tuple[int, int, int], float] = {}

    def add(key, p):
        if p > 0:
            out[key] = out.get(key, 0.0) + p

    for m2 in range(len(lam)):  # step 2: modulator
        pm = M[m, m2]
        if pm == 0:
            continue
        for arrival, pa in ((1, lam[m2]), (0, 1 - lam[m2])):  # step 3
            if pa == 0:
                continue
            if per_arrival and not arrival:
                targets = [(g, 1.0)]  # the filter advances only in slots with an arrival
            else:
                targets = grid_map(pts, spec["mapping"], y)
            for g2, pg in targets:
                # step 4: overflow, AQM drop (or ECN mark: admitted), admission
                if not arrival:
                    admit = 0.0
                elif n == N:
                    admit = 0.0
                else:
                    pd = drop_prob(spec, pts[g2], N)
                    admit = 1 - pd * (1 - ecn)
                dep = mu if n >= 1 else 0.0  # step 5
                base = pm * pa * pg
                add((n + 1, g2, m2), base * admit * (1 - dep))
                add((n - 1, g2, m2), base * (1 - admit) * dep)
                add((n, g2, m2), base * (admit * dep + (1 - admit) * (1 - dep)))
    return out


def explore_dense(start: list, row) -> tuple[list, np.ndarray]:
    """The states reachable from `start` under `row(state) -> {next: probability}`, sorted,
    and the dense matrix over them (breadth-first exploration)."""
    seen, queue, rows = set(start), deque(start), {}
    while queue:
        s = queue.popleft()
        rows[s] = row(s)
        for t in rows[s]:
            if t not in seen:
                seen.add(t)
                queue.append(t)
    states = sorted(seen)
    index = {s: i for i, s in enumerate(states)}
    P = np.zeros((len(states), len(states)))
    for s, r in rows.items():
        for t, p in r.items():
            P[index[s], index[t]] += p
    return states, P


def reference_chain(spec: dict):
    """(states sorted by (n, g, m), dense P) over the states reachable from the empty system."""
    pts = grid_points(spec["buffer"], spec.get("k", 4), spec["mapping"])
    M, lam = source_matrices(spec["source"])
    return explore_dense([(0, 0, m) for m in range(len(lam))], lambda s: slot(spec, s, pts, M, lam))


# ------------------------------------------------------------------ tagged packet (SPEC 5, 2.5)
def tagged_response_oracle(spec: dict, pi: np.ndarray, states: list, max_r: int = 4000):
    """Response-time law by a dense tagged-packet chain built from SPEC 2.5 and 3.

    State (j, n, g, m): j packets ahead of the tagged one.  Returns (served pmf
    indexed by R, pushed-out probability, admitted rate)."""
    N, mu, w, ecn = spec["buffer"], spec["mu"], spec["w"], spec.get("ecn", 0.0)
    policy = spec.get("policy", "tail")
    per_arrival = spec.get("update", "per_slot") == "per_arrival"
    pts = grid_points(N, spec.get("k", 4), spec["mapping"])
    M, lam = source_matrices(spec["source"])

    def branches(n, g, m):
        """(g2, m2, probability, arrival?) for steps 1-3."""
        y = (1 - w) * pts[g] + w * max(n - 1, 0)
        for m2 in range(len(lam)):
            if M[m, m2] == 0:
                continue
            for arr, pa in ((True, lam[m2]), (False, 1 - lam[m2])):
                if pa == 0:
                    continue
                targets = [(g, 1.0)] if (per_arrival and not arr) else grid_map(pts, spec["mapping"], y)
                for g2, pg in targets:
                    yield g2, m2, M[m, m2] * pa * pg, arr

    def reject_prob(n, g2):
        return 1.0 if n == N else (1 - ecn) * drop_prob(spec, pts[g2], N)

    tagged = {}
    order = []

    def idx(key):
        if key not in tagged:
            tagged[key] = len(order)
            order.append(key)
        return tagged[key]

    # initial law at the end of the arrival slot
    init = {}
    admitted = 0.0
    for p_s, (n, g, m) in zip(pi, states):
        if p_s <= 0:
            continue
        for g2, m2, p, arr in branches(n, g, m):
            if not arr:
                continue
            rj = reject_prob(n, g2)
            outcomes = [(1 - rj, n + 1, n)] if n < N else []
            if policy != "tail" and n - 1 >= 1:
                outcomes.append((rj, n, n - 1))
            for q, n4, j0 in outcomes:
                if q <= 0:
                    continue
                admitted += p_s * p * q
                deps = [(mu, n4 - 1, j0 - 1), (1 - mu, n4, j0)] if n >= 1 else [(1.0, n4, j0)]
                for pd, n5, j5 in deps:
                    if pd > 0:
                        k = idx((j5, n5, g2, m2))
                        init[k] = init.get(k, 0.0) + p_s * p * q * pd
    rows, served, pushed = {}, {}, {}
    head = 0
    while head < len(order):
        key = order[head]
        i = head
        head += 1
        j, n, g, m = key
        row, sv, pu = {}, 0.0, 0.0
        for g2, m2, p, arr in branches(n, g, m):
            outs = []
            if not arr:
                outs.append((p, n, j))
            else:
                rj = reject_prob(n, g2)
                if n < N:
                    outs.append((p * (1 - rj), n + 1, j))
                if policy == "tail" or n - 1 == 0:
                    outs.append((p * rj, n, j))
                elif policy == "front":
                    if j == 1:
                        pu += p * rj
                    else:
                        outs.append((p * rj, n, j - 1 if j >= 2 else j))
                else:
                    for victim in range(1, n):  # uniformly among waiting positions 1..n-1
                        q = p * rj / (n - 1)
                        if victim == j:
                            pu += q
                        elif victim < j:
                            outs.append((q, n, j - 1))
                        else:
                            outs.append((q, n, j))
            for q, n4, j4 in outs:
                if q <= 0:
                    continue
                if j4 == 0:
                    sv += q * mu
                else:
                    k = idx((j4 - 1, n4 - 1, g2, m2))
                    row[k] = row.get(k, 0.0) + q * mu
                if mu < 1:
                    k = idx((j4, n4, g2, m2))
                    row[k] = row.get(k, 0.0) + q * (1 - mu)
        rows[i], served[i], pushed[i] = row, sv, pu
    T = len(order)
    P = np.zeros((T, T))
    for i, row in rows.items():
        for k, q in row.items():
            P[i, k] += q
    s_vec = np.array([served[i] for i in range(T)])
    p_vec = np.array([pushed[i] for i in range(T)])
    v = np.zeros(T)
    for k, q in init.items():
        v[k] += q / admitted
    pmf, pushed_total = [0.0], 0.0
    for _ in range(max_r):
        pmf.append(float(v @ s_vec))
        pushed_total += float(v @ p_vec)
        v = v @ P
        if v.sum() <= np.finfo(float).eps / 2:  # what is left can no longer change a sum of the pmf (<= 1)
            break
    return np.array(pmf), pushed_total, admitted


# ------------------------------------------------------------------ REDwM (SPEC 2.3)
def redwm_coefficients(spec: dict) -> tuple[float, float, float, float]:
    """(a1, a2, b0, b1) of the spec: from ``triple`` [x, y, z] read as b0 = x, b1 = y, a2 = z,
    a1 = 1 - x - y - z, or from ``a`` and ``b`` padded with zeros."""
    if "triple" in spec:
        x, y, z = spec["triple"]
        return 1.0 - x - y - z, z, x, y
    a = list(spec["a"]) + [0.0, 0.0]
    b = list(spec["b"]) + [0.0, 0.0]
    return a[0], a[1], b[0], b[1]


def redwm_s_points(spec: dict) -> list[float]:
    """s lives in [0, (a2 + b1) N]; given points, or step 1/s_k (default: a quarter of the
    avg step 1/k, whatever the avg grid: uniform, refined, custom or flags) from 0 up to the
    first point at or above the top."""
    if "s_points" in spec:
        return list(spec["s_points"])
    _, a2, _, b1 = redwm_coefficients(spec)
    top = (a2 + b1) * spec["buffer"]
    k = spec.get("s_k", 4 * spec.get("k", 4))
    step = lambda i: i / k  # noqa: E731
    pts = [0.0]
    while pts[-1] < top * (1 - 1e-12):
        pts.append(step(len(pts)))
    return pts


def redwm_slot(spec: dict, state: tuple, pts, spts, M, lam) -> dict:
    """Next-state law of (n, A index, s index, modulator) under SPEC 2.3 and 3:
    A' = a1 A + b0 q + s and s' = a2 A + b1 q from the grid values, each mapped on its own
    grid (s under `flags` by split), independently; per_arrival: no update without arrival."""
    N, mu, ecn = spec["buffer"], spec["mu"], spec.get("ecn", 0.0)
    a1, a2, b0, b1 = redwm_coefficients(spec)
    per_arrival = spec.get("update", "per_slot") == "per_arrival"
    s_mapping = "split" if spec["mapping"] == "flags" else spec["mapping"]
    n, g, j, m = state
    q = max(n - 1, 0)
    yA = a1 * pts[g] + b0 * q + spts[j]
    ys = a2 * pts[g] + b1 * q
    moves = [(gA, gs, pa * ps) for gA, pa in grid_map(pts, spec["mapping"], yA)
             for gs, ps in grid_map(spts, s_mapping, ys)]
    out: dict = {}

    def add(key, p):
        if p > 0:
            out[key] = out.get(key, 0.0) + p

    for m2 in range(len(lam)):
        pm = M[m, m2]
        if pm == 0:
            continue
        for arrival, pa in ((1, lam[m2]), (0, 1 - lam[m2])):
            if pa == 0:
                continue
            targets = [(g, j, 1.0)] if (per_arrival and not arrival) else moves
            for g2, j2, pg in targets:
                if not arrival or n == N:
                    admit = 0.0
                else:
                    admit = 1 - drop_prob(spec, pts[g2], N) * (1 - ecn)
                dep = mu if n >= 1 else 0.0
                base = pm * pa * pg
                add((n + 1, g2, j2, m2), base * admit * (1 - dep))
                add((n - 1, g2, j2, m2), base * (1 - admit) * dep)
                add((n, g2, j2, m2), base * (admit * dep + (1 - admit) * (1 - dep)))
    return out


def redwm_reference_chain(spec: dict):
    """(states sorted by (n, A index, s index, m), dense P) reachable from the empty system."""
    pts = grid_points(spec["buffer"], spec.get("k", 4), spec["mapping"])
    spts = redwm_s_points(spec)
    M, lam = source_matrices(spec["source"])
    return explore_dense([(0, 0, 0, m) for m in range(len(lam))], lambda s: redwm_slot(spec, s, pts, spts, M, lam))


class RedwmCells:
    """REDwM of any order in the transposed direct form of docs/redwm.md, written from its
    text: r = max(k, m + 1) - 1 auxiliary sums (at least one),
        A' = a_1 A + b_0 q + s1,   s_i' = a_{i+1} A + b_i q + s_{i+1}   (s_{r+1} = 0),
    s_i on [0, (sum_{j >= i} a_{j+1} + b_j) N] with the step 1/s_k (default 4 k) or the
    given points cut at the first one at or above that top, A and every s_i mapped on its
    own grid independently (s under `flags` by split).  A cell is (A index, s_1 index, ...)."""

    def __init__(self, spec: dict, pts: list[float]):
        if "triple" in spec:
            x, y, z = spec["triple"]
            a, b = [1.0 - x - y - z, z], [x, y]
        else:
            a, b = list(spec["a"]), list(spec["b"])
        k = max([j + 1 for j, v in enumerate(a) if v != 0] or [0])
        m = max([i for i, v in enumerate(b) if v != 0] or [0])
        self.r = max(max(k, m + 1) - 1, 1)
        self.a = (a + [0.0] * (self.r + 2))[: self.r + 1]  # a_1 .. a_{r+1}
        self.b = (b + [0.0] * (self.r + 2))[: self.r + 1]  # b_0 .. b_r
        N = spec["buffer"]
        self.pts, self.mapping = pts, spec["mapping"]
        self.s_mapping = "split" if self.mapping == "flags" else self.mapping
        self.grids = []
        for i in range(1, self.r + 1):
            top = sum(self.a[j] + self.b[j] for j in range(i, self.r + 1)) * N
            if "s_points" in spec:
                p = list(spec["s_points"])
                cut = next(j for j, v in enumerate(p) if v >= top * (1 - 1e-12))
                self.grids.append(p[: cut + 1])
            else:
                sk = spec.get("s_k", 4 * spec.get("k", 4))
                g = [0.0]
                while g[-1] < top * (1 - 1e-12):
                    g.append(len(g) / sk)
                self.grids.append(g)
        self.start = (0,) * (self.r + 1)

    def value(self, cell) -> float:
        return self.pts[cell[0]]

    def moves(self, cell, q) -> list:
        A = self.pts[cell[0]]
        s = [self.grids[i][cell[1 + i]] for i in range(self.r)] + [0.0]
        yA = self.a[0] * A + self.b[0] * q + s[0]
        ys = [self.a[i + 1] * A + self.b[i + 1] * q + s[i + 1] for i in range(self.r)]
        out = [((g,), p) for g, p in grid_map(self.pts, self.mapping, yA)]
        for i in range(self.r):
            out = [(c + (j,), p * pj) for c, p in out for j, pj in grid_map(self.grids[i], self.s_mapping, ys[i])]
        return out


def redwm_cells_slot(spec: dict, state: tuple, F: RedwmCells, M, lam) -> dict:
    """Next-state law of (n, A index, s_1 index, ..., s_r index, modulator) (SPEC 3 with the
    filter of RedwmCells); per_arrival: no update without an arrival."""
    N, mu, ecn = spec["buffer"], spec["mu"], spec.get("ecn", 0.0)
    per_arrival = spec.get("update", "per_slot") == "per_arrival"
    n, cell, m = state[0], state[1:-1], state[-1]
    moves = F.moves(cell, max(n - 1, 0))
    out: dict = {}
    for m2 in range(len(lam)):
        pm = M[m, m2]
        if pm == 0:
            continue
        for arrival, pa in ((1, lam[m2]), (0, 1 - lam[m2])):
            if pa == 0:
                continue
            for c2, pg in ([(cell, 1.0)] if (per_arrival and not arrival) else moves):
                admit = 0.0 if (not arrival or n == N) else 1 - drop_prob(spec, F.value(c2), N) * (1 - ecn)
                dep = mu if n >= 1 else 0.0
                base = pm * pa * pg
                for n2, p in ((n + 1, admit * (1 - dep)), (n - 1, (1 - admit) * dep),
                              (n, admit * dep + (1 - admit) * (1 - dep))):
                    if base * p > 0:
                        key = (n2,) + tuple(c2) + (m2,)
                        out[key] = out.get(key, 0.0) + base * p
    return out


def redwm_cells_reference_chain(spec: dict):
    """(states sorted by (n, A index, s_1 index, ..., modulator), dense P, the filter)."""
    pts = grid_points(spec["buffer"], spec.get("k", 4), spec["mapping"])
    F = RedwmCells(spec, pts)
    M, lam = source_matrices(spec["source"])
    states, P = explore_dense([(0,) + F.start + (m,) for m in range(len(lam))],
                              lambda s: redwm_cells_slot(spec, s, F, M, lam))
    return states, P, F


# ------------------------------------------------------------------ stateful AQM (docs/stateful-aqm.md)
# Written from the rules of the docs page (Floyd & Jacobson's count, ns-3's "wait", adaptive
# RED's p_max moves), not from the C++: the count cap, the p_max grid and the slot are
# re-derived here.
ADAPTIVE_DEFAULTS = {"interval": 5000, "target_lo": 0.4, "target_hi": 0.6, "increment": 0.01, "decrease": 0.9,
                     "p_max_high": 0.5, "p_max_low": 0.01, "clock": "geometric", "p_max_step": 0.0025}


def early_drop(spacing: str, count: int, pb: float) -> tuple[float, int, int]:
    """(probability of an early decision, count after a decision, count after none) for an
    arrival that reaches the AQM test with `count` arrivals since the last decision."""
    if spacing == "none":
        return pb, count, count
    if pb == 0:
        return 0.0, -1, -1
    if pb >= 1:
        return 1.0, 0, 0
    c = count + 1
    x = c * pb
    if spacing == "count":
        pa = 1.0 if x >= 1 else min(1.0, pb / (1 - x))
    else:  # wait
        pa = 0.0 if x < 1 else (1.0 if x >= 2 else min(1.0, pb / (2 - x)))
    return pa, 0, c


def adaptive_params(spec: dict) -> dict:
    return {k: spec.get(k, v) for k, v in ADAPTIVE_DEFAULTS.items()}


def pmax_points(spec: dict) -> tuple[list[float], int]:
    """The p_max grid: the points start + j h inside the range the moves reach (lo = p_max_low
    decrease, hi = p_max_high + min(increment, p_max_high / 4), and the start), within [0, 1];
    start index."""
    p0 = spec["p_max"]
    if not spec.get("adaptive", False):
        return [p0], 0
    a = adaptive_params(spec)
    h = a["p_max_step"]
    hi = max(p0, a["p_max_high"] + min(a["increment"], a["p_max_high"] / 4)) if a["increment"] > 0 else p0
    lo = min(p0, a["p_max_low"] * a["decrease"]) if a["decrease"] < 1 else p0
    jlo = math.ceil((lo - p0) / h - 1e-9)  # inside [lo, hi]: the moves reach nothing outside
    jhi = min(math.floor((hi - p0) / h + 1e-9), math.floor((1 - p0) / h + 1e-9))
    pts = [min(1.0, max(0.0, p0 + j * h)) for j in range(jlo, jhi + 1)]
    pts[-jlo] = p0
    return pts, -jlo


def pmax_move(spec: dict, p: float, avg: float) -> float:
    a = adaptive_params(spec)
    lo, hi = spec["min_th"], spec["max_th"]
    # the bounds as in exact arithmetic: a p_max within round-off of a bound is on it
    if avg > lo + a["target_hi"] * (hi - lo) and p <= a["p_max_high"] * (1 + 1e-9):
        return min(1.0, p + min(a["increment"], p / 4))
    if avg < lo + a["target_lo"] * (hi - lo) and p >= a["p_max_low"] * (1 - 1e-9):
        return p * a["decrease"]
    return p


def count_cap(spec: dict, pts: list[float], pmaxes: list[float]) -> int:
    """Largest count an arrival can leave behind: c p_b < 1 (count) or < 2 (wait) for the
    smallest nonzero p_b on the grid."""
    N = spec["buffer"]
    nonzero = [drop_prob({**spec, "p_max": pm}, g, N) for pm in pmaxes for g in pts]
    nonzero = [p for p in nonzero if 0 < p < 1]
    if not nonzero:
        return 0
    pmin, reach = min(nonzero), (1.0 if spec["spacing"] == "count" else 2.0)
    c = 0
    while (c + 1) * pmin < reach:
        c += 1
    return c


def maxth_rule(j: int, P: float, q: int, max_th: float) -> int:
    """FDynamicAutoRED's cur_max_th: back to max_th (0) or raised (1)."""
    if P < 0.55 and q < max_th and j == 1:
        return 0
    if 0.55 <= P < 0.88 and q >= max_th and j == 0:
        return 1
    return j


def stateful_chain(spec: dict):
    """(states (n, g, m, count + 1, p_max index, max_th index, phase) sorted, dense P) from the
    empty system."""
    N, mu, w, ecn = spec["buffer"], spec["mu"], spec["w"], spec.get("ecn", 0.0)
    per_arrival = spec.get("update", "per_slot") == "per_arrival"
    spacing = spec.get("spacing", "none")
    adaptive = spec.get("adaptive", False)
    a = adaptive_params(spec)
    interval, exact = a["interval"], a["clock"] == "exact"
    pmaxes0, _ = pmax_points(spec)
    adaptive = adaptive and len(pmaxes0) > 1  # a p_max that cannot move: no clock
    pts = grid_points(N, spec.get("k", 4), spec["mapping"])
    pmaxes, k0 = pmax_points(spec)
    cap = count_cap(spec, pts, pmaxes) if spacing != "none" else 0
    M, lam = source_matrices(spec["source"])
    pb_table = [[drop_prob({**spec, "p_max": pm}, g, N) for g in pts] for pm in pmaxes]
    dyn = spec.get("dynamic_max_th", False)
    max_ths = [spec["max_th"], spec["max_th"] * (1 + spec.get("max_th_growth", 0.1))] if dyn else [None]
    if dyn:
        pb_table = [[drop_prob({**spec, "max_th": mt}, g, N) for g in pts] for mt in max_ths]
        pmin = [p for r in pb_table for p in r if 0 < p < 1]
        if spacing != "none" and pmin:
            reach, cap = (1.0 if spacing == "count" else 2.0), 0
            while (cap + 1) * min(pmin) < reach:
                cap += 1

    # a truncated count (Model.with_count_cap): the cap is min(trunc, the exact cap)
    # or per avg point (Model.with_count_caps): a count entering point g saturates at min(caps[g], exact cap)
    trunc = spec.get("count_trunc", 0) if spacing != "none" else 0
    trunc_at = spec.get("count_trunc_at") if spacing != "none" else None
    exact_cap = cap
    if trunc:
        cap = min(cap, trunc)
    if trunc_at:
        cap_list = [min(c, exact_cap) if c > 0 else exact_cap for c in trunc_at]
        cap = max(cap_list)

    def cap_of(g2):
        return cap_list[g2] if trunc_at else cap

    def row(state):
        n, g, m, c1, k, j, ph = state
        c = c1 - 1
        out: dict = {}
        q = max(n - 1, 0)
        j2 = 0
        if dyn:
            P = q / N if spec.get("autored_p", "drop") == "queue" else pb_table[j][g]
            j2 = maxth_rule(j, P, q, spec["max_th"])
        # AutoRED's weight reads P_t with the slot's starting cur_max_th (FDynamicAutoRED)
        wq = filter_weight({**spec, "max_th": max_ths[j]} if dyn else spec, pts[g], q)
        y = (1 - wq) * pts[g] + wq * q
        ph2 = (ph + 1) % interval if (adaptive and exact) else 0
        if not adaptive:
            clocks = [(False, 1.0)]
        elif exact:
            clocks = [(ph2 == 0, 1.0)]
        else:
            clocks = [(True, 1 / interval), (False, 1 - 1 / interval)]
        for m2 in range(len(lam)):
            if M[m, m2] == 0:
                continue
            for arrival, pa in ((1, lam[m2]), (0, 1 - lam[m2])):
                if pa == 0:
                    continue
                targets = [(g, 1.0)] if (per_arrival and not arrival) else grid_map(pts, spec["mapping"], y)
                for g2, pg in targets:
                    for fires, pf in clocks:
                        if pf == 0:
                            continue
                        if fires and len(pmaxes) > 1:
                            ktargets = grid_map(pmaxes, "split", pmax_move(spec, pmaxes[k], pts[g2]))
                        else:
                            ktargets = [(k, 1.0)]
                        for k2, pk in ktargets:
                            base = M[m, m2] * pa * pg * pf * pk
                            if not arrival or n == N:
                                outcomes = [(1.0, False, c)]
                            else:
                                pb = pb_table[j2][g2] if dyn else pb_table[k2][g2]
                                dec, c_dec, c_none = early_drop(spacing, c, pb)
                                outcomes = [(dec * (1 - ecn), False, c_dec), (dec * ecn, True, c_dec),
                                            (1 - dec, True, c_none)]
                            dep = mu if n >= 1 else 0.0
                            for prob, adm, c2 in outcomes:
                                c2 = min(c2, cap_of(g2))  # a truncated count saturates at its point's cap
                                assert c2 <= cap
                                key = lambda n2: (n2, g2, m2, c2 + 1, k2, j2, ph2)  # noqa: E731
                                moves = [(n + 1, 1 - dep), (n, dep)] if adm else [(n - 1, dep), (n, 1 - dep)]
                                for n2, pd in moves:
                                    p = base * prob * pd
                                    if p > 0:
                                        out[key(n2)] = out.get(key(n2), 0.0) + p
        return out

    states, P = explore_dense([(0, 0, m, 0, k0, 0, 0) for m in range(len(lam))], row)
    return states, P, {"count_cap": cap, "count_cap_exact": exact_cap, "p_max_values": pmaxes, "p_max_start": k0}


# ------------------------------------------------------------------ batch arrivals (docs/batch-arrivals.md)
def batch_counts(src: dict) -> tuple[np.ndarray, list[list[float]]]:
    """(modulator matrix, per modulator state the pmf of the number of arrivals in a slot) of a
    batch source (or of a one-arrival slotted source: [1 - lam, lam])."""
    if src["kind"] == "batch":
        if "matrix" in src:
            return np.array(src["matrix"], float), [[float(p) for p in row] for row in src["counts"]]
        return np.array([[1.0]]), [[float(p) for p in src["counts"]]]
    M, lam = source_matrices(src)
    return M, [[1 - a, a] for a in lam]


def batch_slot(spec: dict, state: tuple[int, int, int], pts, M, counts, terms: dict | None = None) -> dict:
    """Distribution of the next state from (n, avg index, modulator) with k = 0..B arrivals in
    the slot: the filter steps once (per_arrival: once in a slot with k >= 1), all k packets
    meet p(avg_t); they meet the buffer one after another (n plus the packets of the batch
    admitted before them; the departure frees no room in the slot): full, the packet
    overflows untested; else it is dropped with probability (1 - ecn) p, else admitted.
    Every sequence of fates is enumerated as its own path.  `terms` counts the paths summed
    into each entry."""
    N, mu, ecn = spec["buffer"], spec["mu"], spec.get("ecn", 0.0)
    per_arrival = spec.get("update", "per_slot") == "per_arrival"
    n, g, m = state
    q = max(n - 1, 0)
    w = filter_weight(spec, pts[g], q)
    y = (1 - w) * pts[g] + w * q
    out: dict[tuple[int, int, int], float] = {}

    def add(key, p):
        if p > 0:
            out[key] = out.get(key, 0.0) + p
            if terms is not None:
                terms[(state, key)] = terms.get((state, key), 0) + 1

    dep = mu if n >= 1 else 0.0
    for m2 in range(len(counts)):
        pm = M[m, m2]
        if pm == 0:
            continue
        for k, pk in enumerate(counts[m2]):
            if pk == 0:
                continue
            targets = [(g, 1.0)] if per_arrival and k == 0 else grid_map(pts, spec["mapping"], y)
            for g2, pg in targets:
                reject = drop_prob(spec, pts[g2], N) * (1 - ecn)
                for fates in itertools.product((True, False), repeat=k):  # True: admitted (marked or not)
                    p, level = 1.0, n
                    for admitted in fates:
                        if level == N:
                            p *= 0.0 if admitted else 1.0  # overflow, no AQM test
                        else:
                            p *= (1 - reject) if admitted else reject
                            level += admitted
                    if p == 0:
                        continue
                    base = pm * pk * pg * p
                    add((level, g2, m2), base * (1 - dep))
                    add((level - 1, g2, m2), base * dep)
    return out


def batch_reference_chain(spec: dict, terms: dict | None = None):
    """(states sorted by (n, g, m), dense P) of a model with a batch source."""
    pts = grid_points(spec["buffer"], spec.get("k", 4), spec["mapping"])
    M, counts = batch_counts(spec["source"])
    return explore_dense([(0, 0, m) for m in range(len(counts))],
                         lambda s: batch_slot(spec, s, pts, M, counts, terms))


# Model cases the dense-oracle tests run: one per source kind and per drop function.
SOURCES = {
    "bernoulli": {"kind": "bernoulli", "alpha": 0.45},
    "ssmp": {"kind": "ssmp", "n": 3, "q": 1.5, "a": 4.0},
    "mmbp": {"kind": "mmbp", "matrix": [[0.9, 0.1], [0.25, 0.75]], "arrival": [0.2, 0.9]},
}
DROPS = {
    "none": {"drop": "none"},
    "red": {"drop": "red", "min_th": 3, "max_th": 9, "p_max": 0.3},
    "gentle_red": {"drop": "gentle_red", "min_th": 2, "max_th": 6, "p_max": 0.2},
    "dsred": {"drop": "dsred", "k_l": 3, "k_h": 10, "gamma": 0.4},
    "sred": {"drop": "sred", "min_th": 2},
    "nlred": {"drop": "nlred", "min_th": 3, "max_th": 9, "p_max": 0.5},
    "polynomial": {"drop": "polynomial", "min_th": 2, "max_th": 10, "coeffs": [0.05, 0.3, -0.1, 0.6]},
    "table": {"drop": "table", "points": [[1.0, 0.0], [4.0, 0.3], [8.0, 0.9]]},
}
