"""Formats: rounding and ulp at every edge, exactly."""

from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from normcheck import formats
from normcheck.errors import InvalidArgument
from normcheck.formats import BF16, FP16, FP32

ALL = [FP32, FP16, BF16]


def test_constants_match_numpy_and_ml_dtypes():
    assert FP32.max_finite == float(np.finfo(np.float32).max)
    assert FP16.max_finite == 65504.0
    assert BF16.max_finite == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert FP32.min_subnormal == 2.0**-149
    assert FP16.min_subnormal == 2.0**-24
    assert BF16.min_subnormal == 2.0**-133
    assert FP16.overflow_threshold == 65520.0
    for f in ALL:
        assert f.overflow_threshold == f.max_finite + f.ulp(f.max_finite) / 2
        assert f.min_normal == 2.0**f.emin


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.name)
def test_overflow_threshold(f):
    t = Fraction(f.overflow_threshold)
    tiny = Fraction(1, 2**400)
    assert f.round(t) == np.inf
    assert f.round(-t) == -np.inf
    assert f.round(t - tiny) == f.max_finite
    assert f.round(-(t - tiny)) == -f.max_finite
    assert f.round(f.max_finite) == f.max_finite
    # the array path agrees, including the float64 nearest to the threshold from below
    below = np.nextafter(f.overflow_threshold, 0)
    assert f.round_array(np.array([f.overflow_threshold, below]))[0] == np.inf
    assert f.round_array(np.array([below]))[0] == f.max_finite


def test_fp16_65520_and_300_squared():
    assert FP16.round(65519) == 65504.0
    assert FP16.round(65520) == np.inf
    assert FP16.round(300 * 300) == np.inf  # the seed article's example


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.name)
def test_subnormals_and_ties(f):
    s = Fraction(f.min_subnormal)
    assert f.round(s / 2) == 0.0  # tie between 0 and s: to even (0)
    assert f.round(s / 2 + Fraction(1, 2**500)) == f.min_subnormal
    assert f.round(3 * s / 2) == 2 * f.min_subnormal  # tie between s and 2s: to even (2s)
    assert f.round(-3 * s / 2) == -2 * f.min_subnormal
    assert f.round(5 * s / 2) == 2 * f.min_subnormal
    assert f.ulp(0) == f.min_subnormal
    assert f.ulp(s) == f.min_subnormal
    assert f.ulp(Fraction(f.min_normal)) == f.min_subnormal
    assert f.ulp(Fraction(f.min_normal) * 2) == 2 * f.min_subnormal


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.name)
def test_ulp_at_powers_of_two(f):
    p = f.precision
    one = Fraction(1)
    assert f.ulp(one) == 2.0 ** (1 - p)
    assert f.ulp(one - Fraction(1, 2**200)) == 2.0 ** (-p)  # just below: the lower binade
    assert f.ulp(-one) == 2.0 ** (1 - p)
    assert f.ulp(Fraction(f.max_finite)) == 2.0 ** (f.emax - p + 1)
    assert f.ulp(Fraction(2) ** (f.emax + 5)) == 2.0 ** (f.emax - p + 1)  # past the range
    arr = f.ulp_array(np.array([1.0, np.nextafter(1.0, 0), 0.0, -1.0]))
    assert list(arr) == [2.0 ** (1 - p), 2.0 ** (-p), f.min_subnormal, 2.0 ** (1 - p)]


def test_bf16_rounds_once_from_float64():
    # 1 + 2^-8 + 2^-30 is just above the midpoint between 1 and 1 + 2^-7: rounded once it goes
    # up; rounded to float32 first (1 + 2^-8, a tie) and then to bf16 it would go to even, 1.0.
    # What normcheck guarantees is that its own conversions round once, whatever the casts of
    # the ml_dtypes release installed do.
    x = 1 + 2**-8 + 2**-30
    assert BF16.round(x) == 1 + 2**-7
    assert BF16.round_array(np.array([x]))[0] == 1 + 2**-7
    stored = BF16.cast(np.array([x, -x]))
    assert stored.dtype == ml_dtypes.bfloat16
    assert [float(v) for v in stored] == [1 + 2**-7, -(1 + 2**-7)]


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.name)
@settings(max_examples=300, deadline=None)
@given(v=st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_cast_stores_the_exact_rounding(f, v):
    # the stored value (in the format's numpy dtype) is the correctly rounded one
    stored = f.cast(np.array([v]))
    assert stored.dtype == f.dtype
    assert float(stored[0]) == f.round(Fraction(v))


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.name)
@settings(max_examples=300, deadline=None)
@given(v=st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_round_array_is_exact_rounding(f, v):
    assert f.round_array(np.array([v]))[0] == f.round(Fraction(v))


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.name)
@settings(max_examples=200, deadline=None)
@given(hi=st.floats(-7e4, 7e4, allow_nan=False), lo_frac=st.floats(-0.5, 0.5))
def test_round_pair_rounds_the_exact_sum(f, hi, lo_frac):
    lo = lo_frac * float(np.spacing(hi)) if hi != 0 else 0.0
    s, e = hi + lo, (hi - (hi + lo)) + lo  # a TwoSum-normalised pair
    want = f.round(Fraction(s) + Fraction(e))
    assert f.round_pair(np.array([s]), np.array([e]))[0] == want


def test_round_pair_midpoint_broken_by_lo():
    mid = 1 + 2**-11  # fp16 midpoint between 1 and 1 + 2^-10
    assert FP16.round_pair(np.array([mid]), np.array([0.0]))[0] == 1.0
    assert FP16.round_pair(np.array([mid]), np.array([2.0**-60]))[0] == 1 + 2**-10
    assert FP16.round_pair(np.array([65520.0]), np.array([-1e-9]))[0] == 65504.0
    assert FP16.round_pair(np.array([65520.0]), np.array([1e-9]))[0] == np.inf


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.name)
def test_round_accepts_mpmath(f):
    with mpmath.workprec(300):
        third = mpmath.mpf(1) / 3
        assert f.round(third) == f.round(Fraction(1, 3))
        assert f.round(-third) == -f.round(Fraction(1, 3))


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.name)
def test_ordinal_counts_steps(f):
    v = np.array([0.0, f.min_subnormal, 2 * f.min_subnormal, 1.0, f.max_finite, np.inf])
    o = f.ordinal(v)
    assert o[0] == 0 and o[1] == 1 and o[2] == 2
    assert o[5] == o[4] + 1
    assert f.ordinal(np.array([-0.0]))[0] == 0
    one_up = float(np.nextafter(f.dtype.type(1.0), f.dtype.type(2.0))) if f is not BF16 \
        else 1 + 2.0**-7
    assert f.ordinal(np.array([one_up]))[0] - o[3] == 1
    assert f.ordinal(np.array([-1.0]))[0] == -o[3]


def test_ulp_error_classes():
    t = np.array([1.0, 1.0, 70000.0, 70000.0, np.nan, np.nan, 1.0])
    r = FP16.round_array(t)
    a = np.array([1.0 + 2**-10, np.inf, np.inf, 65504.0, np.nan, 1.0, np.nan])
    e = formats.ulp_error(FP16, a, t, r)
    assert e[0] == 1.0
    assert e[1] == np.inf  # spurious inf
    assert e[2] == 0.0  # correctly rounded overflow
    assert e[3] == np.inf  # missed overflow
    assert e[4] == 0.0  # NaN in, NaN out
    assert e[5] == np.inf  # NaN not propagated
    assert e[6] == np.inf  # spurious NaN


def test_get_rejects_unknown_names():
    with pytest.raises(InvalidArgument, match=r"format='fp8'.*fp16"):
        formats.get("fp8")
    with pytest.raises(InvalidArgument, match=r"dtype='float64'"):
        formats.of_dtype(np.float64)


def test_ulp_array_keeps_the_shape_and_agrees_with_ulp():
    from normcheck import formats

    for f in formats.FORMATS.values():
        assert np.ndim(f.ulp_array(2.0)) == 0
        t = np.array([[0.0, -3.5, 1e-45, 7e4], [np.inf, 1e39, 2.0**-130, 1.0]])[:, ::-1]
        got = f.ulp_array(t)
        assert got.shape == t.shape
        want = [[float(f.ulp(v)) if np.isfinite(v) else got[i, j] for j, v in enumerate(row)]
                for i, row in enumerate(t)]
        assert np.array_equal(got, np.array(want))


# ------------------------------------------------------------------------------------------------
# One protocol: storage and quantised formats answer the same questions
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fp32", "fp16", "bf16", "e4m3", "e5m2", "e4m3fnuz",
                                  "e5m2fnuz", "int8", "e2m1", "e8m0", "ue4m3"])
def test_every_format_answers_one_protocol(name):
    from normcheck import launch
    from normcheck.quant import formats as qformats

    f = qformats.get(name)  # the one lookup names storage and quantised formats alike
    assert isinstance(f, formats.NumberFormat)
    big = np.array([4 * f.max_finite, 1.0, 0.75 * f.max_finite])
    q = f.quantize(big, "satfinite")
    assert q[0] == f.max_finite and q[1] == 1.0  # saturated; 1 is a value of every format
    assert np.array_equal(f.decode(f.encode(q)), q)  # codes and values, each the other's inverse
    assert f.steps(q[0], q[0]) == 0 and f.steps(q[1], q[0]) > 0
    # a buffer poisoned as a launch leaves it: every element unwritten, under its own poison only
    buf = launch.poisoned((2, f.storage_cols(5)), f)
    assert f.unwritten(buf, 5).all() and not f.unwritten(buf, 5, alternate=True).any()
    alt = launch.poisoned((2, f.storage_cols(5)), f, alternate=True)
    assert f.unwritten(alt, 5, alternate=True).all() and not f.unwritten(alt, 5).any()
    assert f.from_storage(buf, 5).shape == (2, 5)


def test_storage_formats_round_as_quantize_says():
    """Format.quantize is round_array (rn) and round_toward_zero (rz), with the saturating and
    the non-saturating overflow of the quantised formats; steps count ordinals."""
    v = np.array([1.0 + 2.0**-12, 70000.0, -1e6, np.nan, 3.0])
    assert np.array_equal(FP16.quantize(v), FP16.round_array(v), equal_nan=True)
    assert np.array_equal(FP16.quantize(v, mode="rz"), FP16.round_toward_zero(v), equal_nan=True)
    assert list(FP16.quantize(v, "satfinite")[1:3]) == [65504.0, -65504.0]
    assert BF16.steps(1.0, 1.0 + 2.0**-7) == 1 and FP32.steps(-0.0, 0.0) == 0
    with pytest.raises(InvalidArgument, match="mode"):
        FP16.quantize(v, mode="ru")
    with pytest.raises(InvalidArgument, match="value"):
        FP16.encode([1.0 + 2.0**-20])  # not a value of fp16: quantize it first
