"""An access outside an array is named as itself wherever it lands: the last element, the last
row, far past the end, before the start, a read or a write -- always ``out_of_bounds`` with the
argument, the element, the block, the thread and the line of the user's file, never a sandbox
or protocol failure (issue: a write past the end was reported as a forged reply)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from normcheck import check, errors
from normcheck.backends import get_backend
from normcheck.backends.cpu import backend as cpu_backend

DIR = Path(__file__).parent / "cuda" / "faults"
SRC = DIR / "oob.cu"


def marker_line(name: str) -> int:
    """The line of the access a kernel gets wrong (its ``// OOB: name`` comment)."""
    for i, ln in enumerate(SRC.read_text().splitlines(), 1):
        if ln.rstrip().endswith(f"// OOB: {name}"):
            return i
    raise AssertionError(f"no marker for {name}")


@pytest.fixture(scope="module")
def kernels():
    return get_backend("cpu").compile_many(
        SRC, ["last_row_past_end", "far_past_end", "before_start", "read_far_past_end"])


def args(rows, cols):
    rng = np.random.default_rng(0)
    return [np.full(rows * cols, np.nan, np.float32),
            rng.standard_normal(rows * cols).astype(np.float32),
            np.ones(cols, np.float32), np.float32(1e-5), np.int32(rows), np.int32(cols)]


NAMES = ["y", "x", "gamma", "eps", "rows", "cols"]


@pytest.mark.parametrize("entry,access,arg,element,block", [
    # the last row's y[cols]: the first element past the end, from the last block
    ("last_row_past_end", "write", "y", 3 * 100, "2,0,0"),
    # a row stride one row too long: the last row writes a whole row past the end; the first
    # of those writes is the first element past it
    ("far_past_end", "write", "y", 3 * 100, "2,0,0"),
    ("before_start", "write", "y", -1, "0,0,0"),
    # a read half a row past each row, from each block's thread 0: the last block's is past
    ("read_far_past_end", "read", "x", 2 * 100 + 150, "2,0,0"),
])
@pytest.mark.parametrize("guard", ["both", "end", "start"])
def test_each_access_outside_an_array_is_named_with_its_line(kernels, entry, access, arg,
                                                              element, block, guard):
    """In every layout: where the access lands in the canary bytes on the array's other side
    (a write before the start with the end against the margin, say), it is found after the
    launch and the launch runs again against the margin that names it.  (A *read* into the
    canary bytes changes nothing: with the start against the margin, a read past the end goes
    unseen -- which is why a check runs both layouts.)"""
    if guard == "start" and access == "read" and element > 0:
        kernels[entry](3, 32, args(3, 100), names=NAMES, guard=guard, workers=1)  # unseen
        return
    with pytest.raises(errors.OutOfBounds) as e:
        kernels[entry](3, 32, args(3, 100), names=NAMES, guard=guard, workers=1)
    msg = str(e.value)
    assert e.value.kind == "out_of_bounds"
    assert f"{access} of element {element} of argument" in msg and f"`{arg}`" in msg, msg
    assert f"in block ({block})" in msg and "thread (" in msg, msg
    assert msg.endswith(f"at oob.cu:{marker_line(entry)}"), msg
    assert "sandbox" not in msg and "protocol" not in msg


def test_a_canary_report_is_read_as_the_crash_report_words():
    # the worker's report of a canary overwritten after the launch is in the crash report's
    # own vocabulary, kind included (it was not, and the parent called it a forged reply)
    words = ("kind=out_of_bounds access=write arg=0 past_end_bytes=4 size_bytes=84 itemsize=4 "
             "detail=canary")
    info = cpu_backend.parse_report(words)
    assert info["kind"] == "out_of_bounds" and info["past_end_bytes"] == 4
    from normcheck.backends.cpu import worker
    text = Path(worker.__file__).read_text()
    assert text.count('"message": f"kind=out_of_bounds access=write arg={i} "') == 2


def test_the_margin_around_an_array_grows_with_it():
    from normcheck.backends.cpu import worker

    page = os.sysconf("SC_PAGE_SIZE")
    assert worker.guard_bytes(1) == page
    assert worker.guard_bytes(10 * page + 1) == 11 * page
    assert worker.guard_bytes(1 << 40) == worker.GUARD_MAX


def _cli(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "normcheck", *argv], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_the_cli_names_a_grid_without_a_bounds_test(sandbox):
    # the 5-line elementwise kernel over ceil_div(rows*cols, 256) blocks, through the command
    # line, with the sandbox on and off: out of bounds with its line
    r = _cli("check", "--spec", str(DIR / "grid_no_bounds_test.toml"), "--search", "0",
             "--examples", "4", "--json", env={"NORMCHECK_SANDBOX": sandbox})
    assert r.returncode == 1, r.stderr
    d = json.loads(r.stdout)
    kinds = {f["kind"] for f in d["failures"]}
    assert kinds == {"out_of_bounds"}, kinds
    line = marker_line("grid_no_bounds_test")
    for f in d["failures"]:
        assert re.search(r"of element \d+ of argument \d `(input|output|rstd|gamma)`",
                         f["detail"]), f["detail"]
        assert f"at oob.cu:{line}" in f["detail"] and "in block (" in f["detail"]


def test_the_python_api_names_the_last_row_write():
    r = check.check_kernel(SRC, "last_row_past_end", "rmsnorm", "fp32", search=0, examples=4,
                           timeout=20)
    assert r.verdict == "fail"
    assert {f.kind for f in r.failures} == {"out_of_bounds"}, r.render()
    assert all(f"at oob.cu:{marker_line('last_row_past_end')}" in f.detail for f in r.failures)


CRASHES = DIR / "crashes.cu"


@pytest.mark.parametrize("entry,error,text", [
    ("failed_assert", errors.KernelCrash, "aborted"),
    ("divides_by_zero", errors.KernelCrash, "arithmetic exception"),
    ("traps", errors.KernelCrash, "trapped"),
])
def test_a_crash_names_the_line_also_inside_a_library_call(entry, error, text):
    k = get_backend("cpu").compile_many(CRASHES, [entry])[entry]
    with pytest.raises(error) as e:
        k(1, 32, [np.zeros(32, np.float32), np.ones(32, np.float32), np.int32(32)],
          names=["y", "x", "cols"])
    line = next(i for i, ln in enumerate(CRASHES.read_text().splitlines(), 1)
                if ln.rstrip().endswith(f"// FAULT: {entry}"))
    assert text in str(e.value) and str(e.value).endswith(f"at crashes.cu:{line}"), str(e.value)
