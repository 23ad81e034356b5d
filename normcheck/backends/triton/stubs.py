"""Stand-ins for the modules a kernel file imports that are not installed where normcheck runs
(a project's own helpers: ``from liger_kernel.ops.utils import calculate_settings``, ``from
.utils import ...``): host code the kernels normally do not run.  Used by the executor (in the
sandboxed worker) and by the GPU path alike."""

from __future__ import annotations

import sys

__all__ = ["Missing", "stub_modules", "REEXPORTS"]


class Missing:
    """What a name from a module that is not installed stands for while the file is imported:
    called, it gives another (a decorator, a version test); false; iterated, empty.  Called
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
            raise ImportError(f"the kernel calls {self._name}, from a module not installed "
                              "here (stood in for while the file was imported): install it, "
                              "or copy what the kernel needs into the file")
        return Missing(f"{self._name}()")

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())

    def __getitem__(self, key):
        return Missing(f"{self._name}[{key!r}]")

    def __repr__(self):
        return f"<not installed: {self._name}>"


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
            mod.__getattr__ = _missing_attr(mod_name)
            sys.modules[mod_name] = mod
            if i > 1:
                setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], mod)
