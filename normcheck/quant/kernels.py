"""The built-in quantised kernels of ``cuda_src/quant_norm.cu``, each with the spec that checks it.

Every entry has one ABI (the file's header): (q, scales, h, x, residual, gamma, beta, scale,
amax, eps, rows, cols), a null pointer where an entry has no such buffer.  A built-in is checked
as a user's kernel is -- through a spec (:func:`spec`) and normcheck.check.check_kernel -- under
the contract it implements (:attr:`QVariant.contract`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from normcheck import kernels, norms
from normcheck import spec as specs
from normcheck.errors import invalid
from normcheck.quant import contract as qcontract

__all__ = ["QVariant", "variants", "get", "spec", "SOURCE", "STORAGES"]

SOURCE = "quant_norm.cu"
STORAGES = ("bf16", "fp16")
_GRAN = {"tensor": "per_tensor", "token": "per_token", "group128": "per_group", "mx": "mx",
         "nvfp4": "nvfp4"}
_ENTRY = re.compile(r"^BOTH\((\w+), (\w+), (true|false), (true|false), ([\w<>, ]+)\)$", re.M)


@dataclass(frozen=True)
class QVariant:
    name: str          # the entry
    norm: str
    format: str
    granularity: str
    preset: str
    storage: str

    @property
    def contract(self) -> qcontract.Contract:
        return qcontract.preset(self.preset, self.granularity, self.format)

    @property
    def base(self) -> str:
        """The name without the storage suffix."""
        return self.name.rsplit("_", 1)[0]


def _build():
    text = (kernels.CUDA_SRC / SOURCE).read_text()
    out = []
    for m in _ENTRY.finditer(text):
        base = m.group(1)
        parts = base.split("_")
        norm = "add_rmsnorm" if base.startswith("add_rmsnorm") else parts[0]
        k = 2 if norm == "add_rmsnorm" else 1
        fmt, gran, preset = parts[k], parts[k + 1], parts[k + 2]
        for st in STORAGES:
            out.append(QVariant(f"{base}_{st}", norm, fmt, _GRAN[gran], preset, st))
    return out


_VARIANTS = _build()


def variants(*, norm=None, storage=None, granularity=None, preset=None) -> list[QVariant]:
    sel = _VARIANTS
    for k, v in (("norm", norm), ("storage", storage), ("granularity", granularity),
                 ("preset", preset)):
        if v is not None:
            sel = [x for x in sel if getattr(x, k) == v]
    return list(sel)


def get(name) -> QVariant:
    if isinstance(name, QVariant):
        return name
    for v in _VARIANTS:
        if v.name == name:
            return v
    raise invalid("variant", name, "a built-in quantised kernel",
                  "list them with normcheck.quant.kernels.variants()")


def spec(v: QVariant, contract=None) -> specs.KernelSpec:
    """The spec of a built-in (optionally judged under another ``contract``: the report's
    matrix of contracts)."""
    v = get(v)
    c = contract or v.contract
    n = norms.get(v.norm)
    roles = ["output", "scales" if c.dynamic else "null", "h" if n.fused else "null", "input",
             "residual" if n.fused else "null", "gamma", "beta" if n.centred else "null",
             "scale" if (not c.dynamic or c.granularity == "nvfp4") else "null",
             "amax" if c.name == "te" and c.granularity == "per_tensor" else "null",
             "eps", "rows", "cols"]
    quant = {k: getattr(c, k) for k in qcontract.FIELDS if k != "name"}
    quant = {k: v for k, v in quant.items() if v is not None and k not in ("source",)}
    data = {"entry": v.name, "norm": v.norm, "dtype": v.storage, "quant": {
        "contract": c.name.split("+")[0], "granularity": c.granularity, "format": c.format,
        **{k: val for k, val in quant.items()
           if getattr(qcontract.preset(c.name.split("+")[0], c.granularity, c.format), k) != val}},
        "launch": {"grid": "rows", "block": "256"},
        "args": [{"role": r} for r in roles]}
    if v.format == "e2m1":
        data["cols_multiple_of"] = 2
    s = specs.parse(data, f"built-in {v.name}")
    s.source = kernels.CUDA_SRC / SOURCE
    return s


_modules = {}


def target(v: QVariant, contract=None, backend="cpu", timeout=None):
    """A KernelTarget of the built-in under its contract (or ``contract``): the whole source
    file is compiled once per backend."""
    from normcheck import launch
    from normcheck.backends import get_backend

    v = get(v)
    c = contract or v.contract
    be = get_backend(backend)
    if be.name not in _modules:
        _modules[be.name] = be.compile_many(kernels.CUDA_SRC / SOURCE,
                                            [x.name for x in _VARIANTS])
    s = spec(v, c)
    return launch.KernelTarget(s, norms.get(v.norm), v.storage, None,
                               {v.name: _modules[be.name][v.name]}, timeout, quant=c)
