// cub::BlockReduce and cub::WarpReduce on the cpu backend, for tests/test_cub_ptx.py: each
// kernel reduces x (one value a thread) and writes what every thread got back.
#include <cub/cub.cuh>
#include <cuda/std/functional>

template <int BLOCK, cub::BlockReduceAlgorithm ALGO>
__device__ void block_sum(float* out, const float* x, int num_valid) {
  using BlockReduce = cub::BlockReduce<float, BLOCK, ALGO>;
  __shared__ typename BlockReduce::TempStorage temp;
  float v = x[threadIdx.x];
  float r = num_valid < 0 ? BlockReduce(temp).Sum(v)
                          : BlockReduce(temp).Reduce(v, cuda::std::plus<>{}, num_valid);
  out[threadIdx.x] = r;
}
extern "C" __global__ void warp_reductions_1024(float* out, const float* x, int n) {
  block_sum<1024, cub::BLOCK_REDUCE_WARP_REDUCTIONS>(out, x, n);
}
extern "C" __global__ void warp_reductions_256(float* out, const float* x, int n) {
  block_sum<256, cub::BLOCK_REDUCE_WARP_REDUCTIONS>(out, x, n);
}
extern "C" __global__ void raking_256(float* out, const float* x, int n) {
  block_sum<256, cub::BLOCK_REDUCE_RAKING>(out, x, n);
}
extern "C" __global__ void raking_commutative_256(float* out, const float* x, int n) {
  block_sum<256, cub::BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY>(out, x, n);
}
extern "C" __global__ void raking_100(float* out, const float* x, int n) {
  block_sum<100, cub::BLOCK_REDUCE_RAKING>(out, x, n);
}
// a 2-D block (32 x 4) with cub::Max, through the default algorithm
extern "C" __global__ void max_2d(float* out, const float* x) {
  using BlockReduce = cub::BlockReduce<float, 32, cub::BLOCK_REDUCE_WARP_REDUCTIONS, 4>;
  __shared__ typename BlockReduce::TempStorage temp;
  int t = threadIdx.x + threadIdx.y * 32;
  out[t] = BlockReduce(temp).Reduce(x[t], cub::Max());
}
// logical warps of 16 and of 12 lanes (shuffles / shared memory)
template <int LW>
__device__ void warp_sum(float* out, const float* x) {
  using WarpReduce = cub::WarpReduce<float, LW>;
  __shared__ typename WarpReduce::TempStorage temp[32 / LW + 1];
  int w = threadIdx.x / LW;
  out[threadIdx.x] = WarpReduce(temp[w]).Sum(x[threadIdx.x]);
}
extern "C" __global__ void warp_sum_16(float* out, const float* x) { warp_sum<16>(out, x); }
extern "C" __global__ void warp_sum_12(float* out, const float* x) { warp_sum<12>(out, x); }
