"""Nothing in the folder normcheck runs from, nor in a kernel's file, runs outside the sandbox
(docs/DESIGN.md, "Threat model"; #44): every Python process normcheck starts -- the workers of
both backends, the GPU path's, the header fetch -- starts isolated; a Triton file's imports run
inside the sandbox; each user source has a worker of its own, which reads no other build."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from normcheck import check
from normcheck.backends import cache, isolation
from normcheck.errors import CompileError

HERE = Path(__file__).parent
SHAPES = HERE / "cuda" / "spec_shapes"
TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not TRITON, reason="Triton is not installed")

#: Modules planted where normcheck runs (a pull request under review): each writes a marker
#: when imported, then hands over to the real module, as an attacker's would to stay unseen.
_PLANTED = {
    "ctypes.py": "ctypes",
    "threading.py": "threading",
    "numpy/__init__.py": "numpy",
    "normcheck/__init__.py": "normcheck",
}


def _plant(folder: Path, marker: Path, names=_PLANTED):
    for rel, mod in names.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(f"""\
            import importlib, os, sys
            open({str(marker)!r}, "a").write({rel!r} + " ran in " + repr(sys.argv[:1]) + "\\n")
            here = os.path.dirname(os.path.abspath(__file__))
            sys.path[:] = [q for q in sys.path if os.path.abspath(q or ".") not in
                           (here, os.path.dirname(here))]
            del sys.modules[{mod!r}]
            sys.modules[{mod!r}] = importlib.import_module({mod!r})
            """))


def _runners():
    """How a user starts normcheck: its console script and ``python -m normcheck``."""
    out = [[sys.executable, "-m", "normcheck"]]
    script = Path(sys.executable).parent / "normcheck"
    if script.is_file():
        out.append([str(script)])
    return out


def _verdict(r) -> str:
    return json.loads(r.stdout)["verdict"] if r.stdout.strip().startswith("{") else \
        f"exit {r.returncode}: {r.stderr[-500:]}"


@pytest.mark.parametrize("kernel", ["cuda", pytest.param("triton", marks=needs_triton)])
def test_modules_planted_in_the_folder_and_beside_the_kernel_never_run(kernel, tmp_path):
    """ctypes.py, threading.py, numpy/ and normcheck/ in the working folder and beside the
    kernel: never imported by normcheck or its workers, started either way (a planted
    normcheck/ in the working folder is what ``python -m normcheck`` runs -- Python's rule,
    before normcheck exists -- so that pair is not run); the verdict is the clean folder's."""
    spec = "vllm_const_stride.toml" if kernel == "cuda" else "liger_const_stride.toml"
    clean, dirty = tmp_path / "clean", tmp_path / "dirty"
    for d in (clean, dirty):
        d.mkdir()
        shutil.copy(SHAPES / spec, d)
        shutil.copy(SHAPES / ("shapes.cu" if kernel == "cuda" else "shapes.py"), d)
    marker = tmp_path / "marker"
    args = ["check", spec, "--examples", "4", "--search", "0", "--json"]
    want = _verdict(subprocess.run(_runners()[0] + args, cwd=clean, capture_output=True,
                                   text=True, timeout=600))
    assert want == "pass"
    for runner in _runners():
        names = {k: v for k, v in _PLANTED.items()
                 if not (v == "normcheck" and runner[1:2] == ["-m"])}
        _plant(dirty, marker, names)
        r = subprocess.run(runner + args, cwd=dirty, capture_output=True, text=True,
                           timeout=600)
        assert not marker.exists(), (runner, marker.read_text())
        assert _verdict(r) == want, (runner, r.stderr[-2000:])


def test_a_report_replay_and_the_pytest_plugin_import_nothing_planted(tmp_path, pytester):
    marker = tmp_path / "marker"
    work = tmp_path / "work"
    work.mkdir()
    names = {k: v for k, v in _PLANTED.items() if v != "normcheck"}
    _plant(work, marker, names)
    shutil.copy(SHAPES / "shapes.cu", work)
    shutil.copy(SHAPES / "vllm_ignores_stride.toml", work)
    r = subprocess.run([sys.executable, "-m", "normcheck", "report", "--quick", "--backend",
                        "cpu", "--kernels", "rmsnorm_rms_fp32", "--out", "rep", "--spec",
                        "vllm_ignores_stride.toml"], cwd=work, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    for f in ("ggml_norm.toml", "ggml_norm.cu"):  # one-pass variance: fails, saves its rows
        shutil.copy(isolation.CUDA_SRC / "examples" / f, work)
    r = subprocess.run([sys.executable, "-m", "normcheck", "check", "ggml_norm.toml",
                        "--examples", "8", "--search", "0"], cwd=work, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 1, r.stdout[-2000:]
    r = subprocess.run([sys.executable, "-m", "normcheck", "replay"], cwd=work,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "verdict: FAIL" in r.stdout, r.stderr[-2000:]
    assert not marker.exists(), marker.read_text()
    # the plugin: a user's suite checking a kernel, run from a folder with the same plants --
    # `python -m pytest` puts that folder on the suite's own path (pytest's process may import
    # them: the user's suite is theirs), but no worker normcheck starts does
    _plant(pytester.path, marker, names)
    pytester.makepyfile(test_user=f"""
        from normcheck import check

        def test_kernel():
            r = check.check_kernel(spec={str(SHAPES / 'vllm_const_stride.toml')!r},
                                   examples=4, search=0)
            assert r.verdict == "pass"
        """)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    ran = marker.read_text().splitlines() if marker.exists() else []
    # a worker's argv[0] is "-c" (its bootstrap) or its module's file, beneath normcheck
    assert not [ln for ln in ran if "'-c'" in ln or "normcheck" in ln], ran


def test_a_worker_starts_isolated():
    """python -I -B, the bootstrap keeping only the interpreter's folders and normcheck's own
    link folder on the path, a private folder to work in."""
    argv = isolation.command("normcheck.backends.cpu.worker")
    assert argv[:4] == [sys.executable, "-I", "-B", "-c"]
    root = Path(argv[5])
    assert [p.name for p in root.iterdir()] == ["normcheck"]
    assert (root / "normcheck").resolve() == isolation.PACKAGE
    cwd = Path(isolation.private_cwd())
    assert cwd.is_dir() and not any(cwd.iterdir()) and not os.access(cwd, os.W_OK) or \
        os.geteuid() == 0
    r = subprocess.run([*isolation.command("json.tool", "--help")], capture_output=True,
                       text=True, cwd=cwd, env={"PATH": os.defpath,
                                                "PYTHONPATH": str(HERE)}, timeout=60)
    assert r.returncode == 0


def test_the_worker_refuses_a_module_from_outside(tmp_path):
    """The assertion before the sandbox: a module imported from outside the interpreter's
    folders and normcheck's package stops the worker (exit 3), naming it."""
    (tmp_path / "intruder.py").write_text("X = 1\n")
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import intruder; "
            "from normcheck.backends.isolation import foreign_modules; "
            "print(foreign_modules())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)
    assert "intruder" in r.stdout and str(tmp_path) in r.stdout


def test_the_header_fetch_runs_no_planted_pip_and_sees_no_secret(tmp_path, monkeypatch):
    """pip runs isolated (a pip/ in the working folder is not it), confined, with pip's
    settings only; a registry that cannot serve the pinned bytes is a named error."""
    from normcheck.backends import fetch, headers

    marker = tmp_path / "marker"
    (tmp_path / "pip").mkdir()
    (tmp_path / "pip" / "__init__.py").write_text("")
    (tmp_path / "pip" / "__main__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (tmp_path / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('site')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SECRET_TOKEN", "tok-14142135")
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "no-index").as_uri())
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-links"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("NORMCHECK_CACHE", str(tmp_path / "cache"))
    env = fetch.pip_environment()
    assert "SECRET_TOKEN" not in env and env["PIP_INDEX_URL"].startswith("file:")
    with pytest.raises(CompileError, match="could not fetch NVTX's headers"):
        headers.fetch("nvidia-nvtx")
    assert not marker.exists()
    req = fetch.Pin("nvidia-nvtx", *headers.PINS["nvidia-nvtx"]).requirement()
    assert req.startswith("nvidia-nvtx==13.5.25 --hash=sha256:")


def test_a_fetch_is_pinned_and_binary_only(monkeypatch):
    """The argv pip gets: --only-binary=:all:, --no-deps, --require-hashes, isolated."""
    from normcheck.backends import confine, fetch

    seen = {}

    def fake(argv, what, **kw):
        seen["argv"], seen["kw"] = argv, kw
        return confine.Result(1, "", "no")

    monkeypatch.setattr(confine, "run_compiler", fake)
    with pytest.raises(CompileError):
        fetch.download([fetch.Pin("x", "1", ("00" * 32,))], "x")
    argv = seen["argv"]
    assert argv[1:3] == ["-I", "-B"] and argv[5] == "-" and argv[6] == "pip"
    for flag in ("--only-binary=:all:", "--no-deps", "--require-hashes", "--no-cache-dir"):
        assert flag in argv
    assert seen["kw"]["connect"] and seen["kw"]["cwd"] == isolation.private_cwd()
    assert str(Path.home()) not in seen["kw"]["write"][0]


# -- Triton: a file's imports run inside the sandbox ------------------------------------------
_TRITON_RMS = """
import triton
import triton.language as tl
{header}

@triton.jit
def rms(Y, X, W, eps, rows, cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < cols
    x = tl.load(X + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * cols + offs, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)
"""


def _triton_file(folder: Path, header: str, name="k.py") -> Path:
    p = folder / name
    p.write_text(_TRITON_RMS.format(header=textwrap.dedent(header)))
    return p


def _check_triton(path, **kw):
    return check.check_kernel(path, "rms", "rmsnorm", "fp16", examples=kw.pop("examples", 4),
                              search=0, **kw)


@needs_triton
def test_a_dead_import_of_a_main_module_runs_nothing(tmp_path, monkeypatch):
    """`import unittest.__main__` inside a function never called: nothing is imported before
    the sandbox any more, so test discovery never starts (it imported the kernel, test_rms.py,
    ten times outside the sandbox); the kernel passes."""
    marker = tmp_path / "marker"
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    p = _triton_file(kdir, f"""
        if __name__ == "test_rms":  # imported by test discovery, not run by normcheck
            open({str(marker)!r}, "a").write("imported\\n")

        def never_called():
            import unittest.__main__  # noqa: F401
        """, name="test_rms.py")
    monkeypatch.chdir(tmp_path)
    r = _check_triton(p)
    assert r.verdict == "pass", r.render()
    assert not marker.exists()


@needs_triton
def test_a_main_module_imported_by_a_file_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = _triton_file(tmp_path, "import unittest.__main__  # noqa: F401\n")
    with pytest.raises(CompileError, match=r"does not import a __main__ module .*"
                                           r"unittest\.__main__"):
        _check_triton(p)


@needs_triton
def test_a_files_imports_run_inside_the_sandbox(tmp_path, monkeypatch):
    """A module the file imports runs confined: at import it cannot write a file (it could
    before, imported ahead of the sandbox)."""
    monkeypatch.chdir(tmp_path)
    mod = tmp_path / "site"
    mod.mkdir()
    target = tmp_path / "written"
    # a module of the interpreter's folders stands for an installed package with import-time
    # code: colorsys is imported by nothing of normcheck's, so the file's import runs it now
    p = _triton_file(tmp_path, f"""
        import colorsys  # noqa: F401 -- imported inside the sandbox: its stat and read work
        try:
            open({str(target)!r}, "w")
        except OSError:
            pass
        """)
    r = _check_triton(p)
    assert not target.exists()
    assert r.verdict == "fail" and r.failures[0].kind == "sandbox", r.render()


@needs_triton
@pytest.mark.parametrize("runner", [["-m", "normcheck"], None])
def test_a_files_import_of_an_unloaded_module_works_however_normcheck_started(runner,
                                                                               tmp_path):
    """A stdlib module no part of normcheck imported, imported by the file in the sandbox:
    its path is statted (carried out as open + fstat), started as `python -m normcheck` or
    as the console script alike."""
    p = _triton_file(tmp_path, "import colorsys  # noqa: F401\nimport plistlib  # noqa\n")
    script = Path(sys.executable).parent / "normcheck"
    cmd = [sys.executable, *runner] if runner else [str(script)]
    if not runner and not script.is_file():
        pytest.skip("no console script")
    r = subprocess.run([*cmd, "check", str(p), "--entry", "rms", "--norm", "rmsnorm",
                        "--dtype", "fp16", "--examples", "4", "--search", "0", "--json"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert _verdict(r) == "pass", r.stderr[-2000:]


@needs_triton
def test_a_file_too_deep_to_read_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    deep = "X = " + "+".join(["1"] * 200_000) + "\n"
    p = _triton_file(tmp_path, deep)
    r = subprocess.run([sys.executable, "-m", "normcheck", "check", str(p), "--entry", "rms",
                        "--norm", "rmsnorm", "--dtype", "fp16"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 2 and "nested too deeply" in r.stderr, r.stderr[-1000:]
    deco = ("@triton.autotune(configs=[" + "[" * 3000 + "]" * 3000 + "], key=[])\n")
    q = tmp_path / "d.py"
    q.write_text(_TRITON_RMS.format(header="").replace("@triton.jit", deco + "@triton.jit"))
    r = subprocess.run([sys.executable, "-m", "normcheck", "check", str(q), "--entry", "rms",
                        "--norm", "rmsnorm", "--dtype", "fp16"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 2 and "internal error" not in r.stderr, r.stderr[-1000:]


# -- one user source per worker ----------------------------------------------------------------
@needs_triton
def test_a_kernel_cannot_change_another_kernels_results_or_its_yardstick(tmp_path,
                                                                        monkeypatch):
    """A file that patches the executor as it is imported changes nothing outside its own
    worker: the next file's verdict and ulps, and the built-in yardstick's, are a clean run's."""
    monkeypatch.chdir(tmp_path)
    sound = _triton_file(tmp_path, "", name="sound.py")
    before = _check_triton(sound)
    evil = _triton_file(tmp_path, """
        from normcheck.backends.triton import executor as _ex
        _real = _ex.run
        def _noisy(fn, meta, params, constexprs, grid, args, *rest):
            _real(fn, meta, params, constexprs, grid, args, *rest)
            for a in args:
                if hasattr(a, "dtype") and a.dtype.kind == "f":
                    a[...] = a * 1.5
        _ex.run = _noisy
        """, name="evil.py")
    _check_triton(evil)
    after = _check_triton(sound)
    assert after.verdict == before.verdict == "pass"
    for a, b in zip(before.families, after.families):
        assert (a.max_ulp, a.baseline.max_scaled if a.baseline else None) == \
            (b.max_ulp, b.baseline.max_scaled if b.baseline else None), a.family


@needs_triton
def test_a_kernel_reads_no_other_kernels_source(tmp_path, monkeypatch):
    """The Triton worker reads its own file's cached copy only: a kernel listing the cache and
    reading what is there finds nothing of a file checked before."""
    monkeypatch.chdir(tmp_path)
    secret = _triton_file(tmp_path, "TEAM_SECRET = 'tok-2236067977'\n", name="theirs.py")
    assert _check_triton(secret).verdict == "pass"
    root = cache.cache_dir("triton")
    snoop = _triton_file(tmp_path, f"""
        import os
        found = []
        for d, _subs, files in os.walk({str(root)!r}):
            for f in files:
                try:
                    found.append(open(os.path.join(d, f)).read())
                except OSError:
                    pass
        if any("tok-2236067977" in t for t in found):
            raise RuntimeError("read: " + "".join(found)[:500])
        """, name="snoop.py")
    try:
        r = _check_triton(snoop)
        text = r.render()
    except CompileError as e:
        text = str(e)
    assert "tok-2236067977" not in text


def test_a_cuda_kernel_reads_no_other_build(tmp_path):
    """A CUDA kernel's worker reads its own build's folder: another kernel's module is not
    readable from it (it was, under the one shared worker)."""
    from normcheck.backends import get_backend

    be = get_backend("cpu")
    other = be.compile('extern "C" __global__ void k(float* y) { y[0] = 7; }', "k")
    snoop = be.compile(textwrap.dedent("""
        #include <fcntl.h>
        #include <unistd.h>
        extern "C" __global__ void k(float* y, const char* path) {
          int fd = open(path, O_RDONLY | O_CLOEXEC);
          y[0] = fd >= 0 ? 1.f : -1.f;
          if (fd >= 0) close(fd);
        }"""), "k")
    y = np.zeros(1, np.float32)
    path = np.frombuffer(other.module.path.encode() + b"\0", np.uint8).copy()
    snoop(1, 1, [y, path])
    assert y[0] == -1
    own = np.frombuffer(snoop.module.path.encode() + b"\0", np.uint8).copy()
    snoop(1, 1, [y, own])
    assert y[0] == 1
    assert other.module.worker() is not snoop.module.worker()


# -- the GPU path: the file runs in a worker of its own ----------------------------------------
@needs_triton
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_the_gpu_path_runs_the_file_in_an_isolated_worker(tmp_path, monkeypatch):
    """--backend cuda used to exec the file in normcheck's own process; now its top level runs
    in the cpu path's sandboxed loader and the kernel is rebuilt from its text in a worker
    started isolated -- tested with the stand-in (the same worker, Triton's interpreter on
    torch's CPU tensors).  What it saw comes back in the import error it raises."""
    from normcheck.backends.triton.backend import TritonGpuStandIn
    from normcheck.errors import CompileError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SECRET_TOKEN", "tok-1732050807")
    p = _triton_file(tmp_path, f"""
        import json, os, sys
        raise RuntimeError("SEEN" + json.dumps({{"pid": os.getpid(), "cwd": os.getcwd(),
                           "isolated": sys.flags.isolated, "secret": "SECRET_TOKEN" in os.environ,
                           "here": {str(tmp_path)!r} in "".join(sys.path)}}) + "END")
        """)
    with pytest.raises(CompileError) as e:
        _check_triton(p, backend=TritonGpuStandIn(), examples=2)
    text = str(e.value)
    seen = json.loads(text[text.index("SEEN") + 4:text.index("END")].replace('\\"', '"'))
    assert seen["pid"] != os.getpid() and seen["isolated"] == 1 and not seen["secret"]
    assert seen["cwd"] == isolation.private_cwd() and not seen["here"]


@needs_triton
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_the_gpu_path_writes_no_cache(tmp_path, monkeypatch):
    """#55: the GPU path's worker runs without the seccomp sandbox (its driver needs its
    devices) and could write what the user can -- normcheck's cache (a compiled kernel planted
    for a later check, a launcher replaced) among it.  Now the launcher's landlock lets it write
    only its own scratch folder (HOME, TMPDIR, Triton's cache) and /dev: the worker is started
    with those rules, a process under the same rules cannot write the cache, the folder beside
    the kernel or the working folder, and the scratch folder goes with the worker."""
    from normcheck.backends import cache, confine
    from normcheck.backends.triton import backend
    from normcheck.backends.triton.backend import TritonGpuStandIn

    monkeypatch.chdir(tmp_path)
    p = _triton_file(tmp_path, "")
    assert _check_triton(p, backend=TritonGpuStandIn(), examples=2).families
    workers = [w for w in backend._gpu_workers("cpu").all() if w.proc is not None]
    assert workers
    for w in workers:
        argv = Path(f"/proc/{w.proc.pid}/cmdline").read_bytes().split(b"\0")
        writes = [argv[i + 1].decode() for i, a in enumerate(argv[:-1]) if a == b"--write"]
        assert sorted(writes) == sorted([w.scratch, "/dev"]), argv
        assert b"--read" in argv and "normcheck-gpu-" in w.scratch
    # the same rules, on a process of the test's own
    targets = [cache.cache_root() / "planted-by-gpu-file", tmp_path / "planted-beside"]
    ok = tmp_path / "scratch"
    ok.mkdir()
    code = ("import sys\nout = []\nfor t in sys.argv[1:]:\n    try:\n"
            "        open(t, 'w').write('x'); out.append('WROTE')\n"
            "    except OSError as e:\n        out.append(type(e).__name__)\nprint(*out)")
    cmd = confine.command([sys.executable, "-c", code, *map(str, targets), str(ok / "f")],
                          read=["/"], write=[str(ok), "/dev"])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["PermissionError", "PermissionError", "WROTE"], r
    assert not any(t.exists() for t in targets)
    scratch = workers[0].scratch
    backend._gpu_workers("cpu").close()
    assert not Path(scratch).exists()
