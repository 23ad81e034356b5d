"""Storage formats fp32, fp16 and bf16: exact constants, correct rounding, ulp and ordinals.

Semantics (docs/DESIGN.md, "Formats" and "ULP error and outcome classes"):

* rounding is round-to-nearest, ties-to-even, with gradual underflow; a value at or past
  max + ½ulp rounds to ±inf (fp16: |v| >= 65520);
* ``ulp(t)`` is the spacing of the format in the binade of the exact value t, clamped at the
  subnormal spacing (``ulp(0)`` is the smallest subnormal) and, past the largest binade, the spacing
  of the largest binade;
* the ordinal of a value is its position on the line of representable values (+0 and -0 share 0),
  so the distance between two values is the number of representable steps between them.

Exact values are ``int``, ``float``, :class:`fractions.Fraction` or mpmath numbers; arrays of
float64 are rounded exactly (numpy's and ml_dtypes' casts are not used for that, because ml_dtypes
converts float64 to bfloat16 through float32 and so rounds twice).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol, runtime_checkable

import ml_dtypes
import numpy as np

from normcheck.errors import invalid

__all__ = ["NumberFormat", "Format", "FP32", "FP16", "BF16", "FORMATS", "get", "of_dtype",
           "ulp_error", "POISON_BITS", "poison_bits"]


@runtime_checkable
class NumberFormat(Protocol):
    """What every format answers, a storage format (:class:`Format`: fp32, fp16, bf16) and a
    quantised output or scale format (:class:`normcheck.quant.formats.QFormat`: fp8, int8, fp4,
    e8m0, ue4m3) alike, so the code that reads a kernel's buffer, rounds to a format or counts
    steps takes either: ``quant.formats.get`` names them all."""

    name: str
    bits: int
    max_finite: float

    @property
    def dtype(self) -> np.dtype: ...  # a kernel's buffer of it (codes: uint8, int8: int8)

    @property
    def uint(self) -> np.dtype: ...  # the unsigned integers of its bits (codes: uint8)

    @property
    def packed(self) -> bool: ...  # two codes a byte (fp4)

    def quantize(self, v, overflow: str = ..., mode: str = "rn") -> np.ndarray:
        """float64 values rounded once to the format (``mode`` rn, rz; QFormat: ru, rd too); past
        the largest value ±max ("satfinite") or, "nan", the non-saturating conversion's NaN (±inf
        where the format has infinities).  The default is each format's usual conversion: a
        storage format's IEEE rounding ("nan": ±inf), a quantised format's "satfinite"."""

    def decode(self, codes) -> np.ndarray: ...  # the value of each code (bit pattern)
    def encode(self, values) -> np.ndarray: ...  # the code of each value of the format
    def steps(self, a, b) -> np.ndarray: ...  # representable values between a and b
    def storage_cols(self, cols: int) -> int: ...  # elements a row of cols takes in a buffer
    def from_storage(self, buf, cols: int = None) -> np.ndarray: ...  # float64 [.., cols]
    def poison(self, alternate: bool = False) -> int: ...  # the code a buffer starts as

    def unwritten(self, buf, cols: int = None, alternate: bool = False) -> np.ndarray:
        """Mask of the elements of a buffer still holding the (``alternate``) poison."""


@dataclass(frozen=True)
class Format:
    """A binary floating-point storage format.

    ``precision`` counts the significand bits including the implicit one; ``emin``/``emax`` are
    the exponents of the smallest and largest normal binades.
    """

    name: str
    precision: int
    emin: int
    emax: int
    bits: int
    dtype: np.dtype
    uint: np.dtype
    max_finite: float
    min_normal: float
    min_subnormal: float
    overflow_threshold: float  # max + ½ulp: the smallest magnitude that rounds to inf

    # ---------------------------------------------------------------- scalars, exact
    def round(self, value) -> float:
        """Correctly round an exact value (int, float, Fraction, mpmath mpf) to this format.

        Returns a Python float holding the rounded value (every value of these formats is a
        float64), ±inf past the overflow threshold, NaN for NaN."""
        q = _to_fraction(value)
        if isinstance(q, float):  # nan or inf
            return q
        if q == 0:
            return 0.0
        sign = -1 if q < 0 else 1
        a = abs(q)
        e = max(_floor_log2(a), self.emin)
        quantum = Fraction(2) ** (e - self.precision + 1)
        m = a / quantum
        n = m.numerator // m.denominator
        rem = m - n
        if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
            n += 1
        r = n * quantum
        if r > self.max_finite:
            return sign * float("inf")
        return sign * float(r)

    def ulp(self, value) -> float:
        """ulp at an exact value: spacing in its binade, clamped at the subnormal spacing."""
        q = _to_fraction(value)
        if isinstance(q, float):
            if np.isnan(q):
                return float("nan")
            return float(2.0 ** (self.emax - self.precision + 1))
        if q == 0:
            return self.min_subnormal
        e = min(max(_floor_log2(abs(q)), self.emin), self.emax)
        return float(Fraction(2) ** (e - self.precision + 1))

    # ---------------------------------------------------------------- arrays of float64
    def round_array(self, v) -> np.ndarray:
        """Correctly round float64 values to this format; returns float64 holding the results."""
        v = np.asarray(v, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            _, E = np.frexp(v)
            e = np.maximum(E - 1, self.emin)
            k = (self.precision - 1) - e  # scale so the quantum becomes 1
            r = np.ldexp(np.rint(np.ldexp(v, k)), -k)
            r = np.where(np.abs(r) > self.max_finite, np.copysign(np.inf, v), r)
        return np.where(np.isfinite(v), r, v)

    def cast(self, v) -> np.ndarray:
        """Correctly round float64 values and store them in this format's numpy dtype.  numpy's
        own float64 -> float32 and float64 -> float16 conversions round once, to nearest even,
        subnormals and overflow included (a test holds them equal to :meth:`round_array`), so
        those formats take them; the others round here first."""
        v = np.asarray(v, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            if self.dtype == np.dtype(np.float32):
                return v.astype(self.dtype)
            if self.dtype == np.dtype(np.float16):
                return _fp16(v)
            if self.bits == 16 and self.precision == 8:
                return _bf16_bits(v).view(self.dtype)
        return self.round_array(v).astype(self.dtype)

    def round_toward_zero(self, v) -> np.ndarray:
        """Round float64 values toward zero (truncate) to this format: the correctly rounded
        value, one step nearer zero where it is farther from zero than v (beyond the largest
        finite value: the largest finite); float64 results.  What __float2bfloat16_rz, a
        bit-shift truncation and cvt.rz give."""
        v = np.asarray(v, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            r = self.round_array(v)
            r = np.where(np.isinf(r) & np.isfinite(v), np.copysign(self.max_finite, v), r)
            away = np.isfinite(v) & (np.abs(r) > np.abs(v))
            if away.any():
                step = self.ulp_array(np.abs(r))
                # one value down: the spacing below |r| is half the spacing at |r| where |r| is
                # a power of two (the binade below is finer), else the spacing at |r|
                m, _e = np.frexp(np.abs(r))
                below = np.where((m == 0.5) & (np.abs(r) > self.ulp_array(0.0) *
                                              2 ** (self.precision - 1)), step / 2, step)
                r = np.where(away, np.copysign(np.abs(r) - below, r), r)
        return r

    def round_pair(self, hi, lo) -> np.ndarray:
        """Correctly round the exact sums hi + lo (float64 pairs with |lo| <= ½ulp(hi), as TwoSum
        gives) to this format; float64 results.  Only a hi exactly on a rounding midpoint needs lo
        (its sign breaks the tie); otherwise rounding hi is rounding hi + lo."""
        hi = np.asarray(hi, dtype=np.float64)
        lo = np.asarray(lo, dtype=np.float64)
        r = self.round_array(hi)
        with np.errstate(invalid="ignore", over="ignore"):
            spacing = self.ulp_array(hi)
            mid = np.isfinite(hi) & (np.abs(hi - np.where(np.isfinite(r), r, np.copysign(
                2.0 ** (self.emax + 1), hi))) == spacing / 2) & (lo != 0)
        if np.any(mid):
            toward = hi[mid] + np.sign(lo[mid]) * spacing[mid] / 2
            r = r.copy()
            fixed = self.round_array(toward)
            r[mid] = fixed
        return r

    def ulp_array(self, t) -> np.ndarray:
        """ulp at each float64 value (see :meth:`ulp`); NaN gives NaN, ±inf the top spacing."""
        t = np.asarray(t, dtype=np.float64)
        # floor(log2|t|) from the exponent bits (zero and float64 subnormals give -1023, ±inf
        # 1024: clipped to the format's range, they give min_subnormal and the top spacing)
        e = ((np.ravel(t).view(np.int64) >> 52) & 0x7FF) - 1023
        np.clip(e, self.emin, self.emax, out=e)
        e += 1023 - self.precision + 1
        u = (e << 52).view(np.float64).reshape(t.shape)  # 2^(e-p+1), built exactly
        return np.where(np.isnan(t), np.nan, u)

    def ordinal(self, values) -> np.ndarray:
        """Integer position of each value of this format (given in its dtype or as float64 that
        are representable): consecutive values differ by 1, +0 and -0 are both 0, ±inf are one
        past the largest finite.  NaN maps to an arbitrary integer; mask it yourself."""
        a = np.asarray(values)
        if a.dtype != self.dtype:
            a = a.astype(np.float64).astype(self.dtype)
        bits = a.view(self.uint).astype(np.int64)
        sign = np.int64(1) << (self.bits - 1)
        mag = bits & (sign - 1)
        return np.where(bits & sign, -mag, mag)

    # ---------------------------------------------------------------- NumberFormat
    packed = False

    def quantize(self, v, overflow: str = "nan", mode: str = "rn") -> np.ndarray:
        if mode not in ("rn", "rz") or overflow not in ("satfinite", "nan"):
            raise invalid("mode, overflow", (mode, overflow), f"rn or rz, satfinite or nan for "
                          f"{self.name}", "ru and rd round e8m0 scales (quant.formats)")
        r = self.round_array(v) if mode == "rn" else self.round_toward_zero(v)
        if overflow == "satfinite":
            r = np.where(np.isinf(r), np.copysign(self.max_finite, r), r)
        return r

    def decode(self, codes) -> np.ndarray:
        return self.from_storage(np.asarray(codes).astype(self.uint).view(self.dtype))

    def encode(self, values) -> np.ndarray:
        v = np.asarray(values, np.float64)
        c = self.cast(v)
        bad = (c.astype(np.float64) != v) & ~np.isnan(v)
        if bad.any():
            raise invalid("value", float(v[bad].ravel()[0]), f"a value of {self.name}",
                          "round it first (Format.quantize)")
        return c.view(self.uint)

    def steps(self, a, b) -> np.ndarray:
        return np.abs(self.ordinal(a) - self.ordinal(b))

    def storage_cols(self, cols: int) -> int:
        return cols

    def from_storage(self, buf, cols: int = None) -> np.ndarray:
        with np.errstate(invalid="ignore"):  # the poison is a signalling NaN
            return np.asarray(buf)[..., :cols].astype(np.float64)

    def poison(self, alternate: bool = False) -> int:
        """:data:`POISON_BITS`, or a second NaN payload (``alternate``)."""
        return POISON_BITS[self.name] ^ (_ALTERNATE[self.name] if alternate else 0)

    def unwritten(self, buf, cols: int = None, alternate: bool = False) -> np.ndarray:
        return np.asarray(buf)[..., :cols].view(self.uint) == self.poison(alternate)

    def __repr__(self) -> str:
        return f"Format({self.name!r})"


def _to_fraction(value):
    """An exact Fraction of value, or a float for nan/inf."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, (int, np.integer)):
        return Fraction(int(value))
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if not np.isfinite(f):
            return f
        return Fraction(f)
    # mpmath mpf (and anything exposing man/exp exactly)
    try:
        import mpmath

        if isinstance(value, mpmath.mpf):
            if mpmath.isnan(value) or mpmath.isinf(value):
                return float(value)
            sign, man, exp, _ = value._mpf_
            q = Fraction(int(man)) * Fraction(2) ** int(exp)
            return -q if sign else q
    except ImportError:  # pragma: no cover
        pass
    raise invalid("value", value, "an int, float, Fraction or mpmath.mpf",
                  "pass an exact value; round decimal strings with Fraction('...') first")


def _floor_log2(a: Fraction) -> int:
    """floor(log2(a)) for a positive Fraction, exactly."""
    n, d = a.numerator, a.denominator
    e = n.bit_length() - d.bit_length()
    # 2**e <= a < 2**(e+1) may be off by one; fix by exact comparison.
    if e >= 0:
        if n < d << e:
            e -= 1
    else:
        if n << -e < d:
            e -= 1
    return e


def _make(name, precision, emin, emax, bits, dtype, uint, max_hex, min_normal_hex, min_sub_hex,
          overflow_hex):
    return Format(
        name=name,
        precision=precision,
        emin=emin,
        emax=emax,
        bits=bits,
        dtype=np.dtype(dtype),
        uint=np.dtype(uint),
        max_finite=float.fromhex(max_hex),
        min_normal=float.fromhex(min_normal_hex),
        min_subnormal=float.fromhex(min_sub_hex),
        overflow_threshold=float.fromhex(overflow_hex),
    )


# Exact constants, in hex.
FP32 = _make("fp32", 24, -126, 127, 32, np.float32, np.uint32,
             "0x1.fffffep+127", "0x1p-126", "0x1p-149", "0x1.ffffffp+127")
FP16 = _make("fp16", 11, -14, 15, 16, np.float16, np.uint16,
             "0x1.ffcp+15", "0x1p-14", "0x1p-24", "0x1.ffep+15")  # overflow at 65520
def _fp16(v: np.ndarray) -> np.ndarray:
    """float64 -> float16, rounded once.  numpy's conversion rounds correctly but spends ~90 ns
    on each element whose result is subnormal (measured: 97 ms for 2^20 such values, 3 ms for
    normal ones), so where they are more than 1/16 of the values they are done here on the bits:
    below 2^-14 an fp16 value's bits are its integer significand rint(|v|·2^24) (ties to even;
    1024 is the bits of 2^-14) and the sign."""
    small = np.abs(v) < 2.0**-14
    if np.count_nonzero(small) * 16 < small.size:  # a few: numpy's own conversion is cheaper
        return v.astype(np.float16)
    out = np.where(small, 0.0, v).astype(np.float16)
    sv = v[small]
    out.view(np.uint16)[small] = np.rint(np.abs(sv) * 2.0**24).astype(np.uint16) | \
        (np.signbit(sv).astype(np.uint16) << np.uint16(15))
    return out


def _bf16_bits(v: np.ndarray) -> np.ndarray:
    """float64 -> bfloat16 bits, rounded once: to float32 by rounding to odd (truncate, then
    set the last bit if anything was cut: 16 extra bits and a sticky bit keep the next rounding
    right), then to bfloat16 to nearest even on the bits; NaN stays a quiet NaN."""
    f = v.astype(np.float32)
    back = f.astype(np.float64)
    bits = f.view(np.uint32).copy()
    bits -= (np.abs(back) > np.abs(v)).astype(np.uint32)  # RNE went up in magnitude: truncate
    bits |= (back != v).astype(np.uint32)
    out = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(v), np.uint16(0x7FC0) | (np.signbit(v).astype(np.uint16) << 15),
                    out)


BF16 = _make("bf16", 8, -126, 127, 16, ml_dtypes.bfloat16, np.uint16,
             "0x1.fep+127", "0x1p-126", "0x1p-133", "0x1.ffp+127")

FORMATS = {f.name: f for f in (FP32, FP16, BF16)}


def get(name) -> Format:
    """The format called ``name`` ("fp32", "fp16", "bf16"); a Format passes through."""
    if isinstance(name, Format):
        return name
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise invalid("format", name, f"a storage format, one of {sorted(FORMATS)}",
                      "fp8, int8 and fp4 are the outputs of a quantised check: a spec's "
                      "[quant] format") from None


def of_dtype(dtype, what: str = "dtype") -> Format:
    """The format whose numpy dtype is ``dtype``."""
    dt = np.dtype(dtype) if not isinstance(dtype, np.dtype) else dtype
    for f in FORMATS.values():
        if f.dtype == dt:
            return f
    raise invalid(what, str(dt), "float32, float16 or bfloat16 (ml_dtypes)",
                  "convert the array with .astype(np.float32) or use a supported storage format")


#: A NaN with a payload no arithmetic produces (computed NaNs are the default quiet NaN): what an
#: output buffer holds before a launch, so an element the kernel never writes is recognisable.
POISON_BITS = {"fp16": 0x7D5A, "bf16": 0x7FA5, "fp32": 0x7FA5A5A5}
#: The alternate poison is POISON_BITS xor this: another NaN payload no arithmetic produces (fp16
#: 0x7CA5, bf16 0x7F9A, fp32 0x7F9A5A5A: the exponent all ones, the payload neither zero nor the
#: default quiet NaN's).
_ALTERNATE = {"fp16": 0x01FF, "bf16": 0x003F, "fp32": 0x003FFFFF}


def poison_bits(dtype) -> int:
    """The bits of the poison NaN of dtype's format."""
    return POISON_BITS[of_dtype(dtype).name]


def ulp_error(fmt: Format, actual, exact, rounded) -> np.ndarray:
    """Fractional ULP error |actual - t| / ulp(t) of each answer against the exact value t.

    ``exact`` holds t as the nearest float64 and ``rounded`` the correctly rounded value in this
    format (±inf where t is past the range).  Non-finite outcomes: inf where a non-finite answer
    meets a t that rounds to a finite value, or a finite answer meets a t that rounds to ±inf or is
    NaN; 0 where the answer is the same non-finite as the correctly rounded value."""
    a = np.asarray(actual).astype(np.float64)
    t = np.asarray(exact, dtype=np.float64)
    r = np.asarray(rounded).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(a - t) / fmt.ulp_array(t)
        finite_ref = np.isfinite(r)
        same_nonfinite = (~finite_ref) & ((a == r) | (np.isnan(a) & np.isnan(r)))
        err = np.where(finite_ref & np.isfinite(a), err, np.inf)
        err = np.where(same_nonfinite, 0.0, err)
    return err
