"""Classifying a quantised output: every code and every scale against the contract's exact
result (the domain's side; the check that runs families and says a verdict is
normcheck.check.quantised).

Per element (normcheck.quant.oracle for the sets):

========= =======================================================================================
exact     the contract's exact value
order     another value a sound kernel of the contract may write: the exact pre-quantisation
          value lies within the sound bound of a float pipeline from a rounding boundary (of T,
          of float32, of the quantiser, or of the scale through amax) -- allowed
contract  any other value: no sound kernel of the contract writes it (a flip away from a tie,
          NaN or inf where the contract saturates, a wrong scale) -- fails
unwritten the element still holds the poison it started as (or, for formats without a NaN code,
          it holds both poisons in two runs) -- fails
========= =======================================================================================

Scales (and amax) are judged the same way; q of a dynamic contract is judged with the kernel's
own scale where that scale is sound (else with the sound range of scales), so one flip of a
row's amax does not count as a contract flip of every element of the row.  Values compare as
values: +0 and -0 are one value.  A fused kernel's h is checked as in the unquantised check
(correctly rounded).  No warn: a quantised output is within its contract or not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from normcheck.errors import invalid
from normcheck.quant.contract import Contract
from normcheck.quant.oracle import QReference

__all__ = ["QCounts", "QMeasured", "classify", "CLASSES", "ScaleShape",
           "scale_layout", "EXACT", "ORDER", "CONTRACT", "UNWRITTEN"]

CLASSES = ("exact", "order", "contract", "unwritten")
EXACT, ORDER, CONTRACT, UNWRITTEN = range(4)


@dataclass
class QCounts:
    """Counts of one kind of output (q, scales or amax) by class, and what the q were."""

    n: int = 0
    exact: int = 0
    order: int = 0
    contract: int = 0
    unwritten: int = 0
    nan: int = 0
    inf: int = 0
    saturated: int = 0

    def add(self, o: "QCounts") -> "QCounts":
        for k in asdict(self):
            setattr(self, k, getattr(self, k) + getattr(o, k))
        return self

    @property
    def order_share(self) -> float:
        return self.order / self.n if self.n else 0.0

    @property
    def contract_share(self) -> float:
        return self.contract / self.n if self.n else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "order_share": self.order_share,
                "contract_share": self.contract_share}


def _counts(cls, values=None, fmt=None) -> QCounts:
    c = QCounts(int(cls.size), int((cls == EXACT).sum()), int((cls == ORDER).sum()),
                int((cls == CONTRACT).sum()), int((cls == UNWRITTEN).sum()))
    if values is not None:
        c.nan = int(np.isnan(values).sum())
        c.inf = int(np.isinf(values).sum())
        if fmt is not None:
            c.saturated = int((np.abs(values) == fmt.max_finite).sum())
    return c


@dataclass
class QMeasured:
    """One batch, classified."""

    ref: QReference
    q: np.ndarray            # the kernel's values [rows, cols]
    cls: np.ndarray          # CLASSES index per element
    scales: np.ndarray | None
    scale_cls: np.ndarray | None
    amax: np.ndarray | None
    amax_cls: np.ndarray | None
    counts: QCounts
    scale_counts: QCounts
    amax_counts: QCounts


def _classify(kernel, exact, lo, hi, nan_ok, unwritten=None):
    with np.errstate(invalid="ignore"):
        same = (kernel == exact) | (np.isnan(kernel) & np.isnan(exact))
        within = ((kernel >= lo) & (kernel <= hi)) | (np.isnan(kernel) & nan_ok)
    cls = np.where(same, EXACT, np.where(within, ORDER, CONTRACT)).astype(np.int8)
    if unwritten is not None:
        cls[unwritten] = UNWRITTEN
    return cls


class ScaleShape(Exception):
    """A kernel's scales that do not have the contract's shape."""

    def __init__(self, got, want):
        super().__init__(f"{got} scales where the contract has {want}")
        self.got, self.want = got, want


def scale_layout(c: Contract, s: np.ndarray, rows: int) -> np.ndarray:
    """Kernel scales as [rows, groups]."""
    s = np.asarray(s, np.float64)
    if c.granularity == "per_token":
        if s.size != rows:
            raise ScaleShape((s.size // max(rows, 1), s.size % max(rows, 1)), (rows, 1))
        return s.reshape(rows, 1)
    if s.size % max(rows, 1):
        raise ScaleShape(s.shape, (rows, c.groups(1)))
    if c.scale_layout == "col_major":
        return s.reshape(-1, rows).T
    return s.reshape(rows, -1)


def classify(ref: QReference, q, scales=None, amax=None, unwritten=None,
             scales_unwritten=None) -> QMeasured:
    """Classify a kernel's values q [rows, cols] (float64 values), its scales [rows, groups]
    (values) and amax against the reference."""
    c = ref.contract
    fmt = c.qformat
    R = ref.y.shape[0]
    s_k = None
    scls = None
    if c.dynamic:
        if scales is None:
            raise invalid("scales", None, f"the kernel's {c.granularity} scales")
        if np.shape(scales) != ref.s.shape:
            raise ScaleShape(np.shape(scales), ref.s.shape)
        s_k = scales
        scls = _classify(s_k, ref.s, ref.s_lo, ref.s_hi, np.zeros(ref.s.shape, bool),
                         scales_unwritten)
    lo, hi, nan_ok = ref.q_bounds(s_kernel=s_k if s_k is not None else None)
    cls = _classify(q, ref.q, lo, hi, nan_ok, unwritten)
    acls = None
    if amax is not None:
        a_k = np.asarray(amax, np.float64).reshape(ref.A.shape if amax.size == ref.A.size
                                                   else (R, -1))
        acls = _classify(a_k, _f32(ref.A), _rd(ref.A_lo), _ru(ref.A_hi),
                         np.zeros(ref.A.shape, bool))
    return QMeasured(ref, q, cls, s_k, scls, amax, acls, _counts(cls, q, fmt),
                     _counts(scls) if scls is not None else QCounts(),
                     _counts(acls) if acls is not None else QCounts())


def _f32(a):
    return np.asarray(a, np.float64).astype(np.float32).astype(np.float64)


def _rd(a):
    from normcheck.quant.oracle import round_down32
    return round_down32(a)


def _ru(a):
    from normcheck.quant.oracle import round_up32
    return round_up32(a)


