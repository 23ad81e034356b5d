"""Accuracy: every built-in kernel is within its a-priori error bound on rows built to hurt.

The bound of each algorithm × format × order comes from the rounding-error analysis in
normcheck.bounds (its docstring gives the derivation per term).  It holds wherever its
assumptions do — finite rows, nothing overflowing (bounds.applies) — so the families that exist
to break those assumptions are left to the known-failure properties: ``special`` (NaN/inf) and
``extremes`` (x² overflows even float).  Hypothesis targets the largest error/bound ratio, so
the search climbs toward the worst rows rather than sampling at random.
"""

import pytest
from hypothesis import given, target
from hypothesis import strategies as st

from normcheck import kernels
from normcheck.strategies import FAMILY_NAMES, row_cases

from prop_support import check_bound

SAFE = [f for f in FAMILY_NAMES if f not in ("special", "extremes")]


@pytest.mark.parametrize("v", kernels.variants(), ids=lambda v: v.name)
def test_within_error_analysis(v, backend):
    fams = [f for f in SAFE if not (f == "fp16_large" and v.order in ("square_upcast",
                                                                      "storage_accumulate"))]

    @given(case=row_cases(v.storage, family=st.sampled_from(fams), beta=v.has_beta,
                          fused=v.fused))
    def prop(case):
        ratio = check_bound("within_error_analysis", v, case, backend)
        target(ratio, label="error / bound")

    prop()
