// An llm.c-style LayerNorm with one warp per row (several rows per block), cooperative groups
// for the reductions, ε fixed at 1e-5 inside the kernel, and mean/rstd written for the backward
// pass.  For `normcheck check --spec warp_per_row.toml`.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

extern "C" __global__ void layernorm_warp_per_row(float* __restrict__ out, float* __restrict__ mean,
                                                  float* __restrict__ rstd,
                                                  const float* __restrict__ inp,
                                                  const float* __restrict__ weight,
                                                  const float* __restrict__ bias, int N, int C) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  int idx = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
  if (idx >= N) return;
  const float* x = inp + (size_t)idx * C;
  float sum = 0.0f;
  for (int i = warp.thread_rank(); i < C; i += warp.size()) sum += x[i];
  sum = cg::reduce(warp, sum, cg::plus<float>());
  float m = sum / C;
  if (warp.thread_rank() == 0) mean[idx] = m;
  sum = 0.0f;
  for (int i = warp.thread_rank(); i < C; i += warp.size()) {
    float diff = x[i] - m;
    sum += diff * diff;
  }
  sum = cg::reduce(warp, sum, cg::plus<float>());
  float s = rsqrtf(sum / C + 1e-5f);
  if (warp.thread_rank() == 0) rstd[idx] = s;
  float* o = out + (size_t)idx * C;
  for (int c = warp.thread_rank(); c < C; c += warp.size()) o[c] = s * (x[c] - m) * weight[c] + bias[c];
}
