"""Each kernel of the field checked as ``normcheck check`` checks it (its spec, the cpu
backend, a fixed seed), its verdict and headline cause compared with the ones recorded.

A kernel that cannot be judged (its file does not compile, a header is missing ...) did not run:
that is an error of the field, never a pass.  A Triton kernel where Triton is not installed, and
a kernel that needs what is not usable here (``needs = ["torch"]``: torch's headers, or its
import for a Triton file's host code), is skipped, said so with the install that runs it.  :func:`judge_field` returns one :class:`Outcome` per kernel, in order.
"""

from __future__ import annotations

import functools
import importlib.util
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from normcheck import spec as specs
from normcheck.errors import NormcheckError
from normcheck.field import corpus as corpus_mod, sources

__all__ = ["Outcome", "judge_field", "judge_one", "EXAMPLES", "SEED"]

#: Rows a family and the seed of every field check (the verdicts are recorded for these).
EXAMPLES = 16
SEED = 0


@dataclass
class Outcome:
    """What the field's check of one kernel found, beside what was recorded."""

    name: str
    project: str
    version: str
    language: str
    file: str                       # the kernel's file, inside its release
    expect: str
    expect_cause: str | None
    why: str
    verdict: str | None = None      # None: not run (``error``) or skipped (``skipped``)
    cause: str | None = None        # the headline cause's key
    cause_text: str | None = None
    norm: str | None = None
    formats: str | None = None      # "bf16 -> bf16"
    # [family, max ulp, × bound, bias, verdict, [the kinds of its failures]]
    families: list = field(default_factory=list)
    max_ulp: float | None = None
    widths: list = field(default_factory=list)   # every width the families ran, ascending
    # every distinct finding, the headline's first: {kind, families, cause_key, text}
    findings: list = field(default_factory=list)
    # every run the check owed, made or not and why (#66): [{run, ran, why?, detail?}]
    coverage: list = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None
    seconds: float = 0.0
    # what the spec judges, as its header says: the branch of the project's launcher it runs
    # (block size by rows, kernel by width, dtype dispatch) and the ones it does not
    judged: str = ""

    @property
    def ran(self) -> bool:
        return self.verdict is not None

    @property
    def matches(self) -> bool:
        """The verdict (and, where one is recorded, the headline cause) as recorded."""
        return self.ran and self.verdict == self.expect and \
            (self.expect_cause is None or self.cause == self.expect_cause)

    def as_dict(self) -> dict:
        return {**asdict(self), "ran": self.ran, "matches": self.matches}


def _triton_missing() -> bool:
    return importlib.util.find_spec("triton") is None


@functools.cache
def _unusable(need: str) -> str | None:
    """Why ``need`` (corpus.NEEDS) cannot be used here, or None: torch installed and importable
    (tried in a child process: its import is slow and loads CUDA libraries normcheck does not
    want in its own)."""
    import subprocess
    import sys

    try:
        found = importlib.util.find_spec(need) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return f"{need} is not installed"
    r = subprocess.run([sys.executable, "-c", f"import {need}"], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return f"{need} is installed but cannot be imported ({last[:160]})"
    return None


def _needs(k: corpus_mod.Kernel) -> tuple:
    """What a kernel needs beyond normcheck's install: the corpus's ``needs``, and torch for an
    op (its host code is called on torch tensors: without torch its module's ``import torch``
    would meet a stand-in, #64)."""
    from normcheck.backends.triton.op import NEEDS as OP_NEEDS

    try:
        is_op = "op" in tomllib.loads(k.spec.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        is_op = False  # the spec's own load says what is wrong with it
    return tuple(k.needs) + ((OP_NEEDS,) if is_op and OP_NEEDS not in k.needs else ())


def spec_header(path) -> str:
    """A spec's leading comment, as one paragraph: what it launches and how (the branch of the
    project's launcher it judges, read from the launcher)."""
    lines = []
    try:
        text = Path(path).read_text()
    except OSError:
        return ""
    for ln in text.splitlines():
        if not ln.startswith("#"):
            break
        lines.append(ln[1:].strip())
    return " ".join(x for x in lines if x)


def judge_one(k: corpus_mod.Kernel, src: corpus_mod.Source, save_dir=None,
              echo=None) -> Outcome:
    """One kernel: its release fetched (cached), its spec loaded against the release's root,
    checked on the cpu backend."""
    from normcheck import check

    t0 = time.perf_counter()
    out = Outcome(k.name, k.project, src.version, k.language, "", k.expect, k.cause, k.why,
                  judged=spec_header(k.spec))
    out.skipped = skip_reason(k)
    if out.skipped:  # before anything is fetched
        return out
    try:
        root = sources.fetched(src, echo)
        sp = specs.load(k.spec, roots=(root,), base=root)
        if k.dtype is not None:  # a row of another format the launcher dispatches
            sp = specs.for_dtype(sp, k.dtype)
        out.file = str(Path(sp.source).relative_to(root)) if sp.source else ""
        # a backward check has no targeted search; a forward one's is off (examples only)
        more = {"backward": True} if sp.backward else {"search": 0}
        r = check.run(check.CheckOptions(spec=sp, include=(str(root),), examples=EXAMPLES,
                                         seed=SEED, save_counterexample=(
                                             str(Path(save_dir) / f"{k.name}.npz")
                                             if save_dir else None), **more))
    except NormcheckError as e:
        out.error = f"{type(e).__name__}: {e}".split("\n")[0][:400]
        return out
    finally:
        out.seconds = time.perf_counter() - t0
    out.verdict = str(r.verdict)
    out.cause = getattr(r.cause, "key", None)
    out.cause_text = str(r.cause) if r.cause else None
    out.norm, out.formats = r.norm_desc, f"{r.dtype} → {r.out_dtype}"
    out.max_ulp = float(r.max_ulp)
    out.families = [[f.family, float(getattr(f, "max_ulp", 0.0)),
                     float(getattr(f, "max_of_bound", 0.0)),
                     getattr(f, "mean_signed_ulp", None), str(f.verdict),
                     sorted(str(k) for k in (getattr(f, "failures", None) or {}))]
                    for f in r.families]
    out.widths = sorted({int(c) for f in r.families for c in (getattr(f, "cols", None) or [])})
    out.findings = [{**f, "text": _stable(f["text"], root)} for f in findings(r)]
    out.coverage = list(getattr(r.detail, "coverage", None) or [])
    return out


def _stable(text: str, root: Path) -> str:
    """A finding as docs/field.md cites it: a path into the release folder relative to the
    release's root, the cache's own folder said as <cache>, a process's heap addresses elided
    -- nothing that changes from machine to machine or run to run (#68)."""
    import re

    from normcheck.backends import cache

    t = text.replace(str(root) + "/", "").replace(str(Path(root).resolve()) + "/", "")
    for c in {str(cache.cache_root()), str(cache.cache_root().resolve())}:
        t = t.replace(c, "<cache>")
    return re.sub(r"\b0x7f[0-9a-f]{6,}\b", "0x7f…", t)


def findings(r) -> list:
    """Every distinct finding of a check -- a fault, undefined values, an accuracy cause --
    once, with the families it was found on; the one the headline names first, then by the
    strength of its evidence (normcheck.causes.EVIDENCE), then as found."""
    from normcheck.causes import EVIDENCE

    import re

    got = {}
    for f in r.failures:
        c = f.cause
        text = str(c) if c else f"{f.kind}: {f.detail}"
        # one finding a cause *and* a source line: two faults of one kind at two lines are two
        # bugs (FastVideo's unmasked weight load and its unmasked rows), both listed (#66)
        line = re.search(r"\bat ([\w./+-]+:\d+)", text)
        key = (getattr(c, "key", None) or f"kind:{f.kind}") + (f"@{line.group(1)}" if line
                                                                else "")
        d = got.setdefault(key, {"kind": str(f.kind), "families": [],
                                 "cause_key": getattr(c, "key", None), "text": text,
                                 "evidence": getattr(c, "evidence", None)})
        if f.family not in d["families"]:
            d["families"].append(f.family)
    head = getattr(r.cause, "key", None)
    order = list(got)

    def rank(k):
        d = got[k]
        ev = EVIDENCE.index(d["evidence"]) if d["evidence"] in EVIDENCE else len(EVIDENCE)
        return (k.split("@")[0] != head or (k != order[0] and d["text"] != str(r.cause)), ev,
                order.index(k))

    return [{k: v for k, v in got[k].items() if k != "evidence"} for k in sorted(got, key=rank)]


def skip_reason(k: corpus_mod.Kernel) -> str | None:
    """Why a kernel is skipped here (Triton not installed, a need not usable), or None."""
    if k.language == "triton" and _triton_missing():
        return "Triton is not installed here (pip install 'normcheck[triton]')"
    for need in _needs(k):
        why = _unusable(need)
        if why is not None:
            return f"needs {need}: {why}; {corpus_mod.NEEDS[need]}"
    return None


def _line(i: int, n: int, k, o: Outcome) -> str:
    got = o.verdict or ("skipped" if o.skipped else "not run")
    mark = "ok  " if o.matches else ("skip" if o.skipped else "DIFF")
    return (f"[{i}/{n}] {mark} {k.name:34} {got:8} (recorded {k.expect}"
            f"{', ' + k.cause if k.cause else ''}; {o.seconds:.1f} s)"
            + (f" -- {o.error}" if o.error else "")
            + (f" -- {o.skipped}" if o.skipped else "")
            + (f" -- cause {o.cause}" if o.ran and not o.matches else ""))


def judge_field(only=None, save_dir=None, echo=print, path=None, jobs: int = 1) -> list[Outcome]:
    """Every kernel of the corpus (or those ``only`` names), in order, a line each as it goes.
    ``jobs`` > 1: the releases fetched first (one process fetches each), then the kernels of
    each project judged in turn by one of ``jobs`` processes (a project's kernels share their
    files' builds), the largest projects first; the outcomes in the corpus' order all the
    same, each line as its project's turn ends (#67: the field on 2 cores in about half the
    time)."""
    import os

    c = corpus_mod.load(path or corpus_mod.CORPUS)
    picked = c.select(only)
    n = len(picked)
    # each launch's blocks on one thread, in order: the first block that faults is the same
    # every run, and so the finding docs/field.md cites (#68: it changed from run to run)
    was = os.environ.get("NORMCHECK_LAUNCH_WORKERS")
    os.environ["NORMCHECK_LAUNCH_WORKERS"] = was or "1"
    try:
        return _judge(c, picked, save_dir, echo, path, jobs)
    finally:
        if was is None:
            os.environ.pop("NORMCHECK_LAUNCH_WORKERS", None)


def _judge(c, picked, save_dir, echo, path, jobs) -> list[Outcome]:
    n = len(picked)
    if jobs <= 1 or len({k.project for k in picked}) < 2:
        outs = []
        for i, k in enumerate(picked, 1):
            o = judge_one(k, c.sources[k.project], save_dir, echo)
            outs.append(o)
            if echo is not None:
                echo(_line(i, n, k, o))
        return outs
    from concurrent.futures import as_completed

    for project in dict.fromkeys(k.project for k in picked if skip_reason(k) is None):
        sources.fetched(c.sources[project], echo)  # before any judge: one fetch each
    groups = {}
    for i, k in enumerate(picked):
        groups.setdefault(k.project, []).append(i)
    order = sorted(groups.values(), key=len, reverse=True)
    outs, done = [None] * n, 0
    with _pool(jobs) as ex:
        futures = [ex.submit(_judge_rows, str(path or corpus_mod.CORPUS),
                             [picked[i].name for i in idx],
                             None if save_dir is None else str(save_dir)) for idx in order]
        for fut in as_completed(futures):
            idx = order[futures.index(fut)]
            for i, o in zip(idx, fut.result()):
                outs[i] = o
                done += 1
                if echo is not None:
                    echo(_line(done, n, picked[i], o))
    return outs


def _pool(jobs: int):
    """The processes that judge the projects: spawned (no thread of this process carried
    over into a fork), ``jobs`` of them."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))


def _judge_rows(path: str, names: list, save_dir):
    """The outcomes of the corpus' kernels ``names``, in turn (a worker of judge_field)."""
    c = corpus_mod.load(Path(path))
    by_name = {k.name: k for k in c.kernels}
    return [judge_one(by_name[nm], c.sources[by_name[nm].project], save_dir, None)
            for nm in names]
