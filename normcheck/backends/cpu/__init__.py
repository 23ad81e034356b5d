"""The cpu backend: CUDA C compiled by g++ against a SIMT shim and run on the CPU.

The flow, a module a step:

* :mod:`~normcheck.backends.cpu.backend` -- the builder (preprocess, translate, compile, cache)
  and the kernel object, which sends launches to a worker process;
* :mod:`~normcheck.backends.cpu.translate` -- the source rewrites (``__shared__``, host
  launches, inline PTX through :mod:`~normcheck.backends.cpu.ptx`, the PTX table);
* ``shim/`` -- the headers the translated source is compiled against (SIMT runtime, math API,
  CUB, cooperative groups, the worker's sandbox library);
* :mod:`~normcheck.backends.cpu.surface` -- the CUDA device API enumerated from the headers and
  what the shim implements of it;
* :mod:`~normcheck.backends.cpu.worker` -- the process that loads compiled modules and runs
  launches, confined by :mod:`~normcheck.backends.cpu.sandbox`, talking
  :mod:`~normcheck.backends.cpu.wire` (a checked binary format, never pickles).

Importing this package loads nothing: the worker imports only its own modules.
"""

__all__ = []
