"""`normcheck report`: sweep the built-in kernels (sweep), audit the seed articles (audit),
render report.md / index.html / PNG plots (render, plots)."""

from __future__ import annotations

import sys
import time

__all__ = ["run_report", "AFTER_SWEEP"]

#: What the report does after its sweep (each a progress step of its own).
AFTER_SWEEP = ("the backward section, the quantised section, the audit of the seed articles, "
               "and the writing of report.md, index.html and the plots")


def _progress_printer(stream=None):
    stream = stream if stream is not None else sys.stderr  # the command line's, escaped
    tty = stream.isatty()
    last = [0.0]
    first = {}  # the first task's end: the pace is measured from there, builds excluded

    def show(i, n, rec, elapsed):
        now = time.perf_counter()
        first.setdefault("i", i)
        first.setdefault("t", elapsed)
        if not tty and i != n and now - last[0] < 5:
            return
        last[0] = now
        done = i - first["i"]
        # the ETA from the tasks since the first (a first task that waited for the builds
        # would make it absurd); none until there is a pace
        eta = f", ~{(elapsed - first['t']) / done * (n - i):.0f} s left in the sweep" \
            if done >= 2 else ""
        p = "".join(f" {k}={v:g}" for k, v in rec.param.items())
        from normcheck.escape import one_line

        msg = (f"[{i}/{n}] {one_line(rec.kernel)} {rec.family}{p} {rec.cols} cols: "
               f"max {rec.max_ulp:.3g} ulp — {elapsed:.0f} s{eta}")
        stream.write(("\r" + msg[:150].ljust(150)) if tty else msg + "\n")
        if tty and i == n:
            stream.write("\n")
        if i == n:  # what comes after the sweep, each step saying so as it goes
            stream.write(f"sweep done in {elapsed:.0f} s; then {AFTER_SWEEP}\n")
        stream.flush()

    return show


def _build_parts(be, pattern):
    """normcheck's own parts and the built-in kernels the report runs (the --kernels pattern's
    forward ones, and the backward and quantised sections'), built side by side on the
    machine's cores before the sweep starts, saying so (one after another, in the sweep's
    first tasks, they took 8 + 10 + 29 s on an empty cache)."""
    import fnmatch

    from normcheck import kernels as builtins
    from normcheck import parts

    vs = [v for v in builtins.variants(kind=None)
          if v.kind not in ("forward", "quantised") or pattern is None or
          fnmatch.fnmatchcase(v.name, pattern)]
    parts.prepare(be.name, vs).wait()


def run_report(mode="quick", backend="cpu", out="reports/quick", seed=0, kernels=None,
               workers=None, progress=True, stop_after=None, cluster=None, specs=None,
               compare=None, field=False) -> dict:
    """Sweep (resuming what ``out`` already holds), audit, render.  ``specs``: user kernels'
    specs (files or folders) swept beside the built-ins; ``compare``: an earlier report folder
    to diff against (normcheck.diff; the result's ``diff``); ``field``: judge the field's
    public kernels too (normcheck.field: the section "The field").  Returns the paths written
    and the results."""
    from normcheck.backends import get_backend
    from normcheck.report import sweep

    from normcheck.report import folder

    be = get_backend(backend)
    old = None
    if compare is not None:
        from normcheck import diff

        old = diff.load(compare)
        if old[0] != "report":
            from normcheck.errors import invalid

            raise invalid("--compare", str(compare), "an earlier report folder")
    user = sweep.user_specs(specs)
    out = folder.prepare(out)
    p = sweep.plan(mode, kernels_pattern=kernels, seed=seed, specs=user)
    _build_parts(be, kernels)
    with folder.lock(out):
        folder.refuse_links(out)
        return _sweep_audit_render(p, be, out, workers, progress, stop_after, cluster,
                                   old, compare, field)


def _sweep_audit_render(p, be, out, workers, progress, stop_after, cluster, old=None,
                        compare=None, field=False) -> dict:
    from normcheck.report import audit, folder, render, sweep

    results = sweep.run_sweep(p, out, backend=be, workers=workers,
                              progress=_progress_printer() if progress else None,
                              stop_after=stop_after, cluster=cluster)
    if stop_after is not None and results["measured_now"] >= stop_after and \
            len(results["records"]) < len(p.tasks):
        return {"results": results, "complete": False}
    gpu_text = None
    timings = None
    if be.capabilities.device_timings:
        from normcheck.report import gpu as gpu_section

        gpu = gpu_section.gpu_bandwidth(echo=lambda *a: None)
        timings = {r["kernel"]: r["seconds"] for r in gpu["kernels"]}
        gpu_text = gpu_section.format_gpu(gpu)
    from normcheck import progress as steps
    from normcheck.report import backward

    with steps.step("the backward section: the built-in dx and dγ/dβ kernels on their rows"):
        results["backward"] = backward.measure(be, seed=p.seed, mode=p.mode)
    folder.write(out / "backward.json", folder.json_text(results["backward"], indent=1))
    from normcheck.report import quantised

    with steps.step("the quantised section: the built-in quantising kernels, each contract"):
        results["quantised"] = quantised.measure(be, seed=p.seed, mode=p.mode,
                                                 pattern=p.pattern)
    folder.write(out / "quantised.json", folder.json_text(results["quantised"], indent=1))
    if field:
        from normcheck.field import judge

        outs = judge.judge_field(echo=(lambda m: print(m, file=sys.stderr)) if progress else None,
                                 save_dir=out / "field")
        results["field"] = [o.as_dict() for o in outs]
        folder.write(out / "field.json", folder.json_text(results["field"], indent=1))
    with steps.step("the audit: the seed articles' claims, measured"):
        results["audit"] = audit.run_audit(results["records"], backend=be, timings=timings,
                                           backward=results["backward"])
    folder.write(out / "audit.json", folder.json_text(results["audit"], indent=1))
    d = None
    if old is not None:
        from normcheck import diff

        d = diff.diff_reports(old[1], results)
        d.old, d.new = str(compare), str(out)
    with steps.step(f"writing report.md, index.html and the plots in {out}"):
        paths = render.render(results, out, gpu=gpu_text, compare=d)
    return {"results": results, "paths": paths, "complete": True, "diff": d}
