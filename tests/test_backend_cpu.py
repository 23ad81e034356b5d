"""The cpu backend: every supported CUDA feature against hand-computed results, and every
failure raising its own typed error while later launches still work."""

from fractions import Fraction
from pathlib import Path

import mpmath
import re

import numpy as np
import pytest

from normcheck import errors, formats
from normcheck.backends import get_backend
from normcheck.formats import FP32

SRC = Path(__file__).parent / "cuda" / "features.cu"
ENTRIES = ["shuffles", "early_return", "dyn_reverse", "half_ops", "bf16_ops", "half2_ops",
           "atomics", "vec_loads", "scale_kernel<float, 3>", "cg_sum", "math_ops", "null_deref",
           "read_past", "divergent_barrier", "endless", "partial_warp_sums", "shared_unwritten"]


@pytest.fixture(scope="module")
def k():
    return get_backend("cpu").compile_many(SRC, ENTRIES)


def test_shuffles_with_widths_and_votes(k):
    out = np.zeros(18 * 32, np.int32)
    k["shuffles"](1, 32, [out])
    out = out.reshape(18, 32)
    lane = np.arange(32)
    v = 100 + lane
    row = 0
    for w in (32, 16, 8):
        seg = lane // w * w
        assert list(out[row]) == list(100 + seg + 3), f"shfl width {w}"
        assert list(out[row + 1]) == list(np.where(lane % w >= 2, v - 2, v)), f"up width {w}"
        assert list(out[row + 2]) == list(np.where(lane % w + 5 < w, v + 5, v)), f"down {w}"
        assert list(out[row + 3]) == list(100 + (lane ^ 4)), f"xor width {w}"
        row += 4
    ballot = np.uint32(sum(1 << i for i in range(0, 32, 3))).view(np.int32)
    assert set(out[12]) == {ballot}
    assert set(out[13]) == {1} and set(out[14]) == {0}
    assert set(out[15]) == {-1}  # __activemask(): all 32 lanes
    assert set(out[16]) == {sum(range(32))}  # __reduce_add_sync
    assert list(out[17]) == [100] * 16 + [116] * 16  # two half-warp groups, own masks


@pytest.mark.parametrize("threads", [32, 16, 1])
def test_a_shuffle_from_a_lane_not_running_is_nan_and_noted(k, threads):
    """A lane the block never launched holds no value: what a shuffle reads from it is NaN
    (every bit set), never another thread's stale value nor memory past the block's own, and
    the launch notes the first such read; a reduction that reads such lanes only into sums it
    discards (shfl_down from offset blockDim.x / 2) is still exact."""
    x = np.arange(1, threads + 1, dtype=np.float32)
    y = np.zeros(2, np.float32)
    kern = k["partial_warp_sums"]
    note = kern(1, threads, [y, x])
    assert y[1] == x.sum() and note == kern.last_note
    if threads == 32:
        assert y[0] == x.sum() and note is None
    else:
        assert np.isnan(y[0])
        assert note.startswith("__shfl_xor_sync in block (0,0,0): thread 0 read lane "
                                         "16 of its warp (thread 16), which was never launched "
                                         f"(a block of {threads} thread")


@pytest.mark.parametrize("workers", [1, 2])
def test_static_shared_memory_starts_every_block_as_nan(k, workers):
    """A __shared__ array is NaN bytes at the start of every block (as dynamic shared memory
    is): a block reading slots it never wrote gets NaN, whether it is the first block on its OS
    thread (a thread_local starts as zeros) or follows one that wrote there (7.0)."""
    y = np.zeros(6 * 64, np.float32)
    k["shared_unwritten"](6, 64, [y], workers=workers)
    y = y.reshape(6, 64)
    assert np.array_equal(y[:, :32], np.repeat(1.0 + np.arange(6, dtype=np.float32), 32)
                          .reshape(6, 32))
    assert np.all(y[:, 32:].view(np.uint32) == 0xFFFFFFFF)


def test_a_launchs_static_shared_total_is_its_own_kernels(tmp_path):
    """Two kernels of one build on one OS thread: the first's 40 KiB of static shared memory
    stays registered on the thread, but the second's launch counts only its own 16 KiB (it was
    refused as 56 KiB, above nvcc's 48 KiB, once a file's kernels shared a build); a kernel
    declaring 56 KiB itself is still refused."""
    src = tmp_path / "two.cu"
    src.write_text("""
__global__ void big(float* y) { __shared__ float a[10240]; a[threadIdx.x] = 1.f;
  __syncthreads(); y[threadIdx.x] = a[threadIdx.x]; }
__global__ void small(float* y) { __shared__ float b[4096]; b[threadIdx.x] = 2.f;
  __syncthreads(); y[threadIdx.x] = b[threadIdx.x]; }
__global__ void both(float* y) { __shared__ float a[10240]; __shared__ float b[4096];
  a[threadIdx.x] = 1.f; b[threadIdx.x] = 2.f; __syncthreads();
  y[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x]; }
""")
    ks = get_backend("cpu").compile_many(src, ["big", "small", "both"])
    y = np.zeros(32, np.float32)
    ks["big"](1, 32, [y], workers=1)
    ks["small"](1, 32, [y], workers=1)
    assert np.all(y == 2.0)
    with pytest.raises(errors.KernelError, match="static __shared__ memory"):
        ks["both"](1, 32, [y], workers=1)


def test_early_return_before_barrier_of_the_whole_block_runs(k):
    y = np.full(256, -1.0, np.float32)
    k["early_return"](1, 256, [y, np.int32(256)])
    assert list(y) == [float(255 - t) for t in range(256)]


@pytest.mark.parametrize("live", [100, 1])
@pytest.mark.parametrize("hazards", [False, True])
def test_threads_that_return_before_a_barrier_are_not_waited_for(k, live, hazards):
    """`if (tid >= n) return; ... __syncthreads();`: since Volta a barrier waits only for the
    threads that have not exited (CUDA Programming Guide, independent thread scheduling), so on
    the sm_90 presented it is sound -- a note naming the pre-Volta rule, never a failure (#64:
    it failed as a divergent barrier), on the plain and the hazard build alike."""
    y = np.full(256, -1.0, np.float32)
    note = k["early_return"](1, 256, [y, np.int32(live)], hazards=hazards)
    assert list(y[:live]) == [float(live - 1 - t) for t in range(live)]
    assert note and re.search(r"features\.cu:36\] was reached only by the threads of its "
                              r"block that had not exited", note), note
    assert "undefined on sm_6x and older" in note


def test_dynamic_shared_memory(k):
    x = np.arange(3 * 64, dtype=np.float32)
    y = np.zeros_like(x)
    k["dyn_reverse"](3, 64, [y, x], shared_mem=64 * 4)
    assert np.array_equal(y.reshape(3, 64), x.reshape(3, 64)[:, ::-1])


def test_half_conversions_and_arithmetic_match_numpy(k):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(1000) * 300).astype(np.float32)
    b = (rng.standard_normal(1000) * 3).astype(np.float32)
    a[:4] = [65519.0, 65520.0, 1e-8, -0.0]
    h = np.zeros(4000, np.float16)
    k["half_ops"](4, 256, [h, a, b, np.int32(1000)])
    with np.errstate(over="ignore"):
        x, y = a.astype(np.float16), b.astype(np.float16)
        want = np.stack([x, x + y, x * y, x * y + x], axis=1).ravel()
    assert np.array_equal(h, want, equal_nan=True)


def test_bf16_conversions_and_arithmetic_round_once(k):
    # each bf16 operation is the exact result correctly rounded once (normcheck.formats rounds
    # from float64; a sum or product of two bf16 values and a float32 quotient are exact there)
    rng = np.random.default_rng(1)
    bf = formats.BF16
    a = (rng.standard_normal(1000) * 1e3).astype(np.float32)
    b = (rng.standard_normal(1000) + 0.5).astype(np.float32)
    h = np.zeros(4000, bf.dtype)
    k["bf16_ops"](4, 256, [h, a, b, np.int32(1000)])
    x = bf.round_array(a.astype(np.float64))
    y = bf.round_array(b.astype(np.float64))
    div = bf.round_array((x.astype(np.float32) / y.astype(np.float32)).astype(np.float64))
    want = np.stack([x, bf.round_array(x + y), bf.round_array(x * y), div], axis=1).ravel()
    assert np.array_equal(h.astype(np.float64), want, equal_nan=True)


def test_half2(k):
    rng = np.random.default_rng(2)
    a = rng.standard_normal(64).astype(np.float16)
    b = rng.standard_normal(64).astype(np.float16)
    out = np.zeros(128, np.float16)
    k["half2_ops"](1, 32, [out, a, b])
    assert np.array_equal(out[:64], a + b) and np.array_equal(out[64:], a * b)


def test_atomics_across_blocks(k):
    c = np.array([0, -1, 0, 0, 0, 0], np.int32)
    f = np.zeros(1, np.float32)
    k["atomics"](4, 64, [c, f], workers=2)
    assert list(c) == [256, 255, -3, 7, 1, 42]
    assert f[0] == 128.0


def test_vector_loads(k):
    x = np.arange(64, dtype=np.float32)
    y = np.zeros_like(x)
    k["vec_loads"](1, 32, [y, x, np.int32(16)])
    assert np.array_equal(y.reshape(16, 4), x.reshape(16, 4)[:, ::-1])


def test_template_entry(k):
    kern = k["scale_kernel<float, 3>"]
    assert [p.ctype for p in kern.params] == ["float*", "const float*", "int"]
    x = np.arange(10, dtype=np.float32)
    y = np.zeros_like(x)
    kern(1, 32, [y, x, 10])
    assert np.array_equal(y, 3 * x)


def test_cooperative_groups(k):
    x = np.random.default_rng(3).integers(-50, 50, 3 * 128).astype(np.float32)
    y = np.zeros(6, np.float32)
    k["cg_sum"](3, 128, [y, x])
    assert np.array_equal(y[:3], x.reshape(3, 128).sum(axis=1))
    assert list(y[3:]) == [28.0] * 3


def test_math_intrinsics(k):
    rng = np.random.default_rng(4)
    x = np.abs(rng.standard_normal(500)).astype(np.float32) * np.float32(7)
    x[:3] = [np.float32(2.0**-140), np.float32(3.0e38), np.float32(1.0)]
    y = np.zeros(6 * 500, np.float32)
    k["math_ops"](2, 256, [y, x, np.int32(500)])
    y = y.reshape(500, 6)
    assert np.array_equal(y[:, 0], np.sqrt(x))
    with mpmath.workprec(200):
        want = [FP32.round(1 / mpmath.sqrt(mpmath.mpf(float(v)))) for v in x]
    assert list(y[:, 1].astype(np.float64)) == want  # correctly rounded
    fma = [FP32.round(Fraction(float(v)) ** 2 - 1) for v in x]
    assert list(y[:, 2].astype(np.float64)) == fma  # a true fused multiply-add
    with np.errstate(over="ignore"):
        assert np.array_equal(y[:, 3], x * np.float32(3) + (x + np.float32(1)))
        assert np.array_equal(y[:, 4], np.maximum(x, 2) - np.minimum(x, 2))
        assert np.array_equal(y[:, 5], np.float32(1) / x)


def test_rsqrt_rn_is_correctly_rounded_on_hard_cases(k):
    # many random bit patterns across the whole float32 range
    rng = np.random.default_rng(5)
    bits = rng.integers(1, 0x7F800000, 20000, dtype=np.uint32)
    x = bits.view(np.float32)
    y = np.zeros(6 * x.size, np.float32)
    k["math_ops"]((x.size + 255) // 256, 256, [y, x, np.int32(x.size)])
    got = y.reshape(-1, 6)[:, 1].astype(np.float64)
    with mpmath.workprec(120):
        want = np.array([FP32.round(1 / mpmath.sqrt(mpmath.mpf(float(v)))) for v in x])
    assert np.array_equal(got, want)


def test_arguments_are_checked(k):
    kern = k["read_past"]
    with pytest.raises(errors.InvalidArgument, match=r"args\[1\]\.dtype='float64'.*float32"):
        kern(1, 32, [np.zeros(4, np.float32), np.zeros(4), 4])
    with pytest.raises(errors.InvalidArgument, match=r"3 arguments"):
        kern(1, 32, [np.zeros(4, np.float32)])
    with pytest.raises(errors.InvalidArgument, match=r"np\.int32"):
        kern(1, 32, [np.zeros(4, np.float32), np.zeros(4, np.float32), np.float32(4)])
    with pytest.raises(errors.InvalidArgument, match=r"block.x=2048.*1024"):
        kern(1, 2048, [np.zeros(4, np.float32), np.zeros(4, np.float32), 4])


def test_failures_are_typed_and_the_process_carries_on(k):
    y = np.zeros(64, np.float32)
    x = np.arange(64, dtype=np.float32)
    with pytest.raises(errors.KernelCrash, match="null pointer read"):
        k["null_deref"](1, 32, [y])
    with pytest.raises(errors.OutOfBounds,
                       match=r"read of element 64 of argument 1 `x` .*64 elements") as e:
        k["read_past"](1, 128, [y, x, np.int32(64)], names=["y", "x", "n"])
    assert e.value.kind == "out_of_bounds" and e.value.details["name"] == "x"
    with pytest.raises(errors.KernelDeadlock, match=r"block \(0,0,0\).*__syncthreads.*__syncwarp"):
        k["divergent_barrier"](1, 32, [y])
    with pytest.raises(errors.KernelTimeout, match="2 s limit"):
        k["endless"](1, 32, [y], timeout=2)
    # and the next launch in the same process works
    x2 = np.arange(64, dtype=np.float32)
    y2 = np.zeros_like(x2)
    k["read_past"](1, 63, [y2, x2, np.int32(63)])
    assert np.array_equal(y2[:63], x2[:63])


def test_compile_error_points_at_the_users_file_and_line(tmp_path):
    src = tmp_path / "broken.cu"
    src.write_text('extern "C" __global__ void k(float* y) {\n  y[0] = undefined_thing;\n}\n')
    with pytest.raises(errors.CompileError, match=r"broken\.cu:2:\d+: error: 'undefined_thing'"):
        get_backend("cpu").compile(src, "k")


def test_unsupported_features_say_so(tmp_path):
    src = tmp_path / "cub.cu"
    src.write_text('#include <cub/cub.cuh>\nextern "C" __global__ void k(float* y) {\n'
                   '  using S = cub::BlockScan<float, 128>;\n  S* s = nullptr; (void)s; S t; }\n')
    with pytest.raises(errors.CompileError, match=r"cub::BlockScan is not supported"):
        get_backend("cpu").compile(src, "k")
    src.write_text('#include <cub/block/block_radix_sort.cuh>\nextern "C" __global__ void k(float* y) {}\n')
    with pytest.raises(errors.CompileError, match=r"cub::BlockRadixSort .*is not supported"):
        get_backend("cpu").compile(src, "k")
    with pytest.raises(errors.CompileError, match="`__ldg_weird` is a CUDA feature"):
        get_backend("cpu").compile('extern "C" __global__ void k(float* y) { __ldg_weird(y); }',
                                   "k")


def test_untranslated_ptx_fails_when_it_runs_not_when_it_is_seen():
    src = ('extern "C" __global__ void k(float* y, int run) {\n'
           '  if (run) asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "l"(y), "l"(y));\n'
           '  y[0] = 1;\n}\n'
           '__device__ void never_called(unsigned long long* p) {\n'
           '  asm volatile("cvta.to.sharedd.u64 %0, %0;" : "+l"(*p));  // a typo nvcc never meets\n'
           '}\n')
    k = get_backend("cpu").compile(src, "k")
    y = np.zeros(1, np.float32)
    k(1, 1, [y, np.int32(0)])  # compiled, and the PTX that does not run is harmless
    assert y[0] == 1
    with pytest.raises(errors.Unsupported, match=r"<source>:2: inline PTX instruction "
                                                  r"`cp\.async\.ca\.shared\.global`.*this one ran"):
        k(1, 1, [y, np.int32(1)])


def test_missing_entry_is_a_compile_error():
    with pytest.raises(errors.CompileError, match="entry 'nope' is not a kernel of <source>"):
        get_backend("cpu").compile('extern "C" __global__ void k(float* y) {}', "nope")


def test_unknown_backend():
    with pytest.raises(errors.InvalidArgument, match="backend='tpu'"):
        get_backend("tpu")


def test_a_worker_hands_over_after_its_module_budget(monkeypatch):
    """Loaded modules are never unloaded (each keeps its code and its fiber stacks), so after
    MODULES_PER_WORKER distinct modules a fresh worker takes over; launches carry on.  (A user
    build has a worker of its own; the built-ins share one: these sources are taken for
    built-ins.)"""
    from normcheck.backends.cpu import backend as cpu, workers
    monkeypatch.setattr(workers, "MODULES_PER_WORKER", 2)
    monkeypatch.setattr(cpu, "is_own", lambda src: True)
    pids = []
    for i in range(5):
        k = get_backend("cpu").compile(
            f'extern "C" __global__ void k(float* y) {{ y[threadIdx.x] = {i} + threadIdx.x; }}',
            "k")
        y = np.zeros(64, np.float32)
        k(1, 64, [y])
        assert (y == i + np.arange(64)).all()
        pids.append(k.module.worker().proc.pid)
        assert len(k.module.worker().loaded) <= 2
    assert len(set(pids)) >= 2, pids  # 5 modules over a budget of 2: at least one hand-over


def test_a_worker_out_of_address_space_hands_over(monkeypatch):
    """With the module budget out of the way and a 1000 MiB address space, the third module's
    1024 fiber stacks (~266 MiB, measured: the worker's VmSize grows 496 → 762 → 1028 MiB over
    three such modules) do not fit: the launch runs again in a fresh worker instead of failing."""
    from normcheck.backends.cpu import backend as cpu, workers
    monkeypatch.setattr(workers, "MODULES_PER_WORKER", 100)
    monkeypatch.setattr(cpu, "is_own", lambda src: True)  # one worker for them all, as built-ins
    monkeypatch.setenv("NORMCHECK_WORKER_MEMORY_MB", "1000")
    cpu.WORKERS.any()._kill()
    try:
        pids = []
        for i in range(4):
            k = get_backend("cpu").compile(
                f'extern "C" __global__ void k(float* y) {{ y[threadIdx.x] = {i} - 1.f; }}', "k")
            y = np.zeros(1024, np.float32)
            k(1, 1024, [y])
            assert (y == i - 1).all()
            pids.append(k.module.worker().proc.pid)
        assert len(set(pids)) >= 2, pids
    finally:
        cpu.WORKERS.any()._kill()  # the next test's worker starts with the usual limit
