"""The cpu backend: the same CUDA C source compiled by g++ against a SIMT shim, run in a sandboxed
worker process.

Build (:func:`build`): the source is wrapped into one C++ translation unit -- the shim header
(``normcheck/shim/normcheck_simt.h``), the user's file under a ``#line`` directive (so g++
reports errors against the user's own file and line), then the runtime and one exported launcher
per entry -- and

1. preprocessed (``g++ -E``) with the shim first on the include path (its ``cuda_runtime.h``,
   ``cooperative_groups.h`` and ``cub/`` stand in for NVIDIA's), then the user's folders, then
   the CUDA headers of the nvidia-cuda-* wheels (``cuda_fp16.h``, ``cuda_bf16.h``, and libcu++'s
   ``<cuda/std/...>`` from the cccl wheel);
2. rewritten (:mod:`normcheck.backends.translate`): ``__shared__`` in every file, host-side
   launches, inline PTX (:mod:`normcheck.backends.ptx`);
3. looked up in the build cache by the hash of the rewritten text (which holds every included
   file), the compiler's version and the flags; compiled into a temporary file and renamed
   into place when missing.

Run: launches go to a worker process (:mod:`normcheck.backends._worker`) that enters a sandbox
(:mod:`normcheck.backends.sandbox`) before loading user code, so that a segfault, an abort, a
deadlock, an endless loop or a forbidden system call becomes a typed error
(:mod:`normcheck.errors`) and the caller carries on.  Every array is mapped between inaccessible
pages: by default its end is against the upper one (an element read or written past the end is
caught at once); ``guard="start"`` puts its start against the lower one (an element before the
start), ``"both"`` launches twice to catch either.
"""

from __future__ import annotations

import atexit
import importlib.util
import mmap
import os
import pickle
import platform
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from normcheck.backends import base, sandbox, translate
from normcheck.errors import (
    BackendUnavailable,
    CompileError,
    KernelCrash,
    KernelDeadlock,
    KernelError,
    KernelTimeout,
    MisalignedAccess,
    OutOfBounds,
    SandboxViolation,
    StackOverflow,
    invalid,
)

__all__ = ["CpuBackend", "CpuKernel", "CPU_VS_GPU", "SHIM_DIR", "cuda_include_dirs", "GUARDS"]

SHIM_DIR = Path(__file__).resolve().parent.parent / "shim"

#: Where a CPU run differs from a GPU run; recorded with every result.
CPU_VS_GPU = {
    "fma": "no contraction (-ffp-contract=off): bit-identical to nvcc --fmad=false; nvcc's default "
           "--fmad=true fuses a*b+c and changes results",
    "rsqrtf": "1.0f/sqrtf(x) (two correctly rounded operations); the GPU's rsqrtf is approximate "
              "(<= 2 ulp)",
    "__frsqrt_rn": "correctly rounded, as on the GPU",
    "__expf/__logf/__sinf/__fdividef": "evaluated with the accurate libm/IEEE operation; the GPU's "
                                       "intrinsics are approximate",
    "inline PTX": "translated instruction by instruction (normcheck.backends.ptx); the approximate "
                  "ones (rsqrt.approx, rcp.approx, ex2.approx, lg2.approx, sqrt.approx, "
                  "tanh.approx) are evaluated accurately (rsqrt correctly rounded), .ftz flushes "
                  "subnormals as on the GPU",
    "CUB": "cub::BlockReduce and cub::WarpReduce reduce in CUB's own order (warp shuffles, then "
           "warp aggregates in order), so float sums are bit-identical; ThreadReduce over a "
           "thread's own array of __half/__nv_bfloat16 is sequential here (the GPU pairs them "
           "with SIMD instructions from sm_80)",
    "denormals": "kept, as on the GPU without -ftz (no fast-math)",
    "scheduling": "threads of a block run in a fixed order (forward, reverse or seeded random "
                  "warps); races show up deterministically for that order only",
    "alignment": "a 16-byte vector access to an address that is not 16-byte aligned faults as on "
                 "the GPU; narrower misaligned accesses (8-byte float2 ...) do not fault on x86",
}

DEFAULT_TIMEOUT = 60.0
GUARDS = ("end", "start", "both")
# -fstack-clash-protection: a frame larger than a page probes each page, so deep recursion or a
# large local array meets its fiber stack's guard page (a named stack overflow) instead of
# stepping over it into other memory
_CXX_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-ffp-contract=off",
              "-fstack-clash-protection",
              "-fno-fast-math", "-fno-strict-aliasing", "-fvisibility=hidden", "-fno-gnu-unique",
              "-mtls-dialect=gnu2"]
_PP_FLAGS = ["-std=c++17", "-pthread", "-E"]
_SCHEDULES = {"forward": 0, "reverse": 1, "random": 2}
_PAGE = mmap.PAGESIZE
_REPORT_PAGE = _PAGE  # page 0 of the arena
OPTIONS = ("timeout", "workers", "schedule", "flags", "guard")


def cuda_include_dirs() -> list[Path]:
    """The folders holding cuda_fp16.h (and libcu++'s cuda/std, where they exist):
    $NORMCHECK_CUDA_INCLUDE, the nvidia-cuda-runtime wheel, or a CUDA toolkit."""
    env = os.environ.get("NORMCHECK_CUDA_INCLUDE")
    cands = [Path(env)] if env else []
    spec = importlib.util.find_spec("nvidia")
    if spec and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            cands += [Path(loc) / "cu13" / "include", Path(loc) / "cuda_runtime" / "include"]
    cands += [Path("/usr/local/cuda/include"), Path("/usr/include")]
    for c in cands:
        if (c / "cuda_fp16.h").is_file() and (c / "cuda_bf16.h").is_file():
            out = [c]
            for extra in (c / "cccl", c.parent / "cccl" / "include"):
                if (extra / "cuda" / "std").is_dir():
                    out.append(extra)
            return out
    raise BackendUnavailable(
        "cuda_fp16.h was not found: install normcheck's dependencies (pip install normcheck "
        "brings nvidia-cuda-runtime, nvidia-cuda-crt and nvidia-cuda-cccl) or set "
        "NORMCHECK_CUDA_INCLUDE to a CUDA include directory")


def _compiler() -> tuple[str, str]:
    return base.cxx()


_UNDECLARED = re.compile(r"'([A-Za-z_]\w*)' was not declared in this scope|"
                         r"'([A-Za-z_]\w*)' is not a member of")


def _explain(diag: str, tu_path: str) -> str:
    diag = diag.replace(tu_path, "<normcheck wrapper>")
    hints = []
    for m in _UNDECLARED.finditer(diag):
        name = m.group(1) or m.group(2)
        if name.startswith("__") or name.startswith("atomic") or name.startswith("tex") or \
                name in ("nvcuda", "wmma"):
            hints.append(f"normcheck: `{name}` is a CUDA feature the cpu backend's SIMT shim does "
                         "not support (see normcheck/shim/normcheck_simt.h for what it does)")
    if "<normcheck launch wrappers>" in diag and "NORMCHECK_ENTRY" in diag:
        hints.append("normcheck: the entry could not be instantiated: check the --entry name (for "
                     "a template give the instantiation, e.g. rms_norm<__half>) and that the "
                     "kernel is not overloaded")
    return diag + ("\n" + "\n".join(dict.fromkeys(hints)) if hints else "")


@dataclass
class Module:
    path: str
    entries: list
    origin: str
    signatures: dict = field(default_factory=dict)


def _line_literal(origin: str) -> str:
    return '"' + origin.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _translation_unit(src: base.Source, entries: list[str]) -> str:
    lines = ['#include "normcheck_simt.h"',
             f"#line 1 {_line_literal(src.origin)}",
             src.text,
             '#line 1 "<normcheck launch wrappers>"',
             '#include "normcheck_runtime.h"']
    for i, e in enumerate(entries):
        lines.append(f"NORMCHECK_ENTRY({i}, {e})")
    return "\n".join(lines) + "\n"


def preprocess(src: base.Source, entries: list[str], defines=None, extra_flags=()) -> str:
    """The rewritten, preprocessed translation unit of ``src`` with launchers for ``entries``."""
    cxx, _ = _compiler()
    incs = cuda_include_dirs()
    tu = _translation_unit(src, entries)
    flags = [*_PP_FLAGS, *base.define_flags(defines), f"-I{SHIM_DIR}",
             *[f"-I{d}" for d in src.include_dirs], *[f"-isystem{d}" for d in incs],
             *extra_flags]
    with tempfile.TemporaryDirectory(prefix="normcheck-pp-") as d:
        tu_path = Path(d) / "normcheck_tu.cpp"
        tu_path.write_text(tu)
        r = base.run_compiler([cxx, *flags, "-x", "c++", str(tu_path), "-o", "-"],
                              f"preprocessing {src.origin}")
        if r.returncode != 0:
            raise CompileError(f"g++ could not preprocess {src.origin} for the cpu backend",
                               _explain(r.stderr, str(tu_path)))
        text = r.stdout.replace(str(tu_path), "<normcheck wrapper>")
    shim = str(SHIM_DIR)

    def user_file(path):
        return not path.startswith(shim) and path not in (
            "<built-in>", "<command-line>", "<normcheck launch wrappers>", "<normcheck wrapper>")

    return translate.rewrite(text, user_file)


def build(src: base.Source, entries: list[str], defines=None, extra_flags=()) -> Module:
    """Compile ``src`` exporting ``entries`` (cached; see the module docstring)."""
    for e in entries:
        if not isinstance(e, str) or not base.ENTRY_RE.match(e):
            raise invalid("entry", e, "a kernel name or a template instantiation such as "
                          "rms_norm<__half>", "give the name of a __global__ function")
    cxx, version = _compiler()
    extra = [str(f) for f in extra_flags]
    text = preprocess(src, entries, defines, extra)
    flags = [*_CXX_FLAGS, *extra]
    key = base.key_of(text, " ".join(flags), version)
    so = base.cache_dir("cpu") / key / "kernel.so"
    if not so.is_file():
        with tempfile.TemporaryDirectory(prefix="normcheck-build-") as d:
            ii = Path(d) / "kernel.ii"
            ii.write_text(text)
            out = Path(d) / "kernel.so"
            r = base.run_compiler([cxx, *flags, "-x", "c++-cpp-output", str(ii), "-o", str(out)],
                                  f"compiling {src.origin}")
            if r.returncode != 0:
                missing = [e for e in entries if re.search(
                    rf"<normcheck launch wrappers>:\d+:\d+: error: '{re.escape(e.split('<')[0])}' "
                    r"(was not declared|is not a member)", r.stderr)]
                head = (f"entry {missing[0]!r} is not a kernel of {src.origin}: check --entry "
                        "(for a template, the instantiation, e.g. rms_norm<__half>)" if missing
                        else f"g++ could not compile {src.origin} for the cpu backend "
                             f"(entries: {', '.join(entries)})")
                raise CompileError(head, _explain(r.stderr, str(ii)))
            base.install_file(out.read_bytes(), so)
    mod = Module(str(so), list(entries), src.origin)
    # the signatures are read in the worker: the caller's process never loads user code
    rep = _worker.request({"op": "signatures", "so": str(so), "n": len(entries)}, 60.0)
    if isinstance(rep, tuple) or not rep.get("ok"):
        raise CompileError(f"{src.origin}: the compiled module could not be loaded",
                           rep.get("message", "") if isinstance(rep, dict) else
                           _worker.describe_death(rep))
    for e, raw in zip(entries, rep["signatures"]):
        mod.signatures[e] = base.parse_signature(raw)
    return mod


def sandbox_helper() -> str:
    """The sandbox helper library, ``shim/normcheck_sandbox.c`` (built once, cached).  It is C,
    compiled by the C++ compiler's driver with ``-x c``: one compiler to configure (CXX)."""
    return str(base.build_library(
        SHIM_DIR / "normcheck_sandbox.c", "cpu", "sandbox",
        ["-x", "c", "-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden"],
        "building the cpu backend's sandbox helper", link=("-x", "none", "-ldl")))


# ------------------------------------------------------------------------------------------------
# Worker process
# ------------------------------------------------------------------------------------------------
class _Worker:
    """One worker process; restarted after a crash or a timeout.  The arena it shares with this
    process is an unlinked file: nothing is left in /dev/shm whatever happens."""

    def __init__(self):
        self.proc = None
        self.stderr = None
        self.lock = threading.RLock()
        self.fd = None
        self.map = None
        self.size = 0
        self.state = None

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

    def _start(self):
        if self.stderr is not None:
            self.stderr.close()
        self.stderr = tempfile.TemporaryFile()
        self.arena(4 * _PAGE)
        env = dict(os.environ)
        # static TLS for the shim's initial-exec variables, 64 bytes a loaded module
        env["GLIBC_TUNABLES"] = ":".join(
            t for t in (env.get("GLIBC_TUNABLES"), "glibc.rtld.optional_static_tls=262144") if t)
        env["NORMCHECK_ARENA_FD"] = str(self.fd)
        env["NORMCHECK_PARENT_PID"] = str(os.getpid())
        mode = os.environ.get("NORMCHECK_SANDBOX", "on")
        if mode not in sandbox.MODES:
            raise invalid("NORMCHECK_SANDBOX", mode, "on or off")
        if mode == "on":
            lib = sandbox_helper()
            env["NORMCHECK_SANDBOX_LIB"] = lib
            # preloaded: its system/popen/posix_spawn report a kernel's call by name (see there)
            env["LD_PRELOAD"] = " ".join(p for p in (lib, env.get("LD_PRELOAD")) if p)
            env["NORMCHECK_SANDBOX_READ"] = os.pathsep.join(
                sandbox.read_dirs(str(base.cache_dir("cpu").resolve())))
        pkg_root = str(Path(__file__).resolve().parent.parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen([sys.executable, "-m", "normcheck.backends._worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=env, bufsize=0,
                                     pass_fds=(self.fd,), start_new_session=True)
        rep = self._exchange({"op": "ping"}, 60.0)
        if isinstance(rep, tuple):
            raise BackendUnavailable("the cpu backend's worker process did not start: "
                                     + self.describe_death(rep))
        self.state = rep.get("sandbox")

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

    def stderr_tail(self, n=2000) -> str:
        if self.stderr is None:
            return ""
        self.stderr.seek(0, os.SEEK_END)
        size = self.stderr.tell()
        self.stderr.seek(max(0, size - n))
        return self.stderr.read().decode(errors="replace").strip()

    def report(self) -> str:
        """The report page: what the kernel did when it killed the process."""
        if self.map is None:
            return ""
        raw = bytes(self.map[:_REPORT_PAGE])
        return raw.split(b"\0", 1)[0].decode(errors="replace").strip()

    def clear_report(self):
        if self.map is not None:
            self.map[:64] = b"\0" * 64

    def describe_death(self, rep) -> str:
        if rep[0] == "timeout":
            return "timed out"
        tail = self.stderr_tail()
        return f"the worker process died (exit code {rep[1]})" + (f": {tail}" if tail else "")

    def _exchange(self, req, timeout):
        data = pickle.dumps(req, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(struct.pack("<Q", len(data)) + data)
        except (BrokenPipeError, OSError):
            rc = self.proc.wait()
            self._kill()
            return ("died", rc)
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        buf = b""
        need = 8
        header = True
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                return ("timeout", None)
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, need - len(buf) if header else max(need - len(buf), 1 << 16))
            if not chunk:
                rc = self.proc.wait()
                self._kill()
                return ("died", rc)
            buf += chunk
            if header and len(buf) >= 8:
                need = struct.unpack("<Q", buf[:8])[0]
                buf = buf[8:]
                header = False
            if not header and len(buf) >= need:
                return pickle.loads(buf[:need])

    def request(self, req: dict, timeout: float):
        """Send a request; returns the reply, or ("died", returncode) / ("timeout", None)."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._kill()
                self._start()
            self.clear_report()
            return self._exchange(req, timeout)

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


_worker = _Worker()
atexit.register(_worker.close)


def _parse_report(text: str) -> dict:
    out = {}
    for tok in text.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
    return out


# ------------------------------------------------------------------------------------------------
# Backend and kernel
# ------------------------------------------------------------------------------------------------
def _layout(args, guard):
    """Where each array goes in the arena: (wire records, [(array, data offset)], size)."""
    wire, layout = [], []
    size = _REPORT_PAGE
    for a in args:
        if a is None:
            wire.append(("null",))
        elif isinstance(a, np.ndarray):
            # "end": the data 16-byte aligned at its start, ending at most 15 bytes before the
            # guard page; "tight": ending exactly at it (aligned only as its size allows)
            span = max(a.nbytes, 1) if guard == "tight" else -(-max(a.nbytes, 1) // 16) * 16
            region = -(-span // _PAGE) * _PAGE
            start = region - span if guard in ("end", "tight") else 0
            wire.append(("array", size, region, start, a.nbytes, a.dtype.itemsize))
            layout.append((a, size, region, start))
            size += region
        else:
            wire.append(("scalar", a.dtype.str, a.tobytes()))
    return wire, layout, size


class CpuKernel:
    """A compiled entry; call it as ``kernel(grid, block, args, shared_mem=0)``."""

    def __init__(self, module: Module, entry: str, options: dict):
        self.module = module
        self.entry = entry
        self.index = module.entries.index(entry)
        self.params = module.signatures[entry]
        self.options = options
        self.last_seconds = None
        self.needs_alignment = False  # its vector loads faulted once in the tight layout

    def __repr__(self):
        return f"<CpuKernel {self.entry}({', '.join(p.ctype for p in self.params)})>"

    def __call__(self, grid, block, args, shared_mem=0, *, names=None, timeout=None,
                 schedule=None, workers=None, seed=0, guard=None):
        g, b, shm = base.check_launch(grid, block, shared_mem)
        args = base.check_args(self.entry, self.params, args, names)
        timeout = self.options.get("timeout") if timeout is None else timeout
        timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        if not isinstance(timeout, (int, float)) or not np.isfinite(timeout) or timeout <= 0:
            raise invalid("timeout", timeout, "a positive, finite number of seconds",
                          "e.g. timeout=60")
        schedule = schedule or self.options.get("schedule", "forward")
        if schedule not in _SCHEDULES:
            raise invalid("schedule", schedule, f"one of {sorted(_SCHEDULES)}")
        workers = int(workers or self.options.get("workers") or os.cpu_count() or 1)
        if workers < 1:
            raise invalid("workers", workers, "at least 1")
        guard = guard or self.options.get("guard", "end")
        if guard not in GUARDS:
            raise invalid("guard", guard, f"one of {', '.join(GUARDS)}")
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise invalid("seed", seed, "a non-negative integer")
        if guard == "both":
            # a second launch with every array's start against a guard page, on copies
            self._launch(g, b, shm, [a.copy() if isinstance(a, np.ndarray) else a for a in args],
                         names, float(timeout), schedule, workers, int(seed), "start")
            guard = "end"
        if guard == "end" and not self.needs_alignment and \
                any(isinstance(a, np.ndarray) and a.nbytes % 16 for a in args):
            # an array whose size is not a multiple of 16 bytes first ends exactly at its guard
            # page, so a read one element past it faults; a kernel whose vector loads need the
            # 16-byte alignment that costs runs again aligned (reads into the last granule's
            # padding then go unseen; writes there are still caught by the canaries) -- and
            # from then on runs aligned straight away, rather than twice a launch
            try:
                self._launch(g, b, shm, args, names, float(timeout), schedule, workers,
                             int(seed), "tight")
                return
            except MisalignedAccess:
                self.needs_alignment = True
        self._launch(g, b, shm, args, names, float(timeout), schedule, workers, int(seed), guard)

    def _launch(self, g, b, shm, args, names, timeout, schedule, workers, seed, guard):
        wire, layout, size = _layout(args, guard)
        threads = b[0] * b[1] * b[2]
        with _worker.lock:
            mm = _worker.arena(size)
            view = np.frombuffer(mm, np.uint8, count=size)
            try:
                for a, off, region, start in layout:
                    view[off:off + region] = 0xA5
                    view[off + start:off + start + a.nbytes] = a.reshape(-1).view(np.uint8)
                req = {"op": "launch", "so": self.module.path, "index": self.index, "grid": g,
                       "block": b, "shared_mem": shm, "args": wire, "workers": workers,
                       "schedule": _SCHEDULES[schedule], "seed": seed,
                       "cpu_seconds": timeout * min(workers, max(1, g[0] * g[1] * g[2])) + 30}
                rep = _worker.request(req, timeout)
                if isinstance(rep, tuple):
                    self._raise_dead(rep, args, names, timeout, threads)
                if not rep["ok"]:
                    self._raise_failed(rep, args, names)
                for a, off, region, start in layout:
                    a.reshape(-1).view(np.uint8)[:] = view[off + start:off + start + a.nbytes]
            finally:
                del view
        self.last_seconds = rep["seconds"]

    # -- failures ---------------------------------------------------------------------------------
    def _name(self, i, names):
        p = self.params[i]
        n = f" `{names[i]}`" if names and i < len(names) else ""
        return f"argument {i}{n} ({p.ctype})"

    def _arg(self, info, names):
        i = int(info["arg"])
        return {"arg": i, "name": names[i] if names and i < len(names) else None}

    def _oob(self, info, args, names, where=""):
        i = int(info["arg"])
        a = args[i]
        item = int(info.get("itemsize", a.dtype.itemsize)) or 1
        access = info.get("access", "access")
        if "past_end_bytes" in info:
            off = int(info["past_end_bytes"])
            elem = a.size + off // item
            detail = (f"{access} of element {elem} of {self._name(i, names)}, which has "
                      f"{a.size} elements (valid indices 0..{a.size - 1})")
        else:
            off = int(info["before_start_bytes"])
            detail = (f"{access} of element {-((off + item - 1) // item)} of "
                      f"{self._name(i, names)} (before its start)")
        return OutOfBounds(f"{self.entry}: out-of-bounds {detail}{where}", access=access,
                           **self._arg(info, names))

    def _raise_dead(self, rep, args, names, timeout, threads):
        if rep[0] == "timeout":
            raise KernelTimeout(f"{self.entry}: the launch ran past its {timeout:g} s limit (an "
                                "endless loop, or a wait for something that never happens); "
                                "raise it with timeout=... / --timeout if the kernel is just slow",
                                seconds=timeout)
        info = _parse_report(_worker.report())
        where = ""
        if "block" in info:
            where = f" in block ({info['block']}), thread ({info.get('thread', '?')})"
        kind = info.get("kind")
        tail = _worker.stderr_tail()
        extra = f"\n{tail}" if tail else ""
        if kind == "out_of_bounds":
            raise self._oob(info, args, names, where)
        if kind == "misaligned":
            what = f"{info.get('bytes', '?')}-byte {'store' if info.get('access') == 'write' else 'load'}"
            if "arg" in info:
                i = int(info["arg"])
                item = int(info.get("itemsize", 1)) or 1
                off = int(info["elem_offset_bytes"])
                detail = (f"misaligned {what} of {self._name(i, names)} at element {off // item}"
                          + (f" (+{off % item} bytes)" if off % item else "")
                          + f", address {info.get('addr')}")
                raise MisalignedAccess(f"{self.entry}: {detail}{where} (a GPU requires a "
                                       f"{info.get('bytes')}-byte access to be aligned to "
                                       f"{info.get('bytes')} bytes)", **self._arg(info, names))
            raise MisalignedAccess(f"{self.entry}: misaligned {what} at {info.get('addr')}{where}")
        if kind == "stack_overflow":
            kb = int(info.get("stack_bytes", 0)) // 1024
            raise StackOverflow(f"{self.entry}: stack overflow{where} (each thread has {kb} KiB of "
                                "stack; set NORMCHECK_STACK_KB for more, or look for deep "
                                "recursion or large local arrays)", stack_kib=kb)
        if kind == "null_pointer":
            raise KernelCrash(f"{self.entry}: null pointer {info.get('access', 'access')} at "
                              f"{info.get('addr')}{where}", signal=11)
        if kind is None and rep[0] == "died" and rep[1] == -signal.SIGSYS:
            # seccomp's SIGSYS arrived while every signal was blocked: the kernel killed the
            # worker without running the handler, so the call has no name
            kind, info = "sandbox", {"detail": "blocked"}
        if kind == "sandbox":
            if info.get("detail") == "file_size":
                what = "wrote more than the file-size limit (64 MiB) to its output"
            elif info.get("detail") == "cpu_time":
                what = "used more CPU time than its launch allows"
            elif info.get("detail") == "blocked":
                what = "made a forbidden system call with every signal blocked (which call is unknown)"
            elif "call" in info:
                what = f"made a forbidden system call: {info['call']} (a new process)"
            else:
                what = f"made a forbidden system call: {sandbox.syscall_name(info.get('syscall'))}"
            raise SandboxViolation(f"{self.entry}: {what}{where}; the sandbox allows a kernel no "
                                   "new processes, network, file writes or signals to other "
                                   "processes (normcheck.backends.sandbox)",
                                   call=info.get("call", info.get("syscall")))
        if kind in ("abort", "trap", "arithmetic", "crash"):
            what = {"abort": "aborted (a failed assert?)", "trap": "trapped (__trap or an illegal "
                    "instruction)", "arithmetic": "arithmetic exception (integer division by "
                    "zero?)", "crash": f"crashed (signal {info.get('signal')}, address "
                    f"{info.get('addr', '?')}, {info.get('access', '')}"
                    f"{', ' + info['detail'] if 'detail' in info else ''})"}[kind]
            raise KernelCrash(f"{self.entry}: {what}{where}{extra}",
                              signal=int(info.get("signal", 0) or 0))
        if "symbol lookup error" in tail:
            raise KernelCrash(f"{self.entry}: the kernel called a function that is declared but "
                              f"never defined{extra}", signal=0)
        rc = rep[1]
        if rc is not None and rc < 0:
            sig = -rc
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig
            raise KernelCrash(f"{self.entry}: the worker process was killed by {name}{extra}",
                              signal=sig)
        raise KernelCrash(f"{self.entry}: the worker process died (exit code {rc}){extra}",
                          signal=0)

    def _raise_failed(self, rep, args, names):
        if rep["kind"] == "deadlock":
            raise KernelDeadlock(f"{self.entry}: {rep['message']}")
        if rep["kind"] == "out_of_bounds":
            raise self._oob(_parse_report(rep["message"]), args, names)
        raise KernelError(f"{self.entry}: {rep['message']}")


class CpuBackend(base.Backend):
    """Compile CUDA C with g++ against the SIMT shim and run it on the CPU."""

    name = "cpu"

    def __init__(self):
        reason = self.unavailable_reason()
        if reason:
            raise BackendUnavailable(f"the cpu backend cannot run here: {reason}")

    @classmethod
    def unavailable_reason(cls) -> str | None:
        if platform.machine().lower() not in ("x86_64", "amd64"):
            return (f"its fiber switch is written for x86-64; this machine is "
                    f"{platform.machine()}")
        if not sys.platform.startswith("linux"):
            return "it needs Linux (guard pages, process groups, seccomp)"
        try:
            _compiler()
            cuda_include_dirs()
        except BackendUnavailable as e:
            return str(e)
        return None

    def compile_many(self, source, entries, *, defines=None, options=None,
                     include_dirs=()) -> dict:
        """Build several entries of one source into one module (one g++ run).  ``options``:
        timeout (s), workers (OS threads), schedule ("forward", "reverse", "random"), guard
        ("end", "start", "both"), flags (extra g++ flags)."""
        options = dict(options or {})
        for k in options:
            if k not in OPTIONS + ("fmad",):
                raise invalid("options", k, f"one of {', '.join(OPTIONS)}")
        if options.get("fmad"):
            raise invalid("options.fmad", True, "False on the cpu backend (it never contracts "
                          "a*b+c, like nvcc --fmad=false)", "use the cuda backend for --fmad")
        src = base.load_source(source, include_dirs)
        mod = build(src, list(entries), defines, options.get("flags", ()))
        return {e: CpuKernel(mod, e, options) for e in entries}

    def provenance(self, options=None) -> dict:
        cxx, version = _compiler()
        st = _worker.sandbox_state() or {}
        return {"backend": "cpu", "compiler": version.split(" Copyright")[0],
                "flags": " ".join(_CXX_FLAGS), "fmad": False,
                "device": platform.processor() or platform.machine(),
                "sandbox": st.get("detail", "?"), "cpu_vs_gpu": CPU_VS_GPU}
