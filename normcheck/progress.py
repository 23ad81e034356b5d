"""No wait without a word: what normcheck is doing, on stderr, whenever one step takes more than
:data:`QUIET_FOR` seconds.

The steps say what they are (``with progress.step("building rms.cu (g++)"):``; a family as it
runs: ``progress.advance(done, total)`` inside its step); a heartbeat thread, started by the
command line (:func:`enable`; ``--quiet`` leaves it off, and a library call never starts it),
writes the innermost step that has lasted :data:`QUIET_FOR` seconds -- on a terminal one live
line redrawn every second, in a log a line every :data:`LOG_EVERY` seconds -- with its elapsed
time and, once some of its parts are done, an ETA from their pace (never before the first part
is done, so never absurd), and says when a step it spoke of ends.  Steps nest (a build inside a
family): the innermost is shown.  Nothing here imports the rest of normcheck.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager

__all__ = ["enable", "disable", "step", "advance", "QUIET_FOR", "LOG_EVERY"]

#: A step says nothing before it has lasted this long (seconds; NORMCHECK_PROGRESS_AFTER
#: changes it).
QUIET_FOR = float(os.environ.get("NORMCHECK_PROGRESS_AFTER", "2"))
#: In a log (not a terminal), a step's line is written again this often (seconds).
LOG_EVERY = 5.0


class _Step:
    __slots__ = ("what", "start", "done", "total", "spoke", "last", "inner", "once")

    def __init__(self, what: str):
        self.what, self.start = what, time.monotonic()
        self.done, self.total = 0, None
        self.spoke, self.last = False, 0.0
        self.inner = 0.0  # seconds its nested one-off steps took (builds), not its parts' pace
        self.once = False

    def line(self, now: float) -> str:
        el = now - self.start
        s = f"normcheck: {_one_line(self.what)} -- {el:.0f} s"
        if self.total:
            s += f", {self.done}/{self.total}"
            if self.done:
                # the measured rate of its own parts: a build inside the first one is not a
                # part's cost (#64: "~201 s left" for a check done 21 s later)
                rate = max(el - self.inner, 0.0) / self.done
                s += f", ~{rate * (self.total - self.done):.0f} s left"
        return s


def _one_line(text: str) -> str:
    """A step's words (a file's name among them) on one line, controls shown as ``?``: they
    cannot start a line of their own on stderr (#65).  (normcheck.escape.one_line's rule, kept
    here: nothing here imports the rest of normcheck.)"""
    import re

    t = str(text).replace("\r\n", "\n").replace("\r", "\n").replace("\n", " ⏎ ")
    return re.sub("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                  "\u2066-\u2069]", "?", t)


_lock = threading.Lock()
_stack: list = []
_on = {"stream": None, "tty": False, "thread": None, "live": 0}


def enable(stream=None) -> None:
    """Start the heartbeat, writing to ``stream`` (default stderr)."""
    stream = stream if stream is not None else sys.stderr
    _on["stream"] = stream
    try:
        _on["tty"] = bool(stream.isatty())
    except (AttributeError, ValueError):
        _on["tty"] = False
    if _on["thread"] is None:
        t = threading.Thread(target=_beat, name="normcheck-progress", daemon=True)
        _on["thread"] = t
        t.start()


def disable() -> None:
    """Stop writing (the thread idles)."""
    with _lock:
        _clear_live()
        _on["stream"] = None


def _write(text: str) -> None:
    s = _on["stream"]
    if s is None:
        return
    try:
        s.write(text)
        s.flush()
    except (OSError, ValueError):
        _on["stream"] = None


def _clear_live() -> None:
    if _on["live"]:
        _write("\r" + " " * _on["live"] + "\r")
        _on["live"] = 0


def _beat() -> None:
    while True:
        time.sleep(0.25)
        with _lock:
            if _on["stream"] is None or not _stack:
                continue
            now = time.monotonic()
            # the innermost step that has lasted long enough: a check's short families are
            # quiet, the check they make up is not
            st = next((x for x in reversed(_stack) if now - x.start >= QUIET_FOR), None)
            if st is None:
                continue
            if _on["tty"]:
                if now - st.last >= 1.0:
                    text = st.line(now)[:150]
                    _write("\r" + text.ljust(_on["live"]))
                    _on["live"] = len(text)
                    st.spoke, st.last = True, now
            elif not st.spoke or now - st.last >= LOG_EVERY:
                _write(st.line(now) + "\n")
                st.spoke, st.last = True, now


@contextmanager
def step(what: str, total: int | None = None, once: bool = False):
    """A step of work, named (``what``: "building rms.cu (g++)", "family offset"); ``total``
    parts for an ETA (:func:`advance`); ``once``: a cost paid once (a build), not part of the
    pace of the step it runs inside."""
    st = _Step(what)
    st.once = once
    st.total = total
    with _lock:
        _stack.append(st)
    try:
        yield st
    finally:
        with _lock:
            if st in _stack:
                i = _stack.index(st)
                _stack.remove(st)
                if i > 0 and st.once:  # a build: not its parent's parts' pace
                    _stack[i - 1].inner += time.monotonic() - st.start
            if st.spoke and _on["stream"] is not None:
                _clear_live()
                _write(f"normcheck: {_one_line(what)}: done in "
                       f"{time.monotonic() - st.start:.1f} s\n")


def advance(done: int, total: int | None = None) -> None:
    """The innermost step has ``done`` of its ``total`` parts done."""
    with _lock:
        if _stack:
            _stack[-1].done = done
            if total is not None:
                _stack[-1].total = total
