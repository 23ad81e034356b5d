// normcheck SIMT shim: run CUDA C kernels on a CPU, compiled by g++ from the very same source.
//
// Model.  Each CUDA thread is a fiber with its own stack (mmap'd, guard page below); a block's
// fibers run on one OS thread, in thread order, each until it reaches a sync point
// (__syncthreads, a warp collective) or returns.  Blocks are spread over worker OS threads, so
// `__shared__` variables are `static thread_local`.  A warp's 32 lanes exchange values only at
// their sync points: a collective completes when every live lane of its mask has arrived, and the
// last lane to arrive computes every lane's result.  A barrier that some live threads can never
// reach is a deadlock, reported with the block and the threads involved.
//
// Arithmetic is the host's IEEE arithmetic without FMA contraction (-ffp-contract=off): results
// equal an nvcc --fmad=false build except for the approximate intrinsics, which this shim
// evaluates more accurately than the GPU does (rsqrtf = 1/sqrtf, __expf = expf, __fdividef = /;
// documented in normcheck.backends.cpu.CPU_VS_GPU).  Denormals are kept, as on the GPU without
// -ftz.
//
// What this shim does not support fails at compile time (see the #error headers beside this one
// and the diagnostics normcheck adds to g++'s).
#pragma once
#ifndef NORMCHECK_SIMT_H
#define NORMCHECK_SIMT_H

#if !defined(__x86_64__)
#error "normcheck cpu backend: the SIMT shim's fiber switch is written for x86-64 only"
#endif

// NVIDIA's headers first, before the shim's macros (threadIdx, gridDim ...) exist and before
// __CUDACC__ / __CUDA_ARCH__ are defined: the runtime API's declarations (a kernel's host code
// may name them), and the fp16, bf16, fp8, fp6 and fp4 types with their host implementations
// (software conversions and arithmetic, which compute what the GPU's instructions do).  A user's
// later #include of any of them finds its include guard.
//
// A runtime-compiled (NVRTC) source is built with __CUDACC_RTC__ defined (-D__CUDACC_RTC__, as
// NVRTC defines it): NVIDIA's headers then skip their host half, which this host build needs,
// so the macro is hidden from them and from the shim, and is back for the user's code.
#ifdef __CUDACC_RTC__
#define NORMCHECK_RTC 1
#pragma push_macro("__CUDACC_RTC__")
#undef __CUDACC_RTC__
#endif
#include_next <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#if __has_include(<cuda_fp8.h>)
#include <cuda_fp8.h>
#endif
#if __has_include(<cuda_fp6.h>)
#include <cuda_fp6.h>
#endif
#if __has_include(<cuda_fp4.h>)
#include <cuda_fp4.h>
#endif

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <functional>  // visible to a kernel's file under nvcc 12 (Apex contrib relies on it)

// CUDA 12's signatures of runtime calls CUDA 13 changed, for host code written against CUDA 12
// (a norm file's helpers; no kernel calls them): the managed-memory hints took a device
// ordinal (cudaCpuDeviceId for the host) where CUDA 13 takes a cudaMemLocation.
#if defined(CUDART_VERSION) && CUDART_VERSION >= 13000
static inline cudaMemLocation normcheck_location_of(int device) {
  cudaMemLocation loc{};
  loc.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  loc.id = device == cudaCpuDeviceId ? 0 : device;
  return loc;
}
static inline cudaError_t cudaMemAdvise(const void* p, size_t n, enum cudaMemoryAdvise advice,
                                        int device) {
  return cudaMemAdvise(p, n, advice, normcheck_location_of(device));
}
static inline cudaError_t cudaMemPrefetchAsync(const void* p, size_t n, int device,
                                               cudaStream_t stream = 0) {
  return cudaMemPrefetchAsync(p, n, normcheck_location_of(device), 0, stream);
}
#endif

// No macro says "normcheck" to the user's code (a kernel sound only under test would test it):
// the shim's version is a constant of its own namespace (ncsimt_shim_version, the runtime's).
namespace ncsimt { static constexpr int SHIM_VERSION = 8; }

// ------------------------------------------------------------------------------------------------
// Present as nvcc's device compilation does, so code under `#ifdef __CUDACC__` or
// `#if __CUDA_ARCH__ >= 800` is the code a GPU runs: __CUDACC__, __NVCC__, the compiler's version
// equal to the CUDA headers' (CCCL checks that they agree) and __CUDA_ARCH__ from the
// architecture normcheck compiles for (NORMCHECK_CUDA_ARCH, from --arch; 900 by default).
// ------------------------------------------------------------------------------------------------
#ifndef NORMCHECK_CUDA_ARCH
#define NORMCHECK_CUDA_ARCH 900
#endif
#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
#ifndef __NVCC__
#define __NVCC__ 1
#endif
#ifndef __CUDACC_VER_MAJOR__
#define __CUDACC_VER_MAJOR__ NORMCHECK_CUDACC_VER_MAJOR
#define __CUDACC_VER_MINOR__ NORMCHECK_CUDACC_VER_MINOR
#define __CUDACC_VER_BUILD__ 0
#endif
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ NORMCHECK_CUDA_ARCH
#endif
#ifndef __CUDA_ARCH_LIST__
#define __CUDA_ARCH_LIST__ NORMCHECK_CUDA_ARCH
#endif
#ifndef __CUDACC_DEBUG__
#endif

// ------------------------------------------------------------------------------------------------
// CUDA keywords
// ------------------------------------------------------------------------------------------------
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __managed__
#undef __restrict__
#undef __grid_constant__
#undef __maxnreg__
#undef __local_maxnreg__
#undef __cluster_dims__
#undef __inline_hint__
#undef __no_return__
#undef __nv_pure__
// `__global__` is a marker normcheck.backends.cpu.translate removes after the preprocessor (it
// names the file's kernels first: a misspelt entry is told which there are)
#define __global__ __nc_global__
#define __device__
#define __host__
#define __grid_constant__
#define __maxnreg__(...)
#define __local_maxnreg__(...)
#define __cluster_dims__(...)
#define __block_size__(...)
#define __inline_hint__
#define __no_return__ __attribute__((noreturn))
#define __nv_pure__
// `__shared__` is a marker that normcheck.backends.cpu.translate turns into `static thread_local`
// (blocks run on several OS threads) or, for `extern __shared__ T a[];`, into the block's
// dynamic shared memory -- after the preprocessor, so in every included file.
#define __shared__ __nc_shared__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
// __noinline__ is no macro: libstdc++ spells __attribute__((__noinline__)), which a macro would
// break; normcheck.backends.cpu.translate turns a bare __noinline__ into the attribute
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __managed__ \
  _Pragma("GCC error \"normcheck cpu backend: __managed__ memory is not supported\"")
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif

namespace ncsimt {

// ------------------------------------------------------------------------------------------------
// Runtime state (defined in normcheck_runtime.h, which the generated wrapper includes last)
// ------------------------------------------------------------------------------------------------
enum { RUNNABLE = 0, AT_BARRIER = 1, AT_WARP = 2, DONE = 3 };
enum { OP_SYNC = 0, OP_SHFL, OP_SHFL_UP, OP_SHFL_DOWN, OP_SHFL_XOR, OP_BALLOT, OP_ANY, OP_ALL,
       OP_REDUCE_ADD, OP_REDUCE_MIN, OP_REDUCE_MAX, OP_REDUCE_AND, OP_REDUCE_OR, OP_REDUCE_XOR,
       OP_MATCH_ANY, OP_SHFL_PTX };

struct Fiber {
  void* sp;             // saved stack pointer
  uint3 tid;            // threadIdx
  int linear;           // linear thread index in the block
  int lane, warp;
  int state;
  // warp collective in progress
  int op, param, width, param2;
  unsigned mask;
  int pred;
  alignas(16) unsigned char deposit[16];
  alignas(16) unsigned char result[16];
  unsigned result_u;    // ballot / vote results
  // __syncthreads_count/and/or
  int bar_pred;
  uintptr_t wait_at;    // the barrier's caller (a deadlock's line), an address in the module
  int wait_line;        // the barrier's source line and file as written (0, null: not known)
  const char* wait_file;
  char* stack;
  size_t stack_size;
  // the hazard run's vector clock of this lane's warp (normcheck_hazards.h): entry l is what
  // this lane has seen of lane l's accesses through warp collectives
  uint32_t vc[32];
  // the hazard run: 1 + the barrier interval of this thread's last shared-memory access (0:
  // none) -- a thread that exits after one is not a thread that left before the barrier
  uint32_t smem_bar;
};

struct BlockCtx;
// The runtime's own per-OS-thread state uses the initial-exec TLS model (a plain %fs-relative
// load, not a __tls_get_addr call per threadIdx); the worker process reserves static TLS for it
// (GLIBC_TUNABLES=glibc.rtld.optional_static_tls).  __shared__ variables stay dynamic TLS.
#define NC_TLS thread_local __attribute__((tls_model("initial-exec")))
// normcheck's own runtime code, never instrumented in the hazard build (normcheck_hazards.h)
#define NC_NOTSAN __attribute__((no_sanitize_thread))
extern NC_TLS Fiber* tls_cur;
extern NC_TLS BlockCtx* tls_block;
extern NC_TLS unsigned char* tls_dyn_smem;
extern NC_TLS unsigned long long tls_dyn_smem_size;

void yield_barrier(int pred, int line = 0, const char* file = nullptr);
[[noreturn]] void unsupported(const char* detail);
[[noreturn]] void unsupported_ptx(int index);
int barrier_result(int kind);
void warp_collective(Fiber* f);
unsigned warp_alive_mask();

}  // namespace ncsimt

// threadIdx, blockIdx, blockDim and gridDim are variables (per OS thread; threadIdx set at every
// switch to a fiber), as the CUDA headers declare them -- not macros, so a parameter or a member
// of the same name in any header (cuSPARSE's blockDim, cudaLaunchConfig_t's gridDim) is itself
extern NC_TLS uint3 threadIdx;
extern NC_TLS uint3 blockIdx;
extern NC_TLS dim3 blockDim;
extern NC_TLS dim3 gridDim;
static constexpr int warpSize = 32;

namespace ncsimt {
// Dynamic shared memory: normcheck rewrites `extern __shared__ T name[];` into a pointer to the
// block's buffer (its size is the launch's shared_mem argument).
inline void* dynamic_smem() { return tls_dyn_smem; }

// Static shared memory starts every block as NaN bytes, as dynamic shared memory does (a GPU
// leaves there whatever the SM held; zeros -- what a thread_local starts as -- would pass a kernel
// that reads slots it never wrote).  normcheck.backends.cpu.translate follows each function-scope
// `__shared__` declaration with a SharedPoison of it: constructed when a thread of the first
// block on this OS thread reaches the declaration, it poisons the variable and registers it;
// the runtime poisons every registered variable again before each later block.
// Each pass over a declaration marks its variable reached by the launch under way on this OS
// thread (``launch``: the thread's launch count then): a launch's static total counts only what
// its own kernel declared, not the variables another kernel of the module left registered on
// the thread (a file's kernels share one build).
struct SharedRegion {
  void* p;
  unsigned long size;
  unsigned long long launch;
};
std::vector<SharedRegion>& shared_regions();  // this OS thread's, normcheck_runtime.h
unsigned long long shared_launch();            // this OS thread's launch count, ditto
unsigned char undefined_fill();                // the launch's fill byte (0xFF), ditto
void register_shared(void* p, unsigned long size, const char* name);  // ditto
struct SharedPoison {
  size_t index;
  SharedPoison(void* p, unsigned long size, const char* name = nullptr) {
    std::memset(p, undefined_fill(), size);
    register_shared(p, size, name);
    index = shared_regions().size() - 1;
  }
  void reached() const { shared_regions()[index].launch = shared_launch(); }
};

// Launches from host code.  A spec may name a host function as the entry (`host = true`: what a
// project's own launcher does, grid and block included); its `k<<<grid, block, smem, stream>>>(a)`
// (rewritten by normcheck.backends.cpu.translate into host_launch(k, grid, block, ...)(a)) and
// cudaLaunchKernelEx(&config, k, a...) launches run here, one after the other, with the outer
// launch's schedule, workers and guarded buffers.  A launch that fails makes the host entry fail
// with its error.
typedef void (*Thunk)(void**);
// ``fn``: the kernel launched (the key of its cudaFuncSetAttribute values), or null where the
// launch names it through an expression (a lambda stands for it)
int run_nested(Thunk thunk, void** args, dim3 grid, dim3 block, unsigned long long smem,
               const void* fn);
template <class F, class Tup>
void tuple_thunk(void** args) {
  std::apply(*reinterpret_cast<F*>(args[0]), *reinterpret_cast<Tup*>(args[1]));
}
template <class... P, class... A>
inline int launch_from_host(void (*k)(P...), dim3 g, dim3 b, unsigned long long smem, A&&... a) {
  typedef void (*F)(P...);
  std::tuple<typename std::decay<P>::type...> tup(std::forward<A>(a)...);
  F f = k;
  void* argv[2] = {(void*)&f, (void*)&tup};
  return run_nested(&tuple_thunk<F, decltype(tup)>, argv, g, b, smem, (const void*)k);
}
template <class K>
struct HostLaunch {
  K k;
  dim3 g, b;
  unsigned long long smem;
  template <class... A>
  void operator()(A&&... a) const { launch_from_host(k, g, b, smem, std::forward<A>(a)...); }
};
template <class K, class G, class B>
inline HostLaunch<K*> host_launch(K* k, G g, B b, unsigned long long smem = 0, cudaStream_t = 0) {
  return HostLaunch<K*>{k, dim3(g), dim3(b), smem};
}
template <class K, class G, class B, class S>
inline HostLaunch<K*> host_launch(K* k, G g, B b, unsigned long long smem, S) {
  return HostLaunch<K*>{k, dim3(g), dim3(b), smem};
}
// k<<<cfg>>>(a) of any kernel expression, a template whose arguments the call deduces included:
// the launch calls a lambda that calls k, so overload resolution and deduction see the
// arguments' types, as nvcc's do.
template <class L>
struct HostLaunchAny {
  L l;
  dim3 g, b;
  unsigned long long smem;
  template <class... A>
  void operator()(A&&... a) const {
    std::tuple<typename std::decay<A>::type...> tup(std::forward<A>(a)...);
    L f = l;
    void* argv[2] = {(void*)&f, (void*)&tup};
    run_nested(&tuple_thunk<L, decltype(tup)>, argv, g, b, smem, nullptr);
  }
};
template <class L, class G, class B>
inline HostLaunchAny<L> host_launch_any(L l, G g, B b, unsigned long long smem = 0,
                                        cudaStream_t = 0) {
  return HostLaunchAny<L>{l, dim3(g), dim3(b), smem};
}
template <class L, class G, class B, class S>
inline HostLaunchAny<L> host_launch_any(L l, G g, B b, unsigned long long smem, S) {
  return HostLaunchAny<L>{l, dim3(g), dim3(b), smem};
}
template <class... P, class... A>
inline cudaError_t launch_ex(const cudaLaunchConfig_t* cfg, void (*k)(P...), A&&... a) {
  return launch_from_host(k, cfg->gridDim, cfg->blockDim, cfg->dynamicSmemBytes, std::forward<A>(a)...)
             ? cudaErrorLaunchFailure : cudaSuccess;
}
template <class... P, class... A>
inline cudaError_t launch_ex(const cudaLaunchConfig_t& cfg, void (*k)(P...), A&&... a) {
  return launch_ex(&cfg, k, std::forward<A>(a)...);
}
template <class... P, size_t... I>
inline int launch_void_args(void (*k)(P...), dim3 g, dim3 b, void** args, unsigned long long smem,
                            std::index_sequence<I...>) {
  return launch_from_host(k, g, b, smem, *reinterpret_cast<typename std::decay<P>::type*>(args[I])...);
}
}  // namespace ncsimt

// The runtime API's C++ templates (cuda_runtime.h declares them only under __CUDACC__, which is
// not defined while it is read): a kernel's function, typed.
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* func, enum cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute((const void*)func, attr, value);
}
template <class T>
inline cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, T* entry) {
  return ::cudaFuncGetAttributes(attr, (const void*)entry);
}
template <class T>
inline cudaError_t cudaFuncSetCacheConfig(T* func, enum cudaFuncCache cache) {
  return ::cudaFuncSetCacheConfig((const void*)func, cache);
}
// cudaLaunchKernel with a typed kernel: its void* arguments unpacked as its parameters' types
template <class... P>
inline cudaError_t cudaLaunchKernel(void (*func)(P...), dim3 g, dim3 b, void** args, size_t smem = 0,
                                    cudaStream_t = 0) {
  return ::ncsimt::launch_void_args(func, g, b, args, smem, std::index_sequence_for<P...>{})
             ? cudaErrorLaunchFailure : cudaSuccess;
}
// cudaLaunchCooperativeKernel alike: every block of the grid runs (the cpu backend runs them
// all; a grid.sync() is not modelled)
template <class... P>
inline cudaError_t cudaLaunchCooperativeKernel(void (*func)(P...), dim3 g, dim3 b, void** args,
                                               size_t smem = 0, cudaStream_t = 0) {
  return ::ncsimt::launch_void_args(func, g, b, args, smem, std::index_sequence_for<P...>{})
             ? cudaErrorLaunchFailure : cudaSuccess;
}

namespace ncsimt {
}  // namespace ncsimt

// ------------------------------------------------------------------------------------------------
// Synchronisation
// ------------------------------------------------------------------------------------------------
// Each barrier knows the source line it was written at (GCC's __builtin_LINE/FILE as default
// arguments: the call's, whatever the compiler duplicates or merges), so threads waiting at two
// different barriers are told apart (normcheck_runtime.h: barrier_divergence).
#define NC_AT int line = __builtin_LINE(), const char* file = __builtin_FILE()
inline void __syncthreads(NC_AT) { ::ncsimt::yield_barrier(0, line, file); }
inline int __syncthreads_count(int p, NC_AT) { ::ncsimt::yield_barrier(p != 0, line, file); return ::ncsimt::barrier_result(0); }
inline int __syncthreads_and(int p, NC_AT) { ::ncsimt::yield_barrier(p != 0, line, file); return ::ncsimt::barrier_result(1); }
inline int __syncthreads_or(int p, NC_AT) { ::ncsimt::yield_barrier(p != 0, line, file); return ::ncsimt::barrier_result(2); }

namespace ncsimt {
template <class T>
inline void deposit(Fiber* f, const T& v) {
  static_assert(sizeof(T) <= 16, "normcheck cpu backend: warp shuffles of types above 16 bytes are not supported");
  // a shuffle moves bits: __half2 and __nv_bfloat162 (a documented overload) have copy
  // constructors in the host headers, but their bits are their value
  static_assert(std::is_trivially_copyable<T>::value || std::is_standard_layout<T>::value,
                "normcheck cpu backend: shuffled types must be plain data (trivially copyable or "
                "standard layout)");
  std::memcpy(f->deposit, &v, sizeof(T));
}
template <class T>
inline T collect(Fiber* f) {
  T r;
  std::memcpy(&r, f->result, sizeof(T));
  return r;
}
template <class T>
inline T shuffle(unsigned mask, T var, int op, int param, int width) {
  Fiber* f = tls_cur;
  deposit(f, var);
  f->op = op;
  f->param = param;
  f->width = width;
  f->mask = mask;
  warp_collective(f);
  return collect<T>(f);
}
inline unsigned vote(unsigned mask, int pred, int op) {
  Fiber* f = tls_cur;
  f->op = op;
  f->mask = mask;
  f->pred = pred != 0;
  warp_collective(f);
  return f->result_u;
}
template <class T>
inline T reduce_op(unsigned mask, T v, int op) {
  Fiber* f = tls_cur;
  deposit(f, v);
  f->op = op;
  f->mask = mask;
  f->width = (int)sizeof(T) | (std::is_signed<T>::value ? 0x100 : 0);
  warp_collective(f);
  return collect<T>(f);
}
}  // namespace ncsimt

inline void __syncwarp(unsigned mask = 0xffffffffu) { ::ncsimt::vote(mask, 0, ::ncsimt::OP_SYNC); }
template <class T> inline T __shfl_sync(unsigned mask, T var, int src, int width = 32) {
  return ::ncsimt::shuffle(mask, var, ::ncsimt::OP_SHFL, src, width);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return ::ncsimt::shuffle(mask, var, ::ncsimt::OP_SHFL_UP, (int)delta, width);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return ::ncsimt::shuffle(mask, var, ::ncsimt::OP_SHFL_DOWN, (int)delta, width);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  return ::ncsimt::shuffle(mask, var, ::ncsimt::OP_SHFL_XOR, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return ::ncsimt::vote(mask, pred, ::ncsimt::OP_BALLOT); }
inline int __any_sync(unsigned mask, int pred) { return (int)::ncsimt::vote(mask, pred, ::ncsimt::OP_ANY); }
inline int __all_sync(unsigned mask, int pred) { return (int)::ncsimt::vote(mask, pred, ::ncsimt::OP_ALL); }
inline unsigned __activemask() { return ::ncsimt::warp_alive_mask(); }
inline unsigned __reduce_add_sync(unsigned mask, unsigned v) { return ::ncsimt::reduce_op(mask, v, ::ncsimt::OP_REDUCE_ADD); }
inline int __reduce_add_sync(unsigned mask, int v) { return ::ncsimt::reduce_op(mask, v, ::ncsimt::OP_REDUCE_ADD); }
inline unsigned __reduce_min_sync(unsigned mask, unsigned v) { return ::ncsimt::reduce_op(mask, v, ::ncsimt::OP_REDUCE_MIN); }
inline int __reduce_min_sync(unsigned mask, int v) { return ::ncsimt::reduce_op(mask, v, ::ncsimt::OP_REDUCE_MIN); }
inline unsigned __reduce_max_sync(unsigned mask, unsigned v) { return ::ncsimt::reduce_op(mask, v, ::ncsimt::OP_REDUCE_MAX); }
inline int __reduce_max_sync(unsigned mask, int v) { return ::ncsimt::reduce_op(mask, v, ::ncsimt::OP_REDUCE_MAX); }
inline unsigned __reduce_and_sync(unsigned mask, unsigned v) { return ::ncsimt::reduce_op(mask, v, ::ncsimt::OP_REDUCE_AND); }
inline unsigned __reduce_or_sync(unsigned mask, unsigned v) { return ::ncsimt::reduce_op(mask, v, ::ncsimt::OP_REDUCE_OR); }
inline unsigned __reduce_xor_sync(unsigned mask, unsigned v) { return ::ncsimt::reduce_op(mask, v, ::ncsimt::OP_REDUCE_XOR); }
template <class T> inline unsigned __match_any_sync(unsigned mask, T v) {
  static_assert(sizeof(T) <= 8, "__match_any_sync: 32- or 64-bit values");
  ::ncsimt::Fiber* f = ::ncsimt::tls_cur;
  unsigned long long w = 0;
  std::memcpy(&w, &v, sizeof(T));
  ::ncsimt::deposit(f, w);
  f->op = ::ncsimt::OP_MATCH_ANY;
  f->mask = mask;
  ::ncsimt::warp_collective(f);
  return f->result_u;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __nanosleep(unsigned) {}
inline long long clock64() { unsigned lo, hi; __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi)); return ((long long)hi << 32) | lo; }
// CUDA's clock(): the user's calls are renamed to this by the translation (translate.py's
// _device_clock) -- a macro named clock broke every <time.h> included after the shim
namespace ncsimt { inline int clock32() { return (int)clock64(); } }
inline void __trap() { __builtin_trap(); }
inline void __brkpt() { __builtin_trap(); }
inline unsigned __lanemask_lt() { return (1u << ::ncsimt::tls_cur->lane) - 1u; }

// ------------------------------------------------------------------------------------------------
// Atomics (blocks run on several OS threads: real atomics)
// ------------------------------------------------------------------------------------------------
#define NC_ATOMIC_INT(T)                                                                         \
  inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }          \
  inline T atomicSub(T* a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }          \
  inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }        \
  inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); }          \
  inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }            \
  inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); }          \
  inline T atomicCAS(T* a, T cmp, T v) {                                                         \
    __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);          \
    return cmp;                                                                                  \
  }                                                                                              \
  inline T atomicMax(T* a, T v) {                                                                \
    T old = __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                \
    while (old < v && !__atomic_compare_exchange_n(a, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} \
    return old;                                                                                  \
  }                                                                                              \
  inline T atomicMin(T* a, T v) {                                                                \
    T old = __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                \
    while (old > v && !__atomic_compare_exchange_n(a, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} \
    return old;                                                                                  \
  }
NC_ATOMIC_INT(int)
NC_ATOMIC_INT(unsigned int)
NC_ATOMIC_INT(unsigned long long)
NC_ATOMIC_INT(long long)
#undef NC_ATOMIC_INT
inline unsigned short atomicCAS(unsigned short* a, unsigned short cmp, unsigned short v) {
  __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
inline unsigned atomicInc(unsigned* a, unsigned lim) {
  unsigned old = __atomic_load_n(a, __ATOMIC_SEQ_CST), nv;
  do { nv = old >= lim ? 0 : old + 1; } while (!__atomic_compare_exchange_n(a, &old, nv, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return old;
}
inline unsigned atomicDec(unsigned* a, unsigned lim) {
  unsigned old = __atomic_load_n(a, __ATOMIC_SEQ_CST), nv;
  do { nv = (old == 0 || old > lim) ? lim : old - 1; } while (!__atomic_compare_exchange_n(a, &old, nv, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return old;
}
namespace ncsimt {
template <class F, class U, class Op>
inline F atomic_float(F* a, F v, Op op) {
  static_assert(sizeof(F) == sizeof(U), "size");
  U* ai = reinterpret_cast<U*>(a);
  U old = __atomic_load_n(ai, __ATOMIC_SEQ_CST), nv;
  F of;
  do {
    std::memcpy(&of, &old, sizeof(F));
    F r = op(of, v);
    std::memcpy(&nv, &r, sizeof(F));
  } while (!__atomic_compare_exchange_n(ai, &old, nv, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  std::memcpy(&of, &old, sizeof(F));
  return of;
}
}  // namespace ncsimt
inline float atomicAdd(float* a, float v) { return ::ncsimt::atomic_float<float, unsigned>(a, v, [](float x, float y) { return x + y; }); }
inline double atomicAdd(double* a, double v) { return ::ncsimt::atomic_float<double, unsigned long long>(a, v, [](double x, double y) { return x + y; }); }
inline float atomicExch(float* a, float v) { return ::ncsimt::atomic_float<float, unsigned>(a, v, [](float, float y) { return y; }); }
inline float atomicMax(float* a, float v) { return ::ncsimt::atomic_float<float, unsigned>(a, v, [](float x, float y) { return x > y ? x : y; }); }
inline float atomicMin(float* a, float v) { return ::ncsimt::atomic_float<float, unsigned>(a, v, [](float x, float y) { return x < y ? x : y; }); }
inline __half atomicAdd(__half* a, __half v) { return ::ncsimt::atomic_float<__half, unsigned short>(a, v, [](__half x, __half y) { return __hadd(x, y); }); }
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, __nv_bfloat16 v) { return ::ncsimt::atomic_float<__nv_bfloat16, unsigned short>(a, v, [](__nv_bfloat16 x, __nv_bfloat16 y) { return __hadd(x, y); }); }

// ------------------------------------------------------------------------------------------------
// Math.  Correctly rounded where CUDA's are; see the header comment for the approximate ones.
// ------------------------------------------------------------------------------------------------
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }  // GPU: approximate (<= 2 ulp)
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
namespace ncsimt {
// odd integer M and exponent e with v = M * 2^e (v > 0, finite)
inline void odd_mantissa(double v, unsigned long long& M, int& e) {
  int em;
  double fm = std::frexp(v, &em);
  M = (unsigned long long)std::ldexp(fm, 53);
  e = em - 53;
  while ((M & 1ull) == 0) { M >>= 1; e++; }
}
// sign of m*m*x - 1, exactly (m has <= 26 significant bits, x <= 24: the product fits 128 bits)
inline int cmp_square_times(double m, float x) {
  unsigned long long M, X;
  int a, b;
  odd_mantissa(m, M, a);
  odd_mantissa((double)x, X, b);
  unsigned __int128 P = (unsigned __int128)M * M * X;
  int e = 2 * a + b;
  if (e >= 0) return (P == 1 && e == 0) ? 0 : 1;
  if (-e >= 127) return -1;
  unsigned __int128 one = (unsigned __int128)1 << (-e);
  return P > one ? 1 : (P == one ? 0 : -1);
}
// Correctly rounded 1/sqrt(x) in float: a candidate from double arithmetic, then the two
// neighbouring midpoints compared with the exact value (1/sqrt(x) > m  <=>  m^2 x < 1).
inline float rsqrt_rn(float x) {
  if (std::isnan(x) || x < 0.0f) return std::numeric_limits<float>::quiet_NaN();
  if (x == 0.0f) return std::copysign(std::numeric_limits<float>::infinity(), x);
  if (std::isinf(x)) return 0.0f;
  double rd = 1.0 / std::sqrt((double)x);  // within 2^-52 relative of the exact value
  float r = (float)rd;
  // settled unless rd lies within 2^-50·rd of a float rounding midpoint
  double half_ulp = std::ldexp(1.0, std::ilogb(r) - 24);
  if (std::fabs(rd - (double)r) < half_ulp - std::ldexp(rd, -50)) return r;
  float up = std::nextafter(r, std::numeric_limits<float>::infinity());
  float dn = std::nextafter(r, 0.0f);
  if (cmp_square_times(((double)r + (double)up) / 2, x) < 0) return up;
  if (cmp_square_times(((double)r + (double)dn) / 2, x) > 0) return dn;
  return r;
}
}  // namespace ncsimt
inline float __frsqrt_rn(float x) { return ::ncsimt::rsqrt_rn(x); }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
inline void __builtin_assume(bool) {}
using std::isnan;
using std::isinf;
using std::isfinite;
using std::signbit;

#include "normcheck_math.h"
#include "normcheck_device.h"
#include "normcheck_ptx.h"

#ifdef NORMCHECK_RTC
#pragma pop_macro("__CUDACC_RTC__")
#endif
#endif  // NORMCHECK_SIMT_H
