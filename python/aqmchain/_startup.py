"""Ctrl-C while the ``aqmchain`` command is still importing (the first fraction of a second).

Imported first by the package: when this process is the command line (the ``aqmchain``
script or ``python -m aqmchain``), a KeyboardInterrupt that ends the process before
:func:`aqmchain.cli.main` has taken over (numpy, the core, ... still loading) is reported
as the command reports it: ``aqmchain: interrupted`` on stderr, exit status 130, no
traceback; so is one that Python could not raise (in a weakref callback of the import
system: "Exception ignored in ...").  In any other process (a program or notebook importing aqmchain) nothing is
changed.
"""

from __future__ import annotations

import os
import sys


def is_command_line() -> bool:
    """Whether this process runs the ``aqmchain`` command."""
    argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    for i, a in enumerate(argv[:-1]):
        if a == "-m":
            return argv[i + 1] == "aqmchain"
    if len(argv) > 1 and os.path.basename(argv[1]) == "aqmchain":
        return True  # python /path/to/bin/aqmchain ...
    return bool(sys.argv) and os.path.basename(sys.argv[0]) == "aqmchain"


def _stop_children() -> None:
    """Kill the processes this one started through multiprocessing (a local Dask cluster's
    workers, also those still starting up, before they watch this process)."""
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return
    import threading
    import time

    # No new worker from here on: a cluster thread still spawning one now starts /bin/false,
    # which says nothing (a real one would find this process gone and print a traceback), and
    # the thread's own failure is not reported (the process ends with 130 anyway).
    threading.excepthook = lambda args: None
    try:
        import multiprocessing.spawn as mp_spawn

        if os.path.exists("/bin/false"):
            mp_spawn.set_executable("/bin/false")
    except Exception:  # noqa: BLE001
        pass

    def reap(seconds: float) -> None:
        """Kill and reap until none is left twice in a row 50 ms apart (a spawn under way joins
        the list when it returns), for at most `seconds`: reaping a killed process takes
        milliseconds."""
        deadline = time.monotonic() + seconds
        empty = 0
        while time.monotonic() < deadline:
            try:
                children = mp.active_children()
            except Exception:  # noqa: BLE001  (best effort on the way out)
                return
            if not children:
                empty += 1
                if empty >= 2:
                    return
                time.sleep(0.05)
                continue
            empty = 0
            for child in children:
                try:
                    child.kill()
                except Exception:  # noqa: BLE001
                    pass
            for child in children:
                try:
                    child.join(max(0.0, deadline - time.monotonic()))
                except Exception:  # noqa: BLE001
                    pass

    # What multiprocessing does at exit (release the semaphores, else the resource tracker
    # warns of leaks), without its unbounded join of a child that a cluster thread spawned
    # meanwhile: workers are killed and reaped before the semaphores go (one starting after
    # that would fail on them with a traceback of its own) and again before the last step.
    reap(1.0)
    for priority in (0, None):
        try:
            mp.util._run_finalizers(priority)
        except Exception:  # noqa: BLE001
            pass
        reap(0.5)


def interrupted_exit(report: bool = True) -> None:
    """End the process at once with status 130: child processes killed, output flushed,
    ``aqmchain: interrupted`` on stderr (unless ``report`` is false: already said)."""
    try:  # a second Ctrl-C must not interrupt the exit with a traceback
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):  # not the main thread
        pass
    _stop_children()
    for stream in (sys.stdout, sys.__stdout__):  # sys.stdout may be redirected, or None
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if report and stream is not None:
                stream.write("aqmchain: interrupted\n")
                report = False
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(130)


def _interrupted(value: BaseException | None) -> bool:
    """A KeyboardInterrupt, or an error raised because of one (a Ctrl-C while a compiled
    module initialises surfaces as ImportError("initialization failed") from it)."""
    seen = 0
    while value is not None and seen < 16:
        if isinstance(value, KeyboardInterrupt):
            return True
        value = value.__cause__ or value.__context__
        seen += 1
    return False


def _excepthook(kind, value, tb) -> None:
    if _interrupted(value):
        interrupted_exit()
    sys.__excepthook__(kind, value, tb)


def _unraisablehook(unraisable) -> None:
    """A KeyboardInterrupt that Python cannot raise (it came in a weakref callback or a
    finaliser, e.g. the import system's module-lock callback while a module loads) is not
    lost: the command ends as interrupted."""
    if _interrupted(getattr(unraisable, "exc_value", None)):
        interrupted_exit()
    sys.__unraisablehook__(unraisable)


def install() -> None:
    if is_command_line():
        sys.excepthook = _excepthook
        sys.unraisablehook = _unraisablehook
