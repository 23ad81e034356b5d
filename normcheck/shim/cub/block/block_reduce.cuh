#error "normcheck cpu backend: CUB (cub/block/block_reduce.cuh) is not supported; reduce with warp shuffles, shared memory or cooperative_groups (tiled_partition + cg::reduce) instead"
