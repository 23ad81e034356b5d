"""A project built with --use_fast_math is judged as its GPU runs it (#56, #57): the cpu backend
flushes subnormals to zero while the blocks run where the build defines __USE_FAST_MATH__ (a
spec's ``fast_math = true``, ``check --fast-math``) or NORMCHECK_FTZ (-ftz=true alone), and the
flush is named as the cause where it moves the output."""

import subprocess
import sys
from pathlib import Path

import pytest

from normcheck import check
from normcheck.errors import SpecError

SRC = Path(__file__).parent / "cuda" / "strangers" / "causes.cu"


def test_a_sound_kernel_built_with_fast_math_flushes_tiny_rows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plain = check.check_kernel(SRC, "rms_sound_fp32", "rmsnorm", "fp32", search=0, examples=16)
    assert plain.verdict == "pass", plain.render()
    for defines in ({"__USE_FAST_MATH__": "1"}, {"NORMCHECK_FTZ": None}):
        fast = check.check_kernel(SRC, "rms_sound_fp32", "rmsnorm", "fp32", search=0,
                                  examples=16, defines=defines)
        # x of 2^-149 .. 2^-126 read as 0: y = 0 where the exact value is ~1e-36 (no β to hide
        # it), on the tiny family only
        assert fast.verdict == "fail" and fast.cause.key == "ftz", fast.render()
        assert {f.family for f in fast.failures} == {"tiny"}, fast.render()


def test_the_spec_and_the_cli_say_fast_math(tmp_path):
    (tmp_path / "causes.cu").write_text(SRC.read_text())
    spec = tmp_path / "k.toml"
    spec.write_text('source = "causes.cu"\nentry = "rms_sound_fp32"\nnorm = "rmsnorm"\n'
                    'dtype = "fp32"\nfast_math = true\n[launch]\ngrid = "rows"\n'
                    'block = "256"\n' + "".join(
                        f'[[args]]\nrole = "{r}"\nname = "{n}"\n' for r, n in (
                            ("output", "y"), ("input", "x"), ("gamma", "g"), ("eps", "eps"),
                            ("rows", "rows"), ("cols", "cols"))))
    r = check.check_kernel(spec=spec, search=0, examples=8)
    assert r.verdict == "fail" and r.cause.key == "ftz", r.render()
    out = subprocess.run([sys.executable, "-m", "normcheck", "check", str(SRC), "--entry",
                          "rms_sound_fp32", "--norm", "rmsnorm", "--dtype", "fp32", "--search",
                          "0", "--examples", "8", "--fast-math"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=600)
    assert out.returncode == 1 and "flushed to zero" in out.stdout, out.stdout + out.stderr
    spec.write_text(spec.read_text().replace("fast_math = true", 'fast_math = "yes"'))
    with pytest.raises(SpecError, match="fast_math"):
        check.check_kernel(spec=spec, search=0, examples=8)
