// A vLLM-style RMSNorm, for `normcheck check --spec vllm_rms_norm.toml`: a template over the
// storage type, a strided input (rows padded to input_stride elements), one block of
// min(hidden_size, 1024) threads per token, a shared-memory tree reduction, and vLLM's output
// rounding: x·rstd is rounded to storage *before* the weight multiplies it.
// Row offsets widened, (int64_t)blockIdx.x * hidden_size, as vLLM fixed them (its issue
// #42862: blockIdx.x * hidden_size is an unsigned 32-bit product that wraps past 2^32
// elements -- the check's large_index_u32 run fails the unwidened form).
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

template <typename scalar_t>
__global__ void rms_norm_kernel(scalar_t* __restrict__ out,          // [num_tokens, hidden_size]
                                const scalar_t* __restrict__ input,  // [num_tokens, input_stride]
                                const int64_t input_stride,
                                const scalar_t* __restrict__ weight,  // [hidden_size]
                                const float epsilon, const int num_tokens,
                                const int hidden_size) {
  __shared__ float partial[1024];
  __shared__ float s_rstd;
  float variance = 0.0f;
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const float x = (float)input[blockIdx.x * input_stride + idx];
    variance += x * x;
  }
  partial[threadIdx.x] = variance;
  __syncthreads();
  int width = 1;
  while (width < (int)blockDim.x) width <<= 1;
  for (int s = width / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s && threadIdx.x + s < blockDim.x) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) s_rstd = rsqrtf(partial[0] / hidden_size + epsilon);
  __syncthreads();
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    float x = (float)input[blockIdx.x * input_stride + idx];
    out[(int64_t)blockIdx.x * hidden_size + idx] = ((scalar_t)(x * s_rstd)) * weight[idx];
  }
}

// the instantiations a spec may name
template __global__ void rms_norm_kernel<__half>(__half*, const __half*, const int64_t,
                                                 const __half*, const float, const int, const int);
template __global__ void rms_norm_kernel<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                                        const int64_t, const __nv_bfloat16*,
                                                        const float, const int, const int);
