r"""The exact gradients of LayerNorm / RMSNorm (Gemma, the fused add), correctly rounded.

Maths, from the stored x, dy, γ (and the fused add's residual), with g = dy·γ' (γ' = γ, 1+γ for
Gemma, 1 without γ)::

    LayerNorm   x̂ = (x-μ)·r      dx = r·(g - mean(g) - x̂·mean(g·x̂))
    RMSNorm     x̂ = x·r          dx = r·(g - x̂·mean(g·x̂))
    both        dγ_j = Σ_rows dy·x̂     dβ_j = Σ_rows dy        (column sums over the rows)
    fused add   the same of h = x + residual (exact, or rounded to storage: "stored"); the
                gradient of x and of the residual is dx (+ dh, the residual stream's own gradient,
                when given)

Two conventions for the statistics, both exact functions of what a kernel receives:
``"recomputed"`` (μ and r = 1/√(v+ε) from x, r irrational in general) and ``"saved"`` (the mean
and rstd the forward kernel stored, float32 values, as real backward kernels read them: x̂ =
(x - mean)·rstd and dx = rstd·(...) are then rational).

How.  Every value is a dyadic rational, so each row's sums (Σx, Σx², Σg, Σg·x) are exact
integers over a power of two.  With recomputed statistics dx_j = P_j / (Q·√w) exactly (P_j, Q
integers, w = v + ε rational: r² = 1/w turns r³ into r/w); with saved ones dx_j = P_j / Q.
Tier 1 evaluates these in float64 — fl(P_j/Q) is correctly rounded (Python's integer division),
√ and / add three roundings: |y - t| <= 4u|y| — and decides the rounding as the forward oracle
does (:func:`normcheck.oracle.fast.decide`); the rest is exact: Fractions where √w is rational
(ties happen only then) and Ziv's strategy in mpmath interval arithmetic otherwise.  dγ with
recomputed statistics is a sum over rows of terms with different irrational r: tier 1 bounds the
float64 sum, the exact tier sums intervals at rising precision.  dβ and every saved-statistics
gradient are exact integer sums, rounded once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import mpmath
import numpy as np

from normcheck import formats, norms
from normcheck.errors import invalid
from normcheck.formats import Format
from normcheck.oracle.exact import check_eps, decide, two_sum, ziv
from normcheck.oracle.forward import Reference

__all__ = ["BackwardReference", "backward", "backward_from_y", "STATS", "mp_backward"]

STATS = ("recomputed", "saved")
_U = 2.0**-53


@dataclass
class BackwardReference:
    """dx (also the residual's gradient for a fused norm), dγ and dβ (None where the norm has
    no such parameter), each a :class:`normcheck.oracle.Reference`."""

    dx: Reference
    dgamma: Reference | None
    dbeta: Reference | None


# ------------------------------------------------------------------------------------------------
# Exact integers
# ------------------------------------------------------------------------------------------------
def _ints(a) -> tuple[np.ndarray, int]:
    """(I, K) with a == I / 2^K exactly: I an object array of Python ints (a finite)."""
    a = np.asarray(a, np.float64)
    m, e = np.frexp(a)
    mant = (m * 2.0**53).astype(np.int64)       # exact: |m| < 1
    shift = 53 - e.astype(np.int64)             # a = mant / 2^shift
    nz = mant != 0
    # K >= 0: values of 2^53 and above are integers (their shift is negative)
    K = max(int(shift[nz].max()), 0) if nz.any() else 0
    flat = [int(v) << (K - int(k)) if v else 0 for v, k in zip(mant.ravel(), shift.ravel())]
    out = np.empty(a.size, dtype=object)
    out[:] = flat
    return out.reshape(a.shape), K


def _div(P, Q) -> np.ndarray:
    """P / Q elementwise for integers P (an object array) and Q: the correctly rounded float64
    (±inf past the range)."""
    out = np.empty(len(P))
    for k, p in enumerate(P):
        try:
            out[k] = int(p) / Q
        except OverflowError:
            out[k] = math.copysign(math.inf, int(p) * (1 if Q > 0 else -1))
    return out


def _scaled(values, K_from, K_to):
    """Integers over 2^K_from re-expressed over 2^K_to (K_to >= K_from)."""
    return values * (1 << (K_to - K_from)) if K_to > K_from else values


# ------------------------------------------------------------------------------------------------
# Public entry point
# ------------------------------------------------------------------------------------------------
def backward(norm, x, dy, gamma=None, *, residual=None, dh=None, eps=np.float32(1e-5),
             stats="recomputed", mean=None, rstd=None, convention="exact", out=None,
             param_out=None, dbeta_out=None) -> BackwardReference:
    """The exact gradients of ``norm`` (a :class:`normcheck.norms.Norm` or its name).

    ``x``, ``dy`` [rows, cols] in the storage format; ``gamma`` [cols] (None: γ = 1, and no dγ);
    ``residual`` for fused norms (h = x + residual, ``convention`` exact or stored) and ``dh``
    the residual stream's gradient (optional); ``stats="saved"`` takes ``mean`` (LayerNorm) and
    ``rstd`` [rows] (float32, as the forward kernel wrote them).  ``out`` is dx's format (default
    x's), ``param_out`` dγ's (default float32) and ``dbeta_out`` dβ's (default param_out)."""
    n = norms.get(norm)
    x = _rows(x, "x")
    fmt = formats.of_dtype(x.dtype, "x.dtype")
    rows, cols = x.shape
    dy = _like(dy, "dy", x)
    if stats not in STATS:
        raise invalid("stats", stats, f"one of {', '.join(STATS)}",
                      "saved: pass the forward kernel's mean/rstd")
    if n.fused:
        res = _like(residual, "residual", x)
        if convention not in ("exact", "stored"):
            raise invalid("convention", convention, '"exact" or "stored"')
    elif residual is not None:
        raise invalid("residual", residual, f"None: {n.name} is not a fused norm")
    g = None
    if gamma is not None and n.has_gamma:
        g = np.asarray(gamma)
        if g.shape != (cols,):
            raise invalid("gamma.shape", g.shape, f"({cols},)")
        formats.of_dtype(g.dtype, "gamma.dtype")
    eps_q = Fraction(check_eps(eps))
    out_fmt = formats.get(out) if out is not None else fmt
    p_fmt = formats.get(param_out) if param_out is not None else formats.FP32
    b_fmt = formats.get(dbeta_out) if dbeta_out is not None else p_fmt
    if stats == "saved":
        need = ["rstd"] + (["mean"] if n.centred else [])
        for name, v in (("mean", mean), ("rstd", rstd)):
            if name in need and (v is None or np.shape(v) != (rows,)):
                raise invalid(name, v, f"the forward kernel's {name}, [{rows}] float32",
                              "or use stats='recomputed'")
    # the rows the norm normalises (exact values as ints), and the gradient's integer form
    if n.fused:
        if convention == "stored":
            hx = fmt.round_pair(*two_sum(x.astype(np.float64), res.astype(np.float64)))
            H, KH = _ints(hx)
        else:
            X1, K1 = _ints(x.astype(np.float64))
            X2, K2 = _ints(res.astype(np.float64))
            KH = max(K1, K2)
            H = _scaled(X1, K1, KH) + _scaled(X2, K2, KH)
    else:
        H, KH = _ints(x.astype(np.float64))
    DY, KDY = _ints(dy.astype(np.float64))
    if g is not None:
        GM, KGM = _ints(g.astype(np.float64))
        if n.gemma:
            GM = GM + (1 << KGM)
    else:
        GM, KGM = np.full(cols, 1, dtype=object), 0
    G = DY * GM[None, :]
    KG = KDY + KGM
    DH = None
    if dh is not None:
        dhv = _like(dh, "dh", x)
        DH, KDH = _ints(dhv.astype(np.float64))
    dx_t, dx_e, exact_rows = [], [], []  # per row: float64 dx, its bound, the exact quantities
    for i in range(rows):
        row = _Row(H[i], KH, G[i], KG, DY[i], KDY, n.centred, eps_q,
                   stats, None if mean is None else mean[i], None if rstd is None else rstd[i])
        y, e = row.dx_float()
        if DH is not None:  # + dh: one more rounding
            y = y + _div(DH[i], 1 << KDH)
            e = e + _U * np.abs(y)
        dx_t.append(y)
        dx_e.append(e)
        exact_rows.append(row)
    y = np.array(dx_t)
    e = np.array(dx_e)
    r, ok = decide(y, e, out_fmt)
    exact = y.copy()
    slow = ~ok
    rounded = r.copy()
    for i, j in zip(*np.nonzero(~ok)):
        extra = Fraction(int(DH[i, j]), 1 << KDH) if DH is not None else Fraction(0)
        exact[i, j], rounded[i, j] = exact_rows[i].dx_exact(j, out_fmt, extra)
    dx_ref = Reference(out_fmt, exact, rounded.astype(out_fmt.dtype), slow)
    dgamma = _dgamma(exact_rows, p_fmt) if g is not None else None
    dbeta = _dbeta(DY, KDY, b_fmt) if n.reads_beta else None
    return BackwardReference(dx_ref, dgamma, dbeta)


def backward_from_y(norm, y, dy, gamma, beta=None, *, rstd, out=None, param_out=None,
                    dbeta_out=None) -> BackwardReference:
    """The exact gradients of a backward that reads the forward's output y instead of x (Apex's
    memory-efficient LayerNorm/RMSNorm backward): x̂ = (y - β)/γ' from the stored y, β, γ
    (γ' = 1+γ for Gemma) and the saved ``rstd``; then dx = rstd·(g - mean(g) - x̂·mean(g·x̂)),
    dγ = Σ dy·x̂, dβ = Σ dy.  Every quantity is rational: float64 with a bound decides almost
    every element, Fractions the rest."""
    n = norms.get(norm)
    y = _rows(y, "y")
    fmt = formats.of_dtype(y.dtype, "y.dtype")
    rows, cols = y.shape
    dy = _like(dy, "dy", y)
    if gamma is None or np.shape(gamma) != (cols,):
        raise invalid("gamma", gamma, f"the [{cols}] γ the forward applied (x̂ = (y - β)/γ)")
    r = np.asarray(rstd, np.float64)
    if r.shape != (rows,) or not np.all(np.isfinite(r)):
        raise invalid("rstd", rstd, f"the saved rstd, [{rows}] finite float32")
    gf = np.asarray(gamma).astype(np.float64) + (1.0 if n.gemma else 0.0)
    if np.any(gf == 0):
        raise invalid("gamma", "<γ' = 0 somewhere>", "γ' != 0 everywhere: x̂ = (y - β)/γ' is "
                      "undefined where it is 0", "a from-y backward cannot be used there")
    b = np.zeros(cols) if beta is None or not n.centred else np.asarray(beta, np.float64)
    out_fmt = formats.get(out) if out is not None else fmt
    p_fmt = formats.get(param_out) if param_out is not None else formats.FP32
    b_fmt = formats.get(dbeta_out) if dbeta_out is not None else p_fmt
    Y, KY = _ints(y.astype(np.float64))
    B, KB = _ints(b)
    K1 = max(KY, KB)
    YB = _scaled(Y, KY, K1) - _scaled(B, KB, K1)[None, :]       # y - β, over 2^K1
    GM, KG = _ints(gf)
    DY, KDY = _ints(dy.astype(np.float64))
    R, KR = _ints(r)
    D = cols
    SG = (DY * GM[None, :]).sum(axis=1)                            # Σg · 2^(KDY+KG)
    SDYB = (DY * YB).sum(axis=1)                                   # Σ g·x̂ · 2^(KDY+K1)
    with np.errstate(over="ignore", invalid="ignore"):
        yb = _div(YB.ravel(), 1 << K1).reshape(rows, cols)
        xh = yb / gf[None, :]
        g = dy.astype(np.float64) * gf[None, :]
        gbar = np.array([int(v) for v in SG], dtype=object)
        gbar = _div(gbar, D << (KDY + KG)) if n.centred else np.zeros(rows)
        c = _div(np.array([int(v) for v in SDYB], dtype=object), D << (KDY + K1))
        t1, t2, t3 = g, gbar[:, None], xh * c[:, None]
        val = r[:, None] * (t1 - t2 - t3)
        e = 6.01 * _U * np.abs(r[:, None]) * (np.abs(t1) + np.abs(t2) + np.abs(t3))
    bad = ~np.isfinite(val)
    val = np.where(bad, 0.0, val)
    e = np.where(bad, np.inf, e)
    rounded, ok = decide(val, e, out_fmt)
    exact = val.copy()
    for i, j in zip(*np.nonzero(~ok)):
        q = Fraction(int(R[i]), 1 << KR) * (
            Fraction(int(DY[i, j]) * int(GM[j]), 1 << (KDY + KG))
            - (Fraction(int(SG[i]), D << (KDY + KG)) if n.centred else 0)
            - Fraction(int(YB[i, j]) << KG, int(GM[j]) << K1)
            * Fraction(int(SDYB[i]), D << (KDY + K1)))
        exact[i, j], rounded[i, j] = float(q), out_fmt.round(q)
    dx_ref = Reference(out_fmt, exact, rounded.astype(out_fmt.dtype), ~ok)
    dg_exact, dg_round = np.empty(cols), np.empty(cols)
    S = (DY * YB).sum(axis=0)
    for j in range(cols):
        q = Fraction(int(S[j]) << KG, int(GM[j]) << (KDY + K1))
        dg_exact[j], dg_round[j] = float(q), p_fmt.round(q)
    dgamma = Reference(p_fmt, dg_exact, dg_round.astype(p_fmt.dtype), np.zeros(cols, bool))
    dbeta = _dbeta(DY, KDY, b_fmt) if n.centred else None
    return BackwardReference(dx_ref, dgamma, dbeta)


class _Row:
    """One row's exact quantities: dx_j = P_j / (Q·√w) (recomputed) or P_j / Q (saved), and
    dy·x̂ as T_j / (Q_t·√w) (or T_j / Q_t)."""

    def __init__(self, H, KH, G, KG, DY, KDY, centred, eps_q, stats, mean_s, rstd_s):
        D = len(H)
        self.D = D
        self.saved = stats == "saved"
        if not self.saved:
            Sx = int(sum(H))
            Sxx = int(sum(h * h for h in H))
            SG = int(sum(G))
            SGX = int(sum(gg * h for gg, h in zip(G, H)))
            if centred:
                v = Fraction(D * Sxx - Sx * Sx, D * D << (2 * KH))
                dev = D * H - Sx                      # (x-μ) = dev / (D·2^KH)
                dev_den = D << KH
                c = Fraction(D * SGX - SG * Sx, D * D << (KG + KH))   # mean(g·(x-μ))
                gm = D * G - SG                       # g - ḡ = gm / (D·2^KG)
                gm_den = D << KG
            else:
                v = Fraction(Sxx, D << (2 * KH))
                dev = H
                dev_den = 1 << KH
                c = Fraction(SGX, D << (KG + KH))
                gm = G
                gm_den = 1 << KG
            w = v + eps_q
            self.w = w
            # N_j = gm_j/gm_den - dev_j·c/(w·dev_den) = (A·gm_j - B·dev_j) / den
            a = Fraction(1, gm_den)
            b = c / (w * dev_den)
            den = a.denominator * b.denominator
            A = a.numerator * b.denominator
            B = b.numerator * a.denominator
            self.P = A * gm - B * dev
            self.Q = den
            # dy·x̂ = dy·dev·r: T_j / (Q_t·√w)
            self.T = DY * dev
            self.Qt = dev_den << KDY
        else:
            R, KR = _ints(np.array([float(rstd_s)]))
            R, KR = int(R[0]), KR
            if centred:
                M, KM = _ints(np.array([float(mean_s)]))
                M, KM = int(M[0]), KM
                K = max(KH, KM)
                XM = _scaled(H, KH, K) - (M << (K - KM))  # x - mean over 2^K
            else:
                K = KH
                XM = H
            # x̂ = XM·R / 2^(K+KR);  g = G / 2^KG
            SG = int(sum(G)) if centred else 0
            S3 = int(sum(gg * xm for gg, xm in zip(G, XM)))    # Σ g·x̂ · 2^(KG+K+KR) / R
            # dx_j = R/2^KR · [ (D·G_j - SG)/(D·2^KG) - XM_j·R·S3·R / (D·2^(KG+2K+2KR)) ]
            #      = R·[ (D·G_j - SG)·2^(2K+2KR) - XM_j·R²·S3 ] / (D·2^(KR+KG+2K+2KR))
            gm = D * G - SG if centred else D * G
            self.P = R * (gm * (1 << (2 * K + 2 * KR)) - XM * (R * R * S3))
            self.Q = D << (KR + KG + 2 * K + 2 * KR)
            self.w = None
            self.T = DY * XM * R
            self.Qt = 1 << (KDY + K + KR)

    def dx_float(self):
        """(y, e): float64 values and a bound on |y - dx|."""
        y = _div(self.P, self.Q)                        # correctly rounded

        if self.w is None:
            e = _U * np.abs(y)
        else:
            y = y / math.sqrt(float(self.w))
            e = 4.01 * _U * np.abs(y)
        bad = ~np.isfinite(y)
        if bad.any():
            y = np.where(bad, 0.0, y)
            e = np.where(bad, np.inf, e)
        return y, e

    def dx_exact(self, j, fmt: Format, extra=Fraction(0)):
        num = Fraction(int(self.P[j]), self.Q)
        if self.w is None:
            t = num + extra
            return float(t), fmt.round(t)
        rr = _rational_sqrt(self.w)
        if rr is not None:
            t = num / rr + extra
            return float(t), fmt.round(t)
        return ziv(lambda ctx: ctx.mpf(num) / ctx.sqrt(ctx.mpf(self.w)) + ctx.mpf(extra), fmt)

    def terms_float(self):
        """dy·x̂ of the row in float64, and a bound on each."""
        t = _div(self.T, self.Qt)
        if self.w is None:
            return t, _U * np.abs(t)
        t = t / math.sqrt(float(self.w))
        return t, 4.01 * _U * np.abs(t)


def _rational_sqrt(w: Fraction):
    n, d = w.numerator, w.denominator
    rn, rd = math.isqrt(n), math.isqrt(d)
    return Fraction(rn, rd) if rn * rn == n and rd * rd == d else None


def _dgamma(rows_, fmt: Format) -> Reference:
    ts, es = zip(*(r.terms_float() for r in rows_))
    t = np.array(ts)
    e = np.array(es)
    R = t.shape[0]
    with np.errstate(over="ignore", invalid="ignore"):
        # cascaded TwoSum over the rows (Ogita, Rump & Oishi's Sum2): |s - Σt| <= u|Σt| +
        # γ²_R·Σ|t|; plus each term's own bound
        s = np.zeros(t.shape[1])
        c = np.zeros(t.shape[1])
        for i in range(R):
            ss = s + t[i]
            bb = ss - s
            c += (s - (ss - bb)) + (t[i] - bb)
            s = ss
        s = s + c
        gR = R * _U / (1 - R * _U)
        ea = e.sum(axis=0)
        bound = (_U * (np.abs(s) + ea) * (1 + 2 * _U) + gR * gR * np.abs(t).sum(axis=0) +
                 ea * (1 + gR)) * (1 + 2.0**-20)
    bound = np.where(np.isfinite(s), bound, np.inf)
    s = np.where(np.isfinite(s), s, 0.0)
    r, ok = decide(s, bound, fmt)
    exact = s.copy()
    rounded = r.copy()
    for j in np.nonzero(~ok)[0]:
        exact[j], rounded[j] = _column_exact(rows_, int(j), fmt)
    return Reference(fmt, exact, rounded.astype(fmt.dtype), ~ok)


def _column_exact(rows_, j, fmt: Format):
    """Σ_rows dy·x̂ of column j, exactly.  The terms are c_k/√w_k (c_k, w_k rational; w_k a
    square for saved statistics or perfect squares): the rational ones are summed in Fractions,
    the others grouped by their radical -- rows whose w are equal, or whose ratio is the square
    of a rational, share one √w -- and their coefficients summed exactly.  If every group
    cancels, the column is that rational sum (a tie reached through cancellation is decided
    exactly); otherwise it is irrational (square roots of distinct square-free numbers are
    linearly independent over the rationals) and Ziv's strategy converges."""
    rational = Fraction(0)
    groups = {}
    for r in rows_:
        num = Fraction(int(r.T[j]), r.Qt)
        if num == 0:
            continue
        if r.w is None:
            rational += num
            continue
        rr = _rational_sqrt(r.w)
        if rr is not None:
            rational += num / rr
        else:
            groups[r.w] = groups.get(r.w, Fraction(0)) + num
    irr = [(c, w) for w, c in groups.items() if c != 0]
    if not irr:
        return float(rational), fmt.round(rational)

    def evaluate(terms, max_prec):
        def expr(ctx):
            acc = ctx.mpf(rational)
            for num, w in terms:
                acc = acc + ctx.mpf(num) / ctx.sqrt(ctx.mpf(w))
            return acc
        return ziv(expr, fmt, max_prec=max_prec)

    try:
        return evaluate(irr, 1 << 12)
    except ArithmeticError:
        pass
    # no convergence: the irrational groups may cancel across rows whose w differ by the square
    # of a rational -- merge those (rare: only here) and decide exactly if all cancel
    classes = []  # [w, c]: c/√w
    for c, w in irr:
        for cl in classes:
            q = _rational_sqrt(cl[0] / w)  # c/√w = c·√(w0/w)/√w0
            if q is not None:
                cl[1] += c * q
                break
        else:
            classes.append([w, c])
    irr = [(c, w) for w, c in classes if c != 0]
    if not irr:
        return float(rational), fmt.round(rational)
    return evaluate(irr, 1 << 16)


def _dbeta(DY, KDY, fmt: Format) -> Reference:
    S = DY.sum(axis=0)
    exact = np.empty(S.shape)
    rounded = np.empty(S.shape)
    for j, v in enumerate(S):
        q = Fraction(int(v), 1 << KDY)
        exact[j] = float(q)
        rounded[j] = fmt.round(q)
    return Reference(fmt, exact, rounded.astype(fmt.dtype), np.zeros(S.shape, bool))


def _rows(x, name):
    if not isinstance(x, np.ndarray) or x.ndim != 2 or x.shape[1] == 0:
        raise invalid(name, x, "a 2-D numpy array [rows, cols] of float32, float16 or bfloat16",
                      "reshape it to (rows, cols)")
    formats.of_dtype(x.dtype, f"{name}.dtype")
    if not np.all(np.isfinite(x.astype(np.float64))):
        raise invalid(name, "<array with NaN or inf>", "finite rows (the exact backward of a "
                      "non-finite row is NaN throughout)", "check the forward pass first")
    return x


def _like(a, name, x):
    if not isinstance(a, np.ndarray) or a.shape != x.shape:
        raise invalid(name, a, f"an array of x's shape {x.shape}")
    formats.of_dtype(a.dtype, f"{name}.dtype")
    if not np.all(np.isfinite(a.astype(np.float64))):
        raise invalid(name, "<array with NaN or inf>", "finite values")
    return a


# ------------------------------------------------------------------------------------------------
# The plain mpmath truth (tests)
# ------------------------------------------------------------------------------------------------
def mp_backward(x_row, dy_row, gamma=None, *, eps=np.float32(1e-5), centred=True, gemma=False,
                mean=None, rstd=None, prec=256):
    """dx of one row and its dy·x̂ terms straight from the definition in mpmath at ``prec`` bits
    (saved statistics when ``rstd`` is given): (dx list, dyxhat list)."""
    with mpmath.workprec(prec):
        xs = [mpmath.mpf(v.numerator) / v.denominator if isinstance(v, Fraction) else
              mpmath.mpf(float(v)) for v in x_row]
        dys = [mpmath.mpf(float(v)) for v in dy_row]
        D = len(xs)
        gs = []
        for j in range(D):
            gj = mpmath.mpf(1) if gamma is None else mpmath.mpf(float(gamma[j]))
            if gemma and gamma is not None:
                gj = 1 + gj
            gs.append(dys[j] * gj)
        if rstd is not None:
            r = mpmath.mpf(float(rstd))
            mu = mpmath.mpf(float(mean)) if centred else mpmath.mpf(0)
        else:
            mu = mpmath.fsum(xs) / D if centred else mpmath.mpf(0)
            var = mpmath.fsum((v - mu) ** 2 for v in xs) / D
            r = 1 / mpmath.sqrt(var + mpmath.mpf(float(np.float32(eps))))
        xh = [(v - mu) * r for v in xs]
        gbar = mpmath.fsum(gs) / D if centred else mpmath.mpf(0)
        gx = mpmath.fsum(a * b for a, b in zip(gs, xh)) / D
        dx = [r * (gs[j] - gbar - xh[j] * gx) for j in range(D)]
        return dx, [dys[j] * xh[j] for j in range(D)]
