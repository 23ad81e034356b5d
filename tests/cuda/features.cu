// Kernels exercising each CUDA feature the cpu backend's SIMT shim supports; the tests compare
// their outputs with results computed by hand (tests/test_backend_cpu.py).
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

// out[k*32 + lane] for the k-th shuffle variant: width 32, 16, 8 for each of shfl/up/down/xor
extern "C" __global__ void shuffles(int* out) {
  int lane = threadIdx.x, v = 100 + lane, k = 0;
  const int widths[3] = {32, 16, 8};
  for (int wi = 0; wi < 3; ++wi) {
    int w = widths[wi];
    out[(k++) * 32 + lane] = __shfl_sync(0xffffffff, v, 3, w);
    out[(k++) * 32 + lane] = __shfl_up_sync(0xffffffff, v, 2, w);
    out[(k++) * 32 + lane] = __shfl_down_sync(0xffffffff, v, 5, w);
    out[(k++) * 32 + lane] = __shfl_xor_sync(0xffffffff, v, 4, w);
  }
  out[(k++) * 32 + lane] = (int)__ballot_sync(0xffffffff, lane % 3 == 0);
  out[(k++) * 32 + lane] = __any_sync(0xffffffff, lane == 7);
  out[(k++) * 32 + lane] = __all_sync(0xffffffff, lane < 31);
  out[(k++) * 32 + lane] = (int)__activemask();
  out[(k++) * 32 + lane] = __reduce_add_sync(0xffffffff, lane);
  __syncwarp();
  // half-warp groups with their own masks
  unsigned m = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  out[(k++) * 32 + lane] = __shfl_sync(m, v, lane < 16 ? 0 : 16);
}

// early return before a barrier: returned threads do not count
extern "C" __global__ void early_return(float* y, int live) {
  if ((int)threadIdx.x >= live) return;
  __shared__ float s[256];
  s[threadIdx.x] = (float)threadIdx.x;
  __syncthreads();
  y[threadIdx.x] = s[live - 1 - threadIdx.x];
}

// dynamic shared memory: reverse a block's slice
extern "C" __global__ void dyn_reverse(float* y, const float* x) {
  extern __shared__ float buf[];
  int t = threadIdx.x, n = blockDim.x;
  buf[t] = x[blockIdx.x * n + t];
  __syncthreads();
  y[blockIdx.x * n + t] = buf[n - 1 - t];
}

// half and bf16 conversions and arithmetic, element-wise
extern "C" __global__ void half_ops(__half* h, const float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half x = __float2half(a[i]), y = __float2half(b[i]);
  h[4 * i + 0] = x;
  h[4 * i + 1] = __hadd(x, y);
  h[4 * i + 2] = __hmul(x, y);
  h[4 * i + 3] = x * y + x;  // operators: two roundings
}
extern "C" __global__ void bf16_ops(__nv_bfloat16* h, const float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __nv_bfloat16 x = __float2bfloat16(a[i]), y = __float2bfloat16(b[i]);
  h[4 * i + 0] = x;
  h[4 * i + 1] = __hadd(x, y);
  h[4 * i + 2] = __hmul(x, y);
  h[4 * i + 3] = __float2bfloat16(__bfloat162float(x) / __bfloat162float(y));
}
extern "C" __global__ void half2_ops(__half2* out, const __half2* a, const __half2* b) {
  int i = threadIdx.x;
  out[i] = __hadd2(a[i], b[i]);
  float2 f = __half22float2(__hmul2(a[i], b[i]));
  out[blockDim.x + i] = __floats2half2_rn(f.x, f.y);
}

// atomics across blocks
extern "C" __global__ void atomics(int* counters, float* fsum) {
  atomicAdd(&counters[0], 1);
  atomicMax(&counters[1], (int)(blockIdx.x * blockDim.x + threadIdx.x));
  atomicMin(&counters[2], -(int)blockIdx.x);
  int old = atomicCAS(&counters[3], 0, 7);
  if (old == 0) atomicAdd(&counters[4], 1);  // exactly one winner
  atomicExch(&counters[5], 42);
  atomicAdd(fsum, 0.5f);
}

// vector loads through reinterpret_cast
extern "C" __global__ void vec_loads(float* y, const float* x, int n4) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float4 v = reinterpret_cast<const float4*>(x)[i];
  reinterpret_cast<float4*>(y)[i] = make_float4(v.w, v.z, v.y, v.x);
  uint4 u = reinterpret_cast<const uint4*>(x)[i];
  (void)u;
}

// a template entry
template <typename T, int SCALE>
__global__ void scale_kernel(T* y, const T* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = (T)((float)x[i] * SCALE);
}
template __global__ void scale_kernel<float, 3>(float*, const float*, int);

// cooperative groups: block sum through tiles of 32 and cg::reduce
extern "C" __global__ void cg_sum(float* y, const float* x) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
  __shared__ float part[32];
  float v = x[blockIdx.x * blockDim.x + block.thread_rank()];
  v = cg::reduce(tile, v, cg::plus<float>());
  if (tile.thread_rank() == 0) part[tile.meta_group_rank()] = v;
  block.sync();
  if (block.thread_rank() == 0) {
    float t = 0.f;
    for (unsigned w = 0; w < tile.meta_group_size(); ++w) t += part[w];
    y[blockIdx.x] = t;
  }
  cg::thread_block_tile<8> t8 = cg::tiled_partition<8>(block);
  int r8 = cg::reduce(t8, (int)t8.thread_rank(), cg::plus<int>());
  if (block.thread_rank() == 0) y[gridDim.x + blockIdx.x] = (float)r8;
}

// math intrinsics
extern "C" __global__ void math_ops(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  y[6 * i + 0] = sqrtf(v);
  y[6 * i + 1] = __frsqrt_rn(v);
  y[6 * i + 2] = fmaf(v, v, -1.0f);
  y[6 * i + 3] = __fmul_rn(v, 3.0f) + __fadd_rn(v, 1.0f);
  y[6 * i + 4] = fmaxf(v, 2.0f) - fminf(v, 2.0f);
  y[6 * i + 5] = (isnan(v) || isinf(v)) ? -1.0f : __fdividef(1.0f, v);
}

// failures
extern "C" __global__ void null_deref(float* y) {
  float* volatile p = nullptr;
  y[threadIdx.x] = *p;
}
extern "C" __global__ void read_past(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) y[i < n ? i : n - 1] = x[i];  // thread n reads x[n]
}
extern "C" __global__ void divergent_barrier(float* y) {
  if (threadIdx.x % 2) __syncthreads();
  else __syncwarp();
  y[threadIdx.x] = 1.0f;
}
extern "C" __global__ void endless(float* y) {
  volatile int k = 0;
  while (k == 0) {}
  y[0] = 1.0f;
}

// A full-warp xor reduction in a block of blockDim.x threads: below 32, lanes read lanes that
// were never launched (undefined on a GPU); a shfl_down reduction from offset blockDim.x / 2
// reads them too, but only into lanes whose sums are never used.
extern "C" __global__ void partial_warp_sums(float* y, const float* x) {
  float v = x[threadIdx.x], w = v;
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  for (int d = blockDim.x / 2; d > 0; d >>= 1) w += __shfl_down_sync(0xffffffffu, w, d);
  if (threadIdx.x == 0) { y[0] = v; y[1] = w; }
}

// Static shared memory of which each block writes only the first half, then dirties the second
// half for whichever block runs next on the same OS thread: the second half must read as the
// cpu backend's NaN fill in every block, not as zeros (a fresh thread_local) nor as 7.
extern "C" __global__ void shared_unwritten(float* y) {
  __shared__ float s[64];
  if (threadIdx.x < 32) s[threadIdx.x] = 1.0f + blockIdx.x;
  __syncthreads();
  y[blockIdx.x * 64 + threadIdx.x] = s[threadIdx.x];
  __syncthreads();
  s[32 + threadIdx.x % 32] = 7.0f;
}
