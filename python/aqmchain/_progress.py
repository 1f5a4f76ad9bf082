"""Progress bars of the command line (tqdm, on stderr).  The library never prints: only
``cli.py`` uses this module.

Bars appear only when stderr is a terminal (or ``AQMCHAIN_PROGRESS=1`` forces them, e.g. for
a log file) and not with ``--quiet``, and only for work that lasts more than ``DELAY``
seconds.  A core call (build, solve, simulation) is one blocking call without progress
reports: :func:`activity` shows its phase and the elapsed time, refreshed from a thread.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any, Iterator

DELAY = 1.0  # seconds before a bar appears
ENV = "AQMCHAIN_PROGRESS"


def enabled(quiet: bool) -> bool:
    if quiet:
        return False
    forced = os.environ.get(ENV, "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off"):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _Null:
    """A bar that shows nothing."""

    def update(self, n: float = 1) -> None:
        pass

    def set_description_str(self, s: str, refresh: bool = True) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass

    n = 0
    total = None


class _Ticking:
    """A tqdm bar that appears after ``delay`` seconds and is redrawn four times a second from a
    thread, so that its elapsed time moves while the core works on one long call."""

    def __init__(self, total: float | None, desc: str, unit: str, delay: float):
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, delay=1e9, dynamic_ncols=True,
                         leave=False)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(delay,), name="aqmchain-progress", daemon=True)
        self._thread.start()

    def _run(self, delay: float) -> None:
        if self._stop.wait(delay):
            return
        try:
            every = 0.25 if sys.stderr.isatty() else 5.0  # a log file (AQMCHAIN_PROGRESS=1) gets fewer lines
        except (AttributeError, ValueError):
            every = 5.0
        while True:
            with self._lock:
                self._bar.refresh()
            if self._stop.wait(every):
                return

    @property
    def n(self) -> float:
        return self._bar.n

    def update(self, n: float = 1) -> None:
        with self._lock:
            self._bar.update(n)

    def set_description_str(self, s: str, refresh: bool = False) -> None:
        with self._lock:
            self._bar.set_description_str(s, refresh=False)

    def set_postfix_str(self, s: str = "", refresh: bool = False) -> None:
        with self._lock:
            self._bar.set_postfix_str(s, refresh=False)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        with self._lock:
            self._bar.close()


def bar(on: bool, total: float | None, desc: str, unit: str = "it", delay: float = DELAY) -> Any:
    """A determinate tqdm bar on stderr (or a null bar), shown after ``delay`` seconds and kept
    moving while the work between two updates is one long call; ``close()`` it."""
    if not on:
        return _Null()
    return _Ticking(total, desc, unit, delay)


@contextlib.contextmanager
def activity(on: bool, desc: str, delay: float = DELAY) -> Iterator[Any]:
    """An elapsed-time bar for one blocking call: ``with activity(on, "solving"): ...``."""
    if not on:
        yield _Null()
        return
    from tqdm import tqdm

    stop = threading.Event()
    holder: dict[str, Any] = {}

    def run() -> None:
        if stop.wait(delay):
            return
        b = tqdm(total=None, desc=desc, file=sys.stderr, bar_format="{desc}: {elapsed}", leave=False,
                 dynamic_ncols=True)
        holder["bar"] = b
        try:
            every = 0.25 if sys.stderr.isatty() else 5.0
        except (AttributeError, ValueError):
            every = 5.0
        while not stop.wait(every):
            b.refresh()
        b.close()

    t = threading.Thread(target=run, name="aqmchain-progress", daemon=True)
    t.start()
    try:
        yield holder
    finally:
        stop.set()
        t.join(timeout=2.0)
