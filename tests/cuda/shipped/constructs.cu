// Constructs real norm files use that stopped them on the cpu backend (tests/test_as_shipped.py),
// each in a working RMSNorm of the default ABI (y, x, γ, eps, rows, cols), fp16 unless noted.
//
// INDEX
//   rms_shared_window   DeepSpeed's 32-bit shared addresses: __cvta_generic_to_shared kept in an
//                       unsigned, then ld.shared / st.shared / cvta.to.shared in inline PTX
//   rms_half2_shuffle   __shfl_xor_sync on __half2 (a documented overload)
//   rms_noinline        a __noinline__ helper in a file that includes <memory> after the shim
//   rms_blockdim_param  a helper whose parameter is named blockDim (as cuSPARSE's are)
//   rms_calls_host      reaches a host function of a library the cpu backend does not load
//   rms_alias_meaning   a member alias named as the template it aliases (flash-attention's
//                       `using Reducer = Reducer<...>`: g++ says it "changes meaning")
//   rms_host_helpers    beside host helpers written for nvcc 12: std::function without
//                       <functional>, cudaMemAdvise / cudaMemPrefetchAsync given a device ordinal
//   launch_deduced      a host launcher whose rms_t<<<>>> deduces the kernel's template argument
#include <memory>
#include <mma.h>  // included, never used: harmless
#include <cuda_fp16.h>

extern "C" float library_host_function(float);  // defined by a library never linked here

__device__ __forceinline__ unsigned to_shared(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ float block_sum(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < (int)(blockDim.x + 31) / 32; ++w) t += part[w];
  __syncthreads();
  return t;
}

extern "C" __global__ void rms_shared_window(__half* y, const __half* x, const __half* g,
                                             float eps, int rows, int cols) {
  __shared__ float s_rstd;
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = __half2float(xr[j]);
    s += v * v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) {
    unsigned a;
    asm("cvta.to.shared.u32 %0, %1;" : "=r"(a) : "l"(&s_rstd));
    asm volatile("st.shared.f32 [%0], %1;" ::"r"(a), "f"(rsqrtf(s / cols + eps)));
  }
  __syncthreads();
  float r;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(r) : "r"(to_shared(&s_rstd)));
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = __float2half(__half2float(xr[j]) * r * __half2float(g[j]));
}

extern "C" __global__ void rms_half2_shuffle(__half* y, const __half* x, const __half* g,
                                             float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = __half2float(xr[j]);
    s += v * v;
  }
  // a half2 round trip through a shuffle (the value must come back unchanged)
  __half2 pair = __floats2half2_rn(1.0f, -2.0f);
  pair = __shfl_xor_sync(0xffffffffu, pair, 1);
  const float one = __low2float(pair) + 0.5f * __high2float(pair) + 1.0f;  // 1 + (-1) + 1
  const float r = rsqrtf(block_sum(s) / cols + eps) * one;
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = __float2half(__half2float(xr[j]) * r * __half2float(g[j]));
}

__noinline__ __device__ float square(float v) { return v * v; }

extern "C" __global__ void rms_noinline(__half* y, const __half* x, const __half* g, float eps,
                                        int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += square(__half2float(xr[j]));
  const float r = rsqrtf(block_sum(s) / cols + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = __float2half(__half2float(xr[j]) * r * __half2float(g[j]));
}

__device__ int stride_of(int blockDim) { return blockDim; }  // a parameter named blockDim

extern "C" __global__ void rms_blockdim_param(__half* y, const __half* x, const __half* g,
                                              float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  const int step = stride_of(blockDim.x);
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += step) {
    float v = __half2float(xr[j]);
    s += v * v;
  }
  const float r = rsqrtf(block_sum(s) / cols + eps);
  for (int j = threadIdx.x; j < cols; j += step)
    y[(size_t)blockIdx.x * cols + j] = __float2half(__half2float(xr[j]) * r * __half2float(g[j]));
}

extern "C" __global__ void rms_calls_host(__half* y, const __half* x, const __half* g, float eps,
                                          int rows, int cols) {
  if (threadIdx.x == 0) y[0] = __float2half(library_host_function(eps));  // HOST: rms_calls_host
}

template <typename T, int N>
struct Reducer {
  static __device__ T sum(T v) {
    for (int o = N / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  }
};
template <typename T, int N>
struct Stats {
  using Reducer = Reducer<T, N>;  // the alias takes the template's name
  static __device__ T sum(T v) { return Reducer::sum(v); }
};

extern "C" __global__ void rms_alias_meaning(__half* y, const __half* x, const __half* g,
                                             float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += 32) s += __half2float(xr[j]) * __half2float(xr[j]);
  const float r = rsqrtf(Stats<float, 32>::sum(s) / cols + eps);
  for (int j = threadIdx.x; j < cols; j += 32)
    y[(size_t)blockIdx.x * cols + j] = __float2half(__half2float(xr[j]) * r * __half2float(g[j]));
}

// host helpers of the kind a norm file carries, compiled and never called
struct Callback { std::function<void(int)> done; };  // <functional> not included
static cudaError_t prefer_host(void* p, size_t n, cudaStream_t stream) {
  cudaError_t e = cudaMemAdvise(p, n, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId);
  return e != cudaSuccess ? e : cudaMemPrefetchAsync(p, n, 0, stream);
}

extern "C" __global__ void rms_host_helpers(__half* y, const __half* x, const __half* g,
                                            float eps, int rows, int cols) {
  (void)&prefer_host;
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += square(__half2float(xr[j]));
  const float r = rsqrtf(block_sum(s) / cols + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = __float2half(__half2float(xr[j]) * r * __half2float(g[j]));
}

template <typename T>
__global__ void rms_t(T* y, const T* x, const T* g, float eps, int cols) {
  const T* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += square((float)xr[j]);
  const float r = rsqrtf(block_sum(s) / cols + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = (T)((float)xr[j] * r * (float)g[j]);
}

// the project's launcher: the kernel's T deduced from the arguments, as nvcc deduces it
extern "C" void launch_deduced(__half* y, const __half* x, const __half* g, float eps, int rows,
                               int cols) {
  rms_t<<<rows, 128>>>(y, x, g, eps, cols);
}
