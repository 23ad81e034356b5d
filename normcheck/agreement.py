"""CPU/GPU agreement: the same built-in kernels on the cpu and cuda backends, element by element.

Built with ``--fmad=false`` every variant must give bit-identical outputs on both, except those
using approximate intrinsics (the fast-math flavour's rsqrtf); with ``--fmad=true`` nvcc fuses
multiply-adds and the differences are listed with their size in ULP (ordinal distance)."""

from __future__ import annotations

import numpy as np

from normcheck import families, kernels, launch

__all__ = ["compare_backends", "format_agreement"]

FAMILIES = ("gaussian", "offset", "fp16_large", "outlier", "tails", "special")


def _outputs(v, x, g, b, r, backend, options):
    out = kernels.run_case(v, launch.Case(x=x, gamma=g, beta=b, residual=r), backend,
                           options=options)
    return (out["h"], out["output"]) if v.fused else (out["output"],)


def compare_backends(fmad=False, rows=32, seed=0, variants=None, echo=print) -> list[dict]:
    """For every variant: elements compared, how many differ, the largest difference in ULP
    (ordinal steps of the storage format), over a few families and widths."""
    vs = variants or kernels.variants()
    out = []
    for v in vs:
        fmt = v.fmt
        n = diff = 0
        worst = 0.0
        for fam in FAMILIES:
            for cols in (families.get(fam).cols if fam != "tails" else (1, 33, 257, 4097)):
                x = families.generate(fam, fmt, rows, cols, seed=seed)
                g, b = families.weights(fmt, cols, seed=seed)
                r = families.generate("gaussian", fmt, rows, cols, seed=seed + 1)
                a = _outputs(v, x, g, b, r, "cpu", None)
                c = _outputs(v, x, g, b, r, "cuda", {"fmad": fmad})
                for ya, yc in zip(a, c):
                    same = (ya.view(fmt.uint) == yc.view(fmt.uint)) | (
                        np.isnan(ya.astype(np.float64)) & np.isnan(yc.astype(np.float64)))
                    n += same.size
                    diff += int((~same).sum())
                    if (~same).any():
                        fin = ~same & np.isfinite(ya.astype(np.float64)) & np.isfinite(
                            yc.astype(np.float64))
                        d = np.abs(fmt.ordinal(ya[fin]) - fmt.ordinal(yc[fin]))
                        worst = max(worst, float(d.max()) if d.size else np.inf)
        rec = {"kernel": v.name, "fmad": fmad, "elements": n, "differ": diff,
               "max_ulp_apart": worst, "approximate": v.fast_math,
               "agree": diff == 0 or v.fast_math or fmad}
        out.append(rec)
        echo(f"{v.name:55} {'identical' if diff == 0 else f'{diff}/{n} differ, up to {worst:g} ulp'}")
    return out


def format_agreement(recs) -> str:
    lines = ["| kernel | fmad | differ | max ulp apart |", "|---|---|---:|---:|"]
    for r in recs:
        lines.append(f"| {r['kernel']} | {r['fmad']} | {r['differ']}/{r['elements']} | "
                     f"{r['max_ulp_apart']:g} |")
    return "\n".join(lines) + "\n"
