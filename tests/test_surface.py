"""The CUDA device API on the cpu backend: every section of the coverage table is complete (what is
left out is listed with its reason), and the functions are called in a generated kernel and
compared with their definitions -- the documented rounding of the _rn/_rz/_ru/_rd forms exactly,
the SIMD and integer intrinsics bit for bit, the math functions against mpmath within stated
bounds."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from normcheck.backends import get_backend
from normcheck.backends.cpu import surface

# ------------------------------------------------------------------------------------------------
# Coverage
# ------------------------------------------------------------------------------------------------
SECTIONS_OF_THE_ISSUE = ("single-precision math", "double-precision math",
                         "single-precision intrinsics", "double-precision intrinsics",
                         "integer intrinsics", "type casting intrinsics", "SIMD intrinsics",
                         "half precision", "bfloat16 precision", "warp functions", "atomics")


def test_every_section_is_complete_but_what_is_left_out_with_its_reason():
    cov = surface.coverage()
    for sec in SECTIONS_OF_THE_ISSUE:
        assert len(surface.declared()[sec]) > 10, sec  # the list really comes from the headers
        assert cov[sec]["missing"] == [], (sec, cov[sec]["missing"])
    for sec, c in cov.items():
        assert not c["missing"], (sec, c["missing"])
        assert all(why for why in c["left_out"].values())
    assert "| **all** |" in surface.table()


# ------------------------------------------------------------------------------------------------
# Exact references
# ------------------------------------------------------------------------------------------------
FMT = {"f32": (24, -126, 127), "f64": (53, -1022, 1023), "f16": (11, -14, 15),
       "bf16": (8, -126, 127)}


def frac(v) -> Fraction:
    """An mpmath number's exact value as a Fraction."""
    v = mpmath.mpf(v)
    m, e = v.man_exp  # the mantissa's magnitude
    return (-1 if v < 0 else 1) * Fraction(m) * Fraction(2) ** e


def rnd(q, fmt, mode):
    """The exact rational q rounded to fmt ("f32" ...) in mode rn/rz/ru/rd (a float; ±inf on
    overflow where the mode goes there, else the largest finite value)."""
    P, emin, emax = FMT[fmt]
    if isinstance(q, float):
        if math.isnan(q) or math.isinf(q):
            return q
        q = Fraction(q)
    if q == 0:
        return 0.0
    neg = q < 0
    a = -q if neg else q
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    quantum = Fraction(2) ** (max(e, emin) - P + 1)
    m = a / quantum
    n = m.numerator // m.denominator
    rest = m - n
    if rest:
        if mode == "rn":
            n += rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1)
        elif mode == "ru":
            n += not neg
        elif mode == "rd":
            n += neg
    r = n * quantum
    top = (2 - Fraction(2) ** (1 - P)) * Fraction(2) ** emax
    if r > top:
        to_inf = mode == "rn" or (mode == "ru" and not neg) or (mode == "rd" and neg)
        return -math.inf if neg and to_inf else (math.inf if to_inf else float(-top if neg
                                                                                  else top))
    return float(-r if neg else r)


def to_int(x, mode, bits, signed):
    if math.isnan(x):
        return 0
    f = {"rn": lambda v: round(Fraction(v)) if Fraction(v) - math.floor(v) != Fraction(1, 2)
         else (math.floor(v) if math.floor(v) % 2 == 0 else math.ceil(v)),
         "rz": math.trunc, "ru": math.ceil, "rd": math.floor}[mode]
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if math.isinf(x):
        return hi if x > 0 else lo
    return max(lo, min(hi, int(f(x))))


def ulps(got, want, fmt):
    """|got - want| in ulps of fmt at want (0 where both are the same non-finite value)."""
    if math.isnan(want) or math.isinf(want):
        return 0.0 if (math.isnan(got) and math.isnan(want)) or got == want else math.inf
    if math.isnan(got) or math.isinf(got):
        return math.inf
    P, emin, _ = FMT[fmt]
    e = max(math.frexp(want)[1] - 1 if want else emin, emin)
    return abs(got - want) / 2.0 ** (e - P + 1)


# ------------------------------------------------------------------------------------------------
# One generated kernel per signature: out[i] = fn(a[i], b[i], c[i]) for the function `which`
# ------------------------------------------------------------------------------------------------
# kinds: the array's C element type, and how a value of the call's type is made from it / stored
KINDS = {
    "f32": ("float", "{}", "{}"), "f64": ("double", "{}", "{}"), "i32": ("int", "{}", "{}"),
    "u32": ("unsigned", "{}", "{}"), "i64": ("long long", "{}", "{}"),
    "u64": ("unsigned long long", "{}", "{}"), "i16": ("short", "{}", "{}"),
    "u16": ("unsigned short", "{}", "{}"),
    "f16": ("unsigned short", "__ushort_as_half({})", "__half_as_ushort({})"),
    "bf16": ("unsigned short", "__ushort_as_bfloat16({})", "__bfloat16_as_ushort({})"),
    "f16x2": ("unsigned", "nc_h2({})", "nc_uh2({})"),
    "bf16x2": ("unsigned", "nc_b2({})", "nc_ub2({})"),
    "f32x2": ("double", "nc_f2({})", "nc_uf2({})"),
}
NP = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "u32": np.uint32, "i64": np.int64,
      "u64": np.uint64, "i16": np.int16, "u16": np.uint16, "f16": np.uint16, "bf16": np.uint16,
      "f16x2": np.uint32, "bf16x2": np.uint32, "f32x2": np.float64}
PRELUDE = """
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__device__ __half2 nc_h2(unsigned u) { __half2 h; memcpy(&h, &u, 4); return h; }
__device__ unsigned nc_uh2(__half2 h) { unsigned u; memcpy(&u, &h, 4); return u; }
__device__ __nv_bfloat162 nc_b2(unsigned u) { __nv_bfloat162 h; memcpy(&h, &u, 4); return h; }
__device__ unsigned nc_ub2(__nv_bfloat162 h) { unsigned u; memcpy(&u, &h, 4); return u; }
__device__ float2 nc_f2(double d) { float2 f; memcpy(&f, &d, 8); return f; }
__device__ double nc_uf2(float2 f) { double d; memcpy(&d, &f, 8); return d; }
"""


class Fn:
    """One function under test: its call, argument and result kinds, a reference, inputs, and
    the error it may have (0: bit for bit; else ulps of the result's format, with the bound's
    source)."""

    def __init__(self, call, args, res, ref, inputs, tol=0.0, why=""):
        self.call, self.args, self.res, self.ref = call, tuple(args), res, ref
        self.inputs, self.tol, self.why = inputs, tol, why

    @property
    def name(self):
        return re.match(r"\s*([\w:]+)", self.call).group(1)


def _kernel_name(args, res):
    return "k_" + res + "_" + "_".join(args)


def _source(fns):
    groups = {}
    for i, f in enumerate(fns):
        groups.setdefault((f.args, f.res), []).append((i, f))
    out = [PRELUDE]
    for (args, res), members in groups.items():
        params = ", ".join(f"const {KINDS[k][0]}* {v}" for k, v in zip(args, "abc"))
        out.append(f'extern "C" __global__ void {_kernel_name(args, res)}({KINDS[res][0]}* out, '
                   f"{params}, int n, int which) {{\n  int i = blockIdx.x * blockDim.x + "
                   "threadIdx.x;\n  if (i >= n) return;\n  switch (which) {")
        for i, f in members:
            vals = {v: KINDS[k][1].format(f"{v}[i]") for k, v in zip(args, "abc")}
            expr = f.call.format(**vals)
            out.append(f"  case {i}: out[i] = {KINDS[res][2].format(expr)}; break;")
        out.append("  }\n}")
    return "\n".join(out)


def run_all(fns):
    src = _source(fns)
    names = sorted({_kernel_name(f.args, f.res) for f in fns})
    ks = get_backend("cpu").compile_many(src, names)
    results = []
    for i, f in enumerate(fns):
        cols = [np.asarray([x[j] for x in f.inputs], dtype=NP[k]) for j, k in
                enumerate(f.args)]
        n = len(f.inputs)
        out = np.zeros(n, NP[f.res])
        ks[_kernel_name(f.args, f.res)](-(-n // 64), 64, [out, *cols, np.int32(n), np.int32(i)])
        results.append(out)
    return results


def _stored(x, kinds):
    """The inputs as the kernel reads them (rounded to their array's type)."""
    return tuple(v.item() for v in (np.asarray([a], dtype=NP[k])[0] for a, k in zip(x, kinds)))


def check(fns):
    bad = []
    for f, out in zip(fns, run_all(fns)):
        for x, got in zip(f.inputs, out):
            x = _stored(x, f.args)
            want = f.ref(*x)
            if f.tol == 0:
                ok = (got == want) or (isinstance(want, float) and math.isnan(want) and
                                       math.isnan(float(got)))
                if not ok:
                    bad.append(f"{f.call} at {x}: got {got!r}, want {want!r}")
            else:
                e = ulps(float(got), float(want), f.res if f.res in FMT else "f32")
                if e > f.tol:
                    bad.append(f"{f.call} at {x}: got {float(got)!r}, want {want!r} "
                               f"({e:.3g} ulp > {f.tol})")
    assert not bad, "\n".join(bad[:20]) + f"\n({len(bad)} in all)"


# ------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------
RNG = np.random.default_rng(7)


def floats(n, dtype=np.float32, scale=1e3):
    v = list((RNG.standard_normal(n) * scale).astype(dtype))
    v += [dtype(x) for x in (0.0, -0.0, 1.0, -1.5, 2.5, 3.5, -2.5, 1e-40 if dtype == np.float32
                             else 1e-310, 0.1, 7.0, 1 / 3)]
    return [float(x) for x in v]


F32 = floats(40)
F32B = floats(40, scale=3.0)
F64 = floats(40, np.float64)
F64B = floats(40, np.float64, 3.0)
MODES = ("rn", "rz", "ru", "rd")


def f32(x):
    return float(np.float32(x))


def bits16(x, fmt):
    import ml_dtypes

    return int(np.array([rnd(Fraction(x), fmt, "rn")], dtype=np.float32).astype(
        np.float16 if fmt == "f16" else ml_dtypes.bfloat16).view(np.uint16)[0])


def from16(b, fmt):
    import ml_dtypes

    return float(np.array([b], np.uint16).view(np.float16 if fmt == "f16" else
                                                ml_dtypes.bfloat16)[0])


# ------------------------------------------------------------------------------------------------
# Single- and double-precision intrinsics: the rounding of each mode, exactly
# ------------------------------------------------------------------------------------------------
def _sqrt_exact(x, fmt, mode):
    if x < 0:
        return math.nan
    with mpmath.workprec(400):
        q = frac(mpmath.sqrt(mpmath.mpf(x)))  # exact when x is a square, else far from ties
    return rnd(q, fmt, mode)


def intrinsics():
    fns = []
    pairs32 = [(a, b) for a, b in zip(F32, F32B)]
    pairs64 = [(a, b) for a, b in zip(F64, F64B)]
    trip32 = [(a, b, c) for a, b, c in zip(F32, F32B, reversed(F32))]
    trip64 = [(a, b, c) for a, b, c in zip(F64, F64B, reversed(F64))]
    for m in MODES:
        for op, fr in (("add", lambda a, b: Fraction(a) + Fraction(b)),
                       ("sub", lambda a, b: Fraction(a) - Fraction(b)),
                       ("mul", lambda a, b: Fraction(a) * Fraction(b)),
                       ("div", lambda a, b: Fraction(a) / Fraction(b) if b else None)):
            ok = [(a, b) for a, b in pairs32 if op != "div" or b]
            fns.append(Fn(f"__f{op}_{m}({{a}}, {{b}})", ("f32", "f32"), "f32",
                          lambda a, b, fr=fr, m=m: rnd(fr(a, b), "f32", m), ok))
            ok = [(a, b) for a, b in pairs64 if op != "div" or b]
            fns.append(Fn(f"__d{op}_{m}({{a}}, {{b}})", ("f64", "f64"), "f64",
                          lambda a, b, fr=fr, m=m: rnd(fr(a, b), "f64", m), ok))
        fns.append(Fn(f"__fmaf_{m}({{a}}, {{b}}, {{c}})", ("f32",) * 3, "f32",
                      lambda a, b, c, m=m: rnd(Fraction(a) * Fraction(b) + Fraction(c), "f32", m),
                      trip32))
        fns.append(Fn(f"__fmaf_ieee_{m}({{a}}, {{b}}, {{c}})", ("f32",) * 3, "f32",
                      lambda a, b, c, m=m: rnd(Fraction(a) * Fraction(b) + Fraction(c), "f32", m),
                      trip32))
        fns.append(Fn(f"__fma_{m}({{a}}, {{b}}, {{c}})", ("f64",) * 3, "f64",
                      lambda a, b, c, m=m: rnd(Fraction(a) * Fraction(b) + Fraction(c), "f64", m),
                      trip64))
        nz32 = [(a,) for a in F32 if a]
        nz64 = [(a,) for a in F64 if a]
        fns.append(Fn(f"__frcp_{m}({{a}})", ("f32",), "f32",
                      lambda a, m=m: rnd(1 / Fraction(a), "f32", m), nz32))
        fns.append(Fn(f"__drcp_{m}({{a}})", ("f64",), "f64",
                      lambda a, m=m: rnd(1 / Fraction(a), "f64", m), nz64))
        pos32 = [(abs(a),) for a in F32]
        pos64 = [(abs(a),) for a in F64]
        fns.append(Fn(f"__fsqrt_{m}({{a}})", ("f32",), "f32",
                      lambda a, m=m: _sqrt_exact(a, "f32", m), pos32))
        fns.append(Fn(f"__dsqrt_{m}({{a}})", ("f64",), "f64",
                      lambda a, m=m: _sqrt_exact(a, "f64", m), pos64))
        fns.append(Fn(f"__fadd2_{m}({{a}}, {{b}})", ("f32x2", "f32x2"), "f32x2",
                      lambda a, b, m=m: _pack2([rnd(Fraction(x) + Fraction(y), "f32", m)
                                               for x, y in zip(_unpack2(a), _unpack2(b))]),
                      [(_pack2([x, y]), _pack2([y, x])) for x, y in pairs32[:20]]))
    fns.append(Fn("__frsqrt_rn({a})", ("f32",), "f32",
                  lambda a: rnd(frac(mpmath.mpf(1) / mpmath.sqrt(mpmath.mpf(a))), "f32", "rn")
                  if a else math.inf,
                  [(abs(a),) for a in F32 if a]))
    # the approximate intrinsics: the accurate value (glibc's, <= 1 ulp, bound from its
    # libm-test-ulps for x86_64: expf/logf/sinf/cosf 1 ulp), +1 ulp margin
    for name, mp in (("__expf", mpmath.exp), ("__logf", mpmath.log), ("__sinf", mpmath.sin),
                     ("__cosf", mpmath.cos), ("__log2f", lambda v: mpmath.log(v, 2))):
        xs = [(abs(a) / 100 + 0.01,) for a in F32[:30]]
        fns.append(Fn(f"{name}({{a}})", ("f32",), "f32",
                      lambda a, mp=mp: float(mp(mpmath.mpf(a))), xs, 2.0,
                      "glibc <= 1 ulp + 1 ulp margin"))
    fns.append(Fn("__fdividef({a}, {b})", ("f32", "f32"), "f32",
                  lambda a, b: rnd(Fraction(a) / Fraction(b), "f32", "rn"),
                  [(a, b) for a, b in pairs32 if b]))
    fns.append(Fn("__saturatef({a})", ("f32",), "f32",
                  lambda a: 0.0 if math.isnan(a) else min(max(a, 0.0), 1.0),
                  [(a / 1000,) for a in F32] + [(math.nan,)]))
    return fns


def _pack2(v):
    return float(np.array(v, np.float32).view(np.float64)[0])


def _unpack2(d):
    return [float(x) for x in np.array([d], np.float64).view(np.float32)]


# ------------------------------------------------------------------------------------------------
# Type casting
# ------------------------------------------------------------------------------------------------
INT_KINDS = {"int": ("i32", 32, True), "uint": ("u32", 32, False), "ll": ("i64", 64, True),
             "ull": ("u64", 64, False)}


def casts():
    fns = []
    f32s = [(a / 7,) for a in F32] + [(1e12,), (-1e12,), (2.5,), (-2.5,), (0.5,), (-0.5,)]
    f64s = [(a / 7,) for a in F64] + [(1e30,), (-1e30,), (2.5,), (-3.5,), (0.5,)]
    for m in MODES:
        for iname, (k, bits, signed) in INT_KINDS.items():
            fns.append(Fn(f"__float2{iname}_{m}({{a}})", ("f32",), k,
                          lambda a, m=m, b=bits, s=signed: to_int(a, m, b, s), f32s))
            fns.append(Fn(f"__double2{iname}_{m}({{a}})", ("f64",), k,
                          lambda a, m=m, b=bits, s=signed: to_int(a, m, b, s), f64s))
        ints32 = [(int(v),) for v in RNG.integers(-2**31, 2**31, 30)] + [(16777217,), (-16777219,)]
        uints32 = [(int(v),) for v in RNG.integers(0, 2**32, 30)] + [(16777217,)]
        ints64 = [(int(v),) for v in RNG.integers(-2**63, 2**63, 30, dtype=np.int64)] + \
            [(2**53 + 1,), (-(2**53) - 3,)]
        uints64 = [(int(v),) for v in RNG.integers(0, 2**64, 30, dtype=np.uint64)] + \
            [(2**64 - 1,)]
        for src, k, xs in (("int", "i32", ints32), ("uint", "u32", uints32),
                           ("ll", "i64", ints64), ("ull", "u64", uints64)):
            fns.append(Fn(f"__{src}2float_{m}({{a}})", (k,), "f32",
                          lambda a, m=m: rnd(Fraction(a), "f32", m), xs))
            if src in ("ll", "ull"):
                fns.append(Fn(f"__{src}2double_{m}({{a}})", (k,), "f64",
                              lambda a, m=m: rnd(Fraction(a), "f64", m), xs))
        fns.append(Fn(f"__double2float_{m}({{a}})", ("f64",), "f32",
                      lambda a, m=m: rnd(Fraction(a), "f32", m),
                      [(a,) for a in F64] + [(1e300,), (-1e300,), (1e-320,)]))
    fns.append(Fn("__int2double_rn({a})", ("i32",), "f64", lambda a: float(a),
                  [(int(v),) for v in RNG.integers(-2**31, 2**31, 20)]))
    fns.append(Fn("__uint2double_rn({a})", ("u32",), "f64", lambda a: float(a),
                  [(int(v),) for v in RNG.integers(0, 2**32, 20)]))
    d = [(a,) for a in F64]
    fns.append(Fn("__double2hiint({a})", ("f64",), "i32",
                  lambda a: int(np.array([a]).view(np.int32)[1]), d))
    fns.append(Fn("__double2loint({a})", ("f64",), "i32",
                  lambda a: int(np.array([a]).view(np.int32)[0]), d))
    fns.append(Fn("__hiloint2double({a}, {b})", ("i32", "i32"), "f64",
                  lambda h, lo: float(np.array([lo, h], np.int32).view(np.float64)[0]),
                  [(int(np.array([a]).view(np.int32)[1]), int(np.array([a]).view(np.int32)[0]))
                   for (a,) in d]))
    fns.append(Fn("__float_as_int({a})", ("f32",), "i32",
                  lambda a: int(np.array([a], np.float32).view(np.int32)[0]), [(a,) for a in F32]))
    fns.append(Fn("__double_as_longlong({a})", ("f64",), "i64",
                  lambda a: int(np.array([a]).view(np.int64)[0]), d))
    return fns


# ------------------------------------------------------------------------------------------------
# Integer intrinsics and SIMD: bit for bit against the documented definitions
# ------------------------------------------------------------------------------------------------
U32 = [int(v) for v in RNG.integers(0, 2**32, 40, dtype=np.uint64)] + \
    [0, 0xffffffff, 0x80008000, 0x7fff7fff, 0x80808080, 0x7f7f7f7f, 0x00ff00ff, 1]


def s32(u):
    return u - (1 << 32) if u >= 1 << 31 else u


def lanes(u, w, signed):
    out = []
    for i in range(32 // w):
        v = (u >> (w * i)) & ((1 << w) - 1)
        out.append(v - (1 << w) if signed and v >> (w - 1) else v)
    return out


def pack(vals, w):
    r = 0
    for i, v in enumerate(vals):
        r |= (v & ((1 << w) - 1)) << (w * i)
    return r


def sat(v, w, signed):
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if signed else (0, (1 << w) - 1)
    return max(lo, min(hi, v))


def avg_away(a, b):
    t = a + b
    q = abs(t) // 2 + (abs(t) % 2)
    return q if t >= 0 else -q


SIMD = {  # name (without the lane suffix): (signed, arity, per-lane function)
    "abs": (True, 1, lambda x: abs(x)), "neg": (True, 1, lambda x: -x),
    "absss": (True, 1, lambda x, w: sat(abs(x), w, True)),
    "negss": (True, 1, lambda x, w: sat(-x, w, True)),
    "absdiffs": (True, 2, lambda x, y: abs(x - y)), "absdiffu": (False, 2, lambda x, y: abs(x - y)),
    "add": (False, 2, lambda x, y: x + y), "sub": (False, 2, lambda x, y: x - y),
    "addss": (True, 2, lambda x, y, w: sat(x + y, w, True)),
    "addus": (False, 2, lambda x, y, w: sat(x + y, w, False)),
    "subss": (True, 2, lambda x, y, w: sat(x - y, w, True)),
    "subus": (False, 2, lambda x, y, w: sat(x - y, w, False)),
    "avgs": (True, 2, avg_away), "avgu": (False, 2, lambda x, y: (x + y + 1) // 2),
    "haddu": (False, 2, lambda x, y: (x + y) // 2),
    "maxs": (True, 2, max), "maxu": (False, 2, max), "mins": (True, 2, min),
    "minu": (False, 2, min),
}
for _op, _f in (("eq", lambda x, y: x == y), ("ne", lambda x, y: x != y),
                ("ges", lambda x, y: x >= y), ("geu", lambda x, y: x >= y),
                ("gts", lambda x, y: x > y), ("gtu", lambda x, y: x > y),
                ("les", lambda x, y: x <= y), ("leu", lambda x, y: x <= y),
                ("lts", lambda x, y: x < y), ("ltu", lambda x, y: x < y)):
    _s = _op.endswith("s")
    SIMD["cmp" + _op] = (_s, 2, lambda x, y, f=_f: -1 if f(x, y) else 0)
    SIMD["set" + _op] = (_s, 2, lambda x, y, f=_f: 1 if f(x, y) else 0)


def _simd_ref(op, w):
    signed, arity, f = SIMD[op]
    code = getattr(f, "__code__", None)
    takes_w = code is not None and "w" in code.co_varnames[:code.co_argcount]

    def ref(*xs):
        ls = [lanes(x, w, signed) for x in xs]
        return pack([f(*v, w) if takes_w else f(*v) for v in zip(*ls)], w)
    return ref


def integer_and_simd():
    fns = []
    pairs = list(zip(U32, reversed(U32)))
    for op, (signed, arity, f) in SIMD.items():
        for w, suf in ((16, "2"), (8, "4")):
            args = ("u32",) * arity
            call = f"__v{op}{suf}(" + ", ".join("{" + v + "}" for v in "ab"[:arity]) + ")"
            xs = [(a,) for a in U32] if arity == 1 else pairs
            fns.append(Fn(call, args, "u32", _simd_ref(op, w), xs))
    for w, suf in ((16, "2"), (8, "4")):
        for sgn, name in ((True, "s"), (False, "u")):
            fns.append(Fn(f"__vsad{name}{suf}({{a}}, {{b}})", ("u32", "u32"), "u32",
                          lambda a, b, w=w, s=sgn: sum(abs(x - y) for x, y in zip(
                              lanes(a, w, s), lanes(b, w, s))), pairs))
    trip = list(zip(U32, reversed(U32), U32[3:] + U32[:3]))
    m32 = 0xffffffff
    for name, f in (("max", max), ("min", min)):
        fns.append(Fn(f"__vi{name}3_s32({{a}}, {{b}}, {{c}})", ("i32",) * 3, "i32",
                      lambda a, b, c, f=f: f(a, b, c), [tuple(map(s32, t)) for t in trip]))
        fns.append(Fn(f"__vi{name}3_u32({{a}}, {{b}}, {{c}})", ("u32",) * 3, "u32",
                      lambda a, b, c, f=f: f(a, b, c), trip))
        fns.append(Fn(f"__vi{name}3_s16x2_relu({{a}}, {{b}}, {{c}})", ("u32",) * 3, "u32",
                      lambda a, b, c, f=f: pack([max(f(*v), 0) for v in zip(
                          lanes(a, 16, True), lanes(b, 16, True), lanes(c, 16, True))], 16), trip))
        fns.append(Fn(f"__viadd{name}_s32({{a}}, {{b}}, {{c}})", ("i32",) * 3, "i32",
                      lambda a, b, c, f=f: f(s32((a + b) & m32), c),
                      [tuple(map(s32, t)) for t in trip]))
        fns.append(Fn(f"__viadd{name}_u16x2({{a}}, {{b}}, {{c}})", ("u32",) * 3, "u32",
                      lambda a, b, c, f=f: pack([f((x + y) & 0xffff, z) for x, y, z in zip(
                          lanes(a, 16, False), lanes(b, 16, False), lanes(c, 16, False))], 16),
                      trip))
    ip = [(s32(a), s32(b)) for a, b in pairs]
    fns += [
        Fn("__byte_perm({a}, {b}, {c})", ("u32",) * 3, "u32",
           lambda x, y, s: pack([((y << 32 | x) >> (8 * ((s >> (4 * i)) & 7))) & 0xff
                                 for i in range(4)], 8), trip),
        Fn("__brev({a})", ("u32",), "u32", lambda x: int(f"{x:032b}"[::-1], 2), [(a,) for a in U32]),
        Fn("__brevll({a})", ("u64",), "u64", lambda x: int(f"{x:064b}"[::-1], 2),
           [(a << 32 | b,) for a, b in pairs]),
        Fn("__funnelshift_l({a}, {b}, {c})", ("u32",) * 3, "u32",
           lambda lo, hi, s: (((hi << 32 | lo) << (s & 31)) >> 32) & m32,
           [(a, b, c % 64) for a, b, c in trip]),
        Fn("__funnelshift_lc({a}, {b}, {c})", ("u32",) * 3, "u32",
           lambda lo, hi, s: (((hi << 32 | lo) << min(s, 32)) >> 32) & m32,
           [(a, b, c % 64) for a, b, c in trip]),
        Fn("__funnelshift_r({a}, {b}, {c})", ("u32",) * 3, "u32",
           lambda lo, hi, s: ((hi << 32 | lo) >> (s & 31)) & m32,
           [(a, b, c % 64) for a, b, c in trip]),
        Fn("__funnelshift_rc({a}, {b}, {c})", ("u32",) * 3, "u32",
           lambda lo, hi, s: ((hi << 32 | lo) >> min(s, 32)) & m32,
           [(a, b, c % 64) for a, b, c in trip]),
        Fn("__hadd({a}, {b})", ("i32", "i32"), "i32", lambda x, y: (x + y) >> 1, ip),
        Fn("__rhadd({a}, {b})", ("i32", "i32"), "i32", lambda x, y: (x + y + 1) >> 1, ip),
        Fn("__uhadd({a}, {b})", ("u32", "u32"), "u32", lambda x, y: (x + y) >> 1, pairs),
        Fn("__urhadd({a}, {b})", ("u32", "u32"), "u32", lambda x, y: (x + y + 1) >> 1, pairs),
        Fn("__mulhi({a}, {b})", ("i32", "i32"), "i32", lambda x, y: (x * y) >> 32, ip),
        Fn("__umulhi({a}, {b})", ("u32", "u32"), "u32", lambda x, y: (x * y) >> 32, pairs),
        Fn("__mul64hi({a}, {b})", ("i64", "i64"), "i64", lambda x, y: (x * y) >> 64,
           [(s32(a) << 31, s32(b) << 29) for a, b in pairs]),
        Fn("__umul64hi({a}, {b})", ("u64", "u64"), "u64", lambda x, y: (x * y) >> 64,
           [(a << 32 | b, b << 32 | a) for a, b in pairs]),
        Fn("__sad({a}, {b}, {c})", ("i32", "i32", "u32"), "u32",
           lambda x, y, z: (abs(x - y) + z) & m32, [(s32(a), s32(b), c) for a, b, c in trip]),
        Fn("__usad({a}, {b}, {c})", ("u32",) * 3, "u32", lambda x, y, z: (abs(x - y) + z) & m32,
           trip),
        Fn("__dp4a({a}, {b}, {c})", ("i32",) * 3, "i32",
           lambda a, b, c: s32((c + sum(x * y for x, y in zip(lanes(a & m32, 8, True),
                                                               lanes(b & m32, 8, True)))) & m32),
           [tuple(map(s32, t)) for t in trip]),
        Fn("__dp4a({a}, {b}, {c})", ("u32",) * 3, "u32",
           lambda a, b, c: (c + sum(x * y for x, y in zip(lanes(a, 8, False),
                                                          lanes(b, 8, False)))) & m32, trip),
        Fn("__dp2a_lo({a}, {b}, {c})", ("i32",) * 3, "i32",
           lambda a, b, c: s32((c + sum(x * y for x, y in zip(lanes(a & m32, 16, True),
                                                               lanes(b & m32, 8, True)[:2]))) & m32),
           [tuple(map(s32, t)) for t in trip]),
        Fn("__dp2a_hi({a}, {b}, {c})", ("u32",) * 3, "u32",
           lambda a, b, c: (c + sum(x * y for x, y in zip(lanes(a, 16, False),
                                                          lanes(b, 8, False)[2:]))) & m32, trip),
        Fn("__fns({a}, {b}, {c})", ("u32", "u32", "i32"), "u32", _fns,
           [(a, b % 32, int(c % 7) - 3) for a, b, c in trip]),
        Fn("__popc({a})", ("u32",), "i32", lambda x: bin(x).count("1"), [(a,) for a in U32]),
        Fn("__clz({a})", ("i32",), "i32", lambda x: 32 - (x & m32).bit_length(),
           [(s32(a),) for a in U32]),
        Fn("__ffs({a})", ("i32",), "i32",
           lambda x: ((x & -x) & m32).bit_length() if x else 0, [(s32(a),) for a in U32]),
        Fn("__nv_bswap32({a})", ("u32",), "u32",
           lambda x: int.from_bytes(x.to_bytes(4, "little"), "big"), [(a,) for a in U32]),
    ]
    return fns


def _fns(mask, base, offset):
    if offset == 0:
        return base if mask >> base & 1 else 0xffffffff
    step = 1 if offset > 0 else -1
    count = abs(offset) - 1
    pos = base
    while 0 <= pos < 32:
        if mask >> pos & 1:
            if count == 0:
                return pos
            count -= 1
        pos += step
    return 0xffffffff


# ------------------------------------------------------------------------------------------------
# Half and bfloat16
# ------------------------------------------------------------------------------------------------
def halves():
    fns = []
    for fmt, H, P in (("f16", "half", "h"), ("bf16", "bfloat16", "b")):
        vals = [bits16(x, fmt) for x in F32B[:30]] + [bits16(v, fmt) for v in (0.5, -2.5, 1.0)]
        one = [(v,) for v in vals]
        trip = list(zip(vals, reversed(vals), vals[5:] + vals[:5]))
        rd = lambda b, fmt=fmt: from16(b, fmt)  # noqa: E731
        fns.append(Fn(f"__h{'' if fmt == 'f16' else ''}fma({{a}}, {{b}}, {{c}})", (fmt,) * 3,
                      fmt, lambda a, b, c, fmt=fmt, rd=rd: bits16(rnd(
                          Fraction(rd(a)) * Fraction(rd(b)) + Fraction(rd(c)), fmt, "rn"), fmt),
                      trip))
        fns.append(Fn("__hfma_sat({a}, {b}, {c})", (fmt,) * 3, fmt,
                      lambda a, b, c, fmt=fmt, rd=rd: bits16(min(max(rnd(
                          Fraction(rd(a)) * Fraction(rd(b)) + Fraction(rd(c)), fmt, "rn"), 0.0),
                          1.0), fmt), trip))
        for name, mp in (("hsqrt", mpmath.sqrt), ("hrsqrt", lambda v: 1 / mpmath.sqrt(v)),
                         ("hrcp", lambda v: 1 / v), ("hexp", mpmath.exp),
                         ("hexp2", lambda v: mpmath.power(2, v)), ("hlog", mpmath.log),
                         ("hlog2", lambda v: mpmath.log(v, 2)), ("hsin", mpmath.sin),
                         ("hcos", mpmath.cos), ("htanh", mpmath.tanh)):
            pos = name in ("hsqrt", "hrsqrt", "hlog", "hlog2", "hrcp")
            xs = [(bits16(abs(rd(v)) / 4 + 0.125 if pos else rd(v) / 4, fmt),) for v in vals]

            def ref(b, mp=mp, fmt=fmt, rd=rd):
                with mpmath.workprec(200):
                    return bits16(rnd(frac(mp(mpmath.mpf(rd(b)))), fmt, "rn"), fmt)
            fns.append(Fn(f"{name}({{a}})", (fmt,), fmt, ref, xs))
        for m in ("rn", "ru", "rd"):
            for iname, (k, bits, signed) in INT_KINDS.items():
                fns.append(Fn(f"__{H}2{iname}_{m}({{a}})", (fmt,), k,
                              lambda b, m=m, bits=bits, s=signed, rd=rd: to_int(rd(b), m, bits, s),
                              one))
        if fmt == "bf16":
            for m in ("rz", "ru", "rd"):
                fns.append(Fn(f"__int2bfloat16_{m}({{a}})", ("i32",), fmt,
                              lambda a, m=m: bits16(rnd(Fraction(a), "bf16", m), "bf16"),
                              [(int(v),) for v in RNG.integers(-10**6, 10**6, 30)]))
        fns.append(Fn("__hadd({a}, {b})", (fmt, fmt), fmt,
                      lambda a, b, fmt=fmt, rd=rd: bits16(rnd(Fraction(rd(a)) + Fraction(rd(b)),
                                                              fmt, "rn"), fmt),
                      list(zip(vals, reversed(vals)))))
        fns.append(Fn("__hmul({a}, {b})", (fmt, fmt), fmt,
                      lambda a, b, fmt=fmt, rd=rd: bits16(rnd(Fraction(rd(a)) * Fraction(rd(b)),
                                                              fmt, "rn"), fmt),
                      list(zip(vals, reversed(vals)))))
    return fns


# ------------------------------------------------------------------------------------------------
# Math functions (CUDA_MATH_SINGLE / _DOUBLE)
# ------------------------------------------------------------------------------------------------
def _mp(fn, fmt):
    def ref(*xs):
        with mpmath.workprec(300):
            try:
                v = fn(*[mpmath.mpf(x) for x in xs])
            except (ValueError, ZeroDivisionError):
                return math.nan
            if isinstance(v, mpmath.mpc):
                return math.nan
            return float(v) if abs(v) < 1e308 or mpmath.isinf(v) else math.inf
    return ref


#: name: (mpmath definition, input range, ulps allowed and where the bound comes from)
NC_MATH = {  # the functions normcheck computes itself (long double, one rounding: <= 0.5 ulp
    # + 2^-10 ulp of long-double error; 1 ulp allowed)
    "sinpi": (lambda x: mpmath.sinpi(x), (-8, 8)), "cospi": (lambda x: mpmath.cospi(x), (-8, 8)),
    "erfinv": (lambda x: mpmath.erfinv(x), (-0.999, 0.999)),
    "erfcinv": (lambda x: mpmath.erfinv(1 - x), (0.001, 1.999)),
    "erfcx": (lambda x: mpmath.exp(x * x) * mpmath.erfc(x), (-3, 40)),
    "normcdf": (lambda x: mpmath.ncdf(x), (-10, 10)),
    "normcdfinv": (lambda x: -mpmath.sqrt(2) * mpmath.erfinv(1 - 2 * x), (0.001, 0.999)),
    "cyl_bessel_i0": (lambda x: mpmath.besseli(0, x), (-40, 40)),
    "cyl_bessel_i1": (lambda x: mpmath.besseli(1, x), (-40, 40)),
    "rcbrt": (lambda x: 1 / mpmath.cbrt(x), (0.01, 1e6)),
}
LIBM = {  # glibc's (x86_64 libm-test-ulps: <= 2 ulp for these); 3 ulp allowed
    "sin": (mpmath.sin, (-10, 10)), "cos": (mpmath.cos, (-10, 10)),
    "tan": (mpmath.tan, (-1.5, 1.5)), "exp": (mpmath.exp, (-20, 20)),
    "exp2": (lambda x: mpmath.power(2, x), (-20, 20)), "exp10": (lambda x: mpmath.power(10, x),
                                                                   (-10, 10)),
    "expm1": (mpmath.expm1, (-5, 5)), "log": (mpmath.log, (0.01, 1e6)),
    "log2": (lambda x: mpmath.log(x, 2), (0.01, 1e6)), "log1p": (mpmath.log1p, (-0.5, 100)),
    "cbrt": (lambda x: mpmath.sign(x) * mpmath.cbrt(abs(x)), (-1e6, 1e6)),
    "erf": (mpmath.erf, (-4, 4)),
    "erfc": (mpmath.erfc, (-4, 9)), "atan": (mpmath.atan, (-100, 100)),
    "asinh": (mpmath.asinh, (-100, 100)), "tanh": (mpmath.tanh, (-10, 10)),
    "sqrt": (mpmath.sqrt, (0, 1e6)), "rsqrt": (lambda x: 1 / mpmath.sqrt(x), (0.01, 1e6)),
}


def math_functions():
    fns = []
    for table, tol, why in ((NC_MATH, 1.0, "long double + one rounding"),
                            (LIBM, 3.0, "glibc libm-test-ulps <= 2 ulp, + 1 ulp margin")):
        for name, (mp, (lo, hi)) in table.items():
            for fmt, suffix in (("f32", "f"), ("f64", "")):
                xs = [(float(np.dtype(NP[fmt]).type(v)),) for v in np.linspace(lo, hi, 37)]
                fns.append(Fn(f"{name}{suffix}({{a}})", (fmt,), fmt, _mp(mp, fmt), xs, tol, why))
    pts = [tuple(float(np.float32(v)) for v in RNG.standard_normal(3) * 10) for _ in range(20)]
    fns.append(Fn("rnorm3df({a}, {b}, {c})", ("f32",) * 3, "f32",
                  _mp(lambda a, b, c: 1 / mpmath.sqrt(a * a + b * b + c * c), "f32"), pts, 1.0))
    fns.append(Fn("norm3df({a}, {b}, {c})", ("f32",) * 3, "f32",
                  _mp(lambda a, b, c: mpmath.sqrt(a * a + b * b + c * c), "f32"), pts, 1.0))
    fns.append(Fn("rhypot({a}, {b})", ("f64", "f64"), "f64",
                  _mp(lambda a, b: 1 / mpmath.sqrt(a * a + b * b), "f64"),
                  [p[:2] for p in pts], 1.0))
    return fns


@pytest.mark.parametrize("family", [intrinsics, casts, integer_and_simd, halves, math_functions],
                         ids=lambda f: f.__name__)
def test_functions_compute_their_definitions(family):
    check(family())


def test_special_values_of_the_rounding_forms():
    # the documented corner cases of the _rz/_ru/_rd forms (crt/device_functions.h)
    fns = [Fn("__fadd_rz({a}, {b})", ("f32", "f32"), "f32", lambda a, b: 0.0, [(1.5, -1.5)]),
           Fn("__fadd_rd({a}, {b})", ("f32", "f32"), "f32", lambda a, b: -0.0, [(1.5, -1.5)]),
           Fn("__fmul_ru({a}, {b})", ("f32", "f32"), "f32", lambda a, b: math.inf,
              [(3e38, 3e38)]),
           Fn("__fmul_rz({a}, {b})", ("f32", "f32"), "f32", lambda a, b: f32(3.4028234663852886e38),
              [(3e38, 3e38)])]
    out = run_all(fns)
    assert [float(o[0]) for o in out] == [0.0, -0.0, math.inf, f32(3.4028234663852886e38)]
    assert math.copysign(1, float(out[1][0])) == -1  # x - x rounds to -0 toward -inf
