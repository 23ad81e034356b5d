// PyTorch-style LayerNorm in two launches, for `normcheck check --spec pytorch_layernorm.toml`:
// RowwiseMomentsCUDAKernel computes each row's mean and rstd with per-thread Welford updates
// combined across the warp and then the block, LayerNormForwardCUDAKernel applies them one
// element per thread.  Templated over the storage type (T) and the accumulator (T_ACC).
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

template <typename T_ACC>
struct WelfordData {
  T_ACC mean, m2, n;
};

template <typename T_ACC>
__device__ WelfordData<T_ACC> welford_combine(WelfordData<T_ACC> a, WelfordData<T_ACC> b) {
  if (a.n == 0) return b;
  if (b.n == 0) return a;
  T_ACC n = a.n + b.n;
  T_ACC nb_over_n = b.n / n;
  T_ACC delta = b.mean - a.mean;
  return {a.mean + delta * nb_over_n, a.m2 + b.m2 + delta * delta * a.n * nb_over_n, n};
}

template <typename T_ACC>
__device__ WelfordData<T_ACC> warp_welford(WelfordData<T_ACC> v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    WelfordData<T_ACC> o{__shfl_down_sync(0xffffffffu, v.mean, offset),
                         __shfl_down_sync(0xffffffffu, v.m2, offset),
                         __shfl_down_sync(0xffffffffu, v.n, offset)};
    v = welford_combine(v, o);
  }
  return v;
}

template <typename T, typename T_ACC>
__global__ void RowwiseMomentsCUDAKernel(int64_t N, T_ACC eps, const T* X, T_ACC* mean,
                                         T_ACC* rstd) {
  __shared__ WelfordData<T_ACC> partial[32];
  const int64_t i = blockIdx.x;
  WelfordData<T_ACC> v{0, 0, 0};
  for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
    T_ACC x = static_cast<T_ACC>(X[i * N + j]);
    v.n += 1;
    T_ACC delta = x - v.mean;
    v.mean += delta / v.n;
    v.m2 += delta * (x - v.mean);
  }
  v = warp_welford(v);
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
  if (lane == 0) partial[wid] = v;
  __syncthreads();
  if (wid == 0) {
    WelfordData<T_ACC> z{0, 0, 0};
    v = lane < (int)(blockDim.x / 32) ? partial[lane] : z;
    v = warp_welford(v);
    if (lane == 0) {
      mean[i] = v.mean;
      rstd[i] = rsqrtf(v.m2 / N + eps);
    }
  }
}

template <typename T, typename T_ACC>
__global__ void LayerNormForwardCUDAKernel(int64_t N, const T* X, const T_ACC* mean,
                                           const T_ACC* rstd, const T* gamma, const T* beta, T* Y) {
  const int64_t i = blockIdx.x;
  for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
    const int64_t index = i * N + j;
    const T_ACC g = gamma == nullptr ? T_ACC(1) : static_cast<T_ACC>(gamma[j]);
    const T_ACC b = beta == nullptr ? T_ACC(0) : static_cast<T_ACC>(beta[j]);
    Y[index] = static_cast<T>((static_cast<T_ACC>(X[index]) - mean[i]) * rstd[i] * g + b);
  }
}

template __global__ void RowwiseMomentsCUDAKernel<__half, float>(int64_t, float, const __half*,
                                                                float*, float*);
template __global__ void LayerNormForwardCUDAKernel<__half, float>(int64_t, const __half*,
                                                                  const float*, const float*,
                                                                  const __half*, const __half*,
                                                                  __half*);
