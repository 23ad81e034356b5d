// normcheck SIMT shim: the CUDA Math API and the device intrinsics, on the CPU.
//
// Every function of the sections of NVIDIA's Math API reference that a kernel can call, with its
// documented rounding (normcheck.backends.cpu.surface lists them from the CUDA headers in use and
// measures what compiles; tests/test_surface.py checks each against its definition):
//
//   * the _rn/_rz/_ru/_rd forms round as their names say, exactly: arithmetic is the host's IEEE
//     arithmetic run under the requested rounding mode (fesetround, with compiler barriers so no
//     operation is moved across the mode change); conversions round the exact value once
//     (round_exact below, or the hardware's conversion under the mode);
//   * the approximate intrinsics (__expf, __sinf, __fdividef, rsqrtf, hrsqrt, hexp, htanh_approx
//     ...) return the accurate value (glibc's, within 1-2 ulp of the exact one, or correctly
//     rounded where a correctly rounded one is cheap); the GPU's are within the bounds of the CUDA
//     Programming Guide's tables -- normcheck.backends.cpu.CPU_VS_GPU records the difference;
//   * float-to-integer conversions whose value is out of range, which CUDA leaves undefined,
//     saturate and take NaN to 0, as the PTX cvt instruction does.
//
// Sections (in the order of normcheck.backends.cpu.surface.SECTIONS): rounding machinery; single and
// double intrinsics; type casting; integer intrinsics; SIMD; single and double math beyond
// libm; integer math; half and bfloat16 beyond NVIDIA's host implementations; warp functions;
// atomics; loads, stores and address spaces; clusters and grid dependencies.
#pragma once

#include <cfenv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <math.h>

namespace ncsimt {
namespace rm {
// ------------------------------------------------------------------------------------------------
// Rounding modes
// ------------------------------------------------------------------------------------------------
enum Mode { RN = 0, RZ = 1, RU = 2, RD = 3 };
inline int fe(Mode m) { return m == RN ? FE_TONEAREST : m == RZ ? FE_TOWARDZERO : m == RU ? FE_UPWARD : FE_DOWNWARD; }

// The mode is changed for one operation: the operands pass through an opaque asm after the
// change, the result through another before the mode is restored, so the compiler (which
// assumes round-to-nearest without -frounding-math) cannot move the operation across either.
template <class T> inline void pin(T& v) { asm volatile("" : "+m"(v) : : "memory"); }
struct Guard {
  int old;
  explicit Guard(Mode m) : old(fegetround()) { fesetround(fe(m)); asm volatile("" ::: "memory"); }
  ~Guard() { asm volatile("" ::: "memory"); fesetround(old); }
};
template <class T, class F> inline T under(Mode m, F f) {
  Guard g(m);
  T r = f();
  pin(r);
  return r;
}
#define NC_OP2(T, MODE, a, b, OP) ::ncsimt::rm::under<T>(MODE, [&]() { T x_ = a, y_ = b; ::ncsimt::rm::pin(x_); ::ncsimt::rm::pin(y_); return (T)(x_ OP y_); })

template <class T> inline T add(Mode m, T a, T b) { return NC_OP2(T, m, a, b, +); }
template <class T> inline T sub(Mode m, T a, T b) { return NC_OP2(T, m, a, b, -); }
template <class T> inline T mul(Mode m, T a, T b) { return NC_OP2(T, m, a, b, *); }
template <class T> inline T div(Mode m, T a, T b) { return NC_OP2(T, m, a, b, /); }
inline float fma(Mode m, float a, float b, float c) {
  return under<float>(m, [&]() { float x = a, y = b, z = c; pin(x); pin(y); pin(z); return ::fmaf(x, y, z); });
}
inline double fma(Mode m, double a, double b, double c) {
  return under<double>(m, [&]() { double x = a, y = b, z = c; pin(x); pin(y); pin(z); return ::fma(x, y, z); });
}
inline float sqrt(Mode m, float a) {
  return under<float>(m, [&]() { float x = a; pin(x); return __builtin_sqrtf(x); });
}
inline double sqrt(Mode m, double a) {
  return under<double>(m, [&]() { double x = a; pin(x); return __builtin_sqrt(x); });
}

// round_exact: the exact value sign * mag * 2^exp rounded once to a binary format of precision P
// with normal exponents emin..emax (gradual underflow; overflow to inf, or to the largest finite
// value where the mode rounds toward zero), as a double (every such value is one for P <= 53).
// a binary floating-point format: precision (significand bits) and normal exponent range
struct Fmt { int P, emin, emax; };
constexpr Fmt kFLT{24, -126, 127}, kDBL{53, -1022, 1023}, kHALF{11, -14, 15}, kBF16{8, -126, 127};

inline double round_exact(bool neg, unsigned __int128 mag, int exp, Fmt f, Mode m) {
  const int P = f.P, emin = f.emin, emax = f.emax;
  if (mag == 0) return neg ? -0.0 : 0.0;
  unsigned long long hi = (unsigned long long)(mag >> 64), lo = (unsigned long long)mag;
  int top = hi ? 127 - __builtin_clzll(hi) : 63 - __builtin_clzll(lo);  // the highest set bit
  int e = top + exp;                          // the value's binade: 2^e <= |v| < 2^(e+1)
  int q = (e < emin ? emin : e) - (P - 1);    // the exponent of the result's quantum
  int shift = q - exp;                        // the low bits of mag that go
  unsigned __int128 kept = mag, rest = 0, halfbit = 0;
  if (shift >= 128) {
    kept = 0;
    rest = mag;
    halfbit = ~(unsigned __int128)0;          // below half a quantum, never at it
  } else if (shift > 0) {
    kept = mag >> shift;
    rest = mag - (kept << shift);
    halfbit = (unsigned __int128)1 << (shift - 1);
  } else {
    kept = mag << (-shift);
  }
  bool up = false;
  if (rest != 0) {
    switch (m) {
      case RN: up = rest > halfbit || (rest == halfbit && (kept & 1)); break;
      case RZ: up = false; break;
      case RU: up = !neg; break;
      case RD: up = neg; break;
    }
  }
  if (up) ++kept;
  double v = std::ldexp((double)(unsigned long long)kept, q);  // kept <= 2^P: exact
  double maxv = std::ldexp(2.0 - std::ldexp(1.0, 1 - P), emax);
  if (v > maxv) {
    bool to_inf = m == RN || (m == RU && !neg) || (m == RD && neg);
    v = to_inf ? HUGE_VAL : maxv;
  }
  return neg ? -v : v;
}
// the exact value of a finite double as (neg, mag, exp)
inline void decompose(double x, bool& neg, unsigned __int128& mag, int& exp) {
  neg = std::signbit(x);
  int e;
  double f = std::frexp(std::fabs(x), &e);
  mag = (unsigned __int128)(unsigned long long)std::ldexp(f, 53);
  exp = e - 53;
}
// a double, rounded to precision P / exponents emin..emax (NaN and inf pass through)
inline double round_to(double x, Fmt f, Mode m) {
  if (!std::isfinite(x)) return x;
  bool neg; unsigned __int128 mag; int exp;
  decompose(x, neg, mag, exp);
  return round_exact(neg, mag, exp, f, m);
}
inline double from_ll(long long v, Fmt f, Mode m) {
  bool neg = v < 0;
  unsigned long long mag = neg ? 0ull - (unsigned long long)v : (unsigned long long)v;
  return round_exact(neg, mag, 0, f, m);
}
inline double from_ull(unsigned long long v, Fmt f, Mode m) { return round_exact(false, v, 0, f, m); }
// float or double to an integer type, rounded per the mode; out of range saturates, NaN gives 0
template <class I> inline I to_int(double x, Mode m) {
  if (std::isnan(x)) return 0;
  double r = m == RN ? std::nearbyint(x) : m == RZ ? std::trunc(x) : m == RU ? std::ceil(x) : std::floor(x);
  const double lo = (double)std::numeric_limits<I>::min();
  const double hi_excl = std::ldexp(1.0, std::numeric_limits<I>::digits);  // 2^31, 2^32, 2^63 ...
  if (r < lo) return std::numeric_limits<I>::min();
  if (r >= hi_excl) return std::numeric_limits<I>::max();
  return (I)r;
}
}  // namespace rm
}  // namespace ncsimt

#define NC_FLT ::ncsimt::rm::kFLT
#define NC_DBL ::ncsimt::rm::kDBL
#define NC_HALF ::ncsimt::rm::kHALF
#define NC_BF16 ::ncsimt::rm::kBF16
#define NC_M(m) ::ncsimt::rm::m

// ------------------------------------------------------------------------------------------------
// Single- and double-precision intrinsics (CUDA_MATH_INTRINSIC_SINGLE / _DOUBLE)
// ------------------------------------------------------------------------------------------------
#define NC_ARITH(NAME, T, FN, M) inline T NAME(T a, T b) { return ::ncsimt::rm::FN(NC_M(M), a, b); }
#define NC_ARITH4(PREFIX, T, FN) NC_ARITH(PREFIX##_rn, T, FN, RN) NC_ARITH(PREFIX##_rz, T, FN, RZ) NC_ARITH(PREFIX##_ru, T, FN, RU) NC_ARITH(PREFIX##_rd, T, FN, RD)
#define NC_ARITH3(PREFIX, T, FN) NC_ARITH(PREFIX##_rz, T, FN, RZ) NC_ARITH(PREFIX##_ru, T, FN, RU) NC_ARITH(PREFIX##_rd, T, FN, RD)
NC_ARITH4(__fadd, float, add)
NC_ARITH4(__fsub, float, sub)
NC_ARITH4(__fmul, float, mul)
NC_ARITH4(__fdiv, float, div)
NC_ARITH4(__dadd, double, add)
NC_ARITH4(__dsub, double, sub)
NC_ARITH4(__dmul, double, mul)
NC_ARITH4(__ddiv, double, div)
#define NC_UNARY(NAME, T, EXPR, M) inline T NAME(T a) { return EXPR; }
NC_UNARY(__frcp_rn, float, ::ncsimt::rm::div(NC_M(RN), 1.0f, a), RN)
NC_UNARY(__frcp_rz, float, ::ncsimt::rm::div(NC_M(RZ), 1.0f, a), RZ)
NC_UNARY(__frcp_ru, float, ::ncsimt::rm::div(NC_M(RU), 1.0f, a), RU)
NC_UNARY(__frcp_rd, float, ::ncsimt::rm::div(NC_M(RD), 1.0f, a), RD)
NC_UNARY(__drcp_rn, double, ::ncsimt::rm::div(NC_M(RN), 1.0, a), RN)
NC_UNARY(__drcp_rz, double, ::ncsimt::rm::div(NC_M(RZ), 1.0, a), RZ)
NC_UNARY(__drcp_ru, double, ::ncsimt::rm::div(NC_M(RU), 1.0, a), RU)
NC_UNARY(__drcp_rd, double, ::ncsimt::rm::div(NC_M(RD), 1.0, a), RD)
NC_UNARY(__fsqrt_rn, float, ::ncsimt::rm::sqrt(NC_M(RN), a), RN)
NC_UNARY(__fsqrt_rz, float, ::ncsimt::rm::sqrt(NC_M(RZ), a), RZ)
NC_UNARY(__fsqrt_ru, float, ::ncsimt::rm::sqrt(NC_M(RU), a), RU)
NC_UNARY(__fsqrt_rd, float, ::ncsimt::rm::sqrt(NC_M(RD), a), RD)
NC_UNARY(__dsqrt_rn, double, ::ncsimt::rm::sqrt(NC_M(RN), a), RN)
NC_UNARY(__dsqrt_rz, double, ::ncsimt::rm::sqrt(NC_M(RZ), a), RZ)
NC_UNARY(__dsqrt_ru, double, ::ncsimt::rm::sqrt(NC_M(RU), a), RU)
NC_UNARY(__dsqrt_rd, double, ::ncsimt::rm::sqrt(NC_M(RD), a), RD)
#define NC_FMA(NAME, T, M) inline T NAME(T a, T b, T c) { return ::ncsimt::rm::fma(NC_M(M), a, b, c); }
NC_FMA(__fmaf_rn, float, RN) NC_FMA(__fmaf_rz, float, RZ) NC_FMA(__fmaf_ru, float, RU) NC_FMA(__fmaf_rd, float, RD)
NC_FMA(__fmaf_ieee_rn, float, RN) NC_FMA(__fmaf_ieee_rz, float, RZ) NC_FMA(__fmaf_ieee_ru, float, RU) NC_FMA(__fmaf_ieee_rd, float, RD)
NC_FMA(__fma_rn, double, RN) NC_FMA(__fma_rz, double, RZ) NC_FMA(__fma_ru, double, RU) NC_FMA(__fma_rd, double, RD)
// the float2 forms (sm_100): two lanes, each rounded as the scalar form
#define NC_F2(NAME, FN, M) inline float2 NAME(float2 a, float2 b) { return make_float2(::ncsimt::rm::FN(NC_M(M), a.x, b.x), ::ncsimt::rm::FN(NC_M(M), a.y, b.y)); }
NC_F2(__fadd2_rn, add, RN) NC_F2(__fadd2_rz, add, RZ) NC_F2(__fadd2_ru, add, RU) NC_F2(__fadd2_rd, add, RD)
NC_F2(__fmul2_rn, mul, RN) NC_F2(__fmul2_rz, mul, RZ) NC_F2(__fmul2_ru, mul, RU) NC_F2(__fmul2_rd, mul, RD)
#define NC_FF2(NAME, M) inline float2 NAME(float2 a, float2 b, float2 c) { return make_float2(::ncsimt::rm::fma(NC_M(M), a.x, b.x, c.x), ::ncsimt::rm::fma(NC_M(M), a.y, b.y, c.y)); }
NC_FF2(__ffma2_rn, RN) NC_FF2(__ffma2_rz, RZ) NC_FF2(__ffma2_ru, RU) NC_FF2(__ffma2_rd, RD)
#undef NC_F2
#undef NC_FF2
inline float __frsqrt_rn(float x);  // in normcheck_simt.h (correctly rounded)
inline float __fdividef(float a, float b) { return a / b; }  // GPU: approximate (2 ulp)
inline float __expf(float x) { return expf(x); }             // GPU: approximate
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __saturatef(float x) { return x != x ? 0.0f : (x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x)); }
// sin(2πx), cos(2πx): exact argument reduction in double, then the double functions
inline double nc_sin2pi(double x) { double r = std::remainder(x, 1.0); return std::sin(2.0 * M_PI * r); }
inline double nc_cos2pi(double x) { double r = std::remainder(x, 1.0); return std::cos(2.0 * M_PI * r); }
inline float __sin2pif(float x) { return (float)nc_sin2pi(x); }
inline float __cos2pif(float x) { return (float)nc_cos2pi(x); }
inline void __sincos2pif(float x, float* s, float* c) { *s = __sin2pif(x); *c = __cos2pif(x); }

// ------------------------------------------------------------------------------------------------
// Type casting (CUDA_MATH_INTRINSIC_CAST)
// ------------------------------------------------------------------------------------------------
#define NC_F2I(SRC, SNAME, DST, DNAME)                                                          \
  inline DST __##SNAME##2##DNAME##_rn(SRC x) { return ::ncsimt::rm::to_int<DST>(x, NC_M(RN)); } \
  inline DST __##SNAME##2##DNAME##_rz(SRC x) { return ::ncsimt::rm::to_int<DST>(x, NC_M(RZ)); } \
  inline DST __##SNAME##2##DNAME##_ru(SRC x) { return ::ncsimt::rm::to_int<DST>(x, NC_M(RU)); } \
  inline DST __##SNAME##2##DNAME##_rd(SRC x) { return ::ncsimt::rm::to_int<DST>(x, NC_M(RD)); }
NC_F2I(float, float, int, int)
NC_F2I(float, float, unsigned int, uint)
NC_F2I(float, float, long long int, ll)
NC_F2I(float, float, unsigned long long int, ull)
NC_F2I(double, double, int, int)
NC_F2I(double, double, unsigned int, uint)
NC_F2I(double, double, long long int, ll)
NC_F2I(double, double, unsigned long long int, ull)
#undef NC_F2I
#define NC_I2F(SRC, SNAME, CONV, DST, DNAME, FMT, M, SUF) \
  inline DST __##SNAME##2##DNAME##_##SUF(SRC x) { return (DST)::ncsimt::rm::CONV(x, FMT, NC_M(M)); }
#define NC_I2F4(SRC, SNAME, CONV, DST, DNAME, FMT)                                       \
  NC_I2F(SRC, SNAME, CONV, DST, DNAME, FMT, RN, rn) NC_I2F(SRC, SNAME, CONV, DST, DNAME, FMT, RZ, rz) \
  NC_I2F(SRC, SNAME, CONV, DST, DNAME, FMT, RU, ru) NC_I2F(SRC, SNAME, CONV, DST, DNAME, FMT, RD, rd)
NC_I2F4(int, int, from_ll, float, float, NC_FLT)
NC_I2F4(unsigned int, uint, from_ull, float, float, NC_FLT)
NC_I2F4(long long int, ll, from_ll, float, float, NC_FLT)
NC_I2F4(unsigned long long int, ull, from_ull, float, float, NC_FLT)
NC_I2F4(long long int, ll, from_ll, double, double, NC_DBL)
NC_I2F4(unsigned long long int, ull, from_ull, double, double, NC_DBL)
#undef NC_I2F4
#undef NC_I2F
inline double __int2double_rn(int x) { return (double)x; }
inline double __uint2double_rn(unsigned int x) { return (double)x; }
#define NC_D2F(M, SUF) inline float __double2float_##SUF(double x) { return (float)::ncsimt::rm::round_to(x, NC_FLT, NC_M(M)); }
NC_D2F(RN, rn) NC_D2F(RZ, rz) NC_D2F(RU, ru) NC_D2F(RD, rd)
#undef NC_D2F
inline int __double2hiint(double x) { long long b; std::memcpy(&b, &x, 8); return (int)(b >> 32); }
inline int __double2loint(double x) { long long b; std::memcpy(&b, &x, 8); return (int)(unsigned)(b & 0xffffffffll); }
inline double __hiloint2double(int hi, int lo) {
  unsigned long long b = ((unsigned long long)(unsigned)hi << 32) | (unsigned)lo;
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline double __longlong_as_double(long long i) { double f; std::memcpy(&f, &i, 8); return f; }
inline long long __double_as_longlong(double f) { long long i; std::memcpy(&i, &f, 8); return i; }

// ------------------------------------------------------------------------------------------------
// Integer intrinsics (CUDA_MATH_INTRINSIC_INT)
// ------------------------------------------------------------------------------------------------
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}
inline unsigned long long __brevll(unsigned long long x) {
  return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  unsigned long long src = ((unsigned long long)y << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((src >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
inline int __hadd(int x, int y) { return (int)(((long long)x + y) >> 1); }
inline int __rhadd(int x, int y) { return (int)(((long long)x + y + 1) >> 1); }
inline unsigned __uhadd(unsigned x, unsigned y) { return (unsigned)(((unsigned long long)x + y) >> 1); }
inline unsigned __urhadd(unsigned x, unsigned y) { return (unsigned)(((unsigned long long)x + y + 1) >> 1); }
inline int __mul24(int a, int b) { return (int)((long long)((a << 8) >> 8) * ((b << 8) >> 8)); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline unsigned __sad(int x, int y, unsigned z) { return z + (unsigned)(x > y ? (long long)x - y : (long long)y - x); }
inline unsigned __usad(unsigned x, unsigned y, unsigned z) { return z + (x > y ? x - y : y - x); }
inline unsigned short __nv_bswap16(unsigned short x) { return __builtin_bswap16(x); }
inline unsigned __nv_bswap32(unsigned x) { return __builtin_bswap32(x); }
inline unsigned long long __nv_bswap64(unsigned long long x) { return __builtin_bswap64(x); }
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return (unsigned)((v << (shift & 31)) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned shift) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return shift >= 32 ? lo : (unsigned)((v << shift) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return (unsigned)(v >> (shift & 31));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned shift) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return shift >= 32 ? hi : (unsigned)(v >> shift);
}
// the PTX fns instruction: the position of the n-th set bit of mask from base (0xffffffff if none)
inline unsigned __fns(unsigned mask, unsigned base, int offset) {
  if (offset == 0) return (base < 32 && (mask >> base & 1u)) ? base : 0xffffffffu;
  int inc = offset > 0 ? 1 : -1;
  int count = (offset > 0 ? offset : -offset) - 1;
  for (int pos = (int)base; pos >= 0 && pos < 32; pos += inc)
    if (mask >> pos & 1u) {
      if (count == 0) return (unsigned)pos;
      --count;
    }
  return 0xffffffffu;
}
namespace ncsimt {
inline int sbyte(unsigned v, int i) { return (int)(signed char)(v >> (8 * i)); }
inline int ubyte(unsigned v, int i) { return (int)((v >> (8 * i)) & 0xff); }
inline int shalf(unsigned v, int i) { return (int)(short)(v >> (16 * i)); }
inline int uhalf(unsigned v, int i) { return (int)((v >> (16 * i)) & 0xffff); }
template <class V> inline unsigned bits(V v) { unsigned u; std::memcpy(&u, &v, 4); return u; }
}  // namespace ncsimt
inline int __dp4a(int a, int b, int c) {
  using namespace ::ncsimt;
  unsigned ua = (unsigned)a, ub = (unsigned)b;
  return (int)((unsigned)c + (unsigned)(sbyte(ua, 0) * sbyte(ub, 0) + sbyte(ua, 1) * sbyte(ub, 1) +
                                        sbyte(ua, 2) * sbyte(ub, 2) + sbyte(ua, 3) * sbyte(ub, 3)));
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
  using namespace ::ncsimt;
  return c + (unsigned)(ubyte(a, 0) * ubyte(b, 0) + ubyte(a, 1) * ubyte(b, 1) + ubyte(a, 2) * ubyte(b, 2) +
                        ubyte(a, 3) * ubyte(b, 3));
}
inline int __dp4a(char4 a, char4 b, int c) { return __dp4a((int)::ncsimt::bits(a), (int)::ncsimt::bits(b), c); }
inline unsigned __dp4a(uchar4 a, uchar4 b, unsigned c) { return __dp4a(::ncsimt::bits(a), ::ncsimt::bits(b), c); }
#define NC_DP2A(NAME, K)                                                                            \
  inline int NAME(int a, int b, int c) {                                                           \
    using namespace ::ncsimt;                                                                      \
    return (int)((unsigned)c + (unsigned)(shalf((unsigned)a, 0) * sbyte((unsigned)b, K) +          \
                                          shalf((unsigned)a, 1) * sbyte((unsigned)b, K + 1)));     \
  }                                                                                                \
  inline unsigned NAME(unsigned a, unsigned b, unsigned c) {                                       \
    using namespace ::ncsimt;                                                                      \
    return c + (unsigned)(uhalf(a, 0) * ubyte(b, K) + uhalf(a, 1) * ubyte(b, K + 1));              \
  }                                                                                                \
  inline int NAME(short2 a, char4 b, int c) { return NAME((int)::ncsimt::bits(a), (int)::ncsimt::bits(b), c); } \
  inline unsigned NAME(ushort2 a, uchar4 b, unsigned c) { return NAME(::ncsimt::bits(a), ::ncsimt::bits(b), c); }
NC_DP2A(__dp2a_lo, 0)
NC_DP2A(__dp2a_hi, 2)
#undef NC_DP2A

// ------------------------------------------------------------------------------------------------
// SIMD intrinsics (CUDA_MATH_INTRINSIC_SIMD): per-halfword (…2, …s16x2) or per-byte (…4) lanes
// of a 32-bit word; s/u: lanes read as signed or unsigned; ss/us: saturated to the lane's range
// ------------------------------------------------------------------------------------------------
namespace ncsimt {
namespace simd {
template <int W> inline long long lane(unsigned v, int i, bool s) {
  unsigned long long m = (1ull << W) - 1, u = (v >> (W * i)) & m;
  return s && (u >> (W - 1)) ? (long long)u - (1ll << W) : (long long)u;
}
template <int W> inline long long sat(long long x, bool s) {
  long long lo = s ? -(1ll << (W - 1)) : 0, hi = s ? (1ll << (W - 1)) - 1 : (1ll << W) - 1;
  return x < lo ? lo : (x > hi ? hi : x);
}
template <int W, class F> inline unsigned map1(unsigned a, bool s, F f) {
  unsigned r = 0;
  for (int i = 0; i < 32 / W; ++i) r |= (unsigned)((unsigned long long)f(lane<W>(a, i, s)) & ((1ull << W) - 1)) << (W * i);
  return r;
}
template <int W, class F> inline unsigned map2(unsigned a, unsigned b, bool s, F f) {
  unsigned r = 0;
  for (int i = 0; i < 32 / W; ++i)
    r |= (unsigned)((unsigned long long)f(lane<W>(a, i, s), lane<W>(b, i, s)) & ((1ull << W) - 1)) << (W * i);
  return r;
}
template <int W, class F> inline unsigned map3(unsigned a, unsigned b, unsigned c, bool s, F f) {
  unsigned r = 0;
  for (int i = 0; i < 32 / W; ++i)
    r |= (unsigned)((unsigned long long)f(lane<W>(a, i, s), lane<W>(b, i, s), lane<W>(c, i, s)) & ((1ull << W) - 1)) << (W * i);
  return r;
}
template <int W> inline unsigned sum_absdiff(unsigned a, unsigned b, bool s) {
  long long t = 0;
  for (int i = 0; i < 32 / W; ++i) { long long d = lane<W>(a, i, s) - lane<W>(b, i, s); t += d < 0 ? -d : d; }
  return (unsigned)t;
}
inline long long mx(long long a, long long b) { return a > b ? a : b; }
inline long long mn(long long a, long long b) { return a < b ? a : b; }
// average with ties rounded away from zero (signed) or upward (unsigned, `round`), or toward zero
inline long long avg(long long a, long long b, bool round) {
  long long t = a + b;
  if (!round) return t >= 0 ? t / 2 : -((-t) / 2);
  return t >= 0 ? (t + 1) / 2 : -((-t + 1) / 2);
}
}  // namespace simd
}  // namespace ncsimt
#define NC_V1(NAME, W, S, EXPR) inline unsigned NAME(unsigned a) { using namespace ::ncsimt::simd; return map1<W>(a, S, [](long long x) { return (long long)(EXPR); }); }
#define NC_V2(NAME, W, S, EXPR) inline unsigned NAME(unsigned a, unsigned b) { using namespace ::ncsimt::simd; return map2<W>(a, b, S, [](long long x, long long y) { return (long long)(EXPR); }); }
#define NC_V3(NAME, W, S, EXPR) inline unsigned NAME(unsigned a, unsigned b, unsigned c) { using namespace ::ncsimt::simd; return map3<W>(a, b, c, S, [](long long x, long long y, long long z) { return (long long)(EXPR); }); }
#define NC_VBOTH(SUFFIX2, SUFFIX4, KIND, S, EXPR) KIND(__v##SUFFIX2, 16, S, EXPR) KIND(__v##SUFFIX4, 8, S, EXPR)
NC_VBOTH(abs2, abs4, NC_V1, true, x < 0 ? -x : x)
NC_V1(__vabsss2, 16, true, sat<16>(x < 0 ? -x : x, true)) NC_V1(__vabsss4, 8, true, sat<8>(x < 0 ? -x : x, true))
NC_VBOTH(neg2, neg4, NC_V1, true, -x)
NC_V1(__vnegss2, 16, true, sat<16>(-x, true)) NC_V1(__vnegss4, 8, true, sat<8>(-x, true))
NC_VBOTH(absdiffs2, absdiffs4, NC_V2, true, x > y ? x - y : y - x)
NC_VBOTH(absdiffu2, absdiffu4, NC_V2, false, x > y ? x - y : y - x)
NC_VBOTH(add2, add4, NC_V2, false, x + y)
NC_VBOTH(sub2, sub4, NC_V2, false, x - y)
NC_V2(__vaddss2, 16, true, sat<16>(x + y, true)) NC_V2(__vaddss4, 8, true, sat<8>(x + y, true))
NC_V2(__vaddus2, 16, false, sat<16>(x + y, false)) NC_V2(__vaddus4, 8, false, sat<8>(x + y, false))
NC_V2(__vsubss2, 16, true, sat<16>(x - y, true)) NC_V2(__vsubss4, 8, true, sat<8>(x - y, true))
NC_V2(__vsubus2, 16, false, sat<16>(x - y, false)) NC_V2(__vsubus4, 8, false, sat<8>(x - y, false))
NC_VBOTH(avgs2, avgs4, NC_V2, true, avg(x, y, true))
NC_VBOTH(avgu2, avgu4, NC_V2, false, avg(x, y, true))
NC_VBOTH(haddu2, haddu4, NC_V2, false, avg(x, y, false))
NC_VBOTH(maxs2, maxs4, NC_V2, true, mx(x, y))
NC_VBOTH(maxu2, maxu4, NC_V2, false, mx(x, y))
NC_VBOTH(mins2, mins4, NC_V2, true, mn(x, y))
NC_VBOTH(minu2, minu4, NC_V2, false, mn(x, y))
#define NC_VCMP(OP, NAME, S) \
  NC_V2(__vcmp##NAME##2, 16, S, (x OP y) ? -1 : 0) NC_V2(__vcmp##NAME##4, 8, S, (x OP y) ? -1 : 0) \
  NC_V2(__vset##NAME##2, 16, S, (x OP y) ? 1 : 0) NC_V2(__vset##NAME##4, 8, S, (x OP y) ? 1 : 0)
NC_VCMP(==, eq, false) NC_VCMP(!=, ne, false)
NC_VCMP(>=, ges, true) NC_VCMP(>=, geu, false) NC_VCMP(>, gts, true) NC_VCMP(>, gtu, false)
NC_VCMP(<=, les, true) NC_VCMP(<=, leu, false) NC_VCMP(<, lts, true) NC_VCMP(<, ltu, false)
#undef NC_VCMP
inline unsigned __vsads2(unsigned a, unsigned b) { return ::ncsimt::simd::sum_absdiff<16>(a, b, true); }
inline unsigned __vsads4(unsigned a, unsigned b) { return ::ncsimt::simd::sum_absdiff<8>(a, b, true); }
inline unsigned __vsadu2(unsigned a, unsigned b) { return ::ncsimt::simd::sum_absdiff<16>(a, b, false); }
inline unsigned __vsadu4(unsigned a, unsigned b) { return ::ncsimt::simd::sum_absdiff<8>(a, b, false); }
// the sm_90-era forms: 32-bit or 16x2 lanes, max/min of two or three, with an add before or a
// ReLU after (the add wraps around, as the doc says)
inline int __vimax_s32_relu(int a, int b) { long long m = a > b ? a : b; return (int)(m > 0 ? m : 0); }
inline int __vimin_s32_relu(int a, int b) { long long m = a < b ? a : b; return (int)(m > 0 ? m : 0); }
NC_V2(__vimax_s16x2_relu, 16, true, mx(mx(x, y), 0)) NC_V2(__vimin_s16x2_relu, 16, true, mx(mn(x, y), 0))
inline int __vimax3_s32(int a, int b, int c) { return std::max(std::max(a, b), c); }
inline int __vimin3_s32(int a, int b, int c) { return std::min(std::min(a, b), c); }
inline int __vimax3_s32_relu(int a, int b, int c) { return std::max(std::max(std::max(a, b), c), 0); }
inline int __vimin3_s32_relu(int a, int b, int c) { return std::max(std::min(std::min(a, b), c), 0); }
inline unsigned __vimax3_u32(unsigned a, unsigned b, unsigned c) { return std::max(std::max(a, b), c); }
inline unsigned __vimin3_u32(unsigned a, unsigned b, unsigned c) { return std::min(std::min(a, b), c); }
NC_V3(__vimax3_s16x2, 16, true, mx(mx(x, y), z)) NC_V3(__vimin3_s16x2, 16, true, mn(mn(x, y), z))
NC_V3(__vimax3_s16x2_relu, 16, true, mx(mx(mx(x, y), z), 0)) NC_V3(__vimin3_s16x2_relu, 16, true, mx(mn(mn(x, y), z), 0))
NC_V3(__vimax3_u16x2, 16, false, mx(mx(x, y), z)) NC_V3(__vimin3_u16x2, 16, false, mn(mn(x, y), z))
inline int __viaddmax_s32(int a, int b, int c) { int s = (int)((unsigned)a + (unsigned)b); return std::max(s, c); }
inline int __viaddmin_s32(int a, int b, int c) { int s = (int)((unsigned)a + (unsigned)b); return std::min(s, c); }
inline int __viaddmax_s32_relu(int a, int b, int c) { return std::max(__viaddmax_s32(a, b, c), 0); }
inline int __viaddmin_s32_relu(int a, int b, int c) { return std::max(__viaddmin_s32(a, b, c), 0); }
inline unsigned __viaddmax_u32(unsigned a, unsigned b, unsigned c) { return std::max(a + b, c); }
inline unsigned __viaddmin_u32(unsigned a, unsigned b, unsigned c) { return std::min(a + b, c); }
NC_V3(__viaddmax_s16x2, 16, true, mx((long long)(short)(x + y), z)) NC_V3(__viaddmin_s16x2, 16, true, mn((long long)(short)(x + y), z))
NC_V3(__viaddmax_s16x2_relu, 16, true, mx(mx((long long)(short)(x + y), z), 0))
NC_V3(__viaddmin_s16x2_relu, 16, true, mx(mn((long long)(short)(x + y), z), 0))
NC_V3(__viaddmax_u16x2, 16, false, mx((x + y) & 0xffff, z)) NC_V3(__viaddmin_u16x2, 16, false, mn((x + y) & 0xffff, z))
inline int __vibmax_s32(int a, int b, bool* pred) { *pred = a >= b; return a >= b ? a : b; }
inline int __vibmin_s32(int a, int b, bool* pred) { *pred = a <= b; return a <= b ? a : b; }
inline unsigned __vibmax_u32(unsigned a, unsigned b, bool* pred) { *pred = a >= b; return a >= b ? a : b; }
inline unsigned __vibmin_u32(unsigned a, unsigned b, bool* pred) { *pred = a <= b; return a <= b ? a : b; }
#define NC_VIB(NAME, S, OP)                                                                      \
  inline unsigned NAME(unsigned a, unsigned b, bool* pred_hi, bool* pred_lo) {                  \
    using namespace ::ncsimt::simd;                                                             \
    long long a0 = lane<16>(a, 0, S), b0 = lane<16>(b, 0, S), a1 = lane<16>(a, 1, S), b1 = lane<16>(b, 1, S); \
    *pred_lo = a0 OP b0;                                                                        \
    *pred_hi = a1 OP b1;                                                                        \
    return (unsigned)((*pred_lo ? a0 : b0) & 0xffff) | ((unsigned)((*pred_hi ? a1 : b1) & 0xffff) << 16); \
  }
NC_VIB(__vibmax_s16x2, true, >=) NC_VIB(__vibmin_s16x2, true, <=)
NC_VIB(__vibmax_u16x2, false, >=) NC_VIB(__vibmin_u16x2, false, <=)
#undef NC_VIB
#undef NC_V1
#undef NC_V2
#undef NC_V3
#undef NC_VBOTH

// ------------------------------------------------------------------------------------------------
// Single- and double-precision math beyond the C library (CUDA_MATH_SINGLE / _DOUBLE): computed
// in long double (64-bit significand) and rounded once to the result's format, so within one ulp
// of the exact value -- as accurate as or more accurate than the GPU's documented bounds
// ------------------------------------------------------------------------------------------------
namespace ncsimt {
namespace m {
typedef long double L;
const L PI = 3.141592653589793238462643383279502884L;
// sin(πx) and cos(πx) with exact argument reduction; exact zeros and ones where IEEE sinPi and
// cosPi have them (sinpi(n) = +0 for integers n > 0, cospi(n + ½) = +0)
inline L sinpi(L x) {
  if (std::isinf(x) || std::isnan(x)) return NAN;
  L r = std::fmod(x, 2.0L);             // exact, sign of x
  if (r == 0) return x < 0 || (x == 0 && std::signbit(x)) ? -0.0L : 0.0L;
  L s = r < 0 ? -1.0L : 1.0L;
  L a = std::fabs(r);                   // (0, 2)
  if (a > 1) { a -= 1; s = -s; }        // sin(π(a+1)) = -sin(πa)
  if (a > 0.5L) a = 1 - a;              // exact
  if (a == 0) return 0.0L;              // an integer: +0
  return s * (a == 0.5L ? 1.0L : std::sin(PI * a));
}
inline L cospi(L x) {
  if (std::isinf(x) || std::isnan(x)) return NAN;
  L a = std::fabs(std::fmod(x, 2.0L));  // [0, 2)
  if (a > 1) a = 2 - a;                 // cos is even around π
  L s = 1;
  if (a > 0.5L) { a = 1 - a; s = -1; }  // cos(π(1-a)) = -cos(πa)
  if (a == 0.5L) return 0.0L;
  return s * (a <= 0.25L ? std::cos(PI * a) : std::sin(PI * (0.5L - a)));
}
// erf⁻¹ and erfc⁻¹: Newton's method on erf / erfc in long double from a rough start
inline L erfcinv(L y) {
  if (std::isnan(y) || y < 0 || y > 2) return NAN;
  if (y == 0) return INFINITY;
  if (y == 2) return -INFINITY;
  if (y == 1) return 0;
  bool neg = y > 1;
  L t = neg ? 2 - y : y;                // (0, 1): x >= 0
  L x = std::sqrt(-std::log(t / 2));    // a start above the root for small t
  if (t > 0.5L) x = (1 - t) * std::sqrt(PI) / 2;
  for (int i = 0; i < 100; ++i) {
    L f = std::erfc(x) - t;
    L d = -2 / std::sqrt(PI) * std::exp(-x * x);
    if (d == 0) break;
    L step = f / d;
    x -= step;
    if (std::fabs(step) <= std::fabs(x) * 1e-19L) break;
  }
  return neg ? -x : x;
}
inline L erfinv(L y) {
  if (std::isnan(y) || y < -1 || y > 1) return NAN;
  if (y == 0) return y;  // ±0
  if (std::fabs(y) < 0.5L) {  // Newton on erf directly: no cancellation in 1 - y
    L x = y * std::sqrt(PI) / 2;
    for (int i = 0; i < 100; ++i) {
      L step = (std::erf(x) - y) / (2 / std::sqrt(PI) * std::exp(-x * x));
      x -= step;
      if (std::fabs(step) <= std::fabs(x) * 1e-19L) break;
    }
    return x;
  }
  return erfcinv(1 - y);  // 1 - y exact for |y| >= 1/2 (Sterbenz)
}
// exp(x²)·erfc(x): directly while erfc does not underflow, then the asymptotic series
inline L erfcx(L x) {
  if (std::isnan(x)) return x;
  if (x < 26) return std::exp(x * x) * std::erfc(x);
  if (std::isinf(x)) return 0;
  L s = 1, term = 1, x2 = 2 * x * x;
  for (int k = 1; k < 60; ++k) {
    term *= -(2 * k - 1) / x2;
    if (std::fabs(term) < 1e-21L) break;
    s += term;
  }
  return s / (x * std::sqrt(PI));
}
inline L normcdf(L x) { return std::erfc(-x / std::sqrt(2.0L)) / 2; }
inline L normcdfinv(L p) {
  if (std::isnan(p) || p < 0 || p > 1) return NAN;
  if (p == 0) return -INFINITY;
  if (p == 1) return INFINITY;
  return -std::sqrt(2.0L) * erfcinv(2 * p);
}
// modified Bessel functions I0, I1: the power series while it converges quickly, else the
// asymptotic expansion (both in long double)
inline L bessel_i(int nu, L x) {
  if (std::isnan(x)) return x;
  L a = std::fabs(x);
  if (std::isinf(a)) return nu == 1 && x < 0 ? -INFINITY : INFINITY;
  L r;
  if (a <= 30) {
    L term = nu == 0 ? 1 : a / 2, s = term, q = a * a / 4;
    for (int k = 1; k < 500; ++k) {
      term *= q / ((L)k * (k + nu));
      s += term;
      if (term < s * 1e-21L) break;
    }
    r = s;
  } else {
    L mu = 4.0L * nu * nu, term = 1, s = 1;
    for (int k = 1; k < 60; ++k) {
      term *= -(mu - (2 * k - 1) * (2 * k - 1)) / (k * 8 * a);
      if (std::fabs(term) < 1e-21L) break;
      s += term;
    }
    r = std::exp(a) / std::sqrt(2 * PI * a) * s;
  }
  return nu == 1 && x < 0 ? -r : r;
}
inline L norm_n(int n, const L* v) {
  L m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(v[i]));
  if (m == 0 || std::isinf(m)) return m;
  L s = 0;
  for (int i = 0; i < n; ++i) { L q = v[i] / m; s += q * q; }
  return m * std::sqrt(s);
}
}  // namespace m
}  // namespace ncsimt
#define NC_M1(NAME, FN)                                                                     \
  inline float NAME##f(float x) { return (float)::ncsimt::m::FN((long double)x); }         \
  inline double NAME(double x) { return (double)::ncsimt::m::FN((long double)x); }         \
  inline float NAME(float x) { return NAME##f(x); }
// glibc 2.41 declares C23's sinpi and cospi itself: its definitions stand there
#if defined(__GLIBC__) && defined(__GLIBC_PREREQ) && __GLIBC_PREREQ(2, 41)
inline float sinpi(float x) { return sinpif(x); }
inline float cospi(float x) { return cospif(x); }
#else
NC_M1(sinpi, sinpi)
NC_M1(cospi, cospi)
#endif
NC_M1(erfinv, erfinv)
NC_M1(erfcinv, erfcinv)
NC_M1(erfcx, erfcx)
NC_M1(normcdf, normcdf)
NC_M1(normcdfinv, normcdfinv)
#undef NC_M1
inline float cyl_bessel_i0f(float x) { return (float)::ncsimt::m::bessel_i(0, x); }
inline float cyl_bessel_i1f(float x) { return (float)::ncsimt::m::bessel_i(1, x); }
inline double cyl_bessel_i0(double x) { return (double)::ncsimt::m::bessel_i(0, x); }
inline double cyl_bessel_i1(double x) { return (double)::ncsimt::m::bessel_i(1, x); }
inline float cyl_bessel_i0(float x) { return cyl_bessel_i0f(x); }
inline float cyl_bessel_i1(float x) { return cyl_bessel_i1f(x); }
inline void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
inline void sincospi(double x, double* s, double* c) { *s = sinpi(x); *c = cospi(x); }
inline void sincospi(float x, float* s, float* c) { sincospif(x, s, c); }
inline void sincos(float x, float* s, float* c) { sincosf(x, s, c); }
inline float rsqrtf(float x);
inline float rcbrtf(float x) { return (float)(1.0L / std::cbrt((long double)x)); }
inline double rcbrt(double x) { return (double)(1.0L / std::cbrt((long double)x)); }
inline float rcbrt(float x) { return rcbrtf(x); }
inline float fdividef(float x, float y) { return x / y; }
inline float rhypotf(float x, float y) { long double v[2] = {x, y}; return (float)(1.0L / ::ncsimt::m::norm_n(2, v)); }
inline double rhypot(double x, double y) { long double v[2] = {x, y}; return (double)(1.0L / ::ncsimt::m::norm_n(2, v)); }
inline float norm3df(float a, float b, float c) { long double v[3] = {a, b, c}; return (float)::ncsimt::m::norm_n(3, v); }
inline float norm4df(float a, float b, float c, float d) { long double v[4] = {a, b, c, d}; return (float)::ncsimt::m::norm_n(4, v); }
inline float rnorm3df(float a, float b, float c) { long double v[3] = {a, b, c}; return (float)(1.0L / ::ncsimt::m::norm_n(3, v)); }
inline float rnorm4df(float a, float b, float c, float d) { long double v[4] = {a, b, c, d}; return (float)(1.0L / ::ncsimt::m::norm_n(4, v)); }
inline double norm3d(double a, double b, double c) { long double v[3] = {a, b, c}; return (double)::ncsimt::m::norm_n(3, v); }
inline double norm4d(double a, double b, double c, double d) { long double v[4] = {a, b, c, d}; return (double)::ncsimt::m::norm_n(4, v); }
inline double rnorm3d(double a, double b, double c) { long double v[3] = {a, b, c}; return (double)(1.0L / ::ncsimt::m::norm_n(3, v)); }
inline double rnorm4d(double a, double b, double c, double d) { long double v[4] = {a, b, c, d}; return (double)(1.0L / ::ncsimt::m::norm_n(4, v)); }
inline float normf(int dim, const float* p) {
  long double s = 0, m = 0;
  for (int i = 0; i < dim; ++i) m = std::max(m, (long double)std::fabs(p[i]));
  if (m == 0 || std::isinf(m)) return (float)m;
  for (int i = 0; i < dim; ++i) { long double q = p[i] / m; s += q * q; }
  return (float)(m * std::sqrt(s));
}
inline double norm(int dim, const double* p) {
  long double s = 0, m = 0;
  for (int i = 0; i < dim; ++i) m = std::max(m, (long double)std::fabs(p[i]));
  if (m == 0 || std::isinf(m)) return (double)m;
  for (int i = 0; i < dim; ++i) { long double q = p[i] / m; s += q * q; }
  return (double)(m * std::sqrt(s));
}
inline float rnormf(int dim, const float* p) { return (float)(1.0L / (long double)normf(dim, p)); }
inline double rnorm(int dim, const double* p) { return (double)(1.0L / (long double)norm(dim, p)); }
// the legacy double functions with a cudaRoundMode argument
namespace ncsimt {
inline rm::Mode of(enum cudaRoundMode m) {
  return m == cudaRoundZero ? rm::RZ : m == cudaRoundPosInf ? rm::RU : m == cudaRoundMinInf ? rm::RD : rm::RN;
}
}  // namespace ncsimt
inline double fma(double a, double b, double c, enum cudaRoundMode mode) { return ::ncsimt::rm::fma(::ncsimt::of(mode), a, b, c); }
inline double dmul(double a, double b, enum cudaRoundMode mode = cudaRoundNearest) { return ::ncsimt::rm::mul(::ncsimt::of(mode), a, b); }
inline double dadd(double a, double b, enum cudaRoundMode mode = cudaRoundNearest) { return ::ncsimt::rm::add(::ncsimt::of(mode), a, b); }
inline double dsub(double a, double b, enum cudaRoundMode mode = cudaRoundNearest) { return ::ncsimt::rm::sub(::ncsimt::of(mode), a, b); }
inline int double2int(double a, enum cudaRoundMode mode = cudaRoundZero) { return ::ncsimt::rm::to_int<int>(a, ::ncsimt::of(mode)); }
inline unsigned double2uint(double a, enum cudaRoundMode mode = cudaRoundZero) { return ::ncsimt::rm::to_int<unsigned>(a, ::ncsimt::of(mode)); }
inline long long double2ll(double a, enum cudaRoundMode mode = cudaRoundZero) { return ::ncsimt::rm::to_int<long long>(a, ::ncsimt::of(mode)); }
inline unsigned long long double2ull(double a, enum cudaRoundMode mode = cudaRoundZero) { return ::ncsimt::rm::to_int<unsigned long long>(a, ::ncsimt::of(mode)); }
inline double ll2double(long long a, enum cudaRoundMode mode = cudaRoundNearest) { return ::ncsimt::rm::from_ll(a, NC_DBL, ::ncsimt::of(mode)); }
inline double ull2double(unsigned long long a, enum cudaRoundMode mode = cudaRoundNearest) { return ::ncsimt::rm::from_ull(a, NC_DBL, ::ncsimt::of(mode)); }
inline double int2double(int a, enum cudaRoundMode = cudaRoundNearest) { return (double)a; }
inline double uint2double(unsigned a, enum cudaRoundMode = cudaRoundNearest) { return (double)a; }
inline double float2double(float a, enum cudaRoundMode = cudaRoundNearest) { return (double)a; }

// ------------------------------------------------------------------------------------------------
// Integer math (CUDA_MATH_INT) and CUDA's unqualified min/max overloads
// ------------------------------------------------------------------------------------------------
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(long long a, unsigned long long b) { return max((unsigned long long)a, b); }
inline unsigned long long max(unsigned long long a, long long b) { return max(a, (unsigned long long)b); }
inline unsigned long long min(long long a, unsigned long long b) { return min((unsigned long long)a, b); }
inline unsigned long long min(unsigned long long a, long long b) { return min(a, (unsigned long long)b); }
inline long max(long a, long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(long a, unsigned long b) { return max((unsigned long)a, b); }
inline unsigned long max(unsigned long a, long b) { return max(a, (unsigned long)b); }
inline unsigned long min(long a, unsigned long b) { return min((unsigned long)a, b); }
inline unsigned long min(unsigned long a, long b) { return min(a, (unsigned long)b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline float min(float a, float b) { return fminf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax((double)a, b); }
inline double max(double a, float b) { return fmax(a, (double)b); }
inline double min(float a, double b) { return fmin((double)a, b); }
inline double min(double a, float b) { return fmin(a, (double)b); }
inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// ------------------------------------------------------------------------------------------------
// Half and bfloat16 (CUDA_MATH__HALF_* / __BFLOAT16_*) beyond what NVIDIA's headers implement for
// the host: fused multiply-adds (the exact a·b + c, rounded once), conversions with every rounding
// mode, and the functions (hexp, hrsqrt ... : the accurate value, rounded once to nearest even)
// ------------------------------------------------------------------------------------------------
namespace ncsimt {
namespace rm {
// (hi + lo), a TwoSum pair, rounded once to precision P (hi alone decides unless it lies on a
// rounding boundary of the target, where lo's sign does)
inline double round_dd(double hi, double lo, Fmt f, Mode m) {
  double r = round_to(hi, f, m);
  if (lo == 0 || !std::isfinite(hi)) return r;
  if (m == RN) {
    double dn = round_to(hi, f, RD), up = round_to(hi, f, RU);
    if (dn != up && hi - dn == up - hi) return lo > 0 ? up : dn;
    return r;
  }
  if (r != hi) return r;  // hi is not a value of the target: lo cannot change the result
  bool toward_neg = m == RD || (m == RZ && hi > 0);
  bool toward_pos = m == RU || (m == RZ && hi < 0);
  if (lo < 0 && toward_neg) return round_to(std::nextafter(hi, -HUGE_VAL), f, RD);
  if (lo > 0 && toward_pos) return round_to(std::nextafter(hi, HUGE_VAL), f, RU);
  return r;
}
// a·b + c exactly as a TwoSum pair (a·b of two values of <= 24 bits is exact in double)
inline void fma_pair(double a, double b, double c, double& hi, double& lo) {
  double p = a * b;
  hi = p + c;
  double bb = hi - p;
  lo = (p - (hi - bb)) + (c - bb);
  if (!std::isfinite(hi)) lo = 0;
}
}  // namespace rm
template <class H> struct half_traits;
template <> struct half_traits<__half> {
  static double get(__half h) { return (double)__half2float(h); }
  static __half make(double v) { return __float2half_rn((float)v); }  // v is a value of the format
  static constexpr rm::Fmt F = rm::kHALF;
};
template <> struct half_traits<__nv_bfloat16> {
  static double get(__nv_bfloat16 h) { return (double)__bfloat162float(h); }
  static __nv_bfloat16 make(double v) { return __float2bfloat16_rn((float)v); }
  static constexpr rm::Fmt F = rm::kBF16;
};
template <class H> inline H h_round(double v, rm::Mode m = rm::RN) {
  typedef half_traits<H> T;
  return T::make(rm::round_to(v, T::F, m));
}
template <class H> inline H h_fma(H a, H b, H c) {
  typedef half_traits<H> T;
  double hi, lo;
  rm::fma_pair(T::get(a), T::get(b), T::get(c), hi, lo);
  return T::make(rm::round_dd(hi, lo, T::F, rm::RN));
}
template <class H> inline H h_fn(H a, long double (*f)(long double)) {
  return h_round<H>((double)f((long double)half_traits<H>::get(a)));
}
inline long double l_sqrt(long double x) { return std::sqrt(x); }
inline long double l_rsqrt(long double x) { return 1.0L / std::sqrt(x); }
inline long double l_rcp(long double x) { return 1.0L / x; }
inline long double l_exp(long double x) { return std::exp(x); }
inline long double l_exp2(long double x) { return std::exp2(x); }
inline long double l_exp10(long double x) { return std::pow(10.0L, x); }
inline long double l_log(long double x) { return std::log(x); }
inline long double l_log2(long double x) { return std::log2(x); }
inline long double l_log10(long double x) { return std::log10(x); }
inline long double l_sin(long double x) { return std::sin(x); }
inline long double l_cos(long double x) { return std::cos(x); }
inline long double l_tanh(long double x) { return std::tanh(x); }
inline long double l_ceil(long double x) { return std::ceil(x); }
inline long double l_floor(long double x) { return std::floor(x); }
inline long double l_rint(long double x) { return std::nearbyint(x); }
inline long double l_trunc(long double x) { return std::trunc(x); }
}  // namespace ncsimt
#define NC_HFN(H, H2, NAME, NAME2, L)                                                          \
  inline H NAME(const H a) { return ::ncsimt::h_fn<H>(a, ::ncsimt::L); }                     \
  inline H2 NAME2(const H2 a) { return H2(NAME(a.x), NAME(a.y)); }
#define NC_HALF_FAMILY(H, H2, ZERO, CANON_NAN)                                                   \
  NC_HFN(H, H2, hsqrt, h2sqrt, l_sqrt) NC_HFN(H, H2, hrsqrt, h2rsqrt, l_rsqrt)                   \
  NC_HFN(H, H2, hrcp, h2rcp, l_rcp) NC_HFN(H, H2, hexp, h2exp, l_exp)                            \
  NC_HFN(H, H2, hexp2, h2exp2, l_exp2) NC_HFN(H, H2, hexp10, h2exp10, l_exp10)                   \
  NC_HFN(H, H2, hlog, h2log, l_log) NC_HFN(H, H2, hlog2, h2log2, l_log2)                         \
  NC_HFN(H, H2, hlog10, h2log10, l_log10) NC_HFN(H, H2, hsin, h2sin, l_sin)                      \
  NC_HFN(H, H2, hcos, h2cos, l_cos) NC_HFN(H, H2, htanh, h2tanh, l_tanh)                         \
  NC_HFN(H, H2, htanh_approx, h2tanh_approx, l_tanh) NC_HFN(H, H2, hceil, h2ceil, l_ceil)        \
  NC_HFN(H, H2, hfloor, h2floor, l_floor) NC_HFN(H, H2, hrint, h2rint, l_rint)                   \
  NC_HFN(H, H2, htrunc, h2trunc, l_trunc)                                                        \
  inline H __hfma(const H a, const H b, const H c) { return ::ncsimt::h_fma<H>(a, b, c); }      \
  inline H __hfma_sat(const H a, const H b, const H c) {                                         \
    double r = ::ncsimt::half_traits<H>::get(__hfma(a, b, c));                                   \
    return ::ncsimt::half_traits<H>::make(r != r ? 0.0 : (r < 0 ? 0.0 : (r > 1 ? 1.0 : r)));   \
  }                                                                                              \
  inline H __hfma_relu(const H a, const H b, const H c) {                                        \
    double r = ::ncsimt::half_traits<H>::get(__hfma(a, b, c));                                   \
    return r != r ? CANON_NAN : ::ncsimt::half_traits<H>::make(r < 0 ? 0.0 : r);               \
  }                                                                                              \
  inline H2 __hfma2(const H2 a, const H2 b, const H2 c) { return H2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); } \
  inline H2 __hfma2_sat(const H2 a, const H2 b, const H2 c) { return H2(__hfma_sat(a.x, b.x, c.x), __hfma_sat(a.y, b.y, c.y)); } \
  inline H2 __hfma2_relu(const H2 a, const H2 b, const H2 c) { return H2(__hfma_relu(a.x, b.x, c.x), __hfma_relu(a.y, b.y, c.y)); } \
  inline H2 __hcmadd(const H2 a, const H2 b, const H2 c) {                                       \
    return H2(__hfma(__hneg(a.y), b.y, __hfma(a.x, b.x, c.x)), __hfma(a.y, b.x, __hfma(a.x, b.y, c.y))); \
  }
NC_HALF_FAMILY(__half, __half2, __ushort_as_half(0), __ushort_as_half((unsigned short)0x7fffU))
NC_HALF_FAMILY(__nv_bfloat16, __nv_bfloat162, __ushort_as_bfloat16(0), __ushort_as_bfloat16((unsigned short)0x7fffU))
#undef NC_HALF_FAMILY
#undef NC_HFN
// conversions to integers, each rounding mode (the value of a half or bfloat16 is exact in double)
#define NC_H2I(H, PFX, DST, DNAME, M, SUF) \
  inline DST __##PFX##2##DNAME##_##SUF(const H h) { return ::ncsimt::rm::to_int<DST>(::ncsimt::half_traits<H>::get(h), NC_M(M)); }
#define NC_H2I3(H, PFX, DST, DNAME) NC_H2I(H, PFX, DST, DNAME, RN, rn) NC_H2I(H, PFX, DST, DNAME, RU, ru) NC_H2I(H, PFX, DST, DNAME, RD, rd)
NC_H2I3(__half, half, int, int) NC_H2I3(__half, half, unsigned int, uint)
NC_H2I3(__half, half, long long int, ll) NC_H2I3(__half, half, unsigned long long int, ull)
NC_H2I3(__half, half, short int, short) NC_H2I3(__half, half, unsigned short int, ushort)
NC_H2I3(__nv_bfloat16, bfloat16, int, int) NC_H2I3(__nv_bfloat16, bfloat16, unsigned int, uint)
NC_H2I3(__nv_bfloat16, bfloat16, long long int, ll) NC_H2I3(__nv_bfloat16, bfloat16, unsigned long long int, ull)
NC_H2I3(__nv_bfloat16, bfloat16, short int, short) NC_H2I3(__nv_bfloat16, bfloat16, unsigned short int, ushort)
#undef NC_H2I3
#undef NC_H2I
// integers to bfloat16, each directed mode (round-to-nearest is NVIDIA's host implementation)
#define NC_I2B(SRC, SNAME, CONV, M, SUF) \
  inline __nv_bfloat16 __##SNAME##2bfloat16_##SUF(const SRC i) { return ::ncsimt::half_traits<__nv_bfloat16>::make(::ncsimt::rm::CONV(i, NC_BF16, NC_M(M))); }
#define NC_I2B3(SRC, SNAME, CONV) NC_I2B(SRC, SNAME, CONV, RZ, rz) NC_I2B(SRC, SNAME, CONV, RU, ru) NC_I2B(SRC, SNAME, CONV, RD, rd)
NC_I2B3(int, int, from_ll) NC_I2B3(unsigned int, uint, from_ull) NC_I2B3(long long int, ll, from_ll)
NC_I2B3(unsigned long long int, ull, from_ull) NC_I2B3(short int, short, from_ll) NC_I2B3(unsigned short int, ushort, from_ull)
#undef NC_I2B3
#undef NC_I2B
