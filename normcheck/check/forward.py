"""The forward check as a kind (normcheck.check.kinds): the families, the large-index run, the
long run and the search of a :class:`~normcheck.check.judge.ForwardJudge`, assembled into one
verdict.  The worst row is the worst found by any of them, not the last."""

from __future__ import annotations

import time

from normcheck.check import engine, kinds
from normcheck.check.engine import FATAL, assemble
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

        def fatal():
            return any(f.kind in FATAL for f in failures)

        interrupted = None  # Ctrl-C after the families: what was measured is kept (#64)
        stage, search_stats = "the large-index run", None
        try:
            for span in (31, 32):
                # past 2^32 only for CUDA C, and only where 2^31 held: an unsigned offset
                # (blockIdx.x × cols) is C's; a Triton program id is a signed int32
                if span == 32 and (not getattr(getattr(target, "capabilities", None),
                                               "unsigned_indices", False) or any(
                        f.family == "large_index" and f.kind not in ("accuracy", "nonfinite")
                        for f in failures)):
                    break  # an index already wrapped at 2^31 (a fault, an unwritten element)
                large = judge.run_large_index(span) if not fatal() else None
                if large is not None:
                    fr, f, w, note = large
                    if fr is not None or span == 31:  # why not: said once
                        judge.notes.append(note)
                    if fr is not None:
                        results.append(fr)
                        failures += f
                        worst = _worse(worst, w)
            stage = "the long run"
            if runs.long is not None and not fatal():
                fr, f, w = judge.run_long(*runs.long, progress=runs.progress)
                results.append(fr)
                failures += f
                worst = _worse(worst, w)
            stage = "the search"
            if runs.search and not fatal():
                search_stats, f, w = judge.search(fams, runs.search)
                if f is not None:
                    failures.append(f)
                    worst = _worse(worst, w)  # the worst of all, not the last found
        except KeyboardInterrupt:
            interrupted = stage
            judge.notes.append(f"interrupted (Ctrl-C) during {stage}: it and what follows it "
                               "were not run; the families above were")
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
                                             judge.notes or None))))
        if interrupted is not None:  # what was measured, shown and saved; still an interrupt
            result.interrupted = interrupted
            raise Interrupted(result)
        return result


def peak_rss_mib() -> float:
    """This process's peak resident memory so far (MiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
