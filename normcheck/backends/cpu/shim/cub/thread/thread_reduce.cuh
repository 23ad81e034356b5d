// normcheck cpu backend: cub::ThreadReduce over a thread's own items, in order (CUB's
// ThreadReduceSequential: what the GPU does for float and double; __half/__nv_bfloat16 arrays
// with plus/min/max are paired by SIMD instructions from sm_80 there -- see CPU_VS_GPU).
#pragma once
#include "thread_operators.cuh"
namespace cub {
template <typename T, int N, typename Op>
__device__ __forceinline__ T ThreadReduce(const T (&input)[N], Op op) {
  T r = input[0];
  for (int i = 1; i < N; ++i) r = op(r, input[i]);
  return r;
}
template <typename T, int N, typename Op, typename P>
__device__ __forceinline__ T ThreadReduce(const T (&input)[N], Op op, P prefix) {
  T r = prefix;
  for (int i = 0; i < N; ++i) r = op(r, input[i]);
  return r;
}
template <int N, typename T, typename Op>
__device__ __forceinline__ T ThreadReduce(const T* input, Op op) {
  T r = input[0];
  for (int i = 1; i < N; ++i) r = op(r, input[i]);
  return r;
}
}  // namespace cub
