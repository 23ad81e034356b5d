// Forward kernels whose failures must be named right (tests/test_backward_causes.py), in the
// default ABI: (y, x, γ[, β], eps, rows, cols), a block per row.
//
// INDEX
//   rms_warp_only_fp32   each warp sums the squares of its own columns and never combines with
//                        the other warps (run with 64 threads): a partial reduction
//   ln_one_pass_fp32     var = E[x²] - E[x]² unclamped: negative on offset rows, rsqrtf gives NaN
//   ln_xhat_fp16         x̂ rounded to fp16 before ×γ + β
#include <cuda_fp16.h>

__device__ float block_sum(float v) {
  __shared__ float s[1024];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
    __syncthreads();
  }
  float r = s[0];
  __syncthreads();
  return r;
}

extern "C" __global__ void rms_warp_only_fp32(float* y, const float* x, const float* gamma,
                                              float eps, int rows, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  float ss = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) ss += xr[j] * xr[j];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float r = rsqrtf(ss / cols + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = xr[j] * r * gamma[j];
}

extern "C" __global__ void ln_one_pass_fp32(float* y, const float* x, const float* gamma,
                                            const float* beta, float eps, int rows, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f, q = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    s += xr[j];
    q += xr[j] * xr[j];
  }
  const float mean = block_sum(s) / cols;
  const float var = block_sum(q) / cols - mean * mean;
  const float r = rsqrtf(var + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = (xr[j] - mean) * r * gamma[j] + beta[j];
}

extern "C" __global__ void ln_xhat_fp16(__half* y, const __half* x, const __half* gamma,
                                        const __half* beta, float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += __half2float(xr[j]);
  const float mean = block_sum(s) / cols;
  float q = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float d = __half2float(xr[j]) - mean;
    q += d * d;
  }
  const float r = rsqrtf(block_sum(q) / cols + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    __half xh = __float2half((__half2float(xr[j]) - mean) * r);
    y[(size_t)blockIdx.x * cols + j] =
        __float2half(__half2float(xh) * __half2float(gamma[j]) + __half2float(beta[j]));
  }
}
