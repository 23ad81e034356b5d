// Quantised RMSNorm kernels written the way the public ones are, each with one planted departure
// from its contract (tests/test_quant.py: every one must fail naming its cause) -- and one whose
// only difference from the built-ins is its summation order (it must pass).
//
// ABI: (q, scales, x, gamma, scale, eps, rows, cols); one block of 256 threads per row.
//
// INDEX
//   vllm_token<B>    the vLLM per-token fp8 contract; B = 0 sums the squares in another order
//                    (thread 0 adds the block's partial sums in turn); the bugs:
//                    1 y not rounded before the cast, 2 x̂ not rounded before ×γ,
//                    3 × (1/s) instead of ÷ s, 4 amax of the float y, 5 no scale floor,
//                    6 the scale written at row + 1, 7 x̂ rounded and y not (only the last
//                    rounding skipped), 8 amax of x̂ (before ×γ)
//   trtllm_token<B>  the TensorRT-LLM per-token fp8 contract, amax starting at the bf16 value of
//                    1e-6f as the source's `T_scalar amax = 1e-6f`; 1: the bf16 rounding of y
//                    skipped before the fp8 cast (TensorRT-LLM #14464)
//   trtllm_token_int8<B> its int8 per-token form (× 127/amax, cvt.rni.sat.s8); 1: amax starting
//                    at the float 1e-6f, not its bf16 value (all-zero rows: s = 7.874e-09, where
//                    the source stores 7.861e-09)
//   vllm_static<B>   the vLLM static fp8 contract; 1: no clamp (NaN above 464)
//   vllm_group<B>    the vLLM per-group (128) fp8 contract, every thread a whole group; 1: each
//                    group's amax over 129 columns; 2: built for groups of 64 (twice the scales)
//   mx_block<B>      an MXFP8 RMSNorm (TransformerEngine's contract: e8m0 of amax·(1/448)
//                    rounded up, v = y·2^-e); 1: the e8m0 scale rounded down
//   flashinfer_static<B> FlashInfer's static fp8 contract; 1: y rounded to bf16 first
#include <cuda_bf16.h>
#include <cuda_fp8.h>

__device__ float sum_ordered(float v, bool sequential) {
  __shared__ float part[1024];
  __shared__ float out;
  part[threadIdx.x] = v;
  __syncthreads();
  if (sequential) {
    if (threadIdx.x == 0) {
      float s = 0.0f;
      for (int i = blockDim.x - 1; i >= 0; --i) s += part[i];  // backwards, one by one
      out = s;
    }
  } else {
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
      if (threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
      __syncthreads();
    }
    if (threadIdx.x == 0) out = part[0];
  }
  __syncthreads();
  float r = out;
  __syncthreads();
  return r;
}

__device__ float max_all(float v) {
  __shared__ float part[1024];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + o]);
    __syncthreads();
  }
  float r = part[0];
  __syncthreads();
  return r;
}

__device__ __forceinline__ float bf(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

__device__ __forceinline__ unsigned char fp8_clamped(float v) {
  v = fmaxf(-448.0f, fminf(v, 448.0f));
  return __nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E4M3);
}

__device__ float rstd_of(const __nv_bfloat16* xr, int cols, float eps, bool sequential) {
  float ss = 0.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = __bfloat162float(xr[j]);
    ss += v * v;
  }
  return rsqrtf(sum_ordered(ss, sequential) / cols + eps);
}

template <int BUG>
__global__ void vllm_token(unsigned char* q, float* scales, const __nv_bfloat16* x,
                           const __nv_bfloat16* w, const float* scale, float eps, int rows,
                           int cols) {
  const int row = blockIdx.x;
  const __nv_bfloat16* xr = x + (size_t)row * cols;
  const float r = rstd_of(xr, cols, eps, BUG == 0);
  auto y_of = [&](int j, bool for_amax) {
    float v = __bfloat162float(xr[j]), g = __bfloat162float(w[j]);
    if (BUG == 1 || (BUG == 4 && for_amax)) return v * r * g;
    if (BUG == 2) return bf(v * r * g);
    if (BUG == 7) return bf(v * r) * g;
    if (BUG == 8 && for_amax) return bf(v * r);
    return bf(bf(v * r) * g);
  };
  float a = 0.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) a = fmaxf(a, fabsf(y_of(j, true)));
  a = max_all(a);
  float s = a / 448.0f;
  if (BUG != 5) s = fmaxf(s, 1.0f / (448.0f * 512.0f));
  if (threadIdx.x == 0) scales[BUG == 6 ? (row + 1) % rows : row] = s;
  const float inv = 1.0f / s;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float y = y_of(j, false);
    q[(size_t)row * cols + j] = fp8_clamped(BUG == 3 ? y * inv : y / s);
  }
}

template <int BUG>
__global__ void trtllm_token(unsigned char* q, float* scales, const __nv_bfloat16* x,
                             const __nv_bfloat16* w, const float* scale, float eps, int rows,
                             int cols) {
  const int row = blockIdx.x;
  const __nv_bfloat16* xr = x + (size_t)row * cols;
  const float r = rstd_of(xr, cols, eps, false);
  float a = bf(1e-6f);  // the source: __nv_bfloat16 amax = 1e-6f
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float y = __bfloat162float(xr[j]) * r * __bfloat162float(w[j]);
    a = fmaxf(a, fabsf(BUG == 1 ? y : bf(y)));
  }
  a = max_all(a);
  const float m = fminf(448.0f / a, 448.0f * 512.0f);
  if (threadIdx.x == 0) scales[row] = fmaxf(a / 448.0f, 1.0f / (448.0f * 512.0f));
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float y = __bfloat162float(xr[j]) * r * __bfloat162float(w[j]);
    if (BUG != 1) y = bf(y);
    q[(size_t)row * cols + j] = __nv_cvt_float_to_fp8(y * m, __NV_SATFINITE, __NV_E4M3);
  }
}

template <int BUG>
__global__ void vllm_static(unsigned char* q, float* scales, const __nv_bfloat16* x,
                            const __nv_bfloat16* w, const float* scale, float eps, int rows,
                            int cols) {
  const int row = blockIdx.x;
  const __nv_bfloat16* xr = x + (size_t)row * cols;
  const float r = rstd_of(xr, cols, eps, false);
  const float inv = 1.0f / scale[0];
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float y = bf(bf(__bfloat162float(xr[j]) * r) * __bfloat162float(w[j]));
    q[(size_t)row * cols + j] = BUG == 1 ? __nv_cvt_float_to_fp8(y * inv, __NV_NOSAT, __NV_E4M3)
                                         : fp8_clamped(y * inv);
  }
}

template <int BUG>
__global__ void vllm_group(unsigned char* q, float* scales, const __nv_bfloat16* x,
                           const __nv_bfloat16* w, const float* scale, float eps, int rows,
                           int cols) {
  const int row = blockIdx.x;
  constexpr int G = BUG == 2 ? 64 : 128;
  const int groups = (cols + G - 1) / G;
  const __nv_bfloat16* xr = x + (size_t)row * cols;
  const float r = rstd_of(xr, cols, eps, false);
  // every thread takes whole groups (thread g: group g)
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    int start = g * G, end = min(start + G + (BUG == 1 ? 1 : 0), cols);
    float a = 0.0f;
    for (int j = start; j < end; ++j)
      a = fmaxf(a, fabsf(bf(bf(__bfloat162float(xr[j]) * r) * __bfloat162float(w[j]))));
    float s = fmaxf(a / 448.0f, 1.0f / (448.0f * 512.0f));
    scales[(size_t)row * groups + g] = s;
    for (int j = start; j < min(start + G, cols); ++j) {
      float y = bf(bf(__bfloat162float(xr[j]) * r) * __bfloat162float(w[j]));
      q[(size_t)row * cols + j] = fp8_clamped(y / s);
    }
  }
}

template <int BUG>
__global__ void flashinfer_static(unsigned char* q, float* scales, const __nv_bfloat16* x,
                                  const __nv_bfloat16* w, const float* scale, float eps, int rows,
                                  int cols) {
  const int row = blockIdx.x;
  const __nv_bfloat16* xr = x + (size_t)row * cols;
  const float r = rstd_of(xr, cols, eps, false);
  const float inv = 1.0f / scale[0];
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float y = __bfloat162float(xr[j]) * r * __bfloat162float(w[j]);
    if (BUG == 1) y = bf(y);
    q[(size_t)row * cols + j] = fp8_clamped(y * inv);
  }
}

// e8m0 of a positive float: its exponent, rounded up (TransformerEngine's float_to_e8m0) or,
// BUG 1, down (the exponent field as it is)
template <int BUG>
__device__ __forceinline__ unsigned char e8m0_of(float v) {
  if (v == 0.0f) return 0;
  unsigned u = __float_as_uint(v);
  unsigned char e = (unsigned char)(u >> 23);
  if (BUG == 0 && (u & 0x7FFFFF) && e != 0xFE) ++e;
  return e;
}

template <int BUG>
__global__ void mx_block(unsigned char* q, unsigned char* scales, const __nv_bfloat16* x,
                         const __nv_bfloat16* w, const float* scale, float eps, int rows,
                         int cols) {
  const int row = blockIdx.x;
  const int blocks = cols / 32;
  const __nv_bfloat16* xr = x + (size_t)row * cols;
  const float r = rstd_of(xr, cols, eps, false);
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) {
    float a = 0.0f;
    for (int j = 32 * b; j < 32 * b + 32; ++j)
      a = fmaxf(a, fabsf(__bfloat162float(xr[j]) * r * __bfloat162float(w[j])));
    const unsigned char e = e8m0_of<BUG>(a * (1.0f / 448.0f));
    scales[(size_t)row * blocks + b] = e;
    const float m = e == 0 ? 1.f : __int_as_float((254 - (int)e) << 23);
    for (int j = 32 * b; j < 32 * b + 32; ++j) {
      const float y = __bfloat162float(xr[j]) * r * __bfloat162float(w[j]);
      q[(size_t)row * cols + j] = __nv_cvt_float_to_fp8(y * m, __NV_SATFINITE, __NV_E4M3);
    }
  }
}

template <int BUG>
__global__ void trtllm_token_int8(signed char* q, float* scales, const __nv_bfloat16* x,
                                  const __nv_bfloat16* w, const float* scale, float eps, int rows,
                                  int cols) {
  const int row = blockIdx.x;
  const __nv_bfloat16* xr = x + (size_t)row * cols;
  const float r = rstd_of(xr, cols, eps, false);
  float a = BUG == 1 ? 1e-6f : bf(1e-6f);  // the source: T_scalar amax = 1e-6f
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    a = fmaxf(a, fabsf(bf(__bfloat162float(xr[j]) * r * __bfloat162float(w[j]))));
  a = max_all(a);
  const float m = 127.0f / a;
  if (threadIdx.x == 0) scales[row] = a / 127.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float y = bf(__bfloat162float(xr[j]) * r * __bfloat162float(w[j]));
    int v;
    asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(v) : "f"(y * m));
    q[(size_t)row * cols + j] = (signed char)v;
  }
}
