"""Compare a kernel's answers with the oracle's reference: ULP errors, distances, classes, summaries.

Per element (docs/DESIGN.md, "ULP error and outcome classes"):

* ``ulp``     |y - t| / ulp(t), fractional, against the exact t (≤ 0.5 when correctly rounded);
* ``ordinal`` steps between y and the correctly rounded value (0 = correctly rounded);
* ``bits``    Herbie's bits of error, log2(1 + ordinal);
* ``scaled``  |y - t| in ulps of max(|γ·x̂|, |β|), fair where β nearly cancels γ·x̂;
* ``cls``     the outcome class (:data:`CLASSES`): non-finite outcomes are classes, not numbers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from normcheck.oracle import Reference

__all__ = ["CLASSES", "FAILURE_CLASSES", "Comparison", "Summary", "compare", "summarize", "ulp_stats",
           "StreamStats", "failure_message", "to_json", "short", "times_bound", "percent",
           "bias_text"]

#: Outcome classes, by code.
CLASSES = (
    "finite",              # finite exact value answered by a finite value (measured in ULP)
    "overflow_ok",         # exact value past the range answered by the right ±inf
    "nan_propagated",      # NaN in (exact NaN), NaN out
    "spurious_pos_inf",    # finite exact value answered by +inf
    "spurious_neg_inf",    # finite exact value answered by -inf
    "spurious_nan",        # finite exact value answered by NaN
    "missed_overflow",     # exact value past the range answered by a finite value
    "wrong_overflow",      # exact value past the range answered by NaN or the other inf
    "nan_not_propagated",  # NaN in, a number out
)
_CODE = {c: i for i, c in enumerate(CLASSES)}
#: The classes that are failures whatever the ULP budget.
FAILURE_CLASSES = CLASSES[3:]


@dataclass
class Comparison:
    """Element-wise metrics of answers against a reference (arrays of the reference's shape)."""

    ulp: np.ndarray
    ordinal: np.ndarray
    bits: np.ndarray
    scaled: np.ndarray
    cls: np.ndarray

    def counts(self) -> dict:
        """Number of elements in each class (all classes present as keys)."""
        n = np.bincount(self.cls.ravel(), minlength=len(CLASSES))
        return {c: int(n[i]) for i, c in enumerate(CLASSES)}

    def nonfinite_failures(self) -> dict:
        c = self.counts()
        return {k: c[k] for k in FAILURE_CLASSES}


def compare(ref: Reference, actual, ordinal: bool = True) -> Comparison:
    """Element-wise comparison of ``actual`` (in any float dtype) with the reference;
    ``ordinal=False`` skips the ordinal distance and bits (None), which a judge does not need."""
    actual = np.asarray(actual)
    ulp = ref.ulp_error(actual)
    fmt = ref.fmt
    a = actual.astype(np.float64)
    r = ref.rounded.astype(np.float64)
    t = ref.exact
    a_nan, t_nan = np.isnan(a), np.isnan(t)
    r_fin = np.isfinite(r)
    cls = np.full(a.shape, _CODE["finite"], np.int8)
    cls[~r_fin & ~t_nan & (a == r)] = _CODE["overflow_ok"]
    cls[~r_fin & ~t_nan & np.isfinite(a)] = _CODE["missed_overflow"]
    cls[~r_fin & ~t_nan & ~np.isfinite(a) & (a != r)] = _CODE["wrong_overflow"]
    cls[r_fin & (a == np.inf)] = _CODE["spurious_pos_inf"]
    cls[r_fin & (a == -np.inf)] = _CODE["spurious_neg_inf"]
    cls[r_fin & a_nan] = _CODE["spurious_nan"]
    cls[t_nan & a_nan] = _CODE["nan_propagated"]
    cls[t_nan & ~a_nan] = _CODE["nan_not_propagated"]
    scaled = ref.ulp_error_scaled(actual, plain=ulp)
    if not ordinal:
        return Comparison(ulp=ulp, ordinal=None, bits=None, scaled=scaled, cls=cls)
    both = ~a_nan & ~np.isnan(r)
    # ordinals of the answer as stored (values of another dtype are rounded to the format first)
    stored = actual if actual.dtype == fmt.dtype else np.where(both, a, 0.0)
    with np.errstate(invalid="ignore"):
        dist = np.where(both, np.abs(fmt.ordinal(stored) - fmt.ordinal(ref.rounded))
                        .astype(np.float64), np.inf)
    dist = np.where(t_nan & a_nan, 0.0, dist)
    bits = np.log2(1.0 + dist)
    return Comparison(ulp=ulp, ordinal=dist, bits=bits, scaled=scaled, cls=cls)


@dataclass
class Summary:
    """Summary of a comparison: over all elements, an infinite ULP (a non-finite failure) makes
    max (and p99/mean where it weighs in) infinite; ``worst`` is (row, col) of the largest."""

    count: int
    max_ulp: float
    p99_ulp: float
    mean_ulp: float
    max_ordinal: float
    max_bits: float
    max_scaled: float
    worst: tuple
    classes: dict

    @property
    def nonfinite(self) -> dict:
        return {k: self.classes[k] for k in FAILURE_CLASSES}

    @property
    def failures(self) -> int:
        return sum(self.nonfinite.values())

    def as_dict(self) -> dict:
        return {"count": self.count, "max_ulp": self.max_ulp, "p99_ulp": self.p99_ulp,
                "mean_ulp": self.mean_ulp, "max_ordinal": self.max_ordinal,
                "max_bits": self.max_bits, "max_scaled_ulp": self.max_scaled,
                "worst": list(self.worst), "nonfinite": self.nonfinite,
                "classes": self.classes}


def ulp_stats(ulp) -> tuple[float, float, float]:
    """(max, p99, mean) of ULP errors; an infinite one (a non-finite failure) makes the max, and
    the mean, infinite."""
    ulp = np.asarray(ulp, dtype=np.float64).ravel()
    if ulp.size == 0:
        return 0.0, 0.0, 0.0
    ulp = np.where(np.isnan(ulp), np.inf, ulp)
    with np.errstate(invalid="ignore", over="ignore"):
        mean = float(np.mean(ulp)) if np.all(np.isfinite(ulp)) else float("inf")
    return float(ulp.max()), float(np.percentile(ulp, 99, method="higher")), mean


class StreamStats:
    """max, p99 and mean of ULP errors over any number of batches in constant memory: the max and
    the mean exactly, p99 from a histogram of 16 bins per octave (from 2^-24 to 2^64 ulp, plus
    zero and infinity) as the upper edge of the bin holding it, so at most 6.25 % above the true
    p99.  The edges are 2^e·(1 + k/16), the doubles whose top 16 bits are consecutive, so a
    value's bin is read from its bits (here and in normcheck/measure.cpp alike)."""

    BINS_PER_OCTAVE = 16
    LOW, HIGH = -24, 64
    #: the top 16 bits of 2^LOW: edges[j] has top bits BASE + j
    BASE = (1023 + LOW) << 4

    def __init__(self):
        n = (self.HIGH - self.LOW) * self.BINS_PER_OCTAVE
        self.edges = ((self.BASE + np.arange(n + 1, dtype=np.int64)) << 48).view(np.float64)
        self.counts = np.zeros(n + 3, np.int64)  # [0], (edges...), above the top, inf
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    @classmethod
    def bins(cls, fin: np.ndarray, n_edges: int) -> np.ndarray:
        """The bin of each finite u >= 0: 0 at or below edges[0], k where edges[k-1] < u <=
        edges[k], n_edges above the top (numpy's searchsorted(left), from the bits)."""
        b = np.ascontiguousarray(fin, np.float64).view(np.int64)
        c = ((b - (b != 0)) >> 48) - cls.BASE + 1
        return np.clip(c, 0, n_edges)

    def add(self, ulp):
        u = np.asarray(ulp, np.float64).ravel()
        if not u.size:
            return
        u = np.where(np.isnan(u), np.inf, u)
        inf = np.isinf(u)
        fin = u[~inf]
        self.count += u.size
        self.max = max(self.max, float(u.max()))
        self.total = math.inf if inf.any() else self.total + float(fin.sum())
        self.counts[-1] += int(inf.sum())
        L = len(self.edges)
        self.counts[: L + 1] += np.bincount(self.bins(fin, L), minlength=L + 1)[: L + 1]

    def stats(self) -> tuple[float, float, float]:
        """(max, p99, mean), as :func:`ulp_stats` gives them (p99 as described above)."""
        if not self.count:
            return 0.0, 0.0, 0.0
        k = int(np.searchsorted(np.cumsum(self.counts), math.ceil(0.99 * self.count)))
        if k == 0:
            p99 = float(self.edges[0])
        elif k <= len(self.edges) - 1:
            p99 = float(self.edges[k])
        elif k == len(self.edges):
            p99 = self.max  # above the top edge: the max bounds it
        else:
            p99 = math.inf
        return self.max, min(p99, self.max), self.total / self.count


def summarize(c: Comparison) -> Summary:
    ulp = c.ulp.ravel()
    n = ulp.size
    if n == 0:
        return Summary(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, (), c.counts())
    k = int(np.argmax(ulp))
    with np.errstate(invalid="ignore", over="ignore"):
        mean = float(np.mean(ulp)) if np.all(np.isfinite(ulp)) else float("inf")
    return Summary(
        count=n,
        max_ulp=float(ulp[k]),
        p99_ulp=float(np.percentile(ulp, 99, method="higher")),
        mean_ulp=mean,
        max_ordinal=float(np.max(c.ordinal)),
        max_bits=float(np.max(c.bits)),
        max_scaled=float(np.max(c.scaled)),
        worst=tuple(int(i) for i in np.unravel_index(k, c.ulp.shape)),
        classes=c.counts(),
    )


def failure_message(title: str, kernel: str, ref: Reference, actual, bad, x=None,
                    replay: str | None = None, limit: str = "", first: int = 5) -> str:
    """The fixed layout of a failure: what failed, on which kernel, mismatches n/N, the worst
    element (row, col, input, kernel value, exact value, ULP), the first few, how to replay."""
    actual = np.asarray(actual)
    bad = np.asarray(bad, bool)
    c = compare(ref, actual)
    n, N = int(bad.sum()), bad.size
    score = np.where(bad, np.nan_to_num(c.ulp, nan=np.inf, posinf=np.inf), -1.0)
    i, j = np.unravel_index(int(np.argmax(score)), bad.shape)
    cls = CLASSES[int(c.cls[i, j])]

    def elem(r, k):
        inp = f"x={float(x[r, k])!r} " if x is not None else ""
        return (f"row {r}, col {k}: {inp}kernel={float(actual[r, k])!r} "
                f"exact={float(ref.exact[r, k])!r} ({c.ulp[r, k]:.4g} ULP"
                f"{'' if cls == 'finite' or (r, k) != (i, j) else ', ' + cls})")

    lines = [f"normcheck: {title}",
             f"  kernel     {kernel}",
             f"  mismatches {n}/{N} elements{(' ' + limit) if limit else ''}",
             f"  worst      {elem(i, j)}"]
    rest = [tuple(p) for p in np.argwhere(bad)[:first]]
    for r, k in rest:
        lines.append(f"  first      {elem(r, k)}")
    if replay:
        lines.append(f"  replay     {replay}")
    return "\n".join(lines)


def short(v) -> str:
    """A figure for a table: 3 significant digits, inf/nan spelled, None as "-", ints whole."""
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def times_bound(v) -> str:
    """A ratio to the sound bound (the fail rule: above 1 fails) for a table: 3 significant
    digits, more where 3 would put it on the wrong side of 1 or on 1 itself -- a 1.004 that
    fails never reads "1" -- and a value exactly 1 as 1."""
    if v is None or not isinstance(v, (int, float, np.floating)) or not math.isfinite(v):
        return short(v if not isinstance(v, np.floating) else float(v))
    v = float(v)
    for d in range(3, 10):
        s = f"{v:.{d}g}"
        if v == 1 or (float(s) != 1 and (float(s) > 1) == (v > 1)):
            return s
    return repr(v)


def percent(share) -> str:
    """A share (0..1) as a percentage: "100%", "12.3%", "0.04%", "0%" -- never 1e+02%."""
    if share is None:
        return "-"
    p = 100 * float(share)
    if p == 0 or p >= 100:
        return f"{p:.0f}%"
    if p >= 1:  # never "100%" for a share below one
        s = f"{p:.3g}"
        return f"{s if float(s) < 100 else f'{p:.6g}'}%"
    return f"{p:.2g}%" if p >= 0.001 else "<0.001%"


def bias_text(b) -> str:
    """The mean signed error toward zero (measure.Bias, in ulps: (exact - kernel)·sign(exact)),
    its sign said in words -- positive: the kernel's values lie nearer zero than the exact ones
    on average (truncation's sign); negative: farther from zero -- with 3 significant digits."""
    if b is None:
        return "-"
    b = float(b)
    if not math.isfinite(b):
        return f"bias {short(b)}"
    return f"bias {abs(b):.3g} ulp {'toward' if b > 0 else 'away from'} 0" if b else "bias 0"


def to_json(obj) -> str:
    """Strict JSON: an infinite value is the string "inf" (NaN "nan"), never a bare literal."""
    def fix(o):
        if isinstance(o, float) or isinstance(o, np.floating):
            o = float(o)
            if math.isinf(o):
                return "inf" if o > 0 else "-inf"
            if math.isnan(o):
                return "nan"
            return o
        if isinstance(o, (np.integer,)):
            return int(o)
        if isinstance(o, dict):
            return {str(k): fix(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [fix(v) for v in o]
        if isinstance(o, Path):
            return str(o)
        return o

    return json.dumps(fix(obj), allow_nan=False, indent=1)
