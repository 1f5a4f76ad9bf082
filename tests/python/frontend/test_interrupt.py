"""Ctrl-C always works: every command, at every moment, exits 130 within about a second with
"aqmchain: interrupted" on stderr, no traceback and no process left behind.

Each run below is long by construction, not by timing: an iteration whose tolerance no
vector can meet with a billion sweeps allowed, a simulation of 2e9 slots, a transient
analysis of 1e12 uniformisation products..., so the signal always finds the command at
work however fast or loaded the machine is.  The moments are 0.2 s (the imports), 1 s and
3 s after the start; the runs go in parallel, a few at a time.  Latency is measured from
the signal to the exit; the bound asserted here (LATENCY_BOUND) holds on a loaded machine,
the design bound (1 s) is measured on a quiet one (docs/cli.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import interrupt_started

ROOT = Path(__file__).resolve().parents[3]
TRACEBACK = "Traceback (most recent call last)"
LATENCY_BOUND = 8.0  # seconds from SIGINT to exit, on a machine busy with other work
PARALLEL = 4  # runs at a time
MOMENTS = (0.2, 1.0, 3.0)

# An iteration that cannot end: no vector meets tol = 1e-300, and max_iter allows 1e9 sweeps.
ENDLESS_GS = ["--set", "solver.method=gauss_seidel", "--set", "solver.tol=1e-300",
              "--set", "solver.max_iter=1000000000"]
ENDLESS_SIM = ["--slots", "2000000000", "--replications", "2", "--threads", "1"]
SMALL = ["--set", "grid.refine=none", "--set", "grid.k=2"]

COMMANDS: dict[str, list[str]] = {
    # pre-solve (grid refinement, default options), build, then the endless sweeps
    "solve": ["solve", "examples/red_geo_w0002.toml", "--method", "gauss_seidel", "--tol", "1e-300",
              "--max-iter", "1000000000"],
    "simulate": ["simulate", "examples/red_geo.toml", *ENDLESS_SIM],
    "compare": ["compare", "examples/red_geo.toml", *ENDLESS_SIM, *SMALL],
    "policies": ["policies", "examples/red_geo.toml", *SMALL, *ENDLESS_GS],
    "transient": ["transient", "examples/red_geo.toml", *SMALL, "--method", "uniformization",
                  "--times", "1e12"],
    # exact stepping towards t = 1e12 (its budget: 1e8 slots)
    "passage": ["passage", "examples/red_geo.toml", *SMALL, "--to", "queue>=200", "--method", "step",
                "--times", "1e12"],
    "optimize": ["optimize", "examples/red_geo.toml", *SMALL, *ENDLESS_GS],
    # the cluster starts (two worker processes), then each point simulates 2e9 slots
    "sweep": ["sweep", "examples/red_geo.toml", "--param", "aqm.w=0.002,0.003,0.004,0.005", "--workers", "2",
              "--scheduler", "local", "--simulate", *ENDLESS_SIM],
    # the exact count of 12.4 million reachable states (minutes of exploration)
    "info": ["info", "examples/load_step/red.toml", "--set", "aqm.spacing=count", "--explore", "always"],
    "export": ["export", "examples/red_geo.toml", *SMALL, *ENDLESS_GS, "--stationary", "{tmp}/pi.npy"],
    # 10,000 simulated traces of 2^24 slots, one after the other
    "hurst": ["hurst", "examples/redwm_ssmp.toml", "--estimator", "variance_time", "--slots", str(2**24),
              "--replications", "10000"],
}

# Phases that the moments above may miss on a fast machine: each is entered before 1 s and
# lasts beyond 3 s on any machine (unbounded work, or a factorisation far above a second).
PHASES: dict[str, tuple[list[str], tuple[float, ...]]] = {
    # UMFPACK's factorisation of 665,000 unknowns (seconds to minutes, from about 2 s on):
    # abandoned on its thread
    "solve --method direct": (["solve", "examples/red_geo_w0002.toml", "--method", "direct", "--set",
                               "grid.refine=none", "--set", "grid.k=12"], (1.0, 3.0, 4.0)),
    # the response times of front drop: thousands of steps of a tagged-packet chain of 2.7
    # million states, after the pre-solve, the build and the solve
    "tagged chain": (["solve", "examples/red_geo.toml", "--set", "aqm.policy=front"], (5.0, 8.0)),
    "sweep --scheduler sync": (["sweep", "examples/red_geo.toml", "--param", "aqm.w=0.002,0.003", "--scheduler",
                                "sync", *SMALL, *ENDLESS_GS], (1.0, 3.0)),
    # the starts on a local cluster (its start, then the endless evaluations on the workers)
    "krylov": (["solve", "examples/red_geo_w0002.toml", "--method", "krylov", "--tol", "1e-300", "--max-iter",
                "1000000000"], (3.0,)),
    # (multilevel gives up after 100 cycles without progress: a minute of cycles on 665,000 states)
    "multilevel": (["solve", "examples/red_geo_w0002.toml", "--method", "multilevel", "--tol", "1e-300",
                    "--max-iter", "1000000000", "--set", "grid.refine=none", "--set", "grid.k=12"], (3.0,)),
}


def _session(pid: int) -> list[str]:
    """Live processes of the run's session (zombies waiting to be reaped do not count)."""
    ps = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-s", str(pid)], capture_output=True, text=True)
    return [line for line in ps.stdout.splitlines() if line.split() and not line.split()[1].startswith("Z")]


def _imports_started(pid: int) -> bool:
    """numpy is mapped: the package's first statement (the command line's Ctrl-C handling)
    has run, as it comes before numpy's import."""
    try:
        return "numpy" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return True  # gone: the assertions below report why


def _interrupt(argv: list[str], moment: float) -> dict:
    t_start = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "aqmchain", *argv], cwd=ROOT, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env={**os.environ, "AQMCHAIN_PROGRESS": "0"})
    time.sleep(moment)
    while not _imports_started(p.pid) and time.monotonic() - t_start < 60:
        time.sleep(0.01)
    out = {"argv": argv, "moment": moment, "running": p.poll() is None}
    t0 = time.monotonic()
    try:
        if out["running"]:
            os.killpg(p.pid, signal.SIGINT)  # as a terminal does: the whole process group
        _, err = p.communicate(timeout=60)
        out["latency"] = time.monotonic() - t0
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        _, err = p.communicate()
        out["latency"] = float("inf")
    deadline = time.monotonic() + 10
    while (left := _session(p.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        os.killpg(p.pid, signal.SIGKILL)
    out.update(code=p.returncode, err=err, left=left, total=time.monotonic() - t_start)
    return out


def _check(results: list[dict]) -> None:
    for r in results:  # shown with -s / on failure
        print(f"{' '.join(r['argv'][:2]):40s} @ {r['moment']:.1f} s: code {r['code']}, "
              f"latency {r.get('latency', float('nan')):.2f} s, run {r['total']:.1f} s")
    bad = []
    for r in results:
        what = f"{' '.join(r['argv'][:2])} @ {r['moment']} s"
        if not r["running"]:
            bad.append(f"{what}: ended before the signal (code {r['code']}): the run must be long by construction")
        elif r["code"] != 130 or "aqmchain: interrupted" not in r["err"] or TRACEBACK in r["err"]:
            bad.append(f"{what}: code {r['code']}, stderr {r['err'][-400:]!r}")
        elif not r["latency"] < LATENCY_BOUND:
            bad.append(f"{what}: exit {r['latency']:.2f} s after SIGINT")
        elif r["left"]:
            bad.append(f"{what}: processes left behind: {r['left']}")
    assert not bad, "\n".join(bad)


def _run_all(cases: list[tuple[list[str], float]]) -> list[dict]:
    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(lambda c: _interrupt(*c), cases))


def test_every_command_exits_130_at_every_moment(tmp_path):
    results = _run_all([([a.replace("{tmp}", str(tmp_path)) for a in argv], t) for argv in COMMANDS.values()
                        for t in MOMENTS])
    assert not (tmp_path / "pi.npy").exists()  # nothing written
    _check(results)


def test_ctrl_c_in_the_phases_that_take_long():
    results = _run_all([(argv, t) for argv, moments in PHASES.values() for t in moments])
    _check(results)


# ------------------------------------------------------------------ the Python API

SCRIPT = r"""
import sys, time
import aqmchain
red = aqmchain.DropFunction.red(100, 200, 0.1)
m = aqmchain.Model(buffer=250, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.5),
                   aqm=aqmchain.Aqm(drop=red, w=0.002), grid=aqmchain.GridSpec(k=4))
chain = aqmchain.build_chain(m)
print("started", flush=True)
t = time.time()
try:
    aqmchain.solve_stationary(chain, method="%s", max_iter=1000000000, tol=1e-300, response="none")
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted %%.2f" %% (time.time() - t), flush=True)
except Exception as exc:  # a non-convergence error would also end the run: report it
    print("error", type(exc).__name__, flush=True)
"""


def test_ctrl_c_interrupts_gauss_seidel_and_power():
    """In a program, Ctrl-C during a core loop raises KeyboardInterrupt."""
    procs = {m: subprocess.Popen([sys.executable, "-c", SCRIPT % m], stdout=subprocess.PIPE, text=True)
             for m in ("gauss_seidel", "power")}
    for method, p in procs.items():
        assert p.stdout.readline().strip() == "started", method
    time.sleep(0.5)
    for p in procs.values():
        p.send_signal(signal.SIGINT)
    for method, p in procs.items():
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            raise AssertionError(f"{method}: still running 30 s after SIGINT")
        assert out.strip().startswith("interrupted"), (method, out)
        assert float(out.split()[1]) < LATENCY_BOUND + 0.5


LOOP = r"""
import time
import aqmchain
from aqmchain import _core
m = aqmchain.load_model("examples/red_geo.toml").replace(grid={"refine": "none", "k": 2})
chain = aqmchain.build_chain(m)
solver = _core.DirectSolver(_core.StationaryOptions(method="direct"))
solver.solve(chain)  # the analysis is kept: every later call factorises and solves, without a loop of ours
print("started", flush=True)
t = time.time()
try:
    while time.time() - t < 20:
        solver.solve(chain)
    print("lost", flush=True)
except KeyboardInterrupt:
    print("interrupted %.2f" % (time.time() - t), flush=True)
"""


def test_a_signal_during_a_core_call_is_never_lost():
    """Short core calls one after the other (an optimizer's evaluations): almost every signal
    comes while one of them runs, with the core's handler installed; the call must hand it on
    (KeyboardInterrupt at once), not drop it and let the loop run on."""
    p = subprocess.Popen([sys.executable, "-c", LOOP], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    out, latency = interrupt_started(p)
    assert out.strip().startswith("interrupted"), out
    assert latency < LATENCY_BOUND


CLUSTER_CHILDREN = r"""
import importlib, os
sweep = importlib.import_module("aqmchain.sweep")
# without the workers' own preload (which ignores SIGINT once it runs): what they start with
cluster = sweep._start_local_cluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                     silence_logs=50)
try:
    import multiprocessing
    for child in multiprocessing.active_children():
        status = open(f"/proc/{child.pid}/status").read()
        ignored = int(next(l for l in status.splitlines() if l.startswith("SigIgn")).split()[1], 16)
        print(child.pid, bool(ignored & (1 << (2 - 1))), flush=True)   # SIGINT is signal 2
finally:
    cluster.close()
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the signal dispositions from /proc")
def test_a_local_clusters_workers_ignore_sigint_from_their_start():
    # a Ctrl-C in a terminal reaches the whole process group: a worker still importing must not
    # print a traceback of its own (they were spawned by cluster threads without the blocked mask)
    p = subprocess.run([sys.executable, "-c", CLUSTER_CHILDREN], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [line.split() for line in p.stdout.split("\n") if line.strip()]
    assert len(rows) >= 2 and all(flag == "True" for _, flag in rows), p.stdout


UNRAISABLE = r"""
import sys, weakref
sys.argv[0] = "aqmchain"          # the command line, as the console script runs it
import aqmchain                   # installs the command line's Ctrl-C handling
class Lock:
    pass
def callback(_):                  # as the import system's module-lock callback, hit by Ctrl-C
    raise KeyboardInterrupt
lock = Lock()
ref = weakref.ref(lock, callback)
del lock                          # Python cannot raise from the callback: "Exception ignored in ..."
print("went on", flush=True)
"""


def test_an_interrupt_python_cannot_raise_still_ends_the_command():
    """A Ctrl-C that lands in a weakref callback (the import system's module locks, while the
    command still imports) cannot be raised; the command ends as interrupted all the same
    instead of running on (it did once: `compare` ran to its end after Ctrl-C at 0.2 s)."""
    p = subprocess.run([sys.executable, "-c", UNRAISABLE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 130, (p.returncode, p.stdout, p.stderr)
    assert "went on" not in p.stdout and "aqmchain: interrupted" in p.stderr and TRACEBACK not in p.stderr
