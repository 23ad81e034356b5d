"""The forward check as a kind (normcheck.check.kinds): the families, the large-index run, the
long run and the search of a :class:`~normcheck.check.judge.ForwardJudge`, assembled into one
verdict.  The worst row is the worst found by any of them, not the last."""

from __future__ import annotations

import time

from normcheck.check import engine, kinds, large_index
from normcheck.check.engine import ENDS_LATER_RUNS, assemble
from normcheck.check.judge import ForwardJudge
from normcheck.check.result import ForwardDetail
from normcheck.errors import Interrupted

__all__ = ["Forward", "peak_rss_mib"]


def _worse(worst, w):
    return w if w is not None and (worst is None or w.rank > worst.rank) else worst


@kinds.register
class Forward(kinds.Kind):
    """y (and h, the statistics) of a forward norm against the oracle."""

    name = "forward"
    precedence = 90

    @staticmethod
    def claims(backward, contract) -> bool:
        return not backward and contract is None

    def judge(self, target, setup: engine.Setup, runs: engine.Runs):
        t0 = time.perf_counter()
        judge = ForwardJudge(target, setup)
        fams = judge.families()
        results, failures, warnings, worst = judge.run(fams, runs.examples)

        def fatal():  # a hang or a sandbox violation: nothing launched again (engine)
            return judge.timed_out or any(f.kind in ENDS_LATER_RUNS for f in failures)

        interrupted = None  # Ctrl-C after the families: what was measured is kept (#64)
        stage, search_stats = "the large-index run", None
        cov = engine.Coverage()  # every run the check owes, made or not and why (#66)
        hung = large_index.HUNG
        try:
            if fatal():
                cov.add("rows looped twice", False, hung)
            else:
                loop, what = judge.run_row_loop()
                if loop is None:
                    cov.add("rows looped twice", False, what)
                else:
                    failures += loop
                    cov.add("rows looped twice", True, detail=what)
            for fr, w in large_index.run_spans(judge, target, failures, cov, fatal, hung):
                results.append(fr)
                worst = _worse(worst, w)
            stage = "the long run"
            if runs.long is None:
                cov.add("long run", False, "not asked for (--rows N --cols D)")
            elif fatal():
                cov.add("long run", False, hung)
            else:
                fr, f, w = judge.run_long(*runs.long, progress=runs.progress)
                results.append(fr)
                failures += f
                worst = _worse(worst, w)
                cov.add("long run", True, detail=f"{runs.long[0]:,} rows of {runs.long[1]}")
            stage = "the search"
            # where a family's own launch faulted, the search's would fault alike: not run
            if not runs.search:
                cov.add("search", False, "--search 0")
            elif fatal() or judge.fault is not None:
                cov.add("search", False, hung if fatal() else
                        f"a launch of the families faulted ({judge.fault[2].kind} on "
                        f"{judge.fault[0]}): the search's would fault alike")
            else:
                search_stats, f, w = judge.search(fams, runs.search)
                if f is not None:
                    failures.append(f)
                    worst = _worse(worst, w)  # the worst of all, not the last found
                cov.add("search", True, detail=f"{search_stats['examples']} examples")
        except KeyboardInterrupt:
            interrupted = stage
            judge.notes.append(f"interrupted (Ctrl-C) during {stage}: it and what follows it "
                               "were not run; the families above were")
            cov.add(stage.removeprefix("the "), False, "interrupted (Ctrl-C)")
        _families_coverage(cov, judge, target, results)
        note = judge.convention_note()
        if note:
            judge.notes.append(note)
        label = target.label
        result = assemble(engine.Findings(
            kernel=label, norm=setup.norm, dtype=judge.rows.name, out_dtype=judge.out.name,
            backend=getattr(judge.target, "backend", None) or setup.backend,
            failures=failures, warnings=warnings, families=results, tolerance=judge.tol,
            t0=t0, worst=worst, arch=setup.arch,
            save=engine.saver(judge, worst, runs.save, setup.desc, label),
            rows_checked=sum(fr.rows for fr in results) + (search_stats["examples"]
                                                           if search_stats else 0),
            fields=dict(baseline_note=judge.baseline_note, search=search_stats,
                        yardstick=bool(judge.baselines),
                        detail=ForwardDetail(peak_rss_mib(), judge.spreads or None,
                                             judge.notes or None, cov.items))))
        if interrupted is not None:  # what was measured, shown and saved; still an interrupt
            result.interrupted = interrupted
            raise Interrupted(result)
        return result


def _families_coverage(cov, judge, target, results):
    """The families, the hazard build and the runs on a family's first case, placed first."""
    fams = [fr for fr in results if not fr.family.startswith(("large_index", "long"))]
    widths = sorted({int(c) for fr in fams for c in (fr.cols or [])})
    head = [{"run": "families", "ran": bool(fams),
             "detail": f"{len(fams)} families ({', '.join(fr.family for fr in fams)}), "
                       f"widths {', '.join(map(str, widths))}"}]
    caps = getattr(target, "capabilities", None)
    hz = bool(caps is not None and getattr(caps, "hazards", False))
    head.append({"run": "hazard build", "ran": hz and not judge.raced,
                 **({"why": "a race was found: the rest ran ordered on the plain build"}
                    if hz and judge.raced else {} if hz else
                    {"why": "the backend has none (races and exact shared bounds are the "
                            "cpu backend's CUDA C build's)"})})
    head.append({"run": "repeatability", "ran": judge.repeated > 0,
                 **({"detail": f"the first case of {judge.repeated} families in another "
                               "block order"} if judge.repeated else
                    {"why": "a race was found: another block order's differences are its"}
                    if judge.raced else
                    {"why": "no family's first case ran to the end"})})
    for name in ("overlapping writes", "padded rows"):
        why = judge.skipped[name]
        if not judge.hazards_done:
            why = why or ["no case of several rows ran to the end"]
        head.append({"run": name, "ran": not why, **({"why": why[0]} if why else {})})
    cov.items[:0] = head


def peak_rss_mib() -> float:
    """This process's peak resident memory so far (MiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
