"""The tail every check shares: from the failures and warnings a judge found to the verdict.

The forward, backward and quantised checks (and a kernel file that broke the sandbox as it
loaded) each ran their own copy of this: deduplicate the failures, take the verdict
(``Verdict.of``: fail with any failure, else warn with any warning, else pass), the headline
cause (``causes.headline``: the strongest evidence, then the widest), choose the rows to save (the
launch that faulted, else the worst row) and build the :class:`CheckResult`.  The copies drifted
(only one deduplicated by output); here they are one.

    result = assemble(kernel=..., norm=..., ..., failures=f, warnings=w, families=fr,
                      save=lambda verdict: path_or_None, t0=t0)
"""

from __future__ import annotations

import time

from normcheck.backends import get_backend
from normcheck.causes import headline
from normcheck.check.result import CheckResult
from normcheck.check.tolerances import Verdict
from normcheck.errors import FATAL

__all__ = ["unique", "assemble", "fault_or_worst", "run_families", "FamilyState"]


class FamilyState:
    """One family under way: its result (``fr``), the failures found so far, and whatever the
    judge keeps between cases (attributes it sets itself)."""

    def __init__(self, fr):
        self.fr = fr
        self.fails = []


def run_families(judge, fams, examples: int, progress=None):
    """The loop every check runs: for each family, its cases (``judge.plan``), each run and
    measured (``judge.step``: the case, the measurement or None, its failures), stopping a family
    at a fault or when nothing was measured, and never launching a kernel that hung again; the
    launch that faulted first is kept for the replay (``judge.fault``); ``judge.finish`` judges
    the family (its failures and warnings).  ``judge.stop`` (optional) ends the check after a
    family.  Returns (family results, failures, warnings)."""
    results, failures, warnings = [], [], []
    for fi, fam in enumerate(fams):
        st = judge.start(fam)
        for k, (rows, cols) in enumerate(judge.plan(fam, examples)):
            if judge.timed_out:
                break  # a kernel that hung once is not launched again
            case, m, fails = judge.step(st, fi, k, rows, cols)
            fatal = any(f.kind in FATAL for f in fails)
            if m is None and judge.fault is None and fatal:
                judge.fault = (fam, case, fails[0])  # what a replay must run again
            st.fr.rows += rows
            st.fr.cols.append(cols)
            st.fails += fails
            if m is None or fatal:
                break
        fam_fails, fam_warns = judge.finish(st)
        failures += fam_fails
        warnings += fam_warns
        results.append(st.fr)
        if progress:
            progress(fi + 1, len(fams))
        if getattr(judge, "stop", None) is not None and judge.stop(failures):
            break
    return results, failures, warnings


def unique(failures, key=lambda f: (f.kind, f.family)) -> list:
    """The failures, one per ``key`` (a kind in a family; a backward check adds the output),
    in the order found: one of each is enough to read."""
    seen, out = set(), []
    for f in failures:
        k = key(f)
        if k not in seen:
            seen.add(k)
            out.append(f)
    return out


def fault_or_worst(fault, worst, what: str = ""):
    """(case, note) of the rows a failing check saves: the very launch that faulted (its family,
    case and failure), else the worst row; (None, None) when neither exists."""
    tail = f", {what}" if what else ""
    if fault is not None:
        fam, case, f = fault
        return case, f"the launch that faulted in normcheck check ({fam}, {f.kind}{tail})"
    if worst is not None and worst.case is not None:
        return worst.case, f"worst row of normcheck check ({worst.family}{tail})"
    return None, None


def assemble(*, kernel, norm, dtype, out_dtype, backend, failures, warnings, families,
             tolerance, t0, save=None, key=None, norm_desc=None, reference=None, worst=None,
             max_ulp=None, rows_checked=None, arch=None, **fields) -> CheckResult:
    """The CheckResult of a judge's findings.  ``save(verdict)`` saves the counterexample when
    the check's rule asks for one and returns its path (or None); ``key`` deduplicates (default
    a kind per family); ``max_ulp``/``rows_checked`` default to the families' largest and sum;
    ``fields`` go to the result as they are (baseline_note, search, detail ...)."""
    uniq = unique(failures, key) if key is not None else unique(failures)
    verdict = Verdict.of(uniq, warnings)
    cause = headline([(f.family, f.cause) for f in uniq + list(warnings)])
    ce = save(verdict) if save is not None else None
    be = get_backend(backend)
    return CheckResult(
        kernel=kernel, norm=norm.name, norm_desc=norm_desc or norm.describe(),
        reference=reference or norm.reference, dtype=dtype, out_dtype=out_dtype,
        backend=be.name, verdict=verdict,
        max_ulp=max([fr.max_ulp for fr in families] + [0.0]) if max_ulp is None else max_ulp,
        rows_checked=sum(fr.rows for fr in families) if rows_checked is None else rows_checked,
        failures=uniq, warnings=list(warnings), families=families, worst=worst,
        tolerance=tolerance, seconds=time.perf_counter() - t0, counterexample=ce,
        provenance=be.provenance({"arch": arch} if arch else None), cause=cause, **fields)
