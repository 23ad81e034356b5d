"""Files normcheck takes from the package registry -- CUDA's library headers (the wheels'
``include/``), the field's kernels -- fetched confined, pinned and checked.

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

__all__ = ["Pin", "download", "pip_environment"]


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
