"""The report opens with its findings, takes the user's kernels, compares with an earlier one;
check and report speak JUnit XML and markdown summaries; diff lists regressions."""

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from normcheck import ci_formats, diff
from normcheck.kernels import CUDA_SRC
from normcheck.report import findings, run_report

EX = CUDA_SRC / "examples"
PATTERN = "rmsnorm_rms_fp16*"


@pytest.fixture(scope="module")
def user_report(tmp_path_factory):
    """A quick report of the fp16 RMSNorm built-ins and two kernels of the user's (vLLM's,
    which rounds x̂ to fp16 before ×γ, and FlashInfer's), from their specs."""
    out = tmp_path_factory.mktemp("r") / "report"
    done = run_report("quick", backend="cpu", out=out, kernels=PATTERN, progress=False,
                      specs=[EX / "vllm_rms_norm.toml", EX / "flashinfer_rms_norm.toml"])
    return out, done


def test_the_report_opens_with_its_findings(user_report):
    out, done = user_report
    md = (out / "report.md").read_text()
    heads = re.findall(r"^## (.+)$", md, re.M)
    assert heads[0] == "Findings" and heads[-1] == "Provenance"
    assert heads.index("Plots") < heads.index("× bound and max ULP by family")
    assert "**Contents:**" in md.split("## Findings")[0]
    page = (out / "index.html").read_text()
    h2 = re.findall(r'<h2 id="([^"]+)">', page)
    assert h2[0] == "findings" and h2[-1] == "provenance"
    assert "<nav>" in page.split("<h2")[0] and 'class="sortable"' in page
    for a in re.findall(r'href="#([^"]+)"', page):
        assert f'id="{a}"' in page
    # the page is report.md rendered (markdown-it-py), never markdown shown as text (#64:
    # **Terms.**, *family* and backticks showed raw in the hand-built HTML)
    text = re.sub(r"<[^>]+>", "", page.split("<h2")[1].split("</table>")[0])
    assert "**" not in text and "<strong>Terms.</strong>" in page and "<em>family</em>" in page
    # your kernels come first of all the findings' rows, the unsafe among them first
    rows = [ln for ln in md.split("## Findings")[1].splitlines() if ln.startswith("| rmsnorm")
            or ln.startswith("| layernorm")]
    assert "(yours" in rows[0] and "| no:" in rows[0], rows[:3]


def test_user_kernels_sit_beside_the_built_ins(user_report):
    out, done = user_report
    recs = done["results"]["records"]
    users = {r.kernel for r in recs if r.user}
    assert users == {"rms_norm_kernel<__half>", "RMSNormKernel<8, __half>"}
    fams = {r.family for r in recs if r.kernel == "rms_norm_kernel<__half>"}
    assert {"gaussian", "offset", "tails"} <= fams
    fs = {(f.kernel, f.family): f for f in findings.findings(recs)}
    # vLLM's x̂ rounded to fp16 before ×γ is beyond the sound bound (as its check fails);
    # FlashInfer's and the upcast-then-square built-in are safe; accumulating in fp16 is not
    assert not all(f.safe for (k, _), f in fs.items() if k == "rms_norm_kernel<__half>")
    assert all(f.safe for (k, _), f in fs.items() if k == "RMSNormKernel<8, __half>")
    assert all(f.safe for (k, _), f in fs.items() if k == "rmsnorm_rms_fp16_upcast_square")
    assert not all(f.safe for (k, _), f in fs.items()
                   if k == "rmsnorm_rms_fp16_storage_accumulate")
    md = (out / "report.md").read_text()
    assert "(yours: vllm_rms_norm.toml)" in md and "fp16 yours" in md
    bad = next(f for f in fs.values() if f.kernel == "rms_norm_kernel<__half>" and not f.safe)
    assert bad.replay.startswith("normcheck replay") and "<" not in bad.replay
    case = out / bad.worst["file"]
    r = subprocess.run([sys.executable, "-m", "normcheck", "replay", str(case)],
                       capture_output=True, text=True, timeout=300)
    # the worst row of an unsafe kernel replays as the fail it is
    assert r.returncode == 1 and "rms_norm_kernel" in r.stdout and "verdict: FAIL" in r.stdout


def test_quick_report_never_calls_safe_a_kernel_check_fails(tmp_path):
    """A kernel of yours wrong only on its path above 1024 columns: the quick report ran one
    width a family (768) and called it safe, and --strict exited 0 where `normcheck check`
    fails it (#64).  Now it runs at the check's widths, the check itself judges it (the
    record of family 'check'), and --strict exits 1 naming it."""
    spec = Path(__file__).parent / "cuda" / "report" / "wide_path.toml"
    r = subprocess.run([sys.executable, "-m", "normcheck", "report", "--quick", "--backend",
                        "cpu", "--kernels", "rmsnorm_rms_fp16_upcast*", "--spec", str(spec),
                        "--strict", "--out", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "unsafe kernels of yours: rms_wide_path" in r.stdout
    data = json.loads((tmp_path / "r" / "results.json").read_text())
    mine = [rec for rec in data["records"] if rec["kernel"] == "rms_wide_path"]
    assert {4096, 768} <= {rec["cols"] for rec in mine if rec["family"] == "gaussian"}
    chk = next(rec for rec in mine if rec["family"] == findings.CHECK_TASK)
    assert chk["error"] and "normcheck check fails it" in chk["error"]["detail"]
    md = (tmp_path / "r" / "report.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| rmsnorm | fp16 | rms_wide_path"))
    assert "check, " in row.split("|")[4]  # among the families it breaks on


def test_report_junit_and_summary(user_report, tmp_path):
    out, done = user_report
    fs = findings.findings(done["results"]["records"])
    x = ci_formats.report_junit(fs)
    root = ET.fromstring(x)
    cases = list(root.iter("testcase"))
    assert len(cases) == len(fs)
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == sum(not f.safe for f in fs) > 0
    assert any("replay" in (c.find("failure").text or "") for c in failed)
    assert (out / "summary.md").read_text().startswith("## normcheck accuracy report")


def test_compare_lists_regressions_and_strict_exits_1(user_report, tmp_path):
    out, done = user_report
    new = tmp_path / "new"
    new.mkdir()
    data = json.loads((out / "results.json").read_text())
    rec = next(r for r in data["records"] if r["kernel"] == "rmsnorm_rms_fp16_upcast_square"
               and not r["param"])
    rec["max_ulp"] *= 3
    rec["of_bound"] = 2.0           # planted: past the bound now
    better = next(r for r in data["records"] if r["kernel"] ==
                  "rmsnorm_rms_fp16_storage_accumulate" and not r["param"])
    better["of_bound"] = better["of_bound"] / 2
    (new / "results.json").write_text(json.dumps(data))
    d = diff.diff_paths(out, new)
    assert d.count("worse") == 1 and d.count("better") == 1
    assert d.count("same") == len(data["records"]) - 2
    w = next(c for c in d.changes if c.status == "worse")
    assert w.kernel == rec["kernel"] and w.family == rec["family"] and "replay" in w.row
    cli = [sys.executable, "-m", "normcheck", "diff", str(out), str(new)]
    assert subprocess.run(cli, capture_output=True, timeout=120).returncode == 0
    r = subprocess.run(cli + ["--strict"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "WORSE" in r.stdout
    same = diff.diff_paths(out, out)
    assert not same.regressed and same.count("same") == len(data["records"])


def test_report_compare_end_to_end(user_report, tmp_path):
    """report --compare an earlier folder: the same sweep again is the same everywhere, and
    the report says so in its Changes section."""
    out, _ = user_report
    again = tmp_path / "again"
    done = run_report("quick", backend="cpu", out=again, kernels="rmsnorm_rms_fp16_upcast*",
                      progress=False, compare=out)
    d = done["diff"]
    assert d.count("worse") == 0 and d.count("same") > 0 and d.count("removed") > 0
    assert "## Changes" in (again / "report.md").read_text()


def test_diff_of_two_check_results(tmp_path):
    def result(verdict, ulp, ob):
        return {"kernel": "k", "verdict": verdict, "families": [
            {"family": "gaussian", "verdict": verdict, "max_ulp": ulp, "max_of_bound": ob},
            {"family": "offset", "verdict": "pass", "max_ulp": 0.5, "max_of_bound": 0.5}]}

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(result("pass", 0.9, 0.9)))
    b.write_text(json.dumps(result("fail", 3.0, 2.5)))
    d = diff.diff_paths(a, b)
    assert [c.status for c in d.changes] == ["worse", "same"]
    assert "verdict pass -> fail" in d.changes[0].why
    assert not diff.diff_paths(b, a).regressed


def test_diff_refuses_what_it_cannot_compare(tmp_path):
    from normcheck.errors import NormcheckError

    with pytest.raises(NormcheckError, match="path="):
        diff.diff_paths(tmp_path / "nope", tmp_path)
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(NormcheckError, match="results.json or a check --json"):
        diff.load(tmp_path / "x.json")


def test_check_junit_is_valid_and_names_the_worst_row(tmp_path):
    junit, summary = tmp_path / "j.xml", tmp_path / "s.md"
    r = subprocess.run([sys.executable, "-m", "normcheck", "check", "--spec",
                        str(EX / "vllm_rms_norm.toml"), "--examples", "8", "--search", "5",
                        "--junit", str(junit), "--summary", str(summary)],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 1
    from junitparser import JUnitXml

    xml = JUnitXml.fromfile(str(junit))
    cases = [c for s in xml for c in s]
    names = {c.name for c in cases}
    assert {"gaussian", "offset", "search"} <= names
    failed = [c for c in cases if c.result]
    assert failed
    # the time each family took, and the check's (#64: time="0" everywhere)
    assert all(c.time > 0 for c in cases if c.name != "search") and \
        next(iter(xml)).time > 0
    text = failed[0].result[0].text
    assert "row" in text and "cause: x̂ rounded" in text and "replay: normcheck replay" in text
    md = summary.read_text()
    assert md.startswith("### ❌ normcheck check") and "| gaussian | fail |" in md
    # a job summary file is appended to, as GitHub's is by every step
    ci_formats.write(summary, "more\n")
    assert summary.read_text().endswith("more\n") and md in summary.read_text()


def test_the_report_page_self_test_is_wired(user_report):
    """The browser check (.ci/browser_check.py, run by CI in headless Chromium) relies on the
    page's #selftest hook and the error recorder."""
    out, _ = user_report
    page = (out / "index.html").read_text()
    assert "window.ncSelfTest" in page and "location.hash==='#selftest'" in page
    assert page.index("window.ncErrors=[]") < page.index("<body>")
