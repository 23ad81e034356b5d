"""A Triton file's kernels, taken out of the file: the judged code never runs beside the judge.

A kernel file is Python: its top-level code could reach the executor that launches and measures
its kernel (``sys.modules[...].run = ...``) and make the verdict its own.  So a file runs in two
processes, neither of which can change what the other does:

1. **describe** (a loader worker, closed after): the file runs as a module, as ``import`` would
   run it (its version tests, its conditional imports, its autotune configs built by a
   function); what it leaves is *described* as data -- each global a value, a ``tl.constexpr``,
   a dtype, one of Triton's language modules or functions, a stand-in, or "a def on line n" --
   never handed over as an object.
2. **rebuild** (the launch worker, which never runs the file's top level): the ``def``s the
   entry needs, read from the file's text (its lines, for tracebacks and the interpreter), are
   checked by :func:`verify` and executed alone in a namespace made from the descriptions, with
   builtins Triton's compiler offers a kernel.  The decorators are Triton's, re-applied: ``jit``,
   ``heuristics`` (its functions checked as a kernel is), ``autotune`` (its first config, as
   described); any other decorator (a project's ``@libentry()``) is left out.

:func:`verify` admits what Triton's compiler accepts in a kernel and nothing that reaches
outside the language: no import, ``global``, class, nested function, generator or ``try``; no
name or attribute that starts with an underscore (``__class__``, ``_semantic=``), none of the
attributes that lead from a value to an interpreter's internals (a tensor's ``handle``, a
function's ``fn``, a frame's globals); a module only as the start of an attribute chain that
stays inside ``triton``, ``triton.language`` and ``math`` and ends at something that is not a
module (``tl.core.inspect`` is refused).  A file that breaks these is not one a GPU build would
compile; it is refused with the line and the reason, never run.
"""

from __future__ import annotations

import ast
import math
import types

__all__ = ["describe", "rebuild", "rebuilt", "verify", "Refused", "SAFE_BUILTINS"]


class Refused(Exception):
    """A kernel that reaches outside the language (its line and why)."""


#: Attributes that lead from a value to an interpreter's or a library's internals (a tensor's
#: handle, a jit function's Python function and launcher, a frame's globals, numpy's raw
#: buffers and in-place writers, str.format's attribute lookups): no kernel reads them.
DENIED_ATTRS = frozenset({
    "handle", "fn", "src", "run", "cache", "warmup", "launch", "base", "ctypes", "data",
    "flags", "setflags", "tofile", "dump", "dumps", "fill", "put", "itemset", "resize", "sort",
    "partition", "byteswap", "setfield", "newbyteorder", "format", "format_map", "mro",
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "ag_frame", "ag_code",
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next",
    "co_consts", "modules", "builtins", "globals", "func_globals", "im_func", "system",
    "popen", "load_module", "exec_module", "loader", "spec",
})

#: Nodes no kernel has (Triton's compiler refuses them) and that could reach outside it
DENIED_NODES = (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.ClassDef,
                ast.AsyncFunctionDef, ast.FunctionDef, ast.Await, ast.Yield, ast.YieldFrom,
                ast.GeneratorExp, ast.Try, ast.AsyncWith, ast.AsyncFor)
if hasattr(ast, "TryStar"):
    DENIED_NODES += (ast.TryStar,)

#: Modules an attribute chain may pass through: Triton's language, Triton's top level, math
def _module_allowed(name: str) -> bool:
    return name in ("triton", "triton.language", "math") or name.startswith("triton.language.")


def _plain(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


# -- 1. describe (the loader worker, after the file ran) ------------------------------------------
def _scalar_desc(v):
    if isinstance(v, float):
        return ["float", v.hex()]
    return ["value", v]


def describe(ns: dict, filename: str) -> dict:
    """{name: description} of a module namespace the file left: data only."""
    out = {}
    for name, v in list(ns.items())[:2000]:
        if not isinstance(name, str) or name.startswith("__"):
            continue
        try:
            out[name] = _describe(v, filename)
        except Exception as e:  # noqa: BLE001 -- an object of the file's making misbehaved
            out[name] = ["opaque", f"{type(v).__name__} ({type(e).__name__})"]
    return out


def _describe(v, filename):
    import triton
    import triton.language as tl
    from triton.runtime import interpreter as ti

    from normcheck.backends.triton import executor, stubs

    if _plain(v):
        return _scalar_desc(v)
    if isinstance(v, tuple) and len(v) <= 64 and all(_plain(x) for x in v):
        return ["tuple", [_scalar_desc(x) for x in v]]
    if isinstance(v, tl.constexpr):
        inner = v.value
        if _plain(inner):
            return ["constexpr", _scalar_desc(inner)]
        if isinstance(inner, tl.dtype):
            return ["constexpr", ["dtype", inner.name]]
        return ["opaque", f"tl.constexpr of {type(inner).__name__}"]
    if isinstance(v, tl.dtype) and not isinstance(v, (tl.pointer_type, tl.block_type)):
        return ["dtype", v.name]
    if isinstance(v, executor.LibdeviceModule):
        return ["libdevice"]
    if isinstance(v, types.ModuleType):
        if getattr(v, "_normcheck_stub", False):
            return ["stub", v.__name__]
        if _module_allowed(v.__name__):
            return ["module", v.__name__]
        return ["opaque", f"module {v.__name__}"]
    if isinstance(v, stubs.Missing):
        return ["missing", v._name]
    # a kernel: through its wrappers (heuristics, autotune) to the interpreted function
    obj, configs = v, None
    for _ in range(8):
        if isinstance(obj, ti.InterpretedFunction):
            break
        if configs is None and isinstance(getattr(obj, "configs", None), list):
            configs = obj.configs
        nxt = getattr(obj, "fn", None)
        if nxt is None or nxt is obj:
            break
        obj = nxt
    if isinstance(obj, ti.InterpretedFunction):
        code = getattr(obj.fn, "__code__", None)
        if code is not None and code.co_filename == filename:
            first = None
            if configs:
                kw = getattr(configs[0], "kwargs", {}) or {}
                first = {str(k): _scalar_desc(x) for k, x in kw.items() if _plain(x)}
            return ["def", int(code.co_firstlineno), first]
        obj = obj.fn
    v = _unwrapped(v)
    mod = getattr(v, "__module__", None) or ""
    qual = getattr(v, "__qualname__", None) or getattr(v, "__name__", None)
    if mod in (stubs.__name__, "triton.language.extra.libdevice",
               "triton.language.extra.cuda.libdevice"):
        if callable(v) and isinstance(qual, str):
            return ["libdevice_fn", qual.rsplit(".", 1)[-1]]
    if isinstance(qual, str) and (_module_allowed(mod) or mod.startswith("triton.runtime")):
        # by name: the interpreter patches the language's modules as it runs (what the name
        # holds now may wrap what the file took); the launch takes it by name from there alike
        # -- but only where that name really holds this very object (a file sets __module__
        # and __qualname__ of its own function as it likes: #65, "builtins.exec" through
        # triton.language.core's `builtins`)
        found = _exported(mod, qual)
        if found is not None and (found is v or _unwrapped(found) is v):
            return ["attr", mod, qual]
        if mod == "triton" or any(getattr(triton, n, None) is v for n in dir(triton)):
            for n in dir(triton):
                if not n.startswith("_") and getattr(triton, n, None) is v:
                    return ["attr", "triton", n]
    # a language function as the interpreter left it patched (its wrapper in the module now):
    # found by its name in Triton's language modules
    name = getattr(v, "__name__", None)
    if callable(v) and isinstance(name, str) and not name.startswith("_"):
        import sys

        for mname, m in list(sys.modules.items()):
            if m is None or not _module_allowed(mname) or getattr(m, name, None) is not v:
                continue
            if mname.endswith("libdevice"):
                return ["libdevice_fn", name]
            return ["attr", mname, name]
    what = type(v).__name__
    if callable(v) and isinstance(qual, str):
        what += f" {mod}.{qual}" if mod else f" {qual}"
    return ["opaque", what[:200]]


def _unwrapped(v):
    """A language function through the wrappers it may be in, in any order: the executor's (a
    builtin given its semantic, libdevice's calls) and the interpreter's patch (each process's
    launches patch the language's modules and leave them patched)."""
    from normcheck.backends.triton import executor

    for _ in range(8):
        kw = getattr(v, "__kwdefaults__", None)
        wrapped = getattr(v, "__wrapped__", None)
        if str(getattr(v, "__qualname__", "")).startswith("_patch_attr.") and \
                isinstance(kw, dict) and "member" in kw:
            v = kw["member"]
        elif getattr(v, "__module__", None) == executor.__name__ and wrapped is not None:
            v = wrapped
        else:
            break
    return v


def _exported(module: str, qual: str):
    """The object ``module.qual`` names where it is one Triton's language (or math) exports --
    every step an attribute of the one before that is not a module (no path through an
    imported module: triton.language.core.builtins.exec), the end neither a module nor a
    Python builtin (exec, eval, open, __import__ ...) -- else None."""
    import builtins
    import importlib

    if not isinstance(qual, str) or not qual or any(
            not p.isidentifier() or p.startswith("_") for p in qual.split(".")):
        return None
    try:
        obj = importlib.import_module(module)
    except ImportError:
        return None
    for part in qual.split("."):
        obj = getattr(obj, part, None)
        if obj is None or isinstance(obj, types.ModuleType):
            return None
    if any(obj is b for b in vars(builtins).values()) or \
            getattr(obj, "__self__", None) is builtins:
        return None
    return obj


# -- 2. rebuild (the launch worker) ---------------------------------------------------------------
def _safe_getattr(obj, name, *default):
    if not isinstance(name, str) or name.startswith("_") or name in DENIED_ATTRS or \
            isinstance(obj, types.ModuleType):
        raise Refused(f"getattr(..., {name!r}): not an attribute a kernel reads")
    r = getattr(obj, name, *default)
    if isinstance(r, types.ModuleType):
        raise Refused(f"getattr(..., {name!r}) is a module")
    return r


def _safe_hasattr(obj, name):
    try:
        _safe_getattr(obj, name)
    except (Refused, AttributeError):
        return False
    return True


#: The builtins a kernel's code sees: those Triton's compiler offers (len, list, range, float,
#: int, isinstance, getattr, hasattr, print, min, max) and a few pure ones a heuristic uses
SAFE_BUILTINS = {
    "len": len, "list": list, "range": range, "float": float, "int": int, "bool": bool,
    "isinstance": isinstance, "getattr": _safe_getattr, "hasattr": _safe_hasattr,
    "print": print, "min": min, "max": max, "abs": abs, "tuple": tuple, "dict": dict,
    "enumerate": enumerate, "zip": zip, "round": round, "str": str, "slice": slice,
    "all": all, "any": any, "sum": sum, "None": None, "True": True, "False": False,
    "ValueError": ValueError, "TypeError": TypeError, "AssertionError": AssertionError,
    "RuntimeError": RuntimeError, "NotImplementedError": NotImplementedError,
}


def _value(desc, where):
    if not isinstance(desc, list) or not desc or not isinstance(desc[0], str):
        raise Refused(f"{where}: a description that is not one")
    kind = desc[0]
    if kind == "value" and len(desc) == 2 and _plain(desc[1]) and not isinstance(desc[1], float):
        return desc[1]
    if kind == "float" and len(desc) == 2 and isinstance(desc[1], str):
        return float.fromhex(desc[1])
    raise Refused(f"{where}: {kind!r} is not a plain value")


def _materialise(name, desc, stood):
    import importlib

    import triton.language as tl

    from normcheck.backends.triton import stubs

    ex = _executor()
    where = f"the global {name}"
    kind = desc[0] if isinstance(desc, list) and desc and isinstance(desc[0], str) else None
    if kind in ("value", "float"):
        return _value(desc, where)
    if kind == "tuple" and len(desc) == 2 and isinstance(desc[1], list):
        return tuple(_value(d, where) for d in desc[1])
    if kind == "constexpr" and len(desc) == 2:
        inner = desc[1]
        if isinstance(inner, list) and inner and inner[0] == "dtype":
            return tl.constexpr(_materialise(name, inner, stood))
        return tl.constexpr(_value(inner, where))
    if kind == "dtype" and len(desc) == 2 and isinstance(desc[1], str):
        try:
            return tl.core.dtype(desc[1])
        except (AssertionError, ValueError, KeyError, TypeError):
            raise Refused(f"{where}: no Triton dtype {desc[1]!r}") from None
    if kind == "libdevice":
        return _libdevice(ex)
    if kind == "libdevice_fn" and len(desc) == 2 and isinstance(desc[1], str) and \
            not desc[1].startswith("_"):
        return getattr(_libdevice(ex), desc[1])
    if kind == "module" and len(desc) == 2 and isinstance(desc[1], str) and \
            _module_allowed(desc[1]):
        return importlib.import_module(desc[1])
    if kind == "stub" and len(desc) == 2 and isinstance(desc[1], str):
        stood.append(desc[1])
        stubs.stub_modules([desc[1]], "")
        import sys

        return sys.modules[desc[1]]
    if kind == "missing" and len(desc) == 2 and isinstance(desc[1], str):
        return stubs.Missing(desc[1])
    if kind == "attr" and len(desc) == 3 and all(isinstance(d, str) for d in desc[1:]) and \
            (_module_allowed(desc[1]) or desc[1].startswith("triton.runtime")) and \
            not any(p.startswith("_") for p in desc[2].split(".")):
        obj = _exported(desc[1], desc[2])
        if obj is None:
            raise Refused(f"{where}: {desc[1]}.{desc[2]} is not an object Triton exports (a "
                          "path through a module, a Python builtin, or nothing)")
        if tl.core.is_builtin(obj) and ex is not None:
            return ex.with_semantic(obj)  # the interpreter calls it by name (a compiler, as is)
        return obj
    if kind == "opaque":
        return _Opaque(name, str(desc[1]) if len(desc) > 1 else "?")
    raise Refused(f"{where}: an unknown description {str(desc)[:80]}")


class _Opaque:
    """A global the file's top level made that is not data (a torch module, a host function, an
    object): absent where the kernel runs, refused by :func:`verify` where the kernel reads it."""

    def __init__(self, name, what):
        self.name, self.what = name, what


def _defs(tree) -> dict:
    """{line: FunctionDef} of the defs outside any function or class (inside a top-level if or
    try too), by the line of their ``def`` and of their first decorator."""
    out = {}

    def walk(body):
        for node in body:
            if isinstance(node, ast.FunctionDef):
                out[node.lineno] = node
                if node.decorator_list:
                    out.setdefault(node.decorator_list[0].lineno, node)
            elif isinstance(node, (ast.If, ast.For, ast.While, ast.With)):
                walk(node.body)
                walk(getattr(node, "orelse", []))
            elif isinstance(node, ast.Try) or (hasattr(ast, "TryStar") and
                                               isinstance(node, ast.TryStar)):
                walk(node.body)
                for h in node.handlers:
                    walk(h.body)
                walk(node.orelse)
                walk(node.finalbody)

    walk(tree.body)
    return out


def _chain(node):
    """(root Name, [attributes]) of an attribute chain ``a.b.c``, or (None, [])."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return node, parts[::-1]
    return None, []


def _executor():
    """normcheck's executor where kernels run interpreted (TRITON_INTERPRET=1: the cpu path,
    the GPU path's stand-in), else None: on a GPU the rebuilt kernels are compiled by Triton
    itself, and the executor (which sets the interpreter up as it is imported) stays out."""
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        return None
    from normcheck.backends.triton import executor

    return executor


def _libdevice(ex):
    """libdevice as the kernel's launch runs it: the executor's under the interpreter, Triton's
    own where it compiles."""
    if ex is not None:
        return ex.LibdeviceModule()
    import importlib

    return importlib.import_module("triton.language.extra.libdevice")


def _modulish(v) -> bool:
    ex = _executor()
    return isinstance(v, types.ModuleType) or (ex is not None and
                                               isinstance(v, ex.LibdeviceModule))


def verify(node, ns: dict, filename: str, lambdas: bool = False):
    """Refuse (:class:`Refused`, naming the line) code that reaches outside Triton's language;
    ``ns``: the namespace it will run in (what its global names are); ``lambdas``: a
    decorator's argument (a heuristic's function) may be a lambda."""
    def refuse(n, why):
        raise Refused(f"{filename}:{getattr(n, 'lineno', '?')}: {why}")

    local = {n.arg for n in ast.walk(node) if isinstance(n, ast.arg)}
    local |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and
              isinstance(n.ctx, (ast.Store, ast.Del))}
    chained = {}  # id of a chain's root Name -> its outermost Attribute
    for n in ast.walk(node):
        if n is not node and isinstance(n, DENIED_NODES):
            refuse(n, f"{type(n).__name__} in a kernel: not Triton's language (its compiler "
                      "refuses it), and a way out of the kernel")
        if isinstance(n, ast.Lambda) and not lambdas:
            refuse(n, "a lambda in a kernel: not Triton's language")
        if isinstance(n, ast.Name) and n.id.startswith("__"):
            refuse(n, f"the name {n.id}: not a kernel's")
        if isinstance(n, ast.arg) and n.arg.startswith("__"):
            refuse(n, f"the parameter {n.arg}: not a kernel's")
        if isinstance(n, ast.keyword) and n.arg and n.arg.startswith("_"):
            refuse(n, f"the keyword {n.arg}=: an internal argument of Triton's, not a kernel's")
        if isinstance(n, ast.Attribute):
            if isinstance(n.ctx, (ast.Store, ast.Del)):
                refuse(n, f"assigns the attribute .{n.attr}: a kernel assigns no attribute")
            if n.attr.startswith("_"):
                refuse(n, f"the attribute .{n.attr}: not Triton's language")
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and \
                n.func.id in ("getattr", "hasattr") and len(n.args) >= 2 and \
                isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str):
            name = n.args[1].value
            if name.startswith("_") or name in DENIED_ATTRS:
                refuse(n, f"{n.func.id}(..., {name!r}): not an attribute a kernel reads")
    # attribute chains, outermost only: from a module, checked object by object
    inner = {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    for n in ast.walk(node):
        if not isinstance(n, ast.Attribute) or id(n) in inner:
            continue
        root, parts = _chain(n)
        if root is not None and root.id not in local and _modulish(ns.get(root.id)):
            chained[id(root)] = n
            _check_module_chain(n, root, parts, ns, refuse)
        else:
            a = n
            while isinstance(a, ast.Attribute):
                if a.attr in DENIED_ATTRS:
                    refuse(a, f"the attribute .{a.attr}: it leads out of the kernel's values")
                a = a.value
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in local:
            v = ns.get(n.id)
            if isinstance(v, _Opaque):
                refuse(n, f"reads the global {n.id}, a {v.what} the file's top-level code "
                          "made: a kernel reads only constexpr globals, Triton's modules and "
                          "other kernels (Triton's compiler refuses it)")
            if _modulish(v) and id(n) not in chained:
                refuse(n, f"uses the module {n.id} as a value: a kernel only reads names "
                          "from a module")


def _check_module_chain(top, root, parts, ns, refuse):
    """The outermost chain ``root.a.b`` starting at a module: every module it passes through
    one of Triton's language (or a stand-in), the end not a module, and a value's attributes
    not the denied ones."""
    from normcheck.backends.triton import stubs

    obj, name = ns[root.id], root.id
    for part in parts:
        if isinstance(obj, types.ModuleType):
            if not (getattr(obj, "_normcheck_stub", False) or _module_allowed(obj.__name__)):
                refuse(top, f"{name}: the module {obj.__name__} is not Triton's language")
        elif not _modulish(obj) and not isinstance(obj, stubs.Missing) and \
                part in DENIED_ATTRS:
            refuse(top, f"{name}.{part}: it leads out of the kernel's values")
        try:
            obj = getattr(obj, part)
        except AttributeError:
            return  # fails as it runs, naming the attribute
        name = f"{name}.{part}"
    if isinstance(obj, types.ModuleType):
        refuse(top, f"{name}: a module used as a value (a kernel only reads names from one)")


_DECORATORS = {"triton.jit": "jit", "triton.runtime.jit.jit": "jit", "triton.language.jit": "jit",
               "triton.autotune": "autotune", "triton.runtime.autotuner.autotune": "autotune",
               "triton.heuristics": "heuristics",
               "triton.runtime.autotuner.heuristics": "heuristics"}


def _decorator_kind(dec, ns) -> str | None:
    """What a decorator is: "jit", "autotune", "heuristics", or None (another: left out)."""
    import triton

    target = dec.func if isinstance(dec, ast.Call) else dec
    root, parts = _chain(target)
    if root is None:
        return None
    obj = ns.get(root.id)
    for part in parts:
        if part.startswith("_"):
            return None
        obj = getattr(obj, part, None)
    for name, kind in (("jit", "jit"), ("autotune", "autotune"), ("heuristics", "heuristics")):
        if obj is not None and obj is getattr(triton, name, None):
            return kind
    return None


_REBUILT: dict = {}


def rebuilt(req: dict):
    """In a launch worker (the cpu path's or the GPU path's): the entry's kernels of a launch
    request, rebuilt once per file and entry from the file's text (read from normcheck's cache)
    and the loader's description of its globals -- :func:`rebuild`'s result, kept."""
    from normcheck.backends.cpu.worker import read_file

    key = (req["module"], req["entry"])
    got = _REBUILT.get(key)
    if got is None:
        got = rebuild(read_file(req["module"]), req["filename"], req.get("globals") or {},
                      req["entry"], f"normcheck_user_{len(_REBUILT)}_package")
        _REBUILT[key] = got
    return got


def rebuild(text: str, filename: str, globals_: dict, entry: str, package: str):
    """The namespace in which ``entry`` and the kernels it calls are defined from ``text``
    alone, its globals made from their descriptions; (namespace, the entry's autotune config
    or None, the stand-in modules named)."""
    import linecache

    import triton

    from normcheck.backends.triton import stubs

    ex = _executor()
    if ex is not None:
        ex.install()
    if not isinstance(globals_, dict):
        raise Refused("the file's description is not a map")
    lines = text.splitlines(keepends=True)
    linecache.cache[filename] = (len(text), None, lines, filename)
    stubs.stub_modules([package], package)
    ns = {"__name__": f"{package}.kernels", "__builtins__": dict(SAFE_BUILTINS),
          "__package__": package}
    stood, defs_at = [], {}
    for name, desc in globals_.items():
        if not isinstance(name, str) or name.startswith("__") or not name.isidentifier():
            continue
        if isinstance(desc, list) and desc and desc[0] == "def":
            if len(desc) != 3 or not isinstance(desc[1], int):
                raise Refused(f"the global {name}: a description that is not one")
            defs_at[name] = desc
            continue
        ns[name] = _materialise(name, desc, stood)
    tree = ast.parse(text, filename)
    defs = _defs(tree)
    for name, node in _not_run(defs, defs_at, globals_).items():
        # a kernel under a condition false here (``if _TRITON_AVAILABLE:``, a flag set from the
        # GPU a project finds): a GPU machine defines it, so it is rebuilt from its text alike
        defs_at[name] = ["def", node.lineno, None]
        _as_triton(node, ns)
    if entry not in defs_at:
        kind = globals_.get(entry)
        what = "not defined by the file" if kind is None else \
            f"a {kind[1] if isinstance(kind, list) and len(kind) > 1 else kind}, not a " \
            "@triton.jit function of the file"
        raise KeyError(f"{entry}: {what}")
    nodes, todo, done = {}, [entry], set()
    while todo:
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        line = defs_at[name][1]
        node = defs.get(line)
        if node is None:
            raise Refused(f"{filename}:{line}: {name} is made there, not by a def of its own")
        nodes[name] = node
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in defs_at and n.id not in done:
                todo.append(n.id)
    # every name a def reads that is a kernel is defined first (as a value it may be read
    # by another def's default): place holders, replaced below
    config = None
    made = {}
    for name, node in nodes.items():
        for dec in node.decorator_list:
            kind = _decorator_kind(dec, ns)
            if kind == "heuristics":
                verify(dec, ns, filename, lambdas=True)
        bare = ast.FunctionDef(name=node.name, args=node.args, body=node.body,
                               decorator_list=[], returns=node.returns,
                               type_comment=None, **_type_params(node))
        ast.copy_location(bare, node)
        verify(bare, {**ns, **{k: _KERNEL for k in nodes}}, filename)
        made[name] = (node, bare)
    for name, (node, bare) in made.items():
        mod = ast.Module(body=[bare], type_ignores=[])
        code = compile(mod, filename, "exec")
        scratch = {}
        exec(code, ns, scratch)  # noqa: S102 -- a def checked by verify(), nothing else
        obj = triton.jit(scratch[node.name])
        for dec in reversed(node.decorator_list):
            kind = _decorator_kind(dec, ns)
            if kind == "heuristics" and isinstance(dec, ast.Call):
                expr = ast.Expression(body=dec)
                ast.copy_location(expr, dec)
                wrap = eval(compile(expr, filename, "eval"), ns)  # noqa: S307 -- verified
                obj = wrap(obj)
        ns[name] = obj
        if name == entry:
            first = defs_at[name][2]
            if isinstance(first, dict):
                config = {str(k): _value(v, f"the config of {name}") for k, v in first.items()
                          if isinstance(k, str) and not k.startswith("_")}
    return ns, config, stood


_KERNEL = object()


def _jit_root(node) -> str | None:
    """The name a def's ``@X.jit`` / ``@X.jit(...)`` decorator starts from, or None."""
    for dec in node.decorator_list:
        root, parts = _chain(dec.func if isinstance(dec, ast.Call) else dec)
        if root is not None and parts == ["jit"]:
            return root.id
    return None


def _not_run(defs: dict, defs_at: dict, globals_: dict) -> dict:
    """{name: FunctionDef} of the ``@X.jit`` defs at the file's top level (in an if, a try) that
    its top level did not define as it ran here -- a condition false on this machine, or Triton
    names re-exported by a project module stood in for -- and that left no other global by
    that name: a GPU machine defines them."""
    out = {}
    for node in defs.values():
        name = node.name
        if name in defs_at or name in out or _jit_root(node) is None:
            continue
        desc = globals_.get(name)
        if desc is None or (isinstance(desc, list) and desc and desc[0] == "missing"):
            out[name] = node
    return out


def _as_triton(node, ns: dict):
    """The Triton names a kernel built from text alone uses, where the file's run left a
    stand-in (a project module re-exporting ``triton`` and ``tl``, stood in for here) or
    nothing (an import under the false condition): ``X`` of ``@X.jit`` is ``triton``; a name
    whose attributes are all Triton language's (``tl.program_id``, ``tl.constexpr``) is
    ``triton.language``.  verify() still holds the kernel to the language."""
    import triton
    import triton.language as tl

    from normcheck.backends.triton import stubs

    def stood_in(name):
        v = ns.get(name)
        return name not in ns or isinstance(v, stubs.Missing) or \
            getattr(v, "_normcheck_stub", False)

    root = _jit_root(node)
    if root is not None and stood_in(root):
        ns[root] = triton
    used = {}
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            used.setdefault(n.value.id, set()).add(n.attr)
    for name, attrs in used.items():
        if name != root and stood_in(name) and all(hasattr(tl, a) for a in attrs):
            ns[name] = tl


def _type_params(node) -> dict:
    return {"type_params": node.type_params} if hasattr(node, "type_params") else {}
