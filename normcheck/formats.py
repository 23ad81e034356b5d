"""Every number format, registered once (:data:`REGISTRY`): the storage formats fp32, fp16 and
bf16 (:class:`Format`: exact constants, correct rounding, ulp and ordinals) and the code formats
of quantised outputs and fp8 inputs -- fp8 e4m3/e5m2 and their fnuz forms, int8, fp4 e2m1, the
block scales e8m0 and ue4m3 (:class:`QFormat`: code point by code point).  Both answer one
protocol (:class:`NumberFormat`): codes and values, rounding, steps, a kernel's buffer of them,
poison; and the value protocol the forward check reads rows through (precision, ``round_array``,
``ulp_array``, ``cast``, and ``carrier``: the storage format holding every value exactly, fp16
for fp8).  :func:`lookup` names any of them; :data:`ROWS` are the formats input rows may be in.

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

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol, runtime_checkable

import numpy as np

from normcheck.errors import invalid

__all__ = ["NumberFormat", "Format", "QFormat", "FP32", "FP16", "BF16", "FORMATS", "QFORMATS",
           "REGISTRY", "ROWS", "E4M3", "E5M2", "E4M3FNUZ", "E5M2FNUZ", "INT8", "E2M1", "E8M0",
           "UE4M3", "OVERFLOW", "get", "lookup", "of_dtype", "ulp_error", "POISON_BITS",
           "poison_bits"]


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


def np_type(t):
    """``t``, or where it is a name, ml_dtypes' type of that name (``"bfloat16"``); None stays
    None.  ml_dtypes costs 0.5 s to import (its extension registers every type and cast with
    numpy), so it is imported the first time a bf16 or fp8 buffer is asked for, not by an fp16
    or fp32 check (#67)."""
    if isinstance(t, str):
        import ml_dtypes

        return getattr(ml_dtypes, t)
    return t


def is_bf16(dtype) -> bool:
    """Whether ``dtype`` is bfloat16's, without importing ml_dtypes to ask (np_type)."""
    try:
        return np.dtype(dtype).name == "bfloat16"
    except TypeError:  # "bfloat16" named before ml_dtypes is imported
        return dtype == "bfloat16"


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
    _dtype: object  # a numpy dtype, or the name of ml_dtypes' type (imported when first used)
    uint: np.dtype
    max_finite: float
    min_normal: float
    min_subnormal: float
    overflow_threshold: float  # max + ½ulp: the smallest magnitude that rounds to inf

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of this format's values (bf16: ml_dtypes'; see np_type)."""
        return np.dtype(np_type(self._dtype))

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

    @property
    def carrier(self) -> "Format":
        """The storage format holding its values: itself."""
        return self

    def to_storage(self, values) -> np.ndarray:
        """A kernel's buffer of the values: the values in this format's dtype."""
        return self.cast(np.asarray(values, np.float64))

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
        _dtype=dtype if isinstance(dtype, str) else np.dtype(dtype),
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


BF16 = _make("bf16", 8, -126, 127, 16, "bfloat16", np.uint16,
             "0x1.fep+127", "0x1p-126", "0x1p-133", "0x1.ffp+127")

FORMATS = {f.name: f for f in (FP32, FP16, BF16)}


OVERFLOW = ("satfinite", "nan")


@dataclass(frozen=True)
class QFormat:
    """A small format: ``kind`` "float" (sign, exponent, significand of ``precision`` bits with
    the implicit one, normal exponents ``emin``..``emax``), "int" (two's complement), or "e8m0"
    (a power of two, no sign).  ``bits`` per value; ``max_finite`` its largest value."""

    name: str
    kind: str
    bits: int
    precision: int = 0
    emin: int = 0
    emax: int = 0
    max_finite: float = 0.0
    has_inf: bool = False
    has_nan: bool = True
    fnuz: bool = False        # no negative zero; NaN is the code 1000...0
    unsigned: bool = False    # ue4m3: the NVFP4 block scale (e4m3fn without its sign)

    @property
    def min_subnormal(self) -> float:
        return math.ldexp(1.0, self.emin - self.precision + 1) if self.kind == "float" else 1.0

    # -- values ------------------------------------------------------------------------------
    def values(self) -> np.ndarray:
        """Every finite value, ascending (each once; one zero)."""
        v = self.decode(np.arange(1 << self.bits))
        v = v[np.isfinite(v)]
        return np.unique(np.where(v == 0, 0.0, v))

    def decode(self, codes) -> np.ndarray:
        """The value of each code (float64; NaN for NaN codes, ±inf for e5m2's)."""
        c = np.asarray(codes, dtype=np.int64) & ((1 << self.bits) - 1)
        if self.kind == "int":
            return np.where(c >= 1 << (self.bits - 1), c - (1 << self.bits), c).astype(np.float64)
        if self.kind == "e8m0":
            return np.where(c == 255, np.nan, np.ldexp(1.0, (c - 127).astype(np.int64)))
        mbits = self.precision - 1
        ebits = self.bits - 1 - mbits
        sign = (c >> (self.bits - 1)) & 1
        e = (c >> mbits) & ((1 << ebits) - 1)
        m = c & ((1 << mbits) - 1)
        bias = 1 - self.emin
        mag = np.where(e == 0, np.ldexp(m.astype(np.float64), self.emin - mbits),
                       np.ldexp((m + (1 << mbits)).astype(np.float64), e - bias - mbits))
        top = e == (1 << ebits) - 1
        if self.has_inf:  # IEEE-like: all-ones exponent is inf (m == 0) or NaN
            mag = np.where(top & (m == 0), np.inf, np.where(top, np.nan, mag))
        elif self.fnuz:  # 1.0000.000 is the NaN; there is no -0
            mag = np.where((sign == 1) & (e == 0) & (m == 0), np.nan, mag)
            sign = np.where(np.isnan(mag), 0, sign)
        elif self.has_nan:  # e4m3fn: only S.1111.111 is NaN
            mag = np.where(top & (m == (1 << mbits) - 1), np.nan, mag)
        if self.unsigned:  # ue4m3: the sign bit is not used
            return np.where(sign == 1, np.nan, mag)
        return np.where(sign == 1, -mag, mag)

    def encode(self, values) -> np.ndarray:
        """The code of each value, which must be a value of the format (or NaN, ±inf where it
        has them): the inverse of :meth:`decode` (-0 keeps its sign where the format has one;
        the first NaN code for NaN)."""
        v = np.asarray(values, dtype=np.float64)
        codes = np.arange(1 << self.bits)
        dv = self.decode(codes)
        fin = np.isfinite(dv)
        keys, kc = dv[fin], codes[fin]
        order = np.lexsort((kc, keys))
        uniq, first = np.unique(keys[order], return_index=True)
        ucodes = kc[order][first]
        idx = np.clip(np.searchsorted(uniq, v), 0, uniq.size - 1)
        out = ucodes[idx].astype(np.int64)
        ok = uniq[idx] == v
        negzero = (v == 0) & np.signbit(v) & ~self.fnuz & ~self.unsigned & (self.kind == "float")
        out = np.where(negzero, 1 << (self.bits - 1), out)
        nan = np.isnan(v)
        for special, mask in ((np.nan, nan), (np.inf, v == np.inf), (-np.inf, v == -np.inf)):
            if mask.any():
                hit = np.nonzero(np.isnan(dv) if special != special else dv == special)[0]
                if hit.size == 0:
                    raise invalid("value", float(special), f"a value of {self.name} (it has no "
                                  f"{special})", "quantize it first (QFormat.quantize)")
                out = np.where(mask, hit[0], out)
                ok = ok | mask
        if not ok.all():
            bad = float(v[~ok].ravel()[0])
            raise invalid("value", bad, f"a value of {self.name}",
                          "quantize it first (QFormat.quantize)")
        return out.astype(np.uint8 if self.bits <= 8 else np.uint16)

    # -- storage ----------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype a kernel's buffer of this format has: int8 for int8, else uint8
        (codes; fp4 packs two per byte)."""
        return np.dtype(np.int8) if self.kind == "int" else np.dtype(np.uint8)

    @property
    def uint(self) -> np.dtype:
        """The dtype of a buffer's codes (bytes)."""
        return np.dtype(np.uint8)

    @property
    def element(self) -> str | None:
        """The ml_dtypes type a typed language (Triton) stores this format as, where there is
        one (its codes are the same bytes); None for codes only (e8m0, fp4, int8 as int8)."""
        return {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz",
                "e5m2fnuz": "float8_e5m2fnuz"}.get(self.name)

    @property
    def packed(self) -> bool:
        """Two 4-bit codes per byte, the even element in the low nibble."""
        return self.bits == 4

    def storage_cols(self, cols: int) -> int:
        return -(-cols // 2) if self.packed else cols

    def poison(self, alternate: bool = False) -> int:
        """The byte an output buffer starts as: the NaN code where the format has one (no
        contract writes it but for NaN), else a pattern; ``alternate`` gives a second one, to
        tell an element never written from one that holds the first by chance."""
        if alternate:
            return 0x55
        if self.kind == "int":
            return 0x80
        if self.packed:
            return 0x88
        if self.kind == "e8m0":
            return 0xFF
        return 0x80 if self.fnuz else 0x7F

    def codes(self, buf, cols: int = None) -> np.ndarray:
        """The codes of a kernel's buffer [rows, storage_cols] (uint8 [rows, cols]: packed
        codes unpacked, the even element from the low nibble)."""
        b = np.asarray(buf).view(np.uint8)
        if self.packed:
            codes = np.empty(b.shape[:-1] + (2 * b.shape[-1],), np.uint8)
            codes[..., 0::2] = b & 0xF
            codes[..., 1::2] = b >> 4
            b = codes
        return b[..., :cols]

    def from_storage(self, buf, cols: int = None) -> np.ndarray:
        """The values of a kernel's buffer [rows, storage_cols] (float64 [rows, cols]); int8 is
        read as the values it holds, codes are decoded, packed codes unpacked."""
        if self.kind == "int":
            return np.asarray(buf).view(np.int8)[..., :cols].astype(np.float64)
        return self.decode(self.codes(buf, cols))

    def unwritten(self, buf, cols: int = None, alternate: bool = False) -> np.ndarray:
        """Mask of the elements still holding the (``alternate``) poison code."""
        return self.codes(buf, cols) == (self.poison(alternate) & (0xF if self.packed else 0xFF))

    def to_storage(self, values) -> np.ndarray:
        """Codes of values of this format, packed where the format packs."""
        v = np.asarray(values, np.float64)
        if self.kind == "int":
            return v.astype(np.int8)
        codes = self.encode(v).astype(np.uint8)
        if not self.packed:
            return codes
        if codes.shape[-1] % 2:
            codes = np.concatenate([codes, np.zeros(codes.shape[:-1] + (1,), np.uint8)], -1)
        return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


    # -- values, as a kernel's input rows hold them (the forward check's fp8 rows) ------------
    @property
    def min_normal(self) -> float:
        return math.ldexp(1.0, self.emin) if self.kind == "float" else 1.0

    @property
    def carrier(self) -> "Format":
        """The storage format that holds every value of this one exactly, in which the oracle
        and the measurement read them: fp16 for fp8 (e4m3: 2^-9 .. 448; e5m2: 2^-16 .. 57344),
        fp4 and int8; fp32 for e8m0."""
        return FP32 if self.kind == "e8m0" else FP16

    def round_array(self, v) -> np.ndarray:
        """float64 values rounded to the format once (to nearest even), saturating beyond the
        largest value: what activations quantised to it hold."""
        return self.quantize(v, "satfinite")

    def cast(self, v) -> np.ndarray:
        """float64 values rounded to the format, as an array of its carrier's dtype."""
        return self.carrier.cast(self.round_array(v))

    def ulp_array(self, t) -> np.ndarray:
        """The spacing of the format in the binade of each value, clamped at the subnormal
        spacing and at the largest binade."""
        t = np.abs(np.asarray(t, dtype=np.float64))
        if self.kind != "float":
            return np.ones_like(t)
        with np.errstate(divide="ignore", invalid="ignore"):
            _, E = np.frexp(t)
        emax = int(math.floor(math.log2(self.max_finite)))
        e = np.clip(E - 1, self.emin, emax)
        return np.ldexp(1.0, (e - self.precision + 1).astype(np.int64))

    # -- rounding ----------------------------------------------------------------------------
    def quantize(self, v, overflow: str = "satfinite", mode: str = "rn") -> np.ndarray:
        """float64 values rounded once to the format (to nearest, ties to even; or ``mode`` "rz",
        "ru", "rd" for e8m0 scale formulas), beyond the largest value per ``overflow``."""
        if overflow not in OVERFLOW:
            raise invalid("overflow", overflow, f"one of {', '.join(OVERFLOW)}")
        v = np.asarray(v, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            if self.kind == "int":
                r = np.rint(v) if mode == "rn" else {"rz": np.trunc, "ru": np.ceil,
                                                     "rd": np.floor}[mode](v)
                lo, hi = -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
                r = np.clip(r, lo, hi)
                return np.where(np.isnan(v), 0.0, r)
            if self.kind == "e8m0":  # a power of two: rn rounds to the nearer one
                a = np.abs(v)
                m, e = np.frexp(a)  # a = m·2^e, m in [0.5, 1)
                k = e.astype(np.float64) - 1  # floor(log2 a)
                if mode == "ru":
                    k = np.where(m == 0.5, k, k + 1)
                elif mode == "rn":
                    lo = np.ldexp(1.0, k.astype(np.int64))
                    k = np.where(a - lo >= 2 * lo - a, k + 1, k)
                k = np.clip(k, -127, 127)
                r = np.ldexp(1.0, k.astype(np.int64))
                return np.where(np.isnan(v) | (a == 0) | np.isinf(a), np.nan, r)
            p, emin = self.precision, self.emin
            a = np.abs(v)
            _, E = np.frexp(a)
            e = np.maximum(E - 1, emin)
            q = np.ldexp(1.0, (e - p + 1).astype(np.int64))
            s = a / q  # exact: a power-of-two scaling of the magnitude
            neg = v < 0
            if mode == "rn":
                n = np.rint(s)  # ties to even, exactly
            elif mode == "rz":
                n = np.floor(s)
            elif mode == "ru":
                n = np.where(neg, np.floor(s), np.ceil(s))
            else:  # rd
                n = np.where(neg, np.ceil(s), np.floor(s))
            r = n * q
            big = r > self.max_finite
            if overflow == "satfinite" or not (self.has_nan or self.has_inf):
                r = np.where(big, self.max_finite, r)
            else:
                r = np.where(big, np.inf if self.has_inf else np.nan, r)
            if self.unsigned:
                r = np.where(neg, 0.0, r)
                return np.where(np.isnan(v), np.nan, r)
            out = np.copysign(r, v)
            if not (self.has_nan or self.has_inf):  # e2m1: NaN has no code; +max as the
                out = np.where(np.isnan(v), self.max_finite, out)  # satfinite cvt gives
            if self.fnuz:
                out = np.where(out == 0, 0.0, out)
            if overflow == "satfinite":
                out = np.where(np.isinf(v), np.copysign(self.max_finite, v), out)
            return out

    def steps(self, a, b) -> np.ndarray:
        """How many representable values apart a and b (values of the format) are."""
        vals = self.values()
        ia = np.searchsorted(vals, np.asarray(a, np.float64))
        ib = np.searchsorted(vals, np.asarray(b, np.float64))
        return np.abs(ia - ib)


def _fp(name, bits, precision, emin, emax_value, **kw):
    return QFormat(name, "float", bits, precision, emin, 0, emax_value, **kw)


E4M3 = _fp("e4m3", 8, 4, -6, 448.0)
E5M2 = _fp("e5m2", 8, 3, -14, 57344.0, has_inf=True)
E4M3FNUZ = _fp("e4m3fnuz", 8, 4, -7, 240.0, fnuz=True)
E5M2FNUZ = _fp("e5m2fnuz", 8, 3, -15, 57344.0, fnuz=True)
INT8 = QFormat("int8", "int", 8, max_finite=127.0, has_nan=False)
E2M1 = _fp("e2m1", 4, 2, 0, 6.0, has_nan=False)
E8M0 = QFormat("e8m0", "e8m0", 8, max_finite=2.0**127)
UE4M3 = _fp("ue4m3", 8, 4, -6, 448.0, unsigned=True)

QFORMATS = {f.name: f for f in (E4M3, E5M2, E4M3FNUZ, E5M2FNUZ, INT8, E2M1, E8M0, UE4M3)}
_ALIASES = {"fp8_e4m3": "e4m3", "e4m3fn": "e4m3", "fp8": "e4m3", "float8_e4m3fn": "e4m3",
            "fp8_e5m2": "e5m2", "float8_e5m2": "e5m2", "fp4": "e2m1", "fp4_e2m1": "e2m1",
            "nvfp4": "e2m1", "s8": "int8", "i8": "int8"}


#: Every format, each registered once: the storage formats and the code formats.
REGISTRY = {**FORMATS, **QFORMATS}
_ALIASES = {"fp8_e4m3": "e4m3", "e4m3fn": "e4m3", "fp8": "e4m3", "float8_e4m3fn": "e4m3",
            "fp8_e5m2": "e5m2", "float8_e5m2": "e5m2", "fp4": "e2m1", "fp4_e2m1": "e2m1",
            "nvfp4": "e2m1", "s8": "int8", "i8": "int8", "float32": "fp32", "float16": "fp16",
            "half": "fp16", "bfloat16": "bf16"}
#: The formats a kernel's input rows (x, the residual) may be stored in: the storage formats,
#: and fp8 -- its values carried in fp16 for the oracle (QFormat.carrier), its families built
#: to hurt it (normcheck.families.ROW_PARAMS).
ROWS = ("fp32", "fp16", "bf16", "e4m3", "e5m2")


def get(name) -> Format:
    """The storage format called ``name`` ("fp32", "fp16", "bf16"); a Format passes through."""
    if isinstance(name, Format):
        return name
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise invalid("format", name, f"a storage format, one of {sorted(FORMATS)}",
                      "an fp8 input is a role's dtype (dtypes = { x = \"e4m3\" }, --dtypes "
                      "x=e4m3); fp8, int8 and fp4 outputs are a quantised check's [quant] "
                      "format") from None


def lookup(name, allowed=None, what: str = "dtype"):
    """Any format by name or alias (``allowed``: the names it must be one of); a format passes
    through.  Refused naming the thing, the value and the choices."""
    if isinstance(name, (Format, QFormat)):
        f = name
    else:
        f = REGISTRY.get(_ALIASES.get(str(name), str(name)))
    if f is None or (allowed is not None and f.name not in allowed):
        choices = list(allowed) if allowed is not None else list(REGISTRY)
        raise invalid(what, name, f"one of {', '.join(choices)}",
                      "fp32, fp16, bf16 for every role; e4m3 for input rows")
    return f


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
