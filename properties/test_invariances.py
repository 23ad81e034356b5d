"""Invariances of the exact result, and what they show about the kernels.

* The exact LayerNorm is shift-invariant (x + c, exactly) and, with ε scaled by 4^k, invariant
  under x·2^k; RMSNorm the same for scaling.  The oracle must honour both exactly.
* A kernel's arithmetic commutes with power-of-two scaling wherever nothing leaves the normal
  range, so its output on x·2^k (with ε·4^k) must be bit-identical: the property shows the
  kernel's sensitivity to scale is nil.  Its error on shifted rows is measured against the
  bound, which grows with κ for the naive kernel (see test_accuracy for the bound).
* RMSNorm keeps signs.  Permuting the columns (x, γ, β together) permutes the exact result.
* NaN in, NaN out: every output of a row holding a NaN is NaN, for every kernel.
"""

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from normcheck import formats, kernels, oracle
from normcheck.launch import Case
from normcheck.strategies import row_cases, rows

from prop_support import check_bound, fail, run_case

FAMS = st.sampled_from(["gaussian", "offset", "bimodal", "outlier", "tails"])
SCALABLE = [v for v in kernels.variants() if v.order in (None, "upcast_square")
            and not v.fast_math]


def _exact_in(fmt, a):
    with np.errstate(over="ignore"):
        return np.array_equal(fmt.cast(a).astype(np.float64), a)


@given(case=row_cases(st.sampled_from(["fp32", "fp16", "bf16"]), family=FAMS),
       c=st.integers(-8, 8), fused=st.booleans())
def test_oracle_is_shift_invariant(case, c, fused):
    fmt = formats.of_dtype(case.x.dtype)
    q = max(fmt.ulp(float(np.max(np.abs(case.x.astype(np.float64))))), fmt.min_subnormal)
    x = case.x.astype(np.float64)
    shift = c * q * 4
    shifted = x + shift
    err = (x - (shifted - (shifted - x))) + (shift - (shifted - x))  # TwoSum: the exact error
    assume(not np.any(err) and _exact_in(fmt, shifted))
    a = oracle.layernorm(case.x, case.gamma, case.beta, eps=case.eps)
    b = oracle.layernorm(fmt.cast(shifted), case.gamma, case.beta, eps=case.eps)
    assert np.array_equal(a.rounded.view(fmt.uint), b.rounded.view(fmt.uint), equal_nan=True)


@given(case=row_cases(st.sampled_from(["fp32", "fp16", "bf16"]), family=FAMS),
       k=st.integers(-3, 3).filter(bool), gemma=st.booleans())
def test_oracle_is_scale_invariant(case, k, gemma):
    fmt = formats.of_dtype(case.x.dtype)
    scaled = case.x.astype(np.float64) * 2.0**k
    eps2 = np.float32(float(case.eps) * 4.0**k)
    assume(_exact_in(fmt, scaled) and float(eps2) == float(case.eps) * 4.0**k)
    for f in (lambda x, e: oracle.layernorm(x, case.gamma, case.beta, eps=e),
              lambda x, e: oracle.rmsnorm(x, case.gamma, eps=e, gemma=gemma)):
        a, b = f(case.x, case.eps), f(fmt.cast(scaled), eps2)
        assert np.array_equal(a.rounded.view(fmt.uint), b.rounded.view(fmt.uint), equal_nan=True)


@pytest.mark.parametrize("v", SCALABLE, ids=lambda v: v.name)
def test_kernel_output_is_exactly_scale_equivariant(v, backend):
    @given(case=row_cases(v.storage, family=FAMS, beta=v.has_beta, fused=v.fused),
           k=st.integers(-3, 3).filter(bool))
    def prop(case, k):
        fmt = v.fmt
        x = case.x.astype(np.float64)
        ax = np.abs(x[x != 0])
        assume(ax.size == 0 or (ax.min() >= 2.0**-40 and ax.max() <= 2.0**40))
        assume(_exact_in(fmt, x * 2.0**k))
        res = case.residual
        if res is not None:
            rr = np.abs(res.astype(np.float64))
            assume(_exact_in(fmt, res.astype(np.float64) * 2.0**k) and
                   (rr[rr != 0].size == 0 or rr[rr != 0].min() >= 2.0**-40))
            res2 = fmt.cast(res.astype(np.float64) * 2.0**k)
        else:
            res2 = None
        eps2 = np.float32(float(case.eps) * 4.0**k)
        assume(float(eps2) == float(case.eps) * 4.0**k and eps2 >= np.float32(2.0**-100))
        y1, _ = run_case(v, case, backend)
        case2 = Case(x=fmt.cast(x * 2.0**k), gamma=case.gamma, beta=case.beta, residual=res2,
                     eps=eps2)
        y2, _ = run_case(v, case2, backend)
        same = y1.view(fmt.uint) == y2.view(fmt.uint)
        if not same.all():
            ref, _ = kernels.reference(v, case.x, case.gamma, case.beta,
                                       eps=case.eps, residual=case.residual)
            fail("scale_equivariance", v, case, ref, y2, ~same, backend,
                 f"differ after scaling by 2^{k}")

    prop()


@pytest.mark.parametrize("name", ["layernorm_two_pass_fp32", "layernorm_welford_fp32",
                                  "layernorm_two_pass_fp16_upcast_square",
                                  "layernorm_welford_bf16_upcast_square"])
def test_kernel_error_on_shifted_rows_within_bound(name, backend):
    v = kernels.get(name)

    @given(case=row_cases(v.storage, family="gaussian"), c=st.floats(-1e3, 1e3))
    def prop(case, c):
        shifted = v.fmt.cast(case.x.astype(np.float64) + c)
        check_bound("shifted_within_bound", v,
                    Case(x=shifted, gamma=case.gamma, beta=case.beta, eps=case.eps), backend)

    prop()


@pytest.mark.parametrize("v", [v for v in kernels.variants() if "rms" in v.norm],
                         ids=lambda v: v.name)
def test_rmsnorm_keeps_signs(v, backend):
    @given(case=row_cases(v.storage, family=FAMS, beta=False, fused=v.fused))
    def prop(case):
        y, _ = run_case(v, case, backend)
        _, r = kernels.reference(v, case.x, case.gamma, eps=case.eps, residual=case.residual)
        g = case.gamma.astype(np.float64)
        g = 1 + g if v.norm.endswith("gemma_rmsnorm") or v.norm == "gemma_rmsnorm" else g
        want = np.sign(r * g)
        got = np.sign(y.astype(np.float64))
        ok = (got == want) | (got == 0) | np.isnan(got)
        if not ok.all():
            ref, _ = kernels.reference(v, case.x, case.gamma, eps=case.eps,
                                       residual=case.residual)
            fail("rmsnorm_keeps_signs", v, case, ref, y, ~ok, backend)

    prop()


@given(x=rows(st.sampled_from(["fp32", "fp16", "bf16"]), family=FAMS), data=st.data())
def test_oracle_is_permutation_equivariant(x, data):
    fmt = formats.of_dtype(x.dtype)
    perm = np.array(data.draw(st.permutations(range(x.shape[1]))))
    g = fmt.cast(np.linspace(0.5, 1.5, x.shape[1]))
    b = fmt.cast(np.linspace(-0.1, 0.1, x.shape[1]))
    a = oracle.layernorm(x, g, b)
    p = oracle.layernorm(np.ascontiguousarray(x[:, perm]), g[perm].copy(), b[perm].copy())
    assert np.array_equal(a.rounded[:, perm].view(fmt.uint), p.rounded.view(fmt.uint),
                          equal_nan=True)


@pytest.mark.parametrize("name", ["layernorm_two_pass_fp32", "layernorm_welford_fp16_upcast_square",
                                  "rmsnorm_rms_bf16_upcast_square"])
def test_kernel_on_permuted_columns_within_bound(name, backend):
    v = kernels.get(name)

    @given(case=row_cases(v.storage, family=FAMS, beta=v.has_beta), data=st.data())
    def prop(case, data):
        perm = np.array(data.draw(st.permutations(range(case.x.shape[1]))))
        pc = Case(x=np.ascontiguousarray(case.x[:, perm]), gamma=case.gamma[perm].copy(),
                  beta=None if case.beta is None else case.beta[perm].copy(), eps=case.eps)
        check_bound("permuted_within_bound", v, pc, backend)

    prop()


@pytest.mark.parametrize("v", kernels.variants(storage="fp16") + kernels.variants(storage="fp32"),
                         ids=lambda v: v.name)
def test_nan_in_nan_out(v, backend):
    @given(case=row_cases(v.storage, family="gaussian", beta=v.has_beta, fused=v.fused),
           data=st.data())
    def prop(case, data):
        x = case.x.copy()
        i = data.draw(st.integers(0, x.shape[0] - 1))
        j = data.draw(st.integers(0, x.shape[1] - 1))
        x[i, j] = np.nan
        c2 = Case(x=x, gamma=case.gamma, beta=case.beta, residual=case.residual, eps=case.eps)
        y, _ = run_case(v, c2, backend)
        bad = ~np.isnan(y[i].astype(np.float64))
        if bad.any():
            ref, _ = kernels.reference(v, x, case.gamma, case.beta,
                                       eps=case.eps, residual=case.residual)
            mask = np.zeros(y.shape, bool)
            mask[i] = bad
            fail("nan_in_nan_out", v, c2, ref, y, mask, backend)

    prop()
