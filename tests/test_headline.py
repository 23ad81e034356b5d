"""One headline cause that agrees with the evidence: a cause whose model reproduces the output
beats a statistical one, undefined values beat any accuracy cause, summation orders include
trees, CUB and butterflies at any block size, and families that disagree are named
(tests/cuda/headline.cu: kernels in the styles where the headline used to be wrong)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from headline_support import assert_headline_agrees
from normcheck import check
from normcheck.check.diagnose import Cause, headline

SRC = Path(__file__).parent / "cuda" / "headline.cu"


@pytest.mark.parametrize("entry,norm,dtype,key,evidence,text", [
    # the cross-warp step dropped: the partial reduction reproduces every element off but one
    # of the large-index rows' (the sentence of the family with the most elements)
    ("rms_no_cross_warp_fp16", "rmsnorm", "fp16", "partial_reduction", None,
     "a block of 256 threads"),
    # a __syncthreads() only warp 0 reaches: synccheck's divergent barrier, at its line (the
    # others then read partials not yet written; the barrier is the cause to fix)
    ("rms_sync_in_branch_fp32", "rmsnorm", "fp32", "fault_barrier", "fault",
     "reached by 32 of its 256 threads"),
    # TensorRT-LLM's diff of squares: the one-pass variance, emulated bit for bit
    ("ln_trt_one_pass_fp16", "layernorm", "fp16", "one_pass", None, "one-pass variance"),
    # a two-pass kernel reading 32 slots of partials: undefined values, not one-pass
    ("ln_ds_two_pass_lanes_fp16", "layernorm", "fp16", "undefined_values", "undefined",
     "the output depends on undefined values"),
    # tl.sum in bf16: sums in the storage format, in a tree, not "rstd rounded"
    ("rms_tl_bf16_tree_sum", "rmsnorm", "bf16", "storage_sums", None, "storage format"),
    # DeepSpeed's inference RMSNorm: rstd, x·rstd and ·γ each rounded to half, bit for bit
    ("rms_rstd_half_products", "rmsnorm", "fp16", "rstd_storage", "exact", "each a product"),
    # xFormers' in-place add: the float sum's statistics on the stored sum, bit for bit
    ("add_rms_mixed_sums_fp16", "add_rmsnorm", "fp16", "h_mixed", "exact",
     "applied to the sum as stored"),
    # a total valid in thread 0 only (#57): no variance fits a row whose columns are normalised
    # by different values; the pattern of the elements off does -- thread 0's columns right,
    # every other thread's off (it was "tail_dropped" from one element, then "unexplained")
    ("rms_thread0_total_fp16", "rmsnorm", "fp16", "one_thread", "bit",
     "a value valid in thread 0 of a block of 256"),
    # the same in a warp per row: lane 0's columns right, a block of 32 -- not of the 256 the
    # launch has (its 8 warps are 8 rows)
    ("rms_lane0_total_warp_fp32", "rmsnorm", "fp32", "one_thread", "bit",
     "a value valid in thread 0 of a block of 32"),
    # a butterfly from offset 8: lanes 16..31 of each warp left out, bit for bit -- not "a
    # wrong count or divisor", which would send the author to a divisor that is correct (#57)
    ("rms_half_warp_fp16", "rmsnorm", "fp16", "lanes_dropped", None,
     "only lanes 0..15 of each warp"),
    # the same in a float4 LayerNorm: lanes hold 4 columns each where the row is vectorised
    ("ln_half_warp_vec4_fp32", "layernorm", "fp32", "lanes_dropped", None,
     "only lanes 0..15 of each warp"),
])
def test_the_headline_names_what_the_evidence_shows(entry, norm, dtype, key, evidence, text,
                                                     tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(SRC, entry, norm, dtype, examples=16, search=0, timeout=30)
    assert r.verdict == "fail", r.render()
    assert r.cause.key == key, r.render()
    if evidence:
        assert r.cause.evidence == evidence
    assert text in r.cause
    assert_headline_agrees(r)
    d = json.loads(r.to_json())
    assert d["cause_key"] == key and d["cause"] == str(r.cause)


def test_one_bug_is_one_cause_on_every_family_it_explains(tmp_path, monkeypatch):
    """ε on σ reproduces every family's elements off bit for bit; on bimodal's 16 (and a
    search example's) 'ε missing from the variance' fits as well, and was named there: three
    causes for one bug (#64).  A cause found on the kernel's rows is kept wherever it explains
    the elements too."""
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(SRC, "ln_eps_on_sigma_fp16", "layernorm", "fp16", examples=64,
                           search=40, timeout=30)
    assert r.verdict == "fail" and r.cause.key == "eps_on_sigma", r.render()
    keys = {f.cause.key for f in r.failures if f.cause is not None}
    assert keys == {"eps_on_sigma"}, r.render()
    assert "elsewhere" not in r.cause


def test_a_cause_is_one_the_kernels_norm_can_have(tmp_path, monkeypatch):
    """Rounding once where Hugging Face's definition rounds x̂ first: the exact definition, not
    'γ·x̂ and +β rounded separately' (an RMSNorm has no β) nor a perturbation ('squares
    rounded', 'ε missing') that lands on the same values (#64)."""
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(SRC, "rms_rounded_once_fp16", "rmsnorm", "fp16", reference="hf",
                           examples=16, search=0, timeout=30)
    assert r.verdict == "fail" and r.cause.key == "exact_not_hf", r.render()
    assert {f.cause.key for f in r.failures if f.cause is not None} == {"exact_not_hf"}
    assert "affine_separate" not in r.render()


def test_nan_on_every_row_is_not_the_one_pass_variance(tmp_path, monkeypatch):
    """A two-pass LayerNorm that reads its output (the poison NaN) for the mean: NaN on every
    row of every family, the offset rows among them -- not 'one-pass variance', whose NaN rows
    are only those whose variance can come out negative (#64)."""
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(SRC, "ln_mean_from_output_fp16", "layernorm", "fp16", examples=16,
                           search=0, timeout=30)
    assert r.verdict == "fail", r.render()
    assert "one_pass" not in {getattr(f.cause, "key", None) for f in r.failures}, r.render()
    # the real one-pass kernel keeps its cause
    r = check.check_kernel(SRC, "ln_trt_one_pass_fp16", "layernorm", "fp16", examples=16,
                           search=0, timeout=30)
    assert r.cause.key == "one_pass", r.render()


def test_a_tree_sum_in_bf16_is_named_with_its_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(SRC, "rms_tl_bf16_tree_sum", "rmsnorm", "bf16", examples=16,
                           search=0, timeout=30)
    assert "halving tree" in r.cause and "bit for bit" in r.cause, r.cause
    assert "rstd rounded" not in r.cause and "x̂ rounded" not in r.cause


def test_a_sound_triton_style_kernel_with_bf16_squares_passes(tmp_path, monkeypatch):
    # x² rounded to bf16 but summed in float: within the bound (the rounding errors average)
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(SRC, "rms_tl_bf16_squares", "rmsnorm", "bf16", examples=16,
                           search=0, timeout=30)
    assert r.verdict == "pass", r.render()


def test_the_headline_ranks_evidence_then_families():
    stat = Cause("sums in storage (stat)", "storage_sums", "stat", "sums in storage")
    bit = Cause("partial (bit)", "partial_reduction", "exact", "a partial reduction")
    und = Cause("undefined", "undefined_values", "undefined", "undefined values")
    h = headline([("gaussian", stat), ("offset", stat), ("tiny", bit)])
    assert h.key == "partial_reduction" and "on tiny" in h
    assert "elsewhere: sums in storage on gaussian, offset" in h
    assert headline([("a", bit), ("b", und)]).key == "undefined_values"
    assert headline([("a", stat), ("b", stat)]) == stat
    assert headline([("a", None)]) is None


def test_the_cli_verdict_line_json_junit_and_summary_share_the_headline(tmp_path):
    junit, summary = tmp_path / "j.xml", tmp_path / "s.md"
    out = subprocess.run([sys.executable, "-m", "normcheck", "check", str(SRC), "--entry",
                          "rms_no_cross_warp_fp16", "--norm", "rmsnorm", "--dtype", "fp16",
                          "--search", "0", "--examples", "8", "--junit", str(junit),
                          "--summary", str(summary)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=600)
    assert out.returncode == 1, out.stderr
    verdict = [ln for ln in out.stdout.splitlines() if ln.startswith("verdict:")][0]
    assert "a partial reduction" in verdict and "storage format" not in verdict
    assert "a partial reduction" in junit.read_text()
    assert "a partial reduction" in summary.read_text()


def test_a_fail_is_headed_by_evidence_never_by_one_element_or_a_sound_cause():
    """#57: a model resting on fewer than MIN_EXPLAINED elements in all is no headline of a
    FAIL (the caller says "unexplained", with it as a guess); a cause a sound kernel has
    (constant_row_mean) never heads a FAIL; among models, the one explaining most elements
    leads."""
    from normcheck.causes import MIN_EXPLAINED, unexplained

    one = Cause("tail (1/1)", "tail_dropped", "exact", "the tail dropped", explained=1)
    assert headline([("gaussian", one)], failing=True) is None
    assert headline([("gaussian", one)]).key == "tail_dropped"  # not failing: as before
    enough = Cause("tail", "tail_dropped", "bit", "the tail dropped", explained=MIN_EXPLAINED)
    assert headline([("gaussian", enough)], failing=True).key == "tail_dropped"
    sound = Cause("constant mean", "constant_row_mean", "exact", "constant mean",
                  explained=40, sound=True)
    stat = Cause("storage sums", "storage_sums", "stat", "storage sums")
    assert headline([("constant", sound), ("gaussian", stat)], failing=True).key == \
        "storage_sums"
    few = Cause("γ twice (2/2)", "gamma_twice", "exact", "γ applied twice", explained=2)
    many = Cause("x̂ (90/100)", "xhat_storage", "bit", "x̂ rounded", explained=90)
    h = headline([("a", few), ("b", many)], failing=True)
    assert h.key == "xhat_storage"

    class F:  # a failure as the engine keeps it
        def __init__(self, fam, detail):
            self.family, self.kind, self.detail = fam, "accuracy", detail

    u = unexplained([F("gaussian", "row 3: 12 ulp; col 4"), F("tails", "row 0")], [one])
    assert u.key == "unexplained" and "gaussian, tails" in u and "row 3: 12 ulp" in u
    assert "a guess from 1 element(s) only, not evidence: the tail dropped" in u


def _rms64(x, g, eps):
    xd = x.astype(np.float64)
    return xd / np.sqrt((xd * xd).mean(axis=1, keepdims=True) + float(eps)) * \
        g.astype(np.float64)


def _cast_through_fp16(x, g, b, eps):  # a bf16 kernel's y converted through half (ColossalAI)
    return _rms64(x, g, eps).astype(np.float16).astype(x.dtype)


def _saturating(x, g, b, eps):  # fmin(fmax(y, -65504), 65504): NaN comes out as -65504
    y = _rms64(x, g, eps).astype(x.dtype).astype(np.float64)
    return np.where(np.isnan(y), -65504.0, np.clip(y, -65504.0, 65504.0)).astype(x.dtype)


def _flush(a):  # a GPU's -ftz=true on float32 values: subnormals read and written as 0
    a = np.asarray(a, np.float32)
    return np.where(np.abs(a) < np.finfo(np.float32).tiny, np.float32(0) * a, a)


def _rms_ftz(x, g, b, eps):  # an fp32 RMSNorm built with --use_fast_math (every op flushes)
    xf = _flush(x.astype(np.float32))
    ss = _flush(xf * xf).astype(np.float64).mean(axis=1, keepdims=True)
    r = np.float32(1.0 / np.sqrt(ss + float(eps)))
    return _flush(_flush(xf * r) * g.astype(np.float32)).astype(x.dtype)


def _exact_but_stored_via_bf16(x, g, b, eps):  # the model's twin: the right format, no cast
    return _rms64(x, g, eps).astype(x.dtype)


@pytest.mark.parametrize("fn,dtype,key,text", [
    (_cast_through_fp16, "bf16", "cast_through", "cast through fp16"),
    (_saturating, "fp16", "saturation", "hiding a non-finite result"),
    (_rms_ftz, "fp32", "ftz", "flushed to zero"),
    (_rms_ftz, "bf16", "ftz", "flushed to zero"),  # bf16's subnormals are fp32's
])
def test_the_shapes_strangers_write_are_named_bit_for_bit(fn, dtype, key, text):
    """#57's models: each reproduces every element off bit for bit, so it heads the FAIL with
    the count; the sound twin passes (the models claim nothing of a sound kernel)."""
    with np.errstate(all="ignore"):
        r = check.check_callable(fn, "rmsnorm", dtype, examples=24, search=0)
        twin = check.check_callable(_exact_but_stored_via_bf16, "rmsnorm", dtype, examples=24,
                                    search=0)
    assert r.verdict == "fail" and r.cause.key == key, r.render()
    # bit for bit in a 16-bit output; within the 1 ulp of a float kernel's own error in fp32
    assert text in r.cause and ("bit for bit" if dtype != "fp32" else "within 1 ulp") in r.cause
    assert r.cause.explained >= 2  # causes.MIN_EXPLAINED: never one element of one
    assert twin.verdict == "pass", twin.render()


def test_a_model_the_kernel_contradicts_is_refuted(monkeypatch):
    """#57: y cast through fp16 reproduces every element an FTZ kernel gets wrong on tiny rows
    (fp16 flushes those outputs too) -- but it also flushes the normal ones, which the kernel
    got right: refuted there (diagnose.REFUTE_ULP), it is no headline.  Without the FTZ model
    the answer is "unexplained", never the cast."""
    from normcheck.check import diagnose

    monkeypatch.setattr(diagnose, "_ftz", lambda norm, x, g, b, eps: g * x / np.sqrt(
        (x * x).mean(axis=1, keepdims=True) + eps) + b)
    with np.errstate(all="ignore"):
        r = check.check_callable(_rms_ftz, "rmsnorm", "fp32", examples=16, search=0)
    assert r.verdict == "fail" and r.cause.key == "unexplained", r.render()
    assert "cast through" not in r.cause
