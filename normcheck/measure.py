"""The measurement: a kernel's answers against the oracle's exact values, element by element and
reduced -- one piece of code for the check (forward and backward), the report, the audit and
the property suite.

:func:`measure` gives a :class:`Measurement`: per element (each only when asked) the ULP error,
the outcome class (normcheck.metrics.CLASSES), the scaled error (ulps of max(|γx̂|, |β|)) and the
ratio to the sound limit (normcheck.bounds.sound_limit); and the reductions of the batch -- max
with its position, mean, a histogram for p99 (normcheck.metrics.StreamStats's bins), the class
counts, the unwritten (poisoned) elements and those beyond the limit.  It runs compiled
(``measure.cpp`` beside this file: one pass, threaded over contiguous ranges), the numpy version
below is the fallback (``NORMCHECK_MEASURE=numpy``) and the tests hold the two equal element for
element (the mean up to its summation order).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

from normcheck import formats
from normcheck.measure_lib import KINDS, Job, SignedJob, library, pointer, sound_bound, threads
from normcheck.metrics import CLASSES, StreamStats

__all__ = ["Measurement", "measure", "library", "ELEMENTS", "merge", "accumulate",
           "sound_bound", "Rows", "mismatch", "signed_rows", "Bias"]

#: The per-element arrays a measurement can keep.
ELEMENTS = ("ulp", "cls", "scaled", "ratio")
_EDGES = StreamStats().edges


@dataclass
class Measurement:
    """One batch, measured (module docstring).  Positions are flat indices; ``hist`` counts on
    StreamStats's bins, so measurements merge (:func:`merge`) into exact max/mean and a p99
    within 6.25 %."""

    n: int
    max_ulp: float
    argmax_ulp: int
    max_scaled: float
    argmax_scaled: int
    max_ratio: float
    argmax_ratio: int
    sum_ulp: float
    inf_ulp: int
    hist: np.ndarray
    classes: dict
    unwritten: int
    over: int
    ulp: np.ndarray | None = field(default=None, repr=False)
    cls: np.ndarray | None = field(default=None, repr=False)
    scaled: np.ndarray | None = field(default=None, repr=False)
    ratio: np.ndarray | None = field(default=None, repr=False)
    #: the largest ordinal distance (values apart in the format) where the kernel's values are
    #: stored in the output format itself, else None; inf for a NaN against a number
    max_ordinal: float | None = None
    #: rows whose sound bound is inf somewhere (no float kernel can promise anything there);
    #: None without a bound
    unbounded_rows: int | None = None
    #: per row, the sum of the signed error toward zero in ulps over its finite written
    #: elements, and their count (:func:`signed_rows`); None for a 1-D batch
    row_signed: np.ndarray | None = field(default=None, repr=False)
    row_count: np.ndarray | None = field(default=None, repr=False)

    def bias(self) -> "Bias":
        """The rounding bias of this batch (:class:`Bias`)."""
        b = Bias()
        if self.row_signed is not None:
            b.add(self.row_signed, self.row_count)
        return b

    @property
    def max_bits(self) -> float | None:
        """log2(1 + max_ordinal): how many low bits of the answer are wrong."""
        return None if self.max_ordinal is None else float(np.log2(1.0 + self.max_ordinal))

    @property
    def mean_ulp(self) -> float:
        if not self.n:
            return 0.0
        return float("inf") if self.inf_ulp else self.sum_ulp / self.n

    def stream(self) -> StreamStats:
        """The ULP statistics as a StreamStats (to merge over batches)."""
        s = StreamStats()
        s.counts = self.hist.copy()
        s.count = self.n
        s.total = float("inf") if self.inf_ulp else self.sum_ulp
        s.max = max(self.max_ulp, 0.0)
        return s

    def p99(self) -> float:
        return self.stream().stats()[1]


@dataclass
class Bias:
    """The mean signed error toward zero, in ulps, over many rows, and its standard error from
    the spread of the row means (a row's elements share its statistics' error, so rows, not
    elements, are the independent draws): round to nearest gives a mean near 0, a truncating
    or round-toward-zero store about +0.5.  Merge batches with :meth:`add`."""

    total: float = 0.0     # Σ signed error
    n: int = 0             # elements
    rows: int = 0          # rows with at least one element
    sum_rm: float = 0.0    # Σ row means
    sum_rm2: float = 0.0   # Σ row means²

    def add(self, row_sum, row_count):
        row_sum = np.asarray(row_sum, np.float64)
        row_count = np.asarray(row_count, np.int64)
        ok = row_count > 0
        rm = row_sum[ok] / row_count[ok]
        self.total += float(row_sum[ok].sum())
        self.n += int(row_count[ok].sum())
        self.rows += int(ok.sum())
        self.sum_rm += float(rm.sum())
        self.sum_rm2 += float((rm * rm).sum())
        return self

    def merge(self, other: "Bias") -> "Bias":
        self.total += other.total
        self.n += other.n
        self.rows += other.rows
        self.sum_rm += other.sum_rm
        self.sum_rm2 += other.sum_rm2
        return self

    @property
    def mean(self) -> float:
        """Mean signed error toward zero per element (ulps)."""
        return self.total / self.n if self.n else 0.0

    @property
    def stderr(self) -> float:
        """The standard error of the mean of the row means (inf below two rows)."""
        if self.rows < 2:
            return float("inf")
        m = self.sum_rm / self.rows
        var = max(self.sum_rm2 / self.rows - m * m, 0.0) * self.rows / (self.rows - 1)
        return float(np.sqrt(var / self.rows))

    def as_dict(self) -> dict:
        return {"mean_signed_ulp": self.mean, "stderr_ulp": self.stderr, "elements": self.n,
                "rows": self.rows}


def signed_rows(ref, actual, poison=None):
    """(sum, count) per row of the signed error toward zero in ulps (measure.cpp's
    nc_signed_rows: (t - a)·sign(t)/ulp(t) over finite t and a, the poison skipped; numpy's
    the fallback, the tests hold the two equal)."""
    fmt = ref.fmt
    t = np.asarray(ref.exact, np.float64)
    a = np.asarray(actual)
    R, D = t.shape
    lib = library()
    if lib is None:
        return _signed_rows_numpy(fmt, t, a, poison)
    tf = np.ascontiguousarray(t).reshape(-1)
    af = _flat(a)
    out_s = np.empty(R, np.float64)
    out_c = np.empty(R, np.int64)
    job = SignedJob(rows=R, cols=D, t=tf.ctypes.data, a=af.ctypes.data, a_kind=KINDS[af.dtype],
                    p=fmt.precision, emin=fmt.emin, emax=fmt.emax,
                    check_poison=int(poison is not None),
                    poison=0 if poison is None else int(poison), sum=out_s.ctypes.data,
                    count=out_c.ctypes.data, threads=threads())
    lib.nc_signed_rows(ctypes.byref(job))
    return out_s, out_c


def _signed_rows_numpy(fmt, t, a, poison):
    with np.errstate(invalid="ignore", over="ignore"):
        af = a.astype(np.float64)
        ok = np.isfinite(t) & np.isfinite(af)
        if poison is not None:
            ok &= np.ascontiguousarray(a).view(formats.of_dtype(a.dtype).uint) != poison
        d = (t - af) / fmt.ulp_array(t)
        s = np.where(t > 0, d, np.where(t < 0, -d, -np.abs(d)))
        s = np.where(ok, s, 0.0)
    return s.sum(axis=1), ok.sum(axis=1).astype(np.int64)


def accumulate(stream: StreamStats, m: Measurement) -> StreamStats:
    """Add a measurement's ULP statistics to a running StreamStats."""
    stream.counts += m.hist
    stream.count += m.n
    stream.total += float("inf") if m.inf_ulp else m.sum_ulp
    stream.max = max(stream.max, m.max_ulp, 0.0)
    return stream


def merge(ms) -> StreamStats:
    """The ULP statistics of several measurements together."""
    out = StreamStats()
    for m in ms:
        accumulate(out, m)
    return out


def _flat(a, dtype=None):
    a = np.asarray(a)
    if dtype is not None and a.dtype != dtype:
        a = a.astype(dtype)
    if a.dtype not in KINDS:
        a = a.astype(np.float64)
    return np.ascontiguousarray(a).reshape(-1)


def measure(ref, actual, *, E=None, floor: float = 1.0, scale=None, poison=None,
            keep=ELEMENTS, hist=True) -> Measurement:
    """Measure ``actual`` (any float dtype, the reference's shape) against ``ref`` (a
    normcheck.oracle.Reference); ``E`` the sound bound per element (or None: no ratio), an
    array or a normcheck.bounds.SoundBound (formed row by row in the compiled pass),
    ``floor`` the limit's floor in ulps, ``scale`` per element (default the reference's
    max(|γx̂|, |β|)), ``poison`` the bits of an unwritten element (of actual's dtype), ``keep``
    the per-element arrays wanted, ``hist`` whether the histogram (p99 over batches) is
    counted (without it, take p99 from the ``ulp`` array)."""
    fmt = ref.fmt
    shape = ref.exact.shape
    a = np.asarray(actual)
    if a.shape != shape:
        from normcheck.errors import invalid

        raise invalid("actual", a, f"an array of shape {shape}",
                      "pass the kernel output for the same rows as the reference")
    beta = getattr(ref, "beta", None) if scale is None else None
    if hasattr(E, "compiled") and tuple(E.shape) != tuple(shape):
        from normcheck.errors import invalid

        raise invalid("E.shape", E.shape, f"the reference's shape {shape}",
                      "build the SoundBound from the rows of this reference")
    lib = library()
    fused = E.compiled() if lib is not None and hasattr(E, "compiled") else None
    if hasattr(E, "compiled") and fused is None:
        E = E.array()
    if lib is None:
        m = _measure_numpy(ref, a, E, floor, ref.scale if beta is not None else scale,
                           poison, keep)
        if len(shape) == 2:
            m.row_signed, m.row_count = signed_rows(ref, a, poison)
        return m
    hist_on = bool(hist)
    ordinal = a.dtype == np.asarray(ref.rounded).dtype and a.dtype != np.float64
    t = _flat(ref.exact, np.float64)
    r = _flat(ref.rounded)
    af = _flat(a)
    if af.dtype != r.dtype:  # the compiled loops take a in r's format or as float64
        af = af.astype(np.float64)
    sc = None if scale is None else _flat(np.broadcast_to(scale, shape), np.float64)
    bt = None
    if beta is not None:  # the scale max(|t - β|, |β|) per column, formed in the loop
        bt = np.ascontiguousarray(np.broadcast_to(np.asarray(beta, np.float64),
                                                  shape[-1:]), np.float64)
    Ef = None if E is None or fused is not None else _flat(np.broadcast_to(E, shape), np.float64)
    n = t.size
    out = {k: (np.empty(n, np.int8 if k == "cls" else np.float64) if k in keep else None)
           for k in ELEMENTS}
    counts = np.zeros(len(_EDGES) + 2, np.int64)
    edges = np.ascontiguousarray(_EDGES, np.float64)
    job = Job(n=n, t=t.ctypes.data, r=r.ctypes.data, r_kind=KINDS[r.dtype],
               a=af.ctypes.data, a_kind=KINDS[af.dtype],
               scale=None if sc is None else sc.ctypes.data,
               beta=None if bt is None else bt.ctypes.data, cols=shape[-1] if shape else 1,
               E=None if Ef is None else Ef.ctypes.data, p=fmt.precision, emin=fmt.emin,
               emax=fmt.emax, floor_ulp=float(floor), check_poison=int(poison is not None),
               poison=0 if poison is None else int(poison), edges=edges.ctypes.data,
               n_edges=len(edges), want_hist=int(hist_on),
               ulp=pointer(out["ulp"]), cls=pointer(out["cls"]), scaled=pointer(out["scaled"]),
               ratio=pointer(out["ratio"]), hist=counts.ctypes.data, threads=threads(),
               want_ordinal=int(ordinal))
    if fused is not None:
        bjob, _keep, h_coef, h_beta = fused
        job.bound, job.h_coef, job.h_beta = ctypes.addressof(bjob), h_coef, pointer(h_beta)
    lib.nc_measure(ctypes.byref(job))
    classes = {c: int(job.classes[i]) for i, c in enumerate(CLASSES)}
    return Measurement(
        n=n, max_ulp=float(job.max_ulp), argmax_ulp=int(job.argmax_ulp),
        max_scaled=max(float(job.max_scaled), 0.0), argmax_scaled=int(job.argmax_scaled),
        max_ratio=max(float(job.max_ratio), 0.0), argmax_ratio=int(job.argmax_ratio),
        sum_ulp=float(job.sum_ulp), inf_ulp=int(job.inf_ulp), hist=counts, classes=classes,
        unwritten=int(job.unwritten), over=int(job.over),
        max_ordinal=float(job.max_ordinal) if ordinal else None,
        unbounded_rows=(int(job.unbounded_rows) if fused is not None else
                        _unbounded(Ef, shape) if E is not None else None),
        **{k: (None if v is None else v.reshape(shape)) for k, v in out.items()},
        **(dict(zip(("row_signed", "row_count"), signed_rows(ref, a, poison)))
           if len(shape) == 2 else {}))


def _unbounded(E, shape) -> int:
    E = np.asarray(E).reshape(shape)
    return int(np.isinf(E).reshape(-1, shape[-1]).any(axis=1).sum()) if E.size else 0


def mismatch(where: str, kernel, exact, x=None, ulp=None) -> str:
    """The one layout of a mismatching element in every message normcheck prints:
    "<where>: x=… kernel=… exact=… (u ulp)" (x and the ulp when known)."""
    s = f"{where}: " + (f"x={float(x)!r} " if x is not None else "")
    s += f"kernel={float(kernel)!r} exact={float(exact)!r}"
    if ulp is not None:
        from normcheck.metrics import short

        s += f" ({short(float(ulp))} ulp)"
    return s


class Rows:
    """Rows ``lo:hi`` of a reference (fmt, exact, rounded, beta, scale), to measure a few rows
    again without the whole batch."""

    def __init__(self, ref, lo: int, hi: int):
        self.fmt = ref.fmt
        self.exact = ref.exact[lo:hi]
        self.rounded = ref.rounded[lo:hi]
        self.beta = getattr(ref, "beta", None)

    @property
    def scale(self):
        if self.beta is None:
            return np.abs(self.exact)
        return np.maximum(np.abs(self.exact - self.beta), np.abs(self.beta))


def _measure_numpy(ref, a, E, floor, scale, poison, keep) -> Measurement:
    """The same in numpy (the fallback, and the tests' second opinion)."""
    with np.errstate(invalid="ignore", over="ignore"):  # a poison NaN may signal on a cast
        return _measure_numpy_(ref, a, E, floor, scale, poison, keep)


def _measure_numpy_(ref, a, E, floor, scale, poison, keep) -> Measurement:
    from normcheck import bounds, metrics

    fmt = ref.fmt
    ordinal = a.dtype == np.asarray(ref.rounded).dtype and a.dtype != np.float64
    c = metrics.compare(ref, a, ordinal=ordinal)
    ulp, cls = c.ulp, c.cls
    t = ref.exact
    if scale is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(a.astype(np.float64) - t) / fmt.ulp_array(np.maximum(scale, np.abs(t)))
        err = np.where(ulp == 0, 0.0, err)
        scaled = np.where(np.isfinite(ulp), err, ulp)
    else:
        scaled = c.scaled
    unw = np.zeros(t.shape, bool) if poison is None else \
        (np.ascontiguousarray(a).view(fmt.uint if a.dtype == fmt.dtype else
                                      formats.of_dtype(a.dtype).uint) == poison)
    if E is not None:
        if scale is not None:
            class _R:
                pass
            rr = _R()
            rr.fmt, rr.exact, rr.scale = fmt, t, scale
        else:
            rr = ref
        limit = bounds.sound_limit(rr, E, floor)
        finite = cls == CLASSES.index("finite")
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(a.astype(np.float64) - t)
            ratio = np.where(finite & ~unw, err / limit, 0.0)
        ratio = np.nan_to_num(ratio, nan=0.0)
    else:
        ratio = np.zeros(t.shape)
    u = np.where(np.isnan(ulp), np.inf, ulp).ravel()
    inf = np.isinf(u)
    fin_s = np.where(np.isfinite(scaled), scaled, -1.0).ravel()
    st = StreamStats()
    st.add(u)
    n = u.size
    return Measurement(
        n=n, max_ulp=float(u.max()) if n else -1.0, argmax_ulp=int(np.argmax(u)) if n else -1,
        max_scaled=max(float(fin_s.max()), 0.0) if n else 0.0,
        argmax_scaled=int(np.argmax(fin_s)) if n else -1,
        max_ratio=float(ratio.max()) if n and E is not None else 0.0,
        argmax_ratio=int(np.argmax(ratio)) if n and E is not None else -1,
        sum_ulp=float(u[~inf].sum()), inf_ulp=int(inf.sum()), hist=st.counts,
        classes={k: int((cls == i).sum()) for i, k in enumerate(CLASSES)},
        unwritten=int(unw.sum()), over=int((ratio > 1).sum()),
        ulp=ulp if "ulp" in keep else None, cls=cls if "cls" in keep else None,
        scaled=scaled if "scaled" in keep else None, ratio=ratio if "ratio" in keep else None,
        max_ordinal=(float(c.ordinal.max()) if c.ordinal.size else 0.0) if ordinal else None,
        unbounded_rows=None if E is None else _unbounded(np.broadcast_to(E, t.shape), t.shape))
