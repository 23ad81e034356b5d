"""A record of the report's sweep: one kernel on one family at one width, measured.

:class:`Record` is what ``results.json`` holds a line of, typed, and it owns its JSON round trip:
:meth:`Record.to_json` gives the object written (inf and NaN as the strings "inf"/"nan" by
:func:`normcheck.report.folder.json_text`), :meth:`Record.from_json` reads one back, checking
every field's type -- a file of the wrong shape is an error naming the field, never an internal
error later.  Every reader of records (render, findings, plots, audit, diff, the CI formats)
reads these fields by name.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from normcheck.errors import FailureKind
from normcheck.escape import CONTROLS, worst_link

__all__ = ["Record", "RecordError"]

_NUM = (int, float)


class RecordError(ValueError):
    """A record of results.json that is not one normcheck wrote (the message says which field)."""


@dataclass
class Record:
    key: str  # the task's key (kernel, family, width, parameters): unique in a sweep
    kernel: str  # the built-in variant's name, or the label of a user kernel
    family: str  # normcheck.families
    cols: int
    rows: int
    max_ulp: float  # over every element; inf where an element is non-finite (or on an error)
    norm: str | None = None
    storage: str | None = None
    algorithm: str | None = None  # naive, two_pass, welford, rms, ... ("yours" for a user's)
    order: str | None = None  # the precision order (upcast_square, ...), None for fp32
    convention: str | None = None  # a fused kernel's: exact or stored
    fast_math: bool = False
    param: dict = field(default_factory=dict)  # kappa / magnitude of the parameter sweeps
    p99_ulp: float | None = None
    mean_ulp: float | None = None
    mean_signed_ulp: float | None = None  # the mean signed error toward zero (measure.Bias)
    max_scaled_ulp: float | None = None  # ulps of max(|γx̂|, |β|)
    max_bits: float | None = None  # ordinal distance (units in the last place of the bits)
    max_abs_x: float | None = None
    seconds: float | None = None
    nonfinite: dict = field(default_factory=dict)  # failure class -> count
    classes: dict = field(default_factory=dict)  # every class -> count
    histogram: list = field(default_factory=list)  # counts on normcheck.report.sweep.HIST_BINS
    worst: dict | None = None  # the worst element: row, col, ulp, x, kernel, exact, file, replay
    error: dict | None = None  # {"kind", "detail"} where the kernel did not run to the end
    of_bound: float | None = None  # largest error / the sound bound (the check's fail rule)
    beyond_bound: int | None = None  # elements beyond the sound bound
    unwritten: int | None = None
    user: bool = False  # a user kernel (normcheck report --spec)
    spec: str | None = None  # its spec's path

    # -- reading --------------------------------------------------------------------------------
    @property
    def judged(self) -> bool:
        """A record of the check's grid (not a parameter sweep)."""
        return not self.param

    @property
    def nonfinite_count(self) -> int:
        return int(sum(self.nonfinite.values()))

    # -- the JSON round trip --------------------------------------------------------------------
    def to_json(self) -> dict:
        """The object results.json holds: every field, None as null (a stable schema)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, obj) -> "Record":
        """A record read back (inf/nan already restored to floats); RecordError naming what is
        wrong otherwise."""
        if not isinstance(obj, dict):
            raise RecordError("not an object")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for k in ("key", "kernel", "family", "cols", "rows", "max_ulp"):
            if k not in obj:
                raise RecordError(f"no {k!r}")
        unknown = sorted(set(obj) - set(fields))
        if unknown:
            raise RecordError(f"unknown field {unknown[0][:40]!r}")
        for k, v in obj.items():
            t = _TYPES[k]
            if v is None and k not in _NOT_NONE:
                continue
            if not isinstance(v, t) or (t is int and isinstance(v, bool)):
                raise RecordError(f"{k}={str(v)[:40]!r} is not of its type")
        for k in ("nonfinite", "classes", "param"):
            if k in obj and not all(isinstance(v, _NUM) for v in obj[k].values()):
                raise RecordError(f"{k} holds a value that is not a number")
        if "histogram" in obj and not all(isinstance(v, int) for v in obj["histogram"]):
            raise RecordError("histogram holds a value that is not a count")
        for k in _WORDS:  # closed forms: a word of normcheck's, never markup or a URL
            if obj.get(k) is not None and not _WORD.fullmatch(obj[k]):
                raise RecordError(f"{k}={str(obj[k])[:40]!r} is not a name normcheck writes")
        for k in ("key", "kernel", "spec"):
            if obj.get(k) is not None and (len(obj[k]) > 4096 or CONTROLS.search(obj[k])):
                raise RecordError(f"{k} holds control characters or is over 4096 characters")
        if obj.get("error") is not None:
            e = obj["error"]
            if set(e) - {"kind", "detail"} or e.get("kind") not in _ERROR_KINDS or \
                    not isinstance(e.get("detail", ""), str):
                raise RecordError(f"error={str(e)[:60]!r} is not {{kind, detail}} of a known "
                                  "kind")
        if obj.get("worst") is not None:
            _check_worst(obj["worst"])
        vals = dict(obj)
        for k in ("max_ulp", "p99_ulp", "mean_ulp", "max_scaled_ulp", "max_bits", "max_abs_x",
                  "seconds", "of_bound", "mean_signed_ulp"):
            if vals.get(k) is not None:
                vals[k] = float(vals[k])
        return cls(**vals)


#: Fields that hold one of normcheck's names (a format, a norm, a family, an order ...).
_WORDS = ("norm", "storage", "algorithm", "order", "convention", "family")
_WORD = re.compile(r"[A-Za-z0-9_.+\-]{1,64}")
_ERROR_KINDS = frozenset(k.value for k in FailureKind) | {"error"}
_WORST_TYPES = {"row": int, "col": int, "ulp": _NUM, "x": _NUM, "kernel": _NUM,
                "exact": _NUM, "file": str, "replay": str}


def _check_worst(w):
    """The worst element's fields: numbers, a replay command without control characters and a
    file that is the report's own ``worst/NAME.npz`` (a link in index.html)."""
    if not isinstance(w, dict):
        raise RecordError("worst is not an object")
    for k, v in w.items():
        t = _WORST_TYPES.get(k)
        if t is not None and v is None and k in ("file", "replay"):
            continue  # a parameter sweep's record: no file, no replay
        if t is None or not isinstance(v, t) or isinstance(v, bool):
            raise RecordError(f"worst.{str(k)[:40]} is not a field normcheck writes, or not of "
                              "its type")
    if w.get("file") is not None and worst_link(w["file"]) is None:
        raise RecordError(f"worst.file={w['file'][:60]!r} is not a worst/NAME.npz of the report")
    if w.get("replay") is not None and (len(w["replay"]) > 4096 or CONTROLS.search(w["replay"])):
        raise RecordError("worst.replay holds control characters or is over 4096 characters")


_TYPES = {
    "key": str, "kernel": str, "family": str, "cols": int, "rows": int, "max_ulp": _NUM,
    "norm": str, "storage": str, "algorithm": str, "order": str, "convention": str,
    "fast_math": bool, "param": dict, "p99_ulp": _NUM, "mean_ulp": _NUM, "mean_signed_ulp": _NUM,
    "max_scaled_ulp": _NUM, "max_bits": _NUM, "max_abs_x": _NUM, "seconds": _NUM,
    "nonfinite": dict, "classes": dict, "histogram": list, "worst": dict, "error": dict,
    "of_bound": _NUM, "beyond_bound": int, "unwritten": int, "user": bool, "spec": str,
}
_NOT_NONE = {"key", "kernel", "family", "cols", "rows", "max_ulp", "fast_math", "param",
             "nonfinite", "classes", "histogram", "user"}
