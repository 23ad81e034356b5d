// A runtime-compiled kernel (NVRTC) in TransformerEngine's style: built with __CUDACC_RTC__
// defined, no standard headers on that path, its own fixed-width types.
#ifndef __CUDACC_RTC__
#error "built as NVRTC builds it: -D__CUDACC_RTC__"
#endif
typedef unsigned long long index_t;
#include <cuda_fp16.h>
namespace {
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
}  // namespace
extern "C" __global__ void __launch_bounds__(32)
rms_rtc(__half* y, const __half* x, const __half* g, float eps, int rows, int cols) {
  const __half* xr = x + (index_t)blockIdx.x * cols;
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += 32) s += __half2float(xr[c]) * __half2float(xr[c]);
  const float r = rsqrtf(warp_sum(s) / cols + eps);
  for (int c = threadIdx.x; c < cols; c += 32)
    y[(index_t)blockIdx.x * cols + c] = __float2half(__half2float(xr[c]) * r * __half2float(g[c]));
}
