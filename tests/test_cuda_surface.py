"""The CUDA surface public norm kernels use, on the cpu backend: kernels in the style of each
construct that once stopped it check from a spec without edits (tests/cuda/styles/), CUB's extra
classes move data as CUB does, a guarded entry says what reveals it, and the architecture
presented is stated."""

import json
from pathlib import Path

import numpy as np
import pytest

from normcheck import check, errors
from normcheck.backends import get_backend

HERE = Path(__file__).parent / "cuda"
STYLES = HERE / "styles"


@pytest.mark.parametrize("spec", ["rms_aligned", "rms_bf16", "ln_kvp", "rms_params", "rms_host",
                                  "rms_host_ex", "rms_host_void_args", "rms_pdl"])
def test_kernels_in_public_styles_check_from_their_spec(spec):
    r = check.check_kernel(spec=STYLES / f"{spec}.toml", search=0, examples=8)
    # every one is sound (computed in float, rounded once): pass, or warn where its summation
    # order is a plain sequential one (rms_params, ln_kvp's mean)
    assert r.verdict in ("pass", "warn"), r.render()
    assert r.provenance["arch"].startswith("sm_90")


@pytest.mark.parametrize("how", [1, 2])
def test_the_runtimes_untyped_launches_run_the_kernel(how, tmp_path):
    """#56: FlashInfer's launchers call cudaLaunchKernel((void*)kernel, grid, block, args, smem,
    stream) with a void* args[] -- and cudaLaunchCooperativeKernel, and a reinterpret_cast: the
    kernel's parameters come from its instantiation, so each runs as the runtime runs it (it was
    refused: "their types are unknown here"), the same rows as the <<<>>> launch."""
    text = (STYLES / "rms_host_void_args.toml").read_text().replace('value = "0"',
                                                                    f'value = "{how}"')
    assert f'value = "{how}"' in text
    spec = tmp_path / "spec.toml"
    spec.write_text(text.replace('source = "styles.cu"', f'source = "{STYLES / "styles.cu"}"'))
    r = check.check_kernel(spec=spec, search=0, examples=8, include=(str(STYLES),))
    ref = check.check_kernel(spec=STYLES / "rms_host.toml", search=0, examples=8)
    assert r.verdict == "pass", r.render()
    assert [f.max_ulp for f in r.families] == [f.max_ulp for f in ref.families]


def test_a_file_that_needs_cxx20_is_built_in_it_and_says_so():
    """#56: a file using concepts and std::span stopped at '-std=c++17'; the standard g++ names
    in its diagnostics is the one it is built in, said in the provenance (C++20 is what the file
    uses, not a guess: a C++17 file stays in C++17)."""
    r = check.check_kernel(STYLES / "rms_cpp20.cu", "rms20<__half>", "rmsnorm", "fp16",
                           search=0, examples=8)
    assert r.verdict == "pass", r.render()
    assert "c++20" in json.dumps(r.provenance), r.provenance
    plain = check.check_kernel(spec=STYLES / "rms_aligned.toml", search=0, examples=8)
    assert "c++20" not in json.dumps(plain.provenance)


def test_the_standard_named_in_gs_diagnostics():
    from normcheck.backends.cpu.backend import needed_std

    assert needed_std("note: 'concept' only available with '-std=c++20' or '-fconcepts'",
                      "c++17") == "c++20"
    assert needed_std("'std::span' is only available from C++20 onwards", "c++17") == "c++20"
    assert needed_std("note: only available with '-std=c++23'", "c++20") == "c++23"
    assert needed_std("only available with '-std=c++20'", "c++20") is None  # there already
    assert needed_std("error: 'x' was not declared in this scope", "c++17") is None


def test_a_kernel_held_as_a_void_pointer_is_refused_saying_what_runs(tmp_path):
    text = (STYLES / "rms_host_void_args.toml").read_text().replace('value = "0"', 'value = "3"')
    spec = tmp_path / "spec.toml"
    spec.write_text(text.replace('source = "styles.cu"', f'source = "{STYLES / "styles.cu"}"'))
    with pytest.raises(errors.Unsupported) as e:  # never a pass: the check stops, saying why
        check.check_kernel(spec=spec, search=0, examples=8, include=(str(STYLES),))
    assert "held as a void*" in str(e.value) and "cudaLaunchKernel((void*)kernel" in str(e.value)


def test_the_struct_argument_carries_every_pointer_and_the_host_launcher_runs_the_kernel():
    r = check.check_kernel(spec=STYLES / "rms_params.toml", search=0, examples=8)
    assert not [f for f in r.failures if "rstd" in f.detail]  # rstd written through the struct
    host = check.check_kernel(spec=STYLES / "rms_host.toml", search=0, examples=8)
    direct = check.check_kernel(spec=STYLES / "rms_aligned.toml", search=0, examples=8)
    # a host launcher gets every run a direct launch does, the large-index runs included (its
    # grid probed one block per row, #66: they were not made through a host launcher)
    same = [f.family for f in host.families]
    assert same == [f.family for f in direct.families]
    assert {"large_index", "large_index_u32"} <= set(same)
    assert [f.max_ulp for f in host.families] == pytest.approx(
        [f.max_ulp for f in direct.families if f.family in same], abs=0.51)  # one ulp at most


def test_an_entry_behind_an_arch_guard_says_which_guard_and_what_reveals_it():
    with pytest.raises(errors.CompileError, match=r"defined at line \d+, under `#if "
                                                  r"__CUDA_ARCH__ >= 800`.*__CUDA_ARCH__ is 750 "
                                                  r".*--arch"):
        check.check_kernel(spec=STYLES / "rms_bf16.toml", search=0, examples=8, arch="sm_75")


def test_an_entry_behind_an_ifdef_names_the_define(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text('#ifdef ENABLE_FP32\nextern "C" __global__ void k(float* y) {}\n#endif\n')
    with pytest.raises(errors.CompileError, match=r"under `#if defined\(ENABLE_FP32\)`.*-D "
                                                  r"ENABLE_FP32"):
        get_backend("cpu").compile(src, "k")
    get_backend("cpu").compile(src, "k", defines={"ENABLE_FP32": None})


@pytest.fixture(scope="module")
def cubx():
    return get_backend("cpu").compile_many(HERE / "cub_extra.cu", [
        "argmax_abs", "load_direct", "load_striped", "load_transpose", "warp_striped",
        "exchange_store"])


def test_argmax_over_key_value_pairs(cubx):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 300)).astype(np.float32)
    x[2, [7, 200]] = 9.0  # a tie: the smaller key wins
    col = np.zeros(5, np.int32)
    val = np.zeros(5, np.float32)
    cubx["argmax_abs"](5, 64, [col, val, x, np.int32(300)])
    want = np.argmax(np.abs(x), axis=1)  # numpy takes the first of equal maxima, as ArgMax does
    assert list(col) == list(want) and np.array_equal(val, np.abs(x)[np.arange(5), want])


def _arrangement(kind, T=40, N=3, valid=100):
    out = np.full((T, N), -7)
    for t in range(T):
        for k in range(N):
            i = {"blocked": t * N + k, "striped": t + T * k,
                 "warp": (t // 32) * 32 * N + t % 32 + 32 * k}[kind]
            out[t, k] = i if i < valid else -7
    return out.ravel()


@pytest.mark.parametrize("entry,kind", [("load_direct", "blocked"), ("load_striped", "striped"),
                                        ("load_transpose", "blocked"), ("warp_striped", "warp")])
def test_block_load_arrangements_with_a_guard(cubx, entry, kind):
    x = np.arange(120, dtype=np.int32)
    out = np.zeros(120, np.int32)
    cubx[entry](1, 40, [out, x, np.int32(100)])
    assert np.array_equal(out, _arrangement(kind))


def test_exchange_then_striped_store_is_the_identity(cubx):
    x = np.arange(120, dtype=np.int32)
    out = np.full(120, -1, np.int32)
    cubx["exchange_store"](1, 40, [out, x, np.int32(110)])
    assert np.array_equal(out[:110], x[:110]) and np.all(out[110:] == -1)


def test_what_cub_still_lacks_is_a_compile_error_naming_it(tmp_path):
    src = tmp_path / "sort.cu"
    src.write_text('#include <cub/cub.cuh>\nextern "C" __global__ void k(float* y) {\n'
                   '  using S = cub::BlockRadixSort<float, 128, 4>; S* s = nullptr; (void)s; S t; }\n')
    with pytest.raises(errors.CompileError, match=r"cub::BlockRadixSort is not supported"):
        get_backend("cpu").compile(src, "k")


def test_libcudacxx_headers_that_include_time_h_build_beside_clock(tmp_path, monkeypatch):
    """#56: <cuda/std/chrono>, <atomic>, <barrier> pull <time.h>, and libcu++ refuses one with
    a `clock` macro ("requires the C++ compatibility <time.h> header") -- the shim defined CUDA's
    clock() as one.  The user's clock() calls are now renamed in translation instead; a kernel
    that includes them and calls clock() builds and passes."""
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "k.cu"
    src.write_text("""
#include <cuda/std/chrono>
#include <cuda/std/atomic>
#include <cuda/std/barrier>
#include <cuda/std/cmath>
extern "C" __global__ void rms(float* y, const float* x, const float* g, float eps, int rows,
                               int cols) {
  const long long t0 = clock();
  __shared__ float part[32];
  __shared__ float tot;
  const float* xr = x + (size_t)blockIdx.x * cols;
  float ss = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) ss += xr[j] * xr[j];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  float t = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.f;
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  if (threadIdx.x == 0) tot = t;
  __syncthreads();
  const float r = 1.f / cuda::std::sqrt(tot / cols + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = xr[j] * r * g[j] + (clock() < t0 - (1ll << 62) ? 1.f : 0.f);
}
""")
    r = check.check_kernel(src, "rms", "rmsnorm", "fp32", search=0, examples=4)
    assert r.verdict == "pass", r.render()
