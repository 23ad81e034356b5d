"""The spec shapes the field's kernels use keep their verdicts (tests/cuda/spec_shapes/: our own
kernels, each in the style of a public one): a row pitch passed as a plain const, a `bool` flag
given as 1, a `__half` ε, a host launcher, template entries, Triton constexprs and const row
strides.  Each of these once ran, then broke (the padded-row sweep re-pitched a buffer the
kernel was told the pitch of by a const; spec constants were refused unless their numpy type
was the parameter's): the table is the regression net, with why each verdict holds."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from headline_support import assert_headline_agrees
from normcheck import check, spec as specs
from normcheck.errors import InvalidArgument, SpecError

DIR = Path(__file__).parent / "cuda" / "spec_shapes"

#: spec -> (verdict, the failure kind a fail must have, why)
EXPECTED = {
    "vllm_const_stride": ("pass", None, "vLLM's input_stride a plain int64 const of the input's "
                          "stride expression: the padded sweep passes it the padded pitch"),
    "vllm_ignores_stride": ("fail", "stride", "takes input_stride, steps by hidden_size: the "
                            "const named for the input's pitch moves with the padding"),
    "trt_bool_flag": ("pass", None, "a host launcher; `bool use_shmem` given as 1 (C++ "
                      "converts it)"),
    "ort_half_eps": ("pass", None, "`__half epsilon` with no type in the spec: ε arrives in half "
                     "and the exact function uses that ε"),
    "padded_rows_untold": ("pass", None, "a pitch the kernel computes itself: the padded sweep "
                           "is skipped for that buffer, and the check says so"),
    "liger_const_stride": ("pass", None, "Liger-style Triton: X_row_stride a const of the "
                           "input's stride \"cols + 8\", constexprs"),
    "liger_named_stride": ("pass", None, "X_row_stride = \"cols\" named for x's pitch (padded), "
                           "Y_row_stride = \"cols\" for y's (never padded), n_cols a const"),
}


def test_every_shape_is_in_the_table():
    assert {p.stem for p in DIR.glob("*.toml")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_spec_shape_keeps_its_verdict(name, tmp_path, monkeypatch):
    verdict, kind, why = EXPECTED[name]
    spec = specs.load(DIR / f"{name}.toml")
    if str(spec.source).endswith(".py") and importlib.util.find_spec("triton") is None:
        pytest.skip("Triton is not installed (pip install 'normcheck[triton]')")
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(spec=DIR / f"{name}.toml", examples=16, search=0, timeout=60)
    assert r.verdict == verdict, f"{name} ({why}):\n{r.render()}"
    if kind:
        assert kind in {f.kind for f in r.failures}, r.render()
    else:
        assert not r.failures, r.render()
    assert_headline_agrees(r)


def test_a_pitch_no_argument_carries_is_not_padded_and_the_check_says_so(tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(spec=DIR / "padded_rows_untold.toml", examples=4, search=0)
    notes = r.detail.notes or []
    assert any("padded rows not run for `input`" in n and "cols + 8" in n for n in notes), notes
    assert "padded rows not run for `input`" in r.render()


def test_which_buffers_a_padded_run_pads():
    """A stride role, a const of the buffer's stride expression, a const "cols" named for that
    buffer's pitch; not a const "cols" of another name (the row's length), nor a buffer whose
    pitch no argument carries."""
    from normcheck import launch, norms

    def target(text):
        import tomllib

        sp = specs.parse(tomllib.loads(text))
        return launch.KernelTarget(sp, norms.get("rmsnorm"), "fp16", None, {}, label="t")

    base = 'norm = "rmsnorm"\ndtype = "fp16"\neps = 1e-5\n[launch]\ngrid = "rows"\n'
    t = target(base + '[[args]]\nrole = "input"\nname = "X"\nstride = "cols"\n'
               '[[args]]\nrole = "output"\nname = "Y"\n'
               '[[args]]\nrole = "const"\nname = "X_row_stride"\nvalue = "cols"\n'
               '[[args]]\nrole = "const"\nname = "Y_row_stride"\nvalue = "cols"\n'
               '[[args]]\nrole = "const"\nname = "n_cols"\nvalue = "cols"\n')
    assert t.strided == {"input"} and not t.unpadded
    t = target(base + '[[args]]\nrole = "input"\nstride = "cols"\n'
               '[[args]]\nrole = "output"\n'
               '[[args]]\nrole = "const"\nname = "hidden_size"\nvalue = "cols"\n')
    assert t.strided == set() and set(t.unpadded) == {"input"}
    t = target(base + '[[args]]\nrole = "input"\nstride = "cols + 8"\n'
               '[[args]]\nrole = "output"\nstride = "cols + 8"\n'
               '[[args]]\nrole = "stride"\nof = "output"\n'
               '[[args]]\nrole = "const"\nname = "in_pitch"\nvalue = "cols+8"\n')
    assert t.strided == {"input", "output"} and not t.unpadded


@pytest.mark.parametrize("value, dtype, want", [
    (1, np.bool_, True), (0, np.bool_, False), (2.5, np.bool_, True),
    (-1, np.uint32, 0xFFFFFFFF), (7.9, np.int32, 7), (-7.9, np.int32, -7),
    (3, np.float32, 3.0), (1e-5, np.float16, float(np.float16(1e-5))),
    (2 ** 31 - 1, np.int32, 2 ** 31 - 1),
])
def test_spec_constants_convert_as_cxx_converts_them(value, dtype, want):
    got = specs.convert(value, dtype, "args[0] x = v")
    assert np.dtype(type(got)) == np.dtype(dtype) and got == want


def test_a_float_to_bf16_rounds_once():
    # just past the tie between 1 and 1 + 2^-7: rounded once it goes up; through float32 first
    # (ml_dtypes' float64 -> bf16) the 2^-30 is lost, the tie goes to even, 1
    v = 1 + 2 ** -8 + 2 ** -30
    assert float(specs.convert(v, specs.scalar_type(specs.ArgSpec("const", type="bfloat16")),
                               "x")) == 1 + 2 ** -7


@pytest.mark.parametrize("value, dtype, what", [
    (2 ** 31, np.int32, "does not fit int32 (-2147483648 to 2147483647; C++ would pass "
                        "-2147483648)"),
    (5_000_000_000, np.uint32, "C++ would pass 705032704"),
    (float("nan"), np.int32, "undefined in C++"),
    (3e10, np.int32, "undefined in C++"),
])
def test_a_constant_that_cannot_reach_the_kernel_as_written_is_refused(value, dtype, what):
    with pytest.raises(InvalidArgument, match=r"^args\[3\] use_shmem = 1: ") as e:
        specs.convert(value, dtype, "args[3] use_shmem = 1")
    assert what in str(e.value)


def test_a_buffer_in_another_format_names_the_dtype_to_check_it_with(tmp_path, monkeypatch):
    """--dtype bf16 on a kernel of __half pointers: the message says --dtype fp16, in the
    command line's terms (not numpy's .astype)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as e:
        check.check_kernel(spec=DIR / "vllm_const_stride.toml", dtype="bf16", examples=1,
                           search=0)
    msg = str(e.value)
    assert "holds bf16 values" in msg and "--dtype fp16" in msg and "astype" not in msg


def test_half_eps_reaches_the_oracle_as_the_kernel_receives_it():
    from normcheck.check import CheckOptions
    from normcheck.check.resolve import resolve

    r = resolve(CheckOptions(spec=DIR / "ort_half_eps.toml"))
    assert r.eps == np.float32(np.float16(np.float32(1e-5)))
    assert r.eps != np.float32(1e-5)


def test_the_cxx_standard_follows_the_installed_torch(tmp_path, monkeypatch):
    """torch 2.14's headers stop below C++20 (`#error C++20 or later compatible compiler is
    required to use ATen`): a file that includes them is built in the standard they demand, a
    file that does not in nvcc's default, C++17."""
    from normcheck.backends import headers
    from normcheck.backends.cpu import backend
    from normcheck.backends.base import Source

    aten = tmp_path / "include" / "ATen"
    aten.mkdir(parents=True)
    (tmp_path / "include" / "torch").mkdir()
    monkeypatch.setattr(headers, "torch_include_dirs", lambda: [tmp_path / "include"])
    for floor, std in (("201703L", "c++17"), ("202002L", "c++20")):
        (aten / "ATen.h").write_text(f"#pragma once\n#if !defined(_MSC_VER) && __cplusplus < "
                                     f"{floor}\n#error C++ too old\n#endif\n")
        assert headers.torch_cxx_standard() == std
        with_torch = Source("#include <torch/all.h>\n", "t.cu")
        assert backend.cxx_standard(with_torch) == std
    assert backend.cxx_standard(Source("__global__ void k() {}\n", "k.cu")) == "c++17"
