// An fp16 RMSNorm that is sound up to 1024 columns and wrong above: its wide path (a chunked
// loop of 1024 columns a pass) divides the sum of squares by the chunk, not by the width --
// the shape of a bug a quick report at width 768 never runs (#64).
#include <cuda_fp16.h>

extern "C" __global__ void rms_wide_path(__half* y, const __half* x, const __half* g, float eps,
                                         int rows, int cols) {
  const size_t row = blockIdx.x;
  const __half* xr = x + row * cols;
  __shared__ float part[256];
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = __half2float(xr[j]);
    s += v * v;
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  const int n = cols <= 1024 ? cols : 1024;  // the bug: the chunk's width, not the row's
  const float r = rsqrtf(part[0] / n + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[row * cols + j] = __float2half(__half2float(xr[j]) * r * __half2float(g[j]));
}
