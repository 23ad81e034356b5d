"""The verdict on a quantised output (fp8, int8, fp4 with its scales) under its contract.

The target runs on the quant families (normcheck.quant.families) and every value and scale is
classified (normcheck.quant.classify): exact, an *order flip* (another value a sound kernel of the
contract may write -- allowed, counted) or a *contract flip* (fails).  A fused kernel's h must
be correctly rounded.  **fail** on a contract flip of a value, a scale or amax, an unwritten
element, a wrong h, a crash, a hang, an out-of-bounds access or an exception; **pass** otherwise
-- with the share of order flips in the result.  Each contract failure is diagnosed against the
contract's variants (normcheck.quant.diagnose).  No warn.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from normcheck import formats, norms
from normcheck.causes import Cause
from normcheck.check import engine, kinds, large_index
from normcheck.check.result import QuantisedDetail
from normcheck.check.engine import Failure, assemble, check_h, odd_rows, with_notes
from normcheck.check.tolerances import TOLERANCES
from normcheck.errors import KernelRaised, invalid
from normcheck.quant import families as qfamilies, formats as qformats
from normcheck.quant.classify import (CLASSES, CONTRACT, EXACT, ORDER, UNWRITTEN, QCounts,
                                      QMeasured, ScaleShape, classify, scale_layout)
from normcheck.quant.contract import Contract
from normcheck.quant.oracle import QOracle

__all__ = ["judge_quantised", "Quantised", "FAMILIES", "QuantisedJudge", "QFamilyResult",
           "QWorst", "CLASSES"]

#: The families a quantised check runs, in order.
FAMILIES = tuple(qfamilies.QUANT_FAMILIES)


def judge_quantised(target, setup: engine.Setup, runs: engine.Runs):
    """Run the quantised check of ``target`` under ``setup.contract``; returns a
    normcheck.check.CheckResult."""
    t0 = time.perf_counter()
    contract, label = setup.contract, target.label
    judge = QuantisedJudge(target, setup)
    fams = [f for f in FAMILIES if f != "saturation" or not contract.dynamic]
    results, failures, _, worst = judge.run(fams, runs.examples)
    total_q, total_s, total_a = QCounts(), QCounts(), QCounts()
    for fr in results:
        total_q.add(fr.q)
        total_s.add(fr.scales)
        total_a.add(fr.amax)

    widths = sorted({int(c) for fr in results for c in (fr.cols or [])})
    cov = engine.Coverage()
    cov.add("families", bool(results),
            detail=f"{len(results)} families, widths {', '.join(map(str, widths))}")
    cov.padded(judge)
    # the large-index runs (#66: a quantised check made none -- the same 32-bit offsets its
    # forward sibling fails for), after the families, as a forward check makes them
    for fr, w in large_index.run_spans(judge, target, failures, cov):
        results.append(fr)
        worst = worst or w
    coverage = cov.items
    detail = QuantisedDetail(contract.as_dict(), contract.describe(), total_q.as_dict(),
                             total_s.as_dict(), total_a.as_dict(),
                             [fr.as_dict() for fr in results],
                             [p for fr in results for p in fr.saturation], coverage,
                             judge.notes or None)
    return assemble(engine.Findings(
        kernel=label, norm=judge.norm, reference=contract.name, dtype=judge.storage.name,
        out_dtype=contract.qformat.name,
        backend=getattr(getattr(judge, "target", None), "backend", None) or setup.backend,
        failures=failures, warnings=[],
        families=results, tolerance=TOLERANCES["quantised"], t0=t0, worst=worst,
        save=engine.saver(judge, worst, runs.save,
                          {**setup.desc, "quant": contract.as_dict()}, label, "quantised"),
        max_ulp=0.0, arch=setup.arch, fields={"detail": detail}))


@dataclass
class QFamilyResult(engine.FamilyOutcome):
    """A quantised family's counts: q, scales and amax classified, the rows certified."""

    q: QCounts = field(default_factory=QCounts)
    scales: QCounts = field(default_factory=QCounts)
    amax: QCounts = field(default_factory=QCounts)
    certified: int = 0
    saturation: list = field(default_factory=list)  # (row's max|y|/scale, share saturated/NaN)

    def as_dict(self) -> dict:
        return {"family": self.family, "rows": self.rows, "cols": self.cols,
                "q": self.q.as_dict(), "scales": self.scales.as_dict(),
                "amax": self.amax.as_dict(), "certified": self.certified,
                "verdict": self.verdict, "failures": self.failures, "cause": self.cause}


@dataclass
class QWorst(engine.WorstRow):
    """The row with the most contract flips (or the first order flip)."""

    detail: list

    def as_dict(self) -> dict:
        return {"family": self.family, "cols": self.cols, "row_index": self.row_index,
                "detail": self.detail}


class QuantisedJudge(large_index.Plan, engine.Judge):
    """The quantised check: the quant families under one contract, each value and scale
    classified (exact, order flip, contract flip)."""

    Result = QFamilyResult

    def __init__(self, target, setup: engine.Setup):
        """``setup``: the norm, the rows' storage (``fmt``), the ``contract``, ε, the seed and
        the widths the kernel takes."""
        super().__init__(target)
        self.norm = norms.get(setup.norm)
        self.storage = formats.get(setup.fmt)
        self.contract: Contract = setup.contract
        self.eps = np.float32(setup.eps)
        self.seed = int(setup.seed)
        self.cols_range = tuple(setup.cols_range)
        self.multiple_of = int(setup.multiple_of)
        self.padded = False  # the padded rows made (once a check), or why not in skipped
        self.skipped = []
        self.notes = []  # what the large-index runs noted

    # the large-index run (check.large_index) ----------------------------------------------------
    def refuses_large(self):
        c = self.contract
        if c.dynamic and c.granularity not in ("per_tensor", "per_token") and \
                c.scale_layout == "col_major":
            return ("its scales are laid out column-major ([groups, rows]): no window of the "
                    "last rows holds them")
        return None

    def probe_case(self, rows: int, cols: int, seed):
        return qfamilies.case("gaussian", self.norm, self.contract, self.storage, rows, cols,
                              seed=seed, eps=self.eps, weights_seed=self.seed)

    def rows_unwritten(self, outs, case):
        raw = outs.get("output")
        if raw is None or np.ndim(raw) != 2 or raw.shape[0] != case.rows:
            return None
        return np.asarray(self.contract.qformat.unwritten(raw, case.cols)).all(axis=1)

    def judge_large(self, fam, case, call):
        fr = QFamilyResult(fam, rows=case.rows, cols=[case.cols])
        m, fails = self.measure(fam, case, outs=self.run_target(fam, case, **call), **call)
        worst = None
        if m is not None:
            score = _tally(fr, m)
            if any(f.kind in ("contract", "scale", "amax") for f in fails):
                from normcheck.quant import diagnose

                fr.cause = diagnose.explain(self, case, m)
            i = int(np.argmax(score))
            if score[i] > 0:
                worst = QWorst(fam, case.cols, i, _row_detail(case, m, i), case=case.head(i))
                worst.case.extra = dict(case.extra)
        # wholly wrong: never written, or most codes off the contract (an early row's zeros)
        wrapped = any(f.kind == "unwritten" for f in fails) or (
            m is not None and m.counts.contract >= 0.5 * max(m.cls.size, 1))
        return fr, fails, worst, wrapped

    # -- one batch --------------------------------------------------------------------------------
    def run_target(self, family, case, **call):
        return super().run_target(family, case, self._oob_cause, **call)

    def _oob_cause(self, e, case):
        """A write past the end of the scales of a per-group contract: more scales a row than
        the contract's -- groups narrower than its G (a kernel built for G/2 writes twice as
        many)."""
        c = self.contract
        if e.kind != "out_of_bounds" or c.granularity != "per_group" or \
                e.details.get("access") != "write" or e.details.get("name") != "scales":
            return None
        G = c.group_size
        have = c.groups(case.cols)
        for g2 in (G // 2, G // 4):
            if g2 >= 1 and -(-case.cols // g2) > have:
                return Cause(f"groups of {g2} columns instead of {G} (the kernel writes past "
                             f"the {have} scales a row of {case.cols} columns has under the "
                             f"contract: {-(-case.cols // g2)} a row, as groups of {g2} give)",
                             "group_size", "stat", f"groups of {g2} columns instead of {G}")
        return None

    def oracle(self, case) -> QOracle:
        sc = case.extra.get("scale")
        return QOracle(self.norm, case, self.storage, scale=sc,
                       s_enc=sc if self.contract.granularity == "nvfp4" else None)

    def _decode(self, outs, case):
        """(q values, unwritten mask, scales [rows, groups], scales unwritten, amax) from a
        target's outputs."""
        c = self.contract
        fmt = c.qformat
        if "q_values" in outs:  # a callable
            q = outs["q_values"]
            s = outs.get("scale_values")
            s = None if s is None else scale_layout(c, s, case.rows)
            return q, None, s, None, None
        raw = outs.get("output")
        if raw is None:
            raise KernelRaised("the target wrote no output (q)")
        q, unw = fmt.from_storage(raw, case.cols), fmt.unwritten(raw, case.cols)
        s = unw_s = None
        if c.dynamic:
            sraw = outs.get("scales")
            if sraw is None:
                raise KernelRaised("the target wrote no scales")
            sf = qformats.get(c.scale_format)  # fp32, or e8m0/ue4m3 codes of block scales
            s = scale_layout(c, sf.from_storage(sraw), case.rows)
            unw_s = scale_layout(c, sf.unwritten(sraw).astype(np.float64), case.rows) > 0
        return q, unw, s, unw_s, outs.get("amax")

    def measure(self, family, case, outs=None, **call):
        """(QMeasured or None, [Failure]); ``call``: the launch's options (a second launch
        with another poison is made alike)."""
        if outs is None:
            outs = self.run_target(family, case, **call)
        if isinstance(outs, Failure):
            return None, [outs]
        try:
            q, unw, s, unw_s, amax = self._decode(outs, case)
        except KernelRaised as e:
            return None, [Failure("error", family, str(e))]
        except ScaleShape as e:
            return None, [Failure("scale", family, f"the kernel wrote scales of shape "
                                  f"{tuple(e.got)} for {case.rows} rows ({self.contract.granularity}"
                                  f", width {case.cols}): they cannot be laid out as the "
                                  "contract's")]
        o = self.oracle(case)
        ref = o.reference(self.contract)
        fails = []
        fmt = self.contract.qformat
        if unw is not None and unw.any():
            if fmt.kind == "float" and fmt.has_nan and not fmt.packed:
                unw &= ~np.isnan(ref.q)  # the poison is the NaN code: unwritten unless NaN is due
            if unw.any():  # the poison may be a code the kernel wrote (a NaN where none is due
                # included): a second run with another poison tells them apart
                alt = self.run_target(family, case, alternate=True, **call)
                if isinstance(alt, Failure):
                    return None, [alt]
                unw &= fmt.unwritten(alt["output"], case.cols, alternate=True)
        try:
            m = classify(ref, q, s, amax, unw if unw is not None and unw.any() else None,
                         unw_s if unw_s is not None and unw_s.any() else None)
        except ScaleShape as e:
            return None, [self._shape_failure(family, case, e)]
        if "h" in outs and ref.norm_ref is not None and getattr(ref.norm_ref, "h", None) is not None:
            fails += check_h(family, outs["h"], ref.norm_ref, case.x, case.residual)
        fails += self._failures(family, case, m)
        self.probe_undefined(family, case, fails, outs, ("contract", "scale", "amax",
                                                         "nonfinite"))
        return m, with_notes(fails, outs)

    def _shape_failure(self, family, case, e: ScaleShape) -> Failure:
        c = self.contract
        per_row = e.got[1] if len(e.got) == 2 else 1
        cause = None
        if c.group_size and per_row:  # half, twice the groups' width, or one group a row
            for g2 in sorted({c.group_size // 2, c.group_size * 2, case.cols} - {0}):
                if -(-case.cols // g2) == per_row and g2 != c.group_size:
                    cause = (Cause(f"groups of {g2} columns instead of {c.group_size}",
                                   "group_size", "formula") if g2 != case.cols else
                             Cause(f"one scale per row (per token) instead of groups of "
                                   f"{c.group_size}", "per_token_not_group", "formula"))
                    break
        return Failure("scale", family, f"the kernel wrote {per_row} scales per row where the "
                       f"contract has {e.want[1]} ({c.granularity}, width {case.cols})",
                       cause=cause)

    def _failures(self, family, case, m: QMeasured):
        out = []
        c = self.contract
        D = case.cols
        if m.counts.unwritten:
            i, j = (int(v) for v in np.argwhere(m.cls == UNWRITTEN)[0])
            out.append(Failure("unwritten", family, f"{m.counts.unwritten}/{m.cls.size} q never "
                               f"written (they still hold the poison), first at row {i}, col "
                               f"{j}, width {D}, {case.rows} rows"))
        if m.scale_counts.unwritten:
            i, j = (int(v) for v in np.argwhere(m.scale_cls == UNWRITTEN)[0])
            out.append(Failure("unwritten", family, f"{m.scale_counts.unwritten} scales never "
                               f"written, first row {i}, group {j}"))
        if m.scale_counts.contract:
            k = np.argwhere(m.scale_cls == CONTRACT)[0]
            i, j = int(k[0]), int(k[1])
            out.append(Failure(
                "scale", family, f"{m.scale_counts.contract}/{m.scale_cls.size} scales outside "
                f"what a sound kernel of the contract writes; e.g. row {i}, group {j}: "
                f"kernel={float(m.scales[i, j])!r} contract={float(m.ref.s[i, j])!r} (amax "
                f"{float(m.ref.A[i, j])!r}; sound {float(m.ref.s_lo[i, j])!r} .. "
                f"{float(m.ref.s_hi[i, j])!r})"))
        if m.amax_counts.contract:
            out.append(Failure("amax", family, f"{m.amax_counts.contract} amax values outside "
                               f"the sound range (exact {float(m.ref.A.ravel()[0])!r}, kernel "
                               f"{float(np.ravel(m.amax)[0])!r})"))
        if m.counts.contract:
            bad = m.cls == CONTRACT
            i, j = (int(v) for v in np.argwhere(bad)[0])
            fmt = c.qformat
            steps = int(fmt.steps(np.nan_to_num(m.q[i, j]), np.nan_to_num(m.ref.q[i, j])))
            out.append(Failure(
                "contract", family,
                f"{m.counts.contract}/{m.cls.size} {fmt.name} values no sound kernel of the "
                f"contract writes (flips away from a tie), order flips {m.counts.order}; e.g. "
                f"width {D}, row {i}, col {j}: x={float(case.x[i, j])!r} "
                f"kernel={float(m.q[i, j])!r} contract={float(m.ref.q[i, j])!r} "
                f"({steps} step{'s' if steps != 1 else ''}), y={float(m.ref.y[i, j])!r} "
                f"(exact t={float(m.ref.t[i, j])!r})"))
        return out

    # the families (check.engine.run_families drives these) --------------------------------------
    def plan(self, fam, examples):
        ws = qfamilies.widths(fam, self.contract, self.cols_range, self.multiple_of)
        per = odd_rows(max(1, examples // len(ws)))
        return [(per, cols) for cols in ws]

    def start(self, fam):
        st = super().start(fam)
        st.worst = None
        return st

    def step(self, st, fi, k, rows, cols):
        fam, fr = st.fr.family, st.fr
        case = qfamilies.case(fam, self.norm, self.contract, self.storage, rows, cols,
                              seed=[self.seed, fi, k], eps=self.eps, weights_seed=self.seed)
        outs = self.run_target(fam, case)
        m, fails = self.measure(fam, case, outs=outs)
        if m is not None and not self.padded and case.rows >= 2:
            # the padded rows, once a check, as a forward check makes them (#66: a quantised
            # check never did -- the same unaligned loads its forward sibling fails for)
            from normcheck.check import hazards

            self.padded = True
            f = hazards.padding(self.target, case, outs, fam, self.skipped)
            if f is not None:
                fails.append(Failure(f.kind, f.family, f.detail, cause=f.cause))
        if m is None:
            return case, None, fails
        score = _tally(fr, m)
        fr.saturation += _saturation_points(m)
        i = int(np.argmax(score))
        if st.worst is None or score[i] > st.worst[0]:
            st.worst = (int(score[i]), case, m, i)
        return case, m, fails

    def finish(self, st):
        from normcheck.quant import diagnose

        fr, fam, fam_fails, fam_worst = st.fr, st.fr.family, st.fails, st.worst
        if fam_fails:
            if fam in self.undefined:
                fr.cause = self.undefined[fam]
                for f in fam_fails:
                    f.cause = f.cause or fr.cause
            elif fam_worst is not None and any(f.kind in ("contract", "scale", "amax")
                                               for f in fam_fails):
                _, case, m, _ = fam_worst
                fr.cause = diagnose.explain(self, case, m)
                for f in fam_fails:
                    if f.kind in ("contract", "scale", "amax") and not f.cause:
                        f.cause = fr.cause
            fr.cause = fr.cause or next((f.cause for f in fam_fails if f.cause), None)
        if fam_worst is not None and (self.worst is None or fam_worst[0] > self.worst_score):
            self.worst_score, case, m, i = fam_worst
            self.worst = QWorst(fam, case.cols, i, _row_detail(case, m, i), case=case.head(i))
            self.worst.case.extra = dict(case.extra)
        return fam_fails, []


def _tally(fr: QFamilyResult, m: QMeasured) -> np.ndarray:
    """Count a batch's classes into its family's result; each row's score (contract flips of
    values and scales first, then order flips): the worst row is the highest."""
    fr.q.add(m.counts)
    fr.scales.add(m.scale_counts)
    fr.amax.add(m.amax_counts)
    fr.certified += m.ref.certified
    score = (m.cls == CONTRACT).sum(axis=1) * 1000 + (m.cls == ORDER).sum(axis=1)
    if m.scale_cls is not None:
        score = score + 1000 * (m.scale_cls == CONTRACT).sum(axis=1)
    return score


def _saturation_points(m: QMeasured):
    """Per row: (largest |y| over the scale, in units of the format's largest value; share of
    the row's q that are ±max, NaN or inf)."""
    ref = m.ref
    c = ref.contract
    fmt = c.qformat
    from normcheck.quant.oracle import multiplier
    op, mm = multiplier(c, ref.s, ref.A, s_enc=ref.s_enc)
    mm = ref.expand(np.broadcast_to(mm, (ref.y.shape[0], mm.shape[1])))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        v = np.abs(ref.y / mm if op == "div" else ref.y * mm)
        load = np.nanmax(v, axis=1) / fmt.max_finite
        sat = ((np.abs(m.q) == fmt.max_finite) | ~np.isfinite(m.q)).mean(axis=1)
    return [(float(a), float(b)) for a, b in zip(load, sat) if np.isfinite(a)]


def _row_detail(case, m: QMeasured, i, n=5):
    bad = np.nonzero(m.cls[i] != EXACT)[0][:n]
    ref = m.ref
    out = []
    for j in bad:
        out.append({"col": int(j), "x": float(case.x[i, j]), "kernel": float(m.q[i, j]),
                    "contract": float(ref.q[i, j]), "class": CLASSES[int(m.cls[i, j])],
                    "y": float(ref.y[i, j]), "t": float(ref.t[i, j])})
    if m.scales is not None:
        out.append({"scales_kernel": [float(v) for v in m.scales[i][:4]],
                    "scales_contract": [float(v) for v in ref.s[i][:4]]})
    return out



@kinds.register
class Quantised(kinds.Kind):
    """A quantised output (fp8, int8, fp4 with its scales) under its contract."""

    name = "quantised"
    precedence = 50

    @staticmethod
    def claims(backward, contract) -> bool:
        return not backward and contract is not None

    def judge(self, target, setup, runs):
        return judge_quantised(target, setup, runs)

    def check(self, r, o, progress=None):
        for name in ("rows", "reference", "out_dtype"):
            v = getattr(o, name)
            if v is not None:
                raise invalid(name, v, f"no {name} with a quantised output",
                              {"rows": "a quantised check runs its families only",
                               "reference": "the contract's y_rounding says it "
                                            "(quant.contract)",
                               "out_dtype": "quant.format is the output's format"}[name])
        roles, contract = r.spec.roles(), r.contract
        if contract.dynamic and "scales" not in roles:
            raise invalid("spec.args", roles, f"a role scales for {contract.granularity} "
                          "scales", "add [[args]] with role = \"scales\"")
        if (not contract.dynamic or contract.granularity == "nvfp4") and "scale" not in roles:
            raise invalid("spec.args", roles, "a role scale (the static scale)",
                          "add [[args]] with role = \"scale\"")
        return super().check(r, o, progress)
