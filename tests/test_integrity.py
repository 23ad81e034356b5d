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


# -- a Triton file cannot make its own verdict (#55) ----------------------------------------------
_ZEROS_KERNEL = '''
@triton.jit
def k(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    {body}
    tl.store(Y + row * cols + offs, tl.zeros([BLOCK_SIZE], tl.float32), mask=mask)
'''

#: What a forged launch writes: the right RMSNorm, computed by numpy beside the kernel
_NUMPY_RMS = '''
def _forged(fn, meta, params, constexprs, grid, args, names, *a, **k):
    import numpy as np
    Y, X, W, eps, rows, cols = args[:6]
    rows, cols = int(rows), int(cols)
    x = np.asarray(X[:rows * cols], np.float64).reshape(rows, cols)
    w = np.asarray(W[:cols], np.float64)
    r = 1 / np.sqrt((x * x).mean(axis=1, keepdims=True) + float(eps))
    Y[:rows * cols] = (x * r * w).astype(Y.dtype).reshape(-1)
    return None
'''

_FORGERIES = {
    # the probe: the file's top level replaces the executor's run
    "top_level": ("import sys\n" + _NUMPY_RMS +
                  "sys.modules['normcheck.backends.triton.executor'].run = _forged\n", "pass"),
    # ... reached through a module Triton's language imports
    "kernel_module_chain": ("", "tl.core.inspect.currentframe()"),
    "kernel_import": ("", "__import__('sys')"),
    "kernel_builtins_chain": ("", "tl.core.builtins.print(1)"),
    "kernel_dunder": ("", "x = tl.zeros([1], tl.float32).__class__"),
    "kernel_handle": ("", "h = offs.handle.data"),
    "kernel_frame": ("", "g = [0 for _ in range(1)]\n    f = g.gi_frame"),
    "kernel_generator": ("", "g = (i for i in range(2))"),
    "kernel_getattr": ("", "h = getattr(offs, 'handle')"),
    "kernel_attribute_store": ("", "k.run = 0"),
    "kernel_semantic": ("", "z = tl.zeros([1], tl.float32, _semantic=None)"),
    "kernel_nested_def": ("", "def inner():\n        return 0"),
    "kernel_format": ("", "s = '{0.handle}'.format(offs)"),
    "kernel_module_value": ("", "m = tl.core"),
    "kernel_opaque_global": ("import sys as _s\n", "q = _s"),
    # a function of the file naming itself a Triton object: its path walks through a module
    # Triton's language imports to the real exec (#65: PASS on the full default check)
    "forged_qualname": ("def helper(*a):\n    return None\n\n\n"
                        "helper.__module__ = 'triton.language.core'\n"
                        "helper.__qualname__ = 'builtins.exec'\n",
                        "helper('import sys')"),
    # ... and naming a real Triton function it is not
    "forged_identity": ("def helper(*a):\n    return None\n\n\n"
                        "helper.__module__ = 'triton.language'\n"
                        "helper.__qualname__ = 'program_id'\n", "helper(0)"),
}


@pytest.mark.parametrize("route", sorted(_FORGERIES))
def test_a_triton_file_cannot_forge_its_pass(tmp_path, route):
    """Each route by which a Triton file's own code could write the output its kernel did not
    (the kernel stores zeros): the file's top level (it runs in a loader process, not where the
    kernel is launched), and a kernel's body that reaches outside Triton's language (refused as
    a GPU build's compiler would, naming the line).  Never a PASS."""
    pytest.importorskip("triton")
    top, body = _FORGERIES[route]
    if body == "pass":
        body = "pass"
    src = tmp_path / "k.py"
    src.write_text("import triton\nimport triton.language as tl\n" + top +
                   _ZEROS_KERNEL.format(body=body))
    r = _cli("check", str(src), "--entry", "k", "--norm", "rmsnorm", "--dtype", "fp32",
             "--search", "0", "--examples", "4", cwd=tmp_path)
    assert "verdict: PASS" not in r.stdout, r.stdout[-3000:]
    assert r.returncode != 0
    if route != "top_level":  # refused before it runs, the line named
        assert r.returncode == 2 and "refused" in r.stderr and "k.py:" in r.stderr, \
            r.stderr[-2000:]
    else:  # the zeros the kernel stored are judged
        assert r.returncode == 1 and "verdict: FAIL" in r.stdout, r.stdout[-2000:]


#: The top level of a file that forges its launch on the GPU path: Triton's launch replaced by
#: torch computing the right RMSNorm into Y (the stand-in runs Triton's interpreter)
_GPU_FORGERY = """
import triton.runtime.interpreter as _ti


def _forged(self, *args, grid, warmup=False, **kw):
    import torch
    Y, X, W, eps, rows, cols = args[:6]
    x = X[:rows * cols].double().reshape(rows, cols)
    r = 1 / torch.sqrt((x * x).mean(1, keepdim=True) + eps)
    Y[:rows * cols] = (x * r * W[:cols].double()).to(Y.dtype).reshape(-1)


_ti.InterpretedFunction.run = _forged
"""


def test_a_triton_file_cannot_forge_its_pass_on_the_gpu_path(tmp_path, monkeypatch):
    """The GPU path ran the file's top level in the worker that launches its kernel: replacing
    Triton's launch there made a kernel that stores zeros PASS.  Now the top level runs in the
    cpu path's sandboxed loader and the GPU worker rebuilds the kernel from the file's text
    (tested with the stand-in: the same worker, Triton's interpreter on torch's CPU tensors):
    the zeros are judged."""
    pytest.importorskip("triton")
    pytest.importorskip("torch")
    from normcheck import check
    from normcheck.backends.triton.backend import TritonGpuStandIn

    monkeypatch.chdir(tmp_path)
    src = tmp_path / "k.py"
    src.write_text("import triton\nimport triton.language as tl\n" + _GPU_FORGERY +
                   _ZEROS_KERNEL.format(body="pass"))
    r = check.check_kernel(src, "k", "rmsnorm", "fp32", backend=TritonGpuStandIn(),
                           examples=4, search=0)
    assert str(r.verdict) == "fail", r.render()[-2000:]


def test_a_heuristic_cannot_write_an_output(tmp_path):
    """A heuristic runs beside the launch (as on a GPU, where it runs on the host): it sees the
    arguments read-only, so ``out=`` into the output is refused -- never a PASS."""
    pytest.importorskip("triton")
    src = tmp_path / "k.py"
    src.write_text("import triton\nimport triton.language as tl\n" + _ZEROS_KERNEL.format(
        body="pass").replace("@triton.jit", '@triton.heuristics({"B": lambda a: a["X"].clip('
                             '0, 0, out=a["Y"]) is None})\n@triton.jit'))
    r = _cli("check", str(src), "--entry", "k", "--norm", "rmsnorm", "--dtype", "fp32",
             "--search", "0", "--examples", "4", cwd=tmp_path)
    assert "verdict: PASS" not in r.stdout and r.returncode != 0, r.stdout[-2000:]


def test_a_sound_triton_file_with_host_code_still_runs(tmp_path):
    """What the two processes keep: a file whose top level computes its autotune configs with a
    function, imports conditionally, keeps a constexpr global and a helper kernel -- judged as
    before (the sound kernel passes)."""
    pytest.importorskip("triton")
    src = tmp_path / "k.py"
    src.write_text(textwrap.dedent('''
        import math
        import triton
        import triton.language as tl
        try:
            from triton.language.extra.libdevice import rsqrt
        except ImportError:
            from triton.language.math import rsqrt

        SCALE: tl.constexpr = tl.constexpr(1.0)

        def configs():
            return [triton.Config({"UNUSED": n}, num_warps=4) for n in (1, 2)]

        @triton.jit
        def _mean_square(x, cols):
            return tl.sum(x * x, axis=0) / cols

        @triton.autotune(configs=configs(), key=["cols"])
        @triton.jit
        def k(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr, UNUSED: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            offs = tl.arange(0, BLOCK_SIZE)
            mask = offs < cols
            x = tl.load(X + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
            r = rsqrt(_mean_square(x, cols) + eps) * SCALE
            w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(Y + row * cols + offs, (x * r * w).to(Y.dtype.element_ty), mask=mask)

        def host_wrapper(x):  # never runs: normcheck launches k itself
            return math.sqrt(x)
    '''))
    r = _cli("check", str(src), "--entry", "k", "--norm", "rmsnorm", "--dtype", "fp32",
             "--search", "0", "--examples", "4", cwd=tmp_path)
    assert r.returncode == 0 and "verdict: PASS" in r.stdout, (r.stdout + r.stderr)[-3000:]


def test_a_language_function_the_interpreter_left_patched_is_described_by_name():
    """Triton's interpreter patches the language's modules as it runs a device function and does
    not always put them back: a file imported after that holds the patch (a lambda of the
    interpreter's), which is still Triton's function -- described by its name, never refused as
    a function the file made (the flaky refusal of liger_rms_norm.py's ``rsqrt``)."""
    pytest.importorskip("triton")
    code = textwrap.dedent('''
        import os, json
        os.environ["TRITON_INTERPRET"] = "1"
        import triton.language as tl
        from triton.runtime import interpreter as ti
        from normcheck.backends.triton import extract
        def f():
            return tl
        scope = ti._patch_lang(f)
        assert "_patch_attr" in tl.math.sqrt.__qualname__
        from triton.language.extra.cuda import libdevice as cuda_ld
        from normcheck.backends.triton import executor
        ti._patch_builtin(cuda_ld, ti.interpreter_builder, scope)
        # the own worker's namespace: libdevice's calls, each wrapping the patched function
        ld = executor.LibdeviceModule().rsqrt
        assert "_patch_attr" in ld.__wrapped__.__qualname__
        print(json.dumps(extract.describe({"sqrt": tl.math.sqrt, "where": tl.where,
                                           "rsqrt": ld}, "k.py")))
        scope.restore()
    ''')
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    import json

    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["sqrt"] == ["attr", "triton.language.math", "sqrt"], got
    assert got["where"][0] == "attr" and got["where"][-1] == "where", got
    assert got["rsqrt"] == ["libdevice_fn", "rsqrt"], got


# -- the cache: nothing trusted because it exists (#55) -------------------------------------------
def test_a_cached_file_is_verified_on_use(tmp_path, monkeypatch, capsys):
    """cache.verified: a file as normcheck wrote it is used; one changed after (or never
    recorded) is removed with a warning naming it, so its caller builds it again."""
    from normcheck.backends import cache

    monkeypatch.setenv("NORMCHECK_CACHE", str(tmp_path / "c"))
    f = cache.cache_dir("cpu") / "x" / "kernel.so"
    cache.install_file(b"built", f)
    assert cache.verified(f)
    f.write_bytes(b"owned")
    assert not cache.verified(f) and not f.exists()
    assert f"the cached file {f} is not the file normcheck wrote" in capsys.readouterr().err
    g = cache.cache_dir("cpu") / "y" / "kernel.so"
    g.parent.mkdir(parents=True)
    g.write_bytes(b"planted")  # never written by normcheck
    assert not cache.verified(g) and "has no sealed record" in capsys.readouterr().err


def test_a_ledger_entry_rewritten_by_the_caches_writer_is_refused(tmp_path, monkeypatch,
                                                                    capsys):
    """#65: the ledger held plain digests beside the files it vouches for -- whoever rewrote a
    cached launcher could rewrite its entry too.  An entry is now sealed with a key kept outside
    the cache (0600): a digest written by hand, or a seal made with another key, is refused."""
    import hashlib
    import stat

    from normcheck.backends import cache

    monkeypatch.setenv("NORMCHECK_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv("NORMCHECK_LEDGER_KEY", str(tmp_path / "state" / "ledger.key"))
    f = cache.cache_dir("cpu") / "x" / "normcheck-launch"
    cache.install_file(b"built", f)
    key = tmp_path / "state" / "ledger.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and not key.is_relative_to(tmp_path / "c")
    monkeypatch.setattr(cache, "_VERIFIED", {})
    assert cache.verified(f)
    f.write_bytes(b"tampered")  # the file and its entry, as the cache's writer would
    cache.ledger_entry(f).write_text(hashlib.sha256(b"tampered").hexdigest())
    monkeypatch.setattr(cache, "_VERIFIED", {})
    assert not cache.verified(f) and not f.exists()
    assert "has no sealed record in the ledger" in capsys.readouterr().err


def test_a_manifest_pointed_at_another_build_is_refused(tmp_path, monkeypatch, capsys):
    """#65: cpu/manifests/*.json were read without the ledger -- one kernel's manifest pointed
    at another's build ran the wrong kernel; now a manifest is verified like every file."""
    from normcheck.backends import cache
    from normcheck.backends.cpu import backend as cpu

    monkeypatch.setenv("NORMCHECK_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv("NORMCHECK_LEDGER_KEY", str(tmp_path / "state" / "ledger.key"))
    m = cache.cache_dir("cpu") / "manifests" / "k.json"
    cache.install_file('{"key": "a", "deferred": [], "deps": [], "frameworks": {}, '
                       '"std": "c++17"}', m)
    assert cpu._from_manifest(m) == ("a", [], {}, "c++17", None)
    m.write_text(m.read_text().replace('"a"', '"b"'))  # the other kernel's build
    monkeypatch.setattr(cache, "_VERIFIED", {})
    assert cpu._from_manifest(m) is None and "is not the file normcheck wrote" in \
        capsys.readouterr().err


def test_the_yardsticks_kept_figures_are_its_own_and_sealed(tmp_path, monkeypatch, capsys):
    """#67: the yardstick's figures (a built-in's largest error on a case) are kept in the
    cache, keyed by the build, the case's bytes and normcheck's code: a second check reads the
    same figure without a launch; one rewritten in the cache is refused and measured again."""
    import numpy as np

    from normcheck import kernels
    from normcheck.backends import cache
    from normcheck.check import yardstick
    from normcheck.launch import Case

    monkeypatch.setenv("NORMCHECK_LEDGER_KEY", str(tmp_path / "state" / "ledger.key"))
    be = kernels.for_source("cpu", kernels.get("rmsnorm_rms_fp16_upcast_square").path)
    v = kernels.get("rmsnorm_rms_fp16_upcast_square")
    x = np.random.default_rng(3).standard_normal((2, 300)).astype(np.float16)
    c = Case(x=x, gamma=np.ones(300, np.float16), beta=None, residual=None, eps=1e-5)
    p = yardstick.yardstick_path(v, yardstick.case_digest(c), be)
    assert p is not None and p == yardstick.yardstick_path(v, yardstick.case_digest(c), be)
    x2 = x.copy()
    x2[1, 7] = np.float16(2.0)  # one element of the case differs: another figure
    assert p != yardstick.yardstick_path(v, yardstick.case_digest(Case(
        x=x2, gamma=c.gamma, beta=None, residual=None, eps=1e-5)), be)
    monkeypatch.setenv("NORMCHECK_CACHE", str(tmp_path / "c"))
    q = yardstick.yardstick_path(v, yardstick.case_digest(c), be)
    assert q.name == p.name and q.is_relative_to(tmp_path / "c")  # the cache's own folder
    p = q
    cache.install_file("0.25", p)
    assert yardstick._kept_figure(p) == 0.25
    p.write_text("0.0")  # the cache's writer lowers the built-in's figure: warn is softer
    monkeypatch.setattr(cache, "_VERIFIED", {})
    assert yardstick._kept_figure(p) is None and not p.exists()
    assert "is not the file normcheck wrote" in capsys.readouterr().err


def test_the_private_import_folder_is_the_processs_own(tmp_path, monkeypatch):
    """#65: the workers' private import folder was <cache>/python/<key>/, and a struct.py
    planted there ran before the sandbox in every worker.  It is now a folder this process
    makes fresh (mkdtemp, 0700) holding only the link to normcheck; what else is there is
    removed."""
    import stat

    from normcheck.backends import isolation

    from normcheck.backends import cache

    monkeypatch.setenv("NORMCHECK_CACHE", str(tmp_path / "c"))
    monkeypatch.setattr(isolation, "_ROOT", [])
    planted = cache.cache_root() / "python" / "0123456789abcdef"
    planted.mkdir(parents=True)
    (planted / "struct.py").write_text("raise SystemExit('planted')\n")
    root = isolation.import_root()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and root != planted
    assert [p.name for p in root.iterdir()] == ["normcheck"]
    assert not planted.exists()  # no folder it did not make is kept, nor ever imported from


def test_fetched_headers_are_verified_on_use(tmp_path, monkeypatch, capsys):
    """#55 item 2: a fetched header folder is checked against the manifest the ledger recorded
    as it was fetched; a header changed, added or gone since (a planted cuda_fp16.h would enter
    every build) removes the folder with a warning naming the file."""
    from normcheck.backends import headers

    monkeypatch.setenv("NORMCHECK_CACHE", str(tmp_path / "c"))
    monkeypatch.setattr(headers, "_TREES", {})
    d = headers._fetched_root() / "nvidia-curand@1.0"
    (d / "include").mkdir(parents=True)
    (d / "include" / "curand.h").write_text("#pragma once\n")
    headers.record_tree(d)
    monkeypatch.setattr(headers, "_TREES", {})  # a later process
    assert headers.fetched() == {"nvidia-curand": d / "include"}
    (d / "include" / "curand.h").write_text("#pragma once\n#define planted 1\n")
    monkeypatch.setattr(headers, "_TREES", {})
    assert headers.fetched() == {} and not d.exists()
    err = capsys.readouterr().err
    assert "changed since it was fetched (1 file(s): curand.h)" in err
    (d / "include").mkdir(parents=True)  # never fetched by normcheck: no manifest
    (d / "include" / "curand.h").write_text("#pragma once\n")
    headers.cache.ledger_entry(d).unlink()
    monkeypatch.setattr(headers, "_TREES", {})
    assert headers.fetched() == {} and "has no manifest in the ledger" in capsys.readouterr().err


def test_a_changed_launcher_and_kernel_build_are_built_again(tmp_path):
    """End to end: after a check, the cached kernel module and normcheck's launcher are changed
    on disk (as a process with the user's rights could); the next check names each, builds
    them again and gives the same verdict."""
    env = {**os.environ, "NORMCHECK_CACHE": str(tmp_path / "cache")}
    args = ("check", str(CHECK_SRC), "--entry", "rms_good_fp16", "--norm", "rmsnorm", "--dtype",
            "fp16", "--search", "0", "--examples", "4")
    r = _cli(*args, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    root = tmp_path / "cache"
    changed = [p for p in root.rglob("*") if p.is_file() and
               p.name in ("kernel.so", "normcheck-launch")]
    assert {p.name for p in changed} == {"kernel.so", "normcheck-launch"}
    for p in changed:
        p.write_bytes(p.read_bytes() + b"\0")
    r2 = _cli(*args, cwd=tmp_path, env=env)
    assert r2.returncode == 0, r2.stderr[-2000:]
    for p in changed:
        assert f"the cached file {p} is not the file normcheck wrote" in r2.stderr
    assert "verdict: PASS" in r2.stdout
