// Backward kernels for tests/test_backward_causes.py: sound ones in several styles, and planted
// bugs, each of which must fail (or warn) naming its own cause.
//
// INDEX
//   bwd_dx<T, CENTRED, GEMMA, BUG>  one block per row, statistics recomputed (two passes), then
//       Σg and Σg·x̂ by a shared-memory tree and dx; BUG 0 sound, 1 variance / (D-1), 2 ε missing,
//       3 γ where Gemma has 1+γ, 4 PyTorch 1.x's formula (b·x + c from Σg·x and Σg),
//       5 the row sums accumulated in T, 6 the sums of each warp only (never combined)
//   bwd_dx_saved<T, BUG>  LayerNorm's dx from the saved mean and rstd; BUG 0 sound, 4 PyTorch
//       1.x's formula, 7 the row sums Σg, Σg·x̂ taken over the next row's dy (rows mixed)
//   dgb_part<T> / dgb_final<BUG>  a two-stage dγ, dβ: per-block partials over 64 rows in float,
//       then a second kernel over the partials; BUG 0 sound, 1 the second stage in __half,
//       2 dβ never written (its buffer starts at zero)
//   bwd_from_y<T, CENTRED>  Apex's memory-efficient backward: x̂ = (y - β)/γ from the forward's
//       output, the saved rstd; dx, and dγ, dβ by atomics
//   bwd_fused<T>  the fused add's backward: reads h (the forward's sum) and the residual
//       stream's gradient dh; writes dx and d_residual = dnorm(h) + dh
#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <typename T>
__device__ __forceinline__ float f(T v) { return static_cast<float>(v); }
template <typename T>
__device__ __forceinline__ T to(float v) { return static_cast<T>(v); }

// a block sum by a shared-memory tree; STORE rounds every partial sum to T
template <typename T, bool STORE>
__device__ float block_sum(float v) {
  __shared__ float s[1024];
  if (STORE) v = f(to<T>(v));
  s[threadIdx.x] = v;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) {
      float a = s[threadIdx.x] + s[threadIdx.x + o];
      s[threadIdx.x] = STORE ? f(to<T>(a)) : a;
    }
    __syncthreads();
  }
  float r = s[0];
  __syncthreads();
  return r;
}

// the sum of each warp only: what a kernel that never combines its warps reads
__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T, bool CENTRED, bool GEMMA, int BUG>
__global__ void bwd_dx(T* dx, const T* dy, const T* x, const T* gamma, float eps, int rows,
                       int cols) {
  const int row = blockIdx.x;
  const T* xr = x + (size_t)row * cols;
  const T* dyr = dy + (size_t)row * cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += f(xr[j]);
  const float mean = CENTRED ? block_sum<T, false>(s) / cols : 0.f;
  float q = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float d = f(xr[j]) - mean;
    q += d * d;
  }
  const float ss = block_sum<T, false>(q);
  const float var = BUG == 1 ? ss / (cols - 1) : ss / cols;
  const float rstd = BUG == 2 ? rsqrtf(var) : rsqrtf(var + eps);
  auto gp = [&](int j) {
    float g = f(gamma[j]);
    return (GEMMA && BUG != 3) ? 1.f + g : g;
  };
  float sg = 0.f, sgx = 0.f, sgxr = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float g = f(dyr[j]) * gp(j);
    sg += g;
    sgx += g * (f(xr[j]) - mean) * rstd;
    sgxr += g * f(xr[j]);
  }
  float Sg, Sgx, Sgxr = 0.f;
  if (BUG == 6) {
    Sg = warp_sum(sg);
    Sgx = warp_sum(sgx);
  } else if (BUG == 5) {
    Sg = block_sum<T, true>(sg);
    Sgx = block_sum<T, true>(sgx);
  } else {
    Sg = block_sum<T, false>(sg);
    Sgx = block_sum<T, false>(sgx);
    Sgxr = block_sum<T, false>(sgxr);
  }
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float g = f(dyr[j]) * gp(j);
    float xh = (f(xr[j]) - mean) * rstd;
    float v;
    if (BUG == 4) {  // a = (db·mean - ds)·rstd³/D, b = -a·mean - db·rstd/D
      float a = (Sg * mean - Sgxr) * rstd * rstd * rstd / cols;
      float b = -a * mean - Sg * rstd / cols;
      v = rstd * g + a * f(xr[j]) + b;
    } else {
      v = rstd * (g - (CENTRED ? Sg / cols : 0.f) - xh * Sgx / cols);
    }
    dx[(size_t)row * cols + j] = to<T>(v);
  }
}

template <typename T, int BUG>
__global__ void bwd_dx_saved(T* dx, const T* dy, const T* x, const T* gamma, const float* mean_,
                             const float* rstd_, int rows, int cols) {
  const int row = blockIdx.x;
  const T* xr = x + (size_t)row * cols;
  const T* dyr = dy + (size_t)row * cols;
  const T* dys = BUG == 7 ? dy + (size_t)((row + 1) % rows) * cols : dyr;  // the sums' rows
  const float mean = mean_[row], rstd = rstd_[row];
  float sg = 0.f, sgx = 0.f, sgxr = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float g = f(dys[j]) * f(gamma[j]);
    sg += g;
    sgx += g * (f(xr[j]) - mean) * rstd;
    sgxr += g * f(xr[j]);
  }
  const float Sg = block_sum<T, false>(sg), Sgx = block_sum<T, false>(sgx);
  const float Sgxr = block_sum<T, false>(sgxr);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float g = f(dyr[j]) * f(gamma[j]);
    float v;
    if (BUG == 4) {
      float a = (Sg * mean - Sgxr) * rstd * rstd * rstd / cols;
      float b = -a * mean - Sg * rstd / cols;
      v = rstd * g + a * f(xr[j]) + b;
    } else {
      v = rstd * (g - Sg / cols - (f(xr[j]) - mean) * rstd * Sgx / cols);
    }
    dx[(size_t)row * cols + j] = to<T>(v);
  }
}

// two-stage dγ, dβ with the saved statistics: blocks of 64 rows, a thread per column
template <typename T>
__global__ void dgb_part(float* part_g, float* part_b, const T* dy, const T* x, const float* mean,
                         const float* rstd, int rows, int cols) {
  const int r0 = blockIdx.y * 64;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += gridDim.x * blockDim.x) {
    float g = 0.f, b = 0.f;
    for (int r = r0; r < min(r0 + 64, rows); ++r) {
      float d = f(dy[(size_t)r * cols + j]);
      g += d * (f(x[(size_t)r * cols + j]) - mean[r]) * rstd[r];
      b += d;
    }
    part_g[(size_t)blockIdx.y * cols + j] = g;
    part_b[(size_t)blockIdx.y * cols + j] = b;
  }
}

template <int BUG>
__global__ void dgb_final(float* dgamma, float* dbeta, const float* part_g, const float* part_b,
                          int rows, int cols) {
  const int nparts = (rows + 63) / 64;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += gridDim.x * blockDim.x) {
    float g = 0.f, b = 0.f;
    __half hg = __float2half(0.f), hb = __float2half(0.f);
    for (int p = 0; p < nparts; ++p) {
      if (BUG == 1) {
        hg = __float2half(__half2float(hg) + part_g[(size_t)p * cols + j]);
        hb = __float2half(__half2float(hb) + part_b[(size_t)p * cols + j]);
      } else {
        g += part_g[(size_t)p * cols + j];
        b += part_b[(size_t)p * cols + j];
      }
    }
    dgamma[j] = BUG == 1 ? __half2float(hg) : g;
    if (BUG != 2) dbeta[j] = BUG == 1 ? __half2float(hb) : b;
  }
}

// Apex's memory-efficient backward: x̂ from y
template <typename T, bool CENTRED>
__global__ void bwd_from_y(T* dx, float* dgamma, float* dbeta, const T* dy, const T* y,
                           const T* gamma, const T* beta, const float* rstd, int rows, int cols) {
  const int row = blockIdx.x;
  const float r = rstd[row];
  float sg = 0.f, sgx = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float gm = f(gamma[j]);
    float xh = (f(y[(size_t)row * cols + j]) - (CENTRED ? f(beta[j]) : 0.f)) / gm;
    float g = f(dy[(size_t)row * cols + j]) * gm;
    sg += g;
    sgx += g * xh;
    atomicAdd(&dgamma[j], f(dy[(size_t)row * cols + j]) * xh);
    if (CENTRED) atomicAdd(&dbeta[j], f(dy[(size_t)row * cols + j]));
  }
  const float Sg = block_sum<T, false>(sg), Sgx = block_sum<T, false>(sgx);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float gm = f(gamma[j]);
    float xh = (f(y[(size_t)row * cols + j]) - (CENTRED ? f(beta[j]) : 0.f)) / gm;
    float g = f(dy[(size_t)row * cols + j]) * gm;
    dx[(size_t)row * cols + j] = to<T>(r * (g - (CENTRED ? Sg / cols : 0.f) - xh * Sgx / cols));
  }
}

// the fused add's backward: the norm's gradient of h, plus dh, into dx and d_residual
template <typename T>
__global__ void bwd_fused(T* dx, T* d_residual, const T* dy, const T* h, const T* dh,
                          const T* gamma, const float* rstd, int rows, int cols) {
  const int row = blockIdx.x;
  const float r = rstd[row];
  float sgx = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    sgx += f(dy[(size_t)row * cols + j]) * f(gamma[j]) * f(h[(size_t)row * cols + j]) * r;
  const float Sgx = block_sum<T, false>(sgx);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    size_t k = (size_t)row * cols + j;
    float g = f(dy[k]) * f(gamma[j]);
    float v = r * (g - f(h[k]) * r * Sgx / cols) + f(dh[k]);
    dx[k] = to<T>(v);
    d_residual[k] = to<T>(v);
  }
}
