// Kernels of the field's shapes that x86 runs without a word and a GPU does not (#47):
//   rms_half2          fp16 RMSNorm on __half2 pairs of every row: rows of odd width start 2
//                      bytes off 4-byte alignment -- "misaligned address" on a GPU
//   rms_half2_checked  the same, pairs only where the row is 4-byte aligned (else halves): sound
//   ln_float4          fp32 LayerNorm on float4 (16 bytes) of every row: misaligned on odd widths
//   rms_int_offset     RMSNorm whose row offset is `int off = blockIdx.x * cols`: past 2^31
//                      elements it wraps negative -- an out-of-bounds read on a GPU
//   rms_size_t_offset  the same with a 64-bit offset: sound
#include <cuda_fp16.h>
#include <stdint.h>

// fp16 RMSNorm reading and writing __half2 pairs: rows of odd width start 2 bytes off
extern "C" __global__ void rms_half2(__half* y, const __half* x, const __half* g, float eps,
                                     int rows, int cols) {
  __shared__ float part[256];
  const __half* xr = x + (size_t)blockIdx.x * cols;
  __half* yr = y + (size_t)blockIdx.x * cols;
  const __half2* x2 = reinterpret_cast<const __half2*>(xr);
  float s = 0.f;
  for (int i = threadIdx.x; i < cols / 2; i += blockDim.x) {
    float2 v = __half22float2(x2[i]);
    s += v.x * v.x + v.y * v.y;
  }
  if (cols % 2 && threadIdx.x == 0) { float v = __half2float(xr[cols - 1]); s += v * v; }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  const float r = rsqrtf(part[0] / cols + eps);
  __half2* y2 = reinterpret_cast<__half2*>(yr);
  const __half2* g2 = reinterpret_cast<const __half2*>(g);
  for (int i = threadIdx.x; i < cols / 2; i += blockDim.x) {
    float2 v = __half22float2(x2[i]), w = __half22float2(g2[i]);
    y2[i] = __floats2half2_rn(v.x * r * w.x, v.y * r * w.y);
  }
  if (cols % 2 && threadIdx.x == 0)
    yr[cols - 1] = __float2half(__half2float(xr[cols - 1]) * r * __half2float(g[cols - 1]));
}

extern "C" __global__ void rms_half2_checked(__half* y, const __half* x, const __half* g,
                                             float eps, int rows, int cols) {
  __shared__ float part[256];
  const __half* xr = x + (size_t)blockIdx.x * cols;
  __half* yr = y + (size_t)blockIdx.x * cols;
  const bool pairs = ((uintptr_t)xr % 4 == 0) && ((uintptr_t)yr % 4 == 0) && cols % 2 == 0;
  float s = 0.f;
  if (pairs) {
    const __half2* x2 = reinterpret_cast<const __half2*>(xr);
    for (int i = threadIdx.x; i < cols / 2; i += blockDim.x) {
      float2 v = __half22float2(x2[i]);
      s += v.x * v.x + v.y * v.y;
    }
  } else {
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
      float v = __half2float(xr[i]);
      s += v * v;
    }
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  const float r = rsqrtf(part[0] / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    yr[i] = __float2half(__half2float(xr[i]) * r * __half2float(g[i]));
}

extern "C" __global__ void ln_float4(float* y, const float* x, const float* g, const float* b,
                                     float eps, int rows, int cols) {
  __shared__ float part[256];
  const float* xr = x + (size_t)blockIdx.x * cols;
  const float4* x4 = reinterpret_cast<const float4*>(xr);
  float s = 0.f;
  for (int i = threadIdx.x; i < cols / 4; i += blockDim.x) {
    float4 v = x4[i];
    s += v.x + v.y + v.z + v.w;
  }
  for (int i = cols / 4 * 4 + threadIdx.x; i < cols; i += blockDim.x) s += xr[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  const float mean = part[0] / cols;
  __syncthreads();
  float q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) q += (xr[i] - mean) * (xr[i] - mean);
  part[threadIdx.x] = q;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  const float r = rsqrtf(part[0] / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = (xr[i] - mean) * r * g[i] + b[i];
}

template <typename Index>
__device__ void rms_offset(__half* y, const __half* x, const __half* g, float eps, int cols) {
  __shared__ float part[256];
  const Index off = (Index)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    float v = __half2float(x[off + i]);
    s += v * v;
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  const float r = rsqrtf(part[0] / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[off + i] = __float2half(__half2float(x[off + i]) * r * __half2float(g[i]));
}
extern "C" __global__ void rms_int_offset(__half* y, const __half* x, const __half* g, float eps,
                                          int rows, int cols) {
  rms_offset<int>(y, x, g, eps, cols);
}
extern "C" __global__ void rms_size_t_offset(__half* y, const __half* x, const __half* g,
                                             float eps, int rows, int cols) {
  rms_offset<size_t>(y, x, g, eps, cols);
}
// ONNX Runtime's SkipLayerNorm launcher passes the element count as an int (skip_size = rows *
// cols): its own caller can never launch it past 2^31 elements
extern "C" __global__ void rms_skip_size(__half* y, const __half* x, const __half* g, float eps,
                                         int rows, int cols, int skip_size) {
  if ((long long)blockIdx.x * cols >= skip_size) return;
  rms_offset<size_t>(y, x, g, eps, cols);
}
