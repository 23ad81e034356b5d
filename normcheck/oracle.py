r"""The exact result of LayerNorm / RMSNorm rows, correctly rounded to the output format.

Maths (docs/DESIGN.md, "The exact function"), from the values *as stored* and the float32 ε the kernel
receives::

    LayerNorm   μ = Σx/D,  v = Σ(x-μ)²/D,  r = 1/√(v+ε),  y = γ·(x-μ)·r + β
    RMSNorm     v = Σx²/D, r = 1/√(v+ε),  y = γ·x·r          (Gemma: (1+γ) instead of γ)
    fused add   h = x + residual exactly; "exact" normalises h, "stored" normalises h rounded to
                the storage format (vLLM); either way the kernel writes h rounded.

How (Ziv's strategy, as correctly rounded maths libraries do):

1. **Fast path.**  Every row in float64 with a rigorous running error bound per element: sums are
   balanced binary trees (relative error γ_L with L = ⌈log₂D⌉, so the bound stays near 13u at
   D = 8192 where a sequential sum would give 8192u), the mean is refined by a second pass over
   the deviations, and every rounding in the chain is charged to the bound.
2. **Decide.**  An element is settled when its whole error interval rounds to one value of the
   output format and the bound is below 1e-6 of an ulp (so the fractional ULP error is exact to
   1e-6).  In practice all but a handful of elements are settled here.
3. **Exact fallback.**  Rows holding an unsettled element get exact statistics from integers
   (Σx and Σx² of the scaled stored values); y is then rational when v+ε is the square of a
   rational (ties can only happen then, e.g. x=[0,1], ε=0.75 gives x̂=±½ exactly) and is decided
   with Fractions, or irrational (never on a rounding boundary) and decided with mpmath interval
   arithmetic at increasing precision.  mpmath is the truth; :func:`mp_reference` is the plain
   high-precision evaluation the tests compare against.

Non-finite inputs (documented semantics: the IEEE evaluation of the formula).  A NaN anywhere
in a row (x, or h for fused kernels) makes every output and statistic of the row NaN ("NaN in,
NaN out").  A ±inf makes a LayerNorm row NaN (μ is infinite, x - μ is NaN or ∓inf; the mean
itself is the IEEE ±inf, or NaN with infinities of both signs); in RMSNorm
Σx² = inf and rstd = 0, so finite elements give ±0 (x/∞) and infinite ones NaN (∞/∞).  For a
finite row, a non-finite γ_j or β_j gives the IEEE value of γ_j·x̂_j + β_j (NaN for NaN, inf·0 or
inf-inf; ±inf otherwise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import mpmath
import numpy as np

from normcheck import formats
from normcheck.errors import invalid
from normcheck.formats import Format

__all__ = [
    "for_norm",
    "Reference",
    "FusedReference",
    "DEFAULT_EPS",
    "layernorm",
    "rmsnorm",
    "add_layernorm",
    "add_rmsnorm",
    "mp_reference",
]

DEFAULT_EPS = np.float32(1e-5)

_U = 2.0**-53  # unit roundoff of float64
_SAFETY = 1.0 + 2.0**-20  # covers the rounding of the bound computations themselves
ULP_RESOLUTION = 1e-6  # the fractional ULP error is exact to this many ulps
_CHUNK_ELEMENTS = 1 << 15  # rows per fast-path chunk: bounded memory whatever the row count


# ------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------
@dataclass
class Reference:
    """The exact result of an operation on some rows.

    ``exact`` is the exact value rounded to float64 (enough for ULP errors to ~1e-9 ulp),
    ``rounded`` the exact value correctly rounded to ``fmt`` (in its numpy dtype), and ``slow``
    marks the elements the float64 fast path could not settle (decided in double-double or
    exactly); ``beta`` (where the operation has one) gives :attr:`scale`."""

    fmt: Format
    exact: np.ndarray
    rounded: np.ndarray
    slow: np.ndarray
    beta: np.ndarray | None = field(default=None, repr=False)

    @property
    def scale(self) -> np.ndarray:
        """max(|γ·x̂|, |β|) per element (γ·x̂ = t - β), the yardstick where β cancels."""
        if self.beta is None:
            return np.abs(self.exact)
        return np.maximum(np.abs(self.exact - self.beta), np.abs(self.beta))

    def ulp_error(self, actual) -> np.ndarray:
        """Fractional ULP errors of ``actual`` against the exact values (float64 array): inf where
        a non-finite answer meets a finite exact value, 0 where both are the same non-finite."""
        actual = np.asarray(actual)
        if actual.shape != self.exact.shape:
            raise invalid("actual", actual, f"an array of shape {self.exact.shape}",
                          "pass the kernel output for the same rows as the reference")
        return formats.ulp_error(self.fmt, actual, self.exact, self.rounded)

    def ulp_error_scaled(self, actual) -> np.ndarray:
        """|actual - t| in ulps of max(|γ·x̂|, |β|): a fairer yardstick where β nearly cancels the
        normalised term and ulp(t) is tiny."""
        a = np.asarray(actual).astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(a - self.exact) / self.fmt.ulp_array(np.maximum(self.scale,
                                                                         np.abs(self.exact)))
        plain = self.ulp_error(actual)
        err = np.where(plain == 0, 0.0, err)  # exact answers, NaN for NaN included
        return np.where(np.isfinite(plain), err, plain)

    @property
    def shape(self):
        return self.exact.shape


@dataclass
class NormReference(Reference):
    """A normalisation's reference.  The exact row statistics are float32 references computed on
    first use: ``mean`` (LayerNorm only, else None), ``var`` (the population variance, or the
    mean square for RMSNorm) and ``rstd`` = 1/√(var+ε)."""

    _stats_source: tuple | None = field(default=None, repr=False)
    _stats: dict | None = field(default=None, repr=False)

    def _stat(self, key):
        if self._stats is None:
            self._stats = _statistics(*self._stats_source)
        return self._stats.get(key)

    @property
    def mean(self) -> Reference | None:
        return self._stat("mean")

    @property
    def var(self) -> Reference:
        return self._stat("var")

    @property
    def rstd(self) -> Reference:
        return self._stat("rstd")


@dataclass
class FusedReference(NormReference):
    """A fused add + norm reference; ``h`` is the reference of the sum x + residual in the storage
    format (what the kernel writes back for the residual stream)."""

    h: Reference | None = field(default=None)


# ------------------------------------------------------------------------------------------------
# Public entry points
# ------------------------------------------------------------------------------------------------
def layernorm(x, gamma=None, beta=None, *, eps=DEFAULT_EPS, out=None) -> NormReference:
    """Exact LayerNorm of the stored rows ``x`` (2-D, fp32/fp16/bf16), correctly rounded to
    ``out`` (default: the input's format)."""
    xin = _rows(x, "x")
    return _normalise(_Pair(xin.astype(np.float64)), _vec(gamma, "gamma", xin.shape[1]),
                      _vec(beta, "beta", xin.shape[1]), _eps(eps), True, False,
                      _out(out, xin), grid16=xin.dtype == np.float16)


def rmsnorm(x, gamma=None, *, eps=DEFAULT_EPS, out=None, gemma=False) -> NormReference:
    """Exact RMSNorm; ``gemma=True`` scales by (1+γ) as Gemma does."""
    xin = _rows(x, "x")
    return _normalise(_Pair(xin.astype(np.float64)), _vec(gamma, "gamma", xin.shape[1]), None,
                      _eps(eps), False, bool(gemma), _out(out, xin),
                      grid16=xin.dtype == np.float16)


def add_layernorm(x, residual, gamma=None, beta=None, *, eps=DEFAULT_EPS, convention="exact",
                  out=None) -> FusedReference:
    """Exact fused residual add + LayerNorm: h = x + residual, y = LayerNorm(h) where h is the
    exact sum (``convention="exact"``, FlashInfer) or the sum rounded to x's format
    (``"stored"``, vLLM)."""
    xin = _rows(x, "x")
    return _fused(xin, residual, gamma, beta, eps, convention, out, True, False)


def add_rmsnorm(x, residual, gamma=None, *, eps=DEFAULT_EPS, convention="exact", out=None,
                gemma=False) -> FusedReference:
    """Exact fused residual add + RMSNorm (see :func:`add_layernorm` for the conventions)."""
    xin = _rows(x, "x")
    return _fused(xin, residual, gamma, None, eps, convention, out, False, bool(gemma))


def for_norm(norm, x, gamma=None, beta=None, *, residual=None, eps=DEFAULT_EPS,
             convention="exact", out=None):
    """The reference of ``norm`` (a :class:`normcheck.norms.Norm` or its name: "layernorm",
    "rmsnorm", "gemma_rmsnorm", "add_layernorm", "add_rmsnorm") on these rows: one entry point
    for callers that hold the norm as data.  An affine-free norm ignores γ/β; the ``hf``
    reference is the correctly rounded γ·round_S(x̂) (normcheck.norms)."""
    from normcheck import norms

    n = norms.get(norm)
    g = gamma if n.has_gamma else None
    b = beta if (n.has_beta and n.centred) else None
    if n.reference == "hf":
        return _hf(n, x, g, residual, eps, convention, out)
    if n.fused:
        f = add_layernorm if n.centred else add_rmsnorm
        kw = {} if n.centred else {"gemma": n.gemma}
        args = (x, residual, g, b) if n.centred else (x, residual, g)
        return f(*args, eps=eps, convention=convention, out=out, **kw)
    if n.centred:
        return layernorm(x, g, b, eps=eps, out=out)
    return rmsnorm(x, g, eps=eps, out=out, gemma=n.gemma)


def _hf(n, x, gamma, residual, eps, convention, out):
    """Hugging Face's Llama-family RMSNorm: x̂ correctly rounded to the storage format S, times
    γ (a product of two values of S is exact in float64), correctly rounded to the output."""
    xin = _rows(x, "x")
    storage = formats.of_dtype(xin.dtype, "x.dtype")
    if n.fused:
        xh = add_rmsnorm(xin, residual, None, eps=eps, convention=convention, out=storage)
    else:
        xh = rmsnorm(xin, None, eps=eps, out=storage)
    fmt = _out(out, xin)
    g = _vec(gamma, "gamma", xin.shape[1])
    t = xh.rounded.astype(np.float64) * (1.0 if g is None else g)
    ref = (FusedReference if n.fused else NormReference)(fmt, t, fmt.cast(t), xh.slow.copy())
    ref._stats_source = xh._stats_source
    if n.fused:
        ref.h = xh.h
    return ref


def _fused(xin, residual, gamma, beta, eps, convention, out, center, gemma):
    res = _rows(residual, "residual")
    if res.shape != xin.shape:
        raise invalid("residual", res, f"the shape of x, {xin.shape}",
                      "pass one residual row per input row")
    if convention not in ("exact", "stored"):
        raise invalid("convention", convention, '"exact" (normalise x + residual exactly) or '
                      '"stored" (normalise the sum rounded to storage)')
    storage = formats.of_dtype(xin.dtype, "x.dtype")
    a = xin.astype(np.float64)
    b = res.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s, e = _two_sum(a, b)
        e = np.where(np.isfinite(s), e, 0.0)
    h_rounded = storage.round_pair(s, e)
    h_ref = Reference(storage, s, h_rounded.astype(storage.dtype), np.zeros(s.shape, bool))
    pair = _Pair(s, e) if convention == "exact" else _Pair(h_rounded)
    cols = xin.shape[1]
    ref = _normalise(pair, _vec(gamma, "gamma", cols), _vec(beta, "beta", cols), _eps(eps),
                     center, gemma, _out(out, xin), cls=FusedReference,
                     grid16=xin.dtype == np.float16 and (convention == "stored"
                                                         or res.dtype == np.float16))
    ref.h = h_ref
    return ref


# ------------------------------------------------------------------------------------------------
# Argument checking
# ------------------------------------------------------------------------------------------------
def _rows(x, name):
    if not isinstance(x, np.ndarray):
        raise invalid(name, x, "a 2-D numpy array [rows, cols] of float32, float16 or bfloat16",
                      "wrap the rows with np.asarray(..., dtype=np.float32)")
    if x.ndim != 2:
        raise invalid(f"{name}.ndim", x.ndim, "2 (an array [rows, cols])",
                      f"use {name}.reshape(-1, {name}.shape[-1]) or {name}[None, :] for one row")
    formats.of_dtype(x.dtype, f"{name}.dtype")
    if x.shape[1] == 0:
        raise invalid(f"{name}.shape", x.shape, "at least one column",
                      "a normalisation over zero features is undefined")
    return x


def _vec(v, name, cols):
    if v is None:
        return None
    if not isinstance(v, np.ndarray):
        raise invalid(name, v, f"a 1-D numpy array of {cols} values (fp32, fp16 or bf16) or None",
                      f"pass np.asarray({name}, dtype=np.float32)")
    if v.ndim != 1 or v.shape[0] != cols:
        raise invalid(f"{name}.shape", v.shape, f"({cols},), one value per column",
                      f"give {name} the length of a row")
    formats.of_dtype(v.dtype, f"{name}.dtype")
    return v.astype(np.float64)


def _eps(eps):
    try:
        e = np.float32(eps)
    except (TypeError, ValueError):
        raise invalid("eps", eps, "a positive finite float32", "pass e.g. np.float32(1e-5)") \
            from None
    if not (np.isfinite(e) and e > 0):
        raise invalid("eps", eps, "a positive finite float32 (ε > 0)",
                      "use the kernel's ε, e.g. np.float32(1e-5) or np.float32(1e-6)")
    return float(e)


def _out(out, xin) -> Format:
    if out is None:
        return formats.of_dtype(xin.dtype)
    if isinstance(out, (str, Format)):
        return formats.get(out)
    return formats.of_dtype(out, "out")


# ------------------------------------------------------------------------------------------------
# Core
# ------------------------------------------------------------------------------------------------
class _Pair:
    """Rows given as exact sums hi + lo of float64 (lo None: the rows are hi)."""

    def __init__(self, hi, lo=None):
        self.hi = hi
        self.lo = None if lo is None or not np.any(lo) else lo

    def take(self, sl):
        return _Pair(self.hi[sl], None if self.lo is None else self.lo[sl])

    def row(self, i):
        """Row i as (hi, lo or None)."""
        return self.hi[i], None if self.lo is None else self.lo[i]


def _two_sum(a, b):
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def _gamma(n: int) -> float:
    """γ_n = n·u/(1-n·u), the classic bound on n accumulated roundings."""
    return n * _U / (1 - n * _U)


def _tree_sum(a: np.ndarray, consume: bool = False) -> np.ndarray:
    """Sum along axis 1 as a balanced binary tree of depth ⌈log₂ cols⌉ (pads with zeros, which add
    exactly).  Works in place: on ``a`` itself when ``consume`` (it is then garbage), else on a
    copy."""
    rows, cols = a.shape
    width = 1 << max(cols - 1, 0).bit_length()
    if width == cols:
        buf = a if consume and a.flags.c_contiguous else a.copy()
    else:
        buf = np.zeros((rows, width))
        buf[:, :cols] = a
    while width > 1:
        width //= 2
        np.add(buf[:, :width], buf[:, width:2 * width], out=buf[:, :width])
    return buf[:, 0].copy()


def _tree_sum_dd(hi: np.ndarray, lo: np.ndarray):
    """Double-double sum along axis 1 of the exact values hi + lo: the hi parts are added as a
    balanced tree with TwoSum, their exact errors and the lo parts accumulated alongside.
    Returns (s_hi, s_lo); the inputs are left untouched."""
    rows, cols = hi.shape
    width = 1 << max(cols - 1, 0).bit_length()
    s = np.zeros((rows, width))
    t = np.zeros((rows, width))
    s[:, :cols] = hi
    t[:, :cols] = lo
    while width > 1:
        width //= 2
        x1, x2 = s[:, :width], s[:, width:2 * width]
        sm = x1 + x2
        bb = sm - x1
        err = x1 - (sm - bb)
        err += x2 - bb
        t1 = t[:, :width]
        t1 += t[:, width:2 * width]
        t1 += err
        s[:, :width] = sm
    return s[:, 0].copy(), t[:, 0].copy()


def _depth(cols: int) -> int:
    return max(cols - 1, 0).bit_length()


def _normalise(pair: _Pair, g, b, eps: float, center: bool, gemma: bool, out: Format,
               cls=None, grid16=False):
    """Reference of a normalisation of the rows ``pair``; ``grid16`` says every row value is an
    fp16 value (or a sum of two, exactly), i.e. a multiple of 2^-24 below 2^17."""
    rows, cols = pair.hi.shape
    exact = np.empty((rows, cols))
    rounded = np.empty((rows, cols), out.dtype)
    slow = np.zeros((rows, cols), bool)
    geff = None if g is None else (1.0 + g if gemma else g)
    mode = "grid" if grid16 and pair.lo is None else ("dd" if out.precision > 16 else "tree")
    chunk = max(1, _CHUNK_ELEMENTS // cols)

    def one_chunk(r0):
        sl = slice(r0, min(rows, r0 + chunk))
        part = pair.take(sl)
        fp = _fast(part, g, b, eps, center, gemma, mode)
        r_val, ok = _decide(fp["y"], fp["ey"], out)
        bad = fp["nonfinite"]
        if np.any(bad):  # the IEEE value of the formula (module docstring)
            val = _nonfinite_rows(part.hi[bad], geff, center)
            fp["y"][bad] = val
            r_val[bad] = val
            ok[bad] = True
        sc = fp["special_cols"]
        if sc is not None:  # IEEE value of γ·x̂ + β for non-finite γ_j / β_j
            with np.errstate(invalid="ignore", over="ignore"):
                val = (geff[sc] if geff is not None else 1.0) * fp["xhat"][:, sc] + \
                    (b[sc] if b is not None else 0.0)
            val[bad] = np.nan
            fp["y"][:, sc] = val
            r_val[:, sc] = out.round_array(val)
            ok[:, sc] = True
        slow[sl] = ~ok
        if not ok.all():  # tier 2: double-double on the rows holding unsettled elements
            ii, jj = np.nonzero(~ok)
            y2, e2 = _refine(part, ii, jj, g, b, eps, center, gemma)
            r2, ok2 = _decide(y2, e2, out)
            fp["y"][ii, jj], r_val[ii, jj], ok[ii, jj] = y2, r2, ok2
        exact[sl] = fp["y"]
        rounded[sl] = r_val.astype(np.float32)  # exact; float32 -> fp16/bf16 casts are fast
        if not ok.all():  # tier 3: exact
            rows_exact = {}
            for i, j in zip(*np.nonzero(~ok)):
                if i not in rows_exact:
                    rows_exact[i] = _ExactRow(part.row(i), g, b, eps, center, gemma)
                exact[r0 + i, j], rounded[r0 + i, j] = rows_exact[i].element(j, out)

    for r0 in range(0, rows, chunk):
        one_chunk(r0)
    ref = (cls or NormReference)(out, exact, rounded, slow, b)
    ref._stats_source = (pair, eps, center)
    return ref


def _nonfinite_rows(hi, geff, center):
    """y of rows holding NaN or ±inf, as the IEEE evaluation of the formula gives it."""
    with np.errstate(invalid="ignore", over="ignore"):
        nan_row = np.isnan(hi).any(axis=1, keepdims=True) | center
        y = hi * 0.0  # x·rstd with rstd = 1/√∞ = 0: ±0 for finite x, NaN for ±inf
        if geff is not None:
            y = y * geff
    return np.where(nan_row, np.nan, y)


def _statistics(pair: _Pair, eps: float, center: bool) -> dict:
    """Exact row statistics, correctly rounded to float32: mean (LayerNorm only), var (the
    population variance, or the mean square) and rstd = 1/√(var+ε)."""
    rows, cols = pair.hi.shape
    keys = ("mean", "var", "rstd") if center else ("var", "rstd")
    vals = {k: (np.empty(rows), np.empty(rows), np.zeros(rows, bool)) for k in keys}
    chunk = max(1, _CHUNK_ELEMENTS // cols)
    for r0 in range(0, rows, chunk):
        sl = slice(r0, min(rows, r0 + chunk))
        part = pair.take(sl)
        fp = _fast(part, None, None, eps, center, False)
        bad = fp["nonfinite"]
        exact_rows = {}
        with np.errstate(invalid="ignore", over="ignore"):
            ieee_sum = part.hi.sum(axis=1)  # ±inf, or NaN (a NaN, or infinities of both signs)
        nan_rows = np.isnan(ieee_sum) | center
        for k in keys:
            r_val, ok = _decide(fp[k], fp["e" + k], formats.FP32)
            ex = fp[k].copy()
            if k == "mean":  # the IEEE mean: ±inf with infinities of one sign, else NaN
                special = ieee_sum
            else:  # LayerNorm: x - μ is NaN; RMSNorm: Σx² = inf, rstd = 0
                special = np.where(nan_rows, np.nan, np.inf if k == "var" else 0.0)
            ex[bad] = special[bad]
            r_val[bad], ok[bad] = ex[bad], True
            vals[k][0][sl], vals[k][1][sl], vals[k][2][sl] = ex, r_val, ~ok
            for i in np.nonzero(~ok)[0]:
                if i not in exact_rows:  # one exact row serves all three statistics
                    exact_rows[i] = _ExactRow(part.row(i), None, None, eps, center, False)
                vals[k][0][r0 + i], vals[k][1][r0 + i] = exact_rows[i].stat(k, formats.FP32)
    return {k: Reference(formats.FP32, e, r.astype(np.float32), s)
            for k, (e, r, s) in vals.items()}


def _fast(pair: _Pair, g, b, eps, center, gemma, mode="dd"):
    """Float64 evaluation of a chunk of rows with a rigorous absolute error bound per value.

    Deviations carry the bound k·|d_j| + e_row (k = 2u: the subtraction from the pivot and from
    the mean correction), so per element only |p_j| and |γ_j| enter the final bound:
    e_y = A_row·|p_j| + B_row·|γ_j| + u·|y_j|.  ``mode`` picks how the mean correction is summed:
    "dd" in double-double (fp32 outputs), "grid" exactly (fp16 rows: every value is a multiple
    of 2^-24), "tree" as a plain balanced tree with a γ_L bound (fp16/bf16 outputs of other rows).
    Below fp32 outputs the bound's column terms are taken at their row maximum."""
    hi = pair.hi
    rows, cols = hi.shape
    D = float(cols)
    gL = _gamma(_depth(cols))
    u = _U
    k = 2.0000001 * u
    with np.errstate(invalid="ignore", over="ignore"):
        row_sum = hi.sum(axis=1)  # finite rows cannot overflow float64 (D·3.4e38 << 1.8e308)
        nonfinite = ~np.isfinite(row_sum)
    if np.any(nonfinite):
        hi = np.where(nonfinite[:, None], 0.0, hi)
        row_sum = hi.sum(axis=1)
    lo = pair.lo
    res = {"nonfinite": nonfinite}
    e_row = np.zeros(rows)
    if lo is not None:
        lo = np.where(nonfinite[:, None], 0.0, lo)
        # fl(fl(hi - m0) + lo) (or fl(hi + lo)): one more rounding, |error| <= u|d| + u·max|lo|
        e_row += 1.0000001 * u * np.max(np.abs(lo), axis=1)
    if center:
        m0 = row_sum / D  # a pivot; its error is corrected below
        L = _depth(cols)
        if mode == "dd":
            # a_j = x_j - m0 exactly as a_hi + a_lo (TwoSum); c = Σ a_j in double-double
            a_hi, a_lo = _two_sum(hi, -m0[:, None])
            if lo is not None:
                a_lo += lo
            Sabs = np.abs(a_hi).sum(axis=1) * (1 + _gamma(cols))  # >= Σ|a_hi|
            c_hi, c_lo = _tree_sum_dd(a_hi, a_lo)
            # lo accumulation: <= 2L+1 roundings of terms bounded by Σ|lo| + L·u·Σ|a_hi|
            E_c = (_gamma(2 * L + 1) * (u * Sabs * (L + 1) + D * e_row)) * _SAFETY
            c = c_hi + c_lo
        elif mode == "grid":
            # fp16 rows are multiples of 2^-24: with the pivot on that grid, x - m0 is exact and
            # so is every partial sum while Σ|a| < 2^29 (53 bits of 2^-24 steps)
            m0 = np.rint(m0 * 2.0**24) * 2.0**-24
            a_hi = hi - m0[:, None]
            Sabs = np.abs(a_hi).sum(axis=1) * (1 + _gamma(cols))
            c = a_hi.sum(axis=1)
            E_c = np.where(Sabs < 2.0**29, 0.0, _gamma(cols) * Sabs * _SAFETY)
        else:  # "tree"
            # a_j = fl(x_j - m0) (error u|a_j|), c = tree sum (error γ_L·Σ|a|)
            a_hi = hi - m0[:, None]
            if lo is not None:
                a_hi += lo
            Sabs = np.abs(a_hi).sum(axis=1) * (1 + _gamma(cols))
            c = _tree_sum(a_hi)
            E_c = ((u + gL) * (1 + gL) * Sabs + D * e_row) * _SAFETY
        cD = c / D
        e_cD = (E_c / D + 2.0000001 * u * np.abs(cD)) * _SAFETY
        d = a_hi
        d -= cD[:, None]
        # |d - (x-μ)| <= |a_lo| + u|d| + e_cD <= u|a_hi| + u|d| + e_cD + e_lo,
        # |a_hi| <= (|d| + |cD|)(1+u)
        e_row = (e_row + e_cD + 2 * u * np.abs(cD)) * _SAFETY
        sabs_d = Sabs + D * np.abs(cD)
        mean = m0 + cD
        res["mean"], res["emean"] = mean, (e_cD + u * np.abs(mean)) * _SAFETY
    else:
        d = hi + lo if lo is not None else hi
        sabs_d = None
    sq = d * d
    S = _tree_sum(sq, consume=True)
    del sq
    ssq = S * (1 + gL) / (1 - u)  # >= Σd²
    if sabs_d is None:
        sabs_d = np.sqrt(D * ssq) * (1 + 4 * u)  # Cauchy-Schwarz: Σ|d| <= √(D·Σd²)
    # Σ e_d(2|d| + e_d) with e_d = k|d| + e_row
    prop = k * (2 + k) * ssq + e_row * (2 + 2 * k) * sabs_d + D * e_row * e_row
    e_S = ((gL + u) * ssq + prop) * _SAFETY
    v = S / D
    e_v = (e_S / D + u * v) * _SAFETY
    w = v + eps
    e_w = (e_v + u * w) * _SAFETY
    denom = w - e_w
    hopeless = ~(denom > 0)
    rho = np.where(hopeless, np.inf, e_w / np.where(hopeless, 1.0, denom))
    r = 1.0 / np.sqrt(w)
    rho_r = (rho + 2.01 * u) * (1 + rho) * _SAFETY  # |r - r*| <= rho_r·r
    res["var"], res["evar"] = v, np.where(hopeless, np.inf, e_v)
    res["rstd"], res["erstd"] = r, rho_r * r
    # t1 = fl(d·r): |t1 - x̂| <= (k(1+rho_r) + rho_r + u)(1+2u)|t1| + e_row·r(1+rho_r)
    A = (k * (1 + rho_r) + rho_r + u) * (1 + 2 * u)
    B = e_row * r * (1 + rho_r)
    if d is hi:
        t1 = d * r[:, None]
    else:
        t1 = d
        t1 *= r[:, None]
    res["xhat"] = t1
    A = A[:, None]
    special = None
    if g is not None:
        gg = 1.0 + g if gemma else g
        finite = np.isfinite(gg)
        if not np.all(finite):
            special = ~finite
            gg = np.where(finite, gg, 0.0)
        # p = fl(gg·t1): |p - γx̂| <= |gg|(A|t1| + B) + e_g(|t1|(1+A) + B) + u|p|
        ag = np.abs(gg)
        A = (A + (u if gemma else 0.0) * (1 + A)) * (1 + u) + u
        Bcoef = B * (1 + (u if gemma else 0.0))
        p = t1 * gg
    else:
        p = t1
        ag = None
        Bcoef = B
    ap = np.abs(p)
    bb, ab = None, None
    if b is not None:
        finite = np.isfinite(b)
        bb = b
        if not np.all(finite):
            special = ~finite if special is None else special | ~finite
            bb = np.where(finite, b, 0.0)
        ab = np.abs(bb)
    # e_y = A|p| + B|γ_j| (+ u|y| <= u(|p| + |β_j|)); below fp32 outputs the column terms are
    # taken at their row maximum (a constant per row: two passes instead of five)
    ey = ap
    ey *= ((A + (u if b is not None else 0.0)) * _SAFETY)
    if mode == "dd" and ag is not None:
        ey += np.multiply.outer(Bcoef * _SAFETY, ag)
    else:
        ey += (Bcoef * (_SAFETY * (float(ag.max()) if ag is not None else 1.0)))[:, None]
    if ab is not None:
        if mode == "dd":
            ey += (u * _SAFETY) * ab
        else:
            ey += u * _SAFETY * float(ab.max())
    if bb is not None:
        if p is t1:
            p = p + bb
        else:
            p += bb
    y = p
    if np.any(hopeless):
        ey[hopeless] = np.inf
    res["y"], res["ey"], res["special_cols"] = y, ey, special
    return res


def _two_prod(a, b):
    """a·b = p + e exactly (Dekker's product with Veltkamp splitting; numpy has no fma)."""
    p = a * b
    a1 = a * 134217729.0
    a_hi = a1 - (a1 - a)
    a_lo = a - a_hi
    b1 = b * 134217729.0
    b_hi = b1 - (b1 - b)
    b_lo = b - b_hi
    e = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    return p, e


def _refine(pair: _Pair, ii, jj, g, b, eps, center, gemma):
    """Tier 2: y at (ii, jj) of the chunk ``pair`` in double-double, with a bound.

    The rows holding those elements are redone with error-free transformations (TwoSum for
    x - pivot, Dekker's product for the squares, double-double tree sums), r = 1/√(S/D+ε) is taken
    from mpmath at 200 bits, and y = γ·d·r + β is evaluated in double-double.  Every
    double-double operation used has relative error below 4u² (Joldes, Muller & Popescu 2017);
    the bound charges 16u² per operation on the magnitudes involved, plus the propagated error of
    the mean and of S."""
    u = _U
    rows_u, inv = np.unique(ii, return_inverse=True)
    hi = pair.hi[rows_u]
    lo = pair.lo[rows_u] if pair.lo is not None else np.zeros_like(hi)
    n, cols = hi.shape
    D = float(cols)
    L = _depth(cols)
    if center:
        m0 = hi.sum(axis=1) / D
        a_hi, a_lo = _two_sum(hi, -m0[:, None])
        a_lo += lo
        Sabs = np.abs(a_hi).sum(axis=1) * (1 + _gamma(cols))
        c_hi, c_lo = _tree_sum_dd(a_hi, a_lo)
        cD = (c_hi + c_lo) / D
        d_hi, d_lo = _two_sum(a_hi, -cD[:, None])
        d_lo += a_lo
        # |cD - (μ - m0)|: two roundings of cD plus the double-double sum's error
        e_mu = (2.0000001 * u * np.abs(cD) + _gamma(2 * L + 2) * (L + 2) * u * Sabs / D) \
            * _SAFETY
    else:
        d_hi, d_lo = _two_sum(hi, lo)
        e_mu = np.zeros(n)
    e_mu += 16 * u * u * np.abs(d_hi).max(axis=1)  # the roundings inside d_lo
    q_hi, q_lo = _two_prod(d_hi, d_hi)
    q_lo += 2.0 * d_hi * d_lo
    S_hi, S_lo = _tree_sum_dd(q_hi, q_lo)
    dabs = np.abs(d_hi).sum(axis=1) * (1 + _gamma(cols))
    # |S - Σ(x-μ)²| <= 2·e_mu·Σ|d| + D·e_mu² + (2L+8)·4u²·S
    S = S_hi + S_lo
    e_S = (2 * e_mu * dabs + D * e_mu * e_mu + (2 * L + 8) * 4 * u * u * np.abs(S)) * _SAFETY
    r_hi = np.empty(n)
    r_lo = np.empty(n)
    rel_r = np.empty(n)
    with mpmath.workprec(200):
        for k in range(n):
            w = (mpmath.mpf(float(S_hi[k])) + mpmath.mpf(float(S_lo[k]))) / cols + \
                mpmath.mpf(eps)
            rk = 1 / mpmath.sqrt(w)
            r_hi[k] = float(rk)
            r_lo[k] = float(rk - r_hi[k])
            wl = float(w) - e_S[k] / cols * _SAFETY
            rel_r[k] = (e_S[k] / cols / wl if wl > 0 else np.inf) + 4 * u * u
    dh, dl = d_hi[inv, jj], d_lo[inv, jj]
    rh, rl = r_hi[inv], r_lo[inv]
    th, tl = _two_prod(dh, rh)
    tl += dh * rl + dl * rh
    ad = np.abs(dh)
    # |t - x̂| <= r·e_mu + |d|·r·rel_r + 16u²|t|
    e_t = (rh * e_mu[inv] + ad * rh * rel_r[inv]) * (1 + 4 * u) + 16 * u * u * np.abs(th)
    if g is not None:
        gj = g[jj]
        if gemma:
            g_hi, g_lo = _two_sum(np.ones_like(gj), gj)
        else:
            g_hi, g_lo = gj, np.zeros_like(gj)
        ph, pl = _two_prod(g_hi, th)
        pl += g_hi * tl + g_lo * th
        e_p = np.abs(g_hi) * e_t * (1 + 4 * u) + 16 * u * u * np.abs(ph)
    else:
        ph, pl, e_p = th, tl, e_t
    if b is not None:
        bj = b[jj]
        yh, yl = _two_sum(ph, bj)
        yl += pl
        e_y = e_p + 16 * u * u * (np.abs(ph) + np.abs(bj))
    else:
        yh, yl, e_y = ph, pl, e_p
    y = yh + yl
    e_y = (e_y + u * np.abs(y)) * _SAFETY
    return y, e_y


def _decide(y, e, fmt: Format):
    """Round y to fmt where [y-e, y+e] settles both the rounded value and ulp(t) and e is below
    ULP_RESOLUTION ulp.  Returns (rounded values as float64, settled mask).

    Works in units of the quantum of y's binade: z = y/quantum has its integer part in
    [2^(p-1), 2^p) (or below, in the subnormal range); the value is settled when
    |z - rint(z)| + e/quantum < ½ and the interval does not leave the binade."""
    p = fmt.precision
    with np.errstate(invalid="ignore", over="ignore"):
        # the binade of y from its float64 exponent bits (y is never a float64 subnormal here)
        eb = (y.view(np.int64) >> 52) & 0x7FF
        overflow_possible = eb.size and int(eb.max()) > fmt.emax + 1023
        lowest = fmt.emin + 1023  # the binade of the smallest normal of fmt: subnormals share it
        np.maximum(eb, lowest, out=eb)
        # scale = 2^(p-1-e) for y's binade e: makes the quantum 1 (an exact power of two)
        scale = ((p - 1 + 2 * 1023) - eb << 52).view(np.float64)
        z = y * scale
        ez = e * scale
        n = np.rint(z)
        ok = np.abs(z - n)
        ok += ez
        ok = ok < 0.5  # monotone rounding: safe in float64
        ok &= ez <= ULP_RESOLUTION
        # the ulp of t is settled too unless the interval may leave the binade: only possible
        # where n is the binade's first or last integer (elsewhere |z-n| + ez < ½ keeps it in)
        an = np.abs(n)
        top, low = float(2**p), float(2 ** (p - 1))
        edge = ok & ((an == top) | (an == low))
        if edge.any():
            edge = np.nonzero(edge)
            az, ee, sub = np.abs(z[edge]), ez[edge], eb[edge] == lowest
            ok[edge] = (az + ee < top) & ((az - ee > low) | sub | (ee == 0))
        r = n / scale
        if overflow_possible:
            big = np.abs(r) > fmt.max_finite
            r[big] = np.copysign(np.inf, y[big])
    return r, ok


# ------------------------------------------------------------------------------------------------
# Exact fallback
# ------------------------------------------------------------------------------------------------
def _scaled_ints(values):
    """Exact integers X_j and a shift K with values_j = X_j / 2**K."""
    fr = [float(v).as_integer_ratio() for v in values]
    K = max(d.bit_length() - 1 for _, d in fr)
    return [n << (K - (d.bit_length() - 1)) for n, d in fr], K


class _ExactRow:
    """Exact statistics of one row; y_j decided by Fractions (rational r) or by mpmath interval
    arithmetic at increasing precision (irrational r: y_j is never on a rounding boundary)."""

    def __init__(self, row, g, b, eps, center, gemma):
        hi, lo = row
        vals = list(hi) if lo is None else [Fraction(float(h)) + Fraction(float(l))
                                            for h, l in zip(hi, lo)]
        if lo is None:
            X, K = _scaled_ints(vals)
        else:
            K = max(v.denominator.bit_length() - 1 for v in vals)
            X = [v.numerator << (K - (v.denominator.bit_length() - 1)) for v in vals]
        D = len(X)
        self.D, self.K, self.X = D, K, X
        sx = sum(X)
        sxx = sum(v * v for v in X)
        self.sx = sx
        scale2 = Fraction(1, 1 << (2 * K))
        if center:
            self.mean = Fraction(sx, D << K)
            self.var = Fraction(D * sxx - sx * sx, D * D) * scale2
        else:
            self.mean = None
            self.var = Fraction(sxx, D) * scale2
        self.w = self.var + Fraction(eps)
        self.center, self.gemma = center, gemma
        self.g, self.b = g, b
        num, den = self.w.numerator, self.w.denominator
        rn, rd = math.isqrt(num), math.isqrt(den)
        self.rational_r = Fraction(rd, rn) if (rn * rn == num and rd * rd == den) else None

    def _numer(self, j) -> Fraction:
        """(x_j - μ) (or x_j) exactly, times the effective gain γ_j (or 1+γ_j)."""
        if self.center:
            dev = Fraction(self.D * self.X[j] - self.sx, self.D << self.K)
        else:
            dev = Fraction(self.X[j], 1 << self.K)
        if self.g is not None:
            gj = Fraction(float(self.g[j]))
            if self.gemma:
                gj += 1
            dev *= gj
        return dev

    def element(self, j, fmt: Format):
        n = self._numer(j)
        bj = Fraction(float(self.b[j])) if self.b is not None else Fraction(0)
        if n == 0:
            y = bj
        elif self.rational_r is not None:
            y = n * self.rational_r + bj
        else:
            return _ziv(lambda ctx: ctx.mpf(n) / ctx.sqrt(ctx.mpf(self.w)) + ctx.mpf(bj), fmt)
        return float(y), fmt.round(y)

    def stat(self, k, fmt: Format):
        if k == "mean":
            return float(self.mean), fmt.round(self.mean)
        if k == "var":
            return float(self.var), fmt.round(self.var)
        if self.rational_r is not None:
            return float(self.rational_r), fmt.round(self.rational_r)
        return _ziv(lambda ctx: 1 / ctx.sqrt(ctx.mpf(self.w)), fmt)


def _ziv(expr, fmt: Format, start_prec=96, max_prec=1 << 16):
    """Evaluate ``expr`` in mpmath interval arithmetic at rising precision until its enclosure
    rounds to one value of ``fmt`` and is narrower than ULP_RESOLUTION ulp."""
    prec = start_prec
    iv = mpmath.iv
    while prec <= max_prec:
        old = iv.prec
        iv.prec = prec
        try:
            val = expr(_IvCtx(iv))
            a, b = mpmath.mp.make_mpf(val._mpi_[0]), mpmath.mp.make_mpf(val._mpi_[1])
        finally:
            iv.prec = old
        if fmt.round(a) == fmt.round(b) and fmt.ulp(a) == fmt.ulp(b):
            if float(b - a) <= ULP_RESOLUTION * fmt.ulp(a):
                mid = (mpmath.mpf(a) + mpmath.mpf(b)) / 2
                return float(mid), fmt.round(a)
        prec *= 2
    raise ArithmeticError("exact oracle did not converge (an exactly representable irrational?)")


class _IvCtx:
    """The few mpmath.iv operations the fallback needs, taking Fractions exactly."""

    def __init__(self, iv):
        self.iv = iv

    def mpf(self, q):
        if isinstance(q, Fraction):
            return self.iv.mpf(q.numerator) / self.iv.mpf(q.denominator)
        return self.iv.mpf(q)

    def sqrt(self, v):
        return self.iv.sqrt(v)


# ------------------------------------------------------------------------------------------------
# The plain mpmath truth (tests and benchmarks)
# ------------------------------------------------------------------------------------------------
def mp_reference(x_row, gamma=None, beta=None, *, eps=DEFAULT_EPS, center=True, gemma=False,
                 prec=256):
    """Exact-to-``prec``-bits y of one row, straight from the definition in mpmath (no fast path,
    no bound): a list of mpf.  ``x_row`` may hold exact Fractions (e.g. an exact fused sum)."""
    with mpmath.workprec(prec):
        xs = [mpmath.mpf(float(v)) if not isinstance(v, Fraction) else
              mpmath.mpf(v.numerator) / v.denominator for v in x_row]
        D = len(xs)
        if center:
            mu = mpmath.fsum(xs) / D
            dev = [v - mu for v in xs]
        else:
            dev = xs
        var = mpmath.fsum(d * d for d in dev) / D
        r = 1 / mpmath.sqrt(var + mpmath.mpf(float(np.float32(eps))))
        out = []
        for j, d in enumerate(dev):
            y = d * r
            if gamma is not None:
                gj = mpmath.mpf(float(gamma[j]))
                y *= (1 + gj) if gemma else gj
            if beta is not None:
                y += mpmath.mpf(float(beta[j]))
            out.append(+y)
        return out
