"""An op called as its users call it: a project's Python function (Liger's ``rms_norm_forward``,
a FlagGems op) run on the check's rows, every kernel it launches run by normcheck.

The op's host code runs in a sandboxed worker of its own (:mod:`opcall`); each
``kernel[grid](...)`` it makes comes here as data -- the kernel (a ``@triton.jit`` def of the
op's file), the grid the launcher computed, every argument -- and runs as a
:class:`~normcheck.backends.triton.backend.TritonKernel` launch on normcheck's copies of the
storages (the executor in the launch worker, every access checked, a fault named with its line).
What each launch leaves is kept here and sent back; the op's result must be a tensor a launch
wrote, holding exactly what it wrote (else the op is refused: host code wrote it), and the
verdict reads the copy kept here.  So every branch the launcher takes -- block size by rows,
kernel by width, the dtype it dispatches -- is what runs, and nothing the op's process does
after a launch reaches the verdict.

The call is written as its users write it, ``rms_norm_forward(x, weight, eps, 0.0, 'llama',
None)``: parsed (never evaluated) into the function's name and its arguments -- the check's
tensors ``x``, ``residual``, ``weight``, ``bias``, the numbers ``eps``, ``rows``, ``cols``, the
tuple ``normalized_shape``, and literals.
"""

from __future__ import annotations

import ast
import atexit
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from normcheck.errors import (CompileError, InvalidArgument, KernelCrash, KernelError,
                              KernelRaised, NormcheckError, invalid)

__all__ = ["OpCall", "parse_call", "needs_missing", "NEEDS", "locate_module", "TENSORS", "NUMBERS", "Op"]

#: The check's tensors a call may name, and its numbers
TENSORS = ("x", "residual", "weight", "bias")
NUMBERS = ("eps", "rows", "cols", "normalized_shape")

#: The messages one call may exchange (launches and arena growths): a bound on a looping op
MAX_MESSAGES = 4096
_PAGE = 4096


@dataclass
class OpCall:
    """A parsed call: the function, its arguments as data (opcall's records)."""

    fn: str
    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)
    text: str = ""

    def names(self) -> set:
        out = set()

        def walk(a):
            if a[0] == "name":
                out.add(a[1])
            elif a[0] == "tuple":
                for x in a[1]:
                    walk(x)
        for a in [*self.args, *self.kwargs.values()]:
            walk(a)
        return out


#: What an op's host code is called with: torch tensors on the CPU (a CPU build is enough).
NEEDS = "torch"


def needs_missing() -> str | None:
    """Why an op cannot be called here (torch, its tensors, not installed), or None."""
    import importlib.util

    try:
        if importlib.util.find_spec(NEEDS) is not None:
            return None
    except (ImportError, ValueError):
        pass
    return (f"an op is called on {NEEDS} tensors and {NEEDS} is not installed here "
            f"(pip install {NEEDS}: a CPU build is enough)")


def parse_call(text, where: str = "op.call") -> OpCall:
    """``fn(x, weight, eps, 0.0, 'llama')`` as data: a name called with the check's names and
    literals (numbers, strings, True/False/None, tuples of them); anything else is refused."""
    if not isinstance(text, str) or not text.strip():
        raise invalid(where, text, "a call such as \"rms_norm_forward(x, weight, eps)\"")
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise invalid(where, text, f"a Python call ({e.msg})") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise invalid(where, text, "one function called by its name, e.g. "
                      "\"rms_norm_forward(x, weight, eps)\"")

    def arg(n):
        if isinstance(n, ast.Name):
            if n.id not in TENSORS + NUMBERS:
                raise invalid(where, text, f"the names {', '.join(TENSORS + NUMBERS)} and "
                              f"literals (got {n.id!r})")
            return ["name", n.id]
        if isinstance(n, ast.Constant) and (n.value is None or isinstance(
                n.value, (bool, int, float, str))):
            return ["float", n.value.hex()] if isinstance(n.value, float) else ["value", n.value]
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and isinstance(
                n.operand, ast.Constant) and isinstance(n.operand.value, (int, float)) and \
                not isinstance(n.operand.value, bool):
            v = -n.operand.value
            return ["float", v.hex()] if isinstance(v, float) else ["value", v]
        if isinstance(n, ast.Tuple):
            return ["tuple", [arg(x) for x in n.elts]]
        raise invalid(where, text, "arguments that are the check's names or literals "
                      f"(got {ast.dump(n)[:60]})")

    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None
                                                                 for k in node.keywords):
        raise invalid(where, text, "no *args or **kwargs")
    return OpCall(node.func.id, [arg(a) for a in node.args],
                  {k.arg: arg(k.value) for k in node.keywords}, text.strip())


def locate_module(name: str, paths=None) -> tuple[Path, Path]:
    """(the file of module ``name``, the import-path folder it lies beneath), found without
    importing anything (a package's ``__init__`` is the project's code: it runs only in the
    op's sandboxed worker)."""
    parts = name.split(".")
    if not name or not all(p.isidentifier() for p in parts):
        raise invalid("op module", name, "a dotted module name such as "
                      "liger_kernel.ops.rms_norm")
    for entry in (sys.path if paths is None else paths):
        base = Path(entry or ".")
        f = base.joinpath(*parts).with_suffix(".py")
        if f.is_file():
            return f.resolve(), base.resolve()
    raise invalid("op module", name, "a module installed here (its .py file on the import "
                  "path)", f"pip install the project that ships {parts[0]}")


_OP_WORKERS: dict = {}
#: The op workers kept alive (each holds torch and the op's module): the ones used last
KEEP = 2


def _worker(cached: Path, root: Path | None):
    from normcheck.backends.cpu.workers import Worker
    from normcheck.backends.triton import backend

    key = (str(cached), str(root or ""))
    w = _OP_WORKERS.pop(key, None)
    if w is None:
        pool = backend.workers()
        roots = (*pool.roots, str(cached.parent), *([str(root)] if root else []))
        w = Worker("normcheck.backends.triton.worker", extra_env=pool.extra_env, roots=roots)
    _OP_WORKERS[key] = w  # the newest last
    while len(_OP_WORKERS) > KEEP:
        old = _OP_WORKERS.pop(next(iter(_OP_WORKERS)))
        with old.lock:
            old.close()
    return w


@atexit.register
def _close_all():
    for w in list(_OP_WORKERS.values()):
        w.close()
    _OP_WORKERS.clear()


def _reply(rep):
    from normcheck.backends.cpu import wire

    if rep.get("ok") is False:
        return wire.check(rep, {"ok": (False,), "kind": ("load", "error", "aborted"),
                                "message": str}, "the op's reply")
    for key in ("need", "launch", "done", "file"):
        if key in rep:
            return rep
    raise wire.WireError("an op reply with none of need, launch, done, file")


class Op:
    """The op of a file (``module`` "" : the file run as the kernel loader runs it) or of a
    module imported by name from ``root`` (or installed); ``outputs``: where each result is,
    ``["index", i]`` in what the op returns or ``["arg", name]`` (a tensor written in place)."""

    def __init__(self, path, call: OpCall, outputs, module: str = "", root=None,
                 timeout: float | None = None, options=None):
        from normcheck.backends.triton import backend

        self.call, self.outputs = call, [list(o) for o in outputs]
        self.path, self.text, self.cached = backend.load(path)
        self.module, self.root = module, (Path(root).resolve() if root else None)
        if module:
            # the module the op runs is the file whose kernels normcheck runs: one file (#65:
            # a spec's source sound, its [op] module another file, wrong -- and a PASS)
            found, _base = locate_module(module, [str(self.root)] if self.root else None)
            if found.resolve() != Path(path).resolve():
                raise invalid("op.module", module, f"the module whose file is the spec's "
                              f"source ({Path(path).name})",
                              f"{module} is {found}: name that file as the source, or the "
                              "source's own module")
        self.timeout = float(timeout or backend.DEFAULT_TIMEOUT)
        self.options = dict(options or {})
        self.kernels: dict = {}
        self.loaded = False
        self.launched: list = []  # (kernel, grid) of the last call
        self.notes: list = []

    # -- the worker ---------------------------------------------------------------------------
    def _request(self, w, req, cpu_need=0.0):
        from normcheck.backends.cpu import backend as cpu, wire

        rep = w.request(req, self.timeout, _reply, cpu_need=cpu_need)
        if isinstance(rep, tuple):
            name = self.call.fn
            if rep[0] == "timeout":
                raise cpu.timeout_error(name, self.timeout)
            if rep[0] == "malformed":
                raise cpu.forged_reply(name, rep[1])
            try:
                info = cpu.parse_report(w.report())
            except wire.WireError as e:
                raise cpu.forged_reply(name, str(e)) from None
            err = cpu.sandbox_error(name, info, rep)
            if err is not None:
                raise err
            self.loaded = False
            raise KernelCrash(f"{name}: {w.describe_death(rep)} (the op's own worker)")
        return rep

    def _load(self, w):
        from normcheck.backends.triton.backend import imports

        if self.loaded and w.proc is not None and w.proc.poll() is None:
            return
        stubs = ()
        if not self.module:
            _installed, stubs = imports(ast.parse(self.text), self.path.name)
        rep = self._request(w, {"op": "op_load", "module": str(self.cached),
                                "filename": str(self.path), "name": self.module,
                                "root": str(self.root or ""), "stubs": list(stubs)},
                            cpu_need=self.timeout)
        if not rep["ok"]:
            raise CompileError(f"{self.path.name}: as the op's module was imported, "
                               f"{_one_line(rep['message'])}")
        self.kernel_file = rep.get("file") or str(self.path)
        if self.module and Path(self.kernel_file).name != self.path.name:
            raise CompileError(f"{self.path.name}: importing {self.module} ran "
                               f"{_one_line(self.kernel_file)}, not the spec's source")
        self.loaded = True

    def _kernel(self, name: str, line):
        """The kernel a launch ran, by identity: the def at its line, under the global of the
        file that holds it -- never another def of the same name (#65: a file defining
        ``rms_row`` twice launched the first, kept under an alias; normcheck ran the second)."""
        from normcheck.backends.triton import backend

        if not isinstance(line, int) or isinstance(line, bool):
            raise KernelCrash(f"{self.call.fn}: a launch of {name} without its def's line")
        k = self.kernels.get((name, line))
        if k is None:
            first = backend.signature(self.text, name, self.path.name, line=line)
            desc = backend.described(self.path, self.cached, first.stubbed,
                                     self.timeout)["globals"]
            held = sorted(g for g, d in desc.items() if isinstance(d, list) and len(d) > 1
                          and d[0] == "def" and d[1] == line)
            if not held:
                raise KernelRaised(
                    f"{self.call.fn} launched {name}, the def at {self.path.name}:{line}, which "
                    "no global of the file holds: normcheck runs a file's kernels by their "
                    "def", exception="Unsupported")
            entry = name if name in held else held[0]
            k = backend.TritonKernel(self.path, self.cached, entry, first,
                                     {"timeout": self.timeout, **self.options})
            self.kernels[(name, line)] = k
        return k

    # -- one call -------------------------------------------------------------------------------
    def __call__(self, tensors: dict, numbers: dict, pad: int = 0) -> list:
        """The op on ``tensors`` ({name: numpy array}) and ``numbers``; the arrays each output
        names, as the launches wrote them.  ``pad``: the row tensors (x, the residual) handed
        over as views of rows padded to a pitch of cols + pad, the padding poisoned."""
        w = _worker(self.cached, self.root)
        with w.lock:
            self._load(w)
            return self._call(w, tensors, numbers, pad)

    def _call(self, w, tensors, numbers, pad=0):
        from normcheck.formats import poison_bits

        inputs, placed, off = {}, [], _PAGE  # page 0: the worker's report page
        for name in sorted(self.call.names() & set(TENSORS)):
            a = tensors.get(name)
            if a is None:  # a norm without it (an RMSNorm's bias): None, as users pass it
                continue
            a = np.ascontiguousarray(a)
            if pad and name in ("x", "residual") and a.ndim == 2:
                wide = np.empty((a.shape[0], a.shape[1] + pad), a.dtype)
                wide.view(f"u{a.itemsize}")[:] = poison_bits(a.dtype)
                wide[:, :a.shape[1]] = a
                inputs[name] = [off, int(wide.nbytes), a.dtype.name, list(a.shape),
                                a.shape[1] + pad]
                placed.append((wide, off))
                off += -(-max(wide.nbytes, 1) // _PAGE) * _PAGE
                continue
            inputs[name] = [off, int(a.nbytes), a.dtype.name, list(a.shape)]
            placed.append((a, off))
            off += -(-max(a.nbytes, 1) // _PAGE) * _PAGE
        size = off + sum(a.nbytes for a, _ in placed) * 4 + (16 << 20)
        mem = w.arena(size)
        view = np.frombuffer(mem, np.uint8, count=w.size)
        for a, o in placed:
            view[o:o + a.nbytes] = a.reshape(-1).view(np.uint8)
        del view, mem

        def arg(a):
            if a[0] == "name":
                if a[1] in TENSORS:
                    return ["tensor", a[1]] if a[1] in inputs else ["value", None]
                v = numbers[a[1]]
                if isinstance(v, tuple):
                    return ["tuple", [["value", int(x)] for x in v]]
                return ["float", float(v).hex()] if isinstance(v, float) else \
                    ["value", int(v)]
            if a[0] == "tuple":
                return ["tuple", [arg(x) for x in a[1]]]
            return a

        req = {"op": "op_call", "module": str(self.cached), "fn": self.call.fn,
               "args": [arg(a) for a in self.call.args],
               "kwargs": {k: arg(a) for k, a in self.call.kwargs.items()},
               "inputs": inputs, "outputs": self.outputs, "arena": w.size}
        # storage id -> its bytes as the last launch left them, and per byte whether its value
        # is one a launch of normcheck's stored (its provenance, through every launch)
        written, changed = {}, {}
        self.launched = []
        rep = self._request(w, req, cpu_need=self.timeout)
        try:
            return self._converse(w, rep, written, changed)
        except NormcheckError:
            raise
        except (KeyError, TypeError, ValueError, IndexError) as e:  # a reply out of shape
            from normcheck.backends.cpu import backend as cpu

            raise cpu.forged_reply(self.call.fn, f"an op's reply out of shape "
                                   f"({type(e).__name__}: {e})") from None

    def _converse(self, w, rep, written, changed):
        """The op's messages answered until it is done: launches run, the arena grown."""
        failure = None
        for _ in range(MAX_MESSAGES):
            if not rep["ok"]:
                if failure is not None:
                    raise failure
                if rep["kind"] == "load":
                    raise CompileError(f"{self.path.name}: {_one_line(rep['message'])}")
                raise KernelRaised(f"{self.call.fn} raised {_one_line(rep['message'])}",
                                   exception=rep["message"].split(":")[0][:60])
            if "need" in rep:
                need = int(rep["need"])
                limit = getattr(w, "as_limit", None) or _arena_limit()
                if need > limit:  # a shared-memory file grows outside the worker's own limit:
                    # bounded by it (#65: 1 TiB was granted)
                    raise KernelRaised(
                        f"{self.call.fn} asked for {need:,} bytes of tensors, more than the op's "
                        f"worker may use ({limit:,} bytes, NORMCHECK_WORKER_MEMORY_MB)",
                        exception="MemoryError")
                w.arena(need)
                rep = self._request(w, {"op": "op_grown", "arena": w.size})
                continue
            if "launch" in rep:
                if failure is not None:  # the op went on after an abort: not run
                    rep = self._request(w, {"op": "op_abort"})
                    continue
                try:
                    stores = self._launch(w, rep["launch"], rep["storages"], written,
                                          changed)
                except KernelError as e:
                    failure = e
                    rep = self._request(w, {"op": "op_abort"})
                    continue
                rep = self._request(w, {"op": "op_launched", "storages": stores})
                continue
            if "done" in rep:
                if failure is not None:
                    raise failure
                return self._outputs(w, rep, written, changed)
            raise KernelCrash(f"{self.call.fn}: the op's worker answered out of turn")
        raise KernelRaised(f"{self.call.fn}: more than {MAX_MESSAGES} launches in one call")

    def _storages(self, w, placed) -> dict:
        """{id: a copy of the storage's bytes} as the worker placed them in the arena."""
        out = {}
        view = np.frombuffer(w.map, np.uint8, count=w.size)
        try:
            for rec in placed:
                i, off, n = (int(x) for x in rec)
                if off < _PAGE or off % _PAGE or n < 0 or off + n > w.size:
                    raise KernelCrash(f"{self.call.fn}: the op's worker placed a storage "
                                      f"outside the arena ({off}, {n})")
                out[i] = view[off:off + n].copy()
        finally:
            del view
        return out

    def _launch(self, w, launch, placed, written, changed) -> list:
        """One launch the op asked for, run here on normcheck's copies."""
        # the op's worker is untrusted: every string it sends is one line where it lands (#65:
        # a kernel's __name__ with line breaks put "verdict: PASS" lines on stdout)
        name = _one_line(launch.get("kernel"))
        if str(launch.get("file")) != self.kernel_file:
            raise KernelRaised(
                f"{self.call.fn} launched {name}, a kernel of {_one_line(launch.get('file'))}: "
                "normcheck "
                f"runs the kernels of the op's own file ({self.path.name})",
                exception="Unsupported")
        kern = self._kernel(name, launch.get("line"))
        stores = self._storages(w, placed)
        values = launch["values"]
        grid = [int(g) for g in launch["grid"]]
        args, used, names, spans = [], {}, [], {}
        for p in kern.sig.passed:
            v = values.get(p)
            if v is None:
                raise KernelRaised(f"{self.call.fn}: {name} launched without {p}")
            names.append(p)
            if v[0] == "tensor":
                i, off, dtype = int(v[1]), int(v[2]), str(v[3])
                if i in used:
                    raise KernelRaised(
                        f"{self.call.fn}: {name}'s {p} and {used[i]} share one tensor's "
                        "memory (an in-place launch): not run by normcheck yet",
                        exception="Unsupported")
                used[i] = p
                raw = stores.get(i)
                if raw is None:
                    raise KernelCrash(f"{self.call.fn}: storage {i} of {p} not sent")
                dt = numpy_dtype(dtype)
                n = (raw.nbytes - off) // dt.itemsize
                if off < 0 or off > raw.nbytes:
                    raise KernelCrash(f"{self.call.fn}: {p} starts outside its storage")
                spans[len(args)] = (i, off, dt.itemsize)
                args.append(raw[off:off + n * dt.itemsize].view(dt))
            elif v[0] == "null":
                args.append(None)
            elif v[0] == "bool":  # Triton's i1 (a constexpr: the value)
                args.append(np.bool_(bool(v[1])))
            elif v[0] == "int":  # as Triton types a Python int: i32 where it fits, else i64
                x = int(v[1])
                if not -2**63 <= x < 2**64:
                    raise KernelRaised(f"{self.call.fn}: {name}'s {p} = {x} fits no integer "
                                       "type")
                args.append(np.int32(x) if -2**31 <= x < 2**31 else
                            np.int64(x) if x < 2**63 else np.uint64(x))
            elif v[0] == "float":  # fp32, as Triton passes a Python float (a constexpr: exact)
                x = float.fromhex(v[1])
                args.append(np.float64(x) if p in kern.sig.constexprs else np.float32(x))
            else:
                raise KernelRaised(f"{self.call.fn}: {name}'s {p} is a {v[0]}: not launched "
                                   "by normcheck yet", exception="Unsupported")
        # provenance, byte by byte (#65): a byte whose value differs from what normcheck's last
        # launch left was made by the op's host code since -- it loses its provenance; a byte a
        # program of this launch stores gains it; one a launch only read keeps what it had
        for i in stores:
            prev = written.get(i)
            if prev is None or prev.shape != stores[i].shape:
                changed[i] = np.zeros(stores[i].shape, bool)
            else:
                changed[i] = changed.get(i, np.zeros(stores[i].shape, bool)) & \
                    (stores[i] == prev)
        note = kern(tuple(grid), None, args, names=names, stored=True)
        if note and note not in self.notes:
            self.notes.append(note)
        self.launched.append((name, tuple(grid)))
        for a, mask in (kern.last_stored or {}).items():
            if a in spans:
                i, off, size = spans[a]
                hit = np.flatnonzero(mask)
                if hit.size:
                    idx = off + (hit[:, None] * size + np.arange(size)).reshape(-1)
                    changed[i][idx[idx < changed[i].size]] = True
        out = []
        for rec in placed:
            i, off, n = (int(x) for x in rec)
            written[i] = stores[i]
            out.append([i, off, n])
        view = np.frombuffer(w.map, np.uint8, count=w.size)
        try:
            for i, off, n in out:
                view[off:off + n] = stores[i]
        finally:
            del view
        return out

    def _outputs(self, w, rep, written, changed) -> list:
        final = self._storages(w, rep["storages"])
        outs = []
        for (how, what), d in zip(self.outputs, rep["done"]):
            i, off, dtype, shape, strides = int(d[0]), int(d[1]), str(d[2]), d[3], d[4]
            label = f"{self.call.fn}'s {what if how == 'arg' else f'result {what}'}"
            if i not in written:
                raise KernelRaised(f"{label} was written by no kernel launch (the op's host "
                                   "code made it): refused", exception="HostComputed")
            if not np.array_equal(final.get(i, written[i]), written[i]):
                raise KernelRaised(f"{label} differs from what its kernels wrote (host code "
                                   "changed it after the launch): refused",
                                   exception="HostComputed")
            dt = numpy_dtype(dtype)
            shape = [int(x) for x in shape]
            strides = [int(x) * dt.itemsize for x in strides]
            try:
                arr = np.ndarray(shape, dt, buffer=written[i], offset=off, strides=strides)
                hit = np.ndarray([*shape, dt.itemsize], np.bool_, buffer=changed.get(i),
                                 offset=off, strides=[*strides, 1]) if i in changed else None
            except (ValueError, TypeError):
                raise KernelCrash(f"{label} lies outside its storage") from None
            if arr.size and (hit is None or not hit.any()):
                # a tensor the host filled, handed to a launch that only read it
                raise KernelRaised(f"{label} holds no byte a kernel launch wrote (the op's host "
                                   "code made it, and passed it to a launch unwritten): "
                                   "refused", exception="HostComputed")
            made = ~hit.all(axis=-1) if arr.size else np.zeros(0, bool)
            if made.any() and dt.name in ("float32", "float16", "bfloat16"):
                # an element still holding the poison torch.empty gave it was never written:
                # judged so (unwritten fails), not host-made
                from normcheck.formats import poison_bits

                made &= arr.view(f"u{dt.itemsize}") != poison_bits(dt)
            if made.any():  # every element what a launch stored, through the launches after
                first = np.unravel_index(int(np.flatnonzero(made.reshape(-1))[0]), made.shape)
                raise KernelRaised(
                    f"{label}: {int(made.sum())} of {made.size} elements hold a value no kernel "
                    f"launch stored (the op's host code made them), the first at "
                    f"{tuple(int(v) for v in first)}: refused", exception="HostComputed")
            outs.append(arr.copy())
        return outs


def _arena_limit() -> int:
    from normcheck.backends.cpu import sandbox

    return sandbox.address_space()


def _one_line(s: str) -> str:
    from normcheck.escape import one_line

    return one_line(s)


def numpy_dtype(name: str):
    """The numpy dtype of a tensor's dtype name (opcall.TENSOR_DTYPES; bfloat16 ml_dtypes')."""
    import ml_dtypes

    from normcheck.backends.triton.opcall import TENSOR_DTYPES

    if name not in TENSOR_DTYPES:
        raise InvalidArgument(f"a tensor of {name}")
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
