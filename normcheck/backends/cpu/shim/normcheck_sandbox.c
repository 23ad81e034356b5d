// normcheck's sandbox for the cpu backend's worker process, entered before any user code loads.
//
// Three of the operating system's mechanisms, each applied when the kernel offers it:
//  * rlimits: address space, file size (the worker's stderr), no core files;
//  * landlock: files may be read only beneath the folders the worker needs (its build cache,
//    Python's library, normcheck itself); nothing may be written, created or removed anywhere;
//    no TCP bind/connect; no signals to processes outside the sandbox;
//  * seccomp (a BPF filter, installed on every thread with TSYNC): an allow-list
//    (normcheck_allowlist.h: the calls a launch was measured to make, and a few reviewed ones),
//    some of them only with arguments that keep them to this process and to reading (threads
//    but no new process, files opened for reading with O_CLOEXEC, signals to itself, fcntl
//    without leases ...); every other call is trapped: SIGSYS, whose handler writes
//    `kind=sandbox syscall=N` to the report page and ends the process.  The one trapped call a
//    sound process makes, fstat() as glibc and the dynamic loader make it (newfstatat on a
//    descriptor with an empty path), is carried out by the handler (ncsb_emulate) as fstat:
//    a path's metadata is never read.  NORMCHECK_SANDBOX=measure installs no filter
//    (scripts/measure_syscalls.py traces the worker to write the allow-list).
// ncsb_enter returns a bit mask of what is enforced and a one-line description.
//
// The library is also preloaded into the worker (LD_PRELOAD), where it stands in for the libc
// functions that start a process with every signal blocked (system, popen, posix_spawn): there
// seccomp's SIGSYS could not be handled and would kill the worker without a word, so once the
// sandbox is entered a kernel calling one is reported by name instead.
// Written in C, so these definitions match libc's declarations whatever its C++ attributes.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <spawn.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#define NCSB_EXPORT __attribute__((visibility("default")))

enum { ENFORCED_RLIMITS = 1, ENFORCED_LANDLOCK = 2, ENFORCED_SECCOMP = 4 };

static char* g_report = NULL;
static int g_report_len = 0;

static char* put_num(char* p, long long v) {
  char tmp[24];
  int n = 0;
  if (v < 0) { *p++ = '-'; v = -v; }
  do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
  while (n) *p++ = tmp[--n];
  return p;
}

static void report(const char* line, size_t n) {
  if (g_report && g_report_len > 0) {
    if (n >= (size_t)g_report_len) n = (size_t)g_report_len - 1;
    memcpy(g_report, line, n);
    g_report[n] = 0;
  }
  _exit(86);
}

// A forbidden libc call, by name (see the header).
static void forbidden(const char* name) {
  char buf[128];
  char* p = buf;
  const char* k = "kind=sandbox call=";
  while (*k) *p++ = *k++;
  while (*name && p < buf + 100) *p++ = *name++;
  *p++ = '\n';
  report(buf, (size_t)(p - buf));
}

// Before ncsb_enter (the worker's own start-up) each forwards to libc's definition.
static int g_entered = 0;
#define NC_NEXT(NAME) ((NAME##_fn)dlsym(RTLD_NEXT, #NAME))
typedef int (*system_fn)(const char*);
typedef FILE* (*popen_fn)(const char*, const char*);
typedef int (*posix_spawn_fn)(pid_t*, const char*, const posix_spawn_file_actions_t*,
                              const posix_spawnattr_t*, char* const[], char* const[]);
typedef posix_spawn_fn posix_spawnp_fn;

NCSB_EXPORT int system(const char* c) {
  if (!g_entered) return NC_NEXT(system)(c);
  forbidden("system()");
  return -1;
}
NCSB_EXPORT FILE* popen(const char* c, const char* m) {
  if (!g_entered) return NC_NEXT(popen)(c, m);
  forbidden("popen()");
  return NULL;
}
NCSB_EXPORT int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* fa,
                            const posix_spawnattr_t* at, char* const argv[], char* const envp[]) {
  if (!g_entered) return NC_NEXT(posix_spawn)(pid, path, fa, at, argv, envp);
  forbidden("posix_spawn()");
  return -1;
}
NCSB_EXPORT int posix_spawnp(pid_t* pid, const char* path, const posix_spawn_file_actions_t* fa,
                             const posix_spawnattr_t* at, char* const argv[], char* const envp[]) {
  if (!g_entered) return NC_NEXT(posix_spawnp)(pid, path, fa, at, argv, envp);
  forbidden("posix_spawnp()");
  return -1;
}

// A trapped call a sound process makes, carried out here as the call it stands for: fstat
// (glibc's fstat and the dynamic loader's are newfstatat(fd, "", buf, AT_EMPTY_PATH); with a
// path, or without the flag, it would read a path's metadata and stays trapped).  Returns 1
// when the call was carried out (its result in rax), 0 when it is a violation.  Called by the
// handler below and by the shim runtime's (a launch installs its own).
static int g_stat_paths = 0;  // ncsb_stat_paths(1): a path's stat carried out as open + fstat

// A Python worker that imports modules after entering the sandbox (the Triton worker: a kernel
// file's imports run confined) stats the files of its import path: with this set, stat of a
// path is carried out as openat(O_RDONLY) + fstat + close -- landlock decides the open, so only
// the metadata of a file the worker may read anyway is ever given (a path outside its roots
// answers EACCES, as its open does).  A symlink named with AT_SYMLINK_NOFOLLOW answers EACCES:
// describing the link itself would take O_PATH, which landlock does not check.  isatty()
// answers "not a terminal", a read-only open without O_CLOEXEC gets it, access() answers as an
// open for reading does (writing: EACCES), readlink answers EINVAL, mkdir answers as a read-only
// file system does (EEXIST, EROFS: ncsb_emulate).
NCSB_EXPORT void ncsb_stat_paths(int on) { g_stat_paths = on; }

static long raw3(long nr, long a, long b, long c) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "a"(nr), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return r;
}
static long raw4(long nr, long a, long b, long c, long d) {
  long r;
  register long r10 __asm__("r10") = d;
  __asm__ volatile("syscall" : "=a"(r) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
                   : "rcx", "r11", "memory");
  return r;
}

// A kernel module's host code (a launcher, a static constructor) probing for a file -- access()
// of an injection library or a device node, stat() of a /proc or /sys path, readlink() of
// /proc/self/exe, a read-only fopen() without "e" -- is answered "not there" (ENOENT) without
// the call: such probes are how sound host code looks for optional things, and it goes on
// without them (the CUDA worker reads nothing it was not given; nothing about a path is
// told).  Writing, creating or anything else stays trapped.  Returns 1 when answered.
static int ncsb_probe(siginfo_t* info, greg_t* g) {
  const long nr = info->si_syscall;
  const long writes = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND | 0x400000 /* __O_TMPFILE */;
  if (nr == SYS_access || nr == SYS_faccessat || nr == 439 /* faccessat2 */ ||
      nr == SYS_stat || nr == SYS_lstat || nr == SYS_newfstatat ||
      nr == SYS_readlink || nr == SYS_readlinkat ||
      (nr == SYS_openat && !(g[REG_RDX] & writes)) || (nr == SYS_open && !(g[REG_RSI] & writes))) {
    g[REG_RAX] = -ENOENT;
    return 1;
  }
  if (nr == SYS_statx) {  // statx(fd, "", AT_EMPTY_PATH): glibc falls back to fstat on ENOSYS
    const char* path = (const char*)g[REG_RSI];
    g[REG_RAX] = path && path[0] ? -ENOENT : -ENOSYS;
    return 1;
  }
  return 0;
}

// A trapped call a sound process makes, carried out here as the call it stands for: fstat
// (glibc's fstat and the dynamic loader's are newfstatat(fd, "", buf, AT_EMPTY_PATH); with a
// path, or without the flag, it would read a path's metadata and is answered "not there"
// (ncsb_probe) -- unless ncsb_stat_paths is on, above).  Returns 1 when the call was carried out (its result in rax),
// 0 when it is a violation.  Called by the handler below and by the shim runtime's (a launch
// installs its own).
NCSB_EXPORT int ncsb_emulate(siginfo_t* info, void* vctx) {
  ucontext_t* uc = (ucontext_t*)vctx;
  if (!uc || info->si_code != 1 /* SYS_SECCOMP */) return 0;
  greg_t* g = uc->uc_mcontext.gregs;
  if (info->si_syscall == SYS_newfstatat) {
    const char* path = (const char*)g[REG_RSI];
    if (path && path[0] == 0 && (g[REG_R10] & 0x1000 /* AT_EMPTY_PATH */)) {
      g[REG_RAX] = raw3(SYS_fstat, g[REG_RDI], g[REG_RDX], 0);
      return 1;
    }
    if (path && g_stat_paths) {  // see ncsb_stat_paths
      int nofollow = (g[REG_R10] & 0x100 /* AT_SYMLINK_NOFOLLOW */) != 0;
      long flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (nofollow ? O_NOFOLLOW : 0);
      long fd = raw4(SYS_openat, g[REG_RDI], (long)path, flags, 0);
      if (fd < 0) {
        g[REG_RAX] = fd == -ELOOP && nofollow ? -EACCES : fd;
        return 1;
      }
      long r = raw3(SYS_fstat, fd, g[REG_RDX], 0);
      raw3(SYS_close, fd, 0, 0);
      g[REG_RAX] = r;
      return 1;
    }
  }
  if (!g_stat_paths) return ncsb_probe(info, g);
  // isatty(), as Python's open() asks it of every file it opens: no descriptor of the worker
  // is a terminal (its stdin and stdout are pipes, its stderr a file), so TCGETS answers ENOTTY
  // without the call (ioctl stays off the allow-list)
  if (info->si_syscall == SYS_ioctl && (unsigned)g[REG_RSI] == 0x5401 /* TCGETS */) {
    g[REG_RAX] = -ENOTTY;
    return 1;
  }
  // a file opened for reading without O_CLOEXEC (a library's plain open of /dev/urandom, of
  // /proc/cpuinfo): opened with it -- nothing is ever executed in the worker, so the flag
  // changes nothing else; landlock decides the open.  Writing stays trapped.
  const long writes = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND | 0x400000 /* __O_TMPFILE */;
  if (info->si_syscall == SYS_openat && !(g[REG_RDX] & writes)) {
    g[REG_RAX] = raw4(SYS_openat, g[REG_RDI], g[REG_RSI], g[REG_RDX] | O_CLOEXEC, g[REG_R10]);
    return 1;
  }
  if (info->si_syscall == SYS_open && !(g[REG_RSI] & writes)) {
    g[REG_RAX] = raw4(SYS_openat, AT_FDCWD, g[REG_RDI], g[REG_RSI] | O_CLOEXEC, g[REG_RDX]);
    return 1;
  }
  // access(): whether a file exists and may be read, as its open for reading says (landlock
  // decides: never the existence of a path the worker may not read); writing, never
  if (info->si_syscall == SYS_access || info->si_syscall == SYS_faccessat ||
      info->si_syscall == 439 /* faccessat2 */) {
    const int at = info->si_syscall != SYS_access;
    const long dirfd = at ? g[REG_RDI] : AT_FDCWD;
    const long path = at ? g[REG_RSI] : g[REG_RDI];
    const long mode = at ? g[REG_RDX] : g[REG_RSI];
    if (mode & 2 /* W_OK */) {
      g[REG_RAX] = -EACCES;
      return 1;
    }
    long fd = raw4(SYS_openat, dirfd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0);
    if (fd >= 0) raw3(SYS_close, fd, 0, 0);
    g[REG_RAX] = fd >= 0 ? 0 : fd;
    return 1;
  }
  // mkdir, as on a read-only file system: an existing folder the worker may read answers EEXIST
  // (os.makedirs(d, exist_ok=True) of torch's cache folder, told the worker's own: goes on), an
  // absent one EROFS; where landlock refuses the open, its answer (never a path's existence)
  if (info->si_syscall == SYS_mkdir || info->si_syscall == SYS_mkdirat) {
    const int at = info->si_syscall == SYS_mkdirat;
    long fd = raw4(SYS_openat, at ? g[REG_RDI] : AT_FDCWD, at ? g[REG_RSI] : g[REG_RDI],
                   O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0);
    if (fd >= 0) raw3(SYS_close, fd, 0, 0);
    g[REG_RAX] = fd >= 0 ? -EEXIST : fd == -ENOENT ? -EROFS : fd;
    return 1;
  }
  // where a link points: not told (the worker's links are normcheck's own import folder, which
  // Python resolves only to name files); answered as for a path that is not a link
  if (info->si_syscall == SYS_readlink || info->si_syscall == SYS_readlinkat) {
    g[REG_RAX] = -EINVAL;
    return 1;
  }
  return 0;
}

// While no kernel launch has installed its own handler (e.g. while a module's static
// constructors run at load time), a trapped call or a crash is still reported.
static void on_signal(int sig, siginfo_t* info, void* ctx) {
  if (sig == SIGSYS && ncsb_emulate(info, ctx)) return;
  char buf[160];
  char* p = buf;
  const char* k = sig == SIGSYS ? "kind=sandbox syscall=" :
                  sig == SIGXFSZ ? "kind=sandbox detail=file_size" :
                  sig == SIGXCPU ? "kind=sandbox detail=cpu_time" :
                  "kind=crash detail=while_loading signal=";
  while (*k) *p++ = *k++;
  if (sig == SIGSYS) p = put_num(p, info->si_syscall);
  else if (sig != SIGXFSZ && sig != SIGXCPU) p = put_num(p, sig);
  *p++ = '\n';
  report(buf, (size_t)(p - buf));
}

// ------------------------------------------------------------------------------------------------
// seccomp
// ------------------------------------------------------------------------------------------------
#include "normcheck_allowlist.h"  // ncsb_allowed[]: generated by scripts/measure_syscalls.py

enum { PROG_MAX = 1024 };
typedef struct {
  struct sock_filter f[PROG_MAX];
  int n, overflow;
} Prog;
static void stmt(Prog* p, uint16_t code, uint32_t k) {
  struct sock_filter s = BPF_STMT(code, k);
  if (p->n < PROG_MAX) p->f[p->n++] = s;
  else p->overflow = 1;
}
static void jump(Prog* p, uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) {
  struct sock_filter s = BPF_JUMP(code, k, jt, jf);
  if (p->n < PROG_MAX) p->f[p->n++] = s;
  else p->overflow = 1;
}
static void load_nr(Prog* p) { stmt(p, BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)); }
static void load_arg_lo(Prog* p, int i) {
  stmt(p, BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args) + 8 * i);
}
// if nr == n: return ret
static void ret_if(Prog* p, int n, uint32_t ret) {
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)n, 0, 1);
  stmt(p, BPF_RET | BPF_K, ret);
}
// if nr == n: return (arg_i & mask) ? allow : trap
static void allow_if_bits(Prog* p, int n, int i, uint32_t mask) {
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)n, 0, 4);
  load_arg_lo(p, i);
  jump(p, BPF_JMP | BPF_JSET | BPF_K, mask, 0, 1);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_TRAP);
}
// if nr == n: trap when (arg_i & write_mask) or !(arg_i & need), else allow
static void open_rule(Prog* p, int n, int i, uint32_t write_mask, uint32_t need) {
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)n, 0, 5);
  load_arg_lo(p, i);
  jump(p, BPF_JMP | BPF_JSET | BPF_K, write_mask, 2, 0);
  jump(p, BPF_JMP | BPF_JSET | BPF_K, need, 0, 1);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_TRAP);
}
// if nr == n: return arg_i == v ? allow : trap
static void allow_if_eq(Prog* p, int n, int i, uint32_t v) {
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)n, 0, 4);
  load_arg_lo(p, i);
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, v, 0, 1);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_TRAP);
}
// if nr == n: return (arg_i == 0 || arg_i == self) ? allow : trap -- a pid or thread argument
// naming this process (0 or its own pid), never another one
static void allow_if_self(Prog* p, int n, int i, uint32_t self) {
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)n, 0, 5);
  load_arg_lo(p, i);
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 0);
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, self, 1, 0);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_TRAP);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
}
// if nr == n: allow only (which == process_kind && (who == 0 || who == self)): one process
// named, and it is this one (never a process group or every process of the user)
static void allow_who_self(Prog* p, int n, uint32_t process_kind, uint32_t self) {
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)n, 0, 7);
  load_arg_lo(p, 0);
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, process_kind, 0, 3);
  load_arg_lo(p, 1);
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 0);
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, self, 1, 0);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_TRAP);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
}
static void load_arg_hi(Prog* p, int i) {
  stmt(p, BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args) + 8 * i + 4);
}

// if nr == n: allow when arg_i (its low word) is one of vals[0..nv), else trap
static void allow_if_in(Prog* p, int n, int i, const uint32_t* vals, int nv) {
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)n, 0, (uint8_t)(nv + 3));
  load_arg_lo(p, i);
  for (int j = 0; j < nv; ++j) jump(p, BPF_JMP | BPF_JEQ | BPF_K, vals[j], (uint8_t)(nv - j), 0);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_TRAP);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
}

static Prog g_prog;

static int install_seccomp(void) {
  const uint32_t pid = (uint32_t)getpid();
  const uint32_t write_flags = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND | 0x400000 /* __O_TMPFILE */;
  Prog* p = &g_prog;
  p->n = 0;
  stmt(p, BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  load_nr(p);
  jump(p, BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1);  // the x32 ABI
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_TRAP);
  // new processes; threads (clone with CLONE_THREAD) are the launch's and allowed
  allow_if_bits(p, SYS_clone, 0, 0x00010000u /* CLONE_THREAD */);
  load_nr(p);
  ret_if(p, SYS_clone3, SECCOMP_RET_ERRNO | ENOSYS);  // glibc falls back to clone
  ret_if(p, SYS_openat2, SECCOMP_RET_ERRNO | ENOSYS);
  // files opened for writing, creating or truncating; and reads without O_CLOEXEC (fopen, a
  // plain open: the worker itself, dlopen and Python open every file with O_CLOEXEC) -- a
  // read that landlock refuses anyway is reported as the attempt it is
  open_rule(p, SYS_open, 1, write_flags, O_CLOEXEC);
  load_nr(p);
  open_rule(p, SYS_openat, 2, write_flags, O_CLOEXEC);
  load_nr(p);
  // prlimit64: only to read this process's limits (glibc's getrlimit); never to set a limit,
  // nor on another process
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)SYS_prlimit64, 0, 9);
  load_arg_lo(p, 0);
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0);
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, pid, 0, 5);
  load_arg_lo(p, 2);
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 3);
  load_arg_hi(p, 2);
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_TRAP);
  load_nr(p);
  // prctl: PR_SET_PDEATHSIG (dying with the parent) and PR_SET_CHILD_SUBREAPER stay as set
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)SYS_prctl, 0, 5);
  load_arg_lo(p, 0);
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, 1 /* PR_SET_PDEATHSIG */, 2, 0);
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, 36 /* PR_SET_CHILD_SUBREAPER */, 1, 0);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_TRAP);
  load_nr(p);
  // priorities, scheduling and I/O priority: this process's own threads only (arg: 0 or pid;
  // setpriority's and ioprio_set's `who` is the second argument)
  allow_who_self(p, SYS_setpriority, 0 /* PRIO_PROCESS */, pid);
  load_nr(p);
  allow_who_self(p, SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, pid);
  load_nr(p);
  allow_if_self(p, SYS_sched_setaffinity, 0, pid);
  load_nr(p);
  allow_if_self(p, SYS_sched_setscheduler, 0, pid);
  load_nr(p);
  allow_if_self(p, SYS_sched_setparam, 0, pid);
  load_nr(p);
  allow_if_self(p, SYS_sched_setattr, 0, pid);
  load_nr(p);
  // signals: to this process only (abort() and raise() use them)
  allow_if_eq(p, SYS_kill, 0, pid);
  load_nr(p);
  allow_if_eq(p, SYS_tgkill, 0, pid);
  load_nr(p);
  allow_if_eq(p, SYS_rt_sigqueueinfo, 0, pid);
  load_nr(p);
  allow_if_eq(p, SYS_rt_tgsigqueueinfo, 0, pid);
  load_nr(p);
  // fcntl: descriptor flags, status flags, duplicates and record locks' queries; never a
  // lease (F_SETLEASE stalls others' writes to the file), a lock or a signal owner
  static const uint32_t fcntl_cmds[] = {0 /* F_DUPFD */, 1 /* F_GETFD */, 2 /* F_SETFD */,
                                        3 /* F_GETFL */, 4 /* F_SETFL */,
                                        1030 /* F_DUPFD_CLOEXEC */};
  allow_if_in(p, SYS_fcntl, 1, fcntl_cmds, (int)(sizeof fcntl_cmds / sizeof fcntl_cmds[0]));
  load_nr(p);
  // madvise: memory of this process only, but not MADV_HWPOISON (100) or SOFT_OFFLINE (101)
  jump(p, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)SYS_madvise, 0, 4);
  load_arg_lo(p, 2);
  jump(p, BPF_JMP | BPF_JGE | BPF_K, 100u, 0, 1);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_TRAP);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  load_nr(p);
  // the allow-list: every call not above or here is trapped (fails closed: a call the kernel's
  // Linux adds later is refused too)
  for (size_t i = 0; i < sizeof ncsb_allowed / sizeof ncsb_allowed[0]; ++i)
    ret_if(p, ncsb_allowed[i], SECCOMP_RET_ALLOW);
  stmt(p, BPF_RET | BPF_K, SECCOMP_RET_TRAP);
  if (p->overflow) return -1;
  struct sock_fprog prog;
  prog.len = (unsigned short)p->n;
  prog.filter = p->f;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  // SECCOMP_FILTER_FLAG_TSYNC: every thread of the process, not only this one
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 1u, &prog) != 0) return -1;
  return 0;
}

// ------------------------------------------------------------------------------------------------
// landlock (declared here: the structures are small and stable, and older headers lack them)
// ------------------------------------------------------------------------------------------------
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
struct nc_ruleset_attr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};
struct __attribute__((packed)) nc_path_beneath_attr {
  uint64_t allowed_access;
  int32_t parent_fd;
};
enum {
  LL_EXECUTE = 1ull << 0, LL_WRITE_FILE = 1ull << 1, LL_READ_FILE = 1ull << 2,
  LL_READ_DIR = 1ull << 3, LL_REMOVE_DIR = 1ull << 4, LL_REMOVE_FILE = 1ull << 5,
  LL_MAKE_CHAR = 1ull << 6, LL_MAKE_DIR = 1ull << 7, LL_MAKE_REG = 1ull << 8,
  LL_MAKE_SOCK = 1ull << 9, LL_MAKE_FIFO = 1ull << 10, LL_MAKE_BLOCK = 1ull << 11,
  LL_MAKE_SYM = 1ull << 12, LL_REFER = 1ull << 13, LL_TRUNCATE = 1ull << 14,
  LL_IOCTL_DEV = 1ull << 15,
  LL_NET_BIND = 1ull << 0, LL_NET_CONNECT = 1ull << 1,
  LL_SCOPE_ABSTRACT_UNIX = 1ull << 0, LL_SCOPE_SIGNAL = 1ull << 1,
};

static int install_landlock(const char** dirs, int ndirs) {
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1u /* VERSION */);
  if (abi < 1) return -1;
  struct nc_ruleset_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.handled_access_fs = (1ull << 13) - 1;
  if (abi >= 2) attr.handled_access_fs |= LL_REFER;
  if (abi >= 3) attr.handled_access_fs |= LL_TRUNCATE;
  if (abi >= 5) attr.handled_access_fs |= LL_IOCTL_DEV;
  size_t size = sizeof(uint64_t);
  if (abi >= 4) {
    attr.handled_access_net = LL_NET_BIND | LL_NET_CONNECT;
    size = 2 * sizeof(uint64_t);
  }
  if (abi >= 6) {
    attr.scoped = LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL;
    size = 3 * sizeof(uint64_t);
  }
  int rfd = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0u);
  if (rfd < 0) return -1;
  for (int i = 0; i < ndirs; ++i) {
    int fd = open(dirs[i], O_PATH | O_CLOEXEC);
    if (fd < 0) continue;
    struct nc_path_beneath_attr pb;
    struct stat st;
    // a folder: read and execute beneath it; a file (/dev/urandom): read it
    pb.allowed_access = fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)
                            ? LL_READ_FILE
                            : LL_READ_FILE | LL_READ_DIR | LL_EXECUTE;
    pb.parent_fd = fd;
    syscall(SYS_landlock_add_rule, rfd, 1 /* LANDLOCK_RULE_PATH_BENEATH */, &pb, 0u);
    close(fd);
  }
  int ok = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           syscall(SYS_landlock_restrict_self, rfd, 0u) == 0;
  close(rfd);
  return ok ? (int)abi : -1;
}

// ------------------------------------------------------------------------------------------------
// Every capability gone (bounding set, ambient, effective/permitted/inheritable): a worker run
// as root keeps none.  (normcheck-launch has dropped them already; this is the second lock.)
static int drop_capabilities(void) {
  prctl(PR_CAP_AMBIENT, 4 /* PR_CAP_AMBIENT_CLEAR_ALL */, 0, 0, 0);
  for (int c = 0; c <= 63; ++c) prctl(PR_CAPBSET_DROP, c, 0, 0, 0);
  struct { uint32_t version; int pid; } hdr = {0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0};
  struct { uint32_t eff, perm, inh; } data[2];
  memset(data, 0, sizeof data);
  return (int)syscall(SYS_capset, &hdr, data);
}

NCSB_EXPORT int ncsb_enter(const char** dirs, int ndirs, unsigned long long address_space,
                           unsigned long long file_size, unsigned long long cpu_seconds,
                           char* report, int report_len, char* status, int status_len,
                           int measure) {
  g_report = report;
  g_report_len = report_len;
  g_entered = 1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  int sigs[] = {SIGSYS, SIGXFSZ, SIGXCPU, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; ++i) sigaction(sigs[i], &sa, NULL);
  int mask = 0;
  struct rlimit r;
  int ok = 1;
  r.rlim_cur = r.rlim_max = 0;
  ok &= setrlimit(RLIMIT_CORE, &r) == 0;
  if (file_size) {
    r.rlim_cur = r.rlim_max = file_size;
    ok &= setrlimit(RLIMIT_FSIZE, &r) == 0;
  }
  if (address_space) {
    r.rlim_cur = r.rlim_max = address_space;
    ok &= setrlimit(RLIMIT_AS, &r) == 0;
  }
  if (cpu_seconds) {  // the worker's whole life: normcheck restarts it before it runs out
    r.rlim_cur = r.rlim_max = cpu_seconds;
    ok &= setrlimit(RLIMIT_CPU, &r) == 0;
  }
  drop_capabilities();
  if (ok) mask |= ENFORCED_RLIMITS;
  int abi = install_landlock(dirs, ndirs);
  if (abi > 0) mask |= ENFORCED_LANDLOCK;
  if (measure) {  // the calls are traced (scripts/measure_syscalls.py), none refused
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    static const char mark[] = "ncsb-measure-start";  // what the measurement starts after
    if (write(-1, mark, sizeof mark - 1) < 0) (void)0;
  } else if (install_seccomp() == 0) {
    mask |= ENFORCED_SECCOMP;
  }
  snprintf(status, (size_t)status_len, "rlimits %s; landlock %s (ABI %d); seccomp %s",
           (mask & ENFORCED_RLIMITS) ? "on" : "off",
           (mask & ENFORCED_LANDLOCK) ? "on" : "unavailable", abi > 0 ? abi : 0,
           measure ? "off (measuring)" : (mask & ENFORCED_SECCOMP) ? "on (allow-list)"
                                                                  : "unavailable");
  return mask;
}
