"""Replay a saved counterexample (:mod:`normcheck.cases`): ``normcheck replay FILE``.

The file holds data, never code to run; a user kernel is found by the *path* of its source and
spec (and the file says when they have changed since, by their SHA-256); a case saved from a
kernel given as text runs only behind ``--run-embedded-source``.
"""

from __future__ import annotations

import numpy as np

from normcheck import formats
from normcheck.cases import EMBEDDED_FLAG, command, load_case, save_case
from normcheck.errors import invalid

__all__ = ["replay", "save_case", "load_case", "command", "EMBEDDED_FLAG"]


def _replay_backward(case, path, target, spec, norm, bw, backend, notes) -> str:
    from normcheck import launch
    from normcheck.check import backward as cb
    from normcheck.check.tolerances import TOLERANCES

    x = case["x"]
    extra = {k: case[k] for k in ("dh", "y") if case[k] is not None}
    c = launch.Case(x=x, gamma=case["gamma"], beta=case["beta"], eps=case["eps"],
                    dy=case["dy"], mean=case["mean"], rstd=case["rstd"], extra=extra)
    fmt = formats.of_dtype(x.dtype)
    outs = target(c)
    n = norm  # resolved as the backward check resolves it
    ref = cb.backward_reference(n, c, bw["mode"], bw["stats"], target.formats, fmt, case["eps"])
    E = cb.backward_bounds(n, c, bw["mode"], ref, case["eps"])
    scale = cb.term_scales(n, c, bw["mode"], case["eps"])
    refs = {"dx": ref.dx, "d_residual": ref.dx, "dgamma": ref.dgamma, "dbeta": ref.dbeta}
    lines = [f"case {path}: {x.shape[0]} row(s) of {x.shape[1]}, backward ({bw['stats']} "
             f"statistics{', x̂ from y' if bw['mode'] == 'y' else ''})"
             + (f" -- {case['note']}" if case["note"] else "")] + [f"note: {n_}" for n_ in notes]
    for role in ("dx", "d_residual", "dgamma", "dbeta"):
        if role not in outs or refs[role] is None:
            continue
        f, st = cb.compare_role(role, refs[role], outs[role], E[role],
                            TOLERANCES[refs[role].fmt.name], "replay", c, n, scale[role],
                            case["eps"])
        lines.append(f"  {role}: max {st['max_ulp']:.4g} ulp, p99 {st['p99_ulp']:.4g}, "
                     f"{st['max_scaled']:.4g} ulp of the terms, {st['of_bound']:.3g}x the sound "
                     f"bound" + (f" -- {f.detail}" if f else ""))
        if f is not None and f.cause:
            lines.append(f"      likely cause: {f.cause}")
    return "\n".join(lines)


def _replay_quant(case, path, target, norm, contract, backend, notes) -> str:
    from normcheck import launch
    from normcheck.quant.judge import CLASSES, QuantJudge

    x = case["x"]
    extra = {} if case["scale"] is None else {"scale": np.float32(case["scale"].ravel()[0])}
    c = launch.Case(x=x, gamma=case["gamma"], beta=case["beta"], residual=case["residual"],
                    eps=case["eps"], extra=extra)
    judge = QuantJudge(target, norm, formats.of_dtype(x.dtype), contract, eps=case["eps"])
    m, fails = judge.measure("replay", c)
    head = (f"case {path}: {x.shape[0]} row(s) of {x.shape[1]}, eps={float(case['eps'])!r}, "
            f"contract {contract.describe()}" + (f" -- {case['note']}" if case["note"] else ""))
    lines = [head] + [f"note: {n}" for n in notes]
    if m is None:
        return "\n".join(lines + [f"  [{f.kind}] {f.detail}" for f in fails])
    v = m.counts
    lines.append(f"replay of {target.label} ({backend} backend): {v.n} values, {v.exact} exact, "
                 f"{v.order} order flips, {v.contract} contract flips"
                 + (f"; scales {m.scale_counts.order} order flips, {m.scale_counts.contract} "
                    f"contract flips" if m.scale_counts.n else ""))
    bad = np.argwhere(m.cls != 0)[:8]
    for i, j in bad:
        lines.append(f"  row {i}, col {j}: x={float(x[i, j])!r} kernel={float(m.q[i, j])!r} "
                     f"contract={float(m.ref.q[i, j])!r} ({CLASSES[int(m.cls[i, j])]}; "
                     f"y={float(m.ref.y[i, j])!r})")
    for f in fails:
        lines.append(f"  [{f.kind}] {f.detail}")
    return "\n".join(lines)


def replay(path, backend="cpu", variant=None, run_embedded=False) -> str:
    """Rerun a saved case on its kernel (or on the built-in ``variant``) and describe the
    comparison with the oracle."""
    from normcheck import kernels, launch, metrics, oracle

    case = load_case(path)
    k = {"variant": variant} if variant else case["kernel"]
    x, g, b, r, eps = case["x"], case["gamma"], case["beta"], case["residual"], case["eps"]
    notes = []
    if "variant" in k:
        v = kernels.get(k["variant"])
        if v.fmt.dtype != x.dtype:
            raise invalid("--variant", v.name, f"a {formats.of_dtype(x.dtype).name} variant "
                          "(the case's rows)")
        y = kernels.run_case(v, launch.Case(x=x, gamma=g, beta=b, residual=r, eps=eps),
                             backend)["output"]
        ref, _ = kernels.reference(v, x, g, b, eps=eps, residual=r)
        label = v.name
    elif k.get("source") or k.get("source_text"):
        from normcheck.check.resolve import resolve_case

        r = resolve_case(k, path, backend, run_embedded, notes)
        target, spec, norm = r.target, r.spec, r.norm
        if k.get("backward"):
            return _replay_backward(case, path, target, spec, norm, k["backward"], backend,
                                    notes)
        if target.quant is not None:
            return _replay_quant(case, path, target, norm, target.quant, backend, notes)
        c = launch.Case(x=x, gamma=g, beta=b, residual=r, eps=eps)
        y = target(c)["output"]
        ref = oracle.for_norm(norm, x, g, b, residual=r, eps=eps,
                              convention=spec.convention or "exact", out=target.out)
        label = target.label
    else:
        raise invalid("case", str(path), "a case of a built-in variant or a CUDA kernel",
                      f"a Python callable ({k.get('callable')}) cannot be replayed from a file; "
                      "call it on the saved rows (normcheck.replay.load_case)")
    c = metrics.compare(ref, y)
    s = metrics.summarize(c)
    bad = c.ulp >= max(s.max_ulp, 1e-300) if np.isfinite(s.max_ulp) else ~np.isfinite(c.ulp)
    head = (f"case {path}: {x.shape[0]} row(s) of {x.shape[1]}, eps={float(eps)!r}"
            + (f" -- {case['note']}" if case["note"] else ""))
    body = metrics.failure_message(f"replay of {label}", f"{label} ({backend} backend)", ref, y,
                                   bad, x=x, limit="at the worst error")
    return "\n".join([head] + [f"note: {n}" for n in notes] + [body]) + \
        f"\n  summary    max {s.max_ulp:.4g} ulp, p99 {s.p99_ulp:.4g}, " \
        f"mean {s.mean_ulp:.4g}, non-finite {s.nonfinite}"
