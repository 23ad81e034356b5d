"""The verdict on a backward kernel: dx, dγ, dβ against their exact values.

Each family of :data:`normcheck.families.BACKWARD_FAMILIES` gives (x, dy); the weights are the
check's realistic γ; with saved statistics (the kernel reads mean/rstd) the case carries the
forward pass's correctly rounded float32 mean and rstd, as a sound forward kernel writes them.
Every output the kernel writes is compared with :func:`normcheck.oracle.backward.backward`
(the rows and their truth: normcheck.check.backward_case; the causes:
normcheck.check.backward_diagnose):

* **fail** — beyond what a sound float backward kernel can produce
  (:func:`normcheck.bounds.sound_backward`: sequential or atomic sums in any order, one final
  rounding, never below 1 ulp), non-finite where the exact value is finite, never written, or a
  crash / hang / out-of-bounds access / exception; each accuracy failure tested against the usual
  causes (γ left out, the mean term missing, the x̂ term missing, sums in the storage format,
  sums over the wrong axis ...) and the one that explains the output named, as a
  :class:`normcheck.causes.Cause` with its key (the candidate's key in :func:`_candidates`; the
  per-block-size partial reductions are one key, ``partial_reduction``);
* **warn** — within that bound, but an output's largest scaled error (in ulps of the terms it
  sums) more than k × the larger of the built-in sound strategies' on the same rows (two block
  reductions for dx; float atomics, and float partials with a float second stage, for dγ, dβ),
  k and the floor from :mod:`normcheck.check.tolerances`, its cause named where one fits;
* **pass** otherwise.

Kernels with dγ or dβ outputs are also run with the blocks (and warps) in several seeded orders
on the cpu backend: atomics then arrive in different orders, and the spread of dγ across runs
is reported in ulps — the nondeterminism a training run sees.
"""

from __future__ import annotations

import time

import numpy as np

from normcheck import bounds, formats, kernels, launch, metrics, norms, oracle, spec as specs
from normcheck import families as families_mod
from normcheck import measure as measure_mod
from normcheck.check import backward_case, engine, hazards, kinds, large_index
from normcheck.check.backward_case import Plan
from normcheck.check.backward_diagnose import explain, warn_cause
from normcheck.check.engine import ENDS_LATER_RUNS, Failure, assemble, odd_rows, with_notes
from normcheck.check.judge import FamilyResult
from normcheck.check.result import BackwardDetail
from normcheck.check.tolerances import TOLERANCES, Verdict
from normcheck.errors import invalid

__all__ = ["Backward", "BackwardJudge", "compare_role", "ORDERS_DEFAULT"]

#: Block orders of the race measurement.
ORDERS_DEFAULT = 8


def compare_role(plan: Plan, role, ref, got, E, case, fam, scale):
    """(Failure or None, stats) of one output (normcheck.measure), under the tolerance of its
    format: stats has max_ulp, p99_ulp, max_scaled, of_bound."""
    tol = TOLERANCES[ref.fmt.name]
    got = np.asarray(got)
    fmt = ref.fmt
    if got.dtype != fmt.dtype:
        got = fmt.cast(got.astype(np.float64))
    m = measure_mod.measure(ref, got, E=E, floor=tol.fail_floor, scale=scale,
                            poison=formats.poison_bits(got.dtype))
    st = {"max_ulp": m.max_ulp if m.n else 0.0, "p99_ulp": 0.0,
          "max_scaled": m.max_scaled, "of_bound": m.max_ratio}
    st["p99_ulp"] = metrics.ulp_stats(m.ulp.ravel())[1]
    if m.unwritten:
        i = np.argwhere(launch.unwritten(got))[0]
        st.update(max_ulp=np.inf, of_bound=np.inf)
        return (Failure("unwritten", fam, f"{role}: {m.unwritten}/{got.size} elements never "
                        f"written, first at {tuple(int(v) for v in i)}", output=role), st)
    a = got.astype(np.float64)
    t = ref.exact
    bad_nf = ~np.isfinite(a) & np.isfinite(ref.rounded.astype(np.float64))
    if bad_nf.any():
        i = tuple(int(v) for v in np.argwhere(bad_nf)[0])
        st["of_bound"] = np.inf
        return (Failure("nonfinite", fam, f"{role}: {int(bad_nf.sum())} non-finite where the "
                        f"exact value is finite, e.g. at {i}: kernel={float(a[i])!r} "
                        f"exact={float(t[i])!r}", output=role), st)
    if not m.over:
        return None, st
    k = np.unravel_index(m.argmax_ratio, got.shape)
    limit = bounds.sound_limit(_Scaled(ref, scale), E, tol.fail_floor)
    lim_ulp = float(limit[k] / fmt.ulp_array(np.abs(t[k])))
    cause = explain(plan.norm, case, role, a, ref, limit, fmt if role not in specs.ROW_GRADS
                    else formats.of_dtype(case.x.dtype), plan.eps)
    where = f"{case.rows}x{case.cols}"
    return (Failure("accuracy", fam,
                    f"{role}: {m.over}/{got.size} elements beyond what a sound kernel can "
                    f"produce; worst " + measure_mod.mismatch(
                        f"at {tuple(int(v) for v in k)} of {where}", a[k], t[k]) +
                    f", {float(m.ulp[k]):.4g} ulp where the sound bound allows {lim_ulp:.4g} "
                    f"({metrics.times_bound(m.max_ratio)}x)",
                    cause=cause, output=role), st)


class _Scaled:
    """A reference with the backward's own scale (the terms an output sums)."""

    def __init__(self, ref, scale):
        self.fmt, self.exact, self.scale = ref.fmt, ref.exact, scale


def _baseline(norm, case, roles, refs, fm, backend, mode):
    """{role: [(built-in, its values)]}: the built-in sound strategies on the same rows (two
    block reductions for dx; float atomics, and float partials with a float second stage, for
    dγ, dβ), each answer rounded to the kernel's output format -- the yardstick of warn is the
    larger of their errors (a sound kernel is as good as the common strategies)."""
    base = norms.get(norm.base)
    if base.gemma or mode == "y":
        return {}
    st = formats.of_dtype(case.x.dtype).name
    mean, rstd = case.mean, case.rstd
    if rstd is None:
        mean, rstd = oracle.saved_statistics(base, case.x, eps=case.eps)
    out = {}
    g = case.gamma if case.gamma is not None else np.ones(case.cols, case.x.dtype)
    if any(r in roles for r in specs.ROW_GRADS):
        v = kernels.get(f"{base.name}_backward_dx_stable_{st}")
        dx = kernels.run_backward_dx(v, case.x, case.dy, g.astype(case.x.dtype), mean, rstd,
                                     backend=backend).astype(np.float64)
        if "dh" in case.extra:
            dx = dx + case.extra["dh"].astype(np.float64)
        out["dx"] = out["d_residual"] = [(v.name, dx)]
    if any(r in roles for r in specs.PARAM_GRADS):
        for algo in ("partial", "atomic"):
            v = kernels.get(f"{base.name}_backward_dparams_{algo}_{st}")
            dg, db = kernels.run_backward_dparams(v, case.x, case.dy, mean, rstd,
                                                  backend=backend)
            out.setdefault("dgamma", []).append((v.name, dg.astype(np.float64)))
            if db is not None:
                out.setdefault("dbeta", []).append((v.name, db.astype(np.float64)))
    return out


def _scaled_max(ref, vals, scale):
    fmt = ref.fmt
    a = fmt.round_array(vals)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        sc = np.abs(a - ref.exact) / fmt.ulp_array(np.maximum(scale, np.abs(ref.exact)))
    sc = sc[np.isfinite(sc)]
    return float(sc.max()) if sc.size else 0.0


def _spread(outs_runs, fmt):
    """max over elements of (max - min) across runs, in ulps of the result."""
    a = np.stack([o.astype(np.float64) for o in outs_runs])
    with np.errstate(invalid="ignore"):
        d = a.max(axis=0) - a.min(axis=0)
        u = fmt.ulp_array(np.abs(a).max(axis=0))
        s = np.where(d == 0, 0.0, d / u)
    return float(np.nanmax(s)) if s.size else 0.0


@kinds.register
class Backward(kinds.Kind):
    """dx (and dγ, dβ, the residual stream's gradient) of a backward kernel."""

    name = "backward"
    precedence = 10

    @staticmethod
    def claims(backward, contract) -> bool:
        return backward

    def check(self, r, o, progress=None):
        orders = ORDERS_DEFAULT if o.orders is None else o.orders
        if isinstance(orders, bool) or not isinstance(orders, int) or not 0 <= orders <= 64:
            raise invalid("orders", orders, "0 to 64 block orders for the race measurement")
        every = families_mod.BACKWARD_FAMILIES
        fams = list(every) if o.families is None else list(o.families)
        for f in fams:
            if f not in every:
                raise invalid("families", f, f"some of {', '.join(every)}")
        fams = [f for f in every if f in fams]  # in the table's order
        spec, n, fmt, target = r.spec, r.norm, r.fmt, r.target
        fm = target.formats
        mode = "y" if spec.has("y") else "x"
        plan = Plan(norm=n, fmt=fmt, formats=fm, mode=mode, eps=r.eps,
                    stats="saved" if mode == "y" else (spec.stats or "recomputed"),
                    reads_gamma=spec.has("gamma"))
        t0 = time.perf_counter()
        judge = BackwardJudge(r, plan, o.seed, orders)
        results, failures, warnings = engine.run_families(judge, fams, o.examples)
        cov = engine.Coverage()  # every run the check owes, made or not and why (#66)
        widths = sorted({int(c) for fr in results for c in (fr.cols or [])})
        cov.add("families", bool(results), detail=f"{len(results)} families "
                f"({', '.join(fr.family for fr in results)}), widths "
                f"{', '.join(map(str, widths))}")
        caps = getattr(target, "capabilities", None)
        cov.add("hazard build", bool(caps and caps.hazards),
                why=None if caps and caps.hazards else "the backend has none (races and exact "
                "shared bounds are the cpu backend's CUDA C build's)")
        cov.add("block orders", bool(judge.races),
                detail=f"dγ/dβ in {orders} seeded block orders" if judge.races else None,
                why=None if judge.races else
                "no dγ or dβ output" if not any(g in judge.roles for g in specs.PARAM_GRADS)
                else "--orders 0" if not orders else
                "the backend runs no other block order" if not (caps and caps.block_orders)
                else "no gaussian, tall or tiles case ran")
        cov.padded(judge)
        for fr, _ in large_index.run_spans(judge, target, failures, cov):
            results.append(fr)
        save = engine.saver(judge, judge.worst, o.save_counterexample,
                            {**r.desc, "backward": {"stats": plan.stats, "mode": mode}},
                            target.label, "backward", verdicts=("fail", "warn"))
        return assemble(engine.Findings(
            kernel=target.label, norm=n, norm_desc=n.describe() + " backward",
            reference="exact", dtype=fmt.name,
            out_dtype=fm.get("dx", fm.get("d_residual", fmt)).name,
            backend=getattr(target, "backend", None) or r.backend,
            failures=failures, warnings=warnings, families=results,
            tolerance=TOLERANCES[fm.get("dx", fmt).name], t0=t0, save=save,
            key=lambda f: (f.kind, f.family, f.output),  # one per output (dx, dgamma, dbeta)
            fields=dict(baseline_note="backward: fail beyond the sound backward bound "
                        "(normcheck.bounds.sound_backward); warn beyond k x the built-in "
                        "strategies' on the same rows; statistics " + plan.stats
                        + ("; x̂ from y" if mode == "y" else ""),
                        detail=BackwardDetail(judge.roles, plan.stats, mode, judge.races,
                                              orders, o.seed, cov.items,
                                              judge.notes or None))))


class BackwardJudge(large_index.Plan, engine.Judge):
    """The backward check's side of check.engine.run_families: each family's widths at one row
    count, every output (dx, dγ, dβ ...) measured against its own sound bound and the built-in
    strategies' error, and on the cpu backend dγ's and dβ's spread over seeded block orders."""

    Result = FamilyResult

    def __init__(self, r, plan: Plan, seed: int, orders: int):
        """``r``: the resolved kernel (normcheck.check.resolve.Resolved); ``plan`` its rows'
        and truth's traits; ``orders`` block orders of the race measurement."""
        super().__init__(r.target)
        self.truth, self.be, self.seed, self.orders = plan, r.backend, seed, orders
        self.n, self.fmt, self.fm = plan.norm, plan.fmt, plan.formats
        self.roles = [role for role in specs.GRADS if r.spec.has(role)]
        self.lo, self.hi = r.spec.cols
        self.multiple = max(1, r.spec.cols_multiple_of)
        #: a family's place in BACKWARD_FAMILIES seeds its rows, whichever families run
        self.index = {f: i for i, f in enumerate(families_mod.BACKWARD_FAMILIES)}
        self.races = {}
        self.cols_range, self.multiple_of = (self.lo, self.hi), self.multiple
        self.padded = False  # the padded rows made (once a check), or why not in skipped
        self.skipped = []
        self.notes = []  # what the large-index runs noted

    # the large-index run (check.large_index): the row gradients of the last rows ----------------
    def probe_case(self, rows: int, cols: int, seed):
        return backward_case.case(self.truth, "gaussian", rows, cols, list(seed))

    def rows_unwritten(self, outs, case):
        role = next((r for r in specs.ROW_GRADS if r in outs), None)
        if role is None or np.shape(outs[role]) != (case.rows, case.cols):
            return None
        return launch.unwritten(outs[role]).all(axis=1)

    def refuses_large(self):
        if not any(r in self.roles for r in specs.ROW_GRADS):
            return "no row gradient (dx) to measure on the last rows"
        return None

    def judge_large(self, fam, case, call):
        """dx (and the residual stream's gradient) of the last rows; dγ and dβ sum every row,
        of which only the last ran: not measured here."""
        fr = FamilyResult(fam, rows=case.rows, cols=[case.cols])
        outs = self.run_target(fam, case, **call)
        if isinstance(outs, Failure):
            return fr, [outs], None, False
        plan = self.truth
        ref = backward_case.reference(plan, case)
        E = backward_case.sound_bounds(plan, case, ref)
        scale = backward_case.term_scales(plan, case)
        fails, wrapped = [], False
        for role in specs.ROW_GRADS:
            if role not in self.roles or role not in outs:
                continue
            f, rs = compare_role(plan, role, ref.dx, outs[role], E[role], case, fam,
                                 scale[role])
            fr.max_ulp = max(fr.max_ulp, rs["max_ulp"])
            fr.max_scaled = max(fr.max_scaled, rs["max_scaled"])
            fr.max_of_bound = max(fr.max_of_bound, rs["of_bound"])
            if f is not None:
                fails += with_notes([f], outs)
                fr.cause = fr.cause or f.cause
                wrapped = wrapped or f.kind == "unwritten" or (
                    f.kind in ("accuracy", "nonfinite") and rs["of_bound"] >= 16)
        return fr, fails, None, wrapped

    def plan(self, fam, examples):
        fam_rows, widths = families_mod.BACKWARD_FAMILIES[fam][1]
        m = self.multiple
        ws = sorted({min(max(w, self.lo), self.hi) // m * m or m for w in widths})
        rows = fam_rows or odd_rows(max(1, examples))
        return [(rows, cols) for cols in ws]

    def start(self, fam):
        st = super().start(fam)
        st.stats_by_role, st.base_by_role, st.last = {}, {}, None
        return st

    def step(self, st, fi, k, rows, cols):
        n, fm, plan, fam = self.n, self.fm, self.truth, st.fr.family
        case = backward_case.case(plan, fam, rows, cols, [self.seed, self.index[fam], k])
        outs = self.run_target(fam, case)
        if isinstance(outs, Failure):
            return case, None, [outs]  # the loop keeps the launch that faulted
        ref = backward_case.reference(plan, case)
        E = backward_case.sound_bounds(plan, case, ref)
        scale = backward_case.term_scales(plan, case)
        refs = {"dx": ref.dx, "d_residual": ref.dx, "dgamma": ref.dgamma, "dbeta": ref.dbeta}
        st.last = (case, outs, refs, E)
        base = _baseline(n, case, [role for role in self.roles if role in outs], refs, fm,
                         self.be, plan.mode)
        fails = []
        for role in self.roles:
            r_ref = refs[role]
            if r_ref is None or role not in outs:
                continue
            f, rs = compare_role(plan, role, r_ref, outs[role], E[role], case, fam, scale[role])
            acc = st.stats_by_role.setdefault(role, {"max_ulp": 0.0, "p99_ulp": 0.0,
                                                     "max_scaled": 0.0, "of_bound": 0.0})
            for key in acc:
                acc[key] = max(acc[key], rs[key])
            for name, vals in base.get(role, ()):
                prev = st.base_by_role.get(role, (name, 0.0))
                e = _scaled_max(r_ref, vals, scale[role])
                if e >= prev[1]:
                    st.base_by_role[role] = (name, e)
            if f is not None:
                fails.extend(with_notes([f], outs))
                if f.cause and not st.fr.cause:
                    st.fr.cause = f.cause
                if self.worst is None:
                    self.worst = engine.WorstRow(fam, cols, 0, case=case)
        if not self.padded and rows >= 2:
            # the padded rows, once a check, as a forward check makes them (#66: a backward
            # check made none); the row gradients compared (dγ's atomics may sum in another
            # order)
            self.padded = True
            f = hazards.padding(self.target, case, {r: outs[r] for r in specs.ROW_GRADS
                                                    if r in outs}, fam, self.skipped)
            if f is not None:
                fails.append(Failure(f.kind, f.family, f.detail, cause=f.cause))
        if self.orders and any(out in outs for out in specs.PARAM_GRADS) and \
                self.be.capabilities.block_orders and fam in ("gaussian", "tall", "tiles"):
            runs = {out: [] for out in specs.PARAM_GRADS if out in outs}
            for s_ in range(self.orders):  # every order seeded: the spread is reproducible
                o = self.target(case, schedule="random", seed=self.seed * 1000 + s_ + 1,
                                workers=1)
                for out in runs:
                    runs[out].append(o[out])
            for out, vals in runs.items():
                self.races[f"{out} {fam} {rows}x{cols}"] = _spread(
                    vals, formats.of_dtype(np.asarray(vals[0]).dtype))
        return case, outs, fails

    def finish(self, st):
        fr, fam, warnings = st.fr, st.fr.family, []
        outputs = {}
        for role, rs in st.stats_by_role.items():
            d = dict(rs)
            if role in st.base_by_role:
                refs = st.last[2] if st.last is not None else {}
                tol = TOLERANCES[refs[role].fmt.name] if refs.get(role) is not None else None
                name, bmax = st.base_by_role[role]
                d["baseline"] = {"name": name, "max_scaled": bmax}
                if tol is not None:
                    d["warn_at"] = max(tol.warn_floor, tol.warn_k * bmax)
            outputs[role] = d
        fr.outputs = outputs
        fr.max_ulp = max([d["max_ulp"] for d in outputs.values()] + [0.0])
        fr.p99_ulp = max([d["p99_ulp"] for d in outputs.values()] + [0.0])
        fr.max_scaled = max([d["max_scaled"] for d in outputs.values()] + [0.0])
        fr.max_of_bound = max([d["of_bound"] for d in outputs.values()] + [0.0])
        if not fr.failures:
            over = [(role, d) for role, d in outputs.items()
                    if "warn_at" in d and d["max_scaled"] > d["warn_at"]]
            if over:
                fr.verdict = Verdict.WARN
                role, d = over[0]
                case, outs, refs, E = st.last
                self.worst = self.worst or engine.WorstRow(fam, case.cols, 0, case=case)
                cause = warn_cause(self.n, case, role, outs, refs, self.truth.eps)
                fr.cause = fr.cause or cause
                warnings.append(Failure(
                    "warn", fam, f"{role}: max {d['max_scaled']:.4g} ulp (of the terms summed) "
                    f"is {d['max_scaled'] / max(d['baseline']['max_scaled'], 1e-300):.3g}x the "
                    f"built-in strategies' ({d['baseline']['name']}: "
                    f"{d['baseline']['max_scaled']:.4g}) and above the warn level "
                    f"{d['warn_at']:.4g}; within the sound bound ({metrics.times_bound(d['of_bound'])} of it)",
                    cause=cause, output=role))
        return st.fails, warnings

    def stop(self, failures) -> bool:
        """Only a hang or a sandbox break ends the check (#66: any fault did -- a second bug in
        another family was never seen); a family whose launch faulted ends there."""
        return any(f.kind in ENDS_LATER_RUNS for f in failures)
