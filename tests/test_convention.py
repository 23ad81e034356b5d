"""A fused add's two sound conventions (#57): normalise the exact sum x + residual (FlashInfer,
the exact convention) or the sum as stored, h rounded (vLLM, the stored convention).  Unnamed,
a check accepts either -- the rows tell which one the kernel follows, and the check says so; a
kernel following the other one than the check names is told so, with the setting, as its
cause.  And h itself: its error counted in max_ulp, h stored before the add named as such."""

import numpy as np
import pytest

from normcheck.check import check_callable

# Every step in float64, one rounding at the store: these kernels are as exact as a kernel can
# be, under one convention each -- a verdict other than PASS under their own is a wrong one.


def _stored(x, residual, gamma, beta, eps):
    h = (x.astype(np.float64) + residual.astype(np.float64)).astype(x.dtype)
    s = h.astype(np.float64)
    r = 1 / np.sqrt((s * s).mean(axis=1, keepdims=True) + float(eps))
    return h, (s * r * gamma.astype(np.float64)).astype(x.dtype)


def _exact(x, residual, gamma, beta, eps):
    s = x.astype(np.float64) + residual.astype(np.float64)
    r = 1 / np.sqrt((s * s).mean(axis=1, keepdims=True) + float(eps))
    return s.astype(x.dtype), (s * r * gamma.astype(np.float64)).astype(x.dtype)


def _h_before_add(x, residual, gamma, beta, eps):
    _, y = _exact(x, residual, gamma, beta, eps)
    return x.copy(), y  # the stream gets x: the residual is added after the store


def _check(fn, convention=None):
    with np.errstate(over="ignore", invalid="ignore"):
        return check_callable(fn, "add_rmsnorm", "fp16", convention=convention, examples=24,
                              search=0)


def _notes(r):
    return [n for n in (r.detail.notes or []) if "fused convention" in n]


@pytest.mark.parametrize("fn,follows", [(_stored, "stored"), (_exact, "exact")])
def test_unnamed_either_sound_convention_passes_and_is_said(fn, follows):
    r = _check(fn)
    assert r.verdict == "pass", r.render()
    (note,) = _notes(r)
    assert f'fused convention: "{follows}", the kernel\'s' in note, note
    assert "told by" in note and "off on" in note  # the rows that told them apart


@pytest.mark.parametrize("fn,follows,named", [(_stored, "stored", "exact"),
                                              (_exact, "exact", "stored")])
def test_a_named_convention_the_kernel_does_not_follow_is_its_cause(fn, follows, named):
    r = _check(fn, named)
    assert r.verdict == "fail", r.render()
    assert r.cause.key == "convention_named", r.cause
    assert f'convention = "{named}"' in r.cause and f'convention = "{follows}"' in r.cause
    assert _check(fn, follows).verdict == "pass"  # and named as it is, it passes


def test_h_stored_before_the_add_is_named_and_counted():
    """h off by the whole residual: its own cause (bit for bit), and its error in max_ulp --
    not "not correctly rounded" with y's 0.5 ulp beside it."""
    r = _check(_h_before_add)
    assert r.verdict == "fail"
    assert r.cause.key == "h_before_add", r.cause
    assert "bit for bit" in r.cause
    # a correctly rounded h is within 0.5 ulp; this one is a residual (~1) off values ~1: many
    assert r.max_ulp > 100, r.max_ulp
    h = [f for f in r.failures if f.output == "h"]
    assert h and "ulp off at most" in h[0].detail
