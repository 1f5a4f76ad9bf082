"""The exact transient law of small scenarios, computed densely with numpy, and the checks of
simulated ensembles against it (within a few 95 % half-widths: they fail when the law is
wrong, and no value is pinned to a seed)."""

import numpy as np

import aqmchain

BUFFER, K = 10, 2
MMBP = ([[0.9, 0.1], [0.3, 0.7]], [0.3, 0.8])


def model(alpha=None, mu=0.5, ecn=0.2, buffer=BUFFER, time="discrete"):
    source = aqmchain.Source.mmbp(*MMBP) if alpha is None else aqmchain.Source.bernoulli(alpha)
    if time == "continuous":
        source, service = aqmchain.Source.poisson(0.4), aqmchain.Service.exponential(1.0)
    else:
        service = aqmchain.Service(mu)
    return aqmchain.Model(buffer=buffer, source=source, service=service, time=time,
                          aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(2, 8, 0.3), w=0.2, ecn=ecn),
                          grid=aqmchain.GridSpec(k=K))


class DenseLaw:
    """The chain of each phase as a dense matrix on the product space (n, avg index, modulator),
    so that phases whose reachable sets differ share one index; stepped from p_0."""

    def __init__(self, scenario):
        m0 = scenario.phases[0].model
        self.M = m0.source.states
        self.G = len(m0.grid.resolve(m0.buffer))
        self.S = (m0.buffer + 1) * self.G * self.M
        level = np.repeat(np.arange(m0.buffer + 1), self.G * self.M)
        self.q = np.maximum(level - 1, 0).astype(float)
        self.n = level.astype(float)
        self.avg = np.tile(np.repeat(np.asarray(m0.grid.resolve(m0.buffer)), self.M), m0.buffer + 1)
        self.steps = []  # (slots, P, arrival weight, loss weight) per phase
        for ph in scenario.phases:
            chain = aqmchain.build_chain(ph.model)
            lab = aqmchain.state_labels(chain)
            key = (lab["level"] * self.G + lab["avg_index"]) * self.M + lab["modulator"]
            coo = aqmchain.transition_matrix(chain).tocoo()
            P = np.zeros((self.S, self.S))
            P[key[coo.row], key[coo.col]] = coo.data
            ev = chain.events
            arr, loss = np.zeros(self.S), np.zeros(self.S)
            arr[key] = ev["arrival"]
            loss[key] = np.asarray(ev["aqm_drop"]) + np.asarray(ev["overflow"])
            self.steps.append((int(ph.duration), P, arr, loss))
        self.p0 = np.zeros(self.S)
        self.p0[np.arange(self.M)] = m0.source.modulator_stationary()  # n = 0, avg index 0

    def at(self, times):
        """Per output time: E q, Var q, E q^4-ish moments, E n, E avg; per interval E arrivals, E losses."""
        times = list(times)
        out = {k: [] for k in ("mq", "vq", "m4q", "mn", "ma", "arr", "loss")}
        p, t, k, arr, loss = self.p0.copy(), 0, 0, 0.0, 0.0
        for slots, P, wa, wl in self.steps:
            for _ in range(slots):
                if k == len(times):
                    break
                arr += p @ wa
                loss += p @ wl
                p = p @ P
                t += 1
                assert abs(p.sum() - 1) < 1e-12  # the phases' chains cover every state the scenario reaches
                if t == times[k]:
                    mq = p @ self.q
                    out["mq"].append(mq)
                    out["vq"].append(p @ (self.q - mq) ** 2)
                    out["m4q"].append(p @ (self.q - mq) ** 4)
                    out["mn"].append(p @ self.n)
                    out["ma"].append(p @ self.avg)
                    out["arr"].append(arr)
                    out["loss"].append(loss)
                    arr = loss = 0.0
                    k += 1
        return {key: np.array(v) for key, v in out.items()}


def z(sim, hw, exact):
    """|sim - exact| in standard errors (a zero half-width: every replication agreed, so must the law)."""
    d = np.abs(np.asarray(sim) - exact)
    return np.where(hw > 0, d / np.where(hw > 0, hw / 1.96, 1.0), np.where(d < 1e-12, 0.0, np.inf))


def check_against_law(res, law, label, zmax=4.5):
    R = res.replications
    assert np.all(z(res.mean_queue, res.mean_queue_hw, law["mq"]) < zmax), (label, res.mean_queue, law["mq"])
    assert np.all(z(res.mean_system, res.mean_system_hw, law["mn"]) < zmax), label
    assert np.all(z(res.mean_avg, res.mean_avg_hw, law["ma"]) < zmax), label
    assert np.all(z(res.arrivals, res.arrivals_hw, law["arr"]) < zmax), label
    has_loss = res.losses_hw > 0
    assert np.all(z(res.losses, res.losses_hw, law["loss"])[has_loss] < zmax), label
    # variance of q: standard error sqrt((m4 - var^2) / R)
    se = np.sqrt(np.maximum(law["m4q"] - law["vq"] ** 2, 1e-30) / R)
    assert np.all(np.abs(res.var_queue - law["vq"]) < zmax * se + 1e-12), label
