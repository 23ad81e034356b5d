"""Kernel specs: how to call a kernel that does not follow the default ABI.

Real kernels (vLLM, FlashInfer, Apex, PyTorch, llm.c) are templates with strides and extra
outputs.  A spec, in TOML, says what each argument is and how to launch::

    entry = "rms_norm_kernel<__half>"     # a template instantiation (or a plain name)
    norm = "rmsnorm"                      # layernorm | rmsnorm | gemma_rmsnorm | add_layernorm | add_rmsnorm
    dtype = "fp16"                        # storage of x (and of γ, β, h unless given)
    out_dtype = "fp16"                    # y's format when it differs from x's
    convention = "stored"                 # fused kernels: "exact" or "stored"
    eps = 1e-6                            # only when ε is fixed inside the kernel
    cols = [1, 8192]                      # the widths the kernel supports

    [launch]                              # expressions of rows and cols
    grid = "rows"
    block = "min(1024, cols)"             # or "32, 4" for a 2-D block
    shared_mem = "0"

    [[args]]                              # one table per kernel parameter, in order
    role = "output"                       # y
    stride = "cols"                       # row pitch in elements (default cols)
    [[args]]
    role = "input"                        # x
    [[args]]
    role = "const"                        # a value: `value` (an expression) of `type`
    value = "cols"
    type = "int64"

Roles: output (y), input (x), residual (x's partner in a fused add), h (the fused sum, written),
gamma, beta, eps (the float ε), rows, cols, mean and rstd (per-row float32 outputs unless
``dtype`` says otherwise), const.  Scalar roles take ``type`` (int32 by default; float32 for eps).
Expressions use rows, cols, integers, + - * // % ( ), min, max and ceil_div.
"""

from __future__ import annotations

import ast
import operator
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from normcheck import formats
from normcheck.errors import SpecError

__all__ = ["ArgSpec", "KernelSpec", "load", "parse", "default_spec", "evaluate", "evaluate_dims",
           "ROLES", "NORMS"]

NORMS = ("layernorm", "rmsnorm", "gemma_rmsnorm", "add_layernorm", "add_rmsnorm")
BUFFER_ROLES = ("output", "input", "residual", "h", "gamma", "beta", "mean", "rstd")
SCALAR_ROLES = ("eps", "rows", "cols", "const")
ROLES = BUFFER_ROLES + SCALAR_ROLES
_SCALAR_TYPES = {"int32": np.int32, "int": np.int32, "int64": np.int64, "uint32": np.uint32,
                 "float32": np.float32, "float": np.float32, "float64": np.float64}


@dataclass
class ArgSpec:
    role: str
    dtype: str | None = None     # buffers: a format name
    type: str | None = None      # scalars: int32 | int64 | uint32 | float32 | float64
    value: str | None = None     # const: an expression
    stride: str | None = None    # row buffers: row pitch in elements (an expression)
    name: str | None = None

    @property
    def label(self) -> str:
        return self.name or self.role


@dataclass
class KernelSpec:
    args: list
    entry: str | None = None
    norm: str | None = None
    dtype: str | None = None
    out_dtype: str | None = None
    convention: str | None = None
    eps: float | None = None  # fixed inside the kernel
    grid: str = "rows"
    block: str = "256"
    shared_mem: str = "0"
    cols: tuple = (1, 1 << 20)
    source: Path | None = None
    path: Path | None = field(default=None, repr=False)

    def roles(self) -> list[str]:
        return [a.role for a in self.args]

    def has(self, role) -> bool:
        return role in self.roles()


def _err(where, key, value, expected, fix=None):
    msg = f"{where}: {key}={value!r}: expected {expected}"
    return SpecError(msg + (f". {fix}" if fix else ""))


def default_spec(norm: str, block: int = 256) -> KernelSpec:
    """The DESIGN.md ABI: (y, x, γ, β, eps, rows, cols), RMSNorm without β, fused kernels with
    (h, y, x, residual, ...) in front; grid = rows, block threads."""
    if norm not in NORMS:
        raise SpecError(f"norm={norm!r}: expected one of {', '.join(NORMS)}")
    roles = ["output", "input"]
    if norm.startswith("add_"):
        roles = ["h", "output", "input", "residual"]
    roles.append("gamma")
    if norm in ("layernorm", "add_layernorm"):
        roles.append("beta")
    roles += ["eps", "rows", "cols"]
    return KernelSpec(args=[ArgSpec(r) for r in roles], norm=norm, block=str(int(block)))


def load(path) -> KernelSpec:
    """Read and validate a spec file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"{path}: no such spec file") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML ({e}); see normcheck.spec for the format") \
            from None
    spec = parse(data, str(path))
    spec.path = path
    if isinstance(data.get("source"), str):
        spec.source = (path.parent / data["source"]).resolve()
    return spec


def parse(data: dict, where: str = "spec") -> KernelSpec:
    known = {"entry", "norm", "dtype", "out_dtype", "convention", "eps", "cols", "launch",
             "args", "source"}
    for k in data:
        if k not in known:
            raise _err(where, k, data[k], f"one of the keys {', '.join(sorted(known))}",
                       "remove or rename it")
    args = data.get("args")
    if not isinstance(args, list) or not args:
        raise _err(where, "args", args, "a list of [[args]] tables, one per kernel parameter")
    out = []
    for i, a in enumerate(args):
        w = f"{where}: args[{i}]"
        if not isinstance(a, dict) or "role" not in a:
            raise _err(w, "role", None, f"one of {', '.join(ROLES)}")
        role = a["role"]
        if role not in ROLES:
            raise _err(w, "role", role, f"one of {', '.join(ROLES)}")
        extra = set(a) - {"role", "dtype", "type", "value", "stride", "name"}
        if extra:
            raise _err(w, sorted(extra)[0], a[sorted(extra)[0]],
                       "keys role, dtype, type, value, stride, name")
        if "dtype" in a:
            formats.get(a["dtype"]) if a["dtype"] in formats.FORMATS else (_ for _ in ()).throw(
                _err(w, "dtype", a["dtype"], "fp32, fp16 or bf16"))
        if "type" in a and a["type"] not in _SCALAR_TYPES:
            raise _err(w, "type", a["type"], f"one of {', '.join(_SCALAR_TYPES)}")
        if role == "const" and "value" not in a:
            raise _err(w, "value", None, "an expression of rows and cols for a const argument")
        for k in ("value", "stride"):
            if k in a:
                evaluate(str(a[k]), 4, 8, where=f"{w}.{k}")  # validates the expression
        out.append(ArgSpec(role, a.get("dtype"), a.get("type"),
                           None if "value" not in a else str(a["value"]),
                           None if "stride" not in a else str(a["stride"]), a.get("name")))
    spec = KernelSpec(args=out, entry=data.get("entry"), norm=data.get("norm"),
                      dtype=data.get("dtype"), out_dtype=data.get("out_dtype"),
                      convention=data.get("convention"))
    if spec.norm is not None and spec.norm not in NORMS:
        raise _err(where, "norm", spec.norm, f"one of {', '.join(NORMS)}")
    for k in ("dtype", "out_dtype"):
        v = getattr(spec, k)
        if v is not None and v not in formats.FORMATS:
            raise _err(where, k, v, "fp32, fp16 or bf16")
    if spec.convention not in (None, "exact", "stored"):
        raise _err(where, "convention", spec.convention, '"exact" or "stored"')
    if "eps" in data:
        e = data["eps"]
        if not isinstance(e, (int, float)) or not e > 0:
            raise _err(where, "eps", e, "a positive number (ε fixed inside the kernel)")
        spec.eps = float(np.float32(e))
    if "cols" in data:
        c = data["cols"]
        if not (isinstance(c, list) and len(c) == 2 and all(isinstance(v, int) for v in c)
                and 1 <= c[0] <= c[1]):
            raise _err(where, "cols", c, "[min, max] supported widths, 1 <= min <= max")
        spec.cols = (c[0], c[1])
    launch = data.get("launch", {})
    if not isinstance(launch, dict):
        raise _err(where, "launch", launch, "a [launch] table with grid, block, shared_mem")
    for k in launch:
        if k not in ("grid", "block", "shared_mem"):
            raise _err(where, f"launch.{k}", launch[k], "grid, block or shared_mem")
        (evaluate_dims if k != "shared_mem" else evaluate)(str(launch[k]), 4, 8,
                                                            where=f"{where}: launch.{k}")
        setattr(spec, k, str(launch[k]))
    roles = spec.roles()
    if "output" not in roles or "input" not in roles:
        raise _err(where, "args", roles, "at least an output and an input argument")
    if spec.eps is None and "eps" not in roles:
        raise _err(where, "eps", None, "an argument with role eps, or eps = <value> when ε is "
                   "fixed inside the kernel")
    return spec


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Div: operator.floordiv}
_FUNCS = {"min": min, "max": max, "ceil_div": lambda a, b: -(-a // b)}


def evaluate_dims(expr: str, rows: int, cols: int, where: str = "expression") -> tuple:
    """A launch dimension: one expression, or up to three separated by commas ("32, 4")."""
    try:
        tree = ast.parse(str(expr), mode="eval").body
    except SyntaxError:
        raise SpecError(f"{where}={expr!r}: not an expression of rows and cols") from None
    parts = tree.elts if isinstance(tree, ast.Tuple) else [tree]
    if not 1 <= len(parts) <= 3:
        raise SpecError(f"{where}={expr!r}: one to three comma-separated expressions")
    return tuple(evaluate(ast.unparse(p), rows, cols, where) for p in parts)


def evaluate(expr: str, rows: int, cols: int, where: str = "expression") -> int:
    """Evaluate an integer expression of rows and cols (no names or calls beyond those)."""
    try:
        tree = ast.parse(str(expr), mode="eval")
    except SyntaxError:
        raise SpecError(f"{where}={expr!r}: not an expression of rows and cols") from None
    env = {"rows": rows, "cols": cols}

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name) and n.id in env:
            return env[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            return _OPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _FUNCS \
                and not n.keywords:
            return _FUNCS[n.func.id](*[ev(a) for a in n.args])
        raise SpecError(f"{where}={expr!r}: only rows, cols, integers, + - * // %, min, max "
                        "and ceil_div are allowed")

    return int(ev(tree))


def scalar_type(a: ArgSpec):
    return _SCALAR_TYPES[a.type or ("float32" if a.role == "eps" else "int32")]
