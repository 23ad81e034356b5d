"""Save a failing case to a file and replay it: the counterexample a person can run again.

A case file (.npz) holds the rows, γ, β, the residual, ε and what ran them — a built-in variant,
or a user kernel (source, entry, norm, dtype, spec) — so ``normcheck replay FILE`` reruns exactly
that launch and prints the comparison with the oracle."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from normcheck import formats
from normcheck.errors import invalid

__all__ = ["save_case", "load_case", "command", "replay"]


def _store(a):
    if a is None:
        return None
    fmt = formats.of_dtype(a.dtype)
    return a.view(fmt.uint), fmt.name


def save_case(path, *, kernel: dict, x, gamma=None, beta=None, residual=None,
              eps=np.float32(1e-5), note: str = "") -> Path:
    """Write a case file; ``kernel`` describes what ran (e.g. {"variant": name} or
    {"source": ..., "entry": ..., "norm": ..., "dtype": ..., "spec": ...})."""
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays, kinds = {}, {}
    for name, a in (("x", x), ("gamma", gamma), ("beta", beta), ("residual", residual)):
        if a is not None:
            bits, fmt = _store(np.ascontiguousarray(a))
            arrays[name] = bits
            kinds[name] = fmt
    meta = {"kernel": kernel, "formats": kinds, "eps": float(np.float32(eps)), "note": note}
    np.savez_compressed(path, meta=np.array(json.dumps(meta)), **arrays)
    return path


def load_case(path) -> dict:
    """Read a case file: {"kernel", "x", "gamma", "beta", "residual", "eps", "note"}."""
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise invalid("case", str(path), "a case file written by normcheck (.npz)", str(e)) \
            from None
    meta = json.loads(str(data["meta"]))
    out = {"kernel": meta["kernel"], "eps": np.float32(meta["eps"]), "note": meta.get("note", "")}
    for name in ("x", "gamma", "beta", "residual"):
        if name in meta["formats"]:
            out[name] = data[name].view(formats.get(meta["formats"][name]).dtype)
        else:
            out[name] = None
    return out


def command(path) -> str:
    return f"normcheck replay {path}"


def replay(path, backend="cpu", variant=None) -> str:
    """Rerun a saved case on its kernel (or on the built-in ``variant``) and describe the
    comparison with the oracle."""
    from normcheck import kernels, metrics, oracle, spec as specs
    from normcheck.backends import get_backend

    case = load_case(path)
    k = {"variant": variant} if variant else case["kernel"]
    x, g, b, r, eps = case["x"], case["gamma"], case["beta"], case["residual"], case["eps"]
    if "variant" in k:
        v = kernels.get(k["variant"])
        out = kernels.run(v, x, g, b if v.has_beta else None, eps=eps, residual=r,
                          backend=backend)
        y = out[1] if v.fused else out
        ref, _ = kernels.reference(v, x, g, b if v.has_beta else None, eps=eps, residual=r)
        label = v.name
    elif "entry" in k:
        from normcheck.check import KernelTarget

        spec = specs.load(k["spec"]) if k.get("spec") else specs.default_spec(k["norm"],
                                                                              k.get("block", 256))
        kern = get_backend(backend).compile(k["source"], k["entry"])
        target = KernelTarget(kern, spec, k["dtype"], spec.out_dtype or k["dtype"], None)
        y = target(x, g, b if b is not None else np.zeros_like(g), r, eps)["output"]
        ref = oracle.for_norm(k["norm"], x, g, b if spec.has("beta") else None, residual=r,
                              eps=eps, convention=spec.convention or "exact",
                              out=spec.out_dtype or k["dtype"])
        label = k["entry"]
    else:
        raise invalid("case", str(path), "a case of a built-in variant or a CUDA kernel",
                      f"a Python callable ({k.get('callable')}) cannot be replayed from a file; "
                      "call it on the saved rows (normcheck.replay.load_case)")
    c = metrics.compare(ref, y)
    s = metrics.summarize(c)
    bad = c.ulp >= max(s.max_ulp, 1e-300) if np.isfinite(s.max_ulp) else ~np.isfinite(c.ulp)
    head = (f"case {path}: {x.shape[0]} row(s) of {x.shape[1]}, eps={float(eps)!r}"
            + (f" — {case['note']}" if case["note"] else ""))
    body = metrics.failure_message(f"replay of {label}", f"{label} ({backend} backend)", ref, y,
                                   bad, x=x, limit="at the worst error")
    return f"{head}\n{body}\n  summary    max {s.max_ulp:.4g} ulp, p99 {s.p99_ulp:.4g}, " \
        f"mean {s.mean_ulp:.4g}, non-finite {s.nonfinite}"
