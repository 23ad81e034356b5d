"""`normcheck check`: judge a kernel nobody here wrote against the oracle.

What it runs, for a kernel of a given norm and storage format:

1. every family of normcheck.families (but ``extremes``, where float accumulation itself
   overflows and no float-accumulating kernel can pass) at its widths, ``examples`` rows per
   family, seeded; the kernel's outputs start as a poison NaN, so an element never written is
   caught;
2. the built-in two-pass upcast_square kernel of the same norm and format on the same rows (the
   baseline);
3. a targeted Hypothesis search over all those families (``hypothesis.target`` on the error
   relative to what is allowed), shrinking any failure to a small row.

Verdict, per family (FlashAttention's rule in spirit): the kernel's largest error may not exceed
k × the baseline's largest error, floored at an absolute budget (the table :data:`BUDGETS`,
printed with every report), so that a fp32 kernel is judged fairly on ill-conditioned rows where
even the baseline is far from correctly rounded.  The error judged is in ulps of
max(|γ·x̂|, |β|), the output's natural scale (where β nearly cancels γ·x̂, ulp(t) is tiny and
any float kernel is "wrong" by thousands of ulps); the plain ULP error is reported beside it.  A non-finite output
for a finite exact value (or a number for a NaN), a crash, a hang, a deadlock and an
out-of-bounds access each fail the kernel under their own name.

Python API: :func:`check_kernel` (a CUDA C kernel), :func:`check_callable` (a numpy or torch
function on the stored rows).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from normcheck import bounds, families, formats, kernels, metrics, oracle, replay, spec as specs
from normcheck.metrics import to_json
from normcheck.backends import get_backend
from normcheck.errors import KernelError, NormcheckError, invalid

__all__ = ["Budget", "BUDGETS", "Failure", "FamilyResult", "CheckResult", "check_kernel",
           "check_callable", "CHECK_FAMILIES", "to_json"]

#: The families a check runs (``extremes`` is the report's business: see the module docstring).
CHECK_FAMILIES = tuple(f for f in families.FAMILIES if f != "extremes")


@dataclass(frozen=True)
class Budget:
    max_ulp: float     # the floor: allowed = max(max_ulp, k × the baseline's largest error)
    k: float
    reason: str


#: Default budgets per output format, with the reason for each.
BUDGETS = {
    "fp32": Budget(8.0, 4.0,
                   "float accumulation: a block sum of D <= 8192 terms carries ~(D/256 + 8)u of "
                   "relative error and rstd half of it; the built-in two-pass kernel measures "
                   "<= 3 ulp on gaussian rows.  k = 4: on ill-conditioned fp32 rows the error "
                   "is one summation order's luck, and equally sound orders differ by 2-4x"),
    "fp16": Budget(1.0, 2.0,
                   "float arithmetic is 2^13 times finer than fp16: a kernel that accumulates in "
                   "float rounds a value within a few float ulps of exact, so at most 1 fp16 ulp"),
    "bf16": Budget(1.0, 2.0,
                   "as fp16, with 2^16 times finer float arithmetic"),
}
STATS_BUDGET = Budget(8.0, 2.0, "mean and rstd are float32 results of float arithmetic; on "
                                "ill-conditioned rows k x the two-pass analysis of "
                                "normcheck.bounds (the mean in ulps of max(|μ|, σ))")


@dataclass
class Failure:
    kind: str      # accuracy | nonfinite | crash | timeout | deadlock | out_of_bounds
    family: str
    detail: str


@dataclass
class FamilyResult:
    family: str
    rows: int = 0
    max_ulp: float = 0.0
    p99_ulp: float = 0.0
    mean_ulp: float = 0.0
    max_scaled: float = 0.0
    nonfinite: dict = field(default_factory=dict)
    baseline_max_scaled: float | None = None
    allowed: float = 0.0
    verdict: str = "pass"
    worst: dict | None = None
    cols: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"family": self.family, "rows": self.rows, "cols": self.cols,
                "max_ulp": self.max_ulp, "p99_ulp": self.p99_ulp, "mean_ulp": self.mean_ulp,
                "max_scaled_ulp": self.max_scaled, "nonfinite": self.nonfinite,
                "baseline_max_scaled_ulp": self.baseline_max_scaled,
                "allowed_scaled_ulp": self.allowed, "verdict": self.verdict}


@dataclass
class CheckResult:
    kernel: str
    norm: str
    dtype: str
    out_dtype: str
    backend: str
    verdict: str
    max_ulp: float
    rows_checked: int
    failures: list
    families: list
    worst: dict | None
    budget: Budget
    seconds: float
    counterexample: str | None = None
    search: dict | None = None
    provenance: dict | None = None

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def as_dict(self) -> dict:
        return {"verdict": self.verdict, "kernel": self.kernel, "norm": self.norm,
                "dtype": self.dtype, "out_dtype": self.out_dtype, "backend": self.backend,
                "max_ulp": self.max_ulp, "rows_checked": self.rows_checked,
                "failures": [f.__dict__ for f in self.failures],
                "worst": self.worst, "families": [f.as_dict() for f in self.families],
                "budget": {"max_ulp": self.budget.max_ulp, "k": self.budget.k,
                           "reason": self.budget.reason},
                "search": self.search, "counterexample": self.counterexample,
                "provenance": self.provenance,
                "replay": replay.command(self.counterexample) if self.counterexample else None,
                "seconds": self.seconds}

    def to_json(self) -> str:
        return to_json(self.as_dict())

    def render(self) -> str:
        return _render(self)


# ------------------------------------------------------------------------------------------------
# Targets: what is being judged
# ------------------------------------------------------------------------------------------------
class KernelTarget:
    """A CUDA C kernel launched per its spec; outputs poisoned before each launch."""

    def __init__(self, kernel, spec: specs.KernelSpec, dtype, out_dtype, timeout):
        self.kernel = kernel
        self.spec = spec
        self.fmt = formats.get(dtype)
        self.out = formats.get(out_dtype)
        self.timeout = timeout

    def __call__(self, x, gamma, beta, residual, eps):
        rows, cols = x.shape
        sp = self.spec
        args, names, outs = [], [], {}
        for a in sp.args:
            names.append(a.label)
            if a.role in ("output", "input", "residual", "h"):
                fmt = formats.get(a.dtype) if a.dtype else (self.out if a.role == "output"
                                                            else self.fmt)
                stride = specs.evaluate(a.stride, rows, cols) if a.stride else cols
                if stride < cols:
                    raise invalid(f"args[{len(args)}].stride", a.stride,
                                  f"a row pitch >= cols ({cols})")
                buf = kernels.poisoned((rows, stride), fmt.dtype)
                if a.role == "input":
                    buf[:, :cols] = fmt.cast(x.astype(np.float64)) if fmt.dtype != x.dtype else x
                elif a.role == "residual":
                    buf[:, :cols] = residual
                else:
                    outs[a.role] = (buf, fmt)
                args.append(buf)
            elif a.role in ("gamma", "beta"):
                fmt = formats.get(a.dtype) if a.dtype else self.fmt
                v = gamma if a.role == "gamma" else beta
                args.append(np.ascontiguousarray(fmt.cast(v.astype(np.float64))))
            elif a.role in ("mean", "rstd"):
                fmt = formats.get(a.dtype) if a.dtype else formats.FP32
                buf = kernels.poisoned((rows,), fmt.dtype)
                outs[a.role] = (buf, fmt)
                args.append(buf)
            elif a.role == "eps":
                args.append(specs.scalar_type(a)(eps))
            elif a.role == "rows":
                args.append(specs.scalar_type(a)(rows))
            elif a.role == "cols":
                args.append(specs.scalar_type(a)(cols))
            else:  # const
                args.append(specs.scalar_type(a)(specs.evaluate(a.value, rows, cols)))
        grid = specs.evaluate_dims(sp.grid, rows, cols)
        block = specs.evaluate_dims(sp.block, rows, cols)
        shm = specs.evaluate(sp.shared_mem, rows, cols)
        self.kernel(grid, block, args, shared_mem=shm, names=names, timeout=self.timeout)
        result = {}
        for role, (buf, fmt) in outs.items():
            result[role] = buf[:, :cols] if buf.ndim == 2 else buf
        return result


class CallableTarget:
    """A Python function on the stored rows: fn(x, gamma, beta, eps) -> y, or for fused norms
    fn(x, residual, gamma, beta, eps) -> (h, y).  β is None for RMSNorm."""

    def __init__(self, fn, norm, fmt, out):
        self.fn, self.norm, self.fmt, self.out = fn, norm, fmt, out

    def __call__(self, x, gamma, beta, residual, eps):
        b = beta if self.norm in ("layernorm", "add_layernorm") else None
        if self.norm.startswith("add_"):
            h, y = self.fn(x, residual, gamma, b, eps)
            return {"h": _as_format(h, self.fmt), "output": _as_format(y, self.out)}
        return {"output": _as_format(self.fn(x, gamma, b, eps), self.out)}


def _as_format(a, fmt):
    if hasattr(a, "detach"):  # a torch tensor
        a = a.detach().cpu()
        a = a.float().numpy() if str(a.dtype) in ("torch.bfloat16",) else a.numpy()
    a = np.asarray(a)
    return a if a.dtype == fmt.dtype else fmt.cast(a.astype(np.float64))


# ------------------------------------------------------------------------------------------------
# The check
# ------------------------------------------------------------------------------------------------
class _Judge:
    def __init__(self, target, norm, fmt, out, convention, eps, budget, backend, seed,
                 cols_range, stats_roles, has_beta):
        self.target, self.norm, self.fmt, self.out = target, norm, fmt, out
        self.has_beta = has_beta
        self.convention = convention or "exact"
        self.eps = np.float32(eps)
        self.budget = budget
        self.backend = backend
        self.seed = seed
        self.cols_range = cols_range
        self.stats_roles = stats_roles
        self.failures: list[Failure] = []
        self.worst = None
        fused = norm.startswith("add_")
        base = kernels.variants(norm=norm, storage=fmt.name,
                                algorithm="two_pass" if "layernorm" in norm else "rms",
                                fast_math=False, convention=(self.convention if fused else None))
        base = [v for v in base if v.order in (None, "upcast_square")]
        if fmt.name == "fp32" and fused:
            base = kernels.variants(norm=norm, storage="fp32")
        self.baseline = base[0] if base else None
        # the error model of the statistics: a two-pass (or RMS) float kernel of this storage
        self.stats_model = kernels.variants(
            norm="layernorm" if "layernorm" in norm else "rmsnorm", storage=fmt.name,
            algorithm="two_pass" if "layernorm" in norm else "rms", fast_math=False,
            order=None if fmt.name == "fp32" else "upcast_square")[0]

    # one batch of rows ---------------------------------------------------------------------------
    def run(self, family, x, g, b, r):
        """Judge one batch: None if the kernel failed to run, else (ulp, ref, y, baseline max
        ulp, comparison)."""
        b = b if self.has_beta else None
        try:
            outs = self.target(x, g, b, r, self.eps)
        except KernelError as e:
            self.failures.append(Failure(e.kind, family, str(e)))
            return None
        ref = oracle.for_norm(self.norm, x, g, b, residual=r, eps=self.eps,
                              convention=self.convention, out=self.out)
        y = outs["output"]
        c = metrics.compare(ref, y)
        ulp = c.ulp
        unwritten = kernels.unwritten(y)
        if unwritten.any():
            self.failures.append(Failure(
                "nonfinite", family, f"{int(unwritten.sum())}/{y.size} output elements never "
                f"written (they still hold the poison NaN), first at (row, col) "
                f"{tuple(int(v) for v in np.argwhere(unwritten)[0])}, width {x.shape[1]}"))
        fails = c.nonfinite_failures()
        bad = {k: v for k, v in fails.items() if v}
        if bad and not unwritten.any():
            i, j = np.unravel_index(int(np.argmax(np.isin(c.cls, [
                metrics.CLASSES.index(k) for k in bad]))), c.cls.shape)
            self.failures.append(Failure(
                "nonfinite", family, f"{', '.join(f'{v} {k}' for k, v in bad.items())} at width "
                f"{x.shape[1]}; e.g. row {i}, col {j}: x={float(x[i, j])!r} kernel="
                f"{float(y[i, j])!r} exact={float(ref.exact[i, j])!r}"))
        if "h" in outs:
            h = outs["h"]
            wrong = h.view(self.fmt.uint) != ref.h.rounded.view(self.fmt.uint)
            wrong &= ~(np.isnan(h.astype(np.float64)) & np.isnan(ref.h.rounded.astype(
                np.float64)))
            if wrong.any():
                i, j = np.argwhere(wrong)[0]
                self.failures.append(Failure(
                    "accuracy", family, f"h = x + residual not correctly rounded in "
                    f"{int(wrong.sum())}/{h.size} elements; e.g. row {i}, col {j}: "
                    f"kernel={float(h[i, j])!r} correctly rounded={float(ref.h.rounded[i, j])!r}"))
        for role in self.stats_roles:
            self._stats(family, role, ref, outs[role],
                        kernels.normalised_rows(ref, x, r, self.convention))
        base_max = None
        if self.baseline is not None and self.out == self.fmt:
            try:
                if self.baseline.fused:
                    _, yb = kernels.run(self.baseline, x, g, b if self.baseline.has_beta else None,
                                        eps=self.eps, residual=r, backend=self.backend)
                else:
                    yb = kernels.run(self.baseline, x, g, b if self.baseline.has_beta else None,
                                     eps=self.eps, backend=self.backend)
                bu = metrics.compare(ref, yb).scaled
                base_max = float(np.max(np.where(np.isfinite(bu), bu, 0.0))) if bu.size else 0.0
            except NormcheckError:
                base_max = None
        return ulp, ref, y, base_max, c

    def _stats(self, family, role, ref, got, rows):
        """mean and rstd against the exact statistics: allowed max(8 ulp, k × what the two-pass
        analysis (normcheck.bounds) guarantees on the row); the mean in ulps of max(|μ|, σ)."""
        key = "rstd" if role == "rstd" else "mean"
        sref = getattr(ref, key)
        if sref is None:
            return
        got = np.asarray(got).astype(np.float64)
        t = sref.exact
        e_mu, rho_r = bounds.statistics_bound(self.stats_model, rows, eps=self.eps)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            if key == "mean":
                scale = np.maximum(np.abs(t), np.sqrt(np.maximum(ref.var.exact, 0)))
                unit = formats.FP32.ulp_array(scale)
                err = np.abs(got - t) / unit
                analysis = e_mu / unit
            else:
                err = sref.ulp_error(got.astype(np.float32))
                analysis = rho_r * np.abs(t) / formats.FP32.ulp_array(t)
            allowed = np.maximum(STATS_BUDGET.max_ulp, STATS_BUDGET.k * analysis)
            allowed = np.where(np.isfinite(allowed), allowed, np.inf)
            same = (got == t) | (np.isnan(t) & np.isnan(got))
            err = np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))
        over = err > allowed
        if over.any():
            i = int(np.argmax(np.where(over, err / np.where(allowed > 0, allowed, 1), -1)))
            self.failures.append(Failure(
                "accuracy" if np.isfinite(err[i]) else "nonfinite", family,
                f"{role} off by {err[i]:.3g} ulp (allowed {allowed[i]:.3g}) in row {i}: "
                f"kernel={float(got[i])!r} exact={float(t[i])!r}"))

    def allowed(self, base_max):
        b = self.budget
        if base_max is None:
            return b.max_ulp
        return max(b.max_ulp, b.k * base_max)


def _widths(fam, cols_range):
    lo, hi = cols_range
    ws = [c for c in families.get(fam).cols if lo <= c <= hi]
    if not ws:
        ws = sorted({min(max(c, lo), hi) for c in families.get(fam).cols})
    return ws


def _judge_families(judge: _Judge, fams, examples):
    results = []
    for fam in fams:
        fr = FamilyResult(fam)
        ws = _widths(fam, judge.cols_range)
        per = max(1, examples // len(ws))
        ulps, scaled, base_maxes = [], [], []
        for k, cols in enumerate(ws):
            if any(f.kind == "timeout" for f in judge.failures):
                fr.verdict = "fail"  # a kernel that hangs once is not launched again
                break
            x = families.generate(fam, judge.fmt, per, cols, seed=judge.seed * 1000 + k)
            g, b = families.weights(judge.fmt, cols, seed=judge.seed)
            r = families.generate("gaussian", judge.fmt, per, cols, seed=judge.seed + 7) \
                if judge.norm.startswith("add_") else None
            fr.rows += per
            fr.cols.append(cols)
            out = judge.run(fam, x, g, b, r)
            if out is None:
                fr.verdict = "fail"
                break
            ulp, ref, y, base_max, c = out
            if base_max is not None:
                base_maxes.append(base_max)
            ulps.append(ulp.ravel())
            scaled.append(c.scaled.ravel())
            m = float(np.max(c.scaled)) if ulp.size else 0.0
            if judge.worst is None or m > judge.worst["scaled_ulp"] or (
                    not np.isfinite(m) and np.isfinite(judge.worst["scaled_ulp"])):
                i, j = np.unravel_index(int(np.argmax(c.scaled)), ulp.shape)
                judge.worst = {"family": fam, "cols": int(cols), "row_index": int(i),
                               "col": int(j), "ulp": float(ulp[i, j]), "scaled_ulp": m,
                               "row": [float(v) for v in x[i].astype(np.float64)],
                               "_case": (x[i:i + 1], g, b, None if r is None else r[i:i + 1]),
                               "_first": _first_failing(ulp[i], y[i], ref.exact[i], x[i])}
        if ulps:
            allu = np.concatenate(ulps)
            s = metrics.summarize(metrics.Comparison(allu, allu, allu, allu,
                                                     np.zeros(allu.shape, np.int8)))
            fr.max_ulp, fr.p99_ulp, fr.mean_ulp = s.max_ulp, s.p99_ulp, s.mean_ulp
            alls = np.concatenate(scaled)
            alls = alls[np.isfinite(alls)]  # non-finite outcomes are judged as classes
            fr.max_scaled = float(np.max(alls)) if alls.size else 0.0
        fr.baseline_max_scaled = max(base_maxes) if base_maxes else None
        fr.allowed = allowed = judge.allowed(fr.baseline_max_scaled)
        fr.nonfinite = {}
        for f in judge.failures:
            if f.family == fam:
                fr.verdict = "fail"
                fr.nonfinite[f.kind] = fr.nonfinite.get(f.kind, 0) + 1
        if np.isfinite(fr.max_scaled) and fr.max_scaled > allowed:
            fr.verdict = "fail"
            base = "-" if fr.baseline_max_scaled is None else f"{fr.baseline_max_scaled:.4g}"
            judge.failures.append(Failure(
                "accuracy", fam, f"max {fr.max_scaled:.4g} ulp (of max(|γx̂|,|β|)) > allowed "
                f"{allowed:.4g} = max({judge.budget.max_ulp:g}, {judge.budget.k:g} × baseline "
                f"{judge.baseline.name if judge.baseline else '-'} {base})"))
        results.append(fr)
    return results


def _first_failing(ulp_row, y_row, t_row, x_row, n=5):
    idx = np.argsort(-np.nan_to_num(ulp_row, nan=np.inf))[:n]
    return [{"col": int(j), "x": float(x_row[j]), "kernel": float(y_row[j]),
             "exact": float(t_row[j]), "ulp": float(ulp_row[j])} for j in idx]


def _search(judge: _Judge, fams, examples, seed, family_base):
    """Targeted Hypothesis search; returns a summary dict and, if it fails, records it."""
    from hypothesis import HealthCheck, given, settings, target
    from hypothesis import strategies as st

    from normcheck.strategies import row_cases

    lo, hi = judge.cols_range
    cols = st.integers(lo, min(hi, 4096)) | st.sampled_from(
        [c for c in families.TAIL_COLS if lo <= c <= hi] or [lo])
    found = {}
    stats = {"examples": 0, "max_ratio": 0.0}
    fatal = ("crash", "timeout", "deadlock", "out_of_bounds")

    @st.composite
    def cases(draw):
        fam = draw(st.sampled_from(list(fams)))
        return fam, draw(row_cases(judge.fmt.name, cols=cols, family=fam, beta=True,
                                   fused=judge.norm.startswith("add_"), eps=float(judge.eps)))

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(fam_case=cases())
    def prop(fam_case):
        fam, case = fam_case
        stats["examples"] += 1
        if found.get("failure") is not None and found["failure"].kind in fatal:
            raise AssertionError(found["failure"].detail)  # no shrinking through hangs
        before = len(judge.failures)
        out = judge.run(f"search/{fam}", case.x, case.gamma, case.beta, case.residual)
        new = judge.failures[before:]
        del judge.failures[before:]
        if new:
            found["case"], found["failure"] = case, new[0]
            raise AssertionError(new[0].detail)
        ulp, ref, y, base_max, c = out
        # a single row's baseline error is one summation order's luck: the family's largest
        # baseline error (measured on its 64 rows) counts too
        bases = [v for v in (base_max, family_base.get(fam)) if v is not None]
        allowed = judge.allowed(max(bases) if bases else None)
        m = float(np.max(c.scaled)) if ulp.size else 0.0
        m = m if not np.isnan(m) else float("inf")
        ratio = m / allowed if np.isfinite(m) else 1e9
        target(min(ratio, 1e9), label="error / allowed")
        stats["max_ratio"] = max(stats["max_ratio"], ratio)
        if ratio > 1:
            found["case"] = case
            found["failure"] = Failure("accuracy", f"search/{fam}",
                                       f"max {m:.4g} ulp (of max(|γx̂|,|β|)) > allowed "
                                       f"{allowed:.4g} on a {case.x.shape[0]}x{case.x.shape[1]} "
                                       f"{fam} case")
            found["ulp"], found["y"], found["ref"] = c.scaled, y, ref
            raise AssertionError(found["failure"].detail)

    try:
        prop()
    except Exception:  # the failure (or several: an ExceptionGroup) is recorded in `found`
        pass
    stats["failed"] = "failure" in found
    return stats, found


def _judge(target, *, label, norm, dtype, out_dtype, convention, eps, backend, examples,
           search_examples, seed, max_ulp, cols_range, stats_roles, save_counterexample,
           kernel_desc, has_beta=True):
    fmt = formats.get(dtype)
    out = formats.get(out_dtype or dtype)
    budget = BUDGETS[out.name]
    if max_ulp is not None:
        if not (isinstance(max_ulp, (int, float)) and max_ulp > 0):
            raise invalid("max_ulp", max_ulp, "a positive number of ulps")
        budget = Budget(float(max_ulp), budget.k,
                        f"given by the caller (default {budget.max_ulp:g}: {budget.reason})")
    t0 = time.perf_counter()
    judge = _Judge(target, norm, fmt, out, convention, eps, budget, backend, seed, cols_range,
                   stats_roles, has_beta and norm in ("layernorm", "add_layernorm"))
    fams = CHECK_FAMILIES
    fam_results = _judge_families(judge, fams, examples)
    search_stats, found = (None, {})
    fatal = {"crash", "timeout", "deadlock", "out_of_bounds"}
    if search_examples and not any(f.kind in fatal for f in judge.failures):
        family_base = {fr.family: fr.baseline_max_scaled for fr in fam_results}
        search_stats, found = _search(judge, fams, search_examples, seed, family_base)
        if found:
            f = found["failure"]
            judge.failures.append(f)
            case = found["case"]
            if f.kind == "accuracy" and "ulp" in found:
                ulp = found["ulp"]
                i, j = np.unravel_index(int(np.argmax(ulp)), ulp.shape)
                judge.worst = {"family": "search", "cols": int(case.x.shape[1]),
                               "row_index": int(i), "col": int(j), "ulp": float(ulp[i, j]),
                               "scaled_ulp": float(ulp[i, j]),
                               "row": [float(v) for v in case.x[i].astype(np.float64)],
                               "_case": (case.x[i:i + 1], case.gamma, case.beta,
                                         None if case.residual is None else
                                         case.residual[i:i + 1]),
                               "_first": _first_failing(ulp[i], found["y"][i],
                                                        found["ref"].exact[i], case.x[i])}
            elif judge.worst is None or f.kind != "accuracy":
                judge.worst = {"family": "search", "cols": int(case.x.shape[1]), "row_index": 0,
                               "col": 0, "ulp": float("inf"), "scaled_ulp": float("inf"),
                               "row": [float(v) for v in case.x[0].astype(np.float64)],
                               "_case": (case.x[:1], case.gamma, case.beta,
                                         None if case.residual is None else case.residual[:1]),
                               "_first": []}
    failures = judge.failures
    # one failure per (kind, family) is enough to read
    seen, uniq = set(), []
    for f in failures:
        if (f.kind, f.family) not in seen:
            seen.add((f.kind, f.family))
            uniq.append(f)
    verdict = "fail" if uniq else "pass"
    mx = max([fr.max_ulp for fr in fam_results] + [0.0])
    ce = None
    worst = judge.worst
    if worst is not None:
        xw, gw, bw, rw = worst.pop("_case")
        first = worst.pop("_first")
        worst["first"] = first
        if verdict == "fail" or save_counterexample:
            path = Path(save_counterexample) if save_counterexample else \
                Path(".normcheck") / f"counterexample-{_slug(label)}.npz"
            ce = str(replay.save_case(path, kernel=kernel_desc, x=xw, gamma=gw,
                                      beta=bw if norm in ("layernorm", "add_layernorm") else None,
                                      residual=rw, eps=judge.eps,
                                      note=f"worst row of normcheck check ({worst['family']})"))
    return CheckResult(kernel=label, norm=norm, dtype=fmt.name, out_dtype=out.name,
                       backend=backend if isinstance(backend, str) else backend.name,
                       verdict=verdict, max_ulp=mx,
                       rows_checked=sum(fr.rows for fr in fam_results) + (
                           search_stats["examples"] if search_stats else 0),
                       failures=uniq, families=fam_results, worst=worst, budget=budget,
                       seconds=time.perf_counter() - t0, counterexample=ce, search=search_stats,
                       provenance=get_backend(backend).provenance())


def _slug(s):
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in s)[:60]


def check_kernel(source, entry=None, norm=None, dtype=None, *, block=256, spec=None,
                 backend="cpu", max_ulp=None, examples=64, search=40, seed=0, timeout=None,
                 save_counterexample=None) -> CheckResult:
    """Judge a CUDA C kernel (see the module docstring).  ``spec`` is a path, a KernelSpec or
    None for the default ABI; entry/norm/dtype may come from the spec."""
    if spec is not None and not isinstance(spec, specs.KernelSpec):
        spec = specs.load(spec)
    entry = entry or (spec.entry if spec else None)
    norm = norm or (spec.norm if spec else None)
    dtype = dtype or (spec.dtype if spec else None)
    for name, v in (("entry", entry), ("norm", norm), ("dtype", dtype)):
        if v is None:
            raise invalid(name, None, f"a {name} (give --{name} or put it in the spec)")
    if norm not in specs.NORMS:
        raise invalid("norm", norm, f"one of {', '.join(specs.NORMS)}")
    formats.get(dtype)
    if spec is None:
        spec = specs.default_spec(norm, block)
    elif spec.norm and spec.norm != norm:
        raise invalid("norm", norm, f"the spec's norm ({spec.norm})", "drop one of them")
    src = source if source is not None else spec.source
    if src is None:
        raise invalid("source", None, "a .cu file (or `source` in the spec)")
    if isinstance(src, (str, Path)) and "\n" not in str(src) and not Path(src).is_file():
        raise invalid("source", str(src), "a readable .cu file", "check the path")
    needs = {"add_layernorm": ["h", "residual", "gamma"], "add_rmsnorm": ["h", "residual", "gamma"],
             "layernorm": ["gamma"], "rmsnorm": ["gamma"], "gemma_rmsnorm": ["gamma"]}[norm]
    missing = [r for r in needs if not spec.has(r)]
    if missing:
        raise invalid("spec.args", spec.roles(), f"the roles {', '.join(needs)} for {norm}",
                      f"add [[args]] with role = {missing[0]!r}")
    be = get_backend(backend)
    kern = be.compile(src, entry)
    eps = spec.eps if spec.eps is not None else np.float32(1e-5)
    target = KernelTarget(kern, spec, dtype, spec.out_dtype or dtype, timeout)
    stats_roles = [r for r in ("mean", "rstd") if spec.has(r)]
    desc = {"source": str(Path(src).resolve()) if "\n" not in str(src) else "<string>",
            "entry": entry, "norm": norm, "dtype": dtype,
            "spec": str(spec.path.resolve()) if spec.path else None, "block": block}
    return _judge(target, label=entry, norm=norm, dtype=dtype, out_dtype=spec.out_dtype,
                  has_beta=spec.has("beta"),
                  convention=spec.convention, eps=eps, backend=be, examples=examples,
                  search_examples=search, seed=seed, max_ulp=max_ulp, cols_range=spec.cols,
                  stats_roles=stats_roles, save_counterexample=save_counterexample,
                  kernel_desc=desc)


def check_callable(fn, norm, dtype, *, out_dtype=None, convention="exact",
                   eps=np.float32(1e-5), max_ulp=None, examples=64, search=40, seed=0,
                   cols=(1, 8192), backend="cpu", save_counterexample=None,
                   name=None) -> CheckResult:
    """Judge a Python function on the stored rows (numpy, or torch returning tensors):
    fn(x, gamma, beta, eps) -> y; fused norms fn(x, residual, gamma, beta, eps) -> (h, y);
    β is None for RMSNorm.  The baseline kernels run on ``backend``."""
    if norm not in specs.NORMS:
        raise invalid("norm", norm, f"one of {', '.join(specs.NORMS)}")
    if not callable(fn):
        raise invalid("fn", fn, "a callable")
    fmt = formats.get(dtype)
    out = formats.get(out_dtype or dtype)
    label = name or getattr(fn, "__name__", "callable")
    return _judge(CallableTarget(fn, norm, fmt, out), label=label, norm=norm, dtype=fmt.name,
                  out_dtype=out.name, convention=convention, eps=eps, backend=backend,
                  examples=examples, search_examples=search, seed=seed, max_ulp=max_ulp,
                  cols_range=tuple(cols), stats_roles=[], save_counterexample=save_counterexample,
                  kernel_desc={"callable": label, "norm": norm, "dtype": fmt.name})


# ------------------------------------------------------------------------------------------------
# Rendering for people
# ------------------------------------------------------------------------------------------------
def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _render(r: CheckResult) -> str:
    b = r.budget
    lines = [f"normcheck check: {r.kernel} ({r.norm}, {r.dtype} -> {r.out_dtype}, "
             f"{r.backend} backend)",
             f"allowed: max({b.max_ulp:g}, {b.k:g} x the built-in baseline's error) in ulps of "
             f"max(|γx̂|, |β|) — {b.reason}", ""]
    head = ["family", "rows", "cols", "max ulp", "p99 ulp", "max scaled", "baseline", "allowed",
            "failures", "verdict"]
    table = []
    for f in r.families:
        table.append([f.family, str(f.rows), ",".join(map(str, f.cols)), _fmt(f.max_ulp),
                      _fmt(f.p99_ulp), _fmt(f.max_scaled), _fmt(f.baseline_max_scaled),
                      _fmt(f.allowed),
                      ", ".join(f"{k} {v}" for k, v in f.nonfinite.items()) or "-",
                      f.verdict.upper() if f.verdict == "fail" else f.verdict])
    if r.search:
        table.append(["search", str(r.search["examples"]), "1..", "-", "-", "-", "-", "-",
                      "1" if r.search["failed"] else "-",
                      "FAIL" if r.search["failed"] else "pass"])
    w = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(head)]
    lines.append("  ".join(h.ljust(x) for h, x in zip(head, w)))
    lines.append("  ".join("-" * x for x in w))
    lines += ["  ".join(c.ljust(x) for c, x in zip(row, w)) for row in table]
    lines.append("")
    if r.failures:
        lines.append("failures:")
        for f in r.failures:
            lines.append(f"  [{f.kind}] {f.family}: {f.detail}")
        lines.append("")
    if r.worst:
        wst = r.worst
        lines.append(f"worst row: family {wst['family']}, width {wst['cols']}, "
                     f"{_fmt(wst['scaled_ulp'])} ulp of max(|γx̂|,|β|) ({_fmt(wst['ulp'])} ulp)")
        for e in wst.get("first", []):
            lines.append(f"  col {e['col']}: x={e['x']!r} kernel={e['kernel']!r} "
                         f"exact={e['exact']!r} ({_fmt(e['ulp'])} ulp)")
    if r.counterexample:
        lines.append(f"replay: {replay.command(r.counterexample)}")
    lines.append(f"verdict: {r.verdict.upper()} — {r.rows_checked} rows in {r.seconds:.1f} s")
    return "\n".join(lines)
