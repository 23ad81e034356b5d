"""The check's measurements and verdicts, on typed values.

For a target (normcheck.launch) of a given :class:`normcheck.norms.Norm` and storage format:

1. every family of normcheck.families but ``extremes`` (where float accumulation itself
   overflows and no float kernel can pass) at its widths -- within the kernel's width contract
   -- with an odd number of rows per launch (a partial last tile is always exercised), each
   launch twice so that an access just before or just after any array is caught;
2. the best built-in order of the same norm and format on the same rows (two-pass and Welford
   for LayerNorm, RMS for RMSNorm): the yardstick of *warn*;
3. a targeted Hypothesis search over the same families (``hypothesis.target`` on the error over
   the sound bound), shrinking a failure to a small row.

Verdicts (see normcheck.check.tolerances for the table): *fail* where an element is beyond what
any sound kernel could produce (normcheck.bounds.sound_bound), or on a non-finite answer, an
unwritten element, a crash, an out-of-bounds or misaligned access, a deadlock, a timeout, a
sandbox violation, an exception; *warn* where a family's largest error is more than k times the
best built-in order's; *pass* otherwise.  Each fail or warn on accuracy is diagnosed
(normcheck.check.diagnose).
"""

from __future__ import annotations

import functools
import hashlib
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from normcheck import bounds, families, formats, kernels, launch, metrics, oracle
from normcheck import spec as specs
from normcheck import measure as measure_mod
from normcheck.check import diagnose, engine, hazards, large_index
from normcheck.check.engine import FATAL, Failure, check_h, odd_rows, with_notes
from normcheck.check.tolerances import BIAS, STATISTICS, TOLERANCES, Verdict
from normcheck.backends import cache
from normcheck.launch import Case

__all__ = ["CHECK_FAMILIES", "Baseline", "Worst", "FamilyResult", "ForwardJudge",
           "element_text"]

#: The families a check runs (``extremes`` is the report's business: see the module docstring).
CHECK_FAMILIES = tuple(f for f in families.FAMILIES if f != "extremes")
#: The family a check runs where γ or β is wider than the rows (ForwardJudge.families).
WEIGHTS_FAMILY = "weights"

#: What a launch notes that is said with the verdict, a pass included (a divergent barrier;
#: a Triton launch whose programs ran one at a time, executor/grid.py)
_SAID_WITH_THE_VERDICT = ("__syncthreads()", "ran one at a time", "not importable here")


@functools.cache
def _code_digest() -> str:
    """sha256 of normcheck's own code (every source file of the package): a figure the code
    computed is kept only for the code that computed it."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for f in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".cpp", ".h", ".cuh", ".cu")
                    and p.is_file()):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def case_digest(c: Case) -> str:
    """sha256 of what a norm kernel reads of a case: x, γ, β, the residual (each dtype, shape
    and bytes) and ε."""
    h = hashlib.sha256(f"{float(c.eps)!r}\0".encode())
    for a in (c.x, c.gamma, c.beta, c.residual):
        if a is None:
            h.update(b"none\0")
        else:
            a = np.ascontiguousarray(a)
            h.update(f"{a.dtype.str}{a.shape}".encode() + a.tobytes() + b"\0")
    return h.hexdigest()


def yardstick_path(v, digest: str, backend):
    """Where the yardstick's figure of built-in ``v`` on the case of :func:`case_digest`
    ``digest`` is kept: a file named by the digest of the built-in's build (its path names its
    build key), the case and normcheck's code; None where it is not kept (a backend whose
    launches are not reproducible, a GPU's; a built-in of another language)."""
    caps = getattr(backend, "capabilities", None)
    if not getattr(caps, "reproducible", False) or getattr(v, "language", "cuda") != \
            getattr(caps, "language", None):
        return None
    k = kernels.compiled(v, backend)
    key = f"{v.name}\0{getattr(k.module, 'path', '')}\0{_code_digest()}\0{digest}"
    return cache.cache_dir("cpu") / "yardstick" / hashlib.sha256(key.encode()).hexdigest()


def _kept_figure(path):
    if path is None or not cache.verified(path):
        return None
    try:
        v = float(path.read_text())
    except (OSError, ValueError):
        return None
    return v if v >= 0 else None


def _not_our_constants():
    """Hypothesis (6.131 on) also draws the constants it finds in the source of every *local*
    module imported -- normcheck's own, in an editable install (a wheel's are in site-packages,
    never scanned): the search's draws then differed between the two installs, and the scan
    cost 0.1-0.2 s a check (#67).  normcheck's modules are marked as scanned; where Hypothesis
    has no such table this does nothing."""
    try:
        from hypothesis.internal.conjecture import providers

        seen = providers._seen_modules
    except (ImportError, AttributeError):  # pragma: no cover - another Hypothesis
        return
    for name, mod in list(sys.modules.items()):
        if name == "normcheck" or name.startswith("normcheck."):
            seen.add(id(mod))


@dataclass
class Baseline:
    name: str           # the built-in variant
    max_scaled: float   # its largest error on the family's rows, in ulps of max(|γx̂|, |β|)


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


def _wrapped(measured, fails) -> bool:
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


class ForwardJudge(large_index.Plan, engine.Judge):
    """The forward check: the families at their widths, each element against the sound bound
    and the best built-in order; the hazards, the long run and the search are its own."""

    Result = FamilyResult

    def __init__(self, target, setup: engine.Setup):
        super().__init__(target)
        self.norm = setup.norm
        self.fmt = formats.get(setup.fmt)
        self.out = formats.get(setup.out or setup.fmt)
        #: the fused convention the check names; None: either sound one, the kernel's own told
        #: by its rows (:meth:`measure`) -- ``convention`` is the one judged by so far
        self.named = setup.convention if self.norm.fused else None
        self.convention = setup.convention or "exact"
        self.decided = None  # (convention, how the rows told it) once they do
        self.eps = np.float32(setup.eps)
        self.backend = setup.backend
        self.hazard_widths = set()  # the widths a family's case has run at on the hazard build
        self.seed = int(setup.seed)
        self.cols_range = tuple(setup.cols_range)
        self.multiple_of = int(setup.multiple_of)
        self.stats_roles = tuple(setup.stats_roles)
        self.tol = setup.tolerance or TOLERANCES[self.out.name]
        self.formats = dict(getattr(target, "formats", {}) or {})
        #: the format x is stored in: ``fmt``, or fp8 (``fmt`` is then its carrier, fp16)
        self.rows = self.formats.get("input", self.fmt)
        if isinstance(self.rows, formats.Format):
            self.rows = self.fmt
        self.baselines, self.baseline_note = self._baselines()
        self.hazards_done = False  # the grid in parts and the padded rows: once a check
        self.spreads = {}  # family -> {role: elements}: a kernel declared nondeterministic
        #: the keys of the causes diagnosed so far, first found first: preferred where they
        #: explain a later family's elements too (one bug, one cause: diagnose.explain)
        self.causes_found = []
        self.raced = False  # a race found: the rest runs ordered, on the plain build
        #: what the coverage says (forward.coverage): each run's reason for not being made
        self.skipped = {"overlapping writes": [], "padded rows": []}
        self.repeated = 0  # the families whose first case ran again in another block order
        # what the launches noted (a divergent barrier, an undefined shuffle), and a buffer the
        # padded-row sweep leaves alone (its pitch reaches the kernel some other way)
        self.notes = [f"padded rows not run for {why}"
                      for why in getattr(target, "unpadded", {}).values()]
        sp = getattr(target, "spec", None)
        if getattr(target, "strided", None) and getattr(sp, "pitch_multiple_of", 1) > 1:
            # a spec narrowing the pitches judged says so with the verdict, and why (#56)
            self.notes.append(f"padded rows only to pitches of cols + a multiple of "
                              f"{sp.pitch_multiple_of}, as the spec's pitch_multiple_of says: "
                              f"{sp.pitch_why}")

    # what runs as the yardstick -------------------------------------------------------------------
    def _baselines(self):
        n = self.norm
        if self.rows is not self.fmt:
            return [], (f"no built-in kernel reads {self.rows.name} rows: judged against the "
                        "sound bound only")
        if self.out != self.fmt:
            return [], (f"no built-in kernel writes {self.fmt.name} rows to {self.out.name}: "
                        "judged against the sound bound only")
        stream = [self.formats[r].name for r in ("residual", "h")
                  if r in self.formats and self.formats[r] != self.fmt]
        if n.fused and stream:
            return [], (f"no built-in kernel keeps the residual stream in {stream[0]} beside "
                        f"{self.fmt.name} rows: judged against the sound bound only")
        if n.reference != "exact":
            return [], ("no built-in kernel computes the hf definition: judged against the "
                        "sound bound only")
        algos = ["two_pass", "welford"] if n.centred else ["rms"]
        language = self.target.capabilities.language if hasattr(self.target, "capabilities") \
            else "cuda"  # a Triton kernel's yardstick: the built-in Triton norms
        vs = [v for v in kernels.variants(norm=n.name, storage=self.fmt.name, fast_math=False,
                                          language=language)
              if v.algorithm in algos and v.order in (None, "upcast_square")
              and (not n.fused or v.convention == self.convention or self.fmt.name == "fp32")]
        if not vs:  # the fail rule needs no built-in: only warn's yardstick is missing
            return [], (f"no built-in {n.name} kernel for {self.fmt.name}: judged against the "
                        "sound bound only")
        return vs, None

    def baseline_errors(self, case: Case, ref) -> dict:
        """{variant: largest scaled error} of the built-in orders on the case.  A figure is
        the same whenever the built-in's build, the rows and normcheck's code are (the oracle
        and the built-ins are deterministic): on the cpu backend it is kept in the cache,
        ledger-sealed, keyed by all three (:func:`yardstick_path`), and not measured again
        (#67: every check re-ran the same 24 built-in launches)."""
        out = {}
        n = self.norm
        c = Case(x=case.x, gamma=case.gamma if n.has_gamma else None,
                 beta=case.beta if n.reads_beta else None, residual=case.residual, eps=case.eps)
        digest = case_digest(c) if self.baselines else None
        for v in self.baselines:
            path = yardstick_path(v, digest, self.backend)
            kept = _kept_figure(path)
            if kept is not None:
                out[v.name] = kept
                continue
            y = kernels.run_case(v, c, self.backend)["output"]
            s = metrics.compare(ref, y, ordinal=False).scaled
            s = s[np.isfinite(s)]
            out[v.name] = float(s.max()) if s.size else 0.0
            if path is not None:
                try:
                    cache.install_file(repr(out[v.name]), path)
                except OSError:
                    pass  # a read-only cache: measured again next time
        return out

    # cases ------------------------------------------------------------------------------------------
    def case(self, family: str, rows: int, cols: int, seed, pooled: bool = False) -> Case:
        if family == WEIGHTS_FAMILY:
            return self._weights_case(rows, cols, seed)
        fmt = self.fmt
        x = families.generate(family, self.rows, rows, cols, seed=seed, pooled=pooled)
        g, b = families.weights(self._own("gamma"), cols, seed=self.seed,
                                beta_fmt=self._own("beta"))
        return self.make_case(x, g, b, families.generate(
            "gaussian", self._own("residual"), rows, cols, seed=seed, pooled=pooled)
            if self.norm.fused else None, self.eps)

    def _own(self, role):
        """A weight's own storage format (fp32 master weights beside bf16 rows), else the rows'."""
        f = self.formats.get(role, self.fmt)
        return f if isinstance(f, formats.Format) else self.fmt

    @property
    def wide_weights(self) -> bool:
        """Whether γ or β is stored wider than the rows (fp32 master weights, bf16 rows)."""
        return any(self._own(r).precision > self.rows.precision for r in ("gamma", "beta")
                   if r in self.formats)

    def families(self) -> tuple:
        """The families this check runs: CHECK_FAMILIES, and where β is there to cancel and a
        weight is wider than the rows, the weights family."""
        extra = (WEIGHTS_FAMILY,) if self.wide_weights and self.norm.reads_beta else ()
        return CHECK_FAMILIES + extra

    def _weights_case(self, rows, cols, seed) -> Case:
        """Mixed precision's family: γ and β at their own (wider) precision, β nearly
        cancelling γ·x̂ on every row (each row one stored row scaled by a power of two, so x̂ is
        the same on all of them): y ≈ γ·x̂/32, so a kernel that rounds its fp32 weights to the
        rows' bf16 -- an error of 2^-9·|γ·x̂| -- is many of y's ulps off, where a sound float
        kernel stays within one."""
        rng = np.random.default_rng([self.seed, 0x77, rows, cols] + list(np.atleast_1d(seed)))
        z = self.rows.cast(rng.standard_normal(cols)).astype(np.float64)
        scale = np.ldexp(1.0, rng.integers(-2, 3, size=(rows, 1)))
        x = self.rows.cast(z[None, :] * scale)
        mu = z.mean()
        xhat = (z - mu) / np.sqrt(((z - mu) ** 2).mean() + float(self.eps))
        g = self._own("gamma").cast(1 + 0.1 * rng.standard_normal(cols))
        u = rng.uniform(0.5, 1.0, cols)
        b = self._own("beta").cast(-g.astype(np.float64) * xhat * (1 - u / 32))
        return self.make_case(x, g, b, None, self.eps)

    def make_case(self, x, g, b, r, eps) -> Case:
        n = self.norm

        def as_fmt(v, role):
            f = self.formats.get(role, self.fmt)
            return None if v is None else (v if v.dtype == f.dtype else
                                           f.cast(v.astype(np.float64)))

        if self.rows is not self.fmt:  # fp8 rows (a search's draws): their values, carried
            x = self.rows.cast(np.asarray(x).astype(np.float64))
        return Case(x=x, gamma=as_fmt(g, "gamma") if n.has_gamma else None,
                    beta=as_fmt(b, "beta") if n.reads_beta else None,
                    residual=as_fmt(r, "residual") if n.fused else None, eps=np.float32(eps))

    def reference(self, case: Case):
        n = self.norm
        h = self.formats.get("h") if n.fused else None
        return oracle.for_norm(n, case.x, case.gamma, case.beta, residual=case.residual,
                               eps=case.eps, convention=self.convention, out=self.out,
                               h=h if isinstance(h, formats.Format) else None)

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
        terms = bounds.sound_statistics(self.norm, rows, self.eps)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            if role == "mean":
                e = np.max([v[0] for v in terms.values()], axis=0)
            else:
                e = np.max([v[1] * v[2] for v in terms.values()], axis=0)
            e = bounds.SOUND_SAFETY * e + formats.FP32.ulp_array(t) / 2 + \
                (fmt.ulp_array(t) / 2 if fmt is not formats.FP32 else 0.0)
            allowed = np.maximum(e, STATISTICS.fail_floor * fmt.ulp_array(t))
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

    # the families (check.engine.run_families drives these) --------------------------------------
    def plan(self, fam, examples):
        ws = families.widths("gaussian" if fam == WEIGHTS_FAMILY else fam, self.cols_range,
                             self.multiple_of)
        per = odd_rows(max(1, examples // len(ws)))
        # an odd width runs at least 3 rows: rows 1 and 2 start off any even alignment (a
        # __half2 or float2 access of a row's start faults on a GPU there)
        return [(max(per, 3) if cols % 2 else per, cols) for cols in ws]

    def start(self, fam):
        st = super().start(fam)
        st.base_max, st.allu, st.alls, st.worst, st.bias = {}, [], [], None, measure_mod.Bias()
        return st

    def step(self, st, fi, k, rows, cols):
        fam, fr = st.fr.family, st.fr
        case = self.case(fam, rows, cols, seed=[self.seed, fi, k])
        # once a race is found, the bulk runs ordered on the plain build: the race is named,
        # and what the kernel computes is still measured (#66: a race ended every family at
        # its first launch, and a second bug was never seen)
        # the hazard build with both guards for the first case of each width (every shape
        # class the families hold: the control flow of a norm kernel turns on the width, and
        # a race by happens-before or a shared bound is found whatever the values); the other
        # families' cases at a width already run so, on the plain build with the end guard:
        # a quarter of the CPU (#67).  Where both builds are one (Triton) nothing changes.
        first = case.cols not in self.hazard_widths
        self.hazard_widths.add(case.cols)
        outs = self.run_target(fam, case, **(
            {"hazards": False} if self.raced else {} if first else
            {"hazards": False, "guard": "end"}))
        raced = []
        if isinstance(outs, Failure) and outs.kind == "race":
            raced = [outs]
            self.raced = True
            outs = self.run_target(fam, case, hazards=False)
        m, fails = self.measure(fam, case, outs=outs)
        fails = raced + fails
        if k == 0 and not isinstance(outs, Failure) and not any(
                f.kind in FATAL for f in fails):
            fails += self.hazards(fam, case, outs)
        if m is None:
            return case, None, fails
        st.allu.append(m.ulp.ravel())
        if m.h_ulp is not None:
            fr.h_max_ulp = max(fr.h_max_ulp or 0.0, m.h_ulp)
        st.alls.append(m.scaled.ravel())
        st.bias.merge(m.m.bias())
        fr.max_of_bound = max(fr.max_of_bound, float(m.ratio.max()) if m.ratio.size else 0.0)
        fr.unbounded_rows += m.unbounded
        w = self._worst(fam, case, m)
        if w is not None and (st.worst is None or w.rank > st.worst[0].rank):
            st.worst = (w, case, m)
        for name, v in self.baseline_errors(case, m.ref).items():
            st.base_max[name] = max(st.base_max.get(name, 0.0), v)
        return case, m, fails

    def finish(self, st):
        fr, fam, fam_fails, fam_worst = st.fr, st.fr.family, st.fails, st.worst
        warnings = []
        if st.allu:
            fr.max_ulp, fr.p99_ulp, fr.mean_ulp = metrics.ulp_stats(np.concatenate(st.allu))
            sc = np.concatenate(st.alls)
            sc = sc[np.isfinite(sc)]
            fr.max_scaled = float(sc.max()) if sc.size else 0.0
        if st.base_max:
            name = min(st.base_max, key=st.base_max.get)
            fr.baseline = Baseline(name, st.base_max[name])
        bias_fail = self._bias(fr, fam, st.bias, fam_worst)
        if bias_fail is not None and not any(f.kind in ("accuracy", "nonfinite")
                                             for f in fam_fails):
            fam_fails.append(bias_fail)  # (beyond the bound already: that is the finding)
            fr.failures[bias_fail.kind] = fr.failures.get(bias_fail.kind, 0) + 1
        else:
            bias_fail = None
        if fam_worst is not None:
            w, case, m = fam_worst
            fr.bound_ulp = float(w.ulp / w.of_bound) if w.of_bound > 0 else None
            if self.worst is None or w.rank > self.worst.rank:
                self.worst = w
        if fam_fails:
            fr.verdict = Verdict.FAIL
            # y's failures get y's diagnosis; h's keep their own (check_h)
            acc = [f for f in fam_fails if f.kind in ("accuracy", "nonfinite") and
                   f.output in (None, "output")]
            if bias_fail is not None and not acc:
                fr.cause = bias_fail.cause
            named = next((f.cause for f in acc
                          if getattr(f.cause, "key", None) == "convention_named"), None)
            if acc and fam in self.undefined:
                fr.cause = acc[0].cause = self.undefined[fam]
            elif named is not None:
                fr.cause = named
            elif acc and fam_worst is not None:
                fr.cause = acc[0].cause = self.diagnose(fam_worst[1], fam_worst[2])
            fr.cause = fr.cause or next((f.cause for f in fam_fails if f.cause), None)
        elif fr.baseline is not None:
            fr.warn_at = max(self.tol.warn_floor, self.tol.warn_k * fr.baseline.max_scaled)
            if fr.max_scaled > fr.warn_at:
                fr.verdict = Verdict.WARN
                if fam_worst is not None:
                    fr.cause = self.diagnose(fam_worst[1], fam_worst[2])
                ratio = fr.max_scaled / fr.baseline.max_scaled if \
                    fr.baseline.max_scaled > 0 else math.inf
                warnings.append(Failure(
                    "warn", fam, f"max {fr.max_scaled:.4g} ulp (of max(|γx̂|,|β|)) is "
                    f"{ratio:.3g}x the best built-in order ({fr.baseline.name}: "
                    f"{fr.baseline.max_scaled:.4g}) and above the warn level "
                    f"{fr.warn_at:.4g}; within the sound bound everywhere "
                    f"({fr.max_of_bound:.3g} of it at most)", cause=fr.cause))
        return fam_fails, warnings

    def hazards(self, fam, case, outs) -> list:
        """The checks no tolerance makes (normcheck.check.hazards) on a family's first case:
        the same case in another block order (every family), and once a check, on a case of
        several rows, the grid run in parts (two blocks writing one element) and the rows
        padded (a stride ignored, padding written)."""
        spec = getattr(self.target, "spec", None)
        det = getattr(spec, "deterministic", True)
        found = []
        if not self.raced:  # after a race, another block order's differences are the race's
            f, spread = hazards.repeatability(self.target, case, outs, fam, self.seed, det)
            if f is not None:
                found.append(f)
            elif spread:
                self.spreads[fam] = spread
            self.repeated += 1
        if not self.hazards_done and case.rows >= 2:
            self.hazards_done = True
            padded = hazards.op_padding if isinstance(self.target, launch.OpTarget) else \
                hazards.padding
            found += [f for f in (hazards.overlapping_writes(self.target, case, fam,
                                                             self.skipped["overlapping writes"]),
                                  padded(self.target, case, outs, fam,
                                         self.skipped["padded rows"]))
                      if f is not None]
        return [Failure(f.kind, f.family, f.detail, cause=f.cause) for f in found]

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

    def rounding_cause(self, case, m):
        """Round toward zero, tested bit for bit: the output against the exact values rounded
        toward zero, on the elements where that differs from rounding to nearest."""
        ref, y = m.ref, np.asarray(m.y).astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            rz = self.out.round_toward_zero(ref.exact)
            rn = ref.rounded.astype(np.float64)
            tell = np.isfinite(rz) & np.isfinite(y) & (rz != rn)
        n = int(tell.sum())
        if n == 0:
            return None
        hit = int((y[tell] == rz[tell]).sum())
        if hit >= 0.9 * n:
            what = ("rounds toward zero (or truncates) where the format rounds to nearest: "
                    "__float2bfloat16_rz, cvt.rz, or a conversion that shifts the bits off")
            return diagnose.Cause(f"{what} (reproduces the kernel bit for bit on {hit}/{n} of "
                                  "the elements where the two roundings differ)",
                                  "round_toward_zero", "exact" if hit == n else "bit", what,
                                  explained=hit)
        return diagnose.Cause("a rounding bias: the mean signed error is beyond what round to "
                              f"nearest gives, but rounding toward zero reproduces only {hit}/{n}"
                              " of the elements where it differs", "rounding_bias", "stat")

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

    # the large-index run's plan (check.large_index): the probe's case, the rows it wrote ---------
    def probe_case(self, rows: int, cols: int, seed):
        return self.case("gaussian", rows, cols, seed=seed)

    def rows_unwritten(self, outs, case):
        y = outs.get("output")
        if y is None or np.ndim(y) != 2 or y.shape[0] != case.rows:
            return None
        if any(a.roles == ("input", "output") for a in self.target.spec.args):
            # written over x: the rows it changed are the rows it wrote
            x = np.ascontiguousarray(np.asarray(case.x)[:, :y.shape[1]])
            return (np.ascontiguousarray(y).view(np.uint8).reshape(case.rows, -1) ==
                    x.view(np.uint8).reshape(case.rows, -1)).all(axis=1)
        return launch.unwritten(y).all(axis=1)

    def run_row_loop(self):
        """A block that loops over rows, twice on the hazard build (#66): where the launch's
        grid stops growing with the rows (``min(rows, 65535)``, a persistent grid of a fixed
        size), a narrow case of 2 G + 7 rows -- G the grid's blocks there -- whose first 8
        blocks run (each then takes a second and third row), so a race across the row loop
        (a shared value read in one iteration and written in the next with no barrier between:
        Apex's cuApplyLayerNorm, its PR #1184) is found.  Returns ([Failure], what it ran) or
        (None, why not)."""
        t = self.target
        caps = getattr(t, "capabilities", None)
        if not isinstance(t, launch.KernelTarget) or t.quant is not None:
            return None, "the target is no kernel of normcheck's launches"
        if not (caps and caps.hazards and caps.block_subsets):
            return None, "the backend has no hazard build that runs part of a grid"
        ln = t.spec.launches
        if len(ln) != 1 or ln[0].host:
            return None, "a spec of several launches, or a host launcher (its grid unknown)"
        lo, hi = self.cols_range
        m = max(1, self.multiple_of)
        cols = next((c for c in (32, 64, 128, 256, 1024) if lo <= c <= hi and c % m == 0),
                    None)
        if cols is None:
            return None, "no narrow width the kernel takes"
        try:
            probe = 1 << 20
            g = specs.evaluate_dims(ln[0].grid, probe, cols, "launch.grid")
        except Exception:  # noqa: BLE001 -- a grid that does not take these rows
            return None, "a grid that cannot hold 2^20 rows"
        G = int(np.prod(g))
        if G >= probe or g[0] != G:
            return None, "the grid grows with the rows: no block loops over them"
        rows = 2 * G + 7
        if rows * cols > 1 << 24:
            return None, f"a grid of {G:,} blocks: its second rows are past 2^24 elements"
        case = self.case("gaussian", rows, cols, seed=[self.seed, 0x52])
        nb = max(G - 1, 1).bit_length()
        outs = self.run_target("row_loop", case, guard="end",
                               blocks=(((1 << nb) - 1) & ~7, 0))
        what = (f"{rows:,} rows of {cols} on a grid of {G:,} blocks, its first 8 run: each "
                "takes rows b, b + G, b + 2G on the hazard build")
        if isinstance(outs, Failure):
            return [outs], what
        return [], what

    def judge_large(self, fam: str, case: Case, call: dict):
        """The large-index run's launch measured: (FamilyResult, [Failure], Worst or None,
        whether its failures show a wrapped offset)."""
        fr = FamilyResult(fam, rows=case.rows, cols=[case.cols])
        outs = self.run_target(fam, case, **call)
        m, fails = self.measure(fam, case, outs=outs)
        worst = None
        if m is not None:
            fr.max_ulp = float(m.m.max_ulp)
            fr.max_scaled = float(m.m.max_scaled)
            fr.max_of_bound = float(m.m.max_ratio)
            worst = self._worst(fam, case, m)
        acc = [f for f in fails if f.kind in ("accuracy", "nonfinite")]
        if acc and m is not None:
            fr.cause = acc[0].cause = self.diagnose(case, m)
        return fr, fails, worst, _wrapped(m, fails)

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

    def diagnose(self, case: Case, m: Measured) -> str | None:
        fail_cls = np.isin(m.cls, [metrics.CLASSES.index(k)
                                              for k in metrics.FAILURE_CLASSES])
        bad = (m.ratio > 1.0) | (fail_cls & ~launch.unwritten(m.y))
        if not bad.any():
            s = np.where(np.isfinite(m.scaled), m.scaled, 0.0)
            bad = s >= max(np.percentile(s, 99), 1e-300)
        c = diagnose.explain(self.norm, self.fmt, case, m.ref, m.y, bad,
                             self.convention, prefer=self.causes_found)
        key = getattr(c, "key", None)
        if key is not None and key not in self.causes_found:
            self.causes_found.append(key)
        return c

    # the search -----------------------------------------------------------------------------------
    def search(self, fams, examples: int):
        """A targeted Hypothesis search; returns (summary, Failure or None, Worst or None)."""
        from hypothesis import HealthCheck, given, settings, target
        from hypothesis import strategies as st
        from hypothesis.errors import Flaky

        from normcheck.strategies import row_cases

        lo, hi = self.cols_range
        m = self.multiple_of

        def fit(c):
            c = -(-max(c, lo) // m) * m
            return min(c, hi - (hi % m)) if c > hi else c

        # widths up to 4096 (or twice the narrowest the kernel takes), within its contract
        cols = (st.integers(lo, min(hi, max(4096, 2 * lo))) | st.sampled_from(
            [c for c in families.TAIL_COLS if lo <= c <= hi] or [lo])).map(fit)
        found = {}
        stats = {"examples": 0, "max_of_bound": 0.0}

        @st.composite
        def cases(draw):
            fam = draw(st.sampled_from(list(fams)))
            if fam == WEIGHTS_FAMILY:  # not a family of rows: the check's own, seeded (#64)
                return fam, self._weights_case(draw(st.integers(1, 3)), draw(cols),
                                               draw(st.integers(0, 2**32 - 1)))
            return fam, draw(row_cases(self.fmt.name, cols=cols, family=fam, beta=True,
                                       fused=self.norm.fused, eps=float(self.eps)))

        @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck), print_blob=False,
                  report_multiple_bugs=False)
        @given(fam_case=cases())
        def prop(fam_case):
            fam, c = fam_case
            stats["examples"] += 1
            if found.get("failure") is not None and found["failure"].kind in FATAL:
                raise AssertionError(found["failure"].detail)  # no shrinking through hangs
            case = self.make_case(c.x, c.gamma, c.beta, c.residual, c.eps)
            # the search's rows run on the plain build, the end of every array against its
            # guard: the families' cases (every shape class they hold) ran on the hazard build
            # with both guards, and a draw here costs about a quarter of the CPU (#67)
            mm, fails = self.measure(f"search/{fam}", case, outs=self.run_target(
                f"search/{fam}", case, guard="end", hazards=False))
            r = float(mm.ratio.max()) if mm is not None and mm.ratio.size else 0.0
            stats["max_of_bound"] = max(stats["max_of_bound"], r)
            if fails:
                # the example the search shrinks to is the one reported: its figure is the
                # table's (the table showed 0.761, the largest of the passing examples, beside
                # a failure 2.04e+03x the bound)
                found["case"], found["failure"], found["m"] = case, fails[0], mm
                stats["failure_of_bound"] = r
                stats["failure_nonfinite"] = any(f.kind in ("nonfinite", "unwritten")
                                                 for f in fails)
                raise AssertionError(fails[0].detail)
            target(min(r, 1e9), label="error / sound bound")

        _not_our_constants()
        try:
            prop()
        except AssertionError:
            if "failure" not in found:
                raise
        except Flaky:
            if "failure" not in found:
                raise
        stats["failed"] = "failure" in found
        if "failure" not in found:
            return stats, None, None
        f, case, mm = found["failure"], found["case"], found["m"]
        w = self._worst(f.family, case, mm) if mm is not None else None
        if w is None:
            w = Worst(f.family, int(case.cols), 0, 0, math.inf, math.inf, math.inf,
                      [float(v) for v in case.x[0].astype(np.float64)], [], case=case.head(0))
        if f.kind in ("accuracy", "nonfinite") and mm is not None and \
                getattr(f.cause, "key", None) != "convention_named":
            f.cause = self.diagnose(case, mm)
        return stats, f, w
