"""The programs of a launch run together: a program axis in front of every value.

Triton's interpreter runs a kernel's Python once a program, each ``tl`` operation on numpy
arrays of the block's shape.  Here the programs of a batch run in one pass: every handle's data
has a leading axis of length 1 (the same for every program: constants, ``tl.arange``, what is
computed from them) or P (one entry a program: ``tl.program_id`` and what is computed from it),
and numpy broadcasts the two.  The operations that know a shape (splat, broadcast, reshape,
expand_dims, permute, join, cat, the reductions and scans) are told the axis; elementwise ones
need nothing.  Every rounding is the executor's, done once on the whole batch.

Control flow is Python's, so it must agree between the programs of a batch:

* ``if``/``while`` on a value (``tensor.__bool__``) and ``range`` bounds (``__index__``) that
  differ between programs raise :class:`Diverged`: the executor undoes the batch's stores
  (every store and atomic is logged with the bytes it overwrote) and runs the programs again in
  groups that agree, recursively, down to one program at a time -- and says so in the launch's
  note;
* a ``for`` over ``range(start, stop, step)`` whose bounds differ between programs but whose trip
  count does not (a persistent kernel's ``range(pid, n_rows, num_programs)``) runs batched, its
  induction variable a value per program;
* what has no batched form here (tensor descriptors, ``atomic_poll``, scaled dots) raises
  :class:`Unbatchable`: the batch is undone and its programs run one at a time, as the
  interpreter runs them.

Memory is checked as one program at a time checks it (executor.Memory, each lane with its
program), and more: a batch reads before any of its programs stores, so a store to an element
another program read is a race too (on a GPU programs run in any order).
"""

from __future__ import annotations

import builtins
import operator

import numpy as np
import triton.language as tl
from triton.runtime import interpreter as ti

__all__ = ["Batch", "Diverged", "Unbatchable", "active", "lead", "lead_axes", "install",
           "tensor_patches", "batch_range", "per_program", "running"]


class Diverged(BaseException):
    """The programs of a batch disagree on a value Python's control flow needs: ``values`` one
    per program (their groups run apart).  A BaseException: no ``except Exception`` of the
    interpreter or of a kernel's helper swallows it."""

    def __init__(self, values, what: str):
        super().__init__(what)
        self.values = np.asarray(values)
        self.what = what


class Unbatchable(BaseException):
    """An operation with no batched form: the batch's programs run one at a time."""


class Batch:
    """The programs of a batch: ``pids`` (linear program ids, in the order they run) and their
    (x, y, z) coordinates."""

    def __init__(self, pids, grid):
        gx, gy, _gz = grid
        self.pids = np.asarray(pids, dtype=np.int64)
        self.pids32 = self.pids.astype(np.int32)  # as the writers and readers hold them
        self.n = len(self.pids)
        self.xyz = tuple(a.astype(np.int32) for a in (self.pids % gx, (self.pids // gx) % gy,
                                                      self.pids // (gx * gy)))
        self.max_lanes = 0  # the most lanes one program's access had: the next batch's size
        self.failed = None  # the program whose device_assert failed


_STACK: list = []  # the batch under way (empty: one program at a time, as the interpreter)


def active():
    """The batch under way, or None."""
    return _STACK[-1] if _STACK else None


def lead() -> int:
    """How many axes come before a value's own: 1 while a batch runs, else 0."""
    return 1 if _STACK else 0


class running:
    """``with running(batch):`` -- the operations see the program axis."""

    def __init__(self, batch):
        self.batch = batch

    def __enter__(self):
        _STACK.append(self.batch)
        return self.batch

    def __exit__(self, *exc):
        _STACK.pop()
        return False


def _np(t):
    return ti._get_np_dtype(t)


def _k(h) -> int:
    return h.data.shape[0]


def lead_axes(*arrays):
    """The arrays with their program axes broadcast to one length (the rest untouched)."""
    k = max(a.shape[0] for a in arrays)
    return [a if a.shape[0] == k else np.broadcast_to(a, (k,) + a.shape[1:]) for a in arrays]


def per_program(h):
    """A scalar handle's value of each program, (k,) -- k is 1 where all share one."""
    d = np.asarray(h.data)
    return d.reshape(d.shape[0], -1)[:, 0] if d.ndim else d.reshape(1)


# -- the builder's operations that know a shape ----------------------------------------------------
_B = ti.InterpreterBuilder
_ORIGINAL: dict = {}


def _when_batched(name):
    """Decorate a batched form of builder method ``name``: it runs while a batch does, the
    interpreter's own otherwise."""

    def wrap(batched):
        def f(self, *args, **kwargs):
            if _STACK:
                return batched(self, *args, **kwargs)
            return _ORIGINAL[name](self, *args, **kwargs)

        f.__name__ = name
        f.batched = batched
        return f

    return wrap


def _get_program_id(self, axis):
    return ti.TensorHandle(_STACK[-1].xyz[axis].copy(), tl.int32)


def _make_range(self, ret_ty, start, stop):
    return ti.TensorHandle(np.arange(start, stop, dtype=np.int32)[None], tl.int32)


def _splat(self, ret_ty, arg):
    shape = tuple(ret_ty.shape)
    v = per_program(arg)
    out = np.empty((len(v),) + shape, dtype=_np(arg.dtype))
    out[...] = v.reshape((len(v),) + (1,) * len(shape))
    return ti.TensorHandle(out, arg.dtype.scalar)


def _unsplat(self, arg):
    return ti.TensorHandle(per_program(arg).astype(_np(arg.dtype)), arg.dtype.scalar)


def _reshape(self, arg, shape, allow_reorder):
    return ti.TensorHandle(arg.data.reshape((_k(arg),) + tuple(shape)), arg.dtype.scalar)


def _trans(self, arg, perm):
    return ti.TensorHandle(np.transpose(arg.data, (0,) + tuple(p + 1 for p in perm)),
                           arg.dtype.scalar)


def _expand_dims(self, arg, axis):
    return ti.TensorHandle(np.expand_dims(arg.data, axis + 1 if axis >= 0 else axis),
                           arg.dtype.scalar)


def _broadcast(self, arg, shape):
    return ti.TensorHandle(np.broadcast_to(arg.data, (_k(arg),) + tuple(shape)),
                           arg.dtype.scalar)


def _cat(self, lhs, rhs):
    a, b = lead_axes(lhs.data, rhs.data)
    return ti.TensorHandle(np.concatenate([a, b], axis=1), lhs.dtype.scalar)


def _join(self, lhs, rhs):
    a, b = lead_axes(lhs.data, rhs.data)
    return ti.TensorHandle(np.stack([a, b], axis=-1), lhs.dtype.scalar)


def _gather(self, src, indices, axis):
    a, i = lead_axes(src.data, indices.data)
    return ti.TensorHandle(np.take_along_axis(a, i, axis=axis + 1 if axis >= 0 else axis),
                           src.dtype.scalar)


def _histogram(self, data, bins, mask):
    rows = []
    d = data.data
    m = None if mask is None else np.broadcast_to(mask.data, d.shape)
    for j in range(d.shape[0]):  # each program's histogram (rare in a norm: a loop is enough)
        h = ti.TensorHandle(d[j], data.dtype)
        mh = None if m is None else ti.TensorHandle(m[j], tl.int1)
        rows.append(_ORIGINAL["create_histogram"](self, h, bins, mh).data)
    return ti.TensorHandle(np.stack(rows), tl.int32)


def _assert(self, condition, message):
    c = np.asarray(condition.data)
    if not c.all():
        bad = np.flatnonzero(~c.reshape(c.shape[0], -1).all(axis=1))
        b = _STACK[-1]
        b.failed = int(b.pids[bad[0] if c.shape[0] > 1 else 0])  # named in the report
        raise AssertionError(f"{message}")


def _unbatchable(name):
    def f(self, *args, **kwargs):
        raise Unbatchable(f"tl's {name.removeprefix('create_')} has no batched form here")

    return f


_BATCHED = {"create_get_program_id": _get_program_id, "create_make_range": _make_range,
            "create_splat": _splat, "create_unsplat": _unsplat, "create_reshape": _reshape,
            "create_trans": _trans, "create_expand_dims": _expand_dims,
            "create_broadcast": _broadcast, "create_cat": _cat, "create_join": _join,
            "create_gather": _gather, "create_histogram": _histogram, "create_assert": _assert,
            "create_assume": _assert}
_NO_BATCHED_FORM = ("create_make_tensor_descriptor", "create_descriptor_load",
                    "create_descriptor_store", "create_descriptor_gather",
                    "create_descriptor_scatter", "create_atomic_poll", "create_dot_scaled",
                    "create_inline_asm")


def install():
    """Give the builder's shape operations their batched forms (once)."""
    if _ORIGINAL:
        return
    for name, batched in _BATCHED.items():
        _ORIGINAL[name] = getattr(_B, name)
        setattr(_B, name, _when_batched(name)(batched))
    for name in _NO_BATCHED_FORM:
        if hasattr(_B, name):
            _ORIGINAL[name] = getattr(_B, name)
            setattr(_B, name, _when_batched(name)(_unbatchable(name)))


# -- Python's control flow: values every program of the batch must agree on ------------------------
def _agreed(t, what):
    """The one value of a scalar tensor all the batch's programs hold; Diverged if they differ."""
    v = per_program(t.handle)
    if len(v) > 1 and not (v == v[0]).all():
        raise Diverged(v, what)
    return v[0]


def tensor_patches(scope):
    """Set, for the run (``scope`` restores them), ``tl.tensor``'s conversions Python's
    control flow calls and ``.T`` to batched forms that defer to the interpreter's own (set by
    its ``_patch_lang``, read now) outside a batch; and ``tl.range``/``tl.static_range`` to
    :func:`batch_range`."""
    t = tl.tensor
    seq = {name: getattr(t, name) for name in ("__index__", "__bool__", "T")}

    def index(self):
        if not _STACK:
            return seq["__index__"](self)
        return int(_agreed(self, "a range bound or an index"))

    def truth(self):
        if not _STACK:
            return seq["__bool__"](self)
        if self.type.is_block() and self.numel.value != 1:
            return True  # the interpreter's answer for a block (the compiler refuses it)
        return bool(_agreed(self, "a condition"))

    def transposed(self):
        if not _STACK:
            return seq["T"].fget(self)
        h = ti.TensorHandle(np.swapaxes(self.handle.data, -1, -2), self.handle.dtype)
        shape = list(self.type.shape)
        shape[-1], shape[-2] = shape[-2], shape[-1]
        return tl.core.tensor(h, tl.core.block_type(self.dtype, shape))

    scope.set_attr(t, "__index__", index)
    scope.set_attr(t, "__bool__", truth)
    scope.set_attr(t, "T", property(transposed))
    for lang in (tl, tl.core):
        for name in ("range", "static_range"):
            seq_range = getattr(lang, name)
            if not isinstance(seq_range, type):  # the interpreter's (not the compiler's class)
                scope.set_attr(lang, name, _range_with(seq_range, name == "range"))


def _range_with(seq_range, typed: bool):
    def r(arg1, arg2=None, step=None, **kwargs):
        if not _STACK and not (typed and any(isinstance(b, tl.tensor)
                                             for b in (arg1, arg2, step))):
            return seq_range(arg1, arg2, step, **kwargs)
        return batch_range(arg1, arg2, 1 if step is None else step)

    return r


def batch_range(arg1, arg2=None, step=None):
    """``range`` (and ``tl.range``) as Triton compiles it: Python's where every bound is a plain
    number; where a bound is a tensor (a program id, a kernel's int argument), the induction
    variable a tensor, a value per program in a batch (int64 where a bound is, int32
    otherwise, as Triton types it: ``row.to(tl.int64)`` works, ``row * cols`` wraps as the
    compiled loop's does -- the interpreter's was a Python int, #66); Diverged on the trip
    count where that differs between the programs of a batch."""
    if arg2 is None:
        arg1, arg2 = 0, arg1
    step = 1 if step is None else step
    bounds = (arg1, arg2, step)
    if not any(isinstance(b, tl.tensor) for b in bounds):
        return builtins.range(*(_plain(b) for b in bounds))
    vals = [per_program(b.handle).astype(np.int64) if isinstance(b, tl.tensor)
            else np.array([_plain(b)], np.int64) for b in bounds]
    start, stop, st = np.broadcast_arrays(*vals)
    if (st == 0).any():
        raise ValueError("range() arg 3 must not be zero")
    trips = np.maximum(0, -((start - stop) // st))  # ceil((stop - start) / step), at least 0
    if not (trips == trips[0]).all():
        raise Diverged(trips, "a loop's trip count")
    wide = any(isinstance(b, tl.tensor) and b.dtype.primitive_bitwidth > 32 for b in bounds)
    dt, np_dt = (tl.int64, np.int64) if wide else (tl.int32, np.int32)

    def values():
        for j in builtins.range(int(trips[0])):
            yield tl.tensor(ti.TensorHandle((start + j * st).astype(np_dt), dt), dt)

    return values()


def _plain(b):
    if isinstance(b, tl.constexpr):
        b = b.value
    if isinstance(b, tl.tensor):
        return int(per_program(b.handle)[0])
    return operator.index(b)
