"""What x86 runs without a word and a GPU does not (#47): a vector access off its alignment
(__half2 on a row of odd width, float4 on any width not a multiple of 4) and a row offset
computed in 32 bits past 2^31 elements -- each fails with its kind and the kernel's line, and
the sound variants of the same kernels pass (tests/cuda/strangers/half2.cu)."""

import importlib.util
from pathlib import Path

import pytest

from normcheck import check

SRC = Path(__file__).parent / "cuda" / "strangers" / "half2.cu"


def _check(entry, norm="rmsnorm", dtype="fp16", **kw):
    return check.check_kernel(SRC, entry, norm, dtype, search=0, **kw)


@pytest.mark.parametrize("entry, norm, dtype, line", [
    ("rms_half2", "rmsnorm", "fp16", 21),       # the __half2 read of x's pairs
    ("ln_float4", "layernorm", "fp32", 79),     # the float4 read
])
def test_a_misaligned_vector_access_fails_with_its_kind_and_line(entry, norm, dtype, line,
                                                                  tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _check(entry, norm, dtype, examples=8)  # few rows: odd widths still run 3 rows
    assert r.verdict == "fail", r.render()
    f = next(f for f in r.failures if f.kind == "misaligned")
    assert f"half2.cu:{line}" in f.detail, f.detail
    assert "a GPU requires" in f.detail and "block (" in f.detail


def test_a_vector_kernel_that_checks_its_alignment_passes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _check("rms_half2_checked", examples=8)
    assert r.verdict == "pass", r.render()


def test_a_32_bit_row_offset_fails_past_2_to_the_31_elements(tmp_path, monkeypatch):
    """The large-index run: a launch of 524,295 rows of 4096 whose last 7 blocks run on
    sparse buffers -- `int off = blockIdx.x * cols` reads 2^32 elements before x."""
    monkeypatch.chdir(tmp_path)
    r = _check("rms_int_offset", examples=8)
    assert r.verdict == "fail"
    f = next(f for f in r.failures if f.family == "large_index")
    assert f.kind == "out_of_bounds" and "wrapped to 32 bits" in f.detail
    assert "half2.cu:110" in f.detail, f.detail
    # in bounded time and memory, and it says so
    note = next(n for n in r.detail.notes if n.startswith("large-index run"))
    assert "524,295 rows of 4096" in note and "peak memory" in note
    ok = _check("rms_size_t_offset", examples=8)
    assert ok.verdict == "pass", ok.render()
    big = next(fr for fr in ok.families if fr.family == "large_index")
    assert big.rows == 7 and 0 < big.max_of_bound <= 1  # measured there, within the bound


def test_a_spec_may_bound_the_elements_a_launch_has(tmp_path, monkeypatch):
    """A project whose launcher never passes 2^31 elements says so (max_elements): the run is
    not made, and the check says why."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "half2.cu").write_text(SRC.read_text())
    (tmp_path / "k.toml").write_text(
        'source = "half2.cu"\nentry = "rms_int_offset"\nnorm = "rmsnorm"\ndtype = "fp16"\n'
        'max_elements = 2147483647\n[launch]\ngrid = "rows"\nblock = "256"\n'
        '[[args]]\nrole = "output"\n[[args]]\nrole = "input"\n[[args]]\nrole = "gamma"\n'
        '[[args]]\nrole = "eps"\n[[args]]\nrole = "rows"\n[[args]]\nrole = "cols"\n')
    r = check.check_kernel(spec=tmp_path / "k.toml", examples=8, search=0)
    assert r.verdict == "pass", r.render()
    assert any("max_elements" in n for n in r.detail.notes)


def test_a_run_the_kernels_abi_cannot_express_is_skipped_with_why(tmp_path, monkeypatch):
    """An argument computed from the launch that does not fit its parameter at the large-index
    run's size (ONNX Runtime's ``int skip_size = rows * cols``) puts that run outside the
    kernel's ABI: skipped with one line saying why, the verdict standing on what ran (it was
    exit 2 after every family had run)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "half2.cu").write_text(SRC.read_text())
    (tmp_path / "k.toml").write_text(
        'source = "half2.cu"\nentry = "rms_skip_size"\nnorm = "rmsnorm"\ndtype = "fp16"\n'
        '[launch]\ngrid = "rows"\nblock = "256"\n'
        '[[args]]\nrole = "output"\n[[args]]\nrole = "input"\n[[args]]\nrole = "gamma"\n'
        '[[args]]\nrole = "eps"\n[[args]]\nrole = "rows"\n[[args]]\nrole = "cols"\n'
        '[[args]]\nrole = "const"\nname = "skip_size"\nvalue = "rows * cols"\n')
    r = check.check_kernel(spec=tmp_path / "k.toml", examples=8, search=0)
    assert r.verdict == "pass", r.render()
    assert "large_index" not in {f.family for f in r.families}
    why = [n for n in r.detail.notes if n.startswith("large-index run not made")]
    assert len(why) == 1 and "skip_size = rows * cols" in why[0] and "does not fit" in why[0], \
        r.detail.notes


def test_a_spec_whose_widths_are_all_above_4096_is_searched_at_them(tmp_path, monkeypatch):
    """Widths are the spec's, whatever they are: cols = [16384, 16384] (the width of a
    FlashInfer bug report) made the search's strategy ask for max_value=4096 < min_value=16384
    (an internal error, exit 2)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "half2.cu").write_text(SRC.read_text())
    (tmp_path / "k.toml").write_text(
        'source = "half2.cu"\nentry = "rms_size_t_offset"\nnorm = "rmsnorm"\n'
        'dtype = "fp16"\ncols = [16384, 16384]\n[launch]\ngrid = "rows"\nblock = "256"\n'
        '[[args]]\nrole = "output"\n[[args]]\nrole = "input"\n[[args]]\nrole = "gamma"\n'
        '[[args]]\nrole = "eps"\n[[args]]\nrole = "rows"\n[[args]]\nrole = "cols"\n')
    r = check.check_kernel(spec=tmp_path / "k.toml", examples=2, search=3)
    assert r.verdict == "pass", r.render()
    assert r.search and r.search["examples"] >= 1, r.search
    assert {c for f in r.families for c in f.cols} == {16384}


# -- causes that fit the error's shape -----------------------------------------------------------
CAUSES_SRC = Path(__file__).parent / "cuda" / "strangers" / "causes.cu"
TRITON_BUGS = Path(__file__).parent / "cuda" / "strangers" / "bugs.py"


@pytest.mark.parametrize("entry, norm, dtype, key, words", [
    ("ln_beta_twice", "layernorm", "fp16", "beta_twice", "β added twice"),
    ("rms_block_divisor", "rmsnorm", "fp16", "count_divisor",
     "divided by 256 where the row has"),
    ("add_rms_h_truncated", "add_rmsnorm", "fp16", "h_toward_zero", "rounded toward zero"),
    ("ln_gamma_by_row", "layernorm", "fp16", "fault_out_of_bounds", "`gamma`"),
    ("rms_pairs_drop_tail", "rmsnorm", "fp16", "tail_dropped", "2-element vectors"),
    ("ln_welford_equal", "layernorm", "fp32", "welford_unweighted", "equal weights"),
    # found by happens-before in the hazard run, with both lines (it was found by reordering
    # warps, when the schedule let it show)
    ("ln_missing_barrier", "layernorm", "fp16", "fault_race", "race on shared memory"),
    # every step in __nv_bfloat16 (#57): the sums in the block's order, bit for bit -- was
    # "one-pass variance" on one family and "storage sums" on another
    ("ln_bf16_all_storage", "layernorm", "bf16", "no_upcast",
     "every step in the storage format"),
    # the .ftz PTX --use_fast_math compiles to, a warp per row (#57): subnormal x read as 0 --
    # not "y cast through fp16", which flushes the tiny outputs too but moves the normal ones
    # the kernel got right
    ("rms_ftz_warp", "rmsnorm", "fp32", "ftz", "flushed to zero"),
    # δ² merged unweighted (#57): the mean right, the variance grown -- was "storage_sums"
    ("ln_welford_no_scale", "layernorm", "fp16", "welford_unscaled", "256 threads' partials"),
])
def test_a_bug_is_named_by_the_shape_of_its_error(entry, norm, dtype, key, words, tmp_path,
                                                   monkeypatch):
    """The headline names the bug (it used to read a variance cause off each row for any bug
    that scales or shifts y: β twice was 'one-pass variance', a block divisor 'storage sums', a
    truncated h 'one-pass ... bit for bit', γ[row] 'storage sums' with its out-of-bounds read
    among the failures)."""
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(CAUSES_SRC, entry, norm, dtype, search=0, examples=16)
    assert r.verdict == "fail", r.render()
    assert r.cause is not None and r.cause.key == key, (r.cause, r.render())
    assert words in str(r.cause)


def test_a_stale_accumulator_across_rows_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(spec=CAUSES_SRC.parent / "persistent_stale.toml", search=0,
                           examples=16)
    assert r.verdict == "fail" and r.cause.key == "stale_accumulator", r.render()
    assert "a persistent grid of 4 blocks" in str(r.cause)


def test_a_warn_names_its_cause(tmp_path, monkeypatch):
    """A sound fp32 two-pass LayerNorm warns on constant rows (the float mean is off the row's
    value, so x̂ is not 0): named, where it used to warn without a cause."""
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(CAUSES_SRC, "ln_two_pass_fp32", "layernorm", "fp32", search=0,
                           examples=16)
    assert r.verdict == "warn" and not r.failures, r.render()
    assert r.warnings and all(w.cause is not None for w in r.warnings), r.render()
    assert r.cause.key == "constant_row_mean"


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
@pytest.mark.parametrize("entry, norm, key, words", [
    ("rms_block_divisor", "rmsnorm", "count_divisor", "divided by 1024 where the row has 768"),
    ("ln_padding_in_variance", "layernorm", "padding_variance", "padding lanes"),
    # looped over chunks of 256: the width padded to a multiple of the chunk, not a power of 2
    ("ln_looped_padding_in_variance", "layernorm", "padding_variance",
     "the width padded to 256"),
    # no .to(tl.float32) after the loads (#57): only the mean's sum is in bf16 (Triton divides
    # it by the int width in fp32), bit for bit -- was "one-pass variance"
    ("ln_bf16_no_upcast", "layernorm", "no_upcast", "the mean from a sum accumulated in bf16"),
])
def test_a_triton_bug_is_named_by_its_shape(entry, norm, key, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(TRITON_BUGS, entry, norm, "bf16", search=0, examples=16)
    assert r.verdict == "fail" and r.cause.key == key, r.render()
    assert words in str(r.cause)


def test_each_sentence_is_printed_once_and_the_columns_say_what_they_are(tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(CAUSES_SRC, "ln_missing_barrier", "layernorm", "fp16", search=0,
                           examples=16)
    text = r.render()
    title = r.cause.title
    body = text.rsplit("\nverdict:", 1)[0]
    assert body.count(title) == 1, text
    assert "run by: the cpu backend" in text and "x bound: the largest error" in text


def test_a_fit_no_model_confirms_is_said_as_a_shape(tmp_path, monkeypatch):
    """#57: without the model of its bug, the unweighted Welford merge's rows still imply a
    variance off by far more than float sums leave -- said as that shape inside "unexplained",
    with the widths, never as a mechanism's name ("sums accumulated in the storage format")."""
    from normcheck.check import diagnose

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(diagnose, "_welford_unscaled", lambda x, g, b, eps: {})
    r = check.check_kernel(CAUSES_SRC, "ln_welford_no_scale", "layernorm", "fp16", search=0,
                           examples=16)
    assert r.verdict == "fail" and r.cause.key == "unexplained", r.render()
    assert "the error's shape: the variance each row's output implies is off" in r.cause
    assert "worst at width" in r.cause and "accumulated in the storage format" not in r.cause
    shaped = [f.cause for f in r.failures if f.cause is not None]
    assert shaped and all(c.key.startswith("shape_") and c.shape for c in shaped)
