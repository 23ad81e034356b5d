// LayerNorm, three ways to get the statistics, side by side.
//
//   y = γ·(x - μ)·rstd + β,   μ = Σx/D,   var = Σ(x-μ)²/D (population),   rstd = 1/√(var + ε)
//
// Arguments (the ABI of docs/DESIGN.md): y [rows, cols] output; x [rows, cols] input; gamma, beta [cols]
// (may not be null); eps the float ε as the caller passes it; rows, cols the shape.  Launch: grid
// = rows blocks, block = 256 threads (any multiple of 32 up to 1024).  Limits: cols >= 1.
//
// Each algorithm exists for float, __half and __nv_bfloat16 storage, and for 16-bit storage in
// each precision order (norm_common.cuh).  Entries are named
// layernorm_<algorithm>_<storage>[_<order>][_fast].
//
// INDEX (the variants; tests/test_kernels.py keeps this list equal to the entries below)
//   layernorm_naive_*          one pass: Σx and Σx², var = E[x²] - E[x]², unclamped
//   layernorm_two_pass_*       mean first, then Σ(x-μ)² over the row re-read (one launch)
//   layernorm_welford_*        per-thread Welford updates, Chan's merge across lanes and warps
//   layernorm_two_pass_*_fast  rstd by rsqrtf (the approximate intrinsic), not __frsqrt_rn
#include "norm_common.cuh"

#define NAIVE 0
#define TWO_PASS 1
#define WELFORD 2

template <typename T, int ALGO, int ORDER, bool FAST>
__device__ __forceinline__ void layernorm_row(T* __restrict__ y, const T* __restrict__ x,
                                              const T* __restrict__ gamma,
                                              const T* __restrict__ beta, float eps, int rows,
                                              int cols) {
  typedef Storage<T> S;
  const int row = blockIdx.x;
  if (row >= rows) return;
  const T* xr = x + (size_t)row * cols;
  T* yr = y + (size_t)row * cols;
  float mean, var;
  if (ALGO == NAIVE) {
    // one pass over the row: Σx and Σx² together
    float s = 0.0f, ss = 0.0f;
    for_row(xr, cols, [&](int, float v) {
      s = accumulate<T, ORDER>(s, v);
      ss = accumulate<T, ORDER>(ss, square<T, ORDER>(v));
    });
    s = block_sum<T, ORDER>(s);
    ss = block_sum<T, ORDER>(ss);
    mean = s / cols;
    var = ss / cols - mean * mean;  // E[x²] - E[x]²: catastrophic cancellation, not clamped
  } else if (ALGO == TWO_PASS) {
    // pass 1: the mean; pass 2: squared deviations from it
    float s = 0.0f;
    for_row(xr, cols, [&](int, float v) { s = accumulate<T, ORDER>(s, v); });
    mean = block_sum<T, ORDER>(s) / cols;
    if (ORDER == STORAGE_ACCUMULATE) mean = in_storage<T>(mean);
    float ss = 0.0f;
    for_row(xr, cols, [&](int, float v) {
      float d = v - mean;
      if (ORDER == STORAGE_ACCUMULATE) d = in_storage<T>(d);
      ss = accumulate<T, ORDER>(ss, square<T, ORDER>(d));
    });
    var = block_sum<T, ORDER>(ss) / cols;
  } else {
    // Welford: a running (n, mean, M2) per thread, merged pairwise
    Welford w = {0.0f, 0.0f, 0.0f};
    for_row(xr, cols, [&](int, float v) { welford_push<T, ORDER>(w, v); });
    w = block_welford<T, ORDER>(w);
    mean = w.mean;
    var = w.m2 / cols;
  }
  const float rstd = inv_sqrt<FAST>(var + eps);
  for_row(xr, cols, [&](int j, float v) {
    float g = S::to_f(gamma[j]), b = S::to_f(beta[j]);
    yr[j] = S::from_f((v - mean) * rstd * g + b);
  });
}

#define LAYERNORM(NAME, T, ALGO, ORDER, FAST)                                                 \
  extern "C" __global__ void __launch_bounds__(1024)                                          \
      NAME(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ gamma,          \
           const T* __restrict__ beta, float eps, int rows, int cols) {                       \
    layernorm_row<T, ALGO, ORDER, FAST>(y, x, gamma, beta, eps, rows, cols);                  \
  }

LAYERNORM(layernorm_naive_fp32, float, NAIVE, UPCAST_SQUARE, false)
LAYERNORM(layernorm_naive_fp16_upcast_square, __half, NAIVE, UPCAST_SQUARE, false)
LAYERNORM(layernorm_naive_fp16_square_upcast, __half, NAIVE, SQUARE_UPCAST, false)
LAYERNORM(layernorm_naive_fp16_storage_accumulate, __half, NAIVE, STORAGE_ACCUMULATE, false)
LAYERNORM(layernorm_naive_bf16_upcast_square, __nv_bfloat16, NAIVE, UPCAST_SQUARE, false)
LAYERNORM(layernorm_naive_bf16_square_upcast, __nv_bfloat16, NAIVE, SQUARE_UPCAST, false)
LAYERNORM(layernorm_naive_bf16_storage_accumulate, __nv_bfloat16, NAIVE, STORAGE_ACCUMULATE, false)

LAYERNORM(layernorm_two_pass_fp32, float, TWO_PASS, UPCAST_SQUARE, false)
LAYERNORM(layernorm_two_pass_fp16_upcast_square, __half, TWO_PASS, UPCAST_SQUARE, false)
LAYERNORM(layernorm_two_pass_fp16_square_upcast, __half, TWO_PASS, SQUARE_UPCAST, false)
LAYERNORM(layernorm_two_pass_fp16_storage_accumulate, __half, TWO_PASS, STORAGE_ACCUMULATE, false)
LAYERNORM(layernorm_two_pass_bf16_upcast_square, __nv_bfloat16, TWO_PASS, UPCAST_SQUARE, false)
LAYERNORM(layernorm_two_pass_bf16_square_upcast, __nv_bfloat16, TWO_PASS, SQUARE_UPCAST, false)
LAYERNORM(layernorm_two_pass_bf16_storage_accumulate, __nv_bfloat16, TWO_PASS, STORAGE_ACCUMULATE, false)

LAYERNORM(layernorm_welford_fp32, float, WELFORD, UPCAST_SQUARE, false)
LAYERNORM(layernorm_welford_fp16_upcast_square, __half, WELFORD, UPCAST_SQUARE, false)
LAYERNORM(layernorm_welford_fp16_square_upcast, __half, WELFORD, SQUARE_UPCAST, false)
LAYERNORM(layernorm_welford_fp16_storage_accumulate, __half, WELFORD, STORAGE_ACCUMULATE, false)
LAYERNORM(layernorm_welford_bf16_upcast_square, __nv_bfloat16, WELFORD, UPCAST_SQUARE, false)
LAYERNORM(layernorm_welford_bf16_square_upcast, __nv_bfloat16, WELFORD, SQUARE_UPCAST, false)
LAYERNORM(layernorm_welford_bf16_storage_accumulate, __nv_bfloat16, WELFORD, STORAGE_ACCUMULATE, false)

LAYERNORM(layernorm_two_pass_fp32_fast, float, TWO_PASS, UPCAST_SQUARE, true)
LAYERNORM(layernorm_two_pass_fp16_upcast_square_fast, __half, TWO_PASS, UPCAST_SQUARE, true)
LAYERNORM(layernorm_two_pass_fp16_square_upcast_fast, __half, TWO_PASS, SQUARE_UPCAST, true)
LAYERNORM(layernorm_two_pass_fp16_storage_accumulate_fast, __half, TWO_PASS, STORAGE_ACCUMULATE, true)
LAYERNORM(layernorm_two_pass_bf16_upcast_square_fast, __nv_bfloat16, TWO_PASS, UPCAST_SQUARE, true)
LAYERNORM(layernorm_two_pass_bf16_square_upcast_fast, __nv_bfloat16, TWO_PASS, SQUARE_UPCAST, true)
LAYERNORM(layernorm_two_pass_bf16_storage_accumulate_fast, __nv_bfloat16, TWO_PASS, STORAGE_ACCUMULATE, true)
