"""Parameter sweeps on Dask: :func:`sweep` solves (and optionally simulates) a model at every
point of a grid over model-file keys and returns a :class:`SweepResult`, a pandas DataFrame
with one row per point.

Each point is the model file's document with the swept keys set (``aqm.w``,
``service.mu``, ``aqm.triple[0]``, ``grid.k``, ``aqm.policy``, ...; any key of
docs/model-file.md), turned into a model with the usual checks and solved with
:func:`aqmchain.solve_stationary`.  A point that raises (an invalid value, a solve that does
not converge, a state space over the budget) is recorded in its row (``status``, ``error``)
and the sweep goes on.

Where the points run (``scheduler``):

- ``None``: the address in the environment variable ``AQMCHAIN_SCHEDULER`` if set, else
  ``"local"``;
- ``"local"``: a ``dask.distributed.LocalCluster`` on this machine (``workers`` processes,
  one thread each), started for the sweep and shut down after it;
- ``"sync"``: in this process, one point after the other (no cluster; for debugging:
  tracebacks and breakpoints work as usual);
- an address (``"tcp://host:8786"``) or a ``dask.distributed.Client``: an existing cluster
  whose workers can import aqmchain.

The optimizer's multi-start (:func:`aqmchain.optimize` with ``scheduler=``) runs its starts
through :func:`run_tasks`, the same machinery.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
import os
import time
import traceback
from typing import Any, Callable, Sequence

import numpy as np

from . import _checks, _core
from ._core import ModelError, OptionError

__all__ = ["sweep", "SweepResult", "parse_values", "run_tasks", "SCHEDULER_ENV", "METRIC_UNITS"]

#: Environment variable naming the scheduler of an existing Dask cluster.
SCHEDULER_ENV = "AQMCHAIN_SCHEDULER"

#: Units of the scalar metrics (axis labels), "{t}" the model's time unit.
METRIC_UNITS: dict[str, str] = {
    "arrival_rate": "packets / {t1}", "throughput": "packets / {t1}", "loss": "fraction of arrivals",
    "loss_aqm": "fraction of arrivals", "loss_overflow": "fraction of arrivals", "mark_prob": "fraction of arrivals",
    "pushed_out_prob": "fraction of admitted packets", "mean_system": "packets", "var_system": "packets²",
    "mean_queue": "packets", "var_queue": "packets²", "mean_avg": "packets", "mean_response": "{t}",
    "var_response": "{t}²", "littles_law_error": "relative",
}
#: Units of model-file keys (axis labels).
KEY_UNITS: dict[str, str] = {
    "model.buffer": "packets", "aqm.min_th": "packets", "aqm.max_th": "packets", "aqm.k_l": "packets",
    "aqm.k_h": "packets", "aqm.q_max": "packets", "aqm.w": "weight per update", "aqm.p_max": "probability",
    "aqm.ecn": "probability", "service.mu": "service probability per slot", "source.alpha": "arrival probability per slot",
    "source.rate": "packets per time unit", "source.mean": "arrival probability per slot", "grid.k": "points per packet",
}


# ------------------------------------------------------------------ values


def parse_values(key: str, text: str) -> list[Any]:
    """The values of one swept key from its command-line form: ``"0.002,0.005,0.01"`` (a list;
    each entry read as a TOML value, so ``tail,front`` and ``[0.1,0,0]`` work),
    ``"LO:HI:N"`` (N evenly spaced values from LO to HI inclusive) or ``"log:LO:HI:N"``
    (N geometrically spaced values)."""
    from .modelfile import parse_value

    text = text.strip()
    where = f"--param {key}"
    try:
        if text.startswith("log:") or (text.count(":") == 2 and "[" not in text):
            log = text.startswith("log:")
            lo, hi, n = text.removeprefix("log:").split(":")
            lo_f, hi_f, n_f = float(lo), float(hi), float(n)
            if not n_f.is_integer() or not 1 <= n_f <= 100_000:
                raise _checks.model_error(where, "LO:HI:N with N a whole number in [1, 100000]", text)
            if log and not (lo_f > 0 and hi_f > 0):
                raise _checks.model_error(where, "log:LO:HI:N with LO > 0 and HI > 0", text)
            if not (math.isfinite(lo_f) and math.isfinite(hi_f)):
                raise _checks.model_error(where, "finite LO and HI", text)
            v = np.geomspace(lo_f, hi_f, int(n_f)) if log else np.linspace(lo_f, hi_f, int(n_f))
            return [float(x) for x in v]
    except ValueError:
        raise _checks.model_error(where, "LO:HI:N or log:LO:HI:N with numbers", text) from None
    parts, depth, cur = [], 0, ""
    for ch in text:  # split on commas outside brackets
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += (ch == "[") - (ch == "]")
        cur += ch
    parts.append(cur)
    values = [parse_value(p) for p in parts if p.strip()]
    if not values:
        raise _checks.model_error(where, "a list 'a,b,c', 'LO:HI:N' or 'log:LO:HI:N'", text)
    return values


def _grid(params: Any) -> tuple[list[str], list[tuple]]:
    """(keys, points): the Cartesian product of the value lists, the first key varying slowest."""
    if isinstance(params, dict):
        items = list(params.items())
    elif isinstance(params, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in params):
        items = list(params)
    else:
        raise _checks.model_error("params", "a dict {model-file key: values} (e.g. {'aqm.w': [0.002, 0.07]})", params)
    if not items:
        raise _checks.model_error("params", "at least one swept key", params)
    keys, lists = [], []
    for key, values in items:
        if not isinstance(key, str):
            raise _checks.model_error("params", "model-file keys (strings) such as 'aqm.w'", key)
        if isinstance(values, str):
            values = parse_values(key, values)
        elif isinstance(values, (int, float)) and not isinstance(values, bool):
            values = [values]
        values = [v.item() if isinstance(v, np.generic) else v for v in list(values)]
        if not values:
            raise _checks.model_error(f"params[{key}]", "at least one value", values)
        keys.append(key)
        lists.append(values)
    if len(set(keys)) != len(keys):
        raise _checks.model_error("params", "distinct keys", keys)
    points = list(itertools.product(*lists))
    if len(points) > 1_000_000:
        raise _checks.model_error("params", "at most 1e6 points", len(points))
    return keys, points


# ------------------------------------------------------------------ one point (runs on a worker)


def _evaluate_run(doc: dict, keys: Sequence[str], points: Sequence[Sequence[Any]], solver: dict, sim: dict | None,
                  keep_results: bool, warm: bool) -> list[dict]:
    """Solve (and simulate) the points of one run of consecutive grid points in order; with
    ``warm``, each point starts from the previous point's solution (see :func:`sweep`)."""
    out, previous = [], None
    for values in points:
        rec, previous = _evaluate_point(doc, keys, values, solver, sim, keep_results, previous if warm else None)
        out.append(rec)
    return out


def _evaluate_point(doc: dict, keys: Sequence[str], values: Sequence[Any], solver: dict, sim: dict | None,
                    keep_results: bool, warm: Any = None) -> tuple[dict, Any]:
    """Solve (and simulate) the model of one point, from the warm start ``warm`` (a
    :class:`aqmchain.stationary.WarmStart`) if given; never raises except on interruption.
    Returns the point's record and its warm start (None when it did not converge)."""
    from .modelfile import model_from_dict, set_key
    from .simulation import simulate
    from .stationary import NonConvergenceError, WarmStart, _solve_warm

    t0 = time.perf_counter()
    rec: dict[str, Any] = {"status": "ok", "error": "", "result": None, "simulation": None}
    stage, state = "model", None
    try:
        d = copy.deepcopy(doc)
        for k, v in zip(keys, values):
            set_key(d, k, v)
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model, file_solver = model_from_dict(d)
        rec["warnings"] = "; ".join(str(w.message) for w in caught)
        stage = "solve"
        try:
            r = _solve_warm(model, warm, **{**file_solver, **solver})
            state = WarmStart.of(r)
        except NonConvergenceError as exc:
            r = exc.result
            rec.update(status="failed", error=" ".join(str(exc).split()))
        rec["result"] = r
        if sim is not None and rec["status"] == "ok":
            stage = "simulate"
            rec["simulation"] = simulate(model, **sim)
    except (ModelError, OptionError) as exc:
        rec.update(status="invalid" if stage == "model" else "failed", error=" ".join(str(exc).split()))
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a failed point is a row, not the end of the sweep
        rec.update(status="failed", error=f"{type(exc).__name__}: {' '.join(str(exc).split())}")
        rec["traceback"] = traceback.format_exc(limit=4)
    rec["seconds"] = time.perf_counter() - t0
    if not keep_results:
        rec["result_dict"] = None if rec["result"] is None else _scalars(rec["result"])
        rec["sim_dict"] = None if rec["simulation"] is None else _sim_scalars(rec["simulation"])
        rec["result"] = rec["simulation"] = None
    return rec, state


def _scalars(r: Any) -> dict[str, Any]:
    from .stationary import SCALAR_METRICS

    out = {name: getattr(r, name, None) for name, _ in SCALAR_METRICS}
    out.update(states=int(r.states), nnz=int(r.nnz), solver_method=r.info.method, residual=float(r.info.residual),
               iterations=int(r.info.iterations), warm_started=bool(r.warm and r.warm.get("x0")),
               solve_seconds=float(sum(r.info.seconds.get(k, 0.0) for k in r.info.seconds
                                       if k == "solve" or k.startswith("build_"))))
    return out


def _sim_scalars(s: Any) -> dict[str, Any]:
    from .simulation import SCALARS

    out: dict[str, Any] = {}
    for name in SCALARS:
        out[f"sim_{name}"] = getattr(s, name)
        out[f"sim_{name}_ci"] = s.ci.get(name)
    return out


# ------------------------------------------------------------------ the machinery


@contextlib.contextmanager
def _children_ignore_sigint():
    """Processes that multiprocessing spawns meanwhile (a local cluster's workers and its
    resource tracker) start with SIGINT ignored: they are exec'd through a two-line shell
    script that ignores it first, and an ignored signal stays ignored across exec (Python then
    installs no handler of its own).  The worker processes are spawned by the cluster's own
    threads, whose signal mask is not always the one of the thread that asked for the cluster,
    so a blocked mask alone left a window (the imports of a starting worker) in which a Ctrl-C
    in the terminal made a worker print a traceback.  Where no such script can be written and
    run (not POSIX, an unwritable or noexec temporary folder), nothing changes."""
    import multiprocessing.spawn as mp_spawn

    previous = mp_spawn.get_executable()
    wrapper = _sigint_ignoring_executable(os.fsdecode(previous))
    if wrapper is None:
        yield
        return
    mp_spawn.set_executable(wrapper)
    try:
        yield
    finally:
        mp_spawn.set_executable(previous)


_WRAPPERS: dict[str, str | None] = {}


def _sigint_ignoring_executable(python: str) -> str | None:
    """A script that runs `python` with SIGINT ignored (written once per user and interpreter
    into the temporary folder, checked to run), or None where that cannot be done."""
    if python in _WRAPPERS:
        return _WRAPPERS[python]
    import hashlib
    import shlex
    import stat
    import subprocess
    import tempfile

    path = None
    if os.name == "posix" and os.path.exists("/bin/sh"):
        text = f'#!/bin/sh\ntrap "" INT\nexec {shlex.quote(python)} "$@"\n'
        digest = hashlib.sha1(text.encode()).hexdigest()[:12]
        candidate = os.path.join(tempfile.gettempdir(), f"aqmchain-python-{os.getuid()}-{digest}")
        try:
            current = None
            if os.path.exists(candidate):
                with open(candidate) as f:
                    current = f.read()
            if current != text:
                tmp = f"{candidate}.{os.getpid()}"
                with open(tmp, "w") as f:
                    f.write(text)
                os.chmod(tmp, stat.S_IRWXU)
                os.replace(tmp, candidate)
            if subprocess.run([candidate, "-c", "pass"], timeout=60).returncode == 0:
                path = candidate
        except (OSError, subprocess.SubprocessError):
            path = None
    _WRAPPERS[python] = path
    return path


def _start_local_cluster(**kwargs: Any) -> Any:
    """``LocalCluster(**kwargs)``, started so that its worker processes never see SIGINT while
    this process stays interruptible during the start.

    Ctrl-C in a terminal reaches the whole process group; it is this process that cancels the
    points and closes the cluster, and the workers must not die first with tracebacks of their
    own.  The workers are spawned with SIGINT ignored from their first instruction (see
    _children_ignore_sigint), and the cluster is made on a helper thread that starts with SIGINT
    blocked; ``aqmchain._dask_worker`` ignores it again in each worker.  This thread
    keeps SIGINT, so a Ctrl-C during the start raises KeyboardInterrupt here at once; the helper
    then closes the cluster it was making (the workers also exit when this process does: they
    watch a pipe to it)."""
    import signal
    import threading

    from dask.distributed import LocalCluster

    state: dict[str, Any] = {"abandoned": False}
    lock = threading.Lock()

    def start() -> None:
        try:
            with contextlib.redirect_stdout(None), _children_ignore_sigint():
                cluster = LocalCluster(**kwargs)
        except BaseException as exc:  # noqa: BLE001  (handed to the waiting thread)
            state["error"] = exc
            return
        with lock:
            state["cluster"] = cluster
            abandoned = state["abandoned"]
        if abandoned:
            cluster.close()

    can_mask = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    if can_mask:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        helper = threading.Thread(target=start, name="aqmchain-cluster-start", daemon=True)
        helper.start()
    finally:
        if can_mask:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
    try:
        while helper.is_alive():
            helper.join(0.05)
    except BaseException:
        with lock:
            state["abandoned"] = True
            cluster = state.get("cluster")
        if cluster is not None:  # closed in the background: the interruption does not wait for it
            _close_in_background(None, cluster)
        raise
    if "error" in state:
        raise state["error"]
    return state["cluster"]


def _close(client: Any, cluster: Any) -> None:
    try:
        if client is not None:
            client.close()
    finally:
        cluster.close()


def _close_in_background(client: Any, cluster: Any) -> None:
    import threading

    threading.Thread(target=_close, args=(client, cluster), name="aqmchain-cluster-close", daemon=True).start()


@contextlib.contextmanager
def _client(scheduler: Any, workers: int | None):
    """A dask.distributed Client for ``scheduler`` (closed afterwards when we made it)."""
    from dask.distributed import Client

    if isinstance(scheduler, Client):
        yield scheduler
        return
    if scheduler == "local":
        n = _local_workers(workers)
        # the workers never see SIGINT; this process does, during the start too
        cluster = _start_local_cluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                                       silence_logs=50, preload=["aqmchain._dask_worker"])
        client = None
        try:
            client = Client(cluster)
            yield client
        except KeyboardInterrupt:  # closed in the background: Ctrl-C does not wait for the workers
            _close_in_background(client, cluster)
            raise
        except BaseException:
            _close(client, cluster)
            raise
        _close(client, cluster)
        return
    try:
        client = Client(scheduler, timeout="10s")
    except OSError as exc:
        raise _checks.option_error("scheduler", "the address of a running Dask scheduler (tcp://host:port), "
                                   "'local' or 'sync'", f"{scheduler} ({exc})") from None
    try:
        yield client
    finally:
        client.close()


PROBE_SECONDS = 3.0  #: how long a scheduler address may take to accept a TCP connection


def _probe(address: str) -> None:
    """Refuse at once a tcp:// (or tls://, or bare host:port) scheduler address where nothing
    accepts a connection (Dask's client would retry for its whole timeout)."""
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(address if "://" in address else "tcp://" + address)
    if u.scheme not in ("tcp", "tls"):
        return
    try:
        host, port = u.hostname, u.port
    except ValueError:
        host = port = None
    if not host or port is None:
        raise _checks.option_error("scheduler", "a scheduler address such as tcp://host:8786", address)
    try:
        socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
    except OSError as exc:
        raise _checks.option_error("scheduler", "the address of a running Dask scheduler (tcp://host:port), "
                                   "'local' or 'sync'", f"{address} ({exc.strerror or exc})") from None


def resolve_scheduler(scheduler: Any) -> Any:
    """``None`` -> $AQMCHAIN_SCHEDULER or "local"; strings are checked."""
    if scheduler is None:
        scheduler = os.environ.get(SCHEDULER_ENV) or "local"
    if isinstance(scheduler, str):
        s = scheduler.strip()
        if s in ("local", "sync"):
            return s
        if "://" in s or (":" in s and s.rsplit(":", 1)[1].isdigit()):
            _probe(s)
            return s
        raise _checks.option_error("scheduler", "'local', 'sync', a scheduler address such as tcp://host:8786 "
                                   "or a dask.distributed.Client", scheduler)
    try:
        from dask.distributed import Client
    except ImportError:  # pragma: no cover - dask is a dependency
        Client = ()
    if isinstance(scheduler, Client):
        return scheduler
    raise _checks.option_error("scheduler", "'local', 'sync', an address or a dask.distributed.Client", scheduler)


def run_tasks(fn: Callable, args: Sequence[tuple], *, scheduler: Any = None, workers: int | None = None,
              on_done: Callable[[int, Any], None] | None = None,
              on_error: Callable[[int, BaseException], Any] | None = None) -> list[Any]:
    """``[fn(*a) for a in args]`` on Dask (or in this process with ``scheduler="sync"``), in
    order; ``on_done(i, value)`` is called in this process as each task completes.  ``fn``
    must be a module-level function whose arguments pickle.  A task that fails on the cluster
    (it raised, or its worker died: ``KilledWorker``) gives ``on_error(i, exception)`` as its
    value, or re-raises here without ``on_error``."""
    scheduler = resolve_scheduler(scheduler)
    out: list[Any] = [None] * len(args)
    if not args:
        return out
    if scheduler == "sync":
        for i, a in enumerate(args):
            out[i] = fn(*a)
            if on_done is not None:
                on_done(i, out[i])
        return out
    from dask.distributed import as_completed

    with _client(scheduler, workers) as client:
        futures = [client.submit(fn, *a, pure=False, key=f"aqmchain-{i}-{os.getpid()}-{time.monotonic_ns()}")
                   for i, a in enumerate(args)]
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for fut in as_completed(futures):
                i = index[fut.key]
                try:
                    out[i] = fut.result()
                except Exception as exc:  # noqa: BLE001  (the task's failure, reported per task)
                    if on_error is None:
                        raise
                    out[i] = on_error(i, exc)
                if on_done is not None:
                    on_done(i, out[i])
        except KeyboardInterrupt:
            if scheduler != "local":  # a cluster of our own is closed, points and all
                client.cancel(futures)
            raise
        except BaseException:
            client.cancel(futures)
            raise
    return out


# ------------------------------------------------------------------ the result


_CLASS: dict[str, type] = {}


def __getattr__(name: str) -> Any:  # SweepResult is made on first use: pandas loads only for sweeps
    if name == "SweepResult":
        return _sweep_result_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _sweep_result_class() -> type:
    if "SweepResult" not in _CLASS:
        _CLASS["SweepResult"] = _make_sweep_result()
    return _CLASS["SweepResult"]


def _make_sweep_result() -> type:
    import pandas as pd

    return type("SweepResult", (_SweepMethods, pd.DataFrame), {"__module__": __name__, "__doc__": _SweepMethods.__doc__,
                                                              "_metadata": ["sweep_keys", "time_unit"]})


class _SweepMethods:
    """A pandas DataFrame, one row per point: the swept keys (one column each, named as in the
    model file), ``status`` (ok | failed | invalid), ``error``, ``seconds``, the scalar metrics
    (``mean_queue``, ``loss``, ``mean_response``, ...; NaN where a point failed), ``states``,
    ``residual``, with ``simulate=True`` the simulated metrics ``sim_<metric>`` and their 95 %
    half-widths ``sim_<metric>_ci``, and the objects themselves in ``result``
    (:class:`aqmchain.StationaryResult`, without its chain when it came from a worker) and
    ``simulation`` (:class:`aqmchain.SimulationResult`).

    ``sweep_keys`` lists the swept keys; :meth:`plot_curves` draws a metric against the first key,
    one line per value of the second; :meth:`to_csv_text` / :meth:`to_records_json` give the
    CLI's CSV and JSON (object columns left out)."""

    @property
    def _constructor(self):
        return _sweep_result_class()

    # -- output ---------------------------------------------------------------
    def scalar_frame(self):
        """The frame without the object columns (``result``, ``simulation``)."""
        import pandas as pd

        return pd.DataFrame(self.drop(columns=[c for c in ("result", "simulation") if c in self.columns]))

    def to_csv_text(self) -> str:
        """CSV, one row per point, numbers at full precision (repr)."""
        return self.scalar_frame().to_csv(index=False, lineterminator="\n")

    def to_records_json(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per point (NaN as ``None``)."""
        from ._output import json_safe

        recs = self.scalar_frame().to_dict(orient="records")
        return [json_safe({k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()})
                for r in recs]

    @property
    def failed(self):
        """The rows whose point did not give a result."""
        return self[self["status"] != "ok"]

    def summary(self) -> str:
        """A text report: the swept keys, the number of points ok and failed, and each failure's error."""
        ok = int((self["status"] == "ok").sum())
        lines = [f"sweep over {', '.join(self.sweep_keys)}: {len(self)} points, {ok} ok, {len(self) - ok} failed"]
        for _, row in self.failed.iterrows():
            where = ", ".join(f"{k} = {row[k]!r}" for k in self.sweep_keys)
            lines.append(f"  {where}: {row['status']}: {row['error']}")
        return "\n".join(lines)

    def table(self, metrics: Sequence[str] = ("mean_queue", "loss", "mean_response")) -> str:
        """A text table: the swept keys and a few metrics per point."""
        cols = list(self.sweep_keys) + [m for m in metrics if m in self.columns] + ["status"]
        return self.scalar_frame()[cols].to_string(index=False, float_format=lambda v: f"{v:.6g}", na_rep="n/a")

    # -- plot -----------------------------------------------------------------
    def plot_curves(self, metric: str = "mean_queue", x: str | None = None, by: str | None = None, *,
                    logy: bool | None = None, ax: Any = None):
        """``metric`` against the swept key ``x`` (default the first), one line per value of ``by``
        (default the second swept key, if any); with simulated columns, the simulation as points
        with 95 % bars.  Axes labelled with units; a log y-axis when the values span more than
        two decades (``logy`` forces it).  Returns the matplotlib Figure (no backend is chosen)."""
        from matplotlib.figure import Figure

        keys = list(self.sweep_keys)
        x = x or keys[0]
        if by is None and len(keys) > 1:
            by = next(k for k in keys if k != x)
        for name, what in ((x, "x"), (by, "by")):
            if name is not None and name not in self.columns:
                raise _checks.model_error(what, f"a swept key ({', '.join(keys)})", name)
        if metric not in self.columns:
            raise _checks.model_error("metric", "a metric column (mean_queue, loss, mean_response, ...)", metric)
        if ax is None:
            fig = Figure(figsize=(7, 4.2))
            ax = fig.add_subplot()
        else:
            fig = ax.figure
        ok = self[self["status"] == "ok"]
        groups = [(None, ok)] if by is None else list(ok.groupby(by, sort=True))
        vals = []
        for gval, g in groups:
            g = g.sort_values(x)
            y = g[metric].astype(float).to_numpy()
            vals.extend(y[np.isfinite(y)])
            label = None if by is None else f"{by} = {gval:g}" if isinstance(gval, (int, float)) else f"{by} = {gval}"
            line, = ax.plot(g[x].to_numpy(), y, marker="o", ms=3, lw=1.4, label=label)
            sim = f"sim_{metric}"
            if sim in g.columns:
                s = g[sim].astype(float).to_numpy()
                hw = g[f"{sim}_ci"].astype(float).to_numpy()
                ax.errorbar(g[x].to_numpy(), s, yerr=hw, fmt="x", ms=4, lw=0.8, color=line.get_color(),
                            label=None if by is not None else "simulation ± 95 %")
        if logy is None:
            pos = np.array([v for v in vals if v > 0])
            logy = len(pos) > 1 and pos.max() / pos.min() > 100.0
        if logy:
            ax.set_yscale("log")
        t = getattr(self, "time_unit", None) or "slots"
        unit = METRIC_UNITS.get(metric.removeprefix("sim_"), "").format(t=t, t1=t.rstrip("s"))
        ax.set_xlabel(x + (f" ({KEY_UNITS[x]})" if x in KEY_UNITS else ""))
        ax.set_ylabel(metric.replace("_", " ") + (f" ({unit})" if unit else ""))
        n_bad = int((self["status"] != "ok").sum())
        ax.set_title(f"{metric.replace('_', ' ')} against {x}" + (f" ({n_bad} failed point(s) left out)" if n_bad else ""))
        if by is not None or f"sim_{metric}" in self.columns:
            ax.legend(title=(f"lines: chain; x: simulation ± 95 %" if f"sim_{metric}" in self.columns else None),
                      fontsize="small")
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        return fig

    def _repr_html_(self) -> str:
        return (f"<p><b>aqmchain sweep</b> over {', '.join(self.sweep_keys)}: {len(self)} points, "
                f"{int((self['status'] == 'ok').sum())} ok</p>" + self.scalar_frame()._repr_html_())


# ------------------------------------------------------------------ sweep


def _runs(total: int, scheduler: Any, workers: int | None, warm: bool) -> list[range]:
    """The grid's points (0..total-1, grid order) cut into runs of consecutive points, one task
    each: one per point without warm starts; with them one run in this process ("sync"), else
    about ``WARM_RUNS_PER_WORKER`` runs per worker and at most about ``WARM_RUN_POINTS`` points
    per run (the first point of each run is solved cold)."""
    if not warm:
        return [range(i, i + 1) for i in range(total)]
    if scheduler == "sync":
        tasks = 1
    else:
        n = workers or (_local_workers(None) if scheduler == "local" else os.cpu_count() or 1)
        tasks = max(WARM_RUNS_PER_WORKER * n, math.ceil(total / WARM_RUN_POINTS))
    tasks = max(1, min(total, tasks))
    edges = [round(i * total / tasks) for i in range(tasks + 1)]
    return [range(a, b) for a, b in zip(edges, edges[1:]) if b > a]


#: With warm starts, the points are cut into about this many runs per worker (a run's points are
#: solved one after the other, each from the previous one's solution): a few runs per worker
#: keep the workers busy when the points differ in cost
WARM_RUNS_PER_WORKER = 2
#: ... and runs of at most about this many points (a run reports its points when it ends: the
#: progress of a long sweep moves in steps of a run)
WARM_RUN_POINTS = 10


def _local_workers(workers: int | None) -> int:
    """The worker processes of a local cluster: ``workers``, else the cores (at most 4)."""
    return workers or max(1, min(os.cpu_count() or 1, 4))


def sweep(model: Any, params: Any, *, simulate: bool = False, sim_options: dict | None = None,
          solver: dict | None = None, scheduler: Any = None, workers: int | None = None,
          keep_results: bool = True, progress: Callable[[int, int, dict], None] | None = None,
          warm: bool = True) -> Any:
    """Solve ``model`` at every point of a grid over model-file keys.

    ``model``: an :class:`aqmchain.Model`, a model-file path, or a parsed model document.
    ``params``: ``{"aqm.w": [0.002, 0.07], "service.mu": "0.25:0.5:6"}`` (lists, or the
    command-line forms of :func:`parse_values`); the points are the Cartesian product, the
    first key varying slowest.  ``solver``: options for :func:`aqmchain.solve_stationary`
    (over the file's ``[solver]`` table).  ``simulate=True`` also simulates each point with
    ``sim_options`` (:func:`aqmchain.simulate`'s keywords; ``threads`` defaults to 1 per point).
    ``scheduler``: see the module docstring (``None``: ``$AQMCHAIN_SCHEDULER`` or a
    LocalCluster of ``workers`` processes).  ``keep_results=False`` keeps only the scalar
    columns (no objects travel back from the workers).  ``progress(done, total, row)`` is
    called as points complete.

    Warm starts (``warm=True``, the default; docs/solvers.md): the points are cut into runs of
    consecutive grid points (the last key varying fastest), one task per run, and each point of
    a run starts from the previous point's solution (``solve_stationary(..., warm=...)``; a
    point whose chain is of another kind, or after a failed point, is solved cold).  The
    answers are the cold ones to the solver's tolerance; the ``warm_started`` and
    ``iterations`` columns say what happened.  ``warm=False``: every point cold, one task each.

    Returns a :class:`SweepResult` (a pandas DataFrame, one row per point, in grid order).
    """
    import pandas as pd

    from .modelfile import load_document, model_from_dict, model_to_dict

    carried: dict = {}
    if isinstance(model, _core.Model):
        from .modelfile import solver_options

        doc, time_kind, carried = model_to_dict(model), model.time, solver_options(model)
    elif isinstance(model, dict):
        doc = copy.deepcopy(model)
        time_kind = model_from_dict(doc)[0].time
    elif isinstance(model, (str, os.PathLike)):
        doc = load_document(model)
        time_kind = model_from_dict(doc)[0].time
    else:
        raise _checks.model_error("model", "an aqmchain.Model, a model-file path or a model document", model)
    keys, points = _grid(params)
    for k in keys:  # a malformed key fails once, before any point runs
        from .modelfile import set_key

        set_key(copy.deepcopy(doc), k, points[0][keys.index(k)])
    solver = {**carried, **(solver or {})}  # a loaded model's [solver] table, under the options given
    sim = None
    if simulate:
        sim = {"threads": 1, **(sim_options or {})}
    elif sim_options:
        raise _checks.model_error("sim_options", "given only with simulate=True", sim_options)
    total = len(points)

    def done(i: int, rec: dict) -> None:
        if progress is not None:
            progress(sum(r is not None for r in recs), total, rec)

    recs: list[Any] = [None] * total

    def on_done(i: int, rec: dict) -> None:
        recs[i] = rec
        done(i, rec)

    def on_error(i: int, exc: BaseException) -> dict:  # the task itself failed (e.g. its worker died)
        return {"status": "failed", "error": f"{type(exc).__name__}: {' '.join(str(exc).split())}", "result": None,
                "simulation": None, "seconds": float("nan")}

    if not isinstance(warm, bool):
        raise _checks.model_error("warm", "True or False", warm)
    runs = _runs(total, resolve_scheduler(scheduler), workers, warm)

    def on_run_done(j: int, out: list[dict]) -> None:
        for i, rec in zip(runs[j], out):
            on_done(i, rec)

    def on_run_error(j: int, exc: BaseException) -> list[dict]:
        return [on_error(i, exc) for i in runs[j]]

    run_tasks(_evaluate_run, [(doc, keys, [points[i] for i in r], solver, sim, keep_results, warm) for r in runs],
              scheduler=scheduler, workers=workers, on_done=on_run_done, on_error=on_run_error)
    rows = []
    for p, rec in zip(points, recs):
        row: dict[str, Any] = dict(zip(keys, p))
        row.update(status=rec["status"], error=rec["error"], seconds=rec["seconds"])
        res = rec["result"]
        scal = _scalars(res) if res is not None else rec.get("result_dict")
        if rec["status"] == "failed" and scal is not None and res is not None:
            # a non-converged solve: its partial numbers are not results
            scal = {k: (v if k in ("states", "nnz", "residual", "solver_method") else None) for k, v in scal.items()}
        row.update(scal or {})
        if sim is not None:
            s = rec["simulation"]
            row.update((_sim_scalars(s) if s is not None else rec.get("sim_dict")) or {})
        if keep_results:
            row["result"] = res
            if sim is not None:
                row["simulation"] = rec["simulation"]
        row["warnings"] = rec.get("warnings", "")
        rows.append(row)
    frame = pd.DataFrame(rows)
    # columns in a stable order: keys, status, error, metrics, the rest
    front = keys + ["status", "error", "seconds"]
    frame = frame[front + [c for c in frame.columns if c not in front]]
    for c in ("states", "nnz"):  # counts stay integers beside the failed points' blanks
        if c in frame.columns:
            frame[c] = frame[c].astype("Int64")
    out = _sweep_result_class()(frame)
    out.sweep_keys = keys
    out.time_unit = "slots" if time_kind == "discrete" else "time units"
    return out
