#!/usr/bin/env python3
"""The README's commands, run as they now read (docs as tests: CI's `.ci/run` and
tests/test_readme.py use this one reader).

README.md starts with two `sh` blocks of one command each: the first sets up and runs the main
job (`normcheck report` on the cpu backend), the second sets up and runs the tests.  Every later
`sh` block holds commands a reader types from the repository's root; each line is one command
(a trailing backslash continues it), a `#` comment after it may say what it does.

What a command must do is read from the command itself, and from its comment:

* its exit code: 0, unless the comment says otherwise as ``(exit N)`` (a kernel shown failing);
* the files it promises: ``--out DIR`` (a report: DIR/report.md and DIR/index.html; for
  ``field``, DIR/field.md and DIR/field.json), ``> FILE``
  (its output, not empty), ``--junit FILE``, ``--summary FILE``; ``--json > FILE`` must hold JSON.

Commands that set up a machine (``pip ...``, ``python3 -m venv``) outside the first two blocks
are not run: the environment running the docs is already set up (CI installs torch's headers
and Triton itself), and the index some name (PyTorch's CPU wheels) may not be reachable.
Commands that need a GPU (``--backend cuda``, ``bench gpu``, ``scripts/gpu_check.sh``) are
listed as such and not run.

    python3 scripts/readme_commands.py list [README.md]
    python3 scripts/readme_commands.py run 1|2|docs [--readme README.md] [--bin DIR]

``run 1`` and ``run 2`` run the setup commands in the repository's root; ``run docs`` runs the
rest in a scratch folder holding a copy of ``cuda_src/`` (so nothing lands in the checkout) and
``.venv``, a link to the virtual environment whose ``bin`` is ``--bin``.  The commands run as a
reader's shell runs them: ``normcheck`` is on PATH only after a ``source .venv/bin/activate``
line of the README (each later command runs after it, as in the reader's shell), else only as
``.venv/bin/normcheck``.  Exit 1 if any command ends with another exit code or leaves a
promised file missing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["Command", "commands", "setup_commands", "doc_commands", "run", "ACTIVATE"]

_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)
_EXIT = re.compile(r"\(exit (\d+)\)")
_SETUP = re.compile(r"^(pip3?|python3? -m (pip|venv))\b")
_GPU = re.compile(r"--backend\s+cuda\b|\bbench gpu\b|gpu_check\.sh")
#: A line that activates the virtual environment: it holds for the commands after it.
ACTIVATE = re.compile(r"^(?:source|\.)\s+\S*bin/activate$")


@dataclass
class Command:
    """One command of the README: its text (continuations joined), the comment after it, the
    sh block it is in (1-based) and its line."""

    text: str
    comment: str
    block: int
    line: int
    skip: str | None = None           # why it is not run, or None
    files: list = field(default_factory=list)   # [(path, what it must be)]

    @property
    def exit_code(self) -> int:
        m = _EXIT.search(self.comment)
        return int(m.group(1)) if m else 0


def _split_comment(line: str) -> tuple[str, str]:
    """(command, comment): the first # outside quotes that starts a word."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def _promised(text: str) -> list:
    """The files a command promises, from its own words."""
    try:
        words = shlex.split(text)
    except ValueError:
        return []
    out = []
    for i, w in enumerate(words[:-1]):
        nxt = words[i + 1]
        if w == "--out" and "field" in words[:i]:  # normcheck field: its section and outcomes
            out += [(f"{nxt}/field.md", "file"), (f"{nxt}/field.json", "json")]
        elif w == "--out":
            out += [(f"{nxt}/report.md", "file"), (f"{nxt}/index.html", "file")]
        elif w in ("--junit", "--summary"):
            out.append((nxt, "file"))
        elif w == ">":
            out.append((nxt, "json" if "--json" in words[:i] else "file"))
    return out


def commands(readme: str) -> list[Command]:
    """Every command of every ``sh`` block of ``readme`` (the text), in order."""
    out = []
    for b, m in enumerate(_BLOCK.finditer(readme), start=1):
        first = readme.count("\n", 0, m.start(1)) + 1
        pending, start = "", None
        for k, raw in enumerate(m.group(1).splitlines()):
            if not raw.strip() and not pending:
                continue
            if pending:
                raw = pending + " " + raw.strip()
            elif raw.lstrip().startswith("#"):
                continue  # a comment line: what a command printed, or a note
            else:
                start = first + k
            if raw.rstrip().endswith("\\"):
                pending = raw.rstrip()[:-1].rstrip()
                continue
            pending = ""
            text, comment = _split_comment(raw.strip())
            cmd = Command(text, comment, b, start, files=_promised(text))
            if b > 2 and _SETUP.match(text):
                cmd.skip = "sets up a machine (the docs run in an environment already set up)"
            elif _GPU.search(text):
                cmd.skip = "needs a GPU"
            out.append(cmd)
    return out


def setup_commands(readme: str) -> tuple[Command, Command]:
    """The main job and the tests: the first two blocks, one command each."""
    cmds = commands(readme)
    first = [c for c in cmds if c.block == 1]
    second = [c for c in cmds if c.block == 2]
    if len(first) != 1 or len(second) != 1:
        raise SystemExit("README.md must start with two sh blocks of one command each (the "
                         f"main job, the tests); found {len(first)} and {len(second)} commands")
    return first[0], second[0]


def doc_commands(readme: str) -> list[Command]:
    return [c for c in commands(readme) if c.block > 2]


def _check_files(cmd: Command, cwd: Path) -> list[str]:
    wrong = []
    for path, what in cmd.files:
        p = cwd / path
        if not p.is_file() or p.stat().st_size == 0:
            wrong.append(f"{path} missing or empty")
        elif what == "json":
            try:
                json.loads(p.read_text())
            except ValueError as e:
                wrong.append(f"{path} is not JSON ({e})")
    return wrong


def run(cmds, cwd: Path, env=None, timeout=900, echo=print, tail=25) -> bool:
    """Run each command in ``cwd`` with bash (its own process group, killed whole at the
    timeout); True when every one ended as it says it ends.  A command that did not: its last
    ``tail`` lines of output."""
    ok = True
    session = ""  # what a reader's shell holds from earlier lines: an activated environment
    for c in cmds:
        where = f"README.md:{c.line}"
        if c.skip:
            echo(f"skip  {where}  {c.text}   ({c.skip})")
            continue
        t = time.monotonic()
        p = subprocess.Popen(["bash", "-c", session + c.text], cwd=cwd, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, errors="replace",
                             start_new_session=True)
        try:
            out, _ = p.communicate(timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            rc = f"timeout after {timeout} s"
        wrong = ([] if rc == c.exit_code else [f"exit {rc}, the README says {c.exit_code}"]) + \
            (_check_files(c, cwd) if rc == c.exit_code else [])
        dt = time.monotonic() - t
        if wrong:
            ok = False
            echo(f"FAIL  {where}  {c.text}   ({dt:.1f} s): " + "; ".join(wrong))
            echo("      " + "\n      ".join(out.rstrip().splitlines()[-tail:]))
        else:
            echo(f"ok    {where}  {c.text}   (exit {rc}, {dt:.1f} s)")
            if ACTIVATE.match(c.text):
                session = c.text + " && "
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    ls = sub.add_parser("list", help="the commands, with what each must do")
    ls.add_argument("readme", nargs="?", default=str(ROOT / "README.md"))
    rn = sub.add_parser("run", help="run the main job (1), the tests (2) or the rest (docs)")
    rn.add_argument("which", choices=("1", "2", "docs"))
    rn.add_argument("--readme", default=str(ROOT / "README.md"))
    rn.add_argument("--bin", help="a virtual environment's bin folder: the reader's .venv/bin "
                                  "(docs)")
    a = ap.parse_args(argv)
    readme_path = Path(a.readme if a.what == "run" else a.readme).resolve()
    text = readme_path.read_text()
    if a.what == "list":
        for c in commands(text):
            what = c.skip or f"exit {c.exit_code}" + "".join(f", {p}" for p, _ in c.files)
            print(f"block {c.block}  README.md:{c.line}  {c.text}\n    -> {what}")
        return 0
    root = readme_path.parent
    if a.which in ("1", "2"):
        cmd = setup_commands(text)[int(a.which) - 1]
        # the whole suite, or the whole sweep: an hour at most, and pytest's summary when not
        return 0 if run([cmd], root, timeout=3600, tail=80) else 1
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    with tempfile.TemporaryDirectory(prefix="normcheck-readme-") as d:
        shutil.copytree(root / "cuda_src", Path(d) / "cuda_src")
        if a.bin:  # the reader's .venv, beside the copy: `source .venv/bin/activate` works
            (Path(d) / ".venv").symlink_to(Path(a.bin).resolve().parent)
        ok = run(doc_commands(text), Path(d), env=env)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
