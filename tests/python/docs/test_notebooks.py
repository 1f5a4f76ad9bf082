"""Every notebook in docs/notebooks/ runs as a user runs it in Jupyter: executed by nbclient in
a real IPython kernel (ipykernel), with the notebook's own folder as the working directory and
matplotlib's inline backend.  No cell output is an error; every cell that makes a figure
displays it as a PNG (not the text ``<Figure size 700x420 with 1 Axes>`` of a figure nobody
rendered); the kernel has no processes left when the notebook is done (the sweep notebook's
Dask cluster is closed).  The notebooks run two at a time (tools/nbexec.py), and the executed
copies are kept in build/notebooks/ for the documentation site."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools"))

import nbexec  # noqa: E402

NOTEBOOKS = nbexec.notebooks()
#: A code cell makes a figure if it calls a plot function or builds / shows a Figure.
MAKES_FIGURE = re.compile(r"\bplots\.\w+\(|\.plot(?:_curves)?\(|\bplt\.subplots\(|\bFigure\(|^fig\s*$", re.M)
TEXT_FIGURE = re.compile(r"<(?:matplotlib\.figure\.)?Figure size [^>]*>")


@pytest.fixture(scope="module")
def runs():
    return {r.path: r for r in nbexec.execute(NOTEBOOKS, workers=2)}


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 10 and all(p.parent == ROOT / "docs" / "notebooks" for p in NOTEBOOKS)


def _texts(output) -> str:
    """The output's text, unless it is the plain-text fallback of an image."""
    if output.get("output_type") == "stream":
        return output.get("text", "")
    data = output.get("data", {})
    return "" if "image/png" in data else data.get("text/plain", "")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_a_kernel_from_its_folder(path, runs):
    r = runs[path]
    assert r.error is None, r.error[-4000:]
    assert not r.leftover, f"processes left running after the notebook: {r.leftover}"
    figures = 0
    for i, cell in enumerate(c for c in r.nb.cells if c.cell_type == "code"):
        outputs = cell.get("outputs", [])
        assert not [o for o in outputs if o.get("output_type") == "error"], f"code cell {i}"
        texts = "".join(_texts(o) for o in outputs)
        assert not TEXT_FIGURE.search(texts), f"code cell {i} shows a figure as text: {texts[:200]!r}"
        pngs = [o for o in outputs if "image/png" in o.get("data", {})]
        if MAKES_FIGURE.search(cell.source):
            assert pngs, f"code cell {i} makes a figure but displays no image/png:\n{cell.source}"
            figures += len(pngs)
    assert figures or not MAKES_FIGURE.search("\n".join(c.source for c in r.nb.cells if c.cell_type == "code"))


def test_the_executed_copies_are_kept_for_the_site(runs):
    ok = [p for p, r in runs.items() if r.error is None and not r.leftover]
    assert ok
    pkg = nbexec.package_key()
    for p in ok:
        nb = nbexec.cached(p, pkg)
        assert nb is not None and any(c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_the_runner_uses_the_notebook_folder_and_sees_processes_left_behind(tmp_path):
    import nbformat
    import psutil

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, subprocess, sys\n"
        "print(os.getcwd())\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        "print('child', child.pid)")])
    path = tmp_path / "leaves_a_process.ipynb"
    nbformat.write(nb, path)
    (r,) = nbexec.execute([path], store=False, leftover_wait=1.0)
    assert r.error is None, r.error
    out = "".join(o.get("text", "") for o in r.nb.cells[0].outputs)
    pid = int(out.split("child ")[1])
    try:
        assert out.splitlines()[0] == str(tmp_path)
        assert len(r.leftover) == 1 and r.leftover[0].startswith(f"{pid}:")
    finally:
        psutil.Process(pid).kill()
