r"""What a quantised normalisation promises: a small declarative contract.

A norm that ends in a quantiser writes q (fp8, int8, fp4 codes) and, unless its scale is a
static input, the scales it used.  Projects disagree on how; a :class:`Contract` names every
choice, so that one exact result exists per contract and a kernel is judged by its own::

    t        = γ·x̂ + β                    the normalised row (of x + residual: exactly, or of the
                                          sum rounded to T -- ``residual``)
    y        = t | round_T(t) | round_T(round_T(x̂)·γ)          ``y_rounding`` none | once | twice
    A        = max |y| over the group     (``amax_from`` "y"; "fp32": over t, before rounding)
    A'       = min(max(A, amax_floor), amax_cap)   (``amax_floor_in`` "storage": the floor
                                          rounded to T, a kernel's ``T amax = 1e-6f``)
    s        = max(fl32(A'/qmax), scale_floor)        ``scale`` "amax/qmax"
               max(fl32(A'·fl32(1/qmax)), scale_floor) ``scale`` "amax*rcp_qmax"
               then, with ``pow2`` "ceil", the next power of two up (an e8m0 scale); "floor"
               the power of two at or below (the OCP MX rule 2^(floor(log2 amax) - emax) with
               qmax = 2^emax)
    v        = fl32(y / s)                            ``apply`` "div"
               fl32(y · fl32(1/s))                    ``apply`` "mul_inv"
               fl32(y · s)                            ``apply`` "mul" (a static multiplier)
               fl32(y · min(fl32(qmax/A'), cap))      ``apply`` "mul_qmax_over_amax"
    q        = Q(v)   ``saturation`` "clamp": fmax(-M, fmin(v, M)) then round (NaN -> +M; M the
                      format's largest value, or ``clamp`` where given);
                      "satfinite": round, ±M beyond (the .satfinite cvt, NaN stays NaN);
                      "none": round, NaN (e4m3) or inf (e5m2) beyond

``granularity``: "per_tensor" (a static scale, an input), "per_token" (one s per row),
"per_group" (one per ``group`` columns of a row, the last group short), "mx" (an e8m0 scale per
32, ``pow2`` "ceil"), "nvfp4" (e2m1 values, a ue4m3 scale per 16 and a per-tensor fp32 encode
scale S_enc given as input: s_b = ue4m3(A·fl32(S_enc·fl32(1/6))), v = y·fl32(1/fl32(s_b·
fl32(1/S_enc))) -- the formulas of TransformerEngine's core_nvfp4.cuh).  Without a rounding
intermediate (``y_rounding`` none), every product is an exact real product in the contract's
exact result; a kernel's float pipeline is judged against it within the sound bound.

Presets (:data:`PRESETS`) follow the public kernels whose code was read; each entry names the
file, and fields not stated there keep the defaults.  ``exact`` and ``hf`` are the definitions
of normcheck's unquantised references in the same vocabulary (y rounded once, or x̂ rounded to T
and then times γ), ending in the exact scale and quantiser.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from normcheck.errors import invalid
from normcheck.quant import formats as qformats

__all__ = ["Contract", "PRESETS", "GRANULARITIES", "preset", "resolve", "REFERENCE_ROUNDING",
           "FIELDS"]

GRANULARITIES = ("per_tensor", "per_token", "per_group", "mx", "nvfp4")
_CHOICES = {
    "granularity": GRANULARITIES,
    "residual": ("exact", "stored"),
    "y_rounding": ("none", "once", "twice"),
    "amax_from": ("y", "fp32"),
    "scale": ("amax/qmax", "amax*rcp_qmax"),
    "pow2": ("none", "ceil", "floor"),
    "amax_floor_in": ("fp32", "storage"),
    "apply": ("div", "mul_inv", "mul", "mul_qmax_over_amax"),
    "saturation": ("clamp", "satfinite", "none"),
    "scale_layout": ("row_major", "col_major"),
}
_FLT_EPS = float(np.finfo(np.float32).eps)   # 0x1p-23
_F32_1E6 = float(np.float32(1e-6))           # TensorRT-LLM's amax start, 1e-6f


@dataclass(frozen=True)
class Contract:
    """One quantised output's definition (module docstring).  Numbers are float64 values of
    the float32 constants the kernels use."""

    name: str = "custom"
    format: str = "e4m3"
    granularity: str = "per_token"
    group: int = 0                     # per_group: columns per scale (mx 32, nvfp4 16)
    residual: str = "exact"
    y_rounding: str = "once"
    amax_from: str = "y"
    scale: str = "amax/qmax"
    qmax: float | None = None          # default: the format's largest value
    amax_floor: float = 0.0
    amax_floor_in: str = "fp32"        # "storage": amax starts at the floor rounded to T
    amax_cap: float | None = None      # vLLM's scale_ub
    scale_floor: float = 0.0
    pow2: str = "none"
    apply: str = "div"
    multiplier_cap: float | None = None
    saturation: str = "satfinite"
    clamp: float | None = None         # "clamp" saturation at ±clamp (default the format's max:
                                       # vLLM's ROCm e4m3fnuz builds clamp at 224)
    scale_layout: str = "row_major"    # per_group scales [rows, groups] or [groups, rows]
    source: str = ""                   # the public file it follows
    notes: tuple = field(default=(), compare=False)

    # -- derived ----------------------------------------------------------------------------------
    @property
    def qformat(self) -> qformats.QFormat:
        return _qformat(self.format)

    @property
    def q_max(self) -> float:
        return float(self.qmax) if self.qmax is not None else self.qformat.max_finite

    @property
    def dynamic(self) -> bool:
        """Whether the kernel computes (and writes) its scales."""
        return self.granularity != "per_tensor"

    @property
    def group_size(self) -> int:
        if self.granularity == "per_group":
            return self.group or 128
        return {"mx": 32, "nvfp4": 16}.get(self.granularity, 0)

    @property
    def scale_format(self) -> str:
        """How the scales are stored: fp32, e8m0 (mx) or ue4m3 (nvfp4)."""
        return {"mx": "e8m0", "nvfp4": "ue4m3"}.get(self.granularity, "fp32")

    def groups(self, cols: int) -> int:
        """Scales per row (1 per token, ceil(cols/G) per group or block; 0 for per_tensor)."""
        if self.granularity == "per_tensor":
            return 0
        if self.granularity == "per_token":
            return 1
        g = self.group_size
        return -(-cols // g)

    def replace(self, **kw) -> "Contract":
        return _checked(dataclasses.replace(self, **kw))

    def for_storage(self, storage) -> "Contract":
        """The contract with every constant as a kernel of storage format ``storage`` holds
        it: a floor kept in T (``amax_floor_in`` "storage") rounded to T."""
        if self.amax_floor_in != "storage":
            return self
        floor = float(storage.round_array(np.array([self.amax_floor]))[0])
        return dataclasses.replace(self, amax_floor=floor, amax_floor_in="fp32")

    def describe(self) -> str:
        """One line: every field that decides a value."""
        parts = [f"{self.format} {self.granularity}"
                 + (f" (G={self.group_size})" if self.group_size else ""),
                 f"y {self.y_rounding}", f"residual {self.residual}"]
        if self.dynamic and self.granularity != "nvfp4":
            s = f"s = {self.scale}"
            if self.amax_from != "y":
                s += f" (amax of {self.amax_from})"
            if self.amax_floor:
                s += f", amax >= {self.amax_floor:.3g}" + (
                    " (in T)" if self.amax_floor_in == "storage" else "")
            if self.amax_cap is not None:
                s += f", amax <= {self.amax_cap:.3g}"
            if self.scale_floor:
                s += f", s >= {self.scale_floor:.3g}"
            if self.pow2 != "none":
                s += f", power of two ({self.pow2})"
            parts.append(s)
        parts.append(f"apply {self.apply}" + (f" (cap {self.multiplier_cap:.4g})"
                                              if self.multiplier_cap else ""))
        parts.append(f"saturation {self.saturation}")
        return f"{self.name}: " + ", ".join(parts)

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["notes"] = list(self.notes)
        return d


FIELDS = tuple(f.name for f in dataclasses.fields(Contract) if f.name not in ("notes",))


def _qformat(name) -> qformats.QFormat:
    """The quantised format a contract writes (a storage format is refused by name)."""
    f = qformats.get(name)
    if not isinstance(f, qformats.QFormat):
        raise invalid("quant.format", name, f"one of {', '.join(qformats.QFORMATS)}",
                      "fp32, fp16 and bf16 are storage formats: check the kernel without [quant]")
    return f


def _checked(c: Contract) -> Contract:
    _qformat(c.format)
    for k, opts in _CHOICES.items():
        v = getattr(c, k)
        if v not in opts:
            raise invalid(f"quant.{k}", v, f"one of {', '.join(opts)}",
                          "see normcheck.quant.contract for what each means")
    for k in ("amax_floor", "scale_floor"):
        v = getattr(c, k)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not np.isfinite(v) or v < 0:
            raise invalid(f"quant.{k}", v, "a finite number >= 0")
    for k in ("qmax", "amax_cap", "multiplier_cap", "clamp"):
        v = getattr(c, k)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)
                              or not np.isfinite(v) or v <= 0):
            raise invalid(f"quant.{k}", v, "a finite number > 0 (or leave it out)")
    if not isinstance(c.group, int) or isinstance(c.group, bool) or not 0 <= c.group <= 1 << 16:
        raise invalid("quant.group", c.group, "an integer from 1 to 65536 (0: the default)")
    fmt = c.qformat
    if fmt.name in ("e8m0", "ue4m3"):
        raise invalid("quant.format", c.format, "a value format (e4m3, e5m2, e4m3fnuz, "
                      "e5m2fnuz, int8, e2m1)", f"{fmt.name} is a scale format")
    if c.granularity == "nvfp4" and fmt.name != "e2m1":
        raise invalid("quant.format", c.format, "e2m1 for granularity nvfp4")
    if c.granularity == "mx" and c.pow2 == "none":
        raise invalid("quant.pow2", c.pow2, '"ceil" or "floor" for granularity mx (an e8m0 '
                      'scale)', 'pow2 = "ceil" (TransformerEngine) or "floor" with qmax = '
                      '2^emax (the OCP MX rule)')
    if c.granularity == "per_tensor" and c.apply == "mul_qmax_over_amax":
        raise invalid("quant.apply", c.apply, "div, mul_inv or mul with a static scale")
    if c.amax_from == "fp32" and c.y_rounding == "none":
        c = dataclasses.replace(c, amax_from="y")  # the same value
    return c


# ------------------------------------------------------------------------------------------------
# Presets
# ------------------------------------------------------------------------------------------------
_VLLM_STATIC = "vllm csrc/layernorm_quant_kernels.cu + csrc/quantization/fp8/common.cuh"
_VLLM_DYNAMIC = ("vllm csrc/quantization/fused_kernels/fused_layernorm_dynamic_per_token_quant.cu"
                 " + layernorm_utils.cuh + quant_conversions.cuh")
_TRT = "TensorRT-LLM cpp/tensorrt_llm/kernels/rmsnormKernels.cu"
_FI = "flashinfer include/flashinfer/norm.cuh (RMSNormQuantKernel)"
_TE_FWD = "TransformerEngine common/normalization/{layernorm,rmsnorm}/*_fwd_kernels.cuh"
_TE_MX = "TransformerEngine common/normalization/rmsnorm/rmsnorm_fwd_mxfp8.cu"
_TE_NVFP4 = "TransformerEngine common/cast/nvfp4/core_nvfp4.cuh"


def _vllm(granularity, fmt):
    f = _qformat(fmt)
    if granularity == "per_tensor":
        return dict(y_rounding="twice", residual="stored", apply="mul_inv", saturation="clamp",
                    source=_VLLM_STATIC,
                    notes=("y = round_T(round_T(x·rstd)·γ)", "v = y·fl32(1/scale)",
                           "clamp to ±448 with fmax(-M, fmin(v, M)) then c10 Float8_e4m3fn",
                           "fused add: the residual rounded to T, statistics of that sum"))
    if granularity in ("per_token", "per_group"):
        floor = _FLT_EPS if f.kind == "int" else 1.0 / (f.max_finite * 512.0)
        return dict(y_rounding="twice", residual="exact", scale="amax/qmax", scale_floor=floor,
                    apply="mul_inv" if f.kind == "int" else "div",
                    saturation="satfinite" if f.kind == "int" else "clamp",
                    group=128 if granularity == "per_group" else 0, source=_VLLM_DYNAMIC,
                    notes=("statistics of the float32 sum x + r; the residual written in T",
                           "amax over round_T(round_T(x·rms)·γ)",
                           "s = max(min(amax, scale_ub)/qmax, min_scaling_factor)",
                           "fp8: v = y/s (not inverted, to match FBGemm); int8: v = y·(1/s) "
                           "and cvt.rni.sat.s8.f32"))
    return None


def _trtllm(granularity, fmt):
    f = _qformat(fmt)
    if granularity == "per_tensor":
        return dict(y_rounding="once", apply="mul", saturation="satfinite", source=_TRT,
                    notes=("y = round_T(x·s_var·γ) once", "q = cvt(float(y)·scale), satfinite"))
    if granularity == "per_token":
        fp8 = f.kind != "int"
        return dict(y_rounding="once", amax_floor=_F32_1E6, amax_floor_in="storage",
                    scale="amax/qmax", scale_floor=1.0 / (448.0 * 512.0) if fp8 else 0.0,
                    apply="mul_qmax_over_amax",
                    multiplier_cap=448.0 * 512.0 if fp8 else None, saturation="satfinite",
                    source=_TRT,
                    notes=("amax starts at T(1e-6f): `T_scalar amax = 1e-6f;`, the storage "
                           "type's value (bf16 9.98e-7, fp16 1.01e-6)",
                           "amax = max(|y|) over y rounded to T",
                           "multiplier qmax/amax (capped at 448·512 for fp8 row-wise: "
                           "MIN_SCALING_FACTOR_RCP)",
                           "stored scale max(amax/qmax, 1/(448·512)) for fp8"))
    return None


def _flashinfer(granularity, fmt):
    if granularity == "per_tensor":
        return dict(y_rounding="none", apply="mul_inv", saturation="clamp", source=_FI,
                    notes=("v = x·rms·(w)·(1/scale[0]) in float32, no rounding of y",
                           "clamp to ±max, then the cast"))
    return None


def _te(granularity, fmt):
    if granularity == "per_tensor":
        return dict(y_rounding="none", amax_from="fp32", apply="mul", saturation="satfinite",
                    source=_TE_FWD,
                    notes=("z = output_t((γ·x̂ + β)·scale) from float32", "amax of the value "
                           "before the scale (delayed scaling)"))
    if granularity == "mx":
        return dict(y_rounding="none", scale="amax*rcp_qmax", pow2="ceil", apply="mul_inv",
                    saturation="satfinite", source=_TE_MX,
                    notes=("y = (x·rsigma)·γ in float32", "e8m0 = float_to_e8m0(amax·(1/M)), "
                           "rounded up", "v = y·2^-e (exp2f_rcp), satfinite cvt"))
    if granularity == "nvfp4":
        return dict(y_rounding="none", scale="amax*rcp_qmax", apply="mul_inv",
                    saturation="satfinite", source=_TE_NVFP4,
                    notes=("S_dec_b = ue4m3(amax·(S_enc·(1/6)))",
                           "v = y·fminf(1/(S_dec_b·(1/S_enc)), FLT_MAX), satfinite e2m1"))
    return None


_FLT_MIN = 2.0**-126


def _exact(granularity, fmt, rounding):
    # the scale floor is the smallest normal float: a zero group quantises to 0, not 0/0
    base = dict(y_rounding=rounding, scale="amax/qmax", apply="div", saturation="satfinite",
                scale_floor=_FLT_MIN, source="normcheck (the definition)",
                notes=("s = max(fl32(amax/qmax), 2^-126): a zero group gives q = 0",))
    if granularity == "mx":
        base.update(pow2="ceil", scale="amax*rcp_qmax", apply="mul_inv", scale_floor=0.0)
    if granularity == "nvfp4":
        base.update(scale="amax*rcp_qmax", apply="mul_inv", scale_floor=0.0)
    if granularity == "per_tensor":
        base.update(apply="mul_inv")
    return base


#: name -> (granularity, format) -> fields, or None where the project has no such kernel.
PRESETS = {
    "vllm": _vllm,
    "trtllm": _trtllm,
    "flashinfer": _flashinfer,
    "te": _te,
    "exact": lambda g, f: _exact(g, f, "once"),
    "hf": lambda g, f: _exact(g, f, "twice"),
}
_PROJECT_GRANULARITIES = {"vllm": ("per_tensor", "per_token", "per_group"),
                          "trtllm": ("per_tensor", "per_token"),
                          "flashinfer": ("per_tensor",), "te": ("per_tensor", "mx", "nvfp4"),
                          "exact": GRANULARITIES, "hf": GRANULARITIES}


def preset(name: str, granularity: str = "per_token", format: str = "e4m3") -> Contract:
    """The preset ``name`` for that granularity and format."""
    if name not in PRESETS:
        raise invalid("quant.contract", name, f"one of {', '.join(PRESETS)}",
                      "or give the fields yourself (normcheck.quant.contract)")
    if granularity not in GRANULARITIES:
        raise invalid("quant.granularity", granularity, f"one of {', '.join(GRANULARITIES)}")
    fmt = _qformat(format).name
    if granularity == "nvfp4" and fmt != "e2m1":
        fmt = "e2m1"
    fields = PRESETS[name](granularity, fmt)
    if fields is None:
        raise invalid("quant.granularity", granularity,
                      f"one {name} writes: {', '.join(_PROJECT_GRANULARITIES[name])}",
                      f"no {name} kernel of that granularity was read; use contract = \"exact\" "
                      "and set the fields")
    return _checked(Contract(name=name, format=fmt, granularity=granularity, **fields))


def resolve(table) -> Contract:
    """A Contract from a spec's ``quant`` table or ``--quant`` items: ``contract`` (a preset,
    default "exact"), ``format``, ``granularity`` and any field overriding the preset."""
    if isinstance(table, Contract):
        return table
    if isinstance(table, str):
        table = {"contract": table}
    if not isinstance(table, dict):
        raise invalid("quant", table, "a table of contract fields",
                      'e.g. quant = { format = "e4m3", granularity = "per_token", '
                      'contract = "vllm" }')
    t = dict(table)
    known = set(FIELDS) | {"contract"}
    for k in t:
        if k not in known:
            raise invalid(f"quant.{k}", t[k], f"one of the keys {', '.join(sorted(known))}",
                          "see normcheck.quant.contract")
    name = t.pop("contract", "exact")
    gran = t.pop("granularity", "per_token")
    fmt = t.pop("format", "e2m1" if gran == "nvfp4" else "e4m3")
    base = preset(name, gran, fmt)
    if t:
        base = dataclasses.replace(base, name=f"{name}+" + ",".join(sorted(t)))
    try:
        return base.replace(**{k: (float(v) if k in ("amax_floor", "scale_floor") and
                                   isinstance(v, int) and not isinstance(v, bool) else v)
                               for k, v in t.items()})
    except TypeError as e:
        raise invalid("quant", table, "contract fields", str(e)) from None


#: normcheck's unquantised references in this vocabulary: ``exact`` is y rounded once to the
#: output format, ``hf`` rounds x̂ to T and then γ·that (normcheck.norms); the quantised
#: oracle computes ``y_rounding`` "once" and "twice" with those very references.
REFERENCE_ROUNDING = {"exact": "once", "hf": "twice"}
