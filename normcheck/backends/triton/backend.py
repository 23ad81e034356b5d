"""Triton kernels as a backend: ``compile_many`` on a ``.py`` file returns kernels with the one
call every backend's kernels take (:class:`normcheck.backends.base.Kernel`).

``triton-cpu`` runs them under normcheck's executor (:mod:`.executor`) in a sandboxed worker
process (:mod:`.worker`); ``triton-gpu`` runs them with real Triton on a CUDA device (torch
and a GPU needed).  normcheck picks the Triton backend from the source: a kernel file ending in
``.py`` runs on ``triton-cpu`` under ``--backend cpu`` and on ``triton-gpu`` under ``--backend
cuda`` (:func:`normcheck.backends.for_source`).

The parent never imports Triton nor the user's file: a kernel's parameters, and which of them
are ``tl.constexpr``, are read from the file's syntax tree (:func:`signature`).  A launch's
``block`` is ``32 * num_warps`` threads (the spec's ``num_warps``); the cpu executor ignores
it.
"""

from __future__ import annotations

import ast
import atexit
import hashlib
import importlib.util
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from normcheck.backends import base, cache, isolation
from normcheck.errors import (CompileError, FailureKind, KernelCrash,
                              KernelError, LaunchRefused, Unsupported, invalid)
from normcheck.escape import one_line
from normcheck.files import SOURCE_BYTES, read_limited

__all__ = ["TritonCpuBackend", "TritonGpuBackend", "TritonKernel", "signature", "is_triton",
           "EXTRA", "Signature"]

EXTRA = "pip install 'normcheck[triton]'"
#: The Triton versions the executor's corrections are measured on (tests/test_triton.py passes
#: on each); another runs, its provenance says so.
TESTED_VERSIONS = ("3.8", "3.9")
DEFAULT_TIMEOUT = 120.0


def is_triton(source) -> bool:
    """Whether ``source`` names a Triton kernel file (a path ending in .py)."""
    return isinstance(source, (str, Path)) and "\n" not in str(source) and \
        str(source).endswith(".py")


def available() -> str | None:
    """Why Triton cannot run here, or None."""
    try:
        found = importlib.util.find_spec("triton")
    except (ImportError, ValueError) as e:  # an install that cannot be imported, or hidden
        return f"Triton cannot be imported ({type(e).__name__}: {e}; {EXTRA} installs it)"
    if found is None:
        return f"Triton is not installed ({EXTRA} adds it)"
    return None


@dataclass(frozen=True)
class Signature:
    params: tuple        # the parameter names, in order
    constexprs: tuple    # those annotated tl.constexpr
    line: int            # the def's line
    derived: tuple = ()  # set by @triton.heuristics / @triton.autotune configs, not passed
    defaults: tuple = ()  # parameters with a default value (a spec may leave them out)
    imports: tuple = ()  # the modules the file imports (absolute, dotted), imported by the
    #                      worker before its sandbox closes the file system
    stubbed: tuple = ()  # those not installed here (or relative): stood in for at import

    @property
    def passed(self) -> tuple:
        """The parameters a launch passes (in order): all but the derived ones."""
        return tuple(p for p in self.params if p not in self.derived)


def _derived(decorators) -> tuple:
    """The names @triton.heuristics({...}) and @triton.autotune(configs=[Config({...})]) set
    (literal dict keys)."""
    out = []
    for d in decorators:
        if not isinstance(d, ast.Call):
            continue
        for n in ast.walk(d):
            if isinstance(n, ast.Dict) and (
                    ast.unparse(d.func).endswith("heuristics") or
                    any(isinstance(c, ast.Call) and ast.unparse(c.func).endswith("Config")
                        and c.args and c.args[0] is n for c in ast.walk(d))):
                out += [k.value for k in n.keys if isinstance(k, ast.Constant)]
    return tuple(dict.fromkeys(out))


_TRITON_DECORATORS = ("jit", "autotune", "heuristics")
#: Python kernel languages that are not Triton, by the module a file imports: refused by name
_OTHER_DSLS = {"cutlass.cute": "CuTe DSL", "cuda.tile": "cuTile", "cutile": "cuTile"}


def _is_jit(dec, names=frozenset({"triton"})) -> bool:
    """Whether a decorator is Triton's: ``jit``, ``autotune`` or ``heuristics`` (called or not)
    reached through a name the file binds to triton (``names``, :func:`_triton_names`: the
    module, ``import triton as tt``, ``from triton import jit``) -- never CuTe DSL's
    ``cute.jit``/``cute.kernel``, cuTile's ``ct.kernel`` or a project's own ``autotune``."""
    node = dec.func if isinstance(dec, ast.Call) else dec
    parts = ast.unparse(node).split(".")
    if len(parts) == 1:  # a decorator imported from triton by name (an alias included)
        return parts[0] in names and parts[0] != "triton"
    return parts[-1] in _TRITON_DECORATORS and parts[0] in names


def _triton_names(tree) -> frozenset:
    """The names a file binds to triton: the module's (``triton``, or its alias) and the
    decorators it imports from it by name."""
    out = {"triton"}
    for n in tree.body:
        if isinstance(n, ast.Import):
            out |= {a.asname for a in n.names if a.name == "triton" and a.asname}
        elif isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "triton":
            out |= {a.asname or a.name for a in n.names if a.name in _TRITON_DECORATORS}
    return frozenset(out)


def _other_dsl(tree, fn=None) -> str | None:
    """The non-Triton kernel language a file (or its function ``fn``'s decorators) is written
    in: CuTe DSL (``import cutlass.cute as cute``, ``@cute.kernel``), cuTile (``import
    cuda.tile as ct``, ``@ct.kernel``); None for anything else."""
    aliases = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                for mod, lang in _OTHER_DSLS.items():
                    if a.name == mod or a.name.startswith(mod + "."):
                        aliases[a.asname or a.name] = lang
        elif isinstance(n, ast.ImportFrom) and n.module:
            for a in n.names:
                full = f"{n.module}.{a.name}"
                for mod, lang in _OTHER_DSLS.items():
                    if full == mod or full.startswith(mod + ".") or n.module.startswith(mod):
                        aliases[a.asname or a.name] = lang
    if not aliases:
        return None
    if fn is None:
        return next(iter(aliases.values()))
    for d in fn.decorator_list:
        node = d.func if isinstance(d, ast.Call) else d
        root = ast.unparse(node).split(".")[0]
        if root in aliases:
            return aliases[root]
    return None


def signature(text: str, entry: str, where: str = "source", line: int | None = None) -> Signature:
    """The parameters of the ``@triton.jit`` function ``entry`` of a file's text, from its
    syntax tree (nothing of the file runs); ``line``: the def at that line (its ``def`` or its
    first decorator), whatever name it has -- a kernel known by identity, not by name.  A file
    nested too deeply to read (a 200,000-term expression, a decorator a recursion deep) is
    refused by name, never an internal error."""
    try:
        return _signature(text, entry, where, line)
    except (RecursionError, MemoryError) as e:
        raise CompileError(f"{where}: normcheck cannot read this file: its Python is nested too "
                           f"deeply ({type(e).__name__} while reading its syntax tree); a "
                           "kernel file's expressions and decorators need no such depth") \
            from None


def _module_level(body) -> list:
    """The statements a module runs at its top level: its body, and the bodies of the if, try
    and with blocks in it (a kernel defined under ``if HAS_TRITON:`` or in ``try:`` is the
    module's as soon as the condition holds) -- not inside a function or a class."""
    out = []
    for n in body:
        out.append(n)
        if isinstance(n, ast.If):
            out += _module_level(n.body) + _module_level(n.orelse)
        elif isinstance(n, ast.Try) or type(n).__name__ == "TryStar":
            out += _module_level(n.body) + _module_level(n.orelse) + \
                _module_level(n.finalbody)
            for h in n.handlers:
                out += _module_level(h.body)
        elif isinstance(n, ast.With):
            out += _module_level(n.body)
    return out


def _signature(text: str, entry: str, where: str, line: int | None = None) -> Signature:
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        raise CompileError(f"{where}: not valid Python: line {e.lineno}: {e.msg}") from None
    names = _triton_names(tree)
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and (
        n.name == entry if line is None else
        line in (n.lineno, *(d.lineno for d in n.decorator_list[:1])))]
    module = _module_level(tree.body)
    top = [n for n in found if n in module]
    fn = (top or found or [None])[0]
    jits = [n.name for n in module if isinstance(n, ast.FunctionDef)
            and any(_is_jit(d, names) for d in n.decorator_list)]
    # the entry a CuTe DSL or cuTile kernel, or the file one with no Triton kernel at all
    lang = (_other_dsl(tree, fn) if fn is not None else None) or \
        (_other_dsl(tree) if entry not in jits and not jits else None)
    if lang is not None:
        raise Unsupported(f"{where}: {entry} is {lang} code, not Triton -- {lang}: not "
                          "supported yet (normcheck judges CUDA C/C++ and Triton kernels)")
    if not top:
        raise invalid("entry", entry, f"a @triton.jit function of {where}",
                      f"its kernels: {', '.join(jits) or 'none'}")
    fn = top[0]
    if not any(_is_jit(d, names) for d in fn.decorator_list):
        raise invalid("entry", entry, "a function decorated with @triton.jit",
                      "name the kernel, not its Python wrapper")
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    cons = [a.arg for a in fn.args.posonlyargs + fn.args.args
            if a.annotation is not None and ast.unparse(a.annotation).endswith("constexpr")]
    installed, missing = imports(tree, where)
    positional = fn.args.posonlyargs + fn.args.args
    defaults = [a.arg for a in positional[len(positional) - len(fn.args.defaults):]] \
        if fn.args.defaults else []
    return Signature(tuple(params), tuple(cons), fn.lineno, _derived(fn.decorator_list),
                     tuple(defaults), installed, missing)


def imports(tree, where) -> tuple:
    """(installed, missing): the modules a file imports (import a.b; from a.b import c: a.b and
    a.b.c) that are installed here -- imported as the file runs, inside the worker's sandbox --
    and those that are not (a project's own helpers: ``from
    liger_kernel.ops.utils import ...``, ``from .utils import ...``), which the file's host code
    uses and its kernels normally do not: they are stood in for as it is imported, and a kernel
    that calls one fails naming it."""
    out, missing = [], []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out += [(a.name, ()) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                missing.append("." * n.level + (n.module or ""))
                continue
            out.append((n.module, [f"{n.module}.{a.name}" for a in n.names if a.name != "*"]))
    installed = []
    for name, subs in out:
        try:
            found = importlib.util.find_spec(name.split(".")[0]) is not None
        except (ImportError, ValueError):
            found = False
        if found:  # `from a.b import c`: c may be a module, imported too
            installed += [name, *subs]
        else:
            missing.append(name)
    return tuple(dict.fromkeys(installed)), tuple(dict.fromkeys(missing))


def workers():
    """The Triton workers (:class:`normcheck.backends.cpu.workers.Workers`): one for the
    built-in Triton norms, one for each user file."""
    global _WORKERS
    if _WORKERS is None:
        from normcheck.backends.cpu.workers import Workers

        torch_home = cache.cache_dir("triton").resolve() / "torch"

        def env():
            # torch's compiler caches, as a file registering a torch.library.triton_op loads
            # them (its dynamo package makes its cache folder as it is imported): a folder that
            # exists, beneath one the worker reads, so os.makedirs(..., exist_ok=True) goes on
            # (the sandbox answers mkdir as a read-only file system: EEXIST); nothing is written
            (torch_home / "cache").mkdir(parents=True, exist_ok=True)
            return {"TRITON_INTERPRET": "1",
                    "TRITON_CACHE_DIR": str(cache.cache_dir("triton").resolve() / "triton"),
                    "TORCHINDUCTOR_CACHE_DIR": str(torch_home / "cache")}

        # a file's imports run in the sandbox: torch reads /dev/urandom as it is imported, and
        # its libraries load the system's (libutil, libm ...) through the dynamic loader
        _WORKERS = Workers("normcheck.backends.triton.worker", extra_env=env,
                           roots=("/dev/urandom", *LOADER_ROOTS, str(torch_home)))
        atexit.register(_WORKERS.close)
    return _WORKERS


_WORKERS = None
_LOADERS = None
_DESCRIBED: dict = {}
_DESCRIBE_LOCK = threading.Lock()


def _loaders():
    """The loader workers (:mod:`extract`): each runs one file's top level and describes what it
    left; closed after, so no process that ran a file's top level launches its kernels."""
    global _LOADERS
    if _LOADERS is None:
        from normcheck.backends.cpu.workers import Workers

        w = workers()
        _LOADERS = Workers("normcheck.backends.triton.worker", extra_env=w.extra_env,
                           roots=w.roots)
        atexit.register(_LOADERS.close)
    return _LOADERS


def _reply_described(rep):
    from normcheck.backends.cpu import wire

    if rep.get("ok") is True:
        return wire.check(rep, {"ok": (True,), "globals": dict, "stood_in": dict},
                          "the loader's reply")
    return wire.check(rep, {"ok": (False,), "kind": ("load",), "message": str},
                      "the loader's reply")


def described(path: Path, cached: Path, stubs, timeout: float) -> dict:
    """The loader's description of a file's globals (run once per file and process)."""
    from normcheck.backends.cpu import backend as cpu, wire

    key = str(cached)
    with _DESCRIBE_LOCK:
        got = _DESCRIBED.get(key)
        if got is not None:
            return got
        own = isolation.is_own(path)
        pool = workers() if own else _loaders()
        w = pool.get(str(cached.parent), own)
        req = {"op": "describe", "module": key, "filename": str(path), "stubs": list(stubs)}
        try:
            rep = w.request(req, timeout, _reply_described, cpu_need=timeout)
            if isinstance(rep, tuple):
                if rep[0] == "timeout":
                    raise cpu.timeout_error(path.name, timeout)
                if rep[0] == "malformed":
                    raise cpu.forged_reply(path.name, rep[1])
                try:
                    info = cpu.parse_report(w.report())
                except wire.WireError as e:
                    raise cpu.forged_reply(path.name, str(e)) from None
                err = cpu.sandbox_error(path.name, info, rep)
                if err is not None:
                    raise err
                raise CompileError(f"{path.name}: as it was imported, "
                                   f"{w.describe_death(rep)}")
        finally:
            if not own:
                with pool.lock:
                    pool.users.pop(str(cached.parent), None)
                w.close()
        if not rep["ok"]:
            raise CompileError(f"{path.name}: {one_line(rep['message'])}")
        _DESCRIBED[key] = rep
        return rep


#: The dynamic loader's folders: what a shared library a file's imports load may need
LOADER_ROOTS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib",
                "/etc/ld.so.cache")

_SCHEDULES = ("forward", "reverse", "random")
#: A GPU's grid: programs on each axis (CUDA's gridDim limits, Triton's launch grid).
GRID_LIMITS = (2**31 - 1, 65535, 65535)
#: The most programs normcheck's executor runs in one launch (a check's launches are a few
#: thousand; the large-index run picks its programs out of larger grids).
MAX_PROGRAMS = 1 << 24


def batched() -> bool:
    """Whether the executor runs a launch's programs together (executor/grid.py): yes, unless
    NORMCHECK_TRITON_BATCH=0 asks for one program at a time, as Triton's interpreter runs
    them (slower; the same results -- a way to tell a batching fault from a kernel's)."""
    v = os.environ.get("NORMCHECK_TRITON_BATCH", "1")
    if v not in ("0", "1"):
        raise invalid("NORMCHECK_TRITON_BATCH", v, "0 (one program at a time) or 1 (batched, "
                      "the default)")
    return v == "1"


def _reply(rep):
    from normcheck.backends.cpu import wire

    if rep.get("ok") is True:
        return wire.check(rep, {"ok": (True,), "seconds": float, "note?": str,
                                "stored?": _stored_masks}, "the launch reply")
    kinds = tuple(str(k) for k in FailureKind) + ("load", "launch", "unsupported")
    return wire.check(rep, {"ok": (False,), "kind": kinds, "message": str}, "the launch reply")


def _stored_masks(v) -> str | None:
    """A launch reply's stored elements: {argument index: packed bits}, or what is wrong."""
    if not isinstance(v, dict) or not all(isinstance(k, str) and k.isdigit() and
                                          isinstance(b, bytes) for k, b in v.items()):
        return "not {argument index: packed bits}"
    return None


def _failed(path, entry, rep) -> Exception:
    """The error of a failed launch reply: the file did not load (CompileError), the worker's
    launch machinery failed (KernelCrash), a construct normcheck cannot run (Unsupported: no
    verdict), or the kernel's own failure (its FailureKind)."""
    msg = one_line(rep["message"])
    if rep["kind"] == "load":
        return CompileError(f"{path.name}: {msg}")
    if rep["kind"] == "launch":
        return KernelCrash(f"{entry}: {msg}")
    if rep["kind"] == "unsupported":
        return Unsupported(f"{entry}: {msg}")
    err = KernelError(f"{entry}: {msg}")
    err.kind = FailureKind(rep["kind"])
    return err


class TritonKernel(base.Kernel):
    """A ``@triton.jit`` entry of a file, run by the executor in the Triton worker."""

    def __init__(self, path: Path, cached: Path, entry: str, sig: Signature, options: dict):
        self.path, self.cached, self.entry, self.sig = path, cached, entry, sig
        self.options = options
        self.params = sig.params
        self.last_seconds = None
        self.last_stored = None  # {argument index: bool per element} of a stored=True launch

    @property
    def capabilities(self):
        return TritonCpuBackend.capabilities

    def __repr__(self):
        return f"<TritonKernel {self.entry}({', '.join(self.sig.params)})>"

    def worker(self):
        """The worker this file runs in: its own (one a user file), or the built-ins'."""
        return workers().get(str(self.cached.parent), isolation.is_own(self.path))

    def __call__(self, grid, block, args, shared_mem=0, *, names=None, timeout=None,
                 guard=None, schedule=None, workers=None, seed=0, fill=0xFF, blocks=None,
                 hazards=False, max_dyn_smem=0, stored=False):
        """Run the kernel; returns the launch's note.  ``stored``: keep in ``last_stored``
        which elements of each array argument a program stored ({index: bool per element})."""
        from normcheck.backends.cpu import backend as cpu, wire
        from normcheck.formats import poison_bits

        self.refuse(schedule, workers, seed, fill, blocks, hazards)
        self.last_stored = None
        g = base.dim3(grid, "grid")
        if g[0] > GRID_LIMITS[0] or g[1] > GRID_LIMITS[1] or g[2] > GRID_LIMITS[2]:
            raise LaunchRefused(f"{self.entry}: launch refused: a grid of {g[0]} x {g[1]} x "
                                f"{g[2]} programs; a GPU launches at most 2^31 - 1 x 65535 x "
                                "65535 (invalid configuration argument)")
        if blocks is None and g[0] * g[1] * g[2] > MAX_PROGRAMS:
            raise Unsupported(f"{self.entry}: a launch of {g[0] * g[1] * g[2]:,} programs: "
                              f"normcheck's executor runs at most {MAX_PROGRAMS:,} in one "
                              "launch (#65: 2^31 - 1 of them ended as a dead worker)")
        args = list(args)
        passed = self.sig.passed
        optional = sum(1 for p in passed if p in self.sig.defaults)
        if not len(passed) - optional <= len(args) <= len(passed):
            derived = (f" ({', '.join(self.sig.derived)} set by its decorators)"
                       if self.sig.derived else "")
            n = f"{len(passed)}" if not optional else \
                f"{len(passed) - optional} to {len(passed)}"
            raise invalid("args", len(args), f"{n} arguments for "
                          f"{self.entry}({', '.join(passed)}){derived}",
                          "one [[args]] table per parameter, constexprs included (those with "
                          "a default may be left out, from the end)")
        schedule = schedule or "forward"
        if schedule not in _SCHEDULES:
            raise invalid("schedule", schedule, f"one of {', '.join(_SCHEDULES)}")
        timeout = float(timeout or self.options.get("timeout") or DEFAULT_TIMEOUT)
        for i, a in enumerate(args):
            if isinstance(a, base.StructArg):
                raise invalid(f"args[{i}]", "struct", "pointers and scalars (a Triton kernel "
                              "takes no struct)")
        records, layout, size, _hidden = cpu.array_layout(args, "end")
        arrays = (np.ndarray, base.SparseRows)
        dtypes = [a.dtype.name if isinstance(a, arrays) else "" for a in args]
        # an element still holding the poison of its format is an output no program has
        # written (the rows normcheck generates never hold these NaN payloads)
        poison = [poison_bits(a.dtype) if isinstance(a, arrays) and a.dtype.name in
                  ("float32", "float16", "bfloat16") else -1 for a in args]
        # the large-index run's arrays: only their last rows exist (the executor's Window)
        windows = {str(i): [a.lo * a.pitch, bool(a.walk)] for i, a in enumerate(args)
                   if isinstance(a, base.SparseRows)}
        req = {"op": "launch", "module": str(self.cached), "filename": str(self.path),
               "entry": self.entry, "params": list(self.sig.passed[:len(args)]),
               "constexprs": list(self.sig.constexprs), "grid": list(g), "args": records,
               "dtypes": dtypes, "names": [str(n) for n in (names or self.sig.params)],
               "poison": poison, "schedule": schedule, "seed": int(seed),
               "stubs": list(self.sig.stubbed), "batched": batched()}
        desc = described(self.path, self.cached, self.sig.stubbed, timeout)
        req["globals"], req["stood_in"] = desc["globals"], desc["stood_in"]
        if windows:
            req["windows"] = windows
        if blocks is not None:
            req["blocks"] = [int(blocks[0]), int(blocks[1])]
        if stored:
            req["stored"] = True
        w = self.worker()

        def dead(rep):
            if rep[0] == "timeout":
                raise cpu.timeout_error(self.entry, timeout)
            if rep[0] == "malformed":
                raise cpu.forged_reply(self.entry, rep[1])
            try:
                info = cpu.parse_report(w.report())
            except wire.WireError as e:
                raise cpu.forged_reply(self.entry, str(e)) from None
            err = cpu.sandbox_error(self.entry, info, rep)
            if err is not None:
                raise err
            raise KernelCrash(f"{self.entry}: {w.describe_death(rep)}")

        with w.lock:
            rep = w.run_on_arrays(layout, size, req, timeout, _reply, cpu_need=timeout,
                                  on_dead=dead)
        if not rep["ok"]:
            raise _failed(self.path, self.entry, rep)
        self.last_seconds = rep["seconds"]
        if stored:
            self.last_stored = {}
            for k, packed in (rep.get("stored") or {}).items():
                i = int(k)
                if i < len(args) and isinstance(args[i], np.ndarray):
                    n = args[i].size
                    bits = np.unpackbits(np.frombuffer(packed, np.uint8))
                    if bits.size >= n:
                        self.last_stored[i] = bits[:n].astype(bool)
        return rep.get("note") or None


def load(source) -> tuple:
    """(path, text, cached copy) of a Triton file: read within normcheck's limit, copied into
    the cache (the sandboxed worker reads it there)."""
    path = Path(source)
    raw = read_limited(path, "source", SOURCE_BYTES, "a readable Triton .py file")
    text = raw.decode("utf-8", "replace")
    digest = hashlib.sha256(raw).hexdigest()[:24]
    # a folder of its own (the one its worker may read: no other file checked before), the
    # built-ins' together
    cached = cache.cache_dir("triton") / "builtin" / f"{digest}.py" if isolation.is_own(path) \
        else cache.cache_dir("triton") / digest / "kernel.py"
    if not cache.verified(cached):
        cache.install_file(raw, cached)
    return path.resolve(), text, cached


class TritonCpuBackend(base.Backend):
    """Triton kernels under normcheck's executor, on the CPU, in the sandboxed worker."""

    name = "triton-cpu"
    capabilities = base.Capabilities(block_orders=True, block_subsets=True, sparse_rows=True,
                                     language="triton")

    @classmethod
    def own_parts(cls) -> list:
        from normcheck.backends.cpu.backend import CpuBackend

        return CpuBackend.own_parts()

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return available()

    def compile_many(self, source, entries, *, defines=None, options=None,
                     include_dirs=()) -> dict:
        if defines:
            raise invalid("defines", defines, "none for a Triton kernel (constexprs are "
                          "[[args]] with role = \"const\")")
        path, text, cached = load(source)
        out = {e: TritonKernel(path, cached, e, signature(text, e, path.name),
                               dict(options or {})) for e in entries}
        stubbed = {m for k in out.values() for m in k.sig.stubbed}
        stubbed = sorted(m for m in stubbed if not any(m.startswith(o + ".") for o in stubbed))
        if stubbed:
            import sys

            print(f"normcheck: {path.name} imports {', '.join(stubbed)}, not installed here: "
                  "stood in for while it is imported (host code); a kernel that calls one "
                  "fails naming it", file=sys.stderr)
        return out

    def provenance(self, options=None) -> dict:
        from importlib.metadata import version

        st = workers().any().sandbox_state() or {}
        v = version("triton")
        untested = "" if v.startswith(TESTED_VERSIONS) else \
            f"; triton {v}: the executor's corrections were measured on " \
            f"{' and '.join(TESTED_VERSIONS)}"
        return {"backend": self.name, "compiler": f"triton {v} (interpreter{untested})",
                "flags": "TRITON_INTERPRET=1", "fmad": False, "arch": None,
                "device": "cpu (normcheck's Triton executor)",
                "sandbox": st.get("detail", "?"), "cpu_vs_gpu": CPU_VS_GPU}


CPU_VS_GPU = ("Triton's interpreter with normcheck's rounding corrections: every cast and "
              "bf16/fp16/fp32 operation rounds to nearest even (rtz where asked), tl.fma once; "
              "a*b+c is never contracted (the GPU contracts it by default); tl.sum adds "
              "neighbour pairs in the element type (the GPU's tree follows its layout); "
              "sqrt, rsqrt and division are correctly rounded (the GPU's may be approximate)")


class TritonGpuBackend(base.Backend):
    """Triton kernels with real Triton on a CUDA device (torch's tensors carry the arrays)."""

    name = "triton-gpu"
    capabilities = base.Capabilities(device_timings=True, hardware_rsqrt=True,
                                     language="triton")

    @classmethod
    def unavailable_reason(cls) -> str | None:
        why = available()
        if why:
            return why
        if importlib.util.find_spec("torch") is None:
            return "torch is not installed (Triton launches on torch's CUDA tensors)"
        import torch

        if not torch.cuda.is_available():
            return "no CUDA device is visible to torch"
        return None

    def compile_many(self, source, entries, *, defines=None, options=None,
                     include_dirs=()) -> dict:
        if defines:
            raise invalid("defines", defines, "none for a Triton kernel (constexprs are "
                          "[[args]] with role = \"const\")")
        path, text, cached = load(source)
        return {e: _GpuKernel(path, cached, e, signature(text, e, path.name), self.device)
                for e in entries}

    #: where the kernels run: "cuda", or "cpu" for the stand-in (tests, without a GPU)
    device = "cuda"

    def provenance(self, options=None) -> dict:
        import torch
        from importlib.metadata import version

        name = torch.cuda.get_device_name(0) if self.device == "cuda" else \
            "cpu (a stand-in for the GPU: Triton's interpreter on torch's CPU tensors)"
        return {"backend": self.name, "compiler": f"triton {version('triton')}",
                "flags": "", "fmad": True, "arch": None, "device": name,
                "sandbox": "the file runs in a worker of its own, started isolated (python -I, "
                           "a private folder, the allow-listed environment, no capabilities, "
                           "a PID namespace); no landlock or seccomp (the GPU driver needs its "
                           "devices)", "cpu_vs_gpu": "-"}


class TritonGpuStandIn(TritonGpuBackend):
    """The GPU path on a machine without a GPU: the same worker, protocol and isolation, with
    Triton's interpreter on torch's CPU tensors in place of the device -- what tests of the GPU
    path's confinement run on."""

    device = "cpu"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        why = available()
        if why:
            return why
        if importlib.util.find_spec("torch") is None:
            return "torch is not installed (the stand-in runs on torch's CPU tensors)"
        return None


def _gpu_workers(device: str):
    """The GPU path's workers (:mod:`normcheck.backends.triton.gpu_worker`), one a user file."""
    if device not in _GPU_WORKERS:
        from normcheck.backends.cpu.workers import Workers

        def env():
            # HOME, TMPDIR and Triton's cache: the worker's own scratch folder, the one place it
            # may write besides /dev (Worker.writes_scratch) -- never normcheck's cache, whose
            # compiled kernels a file's host code could otherwise plant for later checks
            out = {"NORMCHECK_TRITON_DEVICE": device}
            if device == "cpu":
                out["TRITON_INTERPRET"] = "1"
            for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "CUDA_PATH"):
                if k in os.environ:
                    out[k] = os.environ[k]
            return out

        _GPU_WORKERS[device] = Workers("normcheck.backends.triton.gpu_worker", extra_env=env,
                                       sandbox="off", writes_scratch=True)
        atexit.register(_GPU_WORKERS[device].close)
    return _GPU_WORKERS[device]


_GPU_WORKERS = {}


class _GpuKernel(base.Kernel):
    capabilities = TritonGpuBackend.capabilities

    def __init__(self, path, cached, entry, sig, device):
        self.path, self.cached, self.entry, self.sig = path, cached, entry, sig
        self.device = device
        self.params = sig.params
        self.last_seconds = None

    def __call__(self, grid, block, args, shared_mem=0, *, names=None, timeout=None,
                 guard=None, schedule=None, workers=None, seed=0, fill=0xFF, blocks=None,
                 hazards=False, max_dyn_smem=0):
        from normcheck.backends.cpu import backend as cpu

        self.refuse(schedule, workers, seed, fill, blocks, hazards)
        args = list(args)
        records, layout, size, _hidden = cpu.array_layout(args, "end")
        req = {"op": "launch", "module": str(self.cached), "filename": str(self.path),
               "entry": self.entry, "params": list(self.sig.passed[:len(args)]),
               "grid": list(base.dim3(grid, "grid")),
               "num_warps": max(1, base.dim3(block, "block")[0] // 32), "args": records,
               "dtypes": [a.dtype.name if isinstance(a, np.ndarray) else "" for a in args]}
        timeout = float(timeout or DEFAULT_TIMEOUT)
        # the file's top level runs in the cpu path's loader, never where the launch is
        req["globals"] = described(self.path, self.cached, self.sig.stubbed, timeout)["globals"]
        w = _gpu_workers(self.device).get(str(self.cached.parent), isolation.is_own(self.path))

        def dead(rep):
            if rep[0] == "timeout":
                raise cpu.timeout_error(self.entry, timeout)
            if rep[0] == "malformed":
                raise cpu.forged_reply(self.entry, rep[1])
            raise KernelCrash(f"{self.entry}: {w.describe_death(rep)}")

        with w.lock:
            rep = w.run_on_arrays(layout, size, req, timeout, _reply, cpu_need=timeout,
                                  on_dead=dead)
        if not rep["ok"]:
            raise _failed(self.path, self.entry, rep)
        self.last_seconds = rep["seconds"]
        return None
