"""An op's host code, in a worker of its own: the project's Python function called as its users
call it, each ``kernel[grid](...)`` it makes handed to normcheck to run.

A project's launcher decides what runs -- the block size by rows, the kernel by width, the
dtype dispatch, the output's allocation.  Here it runs for real (``op_load`` imports its module,
``op_call`` calls it on CPU tensors made from the check's rows), and every launch it makes is
*asked of normcheck* instead of run (:func:`converse`): this process names the kernel, the grid
and every argument (a tensor as its storage, offset, dtype and strides; a scalar as its value)
and puts the bytes of each storage a launch touches in the shared arena; normcheck launches the
kernel on its own copies in the launch worker (the executor, every access checked -- this process
never runs a kernel) and answers with the bytes the launch left, which are copied back into the
op's tensors before its code goes on.  So the op's tensors hold what its kernels wrote, and the
verdict reads normcheck's copies, never this process's: an op whose host code changes an output
after its kernel wrote it, or returns a tensor no kernel wrote, is refused (``normcheck.backends.
triton.op``).

The memory the op allocates with ``torch.empty`` (and its kin) is filled with the poison NaN of
its format, as the cpu backend fills an output buffer: an element no program writes is seen.
An autotuned kernel runs its first config, as the executor runs it (:mod:`extract`); torch's
device queries (``torch.cuda.get_device_capability()`` ...) answer for the presented GPU while
the op runs, as while its module is imported (``executor.file_imports``).

Requests (each answered as the cpu worker answers; the inner ones are :func:`converse`'s)::

    {"op": "op_load", "module": cached path, "filename": the user's path, "name": a module name
     to import ("" to run the cached file as the kernel loader does), "root": a folder put
     first on the import path (""), "stubs": modules stood in for (a file run)}
    {"op": "op_call", "module": the same key, "fn": name, "args": [arg], "kwargs": {name: arg},
     "inputs": {name: [offset, nbytes, dtype, shape]}, "outputs": [["index", i] | ["arg", name]],
     "arena": bytes}
      arg: ["tensor", name] | ["value", v] | ["float", hex] | ["tuple", [arg...]]
    replies to op_call, and to each answer normcheck gives:
      {"ok": True, "need": bytes}                      (the arena is too small: op_grown)
      {"ok": True, "launch": {...}, "storages": [[id, offset, nbytes]]}   (op_launched | op_abort)
      {"ok": True, "done": [[id, offset, dtype, shape, strides]], "storages": [...]}
      {"ok": False, "kind": "load" | "error" | "aborted", "message": ...}
"""

from __future__ import annotations

import ctypes
import inspect
import sys

import numpy as np

from normcheck.backends.cpu import worker as base_worker

__all__ = ["load", "call", "where_raised", "TENSOR_DTYPES"]

_OPS: dict = {}
#: the storage each id names (ids given in order of first sight, one call's)
_STORE: dict = {}
_PAGE = 4096
#: the tensors' dtypes a launch may take, by name (torch's and numpy's/ml_dtypes' alike)
TENSOR_DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64",
                "uint8", "bool")


class _Aborted(BaseException):
    """A launch normcheck refused or that failed: the op is unwound (not an Exception, so an
    op's ``except Exception`` does not swallow it)."""


def where_raised(e) -> str:
    """Where an exception a file's import raised came from: the last frame of the user's file
    and the last frame of all (a library it called), as "(at file:line, in lib.py:line)"."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    own = [f for f in frames if not f.filename.startswith(("/", "<"))]
    parts = []
    if own:
        parts.append(f"at {own[-1].filename}:{own[-1].lineno}")
    if frames and (not own or frames[-1] is not own[-1]):
        last = frames[-1]
        parts.append(f"in {last.filename.rsplit('/', 1)[-1]}:{last.lineno} ({last.name})")
    return f" ({', '.join(parts)})" if parts else ""


def load(req):
    """The op's module: imported by name (its package beneath ``root``, or installed), or the
    cached file run as the kernel loader runs it."""
    import importlib

    from normcheck.backends.triton import executor

    key = req["module"]
    try:
        if req.get("name"):
            if req.get("root"):
                sys.path.insert(0, req["root"])
            executor.install()
            with executor.file_imports():
                mod = importlib.import_module(req["name"])
            ns, file = vars(mod), getattr(mod, "__file__", "") or ""
        else:
            text = base_worker.read_file(req["module"])
            ns = executor.load_module(text, req["filename"], "normcheck_user",
                                      stubs=req.get("stubs", ()), file=req["module"])
            file = req["filename"]
    except BaseException as e:  # noqa: BLE001 -- the module raised (or exited) as imported
        return {"ok": False, "kind": "load",
                "message": f"{type(e).__name__}: {str(e)[:600]}{where_raised(e)}"}
    _OPS[key] = (ns, file)
    _install()
    return {"ok": True, "file": str(file)}


# -- the launches: asked of normcheck ----------------------------------------------------------
_STATE: dict = {}


def _install():
    """Launches asked of normcheck, autotune's first config, torch.empty poisoned (once)."""
    if _STATE.get("installed"):
        return
    import torch
    from triton.runtime import autotuner
    from triton.runtime import interpreter as ti

    def run(self, *args, grid, warmup=False, **kwargs):
        if warmup:
            return None
        return _launch(self, args, kwargs, grid)

    def first_config(self, *args, **kwargs):
        cfg = self.configs[0]
        return self.fn.run(*args, **{**kwargs, **cfg.all_kwargs()})

    ti.InterpretedFunction.run = run
    autotuner.Autotuner.run = first_config

    def poisoned(make):
        def f(*a, **kw):
            t = make(*a, **kw)
            _poison(t)
            return t
        f.__name__ = getattr(make, "__name__", "empty")
        return f

    for name in ("empty", "empty_like", "empty_strided"):
        setattr(torch, name, poisoned(getattr(torch, name)))
    torch.Tensor.new_empty = poisoned(torch.Tensor.new_empty)
    _STATE["installed"] = True


def _poison(t):
    import torch

    from normcheck.formats import poison_bits

    if not isinstance(t, torch.Tensor) or t.numel() == 0:
        return
    names = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
    raw = t.untyped_storage()
    view = torch.empty(0, dtype=torch.uint8).set_(raw, 0, (raw.nbytes(),), (1,))
    if t.dtype in names:
        bits = poison_bits(np.dtype(names[t.dtype]) if t.dtype != torch.bfloat16 else
                           _bf16())
        width = t.element_size()
        pattern = torch.tensor(list(int(bits).to_bytes(width, "little")), dtype=torch.uint8)
        n = raw.nbytes() // width
        view[:n * width].view(-1, width).copy_(pattern.expand(n, width))
    else:
        view.fill_(0xFF)


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def _dtype_name(t) -> str:
    name = str(t.dtype).replace("torch.", "")
    if name not in TENSOR_DTYPES:
        raise _Refused(f"a tensor of {t.dtype}: normcheck launches kernels on "
                       f"{', '.join(TENSOR_DTYPES)}")
    return name


class _Refused(Exception):
    pass


def _storage_id(t) -> int:
    raw = t.untyped_storage()
    for i, s in _STORE.items():
        if s.data_ptr() == raw.data_ptr() and s.nbytes() == raw.nbytes():
            return i
    i = len(_STORE)
    _STORE[i] = raw
    return i


def _value(v, depth=0):
    import torch
    import triton.language as tl

    if isinstance(v, tl.constexpr):
        v = v.value
    if isinstance(v, torch.Tensor):
        if v.device.type != "cpu":
            raise _Refused(f"a tensor on {v.device}")
        return ["tensor", _storage_id(v), int(v.storage_offset()) * v.element_size(),
                _dtype_name(v), list(v.shape), list(v.stride())]
    if v is None:
        return ["null"]
    if isinstance(v, bool):
        return ["bool", v]
    if isinstance(v, int):
        return ["int", v]
    if isinstance(v, float):
        return ["float", v.hex()]
    if isinstance(v, tl.dtype):
        return ["dtype", v.name]
    if isinstance(v, str) and len(v) <= 200:
        return ["str", v]
    raise _Refused(f"an argument of type {type(v).__name__}")


def _launch(fnobj, args, kwargs, grid):
    """One ``kernel[grid](...)`` of the op: asked of normcheck, its answer copied back."""
    if _STATE.get("aborted"):
        raise _Aborted()
    fn = fnobj.fn
    names = list(fnobj.arg_names)
    try:
        bound = inspect.getcallargs(fn, *args, **{k: v for k, v in kwargs.items()
                                                   if k in names})
        if callable(grid):
            grid = grid(dict(bound))
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(tuple(grid)))
        if len(grid) != 3:
            raise _Refused(f"a grid of {len(grid)} dimensions")
        values = {n: _value(bound[n]) for n in names}
    except _Refused as e:
        raise RuntimeError(f"normcheck cannot launch {fn.__name__}: {e}") from None
    ids = sorted({v[1] for v in values.values() if v[0] == "tensor"})
    rep = {"ok": True, "launch": {"kernel": fn.__name__, "file": fn.__code__.co_filename,
                                  "line": fn.__code__.co_firstlineno, "grid": list(grid),
                                  "values": values, "params": names}}
    ans = _send_storages(rep, ids)
    if ans.get("op") == "op_launched":
        _receive_storages(ans)
        return None
    _STATE["aborted"] = True
    raise _Aborted()


def _layout(ids, start: int):
    out, off = [], start
    for i in ids:
        n = _STORE[i].nbytes()
        out.append([i, off, n])
        off += -(-max(n, 1) // _PAGE) * _PAGE
    return out, off


def _place(ids) -> list:
    """The storages ``ids`` copied into the arena after the inputs (normcheck asked to grow it
    first where they do not fit): [[id, offset, nbytes]]."""
    placed, end = _layout(ids, _STATE["free"])
    while end > _STATE["arena"]:
        ans = base_worker.converse({"ok": True, "need": end})
        if ans is None or ans.get("op") != "op_grown":
            raise _Aborted()
        _STATE["arena"] = int(ans["arena"])
    for i, off, n in placed:
        _copy(i, off, n, out=True)
    return placed


def _send_storages(rep: dict, ids) -> dict:
    """Send ``rep`` with the storages ``ids`` placed in the arena; normcheck's answer."""
    ans = base_worker.converse({**rep, "storages": _place(ids)})
    if ans is None:
        raise _Aborted()
    return ans


def _receive_storages(ans):
    for i, off, n in ans.get("storages", ()):
        if i in _STORE and _STORE[i].nbytes() == n:
            _copy(i, off, n, out=False)


def _copy(i, off, n, out: bool):
    """Storage ``i`` to the arena at ``off`` (out) or back from it."""
    import torch

    if n == 0:
        return
    addr = base_worker.map_guarded(off, n)
    if not addr:
        raise MemoryError(f"could not map {n} bytes of the arena")
    try:
        arena = torch.frombuffer((ctypes.c_char * n).from_address(addr), dtype=torch.uint8)
        raw = _STORE[i]
        mine = torch.empty(0, dtype=torch.uint8).set_(raw, 0, (n,), (1,))
        if out:
            arena.copy_(mine)
        else:
            mine.copy_(arena)
        del arena, mine
    finally:
        g = base_worker.guard_bytes(n)
        base_worker.unmap(addr - g, n + 2 * g)


def _torch_dtype(name):
    import torch

    return getattr(torch, name)


def _input(spec):
    """A tensor of the check's rows, copied out of the arena."""
    import torch

    off, n, dtype, shape = spec[:4]
    pitch = int(spec[4]) if len(spec) > 4 else None  # a view of rows padded to this pitch
    addr = base_worker.map_guarded(off, n) if n else 0
    try:
        if n:
            raw = torch.frombuffer((ctypes.c_char * n).from_address(addr), dtype=torch.uint8)
            t = raw.clone()
            del raw
        else:
            t = torch.empty(0, dtype=torch.uint8)
    finally:
        if n:
            g = base_worker.guard_bytes(n)
            base_worker.unmap(addr - g, n + 2 * g)
    t = t.view(_torch_dtype(dtype))
    if pitch and len(shape) == 2 and pitch > shape[1]:
        return t.reshape(shape[0], pitch)[:, :shape[1]]  # x.stride(0) == pitch
    return t.reshape(shape)


def _arg(a, tensors):
    if a[0] == "tensor":
        return tensors[a[1]]
    if a[0] == "float":
        return float.fromhex(a[1])
    if a[0] == "tuple":
        return tuple(_arg(x, tensors) for x in a[1])
    return a[1]


def call(req):
    """The op called on the check's rows; its launches asked of normcheck as they come."""
    import torch

    got = _OPS.get(req["module"])
    if got is None:
        return {"ok": False, "kind": "load", "message": "the op's module is not loaded"}
    ns, _file = got
    _STORE.clear()
    _STATE.update({"aborted": False, "arena": int(req["arena"])})
    inputs = {k: _input(v) for k, v in req["inputs"].items()}
    _STATE["free"] = max([0, *(v[0] + -(-max(v[1], 1) // _PAGE) * _PAGE
                               for v in req["inputs"].values())])
    fn = ns.get(req["fn"])
    if not callable(fn):
        return {"ok": False, "kind": "load", "message": f"{req['fn']} is not a function of the "
                f"op's module"}
    args = [_arg(a, inputs) for a in req["args"]]
    kwargs = {k: _arg(a, inputs) for k, a in req["kwargs"].items()}
    from normcheck.backends.triton import executor

    try:  # torch.cuda's device queries answer for the presented GPU, as while it was imported
        with executor.file_imports(), torch.no_grad():
            res = fn(*args, **kwargs)
    except _Aborted:
        return {"ok": False, "kind": "aborted", "message": "a launch failed"}
    except Exception as e:  # noqa: BLE001 -- the op raised: its failure, reported as such
        if _STATE.get("aborted"):
            return {"ok": False, "kind": "aborted", "message": "a launch failed"}
        return {"ok": False, "kind": "error",
                "message": f"{type(e).__name__}: {str(e)[:600]}{where_raised(e)}"}
    if _STATE.get("aborted"):
        return {"ok": False, "kind": "aborted", "message": "a launch failed"}
    done = []
    try:
        for how, what in req["outputs"]:
            if how == "arg":
                t = inputs.get(what)
            else:
                seq = res if isinstance(res, (tuple, list)) else (res,)
                t = seq[int(what)] if -len(seq) <= int(what) < len(seq) else None
            if not isinstance(t, torch.Tensor):
                return {"ok": False, "kind": "error", "message": f"the op's result "
                        f"{what!r} is {type(t).__name__}, not a tensor"}
            v = _value(t)
            done.append(v[1:])
    except _Refused as e:
        return {"ok": False, "kind": "error", "message": f"the op's result: {e}"}
    try:
        placed = _place(sorted({d[0] for d in done}))
    except _Aborted:
        return {"ok": False, "kind": "aborted", "message": "the arena was not grown"}
    return {"ok": True, "done": done, "storages": placed}
