"""Hurst estimators against oracles: closed forms (Bernoulli's Var X^(m) = Var X / m), an
independent dense computation of the aggregated variance, i.i.d. traces (H = 1/2 within
a confidence interval over independent traces), and exactly self-similar fractional
Gaussian noise generated here by circulant embedding (Davies-Harte) with a known H."""

import json

import math

import numpy as np
import pytest

import aqmchain
from cli_helpers import run_cli

SELF = aqmchain.Source.ssmp(5, 1.927562, 31.6)  # the SSMP of "Implementation of modified AQM mechanisms in IP routers"


def fgn(n: int, H: float, rng: np.random.Generator) -> np.ndarray:
    """Fractional Gaussian noise of length n, unit variance, by circulant embedding
    (Davies & Harte): exact in law for every n."""
    k = np.arange(n + 1.0)
    gamma = 0.5 * (np.abs(k + 1) ** (2 * H) - 2 * k ** (2 * H) + np.abs(k - 1) ** (2 * H))
    c = np.concatenate([gamma, gamma[-2:0:-1]])
    lam = np.fft.fft(c).real
    assert lam.min() > -1e-9 * lam.max()  # the embedding is nonnegative definite for fGn
    z = rng.standard_normal(len(c)) + 1j * rng.standard_normal(len(c))
    return np.fft.fft(np.sqrt(np.maximum(lam, 0.0) / len(c)) * z).real[:n]


def dense_aggregated_variance(source, levels):
    """Var X^(m) from the autocovariance c_k = pi diag(lam) M^k lam - mean^2, by dense matrix powers."""
    M = np.array(source.matrix)
    lam = np.array(source.arrival)
    w, v = np.linalg.eig(M.T)
    pi = np.real(v[:, np.argmin(np.abs(w - 1))])
    pi /= pi.sum()
    mean = pi @ lam
    out = []
    for m in levels:
        c, vec = [], lam.copy()
        for _ in range(m):
            c.append((pi * lam) @ vec - mean**2)
            vec = M @ vec
        c = np.array(c)
        c[0] = mean - mean**2
        k = np.arange(1, m)
        out.append((m * c[0] + 2 * np.sum((m - k) * c[1:])) / m**2)
    return np.array(out)


def test_exact_curve_of_bernoulli_is_var_over_m():
    e = aqmchain.estimate_hurst(aqmchain.Source.bernoulli(0.3), "exact", range=(1, 2**12))
    # no correlation: the lag covariances are exactly 0 (lambda - mean = 0), so Var(X^(m)) is
    # c_0 / m with c_0 = a - a^2 formed in double: a relative error of (a / c_0) eps from the
    # cancellation, half an ulp each for the division and the conversion, and as much again on
    # this side (0.21 and its division)
    a, eps = 0.3, np.finfo(float).eps
    np.testing.assert_allclose(e.values, 0.21 / e.levels, rtol=(a / (a - a * a) + 3) * eps)
    assert e.H == pytest.approx(0.5, abs=1e-12)
    np.testing.assert_allclose(e.local, 0.5, atol=1e-12)


def test_exact_curve_matches_dense_autocovariance():
    src = aqmchain.Source.mmbp([[0.98, 0.02], [0.05, 0.95]], [0.1, 0.7])
    e = aqmchain.estimate_hurst(src, "exact", range=(1, 2**8))
    levels = [1, 2, 4, 16, 64, 256]
    idx = [list(e.levels).index(m) for m in levels]
    np.testing.assert_allclose(e.values[idx], dense_aggregated_variance(src, levels), rtol=1e-10)
    # and the SSMP of the papers, over a shorter range
    e = aqmchain.estimate_hurst(SELF, "exact", range=(1, 2**6))
    np.testing.assert_allclose(e.values[:7], dense_aggregated_variance(SELF, [1, 2, 4, 8, 16, 32, 64]), rtol=1e-9)


def test_exact_default_is_the_core_report_and_ranges_differ():
    """The documented numbers (docs/hurst.md): 0.819 over 1..2^20, 0.883 asymptotic."""
    core = aqmchain.hurst(SELF)
    e = aqmchain.estimate_hurst(SELF, "exact")
    assert e.H == pytest.approx(core.variance_time, abs=1e-12)
    assert e.H == pytest.approx(0.8187, abs=5e-4)
    # the closed form 1 - ln q / (2 ln(a/q)) evaluated here and in the core: each evaluation is
    # within an ulp per log and half an ulp per division, and rounding a log's argument by eps
    # moves the log by eps / |ln x|; twice that for the two evaluations
    q, a = SELF.q, SELF.a
    ratio = math.log(q) / (2 * math.log(a / q))
    eps = np.finfo(float).eps
    bound = 2 * (ratio * (4 + 1 / abs(math.log(q)) + 1 / abs(math.log(a / q))) + 1) * eps
    assert abs(aqmchain.estimate_hurst(SELF, "asymptotic").H - (1 - ratio)) <= bound
    assert aqmchain.estimate_hurst(SELF, "asymptotic").H == core.asymptotic  # the core's value, passed on
    # the local slope falls to 1/2 beyond the slowest modulator state's time scale
    assert e.local[-1] < 0.6 and max(e.local) > 0.9
    # the fit over the scales the modulator covers, 2^4..2^16, sits near the papers' 0.78-0.83
    assert 0.78 < aqmchain.estimate_hurst(SELF, "exact", range=(16, 2**16)).H < 0.85


def test_trace_mean_rate_and_independence():
    x = aqmchain.arrival_trace(aqmchain.Source.bernoulli(0.3), 2**18, seed=5)
    assert x.dtype == np.uint8 and set(np.unique(x)) <= {0, 1}
    sd = np.sqrt(0.21 / x.size)
    assert abs(x.mean() - 0.3) < 4.5 * sd
    y = x - x.mean()
    assert abs(np.mean(y[1:] * y[:-1])) / 0.21 < 4.5 / np.sqrt(x.size)
    # an SSMP trace: its mean over 16 traces is the source's rate within 4.5 sd (sd from the exact curve)
    means = [aqmchain.arrival_trace(SELF, 2**16, seed=s).mean() for s in range(16)]
    var16 = aqmchain.estimate_hurst(SELF, "exact", range=(1, 2**16)).values[16]
    assert abs(np.mean(means) - SELF.mean_rate()) < 4.5 * np.sqrt(var16 / 16)
    # the same seed gives the same trace, another seed another one
    np.testing.assert_array_equal(aqmchain.arrival_trace(SELF, 1000, 7), aqmchain.arrival_trace(SELF, 1000, 7))
    assert np.any(aqmchain.arrival_trace(SELF, 1000, 7) != aqmchain.arrival_trace(SELF, 1000, 8))


@pytest.mark.parametrize("estimator, bias", [("variance_time", 0.0), ("rs", 0.01)])
def test_iid_bernoulli_gives_one_half_within_ci(estimator, bias):
    """Over 10 independent traces H = 1/2 lies within 1.5 times the 95 % interval (z ~ 3).
    R/S on 0/1 traces carries a lattice bias of O(n^-1/2) relative to the Gaussian
    correction (measured -0.005 at alpha = 0.5): allowed as `bias`."""
    for alpha, seed in ((0.3, 11), (0.5, 101)):
        e = aqmchain.estimate_hurst(aqmchain.Source.bernoulli(alpha), estimator, slots=2**16, replications=10,
                                    seed=seed)
        assert e.ci is not None and 0 < e.ci < 0.05
        assert abs(e.H - 0.5) <= 1.5 * e.ci + bias, (alpha, e)


@pytest.mark.parametrize("H", [0.65, 0.8])
def test_fractional_gaussian_noise_recovers_h(H):
    rng = np.random.default_rng(int(H * 100))
    vt, vt_known, rs = [], [], []
    for _ in range(6):
        x = fgn(2**16, H, rng)
        vt.append(aqmchain.hurst_from_trace(x, "variance_time").H)
        vt_known.append(aqmchain.hurst_from_trace(x, "variance_time", mean=0.0).H)
        rs.append(aqmchain.hurst_from_trace(x, "rs", range=(16, 2**12)).H)
    se = lambda v: np.std(v, ddof=1) / np.sqrt(len(v))  # noqa: E731
    # the variance about the known mean is unbiased: H within 4 standard errors (+ 0.005 for the fit)
    assert abs(np.mean(vt_known) - H) < 4 * se(vt_known) + 0.005, vt_known
    # the sample mean biases Var X^(m) down at large m under long-range dependence: H a little low
    assert H - 0.04 < np.mean(vt) < H + 4 * se(vt), vt
    # R/S is known to read large H low (measured -0.02 at 0.7, -0.04 at 0.8 on 2^16..2^18 samples)
    assert H - 0.06 < np.mean(rs) < H + 4 * se(rs) + 0.01, rs


def test_trace_estimators_agree_with_the_exact_curve():
    """Variance about the known mean over 8 SSMP traces: the curve within 4.5 standard errors of the exact one."""
    e = aqmchain.estimate_hurst(SELF, "variance_time", slots=2**18, replications=8, seed=21, known_mean=True,
                                range=(1, 2**8))
    exact = aqmchain.estimate_hurst(SELF, "exact", range=(1, 2**8))
    assert abs(e.H - exact.H) < 1.5 * e.ci + 0.01


def test_bad_input_names_the_parameter():
    with pytest.raises(aqmchain.ModelError, match="estimator"):
        aqmchain.estimate_hurst(SELF, "dfa")
    with pytest.raises(aqmchain.ModelError, match="range"):
        aqmchain.estimate_hurst(SELF, "exact", range=(3, 5))  # one power of two
    with pytest.raises(aqmchain.ModelError, match="range"):
        aqmchain.estimate_hurst(SELF, "exact", range=(1, 2.0**31))
    with pytest.raises(aqmchain.ModelError, match="source"):
        aqmchain.estimate_hurst(aqmchain.Source.bernoulli(0.5), "asymptotic")
    with pytest.raises(aqmchain.ModelError, match="source.kind"):
        aqmchain.estimate_hurst(aqmchain.Source.poisson(1.0), "exact")
    with pytest.raises(aqmchain.ModelError, match="slots"):
        aqmchain.arrival_trace(SELF, 0)
    with pytest.raises(aqmchain.ModelError, match="range"):
        aqmchain.hurst_from_trace(np.zeros(100) + np.arange(100) % 2, "variance_time", range=(1, 1000))
    with pytest.raises(aqmchain.ModelError, match="trace"):
        aqmchain.hurst_from_trace([1.0, float("nan"), 0.0, 1.0, 0.0])


def test_cli_hurst(tmp_path, request):
    model = request.config.rootpath / "examples" / "dsred_ssmp.toml"
    out, png = tmp_path / "h.json", tmp_path / "h.png"
    code, stdout, err = run_cli("hurst", model, "--estimator", "exact", "--range", "1:2^20", "--json", out,
                                "--plot", png)
    assert code == 0, err
    doc = json.loads(out.read_text())
    (est,) = doc["estimates"]
    src = aqmchain.load_model(model).source
    assert est["estimator"] == "exact" and est["H"] == pytest.approx(aqmchain.hurst(src).variance_time, abs=1e-12)
    assert est["range"] == [1, 2**20] and "H = 0.8187" in stdout
    assert png.read_bytes()[:4] == b"\x89PNG"
    code, stdout, err = run_cli("hurst", model, "--slots", "65536", "--replications", "3")
    assert code == 0, err
    for name in aqmchain.HURST_ESTIMATORS:
        assert f"[{name}:" in stdout
    code, _, err = run_cli("hurst", model, "--range", "8:x")
    assert code == 2 and "--range" in err
    code, _, err = run_cli("hurst", model, "--estimator", "exact", "--range", "4:6")
    assert code == 2 and "range" in err
