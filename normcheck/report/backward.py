"""The report's backward section: the built-in backward kernels measured against the exact
gradients (normcheck.oracle.backward) with the saved statistics, and dγ's error against the
number of rows summed for each accumulation strategy (atomics, partial sums, the storage
format), with the atomics' run-to-run spread over seeded block orders.

Small and fast (a few seconds): it is measured on every run of the report, not resumed."""

from __future__ import annotations

import numpy as np

from normcheck import bounds, formats, kernels, oracle, progress
from normcheck.backends import get_backend
from normcheck.oracle import backward as oracle_backward

__all__ = ["measure", "ROWS_SWEEP", "DX_FAMILIES"]

#: Rows summed in the dγ sweep (the column sums' length).
ROWS_SWEEP = (16, 64, 256, 1024, 4096)
#: (family, what it does to dx) of the dx table.
DX_FAMILIES = (("gaussian", "x and dy independent"),
               ("offset", "x offset (κ 1e5 fp32, 100 fp16, 30 bf16): naive Σg·x cancels"),
               ("correlated", "dy ≈ x̂: dx's terms cancel"))


def _dx_table(backend, seed, cols):
    from normcheck import families

    out = []
    vs = kernels.variants(kind="dx")
    for k, v in enumerate(vs):
        progress.advance(k, len(vs))
        for fam, _ in DX_FAMILIES:
            x, dy = families.backward_rows(fam, v.storage, 15, cols, seed=[seed, 3])
            g = formats.get(v.storage).cast(1 + 0.3 * np.random.default_rng(
                [seed, cols]).standard_normal(cols))
            m, r = oracle.saved_statistics(v.norm, x)
            dx = kernels.run_backward_dx(v, x, dy, g, m, r, backend=backend)
            ref = oracle_backward.backward(v.norm, x, dy, g, stats="saved", mean=m, rstd=r)
            E = bounds.sound_backward(v.norm, x, dy, g, mean=m, rstd=r)["dx"]
            ratio = np.abs(dx.astype(np.float64) - ref.dx.exact) / bounds.sound_limit(ref.dx, E)
            ulp = ref.dx.ulp_error(dx)
            out.append({"kernel": v.name, "norm": v.norm, "algorithm": v.algorithm,
                        "storage": v.storage, "family": fam, "cols": cols,
                        "max_ulp": float(np.max(ulp)), "of_bound": float(np.max(ratio)),
                        "within_bound": bool(np.all(ratio <= 1))})
    return out


def _dgamma_sweep(backend, seed, cols, rows_sweep, orders):
    out = []
    vs = kernels.variants(kind="dparams", norm="rmsnorm")
    for k, v in enumerate(vs):
        progress.advance(k, len(vs))
        for R in rows_sweep:
            f = v.fmt
            rng = np.random.default_rng([seed, R, f.bits])
            # x̂ ≈ 1 and dy ≈ 0.5: the column sums grow with the rows, as dβ's do
            x = f.cast(2 + 0.1 * rng.standard_normal((R, cols)))
            dy = f.cast(0.5 + 0.1 * rng.standard_normal((R, cols)))
            m, r = oracle.saved_statistics("rmsnorm", x)
            ref = oracle_backward.backward("rmsnorm", x, dy, np.ones(cols, x.dtype),
                                           stats="saved", rstd=r, param_out=v.param_fmt.name)
            E = bounds.sound_backward("rmsnorm", x, dy, None, rstd=r)["dgamma"]
            runs = []
            for s in range(orders if v.algorithm == "atomic" and
                           get_backend(backend).capabilities.block_orders else 1):
                launch = {"schedule": "random", "seed": s, "workers": 1} if s else {}
                dg, _ = kernels.run_backward_dparams(v, x, dy, m, r, backend=backend, **launch)
                runs.append(dg)
            dg = runs[0]
            rel = np.abs(dg.astype(np.float64) - ref.dgamma.exact) / np.abs(ref.dgamma.exact)
            ratio = np.abs(dg.astype(np.float64) - ref.dgamma.exact) / \
                bounds.sound_limit(ref.dgamma, E)
            spread = 0.0
            if len(runs) > 1:
                a = np.stack([o.astype(np.float64) for o in runs])
                spread = float(np.max((a.max(axis=0) - a.min(axis=0)) /
                                      formats.FP32.ulp_array(np.abs(ref.dgamma.exact))))
            out.append({"kernel": v.name, "algorithm": v.algorithm, "storage": v.storage,
                        "rows": R, "cols": cols, "max_rel_error": float(np.max(rel)),
                        "max_ulp": float(np.max(ref.dgamma.ulp_error(dg))),
                        "of_bound": float(np.max(ratio)), "spread_ulp": spread,
                        "orders": len(runs)})
    return out


def measure(backend="cpu", seed=0, mode="quick", orders=8) -> dict:
    """{"dx": [...], "dgamma": [...]}: the backward section's measurements."""
    be = backend if isinstance(backend, str) else backend.name
    cols = 768 if mode == "quick" else 4096
    rows_sweep = ROWS_SWEEP if mode != "quick" else ROWS_SWEEP[:-1]
    with progress.step("the backward section: dx of each built-in dx kernel"):
        dx = _dx_table(be, seed, cols)
    with progress.step(f"the backward section: dγ of each built-in kernel over {rows_sweep} rows"):
        dg = _dgamma_sweep(be, seed, 64, rows_sweep, orders)
    return {"dx": dx, "dgamma": dg}
