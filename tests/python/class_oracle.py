"""Independent dense construction of the two-class chain (docs/classes.md), in plain Python.

Written from the rules of the documentation (one slot of the queue, the drop policies, ECN
marking, modified RED's search, the flow comparison, the random-order approximation with
the class of the packet in service carried), without calling the aqmchain builder.  The
searches are computed differently from the C++ kernel on purpose: the first elephant met by
the front search is uniform among the elephants (a binomial sum, not a recursion), and the
three random trials are enumerated pick by pick.

State: (n, avg index, modulator, e = class-2 packets in the system, h = class of the packet
in service), h = e = 0 when the system is empty; classes are 0 and 1 here (1 = "class 2").
With a stateful AQM (docs/stateful-aqm.md) the state adds (count + 1, p_max index, cur_max_th
index, clock phase), the rules taken from oracle.py's own re-derivation (early_drop,
pmax_move, maxth_rule, filter_weight), not from the C++.
"""

from __future__ import annotations

import itertools
from math import comb

from oracle import (RedwmCells, adaptive_params, count_cap, drop_prob, early_drop, explore_dense, filter_weight, grid_map,
                    grid_points, maxth_rule, pmax_move, pmax_points, source_matrices)


def class_arrivals(classes, m, mass):
    """(class index, class, ECN bit, probability) of each kind of arrival, when an arrival has
    probability (or rate) ``mass`` in modulator state m: the class by its share there, the ECN
    bit by the class's probability."""
    for ci, cls in enumerate(classes):
        share = cls["share"] if not isinstance(cls["share"], list) else cls["share"][m]
        ecn = cls.get("ecn", 0.0)
        for bit, pb in ((0, 1 - ecn), (1, ecn)):
            pv = mass * share * pb
            if pv > 0:
                yield ci, cls, bit, pv


SIM_CLASS_METRICS = ("arrival_rate", "loss", "loss_aqm", "loss_pushed_out", "loss_flow_compare", "mark_prob",
                     "throughput_share", "mean_queue")


def assert_classes_match_simulation(chain, sim, names, counted_slots, k=4.5):
    """Every per-class metric of the chain within k of the simulator's 95 % half-widths; a rare
    loss cause may see no event at all (half-width 0): about 3 events' worth is allowed, over
    the ``counted_slots`` (replications x slots after warm-up) the simulation counted."""
    for name in names:
        for m in SIM_CLASS_METRICS:
            c, s = getattr(chain.classes[name], m), getattr(sim.classes[name], m)
            hw = sim.classes[name].ci[m]
            floor = 3.0 / (sim.classes[name].arrival_rate * counted_slots) if m.startswith(("loss", "mark")) else 0.0
            assert abs(c - s) <= k * hw + floor, (name, m, c, s, hw)


def model_from(base: dict, aqm=None, classes=None, **top):
    """The model of the document ``base`` with [aqm] keys updated (None removes a key), whole
    sections replaced (a dict with "kind") or updated (the others), and the classes set."""
    import copy

    import aqmchain

    doc = copy.deepcopy(base)
    doc["aqm"].update(aqm or {})
    doc["aqm"] = {k: v for k, v in doc["aqm"].items() if v is not None}
    for k, v in top.items():
        doc[k] = v if "kind" in v else {**doc[k], **v}
    if classes is not None:
        doc["class"] = classes
    return aqmchain.model_from_dict(doc)[0]


def two(share=0.3, **kw):
    """Two classes; keyword 'a_*' / 'b_*' set the first / second class's fields."""
    a = {"name": "a", "share": share}
    b = {"name": "b", "share": [1 - s for s in share] if isinstance(share, list) else 1 - share}
    for k, v in kw.items():
        (a if k.startswith("a_") else b)[k[2:]] = v
    return [a, b]


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


class AqmRules:
    """The stateful AQM's tables for a spec: p_max grid, cur_max_th values, p_b tables, cap."""

    def __init__(self, spec: dict, pts: list[float]):
        N = spec["buffer"]
        self.spacing = spec.get("spacing", "none")
        self.pmaxes, self.k0 = pmax_points(spec)
        a = adaptive_params(spec)
        self.adaptive = spec.get("adaptive", False) and len(self.pmaxes) > 1
        self.interval, self.exact = a["interval"], a["clock"] == "exact"
        self.dyn = spec.get("dynamic_max_th", False)
        self.max_ths = [spec["max_th"], spec["max_th"] * (1 + spec.get("max_th_growth", 0.1))] if self.dyn \
            else [spec["max_th"]]
        if self.dyn:  # p_b by cur_max_th index
            self.pb = [[drop_prob({**spec, "max_th": mt}, g, N) for g in pts] for mt in self.max_ths]
        else:  # p_b by p_max index
            self.pb = [[drop_prob({**spec, "p_max": pm}, g, N) for g in pts] for pm in self.pmaxes]
        nonzero = [p for r in self.pb for p in r if 0 < p < 1]
        self.cap = 0
        if self.spacing != "none" and nonzero:
            reach = 1.0 if self.spacing == "count" else 2.0
            while (self.cap + 1) * min(nonzero) < reach:
                self.cap += 1
        if self.spacing != "none" and not self.dyn:
            assert self.cap == count_cap(spec, pts, self.pmaxes)


def class_slot(spec: dict, state, pts, M, lam, rules: AqmRules | None = None, filt=None) -> dict:
    """`filt`: REDwM's filter (oracle.RedwmCells); the state's second entry is then its cell."""
    N, mu = spec["buffer"], spec["mu"]
    classes = spec["classes"]
    policy = spec.get("policy", "tail")
    modified = spec.get("modified", "none")
    fc = spec.get("flow_compare", False)
    n, g, m, e, h = state[:5]
    c1, k, j, ph = state[5:] if rules else (0, 0, 0, 0)
    c = c1 - 1
    w = max(n - 1, 0)
    w2 = e - h if n >= 1 else 0
    w1 = w - w2
    # the stateful AQM's slot start: cur_max_th moves, the clock ticks (docs/stateful-aqm.md)
    j2, ph2, clocks = 0, 0, [(False, 1.0)]
    if rules and rules.dyn:
        P = w / N if spec.get("autored_p", "drop") == "queue" else rules.pb[j][g]
        j2 = maxth_rule(j, P, w, spec["max_th"])
    if rules and rules.adaptive:
        if rules.exact:
            ph2 = (ph + 1) % rules.interval
            clocks = [(ph2 == 0, 1.0)]
        else:
            clocks = [(True, 1 / rules.interval), (False, 1 - 1 / rules.interval)]
    # AutoRED's weight reads P_t with the slot's starting cur_max_th
    if filt is None:
        wq = filter_weight({**spec, "max_th": rules.max_ths[j]} if rules and rules.dyn else spec, pts[g], w)
        y = (1 - wq) * pts[g] + wq * w
        moves, avg_of = grid_map(pts, spec["mapping"], y), pts.__getitem__
    else:
        moves, avg_of = filt.moves(g, w), filt.value
    cur_max_th = rules.max_ths[j2] if rules and rules.dyn else spec["max_th"]
    same_flow = []
    for cl in classes:
        F = cl.get("flows", 1)
        wts = cl.get("flow_weights") or [1.0 / F] * F
        same_flow.append(sum(x * x for x in wts))
    q = [_elephant_prob(cl) for cl in classes]
    if len(q) == 1:
        q.append(q[0])
    out: dict = {}

    def add(key, p):
        if p > 0:
            out[key] = out.get(key, 0.0) + p

    k2 = 0  # the p_max index of the branch (set below)

    def finish(g2, m2, p, pre, c2=None):
        # pre = (count, head class, old waiting class-1, old waiting class-2, arrival class or None);
        # c2: the AQM count after the slot (None: unchanged)
        if not p > 0:
            return
        tail = ()
        if rules:  # the stateful tail of the key
            c2 = c if c2 is None else c2
            assert c2 <= rules.cap
            tail = (c2 + 1, k2, j2, ph2)

        def put(key, q):
            add(key + tail, q)
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
                    put((0, g2, m2, 0, 0), p * pd)
                else:
                    put((cnt, g2, m2, hh + a2 + (arr == 1), hh), p * pd)
                continue
            n2 = cnt - 1
            if n2 == 0:
                put((0, g2, m2, 0, 0), p * pd)
            elif a1 + a2 == 0:  # the arrival enters service
                put((n2, g2, m2, arr, arr), p * pd)
            else:
                for nh, pn in ((0, a1 / (a1 + a2)), (1, a2 / (a1 + a2))):
                    if pn > 0:
                        rest2 = a2 - nh + (arr == 1)
                        put((n2, g2, m2, nh + rest2, nh), p * pd * pn)

    def joined(pre, c):
        cnt, hh, a1, a2, _ = pre
        if cnt == 0:
            return (1, c, 0, 0, None)
        return (cnt + 1, hh, a1, a2, c)

    def without(pre, k):
        cnt, hh, a1, a2, arr = pre
        return (cnt - 1, hh, a1 - (k == 0), a2 - (k == 1), arr)

    base_pre = (n, h, w1, w2, None)
    branches = []
    for m2 in range(len(lam)):
        pm = M[m, m2]
        if pm == 0:
            continue
        for g2, pg in moves:
            for fires, pf in clocks:
                if pf == 0:
                    continue
                if fires:
                    kt = grid_map(rules.pmaxes, "split", pmax_move(spec, rules.pmaxes[k], pts[g2]))
                else:
                    kt = [(k, 1.0)]
                for kk, pk in kt:
                    branches.append((m2, g2, kk, pm * pg * pf * pk))
    for m2, g2, k2, wgt in branches:
        a = lam[m2]
        if a < 1:
            finish(g2, m2, wgt * (1 - a), base_pre)
        if a == 0:
            continue
        for ci, cls, bit, pv in class_arrivals(classes, m2, wgt * a):

            def victims(mass, rule, c2=None):  # remove a waiting packet, admit the arrival
                if rule == "uniform":
                    pk = (w1 / w, w2 / w)
                elif rule == "front":
                    pk = front_search(w1, w2, q[0], q[1])
                else:
                    pk = random_search(w1, w2, q[0], q[1])
                for k in (0, 1):
                    if pk[k] > 0:
                        finish(g2, m2, mass * pk[k], joined(without(base_pre, k), ci), c2)
                return sum(pk)

            def policy_drop(mass, c2=None):
                if policy == "tail" or w == 0:
                    finish(g2, m2, mass, base_pre, c2)
                else:  # oldest or uniform: both are class 2 w.p. w2 / w under random order
                    victims(mass, "uniform", c2)

            if n == N:
                policy_drop(pv)
                continue
            avg = avg_of(g2)
            go = pv
            if fc and avg >= spec["min_th"] and w >= 1:
                wk = (w1, w2)[ci] / w * same_flow[ci]
                if wk > 0:
                    finish(g2, m2, pv * wk, without(base_pre, ci))
                go = pv * (1 - wk)
            if rules:
                pb = rules.pb[j2 if rules.dyn else k2][g2]
                pd, cd, cn = early_drop(rules.spacing, c, pb)
            else:
                pd, cd, cn = drop_prob(spec, avg, N), None, None
            finish(g2, m2, go * (1 - pd), joined(base_pre, ci), cn)
            dec = go * pd
            if dec <= 0:
                continue
            if modified == "none":
                if bit:
                    finish(g2, m2, dec, joined(base_pre, ci), cd)
                else:
                    policy_drop(dec, cd)
            elif avg < cur_max_th:
                # a waiting elephant is discarded for any arrival; with none, a protected
                # arrival enters (an ECN-capable one marked), an elephant arrival is dropped
                found = victims(dec, modified, cd) if w >= 1 else 0.0
                rest = dec * (1 - found)
                if rest > 1e-300:
                    if bit or cls.get("mice", False):
                        finish(g2, m2, rest, joined(base_pre, ci), cd)
                    else:
                        finish(g2, m2, rest, base_pre, cd)
            else:
                policy_drop(dec, cd)
    return out


def is_stateful(spec: dict) -> bool:
    return spec.get("spacing", "none") != "none" or spec.get("adaptive", False) or spec.get("dynamic_max_th", False)


def class_chain(spec: dict):
    """(states sorted by (n, g, m, e, h) [+ (count + 1, p_max index, cur_max_th index, phase)
    with a stateful AQM], dense P) reachable from the empty system."""
    pts = grid_points(spec["buffer"], spec.get("k", 4), spec["mapping"])
    M, lam = source_matrices(spec["source"])
    rules = AqmRules(spec, pts) if is_stateful(spec) else None
    tail = (0, rules.k0, 0, 0) if rules else ()
    filt = RedwmCells(spec, pts) if spec.get("filter") == "redwm" else None
    g0 = filt.start if filt else 0
    return explore_dense([(0, g0, m, 0, 0) + tail for m in range(len(lam))],
                         lambda s: class_slot(spec, s, pts, M, lam, rules, filt))
