"""What public kernels are written with, on the cpu backend: cub::BlockReduce and cub::WarpReduce
in CUB's own reduction order (checked against that order written out here in float32),
libcu++, and inline PTX translated instruction by instruction."""

from pathlib import Path

import numpy as np
import pytest

from normcheck import errors
from normcheck.formats import BF16
from normcheck.backends import get_backend

HERE = Path(__file__).parent / "cuda"
F = np.float32


@pytest.fixture(scope="module")
def cub():
    return get_backend("cpu").compile_many(HERE / "cub_reduce.cu", [
        "warp_reductions_1024", "warp_reductions_256", "raking_256", "raking_commutative_256",
        "raking_100", "max_2d", "warp_sum_16", "warp_sum_12"])


@pytest.fixture(scope="module")
def ptx():
    return get_backend("cpu").compile_many(HERE / "ptx.cu", [
        "ptx_math", "ptx_shfl", "ptx_cvt", "ptx_vec", "ptx_dead"])


# ---- CUB's orders, written out (cccl cub/warp/specializations/warp_reduce_shfl.cuh, ------------
# ---- cub/block/specializations/block_reduce_*.cuh) --------------------------------------------
def warp_shfl(vals, lw, valid):
    """Lane 0 of WarpReduceShfl: offsets 1, 2, 4 ..., lane l adds lane l+offset while valid."""
    out = [F(v) for v in vals]
    off = 1
    while off < lw:
        out = [F(out[i] + out[i + off]) if i + off <= valid - 1 and i + off < len(out) else
               out[i] for i in range(len(out))]
        off *= 2
    return out[0]


def warp_reductions(x, bt, threads, num_valid, full):
    lw = min(bt, 32)
    aggs = []
    for w in range(-(-threads // 32)):
        wv = lw if (full and bt % lw == 0) or (w * lw + lw <= num_valid) else num_valid - w * lw
        aggs.append(warp_shfl(x[w * 32:(w + 1) * 32], lw, wv))
    agg = aggs[0]
    for w in range(1, -(-bt // 32)):
        if full or w * lw < num_valid:
            agg = F(agg + aggs[w])
    return agg


def raking_layout(threads):
    maxr = min(threads, 32)
    seg = -(-threads // maxr)
    rak = -(-threads // seg)
    pad = int(seg % 2 == 0 and seg > 2)
    return seg, rak, pad


def raking(x, bt, num_valid, full):
    seg, rak, pad = raking_layout(bt)
    if rak == bt:
        return warp_shfl(x, rak, bt if full else num_valid)
    grid = {}
    for t in range(bt):
        grid[t + (t // seg if pad else 0)] = x[t]
    unguarded = bt % rak == 0
    parts = []
    for r in range(rak):
        base = r * (seg + pad)
        p = F(grid[base])
        for it in range(1, seg):
            if (full and unguarded) or r * seg + it < num_valid:
                p = F(p + grid[base + it])
        parts.append(p)
    valid = rak if full else -(-num_valid // seg)
    return warp_shfl(parts, rak, valid if not (full and unguarded) else rak)


def raking_commutative(x, bt):
    sharing = bt - 32
    seg = sharing // 32
    lseg, _, pad = raking_layout(sharing)
    grid = {}
    for t in range(32, bt):
        i = t - 32
        grid[i + (i // lseg if pad else 0)] = x[t]
    parts = []
    for r in range(32):
        p = F(x[r])
        for i in range(seg):
            p = F(p + grid[r * (lseg + pad) + i])
        parts.append(p)
    return warp_shfl(parts, 32, 32)


def _rows(seed, n):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 10 ** rng.uniform(-4, 4, n)).astype(F)


@pytest.mark.parametrize("threads", [1024, 256, 100, 33, 1])
def test_block_reduce_warp_reductions_is_cubs_order(cub, threads):
    # a BlockReduce<float, 1024> over fewer launched threads, the num_valid overload (vLLM)
    for seed in range(5):
        x = _rows(seed, 1024)
        out = np.zeros(1024, F)
        cub["warp_reductions_1024"](1, threads, [out, x, np.int32(threads)])
        want = warp_reductions(x, 1024, threads, threads, threads >= 1024)
        assert out[0].view(np.uint32) == F(want).view(np.uint32), (threads, seed)


def test_block_reduce_full_tile_and_fewer_valid(cub):
    for seed in range(5):
        x = _rows(seed + 10, 256)
        out = np.zeros(256, F)
        cub["warp_reductions_256"](1, 256, [out, x, np.int32(-1)])  # Sum(v): a full tile
        assert out[0] == warp_reductions(x, 256, 256, 256, True)
        cub["warp_reductions_256"](1, 256, [out, x, np.int32(77)])  # only 77 valid
        assert out[0] == warp_reductions(x, 256, 256, 77, False)


@pytest.mark.parametrize("num_valid", [-1, 256, 200, 31])
def test_block_reduce_raking_orders(cub, num_valid):
    for seed in range(4):
        x = _rows(seed + 20, 256)
        out = np.zeros(256, F)
        full = num_valid < 0 or num_valid >= 256
        cub["raking_256"](1, 256, [out, x, np.int32(num_valid)])
        assert out[0] == raking(x, 256, 256 if full else num_valid, full), seed
        if full:
            cub["raking_commutative_256"](1, 256, [out, x, np.int32(num_valid)])
            assert out[0] == raking_commutative(x, 256), seed
        x100 = x[:100].copy()
        o100 = np.zeros(100, F)
        cub["raking_100"](1, 100, [o100, x100, np.int32(num_valid)])
        assert o100[0] == raking(x100, 100, 100 if full else min(num_valid, 100), full), seed


def test_block_reduce_2d_block_with_cub_max(cub):
    x = _rows(3, 128)
    out = np.zeros(128, F)
    cub["max_2d"](1, (32, 4), [out, x])
    assert out[0] == x.max()


@pytest.mark.parametrize("lw,threads", [(16, 32), (12, 12)])
def test_warp_reduce_logical_warps(cub, lw, threads):
    # two 16-lane warps in one hardware warp (shuffles); one 12-lane warp (shared memory: CUB
    # supports a width that is not a power of two for one logical warp per hardware warp)
    x = _rows(4, 32)
    out = np.zeros(32, F)
    cub[f"warp_sum_{lw}"](1, threads, [out, x])
    for w in range(threads // lw):
        seg = x[w * lw:(w + 1) * lw]
        assert out[w * lw] == warp_shfl(seg, lw, lw), w


def test_other_cub_classes_are_named(tmp_path):
    src = tmp_path / "scan.cu"
    src.write_text('#include <cub/block/block_scan.cuh>\nextern "C" __global__ void k(float*) {}\n')
    with pytest.raises(errors.CompileError, match=r"cub::BlockScan .*not supported"):
        get_backend("cpu").compile(src, "k")


def test_libcudacxx_headers_are_usable(tmp_path):
    src = tmp_path / "std.cu"
    src.write_text('#include <cuda/std/functional>\n#include <cuda/std/limits>\n'
                   '#include <cuda/std/type_traits>\n#include <cuda/functional>\n'
                   'extern "C" __global__ void k(float* y) {\n'
                   '  y[0] = cuda::std::plus<>{}(y[1], cuda::std::numeric_limits<float>::epsilon());\n'
                   '  y[2] = cuda::maximum<>{}(y[3], 5.0f);\n}\n')
    k = get_backend("cpu").compile(src, "k")
    y = np.array([0, 1, 0, 2], F)
    k(1, 1, [y])
    assert y[0] == F(1) + np.finfo(F).eps and y[2] == 5


# ---- inline PTX ------------------------------------------------------------------------------------
def test_ptx_math_is_evaluated_accurately(ptx):
    x = np.array([4.0, 2.0, 0.25, 3.0] * 8, F)
    out = np.zeros(32 * 8, F)
    ptx["ptx_math"](1, 32, [out, x])
    o = out.reshape(32, 8).astype(np.float64)
    xd = x.astype(np.float64)
    assert np.array_equal(o[:, 0], (1 / np.sqrt(xd)).astype(F))   # correctly rounded rsqrt
    assert np.array_equal(o[:, 1], (1 / xd).astype(F))
    assert np.array_equal(o[:, 2], np.sqrt(x)) and np.array_equal(o[:, 3], np.sqrt(x))
    assert np.array_equal(o[:, 4], np.exp2(x)) and np.array_equal(o[:, 5], np.log2(x))
    assert np.array_equal(o[:, 6], (xd * xd + 1).astype(F))  # fma: one rounding
    assert np.all(o[:, 7] == 0)  # .ftz flushes the subnormal 1e-40


def test_ptx_shuffles_follow_the_isa(ptx):
    o = np.zeros(32 * 6, np.int32)
    ptx["ptx_shfl"](1, 32, [o])
    o = o.reshape(32, 6)
    lane = np.arange(32)
    v = 100 + lane
    assert list(o[:, 0]) == list(100 + (lane ^ 4))                        # bfly
    assert list(o[:, 1]) == list(np.where(lane <= 26, v + 5, v))          # down, clamped
    assert list(o[:, 2]) == list((lane <= 26).astype(int))                # its predicate
    assert list(o[:, 3]) == list(np.where(lane >= 2, v - 2, v))           # up
    assert list(o[:, 4]) == list(100 + (lane & 16) + 3)                   # idx in 16-lane segments
    assert list(o[:, 5]) == list(lane)                                    # %laneid


def test_ptx_conversions(ptx):
    x = np.array([4.0, 2.0, 0.333, -7.5] * 8, F)
    u = np.zeros(32 * 3, np.uint32)
    ptx["ptx_cvt"](1, 32, [u, x])
    u = u.reshape(32, 3)
    assert np.array_equal(u[:, 0].astype(np.uint16), x.astype(np.float16).view(np.uint16))
    # the reference rounding is normcheck's own (correct, once), not a third party's cast
    bf = BF16.cast(x.astype(np.float64)).view(np.uint16).astype(np.uint32)
    nbf = BF16.cast(-x.astype(np.float64)).view(np.uint16).astype(np.uint32)
    assert np.array_equal(u[:, 1], (bf << 16) | nbf)  # the first operand goes to the upper half
    assert np.array_equal(u[:, 2].view(F), x.astype(np.float16).astype(F))


def test_ptx_vector_memory_and_alignment(ptx):
    x = np.arange(4 * 32 + 4, dtype=F)
    y = np.zeros(4 * 32, F)
    ptx["ptx_vec"](1, 32, [y, x, np.int32(0)])
    assert np.array_equal(y, x[:128].reshape(32, 4)[:, ::-1].ravel())
    with pytest.raises(errors.MisalignedAccess,
                       match=r"misaligned 16-byte load of argument 1 .* at element 1"):
        ptx["ptx_vec"](1, 32, [y, x, np.int32(1)])


def test_ptx_under_an_arch_guard_runs_only_for_that_arch(ptx):
    # __CUDA_ARCH__ is the architecture normcheck presents (sm_90 by default): the guarded
    # mbarrier PTX runs there and names itself; for sm_80 it is dead code, as in nvcc's sm_80 pass
    y = np.zeros(32, F)
    with pytest.raises(errors.Unsupported, match=r"ptx\.cu:73: inline PTX instruction "
                                                  r"`mbarrier\.init\.shared\.b64`"):
        ptx["ptx_dead"](1, 32, [y])
    k80 = get_backend("cpu").compile(HERE / "ptx.cu", "ptx_dead", options={"arch": "sm_80"})
    k80(1, 32, [y])
    assert np.all(y == 1)


def test_unknown_ptx_fails_when_it_runs_naming_it_and_its_line(tmp_path):
    src = tmp_path / "mma.cu"
    src.write_text('extern "C" __global__ void k(float* y) {\n  float a = y[0];\n'
                   '  asm volatile("tanh.approx.f32 %0, %0;\\n\\tmma.sync.aligned.m16n8k16 %0;"'
                   ' : "+f"(a));\n  y[0] = a;\n}\n')
    k = get_backend("cpu").compile(src, "k")
    with pytest.raises(errors.Unsupported,
                       match=r"mma\.cu:3: inline PTX instruction `mma\.sync\.aligned\.m16n8k16`"):
        k(1, 1, [np.ones(1, F)])
