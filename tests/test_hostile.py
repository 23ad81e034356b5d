"""A kernel under test cannot touch the machine, its faults keep their names, bad input exits 2
with one line, and concurrent or interrupted runs leave nothing behind."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from normcheck import errors, kernels
from normcheck.backends import get_backend
from paths_support import beside

SRC = Path(__file__).parent / "cuda" / "hostile.cu"
CHECK_SRC = Path(__file__).parent / "cuda" / "check" / "kernels.cu"
ENTRIES = ["write_file", "read_passwd", "read_cloexec", "run_command", "fork_bomb", "fork_abort",
           "network", "remove_file", "stack_overflow", "read_before_start", "read_past_end",
           "spin", "vector_load"]


@pytest.fixture(scope="module")
def k():
    return get_backend("cpu").compile_many(SRC, ENTRIES)


def cstr(s):
    return np.frombuffer(s.encode() + b"\0", np.uint8).copy()


def _cmdline(q) -> bytes:
    try:
        return (Path("/proc") / str(q) / "cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return b""


def _our_processes():
    """Processes whose command line names normcheck's worker."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if b"normcheck.backends.cpu.worker" in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def test_a_read_only_probe_of_a_path_is_answered_not_there(k):
    """fopen("/etc/passwd", "r") (no O_CLOEXEC: seccomp traps it) is answered ENOENT, as a
    sound host probe of an optional file is (#53): the kernel reads nothing and goes on."""
    y = np.zeros(1, np.float32)
    k["read_passwd"](1, 1, [y])
    assert y[0] == 0


@pytest.mark.parametrize("entry,call,arg", [
    ("write_file", "open", "file"),
    ("run_command", "system()", "file"), ("fork_bomb", "clone", None),
    ("fork_abort", "clone", None), ("network", "socket", None),
    ("remove_file", "unlink", "existing"),
])
def test_the_sandbox_stops_and_names_the_call(k, tmp_path, entry, call, arg):
    y = np.zeros(1, np.float32)
    target = tmp_path / "made_by_kernel"
    if arg == "existing":
        target.write_text("keep me")
    args = [y] + ([cstr(str(target))] if arg else [])
    with pytest.raises(errors.SandboxViolation, match=rf"forbidden system call: {re.escape(call)}") as e:
        k[entry](1, 1, args)
    assert e.value.kind == "sandbox"
    assert y[0] == 0
    if arg == "file":
        assert not target.exists()
    if arg == "existing":
        assert target.read_text() == "keep me"
    # the trapped fork left no process behind: the kernel's worker was ended, and no worker
    # program (the Python process normcheck-launch starts: other builds' workers live on) has
    # a child
    assert k[entry].module.worker().proc is None
    programs = [q for q in _our_processes() if b"normcheck-launch" not in _cmdline(q)]
    forked = [q for q in _our_processes() if _ppid(q) in programs]
    assert not forked


def test_a_read_with_cloexec_is_refused_by_landlock(k):
    y = np.zeros(1, np.float32)
    k["read_cloexec"](1, 1, [y])
    assert y[0] == 0  # /etc/passwd could not be read


def test_faults_keep_their_names(k):
    y = np.zeros(4, np.float32)
    with pytest.raises(errors.StackOverflow, match=r"stack overflow in block \(0,0,0\).*KiB"):
        k["stack_overflow"](1, 1, [y])
    # the built-in kernels run in the same worker first: the next fault is still named
    kernels.run("rmsnorm_rms_fp32", np.ones((3, 5), np.float32))
    for n in (1000, 1024, 7):  # sizes that are and are not a multiple of a page
        x = np.ones(n, np.float32)
        with pytest.raises(errors.OutOfBounds, match=rf"read of element {n} of argument 1 `x`"):
            k["read_past_end"](1, 32, [y, x, np.int32(n)], names=["y", "x", "n"])
        with pytest.raises(errors.OutOfBounds, match=r"read of element -1 of argument 1 `x`.*"
                                                     r"before its start"):
            k["read_before_start"](1, 32, [y, x, np.int32(n)], names=["y", "x", "n"],
                                   guard="both")
    with pytest.raises(errors.KernelTimeout):
        k["spin"](1, 1, [y], timeout=1)
    k["read_past_end"](1, 32, [y, np.ones(8, np.float32), np.int32(7)])  # and it carries on


def test_vector_loads_of_an_odd_sized_array_run_aligned(k, monkeypatch):
    """An array whose size is not a multiple of 16 bytes first ends exactly at its guard page;
    a kernel whose 16-byte loads then fault as misaligned runs again aligned — and remembers it,
    so later launches are not run twice."""
    kern = k["vector_load"]
    x = np.arange(1, 7, dtype=np.float32)
    y = np.zeros(1, np.float32)
    launches = []
    real = type(kern)._launch
    monkeypatch.setattr(type(kern), "_launch",
                        lambda self, *a: (launches.append(a[-2]), real(self, *a))[1])  # guard
    kern(1, 1, [y, x, np.int32(6)])
    assert y[0] == 1 + 2 + 3 + 4 + 6
    assert launches == ["tight", "end"] and kern.needs_alignment
    launches.clear()
    kern(1, 1, [y, x, np.int32(6)])
    assert launches == ["end"]


def test_nothing_in_dev_shm(k):
    y = np.zeros(1, np.float32)
    k["read_cloexec"](1, 1, [y])
    worker = k["read_cloexec"].module.worker()
    assert worker.proc is not None and worker.proc.poll() is None
    assert not [p for p in os.listdir("/dev/shm") if p.startswith("normcheck")]


def _start_spinning_check(tmp_path):
    """A `normcheck check` whose kernel spins forever; returns (the check, its worker's pid)."""
    spec = tmp_path / "spin.toml"
    spec.write_text(f'''source = "{beside(tmp_path, SRC)}"
entry = "spin"
norm = "rmsnorm"
dtype = "fp32"
eps = 1e-5
[launch]
grid = "1"
block = "1"
[[args]]
role = ["input", "output"]
''')
    p = subprocess.Popen([sys.executable, "-m", "normcheck", "check", "--spec", str(spec),
                          "--timeout", "120", "--search", "0"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, cwd=tmp_path)
    deadline = time.time() + 60
    while time.time() < deadline:
        kids = [q for q in _our_processes() if _ppid(q) == p.pid]
        if kids:
            return p, kids[0]
        time.sleep(0.2)
    p.kill()
    raise AssertionError("the check's worker never started")


def _ppid(pid):
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _gone(pid, within):
    deadline = time.time() + within
    while time.time() < deadline:
        if not Path(f"/proc/{pid}").exists() or \
                "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_orphans_when_the_parent_is_killed(tmp_path, sig):
    p, worker = _start_spinning_check(tmp_path)
    time.sleep(1.0)  # the kernel is spinning now
    p.send_signal(sig)
    p.wait(timeout=30)
    assert _gone(worker, within=1.5), f"worker {worker} outlived its parent ({sig.name})"
    if sig == signal.SIGTERM:
        assert p.returncode != 0
    assert not [f for f in os.listdir("/dev/shm") if f.startswith("normcheck")]


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "normcheck", *args], capture_output=True,
                          text=True, cwd=cwd)


def test_bad_input_exits_2_with_one_line(tmp_path):
    base = ["check", str(CHECK_SRC), "--entry", "rms_good_fp16", "--norm", "rmsnorm",
            "--dtype", "fp16"]
    bad_npz = tmp_path / "bad.npz"
    bad_npz.write_bytes(b"PK\x03\x04 not really a zip")
    empty_npz = tmp_path / "empty.npz"
    empty_npz.write_bytes(b"")
    binary = tmp_path / "bin.cu"
    binary.write_bytes(b"\x7fELF\x00\x01\x02")
    specdir = tmp_path / "dir.toml"
    specdir.mkdir()
    zero = tmp_path / "zero.toml"
    zero.write_text(f'source = "{beside(tmp_path, CHECK_SRC)}"\nentry = "rms_good_fp16"\nnorm = "rmsnorm"\n'
                    'dtype = "fp16"\n[launch]\ngrid = "rows // (cols - cols)"\n'
                    '[[args]]\nrole = "output"\n[[args]]\nrole = "input"\n[[args]]\n'
                    'role = "gamma"\n[[args]]\nrole = "eps"\n[[args]]\nrole = "rows"\n'
                    '[[args]]\nrole = "cols"\n')
    big_smem = tmp_path / "smem.toml"
    big_smem.write_text(zero.read_text().replace('grid = "rows // (cols - cols)"',
                                                 'shared_mem = "1099511627776"'))
    quote = tmp_path / 'we"ird.cu'
    quote.write_text(CHECK_SRC.read_text())
    cases = [
        (base + ["--seed", "-1"], "seed=-1"),
        (base + ["--timeout", "nan"], "timeout=nan"),
        (base + ["--timeout", "0"], "timeout=0"),
        (base + ["--timeout", "-1"], "timeout=-1"),
        (base + ["--examples", "1000000000"], "examples=1000000000"),
        (["check", "--spec", str(zero)], "division by zero"),
        (["check", "--spec", str(big_smem)], "shared_mem=1099511627776"),
        (["check", "--spec", str(specdir)], "a folder"),
        (["check", str(binary), "--entry", "k", "--norm", "rmsnorm", "--dtype", "fp16"],
         "NUL bytes"),
        (["replay", str(bad_npz)], "bad.npz"),
        (["replay", str(empty_npz)], "empty.npz"),
        (["replay", str(tmp_path / "missing.npz")], "missing.npz"),
    ]
    for args, text in cases:
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stdout[-500:], r.stderr[-500:])
        assert text in r.stderr, (args, r.stderr)
        # one line says what is wrong, the last; progress lines of a slower build may come
        # before it (they are not counted: a loaded machine prints more of them)
        said = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("normcheck: error:")]
        assert "Traceback" not in r.stderr and len(said) == 1, r.stderr
        assert r.stderr.strip().splitlines()[-1] == said[0], r.stderr
    # a spec that cannot launch is refused before anything is built: its source, which does
    # not compile, is never given to the compiler
    broken = tmp_path / "broken.cu"
    broken.write_text('extern "C" __global__ void rms_good_fp16( this is not C++\n')
    (tmp_path / "broken.toml").write_text(zero.read_text().replace(
        beside(tmp_path, CHECK_SRC), "broken.cu"))
    r = _cli("check", "--spec", str(tmp_path / "broken.toml"))
    assert r.returncode == 2 and "division by zero" in r.stderr and "g++" not in r.stderr, \
        r.stderr
    ok = _cli("check", str(quote), "--entry", "rms_good_fp16", "--norm", "rmsnorm", "--dtype",
              "fp16", "--search", "0", "--examples", "8")
    assert ok.returncode == 0, ok.stderr


def test_a_truncated_case_file_is_refused(tmp_path):
    r = _cli("check", str(CHECK_SRC), "--entry", "rms_rstd_in_fp16", "--norm", "rmsnorm",
             "--dtype", "fp16", "--search", "0", "--examples", "8", cwd=tmp_path)
    assert r.returncode == 1
    case = next((tmp_path / ".normcheck").glob("counterexample-*.npz"))
    data = case.read_bytes()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(data[: len(data) // 2])
    r = _cli("replay", str(cut))
    assert r.returncode == 2 and "cut.npz" in r.stderr and "Traceback" not in r.stderr


def test_replay_does_not_run_code_from_a_case_file(tmp_path):
    from normcheck import check, replay

    text = CHECK_SRC.read_text()
    r = check.check_kernel(text, "rms_rstd_in_fp16", "rmsnorm", "fp16", search=0, examples=8,
                           save_counterexample=tmp_path / "c.npz")
    assert r.verdict == "fail"
    out = _cli("replay", str(tmp_path / "c.npz"))
    assert out.returncode == 2 and "--run-embedded-source" in out.stderr
    out = _cli("replay", str(tmp_path / "c.npz"), "--run-embedded-source")
    assert out.returncode == 1 and "embedded" in out.stdout  # it replays the failure
    # a case of a file on disk names the file, and says when it changed
    src = tmp_path / "k.cu"
    src.write_text(text)
    r = check.check_kernel(src, "rms_rstd_in_fp16", "rmsnorm", "fp16", search=0, examples=8,
                           save_counterexample=tmp_path / "d.npz")
    case = replay.load_case(tmp_path / "d.npz")
    assert case["kernel"]["source"] == str(src.resolve()) and "source_text" not in \
        case["kernel"]
    src.write_text(text + "\n// edited\n")
    out = _cli("replay", str(tmp_path / "d.npz"))
    assert out.returncode == 1 and "has changed since the case was saved" in out.stdout


def test_concurrent_failing_checks_keep_their_counterexamples(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-m", "normcheck", "check", str(CHECK_SRC),
                               "--entry", "rms_rstd_in_fp16", "--norm", "rmsnorm", "--dtype",
                               "fp16", "--search", "0", "--examples", "8"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(2)]
    assert [p.wait(timeout=300) for p in procs] == [1, 1]
    assert len(list((tmp_path / ".normcheck").glob("counterexample-*.npz"))) == 2


def test_concurrent_cold_builds_of_one_file(tmp_path):
    env = {**os.environ, "NORMCHECK_CACHE": str(tmp_path / "cache")}
    code = ("from normcheck.backends import get_backend; import numpy as np; "
            f"k = get_backend('cpu').compile({str(CHECK_SRC)!r}, 'rms_good_fp32'); "
            "x = np.ones((2, 8), np.float32); y = np.empty_like(x); "
            "k((2,), (32,), [y, x, np.ones(8, np.float32), np.float32(1e-5), np.int32(2), "
            "np.int32(8)]); assert np.all(np.abs(y - 1) < 1e-5)")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errs
    leftovers = [p for p in (tmp_path / "cache").rglob("*") if p.name.endswith(".tmp")]
    assert not leftovers


def test_a_report_folder_has_one_writer(tmp_path):
    from normcheck.report import folder

    out = tmp_path / "r"
    with folder.lock(out):
        r = _cli("report", "--backend", "cpu", "--quick", "--kernels", "rmsnorm_rms_fp32",
                 "--out", str(out))
        assert r.returncode == 2 and "another run is writing into this folder" in r.stderr
        assert f"pid {os.getpid()}" in r.stderr  # the holder, named
        assert not (out / "results.json").exists()
    with folder.lock(out):  # released when the holder ends, whichever way
        pass


def test_a_results_file_with_its_first_line_cut_is_refused(tmp_path):
    from normcheck.report import run_report

    out = tmp_path / "r"
    run_report("quick", backend="cpu", out=out, kernels="rmsnorm_rms_fp32", progress=False,
               stop_after=2)
    path = out / "results.json"
    text = path.read_text()
    path.write_text(text[20:])
    r = _cli("report", "--backend", "cpu", "--quick", "--kernels", "rmsnorm_rms_fp32", "--out",
             str(out))
    assert r.returncode == 2 and "results.json" in r.stderr and "Traceback" not in r.stderr
    assert path.read_text() == text[20:]  # left as it was: nothing measured is thrown away


@pytest.mark.parametrize("include", ['#include ".env"',
                                     '#define SECRET_FILE "notes.txt"\n#include SECRET_FILE'])
def test_a_file_beside_the_kernel_never_reaches_a_diagnostic(tmp_path, include):
    """#55: `#include ".env"` inside a function body made g++ print "'CANARY_...' was not
    declared in this scope": the kernel's folders give the compiler source files only, checked
    before any compiler runs (and after preprocessing, for a computed #include)."""
    (tmp_path / ".env").write_text("CANARY_SECRET_55=abc\n")
    (tmp_path / "notes.txt").write_text("CANARY_SECRET_55 'unterminated\n")
    (tmp_path / "k.cu").write_text(
        'extern "C" __global__ void rms(float* y, const float* x, const float* g, float eps, '
        'int rows, int cols) {\n' + include + "\n}\n")
    out = subprocess.run([sys.executable, "-m", "normcheck", "check", "k.cu", "--entry", "rms",
                          "--norm", "rmsnorm", "--dtype", "fp32", "--search", "0",
                          "--examples", "4"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "CANARY" not in out.stdout + out.stderr
    assert "refused: its name is not a source file's" in out.stderr
