// Fused residual add + LayerNorm / RMSNorm, in both conventions, side by side.
//
//   h = x + residual;   y = Norm(h)        (LayerNorm: two-pass statistics; RMSNorm: Σh²)
//   exact  : normalise h as computed in float (FlashInfer's convention; exact for most 16-bit
//            pairs, since the float sum of two fp16/bf16 values rarely needs more than 24 bits)
//   stored : normalise h rounded to storage, the h the kernel writes back (vLLM's convention)
// Either way the kernel writes h rounded to storage for the residual stream.  For float storage
// the float sum is the stored sum, so only "stored" exists.
//
// Arguments (the ABI of docs/DESIGN.md): h, y [rows, cols] outputs; x, residual [rows, cols] inputs; gamma,
// beta [cols] (RMSNorm: no beta); eps the float ε; rows, cols the shape.  Launch: grid = rows
// blocks, block = 256 threads (a multiple of 32 up to 1024).  Limits: cols >= 1.
//
// Entries are named add_<norm>_<algorithm>_<storage>[_<order>]_<convention>.
//
// INDEX (the variants; tests/test_kernels.py keeps this list equal to the entries below)
//   add_layernorm_two_pass_*  h written on the first pass; the row re-read for the variance, y
//   add_rmsnorm_rms_*         h written while Σh² accumulates; the row re-read for y
#include "norm_common.cuh"

#define EXACT 0
#define STORED 1

// h_j as the convention normalises it, from the row's x and residual
template <typename T, int CONV>
__device__ __forceinline__ float sum_of(const T* __restrict__ x, const T* __restrict__ r, int j) {
  float h = Storage<T>::to_f(x[j]) + Storage<T>::to_f(r[j]);
  return CONV == STORED ? in_storage<T>(h) : h;
}

template <typename T, int ORDER, int CONV, bool LAYER>
__device__ __forceinline__ void add_norm_row(T* __restrict__ h, T* __restrict__ y,
                                             const T* __restrict__ x,
                                             const T* __restrict__ residual,
                                             const T* __restrict__ gamma,
                                             const T* __restrict__ beta, float eps, int rows,
                                             int cols) {
  typedef Storage<T> S;
  const int row = blockIdx.x;
  if (row >= rows) return;
  const size_t off = (size_t)row * cols;
  const T* xr = x + off;
  const T* rr = residual + off;
  T* hr = h + off;
  T* yr = y + off;
  float mean = 0.0f, s = 0.0f, ss = 0.0f;
  // pass 1: write h; accumulate Σh (LayerNorm) or Σh² (RMSNorm)
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = sum_of<T, CONV>(xr, rr, j);
    hr[j] = S::from_f(v);
    if (LAYER) s = accumulate<T, ORDER>(s, v);
    else ss = accumulate<T, ORDER>(ss, square<T, ORDER>(v));
  }
  if (LAYER) {
    mean = block_sum<T, ORDER>(s) / cols;
    if (ORDER == STORAGE_ACCUMULATE) mean = in_storage<T>(mean);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
      float d = sum_of<T, CONV>(xr, rr, j) - mean;
      if (ORDER == STORAGE_ACCUMULATE) d = in_storage<T>(d);
      ss = accumulate<T, ORDER>(ss, square<T, ORDER>(d));
    }
  }
  const float rstd = inv_sqrt<false>(block_sum<T, ORDER>(ss) / cols + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = sum_of<T, CONV>(xr, rr, j);
    float g = S::to_f(gamma[j]);
    yr[j] = LAYER ? S::from_f((v - mean) * rstd * g + S::to_f(beta[j])) : S::from_f(v * rstd * g);
  }
}

#define ADD_LAYERNORM(NAME, T, ORDER, CONV)                                                    \
  extern "C" __global__ void __launch_bounds__(1024)                                          \
      NAME(T* __restrict__ h, T* __restrict__ y, const T* __restrict__ x,                    \
           const T* __restrict__ residual, const T* __restrict__ gamma,                       \
           const T* __restrict__ beta, float eps, int rows, int cols) {                       \
    add_norm_row<T, ORDER, CONV, true>(h, y, x, residual, gamma, beta, eps, rows, cols);      \
  }
#define ADD_RMSNORM(NAME, T, ORDER, CONV)                                                      \
  extern "C" __global__ void __launch_bounds__(1024)                                          \
      NAME(T* __restrict__ h, T* __restrict__ y, const T* __restrict__ x,                    \
           const T* __restrict__ residual, const T* __restrict__ gamma, float eps, int rows,  \
           int cols) {                                                                        \
    add_norm_row<T, ORDER, CONV, false>(h, y, x, residual, gamma, nullptr, eps, rows, cols); \
  }

ADD_LAYERNORM(add_layernorm_two_pass_fp32_stored, float, UPCAST_SQUARE, STORED)
ADD_LAYERNORM(add_layernorm_two_pass_fp16_upcast_square_exact, __half, UPCAST_SQUARE, EXACT)
ADD_LAYERNORM(add_layernorm_two_pass_fp16_upcast_square_stored, __half, UPCAST_SQUARE, STORED)
ADD_LAYERNORM(add_layernorm_two_pass_fp16_square_upcast_exact, __half, SQUARE_UPCAST, EXACT)
ADD_LAYERNORM(add_layernorm_two_pass_fp16_square_upcast_stored, __half, SQUARE_UPCAST, STORED)
ADD_LAYERNORM(add_layernorm_two_pass_fp16_storage_accumulate_exact, __half, STORAGE_ACCUMULATE, EXACT)
ADD_LAYERNORM(add_layernorm_two_pass_fp16_storage_accumulate_stored, __half, STORAGE_ACCUMULATE, STORED)
ADD_LAYERNORM(add_layernorm_two_pass_bf16_upcast_square_exact, __nv_bfloat16, UPCAST_SQUARE, EXACT)
ADD_LAYERNORM(add_layernorm_two_pass_bf16_upcast_square_stored, __nv_bfloat16, UPCAST_SQUARE, STORED)
ADD_LAYERNORM(add_layernorm_two_pass_bf16_square_upcast_exact, __nv_bfloat16, SQUARE_UPCAST, EXACT)
ADD_LAYERNORM(add_layernorm_two_pass_bf16_square_upcast_stored, __nv_bfloat16, SQUARE_UPCAST, STORED)
ADD_LAYERNORM(add_layernorm_two_pass_bf16_storage_accumulate_exact, __nv_bfloat16, STORAGE_ACCUMULATE, EXACT)
ADD_LAYERNORM(add_layernorm_two_pass_bf16_storage_accumulate_stored, __nv_bfloat16, STORAGE_ACCUMULATE, STORED)

ADD_RMSNORM(add_rmsnorm_rms_fp32_stored, float, UPCAST_SQUARE, STORED)
ADD_RMSNORM(add_rmsnorm_rms_fp16_upcast_square_exact, __half, UPCAST_SQUARE, EXACT)
ADD_RMSNORM(add_rmsnorm_rms_fp16_upcast_square_stored, __half, UPCAST_SQUARE, STORED)
ADD_RMSNORM(add_rmsnorm_rms_fp16_square_upcast_exact, __half, SQUARE_UPCAST, EXACT)
ADD_RMSNORM(add_rmsnorm_rms_fp16_square_upcast_stored, __half, SQUARE_UPCAST, STORED)
ADD_RMSNORM(add_rmsnorm_rms_fp16_storage_accumulate_exact, __half, STORAGE_ACCUMULATE, EXACT)
ADD_RMSNORM(add_rmsnorm_rms_fp16_storage_accumulate_stored, __half, STORAGE_ACCUMULATE, STORED)
ADD_RMSNORM(add_rmsnorm_rms_bf16_upcast_square_exact, __nv_bfloat16, UPCAST_SQUARE, EXACT)
ADD_RMSNORM(add_rmsnorm_rms_bf16_upcast_square_stored, __nv_bfloat16, UPCAST_SQUARE, STORED)
ADD_RMSNORM(add_rmsnorm_rms_bf16_square_upcast_exact, __nv_bfloat16, SQUARE_UPCAST, EXACT)
ADD_RMSNORM(add_rmsnorm_rms_bf16_square_upcast_stored, __nv_bfloat16, SQUARE_UPCAST, STORED)
ADD_RMSNORM(add_rmsnorm_rms_bf16_storage_accumulate_exact, __nv_bfloat16, STORAGE_ACCUMULATE, EXACT)
ADD_RMSNORM(add_rmsnorm_rms_bf16_storage_accumulate_stored, __nv_bfloat16, STORAGE_ACCUMULATE, STORED)
