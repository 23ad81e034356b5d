"""The built-in kernels of ``cuda_src/``: a registry of every variant and a runner.

Each variant is one ``extern "C"`` entry of a file in ``cuda_src/`` (the file's INDEX comment
describes the ideas; ``tests/test_kernels.py`` keeps the registry, the INDEX and the entries
equal).  :func:`run` launches a variant on rows with the kernel ABI of docs/DESIGN.md — one block of 256
threads per row — in chunks of rows, with the outputs poisoned (a NaN with a payload) first so
that an element a
kernel never writes cannot pass for a result (:func:`unwritten` finds them).
"""

from __future__ import annotations

import re
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from normcheck import bounds, formats, launch, norms, oracle, spec as specs
from normcheck.backends import for_source, isolation
from normcheck.errors import invalid

__all__ = ["Variant", "variants", "TRITON_SOURCE", "get", "run", "run_case", "target", "oracle_norm", "reference", "CUDA_SRC",
           "NORMS", "ORDERS", "ALGORITHMS", "KINDS", "QUANT_SOURCE", "QUANT_STORAGES",
           "run_backward_dx", "run_backward_dparams"]

#: The built-in kernels: normcheck/cuda_src in an installed wheel, cuda_src/ at the top of a
#: checkout (or an editable install).
CUDA_SRC = isolation.CUDA_SRC

NORMS = ("layernorm", "rmsnorm", "gemma_rmsnorm", "add_layernorm", "add_rmsnorm")
ORDERS = ("upcast_square", "square_upcast", "storage_accumulate")
ALGORITHMS = ("naive", "two_pass", "welford", "rms")
STORAGES = tuple(formats.FORMATS)
BLOCK = bounds.BLOCK  # the built-ins' block size (the bounds assume it)
#: Rows per launch: bounds the memory of a run whatever the number of rows.
CHUNK_ELEMENTS = 1 << 22

_FILES = {"layernorm": "layernorm.cu", "rmsnorm": "rmsnorm.cu", "gemma_rmsnorm": "rmsnorm.cu",
          "add_layernorm": "add_norm.cu", "add_rmsnorm": "add_norm.cu"}


#: What a built-in computes: the forward norm, the backward's dx (a row each), dγ and dβ (column
#: sums; ``partial`` needs the second launch ``finalize``), or a quantised output (codes and
#: scales, judged under its contract).
KINDS = ("forward", "dx", "dparams", "finalize", "quantised")


@dataclass(frozen=True)
class Variant:
    """One built-in kernel, of every kind: ``name`` is its entry in ``source`` (a Triton
    variant's function is :attr:`entry`).  Fields a kind does not have are None."""

    name: str
    norm: str
    algorithm: str            # naive | two_pass | welford | rms; backward: stable | naive |
    storage: str | None       # article | atomic | partial | storage; quantised: its preset
    source: str
    kind: str = "forward"
    order: str | None = None
    convention: str | None = None
    fast_math: bool = False
    language: str = "cuda"    # "cuda" (a .cu entry) or "triton" (a @triton.jit function)
    format: str | None = None       # quantised: the output format
    granularity: str | None = None  # quantised: per_tensor | per_token | per_group | mx | nvfp4

    @property
    def entry(self) -> str:
        """The kernel in ``source``: the name itself, or (Triton) the function of its
        algorithm, whose precision order is a constexpr argument."""
        return f"triton_{self.norm}_{self.algorithm}" if self.language == "triton" else self.name

    @property
    def fmt(self) -> formats.Format:
        return formats.get(self.storage)

    @property
    def fused(self) -> bool:
        return self.norm.startswith("add_")

    @property
    def has_beta(self) -> bool:
        return norms.get(self.norm).reads_beta

    @property
    def param_fmt(self) -> formats.Format:
        """The format a dparams kernel writes dγ and dβ in: float, or the storage format."""
        return self.fmt if self.algorithm == "storage" else formats.FP32

    @property
    def contract(self):
        """The quantisation contract a quantised built-in implements."""
        from normcheck.quant import contract as qcontract

        return qcontract.preset(self.algorithm, self.granularity, self.format)

    @property
    def path(self) -> Path:
        return CUDA_SRC / self.source

    def spec(self, block: int = None, contract=None) -> specs.KernelSpec:
        """The ABI of the built-in, as a spec: the default ABI of its norm (docs/DESIGN.md,
        "Kernel ABI"), its entry and source, ``block`` threads a row (default BLOCK); a
        quantised one's, under its contract or ``contract`` (the report's matrix)."""
        if self.kind == "quantised":
            return _quantised_spec(self, contract or self.contract)
        if self.kind != "forward":
            return _backward_spec(self, BLOCK if block is None else block)
        sp = specs.default_spec(self.norm, BLOCK if block is None else block)
        sp.launches[0].entry = self.entry
        sp.source = str(self.path)
        if self.language == "triton":  # ORDER and BLOCK_SIZE, constexprs after the ABI's
            sp.launches[0].args += [
                specs.ArgSpec("const", type="int32", name="ORDER",
                              value=str(ORDERS.index(self.order) if self.order else 0)),
                specs.ArgSpec("const", type="int32", name="BLOCK_SIZE",
                              value="min(4096, next_pow2(cols))")]
        if self.convention:
            sp.convention = self.convention
        return sp

    def as_dict(self) -> dict:
        return asdict(self)


def _orders(storage):
    return [None] if storage == "fp32" else list(ORDERS)


def _name(*parts):
    return "_".join(p for p in parts if p)


def _forward() -> list[Variant]:
    out = []
    for norm in NORMS:
        algos = {"layernorm": ["naive", "two_pass", "welford"], "add_layernorm": ["two_pass"]}.get(
            norm, ["rms"])
        for algo in algos:
            for fast in ([False, True] if norm == "layernorm" and algo == "two_pass" else [False]):
                for st in STORAGES:
                    for order in _orders(st):
                        convs = [None] if not norm.startswith("add_") else (
                            ["stored"] if st == "fp32" else ["exact", "stored"])
                        for conv in convs:
                            out.append(Variant(
                                _name(norm, algo, st, order, conv, "fast" if fast else ""),
                                norm, algo, st, _FILES[norm], order=order, convention=conv,
                                fast_math=fast))
    return out


#: The built-in Triton norms (cuda_src/triton/norms.py): LayerNorm naive, two-pass and
#: Welford-style, RMSNorm, each storage and order (Triton's own: the storage is the pointers')
TRITON_SOURCE = "triton/norms.py"
BACKWARD_DX = ("stable", "naive", "article")
BACKWARD_DPARAMS = ("atomic", "partial", "storage")
#: The quantised built-ins (cuda_src/quant_norm.cu, one ABI: its header): each entry of a BOTH
#: line for each of these storages.
QUANT_SOURCE = "quant_norm.cu"
QUANT_STORAGES = ("bf16", "fp16")
_GRAN = {"tensor": "per_tensor", "token": "per_token", "group128": "per_group", "mx": "mx",
         "nvfp4": "nvfp4"}
_QENTRY = re.compile(r"^BOTH\((\w+), (\w+), (true|false), (true|false), ([\w<>, ]+)\)$", re.M)


def _triton() -> list[Variant]:
    return [Variant(_name("triton", norm, algo, st, order), norm, algo, st, TRITON_SOURCE,
                    order=order, language="triton")
            for norm, algos in (("layernorm", ("naive", "two_pass", "welford")),
                                ("rmsnorm", ("rms",)))
            for algo in algos for st in STORAGES for order in _orders(st)]


def _backward() -> list[Variant]:
    out = []
    for st in STORAGES:
        for algo in BACKWARD_DX:
            out.append(Variant(f"layernorm_backward_dx_{algo}_{st}", "layernorm", algo, st,
                               "backward.cu", "dx"))
        out.append(Variant(f"rmsnorm_backward_dx_stable_{st}", "rmsnorm", "stable", st,
                           "backward.cu", "dx"))
        for norm in ("layernorm", "rmsnorm"):
            for algo in BACKWARD_DPARAMS:
                if algo == "storage" and st == "fp32":
                    continue  # float sums in float storage: the partial kernel's
                out.append(Variant(f"{norm}_backward_dparams_{algo}_{st}", norm, algo, st,
                                   "backward.cu", "dparams"))
    out.append(Variant("backward_dparams_finalize", "layernorm", "finalize", None, "backward.cu",
                       "finalize"))
    return out


def _quantised() -> list[Variant]:
    out = []
    for m in _QENTRY.finditer((CUDA_SRC / QUANT_SOURCE).read_text()):
        base = m.group(1)
        norm = "add_rmsnorm" if base.startswith("add_rmsnorm") else base.split("_")[0]
        fmt, gran, preset = base[len(norm) + 1:].split("_")[:3]
        out += [Variant(f"{base}_{st}", norm, preset, st, QUANT_SOURCE, "quantised",
                        format=fmt, granularity=_GRAN[gran]) for st in QUANT_STORAGES]
    return out


_ALL = [*_forward(), *_triton(), *_backward(), *_quantised()]
_BY_NAME = {v.name: v for v in _ALL}


def variants(*, kind="forward", language="cuda", **where) -> list[Variant]:
    """Every built-in of ``kind`` (one of :data:`KINDS`, or None: all) in ``language`` ("cuda",
    "triton", or None: both) whose fields equal ``where``'s values (None: any), e.g.
    ``variants(norm="rmsnorm", storage="bf16")``, ``variants(kind="dx")``."""
    if kind not in (None, *KINDS):
        raise invalid("kind", kind, f"one of {', '.join(KINDS)}, or None for every kind")
    for key in where:
        if key not in Variant.__dataclass_fields__:
            raise invalid(key, where[key], "a field of Variant",
                          f"filter by {', '.join(Variant.__dataclass_fields__)}")
    where = {"kind": kind, "language": language, **where}
    return [v for v in _ALL
            if all(val is None or getattr(v, key) == val for key, val in where.items())]


def get(name, kind=None) -> Variant:
    """The built-in called ``name`` (a Variant passes through), of ``kind`` where given."""
    if isinstance(name, Variant):
        return name
    v = _BY_NAME.get(name)
    if v is None or (kind is not None and v.kind != kind):
        close = [n for n, x in _BY_NAME.items() if str(name) in n and kind in (None, x.kind)][:5]
        raise invalid("variant", name, "the name of a built-in " +
                      (f"{kind} " if kind else "") + "kernel",
                      "list them with `normcheck kernels`" +
                      (f"; did you mean {', '.join(close)}?" if close else ""))
    return v


def _quantised_spec(v: Variant, c) -> specs.KernelSpec:
    from normcheck.quant import contract as qcontract

    n = norms.get(v.norm)
    roles = ["output", "scales" if c.dynamic else "null", "h" if n.fused else "null", "input",
             "residual" if n.fused else "null", "gamma", "beta" if n.centred else "null",
             "scale" if (not c.dynamic or c.granularity == "nvfp4") else "null",
             "amax" if c.name == "te" and c.granularity == "per_tensor" else "null",
             "eps", "rows", "cols"]
    preset = c.name.split("+")[0]
    own = qcontract.preset(preset, c.granularity, c.format)
    data = {"entry": v.name, "norm": v.norm, "dtype": v.storage, "quant": {
        "contract": preset, "granularity": c.granularity, "format": c.format,
        **{k: val for k in qcontract.FIELDS if k not in ("name", "source")
           for val in [getattr(c, k)] if val is not None and getattr(own, k) != val}},
        "launch": {"grid": "rows", "block": "256"},
        "args": [{"role": r} for r in roles]}
    if v.format == "e2m1":
        data["cols_multiple_of"] = 2
    s = specs.parse(data, f"built-in {v.name}")
    s.source = v.path
    return s


def _backward_spec(v: Variant, block: int) -> specs.KernelSpec:
    """The ABI of a backward built-in as a spec: dx, the default backward ABI (a block a row);
    dparams by algorithm -- atomic (a block a row adding into zeroed float dγ, dβ), storage (a
    thread a column, dγ and dβ in the storage format), partial (float partial sums of 32 rows a
    block, then ``backward_dparams_finalize`` adding them up)."""
    if v.kind == "dx":
        sp = specs.default_backward_spec(v.norm, block)
        sp.launches[0].entry, sp.source = v.name, str(v.path)
        return sp
    if v.kind != "dparams":
        raise invalid("variant", v.name, "a kernel with an ABI of its own",
                      f"{v.name} runs as the second launch of the partial dparams kernels")
    centred = norms.get(v.norm).centred
    pf = {"dtype": v.param_fmt.name, **({"fill": "zero"} if v.algorithm == "atomic" else {})}
    outs = [{"role": "dgamma", **pf}, {"role": "dbeta", **pf} if centred else {"role": "null"}]
    ins = [{"role": r} for r in ("dy", "input", "mean" if centred else "null", "rstd", "rows",
                                 "cols")]
    grid = "rows" if v.algorithm == "atomic" else f"ceil_div(cols, {block})"
    launches = [{"entry": v.name, "grid": grid, "block": str(block), "args": outs + ins}]
    if v.algorithm == "partial":
        nb = "ceil_div(rows, 32)"
        parts = [{"role": "scratch", "name": name, "dtype": "fp32", "size": f"{nb} * cols"}
                 for name in (("part_g", "part_b") if centred else ("part_g",))]
        parts += [] if centred else [{"role": "null"}]  # no dβ partials for RMSNorm
        launches = [{"entry": v.name, "grid": nb, "block": str(block), "args": parts + ins + [
                        {"role": "const", "type": "int32", "value": "32"}]},
                    {"entry": "backward_dparams_finalize", "grid": grid, "block": str(block),
                     "args": outs + parts + [{"role": "const", "type": "int32", "value": nb},
                                             {"role": "cols"}]}]
    sp = specs.parse({"norm": v.norm, "dtype": v.storage, "backward": True, "stats": "saved",
                      "launch": launches}, f"built-in {v.name}")
    sp.source = v.path
    return sp


def run_backward_dx(variant, x, dy, gamma, mean, rstd, *, backend="cpu", block=BLOCK,
                    **launch_options) -> np.ndarray:
    """dx of a built-in backward dx kernel on the rows x with upstream gradient dy and the saved
    statistics mean (LayerNorm) and rstd ([rows] float32)."""
    v = get(variant, "dx")
    return _run_backward(v, x, dy, gamma, mean, rstd, backend, block, launch_options)["dx"]


def run_backward_dparams(variant, x, dy, mean, rstd, *, backend="cpu", block=BLOCK,
                         **launch_options):
    """(dγ, dβ or None) of a built-in dparams kernel; ``launch_options`` may set the cpu backend's
    ``schedule``/``seed`` (the atomic kernel's sum follows the blocks' order)."""
    v = get(variant, "dparams")
    outs = _run_backward(v, x, dy, None, mean, rstd, backend, block, launch_options)
    return outs["dgamma"], outs.get("dbeta")


def _run_backward(v, x, dy, gamma, mean, rstd, backend, block, launch_options):
    x = _rows("x", x, v)
    dy = _rows("dy", dy, v, x)
    rows, cols = x.shape
    stats = {}
    for name, a in (("mean", mean if v.norm == "layernorm" else None), ("rstd", rstd)):
        if name == "rstd" or a is not None:
            stats[name] = np.ascontiguousarray(np.asarray(a, np.float32))
            if stats[name].shape != (rows,):
                raise invalid(f"{name}.shape", stats[name].shape, f"({rows},), one per row")
    case = launch.Case(x=x, dy=dy,
                       gamma=_param(gamma, "gamma", cols, v.fmt, 1.0) if v.kind == "dx" else None,
                       **stats)
    tgt = target(v, backend, block, timeout=launch_options.pop("timeout", None))
    return tgt(case, **launch_options)


_modules = {}
_lock = threading.Lock()
_building: dict = {}  # a lock a build key (compiled)


def _key(variant: Variant, backend, options):
    be = for_source(backend, variant.path)
    return be, (be.name, variant.source, tuple(sorted(dict(options or {}).items())))


def is_compiled(variant: Variant, backend="cpu", options=None) -> bool:
    """Whether this process holds the compiled source of ``variant`` already."""
    return _key(variant, backend, options)[1] in _modules


def compiled(variant: Variant, backend="cpu", options=None, module=False):
    """The compiled kernel of ``variant`` (its whole source file is built once per backend and
    options, e.g. {"fmad": True} on cuda); ``module``: every kernel of its file, by entry."""
    be, key = _key(variant, backend, options)
    with _lock:  # one lock a build: builds of different files go on side by side
        building = _building.setdefault(key, threading.Lock())
    with building:
        if key not in _modules:
            entries = list(dict.fromkeys(v.entry for v in _ALL if v.source == variant.source))
            _modules[key] = be.compile_many(variant.path, entries, options=dict(options or {}))
    return _modules[key] if module else _modules[key][variant.entry]


def _rows(name, a, v, like=None):
    """Rows a built-in reads: a 2-D array [rows, cols] in its storage format (of ``like``'s
    shape)."""
    fmt = v.fmt
    if not isinstance(a, np.ndarray) or a.ndim != 2 or a.shape[1] < 1 or (
            like is not None and a.shape != like.shape):
        raise invalid(name, a, "a 2-D numpy array [rows, cols], cols >= 1" +
                      (f", of x's shape {like.shape}" if like is not None else ""))
    if a.dtype != fmt.dtype:
        raise invalid(f"{name}.dtype", str(a.dtype), f"{fmt.dtype} for {v.name}",
                      f"convert with {name}.astype(...) or pick a {formats.of_dtype(a.dtype).name}"
                      " variant" if a.dtype in [f.dtype for f in formats.FORMATS.values()] else
                      "use fp32, fp16 or bf16 rows")
    return np.ascontiguousarray(a)


def _param(a, name, cols, fmt, default):
    if a is None:
        return np.full(cols, default, fmt.dtype)
    if not isinstance(a, np.ndarray) or a.shape != (cols,):
        raise invalid(name, a, f"a 1-D array of {cols} values in {fmt.name}",
                      f"pass np.asarray({name}, dtype=...) with one value per column")
    if a.dtype != fmt.dtype:
        raise invalid(f"{name}.dtype", str(a.dtype), f"{fmt.dtype} (the kernel's storage)",
                      f"convert with {name}.astype(...) — and give the oracle the same values")
    return np.ascontiguousarray(a)


def target(variant, backend="cpu", block=BLOCK, options=None, timeout=None,
           contract=None) -> launch.KernelTarget:
    """The built-in ``variant`` as a :class:`normcheck.launch.KernelTarget` of its spec
    (:meth:`Variant.spec`; a quantised one under its contract, or ``contract``): called on a
    :class:`normcheck.launch.Case`, it returns the outputs by role ("output", "h" for fused
    kernels, "scales"; "dx", "dgamma", "dbeta").  Its source file is compiled once per backend
    and options (:func:`compiled`)."""
    v = get(variant)
    quant = (contract or v.contract) if v.kind == "quantised" else None
    sp = v.spec(block, quant)
    mod = compiled(v, backend, options, module=True)
    return launch.KernelTarget(sp, oracle_norm(v), v.storage,
                               v.storage if v.kind == "forward" else None,
                               {e: mod[e] for e in sp.entries}, timeout, label=v.name,
                               quant=quant, capabilities=for_source(backend, v.path).capabilities)


def run_case(variant, case: launch.Case, backend="cpu", block=BLOCK, options=None,
             **launch_options) -> dict:
    """The outputs by role ("output", "h") of a built-in on a :class:`normcheck.launch.Case`
    through its :func:`target` (β is read only by a norm that has one, as the spec says).  For
    rows that fit in memory at once; :func:`run` streams any number of rows."""
    tgt = target(variant, backend, block, options, launch_options.pop("timeout", None))
    return tgt(case, **launch_options)


def oracle_norm(v: Variant):
    """The Norm a built-in computes (γ always; β where the norm has one)."""
    return norms.get(v.norm).with_affine(True, v.has_beta)


def run(variant, x, gamma=None, beta=None, *, eps=np.float32(1e-5), residual=None,
        backend="cpu", block=BLOCK, options=None, **launch_options):
    """Run a built-in variant on the rows ``x`` ([rows, cols] in the variant's storage dtype)
    through its :func:`target`, :data:`CHUNK_ELEMENTS` at a time.

    Returns y, or (h, y) for fused kernels (which need ``residual``).  γ defaults to ones (zeros
    for Gemma's 1+γ) and β to zeros; RMSNorm variants take no β.
    ``options`` go to the backend's compiler (e.g. {"fmad": True} on cuda); ``launch_options``
    to the kernel call (timeout, schedule, seed, workers)."""
    v = get(variant)
    fmt = v.fmt
    x = _rows("x", x, v)
    rows, cols = x.shape
    if beta is not None and not v.has_beta:
        raise invalid("beta", beta, f"None: {v.norm} has no β", "drop beta")
    if v.fused and residual is None:
        raise invalid("residual", None, f"the residual rows for the fused kernel {v.name}",
                      "pass residual=... of x's shape and dtype")
    if residual is not None and not v.fused:
        raise invalid("residual", residual, f"None: {v.name} is not a fused kernel")
    residual = _rows("residual", residual, v, x) if v.fused else None
    g = _param(gamma, "gamma", cols, fmt, 0.0 if v.norm == "gemma_rmsnorm" else 1.0)
    b = _param(beta, "beta", cols, fmt, 0.0) if v.has_beta else None
    tgt = target(v, backend, block, options, launch_options.pop("timeout", None))
    eps = np.float32(eps)
    y = np.empty_like(x)
    h = np.empty_like(x) if v.fused else None
    step = max(1, CHUNK_ELEMENTS // cols)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        case = launch.Case(x=x[r0:r1], gamma=g, beta=b, eps=eps,
                           residual=residual[r0:r1] if v.fused else None)
        outs = tgt(case, **launch_options)
        y[r0:r1] = outs["output"]
        if v.fused:
            h[r0:r1] = outs["h"]
    return (h, y) if v.fused else y


def reference(variant, x, gamma=None, beta=None, *, eps=np.float32(1e-5), residual=None):
    """The oracle's reference for what ``variant`` computes on these rows, and the rows it
    normalises as float64 (x, or h for fused kernels: exact or stored per the convention)."""
    v = get(variant)
    ref = oracle.for_norm(v.norm, x, gamma, beta, residual=residual, eps=eps,
                          convention=v.convention or "exact")
    return ref, oracle.normalised_rows(ref, x, residual, v.convention)
