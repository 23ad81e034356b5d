"""Run a ``@triton.jit`` kernel on the CPU, every rounding as the GPU does it, every access checked.

The executor is Triton's own interpreter (``TRITON_INTERPRET=1``: the kernel's Python runs
with ``tl.*`` on numpy arrays), corrected where it rounds unlike a GPU, and run on a launch's
programs together: in batches, each value with a program axis in front (:mod:`grid`), one
program at a time only where the programs' control flow cannot agree or an operation has no
batched form (the launch's note says so).
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
``a and b`` on tensors: Python's      ``logical_and`` (``or``: ``_or``;    as the compiler
truthiness (the mask = ``b``)         ``not``: ``__not__``)
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
(``OverlappingWrites``), and, in a batch, an element another program of it read is never
stored (``RacyRead``); an output element still holding normcheck's poison is never read
(``ReadUnwritten``; in a batch judged as it ends: a race where another program of it wrote
the element meanwhile).

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
from normcheck.backends.triton import grid  # noqa: E402
from normcheck.backends.triton.stubs import Missing, MissingHelper, stub_modules  # noqa: E402
from normcheck.errors import (FailureKind, KernelError, KernelRaised,  # noqa: E402
                              MisalignedAccess, OutOfBounds, Unsupported)

__all__ = ["install", "load_module", "kernel_function", "run", "Memory", "RacyRead", "ReadUnwritten",
           "OverlappingWrites", "LibdeviceModule", "with_semantic"]

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


def _fast_cast(data, s, d, rtz):
    """A float conversion done on the storage in one or two passes where it can be (exact
    widenings; fp32 to bf16 and fp16 to nearest even: the same bits as :func:`stored`, a test
    holds them to it on every bf16 and fp16 value and on random fp32 bits); else None."""
    if s == d:
        return data
    if d == tl.float32 and s == tl.bfloat16:
        return (data.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if d == tl.float32 and s == tl.float16:
        return data.astype(np.float32)
    if s == tl.float32 and not rtz:
        if d == tl.float16:
            return data.astype(np.float16)
        if d == tl.bfloat16:
            bits = data.view(np.uint32)
            out = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
                   >> np.uint32(16)).astype(np.uint16)
            nan = np.isnan(data)
            if nan.any():
                out = np.where(nan, np.uint16(0x7FC0) | ((bits >> np.uint32(16)).astype(np.uint16)
                                                       & np.uint16(0x8000)), out)
            return out
    return None


def _cast(self, src, dst_type, rounding_mode=None):
    s, d = _scalar(src.dtype), _scalar(dst_type)
    rtz = rounding_mode is not None and rounding_mode == ti._ir.ROUNDING_MODE.RTZ
    if s.is_floating() and d.is_floating():
        with np.errstate(over="ignore", invalid="ignore"):
            fast = _fast_cast(src.data, s, d, rtz)
        if fast is not None:
            return ti.TensorHandle(fast, d)
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


def _data_axis(self, data):
    """(data, the axis of data to reduce, lead) for a reduction's logical axis: the program
    axis of a batch (grid.lead() = 1) kept in front, axis None as all of a program's values."""
    k = grid.lead()
    if self.axis is None:
        return data.reshape(data.shape[:k] + (-1,)), k, k
    return data, (self.axis + k if self.axis >= 0 else self.axis + data.ndim), k


def _kept(self, r, ax, k, ndim):
    """A reduction's result r (the reduced axis gone) as tl's keep_dims/axis ask."""
    if self.keep_dims:
        if self.axis is not None:
            return np.expand_dims(r, ax)
        return np.reshape(r, np.shape(r)[:k] + (1,) * ndim)
    if self.axis is None and not k:
        return r[()] if isinstance(r, np.ndarray) else r
    return r


def _sum(self, input):
    """tl.sum in the element type, as neighbour pairs: (x0+x1)+(x2+x3)... level by level."""
    t = _scalar(input.dtype)
    data, ax, k = _data_axis(self, input.handle.data)
    x = np.moveaxis(data, ax, 0)
    with np.errstate(all="ignore"):
        while x.shape[0] > 1:
            n = x.shape[0]
            half = n // 2
            s = _tree_add(x[0:2 * half:2], x[1:2 * half:2], t)
            x = np.concatenate([s, x[2 * half:]]) if n % 2 else s
    return self.to_tensor(_kept(self, x[0], ax, k, len(input.shape)), input.dtype)


def _generic_reduce(self, input):
    """tl.reduce with the kernel's combine function, as neighbour pairs level by level (the
    order tl.sum takes here), each level one call of the combine on whole halves (the
    interpreter's own folds element by element, in Python, left to right)."""
    ndim = len(input[0].shape)
    ax, k = None, grid.lead()
    datas = []
    for t in input:
        d, ax, k = _data_axis(self, t.handle.data)
        datas.append(np.moveaxis(d, ax, k))
    if k:
        datas = grid.lead_axes(*datas)
    dtypes = [t.dtype for t in input]
    pre = (slice(None),) * k
    while datas[0].shape[k] > 1:
        n = datas[0].shape[k]
        half = n // 2
        left = [self.to_tensor(d[pre + (slice(0, 2 * half, 2),)], t)
                for d, t in zip(datas, dtypes)]
        right = [self.to_tensor(d[pre + (slice(1, 2 * half, 2),)], t)
                 for d, t in zip(datas, dtypes)]
        out = self.combine_fn.fn(*left, *right)
        out = out if isinstance(out, tuple) else (out,)
        new = []
        for o, d in zip(out, datas):
            v = o.handle.data if isinstance(o, tl.core.tensor) else np.asarray(
                getattr(o, "value", o))
            head = d[pre + (slice(0, half),)]
            v = np.broadcast_to(v, head.shape).astype(d.dtype)
            new.append(np.concatenate([v, d[pre + (slice(2 * half, n),)]], axis=k) if n % 2 else v)
        datas = new
    ret = []
    for d, t in zip(datas, dtypes):
        r = d[pre + (0,)]
        ret.append(self.to_tensor(_kept(self, r, ax, k, ndim), t))
    return ret


def _min_max(self, input, val_reduce_op, idx_reduce_op=None):
    inp = input[0] if isinstance(input, tuple) else input
    t = _scalar(inp.dtype)
    if not _special(t) and not grid.lead():
        return _ORIGINAL["min_max"](self, input, val_reduce_op, idx_reduce_op)
    v, ax, k = _data_axis(self, values(inp.handle) if _special(t) else inp.handle.data)
    ndim = len(inp.shape)
    val = idx = None
    if val_reduce_op:
        r = _kept(self, val_reduce_op(v, axis=ax), ax, k, ndim)
        val = self.to_tensor(stored(r, t) if _special(t) else r, inp.dtype)
    if idx_reduce_op:
        idx = self.to_tensor(_kept(self, idx_reduce_op(v, axis=ax), ax, k, ndim), tl.int32)
    if val is not None and idx is not None:
        return val, idx
    return val if val is not None else idx


def _to_tensor(self, ret, dtype):
    """A reduction's or scan's result as a tensor: in a batch, an array's first axis is the
    program axis (a 0-d value is the same for every program)."""
    if not grid.lead():
        return _ORIGINAL["to_tensor"](self, ret, dtype)
    np_dtype = ti._get_np_dtype(dtype)
    a = np.asarray(ret)
    if a.ndim == 0:
        a = a.reshape(1)
    a = a.astype(np_dtype)
    ty = tl.block_type(dtype, list(a.shape[1:])) if a.ndim > 1 else dtype
    return tl.core.tensor(ti.TensorHandle(a, dtype.scalar), ty)


def _unravel(self, input, axis):
    if not grid.lead() or axis is not None:
        return _ORIGINAL["unravel"](self, input, axis)
    return tuple(self.to_tensor(t.handle.data.reshape(t.handle.data.shape[0], -1), t.dtype)
                 for t in input), 0


def _scan(self, input):
    """A scan in a batch: the interpreter's, told the data's axis (after the program axis)."""
    if not grid.lead() or self.axis is None:
        return _ORIGINAL["scan"](self, input)
    saved = self.axis
    self.axis = saved + 1 if saved >= 0 else saved
    try:
        return _ORIGINAL["scan"](self, input)
    finally:
        self.axis = saved


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


# -- Python's and / or / not on tensors, as Triton's compiler reads them --------------------------
def _bool_op(is_and: bool, *thunks):
    """``a and b`` / ``a or b`` as Triton's code generator evaluates them: a compile-time value
    (a Python scalar, a constexpr) short-circuits as in Python; the tensors are combined by
    ``logical_and`` / ``logical_or`` -- never Python's truthiness of a whole tensor, which made
    ``mask = (cols < N) and (rows < M)`` the second operand alone (#64)."""
    tensors, last = [], None
    for thunk in thunks:
        last = thunk()
        if isinstance(last, tl.tensor):
            tensors.append(last)
        elif bool(last) is not is_and:  # False in an `and`, True in an `or`: it is the value
            return last
    if not tensors:
        return last
    out = tensors[0]
    for t in tensors[1:]:
        out = out.logical_and(t) if is_and else out.logical_or(t)
    return out


def _not(value):
    """``not v``: a tensor's logical not (Triton's ``__not__``), else Python's."""
    return value.__not__() if isinstance(value, tl.tensor) else not value


class _Transformer(ti.ASTTransformer):
    """The interpreter's rewrite of a kernel, and ``and`` / ``or`` / ``not`` as the compiler
    reads them (:func:`_bool_op`, :func:`_not`)."""

    def visit_Assign(self, node):
        # Triton 3.8's rewrite of an assignment does not visit its value (3.9's does): the
        # value first, then the interpreter's own rewrite of the assignment
        node.value = self.visit(node.value)
        return super().visit_Assign(node)

    def visit_BoolOp(self, node):
        import ast

        node = self.generic_visit(node)
        thunks = [ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                                kw_defaults=[], defaults=[]), body=v)
                  for v in node.values]
        return ast.copy_location(ast.Call(
            func=ast.Name(id="_normcheck_bool_op", ctx=ast.Load()),
            args=[ast.Constant(isinstance(node.op, ast.And)), *thunks], keywords=[]), node)

    def visit_UnaryOp(self, node):
        import ast

        node = self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        return ast.copy_location(ast.Call(func=ast.Name(id="_normcheck_not", ctx=ast.Load()),
                                          args=[node.operand], keywords=[]), node)


def install():
    """Apply the corrections to the interpreter (once; idempotent)."""
    if _ORIGINAL:
        return
    # the kernel's own text rewritten as the compiler reads its boolean operators (the names are
    # the interpreter module's: its rewrite gives a kernel's namespace those it lacks)
    ti._normcheck_bool_op, ti._normcheck_not = _bool_op, _not
    ti.FunctionRewriter.ast_transformer = _Transformer()
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
    _ORIGINAL["to_tensor"] = ti.ReduceScanOpInterface.to_tensor
    _ORIGINAL["unravel"] = ti.ReduceOps.unravel
    _ORIGINAL["scan"] = ti.ScanOps.apply_impl
    ti.ReduceOps.sum = _sum
    ti.ReduceOps.min_max = _min_max
    ti.ReduceOps.generic_reduce = _generic_reduce
    ti.ReduceScanOpInterface.to_tensor = _to_tensor
    ti.ReduceOps.unravel = _unravel
    ti.ScanOps.apply_impl = _scan
    grid.install()


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


class LibdeviceModule:
    """What ``triton.language.extra.libdevice`` resolves to under the executor: each name a
    builtin that lowers to :func:`_extern` (Triton's own stub has empty bodies on a CPU)."""

    def __getattr__(self, name):
        from triton.language.extra.cuda import libdevice as cuda_libdevice

        fn = getattr(cuda_libdevice, name)

        def call(*args, **kwargs):
            kwargs.pop("_semantic", None)
            return fn(*args, _semantic=ti.interpreter_semantic, **kwargs)

        call.__wrapped__ = fn
        return call


# -- memory: every access checked ---------------------------------------------------------------
def _wrapped(elem: int, size: int) -> str:
    """What an element far before an array's start is, where a 32-bit offset explains it."""
    if 0 <= elem + (1 << 32) < size:
        return (f": element {elem + (1 << 32)} wrapped to 32 bits (an offset computed in int32 "
                "-- tl.program_id(0) * stride, say; cast to tl.int64 first)")
    return ""


class Window:
    """An array of which only the elements from ``base`` on exist (the large-index run: a launch
    past 2^31 elements whose last programs run, on its last rows): the rest is address space no
    program of the run should touch, and who wrote or read what is kept for the window alone --
    but for a *walk* (a persistent grid's programs walk every row they own on the way to the
    window's: the rows before it read as zeros, written unrecorded)."""

    def __init__(self, array, base: int, walk: bool = False):
        self.array, self.base, self.walk = array, int(base), bool(walk)


class _Shifted:
    """Per-element bookkeeping of a window, indexed by the array's own element numbers."""

    __slots__ = ("a", "base")

    def __init__(self, a, base):
        self.a, self.base = a, base

    def __getitem__(self, e):
        return self.a[e - self.base]

    def __setitem__(self, e, v):
        self.a[e - self.base] = v


class Memory:
    """The launch's arrays by address: (name, array or Window, poison bits or None), who wrote
    what and, while programs run batched, who read what; and the log that undoes a batch's
    stores."""

    def __init__(self, arrays):
        spans = []
        for name, a, poison in arrays:
            base = a.base if isinstance(a, Window) else 0
            walk = isinstance(a, Window) and a.walk
            a = a.array if isinstance(a, Window) else a
            start = a.__array_interface__["data"][0]
            spans.append((start, start + a.nbytes, name, a, poison, base, walk))
        spans.sort(key=lambda s: s[0])
        self.bases = [s[5] for s in spans]
        self.walks = [s[6] for s in spans]
        spans = [s[:5] for s in spans]
        self.spans = spans
        self.starts = np.array([s[0] for s in spans], dtype=np.uint64)
        self.ends = np.array([s[1] for s in spans], dtype=np.uint64)
        self.items = np.array([s[3].itemsize or 1 for s in spans], dtype=np.uint64)
        self.writers = [None] * len(spans)  # per span: int32 program of each element, -1 none
        # a batch's reads, to tell a store to an element another program of the batch read (one
        # program at a time, in order, sees the reads of earlier batches as done before): per
        # span the reads kept as they came (elements, programs), made into readers -- int32, -1
        # none, -2 several -- at the batch's first store to the span; both forgotten as it ends
        self.reads = [None] * len(spans)
        self.readers = [None] * len(spans)
        self.log = None  # while a batch runs: what undoes its stores (grid.Diverged)
        self.program = (0, 0, 0)
        self.pid = 0
        self.filename = None
        self.overlap = None  # the first store to an element another program stored or read
        self.grid = (1, 1, 1)
        self.notes = []  # what the launch's note says (batches split, programs one at a time)
        self.poisoned = []  # a batch's reads of unwritten elements: (span, elems, progs, line)

    def _at(self, line) -> str:
        """``, program (x, y, z), at file:line: `text` `` (without the line where None)."""
        if line is None:
            return f", program {self.program}"
        text = linecache.getline(self.filename, line).strip()
        return (f", program {self.program}, at {os.path.basename(self.filename)}:{line}: "
                f"`{text[:160]}`")

    def where(self, pid=None) -> str:
        """Where the kernel is: its innermost line being run (in program ``pid`` where given)."""
        if pid is not None:
            self.program = self._program(int(pid))
        return self._at(self.line_of(sys._getframe(1)))

    def line_of(self, f):
        """The kernel's innermost line in the stack from frame ``f``."""
        while f is not None and f.f_code.co_filename != self.filename:
            f = f.f_back
        return f.f_lineno if f is not None else None

    def where_of(self, e) -> str:
        """Where an exception left the kernel: its deepest line in the traceback."""
        return self._at(self.line_in(e))

    def line_in(self, e):
        tb, line = e.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                line = tb.tb_lineno
            tb = tb.tb_next
        return line

    def check(self, ptrs, mask, itemsize, access):
        """The active lanes of an access (:class:`Lanes`); raises on a lane outside every array
        or misaligned.  In a batch a value's first axis is the program axis: an access whose
        addresses and mask are the same for every program (one entry) is checked once and
        made by each of them (``progs`` None)."""
        b = grid.active()
        shape = np.broadcast_shapes(np.shape(ptrs.data),
                                    np.shape(mask.data) if mask is not None else ())
        uniform = b is not None and shape[0] == 1 and b.n > 1
        if b is not None and not uniform:
            shape = (b.n,) + shape[1:]
        addr = np.asarray(np.broadcast_to(ptrs.data, shape), dtype=np.uint64).reshape(-1)
        total = addr.size
        per = max(1, int(np.prod(shape[1:]))) if b is not None else max(1, total)
        active = None
        if mask is not None:
            active = np.broadcast_to(mask.data, shape).reshape(-1)
            if active.dtype != np.bool_:
                active = active.astype(bool)
            if active.all():
                active = None
            else:
                addr = addr[active]
        if b is None:
            progs = np.full(addr.size, self.pid, np.int32)
        elif uniform:
            progs = None
        elif active is None:
            progs = np.repeat(b.pids32, per)
        else:
            progs = np.repeat(b.pids32, active.reshape(b.n, per).sum(axis=1))
        if b is not None:
            b.max_lanes = max(b.max_lanes, per)
        lanes = Lanes(shape, active, progs, b)
        if addr.size == 0:
            lanes.k, lanes.elems = np.zeros(0, np.int64), np.zeros(0, np.int64)
            return lanes
        lo, hi = addr.min(), addr.max()
        k0 = int(np.searchsorted(self.starts, lo, side="right")) - 1
        if k0 >= 0 and hi + np.uint64(itemsize) <= self.ends[k0]:  # one array: the usual case
            k = np.full(addr.size, k0, np.int64)
        else:
            k0 = None
            k = np.searchsorted(self.starts, addr, side="right").astype(np.int64) - 1
            kk = np.maximum(k, 0)
            inside = (k >= 0) & (addr + np.uint64(itemsize) <= self.ends[kk])
            if not inside.all():
                j = int(np.flatnonzero(~inside)[0])
                self.program = self._program(lanes.program(j))
                a = int(addr[j])
                below = int(k[j])  # the array ending below the address (-1: none)
                if below < 0 or self._before(below + 1, a):
                    start, _end, name, arr, _p = self.spans[below + 1]
                    elem = -(-(start - a) // (arr.itemsize or 1))
                    detail = (f"{access} of element {-elem} of `{name}` (before its start)"
                              + _wrapped(-elem, arr.size))
                else:
                    start, _end, name, arr, _p = self.spans[below]
                    item = arr.itemsize or 1
                    elem = (a - start) // item
                    detail = (f"{access} of element {elem} of `{name}`, which has {arr.size} "
                              f"elements (valid indices 0..{arr.size - 1})")
                raise OutOfBounds(f"out-of-bounds {detail}: lane {lanes.lane(j) % per} of the "
                                  f"{'masked' if mask is not None else 'unmasked'} "
                                  f"{access}{self.where()}", access=access, name=name)
        if itemsize > 1:
            off = addr & np.uint64(itemsize - 1) if itemsize & (itemsize - 1) == 0 else \
                addr % np.uint64(itemsize)
            if off.any():
                j = int(np.flatnonzero(off)[0])
                self.program = self._program(lanes.program(j))
                raise MisalignedAccess(f"misaligned {access} of {itemsize} bytes at an address "
                                       f"{int(addr[j]) % itemsize} bytes off{self.where()}")
        if k0 is not None:
            item = int(self.items[k0])
            d = addr - self.starts[k0]
            if item & (item - 1) == 0:
                d >>= np.uint64(item.bit_length() - 1)
            else:
                d //= np.uint64(item)
            elems = d.view(np.int64)  # below 2^63: an index into an array
            lanes.span = k0
        else:
            elems = ((addr - self.starts[k]) // self.items[k]).astype(np.int64)
        lanes.k, lanes.elems = k, elems
        if any(self.bases):
            self._in_window(lanes, per)
        return lanes

    def _in_window(self, lanes, per):
        """A Window's elements before its base are rows the large-index run does not hold: a
        program reading one computed another row's offset (an index that wrapped, unsigned)."""
        for i, e, _p in self._spans(lanes):
            base = self.bases[i]
            if base and not self.walks[i] and (e < base).any():
                j = int(np.flatnonzero(e < base)[0])
                name, arr = self.spans[i][2], self.spans[i][3]
                raise OutOfBounds(
                    f"out-of-bounds access of element {int(e[j])} of `{name}`, in a row the "
                    f"large-index run does not hold (of its {arr.size} elements only "
                    f"{base}.. exist, the rows of the programs it runs): the program computed "
                    f"another row's offset -- an index that wrapped (unsigned 32 bits?)"
                    f"{self.where()}", access="access", name=name)

    def _before(self, i, a) -> bool:
        """Whether address ``a``, outside every array, is span i's (before its start) rather
        than the one below's (past its end): within a Window's margin of 2^31 elements (where a
        wrapped 32-bit offset lands), else the nearer of the two."""
        if i >= len(self.spans):
            return False
        start, arr = self.spans[i][0], self.spans[i][3]
        if self.bases[i] and start - a <= (1 << 31) * (arr.itemsize or 1):
            return True
        return start - a < a - self.spans[i - 1][1] if i > 0 else True

    def _track(self, i):
        """A fresh per-element record of span i: -1 each (its window's, for a Window)."""
        base = self.bases[i]
        a = np.full(self.spans[i][3].size - base, -1, np.int32)
        return _Shifted(a, base) if base else a

    def _writers(self, i):
        if self.writers[i] is None:
            self.writers[i] = self._track(i)
        return self.writers[i]

    def _spans(self, lanes):
        """(span index, elements, their programs or None: every program of the batch) for each
        span the lanes touch."""
        if lanes.span is not None:
            out = [(lanes.span, lanes.elems, lanes.progs)]
        else:
            k = lanes.k
            out = [(int(i), lanes.elems[k == i], None if lanes.progs is None else
                    lanes.progs[k == i]) for i in np.unique(k)]
        if any(self.walks):  # a walk's rows before the window: read and written, unrecorded
            out = [(i, e, p) if not self.walks[i] else
                   (i, e[e >= self.bases[i]], None if p is None else p[e >= self.bases[i]])
                   for i, e, p in out]
        return out

    def _reader(self, lanes, p, j):
        """The program named for lane j of a span's lanes (the batch's first where uniform)."""
        return p[j] if p is not None else lanes.batch.pids[0]

    def loaded(self, lanes):
        for i, e, p in self._spans(lanes):
            start, _end, name, arr, poison = self.spans[i]
            w = self.writers[i]
            if w is not None:
                we = w[e]
                other = (we >= 0) & ((we != p) if p is not None else True)
                if other.any():
                    j = int(np.flatnonzero(other)[0])
                    raise RacyRead(f"reads element {int(e[j])} of `{name}`, which program "
                                   f"{self._program(int(we[j]))} wrote in the same launch "
                                   f"(programs run in no fixed order on a GPU)"
                                   f"{self.where(self._reader(lanes, p, j))}")
            if poison is not None:
                flat = arr.reshape(-1).view(f"u{arr.itemsize}")
                unw = flat[e] == poison
                if w is not None:
                    unw &= w[e] < 0
                if unw.any():
                    j = int(np.flatnonzero(unw)[0])
                    if lanes.batch is not None:  # told when the batch ends: a program of it
                        # may write it yet (a race then, as one program at a time finds)
                        rp = p[unw] if p is not None else np.full(int(unw.sum()),
                                                                 lanes.batch.pids32[0])
                        self.poisoned.append((i, e[unw], rp,
                                              self.line_of(sys._getframe(1))))
                    else:
                        raise ReadUnwritten(f"reads element {int(e[j])} of `{name}` before "
                                            f"any program wrote it (it holds normcheck's "
                                            f"poison: an output read as an input)"
                                            f"{self.where(self._reader(lanes, p, j))}")
            if lanes.batch is not None:
                if self.readers[i] is not None:
                    self._read_by(i, e, p)
                elif self.reads[i] is None:
                    self.reads[i] = [(e, p)]
                else:
                    self.reads[i].append((e, p))

    def batch_done(self):
        """Forget the batch's reads (the next batch runs after it, as in order)."""
        self.reads = [None] * len(self.spans)
        self.readers = [None] * len(self.spans)

    def _readers(self, i):
        """Span i's readers in this batch, made from its reads kept so far (None: no reads)."""
        if self.readers[i] is None and self.reads[i] is not None:
            self.readers[i] = self._track(i)
            for e, p in self.reads[i]:
                self._read_by(i, e, p)
            self.reads[i] = None
        return self.readers[i]

    def _read_by(self, i, e, p):
        """Note who read elements e (in a batch: a later store by another program is a race);
        p None: every program of the batch."""
        r = self.readers[i]
        if p is None:
            r[e] = -2
            return
        prev = r[e]
        r[e] = p
        several = r[e] != p  # another program read it in this access
        other = prev != p
        if other.any():  # read before (or by another program): -1 is no one
            several |= other & (prev != -1)
        if several.any():
            r[e[several]] = -2

    def stored(self, lanes):
        for i, e, p in self._spans(lanes):
            w = self._writers(i)
            name = self.spans[i][2]
            if p is None:  # every program of the batch stores each element
                self._overlapping(name, e[0], lanes.batch.pids[0], lanes.batch.pids[1])
                p = np.full(e.shape, lanes.batch.pids[-1], np.int32)
            we = w[e]
            if self.overlap is None:
                # kept, and raised when the launch ends without a fault: a store past a row's
                # end overlaps the next row's before the last row's store leaves the array,
                # and the out-of-bounds store is the clearer report of the two
                hit = we >= 0
                if hit.any():
                    other = hit & (we != p)
                    if other.any():
                        j = int(np.flatnonzero(other)[0])
                        self._overlapping(name, e[j], we[j], p[j])
                r = self._readers(i) if lanes.batch is not None else None
                if r is not None:
                    rd = r[e]
                    seen = rd != -1
                    if seen.any():
                        read = seen & (rd != p)
                        if read.any():
                            j = int(np.flatnonzero(read)[0])
                            who = "other programs" if rd[j] == -2 else \
                                f"program {self._program(int(rd[j]))}"
                            self.pending(RacyRead(
                                f"writes element {int(e[j])} of `{name}`, which {who} read in "
                                f"the same launch (programs run in no fixed order on a GPU: "
                                f"the read may see either value){self.where(p[j])}"))
            if self.log is not None:
                self.log.append(("writers", i, e, we))
            w[e] = p
            if self.overlap is None and lanes.batch is not None and lanes.batch.n > 1:
                clash = w[e] != p  # two programs of the batch stored it in this access
                if clash.any():
                    j = int(np.flatnonzero(clash)[0])
                    self._overlapping(name, e[j], w[e[j]], p[j])

    def _overlapping(self, name, elem, writer, pid):
        """Program ``pid`` writes element ``elem`` of ``name``, which program ``writer`` wrote
        in the same launch: kept, raised as the launch ends (:meth:`pending`)."""
        self.pending(OverlappingWrites(
            f"writes element {int(elem)} of `{name}`, which program "
            f"{self._program(int(writer))} wrote in the same launch (two programs write one "
            f"element){self.where(pid)}"))

    def told(self):
        """The first read of an unwritten element the batch made, as one program at a time
        would have found it: RacyRead where another program of the batch has written it
        since, else ReadUnwritten; raised (the reads forgotten).  Nothing where none."""
        reads, self.poisoned = self.poisoned, []
        for i, e, p, line in reads:
            name = self.spans[i][2]
            w = self.writers[i]
            we = w[e] if w is not None else np.full(e.shape, -1, np.int32)
            other = (we >= 0) & (we != p)
            j = int(np.flatnonzero(other)[0]) if other.any() else 0
            self.program = self._program(int(p[j]))
            if other.any():
                raise RacyRead(f"reads element {int(e[j])} of `{name}`, which program "
                               f"{self._program(int(we[j]))} wrote in the same launch "
                               f"(programs run in no fixed order on a GPU){self._at(line)}")
            raise ReadUnwritten(f"reads element {int(e[j])} of `{name}` before any program "
                                f"wrote it (it holds normcheck's poison: an output read as an "
                                f"input){self._at(line)}")

    def pending(self, err):
        """Keep the launch's first race of its stores (raised when it ends without a fault)."""
        if self.overlap is None:
            self.overlap = err

    # -- a batch's loads and stores: numpy's gathers and scatters on the checked lanes ----------
    def _flat(self, lanes, itemsize):
        """The one array the lanes touch as unsigned words of ``itemsize`` bytes (the
        pointer's), or None where the lanes span arrays or the words are not the array's."""
        if lanes.span is None:
            return None
        arr = self.spans[lanes.span][3]
        if arr.itemsize != itemsize or not arr.flags.c_contiguous:
            return None
        return arr.reshape(-1).view(f"u{itemsize}")

    def gather(self, lanes, itemsize, np_dtype, other):
        """The loaded values (the interpreter's storage type), in the lanes' shape; None where
        the interpreter's own load must do it."""
        flat = self._flat(lanes, itemsize)
        if flat is None:
            return None
        got = flat[lanes.elems]
        if lanes.active is None:
            return got.view(np_dtype).reshape(lanes.shape)
        out = np.empty(lanes.shape, np_dtype)
        if other is None:
            out[...] = 0
        else:
            out[...] = np.broadcast_to(other.data, lanes.shape)
        out.view(f"u{itemsize}").reshape(-1)[lanes.active] = got
        return out

    def scatter(self, lanes, itemsize, value):
        """Store ``value`` at the lanes (logging what it overwrites); False where the
        interpreter's own store must do it."""
        flat = self._flat(lanes, itemsize)
        if flat is None or lanes.progs is None:
            return False
        v = np.broadcast_to(value.data, lanes.shape)
        if v.dtype.itemsize != itemsize:
            return False
        v = v.reshape(-1).view(f"u{itemsize}") if v.flags.c_contiguous else \
            np.ascontiguousarray(v).reshape(-1).view(f"u{itemsize}")
        if lanes.active is not None:
            v = v[lanes.active]
        if self.log is not None:
            self.log.append(("words", flat, lanes.elems, flat[lanes.elems]))
        flat[lanes.elems] = v
        return True

    def remember(self, addr, dtype):
        """Log the bytes at ``addr`` (active lanes' addresses) before a batch writes them."""
        if self.log is not None and addr.size:
            a = np.ascontiguousarray(addr, dtype=np.uint64)
            ones = np.ones(a.shape, bool)
            old = ti._interpreter.load(a, ones, np.zeros(a.shape, dtype), dtype)
            self.log.append(("bytes", a, old, ones))

    def undo(self):
        """Put back what the batch under way wrote (its stores, atomics and writers)."""
        for entry in reversed(self.log or ()):
            if entry[0] == "bytes":
                ti._interpreter.store(entry[1], entry[2], entry[3])
            elif entry[0] == "words":
                entry[1][entry[2]] = entry[3]
            else:
                self.writers[entry[1]][entry[2]] = entry[3]
        self.log = []
        self.poisoned = []
        self.batch_done()

    def _program(self, pid):
        gx, gy, _gz = self.grid
        return (pid % gx, (pid // gx) % gy, pid // (gx * gy))


class Lanes:
    """An access's active lanes, checked: ``shape`` (the lanes'), ``active`` (a flat mask of
    them, None for all), ``progs`` (each active lane's program; None in a batch: each lane
    is every program's), ``k``/``elems`` (each active lane's array and element), ``span``
    (the one array all touch, or None) and ``batch`` (or None)."""

    def __init__(self, shape, active, progs, batch):
        self.shape, self.active, self.progs, self.batch = shape, active, progs, batch
        self.span = None
        self.k = self.elems = None

    def lane(self, j) -> int:
        """The index among all lanes of active lane j."""
        return j if self.active is None else int(np.flatnonzero(self.active)[j])

    def program(self, j) -> int:
        return int(self.progs[j]) if self.progs is not None else int(self.batch.pids[0])


_MEMORY: list = []  # the launch under way (one at a time)
Missing.running = staticmethod(lambda: bool(_MEMORY))  # a stand-in called by a kernel fails


def _elem_size(ptrs):
    return max(1, ptrs.get_element_ty().primitive_bitwidth // 8)


_UNMASKED = []  # set while an unmasked load or store runs (it calls the masked one)


def _bool_mask(mask):
    """A mask as booleans: Triton 3.9's interpreter makes ``mask & (row > 0)`` an int32 array,
    which its own load then refuses ("mask has unsupported dtype"); nonzero is true, as on a
    GPU.  Triton 3.8's tensor descriptors pass their mask as a bare ndarray: wrapped."""
    if isinstance(mask, np.ndarray):
        return ti.TensorHandle(mask.astype(np.bool_), tl.int1)
    if mask is not None and mask.data.dtype != np.bool_:
        return ti.TensorHandle(mask.data.astype(np.bool_), tl.int1)
    return mask


def _checked(ptrs, mask, access):
    """Check an access of the launch under way (the mask as booleans; an unmasked access said
    so) and record it; (the mask to pass on, the lanes)."""
    mask = _bool_mask(mask)
    mem = _MEMORY[-1]
    lanes = mem.check(ptrs, None if _UNMASKED else mask, _elem_size(ptrs), access)
    (mem.loaded if access == "load" else mem.stored)(lanes)
    return mask, lanes


def _together(*handles):
    """Handles (None passed through) with their program axes broadcast to one length: each
    program's own lanes (for the interpreter's load, store and atomics, which want one shape)."""
    live = [h for h in handles if h is not None]
    shape = np.broadcast_shapes(*(np.shape(h.data) for h in live))
    return [None if h is None else ti.TensorHandle(_spread(h.data, shape), h.dtype)
            for h in handles]


def _spread(a, shape):
    """``a`` broadcast to ``shape`` as an array of its own: contiguous and writeable (Triton
    3.8's interpreter writes through every array it is given, a broadcast view included)."""
    a = np.asarray(a)
    if a.shape == tuple(shape) and a.flags.c_contiguous and a.flags.writeable:
        return a
    return np.array(np.broadcast_to(a, shape), order="C")


def _per_program(*handles):
    """In a batch, handles made one entry a program (an atomic's each program's own)."""
    b = grid.active()
    live = [h for h in handles if h is not None]
    shape = np.broadcast_shapes(*(np.shape(h.data) for h in live))
    shape = (b.n,) + shape[1:]
    return [None if h is None else ti.TensorHandle(_spread(h.data, shape), h.dtype)
            for h in handles]


def _masked_load(self, ptrs, mask, other, *rest, **kw):
    mask, lanes = _checked(ptrs, mask, "load")
    if lanes.batch is not None:
        t = ptrs.get_element_ty()
        got = _MEMORY[-1].gather(lanes, _elem_size(ptrs), ti._get_np_dtype(t), other)
        if got is not None:
            return ti.TensorHandle(got, t)
        ptrs, mask, other = _together(ptrs, mask, other)
    return _ORIGINAL["create_masked_load"](self, ptrs, mask, other, *rest, **kw)


def _written(ptrs, mask):
    """Log what a batch's write will overwrite (its active lanes' bytes)."""
    mem = _MEMORY[-1]
    if mem.log is not None:
        a = ptrs.data.reshape(-1)
        if mask is not None:
            a = a[np.broadcast_to(mask.data, ptrs.data.shape).reshape(-1)]
        mem.remember(a, ti._get_np_dtype(ptrs.get_element_ty()))


def _masked_store(self, ptrs, value, mask, *rest, **kw):
    mask, lanes = _checked(ptrs, mask, "store")
    if lanes.batch is not None:
        if _MEMORY[-1].scatter(lanes, _elem_size(ptrs), value):
            return None
        ptrs, value, mask = _together(ptrs, value, mask)
        _written(ptrs, mask)
    return _ORIGINAL["create_masked_store"](self, ptrs, value, mask, *rest, **kw)


def _atomic_rmw(self, op, ptr, val, mask, *rest):
    """An atomic's addresses checked like a store's (atomics from several programs to one
    element are what atomics are for: no overlap is recorded)."""
    mask = _bool_mask(mask)  # an unmasked atomic comes with an all-true mask: said unmasked
    _MEMORY[-1].check(ptr, None if mask is None or mask.data.all() else mask, _elem_size(ptr),
                      "atomic")
    if grid.active() is not None:  # every program's atomic, in the batch's order
        ptr, val, mask = _per_program(ptr, val, mask)
        _written(ptr, mask)
    return _ORIGINAL["create_atomic_rmw"](self, op, ptr, val, mask, *rest)


def _atomic_cas(self, ptr, cmp, val, *rest):
    _MEMORY[-1].check(ptr, None, _elem_size(ptr), "atomic compare-and-swap")
    if grid.active() is not None:
        ptr, cmp, val = _per_program(ptr, cmp, val)
        _written(ptr, None)
    return _ORIGINAL["create_atomic_cas"](self, ptr, cmp, val, *rest)


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


#: Installed modules a file imports that could not be imported here, stood in for: name -> why.
STOOD_IN: dict = {}


class file_imports:
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
            except (ImportError, OSError) as e:
                # an installed module that cannot be imported (torch installed --no-deps for
                # its headers: no typing_extensions; a CUDA build without libcudnn): stood in,
                # as a module that is not installed is -- host code the kernels do not run
                if self.depth != 1 or level:
                    raise
                STOOD_IN.setdefault(name.split(".")[0], f"{type(e).__name__}: {e}")
                stub_modules([name], "")
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
    with file_imports():
        exec(code, ns)  # noqa: S102 -- the user's kernel file, in the sandboxed worker
    stub = sys.modules.get(_LIBDEVICE_STUB)
    for k, v in list(ns.items()):  # libdevice's stubs (empty on a CPU) -> the executor's
        if v is stub and stub is not None:
            ns[k] = LibdeviceModule()
        elif callable(v) and getattr(v, "__module__", None) == _LIBDEVICE_STUB:
            ns[k] = getattr(LibdeviceModule(), getattr(v, "__name__", k))
        elif tl.core.is_builtin(v):  # `from triton.language.math import rsqrt`: a builtin
            ns[k] = with_semantic(v)  # called by name, as the compiler would call it
    return ns


def with_semantic(f):
    def call(*args, **kwargs):
        kwargs.pop("_semantic", None)
        return f(*args, _semantic=ti.interpreter_semantic, **kwargs)

    call.__name__ = getattr(f, "__name__", "builtin")
    call.__wrapped__ = f
    return call


def kernel_function(ns: dict, entry: str, config=None):
    """The interpreted function called ``entry`` (through autotune/heuristics wrappers): (fn,
    the wrappers' constexprs as a callable of the arguments).  ``config``: the constexprs of
    its autotune config, where the wrappers were not rebuilt (:mod:`extract`)."""
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
        if config:
            out.update(config)
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


#: A batch's size: about this many lanes of one access across its programs (a 4096-wide row:
#: 128 programs; 2^19 float64 lanes are 4 MiB a value), the first batch FIRST_BATCH programs.
BATCH_LANES = 1 << 18
FIRST_BATCH = 16
MAX_BATCH = 4096


def _read_only(v):
    """What a heuristic sees of an argument: an array it cannot write (its ``out=`` refused)."""
    if isinstance(v, np.ndarray):
        v = v.view()
        v.flags.writeable = False
    return v


def run(fn, meta, params, constexprs, grid_, args, names, poison=None, order=None,
        batched=True):
    """Run every program of the grid; the launch's note (or None).  ``args``: per parameter an
    ndarray (a pointer), a numpy scalar, a Python value (a constexpr) or None; ``poison``: per
    argument the poison bits of an output buffer, or None; ``order``: the programs' linear
    indices in the order to run; ``batched``: programs run together (:mod:`grid`), else one at
    a time as Triton's interpreter runs them."""
    install()
    gx, gy, gz = (tuple(grid_) + (1, 1))[:3]
    arrays, call, where = [], {}, []
    STORED.clear()
    for i, (p, a) in enumerate(zip(params, args)):
        label = names[i] if names and i < len(names) else p
        if p in constexprs:
            call[p] = a.item() if isinstance(a, np.generic) else a
        elif a is None:
            call[p] = None
        elif isinstance(a, (np.ndarray, Window)):
            where.append(i)
            arrays.append((label, a, (poison or {}).get(i)))
            call[p] = _pointer(a.array if isinstance(a, Window) else a)
        else:
            call[p] = _scalar_arg(a)
    call.update(meta({k: _read_only(v.array if isinstance(v, Window) else v)
                      for k, v in zip(params, args)}))
    mem = Memory(arrays)
    mem.filename = fn.fn.__code__.co_filename
    mem.grid = (gx, gy, gz)
    n = gx * gy * gz
    rewritten = fn.rewrite()
    _patch_languages(rewritten)
    names_ = rewritten.__globals__
    saved_range = names_.get("range", _NONE)
    names_["range"] = grid.batch_range  # Python's where no bound is a value per program
    _MEMORY.append(mem)
    ids = list(range(n)) if order is None else list(order)
    launch = _Launch(fn, rewritten, call, mem, n)
    try:
        ti.interpreter_builder.set_grid_dim(gx, gy, gz)
        if batched and fn in _ONE_AT_A_TIME:
            launch.say(_ONE_AT_A_TIME[fn])
        if batched and fn not in _ONE_AT_A_TIME:
            launch.batches(ids)
        else:
            for pid in ids:
                launch.one(pid)
        if mem.overlap is not None:
            raise mem.overlap
        # which elements a program stored, by argument (an op's provenance: triton/op.py);
        # the spans are in address order, found again by their array
        by_array = {id(sp[3]): w for sp, w in zip(mem.spans, mem.writers)}
        for i, (_label, a, _p) in zip(where, arrays):
            w = by_array.get(id(a.array if isinstance(a, Window) else a))
            if isinstance(w, np.ndarray):
                STORED[i] = w >= 0
    finally:
        _MEMORY.pop()
        if saved_range is _NONE:
            names_.pop("range", None)
        else:
            names_["range"] = saved_range
    return "; ".join(mem.notes) or None


_LANGUAGES: dict = {}  # id -> the module namespace whose triton.language is patched (held)
#: The last launch's stored elements: {argument index: bool per element of the array}
STORED: dict = {}


def _patch_languages(fn):
    """Patch, once a process, triton.language as the interpreter does (its builtins given the
    interpreter's semantic; tl.tensor's conversions then given grid.py's batched forms; a
    kernel's libdevice; a @jit function called by the kernel through :func:`_device_call`) for
    the modules ``fn``'s namespace holds.  Never undone: the worker runs nothing but kernels, and
    the interpreter's inspect.getmembers over the modules, at each launch and each call of a
    @jit function, was a third of a small launch."""
    g = fn.__globals__
    if id(g) in _LANGUAGES:
        return
    _LANGUAGES[id(g)] = g
    sc = ti._patch_lang(fn)
    if len(_LANGUAGES) == 1:
        _patch_libdevice(sc)
        sc.set_attr(ti.InterpretedFunction, "__call__", _device_call)
    grid.tensor_patches(sc)  # after the interpreter's own (which it reads)


def _device_call(self, *args, **kwargs):
    """A @triton.jit function called by the kernel, as the interpreter calls it (its module's
    languages patched once, not at every call)."""
    _patch_languages(self.fn)
    fn = self.rewrite()
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        raise ti.InterpreterError(repr(e)) from e


_NONE = object()
_ONE_AT_A_TIME: dict = {}  # kernel -> why it has no batched form (learnt once a process)
_LANES: dict = {}  # kernel -> the most lanes one program's access had in its last batch


class _Launch:
    """The programs of one launch, run in batches (grid.py) or one at a time."""

    def __init__(self, fn, rewritten, call, mem, n):
        self.fn, self.rewritten, self.call, self.mem = fn, rewritten, call, mem
        self.n, self.alone = n, 0  # the launch's programs; those run alone as they diverged

    def _call(self):
        try:
            self.rewritten(**self.call)
        except Exception as e:  # noqa: BLE001 -- the kernel's, named; ours pass through
            cause = e
            while cause is not None and not isinstance(cause, (KernelError, MissingHelper)):
                cause = cause.__cause__
            if isinstance(cause, MissingHelper):  # nothing ran as written: no verdict (#64)
                raise Unsupported(f"{cause}{self.mem.where_of(e)}; nothing of the kernel can "
                                  "be judged without it") from None
            if cause is not None:
                raise cause from None
            b = grid.active()
            if b is not None and b.failed is not None:
                self.mem.program = self.mem._program(b.failed)
            raise KernelRaised(f"the kernel raised {type(e).__name__}: {str(e)[:400]}"
                               f"{self.mem.where_of(e)}", exception=type(e).__name__) from None

    def one(self, pid):
        gx, gy, _gz = self.mem.grid
        x, y, z = pid % gx, (pid // gx) % gy, pid // (gx * gy)
        ti.interpreter_builder.set_grid_idx(x, y, z)
        self.mem.pid, self.mem.program = pid, (x, y, z)
        self._call()

    def batches(self, ids):
        lanes = _LANES.get(self.fn)  # the last launch's: its first batch sized as the rest
        i, size = 0, FIRST_BATCH if lanes is None else self.size(lanes)
        while i < len(ids):
            chunk = ids[i:i + size]
            i += len(chunk)
            lanes = self.group(chunk)
            if lanes:
                size = self.size(lanes)
                _LANES[self.fn] = lanes

    @staticmethod
    def size(lanes):
        return int(min(MAX_BATCH, max(1, BATCH_LANES // lanes)))

    def group(self, pids):
        """Run programs ``pids`` together; the most lanes one program's access had."""
        mem = self.mem
        if len(pids) == 1:
            self.one(pids[0])
            return 0
        b = grid.Batch(pids, mem.grid)
        first = pids[0]
        gx, gy, _gz = mem.grid
        ti.interpreter_builder.set_grid_idx(first % gx, (first // gx) % gy, first // (gx * gy))
        mem.pid, mem.program = first, mem._program(first)
        mem.log = []
        try:
            with grid.running(b):
                self._call()
            mem.told()
            mem.batch_done()
        except KernelError:
            mem.told()  # a read before the fault, in program order
            raise
        except grid.Diverged as d:
            mem.undo()
            mem.log = None
            self.diverged(pids, d)
        except grid.Unbatchable as u:
            mem.undo()
            mem.log = None
            _ONE_AT_A_TIME[self.fn] = f"its programs ran one at a time ({u})"
            self.say(_ONE_AT_A_TIME[self.fn])
            for pid in pids:
                self.one(pid)
        finally:
            mem.log = None
        return b.max_lanes

    def diverged(self, pids, d):
        """Run again in groups that agree on the value the batch's programs disagreed on (in
        the order of their first program)."""
        values = np.broadcast_to(d.values, (len(pids),))
        groups: dict = {}
        for pid, v in zip(pids, values.tolist()):
            groups.setdefault(v, []).append(pid)
        alone = sum(1 for g in groups.values() if len(g) == 1)
        self.alone += alone
        if alone and self.alone * 4 >= self.n and self.alone >= 2:  # the pace lost: said
            line = self.mem.line_in(d)
            at = f" at {os.path.basename(self.mem.filename)}:{line}" if line else ""
            text = f": `{linecache.getline(self.mem.filename, line).strip()[:120]}`" if line \
                else ""
            self.say(f"programs ran one at a time where {d.what} differed between them{at}"
                     f"{text}")
        for g in groups.values():
            self.group(g)

    def say(self, note):
        if note not in self.mem.notes:
            self.mem.notes.append(note)
