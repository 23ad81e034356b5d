"""The verdict on a backward kernel: dx, dγ, dβ against their exact values.

Each family of :data:`normcheck.families.BACKWARD_FAMILIES` gives (x, dy); the weights are the
check's realistic γ; with saved statistics (the kernel reads mean/rstd) the case carries the
forward pass's correctly rounded float32 mean and rstd, as a sound forward kernel writes them.
Every output the kernel writes is compared with :func:`normcheck.oracle_backward.backward`:

* **fail** — beyond what a sound float backward kernel can produce
  (:func:`normcheck.bounds.sound_backward`: sequential or atomic sums in any order, one final
  rounding, never below 1 ulp), non-finite where the exact value is finite, never written, or a
  crash / hang / out-of-bounds access / exception; each accuracy failure tested against the usual
  causes (γ left out, the mean term missing, the x̂ term missing, sums in the storage format,
  sums over the wrong axis) and the one that explains the output named;
* **pass** otherwise.  Backward verdicts have no warn: there is no yardstick of the same
  definition for every kernel shape (a dx kernel, a dγ kernel, both).

Kernels with dγ or dβ outputs are also run with the blocks (and warps) in several seeded orders
on the cpu backend: atomics then arrive in different orders, and the spread of dγ across runs
is reported in ulps — the nondeterminism a training run sees.
"""

from __future__ import annotations

import time

import numpy as np

from normcheck import bounds, families, formats, kernels, launch, oracle, oracle_backward
from normcheck import spec as specs
from normcheck.backends import get_backend
from normcheck.check.judge import FATAL, Failure, FamilyResult, _odd
from normcheck.check.tolerances import TOLERANCES
from normcheck.errors import KernelError, invalid

__all__ = ["check_backward", "ORDERS_DEFAULT"]

#: Block orders of the race measurement.
ORDERS_DEFAULT = 8


def _case(fam, fmt, rows, cols, seed, norm, formats_, stats, eps, reads_gamma):
    x, dy = families.backward_rows(fam, fmt, rows, cols, seed=seed)
    g, _ = families.weights(fmt, cols, seed=seed[0])
    gf = formats_.get("gamma", formats.get(fmt))
    g = g if reads_gamma else np.ones(cols)
    g = g if g.dtype == gf.dtype else gf.cast(np.asarray(g, np.float64))
    mean = rstd = None
    if stats == "saved":
        mean, rstd = oracle.saved_statistics(norm, x, eps=eps)
    return launch.Case(x=x, gamma=g if norm.has_gamma else None, beta=None, eps=np.float32(eps),
                       dy=dy, mean=mean, rstd=rstd)


def _candidates(norm, case, role, fmt):
    """The usual wrong answers, in float64 from the exact inputs: {cause: values}."""
    x = case.x.astype(np.float64)
    dy = case.dy.astype(np.float64)
    D = x.shape[1]
    if case.rstd is not None:
        r = case.rstd.astype(np.float64)[:, None]
        mu = case.mean.astype(np.float64)[:, None] if norm.centred else 0.0
    else:
        mu = x.mean(axis=1, keepdims=True) if norm.centred else 0.0
        r = 1 / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + float(case.eps))
    xh = (x - mu) * r
    gam = np.ones(D) if case.gamma is None else case.gamma.astype(np.float64)
    g = dy * (1 + gam if norm.gemma else gam)
    out = {}
    if role == "dx":
        def dx_of(gg, mean_term=True, xhat_term=True):
            m = gg.mean(axis=1, keepdims=True) if (norm.centred and mean_term) else 0.0
            c = (gg * xh).mean(axis=1, keepdims=True) if xhat_term else 0.0
            return r * (gg - m - xh * c)
        out["γ left out of dx (the seed article's formula: dy in place of dy·γ)"] = dx_of(dy)
        if norm.centred:
            out["the mean term of dx missing (-mean(dy·γ))"] = dx_of(g, mean_term=False)
        out["the x̂ term of dx missing (-x̂·mean(dy·γ·x̂))"] = dx_of(g, xhat_term=False)
        out["dx not scaled by rstd"] = dx_of(g) / r
    else:
        terms = dy * xh if role == "dgamma" else dy
        st = formats.get(fmt) if fmt in ("fp16", "bf16") else None
        if st is not None:
            acc = np.zeros(D)
            for row in terms:
                acc = st.round_array(acc + st.round_array(row))
            out[f"{role} summed in {fmt} (every partial sum rounded to it)"] = acc
        rows_sums = terms.sum(axis=1)
        if rows_sums.size >= D:
            out[f"{role} summed over the wrong axis (per row, not per column)"] = rows_sums[:D]
        if role == "dgamma":
            out["dγ without x̂ (Σdy, the dβ sum)"] = dy.sum(axis=0)
            out["dγ with γ in it (Σdy·γ·x̂)"] = (g * xh).sum(axis=0)
    return out


def _explain(norm, case, role, got, limit, fmt):
    """The cause whose values the kernel's output matches within the sound limit (x4), if one
    does."""
    best, best_r = None, np.inf
    y = np.asarray(got, np.float64)
    for cause, cand in _candidates(norm, case, role, fmt).items():
        if cand.shape != y.shape:
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            rr = np.nanmax(np.abs(y - cand) / np.maximum(limit, np.abs(cand) * 2.0**-10))
        if rr < best_r:
            best, best_r = cause, rr
    return best if best_r <= 4.0 else None


def _compare(role, ref, got, E, tol, fam, case, norm):
    """(Failure or None, max ulp, worst ratio to the limit) of one output."""
    got = np.asarray(got)
    fmt = ref.fmt
    if got.dtype != fmt.dtype:
        got = fmt.cast(got.astype(np.float64))
    unw = kernels.unwritten(got)
    if unw.any():
        i = np.argwhere(unw)[0]
        return (Failure("unwritten", fam, f"{role}: {int(unw.sum())}/{got.size} elements never "
                        f"written, first at {tuple(int(v) for v in i)}"), np.inf, np.inf)
    ulp = ref.ulp_error(got)
    a = got.astype(np.float64)
    t = ref.exact
    bad_nf = ~np.isfinite(a) & np.isfinite(ref.rounded.astype(np.float64))
    if bad_nf.any():
        i = tuple(int(v) for v in np.argwhere(bad_nf)[0])
        return (Failure("nonfinite", fam, f"{role}: {int(bad_nf.sum())} non-finite where the "
                        f"exact value is finite, e.g. at {i}: kernel={float(a[i])!r} "
                        f"exact={float(t[i])!r}"), np.inf, np.inf)
    limit = bounds.sound_limit(ref, E, tol.fail_floor)
    with np.errstate(invalid="ignore", over="ignore"):
        ratio = np.where(np.isfinite(a) & np.isfinite(t), np.abs(a - t) / limit, 0.0)
    ratio = np.nan_to_num(ratio, nan=0.0)
    worst = float(ratio.max()) if ratio.size else 0.0
    mu = float(np.max(np.where(np.isfinite(ulp), ulp, 0.0))) if ulp.size else 0.0
    if worst <= 1.0:
        return None, mu, worst
    k = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    lim_ulp = float(limit[k] / fmt.ulp_array(np.abs(t[k])))
    cause = _explain(norm, case, role, a, limit, fmt.name if role != "dx" else None)
    return (Failure("accuracy", fam,
                    f"{role}: {int((ratio > 1).sum())}/{ratio.size} elements beyond what a sound "
                    f"kernel can produce; worst at {tuple(int(v) for v in k)} of "
                    f"{case.rows}x{case.cols}: kernel={float(a[k])!r} exact={float(t[k])!r}, "
                    f"{float(ulp[k]):.4g} ulp where the sound bound allows {lim_ulp:.4g} "
                    f"({worst:.3g}x)", cause=cause), mu, worst)


def _spread(outs_runs, fmt):
    """max over elements of (max - min) across runs, in ulps of the result."""
    a = np.stack([o.astype(np.float64) for o in outs_runs])
    with np.errstate(invalid="ignore"):
        d = a.max(axis=0) - a.min(axis=0)
        u = fmt.ulp_array(np.abs(a).max(axis=0))
        s = np.where(d == 0, 0.0, d / u)
    return float(np.nanmax(s)) if s.size else 0.0


def check_backward(source=None, entry=None, norm=None, dtype=None, *, spec=None, block=256,
                   backend="cpu", defines=None, examples=64, seed=0, timeout=None,
                   orders=ORDERS_DEFAULT):
    """Judge a backward kernel (see the module docstring).  Without ``spec`` the kernel has the
    ABI of cuda_src/backward.cu's dx kernels: (dx, dy, x, γ, mean, rstd, rows, cols)."""
    from normcheck.check import CheckResult, _check_counts, _check_timeout, _resolve

    _check_counts(examples, 0, seed)
    timeout = _check_timeout(timeout)
    if isinstance(orders, bool) or not isinstance(orders, int) or not 0 <= orders <= 64:
        raise invalid("orders", orders, "0 to 64 block orders for the race measurement")
    spec, n, fmt = _resolve(spec, norm, dtype)
    if n.fused:
        raise invalid("norm", n.name, "layernorm, rmsnorm or gemma_rmsnorm: the fused add's "
                      "backward is the norm's (plus dh) -- check the norm's backward kernel")
    if spec is None:
        if entry is None:
            raise invalid("entry", None, "the kernel to run (give --entry or a spec)")
        spec = specs.default_backward_spec(n, block)
        spec.launches[0].entry = entry
    else:
        if not spec.backward:
            raise invalid("spec", str(spec.path), "a backward spec (roles dy and dx/dgamma/dbeta)",
                          "drop --backward for a forward kernel")
        if entry is not None:
            if len(spec.launches) > 1:
                raise invalid("entry", entry, "no --entry: the spec names one entry per launch")
            spec.launches[0].entry = entry
    # γ is always part of the maths (1 where the kernel takes none); β only through dβ
    n = n.with_affine(True, n.centred and (spec.has("dbeta") or spec.has("beta")))
    reads_gamma = spec.has("gamma")
    src = source if source is not None else spec.source
    if src is None:
        raise invalid("source", None, "a .cu file (or `source` in the spec)")
    target = launch.bind(spec, src, norm=n, dtype=fmt.name, backend=backend, defines=defines,
                         timeout=timeout, arch=spec.arch)
    fm = target.formats
    eps = np.float32(spec.eps) if spec.eps is not None else np.float32(1e-5)
    stats = spec.stats or "recomputed"
    roles = [r for r in ("dx", "dgamma", "dbeta") if spec.has(r)]
    tol = TOLERANCES[fm.get("dx", fmt).name]
    t0 = time.perf_counter()
    results, failures = [], []
    races = {}
    lo, hi = spec.cols
    m = max(1, spec.cols_multiple_of)
    for fi, (fam, (_, (fam_rows, widths))) in enumerate(families.BACKWARD_FAMILIES.items()):
        fr = FamilyResult(fam)
        ws = sorted({min(max(w, lo), hi) // m * m or m for w in widths})
        rows = fam_rows or _odd(max(1, examples))
        worst = 0.0
        for k, cols in enumerate(ws):
            case = _case(fam, fmt.name, rows, cols, [seed, fi, k], n, fm, stats, eps,
                         reads_gamma)
            try:
                outs = target(case, guard="both")
            except KernelError as e:
                failures.append(Failure(e.kind, fam, str(e)))
                fr.failures[e.kind] = fr.failures.get(e.kind, 0) + 1
                break
            ref = oracle_backward.backward(
                n, case.x, case.dy, case.gamma, eps=eps, stats=stats, mean=case.mean,
                rstd=case.rstd, out=fm.get("dx", fmt).name,
                param_out=fm.get("dgamma", formats.FP32).name,
                dbeta_out=fm.get("dbeta", formats.FP32).name)
            E = bounds.sound_backward(n, case.x, case.dy, case.gamma, mean=case.mean,
                                      rstd=case.rstd, eps=eps)
            fr.rows += rows
            fr.cols.append(cols)
            for role in roles:
                r_ref = getattr(ref, role)
                if r_ref is None:
                    continue
                if role not in outs:
                    continue
                f, mu, w = _compare(role, r_ref, outs[role], E[role], tol, fam, case, n)
                if role == "dx":
                    fr.max_ulp = max(fr.max_ulp, mu)
                worst = max(worst, w)
                if f is not None:
                    failures.append(f)
                    fr.failures[f.kind] = fr.failures.get(f.kind, 0) + 1
                    if f.cause and not fr.cause:
                        fr.cause = f.cause
            if orders and any(r in outs for r in ("dgamma", "dbeta")) and \
                    get_backend(backend).name == "cpu" and fam in ("gaussian", "tall"):
                runs = {r: [outs[r]] for r in ("dgamma", "dbeta") if r in outs}
                for s in range(1, orders):
                    o = target(case, schedule="random", seed=s, workers=1)
                    for r in runs:
                        runs[r].append(o[r])
                for r, vals in runs.items():
                    races[f"{r} {fam} {rows}x{cols}"] = _spread(
                        vals, formats.of_dtype(np.asarray(vals[0]).dtype))
            if any(f.kind in FATAL for f in failures):
                break
        fr.max_of_bound = worst
        fr.verdict = "fail" if fr.failures else "pass"
        results.append(fr)
        if any(f.kind in FATAL for f in failures):
            break
    seen, uniq = set(), []
    for f in failures:
        if (f.kind, f.family, f.detail.split(":")[0]) not in seen:
            seen.add((f.kind, f.family, f.detail.split(":")[0]))
            uniq.append(f)
    be = get_backend(backend)
    verdict = "fail" if uniq else "pass"
    label = target.label
    return CheckResult(
        kernel=label, norm=n.name, norm_desc=n.describe() + " backward", reference="exact",
        dtype=fmt.name, out_dtype=fm.get("dx", fmt).name, backend=be.name, verdict=verdict,
        max_ulp=max([fr.max_ulp for fr in results] + [0.0]),
        rows_checked=sum(fr.rows for fr in results), failures=uniq, warnings=[],
        families=results, worst=None, tolerance=tol, seconds=time.perf_counter() - t0,
        baseline_note="backward: pass or fail against the sound backward bound "
                      "(normcheck.bounds.sound_backward); statistics " + stats,
        cause=next((f.cause for f in uniq if f.cause), None),
        provenance=be.provenance(),
        extra={"backward": {"outputs": roles, "stats": stats,
                            "races_ulp": races, "orders": orders}})
