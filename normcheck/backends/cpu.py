"""The cpu backend: the same CUDA C source compiled by g++ against a SIMT shim, run in a worker
process.

Build: the source is wrapped into one C++ translation unit — the shim header
(``normcheck/shim/normcheck_simt.h``), the user's file under a ``#line`` directive (so g++ reports
errors against the user's own file and line), then the runtime and one exported launcher per
entry — and compiled with NVIDIA's ``cuda_fp16.h``/``cuda_bf16.h`` from the nvidia-cuda-* wheels
on the include path.  ``extern __shared__ T name[];`` is rewritten to a pointer to the block's
dynamic shared memory.  Builds are cached on the source, entries, defines, flags, compiler
version and shim version.

Run: launches go to a worker process (``normcheck.backends._worker``) so that a segfault, an
abort, a deadlock or an endless loop becomes a typed error (:mod:`normcheck.errors`) and the
caller carries on; every array gets a guard page right after its last byte, so one element read
or written past its end is caught and named.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import mmap
import os
import pickle
import platform
import re
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from normcheck.backends import base
from normcheck.errors import (
    BackendUnavailable,
    CompileError,
    KernelCrash,
    KernelDeadlock,
    KernelError,
    KernelTimeout,
    OutOfBounds,
    invalid,
)

__all__ = ["CpuBackend", "CpuKernel", "CPU_VS_GPU", "SHIM_DIR", "cuda_include_dir"]

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
    "denormals": "kept, as on the GPU without -ftz (no fast-math)",
    "scheduling": "threads of a block run in a fixed order (forward, reverse or seeded random "
                  "warps); races show up deterministically for that order only",
}

DEFAULT_TIMEOUT = 60.0
_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-ffp-contract=off",
          "-fno-fast-math", "-fno-strict-aliasing", "-fvisibility=hidden", "-fno-gnu-unique",
          "-mtls-dialect=gnu2"]
_SCHEDULES = {"forward": 0, "reverse": 1, "random": 2}


def cuda_include_dir() -> Path:
    """Directory holding cuda_fp16.h: $NORMCHECK_CUDA_INCLUDE, the nvidia-cuda-runtime wheel, or
    a CUDA toolkit."""
    env = os.environ.get("NORMCHECK_CUDA_INCLUDE")
    cands = [Path(env)] if env else []
    spec = importlib.util.find_spec("nvidia")
    if spec and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            cands += [Path(loc) / "cu13" / "include", Path(loc) / "cuda_runtime" / "include"]
    cands += [Path("/usr/local/cuda/include"), Path("/usr/include")]
    for c in cands:
        if (c / "cuda_fp16.h").is_file() and (c / "cuda_bf16.h").is_file():
            return c
    raise BackendUnavailable(
        "cuda_fp16.h was not found: install normcheck's dependencies (pip install normcheck "
        "brings nvidia-cuda-runtime, nvidia-cuda-crt and nvidia-cuda-cccl) or set "
        "NORMCHECK_CUDA_INCLUDE to a CUDA include directory")


def _cache_dir() -> Path:
    d = os.environ.get("NORMCHECK_CACHE")
    root = Path(d) if d else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / \
        "normcheck"
    return root / "cpu"


_gxx_version = None


def _compiler() -> tuple[str, str]:
    global _gxx_version
    cxx = os.environ.get("CXX", "g++")
    if _gxx_version is None:
        try:
            _gxx_version = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                                          check=True).stdout.splitlines()[0]
        except (OSError, subprocess.CalledProcessError) as e:
            raise BackendUnavailable(f"the cpu backend needs a C++ compiler ({cxx}): {e}; "
                                     "install g++ or set CXX") from None
    return cxx, _gxx_version


def _shim_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(SHIM_DIR.rglob("*")):
        if p.is_file():
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()


_EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+((?:__align__\s*\([^)]*\)\s*|alignas\s*\([^)]*\)\s*|"
    r"__attribute__\s*\(\([^)]*\)\)\s*)*)([A-Za-z_][\w:<>,\s\*]*?)\s+([A-Za-z_]\w*)\s*\[\s*\]\s*;")
_ASM = re.compile(r"\b(?:asm|__asm__)\s*(?:volatile\s*|__volatile__\s*)?\(")


def _brace_depth(text: str, pos: int) -> int:
    code = re.sub(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'", "",
                  text[:pos], flags=re.S)
    return code.count("{") - code.count("}")


def rewrite_source(src: str, origin: str) -> str:
    """Rewrite what g++ cannot take as is; keeps every line where it was."""
    m = _ASM.search(src)
    if m:
        line = src.count("\n", 0, m.start()) + 1
        raise CompileError(f"{origin}:{line}: inline assembly (PTX) cannot run on the cpu backend; "
                           "write the operation in CUDA C (or guard it with "
                           "#ifndef __NORMCHECK_CPU__)")

    def repl(mm):
        typ, name = mm.group(2).strip(), mm.group(3)
        if _brace_depth(src, mm.start()) > 0:
            return f"{typ}* {name} = reinterpret_cast<{typ}*>(__normcheck_dynamic_smem());"
        return f"#define {name} (reinterpret_cast<{typ}*>(__normcheck_dynamic_smem()))"

    return _EXTERN_SHARED.sub(repl, src)


def _translation_unit(src: str, origin: str, entries: list[str]) -> str:
    lines = ['#include "normcheck_simt.h"',
             f'#line 1 "{origin}"',
             rewrite_source(src, origin),
             '#line 1 "<normcheck launch wrappers>"',
             '#include "normcheck_runtime.h"']
    for i, e in enumerate(entries):
        lines.append(f"NORMCHECK_ENTRY({i}, {e})")
    return "\n".join(lines) + "\n"


_UNDECLARED = re.compile(r"'([A-Za-z_]\w*)' was not declared in this scope|"
                         r"'([A-Za-z_]\w*)' is not a member of")


def _explain(diag: str, tu_path: str) -> str:
    diag = diag.replace(tu_path, "<normcheck wrapper>")
    hints = []
    for m in _UNDECLARED.finditer(diag):
        name = m.group(1) or m.group(2)
        if name.startswith("__") or name.startswith("atomic") or name.startswith("tex") or \
                name in ("cub", "nvcuda", "wmma"):
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
    signatures: dict = field(default_factory=dict)


def build(source, entries: list[str], defines=None, extra_flags=()) -> Module:
    """Compile ``source`` (a path or CUDA C text) exporting ``entries``; cached."""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                    and source.endswith((".cu", ".cuh", ".cpp", ".cc"))):
        path = Path(source)
        if not path.is_file():
            raise invalid("source", str(source), "a readable .cu file or a string of CUDA C",
                          "check the path")
        src, origin = path.read_text(), str(path.resolve())
        extra_flags = [f"-I{path.resolve().parent}", *extra_flags]
    elif isinstance(source, str):
        src, origin = source, "<source>"
    else:
        raise invalid("source", source, "a path or a string of CUDA C")
    for e in entries:
        if not isinstance(e, str) or not base.ENTRY_RE.match(e):
            raise invalid("entry", e, "a kernel name or a template instantiation such as "
                          "rms_norm<__half>", "give the name of a __global__ function")
    defines = dict(defines or {})
    cxx, version = _compiler()
    inc = cuda_include_dir()
    flags = list(_FLAGS) + [f"-D{k}" if v is None else f"-D{k}={v}"
                            for k, v in sorted(defines.items())] + list(extra_flags)
    tu = _translation_unit(src, origin, entries)
    key = hashlib.sha256("\0".join([tu, " ".join(flags), version, _shim_digest(),
                                    str(inc)]).encode()).hexdigest()[:24]
    out_dir = _cache_dir() / key
    so = out_dir / "kernel.so"
    if not so.is_file():
        out_dir.mkdir(parents=True, exist_ok=True)
        tu_path = out_dir / "kernel.cpp"
        tu_path.write_text(tu)
        tmp = out_dir / f"kernel.{os.getpid()}.{threading.get_ident()}.so"
        cmd = [cxx, *flags, f"-I{SHIM_DIR}", f"-I{inc}", str(tu_path), "-o", str(tmp)]
        r = subprocess.run(cmd, capture_output=True, text=True,
                           env={**os.environ, "LC_ALL": "C", "LANG": "C"})
        if r.returncode != 0:
            missing = [e for e in entries if re.search(
                rf"<normcheck launch wrappers>:\d+:\d+: error: '{re.escape(e.split('<')[0])}' "
                r"(was not declared|is not a member)", r.stderr)]
            head = (f"entry {missing[0]!r} is not a kernel of {origin}: check --entry (for a "
                    "template, the instantiation, e.g. rms_norm<__half>)" if missing else
                    f"g++ could not compile {origin} for the cpu backend "
                    f"(entries: {', '.join(entries)})")
            raise CompileError(head, _explain(r.stderr, str(tu_path)))
        os.replace(tmp, so)
    mod = Module(str(so), list(entries))
    # the signatures are read in the worker: the caller's process never loads user code
    rep = _worker.request({"op": "signatures", "so": str(so), "n": len(entries)}, 60.0)
    if isinstance(rep, tuple) or not rep.get("ok"):
        raise CompileError(f"{origin}: the compiled module could not be loaded",
                           rep.get("message", "") if isinstance(rep, dict) else
                           _worker.stderr_tail())
    for e, raw in zip(entries, rep["signatures"]):
        mod.signatures[e] = base.parse_signature(raw)
    return mod


# ------------------------------------------------------------------------------------------------
# Worker process
# ------------------------------------------------------------------------------------------------
class _Worker:
    """One worker process; restarted after a crash or a timeout."""

    def __init__(self):
        self.proc = None
        self.stderr = None
        self.lock = threading.RLock()
        self.shm_path = None
        self.shm_fd = None
        self.shm_map = None
        self.shm_size = 0

    def arena(self, size: int):
        """The file shared with the worker that carries the arrays, grown to ``size`` bytes and
        kept: its pages are zeroed by the OS once, not at every launch."""
        if self.shm_map is None or size > self.shm_size:
            if self.shm_map is not None:
                self.shm_map.close()
            if self.shm_fd is None:
                d = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
                self.shm_fd, self.shm_path = tempfile.mkstemp(prefix="normcheck-args-", dir=d)
            self.shm_size = max(size, 2 * self.shm_size)
            os.ftruncate(self.shm_fd, self.shm_size)
            self.shm_map = mmap.mmap(self.shm_fd, self.shm_size)
        return self.shm_map, self.shm_path

    def _start(self):
        if self.stderr is not None:
            self.stderr.close()
        self.stderr = tempfile.TemporaryFile()
        env = dict(os.environ)
        # static TLS for the shim's initial-exec variables, 64 bytes a loaded module
        env["GLIBC_TUNABLES"] = ":".join(
            t for t in (env.get("GLIBC_TUNABLES"), "glibc.rtld.optional_static_tls=262144") if t)
        self.proc = subprocess.Popen([sys.executable, "-m", "normcheck.backends._worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=env, bufsize=0)

    def _kill(self):
        if self.proc is not None:
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
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-n:]

    def request(self, req: dict, timeout: float):
        """Send a request; returns the reply, or ("died", returncode) / ("timeout", None)."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._kill()
                self._start()
            data = pickle.dumps(req, protocol=pickle.HIGHEST_PROTOCOL)
            try:
                self.proc.stdin.write(struct.pack("<Q", len(data)) + data)
            except BrokenPipeError:
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
                chunk = os.read(fd, max(need - len(buf), 1 << 16) if not header else need - len(buf))
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


    def close(self):
        with self.lock:
            self._kill()
            if self.stderr is not None:
                self.stderr.close()
                self.stderr = None
            if self.shm_map is not None:
                self.shm_map.close()
                os.close(self.shm_fd)
                os.unlink(self.shm_path)
                self.shm_map = self.shm_fd = self.shm_path = None


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
class CpuKernel:
    """A compiled entry; call it as ``kernel(grid, block, args, shared_mem=0)``."""

    def __init__(self, module: Module, entry: str, options: dict):
        self.module = module
        self.entry = entry
        self.index = module.entries.index(entry)
        self.params = module.signatures[entry]
        self.options = options

    def __repr__(self):
        return f"<CpuKernel {self.entry}({', '.join(p.ctype for p in self.params)})>"

    def __call__(self, grid, block, args, shared_mem=0, *, names=None, timeout=None,
                 schedule=None, workers=None, seed=0):
        g = base.dim3(grid, "grid")
        b = base.dim3(block, "block")
        if b[0] * b[1] * b[2] > 1024:
            raise invalid("block", block, "at most 1024 threads per block (the CUDA limit)",
                          "use a smaller block")
        if int(shared_mem) < 0:
            raise invalid("shared_mem", shared_mem, "a byte count >= 0")
        args = base.check_args(self.entry, self.params, args, names)
        timeout = float(timeout or self.options.get("timeout") or DEFAULT_TIMEOUT)
        schedule = schedule or self.options.get("schedule", "forward")
        if schedule not in _SCHEDULES:
            raise invalid("schedule", schedule, f"one of {sorted(_SCHEDULES)}")
        workers = int(workers or self.options.get("workers") or os.cpu_count() or 1)
        page = mmap.PAGESIZE
        wire, layout, size = [], [], 0
        for a in args:
            if isinstance(a, np.ndarray):
                region = max(page, -(-a.nbytes // page) * page)
                wire.append(("array", size, region, a.nbytes, a.dtype.itemsize))
                layout.append((a, size + region - a.nbytes, region - a.nbytes))
                size += region
            else:
                wire.append(("scalar", a.dtype.str, a.tobytes()))
        rfd, report = tempfile.mkstemp(prefix="normcheck-report-")
        os.close(rfd)
        try:
            with _worker.lock:
                mm, shm = _worker.arena(max(size, page))
                view = np.frombuffer(mm, np.uint8, count=max(size, page))
                try:
                    for a, off, slack in layout:
                        view[off - slack:off] = 0xA5
                        view[off:off + a.nbytes] = a.reshape(-1).view(np.uint8)
                    req = {"so": self.module.path, "index": self.index, "grid": g, "block": b,
                           "shared_mem": int(shared_mem), "shm": shm, "args": wire,
                           "workers": workers, "schedule": _SCHEDULES[schedule],
                           "seed": int(seed), "report": report}
                    rep = _worker.request(req, timeout)
                    if isinstance(rep, tuple):
                        self._raise_dead(rep, report, args, names, timeout)
                    if not rep["ok"]:
                        self._raise_failed(rep, args, names)
                    for a, off, slack in layout:
                        a.reshape(-1).view(np.uint8)[:] = view[off:off + a.nbytes]
                finally:
                    del view
        finally:
            try:
                os.unlink(report)
            except OSError:
                pass
        self.last_seconds = rep["seconds"]

    # -- failures ---------------------------------------------------------------------------------
    def _name(self, i, names):
        p = self.params[i]
        n = f" `{names[i]}`" if names and i < len(names) else ""
        return f"argument {i}{n} ({p.ctype})"

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
        return OutOfBounds(f"{self.entry}: out-of-bounds {detail}{where}", arg=i,
                           name=names[i] if names and i < len(names) else None, access=access)

    def _raise_dead(self, rep, report, args, names, timeout):
        if rep[0] == "timeout":
            raise KernelTimeout(f"{self.entry}: the launch ran past its {timeout:g} s limit (an "
                                "endless loop, or a wait for something that never happens); "
                                "raise it with timeout=... / --timeout if the kernel is just slow",
                                seconds=timeout)
        text = Path(report).read_text() if os.path.exists(report) else ""
        info = _parse_report(text)
        where = ""
        if "block" in info:
            where = f" in block ({info['block']}), thread ({info.get('thread', '?')})"
        kind = info.get("kind")
        tail = _worker.stderr_tail()
        if kind == "out_of_bounds":
            raise self._oob(info, args, names, where)
        if kind == "stack_overflow":
            raise KernelCrash(f"{self.entry}: stack overflow{where} (each thread has "
                              f"{os.environ.get('NORMCHECK_STACK_KB', '256')} KiB; set "
                              "NORMCHECK_STACK_KB for more)", signal=int(info.get("signal", 11)))
        if kind == "null_pointer":
            raise KernelCrash(f"{self.entry}: null pointer {info.get('access', 'access')} at "
                              f"{info.get('addr')}{where}", signal=11)
        if kind in ("abort", "trap", "arithmetic", "crash"):
            what = {"abort": "aborted (a failed assert?)", "trap": "trapped (__trap or an illegal "
                    "instruction)", "arithmetic": "arithmetic exception (integer division by "
                    "zero?)", "crash": f"crashed (signal {info.get('signal')}, address "
                    f"{info.get('addr')}, {info.get('access', '')})"}[kind]
            raise KernelCrash(f"{self.entry}: {what}{where}" + (f"\n{tail}" if tail else ""),
                              signal=int(info.get("signal", 0)))
        raise KernelCrash(f"{self.entry}: the worker process died (exit code {rep[1]})"
                          + (f"\n{tail}" if tail else ""), signal=-int(rep[1] or 0))

    def _raise_failed(self, rep, args, names):
        if rep["kind"] == "deadlock":
            raise KernelDeadlock(f"{self.entry}: {rep['message']}")
        if rep["kind"] == "out_of_bounds":
            raise self._oob(_parse_report(rep["message"]), args, names)
        raise KernelError(f"{self.entry}: {rep['message']}")


class CpuBackend:
    """Compile CUDA C with g++ against the SIMT shim and run it on the CPU."""

    name = "cpu"

    def __init__(self):
        if platform.machine().lower() not in ("x86_64", "amd64"):
            raise BackendUnavailable(
                f"the cpu backend's fiber switch is written for x86-64; this machine is "
                f"{platform.machine()}")

    def compile(self, source, entry, *, defines=None, options=None) -> CpuKernel:
        """Build ``entry`` of ``source`` (a path or CUDA C text).  ``options``: timeout (s),
        workers (OS threads), schedule ("forward", "reverse", "random"), flags (extra g++
        flags)."""
        return self.compile_many(source, [entry], defines=defines, options=options)[entry]

    def compile_many(self, source, entries, *, defines=None, options=None) -> dict:
        """Build several entries of one source into one module (one g++ run)."""
        options = dict(options or {})
        mod = build(source, list(entries), defines, options.get("flags", ()))
        return {e: CpuKernel(mod, e, options) for e in entries}

    def provenance(self) -> dict:
        cxx, version = _compiler()
        return {"backend": "cpu", "compiler": version, "flags": " ".join(_FLAGS),
                "fmad": False, "device": platform.processor() or platform.machine(),
                "cpu_vs_gpu": CPU_VS_GPU}
