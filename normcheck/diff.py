"""Regressions: what changed between two measurements of the same kernels.

``normcheck diff OLD NEW`` (and ``normcheck report --compare OLD``) takes two report folders
(their results.json) or two ``check --json`` results and lists, per kernel and family, what got
worse, what got better and what stayed, with the row that shows it.

A report's records are compared by key (kernel, family, width, rows, parameter): both sweeps
draw the same rows from the same seed, so any difference is the kernel's (or the harness's)
doing.  A record is **worse** when it newly fails to launch, newly writes non-finite values
where the exact result is finite, or its figure grew: the ratio to the sound bound where both
records have it, else the largest ULP error; **better** the other way; **same** within a
relative 1e-9 (float noise of the statistics, not of the kernel).  A check result is compared
per family: its verdict (pass < warn < fail), then the same figures.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from normcheck.errors import invalid

__all__ = ["Change", "Diff", "diff_paths", "diff_reports", "diff_checks", "load"]

_REL = 1e-9
_VERDICTS = {"pass": 0, "warn": 1, "fail": 2}


@dataclass
class Change:
    """One record or family in both (or one) of the two measurements."""

    kernel: str
    family: str
    where: str              # width/rows/parameter, or "" for a check's family
    status: str             # worse | better | same | added | removed
    old: str                # the figure before, as text
    new: str                # after
    why: str = ""           # what decided the status
    row: str = ""           # the new worst row and how to replay it

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Diff:
    old: str
    new: str
    kind: str               # report | check
    changes: list = field(default_factory=list)

    def count(self, status) -> int:
        return sum(1 for c in self.changes if c.status == status)

    @property
    def regressed(self) -> bool:
        return self.count("worse") > 0

    def as_dict(self) -> dict:
        return {"old": self.old, "new": self.new, "kind": self.kind,
                "counts": {s: self.count(s) for s in ("worse", "better", "same", "added",
                                                      "removed")},
                "changes": [c.as_dict() for c in self.changes]}

    def text(self, show_same: bool = False) -> str:
        """Worse first, then better, added and removed, each grouped by kernel."""
        lines = [f"{self.kind} diff: {self.old} -> {self.new}",
                 "  " + ", ".join(f"{self.count(s)} {s}" for s in
                                  ("worse", "better", "same", "added", "removed"))]
        for status in ("worse", "better", "added", "removed") + (("same",) if show_same else ()):
            cs = [c for c in self.changes if c.status == status]
            if not cs:
                continue
            lines.append(f"{status.upper()}:")
            for c in cs:
                w = f" {c.where}" if c.where else ""
                lines.append(f"  {c.kernel} {c.family}{w}: {c.old} -> {c.new}"
                             + (f" ({c.why})" if c.why else ""))
                if c.row:
                    lines.append(f"    {c.row}")
        return "\n".join(lines)

    def markdown(self) -> str:
        out = [f"### Changes since {self.old}\n",
               ", ".join(f"{self.count(s)} {s}" for s in
                         ("worse", "better", "same", "added", "removed")) + "\n"]
        rows = [c for c in self.changes if c.status != "same"]
        if rows:
            out.append("| status | kernel | family | where | before | after | why |")
            out.append("|---|---|---|---|---:|---:|---|")
            for c in rows:
                out.append(f"| {c.status} | {c.kernel} | {c.family} | {c.where} | {c.old} | "
                           f"{c.new} | {c.why} |")
        return "\n".join(out) + "\n"


def load(path) -> tuple[str, dict]:
    """("report", results) for a report folder or its results.json, ("check", result) for a
    ``check --json`` file."""
    p = Path(path)
    if p.is_dir():
        if not (p / "results.json").is_file():
            raise invalid("path", str(p), "a report folder holding results.json, or a "
                          "check --json file", "run normcheck report --out DIR first")
        from normcheck.report.sweep import load_results

        return "report", load_results(p)
    if not p.is_file():
        raise invalid("path", str(p), "an existing report folder or check --json file")
    from normcheck.files import read_limited

    try:
        data = json.loads(read_limited(p, "path", 64 << 20, "a result file"))
    except ValueError as e:
        raise invalid("path", str(p), f"JSON ({e})") from None
    except RecursionError:
        raise invalid("path", str(p), "a result file (this JSON nests too deep to be one)",
                      "compare the files normcheck wrote") from None
    if isinstance(data, dict) and "records" in data and "provenance" in data:
        from normcheck.report.sweep import load_results

        return "report", load_results(p.parent)
    if isinstance(data, dict) and "families" in data and "verdict" in data:
        return "check", _checked(data, p)
    raise invalid("path", str(p), "a report's results.json or a check --json result")


_NUM_OR_NONE = (int, float, str, type(None))  # inf and nan are written as strings


def _checked(data: dict, p) -> dict:
    """A ``check --json`` result, checked field by field where the diff reads it: a file of
    the wrong shape is an error naming the field, never an internal error."""
    def bad(field, v):
        return invalid(f"{p}: {field}", str(v)[:60], "what normcheck check --json writes",
                       "compare the files normcheck wrote")

    fams = data.get("families")
    if not isinstance(fams, list):
        raise bad("families", fams)
    for i, f in enumerate(fams):
        if not isinstance(f, dict) or not isinstance(f.get("family"), str):
            raise bad(f"families[{i}]", f)
        for k in ("verdict",):
            if not isinstance(f.get(k, ""), str):
                raise bad(f"families[{i}].{k}", f.get(k))
        for k in ("max_ulp", "max_of_bound"):
            v = f.get(k)
            if not isinstance(v, _NUM_OR_NONE) or isinstance(v, bool):
                raise bad(f"families[{i}].{k}", v)
            if isinstance(v, str):
                try:
                    float(v)
                except ValueError:
                    raise bad(f"families[{i}].{k}", v) from None
    for k in ("verdict", "kernel", "replay"):
        if not isinstance(data.get(k), (str, type(None))):
            raise bad(k, data.get(k))
    if not isinstance(data.get("worst"), (dict, type(None))):
        raise bad("worst", data.get("worst"))
    return data


def diff_paths(old, new) -> Diff:
    ko, do = load(old)
    kn, dn = load(new)
    if ko != kn:
        raise invalid("new", str(new), f"the same kind of result as {old} ({ko})",
                      "compare two report folders, or two check --json files")
    d = diff_reports(do, dn) if ko == "report" else diff_checks(do, dn)
    d.old, d.new = str(old), str(new)
    return d


def _num(v) -> str:
    from normcheck.metrics import short

    return short(float(v)) if v is not None else "-"


def _nonfinite(rec) -> int:
    return int(sum((rec.nonfinite or {}).values()))


def _figure(old, new):
    """The figure two records are compared on: of_bound where both have it, else max_ulp."""
    if old.of_bound is not None and new.of_bound is not None:
        return "of_bound", "x the bound"
    return "max_ulp", "ulp"


def _grew(a, b) -> int:
    """+1 if b > a beyond float noise, -1 if less, 0 same (inf and NaN included)."""
    a = math.inf if a is None or (isinstance(a, float) and math.isnan(a)) else float(a)
    b = math.inf if b is None or (isinstance(b, float) and math.isnan(b)) else float(b)
    if a == b:
        return 0
    if math.isinf(a) or math.isinf(b):
        return 1 if b > a else -1
    if abs(b - a) <= _REL * max(abs(a), abs(b)):
        return 0
    return 1 if b > a else -1


def _record_change(o, n) -> Change:
    where = f"{n.cols} cols x {n.rows} rows" + "".join(
        f", {k}={v:g}" for k, v in (n.param or {}).items())
    key, unit = _figure(o, n)
    old_t = o.error["kind"] if o.error else f"{_num(getattr(o, key))} {unit}"
    new_t = n.error["kind"] if n.error else f"{_num(getattr(n, key))} {unit}"
    row = ""
    w = n.worst or {}
    if w:
        from normcheck.measure import mismatch

        row = mismatch(f"row {w.get('row')}, col {w.get('col')}", w.get("kernel"),
                       w.get("exact"), x=w.get("x"))
        if w.get("replay"):
            row += f"; {w['replay']}"
    if bool(n.error) != bool(o.error):
        status = "worse" if n.error else "better"
        why = "launch fails" if n.error else "launches again"
    elif _nonfinite(n) != _nonfinite(o):
        status = "worse" if _nonfinite(n) > _nonfinite(o) else "better"
        why = f"non-finite outputs {_nonfinite(o)} -> {_nonfinite(n)}"
    else:
        g = _grew(getattr(o, key), getattr(n, key))
        status = {1: "worse", -1: "better", 0: "same"}[g]
        why = "" if g == 0 else f"{key} {'grew' if g > 0 else 'fell'}"
    return Change(n.kernel, n.family, where, status, old_t, new_t, why,
                  row if status == "worse" else "")


def diff_reports(old: dict, new: dict) -> Diff:
    """Records of two report sweeps, by key."""
    o = {r.key: r for r in old.get("records", [])}
    n = {r.key: r for r in new.get("records", [])}
    d = Diff("old", "new", "report")
    for k, rec in n.items():
        if k in o:
            d.changes.append(_record_change(o[k], rec))
        else:
            d.changes.append(Change(rec.kernel, rec.family, f"{rec.cols} cols", "added",
                                    "-", f"{_num(rec.max_ulp)} ulp"))
    for k, rec in o.items():
        if k not in n:
            d.changes.append(Change(rec.kernel, rec.family, f"{rec.cols} cols",
                                    "removed", f"{_num(rec.max_ulp)} ulp", "-"))
    order = {"worse": 0, "better": 1, "added": 2, "removed": 3, "same": 4}
    d.changes.sort(key=lambda c: (order[c.status], c.kernel, c.family, c.where))
    return d


def diff_checks(old: dict, new: dict) -> Diff:
    """Families of two check results of the same kernel."""
    d = Diff("old", "new", "check")
    kern = str(new.get("kernel"))
    of = {f["family"]: f for f in old.get("families", [])}
    nf = {f["family"]: f for f in new.get("families", [])}
    for fam, f in nf.items():
        if fam not in of:
            d.changes.append(Change(kern, fam, "", "added", "-", f.get("verdict", "?")))
            continue
        o = of[fam]
        vo, vn = _VERDICTS.get(o.get("verdict"), 2), _VERDICTS.get(f.get("verdict"), 2)
        old_t = f"{o.get('verdict')} {_num(o.get('max_ulp'))} ulp ({_num(o.get('max_of_bound'))}x)"
        new_t = f"{f.get('verdict')} {_num(f.get('max_ulp'))} ulp ({_num(f.get('max_of_bound'))}x)"
        if vo != vn:
            status = "worse" if vn > vo else "better"
            why = f"verdict {o.get('verdict')} -> {f.get('verdict')}"
        else:
            g = _grew(o.get("max_of_bound"), f.get("max_of_bound"))
            if g == 0:
                g = _grew(o.get("max_ulp"), f.get("max_ulp"))
                key = "max_ulp"
            else:
                key = "max_of_bound"
            status = {1: "worse", -1: "better", 0: "same"}[g]
            why = "" if g == 0 else f"{key} {'grew' if g > 0 else 'fell'}"
        row = ""
        w = new.get("worst") or {}
        if status == "worse" and w.get("family") == fam:
            row = f"row {w.get('row_index')}, col {w.get('col')}: {_num(w.get('ulp'))} ulp"
            if new.get("replay"):
                row += f"; {new['replay']}"
        d.changes.append(Change(kern, fam, "", status, old_t, new_t, why, row))
    for fam in of:
        if fam not in nf:
            d.changes.append(Change(kern, fam, "", "removed", of[fam].get("verdict", "?"), "-"))
    if _VERDICTS.get(new.get("verdict"), 2) > _VERDICTS.get(old.get("verdict"), 2) and \
            not any(c.status == "worse" for c in d.changes):
        d.changes.append(Change(kern, "(overall)", "", "worse", str(old.get("verdict")),
                                str(new.get("verdict")), "verdict"))
    order = {"worse": 0, "better": 1, "added": 2, "removed": 3, "same": 4}
    d.changes.sort(key=lambda c: (order[c.status], c.family))
    return d
