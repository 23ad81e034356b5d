"""The yardstick of *warn*: the best built-in order of the same norm and format on the same
rows (two-pass and Welford for LayerNorm, RMS for RMSNorm), its figures kept in the cache
by (built-in build, rows, normcheck's code) -- the check's second stage after the launch.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from normcheck import kernels, metrics
from normcheck.backends import cache
from normcheck.launch import Case

__all__ = ["Yardstick", "Baseline", "case_digest", "yardstick_path"]


@functools.cache
def _code_digest() -> str:
    """sha256 of normcheck's own code (every source file of the package): a figure the code
    computed is kept only for the code that computed it."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for f in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".cpp", ".h", ".cuh", ".cu")
                    and p.is_file()):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def case_digest(c: Case) -> str:
    """sha256 of what a norm kernel reads of a case: x, γ, β, the residual (each dtype, shape
    and bytes) and ε."""
    h = hashlib.sha256(f"{float(c.eps)!r}\0".encode())
    for a in (c.x, c.gamma, c.beta, c.residual):
        if a is None:
            h.update(b"none\0")
        else:
            a = np.ascontiguousarray(a)
            h.update(f"{a.dtype.str}{a.shape}".encode() + a.tobytes() + b"\0")
    return h.hexdigest()


def yardstick_path(v, digest: str, backend):
    """Where the yardstick's figure of built-in ``v`` on the case of :func:`case_digest`
    ``digest`` is kept: a file named by the digest of the built-in's build (its path names its
    build key), the case and normcheck's code; None where it is not kept (a backend whose
    launches are not reproducible, a GPU's; a built-in of another language)."""
    caps = getattr(backend, "capabilities", None)
    if not getattr(caps, "reproducible", False) or getattr(v, "language", "cuda") != \
            getattr(caps, "language", None):
        return None
    k = kernels.compiled(v, backend)
    key = f"{v.name}\0{getattr(k.module, 'path', '')}\0{_code_digest()}\0{digest}"
    return cache.cache_dir("cpu") / "yardstick" / hashlib.sha256(key.encode()).hexdigest()


def _kept_figure(path):
    if path is None or not cache.verified(path):
        return None
    try:
        v = float(path.read_text())
    except (OSError, ValueError):
        return None
    return v if v >= 0 else None


@dataclass
class Baseline:
    name: str           # the built-in variant
    max_scaled: float   # its largest error on the family's rows, in ulps of max(|γx̂|, |β|)


class Yardstick:
    """The forward judge's yardstick (mixed into check.judge.ForwardJudge: its ``norm``, ``fmt``, ``out``, ``rows``,
    ``formats``, ``convention``, ``backend``, ``target``)."""

    # what runs as the yardstick -------------------------------------------------------------------
    def _baselines(self):
        n = self.norm
        if self.rows is not self.fmt:
            return [], (f"no built-in kernel reads {self.rows.name} rows: judged against the "
                        "sound bound only")
        if self.out != self.fmt:
            return [], (f"no built-in kernel writes {self.fmt.name} rows to {self.out.name}: "
                        "judged against the sound bound only")
        stream = [self.formats[r].name for r in ("residual", "h")
                  if r in self.formats and self.formats[r] != self.fmt]
        if n.fused and stream:
            return [], (f"no built-in kernel keeps the residual stream in {stream[0]} beside "
                        f"{self.fmt.name} rows: judged against the sound bound only")
        if n.reference != "exact":
            return [], ("no built-in kernel computes the hf definition: judged against the "
                        "sound bound only")
        algos = ["two_pass", "welford"] if n.centred else ["rms"]
        language = self.target.capabilities.language if hasattr(self.target, "capabilities") \
            else "cuda"  # a Triton kernel's yardstick: the built-in Triton norms
        vs = [v for v in kernels.variants(norm=n.name, storage=self.fmt.name, fast_math=False,
                                          language=language)
              if v.algorithm in algos and v.order in (None, "upcast_square")
              and (not n.fused or v.convention == self.convention or self.fmt.name == "fp32")]
        if not vs:  # the fail rule needs no built-in: only warn's yardstick is missing
            return [], (f"no built-in {n.name} kernel for {self.fmt.name}: judged against the "
                        "sound bound only")
        return vs, None

    def baseline_errors(self, case: Case, ref) -> dict:
        """{variant: largest scaled error} of the built-in orders on the case.  A figure is
        the same whenever the built-in's build, the rows and normcheck's code are (the oracle
        and the built-ins are deterministic): on the cpu backend it is kept in the cache,
        ledger-sealed, keyed by all three (:func:`yardstick_path`), and not measured again
        (#67: every check re-ran the same 24 built-in launches)."""
        out = {}
        n = self.norm
        c = Case(x=case.x, gamma=case.gamma if n.has_gamma else None,
                 beta=case.beta if n.reads_beta else None, residual=case.residual, eps=case.eps)
        digest = case_digest(c) if self.baselines else None
        for v in self.baselines:
            path = yardstick_path(v, digest, self.backend)
            kept = _kept_figure(path)
            if kept is not None:
                out[v.name] = kept
                continue
            y = kernels.run_case(v, c, self.backend)["output"]
            s = metrics.compare(ref, y, ordinal=False).scaled
            s = s[np.isfinite(s)]
            out[v.name] = float(s.max()) if s.size else 0.0
            if path is not None:
                try:
                    cache.install_file(repr(out[v.name]), path)
                except OSError:
                    pass  # a read-only cache: measured again next time
        return out
