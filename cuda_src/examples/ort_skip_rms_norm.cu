// An ONNX Runtime-style SkipSimplifiedLayerNormalization (residual add + RMSNorm), for
// `normcheck check --spec ort_skip_rms_norm.toml`: Apex's layout grown by ORT -- rows along
// gridDim.y with a grid-stride loop, 2-D blocks of 32 x threads_y, per-thread Welford sums
// merged by Chan's formula over shuffles and then over the warps in dynamic shared memory of
// threads_y + threads_y / 2 floats, one template for LayerNorm and its "simplified" (RMS) form,
// optional skip (residual) and bias vectors added in float, the float sum stored to storage as
// the skip output, and null-able mean / inv_std_dev outputs.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define ORT_WARP 32

template <typename U, bool simplified>
__device__ void ort_welford_push(const U v, U& mu, U& m2, U& n) {
  n = n + U(1);
  const U d = v - mu;
  const U mu_new = mu + d / n;
  mu = mu_new;
  if (simplified) m2 = m2 + v * v;  // the RMS form keeps Σv² in place of the squared deviations
  else m2 = m2 + d * (v - mu_new);
}

template <typename U, bool simplified>
__device__ void ort_chan_merge(const U mu_b, const U m2_b, const U n_b, U& mu, U& m2, U& n) {
  const U d = mu_b - mu;
  U wa = n, wb = n_b;
  n = n + n_b;
  const U total = n;
  if (total > U(0)) {
    wa = wa / total;
    wb = wb / total;
    mu = wa * mu + wb * mu_b;
    if (simplified) m2 = m2 + m2_b;
    else m2 = m2 + m2_b + d * d * wa * wb * total;
  } else {
    mu = U(0);
    m2 = U(0);
  }
}

template <typename U>
struct OrtSharedBuf;
template <>
struct OrtSharedBuf<float> {
  __device__ float* get() {
    extern __shared__ float ort_shared_f[];
    return ort_shared_f;
  }
};

template <typename T, typename U, bool simplified>
__device__ void ort_row_moments(const T* __restrict__ x, const T* __restrict__ skip,
                                const T* __restrict__ bias, const int n1, const int n2,
                                const int i1, U& mu, U& var, U* buf) {
  U n = U(0);
  U m2 = U(0);
  mu = U(0);
  var = U(0);
  if (i1 >= n1) return;
  const int numx = blockDim.x * blockDim.y;
  const int thrx = threadIdx.x + threadIdx.y * blockDim.x;
  const T* row = x + i1 * n2;
  const T* srow = skip != nullptr ? skip + i1 * n2 : nullptr;
  int l = 4 * thrx;
  for (; l + 3 < n2; l += 4 * numx) {  // four consecutive elements per thread per step
    for (int k = 0; k < 4; ++k) {
      U v = static_cast<U>(row[l + k]);
      if (bias != nullptr) v += static_cast<U>(bias[l + k]);
      if (srow != nullptr) v += static_cast<U>(srow[l + k]);
      ort_welford_push<U, simplified>(v, mu, m2, n);
    }
  }
  for (; l < n2; ++l) {  // the tail, taken by every thread that reaches it
    U v = static_cast<U>(row[l]);
    if (bias != nullptr) v += static_cast<U>(bias[l]);
    if (srow != nullptr) v += static_cast<U>(srow[l]);
    ort_welford_push<U, simplified>(v, mu, m2, n);
  }
#pragma unroll
  for (int stride = ORT_WARP / 2; stride > 0; stride /= 2) {
    const U mu_b = __shfl_down_sync(0xffffffff, mu, stride, ORT_WARP);
    const U n_b = __shfl_down_sync(0xffffffff, n, stride, ORT_WARP);
    const U m2_b = __shfl_down_sync(0xffffffff, m2, stride, ORT_WARP);
    ort_chan_merge<U, simplified>(mu_b, m2_b, n_b, mu, m2, n);
  }
  if (blockDim.y > 1) {  // lane 0 of each warp holds its warp's sums: halve the warps in turn
    U* pair = buf;                 // (mu, m2) of the upper half's warps
    U* cnt = buf + blockDim.y;     // their counts
    for (int half = blockDim.y / 2; half > 0; half /= 2) {
      if (threadIdx.x == 0 && threadIdx.y >= half && threadIdx.y < 2 * half) {
        const int at = threadIdx.y - half;
        pair[2 * at] = mu;
        pair[2 * at + 1] = m2;
        cnt[at] = n;
      }
      __syncthreads();
      if (threadIdx.x == 0 && threadIdx.y < half)
        ort_chan_merge<U, simplified>(pair[2 * threadIdx.y], pair[2 * threadIdx.y + 1],
                                      cnt[threadIdx.y], mu, m2, n);
      __syncthreads();
    }
    if (threadIdx.x == 0 && threadIdx.y == 0) {
      pair[0] = mu;
      pair[1] = m2;
    }
    __syncthreads();
    mu = pair[0];
    var = pair[1] / U(n2);
  } else {
    mu = __shfl_sync(0xffffffff, mu, 0, ORT_WARP);
    var = __shfl_sync(0xffffffff, m2 / U(n2), 0, ORT_WARP);
  }
}

template <typename T, typename U, typename V, bool simplified>
__global__ void ort_apply_layer_norm(V* __restrict__ out, U* __restrict__ mean,
                                     U* __restrict__ inv_std_dev, const T* __restrict__ x,
                                     const int n1, const int n2, const U epsilon,
                                     const V* __restrict__ gamma, const V* __restrict__ beta,
                                     const T* __restrict__ skip, const T* __restrict__ bias,
                                     T* __restrict__ skip_out) {
  for (int i1 = blockIdx.y; i1 < n1; i1 += gridDim.y) {
    OrtSharedBuf<U> shared;
    U* buf = shared.get();
    U mu, var;
    ort_row_moments<T, U, simplified>(x, skip, bias, n1, n2, i1, mu, var, buf);
    const int base = i1 * n2;
    const U inv = rsqrtf(var + epsilon);
    const int numx = blockDim.x * blockDim.y;
    const int thrx = threadIdx.x + threadIdx.y * blockDim.x;
    for (int i = thrx; i < n2; i += numx) {
      U v = static_cast<U>(x[base + i]);
      if (bias != nullptr) v += static_cast<U>(bias[i]);
      if (skip != nullptr) v += static_cast<U>(skip[base + i]);
      const U g = gamma != nullptr ? static_cast<U>(gamma[i]) : U(1);
      const U b = beta != nullptr ? static_cast<U>(beta[i]) : U(0);
      if (simplified) out[base + i] = static_cast<V>(g * inv * v);
      else out[base + i] = static_cast<V>(g * inv * (v - mu) + b);
      if (skip_out != nullptr) skip_out[base + i] = static_cast<T>(v);
    }
    if (threadIdx.x == 0 && threadIdx.y == 0) {
      if (mean != nullptr) mean[i1] = mu;
      if (inv_std_dev != nullptr) inv_std_dev[i1] = inv;
    }
  }
}

// the instantiations a spec may name (T storage, U float accumulation, V output, simplified)
#define ORT_LN(T, V, S)                                                                       \
  template __global__ void ort_apply_layer_norm<T, float, V, S>(                               \
      V*, float*, float*, const T*, const int, const int, const float, const V*, const V*,     \
      const T*, const T*, T*);
ORT_LN(__half, __half, true)
ORT_LN(__half, __half, false)
ORT_LN(__nv_bfloat16, __nv_bfloat16, true)
ORT_LN(float, float, true)
ORT_LN(float, float, false)
