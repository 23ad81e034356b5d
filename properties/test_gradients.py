"""Backward: the built-in backward kernels stay within the error analysis of a sound float backward kernel
(normcheck.bounds.sound_backward: float32 arithmetic, every sum in the worst order, the saved
statistics read exactly, one final rounding — the derivation is in its docstring).

The kernels that must not pass are the known failures, stated here too: the seed article's
formula (γ left out of dx) fails whenever γ ≠ 1, and summing dβ in fp16 fails once the partial
sums pass 2048 (where fp16 steps by 2).  Hypothesis targets the largest error/bound ratio.
"""

import math

import numpy as np
import pytest
from hypothesis import given, target
from hypothesis import strategies as st

from normcheck import bounds, formats, kernels, oracle
from normcheck.oracle import backward as ob
from normcheck.strategies import rows

SAFE = ["gaussian", "offset", "constant", "outlier", "bimodal", "tiny"]


def _dy(draw, fmt, shape):
    kind = draw(st.sampled_from(["gaussian", "correlated", "constant", "large"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    f = formats.get(fmt)
    if kind == "constant":
        return kind, f.cast(np.full(shape, 0.5))
    if kind == "large":
        return kind, f.cast(100 * rng.standard_normal(shape))
    return kind, f.cast(rng.standard_normal(shape))


@st.composite
def backward_cases(draw, fmt, norm):
    x = draw(rows(fmt, family=st.sampled_from(SAFE), cols=st.integers(1, 300)))
    xv = x.astype(np.float64)
    kind, dy = _dy(draw, fmt, x.shape)
    if kind == "correlated":  # dy ≈ x̂: the cancelling case of dx
        sd = xv.std(axis=1, keepdims=True)
        xh = np.where(sd > 0, (xv - xv.mean(axis=1, keepdims=True)) / np.where(sd > 0, sd, 1),
                      0.0)
        dy = formats.get(fmt).cast(xh + 1e-3 * dy.astype(np.float64))
    g = formats.get(fmt).cast(1 + 0.3 * np.random.default_rng(
        draw(st.integers(0, 2**32 - 1))).standard_normal(x.shape[1]))
    return x, dy, g


def _usable(norm, x):
    """Rows whose forward statistics are finite and whose rstd is not absurdly large (a constant
    row has rstd = 1/√ε: its gradients are exact zeros or huge, either way not this test's)."""
    m, r = oracle.saved_statistics(norm, x)
    rr = r.astype(np.float64)
    return np.all(np.isfinite(rr)) and np.all(rr < 1e3), (m, r)


@pytest.mark.parametrize("v", kernels.variants(kind="dx", algorithm="stable"),
                         ids=lambda v: v.name)
def test_stable_dx_within_the_sound_bound(v, backend):
    @given(case=backward_cases(v.storage, v.norm))
    def prop(case):
        x, dy, g = case
        ok, (m, r) = _usable(v.norm, x)
        if not ok:
            return
        dx = kernels.run_backward_dx(v, x, dy, g, m, r, backend=backend)
        ref = ob.backward(v.norm, x, dy, g, stats="saved", mean=m, rstd=r)
        E = bounds.sound_backward(v.norm, x, dy, g, mean=m, rstd=r)["dx"]
        lim = bounds.sound_limit(ref.dx, E)
        # where the exact dx rounds past the format's range (|dx| > 65504 in fp16) the right
        # answer is that infinity; elsewhere the error against the bound
        over = ~np.isfinite(ref.dx.rounded.astype(np.float64))
        assert np.array_equal(dx[over], ref.dx.rounded[over])
        ratio = np.where(over, 0.0, np.abs(dx.astype(np.float64) - ref.dx.exact) / lim)
        target(float(np.max(ratio)), label="error / sound bound")
        assert np.all(ratio <= 1), f"{v.name}: {float(np.max(ratio)):.3g}x the sound bound"

    prop()


# The backward oracle against mpmath (every norm, format and kind of rows, the saved
# statistics too): tests/test_backward.py::test_gradients_match_mpmath, one test for the claim.


def test_the_article_formula_fails_when_gamma_is_not_one(backend):
    x = formats.FP32.cast(np.random.default_rng(4).standard_normal((5, 64)))
    dy = formats.FP32.cast(np.random.default_rng(5).standard_normal((5, 64)))
    g = formats.FP32.cast(1.5 + 0 * x[0])
    m, r = oracle.saved_statistics("layernorm", x)
    dx = kernels.run_backward_dx("layernorm_backward_dx_article_fp32", x, dy, g, m, r,
                                 backend=backend)
    ref = ob.backward("layernorm", x, dy, g, stats="saved", mean=m, rstd=r)
    E = bounds.sound_backward("layernorm", x, dy, g, mean=m, rstd=r)["dx"]
    assert np.any(np.abs(dx.astype(np.float64) - ref.dx.exact) > bounds.sound_limit(ref.dx, E))


# ------------------------------------------------------------------------------------------------
# The backward oracle is total: every finite input, from subnormal to the format's largest
# ------------------------------------------------------------------------------------------------
@st.composite
def any_finite_rows(draw, fmt):
    """A few small rows of finite values of ``fmt`` at magnitudes drawn across its whole range
    (subnormals, 1, the largest binade), and dy likewise: the oracle must decide them all."""
    f = formats.get(fmt)
    R = draw(st.integers(1, 3))
    D = draw(st.integers(1, 5))
    lo = math.log2(f.min_subnormal)
    hi = math.log2(f.max_finite)

    def values(n):
        exps = draw(st.lists(st.floats(lo, hi), min_size=n, max_size=n))
        mant = draw(st.lists(st.floats(-1, 1), min_size=n, max_size=n))
        v = f.cast(np.array([m * 2.0**e for m, e in zip(mant, exps)]))
        return np.where(np.isfinite(v.astype(np.float64)), v, f.cast(np.array([0.0]))[0])

    return values(R * D).reshape(R, D), values(R * D).reshape(R, D), values(D)


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "gemma_rmsnorm"])
@given(data=st.data())
def test_the_backward_oracle_is_total(fmt, norm, data):
    x, dy, g = data.draw(any_finite_rows(fmt))
    stats = data.draw(st.sampled_from(["recomputed", "saved"]))
    n = norm
    mean = rstd = None
    if stats == "saved":
        mean, rstd = oracle.saved_statistics(n, x)
        if not np.all(np.isfinite(rstd.astype(np.float64))):
            stats, mean, rstd = "recomputed", None, None
    ref = ob.backward(n, x, dy, g, stats=stats, mean=mean, rstd=rstd)
    for part in (ref.dx, ref.dgamma):
        assert part.rounded.shape == part.exact.shape
    # dx of one row against mpmath at 400 bits (finite, representable ones)
    dx_mp, _ = ob.mp_backward(x[0], dy[0], g, centred=n == "layernorm",
                              gemma=n == "gemma_rmsnorm", mean=None if mean is None else mean[0],
                              rstd=None if rstd is None else rstd[0], prec=400)
    want = np.array([formats.get(fmt).round(v) for v in dx_mp])
    got = ref.dx.rounded[0].astype(np.float64)
    fin = np.isfinite(want)
    assert np.array_equal(got[fin], want[fin])
