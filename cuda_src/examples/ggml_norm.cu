// A ggml-style norm, for `normcheck check --spec ggml_norm.toml`: LayerNorm without γ and β
// (the model applies them in a separate op), one pass over the row for Σx and Σx² as a float2,
// a warp of 32 threads per row, var = E[x²] - E[x]² not clamped.
#include <cuda_runtime.h>

static __device__ __forceinline__ float2 warp_reduce_sum(float2 a) {
  for (int mask = 16; mask > 0; mask >>= 1) {
    a.x += __shfl_xor_sync(0xffffffff, a.x, mask, 32);
    a.y += __shfl_xor_sync(0xffffffff, a.y, mask, 32);
  }
  return a;
}

static __global__ void norm_f32(const float* x, float* dst, const int ncols, const float eps) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const int tid = threadIdx.x;
  float2 mean_var = make_float2(0.f, 0.f);
  for (int col = tid; col < ncols; col += 32) {
    const float xi = x[row * ncols + col];
    mean_var.x += xi;
    mean_var.y += xi * xi;
  }
  mean_var = warp_reduce_sum(mean_var);
  const float mean = mean_var.x / ncols;
  const float var = mean_var.y / ncols - mean * mean;
  const float inv_std = rsqrtf(var + eps);
  for (int col = tid; col < ncols; col += 32) dst[row * ncols + col] = (x[row * ncols + col] - mean) * inv_std;
}
