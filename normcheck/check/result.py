"""The result of a check: its verdict, the measurements behind it, and how to replay it."""

from __future__ import annotations

from dataclasses import dataclass, field

from normcheck import cases
from normcheck.check.render import render, render_quantised
from normcheck.check.tolerances import Tolerance
from normcheck.metrics import to_json

__all__ = ["CheckResult"]


@dataclass
class CheckResult:
    kernel: str
    norm: str
    norm_desc: str
    reference: str
    dtype: str
    out_dtype: str
    backend: str
    verdict: str                       # pass | warn | fail
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
    extra: dict = field(default_factory=dict)
    yardstick: bool = True  # a built-in kernel measured beside it (warn's rule); False: none

    @property
    def passed(self) -> bool:
        """True for pass and warn (a warn is within what a sound kernel can produce)."""
        return self.verdict != "fail"

    def exit_code(self, strict: bool = False) -> int:
        """0 pass and warn, 1 fail (``strict``: warn too)."""
        return 1 if self.verdict == "fail" or (strict and self.verdict == "warn") else 0

    def as_dict(self) -> dict:
        t = self.tolerance
        return {"verdict": self.verdict, "kernel": self.kernel, "norm": self.norm,
                "reference": self.reference, "dtype": self.dtype, "out_dtype": self.out_dtype,
                "backend": self.backend, "max_ulp": self.max_ulp,
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
                "provenance": self.provenance, "seconds": self.seconds, **self.extra}

    def to_json(self) -> str:
        return to_json(self.as_dict())

    def render(self) -> str:
        if self.extra and self.extra.get("quant"):
            return render_quantised(self)
        return render(self)
