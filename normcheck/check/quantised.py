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

from normcheck.check.engine import assemble, fault_or_worst
from normcheck.check.tolerances import TOLERANCES
from normcheck.quant import families as qfamilies
from normcheck.quant.judge import QCounts, QuantJudge

__all__ = ["judge_quantised", "FAMILIES"]

#: The families a quantised check runs, in order.
FAMILIES = tuple(qfamilies.QUANT_FAMILIES)


def judge_quantised(target, *, label, norm, storage, contract, eps, backend, examples, seed,
                    cols_range, cols_multiple_of, kernel_desc, arch=None, save_counterexample=None):
    """Run the quantised check; returns a normcheck.check.CheckResult."""
    from normcheck import cases

    t0 = time.perf_counter()
    judge = QuantJudge(target, norm, storage, contract, eps=eps, seed=seed,
                       cols_range=cols_range, cols_multiple_of=cols_multiple_of)
    fams = [f for f in FAMILIES if f != "saturation" or not contract.dynamic]
    results, failures, worst = judge.run_families(fams, examples)
    total_q, total_s, total_a = QCounts(), QCounts(), QCounts()
    for fr in results:
        total_q.add(fr.q)
        total_s.add(fr.scales)
        total_a.add(fr.amax)

    def save(verdict):
        c, note = fault_or_worst(judge.fault, worst, "quantised")
        if c is None or not (verdict == "fail" or save_counterexample):
            return None
        from pathlib import Path

        return str(cases.save_case(
            Path(save_counterexample) if save_counterexample else None,
            kernel={**kernel_desc, "quant": contract.as_dict()}, x=c.x, gamma=c.gamma,
            beta=c.beta, residual=c.residual, eps=c.eps,
            note=note, label=label,
            exclusive=save_counterexample is None,
            **({"scale": _f32_array(c.extra["scale"])} if "scale" in c.extra else {})))

    quant = {"contract": contract.as_dict(), "describe": contract.describe(),
             "values": total_q.as_dict(), "scales": total_s.as_dict(),
             "amax": total_a.as_dict(), "families": [fr.as_dict() for fr in results],
             "saturation": [p for fr in results for p in fr.saturation]}
    return assemble(
        kernel=label, norm=norm, reference=contract.name, dtype=storage.name,
        out_dtype=contract.qformat.name, backend=backend, failures=failures, warnings=[],
        families=results, tolerance=TOLERANCES["quantised"], t0=t0, save=save, worst=worst,
        max_ulp=0.0, arch=arch, extra={"quant": quant})


def _f32_array(v):
    import numpy as np

    return np.array([v], np.float32)
