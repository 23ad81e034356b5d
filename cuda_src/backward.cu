// LayerNorm and RMSNorm backward, side by side: dx per row, and the column sums dγ, dβ.
//
//   g = dy·γ,  x̂ = (x - mean)·rstd  (RMSNorm: x̂ = x·rstd), mean and rstd as the forward saved them
//   dx   = rstd·(g - mean(g) - x̂·mean(g·x̂))        (RMSNorm: rstd·(g - x̂·mean(g·x̂)))
//   dγ_j = Σ_rows dy·x̂        dβ_j = Σ_rows dy      (column sums over every row)
//
// dx arguments: dx [rows, cols] output; dy, x [rows, cols]; gamma [cols]; mean, rstd [rows]
// float (mean unused, may be null, for RMSNorm); rows, cols.  Launch: grid = rows blocks, block
// = 256 threads (a multiple of 32 up to 1024).  Reductions in float, as the forward kernels.
//
// dγ/dβ arguments: dgamma, dbeta [cols] outputs (dbeta null for RMSNorm), dy, x, mean, rstd as
// above, rows, cols.  Three ways to sum over rows:
//   atomic    grid = rows blocks of 256: every block adds its row with float atomicAdd (the
//             outputs must be zero first; the sum's order is the blocks' arrival order)
//   partial   grid = ceil(rows / rows_per_block) blocks of 256, each summing its rows per
//             column into part_g/part_b [blocks, cols] (extra last argument rows_per_block);
//             then ..._finalize (grid = ceil(cols / 256)) sums the partials in block order
//   storage   grid = ceil(cols / 256) blocks of 256, a thread per column summing every row with
//             each partial sum rounded to the storage format (the outputs are in that format)
//
// INDEX (the variants; tests/test_kernels.py keeps this list equal to the entries below)
//   layernorm_backward_dx_stable_*      two block reductions Σg and Σg·x̂, then dx
//   layernorm_backward_dx_naive_*       Σg·x̂ as rstd·(Σg·x - mean·Σg): cancels with offsets
//   layernorm_backward_dx_article_*     the seed article's formula: γ left out of the sums and dx
//   rmsnorm_backward_dx_stable_*        Σg·x̂, then dx
//   layernorm_backward_dparams_atomic_*    float atomics, one block per row
//   rmsnorm_backward_dparams_atomic_*      the same without dβ
//   layernorm_backward_dparams_partial_*   per-block partial sums, then ..._finalize
//   rmsnorm_backward_dparams_partial_*     the same without dβ
//   backward_dparams_finalize              the second launch of the partial sums
//   layernorm_backward_dparams_storage_*   every partial sum rounded to the storage format
//   rmsnorm_backward_dparams_storage_*     the same without dβ
#include "norm_common.cuh"

#define DX_STABLE 0
#define DX_NAIVE 1
#define DX_ARTICLE 2

template <typename T, bool CENTRED, int ALGO>
__device__ __forceinline__ void backward_dx_row(T* __restrict__ dx, const T* __restrict__ dy,
                                                const T* __restrict__ x,
                                                const T* __restrict__ gamma,
                                                const float* __restrict__ mean,
                                                const float* __restrict__ rstd, int rows,
                                                int cols) {
  typedef Storage<T> S;
  const int row = blockIdx.x;
  if (row >= rows) return;
  const size_t off = (size_t)row * cols;
  const float mu = CENTRED ? mean[row] : 0.0f;
  const float r = rstd[row];
  float s1 = 0.0f, s2 = 0.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float xv = S::to_f(x[off + j]);
    const float g = ALGO == DX_ARTICLE ? S::to_f(dy[off + j])
                                       : S::to_f(dy[off + j]) * S::to_f(gamma[j]);
    s1 += g;
    if (ALGO == DX_NAIVE)
      s2 += g * xv;  // Σg·x: mean(g·x̂) = rstd·(mean(g·x) - mean·mean(g)) below
    else
      s2 += g * ((xv - mu) * r);
  }
  s1 = block_sum<float, UPCAST_SQUARE>(s1);
  s2 = block_sum<float, UPCAST_SQUARE>(s2);
  const float mg = CENTRED ? s1 / cols : 0.0f;
  const float mgx = ALGO == DX_NAIVE ? r * (s2 / cols - mu * (s1 / cols)) : s2 / cols;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float xh = (S::to_f(x[off + j]) - mu) * r;
    const float g = ALGO == DX_ARTICLE ? S::to_f(dy[off + j])
                                       : S::to_f(dy[off + j]) * S::to_f(gamma[j]);
    dx[off + j] = S::from_f(r * (g - mg - xh * mgx));
  }
}

#define BACKWARD_DX(NAME, T, CENTRED, ALGO)                                                    \
  extern "C" __global__ void __launch_bounds__(1024)                                          \
      NAME(T* __restrict__ dx, const T* __restrict__ dy, const T* __restrict__ x,              \
           const T* __restrict__ gamma, const float* __restrict__ mean,                        \
           const float* __restrict__ rstd, int rows, int cols) {                               \
    backward_dx_row<T, CENTRED, ALGO>(dx, dy, x, gamma, mean, rstd, rows, cols);                \
  }

BACKWARD_DX(layernorm_backward_dx_stable_fp32, float, true, DX_STABLE)
BACKWARD_DX(layernorm_backward_dx_stable_fp16, __half, true, DX_STABLE)
BACKWARD_DX(layernorm_backward_dx_stable_bf16, __nv_bfloat16, true, DX_STABLE)
BACKWARD_DX(layernorm_backward_dx_naive_fp32, float, true, DX_NAIVE)
BACKWARD_DX(layernorm_backward_dx_naive_fp16, __half, true, DX_NAIVE)
BACKWARD_DX(layernorm_backward_dx_naive_bf16, __nv_bfloat16, true, DX_NAIVE)
BACKWARD_DX(layernorm_backward_dx_article_fp32, float, true, DX_ARTICLE)
BACKWARD_DX(layernorm_backward_dx_article_fp16, __half, true, DX_ARTICLE)
BACKWARD_DX(layernorm_backward_dx_article_bf16, __nv_bfloat16, true, DX_ARTICLE)
BACKWARD_DX(rmsnorm_backward_dx_stable_fp32, float, false, DX_STABLE)
BACKWARD_DX(rmsnorm_backward_dx_stable_fp16, __half, false, DX_STABLE)
BACKWARD_DX(rmsnorm_backward_dx_stable_bf16, __nv_bfloat16, false, DX_STABLE)

// dy·x̂ and dy of one element, as float.
template <typename T, bool CENTRED>
__device__ __forceinline__ void dparam_terms(const T* __restrict__ dy, const T* __restrict__ x,
                                             const float* __restrict__ mean,
                                             const float* __restrict__ rstd, int i, int j,
                                             int cols, float& gx, float& gb) {
  typedef Storage<T> S;
  const size_t k = (size_t)i * cols + j;
  const float d = S::to_f(dy[k]);
  const float mu = CENTRED ? mean[i] : 0.0f;
  gx = d * ((S::to_f(x[k]) - mu) * rstd[i]);
  gb = d;
}

template <typename T, bool CENTRED>
__device__ __forceinline__ void dparams_atomic(float* __restrict__ dgamma,
                                               float* __restrict__ dbeta,
                                               const T* __restrict__ dy, const T* __restrict__ x,
                                               const float* __restrict__ mean,
                                               const float* __restrict__ rstd, int rows,
                                               int cols) {
  const int i = blockIdx.x;
  if (i >= rows) return;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float gx, gb;
    dparam_terms<T, CENTRED>(dy, x, mean, rstd, i, j, cols, gx, gb);
    atomicAdd(&dgamma[j], gx);
    if (CENTRED) atomicAdd(&dbeta[j], gb);
  }
}

template <typename T, bool CENTRED>
__device__ __forceinline__ void dparams_partial(float* __restrict__ part_g,
                                                float* __restrict__ part_b,
                                                const T* __restrict__ dy, const T* __restrict__ x,
                                                const float* __restrict__ mean,
                                                const float* __restrict__ rstd, int rows,
                                                int cols, int rows_per_block) {
  const int i0 = blockIdx.x * rows_per_block;
  const int i1 = min(rows, i0 + rows_per_block);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float ag = 0.0f, ab = 0.0f;
    for (int i = i0; i < i1; ++i) {
      float gx, gb;
      dparam_terms<T, CENTRED>(dy, x, mean, rstd, i, j, cols, gx, gb);
      ag += gx;
      ab += gb;
    }
    part_g[(size_t)blockIdx.x * cols + j] = ag;
    if (CENTRED) part_b[(size_t)blockIdx.x * cols + j] = ab;
  }
}

template <typename T, bool CENTRED>
__device__ __forceinline__ void dparams_storage(T* __restrict__ dgamma, T* __restrict__ dbeta,
                                                const T* __restrict__ dy, const T* __restrict__ x,
                                                const float* __restrict__ mean,
                                                const float* __restrict__ rstd, int rows,
                                                int cols) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float ag = 0.0f, ab = 0.0f;
  for (int i = 0; i < rows; ++i) {
    float gx, gb;
    dparam_terms<T, CENTRED>(dy, x, mean, rstd, i, j, cols, gx, gb);
    ag = accumulate<T, STORAGE_ACCUMULATE>(ag, gx);
    ab = accumulate<T, STORAGE_ACCUMULATE>(ab, gb);
  }
  dgamma[j] = Storage<T>::from_f(ag);
  if (CENTRED) dbeta[j] = Storage<T>::from_f(ab);
}

#define DPARAMS_ATOMIC(NAME, T, CENTRED)                                                       \
  extern "C" __global__ void __launch_bounds__(1024)                                          \
      NAME(float* __restrict__ dgamma, float* __restrict__ dbeta, const T* __restrict__ dy,    \
           const T* __restrict__ x, const float* __restrict__ mean,                             \
           const float* __restrict__ rstd, int rows, int cols) {                                \
    dparams_atomic<T, CENTRED>(dgamma, dbeta, dy, x, mean, rstd, rows, cols);                  \
  }
#define DPARAMS_PARTIAL(NAME, T, CENTRED)                                                      \
  extern "C" __global__ void __launch_bounds__(1024)                                          \
      NAME(float* __restrict__ part_g, float* __restrict__ part_b, const T* __restrict__ dy,   \
           const T* __restrict__ x, const float* __restrict__ mean,                             \
           const float* __restrict__ rstd, int rows, int cols, int rows_per_block) {            \
    dparams_partial<T, CENTRED>(part_g, part_b, dy, x, mean, rstd, rows, cols,                 \
                                rows_per_block);                                                \
  }
#define DPARAMS_STORAGE(NAME, T, CENTRED)                                                      \
  extern "C" __global__ void __launch_bounds__(1024)                                          \
      NAME(T* __restrict__ dgamma, T* __restrict__ dbeta, const T* __restrict__ dy,            \
           const T* __restrict__ x, const float* __restrict__ mean,                             \
           const float* __restrict__ rstd, int rows, int cols) {                                \
    dparams_storage<T, CENTRED>(dgamma, dbeta, dy, x, mean, rstd, rows, cols);                 \
  }

DPARAMS_ATOMIC(layernorm_backward_dparams_atomic_fp32, float, true)
DPARAMS_ATOMIC(layernorm_backward_dparams_atomic_fp16, __half, true)
DPARAMS_ATOMIC(layernorm_backward_dparams_atomic_bf16, __nv_bfloat16, true)
DPARAMS_ATOMIC(rmsnorm_backward_dparams_atomic_fp32, float, false)
DPARAMS_ATOMIC(rmsnorm_backward_dparams_atomic_fp16, __half, false)
DPARAMS_ATOMIC(rmsnorm_backward_dparams_atomic_bf16, __nv_bfloat16, false)
DPARAMS_PARTIAL(layernorm_backward_dparams_partial_fp32, float, true)
DPARAMS_PARTIAL(layernorm_backward_dparams_partial_fp16, __half, true)
DPARAMS_PARTIAL(layernorm_backward_dparams_partial_bf16, __nv_bfloat16, true)
DPARAMS_PARTIAL(rmsnorm_backward_dparams_partial_fp32, float, false)
DPARAMS_PARTIAL(rmsnorm_backward_dparams_partial_fp16, __half, false)
DPARAMS_PARTIAL(rmsnorm_backward_dparams_partial_bf16, __nv_bfloat16, false)
DPARAMS_STORAGE(layernorm_backward_dparams_storage_fp16, __half, true)
DPARAMS_STORAGE(layernorm_backward_dparams_storage_bf16, __nv_bfloat16, true)
DPARAMS_STORAGE(rmsnorm_backward_dparams_storage_fp16, __half, false)
DPARAMS_STORAGE(rmsnorm_backward_dparams_storage_bf16, __nv_bfloat16, false)

// The partial sums' second launch: dγ_j = Σ_blocks part_g[b, j] in block order.
#define FINALIZE(NAME, T)                                                                       \
  extern "C" __global__ void __launch_bounds__(1024)                                          \
      NAME(T* __restrict__ dgamma, T* __restrict__ dbeta, const T* __restrict__ part_g,        \
           const T* __restrict__ part_b, int nblocks, int cols) {                               \
    const int j = blockIdx.x * blockDim.x + threadIdx.x;                                       \
    if (j >= cols) return;                                                                      \
    T ag = 0.0f, ab = 0.0f;                                                                     \
    for (int b = 0; b < nblocks; ++b) {                                                         \
      ag += part_g[(size_t)b * cols + j];                                                       \
      if (dbeta) ab += part_b[(size_t)b * cols + j];                                            \
    }                                                                                           \
    dgamma[j] = ag;                                                                             \
    if (dbeta) dbeta[j] = ab;                                                                   \
  }

FINALIZE(backward_dparams_finalize, float)
