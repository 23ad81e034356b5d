"""Render results.json: report.md, a self-contained index.html (plots embedded) and the PNGs.

Tables in the manner of the CUDA Math API and Zimmermann's max-ULP tables: for each input
family, the variants down the side and the storage format / precision order across, each cell
the largest ULP error measured, linked to the file holding its worst row (with the command that
replays it)."""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import numpy as np

from normcheck import families
from normcheck.metrics import short
from normcheck.report import folder, plots
from normcheck.report.sweep import HIST_BINS

__all__ = ["render", "COLUMNS"]

COLUMNS = [("fp32", None), ("fp16", "upcast_square"), ("fp16", "square_upcast"),
           ("fp16", "storage_accumulate"), ("bf16", "upcast_square"), ("bf16", "square_upcast"),
           ("bf16", "storage_accumulate")]
_COL_NAMES = ["fp32", "fp16 up", "fp16 sq", "fp16 acc", "bf16 up", "bf16 sq", "bf16 acc"]


def _row_label(r):
    s = f"{r['norm']} {r['algorithm']}"
    if r.get("convention"):
        s += f" ({r['convention']})"
    if r.get("fast_math"):
        s += " rsqrtf"
    return s


def _num(v):
    return short(float(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                 else v)


def _cell(recs):
    """The worst record of a cell and its text."""
    if not recs:
        return None, "-"
    worst = max(recs, key=lambda r: (r["max_ulp"] if not math.isnan(r["max_ulp"]) else -1))
    nf = sum(sum(r.get("nonfinite", {}).values()) for r in recs)
    err = [r for r in recs if r.get("error")]
    text = _num(worst["max_ulp"])
    if err:
        text = err[0]["error"]["kind"]
    elif nf:
        text += f" ({nf} nf)"
    return worst, text


def _family_tables(records):
    grid = [r for r in records if not r.get("param")]
    out = []
    for fam in families.FAMILIES:
        recs = [r for r in grid if r["family"] == fam]
        if not recs:
            continue
        labels = []
        for r in recs:
            lab = _row_label(r)
            if lab not in labels:
                labels.append(lab)
        rows = []
        for lab in labels:
            cells = []
            for st, order in COLUMNS:
                cs = [r for r in recs if _row_label(r) == lab and r["storage"] == st and
                      (r.get("order") == order)]
                cells.append(_cell(cs))
            rows.append((lab, cells))
        widths = sorted({r["cols"] for r in recs})
        out.append((fam, families.get(fam).note, widths, rows))
    return out


def _md_table(rows):
    lines = ["| variant | " + " | ".join(_COL_NAMES) + " |",
             "|---|" + "---:|" * len(_COL_NAMES)]
    for lab, cells in rows:
        parts = []
        for rec, text in cells:
            if rec is None or not rec.get("worst"):
                parts.append(text)
            else:
                parts.append(f"[{text}]({rec['worst']['file']})")
        lines.append(f"| {lab} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def _html_table(rows, out_dir):
    h = ["<table><tr><th>variant</th>" + "".join(f"<th>{c}</th>" for c in _COL_NAMES) + "</tr>"]
    for lab, cells in rows:
        tds = []
        for rec, text in cells:
            cls = ""
            if rec is not None:
                m = rec["max_ulp"]
                cls = "ok" if m <= 1 else ("warn" if m <= 16 else "bad")
                if rec.get("error") or sum(rec.get("nonfinite", {}).values()):
                    cls = "bad"
            if rec is None or not rec.get("worst"):
                tds.append(f'<td class="{cls}">{html.escape(text)}</td>')
            else:
                w = rec["worst"]
                cmd = w["replay"].replace("{dir}", str(out_dir))
                title = (f"worst: row {w['row']}, col {w['col']} of width {rec['cols']}: "
                         f"x={w['x']!r} kernel={w['kernel']!r} exact={w['exact']!r}\n{cmd}")
                tds.append(f'<td class="{cls}"><a href="{html.escape(w["file"])}" '
                           f'title="{html.escape(title)}">{html.escape(text)}</a></td>')
        h.append(f"<tr><th class='lab'>{html.escape(lab)}</th>{''.join(tds)}</tr>")
    h.append("</table>")
    return "\n".join(h)


def _audit_md(audit):
    lines = []
    for a in audit:
        lines.append(f"### {a['verdict'].upper()}: {a['claim']}\n")
        lines.append(f"*{a['source']}.* {a['evidence']}\n")
    return "\n".join(lines)


def _provenance_md(p):
    keys = ["normcheck", "git_commit", "backend", "compiler", "flags", "fmad", "cpu", "gpu",
            "python", "numpy", "mpmath", "hypothesis", "seed", "mode", "date"]
    return "\n".join(f"- **{k}**: {p.get(k)}" for k in keys if p.get(k) is not None)


PLOT_TEXT = {
    "conditioning": ("Error against conditioning", "Largest error of LayerNorm (in ulps of "
                     "max(|γx̂|, |β|)) on rows μ + σ·N(0,1) with κ = |μ|/σ swept over decades, "
                     "per format (16-bit formats with upcast_square).  Dashed: the shapes of the "
                     "Chan-Golub-LeVeque bounds on the variance — one-pass ∝ κ², updating ∝ κ, "
                     "two-pass flat until its κ²u² term.  The output also inherits the float "
                     "mean's error (∝ κ·u relative to σ), which every float kernel shares: that "
                     "is the slope of the two-pass points in fp32.  In fp16/bf16 the float "
                     "accumulator is 2^13-2^16 times finer than the output, so only the one-pass "
                     "kernel shows its κ²."),
    "overflow_map": ("fp16 overflow map", "Share of outputs that are non-finite or ≥ 64 ULP "
                     "off against the row's largest |x|, per precision order.  square_upcast "
                     "falls off the cliff at 256 (256² = 65536 > 65504) where it squares x "
                     "itself; storage_accumulate overflows once the running sum does."),
    "histograms": ("ULP histograms on gaussian rows", "Share of elements per error bin, every "
                   "width of the gaussian family together."),
    "rsqrt": ("What rsqrtf costs", "Two-pass LayerNorm with rsqrtf against __frsqrt_rn, max ULP "
              "per format/order/family, measured on the GPU."),
    "dgamma_rows": ("dγ against the rows summed", "RMSNorm's dγ = Σ_rows dy·x̂ (x̂ ≈ 1, dy ≈ "
                    "0.5, so the partial sums grow with the rows) for each accumulation "
                    "strategy: float atomics and per-block partial sums stay near float's "
                    "rounding; summing in fp16/bf16 stagnates once the partial sum's spacing "
                    "passes the terms (2048 in fp16, 256 in bf16)."),
    "saturation_map": ("fp8 saturation map", "The fp8 counterpart of the fp16 overflow map: "
                       "the share of e4m3 values that are ±448 (solid) or NaN (dotted) against "
                       "the rows' largest |y| over the static scale, in units of 448, for the "
                       "static built-ins (clamped or satfinite: they saturate, never NaN) and "
                       "for the contract without the clamp (the oracle: a cast that is not "
                       "saturating returns NaN above 464)."),
    "order_flips": ("Order flips of the quantised built-ins", "Share of the values that are "
                    "order flips -- another value a sound kernel of the contract may write, "
                    "the exact value being within the sound bound of a rounding boundary -- on "
                    "gaussian rows and on rows whose amax sits on a bf16 boundary (where the "
                    "whole row's scale flips).  A dynamic scale turns one flip of amax into "
                    "flips across the row; the axis label gives the largest share of contract "
                    "flips measured."),
}

_BACKWARD_PLOT = "dgamma_rows"
_QUANT_PLOTS = ("saturation_map", "order_flips")


def _plain_table(rows):
    head, *body = rows
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


def _backward_md(bw):
    """The backward section: dx of every built-in dx kernel per family, and the dγ sweep."""
    if not bw:
        return []
    out = ["## Backward\n",
           "Built-in backward kernels (cuda_src/backward.cu) against the exact gradients "
           "(normcheck.oracle_backward) with the saved statistics; each cell the largest ULP "
           "error and, in brackets, the error over the sound backward bound "
           "(normcheck.bounds.sound_backward; above 1 fails the check).\n"]
    fams = list(dict.fromkeys(d["family"] for d in bw["dx"]))
    kern = list(dict.fromkeys(d["kernel"] for d in bw["dx"]))
    rows = [["dx kernel"] + fams]
    for k in kern:
        rows.append([k] + [next((f"{_num(d['max_ulp'])} ({_num(d['of_bound'])}x)"
                                 for d in bw["dx"] if d["kernel"] == k and d["family"] == f),
                                "-") for f in fams])
    out.append(_plain_table(rows))
    out.append("\ndγ over the rows (64 columns): largest relative error, its ratio to the sound "
               "bound, and for the atomics the spread over seeded block orders (ulps).\n")
    rs = sorted({d["rows"] for d in bw["dgamma"]})
    kern = list(dict.fromkeys(d["kernel"] for d in bw["dgamma"]))
    rows = [["dγ kernel"] + [f"{r} rows" for r in rs]]
    for k in kern:
        cells = []
        for r in rs:
            d = next((d for d in bw["dgamma"] if d["kernel"] == k and d["rows"] == r), None)
            if d is None:
                cells.append("-")
                continue
            c = f"{d['max_rel_error']:.2g} ({_num(d['of_bound'])}x)"
            if d["orders"] > 1:
                c += f" ±{_num(d['spread_ulp'])}"
            cells.append(c)
        rows.append([k] + cells)
    out.append(_plain_table(rows))
    return out


def render(results, out_dir, gpu=None) -> dict:
    """Write report.md, index.html and the PNG plots into out_dir; returns their paths."""
    out_dir = Path(out_dir)
    recs = results["records"]
    prov = results["provenance"]
    made = plots.render_all(results, out_dir, HIST_BINS)
    tables = _family_tables(recs)
    audit = results.get("audit", [])
    n_err = sum(1 for r in recs if r.get("error"))
    md = [f"# normcheck accuracy report ({prov.get('mode')}, {prov.get('backend')} backend)\n",
          f"{len(recs)} measurements of {len({r['kernel'] for r in recs})} built-in kernels; "
          "every number is the largest error in units in the last place (ULP) of the output "
          "format against the exact result of the stored rows (normcheck's oracle), "
          f"{n_err} launches failed.  A cell links to its worst row; "
          "`normcheck replay FILE --variant NAME` reruns it.\n",
          "## Provenance\n", _provenance_md(prov), ""]
    if prov.get("backend") == "cpu":
        md.append("The cpu backend runs the same CUDA source compiled by g++ with normcheck's "
                  "SIMT shim: bit-identical to nvcc --fmad=false except for approximate "
                  "intrinsics (rsqrtf is 1/sqrtf here).  GPU timings and the rsqrtf measurement "
                  "need `--backend cuda`.\n")
    md.append("## Plots\n")
    for key, (title, text) in PLOT_TEXT.items():
        if key in made and key not in _QUANT_PLOTS:
            md.append(f"### {title}\n\n{text}\n\n![{title}]({made[key].name})\n")
        elif key == "rsqrt":
            md.append(f"### {title}\n\nNeeds a GPU: the cpu backend evaluates rsqrtf as 1/sqrtf, "
                      "two correctly rounded operations, so it cannot show what the hardware "
                      "approximation costs.  Rerun with `--backend cuda`.\n")
    md.append("## Max ULP by family\n")
    md.append("Columns: storage format and precision order (up = upcast_square, sq = "
              "square_upcast, acc = storage_accumulate).  `nf` counts non-finite outputs for "
              "finite exact values (or numbers for NaN).\n")
    for fam, note, widths, rows in tables:
        md.append(f"### {fam}: {note}\n\nwidths {', '.join(map(str, widths))}\n")
        md.append(_md_table(rows) + "\n")
    md += _backward_md(results.get("backward"))
    from normcheck.report import quantised

    md += quantised.markdown(results.get("quantised"))
    for key in ("saturation_map", "order_flips"):
        if key in made:
            title, text = PLOT_TEXT[key]
            md.append(f"### {title}\n\n{text}\n\n![{title}]({made[key].name})\n")
    md.append("")
    md.append("## The seed articles, measured\n")
    md.append(_audit_md(audit) if audit else "(not run)\n")
    if gpu:
        md.append("## GPU\n")
        md.append(gpu)
    folder.write(out_dir / "report.md", "\n".join(md))

    # index.html: the same, self-contained
    def img(path):
        data = base64.b64encode(Path(path).read_bytes()).decode()
        return f'<img alt="{path.stem}" src="data:image/png;base64,{data}">'

    body = [f"<h1>normcheck accuracy report ({html.escape(str(prov.get('mode')))}, "
            f"{html.escape(str(prov.get('backend')))} backend)</h1>",
            f"<p>{len(recs)} measurements; the largest ULP error of each cell, linked to its "
            "worst row (hover for the command that replays it).</p>",
            "<h2>Provenance</h2><ul>" + "".join(
                f"<li><b>{html.escape(k)}</b>: {html.escape(str(v))}</li>"
                for k, v in prov.items() if k != "cpu_vs_gpu" and v is not None) + "</ul>",
            "<h2>Plots</h2>"]
    for key, (title, text) in PLOT_TEXT.items():
        if key in made and key not in _QUANT_PLOTS:
            body.append(f"<h3>{html.escape(title)}</h3><p>{html.escape(text)}</p>{img(made[key])}")
        elif key == "rsqrt":
            body.append(f"<h3>{html.escape(title)}</h3><p>Needs a GPU: the cpu backend evaluates "
                        "rsqrtf as 1/sqrtf.</p>")
    body.append("<h2>Max ULP by family</h2>")
    for fam, note, widths, rows in tables:
        body.append(f"<h3>{html.escape(fam)}: {html.escape(note)}</h3><p>widths "
                    f"{', '.join(map(str, widths))}</p>" + _html_table(rows, out_dir))
    bw_md = _backward_md(results.get("backward"))
    if bw_md:
        body.append("<h2>Backward</h2><pre>" + html.escape("\n".join(bw_md[1:])) + "</pre>")
    q_md = quantised.markdown(results.get("quantised"))
    if q_md:
        body.append("<h2>Quantised outputs</h2><pre>" + html.escape("\n".join(q_md[1:]))
                    + "</pre>")
        for key in _QUANT_PLOTS:
            if key in made:
                title, text = PLOT_TEXT[key]
                body.append(f"<h3>{html.escape(title)}</h3><p>{html.escape(text)}</p>"
                            f"{img(made[key])}")
    body.append("<h2>The seed articles, measured</h2>")
    for a in audit:
        body.append(f"<h3 class='{a['verdict'].replace(' ', '-')}'>"
                    f"{html.escape(a['verdict'].upper())}: {html.escape(a['claim'])}</h3>"
                    f"<p><i>{html.escape(a['source'])}.</i> {html.escape(a['evidence'])}</p>")
    if gpu:
        body.append("<h2>GPU</h2><pre>" + html.escape(gpu) + "</pre>")
    css = ("body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}"
           "table{border-collapse:collapse;margin-bottom:1em;font-size:13px}"
           "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
           "th.lab{text-align:left}td.ok{background:#e6f4e6}td.warn{background:#fff6d5}"
           "td.bad{background:#fbe0e0}img{max-width:100%}h3.false{color:#b00}"
           "h3.true{color:#060}")
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>normcheck report</title>"
            f"<style>{css}</style></head><body>{''.join(body)}</body></html>")
    folder.write(out_dir / "index.html", page)
    return {"report.md": out_dir / "report.md", "index.html": out_dir / "index.html",
            **{k: v for k, v in made.items()}}
