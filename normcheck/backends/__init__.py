"""Backends run a kernel from its CUDA C source on numpy arrays.

``get_backend("cpu")`` compiles with g++ against normcheck's SIMT shim and runs on the CPU;
``get_backend("cuda")`` uses PyCUDA on an NVIDIA GPU; ``get_backend("auto")`` is cuda where a
usable GPU exists, else cpu.  Every backend implements :class:`normcheck.backends.base.Backend`:
``.compile(source, entry, *, defines=None, options=None, include_dirs=())`` returns a kernel
called as ``kernel(grid, block, args, shared_mem=0)``.
"""

from __future__ import annotations

from normcheck.errors import BackendUnavailable, InvalidArgument, invalid

__all__ = ["get_backend", "backend_class", "capabilities_of", "for_source", "BACKENDS",
           "Backend"]

BACKENDS = ("cpu", "cuda", "auto")
_cache = {}


def __getattr__(name):
    # Backend (and with it numpy and ml_dtypes) imported when asked for: a worker process
    # imports normcheck.backends.cpu.sandbox and .wire and starts in tens of milliseconds
    if name == "Backend":
        from normcheck.backends.base import Backend

        return Backend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _backend_type():
    from normcheck.backends.base import Backend

    return Backend


def backend_class(name: str) -> type:
    """The class of the backend called ``name`` ("cpu" or "cuda"), for its capabilities and
    parts without starting it (no GPU context, no worker); a Backend gives its own class."""
    if isinstance(name, _backend_type()):
        return type(name)
    if name == "cpu":
        from normcheck.backends.cpu.backend import CpuBackend

        return CpuBackend
    if name == "cuda":
        from normcheck.backends.cuda import CudaBackend

        return CudaBackend
    if name in ("triton-cpu", "triton-gpu"):
        from normcheck.backends.triton.backend import TritonCpuBackend, TritonGpuBackend

        return TritonCpuBackend if name == "triton-cpu" else TritonGpuBackend
    raise invalid("backend", name, "cpu or cuda")


def capabilities_of(name):
    """The capabilities of the backend a result names (its provenance); None for a name no
    backend has (a result file from elsewhere)."""
    try:
        return backend_class(name).capabilities
    except InvalidArgument:
        return None


def get_backend(name: str = "cpu") -> "Backend":
    """The backend called ``name`` ("cpu", "cuda" or "auto"); a Backend passes through."""
    if isinstance(name, _backend_type()):
        return name
    if name in ("triton-cpu", "triton-gpu"):
        if name not in _cache:
            _cache[name] = backend_class(name)()
        return _cache[name]
    if name not in BACKENDS:
        raise invalid("backend", name, f"one of {', '.join(BACKENDS)}",
                      "use cpu everywhere, cuda on a machine with an NVIDIA GPU and PyCUDA")
    if name == "auto":
        try:
            return get_backend("cuda")
        except BackendUnavailable:
            return get_backend("cpu")
    if name not in _cache:
        _cache[name] = backend_class(name)()
    return _cache[name]


def for_source(backend, source) -> "Backend":
    """The backend that runs ``source`` under ``backend``: a Triton file (``.py``) runs on
    triton-cpu where CUDA C runs on the cpu backend, on triton-gpu where it runs on cuda."""
    be = get_backend(backend)
    from normcheck.backends.triton.backend import is_triton

    if not is_triton(source) or be.name.startswith("triton-"):
        return be
    from normcheck.backends.triton.backend import available

    why = available()
    if why:
        raise BackendUnavailable(f"{source} is a Triton kernel and {why}",) from None
    return get_backend("triton-gpu" if be.capabilities.device_timings else "triton-cpu")
