// FlashInfer-style RMSNorm + static fp8 (our own code, written the way include/flashinfer/norm.cuh's
// RMSNormQuantKernel is): a 2-D block of 32 × num_warps threads, VEC_SIZE-wide vector loads, the
// sum of squares reduced with xor shuffles and shared memory, rms by rsqrt.approx.ftz.f32, then
// x · rms · (weight_bias + w) · scale_inv in float -- no rounding of y -- clamped to ±448 and
// converted to e4m3.  scale_inv = 1 / scale[0].
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

namespace flashinfer_like {

__device__ __forceinline__ float rsqrt_approx(float x) {
  float y;
  asm volatile("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <typename T, int N>
struct alignas(sizeof(T) * N) vec_t {
  T data[N];
  __device__ void load(const T* p) { *this = *reinterpret_cast<const vec_t*>(p); }
  __device__ float f(int i) const { return static_cast<float>(data[i]); }
};

template <uint32_t VEC_SIZE, typename T>
__global__ void RMSNormQuantKernel(const T* __restrict__ input, const T* __restrict__ weight,
                                   uint8_t* __restrict__ output, const uint32_t d,
                                   const uint32_t stride_input, const uint32_t stride_output,
                                   float weight_bias, const float* __restrict__ scale,
                                   float eps) {
  const uint32_t bx = blockIdx.x;
  const uint32_t tx = threadIdx.x, ty = threadIdx.y;
  constexpr uint32_t warp_size = 32;
  const uint32_t num_warps = blockDim.y;
  const uint32_t thread_id = tx + ty * warp_size;
  const uint32_t num_threads = num_warps * warp_size;
  const uint32_t rounds = (d + VEC_SIZE * num_threads - 1) / (VEC_SIZE * num_threads);
  extern __shared__ float smem[];
  const float scale_inv = 1.0f / scale[0];

  float sum_sq = 0.f;
  for (uint32_t i = 0; i < rounds; i++) {
    vec_t<T, VEC_SIZE> input_vec;
    const uint32_t j = (i * num_threads + thread_id) * VEC_SIZE;
    if (j < d) {
      input_vec.load(input + bx * stride_input + j);
#pragma unroll
      for (uint32_t k = 0; k < VEC_SIZE; k++) sum_sq += input_vec.f(k) * input_vec.f(k);
    }
  }
#pragma unroll
  for (uint32_t offset = warp_size / 2; offset > 0; offset /= 2)
    sum_sq += __shfl_xor_sync(0xffffffff, sum_sq, offset);
  smem[ty] = sum_sq;
  __syncthreads();
  if (ty == 0) {
    sum_sq = (tx < num_warps) ? smem[tx] : 0.f;
#pragma unroll
    for (uint32_t offset = warp_size / 2; offset > 0; offset /= 2)
      sum_sq += __shfl_xor_sync(0xffffffff, sum_sq, offset);
    smem[0] = sum_sq;
  }
  __syncthreads();
  const float rms_rcp = rsqrt_approx(smem[0] / float(d) + eps);

  for (uint32_t i = 0; i < rounds; i++) {
    vec_t<T, VEC_SIZE> input_vec, weight_vec;
    const uint32_t j = (i * num_threads + thread_id) * VEC_SIZE;
    if (j < d) {
      input_vec.load(input + bx * stride_input + j);
      weight_vec.load(weight + j);
#pragma unroll
      for (uint32_t k = 0; k < VEC_SIZE; k++) {
        float v = input_vec.f(k) * rms_rcp * (weight_bias + weight_vec.f(k)) * scale_inv;
        v = fmaxf(-448.0f, fminf(v, 448.0f));
        output[bx * stride_output + j + k] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
      }
    }
  }
}

}  // namespace flashinfer_like
