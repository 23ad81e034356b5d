// Kernels that touch memory outside their arrays, in the ways kernels really do, each a working
// RMSNorm but for that (default ABI, fp32).  The line of each bad access carries a marker comment
// (// OOB: name) that tests/test_faults_named.py finds to check the line a fault names.
#include <cuda_runtime.h>

__device__ float row_rstd(const float* xr, float eps, int cols) {
  __shared__ float s;
  if (threadIdx.x == 0) {
    float a = 0.f;
    for (int j = 0; j < cols; ++j) a += xr[j] * xr[j];
    s = rsqrtf(a / cols + eps);
  }
  __syncthreads();
  return s;
}

// the last row writes y[cols]: one element past the end of the output
extern "C" __global__ void last_row_past_end(float* y, const float* x, const float* g, float eps,
                                             int rows, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  float* yr = y + (size_t)blockIdx.x * cols;
  float r = row_rstd(xr, eps, cols);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = xr[j] * r * g[j];
  if (threadIdx.x == 0 && blockIdx.x == rows - 1) yr[cols] = 0.f;  // OOB: last_row_past_end
}

// a row stride one row too long: the last row's stores land a whole row past the end
extern "C" __global__ void far_past_end(float* y, const float* x, const float* g, float eps,
                                        int rows, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  float r = row_rstd(xr, eps, cols);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)(blockIdx.x + 1) * cols + j] = xr[j] * r * g[j];  // OOB: far_past_end
}

// an element before the start: y[-1] from the first row's thread 0
extern "C" __global__ void before_start(float* y, const float* x, const float* g, float eps,
                                        int rows, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  float* yr = y + (size_t)blockIdx.x * cols;
  float r = row_rstd(xr, eps, cols);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = xr[j] * r * g[j];
  if (threadIdx.x == 0 && blockIdx.x == 0) yr[-1] = 0.f;  // OOB: before_start
}

// reads x a whole row past the end (the last row's "next row" prefetch)
extern "C" __global__ void read_far_past_end(float* y, const float* x, const float* g, float eps,
                                             int rows, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  float* yr = y + (size_t)blockIdx.x * cols;
  float r = row_rstd(xr, eps, cols);
  volatile float next = xr[cols + cols / 2];  // OOB: read_far_past_end
  (void)next;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = xr[j] * r * g[j];
}

// the elementwise half of a two-kernel RMSNorm: one thread per element, the grid rounded up
// to whole blocks and no bounds test (grid = ceil_div(rows * cols, 256))
extern "C" __global__ void grid_no_bounds_test(float* y, const float* x, const float* rstd,
                                               const float* g, int cols) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = x[i] * rstd[i / cols] * g[i % cols];  // OOB: grid_no_bounds_test
}

// rstd per row, one warp a row (the first launch of grid_no_bounds_test.toml; ε is 1e-5 inside)
extern "C" __global__ void rstd_kernel(float* rstd, const float* x, int rows, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  float a = 0.f;
  for (int j = threadIdx.x; j < cols; j += 32) a += xr[j] * xr[j];
  for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  if (threadIdx.x == 0) rstd[blockIdx.x] = rsqrtf(a / cols + 1e-5f);
}
