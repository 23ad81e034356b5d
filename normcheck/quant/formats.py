"""The formats a quantised normalisation writes: fp8 (e4m3fn, e5m2 and their fnuz forms), int8,
fp4 e2m1, and the block scales e8m0 (MX) and ue4m3 (NVFP4) -- exact, code point by code point.

Each format is a finite set of values with an encoding; :meth:`QFormat.quantize` rounds exact
(float64) values to it once, to nearest with ties to even, and treats what lies beyond the
largest finite value as the conversion it models does:

========== ===================================================================================
satfinite  ±max (the ``.satfinite`` cvt of sm_89+, __nv_fp8_e4m3(float), cvt.rni.sat for int8)
nan        NaN where the format has no infinity (e4m3fn, e4m3fnuz: the non-saturating cvt, and
           c10's Float8_e4m3fn from a float above 464), else ±inf (e5m2)
========== ===================================================================================

NaN stays NaN (int8, e2m1 and e8m0 have no NaN to give: NaN becomes 0 for int8 -- cvt.rni.sat
-- and +6 for e2m1 -- cvt.rn.satfinite.e2m1x2 and cuda_fp4.hpp -- and the 0xFF code for e8m0).
Values are doubles throughout: every value of these formats is exact in float64, and so is
every midpoint between two neighbours, so rounding a float64 is exact.
ml_dtypes is not used for any conversion (its float64 casts have rounded twice, through
float32, in some releases); the tests compare every code point with the formats' definitions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from normcheck import formats
from normcheck.errors import invalid

__all__ = ["QFormat", "QFORMATS", "get", "as_values", "E4M3", "E5M2", "E4M3FNUZ", "E5M2FNUZ", "INT8", "E2M1",
           "E8M0", "UE4M3", "OVERFLOW"]

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


def as_values(a, fmt, cols: int) -> np.ndarray:
    """A callable's q (or scales) as float64 values: floats (numpy, ml_dtypes float8/float4,
    torch tensors of any float dtype) are values; uint8 arrays are codes of ``fmt`` (fp4 packed
    two a byte); int8 arrays are int8 values."""
    if hasattr(a, "detach"):  # torch
        a = a.detach().cpu()
        if a.dtype.is_floating_point:
            a = a.float()
        a = a.numpy()
    a = np.asarray(a)
    if a.dtype == np.uint8:
        return fmt.from_storage(a, cols)
    try:
        return a.astype(np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"expected float values or uint8 codes, got {a.dtype}") from None


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


def get(name) -> formats.NumberFormat:
    """Every format by name, a quantised one (aliases: fp8, float8_e4m3fn, fp4, …) or a
    storage one (fp32, fp16, bf16: a contract's float scales): one lookup, one protocol."""
    if isinstance(name, (QFormat, formats.Format)):
        return name
    n = _ALIASES.get(str(name), str(name))
    if n in formats.FORMATS:
        return formats.FORMATS[n]
    if n not in QFORMATS:
        raise invalid("quant.format", name, f"one of {', '.join(QFORMATS)}",
                      "e.g. e4m3 (fp8, ±448), e5m2, int8, e2m1 (fp4)")
    return QFORMATS[n]
