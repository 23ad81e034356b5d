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

__all__ = ["save_case", "load_case", "command"]


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
