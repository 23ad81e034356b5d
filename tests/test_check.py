"""`normcheck check` on kernels written for the purpose: sound kernels in any summation order pass
or warn, planted bugs fail under the right kind with their cause named, and the verdicts, exit
codes and JSON say so."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from headline_support import assert_headline_agrees
from normcheck import check, errors
from normcheck.kernels import CUDA_SRC
from paths_support import beside

SRC = Path(__file__).parent / "cuda" / "check" / "kernels.cu"
EXAMPLES = CUDA_SRC / "examples"


def run(entry, norm, dtype, **kw):
    kw.setdefault("timeout", 20)
    kw.setdefault("search", 15)
    return check.check_kernel(SRC, entry, norm, dtype, **kw)


@pytest.mark.parametrize("entry,norm,dtype", [
    ("rms_good_fp16", "rmsnorm", "fp16"), ("rms_good_bf16", "rmsnorm", "bf16"),
    ("rms_good_fp32", "rmsnorm", "fp32"), ("ln_good_fp16", "layernorm", "fp16"),
    ("ln_good_fp32", "layernorm", "fp32"),
    # the worst summation order for the bound: one thread sums the row, two-pass or Welford
    ("ln_seq_fp32", "layernorm", "fp32"), ("ln_welford_seq_fp32", "layernorm", "fp32"),
    ("ln_seq_bf16", "layernorm", "bf16"), ("ln_welford_seq_bf16", "layernorm", "bf16")])
def test_sound_kernels_in_any_order_pass_or_warn(entry, norm, dtype):
    r = run(entry, norm, dtype)
    assert r.verdict in ("pass", "warn"), r.render()
    assert not r.failures
    assert r.rows_checked >= 60 * len(check.CHECK_FAMILIES)
    # the families, and the large-index runs (launches past 2^31 and 2^32 elements, their
    # last blocks)
    assert {f.family for f in r.families} == {*check.CHECK_FAMILIES, "large_index",
                                              "large_index_u32"}
    # each family ran with an odd number of rows: a partial last tile every time
    assert all(f.rows % 2 == 1 or len(f.cols) > 1 for f in r.families)
    for w in r.warnings:  # a warn says which built-in order and by how much
        assert "best built-in order" in w.detail and "x the" in w.detail


def test_the_hazard_build_runs_the_first_case_of_each_width_and_the_bulk_the_plain(
        monkeypatch):
    """#67: every width the families use runs once on the hazard build with both guards (the
    families' first case there); the other families' cases at that width and the search's
    draws run on the plain build with the end guard."""
    from normcheck import launch

    calls = []
    real = launch.KernelTarget.__call__

    def spy(self, case, guard=None, **kw):
        calls.append((int(case.cols), kw.get("hazards"), guard))
        return real(self, case, guard=guard, **kw)

    monkeypatch.setattr(launch.KernelTarget, "__call__", spy)
    r = run("rms_good_fp16", "rmsnorm", "fp16", examples=8, search=6)
    assert r.verdict in ("pass", "warn"), r.render()
    first = {}
    for cols, hz, guard in calls:
        first.setdefault(cols, (hz, guard))
    widths = {int(c) for f in r.families if f.family in check.CHECK_FAMILIES for c in f.cols}
    # every width the families ran at: its first run on the hazard build with both guards (a
    # width only the search drew runs on the plain build)
    assert widths and all(first[c] == (True, "both") for c in widths), first
    plain = [c for c in calls if c[1] is False and c[2] == "end"]
    assert len(plain) >= len(check.CHECK_FAMILIES)  # the bulk: most families' cases, the search
    assert len([c for c in calls if c[1] is True]) < len(calls) / 2


def test_a_second_check_reads_the_yardsticks_figures_it_kept(monkeypatch):
    """#67: the built-ins' figures on a check's cases are kept: the same check again launches
    no built-in and shows the same best built-in figures."""
    from normcheck import kernels

    first = run("rms_good_fp16", "rmsnorm", "fp16", examples=8, search=0)
    launched = []
    real = kernels.run_case
    monkeypatch.setattr(kernels, "run_case", lambda *a, **k: launched.append(a[0]) or
                        real(*a, **k))
    again = run("rms_good_fp16", "rmsnorm", "fp16", examples=8, search=0)
    assert launched == []
    assert [(f.family, f.baseline) for f in again.families] == \
        [(f.family, f.baseline) for f in first.families]


def test_warn_is_measured_against_the_best_built_in_order():
    # one thread summing fp32 rows: thousands of times the block-tree order on offset and
    # constant rows, still within what a sequential sum can do -- warn, not fail
    r = run("ln_seq_fp32", "layernorm", "fp32")
    assert r.verdict == "warn", r.render()
    fams = {f.family: f for f in r.families}
    for name in ("offset", "constant"):
        f = fams[name]
        assert f.verdict == "warn" and f.baseline is not None
        assert f.max_scaled > f.warn_at >= 4 * f.baseline.max_scaled
        assert f.max_of_bound <= 1.0


@pytest.mark.parametrize("entry,norm,dtype,kinds,family,cause", [
    # one-pass cancellation: a negative variance gives NaN on offset rows
    ("ln_one_pass_fp32", "layernorm", "fp32", {"accuracy", "nonfinite"}, "offset", "one-pass"),
    # clamped at zero, one-pass loses the variance on quantised offset rows: accuracy
    ("ln_one_pass_clamped_bf16", "layernorm", "bf16", {"accuracy", "nonfinite"}, "offset",
     "one-pass"),
    # x² formed in fp16 overflows from |x| = 256
    ("rms_square_in_fp16", "rmsnorm", "fp16", {"accuracy", "nonfinite"}, "fp16_large",
     "squares rounded to the storage format"),
    # no ε: zero rows divide by zero, tiny rows are scaled up
    ("rms_no_eps", "rmsnorm", "fp16", {"accuracy", "nonfinite"}, "tiny", "ε missing"),
    # rstd rounded to fp16 before use: > 1 ulp everywhere
    ("rms_rstd_in_fp16", "rmsnorm", "fp16", {"accuracy"}, "gaussian",
     "rstd rounded to the storage format"),
    # Apex-style half output: x̂ rounded to half, then γ·x̂ and +β in half
    ("ln_half_three_roundings", "layernorm", "fp16", {"accuracy"}, "gaussian",
     "x̂ rounded to the storage format"),
    # a missing __syncthreads: warps read partial sums not yet written -- a race, found by
    # happens-before in the hazard run (racecheck's finding), whatever the schedule
    ("rms_missing_sync", "rmsnorm", "fp16", {"race"}, "gaussian", "race on shared memory"),
])
def test_planted_bugs_fail_with_their_cause(entry, norm, dtype, kinds, family, cause):
    r = run(entry, norm, dtype)
    assert r.verdict == "fail"
    got = {f.kind for f in r.failures}
    assert got and got <= kinds | {"nonfinite"}, r.render()
    assert family in {f.family for f in r.failures}, r.render()
    assert r.counterexample and Path(r.counterexample).is_file()
    if cause:
        assert r.cause and cause in r.cause, r.render()
    assert_headline_agrees(r)


def test_the_one_pass_bf16_kernel_fails_as_accuracy():
    r = run("ln_one_pass_clamped_bf16", "layernorm", "bf16")
    acc = [f for f in r.failures if f.kind == "accuracy"]
    assert acc and "beyond what a sound kernel can produce" in acc[0].detail
    assert "one-pass" in (acc[0].cause or ""), r.render()


def test_dropped_tail_is_caught_as_unwritten():
    r = run("rms_drops_tail", "rmsnorm", "fp16")
    assert r.verdict == "fail"
    f = [f for f in r.failures if f.kind == "unwritten"]
    assert f and "never written" in f[0].detail
    assert "tails" in {x.family for x in f}


@pytest.mark.parametrize("entry,kind,text", [
    ("rms_reads_past_row", "out_of_bounds", "element"),
    ("rms_deadlock", "deadlock", "wait at __syncthreads at kernels.cu:179"),
    ("rms_hang", "timeout", "limit"),
    ("rms_crash", "crash", "null pointer"),
])
def test_crashes_and_hangs_fail_under_their_own_name(entry, kind, text):
    r = run(entry, "rmsnorm", "fp16", timeout=2)
    assert r.verdict == "fail"
    assert kind in {f.kind for f in r.failures}, r.render()
    assert text in [f for f in r.failures if f.kind == kind][0].detail
    assert r.seconds < 60


def test_definitions_vllm_style_rmsnorm_is_hf_not_exact():
    # x·rstd rounded to fp16, then times the weight in fp16: Hugging Face's Llama RMSNorm
    exact = check.check_kernel(None, spec=EXAMPLES / "vllm_rms_norm.toml", timeout=20,
                               search=10)
    assert exact.verdict == "fail" and {f.kind for f in exact.failures} == {"accuracy"}
    assert "x̂ rounded to the storage format" in exact.cause and "--reference hf" in exact.cause
    hf = check.check_kernel(None, spec=EXAMPLES / "vllm_rms_norm.toml", timeout=20, search=10,
                            reference="hf")
    assert hf.verdict == "pass", hf.render()
    assert hf.reference == "hf" and "hf definition" in hf.norm_desc
    with pytest.raises(errors.InvalidArgument, match="reference='hf'"):
        run("ln_good_fp16", "layernorm", "fp16", reference="hf")


def test_specs_for_real_world_shapes():
    # Apex-like: writes mean and rstd, judged against the exact statistics
    a = check.check_kernel(None, spec=EXAMPLES / "apex_layernorm.toml", timeout=20, search=10)
    assert a.verdict == "pass", a.render()
    # warp per row, ε fixed inside, mean/rstd written: 32 lanes summing C/32 elements each is
    # a sound order, far from the block tree's luck on ill-conditioned fp32 rows: warn
    w = check.check_kernel(None, spec=EXAMPLES / "warp_per_row.toml", timeout=20, search=10)
    assert w.verdict in ("pass", "warn") and not w.failures, w.render()
    assert {f.family for f in w.families} >= set(check.CHECK_FAMILIES)


def test_stats_outputs_are_judged(tmp_path):
    # the warp-per-row kernel with its rstd scaled by 1.001: caught on rstd
    text = (EXAMPLES / "warp_per_row.cu").read_text().replace("rstd[idx] = s;",
                                                              "rstd[idx] = s * 1.001f;")
    (tmp_path / "k.cu").write_text(text)
    spec = (EXAMPLES / "warp_per_row.toml").read_text().replace('"warp_per_row.cu"', '"k.cu"')
    (tmp_path / "k.toml").write_text(spec)
    r = check.check_kernel(None, spec=tmp_path / "k.toml", timeout=20, search=0)
    assert any(f.detail.startswith("rstd off by") for f in r.failures), r.render()


def _candle_launched_with(tmp_path, block: str):
    """The candle-style example checked with ``block`` threads (the launch and its block_size
    argument alike) instead of its 32-or-1024."""
    spec = (EXAMPLES / "candle_rmsnorm.toml").read_text().replace(
        '"32 + 992 * min(1, cols // 1024)"', f'"{block}"')
    beside(tmp_path, EXAMPLES / "candle_rmsnorm.cu")  # a spec names files beneath its folder
    (tmp_path / "k.toml").write_text(spec)
    r = check.check_kernel(None, spec=tmp_path / "k.toml", timeout=20, search=0)
    assert r.verdict == "fail", r.render()
    return r


def test_a_shuffle_from_lanes_never_launched_is_named(tmp_path):
    """The candle-style example launched with min(cols, 1024) threads instead of at least 32: on
    narrow rows its full-warp shuffles read lanes the block never launched, undefined on a GPU;
    the rows where that reaches y fail, and the failure says which shuffle read what."""
    r = _candle_launched_with(tmp_path, "min(cols, 1024)")
    noted = [f for f in r.failures if "the launch noted: __shfl_xor_sync in block (0,0,0): "
             "thread 0 read lane 16 of its warp (thread 16), which was never launched" in f.detail]
    assert noted and noted[0].family == "tails", r.render()


def test_shared_memory_read_before_written_fails_and_is_named(tmp_path):
    """The candle-style example launched with 512 threads: its second reduction reads 32
    per-warp slots of which 16 warps wrote half (the bug candle's later code fixes by zeroing
    them).  Static shared memory starts every block as NaN bytes on the cpu backend, so y is NaN,
    and a run with zeros there gives another y: the failure says so."""
    r = _candle_launched_with(tmp_path, "512")
    assert any(f.kind == "nonfinite" and "the launch noted: the output depends on undefined "
               "values: run with shared memory before it is written and shuffles from lanes "
               "not taking part reading zeros instead of NaN bytes" in f.detail
               for f in r.failures), r.render()


def test_a_quantiser_reading_unwritten_shared_memory_is_named(tmp_path):
    """The TensorRT-LLM-style fp8 example with its block reduction reading all 32 per-warp slots
    (not only those of warps that exist): fewer warps leave slots unwritten, NaN bytes on the
    cpu backend, and the quantised check's failure says that y depends on them."""
    text = (EXAMPLES / "trtllm_rmsnorm_quant.cu").read_text()
    bad = text.replace("val = (threadIdx.x < (blockDim.x / 32.f)) ? shared[lane] : (T)(0.0f);",
                       "val = shared[lane];")
    assert bad != text
    (tmp_path / "k.cu").write_text(bad)
    spec = (EXAMPLES / "trtllm_rmsnorm_fp8_static.toml").read_text().replace(
        '"trtllm_rmsnorm_quant.cu"', '"k.cu"')
    (tmp_path / "k.toml").write_text(spec)
    r = check.check_kernel(None, spec=tmp_path / "k.toml", timeout=20, search=0)
    assert r.verdict == "fail", r.render()
    assert any("the launch noted: the output depends on undefined values" in f.detail
               for f in r.failures), r.render()


def test_json_is_strict_and_complete():
    r = run("rms_no_eps", "rmsnorm", "fp16", search=0)
    text = r.to_json()
    assert "Infinity" not in text and "NaN" not in text
    d = json.loads(text)
    assert d["verdict"] == "fail" and d["rows_checked"] > 0
    for key in ("max_ulp", "failures", "warnings", "worst", "families", "tolerance", "cause"):
        assert key in d
    assert {"kind", "family", "detail", "cause"} <= set(d["failures"][0])
    assert d["provenance"]["backend"] == "cpu" and "rsqrtf" in d["provenance"]["cpu_vs_gpu"]
    assert {"family", "cols", "row", "ulp", "scaled_ulp", "of_bound"} <= set(d["worst"])
    fam = d["families"][0]
    assert {"family", "rows", "max_ulp", "p99_ulp", "max_of_bound", "bound_ulp", "baseline",
            "verdict"} <= set(fam)
    assert {f["verdict"] for f in d["families"]} <= {"pass", "warn", "fail"}
    assert json.loads(check.to_json({"a": math.inf}))["a"] == "inf"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "normcheck", "check", *args],
                          capture_output=True, text=True)


def test_cli_exit_codes(tmp_path):
    base = [str(SRC), "--search", "5", "--examples", "16"]
    ok = _cli(*base, "--entry", "rms_good_fp16", "--norm", "rmsnorm", "--dtype", "fp16")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "verdict: PASS" in ok.stdout
    warn = _cli(*base, "--entry", "ln_seq_fp32", "--norm", "layernorm", "--dtype", "fp32",
                "--json")
    assert warn.returncode == 0 and json.loads(warn.stdout)["verdict"] == "warn"
    strict = _cli(*base, "--entry", "ln_seq_fp32", "--norm", "layernorm", "--dtype", "fp32",
                  "--strict")
    assert strict.returncode == 1 and "verdict: WARN" in strict.stdout
    bad = _cli(*base, "--entry", "rms_rstd_in_fp16", "--norm", "rmsnorm", "--dtype", "fp16",
               "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["verdict"] == "fail"
    missing = _cli(*base, "--entry", "no_such_kernel", "--norm", "rmsnorm", "--dtype", "fp16")
    assert missing.returncode == 2 and "no_such_kernel" in missing.stderr
    bad_spec = tmp_path / "s.toml"
    bad_spec.write_text('norm = "rmsnorm"\n[[args]]\nrole = "outptu"\n')
    sp = _cli(*base, "--entry", "rms_good_fp16", "--spec", str(bad_spec), "--dtype", "fp16")
    assert sp.returncode == 2 and "role='outptu'" in sp.stderr
    nofile = _cli("nope.cu", "--entry", "k", "--norm", "rmsnorm", "--dtype", "fp16")
    assert nofile.returncode == 2 and "nope.cu" in nofile.stderr


def test_without_a_built_in_the_sound_bound_still_judges(monkeypatch):
    """The fail rule needs no built-in kernel (#33): without one, warn's yardstick is missing and
    the check says so; a sound kernel passes and a faulty one still fails."""
    from normcheck import kernels

    monkeypatch.setattr(kernels, "variants", lambda **kw: [])
    good = run("rms_good_fp16", "rmsnorm", "fp16", search=0)
    assert good.verdict == "pass" and "judged against the sound bound only" in \
        good.baseline_note, good.render()
    bad = run("rms_rstd_in_fp16", "rmsnorm", "fp16", search=0)
    assert bad.verdict == "fail", bad.render()


def test_replay_reruns_the_counterexample():
    r = run("rms_rstd_in_fp16", "rmsnorm", "fp16", search=0)
    out = subprocess.run([sys.executable, "-m", "normcheck", "replay", r.counterexample],
                         capture_output=True, text=True)
    # the replay judges as the check did: the same fail, exit 1, mismatches beyond the bound
    assert out.returncode == 1 and "rms_rstd_in_fp16" in out.stdout and "ULP" in out.stdout
    assert "verdict: FAIL" in out.stdout and "beyond the sound bound" in out.stdout
    assert "likely cause: rstd rounded to the storage format" in out.stdout


def test_replay_counts_the_elements_beyond_the_bound_and_exits_as_the_check(tmp_path):
    from normcheck import replay

    r = run("rms_rstd_in_fp16", "rmsnorm", "fp16", search=0,
            save_counterexample=tmp_path / "c.npz")
    text = replay.replay(tmp_path / "c.npz")
    n = int(text.split("mismatches ")[1].split("/")[0])
    w = r.worst
    beyond = sum(1 for e in w.first if e["ulp"] > 1.0)  # the saved row's worst five
    assert text.verdict == "fail" and text.exit_code == 1 and n >= beyond >= 1
    # a sound kernel's row replays as a pass
    ok = run("rms_good_fp16", "rmsnorm", "fp16", search=0, save_counterexample=tmp_path / "g.npz")
    assert ok.verdict == "pass"
    good = replay.replay(tmp_path / "g.npz")
    assert good.verdict == "pass" and good.exit_code == 0 and "mismatches 0/" in good


def test_check_a_python_callable():
    def rms_numpy(x, gamma, beta, eps):
        x32 = x.astype(np.float32)
        r = 1 / np.sqrt((x32 * x32).mean(axis=1, keepdims=True) + eps)
        return (x32 * r * gamma.astype(np.float32)).astype(x.dtype)

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        r = check.check_callable(rms_numpy, "rmsnorm", "fp16", examples=16, search=10)
    assert r.verdict in ("pass", "warn"), r.render()

    def rms_no_upcast(x, gamma, beta, eps):
        r = 1 / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)  # squares in fp16
        return (x * r * gamma).astype(x.dtype)

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        bad = check.check_callable(rms_no_upcast, "rmsnorm", "fp16", examples=16, search=0)
    assert bad.verdict == "fail"


def test_an_exception_is_a_failure_never_a_pass():
    calls = []

    def flaky(x, gamma, beta, eps):
        calls.append(x.shape)
        if x.shape[1] % 2:
            raise ValueError("odd widths are not supported")
        x32 = x.astype(np.float32)
        return (x32 / np.sqrt((x32 * x32).mean(axis=1, keepdims=True) + eps) *
                gamma.astype(np.float32)).astype(x.dtype)

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        r = check.check_callable(flaky, "rmsnorm", "fp16", examples=16, search=20)
    assert r.verdict == "fail"
    errs = [f for f in r.failures if f.kind == "error"]
    assert errs and "ValueError: odd widths are not supported" in errs[0].detail
    # the search shrinks the failing input too
    assert any(f.family.startswith("search/") for f in r.failures) or r.search is None or \
        r.search["failed"] or any(f.family == "tails" for f in errs)


def test_bad_arguments_name_the_problem():
    with pytest.raises(errors.InvalidArgument, match="norm='batchnorm'"):
        check.check_kernel(SRC, "rms_good_fp16", "batchnorm", "fp16")
    with pytest.raises(errors.InvalidArgument, match="dtype"):
        check.check_kernel(SRC, "rms_good_fp16", "rmsnorm", None)
    for kw, match in (({"seed": -1}, "seed=-1"), ({"examples": 10**9}, "examples=1000000000"),
                      ({"timeout": float("nan")}, "timeout=nan"), ({"timeout": 0}, "timeout=0"),
                      ({"search": -3}, "search=-3")):
        with pytest.raises(errors.InvalidArgument, match=match):
            check.check_kernel(SRC, "rms_good_fp16", "rmsnorm", "fp16", **kw)
    with pytest.raises(errors.InvalidArgument, match=r"spec\.args.*residual"):
        from normcheck import spec

        check.check_kernel(SRC, "rms_good_fp16", "add_rmsnorm", "fp16",
                           spec=spec.parse({"args": [{"role": "output"}, {"role": "input"},
                                                     {"role": "eps"}]}))


def _rms32(x, gamma, beta, eps):
    x32 = x.astype(np.float32)
    r = 1 / np.sqrt((x32 * x32).mean(axis=1, keepdims=True) + eps)
    return (x32 * r * gamma.astype(np.float32)).astype(x.dtype)


def test_a_long_run_streams_in_bounded_batches():
    seen = []

    def recorded(x, gamma, beta, eps):
        seen.append(x.shape)
        return _rms32(x, gamma, beta, eps)

    ticks = []
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        r = check.check_callable(recorded, "rmsnorm", "fp16", examples=8, search=0,
                                 rows=20001, long_cols=512,
                                 progress=lambda done, rows, rate: ticks.append(done))
    long = next(f for f in r.families if f.family == "long")
    assert long.rows == 20001 and long.cols == [512] and long.verdict == "pass"
    batches = [s for s in seen if s[1] == 512 and s[0] > 64]
    assert sum(s[0] for s in batches) == 20001
    assert max(s[0] for s in batches) <= (1 << 20) // 512  # memory: one batch of ~2^20 elements
    assert ticks and ticks[-1] == 20001  # progress ends at the total
    # the final rounding (0.5) plus float32 arithmetic's own error: a few float32 ulps, each
    # 2^-13 of an fp16 ulp; 2^-9 leaves a margin of 2x over 8 of them
    assert 0 < long.p99_ulp <= long.max_ulp <= 0.5 + 2**-9
    assert "long run: 20,001 rows of 512" in r.render()


def test_a_long_run_fails_a_bad_kernel():
    def rstd_in_fp16(x, gamma, beta, eps):
        x32 = x.astype(np.float32)
        r = np.float16(1 / np.sqrt((x32 * x32).mean(axis=1, keepdims=True) + eps))
        return (x32 * r.astype(np.float32) * gamma.astype(np.float32)).astype(x.dtype)

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        r = check.check_callable(rstd_in_fp16, "rmsnorm", "fp16", examples=2, search=0,
                                 rows=999, long_cols=300)
    long = next(f for f in r.families if f.family == "long")
    assert long.verdict == "fail" and "accuracy" in long.failures
    assert r.verdict == "fail"


_LATE_FAULT = r"""
// fp32 RMSNorm, a thread a row, that reads past the end of x on row 5 of a launch of 200 rows
// or more: the long run's batches have them, the families do not
extern "C" __global__ void late(float* y, const float* x, const float* g, float eps, int rows,
                                int cols) {
  const int row = blockIdx.x;
  if (threadIdx.x != 0) return;
  const float* xr = x + (size_t)row * cols;
  float s = 0.f;
  for (int i = 0; i < cols; ++i) s += xr[i] * xr[i];
  float r = rsqrtf(s / cols + eps);
  if (rows >= 200 && row == 5) r += x[(size_t)rows * cols + 1000];
  for (int i = 0; i < cols; ++i) y[(size_t)row * cols + i] = xr[i] * r * g[i];
}
"""


def test_a_fault_in_the_long_run_fails_it_and_keeps_the_families():
    # the long run's launch that faults is a failure of the family "long" (it was an internal
    # error, exit 2, every family's result lost: the guard was passed where the cause goes)
    r = check.check_kernel(_LATE_FAULT, "late", "rmsnorm", "fp32", examples=4, search=0,
                           rows=600, cols=512)
    long = next(f for f in r.families if f.family == "long")
    assert long.verdict == "fail" and "out_of_bounds" in long.failures, long.failures
    assert r.verdict == "fail"
    assert all(f.verdict != "fail" for f in r.families if f.family != "long")
    assert "out-of-bounds read" in r.render()


@pytest.mark.parametrize("kw,match", [
    ({"rows": 0}, r"rows=0"), ({"rows": 10**10}, r"rows=10000000000"),
    ({"long_cols": 64}, r"cols=64.*without --rows"),
    ({"rows": 10, "long_cols": 9000}, r"cols=9000.*from 1 to 8192"),
])
def test_long_run_arguments_are_checked(kw, match):
    with pytest.raises(errors.InvalidArgument, match=match):
        check.check_callable(_rms32, "rmsnorm", "fp16", examples=2, search=0, **kw)


def test_a_quant_that_is_no_contract_is_named():
    """quant= goes through the contract's own validation, whatever its type (a Contract, a
    preset name or a table pass; anything else is an argument error naming it)."""
    src = 'extern "C" __global__ void k(float* y, const float* x) {}'
    with pytest.raises(errors.InvalidArgument, match=r"quant=5: expected a table of contract"):
        check.check_kernel(src, "k", "rmsnorm", "fp16", quant=5)


def test_a_check_that_cannot_judge_still_writes_json_junit_and_summary(tmp_path):
    """Exit 2 (here a compile error) writes what CI reads: --json prints the error as a verdict
    of its own, --junit one errored test case, --summary what went wrong."""
    import junitparser

    bad = tmp_path / "bad.cu"
    bad.write_text("this is not CUDA C\n")
    junit, summary = tmp_path / "j.xml", tmp_path / "s.md"
    out = subprocess.run([sys.executable, "-m", "normcheck", "check", str(bad), "--entry", "k",
                          "--norm", "rmsnorm", "--dtype", "fp32", "--json", "--junit",
                          str(junit), "--summary", str(summary)], capture_output=True,
                         text=True, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    d = json.loads(out.stdout)
    assert d["verdict"] == "error" and d["error_kind"] == "CompileError"
    assert "expected unqualified-id" in d["error"]
    xml = junitparser.JUnitXml.fromfile(str(junit))
    cases = [c for s in xml for c in s]
    assert len(cases) == 1 and isinstance(cases[0].result[0], junitparser.Error)
    assert "could not judge (CompileError)" in summary.read_text()


def test_an_op_without_torch_is_an_error_naming_torch(tmp_path, monkeypatch, capsys):
    """An op's host code is called on torch tensors: without torch its module's `import torch`
    met a stand-in and the check ended in a CompileError about `__version__` (#64); now exit 2
    before anything is imported, naming torch and the install."""
    import importlib.util

    from normcheck.cli import main

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else find(name, *a))
    f = tmp_path / "ops.py"
    f.write_text("import torch\n")
    rc = main(["check", str(f), "--op", "rms(x, weight, eps)", "--norm", "rmsnorm",
               "--dtype", "bf16"])
    err = capsys.readouterr().err
    assert rc == 2 and "torch is not installed here (pip install torch" in err, err
