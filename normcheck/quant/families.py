"""Rows built to hurt quantisers.

The families of normcheck.families hurt the statistics; a quantised output is hurt somewhere
else -- at the rounding boundaries of its quantiser and of its scale.  Each family below makes
rows (in the storage format T) and, for a static contract, the per-tensor scale:

============== ===================================================================================
gaussian       N(0, s²) rows; a static scale calibrated to the case's largest |y|
ties           y lands exactly on quantiser ties after scaling: the row's largest |y| is
               qmax·2^k (so a dynamic scale is a power of two and v = y·2^-k exactly) and the
               others are midpoints between neighbouring values, times 2^k (tie-breaking:
               to even, never half away)
amax_boundary  the row's largest t (γx̂, or x̂ for a y rounded twice) within 2^-30 of a rounding
               boundary of T (of float32 for an unrounded y): which value amax takes -- hence
               the scale of the whole row -- is decided by the summation order (vLLM #53775)
outlier        one massive activation: the rest of the row quantises to zero or subnormals
zero           all-zero rows, and rows whose first group is zero (the scale floor: 0/0)
saturation     a static scale 8x too small: values beyond the saturation point (clamp,
               satfinite, or NaN/inf where the contract does not saturate)
tails          widths that are not a multiple of the group or block (a short last group)
offset         LayerNorm's μ + σ·N(0, 1) rows (κ = μ/σ large)
============== ===================================================================================
"""

from __future__ import annotations

import numpy as np

from normcheck import families as base_families
from normcheck import formats, norms
from normcheck.errors import invalid
from normcheck.launch import Case
from normcheck.quant.contract import Contract

__all__ = ["QUANT_FAMILIES", "widths", "case", "static_scale"]

QUANT_FAMILIES = {
    "gaussian": "N(0, s²) rows",
    "ties": "y on quantiser ties after scaling (a power-of-two scale)",
    "amax_boundary": "amax within 2^-30 of a rounding boundary of T",
    "outlier": "one massive activation: the rest quantises to zero",
    "zero": "all-zero rows and zero groups (the scale floor)",
    "saturation": "a static scale 8x too small: beyond the saturation point",
    "tails": "widths not a multiple of the group or block",
    "offset": "μ + σ·N(0,1), κ large",
}


def widths(family: str, c: Contract, cols_range=(1, 8192), multiple_of: int = 1) -> list[int]:
    """The widths a family runs at (within the kernel's width contract)."""
    g = c.group_size or 32
    cols = {"tails": (2 * g + g // 2 + 1, g + 1, 33),
            "ties": (2 * g if c.group_size else 256,),
            "amax_boundary": (4096,), "zero": (3 * g if c.group_size else 512,)}.get(
        family, (768, 4096))
    lo, hi = cols_range
    m = max(1, int(multiple_of))
    out = []
    for w in cols:
        w = -(-max(w, lo) // m) * m
        while w > hi and w - m >= lo:
            w -= m
        if lo <= w <= hi and w not in out:
            out.append(w)
    return out or [max(lo, m)]


def approx_t(norm: norms.Norm, x, g, b, eps, residual=None):
    """float64 t = γ·x̂ + β (for choosing rows and scales only: the oracle decides)."""
    h = x.astype(np.float64) + (0.0 if residual is None else residual.astype(np.float64))
    if norm.centred:
        d = h - h.mean(axis=1, keepdims=True)
    else:
        d = h
    r = 1.0 / np.sqrt((d * d).mean(axis=1, keepdims=True) + float(eps))
    ge = 1.0 if g is None else (1.0 + g.astype(np.float64) if norm.gemma
                                 else g.astype(np.float64))
    return d * r * ge + (0.0 if b is None else b.astype(np.float64)), d * r


def static_scale(c: Contract, amax: float, factor: float = 1.0) -> np.float32:
    """The per-tensor input scale calibrated to ``amax`` (the case's largest |y|): amax/qmax for
    a scale that divides (``div``, ``mul_inv``), qmax/amax for a multiplier (``mul``); nvfp4's
    encode scale 448·6/amax.  ``factor`` < 1 pushes values beyond the saturation point."""
    amax = max(float(amax), 1e-30)
    if c.granularity == "nvfp4":
        return np.float32(448.0 * 6.0 / amax * factor)
    s = amax / c.q_max * factor
    return np.float32(1.0 / s if c.apply == "mul" else s)


def case(family: str, norm: norms.Norm, c: Contract, storage, rows: int, cols: int,
         seed, eps=np.float32(1e-6), weights_seed=0) -> Case:
    """A case of a quant family: rows in T, γ/β, the residual of a fused norm, and
    ``extra["scale"]`` (the static scale, or nvfp4's S_enc)."""
    if family not in QUANT_FAMILIES:
        raise invalid("family", family, f"one of {', '.join(QUANT_FAMILIES)}")
    T = formats.get(storage)
    n = norms.get(norm)
    rng = np.random.default_rng([*np.atleast_1d(seed).tolist(), list(QUANT_FAMILIES).index(family),
                                 cols])
    g, b = base_families.weights(T, cols, seed=weights_seed)
    g = g if n.has_gamma else None
    b = b if n.reads_beta else None
    base = {"gaussian": "gaussian", "outlier": "outlier", "offset": "offset",
            "tails": "gaussian", "saturation": "gaussian", "zero": "gaussian",
            "ties": "gaussian", "amax_boundary": "gaussian"}[family]
    x = base_families.generate(base, T, rows, cols, seed=rng)
    res = base_families.generate("gaussian", T, rows, cols, seed=rng) if n.fused else None
    if family == "zero":
        x[: max(1, rows // 2)] = 0
        if res is not None:
            res[: max(1, rows // 2)] = 0
        gs = c.group_size or 1
        if c.group_size and cols > gs:  # a zero group inside a nonzero row
            x[rows // 2:, :gs] = 0
            if res is not None:
                res[rows // 2:, :gs] = 0
    if family == "ties":
        x, res = _ties(n, c, T, x, g, b, eps, res, rng)
    if family == "amax_boundary":
        x = _amax_boundary(n, c, T, x, g, b, eps, res)
    t, _ = approx_t(n, x, g, b, eps, res)
    amax = float(np.nanmax(np.abs(t))) if t.size else 1.0
    factor = 1.0 / 8.0 if family == "saturation" else 1.0
    extra = {}
    if not c.dynamic or c.granularity == "nvfp4":
        if family == "ties" and not c.granularity == "nvfp4":
            k = np.floor(np.log2(max(amax, 1e-30) / c.q_max))
            sc = float(2.0**k)
            extra["scale"] = np.float32(1.0 / sc if c.apply == "mul" else sc)
        else:
            extra["scale"] = static_scale(c, amax, factor)
    return Case(x=x, gamma=g, beta=b, residual=res, eps=np.float32(eps), extra=extra)


def _ties(n, c, T, x, g, b, eps, res, rng):
    """Rows whose y is on ties: targets Y (values of T) of midpoints ·2^k with the largest
    qmax·2^k; x solved element by element so that round_T(x·r·γ) = Y (r held, then rechecked)."""
    fmt = c.qformat
    vals = fmt.values()
    vals = vals[vals >= 0]
    mids = (vals[1:] + vals[:-1]) / 2
    rows, cols = x.shape
    k = 0  # targets around 1: the norm's output scale
    qmax = c.q_max
    scale = 2.0 ** (np.floor(np.log2(3.0 / qmax)) + k)  # the largest |Y| about 3
    for i in range(rows):
        pick = rng.choice(np.concatenate([mids, vals]), cols)
        Y = pick * scale * np.where(rng.random(cols) < 0.5, -1.0, 1.0)
        Y[rng.integers(0, cols)] = qmax * scale
        Y = T.round_array(Y)
        xi = Y.copy()
        for _ in range(3):
            xs = T.cast(xi)
            t, xh = approx_t(n, xs[None, :], g, b, eps, None)
            ge = 1.0 if g is None else g.astype(np.float64)
            r_over = np.where(xs.astype(np.float64) != 0, xh[0] / np.where(
                xs.astype(np.float64) == 0, 1.0, xs.astype(np.float64)), 1.0)
            bb = 0.0 if b is None else b.astype(np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                xi = np.where(ge != 0, (Y - bb) / (r_over * ge), xi)
            xi = np.nan_to_num(xi)
        x[i] = T.cast(xi)
        if res is not None:  # the fused sum is x + 0 on these rows: ties survive the add
            res[i] = 0
    return x, res


def _amax_boundary(n, c, T, x, g, b, eps, res):
    """Tune each row so its largest value sits within ~2^-30 of a rounding boundary: scan the
    largest element over its neighbouring values, then a middling element, then a small one
    (each step moves r by less)."""
    rows, cols = x.shape
    if cols < 3:
        return x
    fine = formats.FP32 if c.y_rounding == "none" or c.amax_from == "fp32" else T
    for i in range(rows):
        row = x[i].astype(np.float64)
        mags = np.abs(row)
        order = np.argsort(mags)
        j_max = int(order[-1])
        picks = [j_max, int(order[cols // 2]), int(order[cols // 8])]
        for j in picks:
            base = row[j]
            steps = np.arange(-128, 129)
            cand = _neighbours(T, base, steps)
            rows_c = np.repeat(row[None, :], cand.size, axis=0)
            rows_c[:, j] = cand
            rr = None if res is None else np.repeat(res[i][None, :], cand.size, axis=0)
            t, xh = approx_t(n, rows_c, g, b, eps, rr)
            top = xh if c.y_rounding == "twice" else t
            v = np.abs(top[np.arange(cand.size), np.argmax(np.abs(top), axis=1)])
            dist = np.abs(v - _midpoint(fine, v)) / fine.ulp_array(v)
            row[j] = cand[int(np.argmin(dist))]
        x[i] = T.cast(row)
    return x


def _neighbours(T, v, steps):
    """v moved by ``steps`` representable values of T (by the ordinal of its bit pattern),
    clamped to the finite range."""
    bits = int(np.array([v]).astype(np.float64).astype(T.dtype).view(T.uint)[0])
    sign = 1 << (T.bits - 1)
    o = (-(bits & (sign - 1)) if bits & sign else bits) + np.asarray(steps, np.int64)
    top = int(np.array([T.max_finite]).astype(T.dtype).view(T.uint)[0])
    o = np.clip(o, -top, top)
    b = np.where(o < 0, (-o) | sign, o).astype(T.uint)
    return b.view(T.dtype).astype(np.float64)


def _midpoint(F, v):
    """The rounding boundary of F nearest each v."""
    r = F.round_array(v)
    u = F.ulp_array(np.abs(v))
    return np.where(v >= r, r + u / 2, r - u / 2)
