// TransformerEngine-style RMSNorm with fp8 outputs (our own code, written the way
// common/normalization/rmsnorm/ is):
//  - rmsnorm_fwd_fp8: delayed scaling -- z = fp8((x · rsigma · γ) · scale) with the satfinite
//    conversion, and the tensor's amax (of the value before the scale) by atomicMax;
//  - MXFP8 (rmsnorm_fwd_mxfp8.cu's structure): a pre-pass writes rsigma, one warp per row; then
//    one CTA per 32 × 128 tile -- warp w rows 8w..8w+7, lane l columns 4l..4l+3 -- computes
//    y = (x · rsigma) · γ in float, the amax of each 32-column block over 8 lanes, the e8m0
//    scale float_to_e8m0(amax · (1/448)) rounded up, and converts y · 2^-e with
//    cvt.rn.satfinite.e4m3x2.f32.  Rows are bounds-checked (TE requires multiples of 128).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

namespace te_like {

constexpr int THREADS_PER_WARP = 32;

__device__ __forceinline__ float warp_reduce_sum(float v) {
  for (int o = THREADS_PER_WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

template <typename IType>
__global__ void rmsnorm_fwd_fp8(uint8_t* __restrict__ z, const IType* __restrict__ x,
                                const IType* __restrict__ gamma, const float* __restrict__ scale,
                                float* __restrict__ amax, float epsilon, int rows, int cols) {
  __shared__ float partial[32];
  __shared__ float s_rs;
  const int row = blockIdx.x;
  const IType* xr = x + (size_t)row * cols;
  float sum = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = static_cast<float>(xr[c]);
    sum += v * v;
  }
  sum = warp_reduce_sum(sum);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.f;
    v = warp_reduce_sum(v);
    if (threadIdx.x == 0) s_rs = 1.0f / sqrtf(v / static_cast<float>(cols) + epsilon);
  }
  __syncthreads();
  const float rs = s_rs, sc = *scale;
  float local_amax = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float temp = static_cast<float>(xr[c]) * rs * static_cast<float>(gamma[c]);
    local_amax = fmaxf(local_amax, fabsf(temp));
    z[(size_t)row * cols + c] = __nv_cvt_float_to_fp8(temp * sc, __NV_SATFINITE, __NV_E4M3);
  }
  for (int o = 16; o > 0; o /= 2) local_amax = fmaxf(local_amax, __shfl_xor_sync(0xffffffff, local_amax, o));
  if (threadIdx.x % 32 == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(local_amax));
}

// ---- MXFP8 ----
constexpr int kScaleBlock = 32, kTileRows = 32, kTileCols = 128, kThreads = 128;
constexpr int kRowsPerWarp = 8, kColsPerLane = 4, kLanesPerBlock = 8, kRsigmaRowsPerCTA = 4;

template <typename IType>
__global__ void rmsnorm_mxfp8_rsigma_kernel(const IType* x, float* rsigma, int rows, int cols,
                                            float epsilon) {
  const int row = blockIdx.x * kRsigmaRowsPerCTA + threadIdx.x / THREADS_PER_WARP;
  const int lane = threadIdx.x % THREADS_PER_WARP;
  if (row >= rows) return;
  const IType* x_row = x + (size_t)row * cols;
  float sum = 0.f;
  for (int c = lane; c < cols; c += THREADS_PER_WARP) {
    const float v = static_cast<float>(x_row[c]);
    sum += v * v;
  }
  sum = warp_reduce_sum(sum);
  if (lane == 0) rsigma[row] = 1.0f / sqrtf(sum / static_cast<float>(cols) + epsilon);
}

__device__ __forceinline__ uint8_t float_to_e8m0(float val) {
  if (isnan(val)) return 0xFF;
  if (isinf(val)) return 0xFE;
  if (val == 0.0f) return 0x00;
  uint32_t u = __float_as_uint(val);
  uint8_t exponent = (uint8_t)(u >> 23);
  uint32_t mantissa = u & 0x7FFFFF;
  if ((mantissa > 0 && exponent != 0xFE) && !(exponent == 0 && mantissa <= 0x400000)) ++exponent;
  return exponent;
}

__device__ __forceinline__ float exp2f_rcp(uint8_t e) {
  return e == 0 ? 1.f : __int_as_float((254 - (int)e) << 23);
}

__device__ __forceinline__ uint16_t mul_cvt_2x(float a, float b, float m) {
  uint16_t out;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(out) : "f"(b * m), "f"(a * m));
  return out;
}

template <typename IType, typename WType>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_mxfp8_quantize_kernel(const IType* x, const WType* gamma, const float* rsigma,
                                  uint8_t* data, uint8_t* scale_inv, int rows, int cols) {
  constexpr float kMaxNormRcp = 1.0f / 448.0f;
  const int warp = threadIdx.x / THREADS_PER_WARP, lane = threadIdx.x % THREADS_PER_WARP;
  const int row0 = blockIdx.x * kTileRows + warp * kRowsPerWarp;
  const int col0 = blockIdx.y * kTileCols + lane * kColsPerLane;
  const size_t scale_stride = cols / kScaleBlock;
  float g[kColsPerLane];
  for (int i = 0; i < kColsPerLane; ++i) g[i] = static_cast<float>(gamma[col0 + i]);
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = row0 + r;
    const bool live = row < rows;  // the shuffles below need every lane
    float y[kColsPerLane];
    const float rs = live ? rsigma[row] : 0.f;
    for (int i = 0; i < kColsPerLane; ++i)
      y[i] = live ? (static_cast<float>(x[(size_t)row * cols + col0 + i]) * rs) * g[i] : 0.f;
    float amax = 0.f;
    for (int i = 0; i < kColsPerLane; ++i) amax = fmaxf(amax, fabsf(y[i]));
    for (int offset = 1; offset < kLanesPerBlock; offset *= 2)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, offset));
    const uint8_t e = float_to_e8m0(amax * kMaxNormRcp);
    const float m = exp2f_rcp(e);
    if (!live) continue;
    const uint16_t lo = mul_cvt_2x(y[0], y[1], m), hi = mul_cvt_2x(y[2], y[3], m);
    uint8_t* dst = data + (size_t)row * cols + col0;
    dst[0] = lo & 0xFF;
    dst[1] = lo >> 8;
    dst[2] = hi & 0xFF;
    dst[3] = hi >> 8;
    if (lane % kLanesPerBlock == 0) scale_inv[(size_t)row * scale_stride + col0 / kScaleBlock] = e;
  }
}

}  // namespace te_like
