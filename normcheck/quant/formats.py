"""The formats a quantised normalisation writes -- fp8 (e4m3fn, e5m2 and their fnuz forms),
int8, fp4 e2m1, and the block scales e8m0 (MX) and ue4m3 (NVFP4) -- as the quantised check
reads them: they are registered once, with the storage formats, in :mod:`normcheck.formats`
(:class:`~normcheck.formats.QFormat`: every code point its written definition); here, their
lookup in a contract's terms and a callable's q and scales read as values.
"""

from __future__ import annotations

import numpy as np

from normcheck import formats
from normcheck.errors import invalid
from normcheck.formats import (E2M1, E4M3, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0, INT8,  # noqa: F401
                               OVERFLOW, QFORMATS, UE4M3, QFormat)

__all__ = ["QFormat", "QFORMATS", "get", "as_values", "E4M3", "E5M2", "E4M3FNUZ", "E5M2FNUZ",
           "INT8", "E2M1", "E8M0", "UE4M3", "OVERFLOW"]


def as_values(a, fmt, cols: int) -> np.ndarray:
    """A callable's q (or scales) as float64 values: floats (numpy, ml_dtypes float8/float4,
    torch tensors of any float dtype) are values; uint8 arrays are codes of ``fmt`` (fp4 packed
    two a byte); int8 arrays are int8 values."""
    if hasattr(a, "detach"):  # torch
        a = a.detach().cpu()
        if a.dtype.is_floating_point:
            a = a.float()
        a = a.numpy()
    a = np.asarray(a)
    if a.dtype == np.uint8:
        return fmt.from_storage(a, cols)
    try:
        return a.astype(np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"expected float values or uint8 codes, got {a.dtype}") from None


def get(name) -> formats.NumberFormat:
    """Every format by name, a quantised one (aliases: fp8, float8_e4m3fn, fp4, …) or a
    storage one (fp32, fp16, bf16: a contract's float scales): one lookup, one protocol
    (:func:`normcheck.formats.lookup`), refused in a contract's terms."""
    try:
        return formats.lookup(name)
    except Exception:
        raise invalid("quant.format", name, f"one of {', '.join(QFORMATS)}",
                      "e.g. e4m3 (fp8, ±448), e5m2, int8, e2m1 (fp4)") from None
