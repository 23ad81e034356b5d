"""Why a kernel is off: the usual causes, each tested against the oracle.

When the check fails or warns on accuracy, each cause in :data:`CAUSES` is evaluated on the same
rows and compared with what the kernel wrote:

* *bit for bit* -- the causes that change the arithmetic in a definite way (rstd or x̂ rounded
  to the storage format, γ·x̂ and +β rounded separately, variance / (D-1), ε missing or added to
  σ, squares or statistics rounded to the storage format) are computed from the exact statistics
  with just that change, rounded to the output format; a cause *explains* the output when it
  matches the kernel to within one ulp on at least 90% of the elements that are off, and better
  than the exact result does;
* *within a tight bound* -- the causes whose error depends on the summation order (the one-pass
  variance E[x²] - E[x]², sums accumulated in the storage format) are recognised from the
  variance each row's output implies (var = 1/rstd² - ε, rstd read off y): one-pass leaves an
  error of the order of u·E[x²] (so it grows as κ² relative to the variance), storage sums one
  of the order of u_S·var·√D, far above what float sums leave (u·var·√D).

:func:`explain` returns "<cause> (<evidence>)" or None.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from normcheck import formats
from normcheck.causes import EVIDENCE, Cause, headline

__all__ = ["Cause", "EVIDENCE", "explain", "headline", "CAUSES", "ORDERS", "order_text",
           "rstd_variants", "warp_groups"]

CAUSES = {
    "rstd_storage": ("rstd rounded to the storage format before use", "bit"),
    "xhat_storage": ("x̂ rounded to the storage format before ×γ (Hugging Face's Llama "
                     "definition: use --reference hf if that is the model's)", "bit"),
    "affine_separate": ("γ·x̂ and +β rounded separately (two roundings to the output format)",
                        "bit"),
    "bessel": ("variance divided by D-1 instead of D", "bit"),
    "eps_missing": ("ε missing from the variance", "bit"),
    "eps_on_sigma": ("ε added to σ instead of σ² (rstd = 1/(σ + ε))", "bit"),
    "squares_storage": ("squares rounded to the storage format (in fp16 they overflow from "
                        "|x| >= 256)", "bit"),
    "mean_storage": ("mean rounded to the storage format", "bit"),
    "var_storage": ("variance rounded to the storage format", "bit"),
    "exact_not_hf": ("the exact definition (γ·x̂ rounded once), not Hugging Face's "
                     "(x̂ rounded first)", "bit"),
    "gemma_gamma": ("γ where Gemma's norm scales by 1+γ (or 1+γ where the norm scales by γ)",
                    "bit"),
    "partial_reduction": ("a partial reduction: the statistics of each warp's columns only, "
                          "never combined across the block", "bit"),
    "weights_storage": ("γ and β rounded to the rows' format before use (wider master "
                        "weights read at the rows' precision)", "bit"),
    "h_mixed": ("the statistics of the unrounded sum x + residual applied to the sum as "
                "stored (rounded to h's format): the norm reads neither the exact nor the "
                "stored sum", "bit"),
    "convention_named": ("the kernel follows the other sound fused convention than the one the "
                         "check names (the exact sum x + residual, or the sum as stored)",
                         "exact"),
    "lanes_dropped": ("lanes left out of a reduction (a warp reduction from the wrong offset, "
                      "a half warp): only some lanes' partial sums reach the statistics",
                      "bit"),
    "cast_through": ("y cast through another format before the store", "bit"),
    "saturation": ("a clamp to the largest finite value before the store, hiding inf and NaN",
                   "bit"),
    "input_clamp": ("the input clamped to the format's finite range as it is read (fmaxf/fminf "
                    "to ±max): an infinite or NaN input reads as ±max and its row comes out "
                    "finite", "bit"),
    "ftz": ("subnormal values flushed to zero (-ftz=true or --use_fast_math on a GPU, a "
            "denormals-are-zero mode on a CPU): x, x − μ, the squares, ε-less variances and "
            "each product below 2^-126 taken as 0", "bit"),
    "beta_twice": ("β added twice (y − exact = β on every element)", "bit"),
    "gamma_twice": ("γ applied twice (y = γ²·x̂ + β)", "bit"),
    "count_divisor": ("a wrong count or divisor: the statistics divided by another number than "
                      "the row's width", "bit"),
    "tail_dropped": ("the last elements of the row left out of the statistics (a vector loop "
                     "whose tail is never summed), the sums still divided by the width", "bit"),
    "padding_variance": ("the padding lanes of a block wider than the row enter the variance "
                         "(each adds (0 − μ)²: a masked load's other=0 squared after the mean "
                         "is taken)", "bit"),
    "stale_accumulator": ("each row's sums carried over from the row before it (an accumulator "
                          "never reset between the rows a block processes)", "bit"),
    "welford_unweighted": ("a Welford merge with equal weights: partial means averaged as if "
                           "every thread held as many elements", "bit"),
    "welford_unscaled": ("a Welford merge adding δ² without its weight n_a·n_b/n (the squared "
                         "gap between two partial means added as it is)", "bit"),
    "constant_row_mean": ("the mean of a constant row rounds (Σx/D in float is not the row's "
                          "value, so x − mean is not 0 and x̂ is not 0: a sound two-pass kernel "
                          "does this; Welford, or a sum shifted by the first element, is exact "
                          "there)", "bit"),
    "one_pass": ("one-pass variance E[x²] - E[x]²: catastrophic cancellation, error grows as κ²",
                 "stat"),
    "storage_sums": ("sums accumulated in the storage format", "stat"),
    "no_upcast": ("the statistics computed in the storage format, no upcast to float before "
                  "the reductions", "bit"),
    "one_thread": ("a value valid in one thread used by all (a reduction's result left in "
                   "thread 0, or in one warp, never broadcast): only that thread's columns are "
                   "right", "bit"),
    "undefined_values": ("the output depends on undefined values (shared memory read before it "
                         "is written, a shuffle from a lane not taking part)", "undefined"),
}

#: Causes whose own text says a sound kernel does this: a FAIL is never headed by one
SOUND = frozenset({"constant_row_mean"})

#: The summation orders the diagnosis emulates (one element of a row per term, every addition
#: rounded): one thread; B threads striding the row, then a warp butterfly and the warps'
#: partials through a second one (normcheck's built-ins, most block-per-row kernels); CUB's
#: BlockReduce (shfl_down by 1, 2, ..., 16 in each warp, then thread 0 adds the warps' totals
#: in order); a halving tree over the row padded to a power of two (a shared-memory tree, a
#: Triton tl.sum over one program's block); neighbour pairs, (x0+x1)+(x2+x3)... level by level
#: (tl.sum as normcheck's Triton executor runs it, and a pairwise reduction written as one).
ORDERS = (("sequential",), *(("block", B) for B in (32, 64, 128, 256, 512, 1024)),
          *(("cub", B) for B in (128, 256, 512, 1024)), ("tree",), ("pairs",))


def rstd_variants(var, D: int, eps) -> dict:
    """{cause: rstd} of the usual wrong variances: D-1 (Bessel's, where D > 1), ε missing, ε on
    σ -- the forward and the backward diagnosis alike."""
    out = {"bessel": 1.0 / np.sqrt(var * D / (D - 1) + eps)} if D > 1 else {}
    return {**out, "eps_missing": 1.0 / np.sqrt(var), "eps_on_sigma": 1.0 / (np.sqrt(var) + eps)}


def warp_groups(D: int):
    """(B, each column's warp) of a block of B threads whose warps never combine their sums
    (warp w holds the columns j with (j mod B) / 32 = w), for each B narrower than the row."""
    for B in (32, 64, 128, 256, 512, 1024):
        if B >= D:
            return
        yield B, (np.arange(D) % B) // 32


def order_text(order) -> str:
    if order[0] == "sequential":
        return "one thread summing the row"
    if order[0] == "block":
        return f"{order[1]} threads, warp butterflies"
    if order[0] == "cub":
        return f"cub::BlockReduce of {order[1]} threads"
    if order[0] == "pairs":
        return "neighbour pairs, level by level ((x0+x1)+(x2+x3)...: tl.sum)"
    return "a halving tree over the row (x[i] + x[i+h]: a shared-memory tree)"


class Rows(NamedTuple):
    """The rows as the causes see them: the norm, the rows' storage format, x (float64: the
    sum a fused kernel normalises), the weights as applied (γ -- 1+γ for Gemma -- and β, float64),
    the exact mean (None for RMSNorm) and variance of each row, and ε."""

    norm: object
    fmt: object
    x: np.ndarray
    g: np.ndarray
    b: np.ndarray
    mean: np.ndarray | None
    var: np.ndarray
    eps: float


def _models(rows: Rows, out):
    """{cause: y (float64, before the output rounding) or a callable giving the rounded y}."""
    norm, fmt, x, g, b, mean, var, eps = rows
    S = fmt
    D = x.shape[1]
    mu = mean[:, None] if mean is not None else 0.0
    d = x - mu
    v = var[:, None]
    r = 1.0 / np.sqrt(v + eps)
    ge = g
    m = {}
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        def y_of(rr, dd=d):
            return ge * dd * rr + b

        m["rstd_storage"] = y_of(S.round_array(r))
        if S.precision < 24:
            # and the products in the storage format too (DeepSpeed's half path: rstd rounded
            # to T, then x·rstd and ·γ each a T product, rounded)
            prod = S.round_array(S.round_array(d * S.round_array(r)) * ge)
            m[("rstd_storage", "products")] = ("rounded", out.round_array(
                prod + b if norm.centred else prod))
        xh = S.round_array(d * r)
        # x̂ rounded, then γ·x̂ + β in float rounded once; and, LayerNorm, Apex's half path:
        # γ·x̂ rounded to the storage format, then + β rounded again (three roundings)
        m["xhat_storage"] = ("rounded", out.round_array(ge * xh + b))
        if norm.centred:
            m[("xhat_storage", "three")] = ("rounded", out.round_array(S.round_array(ge * xh)
                                                                       + b))
        if norm.reads_beta:  # two roundings need a +β to round twice (#64: named on RMSNorm)
            m["affine_separate"] = ("rounded", out.round_array(out.round_array(ge * d * r) + b))
        m.update({k: y_of(rr) for k, rr in rstd_variants(v, D, eps).items()})
        if norm.centred:
            mS = S.round_array(mean)[:, None]
            m["mean_storage"] = ge * (x - mS) * r + b
        vS = S.round_array(var)[:, None]
        m["var_storage"] = y_of(1.0 / np.sqrt(vS + eps))
        sq = S.round_array(d * d)
        m["squares_storage"] = y_of(1.0 / np.sqrt(sq.mean(axis=1, keepdims=True) + eps))
        if norm.reference == "hf":
            m["exact_not_hf"] = y_of(r)
        if norm.has_gamma:  # Gemma's 1+γ and the plain γ mistaken for one another
            m["gemma_gamma"] = (ge - 1.0 if norm.gemma else ge + 1.0) * d * r + b
        m.update(_shape_models(rows, d, r))
        # partial reductions: each warp using its own sums as the row's
        for B, grp in warp_groups(D):
            mu_p = np.zeros_like(x)
            v_p = np.zeros_like(x)
            for k in np.unique(grp):
                sel = grp == k
                if norm.centred:
                    mk = x[:, sel].sum(axis=1, keepdims=True) / D
                    mu_p[:, sel] = mk
                    v_p[:, sel] = ((x[:, sel] - mk) ** 2).sum(axis=1, keepdims=True) / D
                else:
                    v_p[:, sel] = (x[:, sel] ** 2).sum(axis=1, keepdims=True) / D
            m[("partial_reduction", B)] = ge * (x - mu_p) / np.sqrt(v_p + eps) + b
        m.update(_lane_models(norm, x, ge, b, eps))
        y = ge * d * r + b
        for F in (formats.FP16, formats.BF16):  # a cast through another format before the store
            if F.name not in (S.name, out.name):
                m[("cast_through", F.name)] = ("rounded", out.round_array(F.round_array(y)))
        m["ftz"] = _ftz(norm, x, ge, b, eps)
        # sums in the storage format (and, for LayerNorm, the one-pass variance) in each of the
        # usual orders: the statistics emulated, the rest exact
        if fmt.precision < 24 or norm.centred:
            for order in ORDERS:
                if order[0] in ("block", "cub") and order[1] >= 2 * D and order[1] > 32:
                    continue  # the same additions as a narrower block
                for (key, _o), (mu_o, v_o) in _statistics(norm, fmt, x, order).items():
                    mo = mu_o[:, None] if mu_o is not None else 0.0
                    m[(key, order)] = ge * (x - mo) / np.sqrt(v_o[:, None] + eps) + b
                if fmt.precision < 24:
                    m.update(_no_upcast(norm, fmt, out, x, ge, b, eps, order))
    return m


def _no_upcast(norm, S, out, x, g, b, eps, order) -> dict:
    """A kernel that never converts its loads (#57: a whole Triton LayerNorm in bf16): the mean,
    x − μ, the squares, their sums in ``order`` and each division by the width rounded to the
    storage format S.  Two epilogues: rstd and the rest in float (an fp32 ε promotes
    ``var + eps``, as Triton's does), or every step in S -- rstd rounded once (``hrsqrt``) or
    the square root and the reciprocal each rounded, then x̂, ·γ and +β each rounded to S.
    {("no_upcast", order, epilogue): y or ("rounded", y)}."""
    D = x.shape[1]
    r = S.round_array
    m = {}
    if norm.centred:
        s1 = r(_sum(x, r, order))[:, None]
        # only the mean's sum in S: Triton divides the bf16 sum by the (int) width in fp32, and
        # x - mean, an fp32 scalar, is then fp32 too -- the rest of the kernel in float
        mf = s1 / D
        m[("no_upcast", order, "mean")] = g * (x - mf) / np.sqrt(
            ((x - mf) ** 2).mean(axis=1, keepdims=True) + eps) + b
        mS = r(mf)
        dS = r(x - mS)
    else:
        dS = x
    vsum = r(_sum(r(dS * dS), r, order))[:, None]
    vS = r(vsum / D)
    # the division by the width in float (Triton divides a bf16 or fp16 scalar by an int in
    # fp32) or rounded to S
    if norm.centred:  # RMSNorm's is the storage_sums model
        m[("no_upcast", order, "stats")] = g * dS / np.sqrt(vsum / D + eps) + b
    if not np.array_equal(vS, vsum / D):
        m[("no_upcast", order, "stats_div")] = g * dS / np.sqrt(vS + eps) + b
    gS, bS = r(g), r(b)
    # rstd in S: rounded once from the float value (of either variance; Triton casts an fp32
    # scalar to the tensor's bf16 in d * rstd), from var + ε rounded to S (hrsqrt), or the
    # square root and its reciprocal each rounded
    seen = []
    for rS in (r(1.0 / np.sqrt(vsum / D + eps)), r(1.0 / np.sqrt(vS + eps)),
               r(1.0 / np.sqrt(r(vS + eps))), r(1.0 / r(np.sqrt(r(vS + eps))))):
        if any(np.array_equal(rS, o) for o in seen):
            continue
        seen.append(rS)
        y = r(r(dS * rS) * gS)
        m[("no_upcast", order, "all", len(seen))] = ("rounded", out.round_array(
            r(y + bS) if norm.centred else y))
    return m


#: The smallest normal float: what -ftz=true flushes below it (2^-126)
FP32_TINY = float.fromhex("0x1p-126")


def _ftz(norm, x, g, b, eps):
    """Every float operation of the kernel flushing subnormal inputs and results to zero (a
    GPU's ``-ftz=true``, implied by ``--use_fast_math``; ``.ftz`` PTX; a CPU's FTZ/DAZ): x
    (fp32 and bf16 subnormals; an fp16 one is normal in fp32), the mean, x − μ, each square,
    the variance plus ε (0 gives rstd = inf, as rsqrt.approx.ftz of a flushed value does) and
    each product of the epilogue.  The sums themselves exact: a flushed term changes them by
    less than 2^-126."""
    def z(a):
        return np.where(np.abs(a) < FP32_TINY, 0.0 * a, a)
    xf = z(x)
    mu = z(xf.mean(axis=1, keepdims=True)) if norm.centred else 0.0
    d = z(xf - mu)
    v = z(d * d).mean(axis=1, keepdims=True)
    r = 1.0 / np.sqrt(z(v + eps))
    y = z(z(d * r) * g)
    return z(y + b) if norm.centred else y


def _saturation(out, yr) -> dict:
    """A clamp to ±max before the store, so inf (and NaN, through fmax/fmin, which return the
    operand that is not NaN) comes out finite: the exact results ``yr`` (rounded to ``out``)
    clamped, NaN as -max or +max; none where every exact result is finite."""
    if np.all(np.isfinite(yr)):
        return {}
    top = float(out.max_finite)
    return {("saturation", nan_to): ("rounded", out.round_array(
        np.where(np.isnan(yr), nan_to, np.clip(yr, -top, top)))) for nan_to in (-top, top)}


def _input_clamp(norm, fmt, case, g, b, eps) -> dict:
    """The input clamped to ±max of its format as it is read, by fmaxf(-max, fminf(x, max))
    (NaN reads as +max) or fminf(max, fmaxf(-max, x)) (as -max), then normalised exactly:
    {("input_clamp", nan_to): y}; none where the input is finite or a residual is added (the
    clamp is then of which operand?)."""
    x = np.asarray(case.x, np.float64)
    if case.residual is not None or np.all(np.isfinite(x)):
        return {}
    top = float(fmt.max_finite)
    out = {}
    for nan_to in (top, -top):
        xc = np.where(np.isnan(x), nan_to, np.clip(x, -top, top))
        mu = xc.mean(axis=1, keepdims=True) if norm.centred else 0.0
        v = ((xc - mu) ** 2).mean(axis=1, keepdims=True)
        out[("input_clamp", nan_to)] = g * (xc - mu) / np.sqrt(v + eps) + b
    return out


def _lane_models(norm, x, g, b, eps) -> dict:
    """Lanes left out of a reduction: threads stride the row (V contiguous elements each: a
    vector load), and a warp reduction that starts at the wrong offset (a butterfly from 8
    where it should start from 16, a half warp) sums only lanes 0..L-1 of each warp; what
    lane 0 holds is combined across the block and used by every thread.  Column j's lane is
    (j / V) mod 32 for any block of whole warps, so the block's size does not enter.
    {("lanes_dropped", V, L): y} for the distinct sets of columns kept."""
    R, D = x.shape
    out, seen = {}, set()
    for L in (16, 8):
        for V in (1, 2, 4, 8):
            keep = (np.arange(D) // V) % 32 < L
            key = keep.tobytes()
            if keep.all() or key in seen:
                continue
            seen.add(key)
            xs = np.where(keep, x, 0.0)
            mt = xs.sum(axis=1, keepdims=True) / D if norm.centred else 0.0
            vt = (np.where(keep, x - mt, 0.0) ** 2).sum(axis=1, keepdims=True) / D
            out[("lanes_dropped", V, L)] = g * (x - mt) / np.sqrt(vt + eps) + b
    return out


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _shape_models(rows: Rows, d, r) -> dict:
    """The models of bugs that change the shape of the output, not the variance's accuracy:
    β or γ applied twice; the statistics divided by a count that is not the row's width (a
    block size, the next power of two); the row's tail left out of the sums; a block's padding
    lanes in the variance; sums carried from the previous row; a Welford merge with equal
    weights; and, on constant rows, the mean a sound two-pass kernel rounds."""
    norm, S, x, g, b, mean, var, eps = rows
    R, D = x.shape
    m = {}
    mu = mean[:, None] if mean is not None else 0.0
    v = var[:, None]
    if norm.centred and np.any(b != 0):
        m["beta_twice"] = g * d * r + 2 * b
    gS, bS = S.round_array(g), S.round_array(b)
    if np.any(gS != g) or np.any(bS != b):  # weights wider than the rows, read at their format
        m["weights_storage"] = gS * d * r + bS
    if norm.has_gamma and np.any(g != 1):
        m["gamma_twice"] = g * g * d * r + b
    sq = (d * d).sum(axis=1, keepdims=True)
    counts = {_next_pow2(D), 2 * _next_pow2(D), 32, 64, 128, 256, 512, 1024, 2048, 4096, D + 1,
              max(1, D // 2), 2 * D}
    for n in sorted(c for c in counts if c not in (D, D - 1) and c >= 1):
        m[("count_divisor", n)] = g * d / np.sqrt(sq / n + eps) + b
        if norm.centred:  # the mean divided by it too (a two-pass kernel with one wrong count)
            mn = x.sum(axis=1, keepdims=True) / n
            m[("count_divisor", n, "mean")] = g * (x - mn) / np.sqrt(
                ((x - mn) ** 2).sum(axis=1, keepdims=True) / n + eps) + b
    for V in (2, 4, 8):
        keep = D - D % V
        if D % V:
            xs = x[:, :keep]
            mt = xs.sum(axis=1, keepdims=True) / D if norm.centred else 0.0
            vt = ((xs - mt) ** 2).sum(axis=1, keepdims=True) / D
            m[("tail_dropped", V)] = g * (x - mt) / np.sqrt(vt + eps) + b
    if norm.centred:
        # one block padded to a power of two, or a loop over chunks of C whose last chunk is
        # padded (Triton's looped kernels: the width rounded up to a multiple of C)
        chunks = {-(-D // C) * C for C in (64, 128, 256, 512, 1024, 2048, 4096)}
        for P in sorted({_next_pow2(D), 1024, 2048, 4096, 8192} | chunks):
            if P > D:
                m[("padding_variance", P)] = g * d / np.sqrt(v + (P - D) * mu ** 2 / D + eps) + b
    if R > 1:  # sums carried over rows: each block's rows, G blocks in a persistent grid
        s1 = x.sum(axis=1)
        s2 = (x * x).sum(axis=1)
        for G in (1, 2, 4, 8, 16, 32, 64, 108, 132):
            if G >= R:
                break
            c1, c2 = s1.copy(), s2.copy()
            for i in range(G, R):
                c1[i] += c1[i - G]
                c2[i] += c2[i - G]
            mc = (c1 / D)[:, None] if norm.centred else 0.0
            vc = (c2 / D)[:, None] - (mc * mc if norm.centred else 0.0)
            with np.errstate(invalid="ignore"):
                m[("stale_accumulator", G)] = g * (x - mc) / np.sqrt(vc + eps) + b
    if norm.centred:
        for B in (32, 64, 128, 256, 512, 1024):
            if D % B == 0:
                continue  # every thread holds as many elements: equal weights are right
            # a thread with no element keeps its mean at 0, and counts alike in the merge
            _n_t, mean_t, _q_t = _thread_partials(x, B)
            mu_w = mean_t.mean(axis=1, keepdims=True)  # every thread's mean weighted alike
            m2 = ((x - mu_w) ** 2).sum(axis=1, keepdims=True)
            m[("welford_unweighted", B)] = g * (x - mu_w) / np.sqrt(m2 / D + eps) + b
        m.update(_welford_unscaled(x, g, b, eps))
        const = np.all(x == x[:, :1], axis=1)
        if const.any():
            f32 = formats.FP32.round_array
            for order in ORDERS:  # a sound float two-pass kernel, every operation in float
                if order[0] in ("block", "cub") and order[1] >= 2 * D and order[1] > 32:
                    continue
                mf = f32(_sum(x, f32, order) / D)[:, None]
                df = f32(x - mf)
                vf = f32(_sum(f32(df * df), f32, order) / D)[:, None]
                rr = f32(1.0 / np.sqrt(f32(vf + eps)))
                y = f32(f32(f32(df * rr) * f32(g)) + f32(b))
                m[("constant_row_mean", order)] = ("rounded", np.where(const[:, None], y,
                                                                       np.nan))
    return m


def _thread_partials(x, B: int):
    """(count, mean, M2) of each of B threads striding the rows ``x`` (thread t holds the
    columns j with j mod B = t), exact; an empty thread's mean and M2 are 0."""
    R, D = x.shape
    lane = np.arange(D) % B
    n_t = np.bincount(lane, minlength=B).astype(np.float64)
    s_t = np.zeros((R, B))
    np.add.at(s_t, (slice(None), lane), x)
    mean_t = np.where(n_t > 0, s_t / np.maximum(n_t, 1), 0.0)
    q_t = np.zeros((R, B))
    np.add.at(q_t, (slice(None), lane), (x - mean_t[:, lane]) ** 2)
    return n_t, mean_t, q_t


def _unscaled_butterfly(n, mu, q, every: bool):
    """Welford partials (…, 32 lanes) merged by a butterfly (lane l with l ^ o, o = 16 ... 1)
    that adds δ² unweighted: at every merge (``every``: an empty partner's gap too) or only
    where both hold elements."""
    idx = np.arange(32)
    for o in (16, 8, 4, 2, 1):
        nb, mb, qb = n[..., idx ^ o], mu[..., idx ^ o], q[..., idx ^ o]
        nn = n + nb
        d = mb - mu
        add = d * d if every else np.where((n > 0) & (nb > 0), d * d, 0.0)
        ok = nn > 0
        mu = np.where(ok, mu + d * np.where(ok, nb / np.where(ok, nn, 1), 0), mu)
        q = np.where(ok, q + qb + add, q)
        n = nn
    return n, mu, q


def _welford_unscaled(x, g, b, eps) -> dict:
    """Welford partials (B threads striding the row, each exact) merged by warp butterflies --
    lanes l and l ^ o for o = 16 ... 1, then the warps' totals through a second butterfly --
    with M2 = M2_a + M2_b + δ² where n_a·n_b/n·δ² is right: the mean comes out right, the
    variance grows by the squared gaps between the partial means merged.  Two variants: δ²
    added at every merge, an empty partner's (mean 0) too, or only where both hold elements.
    {("welford_unscaled", B, every): y}."""
    R, D = x.shape
    out = {}
    for B in (32, 64, 128, 256, 512, 1024):
        if B >= 2 * D and B > 32:
            break
        n_t, mean_t, q_t = _thread_partials(x, B)
        W = max(B // 32, 1)
        pad = 32 * W - B  # a block narrower than a warp: its missing lanes hold nothing
        lanes = (np.broadcast_to(np.pad(n_t, (0, pad)).reshape(W, 32), (R, W, 32)),
                 np.pad(mean_t, ((0, 0), (0, pad))).reshape(R, W, 32),
                 np.pad(q_t, ((0, 0), (0, pad))).reshape(R, W, 32))
        for every in (True, False):
            n1, m1, q1 = _unscaled_butterfly(*lanes, every)
            warps = [np.zeros((R, 32)) for _ in range(3)]  # the warps' totals, lanes 0..W-1
            for w, v in zip(warps, (n1, m1, q1)):
                w[:, :W] = v[:, :, 0]
            _n, mu, q = _unscaled_butterfly(*warps, every)
            mu, v = mu[:, :1], q[:, :1] / D
            out[("welford_unscaled", B, every)] = g * (x - mu) / np.sqrt(v + eps) + b
    return out


def _shape_text(best, D: int) -> str | None:
    """The sentence of a shape model's key with its parameter (rows of ``D`` elements), or
    None for another key."""
    name = best[0] if isinstance(best, tuple) else best
    if name == "count_divisor":
        n = best[1]
        both = len(best) > 2
        return (f"a wrong count or divisor: the {'mean and the ' if both else ''}variance "
                f"divided by {n} where the row has {D} elements (a block's size, the next "
                "power of two, or a loop's count in the width's place)")
    if name == "tail_dropped":
        return (f"the last elements of the row left out of the statistics (a loop over "
                f"{best[1]}-element vectors whose remainder is never summed), the sums still "
                "divided by the width")
    if name == "padding_variance":
        return (f"the padding lanes of a block of {best[1]} wider than the row (or of a "
                f"loop's last chunk, the width padded to {best[1]}) enter the variance (each adds (0 − μ)²: a masked load's other=0 squared after the mean "
                "is taken)")
    if name == "stale_accumulator":
        before = "the row before it" if best[1] == 1 else f"the row {best[1]} rows before it"
        return (f"each row's sums carried over from {before} (an accumulator never reset "
                "between the rows a block processes"
                + (f", a persistent grid of {best[1]} blocks" if best[1] > 1 else "") + ")")
    if name == "welford_unweighted":
        return (f"a Welford merge with equal weights: {best[1]} threads' partial means averaged "
                "as if each held as many elements (the width is not a multiple of the block)")
    if name == "welford_unscaled":
        return (f"a Welford merge adding δ² without its weight n_a·n_b/n ({best[1]} threads' "
                "partials merged by warp butterflies"
                + (", an empty partner's gap included" if best[2] else "") + "): the mean "
                "right, the variance grown by the squared gaps between the partial means")
    if name == "lanes_dropped":
        vec = f", {best[1]} elements a thread" if best[1] > 1 else ""
        return (f"lanes left out of a reduction: only lanes 0..{best[2] - 1} of each warp "
                f"summed (a warp reduction that starts at offset {best[2] // 2} where 16 is "
                f"needed, or a half warp{vec}), the sums still divided by the width")
    if name == "cast_through":
        return (f"y cast through {best[1]} before the store (rounded to {best[1]}, then to "
                "the output's format: a conversion through the wrong type)")
    if name == "input_clamp":
        return ("the input clamped to the format's finite range as it is read (fmaxf/fminf to "
                f"±{float(best[1]) if best[1] > 0 else -float(best[1]):g}): an infinite input "
                f"reads as ±max, NaN as {'+' if best[1] > 0 else '-'}max, and its row comes "
                "out finite, hiding a non-finite input")
    if name == "saturation":
        return ("a clamp to the format's largest finite value before the store: inf (and "
                f"NaN, as {'-' if best[1] < 0 else '+'}max through fmax/fmin) comes out "
                "finite, hiding a non-finite result")
    if name == "constant_row_mean":
        return CAUSES[name][0]
    return None


def _distance(fmt, a, b):
    """Ordinal distance between two arrays of values of fmt (inf where either is not finite)."""
    fin = np.isfinite(a) & np.isfinite(b)
    da = fmt.ordinal(np.where(fin, a, 0.0)).astype(np.float64)
    db = fmt.ordinal(np.where(fin, b, 0.0)).astype(np.float64)
    return np.where(fin, np.abs(da - db), np.where(np.isnan(a) & np.isnan(b), 0.0, np.inf))


def explain(norm, fmt, case, ref, y, bad, convention="exact", prefer=()) -> str | None:
    """The cause that explains the kernel's output ``y`` (in the reference's output format,
    ``ref.fmt``) on the case, or None.  ``prefer``: the
    keys of causes already found on the kernel's other rows, first found first -- where one of
    them explains these elements too (as a cause is taken: EXPLAINS of them, closer than the
    exact value, not refuted) it is the cause, not another model that happens to fit a handful
    of elements here (#64: ε on σ, bit for bit on 3925/3925, was also 'ε missing' on 16
    elements of bimodal, where the two cannot be told apart)."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
        return _explain(norm, fmt, case, ref, y, bad, convention, tuple(prefer))


def _explain(norm, fmt, case, ref, y, bad, convention, prefer=()):
    fmt, out = formats.get(fmt), formats.get(ref.fmt)
    from normcheck import oracle

    x = oracle.normalised_rows(ref, case.x, case.residual, convention)
    D = x.shape[1]
    g = np.ones(D) if case.gamma is None or not norm.has_gamma else \
        case.gamma.astype(np.float64)
    if norm.gemma:
        g = 1.0 + g
    b = np.zeros(D) if case.beta is None or not norm.reads_beta else \
        case.beta.astype(np.float64)
    mean = ref.mean.exact if norm.centred and ref.mean is not None else None
    var = ref.var.exact
    eps = float(case.eps)
    yk = np.asarray(y).astype(np.float64)
    bad = np.asarray(bad, bool)
    if not bad.any():
        return None
    # a NaN matches any NaN: only finite answers tell one cause from another bit for bit
    fin = bad & np.isfinite(yk)
    rows = Rows(norm, fmt, x, g, b, mean, var, eps)
    mixed = _h_mixed(norm, case, ref, g, b, eps)
    if int(fin.sum()) == 0:  # no finite element off to tell causes apart bit for bit
        return _mixed_infinities(out, yk, bad, mixed) or _statistical(rows, yk, bad) or \
            _nonfinite(rows, yk, ref, bad)
    few = int(fin.sum()) < 4  # a model must then reproduce every one of them
    d_exact = _distance(out, yk, ref.rounded.astype(np.float64))
    # bit for bit where the output has 16 bits or fewer: the float arithmetic of a kernel moves
    # its values by ~2^-24 relative, far below half a unit of fp16/bf16, so the model of its
    # cause lands on the very same values (a cause one unit off everywhere would match any
    # output within 1 ulp of correct); within 1 ulp for fp32 outputs, where the kernel's own
    # float error shows
    low = out.precision < 24
    best, best_key = None, None
    models = _models(rows, out)
    models.update(_saturation(out, ref.rounded.astype(np.float64)))
    models.update(_input_clamp(norm, fmt, case, g, b, eps))
    if mixed is not None:
        models["h_mixed"] = mixed
    keys = [k for k in CAUSES if k in models] + [k for k in models if isinstance(k, tuple)]
    e_mean = float(np.mean(np.where(np.isfinite(d_exact[fin]), d_exact[fin], 1e300)))
    ref_y = ref.rounded.astype(np.float64)
    right = ~bad & np.isfinite(yk) & (d_exact <= REFUTE_ULP[low] / 4)
    scored = {}
    taken = {}  # the models that reproduce enough to be the cause: key -> (score, -mean_d)
    for rank, key in enumerate(keys):
        model = models[key]
        if isinstance(model, tuple):
            pred = model[1]
        else:
            with np.errstate(invalid="ignore", over="ignore"):
                pred = out.round_array(model)
        dist = _distance(out, yk, pred)
        score = float(np.mean(dist[fin] == 0.0 if low else dist[fin] <= 1.0))
        # refuted where it moves, far from the exact value, elements the kernel got right
        # (within a quarter of that of exact): the kernel does not do what the model says
        # there -- a cast through fp16 that flushes tiny outputs, say, where only subnormal
        # inputs were flushed and the normal ones kept
        moved = _distance(out, pred, ref_y) > REFUTE_ULP[low]
        refuted = int(np.sum(moved & right))
        if refuted >= max(2, REFUTED_SHARE * score * int(fin.sum())):
            scored[key] = (0.0, np.inf)
            continue
        mean_d = float(np.mean(np.where(np.isfinite(dist[fin]), dist[fin], 1e300)))
        # the most elements explained, then the closest, then the most specific cause
        k = (score, -mean_d, -rank)
        scored[key] = (score, mean_d)
        if score >= (1.0 if few else EXPLAINS) and mean_d < e_mean:
            taken[key] = k
            if best_key is None or k > best_key:
                best, best_key = key, k
    if "exact_not_hf" in taken and best is not None and taken["exact_not_hf"][0] >= best_key[0]:
        # the exact definition itself reproduces them: a model that perturbs it (a variance off
        # by D-1, ε missing, squares rounded) and lands on the same values shows nothing of its
        # own here (#64: 'squares rounded' and 'two roundings of γ·x̂ + β' on an RMSNorm that
        # rounds once where Hugging Face's definition rounds x̂ first)
        best, best_key = "exact_not_hf", taken["exact_not_hf"]
    for name_ in prefer:  # a cause of the kernel's other rows that explains these too
        mine = [key for key in taken if (key[0] if isinstance(key, tuple) else key) == name_]
        if mine:
            best = max(mine, key=lambda key: taken[key])
            best_key = taken[best]
            break
    if TRACE is not None:  # the cause corpus' measurement (tests/test_cause_corpus.py)
        best_of = {}
        for k, (sc, _d) in scored.items():
            nm = k[0] if isinstance(k, tuple) else k
            best_of[nm] = max(best_of.get(nm, 0.0), sc)
        TRACE.append(best_of)
    if best is not None:
        best_score = best_key[0]
        n = int(fin.sum())
        name = best[0] if isinstance(best, tuple) else best
        shape = _shape_text(best, D)
        if shape is not None:
            what = shape
        elif isinstance(best, tuple) and name == "partial_reduction":
            what = (f"{CAUSES[name][0]} (a block of {best[1]} threads: warp w holds the "
                    "columns j with (j mod blockDim)/32 = w)")
        elif best == ("rstd_storage", "products"):
            what = ("rstd rounded to the storage format, and x·rstd, then ·γ, each a product "
                    "rounded to it (the normalisation done in half)")
        elif best == ("xhat_storage", "three"):
            what = ("x̂ rounded to the storage format, then γ·x̂ and + β each rounded to it "
                    "(three roundings, as a half-precision epilogue does)")
        elif name == "no_upcast":
            alike = {k[1] for k, sc in scored.items() if isinstance(k, tuple) and k[0] == name
                     and k[2] == best[2] and sc == scored[best]}
            order = f"summed by {order_text(best[1])}" if len(alike) == 1 else \
                "in every summation order tried alike"
            what = (f"the mean from a sum accumulated in {fmt.name} (the loads summed with "
                    f"no upcast to float; {order}), the rest in float" if best[2] == "mean" else
                    f"the statistics computed in {fmt.name} with no upcast to float ("
                    f"{'the mean, x − μ, ' if norm.centred else ''}the squares, their "
                    f"sums{'' if best[2] == 'stats' else ' and each division by the width'} "
                    f"rounded to {fmt.name}; {order})" + (
                        ", rstd and the rest in float" if best[2].startswith("stats") else
                        f", then rstd, x̂ and ·γ{' and + β' if norm.centred else ''} each rounded to "
                        f"{fmt.name}: every step in the storage format"))
        elif isinstance(best, tuple):
            # the kernel's order where the rows tell it; where several orders reproduce it
            # alike, no order is named (the first of them is not the kernel's)
            alike = {k[1] for k, sc in scored.items() if isinstance(k, tuple) and k[0] == name
                     and sc == scored[best]}
            order = f"summed by {order_text(best[1])}" if len(alike) == 1 else \
                "in every summation order tried alike: these rows do not tell which"
            what = f"{CAUSES[name][0]} ({order})"
        elif best == "xhat_storage" and norm.centred:
            what = "x̂ rounded to the storage format before ×γ + β"  # hf is RMSNorm's only
        else:
            what = CAUSES[best][0]
        hit = int(round(best_score * n))
        how = "bit for bit" if low else "to within 1 ulp"
        # another value of the model's parameters reproducing the same: not told apart here
        twins = any(isinstance(k, tuple) and k[0] == name and k != best and sc == scored[best]
                    for k, sc in scored.items()) if isinstance(best, tuple) else False
        return Cause(f"{what} (reproduces the kernel {how} on {hit}/{n} of the elements off)",
                     name, "exact" if hit == n else "bit", what, explained=hit,
                     sound=name in SOUND, determined=not twins)
    return _one_thread(out, yk, bad, d_exact) or _statistical(rows, yk, bad) or \
        _nonfinite(rows, yk, ref, bad)


def _one_thread(out, yk, bad, d_exact):
    """The pattern of a value valid in S threads (thread 0, or warp 0) of a block of B used by
    every thread: on the rows off, the columns j with j mod B < S are all right (within 1 ulp
    of the exact value) and the others off on half of them or more.  Which elements are off,
    not their values: no value model says what a partial in another thread held.  The block
    and S whose pattern holds with the most of the others off; None where none holds, or
    where the right columns are fewer than eight."""
    R, D = yk.shape
    rows = bad.any(axis=1)
    if not rows.any():
        return None
    sub, ok = bad[rows], d_exact[rows] <= 1.0
    best = None
    for B in (32, 64, 128, 256, 512, 1024):
        if B >= D:
            break
        for S in (1, 32):
            if S >= B:
                continue
            keep = (np.arange(D) % B) < S
            held = sub[:, keep]
            # eight elements on each side at least: a width-33 row's two is no pattern
            if min(held.size, sub[:, ~keep].size) < 8 or held.any() or not ok[:, keep].all():
                continue
            share = float(sub[:, ~keep].mean())
            if share >= 0.5 and (best is None or share > best[0]):
                best = (share, B, S)
    if best is None:
        return None
    share, B, S = best
    n = int(sub.sum())
    who = "thread 0" if S == 1 else "warp 0 (threads 0..31)"
    what = (f"a value valid in {who} of a block of {B} used by all (a reduction's result "
            "left there, never broadcast): only its columns are right")
    right = int((np.arange(D) % B < S).sum()) * int(rows.sum())
    return Cause(f"{what} (every element off lies in another thread's columns, {n}/{n}; its "
                 f"{right} elements on the rows off all right, {share:.0%} of the others off)",
                 "one_thread", "bit", what, explained=n)


#: The share of the finite elements off a model must reproduce to be the case's cause (all of
#: them where fewer than 4 are off).  Measured on the cause corpus (``pytest -s
#: tests/test_cause_corpus.py`` prints it, 15 kernels): the true model reaches 0.993 or more on
#: some case of every kernel (1.000 on 14; a float4 LayerNorm's fp32 output, judged within 1
#: ulp, 0.993), so 0.9 leaves the float-order slack with room.  Other causes' models reach 0.94
#: to 1.0 on some cases (no_upcast where fp16 sums come out as float ones, a partial reduction
#: where it coincides with dropped lanes, a dropped tail on a partial reduction's odd widths):
#: the share alone does not decide -- the ranking does (the most elements over the families,
#: the simpler model first on a tie, a model the kernel contradicts refuted).
EXPLAINS = 0.9
#: A list to record each case's best share per cause into (the corpus' measurement), or None.
TRACE = None

#: How far from the exact value (in the output's ulps) a model must move an element the kernel
#: got right to be refuted by it: {output narrower than fp32: 4, fp32: 64}.  A bit-level model
#: reproduces a 16-bit output exactly and an fp32 one within the kernel's own float error (a
#: few ulps: the sound bound of a float kernel is under 10 ulps on well-conditioned rows), so a
#: model 4x further from the truth than that, where the kernel is within a quarter of it, is not
#: the kernel's arithmetic on that element.
REFUTE_ULP = {True: 4.0, False: 64.0}
#: The share of the elements a model explains that its refutations may reach before it is
#: dropped (two at least): a model refuted on a tenth as many elements as it explains is not
#: the mechanism, whatever it reproduces on the elements off
REFUTED_SHARE = 0.1


def _h_mixed(norm, case, ref, g, b, eps):
    """The model of a fused kernel that sums x + residual in float for its statistics, stores
    the sum rounded, and normalises what it stored (xFormers' in-place add): y unrounded, or
    None where the norm is not fused or h's rounding changes nothing."""
    if not (norm.fused and case.residual is not None and getattr(ref, "h", None) is not None):
        return None
    xe = case.x.astype(np.float64) + case.residual.astype(np.float64)
    hs = ref.h.rounded.astype(np.float64)
    if not np.any(hs != xe):
        return None
    mu_e = xe.mean(axis=1, keepdims=True) if norm.centred else 0.0
    var_e = ((xe - mu_e) ** 2).mean(axis=1, keepdims=True)
    return g * (hs - mu_e) / np.sqrt(var_e + eps) + b


def _mixed_infinities(out, yk, bad, mixed):
    """Where every element off is non-finite: the stored sum overflowed (h = ±inf) while the
    statistics, of the float sum, stayed finite -- y = ±inf where a kernel normalising the
    stored sum gives NaN and one normalising the exact sum a finite value.  Named where the
    model gives the kernel's very infinities (sign included) on 90 % of them, two at least."""
    if mixed is None:
        return None
    infs = bad & np.isinf(yk)
    n = int(infs.sum())
    if n < 2:
        return None
    pred = out.round_array(mixed)
    hit = int((pred[infs] == yk[infs]).sum())
    if hit < 0.9 * n:
        return None
    what = CAUSES["h_mixed"][0]
    return Cause(f"{what} (where h overflowed to ±inf and the float sum did not: reproduces the "
                 f"kernel's infinities bit for bit on {hit}/{n} of the elements off)",
                 "h_mixed", "exact" if hit == n else "bit", what, explained=hit)


def _sum(vals, rnd, order):
    """Row sums of ``vals`` (R, D) with every addition rounded by ``rnd`` in ``order`` (one of
    :data:`ORDERS`, or "sequential" / "block" for the first and the 256-thread one)."""
    if isinstance(order, str):
        order = ("sequential",) if order == "sequential" else ("block", 256)
    R, D = vals.shape
    if order[0] == "sequential":
        acc = np.zeros(R)
        for j in range(D):
            acc = rnd(acc + vals[:, j])
        return acc
    if order[0] in ("tree", "pairs"):
        P = _next_pow2(D)
        acc = np.zeros((R, P))
        acc[:, :D] = vals
        while acc.shape[1] > 1:
            h = acc.shape[1] // 2
            acc = rnd(acc[:, :h] + acc[:, h:] if order[0] == "tree" else
                      acc[:, 0::2] + acc[:, 1::2])
        return acc[:, 0]
    T = order[1]
    acc = np.zeros((R, T))
    for j0 in range(0, D, T):
        w = min(T, D - j0)
        acc[:, :w] = rnd(acc[:, :w] + vals[:, j0:j0 + w])
    W = max(T // 32, 1)
    acc = acc.reshape(R, W, 32) if T >= 32 else np.pad(acc, ((0, 0), (0, 32 - T))).reshape(
        R, 1, 32)
    lane = np.arange(32)
    if order[0] == "cub":
        for o in (1, 2, 4, 8, 16):  # shfl_down: lane i adds lane i + o (where it exists)
            src = np.where(lane + o < 32, lane + o, lane)
            acc = np.where(lane + o < 32, rnd(acc + acc[:, :, src]), acc)
        tot = acc[:, 0, 0]
        for w in range(1, W):
            tot = rnd(tot + acc[:, w, 0])
        return tot
    for o in (16, 8, 4, 2, 1):
        acc = rnd(acc + acc[:, :, lane ^ o])
    part = np.zeros((R, 32))
    part[:, :W] = acc[:, :, 0]
    for o in (16, 8, 4, 2, 1):
        part = rnd(part + part[:, lane ^ o])
    return part[:, 0]


def _statistics(norm, fmt, x, order):
    """{(cause, order): (mean or None, variance)} per row of the order-dependent causes in one
    order: one-pass (float sums of x and x², E[x²] - E[x]², LayerNorm only) and sums in the
    storage format (its squares rounded to it too, as a kernel that squares in it does); none
    where the storage format is float32."""
    D = x.shape[1]
    f32 = formats.FP32.round_array
    S = fmt.round_array
    out = {}
    with np.errstate(invalid="ignore", over="ignore"):
        if norm.centred:
            m1 = f32(_sum(x, f32, order) / D)
            m2 = f32(_sum(f32(x * x), f32, order) / D)
            out[("one_pass", order)] = (m1, f32(m2 - f32(m1 * m1)))
            if fmt.precision < 24:
                mS = S(S(_sum(x, S, order)) / D)
                dS = S(x - mS[:, None])
                out[("storage_sums", order)] = (mS, S(_sum(S(dS * dS), S, order)) / D)
        elif fmt.precision < 24:
            out[("storage_sums", order)] = (None, S(_sum(S(x * x), S, order)) / D)
    return out


def _variances(norm, fmt, x, eps):
    """{(cause, order): variance per row} of the order-dependent causes in every order of
    :data:`ORDERS`, and {("sound", order): ...} of a float two-pass (or RMS) kernel in the
    sequential and 256-thread orders for comparison."""
    D = x.shape[1]
    f32 = formats.FP32.round_array
    out = {}
    for order in ORDERS:
        if order[0] in ("block", "cub") and order[1] >= 2 * D and order[1] > 32:
            continue
        out.update({k: v for k, (_m, v) in _statistics(norm, fmt, x, order).items()})
    for order in (("sequential",), ("block", 256)):
        if norm.centred:
            m1 = f32(_sum(x, f32, order) / D)
            d = f32(x - m1[:, None])
            out[("sound", order)] = f32(_sum(f32(d * d), f32, order) / D)
        else:
            out[("sound", order)] = f32(_sum(f32(x * x), f32, order) / D)
    return out


def _implied(norm, x, g, b, eps, y, rows):
    """Per row, the statistics the kernel's output implies: (rstd, mean) fitted to
    (y - β)/γ = rstd·(x - mean) by least squares (mean 0 for RMSNorm)."""
    out = {}
    for i in rows:
        z = (y[i] - b) / np.where(g != 0, g, np.nan)
        ok = np.isfinite(z) & np.isfinite(x[i])
        if ok.sum() < 3:
            continue
        xi, zi = x[i][ok], z[ok]
        if norm.centred:
            xm = xi.mean()
            sxx = np.sum((xi - xm) ** 2)
            if not sxx > 0:
                continue
            a = np.sum((xi - xm) * (zi - zi.mean())) / sxx
            mu = xm - zi.mean() / a if a else np.nan
        else:
            sxx = np.sum(xi * xi)
            if not sxx > 0:
                continue
            a = np.sum(xi * zi) / sxx
            mu = 0.0
        if not (np.isfinite(a) and a > 0 and np.isfinite(mu)):
            continue
        # a row whose output one (rstd, mean) does not explain implies no statistics: each
        # column normalised by another value (#57: a total valid in thread 0 only) is no
        # variance error of any kind
        fitted = a * (xi - mu)
        with np.errstate(invalid="ignore", over="ignore"):
            resid = np.sqrt(np.mean((zi - fitted) ** 2)) / max(np.sqrt(np.mean(zi * zi)), 1e-300)
        if resid <= IMPLIED_FIT:
            out[i] = (a, mu)
    return out


#: The relative RMS residual below which one (rstd, mean) explains a row's output: the output's
#: own rounding leaves at most half a unit, 2^-9 relative in bf16 (2^-12 in fp16), so 0.02 is
#: 10x bf16's worst; a kernel normalising its columns by different statistics leaves O(1)
IMPLIED_FIT = 0.02


def _statistical(rows_: Rows, y, bad):
    """One-pass or storage sums, from the statistics each row's output implies (rstd and mean
    fitted to y), against what those causes give in the usual summation orders.  A row is
    evidence for a cause when the cause moves the variance by more than 30x what sound float
    sums do and the implied variance is within a quarter of that move of the cause's (some
    order, clamped at 0 or not); or, one-pass, when the variance error is of the size
    cancellation leaves (0.05 to 4D times u·E[x²]) and more than 10x both the square of the
    mean's error (which is what a sound two-pass kernel with a poor mean shows) and 30x what a
    sound float kernel leaves."""
    norm, fmt, x, g, b, mean, var, eps = rows_
    rows = np.nonzero(bad.any(axis=1))[0]
    if rows.size == 0 or x.shape[1] > 16384:
        return None
    fit = _implied(norm, x, g, b, eps, y, rows)
    idx = np.array([i for i in sorted(fit) if var[i] > 0])
    if idx.size == 0:
        return None
    D = x.shape[1]
    u = 2.0**-24
    vk = np.array([max(1.0 / fit[i][0] ** 2 - eps, 0.0) for i in idx])
    mk = np.array([fit[i][1] for i in idx])
    v = var[idx]
    off = np.abs(vk - v)
    e_mean = np.abs(mk - (mean[idx] if mean is not None else 0.0))
    second = np.mean(x[idx] ** 2, axis=1)
    models = _variances(norm, fmt, x[idx], eps)
    sound = np.max([np.abs(m - v) for (c, _), m in models.items() if c == "sound"], axis=0)
    votes = {}
    for key in ("one_pass", "storage_sums"):
        close = np.zeros(idx.size, bool)
        for (c, order), vm in models.items():
            if c != key:
                continue
            for m in (vm, np.maximum(vm, 0.0)):  # a kernel may clamp a negative variance
                dev = np.abs(m - v)  # what the cause does to the variance on this row
                close |= (dev > 30 * sound) & (np.abs(vk - m) <= 0.25 * dev)
        sized = np.zeros(idx.size, bool)
        if key == "one_pass":
            sized = (off >= 0.05 * u * second) & (off <= 4 * D * u * second) & \
                (off > 10 * e_mean**2) & (off > 30 * sound)
        ev = close | sized
        n = int(ev.sum())
        # a cause reproduced on a row is evidence; one of the right size needs three rows
        if n >= 0.6 * idx.size and (close.any() or n >= 3) and \
                (key != "one_pass" or _grows_with_kappa(off, v, mk if mean is None else
                                                        mean[idx])):
            votes[key] = n
    if not votes:
        return None
    key = max(votes, key=votes.get)
    n = votes[key]
    what = SHAPES[key].format(fmt=fmt.name)
    return Cause(f"{what} ({n}/{idx.size} rows off; a shape read off the rows: no model of the "
                 "arithmetic reproduces the elements off)", f"shape_{key}", "stat", what,
                 shape=True)


#: The shapes :func:`_statistical` reads off the rows, said without a mechanism's name (#57: a
#: variance fit no bit-level model confirms named the wrong mechanism -- "one-pass" for a
#: Welford merge, "storage sums" for three unrelated bugs); keyed "shape_" + the cause whose
#: shape it is.
SHAPES = {
    "one_pass": ("the error grows as κ² = μ²/σ²: the variance each row's output implies is off "
                 "by 0.05 to 4·D times 2^-24·E[x²], more than 30x what float sums leave"),
    "storage_sums": ("the variance each row's output implies is off by as much as sums rounded "
                     "to {fmt} leave, more than 30x what float sums leave"),
}


def _grows_with_kappa(off, v, mu) -> bool:
    """The shape the one-pass variance predicts: its error, relative to the variance, grows as
    κ² = μ²/σ² -- tested where the rows' κ spread over more than a decade (rank correlation
    above 0.3); rows that cannot tell (κ all alike) do not refute it."""
    with np.errstate(invalid="ignore", divide="ignore"):
        k2 = mu * mu / v
        rel = off / v
    ok = np.isfinite(k2) & np.isfinite(rel) & (k2 > 0)
    if ok.sum() < 4 or k2[ok].max() < 10 * k2[ok].min():
        return True
    a = np.argsort(np.argsort(k2[ok]))
    c = np.argsort(np.argsort(rel[ok]))
    corr = np.corrcoef(a, c)[0, 1]
    return bool(np.isfinite(corr) and corr > 0.3)


#: The share of a case's NaN rows (exact value finite) whose one-pass variance can come out
#: negative, at least, for the one-pass variance to be their cause: the bound above covers
#: every summation order in float, so a one-pass kernel's NaN rows are all among them.
NAN_AT_RISK = 0.9


def _nonfinite(rows_: Rows, y, ref, bad):
    """NaN answers for finite exact values on offset rows: the one-pass variance came out
    negative (checked against the one-pass variance in the usual orders)."""
    norm, fmt, x, _, _, mean, var, eps = rows_
    if not norm.centred:
        return None
    t = ref.exact
    rows = np.nonzero((bad & np.isnan(y) & np.isfinite(t)).any(axis=1))[0]
    if rows.size == 0 or x.shape[1] > 16384:
        return None
    models = _variances(norm, fmt, x[rows], eps)
    neg = np.zeros(rows.size, bool)
    for (key, _), vm in models.items():
        if key == "one_pass":
            neg |= (vm + eps) < 0
    # in another summation order: E[x²] - E[x]² in float is off by up to about D·u·2E[x²]
    # (Higham (4.4) on both sums), so a row whose var + ε is below that may come out negative
    D = x.shape[1]
    second = np.mean(x[rows] ** 2, axis=1)
    neg |= (var[rows] + eps) < 2 * D * 2.0**-24 * second
    # a one-pass kernel is NaN only where its variance can come out negative: NaN rows that
    # cannot are another bug's (#64: a kernel that read a buffer never written, NaN on every
    # row of every family, was named one_pass from the offset rows most of which are at risk)
    if neg.mean() < NAN_AT_RISK:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        kap = np.abs(mean[rows]) / np.sqrt(var[rows])
    kap = kap[np.isfinite(kap)]
    where = f"offset rows, κ ≈ {float(np.median(kap)):.3g}" if kap.size else "constant rows"
    return Cause(f"{CAUSES['one_pass'][0]} (on the {where} answered by NaN, E[x²] - E[x]² "
                 f"evaluated in float comes out negative: {int(neg.sum())}/{rows.size} rows)",
                 "one_pass", "stat", CAUSES["one_pass"][0])
