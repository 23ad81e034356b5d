"""Files normcheck takes from the package registry -- CUDA's library headers (the wheels'
``include/``), the field's kernels -- fetched confined, pinned and checked.

Two ways, one rule (confined, pinned, nothing of the package built or run):

* :func:`download` -- wheels through pip (the headers: a platform's wheel among several);
* :func:`download_file` -- one named file of a release (a wheel or a source distribution: the
  field's kernels), by a child process of the standard library only
  (:mod:`normcheck.backends.download`) confined as pip is, its SHA-256 checked here against the
  pin; a source distribution is an archive read as data (:func:`extract`), never pip's business
  (pip would run its build code to learn its metadata).

A fetch is pip (``pip download``), and pip is a program of the machine's Python that reads the
network and writes files: it runs as every program normcheck starts on the user's behalf does
(:mod:`normcheck.backends.confine`, :mod:`normcheck.backends.isolation`):

* started isolated (``python -I``: a ``pip/`` planted in the working folder is never run), in a
  private empty folder, by ``normcheck-launch`` -- no capabilities, limits on memory, CPU time,
  file size and wall clock, killed with normcheck;
* landlock: it reads the interpreter's folders, the system's (its certificates, resolver and
  pip's configuration files under /etc, /usr, /lib, /opt) and pip's own configuration folders,
  and writes only its download folder;
* its environment: the allow-list plus pip's own settings (``PIP_*``, proxies, certificate
  bundles, HOME and XDG folders for its configuration) -- never a token or key of the user's;
* ``--only-binary=:all: --no-deps``: a wheel is an archive, nothing of it is built or run; a
  source distribution is never asked for, so no package's build code runs;
* pinned: each requirement is ``name==version`` with the SHA-256 of every file it may be (one
  per platform), so pip refuses anything else (hash-checking mode) -- a registry or mirror that
  serves other bytes under a pinned name is an error, not a different header.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from normcheck.errors import CompileError

__all__ = ["Pin", "FilePin", "download", "download_file", "extract", "pip_environment",
           "INDEX"]

#: The registry's simple index (PyPI's); NORMCHECK_INDEX_URL, else pip's PIP_INDEX_URL, names
#: another (a mirror).
INDEX = "https://pypi.org/simple"


@dataclass(frozen=True)
class Pin:
    """A distribution at one version, with the SHA-256 of each file of it normcheck accepts."""

    name: str
    version: str
    sha256: tuple

    def requirement(self) -> str:
        return f"{self.name}=={self.version} " + " ".join(f"--hash=sha256:{h}"
                                                          for h in self.sha256)


#: pip's settings: what of the user's environment reaches pip (nothing else does).
_PIP_SETTINGS = re.compile(r"^(PIP_\w+|(HTTPS?|NO|ALL)_PROXY|(https?|no|all)_proxy|"
                           r"SSL_CERT_(FILE|DIR)|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|HOME|"
                           r"XDG_CONFIG_(HOME|DIRS)|XDG_CACHE_HOME)$")


def pip_environment() -> dict:
    """pip's environment: the allow-list and pip's own settings (see the module docstring)."""
    from normcheck.backends.confine import child_environment

    return child_environment({k: v for k, v in os.environ.items() if _PIP_SETTINGS.match(k)})


def _limits():
    from normcheck.backends.confine import Limits

    # a cuDNN wheel is 517 MB, cuBLAS 444 MB: files up to 2 GiB, half an hour of wall clock
    return Limits(memory=4 << 30, cpu=1200, fsize=2 << 30, timeout=1800.0, stdout=1 << 20)



def _read_roots(env: dict) -> list:
    """What pip may read: the interpreter's folders, the system's, pip's configuration folders
    and the local folders its settings name (a find-links folder, a file:// index)."""
    import sys

    roots = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             "/etc", "/usr", "/lib", "/lib64", "/opt", "/var/lib/ca-certificates"]
    home = env.get("HOME")
    if home:
        roots += [os.path.join(home, ".config", "pip"), os.path.join(home, ".pip")]
    for k, v in env.items():
        if k.startswith("PIP_"):
            for part in re.split(r"[\s,]+", v):
                p = part[len("file://"):] if part.startswith("file://") else part
                if p.startswith("/"):
                    roots.append(p)
    return [r for r in dict.fromkeys(roots) if r and os.path.exists(r)]


def download(pins, what: str) -> tuple[Path, list]:
    """Download the wheels of ``pins`` (no dependencies) into a new temporary folder, pip
    confined (see the module docstring): (the folder, the files).  The caller removes the
    folder.  Raises CompileError naming what failed, with pip's last words."""
    from normcheck.backends import confine, isolation

    d = Path(tempfile.mkdtemp(prefix="normcheck-fetch-"))
    req = d / "requirements.txt"
    req.write_text("".join(p.requirement() + "\n" for p in pins))
    out = d / "wheels"
    out.mkdir()
    env = pip_environment()
    argv = isolation.command("pip", "download", "--no-deps", "--only-binary=:all:",
                             "--require-hashes", "--no-cache-dir", "--no-input", "-q",
                             "--disable-pip-version-check", "-d", str(out), "-r", str(req),
                             normcheck=False)
    r = confine.run_compiler(argv, f"fetching {what}", read=_read_roots(env),
                             write=[str(d), os.devnull], cleanup=str(d), limits=_limits(),
                             env=env, cwd=isolation.private_cwd(), connect=True)
    files = sorted(out.iterdir())
    if r.returncode != 0 or not files:
        raise CompileError(f"could not fetch {what}: pip download "
                           f"{' '.join(p.name + '==' + p.version for p in pins)} failed",
                           (r.stderr or r.stdout)[-2000:])
    return d, files


@dataclass(frozen=True)
class FilePin:
    """One file of a release: the project, its version, the file's name and its SHA-256."""

    project: str
    version: str
    filename: str
    sha256: str


def download_file(pin: FilePin, what: str, limit: int = 1 << 30) -> tuple[Path, Path]:
    """Download ``pin``'s file (at most ``limit`` bytes) into a new temporary folder, by a
    confined child process (the module docstring), and check its SHA-256: (the folder, the
    file).  The caller removes the folder.  Raises CompileError naming what failed."""
    import hashlib
    import shutil

    from normcheck.backends import confine, isolation

    d = Path(tempfile.mkdtemp(prefix="normcheck-fetch-"))
    out = d / "file"
    env = pip_environment()
    index = os.environ.get("NORMCHECK_INDEX_URL") or os.environ.get("PIP_INDEX_URL") or INDEX
    argv = isolation.command("normcheck.backends.download", index, pin.project, pin.version,
                             pin.filename, str(out), limit)
    try:
        r = confine.run_compiler(argv, f"fetching {what}", read=_read_roots(env) +
                                 list(isolation.allowed_roots()) + [str(isolation.import_root())],
                                 write=[str(d), os.devnull], cleanup=str(d), limits=_limits(),
                                 env=env, cwd=isolation.private_cwd(), connect=True)
    except CompileError:
        shutil.rmtree(d, ignore_errors=True)
        raise
    if r.returncode != 0 or not out.is_file():
        shutil.rmtree(d, ignore_errors=True)
        raise CompileError(f"could not fetch {what}: {pin.filename} of {pin.project} "
                           f"{pin.version} from {index} failed (set NORMCHECK_INDEX_URL to a "
                           "mirror's simple index, or check the network)",
                           (r.stderr or r.stdout)[-2000:])
    h = hashlib.sha256()
    with open(out, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if h.hexdigest() != pin.sha256:
        shutil.rmtree(d, ignore_errors=True)
        raise CompileError(f"could not fetch {what}: {pin.filename} has SHA-256 {h.hexdigest()}, "
                           f"not the pinned {pin.sha256} (the registry or a mirror served "
                           "other bytes under this name)")
    return d, out


def extract(archive: Path, members: dict, dest: Path, limit: int = 16 << 20) -> None:
    """Copy ``members`` ({path inside the release: SHA-256}) of a wheel (zip) or a source
    distribution (.tar.gz) into ``dest`` (paths kept), each checked against its pin: the
    archive is read as data -- only regular files of the listed names are read, at most
    ``limit`` bytes each, nothing is run, no link followed, no name written outside ``dest``.
    A member missing or off its pin raises CompileError."""
    import hashlib
    import tarfile
    import zipfile

    want = dict(members)
    got = {}
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                if info.filename in want and not info.is_dir() and info.file_size <= limit:
                    got[info.filename] = z.read(info)
    else:
        with tarfile.open(archive, "r:*") as t:
            for m in t:
                name = m.name.split("/", 1)[1] if "/" in m.name else m.name  # the top folder
                if name in want and m.isfile() and m.size <= limit:
                    got[name] = t.extractfile(m).read()
    for name, sha in want.items():
        data = got.get(name)
        if data is None:
            raise CompileError(f"{archive.name} holds no file {name} (of at most {limit} bytes)")
        if hashlib.sha256(data).hexdigest() != sha:
            raise CompileError(f"{archive.name}: {name} is not the pinned file (SHA-256 "
                               f"{hashlib.sha256(data).hexdigest()}, pinned {sha})")
        p = (dest / name).resolve()
        if not p.is_relative_to(dest.resolve()) or ".." in Path(name).parts:
            raise CompileError(f"{archive.name}: a member named {name!r} would land outside "
                               "its folder")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
