// The hazards a GPU sanitizer reports and one schedule never shows, each written the way public
// norm kernels write it, each beside its correct twin (tests/test_hazards.py).  Default ABI,
// RMSNorm fp32: (float* y, const float* x, const float* g, float eps, int rows, int cols).
#include <cub/cub.cuh>

// -- a hand-written warp-then-block reduction ---------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// every warp reduces the partials, so every thread holds the total (no broadcast)
template <bool BARRIER_FIRST>
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  v = warp_sum(v);
  if (BARRIER_FIRST) __syncthreads();  // the previous call's reads of partial are done
  if (lane == 0) partial[wid] = v;
  __syncthreads();
  v = lane < (int)((blockDim.x + 31) >> 5) ? partial[lane] : 0.f;
  return warp_sum(v);
}
// LayerNorm-style: the helper called twice (the mean, then the variance of the centred row)
template <bool SOUND>
__device__ void rms_twice(float* y, const float* x, const float* g, float eps, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) s += xr[i];
  const float mean = block_sum<SOUND>(s) / cols;
  float q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) q += xr[i] * xr[i];
  const float ms = block_sum<SOUND>(q) / cols;
  (void)mean;  // computed as a LayerNorm would; an RMSNorm's output needs only ms
  const float r = rsqrtf(ms + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = xr[i] * r * g[i];
}
extern "C" __global__ void reduce_twice_no_barrier(float* y, const float* x, const float* g,
                                                   float eps, int rows, int cols) {
  rms_twice<false>(y, x, g, eps, cols);
}
extern "C" __global__ void reduce_twice_barrier(float* y, const float* x, const float* g,
                                                float eps, int rows, int cols) {
  rms_twice<true>(y, x, g, eps, cols);
}

// -- CUB's BlockReduce: its temp storage reused without __syncthreads() (CUB's docs warn) --------
template <bool SOUND>
__device__ void rms_cub(float* y, const float* x, const float* g, float eps, int cols) {
  using Reduce = cub::BlockReduce<float, 256>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ float s_rstd;
  const float* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f, q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) { s += xr[i]; q += xr[i] * xr[i]; }
  const float sum = Reduce(temp).Sum(s);
  if (SOUND) __syncthreads();
  const float sumsq = Reduce(temp).Sum(q);
  if (threadIdx.x == 0) s_rstd = rsqrtf(sumsq / cols + eps);
  (void)sum;
  __syncthreads();
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = xr[i] * s_rstd * g[i];
}
extern "C" __global__ void cub_reuse_no_barrier(float* y, const float* x, const float* g,
                                                float eps, int rows, int cols) {
  rms_cub<false>(y, x, g, eps, cols);
}
extern "C" __global__ void cub_reuse_barrier(float* y, const float* x, const float* g, float eps,
                                             int rows, int cols) {
  rms_cub<true>(y, x, g, eps, cols);
}

// -- a persistent grid: the shared accumulator reset for the next row without a barrier --------
template <bool SOUND>
__device__ void rms_persistent(float* y, const float* x, const float* g, float eps, int rows,
                               int cols) {
  __shared__ float acc;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    if (SOUND) __syncthreads();  // every thread has read acc for the previous row
    if (threadIdx.x == 0) acc = 0.f;
    __syncthreads();
    const float* xr = x + (size_t)row * cols;
    float q = 0.f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) q += xr[i] * xr[i];
    atomicAdd(&acc, q);
    __syncthreads();
    const float r = rsqrtf(acc / cols + eps);
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
      y[(size_t)row * cols + i] = xr[i] * r * g[i];
  }
}
extern "C" __global__ void persistent_no_barrier(float* y, const float* x, const float* g,
                                                 float eps, int rows, int cols) {
  rms_persistent<false>(y, x, g, eps, rows, cols);
}
extern "C" __global__ void persistent_barrier(float* y, const float* x, const float* g, float eps,
                                              int rows, int cols) {
  rms_persistent<true>(y, x, g, eps, rows, cols);
}

// -- warp-synchronous shared memory without __syncwarp (the pre-Volta idiom) ---------------------
template <bool SOUND>
__device__ void rms_warp_sync(float* y, const float* x, const float* g, float eps, int cols) {
  __shared__ float red[256];
  const float* xr = x + (size_t)blockIdx.x * cols;
  float q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) q += xr[i] * xr[i];
  red[threadIdx.x] = q;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 32; o >>= 1) {
    if ((int)threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    volatile float* v = red;
    for (int o = 32; o > 0; o >>= 1) {
      if (SOUND) {  // read, all lanes; then write, all lanes
        const float t = v[threadIdx.x + o];
        __syncwarp();
        v[threadIdx.x] = v[threadIdx.x] + t;
        __syncwarp();
      } else {
        v[threadIdx.x] += v[threadIdx.x + o];
      }
    }
  }
  __syncthreads();
  const float r = rsqrtf(red[0] / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = xr[i] * r * g[i];
}
extern "C" __global__ void warp_sync_no_syncwarp(float* y, const float* x, const float* g,
                                                 float eps, int rows, int cols) {
  rms_warp_sync<false>(y, x, g, eps, cols);
}
extern "C" __global__ void warp_sync_syncwarp(float* y, const float* x, const float* g, float eps,
                                              int rows, int cols) {
  rms_warp_sync<true>(y, x, g, eps, cols);
}

// -- a static array indexed past its size: 8 warps' partials in an array of 4 -------------------
template <int N>
__device__ void rms_partials(float* y, const float* x, const float* g, float eps, int cols) {
  __shared__ float part[N];
  const float* xr = x + (size_t)blockIdx.x * cols;
  float q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) q += xr[i] * xr[i];
  q = warp_sum(q);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = q;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < (int)(blockDim.x >> 5); ++w) t += part[w];
  const float r = rsqrtf(t / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = xr[i] * r * g[i];
}
extern "C" __global__ void static_too_small(float* y, const float* x, const float* g, float eps,
                                            int rows, int cols) {
  rms_partials<4>(y, x, g, eps, cols);
}
extern "C" __global__ void static_sized(float* y, const float* x, const float* g, float eps,
                                        int rows, int cols) {
  rms_partials<32>(y, x, g, eps, cols);
}

// -- barriers not every thread reaches alike ----------------------------------------------------
// threads past the row's width leave before the block's barrier (a block wider than the row)
extern "C" __global__ void early_return_barrier(float* y, const float* x, const float* g,
                                                float eps, int rows, int cols) {
  __shared__ float ms;
  if ((int)threadIdx.x >= cols) return;
  const float* xr = x + (size_t)blockIdx.x * cols;
  if (threadIdx.x == 0) {
    float q = 0.f;
    for (int i = 0; i < cols; ++i) q += xr[i] * xr[i];
    ms = q / cols;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = xr[i] * rsqrtf(ms + eps) * g[i];
}
extern "C" __global__ void uniform_return_barrier(float* y, const float* x, const float* g,
                                                  float eps, int rows, int cols) {
  __shared__ float ms;
  if ((int)blockIdx.x >= rows) return;  // the whole block, alike
  const float* xr = x + (size_t)blockIdx.x * cols;
  if (threadIdx.x == 0) {
    float q = 0.f;
    for (int i = 0; i < cols; ++i) q += xr[i] * xr[i];
    ms = q / cols;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = xr[i] * rsqrtf(ms + eps) * g[i];
}
// two different __syncthreads() in the branches of a condition that differs across the block
template <bool SOUND>
__device__ void rms_branch_barrier(float* y, const float* x, const float* g, float eps, int cols) {
  __shared__ float ms;
  const float* xr = x + (size_t)blockIdx.x * cols;
  if (threadIdx.x == 0) {
    float q = 0.f;
    for (int i = 0; i < cols; ++i) q += xr[i] * xr[i];
    ms = q / cols;
  }
  if (SOUND || threadIdx.x < 32) {
    __syncthreads();
  } else {
    (void)__syncthreads_or(1);  // another barrier instruction: not one the compiler merges
  }
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = xr[i] * rsqrtf(ms + eps) * g[i];
}
extern "C" __global__ void branch_barriers(float* y, const float* x, const float* g, float eps,
                                           int rows, int cols) {
  rms_branch_barrier<false>(y, x, g, eps, cols);
}
extern "C" __global__ void one_barrier(float* y, const float* x, const float* g, float eps,
                                       int rows, int cols) {
  rms_branch_barrier<true>(y, x, g, eps, cols);
}

// -- dynamic shared memory: the row after the warps' partials, at smem + ceil4(warps), in a
//    buffer of warps + cols floats (a public kernel shipped this, then fixed it) ----------------
template <bool SOUND>
__device__ void rms_smem_row(float* y, const float* x, const float* g, float eps, int cols) {
  extern __shared__ float smem[];
  const int nw = (blockDim.x + 31) / 32;
  float* part = smem;
  float* row = smem + (SOUND ? nw : (nw + 3) / 4 * 4);
  const float* xr = x + (size_t)blockIdx.x * cols;
  float q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) { row[i] = xr[i]; q += xr[i] * xr[i]; }
  q = warp_sum(q);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = q;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < nw; ++w) t += part[w];
  const float r = rsqrtf(t / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = row[i] * r * g[i];
}
extern "C" __global__ void smem_row_ceil4(float* y, const float* x, const float* g, float eps,
                                          int rows, int cols) {
  rms_smem_row<false>(y, x, g, eps, cols);
}
extern "C" __global__ void smem_row_packed(float* y, const float* x, const float* g, float eps,
                                           int rows, int cols) {
  rms_smem_row<true>(y, x, g, eps, cols);
}

// -- a host launcher: the row in dynamic shared memory, 65 KB at d = 16384 ----------------------
__global__ void rms_row_kernel(float* y, const float* x, const float* g, float eps, int cols) {
  rms_smem_row<true>(y, x, g, eps, cols);
}
void launch_rms_row(float* y, const float* x, const float* g, float eps, int rows, int cols,
                    bool opt_in) {
  const int threads = 256;
  const size_t smem = (threads / 32 + cols) * sizeof(float);
  if (opt_in && smem > 48 * 1024)
    cudaFuncSetAttribute(rms_row_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  rms_row_kernel<<<rows, threads, smem>>>(y, x, g, eps, cols);
}
// a block of more threads than a GPU launches
void launch_rms_wide_block(float* y, const float* x, const float* g, float eps, int rows,
                           int cols, bool opt_in) {
  rms_row_kernel<<<rows, 2048, (64 + cols) * sizeof(float)>>>(y, x, g, eps, cols);
}

// -- the output's offset an unsigned 32-bit product (blockIdx.x * cols: the int converts to
//    unsigned), the input's in 64 bits: right past 2^31 elements, wrong past 2^32 (a public
//    fork of vLLM's RMSNorm ships this) -----------------------------------------------------------
template <bool WIDE>
__device__ void rms_out_offset(float* y, const float* x, const float* g, float eps, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  float q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) q += xr[i] * xr[i];
  const float r = rsqrtf(block_sum<true>(q) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    if (WIDE) y[(size_t)blockIdx.x * cols + i] = xr[i] * r * g[i];
    else y[blockIdx.x * cols + i] = xr[i] * r * g[i];
  }
}
extern "C" __global__ void out_offset_u32(float* y, const float* x, const float* g, float eps,
                                          int rows, int cols) {
  rms_out_offset<false>(y, x, g, eps, cols);
}
extern "C" __global__ void out_offset_u64(float* y, const float* x, const float* g, float eps,
                                          int rows, int cols) {
  rms_out_offset<true>(y, x, g, eps, cols);
}

// -- an accuracy bug and no index bug: 64-bit offsets, rstd rounded to half before the products
//    (#64: the 2^32 run's error, the same as every family's, was blamed on a 32-bit wrap) -------
extern "C" __global__ void rms_rstd_half_u64(__half* y, const __half* x, const __half* g,
                                             float eps, int rows, int cols) {
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = __half2float(xr[i]);
    q += v * v;
  }
  const __half r = __float2half(rsqrtf(block_sum<true>(q) / cols + eps));
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __hmul(__hmul(xr[i], r), g[i]);
}

// -- a block that loops over rows (a grid capped at 65535, as Apex's cuApplyLayerNorm launches
//    min(n1, 65535) blocks): thread 0 writes the row's statistic for iteration k+1 while the
//    others may still read iteration k's -- no barrier at the loop's end (Apex's PR #1184).
//    The families' rows never exceed the grid: only rows past its cap loop -------------------
template <bool SOUND>
__device__ void rms_row_loop(float* y, const float* x, const float* g, float eps, int rows,
                             int cols) {
  __shared__ float ms;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + (size_t)row * cols;
    if (threadIdx.x == 0) {
      float q = 0.f;
      for (int i = 0; i < cols; ++i) q += xr[i] * xr[i];
      ms = q / cols;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
      y[(size_t)row * cols + i] = xr[i] * rsqrtf(ms + eps) * g[i];
    if (SOUND) __syncthreads();  // every read of ms done before the next row's write
  }
}
extern "C" __global__ void row_loop_race(float* y, const float* x, const float* g, float eps,
                                         int rows, int cols) {
  rms_row_loop<false>(y, x, g, eps, rows, cols);
}
extern "C" __global__ void row_loop_barrier(float* y, const float* x, const float* g,
                                            float eps, int rows, int cols) {
  rms_row_loop<true>(y, x, g, eps, rows, cols);
}

// -- a persistent grid-stride RMSNorm: a fixed grid of blocks walking the rows (#66) -------------
// Its row offset in `int` wraps past 2^31 elements only where the loop reaches such rows, which a
// grid of one block per row never shows; the size_t twin is sound.
template <typename Offset>
__device__ void rms_persistent(float* y, const float* x, const float* g, float eps, int rows,
                               int cols) {
  __shared__ float partial[32];
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const Offset base = (Offset)row * cols;
    float q = 0.f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) q += x[base + i] * x[base + i];
    q = warp_sum(q);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = q;
    __syncthreads();
    float t = 0.f;
    for (int w = 0; w < (int)((blockDim.x + 31) >> 5); ++w) t += partial[w];
    const float r = rsqrtf(t / cols + eps);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) y[base + i] = x[base + i] * r * g[i];
    __syncthreads();  // every read of partial done before the next row's writes
  }
}
extern "C" __global__ void persistent_int_offset(float* y, const float* x, const float* g,
                                                 float eps, int rows, int cols) {
  rms_persistent<int>(y, x, g, eps, rows, cols);
}
extern "C" __global__ void persistent_size_t_offset(float* y, const float* x, const float* g,
                                                    float eps, int rows, int cols) {
  rms_persistent<size_t>(y, x, g, eps, rows, cols);
}

// -- Apex's host launcher: a grid of min(rows, 65535) blocks, each looping over rows past it ----
template <bool SOUND>
void launch_row_loop(float* y, const float* x, const float* g, float eps, int rows, int cols) {
  const int blocks = rows < 65535 ? rows : 65535;
  if (SOUND)
    row_loop_barrier<<<blocks, 256>>>(y, x, g, eps, rows, cols);
  else
    row_loop_race<<<blocks, 256>>>(y, x, g, eps, rows, cols);
}
void launch_row_loop_race(float* y, const float* x, const float* g, float eps, int rows,
                          int cols) {
  launch_row_loop<false>(y, x, g, eps, rows, cols);
}
void launch_row_loop_barrier(float* y, const float* x, const float* g, float eps, int rows,
                             int cols) {
  launch_row_loop<true>(y, x, g, eps, rows, cols);
}
