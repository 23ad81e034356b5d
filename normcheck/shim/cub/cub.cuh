// normcheck cpu backend: CUB is not supported by the SIMT shim.
#error "normcheck cpu backend: CUB (cub/cub.cuh) is not supported; reduce with warp shuffles, shared memory or cooperative_groups (tiled_partition + cg::reduce) instead"
