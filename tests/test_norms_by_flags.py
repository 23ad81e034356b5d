"""A norm is its flags (normcheck.norms.FLAGS): one that combines existing flags is one line,
and the verdict needs no built-in kernel of it (the fail rule is the sound bound; only warn's
yardstick is missing, and the check says so)."""

import json
import subprocess
import sys
from pathlib import Path


import pytest

from normcheck import check, norms
from paths_support import beside

SRC = Path(__file__).parent / "cuda" / "gemma_fused_add.cu"
SPEC = """source = "{src}"
entry = "{entry}"
norm = "{norm}"
dtype = "fp16"
convention = "stored"
[launch]
grid = "rows"
block = "256"
[[args]]
role = ["input", "output"]
[[args]]
role = ["residual", "h"]
[[args]]
role = "gamma"
[[args]]
role = "eps"
[[args]]
role = "rows"
[[args]]
role = "cols"
"""


def _spec(tmp_path, entry, norm="add_gemma_rmsnorm"):
    p = tmp_path / f"{entry}.toml"
    p.write_text(SPEC.format(src=beside(tmp_path, SRC), entry=entry, norm=norm))
    return p


def test_the_flags_say_everything():
    n = norms.get("add_gemma_rmsnorm")
    assert (n.centred, n.gemma, n.fused, n.base) == (False, True, True, "gemma_rmsnorm")
    assert norms.get("add_layernorm").base == "layernorm"
    assert set(norms.NORMS) == set(norms.FLAGS)


def test_flashinfers_gemma_fused_add_rmsnorm_is_judged_without_a_built_in(tmp_path):
    r = subprocess.run([sys.executable, "-m", "normcheck", "check",
                        str(_spec(tmp_path, "gemma_fused_add_rmsnorm")), "--search", "5",
                        "--examples", "8"], capture_output=True, text=True, cwd=tmp_path,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "judged against the sound bound only" in r.stdout and "verdict: PASS" in r.stdout
    assert "no warn: no built-in kernel of this norm and format" in r.stdout
    r = subprocess.run([sys.executable, "-m", "normcheck", "check",
                        str(_spec(tmp_path, "gemma_fused_add_rmsnorm_plain_w")), "--search",
                        "0", "--examples", "8", "--json"], capture_output=True, text=True,
                       cwd=tmp_path, timeout=600)
    d = json.loads(r.stdout)
    assert r.returncode == 1 and d["cause_key"] == "gemma_gamma", d["cause"]


def test_a_norm_that_combines_existing_flags_is_one_line(tmp_path, monkeypatch):
    # the one line: a new name for (not centred, Gemma's 1+γ, fused add)
    monkeypatch.setitem(norms.FLAGS, "add_gemma_rmsnorm_v2", (False, True, True))
    good = check.check_kernel(spec=_spec(tmp_path, "gemma_fused_add_rmsnorm",
                                         "add_gemma_rmsnorm_v2"), search=0, examples=8)
    assert good.verdict == "pass", good.render()
    bad = check.check_kernel(spec=_spec(tmp_path, "gemma_fused_add_rmsnorm_plain_w",
                                        "add_gemma_rmsnorm_v2"), search=0, examples=8)
    assert bad.verdict == "fail" and bad.cause.key == "gemma_gamma", bad.render()


def test_the_command_line_and_the_api_share_one_options_object(tmp_path):
    """normcheck check builds a CheckOptions and calls check.run, as the API can (#33); the
    options one kind of check lacks are refused once, for both."""
    import argparse

    from normcheck import errors
    from normcheck.check import CheckOptions, run
    from normcheck.cli import build_parser

    spec = _spec(tmp_path, "gemma_fused_add_rmsnorm")
    args = build_parser().parse_args(["check", "--spec", str(spec), "--search", "0",
                                      "--examples", "4"])
    opts = CheckOptions.from_args(args)
    assert (opts.spec, opts.search, opts.examples, opts.backward) == (str(spec), 0, 4, False)
    assert run(opts).verdict == "pass"
    with pytest.raises(errors.InvalidArgument, match="--rows=5: expected nothing with --backward"):
        CheckOptions(spec=spec, backward=True, rows=5).for_backward()
    with pytest.raises(errors.InvalidArgument, match="--orders=3: expected nothing without"):
        CheckOptions(spec=spec, orders=3).for_forward()
    with pytest.raises(errors.InvalidArgument, match="colour='red': expected one of "
                       "check_kernel's options"):
        CheckOptions.of(spec=spec, colour="red")
    assert isinstance(args, argparse.Namespace)
