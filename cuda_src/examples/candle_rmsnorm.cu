// A candle-style RMSNorm, for `normcheck check --spec candle_rmsnorm.toml`: extern "C" entries
// stamped out by a macro per storage type (bf16 only where __CUDA_ARCH__ >= 800), the block size
// passed as an argument as well as launched (the host picks 32 threads below 1024 columns and
// 1024 from there), a warp xor-reduction then, over more than one warp, a second one over the
// per-warp sums in a 32-slot shared array, and y = x·rstd·α in float, rounded once.
#include <cuda_fp16.h>
#include <stdint.h>

#define CANDLE_WARP 32

static __device__ __forceinline__ float candle_warp_sum(float v) {
#pragma unroll
  for (int lanes = CANDLE_WARP / 2; lanes > 0; lanes >>= 1)
    v += __shfl_xor_sync(0xffffffff, v, lanes, CANDLE_WARP);
  return v;
}

template <typename T>
__device__ void candle_rmsnorm(const T* src, T* dst, const T* alpha, const int n_cols,
                               const int block_size, const float eps) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const int t = threadIdx.x;
  float sq = 0.0f;
  for (int c = t; c < n_cols; c += block_size) {
    const float v = static_cast<float>(src[row * n_cols + c]);
    sq += v * v;
  }
  sq = candle_warp_sum(sq);
  if (block_size > CANDLE_WARP) {  // 1024 threads: all 32 slots are written
    __shared__ float per_warp[CANDLE_WARP];
    if (t % CANDLE_WARP == 0) per_warp[t / CANDLE_WARP] = sq;
    __syncthreads();
    sq = candle_warp_sum(per_warp[t % CANDLE_WARP]);
  }
  const float inv_rms = rsqrtf(sq / n_cols + eps);
  for (int c = t; c < n_cols; c += block_size) {
    const float v = static_cast<float>(src[row * n_cols + c]);
    dst[row * n_cols + c] = static_cast<T>(inv_rms * v * static_cast<float>(alpha[c]));
  }
}

#define CANDLE_RMSNORM(NAME, T)                                                              \
  extern "C" __global__ void NAME(const T* src, T* dst, const T* alpha, const int n_cols,   \
                                  const int block_size, const float eps) {                  \
    candle_rmsnorm<T>(src, dst, alpha, n_cols, block_size, eps);                             \
  }

CANDLE_RMSNORM(rmsnorm_f32, float)
CANDLE_RMSNORM(rmsnorm_f16, __half)

#if __CUDA_ARCH__ >= 800
#include <cuda_bf16.h>
CANDLE_RMSNORM(rmsnorm_bf16, __nv_bfloat16)
#endif
