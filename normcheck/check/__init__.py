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

import hashlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from normcheck import formats, launch, norms, oracle, replay, spec as specs
from normcheck.backends import get_backend
from normcheck.check.judge import (CHECK_FAMILIES, FATAL, Baseline, Failure, FamilyResult, Judge,
                                   Worst)
from normcheck.check.render import render
from normcheck.check.tolerances import STATISTICS, TOLERANCES, Tolerance, Verdict
from normcheck.errors import invalid
from normcheck.metrics import to_json

__all__ = ["check_kernel", "check_callable", "CheckResult", "FamilyResult", "Failure", "Worst",
           "Baseline", "Tolerance", "TOLERANCES", "STATISTICS", "CHECK_FAMILIES", "LIMITS",
           "to_json"]

#: Caps on what a check may be asked to do (memory and time stay bounded).
LIMITS = {"examples": 4096, "search": 10000, "seed": 2**32 - 1, "rows": 10**9}


@dataclass
class CheckResult:
    kernel: str
    norm: str
    norm_desc: str
    reference: str
    dtype: str
    out_dtype: str
    backend: str
    verdict: str                       # pass | warn | fail
    max_ulp: float
    rows_checked: int
    failures: list
    warnings: list
    families: list
    worst: Worst | None
    tolerance: Tolerance
    seconds: float
    baseline_note: str | None = None
    counterexample: str | None = None
    search: dict | None = None
    provenance: dict | None = None
    cause: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True for pass and warn (a warn is within what a sound kernel can produce)."""
        return self.verdict != "fail"

    def exit_code(self, strict: bool = False) -> int:
        """0 pass and warn, 1 fail (``strict``: warn too)."""
        return 1 if self.verdict == "fail" or (strict and self.verdict == "warn") else 0

    def as_dict(self) -> dict:
        t = self.tolerance
        return {"verdict": self.verdict, "kernel": self.kernel, "norm": self.norm,
                "reference": self.reference, "dtype": self.dtype, "out_dtype": self.out_dtype,
                "backend": self.backend, "max_ulp": self.max_ulp,
                "rows_checked": self.rows_checked, "cause": self.cause,
                "cause_key": getattr(self.cause, "key", None),
                "failures": [f.as_dict() for f in self.failures],
                "warnings": [f.as_dict() for f in self.warnings],
                "worst": self.worst.as_dict() if self.worst else None,
                "families": [f.as_dict() for f in self.families],
                "tolerance": {"fail_floor_ulp": t.fail_floor, "warn_k": t.warn_k,
                              "warn_floor_ulp": t.warn_floor, "reason": t.reason,
                              "fail_bound": "normcheck.bounds.sound_bound"},
                "baseline_note": self.baseline_note, "search": self.search,
                "counterexample": self.counterexample,
                "replay": replay.command(self.counterexample) if self.counterexample else None,
                "provenance": self.provenance, "seconds": self.seconds, **self.extra}

    def to_json(self) -> str:
        return to_json(self.as_dict())

    def render(self) -> str:
        if self.extra and self.extra.get("quant"):
            from normcheck.check.quantised import render_quantised

            return render_quantised(self)
        return render(self)


def _check_counts(examples, search, seed):
    for name, v, lo in (("examples", examples, 1), ("search", search, 0), ("seed", seed, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not \
                lo <= v <= LIMITS[name]:
            raise invalid(name, v, f"an integer from {lo} to {LIMITS[name]}",
                          {"examples": "rows per family; for long runs use --rows",
                           "search": "examples of the targeted search; 0 skips it",
                           "seed": "any non-negative integer below 2^32"}[name])


def _long_run(rows, cols, cols_range, multiple_of):
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


def _resolve(spec, norm, dtype):
    """(the spec loaded or None, the Norm, the storage Format): norm and dtype from the
    arguments, else from the spec."""
    if spec is not None and not isinstance(spec, specs.KernelSpec):
        spec = specs.load(spec)
    norm = norm or (spec.norm if spec else None)
    dtype = dtype or (spec.dtype if spec else None)
    for name, v in (("norm", norm), ("dtype", dtype)):
        if v is None:
            raise invalid(name, None, f"a {name} (give --{name} or put it in the spec)")
    return spec, norms.get(norm), formats.get(dtype)


def _check_timeout(timeout):
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not math.isfinite(timeout) or timeout <= 0:
        raise invalid("timeout", timeout, "a positive, finite number of seconds",
                      "e.g. --timeout 60")
    return float(timeout)


def _contract(quant, spec):
    """The quantised output's contract from ``quant`` (CLI/API) over the spec's, or None."""
    from normcheck.quant import contract as qcontract

    table = quant if quant is not None else (spec.quant if spec is not None else None)
    if table is None:
        return None
    if isinstance(table, dict) and spec is not None and spec.quant and quant is not None:
        table = {**spec.quant, **table}
    return qcontract.resolve(table)


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


def _sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _judge(target, *, label, norm: norms.Norm, fmt, out, convention, eps, backend, examples,
           search_examples, seed, cols_range, cols_multiple_of, stats_roles,
           save_counterexample, kernel_desc, long=None, progress=None, arch=None) -> CheckResult:
    t0 = time.perf_counter()
    judge = Judge(target, norm, fmt, out, convention=convention, eps=eps, backend=backend,
                  seed=seed, cols_range=cols_range, cols_multiple_of=cols_multiple_of,
                  stats_roles=stats_roles)
    fams = CHECK_FAMILIES
    results, failures, warnings, worst = judge.run_families(fams, examples)
    if long is not None and not any(f.kind in FATAL for f in failures):
        fr, f, w = judge.run_long(*long, progress=progress)
        results.append(fr)
        failures += f
        if w is not None and (worst is None or (w.of_bound, w.scaled_ulp) >
                              (worst.of_bound, worst.scaled_ulp)):
            worst = w
    search_stats = None
    if search_examples and not any(f.kind in FATAL for f in failures):
        search_stats, f, w = judge.search(fams, search_examples)
        if f is not None:
            failures.append(f)
            worst = w
    seen, uniq = set(), []
    for f in failures:  # one failure per (kind, family) is enough to read
        if (f.kind, f.family) not in seen:
            seen.add((f.kind, f.family))
            uniq.append(f)
    verdict = Verdict.of(uniq, warnings)
    cause = next((f.cause for f in uniq + warnings if f.cause), None)
    ce = None
    if worst is not None and worst.case is not None and (verdict == "fail" or
                                                         save_counterexample):
        c = worst.case
        path = Path(save_counterexample) if save_counterexample else None
        ce = str(replay.save_case(
            path, kernel=kernel_desc, x=c.x, gamma=c.gamma, beta=c.beta, residual=c.residual,
            eps=c.eps, note=f"worst row of normcheck check ({worst.family})",
            label=label, exclusive=save_counterexample is None))
    be = get_backend(backend)
    return CheckResult(
        kernel=label, norm=norm.name, norm_desc=norm.describe(), reference=norm.reference,
        dtype=judge.fmt.name, out_dtype=judge.out.name,
        backend=be.name, verdict=verdict,
        max_ulp=max([fr.max_ulp for fr in results] + [0.0]),
        rows_checked=sum(fr.rows for fr in results) + (search_stats["examples"]
                                                       if search_stats else 0),
        failures=uniq, warnings=warnings, families=results, worst=worst, tolerance=judge.tol,
        seconds=time.perf_counter() - t0, baseline_note=judge.baseline_note,
        counterexample=ce, search=search_stats,
        provenance=be.provenance({"arch": arch} if arch else None), cause=cause,
        extra={"peak_rss_mib": _peak_rss_mib()})


def _peak_rss_mib() -> float:
    """This process's peak resident memory so far (MiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def check_kernel(source=None, entry=None, norm=None, dtype=None, *, block=256, spec=None,
                 backend="cpu", defines=None, reference=None, out_dtype=None, examples=64,
                 search=40, seed=0, timeout=None, save_counterexample=None, rows=None,
                 cols=None, progress=None, arch=None, quant=None) -> CheckResult:
    """Judge a CUDA C kernel (see the module docstring).  ``spec`` is a path, a KernelSpec or
    None for the default ABI; entry/norm/dtype may come from the spec; ``defines`` add to the
    spec's.  ``rows`` adds a long run of that many rows of width ``cols`` (streamed in bounded
    memory; ``progress(done, rows, rows_per_s)`` is called every few seconds).  ``quant`` (a
    contract table, a preset name or a Contract; else the spec's ``quant``) judges a quantised
    output (normcheck.check.quantised)."""
    _check_counts(examples, search, seed)
    timeout = _check_timeout(timeout)
    spec, n, fmt = _resolve(spec, norm, dtype)
    if spec is None:
        if entry is None:
            raise invalid("entry", None, "the kernel to run (give --entry or a spec)")
        if not isinstance(block, int) or isinstance(block, bool) or not 1 <= block <= 1024:
            raise invalid("block", block, "1 to 1024 threads")
        spec = specs.default_spec(n, block)
        spec.launches[0].entry = entry
    else:
        if spec.norm and spec.norm != n.name:
            raise invalid("norm", n.name, f"the spec's norm ({spec.norm})", "drop one of them")
        if entry is not None:
            if len(spec.launches) > 1:
                raise invalid("entry", entry, "no --entry: the spec names one entry per launch")
            spec.launches[0].entry = entry
        if spec.entries[0] is None:
            raise invalid("entry", None, "the kernel to run (--entry, or entry in the spec)")
    if spec.backward:
        raise invalid("spec", str(spec.path), "a forward kernel (this spec has backward roles)",
                      "run normcheck check --backward")
    if n.fused:
        missing = [r for r in ("residual", "h") if not spec.has(r)]
        if missing:
            raise invalid("spec.args", spec.roles(), f"the roles residual and h for {n.name}",
                          f"add [[args]] with role = {missing[0]!r}")
    n = n.with_affine(spec.has("gamma"), spec.has("beta")).with_reference(
        reference or spec.reference or "exact")
    src = source if source is not None else spec.source
    if src is None:
        raise invalid("source", None, "a .cu file (or `source` in the spec)")
    contract = _contract(quant, spec)
    out = formats.get(out_dtype or spec.out_dtype or fmt.name) if contract is None else None
    from normcheck.backends.base import parse_arch

    arch = parse_arch(arch if arch is not None else spec.arch)
    if contract is not None:
        _quant_args(spec, contract, rows, reference, out_dtype)
    target = launch.bind(spec, src, norm=n, dtype=fmt.name,
                         out_dtype=out.name if out is not None else None,
                         backend=backend, defines=defines, timeout=timeout, arch=arch,
                         quant=contract)
    eps = np.float32(spec.eps) if spec.eps is not None else np.float32(1e-5)
    stats_roles = [r for r in ("mean", "rstd") if spec.has(r)]
    long = _long_run(rows, cols, spec.cols, spec.cols_multiple_of)
    if isinstance(src, (str, Path)) and "\n" not in str(src):
        desc = {"source": str(Path(src).resolve()), "sha256": _sha256(src)}
    else:
        desc = {"source": "<string>", "source_text": str(src)}
    desc.update({"entries": spec.entries, "norm": n.name, "reference": n.reference,
                 "dtype": fmt.name, "out_dtype": out.name if out is not None else
                 contract.qformat.name, "defines": {**spec.defines,
                                                                       **(defines or {})},
                 "spec": str(spec.path.resolve()) if spec.path else None,
                 "spec_sha256": _sha256(spec.path) if spec.path else None,
                 "block": block if not spec.path else None, "arch": arch})
    if contract is not None:
        from normcheck.check.quantised import judge_quantised

        return judge_quantised(target, label=target.label, norm=n, storage=fmt,
                               contract=contract,
                               eps=np.float32(spec.eps) if spec.eps is not None else
                               np.float32(1e-6), backend=backend, examples=examples, seed=seed,
                               cols_range=spec.cols, cols_multiple_of=spec.cols_multiple_of,
                               kernel_desc=desc, arch=arch,
                               save_counterexample=save_counterexample)
    return _judge(target, label=target.label, norm=n, fmt=fmt, out=out,
                  convention=spec.convention, eps=eps, backend=backend, examples=examples,
                  search_examples=search, seed=seed, cols_range=spec.cols,
                  cols_multiple_of=spec.cols_multiple_of, stats_roles=stats_roles,
                  save_counterexample=save_counterexample, kernel_desc=desc, long=long,
                  progress=progress, arch=arch)


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
    _check_counts(examples, search, seed)
    if not callable(fn):
        raise invalid("fn", fn, "a callable")
    if quant is not None:
        from normcheck.check.quantised import judge_quantised
        from normcheck.quant import contract as qcontract
        from normcheck.quant.judge import QuantCallableTarget

        c = qcontract.resolve(quant)
        n = norms.get(norm)
        fmt = formats.get(dtype)
        label = name or getattr(fn, "__name__", "callable")
        lo, hi = cols
        if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
            raise invalid("cols", cols, "(min, max) widths with 1 <= min <= max")
        return judge_quantised(QuantCallableTarget(fn, n, fmt, c, label), label=label, norm=n,
                               storage=fmt, contract=c, eps=np.float32(oracle._eps(eps)),
                               backend=backend, examples=examples, seed=seed,
                               cols_range=(lo, hi), cols_multiple_of=1,
                               kernel_desc={"callable": label, "norm": n.name,
                                            "dtype": fmt.name},
                               save_counterexample=save_counterexample)
    n = norms.get(norm).with_reference(reference)
    fmt = formats.get(dtype)
    out = formats.get(out_dtype or dtype)
    if convention not in ("exact", "stored"):
        raise invalid("convention", convention, '"exact" or "stored"')
    e = np.float32(oracle._eps(eps))
    lo, hi = cols
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
        raise invalid("cols", cols, "(min, max) widths with 1 <= min <= max")
    label = name or getattr(fn, "__name__", "callable")
    long = _long_run(rows, long_cols, (lo, hi), 1)
    return _judge(launch.CallableTarget(fn, n, fmt, out, label), label=label, norm=n, fmt=fmt,
                  out=out, convention=convention, eps=e, backend=backend, examples=examples,
                  search_examples=search, seed=seed, cols_range=(lo, hi), cols_multiple_of=1,
                  stats_roles=[], save_counterexample=save_counterexample,
                  kernel_desc={"callable": label, "norm": n.name, "dtype": fmt.name},
                  long=long, progress=progress)
