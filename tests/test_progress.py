"""No wait without a word (normcheck.progress): a step that lasts says what it is, with its
parts and an ETA once one is done, and when it ends; a short one says nothing; the innermost
lasting step is the one shown; the command line's --quiet keeps it off."""

import io
import os
import subprocess
import sys
import time

from normcheck import progress


def _run(monkeypatch, body):
    monkeypatch.setattr(progress, "QUIET_FOR", 0.3)
    out = io.StringIO()
    progress.enable(out)
    try:
        body()
        time.sleep(0.05)
    finally:
        progress.disable()
    return out.getvalue()


def test_a_lasting_step_says_what_it_is_then_that_it_ended(monkeypatch):
    def body():
        with progress.step("building k.cu", total=4):
            progress.advance(1)
            time.sleep(0.9)

    text = _run(monkeypatch, body)
    assert "normcheck: building k.cu -- " in text and "1/4" in text and "s left" in text
    assert "normcheck: building k.cu: done in" in text


def test_a_short_step_says_nothing(monkeypatch):
    def body():
        with progress.step("quick"):
            time.sleep(0.05)

    assert _run(monkeypatch, body) == ""


def test_the_innermost_lasting_step_is_shown(monkeypatch):
    def body():
        with progress.step("checking 8 families", total=8):
            for i in range(8):
                with progress.step(f"family {i}"):
                    time.sleep(0.1)  # each a third of QUIET_FOR: the check speaks
                progress.advance(i + 1)

    text = _run(monkeypatch, body)
    assert "checking 8 families" in text and "normcheck: family" not in text


def test_the_eta_is_the_parts_pace_not_a_build_inside_one():
    """A build inside the first family is paid once: the ETA is the families' own pace (#64:
    "~201 s left" for a check done 21 s later)."""
    import re

    with progress.step("checking 4 families", total=4) as st:
        with progress.step("building k.cu", once=True):
            time.sleep(0.5)
        progress.advance(1)
        line = st.line(st.start + 0.6)
    assert re.search(r"~0 s left", line), line  # (0.6 - 0.5 s) a family, 3 to go: 0.3 s


def test_quiet_turns_it_off(tmp_path):
    # a build that takes more than 2 s: g++ on a text never built
    src = tmp_path / "k.cu"
    src.write_text(f"// {time.time_ns()}\n" + 'extern "C" __global__ void k(float* y, const '
                   "float* x, const float* g, float eps, int rows, int cols) {\n"
                   "  for (int j = threadIdx.x; j < cols; j += blockDim.x)\n"
                   "    y[(size_t)blockIdx.x * cols + j] = x[(size_t)blockIdx.x * cols + j];\n}\n")
    cmd = [sys.executable, "-m", "normcheck", "check", str(src), "--entry", "k", "--norm",
           "rmsnorm", "--dtype", "fp32", "--examples", "2", "--search", "0"]
    env = {**os.environ, "NORMCHECK_PROGRESS_AFTER": "0"}  # every step speaks
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    # a g++ build of a new text lasts longer than a beat (0.25 s): it is always written
    assert "normcheck: building k.cu for the cpu backend" in r.stderr, r.stderr
    src.write_text(src.read_text() + "// again\n")
    r = subprocess.run(cmd + ["--quiet"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300, env=env)
    assert "normcheck: building" not in r.stderr and "normcheck: family" not in r.stderr and \
        "normcheck: checking" not in r.stderr, r.stderr
