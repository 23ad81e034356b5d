"""Benchmarks: commands that print figures (never timed tests).

* ``normcheck bench oracle``  — oracle rows/s beside a per-row pure-mpmath LayerNorm.
* ``normcheck bench backend`` — cpu-backend rows/s of a one-block-per-row LayerNorm kernel
  beside numpy's vectorised float32 two-pass LayerNorm.
"""

from __future__ import annotations

import time

import numpy as np

from normcheck import formats, oracle

__all__ = ["oracle_benchmark", "backend_benchmark"]


def _best(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def oracle_benchmark(cols=(1024, 4096), fmts=("fp16", "bf16", "fp32"), elements=1 << 21,
                     mp_rows=2, seed=0, echo=print) -> list[dict]:
    """Rows/s of :func:`normcheck.oracle.layernorm` (with γ and β) on gaussian rows, beside a
    per-row LayerNorm in mpmath at 256 bits (:func:`normcheck.oracle.mp_reference`)."""
    rng = np.random.default_rng(seed)
    out = []
    echo(f"{'format':6} {'D':>5} {'oracle rows/s':>14} {'mpmath rows/s':>14} {'ratio':>8} "
         f"{'not settled in float64':>23}")
    for D in cols:
        for name in fmts:
            f = formats.get(name)
            n = max(64, elements // D)
            x = f.cast(rng.standard_normal((n, D)))
            g = f.cast(rng.standard_normal(D))
            b = f.cast(rng.standard_normal(D))
            oracle.layernorm(x[:8], g, b)  # warm up
            ref = None

            def run():
                nonlocal ref
                ref = oracle.layernorm(x, g, b)

            t_or = _best(run, 3) / n
            t_mp = _best(lambda: [oracle.mp_reference(x[i], g, b, prec=256)
                                  for i in range(mp_rows)], 1) / mp_rows
            row = {"format": name, "cols": D, "oracle_rows_per_s": 1 / t_or,
                   "mpmath_rows_per_s": 1 / t_mp, "ratio": t_mp / t_or,
                   "unsettled_fraction": float(ref.slow.mean())}
            out.append(row)
            echo(f"{name:6} {D:5d} {row['oracle_rows_per_s']:14,.0f} "
                 f"{row['mpmath_rows_per_s']:14,.1f} {row['ratio']:7,.0f}x "
                 f"{row['unsettled_fraction']:23.2e}")
    return out
