"""The cpu backend's sandbox: what a kernel under test may not do to the machine.

A kernel on the cpu backend is host C++, so it could open files, start processes or talk to the
network.  The worker process that runs it enters a sandbox before any user code is loaded
(``backends/cpu/shim/normcheck_sandbox.c``, built once with the backend's compiler and cache):

========== ================================================================================
lifetime    the worker is started by ``normcheck-launch`` (``shim/normcheck_launch.c``): in a
            PID namespace of its own whose init dies with normcheck (or, where user namespaces
            are not allowed, in a process group that the launcher kills), so nothing the kernel
            runs outlives normcheck; every capability dropped, no new privileges; an
            allow-listed environment (:func:`worker_environment`)
rlimits     address space (``NORMCHECK_WORKER_MEMORY_MB``, default half the machine's memory,
            at least 4 GiB), file size 64 MiB (the worker's stderr), no core files, CPU time for
            the worker's whole life (``NORMCHECK_WORKER_CPU_S``, default 3600 s; normcheck
            starts a fresh worker before a launch whose budget would not fit); set once, before
            any user code, and never raised
landlock    files readable only beneath the build cache, Python's library and normcheck itself;
            nothing writable anywhere; no TCP bind/connect; no signals to other processes
            (where the kernel has landlock: ABI 1+, net from ABI 4, scopes from ABI 6)
seccomp     fork, vfork, clone without CLONE_THREAD, execve, sockets, opening a file for
            writing (or without O_CLOEXEC, as fopen and open do: the worker, dlopen and Python
            open every file with it), creating, renaming or removing files, truncating (the
            shared arena included), ptrace, signals to other processes, setting any rlimit
            (prlimit64 only reads this process's), changing PR_SET_PDEATHSIG, priorities and
            scheduling of other processes, setsid/setpgid, setting the clock, kexec, the mount
            APIs, io_uring ... are trapped: the launch fails with kind ``sandbox`` naming the
            call
preload     the helper is also preloaded (LD_PRELOAD) in place of libc's ``system``, ``popen``
            and ``posix_spawn(p)``, which block every signal before they start a process (so
            seccomp's SIGSYS would kill the worker unexplained): after the sandbox is entered
            they report the call by name
wire        what the worker sends back is parsed as untrusted data
            (:mod:`normcheck.backends.cpu.wire`), never unpickled; the crash report it leaves in
            the arena is parsed against a closed set of keys and value forms
========== ================================================================================

``NORMCHECK_SANDBOX=off`` runs kernels without it (``provenance()["sandbox"]`` says which).
Where a mechanism is missing (no landlock in the kernel, seccomp disabled in a container) the
others still apply, and the provenance says so.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["enter", "SYSCALLS", "syscall_name", "read_dirs", "MODES", "address_space",
           "cpu_seconds", "worker_environment"]

MODES = ("on", "off")

#: x86-64 system call numbers of the calls the filter traps, for naming a violation.
SYSCALLS = {
    2: "open (a file, for writing or from kernel code)",
    257: "openat (a file, for writing or from kernel code)", 85: "creat", 56: "clone (a new process)",
    57: "fork", 58: "vfork", 59: "execve", 322: "execveat", 41: "socket", 53: "socketpair",
    42: "connect", 49: "bind", 50: "listen", 43: "accept", 288: "accept4", 82: "rename",
    264: "renameat", 316: "renameat2", 87: "unlink", 263: "unlinkat", 83: "mkdir",
    258: "mkdirat", 84: "rmdir", 86: "link", 265: "linkat", 88: "symlink", 266: "symlinkat",
    90: "chmod", 268: "fchmodat", 92: "chown", 260: "fchownat", 94: "lchown", 76: "truncate",
    133: "mknod", 259: "mknodat", 132: "utime", 235: "utimes", 280: "utimensat",
    261: "futimesat", 101: "ptrace", 310: "process_vm_readv", 311: "process_vm_writev",
    200: "tkill", 62: "kill (another process)", 234: "tgkill (another process)",
    129: "rt_sigqueueinfo", 297: "rt_tgsigqueueinfo", 165: "mount", 166: "umount2",
    155: "pivot_root", 161: "chroot", 308: "setns", 272: "unshare", 169: "reboot",
    246: "kexec_load", 175: "init_module", 313: "finit_module", 176: "delete_module",
    321: "bpf", 298: "perf_event_open", 304: "open_by_handle_at", 303: "name_to_handle_at",
    425: "io_uring_setup", 426: "io_uring_enter", 427: "io_uring_register", 248: "add_key",
    160: "setrlimit", 302: "prlimit64 (setting a limit, or another process's)",
    157: "prctl (PR_SET_PDEATHSIG or PR_SET_CHILD_SUBREAPER)",
    141: "setpriority (another process)", 251: "ioprio_set (another process)",
    203: "sched_setaffinity (another process)", 144: "sched_setscheduler (another process)",
    142: "sched_setparam (another process)", 314: "sched_setattr (another process)",
    112: "setsid", 109: "setpgid", 164: "settimeofday", 227: "clock_settime",
    305: "clock_adjtime", 159: "adjtimex", 320: "kexec_file_load", 428: "open_tree",
    429: "move_mount", 430: "fsopen", 431: "fsconfig", 432: "fsmount", 433: "fspick",
    442: "mount_setattr", 440: "process_madvise", 312: "kcmp", 256: "migrate_pages",
    279: "move_pages", 77: "ftruncate (the shared arena?)", 285: "fallocate",
    249: "request_key", 250: "keyctl", 323: "userfaultfd", 434: "pidfd_open",
    424: "pidfd_send_signal", 438: "pidfd_getfd", 300: "fanotify_init", 253: "inotify_init",
    294: "inotify_init1", 170: "sethostname", 171: "setdomainname", 167: "swapon",
    168: "swapoff", 163: "acct", 179: "quotactl", 103: "syslog", 153: "vhangup", 172: "iopl",
    173: "ioperm",
}


def syscall_name(nr) -> str:
    try:
        nr = int(nr)
    except (TypeError, ValueError):
        return f"system call {nr}"
    return f"{SYSCALLS.get(nr, 'system call')} (#{nr})"


def read_dirs(cache: str) -> list[str]:
    """The folders the worker may read beneath: the build cache, Python, normcheck."""
    import normcheck

    dirs = [cache, os.path.dirname(os.path.dirname(os.path.abspath(normcheck.__file__)))]
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        dirs.append(p)
    return [d for d in dict.fromkeys(dirs) if d]


def address_space() -> int:
    """The worker's address-space limit in bytes: ``NORMCHECK_WORKER_MEMORY_MB``, else half the
    machine's memory, at least 4 GiB."""
    env = os.environ.get("NORMCHECK_WORKER_MEMORY_MB")
    if env:
        try:
            return max(512, int(env)) << 20
        except ValueError:
            raise _invalid("NORMCHECK_WORKER_MEMORY_MB", env, "a number of MiB, e.g. 8192")
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        ram = 8 << 30
    return max(4 << 30, ram // 2)


def cpu_seconds() -> int:
    """The CPU time a worker may use in its whole life: ``NORMCHECK_WORKER_CPU_S`` (3600)."""
    env = os.environ.get("NORMCHECK_WORKER_CPU_S", "3600")
    try:
        v = int(env)
    except ValueError:
        v = 0
    if v < 10:
        raise _invalid("NORMCHECK_WORKER_CPU_S", env, "a whole number of seconds, at least 10")
    return v


def _invalid(name, value, expected):
    from normcheck.errors import invalid

    return invalid(name, value, expected)


FILE_SIZE = 64 << 20


def enter(mode: str, read_dirs, report_page: int, report_len: int, address_space: int,
          cpu_seconds: int) -> dict:
    """In the worker, before user code: apply the sandbox (see the module docstring).  Returns
    {"mode", "enforced": [...], "detail"}."""
    if mode == "off":
        return {"mode": "off", "enforced": [], "detail": "NORMCHECK_SANDBOX=off"}
    lib_path = os.environ.get("NORMCHECK_SANDBOX_LIB")
    if not lib_path:
        return {"mode": mode, "enforced": [], "detail": "the sandbox helper was not built"}
    for name in ("libstdc++.so.6", "libgcc_s.so.1", "libm.so.6"):
        try:  # loaded now, so a kernel module's dependencies need no file once sandboxed
            ctypes.CDLL(name, mode=os.RTLD_GLOBAL)
        except OSError:
            pass
    import resource  # noqa: F401  (imported before the sandbox closes the file system)

    lib = ctypes.CDLL(lib_path)
    lib.ncsb_enter.restype = ctypes.c_int
    lib.ncsb_enter.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int,
                               ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_ulonglong,
                               ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    dirs = [d.encode() for d in read_dirs]
    arr = (ctypes.c_char_p * max(1, len(dirs)))(*dirs)
    status = ctypes.create_string_buffer(256)
    mask = lib.ncsb_enter(arr, len(dirs), address_space, FILE_SIZE, cpu_seconds, report_page,
                          report_len, status, len(status))
    enforced = [n for bit, n in ((1, "rlimits"), (2, "landlock"), (4, "seccomp")) if mask & bit]
    return {"mode": mode, "enforced": enforced, "detail": status.value.decode()}


#: normcheck's own settings a worker reads (nothing else of normcheck's environment passes).
WORKER_SETTINGS = ("NORMCHECK_STACK_KB", "NORMCHECK_SANDBOX")


def worker_environment(extra: dict) -> dict:
    """The worker's environment: :func:`normcheck.backends.confine.child_environment`,
    normcheck's own settings the worker reads (:data:`WORKER_SETTINGS`) and ``extra``."""
    from normcheck.backends.confine import child_environment  # the parent's side only

    env = child_environment({k: os.environ[k] for k in WORKER_SETTINGS if k in os.environ})
    env.update(extra)
    return env
