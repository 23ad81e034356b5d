"""Helpers the properties share (imported by name: a module called conftest would be the first
one pytest imported, tests/conftest.py when both suites run in one invocation): running a
built-in on a case, the failure report in normcheck's fixed layout, and the bound check through
the check's own measurement (normcheck.measure)."""

import os
from pathlib import Path

import numpy as np

from normcheck import bounds, kernels, measure, metrics, replay

FAILURES = Path(os.environ.get("NORMCHECK_FAILURES", ".normcheck-failures"))


def run_case(v, case, backend):
    """Run variant v on a case (normcheck.launch.Case); returns (y, h or None)."""
    out = kernels.run_case(v, case, backend)
    return out["output"], out.get("h")


def fail(prop, v, case, ref, y, bad, backend, limit=""):
    """Raise AssertionError in normcheck's fixed layout, with the case saved for replay."""
    FAILURES.mkdir(exist_ok=True)
    path = replay.save_case(FAILURES / f"{prop}-{v.name}.npz", kernel={"variant": v.name},
                            x=case.x, gamma=case.gamma, beta=case.beta if v.has_beta else None,
                            residual=case.residual, eps=case.eps, note=prop)
    msg = metrics.failure_message(f"property {prop} failed", f"{v.name} ({backend} backend)",
                                  ref, y, bad, x=case.x, replay=replay.command(path),
                                  limit=limit)
    raise AssertionError(msg)


def check_bound(prop, v, case, backend, rows_mask=None):
    """Every element of the rows where the analysis applies is within its bound; returns the
    largest error/bound ratio (for hypothesis.target)."""
    y, h = run_case(v, case, backend)
    ref, rows = kernels.reference(v, case.x, case.gamma, case.beta,
                                  eps=case.eps, residual=case.residual)
    mask = bounds.applies(v, rows) if rows_mask is None else rows_mask
    E = bounds.error_bound(v, rows, case.gamma, case.beta, eps=case.eps)
    # the check's measurement (normcheck.measure) with the analysis's E and no floor: the ratio
    # |y - t| / (ulp(|t| + E)/2 + E); a non-finite answer where the exact result is finite (or a
    # number where it is NaN) fails; where E is infinite the analysis promises nothing
    m = measure.measure(ref, y, E=E, floor=0.0, hist=False)
    failing = np.isin(m.cls, [metrics.CLASSES.index(k) for k in metrics.FAILURE_CLASSES])
    ok = ((m.ratio <= 1) & ~failing) | np.isinf(E) | ~mask[:, None]
    if not ok.all():
        fail(prop, v, case, ref, y, ~ok, backend, "outside the bound of normcheck.bounds")
    ratio = m.ratio[mask[:, None] & np.isfinite(E)]
    return float(ratio.max()) if ratio.size else 0.0
