"""The pytest plugin a user's suite gets, and the small commands."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from normcheck import bench


def test_plugin_gives_fixtures_marker_and_option(pytester):
    pytester.makepyfile(
        """
        import pytest
        from hypothesis import given, settings
        from normcheck.strategies import rows

        def test_backend(normcheck_backend, normcheck_backend_name):
            assert normcheck_backend.name == normcheck_backend_name == "cpu"

        @settings(max_examples=5, deadline=None)
        @given(x=rows("bf16", cols=17, family="outlier"))
        def test_rows(x):
            assert x.shape[1] == 17 and x.dtype.name == "bfloat16"

        @pytest.mark.gpu
        def test_needs_gpu():
            pass
        """)
    result = pytester.runpytest("--normcheck-backend", "cpu", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*gpu test: *normcheck[[]cuda[]]*"])


def test_kernels_command_lists_every_variant():
    out = subprocess.run([sys.executable, "-m", "normcheck", "kernels", "--json"],
                         capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    # one registry of every kind: 68 CUDA forward built-ins and 28 Triton ones (4 algorithms x 7
    # storage/order pairs); backward.cu's 12 dx, 16 dparams and the finalize; quant_norm.cu's 16
    # entries in 2 storages
    assert len(data) == 68 + 28 + 12 + 16 + 1 + 32 and {
        "name", "norm", "algorithm", "storage", "order", "convention", "fast_math", "language",
        "kind", "format", "granularity"} <= set(data[0])
    assert sum(d["language"] == "triton" for d in data) == 28
    assert sum(d["kind"] == "quantised" for d in data) == 32
    out = subprocess.run([sys.executable, "-m", "normcheck", "kernels", "--kind", "dx"],
                         capture_output=True, text=True, check=True).stdout
    assert out.rstrip().endswith("12 variants") and "format" not in out  # its fields only


def test_bad_report_argument_exits_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "normcheck", "report", "--kernels", "nothing*",
                          "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert out.returncode == 2 and "--kernels='nothing*'" in out.stderr


def test_oracle_benchmark_prints_figures():
    lines = []
    rows = bench.oracle_benchmark(cols=(64,), fmts=("fp16",), elements=4096, mp_rows=1,
                                  echo=lines.append)
    assert rows[0]["ratio"] > 1 and "oracle rows/s" in lines[1] and "numpy" in lines[1]
    assert np.isfinite(rows[0]["oracle_rows_per_s"]) and rows[0]["numpy_rows_per_s"] > 0
    assert "threads" in lines[0]


def test_check_benchmark_prints_its_three_figures():
    """bench check: from one run, the oracle alone, the kernel alone and the long check (a
    small one here: a figure, not a timing), whose verdict on a sound numpy RMSNorm is pass."""
    lines = []
    rows = bench.check_benchmark(rows=301, cols=256, fmts=("bf16",), targets=("numpy",),
                                 echo=lines.append)
    (r,) = rows
    assert r["verdict"] == "pass" and r["rows"] == 301 and r["format"] == "bf16"
    for k in ("oracle_rows_per_s", "kernel_rows_per_s", "check_rows_per_s"):
        assert np.isfinite(r[k]) and r[k] > 0, k
    assert "check/oracle" in lines[1] and "numpy_rmsnorm (bf16)" in lines[2]
    assert 0 <= r["own_share"] < 1 and "own share" in lines[1]
    assert lines[-1] == f"check/oracle: {r['check_over_oracle']:.2f}"  # the last line


def test_ctrl_c_after_the_families_keeps_what_was_measured(tmp_path, monkeypatch, capsys):
    """Ctrl-C during the search: the families' table is printed, the counterexample of a
    failure saved, and the exit is 130 with the run named -- never a pass (#64: nothing was
    printed or saved)."""
    from normcheck.check.judge import ForwardJudge
    from normcheck.cli import main

    def interrupted(self, fams, examples):
        raise KeyboardInterrupt

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ForwardJudge, "search", interrupted)
    src = Path(__file__).parent / "cuda" / "check" / "kernels.cu"
    rc = main(["check", str(src), "--entry", "rms_good_fp16", "--norm", "rmsnorm", "--dtype",
               "fp16", "--examples", "8"])
    cap = capsys.readouterr()
    assert rc == 130, cap.err
    assert "gaussian" in cap.out and "verdict: INTERRUPTED during the search" in cap.out
    assert "interrupted during the search" in cap.err
    rc = main(["check", str(src), "--entry", "rms_rstd_in_fp16", "--norm", "rmsnorm",
               "--dtype", "fp16", "--examples", "8"])
    cap = capsys.readouterr()
    assert rc == 1 and "verdict: FAIL" in cap.out, cap.out
    assert list((tmp_path / ".normcheck").glob("counterexample-rms_rstd_in_fp16-*.npz"))


def test_a_bad_kernel_path_is_one_line_before_any_compiler(tmp_path, monkeypatch, capsys):
    """A missing file, a folder, an empty file: answered in one line naming the thing and the
    fix, exit 2, nothing built (#64: compiled as CUDA C text, 9 s of g++ errors)."""
    from normcheck.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    (tmp_path / "empty.cu").write_text("\n\n")
    for path, said in (("nosuchfile", "expected an existing kernel file"),
                       ("folder", "expected a kernel file, not a folder"),
                       ("empty.cu", "(it is empty)")):
        rc = main(["check", path, "--entry", "k", "--norm", "rmsnorm", "--dtype", "fp16"])
        err = capsys.readouterr().err
        assert rc == 2 and said in err, err
        assert "g++" not in err and "building" not in err and len(err.strip().splitlines()) == 1
