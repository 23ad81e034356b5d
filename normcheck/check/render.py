"""The check's result for people: one table a family, the failures and warnings with their
causes, the worst row, how to replay it."""

from __future__ import annotations

from normcheck.causes import EVIDENCE, FAULTS
from normcheck.escape import one_line
from normcheck.measure import mismatch
from normcheck.metrics import StreamStats, percent, times_bound
from normcheck.metrics import short as _fmt

__all__ = ["render", "explain"]


def render(r) -> str:
    """One layout for every kind of check: what its verdicts mean, a table row a family, the
    failures and warnings with their likely causes, what the launches noted, the worst row, how
    to replay it, the verdict."""
    intro, head, table, worst, tail, summary = _KIND[r.kind](r)
    lines = intro
    prov = r.provenance or {}
    ran = _RAN_BY.get(r.backend)
    if ran:
        lines.append(f"run by: {ran}")
    if prov.get("arch"):
        lines.append(f"architecture presented: {prov['arch']}")
    if r.baseline_note:
        lines.append(f"note: {r.baseline_note}")
    lines.append("")
    if table:  # none where nothing ran (the kernel's file broke the sandbox as it loaded)
        w = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(head)]
        lines.append("  ".join(h.ljust(x) for h, x in zip(head, w)))
        lines.append("  ".join("-" * x for x in w))
        lines += ["  ".join(c.ljust(x) for c, x in zip(row, w)) for row in table]
        legend = _LEGEND.get(r.kind)
        if legend:
            lines.append(legend)
        lines.append("")
    said = set()  # each sentence once: a cause or a launch's note met again is referred to
    for title, items in (("failures", r.failures), ("warnings", r.warnings)):
        if items:
            lines.append(f"{title}:")
            for f in items:
                detail = one_line(f.detail)  # a kernel's, a file's, an op's words: one line
                head, sep, noted = detail.partition("; the launch noted: ")
                if sep:
                    detail = head + sep + ("(as above)" if noted in said else noted)
                    said.add(noted)
                lines.append(f"  [{f.kind}] {f.family}: {detail}")
                if f.cause:
                    title = getattr(f.cause, "title", str(f.cause))
                    key = getattr(f.cause, "key", title)
                    lines.append(f"      likely cause: {one_line(f.cause)}" if title not in said
                                 else f"      likely cause: as above ({key})")
                    said.add(title)
            lines.append("")
    cov = getattr(r.detail, "coverage", None)
    if cov:  # what the verdict covers, and what it does not (#66)
        ran = [d["run"] for d in cov if d["ran"]]
        no = [f"{d['run']} ({one_line(d.get('why', '?'))})" for d in cov if not d["ran"]]
        lines.append("ran: " + ", ".join(ran))
        if no:
            lines.append("not run: " + "; ".join(no))
        lines.append("")
    notes = getattr(r.detail, "notes", None)
    if notes:
        lines.append("the launches noted (whatever the verdict):")
        lines += [f"  {one_line(n)}" for n in notes] + [""]
    spread = getattr(r.detail, "nondeterministic", None)
    if spread:
        lines.append("run to run (declared nondeterministic): " + "; ".join(
            f"{fam}: {', '.join(f'{n} elements of {role}' for role, n in d.items())} differ "
            "between two block orders" for fam, d in spread.items()))
        lines.append("")
    lines += worst
    if r.counterexample:
        from normcheck import cases

        lines.append(f"replay: {cases.command(r.counterexample)}")
    lines += tail
    shown = r.verdict.upper()
    if getattr(r, "interrupted", None) and r.verdict != "fail":  # what ran is no pass
        shown = f"INTERRUPTED during {r.interrupted} ({r.verdict} on what ran: not a verdict)"
    lines.append(f"verdict: {shown} -- {r.rows_checked} rows in {r.seconds:.1f} s"
                 + summary + (f"; likely cause: {one_line(r.cause)}" if r.cause and
                              r.verdict != "pass" else ""))
    return "\n".join(lines)


def _verdict(f) -> str:
    return f.verdict.upper() if f.verdict != "pass" else str(f.verdict)


def _forward(r):
    t = r.tolerance
    warn = (f"warn: max scaled > {t.warn_k:g}x the best built-in and > {t.warn_floor:g} ulp"
            if r.yardstick else "no warn: no built-in kernel of this norm and format to measure "
            "against")
    intro = [f"normcheck check: {r.kernel} ({r.norm_desc}, {r.dtype} -> {r.out_dtype}, "
             f"{r.backend} backend)",
             f"fail: x bound > 1 (beyond any sound kernel), or a fault; {warn} (normcheck check "
             "--explain says why)"]
    # the verdict's yardsticks first (x bound: fail > 1; max scaled against the best built-in:
    # warn), the raw figures after
    head = ["family", "rows", "cols", "verdict", "x bound", "max scaled", "best built-in",
            "raw max ulp", "p99 ulp", "bias", "bound ulp"]
    table = []
    for f in r.families:
        base = "-" if f.baseline is None else f"{f.baseline.name} {_fmt(f.baseline.max_scaled)}"
        bound = _fmt(f.bound_ulp)
        if f.unbounded_rows:
            bound += f" ({f.unbounded_rows} rows inf)"
        b = f.mean_signed_ulp
        bias = "-" if b is None else (f"{b:+.2f}" if abs(b) < 10 else f"{b:+.3g}")
        # a family with non-finite or unwritten outputs: said so, never a finite x bound
        # beside it (that is the finite elements' figure, not the verdict's)
        nonfinite = bool(f.failures.get("nonfinite") or f.failures.get("unwritten"))
        fault = next((str(k) for k in f.failures if k in FAULTS), None)
        if fault:  # what it computed after a fault is no measurement: the fault instead
            table.append([f.family, str(f.rows), ",".join(map(str, f.cols)), _verdict(f),
                          fault.replace("_", " "), "-", base, "-", "-", "-", "-"])
            continue
        ratio = "non-finite" if nonfinite else times_bound(f.max_of_bound)
        table.append([f.family, str(f.rows), ",".join(map(str, f.cols)), _verdict(f), ratio,
                      _fmt(f.max_scaled), base, _fmt(f.max_ulp), _fmt(f.p99_ulp), bias, bound])
    if r.search:
        s = r.search
        ratio = ("non-finite" if s.get("failure_nonfinite") else
                 times_bound(s.get("failure_of_bound"))) if s["failed"] else \
            times_bound(s.get("max_of_bound"))
        table.append(["search", str(s["examples"]), "-", "FAIL" if s["failed"] else "pass",
                      ratio, "-", "-", "-", "-", "-", "-"])
    worst = []
    if r.worst:
        wst = r.worst
        if getattr(wst, "nonfinite", False):
            e = next((e for e in wst.first if e["col"] == wst.col), None)
            what = f"{e['kernel']} where {e['exact']!r} is exact" if e else "a non-finite value"
            worst.append(f"worst row: family {wst.family}, width {wst.cols}, row "
                         f"{wst.row_index}: non-finite at col {wst.col} ({what})")
        else:
            worst.append(f"worst row: family {wst.family}, width {wst.cols}, row "
                         f"{wst.row_index}: {_fmt(wst.ulp)} ulp ({_fmt(wst.scaled_ulp)} of "
                         f"max(|γx̂|,|β|), {times_bound(wst.of_bound)}x the sound bound)")
        worst += ["  " + mismatch(f"col {e['col']}", e["kernel"], e["exact"], x=e["x"],
                                  ulp=e["ulp"]) for e in wst.first]
    tail = []
    long = next((f for f in r.families if f.family == "long"), None)
    if long is not None:
        tail.append(f"long run: {long.rows:,} rows of {long.cols[0]} in batches of about 2^20 "
                    f"elements; peak memory of this process {r.detail.peak_rss_mib:,.0f} MiB; "
                    f"p99 from a histogram (at most {100 / StreamStats.BINS_PER_OCTAVE:g}% high)")
    return intro, head, table, worst, tail, ""


def _backward(r):
    t = r.tolerance
    intro = [f"normcheck check --backward: {r.kernel} ({r.norm_desc}, {r.dtype}, "
             f"{r.backend} backend; outputs {', '.join(r.detail.outputs)})",
             "fail: beyond what a sound float backward kernel can produce -- sums in any "
             "order, one final rounding (normcheck.bounds.sound_backward), never below "
             f"{t.fail_floor:g} ulp; or non-finite, unwritten, a crash, out of bounds, a "
             "deadlock, a timeout, a sandbox violation, an exception",
             "warn: within that bound, but an output's largest scaled error (in ulps of the "
             "terms it sums) more than k x the best built-in strategy's on the same rows "
             "(normcheck.check.tolerances)"]
    roles = r.detail.outputs
    head = ["family", "rows", "cols"]
    for role in roles:
        head += [f"{role} max/p99/scaled", "x bound", "best built-in"]
    head.append("verdict")
    table = []
    for f in r.families:
        row = [f.family, str(f.rows), ",".join(map(str, f.cols))]
        for role in roles:
            d = f.outputs.get(role)
            b = d and d.get("baseline")
            row += ["-", "-", "-"] if d is None else [
                f"{_fmt(d['max_ulp'])} / {_fmt(d['p99_ulp'])} / {_fmt(d['max_scaled'])}",
                _fmt(d["of_bound"]), f"{_fmt(b['max_scaled'])}" if b else "-"]
        table.append(row + [_verdict(f)])
    bw, tail = r.detail, []
    if bw.races_ulp:
        worst = max(bw.races_ulp.items(), key=lambda kv: kv[1])
        tail.append(f"nondeterminism: over {bw.orders} block orders seeded from the check's "
                    f"seed {bw.seed} (atomics arriving in each), the largest spread "
                    f"is {worst[1]:.3g} ulps ({worst[0]}); "
                    + "; ".join(f"{k}: {v:.3g}" for k, v in bw.races_ulp.items()))
    return intro, head, table, [], tail, ""


def _quantised(r):
    q = r.detail.as_dict()["quant"]
    c = q["contract"]
    intro = [f"normcheck check: {r.kernel} ({r.norm_desc}, {r.dtype} -> {c['format']} "
             f"{c['granularity']}, {r.backend} backend)",
             f"contract {q['describe']}",
             *([f"  follows {c['source']}"] if c.get("source") else []),
             "fail: a value, scale or amax no sound kernel of the contract writes (a flip away "
             "from a tie, NaN or inf where the contract saturates), an unwritten element, a "
             "wrong h, a crash, out of bounds, a deadlock, a timeout, an exception.  Order "
             "flips -- where the exact value lies within the sound bound of a float pipeline "
             "from a rounding boundary -- are allowed and counted.  No warn."]
    head = ["family", "rows", "cols", "values", "order flips", "contract flips", "scales",
            "order", "contract", "saturated", "verdict"]
    table = [[f.family, str(f.rows), ",".join(map(str, f.cols)), str(f.q.n),
              f"{f.q.order} ({_pct(f.q.order_share)})", str(f.q.contract),
              *((str(f.scales.n), str(f.scales.order), str(f.scales.contract)) if f.scales.n
                else ("-", "-", "-")),
              f"{f.q.saturated + f.q.nan + f.q.inf}", _verdict(f)] for f in r.families]
    worst = []
    if r.worst is not None and r.worst.detail:
        wst = r.worst
        worst.append(f"worst row: family {wst.family}, width {wst.cols}, row {wst.row_index}")
        worst += [f"  col {e['col']}: x={e['x']!r} kernel={e['kernel']!r} "
                  f"contract={e['contract']!r} ({e['class']}; y={_fmt(e['y'])})" if "col" in e
                  else f"  scales: kernel {e['scales_kernel']} contract {e['scales_contract']}"
                  for e in wst.detail]
    v, s = q["values"], q["scales"]
    summary = (f"; order flips {v['order']}/{v['n']} values ({_pct(v['order_share'])})"
               + (f", {s['order']}/{s['n']} scales ({_pct(s['order_share'])})" if s["n"] else "")
               + f"; contract flips {v['contract']} values"
               + (f", {s['contract']} scales" if s["n"] else ""))
    return intro, head, table, worst, [], summary


_KIND = {"forward": _forward, "backward": _backward, "quantised": _quantised}

#: What ran the kernel, said where a reader looks first (the provenance holds the details).
_RAN_BY = {
    "cpu": "the cpu backend: the CUDA C source compiled by g++ against normcheck's SIMT shim, "
           "every thread a fiber on the CPU (no GPU; bit-identical to nvcc --fmad=false but for "
           "approximate intrinsics, computed accurately)",
    "triton-cpu": "normcheck's Triton executor on the CPU: Triton's interpreter with every "
                  "rounding it gets wrong done as a GPU does (no GPU)",
    "triton-gpu": "real Triton on the GPU (torch's CUDA tensors)",
    "cuda": "the GPU, through nvcc and PyCUDA",
}

#: The table's columns, under it.
_LEGEND = {
    "forward": ("x bound: the largest error over the sound bound (above 1: no sound kernel "
                "gives it: fail; non-finite: an output NaN or inf where the exact value is "
                "finite, or never written); max scaled: the largest error in ulps of "
                "max(|γx̂|,|β|), against the best built-in order's on the same rows (warn above "
                "the level); raw max ulp / p99 ulp: in ulps of each exact value (large near "
                "zero for a sound kernel too); bias: the mean signed error toward zero, in ulps "
                "(+: the kernel's values lie nearer zero than the exact ones, as truncation's; "
                "-: farther); bound ulp: the sound bound, in ulps of the exact value, at the "
                "element of x bound (x bound times it is that element's raw error); (n rows "
                "inf): rows whose sound bound is infinite -- where a sound kernel's worst-case "
                "rounding of the variance reaches the variance's own size (rows of huge |mean| "
                "/ spread, constant rows with ε below the rounding), no float kernel promises "
                "anything, so nothing there fails"),
}


def _pct(x: float) -> str:
    return percent(x)


def explain() -> str:
    """What fail and warn mean, with the tolerances' reasons (``normcheck check --explain``):
    said once here, not with every verdict."""
    from normcheck.check.tolerances import BIAS, TOLERANCES

    out = ["fail -- only what no sound kernel would do on that row:",
           "  an element beyond the sound bound (normcheck.bounds.sound_bound: a float-"
           "accumulating two-pass, Welford or RMS kernel with the worst summation order -- "
           "sequential over the row -- and one final rounding; never below 1 ulp): the table's "
           "'x bound' column is the error over that bound, > 1 fails;",
           "  a non-finite answer for a finite exact value, an element never written, a crash, "
           "an out-of-bounds or misaligned access, a stack overflow, a deadlock, a timeout, a "
           "sandbox violation, an exception;",
           "  a rounding bias no round-to-nearest store gives (16-bit outputs): " + BIAS.reason,
           "  a result that changes with the block order, two blocks writing one element, a "
           "row stride ignored or padding written (normcheck.check.hazards).",
           "warn -- within the bound, but a family's largest error in ulps of max(|γx̂|,|β|) "
           "('max scaled') more than k x the best built-in order's on the same rows and above "
           "a floor:"]
    for name, t in TOLERANCES.items():
        if name == "quantised":
            out.append(f"  quantised: {t.reason}")
        else:
            out.append(f"  {name}: k = {t.warn_k:g}, floor {t.warn_floor:g} ulp -- {t.reason}")
    out.append("pass -- otherwise.  Exit codes: 0 pass and warn, 1 fail (--strict: warn too), "
               "2 cannot judge.")
    out += ["", "likely cause -- every fail and warn on accuracy is diagnosed; the verdict line "
            "names the cause with the strongest evidence, then the most elements explained:"]
    out += [f"  {ev}: {EVIDENCE_MEANS[ev]}" for ev in EVIDENCE]
    out.append("the causes (the key in --json's cause_key, then what it means):")
    out += [f"  fault_{k}: {what}" for k, what in FAULTS.items()]
    from normcheck.check.diagnose import CAUSES

    out += [f"  {k}: {what}" for k, (what, _ev) in CAUSES.items()]
    out.append("  unexplained: no model reproduces the elements off -- the first failure is "
               "named instead; the kernel is wrong there all the same")
    return "\n".join(out)


#: What each kind of evidence behind a cause is (``check --explain``).
EVIDENCE_MEANS = {
    "fault": "the kernel faulted (out of bounds, misaligned, crashed, hung, a race or a "
             "divergent barrier): what it computed after that is no evidence of anything",
    "undefined": "the output changed when memory not yet written read zeros instead of NaN",
    "race": "the output changed with the order blocks or warps ran in",
    "exact": "a model of the cause reproduces every element off (bit for bit for 16-bit "
             "outputs, within 1 ulp for fp32)",
    "bit": "a model reproduces 90 % of the elements off or more",
    "formula": "a backward formula reproduced within the sound limit",
    "stat": "a statistical signature (the variance each row implies, the error's growth with "
            "the row's conditioning)",
}
