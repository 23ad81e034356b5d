r"""The exact result of a quantised normalisation under its contract, and the set of results a
sound kernel may write instead.

For the rows of a case and a :class:`normcheck.quant.contract.Contract`:

1. **y.**  The normalised row t = γ·x̂ + β (of x + residual exactly, or of the sum rounded to T)
   comes from normcheck.oracle: ``y_rounding`` "once" is its correctly rounded value in T,
   "twice" the correctly rounded γ·round_T(x̂) (the ``hf`` reference), "none" t itself (to
   float32 resolution 1e-6 ulp: the fast path's certificate).
2. **amax, scale.**  A = max |y| per group (of t for ``amax_from`` "fp32"), and the scale as
   the contract computes it -- float32 operations on exactly known values: an operation on
   float32 operands is evaluated in float64 and rounded once to float32, which is the correctly
   rounded float32 result (53 >= 2·24 + 2: the double rounding is innocuous for + - × ÷).
3. **q.**  v = y ÷ s or y × m in float32 (exactly: y is a value of T) -- or, where y is not
   rounded (``none``), the exact real product -- then the quantiser of the contract.  An element
   whose real v lies within 2^-40 of a rounding boundary of the quantiser (the float64 value
   cannot decide it) is decided exactly: the row's statistics in integers (Fractions) when
   1/√(var+ε) is rational, else mpmath at 256, 512 ... bits (an irrational v is never on a
   boundary).

**What a sound kernel may write.**  A float kernel computes t within E (normcheck.bounds.
sound_bound: any summation order, float32 arithmetic), so its y lies between y_lo and y_hi:
round_T(t ∓ E) for a rounded y, the float32 values of [t - E, t + E] otherwise.  Every step after
is monotone in y and in the scale, so the q it writes lies between the quantiser's values at the
corners (y_lo or y_hi) × (the extreme scales a sound amax gives); the scale between the scale of
the smallest and of the largest sound amax.  An element (or scale) that differs from the exact
result but lies in that set is an *order flip*: a summation order decided which side of a
rounding boundary it fell on.  Anything else is a *contract flip*: no sound kernel of that
contract writes it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction

import mpmath
import numpy as np

from normcheck import bounds, formats, norms, oracle
from normcheck.oracle import exact
from normcheck.errors import invalid
from normcheck.quant import formats as qformats
from normcheck.quant.contract import Contract

__all__ = ["QReference", "QOracle", "stored_scale", "multiplier", "quantise", "saturate",
           "group_of_columns", "group_max", "contract_result", "AMBIGUOUS"]

#: Relative distance to a quantiser boundary below which a real v is decided exactly.
AMBIGUOUS = 2.0**-40
_FLT_MAX = float(np.finfo(np.float32).max)


# ------------------------------------------------------------------------------------------------
# float32 steps on float64 arrays
# ------------------------------------------------------------------------------------------------
def _f32(a) -> np.ndarray:
    """Round to float32 (to nearest even), as float64; ±inf beyond."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(a, np.float64).astype(np.float32).astype(np.float64)


def round_down32(a) -> np.ndarray:
    a = np.asarray(a, np.float64)
    r = _f32(a)
    dn = np.nextafter(r.astype(np.float32), np.float32(-np.inf)).astype(np.float64)
    return np.where(r > a, dn, r)


def round_up32(a) -> np.ndarray:
    a = np.asarray(a, np.float64)
    r = _f32(a)
    up = np.nextafter(r.astype(np.float32), np.float32(np.inf)).astype(np.float64)
    return np.where(r < a, up, r)


def group_of_columns(c: Contract, cols: int) -> np.ndarray:
    """The scale index of each column (0 for per_tensor and per_token)."""
    g = c.group_size
    return np.arange(cols) // g if g else np.zeros(cols, np.int64)


def group_max(a: np.ndarray, c: Contract) -> np.ndarray:
    """max over each group of a row ([rows, groups]); ``a`` >= 0 (NaN propagates as fmaxf would
    not: the contracts here assume finite rows)."""
    rows, cols = a.shape
    g = c.group_size
    if not g:
        return a.max(axis=1, keepdims=True)
    n = -(-cols // g)
    pad = np.zeros((rows, n * g))
    pad[:, :cols] = a
    return pad.reshape(rows, n, g).max(axis=2)


def _e8m0_up(s) -> np.ndarray:
    """The power of two at or above s (float_to_e8m0 / cvt.rp.satfinite.ue8m0: 2^-127 for 0 and
    tiny values, 2^127 at most, NaN for NaN)."""
    s = np.asarray(s, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        m, e = np.frexp(s)
        k = np.where(m == 0.5, e - 1, e).astype(np.float64)
        k = np.clip(np.where(s > 0, k, -127), -127, 127)
        r = np.ldexp(1.0, k.astype(np.int64))
    return np.where(np.isnan(s), np.nan, r)


def _e8m0_down(s) -> np.ndarray:
    """The power of two at or below s (2^-127 for 0 and tiny values, 2^127 at most)."""
    s = np.asarray(s, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        m, e = np.frexp(s)
        k = np.clip(np.where(s > 0, e - 1, -127), -127, 127).astype(np.float64)
        r = np.ldexp(1.0, k.astype(np.int64))
    return np.where(np.isnan(s), np.nan, r)


def stored_scale(c: Contract, A, s_enc=None) -> np.ndarray:
    """The scale the contract stores for amax values ``A`` (float64 arrays of float32 values, or
    of exact reals where y is not rounded)."""
    A = np.asarray(A, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if c.amax_floor:
            A = np.maximum(A, _f32(c.amax_floor))
        if c.amax_cap is not None:
            A = np.minimum(A, _f32(c.amax_cap))
        qmax = c.q_max
        if c.granularity == "nvfp4":
            if s_enc is None:
                raise invalid("scale", None, "the per-tensor encode scale S_enc of an nvfp4 "
                              "output (role scale)")
            k = _f32(_f32(s_enc) * _f32(1.0 / qmax))
            s = qformats.UE4M3.quantize(_f32(A * k), "satfinite")
            return s
        if c.scale == "amax/qmax":
            s = _f32(A / qmax)
        else:
            s = _f32(A * _f32(1.0 / qmax))
        if c.scale_floor:
            s = np.maximum(s, _f32(c.scale_floor))
        if c.pow2 == "ceil":
            s = _e8m0_up(s)
        elif c.pow2 == "floor":
            s = _e8m0_down(s)
    return s


def multiplier(c: Contract, s, A=None, s_enc=None):
    """(op, m): v = y ÷ m (op "div") or y × m (op "mul"), m per group (float64 of float32)."""
    s = np.asarray(s, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if c.granularity == "nvfp4":
            dec = _f32(s * _f32(1.0 / _f32(s_enc)))
            return "mul", np.minimum(_f32(1.0 / dec), _FLT_MAX)
        if c.apply == "div":
            return "div", s
        if c.apply == "mul":
            return "mul", s
        if c.apply == "mul_inv":
            if c.granularity == "mx":  # exp2f_rcp: 1 for the zero code (2^-127)
                return "mul", np.where(s <= 2.0**-127, 1.0, _f32(1.0 / s))
            return "mul", _f32(1.0 / s)
        # mul_qmax_over_amax
        A = np.asarray(A, np.float64)
        if c.amax_floor:
            A = np.maximum(A, _f32(c.amax_floor))
        if c.amax_cap is not None:
            A = np.minimum(A, _f32(c.amax_cap))
        m = _f32(c.q_max / A)
        if c.multiplier_cap is not None:
            m = np.minimum(m, _f32(c.multiplier_cap))
        return "mul", m


def saturate(c: Contract, v) -> np.ndarray:
    """The quantiser of the contract on float64 values v (the value each code stands for)."""
    fmt = c.qformat
    v = np.asarray(v, np.float64)
    if c.saturation == "clamp":  # fmax(-M, fmin(v, M)): fmin(NaN, M) = M
        M = fmt.max_finite if c.clamp is None else float(c.clamp)
        with np.errstate(invalid="ignore"):
            v = np.where(np.isnan(v), M, np.clip(v, -M, M))
        return fmt.quantize(v, "satfinite")
    return fmt.quantize(v, "satfinite" if c.saturation == "satfinite" or fmt.kind == "int"
                        else "nan")


def quantise(c: Contract, y, op, m, real=False) -> np.ndarray:
    """q of values y with per-element multipliers m; ``real``: the product is exact (y is not a
    stored value), else rounded to float32 first."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        v = y / m if op == "div" else y * m
    if not real:
        v = _f32(v)
    return saturate(c, v)


def contract_result(c: Contract, y, t=None, *, scale=None, s_enc=None, groups=None,
                    amax_of=None, A=None):
    """The contract's values on given rows y (its y: rounded, or t itself) -- q, A, s and
    (op, multiplier) per group -- from float32 operations as the contract states them
    (module docstring).  ``t``: the values before rounding (amax_from "fp32"); ``groups``:
    another column→group map (the diagnosis's misplaced groups); ``amax_of``: the values amax
    is taken over instead (the diagnosis's amax before the weight); ``A``: amax per group
    given (the diagnosis's groups one column too wide)."""
    y = np.asarray(y, np.float64)
    R, D = y.shape
    src = y if (c.amax_from == "y" or t is None) else t
    if amax_of is not None:
        src = np.asarray(amax_of, np.float64)
    with np.errstate(invalid="ignore"):
        a = np.abs(src)
    if c.granularity == "per_tensor":
        A = np.array([[np.nanmax(a)]]) if a.size else np.zeros((1, 1))
        if scale is None:
            raise invalid("scale", None, "the static scale of a per_tensor contract "
                          "(a spec arg with role scale)")
        s = np.array([[float(np.float32(scale))]])
    else:
        if A is not None:
            A = np.asarray(A, np.float64)
        elif groups is None:
            A = group_max(a, c)
        else:
            n = int(groups.max()) + 1
            A = np.zeros((R, n))
            np.maximum.at(A, (np.arange(R)[:, None], np.broadcast_to(groups, (R, D))), a)
        s = stored_scale(c, A, s_enc)
    op, m = multiplier(c, s, A, s_enc=s_enc)
    m = np.broadcast_to(m, (R, m.shape[1]))
    cg = group_of_columns(c, D) if groups is None else groups
    mm = m if m.shape[1] == 1 else m[:, cg]
    q = quantise(c, y, op, np.broadcast_to(mm, (R, D)), real=c.y_rounding == "none")
    return q, A, s, (op, m)


# ------------------------------------------------------------------------------------------------
# The reference
# ------------------------------------------------------------------------------------------------
@dataclass
class QReference:
    """A contract's exact result on a case, and the sound sets (module docstring).  Arrays are
    float64; per-group arrays are [rows, groups] (per_tensor: the static scale, [1, 1])."""

    contract: Contract
    storage: formats.Format
    t: np.ndarray           # the exact normalised value before the contract's rounding
    E: np.ndarray           # the sound bound of a float kernel's t
    y: np.ndarray           # the contract's y (rounded to T, or t)
    y_lo: np.ndarray
    y_hi: np.ndarray
    A: np.ndarray           # amax per group, exact (per_tensor: of the whole case, [1, 1])
    A_lo: np.ndarray
    A_hi: np.ndarray
    s: np.ndarray           # the stored scale per group (per_tensor: the input)
    s_lo: np.ndarray
    s_hi: np.ndarray
    q: np.ndarray           # the exact quantised values
    cols_group: np.ndarray  # the group of each column
    s_enc: float | None = None
    norm_ref: object = field(default=None, repr=False)
    certified: int = 0      # elements decided exactly (Fractions or mpmath)

    @property
    def real(self) -> bool:
        return self.contract.y_rounding == "none"

    def expand(self, g: np.ndarray) -> np.ndarray:
        """A per-group array [rows, groups] spread over the columns [rows, cols]."""
        if g.shape[1] == 1:
            return np.broadcast_to(g, self.y.shape)
        return g[:, self.cols_group]

    def q_bounds(self, s_kernel=None):
        """(lo, hi, nan_ok): per element, the smallest and largest q a sound kernel may write;
        NaN allowed where some sound pipeline gives NaN.  ``s_kernel``: the kernel's own scales
        where they are sound (the q of a dynamic contract is judged with them)."""
        c = self.contract
        if not c.dynamic:
            op, m = multiplier(c, self.s, s_enc=self.s_enc)
            ms = [self.expand(np.broadcast_to(m, (self.y.shape[0], 1)))]
        elif c.apply == "mul_qmax_over_amax":
            ms = [self.expand(multiplier(c, s, A)[1]) for s, A in ((self.s_lo, self.A_lo),
                                                                  (self.s_hi, self.A_hi))]
            op = "mul"
        else:
            if s_kernel is not None:
                ok = (s_kernel >= self.s_lo) & (s_kernel <= self.s_hi)
                lo = np.where(ok, s_kernel, self.s_lo)
                hi = np.where(ok, s_kernel, self.s_hi)
            else:
                lo, hi = self.s_lo, self.s_hi
            ms = []
            for s in (lo, hi):
                op, m = multiplier(c, s, s_enc=self.s_enc)
                ms.append(self.expand(m))
        corners = []
        for y in (self.y_lo, self.y_hi):
            for m in ms:
                corners.append(quantise(c, y, op, m, real=False))
        st = np.stack(corners)
        with np.errstate(invalid="ignore"):
            nan_ok = np.isnan(st).any(axis=0)
            lo = np.nanmin(np.where(np.isnan(st), np.inf, st), axis=0)
            hi = np.nanmax(np.where(np.isnan(st), -np.inf, st), axis=0)
        return lo, hi, nan_ok


class QOracle:
    """The references of one case under any number of contracts (the diagnosis asks for
    several): y and its bound are computed once per (y_rounding, residual)."""

    def __init__(self, norm: norms.Norm, case, storage, *, scale=None, s_enc=None):
        self.norm = norms.get(norm)
        self.case = case
        self.storage = formats.get(storage)
        self.scale = scale
        self.s_enc = s_enc
        self._y = {}

    # -- y ----------------------------------------------------------------------------------------
    def _y_of(self, rounding: str, residual: str):
        key = (rounding, residual)
        if key in self._y:
            return self._y[key]
        n, case, T = self.norm, self.case, self.storage
        if rounding == "twice" and (n.centred or n.gemma):
            raise invalid("quant.y_rounding", "twice", f"none or once for {n.name}",
                          "twice is the Llama-family RMSNorm (x̂ rounded to T, then ×γ)")
        conv = residual if n.fused else "exact"
        nn = n.with_reference("hf" if rounding == "twice" else "exact")
        out = formats.FP32 if rounding == "none" else T
        ref = oracle.for_norm(nn, case.x, case.gamma, case.beta, residual=case.residual,
                              eps=case.eps, convention=conv, out=out)
        rows = oracle.normalised_rows(ref, case.x, case.residual, conv)
        E = bounds.sound_bound(nn, rows, case.gamma, case.beta, eps=case.eps, storage=T)
        t = ref.exact
        if n.fused and conv == "exact":  # the float32 sum x + r rounds once
            E = E + 2.0**-24 * bounds.SOUND_SAFETY * np.abs(t - (ref.beta if ref.beta is not None
                                                                  else 0.0))
        with np.errstate(invalid="ignore", over="ignore"):
            if rounding == "none":
                y = t
                y_lo, y_hi = round_down32(t - E), round_up32(t + E)
            else:
                y = ref.rounded.astype(np.float64)
                y_lo, y_hi = T.round_array(t - E), T.round_array(t + E)
        self._y[key] = (ref, rows, t, E, y, y_lo, y_hi)
        return self._y[key]

    # -- the reference ----------------------------------------------------------------------------
    def xhat(self, rounded: bool, residual: str = "exact") -> np.ndarray:
        """The normalised rows without γ and β (float64): correctly rounded to T, or exact
        (to float32 resolution) -- the diagnosis's x̂."""
        key = ("xhat", rounded, residual)
        if key not in self._y:
            n, case, T = self.norm, self.case, self.storage
            conv = residual if n.fused else "exact"
            plain = dataclasses.replace(n, gemma=False, has_gamma=False, has_beta=False,
                                        reference="exact")
            ref = oracle.for_norm(plain, case.x, None, None, residual=case.residual,
                                  eps=case.eps, convention=conv,
                                  out=T if rounded else formats.FP32)
            self._y[key] = ref.rounded.astype(np.float64) if rounded else ref.exact
        return self._y[key]

    def reference(self, c: Contract) -> QReference:
        c = c.for_storage(self.storage)
        ref, rows, t, E, y, y_lo, y_hi = self._y_of(c.y_rounding, c.residual)
        R, D = y.shape
        t_amax = t
        if c.amax_from == "fp32":  # amax of the unrounded γ·x̂ + β, whatever y rounds
            _, _, t_amax, E0, *_ = self._y_of("none", c.residual)
            src_lo, src_hi = round_down32(t_amax - E0), round_up32(t_amax + E0)
        else:
            src_lo, src_hi = y_lo, y_hi
        with np.errstate(invalid="ignore"):
            a_lo = np.where((src_lo <= 0) & (src_hi >= 0), 0.0,
                            np.minimum(np.abs(src_lo), np.abs(src_hi)))
            a_hi = np.maximum(np.abs(src_lo), np.abs(src_hi))
        q, A, s, (op, m) = contract_result(c, y, t_amax, scale=self.scale, s_enc=self.s_enc)
        if c.granularity == "per_tensor":
            A_lo, A_hi = np.array([[a_lo.max()]]), np.array([[a_hi.max()]])
            s_lo = s_hi = s
        else:
            A_lo, A_hi = group_max(a_lo, c), group_max(a_hi, c)
            s_lo, s_hi = stored_scale(c, A_lo, self.s_enc), stored_scale(c, A_hi, self.s_enc)
        qr = QReference(c, self.storage, t, E, y, y_lo, y_hi, A, A_lo, A_hi, s, s_lo, s_hi,
                        q, group_of_columns(c, D), self.s_enc, ref)
        if qr.real:
            qr.q, qr.certified = self._certify(c, q, y, op, qr.expand(np.broadcast_to(
                m, (R, m.shape[1]))))
        return qr

    # -- exact decisions where float64 cannot tell ----------------------------------------------
    def _certify(self, c, q, y, op, m):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            v = y / m if op == "div" else y * m
            lo = saturate(c, v * (1 - AMBIGUOUS))
            hi = saturate(c, v * (1 + AMBIGUOUS))
        amb = (lo != hi) & np.isfinite(v)
        if not amb.any():
            return q, 0
        q = q.copy()
        n = self.norm
        case = self.case
        for i in np.unique(np.nonzero(amb)[0]):
            row = _exact_row(n, case, int(i))
            for j in np.nonzero(amb[i])[0]:
                q[i, j] = _decide(c, row, int(j), op, float(m[i, j]))
        return q, int(amb.sum())


def _exact_row(n, case, i):
    """oracle's exact row machinery for row i (x + residual exactly for a fused norm)."""
    x = case.x[i].astype(np.float64)
    lo = None
    if n.fused:
        r = case.residual[i].astype(np.float64)
        s = x + r
        lo = (x - (s - (s - x))) + (r - (s - x))
        x = s
    g = case.gamma.astype(np.float64) if (case.gamma is not None and n.has_gamma) else None
    b = case.beta.astype(np.float64) if (case.beta is not None and n.reads_beta) \
        else None
    return exact.ExactRow((x, lo), g, b, float(np.float32(case.eps)), n.centred, n.gemma)


def _decide(c, row, j, op, m):
    """q of element j exactly: v = y_j ÷ m or y_j × m, with y_j rational (Fractions) or decided
    in mpmath at rising precision."""
    num = row.numer(j)
    bj = Fraction(float(row.b[j])) if row.b is not None else Fraction(0)
    mf = Fraction(m)
    if num == 0 or row.rational_r is not None:
        yv = (num * row.rational_r if num != 0 else Fraction(0)) + bj
        v = yv / mf if op == "div" else yv * mf
        return _q_of_exact(c, v)
    prec = 256
    while prec <= 1 << 14:
        with mpmath.workprec(prec):
            yv = mpmath.mpf(num.numerator) / num.denominator / mpmath.sqrt(
                mpmath.mpf(row.w.numerator) / row.w.denominator) + \
                mpmath.mpf(bj.numerator) / bj.denominator
            v = yv / mpmath.mpf(m) if op == "div" else yv * mpmath.mpf(m)
            man, exp = v.man_exp if v != 0 else (0, 0)
            vf = Fraction(int(man)) * (Fraction(2) ** int(exp)) if v != 0 else Fraction(0)
            r = _q_of_exact(c, vf, slack=Fraction(2) ** (-(prec - 8)) * abs(vf))
            if r is not None:
                return r
        prec *= 2
    raise ArithmeticError("the quantised oracle did not converge on an irrational value")


def _q_of_exact(c, v: Fraction, slack=Fraction(0)):
    """The quantiser of the contract on an exact value (None when v ± ``slack`` holds a
    boundary).  The boundaries (midpoints between neighbours, the overflow threshold) are
    float64 values far apart; v lies within half a float64 ulp of f = float(v), so only a
    boundary at f itself can separate v from f."""
    f = float(v)
    if not _is_boundary(c, f):
        return float(saturate(c, np.array([f]))[0])
    d = v - Fraction(f)
    if abs(d) <= slack:
        return float(saturate(c, np.array([f]))[0]) if d == 0 and slack == 0 else None
    side = float(np.nextafter(f, np.inf if d > 0 else -np.inf))
    return float(saturate(c, np.array([side]))[0])


def _is_boundary(c, b) -> bool:
    """Whether the quantiser changes value at b."""
    qs = saturate(c, np.array([float(np.nextafter(b, -np.inf)), float(np.nextafter(b, np.inf))]))
    return not (qs[0] == qs[1] or (np.isnan(qs[0]) and np.isnan(qs[1])))
