"""Every example in cuda_src/examples -- one kernel in each public style, with its spec -- runs on
the cpu backend with `normcheck check --spec`, and its verdict is the one reading it predicts."""

import importlib.util
from pathlib import Path

import pytest

from headline_support import assert_headline_agrees
from normcheck import check
from normcheck.kernels import CUDA_SRC

EXAMPLES = CUDA_SRC / "examples"

#: spec -> (verdicts expected, cause expected in a fail, why)
EXPECTED = {
    "vllm_rms_norm": ({"fail"}, "x̂ rounded to the storage format",
                      "rounds x·rstd to fp16 before ×weight: Hugging Face's definition, judged "
                      "here against the exact one"),
    "vllm_cub_rms_norm": ({"pass"}, None, "cub::BlockReduce over min(hidden, 1024) threads, "
                          "judged against the hf definition it implements"),
    "vllm_fused_add_rms_norm": ({"pass"}, None, "in place (x -> y, residual -> h), stored "
                                "convention, hf definition, 16-byte vectors"),
    "flashinfer_rms_norm": ({"pass"}, None, "PTX vector loads, rsqrt.approx, bfly shuffles, "
                            "griddepcontrol dead on the cpu backend"),
    "llmc_layernorm3": ({"pass", "warn"}, None, "three launches; a shared-memory tree, fp32: "
                        "sound, another order's luck on ill-conditioned rows"),
    "llmc_layernorm_x128": ({"pass", "warn"}, None, "x128 vectors, widths multiples of 8, a null "
                            "mean pointer"),
    "pytorch_layernorm": ({"pass", "warn"}, None, "two launches: Welford moments, then apply"),
    "ggml_norm": ({"fail"}, "one-pass variance", "affine-free, E[x²] - E[x]² unclamped: NaN on "
                  "offset rows"),
    "apex_layernorm": ({"pass"}, None, "Welford, writes mean and invvar, 2-D block"),
    "warp_per_row": ({"pass", "warn"}, None, "one warp per row, 32 lanes summing C/32 each"),
    "ort_skip_rms_norm": ({"pass"}, None, "rows along gridDim.y, Welford sums merged by Chan's "
                          "formula, h from the float sum, null mean/beta/bias, rstd judged"),
    "candle_rmsnorm": ({"fail"}, None, "macro-made extern \"C\" entries, the block size an "
                       "argument, two warp reductions, y rounded once -- and row * ncols in "
                       "int, as candle's own: past 2^31 elements the large-index run reads "
                       "before x (out_of_bounds at its line)"),
    # quantised outputs: each under the contract of the project whose style it follows
    "vllm_rms_norm_static_fp8": ({"pass"}, None, "vllm contract: y twice, × (1/scale), clamp, "
                                 "a non-saturating cast"),
    "vllm_fused_add_rms_norm_static_fp8": ({"pass"}, None, "the residual added in fp16 in place, "
                                           "statistics of that sum"),
    "vllm_rms_norm_dynamic_fp8": ({"pass"}, None, "per token, amax of the rounded y, ÷ s, "
                                  "statistics of the float sum"),
    "vllm_rms_norm_dynamic_int8": ({"pass"}, None, "per token int8: × (1/s), cvt.rni.sat"),
    "flashinfer_rms_norm_quant": ({"fail"}, "unsigned 32 bits", "y in float with rsqrt.approx, "
                                  "× (1/scale[0]), clamp -- and bx * stride_input in uint32_t, "
                                  "as FlashInfer's: past 2^32 elements the last rows are never "
                                  "written (the quantised large-index run, #66)"),
    # TensorRT-LLM's style: bidx * hidden_dim in int -- past 2^31 elements the quantised
    # large-index run (#66) reads before the input (out_of_bounds at its line)
    "trtllm_rmsnorm_fp8_static": ({"fail"}, "access outside an array",
                                  "y once, × scale, satfinite; int row offset"),
    "trtllm_rmsnorm_fp8_per_token": ({"fail"}, "access outside an array",
                                     "× 448/amax capped, amax from 1e-6f; int row offset"),
    "trtllm_rmsnorm_int8_per_token": ({"fail"}, "access outside an array",
                                      "× 127/amax, cvt.rni.sat; int row offset"),
    "te_rmsnorm_fp8_delayed": ({"pass"}, None, "× scale, satfinite, amax by atomicMax"),
    "torch_extension": ({"pass"}, None, "a torch extension as shipped: c10::Half, host "
                        "wrappers on torch::Tensor, cub::BlockReduce, hf definition"),
    "te_rmsnorm_mxfp8": ({"pass"}, None, "rsigma pre-pass, 32x128 tiles, e8m0 rounded up, "
                         "cvt.rn.satfinite.e4m3x2"),
}


def test_every_example_is_in_the_table():
    assert {p.stem for p in EXAMPLES.glob("*.toml")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_verdict(name):
    verdicts, cause, why = EXPECTED[name]
    if name == "torch_extension" and importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (pip install torch: a CPU build is enough)")
    r = check.check_kernel(None, spec=EXAMPLES / f"{name}.toml", search=15, timeout=30)
    assert r.verdict in verdicts, f"{name} ({why}):\n{r.render()}"
    if "fail" not in verdicts:
        assert not r.failures, r.render()
    if name == "candle_rmsnorm" or name.startswith(("trtllm_", "flashinfer_rms_norm_quant")):
        # every family passes; the large-index runs alone fail
        wrap = ("large_index_u32", "unwritten") if name.startswith("flashinfer") else \
            ("large_index", "out_of_bounds")
        assert {(f.family, f.kind) for f in r.failures} == {wrap}, r.render()
        assert all(f.family == "large_index_u32" or "wrapped to 32 bits" in f.detail
                   for f in r.failures)
    if cause:
        assert r.cause and cause in r.cause, r.render()
    assert_headline_agrees(r)
    if r.extra.get("quant"):
        from normcheck.check.large_index import LARGE_FAMILIES
        from normcheck.check.quantised import FAMILIES

        assert {f.family for f in r.families} - set(LARGE_FAMILIES.values()) <= set(FAMILIES)
        # the large-index run is made for quantised kernels too (#66); the MXFP8 example's
        # grid of 32 x 128 tiles is 2-D: said, not made
        big = next(d for d in r.detail.coverage if d["run"] == "large index 2^31")
        assert big["ran"] == (name != "te_rmsnorm_mxfp8"), big
        assert r.extra["quant"]["values"]["n"] > 0
    else:
        # the families, and the large-index runs where the grid is one block per row (past
        # 2^31 elements, then, CUDA C, past 2^32)
        from normcheck.check.large_index import LARGE_FAMILIES

        assert {f.family for f in r.families} - set(LARGE_FAMILIES.values()) == \
            set(check.CHECK_FAMILIES)


def test_an_example_checks_from_the_command_line(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "normcheck", "check", "--spec",
                          str(EXAMPLES / "flashinfer_rms_norm.toml"), "--search", "5",
                          "--examples", "16", "--json"], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert '"verdict": "pass"' in out.stdout
    assert Path(tmp_path).is_dir()
