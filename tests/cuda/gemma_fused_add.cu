// Gemma's fused residual add + RMSNorm, in FlashInfer's style (gemma_fused_add_rmsnorm): x and
// the residual are added in float, the sum is stored back into the residual (rounded to the
// storage format) and normalised as it was stored, y = round(h * rstd * (1 + w)).  For
// tests/test_norms_by_flags.py: a norm that combines existing flags, with no built-in kernel.
#include <cuda_fp16.h>

template <bool GEMMA>
__device__ void gemma_add(__half* input, __half* residual, const __half* weight, float eps,
                          int rows, int cols) {
  __shared__ float partial[32];
  __shared__ float s_rstd;
  const int r = blockIdx.x;
  if (r >= rows) return;
  const size_t row = (size_t)r * cols;  // 64-bit: rows * cols passes 2^31
  float ss = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float h = __half2float(input[row + c]) + __half2float(residual[row + c]);
    __half hs = __float2half(h);
    residual[row + c] = hs;
    float hf = __half2float(hs);
    ss += hf * hf;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) s_rstd = rsqrtf(v / cols + eps);
  }
  __syncthreads();
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float w = __half2float(weight[c]);
    float h = __half2float(residual[row + c]);
    input[row + c] = __float2half(h * s_rstd * (GEMMA ? 1.f + w : w));
  }
}

// the kernel as FlashInfer writes it: (1 + w)
extern "C" __global__ void gemma_fused_add_rmsnorm(__half* input, __half* residual,
                                                   const __half* weight, float eps, int rows,
                                                   int cols) {
  gemma_add<true>(input, residual, weight, eps, rows, cols);
}
// the planted bug: γ where Gemma's norm scales by 1 + γ
extern "C" __global__ void gemma_fused_add_rmsnorm_plain_w(__half* input, __half* residual,
                                                           const __half* weight, float eps,
                                                           int rows, int cols) {
  gemma_add<false>(input, residual, weight, eps, rows, cols);
}
