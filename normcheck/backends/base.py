"""What every backend shares: the interface, sources, defines, kernel signatures, argument
checking and launch geometry (the build cache is normcheck.backends.cache).

A backend (:class:`Backend`) turns CUDA C into callable kernels::

    kern = backend.compile(source, "rms_norm<__half>", defines={"ENABLE_FP32": None})
    kern(grid, block, args, shared_mem=0)

``source`` is a path or a string of CUDA C; ``args`` are numpy arrays (in/out: after the call
they hold what the kernel wrote), numpy scalars (np.int32, np.float32 ...; Python ints and floats
are converted to the parameter's type) or ``None`` for a null pointer.

Builds are cached under one directory for every backend (``cache.cache_root``):
``$NORMCHECK_CACHE``, else ``$XDG_CACHE_HOME/normcheck``, else ``~/.cache/normcheck``; each entry
is keyed by the preprocessed source (so the content of every included file counts), the
compiler and its version, the flags and the shim, and is written under a temporary name and
renamed into place, so concurrent builds never see half an entry.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from normcheck import formats
from normcheck.errors import BackendUnavailable, invalid
from normcheck.files import SOURCE_BYTES, read_limited

__all__ = ["split_entry", "entry_name", "Backend", "Param", "Source", "load_source", "define_flags", "check_defines",
           "parse_signature", "check_args", "check_launch", "dim3", "scalar_dtype",
           "element_dtype", "parse_entry", "LIMITS", "parse_arch", "DEFAULT_ARCH", "StructArg",
           "SparseRows", "Capabilities", "Kernel"]

# An entry (a kernel's name, pasted into the launcher normcheck generates) is parsed, never
# matched: a qualified C++ name with template arguments made of names, integers and types.
_ENTRY_TOKEN = re.compile(r"\s*(?:(::)|([<>,*&()])|(-?(?:0[xX][0-9a-fA-F]+|\d+)[uUlL]{0,3})|"
                          r"([A-Za-z_]\w*))")
_CV = ("const", "volatile")
_BUILTIN = ("unsigned", "signed", "short", "long", "int", "char", "float", "double", "bool",
            "void")
ENTRY_LIMITS = {"length": 512, "depth": 8}


def parse_entry(entry) -> str:
    """``entry`` checked against the grammar of a kernel name and returned in a canonical
    spelling: ``[::]name(::name)*[<arg, ...>][(type, ...)]``, each template argument an integer
    (``256``, ``-1``, ``8u``), ``true``/``false``, or a type (a qualified name with its own
    template arguments, a builtin such as ``unsigned int``, cv-qualifiers, ``*`` and ``&``); the
    parameter types, last, pick one of an overloaded kernel's (``ln(float*, const float*)``).
    Anything else -- a parenthesis elsewhere, a brace, a quote, a semicolon, a newline -- is an
    InvalidArgument naming the first character that does not fit."""
    if not isinstance(entry, str):
        raise invalid("entry", entry, "a kernel name (a string)", "e.g. --entry rms_norm<__half>")
    if len(entry) > ENTRY_LIMITS["length"]:
        raise invalid("entry", entry, f"a kernel name of at most {ENTRY_LIMITS['length']} "
                      "characters")
    toks, pos = [], 0
    text = entry.strip()
    while pos < len(text):
        m = _ENTRY_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            bad = text[pos:].lstrip()[:1]
            raise invalid("entry", entry, "a C++ kernel name: names, ::, and template arguments "
                          "made of names, integers and types", f"{bad!r} at character "
                          f"{len(text) - len(text[pos:].lstrip()) + 1} does not belong in one; "
                          "give e.g. rms_norm_kernel<c10::Half, 8>")
        toks.append(m.group(0).strip())
        pos = m.end()
    out, i = _Entry(toks, entry).parse()
    return out


def entry_name(entry: str) -> str:
    """The kernel's bare name of an entry: ``vllm::rms<c10::Half, 8>`` -> ``rms``,
    ``ln(float*, int)`` -> ``ln``."""
    return split_entry(entry)[0].split("<", 1)[0].split("::")[-1].strip()


def split_entry(entry: str) -> tuple[str, str | None]:
    """(the kernel's name, its parameter types or None) of a canonical entry (parse_entry)."""
    if entry.endswith(")") and "(" in entry:
        i = entry.index("(")
        return entry[:i], entry[i + 1:-1]
    return entry, None


class _Entry:
    """A recursive-descent parser of :func:`parse_entry`'s grammar (depth-limited)."""

    def __init__(self, toks, original):
        self.t, self.i, self.original = toks, 0, original

    def fail(self, what):
        found = self.t[self.i] if self.i < len(self.t) else "the end"
        return invalid("entry", self.original, f"a C++ kernel name ({what}, found {found!r})",
                       "give e.g. rms_norm_kernel<c10::Half, 8>")

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self, tok=None):
        if tok is not None and self.peek() != tok:
            raise self.fail(f"expected {tok!r}")
        self.i += 1
        return self.t[self.i - 1]

    def ident(self):
        t = self.peek()
        if t is None or not (t[0].isalpha() or t[0] == "_"):
            raise self.fail("expected a name")
        return self.take()

    def qname(self, depth):
        parts = []
        if self.peek() == "::":
            parts.append(self.take())
        parts.append(self.ident())
        while self.peek() == "::":
            parts.append(self.take())
            parts.append(self.ident())
        s = "".join(parts)
        if self.peek() == "<":
            s += self.targs(depth + 1)
        return s

    def targs(self, depth):
        if depth > ENTRY_LIMITS["depth"]:
            raise self.fail(f"template arguments nested at most {ENTRY_LIMITS['depth']} deep")
        self.take("<")
        args = []
        if self.peek() != ">":
            args.append(self.targ(depth))
            while self.peek() == ",":
                self.take()
                args.append(self.targ(depth))
        self.take(">")
        return "<" + ", ".join(args) + ">"

    def targ(self, depth):
        t = self.peek()
        if t is None:
            raise self.fail("expected a template argument")
        if t[0].isdigit() or t[0] == "-":
            return self.take()
        if t in ("true", "false"):
            return self.take()
        return self.ptype(depth)

    def ptype(self, depth):
        """A type: cv-qualifiers, a builtin or a qualified name, then cv, * and &."""
        words = []
        while self.peek() in _CV:
            words.append(self.take())
        if self.peek() in _BUILTIN:
            while self.peek() in _BUILTIN:
                words.append(self.take())
        else:
            words.append(self.qname(depth))
        while self.peek() in _CV + ("*", "&"):
            words.append(self.take())
        return " ".join(words).replace(" *", "*").replace(" &", "&")

    def parse(self):
        name = self.qname(0)
        if self.peek() == "(":  # the parameter types of one overload
            self.take("(")
            params = []
            if self.peek() != ")":
                params.append(self.ptype(1))
                while self.peek() == ",":
                    self.take()
                    params.append(self.ptype(1))
            self.take(")")
            name += "(" + ", ".join(params) + ")"
        if self.i != len(self.t):
            raise self.fail("nothing after the name and its template arguments")
        return name, self.i
_IDENT = re.compile(r"^[A-Za-z_]\w{0,127}$")
# A macro's value is pasted into the user's code by the preprocessor: the alphabet of
# expressions and type names only, so a value from a spec or a case file can add no declaration,
# statement or string of its own.
_DEFINE_VALUE = re.compile(r"[A-Za-z0-9_.:+\-*/%<>=!&|^~?,()\[\] ]{0,200}")

#: CUDA's launch limits (compute capability 9.0), checked before any launch on any backend.
LIMITS = {
    "grid": (2**31 - 1, 65535, 65535),
    "block": (1024, 1024, 64),
    "threads_per_block": 1024,
    "shared_mem": 227 * 1024,  # dynamic shared memory a block may ask for (opt-in maximum)
}


# ------------------------------------------------------------------------------------------------
# The interface
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond compiling and launching: the checks and the report ask
    these, never a backend's name (a second GPU library is a backend with its capabilities)."""

    host_launches: bool = False  # a spec's host entry (a launcher function) runs
    block_orders: bool = False   # launches take schedule=, seed=, workers=: the order blocks run in
    warp_orders: bool = False    # and schedule="warps": a block's warps alone in another order
    fill: bool = False           # launches take fill=: undefined values made of another byte
    block_subsets: bool = False  # launches take blocks=(mask, value): a part of the grid
    sparse_rows: bool = False    # arrays may be SparseRows (the large-index run)
    device_timings: bool = False  # a launch's time is a device's (the report's bandwidth)
    hardware_rsqrt: bool = False  # rsqrtf is the hardware approximation, not 1/sqrtf
    threaded_builds: bool = False  # its kernels may be built on threads (ahead, in parallel)
    # launches take hazards=True (the hazard build: races on shared memory by happens-before,
    # its exact bounds) and max_dyn_smem= (the launcher's shared-memory opt-in, enforced)
    hazards: bool = False
    language: str = "cuda"       # the kernels it runs: "cuda" (C) or "triton" (.py)
    # its kernels' indices may be C's unsigned 32-bit products (blockIdx.x × cols): the check
    # makes a second large-index run past 2^32 elements (a Triton program id is a signed int32)
    unsigned_indices: bool = False
    # a launch's outputs depend only on the build and the inputs (an emulator's, the same on
    # every machine): the yardstick's figures of a built-in may be kept in the cache
    reproducible: bool = False


class Kernel(abc.ABC):
    """A compiled entry, the one call every backend's kernels take:

    ``kernel(grid, block, args, shared_mem=0, *, names=None, timeout=None, guard=None,
    schedule=None, workers=None, seed=0, fill=0xFF, blocks=None, hazards=False,
    max_dyn_smem=0)`` -> the launch's note (a string it noted without failing) or None.
    ``names`` label the arguments in errors, ``timeout`` bounds the launch, ``guard`` which side
    of each array lies against an inaccessible margin; ``schedule``/``workers``/``seed`` (the
    order blocks run in), ``fill`` (the byte undefined values are made of), ``blocks`` (a part
    of the grid) and ``hazards`` (the hazard build: races, exact shared-memory bounds) are
    honoured where the backend's :class:`Capabilities` say so, and refused (:meth:`refuse`)
    where they do not; ``max_dyn_smem`` is the dynamic shared memory the launcher opted in to
    (cudaFuncSetAttribute's MaxDynamicSharedMemorySize; 0: none, 48 KiB)."""

    entry: str = "?"
    capabilities: Capabilities = Capabilities()

    @abc.abstractmethod
    def __call__(self, grid, block, args, shared_mem=0, *, names=None, timeout=None,
                 guard=None, schedule=None, workers=None, seed=0, fill=0xFF, blocks=None,
                 hazards=False, max_dyn_smem=0):
        """Launch; the launch's note or None."""

    def refuse(self, schedule=None, workers=None, seed=0, fill=0xFF, blocks=None,
               hazards=False):
        """An InvalidArgument for a launch option this backend's capabilities lack."""
        caps = self.capabilities
        asked = (("schedule", schedule is not None, caps.block_orders),
                 ("fill", fill != 0xFF, caps.fill),
                 ("blocks", blocks is not None, caps.block_subsets),
                 ("hazards", bool(hazards), caps.hazards))
        for name, used, can in asked:
            if used and not can:
                raise invalid(name, {"schedule": schedule, "fill": fill, "blocks": blocks,
                                     "hazards": hazards}[name],
                              "a launch option this backend has", "run it on the cpu backend")


class Backend(abc.ABC):
    """Compile CUDA C and launch it on numpy arrays.  Subclasses implement
    :meth:`compile_many`, :meth:`provenance` and :meth:`unavailable_reason`, and say their
    :attr:`capabilities`."""

    name: str = "?"
    capabilities: Capabilities = Capabilities()

    @classmethod
    def own_parts(cls) -> list:
        """[(what, built(), build())] of the binaries of normcheck's own this backend needs
        (built ahead, beside the user's kernel: normcheck.parts)."""
        return []

    @classmethod
    @abc.abstractmethod
    def unavailable_reason(cls) -> str | None:
        """Why this backend cannot run here, or None when it can."""

    @abc.abstractmethod
    def compile_many(self, source, entries, *, defines=None, options=None,
                     include_dirs=()) -> dict:
        """Build several entries of one source into one module; {entry: kernel}."""

    @abc.abstractmethod
    def provenance(self, options=None) -> dict:
        """What produced a result: backend, compiler and version, flags, fmad, device, and how
        the backend differs from a GPU.  ``options`` are the compile options used."""

    def __init__(self):
        """A backend that cannot run here refuses to be made, saying why."""
        reason = self.unavailable_reason()
        if reason:
            raise BackendUnavailable(f"the {self.name} backend cannot run here: {reason}")

    def compile(self, source, entry, *, defines=None, options=None, include_dirs=()):
        """Build one entry of ``source`` (a path or CUDA C text)."""
        return self.compile_many(source, [entry], defines=defines, options=options,
                                 include_dirs=include_dirs)[entry]

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"


# ------------------------------------------------------------------------------------------------
# Sources and defines
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Source:
    """A kernel source: its text, where it came from (a path, or ``<source>``), and the folders
    its ``#include "..."`` lines are searched in."""

    text: str
    origin: str
    path: Path | None = None
    include_dirs: tuple = field(default=())


def load_source(source, include_dirs=()) -> Source:
    """A path (str or Path) or a string of CUDA C; a path's folder is searched for includes."""
    incs = tuple(str(Path(d).resolve()) for d in include_dirs)
    for d in incs:
        if not Path(d).is_dir():
            raise invalid("include_dirs", d, "a folder", "check the path")
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                    and source.rstrip().endswith((".cu", ".cuh", ".cpp", ".cc",
                                                                  ".h", ".hpp"))):
        path = Path(source)
        if path.is_dir():
            raise invalid("source", str(source), "a .cu file, not a folder",
                          "name the file that holds the kernel")
        raw = read_limited(path, "source", SOURCE_BYTES, "a readable .cu file")
        if b"\0" in raw:
            raise invalid("source", str(source), "a text file of CUDA C (it holds NUL bytes)",
                          "pass the .cu source, not a compiled object")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise invalid("source", str(source), f"UTF-8 text (byte {e.start} is not)",
                          "save the file as UTF-8") from None
        path = path.resolve()
        return Source(text, str(path), path, (str(path.parent),) + incs)
    if isinstance(source, str):
        if "\0" in source:
            raise invalid("source", "<text>", "CUDA C text without NUL characters")
        return Source(source, "<source>", None, incs)
    raise invalid("source", source, "a path or a string of CUDA C")


def check_defines(defines) -> dict:
    """Validate ``{NAME: value or None}``: C identifiers, values that fit on a command line."""
    out = {}
    for k, v in dict(defines or {}).items():
        if not isinstance(k, str) or not _IDENT.match(k):
            raise invalid("defines", k, "a C identifier as the macro name",
                          "e.g. -D ENABLE_FP32 or -D BLOCK=256")
        if v is not None:
            if isinstance(v, bool):
                v = int(v)
            if not isinstance(v, (str, int, float)) or not _DEFINE_VALUE.fullmatch(str(v)):
                raise invalid(f"defines.{k}", v, "a value made of names, numbers and operators "
                              "(no quotes, braces, semicolons, # or backslashes; at most 200 "
                              "characters)", "e.g. -D floatX=float or -D BLOCK=256")
            v = str(v)
        out[k] = v
    return out


def define_flags(defines) -> list[str]:
    """Compiler flags for ``{NAME: value or None}``, in a stable order."""
    return [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in sorted(check_defines(
        defines).items())]


# ------------------------------------------------------------------------------------------------
# The architecture a kernel is compiled for
# ------------------------------------------------------------------------------------------------
#: __CUDA_ARCH__ when nothing says otherwise: sm_90 (Hopper, the GPU of normcheck's device runs).
DEFAULT_ARCH = 900
_ARCH = re.compile(r"^(?:sm|compute)?_?(\d{2,4})[af]?$")


def parse_arch(value) -> int:
    """An architecture as __CUDA_ARCH__ spells it (900) from 900, 90, "90", "sm_90", "sm_90a",
    "compute_80" or "9.0"; None gives :data:`DEFAULT_ARCH`."""
    if value is None:
        return DEFAULT_ARCH
    text = str(value).strip().lower()
    m = re.fullmatch(r"(\d+)\.(\d)", text)
    if m:
        text = m.group(1) + m.group(2)
    m = _ARCH.match(text)
    if not m or isinstance(value, bool):
        raise invalid("arch", value, "a GPU architecture such as sm_80, sm_90 or 900",
                      "e.g. --arch sm_80 for code under #if __CUDA_ARCH__ >= 800")
    n = int(m.group(1))
    named = text.startswith(("sm", "compute"))  # sm_100 is __CUDA_ARCH__ 1000
    arch = n * 10 if named or n < 300 else n
    if not 300 <= arch <= 1300:
        raise invalid("arch", value, "an architecture from sm_30 to sm_130")
    return arch


# ------------------------------------------------------------------------------------------------
# Signatures and arguments
# ------------------------------------------------------------------------------------------------
# C scalar types -> numpy dtype
_SCALARS = {
    "int": np.int32, "signed int": np.int32, "int32_t": np.int32,
    "unsigned int": np.uint32, "unsigned": np.uint32, "uint32_t": np.uint32,
    "long": np.int64, "long int": np.int64, "long long": np.int64, "long long int": np.int64,
    "int64_t": np.int64, "ssize_t": np.int64, "ptrdiff_t": np.int64,
    "long unsigned int": np.uint64, "unsigned long": np.uint64, "long long unsigned int": np.uint64,
    "unsigned long long": np.uint64, "uint64_t": np.uint64, "size_t": np.uint64,
    "short int": np.int16, "short": np.int16, "short unsigned int": np.uint16,
    "char": np.int8, "signed char": np.int8, "unsigned char": np.uint8, "bool": np.bool_,
    "float": np.float32, "double": np.float64,
    "__half": np.float16, "half": np.float16, "__nv_bfloat16": "bfloat16",
}
# pointee types whose element dtype must match exactly
_ELEMENTS = {
    "float": np.float32, "double": np.float64, "__half": np.float16, "half": np.float16,
    "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16",
    "c10::Half": np.float16, "c10::BFloat16": "bfloat16",
}


@dataclass(frozen=True)
class Param:
    """One kernel parameter as the compiler sees it."""

    ctype: str          # e.g. "const __half*"
    size: int           # sizeof the parameter
    pointee: int        # sizeof *param for pointers (0 for void* and scalars)

    @property
    def is_pointer(self) -> bool:
        return self.ctype.rstrip().endswith("*")

    @property
    def base(self) -> str:
        """The type without cv-qualifiers, restrict, pointer and reference."""
        t = self.ctype.replace("*", " ").replace("&", " ")
        words = [w for w in t.split() if w not in ("const", "volatile", "__restrict", "__restrict__",
                                                   "restrict")]
        return " ".join(words)


def parse_signature(raw: str) -> list[Param]:
    """Decode the shim's signature string (records of name, size, pointee size)."""
    params = []
    for rec in raw.split("\x1e"):
        if not rec:
            continue
        name, size, pointee = rec.split("\x1f")
        m = re.search(r"\[with T = (.*?)(?:; [A-Za-z_]\w* = .*)?\]$", name)
        params.append(Param(m.group(1).strip() if m else name, int(size), int(pointee)))
    return params


def scalar_dtype(p: Param):
    """The numpy type of a scalar parameter, or None (a struct, an enum, a pointer)."""
    return formats.np_type(_SCALARS.get(p.base))


def element_dtype(p: Param):
    """The numpy type of the elements a pointer parameter reads (float, __half, bf16 ...), or
    None where any element size that fits goes (void*, integers, fp8 codes)."""
    return formats.np_type(_ELEMENTS.get(p.base)) if p.is_pointer else None


def dim3(value, name: str) -> tuple[int, int, int]:
    """Normalise a grid or block given as an int or a tuple of up to 3 positive ints."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (int(value),)
    try:
        t = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise invalid(name, value, "an int or a tuple of up to three positive ints",
                      f"e.g. {name}=(rows,) or {name}=256") from None
    if not 1 <= len(t) <= 3 or any(v < 1 for v in t):
        raise invalid(name, value, "one to three positive ints",
                      f"e.g. {name}=(rows,) or {name}=(256,)")
    return t + (1,) * (3 - len(t))


def check_launch(grid, block, shared_mem) -> tuple:
    """(grid, block, shared_mem) normalised and checked against CUDA's limits (:data:`LIMITS`);
    a launch a GPU would refuse is an argument error, never blamed on the kernel."""
    g = dim3(grid, "grid")
    b = dim3(block, "block")
    for name, dims, lim in (("grid", g, LIMITS["grid"]), ("block", b, LIMITS["block"])):
        for axis, v, m in zip("xyz", dims, lim):
            if v > m:
                raise invalid(f"{name}.{axis}", v, f"at most {m} (CUDA's limit)",
                              f"use a smaller {name}")
    if b[0] * b[1] * b[2] > LIMITS["threads_per_block"]:
        raise invalid("block", b, "at most 1024 threads per block (the CUDA limit)",
                      "use a smaller block")
    try:
        shm = int(shared_mem)
    except (TypeError, ValueError):
        raise invalid("shared_mem", shared_mem, "a byte count") from None
    if shm < 0 or shm > LIMITS["shared_mem"]:
        raise invalid("shared_mem", shm, f"0 to {LIMITS['shared_mem']} bytes (227 KiB: the "
                      "dynamic shared memory a GPU block may have)",
                      "ask for less shared memory")
    return g, b, shm


@dataclass
class StructArg:
    """A struct passed by value whose fields include pointers to arrays (a params struct, as
    TransformerEngine and TensorRT-LLM pass): ``data`` the struct's bytes with the pointer fields
    zero, ``pointers`` [(byte offset, numpy array, field name)] -- each array is placed by the
    backend like an argument array and its address written at the offset."""

    data: bytes
    pointers: list = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return len(self.data)


@dataclass
class SparseRows:
    """A row buffer of ``rows`` rows of which only the last ones exist: ``data`` holds rows
    ``lo`` .. ``rows - 1`` ([rows - lo, pitch]); the others are pages no one writes or reads
    unless the kernel does (the large-index run: a launch of 2^31 elements whose last blocks
    run, in bounded memory).  A backend that places arrays itself (the cpu backend) maps it
    whole, sparse, with an inaccessible margin of 2^31 elements below it, where a 32-bit index
    that wrapped lands."""

    data: np.ndarray
    rows: int
    lo: int
    #: a persistent grid's walk: its programs read (zeros) and write the rows before ``lo`` on
    #: the way to theirs -- an executor that tracks accesses lets them (the cpu backend's
    #: pages hold them anyway)
    walk: bool = False

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def pitch(self) -> int:
        return int(self.data.shape[1])

    @property
    def nbytes(self) -> int:
        return self.rows * self.pitch * self.data.dtype.itemsize

    @property
    def size(self) -> int:
        return self.rows * self.pitch

    @property
    def window_offset(self) -> int:
        """The byte offset of row ``lo``."""
        return self.lo * self.pitch * self.data.dtype.itemsize


def check_args(entry: str, params: list[Param], args, names=None) -> list:
    """Check args against the kernel's parameters; returns them with Python numbers converted to
    numpy scalars of the parameter types.  ``None`` passes a null pointer.  Raises
    InvalidArgument naming the parameter."""
    args = list(args)
    if len(args) != len(params):
        sig = ", ".join(p.ctype for p in params)
        raise invalid("args", f"<{len(args)} arguments>",
                      f"{len(params)} arguments for {entry}({sig})",
                      "pass one value per kernel parameter, in order")
    out = []
    for i, (a, p) in enumerate(zip(args, params)):
        label = f"args[{i}]" + (f" ({names[i]})" if names and i < len(names) else "")
        if p.is_pointer:
            if a is None:
                out.append(None)
                continue
            if isinstance(a, SparseRows):
                want = formats.np_type(_ELEMENTS.get(p.base))
                if want is not None and a.dtype != np.dtype(want):
                    raise invalid(f"{label}.dtype", str(a.dtype),
                                  f"{np.dtype(want).name} for parameter `{p.ctype}`")
                out.append(a)
                continue
            if not isinstance(a, np.ndarray):
                raise invalid(label, a, f"a numpy array (or None) for parameter `{p.ctype}`",
                              "pass the buffer as a numpy array")
            want = formats.np_type(_ELEMENTS.get(p.base))
            if want is not None and a.dtype != np.dtype(want):
                raise invalid(f"{label}.dtype", str(a.dtype),
                              f"{np.dtype(want).name} for parameter `{p.ctype}`",
                              f"convert with .astype({np.dtype(want).name})")
            if want is None and p.pointee and p.base in _SCALARS and \
                    a.dtype.itemsize != p.pointee:
                raise invalid(f"{label}.dtype", str(a.dtype),
                              f"{p.pointee}-byte elements for parameter `{p.ctype}`",
                              "pass an array of the parameter's element type")
            if not a.flags.c_contiguous:
                raise invalid(f"{label}", a, "a C-contiguous array",
                              "use np.ascontiguousarray(...)")
            out.append(a)
        else:
            dt = scalar_dtype(p)
            if dt is None:
                if isinstance(a, (np.ndarray, np.generic, StructArg)) and a.nbytes == p.size:
                    out.append(a)  # a struct or an enum passed by value, as its bytes
                    continue
                if isinstance(a, StructArg):
                    raise invalid(label, f"<struct of {a.nbytes} bytes>",
                                  f"a struct of {p.size} bytes for parameter `{p.ctype}`",
                                  "give the spec's struct its size (size = ...) or the fields "
                                  "it lacks")
                raise invalid(label, a, f"a value of `{p.ctype}` ({p.size} bytes)",
                              "pass structs by value as a numpy array of exactly that many bytes")
            if isinstance(a, np.generic):
                if a.dtype != np.dtype(dt):
                    raise invalid(label, a, f"np.{np.dtype(dt).name} for parameter `{p.ctype}`",
                                  f"wrap it as np.{np.dtype(dt).name}(...)")
                out.append(a)
            elif isinstance(a, (bool, int, float)) and not isinstance(a, np.ndarray):
                with np.errstate(over="raise", invalid="raise"):
                    try:
                        v = np.array(a).astype(dt)[()]
                    except (FloatingPointError, OverflowError):
                        raise invalid(label, a, f"a value that fits `{p.ctype}`") from None
                if isinstance(a, int) and not isinstance(a, bool) and int(v) != a:
                    raise invalid(label, a, f"a value that fits `{p.ctype}`",
                                  "the value wraps around in the parameter's type")
                out.append(v)
            else:
                raise invalid(label, a, f"a scalar for parameter `{p.ctype}`",
                              f"pass np.{np.dtype(dt).name}(...)")
    return out
