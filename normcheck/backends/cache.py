"""The build cache: where compiled kernels, the oracle's library and the sandbox helper are kept
($NORMCHECK_CACHE, else $XDG_CACHE_HOME/normcheck, else ~/.cache/normcheck), written atomically,
keyed by what went into a build (``key_of``: the text, the flags, the compiler's version), listed
and cleared by ``normcheck cache``."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["cache_root", "cache_dir", "install_file", "verified", "ledger_entry", "CACHE_PARTS",
           "write_ledger", "read_ledger", "ledger_key_path",
           "cxx", "cache_info", "cache_clear", "key_of", "compiler_version"]


def cache_root() -> Path:
    """$NORMCHECK_CACHE, else $XDG_CACHE_HOME/normcheck, else ~/.cache/normcheck."""
    env = os.environ.get("NORMCHECK_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "normcheck"


def cache_dir(backend: str) -> Path:
    return cache_root() / backend


def install_file(data: bytes | str, final: Path, mode: int | None = None) -> Path:
    """Write ``data`` to ``final`` atomically (a temporary file in the same folder, given
    ``mode``, then renamed)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _record(final, hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest())
    return final


# -- the ledger: what normcheck wrote, verified on every use ------------------------------------
def ledger_entry(path: Path) -> Path:
    """Where the digest of a cached file is recorded: the ledger folder, which no worker's
    sandbox reads or writes (a worker reads only its own build's folder)."""
    return cache_root() / "ledger" / hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()


def ledger_key_path() -> Path:
    """Where the ledger's secret lives: $NORMCHECK_LEDGER_KEY, else
    $XDG_STATE_HOME/normcheck/ledger.key, else ~/.local/state/normcheck/ledger.key -- never in
    the cache, so whoever can write the cache (a restored CI cache, a shared machine) cannot
    write an entry the ledger accepts (#65)."""
    env = os.environ.get("NORMCHECK_LEDGER_KEY")
    if env:
        return Path(env)
    state = os.environ.get("XDG_STATE_HOME")
    return (Path(state) if state else Path.home() / ".local" / "state") / "normcheck" / \
        "ledger.key"


_KEY: dict = {}


def _ledger_key() -> bytes:
    """The ledger's secret: 32 random bytes, made at first use with mode 0600 (one file, as a
    ssh key is); a file of another owner, or readable by others, is refused."""
    import secrets
    import stat

    path = ledger_key_path()
    got = _KEY.get(str(path))
    if got is not None:
        return got
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
    st = os.stat(path)
    if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        from normcheck.errors import BackendUnavailable

        raise BackendUnavailable(f"the ledger's key {path} is not this user's alone (mode "
                                 f"{oct(stat.S_IMODE(st.st_mode))}, owner {st.st_uid}): make it "
                                 "chmod 600, or remove it (the cache is then built again)")
    key = path.read_bytes()
    if len(key) != 32:
        raise OSError(f"the ledger's key {path} is not 32 bytes: remove it")
    _KEY[str(path)] = key
    return key


def _seal(path: Path, payload: str) -> str:
    import hmac

    mac = hmac.new(_ledger_key(), f"{Path(path).resolve()}\0{payload}".encode(),
                   hashlib.sha256).hexdigest()
    return f"{mac}\n{payload}"


def write_ledger(path: Path, payload: str) -> None:
    """Record ``payload`` (a digest, a manifest) for ``path``, sealed by the ledger's key."""
    entry = ledger_entry(path)
    entry.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".entry.", dir=entry.parent)
    with os.fdopen(fd, "w") as f:
        f.write(_seal(path, payload))
    os.replace(tmp, entry)


def read_ledger(path: Path) -> str | None:
    """The payload recorded for ``path`` where its seal holds (an entry written by normcheck
    with this machine's key), else None."""
    import hmac

    try:
        text = ledger_entry(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    _mac, sep, payload = text.partition("\n")
    if not sep or not hmac.compare_digest(text, _seal(path, payload)):
        return None
    return payload


def _record(path: Path, digest: str):
    write_ledger(path, digest)
    _VERIFIED[str(Path(path).resolve())] = _stat_key(path)


_VERIFIED: dict = {}


def _stat_key(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def verified(path: Path) -> bool:
    """Whether a cached file normcheck built or copied is there *as normcheck wrote it*: its
    sha256 against the ledger's record, on its first use in a process and again whenever its
    metadata changed.  A file that differs (or has no record) is removed with a warning naming
    it -- the caller builds it again; nothing cached is trusted because it exists."""
    path = Path(path)
    if not path.is_file():
        return False
    key = str(path.resolve())
    now = _stat_key(path)
    if now is not None and _VERIFIED.get(key) == now:
        return True
    recorded = read_ledger(path)
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return False
    if recorded != h.hexdigest():
        import sys

        why = ("has no sealed record in the ledger (written by an older normcheck, by another "
               "machine's, or not by normcheck)") if recorded is None else \
            "is not the file normcheck wrote (its sha256 changed)"
        print(f"normcheck: warning: the cached file {path} {why}: it is removed and built "
              "again", file=sys.stderr)
        try:
            path.unlink()
        except OSError:
            pass
        return False
    _VERIFIED[key] = now
    return True


#: The parts of the cache: one folder each.
CACHE_PARTS = ("cpu", "cuda", "oracle")


def cxx() -> tuple[str, str]:
    """The host C++ compiler ($CXX, else g++) and its version; BackendUnavailable if missing."""
    cmd = os.environ.get("CXX", "g++")
    v = compiler_version(cmd)
    if v is None:
        from normcheck.errors import BackendUnavailable

        raise BackendUnavailable(f"CXX={cmd}: no such C++ compiler; normcheck needs one (the cpu "
                                 "backend and the oracle's fast path): install g++ or set CXX")
    return cmd, v


def cache_info() -> dict:
    """{part: (builds, bytes)} of the build cache."""
    out = {}
    for name in CACHE_PARTS:
        d = cache_dir(name)
        builds, size = 0, 0
        if d.is_dir():
            for e in d.iterdir():
                if e.is_dir():
                    builds += 1
                    size += sum(f.stat().st_size for f in e.rglob("*") if f.is_file())
        out[name] = (builds, size)
    return out


def cache_clear() -> int:
    """Remove every build (and any half-written temporary); returns how many builds."""
    n = 0
    for name in CACHE_PARTS:
        d = cache_dir(name)
        if d.is_dir():
            for e in d.iterdir():
                if e.is_dir():
                    n += 1
                shutil.rmtree(e, ignore_errors=True) if e.is_dir() else e.unlink(missing_ok=True)
    return n


def key_of(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:32]


_versions: dict = {}


def compiler_version(cmd: str) -> str | None:
    """The first line of ``cmd --version`` (cached), None when the compiler is missing."""
    if cmd not in _versions:
        exe = shutil.which(cmd)
        v = None
        if exe:
            try:
                out = subprocess.run([exe, "--version"], capture_output=True, text=True,
                                     timeout=60).stdout.strip().splitlines()
                v = " ".join(line.strip() for line in out if line.strip() and not line.startswith(
                    ("Copyright", "This is free software", "warranty", "FOR A PARTICULAR"))) or None
            except (OSError, subprocess.SubprocessError):
                v = None
        _versions[cmd] = v
    return _versions[cmd]
