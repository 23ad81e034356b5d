// llm.c-style LayerNorm kernels, for `normcheck check` with the specs beside this file:
//  * three launches (mean, rstd, normalise) on shared buffers: mean_kernel and rstd_kernel
//    reduce with a shared-memory tree, normalization_kernel runs one thread per element;
//  * a warp-per-row kernel on 16-byte Packed128 vectors (x128: cols must be a multiple of
//    x128::size), with the mean/rstd stores through __stcs and a null pointer allowed for them.
// floatX is float with -D ENABLE_FP32 (as llm.c builds it), __nv_bfloat16 otherwise.
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

#ifdef ENABLE_FP32
typedef float floatX;
#else
typedef __nv_bfloat16 floatX;
#endif

template <class ElementType>
struct alignas(16) Packed128 {
  static constexpr int size = sizeof(int4) / sizeof(ElementType);
  ElementType payload[size];
  __device__ ElementType& operator[](int i) { return payload[i]; }
  __device__ const ElementType& operator[](int i) const { return payload[i]; }
};
typedef Packed128<floatX> x128;
__device__ x128 load128cs(const floatX* address) { return *reinterpret_cast<const x128*>(address); }
__device__ void store128(floatX* target, x128 value) { *reinterpret_cast<x128*>(target) = value; }

__device__ float warpReduceSum(float val) {
  for (int offset = 16; offset > 0; offset /= 2) val += __shfl_xor_sync(0xFFFFFFFF, val, offset);
  return val;
}

__global__ void mean_kernel(float* mean, const floatX* inp, int N, int C, int block_size) {
  extern __shared__ float shared[];
  int idx = blockIdx.x, tid = threadIdx.x;
  const floatX* x = inp + (size_t)idx * C;
  float sum = 0.0f;
  for (int i = tid; i < C; i += block_size) sum += (float)x[i];
  shared[tid] = sum;
  __syncthreads();
  for (int stride = block_size / 2; stride >= 1; stride /= 2) {
    __syncthreads();
    if (tid < stride) shared[tid] += shared[tid + stride];
  }
  if (tid == 0) mean[idx] = shared[0] / C;
}

__global__ void rstd_kernel(float* rstd, const floatX* inp, const float* mean, int N, int C,
                            int block_size) {
  extern __shared__ float shared[];
  int idx = blockIdx.x, tid = threadIdx.x;
  const floatX* x = inp + (size_t)idx * C;
  float m = mean[idx];
  float sum = 0.0f;
  for (int i = tid; i < C; i += block_size) {
    float diff = (float)x[i] - m;
    sum += diff * diff;
  }
  shared[tid] = sum;
  __syncthreads();
  for (int stride = block_size / 2; stride >= 1; stride /= 2) {
    __syncthreads();
    if (tid < stride) shared[tid] += shared[tid + stride];
  }
  if (tid == 0) rstd[idx] = 1.0f / sqrtf(shared[0] / C + 1e-5f);
}

__global__ void normalization_kernel(floatX* out, const floatX* inp, float* mean, float* rstd,
                                     const floatX* weight, const floatX* bias, int N, int C) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= N * C) return;
  int bt = idx / C, c = idx % C;
  float n = rstd[bt] * ((float)inp[idx] - mean[bt]);
  out[idx] = (floatX)(n * (float)weight[c] + (float)bias[c]);
}

// one warp per row, x128 loads: C must be a multiple of x128::size
__global__ void layernorm_forward_x128(floatX* __restrict__ out, float* __restrict__ mean,
                                       float* __restrict__ rstd, const floatX* __restrict__ inp,
                                       const floatX* __restrict__ weight,
                                       const floatX* __restrict__ bias, int N, int C) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  int idx = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
  if (idx >= N) return;
  const floatX* x = inp + (size_t)idx * C;
  float sum = 0.0f;
  for (int c = warp.thread_rank() * x128::size; c < C; c += 32 * x128::size) {
    x128 in = load128cs(x + c);
    for (int k = 0; k < x128::size; ++k) sum += (float)in[k];
  }
  float m = warpReduceSum(sum) / C;
  float v = 0.0f;
  for (int c = warp.thread_rank() * x128::size; c < C; c += 32 * x128::size) {
    x128 in = load128cs(x + c);
    for (int k = 0; k < x128::size; ++k) v += ((float)in[k] - m) * ((float)in[k] - m);
  }
  float s = rsqrtf(warpReduceSum(v) / C + 1e-5f);
  for (int c = warp.thread_rank() * x128::size; c < C; c += 32 * x128::size) {
    x128 in = load128cs(x + c), w = load128cs(weight + c), b = load128cs(bias + c), o;
    for (int k = 0; k < x128::size; ++k)
      o[k] = (floatX)(s * ((float)in[k] - m) * (float)w[k] + (float)b[k]);
    store128(out + (size_t)idx * C + c, o);
  }
  if (warp.thread_rank() == 0 && mean != nullptr) __stcs(mean + idx, m);
  if (warp.thread_rank() == 0 && rstd != nullptr) __stcs(rstd + idx, s);
}
