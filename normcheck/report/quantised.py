"""The report's quantised section: the built-in quantised kernels (cuda_src/quant_norm.cu)
judged under their own contracts family by family, each built-in judged under every other
contract of its kind (how far apart the projects' definitions are), the saturation map, and one
measured line per public contract difference.

Small (about a minute on 2 cores in quick mode): measured on every run of the report, not
resumed."""

from __future__ import annotations

import numpy as np

from normcheck import kernels, norms, progress

from normcheck.quant import contract as qcontract
from normcheck.quant import families as qfamilies
from normcheck.check.engine import Setup
from normcheck.check.quantised import QuantisedJudge
from normcheck.quant.oracle import QOracle

__all__ = ["measure", "MATRIX_GROUPS", "LOADS", "markdown"]

#: The built-ins judged under each other's contracts: (title, entries without the storage).
MATRIX_GROUPS = (
    ("RMSNorm, e4m3, static scale", ("rmsnorm_e4m3_tensor_vllm", "rmsnorm_e4m3_tensor_trtllm",
                                     "rmsnorm_e4m3_tensor_flashinfer",
                                     "rmsnorm_e4m3_tensor_te")),
    ("RMSNorm, e4m3, per token", ("rmsnorm_e4m3_token_vllm", "rmsnorm_e4m3_token_trtllm")),
    ("RMSNorm, int8, per token", ("rmsnorm_int8_token_vllm", "rmsnorm_int8_token_trtllm")),
)
#: Row's largest |y| over the scale, in units of the format's largest value (saturation map).
LOADS = (0.5, 0.9, 1.0, 1.1, 1.5, 2.0, 4.0, 8.0, 16.0)
_EPS = np.float32(1e-6)


def _judge(v, contract, backend, seed):
    return QuantisedJudge(kernels.target(v, backend, contract=contract),
                          Setup(norm=v.norm, fmt=v.storage, contract=contract, eps=_EPS,
                                seed=seed))


def _selected(v, pattern) -> bool:
    import fnmatch

    return pattern is None or fnmatch.fnmatchcase(v.name, pattern)


def measure(backend="cpu", seed=0, mode="quick", pattern=None) -> dict:
    """The section's measurements; ``pattern`` (the report's --kernels) selects the built-ins
    (the contract lines, from the oracle alone, are always measured)."""
    examples = 4 if mode == "quick" else 32
    storages = ("bf16",) if mode == "quick" else kernels.QUANT_STORAGES
    out = {"builtins": [], "matrix": [], "saturation": [], "audit": audit_lines(seed)}
    vs = [v for v in kernels.variants(kind="quantised")
          if v.storage in storages and _selected(v, pattern)]
    for k, v in enumerate(vs):
        progress.advance(k, len(vs))
        c = v.contract
        fams = [f for f in qfamilies.QUANT_FAMILIES if f != "saturation" or not c.dynamic]
        res, fails, _, _ = _judge(v, c, backend, seed).run(fams, examples)
        for fr in res:
            out["builtins"].append({"kernel": v.name, "contract": c.describe(),
                                    "family": fr.family, "rows": fr.rows,
                                    "values": fr.q.as_dict(), "scales": fr.scales.as_dict(),
                                    "verdict": fr.verdict, "cause": fr.cause})
    for title, bases in MATRIX_GROUPS:
        vs = [kernels.get(f"{b}_bf16") for b in bases]
        if not all(_selected(v, pattern) for v in vs):
            continue
        for a in vs:
            for b in vs:
                c = b.contract
                res, *_ = _judge(a, c, backend, seed).run(
                    ["gaussian", "amax_boundary"], examples)
                n = sum(fr.q.n for fr in res)
                ns = sum(fr.scales.n for fr in res)
                out["matrix"].append({
                    "group": title, "kernel": a.name, "contract": b.algorithm,
                    "contract_share": sum(fr.q.contract for fr in res) / max(n, 1),
                    "order_share": sum(fr.q.order for fr in res) / max(n, 1),
                    "scale_contract_share": (sum(fr.scales.contract for fr in res) / ns
                                             if ns else None)})
    out["saturation"] = saturation_map(backend, seed, pattern)
    return out


def saturation_map(backend="cpu", seed=0, pattern=None) -> list:
    """Per static built-in (and its contract without the clamp, from the oracle): the share of
    values that are ±max, NaN or inf, against the rows' largest |y|/scale in units of max."""
    pts = []
    n = norms.get("rmsnorm")
    for v in kernels.variants(kind="quantised", granularity="per_tensor",
                                norm="rmsnorm", storage="bf16"):
        if not _selected(v, pattern):
            continue
        c = v.contract
        tgt = kernels.target(v, backend)
        for load in LOADS:
            case = qfamilies.case("gaussian", n, c, v.storage, 15, 768, seed=[seed, 9],
                                  eps=_EPS)
            t, _ = qfamilies.approx_t(n, case.x, case.gamma, None, _EPS)
            amax = float(np.abs(t).max())
            case.extra["scale"] = qfamilies.static_scale(c, amax, 1.0 / load)
            q = c.qformat.from_storage(tgt(case)["output"], case.cols)
            runs = [(v.name, c.name, q)]
            if c.saturation != "none" and c.name == "vllm":
                cn = c.replace(saturation="none")
                r = QOracle(n, case, v.storage, scale=case.extra["scale"]).reference(cn)
                runs.append(("no clamp, no satfinite (oracle)", cn.name, r.q))
            pts += [{"kernel": k, "contract": cname, "load": load,
                     "saturated": float((np.abs(qq) == c.qformat.max_finite).mean()),
                     "nan": float(np.isnan(qq).mean()), "inf": float(np.isinf(qq).mean())}
                    for k, cname, qq in runs]
    return pts


def _count(a, b) -> str:
    with np.errstate(invalid="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
    return f"{int((~same).sum())} of {same.size}"


def _differ(a, b) -> float:
    with np.errstate(invalid="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
    return float(1.0 - same.mean())


def audit_lines(seed=0) -> list:
    """One measured line per public contract difference (the oracle's exact results of the
    contracts on the same rows: no kernel involved)."""
    n = norms.get("rmsnorm")
    rows, cols = 64, 4096
    lines = []
    pt = qcontract.preset("vllm", "per_token")
    case = qfamilies.case("gaussian", n, pt, "bf16", rows, cols, seed=[seed, 11], eps=_EPS)
    o = QOracle(n, case, "bf16")

    def q_of(c, oracle=o):
        return oracle.reference(c)

    r_div = q_of(pt)
    r_inv = q_of(pt.replace(apply="mul_inv"))
    lines.append({
        "claim": "vLLM divides by the scale for dynamic fp8 (to match FBGemm) but multiplies by "
                 "a rounded 1/scale for static fp8 and for int8; TensorRT-LLM, "
                 "TransformerEngine and FlashInfer multiply",
        "source": "fused_layernorm_dynamic_per_token_quant.cu, layernorm_quant_kernels.cu",
        "evidence": f"on {rows} gaussian bf16 rows of {cols}, ÷ s and × fl32(1/s) give "
                    f"different e4m3 values for {_count(r_div.q, r_inv.q)} elements, with the "
                    "same scales: one rounding of 1/s apart, they differ only where y/s is "
                    "within a float32 ulp of an e4m3 midpoint"})
    trt = qcontract.preset("trtllm", "per_token")
    r_trt = q_of(trt)
    r_once = q_of(pt.replace(y_rounding="once"))
    lines.append({
        "claim": "TensorRT-LLM multiplies by fl32(448/amax) (amax from 1e-6f), vLLM divides "
                 "by fl32(amax/448)",
        "source": "rmsnormKernels.cu, layernorm_utils.cuh",
        "evidence": f"with y rounded once in both, the e4m3 values differ in "
                    f"{_count(r_trt.q, r_once.q)} elements; the stored scale is the same value "
                    f"in {100 * (1 - _differ(r_trt.s, r_once.s)):.3g}% of the rows"})
    r_trt_none = q_of(trt.replace(y_rounding="none"))
    lines.append({
        "claim": "A fused RMSNorm + fp8 kernel that skipped the bf16 rounding before the fp8 "
                 "cast flipped about 3% of the fp8 values (TensorRT-LLM #14464)",
        "source": "TensorRT-LLM #14464",
        "evidence": f"TensorRT-LLM's per-token contract with and without the rounding differ in "
                    f"{100 * _differ(r_trt.q, r_trt_none.q):.3g}% of the e4m3 values on these "
                    "rows (the planted kernel of tests/cuda/quant_planted.cu fails with that "
                    "cause)"})
    r_fp32 = q_of(pt.replace(amax_from="fp32"))
    lines.append({
        "claim": "vLLM and TensorRT-LLM take amax from y rounded to bf16, TransformerEngine's "
                 "delayed scaling from the float32 value",
        "source": "layernorm_utils.cuh, rmsnormKernels.cu, *_fwd_kernels.cuh",
        "evidence": f"the per-token scale differs in {100 * _differ(r_div.s, r_fp32.s):.3g}% "
                    f"of the rows and the e4m3 values in {100 * _differ(r_div.q, r_fp32.q):.3g}"
                    "% of the elements (amax = max|round(y)| and max|y| differ when the largest "
                    "|y| rounds up or down across a value whose scale flips)"})
    st = qcontract.preset("vllm", "per_tensor")
    case_s = qfamilies.case("gaussian", n, st, "bf16", rows, cols, seed=[seed, 12], eps=_EPS)
    os_ = QOracle(n, case_s, "bf16", scale=case_s.extra["scale"])
    q2 = os_.reference(st.replace(residual="exact")).q
    q1 = os_.reference(st.replace(y_rounding="once", residual="exact")).q
    q0 = os_.reference(st.replace(y_rounding="none", residual="exact")).q
    lines.append({
        "claim": "vLLM rounds y to T twice before the cast, TensorRT-LLM once, FlashInfer's "
                 "RMSNorm not at all",
        "source": "layernorm_quant_kernels.cu, rmsnormKernels.cu, norm.cuh",
        "evidence": f"under one static scale, twice vs once differ in {100 * _differ(q2, q1):.3g}"
                    f"% of the e4m3 values, once vs none in {100 * _differ(q1, q0):.3g}%"})
    case_sat = qfamilies.case("saturation", n, st, "bf16", rows, 768, seed=[seed, 13], eps=_EPS)
    osat = QOracle(n, case_sat, "bf16", scale=case_sat.extra["scale"])
    r_clamp = osat.reference(st)
    r_none = osat.reference(st.replace(saturation="none"))
    r_sat = osat.reference(st.replace(saturation="satfinite"))
    lines.append({
        "claim": "vLLM clamps to ±448 before a software cast that returns NaN above 464; others "
                 "rely on a saturating (satfinite) conversion",
        "source": "quantization/fp8/common.cuh, c10 Float8_e4m3fn",
        "evidence": f"with the static scale 8x too small, {100 * np.isnan(r_none.q).mean():.3g}% "
                    "of the values are NaN without the clamp, 0% with it; clamp and satfinite "
                    f"differ in {100 * _differ(r_clamp.q, r_sat.q):.3g}% (they differ only on NaN "
                    "input: fmin(NaN, 448) is 448, satfinite keeps NaN)"})
    case_z = qfamilies.case("zero", n, pt, "bf16", 16, 512, seed=[seed, 14], eps=_EPS)
    oz = QOracle(n, case_z, "bf16")
    zero = np.all(case_z.x == 0, axis=1)
    res = {}
    for name, c in (("vLLM max(amax/448, 1/(448·512))", pt),
                    ("TensorRT-LLM amax from 1e-6", trt),
                    ("no floor", pt.replace(scale_floor=0.0))):
        r = oz.reference(c)
        res[name] = (float((r.q[zero] != 0).mean()), float(r.s[zero].ravel()[0]),
                     sorted({float(v) for v in np.unique(r.q[zero])})[:3])
    lines.append({
        "claim": "Scale floors differ: max(amax/448, 1/(448·512)) (vLLM fp8, TensorRT-LLM), an "
                 "amax floor of 1e-6 (TensorRT-LLM), none",
        "source": "layernorm_utils.cuh (min_scaling_factor), rmsnormKernels.cu",
        "evidence": "on all-zero rows: " + "; ".join(
            f"{k}: scale {v[1]:.3g}, {100 * v[0]:.3g}% of the values nonzero (q = "
            f"{', '.join(f'{x:g}' for x in v[2])})" for k, v in res.items())
        + " -- without a floor, 0/0 = NaN, and vLLM's clamp turns fmin(NaN, 448) into +448"})
    return lines


def markdown(q: dict) -> list:
    """The section's markdown lines."""
    if not q:
        return []
    out = ["## Quantised outputs\n",
           "Built-in quantised kernels (cuda_src/quant_norm.cu) judged under their own "
           "contracts (normcheck.quant.contract).  Each cell: order flips -- values a sound "
           "kernel of the contract may write instead of the exact one, because the exact "
           "value lies within the sound bound of a rounding boundary -- and, after the slash, "
           "contract flips (a fail), as shares of the values.  The amax_boundary rows are "
           "built to sit on a bf16 boundary, so their order flips are the worst case.\n"]
    if not q["builtins"]:
        out.append("(no quantised built-in selected by --kernels)\n")
    fams = list(dict.fromkeys(d["family"] for d in q["builtins"]))
    kern = list(dict.fromkeys(d["kernel"] for d in q["builtins"]))
    rows = [["kernel"] + fams]
    for k in kern if fams else ():
        cells = []
        for f in fams:
            d = next((d for d in q["builtins"] if d["kernel"] == k and d["family"] == f), None)
            if d is None:
                cells.append("-")
                continue
            v = d["values"]
            cells.append(f"{_pct(v['order_share'])} / {_pct(v['contract_share'])}")
        rows.append([k] + cells)
    if fams:
        out.append(_table(rows))
    out.append("\nEach built-in judged under every contract of its kind (rows: the kernel, "
               "columns: the contract; the share of values that break the contract, and of "
               "scales in brackets): how far apart the projects' definitions are.\n")
    for title, _ in MATRIX_GROUPS:
        cells = [d for d in q["matrix"] if d["group"] == title]
        if not cells:
            continue
        cs = list(dict.fromkeys(d["contract"] for d in cells))
        ks = list(dict.fromkeys(d["kernel"] for d in cells))
        rows = [[title] + cs]
        for k in ks:
            r = [k]
            for c in cs:
                d = next(d for d in cells if d["kernel"] == k and d["contract"] == c)
                s = _pct(d["contract_share"])
                if d["scale_contract_share"] is not None:
                    s += f" ({_pct(d['scale_contract_share'])})"
                r.append(s)
            rows.append(r)
        out.append(_table(rows) + "\n")
    out.append("Contract differences between the public kernels, measured on the same rows "
               "(the oracle's exact results of each contract):\n")
    for a in q["audit"]:
        out.append(f"- **{a['claim']}** ({a['source']}): {a['evidence']}.")
    out.append("")
    return out


def _pct(x) -> str:
    return "0" if not x else f"{100 * x:.2g}%"


def _table(rows) -> str:
    head, *body = rows
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)



