// normcheck SIMT shim: the device functions outside the Math API that normcheck_simt.h's core
// (warp collectives, barriers, atomics on int/float) does not already give -- the legacy warp
// votes, every atomic's _block and _system forms and its vector and 16-bit overloads, named
// barriers, address spaces, clusters and grid dependencies.  normcheck.backends.cpu.surface measures
// the coverage against the CUDA headers.
#pragma once

// ------------------------------------------------------------------------------------------------
// Warp functions
// ------------------------------------------------------------------------------------------------
// the legacy (pre-sync) votes: every active lane takes part
inline unsigned __ballot(int pred) { return __ballot_sync(__activemask(), pred); }
inline int __all(int pred) { return __all_sync(__activemask(), pred); }
inline int __any(int pred) { return __any_sync(__activemask(), pred); }
// all lanes of mask hold the same value: the mask, and *pred = 1; else 0, and *pred = 0
template <class T> inline unsigned __match_all_sync(unsigned mask, T value, int* pred) {
  unsigned same = __match_any_sync(mask, value);
  bool all = (same & mask) == (mask & __activemask());
  *pred = all ? 1 : 0;
  return all ? mask : 0u;
}
// true when pred is the same in every lane of mask
inline int __uni_sync(unsigned mask, int pred) {
  unsigned b = __ballot_sync(mask, pred);
  return b == 0u || b == (mask & __activemask());
}

// ------------------------------------------------------------------------------------------------
// Atomics: the vector and 16-bit overloads, and the _block / _system scopes (one address space and
// one process here: each is the device-scope atomic)
// ------------------------------------------------------------------------------------------------
namespace ncsimt {
// a read-modify-write of a whole word by compare-and-swap (the word is what a GPU updates at once)
template <class V, class W, class Op> inline V atomic_word(V* a, V v, Op op) {
  static_assert(sizeof(V) == sizeof(W), "size");
  W* ai = reinterpret_cast<W*>(a);
  W old = __atomic_load_n(ai, __ATOMIC_SEQ_CST), nw;
  V ov;
  do {
    std::memcpy(&ov, &old, sizeof(V));
    V r = op(ov, v);
    std::memcpy(&nw, &r, sizeof(V));
  } while (!__atomic_compare_exchange_n(ai, &old, nw, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  std::memcpy(&ov, &old, sizeof(V));
  return ov;
}
}  // namespace ncsimt
inline __half2 atomicAdd(__half2* a, __half2 v) {
  return ::ncsimt::atomic_word<__half2, unsigned>(a, v, [](__half2 x, __half2 y) { return __hadd2(x, y); });
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* a, __nv_bfloat162 v) {
  return ::ncsimt::atomic_word<__nv_bfloat162, unsigned>(a, v, [](__nv_bfloat162 x, __nv_bfloat162 y) { return __hadd2(x, y); });
}
// float2 / float4 (sm_90): each element is an atomic float add
inline float2 atomicAdd(float2* a, float2 v) { return make_float2(atomicAdd(&a->x, v.x), atomicAdd(&a->y, v.y)); }
inline float4 atomicAdd(float4* a, float4 v) {
  return make_float4(atomicAdd(&a->x, v.x), atomicAdd(&a->y, v.y), atomicAdd(&a->z, v.z), atomicAdd(&a->w, v.w));
}
inline double atomicExch(double* a, double v) {
  return ::ncsimt::atomic_word<double, unsigned long long>(a, v, [](double, double y) { return y; });
}
inline double atomicMax(double* a, double v) {
  return ::ncsimt::atomic_word<double, unsigned long long>(a, v, [](double x, double y) { return x > y ? x : y; });
}
inline double atomicMin(double* a, double v) {
  return ::ncsimt::atomic_word<double, unsigned long long>(a, v, [](double x, double y) { return x < y ? x : y; });
}
#define NC_SCOPED(NAME)                                                                       \
  template <class... A> inline auto NAME##_block(A... a) -> decltype(NAME(a...)) { return NAME(a...); } \
  template <class... A> inline auto NAME##_system(A... a) -> decltype(NAME(a...)) { return NAME(a...); }
NC_SCOPED(atomicAdd) NC_SCOPED(atomicSub) NC_SCOPED(atomicExch) NC_SCOPED(atomicMin)
NC_SCOPED(atomicMax) NC_SCOPED(atomicInc) NC_SCOPED(atomicDec) NC_SCOPED(atomicCAS)
NC_SCOPED(atomicAnd) NC_SCOPED(atomicOr) NC_SCOPED(atomicXor)
#undef NC_SCOPED

// ------------------------------------------------------------------------------------------------
// Synchronization
// ------------------------------------------------------------------------------------------------
namespace ncsimt {
void named_barrier(unsigned id, unsigned count);  // normcheck_runtime.h
}
// bar.sync id [, count]: the block's barrier; a count below the block's threads (a barrier of
// some warps only) is a launch failure naming it
inline void __barrier_sync(unsigned id) { ::ncsimt::named_barrier(id, 0); }
inline void __barrier_sync_count(unsigned id, unsigned cnt) { ::ncsimt::named_barrier(id, cnt); }
inline void __prof_trigger(int) {}
inline void __threadfence_cluster() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ------------------------------------------------------------------------------------------------
// Address spaces.  One address space here: a generic address converts to itself (inline PTX
// translated by normcheck reads any address as a generic pointer); shared means the block's
// dynamic shared memory and local the running thread's stack (static __shared__ variables are
// thread_local here and count as global: CPU_VS_GPU says so)
// ------------------------------------------------------------------------------------------------
namespace ncsimt {
bool in_dynamic_smem(const void* p);  // normcheck_runtime.h
bool in_own_stack(const void* p);
size_t shared_window_of(const void* p);  // the 32-bit shared window (normcheck_runtime.h)
void* shared_from_window(size_t w);
}  // namespace ncsimt
inline unsigned __isShared(const void* p) {
  return ::ncsimt::in_dynamic_smem(p) || ::ncsimt::shared_window_of(p) != (size_t)p;
}
inline unsigned __isCtaShared(const void* p) { return __isShared(p); }
inline unsigned __isClusterShared(const void* p) { return __isShared(p); }
inline unsigned __isLocal(const void* p) { return ::ncsimt::in_own_stack(p); }
inline unsigned __isConstant(const void*) { return 0; }
inline unsigned __isGridConstant(const void*) { return 0; }
inline unsigned __isGlobal(const void* p) { return !__isShared(p) && !__isLocal(p); }
inline size_t __cvta_generic_to_global(const void* p) { return (size_t)p; }
inline size_t __cvta_generic_to_shared(const void* p) { return ::ncsimt::shared_window_of(p); }
inline size_t __cvta_generic_to_constant(const void* p) { return (size_t)p; }
inline size_t __cvta_generic_to_local(const void* p) { return (size_t)p; }
inline size_t __cvta_generic_to_grid_constant(const void* p) { return (size_t)p; }
inline void* __cvta_global_to_generic(size_t a) { return (void*)a; }
inline void* __cvta_shared_to_generic(size_t a) { return ::ncsimt::shared_from_window(a); }
inline void* __cvta_constant_to_generic(size_t a) { return (void*)a; }
inline void* __cvta_local_to_generic(size_t a) { return (void*)a; }
inline void* __cvta_grid_constant_to_generic(size_t a) { return (void*)a; }

// ------------------------------------------------------------------------------------------------
// Clusters (sm_90) and programmatic dependent launch.  A cluster is one block here (the launch
// attribute that asks for more is recorded, not run); launches run one after the other, so a
// grid dependency is always satisfied.
// ------------------------------------------------------------------------------------------------
inline dim3 __clusterDim() { return dim3(1, 1, 1); }
inline unsigned __clusterDimIsSpecified() { return 0; }
inline dim3 __clusterGridDimInClusters() { return dim3(gridDim.x, gridDim.y, gridDim.z); }
inline dim3 __clusterIdx() { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
inline dim3 __clusterRelativeBlockIdx() { return dim3(0, 0, 0); }
inline unsigned __clusterRelativeBlockRank() { return 0; }
inline unsigned __clusterSizeInBlocks() { return 1; }
inline void __cluster_barrier_arrive() {}
inline void __cluster_barrier_arrive_relaxed() {}
inline void __cluster_barrier_wait() { __syncthreads(); }
inline void cudaGridDependencySynchronize() {}
inline void cudaTriggerProgrammaticLaunchCompletion() {}
