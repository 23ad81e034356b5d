"""normcheck's own compiled parts, built once per machine (and compiler), in parallel, saying so.

A fresh install has none of them: the oracle's fast path (``oracle/fast.cpp``), the compiled
measurement (``measure.cpp``), the cpu backend's sandbox helper, and -- for a check -- the
built-in kernels the warn yardstick runs.  Each is built on first use anyway; :func:`prepare`
starts the missing ones at once, on threads (each build is a compiler process: they run side
by side on the machine's cores), and says on stderr what it builds and why, then how long it
took -- so a first check is never silent for minutes.  The caller goes on with its own work
(compiling the user's kernel) and :meth:`Preparing.wait` joins them.
"""

from __future__ import annotations

import sys
import threading
import time

__all__ = ["prepare", "missing", "Preparing"]


def _parts(backend: str, variants=()) -> list:
    """[(what, built?, build)] of the parts a check on ``backend`` uses."""
    from normcheck import kernels, measure_lib
    from normcheck.oracle import fast as oracle_fast

    from normcheck.backends import backend_class

    out = [("the oracle's fast path", oracle_fast.built, oracle_fast.library),
           ("the compiled measurement", measure_lib.built, measure_lib.library)]
    cls = backend_class(backend)
    out += cls.own_parts()
    if cls.capabilities.threaded_builds:
        seen = set()
        for v in variants:  # built (or found in the cache) beside the user's kernel, quietly
            if v.source in seen:
                continue
            seen.add(v.source)
            out.append((None, lambda v=v: kernels.is_compiled(v, backend),
                        lambda v=v: kernels.compiled(v, backend)))
    return out


def missing(backend: str = "cpu", variants=()) -> list[str]:
    """What a check would build first (nothing is built)."""
    return [what for what, built, _ in _parts(backend, variants) if what and not built()]


class Preparing:
    """Builds under way; :meth:`wait` joins them and re-raises the first error."""

    def __init__(self, threads, errors, echo, t0, names):
        self._threads, self._errors, self._echo, self._t0 = threads, errors, echo, t0
        self._names = names

    def wait(self):
        for t in self._threads:
            t.join()
        if self._names and self._echo:
            self._echo(f"normcheck: built {', '.join(self._names)} in "
                       f"{time.perf_counter() - self._t0:.0f} s (kept in the build cache: "
                       "`normcheck cache info`)")
        if self._errors:
            raise self._errors[0]


def _stderr(msg: str):
    print(msg, file=sys.stderr, flush=True)


def prepare(backend: str = "cpu", variants=(), echo=_stderr) -> Preparing:
    """Start building the missing parts (see the module docstring); returns at once."""
    from normcheck.backends import confine

    # the process launcher first, on this thread, before any build thread forks: every
    # confined compile execs it, and a child forked while it was being written would hold it
    # open for writing (ETXTBSY, #64; confine.spawn retries that too)
    threads, errors = [], []
    try:
        confine.launcher()
    except Exception as e:  # re-raised by wait(), as a build's error is
        errors.append(e)
    todo = [(what, build) for what, built, build in _parts(backend, variants) if not built()]
    named = [w for w, _ in todo if w]
    t0 = time.perf_counter()
    if named and echo:
        echo(f"normcheck: building {', '.join(named)} -- once on this machine, about 30 s on "
             "2 cores; every later check starts at once")

    def run(build):
        try:
            build()
        except Exception as e:  # re-raised by wait(), where the caller can see it
            errors.append(e)

    for what, build in todo:
        t = threading.Thread(target=run, args=(build,), name=f"normcheck-build {what}",
                             daemon=True)
        t.start()
        threads.append(t)
    return Preparing(threads, errors, echo, t0, named)
