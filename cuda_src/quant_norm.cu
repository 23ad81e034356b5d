// Quantised normalisation, side by side: RMSNorm, fused add + RMSNorm and LayerNorm ending in
// fp8 (e4m3), int8 or fp4 (e2m1) with static, per-token, per-group and block scales -- each in
// the contract of a public kernel (normcheck.quant.contract holds the definitions):
//
//   t = γ·x̂ + β                       x̂ = x·rstd (RMSNorm) or (x - μ)·rstd (LayerNorm)
//   y = t | round_T(t) | round_T(round_T(x̂)·γ)                    Y_NONE | Y_ONCE | Y_TWICE
//   A = max |y| over the group;  s = max(fl(A'/qmax), floor)  (A' = max(A, amax floor))
//   q = Q(fl(y / s) | fl(y · fl(1/s)) | fl(y · s) | fl(y · min(fl(qmax/A'), cap)))
//   Q: clamp to ±qmax then round (NaN -> qmax), or the saturating conversion
//
// Arguments (one ABI for every entry; a null pointer where an entry has no such buffer):
//   q        [rows, cols] codes (int8 values; fp4: two a byte, the even element in the low nibble)
//   scales   per token [rows] float; per group [rows, ceil(cols/G)] float; mx e8m0 and nvfp4
//            ue4m3 bytes [rows, ceil(cols/G)]
//   h        the fused sum x + residual rounded to T (written)
//   x        [rows, cols] T;  residual [rows, cols] T (fused entries)
//   gamma    [cols] T;  beta [cols] T (LayerNorm)
//   scale    [1] float: the static scale (nvfp4: the encode scale S_enc)
//   amax     [1] float: the largest |y| of the tensor (te's delayed scaling), by atomicMax
//   eps      the float ε;  rows, cols the shape
// Launch: grid = rows, block = 256 (a multiple of 32, at most 1024).  Limits: cols >= 1; fp4
// entries need an even cols.  Statistics in float: Σx² or the two-pass variance as in
// rmsnorm.cu and layernorm.cu, rstd by __frsqrt_rn.
//
// Entries are named <norm>_<format>_<granularity>_<contract>_<storage>.
//
// INDEX (tests/test_quant.py keeps this list equal to the entries below)
//   rmsnorm_e4m3_tensor_vllm_*        y rounded twice, × fl(1/scale), clamp ±448
//   rmsnorm_e4m3_tensor_trtllm_*      y rounded once, × scale, satfinite
//   rmsnorm_e4m3_tensor_flashinfer_*  y in float, × fl(1/scale), clamp ±448
//   rmsnorm_e4m3_tensor_te_*          y in float, × scale, satfinite; amax of y before scaling
//   rmsnorm_e4m3_token_vllm_*         y twice; s = max(A/448, 1/(448·512)); ÷ s; clamp
//   rmsnorm_e4m3_token_trtllm_*       y once; A from T(1e-6f); × min(448/A, 448·512); satfinite
//   rmsnorm_e4m3_group128_vllm_*      per 128 columns, as the per-token vLLM contract
//   rmsnorm_int8_token_vllm_*         y twice; s = max(A/127, FLT_EPSILON); × fl(1/s); rni.sat
//   rmsnorm_int8_token_trtllm_*       y once; A from T(1e-6f); × fl(127/A); rni.sat
//   rmsnorm_e4m3_mx_te_*              y in float; e8m0 = ⌈A·(1/448)⌉ (power of two); × 2^-e
//   rmsnorm_e2m1_nvfp4_te_*           y in float; ue4m3 block scale from S_enc; e2m1 satfinite
//   add_rmsnorm_e4m3_tensor_vllm_*    fused: statistics of the sum rounded to T
//   add_rmsnorm_e4m3_token_vllm_*     fused: statistics of the float sum, h rounded to T
//   layernorm_e4m3_tensor_te_*        LayerNorm, y in float, × scale, satfinite; amax
//   layernorm_e4m3_token_exact_*      LayerNorm, y once, ÷ s, satfinite
//   layernorm_int8_group128_exact_*   LayerNorm, y once, per 128 columns, ÷ s, rni.sat
#include "norm_common.cuh"
#include <cuda_fp8.h>
#include <cuda_fp4.h>

#define Y_NONE 0
#define Y_ONCE 1
#define Y_TWICE 2
#define G_TENSOR 0
#define G_TOKEN 1
#define G_GROUP 2
#define G_MX 3
#define G_NVFP4 4
#define APPLY_DIV 0
#define APPLY_MUL_INV 1
#define APPLY_MUL 2
#define APPLY_QMAX_OVER_AMAX 3
#define SAT_CLAMP 0
#define SAT_FINITE 1

// ---------------------------------------------------------------------------------------------
// Quantised formats: the largest value and the conversion of one float
// ---------------------------------------------------------------------------------------------
struct E4M3 {
  static constexpr float QMAX = 448.0f;
  static constexpr int BITS = 8;
  static __device__ __forceinline__ unsigned cvt(float v, bool sat) {
    return __nv_cvt_float_to_fp8(v, sat ? __NV_SATFINITE : __NV_NOSAT, __NV_E4M3);
  }
};
struct INT8 {
  static constexpr float QMAX = 127.0f;
  static constexpr int BITS = 8;
  static __device__ __forceinline__ unsigned cvt(float v, bool) {
    unsigned d;
    asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(d) : "f"(v));
    return d & 0xFFu;
  }
};
struct E2M1 {
  static constexpr float QMAX = 6.0f;
  static constexpr int BITS = 4;
  static __device__ __forceinline__ unsigned cvt(float v, bool) {
    return __nv_cvt_float_to_fp4(v, __NV_E2M1, cudaRoundNearest) & 0xFu;
  }
};

// e8m0 of a positive float, rounded up (float_to_e8m0 / cvt.rp.satfinite.ue8m0x2.f32)
__device__ __forceinline__ unsigned e8m0_up(float v) {
  if (!(v > 0.0f)) return 0u;
  unsigned b = __float_as_uint(v);
  unsigned e = b >> 23, m = b & 0x7FFFFFu;
  if (e == 0xFFu) return 0xFEu;
  if (m > 0 && e != 0xFEu && !(e == 0 && m <= 0x400000u)) ++e;
  return e;
}

// ---------------------------------------------------------------------------------------------
// The contracts (normcheck.quant.contract presets; each names what it follows)
// ---------------------------------------------------------------------------------------------
// vLLM static fp8 (csrc/layernorm_quant_kernels.cu, quantization/fp8/common.cuh)
struct VllmTensor {
  static constexpr int Y = Y_TWICE, GRAN = G_TENSOR, APPLY = APPLY_MUL_INV, SAT = SAT_CLAMP;
  static constexpr bool RESIDUAL_STORED = true, AMAX_FP32 = false;
  static constexpr int GROUP = 0;
  static constexpr float AMAX_FLOOR = 0.0f, SCALE_FLOOR = 0.0f, CAP = 0.0f;
  static constexpr bool FLOOR_IN_T = false;
};
// TensorRT-LLM static (cpp/tensorrt_llm/kernels/rmsnormKernels.cu)
struct TrtllmTensor {
  static constexpr int Y = Y_ONCE, GRAN = G_TENSOR, APPLY = APPLY_MUL, SAT = SAT_FINITE;
  static constexpr bool RESIDUAL_STORED = false, AMAX_FP32 = false;
  static constexpr int GROUP = 0;
  static constexpr float AMAX_FLOOR = 0.0f, SCALE_FLOOR = 0.0f, CAP = 0.0f;
  static constexpr bool FLOOR_IN_T = false;
};
// FlashInfer RMSNormQuantKernel (include/flashinfer/norm.cuh)
struct FlashinferTensor {
  static constexpr int Y = Y_NONE, GRAN = G_TENSOR, APPLY = APPLY_MUL_INV, SAT = SAT_CLAMP;
  static constexpr bool RESIDUAL_STORED = false, AMAX_FP32 = true;
  static constexpr int GROUP = 0;
  static constexpr float AMAX_FLOOR = 0.0f, SCALE_FLOOR = 0.0f, CAP = 0.0f;
  static constexpr bool FLOOR_IN_T = false;
};
// TransformerEngine fp8 forward (normalization/*_fwd_kernels.cuh): × scale, amax before it
struct TeTensor {
  static constexpr int Y = Y_NONE, GRAN = G_TENSOR, APPLY = APPLY_MUL, SAT = SAT_FINITE;
  static constexpr bool RESIDUAL_STORED = false, AMAX_FP32 = true;
  static constexpr int GROUP = 0;
  static constexpr float AMAX_FLOOR = 0.0f, SCALE_FLOOR = 0.0f, CAP = 0.0f;
  static constexpr bool FLOOR_IN_T = false;
};
// vLLM dynamic per token / per group (fused_kernels/layernorm_utils.cuh)
template <int G, int APPLY_, int SAT_, int FLOOR_KIND>
struct VllmDynamic {
  static constexpr int Y = Y_TWICE, GRAN = G ? G_GROUP : G_TOKEN, APPLY = APPLY_, SAT = SAT_;
  static constexpr bool RESIDUAL_STORED = false, AMAX_FP32 = false;
  static constexpr int GROUP = G;
  static constexpr float AMAX_FLOOR = 0.0f, CAP = 0.0f;
  static constexpr bool FLOOR_IN_T = false;
  static constexpr float SCALE_FLOOR = FLOOR_KIND == 0 ? 1.0f / (448.0f * 512.0f)
                                                       : 1.1920928955078125e-07f;  // FLT_EPSILON
};
// TensorRT-LLM per token: amax from T(1e-6f), × min(qmax/amax, cap), scale max(amax/qmax, floor)
template <bool FP8>
struct TrtllmToken {
  static constexpr int Y = Y_ONCE, GRAN = G_TOKEN, APPLY = APPLY_QMAX_OVER_AMAX, SAT = SAT_FINITE;
  static constexpr bool RESIDUAL_STORED = false, AMAX_FP32 = false;
  static constexpr int GROUP = 0;
  static constexpr float AMAX_FLOOR = 1e-6f;
  static constexpr bool FLOOR_IN_T = true;  // TensorRT-LLM: `T_scalar amax = 1e-6f`, the floor held in T
  static constexpr float SCALE_FLOOR = FP8 ? 1.0f / (448.0f * 512.0f) : 0.0f;
  static constexpr float CAP = FP8 ? 448.0f * 512.0f : 0.0f;
};
// TransformerEngine MXFP8 (normalization/rmsnorm/rmsnorm_fwd_mxfp8.cu)
struct TeMx {
  static constexpr int Y = Y_NONE, GRAN = G_MX, APPLY = APPLY_MUL_INV, SAT = SAT_FINITE;
  static constexpr bool RESIDUAL_STORED = false, AMAX_FP32 = false;
  static constexpr int GROUP = 32;
  static constexpr float AMAX_FLOOR = 0.0f, SCALE_FLOOR = 0.0f, CAP = 0.0f;
  static constexpr bool FLOOR_IN_T = false;
};
// TransformerEngine NVFP4 (cast/nvfp4/core_nvfp4.cuh)
struct TeNvfp4 {
  static constexpr int Y = Y_NONE, GRAN = G_NVFP4, APPLY = APPLY_MUL_INV, SAT = SAT_FINITE;
  static constexpr bool RESIDUAL_STORED = false, AMAX_FP32 = false;
  static constexpr int GROUP = 16;
  static constexpr float AMAX_FLOOR = 0.0f, SCALE_FLOOR = 0.0f, CAP = 0.0f;
  static constexpr bool FLOOR_IN_T = false;
};
// normcheck's exact contract with y rounded once (per token, per group); s >= 2^-126
template <int G>
struct ExactOnce {
  static constexpr int Y = Y_ONCE, GRAN = G ? G_GROUP : G_TOKEN, APPLY = APPLY_DIV, SAT = SAT_FINITE;
  static constexpr bool RESIDUAL_STORED = false, AMAX_FP32 = false;
  static constexpr int GROUP = G;
  static constexpr float AMAX_FLOOR = 0.0f, SCALE_FLOOR = 1.17549435e-38f, CAP = 0.0f;
  static constexpr bool FLOOR_IN_T = false;
};

// ---------------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) partial[wid] = v;
  __syncthreads();
  if (wid == 0) {
    v = warp_max(lane < nw ? partial[lane] : 0.0f);
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  v = partial[0];
  __syncthreads();
  return v;
}

// The row the statistics see, element j: x, or the fused sum (in float, or rounded to T).
template <typename T, bool FUSED, class C>
__device__ __forceinline__ float row_value(const T* xr, const T* rr, int j) {
  float v = Storage<T>::to_f(xr[j]);
  if (FUSED) {
    v += Storage<T>::to_f(rr[j]);
    if (C::RESIDUAL_STORED) v = in_storage<T>(v);
  }
  return v;
}

// y_j as the contract computes it (and, in yf, the float value before any rounding).
template <typename T, bool CENTRED, class C>
__device__ __forceinline__ float y_value(float v, float mean, float rstd, const T* gamma,
                                         const T* beta, int j, float& yf) {
  const float g = Storage<T>::to_f(gamma[j]);
  const float b = CENTRED && beta ? Storage<T>::to_f(beta[j]) : 0.0f;
  const float xh = (CENTRED ? v - mean : v) * rstd;
  yf = xh * g + b;
  if (C::Y == Y_ONCE) return in_storage<T>(yf);
  if (C::Y == Y_TWICE) return in_storage<T>(in_storage<T>(xh) * g);
  return yf;
}

// the floor amax starts at: the float constant, or its value in the storage type T
template <typename T, class C>
__device__ __forceinline__ float amax_floor() {
  return C::FLOOR_IN_T ? in_storage<T>(C::AMAX_FLOOR) : C::AMAX_FLOOR;
}

template <typename T, class C, class Q>
__device__ __forceinline__ float stored_scale(float A) {
  if (C::AMAX_FLOOR > 0.0f) A = fmaxf(A, amax_floor<T, C>());
  float s = A / Q::QMAX;
  if (C::SCALE_FLOOR > 0.0f) s = fmaxf(s, C::SCALE_FLOOR);
  return s;
}

template <class C, class Q>
__device__ __forceinline__ unsigned quantise(float y, float s, float m) {
  float v = C::APPLY == APPLY_DIV ? y / s : y * m;
  if (C::SAT == SAT_CLAMP) v = fmaxf(-Q::QMAX, fminf(v, Q::QMAX));
  return Q::cvt(v, C::SAT == SAT_FINITE);
}

template <typename T, class Q, bool CENTRED, bool FUSED, class C>
__device__ void quant_norm_row(unsigned char* __restrict__ q, void* __restrict__ scales,
                               T* __restrict__ h, const T* __restrict__ x,
                               const T* __restrict__ residual, const T* __restrict__ gamma,
                               const T* __restrict__ beta, const float* __restrict__ scale,
                               float* __restrict__ amax, float eps, int rows, int cols) {
  const int row = blockIdx.x;
  if (row >= rows) return;
  const T* xr = x + (size_t)row * cols;
  const T* rr = FUSED ? residual + (size_t)row * cols : nullptr;
  if (FUSED) {
    for (int j = threadIdx.x; j < cols; j += blockDim.x)
      h[(size_t)row * cols + j] =
          Storage<T>::from_f(Storage<T>::to_f(xr[j]) + Storage<T>::to_f(rr[j]));
  }
  // statistics: Σx² (RMSNorm) or two passes (LayerNorm)
  float mean = 0.0f, acc = 0.0f;
  if (CENTRED) {
    for (int j = threadIdx.x; j < cols; j += blockDim.x) acc += row_value<T, FUSED, C>(xr, rr, j);
    mean = block_sum<T, UPCAST_SQUARE>(acc) / cols;
    acc = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
      float d = row_value<T, FUSED, C>(xr, rr, j) - mean;
      acc += d * d;
    }
  } else {
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
      float v = row_value<T, FUSED, C>(xr, rr, j);
      acc += v * v;
    }
  }
  const float rstd = inv_sqrt<false>(block_sum<T, UPCAST_SQUARE>(acc) / cols + eps);
  float yf;
  // per tensor: one scale for every row
  if (C::GRAN == G_TENSOR) {
    const float s = scale[0];
    const float m = C::APPLY == APPLY_MUL ? s : 1.0f / s;
    float a = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
      float y = y_value<T, CENTRED, C>(row_value<T, FUSED, C>(xr, rr, j), mean, rstd, gamma, beta,
                                       j, yf);
      a = fmaxf(a, fabsf(C::AMAX_FP32 ? yf : y));
      q[(size_t)row * cols + j] = (unsigned char)quantise<C, Q>(y, s, m);
    }
    if (amax) {
      a = block_max(a);
      if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(a));
    }
    return;
  }
  // per token: the row's amax
  if (C::GRAN == G_TOKEN) {
    float a = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x)
      a = fmaxf(a, fabsf(y_value<T, CENTRED, C>(row_value<T, FUSED, C>(xr, rr, j), mean, rstd,
                                                gamma, beta, j, yf)));
    a = block_max(a);
    const float s = stored_scale<T, C, Q>(a);
    float m = 1.0f / s;
    if (C::APPLY == APPLY_QMAX_OVER_AMAX) {
      m = Q::QMAX / fmaxf(a, amax_floor<T, C>());
      if (C::CAP > 0.0f) m = fminf(m, C::CAP);
    }
    if (threadIdx.x == 0) reinterpret_cast<float*>(scales)[row] = s;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
      float y = y_value<T, CENTRED, C>(row_value<T, FUSED, C>(xr, rr, j), mean, rstd, gamma, beta,
                                       j, yf);
      q[(size_t)row * cols + j] = (unsigned char)quantise<C, Q>(y, s, m);
    }
    return;
  }
  // groups and blocks: one warp per group at a time, lanes over its columns
  const int G = C::GROUP;
  const int groups = (cols + G - 1) / G;
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int g = wid; g < groups; g += nw) {
    const int start = g * G, end = min(start + G, cols);
    float a = 0.0f;
    for (int j = start + lane; j < end; j += 32)
      a = fmaxf(a, fabsf(y_value<T, CENTRED, C>(row_value<T, FUSED, C>(xr, rr, j), mean, rstd,
                                                gamma, beta, j, yf)));
    a = warp_max(a);
    float s, m;
    if (C::GRAN == G_MX) {
      const unsigned e = e8m0_up(a * (1.0f / Q::QMAX));
      s = __uint_as_float(e << 23);
      m = e == 0 ? 1.0f : __uint_as_float((254u - e) << 23);
      if (lane == 0) reinterpret_cast<unsigned char*>(scales)[(size_t)row * groups + g] = e;
    } else if (C::GRAN == G_NVFP4) {
      const float s_enc = scale[0];
      const unsigned code =
          __nv_cvt_float_to_fp8(a * (s_enc * (1.0f / 6.0f)), __NV_SATFINITE, __NV_E4M3);
      __nv_fp8_e4m3 sb;
      sb.__x = (__nv_fp8_storage_t)code;
      s = (float)sb;
      m = fminf(1.0f / (s * (1.0f / s_enc)), 3.402823466e+38f);
      if (lane == 0) reinterpret_cast<unsigned char*>(scales)[(size_t)row * groups + g] = code;
    } else {
      s = stored_scale<T, C, Q>(a);
      m = 1.0f / s;
      if (lane == 0) reinterpret_cast<float*>(scales)[(size_t)row * groups + g] = s;
    }
    if (Q::BITS == 4) {  // two values a byte: lane k writes the pair (2k, 2k+1)
      for (int j = start + 2 * lane; j < end; j += 64) {
        unsigned lo = quantise<C, Q>(y_value<T, CENTRED, C>(row_value<T, FUSED, C>(xr, rr, j),
                                                           mean, rstd, gamma, beta, j, yf), s, m);
        unsigned hi = 0;
        if (j + 1 < end)
          hi = quantise<C, Q>(y_value<T, CENTRED, C>(row_value<T, FUSED, C>(xr, rr, j + 1), mean,
                                                     rstd, gamma, beta, j + 1, yf), s, m);
        q[(size_t)row * ((cols + 1) / 2) + j / 2] = (unsigned char)(lo | (hi << 4));
      }
    } else {
      for (int j = start + lane; j < end; j += 32)
        q[(size_t)row * cols + j] = (unsigned char)quantise<C, Q>(
            y_value<T, CENTRED, C>(row_value<T, FUSED, C>(xr, rr, j), mean, rstd, gamma, beta, j,
                                   yf), s, m);
    }
  }
}

#define QNORM(NAME, T, Q, CENTRED, FUSED, C)                                                    \
  extern "C" __global__ void __launch_bounds__(1024)                                            \
      NAME(unsigned char* __restrict__ q, void* __restrict__ scales, T* __restrict__ h,          \
           const T* __restrict__ x, const T* __restrict__ residual, const T* __restrict__ gamma, \
           const T* __restrict__ beta, const float* __restrict__ scale,                         \
           float* __restrict__ amax, float eps, int rows, int cols) {                           \
    quant_norm_row<T, Q, CENTRED, FUSED, C>(q, scales, h, x, residual, gamma, beta, scale,      \
                                            amax, eps, rows, cols);                             \
  }

#define BOTH(NAME, Q, CENTRED, FUSED, C)                      \
  QNORM(NAME##_bf16, __nv_bfloat16, Q, CENTRED, FUSED, C)     \
  QNORM(NAME##_fp16, __half, Q, CENTRED, FUSED, C)

typedef VllmDynamic<0, APPLY_DIV, SAT_CLAMP, 0> VllmTokenFp8;
typedef VllmDynamic<128, APPLY_DIV, SAT_CLAMP, 0> VllmGroupFp8;
typedef VllmDynamic<0, APPLY_MUL_INV, SAT_FINITE, 1> VllmTokenInt8;

BOTH(rmsnorm_e4m3_tensor_vllm, E4M3, false, false, VllmTensor)
BOTH(rmsnorm_e4m3_tensor_trtllm, E4M3, false, false, TrtllmTensor)
BOTH(rmsnorm_e4m3_tensor_flashinfer, E4M3, false, false, FlashinferTensor)
BOTH(rmsnorm_e4m3_tensor_te, E4M3, false, false, TeTensor)
BOTH(rmsnorm_e4m3_token_vllm, E4M3, false, false, VllmTokenFp8)
BOTH(rmsnorm_e4m3_token_trtllm, E4M3, false, false, TrtllmToken<true>)
BOTH(rmsnorm_e4m3_group128_vllm, E4M3, false, false, VllmGroupFp8)
BOTH(rmsnorm_int8_token_vllm, INT8, false, false, VllmTokenInt8)
BOTH(rmsnorm_int8_token_trtllm, INT8, false, false, TrtllmToken<false>)
BOTH(rmsnorm_e4m3_mx_te, E4M3, false, false, TeMx)
BOTH(rmsnorm_e2m1_nvfp4_te, E2M1, false, false, TeNvfp4)
BOTH(add_rmsnorm_e4m3_tensor_vllm, E4M3, false, true, VllmTensor)
BOTH(add_rmsnorm_e4m3_token_vllm, E4M3, false, true, VllmTokenFp8)
BOTH(layernorm_e4m3_tensor_te, E4M3, true, false, TeTensor)
BOTH(layernorm_e4m3_token_exact, E4M3, true, false, ExactOnce<0>)
BOTH(layernorm_int8_group128_exact, INT8, true, false, ExactOnce<128>)
