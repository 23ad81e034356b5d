"""What a check is asked to do, as one object the command line and the Python API share.

``normcheck check`` builds a :class:`CheckOptions` from its arguments (:meth:`from_args`) and
calls :func:`normcheck.check.run`; :func:`normcheck.check.check_kernel` and
:func:`normcheck.check.backward.check_backward` take the same fields as keywords.  The options
one kind of check has and the other has not are refused here, once, for both.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from normcheck.errors import invalid

__all__ = ["CheckOptions", "FORWARD_ONLY", "BACKWARD_ONLY"]

#: Options a backward check has no use for: (field, its default, why).
FORWARD_ONLY = (("rows", None, "a backward check has no long run"),
                ("cols", None, "a backward check has no long run"),
                ("reference", None, "a backward check has one definition"),
                ("out_dtype", None, "a backward check's output formats come from its spec"),
                ("quant", None, "a backward check has no quantised output"),
                ("search", 40, "a backward check has no targeted search"),
                ("arch", None, "a backward check builds for the default architecture"))
#: Options only a backward check has.
BACKWARD_ONLY = (("orders", None, "only a backward check measures block orders of dγ/dβ"),)


@dataclass
class CheckOptions:
    """Every option of a check (the command line's names; see ``normcheck check --help``)."""

    source: object = None      # the .cu file (or CUDA C text, from the API)
    entry: str | None = None   # the kernel, or a template instantiation
    norm: str | None = None
    dtype: str | None = None
    spec: object = None        # a TOML spec path or a KernelSpec
    block: int = 256           # threads per block (the default ABI)
    backend: str = "cpu"
    defines: dict | None = None
    include: tuple = ()        # -I folders: searched by #include, allowed to a spec's paths
    reference: str | None = None
    out_dtype: str | None = None
    quant: object = None       # a contract table, a preset name or a Contract
    arch: object = None
    examples: int = 64
    search: int = 40
    seed: int = 0
    timeout: float | None = None
    rows: int | None = None    # a long run of this many rows ...
    cols: int | None = None    # ... of this width
    save_counterexample: str | None = None
    backward: bool = False
    orders: int | None = None  # backward: block orders of dγ/dβ (None: the default)

    @classmethod
    def from_args(cls, args, defines=None, quant=None) -> "CheckOptions":
        """The options of a parsed ``normcheck check`` command line (``defines`` and ``quant``
        as parsed from their flags)."""
        kw = {f.name: getattr(args, f.name) for f in fields(cls)
              if f.name not in ("defines", "quant", "include") and hasattr(args, f.name)}
        return cls(**kw, defines=defines, quant=quant, include=tuple(getattr(args, "include", ())))

    def forward(self) -> dict:
        """The keywords of :func:`normcheck.check.check_kernel`."""
        for name, default, why in BACKWARD_ONLY:
            if getattr(self, name) != default:
                raise invalid(f"--{name}", getattr(self, name), "nothing without --backward",
                              why)
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("backward", "orders")}

    def backward_kwargs(self) -> dict:
        """The keywords of :func:`normcheck.check.backward.check_backward`."""
        for name, default, why in FORWARD_ONLY:
            v = getattr(self, name)
            if v != default:
                raise invalid(f"--{name.replace('_', '-')}", v, "nothing with --backward",
                              why)
        kw = {f.name: getattr(self, f.name) for f in fields(self)
              if f.name in ("source", "entry", "norm", "dtype", "spec", "block", "backend",
                            "defines", "include", "examples", "seed", "timeout",
                            "save_counterexample")}
        if self.orders is not None:
            kw["orders"] = self.orders
        return kw
