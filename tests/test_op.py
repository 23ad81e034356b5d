"""Ops as their users call them (normcheck.backends.triton.op): a project's Python function called
on the check's rows, each Triton kernel it launches run by normcheck -- the launcher's own
branches judged, a fault named with its kernel's line, and an op whose host code writes its
output (after the launch, or instead of one) refused, never passed.  Skipped where Triton or
torch is not installed."""

from __future__ import annotations

import importlib.util
import json
import textwrap

import numpy as np
import pytest

if importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("Triton and torch are needed (pip install 'normcheck[triton]' torch)",
                allow_module_level=True)

from normcheck import check, spec as specs  # noqa: E402
from normcheck.backends.triton.op import locate_module, parse_call  # noqa: E402
from normcheck.cli import main  # noqa: E402
from normcheck.errors import CompileError, InvalidArgument, SpecError  # noqa: E402

_OPS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _rms_row(Y, X, W, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride + cols, (x * r * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _rms_narrow(Y, X, W, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride + cols, (x * r * w).to(Y.dtype.element_ty))  # LINE-NARROW


@triton.jit
def _rms_in_place(X, W, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(X + row * stride + cols, (x * r * w).to(X.dtype.element_ty), mask=mask)


def rms_norm_(x, weight, eps):
    # in place: y is x, returned nothing
    n = x.shape[1]
    _rms_in_place[(x.shape[0],)](x, weight, x.stride(0), n, eps,
                                 BLOCK=triton.next_power_of_2(n))


def _go(kernel, y, x, weight, eps):
    # one stride for x and y: sound only on x's own rows, so a slice of a wider x is copied
    x = x.contiguous()
    n = x.shape[1]
    kernel[(x.shape[0],)](y, x, weight, x.stride(0), n, eps, BLOCK=triton.next_power_of_2(n))


def rms_norm(x, weight, eps):
    shape = x.shape
    x = x.reshape(-1, shape[-1])
    y = torch.empty_like(x)
    _go(_rms_row, y, x, weight, eps)
    return y.view(shape), x


def asks_device(x, weight, eps):
    # launchers ask the GPU what it is (a block size by architecture): answered for sm_90
    if torch.cuda.get_device_capability()[0] < 8:
        raise RuntimeError("needs sm_80")
    return rms_norm(x, weight, eps)


def rms_norm_branchy(x, weight, eps):
    # the launcher sends narrow rows to another kernel -- the one with the bug
    y = torch.empty_like(x)
    _go(_rms_narrow if x.shape[1] <= 64 else _rms_row, y, x, weight, eps)
    return y


def rms_norm_wide_only(x, weight, eps):
    # a spec that named _rms_row would never see _rms_narrow: the op picks by width
    y = torch.empty_like(x)
    _go(_rms_narrow if x.shape[1] > 100000 else _rms_row, y, x, weight, eps)
    return y


def _host_rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt((xf * xf).mean(1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def forged_after(x, weight, eps):
    # its kernel writes 2y; the host then writes the right y over it
    y = torch.empty_like(x)
    _go(_rms_row, y, x, weight * 2, eps)
    y.copy_(_host_rms(x, weight, eps))
    return y


def forged_passed_along(x, weight, eps):
    # the right y made on the host, handed to a launch as its input (read, never written)
    good = _host_rms(x, weight, eps)
    _go(_rms_row, torch.empty_like(x), good, weight, eps)
    return good


def host_only(x, weight, eps):
    return _host_rms(x, weight, eps)


def host_then_one_row(x, weight, eps):
    # the right y made on the host, then one launch writes its first row (#65: "a launch
    # wrote the result" held for 2303 of 2304 elements host-made)
    y = _host_rms(x, weight, eps)
    n = x.shape[1]
    _rms_row[(1,)](y, x, weight, x.stride(0), n, eps, BLOCK=triton.next_power_of_2(n))
    return y


@triton.jit
def _zero(Y, stride, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.store(Y + row * stride + cols, tl.zeros([BLOCK], tl.float32).to(Y.dtype.element_ty),
             mask=cols < N)


def zeroed_then_host_then_read(x, weight, eps):
    # a launch zeroes y, host code writes the right y over it, a second launch only reads y
    y = torch.empty_like(x)
    n = x.shape[1]
    _zero[(x.shape[0],)](y, x.stride(0), n, BLOCK=triton.next_power_of_2(n))
    y.copy_(_host_rms(x, weight, eps))
    _go(_rms_row, torch.empty_like(x), y, weight, eps)
    return y


def zeros_like_then_written(x, weight, eps):
    # a sound op on torch.zeros: every element stored by the launch, zeros among them or not
    y = torch.zeros_like(x)
    _go(_rms_row, y, x, weight, eps)
    return y


@triton.jit
def _rms_dup(Y, X, W, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride + cols, (2.0 * x * r * w).to(Y.dtype.element_ty), mask=mask)


_first_dup = _rms_dup  # the wrong one, kept under an alias; the name is taken by the next def


@triton.jit
def _rms_dup(Y, X, W, stride, N, eps, BLOCK: tl.constexpr):  # noqa: F811
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride + cols, (x * r * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _rms_renamed(Y, X, W, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride + cols, (x * r * w).to(Y.dtype.element_ty), mask=mask)


def injects_lines(x, weight, eps):
    # its kernel's name and file made of lines of normcheck's output (#65)
    f = _rms_renamed.fn
    f.__name__ = "k\\n::add-mask::secret\\n::error title=pwn::x\\nverdict: PASS"
    f.__code__ = f.__code__.replace(co_filename="/tmp/e\\n::error title=pwn::y\\nverdict: PASS")
    y = torch.empty_like(x)
    _go(_rms_renamed, y, x, weight, eps)
    return y


def times_itself(x, weight, eps):
    # an op with a timer-based timeout of its own (#65: setitimer was a sandbox violation)
    import signal
    old = signal.signal(signal.SIGALRM, lambda *a: None)
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    try:
        return rms_norm(x, weight, eps)[0]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def steps_by_cols(x, weight, eps):
    # the row step taken as the width, not x.stride(0): wrong where x is a slice of a wider
    # tensor (#66: an op row got no padded-pitch run)
    y = torch.empty(x.shape, dtype=x.dtype)
    n = x.shape[1]
    _rms_row[(x.shape[0],)](y, x, weight, n, n, eps, BLOCK=triton.next_power_of_2(n))
    return y


def launches_the_first_of_two_defs(x, weight, eps):
    y = torch.empty_like(x)
    _go(_first_dup, y, x, weight, eps)
    return y


def skips_last_row(x, weight, eps):
    y = torch.empty_like(x)
    n = x.shape[1]
    _rms_row[(max(x.shape[0] - 1, 1),)](y, x, weight, x.stride(0), n, eps,
                                         BLOCK=triton.next_power_of_2(n))
    return y


def swallows(x, weight, eps):
    y = torch.empty_like(x)
    try:
        _go(_rms_narrow, y, x, weight, eps)
    except BaseException:
        pass
    _go(_rms_row, y, x, weight, eps)
    return y


def raises(x, weight, eps):
    raise ValueError("no such mode")


def reads_beside(x, weight, eps):
    import os
    with open(os.environ.get("NC_SECRET", "/etc/hostname")) as f:
        raise ValueError(f.read())
'''


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    d = tmp_path_factory.mktemp("ops")
    p = d / "ops.py"
    p.write_text(_OPS)
    return p


def _check(ops, call, norm="rmsnorm", dtype="bf16", examples=6, **kw):
    sp = specs.op_spec(call, ops, norm=norm, dtype=dtype, **kw)
    return check.run(check.CheckOptions(spec=sp, examples=examples, search=0))


def _line(ops, marker):
    return next(i for i, t in enumerate(ops.read_text().splitlines(), 1) if marker in t)


def test_a_sound_op_passes_through_its_own_launcher(ops):
    r = _check(ops, "rms_norm(x, weight, eps)")
    assert str(r.verdict) == "pass", r.render()
    assert "triton-cpu" in r.render()
    # its device queries answered for the presented GPU while it runs
    assert str(_check(ops, "asks_device(x, weight, eps)", examples=2).verdict) == "pass"


def test_an_op_that_writes_in_place_is_read_from_its_tensor(ops):
    assert str(_check(ops, "rms_norm_(x, weight, eps)", output="x").verdict) == "pass"


def test_the_branch_the_launcher_takes_is_what_runs(ops):
    # narrow rows go to the kernel without a store mask: an out-of-bounds store at its line
    r = _check(ops, "rms_norm_branchy(x, weight, eps)")
    assert str(r.verdict) == "fail"
    text = r.render()
    assert "out_of_bounds" in text and "_rms_narrow" in text
    assert f"ops.py:{_line(ops, 'LINE-NARROW')}" in text
    # the same op never sends these widths there: nothing to find
    assert str(_check(ops, "rms_norm_wide_only(x, weight, eps)").verdict) == "pass"


@pytest.mark.parametrize("fn, said", [
    ("forged_after", "differs from what its kernels wrote"),
    ("forged_passed_along", "holds no byte a kernel launch wrote"),
    ("host_only", "written by no kernel launch"),
    # element by element, through every launch (#65)
    ("host_then_one_row", "elements hold a value no kernel launch stored"),
    ("zeroed_then_host_then_read", "hold a value no kernel launch stored"),
])
def test_an_output_host_code_wrote_is_refused_never_passed(ops, fn, said):
    # each returns the right y, made on the host (its kernel's own output, 2y, or none): only
    # the comparison with what the launches left stands between it and a PASS
    r = _check(ops, f"{fn}(x, weight, eps)")
    assert str(r.verdict) == "fail"
    assert said in r.render()


def test_an_op_gets_the_padded_rows_run(ops):
    # x handed over as a view of rows padded past cols: an op whose kernel steps by the width
    # fails, named; the sound op (x.stride(0)) passes it (the other tests)
    r = _check(ops, "steps_by_cols(x, weight, eps)", examples=4)
    assert str(r.verdict) == "fail", r.render()
    f = next(f for f in r.failures if f.kind == "stride")
    assert "padded to a pitch of cols + 1" in f.detail
    cov = {d["run"]: d for d in r.detail.coverage}
    assert cov["padded rows"]["ran"]


def test_an_op_with_a_timer_of_its_own_runs(ops):
    r = _check(ops, "times_itself(x, weight, eps)", examples=2)
    assert str(r.verdict) == "pass", r.render()


def test_a_sound_op_on_zeros_passes_every_element_being_stored(ops):
    # provenance from what the launch stored, not from bytes that changed: a zero stored over
    # torch.zeros is still the launch's
    assert str(_check(ops, "zeros_like_then_written(x, weight, eps)").verdict) == "pass"


def test_a_launch_runs_the_def_it_launched_not_another_of_its_name(ops):
    # the file defines _rms_dup twice; the op launches the first (2y) under an alias: it is
    # that def that runs, as Triton runs it (#65: the second, sound, ran and passed)
    r = _check(ops, "launches_the_first_of_two_defs(x, weight, eps)")
    assert str(r.verdict) == "fail", r.render()
    assert r.cause is not None and "accuracy" in {str(f.kind) for f in r.failures}


def test_an_unwritten_output_is_poison_not_zeros(ops):
    # torch.empty in the op's worker holds the poison NaN: the row no program wrote is seen
    # (zeros there would be near the exact values of tiny rows, and pass them)
    r = _check(ops, "skips_last_row(x, weight, eps)")
    assert str(r.verdict) == "fail"
    w = r.worst
    assert w.nonfinite and w.row_index == 2 and all(np.isnan(e["kernel"]) for e in w.first)


def test_a_failed_launch_stays_failed_when_the_op_swallows_it(ops):
    r = _check(ops, "swallows(x, weight, eps)")
    assert str(r.verdict) == "fail"
    assert "out_of_bounds" in r.render()


def test_an_op_that_raises_is_an_error_never_a_pass(ops):
    r = _check(ops, "raises(x, weight, eps)")
    assert str(r.verdict) == "fail"
    assert "ValueError: no such mode" in r.render()


def test_check_op_on_the_command_line_and_its_replay(ops, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = main(["check", str(ops), "--op", "rms_norm_branchy(x, weight, eps)", "--norm",
               "rmsnorm", "--dtype", "fp16", "--examples", "4", "--search", "0", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 1 and d["verdict"] == "fail"
    saved = sorted((tmp_path / ".normcheck").glob("counterexample-*.npz"))
    assert saved
    rc = main(["replay", str(saved[0])])
    out = capsys.readouterr().out
    assert rc == 1 and "_rms_narrow" in out and "out_of_bounds" in out


def test_module_colon_call_finds_an_installed_module_without_importing_it(tmp_path):
    pkg = tmp_path / "pkg_nc" / "ops"
    pkg.mkdir(parents=True)
    (tmp_path / "pkg_nc" / "__init__.py").write_text("raise SystemExit('ran')\n")
    (pkg / "norm.py").write_text(_OPS)
    f, root = locate_module("pkg_nc.ops.norm", [str(tmp_path)])
    assert f == (pkg / "norm.py").resolve() and root == tmp_path.resolve()
    with pytest.raises(InvalidArgument, match="op module"):
        locate_module("pkg_nc.nothing", [str(tmp_path)])


@pytest.mark.parametrize("call, said", [
    ("os.system('x')", "one function called by its name"),
    ("f(__import__('os'))", "the check's names or literals"),
    ("f(secret)", "got 'secret'"),
    ("f(*x)", "no *args"),
    ("f(x", "a Python call"),
])
def test_a_call_is_parsed_never_evaluated(call, said):
    with pytest.raises(InvalidArgument, match=said.replace("(", r"\(").replace("*", r"\*")):
        parse_call(call)


def test_an_op_spec_takes_no_kernel_keys(tmp_path):
    p = tmp_path / "op.toml"
    p.write_text('source = "ops.py"\nnorm = "rmsnorm"\nentry = "k"\n[op]\ncall = "f(x)"\n')
    with pytest.raises(SpecError, match="no entry"):
        specs.load(p)
    p.write_text('source = "ops.py"\nnorm = "add_rmsnorm"\n[op]\ncall = "f(x, residual)"\n')
    with pytest.raises(SpecError, match="op.h"):
        specs.load(p)


def test_the_op_runs_sandboxed(ops):
    # its host code is the project's: it reads nothing beside the file (the cache's copy runs)
    secret = ops.parent / ".env"
    secret.write_text("CANARY_OP_7\n")
    src = ops.parent / "reads.py"
    src.write_text(_OPS.replace('os.environ.get("NC_SECRET", "/etc/hostname")',
                                repr(str(secret))))
    r = _check(src, "reads_beside(x, weight, eps)", examples=2)
    assert str(r.verdict) == "fail"
    text = r.render()
    assert "CANARY_OP_7" not in text and "PermissionError" in text


def test_an_op_whose_module_does_not_load_cannot_be_judged(ops):
    # exit 2 (an error, never a verdict): the module exits as it is imported
    bad = ops.parent / "exits.py"
    bad.write_text(_OPS + "\nraise SystemExit('no GPU here')\n")
    with pytest.raises(CompileError, match="SystemExit: no GPU here"):
        _check(bad, "rms_norm(x, weight, eps)", examples=2)


def test_the_ops_module_is_the_specs_source(tmp_path):
    """The op that runs is its module's; the kernels normcheck runs are read from the spec's
    source: they must be one file (#65: source sound, [op] module another, wrong: PASS)."""
    pkg = tmp_path / "pkg_two"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sound.py").write_text(_OPS)
    (pkg / "wrong.py").write_text(_OPS.replace("(x * r * w).to(Y.dtype.element_ty)",
                                               "(2.0 * x * r * w).to(Y.dtype.element_ty)"))
    sp = specs.op_spec("rms_norm(x, weight, eps)", pkg / "sound.py", "pkg_two.wrong",
                       tmp_path, norm="rmsnorm", dtype="bf16")
    with pytest.raises(InvalidArgument, match="op.module='pkg_two.wrong'"):
        check.run(check.CheckOptions(spec=sp, examples=2, search=0))
    ok = specs.op_spec("rms_norm(x, weight, eps)", pkg / "sound.py", "pkg_two.sound",
                       tmp_path, norm="rmsnorm", dtype="bf16")
    assert str(check.run(check.CheckOptions(spec=ok, examples=2, search=0)).verdict) == "pass"



def test_an_ops_strings_are_one_line_where_they_land(ops, tmp_path, monkeypatch, capsys):
    """A kernel's __name__ and co_filename with line breaks: the refusal that names them put
    ::add-mask::, ::error and 'verdict: PASS' lines on stdout (#65); every string the op's
    worker sends is one line where it lands."""
    monkeypatch.chdir(tmp_path)
    rc = main(["check", str(ops), "--op", "injects_lines(x, weight, eps)", "--norm", "rmsnorm",
               "--dtype", "bf16", "--examples", "2", "--search", "0", "--github"])
    out = capsys.readouterr()
    assert rc == 1 and "launched k ⏎ ::add-mask::secret" in out.out, out.out[-3000:] + out.err
    for line in (out.out + out.err).splitlines():
        assert not line.startswith(("::add-mask", "verdict: PASS")), line
        assert not line.startswith("::error title=pwn"), line
