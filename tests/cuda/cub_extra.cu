// cub::KeyValuePair with cub::ArgMax, cub::BlockLoad / BlockStore / BlockExchange arrangements,
// for tests/test_cuda_surface.py.
#include <cub/cub.cuh>

// the largest |x| of each row and its column, by BlockReduce over KeyValuePair with ArgMax
extern "C" __global__ void argmax_abs(int* col, float* val, const float* x, int cols) {
  using KV = cub::KeyValuePair<int, float>;
  using BR = cub::BlockReduce<KV, 64>;
  __shared__ typename BR::TempStorage tmp;
  KV best(-1, -1.0f);
  for (int j = threadIdx.x; j < cols; j += 64) best = cub::ArgMax()(best, KV(j, fabsf(x[blockIdx.x * cols + j])));
  best = BR(tmp).Reduce(best, cub::ArgMax());
  if (threadIdx.x == 0) { col[blockIdx.x] = best.key; val[blockIdx.x] = best.value; }
}

// each thread records, for each of its 3 items, the index it loaded (x[i] = i): the arrangement
template <cub::BlockLoadAlgorithm A>
__device__ void load_with(int* out, const int* x, int valid) {
  using L = cub::BlockLoad<int, 40, 3, A>;
  __shared__ typename L::TempStorage tmp;
  int v[3];
  L(tmp).Load(x, v, valid, -7);
  for (int k = 0; k < 3; ++k) out[threadIdx.x * 3 + k] = v[k];
}
extern "C" __global__ void load_direct(int* out, const int* x, int valid) { load_with<cub::BLOCK_LOAD_DIRECT>(out, x, valid); }
extern "C" __global__ void load_striped(int* out, const int* x, int valid) { load_with<cub::BLOCK_LOAD_STRIPED>(out, x, valid); }
extern "C" __global__ void load_transpose(int* out, const int* x, int valid) { load_with<cub::BLOCK_LOAD_WARP_TRANSPOSE>(out, x, valid); }
extern "C" __global__ void warp_striped(int* out, const int* x, int valid) {
  int v[3];
  cub::LoadDirectWarpStriped(threadIdx.x, x, v, valid, -7);
  for (int k = 0; k < 3; ++k) out[threadIdx.x * 3 + k] = v[k];
}
// blocked -> striped through BlockExchange, stored striped: the identity
extern "C" __global__ void exchange_store(int* out, const int* x, int valid) {
  using E = cub::BlockExchange<int, 40, 3>;
  using S = cub::BlockStore<int, 40, 3, cub::BLOCK_STORE_STRIPED>;
  __shared__ typename E::TempStorage te;
  __shared__ typename S::TempStorage ts;
  int v[3];
  cub::LoadDirectBlocked(threadIdx.x, x, v);
  E(te).BlockedToStriped(v);
  S(ts).Store(out, v, valid);
}
