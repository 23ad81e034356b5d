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

import time

import numpy as np

from normcheck import formats, launch, norms, parts, spec as specs
from normcheck.oracle import exact
from normcheck.check import engine
from normcheck.check.engine import FATAL, Failure, assemble
from normcheck.check.judge import (CHECK_FAMILIES, Baseline, FamilyResult, ForwardJudge,
                                   Worst)
from normcheck.check.resolve import (LIMITS, check_cols, check_counts, long_run, resolve)
from normcheck.check.options import CheckOptions
from normcheck.check.result import CheckResult, ForwardDetail
from normcheck.check.tolerances import STATISTICS, TOLERANCES, Tolerance
from normcheck.errors import SandboxViolation, invalid
from normcheck.metrics import to_json

__all__ = ["check_kernel", "check_callable", "run", "CheckOptions", "CheckResult", "FamilyResult", "Failure", "Worst",
           "Baseline", "Tolerance", "TOLERANCES", "STATISTICS", "CHECK_FAMILIES", "LIMITS",
           "to_json"]

def _quant_args(spec, contract, rows, reference, out_dtype):
    for name, v in (("rows", rows), ("reference", reference), ("out_dtype", out_dtype)):
        if v is not None:
            raise invalid(name, v, f"no {name} with a quantised output",
                          {"rows": "a quantised check runs its families only",
                           "reference": "the contract's y_rounding says it (quant.contract)",
                           "out_dtype": "quant.format is the output's format"}[name])
    roles = spec.roles()
    if contract.dynamic and "scales" not in roles:
        raise invalid("spec.args", roles, f"a role scales for {contract.granularity} scales",
                      "add [[args]] with role = \"scales\"")
    if (not contract.dynamic or contract.granularity == "nvfp4") and "scale" not in roles:
        raise invalid("spec.args", roles, "a role scale (the static scale)",
                      "add [[args]] with role = \"scale\"")


def _judge(target, *, contract, norm: norms.Norm, fmt, out, convention, eps, backend, examples,
           search_examples, seed, cols_range, cols_multiple_of, stats_roles,
           save_counterexample, kernel_desc, long=None, progress=None, arch=None) -> CheckResult:
    """The check of a bound target: the quantised one under a contract, else the forward one
    (families, long run, search)."""
    label = target.label
    if contract is not None:
        from normcheck.check.quantised import judge_quantised

        return judge_quantised(target, label=label, norm=norm, storage=fmt, contract=contract,
                               eps=eps, backend=backend, examples=examples, seed=seed,
                               cols_range=cols_range, cols_multiple_of=cols_multiple_of,
                               kernel_desc=kernel_desc, arch=arch,
                               save_counterexample=save_counterexample)
    t0 = time.perf_counter()
    judge = ForwardJudge(target, norm, fmt, out, convention=convention, eps=eps, backend=backend,
                  seed=seed, cols_range=cols_range, cols_multiple_of=cols_multiple_of,
                  stats_roles=stats_roles)
    fams = CHECK_FAMILIES
    results, failures, warnings, worst = judge.run(fams, examples)
    large = judge.run_large_index() if not any(f.kind in FATAL for f in failures) else None
    if large is not None:
        fr, f, w, note = large
        judge.notes.append(note)
        if fr is not None:
            results.append(fr)
            failures += f
            if w is not None and (worst is None or w.rank > worst.rank):
                worst = w
    if long is not None and not any(f.kind in FATAL for f in failures):
        fr, f, w = judge.run_long(*long, progress=progress)
        results.append(fr)
        failures += f
        if w is not None and (worst is None or w.rank > worst.rank):
            worst = w
    search_stats = None
    if search_examples and not any(f.kind in FATAL for f in failures):
        search_stats, f, w = judge.search(fams, search_examples)
        if f is not None:
            failures.append(f)
            if worst is None or w.rank > worst.rank:  # the worst of all, not the last found
                worst = w
    return assemble(
        kernel=label, norm=norm, dtype=judge.fmt.name, out_dtype=judge.out.name,
        backend=getattr(judge.target, "backend", None) or backend, failures=failures, warnings=warnings, families=results,
        tolerance=judge.tol, t0=t0, worst=worst, arch=arch,
        save=engine.saver(judge, worst, save_counterexample, kernel_desc, label),
        rows_checked=sum(fr.rows for fr in results) + (search_stats["examples"]
                                                       if search_stats else 0),
        baseline_note=judge.baseline_note, search=search_stats, yardstick=bool(judge.baselines),
        detail=ForwardDetail(_peak_rss_mib(), judge.spreads or None, judge.notes or None))


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


def _peak_rss_mib() -> float:
    """This process's peak resident memory so far (MiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _failed_at_load(e, source, entry, norm, dtype, spec, out_dtype, backend, t0, include):
    """The verdict on a kernel file whose code broke the sandbox while it loaded (a static
    constructor's forbidden call, a forged reply): a fail of kind sandbox -- no row was run,
    and none needs to be: no sound kernel does that."""
    if spec is not None and not isinstance(spec, specs.KernelSpec):
        spec = specs.load(spec, roots=include)
    n = norms.get(norm or (spec.norm if spec is not None else None) or "rmsnorm")
    fmt = formats.get(dtype or (spec.dtype if spec is not None else None) or "fp32")
    out = formats.get(out_dtype or (spec.out_dtype if spec is not None else None) or fmt.name)
    f = Failure("sandbox", "load", str(e))
    return assemble(
        kernel=entry or (spec.entries[0] if spec is not None and spec.entries else None)
        or str(source), norm=n, dtype=fmt.name, out_dtype=out.name, backend=backend,
        failures=[f], warnings=[], families=[], tolerance=TOLERANCES[out.name], t0=t0)


def run(options: CheckOptions, progress=None) -> CheckResult:
    """The check ``options`` ask for (forward, or backward with ``options.backward``): what the
    command line calls, with the options it parsed."""
    if options.backward:
        from normcheck.check.backward import check_backward

        return check_backward(**options.backward_kwargs())
    return check_kernel(**options.forward(), progress=progress)


def check_kernel(source=None, entry=None, norm=None, dtype=None, *, block=256, spec=None,
                 backend="cpu", defines=None, reference=None, out_dtype=None, examples=64,
                 search=40, seed=0, timeout=None, save_counterexample=None, rows=None,
                 cols=None, progress=None, arch=None, quant=None, include=()) -> CheckResult:
    """Judge a CUDA C kernel (see the module docstring).  ``spec`` is a path, a KernelSpec or
    None for the default ABI; entry/norm/dtype may come from the spec; ``defines`` add to the
    spec's.  ``rows`` adds a long run of that many rows of width ``cols`` (streamed in bounded
    memory; ``progress(done, rows, rows_per_s)`` is called every few seconds).  ``quant`` (a
    contract table, a preset name or a Contract; else the spec's ``quant``) judges a quantised
    output (normcheck.check.quantised).  ``include``: folders searched by #include that a spec's
    paths may also lie beneath (the command line's ``-I``)."""
    check_counts(examples, search, seed)
    prep = parts.prepare(backend if backend != "auto" else "cpu",
                         _baseline_variants(spec, norm, dtype, source))
    t0 = time.perf_counter()
    try:
        r = resolve(source, entry, norm, dtype, spec=spec, block=block, backend=backend,
                    defines=defines, reference=reference, out_dtype=out_dtype, timeout=timeout,
                    arch=arch, quant=quant, include=tuple(include))
    except SandboxViolation as e:  # code that runs as the module loads (a static constructor)
        prep.wait()
        return _failed_at_load(e, source, entry, norm, dtype, spec, out_dtype, backend, t0,
                               tuple(include))
    prep.wait()
    spec, n, fmt, out, contract, target = r.spec, r.norm, r.fmt, r.out, r.contract, r.target
    if contract is not None:
        _quant_args(spec, contract, rows, reference, out_dtype)
    return _with_headers(target, _judge(
        target, contract=contract, norm=n, fmt=fmt, out=out, convention=spec.convention,
        eps=r.eps, backend=r.backend, examples=examples, search_examples=search, seed=seed,
        cols_range=spec.cols, cols_multiple_of=spec.cols_multiple_of,
        stats_roles=[role for role in specs.STAT_ROLES if spec.has(role)],
        save_counterexample=save_counterexample, kernel_desc=r.desc,
        long=long_run(rows, cols, spec.cols, spec.cols_multiple_of), progress=progress,
        arch=r.arch))


def _with_headers(target, result):
    """The framework and library headers the kernel's build read, in its provenance."""
    used = {}
    for k in getattr(target, "kernels", {}).values():
        used.update(getattr(getattr(k, "module", None), "frameworks", None) or {})
    if used and isinstance(getattr(result, "provenance", None), dict):
        result.provenance["headers"] = used
    return result


def check_callable(fn, norm, dtype, *, out_dtype=None, convention="exact",
                   eps=np.float32(1e-5), reference="exact", examples=64, search=40, seed=0,
                   cols=(1, 8192), backend="cpu", save_counterexample=None,
                   name=None, rows=None, long_cols=None, progress=None,
                   quant=None) -> CheckResult:
    """Judge a Python function on the stored rows (numpy, or torch returning tensors):
    fn(x, gamma, beta, eps) -> y; fused norms fn(x, residual, gamma, beta, eps) -> (h, y);
    β is None for RMSNorm.  An exception it raises is a failure of kind ``error``.  The
    built-in orders (the warn yardstick) run on ``backend``.

    With ``quant`` (a contract: a table, a preset name or a Contract) the function quantises:
    fn(x, gamma, beta, eps, scale) -> q, or (q, scales) for a dynamic contract; fused norms
    fn(x, residual, gamma, beta, eps, scale) -> (h, q[, scales]).  ``scale`` is the static
    scale (nvfp4: the encode scale) or None; q are float values (numpy, ml_dtypes float8/4,
    torch float8 tensors) or uint8 codes, scales float values (or e8m0/ue4m3 codes)."""
    check_counts(examples, search, seed)
    if not callable(fn):
        raise invalid("fn", fn, "a callable")
    if convention not in ("exact", "stored"):
        raise invalid("convention", convention, '"exact" or "stored"')
    from normcheck.quant import contract as qcontract

    c = None if quant is None else qcontract.resolve(quant)
    n, fmt = norms.get(norm), formats.get(dtype)
    n, out = (n, None) if c else (n.with_reference(reference), formats.get(out_dtype or dtype))
    lo, hi = check_cols(cols)
    label = name or getattr(fn, "__name__", "callable")
    return _judge(launch.CallableTarget(fn, n, fmt, out, label, quant=c), contract=c, norm=n,
                  fmt=fmt, out=out, convention=convention, eps=np.float32(exact.check_eps(eps)),
                  backend=backend, examples=examples, search_examples=search, seed=seed,
                  cols_range=(lo, hi), cols_multiple_of=1, stats_roles=[],
                  save_counterexample=save_counterexample,
                  kernel_desc={"callable": label, "norm": n.name, "dtype": fmt.name},
                  long=long_run(rows, long_cols, (lo, hi), 1), progress=progress)
