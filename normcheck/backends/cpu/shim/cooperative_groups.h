// normcheck cpu backend: the part of cooperative_groups that normalisation kernels use —
// this_thread_block(), tiled_partition<N>() (N a power of two <= 32), their sync/rank/size and
// shuffles/votes, and cg::reduce with cg::plus/less/greater/bit_and/bit_or/bit_xor.
#pragma once
#include "normcheck_simt.h"

namespace cooperative_groups {

class thread_block {
 public:
  void sync(int line = __builtin_LINE(), const char* file = __builtin_FILE()) const {
    __syncthreads(line, file);
  }
  static unsigned long long thread_rank() {
    return threadIdx.x + (unsigned long long)blockDim.x * (threadIdx.y + (unsigned long long)blockDim.y * threadIdx.z);
  }
  static unsigned long long size() { return (unsigned long long)blockDim.x * blockDim.y * blockDim.z; }
  static unsigned long long num_threads() { return size(); }
  static dim3 group_index() { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
  static dim3 thread_index() { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
  static dim3 dim_threads() { return dim3(blockDim.x, blockDim.y, blockDim.z); }
  static dim3 group_dim() { return dim_threads(); }
};

inline thread_block this_thread_block() { return thread_block(); }
inline void sync(const thread_block& g) { g.sync(); }

template <unsigned N>
class thread_block_tile {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0,
                "normcheck cpu backend: tiled_partition<N> needs N a power of two <= 32");

 public:
  static constexpr unsigned num_threads_v = N;
  static unsigned lane_in_warp() { return (unsigned)(thread_block::thread_rank() & 31u); }
  static unsigned mask() {
    if (N == 32) return 0xffffffffu;
    unsigned base = (lane_in_warp() / N) * N;
    return ((1u << N) - 1u) << base;
  }
  void sync() const { __syncwarp(mask()); }
  static unsigned long long thread_rank() { return thread_block::thread_rank() & (N - 1); }
  static unsigned long long size() { return N; }
  static unsigned long long num_threads() { return N; }
  static unsigned long long meta_group_rank() { return thread_block::thread_rank() / N; }
  static unsigned long long meta_group_size() { return (thread_block::size() + N - 1) / N; }
  template <class T> T shfl(T v, int src) const { return __shfl_sync(mask(), v, src, N); }
  template <class T> T shfl_down(T v, unsigned d) const { return __shfl_down_sync(mask(), v, d, N); }
  template <class T> T shfl_up(T v, unsigned d) const { return __shfl_up_sync(mask(), v, d, N); }
  template <class T> T shfl_xor(T v, int m) const { return __shfl_xor_sync(mask(), v, m, N); }
  int any(int p) const { return __any_sync(mask(), p); }
  int all(int p) const { return __all_sync(mask(), p); }
  unsigned ballot(int p) const {
    unsigned b = __ballot_sync(mask(), p);
    return N == 32 ? b : (b >> ((lane_in_warp() / N) * N)) & ((1u << N) - 1u);
  }
};

template <unsigned N, class Parent>
inline thread_block_tile<N> tiled_partition(const Parent&) { return thread_block_tile<N>(); }

template <unsigned N>
inline void sync(const thread_block_tile<N>& g) { g.sync(); }

template <class T> struct plus { T operator()(const T& a, const T& b) const { return a + b; } };
template <class T> struct less { T operator()(const T& a, const T& b) const { return a < b ? a : b; } };
template <class T> struct greater { T operator()(const T& a, const T& b) const { return a > b ? a : b; } };
template <class T> struct bit_and { T operator()(const T& a, const T& b) const { return a & b; } };
template <class T> struct bit_or { T operator()(const T& a, const T& b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(const T& a, const T& b) const { return a ^ b; } };

// Butterfly reduction: every thread of the tile gets the result (as with CUDA's cg::reduce).
template <unsigned N, class T, class Op>
inline T reduce(const thread_block_tile<N>& g, T v, Op op) {
  for (unsigned m = N / 2; m >= 1; m /= 2) v = op(v, g.shfl_xor(v, (int)m));
  return v;
}

}  // namespace cooperative_groups
