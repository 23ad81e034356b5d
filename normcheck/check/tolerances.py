"""What the check allows, as data: one entry per output format, each with its reason.

Three verdicts (normcheck.check):

* **fail** -- an element beyond what any sound kernel could produce on that row: the sound bound
  of :func:`normcheck.bounds.sound_bound` (a float-accumulating two-pass, Welford or RMS kernel
  with the worst summation order and one rounding to the output format), never below
  ``fail_floor`` ulps; or a non-finite answer for a finite exact value, an element never
  written, a crash, an out-of-bounds or misaligned access, a deadlock, a timeout, a sandbox
  violation, an exception;
* **warn** -- within the sound bound everywhere, but a family's largest error (in ulps of
  max(|γx̂|, |β|)) is more than ``warn_k`` times the best built-in order's on the same rows and
  above ``warn_floor`` ulps;
* **pass** -- otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Verdict", "Tolerance", "TOLERANCES", "STATISTICS", "BiasRule", "BIAS"]


class Verdict(StrEnum):
    """The three verdicts (module docstring); each equals its name as a string."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"

    @classmethod
    def of(cls, failures, warnings) -> "Verdict":
        """fail with any failure, else warn with any warning, else pass."""
        return cls.FAIL if failures else (cls.WARN if warnings else cls.PASS)


@dataclass(frozen=True)
class Tolerance:
    fail_floor: float   # ulps of max(|t|, |γx̂|, |β|) below which nothing fails
    warn_k: float       # warn beyond warn_k × the best built-in order's error ...
    warn_floor: float   # ... when also above this many ulps
    reason: str


TOLERANCES = {
    "fp32": Tolerance(
        1.0, 4.0, 8.0,
        "the sound bound grows with the row (a sequential float sum of D terms carries D·u of "
        "relative error), so on ill-conditioned fp32 rows it allows thousands of ulps; a kernel "
        "more than 4x less accurate than the best built-in order (equally sound orders differ "
        "2-4x: one order's luck) and above 8 ulps (a block sum of D <= 8192 terms carries "
        "~(D/256 + 8)u) is worth a look"),
    "fp16": Tolerance(
        1.0, 2.0, 1.0,
        "float arithmetic is 2^13 times finer than fp16: a sound kernel rounds a value within a "
        "few float ulps of exact, i.e. about half an fp16 ulp, so anything above 1 ulp -- rstd or "
        "x̂ rounded to fp16, D-1, an extra rounding -- fails wherever the bound is that tight"),
    "bf16": Tolerance(
        1.0, 2.0, 1.0,
        "as fp16, with float 2^16 times finer than bf16"),
    "quantised": Tolerance(
        0.0, 0.0, 0.0,
        "a quantised value is exact, an order flip (the exact value within the sound bound of "
        "a rounding boundary: any sound kernel of the contract may land on either side) or a "
        "contract flip; one fp8 step is 12.5%, so no ulp tolerance is meaningful and no warn "
        "level either (normcheck.quant.classify)"),
}

#: mean and rstd outputs: float32 results of float arithmetic (a division, a square root).
STATISTICS = Tolerance(
    2.0, 0.0, 0.0,
    "mean = Σx/D and rstd = rsqrt(var + ε) each end in a rounding or two of float arithmetic: "
    "2 float ulps, or the sound bound of the statistics where that is larger")


@dataclass(frozen=True)
class BiasRule:
    """When a family's mean signed error toward zero (normcheck.measure.Bias) fails."""

    min_elements: int     # below this many elements the mean is not judged
    max_mean: float       # |mean| in ulps beyond which a store is not rounding to nearest ...
    z: float              # ... when also this many standard errors (of the row means) from 0
    formats: tuple        # the output formats it judges
    reason: str

    def fails(self, fmt_name: str, bias) -> bool:
        return (fmt_name in self.formats and bias.n >= self.min_elements
                and abs(bias.mean) > self.max_mean and abs(bias.mean) > self.z * bias.stderr)


#: A rounding bias: what round to nearest of any sound order cannot produce.
BIAS = BiasRule(
    10_000, 0.25, 6.0, ("fp16", "bf16"),
    "a 16-bit output is rounded from a float value within ~2^-24 relative of exact -- far "
    "below half its unit (2^-11, 2^-8) -- so under round to nearest its signed error is that "
    "rounding's: uniform in ±0.5 ulp, mean near 0; truncation and round toward zero give "
    "+0.5.  Measured (tests/test_no_tolerance.py, normcheck bench bias): the sound 16-bit "
    "built-ins stay within ±0.10 on every check family -- the most on Gemma's bf16 constant "
    "rows, where every element of a row sits at the same place against the grid -- and within "
    "±0.014 on every batch of a 10^6-row long run; a __float2bfloat16_rz or bit-shift store "
    "reaches +0.5.  0.25 is halfway; 6 standard errors of the row means (rows, not elements, "
    "are the independent draws) keep a handful of rows out (sound kernels reach z = 17 on "
    "structured rows, so z alone would not do); 10^4 elements are a few rows.  fp32 outputs "
    "are measured and reported, not judged: "
    "their own float error (several ulps, and a GPU's approximate rsqrtf, biased by up to "
    "2 ulps) swamps half an ulp of rounding")
