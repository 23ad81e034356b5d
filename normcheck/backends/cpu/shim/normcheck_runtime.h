// normcheck SIMT runtime: fibers, the block scheduler, warp collectives, barriers, the launcher,
// guarded buffers and the crash reporter.  Included once, at the end of the generated translation
// unit, after the user's kernels (see normcheck_simt.h for the model).
#pragma once

#include <dlfcn.h>
#include <signal.h>
#include <ucontext.h>
#include <unwind.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#define NC_EXPORT extern "C" __attribute__((visibility("default")))

// The built-in variables (normcheck_simt.h): the running fiber's thread index (set at every
// switch to a fiber), its block's index, and the launch's dimensions.
NC_TLS uint3 threadIdx;
NC_TLS uint3 blockIdx;
NC_TLS dim3 blockDim;
NC_TLS dim3 gridDim;

namespace ncsimt {

NC_TLS Fiber* tls_cur = nullptr;
NC_TLS BlockCtx* tls_block = nullptr;
NC_TLS unsigned char* tls_dyn_smem = nullptr;
NC_TLS unsigned long long tls_dyn_smem_size = 0;
NC_TLS uintptr_t tls_dyn_guard_lo = 0;  // the mapping around it, guard pages included
NC_TLS uintptr_t tls_dyn_guard_hi = 0;

typedef void (*Thunk)(void**);
NC_TLS Thunk tls_thunk = nullptr;
NC_TLS void** tls_args = nullptr;

// ------------------------------------------------------------------------------------------------
// Context switch (x86-64 System V): saves the callee-saved registers on the old stack, switches
// stacks, restores them from the new one.  MXCSR and the x87 control word are not switched:
// kernels do not change rounding modes, and every fiber starts with the launching thread's.
// ------------------------------------------------------------------------------------------------
extern "C" void ncsimt_switch(void** save_sp, void* new_sp);
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".globl ncsimt_switch\n"
    ".hidden ncsimt_switch\n"
    ".type ncsimt_switch,@function\n"
    "ncsimt_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size ncsimt_switch, .-ncsimt_switch\n");

// ------------------------------------------------------------------------------------------------
// Blocks
// ------------------------------------------------------------------------------------------------
struct BlockCtx {
  Fiber* fibers;
  int n;
  int alive;
  int at_barrier;
  int bar_count, bar_and, bar_or;
  void* sched_sp;
  int nwarps;
  unsigned warp_alive[32];
  unsigned warp_waiting[32];
  const int* order;
  int* runlist;   // this pass: the fibers runnable when it began, in schedule order
  int runlen, runpos;
  std::string* undefined;  // the first warp shuffle that read a lane not taking part (or empty)
};

static thread_local unsigned char tls_fill = 0xff;  // this launch's LaunchParams::fill
unsigned char undefined_fill() { return tls_fill; }

std::vector<SharedRegion>& shared_regions() {
  static thread_local std::vector<SharedRegion> regions;
  return regions;
}
static thread_local unsigned long long tls_shared_launch = 0;
unsigned long long shared_launch() { return tls_shared_launch; }

// The hazard run (normcheck_hazards.h, included at the end of this file).
static void hz_register(void* p, unsigned long size, const char* name);
static void hz_block_start(void* dyn, unsigned long long size);
static void hz_barrier();
static void hz_collective(Fiber* base, unsigned need);
static std::string hz_take();
static void hz_span();
static void hz_thread_name(char* buf, size_t n, int t);
extern NC_TLS int hz_on;
extern NC_TLS uint32_t hz_bar;

void register_shared(void* p, unsigned long size, const char* name) {
  shared_regions().push_back(SharedRegion{p, size, tls_shared_launch});
  hz_register(p, size, name);
}

static std::mutex g_pool_mu;
static std::vector<std::pair<char*, size_t>> g_stack_pool;  // (base incl. guard, total size)
static size_t g_stack_size = 0;

// All fiber stacks ever mapped, for the crash reporter (guard page = the lowest page).
static std::vector<std::pair<char*, size_t>> g_all_stacks;

static size_t stack_size() {
  if (!g_stack_size) {
    const char* e = getenv("NORMCHECK_STACK_KB");
    size_t kb = e ? strtoul(e, nullptr, 10) : 256;
    if (kb < 16) kb = 16;
    g_stack_size = kb * 1024;
  }
  return g_stack_size;
}

static char* take_stack() {
  std::lock_guard<std::mutex> lk(g_pool_mu);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t total = stack_size() + page;
  if (!g_stack_pool.empty()) {
    char* s = g_stack_pool.back().first;
    g_stack_pool.pop_back();
    return s;
  }
  void* m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  mprotect(m, page, PROT_NONE);
  g_all_stacks.push_back({(char*)m, total});
  return (char*)m;
}

static void give_stack(char* s) {
  std::lock_guard<std::mutex> lk(g_pool_mu);
  g_stack_pool.push_back({s, 0});
}

extern "C" void ncsimt_fiber_main();

static void init_fiber_stack(Fiber* f) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char* top = f->stack + page + stack_size();
  top = (char*)((uintptr_t)top & ~(uintptr_t)15);
  uint64_t* sp = (uint64_t*)top;
  *--sp = 0;                                  // fake return address of the entry (never used)
  *--sp = (uint64_t)(void*)&ncsimt_fiber_main;  // popped by ret
  for (int i = 0; i < 6; ++i) *--sp = 0;       // rbp rbx r12 r13 r14 r15
  f->sp = sp;
}

// Leave fiber f: straight to the next fiber of this pass, or back to the scheduler at its end.
// Fibers released during a pass run in the next one; a fiber on the run list can only stop
// being runnable by running, so each is still runnable when its turn comes.
NC_NOTSAN static inline void to_scheduler(Fiber* f) {
  BlockCtx* B = tls_block;
  if (++B->runpos < B->runlen) {
    Fiber* g = B->fibers + B->runlist[B->runpos];
    tls_cur = g;
    ::threadIdx = g->tid;
    ncsimt_switch(&f->sp, g->sp);
  } else {
    ncsimt_switch(&f->sp, B->sched_sp);
  }
}

// ------------------------------------------------------------------------------------------------
// Warp collectives
// ------------------------------------------------------------------------------------------------
template <class T>
static T load_slot(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

NC_NOTSAN static void reduce_group(BlockCtx* B, int w, unsigned need, int op, int width) {
  Fiber* base = B->fibers + 32 * w;
  int size = width & 0xff;
  bool is_signed = (width & 0x100) != 0;
  long long acc_s = 0;
  unsigned long long acc_u = 0;
  bool first = true;
  for (int l = 0; l < 32; ++l) {
    if (!(need >> l & 1)) continue;
    long long vs;
    unsigned long long vu;
    if (size == 4) {
      vs = is_signed ? (long long)load_slot<int>(base[l].deposit) : (long long)load_slot<unsigned>(base[l].deposit);
      vu = load_slot<unsigned>(base[l].deposit);
    } else {
      vs = load_slot<long long>(base[l].deposit);
      vu = load_slot<unsigned long long>(base[l].deposit);
    }
    if (first) { acc_s = vs; acc_u = vu; first = false; continue; }
    switch (op) {
      case OP_REDUCE_ADD: acc_u += vu; break;
      case OP_REDUCE_MIN: if (is_signed) acc_s = std::min(acc_s, vs); else acc_u = std::min(acc_u, vu); break;
      case OP_REDUCE_MAX: if (is_signed) acc_s = std::max(acc_s, vs); else acc_u = std::max(acc_u, vu); break;
      case OP_REDUCE_AND: acc_u &= vu; break;
      case OP_REDUCE_OR: acc_u |= vu; break;
      case OP_REDUCE_XOR: acc_u ^= vu; break;
    }
  }
  unsigned long long r = (is_signed && (op == OP_REDUCE_MIN || op == OP_REDUCE_MAX)) ? (unsigned long long)acc_s : acc_u;
  for (int l = 0; l < 32; ++l)
    if (need >> l & 1) std::memcpy(base[l].result, &r, size);
}

static const char* op_name(int op);  // below, with the deadlock message

// A shuffle whose source lane is not taking part -- never launched (the block's last warp is
// partial), exited, or outside the mask -- reads an undefined value on a GPU; here every byte of
// the result is set (NaN as a float, -1 as an integer), so a kernel that uses it shows, and the
// first such read of the launch is noted for the verdict to name.
NC_NOTSAN static void undefined_read(BlockCtx* B, int w, int l, int src, int op, unsigned mask) {
  std::memset(B->fibers[32 * w + l].result, undefined_fill(), 16);
  if (!B->undefined || !B->undefined->empty()) return;
  const int t = 32 * w + src;
  char why[96];
  if (t >= B->n)
    snprintf(why, sizeof why, "was never launched (a block of %d thread%s)", B->n,
             B->n == 1 ? "" : "s");
  else if (!(B->warp_alive[w] >> src & 1))
    snprintf(why, sizeof why, "has exited");
  else
    snprintf(why, sizeof why, "is not in the mask 0x%08x", mask);
  char buf[320];
  snprintf(buf, sizeof buf, "%s in block (%u,%u,%u): thread %d read lane %d of its warp "
           "(thread %d), which %s; a GPU returns an undefined value there, the cpu backend NaN",
           op_name(op), ::blockIdx.x, ::blockIdx.y, ::blockIdx.z, 32 * w + l, src, t, why);
  *B->undefined = buf;
}

// Complete the collective of the lanes `need` (all arrived): each lane's result from its own op.
NC_NOTSAN static void complete(BlockCtx* B, int w, unsigned need) {
  Fiber* base = B->fibers + 32 * w;
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l)
    if ((need >> l & 1) && base[l].pred) ballot |= 1u << l;
  int reduce_op = -1, reduce_width = 0;
  for (int l = 0; l < 32; ++l) {
    if (!(need >> l & 1)) continue;
    Fiber* f = base + l;
    int width = f->width, src = l;
    switch (f->op) {
      case OP_SHFL:
      case OP_SHFL_UP:
      case OP_SHFL_DOWN:
      case OP_SHFL_XOR: {
        if (width <= 0 || width > 32 || (width & (width - 1))) width = 32;
        int seg = l & ~(width - 1);
        if (f->op == OP_SHFL) src = seg + (f->param & (width - 1));
        else if (f->op == OP_SHFL_UP) src = ((l - seg) >= f->param) ? l - f->param : l;
        else if (f->op == OP_SHFL_DOWN) src = ((l - seg) + f->param < width) ? l + f->param : l;
        else {
          src = l ^ f->param;
          if (src < seg || src >= seg + width) src = l;
        }
        src &= 31;
        if (need >> src & 1) std::memcpy(f->result, base[src].deposit, 16);
        else undefined_read(B, w, l, src, f->op, f->mask);
        break;
      }
      case OP_SHFL_PTX: {
        // shfl.sync as the PTX ISA defines it: c packs the clamp lane (bits 0-4) and the segment
        // mask (bits 8-12); the predicate says whether the source lane was in range
        unsigned b = (unsigned)f->param, c = (unsigned)f->width;
        int cval = (int)(c & 31u), segmask = (int)((c >> 8) & 31u);
        int max_lane = (l & segmask) | (cval & ~segmask), min_lane = l & segmask;
        int j = l;
        bool p = false;
        switch (f->param2) {
          case 0: j = l - (int)b; p = j >= max_lane; break;
          case 1: j = l + (int)b; p = j <= max_lane; break;
          case 2: j = l ^ (int)b; p = j <= max_lane; break;
          default: j = min_lane | ((int)b & ~segmask & 31); p = j <= max_lane; break;
        }
        if (!p || j < 0 || j > 31) j = l;
        if (need >> j & 1) std::memcpy(f->result, base[j].deposit, 16);
        else undefined_read(B, w, l, j, f->op, f->mask);
        f->result_u = p ? 1u : 0u;
        break;
      }
      case OP_BALLOT: f->result_u = ballot; break;
      case OP_ANY: f->result_u = ballot != 0; break;
      case OP_ALL: f->result_u = ballot == need; break;
      case OP_MATCH_ANY: {
        unsigned m = 0;
        for (int k = 0; k < 32; ++k)
          if ((need >> k & 1) && std::memcmp(base[k].deposit, f->deposit, 8) == 0) m |= 1u << k;
        f->result_u = m;
        break;
      }
      case OP_SYNC: break;
      default: reduce_op = f->op; reduce_width = f->width; break;
    }
  }
  if (reduce_op >= 0) reduce_group(B, w, need, reduce_op, reduce_width);
  hz_collective(base, need);  // warp-synchronous: orders the lanes' accesses (hazard run)
  for (int l = 0; l < 32; ++l) {
    if (!(need >> l & 1)) continue;
    base[l].state = RUNNABLE;
  }
  B->warp_waiting[w] &= ~need;
}

NC_NOTSAN static bool try_complete(BlockCtx* B, int w, unsigned mask) {
  unsigned need = mask & B->warp_alive[w];
  if (need == 0 || (B->warp_waiting[w] & need) != need) return false;
  complete(B, w, need);
  return true;
}

NC_NOTSAN void warp_collective(Fiber* f) {
  BlockCtx* B = tls_block;
  int w = f->warp;
  f->state = AT_WARP;
  B->warp_waiting[w] |= 1u << f->lane;
  if (!(f->mask >> f->lane & 1)) f->mask |= 1u << f->lane;  // a lane always takes part
  try_complete(B, w, f->mask);
  if (f->state == AT_WARP) to_scheduler(f);
}

unsigned warp_alive_mask() {
  Fiber* f = tls_cur;
  return tls_block->warp_alive[f->warp];
}

// A lane left: collectives that were waiting only for it may now complete.
NC_NOTSAN static void on_lane_exit(BlockCtx* B, int w) {
  Fiber* base = B->fibers + 32 * w;
  for (int l = 0; l < 32; ++l)
    if (B->warp_waiting[w] >> l & 1) try_complete(B, w, base[l].mask);
}

// ------------------------------------------------------------------------------------------------
// Barriers
// ------------------------------------------------------------------------------------------------
NC_NOTSAN void yield_barrier(int pred, int line, const char* file) {
  Fiber* f = tls_cur;
  BlockCtx* B = tls_block;
  f->state = AT_BARRIER;
  f->bar_pred = pred;
  f->wait_at = (uintptr_t)__builtin_return_address(0);
  f->wait_line = line;
  f->wait_file = file;
  B->at_barrier++;
  to_scheduler(f);
}

int barrier_result(int kind) {
  BlockCtx* B = tls_block;
  return kind == 0 ? B->bar_count : (kind == 1 ? B->bar_and : B->bar_or);
}

[[noreturn]] void unsupported(const char* detail);  // below, with the crash reporter

void named_barrier(unsigned id, unsigned count) {
  (void)id;
  BlockCtx* B = tls_block;
  if (count != 0 && (int)count != B->n) unsupported("named_barrier_count");
  yield_barrier(0);
}

bool in_dynamic_smem(const void* p) {
  uintptr_t a = (uintptr_t)p, b = (uintptr_t)tls_dyn_smem;
  return tls_dyn_smem && a >= b && a < b + tls_dyn_smem_size;
}

// The shared window: a GPU's shared state space has 32-bit addresses (a kernel may keep
// `unsigned a = __cvta_generic_to_shared(p)` and use it in ld.shared/st.shared).  Here the
// block's dynamic shared memory, then each static __shared__ variable of this OS thread (as
// registered), gets a 16-byte aligned range of a window starting at 16: a shared address is a
// small number, and back to the host pointer it stands for.
template <class F>
static bool shared_window_walk(F f) {
  unsigned long long base = 16;
  // (none where the launch has no dynamic shared memory: its end would be the first static
  // variable's start, and a window address of that variable would come back as the other)
  if (tls_dyn_smem && tls_dyn_smem_size &&
      f((uintptr_t)tls_dyn_smem, (unsigned long long)tls_dyn_smem_size, base))
    return true;
  base = (base + tls_dyn_smem_size + 15) & ~15ull;
  for (const SharedRegion& r : shared_regions()) {
    if (f((uintptr_t)r.p, (unsigned long long)r.size, base)) return true;
    base = (base + r.size + 15) & ~15ull;
  }
  return false;
}

size_t shared_window_of(const void* p) {
  const uintptr_t a = (uintptr_t)p;
  size_t out = (size_t)p;  // not shared memory: the address as it is
  shared_window_walk([&](uintptr_t start, unsigned long long size, unsigned long long base) {
    if (a >= start && a <= start + size) {  // (one past the end too: an end pointer)
      out = (size_t)(base + (a - start));
      return true;
    }
    return false;
  });
  return out;
}

void* shared_from_window(size_t w) {
  void* out = (void*)w;  // not a window address: a host pointer already
  if (w >> 32) return out;
  shared_window_walk([&](uintptr_t start, unsigned long long size, unsigned long long base) {
    if (w >= base && w <= base + size) {
      out = (void*)(start + (w - base));
      return true;
    }
    return false;
  });
  return out;
}

extern "C" NC_NOTSAN void ncsimt_fiber_main() {
  Fiber* f = tls_cur;
  tls_thunk(tls_args);
  BlockCtx* B = tls_block;
  f->state = DONE;
  B->alive--;
  B->warp_alive[f->warp] &= ~(1u << f->lane);
  on_lane_exit(B, f->warp);
  to_scheduler(f);
  __builtin_unreachable();
}

// ------------------------------------------------------------------------------------------------
// Crash reporting.  A kernel that kills the process gets one line of `key=value` words written
// into the report page (shared with the parent) by the signal handler, then the process exits:
//   kind=out_of_bounds|misaligned|stack_overflow|null_pointer|sandbox|abort|trap|arithmetic|crash
//   signal= addr= access=read|write bytes= arg= elem_offset_bytes= past_end_bytes=
//   before_start_bytes= size_bytes= itemsize= syscall= block=x,y,z thread=x,y,z
//   pc=0x... (the faulting instruction's offset in this module, or of the innermost frame of
//   this module when the fault is in a library function it called: the parent maps it to a
//   line of the user's file)
// Everything here is async-signal-safe (no allocation, no stdio).
// ------------------------------------------------------------------------------------------------
struct Buffer {
  uintptr_t begin, end;  // the data
  uintptr_t lo, hi;      // the inaccessible reservation around it: [lo, begin) and [end, hi)
  int arg;
  int itemsize;
};
static Buffer g_buffers[64];
static int g_nbuffers = 0;
static char* g_report = nullptr;
static int g_report_len = 0;

struct Out {
  char buf[640];
  char* p = buf;
  void put(const char* s) { while (*s && p < buf + sizeof(buf) - 32) *p++ = *s++; }
  void u(unsigned long long v) {
    char tmp[24];
    int n = 0;
    do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) *p++ = tmp[--n];
  }
  void i(long long v) {
    if (v < 0) { *p++ = '-'; v = -v; }
    u((unsigned long long)v);
  }
  void x(unsigned long long v) {
    const char* d = "0123456789abcdef";
    put("0x");
    char tmp[20];
    int n = 0;
    do { tmp[n++] = d[v & 15]; v >>= 4; } while (v);
    while (n) *p++ = tmp[--n];
  }
  void kv(const char* k, long long v) { put(" "); put(k); put("="); i(v); }
};

// The memory operand of the SSE instruction at rip (0F-prefixed, non-VEX): its address, or 0.
static uintptr_t sse_operand(const ucontext_t* uc, int* is_store) {
  static const int map[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP, REG_RSI,
                              REG_RDI, REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13,
                              REG_R14, REG_R15};
  const greg_t* g = uc->uc_mcontext.gregs;
  const unsigned char* p = (const unsigned char*)g[REG_RIP];
  int prefix66 = 0, rex = 0;
  for (int k = 0; k < 4 && (*p == 0x66 || *p == 0xF2 || *p == 0xF3 || *p == 0x2E || *p == 0x3E ||
                            *p == 0x26 || *p == 0x64 || *p == 0x65 || *p == 0x36); ++k, ++p)
    if (*p == 0x66) prefix66 = 1;
  if (*p >= 0x40 && *p <= 0x4F) rex = *p++;
  if (*p++ != 0x0F) return 0;
  int op = *p++;
  if (op == 0x38 || op == 0x3A) p++;
  int modrm = *p++;
  int mod = modrm >> 6, rm = modrm & 7;
  if (mod == 3) return 0;
  uintptr_t addr = 0;
  if (rm == 4) {
    int sib = *p++;
    int scale = 1 << (sib >> 6), index = ((sib >> 3) & 7) | ((rex & 2) << 2), base = (sib & 7) | ((rex & 1) << 3);
    if (index != 4) addr += (uintptr_t)g[map[index]] * scale;
    if ((base & 7) == 5 && mod == 0) {
      int32_t d;
      std::memcpy(&d, p, 4);
      p += 4;
      addr += (intptr_t)d;
    } else {
      addr += (uintptr_t)g[map[base]];
    }
  } else if (rm == 5 && mod == 0) {
    return 0;  // rip-relative: static data, not a kernel argument
  } else {
    addr = (uintptr_t)g[map[rm | ((rex & 1) << 3)]];
  }
  if (mod == 1) { addr += (intptr_t)(int8_t)*p; }
  if (mod == 2) { int32_t d; std::memcpy(&d, p, 4); addr += (intptr_t)d; }
  *is_store = (op == 0x29 || op == 0x2B || op == 0xE7 || (prefix66 && op == 0x7F) || op == 0x11 || op == 0x13 || op == 0x17);
  return addr;
}

// This module's load address, found once; an address is this module's when the dynamic loader
// names this module for it (dladdr: its load address is ours).
static uintptr_t g_mod_lo = 0;

static void find_module_span() {
  if (g_mod_lo) return;
  Dl_info d;
  if (dladdr((void*)&find_module_span, &d) && d.dli_fbase) g_mod_lo = (uintptr_t)d.dli_fbase;
}

static bool in_module(uintptr_t pc) {
  Dl_info d;
  return g_mod_lo && pc >= g_mod_lo && dladdr((void*)pc, &d) &&
         (uintptr_t)d.dli_fbase == g_mod_lo;
}

// The innermost frame of this module at the fault: the faulting instruction itself, or the
// return address of the first module frame above a library function (memcpy, ...) it called.
struct PcWalk {
  uintptr_t rip;  // the faulting instruction (in a library): frames above it are the handler's
  bool past;      // the walk has reached it
  uintptr_t pc;
  int frames;
};

static _Unwind_Reason_Code pc_walk_cb(struct _Unwind_Context* ctx, void* data) {
  PcWalk* w = (PcWalk*)data;
  int before = 0;
  uintptr_t ip = (uintptr_t)_Unwind_GetIPInfo(ctx, &before);
  if (++w->frames > 64) return _URC_END_OF_STACK;
  if (!w->past) {
    if (ip == w->rip) w->past = true;
    return _URC_NO_REASON;
  }
  if (ip && in_module(ip)) {
    w->pc = before ? ip : ip - 1;
    return _URC_END_OF_STACK;
  }
  return _URC_NO_REASON;
}

static void put_pc(Out& o, const ucontext_t* uc) {
  if (!uc) return;
  uintptr_t rip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
  uintptr_t pc = 0;
  if (in_module(rip)) {
    pc = rip;
  } else {
    // a library function faulted: unwind from the handler through the signal frame
    PcWalk w{rip, false, 0, 0};
    _Unwind_Backtrace(pc_walk_cb, &w);
    pc = w.pc;
  }
  if (pc) {
    o.put(" pc=");
    o.x(pc - g_mod_lo);
  }
}

// A fault the runtime raises itself (not a signal): the line of the call into it.
static void put_return(Out& o, uintptr_t ret) {
  if (ret && in_module(ret)) {
    o.put(" pc=");
    o.x(ret - 1 - g_mod_lo);
  }
}

static int buffer_of(uintptr_t addr) {
  for (int i = 0; i < g_nbuffers; ++i)
    if (addr >= g_buffers[i].begin && addr < g_buffers[i].end) return i;
  return -1;
}

static void where(Out& o) {
  if (tls_cur) {
    o.put(" block=");
    o.i(::blockIdx.x); o.put(","); o.i(::blockIdx.y); o.put(","); o.i(::blockIdx.z);
    o.put(" thread=");
    o.i(tls_cur->tid.x); o.put(","); o.i(tls_cur->tid.y); o.put(","); o.i(tls_cur->tid.z);
  }
}

[[noreturn]] static void finish(Out& o) {
  *o.p++ = '\n';
  if (g_report && g_report_len > 0) {
    size_t n = (size_t)(o.p - o.buf);
    if (n >= (size_t)g_report_len) n = (size_t)g_report_len - 1;
    std::memcpy(g_report, o.buf, n);
    g_report[n] = 0;
  }
  _exit(86);
}

static void describe_buffer(Out& o, int i, uintptr_t addr) {
  const Buffer& b = g_buffers[i];
  o.kv("arg", b.arg);
  o.kv("elem_offset_bytes", (long long)(addr - b.begin));
  o.kv("size_bytes", (long long)(b.end - b.begin));
  o.kv("itemsize", b.itemsize);
}

// A construct the cpu backend does not run, reached at run time: the launch fails naming it
// (`detail`, one word the parent turns into a sentence; `ptx=N`, the N-th untranslated inline
// PTX instruction of the module, whose text and line the parent kept when it translated it).
[[noreturn]] void unsupported(const char* detail) {
  Out o;
  o.put("kind=unsupported detail=");
  o.put(detail);
  put_return(o, (uintptr_t)__builtin_return_address(0));
  where(o);
  finish(o);
}
// A host function (or object) of a library the module does not load -- c10's, cuBLAS's, the
// CUDA runtime's -- reached at run time: the launch fails naming it (its stub, made when the
// module was linked, calls this with the symbol's name).
[[noreturn]] void unresolved_call(const char* sym, void* caller) {
  Out o;
  o.put("kind=unsupported detail=host_symbol sym=");
  int n = 0;
  for (const char* c = sym; *c && n < 300; ++c, ++n) {
    const char ch = *c;
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '$';
    char one[2] = {ok ? ch : '_', 0};
    o.put(one);
  }
  put_return(o, (uintptr_t)caller);
  where(o);
  finish(o);
}
[[noreturn]] void unsupported_ptx(int index) {
  Out o;
  o.put("kind=unsupported");
  o.kv("ptx", index);
  put_return(o, (uintptr_t)__builtin_return_address(0));
  where(o);
  finish(o);
}

bool in_own_stack(const void* p) {
  Fiber* f = tls_cur;
  if (!f) return false;
  uintptr_t a = (uintptr_t)p, s = (uintptr_t)f->stack;
  return a >= s && a < s + (size_t)sysconf(_SC_PAGESIZE) + stack_size();
}

static void fault_misaligned_at(unsigned long long addr, int bytes, int store, uintptr_t ret) {
  Out o;
  o.put("kind=misaligned");
  o.put(" addr=");
  o.x(addr);
  o.kv("bytes", bytes);
  o.put(store ? " access=write" : " access=read");
  int i = buffer_of((uintptr_t)addr);
  if (i >= 0) describe_buffer(o, i, (uintptr_t)addr);
  put_return(o, ret);
  where(o);
  finish(o);
}
void fault_misaligned(unsigned long long addr, int bytes, int store) {
  fault_misaligned_at(addr, bytes, store, (uintptr_t)__builtin_return_address(0));
}

static void finish_at(Out& o, const ucontext_t* uc) {
  put_pc(o, uc);
  where(o);
  finish(o);
}

// The sandbox's emulation of the trapped calls a sound process makes (normcheck_sandbox.c:
// glibc's fstat), looked up when the handlers are installed; null without the sandbox.
typedef int (*EmulateFn)(siginfo_t*, void*);
static EmulateFn g_emulate = nullptr;

static void on_fatal(int sig, siginfo_t* info, void* ctx) {
  if (sig == SIGSYS && g_emulate && g_emulate(info, ctx)) return;  // carried out: go on
  Out o;
  uintptr_t addr = (uintptr_t)info->si_addr;
  const ucontext_t* uc = (const ucontext_t*)ctx;
  size_t page = 4096;
  if (sig == SIGSEGV || sig == SIGBUS) {
    int write = uc ? ((uc->uc_mcontext.gregs[REG_ERR] & 2) != 0) : 0;
    if (info->si_code == SI_KERNEL && uc) {
      // a general-protection fault: on x86-64 an SSE access that is not 16-byte aligned
      int store = 0;
      uintptr_t a = sse_operand(uc, &store);
      if (a && a % 16) {
        o.put("kind=misaligned");
        o.put(" addr=");
        o.x(a);
        o.kv("bytes", 16);
        o.put(store ? " access=write" : " access=read");
        int i = buffer_of(a);
        if (i >= 0) describe_buffer(o, i, a);
      } else {
        o.put("kind=crash signal=");
        o.i(sig);
        o.put(" detail=general_protection");
        if (a) { o.put(" addr="); o.x(a); }
      }
      finish_at(o, uc);
    }
    // the guard page of a fiber stack; or, for code built without stack-clash protection, a
    // stack pointer that has run below one
    uintptr_t sp = uc ? (uintptr_t)uc->uc_mcontext.gregs[REG_RSP] : 0;
    for (auto& s : g_all_stacks)
      if ((addr >= (uintptr_t)s.first && addr < (uintptr_t)s.first + page) ||
          (sp && sp < (uintptr_t)s.first + page && sp + (1u << 20) > (uintptr_t)s.first &&
           addr + (1u << 20) > sp && addr < sp + page)) {
        o.put("kind=stack_overflow");
        o.kv("signal", sig);
        o.kv("stack_bytes", (long long)stack_size());
        finish_at(o, uc);
      }
    // the pages around the block's dynamic shared memory: an access past its end (or before
    // its start) -- the hazard run names the bytes between its end and the page exactly
    if (tls_dyn_guard_lo && addr >= tls_dyn_guard_lo && addr < tls_dyn_guard_hi) {
      const uintptr_t lo = (uintptr_t)tls_dyn_smem, hi = lo + tls_dyn_smem_size;
      o.put("kind=out_of_bounds");
      o.put(write ? " access=write" : " access=read");
      o.put(" shared=dynamic");
      if (addr >= hi) o.kv("past_end_bytes", (long long)(addr - hi));
      else o.kv("before_start_bytes", (long long)(lo - addr));
      o.kv("size_bytes", (long long)tls_dyn_smem_size);
      finish_at(o, uc);
    }
    // an address in the inaccessible reservation around an array (as large as the array, up
    // to 64 MiB, on each side): the array's own out-of-bounds access, near or far
    for (int i = 0; i < g_nbuffers; ++i) {
      const Buffer& b = g_buffers[i];
      if (addr >= b.end && addr < b.hi) {
        o.put("kind=out_of_bounds");
        o.put(write ? " access=write" : " access=read");
        o.kv("arg", b.arg);
        o.kv("past_end_bytes", (long long)(addr - b.end));
        o.kv("size_bytes", (long long)(b.end - b.begin));
        o.kv("itemsize", b.itemsize);
        finish_at(o, uc);
      }
      if (addr < b.begin && addr >= b.lo) {
        o.put("kind=out_of_bounds");
        o.put(write ? " access=write" : " access=read");
        o.kv("arg", b.arg);
        o.kv("before_start_bytes", (long long)(b.begin - addr));
        o.kv("size_bytes", (long long)(b.end - b.begin));
        o.kv("itemsize", b.itemsize);
        finish_at(o, uc);
      }
    }
    o.put(addr < page ? "kind=null_pointer" : "kind=crash");
    o.kv("signal", sig);
    o.put(" addr=");
    o.x(addr);
    o.put(write ? " access=write" : " access=read");
  } else if (sig == SIGSYS) {
    o.put("kind=sandbox");
    o.kv("syscall", info->si_syscall);
  } else if (sig == SIGXFSZ) {
    o.put("kind=sandbox detail=file_size");
  } else if (sig == SIGXCPU) {
    o.put("kind=sandbox detail=cpu_time");
  } else if (sig == SIGABRT) {
    o.put("kind=abort");
  } else if (sig == SIGILL || sig == SIGTRAP) {
    o.put("kind=trap");
  } else if (sig == SIGFPE) {
    o.put("kind=arithmetic");
  } else {
    o.put("kind=crash");
    o.kv("signal", sig);
  }
  finish_at(o, uc);
}

// Installed at every launch: several kernel modules live in one worker, each with its own copy
// of this runtime, and the handler must be the launching module's (its buffers, its fibers).
static void install_handlers() {
  if (!g_emulate) g_emulate = (EmulateFn)dlsym(RTLD_DEFAULT, "ncsb_emulate");
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE, SIGABRT, SIGSYS, SIGXFSZ, SIGXCPU};
  for (int s : sigs) sigaction(s, &sa, nullptr);
}

static void alt_stack() {
  static thread_local char* alt = nullptr;
  if (alt) return;
  size_t sz = 64 * 1024;
  alt = (char*)mmap(nullptr, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  stack_t ss;
  ss.ss_sp = alt;
  ss.ss_size = sz;
  ss.ss_flags = 0;
  sigaltstack(&ss, nullptr);
}

// ------------------------------------------------------------------------------------------------
// Launch
// ------------------------------------------------------------------------------------------------
// schedule 2's block order: a seeded permutation of [0, total), without a table (grids may hold
// 2^40 blocks): an invertible mix on the next power of two, walked until it lands in range.
static unsigned long long permuted_block(unsigned long long b, unsigned long long total,
                                         unsigned long long seed) {
  int k = 1;
  while (k < 63 && (1ull << k) < total) ++k;
  const unsigned long long mask = (1ull << k) - 1;
  const unsigned long long mul = ((seed * 0x9E3779B97F4A7C15ull) | 1ull) & mask;
  const unsigned long long add = (seed * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull) & mask;
  do {
    b = (b * mul + add) & mask;           // odd multiplier: a bijection mod 2^k
    b ^= b >> ((k + 1) / 2);              // xorshift: a bijection
    b = (b * (mul | 5ull) + (add >> 1)) & mask;
  } while (b >= total);
  return b;
}

struct LaunchParams {
  unsigned grid[3];
  unsigned block[3];
  unsigned long long shared_mem;
  void** args;
  int nworkers;
  int schedule;  // 0 forward, 1 reverse (warps and lanes), 2 blocks and warps in seeded
                 // orders, 3 warps in seeded orders (blocks forward)
  unsigned long long seed;
  char* err;
  int errlen;
  // guarded buffers, for naming an out-of-bounds access
  int nbuffers;
  unsigned long long* buf_begin;
  unsigned long long* buf_end;
  int* buf_arg;
  int* buf_itemsize;
  char* report;
  int report_len;
  int fill;  // the byte undefined values are made of (0xFF: NaN); worker.py's LaunchParams
  unsigned long long* buf_lo;  // each array's inaccessible reservation: [lo, begin), [end, hi)
  unsigned long long* buf_hi;
  unsigned long long block_mask;  // 0: every block; else only the blocks whose linear index b
  unsigned long long block_val;   // has (b & block_mask) == block_val
  int hazards;                    // the hazard run: races and shared-memory bounds checked
                                  // (the instrumented build: normcheck_hazards.h)
  unsigned long long max_dyn_smem;  // the dynamic shared memory the launcher opted in to
                                  // (cudaFuncSetAttribute's MaxDynamicSharedMemorySize; 48 KiB
                                  // without it): a launch asking for more is refused, as a GPU does
};

static void ranges(std::string& out, const std::vector<int>& ids) {
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty() && out.back() != ' ') out += ",";
    out += std::to_string(ids[i]);
    if (j > i) out += "-" + std::to_string(ids[j]);
    i = j + 1;
  }
}

static const char* op_name(int op) {
  switch (op) {
    case OP_SYNC: return "__syncwarp";
    case OP_SHFL: return "__shfl_sync";
    case OP_SHFL_UP: return "__shfl_up_sync";
    case OP_SHFL_DOWN: return "__shfl_down_sync";
    case OP_SHFL_XOR: return "__shfl_xor_sync";
    case OP_BALLOT: return "__ballot_sync";
    case OP_ANY: return "__any_sync";
    case OP_ALL: return "__all_sync";
    case OP_MATCH_ANY: return "__match_any_sync";
    default: return "__reduce_*_sync";
  }
}

static std::string deadlock_message(BlockCtx* B) {
  std::vector<int> at_bar, done;
  std::string warp_part;
  for (int t = 0; t < B->n; ++t) {
    Fiber& f = B->fibers[t];
    if (f.state == AT_BARRIER) at_bar.push_back(t);
    if (f.state == DONE) done.push_back(t);
  }
  for (int w = 0; w < B->nwarps; ++w) {
    if (!B->warp_waiting[w]) continue;
    std::vector<int> lanes;
    unsigned mask = 0;
    int op = 0;
    for (int l = 0; l < 32; ++l)
      if (B->warp_waiting[w] >> l & 1) {
        lanes.push_back(32 * w + l);
        mask = B->fibers[32 * w + l].mask;
        op = B->fibers[32 * w + l].op;
      }
    unsigned missing = mask & B->warp_alive[w] & ~B->warp_waiting[w];
    std::vector<int> miss;
    for (int l = 0; l < 32; ++l)
      if (missing >> l & 1) miss.push_back(32 * w + l);
    warp_part += "; threads ";
    ranges(warp_part, lanes);
    char buf[64];
    snprintf(buf, sizeof buf, " wait in %s (mask 0x%08x) for threads ", op_name(op), mask);
    warp_part += buf;
    ranges(warp_part, miss);
  }
  std::string msg = "deadlock in block (" + std::to_string(::blockIdx.x) + "," +
                    std::to_string(::blockIdx.y) + "," + std::to_string(::blockIdx.z) + "): " +
                    std::to_string(B->alive) + " live threads of " + std::to_string(B->n);
  if (!at_bar.empty()) {
    msg += "; threads ";
    ranges(msg, at_bar);
    msg += " wait at __syncthreads";
    const uintptr_t at = B->fibers[at_bar[0]].wait_at;
    if (at && in_module(at)) {  // the parent names the line: "[pc 0x..]" -> file.cu:47
      char buf[48];
      snprintf(buf, sizeof buf, " [pc 0x%llx]", (unsigned long long)(at - 1 - g_mod_lo));
      msg += buf;
    }
  }
  msg += warp_part;
  if (!done.empty()) {
    msg += "; threads ";
    ranges(msg, done);
    msg += " have returned";
  }
  return msg;
}

struct DeviceFacts {
  const char* name;
  int sms, smem_per_sm, smem_optin, l2, clock_khz, mem_clock_khz, bus_bits;
  unsigned long long global_mem;
};
inline DeviceFacts device_facts() {
#if NORMCHECK_CUDA_ARCH >= 1000
  return {"NVIDIA B200 (normcheck cpu backend)", 148, 233472, 232448, 128 << 20, 1965000, 3996000, 8192, 192ull << 30};
#elif NORMCHECK_CUDA_ARCH >= 900
  return {"NVIDIA H100 (normcheck cpu backend)", 132, 233472, 232448, 50 << 20, 1980000, 2619000, 5120, 80ull << 30};
#elif NORMCHECK_CUDA_ARCH >= 800
  return {"NVIDIA A100 (normcheck cpu backend)", 108, 167936, 166912, 40 << 20, 1410000, 1593000, 5120, 80ull << 30};
#else
  return {"NVIDIA V100 (normcheck cpu backend)", 80, 98304, 98304, 6 << 20, 1530000, 877000, 4096, 32ull << 30};
#endif
}

// What the CUDA runtime refuses before a block runs, as a GPU of the presented architecture
// refuses it ("launch refused: ..."), or "": a block over 1024 threads or a block or grid
// dimension past its limit (cudaErrorInvalidConfiguration / invalid argument), dynamic shared
// memory above what the launcher opted in to with cudaFuncSetAttribute(...,
// cudaFuncAttributeMaxDynamicSharedMemorySize, n) -- 48 KiB without it -- or above the
// architecture's opt-in maximum, static and dynamic shared memory together above it (too many
// resources requested for launch).
static std::string launch_refused(const LaunchParams* p) {
  char buf[480];
  static const unsigned grid_max[3] = {2147483647u, 65535u, 65535u};
  static const unsigned block_max[3] = {1024u, 1024u, 64u};
  for (int a = 0; a < 3; ++a) {
    if (p->grid[a] > grid_max[a] || p->block[a] > block_max[a]) {
      snprintf(buf, sizeof buf, "launch refused: invalid configuration argument -- grid "
               "(%u,%u,%u), block (%u,%u,%u): the %s's %c dimension is past its limit of %u",
               p->grid[0], p->grid[1], p->grid[2], p->block[0], p->block[1], p->block[2],
               p->grid[a] > grid_max[a] ? "grid" : "block", "xyz"[a],
               p->grid[a] > grid_max[a] ? grid_max[a] : block_max[a]);
      return buf;
    }
  }
  const unsigned long long optin = (unsigned long long)device_facts().smem_optin;
  const unsigned long long allowed = std::min(p->max_dyn_smem ? p->max_dyn_smem : 49152ull,
                                              optin);
  if (p->shared_mem > allowed) {
    if (p->shared_mem > optin)
      snprintf(buf, sizeof buf, "launch refused: too many resources requested for launch -- "
               "%llu bytes of dynamic shared memory, above the %llu a block of sm_%d may have "
               "at most", p->shared_mem, optin, NORMCHECK_CUDA_ARCH / 10);
    else
      snprintf(buf, sizeof buf, "launch refused: too many resources requested for launch -- "
               "%llu bytes of dynamic shared memory, above the %llu the launch may have: more "
               "than 48 KiB needs cudaFuncSetAttribute(kernel, "
               "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) before the launch (up to "
               "%llu on sm_%d)", p->shared_mem, allowed, optin, NORMCHECK_CUDA_ARCH / 10);
    return buf;
  }
  return "";
}

// The static shared memory a launch's blocks declared, with its dynamic shared memory: above the
// architecture's maximum a GPU refuses the launch (and nvcc the kernel, above 48 KiB of static
// shared memory alone).  Known once the blocks have reached the declarations.
static std::string shared_total_refused(const LaunchParams* p) {
  unsigned long long stat = 0;
  for (const SharedRegion& r : shared_regions())
    if (r.launch == tls_shared_launch) stat += r.size;  // declared by this launch's kernel
  const unsigned long long optin = (unsigned long long)device_facts().smem_optin;
  char buf[320];
  if (stat > 49152) {
    snprintf(buf, sizeof buf, "launch refused: %llu bytes of static __shared__ memory, above "
             "the 48 KiB a kernel may declare (nvcc: \"uses too much shared data\"); take more "
             "as dynamic shared memory", stat);
    return buf;
  }
  if (stat + p->shared_mem > optin) {
    snprintf(buf, sizeof buf, "launch refused: too many resources requested for launch -- "
             "%llu bytes of static and %llu of dynamic shared memory, above the %llu a block of "
             "sm_%d may have", stat, p->shared_mem, optin, NORMCHECK_CUDA_ARCH / 10);
    return buf;
  }
  return "";
}

// A block's dynamic shared memory: `size` bytes ending (16-byte aligned) against an inaccessible
// page, another below it; the OS thread's one mapping for the launch.
struct DynSmem {
  unsigned char* base = nullptr;
  unsigned char* map = nullptr;
  size_t total = 0;
  explicit DynSmem(size_t size) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t body = (size + 15) / 16 * 16;
    const size_t pages = (body + page - 1) / page;
    total = (pages + 2) * page;
    void* m = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return;
    map = (unsigned char*)m;
    if (pages && mprotect(map + page, pages * page, PROT_READ | PROT_WRITE) != 0) return;
    base = map + page + pages * page - body;
    tls_dyn_guard_lo = (uintptr_t)map;
    tls_dyn_guard_hi = (uintptr_t)map + total;
  }
  ~DynSmem() {
    if (map) munmap(map, total);
    tls_dyn_guard_lo = tls_dyn_guard_hi = 0;
  }
};

// A barrier that not every live thread of the block reached through the same __syncthreads():
// threads wait at two different barriers (compute-sanitizer's synccheck reports it; CUDA allows
// __syncthreads() in conditional code only where the condition is the same for the whole block).
// "" when the barrier is sound.  Threads that *exited* before it are not waited for: since Volta
// "__syncthreads() ... will not succeed until reached by all non-exited threads in the block"
// (CUDA Programming Guide, independent thread scheduling), so `if (tid >= n) return; ...
// __syncthreads();` is sound on the sm_90 presented -- said in ``*exited`` (a note with the
// verdict: undefined before Volta), never a failure (#64).
NC_NOTSAN static std::string barrier_divergence(BlockCtx* B, std::string* exited) {
  const Fiber *first = nullptr, *other = nullptr;
  for (int t = 0; t < B->n; ++t) {
    const Fiber& f = B->fibers[t];
    if (f.state != AT_BARRIER) continue;
    if (!first) first = &f;
    else if (!other && f.wait_file && first->wait_file &&
             (f.wait_line != first->wait_line || std::strcmp(f.wait_file, first->wait_file)))
      other = &f;  // a barrier written elsewhere (the same one the compiler copied is not)
  }
  auto at = [](const Fiber* f) {
    char b[600] = "";
    if (f && f->wait_file)
      snprintf(b, sizeof b, " at [file %s:%d]", f->wait_file, f->wait_line);
    else if (f && f->wait_at && in_module(f->wait_at))
      snprintf(b, sizeof b, " [pc 0x%llx]", (unsigned long long)(f->wait_at - 1 - g_mod_lo));
    return std::string(b);
  };
  char buf[1400];
  const Fiber* touched = nullptr;  // a thread that exited after a shared access of this interval
  for (int t = 0; t < B->n && !touched; ++t)
    if (B->fibers[t].state == DONE && hz_on && B->fibers[t].smem_bar == hz_bar + 1)
      touched = &B->fibers[t];
  if (touched && !other) {
    char who[48];
    hz_thread_name(who, sizeof who, touched->linear);
    snprintf(buf, sizeof buf, "barrier divergence in block (%u,%u,%u): __syncthreads()%s was "
             "reached by %d of its %d threads; the other %d ran past it to their exit, thread "
             "%s after accessing shared memory in the barrier's interval (unordered with what "
             "the others do after it: a barrier every thread must reach; compute-sanitizer's "
             "synccheck and racecheck report it)", ::blockIdx.x, ::blockIdx.y, ::blockIdx.z,
             at(first).c_str(), B->alive, B->n, B->n - B->alive, who);
    return buf;
  }
  if (B->alive < B->n && !other && exited && exited->empty()) {
    snprintf(buf, sizeof buf, "__syncthreads()%s was reached only by the threads of its "
             "block that had not exited (the others returned before it): sound from Volta on "
             "(sm_70+, a barrier waits only for threads that have not exited; sm_90 presented), "
             "undefined on sm_6x and older", at(first).c_str());
    *exited = buf;
  }
  if (other) {
    snprintf(buf, sizeof buf, "barrier divergence in block (%u,%u,%u): its threads wait at two "
             "different barriers, __syncthreads()%s and __syncthreads()%s (a barrier in code "
             "whose condition differs across the block: compute-sanitizer's synccheck reports "
             "it)", ::blockIdx.x, ::blockIdx.y, ::blockIdx.z, at(first).c_str(),
             at(other).c_str());
    return buf;
  }
  return "";
}

struct Shared {
  std::atomic<unsigned long long> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string error;
  std::string undefined;  // an undefined shuffle read (undefined_read), of the lowest block
  std::string exited;     // a barrier that threads which had exited did not reach (a note)
  unsigned long long undefined_block = ~0ull;
};

// --use_fast_math (nvcc defines __USE_FAST_MATH__) or -ftz=true alone (NORMCHECK_FTZ): float
// arithmetic flushes subnormal inputs and results to zero while the blocks run -- MXCSR's DAZ
// and FTZ on this worker thread, set before any fiber starts (the switch never touches MXCSR)
// and restored after.  x86 flushes doubles too, where a GPU flushes only .f32; the conversions
// to and from half and bfloat16 are bit operations here, untouched, as on the GPU.
struct FtzScope {
#if defined(__USE_FAST_MATH__) || defined(NORMCHECK_FTZ)
  unsigned old = __builtin_ia32_stmxcsr();
  FtzScope() { __builtin_ia32_ldmxcsr(old | 0x8040u); }
  ~FtzScope() { __builtin_ia32_ldmxcsr(old); }
#endif
};

NC_NOTSAN static void run_blocks(Thunk thunk, LaunchParams* p, Shared* S) {
  FtzScope ftz;
  alt_stack();
  tls_fill = (unsigned char)p->fill;
  unsigned long long total = (unsigned long long)p->grid[0] * p->grid[1] * p->grid[2];
  int n = (int)(p->block[0] * p->block[1] * p->block[2]);
  std::vector<Fiber> fibers((size_t)n);
  for (int t = 0; t < n; ++t) {
    std::memset(&fibers[t], 0, sizeof(Fiber));
    fibers[t].stack = take_stack();
    if (!fibers[t].stack) {
      std::lock_guard<std::mutex> lk(S->mu);
      S->error = "could not map fiber stacks";
      S->failed = true;
      for (int k = 0; k < t; ++k) give_stack(fibers[k].stack);
      return;
    }
  }
  // dynamic shared memory between inaccessible pages: its end against the upper one (16-byte
  // aligned: the at most 15 bytes left before it are checked exactly in the hazard run), so an
  // overrun faults as out of bounds at its line, never corrupting the heap
  DynSmem dyn((size_t)p->shared_mem);
  if (!dyn.base) {
    std::lock_guard<std::mutex> lk(S->mu);
    S->error = "could not map the dynamic shared memory";
    S->failed = true;
    for (int k = 0; k < n; ++k) give_stack(fibers[k].stack);
    return;
  }
  unsigned char* smem_al = dyn.base;
  hz_on = p->hazards;
  std::vector<int> order((size_t)n), runlist((size_t)n);
  int nwarps = (n + 31) / 32;
  std::vector<int> warp_order((size_t)nwarps);
  BlockCtx B;
  std::string undefined, first_undefined;  // this block's undefined read, and the lowest block's
  std::string exited;  // the first barrier of this worker's blocks that exited threads skipped
  unsigned long long first_block = ~0ull;
  B.undefined = &undefined;
  tls_block = &B;
  ++tls_shared_launch;  // a new launch on this OS thread: its kernel's declarations mark it
  tls_thunk = thunk;
  tls_args = p->args;
  ::blockDim = dim3(p->block[0], p->block[1], p->block[2]);
  ::gridDim = dim3(p->grid[0], p->grid[1], p->grid[2]);
  tls_dyn_smem = smem_al;
  tls_dyn_smem_size = p->shared_mem;
  unsigned long long rng = p->seed * 6364136223846793005ull + 1442695040888963407ull;
  for (;;) {
    if (S->failed) break;
    unsigned long long b = S->next.fetch_add(1);
    if (b >= total) break;
    if (p->schedule == 2) b = permuted_block(b, total, p->seed);
    // a subset launch (which block writes which element): only the blocks whose linear index
    // b has (b & block_mask) == block_val run
    if ((b & p->block_mask) != p->block_val) continue;
    ::blockIdx.x = (unsigned)(b % p->grid[0]);
    ::blockIdx.y = (unsigned)((b / p->grid[0]) % p->grid[1]);
    ::blockIdx.z = (unsigned)(b / ((unsigned long long)p->grid[0] * p->grid[1]));
    // thread order
    for (int w = 0; w < nwarps; ++w) warp_order[w] = w;
    if (p->schedule == 1) std::reverse(warp_order.begin(), warp_order.end());
    if (p->schedule == 2 || p->schedule == 3) {  // 3: the warps only, blocks in order
      for (int w = nwarps - 1; w > 0; --w) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull + b;
        int k = (int)((rng >> 33) % (unsigned long long)(w + 1));
        std::swap(warp_order[w], warp_order[k]);
      }
    }
    int k = 0;
    for (int wi = 0; wi < nwarps; ++wi) {
      int w = warp_order[wi];
      int lo = 32 * w, hi = std::min(n, 32 * w + 32);
      if (p->schedule == 1)
        for (int t = hi - 1; t >= lo; --t) order[k++] = t;
      else
        for (int t = lo; t < hi; ++t) order[k++] = t;
    }
    // block state
    B.fibers = fibers.data();
    B.n = n;
    B.alive = n;
    B.at_barrier = 0;
    B.bar_count = B.bar_and = B.bar_or = 0;
    B.nwarps = nwarps;
    B.order = order.data();
    B.runlist = runlist.data();
    for (int w = 0; w < 32; ++w) {
      int lanes = std::max(0, std::min(32, n - 32 * w));
      B.warp_alive[w] = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
      B.warp_waiting[w] = 0;
    }
    for (int t = 0; t < n; ++t) {
      Fiber* f = &fibers[t];
      f->tid.x = (unsigned)(t % p->block[0]);
      f->tid.y = (unsigned)((t / p->block[0]) % p->block[1]);
      f->tid.z = (unsigned)(t / (p->block[0] * p->block[1]));
      f->linear = t;
      f->lane = t & 31;
      f->warp = t >> 5;
      f->state = RUNNABLE;
      f->mask = 0;
      f->smem_bar = 0;
      std::memset(f->vc, 0, sizeof f->vc);
      f->vc[f->lane] = 1;
      init_fiber_stack(f);
    }
    if (p->shared_mem) std::memset(smem_al, tls_fill, (size_t)p->shared_mem);  // poison: NaN
    for (const SharedRegion& r : shared_regions()) std::memset(r.p, tls_fill, r.size);  // static
    hz_block_start(smem_al, p->shared_mem);
    // schedule
    bool dead = false;
    while (B.alive > 0) {
      B.runlen = 0;
      for (int i = 0; i < n; ++i)
        if (fibers[order[i]].state == RUNNABLE) runlist[B.runlen++] = order[i];
      if (B.runlen > 0) {
        B.runpos = 0;
        tls_cur = &fibers[runlist[0]];
        ::threadIdx = tls_cur->tid;
        ncsimt_switch(&B.sched_sp, tls_cur->sp);
        tls_cur = nullptr;
        continue;
      }
      if (B.at_barrier == B.alive) {
        std::string divergent = barrier_divergence(&B, &exited);
        if (!divergent.empty()) {  // synccheck's finding: the launch fails with it
          std::lock_guard<std::mutex> lk(S->mu);
          if (!S->failed) S->error = divergent;
          S->failed = true;
          dead = true;
          break;
        }
        hz_barrier();
        int count = 0;
        for (int t = 0; t < n; ++t)
          if (fibers[t].state == AT_BARRIER) {
            count += fibers[t].bar_pred;
            fibers[t].state = RUNNABLE;
          }
        B.bar_count = count;
        B.bar_and = count == B.alive;
        B.bar_or = count > 0;
        B.at_barrier = 0;
        continue;
      }
      dead = true;
      break;
    }
    if (dead) {
      std::lock_guard<std::mutex> lk(S->mu);
      if (!S->failed) S->error = deadlock_message(&B);
      S->failed = true;
      break;
    }
    std::string hazard = hz_take();
    if (!hazard.empty()) {  // a race in this block: the launch fails with the first
      std::lock_guard<std::mutex> lk(S->mu);
      if (!S->failed) S->error = hazard;
      S->failed = true;
      break;
    }
    if (!undefined.empty()) {
      if (b < first_block) { first_block = b; first_undefined = undefined; }
      undefined.clear();
    }
  }
  if (!first_undefined.empty()) {
    std::lock_guard<std::mutex> lk(S->mu);
    if (first_block < S->undefined_block) {
      S->undefined_block = first_block;
      S->undefined = first_undefined;
    }
  }
  if (!exited.empty()) {
    std::lock_guard<std::mutex> lk(S->mu);
    if (S->exited.empty()) S->exited = exited;
  }
  if (!S->failed) {
    std::string refused = shared_total_refused(p);
    if (!refused.empty()) {
      std::lock_guard<std::mutex> lk(S->mu);
      if (!S->failed) S->error = refused;
      S->failed = true;
    }
  }
  tls_block = nullptr;
  tls_cur = nullptr;
  hz_on = 0;
  hz_span();
  for (int t = 0; t < n; ++t) give_stack(fibers[t].stack);
}

static int launch(Thunk thunk, LaunchParams* p) {
  find_module_span();
  install_handlers();
  alt_stack();
  g_report = p->report;
  g_report_len = p->report_len;
  g_nbuffers = std::min(p->nbuffers, 64);
  for (int i = 0; i < g_nbuffers; ++i) {
    g_buffers[i].begin = (uintptr_t)p->buf_begin[i];
    g_buffers[i].end = (uintptr_t)p->buf_end[i];
    g_buffers[i].lo = p->buf_lo ? (uintptr_t)p->buf_lo[i] : g_buffers[i].begin;
    g_buffers[i].hi = p->buf_hi ? (uintptr_t)p->buf_hi[i] : g_buffers[i].end;
    g_buffers[i].arg = p->buf_arg[i];
    g_buffers[i].itemsize = p->buf_itemsize[i];
  }
  stack_size();
  std::string refused = launch_refused(p);
  if (!refused.empty()) {
    snprintf(p->err, (size_t)p->errlen, "%s", refused.c_str());
    return 2;
  }
  int n = (int)(p->block[0] * p->block[1] * p->block[2]);
  if (n <= 0 || n > 1024) {
    snprintf(p->err, (size_t)p->errlen, "launch refused: invalid configuration argument -- a "
             "block of %d threads (1 to 1024 a block)", n);
    return 2;
  }
  Shared S;
  unsigned long long total = (unsigned long long)p->grid[0] * p->grid[1] * p->grid[2];
  int nw = std::max(1, p->nworkers);
  if ((unsigned long long)nw > total) nw = (int)std::max(1ull, total);
  if (nw == 1) {
    run_blocks(thunk, p, &S);
  } else {
    std::vector<std::thread> th;
    for (int i = 0; i < nw; ++i) th.emplace_back(run_blocks, thunk, p, &S);
    for (auto& t : th) t.join();
  }
  if (S.failed) {
    snprintf(p->err, (size_t)p->errlen, "%s", S.error.c_str());
    return 1;
  }
  // a launch that completed may leave a note: the first undefined shuffle read (the caller
  // passes err zeroed; a note does not replace one already there)
  if (p->err[0] == 0 && (!S.undefined.empty() || !S.exited.empty()))
    snprintf(p->err, (size_t)p->errlen, "%s%s%s", S.undefined.c_str(),
             !S.undefined.empty() && !S.exited.empty() ? "; " : "", S.exited.c_str());
  return 0;
}

// ------------------------------------------------------------------------------------------------
// Host entries: a host function (a project's own launcher) called on this thread; the kernels it
// launches run in order with the outer launch's settings
// ------------------------------------------------------------------------------------------------
static thread_local LaunchParams* tls_outer = nullptr;
static thread_local std::string* tls_host_error = nullptr;

// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n) of the host
// code: each kernel's opt-in (a launch of it may then ask for up to n bytes)
static std::mutex g_attr_mu;
static std::vector<std::pair<const void*, int>> g_max_dyn_smem;

// A kernel launched with <<<...>>> is called through a lambda (its template arguments deduced
// from the call's, as nvcc deduces them), so the shim does not know its address: such a launch
// may have what the host code opted any kernel in to (none: 48 KiB).  A typed launch
// (cudaLaunchKernelEx, cudaLaunchKernel) is held to its own kernel's opt-in.
static unsigned long long opted_in(const void* fn) {
  std::lock_guard<std::mutex> lk(g_attr_mu);
  unsigned long long most = 0;
  for (auto& a : g_max_dyn_smem) {
    if (fn && a.first == fn) return (unsigned long long)a.second;
    if ((unsigned long long)a.second > most) most = (unsigned long long)a.second;
  }
  return fn ? 0 : most;  // 0: never set, 48 KiB
}

int run_nested(Thunk thunk, void** args, dim3 grid, dim3 block, unsigned long long smem,
               const void* fn) {
  LaunchParams* o = tls_outer;
  if (!o) {
    std::fprintf(stderr, "normcheck: the kernel's host code launched a kernel outside a host "
                         "entry (name the launching function as the spec's entry, host = true)\n");
    std::abort();
  }
  if (tls_host_error && !tls_host_error->empty()) return 1;  // an earlier launch failed
  LaunchParams q = *o;
  q.grid[0] = grid.x; q.grid[1] = grid.y; q.grid[2] = grid.z;
  q.block[0] = block.x; q.block[1] = block.y; q.block[2] = block.z;
  q.shared_mem = smem;
  q.args = args;
  q.max_dyn_smem = opted_in(fn);
  unsigned long long total = (unsigned long long)grid.x * grid.y * grid.z;
  if (total == 0) return 0;
  int rc = launch(thunk, &q);
  if (rc != 0 && tls_host_error) {
    *tls_host_error = q.err;
    const uintptr_t at = (uintptr_t)__builtin_return_address(0);
    if (tls_host_error->rfind("launch refused", 0) == 0 && in_module(at)) {
      char buf[64];  // the launch's line in the host code (the parent names it)
      snprintf(buf, sizeof buf, "; launched [pc 0x%llx]", (unsigned long long)(at - 1 - g_mod_lo));
      *tls_host_error += buf;
    }
  }
  return rc;
}

static int host_entry(Thunk thunk, LaunchParams* p) {
  std::string error;
  tls_outer = p;
  tls_host_error = &error;
  // the host code's own faults (an unresolved library call before any launch) are reported too
  g_report = p->report;
  g_report_len = p->report_len;
  thunk(p->args);
  tls_outer = nullptr;
  tls_host_error = nullptr;
  if (!error.empty()) {
    snprintf(p->err, (size_t)p->errlen, "%s", error.c_str());
    return error.rfind("launch refused", 0) == 0 ? 2 : 1;
  }
  return 0;
}

// ------------------------------------------------------------------------------------------------
// Entry thunks and signatures
// ------------------------------------------------------------------------------------------------
// One overload of a kernel by its parameter types (an entry "ln(float*, int)"): Pick<P...>::of(&f)
// converts the overload set to the pointer of that type, deducing the return type.
template <class... P> struct Pick {
  template <class R> static constexpr R (*of(R (*f)(P...)))(P...) { return f; }
};
template <class F> struct Caller;
template <class R, class... A> struct Caller<R (*)(A...)> {
  template <size_t... I>
  static void call(R (*f)(A...), void** args, std::index_sequence<I...>) {
    (void)f(*reinterpret_cast<typename std::remove_cv<typename std::remove_reference<A>::type>::type*>(args[I])...);
  }
  static void run(R (*f)(A...), void** args) { call(f, args, std::index_sequence_for<A...>{}); }
  static std::string signature() {
    std::string s;
    const char* names[] = {type_name<A>()..., nullptr};
    size_t sizes[] = {sizeof(A)..., 0};
    size_t pointee[] = {pointee_size<A>()..., 0};
    for (size_t i = 0; i < sizeof...(A); ++i) {
      s += names[i];
      s += "\x1f";
      s += std::to_string(sizes[i]);
      s += "\x1f";
      s += std::to_string(pointee[i]);
      s += "\x1e";
    }
    return s;
  }
  template <class T> static const char* type_name() { return __PRETTY_FUNCTION__; }
  template <class P, class = void> struct complete_size { static constexpr size_t value = 0; };
  template <class P> struct complete_size<P, std::void_t<decltype(sizeof(P))>> {
    static constexpr size_t value = sizeof(P);
  };
  template <class T> static constexpr size_t pointee_size() {
    typedef typename std::remove_cv<typename std::remove_reference<T>::type>::type U;
    if constexpr (std::is_pointer<U>::value) {
      typedef typename std::remove_cv<typename std::remove_pointer<U>::type>::type P;
      if constexpr (std::is_void<P>::value) return 0;
      else return complete_size<P>::value;  // 0 for an opaque type (cudaStream_t's CUstream_st)
    } else {
      return 0;
    }
  }
};

unsigned shfl_ptx(int mode, unsigned a, unsigned b, unsigned c, unsigned mask, bool* pred) {
  Fiber* f = tls_cur;
  deposit(f, a);
  f->op = OP_SHFL_PTX;
  f->param = (int)b;
  f->width = (int)c;
  f->param2 = mode;
  f->mask = mask;
  warp_collective(f);
  if (pred) *pred = f->result_u != 0;
  return collect<unsigned>(f);
}

}  // namespace ncsimt

extern "C" [[noreturn]] void ncsimt_unresolved_call(const char* sym, void* caller) {
  ::ncsimt::unresolved_call(sym, caller);
}

// Alignment as a GPU requires it.  The module is compiled with -fsanitize=alignment: every
// access through a typed pointer checks the address against the type's alignment (__half2 4,
// __nv_bfloat162 4, float2 8, float4/int4/uint4 16, float 4 ...), where x86 would read a
// misaligned __half2 without a word and a GPU faults ("misaligned address").  GCC calls these
// (the layout is libsanitizer's TypeMismatchData, v1); the launch fails as misaligned, with the
// argument, the element, the block, the thread and the line (the caller's pc).
struct NcUbsanLocation { const char* file; unsigned line, column; };
struct NcUbsanTypeMismatch {
  NcUbsanLocation loc;
  const void* type;
  unsigned char log_alignment;
  unsigned char check_kind;  // 0 load, 1 store, 2 reference binding, 3 member access ...
};
static void nc_misaligned(NcUbsanTypeMismatch* d, uintptr_t ptr, uintptr_t ret) {
  const int align = 1 << d->log_alignment;
  if (ptr == 0 || ptr % (uintptr_t)align == 0) return;  // a null pointer: not this check's
  ::ncsimt::fault_misaligned_at(ptr, align, d->check_kind == 1, ret);
}
extern "C" __attribute__((visibility("hidden"))) void __ubsan_handle_type_mismatch_v1(
    NcUbsanTypeMismatch* d, uintptr_t ptr) {
  nc_misaligned(d, ptr, (uintptr_t)__builtin_return_address(0));
}
extern "C" __attribute__((visibility("hidden"))) void __ubsan_handle_type_mismatch_v1_abort(
    NcUbsanTypeMismatch* d, uintptr_t ptr) {
  nc_misaligned(d, ptr, (uintptr_t)__builtin_return_address(0));
}

#include "normcheck_hazards.h"

NC_EXPORT int ncsimt_shim_version() { return ::ncsimt::SHIM_VERSION; }

// Map [offset, offset+len) of the file fd (the caller's arrays) with an inaccessible page on
// each side; returns the base of the whole region (len + 2 pages).
NC_EXPORT void* ncsimt_map_guarded(int fd, unsigned long long offset, unsigned long long len) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t total = (size_t)len + 2 * page;
  void* m = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  void* d = mmap((char*)m + page, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)offset);
  if (d == MAP_FAILED) {
    munmap(m, total);
    return nullptr;
  }
  return m;
}

NC_EXPORT void ncsimt_free_guarded(unsigned long long map_base, unsigned long long map_len) {
  munmap((void*)(uintptr_t)map_base, (size_t)map_len);
}

#define NORMCHECK_HOST_ENTRY(IDX, ...)                                                         \
  static void ncsimt_thunk_##IDX(void** args) { ::ncsimt::Caller<decltype(&__VA_ARGS__)>::run(&__VA_ARGS__, args); } \
  NC_EXPORT int ncsimt_launch_##IDX(::ncsimt::LaunchParams* p) {                                \
    ::ncsimt::install_handlers();                                                                \
    ::ncsimt::alt_stack();                                                                       \
    return ::ncsimt::host_entry(ncsimt_thunk_##IDX, p);                                         \
  }                                                                                              \
  NC_EXPORT const char* ncsimt_signature_##IDX() {                                              \
    static std::string s = ::ncsimt::Caller<decltype(&__VA_ARGS__)>::signature();               \
    return s.c_str();                                                                            \
  }

#define NORMCHECK_ENTRY(IDX, ...)                                                              \
  static void ncsimt_thunk_##IDX(void** args) { ::ncsimt::Caller<decltype(&__VA_ARGS__)>::run(&__VA_ARGS__, args); } \
  NC_EXPORT int ncsimt_launch_##IDX(::ncsimt::LaunchParams* p) { return ::ncsimt::launch(ncsimt_thunk_##IDX, p); } \
  NC_EXPORT const char* ncsimt_signature_##IDX() {                                              \
    static std::string s = ::ncsimt::Caller<decltype(&__VA_ARGS__)>::signature();               \
    return s.c_str();                                                                            \
  }

// ------------------------------------------------------------------------------------------------
// The CUDA runtime API a host entry may call: one stated device (the properties of the GPU of the
// architecture normcheck presents: sm_80 an A100, sm_90 an H100/H200, sm_100 a B200), launch
// attributes accepted, synchronisation immediate (launches run in order), copies and sets plain
// memory operations.  Anything else a host function calls is declared by NVIDIA's headers and
// not defined: calling it is a crash naming the symbol.
// ------------------------------------------------------------------------------------------------

extern "C" {
cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int* v, enum cudaDeviceAttr attr, int) {
  ::ncsimt::DeviceFacts f = ::ncsimt::device_facts();
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: *v = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *v = 64; break;
    case cudaDevAttrMaxGridDimX: *v = 2147483647; break;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: *v = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = 49152; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = f.smem_optin; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = f.smem_per_sm; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMultiProcessorCount: *v = f.sms; break;
    case cudaDevAttrComputeCapabilityMajor: *v = NORMCHECK_CUDA_ARCH / 100; break;
    case cudaDevAttrComputeCapabilityMinor: *v = (NORMCHECK_CUDA_ARCH / 10) % 10; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = 2048; break;
    case cudaDevAttrMaxRegistersPerBlock: case cudaDevAttrMaxRegistersPerMultiprocessor: *v = 65536; break;
    case cudaDevAttrL2CacheSize: *v = f.l2; break;
    case cudaDevAttrClockRate: *v = f.clock_khz; break;
    case cudaDevAttrMemoryClockRate: *v = f.mem_clock_khz; break;
    case cudaDevAttrGlobalMemoryBusWidth: *v = f.bus_bits; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *v = 32; break;
    default: *v = 0; break;
  }
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* p, int) {
  ::ncsimt::DeviceFacts f = ::ncsimt::device_facts();
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "%s", f.name);
  p->totalGlobalMem = f.global_mem;
  p->sharedMemPerBlock = 49152;
  p->sharedMemPerBlockOptin = f.smem_optin;
  p->sharedMemPerMultiprocessor = f.smem_per_sm;
  p->regsPerBlock = 65536;
  p->regsPerMultiprocessor = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536;
  p->major = NORMCHECK_CUDA_ARCH / 100;
  p->minor = (NORMCHECK_CUDA_ARCH / 10) % 10;
  p->multiProcessorCount = f.sms;
  p->l2CacheSize = f.l2;
  p->maxThreadsPerMultiProcessor = 2048;
  p->maxBlocksPerMultiProcessor = 32;
  p->memoryBusWidth = f.bus_bits;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void* fn, enum cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || value > ::ncsimt::device_facts().smem_optin) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lk(::ncsimt::g_attr_mu);
  for (auto& a : ::ncsimt::g_max_dyn_smem)
    if (a.first == fn) { a.second = value; return cudaSuccess; }
  ::ncsimt::g_max_dyn_smem.push_back({fn, value});
  return cudaSuccess;
}
cudaError_t cudaFuncSetCacheConfig(const void*, enum cudaFuncCache) { return cudaSuccess; }
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* a, const void*) {
  std::memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024;
  a->numRegs = 32;
  a->ptxVersion = a->binaryVersion = NORMCHECK_CUDA_ARCH / 10;
  a->maxDynamicSharedSizeBytes = ::ncsimt::device_facts().smem_optin;
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void*, int block, size_t smem) {
  ::ncsimt::DeviceFacts f = ::ncsimt::device_facts();
  int by_threads = block > 0 ? 2048 / block : 0;
  int by_smem = smem ? (int)(f.smem_per_sm / smem) : 32;
  *n = std::max(0, std::min(std::min(by_threads, by_smem), 32));
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, const void* k, int block, size_t smem, unsigned int) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, k, block, smem);
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "normcheck: a launch failed"; }
const char* cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorLaunchFailure"; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) { std::memset(p, v, n); return cudaSuccess; }
cudaError_t cudaMemset(void* p, int v, size_t n) { std::memset(p, v, n); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, enum cudaMemcpyKind, cudaStream_t) { std::memmove(d, s, n); return cudaSuccess; }
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, enum cudaMemcpyKind) { std::memmove(d, s, n); return cudaSuccess; }
cudaError_t cudaMalloc(void** p, size_t n) { *p = std::calloc(1, n ? n : 1); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  ::ncsimt::unsupported("cuda_launch_kernel");
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t*, const void*, void**) {
  ::ncsimt::unsupported("cuda_launch_kernel");
}
cudaError_t cudaLaunchCooperativeKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  ::ncsimt::unsupported("cuda_launch_kernel");
}
}  // extern "C"
