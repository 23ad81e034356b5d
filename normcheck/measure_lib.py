"""The compiled measurement's library (``measure.cpp`` beside this file): built on first use,
loaded with its ctypes layouts checked against the C++'s, and the compiled sound bound.  Below
both :mod:`normcheck.measure` and :mod:`normcheck.bounds`, which call it."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

from normcheck import native
from normcheck.metrics import CLASSES
from normcheck.oracle import fast as oracle_fast
from normcheck.oracle.fast import KINDS

__all__ = ["library", "sound_bound", "bound_job", "KINDS", "Job", "BoundJob", "SignedJob",
           "threads",
           "pointer", "SOURCE", "FLAGS"]

SOURCE = Path(__file__).with_name("measure.cpp")
# -fno-trapping-math: no FP exception traps are installed, so comparisons may become selects
# (the loops vectorise); results are IEEE's either way (nothing is reassociated or contracted)
FLAGS = ["-std=c++17", "-O3", "-fPIC", "-shared", "-pthread", "-ffp-contract=off",
         "-fno-fast-math", "-fno-trapping-math", "-fopenmp-simd", "-fvisibility=hidden"]


class Job(ctypes.Structure):
    _fields_ = [("n", ctypes.c_long), ("t", ctypes.c_void_p), ("r", ctypes.c_void_p),
                ("r_kind", ctypes.c_int), ("a", ctypes.c_void_p), ("a_kind", ctypes.c_int),
                ("scale", ctypes.c_void_p), ("beta", ctypes.c_void_p), ("cols", ctypes.c_long),
                ("E", ctypes.c_void_p), ("p", ctypes.c_int),
                ("emin", ctypes.c_int), ("emax", ctypes.c_int), ("floor_ulp", ctypes.c_double),
                ("check_poison", ctypes.c_int), ("poison", ctypes.c_uint32),
                ("edges", ctypes.c_void_p), ("n_edges", ctypes.c_int),
                ("want_hist", ctypes.c_int),
                ("ulp", ctypes.c_void_p), ("cls", ctypes.c_void_p), ("scaled", ctypes.c_void_p),
                ("ratio", ctypes.c_void_p),
                ("max_ulp", ctypes.c_double), ("max_scaled", ctypes.c_double),
                ("max_ratio", ctypes.c_double), ("sum_ulp", ctypes.c_double),
                ("argmax_ulp", ctypes.c_long), ("argmax_scaled", ctypes.c_long),
                ("argmax_ratio", ctypes.c_long), ("want_ordinal", ctypes.c_int),
                ("max_ordinal", ctypes.c_double), ("hist", ctypes.c_void_p),
                ("classes", ctypes.c_longlong * len(CLASSES)),
                ("unwritten", ctypes.c_longlong), ("over", ctypes.c_longlong),
                ("inf_ulp", ctypes.c_longlong), ("threads", ctypes.c_int),
                ("bound", ctypes.c_void_p), ("h_coef", ctypes.c_double),
                ("h_beta", ctypes.c_void_p), ("e_base", ctypes.c_long),
                ("unbounded_rows", ctypes.c_longlong)]


class SignedJob(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_long), ("cols", ctypes.c_long), ("t", ctypes.c_void_p),
                ("a", ctypes.c_void_p), ("a_kind", ctypes.c_int), ("p", ctypes.c_int),
                ("emin", ctypes.c_int), ("emax", ctypes.c_int), ("check_poison", ctypes.c_int),
                ("poison", ctypes.c_uint32), ("sum", ctypes.c_void_p),
                ("count", ctypes.c_void_p), ("threads", ctypes.c_int)]


class BoundJob(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_int), ("cols", ctypes.c_int), ("x", ctypes.c_void_p),
                ("x2", ctypes.c_void_p), ("x_kind", ctypes.c_int), ("x2_kind", ctypes.c_int),
                ("g", ctypes.c_void_p), ("b", ctypes.c_void_p), ("eps", ctypes.c_double),
                ("safety", ctypes.c_double), ("centred", ctypes.c_int), ("gemma", ctypes.c_int),
                ("E", ctypes.c_void_p), ("threads", ctypes.c_int)]


def _bind(lib):
    for size, job, what in ((lib.nc_measure_job_size, Job, "job layout"),
                            (lib.nc_bound_job_size, BoundJob, "bound's layout"),
                            (lib.nc_signed_job_size, SignedJob, "signed error's layout")):
        if size() != ctypes.sizeof(job):
            raise RuntimeError(f"measure.cpp and measure_lib.py disagree on the {what}")
    lib.nc_measure.argtypes = [ctypes.POINTER(Job)]
    lib.nc_measure.restype = None
    lib.nc_sound_bound.argtypes = [ctypes.POINTER(BoundJob)]
    lib.nc_sound_bound.restype = None
    lib.nc_signed_rows.argtypes = [ctypes.POINTER(SignedJob)]
    lib.nc_signed_rows.restype = None


#: The compiled measurement (normcheck.native builds and loads it).
PART = native.Part("measure", SOURCE, tuple(FLAGS), "building the compiled measurement",
                   "measure", _bind)


def built() -> bool:
    """Whether the compiled measurement is built (nothing is built)."""
    return native.built(PART)


def library():
    """The compiled measurement (built on first use), or None where it cannot be built."""
    if os.environ.get("NORMCHECK_MEASURE") == "numpy":
        return None
    return native.load(PART)


def pointer(a):
    return None if a is None else a.ctypes.data


def _rows_of(a):
    a = np.ascontiguousarray(a)
    return a if a.dtype in KINDS else np.ascontiguousarray(a, np.float64)


def bound_job(rows, geff, b, eps: float, centred: bool, gemma: bool, safety: float,
              rows2=None, E=None):
    """(BoundJob, the arrays it points into): the bound of the rows ``rows`` (+ ``rows2``,
    summed in float64), any float dtype the compiled code reads, kept as stored."""
    x = _rows_of(rows)
    x2 = None if rows2 is None else _rows_of(rows2)
    R, D = x.shape
    g = None if geff is None else np.ascontiguousarray(np.broadcast_to(geff, (D,)), np.float64)
    bb = None if b is None else np.ascontiguousarray(np.broadcast_to(b, (D,)), np.float64)
    job = BoundJob(rows=R, cols=D, x=x.ctypes.data, x2=pointer(x2), x_kind=KINDS[x.dtype],
                   x2_kind=0 if x2 is None else KINDS[x2.dtype], g=pointer(g), b=pointer(bb),
                   eps=float(eps), safety=float(safety), centred=int(centred),
                   gemma=int(gemma), E=pointer(E), threads=threads())
    return job, (x, x2, g, bb, E)


def sound_bound(rows, geff, b, eps: float, centred: bool, gemma: bool, safety: float,
                rows2=None):
    """E of normcheck.bounds.sound_bound (the exact reference), compiled; None where the
    compiled measurement is not available (the caller computes it in numpy)."""
    lib = library()
    if lib is None:
        return None
    R, D = np.shape(rows)
    E = np.empty((R, D))
    if R and D:
        job, keep = bound_job(rows, geff, b, eps, centred, gemma, safety, rows2, E)
        lib.nc_sound_bound(ctypes.byref(job))
    return E


def threads() -> int:
    return oracle_fast.threads()
