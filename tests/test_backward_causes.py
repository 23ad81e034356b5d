"""Backward verdicts as sharp as forward ones: planted bugs fail (or warn) with their own cause,
sound kernels in several styles pass, the fused add's and the from-y backward check end to end,
the spread is reproducible, counterexamples replay; and forward causes that used to be wrong."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headline_support import assert_headline_agrees
from normcheck import check
from normcheck.oracle import backward as oracle_backward
from normcheck import spec as specs
from normcheck.check import check_backward
from paths_support import beside

HERE = Path(__file__).parent
SRC = HERE / "cuda" / "backward_planted.cu"
FWD = HERE / "cuda" / "diagnose_planted.cu"


def _spec(data, folder=None):
    s = specs.parse(data)
    s.source = SRC
    return s


def _dx(T, centred, gemma, bug, dtype, norm):
    roles = ["dx", "dy", "input", "gamma", "eps", "rows", "cols"]
    return _spec({"entry": f"bwd_dx<{T}, {str(centred).lower()}, {str(gemma).lower()}, {bug}>",
                  "norm": norm, "dtype": dtype, "launch": {"grid": "rows", "block": "256"},
                  "args": [{"role": r} for r in roles]})


def _dx_saved(bug):
    roles = ["dx", "dy", "input", "gamma", "mean", "rstd", "rows", "cols"]
    return _spec({"entry": f"bwd_dx_saved<float, {bug}>", "norm": "layernorm", "dtype": "fp32",
                  "launch": {"grid": "rows", "block": "256"},
                  "args": [{"role": r} for r in roles]})


def _two_stage(bug, dbeta_fill=None):
    part = [{"role": "scratch", "name": n, "dtype": "fp32", "size": "ceil_div(rows, 64) * cols"}
            for n in ("pg", "pb")]
    db = {"role": "dbeta", **({"fill": dbeta_fill} if dbeta_fill else {})}
    return _spec({"norm": "layernorm", "dtype": "fp32", "launch": [
        {"entry": "dgb_part<float>", "grid": "ceil_div(cols, 256), ceil_div(rows, 64)",
         "block": "256", "args": part + [{"role": r} for r in ("dy", "input", "mean", "rstd",
                                                                "rows", "cols")]},
        {"entry": f"dgb_final<{bug}>", "grid": "ceil_div(cols, 256)", "block": "256",
         "args": [{"role": "dgamma"}, db] + part + [{"role": "rows"}, {"role": "cols"}]}]})


def _from_y(centred):
    roles = ["dx", "dgamma", "dbeta" if centred else "null", "dy", "y", "gamma",
             "beta" if centred else "null", "rstd", "rows", "cols"]
    args = [{"role": r, **({"fill": "zero"} if r in ("dgamma", "dbeta") else {})}
            for r in roles]
    return _spec({"entry": f"bwd_from_y<float, {str(centred).lower()}>",
                  "norm": "layernorm" if centred else "rmsnorm", "dtype": "fp32",
                  "launch": {"grid": "rows", "block": "256"}, "args": args})


def _fused(T, dtype):
    roles = ["dx", "d_residual", "dy", "input", "dh", "gamma", "rstd", "rows", "cols"]
    return _spec({"entry": f"bwd_fused<{T}>", "norm": "add_rmsnorm", "dtype": dtype,
                  "launch": {"grid": "rows", "block": "256"},
                  "args": [{"role": r} for r in roles]})


SOUND = {
    "two-pass LayerNorm, fp32": lambda: _dx("float", True, False, 0, "fp32", "layernorm"),
    "two-pass LayerNorm, fp16": lambda: _dx("__half", True, False, 0, "fp16", "layernorm"),
    "RMSNorm, bf16": lambda: _dx("__nv_bfloat16", False, False, 0, "bf16", "rmsnorm"),
    "Gemma RMSNorm, fp32": lambda: _dx("float", False, True, 0, "fp32", "gemma_rmsnorm"),
    "saved statistics (PyTorch 2 style)": lambda: _dx_saved(0),
    "two-stage dγ, dβ (Apex style)": lambda: _two_stage(0),
    "from y, LayerNorm (Apex memory-efficient)": lambda: _from_y(True),
    "from y, RMSNorm": lambda: _from_y(False),
    "fused add, fp16": lambda: _fused("__half", "fp16"),
    "fused add, fp32": lambda: _fused("float", "fp32"),
}


#: The families a test runs (the whole set is the default of check_backward; the sound kernels
#: below run three, one with many rows; the fused fp16 one runs them all).
FAMS = ("gaussian", "offset", "tiles")


@pytest.mark.parametrize("name", sorted(SOUND))
def test_sound_backward_kernels_pass(name):
    fams = None if name == "fused add, fp16" else FAMS
    r = check_backward(spec=SOUND[name](), examples=16, orders=0, families=fams)
    assert r.verdict in ("pass", "warn"), r.render()
    assert not r.failures, r.render()


PLANTED = {
    "variance / (D-1)": (lambda: _dx("float", True, False, 1, "fp32", "layernorm"),
                         "fail", "variance divided by D-1"),
    "ε missing, fp32": (lambda: _dx("float", True, False, 2, "fp32", "layernorm"),
                        "fail", "ε missing from the variance"),
    "ε missing, fp16": (lambda: _dx("__half", True, False, 2, "fp16", "layernorm"),
                        "fail", "ε missing from the variance"),
    "Gemma's γ": (lambda: _dx("float", False, True, 3, "fp32", "gemma_rmsnorm"),
                  "fail", "γ where Gemma's norm scales by 1+γ"),
    "PyTorch 1.x formula": (lambda: _dx_saved(4), "fail", "PyTorch 1.x's formula"),
    "row sums in __half": (lambda: _dx("__half", True, False, 5, "fp16", "layernorm"),
                           "fail", "accumulated in fp16"),
    "warp-only sums": (lambda: _dx("float", True, False, 6, "fp32", "layernorm"),
                       "fail", "a partial reduction"),
    "second stage in __half": (lambda: _two_stage(1), "fail", "second stage"),
    "dβ never written": (lambda: _two_stage(2, "zero"), "fail", "never written"),
}


def test_row_sums_mixed_across_rows_are_not_the_old_formula(tmp_path, monkeypatch):
    """Each row's Σg, Σg·x̂ over the next row's dy: wrong sums, affine in x̂ on each row like the
    old formula's, but wholly wrong, never the few float ulps its cancellation magnifies --
    it was named 'PyTorch 1.x's formula' on the offset rows (#64)."""
    monkeypatch.chdir(tmp_path)
    r = check_backward(spec=_dx_saved(7), examples=16, families=("gaussian", "offset"))
    assert r.verdict == "fail", r.render()
    assert "old_formula" not in {getattr(f.cause, "key", None) for f in r.failures}, r.render()
    assert "PyTorch 1.x" not in r.render()


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_backward_bugs_are_named(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make, verdict, cause = PLANTED[name]
    # the default block orders: a failing dγ/dβ kernel is also run in them
    r = check_backward(spec=make(), examples=16, families=("gaussian", "offset", "small_var"))
    assert r.verdict == verdict, r.render()
    assert r.cause and cause in r.cause, r.render()
    assert_headline_agrees(r)


def test_a_storage_second_stage_fails_or_warns_on_many_tiles(tmp_path, monkeypatch):
    """The tiles family (2113 rows: 34 partials) makes the second stage round: the fp16 stage
    is beyond the float yardstick there even where a one-tile family cannot see it."""
    monkeypatch.chdir(tmp_path)
    r = check_backward(spec=_two_stage(1), examples=16, orders=0, families=("tiles",))
    tiles = next(f for f in r.families if f.family == "tiles")
    assert tiles.verdict in ("fail", "warn")
    assert tiles.outputs["dbeta"]["max_scaled"] > 4 * tiles.outputs["dbeta"]["baseline"][
        "max_scaled"]


def test_figures_are_per_output_and_honest():
    r = check_backward(spec=_two_stage(0), examples=8, orders=0, families=("gaussian", "tall"))
    fam = r.families[0]
    assert set(fam.outputs) == {"dgamma", "dbeta"}  # no dx: its figures are not invented
    assert r.max_ulp == max(f.max_ulp for f in r.families) > 0
    assert any(f.outputs["dgamma"]["p99_ulp"] > 0 for f in r.families)
    assert "dgamma max/p99/scaled" in r.render()


def test_the_spread_is_reproducible():
    """Every block order is seeded from the check's seed: identical runs, identical spreads."""
    from normcheck import kernels

    spec = specs.parse({
        "entry": "ln_bwd_good", "norm": "layernorm", "dtype": "fp32",
        "launch": {"grid": "rows", "block": "256"},
        "args": [{"role": "dx"}, {"role": "dgamma", "fill": "zero"},
                 {"role": "dbeta", "fill": "zero"}, {"role": "dy"}, {"role": "input"},
                 {"role": "gamma"}, {"role": "mean"}, {"role": "rstd"}, {"role": "rows"},
                 {"role": "cols"}]})
    spec.source = HERE / "cuda" / "backward_kernels.cu"
    a = check_backward(spec=spec, examples=4, orders=3, seed=5, families=("gaussian",))
    b = check_backward(spec=spec, examples=4, orders=3, seed=5, families=("gaussian",))
    assert a.extra["backward"]["races_ulp"] == b.extra["backward"]["races_ulp"]
    assert a.extra["backward"]["races_ulp"]
    del kernels


def test_a_backward_counterexample_replays(tmp_path, monkeypatch):
    from normcheck import replay

    monkeypatch.chdir(tmp_path)
    sp = tmp_path / "gemma.toml"
    sp.write_text(f'source = "{beside(tmp_path, SRC)}"\nentry = "bwd_dx<float, false, true, 3>"\n'
                  'norm = "gemma_rmsnorm"\ndtype = "fp32"\n[launch]\ngrid = "rows"\n'
                  'block = "256"\n' + "".join(f'[[args]]\nrole = "{r}"\n' for r in
                                              ("dx", "dy", "input", "gamma", "eps", "rows",
                                               "cols")))
    r = check_backward(spec=specs.load(sp), examples=8, orders=0, families=("gaussian",),
                       save_counterexample=str(tmp_path / "bw.npz"))
    assert r.verdict == "fail" and r.counterexample
    text = replay.replay(r.counterexample)
    assert "dx:" in text and "sound bound" in text and "γ where Gemma" in text
    assert text.verdict == "fail" and text.exit_code == 1


# ------------------------------------------------------------------------------------------------
# The oracle, total on its domain
# ------------------------------------------------------------------------------------------------
def test_the_oracle_takes_huge_rows():
    f32 = np.float32
    r = oracle_backward.backward("layernorm", f32([[1, 2]]), f32([[2.0**54, 2.0**55]]),
                                 np.ones(2, np.float32))
    assert np.isfinite(r.dx.exact).all() and r.dbeta.rounded[1] == np.float32(2.0**55)
    r = oracle_backward.backward("rmsnorm", f32([[2.0**60, -2.0**61, 3e38]]),
                                 f32([[1e30, 2, -3e38]]), np.ones(3, np.float32))
    assert np.isfinite(r.dx.exact).all()


def test_a_tie_reached_through_cancellation_is_decided():
    """Rows 2 and 3 have the same irrational rstd and their dy·x̂ cancel exactly: dγ of column 0
    is exactly 1 + 2^-11, a tie in fp16 (between 1 and 1 + 2^-10), which rounds to 1 (even)."""
    x = np.array([[0, 1], [0, 3], [0, 3]], np.float32)
    dy = np.array([[-(2 + 2**-10), .5], [.3, .7], [-.3, -.7]], np.float32)
    r = oracle_backward.backward("layernorm", x, dy, np.ones(2, np.float32), eps=0.75,
                                 param_out="fp16")
    assert r.dgamma.exact[0] == 1 + 2**-11 and r.dgamma.rounded[0] == 1.0


# ------------------------------------------------------------------------------------------------
# Forward causes
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("entry, norm, dtype, block, cause, absent", [
    ("rms_warp_only_fp32", "rmsnorm", "fp32", 64, "a partial reduction",
     "storage format"),
    ("ln_one_pass_fp32", "layernorm", "fp32", 256, "one-pass variance", None),
    ("ln_xhat_fp16", "layernorm", "fp16", 256, "x̂ rounded to the storage format",
     "--reference hf"),
])
def test_forward_causes(entry, norm, dtype, block, cause, absent, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(FWD, entry, norm, dtype, block=block, examples=16, search=0)
    assert r.verdict == "fail" and r.cause and cause in r.cause, r.render()
    assert_headline_agrees(r)
    if absent:
        assert absent not in r.cause
