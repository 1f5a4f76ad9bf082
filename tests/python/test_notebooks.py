"""Every notebook in docs/notebooks/ runs from top to bottom (its code cells, in order, in one
fresh interpreter with a non-interactive matplotlib backend).  Notebooks are stored without
outputs; `make notebooks` opens them in JupyterLab, which the tests do not need."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "docs" / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path):
    nb = json.loads(path.read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    script = tmp_path / (path.stem + ".py")
    script.write_text("\n\n".join(f"# --- cell {i}\n{src}" for i, src in enumerate(cells)) + "\n")
    env = dict(os.environ, MPLBACKEND="Agg")
    # run like a kernel does: the code is not the __main__ *file*, so worker processes started
    # by spawn (a Dask LocalCluster in the sweep notebook) do not re-run the notebook
    runner = "import sys; exec(compile(open(sys.argv[1]).read(), sys.argv[1], 'exec'))"
    p = subprocess.run([sys.executable, "-c", runner, str(script)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
