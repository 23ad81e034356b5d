// Shared pieces of normcheck's built-in normalisation kernels.
//
// Thread mapping (the first seed article's): one block per row, thread t visits elements
// t, t+blockDim, t+2·blockDim, ... (VEC-wide vectors when cols is a multiple of VEC, so every row
// starts aligned; elements one by one otherwise), a warp reduces with xor shuffles, warps combine
// through shared memory.  blockDim must be a multiple of 32, at most 1024.
//
// Precision orders (S = the storage type, accumulation in float):
//   UPCAST_SQUARE       convert to float, then square and accumulate         (the right way)
//   SQUARE_UPCAST       square in S (rounded to S: overflows for fp16 |x| >= 256), then convert
//   STORAGE_ACCUMULATE  accumulate in S: every partial sum rounded to S (stagnation, overflow)
// For float storage the three coincide.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define UPCAST_SQUARE 0
#define SQUARE_UPCAST 1
#define STORAGE_ACCUMULATE 2

// ---------------------------------------------------------------------------------------------
// Storage types: conversions and the vector type used for loads
// ---------------------------------------------------------------------------------------------
template <typename T> struct Storage;
template <> struct Storage<float> {
  typedef float4 Vec;
  static constexpr int VEC = 4;
  static __device__ __forceinline__ float to_f(float v) { return v; }
  static __device__ __forceinline__ float from_f(float v) { return v; }
};
template <> struct Storage<__half> {
  typedef uint4 Vec;  // 8 halves
  static constexpr int VEC = 8;
  static __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }
};
template <> struct Storage<__nv_bfloat16> {
  typedef uint4 Vec;  // 8 bfloat16
  static constexpr int VEC = 8;
  static __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
};

// Round a float to storage precision and back: what "computed in S" means for one operation
// (S's own add/mul are correctly rounded, so op-in-float-then-round is the same value).
template <typename T>
__device__ __forceinline__ float in_storage(float v) {
  return Storage<T>::to_f(Storage<T>::from_f(v));
}

// Visit a row's elements: f(column, value as float).
template <typename T, typename F>
__device__ __forceinline__ void for_row(const T* __restrict__ row, int cols, F&& f) {
  constexpr int V = Storage<T>::VEC;
  typedef typename Storage<T>::Vec Vec;
  if (cols % V == 0) {
    const Vec* rv = reinterpret_cast<const Vec*>(row);
    for (int i = threadIdx.x; i < cols / V; i += blockDim.x) {
      Vec v = rv[i];
      const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
      for (int k = 0; k < V; ++k) f(i * V + k, Storage<T>::to_f(e[k]));
    }
  } else {
    for (int i = threadIdx.x; i < cols; i += blockDim.x) f(i, Storage<T>::to_f(row[i]));
  }
}

// Square of v as the precision order prescribes, returned as float.
template <typename T, int ORDER>
__device__ __forceinline__ float square(float v) {
  if (ORDER == SQUARE_UPCAST) {
    float s = in_storage<T>(v);
    return in_storage<T>(s * s);
  }
  return v * v;
}

// acc + v, as the precision order prescribes (STORAGE_ACCUMULATE rounds every partial to S).
template <typename T, int ORDER>
__device__ __forceinline__ float accumulate(float acc, float v) {
  if (ORDER == STORAGE_ACCUMULATE) return in_storage<T>(acc + in_storage<T>(v));
  return acc + v;
}

// ---------------------------------------------------------------------------------------------
// Block reductions
// ---------------------------------------------------------------------------------------------
template <typename T, int ORDER>
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = accumulate<T, ORDER>(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block, every thread gets it.  Partial sums follow the precision order.
template <typename T, int ORDER>
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum<T, ORDER>(v);
  if (lane == 0) partial[wid] = v;
  __syncthreads();
  if (wid == 0) {
    v = lane < nw ? partial[lane] : 0.0f;
    v = warp_sum<T, ORDER>(v);
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  v = partial[0];
  __syncthreads();  // partial[] is reused by the next reduction
  return v;
}

// Welford state of a set of elements: count, mean, M2 = Σ(x - mean)².
struct Welford {
  float n, mean, m2;
};

// One update with x (per-thread Welford); STORAGE_ACCUMULATE keeps mean and M2 in S,
// SQUARE_UPCAST forms the product of deviations in S.
template <typename T, int ORDER>
__device__ __forceinline__ void welford_push(Welford& w, float x) {
  w.n += 1.0f;
  float delta = x - w.mean;
  float mean = w.mean + delta / w.n;
  if (ORDER == STORAGE_ACCUMULATE) mean = in_storage<T>(mean);
  float delta2 = x - mean;
  float prod = ORDER == SQUARE_UPCAST ? in_storage<T>(in_storage<T>(delta) * in_storage<T>(delta2))
                                      : delta * delta2;
  float m2 = w.m2 + prod;
  if (ORDER == STORAGE_ACCUMULATE) m2 = in_storage<T>(m2);
  w.mean = mean;
  w.m2 = m2;
}

// Chan, Golub & LeVeque's pairwise merge of two Welford states.
template <typename T, int ORDER>
__device__ __forceinline__ Welford welford_merge(Welford a, Welford b) {
  if (b.n == 0.0f) return a;
  if (a.n == 0.0f) return b;
  Welford r;
  r.n = a.n + b.n;
  float delta = b.mean - a.mean;
  float frac = b.n / r.n;
  r.mean = a.mean + delta * frac;
  float cross = ORDER == SQUARE_UPCAST ? in_storage<T>(in_storage<T>(delta) * in_storage<T>(delta))
                                       : delta * delta;
  r.m2 = a.m2 + b.m2 + cross * a.n * frac;
  if (ORDER == STORAGE_ACCUMULATE) {
    r.mean = in_storage<T>(r.mean);
    r.m2 = in_storage<T>(r.m2);
  }
  return r;
}

template <typename T, int ORDER>
__device__ __forceinline__ Welford warp_welford(Welford w) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Welford other;
    other.n = __shfl_xor_sync(0xffffffffu, w.n, o);
    other.mean = __shfl_xor_sync(0xffffffffu, w.mean, o);
    other.m2 = __shfl_xor_sync(0xffffffffu, w.m2, o);
    w = welford_merge<T, ORDER>(w, other);
  }
  return w;
}

template <typename T, int ORDER>
__device__ Welford block_welford(Welford w) {
  __shared__ Welford partial[32];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  w = warp_welford<T, ORDER>(w);
  if (lane == 0) partial[wid] = w;
  __syncthreads();
  if (wid == 0) {
    Welford zero = {0.0f, 0.0f, 0.0f};
    w = lane < nw ? partial[lane] : zero;
    w = warp_welford<T, ORDER>(w);
    if (lane == 0) partial[0] = w;
  }
  __syncthreads();
  w = partial[0];
  __syncthreads();
  return w;
}

// 1/sqrt(v): correctly rounded, or the fast approximate intrinsic.
template <bool FAST>
__device__ __forceinline__ float inv_sqrt(float v) {
  return FAST ? rsqrtf(v) : __frsqrt_rn(v);
}
