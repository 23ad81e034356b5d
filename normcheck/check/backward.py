"""The verdict on a backward kernel: dx, dγ, dβ against their exact values.

Each family of :data:`normcheck.families.BACKWARD_FAMILIES` gives (x, dy); the weights are the
check's realistic γ; with saved statistics (the kernel reads mean/rstd) the case carries the
forward pass's correctly rounded float32 mean and rstd, as a sound forward kernel writes them.
Every output the kernel writes is compared with :func:`normcheck.oracle.backward.backward`:

* **fail** — beyond what a sound float backward kernel can produce
  (:func:`normcheck.bounds.sound_backward`: sequential or atomic sums in any order, one final
  rounding, never below 1 ulp), non-finite where the exact value is finite, never written, or a
  crash / hang / out-of-bounds access / exception; each accuracy failure tested against the usual
  causes (γ left out, the mean term missing, the x̂ term missing, sums in the storage format,
  sums over the wrong axis ...) and the one that explains the output named, as a
  :class:`normcheck.causes.Cause` with its key (the candidate's key in :func:`_candidates`; the
  per-block-size partial reductions are one key, ``partial_reduction``);
* **warn** — within that bound, but an output's largest scaled error (in ulps of the terms it
  sums) more than k × the larger of the built-in sound strategies' on the same rows (two block
  reductions for dx; float atomics, and float partials with a float second stage, for dγ, dβ),
  k and the floor from :mod:`normcheck.check.tolerances`, its cause named where one fits;
* **pass** otherwise.

Kernels with dγ or dβ outputs are also run with the blocks (and warps) in several seeded orders
on the cpu backend: atomics then arrive in different orders, and the spread of dγ across runs
is reported in ulps — the nondeterminism a training run sees.
"""

from __future__ import annotations

import time

import numpy as np

from normcheck import bounds, formats, kernels, launch, metrics, norms, oracle, spec as specs
from normcheck.oracle import backward as oracle_backward
from normcheck import families as families_mod
from normcheck import measure as measure_mod
from normcheck.causes import Cause
from normcheck.check import engine
from normcheck.check.diagnose import CAUSES, rstd_variants, warp_groups
from normcheck.check.result import BackwardDetail
from normcheck.check.engine import assemble
from normcheck.check.engine import FATAL, Failure, odd_rows, with_notes
from normcheck.check.judge import FamilyResult
from normcheck.check.resolve import check_counts, resolve
from normcheck.check.tolerances import TOLERANCES, Verdict
from normcheck.errors import invalid

__all__ = ["check_backward", "ORDERS_DEFAULT"]

#: Block orders of the race measurement.
ORDERS_DEFAULT = 8


def _case(fam, fmt, rows, cols, seed, norm, formats_, stats, eps, reads_gamma, mode):
    """A backward case: x and dy of the family, the check's γ (and β where the kernel reads it:
    a from-y backward), the saved statistics, and for a fused backward the residual stream's
    gradient dh (extra), for a from-y backward the forward's y correctly rounded (extra)."""
    x, dy = families_mod.backward_rows(fam, fmt, rows, cols, seed=seed)
    g, b = families_mod.weights(fmt, cols, seed=seed[0])
    gf = formats_.get("gamma", formats.get(fmt))
    g = g if reads_gamma else np.ones(cols)
    g = g if g.dtype == gf.dtype else gf.cast(np.asarray(g, np.float64))
    base = norms.get(norm.base)
    mean = rstd = None
    if stats == "saved" or mode == "y":
        mean, rstd = oracle.saved_statistics(base, x, eps=eps)
    extra = {}
    beta = None
    if norm.fused:
        rng = np.random.default_rng([*seed, 17])
        extra["dh"] = formats.get(fmt).cast(rng.standard_normal((rows, cols)))
    if mode == "y":
        bf = formats_.get("beta", formats.get(fmt))
        beta = (b if b.dtype == bf.dtype else bf.cast(b.astype(np.float64))) \
            if norm.centred and norm.has_beta else None
        extra["y"] = oracle.for_norm(base, x, g, beta, eps=eps).rounded
    return launch.Case(x=x, gamma=g if norm.has_gamma else None, beta=beta,
                       eps=np.float32(eps), dy=dy, mean=mean, rstd=rstd, extra=extra)


def backward_reference(norm, case, mode, stats, fm, fmt, eps):
    base = norms.get(norm.base).with_affine(True, norm.centred and norm.has_beta)
    out, po = fm.get("dx", fm.get("d_residual", fmt)).name, fm.get("dgamma", formats.FP32).name
    bo = fm.get("dbeta", formats.FP32).name
    if mode == "y":
        return oracle_backward.backward_from_y(base, case.extra["y"], case.dy, case.gamma,
                                               case.beta, rstd=case.rstd, out=out,
                                               param_out=po, dbeta_out=bo)
    return oracle_backward.backward(base, case.x, case.dy, case.gamma, eps=eps, stats=stats,
                                    mean=case.mean, rstd=case.rstd, dh=case.extra.get("dh"),
                                    out=out, param_out=po, dbeta_out=bo)


def backward_bounds(norm, case, mode, ref, eps):
    """{role: E} of the sound backward bound (x̂ from y for a from-y backward; + dh rounds once
    more)."""
    base = norms.get(norm.base)
    if mode == "y":
        gf = case.gamma.astype(np.float64) + (1.0 if base.gemma else 0.0)
        b = case.beta.astype(np.float64) if case.beta is not None else 0.0
        xh = (case.extra["y"].astype(np.float64) - b) / gf
        E = bounds.sound_backward(base, xh, case.dy, case.gamma, rstd=case.rstd, xhat=xh)
    else:
        E = bounds.sound_backward(base, case.x, case.dy, case.gamma, mean=case.mean,
                                  rstd=case.rstd, eps=eps)
    if "dh" in case.extra:
        E["dx"] = E["dx"] + 2.0**-24 * bounds.SOUND_SAFETY * np.abs(ref.dx.exact)
    E["d_residual"] = E["dx"]
    return E


def term_scales(norm, case, mode, eps):
    """{role: the magnitude of the terms each output sums} (float64): dx's r·(|g| + |ḡ| +
    |x̂|·mean|g·x̂|), dγ's Σ|dy·x̂|, dβ's Σ|dy| -- the scaled error's yardstick, as max(|γx̂|,
    |β|) is the forward's."""
    base = norms.get(norm.base)
    dy = case.dy.astype(np.float64)
    gm = np.ones(case.cols) if case.gamma is None else case.gamma.astype(np.float64)
    if base.gemma:
        gm = 1.0 + gm
    g = dy * gm
    if mode == "y":
        b = case.beta.astype(np.float64) if case.beta is not None else 0.0
        xh = (case.extra["y"].astype(np.float64) - b) / gm
        r = case.rstd.astype(np.float64)[:, None]
    else:
        x = case.x.astype(np.float64)
        if case.rstd is not None:
            r = case.rstd.astype(np.float64)[:, None]
            mu = case.mean.astype(np.float64)[:, None] if base.centred else 0.0
        else:
            mu = x.mean(axis=1, keepdims=True) if base.centred else 0.0
            r = 1 / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + float(eps))
        xh = (x - mu) * r
    ag = np.abs(g)
    dxs = r * (ag + np.abs(g.mean(axis=1, keepdims=True)) +
               np.abs(xh) * (ag * np.abs(xh)).mean(axis=1, keepdims=True))
    if "dh" in case.extra:
        dxs = dxs + np.abs(case.extra["dh"].astype(np.float64))
    return {"dx": dxs, "d_residual": dxs, "dgamma": np.abs(dy * xh).sum(axis=0),
            "dbeta": np.abs(dy).sum(axis=0)}


# ------------------------------------------------------------------------------------------------
# Causes
# ------------------------------------------------------------------------------------------------
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


def _explain(norm, case, role, got, ref, limit, fmt, eps):
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
    if base.centred and kap_m >= 100:
        return ("old_formula", "dx = rstd·g + b·x + c with b, c from Σg·x and Σg (PyTorch "
                "1.x's formula, x not centred before the sums): b·x and c cancel on offset rows "
                f"(the error of each failing row is affine in x; κ ≈ {kap_m:.3g})")
    return None


def compare_role(role, ref, got, E, tol, fam, case, norm, scale, eps):
    """(Failure or None, stats) of one output (normcheck.measure): stats has max_ulp, p99_ulp,
    max_scaled, of_bound."""
    got = np.asarray(got)
    fmt = ref.fmt
    if got.dtype != fmt.dtype:
        got = fmt.cast(got.astype(np.float64))
    m = measure_mod.measure(ref, got, E=E, floor=tol.fail_floor, scale=scale,
                            poison=formats.poison_bits(got.dtype))
    st = {"max_ulp": m.max_ulp if m.n else 0.0, "p99_ulp": 0.0,
          "max_scaled": m.max_scaled, "of_bound": m.max_ratio}
    st["p99_ulp"] = metrics.ulp_stats(m.ulp.ravel())[1]
    if m.unwritten:
        i = np.argwhere(launch.unwritten(got))[0]
        st.update(max_ulp=np.inf, of_bound=np.inf)
        return (Failure("unwritten", fam, f"{role}: {m.unwritten}/{got.size} elements never "
                        f"written, first at {tuple(int(v) for v in i)}", output=role), st)
    a = got.astype(np.float64)
    t = ref.exact
    bad_nf = ~np.isfinite(a) & np.isfinite(ref.rounded.astype(np.float64))
    if bad_nf.any():
        i = tuple(int(v) for v in np.argwhere(bad_nf)[0])
        st["of_bound"] = np.inf
        return (Failure("nonfinite", fam, f"{role}: {int(bad_nf.sum())} non-finite where the "
                        f"exact value is finite, e.g. at {i}: kernel={float(a[i])!r} "
                        f"exact={float(t[i])!r}", output=role), st)
    if not m.over:
        return None, st
    k = np.unravel_index(m.argmax_ratio, got.shape)
    limit = bounds.sound_limit(_Scaled(ref, scale), E, tol.fail_floor)
    lim_ulp = float(limit[k] / fmt.ulp_array(np.abs(t[k])))
    cause = _explain(norm, case, role, a, ref, limit, fmt if role not in specs.ROW_GRADS
                     else formats.of_dtype(case.x.dtype), eps)
    where = f"{case.rows}x{case.cols}"
    return (Failure("accuracy", fam,
                    f"{role}: {m.over}/{got.size} elements beyond what a sound kernel can "
                    f"produce; worst " + measure_mod.mismatch(
                        f"at {tuple(int(v) for v in k)} of {where}", a[k], t[k]) +
                    f", {float(m.ulp[k]):.4g} ulp where the sound bound allows {lim_ulp:.4g} "
                    f"({m.max_ratio:.3g}x)",
                    cause=cause, output=role), st)


class _Scaled:
    """A reference with the backward's own scale (the terms an output sums)."""

    def __init__(self, ref, scale):
        self.fmt, self.exact, self.scale = ref.fmt, ref.exact, scale


def _baseline(norm, case, roles, refs, fm, backend, mode):
    """{role: [(built-in, its values)]}: the built-in sound strategies on the same rows (two
    block reductions for dx; float atomics, and float partials with a float second stage, for
    dγ, dβ), each answer rounded to the kernel's output format -- the yardstick of warn is the
    larger of their errors (a sound kernel is as good as the common strategies)."""
    base = norms.get(norm.base)
    if base.gemma or mode == "y":
        return {}
    st = formats.of_dtype(case.x.dtype).name
    mean, rstd = case.mean, case.rstd
    if rstd is None:
        mean, rstd = oracle.saved_statistics(base, case.x, eps=case.eps)
    out = {}
    g = case.gamma if case.gamma is not None else np.ones(case.cols, case.x.dtype)
    if any(r in roles for r in specs.ROW_GRADS):
        v = kernels.get(f"{base.name}_backward_dx_stable_{st}")
        dx = kernels.run_backward_dx(v, case.x, case.dy, g.astype(case.x.dtype), mean, rstd,
                                     backend=backend).astype(np.float64)
        if "dh" in case.extra:
            dx = dx + case.extra["dh"].astype(np.float64)
        out["dx"] = out["d_residual"] = [(v.name, dx)]
    if any(r in roles for r in specs.PARAM_GRADS):
        for algo in ("partial", "atomic"):
            v = kernels.get(f"{base.name}_backward_dparams_{algo}_{st}")
            dg, db = kernels.run_backward_dparams(v, case.x, case.dy, mean, rstd,
                                                  backend=backend)
            out.setdefault("dgamma", []).append((v.name, dg.astype(np.float64)))
            if db is not None:
                out.setdefault("dbeta", []).append((v.name, db.astype(np.float64)))
    return out


def _scaled_max(ref, vals, scale):
    fmt = ref.fmt
    a = fmt.round_array(vals)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        sc = np.abs(a - ref.exact) / fmt.ulp_array(np.maximum(scale, np.abs(ref.exact)))
    sc = sc[np.isfinite(sc)]
    return float(sc.max()) if sc.size else 0.0


def _spread(outs_runs, fmt):
    """max over elements of (max - min) across runs, in ulps of the result."""
    a = np.stack([o.astype(np.float64) for o in outs_runs])
    with np.errstate(invalid="ignore"):
        d = a.max(axis=0) - a.min(axis=0)
        u = fmt.ulp_array(np.abs(a).max(axis=0))
        s = np.where(d == 0, 0.0, d / u)
    return float(np.nanmax(s)) if s.size else 0.0


def check_backward(source=None, entry=None, norm=None, dtype=None, *, spec=None, block=256,
                   backend="cpu", defines=None, examples=64, seed=0, timeout=None,
                   orders=ORDERS_DEFAULT, save_counterexample=None, families=None,
                   include=()):
    """Judge a backward kernel (see the module docstring).  Without ``spec`` the kernel has the
    ABI of cuda_src/backward.cu's dx kernels: (dx, dy, x, γ, mean, rstd, rows, cols).
    ``families`` selects some of normcheck.families.BACKWARD_FAMILIES (default: all)."""
    check_counts(examples, 0, seed)
    if isinstance(orders, bool) or not isinstance(orders, int) or not 0 <= orders <= 64:
        raise invalid("orders", orders, "0 to 64 block orders for the race measurement")
    fams = list(families_mod.BACKWARD_FAMILIES) if families is None else list(families)
    for f in fams:
        if f not in families_mod.BACKWARD_FAMILIES:
            raise invalid("families", f, f"some of {', '.join(families_mod.BACKWARD_FAMILIES)}")
    fams = [f for f in families_mod.BACKWARD_FAMILIES if f in fams]  # in the table's order
    res = resolve(source, entry, norm, dtype, spec=spec, block=block, backend=backend,
                defines=defines, timeout=timeout, backward=True, include=tuple(include))
    spec, n, fmt, target = res.spec, res.norm, res.fmt, res.target
    mode = "y" if spec.has("y") else "x"
    fm = target.formats
    eps = res.eps
    stats = "saved" if mode == "y" else (spec.stats or "recomputed")
    roles = [role for role in specs.GRADS if spec.has(role)]
    t0 = time.perf_counter()
    judge = BackwardJudge(target, n, fmt, fm, spec, res.backend, roles, stats, mode, eps, seed,
                          orders)
    results, failures, warnings = engine.run_families(judge, fams, examples)
    be = res.backend
    save = engine.saver(judge, judge.worst, save_counterexample,
                        {**res.desc, "backward": {"stats": stats, "mode": mode}}, target.label,
                        "backward", verdicts=("fail", "warn"))
    return assemble(
        kernel=target.label, norm=n, norm_desc=n.describe() + " backward", reference="exact",
        dtype=fmt.name, out_dtype=fm.get("dx", fm.get("d_residual", fmt)).name,
        backend=getattr(target, "backend", None) or be,
        failures=failures, warnings=warnings, families=results,
        tolerance=TOLERANCES[fm.get("dx", fmt).name], t0=t0, save=save,
        key=lambda f: (f.kind, f.family, f.output),  # one per output (dx, dgamma, dbeta)
        baseline_note="backward: fail beyond the sound backward bound "
                      "(normcheck.bounds.sound_backward); warn beyond k x the built-in "
                      "strategies' on the same rows; statistics " + stats
                      + ("; x̂ from y" if mode == "y" else ""),
        detail=BackwardDetail(roles, stats, mode, judge.races, orders, seed))


class BackwardJudge(engine.Judge):
    """The backward check's side of check.engine.run_families: each family's widths at one row
    count, every output (dx, dγ, dβ ...) measured against its own sound bound and the built-in
    strategies' error, and on the cpu backend dγ's and dβ's spread over seeded block orders."""

    Result = FamilyResult

    def __init__(self, target, norm, fmt, fm, spec, backend, roles, stats, mode, eps, seed,
                 orders):
        super().__init__(target)
        self.n, self.fmt, self.fm, self.be = norm, fmt, fm, backend
        self.roles, self.stats, self.mode, self.eps = roles, stats, mode, eps
        self.seed, self.orders = seed, orders
        self.reads_gamma = spec.has("gamma")
        self.lo, self.hi = spec.cols
        self.multiple = max(1, spec.cols_multiple_of)
        #: a family's place in BACKWARD_FAMILIES seeds its rows, whichever families run
        self.index = {f: i for i, f in enumerate(families_mod.BACKWARD_FAMILIES)}
        self.races = {}

    def plan(self, fam, examples):
        fam_rows, widths = families_mod.BACKWARD_FAMILIES[fam][1]
        m = self.multiple
        ws = sorted({min(max(w, self.lo), self.hi) // m * m or m for w in widths})
        rows = fam_rows or odd_rows(max(1, examples))
        return [(rows, cols) for cols in ws]

    def start(self, fam):
        st = super().start(fam)
        st.stats_by_role, st.base_by_role, st.last = {}, {}, None
        return st

    def step(self, st, fi, k, rows, cols):
        n, fm, eps, fam = self.n, self.fm, self.eps, st.fr.family
        case = _case(fam, self.fmt.name, rows, cols, [self.seed, self.index[fam], k], n, fm,
                     self.stats, eps, self.reads_gamma, self.mode)
        outs = self.run_target(fam, case)
        if isinstance(outs, Failure):
            return case, None, [outs]  # the loop keeps the launch that faulted
        ref = backward_reference(n, case, self.mode, self.stats, fm, self.fmt, eps)
        E = backward_bounds(n, case, self.mode, ref, eps)
        scale = term_scales(n, case, self.mode, eps)
        refs = {"dx": ref.dx, "d_residual": ref.dx, "dgamma": ref.dgamma, "dbeta": ref.dbeta}
        st.last = (case, outs, refs, E)
        base = _baseline(n, case, [role for role in self.roles if role in outs], refs, fm,
                         self.be, self.mode)
        fails = []
        for role in self.roles:
            r_ref = refs[role]
            if r_ref is None or role not in outs:
                continue
            f, rs = compare_role(role, r_ref, outs[role], E[role], TOLERANCES[r_ref.fmt.name],
                                 fam, case, n, scale[role], eps)
            acc = st.stats_by_role.setdefault(role, {"max_ulp": 0.0, "p99_ulp": 0.0,
                                                     "max_scaled": 0.0, "of_bound": 0.0})
            for key in acc:
                acc[key] = max(acc[key], rs[key])
            for name, vals in base.get(role, ()):
                prev = st.base_by_role.get(role, (name, 0.0))
                e = _scaled_max(r_ref, vals, scale[role])
                if e >= prev[1]:
                    st.base_by_role[role] = (name, e)
            if f is not None:
                fails.extend(with_notes([f], outs))
                if f.cause and not st.fr.cause:
                    st.fr.cause = f.cause
                if self.worst is None:
                    self.worst = engine.WorstRow(fam, cols, 0, case=case)
        if self.orders and any(out in outs for out in specs.PARAM_GRADS) and \
                self.be.capabilities.block_orders and fam in ("gaussian", "tall", "tiles"):
            runs = {out: [] for out in specs.PARAM_GRADS if out in outs}
            for s_ in range(self.orders):  # every order seeded: the spread is reproducible
                o = self.target(case, schedule="random", seed=self.seed * 1000 + s_ + 1,
                                workers=1)
                for out in runs:
                    runs[out].append(o[out])
            for out, vals in runs.items():
                self.races[f"{out} {fam} {rows}x{cols}"] = _spread(
                    vals, formats.of_dtype(np.asarray(vals[0]).dtype))
        return case, outs, fails

    def finish(self, st):
        fr, fam, warnings = st.fr, st.fr.family, []
        outputs = {}
        for role, rs in st.stats_by_role.items():
            d = dict(rs)
            if role in st.base_by_role:
                refs = st.last[2] if st.last is not None else {}
                tol = TOLERANCES[refs[role].fmt.name] if refs.get(role) is not None else None
                name, bmax = st.base_by_role[role]
                d["baseline"] = {"name": name, "max_scaled": bmax}
                if tol is not None:
                    d["warn_at"] = max(tol.warn_floor, tol.warn_k * bmax)
            outputs[role] = d
        fr.outputs = outputs
        fr.max_ulp = max([d["max_ulp"] for d in outputs.values()] + [0.0])
        fr.p99_ulp = max([d["p99_ulp"] for d in outputs.values()] + [0.0])
        fr.max_scaled = max([d["max_scaled"] for d in outputs.values()] + [0.0])
        fr.max_of_bound = max([d["of_bound"] for d in outputs.values()] + [0.0])
        if not fr.failures:
            over = [(role, d) for role, d in outputs.items()
                    if "warn_at" in d and d["max_scaled"] > d["warn_at"]]
            if over:
                fr.verdict = Verdict.WARN
                role, d = over[0]
                case, outs, refs, E = st.last
                self.worst = self.worst or engine.WorstRow(fam, case.cols, 0, case=case)
                cause = _warn_cause(self.n, case, role, outs, refs, E, self.fm, self.eps)
                fr.cause = fr.cause or cause
                warnings.append(Failure(
                    "warn", fam, f"{role}: max {d['max_scaled']:.4g} ulp (of the terms summed) "
                    f"is {d['max_scaled'] / max(d['baseline']['max_scaled'], 1e-300):.3g}x the "
                    f"built-in strategies' ({d['baseline']['name']}: "
                    f"{d['baseline']['max_scaled']:.4g}) and above the warn level "
                    f"{d['warn_at']:.4g}; within the sound bound ({d['of_bound']:.3g} of it)",
                    cause=cause, output=role))
        return st.fails, warnings

    def stop(self, failures) -> bool:
        """A fault ends the backward check (the next family would launch the same kernel)."""
        return any(f.kind in FATAL for f in failures)


def _warn_cause(n, case, role, outs, refs, E, fm, eps):
    """A warn's cause: the order-dependent candidates (a storage stage) against the output."""
    ref = refs[role]
    limit = np.zeros_like(ref.exact)  # every element off counts
    fmt = ref.fmt if role not in specs.ROW_GRADS else formats.of_dtype(case.x.dtype)
    got = np.asarray(outs[role]).astype(np.float64)
    return _explain(n, case, role, got, ref, limit, fmt, eps)
