"""Stand-ins for the modules a kernel file imports that are not installed where normcheck runs
(a project's own helpers: ``from liger_kernel.ops.utils import calculate_settings``, ``from
.utils import ...``): host code the kernels normally do not run.  Used by the executor (in the
sandboxed worker) and by the GPU path alike."""

from __future__ import annotations

import sys

__all__ = ["Missing", "stub_modules", "REEXPORTS"]


class MissingHelper(ImportError):
    """A kernel called a name of a module not installed here: nothing of the launch ran as
    written, so normcheck cannot judge it (the executor raises it as Unsupported: exit 2)."""


class Missing:
    """What a name from a module that is not installed stands for while the file is imported:
    called, it gives another (a decorator factory, a version test), but applied to a function,
    a class or a Triton kernel it gives that back (a decorator leaves it as written); false;
    iterated, empty.  Called
    while a kernel runs (``running()``: the executor says so), it fails naming itself."""

    running = staticmethod(lambda: False)

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Missing(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        if Missing.running():
            raise MissingHelper(f"the kernel calls {self._name}, from a module not installed "
                              "here (stood in for while the file was imported): install it, "
                              "or copy what the kernel needs into the file")
        if len(args) == 1 and not kwargs and _decorated(args[0]):
            # a decorator (FlagGems' @libentry(), a caching or logging wrapper): what it
            # decorates stays as written -- the kernel the file defines is the one judged
            return args[0]
        found = _libdevice_lookup(self._name, args, kwargs)
        return found if found is not None else Missing(f"{self._name}()")

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())

    def __getitem__(self, key):
        return Missing(f"{self._name}[{key!r}]")

    def __repr__(self):
        return f"<not installed: {self._name}>"

    def __mro_entries__(self, bases):
        """A base class (``class Fast(LlamaRMSNorm)``, the file's host code subclassing a
        framework's module): a class of its own name, whose instances fail as a call does."""
        name = self._name

        class Stood(_MissingBase):
            pass

        Stood.__name__ = Stood.__qualname__ = name.rsplit(".", 1)[-1]
        Stood._missing = name
        return (Stood,)


def _decorated(obj) -> bool:
    """A function, a class or a Triton kernel (what a decorator is applied to)."""
    import inspect

    return inspect.isfunction(obj) or inspect.isclass(obj) or \
        type(obj).__module__.startswith("triton.")


def _libdevice_lookup(name: str, args, kwargs):
    """A project's own libdevice lookup, called as the file is imported (xFormers'
    ``rsqrt = libdevice_find("rsqrt")``: a helper named for libdevice, given a function's name):
    Triton's libdevice function of that name, which is what the helper returns where it is
    installed; None for anything else."""
    if "libdevice" not in name.rsplit(".", 1)[-1] or kwargs or len(args) != 1 or \
            not isinstance(args[0], str):
        return None
    import triton.language.extra.libdevice as libdevice

    return getattr(libdevice, args[0], None)


class _MissingBase:
    """The base a :class:`Missing` stands for: subclassed freely, instantiated only while the
    file is imported (never while a kernel runs)."""

    _missing = "?"

    def __init__(self, *args, **kwargs):
        Missing(self._missing)()


#: Names a project re-exports from Triton through a module of its own (vLLM's ``from
#: vllm.triton_utils import tl, triton``): from a stand-in they are Triton's own.
REEXPORTS = {"triton": "triton", "tl": "triton.language", "language": "triton.language",
             "libdevice": "triton.language.extra.libdevice"}


def _missing_attr(module: str):
    def attr(name):
        if name.startswith("__"):  # __file__, __spec__ ...: absent, as on any module
            raise AttributeError(name)
        if name in REEXPORTS:
            import importlib

            return importlib.import_module(REEXPORTS[name])
        return Missing(f"{module}.{name}")

    return attr


def stub_modules(stubs, package: str):
    """Modules standing in for ``stubs`` (absolute names, or relative ones resolved against
    ``package``) in sys.modules; every attribute a :class:`Missing`."""
    import importlib.machinery
    import types

    for raw in stubs:
        level = len(raw) - len(raw.lstrip("."))
        name = raw if not level else ".".join(filter(None, [package, raw.lstrip(".")]))
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            mod_name = ".".join(parts[:i])
            if mod_name in sys.modules and not getattr(sys.modules[mod_name], "_normcheck_stub",
                                                       False):
                continue
            mod = types.ModuleType(mod_name)
            mod._normcheck_stub = True
            mod.__path__ = []
            # a spec, so that importlib.util.find_spec(name) at the file's top level answers
            # (vLLM-Omni's `_HAS_MINDIESD = find_spec("mindiesd") is not None`: a module with
            # no spec in sys.modules made it raise ValueError, and the file could not load)
            mod.__spec__ = importlib.machinery.ModuleSpec(mod_name, None, is_package=True)
            mod.__getattr__ = _missing_attr(mod_name)
            sys.modules[mod_name] = mod
            if i > 1:
                setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], mod)
