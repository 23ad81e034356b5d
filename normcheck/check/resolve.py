"""Resolve once: (source | spec, options) to the kernel a check runs, and every argument check.

:func:`resolve` is the one way from what a user gives -- a .cu file or CUDA C text, a spec (a
path or a :class:`~normcheck.spec.KernelSpec`) or the default ABI, entry, norm, dtype, defines,
arch, a quantised output's contract -- to a :class:`Resolved` kernel: the spec, the Norm as the
check judges it, the formats, the backend *object*, the bound :class:`~normcheck.launch.KernelTarget`
and the description a counterexample file keeps of it.  The forward check, the backward check
(``backward=True``) and ``normcheck replay`` (:func:`resolve_case`) all call it, so the three
see one kernel the same way.  The argument checks the checks share live here too.
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from normcheck import formats, launch, norms, spec as specs
from normcheck.backends import get_backend
from normcheck.backends.base import Backend, parse_arch
from normcheck.backends.triton.backend import is_triton, signature as triton_signature
from normcheck.check.options import CheckOptions
from normcheck.files import SOURCE_BYTES, read_limited
from normcheck.errors import BackendUnavailable, invalid
from normcheck.formats import Format

__all__ = ["Resolved", "resolve", "resolve_case", "check_counts", "check_timeout", "check_cols",
           "long_run", "sha256", "LIMITS"]

#: Caps on what a check may be asked to do (memory and time stay bounded).
LIMITS = {"examples": 4096, "search": 10000, "seed": 2**32 - 1, "rows": 10**9}


@dataclass
class Resolved:
    """A kernel resolved for a check: what runs (``target``), on what (``backend``), judged as
    what (``norm``, ``fmt``, ``out`` or ``contract``), and its description for case files."""

    spec: specs.KernelSpec
    norm: norms.Norm
    fmt: Format
    out: Format | None  # None with a quantised output (the contract's format)
    contract: object | None  # normcheck.quant.contract.Contract
    source: object  # a path or CUDA C text
    backend: Backend
    arch: int | None
    eps: np.float32
    target: launch.KernelTarget
    desc: dict = field(default_factory=dict)
    #: the format x is stored in: ``fmt`` itself, or fp8 (then ``fmt`` is its carrier, fp16,
    #: in which the check holds the rows' values)
    rows: object = None
    #: where the source tests normcheck's own names (:func:`tells`): said with the verdict
    tells: list = field(default_factory=list)

    def setup(self, seed: int = 0):
        """What a forward judge is told of this check (normcheck.check.engine.Setup)."""
        from normcheck.check.engine import Setup

        sp = self.spec
        return Setup(norm=self.norm, fmt=self.fmt, out=self.out, contract=self.contract,
                     convention=sp.convention, eps=self.eps, backend=self.backend, seed=seed,
                     cols_range=sp.cols, multiple_of=sp.cols_multiple_of,
                     stats_roles=tuple(r for r in specs.STAT_ROLES if sp.has(r)),
                     arch=self.arch, desc=self.desc)


def sha256(path, limit: int = SOURCE_BYTES) -> str:
    """The file's SHA-256, its size checked before a byte is read (a source's limit)."""
    return hashlib.sha256(read_limited(path, "source", limit, "a readable .cu file")).hexdigest()


def _case_roots(case_path) -> list:
    return [Path.cwd().resolve(), Path(case_path).resolve().parent.parent]


def _beneath_case(key: str, value, case_path) -> Path:
    """A folder a saved case names (an -I of its check): beneath the working folder or the
    folder above the case's, else refused."""
    p = Path(str(value)).resolve()
    roots = _case_roots(case_path)
    if not any(p == r or r in p.parents for r in roots):
        raise invalid(f"case.{key}", str(value), f"a folder beneath this folder ({roots[0]}) or "
                      f"the case's ({roots[1]})", "replay the case from the folder the check "
                      "ran in, or run the check again")
    return p


def _case_path(key: str, value, recorded, case_path) -> Path:
    """A path a saved case names, allowed when it lies beneath the working folder or the
    folder above the case's (where a check saves it: .normcheck/), or when it is unchanged
    since the case was saved (its SHA-256 is the recorded one): a case file from someone else
    cannot make normcheck read, compile or echo another file of this machine."""
    p = Path(value).resolve()
    roots = _case_roots(case_path)
    if any(p == r or r in p.parents for r in roots):
        return p
    if recorded and p.is_file() and sha256(p) == recorded:
        return p
    raise invalid(f"case.{key}", str(value), f"a {key} beneath this folder ({roots[0]}) or the "
                  f"case's ({roots[1]}), or the very file the case was saved from (its SHA-256 "
                  f"recorded in the case)", "replay the case from the folder the check ran in, "
                  "or run the check again")


# ------------------------------------------------------------------------------------------------
# Argument checks
# ------------------------------------------------------------------------------------------------
def check_counts(examples, search, seed):
    for name, v, lo in (("examples", examples, 1), ("search", search, 0), ("seed", seed, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not \
                lo <= v <= LIMITS[name]:
            raise invalid(name, v, f"an integer from {lo} to {LIMITS[name]}",
                          {"examples": "rows per family; for long runs use --rows",
                           "search": "examples of the targeted search; 0 skips it",
                           "seed": "any non-negative integer below 2^32"}[name])


def check_timeout(timeout):
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not math.isfinite(timeout) or timeout <= 0:
        raise invalid("timeout", timeout, "a positive, finite number of seconds",
                      "e.g. --timeout 60")
    return float(timeout)


def check_cols(cols) -> tuple:
    """A callable's (min, max) widths."""
    try:
        lo, hi = cols
    except (TypeError, ValueError):
        lo = hi = None
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
        raise invalid("cols", cols, "(min, max) widths with 1 <= min <= max", "e.g. (1, 8192)")
    return lo, hi


def long_run(rows, cols, cols_range, multiple_of):
    """The validated (rows, cols) of a long run, or None."""
    if rows is None:
        if cols is not None:
            raise invalid("cols", cols, "no --cols without --rows (it sets the long run's width)",
                          "add --rows N")
        return None
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or \
            not 1 <= rows <= LIMITS["rows"]:
        raise invalid("rows", rows, f"an integer from 1 to {LIMITS['rows']}",
                      "the number of rows of the long run, e.g. --rows 1000000")
    lo, hi = cols_range
    if cols is None:  # 4096 if the kernel takes it, else the nearest width it does
        m = max(1, multiple_of)
        cols = min(max(4096, lo), hi) // m * m
        if cols < lo:
            cols += m
    if isinstance(cols, bool) or not isinstance(cols, (int, np.integer)) or \
            not lo <= cols <= hi or cols % max(1, multiple_of):
        raise invalid("cols", cols, f"a width from {lo} to {hi}"
                      + (f", a multiple of {multiple_of}" if multiple_of > 1 else ""),
                      "the spec's cols and cols_multiple_of say what the kernel takes")
    return int(rows), int(cols)


def _contract(quant, spec):
    """The quantised output's contract from ``quant`` (CLI/API) over the spec's, or None."""
    from normcheck.quant import contract as qcontract

    table = quant if quant is not None else (spec.quant if spec is not None else None)
    if table is None:
        return None
    if isinstance(table, dict) and spec is not None and spec.quant and quant is not None:
        table = {**spec.quant, **table}
    return qcontract.resolve(table)


# ------------------------------------------------------------------------------------------------
# Resolve
# ------------------------------------------------------------------------------------------------
def resolve(o: CheckOptions) -> Resolved:
    """The kernel a check of options ``o`` (a :class:`CheckOptions`) runs.  ``o.spec``: a path,
    a KernelSpec or None for the default ABI (then ``o.entry`` names the kernel and ``o.block``
    its block size); entry/norm/dtype/source may come from the spec; ``o.defines`` add to the
    spec's, ``o.dtypes`` over the spec's; ``o.quant`` (a table, a preset name or a Contract)
    over the spec's ``quant``; ``o.backward`` for a backward kernel (roles dy and
    dx/dgamma/dbeta); ``o.include``: folders the user named (``-I``), searched by #include and
    allowed to the spec's paths.  The spec is loaded here, once."""
    source, entry, norm, dtype, spec = o.source, o.entry, o.norm, o.dtype, o.spec
    block, backend, defines, reference = o.block, o.backend, o.defines, o.reference
    include, arch, quant, backward = tuple(o.include), o.arch, o.quant, o.backward
    timeout = check_timeout(o.timeout)
    if spec is not None and not isinstance(spec, specs.KernelSpec):
        spec = specs.load(spec, roots=include)
    elif spec is not None and (o.dtypes or include):
        spec = copy.deepcopy(spec)  # the caller's spec is not changed by this check's options
    if spec is not None and spec.op is not None:
        return _resolve_op(o, spec)
    norm = norm or (spec.norm if spec else None)
    dtype = dtype or (spec.dtype if spec else None)
    for name, v in (("norm", norm), ("dtype", dtype)):
        if v is None:
            raise invalid(name, None, f"a {name} (give --{name} or put it in the spec)")
    n, fmt = norms.get(norm), formats.get(dtype)
    be = get_backend(backend)
    default_abi = spec is None
    if spec is None:
        if backward and n.fused:
            raise invalid("norm", n.name, "a spec for a fused backward (roles dh and "
                          "d_residual: the residual stream's gradient in and out)")
        if entry is None:
            raise invalid("entry", None, "the kernel to run (give --entry or a spec)")
        if not isinstance(block, int) or isinstance(block, bool) or not 1 <= block <= 1024:
            raise invalid("block", block, "1 to 1024 threads")
        triton = _triton_signature(source, entry)
        if triton is not None:
            spec = specs.default_triton_spec(n, triton.constexprs, block, backward)
        else:
            spec = specs.default_backward_spec(n, block) if backward else \
                specs.default_spec(n, block)
        spec.launches[0].entry = entry
    else:
        if spec.norm and spec.norm != n.name:
            raise invalid("norm", n.name, f"the spec's norm ({spec.norm})", "drop one of them")
        if backward and not spec.backward:
            raise invalid("spec", str(spec.path), "a backward spec (roles dy and dx/dgamma/dbeta)",
                          "drop --backward for a forward kernel")
        if not backward and spec.backward:
            raise invalid("spec", str(spec.path), "a forward kernel (this spec has backward "
                          "roles)", "run normcheck check --backward")
        if entry is not None:
            if len(spec.launches) > 1:
                raise invalid("entry", entry, "no --entry: the spec names one entry per launch")
            spec.launches[0].entry = entry
        if spec.entries[0] is None:
            raise invalid("entry", None, "the kernel to run (--entry, or entry in the spec)")
        if spec.types and entry is None and spec.dtype and fmt.name != spec.dtype:
            # --dtype fp16 on a bf16 spec that names its formats' C++ types: the fp16
            # instantiation (the entry's type swapped), as the launcher dispatches it
            spec = specs.for_dtype(spec, fmt.name)
    if include:
        spec.include_dirs = (*spec.include_dirs, *(str(Path(d).resolve()) for d in include))
    if o.dtypes:
        spec.dtypes = {**spec.dtypes, **o.dtypes}
    src = source if source is not None else spec.source
    if src is None:
        raise invalid("source", None, "a .cu file (or `source` in the spec)")
    if not default_abi:
        specs.check_launches(spec)  # before anything is built
        _check_arg_names(spec, src)
    defines, arch = _arch_define(spec, defines, arch)
    arch = parse_arch(arch if arch is not None else spec.arch)
    contract = None
    if backward:
        if n.fused and not (spec.has("dh") or spec.has("d_residual")):
            raise invalid("norm", n.name, "roles dh (the residual stream's gradient, in) and "
                          "d_residual (out) for a fused backward", "or check the norm's "
                          "backward with norm = " + repr(n.base))
        if spec.has("y") and not spec.has("gamma"):
            raise invalid("spec.args", spec.roles(), "gamma with role y (x̂ = (y - β)/γ)")
        # γ is always part of the maths (1 where the kernel takes none); β only through dβ or y
        n = n.with_affine(True, n.centred and (spec.has("dbeta") or spec.has("beta")))
        out = None
        target = launch.bind(spec, src, norm=n, dtype=fmt.name, backend=be, defines=defines,
                             timeout=timeout, arch=arch, options=_hazard_build(be))
    else:
        if n.fused:
            missing = [r for r in ("residual", "h") if not spec.has(r)]
            if missing:
                raise invalid("spec.args", spec.roles(), f"the roles residual and h for "
                              f"{n.name}", f"add [[args]] with role = {missing[0]!r}")
        n = n.with_affine(spec.has("gamma"), spec.has("beta")).with_reference(
            reference or spec.reference or "exact")
        contract = _contract(quant, spec)
        out = formats.get(o.out_dtype or spec.dtypes.get("output") or spec.out_dtype or
                          fmt.name) if contract is None else None
        target = launch.bind(spec, src, norm=n, dtype=fmt.name,
                             out_dtype=out.name if out is not None else None,
                             backend=be, defines=defines, timeout=timeout, arch=arch,
                             quant=contract, options=_hazard_build(be))
    if default_abi and not is_triton(src):
        _check_order(spec, target, src)
    rows = target.formats.get("input", fmt)
    if not isinstance(rows, Format):  # fp8 rows: their values carried in fp16 by the check
        if n.fused:
            raise invalid("dtypes.x", rows.name, "fp32, fp16 or bf16 for a fused norm (h = x + "
                          "residual is stored in x's format)", "check the norm's fp8 rows "
                          "without the residual add")
        fmt = rows.carrier
    eps = np.float32(spec.eps) if spec.eps is not None else \
        np.float32(1e-6 if contract is not None else 1e-5)
    eps_arg = next((a for a in spec.args if a.role == "eps"), None)
    if eps_arg is not None:
        # ε as the kernel receives it: in half (ONNX Runtime's `__half epsilon`, by its spec
        # type or by the parameter's), the exact function too
        eps = np.float32(target.received(eps_arg, eps))
    if isinstance(src, (str, Path)) and "\n" not in str(src):
        desc = {"source": str(Path(src).resolve()), "sha256": sha256(src)}
    else:
        desc = {"source": "<string>", "source_text": str(src)}
    desc.update({"entries": spec.entries, "norm": n.name, "dtype": formats.get(dtype).name,
                 "defines": {**spec.defines, **(defines or {})},
                 "spec": str(spec.path.resolve()) if spec.path else None,
                 "spec_sha256": sha256(spec.path) if spec.path else None,
                 "block": block if not spec.path else None, "arch": arch,
                 "dtypes": dict(o.dtypes) if o.dtypes else None,
                 "include": [str(Path(d).resolve()) for d in include]})
    if not backward:
        desc.update({"reference": n.reference,
                     "out_dtype": out.name if out is not None else contract.qformat.name})
    return Resolved(spec, n, fmt, out, contract, src, be, arch, eps, target, desc, rows,
                    tells(src))


def _resolve_op(o: CheckOptions, spec) -> Resolved:
    """A check of an op called as its users call it (spec ``[op]``, or ``check --op``): the
    project's function on the rows, each kernel it launches run by normcheck
    (normcheck.backends.triton.op), judged as a Python function is."""
    from normcheck.backends.triton.op import Op, needs_missing, parse_call

    why = needs_missing()
    if why is not None:  # before its module is imported with torch stood in for (#64)
        raise BackendUnavailable(why)
    for name, v in (("entry", o.entry), ("block", o.block if o.block != 256 else None),
                    ("defines", o.defines or None), ("quant", o.quant),
                    ("dtypes", o.dtypes or None)):
        if v is not None:
            raise invalid(name, v, "nothing with an op (its launcher decides the launch)")
    if o.backward:
        raise invalid("backward", True, "a forward op (a backward op is not called yet)")
    norm, dtype = o.norm or spec.norm, o.dtype or spec.dtype
    for name, v in (("norm", norm), ("dtype", dtype)):
        if v is None:
            raise invalid(name, None, f"a {name} (give --{name} or put it in the spec)")
    n, fmt = norms.get(norm), formats.get(dtype)
    if spec.norm and spec.norm != n.name:
        raise invalid("norm", n.name, f"the spec's norm ({spec.norm})", "drop one of them")
    src = o.source if o.source is not None else spec.source
    if src is None:
        raise invalid("source", None, "the op's .py file (`source` in the spec)")
    if not is_triton(src):
        raise invalid("source", str(src), "a Python file whose op launches Triton kernels "
                      "(an op of C++ launchers on torch::Tensor is not called yet: give its "
                      "kernel a spec)")
    call = parse_call(spec.op["call"], "op.call")
    has = {"x": True, "residual": n.fused, "weight": True, "bias": n.centred}
    for name in call.names():
        if name in has and not has[name]:
            raise invalid("op.call", call.text, f"the tensors {n.name} has "
                          f"({', '.join(k for k, v in has.items() if v)})")
    n = n.with_affine("weight" in call.names(), "bias" in call.names()).with_reference(
        o.reference or spec.reference or "exact")
    out = formats.get(o.out_dtype or spec.out_dtype or fmt.name)
    outputs = []
    for key in (("h", "output") if n.fused else ("output",)):
        v = spec.op.get(key)
        outputs.append(["arg", v] if isinstance(v, str) else ["index", int(v)])
    from normcheck.backends import for_source

    be = for_source(o.backend, src)
    if be.capabilities.device_timings:  # a GPU's: the op would run on its tensors
        raise invalid("backend", o.backend, "cpu (an op's host code runs on CPU tensors, its "
                      "kernels on triton-cpu)")
    op = Op(src, call, outputs, module=spec.op.get("module") or "", root=spec.op.get("root"),
            timeout=check_timeout(o.timeout))
    target = launch.OpTarget(op, n, fmt, out, call.fn)
    eps = np.float32(spec.eps) if spec.eps is not None else np.float32(1e-5)
    desc = {"source": str(Path(src).resolve()), "sha256": sha256(src), "op": dict(spec.op),
            "norm": n.name, "dtype": fmt.name, "reference": n.reference, "out_dtype": out.name,
            "spec": str(spec.path.resolve()) if spec.path else None,
            "spec_sha256": sha256(spec.path) if spec.path else None}
    return Resolved(spec, n, fmt, out, None, src, be, None, eps, target, desc, fmt, tells(src))


#: Names only normcheck's emulation answers to: a source that tests them could behave one way
#: under test and another on a GPU (a defeat device).
_TELL_C = re.compile(r"\b(__NORMCHECK\w*|NORMCHECK_\w+|ncsimt\w*|__nc_\w+)\b")
_TELL_PY = re.compile(r"\b(normcheck\w*|TRITON_INTERPRET)\b")


def tells(src) -> list[str]:
    """The lines of ``src`` (a path or text) that name normcheck's own emulation -- in CUDA C
    outside comments, in a Triton file in its code and its strings (``os.environ[
    "TRITON_INTERPRET"]``) -- as "line N: NAME", at most 3."""
    import io
    import tokenize

    try:
        text = Path(src).read_text(errors="replace") if isinstance(src, Path) or (
            isinstance(src, str) and "\n" not in src and Path(src).is_file()) else str(src)
    except OSError:
        return []
    out = []
    if is_triton(src):
        import ast

        try:  # a docstring (a string that is a statement of its own) does nothing: not a test
            idle = {(n.lineno, n.col_offset) for n in ast.walk(ast.parse(text))
                    if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                    and isinstance(n.value.value, str)}
        except (SyntaxError, ValueError):
            idle = set()
        try:
            for tok in tokenize.generate_tokens(io.StringIO(text).readline):
                if tok.type == tokenize.STRING and tok.start in idle:
                    continue
                if tok.type in (tokenize.NAME, tokenize.STRING):
                    m = _TELL_PY.search(tok.string)
                    if m:
                        out.append(f"line {tok.start[0]}: {m.group(1)}")
        except (tokenize.TokenError, SyntaxError, IndentationError):
            return []
    else:
        code = re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text,
                      flags=re.S)
        for no, line in enumerate(code.splitlines(), 1):
            m = _TELL_C.search(line)
            if m:
                out.append(f"line {no}: {m.group(1)}")
    return list(dict.fromkeys(out))[:3]


def _hazard_build(be) -> dict | None:
    """The compile options of a check's kernel: its hazard build made beside the plain one where
    the backend has one (the check's families run on it)."""
    return {"hazards": True} if be.capabilities.hazards else None


def _triton_signature(source, entry):
    """The signature of a Triton kernel file's entry (its syntax tree), or None for CUDA C."""
    if not is_triton(source):
        return None
    text = read_limited(source, "source", SOURCE_BYTES, "a readable Triton .py file")
    return triton_signature(text.decode("utf-8", "replace"), entry, Path(source).name)


def _check_arg_names(spec, src):
    """A spec argument's ``name`` (but a scratch, side or struct argument's: it names the
    buffer, the struct) is the kernel's parameter at its position: a name that is another
    parameter's, or none of the kernel's, is refused naming both (the arguments are passed by
    position: a wrong position would be blamed on the kernel).  Where the kernel's parameters
    cannot be read from the file (a host launcher, a macro-made kernel), nothing is checked."""
    from normcheck.errors import SpecError
    from normcheck.skeleton import parameter_lists

    for li, la in enumerate(spec.launches):
        if la.host or not la.entry:
            continue
        sig = _triton_signature(src, la.entry)
        if sig is not None:
            lists = [list(sig.passed)]
        else:
            text = read_limited(src, "source", SOURCE_BYTES, "a readable .cu file")
            lists = parameter_lists(text.decode("utf-8", "replace"), la.entry)
        if not lists:
            continue
        # a scratch or side buffer's name is the buffer's (shared between launches), not
        # the parameter's
        named = [(i, a.name) for i, a in enumerate(la.args)
                 if a.name and a.role not in ("scratch", "side", "struct")]
        if not named or any(all(i >= len(ps) or not ps[i] or ps[i] == n for i, n in named)
                            for ps in lists):
            continue  # some definition of the entry has every named argument in its place
        ps = lists[0]
        i, n = next((i, n) for i, n in named if i < len(ps) and ps[i] and ps[i] != n)
        where = f"{spec.path or 'spec'}: " + (f"launch {li + 1}: " if len(spec.launches) > 1
                                               else "")
        at = f"; {n!r} is parameter {ps.index(n) + 1}" if n in ps else \
            "; the kernel has no parameter of that name"
        raise SpecError(f"{where}args[{i}] is named {n!r} but parameter {i + 1} of "
                        f"{la.entry} is {ps[i]!r}{at} (its parameters: {', '.join(ps)}): the "
                        "arguments are passed in order -- put each [[args]] table in the "
                        "kernel's order, or fix its name")


def _arch_define(spec, defines, arch):
    """A define of __CUDA_ARCH__ (in the spec or on the command line) is the architecture
    presented (``arch``): honoured as such, since the shim defines __CUDA_ARCH__ from it
    (defining it beside would give the CUDA headers two answers); one that disagrees with an
    explicit arch is refused."""
    merged = {**(spec.defines or {}), **(defines or {})}
    v = merged.get("__CUDA_ARCH__")
    if "__CUDA_ARCH__" not in merged:
        return defines, arch
    try:
        sm = f"sm_{int(str(v)) // 10}"
    except (TypeError, ValueError):
        raise invalid("defines.__CUDA_ARCH__", v, "a number such as 800",
                      "or say arch = \"sm_80\" (--arch sm_80)") from None
    want = arch if arch is not None else spec.arch
    if want is not None and parse_arch(want) != parse_arch(sm):
        raise invalid("defines.__CUDA_ARCH__", v, f"the architecture given ({want})",
                      "drop the define: arch says it")
    spec.defines = {k: val for k, val in (spec.defines or {}).items() if k != "__CUDA_ARCH__"}
    defines = {k: val for k, val in (defines or {}).items() if k != "__CUDA_ARCH__"}
    return defines, sm


_ROLE_TEXT = {"output": "the output y (T*)", "input": "x (const T*)", "gamma": "γ (const T*)",
              "beta": "β (const T*)", "residual": "the residual (const T*)", "h": "h (T*)",
              "eps": "float eps", "rows": "int rows", "cols": "int cols",
              "dx": "dx (T*)", "dy": "dy (const T*)", "mean": "mean (const float*)",
              "rstd": "rstd (const float*)"}


def _check_order(spec, target, src=None):
    """A kernel checked in the default ABI whose parameters do not fit it is named with the
    fix: a scalar where the ABI has a pointer (or the other way), a scalar of another type,
    an output parameter declared const (x and y swapped?) -- "parameter 3 is `int rows`; the
    default ABI has `float eps` there"."""
    args = spec.launches[0].args
    for entry, kern in target.kernels.items():
        params = getattr(kern, "params", None)
        if not params:
            continue
        from normcheck.skeleton import parameter_names

        try:
            text = Path(src).read_text(errors="replace") if isinstance(src, (str, Path)) and \
                "\n" not in str(src) else str(src or "")
        except OSError:
            text = ""
        names = parameter_names(text, entry) or []
        names += [""] * (len(params) - len(names))
        abi = ", ".join(_ROLE_TEXT.get(a.role, a.role) for a in args)
        fix = (f"the default ABI of {spec.norm or 'this norm'} is ({abi}); reorder the "
               "kernel's parameters, or describe them in a spec (normcheck spec FILE --entry "
               "NAME writes one to start from)")
        if len(params) != len(args):
            raise invalid("entry", entry, f"a kernel of {len(args)} parameters in the default "
                          f"ABI; {entry} has {len(params)} "
                          f"({', '.join(q.ctype for q in params)})", fix)
        for i, (a, q) in enumerate(zip(args, params)):
            want_ptr = a.role not in ("eps", "rows", "cols", "const")
            what = f"parameter {i} is `{q.ctype}{' ' + names[i] if names[i] else ''}`; the " \
                   f"default ABI has {_ROLE_TEXT.get(a.role, a.role)} there"
            if want_ptr != q.is_pointer:
                raise invalid("entry", entry, "parameters in the default ABI's order: " + what,
                              fix)
            if not want_ptr:
                float_want = a.role == "eps"
                float_got = q.base in ("float", "double", "__half", "__nv_bfloat16")
                if float_want != float_got:
                    raise invalid("entry", entry, "parameters in the default ABI's order: " +
                                  what, fix)
            elif a.role in ("output", "h", "dx") and q.ctype.replace(" ", "").startswith(
                    "const"):
                raise invalid("entry", entry, "parameters in the default ABI's order: " + what +
                              " (the kernel declares it const: x and y swapped?)", fix)


def resolve_case(k: dict, path, backend, run_embedded: bool, notes: list) -> Resolved:
    """The kernel a saved case (:mod:`normcheck.cases`) describes, resolved as the check that
    saved it resolved it; what changed since (a source or spec edited) goes to ``notes``."""
    from normcheck.cases import EMBEDDED_FLAG, bad_case
    from normcheck.errors import InvalidArgument

    src = k.get("source")
    if src == "<string>" or "source_text" in k:
        if not run_embedded:
            raise invalid("case", str(path), "a case whose kernel source is a file on disk",
                          f"this case carries its kernel's C++ source: replaying it compiles "
                          f"and runs that code on this machine -- only if you trust the file, "
                          f"run normcheck replay {path} {EMBEDDED_FLAG}")
        src, src_root = k["source_text"], []
        notes.append("ran the C++ source embedded in the case file (--run-embedded-source)")
    else:
        if not src or not Path(src).is_file():
            raise invalid("case.source", src, "the kernel's source file, as it was when the "
                          "case was saved", "restore the file, or run the check again")
        src = str(_case_path("source", src, k.get("sha256"), path))
        src_root = [Path(src).parent]
        if k.get("sha256") and sha256(src) != k["sha256"]:
            notes.append(f"{src} has changed since the case was saved: replaying the file as it "
                         "is now")
    include = [str(_beneath_case("include", d, path)) for d in (k.get("include") or [])]
    spec = None
    if k.get("spec"):
        sp = Path(k["spec"])
        if not sp.is_file():
            raise invalid("case.spec", str(sp), "the kernel's spec file",
                          "restore the file, or run the check again")
        sp = _case_path("spec", sp, k.get("spec_sha256"), path)
        if k.get("spec_sha256") and sha256(sp) != k["spec_sha256"]:
            notes.append(f"{sp} has changed since the case was saved")
        # the spec's paths beneath its folder, the case's source's (checked above) or a folder
        # the check was given with -I (checked like the source)
        spec = specs.load(sp, roots=[*src_root, *include])
    if k.get("op") and spec is None:  # an op given on the command line (check --op)
        op = k["op"]
        spec = specs.op_spec(op["call"], src, op.get("module") or "", op.get("root"),
                             op.get("output", 0), op.get("h"), where="case.op")
    if spec is not None and spec.op is not None:
        return resolve(CheckOptions(source=src, norm=k["norm"], dtype=k["dtype"], spec=spec,
                                    backend=backend, reference=k.get("reference") or None,
                                    out_dtype=k.get("out_dtype")))
    entries = k.get("entries") or [k.get("entry")]
    entry = entries[0] if (spec is None or len(spec.launches) == 1) else None
    quant = None
    if k.get("quant"):
        from normcheck.quant import contract as qcontract

        q = {f: v for f, v in k["quant"].items() if f in qcontract.FIELDS and f != "notes"}
        try:
            quant = qcontract.Contract(**{f: (tuple(v) if isinstance(v, list) else v)
                                          for f, v in q.items()}).replace()
        except (TypeError, InvalidArgument) as e:
            raise bad_case(path, f"its quant contract is not one normcheck knows ({e})") \
                from None
    backward = bool(k.get("backward"))
    return resolve(CheckOptions(
        source=src, entry=entry, norm=k["norm"], dtype=k["dtype"], spec=spec,
        block=int(k.get("block") or 256), backend=backend, defines=k.get("defines") or None,
        reference=None if backward else (k.get("reference") or None),
        out_dtype=None if (backward or quant) else k.get("out_dtype"),
        dtypes=None if backward else (k.get("dtypes") or None),
        arch=k.get("arch"), quant=quant, include=tuple(include), backward=backward))
