// A format for every role (#46): mixed precision as the field writes it (our own code).
//
//   ln_master_weights       LayerNorm of bf16 rows with fp32 γ and β (Apex's mixed-dtype, Megatron,
//                           TransformerEngine): y in float, rounded once to bf16 -- sound
//   ln_weights_to_bf16      the same, its fp32 weights rounded to bf16 before use -- a bug
//   rms_fp8_rows            RMSNorm of e4m3 rows, fp32 γ, bf16 y: each value widened to float -- sound
//   rms_fp8_squared_in_half the same, squaring each value in half: 448² = 200704 overflows fp16
//   rms_e5m2_rows           RMSNorm of e5m2 rows (the same code on __nv_fp8_e5m2) -- sound
//   rms_e5m2_squared_in_half  squaring in half: from |x| >= 256 (e5m2 reaches 57344) overflows
//   ln_backward_bf16_stats  a LayerNorm dx reading its saved mean and rstd as bf16 (Liger's
//                           stores): dx in float from the statistics as stored -- sound
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace {

__device__ float block_sum(float v) {
  __shared__ float part[1024];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  const float s = part[0];
  __syncthreads();
  return s;
}

template <bool ROUND_WEIGHTS>
__device__ void ln(__nv_bfloat16* y, const __nv_bfloat16* x, const float* g, const float* b,
                   float eps, int cols) {
  const __nv_bfloat16* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) s += __bfloat162float(xr[i]);
  const float mean = block_sum(s) / cols;
  float q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float d = __bfloat162float(xr[i]) - mean;
    q += d * d;
  }
  const float r = rsqrtf(block_sum(q) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    float gi = g[i], bi = b[i];
    if (ROUND_WEIGHTS) {
      gi = __bfloat162float(__float2bfloat16(gi));
      bi = __bfloat162float(__float2bfloat16(bi));
    }
    y[(size_t)blockIdx.x * cols + i] =
        __float2bfloat16((__bfloat162float(xr[i]) - mean) * r * gi + bi);
  }
}

template <bool IN_HALF, typename FP8>
__device__ void rms_fp8(__nv_bfloat16* y, const FP8* x, const float* g, float eps, int cols) {
  const FP8* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    if (IN_HALF) {
      const __half h = __float2half(float(xr[i]));
      s += __half2float(__hmul(h, h));
    } else {
      const float v = float(xr[i]);
      s += v * v;
    }
  }
  const float r = rsqrtf(block_sum(s) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2bfloat16(float(xr[i]) * r * g[i]);
}

}  // namespace

extern "C" __global__ void ln_master_weights(__nv_bfloat16* y, const __nv_bfloat16* x,
                                             const float* g, const float* b, float eps,
                                             int rows, int cols) {
  ln<false>(y, x, g, b, eps, cols);
}
extern "C" __global__ void ln_weights_to_bf16(__nv_bfloat16* y, const __nv_bfloat16* x,
                                              const float* g, const float* b, float eps,
                                              int rows, int cols) {
  ln<true>(y, x, g, b, eps, cols);
}
extern "C" __global__ void rms_fp8_rows(__nv_bfloat16* y, const __nv_fp8_e4m3* x,
                                        const float* g, float eps, int rows, int cols) {
  rms_fp8<false>(y, x, g, eps, cols);
}
extern "C" __global__ void rms_fp8_squared_in_half(__nv_bfloat16* y, const __nv_fp8_e4m3* x,
                                                   const float* g, float eps, int rows,
                                                   int cols) {
  rms_fp8<true>(y, x, g, eps, cols);
}
extern "C" __global__ void rms_e5m2_rows(__nv_bfloat16* y, const __nv_fp8_e5m2* x,
                                         const float* g, float eps, int rows, int cols) {
  rms_fp8<false>(y, x, g, eps, cols);
}
extern "C" __global__ void rms_e5m2_squared_in_half(__nv_bfloat16* y, const __nv_fp8_e5m2* x,
                                                    const float* g, float eps, int rows,
                                                    int cols) {
  rms_fp8<true>(y, x, g, eps, cols);
}

// -- a backward reading its saved statistics in bf16 -------------------------------------------
extern "C" __global__ void ln_backward_bf16_stats(__nv_bfloat16* dx, const __nv_bfloat16* dy,
                                                  const __nv_bfloat16* x,
                                                  const __nv_bfloat16* g,
                                                  const __nv_bfloat16* mean,
                                                  const __nv_bfloat16* rstd, int rows,
                                                  int cols) {
  const size_t off = (size_t)blockIdx.x * cols;
  const float mu = __bfloat162float(mean[blockIdx.x]), r = __bfloat162float(rstd[blockIdx.x]);
  float s1 = 0.f, s2 = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float gv = __bfloat162float(dy[off + j]) * __bfloat162float(g[j]);
    s1 += gv;
    s2 += gv * ((__bfloat162float(x[off + j]) - mu) * r);
  }
  s1 = block_sum(s1);
  s2 = block_sum(s2);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float xh = (__bfloat162float(x[off + j]) - mu) * r;
    const float gv = __bfloat162float(dy[off + j]) * __bfloat162float(g[j]);
    dx[off + j] = __float2bfloat16(r * (gv - s1 / cols - xh * s2 / cols));
  }
}
