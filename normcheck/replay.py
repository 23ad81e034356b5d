"""Replay a saved counterexample (:mod:`normcheck.cases`): ``normcheck replay FILE``.

The file holds data, never code to run; a user kernel is found by the *path* of its source and
spec (and the file says when they have changed since, by their SHA-256); a case saved from a
kernel given as text runs only behind ``--run-embedded-source``.

A replay judges as the check judged: the saved rows run again, measured against the sound bound
(forward), the sound backward bound (each output) or the contract (quantised), and the result
carries the verdict and the check's exit code (0 pass, 1 fail).  "mismatches" counts the
elements beyond the bound; a fault (the case of a launch that faulted) fails under its own
name.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from normcheck.metrics import times_bound

from normcheck import formats
from normcheck.cases import EMBEDDED_FLAG, command, load_case, save_case
from normcheck.errors import invalid

__all__ = ["replay", "Replayed", "save_case", "load_case", "command", "EMBEDDED_FLAG"]


class Replayed(str):
    """What a replay printed (a str), with its ``verdict`` ("pass" or "fail") and
    ``exit_code`` (the check's: 0 pass, 1 fail)."""

    def __new__(cls, text: str, verdict: str):
        o = str.__new__(cls, text.rstrip("\n") + f"\nverdict: {verdict.upper()}")
        o.verdict = verdict
        o.exit_code = 1 if verdict == "fail" else 0
        return o


def _case(case):
    """The saved rows as the Case a target runs: every array the file holds."""
    from normcheck import launch

    extra = {k: case[k] for k in ("dh", "y") if case[k] is not None}
    if case["scale"] is not None:
        extra["scale"] = np.float32(case["scale"].ravel()[0])
    return launch.Case(x=case["x"], gamma=case["gamma"], beta=case["beta"],
                       residual=case["residual"], eps=case["eps"], dy=case["dy"],
                       mean=case["mean"], rstd=case["rstd"], extra=extra)


def _replay_backward(case, path, target, spec, norm, bw, backend, notes) -> str:
    from normcheck.check import backward_case as bc
    from normcheck.check.backward import compare_role

    x, c = case["x"], _case(case)
    outs = target(c)
    # the norm resolved as the backward check resolves it
    plan = bc.Plan(norm=norm, fmt=formats.of_dtype(x.dtype), formats=target.formats,
                   stats=bw["stats"], mode=bw["mode"], eps=case["eps"])
    ref = bc.reference(plan, c)
    E = bc.sound_bounds(plan, c, ref)
    scale = bc.term_scales(plan, c)
    refs = {"dx": ref.dx, "d_residual": ref.dx, "dgamma": ref.dgamma, "dbeta": ref.dbeta}
    failed = False
    lines = [f"case {path}: {x.shape[0]} row(s) of {x.shape[1]}, backward ({bw['stats']} "
             f"statistics{', x̂ from y' if bw['mode'] == 'y' else ''})"
             + (f" -- {case['note']}" if case["note"] else "")] + [f"note: {n_}" for n_ in notes]
    for role in ("dx", "d_residual", "dgamma", "dbeta"):
        if role not in outs or refs[role] is None:
            continue
        f, st = compare_role(plan, role, refs[role], outs[role], E[role], c, "replay",
                             scale[role])
        lines.append(f"  {role}: max {st['max_ulp']:.4g} ulp, p99 {st['p99_ulp']:.4g}, "
                     f"{st['max_scaled']:.4g} ulp of the terms, {st['of_bound']:.3g}x the sound "
                     f"bound" + (f" -- {f.detail}" if f else ""))
        failed |= f is not None
        if f is not None and f.cause:
            lines.append(f"      likely cause: {f.cause}")
    return Replayed("\n".join(lines), "fail" if failed else "pass")


def _replay_quant(case, path, target, norm, contract, backend, notes) -> str:
    from normcheck.check.engine import Setup
    from normcheck.check.quantised import CLASSES, QuantisedJudge

    x, c = case["x"], _case(case)
    judge = QuantisedJudge(target, Setup(norm=norm, fmt=formats.of_dtype(x.dtype),
                                         contract=contract, eps=case["eps"]))
    m, fails = judge.measure("replay", c)
    head = (f"case {path}: {x.shape[0]} row(s) of {x.shape[1]}, eps={float(case['eps'])!r}, "
            f"contract {contract.describe()}" + (f" -- {case['note']}" if case["note"] else ""))
    lines = [head] + [f"note: {n}" for n in notes]
    if m is None:
        return Replayed("\n".join(lines + [f"  [{f.kind}] {f.detail}" for f in fails]), "fail")
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
    return Replayed("\n".join(lines), "fail" if fails else "pass")


def replay(path, backend="cpu", variant=None, run_embedded=False) -> Replayed:
    """Rerun a saved case on its kernel (or on the built-in ``variant``), judge it under the
    check's rule and describe the comparison with the oracle (module docstring)."""
    from normcheck import kernels
    from normcheck.check.engine import Setup
    from normcheck.check.judge import ForwardJudge

    case = load_case(path)
    k = {"variant": variant} if variant else case["kernel"]
    x, eps, c, notes = case["x"], case["eps"], _case(case), []
    if "variant" in k:
        v = kernels.get(k["variant"])
        if v.fmt.dtype != x.dtype:
            raise invalid("--variant", v.name, f"a {formats.of_dtype(x.dtype).name} variant "
                          "(the case's rows)")
        target, label = kernels.target(v, backend), v.name
        setup = Setup(norm=kernels.oracle_norm(v), fmt=v.fmt, out=v.fmt,
                      convention=v.convention or "exact", eps=eps, backend=backend)
    elif k.get("source") or k.get("source_text"):
        from normcheck.check.resolve import resolve_case

        res = resolve_case(k, path, backend, run_embedded, notes)
        target, spec, norm = res.target, res.spec, res.norm
        if k.get("backward"):
            return _replay_backward(case, path, target, spec, norm, k["backward"], backend,
                                    notes)
        if target.quant is not None:
            return _replay_quant(case, path, target, norm, target.quant, backend, notes)
        label = target.label
        setup = dataclasses.replace(res.setup(), fmt=formats.of_dtype(x.dtype), eps=eps,
                                    stats_roles=(), desc={})
    else:
        raise invalid("case", str(path), "a case of a built-in variant or a CUDA kernel",
                      f"a Python callable ({k.get('callable')}) cannot be replayed from a file; "
                      "call it on the saved rows (normcheck.replay.load_case)")
    head = (f"case {path}: {x.shape[0]} row(s) of {x.shape[1]}, eps={float(eps)!r}"
            + (f" -- {case['note']}" if case["note"] else ""))
    judge = ForwardJudge(target, setup)
    m, fails = judge.measure("replay", c)
    lines = [head] + [f"note: {n}" for n in notes]
    if m is None:  # the launch failed: a fault, under its own name
        lines += [f"  [{f.kind}] {f.detail}" for f in fails]
        return Replayed("\n".join(lines), "fail")
    mm = m.full()
    with np.errstate(invalid="ignore"):
        beyond = (mm.ratio > 1.0) | ~np.isfinite(mm.ulp)
    lines.append(metrics_message(label, backend, m, x, beyond))
    for f in fails:
        lines.append(f"  [{f.kind}] {f.detail}")
    if fails:
        cause = judge.diagnose(c, m)
        if cause:
            lines.append(f"  likely cause: {cause}")
    finite = mm.ulp[np.isfinite(mm.ulp)]
    nonfinite = int((~np.isfinite(mm.ulp)).sum())
    # each figure the one it names: over the finite elements, said so; an element non-finite
    # for a finite exact value is off the bound without measure (#64: "p99 0, mean 0, 0x the
    # sound bound" beside 768 NaN of 768)
    spread = (f"p99 {float(np.percentile(finite, 99)):.4g}, mean {float(finite.mean()):.4g} "
              f"(of the {finite.size} finite elements)" if finite.size else
              "no finite element")
    bound = "non-finite: beyond any bound" if nonfinite else \
        f"{times_bound(float(mm.ratio.max()) if mm.ratio.size else 0.0)}x the sound bound"
    lines.append(f"  summary    max {float(np.max(mm.ulp)) if mm.ulp.size else 0.0:.4g} ulp, "
                 f"{spread}, {bound}, non-finite {nonfinite}")
    return Replayed("\n".join(lines), "fail" if fails else "pass")


def metrics_message(label, backend, m, x, beyond) -> str:
    """The fixed failure layout (metrics.failure_message) with "mismatches" the elements beyond
    the sound bound (or non-finite), the worst one first."""
    from normcheck import metrics

    if not beyond.any():
        return (f"normcheck: replay of {label} ({backend} backend)\n  mismatches 0/"
                f"{beyond.size} elements beyond the sound bound")
    return metrics.failure_message(f"replay of {label}", f"{label} ({backend} backend)", m.ref,
                                   m.y, beyond, x=x, limit="beyond the sound bound")
