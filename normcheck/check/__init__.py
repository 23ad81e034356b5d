"""`normcheck check`: judge a kernel nobody here wrote against the oracle.

Three verdicts -- pass, warn, fail -- each computed from a measurement (normcheck.check.judge;
the table of what is allowed, with a reason per entry, is normcheck.check.tolerances):

* **fail** only what no sound kernel would do on that row: beyond the sound bound of
  normcheck.bounds (a float-accumulating two-pass, Welford or RMS kernel with the worst
  summation order and one final rounding), or a non-finite answer, an unwritten element, a
  crash, an out-of-bounds or misaligned access, a deadlock, a timeout, a sandbox violation, an
  exception raised by the function under check;
* **warn** within that bound, but more than k times the error of the best built-in order on the
  same rows;
* **pass** otherwise.

Accuracy fails and warns name their likely cause (normcheck.check.diagnose).  The reference
definition is the exact function, or Hugging Face's Llama-family RMSNorm (``reference="hf"``).

Python API: :func:`check_kernel` (a CUDA C kernel with or without a spec),
:func:`check_callable` (a numpy or torch function on the stored rows).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from normcheck import formats, launch, norms, parts, spec as specs
from normcheck.oracle import exact
from normcheck.check import engine, kinds
# the kinds of check, each registered as its module loads (normcheck.check.kinds)
from normcheck.check import backward, forward, quantised  # noqa: F401
from normcheck.check.engine import Failure, assemble
from normcheck.check.judge import CHECK_FAMILIES, Baseline, FamilyResult, Worst
from normcheck.check.resolve import LIMITS, check_cols, check_counts, long_run, resolve
from normcheck.check.options import CallableOptions, CheckOptions
from normcheck.check.result import CheckResult
from normcheck.check.tolerances import STATISTICS, TOLERANCES, Tolerance
from normcheck.errors import NormcheckError, SandboxViolation, invalid
from normcheck.metrics import to_json

__all__ = ["check_kernel", "check_callable", "check_backward", "run", "CheckOptions",
           "CallableOptions", "CheckResult", "FamilyResult", "Failure", "Worst",
           "Baseline", "Tolerance", "TOLERANCES", "STATISTICS", "CHECK_FAMILIES", "LIMITS",
           "to_json"]

def _baseline_variants(spec, norm, dtype, source=None) -> list:
    """The CUDA built-ins a check of this norm and format will run as its yardstick (to build
    them beside the user's kernel); [] where they cannot be told yet, or where there is nothing
    to build (a Triton kernel's yardstick is Triton's)."""
    from normcheck import kernels
    from normcheck.backends.triton.backend import is_triton

    try:
        if spec is not None and not isinstance(spec, specs.KernelSpec):
            spec = specs.load(spec)
        if is_triton(source if source is not None else getattr(spec, "source", None)):
            return []
        norm = norm or (spec.norm if spec is not None else None)
        dtype = dtype or (spec.dtype if spec is not None else None)
        if norm is None or dtype is None:
            return []
        return kernels.variants(norm=norms.get(norm).name, storage=formats.get(dtype).name,
                                fast_math=False)[:1]
    except Exception:  # a bad spec or name: resolve says what is wrong
        return []


def _failed_at_load(e, o: CheckOptions, t0) -> CheckResult:
    """The verdict on a kernel file whose code broke the sandbox while it loaded (a static
    constructor's forbidden call, a forged reply): a fail of kind sandbox -- no row was run,
    and none needs to be: no sound kernel does that."""
    spec = o.spec
    if spec is not None and not isinstance(spec, specs.KernelSpec):
        spec = specs.load(spec, roots=tuple(o.include))
    n = norms.get(o.norm or (spec.norm if spec is not None else None) or "rmsnorm")
    fmt = formats.get(o.dtype or (spec.dtype if spec is not None else None) or "fp32")
    out = formats.get(o.out_dtype or (spec.out_dtype if spec is not None else None) or fmt.name)
    f = Failure("sandbox", "load", str(e))
    return assemble(engine.Findings(
        kernel=o.entry or (spec.entries[0] if spec is not None and spec.entries else None)
        or str(o.source), norm=n, dtype=fmt.name, out_dtype=out.name, backend=o.backend,
        failures=[f], warnings=[], families=[], tolerance=TOLERANCES[out.name], t0=t0))


def run(options: CheckOptions, progress=None) -> CheckResult:
    """The check ``options`` ask for: the options checked for their kind (forward, or backward
    with ``options.backward``), the kernel resolved once (normcheck.check.resolve) and handed to
    the kind of check that claims it (normcheck.check.kinds: forward, quantised, backward).
    What the command line calls, with the options it parsed; ``progress(done, rows,
    rows_per_s)`` every few seconds of a long run."""
    if not options.backward and _spec_says_backward(options.spec):
        options = dataclasses.replace(options, backward=True)  # backward = true: no flag needed
    o = options.for_backward() if options.backward else options.for_forward()
    check_counts(o.examples, o.search if not o.backward else 0, o.seed)
    prep = parts.prepare(o.backend if o.backend != "auto" else "cpu",
                         [] if o.backward else
                         _baseline_variants(o.spec, o.norm, o.dtype, o.source))
    t0 = time.perf_counter()
    try:
        r = resolve(o)
    except SandboxViolation as e:  # code that runs as the module loads (a static constructor)
        prep.wait()
        return _failed_at_load(e, o, t0)
    prep.wait()
    kind = kinds.of(o.backward, r.contract)
    result = _with_headers(r.target, kind.check(r, o, progress))
    if r.tells and hasattr(result.detail, "notes"):  # said with the verdict, whatever it is
        result.detail.notes = [*(result.detail.notes or []), (
            "the source names normcheck's own emulation (" + "; ".join(r.tells) + "): a kernel "
            "that behaves otherwise under test is sound only under test -- a GPU build sees "
            "none of these names")]
    return result


def _spec_says_backward(spec) -> bool:
    """Whether a spec (a path or a KernelSpec) is a backward kernel's (``backward = true``, or
    its backward roles): a check of it is a backward check without --backward (#68).  A spec
    that does not load says so where the check loads it."""
    if spec is None:
        return False
    if not hasattr(spec, "backward"):
        try:
            spec = specs.load(spec)
        except NormcheckError:
            return False
    return bool(spec.backward)


def check_kernel(source=None, entry=None, norm=None, dtype=None, **options) -> CheckResult:
    """Judge a CUDA C or Triton kernel (see the module docstring).  ``options`` are
    :class:`CheckOptions`' fields (an unknown one is refused by name): ``spec`` a path, a
    KernelSpec or None for the default ABI (entry/norm/dtype may come from it), ``defines``
    adding to the spec's, ``dtypes`` a role's own format, ``rows``/``cols`` a long run
    (streamed in bounded memory; ``progress(done, rows, rows_per_s)`` every few seconds),
    ``quant`` a quantised output's contract (a table, a preset name or a Contract; else the
    spec's), ``include`` folders searched by #include and allowed to a spec's paths (-I),
    ``examples``, ``search``, ``seed``, ``timeout``, ``save_counterexample``, ``backend``,
    ``block``, ``reference``, ``out_dtype``, ``arch``."""
    progress = options.pop("progress", None)
    return run(CheckOptions.of(source=source, entry=entry, norm=norm, dtype=dtype, **options),
               progress)


def check_backward(source=None, entry=None, norm=None, dtype=None, **options) -> CheckResult:
    """Judge a backward kernel (normcheck.check.backward).  ``options`` are
    :class:`CheckOptions`' fields a backward check has (spec, block, backend, defines, include,
    examples, seed, timeout, save_counterexample, orders, families).  Without ``spec`` the
    kernel has the ABI of cuda_src/backward.cu's dx kernels: (dx, dy, x, γ, mean, rstd, rows,
    cols).  ``families`` selects some of normcheck.families.BACKWARD_FAMILIES (default: all)."""
    return run(CheckOptions.of(source=source, entry=entry, norm=norm, dtype=dtype,
                               backward=True, **options))


def _with_headers(target, result):
    """The framework and library headers the kernel's build read, in its provenance."""
    used = {}
    for k in getattr(target, "kernels", {}).values():
        used.update(getattr(getattr(k, "module", None), "frameworks", None) or {})
    if used and isinstance(getattr(result, "provenance", None), dict):
        result.provenance["headers"] = used
    return result


def check_callable(fn, norm, dtype, **options) -> CheckResult:
    """Judge a Python function on the stored rows (numpy, or torch returning tensors):
    fn(x, gamma, beta, eps) -> y; fused norms fn(x, residual, gamma, beta, eps) -> (h, y);
    β is None for RMSNorm.  An exception it raises is a failure of kind ``error``.  The
    built-in orders (the warn yardstick) run on ``backend``.  ``options`` are
    :class:`CallableOptions`' fields (out_dtype, convention, eps, reference, examples, search,
    seed, cols, backend, save_counterexample, name, rows, long_cols, progress, quant).

    With ``quant`` (a contract: a table, a preset name or a Contract) the function quantises:
    fn(x, gamma, beta, eps, scale) -> q, or (q, scales) for a dynamic contract; fused norms
    fn(x, residual, gamma, beta, eps, scale) -> (h, q[, scales]).  ``scale`` is the static
    scale (nvfp4: the encode scale) or None; q are float values (numpy, ml_dtypes float8/4,
    torch float8 tensors) or uint8 codes, scales float values (or e8m0/ue4m3 codes)."""
    o = CallableOptions.of(**options)
    check_counts(o.examples, o.search, o.seed)
    if not callable(fn):
        raise invalid("fn", fn, "a callable")
    if o.convention not in (None, "exact", "stored"):
        raise invalid("convention", o.convention, '"exact", "stored" or None (either)')
    from normcheck.quant import contract as qcontract

    c = None if o.quant is None else qcontract.resolve(o.quant)
    n, fmt = norms.get(norm), formats.get(dtype)
    n, out = (n, None) if c else (n.with_reference(o.reference),
                                  formats.get(o.out_dtype or dtype))
    lo, hi = check_cols(o.cols)
    label = o.name or getattr(fn, "__name__", "callable")
    setup = engine.Setup(norm=n, fmt=fmt, out=out, contract=c, convention=o.convention,
                         eps=np.float32(exact.check_eps(o.eps)), backend=o.backend,
                         seed=o.seed, cols_range=(lo, hi),
                         desc={"callable": label, "norm": n.name, "dtype": fmt.name})
    runs = engine.Runs(examples=o.examples, search=o.search,
                       long=long_run(o.rows, o.long_cols, (lo, hi), 1),
                       save=o.save_counterexample, progress=o.progress)
    return kinds.of(False, c).judge(launch.CallableTarget(fn, n, fmt, out, label, quant=c),
                                    setup, runs)
