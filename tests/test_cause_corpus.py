"""The cause corpus (#57): a kernel per model, in the styles strangers write -- CUDA C block per
row, warp per row, vectorised, persistent; Triton single block and looped -- each with the cause
its headline must name.  Each kernel of another bug is the one a model must not claim: the
headline is the true cause on every kernel, so no other model took it.  The shares printed
(``pytest -s``) are what ``diagnose.EXPLAINS`` rests on: the true model's best share of a case's
elements off, and the best share any other cause's model reached on the same cases."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from normcheck import check
from normcheck.causes import MIN_EXPLAINED
from normcheck.check import diagnose

T = Path(__file__).parent / "cuda"
CUDA = [
    # (file, entry, norm, dtype, cause, style)
    ("strangers/causes.cu", "ln_beta_twice", "layernorm", "fp16", "beta_twice", "block"),
    ("strangers/causes.cu", "rms_block_divisor", "rmsnorm", "fp16", "count_divisor", "block"),
    ("strangers/causes.cu", "ln_welford_equal", "layernorm", "fp32", "welford_unweighted",
     "block"),
    ("strangers/causes.cu", "ln_welford_no_scale", "layernorm", "fp16", "welford_unscaled",
     "block"),
    ("strangers/causes.cu", "ln_bf16_all_storage", "layernorm", "bf16", "no_upcast", "block"),
    ("strangers/causes.cu", "rms_ftz_warp", "rmsnorm", "fp32", "ftz", "warp"),
    ("strangers/causes.cu", "rms_clamp_input", "rmsnorm", "fp16", "input_clamp", "block"),
    ("headline.cu", "rms_no_cross_warp_fp16", "rmsnorm", "fp16", "partial_reduction", "block"),
    ("headline.cu", "ln_trt_one_pass_fp16", "layernorm", "fp16", "one_pass", "block"),
    ("headline.cu", "rms_tl_bf16_tree_sum", "rmsnorm", "bf16", "storage_sums", "block"),
    ("headline.cu", "rms_rstd_half_products", "rmsnorm", "fp16", "rstd_storage", "block"),
    ("headline.cu", "rms_half_warp_fp16", "rmsnorm", "fp16", "lanes_dropped", "block"),
    ("headline.cu", "ln_half_warp_vec4_fp32", "layernorm", "fp32", "lanes_dropped",
     "vectorised"),
]
TRITON = [
    ("strangers/bugs.py", "rms_block_divisor", "rmsnorm", "bf16", "count_divisor", "single"),
    ("strangers/bugs.py", "ln_padding_in_variance", "layernorm", "bf16", "padding_variance",
     "single"),
    ("strangers/bugs.py", "ln_bf16_no_upcast", "layernorm", "bf16", "no_upcast", "single"),
]
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="Triton is not installed")


@pytest.mark.parametrize("path, entry, norm, dtype, key, style", CUDA + [
    pytest.param(*t, marks=needs_triton) for t in TRITON])
def test_each_model_names_its_kernel_and_no_other(path, entry, norm, dtype, key, style,
                                                   tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trace = []
    monkeypatch.setattr(diagnose, "TRACE", trace)
    with np.errstate(all="ignore"):
        r = check.check_kernel(T / path, entry, norm, dtype, search=0, examples=16)
    assert r.verdict == "fail" and r.cause is not None and r.cause.key == key, r.render()
    assert (r.cause.explained or 0) >= MIN_EXPLAINED
    true = max(t.get(key, 0.0) for t in trace)
    other = max(max([v for k, v in t.items() if k != key] or [0.0]) for t in trace)
    rival = max(((v, k) for t in trace for k, v in t.items() if k != key), default=(0, None))[1]
    print(f"\n{style:10s} {entry:28s} {key:20s} true {true:.3f}  best other {other:.3f} ({rival})")
    # the evidence: on some case the true model reproduces EXPLAINS of the elements off
    assert true >= diagnose.EXPLAINS
