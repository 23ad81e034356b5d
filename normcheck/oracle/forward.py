r"""The exact result of LayerNorm / RMSNorm rows, correctly rounded to the output format.

Maths (docs/DESIGN.md, "The exact function"), from the values *as stored* and the float32 ε the kernel
receives::

    LayerNorm   μ = Σx/D,  v = Σ(x-μ)²/D,  r = 1/√(v+ε),  y = γ·(x-μ)·r + β
    RMSNorm     v = Σx²/D, r = 1/√(v+ε),  y = γ·x·r          (Gemma: (1+γ) instead of γ)
    fused add   h = x + residual exactly; "exact" normalises h, "stored" normalises h rounded to
                the storage format (vLLM); either way the kernel writes h rounded.

How (Ziv's strategy, as correctly rounded maths libraries do):

1. **Fast path** (compiled, multi-threaded: :mod:`normcheck.oracle.fast`, whose C++ header holds
   the error analysis).  Every row in float64 with a rigorous running error bound per element:
   sums are blocked (16 lanes, then balanced trees: every term passes through L ≈ 24 roundings at
   D = 4096 where a sequential sum would give 4096), the mean is refined by a second pass over
   the deviations, and every rounding in the chain is charged to the bound.  Elements it cannot
   settle are redone in double-double (tier 2) in the same call.
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

from dataclasses import dataclass, field

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
    "saved_statistics",
    "normalised_parts",
    "normalised_rows",
]

from normcheck.oracle.exact import (DEFAULT_EPS, ULP_RESOLUTION, ExactRow, check_eps, decide,
                                    mp_reference, on_beta, two_sum)


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

    def ulp_error_scaled(self, actual, plain=None) -> np.ndarray:
        """|actual - t| in ulps of max(|γ·x̂|, |β|): a fairer yardstick where β nearly cancels the
        normalised term and ulp(t) is tiny.  ``plain``: :meth:`ulp_error`, if already known."""
        a = np.asarray(actual).astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(a - self.exact) / self.fmt.ulp_array(np.maximum(self.scale,
                                                                         np.abs(self.exact)))
        if plain is None:
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
    return _normalise(_Pair(xin), _vec(gamma, "gamma", xin.shape[1]),
                      _vec(beta, "beta", xin.shape[1]), check_eps(eps), True, False,
                      _out(out, xin), grid16=xin.dtype == np.float16)


def rmsnorm(x, gamma=None, *, eps=DEFAULT_EPS, out=None, gemma=False) -> NormReference:
    """Exact RMSNorm; ``gemma=True`` scales by (1+γ) as Gemma does."""
    xin = _rows(x, "x")
    return _normalise(_Pair(xin), _vec(gamma, "gamma", xin.shape[1]), None,
                      check_eps(eps), False, bool(gemma), _out(out, xin),
                      grid16=xin.dtype == np.float16)


def add_layernorm(x, residual, gamma=None, beta=None, *, eps=DEFAULT_EPS, convention="exact",
                  out=None, h=None) -> FusedReference:
    """Exact fused residual add + LayerNorm: h = x + residual, y = LayerNorm(h) where h is the
    exact sum (``convention="exact"``, FlashInfer) or the sum rounded to h's format
    (``"stored"``, vLLM); ``h``: that format (x's by default; Mamba's residual stream is fp32
    beside bf16 rows)."""
    xin = _rows(x, "x")
    return _fused(xin, residual, gamma, beta, eps, convention, out, True, False, h)


def add_rmsnorm(x, residual, gamma=None, *, eps=DEFAULT_EPS, convention="exact", out=None,
                gemma=False, h=None) -> FusedReference:
    """Exact fused residual add + RMSNorm (see :func:`add_layernorm` for the conventions)."""
    xin = _rows(x, "x")
    return _fused(xin, residual, gamma, None, eps, convention, out, False, bool(gemma), h)


def for_norm(norm, x, gamma=None, beta=None, *, residual=None, eps=DEFAULT_EPS,
             convention="exact", out=None, h=None):
    """The reference of ``norm`` (a :class:`normcheck.norms.Norm` or its name: "layernorm",
    "rmsnorm", "gemma_rmsnorm", "add_layernorm", "add_rmsnorm") on these rows: one entry point
    for callers that hold the norm as data.  An affine-free norm ignores γ/β; the ``hf``
    reference is the correctly rounded γ·round_S(x̂) (normcheck.norms); ``h``: the format a
    fused norm's sum is stored in (x's by default)."""
    from normcheck import norms

    n = norms.get(norm)
    g = gamma if n.has_gamma else None
    b = beta if n.reads_beta else None
    if n.reference == "hf":
        return _hf(n, x, g, residual, eps, convention, out)
    if n.fused:
        f = add_layernorm if n.centred else add_rmsnorm
        kw = {} if n.centred else {"gemma": n.gemma}
        args = (x, residual, g, b) if n.centred else (x, residual, g)
        return f(*args, eps=eps, convention=convention, out=out, h=h, **kw)
    if n.centred:
        return layernorm(x, g, b, eps=eps, out=out)
    return rmsnorm(x, g, eps=eps, out=out, gemma=n.gemma)


def saved_statistics(norm, x, *, eps=DEFAULT_EPS):
    """(mean or None, rstd): each row's exact statistics correctly rounded to float32 — what a
    sound forward kernel saves for the backward pass — without computing y."""
    from normcheck import norms

    n = norms.get(norm)
    if n.fused:
        raise invalid("norm", n.name, "a norm without the fused add (the statistics of h: pass "
                      "h = x + residual as x)")
    xin = _rows(x, "x")
    st = _statistics(_Pair(xin), check_eps(eps), n.centred)
    return (st["mean"].rounded if n.centred else None), st["rstd"].rounded


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


def _fused(xin, residual, gamma, beta, eps, convention, out, center, gemma, h=None):
    res = _rows(residual, "residual")
    if res.shape != xin.shape:
        raise invalid("residual", res, f"the shape of x, {xin.shape}",
                      "pass one residual row per input row")
    if convention not in ("exact", "stored"):
        raise invalid("convention", convention, '"exact" (normalise x + residual exactly) or '
                      '"stored" (normalise the sum rounded to storage)')
    storage = formats.get(h) if h is not None else formats.of_dtype(xin.dtype, "x.dtype")
    a = xin.astype(np.float64)
    b = res.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s, e = two_sum(a, b)
        e = np.where(np.isfinite(s), e, 0.0)
    h_rounded = storage.round_pair(s, e)
    h_ref = Reference(storage, s, h_rounded.astype(storage.dtype), np.zeros(s.shape, bool))
    pair = _Pair(s, e) if convention == "exact" else _Pair(h_rounded)
    cols = xin.shape[1]
    ref = _normalise(pair, _vec(gamma, "gamma", cols), _vec(beta, "beta", cols), check_eps(eps),
                     center, gemma, _out(out, xin), cls=FusedReference,
                     grid16=storage is formats.FP16 if convention == "stored" else
                     (xin.dtype == np.float16 and res.dtype == np.float16))
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
    """Rows given as exact sums src + lo: ``src`` as stored (float64, float32, float16 or
    bfloat16), ``lo`` float64 or None."""

    def __init__(self, src, lo=None):
        self.src = src
        self.lo = None if lo is None or not np.any(lo) else lo

    @property
    def shape(self):
        return self.src.shape

    def hi(self, rows=slice(None)):
        """The rows ``rows`` of src as float64."""
        return np.asarray(self.src[rows], np.float64)

    def row(self, i):
        """Row i as (hi, lo or None)."""
        return self.hi(i), None if self.lo is None else self.lo[i]


def _normalise(pair: _Pair, g, b, eps: float, center: bool, gemma: bool, out: Format,
               cls=None, grid16=False):
    """Reference of a normalisation of the rows ``pair``; ``grid16`` says every row value is an
    fp16 value (or a sum of two, exactly), i.e. a multiple of 2^-24 below 2^17.  Tiers 1 and 2
    run compiled (:mod:`normcheck.oracle.fast`), tier 3 here."""
    from normcheck.oracle import fast as oracle_fast

    rows, cols = pair.shape
    geff = None if g is None else (1.0 + g if gemma else g)
    mode = "grid" if grid16 and pair.lo is None else ("dd" if out.precision > 16 else "tree")
    special = None  # columns with a non-finite γ_j or β_j: the IEEE value of γ·x̂ + β
    gz, bz = g, b
    if g is not None and not np.all(np.isfinite(g)):
        special = ~np.isfinite(g)
        gz = np.where(special, 0.0, g)
    if b is not None and not np.all(np.isfinite(b)):
        special = ~np.isfinite(b) if special is None else special | ~np.isfinite(b)
        bz = np.where(np.isfinite(b), b, 0.0)
    fast = oracle_fast.rows(pair.src, pair.lo, gz, bz, eps, center, gemma, mode, out,
                            xhat=special is not None, resolution=ULP_RESOLUTION)
    exact, rounded, status = fast["y"], fast["r"], fast["status"]
    if fast["nonfinite"]:
        bad = status[:, 0] == oracle_fast.STATUS["nonfinite"]
    else:
        bad = np.zeros(rows, bool)
    if fast["nonfinite"]:  # the IEEE value of the formula (module docstring)
        val = _nonfinite_rows(pair.hi(bad), geff, center)
        exact[bad] = val
        rounded[bad] = out.cast(val)
    if special is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            val = (geff[special] if geff is not None else 1.0) * fast["xhat"][:, special] + \
                (b[special] if b is not None else 0.0)
        val[bad] = np.nan
        exact[:, special] = val
        rounded[:, special] = out.cast(val)
        status[:, special] = oracle_fast.STATUS["tier1"]
    if fast["nonfinite"]:
        status[bad] = oracle_fast.STATUS["tier1"]
    slow = status != oracle_fast.STATUS["tier1"]
    todo = np.nonzero(status == oracle_fast.STATUS["unsettled"]) if fast["unsettled"] \
        else ((), ())
    rows_exact, spreads = {}, {}
    for i, j in zip(*todo):  # tier 3: exact
        if b is not None and center and not gemma:  # LayerNorm's β: where y cannot leave it
            hit = on_beta(float(b[j]), 1.0 if g is None else abs(float(g[j])),
                          _spread(pair, i, spreads), eps, out)
            if hit is not None:
                exact[i, j], rounded[i, j] = hit
                continue
        if i not in rows_exact:
            rows_exact[i] = ExactRow(pair.row(i), g, b, eps, center, gemma)
        exact[i, j], rounded[i, j] = rows_exact[i].element(j, out)
    ref = (cls or NormReference)(out, exact, rounded, slow, b)
    ref._stats_source = (pair, eps, center)
    return ref


def _spread(pair, i, spreads) -> float:
    """A bound on |x_j − μ| over row i: its spread (μ lies within it), widened by twice its
    largest |lo| where the row is hi + lo; kept in ``spreads``."""
    d = spreads.get(i)
    if d is None:
        hi, lo = pair.row(i)
        d = float(hi.max() - hi.min()) + (0.0 if lo is None else 2.0 * float(np.abs(lo).max()))
        spreads[i] = d
    return d


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
    from normcheck.oracle import fast as oracle_fast

    rows, cols = pair.shape
    keys = ("mean", "var", "rstd") if center else ("var", "rstd")
    st = oracle_fast.rows(pair.src, pair.lo, None, None, eps, center, False,
                          "dd", formats.FP32,
                          values=False, stats=True, resolution=ULP_RESOLUTION)["stats"]
    bad = st[:, 6] != 0
    out = {}
    exact_rows = {}
    with np.errstate(invalid="ignore", over="ignore"):
        # the IEEE mean: ±inf with infinities of one sign, else NaN
        ieee_sum = pair.hi(bad).sum(axis=1) if np.any(bad) else np.zeros(0)
    for n, k in enumerate(keys):
        col = {"mean": 0, "var": 2, "rstd": 4}[k]
        ex = st[:, col].copy()
        r_val, ok = decide(ex, st[:, col + 1], formats.FP32)
        if np.any(bad):
            nan_rows = np.isnan(ieee_sum) | center
            if k == "mean":
                special = ieee_sum
            else:  # LayerNorm: x - μ is NaN; RMSNorm: Σx² = inf, rstd = 0
                special = np.where(nan_rows, np.nan, np.inf if k == "var" else 0.0)
            ex[bad] = special
            r_val[bad], ok[bad] = special, True
        slow = ~ok
        for i in np.nonzero(~ok)[0]:
            if i not in exact_rows:  # one exact row serves all three statistics
                exact_rows[i] = ExactRow(pair.row(i), None, None, eps, center, False)
            ex[i], r_val[i] = exact_rows[i].stat(k, formats.FP32)
        out[k] = Reference(formats.FP32, ex, r_val.astype(np.float32), slow)
    return out


def normalised_parts(ref, x, residual=None, convention=None):
    """The rows a kernel normalises as (a, b or None), kept as stored: the rows are a + b
    summed in float64 -- x, the fused sum h as stored, or x + residual (exact h)."""
    if residual is None:
        return x, None
    if convention == "stored":
        return ref.h.rounded, None
    return x, residual


def normalised_rows(ref, x, residual=None, convention=None):
    """The rows a kernel normalises, as float64: x, or the fused sum h (exact, or as stored)."""
    a, b = normalised_parts(ref, x, residual, convention)
    return a.astype(np.float64) if b is None else a.astype(np.float64) + b.astype(np.float64)
