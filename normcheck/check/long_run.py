"""The long run (``--rows N --cols D``): the families in batches of about 2^20 elements, on the
plain build, in bounded memory, each measured and dropped -- the check at a model's scale.
"""

from __future__ import annotations

import time


from normcheck import metrics
from normcheck import measure as measure_mod
from normcheck.check.engine import FATAL, Failure, odd_rows
from normcheck.check.tolerances import Verdict
from normcheck.check.forward_measure import CHECK_FAMILIES, FamilyResult

__all__ = ["LongRun"]


class LongRun:
    """The forward judge's long run (mixed into check.judge.ForwardJudge)."""

    # the long run ---------------------------------------------------------------------------------
    def run_long(self, rows: int, cols: int, progress=None):
        """``rows`` rows of width ``cols``, streamed in batches of about 2^20 elements (each batch
        a family of CHECK_FAMILIES in turn): the kernel runs on batch k (in this thread, as a GPU
        context wants) while another thread makes batch k+1 and a third measures batch k-1 (the
        oracle, the bound, the measurement), so memory stays that of three batches and the
        kernel waits for nothing but itself.  Returns (FamilyResult
        "long", [Failure], Worst or None)."""
        from concurrent.futures import ThreadPoolExecutor

        fr = FamilyResult("long", cols=[cols])
        ulp = metrics.StreamStats()
        bias = measure_mod.Bias()
        fails, worst = [], None
        t0 = last = time.perf_counter()
        done = 0

        def collect(job):
            nonlocal worst, done, last
            case, (m, f) = job[1], job[2].result()
            fails.extend(f)
            done += case.rows
            fr.rows += case.rows
            if m is not None:
                measure_mod.accumulate(ulp, m.m)
                bias.merge(m.m.bias())
                fr.max_scaled = max(fr.max_scaled, m.m.max_scaled)
                fr.max_of_bound = max(fr.max_of_bound, m.m.max_ratio)
                fr.unbounded_rows += m.unbounded
                w = self._worst("long", case, m)
                if w is not None and (worst is None or w.rank > worst[0].rank):
                    worst = (w, case, m)
            now = time.perf_counter()
            if progress and (now - last >= 2.0 or done >= rows):
                last = now
                progress(done, rows, done / max(now - t0, 1e-9))
            return any(x.kind in FATAL for x in f)

        batches = self.long_batches(rows, cols)
        with ThreadPoolExecutor(1, thread_name_prefix="normcheck-oracle") as pool, \
                ThreadPoolExecutor(1, thread_name_prefix="normcheck-rows") as maker:
            prev = None
            ahead = maker.submit(next, batches, None)
            while (item := ahead.result()) is not None:
                fam, case = item
                ahead = maker.submit(next, batches, None)  # made while the kernel runs
                outs = self.run_target(fam, case, guard="end", hazards=False)
                if prev is not None and collect(prev):
                    prev = None
                    break
                if isinstance(outs, Failure):
                    fails.append(outs)
                    prev = None
                    break
                prev = (fam, case, pool.submit(self.measure, fam, case, "end", outs))
            if prev is not None:
                collect(prev)
        fr.max_ulp, fr.p99_ulp, fr.mean_ulp = ulp.stats()
        bias_fail = self._bias(fr, "long", bias, worst)
        if bias_fail is not None and not any(f.kind in ("accuracy", "nonfinite") for f in fails):
            fails.append(bias_fail)
        else:
            bias_fail = None
        for f in fails:
            fr.failures[f.kind] = fr.failures.get(f.kind, 0) + 1
        if worst is not None:
            w = worst[0]
            fr.bound_ulp = float(w.ulp / w.of_bound) if w.of_bound > 0 else None
        if fails:
            fr.verdict = Verdict.FAIL
            acc = [f for f in fails if f.kind in ("accuracy", "nonfinite")]
            if acc and worst is not None:
                fr.cause = acc[0].cause = self.diagnose(worst[1], worst[2])
            elif bias_fail is not None:
                fr.cause = bias_fail.cause
        fr.seconds = time.perf_counter() - t0
        return fr, fails, None if worst is None else worst[0]

    def long_batches(self, rows: int, cols: int):
        """The long run's batches, made as they are needed: (family, Case) of about 2^20
        elements (an odd number of rows), each family of CHECK_FAMILIES but special and tails
        in turn, seeded by the check's seed and the batch's index."""
        batch = odd_rows(max(1, min(rows, (1 << 20) // cols)))
        fams = [f for f in CHECK_FAMILIES if f not in ("special", "tails")]
        k = 0
        while k * batch < rows:
            fam = fams[k % len(fams)]
            yield fam, self.case(fam, min(batch, rows - k * batch), cols,
                                 seed=[self.seed, 1 << 20, k], pooled=True)
            k += 1
