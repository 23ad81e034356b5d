// The spec shapes the field's kernels use, each in the style of a public kernel (our own code):
// the regression corpus of tests/test_spec_shapes.py.  Every kernel here is sound but one.
//
//   vllm_like::rms_norm_kernel<T>       vLLM's RMSNorm: the input's row pitch a plain int64
//                                       argument (input_stride), a shared-memory block sum,
//                                       x·rstd rounded to T, then ·weight (the hf definition)
//   vllm_like::rms_norm_ignores_stride  the same taking input_stride and stepping rows by cols
//                                       (a bug: the padded-row sweep must still catch it)
//   trt_like::invokeLayerNorm<T>        TensorRT-LLM's: a host launcher (the entry) choosing
//                                       the block, a `bool use_shmem` that keeps the row in
//                                       shared memory, two-pass statistics
//   ort_like::SkipRmsNorm<T>            ONNX Runtime's: `T epsilon` (a __half ε) and a
//                                       template kernel instantiated for half
//   padded_rows_rms                     rows on a pitch of cols + 8 the kernel computes itself
//                                       (no argument carries it: the padded sweep cannot move
//                                       it and must say so, not fail it)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

// the sum over a block of any size up to 1024, every thread getting it (each thread's value in
// shared memory, added in turn by thread 0: no lane outside the block is ever read)
__device__ float block_sum(float v) {
  __shared__ float part[1024];
  __shared__ float total;
  part[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int i = 0; i < blockDim.x; ++i) t += part[i];
    total = t;
  }
  __syncthreads();
  const float s = total;
  __syncthreads();
  return s;
}

template <typename T> __device__ float to_float(T v);
template <> __device__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T> __device__ T from_float(float v);
template <> __device__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

}  // namespace

namespace vllm_like {

template <typename scalar_t, bool IGNORE_STRIDE>
__device__ void rms_norm_impl(scalar_t* __restrict__ out, const scalar_t* __restrict__ input,
                              const int64_t input_stride, const scalar_t* __restrict__ weight,
                              const float epsilon, const int num_tokens,
                              const int hidden_size) {
  const int64_t pitch = IGNORE_STRIDE ? hidden_size : input_stride;
  const scalar_t* x = input + blockIdx.x * pitch;
  float variance = 0.f;
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const float v = to_float(x[i]);
    variance += v * v;
  }
  variance = block_sum(variance);
  const float s_variance = rsqrtf(variance / hidden_size + epsilon);
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const float v = to_float(x[i]);
    out[(int64_t)blockIdx.x * hidden_size + i] =  // 64-bit, as vLLM fixed it (#42862)
        from_float<scalar_t>(to_float(from_float<scalar_t>(v * s_variance)) *
                             to_float(weight[i]));
  }
}

template <typename scalar_t>
__global__ void rms_norm_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ input,
                                const int64_t input_stride,
                                const scalar_t* __restrict__ weight, const float epsilon,
                                const int num_tokens, const int hidden_size) {
  rms_norm_impl<scalar_t, false>(out, input, input_stride, weight, epsilon, num_tokens,
                                 hidden_size);
}

template <typename scalar_t>
__global__ void rms_norm_ignores_stride(scalar_t* __restrict__ out,
                                        const scalar_t* __restrict__ input,
                                        const int64_t input_stride,
                                        const scalar_t* __restrict__ weight,
                                        const float epsilon, const int num_tokens,
                                        const int hidden_size) {
  rms_norm_impl<scalar_t, true>(out, input, input_stride, weight, epsilon, num_tokens,
                                hidden_size);
}

template __global__ void rms_norm_kernel<__half>(__half*, const __half*, const int64_t,
                                                 const __half*, const float, const int,
                                                 const int);
template __global__ void rms_norm_ignores_stride<__half>(__half*, const __half*, const int64_t,
                                                         const __half*, const float, const int,
                                                         const int);

}  // namespace vllm_like

namespace trt_like {

template <typename T>
__global__ void generalLayerNorm(const T* input, const T* gamma, const T* beta,
                                 T* normed_output, const float eps, int tokens,
                                 int hidden_dim, bool use_shmem) {
  extern __shared__ float shmem[];
  const int tid = threadIdx.x;
  const T* x = input + (size_t)blockIdx.x * hidden_dim;
  float local_sum = 0.f;
  for (int i = tid; i < hidden_dim; i += blockDim.x) {
    const float v = to_float(x[i]);
    if (use_shmem) shmem[i] = v;
    local_sum += v;
  }
  const float mean = block_sum(local_sum) / hidden_dim;
  float local_var = 0.f;
  for (int i = tid; i < hidden_dim; i += blockDim.x) {
    const float d = (use_shmem ? shmem[i] : to_float(x[i])) - mean;
    local_var += d * d;
  }
  const float variance = block_sum(local_var) / hidden_dim;
  const float s_variance = rsqrtf(variance + eps);
  for (int i = tid; i < hidden_dim; i += blockDim.x) {
    const float v = use_shmem ? shmem[i] : to_float(x[i]);
    normed_output[(size_t)blockIdx.x * hidden_dim + i] =
        from_float<T>((v - mean) * s_variance * to_float(gamma[i]) + to_float(beta[i]));
  }
}

// the project's own launcher: the block from the width, shared memory when the row fits
template <typename T>
void invokeLayerNorm(T* out, const T* input, const T* gamma, const T* beta, const float eps,
                     const int tokens, const int hidden_dim, cudaStream_t stream,
                     bool use_shmem) {
  dim3 grid(tokens);
  dim3 block(min(hidden_dim, 1024));
  block.x = 32 * ((block.x + 31) / 32);
  const size_t bytes = use_shmem ? hidden_dim * sizeof(float) : 0;
  if (bytes >= (48 << 10)) {
    cudaFuncSetAttribute(generalLayerNorm<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         (int)bytes);
  }
  generalLayerNorm<T><<<grid, block, bytes, stream>>>(input, gamma, beta, out, eps, tokens,
                                                      hidden_dim, use_shmem);
}

template void invokeLayerNorm<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                             const __nv_bfloat16*, const __nv_bfloat16*,
                                             const float, const int, const int, cudaStream_t,
                                             bool);

}  // namespace trt_like

namespace ort_like {

template <typename T>
__global__ void SkipRmsNorm(T* output, const T* input, const T* skip, const T* gamma,
                            T* skip_input_bias_add_output, int ld, T epsilon) {
  const int row = blockIdx.x;
  float sum_sq = 0.f;
  for (int i = threadIdx.x; i < ld; i += blockDim.x) {
    const int idx = row * ld + i;
    const float h = to_float(input[idx]) + to_float(skip[idx]);
    skip_input_bias_add_output[idx] = from_float<T>(h);
    sum_sq += h * h;
  }
  const float rstd = rsqrtf(block_sum(sum_sq) / ld + to_float(epsilon));
  for (int i = threadIdx.x; i < ld; i += blockDim.x) {
    const int idx = row * ld + i;
    const float h = to_float(input[idx]) + to_float(skip[idx]);
    output[idx] = from_float<T>(h * rstd * to_float(gamma[i]));
  }
}

template __global__ void SkipRmsNorm<__half>(__half*, const __half*, const __half*,
                                             const __half*, __half*, int, __half);

}  // namespace ort_like

#define ROW_PITCH(cols) ((cols) + 8)

extern "C" __global__ void padded_rows_rms(__half* y, const __half* x, const __half* g,
                                           float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * ROW_PITCH(cols);
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = __half2float(xr[i]);
    s += v * v;
  }
  const float r = rsqrtf(block_sum(s) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2half(__half2float(xr[i]) * r * __half2float(g[i]));
}
