// An Apex-style LayerNorm that also writes the row statistics (mean, invvar = rstd) for the
// backward pass, for `normcheck check --spec apex_layernorm.toml`: templates over the storage
// and accumulator types, 2-D blocks (32 x 4), per-thread Welford and Chan's merge across the
// warp and the warps.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

template <typename U>
__device__ void welford_merge(U& count, U& mean, U& m2, U b_count, U b_mean, U b_m2) {
  U n = count + b_count;
  if (n == U(0)) return;
  U delta = b_mean - mean;
  U frac = b_count / n;
  mean = mean + delta * frac;
  m2 = m2 + b_m2 + delta * delta * count * frac;
  count = n;
}

template <typename T, typename U>
__global__ void cuApplyLayerNorm(T* __restrict__ output, U* __restrict__ mean_out,
                                 U* __restrict__ invvar_out, const T* __restrict__ input,
                                 const int n1, const int n2, const U epsilon,
                                 const T* __restrict__ gamma, const T* __restrict__ beta) {
  const int row = blockIdx.x;
  if (row >= n1) return;
  const int tid = threadIdx.x + threadIdx.y * blockDim.x;
  const int nthreads = blockDim.x * blockDim.y;
  const T* x = input + (size_t)row * n2;
  U count = 0, mean = 0, m2 = 0;
  for (int i = tid; i < n2; i += nthreads) {
    U v = (U)x[i];
    count += U(1);
    U delta = v - mean;
    mean += delta / count;
    m2 += delta * (v - mean);
  }
  for (int o = 16; o > 0; o >>= 1) {
    U c = __shfl_xor_sync(0xffffffffu, count, o);
    U m = __shfl_xor_sync(0xffffffffu, mean, o);
    U q = __shfl_xor_sync(0xffffffffu, m2, o);
    welford_merge(count, mean, m2, c, m, q);
  }
  __shared__ U s_count[32], s_mean[32], s_m2[32];
  const int warp = tid / 32, lane = tid % 32;
  if (lane == 0) { s_count[warp] = count; s_mean[warp] = mean; s_m2[warp] = m2; }
  __syncthreads();
  if (tid == 0) {
    for (int w = 1; w < nthreads / 32; ++w) welford_merge(count, mean, m2, s_count[w], s_mean[w], s_m2[w]);
    s_mean[0] = mean;
    s_m2[0] = m2 / U(n2);
    mean_out[row] = mean;
    invvar_out[row] = rsqrtf(m2 / U(n2) + epsilon);
  }
  __syncthreads();
  const U mu = s_mean[0];
  const U invvar = rsqrtf(s_m2[0] + epsilon);
  T* y = output + (size_t)row * n2;
  for (int i = tid; i < n2; i += nthreads)
    y[i] = (T)((U)gamma[i] * (((U)x[i] - mu) * invvar) + (U)beta[i]);
}

template __global__ void cuApplyLayerNorm<__nv_bfloat16, float>(
    __nv_bfloat16*, float*, float*, const __nv_bfloat16*, const int, const int, const float,
    const __nv_bfloat16*, const __nv_bfloat16*);
template __global__ void cuApplyLayerNorm<float, float>(float*, float*, float*, const float*,
                                                        const int, const int, const float,
                                                        const float*, const float*);
