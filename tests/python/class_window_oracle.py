"""Independent dense construction of the window class chain (docs/classes.md, "The window
chain"), in plain Python, without calling the aqmchain builder.

The content is kept as a list: the classes of the packet in service and of the first L waiting
packets in FIFO order (``known``), then an unordered bag of the packets behind them (counts of
class 1 and class 2).  Every operation acts on that list and then refills ``known`` from the
bag, one packet at a time, a class-2 packet with probability (class-2 in the bag) / (bag size):
a discarded waiting packet, the departure of the head, and the slot's arrival, which joins
behind everything after the departure.  Classes are 0 and 1 here (1 = "class 2").  RED without
a stateful AQM, tail / front / random drop, ECN marking and the flow comparison.

State: (n, avg index, modulator, v) with v = h + 2 (window bits + 2^L r2), the chain's
documented ``sequence`` value (bit i: waiting position i + 1 is of class 2; r2: class-2
packets in the bag).
"""

from __future__ import annotations

from class_oracle import class_arrivals
from oracle import drop_prob, explore_dense, filter_weight, grid_map, grid_points, source_matrices


def _refill(known: tuple, bag: tuple, L: int) -> list[tuple[float, tuple, tuple]]:
    """Fill the window (head + L waiting) from the bag: [(probability, known, bag)]."""
    out = [(1.0, known, bag)]
    done = []
    while out:
        p, k, b = out.pop()
        if len(k) >= L + 1 or b[0] + b[1] == 0:
            done.append((p, k, b))
            continue
        tot = b[0] + b[1]
        for c in (0, 1):
            if b[c]:
                nb = (b[0] - (c == 0), b[1] - (c == 1))
                out.append((p * b[c] / tot, k + (c,), nb))
    return done


def _encode(known: tuple, bag: tuple, L: int) -> tuple[int, int]:
    """(n, v) of a content."""
    n = len(known) + bag[0] + bag[1]
    if n == 0:
        return 0, 0
    bits = sum(c << i for i, c in enumerate(known[1:]))
    return n, known[0] + 2 * (bits + (1 << L) * bag[1])


def _decode(n: int, v: int, L: int) -> tuple[tuple, tuple]:
    if n == 0:
        return (), (0, 0)
    h, rest = v % 2, v // 2
    bits, r2 = rest % (1 << L), rest >> L
    wl = min(n - 1, L)
    known = (h,) + tuple((bits >> i) & 1 for i in range(wl))
    r = n - 1 - wl
    return known, (r - r2, r2)


def window_slot(spec: dict, state, pts, M, lam, L: int) -> dict:
    N, mu = spec["buffer"], spec["mu"]
    classes = spec["classes"]
    policy = spec.get("policy", "tail")
    fc = spec.get("flow_compare", False)
    n, g, m, v = state
    known, bag = _decode(n, v, L)
    w = max(n - 1, 0)
    same_flow = []
    for cl in classes:
        F = cl.get("flows", 1)
        wts = cl.get("flow_weights") or [1.0 / F] * F
        same_flow.append(sum(x * x for x in wts))
    wq = filter_weight(spec, pts[g], w)
    moves = grid_map(pts, spec["mapping"], (1 - wq) * pts[g] + wq * w)
    out: dict = {}

    def finish(g2, m2, p, contents, arr):
        """contents: [(prob, known, bag)] after the removals; arr: the admitted arrival's class or None."""
        for pc, k, b in contents:
            if not p * pc > 0:
                continue
            if n == 0 or mu == 0:
                deps = [(1.0, k, b)]
            else:
                deps = [(1 - mu, k, b)] + [(mu * q, k2, b2) for q, k2, b2 in _refill(k[1:], b, L)]
            for pd, k2, b2 in deps:
                if pd <= 0:
                    continue
                if arr is not None:  # behind everything
                    if b2[0] + b2[1] == 0 and len(k2) < L + 1:
                        k2 = k2 + (arr,)
                    else:
                        b2 = (b2[0] + (arr == 0), b2[1] + (arr == 1))
                nn, vv = _encode(k2, b2, L)
                key = (nn, g2, m2, vv)
                out[key] = out.get(key, 0.0) + p * pc * pd

    def without(i):
        """Remove waiting position i (1-based, i <= len(known) - 1) and refill."""
        return _refill(known[:i] + known[i + 1:], bag, L)

    def without_bag(c):
        return [(1.0, known, (bag[0] - (c == 0), bag[1] - (c == 1)))]

    def uniform_victims():
        """[(probability, contents)] of a uniform waiting victim."""
        vs = [(1 / w, without(i)) for i in range(1, len(known))]
        vs += [(bag[c] / w, without_bag(c)) for c in (0, 1) if bag[c]]
        return vs

    def policy_drop(g2, m2, mass, ci):
        if policy == "tail" or w == 0:
            finish(g2, m2, mass, [(1.0, known, bag)], None)
            return
        vs = [(1.0, without(1))] if policy == "front" else uniform_victims()
        for pv, contents in vs:
            finish(g2, m2, mass * pv, contents, ci)

    for m2 in range(len(lam)):
        pm = M[m, m2]
        if pm == 0:
            continue
        for g2, pg in moves:
            wgt, a = pm * pg, lam[m2]
            if a < 1:
                finish(g2, m2, wgt * (1 - a), [(1.0, known, bag)], None)
            if a == 0:
                continue
            for ci, cls, bit, pv in class_arrivals(classes, m2, wgt * a):
                if n == N:
                    policy_drop(g2, m2, pv, ci)
                    continue
                go = pv
                if fc and pts[g2] >= spec["min_th"] and w >= 1:
                    sf = same_flow[ci] / w
                    matched = 0.0
                    for i in range(1, len(known)):
                        if known[i] == ci:
                            finish(g2, m2, pv * sf, without(i), None)
                            matched += sf
                    if bag[ci]:
                        finish(g2, m2, pv * sf * bag[ci], without_bag(ci), None)
                        matched += sf * bag[ci]
                    go = pv * (1 - matched)
                pd = drop_prob(spec, pts[g2], N)
                finish(g2, m2, go * (1 - pd), [(1.0, known, bag)], ci)
                dec = go * pd
                if dec <= 0:
                    continue
                if bit:
                    finish(g2, m2, dec, [(1.0, known, bag)], ci)
                else:
                    policy_drop(g2, m2, dec, ci)
    return out


def window_chain(spec: dict, L: int):
    """(states sorted by (n, avg index, modulator, v), dense P) reachable from the empty system."""
    pts = grid_points(spec["buffer"], spec.get("k", 4), spec["mapping"])
    M, lam = source_matrices(spec["source"])
    return explore_dense([(0, 0, m, 0) for m in range(len(lam))], lambda s: window_slot(spec, s, pts, M, lam, L))
