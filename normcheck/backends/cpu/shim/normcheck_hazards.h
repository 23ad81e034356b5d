// normcheck's hazard checks: what compute-sanitizer's racecheck and memcheck report about shared
// memory, decided by happens-before, not by the order the emulator happened to run threads in.
// Included by normcheck_runtime.h (after the block state it reads).
//
// The instrumented build (NORMCHECK_HAZARDS: the cpu backend's hazard run) compiles the kernel's
// file with GCC's -fsanitize=thread instrumentation, which calls __tsan_readN / __tsan_writeN
// (N = 1, 2, 4, 8, 16) before every load and store of the kernel's code with the address; libtsan
// is never linked -- the calls land here.  An address outside shared memory returns at once.
//
// Shared memory: the block's dynamic shared memory (exactly the launch's byte count) and every
// function-scope static __shared__ variable (registered as a thread first reaches its
// declaration: normcheck_simt.h's SharedPoison, with its name).  Each byte has a shadow cell: the
// last write and the last two reads of it (a read by another warp than the last reader's kept),
// each with its thread, the barrier interval and the thread's warp clock, and the access's pc.
//
// Happens-before, as racecheck and the CUDA memory model give it within a block:
//  * a block barrier (__syncthreads and its _count/_and/_or, bar.sync) orders everything before
//    it before everything after it: each barrier opens a new interval, and accesses of two
//    intervals never race;
//  * within an interval, threads of two warps are unordered;
//  * lanes of one warp are unordered too (independent thread scheduling, since Volta) unless a
//    warp-synchronous operation of both -- __syncwarp, a __shfl*_sync, a vote, a match, a
//    __reduce_*_sync: every collective with its mask -- comes between: each lane keeps a vector
//    clock of its warp's 32 lanes, joined at every collective it takes part in;
//  * atomics are not recorded (two atomics never race; an atomic beside plain accesses is not
//    judged), and a thread is ordered with itself.
// Two accesses of one byte from different threads, at least one a write, unordered: a race,
// reported with its kind (read-after-write, write-after-read, write-after-write), both threads,
// both lines, the array and the element.  The first of a launch fails it -- but for two writes
// of the same bytes (every lane of a warp storing the warp's total), which leave the same memory
// whichever comes first: benign, as racecheck rates it.
//
// Bounds: an access that starts in dynamic shared memory's guard (up to 4 KiB past its end or
// before its start) is out of bounds at its line, exactly at the launch's byte count (the plain
// build finds larger overruns at the guard pages around the allocation); a static array indexed
// past its declared size is caught by -fsanitize=bounds (the handler below).
#pragma once

namespace ncsimt {


struct HzRec {      // one access
  uint32_t bar;     // the barrier interval it was made in (0: none yet)
  uint32_t ep;      // the thread's own warp clock then
  uint32_t pc;      // the instruction after the access, as an offset in this module
  uint16_t tid;     // the thread, linear in its block
  uint8_t size;     // bytes
  uint8_t kind;     // 0 none, 1 read, 2 write
};
struct HzCell { HzRec w, r1, r2; };
struct HzRegion {
  uintptr_t lo;
  size_t size;
  HzCell* cells;     // one a byte (calloc'd: all empty)
  size_t ncells;
  const char* name;  // a static variable's; null: dynamic shared memory
};

// Everything the hooks read is plain data behind one pointer of initial-exec TLS: a thread_local
// object with a constructor is reached through a wrapper function, which the instrumentation
// would instrument -- and the hooks must call nothing instrumented.  `hz_in` is set while
// normcheck's own code runs (the hooks return at once then).
// A write-after-write found as the second write begins: judged once it is done (the next hook
// of the OS thread, or the block's end) -- two threads storing the same bytes, as every lane of
// a warp storing the warp's total does, leave the same memory in either order: benign (racecheck
// rates it a warning at most), not a failure.
struct HzPending {
  const HzRegion* R;
  size_t off;
  HzRec me, other;
  uintptr_t addr;
  int size;
  unsigned char before[16];  // the bytes the earlier write left
};

struct HzState {
  HzPending pend[8];
  int npend;
  HzRegion dyn;
  HzRegion* statics;  // parallel with shared_regions()
  int nstatics, cap;
  uintptr_t lo, hi;   // the static regions' span
  char first[1024];   // this OS thread's first hazard of the block ("" none)
};

NC_TLS int hz_on = 0;  // this launch checks hazards (LaunchParams::hazards)
NC_TLS uint32_t hz_bar = 1;  // the current barrier interval of this OS thread's block
NC_TLS HzState* hz_state = nullptr;
NC_TLS int hz_in = 0;
// The span every checked address lies in (dynamic shared memory with its margins, the static
// variables): the hooks' one test before anything else; 0 wide while no hazard run is on
NC_TLS uintptr_t hz_span_lo = 0;
NC_TLS uintptr_t hz_span_len = 0;

static constexpr size_t HZ_GUARD = 4096;  // dynamic shared memory's checked margin

NC_NOTSAN static HzState* hz_get() {
  if (!hz_state) {
    hz_state = (HzState*)calloc(1, sizeof(HzState));
    hz_state->lo = ~(uintptr_t)0;
  }
  return hz_state;
}

NC_NOTSAN static void hz_cells_for(HzRegion* r) {
  if (r->ncells == r->size) return;
  free(r->cells);
  r->cells = (HzCell*)calloc(r->size ? r->size : 1, sizeof(HzCell));
  r->ncells = r->cells ? r->size : 0;
}

// The hooks' span: dynamic shared memory with its checked margins and the static variables.
NC_NOTSAN static void hz_span() {
  HzState* st = hz_state;
  if (!hz_on || !st) {
    hz_span_lo = hz_span_len = 0;
    return;
  }
  uintptr_t lo = st->lo, hi = st->hi;
  if (st->dyn.lo) {
    const uintptr_t dlo = st->dyn.lo - HZ_GUARD, dhi = st->dyn.lo + st->dyn.size + HZ_GUARD;
    if (dlo < lo) lo = dlo;
    if (dhi > hi) hi = dhi;
  }
  hz_span_lo = lo;
  hz_span_len = hi > lo ? hi - lo : 0;
}

// Each shared variable has a name the translation gives it (SharedPoison's third argument).
NC_NOTSAN static void hz_register(void* p, unsigned long size, const char* name) {
  hz_in++;
  HzState* st = hz_get();
  if (st->nstatics == st->cap) {
    st->cap = st->cap ? 2 * st->cap : 8;
    st->statics = (HzRegion*)realloc(st->statics, (size_t)st->cap * sizeof(HzRegion));
  }
  HzRegion* r = &st->statics[st->nstatics++];
  memset(r, 0, sizeof *r);
  r->lo = (uintptr_t)p;
  r->size = size;
  r->name = name;
  if (hz_on) hz_cells_for(r);
  if ((uintptr_t)p < st->lo) st->lo = (uintptr_t)p;
  if ((uintptr_t)p + size > st->hi) st->hi = (uintptr_t)p + size;
  hz_span();
  hz_in--;
}

// A new block: a new interval (the fibers' clocks start over: run_blocks).
NC_NOTSAN static void hz_block_start(void* dyn, unsigned long long size) {
  ++hz_bar;
  if (!hz_on) return;
  hz_in++;
  HzState* st = hz_get();
  st->dyn.lo = (uintptr_t)dyn;
  st->dyn.size = (size_t)size;
  hz_cells_for(&st->dyn);
  for (int i = 0; i < st->nstatics; ++i) hz_cells_for(&st->statics[i]);
  st->first[0] = 0;
  hz_span();
  hz_in--;
}

NC_NOTSAN static void hz_barrier() { ++hz_bar; }

// Every collective of lanes `need` of a warp: the vector clocks joined, each lane's own entry
// then advanced (what a lane did before the collective is seen by the others after it).
NC_NOTSAN static void hz_collective(Fiber* base, unsigned need) {
  if (!hz_on) return;
  uint32_t j[32];
  for (int k = 0; k < 32; ++k) j[k] = 0;
  for (int l = 0; l < 32; ++l)
    if (need >> l & 1)
      for (int k = 0; k < 32; ++k)
        if (base[l].vc[k] > j[k]) j[k] = base[l].vc[k];
  for (int l = 0; l < 32; ++l)
    if (need >> l & 1) {
      for (int k = 0; k < 32; ++k) base[l].vc[k] = j[k];
      base[l].vc[l] += 1;
    }
}

NC_NOTSAN static void hz_thread_name(char* buf, size_t n, int t) {
  const unsigned bx = ::blockDim.x ? ::blockDim.x : 1, by = ::blockDim.y ? ::blockDim.y : 1;
  snprintf(buf, n, "(%u,%u,%u)", (unsigned)t % bx, ((unsigned)t / bx) % by,
           (unsigned)t / (bx * by));
}

NC_NOTSAN static void hz_report(const HzRegion& R, size_t off, const HzRec& me,
                                const HzRec& other) {
  HzState* st = hz_state;
  if (st->first[0]) return;
  const char* what = me.kind == 1 ? "read-after-write"
                     : other.kind == 1 ? "write-after-read" : "write-after-write";
  char a[48], b[48], where[200];
  hz_thread_name(a, sizeof a, me.tid);
  hz_thread_name(b, sizeof b, other.tid);
  if (R.name)
    snprintf(where, sizeof where, "`%s` (static __shared__, %zu bytes), element %zu (byte %zu)",
             R.name, R.size, off / (me.size ? me.size : 1), off);
  else
    snprintf(where, sizeof where, "dynamic shared memory (%zu bytes), byte %zu", R.size, off);
  const bool warp = (me.tid >> 5) == (other.tid >> 5);
  snprintf(st->first, sizeof st->first,
           "race (%s) in block (%u,%u,%u) on %s: thread %s (warp %d) %s it [pc 0x%x] and thread "
           "%s (warp %d) %s it [pc 0x%x] in one barrier interval, unordered -- %s",
           what, ::blockIdx.x, ::blockIdx.y, ::blockIdx.z, where, b, other.tid >> 5,
           other.kind == 2 ? "writes" : "reads", other.pc, a, me.tid >> 5,
           me.kind == 2 ? "writes" : "reads", me.pc,
           warp ? "the same warp, with no __syncwarp or warp collective of both lanes between "
                  "them (the lanes of a warp are unordered since Volta)"
                : "two warps, with no __syncthreads() between them (only a block barrier "
                  "orders two warps)");
}

// An access that starts or ends outside dynamic shared memory, within its checked margin: out
// of bounds at its line (a crash report, as an array's).
[[noreturn]] NC_NOTSAN static void hz_out_of_bounds(const HzRegion& R, uintptr_t a, int size,
                                                    int write, uintptr_t ret) {
  Out o;
  o.put("kind=out_of_bounds");
  o.put(write ? " access=write" : " access=read");
  o.put(" shared=dynamic");
  if (a < R.lo) o.kv("before_start_bytes", (long long)(R.lo - a));
  else o.kv("elem_offset_bytes", (long long)(a - R.lo));
  o.kv("bytes", size);
  o.kv("size_bytes", (long long)R.size);
  put_return(o, ret);
  where(o);
  finish(o);
}

// The pending writes-after-writes judged: a race where the second write changed the bytes.
NC_NOTSAN static void hz_resolve() {
  HzState* st = hz_state;
  for (int i = 0; i < st->npend; ++i) {
    const HzPending& p = st->pend[i];
    if (memcmp((const void*)p.addr, p.before, (size_t)p.size) != 0)
      hz_report(*p.R, p.off, p.me, p.other);
  }
  st->npend = 0;
}

// The first hazard this OS thread found in the block it ran, taken (the launch fails with it).
NC_NOTSAN static std::string hz_take() {
  if (hz_state && hz_state->npend) hz_resolve();
  if (!hz_state || !hz_state->first[0]) return std::string();
  hz_in++;
  std::string s(hz_state->first);
  hz_state->first[0] = 0;
  hz_in--;
  return s;
}

NC_NOTSAN static inline bool hz_unordered(const HzRec& r, const Fiber* f) {
  if (r.kind == 0 || r.bar != hz_bar || r.tid == f->linear) return false;
  if ((r.tid >> 5) != f->warp) return true;
  return r.ep > f->vc[r.tid & 31];
}

NC_NOTSAN static void hz_cells(HzRegion& R, size_t off, int size, int write, uintptr_t ret) {
  Fiber* f = tls_cur;
  f->smem_bar = hz_bar + 1;
  HzRec me;
  me.bar = hz_bar;
  me.ep = f->vc[f->lane];
  me.pc = (uint32_t)(ret - 1 - g_mod_lo);
  me.tid = (uint16_t)f->linear;
  me.size = (uint8_t)size;
  me.kind = write ? 2 : 1;
  const int w = f->warp;
  bool pending = false;
  for (int i = 0; i < size && off + i < R.ncells; ++i) {
    HzCell& c = R.cells[off + i];
    if (hz_unordered(c.w, f)) {
      if (!write) {
        hz_report(R, off, me, c.w);
      } else if (!pending && size <= 16) {  // judged once this write is done (hz_resolve)
        HzState* st = hz_state;
        if (st->npend == 8) hz_resolve();
        HzPending& p = st->pend[st->npend++];
        p.R = &R;
        p.off = off;
        p.me = me;
        p.other = c.w;
        p.addr = R.lo + off;
        p.size = size;
        memcpy(p.before, (const void*)p.addr, (size_t)size);
        pending = true;
      }
    }
    if (write) {
      if (hz_unordered(c.r1, f)) hz_report(R, off, me, c.r1);
      else if (hz_unordered(c.r2, f)) hz_report(R, off, me, c.r2);
      c.w = me;
    } else {
      if (c.r1.kind && c.r1.bar == hz_bar && c.r1.tid != me.tid &&
          ((c.r1.tid >> 5) != w || !(c.r2.kind && c.r2.bar == hz_bar && (c.r2.tid >> 5) != w)))
        c.r2 = c.r1;  // keep a reader of another warp than this one, where there is one
      c.r1 = me;
    }
  }
}

NC_NOTSAN __attribute__((noinline)) static void hz_shared(uintptr_t a, int size, int write,
                                                          uintptr_t ret) {
  if (hz_in || !tls_cur) return;
  HzState* st = hz_state;
  if (st->npend) hz_resolve();  // the write that made them is done by now
  HzRegion& D = st->dyn;
  if (D.lo && a + size > D.lo - HZ_GUARD && a < D.lo + D.size + HZ_GUARD) {
    if (a < D.lo || a + size > D.lo + D.size) hz_out_of_bounds(D, a, size, write, ret);
    hz_cells(D, a - D.lo, size, write, ret);
    return;
  }
  if (a < st->lo || a >= st->hi) return;
  for (int i = 0; i < st->nstatics; ++i) {
    HzRegion& R = st->statics[i];
    if (a - R.lo < R.size) {
      if (R.ncells != R.size) return;  // registered before the hazard run began
      hz_cells(R, a - R.lo, size, write, ret);
      return;
    }
  }
}

// Every load and store of the kernel's code: one subtraction and one comparison unless the
// address lies in the span of shared memory.
NC_NOTSAN static inline void hz_access(uintptr_t a, int size, int write, uintptr_t ret) {
  if (__builtin_expect(a - hz_span_lo >= hz_span_len, 1)) return;
  hz_shared(a, size, write, ret);
}

}  // namespace ncsimt

// GCC's ThreadSanitizer instrumentation, answered by normcheck (no libtsan): the accesses, and
// the atomics it turns into calls (carried out as the builtins they stand for, sequentially
// consistent, and not recorded).
#define NC_TSAN_RW(N)                                                                          \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_read##N(void* p) {    \
    ::ncsimt::hz_access((uintptr_t)p, N, 0, (uintptr_t)__builtin_return_address(0));           \
  }                                                                                            \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_write##N(void* p) {   \
    ::ncsimt::hz_access((uintptr_t)p, N, 1, (uintptr_t)__builtin_return_address(0));           \
  }                                                                                            \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_unaligned_read##N(   \
      void* p) {                                                                               \
    ::ncsimt::hz_access((uintptr_t)p, N, 0, (uintptr_t)__builtin_return_address(0));           \
  }                                                                                            \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_unaligned_write##N(  \
      void* p) {                                                                               \
    ::ncsimt::hz_access((uintptr_t)p, N, 1, (uintptr_t)__builtin_return_address(0));           \
  }                                                                                            \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_volatile_read##N(    \
      void* p) {                                                                               \
    ::ncsimt::hz_access((uintptr_t)p, N, 0, (uintptr_t)__builtin_return_address(0));           \
  }                                                                                            \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_volatile_write##N(   \
      void* p) {                                                                               \
    ::ncsimt::hz_access((uintptr_t)p, N, 1, (uintptr_t)__builtin_return_address(0));           \
  }
NC_TSAN_RW(1)
NC_TSAN_RW(2)
NC_TSAN_RW(4)
NC_TSAN_RW(8)
NC_TSAN_RW(16)
#undef NC_TSAN_RW

extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_read_range(void* p,
                                                                                  unsigned long n) {
  for (unsigned long i = 0; i < n; i += 16)
    ::ncsimt::hz_access((uintptr_t)p + i, (int)(n - i < 16 ? n - i : 16), 0,
                        (uintptr_t)__builtin_return_address(0));
}
extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_write_range(void* p,
                                                                                   unsigned long n) {
  for (unsigned long i = 0; i < n; i += 16)
    ::ncsimt::hz_access((uintptr_t)p + i, (int)(n - i < 16 ? n - i : 16), 1,
                        (uintptr_t)__builtin_return_address(0));
}
extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_init() {}
extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_func_entry(void*) {}
extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_func_exit() {}
extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_vptr_update(void**, void*) {}
extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_vptr_read(void**) {}
extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_atomic_thread_fence(int) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_atomic_signal_fence(int) {
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

#define NC_TSAN_ATOMIC(N, T)                                                                    \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) T __tsan_atomic##N##_load(         \
      const volatile T* a, int) {                                                               \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                \
  }                                                                                             \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) void __tsan_atomic##N##_store(     \
      volatile T* a, T v, int) {                                                                \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                   \
  }                                                                                             \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) T __tsan_atomic##N##_exchange(     \
      volatile T* a, T v, int) {                                                                \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                         \
  }                                                                                             \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) T __tsan_atomic##N##_fetch_add(    \
      volatile T* a, T v, int) {                                                                \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                          \
  }                                                                                             \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) T __tsan_atomic##N##_fetch_sub(    \
      volatile T* a, T v, int) {                                                                \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                          \
  }                                                                                             \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) T __tsan_atomic##N##_fetch_and(    \
      volatile T* a, T v, int) {                                                                \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                          \
  }                                                                                             \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) T __tsan_atomic##N##_fetch_or(     \
      volatile T* a, T v, int) {                                                                \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                           \
  }                                                                                             \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) T __tsan_atomic##N##_fetch_xor(    \
      volatile T* a, T v, int) {                                                                \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                          \
  }                                                                                             \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) T __tsan_atomic##N##_fetch_nand(   \
      volatile T* a, T v, int) {                                                                \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                         \
  }                                                                                             \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) int                               \
      __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {          \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);     \
  }                                                                                             \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) int                               \
      __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {            \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);      \
  }                                                                                             \
  extern "C" NC_NOTSAN __attribute__((visibility("hidden"))) T                                 \
      __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) {              \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);           \
    return c;                                                                                   \
  }
NC_TSAN_ATOMIC(8, char)
NC_TSAN_ATOMIC(16, short)
NC_TSAN_ATOMIC(32, int)
NC_TSAN_ATOMIC(64, long)
NC_TSAN_ATOMIC(128, __int128)
#undef NC_TSAN_ATOMIC

// -fsanitize=bounds: an array indexed past its declared size (a static __shared__ array among
// them) fails as out of bounds, at the line GCC records with the check (libsanitizer's
// OutOfBoundsData layout).
struct NcUbsanOutOfBounds {
  NcUbsanLocation loc;
  const void* array_type;
  const void* index_type;
};
[[noreturn]] NC_NOTSAN static void nc_out_of_bounds_index(NcUbsanOutOfBounds* d, uintptr_t index,
                                                          uintptr_t ret) {
  // the array's extent from the type's name ("'float [32]'": the last bracket's number)
  long long extent = -1;
  const char* name = d && d->array_type ? (const char*)d->array_type + 4 : "";
  for (const char* c = name; *c && c < name + 200; ++c)
    if (*c == '[') extent = std::strtoll(c + 1, nullptr, 10);
  ::ncsimt::Out o;
  o.put("kind=out_of_bounds detail=array_index");
  o.kv("index", (long long)index);
  if (extent >= 0) o.kv("extent", extent);
  ::ncsimt::put_return(o, ret);
  ::ncsimt::where(o);
  ::ncsimt::finish(o);
}
extern "C" NC_NOTSAN __attribute__((visibility("hidden"), noipa)) void __ubsan_handle_out_of_bounds(
    NcUbsanOutOfBounds* d, uintptr_t index) {
  nc_out_of_bounds_index(d, index, (uintptr_t)__builtin_return_address(0));
}
extern "C" NC_NOTSAN __attribute__((visibility("hidden"), noipa)) void
__ubsan_handle_out_of_bounds_abort(NcUbsanOutOfBounds* d, uintptr_t index) {
  nc_out_of_bounds_index(d, index, (uintptr_t)__builtin_return_address(0));
}
