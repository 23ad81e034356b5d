"""Render results.json: report.md, a self-contained index.html (plots embedded) and the PNGs.

Tables in the manner of the CUDA Math API and Zimmermann's max-ULP tables: for each input
family, the variants down the side and the storage format / precision order across, each cell
the verdict's measure (× the sound bound) and the largest ULP error measured, linked to the file
holding its worst row (with the command that replays it)."""

from __future__ import annotations

import base64
import html
import math
import re
from pathlib import Path

import numpy as np

from normcheck import escape, families
from normcheck.errors import FailureKind
from normcheck.backends import capabilities_of
from normcheck.measure import mismatch
from normcheck.metrics import bias_text, short
from normcheck.report import findings as fnd, folder, plots
from normcheck.report.sweep import HIST_BINS

__all__ = ["render", "page", "COLUMNS", "FAMILY_TABLES"]

#: The terms the report uses, defined where a reader first meets them (its Findings' opening).
TERMS = ("**Terms.**  A *family* is a kind of input row built to hurt a norm kernel (gaussian, "
         "offset rows like [1000, 1001], constant rows, fp16_large, tiny subnormal scales, "
         "outliers, bimodal ±a, tails: widths off the block; `normcheck.families`).  The "
         "*precision order* says where a 16-bit kernel widens to float: upcast-then-square, "
         "square-then-upcast, accumulate-in-storage.  A fused add's convention: *stored* "
         "normalises the sum h as rounded to storage, *exact* the unrounded x + residual.  "
         "*κ* is a row's conditioning, |mean| / standard deviation: the cancellation a one-pass "
         "variance suffers grows as κ².  *× bound*: the largest error over the sound bound -- "
         "what a float-accumulating two-pass, Welford or RMS kernel with the worst summation "
         "order and one final rounding can be off by; above 1 no sound kernel writes it.  "
         "*Bias*: the mean signed error in ulps, toward 0 (the kernel's values nearer zero than "
         "the exact ones, as truncation) or away from 0.  In the quantised section, an *order "
         "flip* is a code a sound float pipeline may round either way (allowed, counted) and a "
         "*contract flip* one no sound kernel of the contract writes.")

#: The section of the per-family tables.
FAMILY_TABLES = "× bound and max ULP by family"

COLUMNS = [("fp32", None), ("fp16", "upcast_square"), ("fp16", "square_upcast"),
           ("fp16", "storage_accumulate"), ("bf16", "upcast_square"), ("bf16", "square_upcast"),
           ("bf16", "storage_accumulate")]
_COL_NAMES = ["fp32", "fp16 up", "fp16 sq", "fp16 acc", "bf16 up", "bf16 sq", "bf16 acc"]


def _row_label(r):
    if r.user:
        return f"{r.kernel} (yours, {r.norm})"
    s = f"{r.norm} {'Triton ' if fnd.is_triton_builtin(r) else ''}{r.algorithm}"
    if r.convention:
        s += f" ({r.convention})"
    if r.fast_math:
        s += " rsqrtf"
    return s


def _num(v):
    return short(float(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                 else v)


def _cell(recs):
    """The worst record of a cell and its text: the verdict's measure first -- × bound (the
    largest error over the sound bound; "non-finite (n)" where an output is) -- then the
    largest raw error in ulps of each element's exact value, then a rounding bias that shows."""
    if not recs:
        return None, "-"
    err = [r for r in recs if r.error]
    if err:
        return err[0], str(err[0].error.get("kind", "error"))
    worst = max(recs, key=lambda r: (fnd.bound_of(r)[0],
                                     r.max_ulp if not math.isnan(r.max_ulp) else -1))
    ob, text = fnd.bound_of(worst)
    if ob == math.inf:  # non-finite outputs: their count is the figure
        return worst, text
    text += f" · {_num(max(r.max_ulp for r in recs))} ulp"
    bias = max((r.mean_signed_ulp for r in recs if r.mean_signed_ulp is not None),
               key=abs, default=None)
    if bias is not None and abs(bias) >= 0.1:  # the mean signed error, where it shows
        text += f" · {bias_text(bias)}"
    return worst, text


def _columns(records):
    """COLUMNS, and a column per format for kernels of yours (no precision order)."""
    cols = list(COLUMNS)
    names = list(_COL_NAMES)
    for st in ("fp16", "bf16"):
        if any(r.user and r.storage == st for r in records):
            cols.append((st, None))
            names.append(f"{st} yours")
    return cols, names


def _family_tables(records):
    grid = [r for r in records if not r.param]
    columns, names = _columns(grid)
    out = []
    for fam in families.FAMILIES:
        recs = [r for r in grid if r.family == fam]
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
            for st, order in columns:
                cs = [r for r in recs if _row_label(r) == lab and r.storage == st and
                      (r.order == order) and
                      (bool(r.user) == (order is None and st != "fp32") or
                       st == "fp32")]
                cells.append(_cell(cs))
            rows.append((lab, cells))
        widths = sorted({r.cols for r in recs})
        out.append((fam, families.get(fam).note, widths, rows, names))
    return out


def _md_table(rows, names=_COL_NAMES):
    lines = ["| variant | " + " | ".join(names) + " |",
             "|---|" + "---:|" * len(names)]
    for lab, cells in rows:
        parts = []
        for rec, text in cells:
            link = escape.worst_link(rec.worst.get("file")) if rec is not None and rec.worst \
                else None
            parts.append(f"[{fnd.md_cell(text)}]({link})" if link else fnd.md_cell(text))
        lab = fnd.md_cell(lab)
        lines.append(f"| {lab} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def _audit_md(audit):
    lines = []
    for a in audit:
        lines.append(f"### {a['verdict'].upper()}: {a['claim']}\n")
        lines.append(f"*{a['source']}.* {a['evidence']}\n")
    return "\n".join(lines)


def _provenance_md(p, records=()):
    keys = ["normcheck", "git_commit", "backend", "compiler", "flags", "fmad", "sandbox",
            "cpu", "gpu", "python", "numpy", "mpmath", "hypothesis", "seed", "mode", "date"]
    lines = [f"- **{k}**: {escape.markdown(p.get(k))}" for k in keys if p.get(k) is not None]
    specs = sorted({(r.kernel, r.spec) for r in records if r.user and r.spec})
    for kernel, spec in specs:  # the user's kernels: which spec, which source, as they were
        lines.append(f"- **yours: {escape.markdown(kernel)}**: "
                     f"{escape.markdown(_spec_line(spec))}")
    return "\n".join(lines)


def _spec_line(spec: str) -> str:
    """A user spec and its source, with their SHA-256 (the files as they were measured)."""
    from normcheck import spec as specs
    from normcheck.check.resolve import sha256

    try:
        sp = specs.load(spec)
        src = sp.source
        return (f"{spec} (sha256 {sha256(spec)[:16]}), source {src} (sha256 "
                f"{sha256(src)[:16] if src and Path(src).is_file() else '-'})")
    except Exception:  # a spec moved since: the path is still worth saying
        return f"{spec} (no longer readable)"


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
           "(normcheck.oracle.backward) with the saved statistics; each cell the largest ULP "
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


_SORT_JS = """
function ncSort(th){const t=th.closest('table'),i=[...th.parentNode.children].indexOf(th);
const rows=[...t.querySelectorAll('tr')].slice(1);const asc=th.dataset.dir!=='asc';
const key=r=>{const c=r.children[i];if(!c)return '';const v=c.dataset.v!==undefined?c.dataset.v:
c.textContent.trim();const n=parseFloat(v);return isNaN(n)?v:n;};
rows.sort((a,b)=>{const x=key(a),y=key(b);const c=(typeof x==='number'&&typeof y==='number')?
x-y:String(x).localeCompare(String(y));return asc?c:-c;});
th.dataset.dir=asc?'asc':'desc';rows.forEach(r=>t.appendChild(r));}
document.querySelectorAll('table.sortable tr:first-child th').forEach(th=>{
th.style.cursor='pointer';th.title='sort';th.addEventListener('click',()=>ncSort(th));});
window.ncSelfTest=function(){const out={errors:window.ncErrors||[]};
const first=document.querySelector('h2');out.first_section=first?first.id:null;
out.images=[...document.images].map(im=>({alt:im.alt,ok:im.complete&&im.naturalWidth>0}));
const t=document.querySelector('table.sortable');out.sort=null;
if(t){const th=t.querySelector('tr th');ncSort(th);const a=[...t.querySelectorAll('tr')].slice(1)
.map(r=>r.children[0].textContent.trim());const s=[...a].sort((x,y)=>x.localeCompare(y));
out.sort=JSON.stringify(a)===JSON.stringify(s);}
const pre=document.createElement('pre');pre.id='selftest';pre.textContent=JSON.stringify(out);
document.body.appendChild(pre);return out;};
if(location.hash==='#selftest'){window.addEventListener('load',()=>window.ncSelfTest());}
"""

_ERR_JS = ("window.ncErrors=[];window.addEventListener('error',e=>window.ncErrors.push("
           "String(e.message||e.type)));")


def _anchor(title: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")


_CSS = ("body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}"
        "nav{margin:1em 0;padding:.5em;background:#f4f4f4}"
        "table{border-collapse:collapse;margin-bottom:1em;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 6px}"
        "tr.user td{background:#fff1e0}tr.user td:first-child,tr.user td:nth-child(3)"
        "{font-weight:bold}tr td.ok{background:#e6f4e6}tr td.warn{background:#fff6d5}"
        "tr td.bad{background:#fbe0e0}img{max-width:100%}h3.false{color:#b00}h3.true,h3.holds{color:#060}"
        "code{font-size:11px}")
#: A table cell's class on the page, from its text: the verdict's words, and a family table's
#: "× bound · max ulp" (red beyond the bound, green within it and at most 1 ulp, else amber).
_BAD_WORDS = re.compile(r"^(?:no:|(?:non-finite|launch failed|check: FAIL|" + "|".join(
    k.value for k in FailureKind) + r")\b)")
_CELL = re.compile(r"^([0-9.]+(?:e[+-]?\d+)?) · ([0-9.]+(?:e[+-]?\d+)?|inf) ulp")


def _cell_class(text: str) -> str | None:
    if text == "yes":
        return "ok"
    if _BAD_WORDS.match(text):
        return "bad"
    m = _CELL.match(text)
    if m:
        return "bad" if float(m.group(1)) > 1 else ("ok" if float(m.group(2)) <= 1 else "warn")
    return None


def page(title: str, intro: str, toc_md: str, sections, out_dir) -> str:
    """index.html: the report's own markdown (``sections``: [(title, markdown)]) rendered by
    markdown-it-py -- one text, two forms that cannot drift (#64: a second hand-built HTML path
    per section showed raw markdown) -- with what a page adds: the plots embedded, each table
    sortable, its cells coloured by their verdict, your kernels' rows highlighted, an id on
    every heading.  Raw HTML in the markdown is text (html=False): a kernel's or spec's name
    can carry no markup."""
    from markdown_it import MarkdownIt

    mdi = MarkdownIt("commonmark", {"html": False}).enable("table")
    body = "\n\n".join(f"## {t}\n\n{m}" for t, m in sections)
    tokens = mdi.parse(body)
    row_cells = None
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open":
            text = tokens[i + 1].content
            tok.attrSet("id", _anchor(text))
            word = text.split(":", 1)[0].strip().lower()
            if tok.tag == "h3" and word in ("false", "true", "holds"):
                tok.attrSet("class", word)
        elif tok.type == "table_open":
            tok.attrSet("class", "sortable")
        elif tok.type == "tr_open":
            row_cells = tok
        elif tok.type == "td_open":  # the cell's words as shown (a link's text, not its URL)
            text = "".join(c.content for c in tokens[i + 1].children or ()
                           if c.type in ("text", "code_inline")).strip()
            cls = _cell_class(text)
            if cls:
                tok.attrSet("class", cls)
            if row_cells is not None and "(yours" in text:
                row_cells.attrSet("class", "user")
        elif tok.type == "inline":
            for child in tok.children or ():
                if child.type == "image":
                    _embed(child, out_dir)
    html_body = mdi.renderer.render(tokens, mdi.options, {})
    nav = "<nav>" + mdi.renderInline(toc_md) + "</nav>"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>normcheck report</title>"
            f"<style>{_CSS}</style><script>{_ERR_JS}</script></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(intro)}</p>{nav}{html_body}"
            f"<script>{_SORT_JS}</script></body></html>")


def _embed(image_token, out_dir) -> None:
    """A plot of the report, embedded in the page (the page stands alone)."""
    src = image_token.attrGet("src") or ""
    p = Path(out_dir) / src
    if src and "/" not in src and p.suffix == ".png" and p.is_file():
        data = base64.b64encode(p.read_bytes()).decode()
        image_token.attrSet("src", f"data:image/png;base64,{data}")


def _worst_md(records, out_dir):
    from normcheck.report import findings as fnd

    worst = fnd.worst_records(records)
    if not worst:
        return ""
    lines = ["\n**The worst rows** (furthest beyond the sound bound):\n",
             "| kernel | family | width | × bound | max ulp | replay |",
             "|---|---|---:|---:|---:|---|"]
    for r in worst:
        w = r.worst or {}
        rp = (w.get("replay") or "").replace("{dir}", str(out_dir))
        lines.append(f"| {fnd.md_cell(r.kernel)} | {r.family} | {r.cols} | "
                     f"{fnd.bound_of(r)[1]} | {_num(r.max_ulp)} | "
                     f"{'`' + rp + '`' if rp else ''} |")
    return "\n".join(lines) + "\n"


def render(results, out_dir, gpu=None, compare=None) -> dict:
    """Write report.md, index.html and the PNG plots into out_dir; returns their paths.  The
    order is the reader's: the findings (safe and unsafe kernels, the audit's verdicts, the
    worst rows), changes against ``compare`` (a normcheck.diff.Diff), the plots, the tables,
    backward, quantised, the audit's evidence, and provenance last; a table of contents first."""
    from normcheck.report import findings as fnd
    from normcheck.report import quantised

    out_dir = Path(out_dir)
    recs = results["records"]
    prov = results["provenance"]
    made = plots.render_all(results, out_dir, HIST_BINS)
    tables = _family_tables(recs)
    audit = results.get("audit", [])
    n_err = sum(1 for r in recs if r.error)
    n_user = len({r.kernel for r in recs if r.user})
    n_built = len({r.kernel for r in recs if not r.user})
    title = f"normcheck accuracy report ({prov.get('mode')}, {prov.get('backend')} backend)"
    intro = (f"{len(recs)} measurements of {n_built} built-in kernels"
             + (f" and {n_user} of yours" if n_user else "") +
             "; × bound, the verdict's measure, leads every table: the largest error over "
             "the sound bound (above 1: no sound kernel writes that; normcheck check fails it), "
             "or the count of non-finite outputs where the exact result is finite; max ulp is "
             "the largest error in units in the last place (ULP) of each element's own exact "
             "value (normcheck's oracle, from the stored rows) -- large near zero for a sound "
             f"kernel too; {n_err} launches failed.")
    sections = []  # (title, markdown): report.md and, rendered, index.html

    # 1. findings
    md_f = [TERMS + "\n",
            "A kernel is safe on a family when no element of any width is beyond the sound "
            "bound and no output is non-finite where the exact result is finite (the check's "
            "fail rule; the extremes family, where x² overflows float itself, is not judged).  "
            "For each unsafe one: the families where it breaks, the worst, its error and the "
            "command that replays its worst row." + (
                "  Your kernels come first, each named with its spec file, run at every width "
                "`normcheck check` runs them, and judged by the check itself too (the family "
                "*check*: every run it makes -- the search, the hazard build, the padded-pitch "
                "and large-index runs): one of yours is safe only where the check passes it."
                if n_user else "")
            + "  The seed articles are the two posts this project grew from: each of their "
            "claims about these kernels is checked against a measurement here (HOLDS, FALSE, "
            "or pending with the reason).\n", fnd.findings_markdown(recs, audit, out_dir),
            _worst_md(recs, out_dir)]
    md_f.insert(2, "On the page (index.html) a cell is green within the sound bound and at most "
                "1 ulp, amber within it and more than 1 ulp, red beyond it, non-finite or a "
                "launch that failed; the rows of your kernels are highlighted.  Click a "
                "column's head to sort by it.\n")
    sections.append(("Findings", "\n".join(md_f)))
    if compare is not None:
        sections.append(("Changes", compare.markdown()))

    # 2. plots (a plot that needs a GPU is left out: the provenance says what the cpu backend
    # cannot show, not an empty section)
    md_p = [f"### {ptitle}\n\n{text}\n\n![{ptitle}]({made[key].name})\n"
            for key, (ptitle, text) in PLOT_TEXT.items() if key in made]
    sections.append(("Plots", "\n".join(md_p)))

    # 3. tables
    note = ("Columns: storage format and precision order (up = upcast_square, sq = "
            "square_upcast, acc = storage_accumulate; a kernel of yours sits in its format's "
            "column).  Each cell: first **× bound**, the largest error over the sound bound "
            "(the verdict's measure: above 1, no sound kernel writes that), or `non-finite (n)` "
            "-- n outputs non-finite for finite exact values (or numbers for NaN); then the "
            "largest error in ulps of each element's own exact value (where the exact value is "
            "near zero a sound kernel's error, which is relative to the row's scale, is many "
            "such ulps: that is why the bound, not this number, decides); then the rounding "
            "bias where it is at least 0.1 ulp -- the mean signed error, toward 0 or away "
            "from 0.  A cell links to its worst row; `normcheck replay FILE --variant NAME` "
            "reruns it.\n")
    md_t = [note]
    for fam, fnote, widths, rows, names in tables:
        md_t.append(f"### {fam}: {fnote}\n\nwidths {', '.join(map(str, widths))}\n")
        md_t.append(_md_table(rows, names) + "\n")
    sections.append((FAMILY_TABLES, "\n".join(md_t)))

    bw_md = _backward_md(results.get("backward"))
    if bw_md:
        sections.append(("Backward", "\n".join(bw_md[1:])))
    q_md = quantised.markdown(results.get("quantised"))
    if q_md:
        sections.append(("Quantised outputs", "\n".join(q_md[1:])))
    if results.get("field"):
        from normcheck.report import field as field_section

        sections.append((field_section.TITLE, field_section.markdown(results["field"])))
    sections.append(("The seed articles, measured", _audit_md(audit) if audit else "(not run)\n"))
    if gpu:
        sections.append(("GPU", "```\n" + gpu + "\n```"))
    cpu_note = ("\nThe cpu backend runs the same CUDA source compiled by g++ with normcheck's "
                "SIMT shim: bit-identical to nvcc --fmad=false except for approximate "
                "intrinsics (rsqrtf is 1/sqrtf here).  GPU timings and what rsqrtf's hardware "
                "approximation costs need `--backend cuda`.\n") if not getattr(
        capabilities_of(prov.get("backend")), "hardware_rsqrt", True) else ""
    sections.append(("Provenance", _provenance_md(prov, recs) + "\n" + cpu_note))

    toc_md = "**Contents:** " + " · ".join(f"[{t}](#{_anchor(t)})" for t, _ in sections)
    md = [f"# {title}\n", intro + "\n", toc_md + "\n"]
    for t, m in sections:
        md.append(f'<a id="{_anchor(t)}"></a>\n\n## {t}\n\n{m}\n')
    folder.write(out_dir / "report.md", "\n".join(md))
    folder.write(out_dir / "index.html", page(title, intro, toc_md, sections, out_dir))
    folder.write(out_dir / "summary.md", f"## {title}\n\n" + "\n".join(
        m for m in md_f if not m.startswith("On the page")))
    return {"report.md": out_dir / "report.md", "index.html": out_dir / "index.html",
            "summary.md": out_dir / "summary.md", **{k: v for k, v in made.items()}}
