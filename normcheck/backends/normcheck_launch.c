// normcheck-launch: start a program (the cpu backend's worker, or the compiler) so that it and
// everything it starts die with normcheck, whatever the program does -- without relying on any
// code inside the program.
//
//   normcheck-launch --parent PID [--cleanup DIR] [--as BYTES] [--cpu SECONDS] [--fsize BYTES]
//                    [--read PATH]... [--write PATH]... [--connect] [--no-namespace]
//                    -- PROGRAM ARGS...
//
// Three processes, all of this file's code but the last:
//
//   L (this process, normcheck's child)  PR_SET_PDEATHSIG(SIGTERM): when normcheck dies, L kills
//     the rest (SIGKILL), removes --cleanup DIR (the build's temporary folder) and exits; it also
//     polls its parent every 100 ms (a death before prctl).  L forwards P's wait status as its
//     own (the same exit code, or death by the same signal).
//   I  pid 1 of a new PID namespace (a new user namespace makes that possible without
//     privileges), PR_SET_PDEATHSIG(SIGKILL) on L's death.  When I dies the kernel kills every
//     process of the namespace: the program cannot outlive it (it cannot leave the namespace, and
//     an init ignores the signals of its namespace's processes).  I reaps every child and exits
//     when P does, passing P's wait status to L on a pipe.
//   P  the program, after its rlimits (--as, --cpu, --fsize; no core files) and landlock rules
//     (--read: read and execute beneath; --write: everything beneath; nothing else) are applied
//     and every capability is dropped (with no-new-privs).
//
// Where user namespaces are not allowed (a container's policy, a kernel setting) or with
// --no-namespace, I is skipped: P runs in a process group of its own, and L kills the group.  The
// mechanism in force is printed on request (--probe) and recorded in the provenance.
//
// Linux only.  Written in C, so that nothing in it depends on Python or on a library the
// program could change.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

enum { MAX_PATHS = 256 };
static const char* g_read[MAX_PATHS];
static int g_nread = 0;
static const char* g_write[MAX_PATHS];
static int g_nwrite = 0;
static const char* g_cleanup = NULL;
static int g_parent_gone = 0;

static void die(const char* what) {
  fprintf(stderr, "normcheck-launch: %s: %s\n", what, strerror(errno));
  _exit(127);
}

// -- removing the temporary folder (no symlink is followed) ---------------------------------------
static void remove_tree_at(int dirfd, const char* name) {
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    DIR* d = fdopendir(fd);
    if (d) {
      struct dirent* e;
      while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        remove_tree_at(fd, e->d_name);
      }
      closedir(d);
    } else {
      close(fd);
    }
    unlinkat(dirfd, name, AT_REMOVEDIR);
  } else {
    unlinkat(dirfd, name, 0);
  }
}

static void cleanup(void) {
  if (g_cleanup && g_cleanup[0] == '/') remove_tree_at(AT_FDCWD, g_cleanup);
}

// -- the program's restrictions -------------------------------------------------------------------
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
  LL_READ_DIR = 1ull << 3, LL_REFER = 1ull << 13, LL_TRUNCATE = 1ull << 14,
  LL_IOCTL_DEV = 1ull << 15, LL_NET_BIND = 1ull << 0, LL_NET_CONNECT = 1ull << 1,
  LL_SCOPE_ABSTRACT_UNIX = 1ull << 0, LL_SCOPE_SIGNAL = 1ull << 1,
};

static int g_connect = 0;  // --connect: TCP connections out are allowed (a fetch's pip)

// 1: applied, 0: the kernel has no landlock, -1: it failed
static int apply_landlock(void) {
  if (g_nread == 0 && g_nwrite == 0) return 0;
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1u);
  if (abi < 1) return 0;
  struct nc_ruleset_attr attr;
  memset(&attr, 0, sizeof attr);
  uint64_t all = (1ull << 13) - 1;
  if (abi >= 2) all |= LL_REFER;
  if (abi >= 3) all |= LL_TRUNCATE;
  if (abi >= 5) all |= LL_IOCTL_DEV;
  attr.handled_access_fs = all;
  size_t size = sizeof(uint64_t);
  if (abi >= 4) {  // no listening socket; no outgoing connection unless --connect (pip)
    attr.handled_access_net = g_connect ? LL_NET_BIND : LL_NET_BIND | LL_NET_CONNECT;
    size = 2 * sizeof(uint64_t);
  }
  if (abi >= 6) {
    attr.scoped = LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL;
    size = 3 * sizeof(uint64_t);
  }
  int rfd = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0u);
  if (rfd < 0) return -1;
  for (int pass = 0; pass < 2; ++pass) {
    int n = pass ? g_nwrite : g_nread;
    const char** paths = pass ? g_write : g_read;
    for (int i = 0; i < n; ++i) {
      int fd = open(paths[i], O_PATH | O_CLOEXEC);
      if (fd < 0) continue;
      struct stat st;
      uint64_t rights = pass ? all : (LL_READ_FILE | LL_READ_DIR | LL_EXECUTE);
      if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
        rights &= LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV;
      struct nc_path_beneath_attr pb;
      pb.allowed_access = rights;
      pb.parent_fd = fd;
      syscall(SYS_landlock_add_rule, rfd, 1, &pb, 0u);
      close(fd);
    }
  }
  int ok = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           syscall(SYS_landlock_restrict_self, rfd, 0u) == 0;
  close(rfd);
  return ok ? 1 : -1;
}

// Every capability gone (bounding set, ambient, effective/permitted/inheritable): the program
// keeps none, even when normcheck runs as root or inside the new user namespace.
static void drop_capabilities(void) {
  prctl(PR_CAP_AMBIENT, 4 /* PR_CAP_AMBIENT_CLEAR_ALL */, 0, 0, 0);
  for (int c = 0; c <= 63; ++c) prctl(PR_CAPBSET_DROP, c, 0, 0, 0);
  struct { uint32_t version; int pid; } hdr = {0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0};
  struct { uint32_t eff, perm, inh; } data[2];
  memset(data, 0, sizeof data);
  syscall(SYS_capset, &hdr, data);
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

static void set_limit(int res, unsigned long long v) {
  struct rlimit r;
  r.rlim_cur = r.rlim_max = (rlim_t)v;
  if (setrlimit(res, &r) != 0) die("setrlimit");
}

static unsigned long long g_as = 0, g_cpu = 0, g_fsize = 0;

static void exec_program(char** argv) {
  set_limit(RLIMIT_CORE, 0);
  if (g_as) set_limit(RLIMIT_AS, g_as);
  if (g_cpu) {  // SIGXCPU at the soft limit (a named signal), SIGKILL 5 s later
    struct rlimit r = {(rlim_t)g_cpu, (rlim_t)g_cpu + 5};
    if (setrlimit(RLIMIT_CPU, &r) != 0) die("setrlimit");
  }
  if (g_fsize) set_limit(RLIMIT_FSIZE, g_fsize);
  if (apply_landlock() < 0) die("landlock");
  drop_capabilities();
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execvp(argv[0], argv);
  die(argv[0]);
}

// -- user and PID namespaces ----------------------------------------------------------------------
static int write_file(const char* path, const char* text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

static int enter_namespaces(void) {
  uid_t uid = getuid();
  gid_t gid = getgid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0) return -1;
  char buf[64];
  write_file("/proc/self/setgroups", "deny");
  snprintf(buf, sizeof buf, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
  if (write_file("/proc/self/uid_map", buf) != 0) return -1;
  snprintf(buf, sizeof buf, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
  if (write_file("/proc/self/gid_map", buf) != 0) return -1;
  return 0;
}

// I: the namespace's init.  Returns never.
static void init_process(int alive_fd, int status_fd, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  struct pollfd pf = {alive_fd, POLLIN, 0};
  if (poll(&pf, 1, 0) > 0) _exit(127);  // L died before the prctl: its end of the pipe closed
  pid_t p = fork();
  if (p < 0) die("fork");
  if (p == 0) {
    close(alive_fd);
    close(status_fd);
    exec_program(argv);
  }
  for (;;) {
    int st;
    pid_t w = waitpid(-1, &st, 0);
    if (w == p) {
      ssize_t n = write(status_fd, &st, sizeof st);
      (void)n;
      _exit(0);  // the kernel now kills whatever is left in the namespace
    }
    if (w < 0 && errno == ECHILD) _exit(127);
  }
}

// Without a namespace: kill the program's process group, then every process that was reparented
// to L (a subreaper) -- whatever left the group with setsid() once its parents are dead -- until
// none is left.
static void kill_descendants(pid_t child) {
  kill(-child, SIGKILL);
  pid_t self = getpid();
  for (int round = 0; round < 200; ++round) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
    int found = 0;
    DIR* d = opendir("/proc");
    if (!d) return;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
      char* end;
      long pid = strtol(e->d_name, &end, 10);
      if (*end || pid <= 0) continue;
      char path[64], buf[512];
      snprintf(path, sizeof path, "/proc/%ld/stat", pid);
      int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      ssize_t n = read(fd, buf, sizeof buf - 1);
      close(fd);
      if (n <= 0) continue;
      buf[n] = 0;
      char* rp = strrchr(buf, ')');  // "pid (comm) state ppid pgrp ..."
      long ppid = 0, pgrp = 0;
      char state;
      if (!rp || sscanf(rp + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) continue;
      if (ppid == self || pgrp == child) {
        kill((pid_t)pid, SIGKILL);
        if (pgrp > 1 && pgrp != (long)self) kill(-(pid_t)pgrp, SIGKILL);
        found = 1;
      }
    }
    closedir(d);
    if (!found && waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD) return;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

static void usage(void) {
  fprintf(stderr, "usage: normcheck-launch --parent PID [--cleanup DIR] [--as BYTES] "
                  "[--cpu S] [--fsize BYTES] [--read PATH]... [--write PATH]... "
                  "[--connect] [--no-namespace] -- PROGRAM ARGS...\n       normcheck-launch --probe\n");
  _exit(127);
}

int main(int argc, char** argv) {
  long parent = -1;
  int use_ns = 1, i = 1;
  if (argc == 2 && !strcmp(argv[1], "--probe")) {
    // which lifetime mechanism works here (a throwaway child tries the namespaces)
    pid_t p = fork();
    if (p == 0) _exit(enter_namespaces() == 0 ? 0 : 1);
    int st = 0;
    waitpid(p, &st, 0);
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1u);
    printf("lifetime=%s landlock_abi=%ld\n",
           WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "pid-namespace" : "process-group",
           abi > 0 ? abi : 0);
    return 0;
  }
  for (; i < argc; ++i) {
    const char* a = argv[i];
    if (!strcmp(a, "--")) { ++i; break; }
    if (i + 1 >= argc && strcmp(a, "--no-namespace") && strcmp(a, "--connect")) usage();
    if (!strcmp(a, "--parent")) parent = strtol(argv[++i], NULL, 10);
    else if (!strcmp(a, "--cleanup")) g_cleanup = argv[++i];
    else if (!strcmp(a, "--as")) g_as = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(a, "--cpu")) g_cpu = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(a, "--fsize")) g_fsize = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(a, "--read") && g_nread < MAX_PATHS) g_read[g_nread++] = argv[++i];
    else if (!strcmp(a, "--write") && g_nwrite < MAX_PATHS) g_write[g_nwrite++] = argv[++i];
    else if (!strcmp(a, "--no-namespace")) use_ns = 0;
    else if (!strcmp(a, "--connect")) g_connect = 1;
    else usage();
  }
  if (i >= argc || parent <= 0) usage();
  char** prog = argv + i;

  // the signals L waits for are blocked and taken with sigtimedwait (no handler races)
  sigset_t waitset;
  sigemptyset(&waitset);
  sigaddset(&waitset, SIGCHLD);
  sigaddset(&waitset, SIGTERM);
  sigaddset(&waitset, SIGINT);
  sigaddset(&waitset, SIGHUP);
  sigprocmask(SIG_BLOCK, &waitset, NULL);
  struct rlimit nocore = {0, 0};
  setrlimit(RLIMIT_CORE, &nocore);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != (pid_t)parent) {  // normcheck is already gone
    cleanup();
    return 127;
  }

  int alive[2], status[2];
  if (pipe2(alive, O_CLOEXEC) != 0 || pipe2(status, O_CLOEXEC) != 0) die("pipe");
  int namespaced = use_ns && enter_namespaces() == 0;
  if (!namespaced) prctl(PR_SET_CHILD_SUBREAPER, 1);
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    close(alive[1]);
    close(status[0]);
    if (namespaced) init_process(alive[0], status[1], prog);
    // no namespace: the program in a process group of its own, killed with it
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) _exit(127);
    exec_program(prog);
  }
  if (!namespaced) setpgid(child, child);
  close(alive[0]);
  close(status[1]);
  for (;;) {
    int st;
    pid_t w = waitpid(child, &st, WNOHANG);
    if (w == child) {
      if (namespaced) {  // P's status, as I passed it on
        int pst;
        if (read(status[0], &pst, sizeof pst) == (ssize_t)sizeof pst) st = pst;
      }
      if (WIFEXITED(st)) return WEXITSTATUS(st);
      if (WIFSIGNALED(st)) {  // die of the same signal, so the caller sees what P saw
        int sig = WTERMSIG(st);
        signal(sig, SIG_DFL);
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, sig);
        sigprocmask(SIG_UNBLOCK, &s, NULL);
        kill(getpid(), sig);
        _exit(128 + sig);
      }
      return 127;
    }
    if (g_parent_gone || getppid() != (pid_t)parent) {
      if (namespaced) {
        kill(child, SIGKILL);
        waitpid(child, &st, 0);
      } else {
        kill_descendants(child);
      }
      cleanup();
      _exit(128 + SIGTERM);
    }
    struct timespec ts = {0, 100 * 1000 * 1000};
    int sig = sigtimedwait(&waitset, NULL, &ts);
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) g_parent_gone = 1;
  }
}
