"""What CI systems read: JUnit XML (GitLab's and Jenkins' test reports, GitHub actions that
publish them) and a markdown job summary (GitHub's ``$GITHUB_STEP_SUMMARY``), for a check and for
a report.

A check is one test suite: a test case per family (and one for the targeted search); a failing
family's failure message is its first failure, the text the worst row, its cause and the command
that replays it.  A warn passes and says so in the case's output.  A report is one suite per
norm: a test case per built-in (or user) kernel and family, failing where a record is beyond the
sound bound or writes non-finite values for finite exact results (the report's findings).

JUnit XML is written by junitparser (a kept library made for it)."""

from __future__ import annotations

from pathlib import Path

from normcheck import escape

__all__ = ["check_junit", "check_summary", "report_junit", "report_summary", "write",
           "error_result", "error_junit", "error_summary", "github_check", "github_report"]


def write(path, text: str) -> Path:
    """Write a CI file (JUnit or summary), appending to a job summary that exists (GitHub's
    ``$GITHUB_STEP_SUMMARY`` is one file for every step)."""
    p = Path(path)
    if p.is_dir():
        from normcheck.errors import invalid

        raise invalid("path", str(p), "a file to write", "name a file, e.g. junit.xml")
    p.parent.mkdir(parents=True, exist_ok=True)
    mode = "a" if p.suffix == ".md" and p.exists() else "w"
    with open(p, mode, encoding="utf-8") as f:
        f.write(text)
    return p


def _xml(suites) -> str:
    from junitparser import JUnitXml

    xml = JUnitXml("normcheck")
    for s in suites:
        xml.add_testsuite(s)
    xml.update_statistics()
    text = xml.tostring().decode() if isinstance(xml.tostring(), bytes) else xml.tostring()
    # junitparser escapes < & in text and attributes; what XML cannot hold at all (a kernel's
    # control characters) is dropped, or the file would not parse and CI would show no failure
    return escape.xml_chars(text)


def _failure_text(f, result: dict) -> str:
    lines = [f"{f['kind']}: {f['detail']}"]
    if f.get("cause"):
        lines.append(f"cause: {f['cause']}")
    if result.get("replay"):
        lines.append(f"replay: {result['replay']}")
    return "\n".join(lines)


def check_junit(result: dict) -> str:
    """JUnit XML of a check result (its ``as_dict()``)."""
    from junitparser import Failure, TestCase, TestSuite

    kern = str(result.get("kernel"))
    suite = TestSuite(f"normcheck check {kern}")
    fails = result.get("failures", [])
    warns = result.get("warnings", [])
    for fam in result.get("families", []):
        name = fam["family"]
        tc = TestCase(name, classname=f"normcheck.{kern}", time=float(fam.get("seconds") or 0))
        mine = [f for f in fails if f.get("family") == name]
        if fam.get("verdict") == "fail" or mine:
            f = mine[0] if mine else {"kind": "accuracy", "detail": "failed", "cause": None}
            fl = Failure(f"{name}: {f['kind']}", f["kind"])
            fl.text = _failure_text(f, result)
            tc.result = [fl]
        out = (f"{fam.get('rows')} rows, widths {fam.get('cols')}: max "
               f"{_n(fam.get('max_ulp'))} ulp, {_n(fam.get('max_of_bound'))}x the sound bound")
        w = [x for x in warns if x.get("family") == name]
        if w:
            out += f"\nwarn: {w[0]['detail']}"
        tc.system_out = out
        suite.add_testcase(tc)
    s = result.get("search")
    if s:
        tc = TestCase("search", classname=f"normcheck.{kern}")
        known = {fam["family"] for fam in result.get("families", [])}
        if s.get("failed"):
            f = next((x for x in reversed(fails) if x.get("family") not in known),
                     fails[-1] if fails else {"kind": "accuracy", "detail": "the search "
                                              "found a failing row", "cause": None})
            fl = Failure(f"search: {f['kind']}", f["kind"])
            fl.text = _failure_text(f, result)
            tc.result = [fl]
        tc.system_out = f"{s.get('examples')} examples, {_n(s.get('max_of_bound'))}x the bound"
        suite.add_testcase(tc)
    other = [f for f in fails if f.get("family") not in
             {fam["family"] for fam in result.get("families", [])} and not s]
    for f in other:  # a launch that failed before any family ran
        tc = TestCase(str(f.get("family")), classname=f"normcheck.{kern}")
        fl = Failure(f"{f['kind']}", f["kind"])
        fl.text = _failure_text(f, result)
        tc.result = [fl]
        suite.add_testcase(tc)
    suite.time = float(result.get("seconds") or 0)  # the whole check's, not 0 (#64)
    return _xml([suite])


def check_summary(result: dict) -> str:
    """Markdown job summary of a check result."""
    md = escape.markdown  # every field may carry a kernel's or a spec's text
    v = str(result.get("verdict", "?"))
    mark = {"pass": "✅", "warn": "⚠️", "fail": "❌"}.get(v, "")
    lines = [f"### {mark} normcheck check {md(result.get('kernel'))}: {md(v.upper())}\n",
             f"{md(result.get('norm'))} · {md(result.get('dtype'))} → "
             f"{md(result.get('out_dtype'))} · reference {md(result.get('reference'))} · "
             f"{md(result.get('rows_checked'))} rows · max {_n(result.get('max_ulp'))} ulp\n"]
    if result.get("cause"):
        lines.append(f"**Cause:** {md(result['cause'])}\n")
    lines.append("| family | verdict | rows | max ulp | p99 ulp | × sound bound |")
    lines.append("|---|---|---:|---:|---:|---:|")
    for f in result.get("families", []):
        lines.append(f"| {md(f['family'])} | {md(f.get('verdict'))} | {md(f.get('rows'))} | "
                     f"{_n(f.get('max_ulp'))} | {_n(f.get('p99_ulp'))} | "
                     f"{_n(f.get('max_of_bound'))} |")
    for f in result.get("failures", [])[:5]:
        lines.append(f"\n- **{md(f['kind'])}** ({md(f['family'])}): "
                     f"{md(str(f['detail']).replace(chr(10), ' '))}")
    if result.get("replay"):
        lines.append(f"\nReplay: {escape.code_span(result['replay'])}")
    return "\n".join(lines) + "\n"


def error_result(what: str, message: str, kind: str) -> dict:
    """The result of a check that could not judge (exit 2), in the layout of a verdict's JSON:
    ``verdict`` "error", ``error`` the message, ``error_kind`` the error's class (a
    CompileError, an InvalidArgument, an internal error ...)."""
    return {"verdict": "error", "kernel": what, "error": message, "error_kind": kind,
            "failures": [], "warnings": [], "families": []}


def error_junit(result: dict) -> str:
    """JUnit XML of a check that could not judge: one errored test case with the message (a
    CI reader shows an error, never an empty report)."""
    from junitparser import Error, TestCase, TestSuite

    kern = str(result.get("kernel"))
    suite = TestSuite(f"normcheck check {kern}")
    tc = TestCase("check", classname=f"normcheck.{kern}")
    e = Error(f"normcheck could not judge: {result.get('error_kind')}",
              str(result.get("error_kind")))
    e.text = str(result.get("error"))
    tc.result = [e]
    suite.add_testcase(tc)
    return _xml([suite])


def error_summary(result: dict) -> str:
    """Markdown job summary of a check that could not judge."""
    return (f"### ⛔ normcheck check {escape.markdown(result.get('kernel'))}: could not judge "
            f"({escape.markdown(result.get('error_kind'))})\n\n"
            f"{escape.code_block(result.get('error'))}\n")


def _gh_escape(text: str, prop: bool = False) -> str:
    """A workflow command's data (``%``, CR, LF escaped; in a property also ``:`` and ``,``;
    other controls replaced)."""
    t = escape.CONTROLS.sub(lambda m: m.group() if m.group() == "\r" else "?", str(text))
    t = t.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        t = t.replace(":", "%3A").replace(",", "%2C")
    return t


def _line_of(detail: str, source: str | None, entry: str | None) -> tuple[str | None, int]:
    """(file, line) a failure points at: the fault's own "at file.cu:47", else the kernel's
    definition in its source, else line 1."""
    import re

    m = re.search(r" at ([^\s:`]+):(\d+)\b", detail or "")
    if m and source and Path(source).name == Path(m.group(1)).name:
        return source, int(m.group(2))
    if m and source:  # a header beside the kernel's file: the finding's own line there
        beside = Path(source).parent / Path(m.group(1)).name
        if beside.is_file():
            return str(beside), int(m.group(2))
    if source and entry and Path(source).is_file():
        from normcheck.backends.base import entry_name

        base = entry_name(entry)
        try:
            for i, ln in enumerate(Path(source).read_text(errors="replace").splitlines(), 1):
                if re.search(rf"\b{re.escape(base)}\s*\(", ln) and ("__global__" in ln or i > 1):
                    return source, i
        except OSError:
            pass
    return source, 1


def github_check(result: dict, source: str | None = None) -> str:
    """GitHub Actions annotations of a check: an ::error per failure (at the fault's line, or
    the kernel's), a ::warning per warning, an ::error for a check that could not judge."""
    import os

    src = result.get("source") or source
    rel = os.path.relpath(src) if src and Path(src).is_file() else src
    entry = str(result.get("kernel") or "")
    out = []
    if result.get("verdict") == "error":
        f, line = _line_of("", src, entry)
        loc = f"file={_gh_escape(rel, True)},line={line}," if f else ""
        return (f"::error {loc}title=normcheck could not judge::"
                f"{_gh_escape(result.get('error', ''))}\n")
    for kind, items in (("error", result.get("failures", [])),
                        ("warning", result.get("warnings", []))):
        for it in items:
            f, line = _line_of(it.get("detail", ""), src, entry)
            here = os.path.relpath(f) if f and Path(f).is_file() else rel
            loc = f"file={_gh_escape(here, True)},line={line}," if f else ""
            msg = f"{it['family']}: {it['detail']}" + (f" -- cause: {it['cause']}"
                                                       if it.get("cause") else "")
            title = f"normcheck {entry}: {it['kind']}"
            out.append(f"::{kind} {loc}title={_gh_escape(title, True)}::{_gh_escape(msg)}")
    return "\n".join(out) + ("\n" if out else "")


def github_report(findings, out_dir=None) -> str:
    """GitHub Actions annotations of a report: an ::error per unsafe kernel of the user's, at
    its spec file."""
    import os

    out = []
    seen = set()
    for f in findings:
        if not f.user or f.safe or f.kernel in seen:
            continue
        seen.add(f.kernel)
        spec = f.spec
        loc = f"file={_gh_escape(os.path.relpath(spec), True)},line=1," if spec else ""
        out.append(f"::error {loc}title={_gh_escape('normcheck report: ' + f.kernel, True)}::"
                   f"{_gh_escape(f.text().replace('{dir}', str(out_dir or '.')))}")
    return "\n".join(out) + ("\n" if out else "")


def _n(v) -> str:
    from normcheck.metrics import short

    try:
        return short(float(v))
    except (TypeError, ValueError):
        return "-"


def report_junit(findings) -> str:
    """JUnit XML of a report's findings (normcheck.report.findings.Finding records): one suite
    per norm, a case per kernel and family."""
    from junitparser import Failure, TestCase, TestSuite

    suites = {}
    for f in findings:
        s = suites.setdefault(f.norm, TestSuite(f"normcheck report {f.norm}"))
        tc = TestCase(f"{f.family}", classname=f"normcheck.{f.kernel}")
        if not f.safe:
            fl = Failure(f"{f.family}: {f.why}", "unsafe")
            fl.text = f.text()
            tc.result = [fl]
        s.add_testcase(tc)
    return _xml(list(suites.values()))


def report_summary(summary_md: str) -> str:
    """The report's findings section, as the job summary."""
    return summary_md
