"""aqmchain.plots: every function returns a Figure whose artists carry the result's own
numbers (the plotted line's y-data is the pmf), with units, titles, legends, log scales,
the min_th..max_th band and a y-range fitted to the data; the CLI writes non-empty PNGs
and nothing unasked in the current directory."""

import numpy as np
import pytest
from matplotlib.collections import QuadMesh
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

import aqmchain
from aqmchain import plots
from cli_helpers import run_cli
from conftest import summation_error

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def small_model(policy="tail", **aqm):
    kw = dict(drop=aqmchain.DropFunction.red(5, 20, 0.1), w=0.05, policy=policy)
    kw.update(aqm)
    return aqmchain.Model(buffer=30, source=aqmchain.Source.bernoulli(0.45), service=aqmchain.Service(0.5),
                          aqm=aqmchain.Aqm(**kw), grid=aqmchain.GridSpec(k=2))


@pytest.fixture(scope="module")
def solved():
    return aqmchain.solve_stationary(small_model())


@pytest.fixture(scope="module")
def simulated():
    return aqmchain.simulate(small_model(), slots=400_000, replications=2, seed=3)


def band_patches(ax):
    return [p for p in ax.patches if "min_th" in (p.get_label() or "")]


def test_queue_pmf_line_is_the_pmf(solved):
    fig = plots.queue_pmf(solved)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "chain (analytic)")
    np.testing.assert_array_equal(line.get_ydata(), solved.queue_pmf)
    np.testing.assert_array_equal(line.get_xdata(), np.arange(len(solved.queue_pmf)))
    assert ax.get_yscale() == "log"
    assert "packets" in ax.get_xlabel()
    assert "RED(5, 20, p_max 0.1)" in ax.get_title() and "Bernoulli(alpha=0.45)" in ax.get_title()
    # the band spans min_th..max_th on the q axis
    (band,) = band_patches(ax)
    tr = band.get_transform() - ax.transData
    x_data = tr.transform(band.get_path().vertices)[:, 0]
    assert min(x_data) == pytest.approx(5) and max(x_data) == pytest.approx(20)
    # y-range fitted: at most DECADES below the peak, the peak inside
    lo, hi = ax.get_ylim()
    peak = solved.queue_pmf.max()
    floor = max(solved.queue_pmf[solved.queue_pmf > 0].min(), peak * 10 ** -plots.DECADES)
    assert peak < hi <= 1.0 and lo == pytest.approx(floor / 2)
    # the x-axis ends where the pmf leaves the y-range (not at the buffer when the tail is lighter)
    assert ax.get_xlim()[1] <= len(solved.queue_pmf) * 1.04 + 1


def test_queue_pmf_with_simulation_and_ci(solved, simulated):
    fig = plots.queue_pmf(solved, simulated)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "simulation ± 95 % CI" in labels and not any("+-" in t for t in labels)
    (container,) = ax.containers
    pts = container.lines[0]
    has = simulated.queue_pmf > 0
    np.testing.assert_array_equal(pts.get_ydata(), simulated.queue_pmf[has])
    # the error bars are the simulator's half-widths (upper side)
    segs = container.lines[2][0].get_segments()
    upper = np.array([s[1][1] for s in segs])
    np.testing.assert_allclose(upper, simulated.queue_pmf[has] + simulated.queue_pmf_ci[has])


def test_comparison_plot_returns_a_figure_and_writes(solved, simulated, tmp_path):
    cmp = aqmchain.simulation.Comparison(solved, simulated)
    fig = cmp.plot()
    assert isinstance(fig, Figure)
    out = tmp_path / "c.png"
    cmp.plot(out)
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_queue_pmf_draws_on_a_given_axes(solved):
    fig = Figure()
    ax = fig.add_subplot()
    assert plots.queue_pmf(solved, ax=ax, which="system") is fig
    line = ax.get_lines()[0]
    np.testing.assert_array_equal(line.get_ydata(), solved.system_pmf)
    with pytest.raises(aqmchain.ModelError, match="which"):
        plots.queue_pmf(solved, which="bogus")


def test_no_band_without_thresholds():
    r = aqmchain.solve_stationary(small_model(drop=aqmchain.DropFunction.none()))
    assert not band_patches(plots.queue_pmf(r).axes[0])


def test_response_pmf_one_line_per_policy():
    cmp = aqmchain.compare_policies(small_model())
    fig = plots.response_pmf(cmp)
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert [ln.get_label().split()[0] for ln in lines] == ["tail", "front", "random"]
    for ln, policy in zip(lines, ("tail", "front", "random")):
        np.testing.assert_array_equal(ln.get_ydata(), cmp.results[policy].response_pmf)
        assert f"{cmp.results[policy].mean_response:.4g}" in ln.get_label()
    assert ax.get_yscale() == "log" and "slots" in ax.get_xlabel()
    assert "drop policy" in ax.get_title()
    lin = plots.response_pmf(cmp, log=False).axes[0]
    assert lin.get_yscale() == "linear" and lin.get_ylim()[0] == 0


def test_heatmap_is_the_joint_law(solved):
    fig = plots.heatmap(solved)
    ax = fig.axes[0]
    (mesh,) = [c for c in ax.collections if isinstance(c, QuadMesh)]
    assert isinstance(mesh.norm, LogNorm)
    P, grid = plots.joint_pmf(solved)
    # marginals are the result's own pmfs (computed by the library from the same pi, independently)
    # each marginal entry sums at most `states` entries of pi (total 1) in another order than the core's
    tol = summation_error(solved.states)
    np.testing.assert_allclose(P.sum(axis=0), solved.queue_pmf[: P.shape[1]], rtol=0, atol=tol)
    np.testing.assert_allclose(P.sum(axis=1), solved.avg_pmf, rtol=0, atol=tol)
    data = mesh.get_array()
    np.testing.assert_allclose(np.ma.filled(data, 0).reshape(P.shape)[P >= mesh.norm.vmin], P[P >= mesh.norm.vmin])
    assert mesh.norm.vmax == pytest.approx(P.max())
    assert "packets" in ax.get_xlabel() and "avg" in ax.get_ylabel()
    assert len(fig.axes) == 2  # the colour bar


def test_transient_plot_lines_are_the_metrics():
    t = aqmchain.solve_transient(small_model(), [1, 5, 20, 50, 100])
    fig = t.plot()
    ax = fig.axes[0]
    lines = [ln for ln in ax.get_lines() if ln.get_label() in ("mean queue", "mean avg")]
    np.testing.assert_array_equal(lines[0].get_ydata(), t.mean_queue)
    np.testing.assert_array_equal(lines[1].get_ydata(), t.mean_avg)
    assert ax.get_xlabel() == "time (slots)" and ax.get_ylabel() == "packets"
    assert "RED(5, 20" in ax.get_title()


def test_variance_time_plot_is_the_curve():
    e = aqmchain.estimate_hurst(aqmchain.Source.ssmp(5, 1.927562, 31.6), "exact", range=(1, 2**12))
    fig = e.plot()
    ax = fig.axes[0]
    curve = ax.get_lines()[0]
    np.testing.assert_array_equal(curve.get_ydata(), e.values)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert f"H = {e.H:.3f}" in " ".join(t.get_text() for t in ax.get_legend().get_texts())


def test_cli_writes_pngs_and_nothing_else(tmp_path, monkeypatch, request):
    model = request.config.rootpath / "examples" / "small_ecn.toml"
    monkeypatch.chdir(tmp_path)
    for cmd, extra in (("solve", []), ("policies", []), ("compare", ["--slots", "100000", "--replications", "2"])):
        out = tmp_path / f"{cmd}.png"
        code, _, err = run_cli(cmd, model, *extra, "--plot", out)
        assert code == 0, err
        data = out.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000
    # compare without --plot writes no file in the current directory
    before = set(tmp_path.iterdir())
    code, _, err = run_cli("compare", model, "--slots", "100000", "--replications", "2")
    assert code == 0, err
    assert set(tmp_path.iterdir()) == before


def test_cli_plot_path_checked_before_work(tmp_path, request):
    model = request.config.rootpath / "examples" / "small_ecn.toml"
    for cmd in ("solve", "policies", "hurst"):
        code, out, err = run_cli(cmd, model, "--plot", tmp_path / "missing" / "p.png")
        assert code == 2 and "--plot" in err and "does not exist" in err, (cmd, err)


def test_local_hurst_lines_are_the_local_slopes():
    src = aqmchain.Source.ssmp(5, 1.927562, 31.6)
    exact = aqmchain.estimate_hurst(src, "exact", range=(1, 2**12))
    asym = aqmchain.estimate_hurst(src, "asymptotic")
    ax = plots.local_hurst([exact, asym]).axes[0]
    local = next(ln for ln in ax.get_lines() if ln.get_label() == "local H, exact")
    np.testing.assert_array_equal(local.get_ydata(), exact.local)
    np.testing.assert_allclose(local.get_xdata(), np.sqrt(exact.levels[1:] * exact.levels[:-1]))
    fit = next(ln for ln in ax.get_lines() if ln.get_label().startswith("exact: H ="))
    assert list(fit.get_ydata()) == [exact.H, exact.H] and list(fit.get_xdata()) == [1, 2**12]
    assert any(ln.get_label() == f"asymptotic formula: H = {asym.H:.3f}" for ln in ax.get_lines())
    assert ax.get_xscale() == "log" and "slots" in ax.get_xlabel()
