"""Save a failing case to a file and replay it: the counterexample a person can run again.

A case file (.npz) holds data, never code to run: the rows, γ, β, the residual and ε as the bits
of their storage format, and a description of what ran them -- a built-in variant, or a user
kernel by the *path* of its source and spec and the SHA-256 of their content at the time.
``normcheck replay FILE`` compiles the source on disk (and says so when it has changed since);
a case saved from a kernel given as text carries that text, and it runs only behind
``--run-embedded-source``, which says what it does: compile and run C++ from the file.

Files are written under a name no other run uses (``.normcheck/counterexample-<kernel>-<time>-
<pid>.npz``, created exclusively), so concurrent checks never overwrite each other's.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zipfile
from pathlib import Path

import numpy as np

from normcheck import formats
from normcheck.errors import InvalidArgument, NormcheckError, invalid

__all__ = ["save_case", "load_case", "command", "replay", "EMBEDDED_FLAG"]

EMBEDDED_FLAG = "--run-embedded-source"
_ARRAYS = ("x", "gamma", "beta", "residual", "dy", "mean", "rstd")


def _slug(s):
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in str(s))[:60] or "kernel"


def _store(a):
    fmt = formats.of_dtype(a.dtype)
    return a.view(fmt.uint), fmt.name


def save_case(path=None, *, kernel: dict, x, gamma=None, beta=None, residual=None,
              eps=np.float32(1e-5), note: str = "", label=None, exclusive=True, **extra) -> Path:
    """Write a case file; ``kernel`` describes what ran (e.g. {"variant": name} or
    {"source": ..., "sha256": ..., "entries": [...], "norm": ..., "dtype": ..., "spec": ...}).
    Without ``path`` the file goes to .normcheck/ under a name of its own."""
    if path is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path(".normcheck") / f"counterexample-{_slug(label or 'kernel')}-{stamp}-" \
                                    f"{os.getpid()}.npz"
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays, kinds = {}, {}
    for name, a in (("x", x), ("gamma", gamma), ("beta", beta), ("residual", residual),
                    *extra.items()):
        if a is not None:
            bits, fmt = _store(np.ascontiguousarray(a))
            arrays[name] = bits
            kinds[name] = fmt
    meta = {"kernel": kernel, "formats": kinds, "eps": float(np.float32(eps)), "note": note,
            "version": 2}
    if exclusive:
        n = 0
        while True:
            cand = path if n == 0 else path.with_name(f"{path.stem}-{n}.npz")
            try:
                fd = os.open(cand, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                n += 1
        path = cand
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, meta=np.array(json.dumps(meta)), **arrays)
    else:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            np.savez_compressed(f, meta=np.array(json.dumps(meta)), **arrays)
        os.replace(tmp, path)
    return path


def _bad(path, why):
    return invalid("case", str(path), "a case file written by normcheck (.npz)",
                   f"{why}; save it again with normcheck check --save-counterexample")


def load_case(path) -> dict:
    """Read a case file: {"kernel", "x", "gamma", "beta", "residual", "eps", "note", ...}; a
    missing, truncated or corrupt file is an InvalidArgument naming it."""
    path = Path(path)
    if path.is_dir():
        raise invalid("case", str(path), "a case file, not a folder")
    try:
        with np.load(path, allow_pickle=False) as data:
            if "meta" not in data.files:
                raise _bad(path, "it has no metadata")
            meta = json.loads(str(data["meta"]))
            arrays = {k: data[k] for k in data.files if k != "meta"}
    except InvalidArgument:
        raise
    except FileNotFoundError:
        raise invalid("case", str(path), "an existing case file", "check the path") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError,
            json.JSONDecodeError) as e:
        raise _bad(path, f"it cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("kernel"), dict) or \
            not isinstance(meta.get("formats"), dict) or "x" not in meta["formats"]:
        raise _bad(path, "its metadata is incomplete")
    try:
        out = {"kernel": meta["kernel"], "eps": np.float32(meta["eps"]),
               "note": str(meta.get("note", ""))}
        for name in _ARRAYS:
            if name in meta["formats"]:
                if name not in arrays:
                    raise _bad(path, f"the array {name!r} is missing")
                fmt = formats.get(meta["formats"][name])
                a = arrays[name]
                if a.dtype != fmt.uint:
                    raise _bad(path, f"the array {name!r} is not {fmt.name} bits")
                out[name] = a.view(fmt.dtype)
            else:
                out[name] = None
    except NormcheckError:
        raise
    except (TypeError, ValueError) as e:
        raise _bad(path, f"its metadata is malformed ({e})") from None
    x = out["x"]
    if x.ndim != 2 or x.size == 0:
        raise _bad(path, f"x has shape {x.shape}, not [rows, cols]")
    for name in ("gamma", "beta"):
        if out[name] is not None and out[name].shape != (x.shape[1],):
            raise _bad(path, f"{name} has shape {out[name].shape}, not ({x.shape[1]},)")
    for name in ("residual", "dy"):
        if out[name] is not None and out[name].shape != x.shape:
            raise _bad(path, f"{name} has shape {out[name].shape}, not {x.shape}")
    return out


def command(path) -> str:
    return f"normcheck replay {path}"


def _sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _kernel_target(case, k, path, backend, run_embedded, notes):
    from normcheck import launch, norms, spec as specs

    src = k.get("source")
    if src == "<string>" or "source_text" in k:
        if not run_embedded:
            raise invalid("case", str(path), "a case whose kernel source is a file on disk",
                          f"this case carries its kernel's C++ source: replaying it compiles "
                          f"and runs that code on this machine -- only if you trust the file, "
                          f"run normcheck replay {path} {EMBEDDED_FLAG}")
        src = k["source_text"]
        notes.append("ran the C++ source embedded in the case file (--run-embedded-source)")
    else:
        if not src or not Path(src).is_file():
            raise invalid("case.source", src, "the kernel's source file, as it was when the "
                          "case was saved", "restore the file, or run the check again")
        if k.get("sha256") and _sha256(src) != k["sha256"]:
            notes.append(f"{src} has changed since the case was saved: replaying the file as it "
                         "is now")
    norm = norms.get(k["norm"])
    if k.get("spec"):
        sp = Path(k["spec"])
        if not sp.is_file():
            raise invalid("case.spec", str(sp), "the kernel's spec file",
                          "restore the file, or run the check again")
        if k.get("spec_sha256") and _sha256(sp) != k["spec_sha256"]:
            notes.append(f"{sp} has changed since the case was saved")
        spec = specs.load(sp)
    else:
        spec = specs.default_spec(norm, int(k.get("block") or 256))
        spec.launches[0].entry = (k.get("entries") or [k.get("entry")])[0]
    if len(spec.launches) == 1 and (k.get("entries") or k.get("entry")):
        spec.launches[0].entry = (k.get("entries") or [k.get("entry")])[0]
    norm = norm.with_affine(spec.has("gamma"), spec.has("beta")).with_reference(
        k.get("reference") or spec.reference or "exact")
    target = launch.bind(spec, src, norm=norm, dtype=k["dtype"],
                         out_dtype=k.get("out_dtype") or spec.out_dtype or k["dtype"],
                         backend=backend, defines=k.get("defines") or None)
    return target, spec, norm


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
        out = kernels.run(v, x, g, b if v.has_beta else None, eps=eps, residual=r,
                          backend=backend)
        y = out[1] if v.fused else out
        ref, _ = kernels.reference(v, x, g, b if v.has_beta else None, eps=eps, residual=r)
        label = v.name
    elif k.get("source") or k.get("source_text"):
        target, spec, norm = _kernel_target(case, k, path, backend, run_embedded, notes)
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
