"""The report's section "The field": the public norm kernels of :mod:`normcheck.field`, each
as its project ships it, judged -- one line a kernel (project, version, verdict beside the one
recorded, the worst family's ulp, × bound and bias, the cause), then each kernel's families.

Its input is what :func:`normcheck.field.judge.judge_field` returns, as dicts
(:meth:`Outcome.as_dict`), so a report folder's ``field.json`` renders again without rerunning.
"""

from __future__ import annotations

from normcheck.causes import FAULTS
from normcheck.metrics import times_bound

__all__ = ["markdown", "table", "findings_list", "by_cause", "trigger", "summary_line", "TITLE"]

TITLE = "The field"


def _cell(text) -> str:
    from normcheck.report.findings import md_cell

    return md_cell(str(text))


def _figure(f, i) -> str:
    """A family's raw figure (max ulp, bias), or "-" where a fault or a non-finite output makes
    it no measurement."""
    return "-" if _spoilt(f) else _num(f[i])


def _num(v) -> str:
    if v is None:
        return "-"
    v = float(v)
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf"
    return f"{v:.3g}"


_RANK = {"fail": 2, "warn": 1}


#: The kinds of failure that make a family's accuracy figures no evidence (a fault: what the
#: kernel computed after it is not a measurement of its arithmetic), and a callable that raised.
_FAULTS = (*FAULTS, "error")


def _spoilt(f) -> str | None:
    """What makes a family's figures no measurement -- the fault that failed it ("out of
    bounds"), "non-finite" -- or None."""
    kinds = f[5] if len(f) > 5 else []
    fault = next((k for k in kinds if k in _FAULTS), None)
    if fault:
        return fault.replace("_", " ")
    return "non-finite" if "nonfinite" in kinds or "unwritten" in kinds else None


def _bound_cell(f) -> str:
    """A family's × bound as the table shows it: the fault or the non-finite output that
    failed it, else the ratio -- never a finite ratio beside a fault or a non-finite output."""
    return _spoilt(f) or times_bound(f[2])


def _worst(o: dict):
    """The worst family: a failed one first (a fault or a non-finite output fails a family
    whatever its × bound), then a warned one, then by × bound and ulp: (family, ulp, × bound,
    bias, verdict)."""
    fams = [f for f in o.get("families") or [] if f]
    if not fams:
        return None
    return max(fams, key=lambda f: (_RANK.get(f[4] if len(f) > 4 else "", 0),
                                    _spoilt(f) is not None,
                                    float(f[2] or 0.0), float(f[1] or 0.0)))


def _verdict(o: dict) -> str:
    if o.get("skipped"):
        return "skipped"
    if not o.get("ran"):
        return "**not run**"
    v = o["verdict"].upper()
    return v if o.get("matches") else f"**{v}** (recorded {o['expect'].upper()})"


def summary_line(outs: list) -> str:
    ran = [o for o in outs if o.get("ran")]
    same = sum(1 for o in ran if o.get("matches"))
    skipped = sum(1 for o in outs if o.get("skipped"))
    counts = {v: sum(1 for o in ran if o["verdict"] == v) for v in ("pass", "warn", "fail")}
    projects = len({o["project"] for o in outs})
    kernels = len({o["name"].split("[")[0] for o in outs})  # a row name[fp16]: another format
    rows = f" ({len(outs)} rows with their other formats)" if kernels != len(outs) else ""
    return (f"{kernels} kernels{rows} of {projects} projects: {len(ran)} ran "
            f"({counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail), "
            f"{same} as recorded, {len(ran) - same} differ"
            + (f", {skipped} skipped ({_why_skipped(outs)})" if skipped else "")
            + (f", {len(outs) - len(ran) - skipped} could not run"
               if len(outs) - len(ran) - skipped else ""))


def _why_skipped(outs: list) -> str:
    """Why kernels were skipped, each reason once with how many: the install that runs them."""
    import collections

    why = collections.Counter(o["skipped"] for o in outs if o.get("skipped"))
    return "; ".join(f"{n}: {w}" for w, n in why.items())


def _order(o: dict) -> tuple:
    """The table's order: what differs from the record, then what could not run, then fails,
    warns, passes, and the skipped last; the corpus' order within each."""
    if o.get("skipped"):
        return (5,)
    if not o.get("ran"):
        return (1,)
    if not o.get("matches"):
        return (0,)
    return ({"fail": 2, "warn": 3}.get(o.get("verdict"), 4),)


def _widths(o: dict) -> str:
    w = o.get("widths") or []
    if len(w) > 6:
        return f"{w[0]}..{w[-1]} ({len(w)} widths)"
    return ",".join(str(x) for x in w) or "-"


def table(outs: list) -> str:
    """The one-line-a-kernel table (markdown), failures first: what ``normcheck field`` prints
    and the section opens with."""
    lines = ["| kernel | project | version | language | norm, formats | widths | verdict | "
             "worst family | × bound | max ulp | bias | headline cause | findings | not run |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for o in sorted(outs, key=_order):
        w = _worst(o)
        cause = o.get("cause") or o.get("error") or o.get("skipped") or ""
        n = len(o.get("findings") or [])
        lines.append(
            f"| {_cell(o['name'])} | {_cell(o['project'])} | {_cell(o['version'])} | "
            f"{o['language']} | {_cell(', '.join(x for x in (o.get('norm'), o.get('formats')) if x))} | "
            f"{_cell(_widths(o))} | {_verdict(o)} | {_cell(w[0]) if w else '-'} | "
            f"{_bound_cell(w) if w else '-'} | {_figure(w, 1) if w else '-'} | "
            f"{_figure(w, 3) if w else '-'} | {_cell(cause)} | {n or '-'} | "
            f"{_cell(_not_run(o))} |")
    return "\n".join(lines)


#: The runs of a check a field row may leave out because they do not apply to it, not said in
#: the table's column (its coverage in field.json says why all the same).
_ASIDE = ("long run", "search")


def _not_run(o: dict) -> str:
    """The runs a row's check owed and did not make (its coverage; #66), or "-"."""
    no = [d["run"] for d in o.get("coverage") or [] if not d.get("ran") and
          d.get("run") not in _ASIDE]
    return ", ".join(no) or "-"


def findings_list(outs: list) -> list:
    """Each failing kernel's findings in full, the headline's first (markdown lines)."""
    lines = []
    for o in sorted(outs, key=_order):
        fs = o.get("findings") or []
        if not fs and not o.get("error"):
            continue
        lines.append(f"- **{_cell(o['name'])}** ({_cell(o.get('file') or '?')}):")
        if o.get("error"):
            lines.append(f"  - not run: {_cell(o['error'])}")
        for i, f in enumerate(fs):
            head = "headline; " if i == 0 and f.get("cause_key") == o.get("cause") else ""
            lines.append(f"  - {head}{_cell(f['kind'])} on {_cell(', '.join(f['families']))}"
                         f"{' (' + _cell(f['cause_key']) + ')' if f.get('cause_key') else ''}: "
                         f"{_cell(f['text'])}")
    return lines


#: How much a finding matters to a person weighing it, most first: wrong where models run,
#: then on inputs or shapes they rarely meet (#68).
SEVERITIES = ("wrong at shapes models use", "on a non-finite input", "at a width no model has",
              "past 2^31 elements", "past 2^32 elements")


def trigger(f: dict) -> tuple:
    """(the smallest shape or input that hits a finding, its severity -- one of SEVERITIES),
    read from where it was found: its families and its text."""
    import re

    fams, text = set(f.get("families") or []), f.get("text") or ""
    if fams and fams <= {"large_index"}:
        return "2^31 elements: 524,288 rows of 4096", SEVERITIES[3]
    if fams and fams <= {"large_index_u32"}:
        return "2^32 elements: 1,048,576 rows of 4096", SEVERITIES[4]
    if "padded to a pitch" in text:
        return ("a row pitch past cols (a slice of a wider tensor, a padded batch)",
                SEVERITIES[0])
    if f.get("kind") == "race":
        return "any launch (the result depends on the warps' timing)", SEVERITIES[0]
    if fams and fams <= {"row_loop"}:
        return "more rows than the grid's blocks (the grid capped)", SEVERITIES[0]
    if fams and fams <= {"special"}:
        return "an inf or NaN in a row", SEVERITIES[1]
    widths = sorted({int(w) for w in re.findall(r"\bwidth (\d+)", text)})
    if widths and all(w % 32 for w in widths):
        return f"width {widths[0]}", SEVERITIES[2]
    if fams and fams <= {"tails"}:
        return "a width off the block's multiple (1, 2, 3, 31, 33, 255, 257, 4097)", SEVERITIES[2]
    named = sorted(fams)
    named = ", ".join(named[:3]) + (" ..." if len(named) > 3 else "")
    return named + " rows" + (f" at width {widths[0]}" if widths else ""), SEVERITIES[0]


def _cite(text: str) -> str:
    """The finding's source line, ``file:line`` (the file's name only), or ""."""
    import re

    m = re.search(r"\bat ([\w./+-]+\.(?:cuh?|h|hpp|cpp|py)):(\d+)", text or "")
    return f"{m.group(1).rsplit('/', 1)[-1]}:{m.group(2)}" if m else ""


def by_cause(outs: list) -> list:
    """The findings grouped by cause (markdown lines): a row a cause -- its severity, its
    trigger, the kernels (not their format rows) that have it, each at its source line -- the
    most severe first, then the most kernels."""
    groups = {}
    for o in outs:
        base = o["name"].split("[")[0]
        for f in o.get("findings") or []:
            key = f.get("cause_key") or f"kind:{f['kind']}"
            g = groups.setdefault(key, {"kernels": {}, "trigger": None, "title": None})
            trig, sev = trigger(f)
            rank = SEVERITIES.index(sev)
            if g["trigger"] is None or rank < g["trigger"][2]:
                g["trigger"] = (trig, sev, rank)
            g["title"] = g["title"] or (f.get("cause_key") or f"{f['kind']} (no cause named)")
            cite = _cite(f.get("text", ""))
            g["kernels"].setdefault(base, cite)
    if not groups:
        return []
    lines = ["| cause | severity | trigger | kernels (source line) |", "|---|---|---|---|"]
    for key, g in sorted(groups.items(), key=lambda kv: (kv[1]["trigger"][2],
                                                         -len(kv[1]["kernels"]), kv[0])):
        trig, sev, _ = g["trigger"]
        ks = ", ".join(f"{k} ({c})" if c else k for k, c in g["kernels"].items())
        lines.append(f"| {_cell(g['title'])} | {sev} | {_cell(trig)} | {_cell(ks)} |")
    return lines


def markdown(outs: list) -> str:
    """The section's markdown (without its heading)."""
    lines = [
        "Public LayerNorm and RMSNorm kernels as their projects release them on the package "
        "registry (the files pinned by SHA-256 in normcheck/field/corpus.toml, fetched confined, "
        "nothing of the package built or installed, nothing of it run outside the sandbox), "
        "each launched as its own launcher does (normcheck/field/specs/; an `_op` row calls "
        "the project's own Python launcher, its module imported in the sandbox) and checked "
        "on the cpu backend like `normcheck check`: "
        "16 rows a family, seed 0; failures first.  Verdicts beside the ones recorded; the "
        "worst family is the "
        "one furthest beyond (or nearest to) its sound bound; a fault or a non-finite output "
        "stands in place of its figures.  A kernel whose file needs torch (its headers, or its "
        "import as a Triton file loads) is skipped where torch cannot be used, saying so.  "
        "Rerun: `normcheck field`.",
        "",
        summary_line(outs) + ".",
        "",
        table(outs),
    ]
    causes = by_cause(outs)
    if causes:
        lines += ["", "The findings by cause -- a kernel (its format rows together) under each cause "
                  "it has, at the source line the finding names; the trigger is the smallest "
                  "shape or input that hits it, the severity what that means for a model:", ""]
        lines += causes
    lines += ["", "Every finding of each kernel that failed, in full, the headline's first (the "
              "cause's key in brackets; its families before the colon):", ""]
    lines += findings_list(outs)
    judged = [o for o in sorted(outs, key=lambda o: o["name"])
              if o.get("judged") and "[" not in o["name"]]
    if judged:
        lines += ["", "What each spec judges -- the branch of its project's launcher it runs, read "
                  "from the launcher (block size by rows, kernel by width, formats), and what it "
                  "leaves out -- as the spec's header says (a row `name[fp16]` runs its base's "
                  "spec in that format):", ""]
        lines += [f"- **{_cell(o['name'])}**: {_cell(o['judged'])}" for o in judged]
    lines += ["", "Each kernel's families (× bound / max ulp / bias, in ulps of the output "
              "format, for a backward kernel of dx; a family that failed or warned says so; a "
              "fault or a non-finite output stands in place of its figures):", "",
              "| kernel | families |", "|---|---|"]
    for o in sorted(outs, key=_order):
        fams = [f for f in o.get("families") or [] if f]
        if not fams:
            continue
        cells = "; ".join(f"{f[0]} {_bound_cell(f)} / {_figure(f, 1)} / {_figure(f, 3)}"
                          + (f" {f[4].upper()}" if len(f) > 4 and f[4] != "pass" else "")
                          for f in fams)
        lines.append(f"| {_cell(o['name'])} | {_cell(cells)} |")
    lines += ["", "Why each verdict was recorded:", ""]
    for o in outs:
        lines.append(f"- **{_cell(o['name'])}** ({o['expect']}"
                     f"{', ' + o['expect_cause'] if o.get('expect_cause') else ''}): "
                     f"{_cell(o.get('why', ''))}")
    return "\n".join(lines) + "\n"
