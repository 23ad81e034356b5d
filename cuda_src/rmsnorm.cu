// RMSNorm and its Gemma form, side by side.
//
//   y = γ·x·rstd            rstd = 1/√(Σx²/D + ε)      (no mean, no β)
//   Gemma: y = (1+γ)·x·rstd
//
// Arguments (the ABI of docs/DESIGN.md): y [rows, cols] output; x [rows, cols] input; gamma [cols]; eps the
// float ε; rows, cols the shape.  Launch: grid = rows blocks, block = 256 threads (any multiple of
// 32 up to 1024).  Limits: cols >= 1.
//
// Entries are named <norm>_rms_<storage>[_<order>] (precision orders: norm_common.cuh).
//
// INDEX (the variants; tests/test_kernels.py keeps this list equal to the entries below)
//   rmsnorm_rms_*        Σx² in one pass, rstd by __frsqrt_rn, y = x·rstd·γ
//   gemma_rmsnorm_rms_*  the same statistics, y = x·rstd·(1+γ)
#include "norm_common.cuh"

template <typename T, int ORDER, bool GEMMA>
__device__ __forceinline__ void rmsnorm_row(T* __restrict__ y, const T* __restrict__ x,
                                            const T* __restrict__ gamma, float eps, int rows,
                                            int cols) {
  typedef Storage<T> S;
  const int row = blockIdx.x;
  if (row >= rows) return;
  const T* xr = x + (size_t)row * cols;
  T* yr = y + (size_t)row * cols;
  float ss = 0.0f;
  for_row(xr, cols, [&](int, float v) { ss = accumulate<T, ORDER>(ss, square<T, ORDER>(v)); });
  const float rstd = inv_sqrt<false>(block_sum<T, ORDER>(ss) / cols + eps);
  for_row(xr, cols, [&](int j, float v) {
    float g = S::to_f(gamma[j]);
    if (GEMMA) g = 1.0f + g;
    yr[j] = S::from_f(v * rstd * g);
  });
}

#define RMSNORM(NAME, T, ORDER, GEMMA)                                                        \
  extern "C" __global__ void __launch_bounds__(1024)                                          \
      NAME(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ gamma, float eps, \
           int rows, int cols) {                                                              \
    rmsnorm_row<T, ORDER, GEMMA>(y, x, gamma, eps, rows, cols);                               \
  }

RMSNORM(rmsnorm_rms_fp32, float, UPCAST_SQUARE, false)
RMSNORM(rmsnorm_rms_fp16_upcast_square, __half, UPCAST_SQUARE, false)
RMSNORM(rmsnorm_rms_fp16_square_upcast, __half, SQUARE_UPCAST, false)
RMSNORM(rmsnorm_rms_fp16_storage_accumulate, __half, STORAGE_ACCUMULATE, false)
RMSNORM(rmsnorm_rms_bf16_upcast_square, __nv_bfloat16, UPCAST_SQUARE, false)
RMSNORM(rmsnorm_rms_bf16_square_upcast, __nv_bfloat16, SQUARE_UPCAST, false)
RMSNORM(rmsnorm_rms_bf16_storage_accumulate, __nv_bfloat16, STORAGE_ACCUMULATE, false)

RMSNORM(gemma_rmsnorm_rms_fp32, float, UPCAST_SQUARE, true)
RMSNORM(gemma_rmsnorm_rms_fp16_upcast_square, __half, UPCAST_SQUARE, true)
RMSNORM(gemma_rmsnorm_rms_fp16_square_upcast, __half, SQUARE_UPCAST, true)
RMSNORM(gemma_rmsnorm_rms_fp16_storage_accumulate, __half, STORAGE_ACCUMULATE, true)
RMSNORM(gemma_rmsnorm_rms_bf16_upcast_square, __nv_bfloat16, UPCAST_SQUARE, true)
RMSNORM(gemma_rmsnorm_rms_bf16_square_upcast, __nv_bfloat16, SQUARE_UPCAST, true)
RMSNORM(gemma_rmsnorm_rms_bf16_storage_accumulate, __nv_bfloat16, STORAGE_ACCUMULATE, true)
