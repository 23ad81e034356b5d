"""The backward: the exact gradients against mpmath (ties included), the built-in backward kernels,
planted backward bugs that must fail with their cause, and the atomics' run-to-run spread."""

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import mpmath
import numpy as np
import pytest

from normcheck import bounds, errors, formats, kernels, oracle
from normcheck.oracle import backward as ob
from normcheck.check import check_backward
from paths_support import beside

BW = kernels.CUDA_SRC / "backward.cu"
TEST_KERNELS = Path(__file__).parent / "cuda" / "backward_kernels.cu"


def _truth(x, dy, g, *, fmt, pfmt="fp32", centred=True, gemma=False, mean=None, rstd=None,
           dh=None):
    """dx (rounded to fmt) and dγ, dβ (rounded to pfmt) from mpmath at 256 bits."""
    f, pf = formats.get(fmt), formats.get(pfmt)
    dxs, terms = [], []
    for i in range(len(x)):
        dx, t = ob.mp_backward(x[i], dy[i], g, centred=centred, gemma=gemma,
                               mean=None if mean is None else mean[i],
                               rstd=None if rstd is None else rstd[i])
        if dh is not None:
            dx = [a + mpmath.mpf(float(b)) for a, b in zip(dx, dh[i])]
        dxs.append([f.round(v) for v in dx])
        terms.append(t)
    with mpmath.workprec(256):
        dg = [pf.round(mpmath.fsum(terms[i][j] for i in range(len(x))))
              for j in range(len(x[0]))]
        db = [pf.round(mpmath.fsum(mpmath.mpf(float(dy[i][j])) for i in range(len(x))))
              for j in range(len(x[0]))]
    return np.array(dxs), np.array(dg), np.array(db)


def _same(a, b):
    return np.array_equal(np.asarray(a, np.float64), np.asarray(b, np.float64))


def _rows(fmt, rows, cols, kind, seed=21):
    f = formats.get(fmt)
    RNG = np.random.default_rng([seed, rows, cols, f.bits])
    z = RNG.standard_normal((rows, cols))
    if kind == "biased":  # x̂ ≈ 1 for RMSNorm: every dy·x̂ ≈ 0.5 too
        z = 2 + 0.1 * z
    if kind == "offset":
        z = z + {"fp32": 1e5, "fp16": 100.0, "bf16": 30.0}[fmt]
    x = f.cast(z)
    xv = x.astype(np.float64)
    if kind == "correlated":
        xh = (xv - xv.mean(axis=1, keepdims=True)) / xv.std(axis=1, keepdims=True)
        dy = f.cast(xh + 1e-3 * RNG.standard_normal((rows, cols)))
    elif kind == "constant":
        dy = f.cast(np.full((rows, cols), 0.5))
    elif kind == "biased":
        dy = f.cast(0.5 + 0.1 * RNG.standard_normal((rows, cols)))
    else:
        dy = f.cast(RNG.standard_normal((rows, cols)))
    return x, dy


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "gemma_rmsnorm"])
@pytest.mark.parametrize("kind", ["gaussian", "offset", "correlated", "constant"])
def test_gradients_match_mpmath(fmt, norm, kind):
    centred, gemma = norm == "layernorm", norm.startswith("gemma")
    f = formats.get(fmt)
    x, dy = _rows(fmt, 3, 33, kind)
    g = f.cast(1 + 0.1 * np.random.default_rng(1).standard_normal(33))
    ref = ob.backward(norm, x, dy, g)
    dx, dg, db = _truth(x, dy, g, fmt=fmt, centred=centred, gemma=gemma)
    assert _same(ref.dx.rounded, dx)
    assert _same(ref.dgamma.rounded, dg)
    if centred:
        assert _same(ref.dbeta.rounded, db)
    else:
        assert ref.dbeta is None
    # with the forward pass's saved statistics
    m, r = oracle.saved_statistics(norm, x)
    ref = ob.backward(norm, x, dy, g, stats="saved", mean=m, rstd=r, param_out=fmt)
    dx, dg, _ = _truth(x, dy, g, fmt=fmt, pfmt=fmt, centred=centred, gemma=gemma, mean=m, rstd=r)
    assert _same(ref.dx.rounded, dx) and _same(ref.dgamma.rounded, dg)


@pytest.mark.parametrize("convention", ["exact", "stored"])
def test_the_fused_add_backward_with_the_residual_stream(convention):
    f = formats.FP16
    x, dy = _rows("fp16", 2, 17, "gaussian")
    rng = np.random.default_rng(2)
    res = f.cast(rng.standard_normal((2, 17)) * 30)
    dh = f.cast(rng.standard_normal((2, 17)))
    g = f.cast(1 + 0.1 * rng.standard_normal(17))
    ref = ob.backward("add_rmsnorm", x, dy, g, residual=res, dh=dh, convention=convention)
    if convention == "exact":
        h = [[Fraction(float(a)) + Fraction(float(b)) for a, b in zip(r1, r2)]
             for r1, r2 in zip(x, res)]
    else:
        h = f.cast(x.astype(np.float64) + res.astype(np.float64))
    dx, dg, _ = _truth(h, dy, g, fmt="fp16", centred=False, dh=dh)
    assert _same(ref.dx.rounded, dx) and _same(ref.dgamma.rounded, dg)


def test_ties_round_to_even():
    # dβ of a column [1, 2^-24] is 1 + 2^-24: halfway between two floats, rounded to 1
    x = np.array([[0.0, 1.0], [2.0, 5.0]], np.float32)
    dy = np.array([[1.0, 3.0], [2.0**-24, 1.0]], np.float32)
    ref = ob.backward("layernorm", x, dy, np.ones(2, np.float32))
    assert ref.dbeta.rounded[0] == np.float32(1.0) and ref.dbeta.exact[0] == 1 + 2.0**-24
    # a dx exactly halfway between two fp16 values (saved statistics make dx rational): found
    # by a seeded search over small dyadic rows, then decided as Fraction arithmetic decides it
    rng = np.random.default_rng(5)
    f = formats.FP16
    for _ in range(20000):
        x = f.cast(rng.integers(-4, 5, (1, 3)) / 4.0)
        dy = f.cast(rng.integers(-8, 9, (1, 3)) / 8.0)
        m = np.float32(rng.integers(-4, 5) / 8.0)
        r = np.float32(2.0 ** rng.integers(-3, 4) * (1 + rng.integers(0, 4) / 4))
        ref = ob.backward("layernorm", x, dy, None, stats="saved", mean=np.array([m]),
                          rstd=np.array([r]))
        xh = [(Fraction(float(v)) - Fraction(float(m))) * Fraction(float(r)) for v in x[0]]
        gs = [Fraction(float(v)) for v in dy[0]]
        gb, gx = sum(gs) / 3, sum(a * b for a, b in zip(gs, xh)) / 3
        exact = [Fraction(float(r)) * (gs[j] - gb - xh[j] * gx) for j in range(3)]
        ties = [j for j, v in enumerate(exact) if v != 0 and
                abs(v - Fraction(f.round(v))) == Fraction(f.ulp(v)) / 2]
        assert [f.round(v) for v in exact] == list(ref.dx.rounded[0].astype(np.float64))
        if ties:
            break
    else:
        pytest.fail("no tie found")


def test_bad_arguments():
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(errors.InvalidArgument, match="dy=.*shape"):
        ob.backward("layernorm", x, np.zeros((2, 3), np.float32))
    with pytest.raises(errors.InvalidArgument, match="stats='cached'"):
        ob.backward("layernorm", x, x, stats="cached")
    with pytest.raises(errors.InvalidArgument, match="rstd=None"):
        ob.backward("layernorm", x, x, stats="saved", mean=np.zeros(2))
    with pytest.raises(errors.InvalidArgument, match="residual"):
        ob.backward("add_layernorm", x, x)


# -- the built-in backward kernels ----------------------------------------------------------------
def test_saved_statistics_are_the_forward_oracles():
    x, _ = _rows("fp16", 5, 77, "offset")
    for norm in ("layernorm", "rmsnorm"):
        fw = oracle.for_norm(norm, x)
        m, r = oracle.saved_statistics(norm, x)
        assert _same(r, fw.rstd.rounded) and r.dtype == np.float32
        assert (m is None) if norm == "rmsnorm" else _same(m, fw.mean.rounded)
    with pytest.raises(errors.InvalidArgument, match="norm='add_rmsnorm'"):
        oracle.saved_statistics("add_rmsnorm", x)


@pytest.mark.parametrize("v", kernels.variants(kind="dx"), ids=lambda v: v.name)
def test_dx_kernels_against_the_sound_bound(v):
    """The stable and naive kernels stay within the sound bound on gaussian rows (the naive one
    fails on offset rows, below); the article's formula does not (γ ≠ 1)."""
    f = v.fmt
    x, dy = _rows(v.storage, 9, 300, "gaussian")
    g = f.cast(1 + 0.3 * np.random.default_rng(3).standard_normal(300))
    m, r = oracle.saved_statistics(v.norm, x)
    dx = kernels.run_backward_dx(v, x, dy, g, m, r)
    ref = ob.backward(v.norm, x, dy, g, stats="saved", mean=m, rstd=r)
    E = bounds.sound_backward(v.norm, x, dy, g, mean=m, rstd=r)["dx"]
    ok = np.abs(dx.astype(np.float64) - ref.dx.exact) <= bounds.sound_limit(ref.dx, E)
    assert ok.all() == (v.algorithm != "article")


def test_the_naive_dx_fails_on_offset_rows():
    x, dy = _rows("fp32", 9, 768, "offset")
    m, r = oracle.saved_statistics("layernorm", x)
    g = np.ones(768, np.float32)
    E = bounds.sound_backward("layernorm", x, dy, g, mean=m, rstd=r)["dx"]
    ref = ob.backward("layernorm", x, dy, g, stats="saved", mean=m, rstd=r)
    lim = bounds.sound_limit(ref.dx, E)
    for algo, fails in (("stable", False), ("naive", True)):
        dx = kernels.run_backward_dx(f"layernorm_backward_dx_{algo}_fp32", x, dy, g, m, r)
        assert (np.abs(dx.astype(np.float64) - ref.dx.exact) > lim).any() == fails, algo


@pytest.mark.parametrize("v", kernels.variants(kind="dparams"), ids=lambda v: v.name)
def test_dparams_kernels_against_the_sound_bound(v):
    """Float sums (atomics or partials) are within the bound; sums in fp16/bf16 are not, over
    4097 rows of dy ≈ 0.5 (the partial sums reach 2048, where fp16 steps by 2 and adding 0.5
    rounds away)."""
    x, dy = _rows(v.storage, 4097, 7, "biased")
    m, r = oracle.saved_statistics(v.norm, x)
    dg, db = kernels.run_backward_dparams(v, x, dy, m, r)
    ref = ob.backward(v.norm, x, dy, np.ones(7, x.dtype), stats="saved", mean=m, rstd=r,
                      param_out=v.param_fmt.name)
    E = bounds.sound_backward(v.norm, x, dy, None, mean=m, rstd=r)
    ok = (np.abs(dg.astype(np.float64) - ref.dgamma.exact) <=
          bounds.sound_limit(ref.dgamma, E["dgamma"])).all()
    if v.has_beta:  # LayerNorm: dβ = Σdy grows; its dγ terms have either sign
        ok &= (np.abs(db.astype(np.float64) - ref.dbeta.exact) <=
               bounds.sound_limit(ref.dbeta, E["dbeta"])).all()
    assert ok == (v.algorithm != "storage")


def test_atomics_race_and_partials_do_not():
    """Seeded block orders change the atomic kernel's dγ, never the two-launch partial sums."""
    x, dy = _rows("fp32", 257, 64, "gaussian")
    m, r = oracle.saved_statistics("layernorm", x)
    outs = {}
    for algo in ("atomic", "partial"):
        outs[algo] = [kernels.run_backward_dparams(f"layernorm_backward_dparams_{algo}_fp32",
                                                   x, dy, m, r, schedule="random", seed=s,
                                                   workers=1)[0] for s in range(4)]
    assert any(not np.array_equal(outs["atomic"][0], o) for o in outs["atomic"][1:])
    assert all(np.array_equal(outs["partial"][0], o) for o in outs["partial"][1:])


# -- check --backward: good kernels pass, planted bugs fail with their cause -----------------------
def _spec(tmp_path, entry, roles, grid="rows", dtypes=None, name="s.toml"):
    lines = [f'source = "{beside(tmp_path, TEST_KERNELS)}"', f'entry = "{entry}"', 'norm = "layernorm"',
             'dtype = "fp32"', "[launch]", f'grid = "{grid}"', 'block = "256"']
    for r in roles:
        lines.append("[[args]]")
        lines.append(f'role = "{r}"')
        if r in ("dgamma", "dbeta") and grid == "rows":
            lines.append('fill = "zero"')
        if dtypes and r in dtypes:
            lines.append(f'dtype = "{dtypes[r]}"')
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


FUSED = ["dx", "dgamma", "dbeta", "dy", "input", "gamma", "mean", "rstd", "rows", "cols"]
PARAMS = ["dgamma", "dbeta", "dy", "input", "mean", "rstd", "rows", "cols"]
PARAMS_GAMMA = ["dgamma", "dbeta", "dy", "input", "gamma", "mean", "rstd", "rows", "cols"]


def test_sound_backward_kernels_pass():
    for e in ("layernorm_backward_dx_stable_fp16", "rmsnorm_backward_dx_stable_bf16"):
        norm = e.split("_")[0]
        r = check_backward(BW, e, norm, e.rsplit("_", 1)[1], examples=8)
        assert r.verdict == "pass", r.render()


def test_an_llmc_style_fused_backward_passes_and_its_atomics_are_measured(tmp_path):
    r = check_backward(spec=_spec(tmp_path, "ln_bwd_good", FUSED), examples=8, orders=4)
    assert r.verdict == "pass", r.render()
    races = r.extra["backward"]["races_ulp"]
    assert races and max(races.values()) > 0  # float atomics in 4 orders: not bit-reproducible
    assert "nondeterminism" in r.render()


def test_a_backward_check_makes_every_run_and_says_so(tmp_path):
    """A backward kernel gets the padded-rows and large-index runs a forward one gets (#66: it
    got the families alone, and its first fault ended the check): the llm.c-style kernel's
    dx of the last rows past 2^31 and 2^32 elements is within the bound; its twin with an int
    row offset fails there at its line; every run is in the coverage, made or why not."""
    r = check_backward(spec=_spec(tmp_path, "ln_bwd_good", FUSED), examples=4, orders=2)
    assert r.verdict == "pass", r.render()
    cov = {d["run"]: d for d in r.detail.coverage}
    assert cov["large index 2^31"]["ran"] and cov["large index 2^32"]["ran"], cov
    assert cov["block orders"]["ran"] and cov["hazard build"]["ran"], cov
    assert not cov["padded rows"]["ran"] and "pitch" in cov["padded rows"]["why"], cov
    big = {fr.family: fr for fr in r.families}
    assert big["large_index"].rows == 7 and 0 < big["large_index"].max_of_bound <= 1
    assert "ran: families" in r.render() and r.as_dict()["coverage"]
    bad = check_backward(spec=_spec(tmp_path, "ln_bwd_int_offset", FUSED, name="bad.toml"),
                         examples=4, orders=0)
    f = next((f for f in bad.failures if f.family == "large_index"), None)
    assert f is not None and f.kind == "out_of_bounds", bad.render()
    assert "wrapped to 32 bits" in f.detail and "backward_kernels.cu:3" in f.detail, f.detail
    assert {g.family for g in bad.failures} == {"large_index"}, bad.render()


@pytest.mark.parametrize("entry,roles,grid,dtypes,cause", [
    ("ln_bwd_gamma_dropped", FUSED, "rows", None, "γ left out of dx"),
    ("ln_bwd_no_mean_term", FUSED, "rows", None, "mean term of dx missing"),
    ("ln_dparams_dbeta_half", PARAMS, "ceil_div(cols, 256)", {"dbeta": "fp16"},
     "dbeta summed in fp16"),
    ("ln_dparams_wrong_axis", PARAMS, "ceil_div(cols, 256)", None,
     "dgamma summed over the wrong axis"),
    ("ln_dparams_gamma_inside", PARAMS_GAMMA, "ceil_div(cols, 256)", None, "dγ with γ in it"),
])
def test_planted_backward_bugs_fail_with_their_cause(tmp_path, monkeypatch, entry, roles, grid,
                                                      dtypes, cause):
    monkeypatch.chdir(tmp_path)
    # at the default --orders: the dγ/dβ kernels are also run in seeded block orders (a reused
    # loop variable there once crashed every failing dγ/dβ check with an AttributeError)
    r = check_backward(spec=_spec(tmp_path, entry, roles, grid, dtypes), examples=8)
    assert r.verdict == "fail", r.render()
    assert any(f.kind == "accuracy" and f.cause and cause in f.cause for f in r.failures), \
        r.render()
    assert r.extra["backward"]["orders"] == 8 and (
        not {"dgamma", "dbeta"} & set(roles) or r.extra["backward"]["races_ulp"])
    assert r.counterexample and Path(r.counterexample).is_file()


def test_cli_backward_exit_codes(tmp_path):
    base = [sys.executable, "-m", "normcheck", "check", "--backward", str(BW), "--norm",
            "layernorm", "--dtype", "fp16", "--examples", "4", "--orders", "0"]
    ok = subprocess.run(base + ["--entry", "layernorm_backward_dx_stable_fp16"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    bad = subprocess.run(base + ["--entry", "layernorm_backward_dx_article_fp16"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "likely cause: γ left out of dx" in bad.stdout
    wrong = subprocess.run(base + ["--entry", "layernorm_backward_dx_stable_fp16", "--rows",
                                   "10"], capture_output=True, text=True)
    assert wrong.returncode == 2 and "--rows=10" in wrong.stderr
    # a failing dγ/dβ kernel at the default --orders: a fail with its cause, not a crash
    spec = _spec(tmp_path, "ln_dparams_wrong_axis", PARAMS, "ceil_div(cols, 256)")
    axis = subprocess.run([sys.executable, "-m", "normcheck", "check", "--backward", "--spec",
                           str(spec), "--examples", "4", "--json"], capture_output=True,
                          text=True, cwd=tmp_path)
    assert axis.returncode == 1, axis.stderr
    d = json.loads(axis.stdout)
    assert d["cause_key"] == "dgamma_axis" and d["backward"]["orders"] == 8
