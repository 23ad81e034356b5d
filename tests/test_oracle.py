"""The oracle against plain mpmath at 256 bits, on rows built to hurt, and its input checks."""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from normcheck import formats, oracle
from normcheck.errors import InvalidArgument

BF = ml_dtypes.bfloat16
EPS = np.float32(1e-5)


def truth(x, g=None, b=None, *, eps=EPS, center=True, gemma=False, out):
    """Correctly rounded y of every row, straight from mpmath at 256 bits."""
    fmt = formats.get(out)
    return np.array([[fmt.round(v) for v in oracle.mp_reference(row, g, b, eps=eps, center=center,
                                                                 gemma=gemma, prec=256)]
                     for row in x])


def exact_values(x, g=None, b=None, *, eps=EPS, center=True, gemma=False):
    return np.array([[float(v) for v in oracle.mp_reference(row, g, b, eps=eps, center=center,
                                                            gemma=gemma, prec=256)]
                     for row in x])


def same(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return np.array_equal(a, b, equal_nan=True)


def adversarial_rows():
    rng = np.random.default_rng(7)
    cases = []
    # fp32 offsets of 1e3..1e7 times the spread
    for k in (3, 5, 7):
        x = (10.0**k + rng.standard_normal((3, 64))).astype(np.float32)
        cases.append((f"fp32_offset_1e{k}", x))
    cases.append(("fp16_1000_1001", np.array([[1000, 1001], [1000, 1000.5], [2048, 2050]],
                                             np.float16)))
    cases.append(("fp16_offset", (1000 + rng.integers(0, 4, (3, 33)) * 0.5).astype(np.float16)))
    cases.append(("constant_fp32", np.full((2, 17), 3.25, np.float32)))
    cases.append(("constant_bf16", np.full((2, 9), -7.5, BF)))
    cases.append(("subnormal_fp32", (rng.standard_normal((3, 16)) * 1e-40).astype(np.float32)))
    cases.append(("subnormal_fp16", (rng.standard_normal((3, 16)) * 1e-6).astype(np.float16)))
    cases.append(("top_fp32", (3e38 * rng.uniform(-1, 1, (2, 8))).astype(np.float32)))
    cases.append(("top_bf16", (3e38 * rng.uniform(-1, 1, (2, 8))).astype(BF)))
    cases.append(("top_fp16", (65504 * rng.uniform(-1, 1, (2, 8))).astype(np.float16)))
    for d in (1, 2, 3, 4097):
        cases.append((f"D{d}", rng.standard_normal((2, d)).astype(np.float32)))
    cases.append(("D4097_fp16", rng.standard_normal((1, 4097)).astype(np.float16)))
    return cases


CASES = adversarial_rows()


@pytest.mark.parametrize("name,x", CASES, ids=[c[0] for c in CASES])
def test_layernorm_matches_mpmath(name, x):
    rng = np.random.default_rng(1)
    cols = x.shape[1]
    g = rng.standard_normal(cols).astype(x.dtype)
    b = rng.standard_normal(cols).astype(x.dtype)
    fmt = formats.of_dtype(x.dtype).name
    ref = oracle.layernorm(x, g, b)
    assert same(ref.rounded, truth(x, g, b, out=fmt))
    # the float64 "exact" is within 1e-6 ulp of the truth (the oracle's stated resolution)
    t = exact_values(x, g, b)
    fin = np.isfinite(t)
    err = np.abs(ref.exact[fin] - t[fin]) / formats.get(fmt).ulp_array(t[fin])
    assert np.all(err <= 1e-6)
    plain = oracle.layernorm(x)
    assert same(plain.rounded, truth(x, out=fmt))


@pytest.mark.parametrize("name,x", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("gemma", [False, True])
def test_rmsnorm_matches_mpmath(name, x, gemma):
    rng = np.random.default_rng(2)
    g = (rng.standard_normal(x.shape[1]) * 0.3).astype(x.dtype)
    fmt = formats.of_dtype(x.dtype).name
    ref = oracle.rmsnorm(x, g, gemma=gemma)
    assert same(ref.rounded, truth(x, g, center=False, gemma=gemma, out=fmt))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF])
@pytest.mark.parametrize("convention", ["exact", "stored"])
def test_fused_add_conventions(dtype, convention):
    rng = np.random.default_rng(3)
    fmt = formats.of_dtype(dtype)
    x = (rng.standard_normal((4, 40)) * 50).astype(dtype)
    r = (rng.standard_normal((4, 40)) * 1e-3 + 1000).astype(dtype)
    g = rng.standard_normal(40).astype(dtype)
    b = rng.standard_normal(40).astype(dtype)
    ref = oracle.add_layernorm(x, r, g, b, convention=convention)
    exact_h = [[Fraction(float(a)) + Fraction(float(c)) for a, c in zip(xr, rr)]
               for xr, rr in zip(x, r)]
    want_h = np.array([[fmt.round(v) for v in row] for row in exact_h])
    assert same(ref.h.rounded, want_h)
    rows = exact_h if convention == "exact" else want_h
    assert same(ref.rounded, truth(rows, g, b, out=fmt.name))
    ref2 = oracle.add_rmsnorm(x, r, g, convention=convention)
    assert same(ref2.rounded, truth(rows, g, center=False, out=fmt.name))


def test_fused_h_matches_ieee_addition():
    rng = np.random.default_rng(4)
    for dtype in (np.float32, np.float16):
        x = rng.standard_normal((3, 100)).astype(dtype) * 300
        r = rng.standard_normal((3, 100)).astype(dtype)
        ref = oracle.add_rmsnorm(x, r, convention="stored")
        assert same(ref.h.rounded, x + r)  # IEEE addition is correctly rounded


def test_exact_ties_are_decided_exactly():
    x = np.array([[0, 1]], np.float32)
    ref = oracle.layernorm(x, eps=np.float32(0.75))  # v + ε = 1: x̂ = ±½ exactly
    assert list(ref.rounded[0]) == [-0.5, 0.5]
    # y exactly on fp16 rounding midpoints: ties go to even
    g = np.array([1 + 2**-11, 1 + 3 * 2**-11], np.float32)
    ref = oracle.layernorm(x, g, eps=np.float32(0.75), out="fp16")
    # y1 = 0.5(1 + 3·2^-11) = 0.5 + 3·2^-12: midpoint of 0.5+2^-11 and 0.5+2^-10 -> even
    assert ref.rounded[0, 1] == np.float16(0.5 + 2**-10)
    g = np.array([1.0, 1 + 2**-11], np.float32)
    ref = oracle.layernorm(x, g, eps=np.float32(0.75), out="fp16")
    assert ref.rounded[0, 1] == np.float16(0.5)  # 0.5 + 2^-12 ties down to 0.5
    assert ref.slow[0, 1]  # settled by the exact path, not guessed


def test_statistics_against_mpmath():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((5, 77)) + 100).astype(np.float16)
    ref = oracle.layernorm(x)
    import mpmath

    with mpmath.workprec(256):
        for i, row in enumerate(x):
            v = [mpmath.mpf(float(t)) for t in row]
            mu = mpmath.fsum(v) / len(v)
            var = mpmath.fsum((t - mu) ** 2 for t in v) / len(v)
            rstd = 1 / mpmath.sqrt(var + mpmath.mpf(float(EPS)))
            assert ref.mean.rounded[i] == np.float32(formats.FP32.round(mu))
            assert ref.var.rounded[i] == np.float32(formats.FP32.round(var))
            assert ref.rstd.rounded[i] == np.float32(formats.FP32.round(rstd))
    rms = oracle.rmsnorm(x)
    assert rms.mean is None and rms.var.rounded.shape == (5,)


def test_nan_and_inf_semantics():
    x = np.array([[1, np.nan, 2], [1, np.inf, 3], [1, 2, 3]], np.float32)
    ref = oracle.layernorm(x)
    assert np.all(np.isnan(ref.rounded[:2])) and np.all(np.isfinite(ref.rounded[2]))
    assert np.isnan(ref.mean.rounded[0]) and np.isnan(ref.rstd.rounded[1])
    g = np.array([np.inf, 1, np.nan], np.float32)
    ref = oracle.layernorm(x, g)
    assert ref.rounded[2, 0] == -np.inf  # inf · (negative x̂)
    assert np.isnan(ref.rounded[2, 2])
    r = oracle.rmsnorm(np.array([[1, -np.inf, 2], [1, np.nan, 2]], np.float32))
    assert list(r.rounded[0, [0, 2]]) == [0.0, 0.0] and np.isnan(r.rounded[0, 1])
    assert np.all(np.isnan(r.rounded[1]))
    assert r.rstd.rounded[0] == 0 and r.var.rounded[0] == np.inf and np.isnan(r.rstd.rounded[1])
    # a NaN answer to a NaN exact value scores 0, a number scores inf
    e = ref.ulp_error(np.where(np.isnan(ref.rounded), np.nan, ref.rounded))
    assert np.all(e[:2] == 0)


def test_ulp_error_of_the_rounded_result_is_at_most_half():
    rng = np.random.default_rng(6)
    for dtype in (np.float32, np.float16, BF):
        x = rng.standard_normal((20, 50)).astype(dtype)
        ref = oracle.layernorm(x)
        e = ref.ulp_error(ref.rounded)
        assert np.all(e <= 0.5 + 1e-6)
        assert np.max(e) > 0.3  # not trivially zero


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_path_agrees_with_mpmath(data):
    fmt = data.draw(st.sampled_from(["fp32", "fp16", "bf16"]))
    f = formats.get(fmt)
    cols = data.draw(st.integers(1, 12))
    lim = 2.0**100 if fmt != "fp16" else 2.0**14
    elems = st.floats(-lim, lim, allow_nan=False, allow_infinity=False)
    vals = data.draw(st.lists(elems, min_size=cols, max_size=cols))
    x = f.cast(np.array(vals, dtype=np.float64))[None, :]
    if not np.all(np.isfinite(x.astype(np.float64))):
        return
    offset = data.draw(st.sampled_from([0.0, 1.0, 1000.0, -3.5e3]))
    x = f.cast(x.astype(np.float64) + offset)
    if not np.all(np.isfinite(x.astype(np.float64))):
        return
    g = f.cast(np.array(data.draw(st.lists(st.floats(-4, 4), min_size=cols, max_size=cols))))
    b = f.cast(np.array(data.draw(st.lists(st.floats(-4, 4), min_size=cols, max_size=cols))))
    eps = np.float32(data.draw(st.sampled_from([1e-5, 1e-6, 0.75, 1e-30])))
    ref = oracle.layernorm(x, g, b, eps=eps)
    assert same(ref.rounded, truth(x, g, b, eps=eps, out=fmt))
    ref = oracle.rmsnorm(x, g, eps=eps)
    assert same(ref.rounded, truth(x, g, eps=eps, center=False, out=fmt))


@pytest.mark.parametrize("call,match", [
    (lambda: oracle.layernorm(np.zeros(4, np.float32)), r"x\.ndim=1"),
    (lambda: oracle.layernorm(np.zeros((2, 4), np.float32), np.zeros(3, np.float32)),
     r"gamma\.shape=\(3,\).*\(4,\)"),
    (lambda: oracle.layernorm(np.zeros((2, 4), np.float64)), r"x\.dtype='float64'"),
    (lambda: oracle.layernorm(np.zeros((2, 4), np.int32)), r"x\.dtype='int32'"),
    (lambda: oracle.layernorm(np.zeros((2, 4), np.float32), eps=0.0), r"eps=0\.0.*ε > 0"),
    (lambda: oracle.rmsnorm(np.zeros((2, 4), np.float32), eps=-1e-5), r"eps=-1e-05"),
    (lambda: oracle.layernorm(np.zeros((2, 0), np.float32)), r"x\.shape=\(2, 0\)"),
    (lambda: oracle.layernorm([[1.0, 2.0]]), r"x=\[\[1\.0, 2\.0\]\]"),
    (lambda: oracle.add_layernorm(np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32),
                                  convention="vllm"), r"convention='vllm'"),
    (lambda: oracle.add_rmsnorm(np.zeros((2, 4), np.float32), np.zeros((3, 4), np.float32)),
     r"residual=<array shape=\(3, 4\)"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(InvalidArgument, match=match):
        call()


# -- the compiled fast path (normcheck.oracle.fast) ---------------------------------------------
def _rows_strategy(data, max_cols):
    """Rows that cross the fast path's block structure (16 lanes, blocks of 256), with offsets
    and quantised levels that stress the mean correction."""
    fmt = data.draw(st.sampled_from(["fp32", "fp16", "bf16"]), label="fmt")
    f = formats.get(fmt)
    rows = data.draw(st.integers(1, 3), label="rows")
    cols = data.draw(st.sampled_from([1, 15, 16, 17, 255, 256, 257, 513, max_cols]),
                     label="cols")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    kind = data.draw(st.sampled_from(["gauss", "levels", "wide"]), label="kind")
    offset = data.draw(st.sampled_from([0.0, 1.0, 1000.0, -3.5e3, 6.5e4]), label="offset")
    if kind == "gauss":
        v = rng.standard_normal((rows, cols))
    elif kind == "levels":
        v = rng.integers(0, 3, (rows, cols)) * 0.5
    else:
        v = rng.standard_normal((rows, cols)) * 2.0 ** rng.integers(-20, 20, (rows, cols))
    with np.errstate(over="ignore"):
        x = f.cast(f.cast(v).astype(np.float64) + offset)
    assume(np.all(np.isfinite(x.astype(np.float64))))
    g = f.cast(rng.uniform(-2, 2, cols))
    b = f.cast(rng.uniform(-2, 2, cols))
    return fmt, x, g, b


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_compiled_fast_path_agrees_with_mpmath_across_blocks(data):
    """Tiers 1 and 2 as the oracle runs them, against mpmath, at widths around the lane and block
    boundaries; every element also within its stated resolution of the exact value."""
    fmt, x, g, b = _rows_strategy(data, 700)
    eps = np.float32(data.draw(st.sampled_from([1e-5, 0.75]), label="eps"))
    out = data.draw(st.sampled_from([fmt, "fp32"]), label="out")
    ref = oracle.layernorm(x, g, b, eps=eps, out=out)
    assert same(ref.rounded, truth(x, g, b, eps=eps, out=out))
    ex = exact_values(x, g, b, eps=eps)
    # the exact values to ULP_RESOLUTION of an ulp (the decision's second condition)
    assert np.all(np.abs(ref.exact - ex) <= oracle.ULP_RESOLUTION *
                  formats.get(out).ulp_array(ex) + 1e-300)
    gemma = data.draw(st.booleans(), label="gemma")
    ref = oracle.rmsnorm(x, g, eps=eps, out=out, gemma=gemma)
    assert same(ref.rounded, truth(x, g, eps=eps, center=False, gemma=gemma, out=out))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_tier2_alone_agrees_with_mpmath(data):
    """With tier 1 settling nothing, the double-double tier decides every element, and each
    decision it makes is mpmath's."""
    from normcheck.oracle import fast as oracle_fast

    fmt, x, g, b = _rows_strategy(data, 300)
    center = data.draw(st.booleans(), label="center")
    out = formats.get(fmt)
    for mode in ("dd", "tree") + (("grid",) if fmt == "fp16" else ()):
        res = oracle_fast.rows(x, None, g.astype(np.float64), b.astype(np.float64) if center
                               else None, float(EPS), center, False, mode, out,
                               resolution=oracle.ULP_RESOLUTION, tier1=False)
        settled = res["status"] == oracle_fast.STATUS["tier2"]
        want = truth(x, g, b if center else None, center=center, out=fmt)
        # tier 2 settles almost every element whose exact value is not 0 (an exact zero, x_j = 0
        # in RMSNorm, has an error interval across 0 and goes to tier 3)
        off_zero = want != 0
        assert not off_zero.any() or settled[off_zero].mean() > 0.9
        assert same(res["r"][settled], want[settled])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fused_exact_pairs_agree_with_mpmath(data):
    """Rows given as exact pairs hi + lo (the fused add's exact convention) in every mode."""
    fmt, x, g, b = _rows_strategy(data, 300)
    res = formats.get(fmt).cast(np.random.default_rng(1).standard_normal(x.shape) * 1e3)
    for out in (fmt, "fp32"):
        ref = oracle.add_layernorm(x, res, g, b, convention="exact", out=out)
        hx = [[Fraction(float(a)) + Fraction(float(c)) for a, c in zip(r1, r2)]
              for r1, r2 in zip(x, res)]
        assert same(ref.rounded, truth(hx, g, b, out=out))
        ref = oracle.add_rmsnorm(x, res, g, convention="exact", out=out)
        assert same(ref.rounded, truth(hx, g, center=False, out=out))


def test_the_fast_path_gives_the_same_bits_on_any_number_of_threads(monkeypatch):
    """One thread or several: the same bits (rows are independent, sums are not reassociated)."""
    rng = np.random.default_rng(3)
    x = (1000 + rng.standard_normal((64, 333))).astype(np.float32)
    monkeypatch.setenv("NORMCHECK_ORACLE_THREADS", "1")
    one = oracle.layernorm(x)
    monkeypatch.setenv("NORMCHECK_ORACLE_THREADS", "3")
    three = oracle.layernorm(x)
    assert same(one.exact, three.exact) and same(one.rounded, three.rounded)
    monkeypatch.setenv("NORMCHECK_ORACLE_THREADS", "0")
    with pytest.raises(InvalidArgument, match="NORMCHECK_ORACLE_THREADS='0'"):
        oracle.layernorm(x)


# -- elements on a power-of-two β (oracle.exact.on_beta) ----------------------------------------
def _without_on_beta(monkeypatch, call):
    """``call()`` with the shortcut off: every unsettled element through ExactRow."""
    from normcheck.oracle import forward

    with monkeypatch.context() as m:
        m.setattr(forward, "on_beta", lambda *a, **k: None)
        return call()


def _counted_on_beta(monkeypatch):
    """on_beta counting the elements it decided."""
    from normcheck.oracle import exact, forward

    hits = []

    def counted(*a):
        r = exact.on_beta(*a)
        hits.append(r is not None)
        return r

    monkeypatch.setattr(forward, "on_beta", counted)
    return hits


def _beta_on_binades(f, rng, cols):
    """β with a power of two in most columns (the binade edges where tiers 1-2 cannot settle
    ulp(y)), the rest random; γ random of either sign."""
    k = rng.integers(-12, 3, cols).astype(np.float64)
    b = np.where(rng.random(cols) < 0.8, np.sign(rng.standard_normal(cols)) * 2.0 ** k,
                 rng.standard_normal(cols))
    return f.cast(rng.standard_normal(cols)), f.cast(b)


def test_elements_on_a_power_of_two_beta_are_the_exact_tiers_bit_for_bit(monkeypatch):
    # the long run's constant and tiny rows: y = β + (almost nothing); decided by a bound, they
    # are what Fractions and Ziv's iteration give, and the shortcut is taken
    rng = np.random.default_rng(11)
    hits = _counted_on_beta(monkeypatch)
    for fmt, x in (("bf16", np.full((3, 96), 0.00396728515625)),
                   ("bf16", rng.standard_normal((3, 96)) * 1e-39),
                   ("fp32", rng.standard_normal((3, 96)) * 1e-42),
                   ("fp32", rng.standard_normal((3, 96)) * 1e-20),
                   ("fp16", np.full((3, 96), -3.5))):
        f = formats.get(fmt)
        x = f.cast(x)
        g, b = _beta_on_binades(f, rng, x.shape[1])
        got = oracle.layernorm(x, g, b)
        want = _without_on_beta(monkeypatch, lambda: oracle.layernorm(x, g, b))
        assert got.exact.tobytes() == want.exact.tobytes(), fmt
        assert got.rounded.tobytes() == want.rounded.tobytes(), fmt
        assert same(got.rounded, truth(x, g, b, out=fmt)), fmt
    assert sum(hits) > 100  # taken on most β columns of these rows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_on_beta_agrees_with_the_exact_tier_near_its_threshold(monkeypatch, data):
    # spreads from nothing up past the bound's threshold (|δ| ~ ulp64(β)/16 at a spread of
    # about 1e-22 for β ~ 2^-5, γ ~ 1, ε = 1e-5): taken or declined, the same bits
    fmt = data.draw(st.sampled_from(["fp32", "bf16", "fp16"]))
    f = formats.get(fmt)
    cols = data.draw(st.integers(2, 24))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    scale = data.draw(st.sampled_from([0.0, 1e-40, 1e-30, 1e-24, 1e-23, 3e-23, 1e-22, 3e-22,
                                       1e-21, 1e-18, 1e-9]))
    centre = data.draw(st.sampled_from([0.0, 1.0, -0.125, 1000.0]))
    x = f.cast(centre + scale * rng.standard_normal((2, cols)))
    if not np.all(np.isfinite(x.astype(np.float64))):
        return
    g, b = _beta_on_binades(f, rng, cols)
    eps = np.float32(data.draw(st.sampled_from([1e-5, 1e-6, 0.75])))
    for call in (lambda: oracle.layernorm(x, g, b, eps=eps),
                 lambda: oracle.add_layernorm(x, f.cast(scale * rng.standard_normal((2, cols))),
                                              g, b, eps=eps)):
        state = rng.bit_generator.state
        got = call()
        rng.bit_generator.state = state  # the same residual for the run without the shortcut
        want = _without_on_beta(monkeypatch, call)
        assert got.exact.tobytes() == want.exact.tobytes()
        assert got.rounded.tobytes() == want.rounded.tobytes()
    assert same(oracle.layernorm(x, g, b, eps=eps).rounded, truth(x, g, b, eps=eps, out=fmt))


def test_on_beta_declines_where_the_exact_value_leaves_beta(monkeypatch):
    # a sweep of spreads across the bound's threshold: where |δ| nears ulp64(β) the float64
    # exact value is no longer β and the exact tier must decide (the shortcut declines); on
    # both sides the same bits as without it
    rng = np.random.default_rng(12)
    hits = _counted_on_beta(monkeypatch)
    for fmt in ("bf16", "fp32"):
        f = formats.get(fmt)
        for scale in np.geomspace(1e-24, 1e-15, 28):
            x = f.cast(scale * rng.standard_normal((2, 32)))
            g, b = _beta_on_binades(f, rng, 32)
            got = oracle.layernorm(x, g, b)
            want = _without_on_beta(monkeypatch, lambda: oracle.layernorm(x, g, b))
            assert got.exact.tobytes() == want.exact.tobytes(), (fmt, scale)
            assert got.rounded.tobytes() == want.rounded.tobytes(), (fmt, scale)
    assert any(hits) and not all(hits)  # both sides of the threshold were reached
