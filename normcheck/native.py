"""normcheck's own compiled parts, built and loaded in one place.

A part is one C++ file of normcheck's (the oracle's fast path ``oracle/fast.cpp``, the
measurement ``measure.cpp``) with its flags and a ``bind`` that checks its ctypes layouts against
the C++'s and sets the argument types.  :func:`load` builds it once (with the host compiler,
confined, into the build cache: normcheck.backends.confine.build_library, imported only when a
part is first built, so the numeric core that declares a part imports none of the machinery),
loads it with ctypes and binds it, once per process; :func:`built` says whether a load would
build (nothing is built); :func:`parts` lists them (normcheck.parts prepares them on threads).
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Part", "load", "built", "PARTS"]

#: Every part declared, by name.
PARTS: dict = {}
_loaded: dict = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Part:
    """One compiled part: its library's ``name``, its ``source``, the compiler ``flags``, what
    building it is (``what``: the line normcheck prints), the cache section it lives in and
    ``bind(lib)``: its layouts checked (raise RuntimeError on a mismatch) and its argtypes set."""

    name: str
    source: Path
    flags: tuple
    what: str
    section: str
    bind: object = field(default=None, compare=False)

    def __post_init__(self):
        PARTS[self.name] = self


def built(part: Part) -> bool:
    """Whether the part's library is built (nothing is built)."""
    from normcheck.backends import confine

    return part.name in _loaded or confine.library_built(part.source, part.section, part.name,
                                                         list(part.flags))


def load(part: Part) -> ctypes.CDLL:
    """The part's library: built on first use, loaded and bound once per process."""
    with _lock:
        lib = _loaded.get(part.name)
        if lib is None:
            from normcheck.backends import confine

            from normcheck import progress

            with progress.step(f"{part.what} (normcheck's own, g++, once per machine)",
                               once=True):
                path = confine.build_library(part.source, part.section, part.name,
                                             list(part.flags), part.what)
            lib = ctypes.CDLL(str(path))
            if part.bind is not None:
                part.bind(lib)
            _loaded[part.name] = lib
    return lib
