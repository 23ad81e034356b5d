"""The cpu backend: the same CUDA C source compiled by g++ against a SIMT shim, run in a sandboxed
worker process.

Build (:func:`build`): the source is wrapped into one C++ translation unit -- the shim header
(``normcheck/backends/cpu/shim/normcheck_simt.h``), the user's file under a ``#line`` directive (so g++
reports errors against the user's own file and line), then the runtime and one exported launcher
per entry -- and

1. preprocessed (``g++ -E``) with the shim first on the include path (its ``cuda_runtime.h``,
   ``cooperative_groups.h`` and ``cub/`` stand in for NVIDIA's), then the user's folders, then
   the CUDA headers of the nvidia-cuda-* wheels (``cuda_fp16.h``, ``cuda_bf16.h``, and libcu++'s
   ``<cuda/std/...>`` from the cccl wheel);
2. rewritten (:mod:`normcheck.backends.cpu.translate`): ``__shared__`` in every file, host-side
   launches, inline PTX (:mod:`normcheck.backends.cpu.ptx`);
3. looked up in the build cache by the hash of the rewritten text (which holds every included
   file), the compiler's version and the flags; compiled into a temporary file and renamed
   into place when missing.

Steps 1-2 of a file already built are skipped (a framework's headers make them seconds: torch's
are 17 MB preprocessed): a manifest keyed by the source's text and every option of the build
names the files the preprocessor read, each with its size and modification time, and the
build's key; when none of them changed and the build is still in the cache, it is used as it is
(ccache's "direct mode"; a header newly created earlier on the include path than one the file
used is the case it cannot see -- ``normcheck cache clear`` then).

Run: launches go to a worker process (:mod:`normcheck.backends.cpu.worker`) that enters a sandbox
(:mod:`normcheck.backends.cpu.sandbox`) before loading user code, so that a segfault, an abort, a
deadlock, an endless loop or a forbidden system call becomes a typed error
(:mod:`normcheck.errors`) and the caller carries on.  Every array is mapped between inaccessible
pages: by default its end is against the upper one (an element read or written past the end is
caught at once); ``guard="start"`` puts its start against the lower one (an element before the
start), ``"both"`` launches twice to catch either.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import mmap
import os
import platform
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from normcheck.backends import base, cache, confine, headers, isolation
from normcheck.backends.cpu import sandbox, translate, wire
from normcheck.escape import one_line
from normcheck.errors import (
    BackendUnavailable,
    BarrierDivergence,
    CompileError,
    InvalidArgument,
    KernelCrash,
    KernelDeadlock,
    KernelRace,
    LaunchRefused,
    KernelError,
    KernelTimeout,
    MisalignedAccess,
    OutOfBounds,
    SandboxViolation,
    StackOverflow,
    Unsupported,
    invalid,
)

__all__ = ["CpuBackend", "CpuKernel", "CPU_VS_GPU", "SHIM_DIR", "cuda_include_dirs", "GUARDS"]

SHIM_DIR = Path(__file__).resolve().parent / "shim"

#: Where a CPU run differs from a GPU run; recorded with every result.
CPU_VS_GPU = {
    "fma": "no contraction (-ffp-contract=off): bit-identical to nvcc --fmad=false; nvcc's default "
           "--fmad=true fuses a*b+c and changes results",
    "rsqrtf": "1.0f/sqrtf(x) (two correctly rounded operations); the GPU's rsqrtf is approximate "
              "(<= 2 ulp)",
    "__frsqrt_rn": "correctly rounded, as on the GPU",
    "__expf/__logf/__sinf/__fdividef": "evaluated with the accurate libm/IEEE operation; the GPU's "
                                       "intrinsics are approximate",
    "inline PTX": "translated instruction by instruction (normcheck.backends.cpu.ptx); the approximate "
                  "ones (rsqrt.approx, rcp.approx, ex2.approx, lg2.approx, sqrt.approx, "
                  "tanh.approx) are evaluated accurately (rsqrt correctly rounded), .ftz flushes "
                  "subnormals as on the GPU",
    "CUB": "cub::BlockReduce and cub::WarpReduce reduce in CUB's own order (warp shuffles, then "
           "warp aggregates in order), so float sums are bit-identical; ThreadReduce over a "
           "thread's own array of __half/__nv_bfloat16 is sequential here (the GPU pairs them "
           "with SIMD instructions from sm_80)",
    "denormals": "kept, as on the GPU without -ftz; flushed to zero (DAZ and FTZ while the "
                 "blocks run) where the build defines __USE_FAST_MATH__ (a spec's fast_math = "
                 "true, check --fast-math: nvcc --use_fast_math) or NORMCHECK_FTZ (-ftz=true)",
    "scheduling": "threads of a block run in a fixed order (forward, reverse or seeded random "
                  "warps); races show up deterministically for that order only",
    "alignment": "a 16-byte vector access to an address that is not 16-byte aligned faults as on "
                 "the GPU; narrower misaligned accesses (8-byte float2 ...) do not fault on x86",
    "undefined values": "shared memory (static and dynamic) starts every block as 0xFF bytes "
                        "(not a number, as a float), and a warp shuffle from a lane not taking "
                        "part (never launched, exited, outside the mask) reads 0xFF bytes; the "
                        "GPU leaves whatever the SM or the register held",
}

DEFAULT_TIMEOUT = 60.0
GUARDS = ("end", "start", "both")
# -fstack-clash-protection: a frame larger than a page probes each page, so deep recursion or a
# large local array meets its fiber stack's guard page (a named stack overflow) instead of
# stepping over it into other memory; -g1: line tables only (no compile time measured on a
# kernel module, ~120 KiB), so a fault names the line of the user's file (source_line)
_CXX_FLAGS = ["-O2", "-g1", "-fPIC", "-shared", "-pthread", "-ffp-contract=off",
              "-fstack-clash-protection",
              # every typed access checked against its type's alignment, as a GPU requires
              # (normcheck_runtime.h: __ubsan_handle_type_mismatch_v1_abort)
              "-fsanitize=alignment", "-fno-sanitize-recover=alignment",
              "-fno-fast-math", "-fno-strict-aliasing", "-fvisibility=hidden", "-fno-gnu-unique",
              "-mtls-dialect=gnu2"]
_PP_FLAGS = ["-pthread", "-E"]
#: nvcc's default dialect (CUDA 12 and 13); a file that includes PyTorch's headers is built in
#: the standard the installed torch demands (torch 2.14: C++20), as torch's own extension builds
DEFAULT_STD = "c++17"
_SCHEDULES = {"forward": 0, "reverse": 1, "random": 2, "warps": 3}
_PAGE = mmap.PAGESIZE
_REPORT_PAGE = _PAGE  # page 0 of the arena
OPTIONS = ("timeout", "workers", "schedule", "flags", "guard", "arch", "hosts", "hazards")


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
    return cache.cxx()


_UNDECLARED = re.compile(r"'([A-Za-z_]\w*)' was not declared in this scope|"
                         r"'([A-Za-z_]\w*)' is not a member of")


_REMOVED_FIELD = re.compile(r"'struct cudaDeviceProp' has no member named '(\w+)'")


#: a fetched library header (headers/<package>@<version>/) using a name the runtime's lacks
_NEWER_LIBRARY = re.compile(r"headers/(nvidia-[\w-]+)@([\w.]+)/include/[^:\s]+:\d+:\d+: error: "
                            r"'(cuda\w+)' has not been declared")


def _explain(diag: str, tu_path: str) -> str:
    diag = diag.replace(tu_path, "<normcheck wrapper>")
    hints = []
    for m in _UNDECLARED.finditer(diag):
        name = m.group(1) or m.group(2)
        if name.startswith("__") or name.startswith("atomic") or name.startswith("tex") or \
                name in ("nvcuda", "wmma"):
            hints.append(f"normcheck: `{name}` is a CUDA feature the cpu backend's SIMT shim does "
                         "not support (see normcheck/backends/cpu/shim/normcheck_simt.h for what it does)")
    for m in _REMOVED_FIELD.finditer(diag):
        hints.append(f"normcheck: cudaDeviceProp::{m.group(1)} was removed in CUDA 13, whose "
                     "headers the cpu backend compiles against: read it with "
                     "cudaDeviceGetAttribute, or guard the line with #if CUDART_VERSION < 13000")
    m = _NEWER_LIBRARY.search(diag)
    if m:
        hints.append(f"normcheck: {m.group(1)}'s headers (fetched, {m.group(2)}) use `{m.group(3)}`, "
                     "which the CUDA runtime headers in use do not declare: they are older than "
                     "the library's; pip install -U nvidia-cuda-runtime (>= 13.0.96), or point "
                     "NORMCHECK_CUDA_INCLUDE at a newer toolkit's include folder")
    if "<normcheck launch wrappers>" in diag and "cannot resolve address of overloaded" in diag:
        hints.append("normcheck: the entry names an overloaded kernel: pick one by its "
                     "parameter types, e.g. --entry 'ln(float*, const float*, int)' (in a spec: "
                     "entry = \"ln(float*, const float*, int)\")")
    elif "<normcheck launch wrappers>" in diag and "NORMCHECK_ENTRY" in diag:
        hints.append("normcheck: the entry could not be instantiated: check the --entry name (for "
                     "a template give the instantiation, e.g. rms_norm<__half>; for an "
                     "overloaded kernel its parameter types, e.g. ln(float*, int))")
    return diag + ("\n" + "\n".join(dict.fromkeys(hints)) if hints else "")


@dataclass
class Module:
    path: str
    entries: list
    origin: str
    signatures: dict = field(default_factory=dict)
    unsupported_ptx: list = field(default_factory=list)  # inline PTX that fails when it runs
    frameworks: dict = field(default_factory=dict)  # headers.frameworks of the files it read
    own: bool = False  # normcheck's own code (cuda_src/): run where no user code has run

    def worker(self) -> "Worker":
        """The worker process this module runs in (:data:`WORKERS`): a user build's own,
        reading its folder; the built-ins', reading the folder of every built-in build."""
        folder = Path(self.path).parent
        return WORKERS.get(str(folder.parent if self.own else folder), self.own)


def _line_literal(origin: str) -> str:
    return '"' + origin.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _translation_unit(src: base.Source, entries: list[str], hosts=()) -> str:
    lines = ['#include "normcheck_simt.h"',
             f"#line 1 {_line_literal(src.origin)}",
             src.text,
             '#line 1 "<normcheck launch wrappers>"',
             '#include "normcheck_runtime.h"']
    for i, e in enumerate(entries):
        macro = "NORMCHECK_HOST_ENTRY" if e in hosts else "NORMCHECK_ENTRY"
        name, params = base.split_entry(e)
        # one overload by its parameter types: the function of that type, as a function lvalue
        fn = name if params is None else f"*::ncsimt::Pick<{params}>::of(&{name})"
        lines.append(f"{macro}({i}, {fn})")
    return "\n".join(lines) + "\n"


def _roots(cxx: str, src: base.Source, incs) -> list:
    """What the compiler may read for ``src``: the toolchain, the shim, the CUDA headers, the
    source's folder and its include folders."""
    return [*confine.toolchain_roots(cxx), str(SHIM_DIR), *[str(d) for d in incs],
            *src.include_dirs]


def cuda_version(incs=None) -> tuple[int, int]:
    """(major, minor) of the CUDA headers in use (CUDART_VERSION of cuda_runtime_api.h)."""
    for d in incs or cuda_include_dirs():
        f = Path(d) / "cuda_runtime_api.h"
        if f.is_file():
            m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", f.read_text(errors="replace"))
            if m:
                v = int(m.group(1))
                return v // 1000, (v % 1000) // 10
    return 13, 0


def presentation(arch: int, incs) -> list:
    """The flags that make the shim present as nvcc's device pass for ``arch``."""
    major, minor = cuda_version(incs)
    return [f"-DNORMCHECK_CUDA_ARCH={arch}", f"-DNORMCHECK_CUDACC_VER_MAJOR={major}",
            f"-DNORMCHECK_CUDACC_VER_MINOR={minor}"]


_TORCH_INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"](?:torch|ATen|c10|caffe2)/", re.M)


def uses_torch(src: base.Source, torch: bool = False) -> bool:
    """Whether a build of ``src`` searches PyTorch's headers: the file includes them (or
    ``torch``: a project header it includes does) and torch is installed."""
    return bool((torch or _TORCH_INCLUDE.search(src.text)) and headers.torch_include_dirs())


def include_dirs_for(src: base.Source, torch: bool = False) -> list:
    """The system include folders of a build of ``src``: the CUDA runtime's, CUDA's library
    headers (normcheck.backends.headers), and PyTorch's where the file includes them (or
    ``torch``)."""
    incs = list(cuda_include_dirs()) + headers.library_include_dirs()
    if uses_torch(src, torch):
        incs += headers.torch_include_dirs()
    return incs


def cxx_standard(src: base.Source, torch: bool = False) -> str:
    """The C++ standard a build of ``src`` is compiled in: :data:`DEFAULT_STD`, or the one the
    installed torch's headers demand where the build reads them."""
    return headers.torch_cxx_standard() if uses_torch(src, torch) else DEFAULT_STD


def preprocess(src: base.Source, entries: list[str], defines=None, extra_flags=(),
               arch: int = base.DEFAULT_ARCH, hosts=(), std=None) -> tuple[str, list, list, str]:
    """The rewritten, preprocessed translation unit of ``src`` with launchers for ``entries``,
    the messages of its inline PTX statements left to fail when they run, the files the
    preprocessor read (absolute paths) and the C++ standard it was read in (``-std=``).  A header of
    CUDA's libraries the file includes and the machine lacks is fetched (once) and the file
    preprocessed again; one of PyTorch's names the package to install.  A user's source is
    never compiled without landlock (the compiler would read any file: fail closed)."""
    if not is_own(src):
        confine.require_landlock(f"g++ on {Path(str(src.origin)).name}")
    torch = False
    for _attempt in range(12):
        try:
            return _preprocess(src, entries, defines, extra_flags, arch, hosts, torch, std)
        except CompileError as e:
            missing = headers.missing_header(e.diagnostics or "")
            if missing is None:
                raise
            if missing.startswith(headers.TORCH_HEADERS):
                if headers.torch_include_dirs() and not torch:
                    torch = True  # included through a project header: search torch's folders
                    continue
                if not headers.torch_include_dirs():
                    raise CompileError(
                        f"{src.origin} includes PyTorch's headers ({missing}) and torch is not "
                        "installed beside normcheck: pip install torch (a CPU build is enough: "
                        "its headers are what the file needs; nothing of torch runs)",
                        e.diagnostics) from None
                raise
            pkg = headers.library_for(missing)
            if pkg is None:
                raise CompileError(f"{src.origin} includes {headers.missing_hint(missing)}",
                                   e.diagnostics) from None
            if pkg in headers.fetched():
                raise
            if os.environ.get("NORMCHECK_FETCH_HEADERS", "1") == "0":
                raise CompileError(
                    f"{src.origin} includes {missing}, a header of "
                    f"{headers.LIBRARIES[pkg][1]}, which is not on this machine: "
                    f"normcheck headers fetch {pkg} keeps its headers in the build cache "
                    f"(or pip install {pkg}, or set CUDA_HOME to a CUDA toolkit)",
                    e.diagnostics) from None
            headers.fetch(pkg, echo=lambda m: print(m, file=sys.stderr, flush=True))
    raise CompileError(f"{src.origin}: the headers it includes could not all be found")


#: What a kernel's own folders may give the compiler: source and header files, by their names
#: (#55: ``#include ".env"`` inside a function body put a secret beside the kernel into g++'s
#: diagnostics, "'CANARY_...' was not declared in this scope")
SOURCE_SUFFIXES = frozenset({".h", ".hh", ".hpp", ".hxx", ".h++", ".cuh", ".cu", ".c", ".cc",
                             ".cpp", ".cxx", ".c++", ".inc", ".inl", ".ipp", ".tpp", ".tcc",
                             ".def", ".impl", ".cuinc", ".hip"})
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)


def _not_source(path: Path, root: Path, origin: str) -> CompileError:
    rel = path.relative_to(root) if path.is_relative_to(root) else path.name
    return CompileError(
        f"{origin}: #include of {str(rel)!r} refused: its name is not a source file's, and "
        "the compiler would show its text in its diagnostics -- a secret beside the kernel "
        "(an .env, a key) would end in the log",
        "include source files only (.h, .cuh, .hpp, .cu, .inc, .inl ...); rename the file if "
        "it is one")


def include_gate(src: base.Source, deps=()) -> None:
    """The kernel's own folders (its source's and its include folders) give the compiler
    source files only: before any compiler runs, the #include lines of the source, followed
    through those folders, and after preprocessing every file it read from them (``deps``: a
    computed ``#include MACRO``) -- a file whose name is not a source file's is refused with a
    CompileError naming it, never read into a diagnostic."""
    roots = [Path(d).resolve() for d in src.include_dirs]

    def own(path: Path):
        return next((r for r in roots if path.is_relative_to(r)), None)

    for dep in deps:
        d = Path(dep).resolve()
        r = own(d)
        if r is not None and d.suffix.lower() not in SOURCE_SUFFIXES and d.is_file():
            raise _not_source(d, r, src.origin)
    if deps:
        return
    seen = set()
    todo = [(src.text, src.path.resolve().parent if src.path else None)]
    while todo:
        text, here = todo.pop()
        for kind, name in _INCLUDE.findall(text):
            cands = ([here / name] if kind == '"' and here is not None else []) + \
                [r / name for r in roots]
            for c in cands:
                if not c.is_file():
                    continue
                c = c.resolve()
                r = own(c)
                if r is None:
                    break  # outside the kernel's folders: the compiler's roots decide
                if c.suffix.lower() not in SOURCE_SUFFIXES:
                    raise _not_source(c, r, src.origin)
                if c not in seen and len(seen) < 4096:
                    seen.add(c)
                    try:
                        todo.append((c.read_text(errors="replace")[:1 << 22], c.parent))
                    except OSError:
                        pass
                break


def _preprocess(src, entries, defines, extra_flags, arch, hosts, torch, std=None):
    cxx, _ = _compiler()
    include_gate(src)
    incs = include_dirs_for(src, torch)
    std = newer_std(cxx_standard(src, torch), std)
    tu = _translation_unit(src, entries, hosts)
    flags = [f"-std={std}", *_PP_FLAGS, *presentation(arch, incs), *base.define_flags(defines),
             f"-I{SHIM_DIR}",
             *[f"-I{d}" for d in src.include_dirs], *[f"-isystem{d}" for d in incs],
             *extra_flags]
    with confine.temporary_folder("pp") as d:
        tu_path = Path(d) / "normcheck_tu.cpp"
        tu_path.write_text(tu)
        r = confine.run_compiler([cxx, *flags, "-x", "c++", str(tu_path), "-o", "-"],
                                 f"preprocessing {src.origin}", read=_roots(cxx, src, incs),
                                 write=[d, os.devnull], cleanup=d)
        if r.returncode != 0:
            raise CompileError(f"g++ could not preprocess {src.origin} for the cpu backend",
                               _explain(r.stderr, str(tu_path)))
        text = r.stdout.replace(str(tu_path), "<normcheck wrapper>")
    deps = sorted({m for m in _LINE_MARKER.findall(text) if m.startswith("/")})
    # a computed #include the text did not show (the markers' names unescaped: a file named
    # we"ird.cu is marked "we\"ird.cu")
    include_gate(src, sorted({f for f in translate.LineMap.of(text).files
                              if f.startswith("/")}))
    _entries_present(src, text, entries, arch, defines)
    shim = str(SHIM_DIR)
    cuda = tuple(str(Path(d).resolve()) + "/" for d in incs)

    def ptx_file(path, system):
        """Inline asm is PTX in the user's files (outside system-header regions: the host's
        headers hold x86 asm) and in the CUDA headers (CCCL's device paths)."""
        if path.startswith(cuda):
            return True
        return not system and not path.startswith(shim) and path not in (
            "<built-in>", "<command-line>", "<normcheck launch wrappers>", "<normcheck wrapper>")

    rewritten, deferred = translate.rewrite(text, ptx_file)
    return rewritten, deferred, deps, std


_LINE_MARKER = re.compile(r'^# \d+ "([^"]+)"', re.M)


_MARKER_FLAGS = re.compile(r'^# \d+ "([^"]*)"((?: \d)*)$', re.M)


def _own_code(text: str) -> str:
    """The preprocessed text of the user's own files: not the shim's, not a system header
    (CUDA's and the host's are included as system headers)."""
    shim, out, keep, pos = str(SHIM_DIR), [], True, 0
    for m in _MARKER_FLAGS.finditer(text):
        if keep:
            out.append(text[pos:m.start()])
        path, flags = m.group(1), m.group(2).split()
        keep = "3" not in flags and not path.startswith((shim, "<"))
        pos = m.end()
    if keep:
        out.append(text[pos:])
    return "".join(out)


def _entries_present(src: base.Source, text: str, entries, arch, defines) -> None:
    """Every entry's name is in the preprocessed code (macros expanded, headers included),
    before the launch wrappers that call it -- else a CompileError naming the file's kernels,
    before anything is compiled (a misspelt --entry cost a compile and six lines of g++)."""
    from normcheck import skeleton

    code = text.split('"<normcheck launch wrappers>"', 1)[0]
    for e in entries:
        base_name = base.entry_name(e)
        if re.search(rf"\b{re.escape(base_name)}\b", code):
            continue
        hint = guard_hint(src.text, e, arch, defines)
        if hint:  # defined, under a condition this build leaves out
            raise CompileError(f"entry {e!r} is not a kernel of {src.origin} as built" + hint)
        names = skeleton.kernel_names(_own_code(code))
        close = difflib.get_close_matches(base_name, names, n=1)
        raise CompileError(
            f"entry {e!r} is not a kernel of {src.origin}: "
            + (f"did you mean {close[0]!r}? " if close else "")
            + (f"its kernels: {', '.join(names[:20])}" + (" ..." if len(names) > 20 else "")
               if names else "no __global__ function is declared in the file itself (one in a "
               "header it includes is named as written there)")
            + " (--entry, or entry in the spec; a template's instantiation as rms<__half>)")


@functools.cache
def _tools_key() -> str:
    """What else a preprocessed build depends on: normcheck's rewriting code."""
    here = Path(__file__).resolve().parent
    return cache.key_of(*[(here / f).read_bytes() for f in ("backend.py", "translate.py",
                                                           "ptx.py")])


def _stamps(paths) -> list | None:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            return None
        out.append([p, st.st_size, st.st_mtime_ns])
    return out


def _manifest(src, entries, defines, extra, arch, hosts, version) -> Path:
    key = cache.key_of(src.origin, src.text, repr((entries, sorted((defines or {}).items()),
                                                  extra, arch, sorted(hosts),
                                                  list(src.include_dirs),
                                                  [str(d) for d in include_dirs_for(src)])),
                      version or "", _tools_key())
    return cache.cache_dir("cpu") / "manifests" / f"{key}.json"


def _from_manifest(path: Path):
    """(build key, deferred PTX messages, frameworks, C++ standard, the entries the build holds
    where they are more than the manifest's own: else None) of an unchanged build, or None."""
    if not cache.verified(path):  # as normcheck wrote it: one pointed at another kernel's
        return None                # build would swap the verdicts (#65)
    try:
        m = json.loads(path.read_text())
        deps = m["deps"]
        if _stamps(d[0] for d in deps) != deps:
            return None
        wide = m.get("entries")
        return m["key"], list(m["deferred"]), dict(m["frameworks"]), str(m["std"]), \
            ([str(e) for e in wide] if isinstance(wide, list) else None)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_own(src: base.Source) -> bool:
    """Whether ``src`` is normcheck's own (a built-in of cuda_src/): its builds live apart from
    user builds and run in a worker no user code has run in."""
    return src.path is not None and isolation.is_own(src.path)


def builds_folder(own: bool) -> Path:
    """Where builds live: normcheck's own beneath ``cpu/builtin/`` (the one folder the built-ins'
    worker reads), each user build in a folder of its own (the one its worker reads)."""
    return cache.cache_dir("cpu") / "builtin" if own else cache.cache_dir("cpu")


#: The largest build normcheck keeps (a kernel module is well under a MiB; the limit stops a
#: source whose static data would fill the cache).
MAX_BUILD_BYTES = 64 << 20


def build(src: base.Source, entries: list[str], defines=None, extra_flags=(),
          arch: int = base.DEFAULT_ARCH, hosts=()) -> Module:
    """Compile ``src`` exporting ``entries`` for ``arch`` (cached; see the module docstring);
    ``hosts``: the entries that are host functions (launchers), called on the host.  A build
    that takes a while says so (normcheck.progress)."""
    from normcheck import progress

    hazard = any(f in extra_flags for f in HAZARD_FLAGS)
    # one line per build: the hazard build of the same text beside the plain one said as such
    # and normcheck's own build of a built-in file (the yardstick) told from a check of the
    # same file as the user's kernel
    own = " (normcheck's built-ins)" if is_own(src) else ""
    with progress.step(f"building {Path(str(src.origin)).name}{own} for the cpu backend"
                       + (" (its hazard build: races and exact shared bounds)" if hazard else
                          " (g++, once per text: then cached)"), once=True):
        try:
            return _build(src, entries, defines, extra_flags, arch, hosts)
        except _NeedsStd as e:  # the file uses what a later standard has: built in that one
            return _build(src, entries, defines, extra_flags, arch, hosts, e.std)


#: The standards g++ names where a file uses what only a later one has ("'concept' only
#: available with '-std=c++20'", "'std::span' is only available from C++20 onwards"), each
#: with the -std= that builds it, oldest first.
_STD_HINTS = (("c++20", re.compile(r"-std=(?:c|gnu)\+\+(?:20|2a)\b|from C\+\+20 onwards")),
              ("c++23", re.compile(r"-std=(?:c|gnu)\+\+(?:23|2b)\b|from C\+\+23 onwards")))
_STD_ORDER = ("c++17", "c++20", "c++23")


class _NeedsStd(Exception):
    def __init__(self, std):
        super().__init__(std)
        self.std = std


def newer_std(std: str, other: str | None) -> str:
    """The later of two -std= names (``other`` None: ``std``)."""
    if other is None or other not in _STD_ORDER or std not in _STD_ORDER:
        return std if other is None or std not in _STD_ORDER else other
    return max(std, other, key=_STD_ORDER.index)


def needed_std(diagnostics: str, std: str) -> str | None:
    """The standard g++'s diagnostics say the file needs, where it is later than ``std``."""
    for name, pat in reversed(_STD_HINTS):
        if pat.search(diagnostics or "") and newer_std(std, name) != std:
            return name
    return None


def _other_kernels(src_text: str, text: str, entries) -> list:
    """The kernels of the file itself (its own code, macros expanded) that a build for
    ``entries`` could launch as well: plain (not a template), in the global namespace, defined
    once -- so one build of a text serves every such entry of it (#64: a second --entry of the
    same file rebuilt it).  Sorted; those of ``entries`` left out."""
    from normcheck import skeleton

    # the file's own text (the preprocessed one has no __global__ left): its kernels as
    # written, each kept only where the preprocessed code still holds its name (not #if'd out)
    own = _own_code(text.split('"<normcheck launch wrappers>"', 1)[0])
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", src_text, flags=re.S).replace("\\\n", " ")
    code = re.sub(r"^[ \t]*#.*$", " ", code, flags=re.M)  # directives, macros: not counted
    names, depth, pos = [], 0, 0
    for m in re.finditer(r"\b(?:__global__|__nc_global__)\b", code):
        seg = code[pos:m.start()]
        depth += seg.count("{") - seg.count("}")
        pos = m.start()
        back = re.split(r"[;{}]", code[max(0, m.start() - 400):m.start()])[-1]
        got = skeleton.kernel_names(code[m.start():m.start() + 600])
        if got:
            names.append((got[0], depth == 0 and not re.search(r"\btemplate\b", back)))
    counts = {}
    for n, _ok in names:
        counts[n] = counts.get(n, 0) + 1
    mine = {base.entry_name(e) for e in entries}
    return sorted({n for n, ok in names if ok and counts[n] == 1 and n not in mine and
                   re.search(rf"\b{re.escape(n)}\s*\(", own)})


def _build(src, entries, defines, extra_flags, arch, hosts, want_std=None,
           widen=True) -> Module:
    entries = [base.parse_entry(e) for e in entries]
    hosts = {base.parse_entry(e) for e in hosts}
    cxx, version = _compiler()
    extra = [str(f) for f in extra_flags]
    manifest = _manifest(src, entries, defines, extra, arch, hosts, version)
    known = _from_manifest(manifest)
    own = is_own(src)
    builds = builds_folder(own)
    if known and cache.verified(builds / known[0] / "kernel.so") and \
            (want_std is None or known[3] == want_std):
        key, deferred, used, std = known[:4]
        if known[4] is not None:  # a build of the file's every plain kernel serves these
            entries = [base.parse_entry(e) for e in known[4]]
        flags = [f"-std={std}", *_CXX_FLAGS, *extra]
    else:
        try:
            text, deferred, deps, std = preprocess(src, entries, defines, extra, arch, hosts,
                                                   std=want_std)
        except CompileError as e:  # a header that #errors outside C++20, say
            need = needed_std(e.diagnostics or "", want_std or DEFAULT_STD)
            if want_std is None and need:
                raise _NeedsStd(need) from None
            raise
        others = _other_kernels(src.text, text, entries) if widen and not hosts and all(
            "<" not in e and "(" not in e and "::" not in e for e in entries) else []
        if others:
            # one build for the file's every plain kernel: keyed by the text, whichever of
            # them a check names (a file where that does not compile is built for its own)
            try:
                mod = _build(src, sorted(set(entries) | set(others)), defines, extra_flags,
                             arch, hosts, want_std, widen=False)
            except (CompileError, InvalidArgument):
                pass
            else:
                wide = _manifest(src, mod.entries, defines, extra, arch, hosts, version)
                stamps = _stamps(deps)
                got = _from_manifest(wide)
                if stamps is not None and got is not None:
                    cache.install_file(json.dumps({
                        "key": got[0], "deferred": got[1], "deps": stamps,
                        "frameworks": got[2], "std": got[3], "entries": list(mod.entries)}),
                        manifest)
                return mod
        flags = [f"-std={std}", *_CXX_FLAGS, *extra]
        key = cache.key_of(text, " ".join(flags), version)
        used = headers.frameworks(deps)
        if want_std is not None and std == want_std:
            used["c++ standard"] = (f"{std} (what the file uses: g++ named it in a build in "
                                    f"{DEFAULT_STD})")
        elif std != DEFAULT_STD:
            used["c++ standard"] = f"{std} (what the headers it includes demand)"
    so = builds / key / "kernel.so"
    if not cache.verified(so):
        with confine.temporary_folder("build") as d:
            ii = Path(d) / "kernel.ii"
            ii.write_text(text)
            out = Path(d) / "kernel.so"
            obj = Path(d) / "kernel.o"
            roots = confine.toolchain_roots(cxx)
            r = confine.run_compiler([cxx, *[f for f in flags if f != "-shared"], "-c", "-x",
                                      "c++-cpp-output", str(ii), "-o", str(obj)],
                                     f"compiling {src.origin}", read=roots,
                                     write=[d, os.devnull], cleanup=d)
            if r.returncode != 0 and _nvcc_accepts(r.stderr):
                # g++ rejects what nvcc's front end accepts: -fpermissive makes it a warning
                r = confine.run_compiler([cxx, *[f for f in flags if f != "-shared"],
                                          "-fpermissive", "-c", "-x", "c++-cpp-output", str(ii),
                                          "-o", str(obj)], f"compiling {src.origin}",
                                         read=roots, write=[d, os.devnull], cleanup=d)
            if r.returncode == 0:
                r = _link(cxx, obj, out, d, src.origin)
            if r.returncode != 0 and want_std is None and needed_std(r.stderr, std):
                raise _NeedsStd(needed_std(r.stderr, std))
            if r.returncode != 0:
                missing = [e for e in entries if re.search(
                    rf"<normcheck launch wrappers>:\d+:\d+: error: "
                    rf"'{re.escape(base.split_entry(e)[0].split('<')[0])}' "
                    r"(was not declared|is not a member)", r.stderr)]
                head = (f"entry {missing[0]!r} is not a kernel of {src.origin}: check --entry "
                        "(for a template, the instantiation, e.g. rms_norm<__half>)" +
                        guard_hint(src.text, missing[0], arch, defines) if missing
                        else f"g++ could not compile {src.origin} for the cpu backend "
                             f"(entries: {', '.join(entries)})")
                raise CompileError(head, _explain(r.stderr, str(ii)))
            size = out.stat().st_size
            if size > MAX_BUILD_BYTES:
                raise CompileError(f"{src.origin}: the build is {size >> 20} MiB, over "
                                   f"normcheck's limit of {MAX_BUILD_BYTES >> 20} MiB (large "
                                   "static data?); it is not kept")
            cache.install_file(out.read_bytes(), so)
    if known is None:
        stamps = _stamps(deps)
        if stamps is not None:
            cache.install_file(json.dumps({"key": key, "deferred": deferred, "deps": stamps,
                                          "frameworks": used, "std": std}), manifest)
    mod = Module(str(so), list(entries), src.origin, unsupported_ptx=deferred, frameworks=used,
                 own=own)
    # normcheck's own builds keep their signatures beside them (ledger-sealed like the build):
    # a check whose built-ins are cached starts no worker for them until one runs (#67)
    sigs = _own_signatures(so, entries) if own else None
    if sigs is not None:
        for e, raw in zip(entries, sigs):
            mod.signatures[e] = base.parse_signature(raw)
        return mod
    # the signatures are read in the worker: the caller's process never loads user code
    worker = mod.worker()
    rep = worker.request({"op": "signatures", "so": str(so), "n": len(entries)}, 60.0,
                         _signatures_reply(len(entries)))
    if isinstance(rep, tuple) and rep[0] == "malformed":
        raise SandboxViolation(f"{src.origin}: while the module loaded, the worker sent "
                               f"something that is not normcheck's protocol ({rep[1]}): code in "
                               "the kernel's file (a static constructor?) wrote into the reply "
                               "pipe; the worker was stopped and nothing it sent was used",
                               call="forged reply")
    if isinstance(rep, tuple):
        m = re.match(r"kind=sandbox syscall=(\d{1,6})\b", worker.report()) \
            if rep[0] == "died" else None
        if m:  # code that runs as the module loads (a static constructor) made the call
            raise SandboxViolation(f"{src.origin}: while the module loaded (a static "
                                   f"constructor?), made a forbidden system call: "
                                   f"{sandbox.syscall_name(m.group(1))}; the sandbox allows a "
                                   "kernel's code only the calls a launch needs (an "
                                   "allow-list)", call=int(m.group(1)))
        raise CompileError(f"{src.origin}: the compiled module could not be loaded",
                           worker.describe_death(rep))
    if not rep["ok"]:
        raise CompileError(f"{src.origin}: the compiled module could not be loaded",
                           one_line(rep["message"]))
    for e, raw in zip(entries, rep["signatures"]):
        mod.signatures[e] = base.parse_signature(raw)
    if own:
        _keep_own_signatures(so, entries, rep["signatures"])
    return mod


def _own_signatures(so: Path, entries) -> list | None:
    """The raw signatures of ``entries`` a built-in build of normcheck's keeps beside it, or
    None (not kept yet, or not as normcheck wrote it)."""
    path = Path(so).parent / "signatures.json"
    if not cache.verified(path):
        return None
    try:
        kept = json.loads(path.read_text())
        got = [kept[e] for e in entries]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return got if all(isinstance(r, str) for r in got) else None


def _keep_own_signatures(so: Path, entries, raws):
    path = Path(so).parent / "signatures.json"
    kept = {}
    if cache.verified(path):
        try:
            kept = dict(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            kept = {}
    kept.update(zip(entries, raws))
    try:
        cache.install_file(json.dumps(kept, sort_keys=True), path)
    except OSError:
        pass  # a read-only cache: the worker answers next time


#: g++'s errors for code nvcc's front end accepts, which -fpermissive turns into warnings: a
#: member alias named as the type it aliases (``using Reducer = Reducer<T, N>;``, as
#: flash-attention's and Apex contrib's layer norms write).
_PERMISSIVE = ("changes meaning of",)


def _nvcc_accepts(diagnostics: str) -> bool:
    """Every error g++ reported is one nvcc's front end does not make (_PERMISSIVE)."""
    errs = [ln for ln in (diagnostics or "").splitlines() if ": error: " in ln]
    return bool(errs) and all(any(p in ln for p in _PERMISSIVE) for ln in errs)


def _demangle(sym: str) -> str:
    """A C++ symbol as source names it (binutils' c++filt), or as it is."""
    cxx, _ = _compiler()
    tool = _tool(cxx, "c++filt")
    if tool and re.fullmatch(r"[A-Za-z_.$][\w.$]{0,300}", sym):
        try:
            out = subprocess.run([tool, sym], capture_output=True, text=True,
                                 timeout=10).stdout.strip()
            if out and out != sym:
                return f"{out} ({sym})"
        except (OSError, subprocess.SubprocessError):
            pass
    return sym


def _tool(cxx: str, name: str) -> str | None:
    """A binutils program beside the compiler (g++ needs binutils), or on the PATH."""
    import shutil

    for cand in (str(Path(shutil.which(cxx) or cxx).parent / name), name):
        found = shutil.which(cand)
        if found:
            return found
    return None


@functools.lru_cache(maxsize=None)
def _system_symbols(cxx: str) -> frozenset:
    """What the C and C++ runtime libraries a module loads with define (libc, libm, libstdc++,
    libgcc_s, the dynamic loader): symbols a module may leave undefined."""
    nm = _tool(cxx, "nm")
    out = set()
    if nm is None:
        return frozenset()
    for lib in ("libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1",
                "ld-linux-x86-64.so.2", "libpthread.so.0", "libdl.so.2", "librt.so.1"):
        try:
            path = subprocess.run([cxx, f"-print-file-name={lib}"], capture_output=True,
                                  text=True, timeout=60).stdout.strip()
            if not path or not Path(path).is_file():
                continue
            r = subprocess.run([nm, "-D", "--defined-only", path], capture_output=True,
                               text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            continue
        for ln in r.stdout.splitlines():
            parts = ln.split()
            if parts:
                out.add(parts[-1].split("@")[0])
    return frozenset(out)


def _link(cxx: str, obj: Path, out: Path, folder: str, origin: str):
    """Link a module; every symbol it leaves undefined that the C/C++ runtime does not define
    -- a framework's host functions and data (c10's, cuBLAS's, the CUDA runtime's), named by
    host code in the file that no kernel reaches -- gets a stub that fails the launch naming
    it if it is ever called: the module loads, and a call is a named failure, never a crash."""
    nm = _tool(cxx, "nm")
    foreign = []
    if nm is not None:
        r = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True, timeout=120)
        system = _system_symbols(cxx)
        for ln in r.stdout.splitlines():
            parts = ln.split()
            if len(parts) == 2 and parts[0] == "U" and parts[1].split("@")[0] not in system \
                    and parts[1] not in _LINKER_SYMBOLS:
                foreign.append(parts[1])
    objs = [str(obj)]
    if foreign:
        stubs = Path(folder) / "stubs.cpp"
        lines = ['extern "C" [[noreturn]] void ncsimt_unresolved_call(const char*, void*);']
        queries = _device_queries(cxx, foreign)
        for i, sym in enumerate(foreign):
            lit = sym.replace("\\", "\\\\").replace('"', '\\"')
            if sym in queries:  # the library's "which device": the one GPU presented, 0
                lines.append(f'extern "C" int __nc_stub_{i}() __asm__("{lit}");')
                lines.append(f'extern "C" int __nc_stub_{i}() {{ return 0; }}')
                continue
            lines.append(f'extern "C" void __nc_stub_{i}() __asm__("{lit}");')
            lines.append(f'extern "C" void __nc_stub_{i}() {{ ncsimt_unresolved_call("{lit}", '
                         '__builtin_return_address(0)); }')
        stubs.write_text("\n".join(lines) + "\n")
        r = confine.run_compiler([cxx, "-std=c++17", "-O1", "-fPIC", "-c", "-fvisibility=hidden",
                                  str(stubs), "-o", str(Path(folder) / "stubs.o")],
                                 f"linking {origin}", read=confine.toolchain_roots(cxx),
                                 write=[folder, os.devnull], cleanup=folder)
        if r.returncode != 0:
            return r
        objs.append(str(Path(folder) / "stubs.o"))
    r = confine.run_compiler([cxx, "-shared", "-pthread", *objs, "-o", str(out)],
                             f"linking {origin}", read=confine.toolchain_roots(cxx),
                             write=[folder, os.devnull], cleanup=folder)
    if r.returncode != 0 and len(objs) > 1:  # a stub the linker refuses (a TLS symbol ...)
        r = confine.run_compiler([cxx, "-shared", "-pthread", objs[0], "-o", str(out)],
                                 f"linking {origin}", read=confine.toolchain_roots(cxx),
                                 write=[folder, os.devnull], cleanup=folder)
    return r


#: A library's host function that says which device is current, by its name, taking nothing
#: (ggml's ggml_cuda_get_device(), a project's current_device()): answered as the presented
#: GPU answers it -- device 0, the one there is (#68: llama.cpp's RMSNorm launcher asks it
#: before every launch, through ggml-cuda.cu, which a kernel's build does not load).
_DEVICE_QUERY = re.compile(r"(?:\w+::)*\w*(?:get_device|current_device|get_current_device|"
                           r"device_id)\(\)")


def _device_queries(cxx: str, symbols) -> frozenset:
    """The unresolved symbols that are device queries (``_DEVICE_QUERY``, demangled)."""
    tool = _tool(cxx, "c++filt")
    if tool is None or not symbols:
        return frozenset()
    try:
        out = subprocess.run([tool], input="\n".join(symbols), capture_output=True, text=True,
                             timeout=30).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(sym for sym, name in zip(symbols, out) if _DEVICE_QUERY.fullmatch(name))


#: What the static linker itself defines: never stubbed.
_LINKER_SYMBOLS = frozenset({"_GLOBAL_OFFSET_TABLE_", "_TLS_MODULE_BASE_", "__dso_handle",
                             "_DYNAMIC", "__ehdr_start", "_end", "_edata", "__bss_start",
                             "_init", "_fini", "_PROCEDURE_LINKAGE_TABLE_"})


_DIRECTIVE = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)$")


def guard_hint(text: str, entry: str, arch: int, defines=None) -> str:
    """Where an entry the compiler did not find is defined under a preprocessor condition: the
    condition, its line, and what reveals the code (the architecture, or a -D); else ""."""
    name = re.escape(base.entry_name(entry))
    stack = []  # (line, condition) of the open #if blocks
    lines = text.splitlines()
    for no, line in enumerate(lines, 1):
        m = _DIRECTIVE.match(line)
        if m:
            kind, cond = m.group(1), m.group(2).split("//")[0].strip()
            if kind in ("if", "ifdef", "ifndef"):
                cond = {"ifdef": f"defined({cond})", "ifndef": f"!defined({cond})"}.get(kind, cond)
                stack.append((no, cond))
            elif kind in ("elif", "else") and stack:
                prev = stack.pop()
                stack.append((no, f"!({prev[1]})" + (f" && ({cond})" if kind == "elif" else "")))
            elif kind == "endif" and stack:
                stack.pop()
            continue
        if stack and re.search(rf"\b{name}\s*(<[^;{{]*>)?\s*\(", line) and \
                re.search(r"__global__|\bvoid\b|template", line + " ".join(lines[max(0, no - 3):no])):
            no_if, cond = stack[-1]
            hints = []
            if "__CUDA_ARCH__" in cond:
                hints.append(f"__CUDA_ARCH__ is {arch} here (sm_{arch // 10}): give --arch (or "
                             "arch = ... in the spec) for the architecture the code is for")
            names = set(re.findall(r"defined\s*\(?\s*([A-Za-z_]\w*)", cond)) - \
                {"__CUDA_ARCH__", "__CUDACC__", "__NVCC__"}
            undefined = sorted(n for n in names if n not in (defines or {}))
            if undefined:
                hints.append("define " + ", ".join(f"-D {n}" for n in undefined) +
                             " if the kernel is meant to exist")
            return (f"; it is defined at line {no}, under `#if {cond}` (line {no_if}), which is "
                    "false for this compile" + (": " + "; ".join(hints) if hints else ""))
    return ""


# The worker processes (Worker, Workers, WORKERS) and the sandbox helper live in
# normcheck.backends.cpu.workers: not an input of a build's key (_tools_key), so a change
# to how workers start does not rebuild every kernel.
from normcheck.backends.cpu.workers import (  # noqa: E402
    WORKERS, Worker, sandbox_helper, sandbox_helper_built)


# ------------------------------------------------------------------------------------------------
# What the worker sends, checked (it is untrusted: see normcheck.backends.cpu.wire)
# ------------------------------------------------------------------------------------------------
_INT = r"-?\d{1,19}"
#: The crash report's keys and the form of their values (shim/normcheck_runtime.h writes it).
_REPORT_KEYS = {
    "kind": r"out_of_bounds|misaligned|stack_overflow|null_pointer|sandbox|abort|trap|"
            r"arithmetic|crash|unsupported",
    "ptx": r"\d{1,6}",
    "signal": _INT, "addr": r"0x[0-9a-f]{1,16}", "access": r"read|write", "bytes": _INT,
    "arg": r"\d{1,3}", "elem_offset_bytes": _INT, "past_end_bytes": _INT,
    "before_start_bytes": _INT, "size_bytes": _INT, "itemsize": r"\d{1,3}", "syscall": _INT,
    "block": r"\d{1,10},\d{1,10},\d{1,10}", "thread": r"\d{1,10},\d{1,10},\d{1,10}",
    "detail": r"[a-z_]{1,40}", "stack_bytes": _INT, "call": r"[A-Za-z_]\w{0,40}\(\)",
    "pc": r"0x[0-9a-f]{1,16}", "sym": r"[A-Za-z_.$][\w.$]{0,300}", "limit": _INT,
    "shared": r"dynamic", "index": _INT, "extent": _INT,
}
_REPORT_INTS = {"signal", "bytes", "arg", "elem_offset_bytes", "past_end_bytes", "ptx",
                "before_start_bytes", "size_bytes", "itemsize", "syscall", "stack_bytes",
                "limit", "index", "extent"}


#: What a kernel reached that the cpu backend does not run (the report's detail word).
_UNSUPPORTED = {
    "cuda_launch_kernel": "launched a kernel through cudaLaunchKernel/cudaLaunchKernelExC with "
                          "a kernel held as a void* (its parameters' types are unknown here; "
                          "cudaLaunchKernel((void*)kernel, ...) with the cast at the call runs): "
                          "pass the kernel itself, launch it with <<<...>>> or the typed "
                          "cudaLaunchKernelEx(&config, kernel, args...)",
    "wmma": "reached a WMMA (tensor core) operation of <mma.h>, which the cpu backend does "
            "not emulate",
    "named_barrier_count": "reached a barrier of part of the block (bar.sync / "
                           "__barrier_sync_count with a thread count below the block's): the cpu "
                           "backend's barriers are block-wide",
}


def parse_report(text: str, args=None) -> dict:
    """A crash report (``key=value`` words) checked word by word against :data:`_REPORT_KEYS`;
    ``arg`` must name an array of ``args``.  WireError on anything else: a kernel can write any
    bytes into the report page."""
    out = {}
    for tok in text.split():
        k, eq, v = tok.partition("=")
        rule = _REPORT_KEYS.get(k)
        if not eq or rule is None:
            raise wire.WireError(f"crash report: unexpected word {tok[:40]!r}")
        if k in out or not re.fullmatch(rule, v):
            raise wire.WireError(f"crash report: {k}={v[:40]!r} is not of the form {k} takes")
        out[k] = int(v) if k in _REPORT_INTS else v
    if out and "kind" not in out:
        raise wire.WireError("crash report: no kind")
    if "arg" in out and args is not None:
        i = out["arg"]
        hidden = sum(len(a.pointers) for a in args if isinstance(a, base.StructArg))
        if not (i < len(args) and isinstance(args[i], (np.ndarray, base.SparseRows))) and \
                not len(args) <= i < len(args) + hidden:
            raise wire.WireError(f"crash report: arg={i} is not an array argument of the launch")
    return out




def _signatures_reply(n):
    def check(rep):
        if rep.get("ok") is False:
            return wire.check(rep, {"ok": (False,), "message": str}, "the signatures reply")
        return wire.check(rep, {"ok": (True,), "signatures": lambda v: None if isinstance(v, list)
                                and len(v) == n and all(isinstance(x, str) for x in v) else
                                f"a list of {n} strings"}, "the signatures reply")
    return check


def _note(v):
    """A launch's note as the runtime writes one (undefined_read: under 320 bytes); anything
    longer is not one."""
    return None if isinstance(v, str) and len(v) <= 512 else "a string of at most 512 characters"


def _launch_reply(rep):
    if rep.get("ok") is True:
        return wire.check(rep, {"ok": (True,), "seconds": float, "note?": _note},
                          "the launch reply")
    return wire.check(rep, {"ok": (False,), "kind": ("deadlock", "launch", "out_of_bounds",
                                                           "threads", "race", "barrier",
                                                           "launch_limit"),
                            "message": str}, "the launch reply")


# ------------------------------------------------------------------------------------------------
# Backend and kernel
# ------------------------------------------------------------------------------------------------
def _copy(a):
    if isinstance(a, np.ndarray):
        return a.copy()
    if isinstance(a, base.SparseRows):
        return base.SparseRows(a.data.copy(), a.rows, a.lo, a.walk)
    if isinstance(a, base.StructArg):
        return base.StructArg(a.data, [(o, _copy(arr), n) for o, arr, n in a.pointers])
    return a


def _arrays(args):
    """Every array of a launch, those structs point to included."""
    for a in args:
        if isinstance(a, (np.ndarray, base.SparseRows)):
            yield a
        elif isinstance(a, base.StructArg):
            yield from (arr for _o, arr, _n in a.pointers)




def _wrapped(elem: int, item: int, size: int) -> str:
    """What an element far before an array's start is, where a 32-bit index explains it."""
    if 0 <= elem + (1 << 32) < size:
        return (f": element {elem + (1 << 32)} wrapped to 32 bits (an element index -- a row "
                "times the width, say -- computed in int; compute it in 64 bits)")
    if 0 <= elem * item + (1 << 32) < size * item:
        return (f": byte {elem * item + (1 << 32)} wrapped to 32 bits (a byte offset computed "
                "in int; compute it in 64 bits)")
    return ""


def _array_region(a, guard, size):
    """(wire record, layout entry, new size) of an array placed at ``size`` in the arena."""
    # "end": the data 16-byte aligned at its start, ending at most 15 bytes before the guard
    # page; "tight": ending exactly at it (aligned only as its size allows)
    span = max(a.nbytes, 1) if guard == "tight" else -(-max(a.nbytes, 1) // 16) * 16
    region = -(-span // _PAGE) * _PAGE
    start = region - span if guard in ("end", "tight") else 0
    return (["array", size, region, start, a.nbytes, a.dtype.itemsize], (a, size, region, start),
            size + region)


def array_layout(args, guard, params=None):
    """Where each array goes in the arena: (wire records, [(array, data offset)], size,
    [names of the arrays inside structs]).  Records: one per kernel parameter, then the arrays
    that structs point to (their records follow the parameters; a struct's record names them by
    index)."""
    records, layout, hidden, hidden_names = [], [], [], []
    size = _REPORT_PAGE
    n = len(args)
    for i, a in enumerate(args):
        by_value = params is not None and not params[i].is_pointer
        if a is None:
            records.append(["null"])
        elif isinstance(a, base.StructArg):
            fields = []
            for off, arr, name in a.pointers:
                rec, ent, size = _array_region(arr, guard, size)
                fields.append([int(off), n + len(hidden)])
                hidden.append(rec)
                hidden_names.append((i, name))
                layout.append(ent)
            records.append(["struct", bytes(a.data), fields])
        elif isinstance(a, (np.ndarray, base.SparseRows)) and not by_value:
            rec, ent, size = _array_region(a, guard, size)
            records.append(rec)
            layout.append(ent)
        else:
            records.append(["scalar", a.dtype.str, a.tobytes()])
    return records + hidden, layout, size, hidden_names


_LINE = re.compile(r"^(.+?):(\d+)(?: \(discriminator \d+\))?$")
_lines_cache: dict = {}


def source_line(module: Module, pc: str) -> str | None:
    """The line of the user's code at offset ``pc`` (hex) of the module: "file.cu:47" (the file
    as the user named it; a header of theirs by its path), read from the module's line table
    (it is built with -g1) by binutils' addr2line, run confined like the compiler.  The
    innermost inlined frame in a file of the user's is taken (the shim's and CUDA's headers
    are skipped: a fault inside __ldg or a PTX helper is reported at the kernel's line that
    called it).  None where there is no such line (addr2line missing, a fault in normcheck's
    own code)."""
    key = (module.path, pc)
    if key in _lines_cache:
        return _lines_cache[key]
    out = None
    tool = _addr2line()
    if tool:
        try:
            r = confine.run_compiler([tool, "-e", module.path, "-i", pc], "reading a line table",
                                     read=[*confine.toolchain_roots(tool),
                                           str(Path(module.path).parent)], write=[os.devnull])
            lines = r.stdout.splitlines() if r.returncode == 0 else []
        except CompileError:
            lines = []
        skip = (str(SHIM_DIR), *(str(Path(d).resolve()) for d in cuda_include_dirs()),
                "/usr/", "<")
        for ln in lines:
            m = _LINE.match(ln.strip())
            if not m or m.group(1) == "??" or m.group(2) == "0":
                continue
            f = m.group(1)
            if f.startswith(skip) and f != module.origin:
                continue
            shown = Path(f).name if f == module.origin else f
            out = f"{shown}:{m.group(2)}"
            break
    _lines_cache[key] = out
    return out


def _addr2line() -> str | None:
    """binutils' addr2line beside the compiler (g++ needs binutils), or on the PATH."""
    import shutil

    cxx, _ = _compiler()
    for cand in (str(Path(shutil.which(cxx) or cxx).parent / "addr2line"), "addr2line"):
        found = shutil.which(cand)
        if found:
            return found
    return None


def timeout_error(entry: str, timeout: float) -> KernelTimeout:
    """A launch that ran past its limit (the worker was stopped)."""
    return KernelTimeout(f"{entry}: the launch ran past its {timeout:g} s limit (an endless "
                         "loop, or a wait for something that never happens); raise it with "
                         "timeout=... / --timeout if the kernel is just slow", seconds=timeout)


def forged_reply(entry: str, what: str) -> SandboxViolation:
    """A worker that sent something other than normcheck's protocol (a forged reply or report)."""
    return SandboxViolation(f"{entry}: the worker sent something that is not normcheck's "
                            f"protocol ({one_line(what)}): the kernel wrote into the reply pipe or the "
                            "crash report; the worker was stopped and nothing it sent was used",
                            call="forged reply")


def sandbox_error(entry: str, info: dict, rep, where: str = "") -> SandboxViolation | None:
    """The SandboxViolation a dead worker's crash report (``info``, parse_report's) names, or
    None when it names no sandbox limit: a forbidden call (by name), a file-size, CPU-time or
    thread limit, or SIGSYS with every signal blocked (a call without a name)."""
    kind = info.get("kind")
    if kind is None and rep[0] == "died" and rep[1] == -signal.SIGSYS:
        # seccomp's SIGSYS arrived while every signal was blocked: the kernel killed the
        # worker without running the handler, so the call has no name
        kind, info = "sandbox", {"detail": "blocked"}
    if kind == "sandbox":
        if info.get("detail") == "file_size":
            what = "wrote more than the file-size limit (64 MiB) to its output"
        elif info.get("detail") == "cpu_time":
            what = "used more CPU time than the worker may"
        elif info.get("detail") == "threads":
            what = (f"started more threads than a launch may hold at once "
                    f"({info.get('limit')} in the worker)")
        elif info.get("detail") == "blocked":
            what = "made a forbidden system call with every signal blocked (which call is unknown)"
        elif "call" in info:
            what = f"made a forbidden system call: {info['call']} (a new process)"
        else:
            what = f"made a forbidden system call: {sandbox.syscall_name(info.get('syscall'))}"
        return SandboxViolation(f"{entry}: {what}{where}; the sandbox allows a kernel "
                                "only the calls a launch needs (an allow-list): no new "
                                "processes, network, file writes or permission changes, "
                                "limits, or signals to other processes "
                                "(normcheck.backends.cpu.sandbox)",
                                call=info.get("call", info.get("syscall")))
    return None


#: The hazard run's build (normcheck_hazards.h): GCC's ThreadSanitizer instrumentation, its
#: calls answered by the shim (every load and store of shared memory checked for races and for
#: dynamic shared memory's exact bounds), and -fsanitize=bounds (a static array indexed past its
#: declared size).  Launches with hazards=True run it; the plain build runs the rest.
HAZARD_FLAGS = ("-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0",
                "-fsanitize=bounds", "-fno-sanitize-recover=bounds")


def _quietly(make):
    """Make a value ahead (a build beside another); an error is raised again when it is asked
    for (the _Once makes it again then)."""
    try:
        make()
    except Exception:  # noqa: BLE001 -- asked for later, where the caller sees it
        pass


class _Once:
    """A value made on first use, once, whichever thread asks first."""

    def __init__(self, make):
        self._make, self._value, self._lock = make, None, threading.Lock()

    def __call__(self):
        with self._lock:
            if self._value is None:
                self._value = self._make()
            return self._value


class CpuKernel(base.Kernel):
    """A compiled entry (the call of :class:`normcheck.backends.base.Kernel`, every launch option
    honoured).  ``hazards=True`` runs the launch on the hazard run's build of the same text
    (:data:`HAZARD_FLAGS`): a race on shared memory, an access past dynamic shared memory's exact
    size or a static array's declared size fails it, at its line."""

    @property
    def capabilities(self):
        return CpuBackend.capabilities

    def __init__(self, module: Module, entry: str, options: dict, instrumented=None):
        self.module = module
        self.entry = entry
        self._instrumented = instrumented  # the hazard build's module, made on first use
        self._hazard_kernel = None
        self.hazard_run = False  # this is the hazard build's kernel: its launches check
        self._max_dyn_smem = 0
        self.index = module.entries.index(entry)
        self.params = module.signatures[entry]
        self.options = options
        self.last_seconds = None
        #: what the last launch noted without failing (an undefined warp-shuffle read), or None
        self.last_note = None
        self.needs_alignment = False  # its vector loads faulted once in the tight layout
        self._blocks = None  # the subset of blocks of the launch under way (None: all)
        self._hidden = []  # (struct argument, field name) of the arrays structs point to

    def __repr__(self):
        return f"<CpuKernel {self.entry}({', '.join(p.ctype for p in self.params)})>"

    def __call__(self, grid, block, args, shared_mem=0, *, names=None, timeout=None,
                 guard=None, schedule=None, workers=None, seed=0, fill=0xFF, blocks=None,
                 hazards=False, max_dyn_smem=0):
        """Run the kernel; returns what the launch noted without failing (the first warp
        shuffle that read a lane not taking part), or None -- also kept as ``last_note``.
        ``fill``: the byte undefined values are made of -- shared memory before a block
        writes it, a shuffle from a lane not taking part -- 0xFF (NaN) unless a second run
        asks for another, to see whether the outputs depend on them.  ``hazards``: run on the
        hazard build (races, exact shared-memory bounds); ``max_dyn_smem``: the dynamic
        shared memory the launcher opted in to (cudaFuncSetAttribute; 0: the 48 KiB a launch
        has without it) -- a launch asking for more is refused, as a GPU refuses it."""
        if hazards and not self.hazard_run:
            k = self.hazard_kernel()
            note = k(grid, block, args, shared_mem, names=names, timeout=timeout, guard=guard,
                     schedule=schedule, workers=workers, seed=seed, fill=fill, blocks=blocks,
                     max_dyn_smem=max_dyn_smem)
            self.last_seconds, self.last_note = k.last_seconds, k.last_note
            return note
        if not isinstance(max_dyn_smem, (int, np.integer)) or max_dyn_smem < 0:
            raise invalid("max_dyn_smem", max_dyn_smem, "a byte count")
        self._max_dyn_smem = int(max_dyn_smem)
        g, b, shm = base.check_launch(grid, block, shared_mem)
        args = base.check_args(self.entry, self.params, args, names)
        self.last_note = None
        timeout = self.options.get("timeout") if timeout is None else timeout
        timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        if not isinstance(timeout, (int, float)) or not np.isfinite(timeout) or timeout <= 0:
            raise invalid("timeout", timeout, "a positive, finite number of seconds",
                          "e.g. timeout=60")
        schedule = schedule or self.options.get("schedule", "forward")
        if schedule not in _SCHEDULES:
            raise invalid("schedule", schedule, f"one of {sorted(_SCHEDULES)}")
        workers = int(workers or self.options.get("workers") or
                      os.environ.get("NORMCHECK_LAUNCH_WORKERS") or os.cpu_count() or 1)
        if workers < 1:
            raise invalid("workers", workers, "at least 1")
        guard = guard or self.options.get("guard", "end")
        if guard not in GUARDS:
            raise invalid("guard", guard, f"one of {', '.join(GUARDS)}")
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise invalid("seed", seed, "a non-negative integer")
        if not isinstance(fill, (int, np.integer)) or not 0 <= fill <= 0xFF:
            raise invalid("fill", fill, "a byte, 0 to 255", "e.g. fill=0 for zeros")
        fill = int(fill)
        if blocks is not None and not (isinstance(blocks, (tuple, list)) and len(blocks) == 2
                                       and all(isinstance(v, (int, np.integer)) and
                                               0 <= v < 1 << 63 for v in blocks)
                                       and int(blocks[1]) & ~int(blocks[0]) == 0):
            raise invalid("blocks", blocks, "(mask, value): run only the blocks whose linear "
                          "index b has b & mask == value", "e.g. blocks=(1, 1): the odd blocks")
        self._blocks = None if blocks is None else [int(blocks[0]), int(blocks[1])]
        if guard == "both":
            # the launch with every array's end against its guard (an access past the end, by
            # far the commoner, faults at the first element past it), then a second one on
            # copies with every array's start against it
            copies = [_copy(a) for a in args]
            note = self(g, b, args, shm, names=names, timeout=timeout, schedule=schedule,
                        workers=workers, seed=seed, guard="end", fill=fill, blocks=blocks,
                        max_dyn_smem=max_dyn_smem)
            self._launch(g, b, shm, copies, names, float(timeout), schedule, workers, int(seed),
                         "start", fill)
            self.last_note = note
            return note
        if guard == "end" and not self.needs_alignment and \
                any(arr.nbytes % 16 for arr in _arrays(args)):
            # an array whose size is not a multiple of 16 bytes first ends exactly at its guard
            # page, so a read one element past it faults; a kernel whose vector loads need the
            # 16-byte alignment that costs runs again aligned (reads into the last granule's
            # padding then go unseen; writes there are still caught by the canaries) -- and
            # from then on runs aligned straight away, rather than twice a launch
            try:
                return self._launch(g, b, shm, args, names, float(timeout), schedule, workers,
                                    int(seed), "tight", fill)
            except MisalignedAccess:
                self.needs_alignment = True
        return self._launch(g, b, shm, args, names, float(timeout), schedule, workers,
                            int(seed), guard, fill)

    def _launch(self, g, b, shm, args, names, timeout, schedule, workers, seed, guard, fill,
                locate=True):
        records, layout, size, hidden = array_layout(args, guard, self.params)
        self._hidden = hidden
        threads = b[0] * b[1] * b[2]
        req = {"op": "launch", "so": self.module.path, "index": self.index,
               "grid": list(g), "block": list(b), "shared_mem": shm, "args": records,
               "nparams": len(args),
               "workers": workers, "schedule": _SCHEDULES[schedule], "seed": seed,
               "fill": fill, "hazards": self.hazard_run, "max_dyn_smem": self._max_dyn_smem}
        if self._blocks is not None:
            req["blocks"] = self._blocks
        worker = self.module.worker()
        rep = worker.run_on_arrays(
            layout, size, req, timeout, _launch_reply,
            cpu_need=timeout * min(workers, max(1, g[0] * g[1] * g[2])),
            on_dead=lambda r: self._raise_dead(r, args, names, timeout, threads))
        if not rep["ok"]:
            def relaunch(layout_guard):
                return self._launch(g, b, shm, [_copy(a) for a in args], names, timeout,
                                    schedule, workers, seed, layout_guard, fill, locate=False)

            self._raise_failed(rep, args, names, relaunch if locate else None)
        self.last_seconds = rep["seconds"]
        self.last_note = rep.get("note")
        return self.last_note

    def hazard_kernel(self) -> "CpuKernel":
        """This entry in the hazard run's build (built on first use: a second g++ run)."""
        if self._hazard_kernel is None:
            if self._instrumented is None:
                raise invalid("hazards", True, "a kernel compiled by compile_many (it has a "
                              "hazard build)")
            k = CpuKernel(self._instrumented(), self.entry, self.options)
            k.hazard_run = True
            k.needs_alignment = self.needs_alignment
            self._hazard_kernel = k
        return self._hazard_kernel

    # -- failures ---------------------------------------------------------------------------------
    def _name(self, i, names):
        if i >= len(self.params):  # an array a struct argument points to
            j, field_name = self._hidden[i - len(self.params)]
            n = f" `{names[j]}`" if names and j < len(names) else ""
            return f"field `{field_name}` of argument {j}{n} ({self.params[j].ctype})"
        p = self.params[i]
        n = f" `{names[i]}`" if names and i < len(names) else ""
        return f"argument {i}{n} ({p.ctype})"

    def _arg(self, info, names):
        i = int(info["arg"])
        return {"arg": i, "name": names[i] if names and i < len(names) else None}

    def _array(self, args, i):
        """The array of argument (or struct field) i."""
        if i >= len(self.params):
            j, field_name = self._hidden[i - len(self.params)]
            return next(arr for _o, arr, nm in args[j].pointers if nm == field_name)
        return args[i]

    def _oob(self, info, args, names, where=""):
        if info.get("detail") == "array_index" and "index" in info:
            extent = info.get("extent")
            return OutOfBounds(
                f"{self.entry}: out-of-bounds index {info['index']} of an array declared with "
                + (f"{extent} elements (valid indices 0..{extent - 1})" if extent is not None
                   else "a fixed size") + f"{where} (a __shared__ or local array indexed past "
                "its declared size)", access="access")
        if info.get("shared") == "dynamic":
            size = int(info.get("size_bytes", 0))
            access = info.get("access", "access")
            if "before_start_bytes" in info:
                at = f"{info['before_start_bytes']} bytes before its start"
            else:
                start = info.get("elem_offset_bytes", size + int(info.get("past_end_bytes", 0)))
                width = info.get("bytes")
                at = (f"bytes {start}..{start + width - 1}" if width else f"byte {start}") + \
                    f" of {size} (valid 0..{size - 1})"
            return OutOfBounds(f"{self.entry}: out-of-bounds {access} of dynamic shared memory: "
                               f"{at}{where} (the launch's shared_mem is {size} bytes, and a GPU "
                               "gives a block exactly that)", access=access)
        if "arg" not in info or ("past_end_bytes" not in info and
                                 "before_start_bytes" not in info):
            return self._malformed("an out-of-bounds report without its argument and offset")
        i = int(info["arg"])
        a = self._array(args, i)
        item = int(info.get("itemsize", a.dtype.itemsize)) or 1
        access = info.get("access", "access")
        if "past_end_bytes" in info:
            off = int(info["past_end_bytes"])
            elem = a.size + off // item
            detail = (f"{access} of element {elem} of {self._name(i, names)}, which has "
                      f"{a.size} elements (valid indices 0..{a.size - 1})")
        else:
            off = int(info["before_start_bytes"])
            elem = -((off + item - 1) // item)
            detail = (f"{access} of element {elem} of {self._name(i, names)} (before its "
                      f"start){_wrapped(elem, item, a.size)}")
        return OutOfBounds(f"{self.entry}: out-of-bounds {detail}{where}", access=access,
                           **self._arg(info, names))

    def _unsupported(self, info, where):
        if "ptx" in info:
            table = self.module.unsupported_ptx
            i = info["ptx"]
            if i >= len(table):
                return self._malformed(f"ptx={i} names no inline PTX of the module")
            what = (f"ran inline PTX the cpu backend does not translate: {table[i]} (PTX that "
                    "never runs is harmless; this one ran)")
        elif info.get("detail") == "host_symbol" and "sym" in info:
            what = (f"called {_demangle(info['sym'])}, host code of a library the cpu backend "
                    "does not load (its symbol was left unresolved when the module was built, "
                    "so the file could load)")
        else:
            what = _UNSUPPORTED.get(info.get("detail"))
            if what is None:
                return self._malformed(f"unsupported detail={info.get('detail')}")
        return Unsupported(f"{self.entry}: {what}{where}; normcheck cannot judge this kernel on "
                           "the cpu backend (run it on the cuda backend)")

    def _malformed(self, what: str):
        return forged_reply(self.entry, what)

    def _raise_dead(self, rep, args, names, timeout, threads):
        if rep[0] == "timeout":
            raise timeout_error(self.entry, timeout)
        if rep[0] == "malformed":
            raise self._malformed(rep[1])
        try:
            info = parse_report(self.module.worker().report(), args)
        except wire.WireError as e:
            raise self._malformed(str(e)) from None
        where = ""
        if "block" in info:
            where = f" in block ({info['block']}), thread ({info.get('thread', '?')})"
        line = source_line(self.module, info["pc"]) if "pc" in info else None
        if line:
            where += f" at {line}"
        kind = info.get("kind")
        own = self.module.worker().messages()
        extra = f" -- the worker said: {one_line(own)}" if own else ""
        if kind == "out_of_bounds":
            raise self._oob(info, args, names, where)
        if kind == "unsupported":
            raise self._unsupported(info, where)
        if kind == "misaligned":
            what = f"{info.get('bytes', '?')}-byte {'store' if info.get('access') == 'write' else 'load'}"
            if "arg" in info and "elem_offset_bytes" in info:
                i = info["arg"]
                item = info.get("itemsize", 1) or 1
                off = info["elem_offset_bytes"]
                detail = (f"misaligned {what} of {self._name(i, names)} at element {off // item}"
                          + (f" (+{off % item} bytes)" if off % item else "")
                          + f", address {info.get('addr')}")
                raise MisalignedAccess(f"{self.entry}: {detail}{where} (a GPU requires a "
                                       f"{info.get('bytes')}-byte access to be aligned to "
                                       f"{info.get('bytes')} bytes)", **self._arg(info, names))
            raise MisalignedAccess(f"{self.entry}: misaligned {what} at {info.get('addr')}{where}")
        if kind == "stack_overflow":
            kb = info.get("stack_bytes", 0) // 1024
            raise StackOverflow(f"{self.entry}: stack overflow{where} (each thread has {kb} KiB of "
                                "stack; set NORMCHECK_STACK_KB for more, or look for deep "
                                "recursion or large local arrays)", stack_kib=kb)
        if kind == "null_pointer":
            raise KernelCrash(f"{self.entry}: null pointer {info.get('access', 'access')} at "
                              f"{info.get('addr')}{where}", signal=11)
        err = sandbox_error(self.entry, info, rep, where)
        if err is not None:
            raise err
        if kind in ("abort", "trap", "arithmetic", "crash"):
            what = {"abort": "aborted (a failed assert?)", "trap": "trapped (__trap or an illegal "
                    "instruction)", "arithmetic": "arithmetic exception (integer division by "
                    "zero?)", "crash": f"crashed (signal {info.get('signal')}, address "
                    f"{info.get('addr', '?')}, {info.get('access', '')}"
                    f"{', ' + info['detail'] if 'detail' in info else ''})"}[kind]
            raise KernelCrash(f"{self.entry}: {what}{where}{extra}",
                              signal=int(info.get("signal", 0) or 0))
        sym = self.module.worker().undefined_symbol()
        if sym:
            raise KernelCrash(f"{self.entry}: the kernel called a function that is declared but "
                              f"never defined ({sym}){extra}", signal=0)
        rc = rep[1]
        if rc is not None and rc < 0:
            sig = -rc
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig
            raise KernelCrash(f"{self.entry}: the worker process was killed by {name}{extra}",
                              signal=sig)
        raise KernelCrash(f"{self.entry}: the worker process died (exit code {rc}){extra}",
                          signal=0)

    def _raise_failed(self, rep, args, names, relaunch=None):
        if rep["kind"] == "threads":
            # the threads a kernel started outlive its launch: the worker (and they) end here
            worker = self.module.worker()
            with worker.lock:
                worker._kill()
            raise SandboxViolation(f"{self.entry}: {one_line(rep['message'][:200])}; a kernel's threads "
                                   "must end before its launch returns (normcheck ended the "
                                   "worker, and them)", call="threads")
        errors = {"deadlock": KernelDeadlock, "race": KernelRace, "barrier": BarrierDivergence,
                  "launch_limit": LaunchRefused}
        if rep["kind"] in errors:  # the runtime's sentence, each [pc 0x..] as its line
            msg = re.sub(r" \[pc (0x[0-9a-f]{1,16})\]",
                         lambda m: f" at {source_line(self.module, m.group(1)) or '?'}",
                         one_line(rep["message"][:2000]))
            # a barrier's own file:line (__builtin_FILE): the user's file by its name
            msg = re.sub(r"\[file ([^\]\n]{1,500}):(\d{1,9})\]",
                         lambda m: f"{Path(m.group(1)).name if m.group(1) == self.module.origin else m.group(1)}:{m.group(2)}",
                         msg)
            raise errors[rep["kind"]](f"{self.entry}: {msg}")
        if rep["kind"] == "out_of_bounds":
            # a canary around an array was overwritten: found after the launch, so which thread
            # wrote is not known -- the launch runs again (on copies) with that side of every
            # array against its inaccessible margin, where the same write faults and names its
            # block, thread and line
            try:
                info = parse_report(rep["message"], args)
            except wire.WireError as e:
                raise self._malformed(str(e)) from None
            if info.get("kind") != "out_of_bounds":
                raise self._malformed("an out-of-bounds reply of another kind")
            if relaunch is not None:
                side = "tight" if "past_end_bytes" in info else "start"
                try:
                    relaunch(side)
                except OutOfBounds as located:
                    if " in block (" in str(located):
                        raise
                except KernelError:
                    pass
            raise self._oob(info, args, names,
                            " (found in the bytes beside the array after the launch; run "
                            "again, the write did not fault, so the thread is not known)")
        raise KernelError(f"{self.entry}: {one_line(rep['message'][:2000])}")


class CpuBackend(base.Backend):
    """Compile CUDA C with g++ against the SIMT shim and run it on the CPU."""

    name = "cpu"
    capabilities = base.Capabilities(unsigned_indices=True, host_launches=True,
                                     block_orders=True, warp_orders=True,
                                     hazards=True,
                                     fill=True, block_subsets=True, threaded_builds=True,
                                     sparse_rows=True, reproducible=True)

    @classmethod
    def own_parts(cls) -> list:
        return [("the sandbox helper", sandbox_helper_built, sandbox_helper)]

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
        ("end", "start", "both"), flags (extra g++ flags), arch (the __CUDA_ARCH__ presented:
        sm_90 by default), hosts (entries that are host functions: a project's own launcher,
        whose <<<...>>> and cudaLaunchKernelEx launches run in order), hazards (the hazard
        build made beside the plain one, not when a launch first asks for it)."""
        options = dict(options or {})
        for k in options:
            if k not in OPTIONS + ("fmad",):
                raise invalid("options", k, f"one of {', '.join(OPTIONS)}")
        if options.get("fmad"):
            raise invalid("options.fmad", True, "False on the cpu backend (it never contracts "
                          "a*b+c, like nvcc --fmad=false)", "use the cuda backend for --fmad")
        src = base.load_source(source, include_dirs)
        canon = [base.parse_entry(e) for e in entries]
        arch = base.parse_arch(options.get("arch"))
        flags = tuple(options.get("flags", ()))
        # the hazard run's build of the same text (HAZARD_FLAGS): made when a launch first asks,
        # or (hazards=True: a check, which will) beside the plain build, on another core
        instrumented = _Once(lambda: build(src, canon, defines, flags + HAZARD_FLAGS, arch,
                                           options.get("hosts", ())))
        if options.get("hazards"):
            threading.Thread(target=_quietly, args=(instrumented,), daemon=True,
                             name="normcheck-hazard-build").start()
        mod = build(src, canon, defines, flags, arch, options.get("hosts", ()))
        return {e: CpuKernel(mod, c, options, instrumented) for e, c in zip(entries, canon)}

    def provenance(self, options=None) -> dict:
        cxx, version = _compiler()
        st = WORKERS.any().sandbox_state() or {}
        arch = base.parse_arch((options or {}).get("arch"))
        return {"backend": "cpu", "compiler": version.split(" Copyright")[0],
                "flags": f"-std={DEFAULT_STD} " + " ".join(_CXX_FLAGS) + " (a file that "
                         "includes PyTorch's headers: the standard they demand, C++20 from "
                         "torch 2.14)", "fmad": False,
                "arch": f"sm_{arch // 10} (__CUDA_ARCH__={arch}, __CUDACC__ and nvcc "
                        f"{'.'.join(map(str, cuda_version()))} presented)",
                "device": platform.processor() or platform.machine(),
                "sandbox": st.get("detail", "?"), "lifetime": confine.describe(),
                "cpu_vs_gpu": CPU_VS_GPU}
