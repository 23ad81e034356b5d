"""The result of a check: its verdict, the measurements behind it, and how to replay it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from normcheck import cases
from normcheck.check.render import render
from normcheck.check.tolerances import Tolerance, Verdict
from normcheck.metrics import to_json

__all__ = ["CheckResult", "ForwardDetail", "BackwardDetail", "QuantisedDetail"]


# -- what each kind of check adds to its result (typed; JSON keeps its keys) -------------------------
@dataclass
class ForwardDetail:
    """A forward check's: the process's peak memory, per-family spreads of a nondeterministic
    kernel, what launches noted."""

    kind = "forward"
    peak_rss_mib: float = 0.0
    nondeterministic: dict | None = None
    notes: list | None = None
    #: every run the check owes, made or not and why (normcheck.check.engine.Coverage)
    coverage: list | None = None

    def as_dict(self) -> dict:
        return {"peak_rss_mib": self.peak_rss_mib,
                **({"nondeterministic": self.nondeterministic} if self.nondeterministic
                   else {}), **({"notes": self.notes} if self.notes else {}),
                **({"coverage": self.coverage} if self.coverage else {})}


@dataclass
class BackwardDetail:
    """A backward check's: the outputs judged, the statistics, the mode, the spread of the
    block orders tried (ulp per output), how many orders and their seed."""

    kind = "backward"
    outputs: list
    stats: str
    mode: str
    races_ulp: dict
    orders: int
    seed: int
    coverage: list | None = None  # every run the check owes, made or not and why (#66)
    notes: list | None = None     # what the launches noted (the large-index runs')

    def as_dict(self) -> dict:
        d = asdict(self)
        cov, notes = d.pop("coverage"), d.pop("notes")
        return {"backward": d, **({"coverage": cov} if cov else {}),
                **({"notes": notes} if notes else {})}


@dataclass
class QuantisedDetail:
    """A quantised check's: the contract, and the values, scales and amax measured."""

    kind = "quantised"
    contract: dict
    describe: str
    values: dict
    scales: dict
    amax: dict
    families: list
    saturation: list
    coverage: list | None = None  # every run the check owes, made or not and why (#66)
    notes: list | None = None     # what the launches noted (the large-index runs')

    def as_dict(self) -> dict:
        d = asdict(self)
        cov, notes = d.pop("coverage"), d.pop("notes")
        return {"quant": d, **({"coverage": cov} if cov else {}),
                **({"notes": notes} if notes else {})}


@dataclass
class CheckResult:
    kernel: str
    norm: str
    norm_desc: str
    reference: str
    dtype: str
    out_dtype: str
    backend: str
    verdict: Verdict
    max_ulp: float
    rows_checked: int
    failures: list
    warnings: list
    families: list
    worst: object | None  # check.judge.Worst (check.quantised.QWorst): the worst row found
    tolerance: Tolerance
    seconds: float
    baseline_note: str | None = None
    counterexample: str | None = None
    search: dict | None = None
    provenance: dict | None = None
    cause: str | None = None
    detail: ForwardDetail | BackwardDetail | QuantisedDetail = field(
        default_factory=ForwardDetail)
    yardstick: bool = True  # a built-in kernel measured beside it (warn's rule); False: none
    interrupted: str | None = None  # Ctrl-C: the run during which it came (no verdict then)

    @property
    def kind(self) -> str:
        """forward, backward or quantised: which check made it."""
        return self.detail.kind

    @property
    def extra(self) -> dict:
        """The detail as the JSON has it ({"backward": {...}}, {"quant": {...}}, or the forward
        check's keys)."""
        return self.detail.as_dict()

    @property
    def passed(self) -> bool:
        """True for pass and warn (a warn is within what a sound kernel can produce)."""
        return self.verdict != "fail"

    @property
    def of_bound(self) -> float | None:
        """The verdict's own measure: the largest error over the sound bound on any family
        (above 1 fails; inf where an output is non-finite or unwritten); None for a check
        without one (quantised)."""
        vals = []
        for f in self.families:
            fails = getattr(f, "failures", {}) or {}
            if fails.get("nonfinite") or fails.get("unwritten"):
                return float("inf")
            ob = getattr(f, "max_of_bound", None)
            outs = getattr(f, "outputs", None) or {}
            vals += [ob] if ob is not None and not outs else \
                [d.get("of_bound") for d in outs.values() if d and d.get("of_bound") is not None]
        s = self.search or {}
        if s.get("failed"):
            vals.append(float("inf") if s.get("failure_nonfinite") else s.get("failure_of_bound"))
        vals = [float(v) for v in vals if v is not None]
        return max(vals) if vals else None

    def exit_code(self, strict: bool = False) -> int:
        """0 pass and warn, 1 fail (``strict``: warn too); 130 where it was interrupted and
        nothing failed (what ran is no verdict)."""
        if self.verdict == "fail" or (strict and self.verdict == "warn"):
            return 1
        return 130 if self.interrupted else 0

    def as_dict(self) -> dict:
        t = self.tolerance
        return {"verdict": self.verdict, **({"interrupted": self.interrupted}
                                            if self.interrupted else {}),
                # the verdict's measure first: the largest error over the sound bound (above
                # 1 fails); max_ulp is in ulps of each element's own exact value, which a sound
                # kernel makes large where the exact value is near zero
                "of_bound": self.of_bound, "kernel": self.kernel, "norm": self.norm,
                "reference": self.reference, "dtype": self.dtype, "out_dtype": self.out_dtype,
                "backend": self.backend, "max_ulp": self.max_ulp,
                "max_ulp_is": "the largest error in ulps of each element's own exact value, "
                              "y's and (a fused kernel) h's "
                              "(large near zero for a sound kernel too): of_bound is the "
                              "verdict's measure",
                "rows_checked": self.rows_checked, "cause": self.cause,
                "cause_key": getattr(self.cause, "key", None),
                "failures": [f.as_dict() for f in self.failures],
                "warnings": [f.as_dict() for f in self.warnings],
                "worst": self.worst.as_dict() if self.worst else None,
                "families": [f.as_dict() for f in self.families],
                "tolerance": {"fail_floor_ulp": t.fail_floor, "warn_k": t.warn_k,
                              "warn_floor_ulp": t.warn_floor, "reason": t.reason,
                              "fail_bound": "normcheck.bounds.sound_bound"},
                "baseline_note": self.baseline_note, "search": self.search,
                "counterexample": self.counterexample,
                "replay": cases.command(self.counterexample) if self.counterexample else None,
                "provenance": self.provenance, "seconds": self.seconds,
                **self.detail.as_dict()}

    def to_json(self) -> str:
        return to_json(self.as_dict())

    def render(self) -> str:
        return render(self)
