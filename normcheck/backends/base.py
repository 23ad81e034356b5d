"""What every backend shares: kernel signatures, argument checking, launch geometry.

A compiled kernel is called as ``kernel(grid, block, args, shared_mem=0)``; ``args`` are numpy
arrays (in/out: after the call they hold what the kernel wrote) and numpy scalars (np.int32,
np.int64, np.uint32, np.float32 ...; Python ints and floats are converted to the parameter's
type)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from normcheck.errors import invalid

__all__ = ["Param", "parse_signature", "check_args", "dim3", "scalar_dtype", "ENTRY_RE"]

#: An entry: a C identifier, optionally namespaced and with template arguments.
ENTRY_RE = re.compile(r"^\s*(?:::)?[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*\s*(?:<.*>)?\s*$", re.S)

# C scalar types -> numpy dtype
_SCALARS = {
    "int": np.int32, "signed int": np.int32, "int32_t": np.int32,
    "unsigned int": np.uint32, "unsigned": np.uint32, "uint32_t": np.uint32,
    "long": np.int64, "long int": np.int64, "long long": np.int64, "long long int": np.int64,
    "int64_t": np.int64, "ssize_t": np.int64, "ptrdiff_t": np.int64,
    "long unsigned int": np.uint64, "unsigned long": np.uint64, "long long unsigned int": np.uint64,
    "unsigned long long": np.uint64, "uint64_t": np.uint64, "size_t": np.uint64,
    "short int": np.int16, "short": np.int16, "short unsigned int": np.uint16,
    "char": np.int8, "signed char": np.int8, "unsigned char": np.uint8, "bool": np.bool_,
    "float": np.float32, "double": np.float64,
    "__half": np.float16, "half": np.float16, "__nv_bfloat16": ml_dtypes.bfloat16,
}
# pointee types whose element dtype must match exactly
_ELEMENTS = {
    "float": np.float32, "double": np.float64, "__half": np.float16, "half": np.float16,
    "__nv_bfloat16": ml_dtypes.bfloat16, "nv_bfloat16": ml_dtypes.bfloat16,
    "c10::Half": np.float16, "c10::BFloat16": ml_dtypes.bfloat16,
}


@dataclass(frozen=True)
class Param:
    """One kernel parameter as the compiler sees it."""

    ctype: str          # e.g. "const __half*"
    size: int           # sizeof the parameter
    pointee: int        # sizeof *param for pointers (0 for void* and scalars)

    @property
    def is_pointer(self) -> bool:
        return self.ctype.rstrip().endswith("*")

    @property
    def base(self) -> str:
        """The type without cv-qualifiers, restrict, pointer and reference."""
        t = self.ctype.replace("*", " ").replace("&", " ")
        words = [w for w in t.split() if w not in ("const", "volatile", "__restrict", "__restrict__",
                                                   "restrict")]
        return " ".join(words)


def parse_signature(raw: str) -> list[Param]:
    """Decode the shim's signature string (records of name, size, pointee size)."""
    params = []
    for rec in raw.split("\x1e"):
        if not rec:
            continue
        name, size, pointee = rec.split("\x1f")
        m = re.search(r"\[with T = (.*?)(?:; [A-Za-z_]\w* = .*)?\]$", name)
        params.append(Param(m.group(1).strip() if m else name, int(size), int(pointee)))
    return params


def scalar_dtype(p: Param):
    return _SCALARS.get(p.base)


def dim3(value, name: str) -> tuple[int, int, int]:
    """Normalise a grid or block given as an int or a tuple of up to 3 positive ints."""
    if isinstance(value, (int, np.integer)):
        value = (int(value),)
    try:
        t = tuple(int(v) for v in value)
    except TypeError:
        raise invalid(name, value, "an int or a tuple of up to three positive ints",
                      f"e.g. {name}=(rows,) or {name}=256") from None
    if not 1 <= len(t) <= 3 or any(v < 1 for v in t):
        raise invalid(name, value, "one to three positive ints",
                      f"e.g. {name}=(rows,) or {name}=(256,)")
    return t + (1,) * (3 - len(t))


def check_args(entry: str, params: list[Param], args, names=None) -> list:
    """Check args against the kernel's parameters; returns them with Python numbers converted to
    numpy scalars of the parameter types.  Raises InvalidArgument naming the parameter."""
    args = list(args)
    if len(args) != len(params):
        sig = ", ".join(p.ctype for p in params)
        raise invalid("args", f"<{len(args)} arguments>",
                      f"{len(params)} arguments for {entry}({sig})",
                      "pass one value per kernel parameter, in order")
    out = []
    for i, (a, p) in enumerate(zip(args, params)):
        label = f"args[{i}]" + (f" ({names[i]})" if names and i < len(names) else "")
        if p.is_pointer:
            if not isinstance(a, np.ndarray):
                raise invalid(label, a, f"a numpy array for parameter `{p.ctype}`",
                              "pass the buffer as a numpy array")
            want = _ELEMENTS.get(p.base)
            if want is not None and a.dtype != np.dtype(want):
                raise invalid(f"{label}.dtype", str(a.dtype),
                              f"{np.dtype(want).name} for parameter `{p.ctype}`",
                              f"convert with .astype({np.dtype(want).name})")
            if want is None and p.pointee and p.base in _SCALARS and \
                    a.dtype.itemsize != p.pointee:
                raise invalid(f"{label}.dtype", str(a.dtype),
                              f"{p.pointee}-byte elements for parameter `{p.ctype}`",
                              "pass an array of the parameter's element type")
            if not a.flags.c_contiguous:
                raise invalid(f"{label}", a, "a C-contiguous array",
                              "use np.ascontiguousarray(...)")
            out.append(a)
        else:
            dt = scalar_dtype(p)
            if dt is None:
                if isinstance(a, np.ndarray) and a.nbytes == p.size:
                    out.append(a)  # a struct passed by value, as raw bytes
                    continue
                raise invalid(label, a, f"a value of `{p.ctype}` ({p.size} bytes)",
                              "pass structs by value as a numpy array of exactly that many bytes")
            if isinstance(a, np.generic):
                if a.dtype != np.dtype(dt):
                    raise invalid(label, a, f"np.{np.dtype(dt).name} for parameter `{p.ctype}`",
                                  f"wrap it as np.{np.dtype(dt).name}(...)")
                out.append(a)
            elif isinstance(a, (bool, int, float)) and not isinstance(a, np.ndarray):
                out.append(np.array(a).astype(dt)[()])
            else:
                raise invalid(label, a, f"a scalar for parameter `{p.ctype}`",
                              f"pass np.{np.dtype(dt).name}(...)")
    return out
