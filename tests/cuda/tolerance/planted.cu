// Kernels whose bugs pass every tolerance (tests/test_no_tolerance.py), each a sound RMSNorm
// but for the one planted thing: default ABI (y, x, γ, eps, rows, cols) unless noted.
//
// INDEX
//   rms_rz_bf16            y stored with __float2bfloat16_rz: round toward zero
//   rms_shift_bf16         y stored by shifting the float's bits off: truncation
//   rms_rn_bf16            the same kernel storing with __float2bfloat16_rn: sound
//   rms_order_dependent    a forward whose result depends on the block order (a float atomic
//                          into one shared accumulator, read back by the last block)
//   rms_grid_overlap       a grid-stride loop over rows whose step is one row short: rows
//                          written by two blocks (the same value)
//   rms_strided_ignores    takes a row stride and uses cols instead
//   rms_strided_pads       takes a row stride and writes zeros into the padding
//   rms_strided            takes a row stride and uses it: sound
#include <cuda_bf16.h>

__device__ float rstd_row(const __nv_bfloat16* xr, int cols, float eps) {
  __shared__ float part[32];
  __shared__ float total;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = __bfloat162float(xr[j]);
    s += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (threadIdx.x == 0) total = t;
  }
  __syncthreads();
  float r = rsqrtf(total / cols + eps);
  __syncthreads();
  return r;
}

__device__ __forceinline__ __nv_bfloat16 truncate_bf16(float v) {
  unsigned u = __float_as_uint(v);
  unsigned short h = (unsigned short)(u >> 16);  // the low 16 bits shifted off
  __nv_bfloat16 b;
  memcpy(&b, &h, 2);
  return b;
}

template <int STORE>  // 0 rn, 1 rz, 2 bit shift
__device__ void rms_store(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* g,
                          float eps, int cols) {
  const __nv_bfloat16* xr = x + (size_t)blockIdx.x * cols;
  const float r = rstd_row(xr, cols, eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = __bfloat162float(xr[j]) * r * __bfloat162float(g[j]);
    y[(size_t)blockIdx.x * cols + j] = STORE == 0 ? __float2bfloat16_rn(v)
                                     : STORE == 1 ? __float2bfloat16_rz(v) : truncate_bf16(v);
  }
}

extern "C" __global__ void rms_rn_bf16(__nv_bfloat16* y, const __nv_bfloat16* x,
                                       const __nv_bfloat16* g, float eps, int rows, int cols) {
  rms_store<0>(y, x, g, eps, cols);
}
extern "C" __global__ void rms_rz_bf16(__nv_bfloat16* y, const __nv_bfloat16* x,
                                       const __nv_bfloat16* g, float eps, int rows, int cols) {
  rms_store<1>(y, x, g, eps, cols);
}
extern "C" __global__ void rms_shift_bf16(__nv_bfloat16* y, const __nv_bfloat16* x,
                                          const __nv_bfloat16* g, float eps, int rows, int cols) {
  rms_store<2>(y, x, g, eps, cols);
}

// a split row, in float: 4 blocks a row each add the squares of a quarter into ss[row] with a
// float atomic (the order they arrive in rounds differently), then a second launch normalises
__global__ void quarter_squares(float* ss, const float* x, int rows, int cols) {
  const int row = blockIdx.x, q = blockIdx.y;
  const int lo = q * cols / 4, hi = (q + 1) * cols / 4;
  __shared__ float part[32];
  float s = 0.f;
  for (int j = lo + threadIdx.x; j < hi; j += blockDim.x) {
    float v = x[(size_t)row * cols + j];
    s += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int w = 0; w < (int)blockDim.x / 32; ++w) t += part[w];
    atomicAdd(&ss[row], t);
  }
}
extern "C" __global__ void normalise_split(float* y, const float* x, const float* g,
                                           const float* ss, float eps, int rows, int cols) {
  const float r = rsqrtf(ss[blockIdx.x] / cols + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = x[(size_t)blockIdx.x * cols + j] * r * g[j];
}
extern "C" __global__ void rms_split_row(float* ss, const float* x, int rows, int cols) {
  quarter_squares(ss, x, rows, cols);
}

// a grid-stride loop over rows stepping gridDim.x - 1: block 0 also does the last row
extern "C" __global__ void rms_grid_overlap(__nv_bfloat16* y, const __nv_bfloat16* x,
                                            const __nv_bfloat16* g, float eps, int rows,
                                            int cols) {
  const int step = gridDim.x > 1 ? gridDim.x - 1 : 1;
  for (int row = blockIdx.x; row < rows; row += step) {
    const __nv_bfloat16* xr = x + (size_t)row * cols;
    const float r = rstd_row(xr, cols, eps);
    for (int j = threadIdx.x; j < cols; j += blockDim.x)
      y[(size_t)row * cols + j] =
          __float2bfloat16(__bfloat162float(xr[j]) * r * __bfloat162float(g[j]));
  }
}

// row-strided RMSNorm (y, x, γ, eps, rows, cols, stride): BUG 0 sound, 1 steps rows by cols,
// 2 zeroes the padding of its output row
template <int BUG>
__device__ void rms_strided_t(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* g,
                              float eps, int rows, int cols, long stride) {
  const long pitch = BUG == 1 ? cols : stride;
  const __nv_bfloat16* xr = x + blockIdx.x * pitch;
  __nv_bfloat16* yr = y + blockIdx.x * pitch;
  const float r = rstd_row(xr, cols, eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    yr[j] = __float2bfloat16(__bfloat162float(xr[j]) * r * __bfloat162float(g[j]));
  if (BUG == 2)
    for (long j = cols + threadIdx.x; j < stride; j += blockDim.x) yr[j] = __float2bfloat16(0.f);
}
extern "C" __global__ void rms_strided(__nv_bfloat16* y, const __nv_bfloat16* x,
                                       const __nv_bfloat16* g, float eps, int rows, int cols,
                                       long stride) {
  rms_strided_t<0>(y, x, g, eps, rows, cols, stride);
}
extern "C" __global__ void rms_strided_ignores(__nv_bfloat16* y, const __nv_bfloat16* x,
                                               const __nv_bfloat16* g, float eps, int rows,
                                               int cols, long stride) {
  rms_strided_t<1>(y, x, g, eps, rows, cols, stride);
}
extern "C" __global__ void rms_strided_pads(__nv_bfloat16* y, const __nv_bfloat16* x,
                                            const __nv_bfloat16* g, float eps, int rows,
                                            int cols, long stride) {
  rms_strided_t<2>(y, x, g, eps, rows, cols, stride);
}
