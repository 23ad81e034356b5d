r"""A-priori error bounds of the built-in kernels, from a first-order rounding-error analysis.

Used by the tests and the property suite to state "this kernel is accurate" with a bound that
comes from an analysis, not from a measurement.  For a built-in variant and a row, the answer y_j
of element j must satisfy

    |y_j - t_j| <= ulp_S(|t_j| + E_j)/2 + E_j

(the final rounding to the storage format S, plus E_j, a bound on the error of the float value
the kernel rounds).  E_j follows the kernel's arithmetic (Higham, *Accuracy and Stability of
Numerical Algorithms*, ch. 3–4; Chan, Golub & LeVeque 1983 for the variance):

    E_j = |γ_j|·r·(e_μ + a·|x_j - μ|) + |γ_j·x̂_j|·ρ_r + u·(2|γ_j·x̂_j| + |β_j|)

* m = ⌈D/B⌉ + log₂B + 2 roundings on the longest path of a block sum (each thread adds
  ⌈D/B⌉ elements in turn, then a tree of log₂B levels, then the division by D);
* e_μ = m·u_Σ·mean|x| bounds the computed mean's error (γ_m·Σ|x|/D, Higham (4.4)); Welford's
  running mean (one division per update) gets twice that;
* a: rounding of x - μ̃ (u, plus u_S where the deviation is stored in S);
* ρ_r, the relative error of rstd, is (1-δ)^(-1/2) - 1 for a relative error δ of var+ε (about
  δ/2; unbounded once δ reaches 1), plus one rounding of the square root:
  - two-pass: Σ(x-μ̃)² has relative error (m+3)·u_Σ (+ 3u_S when the squares are formed in S),
    and the shifted mean adds D·e_μ² (Σ(x-μ̃)² = Σ(x-μ)² + D(μ̃-μ)²);
  - Welford: the updating algorithm's N·κ·u (Chan, Golub & LeVeque), as 4·m·(1+κ)·u_Σ with
    κ = |μ|/σ;
  - naive: E[x²] - E[x]² has absolute error (m+3)·u_Σ·2·mean(x²) + 2|μ|e_μ, i.e. relative error
    ∝ m·u·(1+κ²): the catastrophic cancellation;
  - RMSNorm: Σx² with relative error (m+1)·u_Σ (+ u_S for squares formed in S);
* u = 2⁻²⁴ (float), u_S the unit roundoff of the storage format, u_Σ the unit roundoff the sums
  are rounded to (u, or u_S for STORAGE_ACCUMULATE);
* the fast-math flavour's rsqrtf adds 3u (2 ulp on the GPU, 2 roundings on the CPU).

Underflow adds an absolute 2⁻¹⁴⁹ (plus the smallest subnormal of S where values are rounded to
S) to each square, so as much to the variance, as much to the mean and the deviations, and
three to y.  E_j is doubled to cover the
second-order terms the analysis drops.  The bound assumes nothing overflows (:func:`applies`): a
square formed in fp16 from |x| >= 256 is a failure, not an error to bound.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["sound_bound_of", "SoundBound", "H_ROUNDING", "error_bound", "statistics_bound",
           "within_bound", "applies", "SAFETY", "sound_bound", "sound_statistics",
           "sound_limit", "quantum", "SOUND_SAFETY", "sound_backward", "sound_statistic_limit"]

U = 2.0**-24
#: The block size a bound assumes unless told: the built-in kernels' (normcheck.kernels takes it
#: from here).
BLOCK = 256
#: Multiplies E_j: covers the second-order terms of the first-order analysis.
SAFETY = 2.0


def _row_terms(v, x, eps, block):
    """The per-row quantities of the analysis: e_μ, ρ_r, r, a and the deviations."""
    rows, D = x.shape
    uS = 2.0 ** -v.fmt.precision
    order = v.order or "upcast_square"
    u_sum = uS if order == "storage_accumulate" else U
    sq_in_s = order == "square_upcast"
    m = math.ceil(D / block) + math.log2(block) + 2
    center = v.norm in ("layernorm", "add_layernorm")
    eps = float(np.float32(eps))
    tiny = 2.0**-149 + (v.fmt.min_subnormal if order != "upcast_square" else 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if center:
            mu = x.mean(axis=1, keepdims=True)
            dev = x - mu
            S = (dev * dev).sum(axis=1, keepdims=True)
            var = S / D
            sigma = np.sqrt(var)
            e_mu = m * u_sum * np.abs(x).mean(axis=1, keepdims=True)
            if order == "storage_accumulate":
                e_mu = e_mu + uS * np.abs(mu)
            a = U + (uS if order == "storage_accumulate" else 0.0)
            if v.algorithm == "two_pass":
                rel_S = (m + 3) * u_sum + (3 * uS if sq_in_s else 0.0)
                abs_v = rel_S * var + e_mu * e_mu
            elif v.algorithm == "welford":
                e_mu = 2 * e_mu
                kappa = np.abs(mu) / np.where(sigma > 0, sigma, np.inf)
                rel_S = 4 * m * (1 + kappa) * u_sum + (3 * uS if sq_in_s else 0.0)
                abs_v = rel_S * var + e_mu * e_mu
            else:  # naive
                ms = (x * x).mean(axis=1, keepdims=True)
                abs_v = (m + 3) * u_sum * 2 * ms + 2 * np.abs(mu) * e_mu + (
                    3 * uS * ms if sq_in_s else 0.0)
        else:
            dev = x
            var = (x * x).mean(axis=1, keepdims=True)
            e_mu = np.zeros((rows, 1))
            a = 0.0
            abs_v = ((m + 1) * u_sum + (3 * uS if sq_in_s else 0.0)) * var
        # underflow: each square off by <= one subnormal (so Σ/D too); μ̃ and x - μ̃ likewise
        abs_v = abs_v + 2 * tiny
        e_mu = e_mu + 2 * tiny
        w = var + eps
        rel_w = abs_v / w + U
        # 1/√(w(1-δ)) = r(1-δ)^(-1/2): ½δ to first order, no bound at all once δ reaches 1
        rel_w = np.minimum(rel_w, 1.0)
        rho_r = 1.0 / np.sqrt(1.0 - rel_w) - 1.0 + U + (3 * U if v.fast_math else 0.0)
        r = 1.0 / np.sqrt(w)
    return {"e_mu": e_mu, "rho_r": rho_r, "r": r, "a": a, "dev": dev}


def error_bound(v, x, gamma=None, beta=None, *, eps=np.float32(1e-5),
                block: int = BLOCK) -> np.ndarray:
    """E_j of every element of the rows ``x`` (the rows the kernel normalises, as float64)."""
    x = np.asarray(x, dtype=np.float64)
    D = x.shape[1]
    g = np.ones(D) if gamma is None else np.asarray(gamma, dtype=np.float64)
    if v.norm.startswith("gemma"):
        g = 1.0 + g
    b = np.zeros(D) if beta is None or not v.has_beta else np.asarray(beta, dtype=np.float64)
    t = _row_terms(v, x, eps, block)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gx = np.abs(g * t["dev"] * t["r"])
        E = np.abs(g) * t["r"] * (t["e_mu"] + t["a"] * np.abs(t["dev"])) + gx * t["rho_r"] + \
            U * (2 * gx + np.abs(b)) + 3 * 2.0**-149
        E = np.where(np.isinf(t["rho_r"]), np.inf, E)  # no bound once var+ε lost all digits
    return SAFETY * E


def statistics_bound(v, x, *, eps=np.float32(1e-5), block: int = BLOCK):
    """(e_μ, ρ_r) per row: bounds on the absolute error of the mean and the relative error of
    rstd that the analysis above gives the variant (doubled like E_j)."""
    t = _row_terms(v, np.asarray(x, dtype=np.float64), eps, block)
    return SAFETY * t["e_mu"][:, 0], SAFETY * t["rho_r"][:, 0]


def applies(v, x) -> np.ndarray:
    """Rows (mask) where :func:`error_bound`'s assumptions hold: finite values and no overflow —
    neither in float (Σ of squares) nor in the storage format where the variant forms squares
    (square_upcast) or partial sums (storage_accumulate)."""
    x = np.asarray(x, dtype=np.float64)
    F = 3.0e38
    M = v.fmt.max_finite * 0.99
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.all(np.isfinite(x), axis=1)
        center = v.norm in ("layernorm", "add_layernorm")
        dev = x - x.mean(axis=1, keepdims=True) if center and v.algorithm != "naive" else x
        sq = dev * dev
        ok &= sq.sum(axis=1) < F / 2
        if v.algorithm == "naive":
            ok &= np.abs(x).sum(axis=1) < F / 2
        if v.order == "square_upcast":
            ok &= sq.max(axis=1) < M
        if v.order == "storage_accumulate":
            ok &= np.abs(x).sum(axis=1) < M
            ok &= sq.sum(axis=1) < M
    return ok


def within_bound(ref, y, E) -> np.ndarray:
    """Mask of elements with |y - t| <= ulp_S(|t| + E)/2 + E.  A non-finite answer fails where
    the bound is finite; where E is infinite the analysis promises nothing and any answer
    passes."""
    t = ref.exact
    a = np.asarray(y).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        lim = ref.fmt.ulp_array(np.abs(t) + E) / 2 + E
        ok = np.abs(a - t) <= lim
    return ok | (np.isnan(t) & np.isnan(a)) | np.isinf(E)


# ================================================================================================
# What any sound kernel may produce: the fail threshold of `normcheck check`
# ================================================================================================
#
# A *sound* kernel reads the stored values, converts them to float, accumulates in float (or
# better) in any order, takes the square root (approximately, as rsqrtf does: <= 2 ulp) and
# rounds y once to the output format.  Its error is bounded by the analysis above with the
# worst summation order -- sequential over the row, n-1 roundings deep (any binary tree of n
# terms has depth <= n-1, and gamma_{n-1} bounds every one of them) -- and, for LayerNorm, by
# the larger of the two-pass and the Welford analyses:
#
# two-pass   s = Σx (error γ_{n-1}Σ|x|, or 0 when every partial sum is exact: all values are
#            multiples of the row's quantum q, a power of two, so |Σ|x|| < 2^24·q makes every
#            partial sum a float), μ̃ = s/n (2 roundings), d_j = x_j - μ̃ (error ε_j = e_μ +
#            u|d_j|), S = Σ d_j² (1 rounding a square, γ_{n-1} for the sum);
# Welford    m_k = m_{k-1} + (x_k - m_{k-1})/k: the error of the running mean is damped by
#            (1 - 1/k) at each step, so |m̃_k - m_k| <= u·M·((k+1)/2 + 4) with M = max|x|;
#            M2 = Σ a_k b_k (a_k = x_k - m_{k-1}, b_k = x_k - m_k, every term >= 0), whose error
#            is 2·e_max·Σ(|a_k| + |b_k|) <= 4·e_max·sqrt(2nS) (Σ_{k>=2} a_k² <= 2S) plus γ_{n+3}·S;
# RMSNorm    Σx² (squares of fp16/bf16 values are floats exactly; of fp32 values rounded once),
#            exact on the quantum grid like Σx;
#
# then var = S/n (2 roundings), w = var + ε (1), r = rsqrt(w) with relative error
# ρ_r = (1 - δ_w)^(-1/2) - 1 + 4u (no bound once δ_w reaches 1), and y_j = γ_j·d_j·r + β_j with
# three more roundings:
#
#     E_j = |γ_j|·r·ε_j·(1 + ρ_r) + |γ_j·x̂_j|·ρ_r + u·(3|γ_j·x̂_j| + |β_j|)
#
# times SOUND_SAFETY for the second-order terms the first-order analysis drops.  The check fails
# an element only where |y - t| > max(ulp_S(|t| + E)/2 + E, floor·ulp_S(scale)) (sound_limit).
SOUND_SAFETY = 1.5
_U = 2.0**-24
_TINY = 2.0**-149


def _gamma_n(n):
    n = np.asarray(n, dtype=np.float64)
    return n * _U / (1.0 - n * _U)


def quantum(rows) -> np.ndarray:
    """Per row, the largest power of two that divides every value (inf for a row of zeros):
    every partial sum of the row is a multiple of it."""
    a = np.abs(np.asarray(rows, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        m, e = np.frexp(np.where(np.isfinite(a), a, 0.0))
    M = (m * 2.0**53).astype(np.int64)
    low = M & -M
    _, le = np.frexp(low.astype(np.float64))
    bit = np.where(M != 0, e.astype(np.int64) - 53 + (le.astype(np.int64) - 1), 10**6)
    lo = bit.min(axis=1)
    return np.where(lo >= 10**6, np.inf, np.ldexp(1.0, np.minimum(lo, 1023).astype(np.int64)))


def _rho(delta):
    delta = np.minimum(delta, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(delta >= 1.0, np.inf, 1.0 / np.sqrt(1.0 - delta) - 1.0) + 4 * _U


def sound_statistic_limit(norm, rows, role: str, exact, fmt, eps=np.float32(1e-5),
                          floor: float = 2.0):
    """Per row: how far from the exact ``role`` ("mean" or "rstd", values ``exact``) a sound
    kernel's statistic may be -- the larger of the sound strategies' bounds
    (:func:`sound_statistics`, times SOUND_SAFETY), half a float ulp for its float result,
    half an ulp of ``fmt`` where it is stored narrower (Liger's bf16), never below ``floor``
    ulps of ``fmt``.  The one place the statistics' bound is made (#66)."""
    from normcheck import formats

    t = np.asarray(exact, dtype=np.float64)
    terms = sound_statistics(norm, rows, eps)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if role == "mean":
            e = np.max([v[0] for v in terms.values()], axis=0)
        else:
            e = np.max([v[1] * v[2] for v in terms.values()], axis=0)
        e = SOUND_SAFETY * e + formats.FP32.ulp_array(t) / 2 + \
            (fmt.ulp_array(t) / 2 if fmt is not formats.FP32 else 0.0)
        return np.maximum(e, floor * fmt.ulp_array(t))


def sound_statistics(norm, rows, eps=np.float32(1e-5), exact_input_sum=True):
    """Per row: {"two_pass": (e_mu, rho_r, r), "welford": ..., or "rms": ...} for the rows a
    sound kernel normalises (float64 values of what it reads)."""
    from normcheck import norms

    n_ = norms.get(norm)
    x = np.asarray(rows, dtype=np.float64)
    R, n = x.shape
    eps = float(np.float32(eps))
    q = quantum(x)
    out = {}
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if n_.centred:
            s = x.sum(axis=1)
            mu = s / n
            d = x - mu[:, None]
            S = (d * d).sum(axis=1)
            var = S / n
            w = var + eps
            r = 1.0 / np.sqrt(w)
            sabs = np.abs(x).sum(axis=1)
            exact = (sabs < 2.0**24 * q) & exact_input_sum
            e_s = np.where(exact, 0.0, _gamma_n(n - 1) * sabs)
            # two-pass: the mean, then squared deviations from it
            e_mu = (e_s / n + 2.01 * _U * np.abs(mu)) + 2 * _TINY
            eps_j = e_mu[:, None] + _U * (np.abs(d) + e_mu[:, None])
            dS = (eps_j * (2 * np.abs(d) + eps_j)).sum(axis=1)
            S_up = ((np.abs(d) + eps_j) ** 2).sum(axis=1)
            dS += (_gamma_n(n - 1) + _U) * S_up + n * _TINY
            dw = dS / n + 2.01 * _U * (S_up / n) + _U * (S_up / n + eps)
            out["two_pass"] = (e_mu, _rho(dw / w), r)
            # Welford: damped running-mean errors; M2 error through Σ|a_k| + |b_k|
            M = np.abs(x).max(axis=1)
            e_w = _U * M * ((n + 1) / 2.0 + 4.0) + 2 * _TINY
            dS_w = 4 * e_w * np.sqrt(2.0 * n * S) + _gamma_n(n + 3) * S + n * e_w * e_w + \
                n * _TINY
            dw_w = dS_w / n + 2.01 * _U * var + _U * w
            out["welford"] = (e_w, _rho(dw_w / w), r)
        else:
            sq = x * x
            Sq = sq.sum(axis=1)
            w = Sq / n + eps
            r = 1.0 / np.sqrt(w)
            exact = Sq < 2.0**24 * q * q
            e_S = np.where(exact, 0.0, _gamma_n(n - 1) * Sq)
            e_S = e_S + _U * Sq + n * _TINY  # squares of fp32 values round once (bounds both)
            dw = e_S / n + 2.01 * _U * Sq / n + _U * w
            out["rms"] = (np.zeros(R), _rho(dw / w), r)
    return out


def _affine(n_, gamma, beta, D):
    """(γ', β) of a norm as float64 columns: γ' = γ (1 + γ for Gemma; 1 without γ), β (0)."""
    g = np.ones(D) if gamma is None or not n_.has_gamma else np.asarray(gamma, np.float64)
    geff = 1.0 + g if n_.gemma else g
    b = np.zeros(D) if beta is None or not n_.reads_beta else \
        np.asarray(beta, np.float64)
    return geff, b


def sound_bound(norm, rows, gamma=None, beta=None, *, eps=np.float32(1e-5),
                storage=None, compiled=True, rows2=None) -> np.ndarray:
    """E_j of every element: the largest error (absolute, before the final rounding) a sound
    kernel may commit (see above); inf where no float kernel can promise anything.  The exact
    reference's is computed compiled (normcheck.measure, beside the measurement; ``compiled=False``
    or NORMCHECK_MEASURE=numpy: this numpy version, equal to 1e-12).  ``rows2``: the rows are
    ``rows + rows2`` summed in float64 (both as stored)."""
    from normcheck import formats, norms

    n_ = norms.get(norm)
    geff, b = _affine(n_, gamma, beta, np.shape(rows)[1])
    if n_.reference != "hf" and compiled:
        from normcheck import measure_lib

        E = measure_lib.sound_bound(rows, geff, b, float(np.float32(eps)), n_.centred, n_.gemma,
                                    SOUND_SAFETY, rows2=rows2)
        if E is not None:
            return E
    x = np.asarray(rows, dtype=np.float64)
    if rows2 is not None:
        x = x + np.asarray(rows2, dtype=np.float64)
    terms = sound_statistics(n_, x, eps)
    E = None
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        mu = x.mean(axis=1, keepdims=True) if n_.centred else 0.0
        d = x - mu
        for e_mu, rho, r in terms.values():
            e_mu, rho, r = e_mu[:, None], rho[:, None], r[:, None]
            eps_j = e_mu + _U * (np.abs(d) + e_mu)
            gx = np.abs(geff * d * r)
            Ej = np.abs(geff) * r * eps_j * (1 + rho) + gx * rho + \
                _U * (3 * gx + np.abs(b)) + (_U * gx if n_.gemma else 0.0) + 4 * _TINY
            Ej = np.where(np.isinf(rho), np.inf, Ej)
            E = Ej if E is None else np.maximum(E, Ej)
        E = SOUND_SAFETY * E
        if n_.reference == "hf":
            # y = γ·round_S(x̂): a sound kernel's x̂ may round to the neighbour of the exact
            # x̂'s rounding when the exact x̂ is within its error of a midpoint
            fmt = formats.get(storage) if storage is not None else formats.FP32
            xh = d * terms["rms"][2][:, None]
            e_xh = E / np.where(np.abs(geff) > 0, np.abs(geff), 1.0)
            rx = fmt.round_array(xh)
            half = fmt.ulp_array(xh) / 2
            near = np.abs(np.abs(xh - rx) - half) <= e_xh
            E = np.where(near, np.abs(geff) * (2 * half + e_xh), np.abs(geff) * 0.0) + \
                _U * np.abs(geff * rx)
    return E


#: the one rounding of a fused float32 kernel's sum h under the exact convention, per |y - β|
H_ROUNDING = 2 ** -24 * SOUND_SAFETY


def sound_bound_of(norm, ref, rows, gamma=None, beta=None, *, eps=np.float32(1e-5),
                   convention="exact", storage=None, rows2=None) -> np.ndarray:
    """The sound bound of a forward kernel's outputs against ``ref`` (normcheck.oracle's
    reference of ``norm``), ``rows`` (+ ``rows2``) the rows it normalises
    (normcheck.oracle.normalised_rows, or its parts): :func:`sound_bound`, and for a fused
    float32 kernel under the exact convention the one rounding of the float sum h = x + residual
    as well -- what the check and the report judge by."""
    from normcheck import norms

    n_ = norms.get(norm)
    E = sound_bound(n_, rows, gamma, beta, eps=eps, storage=storage, rows2=rows2)
    if _h_rounds(n_, convention, storage):
        E = E + H_ROUNDING * np.abs(ref.exact - (ref.beta if ref.beta is not None else 0.0))
    return E


def _h_rounds(n_, convention, storage) -> bool:
    from normcheck import formats

    st = formats.get(storage) if storage is not None else None
    return n_.fused and convention == "exact" and st is not None and st.name == "fp32"


class SoundBound:
    """:func:`sound_bound_of` of a batch, not yet computed: the compiled measurement forms it
    row by row inside its own pass (normcheck.measure: never stored, the same bits), and
    :meth:`array` computes it where it is wanted as an array (the numpy measurement, a
    failure's message).  ``parts``: normcheck.oracle.normalised_parts."""

    def __init__(self, norm, ref, parts, gamma=None, beta=None, *, eps=np.float32(1e-5),
                 convention="exact", storage=None):
        from normcheck import norms

        self.norm = norms.get(norm)
        self.ref, self.parts, self.gamma, self.beta = ref, parts, gamma, beta
        self.eps, self.convention, self.storage = eps, convention, storage
        self.shape = np.shape(parts[0])

    def array(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """E of rows lo:hi."""
        a, b = (None if p is None else p[lo:hi] for p in self.parts)
        return sound_bound_of(self.norm, _RowsOf(self.ref, lo, hi), a, self.gamma, self.beta,
                              eps=self.eps, convention=self.convention, storage=self.storage,
                              rows2=b)

    def rows(self, lo: int, hi: int) -> "SoundBound":
        """The bound of rows lo:hi alone."""
        return SoundBound(self.norm, _RowsOf(self.ref, lo, hi),
                          tuple(None if p is None else p[lo:hi] for p in self.parts),
                          self.gamma, self.beta, eps=self.eps, convention=self.convention,
                          storage=self.storage)

    def compiled(self):
        """(normcheck.measure_lib.BoundJob, the arrays it points into, h_coef, β of the h term
        or None) for the compiled measurement to form E itself, or None where it cannot (the
        hf reference's bound is formed from the rounded x̂: computed as an array)."""
        from normcheck import measure_lib

        if self.norm.reference == "hf":
            return None
        D = self.shape[1]
        geff, b = _affine(self.norm, self.gamma, self.beta, D)
        job, keep = measure_lib.bound_job(self.parts[0], geff, b, float(np.float32(self.eps)),
                                          self.norm.centred, self.norm.gemma, SOUND_SAFETY,
                                          rows2=self.parts[1])
        h = _h_rounds(self.norm, self.convention, self.storage)
        hb = getattr(self.ref, "beta", None) if h else None
        hb = None if hb is None else np.ascontiguousarray(np.broadcast_to(hb, (D,)), np.float64)
        return job, keep + (hb,), (H_ROUNDING if h else 0.0), hb


class _RowsOf:
    """Rows lo:hi of a reference's exact values and β (what the h term reads)."""

    def __init__(self, ref, lo, hi):
        self.exact = ref.exact[lo:hi]
        self.beta = getattr(ref, "beta", None)


def sound_backward(norm, rows, dy, gamma=None, *, mean=None, rstd=None, eps=np.float32(1e-5),
                   xhat=None):
    """{"dx": E [rows, cols], "dgamma": E [cols], "dbeta": E [cols]}: the largest error (before
    the final rounding) a sound backward kernel may commit — float32 arithmetic, every sum in
    the worst order (sequential, or atomics in any order), x̂ = (x - mean)·rstd and g = dy·γ'.

    With ``rstd`` (and ``mean``) given, the kernel reads those saved statistics exactly; without,
    it recomputes them, within the forward sound bound (:func:`sound_statistics`).  With
    ``xhat`` (a backward that reads y: x̂ = (y - β)/γ, ``rows`` ignored) x̂ is known to three
    roundings.  Per row,
    with D columns, u = 2^-24, γ_n = nu/(1-nu), c = Σg·x̂/D::

        x̂_j within γ_2|x̂_j| (+ |x̂_j|ρ_r + e_μ·r recomputed), g_j within u|g_j|
        Σg within γ_{D+1}Σ|g|,  Σg·x̂ within γ_{D+4}Σ|g·x̂| (+ Σ|g|·δx̂)
        dx_j = r·(g_j - Σg/D - x̂_j·c): r·[γ_{D+8}(Σ|g|/D + |x̂_j|Σ|g·x̂|/D) + γ_8(|g_j| +
              |Σg/D| + |x̂_j·c|) + |δx̂_j|·|c| + |x̂_j|·Σ|g|·δx̂/D] + ρ_r·|dx_j| + u|dx_j|
        dγ_j = Σ_rows dy·x̂: γ_{R+3}·Σ|dy·x̂| + Σ|dy|·δx̂;   dβ_j: γ_R·Σ|dy|

    times SOUND_SAFETY for the second-order terms."""
    from normcheck import norms

    n_ = norms.get(norm)
    x = np.asarray(rows, dtype=np.float64)
    dyv = np.asarray(dy, dtype=np.float64)
    R, D = x.shape
    g_ = np.ones(D) if gamma is None or not n_.has_gamma else np.asarray(gamma, np.float64)
    geff = 1.0 + g_ if n_.gemma else g_
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if xhat is not None:
            r = np.asarray(rstd, np.float64)[:, None]
            mu = 0.0
            e_mu = np.zeros((R, 1))
            rho = np.zeros((R, 1))
        elif rstd is not None:
            r = np.asarray(rstd, np.float64)[:, None]
            mu = np.asarray(mean, np.float64)[:, None] if n_.centred else 0.0
            e_mu = np.zeros((R, 1))
            rho = np.zeros((R, 1))
        else:
            terms = sound_statistics(n_, x, eps)
            e_mu = np.max([t[0] for t in terms.values()], axis=0)[:, None]
            rho = np.max([t[1] for t in terms.values()], axis=0)[:, None]
            r = next(iter(terms.values()))[2][:, None]
            mu = x.mean(axis=1, keepdims=True) if n_.centred else 0.0
        xh = (x - mu) * r if xhat is None else np.asarray(xhat, np.float64)
        axh = np.abs(xh)
        dxh = _gamma_n(2 if xhat is None else 3) * axh + axh * rho + e_mu * r  # |δx̂_j|
        g = dyv * geff
        ag = np.abs(g)
        Sg = ag.sum(axis=1, keepdims=True) / D
        Sgx = (ag * axh).sum(axis=1, keepdims=True) / D
        c = (g * xh).sum(axis=1, keepdims=True) / D
        mg = g.sum(axis=1, keepdims=True) / D if n_.centred else 0.0
        dx = r * (g - mg - xh * c)
        Sgd = (ag * dxh).sum(axis=1, keepdims=True) / D
        E = r * (_gamma_n(D + 8) * (Sg + axh * Sgx) + _gamma_n(8) * (ag + np.abs(mg) +
                                                                      np.abs(xh * c)) +
                 dxh * np.abs(c) + axh * Sgd) + (rho + _U) * np.abs(dx) + 4 * _TINY
        E = SOUND_SAFETY * E
        ady = np.abs(dyv)
        Eg = SOUND_SAFETY * (_gamma_n(R + 3) * (ady * axh).sum(axis=0) + (ady * dxh).sum(axis=0)
                             + 4 * _TINY)
        Eb = SOUND_SAFETY * (_gamma_n(R) * ady.sum(axis=0) + 4 * _TINY)
    return {"dx": np.where(np.isfinite(E), E, np.inf), "dgamma": Eg,
            "dbeta": Eb if n_.reads_beta else None}


def sound_limit(ref, E, floor: float = 1.0) -> np.ndarray:
    """The largest |y - t| a sound kernel may show on each element: its error bound E plus the
    final rounding to the output format, and never below ``floor`` ulps of max(|t|, |γx̂|, |β|)
    (the scale the check's "scaled ulp" uses)."""
    fmt = ref.fmt
    t = ref.exact
    with np.errstate(invalid="ignore", over="ignore"):
        lim = fmt.ulp_array(np.abs(t) + E) / 2 + E
        scale = np.maximum(np.abs(t), ref.scale)
        lim = np.maximum(lim, floor * fmt.ulp_array(scale))
    return np.where(np.isnan(lim), np.inf, lim)
