// vLLM-style RMSNorm and fused residual add + RMSNorm, for `normcheck check` with the specs beside
// this file: the block reduction is cub::BlockReduce<float, 1024> over the launched threads
// (the num_valid overload, with libcu++'s cuda::std::plus<>), rstd comes from rsqrtf, and the
// output is rounded as Hugging Face's Llama RMSNorm rounds it: x·rstd to the storage type first,
// then times the weight in that type.  The fused kernel works in place: `input` holds x on entry
// and y on exit, `residual` holds the residual on entry and h = x + residual (rounded) on exit;
// its vectorised form (width 8: 16-byte structs of 8 halves) is chosen at compile time.
// Row offsets widened, (int64_t)blockIdx.x * hidden_size, as vLLM fixed them (its issue
// #42862: blockIdx.x * hidden_size is an unsigned 32-bit product that wraps past 2^32
// elements -- the check's large_index_u32 run fails the unwidened form).
#include <cub/cub.cuh>
#include <cuda/std/functional>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <type_traits>

namespace vllm_like {

template <typename T>
struct F16x8 {  // 8 values of a 16-bit type, 16 bytes: one vector load
  T data[8];
  __device__ F16x8& operator+=(const F16x8& o) {
    for (int i = 0; i < 8; ++i) data[i] = T(float(data[i]) + float(o.data[i]));
    return *this;
  }
  __device__ F16x8& operator*=(float s) {
    for (int i = 0; i < 8; ++i) data[i] = T(float(data[i]) * s);
    return *this;
  }
  __device__ F16x8& operator*=(const F16x8& o) {
    for (int i = 0; i < 8; ++i) data[i] = T(float(data[i]) * float(o.data[i]));
    return *this;
  }
  __device__ float sum_squares() const {
    float s = 0.f;
    for (int i = 0; i < 8; ++i) {
      float v = float(data[i]);
      s += v * v;
    }
    return s;
  }
};

template <typename scalar_t>
__global__ void rms_norm_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ input,
                                const int64_t input_stride, const scalar_t* __restrict__ weight,
                                const float epsilon, const int num_tokens, const int hidden_size) {
  __shared__ float s_variance;
  float variance = 0.0f;
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const float x = (float)input[blockIdx.x * input_stride + idx];
    variance += x * x;
  }
  using BlockReduce = cub::BlockReduce<float, 1024>;
  __shared__ typename BlockReduce::TempStorage reduceStore;
  variance = BlockReduce(reduceStore).Reduce(variance, cuda::std::plus<>{}, blockDim.x);
  if (threadIdx.x == 0) s_variance = rsqrtf(variance / hidden_size + epsilon);
  __syncthreads();
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    float x = (float)input[blockIdx.x * input_stride + idx];
    out[(int64_t)blockIdx.x * hidden_size + idx] = ((scalar_t)(x * s_variance)) * weight[idx];
  }
}

// the same kernel with the block reduction written with warp shuffles (normcheck bench cub
// compares the time a check of each takes)
__device__ __forceinline__ float warp_sum_shfl(float v, int valid) {
  const int lane = threadIdx.x % 32;
  for (int o = 1; o < 32; o <<= 1) {  // lanes past the block's end exist on no GPU either
    float t = __shfl_down_sync(0xffffffffu, v, o);
    if (lane + o < valid) v += t;
  }
  return v;
}
__device__ __forceinline__ float block_sum_shfl(float v) {
  __shared__ float partial[32];
  const int warp = threadIdx.x / 32, nwarps = (blockDim.x + 31) / 32;
  v = warp_sum_shfl(v, min(32, (int)blockDim.x - warp * 32));
  if (threadIdx.x % 32 == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_sum_shfl(threadIdx.x < nwarps ? partial[threadIdx.x] : 0.f, nwarps);
  return v;
}
template <typename scalar_t>
__global__ void rms_norm_kernel_shfl(scalar_t* __restrict__ out, const scalar_t* __restrict__ input,
                                     const int64_t input_stride, const scalar_t* __restrict__ weight,
                                     const float epsilon, const int num_tokens, const int hidden_size) {
  __shared__ float s_variance;
  float variance = 0.0f;
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const float x = (float)input[blockIdx.x * input_stride + idx];
    variance += x * x;
  }
  variance = block_sum_shfl(variance);
  if (threadIdx.x == 0) s_variance = rsqrtf(variance / hidden_size + epsilon);
  __syncthreads();
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    float x = (float)input[blockIdx.x * input_stride + idx];
    out[(int64_t)blockIdx.x * hidden_size + idx] = ((scalar_t)(x * s_variance)) * weight[idx];
  }
}

// vectorised: hidden_size and input_stride multiples of the width (16-byte loads)
template <typename scalar_t, int width>
__global__ std::enable_if_t<(width > 0)> fused_add_rms_norm_kernel(
    scalar_t* __restrict__ input, const int64_t input_stride, scalar_t* __restrict__ residual,
    const scalar_t* __restrict__ weight, const float epsilon, const int num_tokens,
    const int hidden_size) {
  const int vec_hidden = hidden_size / width;
  const int64_t vec_stride = input_stride / width;
  __shared__ float s_variance;
  float variance = 0.0f;
  auto* input_v = reinterpret_cast<F16x8<scalar_t>*>(input);
  auto* residual_v = reinterpret_cast<F16x8<scalar_t>*>(residual);
  auto* weight_v = reinterpret_cast<const F16x8<scalar_t>*>(weight);
  for (int idx = threadIdx.x; idx < vec_hidden; idx += blockDim.x) {
    F16x8<scalar_t> t = input_v[blockIdx.x * vec_stride + idx];
    t += residual_v[(int64_t)blockIdx.x * vec_hidden + idx];
    variance += t.sum_squares();
    residual_v[(int64_t)blockIdx.x * vec_hidden + idx] = t;
  }
  using BlockReduce = cub::BlockReduce<float, 1024>;
  __shared__ typename BlockReduce::TempStorage reduceStore;
  variance = BlockReduce(reduceStore).Reduce(variance, cuda::std::plus<>{}, blockDim.x);
  if (threadIdx.x == 0) s_variance = rsqrtf(variance / hidden_size + epsilon);
  __syncthreads();
  for (int idx = threadIdx.x; idx < vec_hidden; idx += blockDim.x) {
    F16x8<scalar_t> t = residual_v[(int64_t)blockIdx.x * vec_hidden + idx];
    t *= s_variance;
    t *= weight_v[idx];
    input_v[blockIdx.x * vec_stride + idx] = t;
  }
}

// generic: any hidden size
template <typename scalar_t, int width>
__global__ std::enable_if_t<(width == 0)> fused_add_rms_norm_kernel(
    scalar_t* __restrict__ input, const int64_t input_stride, scalar_t* __restrict__ residual,
    const scalar_t* __restrict__ weight, const float epsilon, const int num_tokens,
    const int hidden_size) {
  __shared__ float s_variance;
  float variance = 0.0f;
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    scalar_t z = input[blockIdx.x * input_stride + idx];
    z += residual[(int64_t)blockIdx.x * hidden_size + idx];
    float x = (float)z;
    variance += x * x;
    residual[(int64_t)blockIdx.x * hidden_size + idx] = z;
  }
  using BlockReduce = cub::BlockReduce<float, 1024>;
  __shared__ typename BlockReduce::TempStorage reduceStore;
  variance = BlockReduce(reduceStore).Reduce(variance, cuda::std::plus<>{}, blockDim.x);
  if (threadIdx.x == 0) s_variance = rsqrtf(variance / hidden_size + epsilon);
  __syncthreads();
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    float x = (float)residual[(int64_t)blockIdx.x * hidden_size + idx];
    input[blockIdx.x * input_stride + idx] = ((scalar_t)(x * s_variance)) * weight[idx];
  }
}

}  // namespace vllm_like
