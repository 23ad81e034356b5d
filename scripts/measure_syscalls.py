#!/usr/bin/env python3
"""Measure the system calls the cpu backend's worker makes once its sandbox is entered, and
write the seccomp allow-list from them (normcheck/backends/cpu/shim/normcheck_allowlist.h).

    python scripts/measure_syscalls.py            # the full workload (about an hour on 2 cores)
    python scripts/measure_syscalls.py --quick    # one check of each kind (a few minutes)
    python scripts/measure_syscalls.py --check    # print the difference with the header only

The workload runs under ``strace -f`` with NORMCHECK_SANDBOX=measure (the worker enters the
sandbox -- rlimits, landlock -- but installs no filter, and writes a mark the trace starts
after): the test suites of sound and faulty kernels (out of bounds, crashes, aborts, traps,
deadlocks, timeouts, stack overflows, printf, host launches, CUB, inline PTX, the examples) and
``normcheck report --quick``.  Never the hostile kernels (tests/test_escape.py,
tests/test_hostile.py): what they try is what the list refuses.

Every call a worker thread made after the mark is in the list, with how often it was seen;
REVIEWED adds the calls a sound launch can make that the workload did not happen to make, each
with its reason; ARGUMENT_RULES are decided by the filter's own rules in normcheck_sandbox.c
(clone, open, fcntl, kill ... with the arguments that keep them to this process and to reading)
and are left out of the list.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "normcheck" / "backends" / "cpu" / "shim" / "normcheck_allowlist.h"
MARK = "ncsb-measure-start"

WORKLOAD = [
    ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_faults_named.py",
     "tests/test_backend_cpu.py", "tests/test_examples.py", "tests/test_cub_ptx.py",
     "tests/test_no_tolerance.py", "tests/test_first_hour.py", "tests/test_check.py",
     "tests/test_as_shipped.py", "tests/test_surface.py", "tests/test_cuda_surface.py",
     "tests/test_specs.py", "tests/test_backward.py", "tests/test_quant.py"],
    ["-m", "normcheck", "report", "--quick", "--backend", "cpu", "--out", "{tmp}/report"],
]
QUICK = [
    ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_faults_named.py"],
]

#: Calls a sound launch can make that a workload may miss, and why each is harmless.
REVIEWED = {
    "rt_sigreturn": "the return from every signal handler",
    "restart_syscall": "a sleep or wait interrupted by a signal, resumed",
    "exit": "a thread ending", "exit_group": "the worker ending",
    "sched_yield": "spin-waits of the shim and of libstdc++", "nanosleep": "sleeping",
    "clock_nanosleep": "sleeping", "clock_gettime": "time (where the vDSO is not used)",
    "gettimeofday": "time", "time": "time", "clock_getres": "timer resolution",
    "getpid": "this process's id", "gettid": "this thread's id", "getppid": "the parent's id",
    "getuid": "ids", "geteuid": "ids", "getgid": "ids", "getegid": "ids",
    "brk": "malloc", "mmap": "malloc, thread stacks, dlopen", "munmap": "free",
    "mremap": "realloc of large blocks", "mprotect": "guard pages, dlopen",
    "set_robust_list": "a new thread (glibc)", "rseq": "a new thread (glibc)",
    "set_tid_address": "a new thread", "membarrier": "libstdc++ and glibc barriers",
    "futex": "locks and condition variables", "getrandom": "hash seeds, std::random_device",
    "read": "the request pipe, files opened for reading", "write": "the reply pipe, stderr",
    "readv": "reads", "writev": "stderr (glibc's abort message, assert)",
    "pread64": "the dynamic loader reading a module", "lseek": "file offsets",
    "close": "descriptors", "dup": "descriptors", "dup2": "descriptors", "dup3": "descriptors",
    "fstat": "fstat of a descriptor (ncsb_emulate carries glibc's fstat out as this call)",
    "poll": "waiting on the pipes", "ppoll": "waiting on the pipes",
    "select": "waiting on the pipes", "pselect6": "waiting on the pipes",
    "rt_sigaction": "signal handlers (the shim's fault handlers)",
    "rt_sigprocmask": "signal masks (every fiber switch)", "rt_sigpending": "signal state",
    "rt_sigtimedwait": "signal waits", "rt_sigsuspend": "signal waits",
    "sigaltstack": "the fault handlers' stacks", "getrusage": "CPU time of a launch",
    "times": "CPU time", "sysinfo": "memory figures (libstdc++, numpy)",
    "uname": "the machine (glibc)", "sched_getaffinity": "how many CPUs (thread pools)",
    "sched_getparam": "scheduling, read", "sched_getscheduler": "scheduling, read",
    "sched_get_priority_max": "the range of priorities, read (torch's thread pools, as a "
                              "Triton file imports it)",
    "sched_get_priority_min": "the range of priorities, read (torch's thread pools, as a "
                              "Triton file imports it)",
    "getpriority": "priority, read", "getcpu": "the current CPU",
    "getdents64": "a directory opened for reading (landlock decides which)",
    "getcwd": "the working folder's name", "get_robust_list": "thread state, read",
    "arch_prctl": "thread-local storage (x86-64)",
    "capget": "this process's capabilities, read (none: the launcher dropped them all)",
    # an interval timer signals this process only (SIGALRM, SIGVTALRM, SIGPROF): an op's own
    # timeout (signal.setitimer) is no escape; the CPU and wall limits stay the launcher's
    "setitimer": "a timer's signal to this process only (an op's own timeout, #65)",
    "getitimer": "a timer, read", "alarm": "a timer's signal to this process only",
}

#: Calls the filter decides by their arguments (normcheck_sandbox.c), never by the list.
ARGUMENT_RULES = ("clone", "clone3", "open", "openat", "openat2", "prlimit64", "prctl",
                  "setpriority", "ioprio_set", "sched_setaffinity", "sched_setscheduler",
                  "sched_setparam", "sched_setattr", "kill", "tgkill", "rt_sigqueueinfo",
                  "rt_tgsigqueueinfo", "fcntl", "madvise", "newfstatat")

#: Never allowed whatever a trace shows: what the sandbox exists to refuse.
NEVER = ("fork", "vfork", "execve", "execveat", "socket", "connect", "bind", "ptrace",
         "fchmod", "fchmodat", "fchmodat2", "fchown", "fchownat", "chmod", "chown",
         "setxattr", "lsetxattr", "fsetxattr", "setxattrat", "removexattr", "lremovexattr",
         "fremovexattr", "removexattrat", "file_setattr", "statx", "ftruncate", "truncate",
         "fallocate", "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir",
         "mkdirat", "setrlimit", "setsid", "setpgid", "mount", "io_uring_setup",
         "userfaultfd", "process_vm_readv", "process_vm_writev")


def syscall_numbers() -> dict:
    """{name: number} of x86-64 from the kernel headers the toolchain carries."""
    for h in ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"):
        if os.path.isfile(h):
            text = Path(h).read_text()
            return {m.group(1): int(m.group(2))
                    for m in re.finditer(r"#define __NR_(\w+)\s+(\d+)", text)}
    sys.exit("asm/unistd_64.h not found (linux-libc-dev): the numbers are taken from it")


def trace(cmds, out: Path) -> None:
    env = {**os.environ, "NORMCHECK_SANDBOX": "measure", "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.TemporaryDirectory(prefix="nc-measure-") as tmp:
        for i, cmd in enumerate(cmds):
            argv = [a.replace("{tmp}", tmp) for a in cmd]
            print("tracing:", " ".join(argv), file=sys.stderr, flush=True)
            subprocess.run(["strace", "-f", "-ff", "-qq", "--pidns-translation",
                            "-o", str(out / f"c{i}"),
                            sys.executable, *argv], cwd=ROOT, env=env)


_CALL = re.compile(r"^(?:\d+\.\d+ )?(\w+)\(")
# a clone's result: the new thread's id, in the tracer's PID namespace where it differs
# (`= 3 /* 2190 in strace's PID NS */`)
_CLONE = re.compile(r"^(?:\d+\.\d+ )?clone3?\((.*)\)\s+=\s+(\d+)(?: /\* (\d+)[^*]*\*/)?")


# a new process's id (fork and vfork: subprocess's children), for telling reused ids apart
_FORK = re.compile(r"^(?:\d+\.\d+ )?v?fork\(\)\s+=\s+(\d+)(?: /\* (\d+)[^*]*\*/)?")
_EXIT = re.compile(r"^(?:\d+\.\d+ )?exit(?:_group)?\(")


def _first_life(path: Path) -> list:
    """The lines of a trace file up to the task's exit: with -ff a file is named by its pid, and
    a pid Linux reuses later (a long workload starts tens of thousands of processes) appends a
    second, unrelated life to the same file."""
    out = []
    with open(path, errors="replace") as fh:
        for line in fh:
            out.append(line)
            if _EXIT.match(line):
                break
    return out


def measure(folder: Path) -> collections.Counter:
    """{call: count} made by worker threads after the mark, over every trace file.  Only each
    file's first life is read, and a thread id two clones returned (a reused pid) is dropped:
    a call is counted only when the task that made it is known to be a sandboxed worker's."""
    files = list(folder.iterdir())
    lives = {f: _first_life(f) for f in files}
    parent, seen, marked = {}, collections.Counter(), {}
    for f, lines in lives.items():
        run, tid = f.name.split(".")[0], int(f.name.rsplit(".", 1)[1])
        for n, line in enumerate(lines):
            m = _CLONE.match(line)
            if m:
                child = int(m.group(3) or m.group(2))
                seen[child] += 1
                parent[child] = (run, tid, "CLONE_THREAD" in m.group(1))
            m = _FORK.match(line)
            if m:
                seen[int(m.group(2) or m.group(1))] += 1
            if MARK in line and line.lstrip("0123456789. ").startswith("write(-1"):
                marked[(run, tid)] = n
    for child, k in seen.items():
        if k > 1:
            parent.pop(child, None)  # a reused id: which clone made this file's task is unknown

    def leader(run, t):
        while (run, t) not in marked and t in parent and parent[t][0] == run and parent[t][2]:
            t = parent[t][1]
        return t

    calls = collections.Counter()
    for f, lines in lives.items():
        run, tid = f.name.split(".")[0], int(f.name.rsplit(".", 1)[1])
        lead = leader(run, tid)
        if (run, lead) not in marked:
            continue
        start = marked[(run, lead)] if lead == tid else -1  # threads born after the mark
        for n, line in enumerate(lines):
            if n <= start:
                continue
            m = _CALL.match(line)
            if m and m.group(1) != "exited":
                calls[m.group(1)] += 1
    return calls


def header(calls: collections.Counter, numbers: dict, what: str) -> str:
    allowed = {}
    for name, n in calls.items():
        if name in ARGUMENT_RULES or name not in numbers:
            continue
        if name in NEVER:
            sys.exit(f"the workload made {name}, which the sandbox must refuse: look at why")
        allowed[name] = f"measured: {n} calls"
    for name, why in REVIEWED.items():
        if name in numbers and name not in allowed and name not in ARGUMENT_RULES:
            allowed[name] = f"reviewed: {why}"
    lines = ["// GENERATED by scripts/measure_syscalls.py -- do not edit; run it again.",
             f"// {datetime.date.today().isoformat()}: {what}",
             "// The calls the worker may make once sandboxed (x86-64 numbers), each measured (the",
             "// times a worker thread made it over the workload) or reviewed (why a sound launch",
             "// can make it).  The calls decided by their arguments are in normcheck_sandbox.c.",
             "#pragma once", "static const int ncsb_allowed[] = {"]
    for name in sorted(allowed, key=lambda k: numbers[k]):
        lines.append(f"    {numbers[name]:>3},  // {name}: {allowed[name]}")
    lines.append("};")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a short workload")
    ap.add_argument("--check", action="store_true", help="compare with the header, write nothing")
    ap.add_argument("--keep", metavar="DIR", help="keep the traces in DIR")
    ap.add_argument("--tests", nargs="+", metavar="PATH",
                    help="trace pytest on these test files only (a part of the workload: "
                         "combine the parts' traces with --from)")
    ap.add_argument("--describe", metavar="TEXT",
                    help="what was traced, for the header (with --from: the parts)")
    ap.add_argument("--from", dest="source", metavar="DIR", action="append",
                    help="write the header from the traces kept in DIR (no new trace; "
                         "repeatable: the calls of every DIR)")
    a = ap.parse_args()
    if not shutil.which("strace"):
        sys.exit("strace is needed (apt-get install strace)")
    numbers = syscall_numbers()
    cmds = QUICK if a.quick else WORKLOAD
    if a.tests:
        cmds = [["-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", *a.tests]]
    if a.source:
        folders = [Path(d) for d in a.source]
    else:
        folder = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="nc-trace-"))
        folder.mkdir(parents=True, exist_ok=True)
        trace(cmds, folder)
        folders = [folder]
    calls = collections.Counter()
    for f in folders:
        calls.update(measure(f))
    if not a.keep and not a.source:
        shutil.rmtree(folder, ignore_errors=True)
    if not calls:
        sys.exit("no worker was traced after its mark: is NORMCHECK_SANDBOX=measure honoured?")
    for name, n in sorted(calls.items()):
        print(f"{name:24} {n}", file=sys.stderr)
    what = a.describe or "; ".join(" ".join(c[:3] + ["..."]) for c in cmds)
    text = header(calls, numbers, ("quick: " if a.quick else "") + what)
    if a.check:
        old = set(re.findall(r"// (\w+): measured", HEADER.read_text())) if HEADER.exists() \
            else set()
        new = set(re.findall(r"// (\w+): measured", text))
        print("measured now, not in the header:", sorted(new - old) or "none")
        return 1 if new - old else 0
    HEADER.write_text(text)
    print(f"wrote {HEADER} ({text.count('//') - 5} calls)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
