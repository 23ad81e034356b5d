// Kernels that try to reach outside the sandbox, for tests/test_escape.py.  Each writes y[0] = 1
// (or what it learned) if its attempt came back without the sandbox stopping it.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

// The write end of every pipe this process holds: the reply pipe to normcheck among them.
static int reply_pipes(int* fds, int max) {
  int n = 0;
  for (int fd = 0; fd < 256 && n < max; ++fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) continue;
    int fl = fcntl(fd, F_GETFL);
    if ((fl & O_ACCMODE) == O_WRONLY || (fl & O_ACCMODE) == O_RDWR) fds[n++] = fd;
  }
  return n;
}

// A pickle (protocol 2) that calls builtins.eval on `open(PATH, "w").write("pwned")`, behind the
// old 8-byte length header: what made normcheck run code before its replies were checked.
static void forge(const char* path) {
  char expr[512];
  snprintf(expr, sizeof expr, "open(%c%s%c, %cw%c).write(%cpwned%c)", 39, path, 39, 39, 39, 39,
           39);
  unsigned char p[1024];
  int n = 0;
  const char* head = "\x80\x02" "cbuiltins\neval\n";
  memcpy(p + n, head, strlen(head));
  n += (int)strlen(head);
  int len = (int)strlen(expr);
  p[n++] = 'X';  // BINUNICODE
  memcpy(p + n, &len, 4);
  n += 4;
  memcpy(p + n, expr, len);
  n += len;
  p[n++] = 0x85;  // TUPLE1
  p[n++] = 'R';   // REDUCE
  p[n++] = '.';   // STOP
  unsigned long long L = (unsigned long long)n;
  int fds[16];
  int k = reply_pipes(fds, 16);
  for (int i = 0; i < k; ++i) {
    if (write(fds[i], &L, 8) != 8) continue;
    if (write(fds[i], p, n) != n) continue;
  }
}

extern "C" __global__ void forge_reply(float* y, const char* path) {
  if (threadIdx.x == 0) { forge(path); y[0] = 1; }
}

// A reply in the right format, sent ahead of the real one: {"ok": True, "seconds": 0.0}
extern "C" __global__ void forge_wire_reply(float* y) {
  if (threadIdx.x != 0) return;
  unsigned char m[64];
  int n = 0;
  m[n++] = 'm';
  unsigned int two = 2;
  memcpy(m + n, &two, 4); n += 4;
  const char* k1 = "ok";
  unsigned int l1 = 2;
  m[n++] = 's'; memcpy(m + n, &l1, 4); n += 4; memcpy(m + n, k1, 2); n += 2;
  m[n++] = 'T';
  const char* k2 = "seconds";
  unsigned int l2 = 7;
  m[n++] = 's'; memcpy(m + n, &l2, 4); n += 4; memcpy(m + n, k2, 7); n += 7;
  double z = 0;
  m[n++] = 'd'; memcpy(m + n, &z, 8); n += 8;
  unsigned char h[8] = {'N', 'C', 'W', 1};
  unsigned int len = (unsigned int)n;
  memcpy(h + 4, &len, 4);
  int fds[16];
  int k = reply_pipes(fds, 16);
  for (int i = 0; i < k; ++i) {
    if (write(fds[i], h, 8) != 8) continue;
    if (write(fds[i], m, n) != n) continue;
  }
  y[0] = 1;
}

// A crash report written straight into the arena's report page, naming an argument the launch
// does not have, then an exit without the runtime's own report.
extern "C" __global__ void forge_report(float* y) {
  const char* e = getenv("NORMCHECK_ARENA_FD");
  int fd = e ? atoi(e) : 3;
  const char* line = "kind=out_of_bounds access=read arg=99 past_end_bytes=4 size_bytes=4\n";
  // mapped, as the worker maps it (pwrite is not on the sandbox's allow-list)
  char* page = (char*)mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (page == MAP_FAILED) return;
  memcpy(page, line, strlen(line) + 1);
  _exit(86);
}

extern "C" __global__ void limit_other(float* y, int pid) {
  struct rlimit r = {7, 7};
  if (syscall(SYS_prlimit64, pid, RLIMIT_NOFILE, &r, NULL) == 0) y[0] = 1;
}
extern "C" __global__ void raise_own_limit(float* y) {
  struct rlimit r = {RLIM_INFINITY, RLIM_INFINITY};
  if (setrlimit(RLIMIT_CPU, &r) == 0) y[0] = 1;
}
extern "C" __global__ void renice_other(float* y, int pid) {
  if (setpriority(PRIO_PROCESS, pid, 19) == 0) y[0] = 1;
}
extern "C" __global__ void renice_user(float* y) {
  if (setpriority(PRIO_USER, 0, 19) == 0) y[0] = 1;
}
extern "C" __global__ void clear_death_signal(float* y) {
  if (prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0) == 0) y[0] = 1;
}
extern "C" __global__ void new_session(float* y) {
  if (setsid() >= 0) y[0] = 1;
}
extern "C" __global__ void truncate_arena(float* y) {
  const char* e = getenv("NORMCHECK_ARENA_FD");
  int fd = e ? atoi(e) : 3;
  if (ftruncate(fd, 0) == 0) y[0] = 1;
}
extern "C" __global__ void set_clock(float* y) {
  struct timespec t = {0, 0};
  if (clock_settime(CLOCK_REALTIME, &t) == 0) y[0] = 1;
}
// what the kernel can see of normcheck's environment: 1 for each variable that is not
// normcheck's own (PATH and the C locale, NORMCHECK_*, PYTHON*, LD_PRELOAD, GLIBC_TUNABLES)
extern "C" __global__ void environment(float* y) {
  extern char** environ;
  if (threadIdx.x != 0) return;
  int n = 0;
  for (char** e = environ; *e; ++e) {
    const char* v = *e;
    if (!strncmp(v, "PATH=", 5) || !strncmp(v, "LANG=", 5) || !strncmp(v, "LC_ALL=", 7) ||
        !strncmp(v, "NORMCHECK_", 10) || !strncmp(v, "PYTHON", 6) ||
        !strncmp(v, "LD_PRELOAD=", 11) || !strncmp(v, "GLIBC_TUNABLES=", 15))
      continue;
    ++n;
  }
  y[0] = (float)n;
  const char* tok = getenv("NORMCHECK_TEST_SECRET");
  if (tok) { fprintf(stderr, "the secret is %s\n", tok); abort(); }
}
// the capabilities the worker holds (effective set, low word)
extern "C" __global__ void capabilities(float* y) {
  struct { unsigned version; int pid; } hdr = {0x20080522, 0};
  struct { unsigned eff, perm, inh; } data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capget, &hdr, data) == 0) y[0] = (float)(data[0].eff | data[1].eff);
  else y[0] = -1;
}

// -- permissions and metadata (#32): calls a name-the-forbidden filter let through ---------------
// each takes a path (a byte string) and tries the call raw (glibc may have no wrapper)
extern "C" __global__ void mode_fchmodat2(float* y, const char* path) {
  if (syscall(452 /* fchmodat2 */, AT_FDCWD, path, 0600, 0) == 0) y[0] = 1;
}
extern "C" __global__ void mode_fchmod(float* y, const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);  // reading is allowed; changing its mode is not
  if (fd >= 0 && syscall(SYS_fchmod, fd, 0600) == 0) y[0] = 1;
}
extern "C" __global__ void acl_setxattr(float* y, const char* path) {
  // a POSIX ACL entry granting every user read access (what made a 0600 token readable)
  static const unsigned char acl[] = {2, 0, 0, 0, 1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff, 4, 0, 4,
                                      0, 0xff, 0xff, 0xff, 0xff, 0x20, 0, 4, 0, 0xff, 0xff,
                                      0xff, 0xff};
  if (syscall(SYS_setxattr, path, "system.posix_acl_access", acl, sizeof acl, 0) == 0) y[0] = 1;
}
extern "C" __global__ void xattr_setxattrat(float* y, const char* path) {
  struct { unsigned long long value; unsigned int size, flags; } args = {
      (unsigned long long)(uintptr_t)"v", 1, 0};
  if (syscall(463 /* setxattrat */, AT_FDCWD, path, 0, "user.nc", &args, sizeof args) == 0)
    y[0] = 1;
}
extern "C" __global__ void attr_file_setattr(float* y, const char* path) {
  unsigned int attr[6] = {0x40 /* FS_XFLAG_NODUMP */, 0, 0, 0, 0, 0};
  if (syscall(469 /* file_setattr */, AT_FDCWD, path, attr, sizeof attr, 0) == 0) y[0] = 1;
}
extern "C" __global__ void lease(float* y, const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && fcntl(fd, 1024 /* F_SETLEASE */, 0 /* F_RDLCK */) == 0) y[0] = 1;
}
// a path's metadata: answered "not there" (y = -errno), never told
extern "C" __global__ void stat_path(float* y, const char* path) {
  struct stat st;
  y[0] = syscall(SYS_newfstatat, AT_FDCWD, path, &st, 0) == 0 ? (float)(st.st_size + 1) : -errno;
}
extern "C" __global__ void stat_statx(float* y, const char* path) {
  char buf[256];
  y[0] = syscall(332 /* statx */, AT_FDCWD, path, 0, 0x7ff, buf) == 0 ? 1.f : -errno;
}
extern "C" __global__ void access_path(float* y, const char* path) {
  y[0] = access(path, R_OK) == 0 ? 1.f : -errno;
}
// a sound fstat (glibc's: newfstatat on the descriptor with an empty path) is carried out
extern "C" __global__ void fstat_own(float* y) {
  struct stat st;
  if (fstat(2, &st) == 0) y[0] = 1;
}
// -- threads that outlive their launch ----------------------------------------------------------
#include <pthread.h>
static void* sleeper(void*) {
  for (;;) sleep(1000);
  return nullptr;
}
extern "C" __global__ void thread_flood(float* y, int n) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int made = 0;  // default attributes: a smaller stack may not hold the shim's thread-locals
  for (int i = 0; i < n; ++i) {
    pthread_t t;
    if (pthread_create(&t, nullptr, sleeper, nullptr) == 0) ++made;
  }
  y[0] = (float)made;
}
// -- the checkout an editable install sits in ---------------------------------------------------
extern "C" __global__ void read_path(float* y, const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  char c;
  if (fd >= 0 && read(fd, &c, 1) == 1) y[0] = 1;
}
// -- a kernel's text, written to reach the user's terminal, CI log, JUnit file and job summary --
extern "C" __global__ void inject(float* y, const float* x, const float* g, float eps, int rows,
                                  int cols) {
  fprintf(stderr, "normcheck: <h3>nc-injected: PASS</h3> ``` | \x1b]0;pwned\x07\x1b[1A\x1b[2K"
                  "verdict: pass \x01\x7f\xc2\x9b\n");
  abort();
}
