// normcheck cpu backend: cub::BlockStore and the StoreDirect* functions (block_store.cuh).  The
// items a thread holds (striped for BLOCK_STORE_STRIPED, else blocked) go where CUB's store puts
// them; a guarded store writes only the first `valid_items`.  Only data moves.
#pragma once
#include "../config.cuh"
#include "block_load.cuh"

namespace cub {
enum BlockStoreAlgorithm {
  BLOCK_STORE_DIRECT,
  BLOCK_STORE_STRIPED,
  BLOCK_STORE_VECTORIZE,
  BLOCK_STORE_TRANSPOSE,
  BLOCK_STORE_WARP_TRANSPOSE,
  BLOCK_STORE_WARP_TRANSPOSE_TIMESLICED,
};
namespace detail {
template <int N, typename T, typename It, typename Pos>
__device__ __forceinline__ void nc_store(int tid, It dst, const T (&src)[N], Pos pos, int valid, bool guarded) {
  for (int k = 0; k < N; ++k) {
    int i = pos(tid, N, k);
    if (!guarded || i < valid) dst[i] = src[k];
  }
}
}  // namespace detail
template <typename T, int N, typename It>
__device__ __forceinline__ void StoreDirectBlocked(int tid, It dst, T (&src)[N]) { detail::nc_store<N>(tid, dst, src, detail::nc_blocked, 0, false); }
template <typename T, int N, typename It>
__device__ __forceinline__ void StoreDirectBlocked(int tid, It dst, T (&src)[N], int valid) { detail::nc_store<N>(tid, dst, src, detail::nc_blocked, valid, true); }
template <typename T, int N, typename It>
__device__ __forceinline__ void StoreDirectWarpStriped(int tid, It dst, T (&src)[N]) { detail::nc_store<N>(tid, dst, src, detail::nc_warp_striped, 0, false); }
template <typename T, int N, typename It>
__device__ __forceinline__ void StoreDirectWarpStriped(int tid, It dst, T (&src)[N], int valid) { detail::nc_store<N>(tid, dst, src, detail::nc_warp_striped, valid, true); }
template <int Threads, typename T, int N, typename It>
__device__ __forceinline__ void StoreDirectStriped(int tid, It dst, T (&src)[N]) { detail::nc_store<N>(tid, dst, src, nc_striped_pos<Threads>(), 0, false); }
template <int Threads, typename T, int N, typename It>
__device__ __forceinline__ void StoreDirectStriped(int tid, It dst, T (&src)[N], int valid) { detail::nc_store<N>(tid, dst, src, nc_striped_pos<Threads>(), valid, true); }
template <typename T, int N>
__device__ __forceinline__ void StoreDirectBlockedVectorized(int tid, T* dst, T (&src)[N]) { StoreDirectBlocked(tid, dst, src); }

template <typename T, int BlockDimX, int ItemsPerThread, BlockStoreAlgorithm Algorithm = BLOCK_STORE_DIRECT,
          int BlockDimY = 1, int BlockDimZ = 1>
class BlockStore {
  static constexpr int THREADS = BlockDimX * BlockDimY * BlockDimZ;
  using Exchange = BlockExchange<T, BlockDimX, ItemsPerThread, false, BlockDimY, BlockDimZ>;
  struct _TempStorage : Exchange::TempStorage {};
  int tid;
  template <typename It>
  __device__ __forceinline__ void Do(It dst, T (&src)[ItemsPerThread], int valid, bool guarded) {
    if (Algorithm == BLOCK_STORE_STRIPED)
      detail::nc_store<ItemsPerThread>(tid, dst, src, nc_striped_pos<THREADS>(), valid, guarded);
    else
      detail::nc_store<ItemsPerThread>(tid, dst, src, detail::nc_blocked, valid, guarded);
  }

 public:
  struct TempStorage : _TempStorage {};
  __device__ __forceinline__ BlockStore() : tid(detail::nc_row_major_tid(BlockDimX, BlockDimY, BlockDimZ)) {}
  __device__ __forceinline__ BlockStore(TempStorage&) : tid(detail::nc_row_major_tid(BlockDimX, BlockDimY, BlockDimZ)) {}
  template <typename It>
  __device__ __forceinline__ void Store(It dst, T (&src)[ItemsPerThread]) { Do(dst, src, 0, false); }
  template <typename It>
  __device__ __forceinline__ void Store(It dst, T (&src)[ItemsPerThread], int valid) { Do(dst, src, valid, true); }
};
}  // namespace cub
