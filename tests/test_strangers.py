"""What x86 runs without a word and a GPU does not (#47): a vector access off its alignment
(__half2 on a row of odd width, float4 on any width not a multiple of 4) and a row offset
computed in 32 bits past 2^31 elements -- each fails with its kind and the kernel's line, and
the sound variants of the same kernels pass (tests/cuda/strangers/half2.cu)."""

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
