// normcheck cpu backend: cub::BlockLoad and the LoadDirect* functions (block_load.cuh).  Each
// algorithm leaves in every thread the items CUB's leaves there (BLOCK_LOAD_STRIPED: striped;
// every other: blocked, as CUB's loads then exchanges do); a guarded load reads only the first
// `valid_items` items and gives the others `oob_default` where one is passed.  Only data moves.
#pragma once
#include "../config.cuh"
#include "block_exchange.cuh"

namespace cub {
enum BlockLoadAlgorithm {
  BLOCK_LOAD_DIRECT,
  BLOCK_LOAD_STRIPED,
  BLOCK_LOAD_VECTORIZE,
  BLOCK_LOAD_TRANSPOSE,
  BLOCK_LOAD_WARP_TRANSPOSE,
  BLOCK_LOAD_WARP_TRANSPOSE_TIMESLICED,
};
namespace detail {
template <int N, typename T, typename It, typename Pos>
__device__ __forceinline__ void nc_load(int tid, It src, T (&dst)[N], Pos pos, int valid, bool guarded,
                                        const T* oob) {
  for (int k = 0; k < N; ++k) {
    int i = pos(tid, N, k);
    if (!guarded || i < valid) dst[k] = src[i];
    else if (oob) dst[k] = *oob;
  }
}
}  // namespace detail
#define NC_LOAD_DIRECT(NAME, POS)                                                               \
  template <typename T, int N, typename It>                                                     \
  __device__ __forceinline__ void NAME(int tid, It src, T (&dst)[N]) {                         \
    detail::nc_load<N>(tid, src, dst, POS, 0, false, (const T*)nullptr);                       \
  }                                                                                             \
  template <typename T, int N, typename It>                                                     \
  __device__ __forceinline__ void NAME(int tid, It src, T (&dst)[N], int valid) {              \
    detail::nc_load<N>(tid, src, dst, POS, valid, true, (const T*)nullptr);                    \
  }                                                                                             \
  template <typename T, typename D, int N, typename It>                                         \
  __device__ __forceinline__ void NAME(int tid, It src, T (&dst)[N], int valid, D oob) {       \
    T o = (T)oob;                                                                               \
    detail::nc_load<N>(tid, src, dst, POS, valid, true, &o);                                   \
  }
template <int Threads>
struct nc_striped_pos {
  __device__ __forceinline__ int operator()(int t, int n, int k) const { return detail::nc_striped<Threads>(t, n, k); }
};
NC_LOAD_DIRECT(LoadDirectBlocked, detail::nc_blocked)
NC_LOAD_DIRECT(LoadDirectWarpStriped, detail::nc_warp_striped)
#undef NC_LOAD_DIRECT
template <int Threads, typename T, int N, typename It>
__device__ __forceinline__ void LoadDirectStriped(int tid, It src, T (&dst)[N]) {
  detail::nc_load<N>(tid, src, dst, nc_striped_pos<Threads>(), 0, false, (const T*)nullptr);
}
template <int Threads, typename T, int N, typename It>
__device__ __forceinline__ void LoadDirectStriped(int tid, It src, T (&dst)[N], int valid) {
  detail::nc_load<N>(tid, src, dst, nc_striped_pos<Threads>(), valid, true, (const T*)nullptr);
}
template <int Threads, typename T, typename D, int N, typename It>
__device__ __forceinline__ void LoadDirectStriped(int tid, It src, T (&dst)[N], int valid, D oob) {
  T o = (T)oob;
  detail::nc_load<N>(tid, src, dst, nc_striped_pos<Threads>(), valid, true, &o);
}
template <typename T, int N>
__device__ __forceinline__ void LoadDirectBlockedVectorized(int tid, T* src, T (&dst)[N]) {
  LoadDirectBlocked(tid, src, dst);
}

template <typename T, int BlockDimX, int ItemsPerThread, BlockLoadAlgorithm Algorithm = BLOCK_LOAD_DIRECT,
          int BlockDimY = 1, int BlockDimZ = 1>
class BlockLoad {
  static constexpr int THREADS = BlockDimX * BlockDimY * BlockDimZ;
  using Exchange = BlockExchange<T, BlockDimX, ItemsPerThread, false, BlockDimY, BlockDimZ>;
  struct _TempStorage : Exchange::TempStorage {};
  int tid;
  template <typename It, typename D>
  __device__ __forceinline__ void Do(It src, T (&dst)[ItemsPerThread], int valid, bool guarded, const D* oob) {
    T o = oob ? (T)*oob : T();
    if (Algorithm == BLOCK_LOAD_STRIPED)
      detail::nc_load<ItemsPerThread>(tid, src, dst, nc_striped_pos<THREADS>(), valid, guarded, oob ? &o : (const T*)nullptr);
    else
      detail::nc_load<ItemsPerThread>(tid, src, dst, detail::nc_blocked, valid, guarded, oob ? &o : (const T*)nullptr);
  }

 public:
  struct TempStorage : _TempStorage {};
  __device__ __forceinline__ BlockLoad() : tid(detail::nc_row_major_tid(BlockDimX, BlockDimY, BlockDimZ)) {}
  __device__ __forceinline__ BlockLoad(TempStorage&) : tid(detail::nc_row_major_tid(BlockDimX, BlockDimY, BlockDimZ)) {}
  template <typename It>
  __device__ __forceinline__ void Load(It src, T (&dst)[ItemsPerThread]) { Do(src, dst, 0, false, (const T*)nullptr); }
  template <typename It>
  __device__ __forceinline__ void Load(It src, T (&dst)[ItemsPerThread], int valid) { Do(src, dst, valid, true, (const T*)nullptr); }
  template <typename It, typename D>
  __device__ __forceinline__ void Load(It src, T (&dst)[ItemsPerThread], int valid, D oob) { Do(src, dst, valid, true, &oob); }
};
}  // namespace cub
