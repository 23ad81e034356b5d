"""The report's answers, from its records: which kernels and precision orders are safe on which
rows, where each unsafe one breaks, and the worst rows of all.

A record is **unsafe** where no sound kernel would have written what it wrote -- the check's
fail rule (normcheck.check.tolerances): an element beyond the sound bound
(normcheck.bounds.sound_bound, never below the format's floor), a non-finite value where the
exact result is finite (or a number where it is NaN), or a launch that failed.  A kernel is
safe on a family when every width of it is (a kernel of yours runs at every width the check
runs it, and ``normcheck check`` itself judges it: its record, family ``check``, is unsafe
where the check fails); the findings name, for each unsafe kernel, the
family where it breaks worst, with its worst element and the command that replays it.  Records
of the parameter sweeps (κ, magnitude) feed the plots only, and the families the check does not
judge (``extremes``: x² overflows float itself, so no float kernel can promise anything there)
are in the tables, not in the findings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from normcheck import escape
from normcheck.measure import mismatch
from normcheck.metrics import short, times_bound

#: The family of a kernel of yours' ``normcheck check`` record (normcheck.report.sweep).
CHECK_TASK = "check"

__all__ = ["Finding", "findings", "by_kernel", "kernel_label", "worst_records", "bound_of",
           "findings_markdown", "ORDER_NAMES", "md_cell"]

ORDER_NAMES = {None: "", "upcast_square": "upcast-then-square",
               "square_upcast": "square-then-upcast",
               "storage_accumulate": "accumulate-in-storage"}


def is_triton_builtin(r) -> bool:
    """Whether a record is of a built-in Triton norm (named beside the CUDA built-ins)."""
    from normcheck import kernels
    from normcheck.errors import InvalidArgument

    try:
        return not r.user and kernels.get(r.kernel).language == "triton"
    except InvalidArgument:  # a kernel of another normcheck's results
        return False


def kernel_label(r) -> str:
    """A kernel as the findings name it: algorithm, precision order, convention, rsqrtf; a
    user kernel by its own name."""
    if r.user:
        spec = Path(r.spec).name if r.spec else ""
        return f"{r.kernel} (yours{': ' + spec if spec else ''})"
    s = ("Triton " if is_triton_builtin(r) else "") + (r.algorithm or "")
    if r.order:
        s += f" {ORDER_NAMES.get(r.order, r.order)}"
    if r.convention:
        s += f" ({r.convention})"
    if r.fast_math:
        s += " rsqrtf"
    return s.strip()


@dataclass
class Finding:
    """One kernel on one family (all its widths)."""

    kernel: str
    label: str
    norm: str
    storage: str
    family: str
    safe: bool
    why: str                    # what makes it unsafe ("" when safe)
    max_ulp: float
    of_bound: float | None
    cols: int
    user: bool = False
    worst: dict = field(default_factory=dict)
    spec: str | None = None     # a kernel of the user's: its spec's path
    nonfinite: int = 0          # outputs non-finite where the exact value is finite
    error: bool = False         # a launch failed

    @property
    def bound_text(self) -> str:
        """The verdict's measure as a table shows it: the largest error over the sound bound
        (enough digits to be on the right side of 1), or what makes it meaningless -- a
        non-finite output, a failed launch -- never a finite ratio beside those."""
        if self.family == CHECK_TASK:  # the check's own verdict stands for every run it made
            return "check: FAIL" if self.error else (
                times_bound(self.of_bound) if self.of_bound is not None else "check: pass")
        if self.error:
            return "launch failed"
        if self.nonfinite:
            return f"non-finite ({self.nonfinite})"
        return times_bound(self.of_bound) if self.of_bound is not None else "-"

    @property
    def replay(self) -> str:
        return (self.worst or {}).get("replay") or ""

    def text(self) -> str:
        w = self.worst or {}
        s = (f"{self.kernel} on {self.family} (width {self.cols}): {self.why or 'safe'}; "
             f"max {short(self.max_ulp)} ulp")
        if w.get("row") is not None:
            s += "; worst " + mismatch(f"row {w['row']}, col {w['col']}", w.get("kernel"),
                                       w.get("exact"), x=w.get("x"))
        if self.replay:
            s += f"\nreplay: {self.replay}"
        return s


def _unsafe(r) -> str:
    """Why a record is unsafe, or ""."""
    if r.error:
        if r.family == CHECK_TASK:
            return r.error.get("detail") or "normcheck check fails it"
        return f"launch failed: {r.error['kind']}"
    nf = int(sum((r.nonfinite or {}).values()))
    if nf:
        return f"{nf} non-finite outputs for finite exact values"
    ob = r.of_bound
    if ob is not None and ob > 1:
        return f"beyond the sound bound ({times_bound(ob)}x)"
    return ""


def _severity(r):
    ob = r.of_bound
    return (bool(r.error), int(sum((r.nonfinite or {}).values())) > 0,
            ob if ob is not None else -1.0,
            r.max_ulp if not math.isnan(r.max_ulp) else math.inf)


def findings(records) -> list[Finding]:
    """A Finding per (kernel, family) of the grid (records without a parameter)."""
    from normcheck.check.judge import CHECK_FAMILIES

    groups = {}
    for r in records:
        if r.param or (r.family not in CHECK_FAMILIES and r.family != CHECK_TASK):
            continue
        groups.setdefault((r.kernel, r.family), []).append(r)
    out = []
    for (k, fam), rs in groups.items():
        worst = max(rs, key=_severity)
        why = _unsafe(worst)
        out.append(Finding(k, kernel_label(worst), worst.norm, worst.storage, fam,
                           not why, why, float(worst.max_ulp), worst.of_bound,
                           int(worst.cols), bool(worst.user),
                           dict(worst.worst or {}), worst.spec,
                           int(sum((worst.nonfinite or {}).values())), bool(worst.error)))
    return out


def by_kernel(fs) -> list[tuple]:
    """(norm, storage, [(label, kernel, [unsafe findings, worst first], user)]) in a stable
    order: norms and formats as the built-ins list them, safe kernels first."""
    from normcheck import kernels

    norm_order = {n: i for i, n in enumerate(kernels.NORMS)}
    fmt_order = {"fp32": 0, "fp16": 1, "bf16": 2}
    table = {}
    for f in fs:
        table.setdefault((f.norm, f.storage), {}).setdefault(
            (f.label, f.kernel, f.user), []).append(f)
    out = []
    for (norm, st) in sorted(table, key=lambda k: (norm_order.get(k[0], 99),
                                                   fmt_order.get(k[1], 9), k)):
        ks = []
        for (label, kern, user), items in table[(norm, st)].items():
            bad = sorted([f for f in items if not f.safe],
                         key=lambda f: (f.of_bound if f.of_bound is not None else -1,
                                        f.max_ulp), reverse=True)
            ks.append((label, kern, bad, user))
        ks.sort(key=lambda t: (not t[3], not t[2], t[0]))  # yours first, then the unsafe
        out.append((norm, st, ks))
    # the norms and formats that hold a kernel of the user's come first
    out.sort(key=lambda blk: not any(k[3] for k in blk[2]))
    return out


def worst_records(records, n=8) -> list[dict]:
    """The n grid records furthest beyond the sound bound -- a non-finite output first -- then
    by max ULP."""
    from normcheck.check.judge import CHECK_FAMILIES

    grid = [r for r in records if not r.param and not r.error
            and r.family in CHECK_FAMILIES]
    grid.sort(key=lambda r: (bound_of(r)[0],
                             r.max_ulp if not math.isnan(r.max_ulp) else math.inf),
              reverse=True)
    return grid[:n]


def bound_of(r) -> tuple[float, str]:
    """A record's place against the sound bound, to sort by and to show: (inf, "non-finite
    (n)") where an output is non-finite for a finite exact value, else (× bound, its text)."""
    nf = int(sum((r.nonfinite or {}).values()))
    if nf:
        return math.inf, f"non-finite ({nf})"
    ob = r.of_bound
    return (ob, times_bound(ob)) if ob is not None else (-1.0, "-")


def findings_markdown(records, audit, out_dir=None) -> str:
    """The findings as markdown: the per-norm/format table, the audit's verdicts, the worst
    rows (what a job summary shows, and the report opens with)."""
    fs = findings(records)
    lines = ["| norm | format | kernel | safe on every family | breaks on (worst) | × bound | "
             "max ulp | replay |", "|---|---|---|---|---|---:|---:|---|"]
    rows = []  # (yours, unsafe, line): every kernel of yours first, its unsafe ones first of
    # all -- not first only within its norm and format (#64: one unsafe kernel of yours sat a
    # third of the way down)
    for norm, st, ks in by_kernel(fs):
        for label, kern, bad, user in ks:
            label = md_cell(label)
            if not bad:
                rows.append((user, False, f"| {norm} | {st} | {label} | yes | | | | |"))
                continue
            f = bad[0]
            fams = md_cell(", ".join(b.family for b in bad))
            rp = f.replay.replace("{dir}", str(out_dir)) if out_dir else f.replay
            rows.append((user, True,
                         f"| {md_cell(norm)} | {md_cell(st)} | {label} | no: {fams} | "
                         f"{md_cell(f.family)} ({md_cell(f.why)}) | {md_cell(f.bound_text)} | "
                         f"{short(f.max_ulp)} | "
                         f"{escape.code_span(rp).replace('|', chr(92) + '|') if rp else ''} |"))
    lines += [ln for _u, _b, ln in sorted(rows, key=lambda r: (not r[0], not (r[0] and r[1])))]
    if audit:
        lines.append("\n**The seed articles, measured:**\n")
        lines += [f"- **{a['verdict'].upper()}**: {md_cell(a['claim'])}" for a in audit]
    return "\n".join(lines) + "\n"


def md_cell(text: str) -> str:
    """Text for a markdown table cell: template brackets are not tags, pipes not cells, no
    control characters (normcheck.escape.markdown)."""
    return escape.markdown(text)
