"""The report's plots (matplotlib, Agg): PNG files, also embedded in index.html."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from normcheck import formats

__all__ = ["conditioning", "overflow_map", "histograms", "rsqrt_cost", "render_all"]

_COLORS = {"naive": "#d62728", "two_pass": "#1f77b4", "welford": "#2ca02c"}
_ORDER_COLORS = {"upcast_square": "#1f77b4", "square_upcast": "#d62728",
                 "storage_accumulate": "#ff7f0e"}



def _save(fig, path, dpi):
    """The figure as PNG, written safely (normcheck.report.folder.write: no write through a
    link)."""
    import io

    from normcheck.report import folder

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    folder.write(path, buf.getvalue())

def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def conditioning(records, path: Path) -> Path | None:
    """Max ULP against κ = |μ|/σ (log-log), naive vs two-pass vs Welford per format, with the
    shapes of the Chan-Golub-LeVeque bounds (one-pass ∝ κ², updating ∝ κ, two-pass flat until
    its κ²u² term) anchored at each algorithm's first point."""
    recs = [r for r in records if "kappa" in r.param and r.worst]
    if not recs:
        return None
    plt = _plt()
    fmts = [f for f in formats.FORMATS if any(r.storage == f for r in recs)]
    fig, axes = plt.subplots(1, len(fmts), figsize=(5.2 * len(fmts), 4.4), squeeze=False)
    u = {"fp32": 2.0**-24, "fp16": 2.0**-24, "bf16": 2.0**-24}  # float accumulation
    for ax, fmt in zip(axes[0], fmts):
        for algo in ("naive", "two_pass", "welford"):
            rs = sorted((r for r in recs if r.storage == fmt and r.algorithm == algo),
                        key=lambda r: r.param["kappa"])
            if not rs:
                continue
            k = np.array([r.param["kappa"] for r in rs])
            e = np.array([max(r.max_scaled_ulp, 1e-3) if math.isfinite(r.max_ulp)
                          else np.nan for r in rs])
            ax.loglog(k, e, "o-", color=_COLORS[algo], label=f"{algo} (measured)")
            bad = [kk for kk, r in zip(k, rs) if not math.isfinite(r.max_ulp)]
            if bad:
                ax.plot(bad, [np.nanmax(e[np.isfinite(e)]) if np.isfinite(e).any() else 1] *
                        len(bad), "x", color=_COLORS[algo], ms=9, label=f"{algo}: non-finite")
            a = e[np.isfinite(e)][0] if np.isfinite(e).any() else 1.0
            kk = np.logspace(0, math.log10(k.max()), 50)
            if algo == "naive":
                shape = a * (1 + kk**2) / 2
            elif algo == "welford":
                shape = a * (1 + kk) / 2
            else:
                shape = a * (1 + (kk * u[fmt]) ** 2 * 4096)
            ax.loglog(kk, shape, "--", color=_COLORS[algo], alpha=0.5,
                      label={"naive": "∝ κ² (one-pass)", "welford": "∝ κ (updating)",
                             "two_pass": "flat + κ²u² (two-pass)"}[algo])
        ax.set_title(f"LayerNorm, {fmt} storage")
        ax.set_xlabel("κ = |mean| / std")
        ax.set_ylabel("max error, ulps of max(|γx̂|, |β|)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Error against conditioning (Chan, Golub & LeVeque bound shapes dashed)")
    fig.tight_layout()
    _save(fig, path, 110)
    plt.close(fig)
    return path


def overflow_map(records, path: Path) -> Path | None:
    """fp16: share of outputs that are grossly wrong (non-finite, or >= 100 ULP) against the
    row's largest |x|, per precision order: square_upcast falls off a cliff at 256."""
    recs = [r for r in records if "magnitude" in r.param]
    if not recs:
        return None
    plt = _plt()
    norms = sorted({r.kernel.rsplit("_fp16_", 1)[0] for r in recs})
    fig, axes = plt.subplots(1, len(norms), figsize=(5.2 * len(norms), 4.2), squeeze=False)
    for ax, nm in zip(axes[0], norms):
        for order, col in _ORDER_COLORS.items():
            rs = sorted((r for r in recs if r.kernel == f"{nm}_fp16_{order}"),
                        key=lambda r: r.param["magnitude"])
            if not rs:
                continue
            m = [r.param["magnitude"] for r in rs]
            frac = []
            for r in rs:
                if not r.classes:  # a launch that failed
                    frac.append(1.0)
                    continue
                total = sum(r.classes.values()) or 1
                nonfin = sum(r.nonfinite.values())
                h = r.histogram
                gross = h[-1] if r.max_ulp >= 64 else 0  # the >= 64 ulp bin
                frac.append(min(1.0, (nonfin + gross) / total))
            ax.semilogx(m, frac, "o-", color=col, label=order, base=2)
        ax.axvline(256, color="gray", ls=":", label="256 (256² > 65504)")
        ax.set_title(nm.replace("_", " "))
        ax.set_xlabel("max |x| in the row")
        ax.set_ylabel("share of outputs non-finite or >= 64 ULP off")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("fp16 overflow map: the precision order decides")
    fig.tight_layout()
    _save(fig, path, 110)
    plt.close(fig)
    return path


def histograms(records, path: Path, bins) -> Path | None:
    """ULP-error histograms on gaussian rows (every width together): one panel per storage
    format and precision order (the built-ins of that column together), and one per kernel of
    the user's, first and in orange -- a dozen legible panels, not one per built-in."""
    recs = [r for r in records if r.family == "gaussian" and not r.param
            and r.histogram]
    if not recs:
        return None
    plt = _plt()
    panels = []  # (title, histogram, yours)
    for name in sorted({r.kernel for r in recs if r.user}):
        h = np.sum([r.histogram for r in recs if r.user and r.kernel == name], axis=0)
        panels.append((f"{name} (yours)", h, True))
    groups = {}
    for r in recs:
        if not r.user:
            groups.setdefault((r.storage or "?", r.order or ""), []).append(r.histogram)
    order = {"fp32": 0, "fp16": 1, "bf16": 2}
    for (st, od), hs in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 9),
                                                               kv[0][1])):
        panels.append((f"{st} {od}".strip() + f" built-ins ({len(hs)} records)",
                       np.sum(hs, axis=0), False))
    ncol = 3
    nrow = math.ceil(len(panels) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 2.9 * nrow), squeeze=False)
    labels = [f"≤{b:g}" if math.isfinite(b) else ">64" for b in bins[1:]]
    for ax, (title, h, yours) in zip(axes.ravel(), panels):
        ax.bar(range(len(h)), h / max(h.sum(), 1), color="#ff7f0e" if yours else "#1f77b4")
        ax.set_xticks(range(len(h)))
        ax.set_xticklabels(labels, fontsize=8, rotation=45)
        ax.set_title(title, fontsize=10, fontweight="bold" if yours else "normal")
        ax.set_ylim(0, 1)
        ax.set_ylabel("share of elements", fontsize=8)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / fig.get_figheight()))
    fig.suptitle("ULP error on gaussian rows: share of elements per bin (orange: your kernels; "
                 "blue: the built-ins of one format and precision order together)",
                 y=1 - 0.15 / fig.get_figheight())
    _save(fig, path, 90)
    plt.close(fig)
    return path


def rsqrt_cost(records, path: Path, backend: str) -> Path | None:
    """What rsqrtf costs against the correctly rounded __frsqrt_rn (two-pass LayerNorm), per
    family — a GPU measurement; the cpu backend evaluates rsqrtf as 1/sqrtf, so it has none."""
    from normcheck.backends import capabilities_of

    caps = capabilities_of(backend)
    if caps is None or not caps.hardware_rsqrt:
        return None
    fast = {(r.storage, r.order, r.family): r for r in records
            if r.kernel.endswith("_fast") and not r.param}
    if not fast:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4))
    keys = sorted(fast)
    exact = {(r.storage, r.order, r.family): r for r in records
             if r.algorithm == "two_pass" and r.norm == "layernorm" and
             not r.fast_math and not r.param}
    xs = np.arange(len(keys))
    ax.bar(xs - 0.2, [exact[k].max_ulp if k in exact else 0 for k in keys], 0.4,
           label="__frsqrt_rn")
    ax.bar(xs + 0.2, [fast[k].max_ulp for k in keys], 0.4, label="rsqrtf")
    ax.set_xticks(xs)
    ax.set_xticklabels(["/".join(str(p) for p in k if p) for k in keys], rotation=90,
                       fontsize=6)
    ax.set_yscale("log")
    ax.set_ylabel("max ULP")
    ax.legend()
    fig.tight_layout()
    _save(fig, path, 100)
    plt.close(fig)
    return path


def dgamma_rows(backward, path: Path) -> Path | None:
    """dγ's largest relative error against the number of rows summed, one line per accumulation
    strategy and format (the report's backward section)."""
    pts = (backward or {}).get("dgamma") or []
    if not pts:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    lines = {}
    for p in pts:
        lines.setdefault((p["algorithm"], p["storage"]), []).append(p)
    for (algo, st), ps in sorted(lines.items()):
        ps = sorted(ps, key=lambda p: p["rows"])
        ax.plot([p["rows"] for p in ps], [max(p["max_rel_error"], 1e-12) for p in ps],
                marker="o", linestyle="--" if algo == "storage" else "-",
                label=f"{algo} ({st} rows)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("rows summed")
    ax.set_ylabel("max relative error of dγ")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    _save(fig, path, 100)
    plt.close(fig)
    return path


def saturation_map(quant, path: Path) -> Path | None:
    """The fp8 counterpart of the fp16 overflow map: the share of e4m3 values that are ±448, NaN
    or inf against the rows' largest |y|/scale (in units of 448), per static contract."""
    pts = (quant or {}).get("saturation") or []
    if not pts:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    lines = {}
    for p in pts:
        lines.setdefault(p["kernel"], []).append(p)
    for k, ps in lines.items():
        ps = sorted(ps, key=lambda p: p["load"])
        oracle = "oracle" in k
        ax.plot([p["load"] for p in ps], [p["saturated"] for p in ps], marker="o",
                linestyle="--" if oracle else "-", label=f"{k}: ±448")
        if any(p["nan"] or p["inf"] for p in ps):
            ax.plot([p["load"] for p in ps], [p["nan"] + p["inf"] for p in ps], marker="x",
                    linestyle=":", label=f"{k}: NaN/inf")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("row's largest |y| / scale, in units of 448")
    ax.set_ylabel("share of the values")
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path, 100)
    plt.close(fig)
    return path


def order_flips(quant, path: Path) -> Path | None:
    """Order flips (allowed) and contract flips (none for a built-in) per built-in quantised
    kernel, on the gaussian and amax_boundary rows."""
    recs = [d for d in (quant or {}).get("builtins") or []
            if d["family"] in ("gaussian", "amax_boundary")]
    if not recs:
        return None
    plt = _plt()
    kern = list(dict.fromkeys(d["kernel"] for d in recs))
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(kern) + 1.5))
    y = np.arange(len(kern))
    for k, (fam, off) in enumerate((("gaussian", -0.2), ("amax_boundary", 0.2))):
        vals = [next((100 * d["values"]["order_share"] for d in recs
                      if d["kernel"] == kn and d["family"] == fam), 0.0) for kn in kern]
        ax.barh(y + off, vals, height=0.4, label=f"order flips, {fam} rows")
    ax.set_yticks(y)
    ax.set_yticklabels(kern, fontsize=7)
    worst = max(d["values"]["contract_share"] for d in recs)
    ax.set_xlabel(f"% of the values (contract flips: at most {100 * worst:.3g}%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path, 100)
    plt.close(fig)
    return path


def render_all(results, out_dir: Path, bins) -> dict:
    """Every plot that applies; none (and the report says so) where matplotlib is missing."""
    out_dir = Path(out_dir)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return {}
    recs = results["records"]
    backend = results["provenance"]["backend"]
    made = {
        "conditioning": conditioning(recs, out_dir / "conditioning.png"),
        "overflow_map": overflow_map(recs, out_dir / "fp16_overflow_map.png"),
        "histograms": histograms(recs, out_dir / "histograms.png", bins),
        "rsqrt": rsqrt_cost(recs, out_dir / "rsqrt_cost.png", backend),
        "dgamma_rows": dgamma_rows(results.get("backward"), out_dir / "dgamma_rows.png"),
        "saturation_map": saturation_map(results.get("quantised"),
                                         out_dir / "fp8_saturation_map.png"),
        "order_flips": order_flips(results.get("quantised"), out_dir / "quant_order_flips.png"),
    }
    return {k: v for k, v in made.items() if v is not None}
