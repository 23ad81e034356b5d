// normcheck cpu backend: CUB's reduction functors (cub::Sum, cub::Max, cub::Min, the older
// interface vLLM's ROCm path and TensorRT-LLM use), beside libcu++'s cuda::std::plus<>.
#pragma once
#include "../config.cuh"
#include "../util_type.cuh"
#include <cuda/std/functional>
namespace cub {
struct Sum {
  template <typename A, typename B>
  __host__ __device__ __forceinline__ auto operator()(const A& a, const B& b) const { return a + b; }
};
struct Max {
  template <typename A, typename B>
  __host__ __device__ __forceinline__ auto operator()(const A& a, const B& b) const { return CUB_MAX(a, b); }
};
struct Min {
  template <typename A, typename B>
  __host__ __device__ __forceinline__ auto operator()(const A& a, const B& b) const { return CUB_MIN(a, b); }
};
// the larger value and its key; on equal values the smaller key (thread_operators.cuh)
struct ArgMax {
  template <typename T, typename OffsetT>
  __host__ __device__ __forceinline__ KeyValuePair<OffsetT, T> operator()(
      const KeyValuePair<OffsetT, T>& a, const KeyValuePair<OffsetT, T>& b) const {
    if ((b.value > a.value) || ((a.value == b.value) && (b.key < a.key))) return b;
    return a;
  }
};
struct ArgMin {
  template <typename T, typename OffsetT>
  __host__ __device__ __forceinline__ KeyValuePair<OffsetT, T> operator()(
      const KeyValuePair<OffsetT, T>& a, const KeyValuePair<OffsetT, T>& b) const {
    if ((b.value < a.value) || ((a.value == b.value) && (b.key < a.key))) return b;
    return a;
  }
};
struct Equality {
  template <typename A, typename B>
  __host__ __device__ __forceinline__ bool operator()(const A& a, const B& b) const { return a == b; }
};
}  // namespace cub
