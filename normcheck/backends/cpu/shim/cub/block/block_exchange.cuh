// normcheck cpu backend: cub::BlockExchange (block_exchange.cuh) -- items between the blocked,
// striped and warp-striped arrangements, through a shared buffer.  Only data moves: every
// arrangement holds the values CUB's does.
//   blocked       thread t holds items t*N .. t*N+N-1
//   striped       thread t holds items t, t+T, t+2T, ...
//   warp-striped  in warp w, lane l holds items w*32*N + l + 32*k
#pragma once
#include "../config.cuh"
#include "block_reduce.cuh"

namespace cub {
namespace detail {
__device__ __forceinline__ int nc_blocked(int tid, int n, int k) { return tid * n + k; }
template <int T>
__device__ __forceinline__ int nc_striped(int tid, int, int k) { return tid + T * k; }
__device__ __forceinline__ int nc_warp_striped(int tid, int n, int k) {
  int w = tid / 32, l = tid % 32;
  return w * 32 * n + l + 32 * k;
}
}  // namespace detail

template <typename T, int BlockDimX, int ItemsPerThread, bool WarpTimeSlicing = false,
          int BlockDimY = 1, int BlockDimZ = 1>
class BlockExchange {
  static constexpr int THREADS = BlockDimX * BlockDimY * BlockDimZ;
  static constexpr int N = ItemsPerThread;
  struct _TempStorage {
    T buff[THREADS * N];
  };
  _TempStorage& ts;
  int tid;
  __device__ __forceinline__ _TempStorage& Private() {
    __shared__ _TempStorage s;
    return s;
  }
  template <class From, class To>
  __device__ __forceinline__ void Move(const T (&in)[N], T (&out)[N], From from, To to) {
    for (int k = 0; k < N; ++k) ts.buff[from(tid, N, k)] = in[k];
    __syncthreads();
    for (int k = 0; k < N; ++k) out[k] = ts.buff[to(tid, N, k)];
    __syncthreads();
  }

 public:
  struct TempStorage : _TempStorage {};
  __device__ __forceinline__ BlockExchange() : ts(Private()), tid(detail::nc_row_major_tid(BlockDimX, BlockDimY, BlockDimZ)) {}
  __device__ __forceinline__ BlockExchange(TempStorage& t) : ts(t), tid(detail::nc_row_major_tid(BlockDimX, BlockDimY, BlockDimZ)) {}
  template <typename U>
  __device__ __forceinline__ void StripedToBlocked(const T (&in)[N], U (&out)[N]) {
    T tmp[N];
    Move(in, tmp, detail::nc_striped<THREADS>, detail::nc_blocked);
    for (int k = 0; k < N; ++k) out[k] = tmp[k];
  }
  template <typename U>
  __device__ __forceinline__ void BlockedToStriped(const T (&in)[N], U (&out)[N]) {
    T tmp[N];
    Move(in, tmp, detail::nc_blocked, detail::nc_striped<THREADS>);
    for (int k = 0; k < N; ++k) out[k] = tmp[k];
  }
  template <typename U>
  __device__ __forceinline__ void WarpStripedToBlocked(const T (&in)[N], U (&out)[N]) {
    T tmp[N];
    Move(in, tmp, detail::nc_warp_striped, detail::nc_blocked);
    for (int k = 0; k < N; ++k) out[k] = tmp[k];
  }
  template <typename U>
  __device__ __forceinline__ void BlockedToWarpStriped(const T (&in)[N], U (&out)[N]) {
    T tmp[N];
    Move(in, tmp, detail::nc_blocked, detail::nc_warp_striped);
    for (int k = 0; k < N; ++k) out[k] = tmp[k];
  }
  __device__ __forceinline__ void StripedToBlocked(T (&items)[N]) { StripedToBlocked(items, items); }
  __device__ __forceinline__ void BlockedToStriped(T (&items)[N]) { BlockedToStriped(items, items); }
  __device__ __forceinline__ void WarpStripedToBlocked(T (&items)[N]) { WarpStripedToBlocked(items, items); }
  __device__ __forceinline__ void BlockedToWarpStriped(T (&items)[N]) { BlockedToWarpStriped(items, items); }
  template <typename U, typename OffsetT>
  __device__ __forceinline__ void ScatterToBlocked(const T (&in)[N], U (&out)[N], OffsetT (&ranks)[N]) {
    for (int k = 0; k < N; ++k) ts.buff[ranks[k]] = in[k];
    __syncthreads();
    for (int k = 0; k < N; ++k) out[k] = ts.buff[tid * N + k];
    __syncthreads();
  }
  template <typename U, typename OffsetT>
  __device__ __forceinline__ void ScatterToStriped(const T (&in)[N], U (&out)[N], OffsetT (&ranks)[N]) {
    for (int k = 0; k < N; ++k) ts.buff[ranks[k]] = in[k];
    __syncthreads();
    for (int k = 0; k < N; ++k) out[k] = ts.buff[tid + THREADS * k];
    __syncthreads();
  }
};
}  // namespace cub
