// normcheck SIMT shim: what the C++ that normcheck.backends.cpu.ptx generates from inline PTX calls.
//
// Every PTX register (an asm operand or a `.reg` the template declares) is a 64-bit slot of
// bits; get_<type>/set_<type> read and write it as a PTX type (.f32, .u32, .f16x2 ...); in/out
// move C++ operands in and out as their constraint letter says (h 16-bit, r 32-bit, l 64-bit,
// f float, d double).  Approximate instructions are evaluated accurately (see CPU_VS_GPU).
#pragma once

namespace ncsimt {
float rsqrt_rn(float x);
unsigned shfl_ptx(int mode, unsigned a, unsigned b, unsigned c, unsigned mask, bool* pred);
void fault_misaligned(unsigned long long addr, int bytes, int store);
namespace ptx {

typedef unsigned long long reg;

template <int N> struct bits_of;
template <> struct bits_of<1> { typedef uint8_t type; };
template <> struct bits_of<2> { typedef uint16_t type; };
template <> struct bits_of<4> { typedef uint32_t type; };
template <> struct bits_of<8> { typedef uint64_t type; };

// typed views of a slot --------------------------------------------------------------------------
inline float get_f32(reg r) { uint32_t u = (uint32_t)r; float f; std::memcpy(&f, &u, 4); return f; }
inline reg set_f32(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline double get_f64(reg r) { double d; std::memcpy(&d, &r, 8); return d; }
inline reg set_f64(double d) { reg r; std::memcpy(&r, &d, 8); return r; }
#define NC_PTX_INT(NAME, T)                                                        \
  inline T get_##NAME(reg r) { return (T)(std::make_unsigned<T>::type)r; }         \
  inline reg set_##NAME(T v) { return (reg)(std::make_unsigned<T>::type)v; }
NC_PTX_INT(u8, uint8_t)
NC_PTX_INT(u16, uint16_t)
NC_PTX_INT(u32, uint32_t)
NC_PTX_INT(u64, uint64_t)
NC_PTX_INT(s8, int8_t)
NC_PTX_INT(s16, int16_t)
NC_PTX_INT(s32, int32_t)
NC_PTX_INT(s64, int64_t)
NC_PTX_INT(b8, uint8_t)
NC_PTX_INT(b16, uint16_t)
NC_PTX_INT(b32, uint32_t)
NC_PTX_INT(b64, uint64_t)
#undef NC_PTX_INT
template <class T>
inline T get_raw(reg r) { T v; std::memcpy(&v, &r, sizeof(T)); return v; }
template <class T>
inline reg set_raw(const T& v) { reg r = 0; std::memcpy(&r, &v, sizeof(T)); return r; }
inline __half get_f16(reg r) { return get_raw<__half>(r); }
inline reg set_f16(__half v) { return set_raw(v); }
inline __nv_bfloat16 get_bf16(reg r) { return get_raw<__nv_bfloat16>(r); }
inline reg set_bf16(__nv_bfloat16 v) { return set_raw(v); }
inline __half2 get_f16x2(reg r) { return get_raw<__half2>(r); }
inline reg set_f16x2(__half2 v) { return set_raw(v); }
inline __nv_bfloat162 get_bf16x2(reg r) { return get_raw<__nv_bfloat162>(r); }
inline reg set_bf16x2(__nv_bfloat162 v) { return set_raw(v); }

// operands in and out ------------------------------------------------------------------------------
template <int N, class T>
inline reg in(const T& v) {
  typedef typename bits_of<N>::type U;
  if constexpr (std::is_integral<T>::value || std::is_enum<T>::value) {
    return (reg)(U)v;
  } else if constexpr (std::is_pointer<T>::value) {
    return (reg)(U)(uintptr_t)v;
  } else {
    static_assert(sizeof(T) <= 8, "normcheck: asm operand wider than 64 bits");
    reg r = 0;
    std::memcpy(&r, &v, sizeof(T) < (size_t)N ? sizeof(T) : (size_t)N);
    return r;
  }
}
template <class T>
inline reg in_f(const T& v) { return set_f32((float)v); }
template <class T>
inline reg in_d(const T& v) { return set_f64((double)v); }
template <int N, class T>
inline void out(T& dst, reg r) {
  typedef typename bits_of<N>::type U;
  if constexpr (std::is_integral<T>::value || std::is_enum<T>::value) {
    dst = (T)(U)r;
  } else if constexpr (std::is_pointer<T>::value) {
    dst = (T)(uintptr_t)(U)r;
  } else {
    std::memcpy(&dst, &r, sizeof(T) < (size_t)N ? sizeof(T) : (size_t)N);
  }
}
template <class T>
inline void out_f(T& dst, reg r) {
  if constexpr (std::is_arithmetic<T>::value) dst = (T)get_f32(r);
  else std::memcpy(&dst, &r, 4);
}
template <class T>
inline void out_d(T& dst, reg r) {
  if constexpr (std::is_arithmetic<T>::value) dst = (T)get_f64(r);
  else std::memcpy(&dst, &r, 8);
}

// arithmetic -------------------------------------------------------------------------------------
inline float ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
inline double ftz(double x) { return x; }
inline float fmin(float a, float b) { return fminf(a, b); }
inline float fmax(float a, float b) { return fmaxf(a, b); }
inline double fmin(double a, double b) { return std::fmin(a, b); }
inline double fmax(double a, double b) { return std::fmax(a, b); }
template <class T>
inline T iabs(T v) { return v < 0 ? (T)(-v) : v; }
template <class T>
inline T shift(T v, uint32_t n, bool left) {
  const uint32_t w = 8 * sizeof(T);
  if (n >= w) return left ? (T)0 : (std::is_signed<T>::value && v < 0 ? (T)-1 : (T)0);
  return left ? (T)((typename std::make_unsigned<T>::type)v << n) : (T)(v >> n);
}
// float -> integer, clamped to the destination's range (NaN -> 0), as cvt does
template <class T>
inline T to_int(double v, bool) {
  if (std::isnan(v)) return (T)0;
  if (v <= (double)std::numeric_limits<T>::min()) return std::numeric_limits<T>::min();
  if (v >= (double)std::numeric_limits<T>::max()) return std::numeric_limits<T>::max();
  return (T)v;
}

// special registers --------------------------------------------------------------------------------
inline uint32_t laneid() { return (uint32_t)::ncsimt::tls_cur->lane; }
inline uint32_t warpid() { return (uint32_t)::ncsimt::tls_cur->warp; }
inline uint32_t lanemask(int k) {
  uint32_t l = laneid();
  uint32_t eq = 1u << l;
  switch (k) {
    case 0: return eq;
    case 1: return eq | (eq - 1u);
    case 2: return eq - 1u;
    case 3: return ~(eq - 1u);
    default: return ~(eq | (eq - 1u));
  }
}

// warp-wide ------------------------------------------------------------------------------------------
inline reg shfl(int mode, reg a, uint32_t b, uint32_t c, uint32_t mask, bool* p) {
  return (reg)::ncsimt::shfl_ptx(mode, (uint32_t)a, b, c, mask, p);
}
inline float redux_f32(bool is_max, float v, uint32_t mask) {
  float r = v;
  for (int l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    float o = __shfl_sync(mask, v, l);
    r = is_max ? fmaxf(r, o) : fminf(r, o);
  }
  return r;
}

// memory: a GPU faults on an access not aligned to its size
inline uint64_t aligned(uint64_t addr, int bytes, int store) {
  if (addr % (uint64_t)bytes) ::ncsimt::fault_misaligned(addr, bytes, store);
  return addr;
}

}  // namespace ptx
}  // namespace ncsimt
