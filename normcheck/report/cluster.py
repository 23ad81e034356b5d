"""The report's tasks on a Dask cluster: ``normcheck report --cluster ADDRESS``.

Every record of a sweep is an independent task (:func:`normcheck.report.sweep.measure`: a pure
function of the task and the seed), so a sweep spreads over any number of machines.  Dask
distributed rather than Ray: it is pure Python with wheels everywhere (Ray is a large binary
with its own object store and runtime), its scheduler runs anywhere with one command
(``dask scheduler``; ``dask worker ADDRESS`` on each machine, in an environment where normcheck
is installed), and ``LocalCluster`` gives tests and CI a real cluster in-process.

The process that runs ``normcheck report`` stays the one writer of ``results.json``: it submits
the tasks not yet measured, appends each record as it arrives (completion order), writes the
worst-row case files, and on a rerun resumes with what is missing, as a local run does.  The
records equal a local run's with the same seed (only ``seconds`` differs).

ADDRESS is a scheduler address (``tcp://host:8786``), a scheduler file (a path ending in
``.json``, as ``dask scheduler --scheduler-file`` writes), or ``local:N`` for a cluster of N
worker processes on this machine.
"""

from __future__ import annotations

import json
import re

from normcheck.errors import BackendUnavailable, invalid

__all__ = ["measure_all", "connect"]


def connect(address: str):
    """A Dask client for ADDRESS (see the module docstring); the caller closes it."""
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise BackendUnavailable("--cluster needs Dask distributed: pip install "
                                 "'normcheck[cluster]'") from None
    if not isinstance(address, str) or not address:
        raise invalid("--cluster", address, "a scheduler address (tcp://host:8786), a "
                      "scheduler file (*.json) or local:N")
    if address.startswith("local:"):
        try:
            n = int(address.split(":", 1)[1])
        except ValueError:
            n = 0
        if not 1 <= n <= 256:
            raise invalid("--cluster", address, "local:N with N from 1 to 256 worker processes",
                          "e.g. --cluster local:2")
        lc = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                          dashboard_address=None)
        client = Client(lc)
        client._normcheck_cluster = lc
        return client
    if address.endswith(".json"):
        address = _scheduler_address(address)
    elif not re.fullmatch(r"(tcp|tls|inproc|ucx)://[\w.\-\[\]:]{1,200}", address):
        raise invalid("--cluster", address, "a scheduler address such as tcp://host:8786, a "
                      "scheduler file (*.json) or local:N")
    try:
        return Client(address, timeout="30s")
    except (OSError, TimeoutError, ValueError) as e:
        raise invalid("--cluster", address, f"a reachable Dask scheduler ({e})",
                      "start one with `dask scheduler` and workers with `dask worker ADDRESS`"
                      ) from None


def _scheduler_address(path: str) -> str:
    """The address in a scheduler file, read now (Dask itself would wait for a missing file
    without end): the file must exist and hold {"address": "tcp://..."}."""
    from normcheck.files import read_limited

    raw = read_limited(path, "--cluster", 1 << 20, "a scheduler file written by `dask scheduler "
                       "--scheduler-file`")
    try:
        info = json.loads(raw)
        addr = info["address"]
        if not isinstance(addr, str) or not re.fullmatch(
                r"(tcp|tls|inproc|ucx)://[\w.\-\[\]:]{1,200}", addr):
            raise ValueError(addr)
    except (ValueError, KeyError, TypeError, RecursionError):
        raise invalid("--cluster", path, "a scheduler file holding the scheduler's address",
                      "start the scheduler with --scheduler-file and pass that file") from None
    return addr


def measure_all(address: str, measure, tasks, seed: int, backend: str, workers=None):
    """Yield (task, (record, case)) for every task as the cluster finishes them: ``measure(task,
    seed, backend, workers)`` runs on a worker (a module-level function, sent by reference)."""
    from dask.distributed import as_completed

    client = connect(address)
    futures = {}
    try:
        for t in tasks:
            f = client.submit(measure, t, seed, backend, workers, pure=False,
                              key=f"normcheck-{seed}-{t.key}")
            futures[f] = t
        for f in as_completed(list(futures)):
            yield futures[f], f.result()
    finally:
        for f in futures:
            f.cancel()
        lc = getattr(client, "_normcheck_cluster", None)
        client.close()
        if lc is not None:
            lc.close()
