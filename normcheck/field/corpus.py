"""The field's corpus (``corpus.toml`` beside this file): release files and the kernels in them.

    [[source]]                        # one file of a release on the registry
    project = "liger-kernel"
    version = "0.8.5"
    file = "liger_kernel-0.8.5-py3-none-any.whl"
    sha256 = "..."                     # the file's
    home = "https://github.com/linkedin/Liger-Kernel"
    [source.files]                    # what normcheck reads of it, each pinned
    "liger_kernel/ops/rms_norm.py" = "..."

    [[kernel]]
    name = "liger_rms_norm"           # a spec specs/<name>.toml launches it
    project = "liger-kernel"
    language = "triton"               # or "cuda"
    expect = "pass"                   # pass, warn or fail: the verdict we recorded ...
    cause = "..."                     # ... its headline cause's key (warn, fail), if any
    why = "..."                       # ... and why it is right
    needs = ["torch"]                 # what it needs beyond normcheck's install, if anything:
                                      # torch's headers (a file including them), or torch
                                      # importable (a Triton file's host code uses it as it loads)
    dtypes = { fp16 = "pass", fp32 = "fail one_pass" }
                                      # the other formats its launcher dispatches, each its own
                                      # row "name[fp16]" with its recorded verdict (and cause):
                                      # a CUDA C kernel's: its spec's types = { fp16 = "c10::Half" }
                                      # swaps the entry's type for each

A spec's ``source`` and ``include`` are relative to its release's root (the files above).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from normcheck.errors import SpecError

__all__ = ["Source", "Kernel", "Corpus", "load", "record", "CORPUS", "SPECS", "VERDICTS", "NEEDS"]

#: The corpus file and the specs' folder, beside this module.
CORPUS = Path(__file__).with_name("corpus.toml")
SPECS = Path(__file__).with_name("specs")
VERDICTS = ("pass", "warn", "fail")
_SOURCE_KEYS = {"project", "version", "file", "sha256", "home", "files"}
_KERNEL_KEYS = {"name", "project", "language", "expect", "cause", "why", "needs", "dtypes"}
#: The formats a row of another dtype may run in.
DTYPES = ("fp16", "bf16", "fp32")
#: What a kernel may need beyond normcheck's own install (``needs``), and how to get it.
NEEDS = {"torch": "pip install torch runs it (a CPU build is enough: torch's headers for a file "
                  "that includes them, its import for a Triton file's host code or an op's "
                  "tensors)"}


@dataclass(frozen=True)
class Source:
    """One release file: where it comes from, its SHA-256, and the files of it normcheck reads
    ({path: SHA-256})."""

    project: str
    version: str
    file: str
    sha256: str
    home: str
    files: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.project}-{self.version}"


@dataclass(frozen=True)
class Kernel:
    """One kernel of the field, its spec and the verdict recorded for it."""

    name: str
    project: str
    language: str
    expect: str
    cause: str | None
    why: str
    needs: tuple = ()
    dtype: str | None = None   # a row of another format its launcher dispatches: that format
    base: str | None = None    # ... and the kernel (spec) it is a row of

    @property
    def spec(self) -> Path:
        return SPECS / f"{self.base or self.name}.toml"


@dataclass(frozen=True)
class Corpus:
    sources: dict   # project -> Source
    kernels: tuple  # Kernel, in the file's order

    def select(self, only=None) -> tuple:
        """The kernels named (a name, a project, or a shell pattern of names), all by default."""
        import fnmatch

        if not only:
            return self.kernels
        picked = tuple(k for k in self.kernels
                       if any(k.name == o or fnmatch.fnmatchcase(k.name, o) or
                              k.project == o or
                              (k.base is not None and fnmatch.fnmatchcase(k.base, o))
                              for o in only))
        if not picked:
            from normcheck.errors import invalid

            raise invalid("--only", ",".join(only), "a kernel or project of the field: " +
                          ", ".join(k.name for k in self.kernels), "normcheck field --list")
        return picked


def _bad(where, msg):
    return SpecError(f"{CORPUS}: {where}: {msg}")


def load(path: Path = CORPUS) -> Corpus:
    """The corpus, checked: each source pinned, each kernel's project a source, its spec there,
    its verdict one of pass/warn/fail and said why."""
    data = tomllib.loads(path.read_text())
    sources = {}
    for i, s in enumerate(data.get("source", [])):
        where = f"source {i + 1}"
        if set(s) - _SOURCE_KEYS or not {"project", "version", "file", "sha256"} <= set(s):
            raise _bad(where, f"keys {sorted(s)}: expected {sorted(_SOURCE_KEYS)}")
        if len(s["sha256"]) != 64 or not all(len(h) == 64 for h in s.get("files", {}).values()):
            raise _bad(where, "every SHA-256 is 64 hex digits")
        if s["project"] in sources:
            raise _bad(where, f"project {s['project']} twice")
        sources[s["project"]] = Source(s["project"], s["version"], s["file"], s["sha256"],
                                       s.get("home", ""), dict(s.get("files", {})))
    kernels, names = [], set()
    for i, k in enumerate(data.get("kernel", [])):
        where = f"kernel {k.get('name', i + 1)}"
        if set(k) - _KERNEL_KEYS or not {"name", "project", "expect", "why"} <= set(k):
            raise _bad(where, f"keys {sorted(k)}: expected {sorted(_KERNEL_KEYS)}")
        if k["project"] not in sources:
            raise _bad(where, f"project {k['project']} has no [[source]]")
        if k["expect"] not in VERDICTS:
            raise _bad(where, f"expect={k['expect']!r}: expected one of {VERDICTS}")
        if k["name"] in names:
            raise _bad(where, "named twice")
        names.add(k["name"])
        needs = k.get("needs", [])
        if not isinstance(needs, list) or set(needs) - set(NEEDS):
            raise _bad(where, f"needs={needs!r}: expected a list of {sorted(NEEDS)}")
        kern = Kernel(k["name"], k["project"], k.get("language", "cuda"), k["expect"],
                      k.get("cause") or None, k["why"], tuple(needs))
        if not kern.spec.is_file():
            raise _bad(where, f"no spec {kern.spec}")
        kernels.append(kern)
        for dt, rec in (k.get("dtypes") or {}).items():
            verdict, _, cause = str(rec).partition(" ")
            if kern.language != "triton" and dt not in _spec_types(kern.spec):
                raise _bad(where, f"dtypes.{dt}: a CUDA C kernel's other format is another "
                           f"instantiation: its spec names each format's C++ type (types = "
                           f"{{ {dt} = \"...\" }}), the entry's swapped for it")
            if dt not in DTYPES or verdict not in VERDICTS or (verdict == "pass" and cause):
                raise _bad(where, f"dtypes.{dt}={rec!r}: expected a format of {DTYPES} = "
                           f"\"pass\", or \"warn KEY\" / \"fail KEY\" (the headline cause)")
            kernels.append(Kernel(f"{kern.name}[{dt}]", kern.project, kern.language, verdict,
                                  cause.strip() or None, kern.why, kern.needs, dt, kern.name))
    return Corpus(sources, tuple(kernels))


def _spec_types(path: Path) -> dict:
    """The ``types`` table of a spec file (read as TOML; the spec itself is checked where it
    runs)."""
    try:
        t = tomllib.loads(Path(path).read_text()).get("types")
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    return t if isinstance(t, dict) else {}


def record(outcomes, path: Path = CORPUS) -> list[str]:
    """Write the verdicts and headline causes measured (``outcomes``: judge.Outcome of kernels
    that ran) over the recorded ones in ``path``, keeping the rest of the file as it is; the
    names of the kernels whose record changed.  A changed record keeps its ``why``: say why
    the new verdict is right before committing it."""
    import re

    text = path.read_text()
    parts = re.split(r"(?m)^(?=\[\[kernel\]\]\s*$)", text)
    got = {o.name: o for o in outcomes}
    changed = []
    for i, part in enumerate(parts):  # the rows of other formats: their dtypes = { ... } line
        m = re.search(r'(?m)^name = "([^"]+)"$', part)
        line = re.search(r"(?m)^dtypes = \{(.*)\}$", part)
        if not part.startswith("[[kernel]]") or not m or not line:
            continue
        recs = dict(re.findall(r'(\w+) = "([^"]*)"', line.group(1)))
        for dt in list(recs):
            o = got.get(f"{m.group(1)}[{dt}]")
            if o is None:
                continue
            new = o.verdict + (f" {o.cause}" if o.verdict != "pass" and o.cause else "")
            if new != recs[dt]:
                recs[dt] = new
                changed.append(o.name)
        parts[i] = part[:line.start()] + "dtypes = { " + ", ".join(
            f'{k} = "{v}"' for k, v in recs.items()) + " }" + part[line.end():]
    for i, part in enumerate(parts):
        m = re.search(r'(?m)^name = "([^"]+)"$', part)
        if not part.startswith("[[kernel]]") or not m or m.group(1) not in got:
            continue
        o = got[m.group(1)]
        cause = o.cause if o.verdict != "pass" else None
        old = re.search(r'(?m)^expect = "([^"]*)"$', part)
        old_cause = re.search(r'(?m)^cause = "([^"]*)"\n', part)
        if old and old.group(1) == o.verdict and \
                (old_cause.group(1) if old_cause else None) == cause:
            continue
        part = re.sub(r'(?m)^cause = "[^"]*"\n', "", part)
        part = re.sub(r'(?m)^expect = "[^"]*"$',
                      f'expect = "{o.verdict}"' + (f'\ncause = "{cause}"' if cause else ""), part)
        parts[i] = part
        changed.append(m.group(1))
    if changed:
        path.write_text("".join(parts))
        load(path)  # still a valid corpus
    return changed
