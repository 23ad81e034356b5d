"""A format for every role (#46): fp8 rows in, fp32 master weights beside bf16 rows, statistics
stored in bf16 -- each judged from the values as stored, in its own format, and each bug those
mixes invite caught (tests/cuda/formats/: our own kernels, in the field's styles)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from normcheck import check, families, formats, spec as specs
from normcheck.errors import SpecError

DIR = Path(__file__).parent / "cuda" / "formats"


def _check(name, **kw):
    kw.setdefault("search", 0)
    return check.check_kernel(spec=DIR / f"{name}.toml", examples=16, **kw)


def test_fp32_master_weights_beside_bf16_rows_pass_and_rounding_them_fails(tmp_path,
                                                                          monkeypatch):
    """γ and β at fp32 precision (a weights family: β nearly cancelling γ·x̂, so a weight
    rounded to bf16 is many of y's ulps off): the sound kernel passes, the one that rounds its
    weights to the rows' bf16 fails with that cause -- it passed when every γ tried was a bf16
    value already."""
    monkeypatch.chdir(tmp_path)
    # with the search on, as `normcheck check` runs it: the search drew the weights family
    # as a family of rows and ended in exit 2 before any verdict (#64)
    ok = _check("ln_master_weights", search=12)
    assert ok.verdict == "pass", ok.render()
    assert "weights" in {f.family for f in ok.families}
    bad = _check("ln_weights_to_bf16", search=12)
    assert bad.verdict == "fail", bad.render()
    assert bad.cause.key == "weights_storage"


@pytest.mark.parametrize("fmt,sound,squared", [("e4m3", "rms_fp8_rows", "rms_fp8_squared_in_half"),
                                               ("e5m2", "rms_e5m2_rows",
                                                "rms_e5m2_squared_in_half")])
def test_fp8_rows_pass_and_squaring_them_in_half_fails(tmp_path, monkeypatch, fmt, sound,
                                                       squared):
    """fp8 rows (their values carried in fp16 by the check), fp32 γ, bf16 y: the sound kernel
    passes; squaring in half overflows from |x| >= 256 (448² = 200704; e5m2 reaches 57344) and
    fails, named.  e5m2 is one registry entry and its families' parameters."""
    monkeypatch.chdir(tmp_path)
    ok = _check(sound)
    assert ok.verdict == "pass", ok.render()
    assert ok.dtype == fmt and ok.out_dtype == "bf16"
    bad = _check(squared)
    assert bad.verdict == "fail", bad.render()
    assert bad.cause.key == "squares_storage"


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_statistics_stored_in_bf16_are_judged_in_bf16(tmp_path, monkeypatch):
    """Liger's LayerNorm stores Mean and RSTD as the rows' bf16: judged in bf16 ulps it passes
    (in float ulps, one correct rounding to bf16 read as 2.7e4 ulps off)."""
    monkeypatch.chdir(tmp_path)
    r = _check("liger_ln_bf16_stats")
    assert r.verdict == "pass", r.render()
    assert not r.failures


def test_fp8_rows_are_built_to_hurt_fp8():
    """Every value an e4m3 family makes is an e4m3 value (carried in fp16), the large family
    saturates at 448 and squares past fp16's range, and the tiny family reaches e4m3's
    subnormals."""
    e4m3 = formats.lookup("e4m3")
    vals = set(e4m3.values())
    for fam in ("gaussian", "offset", "fp16_large", "tiny", "outlier", "special"):
        x = families.generate(fam, "e4m3", 7, 768, seed=3)
        assert x.dtype == np.float16
        fin = x[np.isfinite(x)].astype(np.float64)
        assert set(np.unique(fin)) <= vals, fam
    big = families.generate("fp16_large", "e4m3", 7, 768, seed=3).astype(np.float64)
    assert np.abs(big).max() == 448 and (np.abs(big) >= 256).mean() > 0.9
    tiny = np.abs(families.generate("tiny", "e4m3", 7, 768, seed=3).astype(np.float64))
    assert ((tiny > 0) & (tiny < e4m3.min_normal)).any()


def test_dtypes_name_each_roles_format():
    assert specs.parse_dtypes("x=e4m3,gamma=fp32,y=bf16") == {
        "input": "e4m3", "gamma": "fp32", "output": "bf16"}
    with pytest.raises(SpecError, match=r"x='int8': expected one of fp32, fp16, bf16, e4m3"):
        specs.parse_dtypes("x=int8")
    with pytest.raises(SpecError, match=r"gamma='e4m3': expected one of fp32, fp16, bf16"):
        specs.parse_dtypes({"gamma": "e4m3"})
    with pytest.raises(SpecError, match=r"weight='fp32': expected a role"):
        specs.parse_dtypes({"weight": "fp32"})
    with pytest.raises(SpecError, match="dtypes = { x = \"e4m3\" }"):
        specs.parse({"dtype": "e4m3", "norm": "rmsnorm", "eps": 1e-5,
                     "launch": {"grid": "rows"}, "args": [{"role": "output"}]})


def test_dtypes_on_the_command_line(tmp_path, monkeypatch, capsys):
    """--dtypes x=e4m3,gamma=fp32: the default ABI with fp8 rows and fp32 γ."""
    from normcheck.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main(["check", str(DIR / "mixed.cu"), "--entry", "rms_fp8_rows", "--norm", "rmsnorm",
               "--dtype", "bf16", "--dtypes", "x=e4m3,gamma=fp32", "--examples", "4",
               "--search", "0"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "(rmsnorm, e4m3 -> bf16" in out


def test_e5m2_rows_are_e5m2_values_and_reach_its_range():
    """e5m2 rows (#46's one registry entry): every value an e5m2 value, the large family beyond
    fp16's squares (|x| >= 256) up to e5m2's 57344."""
    e5m2 = formats.lookup("e5m2")
    vals = set(e5m2.values())
    for fam in ("gaussian", "offset", "fp16_large", "tiny", "outlier"):
        x = families.generate(fam, "e5m2", 5, 512, seed=1)
        fin = x[np.isfinite(x)].astype(np.float64)
        assert set(np.unique(fin)) <= vals, fam
    big = np.abs(families.generate("fp16_large", "e5m2", 5, 512, seed=1).astype(np.float64))
    assert big.min() >= 256 and big.max() <= 57344


def test_a_backward_of_bf16_statistics_is_judged_from_the_statistics_as_stored(
        tmp_path, monkeypatch):
    """The saved mean and rstd in bf16: the exact dx is the gradient of the statistics the
    kernel receives (as the forward's is of x as stored); judged against float32's, a sound
    kernel failed at 28.5x the bound (#64).  The spec says backward = true: no --backward."""
    from normcheck.cli import main

    monkeypatch.chdir(tmp_path)
    r = check.run(check.CheckOptions(spec=DIR / "ln_backward_bf16_stats.toml", examples=16))
    assert r.kind == "backward" and r.verdict == "pass", r.render()
    assert main(["check", "--spec", str(DIR / "ln_backward_bf16_stats.toml"), "--examples",
                 "8", "-q"]) == 0
