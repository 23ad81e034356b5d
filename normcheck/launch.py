"""Running what is being judged on a case: a CUDA C kernel bound to its spec, or a Python callable.

A *case* (:class:`Case`) is the stored rows and weights a norm is applied to (x, γ, β, the
residual of a fused add, ε; for a backward kernel also dy and the saved statistics, and in
``extra`` the residual stream's gradient dh of a fused backward, the forward's y of a backward
that reads y, the static scale of a quantised output).  A *target*
maps a case to the buffers the kernel wrote, by role: ``output`` (y), ``h``, ``mean``, ``rstd``,
``dx``, ``dgamma``, ``dbeta``.

:func:`bind` compiles the entries a spec names and returns a :class:`KernelTarget`: on each call
it allocates one buffer per role (a role is the same buffer in every launch, so statistics
written by one launch are read by the next), fills the inputs, poisons the outputs (a NaN with a
payload, so an element never written is recognisable), runs the launches in order and reads the
outputs back.  :class:`CallableTarget` does the same for a numpy/torch function; an exception it
raises is a failure of kind ``error`` (:class:`normcheck.errors.KernelRaised`), never a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import re

import numpy as np

from normcheck import formats, norms, spec as specs
from normcheck.formats import Format
from normcheck.backends.base import StructArg
from normcheck.errors import (CompileError, KernelError, KernelRaised, LaunchRefused, SpecError,
                              invalid)

__all__ = ["Case", "KernelTarget", "CallableTarget", "Outputs", "bind", "buffer_formats",
           "poisoned", "unwritten"]

def poisoned(shape, fmt, alternate: bool = False) -> np.ndarray:
    """An array of the poison code of ``fmt`` (any :class:`normcheck.formats.NumberFormat`, or
    the numpy dtype of a storage format): a NaN with a payload
    (:data:`normcheck.formats.POISON_BITS`), or a quantised format's (``alternate``: the second
    one)."""
    if not isinstance(fmt, formats.NumberFormat):
        fmt = formats.of_dtype(fmt)
    return np.full(shape, fmt.poison(alternate), fmt.uint).view(fmt.dtype)



def unwritten(a) -> np.ndarray:
    """Mask of the elements still holding the poison (never written by the kernel)."""
    return formats.of_dtype(np.asarray(a).dtype).unwritten(a)


@dataclass
class Case:
    """What a target receives, each array in the format the kernel reads it in."""

    x: np.ndarray
    gamma: np.ndarray | None = None
    beta: np.ndarray | None = None
    residual: np.ndarray | None = None
    eps: np.float32 = np.float32(1e-5)
    dy: np.ndarray | None = None
    mean: np.ndarray | None = None
    rstd: np.ndarray | None = None
    extra: dict = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return self.x.shape[0]

    @property
    def cols(self) -> int:
        return self.x.shape[1]

    def head(self, i: int, n: int = 1) -> "Case":
        """Rows i..i+n of the case (weights shared)."""
        def cut(a):
            return None if a is None else np.ascontiguousarray(a[i:i + n])
        extra = {k: (cut(v) if isinstance(v, np.ndarray) and v.ndim == 2 and
                     v.shape[0] == self.rows else v) for k, v in self.extra.items()}
        return Case(cut(self.x), self.gamma, self.beta, cut(self.residual), self.eps,
                    cut(self.dy), cut(self.mean), cut(self.rstd), extra)


def buffer_formats(spec: specs.KernelSpec, dtype, out_dtype=None, quant=None) -> dict:
    """The format of every buffer role of a spec: an argument's own ``dtype``, else the spec's
    ``dtypes`` for the role, else the storage format (``dtype``; y: ``out_dtype``; mean and
    rstd: float32); a quantised output in its contract's format, its scale roles float32 or the
    block-scale format.  x may be fp8 (its values carried in fp16 for the oracle); the
    residual and h may have storage formats of their own."""
    fmt = formats.get(dtype)
    own = dict(spec.dtypes or {})
    out = quant.qformat if quant is not None else formats.get(
        out_dtype or own.get("output") or spec.out_dtype or dtype)
    fm = {}
    if quant is not None:
        fm.update({"scale": formats.FP32, "amax": formats.FP32,
                   "scales": formats.lookup(quant.scale_format)})
    for a in spec.args:
        for r in a.roles:
            if r in ("scratch", "null", "stream") or r in specs.SCALAR_ROLES or \
                    r in specs.QUANT_ROLES:
                continue
            default = out if r == "output" else (formats.FP32 if r in specs.STAT_ROLES
                                                 else fmt)
            named = a.dtype or (own.get(r) if not (r == "output" and quant) else None)
            fm.setdefault(r, formats.lookup(named) if named else default)
    rows = fm.get("input", formats.lookup(own.get("input") or fmt.name))
    for r in ("residual", "h", "dy", "dh", "y"):
        # a residual stream of its own storage format beside the rows (Mamba's fp32 residual
        # with bf16 x) is judged in its own; fp8 rows share theirs with nothing
        if r in fm and fm[r] != rows and not (isinstance(rows, Format) and
                                              isinstance(fm[r], Format)):
            raise SpecError(f"args: role {r!r} has dtype {fm[r].name}, but x's is "
                            f"{rows.name}: fp8 rows share their format with no other role")
    fm.setdefault("output", out)
    fm.setdefault("input", rows)
    return fm


class Outputs(dict):
    """A target's outputs by role, with ``notes``: what its launches noted without failing (on
    the cpu backend, a warp shuffle that read a lane not taking part, whose value a GPU leaves
    undefined), for a verdict that fails to name."""

    def __init__(self, *args, notes=(), **kw):
        super().__init__(*args, **kw)
        self.notes = list(notes)


class KernelTarget:
    """A compiled kernel (one entry per launch) run per its spec."""

    def __init__(self, spec: specs.KernelSpec, norm: norms.Norm, dtype, out_dtype, compiled,
                 timeout=None, label=None, quant=None, capabilities=None):
        from normcheck.backends.base import Capabilities

        self.spec = spec
        #: what the kernels' backend can do (its launch options: block orders, fill, subsets)
        self.capabilities = capabilities or Capabilities()
        self.norm = norm
        self.fmt = formats.get(dtype)
        self.quant = quant
        self.out = quant.qformat if quant is not None else formats.get(out_dtype or dtype)
        self.kernels = compiled
        self.timeout = timeout
        self.formats = buffer_formats(spec, self.fmt.name, None if quant else self.out.name,
                                      quant=quant)
        self.label = label or ", ".join(dict.fromkeys(spec.entries))
        self._pad = None  # the padded run under way: extra elements a row of strided buffers
        self._large = None  # the large-index run under way: the rows the kernel is told of
        self._walk = False  # ... and whether its blocks walk the rows before the case's
        self._alternate = False  # the quantised output's second poison code (a call's)

    @property
    def strided(self) -> set:
        """The roles of the row buffers a padded run pads: those whose pitch reaches the kernel
        only through what normcheck sets -- a ``stride`` role naming them, or a ``const``
        whose value is the buffer's own ``stride`` expression (re-evaluated with the padded
        pitch).  A buffer with a ``stride`` the kernel learns some other way is not padded
        (:attr:`unpadded`): padding it would run a sound kernel on a pitch it was never told."""
        return self._pitches()[0]

    @property
    def unpadded(self) -> dict:
        """{role: why} of the row buffers with a ``stride`` that a padded run leaves alone."""
        return self._pitches()[1]

    def _pitches(self):
        told, consts, why = set(), {}, {}
        for a in self.spec.args:
            if a.role == "stride":
                told.update(a.of)
            elif a.role == "const" and a.value is not None:
                consts.setdefault(_expression(a.value), []).append(a)
        for a in self.spec.args:
            if not a.stride or set(a.roles) & told:
                continue
            expr = _expression(a.stride)
            named = [c for c in consts.get(expr, ()) if _carries_pitch(c, a)]
            if named:
                told.update(a.roles)
            else:
                why[a.roles[0]] = (
                    f"`{a.label}`: its stride is \"{a.stride}\", and no stride role names it "
                    f"nor a const of that value{' named for its pitch' if expr == 'cols' else ''}"
                    ": the kernel learns its pitch some other way, so padding it would run the "
                    "kernel on a pitch it was never told (give the pitch a role = \"stride\" "
                    "argument to have it padded)")
        return told, why

    def _padded_const(self, a: specs.ArgSpec) -> bool:
        """Whether a const argument carries the pitch of a buffer a padded run pads."""
        if not self._pad or a.value is None:
            return False
        strided = self.strided
        return any(b.stride and set(b.roles) & strided and _carries_pitch(a, b)
                   for b in self.spec.args)

    def _pitch(self, role, rows, cols):
        """The row pitch of the buffer of ``role`` (its argument's stride expression, else
        cols; cols + the pad in a padded run)."""
        if self._pad and role in self.strided:
            return cols + self._pad
        for a in self.spec.args:
            if role in a.roles and a.stride:
                return self._stride(a, rows, cols)
        return cols

    def _stride(self, a, rows, cols):
        if self._pad and set(a.roles) & self.strided:
            return cols + self._pad
        if not a.stride:
            return cols
        s = specs.evaluate(a.stride, rows, cols, f"args.{a.label}.stride")
        if s < cols:
            raise invalid(f"args.{a.label}.stride", a.stride,
                          f"a row pitch >= cols ({cols}); it gives {s}")
        return s

    def _rows(self, case: Case) -> int:
        """The rows the kernel is told of: the case's, or in a large-index run the launch's
        (whose last rows are the case's)."""
        return self._large or case.rows

    def _row_buffer(self, window: np.ndarray, case: Case):
        """A row buffer: the case's rows, or in a large-index run a SparseRows whose last rows
        they are (the rest never touched: bounded memory)."""
        from normcheck.backends.base import SparseRows

        if not self._large:
            return window
        return SparseRows(window, self._large, self._large - case.rows, self._walk)

    def _buffer(self, a: specs.ArgSpec, case: Case):
        rows, cols = self._rows(case), case.cols
        first = a.roles[0]
        fmt = self.formats.get(first) if first != "scratch" else formats.get(a.dtype)
        if a.role == "scratch":
            n = specs.evaluate(a.size, rows, cols, f"scratch {a.name!r}.size")
            if n < 0 or n > (1 << 34):
                raise invalid(f"scratch {a.name!r}.size", n, "0 to 2^34 elements")
            return (np.zeros(max(n, 0), fmt.dtype) if a.fill == "zero" else
                    poisoned((max(n, 0),), fmt.dtype))
        zero = a.fill == "zero"
        if first in specs.QUANT_ROLES or (first == "output" and self.quant is not None):
            return self._quant_buffer(a, first, case, zero)
        if first in specs.ROW_OUTPUTS:
            shape = (case.rows, self._stride(a, rows, cols))
            return self._row_buffer(np.zeros(shape, fmt.dtype) if zero else
                                    poisoned(shape, fmt.dtype), case)
        if first in ("input", "residual", "dy", "dh", "y"):
            data = {"input": case.x, "residual": case.residual, "dy": case.dy,
                    "dh": case.extra.get("dh"), "y": case.extra.get("y")}[first]
            if data is None:
                raise invalid(f"args.{a.label}", None, f"the {first} rows of the case")
            buf = poisoned((case.rows, self._stride(a, rows, cols)), fmt)
            buf[:, :cols] = fmt.to_storage(np.asarray(data).astype(np.float64)) \
                if not isinstance(fmt, Format) else _in_format(data, fmt)
            return self._row_buffer(self._typed(buf, fmt), case)
        if first in ("gamma", "beta"):
            v = case.gamma if first == "gamma" else case.beta
            if v is None:
                v = np.full(cols, 1.0 if first == "gamma" and not self.norm.gemma else 0.0)
            return np.ascontiguousarray(_in_format(v, fmt))
        if first in specs.PARAM_GRADS:
            return np.zeros(cols, fmt.dtype) if zero else poisoned((cols,), fmt.dtype)
        if first in specs.STAT_ROLES:
            if self.spec.backward:  # the saved statistics, as the forward wrote them
                v = case.mean if first == "mean" else case.rstd
                if v is None:
                    raise invalid(f"args.{a.label}", None, "the saved statistics of the case")
                v = np.ascontiguousarray(_in_format(v, fmt))
                if self._large:  # the case's rows are the launch's last: zeros before them
                    full = np.zeros(self._large, v.dtype)
                    full[self._large - case.rows:] = v
                    return full
                return v
            return np.zeros(rows, fmt.dtype) if zero else poisoned((rows,), fmt.dtype)
        raise invalid(f"args.{a.label}", a.role, "a buffer role")

    def _quant_buffer(self, a, role, case: Case, zero: bool):
        """The buffers of a quantised output: q codes [rows, pitch] (two fp4 codes a byte),
        the scales it writes ([rows] per token; [rows, groups], or [groups, rows] with
        scale_layout col_major), amax ([1] per tensor, else one per scale), the static scale."""
        rows, cols = case.rows, case.cols
        c = self.quant
        if role == "scale":
            v = case.extra.get("scale")
            if v is None:
                raise invalid(f"args.{a.label}", None, "a static scale in the case")
            return np.array([v], np.float32)
        fmt = self.formats[role] if role != "output" else self.out
        if role == "output":
            pitch = fmt.storage_cols(cols) if not a.stride else self._stride(
                a, rows, fmt.storage_cols(cols))
            shape = (rows, pitch)
        else:
            g = c.groups(cols)
            shape = (1,) if g == 0 else ((rows,) if c.granularity == "per_token" else
                                         ((g, rows) if c.scale_layout == "col_major" else
                                          (rows, g)))
        if zero or role == "amax":  # amax accumulates (atomicMax): it starts at 0
            buf = np.zeros(shape, fmt.dtype)
            if role == "amax":
                return buf
        else:
            buf = self._typed(poisoned(shape, fmt, self._alternate), fmt)
        if shape == (1,) or not self._large:
            return buf
        # in a large-index run the codes (and the scales of each row) are the last rows of a
        # launch of self._large rows (column-major scales have no such window: check.large_index)
        return self._row_buffer(buf.reshape(case.rows, -1), case)

    def _typed(self, codes, fmt):
        """A buffer of codes as a typed language (Triton) reads it: a pointer's element type is
        the array's, so fp8 codes go as ml_dtypes' float8 (the same bytes), not as bytes."""
        if self.capabilities.language == "triton" and getattr(fmt, "element", None):
            import ml_dtypes

            return codes.view(getattr(ml_dtypes, fmt.element))
        return codes

    def _value(self, a: specs.ArgSpec, case: Case, buffers: dict, param=None,
               where: str | None = None):
        """The value of a (non-struct) argument or field: a scalar, None, or its buffer (one
        buffer per role, shared by every launch).  A scalar is converted to the kernel's
        parameter type (``param``, where the backend knows it) as C++ converts an argument:
        from the spec's ``type`` where it gives one (the caller's variable), else from the
        exact value."""
        if a.role in ("null", "stream"):  # a null pointer; a stream: the default one
            return None
        if a.role in specs.SCALAR_ROLES or (a.role == "scale" and a.type is not None):
            return _received(a, self._exact(a, case, _scalar_dtype(param)), param,
                             where or f"args {a.label}")
        if a.key not in buffers:
            buffers[a.key] = (a, self._buffer(a, case))
        return buffers[a.key][1]

    def _exact(self, a: specs.ArgSpec, case: Case, want=None):
        """A scalar argument's value as the spec gives it, before any conversion: ε as the
        case holds it, rows, cols, a pitch, the static scale, a const's expression (divided as
        real numbers where the spec's type or the kernel's parameter is a float)."""
        rows, cols = self._rows(case), case.cols
        if a.role == "eps":
            return float(case.eps)
        if a.role == "rows":
            return rows
        if a.role == "cols":
            return cols
        if a.role == "stride":
            return self._pitch(a.of[0], rows, cols)
        if a.role == "scale":  # the static scale by value
            return float(case.extra.get("scale"))
        if self._padded_const(a):  # the pitch of a padded buffer, as a plain const
            return cols + self._pad
        float_param = want is not None and (np.dtype(want).kind == "f" or
                                            formats.is_bf16(want))
        real = a.type in specs.FLOAT_TYPES or (a.type is None and float_param)
        return specs.evaluate(a.value, rows, cols, f"args.{a.label}.value", real=real)

    def inexpressible(self, rows: int, cols: int) -> str | None:
        """Why the kernel's own caller could not launch it on ``rows`` x ``cols`` -- a scalar
        argument the spec computes from the launch (ONNX Runtime's ``skip_size = rows *
        cols``, the rows themselves) that does not fit the kernel's parameter -- or None.
        Such a run is outside the kernel's ABI: it is skipped, never judged."""
        from normcheck.errors import InvalidArgument

        case = Case(np.zeros((0, cols), np.float32))
        self._large = rows
        try:
            for ln in self.spec.launches:
                params = getattr(self.kernels.get(ln.entry), "params", None) or []
                for i, a in enumerate(ln.args):
                    for k, f in enumerate(a.fields if a.role == "struct" else [a]):
                        if f.role not in ("rows", "cols", "const", "stride") or \
                                (f.role == "const" and f.value is None):
                            continue
                        p = params[i] if a is f and i < len(params) and \
                            hasattr(params[i], "ctype") else None
                        where = f"args[{i}] {f.label}" if a is f else \
                            f"args[{i}].fields[{k}] {f.label}"
                        try:
                            _received(f, self._exact(f, case, _scalar_dtype(p)), p, where)
                        except InvalidArgument as e:
                            return str(e)
        finally:
            self._large = None
        return None

    def received(self, a: specs.ArgSpec, value):
        """``value`` of the scalar argument ``a`` as the kernel receives it: through the spec's
        ``type`` and then the kernel's parameter type, where the backend knows it (ε given to
        a ``__half epsilon`` arrives in half)."""
        for ln in self.spec.launches:
            for i, b in enumerate(ln.args):
                if b is a:
                    params = getattr(self.kernels.get(ln.entry), "params", None) or []
                    p = params[i] if i < len(params) and hasattr(params[i], "ctype") else None
                    return _received(a, value, p, f"args[{i}] {a.label}")
        return _received(a, value, None, f"args {a.label}")

    def _struct(self, a: specs.ArgSpec, case: Case, buffers: dict):
        """A struct argument's bytes, laid out by C's rules (each field at the next multiple of
        its alignment unless its offset is given; the size a multiple of the largest
        alignment, or the spec's size), its pointer fields naming their buffers."""
        from normcheck.backends.base import SparseRows, StructArg

        parts, pointers, off, align = [], [], 0, 1
        for k, f in enumerate(a.fields):
            v = None if f.role == "pad" else self._value(f, case, buffers)
            pointer = isinstance(v, (np.ndarray, SparseRows))  # a buffer (sparse: large-index)
            if f.role == "pad":
                n, al, raw = int(f.size), 1, bytes(int(f.size))
            elif v is None or pointer:
                n = al = 8
                raw = bytes(8)
            else:
                raw = v.tobytes()
                n = al = v.dtype.itemsize
            start = f.offset if f.offset is not None else -(-off // al) * al
            parts.append((start, raw))
            if pointer:
                pointers.append((start, v, f.name or f"{f.role}[{k}]"))
            off = max(off, start + n)
            align = max(align, al)
        size = -(-off // align) * align
        if a.size is not None:
            if int(a.size) < off:
                raise invalid(f"args.{a.label}.size", int(a.size),
                              f"at least {off} bytes (the end of its last field)")
            size = int(a.size)
        data = bytearray(size)
        for start, raw in parts:
            data[start:start + len(raw)] = raw
        return StructArg(bytes(data), pointers)

    @property
    def refillable(self) -> bool:
        """Whether every launch can be run again with undefined values made of another byte
        (``fill=``: a capability of the backend), to see whether the outputs depend on them."""
        return self.capabilities.fill

    def __call__(self, case: Case, guard=None, pad=None, raw=False, alternate=False,
                 large=None, walk=False, **launch) -> dict:
        """The outputs by role; ``launch`` goes to every launch (the cpu backend's schedule,
        seed and workers: the block order atomics arrive in; its fill byte of undefined
        values; ``blocks``, a subset of the blocks).  ``pad``: the strided row buffers get
        that many extra elements a row (a padded run); ``raw``: the outputs are the whole
        buffers by role (padding included), inputs too; ``alternate``: a quantised output
        starts as the second poison code; ``large``: the rows the kernel is told of, the case's
        rows its last ones (the large-index run: row buffers are SparseRows; with ``blocks``,
        the last blocks run); ``walk``: a persistent grid's blocks read and write the rows
        before those on their way (SparseRows.walk)."""
        self._pad, self._alternate, self._large, self._walk = pad, alternate, large, walk
        try:
            return self._run(case, guard, raw, launch)
        finally:
            self._pad, self._alternate, self._large, self._walk = None, False, None, False

    def _run(self, case, guard, raw, launch):
        rows, cols = self._rows(case), case.cols
        buffers = {}
        notes = []
        for ln in self.spec.launches:
            args, names = [], []
            kern = self.kernels[ln.entry]
            params = getattr(kern, "params", None) or []
            for i, a in enumerate(ln.args):
                names.append(a.label)
                if a.role == "struct":
                    args.append(self._struct(a, case, buffers))
                else:
                    p = params[i] if i < len(params) and hasattr(params[i], "ctype") else None
                    v = self._value(a, case, buffers, p, f"args[{i}] {a.label}")
                    if isinstance(v, np.ndarray) and p is not None:
                        _check_elements(v, a, p, i, self.formats)
                    args.append(v)
            if ln.host:  # a host function: called once, it launches its kernels itself
                grid, block, shm = (1,), (1,), 0
            else:
                grid = specs.evaluate_dims(ln.grid, rows, cols, "launch.grid")
                block = specs.evaluate_dims(ln.block, rows, cols, "launch.block") \
                    if ln.num_warps is None else \
                    (32 * specs.evaluate(ln.num_warps, rows, cols, "launch.num_warps"),)
                shm = specs.evaluate(ln.shared_mem, rows, cols, "launch.shared_mem")
            more = dict(launch)
            if ln.shared_mem_opt_in is not None and not ln.host:  # the launcher's opt-in
                more["max_dyn_smem"] = specs.evaluate(ln.shared_mem_opt_in, rows, cols,
                                                      "launch.shared_mem_opt_in")
            if not self.capabilities.hazards:
                more.pop("hazards", None)
            try:
                note = kern(grid, block, args, shared_mem=shm, names=names,
                            timeout=self.timeout, guard=guard, **more)
            except LaunchRefused as e:  # the spec's launch line is what the launcher does
                if ln.host:
                    raise
                raise LaunchRefused(
                    f"{e}; the spec's launch: grid = \"{ln.grid}\", block = \"{ln.block}\", "
                    f"shared_mem = \"{ln.shared_mem}\" ({shm} bytes at {cols} columns)"
                    + (f", shared_mem_opt_in = \"{ln.shared_mem_opt_in}\"" if
                       ln.shared_mem_opt_in else ", no shared_mem_opt_in (the launcher's "
                       "cudaFuncSetAttribute, if it calls it)")) from None
            if isinstance(note, str):  # the cpu backend's (its launches return their note)
                notes.append(note if len(self.spec.launches) == 1 else f"{ln.entry}: {note}")
        out = Outputs(notes=notes)
        if raw:
            for a, buf in buffers.values():
                out["+".join(a.roles)] = buf
            return out
        for a, buf in buffers.values():
            last = a.roles[-1]  # an in-place buffer is read as its exit role
            if not isinstance(buf, (np.ndarray, StructArg)):  # a SparseRows: the case's rows
                buf = buf.data
            if last in specs.STAT_ROLES and self._large and not self.spec.backward:
                buf = buf[self._large - case.rows:]
            if last == "output" and self.quant is not None:
                out[last] = buf[:, :self.out.storage_cols(cols)].view(self.out.dtype)
            elif last in ("scales", "amax"):
                out[last] = buf[:, 0] if self._large and buf.ndim == 2 and \
                    self.quant.granularity == "per_token" else buf
            elif last in specs.ROW_OUTPUTS:
                out[last] = buf[:, :cols]
            elif last in specs.PARAM_GRADS or (last in specs.STAT_ROLES and
                                                 not self.spec.backward):
                out[last] = buf
        return out


def _scalar_dtype(param):
    """The numpy type of a kernel's scalar parameter, where the backend names its C++ type."""
    from normcheck.backends.base import scalar_dtype

    if param is None or param.is_pointer:
        return None
    return scalar_dtype(param)


def _received(a: specs.ArgSpec, v, param, where: str):
    """A scalar as the kernel receives it (see KernelTarget._value)."""
    want = _scalar_dtype(param)
    if a.type is not None or want is None:
        v = specs.convert(v, specs.scalar_type(a), f"{where} = {_shown(a, v)}", a.type)
    if want is not None:
        v = specs.convert(v, want, f"{where} = {_shown(a, v)}", param.ctype)
    return v


def _shown(a: specs.ArgSpec, v) -> str:
    """A scalar argument's value as the spec wrote it (its expression) and as it evaluates."""
    v = v.item() if isinstance(v, np.generic) else v
    if a.role == "const" and a.value is not None and _expression(a.value) != _expression(str(v)):
        return f"{a.value} ({v})"
    return str(v)


def _check_elements(buf, a: specs.ArgSpec, param, i: int, fmts: dict):
    """A buffer whose elements are not the type the kernel's pointer parameter reads, named in
    the spec's and the command line's terms: the format to check it with."""
    from normcheck.backends.base import element_dtype

    want = element_dtype(param)
    if want is None or buf.dtype == want:
        return
    have = fmts.get(a.roles[0])
    need = next((f for f in formats.FORMATS.values() if f.dtype == np.dtype(want)), None)
    have_name = have.name if have is not None and hasattr(have, "name") else str(buf.dtype)
    fix = (f"check it with --dtype {need.name} (dtype = \"{need.name}\" in a spec, or on this "
           "argument)" if need is not None else "give the argument the dtype of the "
           "kernel's parameter")
    raise SpecError(f"args[{i}] {a.label} holds {have_name} values, but the kernel's parameter "
                    f"{i} is `{param.ctype}`: {fix}")


def _expression(text: str) -> str:
    """A spec expression compared as written, blanks aside ("cols + 8" is "cols+8")."""
    return "".join(str(text).split())


#: A parameter named for a row pitch: vLLM's input_stride, Liger's X_row_stride, a pitch.
_PITCH_NAME = re.compile(r"stride|pitch", re.I)


def _carries_pitch(c: specs.ArgSpec, b: specs.ArgSpec) -> bool:
    """Whether the const ``c`` passes the row pitch of the buffer ``b``: its value is b's
    ``stride`` expression, and where that is plain "cols" -- which the row's length may also
    be -- its name says so too: a pitch's name that starts with the buffer's (``input_stride``
    of ``input``, ``X_row_stride`` of ``X``)."""
    expr = _expression(c.value)
    if expr != _expression(b.stride):
        return False
    if expr != "cols":
        return True
    name, of = (c.name or ""), (b.name or b.roles[0])
    return bool(_PITCH_NAME.search(name)) and name.lower().startswith(of.lower())


def _in_format(a, fmt):
    a = np.asarray(a)
    if a.dtype == fmt.dtype:
        return a
    return fmt.cast(a.astype(np.float64))


def bind(spec: specs.KernelSpec, source, *, norm, dtype, out_dtype=None, backend="cpu",
         defines=None, timeout=None, options=None, arch=None, quant=None) -> KernelTarget:
    """Compile the entries of ``spec`` (from ``source``) and return the target."""
    from normcheck.backends import for_source

    be = for_source(backend, source)
    entries = list(dict.fromkeys(spec.entries))
    if any(e is None for e in entries):
        raise invalid("entry", None, "the kernel to run (--entry, or entry in the spec)")
    d = {**spec.defines, **(defines or {})}
    hosts = [ln.entry for ln in spec.launches if ln.host]
    if hosts:
        if not be.capabilities.host_launches:
            raise invalid("host", True, f"a kernel entry on the {be.name} backend (a host entry "
                          "runs on a backend with host launches: cpu)",
                          "name the kernel in the spec instead")
        options = {**(options or {}), "hosts": hosts}
    if arch is not None:
        options = {**(options or {}), "arch": arch}
    compiled = be.compile_many(source, entries, defines=d, options=options,
                               include_dirs=spec.include_dirs)
    target = KernelTarget(spec, norms.get(norm), dtype, out_dtype, compiled, timeout,
                          quant=quant, capabilities=be.capabilities)
    target.backend = be  # what ran it (a Triton file: the Triton backend), for the provenance
    return target


class CallableTarget:
    """A Python function on the stored rows: fn(x, gamma, beta, eps) -> y, or for fused norms
    fn(x, residual, gamma, beta, eps) -> (h, y).  β is None for RMSNorm (and γ, β for an
    affine-free norm).  Under a quantisation contract (``quant``) it takes the static scale last
    (nvfp4: the encode scale; None for the other dynamic contracts) and returns q, or
    (q, scales) for a dynamic contract, after h for a fused norm: q as float values (numpy,
    ml_dtypes float8/4, torch) or uint8 codes, scales as values (or e8m0/ue4m3 codes)."""

    def __init__(self, fn, norm: norms.Norm, fmt, out=None, label=None, quant=None):
        self.fn, self.norm, self.fmt, self.out, self.quant = fn, norm, fmt, out, quant
        self.formats = {"input": fmt, "output": out, "gamma": fmt, "beta": fmt}
        if norm.fused:
            self.formats.update({"residual": fmt, "h": fmt})
        self.label = label or getattr(fn, "__name__", "callable")
        self.names = (["h"] if norm.fused else []) + (
            ["output"] if quant is None else
            ["q_values", "scale_values"] if quant.dynamic else ["q_values"])

    def __call__(self, case: Case, guard=None, alternate=False) -> dict:
        from normcheck.quant.formats import as_values, get as qformat

        g = case.gamma if self.norm.has_gamma else None
        b = case.beta if self.norm.reads_beta else None
        args = [case.x, *([case.residual] if self.norm.fused else []), g, b, case.eps]
        if self.quant is not None:
            args.append(case.extra.get("scale"))
        try:
            res = self.fn(*args)
            res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
            if len(res) != len(self.names):
                raise TypeError(f"expected {len(self.names)} results ("
                                f"{', '.join(self.names)}), got {len(res)}")
            outs = dict(zip(self.names, res))
            for k, v in outs.items():
                if k in ("h", "output"):
                    outs[k] = as_format(v, self.fmt if k == "h" else self.out)
                elif k == "q_values":
                    outs[k] = as_values(v, self.quant.qformat, case.cols)
                else:  # float scales, or e8m0/ue4m3 codes of block scales
                    outs[k] = as_values(v, qformat(self.quant.scale_format), None)
        except (KernelError, CompileError):  # an op's launch failed, or its module did not
            raise                              # load: as it failed
        except Exception as e:  # the callable's failure, reported as such
            raise KernelRaised(f"{self.label} raised {type(e).__name__}: {e}",
                               exception=type(e).__name__) from None
        for k, v in outs.items():
            if k != "scale_values" and v.shape != case.x.shape:
                raise KernelRaised(f"{self.label} returned {k} of shape {v.shape} for rows of "
                                   f"shape {case.x.shape}")
        return outs


class OpTarget(CallableTarget):
    """A project's op called as its users call it (normcheck.backends.triton.op.Op): the rows
    as its tensors, what its kernels wrote as the outputs."""

    def __init__(self, op, norm: norms.Norm, fmt, out=None, label=None):
        self.op = op
        self._pad = 0
        super().__init__(self._run, norm, fmt, out, label or op.call.fn)

    def padded(self, case, pad: int) -> dict:
        """The outputs of a call whose row tensors (x, the residual) are views of rows padded
        to a pitch of cols + ``pad`` (normcheck.check.hazards.op_padding)."""
        self._pad = int(pad)
        try:
            return self(case, guard="end")
        finally:
            self._pad = 0

    @property
    def capabilities(self):
        """Its kernels' backend's (a Triton kernel's yardstick: the built-in Triton norms)."""
        from normcheck.backends.triton.backend import TritonCpuBackend

        return TritonCpuBackend.capabilities

    def _run(self, x, *rest):
        fused = self.norm.fused
        residual = rest[0] if fused else None
        g, b, eps = rest[-3:]
        rows, cols = x.shape
        outs = self.op({"x": x, "residual": residual, "weight": g, "bias": b},
                       {"eps": float(eps), "rows": int(rows), "cols": int(cols),
                        "normalized_shape": (int(cols),)}, pad=self._pad)
        return tuple(outs) if len(outs) > 1 else outs[0]


def as_format(a, fmt):
    if hasattr(a, "detach"):  # a torch tensor
        a = a.detach().cpu()
        a = a.float().numpy() if str(a.dtype) in ("torch.bfloat16",) else a.numpy()
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.floating) and not formats.is_bf16(a.dtype):
        raise TypeError(f"expected floating-point outputs, got {a.dtype}")
    return a if a.dtype == fmt.dtype else fmt.cast(a.astype(np.float64))
