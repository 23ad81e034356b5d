"""Files as they are shipped: the constructs that stopped real norm files on the cpu backend
(32-bit shared addresses, a __half2 shuffle, __noinline__ with libstdc++, a parameter named
blockDim, <mma.h> included but unused, host symbols of libraries never linked, a member alias
g++ says "changes meaning", nvcc 12's implicit <functional> and runtime signatures, a launch that
deduces template arguments, an NVRTC source, a field CUDA 13 removed), CUDA's library
headers and PyTorch's, and the spec gaps (a float expression, a half ε, a side output, the
architecture given as a define, a clamp below the format's maximum)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from normcheck import check, errors
from normcheck.backends import headers
from paths_support import beside

HERE = Path(__file__).parent
SRC = HERE / "cuda" / "shipped" / "constructs.cu"


@pytest.mark.parametrize("entry, block", [
    ("rms_shared_window", None), ("rms_half2_shuffle", None), ("rms_noinline", None),
    ("rms_blockdim_param", None), ("rms_alias_meaning", 32), ("rms_host_helpers", None)])
def test_constructs_of_real_files_run_and_pass(entry, block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(SRC, entry, "rmsnorm", "fp16", search=0, examples=8, timeout=30,
                           **({"block": block} if block else {}))
    assert r.verdict == "pass", r.render()


def test_a_launch_deduces_the_kernels_template_arguments(tmp_path, monkeypatch):
    """rms_t<<<rows, 128>>>(y, x, ...) in the project's launcher: T deduced from the call."""
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "launcher.toml"
    spec.write_text(f"source = {beside(tmp_path, SRC)!r}\nentry = \"launch_deduced\"\nnorm = \"rmsnorm\"\n"
                    'dtype = "fp16"\n[launch]\nhost = true\n' +
                    "".join(f'[[args]]\nrole = "{r}"\n'
                            for r in ("output", "input", "gamma", "eps", "rows", "cols")))
    r = check.check_kernel(spec=spec, search=0, examples=8, timeout=30)
    assert r.verdict == "pass", r.render()


def test_a_runtime_compiled_source_builds_as_nvrtc_would(tmp_path, monkeypatch):
    """-D__CUDACC_RTC__ (NVRTC's macro): NVIDIA's headers and the shim are read without it, the
    kernel's file with it (rtc.cu stops with #error where it is not defined)."""
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(HERE / "cuda" / "shipped" / "rtc.cu", "rms_rtc", "rmsnorm", "fp16",
                           block=32, defines={"__CUDACC_RTC__": "1"}, search=0, examples=8,
                           timeout=30)
    assert r.verdict == "pass", r.render()
    with pytest.raises(errors.CompileError, match="built as NVRTC builds it"):
        check.check_kernel(HERE / "cuda" / "shipped" / "rtc.cu", "rms_rtc", "rmsnorm", "fp16",
                           block=32, search=0, examples=8)


def test_a_field_cuda_13_removed_is_named_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.cu").write_text(
        "#include <cuda_runtime.h>\n"
        "int clock_khz() { cudaDeviceProp p; cudaGetDeviceProperties(&p, 0); "
        "return p.clockRate; }\n"
        'extern "C" __global__ void k(float* y) { y[threadIdx.x] = 1.f; }\n')
    with pytest.raises(errors.CompileError) as e:
        check.check_kernel(tmp_path / "p.cu", "k", "rmsnorm", "fp32", search=0, examples=2)
    text = str(e.value) + (e.value.diagnostics or "")
    assert "cudaDeviceProp::clockRate was removed in CUDA 13" in text and \
        "cudaDeviceGetAttribute" in text, text


def test_a_call_into_a_library_never_linked_is_a_named_failure(tmp_path, monkeypatch):
    # the module loads (its unresolved symbols stubbed); the call cannot be judged here, and
    # says so naming the function and the kernel's line (exit 2 on the command line)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(errors.Unsupported) as e:
        check.check_kernel(SRC, "rms_calls_host", "rmsnorm", "fp16", search=0, examples=4)
    line = next(i for i, ln in enumerate(SRC.read_text().splitlines(), 1)
                if "HOST: rms_calls_host" in ln)
    msg = str(e.value)
    assert "called library_host_function" in msg and "a library the cpu backend does not " \
        "load" in msg and f"at constructs.cu:{line}" in msg, msg


def _ggml_style(tmp_path, header):
    src = tmp_path / "norm.cu"
    src.write_text(f"""#include <{header}>
#include <cuda_fp16.h>
// ggml-style: the file's host code includes the library; no kernel calls it
static_assert(sizeof(float) == 4, "");
static void host_only() {{ }}
extern "C" __global__ void norm_f32(const float* x, float* dst, const int ncols, const float eps) {{
  const int row = blockIdx.x, tid = threadIdx.x;
  float s = 0.0f, q = 0.0f;
  x += (size_t)row * ncols; dst += (size_t)row * ncols;  // 64-bit row offsets, as ggml's
  for (int c = tid; c < ncols; c += 32) {{ const float v = x[c]; s += v; q += v * v; }}
  for (int o = 16; o > 0; o >>= 1) {{ s += __shfl_xor_sync(0xffffffff, s, o); q += __shfl_xor_sync(0xffffffff, q, o); }}
  const float mean = s / ncols, var = q / ncols - mean * mean;
  const float inv = rsqrtf(var + eps);
  for (int c = tid; c < ncols; c += 32) dst[c] = (x[c] - mean) * inv;
}}
""")
    spec = tmp_path / "norm.toml"
    spec.write_text('source = "norm.cu"\nentry = "norm_f32"\nnorm = "layernorm"\n'
                    'dtype = "fp32"\n[launch]\ngrid = "rows"\nblock = "32"\n'
                    '[[args]]\nrole = "input"\n[[args]]\nrole = "output"\n'
                    '[[args]]\nrole = "cols"\n[[args]]\nrole = "eps"\n')
    return spec


def test_a_file_including_cublas_checks_to_a_verdict(tmp_path, monkeypatch):
    """cuBLAS's headers are fetched once (pip download nvidia-cublas; only include/ kept) --
    unless installed beside normcheck already (a CUDA build of torch brings nvidia-cublas) --
    and the ggml-style file, one-pass variance and all, is judged: it fails on offset rows."""
    from normcheck.backends.cpu.backend import cuda_include_dirs

    monkeypatch.chdir(tmp_path)
    installed = any((d / "cublas_v2.h").is_file() for d in cuda_include_dirs())
    spec = _ggml_style(tmp_path, "cublas_v2.h")
    out = subprocess.run([sys.executable, "-m", "normcheck", "check", "--spec", str(spec),
                          "--search", "0", "--examples", "8"], capture_output=True, text=True,
                         timeout=1200)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "one-pass variance" in out.stdout
    assert installed or "nvidia-cublas" in headers.fetched()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed (pip install torch: a CPU build is enough)")
def test_a_torch_extension_header_including_pybind11_builds(tmp_path, monkeypatch):
    """A project header that includes <pybind11/pybind11.h> (ExLlamaV3's graph.cuh) reaches
    Python.h: torch's extension builds search the running Python's headers, and so does
    normcheck's (it stopped: 'includes Python.h, which is on no include path')."""
    if not headers.python_include_dirs():
        pytest.skip("this Python has no headers (Python.h)")
    monkeypatch.chdir(tmp_path)
    spec = _ggml_style(tmp_path, "cuda_runtime.h")
    (tmp_path / "graph.cuh").write_text("#pragma once\n#include <ATen/Tensor.h>\n"
                                        "#include <pybind11/pybind11.h>\n")
    src = tmp_path / "norm.cu"
    src.write_text('#include "graph.cuh"\n' + src.read_text())
    out = subprocess.run([sys.executable, "-m", "normcheck", "check", "--spec", str(spec),
                          "--search", "0", "--examples", "8"], capture_output=True, text=True,
                         timeout=1200)
    assert out.returncode == 1, out.stderr[-3000:]  # built, run, judged: one-pass variance
    assert "one-pass variance" in out.stdout, out.stdout[-2000:]


def test_an_overloaded_kernel_is_named_by_its_parameter_types(tmp_path, monkeypatch):
    """Overloads of one kernel name (DeepSpeed's normalize_kernels.cu, FasterTransformer: a
    float and a __half kernel of one name) stopped the build in the launch wrappers ("'decltype'
    cannot resolve address of overloaded function").  The entry's parameter types pick one; the
    bare name says how."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.cu").write_text("""#include <cuda_fp16.h>
__global__ void rms(float* y, const float* x, const float* g, float eps, int rows, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  __shared__ float r;
  if (threadIdx.x == 0) { float q = 0.f; for (int i = 0; i < cols; ++i) q += xr[i] * xr[i];
                          r = rsqrtf(q / cols + eps); }
  __syncthreads();
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = xr[i] * r * g[i];
}
__global__ void rms(__half* y, const __half* x, const __half* g, float eps, int rows, int cols) {}
""")
    ok = check.check_kernel(tmp_path / "k.cu", "rms(float*, const float*, const float*, float, "
                            "int, int)", "rmsnorm", "fp32", search=0, examples=2)
    assert ok.verdict in ("pass", "warn") and not ok.failures, ok.render()
    other = check.check_kernel(tmp_path / "k.cu", "rms(__half*, const __half*, const __half*, "
                               "float, int, int)", "rmsnorm", "fp16", search=0, examples=2)
    assert other.verdict == "fail"  # the empty overload: its output never written
    with pytest.raises(errors.CompileError, match="pick one by its parameter types"):
        check.check_kernel(tmp_path / "k.cu", "rms", "rmsnorm", "fp32", search=0, examples=2)


def test_a_missing_library_header_names_the_fix_when_fetching_is_off(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = _ggml_style(tmp_path, "cufftXt.h")
    from normcheck.backends.cpu.backend import cuda_include_dirs

    if any((d / "cufftXt.h").is_file() for d in [*cuda_include_dirs(),
                                                 *headers.library_include_dirs()]):
        # fetched before, or installed beside normcheck (a CUDA build of torch brings them)
        pytest.skip("cuFFT's headers are on this machine already")
    out = subprocess.run([sys.executable, "-m", "normcheck", "check", "--spec", str(spec),
                          "--search", "0", "--examples", "4"], capture_output=True, text=True,
                         env={**os.environ, "NORMCHECK_FETCH_HEADERS": "0"})
    assert out.returncode == 2
    assert "a header of cuFFT" in out.stderr and "normcheck headers fetch nvidia-cufft" in \
        out.stderr


def test_cuda_home_supplies_a_library_header(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inc = tmp_path / "toolkit" / "include"
    inc.mkdir(parents=True)
    (inc / "normcheck_test_lib.h").write_text("#pragma once\ntypedef int normcheck_test_t;\n")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "toolkit"))
    spec = _ggml_style(tmp_path, "normcheck_test_lib.h")
    r = check.check_kernel(spec=spec, search=0, examples=4)
    assert r.verdict == "fail" and "one_pass" in {getattr(c, "key", None) for c in
                                                  [r.cause] if c}, r.render()


def test_headers_know_their_libraries():
    assert headers.library_for("cublas_v2.h") == "nvidia-cublas"
    assert headers.library_for("nvtx3/nvToolsExt.h") == "nvidia-nvtx"
    assert headers.library_for("curand_kernel.h") == "nvidia-curand"
    assert headers.library_for("torch/all.h") is None
    assert headers.missing_header("x.cu:1:10: fatal error: cusparse.h: No such file or "
                                  "directory") == "cusparse.h"


def test_spec_gaps_float_expression_half_eps_side_output_arch_define(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.cu").write_text("""#include <cuda_fp16.h>
extern "C" __global__ void rms(__half* y, float* side_sum, const __half* x, const __half* g,
                               __half eps, float inv_cols, int rows, int cols) {
#if __CUDA_ARCH__ != 800
  y[-1] = __float2half(0.f);  // the define must be the architecture presented
#endif
  const __half* xr = x + (size_t)blockIdx.x * cols;
  __shared__ float s;
  if (threadIdx.x == 0) {
    float a = 0;
    for (int j = 0; j < cols; ++j) { float v = __half2float(xr[j]); a += v * v; }
    s = rsqrtf(a * inv_cols + __half2float(eps));
    side_sum[blockIdx.x] = a;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = __float2half(__half2float(xr[j]) * s * __half2float(g[j]));
}
""")
    (tmp_path / "k.toml").write_text("""source = "k.cu"
entry = "rms"
norm = "rmsnorm"
dtype = "fp16"
defines = { __CUDA_ARCH__ = 800 }
[launch]
grid = "rows"
block = "128"
[[args]]
role = "output"
[[args]]
role = "side"              # written, not judged (TensorRT-LLM's sum_per_token)
name = "sum_per_token"
dtype = "fp32"
size = "rows"
[[args]]
role = "input"
[[args]]
role = "gamma"
[[args]]
role = "eps"
type = "float16"           # ONNX Runtime's: ε in half
[[args]]
role = "const"
name = "inv_cols"
type = "float32"
value = "1 / cols"         # a float expression
[[args]]
role = "rows"
[[args]]
role = "cols"
""")
    r = check.check_kernel(spec=tmp_path / "k.toml", search=0, examples=16)
    assert r.verdict == "pass", r.render()
    assert "sm_80" in r.provenance["arch"]
    with pytest.raises(errors.InvalidArgument, match="__CUDA_ARCH__"):
        check.check_kernel(spec=tmp_path / "k.toml", search=0, examples=4, arch="sm_90")


def test_a_clamp_below_the_formats_largest_value():
    from normcheck.quant import contract as qc
    from normcheck.quant import oracle as qo

    c = qc.resolve({"contract": "vllm", "granularity": "per_tensor", "format": "e4m3",
                    "clamp": 224.0})
    assert list(qo.saturate(c, np.array([300.0, -1000.0, 100.0]))) == [224.0, -224.0, 96.0]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed (pip install torch: a CPU build is enough)")
def test_a_vllm_style_torch_extension_checks_as_shipped(tmp_path):
    """Kernels on c10::Half beside host wrappers on torch::Tensor, AT_DISPATCH, a CUDA guard
    and a stream, in one file: compiled with the installed torch's headers (and the one only
    CUDA builds generate, from the shim), c10's host symbols stubbed: the kernel passes under
    the hf definition it implements."""
    from normcheck.kernels import CUDA_SRC

    spec = CUDA_SRC / "examples" / "torch_extension.toml"  # `check SPEC.toml`: --spec implied
    out = subprocess.run([sys.executable, "-m", "normcheck", "check", str(spec),
                          "--search", "0", "--examples", "8", "--json"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    d = json.loads(out.stdout)
    assert d["verdict"] == "pass", d


def test_an_unchanged_build_skips_preprocessing_and_a_changed_header_does_not(tmp_path,
                                                                            monkeypatch):
    """The manifest of a build (the files the preprocessor read, sizes and times) lets a second
    build of an unchanged file skip preprocessing; editing a header it includes rebuilds."""
    from normcheck.backends import base
    from normcheck.backends.cpu import backend as cpu

    monkeypatch.chdir(tmp_path)
    (tmp_path / "scale.h").write_text("#define SCALE 2.0f\n")
    (tmp_path / "k.cu").write_text('#include "scale.h"\nextern "C" __global__ void k(float* y) '
                                   '{ y[threadIdx.x] = SCALE; }\n')
    src = base.load_source(tmp_path / "k.cu")
    m1 = cpu.build(src, ["k"])
    calls = []
    real = cpu.preprocess
    monkeypatch.setattr(cpu, "preprocess", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert cpu.build(src, ["k"]).path == m1.path and calls == []
    (tmp_path / "scale.h").write_text("#define SCALE 3.25f\n")  # another size: any mtime grain
    m2 = cpu.build(src, ["k"])
    assert calls == [1] and m2.path != m1.path
