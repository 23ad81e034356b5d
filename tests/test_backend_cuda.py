"""The cuda backend: what can be tested without a GPU (errors, PTX entry lookup), and the GPU
tests proper, marked ``gpu`` (skipped with the reason where there is no usable device)."""

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from normcheck import errors, kernels
from normcheck.backends import cuda, get_backend

FEATURES = Path(__file__).parent / "cuda" / "features.cu"
HAVE_GPU = cuda.unavailable_reason() is None


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is usable here")
def test_without_a_gpu_the_error_says_what_to_install():
    with pytest.raises(errors.BackendUnavailable, match=r"normcheck\[cuda\].*NVIDIA driver"):
        get_backend("cuda")
    assert get_backend("auto").name == "cpu"
    from normcheck import pytest_plugin

    assert "normcheck[cuda]" in (pytest_plugin._gpu_unavailable() or "")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_template_entries_are_found_by_their_mangled_names(tmp_path):
    src = tmp_path / "t.cu"
    src.write_text(
        "#include <cuda_fp16.h>\n"
        "template <typename T, int N> __global__ void rms_norm(T* y, const T* x, float e, int n)"
        " { if (threadIdx.x < n) y[threadIdx.x] = x[threadIdx.x]; }\n"
        "namespace vllm { template <typename T> __global__ void other(T* y) { y[0] = T(1); } }\n"
        'extern "C" __global__ void plain(float* y) { y[0] = 1.f; }\n'
        "void* keep0 = (void*)&rms_norm<__half, 8>;\nvoid* keep1 = (void*)&vllm::other<float>;\n")
    ptx = tmp_path / "t.ptx"
    subprocess.run(["nvcc", "-arch=sm_90", "--ptx", str(src), "-o", str(ptx)], check=True,
                   capture_output=True)
    ents = cuda.ptx_entries(ptx.read_text())
    names = list(ents)
    m = cuda.find_entry("rms_norm<__half, 8>", names)
    assert m.startswith("_Z8rms_norm") and ents[m] == [("u64", 8), ("u64", 8), ("f32", 4),
                                                       ("u32", 4)]
    assert cuda.find_entry("rms_norm<__half,8>", names) == m
    assert cuda.find_entry("vllm::other<float>", names).startswith("_ZN4vllm5other")
    assert cuda.find_entry("plain", names) == "plain"
    with pytest.raises(errors.CompileError, match="not a kernel"):
        cuda.find_entry("missing<int>", names)


# ------------------------------------------------------------------------------------------------
# On a GPU
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_features_run_the_same_on_the_gpu():
    entries = ["shuffles", "early_return", "dyn_reverse", "half_ops", "bf16_ops", "atomics",
               "vec_loads", "scale_kernel<float, 3>", "cg_sum"]
    cpu = get_backend("cpu").compile_many(FEATURES, entries)
    gpu = get_backend("cuda").compile_many(FEATURES, entries)
    rng = np.random.default_rng(0)
    cases = {
        "shuffles": (1, 32, lambda: [np.zeros(18 * 32, np.int32)], 0),
        "early_return": (1, 256, lambda: [np.zeros(256, np.float32), np.int32(100)], 0),
        "dyn_reverse": (3, 64, lambda: [np.zeros(192, np.float32),
                                        np.arange(192, dtype=np.float32)], 256),
        "half_ops": (4, 256, lambda: [np.zeros(4000, np.float16),
                                      rng.standard_normal(1000).astype(np.float32),
                                      rng.standard_normal(1000).astype(np.float32),
                                      np.int32(1000)], 0),
        "vec_loads": (1, 32, lambda: [np.zeros(64, np.float32),
                                      np.arange(64, dtype=np.float32), np.int32(16)], 0),
        "scale_kernel<float, 3>": (1, 32, lambda: [np.zeros(10, np.float32),
                                                   np.arange(10, dtype=np.float32),
                                                   np.int32(10)], 0),
        "cg_sum": (3, 128, lambda: [np.zeros(6, np.float32),
                                    np.arange(384, dtype=np.float32)], 0),
    }
    for name, (g, b, make, shm) in cases.items():
        a1, a2 = make(), None
        a2 = [a.copy() if isinstance(a, np.ndarray) else a for a in a1]
        cpu[name](g, b, a1, shared_mem=shm)
        gpu[name](g, b, a2, shared_mem=shm)
        for x, y in zip(a1, a2):
            if isinstance(x, np.ndarray):
                assert np.array_equal(x, y, equal_nan=True), name


@pytest.mark.gpu
def test_built_in_kernels_agree_bit_for_bit_with_fmad_false():
    from normcheck import agreement

    recs = agreement.compare_backends(fmad=False, rows=8, echo=lambda *a: None)
    bad = [r for r in recs if r["differ"] and not r["approximate"]]
    assert not bad, bad


@pytest.mark.gpu
def test_fmad_true_differences_are_listed():
    from normcheck import agreement

    recs = agreement.compare_backends(fmad=True, rows=8, echo=lambda *a: None,
                                      variants=kernels.variants(norm="layernorm",
                                                                algorithm="naive"))
    assert all("max_ulp_apart" in r for r in recs)


@pytest.mark.gpu
def test_bandwidth_benchmark_runs():
    from normcheck.report import gpu as gpu_section

    g = gpu_section.gpu_bandwidth(rows=1024, cols=4096, repeats=2, echo=lambda *a: None)
    assert g["copy_bandwidth"] > 0 and len(g["kernels"]) == len(kernels.variants(storage="bf16"))
