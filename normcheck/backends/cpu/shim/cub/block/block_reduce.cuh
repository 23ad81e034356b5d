// normcheck cpu backend: cub::BlockReduce, reducing in CUB's own order so that float results are
// bit-identical to the GPU's.
//
// The three algorithms follow CCCL's cub/block/specializations/:
//  * BLOCK_REDUCE_WARP_REDUCTIONS (the default; block_reduce_warp_reductions.cuh): every warp
//    reduces its lanes (warp_reduce_shfl.cuh: offsets 1, 2, 4, ...), lane 0 of each warp stores
//    its aggregate, and after a barrier thread 0 folds the aggregates of warps 1, 2, ... in order
//    into warp 0's (ApplyWarpAggregates);
//  * BLOCK_REDUCE_RAKING (block_reduce_raking.cuh): every thread places its partial in a raking
//    grid (BlockRakingLayout, with its padding), up to 32 raking threads fold their segment in
//    order, then one logical warp of that many threads reduces them;
//  * BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY (block_reduce_raking_commutative_only.cuh): warp 0
//    keeps its own partial, folds a segment of the other threads' into it, then reduces the
//    warp; blocks that are not a multiple of 32 threads (or 32 and less) fall back to RAKING.
// The result is valid in thread 0 (every thread computes what it computes on the GPU).
// BLOCK_REDUCE_WARP_REDUCTIONS_NONDETERMINISTIC (warp aggregates added with shared-memory
// atomics, in an arrival order no test can rely on) runs as the deterministic one.
#pragma once
#include "../warp/warp_reduce.cuh"

namespace cub {

enum BlockReduceAlgorithm {
  BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY,
  BLOCK_REDUCE_RAKING,
  BLOCK_REDUCE_WARP_REDUCTIONS,
  BLOCK_REDUCE_WARP_REDUCTIONS_NONDETERMINISTIC,
};

namespace detail {

__device__ __forceinline__ int nc_row_major_tid(int x, int y, int z) {
  return (int)(((z == 1) ? 0 : (threadIdx.z * x * y)) + ((y == 1) ? 0 : (threadIdx.y * x)) +
               threadIdx.x);
}

// cub::BlockRakingLayout
template <typename T, int THREADS>
struct BlockRakingLayout {
  static constexpr int SHARED_ELEMENTS = THREADS;
  static constexpr int MAX_RAKING_THREADS = THREADS < 32 ? THREADS : 32;
  static constexpr int SEGMENT_LENGTH = (SHARED_ELEMENTS + MAX_RAKING_THREADS - 1) / MAX_RAKING_THREADS;
  static constexpr int RAKING_THREADS = (SHARED_ELEMENTS + SEGMENT_LENGTH - 1) / SEGMENT_LENGTH;
  static constexpr bool USE_SEGMENT_PADDING = ((SEGMENT_LENGTH & 1) == 0) && (SEGMENT_LENGTH > 2);
  static constexpr int GRID_ELEMENTS = RAKING_THREADS * (SEGMENT_LENGTH + USE_SEGMENT_PADDING);
  static constexpr int UNGUARDED = (SHARED_ELEMENTS % RAKING_THREADS == 0);
  struct TempStorage {
    T buff[GRID_ELEMENTS];
  };
  static __device__ __forceinline__ T* PlacementPtr(TempStorage& ts, unsigned tid) {
    unsigned offset = tid;
    if (USE_SEGMENT_PADDING) offset += offset / SEGMENT_LENGTH;
    return ts.buff + offset;
  }
  static __device__ __forceinline__ T* RakingPtr(TempStorage& ts, unsigned tid) {
    return ts.buff + tid * (SEGMENT_LENGTH + USE_SEGMENT_PADDING);
  }
};

template <typename A, typename B>
struct nc_union {  // raw storage for two alternatives (CUB's unions of Uninitialized<>)
  alignas(alignof(A) > alignof(B) ? alignof(A) : alignof(B)) unsigned char
      bytes[sizeof(A) > sizeof(B) ? sizeof(A) : sizeof(B)];
  A& a() { return *reinterpret_cast<A*>(bytes); }
  B& b() { return *reinterpret_cast<B*>(bytes); }
};

// cub::detail::BlockReduceWarpReductions
template <typename T, int X, int Y, int Z>
struct BlockReduceWarpReductions {
  static constexpr int THREADS = X * Y * Z;
  static constexpr int WARPS = (THREADS + 31) / 32;
  static constexpr int LOGICAL_WARP = THREADS < 32 ? THREADS : 32;
  static constexpr bool EVEN_WARP_MULTIPLE = (THREADS % LOGICAL_WARP == 0);
  using WarpReduceI = WarpReduceInternal<T, LOGICAL_WARP>;
  struct TempStorage {
    typename WarpReduceI::TempStorage warp_reduce[WARPS];
    T warp_aggregates[WARPS];
    T block_prefix;
  };
  TempStorage& ts;
  int linear_tid, warp_id, lane_id;
  __device__ __forceinline__ BlockReduceWarpReductions(TempStorage& t)
      : ts(t), linear_tid(nc_row_major_tid(X, Y, Z)),
        warp_id(WARPS == 1 ? 0 : nc_row_major_tid(X, Y, Z) / 32), lane_id(nc_laneid()) {}

  template <bool FULL, typename Op>
  __device__ __forceinline__ T ApplyWarpAggregates(Op op, T warp_aggregate, int num_valid) {
    if (lane_id == 0) ts.warp_aggregates[warp_id] = warp_aggregate;
    __syncthreads();
    if (linear_tid == 0) {
      for (int w = 1; w < WARPS; ++w)
        if (FULL || (w * LOGICAL_WARP < num_valid)) warp_aggregate = op(warp_aggregate, ts.warp_aggregates[w]);
    }
    return warp_aggregate;
  }
  template <bool FULL, typename Op>
  __device__ __forceinline__ T Reduce(T input, int num_valid, Op op) {
    const int warp_offset = warp_id * LOGICAL_WARP;
    const int warp_num_valid = ((FULL && EVEN_WARP_MULTIPLE) || (warp_offset + LOGICAL_WARP <= num_valid))
                                   ? LOGICAL_WARP
                                   : num_valid - warp_offset;
    T agg = WarpReduceI(ts.warp_reduce[warp_id]).template Reduce<(FULL && EVEN_WARP_MULTIPLE)>(
        input, warp_num_valid, op);
    return ApplyWarpAggregates<FULL>(op, agg, num_valid);
  }
  template <bool FULL>
  __device__ __forceinline__ T Sum(T input, int num_valid) {
    return Reduce<FULL>(input, num_valid, ::cuda::std::plus<>{});
  }
};

// cub::detail::BlockReduceRaking
template <typename T, int X, int Y, int Z>
struct BlockReduceRaking {
  static constexpr int THREADS = X * Y * Z;
  using Layout = BlockRakingLayout<T, THREADS>;
  static constexpr int RAKING_THREADS = Layout::RAKING_THREADS;
  static constexpr int SEGMENT_LENGTH = Layout::SEGMENT_LENGTH;
  static constexpr bool WARP_SYNCHRONOUS = (RAKING_THREADS == THREADS);
  static constexpr bool RAKING_UNGUARDED = Layout::UNGUARDED;
  using WarpReduceI = WarpReduceInternal<T, RAKING_THREADS>;
  using TempStorage = nc_union<typename WarpReduceI::TempStorage, typename Layout::TempStorage>;
  TempStorage& ts;
  unsigned linear_tid;
  __device__ __forceinline__ BlockReduceRaking(TempStorage& t) : ts(t), linear_tid(nc_row_major_tid(X, Y, Z)) {}

  template <bool FULL, typename Op>
  __device__ __forceinline__ T Reduce(T partial, int num_valid, Op op) {
    if (WARP_SYNCHRONOUS) {
      partial = WarpReduceI(ts.a()).template Reduce<FULL>(partial, num_valid, op);
    } else {
      *Layout::PlacementPtr(ts.b(), linear_tid) = partial;
      __syncthreads();
      if ((int)linear_tid < RAKING_THREADS) {
        T* seg = Layout::RakingPtr(ts.b(), linear_tid);
        partial = seg[0];
        for (int it = 1; it < SEGMENT_LENGTH; ++it)
          if ((FULL && RAKING_UNGUARDED) || ((int)(linear_tid * SEGMENT_LENGTH) + it < num_valid))
            partial = op(partial, seg[it]);
        int valid_raking = FULL ? RAKING_THREADS : (num_valid + SEGMENT_LENGTH - 1) / SEGMENT_LENGTH;
        __syncwarp((unsigned)((1ull << RAKING_THREADS) - 1));
        partial = WarpReduceI(ts.a()).template Reduce<(FULL && RAKING_UNGUARDED)>(partial, valid_raking, op);
      }
    }
    return partial;
  }
  template <bool FULL>
  __device__ __forceinline__ T Sum(T partial, int num_valid) {
    return Reduce<FULL>(partial, num_valid, ::cuda::std::plus<>{});
  }
};

// cub::detail::BlockReduceRakingCommutativeOnly
template <typename T, int X, int Y, int Z>
struct BlockReduceRakingCommutativeOnly {
  static constexpr int THREADS = X * Y * Z;
  using FallBack = BlockReduceRaking<T, X, Y, Z>;
  static constexpr bool USE_FALLBACK = ((THREADS % 32 != 0) || (THREADS <= 32));
  static constexpr int RAKING_THREADS = 32;
  static constexpr int SHARING_THREADS = THREADS - RAKING_THREADS > 1 ? THREADS - RAKING_THREADS : 1;
  static constexpr int SEGMENT_LENGTH = SHARING_THREADS / 32;
  using WarpReduceI = WarpReduceInternal<T, 32>;
  using Layout = BlockRakingLayout<T, SHARING_THREADS>;
  struct Default {
    typename WarpReduceI::TempStorage warp_storage;
    typename Layout::TempStorage raking_grid;
  };
  using TempStorage = nc_union<Default, typename FallBack::TempStorage>;
  TempStorage& ts;
  unsigned linear_tid;
  __device__ __forceinline__ BlockReduceRakingCommutativeOnly(TempStorage& t)
      : ts(t), linear_tid(nc_row_major_tid(X, Y, Z)) {}

  template <bool FULL, typename Op>
  __device__ __forceinline__ T Reduce(T partial, int num_valid, Op op) {
    if (USE_FALLBACK || !FULL) return FallBack(ts.b()).template Reduce<FULL>(partial, num_valid, op);
    if (linear_tid >= (unsigned)RAKING_THREADS)
      *Layout::PlacementPtr(ts.a().raking_grid, linear_tid - RAKING_THREADS) = partial;
    __syncthreads();
    if (linear_tid < (unsigned)RAKING_THREADS) {
      T* seg = Layout::RakingPtr(ts.a().raking_grid, linear_tid);
      for (int i = 0; i < SEGMENT_LENGTH; ++i) partial = op(partial, seg[i]);  // ThreadReduce(span, op, prefix)
      partial = WarpReduceI(ts.a().warp_storage).template Reduce<true>(partial, 32, op);
    }
    return partial;
  }
  template <bool FULL>
  __device__ __forceinline__ T Sum(T partial, int num_valid) {
    return Reduce<FULL>(partial, num_valid, ::cuda::std::plus<>{});
  }
};

template <typename T, int X, int Y, int Z, BlockReduceAlgorithm A>
struct nc_block_reduce_algo {
  using type = BlockReduceWarpReductions<T, X, Y, Z>;
};
template <typename T, int X, int Y, int Z>
struct nc_block_reduce_algo<T, X, Y, Z, BLOCK_REDUCE_RAKING> {
  using type = BlockReduceRaking<T, X, Y, Z>;
};
template <typename T, int X, int Y, int Z>
struct nc_block_reduce_algo<T, X, Y, Z, BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY> {
  using type = BlockReduceRakingCommutativeOnly<T, X, Y, Z>;
};

}  // namespace detail

template <typename T, int BlockDimX, BlockReduceAlgorithm Algorithm = BLOCK_REDUCE_WARP_REDUCTIONS,
          int BlockDimY = 1, int BlockDimZ = 1>
class BlockReduce {
  static constexpr int BLOCK_THREADS = BlockDimX * BlockDimY * BlockDimZ;
  using InternalBlockReduce =
      typename detail::nc_block_reduce_algo<T, BlockDimX, BlockDimY, BlockDimZ, Algorithm>::type;
  using _TempStorage = typename InternalBlockReduce::TempStorage;

  __device__ __forceinline__ _TempStorage& PrivateStorage() {
    __shared__ _TempStorage private_storage;
    return private_storage;
  }
  _TempStorage& temp_storage;

 public:
  struct TempStorage : _TempStorage {};

  __device__ __forceinline__ BlockReduce() : temp_storage(PrivateStorage()) {}
  __device__ __forceinline__ BlockReduce(TempStorage& t) : temp_storage(t) {}

  template <typename Op>
  __device__ __forceinline__ T Reduce(T input, Op op) {
    return InternalBlockReduce(temp_storage).template Reduce<true>(input, BLOCK_THREADS, op);
  }
  template <int N, typename Op>
  __device__ __forceinline__ T Reduce(T (&inputs)[N], Op op) {
    return Reduce(ThreadReduce(inputs, op), op);
  }
  template <typename Op>
  __device__ __forceinline__ T Reduce(T input, Op op, int num_valid) {
    if (num_valid >= BLOCK_THREADS)
      return InternalBlockReduce(temp_storage).template Reduce<true>(input, num_valid, op);
    return InternalBlockReduce(temp_storage).template Reduce<false>(input, num_valid, op);
  }
  __device__ __forceinline__ T Sum(T input) {
    return InternalBlockReduce(temp_storage).template Sum<true>(input, BLOCK_THREADS);
  }
  template <int N>
  __device__ __forceinline__ T Sum(T (&inputs)[N]) {
    return Sum(ThreadReduce(inputs, ::cuda::std::plus<>{}));
  }
  __device__ __forceinline__ T Sum(T input, int num_valid) {
    if (num_valid >= BLOCK_THREADS)
      return InternalBlockReduce(temp_storage).template Sum<true>(input, num_valid);
    return InternalBlockReduce(temp_storage).template Sum<false>(input, num_valid);
  }
};

}  // namespace cub
