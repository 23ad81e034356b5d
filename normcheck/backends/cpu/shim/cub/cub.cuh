// normcheck cpu backend: CUB as the SIMT shim provides it.
//
// Supported: cub::BlockReduce (all three algorithms, in CUB's reduction order), cub::WarpReduce
// (any logical warp width), cub::ThreadReduce, cub::BlockLoad / BlockStore / BlockExchange and
// the LoadDirect* / StoreDirect* functions (every algorithm: data only moves), cub::KeyValuePair
// with cub::ArgMax / ArgMin, and the functors cub::Sum/Max/Min beside libcu++'s
// cuda::std::plus<> / cuda::maximum<> / cuda::minimum<>.  Every other CUB collective is declared
// so that using it is a compile error naming the class.
#pragma once
#include "config.cuh"
#include "util_type.cuh"
#include "thread/thread_operators.cuh"
#include "thread/thread_reduce.cuh"
#include "warp/warp_reduce.cuh"
#include "block/block_reduce.cuh"
#include "block/block_exchange.cuh"
#include "block/block_load.cuh"
#include "block/block_store.cuh"

namespace cub {
#define NC_CUB_UNSUPPORTED_CLASS(NAME)                                                           \
  template <typename T, auto... Rest>                                                            \
  class NAME {                                                                                   \
    static_assert(detail::nc_always_false<T>::value,                                             \
                  "normcheck cpu backend: cub::" #NAME " is not supported; the SIMT shim "       \
                  "provides cub::BlockReduce and cub::WarpReduce (reduce with those, warp "      \
                  "shuffles or cooperative_groups)");                                            \
  };
NC_CUB_UNSUPPORTED_CLASS(BlockScan)
NC_CUB_UNSUPPORTED_CLASS(BlockRadixSort)
NC_CUB_UNSUPPORTED_CLASS(BlockHistogram)
NC_CUB_UNSUPPORTED_CLASS(BlockDiscontinuity)
NC_CUB_UNSUPPORTED_CLASS(BlockShuffle)
NC_CUB_UNSUPPORTED_CLASS(BlockAdjacentDifference)
NC_CUB_UNSUPPORTED_CLASS(BlockMergeSort)
NC_CUB_UNSUPPORTED_CLASS(WarpScan)
NC_CUB_UNSUPPORTED_CLASS(WarpLoad)
NC_CUB_UNSUPPORTED_CLASS(WarpStore)
NC_CUB_UNSUPPORTED_CLASS(WarpExchange)
NC_CUB_UNSUPPORTED_CLASS(WarpMergeSort)
#undef NC_CUB_UNSUPPORTED_CLASS
#define NC_CUB_UNSUPPORTED_DEVICE(NAME)                                                          \
  struct NAME {                                                                                  \
    template <typename... A>                                                                     \
    static int Unsupported(A&&...) {                                                             \
      static_assert(detail::nc_always_false<A...>::value,                                        \
                    "normcheck cpu backend: cub::" #NAME " (a device-wide algorithm) is not "    \
                    "supported");                                                                \
      return 0;                                                                                  \
    }                                                                                            \
  };
NC_CUB_UNSUPPORTED_DEVICE(DeviceReduce)
NC_CUB_UNSUPPORTED_DEVICE(DeviceScan)
NC_CUB_UNSUPPORTED_DEVICE(DeviceRadixSort)
NC_CUB_UNSUPPORTED_DEVICE(DeviceSegmentedReduce)
NC_CUB_UNSUPPORTED_DEVICE(DeviceSelect)
NC_CUB_UNSUPPORTED_DEVICE(DeviceHistogram)
#undef NC_CUB_UNSUPPORTED_DEVICE
}  // namespace cub
