"""Kernel specs: how to call a kernel that does not follow the default ABI.

Real kernels (vLLM, FlashInfer, Apex, PyTorch, llm.c, ggml) are templates with strides, extra
outputs, in-place buffers and several launches.  A spec, in TOML, says what each argument is and
how to launch -- one launch::

    source = "rms_norm.cu"                # relative to the spec; or give the .cu on the command line
    entry = "rms_norm_kernel<__half>"     # a template instantiation (or a plain name)
    norm = "rmsnorm"                      # a name of normcheck.norms.FLAGS: layernorm, rmsnorm, gemma_rmsnorm, add_*
    dtype = "fp16"                        # every role's format (unless said otherwise below)
    out_dtype = "fp16"                    # y's format when it differs from x's
    dtypes = { x = "e4m3", gamma = "fp32" }  # a role's own: x, residual, h, gamma, beta, y,
                                          # mean, rstd (x: fp32/fp16/bf16/e4m3; others storage)
    convention = "stored"                 # fused kernels: normalise the "exact" or the "stored" sum
    reference = "exact"                   # or "hf": Hugging Face's Llama RMSNorm (x̂ rounded, then ·γ)
    eps = 1e-6                            # only when ε is fixed inside the kernel
    cols = [1, 8192]                      # the widths the kernel supports ...
    cols_multiple_of = 8                  # ... and a multiple they must be of
    defines = { ENABLE_FP32 = 1 }         # -D for the compiler (also -D NAME=VALUE on the CLI)
    pitch_multiple_of = 8                 # the row pitches the launcher accepts (default any)
    pitch_why = "ops.cu:88 TORCH_CHECK(x.stride(0) % 8 == 0)"  # ... and the line that says so
    fast_math = true                      # the project builds with --use_fast_math: subnormals
                                          # flushed to zero as the GPU does (CLI: --fast-math)
    include = ["../include"]              # folders searched by #include, relative to the spec

    [launch]                              # expressions of rows and cols
    grid = "rows"
    block = "min(1024, cols)"             # or "32, 4" for a 2-D block
    shared_mem = "0"
    shared_mem_opt_in = "shared_mem"      # what the launcher gives cudaFuncSetAttribute(kernel,
                                          # cudaFuncAttributeMaxDynamicSharedMemorySize, n):
                                          # without it a launch may have 48 KiB, as on a GPU

    [[args]]                              # one table per kernel parameter, in order
    role = "output"                       # y
    stride = "cols"                       # row pitch in elements (default cols)
    [[args]]
    role = "input"                        # x
    [[args]]
    role = "const"                        # a value: `value` (an expression) of `type`
    value = "cols"
    type = "int64"

or several, run in order on the same buffers (a role is the same buffer in every launch)::

    [[launch]]
    entry = "mean_kernel"
    grid = "rows"
    block = "256"
    shared_mem = "256 * 4"
    [[launch.args]]
    role = "mean"
    ...
    [[launch]]
    entry = "normalization_kernel"
    ...

Roles (:data:`ROLES`): output (y), input (x), residual (x's partner in a fused add), h (the fused
sum, written), gamma, beta, mean and rstd (per-row float32 outputs unless ``dtype`` says
otherwise), scale, scales and amax (a quantised output's: the static scale -- a ``float*`` of one
value, or the value itself with ``type = "float32"`` --, the scales it writes, the amax it writes;
they need a ``quant`` table: ``quant = { contract = "vllm", granularity = "per_token", format =
"e4m3" }`` with any field of normcheck.quant.contract), scratch (an intermediate that is not
judged: ``name``, ``dtype``, ``size`` in elements; the same name is the same buffer; ``side``
is the same, for an output the kernel writes beside y that no check judges), dy, dx,
dgamma, dbeta (a backward kernel's), dh and d_residual (a fused add's backward: the residual
stream's gradient in and out), y (the forward's output, read by a memory-efficient backward instead
of x), null (a null pointer), eps (the float ε), rows, cols, const, stride (a row pitch in
elements: the pitch of the row buffers ``of`` names -- default input, output, residual, h --
which is their ``stride`` expression, else cols; such buffers are also run with padded rows,
normcheck.check.hazards). ``role = ["input", "output"]``
is one buffer holding x on entry and y on exit (likewise ``["residual", "h"]``). No ``gamma`` role:
the exact function has γ = 1; no ``beta``: β = 0 (an affine-free norm). Output and scratch buffers
start as a NaN poison; ``fill = "zero"`` starts them at zero (for kernels that accumulate into
them). Scalar roles take ``type`` (int32 by default; float32 for eps; float16 / half and bfloat16
for a kernel taking ε or a constant in a storage format, rounded to it). Expressions use rows,
cols, integers, + - * // % ( ), min, max, ceil_div and next_pow2 (the least power of two >= its
argument); a float scalar's expression divides as a real number (``value = "1 / cols"`` with
``type = "float32"``).

A Triton kernel is a ``source`` ending in ``.py`` and ``entry`` its ``@triton.jit`` function;
its ``tl.constexpr`` parameters are ``[[args]]`` with ``role = "const"`` and a ``value``
(``value = "next_pow2(cols)"``), a pointer left out (``role = "null"``) is passed as None,
``[launch] num_warps`` (an expression, default: block / 32) is passed through, and ``grid`` is
the programs (``"rows"``, or ``"rows, 2"``)::

    source = "rms_norm.py"
    entry = "_rms_norm_fwd_kernel"
    [launch]
    grid = "rows"
    num_warps = "4"
    [[args]]
    role = "output"
    [[args]]
    role = "stride"                     # the row pitch of the buffers it names (default all)
    ...
    [[args]]
    role = "const"
    name = "BLOCK_SIZE"
    value = "next_pow2(cols)"
"""

from __future__ import annotations

import ast
import operator
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from normcheck import formats, norms
from normcheck.errors import SpecError

__all__ = ["ArgSpec", "LaunchSpec", "KernelSpec", "load", "parse", "repository", "default_spec", "QUANT_ROLES",
           "default_backward_spec", "evaluate", "evaluate_dims", "ROLES", "NORMS", "INPLACE",
           "scalar_type", "convert", "parse_dtypes", "DTYPE_ROLES", "ROW_GRADS", "PARAM_GRADS",
           "GRADS", "ROW_OUTPUTS", "STAT_ROLES", "for_dtype"]

NORMS = norms.NORMS
ROW_ROLES = ("output", "input", "residual", "h", "dy", "dx", "dh", "d_residual", "y")
VEC_ROLES = ("gamma", "beta", "dgamma", "dbeta")
STAT_ROLES = ("mean", "rstd")
#: The groups of roles the checks ask about (one home: a role is added here, not re-listed).
ROW_GRADS = ("dx", "d_residual")          # a backward's row outputs: the gradient of x (of h)
PARAM_GRADS = ("dgamma", "dbeta")         # a backward's column sums
GRADS = ROW_GRADS + PARAM_GRADS           # every backward output, in the order judged
ROW_OUTPUTS = ("output", "h") + ROW_GRADS  # the row buffers a kernel writes
#: A quantised output's: the static scale (an input, per tensor; nvfp4's encode scale), the
#: scales a dynamic quantiser writes (per token, group or block), the amax it writes.
QUANT_ROLES = ("scale", "scales", "amax")
BUFFER_ROLES = ROW_ROLES + VEC_ROLES + STAT_ROLES + QUANT_ROLES + ("scratch",)
SCALAR_ROLES = ("eps", "rows", "cols", "const", "stride")
ROLES = BUFFER_ROLES + ("null", "stream") + SCALAR_ROLES + ("struct",)
#: What a field of a struct argument may be: every role but a struct, and padding.
FIELD_ROLES = tuple(r for r in ROLES if r != "struct") + ("pad",)
#: One buffer, two roles: what it holds on entry, what it holds on exit.
INPLACE = {frozenset(("input", "output")): ("input", "output"),
           frozenset(("residual", "h")): ("residual", "h"),
           # the sum written over x (xFormers' fused add: x += y in place, then its norm)
           frozenset(("input", "h")): ("input", "h"),
           frozenset(("dy", "dx")): ("dy", "dx"),
           frozenset(("dh", "d_residual")): ("dh", "d_residual")}
_SCALAR_TYPES = {"bool": np.bool_, "int8": np.int8, "uint8": np.uint8, "int16": np.int16,
                 "uint16": np.uint16, "int32": np.int32, "int": np.int32, "int64": np.int64, "uint32": np.uint32,
                 "uint64": np.uint64, "float32": np.float32, "float": np.float32,
                 "float64": np.float64, "float16": np.float16, "half": np.float16,
                 "bfloat16": "bfloat16"}  # ml_dtypes' (formats.np_type)
#: Scalar types of a float value (a const's value may then be a float expression).
FLOAT_TYPES = ("float32", "float", "float64", "float16", "half", "bfloat16")
_ARG_KEYS = {"role", "dtype", "type", "value", "stride", "name", "size", "fill", "fields",
             "offset", "of"}
_LAUNCH_KEYS = {"entry", "grid", "block", "shared_mem", "args", "host", "num_warps",
                "shared_mem_opt_in"}
_TOP_KEYS = {"entry", "norm", "dtype", "out_dtype", "dtypes", "convention", "eps", "cols",
             "cols_multiple_of", "launch", "args", "source", "defines", "include", "reference",
             "backward", "stats", "arch", "quant", "deterministic", "max_elements",
             "fast_math", "pitch_multiple_of", "pitch_why", "types"}


@dataclass
class ArgSpec:
    role: str                    # the role, or "input+output" style for an in-place buffer
    dtype: str | None = None     # buffers: a format name
    type: str | None = None      # scalars: int32 | int64 | uint32 | uint64 | float32 | float64
    value: str | None = None     # const: an expression
    stride: str | None = None    # row buffers: row pitch in elements (an expression)
    name: str | None = None
    size: str | None = None      # scratch: elements (an expression)
    fill: str | None = None      # output/scratch buffers: "poison" (default) or "zero"
    roles: tuple = ()            # (entry role, exit role) of an in-place buffer, else (role,)
    fields: list = field(default_factory=list)  # struct: its fields, in order (ArgSpec each)
    offset: int | None = None    # a struct field: its byte offset (default: C layout rules)
    of: tuple = ()               # a stride role: the row buffers whose pitch it is

    def __post_init__(self):
        if not self.roles:
            self.roles = (self.role,)

    @property
    def label(self) -> str:
        return self.name or self.role

    @property
    def key(self) -> str:
        """The buffer this argument names: its role, or scratch:name."""
        return f"scratch:{self.name}" if self.role == "scratch" else self.role


@dataclass
class LaunchSpec:
    args: list
    entry: str | None = None
    grid: str = "rows"
    block: str = "256"
    shared_mem: str = "0"
    host: bool = False    # the entry is a host function that launches the kernels itself
    # the dynamic shared memory the launcher opts in to (cudaFuncSetAttribute's
    # MaxDynamicSharedMemorySize; "shared_mem" for as much as it launches with); None: none,
    # so a launch may have 48 KiB
    shared_mem_opt_in: str | None = None
    num_warps: str | None = None  # a Triton kernel's warps (block = 32 * num_warps threads)


@dataclass
class KernelSpec:
    launches: list
    norm: str | None = None
    dtype: str | None = None
    out_dtype: str | None = None
    dtypes: dict = field(default_factory=dict)  # a role's own format: {role: name}
    convention: str | None = None
    reference: str | None = None
    eps: float | None = None  # fixed inside the kernel
    cols: tuple = (1, 1 << 20)
    cols_multiple_of: int = 1
    # the row pitches the launcher accepts: any (1) unless it checks them -- then the line that
    # does, in pitch_why (#56: a spec line must not narrow a hazard away)
    pitch_multiple_of: int = 1
    pitch_why: str | None = None
    defines: dict = field(default_factory=dict)
    include_dirs: tuple = ()
    backward: bool = False
    stats: str | None = None   # backward: "saved" (mean/rstd given) or "recomputed"
    arch: str | None = None    # the architecture presented (__CUDA_ARCH__), e.g. "sm_80"
    quant: dict | None = None  # a quantised output's contract (normcheck.quant.contract)
    deterministic: bool = True  # false: the output may differ run to run (float atomics)
    #: the most rows × cols the project launches the kernel with (its launcher's own check):
    #: the large-index run (past 2^31 elements) is made only where a launch may be that large
    max_elements: int | None = None
    #: the C++ type each storage format is in the entries ({"bf16": "c10::BFloat16", "fp16":
    #: "c10::Half"}): the instantiation of another format is the entry with the type swapped
    types: dict = field(default_factory=dict)
    #: an op called as its users call it ([op]: call, module, root, output, h), else None
    op: dict | None = None
    source: Path | None = None
    path: Path | None = field(default=None, repr=False)

    @property
    def entry(self) -> str | None:
        return self.launches[0].entry if len(self.launches) == 1 else None

    @property
    def entries(self) -> list[str]:
        return [ln.entry for ln in self.launches]

    @property
    def args(self) -> list:
        """Every argument of every launch, and every field of a struct argument."""
        return [f for ln in self.launches for a in ln.args
                for f in ([a] if a.role != "struct" else [a, *a.fields])]

    def roles(self) -> list[str]:
        out = []
        for a in self.args:
            for r in a.roles:
                if r not in out:
                    out.append(r)
        return out

    def has(self, role) -> bool:
        return role in self.roles()


def _show(value) -> str:
    """repr of a value from a spec, cut short (and safe on a value nested without end)."""
    try:
        text = repr(value)
    except (RecursionError, MemoryError):
        return f"<a {type(value).__name__} nested too deep>"
    return text if len(text) <= 120 else text[:117] + "..."


def _err(where, key, value, expected, fix=None):
    msg = f"{where}: {key + '=' if key else ''}{_show(value)}: expected {expected}"
    return SpecError(msg + (f". {fix}" if fix else ""))


def default_spec(norm, block: int = 256) -> KernelSpec:
    """The kernel ABI of docs/DESIGN.md: (y, x, γ, β, eps, rows, cols), RMSNorm without β, fused kernels with
    (h, y, x, residual, ...) in front; grid = rows, block threads."""
    n = norms.get(norm)
    roles = ["output", "input"]
    if n.fused:
        roles = ["h", "output", "input", "residual"]
    roles.append("gamma")
    if n.centred:
        roles.append("beta")
    roles += ["eps", "rows", "cols"]
    return KernelSpec(launches=[LaunchSpec([ArgSpec(r) for r in roles], block=str(int(block)))],
                      norm=n.name)


def default_triton_spec(norm, constexprs=(), block: int = 256,
                        backward: bool = False) -> KernelSpec:
    """The default ABI of a Triton kernel: the default ABI's (y, x, γ, β, eps, rows, cols) --
    or the backward one's (dx, dy, x, γ, mean, rstd, rows, cols) -- then each ``tl.constexpr``
    parameter, a block size: next_pow2(cols); grid = rows."""
    spec = default_backward_spec(norm, block) if backward else default_spec(norm, block)
    for name in constexprs:
        spec.launches[0].args.append(ArgSpec("const", type="int32", value="next_pow2(cols)",
                                             name=name))
    return spec


def default_backward_spec(norm, block: int = 256) -> KernelSpec:
    """The backward ABI of cuda_src/backward.cu's dx kernels: (dx, dy, x, γ, mean, rstd, rows,
    cols), mean a null pointer for RMSNorm; the statistics are the saved ones."""
    n = norms.get(norm)
    roles = ["dx", "dy", "input", "gamma", "mean" if n.centred else "null", "rstd", "rows",
             "cols"]
    return KernelSpec(launches=[LaunchSpec([ArgSpec(r) for r in roles], block=str(int(block)))],
                      norm=n.name, backward=True, stats="saved")


def load(path, roots=(), base=None) -> KernelSpec:
    """Read and validate a spec file; every problem is a SpecError naming the file.  Its
    ``source`` and ``include`` folders are resolved (links followed; relative to ``base``, by
    default the spec's folder) and must lie beneath the spec's repository (the nearest folder
    above it holding ``.git``), else its own folder, or one of ``roots`` (the folders a user gave
    on the command line, ``-I``): a spec from a pull request cannot make normcheck or the
    compiler read the machine's files."""
    from normcheck.files import read_limited
    from normcheck.errors import InvalidArgument

    path = Path(path)
    if path.is_dir():
        raise SpecError(f"{path}: a folder, not a spec file; give the .toml file")
    if not path.exists():
        raise SpecError(f"{path}: no such spec file")
    try:
        raw = read_limited(path, "spec", SPEC_BYTES, "a TOML spec file")
    except InvalidArgument as e:
        raise SpecError(str(e)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a text file; a spec is TOML (see normcheck.spec)") from None
    if _nesting(text) > SPEC_DEPTH or _dotted_depth(text) > SPEC_DEPTH:
        raise SpecError(f"{path}: arrays, tables or dotted keys nested more than {SPEC_DEPTH} "
                        "deep; a spec needs three levels (see normcheck.spec)")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML ({e}); see normcheck.spec for the format") \
            from None
    except (RecursionError, MemoryError):
        raise SpecError(f"{path}: nested too deep to be a spec (see normcheck.spec)") from None
    spec = parse(data, str(path))
    spec.path = path
    if "source" in data:
        spec.source = _confined(path, "source", data["source"], roots, base)
    spec.include_dirs = tuple(str(_confined(path, "include", d, roots, base))
                              for d in spec.include_dirs)
    if spec.op is not None and spec.op.get("root"):
        spec.op["root"] = str(_confined(path, "op.root", spec.op["root"], roots, base))
    return spec


def repository(folder: Path) -> Path:
    """The repository a folder lies in (the nearest folder at or above it holding ``.git``),
    else the folder itself."""
    folder = Path(folder).resolve()
    for d in (folder, *folder.parents):
        if (d / ".git").exists():
            return d
    return folder


def _confined(spec_path: Path, key: str, value: str, roots, base=None) -> Path:
    """``value`` (relative to ``base``, by default the spec's folder) resolved, links followed;
    a SpecError unless it is beneath the spec's repository (or, outside one, its folder) or one
    of ``roots``."""
    here = spec_path.resolve().parent
    p = (Path(base).resolve() / value if base is not None else here / value).resolve()
    home = repository(here)
    allowed = [home, *(Path(r).resolve() for r in roots)]
    if not any(p == r or r in p.parents for r in allowed):
        extra = f" or beneath {', '.join(str(r) for r in allowed[1:])}" if roots else ""
        what = "repository" if home != here else "folder"
        raise SpecError(
            f"{spec_path}: {key}={value!r} resolves to {p}, outside the spec's {what} "
            f"({home}){extra}; a spec names only files beneath its own repository (the folder "
            f"holding .git) or, outside one, its own folder, so a spec from someone else cannot "
            f"make normcheck read this machine's files.  Move the spec beside its kernel, or "
            f"name the folder yourself on the command line: normcheck check -I "
            f"{p if key == 'include' else p.parent} ...")
    return p


#: A spec file's limits: its size, and how deep its arrays and inline tables nest.
SPEC_BYTES = 1 << 20
SPEC_DEPTH = 16


def _nesting(text: str) -> int:
    """The deepest nesting of [ and { outside strings and comments (an upper bound of what
    tomllib recurses into), measured without recursion."""
    depth = top = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            triple = text.startswith(c * 3, i)
            end = text.find(c * 3 if triple else c, i + (3 if triple else 1))
            while c == '"' and end > 0 and text[end - 1] == "\\" and not triple:
                end = text.find(c, end + 1)
            i = (end + (3 if triple else 1)) if end >= 0 else n
            continue
        if c == "#":
            nl = text.find("\n", i)
            i = nl if nl >= 0 else n
            continue
        if c in "[{":
            depth += 1
            top = max(top, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return top


_KEY_PART = re.compile(r"^\s*(\[\[?[^\]\n]*|[^=\n\"']*=)", re.M)


def _dotted_depth(text: str) -> int:
    """The most dots in a key or a table header (tomllib's time grows with their square)."""
    return max((m.group(1).count(".") for m in _KEY_PART.finditer(text)), default=0)


def _parse_arg(a, w, in_struct=False) -> ArgSpec:
    if not isinstance(a, dict) or "role" not in a:
        raise _err(w, "role", None, f"one of {', '.join(ROLES)}")
    if in_struct and a.get("role") == "pad":
        n = a.get("size")
        if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= 4096:
            raise _err(w, "size", n, "the padding's bytes, 1 to 4096")
        return ArgSpec("pad", size=str(n))
    if in_struct and a.get("role") == "struct":
        raise _err(w, "role", "struct", "a field that is not itself a struct",
                   "flatten the inner struct's fields into the outer one, with offset = ...")
    if "offset" in a and not in_struct:
        raise _err(w, "offset", a["offset"], "no offset outside a struct's fields")
    if "offset" in a and (isinstance(a["offset"], bool) or not isinstance(a["offset"], int) or
                          not 0 <= a["offset"] < 65536):
        raise _err(w, "offset", a["offset"], "a byte offset within the struct")
    if a.get("role") == "struct":
        fl = a.get("fields")
        if not isinstance(fl, list) or not fl or len(fl) > 128:
            raise _err(w, "fields", fl, "a list of [[args.fields]] tables, one per struct member")
        size = a.get("size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or
                                 not 0 < size <= 65536):
            raise _err(w, "size", size, "the struct's sizeof in bytes")
        return ArgSpec("struct", name=a.get("name") if isinstance(a.get("name"), str) else None,
                       size=None if size is None else str(size),
                       fields=[_parse_arg(f, f"{w}.fields[{k}]", True)
                               for k, f in enumerate(fl)])
    if "fields" in a:
        raise _err(w, "fields", "...", "fields only in an argument with role = \"struct\"")
    extra = set(a) - _ARG_KEYS
    if extra:
        k = sorted(extra)[0]
        raise _err(w, k, a[k], f"keys {', '.join(sorted(_ARG_KEYS))}")
    role = a["role"]
    if role == "side":  # a side output the check does not judge (TE's scale_inv, TRT-LLM's
        role = "scratch"  # sum_per_token): a scratch buffer by another name
    if isinstance(role, list):
        pair = INPLACE.get(frozenset(role)) if len(role) == 2 else None
        if pair is None:
            raise _err(w, "role", role, "one role, or an in-place pair: "
                       + ", ".join(str(list(v)) for v in INPLACE.values()))
        roles = pair
        role = "+".join(pair)
    elif role not in ROLES:
        raise _err(w, "role", role, f"one of {', '.join(ROLES)}")
    else:
        roles = (role,)
    if "dtype" in a:
        _check_dtype(w, "dtype", roles[0], a["dtype"])
    if "type" in a and a["type"] not in _SCALAR_TYPES:
        raise _err(w, "type", a["type"], f"one of {', '.join(_SCALAR_TYPES)}")
    if role == "const" and "value" not in a:
        raise _err(w, "value", None, "an expression of rows and cols for a const argument")
    if role == "scratch":
        for k in ("name", "size", "dtype"):
            if k not in a:
                raise _err(w, k, None, "name, size (elements, an expression) and dtype for a "
                           "scratch buffer")
    if "fill" in a and a["fill"] not in ("poison", "zero"):
        raise _err(w, "fill", a["fill"], '"poison" or "zero"')
    for k in ("value", "stride", "size"):
        if k in a:
            check_expression(str(a[k]), f"{w}.{k}")
    out_offset = a.get("offset")
    if "name" in a and not isinstance(a["name"], str):
        raise _err(w, "name", a["name"], "a string")
    of = ()
    if "of" in a:
        if role != "stride":
            raise _err(w, "of", a["of"], "of only on an argument with role = \"stride\"")
        of = tuple(a["of"]) if isinstance(a["of"], list) else (a["of"],)
        bad = [r for r in of if r not in ROW_ROLES]
        if bad or not of:
            raise _err(w, "of", a["of"], f"the row buffer(s) whose pitch it is: some of "
                       f"{', '.join(ROW_ROLES)}", 'e.g. of = "input"')
    elif role == "stride":
        of = ("input", "output", "residual", "h")
    return ArgSpec(role, a.get("dtype"), a.get("type"),
                   None if "value" not in a else str(a["value"]),
                   None if "stride" not in a else str(a["stride"]), a.get("name"),
                   None if "size" not in a else str(a["size"]), a.get("fill"), roles,
                   offset=out_offset, of=of)


def _parse_launch(tab, where, entry=None) -> LaunchSpec:
    args = tab.get("args")
    if not isinstance(args, list) or not args:
        raise _err(where, "args", args, "a list of [[args]] tables, one per kernel parameter")
    ln = LaunchSpec([_parse_arg(a, f"{where}: args[{i}]") for i, a in enumerate(args)],
                    entry=tab.get("entry", entry))
    if "host" in tab:
        if not isinstance(tab["host"], bool):
            raise _err(where, "host", tab["host"], "true or false")
        ln.host = tab["host"]
        if ln.host and any(k in tab for k in ("grid", "block", "shared_mem",
                                             "shared_mem_opt_in")):
            raise _err(where, "grid", tab.get("grid", tab.get("block")), "no grid, block or "
                       "shared_mem with host = true (the host function launches its kernels, "
                       "and calls cudaFuncSetAttribute itself)")
    for k in ("grid", "block", "shared_mem", "num_warps", "shared_mem_opt_in"):
        if k in tab:
            expr = str(tab[k]).replace("shared_mem", f"({ln.shared_mem})") \
                if k == "shared_mem_opt_in" else str(tab[k])
            check_expression(expr, f"{where}: {k}", dims=k in ("grid", "block"))
            setattr(ln, k, expr)
    if ln.entry is not None:
        if not isinstance(ln.entry, str):
            raise _err(where, "entry", ln.entry, "a kernel name")
        from normcheck.backends.base import parse_entry
        from normcheck.errors import InvalidArgument

        try:
            parse_entry(ln.entry)
        except InvalidArgument as e:
            raise SpecError(f"{where}: {e}") from None
    return ln


#: The keys of an op's spec (``[op]``: the project's function called on the rows)
_OP_TOP_KEYS = {"op", "source", "norm", "dtype", "out_dtype", "reference", "cols",
                "convention", "eps"}
_OP_KEYS = {"call", "module", "root", "output", "h"}


def _parse_op(data: dict, where: str) -> KernelSpec:
    """A spec whose ``[op]`` names the project's Python function (normcheck.backends.triton.op):
    ``call`` as its users write it, ``module`` its module's name in its package (imported
    beneath ``root``, or installed), ``output``/``h`` where the results are (an index into what
    it returns, or the name of a tensor it writes in place)."""
    from normcheck.backends.triton.op import TENSORS, parse_call
    from normcheck.errors import InvalidArgument

    for k in data:
        if k not in _OP_TOP_KEYS:
            raise _err(where, k, data[k], f"with [op], one of {', '.join(sorted(_OP_TOP_KEYS))}"
                       " (the op launches its kernels itself: no entry, [launch] or [[args]])")
    op = data["op"]
    if not isinstance(op, dict):
        raise _err(where, "op", op, "a table: [op] call = \"fn(x, weight, eps)\"")
    for k in op:
        if k not in _OP_KEYS:
            raise _err(where, f"op.{k}", op[k], f"one of {', '.join(sorted(_OP_KEYS))}")
    try:
        parse_call(op.get("call"), f"{where}: op.call")
    except InvalidArgument as e:
        raise SpecError(str(e)) from None
    for k in ("module", "root"):
        if k in op and not (isinstance(op[k], str) and op[k].strip()):
            raise _err(where, f"op.{k}", op[k], "a module name" if k == "module" else
                       "a folder (the package's root)")
    if "root" in op and "module" not in op:
        raise _err(where, "op.root", op["root"], "op.module too: the source's module name "
                   "beneath the root (e.g. liger_kernel.ops.rms_norm)")
    for k in ("output", "h"):
        v = op.get(k)
        if v is None:
            continue
        if not ((isinstance(v, int) and not isinstance(v, bool) and -16 <= v < 16) or
                v in TENSORS):
            raise _err(where, f"op.{k}", v, "an index into what the op returns (0, 1, ...), or "
                       f"one of {', '.join(TENSORS)} (a tensor it writes in place)")
    rest = {k: v for k, v in data.items() if k != "op"}
    # the roles' checks of a kernel's spec hold for what the op is given and gives back
    fused = isinstance(rest.get("norm"), str) and rest["norm"] in norms.FLAGS and \
        norms.get(rest["norm"]).fused
    roles = ["output", "input", "eps"] + (["residual", "h"] if fused else [])
    spec = parse({**rest, "args": [{"role": r} for r in roles]}, where)
    spec.launches = []
    spec.op = {"call": op["call"], "module": op.get("module", ""), "root": op.get("root"),
               "output": op.get("output", 0), "h": op.get("h")}
    if spec.norm is not None and norms.get(spec.norm).fused and spec.op["h"] is None:
        raise _err(where, "op.h", None, "where the op leaves h = x + residual (an index into "
                   "what it returns, or the tensor it writes in place)")
    return spec


def op_spec(call: str, source=None, module: str = "", root=None, output=0, h=None,
            norm=None, dtype=None, where: str = "--op") -> KernelSpec:
    """The spec of an op given on the command line (``check --op``) or in a case file: as an
    ``[op]`` table would give it."""
    op = {"call": call, "output": output}
    op.update({k: v for k, v in (("module", module), ("root", str(root) if root else None),
                                 ("h", h)) if v})
    data = {"op": op, **{k: v for k, v in (("norm", norm), ("dtype", dtype)) if v}}
    spec = parse(data, where)
    spec.source = Path(source) if source is not None else None
    return spec


def parse(data: dict, where: str = "spec") -> KernelSpec:
    if "op" in data:
        return _parse_op(data, where)
    for k in data:
        if k not in _TOP_KEYS:
            raise _err(where, k, data[k], f"one of the keys {', '.join(sorted(_TOP_KEYS))}",
                       "remove or rename it")
    launch = data.get("launch")
    if isinstance(launch, list):
        if "args" in data:
            raise _err(where, "args", "...", "[[launch.args]] inside each [[launch]] when there "
                       "are several launches")
        if not launch:
            raise _err(where, "launch", launch, "at least one [[launch]]")
        launches = []
        for i, tab in enumerate(launch):
            w = f"{where}: launch[{i}]"
            if not isinstance(tab, dict):
                raise _err(w, "launch", tab, "a table")
            extra = set(tab) - _LAUNCH_KEYS
            if extra:
                k = sorted(extra)[0]
                raise _err(w, k, tab[k], f"keys {', '.join(sorted(_LAUNCH_KEYS))}")
            if "entry" not in tab:
                raise _err(w, "entry", None, "the kernel this launch runs")
            launches.append(_parse_launch(tab, w))
    else:
        launch = launch if launch is not None else {}
        if not isinstance(launch, dict):
            raise _err(where, "launch", launch, "a [launch] table with grid, block, shared_mem, "
                       "or an array of [[launch]] tables")
        for k in launch:
            if k not in ("grid", "block", "shared_mem", "host", "num_warps",
                         "shared_mem_opt_in"):
                raise _err(where, f"launch.{k}", launch[k], "grid, block, shared_mem, "
                           "shared_mem_opt_in, host or num_warps (a Triton kernel's)")
        launches = [_parse_launch({**launch, "args": data.get("args")}, where,
                                  entry=data.get("entry"))]
    spec = KernelSpec(launches=launches, norm=data.get("norm"), dtype=data.get("dtype"),
                      out_dtype=data.get("out_dtype"), convention=data.get("convention"),
                      reference=data.get("reference"))
    if len(launches) > 1 and "entry" in data:
        raise _err(where, "entry", data["entry"], "an entry in each [[launch]] instead")
    if spec.norm is not None and spec.norm not in norms.FLAGS:
        raise _err(where, "norm", spec.norm, f"one of {', '.join(norms.FLAGS)}")
    for k in ("dtype", "out_dtype"):
        v = getattr(spec, k)
        if v is not None and v not in formats.FORMATS:
            raise _err(where, k, v, "fp32, fp16 or bf16", "an fp8 input is x's own: "
                       "dtypes = { x = \"e4m3\" }" if v in formats.ROWS else None)
    if "dtypes" in data:
        spec.dtypes = parse_dtypes(data["dtypes"], f"{where}: dtypes")
    if spec.convention not in (None, "exact", "stored"):
        raise _err(where, "convention", spec.convention, '"exact" or "stored"')
    if spec.reference not in (None,) + norms.REFERENCES:
        raise _err(where, "reference", spec.reference, '"exact" or "hf"')
    if "eps" in data:
        e = data["eps"]
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 < e < float("inf"):
            raise _err(where, "eps", e, "a positive number (ε fixed inside the kernel)")
        spec.eps = float(np.float32(e))
        if not spec.eps > 0:
            raise _err(where, "eps", e, "a positive float32 (it underflows to 0)")
    if "cols" in data:
        c = data["cols"]
        if not (isinstance(c, list) and len(c) == 2 and all(
                isinstance(v, int) and not isinstance(v, bool) for v in c) and 1 <= c[0] <= c[1]):
            raise _err(where, "cols", c, "[min, max] supported widths, 1 <= min <= max")
        spec.cols = (c[0], c[1])
    if "cols_multiple_of" in data:
        m = data["cols_multiple_of"]
        if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= 4096:
            raise _err(where, "cols_multiple_of", m, "an integer from 1 to 4096")
        spec.cols_multiple_of = m
        lo, hi = spec.cols
        if -(-lo // m) * m > hi:
            raise _err(where, "cols_multiple_of", m, f"a multiple within cols = [{lo}, {hi}]")
    if "defines" in data:
        d = data["defines"]
        if not isinstance(d, dict):
            raise _err(where, "defines", d, "a table { NAME = value }")
        from normcheck.backends.base import check_defines

        spec.defines = check_defines({k: (None if v is True else v) for k, v in d.items()})
    if "pitch_multiple_of" in data or "pitch_why" in data:
        m = data.get("pitch_multiple_of", 1)
        if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= 4096:
            raise _err(where, "pitch_multiple_of", m, "an integer from 1 to 4096")
        why = data.get("pitch_why")
        if m > 1 and not (isinstance(why, str) and why.strip()):
            raise _err(where, "pitch_why", why, "the launcher's line that refuses other row "
                       "pitches (file:line and what it checks): a binding that checks only the "
                       "last dimension accepts any pitch, and the padded-row sweep then pads by "
                       "1 (drop pitch_multiple_of)")
        spec.pitch_multiple_of, spec.pitch_why = m, why
    if "types" in data:
        spec.types = _parse_types(data["types"], spec, where)
    if "fast_math" in data:  # the project builds with --use_fast_math: nvcc's define
        fm = data["fast_math"]
        if not isinstance(fm, bool):
            raise _err(where, "fast_math", fm, "true or false (the project builds with "
                       "--use_fast_math)")
        if fm:
            spec.defines = {**spec.defines, "__USE_FAST_MATH__": "1"}
    if "include" in data:
        inc = data["include"]
        if not (isinstance(inc, list) and all(isinstance(v, str) for v in inc)):
            raise _err(where, "include", inc, "a list of folders")
        spec.include_dirs = tuple(inc)
    if "backward" in data:
        if not isinstance(data["backward"], bool):
            raise _err(where, "backward", data["backward"], "true or false")
        spec.backward = data["backward"]
    if "stats" in data:
        if data["stats"] not in ("saved", "recomputed"):
            raise _err(where, "stats", data["stats"], '"saved" or "recomputed"')
        spec.stats = data["stats"]
    if "arch" in data:
        from normcheck.backends.base import parse_arch
        from normcheck.errors import InvalidArgument

        try:
            parse_arch(data["arch"])
        except InvalidArgument as e:
            raise SpecError(f"{where}: {e}") from None
        spec.arch = str(data["arch"])
    if "quant" in data:
        from normcheck.errors import InvalidArgument
        from normcheck.quant import contract as qcontract

        q = data["quant"]
        if not isinstance(q, dict):
            raise _err(where, "quant", q, "a table of contract fields",
                       'e.g. quant = { format = "e4m3", granularity = "per_token", '
                       'contract = "vllm" }')
        try:
            qcontract.resolve(q)
        except InvalidArgument as e:
            raise SpecError(f"{where}: {e}") from None
        spec.quant = dict(q)
    if "max_elements" in data:
        v = data["max_elements"]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise _err(where, "max_elements", v, "a positive whole number of elements (rows × "
                       "cols) the kernel's launcher allows", "e.g. max_elements = 2147483647")
        spec.max_elements = v
    if "deterministic" in data:
        if not isinstance(data["deterministic"], bool):
            raise _err(where, "deterministic", data["deterministic"], "true or false",
                       "false where the output may differ run to run (float atomics)")
        spec.deterministic = data["deterministic"]
    if "source" in data and not isinstance(data["source"], str):
        raise _err(where, "source", data["source"], "a path to the .cu file")
    _check_roles(spec, where)
    return spec


def _check_roles(spec: KernelSpec, where: str):
    roles = spec.roles()
    backward = spec.backward or any(r in roles for r in ("dy", "dx", "dgamma", "dbeta",
                                                          "d_residual"))
    spec.backward = backward
    if backward:
        if "dy" not in roles or not any(r in roles for r in ("dx", "dgamma", "dbeta",
                                                            "d_residual")):
            raise _err(where, "args", roles, "a backward kernel's dy and at least one of dx, "
                       "dgamma, dbeta, d_residual")
        if "input" not in roles and "y" not in roles:
            raise _err(where, "args", roles, "the rows the backward reads: input (x, or the "
                       "fused sum h) or y (the forward's output, with the saved rstd)")
        if "y" in roles and "rstd" not in roles:
            raise _err(where, "args", roles, "the saved rstd with role y: x̂ = (y - β)/γ needs "
                       "rstd for dx")
        if "y" in roles and "input" in roles:
            raise _err(where, "args", roles, "input (x) or y, not both")
    elif "output" not in roles or "input" not in roles:
        raise _err(where, "args", roles, "at least an output and an input argument (or one "
                   "in-place buffer with role = [\"input\", \"output\"])")
    if not backward and any(r in roles for r in ("dh", "y")):
        raise _err(where, "args", roles, "dh and y only in a backward kernel")
    if "input" not in roles and not backward:
        raise _err(where, "args", roles, "an input argument (x)")
    _check_quant_roles(spec, roles, where)
    if backward and spec.stats is None:
        spec.stats = "saved" if "rstd" in roles else "recomputed"
    if backward and spec.stats == "saved" and "rstd" not in roles:
        raise _err(where, "stats", "saved", "an argument with role rstd (and mean for "
                   "LayerNorm): the saved statistics a backward kernel reads")
    needs_eps = not (backward and spec.stats == "saved")
    if needs_eps and spec.eps is None and "eps" not in roles:
        raise _err(where, "eps", None, "an argument with role eps, or eps = <value> when ε is "
                   "fixed inside the kernel")
    dtypes, strides = {}, {}
    for ln in spec.launches:
        seen = set()
        flat = [f for a in ln.args for f in ([a] if a.role != "struct" else a.fields)]
        for a in flat:
            if a.role in ("scratch", "null", "stream", "struct", "pad") or \
                    a.role in SCALAR_ROLES:
                continue
            for r in a.roles:
                if r in seen:
                    raise _err(where, "role", r, "each buffer role once per launch")
                seen.add(r)
            k = a.key
            if k in dtypes and dtypes[k] != a.dtype:
                raise _err(where, f"{a.role}.dtype", a.dtype, f"the same dtype in every launch "
                           f"({dtypes[k]})")
            if k in strides and strides[k] != a.stride:
                raise _err(where, f"{a.role}.stride", a.stride, f"the same stride in every "
                           f"launch ({strides[k]})")
            dtypes[k], strides[k] = a.dtype, a.stride
    scratch = {}
    for a in spec.args:
        if a.role == "scratch":
            prev = scratch.setdefault(a.name, (a.dtype, a.size))
            if prev != (a.dtype, a.size):
                raise _err(where, f"scratch {a.name!r}", a.size, "the same dtype and size in "
                           "every launch")


def _check_quant_roles(spec: KernelSpec, roles, where: str):
    used = [r for r in QUANT_ROLES if r in roles]
    if spec.quant is None:
        if used:
            raise _err(where, "role", used[0], "a quant table for a quantised output",
                       'add quant = { format = "e4m3", granularity = "per_token", ... }')
        return
    from normcheck.quant import contract as qcontract

    c = qcontract.resolve(spec.quant)
    if c.dynamic and "scales" not in roles:
        raise _err(where, "args", roles, f"an argument with role scales ({c.granularity} "
                   "scales are the kernel's output)")
    if (not c.dynamic or c.granularity == "nvfp4") and "scale" not in roles:
        raise _err(where, "args", roles, "an argument with role scale (the static per-tensor "
                   "scale" + (", nvfp4's encode scale S_enc" if c.granularity == "nvfp4" else "")
                   + ")")
    if spec.out_dtype is not None:
        raise _err(where, "out_dtype", spec.out_dtype, "no out_dtype with quant (the output "
                   "is quant.format)")
    for a in spec.args:
        if a.role in QUANT_ROLES and a.dtype is not None:
            raise _err(where, f"{a.role}.dtype", a.dtype, "no dtype: the contract says it "
                       "(float32 scales; e8m0 for mx, ue4m3 for nvfp4)")
        if a.role in ("scales", "amax") and a.type is not None:
            raise _err(where, f"{a.role}.type", a.type, "no type: an output buffer")


# ------------------------------------------------------------------------------------------------
# Expressions
# ------------------------------------------------------------------------------------------------
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Div: operator.floordiv}
_FUNCS = {"min": min, "max": max, "ceil_div": lambda a, b: -(-a // b),
          "next_pow2": lambda a: 1 << max(0, int(a) - 1).bit_length()}
_LIMIT = 1 << 62


#: The longest launch expression (a real one is a few dozen characters).
EXPRESSION_CHARS = 300


def _tree(expr, where):
    expr = str(expr)
    if len(expr) > EXPRESSION_CHARS:
        raise SpecError(f"{where}={expr[:40]!r}...: an expression of {len(expr)} characters; at "
                        f"most {EXPRESSION_CHARS}")
    try:
        return ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise SpecError(f"{where}={expr!r}: not an expression of rows and cols") from None


def check_expression(expr: str, where: str, dims: bool = False):
    """Syntax and names of an expression (values are checked when it is evaluated)."""
    tree = _tree(expr, where).body
    parts = tree.elts if dims and isinstance(tree, ast.Tuple) else [tree]
    if not 1 <= len(parts) <= 3:
        raise SpecError(f"{where}={expr!r}: one to three comma-separated expressions")
    for p in parts:
        for n in ast.walk(p):
            if isinstance(n, ast.Name) and n.id not in ("rows", "cols") and n.id not in _FUNCS:
                raise SpecError(f"{where}={expr!r}: unknown name {n.id!r}; only rows, cols, "
                                "min, max, ceil_div and next_pow2")


def check_launches(spec: KernelSpec) -> None:
    """Every launch expression of ``spec`` (grid, block, shared memory, warps, a const's value)
    evaluated at a few sizes its contract takes -- 3 and 7 rows, its narrowest width and the
    widest up to 4096 -- so a spec that cannot launch anything (``grid = "rows // (cols -
    cols)"``) is refused before anything is built; a SpecError naming the expression."""
    lo, hi = spec.cols
    m = max(1, spec.cols_multiple_of)
    widths = {-(-lo // m) * m, max(lo, min(hi, 4096)) // m * m}
    for rows in (3, 7):
        for cols in sorted(c for c in widths if lo <= c <= hi):
            for k, ln in enumerate(spec.launches):
                if ln.host:
                    continue
                where = "launch" if len(spec.launches) == 1 else f"launch[{k}]"
                evaluate_dims(ln.grid, rows, cols, f"{where}.grid")
                if ln.num_warps is None:
                    evaluate_dims(ln.block, rows, cols, f"{where}.block")
                else:
                    evaluate(ln.num_warps, rows, cols, f"{where}.num_warps")
                evaluate(ln.shared_mem, rows, cols, f"{where}.shared_mem")
                if ln.shared_mem_opt_in is not None:
                    evaluate(ln.shared_mem_opt_in, rows, cols, f"{where}.shared_mem_opt_in")
                for i, a in enumerate(ln.args):
                    if a.role == "const" and a.value is not None:
                        evaluate(a.value, rows, cols, f"args[{i}].value",
                                 real=a.type in FLOAT_TYPES)


def evaluate_dims(expr: str, rows: int, cols: int, where: str = "expression") -> tuple:
    """A launch dimension: one expression, or up to three separated by commas ("32, 4")."""
    tree = _tree(expr, where).body
    parts = tree.elts if isinstance(tree, ast.Tuple) else [tree]
    if not 1 <= len(parts) <= 3:
        raise SpecError(f"{where}={expr!r}: one to three comma-separated expressions")
    return tuple(evaluate(ast.unparse(p), rows, cols, where) for p in parts)


def evaluate(expr: str, rows: int, cols: int, where: str = "expression", real: bool = False):
    """Evaluate an integer expression of rows and cols (no names or calls beyond those);
    ``real``: a float expression (a const of a float type: ``1 / cols``), where ``/`` divides
    exactly and float constants are allowed."""
    tree = _tree(expr, where)
    env = {"rows": rows, "cols": cols}
    ops = {**_OPS, **({ast.Div: operator.truediv} if real else {})}

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float) if real else int) \
                and not isinstance(n.value, bool):
            return n.value
        if isinstance(n, ast.Name) and n.id in env:
            return env[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in ops:
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, (ast.FloorDiv, ast.Mod, ast.Div)) and b == 0:
                raise SpecError(f"{where}={expr!r}: division by zero at rows={rows}, "
                                f"cols={cols}; guard the divisor, e.g. max(1, ...)")
            v = ops[type(n.op)](a, b)
            if abs(v) > _LIMIT:
                raise SpecError(f"{where}={expr!r}: the value {v} at rows={rows}, cols={cols} "
                                "is out of range")
            return v
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _FUNCS \
                and not n.keywords:
            args = [ev(a) for a in n.args]
            if n.func.id == "ceil_div" and (len(args) != 2 or args[1] == 0):
                raise SpecError(f"{where}={expr!r}: ceil_div(a, b) needs b != 0 (rows={rows}, "
                                f"cols={cols})")
            if not args:
                raise SpecError(f"{where}={expr!r}: {n.func.id}() needs arguments")
            return _FUNCS[n.func.id](*args)
        raise SpecError(f"{where}={expr!r}: only rows, cols, integers, + - * // %, min, max, "
                        "ceil_div and next_pow2 are allowed" + (" (and / and floats: a float const)"
                                                      if real else ""))

    return float(ev(tree)) if real else int(ev(tree))


#: A role's name in ``dtypes`` (and --dtypes): the spec's role, or x / y for input / output.
ROLE_NAMES = {"x": "input", "y": "output"}
#: The roles a format may be given to.
DTYPE_ROLES = ("input", "residual", "h", "gamma", "beta", "output", "mean", "rstd", "dy", "dx",
               "dgamma", "dbeta", "dh", "d_residual", "y")


def _check_dtype(where, key, role, value):
    allowed = formats.ROWS if role in ("input", "residual") else tuple(formats.FORMATS)
    if value not in allowed:
        raise _err(where, key, value, f"one of {', '.join(allowed)} for {role}",
                   "fp8 (e4m3) is an input rows' format; fp8 outputs are a quantised check's "
                   "[quant]" if value in formats.REGISTRY else None)


def _parse_types(table, spec, where) -> dict:
    """A spec's ``types`` = { format = "C++ type" }: each a type of the entry grammar, the spec's
    own format among them, its type in every entry (the one the instantiation swaps)."""
    from normcheck.backends.base import parse_entry
    from normcheck.errors import InvalidArgument

    if not isinstance(table, dict) or not table:
        raise _err(where, "types", table, 'a table { fp16 = "c10::Half", bf16 = '
                   '"c10::BFloat16" }: the C++ type of each storage format in the entry')
    out = {}
    for fmt, t in table.items():
        if fmt not in formats.FORMATS:
            raise _err(where, f"types.{fmt}", t, "a key of fp32, fp16 or bf16")
        try:
            canon = parse_entry(f"k<{t}>")[2:-1] if isinstance(t, str) else None
        except InvalidArgument:
            canon = None
        if canon is None or canon[:1].isdigit() or canon in ("true", "false"):
            raise _err(where, f"types.{fmt}", t, "a C++ type name (e.g. \"c10::Half\")")
        out[fmt] = canon
    own = out.get(spec.dtype)
    if own is None:
        raise _err(where, "types", table, f"the spec's own format {spec.dtype} among the keys")
    for e in spec.entries:
        if e is not None and not _type_in(own).search(e):
            raise _err(where, f"types.{spec.dtype}", own, f"a type the entry {e!r} names (the "
                       "one another format's instantiation swaps)")
    return out


def _type_in(t: str):
    """A type name where it stands alone in an entry (not part of a longer name)."""
    return re.compile(rf"(?<![\w:]){re.escape(t)}(?![\w:])")


def for_dtype(spec: "KernelSpec", dtype: str) -> "KernelSpec":
    """``spec`` as it instantiates its kernel for another storage format: the format swapped,
    and, where the spec names its formats' C++ types (``types``), each entry's type swapped --
    ``vllm::rms_norm_kernel<c10::BFloat16, 8>`` -> ``<c10::Half, 8>`` (a Triton kernel takes
    the format from its arguments: no entry changes).  A format without a type: SpecError."""
    import copy

    out = copy.deepcopy(spec)
    if out.out_dtype in (None, out.dtype):
        out.out_dtype = None
    if spec.types and dtype != spec.dtype:
        if dtype not in spec.types:
            raise SpecError(f"{spec.path or 'spec'}: types has no {dtype}: give its C++ type "
                            f"(types = {{ {dtype} = \"...\" }}) to run the {dtype} instantiation")
        pat = _type_in(spec.types[spec.dtype])
        for ln in out.launches:
            if ln.entry is not None:
                ln.entry = pat.sub(spec.types[dtype], ln.entry)
    out.dtype = dtype
    return out


def parse_dtypes(table, where: str = "dtypes") -> dict:
    """{role: format name} of a ``dtypes`` table (the spec's) or ``x=e4m3,gamma=fp32`` (the
    command line's --dtypes): each role's own format, checked."""
    if isinstance(table, str):
        pairs = {}
        for part in filter(None, (p.strip() for p in table.split(","))):
            k, eq, v = part.partition("=")
            if not eq or not k.strip() or not v.strip():
                raise _err(where, "", table, "role=format pairs, e.g. x=e4m3,gamma=fp32,y=bf16")
            pairs[k.strip()] = v.strip()
        table = pairs
    if not isinstance(table, dict):
        raise _err(where, "", table, "a table of role = format", 'e.g. { x = "e4m3" }')
    out = {}
    for k, v in table.items():
        role = ROLE_NAMES.get(k, k)
        if role not in DTYPE_ROLES:
            raise _err(where, k, v, f"a role: x, y or one of {', '.join(DTYPE_ROLES)}")
        _check_dtype(where, k, role, v)
        out[role] = v
    return out


def scalar_type(a: ArgSpec):
    """The numpy type of a scalar argument as the spec gives it (``type``, else float32 for
    ε and int32 for the rest)."""
    return formats.np_type(_SCALAR_TYPES[a.type or ("float32" if a.role == "eps" else "int32")])


def convert(value, dtype, where: str, ctype: str | None = None):
    """``value`` (a Python or numpy number: what a spec's expression gives) converted to
    ``dtype`` as C++ converts an argument to a parameter's type: to ``bool`` any nonzero value
    is true; to an integer a float is truncated toward zero; a negative integer to an unsigned
    type wraps (``-1`` is all ones, as C++ gives it); to a float the value rounds to nearest
    even, once (bf16 too: ml_dtypes would round float64 through float32).  Refused -- an
    InvalidArgument that starts with ``where`` (``args[10] use_shmem = 1``) -- only where the
    value cannot reach the kernel as written: an integer too large for the type (C++ would wrap
    it to another number), a float out of an integer's range or not a number (undefined in
    C++)."""
    from normcheck.errors import InvalidArgument

    dt = np.dtype(dtype)
    ct = f"`{ctype}`" if ctype else dt.name
    v = value.item() if isinstance(value, np.generic) else value
    if dt == np.bool_:
        return np.bool_(v != 0)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        if isinstance(v, float):
            if not np.isfinite(v) or not info.min <= int(v) <= info.max:
                raise InvalidArgument(f"{where}: does not fit {ct} (a float out of an "
                                      "integer type's range is undefined in C++): give the "
                                      "argument a value in range, or a wider type")
            v = int(v)  # C++ truncates toward zero
        if dt.kind == "u" and -info.max - 1 <= v < 0:
            return dt.type(v % (info.max + 1))  # C++'s modular conversion: -1 is all ones
        if not info.min <= v <= info.max:
            raise InvalidArgument(f"{where}: does not fit {ct} ({info.min} to {info.max}; "
                                  f"C++ would pass {_wrapped(v, dt)}): a smaller value, or a "
                                  "wider type for the kernel's parameter")
        return dt.type(v)
    if formats.is_bf16(dt):
        return formats.BF16.cast(np.float64(v))[()]
    with np.errstate(over="ignore"):
        return dt.type(np.float64(v))


def _wrapped(v: int, dt) -> int:
    bits = dt.itemsize * 8
    w = v % (1 << bits)
    return w - (1 << bits) if dt.kind == "i" and w >= 1 << (bits - 1) else w
