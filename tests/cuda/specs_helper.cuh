// Included by specs.cu: dynamic shared memory declared at file scope in a header.
#pragma once
extern __shared__ float nc_helper_smem[];

__device__ inline float block_total(float v) {
  nc_helper_smem[threadIdx.x] = v;
  __syncthreads();
  float t = 0.f;
  if (threadIdx.x == 0)
    for (int i = 0; i < (int)blockDim.x; ++i) t += nc_helper_smem[i];
  __syncthreads();
  if (threadIdx.x == 0) nc_helper_smem[0] = t;
  __syncthreads();
  return nc_helper_smem[0];
}
