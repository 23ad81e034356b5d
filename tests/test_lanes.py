"""The test lanes (#67): conftest.py marks tests/slow.txt's tests slow and refuses a list that
would leave a module out of the fast lane; scripts/lanes.py writes the list from timings."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _project(pytester, slow):
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_a.py").write_text(
        "def test_quick():\n    pass\n\ndef test_long():\n    pass\n")
    (pytester.path / "tests" / "slow.txt").write_text("# the slow lane\n" + "".join(
        f"tests/test_a.py::{t}\n" for t in slow))


def test_the_fast_lane_runs_all_but_the_listed(pytester):
    _project(pytester, ["test_long"])
    r = pytester.runpytest("-m", "not slow", "tests")
    r.assert_outcomes(passed=1, deselected=1)


def test_a_list_that_drops_a_module_from_the_fast_lane_is_refused(pytester):
    _project(pytester, ["test_quick", "test_long"])
    r = pytester.runpytest("-m", "not slow", "tests")
    assert r.ret == 4  # pytest's usage error
    assert "every test of tests/test_a.py is in the slow lane" in "\n".join(r.errlines)


def test_lanes_keeps_each_modules_quickest_test_fast(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("============ slowest durations ============\n"
                   "9.00s call     tests/test_x.py::test_a\n"
                   "0.50s setup    tests/test_x.py::test_a\n"
                   "5.00s call     tests/test_x.py::test_b\n"
                   "3.00s call     tests/test_y.py::test_c\n"
                   "1.00s call     tests/test_y.py::test_d\n")
    out = tmp_path / "slow.txt"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "lanes.py"), str(log), "--out",
                        str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    listed = [ln for ln in out.read_text().splitlines() if not ln.startswith("#")]
    # test_x's quickest (test_b, 5 s) stays fast though over 2 s; test_d is under 2 s
    assert listed == ["tests/test_x.py::test_a", "tests/test_y.py::test_c"]
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "lanes.py"), str(out)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no test timings" in bad.stderr
