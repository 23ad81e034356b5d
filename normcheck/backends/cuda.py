"""The cuda backend: the same CUDA C source on an NVIDIA GPU, through PyCUDA.

Build: nvcc turns the source into PTX (``--fmad`` as chosen, recorded with every result; default
false so results can be compared bit for bit with the cpu backend), with the same include paths
as the cpu backend (the source's folder, the CUDA headers).  Template entries are instantiated by
taking their address in host code and found in the PTX by their mangled names (demangled with
c++filt).  The PTX is loaded with ``pycuda.driver.module_from_buffer``.

Run: arrays are copied to the device, the kernel launched (timed with CUDA events), every array
copied back (in/out, as on the cpu backend).  A GPU launch cannot be interrupted, so there is no
timeout here; a crash (an illegal address, a trap) is reported as KernelCrash and the context is
rebuilt for the next launch.

Requires ``pip install 'normcheck[cuda]'`` (PyCUDA >= 2026.1 for CUDA 13) on a machine with an
NVIDIA driver; elsewhere :func:`unavailable_reason` says why and ``get_backend("auto")`` falls
back to cpu.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from normcheck.backends import base, cache, confine
from normcheck.errors import CompileError, KernelCrash, invalid

__all__ = ["CudaBackend", "CudaKernel", "unavailable_reason", "ptx_entries", "find_entry",
           "INSTALL_HINT"]

INSTALL_HINT = "install normcheck[cuda] (pip install 'normcheck[cuda]') on a machine with an " \
    "NVIDIA driver"


def unavailable_reason() -> str | None:
    """Why the cuda backend cannot run here, or None when it can."""
    return CudaBackend.unavailable_reason()


# ------------------------------------------------------------------------------------------------
# PTX: entries, parameters, mangled names (pure text: testable without a GPU)
# ------------------------------------------------------------------------------------------------
_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\((.*?)\)", re.S)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+[\w$]+(?:\[(\d+)\])?")


def ptx_entries(ptx: str) -> dict:
    """{mangled name: [(ptx type, bytes) per parameter]} of every kernel in the PTX."""
    out = {}
    for m in _ENTRY.finditer(ptx):
        params = []
        for p in _PARAM.finditer(m.group(2)):
            t, n = p.group(1), p.group(2)
            size = int(n) if n else int(re.sub(r"\D", "", t) or 8) // 8
            params.append((t, size))
        out[m.group(1)] = params
    return out


def _demangle(names: list[str]) -> list[str]:
    filt = shutil.which("cu++filt") or shutil.which("c++filt")
    if not filt or not names:
        return list(names)
    r = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True)
    out = r.stdout.splitlines()
    return out if len(out) == len(names) else list(names)


def _norm(s: str) -> str:
    return re.sub(r"\s+", "", s)


def _param_types(params: str) -> list[str]:
    """Parameter types compared as spellings: ``const float*`` and c++filt's ``float const*``
    alike, spaces dropped."""
    out = []
    for p in (x.strip() for x in params.split(",") if x.strip()):
        words = p.replace("*", " * ").replace("&", " & ").split()
        cv = sorted(w for w in words if w in ("const", "volatile"))
        out.append("".join(cv) + "".join(w for w in words if w not in ("const", "volatile")))
    return out


def find_entry(entry: str, mangled: list[str]) -> str:
    """The PTX name of ``entry`` (a C name, or a template instantiation such as
    ``rms_norm<__half, 8>``) among the mangled kernel names of a module."""
    if entry in mangled:
        return entry
    from normcheck.backends.base import split_entry

    entry, params = split_entry(entry)  # an overload by its parameter types
    want = _norm(entry).lstrip(":")
    demangled = _demangle(mangled)
    if params is not None:
        keep = [(m, d) for m, d in zip(mangled, demangled)
                if _param_types(d.split("(", 1)[1].rsplit(")", 1)[0] if "(" in d else "") ==
                _param_types(params)]
        mangled, demangled = [m for m, _ in keep], [d for _, d in keep]
    for m, d in zip(mangled, demangled):
        head = d.split("(")[0]
        head = head[5:] if head.startswith("void ") else head
        if _norm(head) == want:
            return m
    base_name = want.split("<")[0]
    cands = [m for m, d in zip(mangled, demangled)
             if _norm(d.split("(")[0]).endswith(base_name + "<") or
             _norm(d.split("(")[0]).split("<")[0].endswith(base_name)]
    if len(cands) == 1:
        return cands[0]
    raise CompileError(f"entry {entry!r} is not a kernel of the module",
                       "kernels found: " + ", ".join(demangled))


_SCALAR_PTX = {"f32": (np.float32,), "f64": (np.float64,), "s32": (np.int32,),
               "u32": (np.uint32, np.int32), "b32": (np.int32, np.uint32, np.float32),
               "s64": (np.int64,), "u64": (np.uint64, np.int64), "b64": (np.int64, np.uint64),
               "s16": (np.int16,), "u16": (np.uint16,), "b16": (np.uint16, np.float16),
               "b8": (np.uint8, np.int8)}


# ------------------------------------------------------------------------------------------------
# Backend
# ------------------------------------------------------------------------------------------------
class CudaKernel(base.Kernel):
    """A compiled entry on the GPU (the call of :class:`normcheck.backends.base.Kernel`)."""

    @property
    def capabilities(self):
        return self.backend.capabilities

    def __init__(self, backend, module, mangled, entry, params, options):
        self.backend = backend
        self.module = module
        self.entry = entry
        self.mangled = mangled
        self.params = params  # [(ptx type, bytes)]
        self.function = module.get_function(mangled)
        self.options = options
        self.last_seconds = None

    def __repr__(self):
        return f"<CudaKernel {self.entry}>"

    def _check(self, args, names):
        if len(args) != len(self.params):
            raise invalid("args", f"<{len(args)} arguments>",
                          f"{len(self.params)} arguments for {self.entry}",
                          "pass one value per kernel parameter, in order")
        out = []
        for i, (a, (t, size)) in enumerate(zip(args, self.params)):
            label = f"args[{i}]" + (f" ({names[i]})" if names and i < len(names) else "")
            if a is None:  # a null pointer
                if t not in ("u64", "b64") or size != 8:
                    raise invalid(label, a, f"a scalar for the .{t} parameter")
                out.append(np.uint64(0))
                continue
            if isinstance(a, np.ndarray):
                if t not in ("u64", "b64") or size != 8:
                    raise invalid(label, a, f"a scalar for the .{t} parameter (structs passed by "
                                  "value are not supported on the cuda backend)")
                if not a.flags.c_contiguous:
                    raise invalid(label, a, "a C-contiguous array", "np.ascontiguousarray(...)")
                out.append(a)
            else:
                allowed = _SCALAR_PTX.get(t, ())
                if isinstance(a, (bool, int, float)) and allowed:
                    a = allowed[0](a)
                if not isinstance(a, np.generic) or (allowed and type(a) not in allowed):
                    raise invalid(label, a, f"a scalar of PTX type .{t} ({size} bytes)",
                                  "pass np.int32(...)/np.float32(...) as the kernel expects")
                out.append(a)
        return out

    def __call__(self, grid, block, args, shared_mem=0, *, names=None, timeout=None,
                 guard=None, schedule=None, workers=None, seed=0, fill=0xFF, blocks=None,
                 hazards=False, max_dyn_smem=0):
        self.refuse(schedule, workers, seed, fill, blocks, hazards)
        drv = self.backend.drv
        g, b, shared_mem = base.check_launch(grid, block, shared_mem)
        args = self._check(list(args), names)
        self.backend.activate()
        dev = []
        call = []
        try:
            for a in args:
                if isinstance(a, np.ndarray):
                    buf = drv.mem_alloc(max(a.nbytes, 1))
                    drv.memcpy_htod(buf, a)
                    dev.append((buf, a))
                    call.append(buf)
                else:
                    call.append(a)
            if max_dyn_smem:  # the launcher's opt-in (a spec's shared_mem_opt_in), as it is
                self.function.set_attribute(
                    drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, int(max_dyn_smem))
            start, end = drv.Event(), drv.Event()
            start.record()
            self.function(*call, block=b, grid=g, shared=int(shared_mem))
            end.record()
            end.synchronize()
            self.last_seconds = start.time_till(end) / 1e3
            for buf, a in dev:
                drv.memcpy_dtoh(a, buf)
        except drv.Error as e:
            self.backend.reset()
            raise KernelCrash(f"{self.entry}: the GPU launch failed: {e}", signal=0) from None
        finally:
            for buf, _ in dev:
                try:
                    buf.free()
                except Exception:
                    pass

    def time(self, grid, block, args, shared_mem=0, repeats=20):
        """Mean seconds of a launch on arrays already on the device (DeviceAllocations)."""
        drv = self.backend.drv
        self.backend.activate()
        g, b = base.dim3(grid, "grid"), base.dim3(block, "block")
        self.function(*args, block=b, grid=g, shared=int(shared_mem))
        start, end = drv.Event(), drv.Event()
        start.record()
        for _ in range(repeats):
            self.function(*args, block=b, grid=g, shared=int(shared_mem))
        end.record()
        end.synchronize()
        return start.time_till(end) / 1e3 / repeats


class CudaBackend(base.Backend):
    """Compile with nvcc and run with PyCUDA on GPU 0."""

    name = "cuda"
    capabilities = base.Capabilities(device_timings=True, hardware_rsqrt=True,
                                     unsigned_indices=True)

    def __init__(self, device: int = 0):
        super().__init__()
        import pycuda.driver as drv

        self.drv = drv
        self.device = drv.Device(device)
        self.context = self.device.make_context()  # current on this thread from now on
        atexit.register(self._close)
        self.arch = "sm_%d%d" % self.device.compute_capability()
        self.fmad = False  # of the last build, for provenance()

    @classmethod
    def unavailable_reason(cls) -> str | None:
        try:
            import pycuda.driver as drv
        except ImportError:
            return f"PyCUDA is not installed: {INSTALL_HINT}"
        except Exception as e:  # a broken PyCUDA build, a missing libcuda ...
            return f"PyCUDA does not load ({e}): {INSTALL_HINT}"
        try:
            drv.init()
            if drv.Device.count() < 1:
                return "no CUDA device is visible"
        except Exception as e:  # pycuda.driver.Error and friends
            return f"no usable CUDA driver or device ({e})"
        if shutil.which(os.environ.get("NVCC", "nvcc")) is None:
            return "nvcc is not on the PATH (the cuda backend compiles with it)"
        return None

    def _close(self):
        try:
            self.drv.Context.pop()
            self.context.detach()
        except Exception:
            pass

    def activate(self):
        """Make this backend's context current (another library may have pushed its own)."""
        if self.drv.Context.get_current() is None:
            self.context.push()

    def reset(self):
        """A failed launch leaves the context unusable: make a new one."""
        self._close()
        self.context = self.device.make_context()

    def compile_many(self, source, entries, *, defines=None, options=None,
                     include_dirs=()) -> dict:
        """Build entries of ``source`` into one module.  ``options``: fmad (bool, default
        False), flags (extra nvcc flags); timeout, workers, schedule and guard are accepted and
        mean nothing on a GPU."""
        options = dict(options or {})
        fmad = bool(options.get("fmad", False))
        src = base.load_source(source, include_dirs)
        canon = [base.parse_entry(e) for e in entries]
        tail = "\n".join(f"void* __normcheck_entry_{i} = (void*)&{e};"
                         for i, e in enumerate(canon))
        text = src.text + "\n" + tail + "\n"
        flags = [f"-arch={self.arch}", f"--fmad={'true' if fmad else 'false'}",
                 *base.define_flags(defines), *[f"-I{i}" for i in src.include_dirs],
                 *options.get("flags", ())]
        ptx = _nvcc_ptx(text, flags, src.origin)
        ents = ptx_entries(ptx)
        self.activate()
        module = self.drv.module_from_buffer(ptx.encode())
        self.fmad = fmad
        out = {}
        for e, c in zip(entries, canon):
            m = find_entry(c, list(ents))
            out[e] = CudaKernel(self, module, m, c, ents[m], {**options, "fmad": fmad})
        return out

    def provenance(self, options=None) -> dict:
        fmad = bool((options or {}).get("fmad", self.fmad))
        nvcc = cache.compiler_version(os.environ.get("NVCC", "nvcc")) or "nvcc"
        return {"backend": "cuda", "compiler": nvcc,
                "flags": f"-arch={self.arch} --ptx --fmad={'true' if fmad else 'false'}",
                "fmad": fmad, "device": self.device.name(),
                "driver": self.drv.get_driver_version()}


def _nvcc_ptx(text: str, flags: list[str], origin: str) -> str:
    """PTX of ``text``, cached by its preprocessed form (every included file), nvcc's version
    and the flags; entries are written atomically."""
    nvcc = os.environ.get("NVCC", "nvcc")
    version = cache.compiler_version(nvcc) or "nvcc"
    # nvcc runs with normcheck-launch's lifetime, limits and environment (no landlock: where
    # a CUDA toolkit keeps its files varies too much to list)
    with confine.temporary_folder("build") as d:
        src = Path(d) / "kernel.cu"
        src.write_text(text)
        pre = confine.run_compiler([nvcc, *flags, "-E", str(src), "-o", "-"],
                                   f"preprocessing {origin}", cleanup=d)
        if pre.returncode != 0:
            raise CompileError(f"nvcc could not preprocess {origin}", pre.stderr)
        key = cache.key_of(pre.stdout.replace(str(src), "<kernel>"), " ".join(flags), version)
        ptx = cache.cache_dir("cuda") / key / "kernel.ptx"
        if cache.verified(ptx):
            return ptx.read_text()
        r = confine.run_compiler([nvcc, *flags, "--ptx", str(src), "-o",
                                  str(Path(d) / "kernel.ptx")], f"compiling {origin}",
                                 cleanup=d)
        if r.returncode != 0:
            raise CompileError(f"nvcc could not compile {origin}",
                               r.stderr.replace(str(src), origin))
        text_ptx = (Path(d) / "kernel.ptx").read_text()
    cache.install_file(text_ptx, ptx)
    return text_ptx
