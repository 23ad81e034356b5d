// A C++20 RMSNorm (tests/test_cuda_surface.py): a concept constrains the storage type, std::span
// views the row -- a file g++ refuses in C++17, built in the standard it names
#include <cuda_fp16.h>
#include <concepts>
#include <span>
template <typename T>
concept Storage = std::same_as<T, __half> || std::same_as<T, float>;

template <Storage T>
__global__ void rms20(T* y, const T* x, const T* g, float eps, int rows, int cols) {
  __shared__ float part[32];
  __shared__ float total;
  std::span<const T> xr(x + (size_t)blockIdx.x * cols, cols);
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) { float v = (float)xr[j]; s += v * v; }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (threadIdx.x == 0) total = t;
  }
  __syncthreads();
  const float r = rsqrtf(total / cols + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = (T)((float)xr[j] * r * (float)g[j]);
}
template __global__ void rms20<__half>(__half*, const __half*, const __half*, float, int, int);
