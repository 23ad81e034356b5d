// Bugs of the field's norms whose cause is in the shape of the error, not in a variance's
// accuracy (#47): each kernel below has one, and the check must name it.
//
//   ln_beta_twice        LayerNorm (fp16) adding β twice
//   rms_block_divisor    RMSNorm (fp16) dividing the sum of squares by blockDim.x, not cols
//   add_rms_h_truncated  fused add + RMSNorm (fp16): y right, h stored rounded toward zero
//   ln_gamma_by_row      LayerNorm (fp16) reading γ[row] instead of γ[col]: out of bounds
//   rms_pairs_drop_tail  RMSNorm (fp16) on pairs of elements: an odd width's last one never
//                        summed (nor written by the pair loop: a scalar tail writes it)
//   rms_persistent_stale RMSNorm (fp32) in a persistent grid of 4 blocks, its shared
//                        accumulator never reset between the rows a block processes
//   ln_welford_equal     LayerNorm (fp32), per-thread Welford merged with equal weights
//   ln_two_pass_fp32     a sound fp32 two-pass LayerNorm (warns on constant rows: their mean
//                        rounds)
//   ln_missing_barrier   LayerNorm (fp16) reusing its shared partials for the variance with no
//                        __syncthreads after every thread read the mean: a race in one block
//   ln_bf16_all_storage  LayerNorm (bf16) with every step in __nv_bfloat16 arithmetic (no upcast:
//                        the sums, the mean, x - mean, the squares, hrsqrt, the epilogue)
//   rms_ftz_warp         RMSNorm (fp32), a warp per row, its products and rsqrt the .ftz PTX
//                        that --use_fast_math compiles to: subnormal x flushed to 0
//   ln_welford_no_scale  LayerNorm (fp16), per-thread Welford merged by butterflies adding δ²
//                        where n_a·n_b/n·δ² is right (an empty partner's gap too)
//   rms_sound_fp32       a sound fp32 RMSNorm in plain C (block sum by butterflies): passes, and
//                        fails on tiny rows when built as --use_fast_math builds it (FTZ)
//   rms_clamp_input      RMSNorm (fp16) clamping each x to ±65504 as it reads it (fmaxf/fminf,
//                        as ExLlamaV2/V3 do): an infinite input reads as 65504, its row finite
#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

}  // namespace

extern "C" __global__ void ln_beta_twice(__half* y, const __half* x, const __half* g,
                                         const __half* b, float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) s += __half2float(xr[i]);
  const float mean = block_sum(s) / cols;
  float q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float d = __half2float(xr[i]) - mean;
    q += d * d;
  }
  const float r = rsqrtf(block_sum(q) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float bb = __half2float(b[i]);
    y[(size_t)blockIdx.x * cols + i] =
        __float2half((__half2float(xr[i]) - mean) * r * __half2float(g[i]) + bb + bb);
  }
}

extern "C" __global__ void rms_block_divisor(__half* y, const __half* x, const __half* g,
                                             float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = __half2float(xr[i]);
    s += v * v;
  }
  const float r = rsqrtf(block_sum(s) / blockDim.x + eps);  // the block, not the row
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2half(__half2float(xr[i]) * r * __half2float(g[i]));
}

extern "C" __global__ void add_rms_h_truncated(__half* h, __half* y, const __half* x,
                                               const __half* res, const __half* g, float eps,
                                               int rows, int cols) {
  const size_t o = (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = __half2float(x[o + i]) + __half2float(res[o + i]);
    h[o + i] = __float2half_rz(v);  // truncated: the sum is exact in float, stored toward zero
    s += v * v;
  }
  const float r = rsqrtf(block_sum(s) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = __half2float(x[o + i]) + __half2float(res[o + i]);
    y[o + i] = __float2half(v * r * __half2float(g[i]));
  }
}

extern "C" __global__ void ln_gamma_by_row(__half* y, const __half* x, const __half* g,
                                           const __half* b, float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) s += __half2float(xr[i]);
  const float mean = block_sum(s) / cols;
  float q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float d = __half2float(xr[i]) - mean;
    q += d * d;
  }
  const float r = rsqrtf(block_sum(q) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2half(
        (__half2float(xr[i]) - mean) * r * __half2float(g[blockIdx.x * cols + i]) +
        __half2float(b[i]));
}

extern "C" __global__ void rms_pairs_drop_tail(__half* y, const __half* x, const __half* g,
                                               float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols / 2; i += blockDim.x) {
    const float a = __half2float(xr[2 * i]), c = __half2float(xr[2 * i + 1]);
    s += a * a + c * c;
  }
  const float r = rsqrtf(block_sum(s) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2half(__half2float(xr[i]) * r * __half2float(g[i]));
}

extern "C" __global__ void rms_persistent_stale(float* y, const float* x, const float* g,
                                                float eps, int rows, int cols) {
  __shared__ float acc;
  __shared__ float part[1024];
  if (threadIdx.x == 0) acc = 0.f;  // set once: never again between rows
  __syncthreads();
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + (size_t)row * cols;
    float s = 0.f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) s += xr[i] * xr[i];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
      float t = 0.f;
      for (int k = 0; k < blockDim.x; ++k) t += part[k];
      acc += t;
    }
    __syncthreads();
    const float r = rsqrtf(acc / cols + eps);
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
      y[(size_t)row * cols + i] = xr[i] * r * g[i];
    __syncthreads();
  }
}

extern "C" __global__ void ln_welford_equal(float* y, const float* x, const float* g,
                                            const float* b, float eps, int rows, int cols) {
  __shared__ float pm[1024], pq[1024];
  const float* xr = x + (size_t)blockIdx.x * cols;
  float mean = 0.f, m2 = 0.f, n = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    n += 1.f;
    const float d = xr[i] - mean;
    mean += d / n;
    m2 += d * (xr[i] - mean);
  }
  pm[threadIdx.x] = mean;
  pq[threadIdx.x] = m2;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) {  // merged as if both halves held as many elements
      const float d = pm[threadIdx.x + o] - pm[threadIdx.x];
      pm[threadIdx.x] = pm[threadIdx.x] + 0.5f * d;
      pq[threadIdx.x] = pq[threadIdx.x] + pq[threadIdx.x + o];
    }
    __syncthreads();
  }
  const float mu = pm[0];
  __syncthreads();
  float q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) q += (xr[i] - mu) * (xr[i] - mu);
  const float r = rsqrtf(block_sum(q) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = (xr[i] - mu) * r * g[i] + b[i];
}

extern "C" __global__ void ln_two_pass_fp32(float* y, const float* x, const float* g,
                                            const float* b, float eps, int rows, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s) / cols;
  float q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) q += (xr[i] - mean) * (xr[i] - mean);
  const float r = rsqrtf(block_sum(q) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = (xr[i] - mean) * r * g[i] + b[i];
}

extern "C" __global__ void ln_missing_barrier(__half* y, const __half* x, const __half* g,
                                              const __half* b, float eps, int rows, int cols) {
  __shared__ float red[1024];
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) s += __half2float(xr[i]);
  red[threadIdx.x] = s;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
    __syncthreads();
  }
  const float mean = red[0] / cols;
  // missing: __syncthreads() -- red[0] is overwritten below before every thread has read it
  float q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float d = __half2float(xr[i]) - mean;
    q += d * d;
  }
  red[threadIdx.x] = q;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
    __syncthreads();
  }
  const float r = rsqrtf(red[0] / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2half(
        (__half2float(xr[i]) - mean) * r * __half2float(g[i]) + __half2float(b[i]));
}

namespace {

// a block sum in bf16: each warp's butterfly, the warps' partials through a second one
__device__ __nv_bfloat16 bf_block_sum(__nv_bfloat16 v) {
  __shared__ __nv_bfloat16 part[32];
  for (int o = 16; o > 0; o >>= 1) v = __hadd(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  __nv_bfloat16 t = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : __float2bfloat16(0.f);
  if (threadIdx.x < 32)
    for (int o = 16; o > 0; o >>= 1) t = __hadd(t, __shfl_xor_sync(0xffffffffu, t, o));
  __shared__ __nv_bfloat16 total;
  if (threadIdx.x == 0) total = t;
  __syncthreads();
  const __nv_bfloat16 s = total;
  __syncthreads();
  return s;
}

}  // namespace

extern "C" __global__ void ln_bf16_all_storage(__nv_bfloat16* y, const __nv_bfloat16* x,
                                               const __nv_bfloat16* g, const __nv_bfloat16* b,
                                               float eps, int rows, int cols) {
  const __nv_bfloat16* xr = x + (size_t)blockIdx.x * cols;
  __nv_bfloat16 s = __float2bfloat16(0.f);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s = __hadd(s, xr[j]);
  const __nv_bfloat16 n = __int2bfloat16_rn(cols);
  const __nv_bfloat16 mean = __hdiv(bf_block_sum(s), n);
  __nv_bfloat16 q = __float2bfloat16(0.f);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const __nv_bfloat16 d = __hsub(xr[j], mean);
    q = __hadd(q, __hmul(d, d));
  }
  const __nv_bfloat16 rstd = hrsqrt(__hadd(__hdiv(bf_block_sum(q), n), __float2bfloat16(eps)));
  __nv_bfloat16* yr = y + (size_t)blockIdx.x * cols;
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    yr[j] = __hadd(__hmul(__hmul(__hsub(xr[j], mean), rstd), g[j]), b[j]);
}

extern "C" __global__ void rms_ftz_warp(float* y, const float* x, const float* g, float eps,
                                        int rows, int cols) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* xr = x + (size_t)row * cols;
  float ss = 0.f;
  for (int j = lane; j < cols; j += 32) {
    float sq;
    asm("mul.ftz.f32 %0, %1, %1;" : "=f"(sq) : "f"(xr[j]));
    ss += sq;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(ss / cols + eps));
  for (int j = lane; j < cols; j += 32) {
    float p;
    asm("mul.ftz.f32 %0, %1, %2;" : "=f"(p) : "f"(xr[j]), "f"(r));
    y[(size_t)row * cols + j] = p * g[j];
  }
}

extern "C" __global__ void ln_welford_no_scale(__half* y, const __half* x, const __half* g,
                                               const __half* b, float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float n = 0.f, mean = 0.f, m2 = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = __half2float(xr[j]);
    n += 1.f;
    float d = v - mean;
    mean += d / n;
    m2 += d * (v - mean);
  }
  for (int o = 16; o > 0; o >>= 1) {
    float nb = __shfl_xor_sync(0xffffffffu, n, o);
    float mb = __shfl_xor_sync(0xffffffffu, mean, o);
    float qb = __shfl_xor_sync(0xffffffffu, m2, o);
    float nn = n + nb;
    float d = mb - mean;
    if (nn > 0.f) {
      mean = mean + d * (nb / nn);
      m2 = m2 + qb + d * d;  // missing * n * nb / nn
    }
    n = nn;
  }
  __shared__ float sn[32], sm[32], sq[32];
  int w = threadIdx.x / 32, l = threadIdx.x % 32;
  if (l == 0) { sn[w] = n; sm[w] = mean; sq[w] = m2; }
  __syncthreads();
  if (w == 0) {
    int nw = blockDim.x / 32;
    n = l < nw ? sn[l] : 0.f; mean = l < nw ? sm[l] : 0.f; m2 = l < nw ? sq[l] : 0.f;
    for (int o = 16; o > 0; o >>= 1) {
      float nb = __shfl_xor_sync(0xffffffffu, n, o);
      float mb = __shfl_xor_sync(0xffffffffu, mean, o);
      float qb = __shfl_xor_sync(0xffffffffu, m2, o);
      float nn = n + nb;
      float d = mb - mean;
      if (nn > 0.f) { mean = mean + d * (nb / nn); m2 = m2 + qb + d * d; }
      n = nn;
    }
    if (l == 0) { sm[0] = mean; sq[0] = m2; }
  }
  __syncthreads();
  const float mu = sm[0];
  const float rstd = rsqrtf(sq[0] / cols + eps);
  __half* yr = y + (size_t)blockIdx.x * cols;
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    yr[j] = __float2half((__half2float(xr[j]) - mu) * rstd * __half2float(g[j]) + __half2float(b[j]));
}

extern "C" __global__ void rms_sound_fp32(float* y, const float* x, const float* g, float eps,
                                          int rows, int cols) {
  __shared__ float part[32];
  const float* xr = x + (size_t)blockIdx.x * cols;
  float ss = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) ss += xr[j] * xr[j];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  float t = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.f;
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  __shared__ float total;
  if (threadIdx.x == 0) total = t;
  __syncthreads();
  const float r = rsqrtf(total / cols + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) y[(size_t)blockIdx.x * cols + j] = xr[j] * r * g[j];
}

extern "C" __global__ void rms_clamp_input(__half* y, const __half* x, const __half* g, float eps,
                                           int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float ss = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = fmaxf(-65504.f, fminf(__half2float(xr[i]), 65504.f));
    ss += v * v;
  }
  const float r = rsqrtf(block_sum(ss) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = fmaxf(-65504.f, fminf(__half2float(xr[i]), 65504.f));
    y[(size_t)blockIdx.x * cols + i] = __float2half_rn(v * r * __half2float(g[i]));
  }
}
