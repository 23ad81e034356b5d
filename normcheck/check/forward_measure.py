"""A forward batch measured against its bound: every element of y (and h, the statistics)
against the exact value and the sound bound (normcheck.measure, normcheck.bounds), the
fused convention told by the rows, the worst element, the rounding bias -- the check's
measure stage, between the launch and the verdict.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from normcheck import bounds, families, formats, launch, metrics, oracle
from normcheck import measure as measure_mod
from normcheck.check import diagnose, engine
from normcheck.check.engine import Failure, check_h, with_notes
from normcheck.check.tolerances import BIAS, STATISTICS
from normcheck.check.yardstick import Baseline
from normcheck.launch import Case

__all__ = ["Measure", "Measured", "Worst", "FamilyResult", "element_text", "wrapped_offset",
           "CHECK_FAMILIES", "WEIGHTS_FAMILY"]

#: The families a check runs (``extremes`` is the report's business: see the module docstring).
CHECK_FAMILIES = tuple(f for f in families.FAMILIES if f != "extremes")
#: The family a check runs where γ or β is wider than the rows (ForwardJudge.families).
WEIGHTS_FAMILY = "weights"
#: What a launch notes that is said with the verdict, a pass included (a divergent barrier;
#: a Triton launch whose programs ran one at a time, executor/grid.py)
_SAID_WITH_THE_VERDICT = ("__syncthreads()", "ran one at a time", "not importable here")


@dataclass
class Worst(engine.WorstRow):
    """The worst element found: where, how far off, and the row that holds it."""

    col: int
    ulp: float
    scaled_ulp: float
    of_bound: float                 # error / sound limit there (> 1 fails)
    row: list
    first: list
    nonfinite: bool = False         # the kernel's value is NaN or ±inf where the exact is not

    @property
    def rank(self) -> tuple:
        """How bad: a non-finite answer first, then the ratio to the sound bound, then the
        scaled error -- the order "the worst row" of a check is chosen by, over every family,
        the long run and the search."""
        return (self.nonfinite, self.of_bound, self.scaled_ulp)

    def as_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "case"}
        return d


@dataclass
class FamilyResult(engine.FamilyOutcome):
    """A forward family's figures (a backward family's too: per output in ``outputs``)."""

    max_ulp: float = 0.0
    p99_ulp: float = 0.0
    mean_ulp: float = 0.0
    max_scaled: float = 0.0
    max_of_bound: float = 0.0
    bound_ulp: float | None = None   # the sound limit (ulps) at the family's worst element
    unbounded_rows: int = 0          # rows where no float kernel can promise anything
    baseline: Baseline | None = None
    warn_at: float | None = None
    outputs: dict = field(default_factory=dict)  # backward: per output (dx, dγ, dβ) figures
    mean_signed_ulp: float | None = None  # the mean signed error toward zero (measure.Bias)
    bias_stderr_ulp: float | None = None  # its standard error, from the rows' means
    h_max_ulp: float | None = None   # a fused kernel's h = x + residual: its largest error

    def as_dict(self) -> dict:
        d = asdict(self)
        d["baseline"] = None if self.baseline is None else asdict(self.baseline)
        return d


#: The two sound conventions of a fused norm, as the notes say them.
_SUMS = {"exact": "exact sum x + residual", "stored": "sum as stored (h, rounded)"}


#: A wrapped offset's evidence in the 2^32 run where nothing is unwritten: at least this share
#: of the elements off the sound bound, by at least WRAP_RATIO times it (the last rows read an
#: early row's untouched pages, zeros: their results are wholly wrong, never a few ulps off).
WRAP_SHARE, WRAP_RATIO = 0.5, 16.0


def wrapped_offset(measured, fails) -> bool:
    """Whether the 2^32 run's failures show a wrapped offset: an element never written (the
    writes went to an early row), or most elements wholly wrong (the reads came from one) --
    never an error like every family's, which is that error's cause (#64: rstd rounded to half
    was blamed on an unsigned 32-bit wrap)."""
    if any(f.kind == "unwritten" for f in fails):
        return True
    if measured is None:
        return False
    mm = measured.m
    n = max(int(mm.n), 1)
    off = int(mm.over) + sum(int(mm.classes[k]) for k in metrics.FAILURE_CLASSES)
    return off >= WRAP_SHARE * n and float(mm.max_ratio) >= WRAP_RATIO


def _off(measured, fails):
    """(failures, elements) of y's accuracy off the sound bound on a case, or () where none is."""
    acc = [f for f in fails if f.kind in ("accuracy", "nonfinite") and
           f.output in (None, "output")]
    if not acc or measured is None:
        return ()
    mm = measured.m
    n = int(mm.over) + sum(int(mm.classes[k]) for k in metrics.FAILURE_CLASSES)
    return (len(acc), max(n, 1))


class Measured:
    """One batch, measured (normcheck.measure): per element errors and where they stand
    against the bound.  The per-element arrays are measured again on first use (a long check
    keeps only the reductions; ``full()`` measures them now); ``again(lo, hi)`` measures a few
    rows with their arrays."""

    def __init__(self, ref, y, m, unbounded, E=None, floor=1.0, poison=None):
        self.ref, self.y, self.m, self.unbounded = ref, y, m, unbounded
        self.h_ulp = None  # a fused kernel's h: its largest error in ulps (engine.h_ulp)
        self._args = (E, floor, poison)

    def full(self):
        if self.m.ulp is None:
            E, floor, poison = self._args
            self.m = measure_mod.measure(self.ref, self.y, E=E, floor=floor, poison=poison)
        return self.m

    def again(self, lo: int, hi: int):
        E, floor, poison = self._args
        return measure_mod.measure(measure_mod.Rows(self.ref, lo, hi), self.y[lo:hi],
                                   E=None if E is None else E.rows(lo, hi), floor=floor,
                                   poison=poison, hist=False)

    def __getattr__(self, name):  # ulp, scaled, ratio, cls: the per-element arrays
        if name in ("ulp", "scaled", "ratio", "cls"):
            return getattr(self.full(), name)
        raise AttributeError(name)


class _Point:
    """One element of a reference, for the sound limit at that element."""

    def __init__(self, ref, i, j):
        self.fmt = ref.fmt
        self.exact = ref.exact[i:i + 1, j:j + 1]
        self.scale = measure_mod.Rows(ref, i, i + 1).scale[:, j:j + 1]


def element_text(i, j, x, y, exact) -> str:
    """The one layout of a mismatching element: "row i, col j: x=… kernel=… exact=…"."""
    return measure_mod.mismatch(f"row {i}, col {j}", y[i, j], exact[i, j], x=x[i, j])


class Measure:
    """The forward judge's measurements (mixed into check.judge.ForwardJudge)."""

    # one batch ------------------------------------------------------------------------------------
    def measure(self, family: str, case: Case, guard="both", outs=None):
        """Run the target on the case (unless its ``outs`` are given) and measure it:
        (Measured or None, [Failure]).  A fused norm whose check names no convention is
        measured against both sound ones until a case tells them apart (:meth:`_convention`)."""
        if outs is None:
            outs = self.run_target(family, case, guard=guard)
        if isinstance(outs, Failure):
            return None, [outs]
        if self.norm.fused and outs.get("output") is not None and self.decided is None:
            measured, fails = self._convention(family, case, outs)
        else:
            measured, fails = self._measure(family, case, outs)
        self.probe_undefined(family, case, fails, outs, ("accuracy", "nonfinite"))
        for note in getattr(outs, "notes", ()) or ():
            # shown with the verdict, a pass included: a divergent barrier, and programs the
            # Triton executor ran one at a time (what a check of the file costs).  An undefined
            # shuffle read stays with the failures it may explain (with_notes): on a pass its
            # value went unused (CUB's partial-warp reductions read such lanes, then mask them)
            if any(m in note for m in _SAID_WITH_THE_VERDICT) and note not in self.notes \
                    and len(self.notes) < 8:
                self.notes.append(note)
        return measured, with_notes(fails, outs)

    def _convention(self, family, case, outs):
        """A fused norm's two sound conventions: normalise the exact sum x + r, or the sum as
        stored (h, rounded).  Unnamed: the case is measured against both until one is off
        where the other holds -- that one is the kernel's from then on (the cases before held
        under both); where both are off, the nearer.  Named: where the named one is off and the
        other holds on the case, that is the failures' cause, with the setting."""
        convs = (self.convention, "stored" if self.convention == "exact" else "exact")
        here, other = convs
        got = {here: self._measure(family, case, outs)}
        off = {here: _off(*got[here])}
        if self.named is not None and not off[here]:
            return got[here]  # the named one holds: the other is not measured
        self.convention = other
        got[other] = self._measure(family, case, outs)
        off[other] = _off(*got[other])
        self.convention = here
        if self.named is not None:
            if not off[other]:
                n = off[here][1]
                text = (f"the kernel normalises the {_SUMS[other]}, where the check names "
                        f'convention = "{here}" (the {_SUMS[here]}): with convention = '
                        f'"{other}" these rows are within the sound bound (the spec\'s or '
                        f"check_callable's convention; leave it out to accept either)")
                cause = diagnose.Cause(text, "convention_named", "exact", text, explained=n)
                for f in got[here][1]:
                    if f.kind in ("accuracy", "nonfinite") and f.output in (None, "output"):
                        f.cause = cause
            return got[here]
        if not off[here] and not off[other]:
            return got[here]
        pick = min(convs, key=lambda c: (bool(off[c]), off[c][1] if off[c] else 0))
        alt = other if pick == here else here
        cols = case.x.shape[1]
        how = (f"{family} at width {cols}: the {_SUMS[alt]}'s reference is off on "
               f"{off[alt][1]} elements" + (f", the {_SUMS[pick]}'s on {off[pick][1]}"
                                            if off[pick] else ", the other's on none"))
        self.decided = (pick, how)
        if pick != self.convention:
            self.convention = pick
            self.baselines, self.baseline_note = self._baselines()
        return got[pick]

    def convention_note(self) -> str | None:
        """What the check says of a fused norm's convention: the one judged by and why."""
        if not self.norm.fused:
            return None
        if self.named is not None:
            return f'fused convention: "{self.named}" (named by the check)'
        if self.decided is None:
            return ('fused convention: either -- no row told the exact sum from the stored one '
                    "(both sound conventions hold on every row)")
        c, how = self.decided
        return (f'fused convention: "{c}", the kernel\'s ({_SUMS[c]}), told by {how}; '
                'name one with convention = "exact" or "stored" to judge by it')

    def _measure(self, family: str, case: Case, outs):
        """The outputs of a launch against the reference under ``self.convention``."""
        ref = self.reference(case)
        fails = []
        y = outs.get("output")
        if y is None:
            return None, [Failure("error", family, "the target wrote no output (y)")]
        x = case.x
        parts = oracle.normalised_parts(ref, x, case.residual, self.convention)
        E = bounds.SoundBound(self.norm, ref, parts, case.gamma, case.beta, eps=case.eps,
                              convention=self.convention, storage=self.fmt)
        poison = formats.poison_bits(y.dtype)
        mm = measure_mod.measure(ref, y, E=E, floor=self.tol.fail_floor, poison=poison,
                                 keep=())
        fails_cls = sum(mm.classes[k] for k in metrics.FAILURE_CLASSES)
        measured = Measured(ref, y, mm, mm.unbounded_rows, E, self.tol.fail_floor, poison)
        if mm.unwritten or fails_cls or mm.over:
            mm = measured.full()
        unw = launch.unwritten(y) if mm.unwritten else None
        if mm.unwritten:
            i, j = (int(v) for v in np.argwhere(unw)[0])
            fails.append(Failure(
                "unwritten", family, f"{mm.unwritten}/{y.size} output elements never written "
                f"(they still hold the poison NaN), first at row {i}, col {j}, width "
                f"{x.shape[1]}, {x.shape[0]} rows"))
        n_bad = sum(mm.classes[k] for k in metrics.FAILURE_CLASSES)
        if n_bad > (mm.unwritten if unw is not None else 0):
            bad_cls = np.isin(mm.cls, [metrics.CLASSES.index(k)
                                       for k in metrics.FAILURE_CLASSES])
            if unw is not None:
                bad_cls &= ~unw
            if bad_cls.any():
                counts = {}
                for k in metrics.FAILURE_CLASSES:
                    c_ = int(((mm.cls == metrics.CLASSES.index(k)) & bad_cls).sum())
                    if c_:
                        counts[k] = c_
                i, j = (int(v) for v in np.argwhere(bad_cls)[0])
                fails.append(Failure(
                    "nonfinite", family, f"{', '.join(f'{v} {k}' for k, v in counts.items())} "
                    f"at width {x.shape[1]}; e.g. " + element_text(
                        i, j, x, y, ref.exact)))
        if "h" in outs:
            fails += check_h(family, outs["h"], ref, case.x, case.residual)
            measured.h_ulp = engine.h_ulp(outs["h"], ref)
        roles = [role for role in self.stats_roles if role in outs]
        rows = oracle.normalised_rows(ref, x, case.residual, self.convention) if roles else None
        for role in roles:
            fails += self._check_stats(family, role, ref, outs[role], rows)
        if mm.over:
            i, j = np.unravel_index(mm.argmax_ratio, y.shape)
            lim = bounds.sound_limit(_Point(ref, i, j), E.array(i, i + 1)[:, j:j + 1],
                                     self.tol.fail_floor)[0, 0]
            lim_ulp = float(lim / self.out.ulp_array(np.abs(ref.exact[i, j])))
            fails.append(Failure(
                "accuracy", family,
                f"{mm.over}/{y.size} elements beyond what a sound kernel can produce; worst at "
                f"width {x.shape[1]}, " + element_text(i, j, x, y, ref.exact) +
                f", {float(mm.ulp[i, j]):.4g} ulp where the sound bound allows {lim_ulp:.4g} "
                f"({metrics.times_bound(float(mm.ratio[i, j]))}x)"))
        return measured, fails

    def _check_stats(self, family, role, ref, got, rows):
        """mean and rstd against the exact statistics: the sound bound of the statistics (a
        sequential two-pass or Welford kernel), never below 2 float ulps."""
        sref = ref.mean if role == "mean" else ref.rstd
        if sref is None:
            return [Failure("error", family, f"the kernel writes {role}, which {self.norm.name} "
                            "does not have")]
        got = np.asarray(got)
        if launch.unwritten(got).any():
            i = int(np.argmax(launch.unwritten(got)))
            return [Failure("unwritten", family, f"{role} of row {i} never written",
                            output=role)]
        # judged in the format the kernel stores it in (Liger's mean and rstd are the rows'
        # bf16): a sound kernel's float statistic, then one rounding to that format
        fmt = self.formats.get(role) or formats.FP32
        if not isinstance(fmt, formats.Format):
            fmt = formats.FP32
        got = fmt.from_storage(got) if got.dtype != fmt.dtype else got.astype(np.float64)
        t = sref.exact
        allowed = bounds.sound_statistic_limit(self.norm, rows, role, t, fmt, self.eps,
                                               STATISTICS.fail_floor)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            err = np.abs(got - t)
            same = (got == t) | (np.isnan(t) & np.isnan(got))
            err = np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))
        over = err > allowed
        if not over.any():
            return []
        i = int(np.argmax(np.where(over, err / np.where(allowed > 0, allowed, 1), -1)))
        unit = fmt.ulp_array(t[i])
        return [Failure("accuracy" if np.isfinite(err[i]) else "nonfinite", family,
                        f"{role} off by {err[i] / unit:.3g} {fmt.name} ulps where "
                        f"a sound kernel stays within {allowed[i] / unit:.3g}, " +
                        measure_mod.mismatch(f"row {i}", got[i], t[i]), output=role)]

    def _worst(self, fam, case, m: Measured):
        """The worst element of a batch (beyond the bound the most, else non-finite, else the
        largest scaled error), from the reductions; only its row is measured again."""
        mm = m.m
        if not mm.n:
            return None
        bad = ~np.isfinite(m.scaled) if mm.inf_ulp else None
        if bad is not None and bad.any():  # a non-finite answer: the worst there is
            k = int(np.argmax(bad.ravel()))
        elif mm.max_ratio > 0:
            k = mm.argmax_ratio
        else:
            k = max(mm.argmax_scaled, 0)
        i, j = (int(v) for v in np.unravel_index(k, m.y.shape))
        row = m.again(i, i + 1)
        ulp, sc, rt = row.ulp[0], row.scaled[0], row.ratio[0]
        first = []
        for jj in np.argsort(-np.nan_to_num(ulp, nan=np.inf))[:5]:
            first.append({"col": int(jj), "x": float(case.x[i, jj]), "kernel": float(m.y[i, jj]),
                          "exact": float(m.ref.exact[i, jj]), "ulp": float(ulp[jj])})
        score = float(sc[j]) if np.isfinite(sc[j]) else math.inf
        nonfinite = not np.isfinite(sc[j])
        return Worst(fam, int(case.cols), int(i), int(j), float(ulp[j]), score,
                     math.inf if nonfinite else float(rt[j]),
                     [float(v) for v in case.x[i].astype(np.float64)], first,
                     nonfinite, case=case.head(int(i)))

    def _bias(self, fr, fam, bias, worst):
        """Record a family's rounding bias; a Failure where it is one no round-to-nearest store
        gives (tolerances.BIAS), its cause named by the round-toward-zero model where that
        reproduces the output bit for bit."""
        if bias.n:
            fr.mean_signed_ulp = bias.mean
            fr.bias_stderr_ulp = bias.stderr if np.isfinite(bias.stderr) else None
        if not BIAS.fails(self.out.name, bias):
            return None
        cause = self.rounding_cause(worst[1], worst[2]) if worst is not None else None
        toward = "toward zero" if bias.mean > 0 else "away from zero"
        return Failure("rounding_bias", fam, f"mean signed error {bias.mean:+.3f} ulp {toward} "
                       f"(± {bias.stderr:.3f}, over {bias.n} elements in {bias.rows} rows): "
                       f"round to nearest gives 0 ± 0.29/√n; beyond ±{BIAS.max_mean} and "
                       f"{BIAS.z:g} standard errors (normcheck.check.tolerances.BIAS)",
                       cause=cause)
