// vLLM-style RMSNorm fused with fp8 / int8 quantisation, for `normcheck check` with the specs
// beside this file (our own code, written the way csrc/layernorm_quant_kernels.cu and
// csrc/quantization/fused_kernels/ are): cub::BlockReduce<float, 1024> over the launched threads,
// rsqrtf, y rounded as the Llama RMSNorm rounds it ((T)(x·rstd) · weight in T), then
//  - static fp8: × (1/scale), clamped to ±448 with fmax/fmin, then a non-saturating cast (the
//    c10 Float8_e4m3fn cast: NaN above 464); the fused form adds the residual in T in place and
//    normalises that rounded sum;
//  - dynamic per token: amax of the rounded y, s = max(min(amax, scale_ub)/qmax, 1/(qmax·512))
//    (int8: FLT_EPSILON), fp8 divides by s, int8 multiplies by 1/s and converts with
//    cvt.rni.sat.s8.f32; the residual is added in float and written back rounded.
// Row offsets widened, (int64_t)blockIdx.x * hidden_size, as vLLM fixed them (its issue
// #42862: blockIdx.x * hidden_size is an unsigned 32-bit product that wraps past 2^32
// elements -- the check's large_index_u32 run fails the unwidened form).
#include <cub/cub.cuh>
#include <cuda/std/functional>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <float.h>
#include <stdint.h>
#include <type_traits>

namespace vllm_like {

struct fp8_e4m3 {  // the storage of c10::Float8_e4m3fn; its cast from float is RNE, NaN past 464
  uint8_t x;
  __device__ static fp8_e4m3 from(float v) {
    fp8_e4m3 r;
    r.x = __nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E4M3);
    return r;
  }
};

template <typename Q>
struct quant_type_max;
template <>
struct quant_type_max<fp8_e4m3> {
  static constexpr float val = 448.0f;
};
template <>
struct quant_type_max<int8_t> {
  static constexpr float val = 127.0f;
};

template <typename Q>
__device__ __forceinline__ float min_scaling_factor() {
  return std::is_same<Q, int8_t>::value ? FLT_EPSILON : 1.0f / (quant_type_max<Q>::val * 512.f);
}

__device__ __forceinline__ fp8_e4m3 scaled_fp8_conversion(float val, float scale, bool inverted) {
  float x = inverted ? val * scale : val / scale;
  float r = fmaxf(-448.0f, fminf(x, 448.0f));
  return fp8_e4m3::from(r);
}

__device__ __forceinline__ int8_t float_to_int8_rn(float x) {
  uint32_t dst;
  asm volatile("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(dst) : "f"(x));
  return reinterpret_cast<const int8_t&>(dst);
}

template <typename Q>
__device__ __forceinline__ Q quant_fn(float x, float scale, bool inverted);
template <>
__device__ __forceinline__ fp8_e4m3 quant_fn<fp8_e4m3>(float x, float scale, bool inverted) {
  return scaled_fp8_conversion(x, scale, inverted);
}
template <>
__device__ __forceinline__ int8_t quant_fn<int8_t>(float x, float scale, bool inverted) {
  return float_to_int8_rn(inverted ? x * scale : x / scale);
}

// static per-tensor fp8
template <typename scalar_t>
__global__ void rms_norm_static_fp8_quant_kernel(fp8_e4m3* __restrict__ out,
                                                 const scalar_t* __restrict__ input,
                                                 const int input_stride,
                                                 const scalar_t* __restrict__ weight,
                                                 const float* __restrict__ scale,
                                                 const float epsilon, const int num_tokens,
                                                 const int hidden_size) {
  __shared__ float s_variance;
  float variance = 0.0f;
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const float x = (float)input[(int64_t)blockIdx.x * input_stride + idx];
    variance += x * x;
  }
  using BlockReduce = cub::BlockReduce<float, 1024>;
  __shared__ typename BlockReduce::TempStorage reduceStore;
  variance = BlockReduce(reduceStore).Reduce(variance, cuda::std::plus<>{}, blockDim.x);
  if (threadIdx.x == 0) s_variance = rsqrtf(variance / hidden_size + epsilon);
  __syncthreads();
  const float scale_inv = 1.0f / *scale;  // invert once: multiply below
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    float x = (float)input[(int64_t)blockIdx.x * input_stride + idx];
    float const out_norm = ((scalar_t)(x * s_variance)) * weight[idx];
    out[(int64_t)blockIdx.x * hidden_size + idx] = scaled_fp8_conversion(out_norm, scale_inv, true);
  }
}

// fused residual add + static fp8: residual <- x + residual (in T), normalise that sum
template <typename scalar_t>
__global__ void fused_add_rms_norm_static_fp8_quant_kernel(
    fp8_e4m3* __restrict__ out, const scalar_t* __restrict__ input, const int input_stride,
    scalar_t* __restrict__ residual, const scalar_t* __restrict__ weight,
    const float* __restrict__ scale, const float epsilon, const int num_tokens,
    const int hidden_size) {
  __shared__ float s_variance;
  float variance = 0.0f;
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    scalar_t z = input[(int64_t)blockIdx.x * input_stride + idx];
    z = (scalar_t)((float)z + (float)residual[(int64_t)blockIdx.x * hidden_size + idx]);
    const float x = (float)z;
    variance += x * x;
    residual[(int64_t)blockIdx.x * hidden_size + idx] = z;
  }
  using BlockReduce = cub::BlockReduce<float, 1024>;
  __shared__ typename BlockReduce::TempStorage reduceStore;
  variance = BlockReduce(reduceStore).Reduce(variance, cuda::std::plus<>{}, blockDim.x);
  if (threadIdx.x == 0) s_variance = rsqrtf(variance / hidden_size + epsilon);
  __syncthreads();
  const float scale_inv = 1.0f / *scale;
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    float x = (float)residual[(int64_t)blockIdx.x * hidden_size + idx];
    float const out_norm = ((scalar_t)(x * s_variance)) * weight[idx];
    out[(int64_t)blockIdx.x * hidden_size + idx] = scaled_fp8_conversion(out_norm, scale_inv, true);
  }
}

// dynamic per token: rms, then the token's scale, then norm + quant (three reads of x)
template <typename scalar_t, bool has_residual>
__device__ void compute_rms(float* rms, const scalar_t* __restrict__ input, int hidden_size,
                            float epsilon, const scalar_t* __restrict__ residual) {
  const int64_t token_offset = blockIdx.x * static_cast<int64_t>(hidden_size);
  float ss = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    float x = static_cast<float>(input[token_offset + i]);
    if (has_residual) x += static_cast<float>(residual[token_offset + i]);
    ss += x * x;
  }
  using BlockReduce = cub::BlockReduce<float, 1024>;
  __shared__ typename BlockReduce::TempStorage reduceStore;
  ss = BlockReduce(reduceStore).Reduce(ss, cuda::std::plus<>{}, blockDim.x);
  __shared__ float s_rms;
  if (threadIdx.x == 0) s_rms = rsqrtf(ss / hidden_size + epsilon);
  __syncthreads();
  *rms = s_rms;
}

template <typename scalar_t, typename Q, bool has_residual>
__device__ void compute_dynamic_per_token_scales(float* token_scale, float* __restrict__ scales,
                                                 const scalar_t* __restrict__ input,
                                                 const scalar_t* __restrict__ weight, float rms,
                                                 const float* __restrict__ scale_ub,
                                                 int hidden_size,
                                                 const scalar_t* __restrict__ residual) {
  const int64_t token_offset = blockIdx.x * static_cast<int64_t>(hidden_size);
  float amax = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    float x = static_cast<float>(input[token_offset + i]);
    if (has_residual) x += static_cast<float>(residual[token_offset + i]);
    x = static_cast<float>(static_cast<scalar_t>(x * rms) * weight[i]);
    amax = fmaxf(amax, fabsf(x));
  }
  using BlockReduce = cub::BlockReduce<float, 1024>;
  __shared__ typename BlockReduce::TempStorage reduceStore;
  amax = BlockReduce(reduceStore).Reduce(amax, cub::Max{}, blockDim.x);
  __shared__ float s_token_scale;
  if (threadIdx.x == 0) {
    float scale = scale_ub ? fminf(amax, *scale_ub) : amax;
    scale = fmaxf(scale / quant_type_max<Q>::val, min_scaling_factor<Q>());
    s_token_scale = scale;
    scales[blockIdx.x] = scale;
  }
  __syncthreads();
  *token_scale = s_token_scale;
}

template <typename scalar_t, typename Q, bool has_residual>
__global__ void rms_norm_dynamic_per_token_quant_kernel(
    Q* __restrict__ out, float* __restrict__ scales, const scalar_t* __restrict__ input,
    const scalar_t* __restrict__ weight, const float* scale_ub, const float var_epsilon,
    const int hidden_size, scalar_t* __restrict__ residual) {
  float rms, token_scale;
  compute_rms<scalar_t, has_residual>(&rms, input, hidden_size, var_epsilon, residual);
  compute_dynamic_per_token_scales<scalar_t, Q, has_residual>(
      &token_scale, scales, input, weight, rms, scale_ub, hidden_size, residual);
  const bool inverted = std::is_same<Q, int8_t>::value;  // fp8: divide (to match FBGemm)
  if (inverted) token_scale = 1.0f / token_scale;
  __syncthreads();  // every thread has read the residual before it is overwritten
  const int64_t token_offset = blockIdx.x * static_cast<int64_t>(hidden_size);
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    float x = static_cast<float>(input[token_offset + i]);
    if (has_residual) {
      x += static_cast<float>(residual[token_offset + i]);
      residual[token_offset + i] = static_cast<scalar_t>(x);
    }
    x = static_cast<float>(static_cast<scalar_t>(x * rms) * weight[i]);
    out[token_offset + i] = quant_fn<Q>(x, token_scale, inverted);
  }
}

}  // namespace vllm_like
