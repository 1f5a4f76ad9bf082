"""Fitting sources to traces (aqmchain.fit_source, docs/trace-fitting.md) and trace replay.

Oracles: the core's exact aggregated variances (hurst()), brute-force sums for the
autocorrelations and inter-arrival moments, Van Loan's block exponential for an MMPP's
count variance, the bivariate normal law for thresholded fractional Gaussian noise, the
existing simulator for the trace replay, and, for the fits, the true source's chain.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.linalg import expm
from scipy.stats import multivariate_normal, norm
from scipy.stats import t as student

import aqmchain
from aqmchain import _core
from aqmchain.fit import fgn_trace, mmpp_trace, source_statistics, trace_statistics

MMBP = aqmchain.Source.mmbp([[0.95, 0.05], [0.1, 0.9]], [0.25, 0.7])  # mean 0.4, modulator cycles of 30 slots
SSMP = aqmchain.Source.ssmp_from_mean(0.4, 8.0, 4)


def _red(source, buffer=30):
    return aqmchain.Model(buffer=buffer, source=source, service=aqmchain.Service.geometric(0.5),
                          aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(5, 15, 0.3), w=0.02),
                          grid=aqmchain.GridSpec(k=3, mapping="split"))


def _metrics(source):
    r = aqmchain.solve_stationary(_red(source))
    return np.array([r.mean_queue, r.loss])



def _acf_tolerance(P, a, pi, lags=5):
    """How far the library's autocorrelations (pi a (P - 1 pi)^k a / (lambda - lambda^2), from
    its own stationary vector) and the brute-force ones ((pi a) P^k a - lambda^2 over the same,
    from the core's) may differ at lags 1..lags.  Rounding: k products with K-term sums on
    entries bounded by 2^k (the deflated matrix) or 1 (P), a few more operations, relative to
    lambda; the stationary vectors: their distance bound from their residuals
    (solution_distance_bound), through the numerator's and lambda - lambda^2's slopes in pi."""
    from aqmchain.fit import _stationary
    from conftest import solution_distance_bound

    K, eps = len(a), np.finfo(float).eps
    lib = _stationary(P, False)
    d = solution_distance_bound(P, pi, *(float(np.abs(x @ P - x).sum()) for x in (pi, lib)))
    lam = float(pi @ a)
    s2 = lam - lam**2
    k = np.arange(1, lags + 1)
    rounding = ((k + 2) * (K + 1) + (k + 1) * (K + 1) * 2.0**k + 4) * eps * lam / s2
    return rounding + (3 + (1 + 2 * lam)) * d / s2

# ------------------------------------------------------------------ closed forms
def test_slotted_statistics_against_exact_curve_and_brute_force_sums():
    for src in (MMBP, SSMP, aqmchain.Source.mmbp([[0.5, 0.3, 0.2], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]],
                                                  [0.9, 0.2, 0.5])):
        levels = 2.0 ** np.arange(0, 13)
        st = source_statistics(src, levels, lags=5)
        exact = np.asarray(_core.hurst(src, 0, 12).variances)
        np.testing.assert_allclose(st.variance, exact, rtol=1e-9)
        P, a = np.asarray(src.matrix), np.asarray(src.arrival)
        pi = np.asarray(src.modulator_stationary())
        lam = pi @ a
        acf = np.array([(pi * a) @ np.linalg.matrix_power(P, k) @ a - lam**2 for k in range(1, 6)]) / (lam - lam**2)
        tol = _acf_tolerance(P, a, pi)
        assert np.all(np.abs(st.acf - acf) <= tol), (st.acf, acf, tol)
        # inter-arrival gaps: sum_g g^j phi D0^(g-1) D1 1 term by term
        D0, D1 = P * (1 - a), P * a
        v, mom = (pi * a) / lam, np.zeros(3)
        for g in range(1, 20000):
            p = v @ D1 @ np.ones(len(a))
            mom += p * np.array([g, g**2, g**3])
            v = v @ D0
        np.testing.assert_allclose(st.gap_moments, mom, rtol=1e-7)
        assert st.gap_moments[0] == pytest.approx(1 / lam, rel=1e-12)


def test_mmpp_count_variance_against_van_loan():
    Q = np.array([[-0.02, 0.02], [0.05, -0.05]])
    r = np.array([0.5, 3.0])
    src = aqmchain.Source.mmpp(Q.tolist(), r.tolist())
    st = source_statistics(src, 2.0 ** np.arange(0, 9), lags=3, bin=0.7)
    pi = np.asarray(src.modulator_stationary())
    lam, L, Z = pi @ r, np.diag(r), np.zeros((2, 2))
    for j, m in enumerate(st.levels):
        t = 0.7 * m
        big = expm(np.block([[Q, L, Z], [Z, Q, L], [Z, Z, Q]]) * t)
        fact2 = 2 * pi @ big[:2, 4:] @ np.ones(2)  # E[N(t)(N(t) - 1)]
        assert st.variance[j] == pytest.approx(fact2 + lam * t - (lam * t) ** 2, rel=1e-8)
    # inter-arrival moments k! phi (-D0)^-k 1
    M = np.linalg.inv(-(Q - L))
    phi = pi * r / lam
    np.testing.assert_allclose(st.gap_moments, [phi @ M @ np.ones(2), 2 * phi @ M @ M @ np.ones(2),
                                                6 * phi @ M @ M @ M @ np.ones(2)], rtol=1e-10)


def test_thresholded_fgn_has_the_bivariate_normal_covariances():
    H, mean, n = 0.8, 0.4, 2**16
    c = norm.ppf(1 - mean)
    runs = np.array([[np.mean(x[:-k] * x[k:]) for k in (1, 4, 32)] for x in
                     (fgn_trace(n, H, mean, seed).astype(float) for seed in range(1, 9))])
    for j, k in enumerate((1, 4, 32)):
        rho = 0.5 * ((k + 1) ** (2 * H) - 2 * k ** (2 * H) + (k - 1) ** (2 * H))
        truth = multivariate_normal([0, 0], [[1, rho], [rho, 1]]).cdf([-c, -c])  # P(Z1 > c, Z2 > c)
        m, hw = runs[:, j].mean(), student.ppf(0.995, 7) * runs[:, j].std(ddof=1) / math.sqrt(8)
        assert abs(m - truth) < hw + 1e-4, (k, m, truth, hw)


# ------------------------------------------------------------------ fits against the truth
@pytest.mark.parametrize("truth,kind", [(MMBP, "mmbp"), (SSMP, "ssmp")])
def test_fitted_queue_and_loss_within_3_percent_of_the_true_model(truth, kind):
    slots, seeds = 2**23, (1, 2, 3, 4)
    true = _metrics(truth)
    errs, vt = [], []
    for seed in seeds:
        x = aqmchain.arrival_trace(truth, slots, seed)
        fit = aqmchain.fit_source(x, kind, counts=True, states=4 if kind == "ssmp" else None)
        errs.append(_metrics(fit.source) / true - 1)
        # the fitted curve against the true one over 3 decades (m = 1..2^10 slots)
        exact = source_statistics(truth, 2.0 ** np.arange(0, 11)).variance
        vt.append(np.max(np.abs(source_statistics(fit.source, 2.0 ** np.arange(0, 11)).variance / exact - 1)))
    errs = np.abs(np.array(errs))
    # every trace within 3 %, and 3 % at least 2.5 root-mean-square errors away: the margin
    # is a property of the trace length (the metrics' sensitivity to the trace's own
    # sampling error, docs/trace-fitting.md), not of these traces
    assert errs.max() < 0.03, errs
    rms = np.sqrt(np.mean(errs**2, axis=0))
    assert np.all(2.5 * rms < 0.03), (rms, errs)
    assert max(vt) < 0.05, vt


def test_fit_report_statistics_and_toml_round_trip(tmp_path):
    x = aqmchain.arrival_trace(MMBP, 2**20, 7)
    fit = aqmchain.fit_source(x, "mmbp", counts=True)
    st = trace_statistics(x)
    assert fit.trace.mean == pytest.approx(st.mean) and fit.errors["mean"] < 1e-3
    # each level of the curve within 4 standard errors of the trace's estimate (sqrt(2 / blocks))
    dev = np.abs(np.log(fit.model.variance / fit.trace.variance))
    assert np.all(dev < 4 * fit.trace.se["variance"]), (dev, fit.trace.se["variance"])
    text = fit.to_toml()
    (tmp_path / "m.toml").write_text(fit.model_section(buffer=30))
    m = aqmchain.load_model(tmp_path / "m.toml")
    # equal, not close, on any machine: the numbers are written as Python's repr (the shortest
    # string that reads back as the same double) and read into the same constructor, which
    # stores them as given
    np.testing.assert_array_equal(m.source.matrix, fit.source.matrix)
    np.testing.assert_array_equal(m.source.arrival, fit.source.arrival)
    assert "[source]" in text and "kind = \"mmbp\"" in text
    d = fit.to_dict()
    assert d["source"]["kind"] == "mmbp" and d["hurst"]["trace"] == pytest.approx(fit.hurst_trace)
    fig = fit.plot()
    assert len(fig.axes) == 2
    # the model's Hurst estimate is the exact variance-time slope over the same levels
    exact = aqmchain.estimate_hurst(fit.source, "exact", range=fit.hurst_range)
    assert fit.hurst_model == pytest.approx(exact.H, abs=1e-9)
    assert fit.hurst_trace == pytest.approx(aqmchain.hurst_from_trace(x, range=fit.hurst_range).H, abs=0.01)


def test_mmpp_fit_from_timestamps():
    truth = aqmchain.Source.mmpp([[-0.002, 0.002], [0.01, -0.01]], [0.5, 2.0])
    t = mmpp_trace(truth, 400_000, seed=3)
    fit = aqmchain.fit_source(t, "mmpp")
    assert fit.source.mean_rate() == pytest.approx(truth.mean_rate(), rel=0.03)
    assert fit.errors["variance_time_max"] < 0.15
    # the fitted modulator's time scale: the slower eigenvalue of the generator
    eig = lambda s: np.sort(np.linalg.eigvals(np.asarray(s.matrix)).real)[0]  # noqa: E731
    assert eig(fit.source) == pytest.approx(eig(truth), rel=0.3)


# ------------------------------------------------------------------ slotting and files
def test_slotting_and_multiple_arrivals():
    t = np.array([0.0, 0.1, 0.15, 0.35, 0.4, 0.41, 0.42, 0.9] * 1 + list(np.arange(1, 3, 0.1)))
    x = aqmchain.fit.slot_counts(t, 0.1)
    assert x.sum() == t.size
    fit = aqmchain.fit_source(t, "bernoulli", slot=0.1)
    assert fit.multiple_slots > 0 and fit.multiple_packets > 0
    with pytest.raises(aqmchain.ModelError, match="slot"):
        aqmchain.fit_source(t, "bernoulli", slot=0.1, multiple="refuse")
    b = aqmchain.fit_source(t, "bernoulli", slot=0.1, multiple="batch")
    assert b.source.kind == "batch" and b.source.mean_rate() == pytest.approx(x.mean())


def test_pcap_and_pcapng_round_trip(tmp_path):
    dpkt = pytest.importorskip("dpkt")
    rng = np.random.default_rng(5)
    ts = 1.7e9 + np.cumsum(rng.exponential(1e-3, 500))
    ts = np.round(ts, 6)
    frame = bytes(dpkt.ethernet.Ethernet(data=b"x" * 40))
    with open(tmp_path / "t.pcap", "wb") as f:
        w = dpkt.pcap.Writer(f)
        for x in ts:
            w.writepkt(frame, ts=float(x))
    with open(tmp_path / "t.pcapng", "wb") as f:
        w = dpkt.pcapng.Writer(f)
        for x in ts:
            w.writepkt(frame, ts=float(x))
    for name in ("t.pcap", "t.pcapng"):
        back = aqmchain.read_trace(tmp_path / name)
        np.testing.assert_allclose(back, ts, rtol=0, atol=1.5e-6)
    fit = aqmchain.fit_source(tmp_path / "t.pcap", "mmpp")
    assert fit.packets == 500


def test_csv_and_npy(tmp_path):
    t = np.cumsum(np.random.default_rng(2).exponential(1.0, 300))
    (tmp_path / "a.csv").write_text("id,time\n" + "".join(f"{i},{float(v)!r}\n" for i, v in enumerate(t)))
    np.testing.assert_array_equal(aqmchain.read_trace(tmp_path / "a.csv", column="time"), t)
    np.save(tmp_path / "a.npy", t)
    np.testing.assert_array_equal(aqmchain.read_trace(tmp_path / "a.npy"), t)


def test_bad_input_names_the_parameter(tmp_path):
    t = np.cumsum(np.ones(100))
    cases = [
        (dict(kind="poisson"), "kind"),
        (dict(kind="mmbp", states=9), "states"),
        (dict(kind="bernoulli", states=2), "states"),
        (dict(kind="mmbp", slot=-1.0), "slot"),
        (dict(kind="mmbp", multiple="batch"), "multiple"),
        (dict(kind="mmbp", multiple="nope"), "multiple"),
        (dict(kind="mmpp", counts=True), "counts"),
        (dict(kind="mmbp", lags=0), "lags"),
    ]
    for kw, param in cases:
        with pytest.raises(aqmchain.ModelError, match=f"'{param}'") as e:
            aqmchain.fit_source(t, **kw)
        assert getattr(e.value, "param", param) == param
    with pytest.raises(aqmchain.ModelError, match="'trace'"):
        aqmchain.fit_source(tmp_path / "missing.pcap")
    with pytest.raises(aqmchain.ModelError, match="'trace'"):
        aqmchain.fit_source(np.array([1.0, 2.0]))
    with pytest.raises(aqmchain.ModelError, match="'trace'"):
        aqmchain.fit_source(np.array([0, 1, -1] * 10), counts=True)
    (tmp_path / "a.csv").write_text("time\n1\n2\n")
    with pytest.raises(aqmchain.ModelError, match="'column'"):
        aqmchain.read_trace(tmp_path / "a.csv", column="nope")


# ------------------------------------------------------------------ trace replay
def test_trace_replay_agrees_with_the_simulator_on_the_sources_own_trace():
    model = _red(MMBP)
    x = aqmchain.arrival_trace(MMBP, 4_000_000, 11)
    rep = aqmchain.simulate_trace(model, x, batches=40, seed=3)
    sim = aqmchain.simulate(model, slots=4_000_000, replications=2, seed=5, batches=20)
    for name in ("mean_queue", "loss", "throughput", "mean_avg", "loss_aqm"):
        a, b = getattr(rep, name), getattr(sim, name)
        hw = math.hypot(rep.ci[name], sim.ci[name])
        assert abs(a - b) < 1.6 * hw + 1e-12, (name, a, b, rep.ci[name], sim.ci[name])  # 3.1 sd: 99.8 %
    cmp = aqmchain.Comparison(aqmchain.solve_stationary(model), rep)
    assert "mean_queue" in cmp.table()
    with pytest.raises(aqmchain.ModelError, match="'batches'"):
        aqmchain.simulate_trace(model, x, batches=1)
    with pytest.raises(aqmchain.ModelError, match="'trace'"):
        aqmchain.simulate_trace(model, np.array([1, 2, -3] * 100))


def test_trace_replay_follows_the_order_of_events_exactly():
    # no AQM, mu = 1: the packet in service always leaves, so the counts fix every slot
    model = aqmchain.Model(buffer=5, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service.geometric(1.0),
                           aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.none(), w=0.02))
    one = aqmchain.simulate_trace(model, np.ones(1000, dtype=int), warmup=10, batches=10)
    # slot 1: admitted, nobody to serve (n = 1); then one in, one out: n = 1 for ever
    assert one.mean_system == 1.0 and one.loss == 0.0 and one.throughput == 1.0 and one.mean_queue == 0.0
    three = aqmchain.simulate_trace(model, np.full(1000, 3), warmup=10, batches=10)
    # n: 0 -> 3 -> 4 (two admitted up to N = 5, one out) -> 4 ...: one admitted, two overflow
    assert three.mean_system == 4.0 and three.loss_overflow == pytest.approx(2 / 3) and three.loss_aqm == 0.0
    assert three.system_pmf[4] == 1.0


def test_cli_fit_writes_a_pasteable_table_and_names_bad_options(tmp_path):
    from pathlib import Path

    from cli_helpers import TRACEBACK, run_cli

    trace = Path(__file__).resolve().parents[3] / "examples" / "traces" / "mmpp.csv"
    out = tmp_path / "s.toml"
    code, _, err = run_cli("fit", str(trace), "--kind", "ssmp", "--slot", "0.0005", "--output", str(out), "-q")
    assert code == 0, err
    doc = "[model]\nbuffer = 30\n" + out.read_text() + "[service]\nmu = 0.5\n[aqm]\ndrop = \"red\"\nmin_th = 5\n" \
          "max_th = 15\np_max = 0.1\n"
    (tmp_path / "m.toml").write_text(doc)
    assert aqmchain.load_model(tmp_path / "m.toml").source.kind == "ssmp"
    for argv, option in ((["--states", "9"], "--states"), (["--slot", "-1"], "--slot"),
                         (["--multiple", "batch"], "--multiple"), (["--column", "nope"], "--column")):
        code, _, err = run_cli("fit", str(trace), *argv)
        assert code == 2 and f"'{option}'" in err and TRACEBACK not in err, (argv, err)
