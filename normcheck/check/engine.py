"""What every check shares: the judge's protocol, the one family loop, and the tail.

A kind of check is a :class:`Judge` -- ``plan`` (a family's cases), ``step`` (one case run and
measured), ``finish`` (the family judged) -- and :func:`run_families` runs every judge alike:
it keeps the launch that faulted for the replay, never relaunches a kernel that hung, counts a
family's failures and fails it.  :class:`Judge` holds what the kinds share: the run with the
timeout latch, the probe of undefined values on a family's first failing launch.  The forward
(normcheck.check.judge.ForwardJudge), backward (normcheck.check.backward.BackwardJudge) and
quantised (normcheck.check.quantised.QuantisedJudge) checks are each one judge.

The tail, :func:`assemble`: deduplicate the failures, take the verdict (``Verdict.of``: fail
with any failure, else warn with any warning, else pass), the headline cause
(``causes.headline``: the strongest evidence, then the widest), choose the rows to save (the
launch that faulted, else the worst row) and build the :class:`CheckResult`.

    result = assemble(Findings(kernel=..., norm=..., ..., failures=f, warnings=w,
                               families=fr, save=lambda verdict: path_or_None, t0=t0))

:class:`Setup` is what a judge is told of the check (norm, formats, ε, seed, widths ...) and
:class:`Runs` how much it runs: one object each, from the command line to the verdict.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from normcheck import formats, launch
from normcheck.backends import get_backend
from normcheck.causes import Cause, fault, headline, unexplained
from normcheck.check.diagnose import CAUSES
from normcheck.check.result import CheckResult
from normcheck.check.tolerances import Verdict
from normcheck.errors import FATAL, FailureKind, KernelError

__all__ = ["Judge", "Failure", "FamilyOutcome", "WorstRow", "Setup", "Runs", "Findings",
           "unique", "assemble", "saver", "run_families", "FamilyState", "odd_rows",
           "with_notes", "undefined_dependence", "check_h", "h_ulp", "Coverage"]


@dataclass
class Failure:
    kind: FailureKind  # (a str: "accuracy", "crash", ...)
    family: str
    detail: str
    cause: str | None = None
    output: str | None = None  # the output role it is about (dx, dgamma ...) where there are several

    def __post_init__(self):
        self.kind = FailureKind(self.kind)  # one list of kinds: an unknown one is a bug here

    def as_dict(self) -> dict:
        d = asdict(self)
        d["kind"] = str(self.kind)
        d["cause_key"] = getattr(self.cause, "key", None)
        return d


@dataclass
class FamilyOutcome:
    """What every kind of check says of a family: its rows, widths, typed verdict, failures by
    kind and cause (each kind's result adds its figures)."""

    family: str
    rows: int = 0
    cols: list = field(default_factory=list)
    verdict: Verdict = Verdict.PASS
    failures: dict = field(default_factory=dict)
    cause: str | None = None
    seconds: float = 0.0  # what its launches and their measurement took


@dataclass
class WorstRow:
    """Where the worst row of a check is, and its rows (``case``; each kind's adds how far off
    it is)."""

    family: str
    cols: int
    row_index: int
    case: object = field(default=None, repr=False, compare=False, kw_only=True)


def odd_rows(n: int) -> int:
    """A row count that is not a multiple of 2, 4, 8 or 32: a partial last tile."""
    return max(1, n if n % 2 else n - 1)


def with_notes(fails: list, outs) -> list:
    """The failures of a launch with what the launch noted (launch.Outputs.notes: an undefined
    warp-shuffle read) added to their detail: the likely reason, named where it shows."""
    notes = getattr(outs, "notes", None)
    if notes:
        for f in fails:
            f.detail += "; the launch noted: " + "; ".join(notes)
    return fails


def undefined_dependence(target, case) -> str | None:
    """Run a cpu-backend kernel twice more on one worker (blocks in a fixed order, so atomics
    arrive alike), its undefined values (shared memory before a block writes it, a shuffle from
    a lane not taking part) made of 0xFF bytes, then of zero bytes: where y differs, it depends
    on them.  A sentence saying where, or None (no difference, or a target that cannot be run
    so: a callable, the cuda backend)."""
    if not getattr(target, "refillable", False):
        return None
    try:
        y, y0 = (target(case, guard="end", workers=1, fill=f).get("output") for f in (0xFF, 0))
    except KernelError:
        return None
    if y is None or y0 is None or y0.shape != y.shape:
        return None
    diff = np.ascontiguousarray(y).view(f"u{y.dtype.itemsize}") != \
        np.ascontiguousarray(y0).view(f"u{y.dtype.itemsize}")
    if not diff.any():
        return None
    i, j = (int(v) for v in np.argwhere(diff)[0])

    def show(v):  # a value, or a quantised output's code
        return f"{float(v)!r}" if np.asarray(v).dtype.kind != "u" else f"code {int(v):#04x}"

    return (f"the output depends on undefined values: run with shared memory before it is "
            f"written and shuffles from lanes not taking part reading zeros instead of NaN "
            f"bytes, {int(diff.sum())}/{diff.size} elements of the output differ (first row "
            f"{i}, col {j}: {show(y[i, j])} -> {show(y0[i, j])})")


def check_h(family, h, ref, x=None, residual=None) -> list:
    """The fused sum h = x + residual a kernel wrote, against its correct rounding (ref.h): a
    sound kernel adds two stored values once, so anything else fails.  ``x`` and ``residual``
    (the stored operands) let the cause test the sums a kernel may have stored instead."""
    hr = ref.h.rounded
    fmt = formats.of_dtype(hr.dtype)
    h = np.asarray(h)
    if h.dtype != hr.dtype:
        h = fmt.cast(h.astype(np.float64))
    wrong = h.view(fmt.uint) != hr.view(fmt.uint)
    wrong &= ~(np.isnan(h.astype(np.float64)) & np.isnan(hr.astype(np.float64)))
    if not wrong.any():
        return []
    i, j = (int(v) for v in np.argwhere(wrong)[0])
    what = "never written" if launch.unwritten(h)[i, j] else "not correctly rounded"
    worst = h_ulp(h, ref)
    return [Failure("accuracy" if what != "never written" else "unwritten", family,
                    f"h = x + residual {what} in {int(wrong.sum())}/{h.size} elements, "
                    f"{worst:.4g} {fmt.name} ulp off at most (a sound kernel rounds it "
                    f"correctly: 0.5); e.g. row {i}, col {j}: kernel={float(h[i, j])!r} "
                    f"correctly rounded={float(hr[i, j])!r}",
                    cause=_h_cause(h, ref, wrong, fmt, x, residual), output="h")]


def h_ulp(h, ref) -> float:
    """h's largest error in ulps of the exact sum (0.5 where correctly rounded; inf where h is
    not finite and the sum is): h's figure beside y's max_ulp."""
    fmt = formats.of_dtype(ref.h.rounded.dtype)
    h = np.asarray(h)
    hv = (fmt.from_storage(h) if h.dtype == fmt.dtype else h).astype(np.float64)
    t = np.asarray(ref.h.exact, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.abs(hv - t) / fmt.ulp_array(np.abs(t))
    e = np.where(np.isnan(hv) & np.isnan(t), 0.0, e)
    e = np.where(np.isnan(e), np.inf, e)
    return float(e.max()) if e.size else 0.0


def _h_cause(h, ref, wrong, fmt, x=None, residual=None) -> Cause:
    """Why h is off -- h's own cause, never y's statistics: the kernel stored one operand (h
    written before the residual is added, or the residual alone), rounded toward zero
    (truncated, a conversion that shifts the bits off) -- each tested bit for bit, named where
    it reproduces 90 % of the elements off; else not correctly rounded, with no mechanism."""
    n = int(wrong.sum())
    hv = h.astype(np.float64)
    models = []
    for what, key, v in (
            ("h written before the residual is added (h = x: the kernel stores its input as "
             "the sum, or adds the residual after the store)", "h_before_add", x),
            ("h = the residual alone (x never added to the stream)", "h_residual_only",
             residual)):
        if v is not None:
            v = np.asarray(v)
            v = v if v.dtype == h.dtype else fmt.cast(v.astype(np.float64))
            models.append((what, key, v.astype(np.float64)))
    with np.errstate(invalid="ignore", over="ignore"):
        models.append(("h = x + residual rounded toward zero where it rounds to nearest "
                       "(truncated: __float2half_rz, or bits shifted off)", "h_toward_zero",
                       fmt.round_toward_zero(np.asarray(ref.h.exact, np.float64))))
        if x is not None and residual is not None and np.isfinite(fmt.max_finite):
            # each input clamped to the format's finite range as it is read (fmaxf/fminf; NaN
            # reads as +max), the sum then correctly rounded: ExLlamaV3's add is correctly
            # rounded and only its clamp differs (#68: headlined "not correctly rounded")
            def clamped(v):
                v = np.asarray(v).astype(np.float64)
                return np.clip(np.where(np.isnan(v), fmt.max_finite, v), -fmt.max_finite,
                               fmt.max_finite)

            models.append(("the inputs clamped to the format's finite range as they are read "
                           "(fmaxf/fminf to ±max: an infinite or NaN input reads as ±max), the "
                           "sum correctly rounded", "input_clamp",
                           fmt.cast(clamped(x) + clamped(residual)).astype(np.float64)))
    for what, key, v in models:
        hit = int((hv[wrong] == v[wrong]).sum())
        if hit >= 0.9 * n and hit >= min(n, 2):
            return Cause(f"{what} (reproduces h bit for bit on {hit}/{n} of the elements off)",
                         key, "exact" if hit == n else "bit", what, explained=hit)
    what = "h = x + residual not correctly rounded (summed or stored otherwise)"
    return Cause(what, "h_rounding", "stat", what)


class Coverage:
    """Every run a check owes, made or not, and why not (#66): what a verdict covers,
    said with it -- in the text (``ran: ...; not run: ...``), ``coverage`` in the JSON, the
    field's rows.  ``items``: [{"run", "ran", "why"?, "detail"?}]."""

    def __init__(self):
        self.items = []

    def add(self, run: str, ran: bool, why: str | None = None, detail: str | None = None):
        d = {"run": run, "ran": bool(ran)}
        if why:
            d["why"] = why
        if detail:
            d["detail"] = detail
        self.items.append(d)

    def padded(self, judge):
        """The padded-rows run of a judge that makes it once a check (``judge.padded``, its
        reasons for not making it in ``judge.skipped``)."""
        made = judge.padded and not judge.skipped
        self.add("padded rows", made, why=None if made else
                 (judge.skipped or ["no case of several rows ran to the end"])[0])

    def line(self) -> str:
        ran = [d["run"] for d in self.items if d["ran"]]
        out = "ran: " + ", ".join(ran)
        no = [f"{d['run']} ({d.get('why', '?')})" for d in self.items if not d["ran"]]
        return out + ("; not run: " + "; ".join(no) if no else "")


class Judge:
    """One kind of check, as :func:`run_families` drives it.  A kind gives ``plan(family,
    examples)`` -> [(rows, cols)], ``step(state, family_index, k, rows, cols)`` -> (case,
    measurement or None, [Failure]) and ``finish(state)`` -> (failures, warnings) -- the loop
    has counted the family's failures into ``state.fr.failures`` and failed it by then -- and
    may override ``stop(failures)`` (end the check after a family).  ``Result`` is its
    :class:`FamilyOutcome`."""

    Result = FamilyOutcome

    def __init__(self, target):
        self.target = target
        self.timed_out = False  # a kernel that hung is not launched again
        self.fault = None  # (family, Case, Failure): the first launch that faulted
        self.probed_undefined = set()  # families whose failing launch ran undefined_dependence
        self.undefined = {}  # family -> Cause, where the output depended on undefined values
        self.worst = None  # the worst row so far (each kind's own WorstRow)

    def run(self, fams, examples: int, progress=None):
        """(family results, failures, warnings, the worst row over all of them): the families
        through :func:`run_families`."""
        self.worst = None
        return (*run_families(self, fams, examples, progress), self.worst)

    def start(self, fam):
        return FamilyState(self.Result(fam))

    def stop(self, failures) -> bool:
        return False

    def run_target(self, family, case, cause=None, **call):
        """The target's outputs on the case (``call``: guard, the launch options), or the
        Failure it raised (``cause(error, case)`` may name why); a timeout latches.  Where the
        backend has a hazard build (its capabilities' ``hazards``) the launch runs on it --
        races by happens-before, shared memory's exact bounds -- unless ``hazards=False``
        (the long run, the large-index run: the bulk, on the plain build)."""
        caps = getattr(self.target, "capabilities", None)
        if caps is not None and caps.hazards:
            call.setdefault("hazards", True)
        else:
            call.pop("hazards", None)
        try:
            return self.target(case, **{"guard": "both", **call})
        except KernelError as e:
            self.timed_out = self.timed_out or e.kind == "timeout"
            return Failure(e.kind, family, str(e), cause=cause(e, case) if cause else None)

    def probe_undefined(self, family, case, fails, outs, kinds):
        """On a family's first launch that failed with one of ``kinds``: does the output depend
        on undefined values (:func:`undefined_dependence`)?  Where it does, that is the family's
        cause (the strongest evidence there is) and the launch's note."""
        if family in self.probed_undefined or not any(f.kind in kinds for f in fails):
            return
        self.probed_undefined.add(family)  # a family's first failing launch is enough
        note = undefined_dependence(self.target, case)
        if note:
            self.undefined[family] = Cause(note, "undefined_values", "undefined",
                                           CAUSES["undefined_values"][0])
            if isinstance(outs, launch.Outputs):
                outs.notes.append(note)


class FamilyState:
    """One family under way: its result (``fr``), the failures found so far, and whatever the
    judge keeps between cases (attributes it sets itself)."""

    def __init__(self, fr):
        self.fr = fr
        self.fails = []


def run_families(judge: Judge, fams, examples: int, progress=None):
    """The loop every check runs: for each family, its cases (``judge.plan``), each run and
    measured (``judge.step``: the case, the measurement or None, its failures), stopping a family
    at a fault or when nothing was measured, and never launching a kernel that hung again; the
    launch that faulted first is kept for the replay (``judge.fault``); a family with failures
    fails, and ``judge.finish`` judges the rest (its failures and warnings: a bias, a warn).
    ``judge.stop`` ends the check after a family.  Returns (family results, failures,
    warnings)."""
    from normcheck import progress as progress_mod

    results, failures, warnings = [], [], []
    with progress_mod.step(f"checking {len(fams)} families", total=len(fams)):
        _families(judge, fams, examples, progress, (results, failures, warnings))
    return results, failures, warnings


def _families(judge: Judge, fams, examples, progress, out) -> None:
    from normcheck import progress as progress_mod

    results, failures, warnings = out
    for fi, fam in enumerate(fams):
        st = judge.start(fam)
        plan = list(judge.plan(fam, examples))
        t0 = time.perf_counter()
        with progress_mod.step(f"family {fam} ({fi + 1} of {len(fams)}), {len(plan)} launches",
                               total=len(plan)):
            _run_family(judge, st, fi, plan)
        progress_mod.advance(fi + 1)
        for f in st.fails:
            st.fr.failures[f.kind] = st.fr.failures.get(f.kind, 0) + 1
        if st.fails:
            st.fr.verdict = Verdict.FAIL
        fam_fails, fam_warns = judge.finish(st)
        st.fr.seconds = time.perf_counter() - t0
        failures += fam_fails
        warnings += fam_warns
        results.append(st.fr)
        if progress:
            progress(fi + 1, len(fams))
        if judge.stop(failures):
            break


def _run_family(judge: Judge, st, fi: int, plan) -> None:
    """One family's launches, in order (:func:`run_families`)."""
    from normcheck import progress as progress_mod

    for k, (rows, cols) in enumerate(plan):
        if judge.timed_out:
            break  # a kernel that hung once is not launched again
        case, m, fails = judge.step(st, fi, k, rows, cols)
        fatal = any(f.kind in FATAL for f in fails)
        if m is None and judge.fault is None and fatal:
            judge.fault = (st.fr.family, case, fails[0])  # what a replay must run again
        st.fr.rows += rows
        st.fr.cols.append(cols)
        st.fails += fails
        progress_mod.advance(k + 1)
        # a launch that faulted measured nothing (the family's next would fault alike); one
        # measured beside a fault of another run of its case (its padded rows, its race found
        # on the hazard build) goes on: a fault ends only what it makes meaningless (#66)
        if m is None or any(f.kind in ENDS_LATER_RUNS for f in fails):
            break


#: The faults after which nothing is launched again: a kernel that hung (each launch would cost
#: the timeout) or broke its sandbox.  Any other fault ends the launch it happened in, not the
#: runs after it (#66: a misaligned load at a padded pitch skipped the large-index run, and a
#: 32-bit row offset a real model hits was never looked at).
ENDS_LATER_RUNS = frozenset({FailureKind.TIMEOUT, FailureKind.DEADLOCK, FailureKind.SANDBOX})


def unique(failures, key=lambda f: (f.kind, f.family)) -> list:
    """The failures, one per ``key`` (a kind in a family; a backward check adds the output),
    in the order found: one of each is enough to read."""
    out = {}
    for f in failures:
        out.setdefault(key(f), f)
    return list(out.values())


def saver(judge: Judge, worst, path, kernel: dict, label, what: str = "",
          verdicts=("fail",)):
    """The ``save`` of :func:`assemble`: the rows of the very launch that faulted, else of the
    worst row, every array of the case with them, written for ``normcheck replay`` when the
    verdict is one of ``verdicts`` or a ``path`` asks for them."""
    from pathlib import Path

    from normcheck import cases

    tail = f", {what}" if what else ""

    def save(verdict):
        if judge.fault is not None:
            fam, c, f = judge.fault
            note = f"the launch that faulted in normcheck check ({fam}, {f.kind}{tail})"
        elif worst is not None and worst.case is not None:
            c, note = worst.case, f"worst row of normcheck check ({worst.family}{tail})"
        else:
            return None
        if not (verdict in verdicts or path):
            return None
        extra = {k: np.asarray(v, np.float32).reshape(-1) if k == "scale" else v for k, v in
                 (("dy", c.dy), ("mean", c.mean), ("rstd", c.rstd), *c.extra.items())
                 if v is not None}
        return str(cases.save_case(Path(path) if path else None, kernel=kernel, x=c.x,
                                   gamma=c.gamma, beta=c.beta, residual=c.residual, eps=c.eps,
                                   note=note, label=label, exclusive=path is None, **extra))
    return save


@dataclass
class Setup:
    """What a judge is told of the check beyond its target: the norm as judged, the formats
    (``fmt`` the rows' storage -- fp8's carrier --, ``out`` y's, or the quantised ``contract``),
    ε as the kernel receives it, the fused convention, the backend the yardsticks run on, the
    seed, the widths the kernel takes and their multiple, the statistics it writes, the
    architecture presented, the description a counterexample file keeps, the tolerance."""

    norm: object
    fmt: object
    out: object = None
    contract: object = None
    convention: str | None = None
    eps: np.float32 = np.float32(1e-5)
    backend: object = "cpu"
    seed: int = 0
    cols_range: tuple = (1, 8192)
    multiple_of: int = 1
    stats_roles: tuple = ()
    arch: int | None = None
    desc: dict = field(default_factory=dict)
    tolerance: object = None


@dataclass
class Runs:
    """How much a check runs: ``examples`` rows a family, a ``search`` of that many examples,
    a ``long`` run ((rows, cols) or None) with its ``progress``, and where to save the rows
    (``save``: a path, or None for ./.normcheck/ on a fail)."""

    examples: int = 64
    search: int = 0
    long: tuple | None = None
    save: str | None = None
    progress: object = None


@dataclass
class Findings:
    """What a judge found, for :func:`assemble`: the kernel, norm, formats and backend it names;
    the failures, warnings and family results; the tolerance; when it started (``t0``); the
    ``save`` hook (verdict -> the saved file or None); ``key`` (deduplication: a kind per family
    by default); ``norm_desc``/``reference`` (the norm's own by default); the worst row;
    ``max_ulp``/``rows_checked`` (the families' by default); the architecture presented; and the
    result's other fields as they are (baseline_note, search, detail ...)."""

    kernel: str
    norm: object
    dtype: str
    out_dtype: str
    backend: object
    failures: list
    warnings: list
    families: list
    tolerance: object
    t0: float
    save: object = None
    key: object = None
    norm_desc: str | None = None
    reference: str | None = None
    worst: object = None
    max_ulp: float | None = None
    rows_checked: int | None = None
    arch: object = None
    fields: dict = field(default_factory=dict)


def assemble(f: Findings) -> CheckResult:
    """The CheckResult of a judge's findings (see the module docstring)."""
    uniq = unique(f.failures, f.key) if f.key is not None else unique(f.failures)
    for x in uniq:  # a fault heads the verdict: it is the cause, whatever else was off
        if x.cause is None:
            x.cause = fault(x.kind, x.detail)
    verdict = Verdict.of(uniq, f.warnings)
    if uniq:  # a FAIL is headed by what failed; a warning's cause only where nothing that
        # failed has one, said as such, and never one a sound kernel has (#57)
        cause = headline([(x.family, x.cause) for x in uniq], failing=True)
        if cause is None:
            warned = headline([(x.family, x.cause) for x in f.warnings], failing=True)
            if warned is not None:
                fams = ", ".join(dict.fromkeys(x.family for x in uniq))
                where = ", ".join(dict.fromkeys(x.family for x in f.warnings
                                                if getattr(x.cause, "key", None) == warned.key))
                cause = Cause(f"{warned} -- seen on {where} (a warning); what failed on {fams} "
                              "has no model of its own", warned.key, warned.evidence,
                              warned.title, warned.explained)
            else:
                cause = unexplained(uniq, [x.cause for x in uniq + list(f.warnings)
                                           if x.cause])
    else:
        cause = headline([(x.family, x.cause) for x in f.warnings])
    ce = f.save(verdict) if f.save is not None else None
    be = get_backend(f.backend)
    n = f.norm
    return CheckResult(
        kernel=f.kernel, norm=n.name, norm_desc=f.norm_desc or n.describe(),
        reference=f.reference or n.reference, dtype=f.dtype, out_dtype=f.out_dtype,
        backend=be.name, verdict=verdict,
        max_ulp=max([fr.max_ulp for fr in f.families] + [0.0] +  # y's, and a fused h's
                    [v for fr in f.families if (v := getattr(fr, "h_max_ulp", None))])
        if f.max_ulp is None else f.max_ulp,
        rows_checked=sum(fr.rows for fr in f.families) if f.rows_checked is None
        else f.rows_checked,
        failures=uniq, warnings=list(f.warnings), families=f.families, worst=f.worst,
        tolerance=f.tolerance, seconds=time.perf_counter() - f.t0, counterexample=ce,
        provenance=be.provenance({"arch": f.arch} if f.arch else None), cause=cause,
        **f.fields)