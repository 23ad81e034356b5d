"""The oracle's compiled fast path: tiers 1 and 2 of :mod:`normcheck.oracle` in C++.

``oracle/fast.cpp`` (beside this file; the error analysis is in its header) is built once with the
host C++ compiler into the build cache (``$NORMCHECK_CACHE/oracle``), loaded with ctypes, and
called with the GIL released; it splits the rows over ``NORMCHECK_ORACLE_THREADS`` threads
(default: the CPUs this process may use).  Why C++ rather than a JIT (numba): the cpu backend
already needs the compiler and has the cache, the analysis needs strict IEEE binary64 with no
contraction (``-ffp-contract=off``), which a plain C++ build guarantees, and it adds no
dependency.  The vector loops are built three times (x86-64-v4 with AVX-512, AVX2, and baseline
x86-64, chosen at load time); all give the same bits, as no sum is reassociated.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

from normcheck import formats, native
from normcheck.errors import invalid
from normcheck.formats import Format

__all__ = ["rows", "decide", "cast", "KINDS", "library", "threads", "MODES", "STATUS"]

SOURCE = Path(__file__).with_name("fast.cpp")
FLAGS = ["-std=c++17", "-O3", "-fPIC", "-shared", "-pthread", "-ffp-contract=off",
         "-fno-fast-math", "-fvisibility=hidden"]
#: How the mean correction is summed: double-double (fp32 outputs), exactly on the 2^-24 grid
#: (fp16 rows), or as a blocked float64 sum (fp16/bf16 outputs of other rows).
MODES = {"dd": 0, "grid": 1, "tree": 2}
#: Per element: settled in float64, settled in double-double, unsettled (tier 3), a row holding
#: NaN or inf (the IEEE values, set by the caller).
STATUS = {"tier1": 0, "tier2": 1, "unsettled": 2, "nonfinite": 3}
#: the element kinds the compiled code reads (float64, float32, float16 bits, bfloat16 bits)
class _ByName(dict):
    """A table of dtypes looked up by their name: bf16's type is ml_dtypes', imported only when
    a bf16 array exists (formats.np_type), so it is named, not held."""

    def __contains__(self, dtype):
        return dict.__contains__(self, np.dtype(dtype).name)

    def __getitem__(self, dtype):
        return dict.__getitem__(self, np.dtype(dtype).name)


KINDS = _ByName(float64=0, float32=1, float16=2, bfloat16=3)


class _Job(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_int), ("cols", ctypes.c_int), ("in_kind", ctypes.c_int),
                ("x", ctypes.c_void_p), ("lo", ctypes.c_void_p), ("g", ctypes.c_void_p),
                ("b", ctypes.c_void_p), ("eps", ctypes.c_double), ("center", ctypes.c_int),
                ("gemma", ctypes.c_int), ("mode", ctypes.c_int), ("out_p", ctypes.c_int),
                ("out_emin", ctypes.c_int), ("out_max", ctypes.c_double),
                ("resolution", ctypes.c_double), ("tier1_resolution", ctypes.c_double),
                ("y", ctypes.c_void_p),
                ("r", ctypes.c_void_p), ("r_kind", ctypes.c_int), ("status", ctypes.c_void_p),
                ("xhat", ctypes.c_void_p), ("stats", ctypes.c_void_p),
                ("threads", ctypes.c_int), ("unsettled", ctypes.c_longlong),
                ("nonfinite", ctypes.c_longlong)]


def _bind(lib):
    if lib.nc_job_size() != ctypes.sizeof(_Job):
        raise RuntimeError("oracle/fast.cpp and oracle/fast.py disagree on the job layout")
    lib.nc_oracle_rows.argtypes = [ctypes.POINTER(_Job)]
    lib.nc_decide.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_int,
                              ctypes.c_int, ctypes.c_double, ctypes.c_double, ctypes.c_void_p,
                              ctypes.c_void_p]
    lib.nc_decide.restype = None
    lib.nc_round.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_int,
                             ctypes.c_int, ctypes.c_int, ctypes.c_double, ctypes.c_int]
    lib.nc_round.restype = None


#: The compiled fast path (normcheck.native builds and loads it).
PART = native.Part("oracle_fast", SOURCE, tuple(FLAGS), "building the oracle's fast path",
                   "oracle", _bind)


def built() -> bool:
    """Whether the library is built (nothing is built)."""
    return native.built(PART)


def library():
    """The loaded library (built on first use)."""
    return native.load(PART)


def threads() -> int:
    env = os.environ.get("NORMCHECK_ORACLE_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n < 1:
            raise invalid("NORMCHECK_ORACLE_THREADS", env, "a positive integer",
                          "unset it to use every CPU")
        return n
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _ptr(a):
    return None if a is None else a.ctypes.data


def _f64(a):
    return None if a is None else np.ascontiguousarray(a, np.float64)


def rows(x, lo, g, b, eps: float, center: bool, gemma: bool, mode: str, out: Format, *,
         values=True, xhat=False, stats=False, resolution: float, tier1=True) -> dict:
    """Tiers 1 and 2 on the rows ``x`` (+ ``lo``: float64, the rows are x + lo exactly).

    ``g``/``b`` are float64 with non-finite entries replaced by 0 (the caller handles those
    columns).  Returns {"y": exact values (float64), "r": rounded (in ``out``'s dtype), "status":
    uint8 per element (STATUS), "unsettled": how many have status 2, "nonfinite": how many rows
    have status 3} when ``values``, "xhat" (fl(d·r)) when asked, and "stats"
    (rows x 8: mean, e_mean, var, e_var, rstd, e_rstd, nonfinite, 0) when asked.
    ``tier1=False`` settles nothing in float64: every element goes to tier 2 (for tests)."""
    x = np.ascontiguousarray(x)
    if x.dtype not in KINDS:
        x = x.astype(np.float64)
    nrows, cols = x.shape
    lo = _f64(lo)
    g = _f64(g)
    b = _f64(b)
    res = {}
    if values:
        res["y"] = np.empty((nrows, cols))
        res["r"] = np.empty((nrows, cols), out.dtype)
        res["status"] = np.empty((nrows, cols), np.uint8)
    if xhat:
        res["xhat"] = np.empty((nrows, cols))
    if stats:
        res["stats"] = np.empty((nrows, 8))
    res["unsettled"] = res["nonfinite"] = 0
    if nrows == 0:
        return res
    job = _Job(rows=nrows, cols=cols, in_kind=KINDS[x.dtype], x=x.ctypes.data, lo=_ptr(lo),
               g=_ptr(g), b=_ptr(b), eps=float(eps), center=int(center), gemma=int(gemma),
               mode=MODES[mode], out_p=out.precision, out_emin=out.emin,
               out_max=float(out.max_finite), resolution=float(resolution),
               tier1_resolution=float(resolution) if tier1 else 0.0,
               y=_ptr(res.get("y")), r=_ptr(res.get("r")), r_kind=KINDS[np.dtype(out.dtype)],
               status=_ptr(res.get("status")),
               xhat=_ptr(res.get("xhat")), stats=_ptr(res.get("stats")), threads=threads())
    library().nc_oracle_rows(ctypes.byref(job))
    res["unsettled"], res["nonfinite"] = int(job.unsettled), int(job.nonfinite)
    return res


def decide(y, e, fmt: Format, resolution: float):
    """Round y to ``fmt`` where [y-e, y+e] settles the rounded value and ulp(t), and e is below
    ``resolution`` ulp.  Returns (rounded values as float64, settled mask)."""
    y = np.ascontiguousarray(y, np.float64)
    e = np.ascontiguousarray(np.broadcast_to(e, y.shape), np.float64)
    r = np.empty_like(y)
    ok = np.empty(y.shape, np.uint8)
    library().nc_decide(y.ctypes.data, e.ctypes.data, y.size, fmt.precision, fmt.emin,
                        float(fmt.max_finite), float(resolution), r.ctypes.data, ok.ctypes.data)
    return r, ok.astype(bool)


def cast(v, fmt: Format) -> np.ndarray:
    """float64 values correctly rounded to ``fmt`` and stored in its dtype: bit for bit
    :meth:`normcheck.formats.Format.cast` (NaN included), compiled and threaded (the rows a long
    check generates: numpy's float64 -> float16 conversion and the bfloat16 rounding on the bits
    cost 4-15 ms per 2^20 values, this 1)."""
    v = np.ascontiguousarray(v, np.float64)
    if v.size < 4096 or fmt.dtype == np.dtype(np.float32):  # numpy's own is as fast
        return fmt.cast(v)
    out = np.empty(v.shape, fmt.dtype)
    library().nc_round(v.ctypes.data, v.size, out.ctypes.data, KINDS[np.dtype(fmt.dtype)],
                       fmt.precision, fmt.emin, float(fmt.max_finite), threads())
    return out
