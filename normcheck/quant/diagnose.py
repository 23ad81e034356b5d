"""Why a quantised output breaks its contract: the contract's variants, bit for bit.

Each cause below is the contract with one thing changed; its exact values (q and scales, from
the same rows: normcheck.quant.oracle.contract_result) are compared with what the kernel wrote.
A cause *explains* the output when it reproduces at least 90% of the kernel's values that differ
from the contract (q and scales together) and agrees with the kernel at least as often as the
contract itself does.  The best such cause is named, with its evidence.

============================= ===================================================================
y_rounding_skipped            y not rounded to T before the quantiser (TensorRT-LLM #14464)
y_rounding_added              y rounded to T where the contract quantises the float32 value
xhat_rounding_skipped         x̂ not rounded before ×γ (the contract rounds twice)
xhat_rounding_added           x̂ rounded before ×γ (the contract rounds once)
apply_*                       the scale applied another way: ÷ s, × fl32(1/s), × s, × qmax/amax
amax_from_*                   amax from the float32 value instead of the rounded y, or back
saturation_none               no clamp: NaN (e4m3, above 464) or inf beyond ±max
saturation_added              ±max where the contract gives NaN or inf
scale_floor_missing           no floor: a zero row or group gives s = 0 and 0/0 = NaN
residual_*                    statistics of x + r exactly, or of the sum rounded to T
group_size                    groups of another size
groups_across_rows            groups counted over the flattened tensor
scales_wrong_rows             row i's scales written at row i ± 1
xhat_rounded_y_not            x̂ rounded to T before ×γ, the product not rounded (only the last
                              rounding skipped: TensorRT-LLM #14464's shape on a twice contract)
amax_before_weight            amax over x̂, before ×γ (+β) (vLLM- and TransformerEngine-style)
group_amax_wide               each group's amax over one column more than the group
pow2_floor / pow2_ceil        the e8m0 scale rounded down where the contract rounds it up, or up
group_size                    groups of half or twice the contract's size (also named from the
                              number of scales a row gets, and from a write past the scales)
============================= ===================================================================
"""

from __future__ import annotations

import numpy as np

from normcheck.causes import Cause
from normcheck.quant.contract import Contract
from normcheck.quant.oracle import contract_result

__all__ = ["explain", "variants", "SHARE"]

#: The share of the differing values a cause must reproduce.
SHARE = 0.9

_APPLY = {"div": "÷ scale", "mul_inv": "× fl32(1/scale)", "mul": "× scale",
          "mul_qmax_over_amax": "× fl32(qmax/amax)"}


def variants(c: Contract, norm, storage) -> list:
    """[(key, description, Contract or callable)] of the causes that apply to ``c``."""
    T = storage.name
    out = []
    rn = {"none": "not rounded", "once": f"rounded once to {T}", "twice": f"rounded twice to {T}"}
    for r in ("none", "once", "twice"):
        if r == c.y_rounding or (r == "twice" and (norm.centred or norm.gemma)):
            continue
        if c.y_rounding != "none" and r == "none":
            key = "y_rounding_skipped"
            d = (f"y not rounded to {T} before the quantiser (the contract rounds it "
                 f"{c.y_rounding}): the skipped rounding of TensorRT-LLM #14464")
        elif c.y_rounding == "none":
            key = "y_rounding_added"
            d = f"y rounded to {T} before the quantiser ({rn[r]}; the contract quantises the " \
                "float32 value)"
        elif c.y_rounding == "twice":
            key = "xhat_rounding_skipped"
            d = f"x̂ not rounded to {T} before ×γ (y rounded once; the contract rounds twice)"
        else:
            key = "xhat_rounding_added"
            d = f"x̂ rounded to {T} before ×γ (a second rounding the contract does not have)"
        out.append((key, d, c.replace(y_rounding=r)))
    applies = ("div", "mul_inv", "mul") if not c.dynamic else \
        ("div", "mul_inv", "mul_qmax_over_amax")
    if c.granularity not in ("mx", "nvfp4"):
        for a in applies:
            if a != c.apply:
                out.append((f"apply_{a}", f"the scale applied as {_APPLY[a]} (the contract: "
                            f"{_APPLY[c.apply]})", c.replace(apply=a)))
    if c.y_rounding != "none" and c.dynamic:
        other = "fp32" if c.amax_from == "y" else "y"
        out.append((f"amax_from_{other}",
                    "amax from the float32 value before its rounding to "
                    f"{T} (the contract takes it from the rounded y)" if other == "fp32" else
                    "amax from the rounded y (the contract takes it before the rounding)",
                    c.replace(amax_from=other)))
    fmt = c.qformat
    if fmt.kind == "float" and (fmt.has_nan or fmt.has_inf):
        if c.saturation != "none":
            over = "above 464" if fmt.name == "e4m3" else "beyond ±max"
            out.append(("saturation_none", f"no clamp: values {over} become "
                        f"{'inf' if fmt.has_inf else 'NaN'} (the contract saturates to "
                        f"±{fmt.max_finite:g})", c.replace(saturation="none")))
        else:
            out.append(("saturation_added", f"values beyond ±{fmt.max_finite:g} saturate "
                        "(the contract gives NaN or inf)", c.replace(saturation="satfinite")))
    if c.dynamic and c.amax_floor:
        if c.amax_floor_in == "storage":
            out.append(("amax_floor_fp32", f"amax starting at the float32 {c.amax_floor:.4g} "
                        f"(the contract starts it at that value in {T}, as `T amax = ...` "
                        "does)", c.replace(amax_floor_in="fp32")))
        else:
            out.append(("amax_floor_storage", f"amax starting at {c.amax_floor:.4g} rounded to "
                        f"{T} (the contract starts it at the float32 value)",
                        c.replace(amax_floor_in="storage")))
    if c.dynamic and (c.scale_floor or c.amax_floor) and c.granularity != "nvfp4":
        out.append(("scale_floor_missing", "scale floor missing: a zero row or group gives "
                    "s = 0, and 0/0 = NaN", c.replace(scale_floor=0.0, amax_floor=0.0)))
    if norm.fused:
        other = "stored" if c.residual == "exact" else "exact"
        out.append((f"residual_{other}", f"statistics of x + r {'rounded to ' + T if other == 'stored' else 'exactly (in float32)'}"
                    f" (the contract: {'exactly' if other == 'stored' else 'the sum rounded to ' + T})",
                    c.replace(residual=other)))
    if c.granularity == "per_group":
        G = c.group_size
        for g2 in (G // 2, 2 * G):
            if g2 >= 1:
                out.append(("group_size", f"groups of {g2} columns instead of {G}",
                            c.replace(group=g2)))
    if c.group_size:
        out.append(("groups_across_rows", f"groups of {c.group_size} counted over the "
                    "flattened tensor (a row's short last group runs into the next row)",
                    "flattened"))
    if c.dynamic:
        out.append(("scales_wrong_rows", "the scales of row i written at row i ± 1",
                    "shifted"))
    out.append(("xhat_rounded_y_not", f"x̂ rounded to {T} before ×γ and the product not "
                f"rounded (the last rounding skipped; the contract: y {rn[c.y_rounding]})",
                "xhat_only"))
    if c.dynamic and c.granularity != "nvfp4":
        out.append(("amax_before_weight", "amax taken over x̂, before ×γ" +
                    (" + β" if norm.centred else "") + " (the contract: over y)",
                    "amax_xhat"))
    if c.granularity == "per_group":
        out.append(("group_amax_wide", f"each group's amax over {c.group_size + 1} columns, "
                    f"one more than its {c.group_size}", "amax_wide"))
    if c.pow2 != "none":
        other = "floor" if c.pow2 == "ceil" else "ceil"
        out.append((f"pow2_{other}", f"the e8m0 scale rounded {'down' if other == 'floor' else 'up'}"
                    f" (the contract rounds it {'up' if other == 'floor' else 'down'})",
                    c.replace(pow2=other)))
    return out


def explain(judge, case, m) -> Cause | None:
    """The cause that explains the kernel's output on ``case`` (its QMeasured ``m``), or None."""
    c = judge.contract  # as declared (the reference holds it resolved for the storage)
    o = judge.oracle(case)
    q_k, s_k = m.q, m.scales
    off = m.cls != 0
    off_s = m.scale_cls != 0 if m.scale_cls is not None else None
    n_off = int(off.sum()) + (int(off_s.sum()) if off_s is not None else 0)
    if n_off == 0:
        return None
    same = _agree(q_k, m.ref.q)
    base_agree = same.mean()
    best = None
    for key, desc, v in variants(c, judge.norm, judge.storage):
        try:
            q_v, s_v = _variant_result(o, c, v, m)
        except Exception:  # a variant that cannot be evaluated explains nothing
            continue
        if q_v is None:
            continue
        hit = int((_agree(q_k, q_v) & off).sum())
        if off_s is not None and s_v is not None and s_v.shape == s_k.shape:
            hit += int((_agree(s_k, s_v) & off_s).sum())
        share = hit / n_off
        agree = _agree(q_k, q_v).mean()
        if share >= SHARE and agree >= base_agree and (best is None or share > best[0]):
            best = (share, key, desc, hit)
    if best is None:
        return None
    share, key, desc, hit = best
    return Cause(f"{desc} ({hit}/{n_off} of the values that break the contract match it bit "
                 "for bit)", key, "exact" if hit == n_off else "bit", desc, explained=hit)


def _agree(a, b):
    with np.errstate(invalid="ignore"):
        return (a == b) | (np.isnan(a) & np.isnan(b))


def _variant_result(o, c: Contract, v, m):
    """(q, scales) of a variant: a Contract, or "flattened", "shifted", "xhat_only",
    "amax_xhat", "amax_wide"."""
    if isinstance(v, Contract):
        r = o.reference(v)
        return r.q, (r.s if v.dynamic else None)
    ref = m.ref
    if v in ("xhat_only", "amax_xhat", "amax_wide"):
        case = o.case
        g = np.ones(ref.y.shape[1]) if case.gamma is None else case.gamma.astype(np.float64)
        if o.norm.gemma:
            g = 1.0 + g
        b = 0.0 if (case.beta is None or not o.norm.centred) else case.beta.astype(np.float64)
        sc = o.scale
        if v == "xhat_only":  # round_T(x̂)·γ (+ β), the product itself quantised
            y = o.xhat(True, c.residual) * g + b
            q, _A, s, _ = contract_result(c.replace(y_rounding="none"), y, scale=sc,
                                          s_enc=o.s_enc)
            return q, (s if c.dynamic else None)
        if v == "amax_xhat":  # the scale from amax over x̂ (as the contract rounds it)
            xh = o.xhat(c.y_rounding == "twice", c.residual)
            q, _A, s, _ = contract_result(c, ref.y, ref.t, scale=sc, s_enc=o.s_enc,
                                          amax_of=xh)
            return q, s
        # amax_wide: group k's amax over its columns and the next one
        a = np.abs(ref.y if c.amax_from == "y" else ref.t)
        G = c.group_size
        R, D = a.shape
        n = -(-D // G)
        A = np.zeros((R, n))
        for k in range(n):
            A[:, k] = a[:, k * G:min(D, (k + 1) * G + 1)].max(axis=1)
        q, _A, s, _ = contract_result(c, ref.y, ref.t, scale=sc, s_enc=o.s_enc, A=A)
        return q, s
    if v == "shifted":
        s_k = m.scales
        if s_k is None or s_k.shape[0] < 2:
            return None, None
        for d in (1, -1):
            s_v = np.roll(ref.s, d, axis=0)
            if (_agree(s_k, s_v)[1:-1]).mean() >= SHARE:
                return m.q, s_v  # q from the right scale, the scale stored one row off
        return None, None
    # flattened: groups counted over rows
    R, D = ref.y.shape
    G = c.group_size
    flat_y = ref.y.reshape(1, R * D)
    flat_t = ref.t.reshape(1, R * D)
    q, A, s, _ = contract_result(c, flat_y, flat_t, scale=o.scale, s_enc=o.s_enc)
    q = q.reshape(R, D)
    # the scale each row stores for its groups: the flattened group its first column is in
    starts = (np.arange(R)[:, None] * D + np.arange(0, D, G)[None, :]) // G
    return q, s[0][starts]
