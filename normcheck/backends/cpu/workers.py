"""The cpu backend's worker processes: each started by normcheck-launch
(:mod:`normcheck.backends.confine`), sharing an arena with normcheck, served by
:mod:`normcheck.backends.cpu.worker`'s loop inside the sandbox (the helper library built here,
``shim/normcheck_sandbox.c``); :class:`Workers` keeps one for the built-ins and one per user
build.  Kept apart from the build code of :mod:`normcheck.backends.cpu.backend`, whose text is
part of every build's key: how a worker starts is not an input of a kernel's build."""

from __future__ import annotations

import atexit
import collections
import mmap
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from normcheck.backends import base, confine, isolation
from normcheck.backends.cpu import sandbox, wire
from normcheck.errors import BackendUnavailable, invalid
from normcheck.escape import one_line

__all__ = ["Worker", "Workers", "WORKERS", "MODULES_PER_WORKER", "sandbox_helper",
           "sandbox_helper_built"]

SHIM_DIR = Path(__file__).resolve().parent / "shim"
_PAGE = mmap.PAGESIZE
_REPORT_LINE = 1024  # the worker's REPORT_BYTES: the crash report's line

_SANDBOX_FLAGS = ["-x", "c", "-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden"]


def sandbox_helper() -> str:
    """The sandbox helper library, ``backends/cpu/shim/normcheck_sandbox.c`` (built once, cached).  It is C,
    compiled by the C++ compiler's driver with ``-x c``: one compiler to configure (CXX)."""
    return str(confine.build_library(
        SHIM_DIR / "normcheck_sandbox.c", "cpu", "sandbox", _SANDBOX_FLAGS,
        "building the cpu backend's sandbox helper", link=("-x", "none", "-ldl")))


def sandbox_helper_built() -> bool:
    return confine.library_built(SHIM_DIR / "normcheck_sandbox.c", "cpu", "sandbox",
                                 _SANDBOX_FLAGS, link=("-x", "none", "-ldl"))


# ------------------------------------------------------------------------------------------------
# Worker process
# ------------------------------------------------------------------------------------------------
#: Modules one worker loads before a fresh worker takes over: each loaded module keeps its code
#: and its pool of fiber stacks (256 KiB and a guard page per thread) until the worker exits, and
#: the worker's address space is limited (sandbox.address_space).
MODULES_PER_WORKER = 12
#: The worker's messages when the address space ran out (the shim's and the dynamic loader's).
_ADDRESS_SPACE_SPENT = re.compile(r"could not map fiber stacks|failed to map segment|"
                                  r"cannot allocate memory|could not map \d+ bytes")


class Worker:
    """One worker process, started by normcheck-launch (:mod:`normcheck.backends.confine`);
    restarted after a crash, a timeout, a malformed reply, or before a launch whose CPU budget
    would not fit in the worker's lifetime limit.  The arena it shares with this process is an
    unlinked file: nothing is left in /dev/shm whatever happens.  Everything it sends is
    untrusted (:mod:`normcheck.backends.cpu.wire`)."""

    def __init__(self, module: str = "normcheck.backends.cpu.worker", extra_env=None,
                 roots=(), sandbox: str | None = None, writes_scratch: bool = False):
        self.module = module  # the worker's program (python -m ...)
        #: a worker without the sandbox (the GPU path's: its driver needs its devices) still
        #: confined by landlock to write only its own scratch folder and /dev (never the cache):
        #: it reads anywhere; HOME, TMPDIR and TRITON_CACHE_DIR are that folder
        self.writes_scratch = writes_scratch
        self.scratch = None
        self.extra_env = extra_env  # a callable: more environment for the worker, or None
        #: the sandbox's mode when it is this worker's own ("off": the GPU path's, whose
        #: driver needs its devices), else NORMCHECK_SANDBOX's
        self.sandbox = sandbox
        #: the cache folders it may read: the builds it runs (no other source's)
        self.roots = set(roots)
        self.proc = None
        self.stderr = None
        self.lock = threading.RLock()
        self.fd = None
        self.map = None
        self.size = 0
        self.state = None
        self.cpu_used = 0.0
        self.cpu_limit = 0
        self.as_limit = 0  # the running worker's address-space limit
        self.seq = 0
        self.loaded = set()  # the modules this worker has loaded (never unloaded)
        self.trusted = False  # it runs normcheck's own built-ins only (no user code)

    def arena(self, size: int):
        """The shared arena grown to at least ``size`` bytes (page 0 is the report page)."""
        if self.fd is None:
            d = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
            fd, path = tempfile.mkstemp(prefix="normcheck-arena-", dir=d)
            os.unlink(path)
            self.fd = fd
        if self.map is None or size > self.size:
            if self.map is not None:
                self.map.close()
            self.size = max(size, 2 * self.size, 4 * _PAGE)
            os.ftruncate(self.fd, self.size)
            self.map = mmap.mmap(self.fd, self.size)
        return self.map

    def _start(self, cpu_need: float = 0.0, address_space: int | None = None):
        if self.stderr is not None:
            self.stderr.close()
        self.stderr = tempfile.TemporaryFile()
        self.arena(4 * _PAGE)
        mode = self.sandbox or os.environ.get("NORMCHECK_SANDBOX", "on")
        if mode not in sandbox.MODES:
            raise invalid("NORMCHECK_SANDBOX", mode, "on or off (measure: "
                          "scripts/measure_syscalls.py only)")
        self.cpu_limit = int(max(sandbox.cpu_seconds(), 2 * cpu_need + 60))
        self.as_limit = address_space or sandbox.address_space()
        extra = {
            # static TLS for the shim's initial-exec variables, 64 bytes a loaded module
            "GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=262144",
            "NORMCHECK_ARENA_FD": str(self.fd),
            "NORMCHECK_SANDBOX": mode,
            "NORMCHECK_WORKER_AS": str(self.as_limit),
            "NORMCHECK_WORKER_CPU": str(self.cpu_limit),
        }
        if mode != "off":
            lib = sandbox_helper()
            extra["NORMCHECK_SANDBOX_LIB"] = lib
            # preloaded: its system/popen/posix_spawn report a kernel's call by name (see there)
            extra["LD_PRELOAD"] = lib
            extra["NORMCHECK_SANDBOX_READ"] = os.pathsep.join(
                sandbox.read_dirs(sorted(str(Path(r).resolve()) for r in self.roots)))
        if self.extra_env is not None:
            extra.update(self.extra_env())
        landlock = {}
        if self.writes_scratch:
            confine.require_landlock("a Triton file's host code on the GPU path")
            self._drop_scratch()
            self.scratch = tempfile.mkdtemp(prefix="normcheck-gpu-")
            extra.update({"HOME": self.scratch, "TMPDIR": self.scratch,
                          "TRITON_CACHE_DIR": os.path.join(self.scratch, "triton")})
            landlock = {"read": ["/"], "write": [self.scratch, "/dev"]}
        # isolated: nothing of the folder normcheck runs in is on its import path
        cmd = confine.command(isolation.command(self.module), **landlock)
        env = sandbox.worker_environment(extra)
        # started from one thread that lives as long as normcheck: normcheck-launch dies with
        # the *thread* that started it (PR_SET_PDEATHSIG follows the creating thread), so a
        # worker started from a build thread (normcheck.parts) would die when that thread ends
        self.proc = _spawner().submit(
            confine.spawn, subprocess.Popen, cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.stderr, env=env, bufsize=0, pass_fds=(self.fd,),
            start_new_session=True, cwd=isolation.private_cwd()).result()
        self.cpu_used = 0.0
        self.loaded = set()
        rep = self._exchange({"op": "ping"}, 60.0)
        if not isinstance(rep, tuple):
            try:
                rep = _ping_reply(rep)
            except wire.WireError as e:
                self._kill()
                rep = ("malformed", str(e))
        if isinstance(rep, tuple):
            raise BackendUnavailable("the cpu backend's worker process did not start: "
                                     + self.describe_death(rep))
        self.state = rep["sandbox"]
        missing = [m for m in ("landlock", "seccomp") if m not in self.state["enforced"]]
        if mode == "on" and missing and not self.trusted:  # fail closed: no user code runs
            # half-confined
            self._kill()
            raise confine.unconfined(
                f"the worker's {' and '.join(missing)} could not be applied "
                f"({self.state['detail']})")

    def _kill(self):
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
            try:
                self.proc.kill()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            for s in (self.proc.stdin, self.proc.stdout):
                try:
                    s.close()
                except OSError:
                    pass
        self.proc = None
        self._drop_scratch()

    def _drop_scratch(self):
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def messages(self, lines: int = 5, width: int = 300) -> str:
        """normcheck's own messages among the worker's last stderr output (lines that start with
        "normcheck"): only those are ever quoted, never what a kernel printed (which may hold
        anything it could read)."""
        if self.stderr is None:
            return ""
        self.stderr.seek(0, os.SEEK_END)
        size = self.stderr.tell()
        self.stderr.seek(max(0, size - 16384))
        tail = self.stderr.read().decode("utf-8", "replace").splitlines()
        own = [ln[:width] for ln in tail if ln.startswith("normcheck")]
        return "\n".join(own[-lines:])

    def undefined_symbol(self) -> str | None:
        """The symbol of a "symbol lookup error" in the worker's stderr (the dynamic loader's
        message), or None."""
        if self.stderr is None:
            return None
        self.stderr.seek(0, os.SEEK_END)
        size = self.stderr.tell()
        self.stderr.seek(max(0, size - 4096))
        m = re.search(rb"symbol lookup error: .*?undefined symbol: ([A-Za-z_][\w.@]{0,200})",
                      self.stderr.read())
        return m.group(1).decode() if m else None

    def report(self) -> str:
        """The report page: what the kernel did when it killed the process (untrusted text)."""
        if self.map is None:
            return ""
        raw = bytes(self.map[:_REPORT_LINE])
        return raw.split(b"\0", 1)[0].decode("ascii", "replace").strip()

    def clear_report(self):
        if self.map is not None:
            self.map[:_REPORT_LINE] = b"\0" * _REPORT_LINE

    def describe_death(self, rep) -> str:
        if rep[0] == "timeout":
            return "timed out"
        if rep[0] == "malformed":
            return f"its reply was malformed ({rep[1]})"
        own = self.messages()
        return f"the worker process died (exit code {rep[1]})" + (f": {one_line(own)}"
                                                                   if own else "")

    def _exchange(self, req, timeout):
        """Send ``req``; the reply (decoded, not yet checked against its schema), or ("died",
        returncode) / ("timeout", None) / ("malformed", what was wrong).  Each request carries a
        sequence number the reply must echo, so a reply forged ahead of the real one puts the
        stream out of step and is caught at the next exchange."""
        self.seq += 1
        data = wire.encode({**req, "seq": self.seq})
        try:
            self.proc.stdin.write(data)
        except (BrokenPipeError, OSError):
            rc = self.proc.wait()
            self._kill()
            return ("died", rc)
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        buf = b""
        need = wire.HEADER
        header = True
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                return ("timeout", None)
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, min(need - len(buf), 1 << 16))
            if not chunk:
                rc = self.proc.wait()
                self._kill()
                return ("died", rc)
            buf += chunk
            try:
                if header and len(buf) == wire.HEADER:
                    need = wire.header_length(buf)
                    buf = b""
                    header = False
                if not header and len(buf) == need:
                    rep = wire.decode(buf)
                    if not isinstance(rep, dict) or rep.pop("seq", None) != self.seq:
                        raise wire.WireError("a reply out of step with the requests (a forged "
                                             "reply before the real one?)")
                    cpu = rep.pop("cpu", None)
                    if not isinstance(cpu, float):
                        raise wire.WireError("a reply without the worker's CPU time")
                    self.cpu_used = max(self.cpu_used, cpu)
                    return rep
            except wire.WireError as e:
                self._kill()  # a worker that forges replies is not used again
                return ("malformed", str(e))

    def request(self, req: dict, timeout: float, schema=None, cpu_need: float = 0.0,
                address_space: int = 0):
        """Send a request; returns the reply checked against ``schema`` (a callable raising
        WireError), or ("died", returncode) / ("timeout", None) / ("malformed", what).
        ``cpu_need``: the CPU seconds the request may use (a fresh worker is started first when
        they would not fit in this one's lifetime limit); ``address_space``: bytes of address
        space the request maps beyond the usual (a large-index run's sparse arrays and their
        margins: a worker with room for them is started first)."""
        with self.lock:
            so = req.get("so")
            fresh = False
            want_as = sandbox.address_space() + address_space
            if self.proc is not None and (self.cpu_used + cpu_need > 0.9 * self.cpu_limit or
                                          self.as_limit < want_as):
                self._kill()
            if (self.proc is not None and so is not None and so not in self.loaded
                    and len(self.loaded) >= MODULES_PER_WORKER):
                self._kill()  # a loaded module is never unloaded: its code and stacks stay
            if self.proc is None or self.proc.poll() is not None:
                self._kill()
                self._start(cpu_need, want_as)
                fresh = True
            if so is not None:
                self.loaded.add(so)
            self.clear_report()
            rep = self._exchange(req, timeout)
            if isinstance(rep, tuple) or schema is None:
                return rep
            try:
                rep = schema(rep)
            except wire.WireError as e:
                self._kill()
                return ("malformed", str(e))
            if (not fresh and rep.get("ok") is False
                    and _ADDRESS_SPACE_SPENT.search(rep.get("message", ""))):
                # the modules loaded before this one used up the worker's address space: once
                # more in a fresh worker, where only this module is loaded; a kernel that fails
                # there too fails with the worker's own message
                self._kill()
                return self.request(req, timeout, schema, cpu_need)
            return rep

    def _zero(self, at: int, n: int):
        """Bytes ``at`` .. ``at + n`` of the arena zeros again, their whole pages given back to
        the system (a SparseRows array's rows a kernel touched: a persistent grid's walk)."""
        lo, hi = -(-at // _PAGE) * _PAGE, (at + n) // _PAGE * _PAGE
        view = np.frombuffer(self.map, np.uint8, count=self.size)
        try:
            view[at:min(lo, at + n)] = 0
            view[max(hi, at):at + n] = 0
        finally:
            del view
        if hi > lo:
            self.map.madvise(mmap.MADV_REMOVE, lo, hi - lo)

    def run_on_arrays(self, layout, size: int, req: dict, timeout: float, schema,
                      cpu_need: float = 0.0, on_dead=None):
        """One launch on arrays: each placed in the arena as ``layout`` says (array_layout's,
        0xA5 canaries around it), ``req`` sent, the arrays read back when the reply is ok.
        Returns the reply; a dead worker's ("died" / "timeout" / "malformed", ...) goes to
        ``on_dead`` while the lock is held (its crash report is still this launch's)."""
        with self.lock:
            view = np.frombuffer(self.arena(size), np.uint8, count=size)
            try:
                wide = []  # the arena offsets of SparseRows arrays (mapped with wide margins)
                for a, off, region, start in layout:
                    if isinstance(a, base.SparseRows):  # only its canaries and last rows
                        w0 = off + start + a.window_offset
                        self._zero(off + start, a.nbytes)  # rows a walk may read: zeros
                        view[off:off + start] = 0xA5
                        view[off + start + a.nbytes:off + region] = 0xA5
                        view[w0:w0 + a.data.nbytes] = a.data.reshape(-1).view(np.uint8)
                        wide.append(off)
                        continue
                    view[off:off + region] = 0xA5
                    view[off + start:off + start + a.nbytes] = a.reshape(-1).view(np.uint8)
                if wide:
                    req = {**req, "wide": wide}
                rep = self.request(req, timeout, schema, cpu_need=cpu_need,
                                   address_space=_wide_space(layout))
                if isinstance(rep, tuple):
                    if on_dead is not None:
                        on_dead(rep)
                elif rep["ok"]:
                    for a, off, region, start in layout:
                        if isinstance(a, base.SparseRows):
                            w0 = off + start + a.window_offset
                            a.data.reshape(-1).view(np.uint8)[:] = view[w0:w0 + a.data.nbytes]
                            self._zero(off + start, a.nbytes)  # the arena's pages given back
                        else:
                            a.reshape(-1).view(np.uint8)[:] = \
                                view[off + start:off + start + a.nbytes]
            finally:
                del view
        return rep

    def restart(self):
        """Stop the worker now; the next request starts a fresh one (its environment read
        again)."""
        with self.lock:
            self._kill()

    def sandbox_state(self):
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._kill()
                self._start()
            return self.state

    def close(self):
        with self.lock:
            self._kill()
            if self.stderr is not None:
                self.stderr.close()
                self.stderr = None
            if self.map is not None:
                self.map.close()
                self.map = None
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None


_SPAWNER = []


def _spawner():
    """The one thread the worker is started from (see Worker._start)."""
    if not _SPAWNER:
        from concurrent.futures import ThreadPoolExecutor

        _SPAWNER.append(ThreadPoolExecutor(1, thread_name_prefix="normcheck-worker-starter"))
    return _SPAWNER[0]


class Workers:
    """The worker processes: one for normcheck's own built-ins (the yardsticks: no user code
    has run in it), and one for each user build -- a kernel never shares a process with
    another source's code, so it cannot change another kernel's results (or its own
    yardstick's), and its sandbox reads no other build than its own.  The user workers kept
    alive are the ``keep`` used last; an older one is stopped, and started again if its build
    runs again."""

    def __init__(self, module: str = "normcheck.backends.cpu.worker", extra_env=None,
                 keep: int = 4, roots=(), sandbox: str | None = None,
                 writes_scratch: bool = False):
        self.module, self.extra_env, self.keep = module, extra_env, keep
        self.writes_scratch = writes_scratch  # Worker.writes_scratch
        self.roots = tuple(roots)  # what every worker of the pool reads besides its builds
        self.sandbox = sandbox  # the workers' sandbox mode (Worker.sandbox)
        self.own = None
        self.users = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, folder: str, own: bool) -> Worker:
        """The worker of the build in ``folder`` (``own``: a built-in's; its folder is one the
        built-ins' worker reads already)."""
        if own:
            with self.lock:
                if self.own is None:
                    self.own = Worker(self.module, self.extra_env,
                                      roots=(*self.roots, folder), sandbox=self.sandbox,
                                      writes_scratch=self.writes_scratch)
                    self.own.trusted = True
                w, grown = self.own, folder not in self.own.roots
                if grown:  # a new set: a start under way reads the old one
                    w.roots = w.roots | {folder}
            if grown:
                w.restart()  # started again, reading that folder too (outside the pool's lock)
            return w
        old = []
        with self.lock:
            w = self.users.pop(folder, None)
            if w is None:
                w = Worker(self.module, self.extra_env, roots=(*self.roots, folder),
                           sandbox=self.sandbox, writes_scratch=self.writes_scratch)
            self.users[folder] = w
            while len(self.users) > self.keep:
                old.append(self.users.popitem(last=False)[1])
        for o in old:  # outside the pool's lock: a launch may hold the old worker's
            o.close()
        return w

    def any(self) -> Worker:
        """A worker to ask what the sandbox enforces (the built-ins')."""
        with self.lock:
            if self.own is None:
                self.own = Worker(self.module, self.extra_env, roots=self.roots,
                                  sandbox=self.sandbox, writes_scratch=self.writes_scratch)
            return self.own

    def all(self) -> list:
        with self.lock:
            return [w for w in (self.own, *self.users.values()) if w is not None]

    def close(self):
        for w in self.all():
            w.close()


#: The cpu backend's workers.
WORKERS = Workers()
atexit.register(WORKERS.close)


def _ping_reply(rep):
    wire.check(rep, {"ok": (True,), "sandbox": dict}, "the worker's greeting")
    wire.check(rep["sandbox"], {"mode": str, "enforced": lambda v: None if isinstance(v, list)
                                and all(isinstance(x, str) for x in v) else "a list of names",
                                "detail": str}, "the worker's sandbox state")
    return rep


def _wide_space(layout) -> int:
    """The address space a launch's SparseRows arrays map: their data and wide margins."""
    from normcheck.backends.cpu.worker import wide_margin  # the worker's margin, counted

    return sum(a.nbytes + wide_margin(a.dtype.itemsize) for a, *_ in layout
               if isinstance(a, base.SparseRows))
