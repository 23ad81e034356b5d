"""The programs of a launch run together (normcheck/backends/triton/grid.py): every kernel here
runs batched and one program at a time on the same inputs and must give the same bytes (or the
same fault); control flow that differs between programs splits a batch and undoes its stores;
races a batch alone can see are named.  Skipped where Triton is not installed."""

from __future__ import annotations

import importlib.util

import ml_dtypes
import numpy as np
import pytest

if importlib.util.find_spec("triton") is None:
    pytest.skip("Triton is not installed (pip install 'normcheck[triton]')",
                allow_module_level=True)

from normcheck.backends.triton import executor as ex  # noqa: E402 -- before Triton
from triton.runtime import interpreter as ti  # noqa: E402
import triton.language as tl  # noqa: E402

_KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def rms(Y, X, W, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < N
    x = tl.load(X + row * stride + cols, mask=m, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(Y + row * stride + cols, (x * r * w).to(tl.bfloat16), mask=m)


@triton.jit
def persistent(Y, X, W, stride, R, N, eps, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    m = cols < N
    w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
    for row in range(tl.program_id(0), R, tl.num_programs(0)):
        x = tl.load(X + row * stride + cols, mask=m, other=0.0).to(tl.float32)
        r = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
        tl.store(Y + row * stride + cols, (x * r * w).to(tl.bfloat16), mask=m)


@triton.jit
def ragged(Y, X, W, stride, L, N, eps, BLOCK: tl.constexpr):
    # each row's own length, read from memory: the loop's trip count differs between programs
    row = tl.program_id(0)
    n = tl.load(L + row)
    ss = 0.0
    for c0 in range(0, n, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride + c, mask=c < n, other=0.0).to(tl.float32)
        ss += tl.sum(x * x, axis=0)
    i = 0
    while i * BLOCK < n:
        c = i * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride + c, mask=c < n, other=0.0).to(tl.float32)
        tl.store(Y + row * stride + c, (x * tl.rsqrt(ss / n + eps)).to(tl.bfloat16), mask=c < n)
        i += 1


@triton.jit
def branchy(X, F, stride, N, BLOCK: tl.constexpr):
    # an in-place store, then an if on a loaded flag: the batch splits after storing
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    m = c < N
    p = X + row * stride + c
    x = tl.load(p, mask=m, other=0.0)
    tl.store(p, x + 1.0, mask=m)
    if tl.load(F + row) > 0:
        tl.store(p, tl.load(p, mask=m) * 2.0, mask=m)
    else:
        tl.store(p, tl.load(p, mask=m) - 3.0, mask=m)


@triton.jit
def _welford(m1, s1, n1, m2, s2, n2):
    n = n1 + n2
    d = m2 - m1
    w = tl.where(n > 0, n2 / tl.where(n > 0, n, 1.0), 0.0)
    return m1 + d * w, s1 + s2 + d * d * n1 * w, n


@triton.jit
def shapes(O, X, R: tl.constexpr, C: tl.constexpr):
    # a 2-D block per program: reductions on either axis, a combine function, a scan,
    # transposes, reshapes, expand_dims and broadcasts
    b = tl.program_id(0)
    r = tl.arange(0, R)
    c = tl.arange(0, C)
    x = tl.load(X + b * R * C + r[:, None] * C + c[None, :])
    rows = tl.sum(x, axis=1)
    cols = tl.max(x, axis=0)
    mean, m2, _n = tl.reduce((x, tl.zeros_like(x), tl.full(x.shape, 1.0, tl.float32)), 1,
                             _welford)
    t = tl.trans(x)
    y = tl.reshape(t, (R * C,))
    scan = tl.cumsum(tl.sum(x.T, axis=0), axis=0)
    am = tl.argmax(rows, axis=0)
    out = O + b * (4 * R + C + R * C + 1)
    tl.store(out + r, rows)
    tl.store(out + R + c, cols)
    tl.store(out + R + C + r, mean)
    tl.store(out + 2 * R + C + r, m2)
    tl.store(out + 3 * R + C + r, scan)
    tl.store(out + 4 * R + C + tl.arange(0, R * C), y)
    tl.store(out + 4 * R + C + R * C, am.to(tl.float32))


@triton.jit
def atomic_total(S, X, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    x = tl.load(X + row * N + c, mask=c < N, other=0.0)
    tl.atomic_add(S, tl.sum(x, axis=0))


@triton.jit
def same_store(S, X):
    tl.store(S, tl.load(X))


@triton.jit
def next_row_in_place(X, N, BLOCK: tl.constexpr):
    # reads the next row and writes its own, in place: a race on a GPU
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    m = c < N
    nxt = tl.load(X + (row + 1) * N + c, mask=m & (row + 1 < tl.num_programs(0)), other=0.0)
    tl.store(X + row * N + c, nxt * 0.5, mask=m)


@triton.jit
def described(Y, X, R, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    d = tl.make_tensor_descriptor(X, shape=[R, N], strides=[N, 1], block_shape=[1, BLOCK])
    x = d.load([row, 0])
    c = tl.arange(0, BLOCK)
    tl.store(Y + row * N + c[None, :], x * 2.0)
'''


@pytest.fixture(scope="module")
def ns(tmp_path_factory):
    path = tmp_path_factory.mktemp("grid") / "grid_kernels.py"
    path.write_text(_KERNELS)
    return ex.load_module(_KERNELS, str(path), "normcheck_grid")


def _launch(ns, name, grid, args, constexprs=("BLOCK",), batched=True, order=None):
    """(the arrays after the launch, its note); the arrays are copies, the launch's own."""
    fn, meta = ex.kernel_function(ns, name)
    params = list(fn.arg_names)
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    note = ex.run(fn, meta, params, set(constexprs), grid, args, params, None, order,
                  batched=batched)
    return [a for a in args if isinstance(a, np.ndarray)], note


def _same(ns, name, grid, args, constexprs=("BLOCK",), order=None):
    """Batched and one at a time: the same bytes in every array; the batched launch's note."""
    got, note = _launch(ns, name, grid, args, constexprs, True, order)
    want, _ = _launch(ns, name, grid, args, constexprs, False, order)
    for g, w in zip(got, want):
        assert g.tobytes() == w.tobytes()
    return got, note


@pytest.fixture
def small_batches(monkeypatch):
    """Batches of a few programs: a launch spans many, and races between them are seen."""
    monkeypatch.setattr(ex, "BATCH_LANES", 3 * 256)
    monkeypatch.setattr(ex, "FIRST_BATCH", 2)
    ex._LANES.clear()
    yield
    ex._LANES.clear()


def _rows(r, c, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((r, c)) * 3).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal(c).astype(ml_dtypes.bfloat16)
    return x, w


@pytest.mark.parametrize("rows, cols", [(1, 7), (37, 100), (130, 256)])
def test_a_row_a_program_gives_the_same_bytes(ns, rows, cols):
    x, w = _rows(rows, cols)
    y = np.zeros_like(x)
    block = 1 << (cols - 1).bit_length()
    got, note = _same(ns, "rms", (rows,), [y, x, w, np.int32(cols), np.int32(cols),
                                            np.float32(1e-6), block])
    assert note is None
    assert np.isfinite(got[0].astype(np.float32)).all()


@pytest.mark.parametrize("order", [None, "reverse"])
def test_batches_of_a_few_programs_give_the_same_bytes(ns, small_batches, order):
    x, w = _rows(41, 200, seed=1)
    ids = list(range(40, -1, -1)) if order else None
    _same(ns, "rms", (41,), [np.zeros_like(x), x, w, np.int32(200), np.int32(200),
                             np.float32(1e-6), 256], order=ids)


def test_a_persistent_loop_runs_batched_with_a_value_per_program(ns):
    x, w = _rows(64, 96, seed=2)
    # 64 rows on 8 programs: every program's loop takes 8 trips, its row a value per program
    _, note = _same(ns, "persistent", (8,), [np.zeros_like(x), x, w, np.int32(96),
                                             np.int32(64), np.int32(96), np.float32(1e-6), 128])
    assert note is None
    # 64 rows on 7: program 0 takes 10 trips, the others 9 -- two groups, none said
    _, note = _same(ns, "persistent", (7,), [np.zeros_like(x), x, w, np.int32(96),
                                             np.int32(64), np.int32(96), np.float32(1e-6), 128])
    assert note is None


def test_trip_counts_read_from_memory_split_the_batch_and_say_so(ns):
    x, w = _rows(12, 300, seed=3)
    # 16 columns a trip: every row its own trip count (the last none), so every program alone
    lengths = np.array([3, 20, 40, 60, 70, 90, 110, 130, 150, 170, 190, 0], np.int32)
    got, note = _same(ns, "ragged", (12,), [np.zeros_like(x), x, w, np.int32(300), lengths,
                                            np.int32(300), np.float32(1e-6), 16])
    assert "programs ran one at a time where a loop's trip count differed" in note
    assert "grid_kernels.py:" in note and "for c0 in range(0, n, BLOCK)" in note
    y = got[0].astype(np.float32)
    assert (y[11] == 0).all() and (y[0, 3:] == 0).all() and (y[0, :3] != 0).all()


def test_a_split_batch_undoes_its_stores(ns, small_batches):
    # each row is stored to (x + 1) before the if: run twice it would be (x + 2)
    x = np.arange(10 * 33, dtype=np.float32).reshape(10, 33) / 7
    flags = np.array([1, 0, 0, 1, 1, 0, 1, 0, 0, 1], np.int32)
    got, _ = _same(ns, "branchy", (10,), [x, flags, np.int32(33), np.int32(33), 64])
    want = np.where(flags[:, None] > 0, (x + 1) * 2, (x + 1) - 3).astype(np.float32)
    assert got[0].tobytes() == want.tobytes()


def test_shapes_reductions_and_scans_on_the_program_axis(ns):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 8, 16)).astype(np.float32)
    o = np.zeros(5 * (4 * 8 + 16 + 8 * 16 + 1), np.float32)
    got, _ = _same(ns, "shapes", (5,), [o, x, 8, 16], constexprs=("R", "C"))
    out = got[0].reshape(5, -1)
    assert np.allclose(out[:, :8], x.sum(axis=2), rtol=1e-5)
    assert (out[:, 8:24] == x.max(axis=1)).all()
    assert np.allclose(out[:, 24:32], x.mean(axis=2), rtol=1e-4, atol=1e-5)
    assert (out[:, -1] == np.argmax(out[:, :8], axis=1)).all()


@pytest.mark.parametrize("order", [None, "reverse"])
def test_atomics_add_in_the_order_programs_run(ns, small_batches, order):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((50, 40)) * 1e3).astype(np.float32)
    ids = list(range(49, -1, -1)) if order else None
    # the same bits batched: each program's atomic in the order the programs run (the float
    # sum depends on it), across batches and inside one
    got, _ = _same(ns, "atomic_total", (50,), [np.zeros(1, np.float32), x, np.int32(40), 64],
                   order=ids)
    assert abs(got[0][0] - x.astype(np.float64).sum()) <= 1e-3 * np.abs(x).sum()


def _fault(ns, name, grid, args, batched, constexprs=("BLOCK",)):
    with pytest.raises(ex.KernelError) as e:
        _launch(ns, name, grid, args, constexprs, batched)
    return e.value


def test_every_program_storing_one_element_overlaps_as_one_at_a_time_finds(ns):
    x = np.ones(1, np.float32)
    for batched in (True, False):
        e = _fault(ns, "same_store", (4,), [np.zeros(1, np.float32), x], batched, ())
        assert isinstance(e, ex.OverlappingWrites), e
        assert "two programs write one element" in str(e)


def test_a_batch_sees_a_read_that_a_later_program_overwrites(ns):
    # one program at a time, in order, each reads the next row before its program writes it:
    # unseen; a batch reads them all first, so the store is a write after another's read
    x = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)
    e = _fault(ns, "next_row_in_place", (6,), [x, np.int32(8), 8], True)
    assert isinstance(e, ex.RacyRead), e
    assert "read in the same launch" in str(e) and "program (0, 0, 0)" in str(e)
    _launch(ns, "next_row_in_place", (6,), [x, np.int32(8), 8], batched=False)
    with pytest.raises(ex.RacyRead):  # reversed, one at a time finds it too
        _launch(ns, "next_row_in_place", (6,), [x, np.int32(8), 8], batched=False,
                order=list(range(5, -1, -1)))


def test_what_has_no_batched_form_runs_one_program_at_a_time_and_says_so(ns):
    x = np.arange(4 * 16, dtype=np.float32).reshape(4, 16)
    # tensor descriptors run on both Triton releases normcheck takes (3.8 hands their mask to
    # the load as a bare ndarray, 3.9 as a handle)
    got, note = _same(ns, "described", (4,), [np.zeros_like(x), x, np.int32(4), np.int32(16), 16])
    assert got[0].tobytes() == (x * 2).tobytes()
    assert "its programs ran one at a time" in note and "make_tensor_descriptor" in note


def test_fast_conversions_round_as_the_one_rounding_path():
    # every bf16 and fp16 value widened, and fp32 bits of every kind narrowed: the storage
    # shortcuts of executor._cast against stored(values()) (NaN payloads aside: a GPU's
    # bf16 -> fp32 keeps a payload, a shift, as the shortcut does)
    rng = np.random.default_rng(6)
    every = np.arange(1 << 16, dtype=np.uint16)
    for t, data in ((tl.bfloat16, every), (tl.float16, every.view(np.float16))):
        with np.errstate(all="ignore"):
            fast = ex._fast_cast(data, t, tl.float32, False)
            slow = ex.stored(ex.values(ti.TensorHandle(data, t)), tl.float32)
        nan = np.isnan(slow)
        assert (np.isnan(fast) == nan).all()
        assert fast[~nan].tobytes() == slow[~nan].tobytes()
    bits = np.concatenate([rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32),
                           np.array([0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x00000001, 0x00008000,
                                     0x0000FFFF, 0x387FE000, 0x33800000, 0x33800001, 0x7FC00001,
                                     0x3F808000, 0x3F818000, 0x477FF000, 0x477FE000],
                                    np.uint32)])
    f = bits.view(np.float32)
    for t, view in ((tl.bfloat16, ml_dtypes.bfloat16), (tl.float16, np.float16)):
        with np.errstate(all="ignore"):
            fast = ex._fast_cast(f, tl.float32, t, False).view(view)
            slow = ex.stored(ex.values(ti.TensorHandle(f, tl.float32)), t).view(view)
        nan = np.isnan(slow.astype(np.float32))
        assert (np.isnan(fast.astype(np.float32)) == nan).all()
        assert fast[~nan].tobytes() == slow[~nan].tobytes()



_SPIN = '''
import triton
import triton.language as tl


@triton.jit
def rms_spin(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    i = 0
    while i < row % 8:  # every program its own trip count
        i += 1
    offs = tl.arange(0, BLOCK_SIZE)
    m = offs < cols
    x = tl.load(X + row * cols + offs, mask=m, other=0.0).to(tl.float32)
    w = tl.load(W + offs, mask=m, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
    tl.store(Y + row * cols + offs, (x * r * w).to(Y.dtype.element_ty), mask=m)
'''


def test_a_check_says_with_its_verdict_where_programs_ran_one_at_a_time(capsys, tmp_path):
    import json

    from normcheck.cli import main

    p = tmp_path / "spin.py"
    p.write_text(_SPIN)
    rc = main(["check", str(p), "--entry", "rms_spin", "--norm", "rmsnorm", "--dtype", "bf16",
               "--examples", "2", "--search", "0", "--json", "-q"])
    d = json.loads(capsys.readouterr().out)
    assert (rc, d["verdict"]) == (0, "pass"), d.get("failures")
    assert any("programs ran one at a time where a condition differed between them at "
               "spin.py:10: `while i < row % 8:" in n for n in d.get("notes", ())), d.get("notes")
