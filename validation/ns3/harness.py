"""Build and run red_harness.cc, ns-3's own RedQueueDisc in front of an exponential server.

The harness is compiled with g++ against the headers and shared libraries of the ``ns3`` wheel
(PyPI, ns-3 3.44) as installed in the running interpreter's environment, with an rpath to the
wheel's library directory.  The executable is cached under ``build/ns3/`` of the repository,
keyed by a hash of the source, the wheel's location and the compiler, so it is rebuilt only when
one of them changes.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "red_harness.cc"
REPO = HERE.parents[1]
DEFAULT_CACHE = REPO / "build" / "ns3"
NS3_VERSION = "3.44"
# the libraries the harness links (everything else is pulled in by their DT_NEEDED entries)
LIBS = ("traffic-control", "network", "core")
# what the wheel's own CMake package exports to its users (lib64/cmake/ns3/ns3Targets.cmake)
DEFINES = ("NS3_LOG_ENABLE", "NS3_ASSERT_ENABLE", "NS3_BUILD_PROFILE_RELEASE")


class Ns3Unavailable(RuntimeError):
    """The ns3 wheel or a C++ compiler is missing: the harness cannot be built."""


def wheel_prefix() -> Path:
    """The installed ns3 wheel's prefix (the directory holding include/ns3 and lib64)."""
    spec = importlib.util.find_spec("ns3")
    if spec is None:
        raise Ns3Unavailable(f"the ns3 wheel is not installed in {sys.prefix} (pip install ns3)")
    for loc in spec.submodule_search_locations or []:
        p = Path(loc)
        if (p / "include" / "ns3" / "red-queue-disc.h").is_file() and (p / "lib64").is_dir():
            return p
    raise Ns3Unavailable(f"the installed ns3 package ({list(spec.submodule_search_locations or [])}) has no "
                         "include/ns3/red-queue-disc.h and lib64/: not the ns3 wheel with headers")


def _compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise Ns3Unavailable("no C++ compiler (g++) on PATH to build the ns-3 harness")
    return cxx


def build(cache_dir: Path | None = None) -> Path:
    """Compile the harness (once per source, wheel and compiler) and return the executable."""
    prefix = wheel_prefix()
    lib = prefix / "lib64"
    missing = [n for n in LIBS if not (lib / f"libns{NS3_VERSION}-{n}.so").is_file()]
    if missing:
        raise Ns3Unavailable(f"the ns3 wheel at {prefix} lacks libns{NS3_VERSION}-{missing[0]}.so "
                             f"(this harness is written for ns-3 {NS3_VERSION})")
    cxx = _compiler()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    key = hashlib.sha256(SOURCE.read_bytes() + str(prefix).encode() + str(version).encode()).hexdigest()[:16]
    cache = Path(cache_dir) if cache_dir else DEFAULT_CACHE
    exe = cache / f"red_harness-{key}"
    if exe.is_file():
        return exe
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".red_harness-{key}.{os.getpid()}"
    cmd = [cxx, "-O2", "-std=c++20", *(f"-D{d}" for d in DEFINES), str(SOURCE), "-o", str(tmp),
           f"-I{prefix / 'include'}", f"-L{lib}", f"-Wl,-rpath,{lib}",
           *(f"-lns{NS3_VERSION}-{n}" for n in LIBS)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling the ns-3 harness failed ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")
    os.replace(tmp, exe)  # atomic: concurrent builders never see a half-written file
    return exe


def ns3_args(attributes: dict) -> list[str]:
    """Command-line arguments for RedQueueDisc attributes given by their ns-3 names."""
    out = []
    for name, value in attributes.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        out.append(f"--{name}={value}")
    return out


def run(exe: Path, *, lam: float | None = None, mu: float, attributes: dict | None = None,
        mmpp: tuple | None = None, ecn: float = 0.0, duration: float, warmup: float,
        reps: int = 1, batches: int = 20, seed: int = 1, run: int = 1,
        timeout: float | None = None) -> dict:
    """Run the harness and return its JSON (metrics with 95 % half-widths)."""
    args = [str(exe), f"--mu={mu!r}", f"--ecn={ecn!r}", f"--duration={duration!r}", f"--warmup={warmup!r}",
            f"--reps={reps}", f"--batches={batches}", f"--seed={seed}", f"--run={run}"]
    if mmpp is not None:
        args.append("--mmpp=" + ",".join(repr(float(x)) for x in mmpp))
    else:
        args.append(f"--lambda={lam!r}")
    args += ns3_args(attributes or {})
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"red_harness failed ({' '.join(args)}): {proc.stderr.strip()}")
    return json.loads(proc.stdout)
