"""Every process normcheck starts on a user's code -- the compiler, the cpu backend's worker -- is
confined, and dies with normcheck.

``normcheck-launch`` (``backends/normcheck_launch.c``, built once into the cache) starts it:

* **lifetime** -- in a PID namespace of its own (user namespaces make that possible without
  privileges) whose init is the launcher's code and dies with normcheck: then the kernel kills
  every process of the namespace, whatever they did (cleared their death signal, called setsid,
  forked).  Where user namespaces are not allowed, the program runs in a process group and the
  launcher (a subreaper) kills it and whatever was reparented to it.  On normcheck's death the
  launcher also removes the build's temporary folder.  :func:`mechanism` says which is in force
  (the provenance records it);
* **limits** -- address space, CPU time, file size; no core files;
* **files** (the compiler) -- landlock: it reads only the source's folder, the include folders,
  the shim, the CUDA headers and the toolchain (:func:`toolchain_roots`), and writes only its
  build folder (and /dev/null);
* **capabilities** -- every one dropped, no new privileges (normcheck run as root included);
* **environment** -- an allow-list (:func:`child_environment`), never
  normcheck's whole environment;
* **output** -- the compiler's diagnostics are cut to :data:`DIAGNOSTICS_BYTES` with a count of
  what was cut, and its stdout (the preprocessed source) to a limit.

``NORMCHECK_SANDBOX=off`` keeps the lifetime and the limits but lifts landlock (for a compiler
wrapper that writes elsewhere, such as ccache).
"""

from __future__ import annotations

import functools
import os
import re
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from normcheck.backends import cache, isolation
from normcheck.errors import BackendUnavailable, CompileError, SandboxUnavailable

__all__ = ["launcher", "spawn", "mechanism", "describe", "command", "run_compiler", "Limits",
           "compiler_limits", "toolchain_roots", "temporary_folder", "DIAGNOSTICS_BYTES",
           "sweep_stale", "build_artifact", "build_library", "library_built",
           "child_environment"]

SOURCE = Path(__file__).resolve().with_name("normcheck_launch.c")
#: The compiler's diagnostics kept (the rest is counted, not kept).
DIAGNOSTICS_BYTES = 64 << 10
_TMP_PREFIX = "normcheck-"


@dataclass(frozen=True)
class Limits:
    """What a confined process may use: bytes of address space, CPU seconds, bytes a file may
    grow to, wall-clock seconds, bytes of stdout kept (more is an error)."""

    memory: int
    cpu: int
    fsize: int
    timeout: float
    stdout: int


def child_environment(extra: dict | None = None) -> dict:
    """The environment of a worker or a compiler: an allow-list, never normcheck's whole
    environment (which may hold tokens and keys): PATH, the C locale, and ``extra``."""
    env = {"PATH": os.environ.get("PATH") or os.defpath, "LANG": "C", "LC_ALL": "C"}
    env.update(extra or {})
    return env


def _env_int(name, default):
    v = os.environ.get(name)
    if not v:
        return default
    try:
        return int(v)
    except ValueError:
        from normcheck.errors import invalid

        raise invalid(name, v, "a whole number") from None


def compiler_limits() -> Limits:
    """The compiler's limits: 8 GiB of address space (``NORMCHECK_COMPILER_MEMORY_MB``), 300 s of
    CPU (``NORMCHECK_COMPILER_CPU_S``), files up to 256 MiB, 600 s of wall clock, a preprocessed
    source of at most 256 MiB."""
    return Limits(memory=_env_int("NORMCHECK_COMPILER_MEMORY_MB", 8192) << 20,
                  cpu=_env_int("NORMCHECK_COMPILER_CPU_S", 300), fsize=256 << 20,
                  timeout=600.0, stdout=256 << 20)


#: How long an exec that meets ETXTBSY is retried (seconds, in all).
_TXTBSY_WAIT = 5.0


def spawn(popen, argv, *args, **kw):
    """``popen(argv, ...)`` (subprocess.Popen or .run), retried while the executable is "busy"
    (ETXTBSY): a binary normcheck has just installed can still be open for writing in a child
    that another thread forked while it was written (the descriptor lives in the child until it
    execs) -- the classic race of parallel builds; it ends within milliseconds (#64)."""
    import errno

    deadline, pause = time.monotonic() + _TXTBSY_WAIT, 0.01
    while True:
        try:
            return popen(argv, *args, **kw)
        except OSError as e:
            if e.errno != errno.ETXTBSY or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


@functools.lru_cache(maxsize=None)
def launcher() -> Path:
    """The normcheck-launch executable (built once with the host compiler: normcheck's own file,
    compiled unconfined, since nothing confines yet)."""
    return build_artifact(SOURCE, "cpu", "launch", "normcheck-launch",
                          ["-x", "c", "-std=gnu11", "-O2", "-Wall"],
                          "building normcheck's process launcher", confined=False)


@functools.lru_cache(maxsize=None)
def mechanism() -> dict:
    """{"lifetime": "pid-namespace" | "process-group", "landlock_abi": n} on this machine."""
    if os.environ.get("NORMCHECK_NAMESPACES", "on") == "off":
        return {"lifetime": "process-group", "landlock_abi": _probe().get("landlock_abi", 0),
                "note": "NORMCHECK_NAMESPACES=off"}
    return _probe()


@functools.lru_cache(maxsize=None)
def _probe() -> dict:
    try:
        out = spawn(subprocess.run, [str(launcher()), "--probe"], capture_output=True,
                    text=True, timeout=30, env=child_environment()).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise BackendUnavailable(f"normcheck's process launcher does not run here ({e})") \
            from None
    info = dict(re.findall(r"(\w+)=(\S+)", out))
    if info.get("lifetime") not in ("pid-namespace", "process-group"):
        raise BackendUnavailable(f"normcheck's process launcher gave no answer ({out!r})")
    return {"lifetime": info["lifetime"], "landlock_abi": int(info.get("landlock_abi", 0))}


def unconfined(why: str) -> SandboxUnavailable:
    """The refusal to run untrusted code (a kernel, its compile, a Triton file's imports)
    where the confinement cannot be applied: one line naming what is missing and the setting
    that accepts the risk."""
    return SandboxUnavailable(
        f"{why}: normcheck will not run a kernel's code, or compile it, without its sandbox; "
        "NORMCHECK_SANDBOX=off accepts that risk (only for code you trust)")


def require_landlock(what: str) -> None:
    """Refuse (:func:`unconfined`) to run ``what`` -- the compiler on a user's source -- where
    landlock is missing (an older kernel, gVisor, a container profile: its calls answer ENOSYS
    or EPERM), unless NORMCHECK_SANDBOX=off accepts the risk: the compiler would read any file
    (``#include "../secret.h"`` echoed back in its diagnostics)."""
    if os.environ.get("NORMCHECK_SANDBOX", "on") == "off":
        return
    if mechanism().get("landlock_abi", 0) <= 0:
        raise unconfined(f"landlock is not available here (landlock_create_ruleset answers "
                         f"{mechanism().get('landlock_abi')}), so {what} would read any file")


def describe() -> str:
    """One line for the provenance: how a confined process's lifetime is tied to normcheck's."""
    m = mechanism()
    if m["lifetime"] == "pid-namespace":
        return "pid-namespace (its init dies with normcheck: every process in it dies too)"
    return ("process-group (user namespaces are not allowed here" +
            (f", {m['note']}" if m.get("note") else "") +
            "): the launcher kills the group and every process reparented to it; a process "
            "that leaves the group while its parent lives is not covered")


def command(argv, *, cleanup=None, limits: Limits | None = None, read=None, write=(),
            connect: bool = False) -> list:
    """``argv`` wrapped in normcheck-launch: ``cleanup`` a folder removed if normcheck dies,
    ``read``/``write`` the landlock roots (None: no landlock), ``connect``: TCP connections
    out allowed (a fetch; never a listening socket)."""
    cmd = [str(launcher()), "--parent", str(os.getpid())]
    if mechanism()["lifetime"] != "pid-namespace":
        cmd.append("--no-namespace")
    if cleanup:
        cmd += ["--cleanup", str(cleanup)]
    if limits is not None:
        cmd += ["--as", str(limits.memory), "--cpu", str(limits.cpu), "--fsize",
                str(limits.fsize)]
    if read is not None and os.environ.get("NORMCHECK_SANDBOX", "on") != "off":
        for p in dict.fromkeys(str(r) for r in read):
            cmd += ["--read", p]
        for p in dict.fromkeys(str(w) for w in write):
            cmd += ["--write", p]
        if connect:
            cmd.append("--connect")
    return cmd + ["--", *[str(a) for a in argv]]


# ------------------------------------------------------------------------------------------------
# normcheck's own binaries
# ------------------------------------------------------------------------------------------------
def build_artifact(source: Path, part: str, name: str, filename: str, flags: list, what: str,
                   link: tuple = (), confined: bool = True) -> Path:
    """A binary built once from one file of normcheck's own with the host C++ compiler
    (``flags`` before the file, ``link`` after it), kept in the cache part ``part`` under a key of
    the source, the flags and the compiler's version; built in a temporary folder and installed
    atomically, so concurrent first uses are safe.  ``confined=False`` only for the launcher
    itself (nothing can confine its own build)."""
    cmd, _version = cache.cxx()
    final, dirs = _artifact(source, part, name, filename, flags, link)
    if cache.verified(final):
        return final
    with temporary_folder("build") as d:
        out = Path(d) / filename
        argv = [cmd, *flags, str(source), *link, "-o", str(out)]
        if confined:
            r = run_compiler(argv, what, read=[*toolchain_roots(cmd), *sorted(dirs)],
                             write=[d, os.devnull], cleanup=d)
        else:
            try:
                r = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                                   env=child_environment({"TMPDIR": d}))
            except (OSError, subprocess.SubprocessError) as e:
                raise CompileError(f"{what}: {cmd} could not run ({e})") from None
        if r.returncode != 0:
            raise CompileError(f"{what}: {source} did not compile", r.stderr)
        cache.install_file(out.read_bytes(), final,
                          mode=0o755 if os.access(out, os.X_OK) else None)
    return final


def _artifact(source, part, name, filename, flags, link):
    """(where the build of ``source`` lives in the cache, the folders its headers are in)."""
    _cmd, version = cache.cxx()
    text = Path(source).read_text()
    dirs = {str(Path(source).parent)}
    for inc in re.findall(r'^#include "([^"]+)"', text, re.M):  # its own headers ("x.h", "../x.h")
        h = (Path(source).parent / inc).resolve()
        if h.is_file():
            text += h.read_text()
            dirs.add(str(h.parent))
    final = cache.cache_dir(part) / (
        name + "-" + cache.key_of(text, " ".join(list(flags) + list(link)), version)) / filename
    return final, dirs


def library_built(source: Path, part: str, name: str, flags: list, link: tuple = ()) -> bool:
    """Whether :func:`build_library` would find the library built (nothing is built)."""
    return cache.verified(_artifact(source, part, name, name + ".so", flags, link)[0])


def build_library(source: Path, part: str, name: str, flags: list, what: str,
                  link: tuple = ()) -> Path:
    """A shared library of normcheck's own (:func:`build_artifact`, ``name.so``)."""
    return build_artifact(source, part, name, name + ".so", flags, what, link)


# ------------------------------------------------------------------------------------------------
# The compiler
# ------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def toolchain_roots(compiler: str) -> tuple:
    """What the compiler may read: its own folders (install, programs, libraries and include
    search paths as it reports them), the assembler's and linker's, the system's library
    folders and the dynamic loader's cache."""
    roots = ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/libexec", "/etc/ld.so.cache",
             "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"]
    exe = shutil.which(compiler)
    for tool in (exe, shutil.which("as"), shutil.which("ld")):
        if tool:
            roots += [str(Path(tool).parent), str(Path(tool).resolve().parent)]
    env = child_environment()
    try:
        out = subprocess.run([compiler, "-print-search-dirs"], capture_output=True, text=True,
                             timeout=60, env=env).stdout
        for line in out.splitlines():
            key, _, val = line.partition(": ")
            if key in ("install", "programs", "libraries"):
                roots += [p.lstrip("=") for p in val.split(":") if p.strip("=")]
        err = subprocess.run([compiler, "-E", "-Wp,-v", "-x", "c++", os.devnull, "-o",
                              os.devnull], capture_output=True, text=True, timeout=60,
                             env=env).stderr
        roots += [line.strip() for line in err.splitlines() if line.startswith(" /")]
    except (OSError, subprocess.SubprocessError):
        pass
    out = []
    for r in roots:
        p = Path(r)
        if p.exists():
            out.append(str(p.resolve()))
    return tuple(dict.fromkeys(out))


def temporary_folder(kind: str) -> tempfile.TemporaryDirectory:
    """A temporary folder for a build, named after this process (``normcheck-<kind>-<pid>-``), so
    that :func:`sweep_stale` can tell one whose owner is gone."""
    sweep_stale()
    return tempfile.TemporaryDirectory(prefix=f"{_TMP_PREFIX}{kind}-{os.getpid()}-")


_STALE = re.compile(rf"^{_TMP_PREFIX}(?:pp|build)-(\d+)-")
_swept = False


def sweep_stale():
    """Remove the build folders of normcheck processes that no longer exist (killed in the
    instant between creating a folder and handing it to the launcher, which otherwise removes
    it).  Once per process."""
    global _swept
    if _swept:
        return
    _swept = True
    tmp = Path(tempfile.gettempdir())
    try:
        entries = list(tmp.iterdir())
    except OSError:
        return
    for e in entries:
        m = _STALE.match(e.name)
        if not m or int(m.group(1)) == os.getpid() or not isolation.orphaned(int(m.group(1))):
            continue  # not a build folder, or its owner lives
        if e.is_dir() and not e.is_symlink():
            shutil.rmtree(e, ignore_errors=True)


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run_compiler(cmd: list, what: str, *, read=None, write=(), cleanup=None,
                 limits: Limits | None = None, env: dict | None = None,
                 stdin: bytes | None = None, diagnostics: int = DIAGNOSTICS_BYTES,
                 cwd=None, connect: bool = False) -> Result:
    """Run a compiler (or another tool: pip fetching headers) confined (see the module
    docstring): ``read``/``write`` its landlock roots (None: no landlock), ``cleanup`` its
    temporary folder (its TMPDIR too), ``cwd`` its working folder, ``connect`` whether it may
    open TCP connections.  Its diagnostics are cut to
    ``diagnostics`` bytes (:data:`DIAGNOSTICS_BYTES`, with a count of what was cut); a stdout
    over the limit, a compile
    past the wall-clock limit or a missing compiler is a CompileError."""
    limits = limits or compiler_limits()
    full = command(cmd, cleanup=cleanup, limits=limits, read=read, write=write,
                   connect=connect)
    child_env = child_environment({"TMPDIR": str(cleanup)} if cleanup else {})
    child_env.update(env or {})
    if shutil.which(cmd[0], path=child_env["PATH"]) is None and not Path(cmd[0]).is_file():
        raise CompileError(f"{what}: {cmd[0]} was not found")
    try:
        proc = spawn(subprocess.Popen, full, stdin=subprocess.PIPE if stdin is not None else
                     subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     env=child_env, start_new_session=True, cwd=cwd)
    except OSError as e:
        raise CompileError(f"{what}: {cmd[0]} could not be started ({e.strerror})") from None
    out, err, cut = bytearray(), bytearray(), [0, 0]  # bytes, lines cut from the diagnostics
    deadline = time.monotonic() + limits.timeout
    sel = selectors.DefaultSelector()
    try:
        if stdin is not None:
            proc.stdin.write(stdin)
            proc.stdin.close()
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        open_streams = 2
        while open_streams:
            left = deadline - time.monotonic()
            if left <= 0:
                _kill(proc)
                raise CompileError(f"{what}: the compiler ran past {limits.timeout:g} s")
            for key, _ in sel.select(min(left, 1.0)):
                chunk = os.read(key.fileobj.fileno(), 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                elif key.data == "out":
                    out += chunk
                    if len(out) > limits.stdout:
                        _kill(proc)
                        raise CompileError(
                            f"{what}: the compiler's output is over {limits.stdout >> 20} MiB "
                            "(a macro that expands without end?); normcheck stops there")
                else:
                    room = diagnostics - len(err)
                    if room > 0:
                        err += chunk[:room]
                    if len(chunk) > room:
                        rest = chunk[max(room, 0):]
                        cut[0] += len(rest)
                        cut[1] += rest.count(b"\n")
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise CompileError(f"{what}: the compiler ran past {limits.timeout:g} s") from None
    except BaseException:
        _kill(proc)
        raise
    finally:
        sel.close()
        for s in (proc.stdout, proc.stderr):
            s.close()
    text = err.decode("utf-8", "replace")
    if cut[0]:
        text += (f"\n[normcheck: {cut[0]} more bytes ({cut[1]} lines) of compiler output cut; "
                 "the first errors are above]")
    low = text.lower()
    if rc in (-signal.SIGXCPU, -signal.SIGKILL) or "cpu time limit" in low or \
            "killed signal" in low:
        text += f"\n[normcheck: the compiler used more than {limits.cpu} s of CPU time, its limit]"
    elif rc == -signal.SIGXFSZ or "file size limit" in low:
        text += (f"\n[normcheck: the compiler wrote a file over {limits.fsize >> 20} MiB (the "
                 "build output limit)]")
    elif rc < 0 or "signal terminated program" in low or "out of memory" in low or \
            "bad_alloc" in low:
        text += (f"\n[normcheck: the compiler died; it may have run out of its "
                 f"{limits.memory >> 20} MiB of address space (NORMCHECK_COMPILER_MEMORY_MB)]")
    return Result(rc, out.decode("utf-8", "replace"), text)


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.kill()
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        pass
