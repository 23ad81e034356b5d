// TensorRT-LLM-style RMSNorm fused with fp8 / int8 quantisation (our own code, written the way
// cpp/tensorrt_llm/kernels/rmsnormKernels.cu is): one block per token, the row kept in shared
// memory, blockReduceSum / blockReduceMax over warps, rsqrtf; y = (T)(x · s_variance · γ) rounded
// once to T, then
//  - per tensor: q = cvt(float(y) · scale_orig_quant), the satfinite conversion of __nv_fp8_e4m3;
//  - per token: amax over |y| starting from 1e-6f as T holds it (bf16 9.98e-7), the multiplier qmax / amax (capped at 448·512
//    for fp8), the stored scale max(amax / qmax, 1/(448·512)) (fp8) or amax / qmax (int8), and
//    int8 by cvt.rni.sat.s8.f32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <type_traits>

namespace trtllm_like {

template <typename T>
__device__ __forceinline__ T warpReduceSum(T val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) val += __shfl_xor_sync(0xffffffff, val, mask, 32);
  return val;
}
template <typename T>
__device__ __forceinline__ T blockReduceSum(T val) {
  static __shared__ T shared[32];
  int lane = threadIdx.x & 0x1f, wid = threadIdx.x >> 5;
  val = warpReduceSum<T>(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();
  val = (threadIdx.x < (blockDim.x / 32.f)) ? shared[lane] : (T)(0.0f);
  val = warpReduceSum<T>(val);
  return val;
}
template <typename T>
__device__ __forceinline__ T warpReduceMax(T val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) val = max(val, __shfl_xor_sync(0xffffffff, val, mask, 32));
  return val;
}
template <typename T>
__device__ __forceinline__ T blockReduceMax(T val) {
  static __shared__ T shared[32];
  int lane = threadIdx.x & 0x1f, wid = threadIdx.x >> 5;
  val = warpReduceMax(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();
  val = (threadIdx.x < (blockDim.x / 32.f)) ? shared[lane] : -1e20f;
  val = warpReduceMax(val);
  return val;
}

template <typename Q>
__device__ __forceinline__ Q cuda_cast(float v);
template <>
__device__ __forceinline__ __nv_fp8_e4m3 cuda_cast<__nv_fp8_e4m3>(float v) {
  return __nv_fp8_e4m3(v);  // satfinite, round to nearest even
}
template <>
__device__ __forceinline__ int8_t cuda_cast<int8_t>(float v) {
  union { int8_t int8[4]; int16_t int16[2]; } int8;
  asm volatile("cvt.rni.sat.s8.f32 %0, %1;" : "=h"(int8.int16[0]) : "f"(v));
  return int8.int8[0];
}

template <typename Q>
struct QuantTypeStaticVals;
template <>
struct QuantTypeStaticVals<__nv_fp8_e4m3> {
  static constexpr float MAX_VAL = 448.f, MIN_SCALING_FACTOR = 1.f / (448.f * 512.f),
                         MIN_SCALING_FACTOR_RCP = 448.f * 512.f;
};
template <>
struct QuantTypeStaticVals<int8_t> {
  static constexpr float MAX_VAL = 127.f, MIN_SCALING_FACTOR = 0.f, MIN_SCALING_FACTOR_RCP = 0.f;
};

template <typename T, typename QuantT>
__global__ void generalRmsNorm(const T* input, const T* gamma, const float eps, int tokens,
                               int hidden_dim, const float* scale_orig_quant_per_tensor,
                               float* scale_orig_quant_per_token, QuantT* normed_output_quant) {
  constexpr float MAX = QuantTypeStaticVals<QuantT>::MAX_VAL;
  constexpr bool FP8 = std::is_same<QuantT, __nv_fp8_e4m3>::value;
  extern __shared__ __align__(sizeof(float)) char _shmem[];
  T* shmem = reinterpret_cast<T*>(_shmem);
  __shared__ float s_variance;
  const int tidx = threadIdx.x, bidx = blockIdx.x;
  const bool with_per_token_scaling = scale_orig_quant_per_token != nullptr;
  const float scale_orig_quant = with_per_token_scaling ? 0.f : *scale_orig_quant_per_tensor;
  float local_var_sum = 0.0f;
  for (int i = tidx; i < hidden_dim; i += blockDim.x) {
    const T val = input[bidx * hidden_dim + i];
    shmem[i] = val;
    const float v = static_cast<float>(val);
    local_var_sum += v * v;
  }
  float variance = blockReduceSum(local_var_sum);
  if (threadIdx.x == 0) s_variance = rsqrtf(variance / hidden_dim + eps);
  __syncthreads();
  float amax = static_cast<float>(static_cast<T>(1e-6f));  // T_scalar amax = 1e-6f: T's value
  for (int i = tidx; i < hidden_dim; i += blockDim.x) {
    const T out = static_cast<T>(static_cast<float>(shmem[i]) * s_variance *
                                 static_cast<float>(gamma[i]));
    if (with_per_token_scaling) {
      amax = fmaxf(amax, fabsf(static_cast<float>(out)));
      shmem[i] = out;
    } else {
      normed_output_quant[bidx * hidden_dim + i] =
          cuda_cast<QuantT>(static_cast<float>(out) * scale_orig_quant);
    }
  }
  if (with_per_token_scaling) {
    float abs_max_f = blockReduceMax(amax);
    __shared__ float s_dynamic_scale;
    if (tidx == 0) {
      float dynamic_per_token_scale = MAX / abs_max_f;
      if (FP8) dynamic_per_token_scale = fminf(dynamic_per_token_scale,
                                               QuantTypeStaticVals<QuantT>::MIN_SCALING_FACTOR_RCP);
      s_dynamic_scale = dynamic_per_token_scale;
      scale_orig_quant_per_token[bidx] =
          FP8 ? fmaxf(abs_max_f / MAX, QuantTypeStaticVals<QuantT>::MIN_SCALING_FACTOR)
              : abs_max_f / MAX;
    }
    __syncthreads();
    for (int i = tidx; i < hidden_dim; i += blockDim.x)
      normed_output_quant[bidx * hidden_dim + i] =
          cuda_cast<QuantT>(static_cast<float>(shmem[i]) * s_dynamic_scale);
  }
}

}  // namespace trtllm_like
