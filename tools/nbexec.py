"""Execute the tutorial notebooks as Jupyter does, for the tests and the documentation site.

Each notebook runs in a fresh IPython kernel (ipykernel, with the Python running this module,
so the package installed in .venv) with the notebook's own folder as the working directory,
and matplotlib's inline backend (what Jupyter uses; the environment's MPLBACKEND is not passed
on).  After the last cell an extra cell, removed again from the result, lists the processes
the kernel still has (a Dask cluster that was not closed, say): ``Executed.leftover``.

Executed notebooks are cached in build/notebooks/ under a key of the notebook's text and the
installed package's files, so `make test` runs each notebook once and the site build (which
shows the executed outputs) reuses them.

    python tools/nbexec.py [NOTEBOOK ...]      # execute (all by default), print the seconds
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "docs" / "notebooks"
CACHE_DIR = ROOT / "build" / "notebooks"
TIMEOUT = 600  # seconds per cell
STARTUP_TIMEOUT = 180  # seconds for a kernel to start (a busy machine)
#: The extra last cell: the kernel's descendant processes (pid, start time, command).  They must
#: all be gone within LEFTOVER_WAIT seconds of the kernel's shutdown.
_LEFTOVER_CELL = """\
import json as _j, psutil as _p
print("__children__" + _j.dumps([(c.pid, c.create_time(), " ".join(c.cmdline()[:6]))
                                 for c in _p.Process().children(recursive=True)]))"""
LEFTOVER_WAIT = 10.0


@dataclasses.dataclass
class Executed:
    path: Path
    nb: object = None           # the executed nbformat.NotebookNode (None if it failed)
    seconds: float = 0.0
    error: str | None = None    # the first failing cell's error, if any
    leftover: list = dataclasses.field(default_factory=list)
    cached: bool = False


def notebooks() -> list[Path]:
    return sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def package_key() -> str:
    """A digest of the installed aqmchain package (its files' names and contents: a reinstall of
    the same build keeps it)."""
    spec = importlib.util.find_spec("aqmchain")
    h = hashlib.sha256()
    if spec is not None and spec.origin:
        pkg = Path(spec.origin).parent
        for p in sorted(pkg.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(f"{p.relative_to(pkg)}:".encode())
                h.update(p.read_bytes())
    return h.hexdigest()


def cache_key(path: Path, pkg: str | None = None) -> str:
    """The notebook's text, the installed package and the model files under examples/ (which
    notebooks read)."""
    h = hashlib.sha256(path.read_bytes())
    h.update((pkg or package_key()).encode())
    for p in sorted((ROOT / "examples").rglob("*.toml")):
        h.update(f"{p.relative_to(ROOT)}:".encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _kernel_manager():
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    # no kernel directories: always the native kernel of this interpreter (sys.executable),
    # never a "python3" kernel spec installed elsewhere on the machine
    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[]))


def read(path: Path):
    """The notebook as an nbformat node (cells without an id, as stored here, get one)."""
    import nbformat

    d = json.loads(Path(path).read_text(encoding="utf-8"))
    for i, cell in enumerate(d.get("cells", [])):
        cell.setdefault("id", f"cell-{i}")
    return nbformat.reads(json.dumps(d), as_version=4)


async def _survivors(children: list, wait: float) -> list[str]:
    """Those of the (pid, start time, command) processes still running after ``wait`` seconds."""
    import psutil

    procs = {}
    for pid, started, cmd in children:
        try:
            p = psutil.Process(pid)
            if abs(p.create_time() - started) < 1e-3:
                procs[p] = cmd
        except psutil.NoSuchProcess:
            pass
    def alive(p) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + wait
    while procs and time.monotonic() < deadline:
        procs = {p: c for p, c in procs.items() if alive(p)}
        if procs:
            await asyncio.sleep(0.1)
    return [f"{p.pid}: {c}" for p, c in procs.items() if alive(p)]


async def _execute(path: Path, leftover_wait: float) -> Executed:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = read(path)
    nb.cells.append(nbformat.v4.new_code_cell(_LEFTOVER_CELL))
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    client = NotebookClient(nb, km=_kernel_manager(), timeout=TIMEOUT, startup_timeout=STARTUP_TIMEOUT,
                            allow_errors=False, resources={"metadata": {"path": str(path.parent)}},
                            extra_arguments=["--IPKernelApp.log_level=ERROR"])
    out = Executed(path)
    t0 = time.perf_counter()
    try:
        await client.async_execute(cleanup_kc=True, env=env, cwd=str(path.parent))
    except CellExecutionError as exc:
        out.error = str(exc)
    except Exception as exc:  # a kernel that dies, a timeout
        out.error = f"{type(exc).__name__}: {exc}"
    out.seconds = time.perf_counter() - t0
    last = nb.cells.pop()
    for o in last.get("outputs", []):
        text = o.get("text", "")
        if o.get("output_type") == "stream" and "__children__" in text:
            # the kernel is shut down: its processes must end with it
            out.leftover = await _survivors(json.loads(text.split("__children__", 1)[1]), leftover_wait)
    if out.error is None:
        out.nb = nb
    return out


async def _execute_all(paths: list[Path], workers: int, leftover_wait: float) -> list[Executed]:
    sem = asyncio.Semaphore(max(1, workers))

    async def one(p: Path) -> Executed:
        async with sem:
            return await _execute(p, leftover_wait)

    return await asyncio.gather(*(one(p) for p in paths))


def execute(paths: list[Path] | None = None, *, workers: int = 2, store: bool = True,
            leftover_wait: float = LEFTOVER_WAIT) -> list[Executed]:
    """Execute the notebooks (all of docs/notebooks by default), ``workers`` kernels at a time;
    store the successful ones in the cache (``store``).  A process of the kernel still running
    ``leftover_wait`` seconds after the kernel's shutdown is listed in ``Executed.leftover``."""
    import nbformat

    paths = list(paths) if paths is not None else notebooks()
    results = asyncio.run(_execute_all(paths, workers, leftover_wait))
    if store:
        pkg = package_key()
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        for r in results:
            if r.nb is not None and not r.leftover:
                r.nb.metadata["aqmchain_execution"] = {"key": cache_key(r.path, pkg), "seconds": round(r.seconds, 2)}
                nbformat.write(r.nb, CACHE_DIR / r.path.name)
    return results


def cached(path: Path, pkg: str | None = None):
    """The executed notebook from the cache if it is of this text and this package, else None."""
    p = CACHE_DIR / path.name
    if not p.is_file():
        return None
    nb = read(p)
    if nb.metadata.get("aqmchain_execution", {}).get("key") != cache_key(path, pkg):
        return None
    return nb


def executed(paths: list[Path] | None = None, *, workers: int = 2) -> dict[Path, object]:
    """The executed notebooks, from the cache where it is current, executing the others.
    A notebook that fails raises RuntimeError with its error."""
    paths = list(paths) if paths is not None else notebooks()
    pkg = package_key()
    out = {p: cached(p, pkg) for p in paths}
    todo = [p for p, nb in out.items() if nb is None]
    for r in execute(todo, workers=workers) if todo else []:
        if r.error is not None:
            raise RuntimeError(f"notebook {r.path.name} failed:\n{r.error}")
        if r.leftover:
            raise RuntimeError(f"notebook {r.path.name} left processes running: {r.leftover}")
        out[r.path] = r.nb
    return out


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or notebooks()
    t0 = time.perf_counter()
    results = execute(paths)
    for r in results:
        status = "ok" if r.error is None and not r.leftover else ("FAILED" if r.error else "LEFT PROCESSES")
        print(f"{r.path.name:<36} {r.seconds:6.1f} s  {status}")
        if r.error:
            print(r.error[-2000:])
    print(f"all: {time.perf_counter() - t0:.1f} s wall")
    return 0 if all(r.error is None and not r.leftover for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
