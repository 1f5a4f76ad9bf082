"""Preloaded into the worker processes of the local Dask cluster that sweeps start
(``LocalCluster(preload=[...])``): the workers ignore SIGINT.  Ctrl-C in a terminal reaches the
whole process group; the sweep's own process cancels the points and closes the cluster, and the
workers must not die first with tracebacks of their own."""

import signal


def dask_setup(worker) -> None:  # noqa: ARG001  (the hook Dask calls with the worker)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the process's main thread: an in-process worker, nothing to do
        pass
