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

import math

import numpy as np

from normcheck import families, formats, launch, metrics, oracle
from normcheck import measure as measure_mod
from normcheck.check import diagnose, engine, hazards, large_index
from normcheck.check.forward_measure import (CHECK_FAMILIES, WEIGHTS_FAMILY, FamilyResult,
                                             Measure, Measured, Worst,
                                             wrapped_offset, element_text)
from normcheck.check.long_run import LongRun
from normcheck.check.engine import FATAL, Failure, odd_rows
from normcheck.check.search import Search
from normcheck.check.tolerances import TOLERANCES, Verdict
from normcheck.check.yardstick import Baseline, Yardstick
from normcheck.launch import Case

__all__ = ["CHECK_FAMILIES", "Baseline", "Worst", "FamilyResult", "ForwardJudge",
           "element_text"]



class ForwardJudge(Yardstick, Measure, Search, LongRun, large_index.Plan, engine.Judge):
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
        return fr, fails, worst, wrapped_offset(m, fails)


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

