// normcheck cpu backend: cub::WarpReduce, reducing in CUB's own order so that float results are
// bit-identical to the GPU's.
//
// The order follows CCCL's cub/warp/specializations/warp_reduce_shfl.cuh (power-of-two logical
// warps) and warp_reduce_smem.cuh (any other width): log2(W) steps with offsets 1, 2, 4, ...;
// at each step lane l combines op(own, value of lane l + offset) when l + offset is a valid
// lane.  Every lane computes what it computes on the GPU (lane 0 holds the aggregate), the
// shuffles going through the SIMT shim's warp exchange.
#pragma once
#include "../thread/thread_reduce.cuh"
#include "../util_type.cuh"
#include <cuda/std/type_traits>

namespace cub {
namespace detail {

// cuda::maximum<> / cuda::minimum<> (libcu++'s <cuda/functional> needs the driver API)
struct nc_maximum {
  template <typename A, typename B>
  __device__ __forceinline__ auto operator()(const A& a, const B& b) const { return (a < b) ? b : a; }
};
struct nc_minimum {
  template <typename A, typename B>
  __device__ __forceinline__ auto operator()(const A& a, const B& b) const { return (b < a) ? b : a; }
};

inline int nc_laneid() { return (int)::ncsimt::ptx::laneid(); }

constexpr bool nc_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }
constexpr int nc_log2_ceil(int n) { return n <= 1 ? 0 : 1 + nc_log2_ceil((n + 1) / 2); }

// CUB's WarpMask: the lanes of this logical warp within the hardware warp
template <int LW>
inline unsigned nc_warp_mask(unsigned warp_id) {
  unsigned m = 0xFFFFFFFFu >> (32 - LW);
  if (nc_pow2(LW) && LW != 32) m <<= warp_id * LW;
  return m;
}

// cub::detail::WarpReduceShfl
template <typename T, int LW>
struct WarpReduceShfl {
  static_assert(nc_pow2(LW), "LOGICAL_WARP_THREADS must be a power of two");
  struct TempStorage {};
  int lane_id, warp_id;
  unsigned member_mask;
  __device__ __forceinline__ WarpReduceShfl(TempStorage&)
      : lane_id(nc_laneid()), warp_id(LW == 32 ? 0 : nc_laneid() / LW),
        member_mask(nc_warp_mask<LW>((unsigned)(LW == 32 ? 0 : nc_laneid() / LW))) {
    if (LW != 32) lane_id = lane_id % LW;
  }
  template <bool ALL_LANES_VALID, typename Op>
  __device__ __forceinline__ T Reduce(T input, int valid_items, Op op) {
    T output = input;
    const int last_lane = ALL_LANES_VALID ? LW - 1 : valid_items - 1;
    for (int offset = 1; offset < LW; offset *= 2) {
      // shfl.sync.down with the segment clamp: lanes past the segment keep their own value
      T temp = __shfl_down_sync(member_mask, output, (unsigned)offset, LW);
      if (offset + lane_id <= last_lane) output = op(output, temp);
    }
    return output;
  }
};

// cub::detail::WarpReduceSmem (logical warps that are not a power of two)
template <typename T, int LW>
struct WarpReduceSmem {
  static constexpr int STEPS = nc_log2_ceil(LW);
  static constexpr int HALF = 1 << (STEPS > 0 ? STEPS - 1 : 0);
  struct TempStorage {
    T reduce[LW + HALF];
  };
  TempStorage& ts;
  unsigned lane_id, member_mask;
  __device__ __forceinline__ WarpReduceSmem(TempStorage& t)
      : ts(t), lane_id(LW == 32 ? nc_laneid() : nc_laneid() % LW),
        member_mask(nc_warp_mask<LW>((unsigned)(nc_laneid() / LW))) {}
  template <bool ALL_LANES_VALID, typename Op>
  __device__ __forceinline__ T Reduce(T input, int valid_items, Op op) {
    for (int step = 0; step < STEPS; ++step) {
      const int offset = 1 << step;
      ts.reduce[lane_id] = input;
      __syncwarp(member_mask);
      if ((ALL_LANES_VALID && nc_pow2(LW)) || ((int)lane_id + offset < valid_items))
        input = op(input, ts.reduce[lane_id + offset]);
      __syncwarp(member_mask);
    }
    return input;
  }
};

template <typename T, int LW>
using WarpReduceInternal =
    typename ::cuda::std::conditional<nc_pow2(LW), WarpReduceShfl<T, LW>, WarpReduceSmem<T, LW>>::type;

}  // namespace detail

template <typename T, int LogicalWarpThreads = 32>
class WarpReduce {
  static_assert(LogicalWarpThreads >= 1 && LogicalWarpThreads <= 32,
                "LogicalWarpThreads must be in the range [1, 32]");

 public:
  using InternalWarpReduce = detail::WarpReduceInternal<T, LogicalWarpThreads>;
  using TempStorage = typename InternalWarpReduce::TempStorage;

 private:
  TempStorage& temp_storage;

 public:
  __device__ __forceinline__ WarpReduce(TempStorage& t) : temp_storage(t) {}
  __device__ __forceinline__ T Sum(T input) {
    return InternalWarpReduce(temp_storage).template Reduce<true>(input, LogicalWarpThreads,
                                                                  ::cuda::std::plus<>{});
  }
  template <int N>
  __device__ __forceinline__ T Sum(const T (&input)[N]) {
    return Sum(ThreadReduce(input, ::cuda::std::plus<>{}));
  }
  __device__ __forceinline__ T Sum(T input, int valid_items) {
    return InternalWarpReduce(temp_storage).template Reduce<false>(input, valid_items,
                                                                   ::cuda::std::plus<>{});
  }
  __device__ __forceinline__ T Max(T input) { return Reduce(input, detail::nc_maximum{}); }
  __device__ __forceinline__ T Max(T input, int valid_items) {
    return Reduce(input, detail::nc_maximum{}, valid_items);
  }
  __device__ __forceinline__ T Min(T input) { return Reduce(input, detail::nc_minimum{}); }
  __device__ __forceinline__ T Min(T input, int valid_items) {
    return Reduce(input, detail::nc_minimum{}, valid_items);
  }
  template <typename Op>
  __device__ __forceinline__ T Reduce(T input, Op op) {
    return InternalWarpReduce(temp_storage).template Reduce<true>(input, LogicalWarpThreads, op);
  }
  template <int N, typename Op>
  __device__ __forceinline__ T Reduce(const T (&input)[N], Op op) {
    return Reduce(ThreadReduce(input, op), op);
  }
  template <typename Op>
  __device__ __forceinline__ T Reduce(T input, Op op, int valid_items) {
    return InternalWarpReduce(temp_storage).template Reduce<false>(input, valid_items, op);
  }
  template <typename F>
  __device__ T HeadSegmentedSum(T, F) {
    static_assert(detail::nc_always_false<F>::value,
                  "normcheck cpu backend: cub::WarpReduce's segmented reductions are not supported");
    return T();
  }
  template <typename F>
  __device__ T TailSegmentedSum(T, F) {
    static_assert(detail::nc_always_false<F>::value,
                  "normcheck cpu backend: cub::WarpReduce's segmented reductions are not supported");
    return T();
  }
};

}  // namespace cub
