"""`normcheck check` on kernels written for the purpose: correct ones pass, planted bugs are
caught under the right kind, specs describe real-world shapes."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from normcheck import check, errors
from normcheck.kernels import CUDA_SRC

SRC = Path(__file__).parent / "cuda" / "check" / "kernels.cu"
EXAMPLES = CUDA_SRC / "examples"


def run(entry, norm, dtype, **kw):
    kw.setdefault("timeout", 10)
    return check.check_kernel(SRC, entry, norm, dtype, **kw)


@pytest.mark.parametrize("entry,norm,dtype", [
    ("rms_good_fp16", "rmsnorm", "fp16"), ("rms_good_bf16", "rmsnorm", "bf16"),
    ("rms_good_fp32", "rmsnorm", "fp32"), ("ln_good_fp16", "layernorm", "fp16"),
    ("ln_good_fp32", "layernorm", "fp32")])
def test_correct_kernels_pass(entry, norm, dtype, tmp_path):
    r = run(entry, norm, dtype)
    assert r.passed, r.render()
    assert r.rows_checked >= 64 * len(check.CHECK_FAMILIES)
    assert {f.family for f in r.families} == set(check.CHECK_FAMILIES)


@pytest.mark.parametrize("entry,norm,dtype,kinds,family", [
    # one-pass cancellation: wrong (or a negative variance: NaN) on offset rows
    ("ln_one_pass_fp32", "layernorm", "fp32", {"accuracy", "nonfinite"}, "offset"),
    # x² formed in fp16 overflows from |x| = 256
    ("rms_square_in_fp16", "rmsnorm", "fp16", {"accuracy", "nonfinite"}, "fp16_large"),
    # no ε: zero rows divide by zero, tiny rows are scaled up
    ("rms_no_eps", "rmsnorm", "fp16", {"accuracy", "nonfinite"}, "tiny"),
    # rstd rounded to fp16 before use: > 1 ulp everywhere
    ("rms_rstd_in_fp16", "rmsnorm", "fp16", {"accuracy"}, "gaussian"),
    # a missing __syncthreads: warps read partial sums not yet written
    ("rms_missing_sync", "rmsnorm", "fp16", {"accuracy", "nonfinite"}, "gaussian"),
])
def test_planted_accuracy_bugs_are_caught(entry, norm, dtype, kinds, family):
    r = run(entry, norm, dtype)
    assert not r.passed
    got = {f.kind for f in r.failures}
    assert got and got <= kinds, r.render()
    assert family in {f.family for f in r.failures}, r.render()
    assert r.counterexample and Path(r.counterexample).is_file()


def test_dropped_tail_is_caught_as_unwritten():
    r = run("rms_drops_tail", "rmsnorm", "fp16")
    assert not r.passed
    f = [f for f in r.failures if f.kind == "nonfinite"]
    assert f and "never written" in f[0].detail
    assert "tails" in {x.family for x in f}


@pytest.mark.parametrize("entry,kind,text", [
    ("rms_reads_past_row", "out_of_bounds", "element"),
    ("rms_deadlock", "deadlock", "__syncthreads"),
    ("rms_hang", "timeout", "limit"),
    ("rms_crash", "crash", "null pointer"),
])
def test_crashes_and_hangs_fail_under_their_own_name(entry, kind, text):
    r = run(entry, "rmsnorm", "fp16", timeout=2)
    assert not r.passed
    assert kind in {f.kind for f in r.failures}, r.render()
    assert text in [f for f in r.failures if f.kind == kind][0].detail
    assert r.seconds < 60


def test_specs_for_real_world_shapes():
    # vLLM-like: templated, strided, rounds x·rstd to fp16 before the weight (~1.5 ulp)
    v = check.check_kernel(None, spec=EXAMPLES / "vllm_rms_norm.toml", timeout=20)
    assert {f.kind for f in v.failures} <= {"accuracy"}
    assert v.max_ulp < 2.0 and v.rows_checked > 500
    # Apex-like: writes mean and rstd, judged against the exact statistics; passes
    a = check.check_kernel(None, spec=EXAMPLES / "apex_layernorm.toml", timeout=20)
    assert a.passed, a.render()
    # warp per row, ε fixed inside, mean/rstd written: runs; judged on every family
    w = check.check_kernel(None, spec=EXAMPLES / "warp_per_row.toml", timeout=20)
    assert {f.kind for f in w.failures} <= {"accuracy"}
    assert len(w.families) == len(check.CHECK_FAMILIES)


def test_stats_outputs_are_judged(tmp_path):
    # the warp-per-row kernel with its rstd scaled by 1.001: caught on rstd
    text = (EXAMPLES / "warp_per_row.cu").read_text().replace("rstd[idx] = s;",
                                                              "rstd[idx] = s * 1.001f;")
    (tmp_path / "k.cu").write_text(text)
    spec = (EXAMPLES / "warp_per_row.toml").read_text().replace('"warp_per_row.cu"', '"k.cu"')
    (tmp_path / "k.toml").write_text(spec)
    r = check.check_kernel(None, spec=tmp_path / "k.toml", timeout=20, search=0)
    assert any(f.detail.startswith("rstd off by") for f in r.failures)


def test_json_is_strict_and_complete():
    r = run("rms_no_eps", "rmsnorm", "fp16", search=0)
    text = r.to_json()
    assert "Infinity" not in text and "NaN" not in text
    d = json.loads(text)
    assert d["verdict"] == "fail" and d["rows_checked"] > 0
    for key in ("max_ulp", "failures", "worst", "families"):
        assert key in d
    assert {"kind", "family", "detail"} <= set(d["failures"][0])
    assert d["provenance"]["backend"] == "cpu" and "rsqrtf" in d["provenance"]["cpu_vs_gpu"]
    assert {"family", "cols", "row", "ulp"} <= set(d["worst"])
    fam = d["families"][0]
    assert {"family", "rows", "max_ulp", "p99_ulp", "nonfinite", "verdict"} <= set(fam)
    inf_values = [v for f in d["families"] for v in f.values() if v == "inf"]
    assert all(isinstance(v, str) for v in inf_values)
    assert json.loads(check.to_json({"a": math.inf}))["a"] == "inf"


def test_cli_exit_codes(tmp_path):
    base = [sys.executable, "-m", "normcheck", "check", str(SRC), "--norm", "rmsnorm",
            "--dtype", "fp16", "--search", "5", "--examples", "16"]
    ok = subprocess.run(base + ["--entry", "rms_good_fp16"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "verdict: PASS" in ok.stdout
    bad = subprocess.run(base + ["--entry", "rms_rstd_in_fp16", "--json"], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and json.loads(bad.stdout)["verdict"] == "fail"
    missing = subprocess.run(base + ["--entry", "no_such_kernel"], capture_output=True, text=True)
    assert missing.returncode == 2 and "no_such_kernel" in missing.stderr
    bad_spec = tmp_path / "s.toml"
    bad_spec.write_text('norm = "rmsnorm"\n[[args]]\nrole = "outptu"\n')
    sp = subprocess.run(base + ["--entry", "rms_good_fp16", "--spec", str(bad_spec)],
                        capture_output=True, text=True)
    assert sp.returncode == 2 and "role='outptu'" in sp.stderr
    nofile = subprocess.run([sys.executable, "-m", "normcheck", "check", "nope.cu", "--entry", "k",
                             "--norm", "rmsnorm", "--dtype", "fp16"], capture_output=True,
                            text=True)
    assert nofile.returncode == 2 and "nope.cu" in nofile.stderr


def test_replay_reruns_the_counterexample():
    r = run("rms_rstd_in_fp16", "rmsnorm", "fp16", search=0)
    out = subprocess.run([sys.executable, "-m", "normcheck", "replay", r.counterexample],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "rms_rstd_in_fp16" in out.stdout and "ULP" in out.stdout


def test_check_a_python_callable():
    def rms_numpy(x, gamma, beta, eps):
        x32 = x.astype(np.float32)
        r = 1 / np.sqrt((x32 * x32).mean(axis=1, keepdims=True) + eps)
        return (x32 * r * gamma.astype(np.float32)).astype(x.dtype)

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        r = check.check_callable(rms_numpy, "rmsnorm", "fp16", examples=16, search=10)
    assert r.passed, r.render()

    def rms_no_upcast(x, gamma, beta, eps):
        r = 1 / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)  # squares in fp16
        return (x * r * gamma).astype(x.dtype)

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        bad = check.check_callable(rms_no_upcast, "rmsnorm", "fp16", examples=16, search=0)
    assert not bad.passed


def test_bad_arguments_name_the_problem():
    with pytest.raises(errors.InvalidArgument, match="norm='batchnorm'"):
        check.check_kernel(SRC, "rms_good_fp16", "batchnorm", "fp16")
    with pytest.raises(errors.InvalidArgument, match="dtype"):
        check.check_kernel(SRC, "rms_good_fp16", "rmsnorm", None)
    with pytest.raises(errors.InvalidArgument, match=r"spec\.args.*gamma"):
        from normcheck import spec

        check.check_kernel(SRC, "rms_good_fp16", "rmsnorm", "fp16",
                           spec=spec.parse({"args": [{"role": "output"}, {"role": "input"},
                                                     {"role": "eps"}]}))
