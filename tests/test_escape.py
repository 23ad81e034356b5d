"""A hostile kernel, spec or case file cannot reach outside the sandbox (docs/DESIGN.md, "Threat
model"): each escape that worked once is refused or contained here with a named failure."""

import json
import re
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from normcheck import errors, replay, spec as specs
from normcheck.backends import base, cache, confine, get_backend
from normcheck.backends.cpu import wire
from normcheck.backends.cpu.backend import parse_report
from paths_support import beside

HERE = Path(__file__).parent
SRC = HERE / "cuda" / "escape.cu"
CTOR = HERE / "cuda" / "escape_ctor.cu"
CHECK_SRC = HERE / "cuda" / "check" / "kernels.cu"
ENTRIES = ["forge_reply", "forge_wire_reply", "forge_report", "limit_other", "raise_own_limit",
           "renice_other", "renice_user", "clear_death_signal", "new_session", "truncate_arena",
           "set_clock", "environment", "capabilities"]


@pytest.fixture(scope="module")
def k():
    return get_backend("cpu").compile_many(SRC, ENTRIES)


def cstr(s):
    return np.frombuffer(s.encode() + b"\0", np.uint8).copy()


def _cli(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "normcheck", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=600)


# -- the worker's replies are data ------------------------------------------------------------------
def test_a_forged_pickle_reply_runs_nothing_in_normcheck(k, tmp_path):
    target = tmp_path / "pwned"
    y = np.zeros(1, np.float32)
    with pytest.raises(errors.SandboxViolation, match="not normcheck's protocol") as e:
        k["forge_reply"](1, 1, [y, cstr(str(target))])
    assert e.value.kind == "sandbox" and "bad magic" in str(e.value)
    assert not target.exists()
    y[0] = 0  # and the next launch runs in a fresh worker
    k["capabilities"](1, 1, [y])


def test_a_reply_forged_ahead_of_the_real_one_is_caught(k):
    y = np.zeros(1, np.float32)
    with pytest.raises(errors.SandboxViolation, match="out of step"):
        k["forge_wire_reply"](1, 1, [y])


def test_a_launch_note_is_held_to_what_the_runtime_writes():
    """A launch's note (an undefined shuffle read, under 320 bytes) goes into failure messages:
    a reply carrying a longer one, or one that is no string, is not a reply of normcheck's."""
    from normcheck.backends.cpu.backend import _launch_reply
    from normcheck.backends.cpu.wire import WireError

    ok = {"ok": True, "seconds": 0.1, "note": "__shfl_xor_sync in block (0,0,0): ..."}
    assert _launch_reply(dict(ok)) == ok
    for bad in ("x" * 513, b"bytes", 7):
        with pytest.raises(WireError, match="note"):
            _launch_reply({**ok, "note": bad})


def test_a_forged_crash_report_is_named(k):
    y = np.zeros(1, np.float32)
    with pytest.raises(errors.SandboxViolation, match="arg=99 is not an array argument"):
        k["forge_report"](1, 1, [y])


def test_a_static_constructor_that_forges_a_reply_at_load(tmp_path):
    marker = Path("/tmp/normcheck-escape-ctor")
    marker.unlink(missing_ok=True)
    with pytest.raises(errors.SandboxViolation, match="not normcheck's protocol"):
        get_backend("cpu").compile(CTOR, "innocent")
    assert not marker.exists()


@pytest.mark.parametrize("payload,what", [
    (b"XYZ\x01\x00\x00\x00\x00", "bad magic"),
    (b"NCW\x02\x00\x00\x00\x00", "wire version"),
    (b"NCW\x01\xff\xff\xff\x7f", "announced"),
])
def test_malformed_headers(payload, what):
    with pytest.raises(wire.WireError, match=what):
        wire.header_length(payload)


@pytest.mark.parametrize("payload,what", [
    (b"m\x01\x00\x00\x00i" + b"\0" * 8 + b"N", "not a string"),
    (b"s\xff\xff\x01\x00abc", "limit"),
    (b"s\x03\x00\x00\x00ab", "truncated"),
    (b"l" + b"\x01\x00\x00\x00" + b"l\x01\x00\x00\x00" * 20 + b"N", "nested"),
    (b"c__builtin__\neval\n", "unknown tag"),
    (b"NN", "after the value"),
    (b"s\x02\x00\x00\x00\xff\xfe", "UTF-8"),
])
def test_malformed_payloads(payload, what):
    with pytest.raises(wire.WireError, match=what):
        wire.decode(payload)


def test_wire_round_trip():
    v = {"ok": True, "seconds": 0.25, "args": [["array", 1, 2], ["scalar", "<f4", b"\0\0\x80?"],
                                               ["null"]], "n": -3, "none": None}
    msg = wire.encode(v)
    assert wire.decode(msg[wire.HEADER:]) == v
    assert wire.header_length(msg[:wire.HEADER]) == len(msg) - wire.HEADER


@pytest.mark.parametrize("text,what", [
    ("kind=out_of_bounds arg=1 past_end_bytes=4 evil=1", "unexpected word"),
    ("kind=rm_rf", "not of the form"),
    ("arg=0", "no kind"),
    ("kind=crash kind=abort", "not of the form"),
    ("kind=crash signal=1" + "9" * 30, "not of the form"),
    ("kind=misaligned arg=5 elem_offset_bytes=3", "not an array argument"),
])
def test_forged_crash_reports(text, what):
    args = [np.zeros(3, np.float32), np.int32(3)]
    with pytest.raises(wire.WireError, match=what):
        parse_report(text, args)


# -- the sandbox covers what escaped ----------------------------------------------------------------
@pytest.mark.parametrize("entry,call,pid", [
    ("limit_other", "prlimit64", True), ("raise_own_limit", "prlimit64", False),
    ("renice_other", "setpriority", True), ("renice_user", "setpriority", False),
    ("clear_death_signal", "prctl", False), ("new_session", "setsid", False),
    ("truncate_arena", "ftruncate", False), ("set_clock", "clock_settime", False),
])
def test_other_processes_limits_and_lifetime_are_out_of_reach(k, entry, call, pid):
    y = np.zeros(1, np.float32)
    before = os.getpriority(os.PRIO_PROCESS, 0)
    args = [y] + ([np.int32(os.getpid())] if pid else [])
    with pytest.raises(errors.SandboxViolation, match=f"forbidden system call: {call}"):
        k[entry](1, 1, args)
    assert y[0] == 0
    assert os.getpriority(os.PRIO_PROCESS, 0) == before


def test_the_worker_sees_an_allow_listed_environment_and_no_capabilities(k, monkeypatch):
    monkeypatch.setenv("NORMCHECK_TEST_SECRET", "tok-3141592653")  # not one of the worker's
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "tok-2718281828")
    k["environment"].module.worker().close()  # a fresh worker, started with this environment
    y = np.zeros(1, np.float32)
    k["environment"](1, 1, [y])
    assert y[0] == 0  # no variable of normcheck's environment but its own
    k["capabilities"](1, 1, [y])
    assert y[0] == 0  # no capability, whoever runs normcheck (root in CI containers included)


def test_a_secret_in_the_environment_never_reaches_a_verdict(tmp_path):
    spec = tmp_path / "env.toml"
    spec.write_text(f'source = "{beside(tmp_path, SRC)}"\nentry = "environment"\nnorm = "rmsnorm"\n'
                    'dtype = "fp32"\neps = 1e-5\n[launch]\ngrid = "1"\nblock = "1"\n'
                    '[[args]]\nrole = ["input", "output"]\n')
    env = {**os.environ, "NORMCHECK_TEST_SECRET": "tok-1618033988"}
    r = _cli("check", "--spec", str(spec), "--search", "0", "--examples", "4", "--json",
             cwd=tmp_path, env=env)
    assert "tok-1618033988" not in r.stdout + r.stderr


# -- entries and every spec string pasted into code are parsed --------------------------------------
@pytest.mark.parametrize("entry", [
    "k<int>\n__attribute__((constructor)) void f() { system(\"id\"); }",
    "k<int>(); void g() {}", 'k<"x">', "k<1>; int x", "k/*", "k<sizeof(int)>", "k<T>{}",
    "k" + "<a" * 20 + ">" * 20, "x" * 600, "k(int)(int)", "k(int) x", "k(1)", "k(int",
    "k(int){}",
])
def test_entries_that_carry_code_are_refused(entry):
    with pytest.raises(errors.InvalidArgument, match="entry="):
        base.parse_entry(entry)


@pytest.mark.parametrize("entry,canonical", [
    ("rms_norm<__half>", "rms_norm<__half>"),
    ("vllm::rms_norm_kernel<c10::Half,8>", "vllm::rms_norm_kernel<c10::Half, 8>"),
    ("::ns::k< unsigned int , 4u, -1, true >", "::ns::k<unsigned int, 4u, -1, true>"),
    ("k<A<B<float>>, const float*>", "k<A<B<float>>, const float*>"),
    # one overload of an overloaded kernel, by its parameter types
    ("ln( float *,const float*,int )", "ln(float*, const float*, int)"),
    ("ns::k<__half>(__half*, unsigned int)", "ns::k<__half>(__half*, unsigned int)"),
    ("k()", "k()"),
])
def test_entries_of_real_kernels_parse(entry, canonical):
    assert base.parse_entry(entry) == canonical


@pytest.mark.parametrize("value", ["1; int x", "{1}", '"s"', "a\\\nb", "#x", "1\n2"])
def test_define_values_are_expressions_only(value):
    with pytest.raises(errors.InvalidArgument, match="defines"):
        base.check_defines({"X": value})


def test_a_spec_entry_carrying_code_is_a_spec_error(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('entry = "k<int>\\n__attribute__((constructor)) void f() {}"\n'
                 'norm = "rmsnorm"\ndtype = "fp32"\neps = 1e-5\n'
                 '[[args]]\nrole = ["input", "output"]\n')
    with pytest.raises(errors.SpecError, match="entry="):
        specs.load(p)


def test_a_case_file_whose_entry_carries_code_is_refused(tmp_path):
    src = tmp_path / CHECK_SRC.name  # beside the case: a source the case may name
    src.write_text(CHECK_SRC.read_text())
    path = replay.save_case(tmp_path / "c.npz", kernel={
        "source": str(src), "entries": ["rms_good_fp16<int>\n__attribute__((constructor)) "
                                              "static void f() {}"],
        "norm": "rmsnorm", "dtype": "fp16"}, x=np.ones((1, 4), np.float16))
    r = _cli("replay", str(path))
    assert r.returncode == 2 and "entry=" in r.stderr and "Traceback" not in r.stderr


# -- the compiler is confined --------------------------------------------------------------------
def _check_source(tmp_path, text, **env):
    src = tmp_path / "k.cu"
    src.write_text(text)
    return _cli("check", str(src), "--entry", "k", "--norm", "rmsnorm", "--dtype", "fp32",
                "--search", "0", "--examples", "4", "--json", cwd=tmp_path,
                env={**os.environ, **env})


def test_the_compiler_reads_no_file_outside_its_folders(tmp_path):
    secret = tmp_path.parent / f"secret-{os.getpid()}.txt"
    secret.write_text("tok-1414213562\n")
    try:
        sub = tmp_path / "src"
        sub.mkdir()
        # under `#pragma GCC system_header` the asm is not the user's PTX: only the assembler
        # sees it, and the assembler may read nothing outside the source's folders
        (sub / "sys.h").write_text(f'#pragma GCC system_header\nasm(".incbin \\"{secret}\\"");\n')
        r = _check_source(sub, '#include "sys.h"\n'
                               'extern "C" __global__ void k(float* y, const float* x, '
                               'const float* g, float e, int r, int c) {}\n')
    finally:
        secret.unlink()
    assert r.returncode == 2 and "file not found" in r.stderr
    assert "tok-1414213562" not in r.stdout + r.stderr


def test_a_device_as_an_include_is_refused_at_once(tmp_path):
    t = time.monotonic()
    r = _check_source(tmp_path, '#include "/dev/zero"\n')
    assert r.returncode == 2 and "/dev/zero" in r.stderr
    assert time.monotonic() - t < 120


def test_a_macro_flood_meets_the_compiler_limits(tmp_path):
    flood = "\n".join(f"#define F{i}(x) F{i - 1}(x) F{i - 1}(x)" for i in range(1, 40))
    r = _check_source(tmp_path, "#define F0(x) x\n" + flood + "\nint v[] = {F39(1)};\n",
                      NORMCHECK_COMPILER_CPU_S="3")
    assert r.returncode == 2
    assert "CPU time" in r.stderr or "output is over" in r.stderr
    assert len(r.stderr) < 80_000


def test_thousands_of_errors_are_cut_with_a_count(tmp_path):
    r = _check_source(tmp_path, "\n".join(f"int e{i} = undeclared_{i};" for i in range(1000)))
    assert r.returncode == 2
    assert "compiler output cut" in r.stderr or "more bytes" in r.stderr
    assert len(r.stderr) < confine.DIAGNOSTICS_BYTES + 4096


def test_a_huge_build_is_not_kept(tmp_path):
    r = _check_source(tmp_path, "__attribute__((used)) static char big[80 << 20] = {1};\n"
                                'extern "C" __global__ void k(float* y, const float* x, '
                                'const float* g, float e, int r, int c) {}\n')
    assert r.returncode == 2 and "over normcheck's limit" in r.stderr


# -- lifetime -----------------------------------------------------------------------------------
def _descendant_compilers(marker):
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmd and (b"cc1plus" in cmd or b"g++" in cmd or
                                           b"normcheck-launch" in cmd):
                out.append(int(d.name))
    return out


def test_kill_9_during_a_compile_leaves_no_process_and_no_folder(tmp_path):
    # a compile that runs for a while (the macro flood), killed with SIGKILL mid-way
    flood = "\n".join(f"#define F{i}(x) F{i - 1}(x) F{i - 1}(x)" for i in range(1, 30))
    src = tmp_path / "slow.cu"
    src.write_text("#define F0(x) x\n" + flood + "\nint v[] = {F29(1)};\n")
    p = subprocess.Popen([sys.executable, "-m", "normcheck", "check", str(src), "--entry", "k",
                          "--norm", "rmsnorm", "--dtype", "fp32"], cwd=tmp_path,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = f"normcheck-pp-{p.pid}-"
    deadline = time.time() + 120
    while time.time() < deadline and not _descendant_compilers(marker):
        time.sleep(0.1)
    assert _descendant_compilers(marker), "the compile never started"
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    deadline = time.time() + 5
    while time.time() < deadline and _descendant_compilers(marker):
        time.sleep(0.1)
    assert not _descendant_compilers(marker)
    import tempfile

    def left():
        return [f for f in os.listdir(tempfile.gettempdir()) if f"-{p.pid}-" in f and
                f.startswith("normcheck-")]

    # the launcher removes the folder after its compilers are gone (a partial preprocessor
    # output of the flood, hundreds of MB, may take a while to delete on a loaded machine: 5 s
    # was once not enough with two workers and other checks running), then none may be left
    deadline = time.time() + 60
    while time.time() < deadline and left():
        time.sleep(0.1)
    assert not left()


def test_the_lifetime_mechanism_is_in_the_provenance():
    prov = get_backend("cpu").provenance()
    assert prov["lifetime"].startswith(("pid-namespace", "process-group"))


# -- every hostile file is a clear error --------------------------------------------------------
def _one_line_error(r, text):
    assert r.returncode == 2, (r.stdout[-300:], r.stderr[-300:])
    assert text in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr


def test_hostile_files_are_clear_errors(tmp_path):
    fifo = tmp_path / "fifo.cu"
    os.mkfifo(fifo)
    dev = tmp_path / "dev.toml"
    dev.write_text('source = "/dev/zero"\nentry = "k"\nnorm = "rmsnorm"\ndtype = "fp32"\n'
                   'eps = 1e-5\n[[args]]\nrole = ["input", "output"]\n')
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    dotted = tmp_path / "dotted.toml"
    dotted.write_text("a" + ".b" * 100_000 + " = 1\n")
    grid = tmp_path / "grid.toml"
    grid.write_text(f'source = "{beside(tmp_path, CHECK_SRC)}"\nentry = "rms_good_fp32"\nnorm = "rmsnorm"\n'
                    'dtype = "fp32"\neps = 1e-5\n[launch]\ngrid = "' + "+".join(["rows"] * 20000)
                    + '"\n[[args]]\nrole = ["input", "output"]\n')
    results = tmp_path / "r1"
    results.mkdir()
    (results / "results.json").write_text('{"provenance": [], "records": 5}')
    results2 = tmp_path / "r2"
    results2.mkdir()
    (results2 / "results.json").write_text(json.dumps(
        {"provenance": {"seed": 0, "backend": "cpu"}, "records": [{"key": 1}]}))
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [
        (["check", str(fifo), "--entry", "k", "--norm", "rmsnorm", "--dtype", "fp32"],
         "a FIFO"),
        (["check", "--spec", str(dev)], "outside the spec's folder"),
        (["check", "--spec", str(deep)], "nested more than"),
        (["check", "--spec", str(dotted)], "nested more than"),
        (["check", "--spec", str(grid)], "characters"),
        (["report", "--backend", "cpu", "--kernels", "rmsnorm_rms_fp32", "--out", str(results)],
         "results.json"),
        (["report", "--backend", "cpu", "--kernels", "rmsnorm_rms_fp32", "--out", str(results2)],
         "record 0"),
        (["report", "--backend", "cpu", "--kernels", "rmsnorm_rms_fp32", "--out", str(a_file)],
         "this is a file"),
        (["report", "--backend", "cpu", "--kernels", "rmsnorm_rms_fp32", "--out",
          str(tmp_path / "r3"), "--cluster", str(tmp_path / "no" / "such.json")], "such.json"),
    ]
    for args, text in cases:
        t = time.monotonic()
        _one_line_error(_cli(*args), text)
        assert time.monotonic() - t < 120, args


def _npz(path, members: dict):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name + ".npy", data)


def _npy_header(shape, descr="<u2"):
    d = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    d += " " * (63 - (10 + len(d)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(d).to_bytes(2, "little") + d.encode()


def _meta(obj):
    s = np.array(json.dumps(obj) if not isinstance(obj, str) else obj)
    import io

    buf = io.BytesIO()
    np.save(buf, s)
    return buf.getvalue()


def test_hostile_case_files_are_clear_errors(tmp_path):
    good_meta = {"kernel": {"variant": "rmsnorm_rms_fp16"}, "formats": {"x": "fp16"},
                 "eps": 1e-5, "note": ""}
    files = {
        "huge.npz": {"meta": _meta(good_meta), "x": _npy_header((1 << 15, 1 << 15)) + b"\0" * 64},
        "deep.npz": {"meta": _meta("[" * 100_000 + "]" * 100_000),
                     "x": _npy_header((1, 4)) + b"\0" * 8},
        "object.npz": {"meta": _meta(good_meta), "x": _npy_header((1, 4), "|O") + b"\0" * 32},
        "short.npz": {"meta": _meta(good_meta), "x": _npy_header((1, 4)) + b"\0" * 4},
        "names.npz": {"meta": _meta(good_meta), "../x": _npy_header((1, 4)) + b"\0" * 8},
        "kernel.npz": {"meta": _meta({**good_meta, "kernel": {"variant": "x", "block": "abc"}}),
                       "x": _npy_header((1, 4)) + b"\0" * 8},
        # members each within the limit, together past it: bounded in what they expand to
        # (#65: a 0.33 MB file made normcheck's own process peak at 1.5 GB)
        "many.npz": {"meta": _meta(good_meta),
                     **{m: _npy_header((1 << 11, 1 << 10)) + b"\0" * (2 << 21)
                        for m in ("x", "gamma", "beta", "residual", "dy")}},
    }
    for name, members in files.items():
        path = tmp_path / name
        _npz(path, members)
        _one_line_error(_cli("replay", str(path)), name)


# -- the report folder -------------------------------------------------------------------------
@pytest.mark.parametrize("link", ["report.md", ".lock", "results.json.tmp", "results.json"])
def test_a_symlink_in_the_report_folder_is_refused(tmp_path, link):
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / link).symlink_to(victim)
    r = _cli("report", "--backend", "cpu", "--kernels", "rmsnorm_rms_fp32", "--out", str(out))
    _one_line_error(r, "link")
    assert victim.read_text() == "keep me"


# -- the allow-list (#32): a call the filter does not list is refused ---------------------------
PERMS = {"mode_fchmodat2": "fchmodat2", "mode_fchmod": "fchmod", "acl_setxattr": "setxattr",
         "xattr_setxattrat": "setxattrat", "attr_file_setattr": "file_setattr",
         "lease": "fcntl"}
#: a path's metadata asked for: answered "not there" (ENOENT), never told, never a violation --
#: host code probes for optional files so (#53: llm.c's launcher, Apex's static constructor)
PROBES = ("stat_path", "stat_statx", "access_path")


@pytest.fixture(scope="module")
def kp():
    return get_backend("cpu").compile_many(SRC, [*PERMS, *PROBES, "fstat_own", "thread_flood",
                                                 "read_path"])


@pytest.fixture()
def cache_file(kp):
    """A file beside the kernels' own build (beneath a read root of their worker): what a
    kernel could open for reading and then try to change."""
    p = Path(kp["stat_path"].module.path).parent / f"nc-escape-{os.getpid()}.txt"
    p.write_text("tok-0577215664\n")
    p.chmod(0o644)
    yield p
    p.unlink()


@pytest.mark.parametrize("entry", list(PERMS))
def test_permissions_metadata_and_leases_are_refused_by_name(kp, cache_file, entry):
    before = os.stat(cache_file)
    xattrs = os.listxattr(cache_file)
    y = np.zeros(1, np.float32)
    with pytest.raises(errors.SandboxViolation, match=f"forbidden system call: {PERMS[entry]}"):
        kp[entry](1, 1, [y, cstr(str(cache_file))])
    assert y[0] == 0
    after = os.stat(cache_file)
    assert (after.st_mode, after.st_uid, after.st_mtime_ns) == (before.st_mode, before.st_uid,
                                                                before.st_mtime_ns)
    assert os.listxattr(cache_file) == xattrs  # no ACL, no attribute


@pytest.mark.parametrize("entry", PROBES)
def test_a_path_probe_is_answered_not_there(kp, cache_file, entry):
    """stat/statx/access of a file the worker may even read: answered ENOENT (y = -2), so the
    launch goes on and learns nothing of the path."""
    y = np.zeros(1, np.float32)
    kp[entry](1, 1, [y, cstr(str(cache_file))])
    assert y[0] == -2, y  # -errno: ENOENT


def test_a_sound_fstat_is_carried_out(kp):
    # glibc's fstat is newfstatat(fd, "", AT_EMPTY_PATH): trapped, and carried out as fstat
    y = np.zeros(1, np.float32)
    kp["fstat_own"](1, 1, [y])
    assert y[0] == 1


def test_threads_that_outlive_their_launch_fail_it(kp):
    # 100 threads: under what a launch may hold while it runs (worker.THREADS_PER_LAUNCH, 256),
    # so only the count after it returns can stop it (300 raced the watchdog on a busy machine:
    # "started more threads than a launch may hold" -- the next test's verdict)
    y = np.zeros(1, np.float32)
    with pytest.raises(errors.SandboxViolation, match=r"\d+ threads still running after the "
                                                      r"launch returned"):
        kp["thread_flood"](1, 1, [y, np.int32(100)])
    # the worker that held them is gone: the next launch runs in a fresh one, with its threads
    y[0] = 0
    kp["fstat_own"](1, 1, [y])
    assert y[0] == 1


def test_the_worker_reads_the_package_not_the_checkout_around_it(kp):
    import normcheck

    pkg = Path(normcheck.__file__).resolve().parent
    y = np.zeros(1, np.float32)
    kp["read_path"](1, 1, [y, cstr(str(pkg / "__init__.py"))])
    assert y[0] == 1  # the package itself is a read root (so the probe can see a file)
    beside = [p for p in (pkg.parent / "pyproject.toml", pkg.parent / ".git" / "HEAD")
              if p.is_file()]
    for p in beside:  # an editable install's checkout (or site-packages' other packages)
        y[0] = 0
        kp["read_path"](1, 1, [y, cstr(str(p))])
        assert y[0] == 0, p


def test_the_allow_list_is_generated_and_holds_none_of_the_refused_calls():
    sys.path.insert(0, str(HERE.parent / "scripts"))
    try:
        import measure_syscalls as ms
    finally:
        sys.path.pop(0)
    text = ms.HEADER.read_text()
    assert text.startswith("// GENERATED by scripts/measure_syscalls.py")
    rows = re.findall(r"^\s+(\d+),\s+// (\w+): (measured: \d+ calls|reviewed: .+)$", text, re.M)
    body = text.split("ncsb_allowed[] = {", 1)[1].split("};", 1)[0]
    assert len(rows) == len(re.findall(r"^\s+\d+,", body, re.M)) > 30  # each with evidence
    numbers = ms.syscall_numbers()
    for nr, name, _why in rows:
        assert numbers[name] == int(nr), name
        assert name not in ms.NEVER and name not in ms.ARGUMENT_RULES, name
    names = {name for _nr, name, _why in rows}
    for refused in ("fchmodat2", "setxattrat", "file_setattr", "fchmod", "setxattr", "statx"):
        assert refused not in names
    assert {"read", "write", "mmap", "futex", "rt_sigreturn"} <= names


def test_a_flood_of_threads_is_stopped_while_the_launch_runs(kp):
    # 5000 threads is past what a launch may hold (its workers + worker.THREADS_PER_LAUNCH): the
    # watchdog ends the worker within 20 ms of the count passing the limit, and says why
    y = np.zeros(1, np.float32)
    with pytest.raises(errors.SandboxViolation, match="started more threads than a launch may "
                                                      "hold at once"):
        kp["thread_flood"](1, 1, [y, np.int32(5000)])


# -- a spec's and a case's paths stay where they belong (#32) -----------------------------------
_SPEC_TAIL = ('entry = "rms_good_fp32"\nnorm = "rmsnorm"\ndtype = "fp32"\neps = 1e-5\n'
              '[launch]\ngrid = "rows"\nblock = "256"\n[[args]]\nrole = "output"\n[[args]]\n'
              'role = "input"\n[[args]]\nrole = "gamma"\n[[args]]\nrole = "eps"\n[[args]]\n'
              'role = "rows"\n[[args]]\nrole = "cols"\n')


@pytest.fixture()
def outside(tmp_path):
    """A token file outside the spec's folder (tmp_path/spec/), as a secret of the machine."""
    (tmp_path / "spec").mkdir()
    (tmp_path / "outside").mkdir()
    tok = tmp_path / "outside" / "token"
    tok.write_text("hf_tok31415926535 x;\n")
    return tmp_path / "spec", tok


@pytest.mark.parametrize("how", ["include_root", "source_up", "source_link", "include_link"])
def test_a_spec_cannot_name_files_outside_its_folder(outside, how):
    here, tok = outside
    name = beside(here, CHECK_SRC)
    if how == "include_root":
        text = f'source = "{name}"\ninclude = ["/"]\n'
    elif how == "source_up":
        text = 'source = "../outside/token"\n'
    elif how == "source_link":
        (here / "k.cu").symlink_to(tok)
        text = 'source = "k.cu"\n'
    else:
        (here / "inc").symlink_to(tok.parent)
        text = f'source = "{name}"\ninclude = ["inc"]\n'
    spec = here / "s.toml"
    spec.write_text(text + _SPEC_TAIL)
    r = _cli("check", "--spec", str(spec), "--search", "0", "--examples", "4", cwd=here)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "outside the spec's folder" in r.stderr and "normcheck check -I" in r.stderr
    assert "hf_tok" not in r.stdout + r.stderr  # the file was never read, let alone compiled


def test_a_folder_the_user_names_with_dash_i_is_allowed(outside):
    here, _tok = outside
    kern = here.parent / "kernels"
    kern.mkdir()
    name = beside(kern, CHECK_SRC)
    spec = here / "s.toml"
    spec.write_text(f'source = "../kernels/{name}"\n' + _SPEC_TAIL)
    r = _cli("check", "--spec", str(spec), "--search", "0", "--examples", "4", cwd=here)
    assert r.returncode == 2 and "outside the spec's folder" in r.stderr
    r = _cli("check", "--spec", str(spec), "-I", str(kern), "--search", "0", "--examples", "4",
             cwd=here)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_case_cannot_name_a_changed_file_outside_its_folder(tmp_path):
    tok = tmp_path / "secret" / "token.cu"
    tok.parent.mkdir()
    tok.write_text("hf_tok27182818 x;\n")
    work = tmp_path / "work"
    (work / ".normcheck").mkdir(parents=True)
    path = replay.save_case(work / ".normcheck" / "c.npz", kernel={
        "source": str(tok), "sha256": "0" * 64, "entries": ["rms_good_fp16"],
        "norm": "rmsnorm", "dtype": "fp16"}, x=np.ones((1, 4), np.float16))
    r = _cli("replay", str(path), cwd=work)
    assert r.returncode == 2 and "case.source" in r.stderr, r.stdout + r.stderr
    assert "hf_tok" not in r.stdout + r.stderr


def test_a_huge_case_source_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.cu"
    with open(big, "wb") as f:  # sparse: 3 GiB of size, no bytes written
        f.truncate(3 << 30)
    path = replay.save_case(tmp_path / "c.npz", kernel={
        "source": str(big), "sha256": "0" * 64, "entries": ["k"], "norm": "rmsnorm",
        "dtype": "fp32"}, x=np.ones((1, 4), np.float32))
    r = _cli("replay", str(path), cwd=tmp_path)
    assert r.returncode == 2 and "at most 16 MiB" in r.stderr, r.stdout + r.stderr


def test_a_static_constructor_that_makes_a_forbidden_call_fails_the_check(tmp_path):
    r = _cli("check", str(HERE / "cuda" / "escape_ctor_call.cu"), "--entry", "k", "--norm",
             "rmsnorm", "--dtype", "fp32", "--search", "0", "--examples", "4", "--json",
             cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    d = json.loads(r.stdout)
    assert d["verdict"] == "fail" and d["failures"][0]["kind"] == "sandbox"
    assert "while the module loaded" in d["failures"][0]["detail"]
    assert "setsid" in d["failures"][0]["detail"]


# -- every byte from a kernel, a spec or a file is escaped where it lands (#32) -------------------
def test_a_kernels_text_is_escaped_in_the_terminal_junit_and_summary(tmp_path):
    import xml.etree.ElementTree as ET

    r = _cli("check", str(SRC), "--entry", "inject", "--norm", "rmsnorm", "--dtype", "fp32",
             "--search", "0", "--examples", "4", "--junit", str(tmp_path / "j.xml"),
             "--summary", str(tmp_path / "s.md"), cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "aborted" in out, out
    assert "verdict: pass" in out  # the kernel's words are shown ...
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", out)  # ... without a control byte
    junit = (tmp_path / "j.xml").read_text()
    root = ET.fromstring(junit)  # parses: no XML-invalid character left
    assert root.iter("failure") and "nc-injected" in junit
    summary = (tmp_path / "s.md").read_text()
    assert "<h3>" not in summary and "&lt;h3&gt;nc-injected" in summary


def test_a_case_files_note_reaches_the_terminal_without_controls(tmp_path):
    path = replay.save_case(tmp_path / "c.npz", kernel={
        "source": str(beside(tmp_path, CHECK_SRC)), "entries": ["rms_good_fp16"],
        "norm": "rmsnorm", "dtype": "fp16"}, x=np.ones((1, 4), np.float16),
        note="\x1b[2J\x1b[1Averdict: PASS")
    r = _cli("replay", str(path), cwd=tmp_path)
    assert "\x1b" not in r.stdout + r.stderr and "verdict: PASS" in r.stdout + r.stderr


def _results(tmp_path, **fields):
    from normcheck.report.record import Record

    rec = Record(key="k1", kernel="rmsnorm_rms_fp16_upcast_square", family="gaussian", cols=8,
                 rows=4, max_ulp=1.0, norm="rmsnorm", storage="fp16", order="upcast_square",
                 worst={"row": 0, "col": 0, "ulp": 1.0, "x": 1.0, "kernel": 1.0, "exact": 1.0,
                        "file": "worst/a.npz", "replay": "normcheck replay {dir}/worst/a.npz"})
    d = rec.to_json()
    for k, v in fields.items():
        if k.startswith("worst."):
            d["worst"][k[6:]] = v
        else:
            d[k] = v
    out = tmp_path / "r"
    out.mkdir(exist_ok=True)
    (out / "results.json").write_text(json.dumps(
        {"provenance": {"seed": 0, "backend": "cpu", "mode": "quick"}, "records": [d]}))
    return out


@pytest.mark.parametrize("field,value,what", [
    ("storage", "<script>alert(1)</script>", "storage="),
    ("family", "gaussian\" onmouseover=\"x", "family="),
    ("worst.file", "javascript:alert(1)", "worst.file="),
    ("worst.file", "../../etc/passwd.npz", "worst.file="),
    ("kernel", "k\x1b[2J", "control characters"),
    ("error", {"kind": "<b>", "detail": "x"}, "error="),
])
def test_a_shared_results_json_cannot_inject_into_the_report(tmp_path, field, value, what):
    from normcheck.report.sweep import load_results

    out = _results(tmp_path, **{field: value})
    with pytest.raises(errors.InvalidArgument, match=re.escape(what)):
        load_results(out)
    r = _cli("report", "--quick", "--out", str(out), "--kernels", "rmsnorm_rms_fp16_upcast*",
             cwd=tmp_path)
    assert r.returncode == 2 and "results.json written by normcheck" in r.stderr, r.stderr
    assert not (out / "index.html").exists()


def test_a_report_holding_failed_launches_of_each_kind_renders(tmp_path):
    from normcheck.errors import FailureKind
    from normcheck.report import render
    from normcheck import families
    from normcheck.report.record import Record

    # every kind of failed launch, each the only record of its cell (a family and a format), as
    # the sweep writes them for built-ins and kernels of yours (the render used to die on them)
    fams, fmts = list(families.FAMILIES), ["fp16", "bf16", "fp32"]
    recs = []
    for i, kind in enumerate(k.value for k in FailureKind):
        st = fmts[i // len(fams)]
        order = None if st == "fp32" else "upcast_square"
        recs.append(Record(key=f"k{i}", kernel=f"rmsnorm_rms_{st}" + (f"_{order}" if order else ""),
                           family=fams[i % len(fams)], cols=8, rows=4, max_ulp=float("inf"),
                           norm="rmsnorm", storage=st, order=order, algorithm="rms",
                           error={"kind": kind, "detail": f"{kind} <b>here</b>"}))
    results = {"provenance": {"seed": 0, "backend": "cpu", "mode": "quick"}, "records": recs}
    render.render(results, tmp_path)
    page = (tmp_path / "index.html").read_text()
    assert "<b>here</b>" not in page
    md = (tmp_path / "report.md").read_text()
    for kind in (k.value for k in FailureKind):
        assert f"| {kind} |" in md or f" {kind} |" in md, kind  # each in its cell


def test_a_results_json_written_on_one_line_is_resumed_whole(tmp_path):
    from normcheck.report.record import Record
    from normcheck.report.sweep import ResultsFile

    rf = ResultsFile(tmp_path / "results.json")
    recs = [Record(key=f"k{i}", kernel="v", family="gaussian", cols=8, rows=4, max_ulp=1.0)
            for i in range(3)]
    rf.write_all({"provenance": {"seed": 0}, "records": recs})
    data = json.loads(rf.path.read_text())
    rf.path.write_text(json.dumps(data, separators=(",", ":")))  # as `jq -c` writes it
    rf2 = ResultsFile(rf.path)
    assert len(rf2.load()["records"]) == 3
    rf2.append(Record(key="k3", kernel="v", family="gaussian", cols=8, rows=4, max_ulp=2.0))
    back = ResultsFile(rf.path).load()["records"]
    assert [r.key for r in back] == ["k0", "k1", "k2", "k3"]


@pytest.mark.parametrize("text", [
    '{"verdict": "fail", "families": [{"family": 3}]}',
    '{"verdict": "fail", "families": [{"family": "g", "max_ulp": "lots"}]}',
    '{"verdict": "fail", "families": "all"}',
    '{"verdict": ["x"], "families": []}',
    "[" * 100_000 + "]" * 100_000,
])
def test_diff_of_hostile_json_is_a_clear_error(tmp_path, text):
    good = tmp_path / "good.json"
    good.write_text('{"verdict": "pass", "kernel": "k", "families": []}')
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    r = _cli("diff", str(good), str(bad), cwd=tmp_path)
    assert r.returncode == 2 and "normcheck: error:" in r.stderr, r.stderr
    assert "internal error" not in r.stderr


def test_the_thread_count_is_exact_while_the_watchdog_counts_too(monkeypatch):
    # os.listdir of a descriptor reads a dup that shares the directory offset: two listings at
    # once (the watchdog's and the launch's) counted 0, 8 or 12 threads where there were 4,
    # and a sound built-in's launch was failed for '3 threads still running'
    import collections
    import threading

    from normcheck.backends.cpu import worker

    fd = os.open("/proc/self/task", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    monkeypatch.setattr(worker, "_TASKS", fd)
    stop = []
    hammers = [threading.Thread(target=lambda: [worker._threads() for _ in iter(
        lambda: bool(stop), True)]) for _ in range(2)]
    try:
        for t in hammers:
            t.start()
        time.sleep(0.05)
        seen = collections.Counter(worker._threads() for _ in range(5000))
    finally:
        stop.append(1)
        for t in hammers:
            t.join()
        os.close(fd)
    assert len(seen) == 1, seen


def test_a_spec_or_source_name_cannot_inject_a_line_or_markup(tmp_path):
    """#65: report.md listed a spec named spec_<img src=x onerror=...> raw, and a line break in
    a source's file name started a line of its own (::error title=...::) in report.md and in
    the stderr progress line.  Every such string is one line and escaped where it lands."""
    src_name = "k\n::error title=pwn::x\n.cu"
    here = Path(__file__).parent / "cuda" / "report"
    (tmp_path / src_name).write_text((here / "wide_path.cu").read_text())
    spec = tmp_path / "spec_<img src=x onerror=alert(1)>.toml"
    spec.write_text((here / "wide_path.toml").read_text().replace(
        'source = "wide_path.cu"', f'source = "{src_name.encode("unicode_escape").decode()}"'))
    out = tmp_path / "r"
    r = _cli("report", "--quick", "--backend", "cpu", "--kernels", "rmsnorm_rms_fp16_up*",
             "--spec", str(spec), "--out", str(out), "--github", cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    md = (out / "report.md").read_text()
    assert "<img" not in md and "onerror" in md  # said, as text
    for text in (md, r.stdout, r.stderr, (out / "summary.md").read_text()):
        for line in text.splitlines():
            assert not line.startswith("::error title=pwn"), line
    page = (out / "index.html").read_text()
    assert "<img src=x" not in page
