// Kernels written for normcheck check's tests: correct ones, and planted bugs.
// Every kernel follows the kernel ABI of docs/DESIGN.md with one block per row.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

template <typename T> __device__ __forceinline__ float tof(T v) { return (float)v; }
template <> __device__ __forceinline__ float tof(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float tof(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T fromf(float v) { return (T)v; }
template <> __device__ __forceinline__ __half fromf(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 fromf(float v) { return __float2bfloat16_rn(v); }

__device__ float block_sum(float v, bool sync = true) {
  __shared__ float s[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = v;
  if (sync) __syncthreads();
  float t = 0.f;
  for (int w = 0; w < (int)(blockDim.x >> 5); ++w) t += s[w];
  __syncthreads();
  return t;
}

// ---- correct kernels -----------------------------------------------------------------------
template <typename T>
__device__ void rms_good(T* y, const T* x, const T* g, float eps, int rows, int cols) {
  const T* xr = x + (size_t)blockIdx.x * cols;
  float ss = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) { float v = tof(xr[i]); ss += v * v; }
  float r = rsqrtf(block_sum(ss) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = fromf<T>(tof(xr[i]) * r * tof(g[i]));
}
extern "C" __global__ void rms_good_fp16(__half* y, const __half* x, const __half* g, float eps, int rows, int cols) { rms_good(y, x, g, eps, rows, cols); }
extern "C" __global__ void rms_good_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* g, float eps, int rows, int cols) { rms_good(y, x, g, eps, rows, cols); }
extern "C" __global__ void rms_good_fp32(float* y, const float* x, const float* g, float eps, int rows, int cols) { rms_good(y, x, g, eps, rows, cols); }

template <typename T>
__device__ void ln_good(T* y, const T* x, const T* g, const T* b, float eps, int rows, int cols) {
  const T* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) s += tof(xr[i]);
  float mean = block_sum(s) / cols;
  float ss = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) { float d = tof(xr[i]) - mean; ss += d * d; }
  float r = 1.0f / sqrtf(block_sum(ss) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = fromf<T>((tof(xr[i]) - mean) * r * tof(g[i]) + tof(b[i]));
}
extern "C" __global__ void ln_good_fp16(__half* y, const __half* x, const __half* g, const __half* b, float eps, int rows, int cols) { ln_good(y, x, g, b, eps, rows, cols); }
extern "C" __global__ void ln_good_fp32(float* y, const float* x, const float* g, const float* b, float eps, int rows, int cols) { ln_good(y, x, g, b, eps, rows, cols); }

// sound kernels with other summation orders: thread 0 of each block sums its row sequentially
// (two-pass, then Welford) -- the worst order for the error bound, still a correct kernel
template <typename T>
__device__ void ln_seq(T* y, const T* x, const T* g, const T* b, float eps, int cols) {
  if (threadIdx.x != 0) return;
  const T* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = 0; i < cols; ++i) s += tof(xr[i]);
  float mean = s / cols, ss = 0.f;
  for (int i = 0; i < cols; ++i) { float d = tof(xr[i]) - mean; ss += d * d; }
  float r = rsqrtf(ss / cols + eps);
  for (int i = 0; i < cols; ++i)
    y[(size_t)blockIdx.x * cols + i] = fromf<T>((tof(xr[i]) - mean) * r * tof(g[i]) + tof(b[i]));
}
template <typename T>
__device__ void ln_welford_seq(T* y, const T* x, const T* g, const T* b, float eps, int cols) {
  if (threadIdx.x != 0) return;
  const T* xr = x + (size_t)blockIdx.x * cols;
  float mean = 0.f, m2 = 0.f;
  for (int i = 0; i < cols; ++i) {
    float v = tof(xr[i]), d = v - mean;
    mean += d / (i + 1);
    m2 += d * (v - mean);
  }
  float r = rsqrtf(m2 / cols + eps);
  for (int i = 0; i < cols; ++i)
    y[(size_t)blockIdx.x * cols + i] = fromf<T>((tof(xr[i]) - mean) * r * tof(g[i]) + tof(b[i]));
}
extern "C" __global__ void ln_seq_fp32(float* y, const float* x, const float* g, const float* b, float eps, int rows, int cols) { ln_seq(y, x, g, b, eps, cols); }
extern "C" __global__ void ln_seq_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* g, const __nv_bfloat16* b, float eps, int rows, int cols) { ln_seq(y, x, g, b, eps, cols); }
extern "C" __global__ void ln_welford_seq_fp32(float* y, const float* x, const float* g, const float* b, float eps, int rows, int cols) { ln_welford_seq(y, x, g, b, eps, cols); }
extern "C" __global__ void ln_welford_seq_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* g, const __nv_bfloat16* b, float eps, int rows, int cols) { ln_welford_seq(y, x, g, b, eps, cols); }

// ---- planted bugs --------------------------------------------------------------------------
// one-pass, clamped at zero: no NaN, but the variance is lost on offset rows
extern "C" __global__ void ln_one_pass_clamped_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* g, const __nv_bfloat16* b, float eps, int rows, int cols) {
  const __nv_bfloat16* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f, ss = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) { float v = tof(xr[i]); s += v; ss += v * v; }
  float mean = block_sum(s) / cols;
  float var = fmaxf(block_sum(ss) / cols - mean * mean, 0.f);
  float r = rsqrtf(var + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = fromf<__nv_bfloat16>((tof(xr[i]) - mean) * r * tof(g[i]) + tof(b[i]));
}
// Apex-style fp16 output: x̂ rounded to half, then γ·x̂ and +β in half (three roundings)
extern "C" __global__ void ln_half_three_roundings(__half* y, const __half* x, const __half* g, const __half* b, float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) s += tof(xr[i]);
  float mean = block_sum(s) / cols;
  float ss = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) { float d = tof(xr[i]) - mean; ss += d * d; }
  float r = rsqrtf(block_sum(ss) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __hadd(__hmul(g[i], __float2half_rn((tof(xr[i]) - mean) * r)), b[i]);
}
// one-pass cancellation: var = E[x²] - E[x]²
extern "C" __global__ void ln_one_pass_fp32(float* y, const float* x, const float* g, const float* b, float eps, int rows, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f, ss = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) { s += xr[i]; ss += xr[i] * xr[i]; }
  float mean = block_sum(s) / cols;
  float var = block_sum(ss) / cols - mean * mean;
  float r = rsqrtf(var + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = (xr[i] - mean) * r * g[i] + b[i];
}
// fp16 squaring before the upcast
extern "C" __global__ void rms_square_in_fp16(__half* y, const __half* x, const __half* g, float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float ss = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) ss += __half2float(__hmul(xr[i], xr[i]));
  float r = rsqrtf(block_sum(ss) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2half_rn(__half2float(xr[i]) * r * __half2float(g[i]));
}
// a missing ε
extern "C" __global__ void rms_no_eps(__half* y, const __half* x, const __half* g, float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float ss = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) { float v = __half2float(xr[i]); ss += v * v; }
  float r = rsqrtf(block_sum(ss) / cols);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2half_rn(__half2float(xr[i]) * r * __half2float(g[i]));
}
// tail elements dropped: only whole multiples of the block are processed
extern "C" __global__ void rms_drops_tail(__half* y, const __half* x, const __half* g, float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  int full = cols / blockDim.x * blockDim.x;
  float ss = 0.f;
  for (int i = threadIdx.x; i < full; i += blockDim.x) { float v = __half2float(xr[i]); ss += v * v; }
  float r = rsqrtf(block_sum(ss) / cols + eps);
  for (int i = threadIdx.x; i < full; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2half_rn(__half2float(xr[i]) * r * __half2float(g[i]));
}
// reads one element past the end of the row
extern "C" __global__ void rms_reads_past_row(__half* y, const __half* x, const __half* g, float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float ss = 0.f;
  for (int i = threadIdx.x; i <= cols; i += blockDim.x) { float v = __half2float(xr[i]); ss += v * v; }
  float r = rsqrtf(block_sum(ss) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2half_rn(__half2float(xr[i]) * r * __half2float(g[i]));
}
// a missing __syncthreads between the warps' partial sums and their total
extern "C" __global__ void rms_missing_sync(__half* y, const __half* x, const __half* g, float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float ss = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) { float v = __half2float(xr[i]); ss += v * v; }
  float r = rsqrtf(block_sum(ss, false) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2half_rn(__half2float(xr[i]) * r * __half2float(g[i]));
}
// rstd rounded to fp16 before use
extern "C" __global__ void rms_rstd_in_fp16(__half* y, const __half* x, const __half* g, float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float ss = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) { float v = __half2float(xr[i]); ss += v * v; }
  __half r = __float2half_rn(rsqrtf(block_sum(ss) / cols + eps));
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2half_rn(__half2float(xr[i]) * __half2float(r) * __half2float(g[i]));
}
// crashes and hangs
// a divergent barrier: half of each warp at __syncthreads, the other half in __syncwarp for it
extern "C" __global__ void rms_deadlock(__half* y, const __half* x, const __half* g, float eps, int rows, int cols) {
  if (threadIdx.x % 32 < 16) __syncthreads();
  else __syncwarp();
  y[(size_t)blockIdx.x * cols] = x[0];
}
extern "C" __global__ void rms_hang(__half* y, const __half* x, const __half* g, float eps, int rows, int cols) {
  volatile int k = 0;
  while (k == 0) {}
}
extern "C" __global__ void rms_crash(__half* y, const __half* x, const __half* g, float eps, int rows, int cols) {
  __half* volatile p = nullptr;
  y[threadIdx.x] = *p;
}
