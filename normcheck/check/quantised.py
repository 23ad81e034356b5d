"""The verdict on a quantised output (fp8, int8, fp4 with its scales) under its contract.

The target runs on the quant families (normcheck.quant.families) and every value and scale is
classified (normcheck.quant.judge): exact, an *order flip* (another value a sound kernel of the
contract may write -- allowed, counted) or a *contract flip* (fails).  A fused kernel's h must
be correctly rounded.  **fail** on a contract flip of a value, a scale or amax, an unwritten
element, a wrong h, a crash, a hang, an out-of-bounds access or an exception; **pass** otherwise
-- with the share of order flips in the result.  Each contract failure is diagnosed against the
contract's variants (normcheck.quant.diagnose).  No warn.
"""

from __future__ import annotations

import time

from normcheck.backends import get_backend
from normcheck.check.tolerances import TOLERANCES, Verdict
from normcheck.metrics import short as _fmt
from normcheck.quant import families as qfamilies
from normcheck.quant.judge import QCounts, QuantJudge

__all__ = ["judge_quantised", "render_quantised", "FAMILIES"]

#: The families a quantised check runs, in order.
FAMILIES = tuple(qfamilies.QUANT_FAMILIES)


def judge_quantised(target, *, label, norm, storage, contract, eps, backend, examples, seed,
                    cols_range, cols_multiple_of, kernel_desc, arch=None, save_counterexample=None):
    """Run the quantised check; returns a normcheck.check.CheckResult."""
    from normcheck import replay
    from normcheck.check import CheckResult

    t0 = time.perf_counter()
    judge = QuantJudge(target, norm, storage, contract, eps=eps, seed=seed,
                       cols_range=cols_range, cols_multiple_of=cols_multiple_of)
    fams = [f for f in FAMILIES if f != "saturation" or not contract.dynamic]
    results, failures, worst = judge.run_families(fams, examples)
    seen, uniq = set(), []
    for f in failures:
        if (f.kind, f.family) not in seen:
            seen.add((f.kind, f.family))
            uniq.append(f)
    verdict = Verdict.of(uniq, [])
    cause = next((f.cause for f in uniq if f.cause), None)
    total_q, total_s, total_a = QCounts(), QCounts(), QCounts()
    for fr in results:
        total_q.add(fr.q)
        total_s.add(fr.scales)
        total_a.add(fr.amax)
    ce = None
    if worst is not None and worst.case is not None and (verdict == "fail" or save_counterexample):
        c = worst.case
        from pathlib import Path

        ce = str(replay.save_case(
            Path(save_counterexample) if save_counterexample else None,
            kernel={**kernel_desc, "quant": contract.as_dict()}, x=c.x, gamma=c.gamma,
            beta=c.beta, residual=c.residual, eps=c.eps,
            note=f"worst row of normcheck check ({worst.family}, quantised)", label=label,
            exclusive=save_counterexample is None,
            **({"scale": _f32_array(c.extra["scale"])} if "scale" in c.extra else {})))
    be = get_backend(backend)
    quant = {"contract": contract.as_dict(), "describe": contract.describe(),
             "values": total_q.as_dict(), "scales": total_s.as_dict(),
             "amax": total_a.as_dict(), "families": [fr.as_dict() for fr in results],
             "saturation": [p for fr in results for p in fr.saturation]}
    return CheckResult(
        kernel=label, norm=norm.name, norm_desc=norm.describe(), reference=contract.name,
        dtype=storage.name, out_dtype=contract.qformat.name, backend=be.name, verdict=verdict,
        max_ulp=0.0, rows_checked=sum(fr.rows for fr in results), failures=uniq, warnings=[],
        families=results, worst=worst, tolerance=TOLERANCES["quantised"],
        seconds=time.perf_counter() - t0, counterexample=ce,
        provenance=be.provenance({"arch": arch} if arch else None), cause=cause,
        extra={"quant": quant})


def _f32_array(v):
    import numpy as np

    return np.array([v], np.float32)


def render_quantised(r) -> str:
    q = r.extra["quant"]
    c = q["contract"]
    lines = [f"normcheck check: {r.kernel} ({r.norm_desc}, {r.dtype} -> {c['format']} "
             f"{c['granularity']}, {r.backend} backend)",
             f"contract {q['describe']}",
             f"  follows {c['source']}" if c.get("source") else "",
             "fail: a value, scale or amax no sound kernel of the contract writes (a flip away "
             "from a tie, NaN or inf where the contract saturates), an unwritten element, a "
             "wrong h, a crash, out of bounds, a deadlock, a timeout, an exception.  Order "
             "flips -- where the exact value lies within the sound bound of a float pipeline "
             "from a rounding boundary -- are allowed and counted.  No warn."]
    lines = [ln for ln in lines if ln]
    prov = r.provenance or {}
    if prov.get("arch"):
        lines.append(f"architecture presented: {prov['arch']}")
    lines.append("")
    head = ["family", "rows", "cols", "values", "order flips", "contract flips", "scales",
            "order", "contract", "saturated", "verdict"]
    table = []
    for f in r.families:
        table.append([f.family, str(f.rows), ",".join(map(str, f.cols)), str(f.q.n),
                      f"{f.q.order} ({_pct(f.q.order_share)})", str(f.q.contract),
                      str(f.scales.n) if f.scales.n else "-",
                      str(f.scales.order) if f.scales.n else "-",
                      str(f.scales.contract) if f.scales.n else "-",
                      f"{f.q.saturated + f.q.nan + f.q.inf}",
                      f.verdict.upper() if f.verdict != "pass" else f.verdict])
    w = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(head)]
    lines.append("  ".join(h.ljust(x) for h, x in zip(head, w)))
    lines.append("  ".join("-" * x for x in w))
    lines += ["  ".join(cell.ljust(x) for cell, x in zip(row, w)) for row in table]
    lines.append("")
    if r.failures:
        lines.append("failures:")
        for f in r.failures:
            lines.append(f"  [{f.kind}] {f.family}: {f.detail}")
            if f.cause:
                lines.append(f"      likely cause: {f.cause}")
        lines.append("")
    if r.worst is not None and r.worst.detail:
        wst = r.worst
        lines.append(f"worst row: family {wst.family}, width {wst.cols}, row {wst.row_index}")
        for e in wst.detail:
            if "col" in e:
                lines.append(f"  col {e['col']}: x={e['x']!r} kernel={e['kernel']!r} "
                             f"contract={e['contract']!r} ({e['class']}; y={_fmt(e['y'])})")
            else:
                lines.append(f"  scales: kernel {e['scales_kernel']} contract "
                             f"{e['scales_contract']}")
    if r.counterexample:
        from normcheck import replay

        lines.append(f"replay: {replay.command(r.counterexample)}")
    v, s = q["values"], q["scales"]
    summary = (f"order flips {v['order']}/{v['n']} values ({_pct(v['order_share'])})"
               + (f", {s['order']}/{s['n']} scales ({_pct(s['order_share'])})" if s["n"] else "")
               + f"; contract flips {v['contract']} values"
               + (f", {s['contract']} scales" if s["n"] else ""))
    lines.append(f"verdict: {r.verdict.upper()} -- {r.rows_checked} rows in {r.seconds:.1f} s; "
                 + summary + (f"; likely cause: {r.cause}" if r.cause and r.verdict != "pass"
                              else ""))
    return "\n".join(lines)


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"

