"""Rows built to hurt: named input families, as seeded generators.

Each family is one *recipe* written against a source of randomness (:class:`Source`): the
report feeds it a seeded numpy generator (:class:`NumpySource`), the Hypothesis strategies of
:mod:`normcheck.strategies` feed it draws, so that one piece of code says what a family is and
Hypothesis can shrink its parameters.  A recipe returns float64 values; :func:`generate` rounds
them to the storage format (so the rows are exactly what a kernel will read).  A source may draw
for one row (scalars, a vector of normals) or for a batch (columns of per-row values, a matrix
of normals): recipes combine their draws by numpy's broadcasting, so :func:`generate` makes a
whole batch with one call of the recipe.

Families (the rows built to hurt of docs/DESIGN.md):

========== =====================================================================================
gaussian    N(0, s²) with s over four decades
offset      μ + σ·N(0,1) with κ = μ/σ over decades up to what the format can hold, the
            [1000, 1001]-style rows of a few values one ulp-multiple apart, and quantised rows:
            a common offset with rare deviations of a few ulps, κ up to 2^(p+4)
constant    every element equal
fp16_large  |x| in [256, 65504]: squares overflow fp16, sums overflow fp16
tiny        subnormal scales, ε-dominated rows
outlier     a few massive activations among small values
bimodal     alternating signs, ±a + small noise
tails       widths 1, 2, 3, 31, 33, 255, 257, 4097 and random ones
extremes    near the top of the format: x² overflows fp32 even after upcasting (bf16, fp32)
special     NaN or ±inf somewhere in the row
========== =====================================================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from normcheck import formats
from normcheck.errors import invalid
from normcheck.oracle import fast as oracle_fast

__all__ = ["Source", "NumpySource", "Family", "FAMILIES", "get", "generate", "weights",
           "kappa_max", "kappa_quantised", "TAIL_COLS", "normal_pool", "widths", "BACKWARD_FAMILIES",
           "backward_rows", "ROW_PARAMS"]

TAIL_COLS = (1, 2, 3, 31, 33, 255, 257, 4097)


class Source:
    """Where a recipe's randomness comes from: each draw is one value (one row), or a column
    (rows, 1) of per-row values and normal(n) a (rows, n) matrix (a batch; see NumpySource)."""

    def normal(self, n: int) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def uniform(self, lo: float, hi: float) -> float:  # pragma: no cover
        raise NotImplementedError

    def integer(self, lo: int, hi: int) -> int:  # pragma: no cover - inclusive bounds
        raise NotImplementedError

    def choice(self, seq):  # pragma: no cover
        raise NotImplementedError


class NumpySource(Source):
    """A seeded numpy generator.  With ``pool`` (an array of standard normals), ``normal(n)``
    is a window of the pool at a random offset: rows as varied as the recipes' own parameters
    make them, at the cost of a copy instead of n fresh normals (the long check's batches, where
    drawing normals would cost more than the oracle); :func:`normal_pool` holds its draws and
    their negations, so a window's sign is random too.

    With ``rows``, every draw is for that many rows at once: ``uniform``, ``integer`` and
    ``choice`` give a column (rows, 1) of per-row values and ``normal(n)`` an array (rows, n), so
    that a recipe, written with numpy's broadcasting, makes a whole batch in a few vector
    operations (:func:`generate`); ``rows(m)`` is a source of m rows on the same generator."""

    def __init__(self, rng: np.random.Generator, pool: np.ndarray | None = None,
                 rows: int | None = None):
        self.rng = rng
        self.pool = pool
        self.n_rows = rows

    def rows(self, m: int) -> "NumpySource":
        return NumpySource(self.rng, self.pool, m)

    def normal(self, n):
        R = self.n_rows
        if self.pool is not None and n <= len(self.pool):
            if R is None:
                off = int(self.rng.integers(0, len(self.pool) - n + 1))
                return self.pool[off:off + n].copy()
            off = self.rng.integers(0, len(self.pool) - n + 1, size=R)
            return np.lib.stride_tricks.sliding_window_view(self.pool, n)[off]
        return self.rng.standard_normal(n if R is None else (R, n))

    def uniform(self, lo, hi):
        if self.n_rows is None:
            return float(self.rng.uniform(lo, hi))
        return self.rng.uniform(lo, hi, size=(self.n_rows, 1))

    def integer(self, lo, hi):
        if self.n_rows is None:
            return int(self.rng.integers(lo, hi + 1))
        return self.rng.integers(lo, hi + 1, size=(self.n_rows, 1))

    def choice(self, seq):
        if self.n_rows is None:
            return seq[int(self.rng.integers(0, len(seq)))]
        return np.asarray(seq)[self.rng.integers(0, len(seq), size=(self.n_rows, 1))]


def kappa_max(fmt: formats.Format) -> float:
    """The largest offset/spread ratio a format can hold with a few distinct values per row:
    2^(p-2) (the spread is at least 4 ulps of the offset)."""
    return 2.0 ** (fmt.precision - 2)


# ------------------------------------------------------------------------------------------------
# Recipes: (source, fmt, n) -> float64 values of one row (n of them), or of the source's rows
# (rows x n) when it draws for many: every parameter is a scalar or a column, combined by
# broadcasting, so one piece of code serves Hypothesis (one row) and a seeded batch.
# ------------------------------------------------------------------------------------------------
def _put(x, j, v, where=True):
    """x[..., j] = v where ``where``: one position j per row (a scalar or a column)."""
    shape = x.shape[:-1] + (1,)
    j = np.broadcast_to(np.asarray(j, np.intp), shape)
    old = np.take_along_axis(x, j, -1)
    np.put_along_axis(x, j, np.where(where, np.broadcast_to(v, shape), old), -1)
    return x


def _by_kind(src, kinds: dict, fmt, n):
    """One of several recipes per row, drawn: a batch runs each on its own rows."""
    kind = src.choice(list(kinds))
    if np.ndim(kind) == 0:
        return kinds[kind](src, fmt, n)
    out = np.empty((kind.shape[0], n))
    for name, recipe in kinds.items():
        sel = kind[:, 0] == name
        if sel.any():
            out[sel] = recipe(src.rows(int(sel.sum())), fmt, n)
    return out


def _gaussian(src, fmt, n):
    z = src.normal(n)
    z *= 10 ** src.uniform(-2, 2)
    return z


def kappa_quantised(fmt: formats.Format) -> float:
    """The conditioning the quantised offset rows reach: 2^(p+4) (bf16: 4096, fp16: 32768),
    beyond what rows of a few evenly spread levels can hold, as activations with a large common
    offset and a few rare deviations do."""
    return 2.0 ** (fmt.precision + 4)


def _offset_gaussian(src, fmt, n):
    # μ + σ·N(0,1), κ = μ/σ up to 2^(p-2)
    sign = src.choice([1.0, -1.0])
    logk = src.uniform(0, math.log10(kappa_max(fmt)))
    sigma = 10 ** src.uniform(-2, 1)
    z = src.normal(n)
    z += sign * 10**logk
    z *= sigma
    return z


#: Where a family's recipe depends on the rows' format beyond its precision and range: the
#: largest offset (log10) of the offset rows, the outliers' magnitude (log10 range, or a value),
#: the large rows' range.  fp8 rows (normcheck.formats.ROWS) are built to hurt fp8: offsets and
#: outliers up to its largest value (saturation at 448), large rows whose squares overflow fp16.
ROW_PARAMS = {
    "fp32": {"offset_top": 6.0, "outlier": (3.0, 6.0), "large": (256.0, 65504.0)},
    "fp16": {"offset_top": 4.0, "outlier": 3e4, "large": (256.0, 65504.0)},
    "bf16": {"offset_top": 4.0, "outlier": (3.0, 6.0), "large": (256.0, 65504.0)},
    "e4m3": {"offset_top": 2.6, "outlier": (2.0, 2.66), "large": (256.0, 448.0)},
    "e5m2": {"offset_top": 4.0, "outlier": (2.0, 4.75), "large": (256.0, 57344.0)},
}


def _offset_top(fmt):
    return ROW_PARAMS[fmt.name]["offset_top"]


def _offset_levels(src, fmt, n):
    # [1000, 1001]-style: a large value plus a few multiples of its ulp
    mu = src.choice([1.0, -1.0]) * 10 ** src.uniform(2, _offset_top(fmt))
    z = np.abs(src.normal(n))
    z *= 1.5
    np.round(z, out=z)
    np.minimum(z, 3, out=z)
    z *= fmt.ulp_array(mu)
    z += mu
    return z


_inv_cdf = np.vectorize(NormalDist().inv_cdf, otypes=[float])


def _offset_quantised(src, fmt, n):
    # a common offset with rare deviations of a few ulps: κ = |μ|/σ up to 2^(p+4)
    mu = src.choice([1.0, -1.0]) * 10 ** src.uniform(1, _offset_top(fmt))
    q = fmt.ulp_array(mu)
    top = math.log10(kappa_quantised(fmt))
    kappa = 10 ** src.uniform(3 if top > 3 else top - 1, top)  # fp8's κ is at most 2^8
    level = src.integer(1, 3)
    p = np.clip((np.abs(mu) / kappa / (level * q)) ** 2, 1.0 / n, 0.5)
    rare = src.normal(n) > _inv_cdf(1.0 - p)
    # at least one deviation per row
    rare |= ~rare.any(axis=-1, keepdims=True) & (np.arange(n) == src.integer(0, n - 1))
    return mu + (level * q) * rare


def _offset(src, fmt, n):
    return _by_kind(src, {"gaussian": _offset_gaussian, "levels": _offset_levels,
                          "quantised": _offset_quantised}, fmt, n)


def _constant(src, fmt, n):
    return 10 ** src.uniform(-3, 3) * src.choice([1.0, -1.0]) * np.ones(n)


def _log_spread(z, lo, hi):
    """exp(log lo + (log hi - log lo)·min(|z|/3, 1)) in place: |x| from lo to hi, log-spread."""
    np.abs(z, out=z)
    z *= (math.log(hi) - math.log(lo)) / 3
    np.minimum(z, math.log(hi) - math.log(lo), out=z)
    z += math.log(lo)
    return np.exp(z, out=z)


def _fp16_large(src, fmt, n):
    mag = _log_spread(src.normal(n), *ROW_PARAMS[fmt.name]["large"])
    w = src.normal(n)
    w -= src.uniform(-1, 1)
    return np.copysign(mag, w, out=mag)  # negative where the second normal is below the draw


def _tiny(src, fmt, n):
    scale = fmt.min_normal * 2.0 ** src.uniform(-(fmt.precision - 1), 4)
    z = src.normal(n)
    z *= scale
    return z


def _outlier(src, fmt, n):
    x = src.normal(n)
    top = ROW_PARAMS[fmt.name]["outlier"]
    top = 10 ** src.uniform(*top) if isinstance(top, tuple) else top
    k = src.integer(1, 4)
    for m in range(4):  # the first k of four drawn positions (a repeated one: the last)
        j = src.integer(0, n - 1)
        _put(x, j, src.choice([1.0, -1.0]) * top * src.uniform(0.5, 1.0), m < k)
    return x


def _bimodal(src, fmt, n):
    a = 10 ** src.uniform(-1, 2)
    z = src.normal(n)
    z *= 0.01 * a
    z += a
    z *= np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    return z


def _tails(src, fmt, n):
    return src.normal(n)


def _extremes(src, fmt, n):
    # x² > fp32 max from 1.85e19; in a narrower format, x² beyond the fp16 maximum
    lo = 1.9e19 if fmt.max_finite > 1.9e19 else 256.0
    mag = _log_spread(src.normal(n), lo, fmt.max_finite)
    return np.copysign(mag, src.normal(n), out=mag)


def _special(src, fmt, n):
    x = src.normal(n)
    k = src.integer(1, 3)
    for m in range(3):
        _put(x, src.integer(0, n - 1), src.choice([np.nan, np.inf, -np.inf]), m < k)
    return x


@dataclass(frozen=True)
class Family:
    """A named family of rows: ``recipe(source, fmt, n)`` gives one row's values; ``cols`` the
    widths the report sweeps for it."""

    name: str
    recipe: object
    cols: tuple
    note: str

    def row(self, src: Source, fmt, n: int) -> np.ndarray:
        f = formats.lookup(fmt, formats.ROWS)
        return f.cast(self.recipe(src, f, n))


_STD_COLS = (768, 4096)
FAMILIES = {f.name: f for f in (
    Family("gaussian", _gaussian, _STD_COLS, "N(0, s²), s over four decades"),
    Family("offset", _offset, _STD_COLS, "μ + σ·N(0,1), κ = μ/σ up to 2^(p-2); [1000,1001] rows; "
           "quantised rows with rare deviations, κ up to 2^(p+4)"),
    Family("constant", _constant, _STD_COLS, "every element equal"),
    Family("fp16_large", _fp16_large, _STD_COLS, "|x| in [256, 65504]"),
    Family("tiny", _tiny, _STD_COLS, "subnormal scales, ε-dominated"),
    Family("outlier", _outlier, _STD_COLS, "a few massive activations"),
    Family("bimodal", _bimodal, _STD_COLS, "alternating signs ±a"),
    Family("tails", _tails, TAIL_COLS, "widths that are not multiples of the block"),
    Family("extremes", _extremes, _STD_COLS, "near the top of the format"),
    Family("special", _special, (64, 4096), "NaN or ±inf in the row"),
)}


def get(name) -> Family:
    if isinstance(name, Family):
        return name
    try:
        return FAMILIES[name]
    except (KeyError, TypeError):
        raise invalid("family", name, f"one of {', '.join(FAMILIES)}",
                      "see normcheck.families for what each holds") from None


def widths(family, cols_range=(1, 1 << 20), multiple_of: int = 1) -> list[int]:
    """The widths a family runs at, within ``cols_range`` and rounded up to multiples of
    ``multiple_of`` (a kernel's width contract); never empty."""
    lo, hi = cols_range
    m = max(1, int(multiple_of))
    out = []
    for c in get(family).cols:
        c = -(-max(c, lo) // m) * m
        while c > hi and c - m >= lo:
            c -= m
        if lo <= c <= hi and c not in out:
            out.append(c)
    if not out:
        c = -(-lo // m) * m
        out = [c] if c <= hi else [lo]
    return out


_POOL = []


def normal_pool() -> np.ndarray:
    """2^20 + 2^13 standard normals from a fixed seed, drawn once, then their negations (see
    NumpySource)."""
    if not _POOL:
        z = np.random.default_rng(0x6E6F726D).standard_normal((1 << 20) + (1 << 13))
        _POOL.append(np.concatenate([z, -z]))
    return _POOL[0]


def generate(family, fmt, rows: int, cols: int, seed=0, pooled: bool = False) -> np.ndarray:
    """``rows`` rows of ``cols`` values of a family, in the storage dtype of ``fmt``, seeded;
    ``pooled``: their normals are windows of :func:`normal_pool` (a long check's batches)."""
    fam = get(family)
    f = formats.lookup(fmt, formats.ROWS)
    if cols < 1 or rows < 1:
        raise invalid("cols" if cols < 1 else "rows", cols if cols < 1 else rows, "at least 1")
    rng = np.random.default_rng(seed if isinstance(seed, np.random.Generator) else
                                [seed, sorted(FAMILIES).index(fam.name), f.bits, cols])
    src = NumpySource(rng, normal_pool() if pooled else None, rows=rows)
    with np.errstate(over="ignore", invalid="ignore"):  # rounded once, all rows together
        v = np.broadcast_to(fam.recipe(src, f, cols), (rows, cols))
    if not isinstance(f, formats.Format):  # fp8: its values, in the fp16 that carries them
        return f.cast(v)
    return oracle_fast.cast(v, f)


def weights(fmt, cols: int, seed=0, beta_fmt=None):
    """γ ≈ 1 + 0.1·N(0,1) and β ≈ 0.1·N(0,1), rounded to their formats (γ's ``fmt``, β's
    ``beta_fmt``, default the same): realistic trained weights, at their own precision -- fp32
    master weights hold fp32 values, so a kernel that rounds them to the rows' bf16 shows."""
    f = formats.get(fmt)
    fb = formats.get(beta_fmt or fmt)
    rng = np.random.default_rng([seed, cols, 7])
    return f.cast(1 + 0.1 * rng.standard_normal(cols)), fb.cast(0.1 * rng.standard_normal(cols))


# ------------------------------------------------------------------------------------------------
# Rows built to hurt the backward pass: (x, dy) pairs
# ------------------------------------------------------------------------------------------------
#: name -> (what it hurts, (rows, widths)): rows None = the check's examples.
BACKWARD_FAMILIES = {
    "gaussian": ("x and dy independent: the baseline", (None, (31, 768, 4096))),
    "offset": ("x offset by κ its spread (1e5 in fp32, 100 in fp16, 30 in bf16): a naive "
               "Σg·x - mean·Σg cancels", (None, (768,))),
    "correlated": ("dy ≈ x̂: g - mean(g) and x̂·mean(g·x̂) cancel in dx", (None, (1024,))),
    "small_var": ("x = 1e-3·N(0,1): the variance (1e-6) is of ε's size, so rstd and dx depend "
                  "on ε as much as on the row", (None, (768,))),
    "constant_dy": ("dy the same everywhere: dx is 0 exactly when γ = 1", (None, (257,))),
    "large_dy": ("|dy| ~ 200 over 1001 rows: dγ, dβ overflow fp16 when summed in it",
                 (1001, (64,))),
    "tall": ("4097 rows of 7 columns: the column sums dγ, dβ over many rows", (4097, (7,))),
    "tiles": ("2113 rows (33 tiles of 64, and one row more) of 64 columns, dy with a mean: "
              "every stage of a multi-stage column sum (per-block partials, then a second "
              "stage over 33 partials) rounds", (2113, (64,))),
}


def backward_rows(family, fmt, rows: int, cols: int, seed=0):
    """(x, dy) of a backward family in the storage dtype of ``fmt``, seeded."""
    if family not in BACKWARD_FAMILIES:
        raise invalid("family", family, f"one of {', '.join(BACKWARD_FAMILIES)}")
    f = formats.get(fmt)
    rng = np.random.default_rng([seed, list(BACKWARD_FAMILIES).index(family), f.bits, cols])
    z = rng.standard_normal((rows, cols))
    kappa = {"fp32": 1e5, "fp16": 100.0, "bf16": 30.0}[f.name]
    x = f.cast(z * (1e-3 if family == "small_var" else 1.0) +
               (kappa if family == "offset" else 0.0))
    xv = x.astype(np.float64)
    if family == "correlated":
        xh = (xv - xv.mean(axis=1, keepdims=True)) / (xv.std(axis=1, keepdims=True) + 1e-30)
        dy = f.cast(xh + 1e-3 * rng.standard_normal((rows, cols)))
    elif family == "constant_dy":
        dy = f.cast(np.full((rows, cols), 0.5))
    elif family == "tiles":
        dy = f.cast(rng.standard_normal((rows, cols)) + 0.5)
    elif family == "large_dy":
        dy = f.cast(200.0 * np.abs(rng.standard_normal((rows, cols))) * np.sign(xv))
    else:
        dy = f.cast(rng.standard_normal((rows, cols)))
    return x, dy
