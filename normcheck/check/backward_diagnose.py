"""The likely cause of a backward kernel's error: the usual wrong answers (γ left out, the mean
or x̂ term missing, no rstd, another variance, Gemma's 1+γ confused, dh not added, PyTorch 1.x's
formula, partial reductions, sums in the storage format, sums over the wrong axis ...) evaluated
on the same rows, and the one that explains the output named as a
:class:`normcheck.causes.Cause` with its key (the per-block-size partial reductions are one key,
``partial_reduction``); dx's error affine in x̂ on each failing row tells the row sums' format."""

from __future__ import annotations

import numpy as np

from normcheck import formats, norms, spec as specs
from normcheck.causes import Cause
from normcheck.check.diagnose import CAUSES, rstd_variants, warp_groups

__all__ = ["explain", "warn_cause"]


def _stats_of(norm, case, eps):
    """(x as float64, mean, r, var) the kernel reads or recomputes."""
    x = case.x.astype(np.float64)
    mu_x = x.mean(axis=1, keepdims=True) if norm.centred else 0.0
    var = ((x - mu_x) ** 2).mean(axis=1, keepdims=True)
    if case.rstd is not None:
        r = case.rstd.astype(np.float64)[:, None]
        mu = case.mean.astype(np.float64)[:, None] if norm.centred else 0.0
    else:
        r = 1 / np.sqrt(var + float(eps))
        mu = mu_x
    return x, mu, r, var


def _sum_rounded(vals, fmt, axis):
    """A sequential sum with every partial sum rounded to fmt."""
    v = np.moveaxis(vals, axis, 0)
    acc = np.zeros(v.shape[1:])
    for row in v:
        acc = fmt.round_array(acc + fmt.round_array(row))
    return acc


def _candidates(norm, case, role, fmt, eps):
    """The usual wrong answers, from the exact inputs: [(key, description, values, kind)] --
    kind "formula" (a different formula, evaluated exactly: the kernel's float evaluation of it
    lies within the sound limit), or "order" (order-dependent: a storage-format or cancelling
    evaluation emulated in one order: the kernel's error has its size and sign)."""
    base = norms.get(norm.base)
    x, mu, r, var = _stats_of(base, case, eps)
    dy = case.dy.astype(np.float64)
    D = x.shape[1]
    gam = np.ones(D) if case.gamma is None else case.gamma.astype(np.float64)
    gp = 1 + gam if base.gemma else gam
    g = dy * gp
    saved = case.rstd is not None
    out = []

    def dx_of(gg, rr=r, mean_term=True, xhat_term=True, sums=None):
        xh = (x - mu) * rr
        if sums is None:
            m = gg.mean(axis=1, keepdims=True) if (base.centred and mean_term) else 0.0
            c = (gg * xh).mean(axis=1, keepdims=True) if xhat_term else 0.0
        else:
            m, c = sums(gg, xh)
        return rr * (gg - m - xh * c)

    def rows_variants(kind):
        """r (and so x̂) from another variance: recomputing kernels only."""
        return [] if saved else [(k, CAUSES[k][0], rr)
                                 for k, rr in rstd_variants(var, D, eps).items()]

    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if role in specs.ROW_GRADS:
            dh = case.extra.get("dh")
            add = 0.0 if dh is None else dh.astype(np.float64)
            out.append(("gamma_dropped", "γ left out of dx (the seed article's formula: dy in "
                        "place of dy·γ)", dx_of(dy) + add, "formula"))
            if base.centred:
                out.append(("mean_term", "the mean term of dx missing (-mean(dy·γ))",
                            dx_of(g, mean_term=False) + add, "formula"))
            out.append(("xhat_term", "the x̂ term of dx missing (-x̂·mean(dy·γ·x̂))",
                        dx_of(g, xhat_term=False) + add, "formula"))
            out.append(("no_rstd", "dx not scaled by rstd", dx_of(g) / r + add, "formula"))
            for key, desc, rr in rows_variants("dx"):
                out.append((key, desc, dx_of(g, rr) + add, "formula"))
            if case.gamma is not None:
                if base.gemma:
                    out.append(("gemma_gamma", "γ where Gemma's norm scales by 1+γ",
                                dx_of(dy * gam) + add, "formula"))
                else:
                    out.append(("gemma_gamma", "1+γ (Gemma's) where the norm scales by γ",
                                dx_of(dy * (1 + gam)) + add, "formula"))
            if dh is not None:
                out.append(("dh_missing", "the residual stream's gradient dh not added",
                            dx_of(g), "formula"))
            if base.centred:
                # PyTorch 1.x: b = (db·mean - ds)·rstd³/D, c = -b·mean - db·rstd/D from
                # ds = Σg·x, db = Σg (rounded once each); dx = rstd·g + b·x + c in float
                f32 = formats.FP32.round_array
                ds, db = f32((g * x).sum(axis=1, keepdims=True)), f32(g.sum(axis=1, keepdims=True))
                rf, mf = f32(r), f32(mu)
                bb = f32(f32(f32(f32(db * mf) - ds) * f32(rf * f32(rf * rf))) / D)
                cc = f32(f32(-bb * mf) - f32(f32(db * rf) / D))
                out.append(("old_formula", "dx = rstd·g + b·x + c with b, c from Σg·x and Σg "
                            "(PyTorch 1.x's formula, x not centred before the sums): b·x and c "
                            "cancel on offset rows", f32(f32(f32(rf * f32(g)) + f32(bb * x)) + cc)
                            + add, "size"))
            for B, grp in warp_groups(D):
                def sums(gg, xh, grp=grp):
                    m = np.zeros_like(gg)
                    c = np.zeros_like(gg)
                    for k in np.unique(grp):
                        sel = grp == k
                        if base.centred:
                            m[:, sel] = gg[:, sel].sum(axis=1, keepdims=True) / D
                        c[:, sel] = (gg[:, sel] * xh[:, sel]).sum(axis=1, keepdims=True) / D
                    return m, c

                out.append((f"partial_{B}", "a partial reduction: Σdy·γ and Σdy·γ·x̂ of each "
                            f"warp only, never combined across the block ({B} threads: the "
                            "columns j with the same (j mod B)/32)",
                            dx_of(g, sums=sums) + add, "formula"))
        else:
            xh = (x - mu) * r
            terms = dy * xh if role == "dgamma" else dy
            for S in (formats.FP16, formats.BF16):  # whatever the output's format
                out.append((f"{role}_storage", f"{role} summed in {S.name} (every partial sum "
                            "rounded to it)", _sum_rounded(terms, S, 0), "order"))
                for T in (32, 64, 128):
                    R = terms.shape[0]
                    n = -(-R // T)
                    pad = np.zeros((n * T, D))
                    pad[:R] = terms
                    part = formats.FP32.round_array(pad.reshape(n, T, D).sum(axis=1))
                    out.append((f"{role}_stage", f"{role}'s second stage -- the per-block "
                                f"partial sums of a two-stage column sum -- summed in {S.name}",
                                _sum_rounded(part, S, 0), "order"))
            rows_sums = terms.sum(axis=1)
            if rows_sums.size >= D:
                out.append((f"{role}_axis", f"{role} summed over the wrong axis (per row, not "
                            "per column)", rows_sums[:D], "formula"))
            if role == "dgamma":
                out.append(("dgamma_no_xhat", "dγ without x̂ (Σdy, the dβ sum)", dy.sum(axis=0),
                            "formula"))
                out.append(("dgamma_gamma", "dγ with γ in it (Σdy·γ·x̂)",
                            (g * xh).sum(axis=0), "formula"))
                for key, desc, rr in rows_variants("dgamma"):
                    out.append((key, desc, (dy * (x - mu) * rr).sum(axis=0), "formula"))
    return out


def _key(candidate: str) -> str:
    """A candidate's stable key: the per-block-size partial reductions are one cause."""
    return "partial_reduction" if candidate.startswith("partial_") else candidate


def explain(norm, case, role, got, ref, limit, fmt, eps):
    """A :class:`~normcheck.check.diagnose.Cause` (see _find), or None."""
    found = _find(norm, case, role, got, ref, limit, fmt, eps)
    if found is None:
        return None
    key, desc, kind = found
    return Cause(desc, _key(key), "formula" if kind == "formula" else "stat",
                 desc.split(" (")[0])


def _find(norm, case, role, got, ref, limit, fmt, eps):
    """The cause that explains the kernel's output, better than every other candidate: a
    formula reproduced within the sound limit (4x), unambiguously (the next best at least twice
    as far); else an order-dependent cause whose emulation lands nearer the kernel than the
    exact value does on 80% of the elements off, with an error of the same size."""
    y = np.asarray(got, np.float64)
    t = ref.exact
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if np.all(y == 0) and np.any(t != 0):
            return ("never_written", "never written: the output still holds the zeros its "
                    "buffer started as (fill = \"zero\"); nothing was added to it", "formula")
        off = np.abs(y - t) > limit
        fits = []
        for key, desc, cand, kind in _candidates(norm, case, role, fmt, eps):
            if np.shape(cand) != y.shape:
                continue
            if kind == "formula":
                rr = float(np.nanmax(np.abs(y - cand) / np.maximum(limit, np.abs(cand) *
                                                                   2.0**-20)))
                fits.append((rr, key, desc, kind))
            elif kind == "size" and off.any():
                # an error of the size the formula leaves in float, which itself fails
                dk = np.abs(y - t)[off]
                de = np.abs(cand - t)[off]
                ratio = float(np.median(dk) / max(float(np.median(de)), 1e-300))
                fails = float(np.mean(de > limit[off]))
                if 0.25 <= ratio <= 4 and fails >= 0.5:
                    fits.append((7.0, key, desc, "order"))
            elif off.any():
                dk = np.abs(y - t)[off]
                dc = np.abs(y - cand)[off]
                de = np.abs(cand - t)[off]
                nearer = float(np.mean(dc <= 0.5 * dk))
                size = float(np.median(de / np.where(dk > 0, dk, 1)))
                same_sign = float(np.mean(np.sign(y - t)[off] == np.sign(cand - t)[off]))
                if nearer >= 0.8 and 0.2 <= size <= 5 and same_sign >= 0.8:
                    fits.append((8.0 - nearer, key, desc, kind))
    if role in specs.ROW_GRADS and off.any():
        sig = _affine_signature(norm, case, y, t, off, fmt, eps)
        if sig is not None:
            fits.append((7.5, *sig, "order"))
    if not fits:
        return None
    fits.sort(key=lambda f: f[0])
    form = [f for f in fits if f[3] == "formula"]
    if form and form[0][0] <= 4.0:
        if len(form) > 1 and form[1][0] < 2 * form[0][0] and \
                _key(form[1][1]) != _key(form[0][1]):
            return None  # two formulas fit as well: no single cause
        return form[0][1:]
    order = [f for f in fits if f[3] == "order"]
    if order:
        return order[0][1:]
    return None


#: The most the old formula's cancellation magnifies float's rounding, in κ float ulps of the
#: row sums' relative error (the b·x and c it cancels are each about κ times the result;
#: measured: 0.011 at κ ≈ 1e5 in fp32, 0.65 κu; 16: a margin; rows mixed: 0.3 to 5).
OLD_FORMULA_MAGNIFIES = 16.0


def _affine_signature(norm, case, y, t, off, fmt, eps):
    """dx = r·(g - ḡ - x̂·c): a kernel whose row sums ḡ, c are off by δm, δc is off by
    -r·(δm + x̂·δc) -- affine in x̂ on each row.  On the rows that fail, fit that; when it
    explains the error (R² >= 0.9 on 60% of them), the size of the implied δm, δc names the
    cause: relative errors of the sums of the order of the storage format's unit roundoff (row
    sums accumulated in fp16/bf16), or, on offset rows (κ >= 100) of a LayerNorm, far beyond
    float's: the PyTorch 1.x formula dx = rstd·g + b·x + c, whose b·x and c cancel."""
    base = norms.get(norm.base)
    x, mu, r, var = _stats_of(base, case, eps)
    xh = (x - mu) * r
    dy = case.dy.astype(np.float64)
    gam = np.ones(x.shape[1]) if case.gamma is None else case.gamma.astype(np.float64)
    g = dy * (1 + gam if base.gemma else gam)
    rows = np.nonzero(off.any(axis=1))[0]
    good, rel, kap = 0, [], []
    out_fmt = formats.of_dtype(np.asarray(y).dtype) if np.asarray(y).dtype != np.float64 else \
        formats.of_dtype(case.x.dtype)
    for i in rows:
        # weighted by 1/ulp(t): each element's own final rounding is noise of half an ulp
        w = 1.0 / np.maximum(out_fmt.ulp_array(np.abs(t[i])), 1e-300)
        e = (y[i] - t[i]) / r[i, 0] * w
        A = np.stack([np.ones_like(xh[i]), xh[i]], axis=1) * w[:, None]
        coef, *_ = np.linalg.lstsq(A, e, rcond=None)
        res = e - A @ coef
        tot = np.sum(e ** 2)
        if tot > 0 and 1 - np.sum(res ** 2) / tot >= 0.9:
            good += 1
            m_scale = max(abs(g[i].mean()), np.abs(g[i]).mean() / np.sqrt(x.shape[1]))
            c_scale = max(abs((g[i] * xh[i]).mean()),
                          np.abs(g[i] * xh[i]).mean() / np.sqrt(x.shape[1]))
            rel.append(max(abs(coef[0]) / m_scale, abs(coef[1]) / c_scale))
            sd = np.sqrt(var[i, 0]) if np.ndim(var) else 0.0
            kap.append(abs(float(np.mean(x[i]))) / sd if sd > 0 else np.inf)
    if rows.size == 0 or good < 0.6 * rows.size:
        return None
    rel_m, kap_m = float(np.median(rel)), float(np.median(kap))
    S = formats.of_dtype(case.x.dtype)
    if S.precision < 24 and 2.0 ** -S.precision / 8 <= rel_m <= 64 * 2.0 ** -S.precision:
        return ("row_sums_storage", f"the row sums Σdy·γ and Σdy·γ·x̂ accumulated in {S.name} "
                f"(the error of each failing row is affine in x̂, the sums' relative error "
                f"{rel_m:.2g}, of the order of {S.name}'s unit roundoff)")
    # the old formula's sums are off by the float rounding its cancellation magnifies (about κ
    # float ulps); sums off by far more (a row's sums mixed with another row's: wholly wrong)
    # are no cancellation (#64)
    if base.centred and kap_m >= 100 and rel_m <= OLD_FORMULA_MAGNIFIES * kap_m * 2.0**-24:
        return ("old_formula", "dx = rstd·g + b·x + c with b, c from Σg·x and Σg (PyTorch "
                "1.x's formula, x not centred before the sums): b·x and c cancel on offset rows "
                f"(the error of each failing row is affine in x; κ ≈ {kap_m:.3g})")
    return None


def warn_cause(n, case, role, outs, refs, eps):
    """A warn's cause: the order-dependent candidates (a storage stage) against the output."""
    ref = refs[role]
    limit = np.zeros_like(ref.exact)  # every element off counts
    fmt = ref.fmt if role not in specs.ROW_GRADS else formats.of_dtype(case.x.dtype)
    got = np.asarray(outs[role]).astype(np.float64)
    return explain(n, case, role, got, ref, limit, fmt, eps)
