"""A backward check's rows and their truth: the case of a family (x, dy, the check's γ, the
saved statistics, dh or the forward's y), the exact dx, dγ, dβ (normcheck.oracle.backward),
the sound backward bound (normcheck.bounds.sound_backward) and the terms each output sums (the
scaled error's yardstick) -- every one from one :class:`Plan`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from normcheck import bounds, formats, launch, norms, oracle
from normcheck import families as families_mod
from normcheck.oracle import backward as oracle_backward

__all__ = ["Plan", "case", "reference", "sound_bounds", "term_scales"]


@dataclass(frozen=True)
class Plan:
    """What a backward check's rows and truth depend on."""

    norm: object              # the norm as judged (γ always part of it; β through dβ or y)
    fmt: object               # the rows' storage format
    formats: dict = field(default_factory=dict)  # every role's own format (target.formats)
    stats: str = "recomputed"  # "saved": the kernel reads the forward's mean/rstd
    mode: str = "x"           # "y": x̂ from the forward's y (a from-y backward)
    eps: np.float32 = np.float32(1e-5)
    reads_gamma: bool = True  # the kernel takes γ (else γ = 1)


def case(plan: Plan, fam, rows, cols, seed):
    """A backward case: x and dy of the family, the check's γ (and β where the kernel reads it:
    a from-y backward), the saved statistics, and for a fused backward the residual stream's
    gradient dh (extra), for a from-y backward the forward's y correctly rounded (extra)."""
    norm, fmt, formats_, eps = plan.norm, plan.fmt.name, plan.formats, plan.eps
    x, dy = families_mod.backward_rows(fam, fmt, rows, cols, seed=seed)
    g, b = families_mod.weights(fmt, cols, seed=seed[0])
    gf = formats_.get("gamma", formats.get(fmt))
    g = g if plan.reads_gamma else np.ones(cols)
    g = g if g.dtype == gf.dtype else gf.cast(np.asarray(g, np.float64))
    base = norms.get(norm.base)
    mean = rstd = None
    if plan.stats == "saved" or plan.mode == "y":
        mean, rstd = oracle.saved_statistics(base, x, eps=eps)
        # as the kernel receives them: a statistic stored in fp16 or bf16 is that rounding of
        # the exact one, and the reference is the gradient *of the statistics as stored*, as
        # the forward's is of x as stored (#64: judged against float32's, a sound bf16-stats
        # kernel failed at 28.5x the bound)
        mean, rstd = (None if v is None else _as_stored(v, formats_.get(role))
                      for v, role in ((mean, "mean"), (rstd, "rstd")))
    extra = {}
    beta = None
    if norm.fused:
        rng = np.random.default_rng([*seed, 17])
        extra["dh"] = formats.get(fmt).cast(rng.standard_normal((rows, cols)))
    if plan.mode == "y":
        bf = formats_.get("beta", formats.get(fmt))
        beta = (b if b.dtype == bf.dtype else bf.cast(b.astype(np.float64))) \
            if norm.reads_beta else None
        extra["y"] = oracle.for_norm(base, x, g, beta, eps=eps).rounded
    return launch.Case(x=x, gamma=g if norm.has_gamma else None, beta=beta,
                       eps=np.float32(eps), dy=dy, mean=mean, rstd=rstd, extra=extra)


def _as_stored(v, fmt):
    """A saved statistic (float32, correctly rounded) in its role's own format, if narrower."""
    if not isinstance(fmt, formats.Format) or fmt.precision >= formats.FP32.precision:
        return v
    return fmt.cast(np.asarray(v, np.float64))


def reference(plan: Plan, case):
    """The exact dx, dγ, dβ of the case, each rounded to its output's format."""
    norm, mode, stats, fm, fmt, eps = (plan.norm, plan.mode, plan.stats, plan.formats,
                                       plan.fmt, plan.eps)
    base = norms.get(norm.base).with_affine(True, norm.reads_beta)
    out, po = fm.get("dx", fm.get("d_residual", fmt)).name, fm.get("dgamma", formats.FP32).name
    bo = fm.get("dbeta", formats.FP32).name
    if mode == "y":
        return oracle_backward.backward_from_y(base, case.extra["y"], case.dy, case.gamma,
                                               case.beta, rstd=case.rstd, out=out,
                                               param_out=po, dbeta_out=bo)
    return oracle_backward.backward(base, case.x, case.dy, case.gamma, eps=eps, stats=stats,
                                    mean=case.mean, rstd=case.rstd, dh=case.extra.get("dh"),
                                    out=out, param_out=po, dbeta_out=bo)


def sound_bounds(plan: Plan, case, ref):
    """{role: E} of the sound backward bound (x̂ from y for a from-y backward; + dh rounds once
    more)."""
    norm, mode, eps = plan.norm, plan.mode, plan.eps
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


def term_scales(plan: Plan, case):
    """{role: the magnitude of the terms each output sums} (float64): dx's r·(|g| + |ḡ| +
    |x̂|·mean|g·x̂|), dγ's Σ|dy·x̂|, dβ's Σ|dy| -- the scaled error's yardstick, as max(|γx̂|,
    |β|) is the forward's."""
    norm, mode, eps = plan.norm, plan.mode, plan.eps
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
