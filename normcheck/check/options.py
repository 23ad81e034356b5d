"""What a check is asked to do, as one object the command line and the Python API share.

``normcheck check`` builds a :class:`CheckOptions` from its arguments (:meth:`from_args`) and
calls :func:`normcheck.check.run`; :func:`normcheck.check.check_kernel` and
:func:`normcheck.check.check_backward` take the same fields as keywords.  The options
one kind of check has and the other has not are refused here, once, for both.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from normcheck.errors import invalid


def _of(cls, where: str, kw: dict):
    """``cls(**kw)``, an unknown name refused as the API's argument error."""
    names = {f.name for f in fields(cls)}
    for k in kw:
        if k not in names:
            raise invalid(k, kw[k], f"one of {where}'s options: {', '.join(sorted(names))}",
                          "check the spelling")
    return cls(**kw)

__all__ = ["CheckOptions", "CallableOptions", "FORWARD_ONLY", "BACKWARD_ONLY"]

#: Options a backward check has no use for: (field, its default, why).
FORWARD_ONLY = (("rows", None, "a backward check has no long run"),
                ("cols", None, "a backward check has no long run"),
                ("reference", None, "a backward check has one definition"),
                ("out_dtype", None, "a backward check's output formats come from its spec"),
                ("dtypes", None, "a backward check's formats come from its spec"),
                ("quant", None, "a backward check has no quantised output"),
                ("search", 40, "a backward check has no targeted search"),
                ("arch", None, "a backward check builds for the default architecture"))
#: Options only a backward check has.
BACKWARD_ONLY = (("orders", None, "only a backward check measures block orders of dγ/dβ"),
                 ("families", None, "a forward check runs all its families"))


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
    dtypes: dict | None = None  # a role's own format: {role: name} (--dtypes x=e4m3,gamma=fp32)
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
    families: tuple | None = None  # backward: some of BACKWARD_FAMILIES (None: all)

    @classmethod
    def from_args(cls, args, defines=None, quant=None, dtypes=None) -> "CheckOptions":
        """The options of a parsed ``normcheck check`` command line (``defines``, ``quant`` and
        ``dtypes`` as parsed from their flags)."""
        kw = {f.name: getattr(args, f.name) for f in fields(cls)
              if f.name not in ("defines", "quant", "include", "dtypes") and
              hasattr(args, f.name)}
        return cls(**kw, defines=defines, quant=quant, dtypes=dtypes,
                   include=tuple(getattr(args, "include", ())))

    @classmethod
    def of(cls, **kw) -> "CheckOptions":
        """The options of the API's keywords (an unknown one refused by name)."""
        return _of(cls, "check_kernel", kw)

    def for_forward(self) -> "CheckOptions":
        """These options, checked for a forward check (a backward-only one refused)."""
        for name, default, why in BACKWARD_ONLY:
            if getattr(self, name) != default:
                raise invalid(f"--{name}", getattr(self, name), "nothing without --backward",
                              why)
        return replace(self, backward=False)

    def for_backward(self) -> "CheckOptions":
        """These options, checked for a backward check (a forward-only one refused)."""
        for name, default, why in FORWARD_ONLY:
            v = getattr(self, name)
            if v != default:
                raise invalid(f"--{name.replace('_', '-')}", v, "nothing with --backward",
                              why)
        return replace(self, backward=True)


@dataclass
class CallableOptions:
    """The options of :func:`normcheck.check.check_callable` (a Python function on the rows)."""

    out_dtype: str | None = None
    convention: str | None = None  # fused: normalise the "exact" or the "stored" sum; None: either
    eps: object = np.float32(1e-5)
    reference: str = "exact"
    examples: int = 64
    search: int = 40
    seed: int = 0
    cols: tuple = (1, 8192)     # the widths the function takes
    backend: str = "cpu"        # where the built-in yardsticks run
    save_counterexample: str | None = None
    name: str | None = None     # the label (default: the function's __name__)
    rows: int | None = None     # a long run of this many rows ...
    long_cols: int | None = None  # ... of this width
    progress: object = None
    quant: object = None        # a quantised output's contract

    @classmethod
    def of(cls, **kw) -> "CallableOptions":
        """The options of the API's keywords (an unknown one refused by name)."""
        return _of(cls, "check_callable", kw)
