"""Hypothesis strategies for rows built to hurt normalisation kernels.

The families of :mod:`normcheck.families` drawn through Hypothesis: every parameter a family
picks (offset, spread, outlier size and place, width ...) is a Hypothesis draw, so a failure
shrinks toward a small, readable row that still fails.  Rows up to 64 columns draw every value;
wider rows (real hidden sizes, up to 8192 and beyond) draw a seed for the bulk, so they fit
Hypothesis's budget.

Arguments accept values or strategies, as in ``hypothesis.extra.numpy``::

    rows("fp16")                                   # any family, any width
    rows("bf16", cols=4096, family="offset")
    rows(st.sampled_from(["fp16", "bf16"]), cols=st.integers(1, 8192), family="outlier")
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from normcheck import families, formats
from normcheck.errors import invalid
from normcheck.launch import Case  # what a kernel target receives (normcheck.launch)

__all__ = ["rows", "row_cases", "weights", "epsilons", "columns", "FAMILY_NAMES", "Case"]

FAMILY_NAMES = tuple(families.FAMILIES)
_DRAW_EACH = 64  # widths up to this draw every value (fully shrinkable)


class _HypothesisSource(families.Source):
    """A families.Source whose randomness comes from Hypothesis draws."""

    def __init__(self, draw):
        self.draw = draw

    def normal(self, n):
        if n <= _DRAW_EACH:
            vals = self.draw(st.lists(st.floats(-4.0, 4.0, allow_nan=False), min_size=n,
                                      max_size=n))
            return np.array(vals, dtype=np.float64)
        seed = self.draw(st.integers(0, 2**32 - 1))
        return np.random.default_rng(seed).standard_normal(n)

    def uniform(self, lo, hi):
        return self.draw(st.floats(lo, hi, allow_nan=False))

    def integer(self, lo, hi):
        return self.draw(st.integers(lo, hi))

    def choice(self, seq):
        return self.draw(st.sampled_from(list(seq)))


def _as_strategy(value, name, check):
    if isinstance(value, st.SearchStrategy):
        return value
    check(value)
    return st.just(value)


def _check_fmt(v):
    formats.get(v)


def _check_cols(v):
    if not isinstance(v, (int, np.integer)) or v < 1:
        raise invalid("cols", v, "a positive int, a strategy of them, or None",
                      "e.g. cols=4096 or cols=st.integers(1, 8192)")


def _check_family(v):
    families.get(v)


def columns(max_cols: int = 8192) -> st.SearchStrategy:
    """Widths: tiny and odd ones, multiples of the block and vector width, real hidden sizes."""
    return st.one_of(
        st.integers(1, 40),
        st.sampled_from(families.TAIL_COLS + (64, 256, 768, 1024, 2048, 4096, 5120, 8192)),
        st.integers(1, max_cols),
    ).filter(lambda c: c <= max_cols)


@st.composite
def _rows(draw, fmt, cols, family, n_rows):
    f = formats.get(draw(fmt))
    fam = families.get(draw(family))
    c = draw(cols) if cols is not None else (
        draw(st.sampled_from(fam.cols)) if fam.name == "tails" and draw(st.booleans())
        else draw(columns()))
    nr = draw(n_rows)
    src = _HypothesisSource(draw)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.stack([fam.row(src, f, c) for _ in range(nr)])


def rows(fmt, *, cols=None, family=None, n_rows=None) -> st.SearchStrategy:
    """A strategy of 2-D numpy arrays [rows, cols] in the storage dtype of ``fmt``.

    ``family`` None draws from every family; ``cols`` None draws widths from 1 to 8192 (tiny,
    odd and real hidden sizes); ``n_rows`` (default 1 to 3).  Each argument may be a value or a
    strategy."""
    f = _as_strategy(fmt, "fmt", _check_fmt)
    c = None if cols is None else _as_strategy(cols, "cols", _check_cols)
    fam = st.sampled_from(FAMILY_NAMES) if family is None else _as_strategy(
        family, "family", _check_family)
    nr = st.integers(1, 3) if n_rows is None else _as_strategy(
        n_rows, "n_rows", lambda v: _check_cols(v))
    return _rows(f, c, fam, nr)


@st.composite
def weights(draw, fmt, cols, *, beta=True):
    """(γ, β) in the storage dtype: all ones/zeros, realistic (1 + small, small), or wild."""
    f = formats.get(fmt)
    kind = draw(st.sampled_from(["identity", "realistic", "wild"]))
    if kind == "identity":
        g, b = np.ones(cols), np.zeros(cols)
    else:
        seed = draw(st.integers(0, 2**32 - 1))
        rng = np.random.default_rng(seed)
        s = 0.1 if kind == "realistic" else 3.0
        g = (1 if kind == "realistic" else 0) + s * rng.standard_normal(cols)
        b = s * rng.standard_normal(cols)
    g, b = f.cast(g), f.cast(b)
    return (g, b) if beta else (g, None)


def epsilons() -> st.SearchStrategy:
    """ε as kernels receive it: the common float32 values and a few extreme ones."""
    return st.sampled_from([1e-5, 1e-6, 1e-12, 1e-3, 2.0**-149, 0.5]).map(np.float32)


@st.composite
def row_cases(draw, fmt, *, cols=None, family=None, beta=True, fused=False, eps=None):
    """A whole case for a kernel: rows, weights, a residual (fused kernels) and ε."""
    f = formats.get(draw(fmt) if isinstance(fmt, st.SearchStrategy) else fmt).name
    x = draw(rows(f, cols=cols, family=family))
    g, b = draw(weights(f, x.shape[1], beta=beta))
    r = None
    if fused:
        r = draw(rows(f, cols=x.shape[1], family="gaussian", n_rows=x.shape[0]))
    e = draw(epsilons()) if eps is None else np.float32(eps)
    return Case(x=x, gamma=g, beta=b, residual=r, eps=e)
