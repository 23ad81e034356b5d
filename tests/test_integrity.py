"""The verdict belongs to normcheck (#55): no confinement that fails open, no line of output a
kernel can write, no macro or module that tells a kernel it is under test without the verdict
saying so."""

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CHECK_SRC = HERE / "cuda" / "check" / "kernels.cu"


def _cli(*args, cwd=None, env=None, preexec_fn=None):
    return subprocess.run([sys.executable, "-m", "normcheck", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, preexec_fn=preexec_fn, timeout=900)


def _deny_landlock():
    """In the child: a seccomp filter under which landlock's three calls answer ENOSYS, as on a
    kernel without landlock (gVisor, an older kernel, a container profile) -- for it and every
    process it starts (normcheck's launcher, the compiler, the worker)."""
    libc = ctypes.CDLL(None, use_errno=True)

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    ld, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET
    errno_enosys, allow = 0x00050000 | 38, 0x7FFF0000
    prog = [SockFilter(ld, 0, 0, 0),  # seccomp_data.nr
            SockFilter(jeq, 3, 0, 444), SockFilter(jeq, 2, 0, 445), SockFilter(jeq, 1, 0, 446),
            SockFilter(ret, 0, 0, allow), SockFilter(ret, 0, 0, errno_enosys)]
    arr = (SockFilter * len(prog))(*prog)
    fprog = SockFprog(len(prog), ctypes.cast(arr, ctypes.POINTER(SockFilter)))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, MODE_FILTER
        raise OSError(ctypes.get_errno(), "seccomp")


def test_without_landlock_the_check_refuses_to_run_untrusted_code(tmp_path):
    """Fail closed: where landlock's calls answer ENOSYS the kernel's compile and its launch
    would run unconfined (a compiler echoing ../secret.h, a worker reading /etc/passwd): exit 2,
    one line naming what is missing and the setting that accepts the risk."""
    env = {**os.environ, "NORMCHECK_CACHE": str(tmp_path / "cache")}
    r = _cli("check", str(CHECK_SRC), "--entry", "rms_good_fp16", "--norm", "rmsnorm",
             "--dtype", "fp16", "--search", "0", "--examples", "4", cwd=tmp_path, env=env,
             preexec_fn=_deny_landlock)
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    said = [ln for ln in r.stderr.splitlines() if ln.startswith("normcheck: error:")]
    assert len(said) == 1 and "landlock is not available here" in said[0], r.stderr
    assert "NORMCHECK_SANDBOX=off accepts that risk" in said[0]
    # the user accepts the risk: the check runs (what it could do is theirs to judge)
    ok = _cli("check", str(CHECK_SRC), "--entry", "rms_good_fp16", "--norm", "rmsnorm",
              "--dtype", "fp16", "--search", "0", "--examples", "4", cwd=tmp_path,
              env={**env, "NORMCHECK_SANDBOX": "off"}, preexec_fn=_deny_landlock)
    assert ok.returncode == 0, ok.stderr[-2000:]


def _no_forged_lines(text):
    """No line starts a workflow command (the runner trims a line before it looks) or a
    verdict: a quoted block's lines start with `| `, a message's breaks are shown as ⏎."""
    for ln in text.splitlines():
        assert not ln.strip().startswith("::"), ln
        assert not ln.startswith("verdict: PASS"), ln


def test_a_compile_error_cannot_write_a_line_of_its_own(tmp_path):
    """A static_assert's message (and any diagnostic the compiler echoes from the file) is a
    quoted block: no line of it can start a workflow command or a verdict."""
    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void k(float* y, const float* x, const float* g, '
                   'float eps, int rows, int cols) {\n'
                   '  static_assert(sizeof(float) == 3, "\\n::stop-commands::T0K\\n::error '
                   'title=x::y\\nverdict: PASS -- 1 rows");\n}\n')
    r = _cli("check", str(src), "--entry", "k", "--norm", "rmsnorm", "--dtype", "fp32",
             "--search", "0", "--examples", "4", cwd=tmp_path)
    assert r.returncode == 2
    _no_forged_lines(r.stdout + r.stderr)


def test_a_triton_files_exception_cannot_write_a_line_of_its_own(tmp_path):
    pytest.importorskip("triton")
    src = tmp_path / "k.py"
    src.write_text(textwrap.dedent('''
        import triton
        import triton.language as tl
        raise ValueError("\\n::stop-commands::T0K\\n::add-mask::x\\nverdict: PASS -- 1 rows")

        @triton.jit
        def k(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
            pass
    '''))
    r = _cli("check", str(src), "--entry", "k", "--norm", "rmsnorm", "--dtype", "fp32",
             "--search", "0", "--examples", "4", cwd=tmp_path)
    assert r.returncode == 2
    _no_forged_lines(r.stdout + r.stderr)
    assert "⏎" in r.stderr  # the line breaks shown, not taken


def test_a_markdown_paragraph_cannot_open_a_heading():
    from normcheck import escape

    assert "\n" not in escape.markdown("cause\n### ✅ PASS")


def test_a_source_that_tests_normchecks_names_is_said_so_with_the_verdict(tmp_path):
    """No macro tells a kernel it runs under normcheck (__NORMCHECK_CPU__ is gone); a source
    that tests one of normcheck's names anyway gets a note with its verdict, whatever it is."""
    src = tmp_path / "k.cu"
    src.write_text(CHECK_SRC.read_text() + '\n#ifdef __NORMCHECK_CPU__\n#error "seen"\n#endif\n')
    r = _cli("check", str(src), "--entry", "rms_good_fp16", "--norm", "rmsnorm", "--dtype",
             "fp16", "--search", "0", "--examples", "4", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]  # the macro is not defined: no #error
    assert "names normcheck's own emulation" in r.stdout and "__NORMCHECK_CPU__" in r.stdout
