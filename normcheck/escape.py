"""Text that came from a kernel, a spec or a file, made safe where it lands.

A kernel's stderr, its crash report, a case file's note, a spec's names and a results.json's
fields reach the terminal, JUnit XML, a GitHub job summary and HTML.  Each destination has its
own dangerous bytes:

============= =====================================================================================
terminal      C0 controls but tab and newline, DEL, C1 controls (ESC [ ... retitles, moves the
              cursor, paints a fake ``verdict: pass`` over the real lines) and the bidirectional
              overrides are replaced by ``?``; a carriage return only opens normcheck's own
              progress line (:class:`TerminalStream`)
XML           characters XML 1.0 does not allow (C0 but tab, newline, CR; U+FFFE, U+FFFF, lone
              surrogates) are dropped: one of them makes the whole JUnit file unparseable, and a
              CI reader then shows no failing test
markdown      ``& < >`` as entities (GitHub renders HTML in a job summary), ``|`` escaped (a
              table cell), controls replaced; code spans and fences longer than any backtick run
              inside them
HTML          ``html.escape`` (quotes included) for every cell and attribute; links only to
              relative ``worst/*.npz`` (:func:`worst_link`)
============= =====================================================================================
"""

from __future__ import annotations

import re

__all__ = ["terminal", "xml_chars", "markdown", "code_span", "code_block", "worst_link",
           "TerminalStream", "CONTROLS", "one_line", "quoted"]

#: What a terminal must not receive from untrusted text.
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_WORST = re.compile(r"worst/[A-Za-z0-9_.+\-]{1,200}\.npz")


def terminal(text) -> str:
    """``text`` with every control character but tab and newline replaced by ``?``."""
    return CONTROLS.sub("?", str(text))


def one_line(text) -> str:
    """Untrusted text -- a kernel's message, an exception a Triton file raised, a worker's
    reply -- on one line, each line break shown as ``⏎``: it cannot start a line of normcheck's
    output (a workflow command ``::stop-commands::``, ``::error``, a ``verdict: PASS``)."""
    return terminal(str(text).replace("\r\n", "\n").replace("\r", "\n")).replace("\n", " ⏎ ")


def quoted(text, indent: str = "    ") -> str:
    """Untrusted text of several lines (a compiler's diagnostics) as an indented block: every
    line starts with ``indent`` and ``| ``, so none can start a workflow command or a verdict."""
    lines = terminal(str(text).replace("\r\n", "\n").replace("\r", "\n")).split("\n")
    return "\n".join(f"{indent}| {ln}" for ln in lines)


def xml_chars(text) -> str:
    """``text`` without the characters XML 1.0 forbids (escaping ``<&`` is the writer's)."""
    return _XML_INVALID.sub("", str(text))


#: An underscore that could open or close emphasis (not inside a word: ``__shared__`` rendered
#: as a bold "shared", #68), and every asterisk.
_EMPHASIS = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|\*")


def markdown(text) -> str:
    """``text`` for a markdown paragraph or table cell that GitHub renders: on one line (a line
    of its own could start a heading, a list, a fence), ``& < >`` as entities, ``|`` escaped,
    an underscore or asterisk that would make emphasis escaped."""
    t = one_line(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _EMPHASIS.sub(lambda m: "\\" + m.group(0), t.replace("|", "\\|"))


def _fence(text: str, base: int) -> str:
    runs = [len(m) for m in re.findall(r"`+", text)]
    return "`" * max(base, (max(runs) + 1) if runs else 0)


def code_span(text) -> str:
    """``text`` as one inline code span (a span cannot be closed from inside)."""
    t = terminal(text).replace("\n", " ")
    f = _fence(t, 1)
    pad = " " if t.startswith("`") or t.endswith("`") else ""
    return f"{f}{pad}{t}{pad}{f}"


def code_block(text) -> str:
    """``text`` as a fenced code block (its fence longer than any backtick run inside)."""
    t = terminal(text)
    f = _fence(t, 3)
    return f"{f}\n{t}\n{f}"


def worst_link(value) -> str | None:
    """A worst-row file as a link target: a relative ``worst/NAME.npz`` of the report folder,
    else None (a ``javascript:`` URL, an absolute path or ``..`` is never a link)."""
    return value if isinstance(value, str) and _WORST.fullmatch(value) else None


class TerminalStream:
    """A text stream that passes every write through :func:`terminal`, except a carriage
    return that opens a write (the report's progress line redrawn in place)."""

    def __init__(self, stream):
        self._s = stream

    def write(self, s):
        s = str(s)
        if s.startswith("\r"):
            return self._s.write("\r" + terminal(s[1:]))
        return self._s.write(terminal(s))

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._s, name)
