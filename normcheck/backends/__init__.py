"""Backends run a kernel from its CUDA C source on numpy arrays.

``get_backend("cpu")`` compiles with g++ against normcheck's SIMT shim and runs on the CPU;
``get_backend("cuda")`` uses PyCUDA on an NVIDIA GPU; ``get_backend("auto")`` is cuda where a
usable GPU exists, else cpu.  Every backend implements :class:`normcheck.backends.base.Backend`:
``.compile(source, entry, *, defines=None, options=None, include_dirs=())`` returns a kernel
called as ``kernel(grid, block, args, shared_mem=0)``.
"""

from __future__ import annotations

from normcheck.backends.base import Backend
from normcheck.errors import BackendUnavailable, invalid

__all__ = ["get_backend", "BACKENDS", "Backend"]

BACKENDS = ("cpu", "cuda", "auto")
_cache = {}


def get_backend(name: str = "cpu") -> Backend:
    """The backend called ``name`` ("cpu", "cuda" or "auto"); a Backend passes through."""
    if isinstance(name, Backend):
        return name
    if name not in BACKENDS:
        raise invalid("backend", name, f"one of {', '.join(BACKENDS)}",
                      "use cpu everywhere, cuda on a machine with an NVIDIA GPU and PyCUDA")
    if name == "auto":
        try:
            return get_backend("cuda")
        except BackendUnavailable:
            return get_backend("cpu")
    if name not in _cache:
        if name == "cpu":
            from normcheck.backends.cpu.backend import CpuBackend

            _cache[name] = CpuBackend()
        else:
            from normcheck.backends.cuda import CudaBackend

            _cache[name] = CudaBackend()
    return _cache[name]
