"""Run a ``@triton.jit`` kernel on the CPU, every rounding as the GPU does it, every access checked.

The executor is Triton's own interpreter (``TRITON_INTERPRET=1``: the kernel's Python runs
with ``tl.*`` on numpy arrays, one program at a time), corrected where it rounds unlike a GPU.
Measured on triton 3.8.0 (tests/test_triton.py holds the executor to each, on 3.8 and 3.9):

====================================  ===================================  ==========================
the interpreter                       a GPU                                here
====================================  ===================================  ==========================
fp32 -> bf16 truncates                round to nearest even (``.to``);     as the GPU (``rtz`` when
                                      ``fp_downcast_rounding="rtz"``       asked)
bf16 subnormals convert wrongly       exact                                exact
bf16 ``+ - * /`` on the uint16 bits   the correctly rounded bf16 value     float64, rounded once
bf16 comparisons, min/max on bits     on the values                        on the values
``tl.fma`` rounds twice (3.8.0)       one rounding                         one rounding (round to
                                                                           odd in float64, then to
                                                                           the format)
``tl.sum``: numpy's, fp16 in fp32     the element type, the GPU's tree     the element type, a
                                                                           neighbour-pair tree
``tl.reduce(.., combine)``: a Python    a tree                               neighbour pairs, a level
fold, element by element, in order                                         a call on whole halves
libdevice (``rsqrt``) unsupported     ``__nv_rsqrtf`` (<= 2 ulp)           correctly rounded
fp32 -> fp8 e4m3 past 448: NaN        saturates (``satfinite``)            saturates
====================================  ===================================  ==========================

Not reproduced (stated in the provenance): the GPU contracts ``a*b+c`` into one fma by
default, the executor never does; the GPU's reduction tree depends on the layout (num_warps,
elements per thread), the executor sums neighbour pairs; ``sqrt``/``rsqrt``/division are
correctly rounded here and approximate on the GPU where Triton asks for the approximation.
The sound bound of normcheck does not depend on the order of a sum or on contraction, so a
verdict under the executor is a verdict on the kernel as long as every rounding the kernel
asks for is done as above.

Every load and store is checked before it touches memory: an active lane's address must lie
inside one of the launch's arrays (else ``OutOfBounds``, with the array, the element, the
program and the kernel's line), aligned to its element size; an element another program
stored is never read (``RacyRead``: on a GPU programs run in any order) nor stored again
(``OverlappingWrites``); an output element still holding normcheck's poison is never read
(``ReadUnwritten``).

Import this module only where a kernel is run (the worker, or a test): it sets
``TRITON_INTERPRET=1`` before Triton is imported, which every ``@triton.jit`` decoration after
it obeys.
"""

from __future__ import annotations

import inspect
import linecache
import os
import sys
import types

if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
    raise ImportError("Triton was imported before normcheck.backends.triton.executor: its "
                      "@triton.jit functions (tl.sum among them) were compiled for a GPU, not "
                      "interpreted; import the executor first (or set TRITON_INTERPRET=1)")
os.environ["TRITON_INTERPRET"] = "1"

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter as ti  # noqa: E402

from normcheck import formats  # noqa: E402
from normcheck.backends.triton.stubs import Missing, stub_modules  # noqa: E402
from normcheck.errors import (FailureKind, KernelError, KernelRaised,  # noqa: E402
                              MisalignedAccess, OutOfBounds)

__all__ = ["install", "load_module", "kernel_function", "run", "Memory", "RacyRead", "ReadUnwritten",
           "OverlappingWrites"]

# -- failures -------------------------------------------------------------------------------------
class RacyRead(KernelError):
    """A program read an element another program wrote in the same launch."""

    kind = FailureKind.NONDETERMINISTIC


class ReadUnwritten(KernelError):
    """A program read an output element no program had written (it held the poison)."""

    kind = FailureKind.UNWRITTEN


class OverlappingWrites(KernelError):
    """Two programs wrote one element."""

    kind = FailureKind.OVERLAPPING_WRITES


# -- values of the interpreter's storage --------------------------------------------------------
_FP = {tl.float16: formats.FP16, tl.bfloat16: formats.BF16, tl.float32: formats.FP32}
_FP8 = {tl.float8e4nv: ml_dtypes.float8_e4m3fn, tl.float8e5: ml_dtypes.float8_e5m2,
        tl.float8e4b8: ml_dtypes.float8_e4m3fnuz, tl.float8e5b16: ml_dtypes.float8_e5m2fnuz}
_E4M3_MAX = float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)  # 448 = 0x1.cp+8


def _scalar(t):
    return t.scalar if hasattr(t, "scalar") else t


def values(h) -> np.ndarray:
    """The exact float64 values of a float handle (bf16 and fp8 are stored as their bits)."""
    t = _scalar(h.dtype)
    if t == tl.bfloat16:
        return h.data.view(ml_dtypes.bfloat16).astype(np.float64)
    if t in _FP8:
        return h.data.view(_FP8[t]).astype(np.float64)
    return h.data.astype(np.float64)


def stored(v, t, rtz: bool = False) -> np.ndarray:
    """float64 values rounded once to the float type t, in the interpreter's storage."""
    v = np.asarray(v, dtype=np.float64)
    if t == tl.float64:
        return v
    if t in _FP:
        fmt = _FP[t]
        a = fmt.cast(fmt.round_toward_zero(v) if rtz else v)
        return a.view(np.uint16) if t == tl.bfloat16 else a
    if t in _FP8:
        if t == tl.float8e4nv:  # cvt.rn.satfinite: beyond the largest finite, the largest
            v = np.where(np.isfinite(v) | np.isinf(v), np.clip(v, -_E4M3_MAX, _E4M3_MAX), v)
        # the sources of an fp8 conversion are fp32 or narrower: exact in float32, then one
        # rounding (ml_dtypes converts float32 to fp8 to nearest even)
        return v.astype(np.float32).astype(_FP8[t]).view(np.uint8)
    raise TypeError(f"not a float type: {t}")


def _special(t) -> bool:
    """Float types the interpreter stores as bits (its own arithmetic on them is wrong)."""
    return t == tl.bfloat16 or t in _FP8


# -- the corrections ----------------------------------------------------------------------------
_B = ti.InterpreterBuilder
_ORIGINAL = {}


def _float_binary(name, op):
    orig = getattr(_B, name)

    def f(self, lhs, rhs):
        t = _scalar(lhs.dtype)
        if _special(t):
            with np.errstate(all="ignore"):
                return ti.TensorHandle(stored(op(values(lhs), values(rhs)), t), t)
        return orig(self, lhs, rhs)

    return f


def _compare(name, op):
    orig = getattr(_B, name)

    def f(self, lhs, rhs):
        t = _scalar(lhs.dtype)
        if _special(t):
            return ti.TensorHandle(op(values(lhs), values(rhs)), t)
        return orig(self, lhs, rhs)

    return f


def _float_unary(name, op, f32=None):
    orig = getattr(_B, name)

    def f(self, arg):
        t = _scalar(arg.dtype)
        if _special(t) or (f32 is not None and t == tl.float32):
            with np.errstate(all="ignore"):
                return ti.TensorHandle(stored(op(values(arg)), t), t)
        return orig(self, arg)

    return f


def _neg(self, arg):
    t = _scalar(arg.dtype)
    if _special(t):  # flip the sign bit (numpy would negate the bits as an integer)
        return ti.TensorHandle(arg.data ^ np.array(1 << (t.primitive_bitwidth - 1),
                                                   arg.data.dtype), t)
    return _ORIGINAL["create_fneg"](self, arg)


def _cast(self, src, dst_type, rounding_mode=None):
    s, d = _scalar(src.dtype), _scalar(dst_type)
    rtz = rounding_mode is not None and rounding_mode == ti._ir.ROUNDING_MODE.RTZ
    if s.is_floating() and d.is_floating():
        return ti.TensorHandle(stored(values(src), d, rtz), d)
    if s.is_floating() and _special(s):  # to an integer: from the value, not the bits
        return ti.TensorHandle(values(src).astype(ti._get_np_dtype(d)), d)
    if d.is_floating() and _special(d):
        return ti.TensorHandle(stored(src.data.astype(np.float64), d), d)
    return _ORIGINAL["cast_impl"](self, src, dst_type)


def _odd_sum(p, c):
    """p + c rounded to odd in float64 (the exact sum when it fits): rounded once more, to a
    format of at most 51 bits, it gives the correctly rounded sum."""
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)  # TwoSum: s + err == p + c exactly
    bits = s.view(np.int64)
    fix = np.isfinite(err) & (err != 0) & ((bits & 1) == 0)
    if fix.any():
        s = s.copy()
        s[fix] = np.nextafter(s[fix], np.where(err[fix] > 0, np.inf, -np.inf))
    return s


def _fma(self, x, y, z):
    t = _scalar(z.dtype)
    if t == tl.float64:
        return _ORIGINAL["create_fma"](self, x, y, z)
    with np.errstate(all="ignore"):
        a, b, c = np.broadcast_arrays(values(x), values(y), values(z))
        p = a * b  # exact: two significands of at most 24 bits
        return ti.TensorHandle(stored(_odd_sum(p, c), t), t)


def _rsqrt64(v):
    return 1.0 / np.sqrt(v)


def _tree_add(a, b, t):
    if _special(t):
        return stored(values(ti.TensorHandle(a, t)) + values(ti.TensorHandle(b, t)), t)
    return a + b


def _sum(self, input):
    """tl.sum in the element type, as neighbour pairs: (x0+x1)+(x2+x3)... level by level."""
    t = _scalar(input.dtype)
    data = input.handle.data
    axis = self.axis
    if axis is None:
        data, axis = data.reshape(-1), 0
    x = np.moveaxis(data, axis, 0)
    with np.errstate(all="ignore"):
        while x.shape[0] > 1:
            n = x.shape[0]
            half = n // 2
            s = _tree_add(x[0:2 * half:2], x[1:2 * half:2], t)
            x = np.concatenate([s, x[2 * half:]]) if n % 2 else s
    r = x[0]
    if self.keep_dims:
        r = np.expand_dims(r, self.axis if self.axis is not None else 0)
        if self.axis is None:
            r = r.reshape((1,) * data.ndim)
    elif self.axis is None:
        r = r[()] if isinstance(r, np.ndarray) else r
    return self.to_tensor(r, input.dtype)


def _generic_reduce(self, input):
    """tl.reduce with the kernel's combine function, as neighbour pairs level by level (the
    order tl.sum takes here), each level one call of the combine on whole halves (the
    interpreter's own folds element by element, in Python, left to right)."""
    original_axis = self.axis
    input, axis = self.unravel(input, self.axis)
    shape = input[0].handle.data.shape
    datas = [np.moveaxis(t.handle.data, axis, 0) for t in input]
    dtypes = [t.dtype for t in input]
    while datas[0].shape[0] > 1:
        n = datas[0].shape[0]
        half = n // 2
        left = [self.to_tensor(d[0:2 * half:2], t) for d, t in zip(datas, dtypes)]
        right = [self.to_tensor(d[1:2 * half:2], t) for d, t in zip(datas, dtypes)]
        out = self.combine_fn.fn(*left, *right)
        out = out if isinstance(out, tuple) else (out,)
        new = []
        for o, d in zip(out, datas):
            v = o.handle.data if isinstance(o, tl.core.tensor) else np.asarray(
                getattr(o, "value", o))
            v = np.broadcast_to(v, d[0:half].shape).astype(d.dtype)
            new.append(np.concatenate([v, d[2 * half:]]) if n % 2 else v)
        datas = new
    ret = []
    for d, t in zip(datas, dtypes):
        r = d[0]
        if self.keep_dims:
            r = np.expand_dims(r, axis) if original_axis is not None else \
                r.reshape((1,) * len(shape))
        elif original_axis is None:
            r = r.item() if isinstance(r, np.ndarray) else r
        ret.append(self.to_tensor(r, t))
    return ret


def _min_max(self, input, val_reduce_op, idx_reduce_op=None):
    inp = input[0] if isinstance(input, tuple) else input
    t = _scalar(inp.dtype)
    if not _special(t):
        return _ORIGINAL["min_max"](self, input, val_reduce_op, idx_reduce_op)
    v = values(inp.handle)
    val = idx = None
    if val_reduce_op:
        r = val_reduce_op(v, axis=self.axis, keepdims=self.keep_dims)
        val = self.to_tensor(stored(r, t), inp.dtype)
    if idx_reduce_op:
        idx = self.to_tensor(idx_reduce_op(v, axis=self.axis, keepdims=self.keep_dims), tl.int32)
    if val is not None and idx is not None:
        return val, idx
    return val if val is not None else idx


_BINARY = {"create_fadd": np.add, "create_fsub": np.subtract, "create_fmul": np.multiply,
           "create_fdiv": np.divide, "create_precise_divf": np.divide, "create_frem": np.fmod,
           "create_minimumf": np.minimum, "create_minnumf": np.fmin,
           "create_maximumf": np.maximum, "create_maxnumf": np.fmax}
_COMPARE = {f"create_fcmp{k}": op for k, op in (
    ("OLT", np.less), ("OGT", np.greater), ("OLE", np.less_equal), ("OGE", np.greater_equal),
    ("OEQ", np.equal), ("ONE", np.not_equal), ("ULT", np.less), ("UGT", np.greater),
    ("ULE", np.less_equal), ("UGE", np.greater_equal), ("UEQ", np.equal),
    ("UNE", np.not_equal))}
_UNARY = {"create_sqrt": (np.sqrt, None), "create_precise_sqrt": (np.sqrt, None),
          "create_rsqrt": (_rsqrt64, True), "create_exp": (np.exp, None),
          "create_exp2": (np.exp2, None), "create_log": (np.log, None),
          "create_log2": (np.log2, None), "create_cos": (np.cos, None),
          "create_sin": (np.sin, None), "create_floor": (np.floor, None),
          "create_ceil": (np.ceil, None)}


def _getsourcefile(obj):
    """inspect.getsourcefile, answered from linecache where the file's lines are there: the
    interpreter reads a kernel's source, and in the sandbox a file's metadata (the stat of
    os.path.exists) cannot be read."""
    try:
        f = inspect.getfile(obj)
    except TypeError:
        f = None
    if f is not None and f in linecache.cache:
        return f
    return _ORIGINAL["getsourcefile"](obj)


def install():
    """Apply the corrections to the interpreter (once; idempotent)."""
    if _ORIGINAL:
        return
    _ORIGINAL["getsourcefile"] = inspect.getsourcefile
    inspect.getsourcefile = _getsourcefile
    for name in ("create_fneg", "cast_impl", "create_fma"):
        _ORIGINAL[name] = getattr(_B, name)
    _ORIGINAL["min_max"] = ti.ReduceOps.min_max
    patches = {name: _float_binary(name, op) for name, op in _BINARY.items()}
    patches.update({name: _compare(name, op) for name, op in _COMPARE.items()})
    patches.update({name: _float_unary(name, op, f32) for name, (op, f32) in _UNARY.items()})
    patches.update({"create_fneg": _neg, "cast_impl": _cast, "create_fma": _fma,
                    "create_fp_to_fp": _cast})
    for name in ("create_si_to_fp", "create_ui_to_fp", "create_fp_to_si", "create_fp_to_ui",
                 "create_fp_ext", "create_fp_trunc"):
        patches[name] = lambda self, src, dst_type: _cast(self, src, dst_type)
    for name in ("create_masked_load", "create_masked_store", "create_load", "create_store",
                 "create_atomic_rmw", "create_atomic_cas"):
        _ORIGINAL[name] = getattr(_B, name)
    patches["create_atomic_rmw"] = _atomic_rmw
    patches["create_atomic_cas"] = _atomic_cas
    patches["create_load"] = _unmasked("create_load")
    patches["create_store"] = _unmasked("create_store")
    patches["create_masked_load"] = _masked_load
    patches["create_masked_store"] = _masked_store
    patches["create_extern_elementwise"] = _extern
    for name, fn in patches.items():
        setattr(_B, name, fn)
    ti.ReduceOps.sum = _sum
    ti.ReduceOps.min_max = _min_max
    ti.ReduceOps.generic_reduce = _generic_reduce


# -- libdevice ------------------------------------------------------------------------------------
_LIBDEVICE = {  # symbol -> (float64 function, arity)
    "rsqrt": (_rsqrt64, 1), "rsqrt_rn": (_rsqrt64, 1), "sqrt": (np.sqrt, 1),
    "sqrt_rn": (np.sqrt, 1), "fsqrt_rn": (np.sqrt, 1), "div_rn": (np.divide, 2),
    "fdiv_rn": (np.divide, 2), "rcp_rn": (lambda v: 1.0 / v, 1), "exp": (np.exp, 1),
    "log": (np.log, 1), "tanh": (np.tanh, 1), "pow": (np.power, 2), "erf": (None, 1),
    "fma": ("fma", 3), "fma_rn": ("fma", 3),
}


def _extern(self, libName, libPath, symbol, argList, retType, isPure):
    name = symbol.removeprefix("__nv_")
    base = name[:-1] if name.endswith("f") and name[:-1] in _LIBDEVICE else name
    spec = _LIBDEVICE.get(base)
    if spec is None or spec[0] is None:
        raise NotImplementedError(f"libdevice {symbol}: not run by normcheck's executor "
                                  f"(it runs {', '.join(sorted(_LIBDEVICE))})")
    t = _scalar(retType)
    if spec[0] == "fma":
        return _fma(self, *argList)
    with np.errstate(all="ignore"):
        return ti.TensorHandle(stored(spec[0](*[values(a) for a in argList]), t), t)


def _patch_libdevice(scope):
    """libdevice reached as a module attribute inside a kernel (``libdevice.rsqrt``,
    ``tl.extra.cuda.libdevice.rsqrt``): CUDA's functions given the interpreter's semantic, and
    Triton's stubs (empty bodies on a CPU: they would return None) made those, for the run."""
    from triton.language.extra import libdevice as stub
    from triton.language.extra.cuda import libdevice as cuda_ld

    ti._patch_builtin(cuda_ld, ti.interpreter_builder, scope)
    for name in dir(stub):
        f = getattr(cuda_ld, name, None)
        if not name.startswith("_") and callable(getattr(stub, name)) and f is not None and \
                tl.core.is_builtin(f):
            ti._patch_attr(stub, name, f, ti.interpreter_builder, scope)


class _LibdeviceModule:
    """What ``triton.language.extra.libdevice`` resolves to under the executor: each name a
    builtin that lowers to :func:`_extern` (Triton's own stub has empty bodies on a CPU)."""

    def __getattr__(self, name):
        from triton.language.extra.cuda import libdevice as cuda_libdevice

        fn = getattr(cuda_libdevice, name)

        def call(*args, **kwargs):
            kwargs.pop("_semantic", None)
            return fn(*args, _semantic=ti.interpreter_semantic, **kwargs)

        return call


# -- memory: every access checked ---------------------------------------------------------------
class Memory:
    """The launch's arrays by address: (name, array, poison bits or None), and who wrote what."""

    def __init__(self, arrays):
        spans = []
        for name, a, poison in arrays:
            start = a.__array_interface__["data"][0]
            spans.append((start, start + a.nbytes, name, a, poison))
        spans.sort(key=lambda s: s[0])
        self.spans = spans
        self.starts = np.array([s[0] for s in spans], dtype=np.uint64)
        self.ends = np.array([s[1] for s in spans], dtype=np.uint64)
        self.items = np.array([s[3].itemsize or 1 for s in spans], dtype=np.uint64)
        self.writers = [None] * len(spans)  # per span: int64 program of each element, -1 none
        self.program = (0, 0, 0)
        self.pid = 0
        self.filename = None
        self.overlap = None  # the first store to an element another program stored
        self.grid = (1, 1, 1)

    def _at(self, line) -> str:
        """``, program (x, y, z), at file:line: `text` `` (without the line where None)."""
        if line is None:
            return f", program {self.program}"
        text = linecache.getline(self.filename, line).strip()
        return (f", program {self.program}, at {os.path.basename(self.filename)}:{line}: "
                f"`{text[:160]}`")

    def where(self) -> str:
        """Where the kernel is: its innermost line being run."""
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename != self.filename:
            f = f.f_back
        return self._at(f.f_lineno if f is not None else None)

    def where_of(self, e) -> str:
        """Where an exception left the kernel: its deepest line in the traceback."""
        tb, line = e.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                line = tb.tb_lineno
            tb = tb.tb_next
        return self._at(line)

    def check(self, ptrs, mask, itemsize, access):
        """(span index, element index) of every active lane; raises on a lane outside every
        array or misaligned."""
        addr = np.broadcast_to(ptrs.data, np.shape(ptrs.data)).reshape(-1).astype(np.uint64)
        if mask is not None:
            active = np.broadcast_to(mask.data, np.shape(ptrs.data)).reshape(-1).astype(bool)
        else:
            active = np.ones(addr.shape, bool)
        lanes = np.flatnonzero(active)
        addr = addr[lanes]
        if addr.size == 0:
            return lanes, np.zeros(0, np.int64), np.zeros(0, np.int64)
        k = np.searchsorted(self.starts, addr, side="right").astype(np.int64) - 1
        kk = np.maximum(k, 0)
        inside = (k >= 0) & (addr + np.uint64(itemsize) <= self.ends[kk])
        if not inside.all():
            j = int(np.flatnonzero(~inside)[0])
            a = int(addr[j])
            if k[j] >= 0:
                start, _end, name, arr, _p = self.spans[int(k[j])]
                item = arr.itemsize or 1
                elem = (a - start) // item
                detail = (f"{access} of element {elem} of `{name}`, which has {arr.size} "
                          f"elements (valid indices 0..{arr.size - 1})")
            else:
                start, _end, name, arr, _p = self.spans[0]
                elem = -(-(start - a) // (arr.itemsize or 1))
                detail = f"{access} of element {-elem} of `{name}` (before its start)"
            raise OutOfBounds(f"out-of-bounds {detail}: lane {int(lanes[j])} of the "
                              f"{'masked' if mask is not None else 'unmasked'} "
                              f"{access}{self.where()}", access=access, name=name)
        if itemsize > 1 and (addr % np.uint64(itemsize)).any():
            j = int(np.flatnonzero(addr % np.uint64(itemsize))[0])
            raise MisalignedAccess(f"misaligned {access} of {itemsize} bytes at an address "
                                   f"{int(addr[j]) % itemsize} bytes off{self.where()}")
        elems = ((addr - self.starts[k]) // self.items[k]).astype(np.int64)
        return lanes, k, elems

    def _writers(self, i):
        if self.writers[i] is None:
            self.writers[i] = np.full(self.spans[i][3].size, -1, np.int64)
        return self.writers[i]

    def loaded(self, k, elems):
        for i in np.unique(k):
            sel = k == i
            e = elems[sel]
            start, _end, name, arr, poison = self.spans[int(i)]
            w = self.writers[int(i)]
            if w is not None:
                other = (w[e] >= 0) & (w[e] != self.pid)
                if other.any():
                    j = int(np.flatnonzero(other)[0])
                    raise RacyRead(f"reads element {int(e[j])} of `{name}`, which program "
                                   f"{self._program(int(w[e[j]]))} wrote in the same launch "
                                   f"(programs run in no fixed order on a GPU){self.where()}")
            if poison is not None:
                flat = arr.reshape(-1).view(f"u{arr.itemsize}")
                unw = flat[e] == poison
                if w is not None:
                    unw &= w[e] < 0
                if unw.any():
                    j = int(np.flatnonzero(unw)[0])
                    raise ReadUnwritten(f"reads element {int(e[j])} of `{name}` before any "
                                        f"program wrote it (it holds normcheck's poison: an "
                                        f"output read as an input){self.where()}")

    def stored(self, k, elems):
        for i in np.unique(k):
            e = elems[k == i]
            w = self._writers(int(i))
            other = (w[e] >= 0) & (w[e] != self.pid)
            if other.any() and self.overlap is None:
                # kept, and raised when the launch ends without a fault: a store past a row's
                # end overlaps the next row's before the last row's store leaves the array,
                # and the out-of-bounds store is the clearer report of the two
                j = int(np.flatnonzero(other)[0])
                self.overlap = OverlappingWrites(
                    f"writes element {int(e[j])} of `{self.spans[int(i)][2]}`, which program "
                    f"{self._program(int(w[e[j]]))} wrote in the same launch (two programs "
                    f"write one element){self.where()}")
            w[e] = self.pid

    def _program(self, pid):
        gx, gy, _gz = self.grid
        return (pid % gx, (pid // gx) % gy, pid // (gx * gy))


_MEMORY: list = []  # the launch under way (one at a time)
Missing.running = staticmethod(lambda: bool(_MEMORY))  # a stand-in called by a kernel fails


def _elem_size(ptrs):
    return max(1, ptrs.get_element_ty().primitive_bitwidth // 8)


_UNMASKED = []  # set while an unmasked load or store runs (it calls the masked one)


def _bool_mask(mask):
    """A mask as booleans: Triton 3.9's interpreter makes ``mask & (row > 0)`` an int32 array,
    which its own load then refuses ("mask has unsupported dtype"); nonzero is true, as on a
    GPU."""
    if mask is not None and mask.data.dtype != np.bool_:
        return ti.TensorHandle(mask.data.astype(np.bool_), tl.int1)
    return mask


def _checked(ptrs, mask, access):
    """Check an access of the launch under way (the mask as booleans; an unmasked access said
    so) and record it; the mask to pass on."""
    mask = _bool_mask(mask)
    mem = _MEMORY[-1]
    _lanes, k, elems = mem.check(ptrs, None if _UNMASKED else mask, _elem_size(ptrs), access)
    (mem.loaded if access == "load" else mem.stored)(k, elems)
    return mask


def _masked_load(self, ptrs, mask, other, *rest):
    mask = _checked(ptrs, mask, "load")
    return _ORIGINAL["create_masked_load"](self, ptrs, mask, other, *rest)


def _masked_store(self, ptrs, value, mask, *rest):
    mask = _checked(ptrs, mask, "store")
    return _ORIGINAL["create_masked_store"](self, ptrs, value, mask, *rest)


def _atomic_rmw(self, op, ptr, val, mask, *rest):
    """An atomic's addresses checked like a store's (atomics from several programs to one
    element are what atomics are for: no overlap is recorded)."""
    mask = _bool_mask(mask)  # an unmasked atomic comes with an all-true mask: said unmasked
    _MEMORY[-1].check(ptr, None if mask is None or mask.data.all() else mask, _elem_size(ptr),
                      "atomic")
    return _ORIGINAL["create_atomic_rmw"](self, op, ptr, val, mask, *rest)


def _atomic_cas(self, ptr, *rest):
    _MEMORY[-1].check(ptr, None, _elem_size(ptr), "atomic compare-and-swap")
    return _ORIGINAL["create_atomic_cas"](self, ptr, *rest)


def _unmasked(name):
    def f(self, *args):  # the arguments differ between Triton versions: passed through
        _UNMASKED.append(True)
        try:
            return _ORIGINAL[name](self, *args)
        finally:
            _UNMASKED.pop()

    return f


# -- loading a module -----------------------------------------------------------------------------
_LIBDEVICE_STUB = "triton.language.extra.libdevice"


#: What import-time host code that asks torch for its GPU is told (the cpu backend presents
#: sm_90 to CUDA C the same way): an H100-class device, one of it.
PRESENTED = {"name": "sm_90 presented by normcheck", "major": 9, "minor": 0,
             "multi_processor_count": 132, "warp_size": 32, "total_memory": 80 << 30,
             "max_shared_memory_per_block_optin": 227 << 10, "regs_per_multiprocessor": 65536}


class _file_imports:
    """While a file is imported (its imports run now, inside the worker's sandbox):

    * torch.cuda's device queries (current_device, get_device_properties,
      get_device_capability, device_count) answer for the presented device -- as soon as the
      file has imported torch -- so module-level code such as an autotune config list built
      from the device's warp size runs on a machine without one; restored after;
    * a ``__main__`` module is never imported (``import unittest.__main__`` would start test
      discovery): an ImportError naming it."""

    def __enter__(self):
        import builtins

        self.saved, self.real, self.depth = [], builtins.__import__, 0

        def imported(name, globals=None, locals=None, fromlist=(), level=0):
            if "__main__" in name.split(".") or "__main__" in (fromlist or ()):
                what = name if "__main__" in name.split(".") else f"{name}.__main__"
                raise ImportError(f"normcheck does not import a __main__ module from a kernel "
                                  f"file ({what}): it runs a program")
            self.depth += 1
            try:
                mod = self.real(name, globals, locals, fromlist, level)
            finally:
                self.depth -= 1
            if self.depth == 0:  # the file's own import statement done: torch whole
                self.present()
            return mod

        builtins.__import__ = imported
        self.present()
        return self

    def present(self):
        cuda = sys.modules.get("torch.cuda")
        if cuda is None or self.saved:
            return
        props = types.SimpleNamespace(**PRESENTED)
        for name, fn in (("current_device", lambda: 0),
                         ("get_device_properties", lambda *a, **k: props),
                         ("get_device_capability", lambda *a, **k: (PRESENTED["major"],
                                                                    PRESENTED["minor"])),
                         ("device_count", lambda: 1)):
            self.saved.append((cuda, name, getattr(cuda, name, None)))
            setattr(cuda, name, fn)

    def __exit__(self, *exc):
        import builtins

        builtins.__import__ = self.real
        for obj, name, old in self.saved:
            setattr(obj, name, old)
        return False


def load_module(text: str, filename: str, name: str, stubs=(), file=None) -> dict:
    """Execute a kernel file's text as a module (its lines registered for tracebacks and for
    the interpreter, which reads a kernel's source, under ``filename``); its namespace.
    ``stubs``: the modules it imports that are not installed (or relative), stood in for
    (:class:`Missing`); ``file``: its ``__file__`` (a copy the worker may read: a file that
    hashes itself as it loads, as Unsloth's does), ``filename`` by default."""
    install()
    lines = text.splitlines(keepends=True)
    linecache.cache[filename] = (len(text), None, lines, filename)
    package = f"{name}_package"
    ns = {"__name__": f"{package}.{name}", "__file__": file or filename,
          "__builtins__": __builtins__,
          "__package__": package}
    stub_modules([package] + list(stubs), package)
    code = compile(text, filename, "exec")
    with _file_imports():
        exec(code, ns)  # noqa: S102 -- the user's kernel file, in the sandboxed worker
    stub = sys.modules.get(_LIBDEVICE_STUB)
    for k, v in list(ns.items()):  # libdevice's stubs (empty on a CPU) -> the executor's
        if v is stub and stub is not None:
            ns[k] = _LibdeviceModule()
        elif callable(v) and getattr(v, "__module__", None) == _LIBDEVICE_STUB:
            ns[k] = getattr(_LibdeviceModule(), getattr(v, "__name__", k))
        elif tl.core.is_builtin(v):  # `from triton.language.math import rsqrt`: a builtin
            ns[k] = _with_semantic(v)  # called by name, as the compiler would call it
    return ns


def _with_semantic(f):
    def call(*args, **kwargs):
        kwargs.pop("_semantic", None)
        return f(*args, _semantic=ti.interpreter_semantic, **kwargs)

    call.__name__ = getattr(f, "__name__", "builtin")
    return call


def kernel_function(ns: dict, entry: str):
    """The interpreted function called ``entry`` (through autotune/heuristics wrappers): (fn,
    the wrappers' constexprs as a callable of the arguments)."""
    obj = ns.get(entry)
    if obj is None:
        raise KeyError(entry)
    heuristics, configs = [], None
    while not isinstance(obj, ti.InterpretedFunction):
        if hasattr(obj, "values") and isinstance(obj.values, dict):  # @triton.heuristics
            heuristics.append(obj.values)
        if hasattr(obj, "configs") and configs is None:  # @triton.autotune: its first config
            configs = obj.configs
        nxt = getattr(obj, "fn", None)
        if nxt is None or nxt is obj:
            raise TypeError(f"{entry} is not a @triton.jit function")
        obj = nxt

    def meta(args: dict) -> dict:
        out = {}
        if configs:
            out.update(configs[0].kwargs)
        for values_ in reversed(heuristics):
            for k, f in values_.items():
                out[k] = f({**args, **out})
        return out

    return obj, meta


# -- running ----------------------------------------------------------------------------------------
def _pointer(a: np.ndarray):
    t = _TL_OF.get(a.dtype.name)
    if t is None:
        raise TypeError(f"an array of {a.dtype} has no Triton element type")
    pt = tl.pointer_type(t)
    return tl.tensor(ti.TensorHandle(np.array([a.__array_interface__["data"][0]], np.uint64),
                                     pt), pt)


_TL_OF = {"float32": tl.float32, "float16": tl.float16, "bfloat16": tl.bfloat16,
          "float64": tl.float64, "int8": tl.int8, "uint8": tl.uint8, "int16": tl.int16,
          "uint16": tl.uint16, "int32": tl.int32, "uint32": tl.uint32, "int64": tl.int64,
          "uint64": tl.uint64, "float8_e4m3fn": tl.float8e4nv, "float8_e5m2": tl.float8e5,
          "float8_e4m3fnuz": tl.float8e4b8, "float8_e5m2fnuz": tl.float8e5b16,
          "bool": tl.int1}


def _scalar_arg(v):
    v = np.asarray(v)
    t = _TL_OF[v.dtype.name]
    if v.dtype == np.float64:
        t = tl.float32  # Triton passes a Python float as fp32
        v = v.astype(np.float32)
    return tl.tensor(ti.TensorHandle(v.reshape(1).copy(), t), t)


def run(fn, meta, params, constexprs, grid, args, names, poison=None, order=None):
    """Run every program of the grid.  ``args``: per parameter an ndarray (a pointer), a numpy
    scalar, a Python value (a constexpr) or None; ``poison``: per argument the poison bits of an
    output buffer, or None; ``order``: the programs' linear indices in the order to run."""
    install()
    gx, gy, gz = (tuple(grid) + (1, 1))[:3]
    arrays, call = [], {}
    for i, (p, a) in enumerate(zip(params, args)):
        label = names[i] if names and i < len(names) else p
        if p in constexprs:
            call[p] = a.item() if isinstance(a, np.generic) else a
        elif a is None:
            call[p] = None
        elif isinstance(a, np.ndarray):
            arrays.append((label, a, (poison or {}).get(i)))
            call[p] = _pointer(a)
        else:
            call[p] = _scalar_arg(a)
    call.update(meta({k: (None if v is None else v) for k, v in zip(params, args)}))
    mem = Memory(arrays)
    mem.filename = fn.fn.__code__.co_filename
    mem.grid = (gx, gy, gz)
    rewritten = fn.rewrite()
    scope = ti._patch_lang(rewritten)
    _patch_libdevice(scope)
    _MEMORY.append(mem)
    n = gx * gy * gz
    ids = list(range(n)) if order is None else list(order)
    try:
        ti.interpreter_builder.set_grid_dim(gx, gy, gz)
        for pid in ids:
            x, y, z = pid % gx, (pid // gx) % gy, pid // (gx * gy)
            ti.interpreter_builder.set_grid_idx(x, y, z)
            mem.pid, mem.program = pid, (x, y, z)
            try:
                rewritten(**call)
            except Exception as e:  # noqa: BLE001 -- the kernel's, named; ours pass through
                cause = e
                while cause is not None and not isinstance(cause, KernelError):
                    cause = cause.__cause__
                if cause is not None:
                    raise cause from None
                raise KernelRaised(f"the kernel raised {type(e).__name__}: {str(e)[:400]}"
                                   f"{mem.where_of(e)}", exception=type(e).__name__) from None
        if mem.overlap is not None:
            raise mem.overlap
    finally:
        _MEMORY.pop()
        scope.restore()

