r"""Exact arithmetic of the oracle: what decides an element when float64 cannot.

* :func:`decide` -- rounds a float64 value with its error bound to a format where the whole
  interval rounds to one value (the compiled :func:`normcheck.oracle.fast.decide`);
* :class:`ExactRow` -- a row's statistics exactly from integers (Σx and Σx² of the scaled stored
  values); its elements by Fractions when √(v+ε) is rational, else by :func:`ziv`;
* :func:`ziv` -- mpmath interval arithmetic at rising precision until the enclosure rounds to one
  value (Ziv's strategy);
* :func:`mp_reference` -- the plain mpmath evaluation of the definition, the truth the tests
  compare against;
* :func:`on_beta` -- an element that sits on a power-of-two β, decided without either;
* :func:`two_sum`, :func:`check_eps`, :data:`ULP_RESOLUTION`, :data:`DEFAULT_EPS`.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np

from normcheck.errors import invalid
from normcheck.formats import Format

__all__ = ["DEFAULT_EPS", "ULP_RESOLUTION", "check_eps", "two_sum", "decide", "scaled_ints",
           "ExactRow", "on_beta", "ziv", "IvCtx", "mp_reference"]

DEFAULT_EPS = np.float32(1e-5)

ULP_RESOLUTION = 1e-6  # the fractional ULP error is exact to this many ulps


def check_eps(eps) -> float:
    """The kernel's ε as a float64 of its float32 value; InvalidArgument unless positive and
    finite."""
    try:
        e = np.float32(eps)
    except (TypeError, ValueError):
        raise invalid("eps", eps, "a positive finite float32", "pass e.g. np.float32(1e-5)") \
            from None
    if not (np.isfinite(e) and e > 0):
        raise invalid("eps", eps, "a positive finite float32 (ε > 0)",
                      "use the kernel's ε, e.g. np.float32(1e-5) or np.float32(1e-6)")
    return float(e)


def two_sum(a, b):
    """a + b = s + e exactly (Knuth's TwoSum, float64)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def decide(y, e, fmt: Format):
    """Round y to fmt where [y-e, y+e] settles both the rounded value and ulp(t) and e is below
    ULP_RESOLUTION ulp.  Returns (rounded values as float64, settled mask)."""
    from normcheck.oracle import fast as oracle_fast

    return oracle_fast.decide(y, e, fmt, ULP_RESOLUTION)


# ------------------------------------------------------------------------------------------------
# Exact fallback
# ------------------------------------------------------------------------------------------------
def scaled_ints(values):
    """Exact integers X_j and a shift K with values_j = X_j / 2**K."""
    fr = [float(v).as_integer_ratio() for v in values]
    K = max(d.bit_length() - 1 for _, d in fr)
    return [n << (K - (d.bit_length() - 1)) for n, d in fr], K


class ExactRow:
    """Exact statistics of one row; y_j decided by Fractions (rational r) or by mpmath interval
    arithmetic at increasing precision (irrational r: y_j is never on a rounding boundary)."""

    def __init__(self, row, g, b, eps, center, gemma):
        hi, lo = row
        vals = list(hi) if lo is None else [Fraction(float(h)) + Fraction(float(l))
                                            for h, l in zip(hi, lo)]
        if lo is None:
            X, K = scaled_ints(vals)
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

    def numer(self, j) -> Fraction:
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
        n = self.numer(j)
        bj = Fraction(float(self.b[j])) if self.b is not None else Fraction(0)
        if n == 0:
            y = bj
        elif self.rational_r is not None:
            y = n * self.rational_r + bj
        else:
            return ziv(lambda ctx: ctx.mpf(n) / ctx.sqrt(ctx.mpf(self.w)) + ctx.mpf(bj), fmt)
        return float(y), fmt.round(y)

    def stat(self, k, fmt: Format):
        if k == "mean":
            return float(self.mean), fmt.round(self.mean)
        if k == "var":
            return float(self.var), fmt.round(self.var)
        if self.rational_r is not None:
            return float(self.rational_r), fmt.round(self.rational_r)
        return ziv(lambda ctx: 1 / ctx.sqrt(ctx.mpf(self.w)), fmt)


def on_beta(beta: float, gain: float, dev: float, eps: float, fmt: Format):
    """(β, β) -- what :meth:`ExactRow.element` returns, bit for bit -- for y = β + δ with
    δ = γ·(x_j − μ)/√(var+ε) too small to move y off β, where the fast tiers cannot settle it
    (β a power of two is a binade's edge: which side y lies on decides ulp(y)); else None.

    ``gain`` >= |γ_j| and ``dev`` >= |x_j − μ| are bounds, so
    |δ| <= gain·dev/√ε (var >= 0), taken twice over for the float64 roundings of the bound.
    Where that is below a sixteenth of ulp64(β): β not 0 and a power of two, normal in ``fmt``
    and one of its values -- the exact element rounds to β in ``fmt`` (|δ| is far below half
    its ulp) and to β in float64 (the nearest float64 other than β is ulp64(β)/2 away).  The
    exact tier gives the same: Fractions (δ = 0, or √(var+ε) rational) give float64(y) = β;
    :func:`ziv` converges only on an enclosure that excludes β (ulp(a) == ulp(b) at a binade's
    edge) and is narrower than 2^-95·|y| at its first precision, far narrower than |δ| after,
    so its midpoint also rounds to β."""
    a = abs(beta)
    if not (a > 0 and math.isfinite(a)):
        return None
    m, e = math.frexp(a)
    if m != 0.5 or e - 1 < fmt.emin or a > fmt.max_finite:  # a power of two it holds
        return None
    bound = 2.0 * gain * dev / math.sqrt(eps)
    if not bound < math.ulp(a) / 16:
        return None
    return float(beta), float(beta)


def ziv(expr, fmt: Format, start_prec=96, max_prec=1 << 16):
    """Evaluate ``expr`` in mpmath interval arithmetic at rising precision until its enclosure
    rounds to one value of ``fmt`` and is narrower than ULP_RESOLUTION ulp."""
    prec = start_prec
    iv = mpmath.iv
    while prec <= max_prec:
        old = iv.prec
        iv.prec = prec
        try:
            val = expr(IvCtx(iv))
            a, b = mpmath.mp.make_mpf(val._mpi_[0]), mpmath.mp.make_mpf(val._mpi_[1])
        finally:
            iv.prec = old
        if fmt.round(a) == fmt.round(b) and fmt.ulp(a) == fmt.ulp(b):
            if float(b - a) <= ULP_RESOLUTION * fmt.ulp(a):
                mid = (mpmath.mpf(a) + mpmath.mpf(b)) / 2
                return float(mid), fmt.round(a)
        prec *= 2
    raise ArithmeticError("exact oracle did not converge (an exactly representable irrational?)")


class IvCtx:
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
