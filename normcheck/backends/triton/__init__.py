"""Triton kernels: a ``.py`` source runs on ``triton-cpu`` (normcheck's executor: Triton's
interpreter with every rounding done as the GPU does it, every access checked, in the sandboxed
worker) or ``triton-gpu`` (real Triton).  Needs the ``triton`` extra:
``pip install 'normcheck[triton]'``."""

from normcheck.backends.triton.backend import (EXTRA, TritonCpuBackend, TritonGpuBackend,
                                                is_triton, signature)

__all__ = ["TritonCpuBackend", "TritonGpuBackend", "is_triton", "signature", "EXTRA"]
