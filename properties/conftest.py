"""The property suite's shared pieces: Hypothesis profiles and the failure report.

Profiles: ``ci`` (the default: few examples, derandomized, so the whole suite runs in a few
minutes on 2 cores and a failure reproduces) and ``thorough`` (hundreds of examples per
property, random).  Pick one with ``--hypothesis-profile thorough`` or NORMCHECK_PROFILE.
Kernels run on the backend of ``--normcheck-backend`` (default cpu).
"""

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from normcheck import bounds, kernels, metrics, replay

_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
         HealthCheck.large_base_example]
settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True, database=None,
                          suppress_health_check=_SLOW, print_blob=True)
settings.register_profile("thorough", max_examples=300, deadline=None,
                          suppress_health_check=_SLOW, print_blob=True)
settings.load_profile(os.environ.get("NORMCHECK_PROFILE", "ci"))

FAILURES = Path(os.environ.get("NORMCHECK_FAILURES", ".normcheck-failures"))


def run_case(v, case, backend):
    """Run variant v on a strategies.Case; returns (y, h or None)."""
    if v.fused:
        h, y = kernels.run(v, case.x, case.gamma, case.beta if v.has_beta else None,
                           eps=case.eps, residual=case.residual, backend=backend)
        return y, h
    return kernels.run(v, case.x, case.gamma, case.beta if v.has_beta else None, eps=case.eps,
                       backend=backend), None


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
    ref, rows = kernels.reference(v, case.x, case.gamma, case.beta if v.has_beta else None,
                                  eps=case.eps, residual=case.residual)
    mask = bounds.applies(v, rows) if rows_mask is None else rows_mask
    E = bounds.error_bound(v, rows, case.gamma, case.beta if v.has_beta else None, eps=case.eps)
    ok = bounds.within_bound(ref, y, E) | ~mask[:, None]
    if not ok.all():
        fail(prop, v, case, ref, y, ~ok, backend, "outside the bound of normcheck.bounds")
    with np.errstate(invalid="ignore", divide="ignore"):
        lim = ref.fmt.ulp_array(np.abs(ref.exact) + E) / 2 + E
        ratio = np.abs(y.astype(np.float64) - ref.exact) / lim
    ratio = ratio[mask[:, None] & np.isfinite(ratio)]
    return float(ratio.max()) if ratio.size else 0.0


@pytest.fixture(scope="session")
def backend(normcheck_backend_name):
    return normcheck_backend_name
