"""Kernel specs: several launches on shared buffers, scratch, null pointers, defines, width
contracts, affine-free norms, in-place buffers -- and the faults real kernels make, named."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from normcheck import check, errors, families, launch, norms, spec as specs
from paths_support import beside

SRC = Path(__file__).parent / "cuda" / "specs.cu"


def _spec(text, tmp_path, name="k.toml"):
    p = tmp_path / name
    p.write_text(f'source = "{beside(tmp_path, SRC)}"\n' + text)
    return p


TWO_LAUNCH = '''
norm = "rmsnorm"
dtype = "fp32"
defines = { SCALE = 1 }

[[launch]]
entry = "rms_stats"
grid = "rows"
block = "128"
shared_mem = "128 * 4"
[[launch.args]]
role = "scratch"
name = "r"
dtype = "fp32"
size = "rows"
[[launch.args]]
role = "input"
[[launch.args]]
role = "rows"
[[launch.args]]
role = "cols"
[[launch.args]]
role = "eps"

[[launch]]
entry = "rms_apply"
grid = "rows"
block = "128"
[[launch.args]]
role = "output"
[[launch.args]]
role = "input"
[[launch.args]]
role = "scratch"
name = "r"
dtype = "fp32"
size = "rows"
[[launch.args]]
role = "gamma"
[[launch.args]]
role = "null"
name = "unused"
[[launch.args]]
role = "rows"
[[launch.args]]
role = "cols"
'''


def test_two_launches_share_a_scratch_buffer_and_pass_a_null_pointer(tmp_path):
    r = check.check_kernel(None, spec=_spec(TWO_LAUNCH, tmp_path), search=10, timeout=20)
    # thread 0 adds the 128 partial sums in turn: a sound order, worse than the block tree
    assert r.verdict in ("pass", "warn") and not r.failures, r.render()
    assert "rms_stats" in r.kernel and "rms_apply" in r.kernel


def test_defines_come_from_the_spec_and_the_command_line(tmp_path):
    text = TWO_LAUNCH.replace("defines = { SCALE = 1 }\n", "")
    p = _spec(text, tmp_path)
    with pytest.raises(errors.CompileError, match="build with -D SCALE=1"):
        check.check_kernel(None, spec=p, search=0)
    bad = check.check_kernel(None, spec=p, defines={"SCALE": 2}, search=0, examples=8)
    assert bad.verdict == "fail"
    cli = subprocess.run([sys.executable, "-m", "normcheck", "check", "--spec", str(p), "-D",
                          "SCALE=1", "--search", "5", "--examples", "16"],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stdout + cli.stderr


def test_affine_free_norm_has_gamma_one(tmp_path):
    p = _spec('''entry = "rms_plain"
norm = "rmsnorm"
dtype = "fp32"
defines = { SCALE = 1 }
[launch]
grid = "rows"
block = "64"
shared_mem = "64 * 4"
[[args]]
role = "output"
[[args]]
role = "input"
[[args]]
role = "rows"
[[args]]
role = "cols"
[[args]]
role = "eps"
''', tmp_path)
    r = check.check_kernel(None, spec=p, search=10, timeout=20)
    assert r.verdict in ("pass", "warn") and not r.failures, r.render()
    assert "no γ" in r.norm_desc


def test_a_row_guard_that_lets_row_n_through_is_out_of_bounds(tmp_path):
    p = _spec('''entry = "rms_row_guard"
norm = "rmsnorm"
dtype = "fp32"
defines = { SCALE = 1 }
[launch]
grid = "ceil_div(rows, 4)"
block = "128"
[[args]]
role = "output"
[[args]]
role = "input"
[[args]]
role = "gamma"
[[args]]
role = "rows"
[[args]]
role = "cols"
[[args]]
role = "eps"
''', tmp_path)
    r = check.check_kernel(None, spec=p, search=0, timeout=20)
    assert r.verdict == "fail"
    oob = [f for f in r.failures if f.kind == "out_of_bounds"]
    assert oob and "read of element" in oob[0].detail and "`input`" in oob[0].detail, r.render()


def test_a_misaligned_vector_load_is_named(tmp_path):
    p = _spec('''entry = "rms_float4"
norm = "rmsnorm"
dtype = "fp32"
defines = { SCALE = 1 }
[launch]
grid = "rows"
block = "64"
shared_mem = "64 * 4"
[[args]]
role = "output"
[[args]]
role = "input"
[[args]]
role = "gamma"
[[args]]
role = "rows"
[[args]]
role = "cols"
[[args]]
role = "eps"
''', tmp_path)
    r = check.check_kernel(None, spec=p, search=0, timeout=20)
    mis = [f for f in r.failures if f.kind == "misaligned"]
    assert mis, r.render()
    assert "misaligned 16-byte load of argument 1 `input`" in mis[0].detail
    assert "null pointer" not in mis[0].detail
    # with the width contract the kernel states, it is never run misaligned
    p.write_text(p.read_text().replace('dtype = "fp32"\n', 'dtype = "fp32"\ncols_multiple_of = 4\n'))
    r = check.check_kernel(None, spec=p, search=10, timeout=20)
    assert not [f for f in r.failures if f.kind == "misaligned"], r.render()
    assert all(c % 4 == 0 for f in r.families for c in f.cols)


def test_widths_honour_the_contract():
    assert families.widths("tails", (1, 8192), 8) == [8, 32, 40, 256, 264, 4104]
    assert all(c % 64 == 0 for c in families.widths("tails", (64, 8192), 64))
    assert families.widths("gaussian", (1, 500), 1) == [500]


def test_in_place_roles_are_one_buffer(tmp_path):
    sp = specs.parse({"norm": "add_rmsnorm", "dtype": "fp16", "entry": "k",
                      "args": [{"role": ["input", "output"]}, {"role": ["h", "residual"]},
                               {"role": "gamma"}, {"role": "eps"}]})
    assert sp.args[0].roles == ("input", "output") and sp.args[1].roles == ("residual", "h")
    assert set(sp.roles()) >= {"input", "output", "residual", "h"}
    # the sum written over x (xFormers' in-place fused add) is one buffer too
    sp = specs.parse({"norm": "add_rmsnorm", "dtype": "fp16", "entry": "k",
                      "args": [{"role": ["input", "h"]}, {"role": "residual"},
                               {"role": "output"}, {"role": "gamma"}, {"role": "eps"}]})
    assert sp.args[0].roles == ("input", "h")
    with pytest.raises(errors.SpecError, match=r"role=\['gamma', 'h'\]"):
        specs.parse({"args": [{"role": ["gamma", "h"]}, {"role": "eps"}]})


@pytest.mark.parametrize("data,match", [
    ({"args": [{"role": "output"}, {"role": "input"}, {"role": "eps"}],
      "launch": {"grid": "rows // (cols - cols)"}}, None),
    ({"args": [{"role": "output"}, {"role": "input"}, {"role": "eps"}],
      "launch": {"grid": "rows * width"}}, "unknown name 'width'"),
    ({"args": [{"role": "output"}, {"role": "input"}, {"role": "eps"},
               {"role": "scratch", "name": "s", "dtype": "fp32"}]}, "size"),
    ({"args": [{"role": "output"}, {"role": "input"}, {"role": "eps"}], "cols": [1, 7],
      "cols_multiple_of": 8}, "cols_multiple_of=8"),
    ({"launch": [{"grid": "rows", "args": [{"role": "output"}]}]}, "entry"),
])
def test_spec_errors_name_the_key(data, match):
    if match is None:  # valid syntax, a division by zero when evaluated
        sp = specs.parse(data)
        with pytest.raises(errors.SpecError, match=r"division by zero at rows=4, cols=8"):
            specs.evaluate_dims(sp.launches[0].grid, 4, 8, "launch.grid")
        return
    with pytest.raises(errors.SpecError, match=match):
        specs.parse(data)


def test_a_grid_past_cudas_limit_is_an_argument_error_not_the_kernels(tmp_path):
    p = _spec(TWO_LAUNCH.replace('grid = "rows"\nblock = "128"\nshared_mem',
                                 'grid = "rows * 4294967296"\nblock = "128"\nshared_mem', 1),
              tmp_path)
    with pytest.raises(errors.InvalidArgument, match=r"grid\.x=\d+: expected at most 2147483647"):
        check.check_kernel(None, spec=p, search=0)
    p = _spec(TWO_LAUNCH.replace('shared_mem = "128 * 4"', 'shared_mem = "1 << 40"', 1)
              .replace('shared_mem = "1 << 40"', 'shared_mem = "1099511627776"'), tmp_path)
    with pytest.raises(errors.InvalidArgument, match=r"shared_mem=1099511627776.*227 KiB"):
        check.check_kernel(None, spec=p, search=0)


def test_launch_binds_buffers_by_role(tmp_path):
    sp = specs.load(_spec(TWO_LAUNCH, tmp_path))
    t = launch.bind(sp, SRC, norm=norms.get("rmsnorm"), dtype="fp32")
    x = np.ones((3, 5), np.float32)
    out = t(launch.Case(x=x, gamma=np.ones(5, np.float32)))
    assert set(out) == {"output"} and out["output"].shape == (3, 5)
    assert np.allclose(out["output"], 1 / np.sqrt(1 + 1e-5))
