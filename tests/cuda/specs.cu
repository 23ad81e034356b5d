// Kernels for tests/test_specs.py: what specs describe beyond the default ABI.
#include "specs_helper.cuh"

#ifndef SCALE
#error "build with -D SCALE=1 (a define the spec or the command line gives)"
#endif

// two launches: per-row rstd into a scratch buffer, then y from it; an unused pointer is null
extern "C" __global__ void rms_stats(float* r, const float* x, int rows, int cols, float eps) {
  float ss = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    float v = x[(size_t)blockIdx.x * cols + i];
    ss += v * v;
  }
  float t = block_total(ss);  // dynamic shared memory from the included header
  if (threadIdx.x == 0) r[blockIdx.x] = rsqrtf(t / cols + eps);
}
extern "C" __global__ void rms_apply(float* y, const float* x, const float* r, const float* g,
                                     const float* unused, int rows, int cols) {
  if (unused != nullptr) __trap();
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    size_t k = (size_t)blockIdx.x * cols + i;
    y[k] = x[k] * r[blockIdx.x] * g[i] * (float)SCALE;
  }
}
// affine-free RMSNorm (no weight at all)
extern "C" __global__ void rms_plain(float* y, const float* x, int rows, int cols, float eps) {
  float ss = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    float v = x[(size_t)blockIdx.x * cols + i];
    ss += v * v;
  }
  float r = rsqrtf(block_total(ss) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = x[(size_t)blockIdx.x * cols + i] * r;
}
// a warp per row with the row guard off by one (`>` for `>=`): row N is read whenever rows is not
// a multiple of the 4 rows a block covers
extern "C" __global__ void rms_row_guard(float* y, const float* x, const float* g, int N, int C,
                                         float eps) {
  int idx = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (idx > N) return;
  const float* xr = x + (size_t)idx * C;
  float ss = 0.f;
  for (int i = lane; i < C; i += 32) ss += xr[i] * xr[i];
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  float r = rsqrtf(ss / C + eps);
  if (idx < N)
    for (int i = lane; i < C; i += 32) y[(size_t)idx * C + i] = xr[i] * r * g[i];
}
// 16-byte vector loads (an aligned struct of 4 floats, as Packed128 is) with no width contract:
// misaligned as soon as cols is not a multiple of 4
struct alignas(16) F4 {
  float v[4];
};
extern "C" __global__ void rms_float4(float* y, const float* x, const float* g, int rows, int cols,
                                      float eps) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  float ss = 0.f;
  for (int i = threadIdx.x * 4; i < cols; i += blockDim.x * 4) {
    F4 p = *reinterpret_cast<const F4*>(xr + i);
    for (int k = 0; k < 4; ++k) ss += p.v[k] * p.v[k];
  }
  float r = rsqrtf(block_total(ss) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) y[(size_t)blockIdx.x * cols + i] = xr[i] * r * g[i];
}
