// Backward kernels for tests/test_backward.py: an llm.c-style LayerNorm backward (dx, and dγ/dβ by
// atomics, in one kernel), and planted bugs (among them an int row offset: ln_bwd_int_offset).  fp32 rows; mean and rstd are the saved statistics.
#include <cuda_fp16.h>

#define BUG_NONE 0
#define BUG_NO_MEAN_TERM 1
#define BUG_GAMMA_DROPPED 2
#define BUG_INT_OFFSET 3

__device__ float block_sum(float v) {
  __shared__ float buf[1024];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  float r = buf[0];
  __syncthreads();
  return r;
}

template <int BUG>
__device__ void ln_bwd(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                       const float* gamma, const float* mean, const float* rstd, int rows,
                       int cols) {
  int i = blockIdx.x;
  if (i >= rows) return;
  // the row's offset: 64-bit, or (a planted bug) an int product that wraps past 2^31 elements
  const size_t off = BUG == BUG_INT_OFFSET ? (size_t)(int)(i * cols) : (size_t)i * cols;
  const float* dyr = dy + off;
  const float* xr = x + off;
  float m = mean[i], r = rstd[i], s1 = 0.f, s2 = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float g = BUG == BUG_GAMMA_DROPPED ? dyr[j] : dyr[j] * gamma[j];
    s1 += g;
    s2 += g * (xr[j] - m) * r;
  }
  s1 = block_sum(s1) / cols;
  s2 = block_sum(s2) / cols;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float xh = (xr[j] - m) * r;
    float g = BUG == BUG_GAMMA_DROPPED ? dyr[j] : dyr[j] * gamma[j];
    dx[off + j] = r * (g - (BUG == BUG_NO_MEAN_TERM ? 0.f : s1) - xh * s2);
    atomicAdd(&dgamma[j], dyr[j] * xh);
    atomicAdd(&dbeta[j], dyr[j]);
  }
}

extern "C" __global__ void ln_bwd_good(float* dx, float* dgamma, float* dbeta, const float* dy,
                                       const float* x, const float* gamma, const float* mean,
                                       const float* rstd, int rows, int cols) {
  ln_bwd<BUG_NONE>(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, cols);
}
extern "C" __global__ void ln_bwd_int_offset(float* dx, float* dgamma, float* dbeta,
                                             const float* dy, const float* x, const float* gamma,
                                             const float* mean, const float* rstd, int rows,
                                             int cols) {
  ln_bwd<BUG_INT_OFFSET>(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, cols);
}
extern "C" __global__ void ln_bwd_no_mean_term(float* dx, float* dgamma, float* dbeta,
                                               const float* dy, const float* x,
                                               const float* gamma, const float* mean,
                                               const float* rstd, int rows, int cols) {
  ln_bwd<BUG_NO_MEAN_TERM>(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, cols);
}
extern "C" __global__ void ln_bwd_gamma_dropped(float* dx, float* dgamma, float* dbeta,
                                                const float* dy, const float* x,
                                                const float* gamma, const float* mean,
                                                const float* rstd, int rows, int cols) {
  ln_bwd<BUG_GAMMA_DROPPED>(dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, cols);
}

// dγ, dβ a thread per column over every row; dβ accumulated in half (a planted bug)
extern "C" __global__ void ln_dparams_dbeta_half(float* dgamma, __half* dbeta, const float* dy,
                                                 const float* x, const float* mean,
                                                 const float* rstd, int rows, int cols) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float ag = 0.f;
  __half ab = __float2half(0.f);
  for (int i = 0; i < rows; ++i) {
    float d = dy[(size_t)i * cols + j];
    ag += d * (x[(size_t)i * cols + j] - mean[i]) * rstd[i];
    ab = __hadd(ab, __float2half(d));
  }
  dgamma[j] = ag;
  dbeta[j] = ab;
}

// dγ summed over the wrong axis: entry j holds row j's Σ_k dy·x̂ (a planted bug)
extern "C" __global__ void ln_dparams_wrong_axis(float* dgamma, float* dbeta, const float* dy,
                                                 const float* x, const float* mean,
                                                 const float* rstd, int rows, int cols) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float ag = 0.f, ab = 0.f;
  for (int i = 0; i < rows; ++i) ab += dy[(size_t)i * cols + j];
  if (j < rows)
    for (int k = 0; k < cols; ++k)
      ag += dy[(size_t)j * cols + k] * (x[(size_t)j * cols + k] - mean[j]) * rstd[j];
  dgamma[j] = ag;
  dbeta[j] = ab;
}

// dγ with γ inside the sum: Σ dy·γ·x̂, the dx term g = dy·γ reused for dweight (a planted bug)
extern "C" __global__ void ln_dparams_gamma_inside(float* dgamma, float* dbeta, const float* dy,
                                                   const float* x, const float* gamma,
                                                   const float* mean, const float* rstd,
                                                   int rows, int cols) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float ag = 0.f, ab = 0.f;
  for (int i = 0; i < rows; ++i) {
    float d = dy[(size_t)i * cols + j];
    ag += d * gamma[j] * (x[(size_t)i * cols + j] - mean[i]) * rstd[i];
    ab += d;
  }
  dgamma[j] = ag;
  dbeta[j] = ab;
}
