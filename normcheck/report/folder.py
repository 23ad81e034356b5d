"""The report's output folder: one writer at a time, and no write through a link.

A report folder may be shared or prepared by someone else, so every file normcheck writes there
is written safely:

* ``--out`` must be a folder (or not exist yet); a file there is an error naming it;
* one run writes into a folder at a time (:func:`lock`: an advisory ``flock`` on ``.lock``,
  released by the system however the process ends; a second run names the holder and stops);
* a symbolic link in the folder, or in its ``worst/`` folder, is refused by name before anything
  is written (:func:`refuse_links`), and every file is written under an exclusive temporary name
  (``O_EXCL``) and renamed into place (:func:`write`), or appended to with ``O_NOFOLLOW``
  (:func:`open_append`): a link planted later is replaced, never followed.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import stat
import sys
import tempfile
from pathlib import Path

from normcheck.errors import FolderLocked, invalid

__all__ = ["prepare", "lock", "refuse_links", "write", "open_append", "json_text", "restore", "LOCK"]

LOCK = ".lock"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def prepare(out) -> Path:
    """``out`` as a folder, created if missing; an InvalidArgument when it names a file."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise invalid("--out", str(out), "a folder for the report (this is a file)",
                      "choose a folder name, e.g. --out reports/mine")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise invalid("--out", str(out), "a folder normcheck can create",
                      f"choose another ({e.strerror})") from None
    return out


def refuse_links(out: Path, subfolders=("worst",)):
    """An InvalidArgument naming the first symbolic link in ``out`` or its ``subfolders``."""
    for d in (out, *(out / s for s in subfolders)):
        try:
            entries = list(os.scandir(d))
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            raise invalid("--out", str(d), "a folder (it is a file)") from None
        for e in entries:
            if e.is_symlink():
                raise invalid("--out", str(out), "a report folder without symbolic links",
                              f"{Path(e.path)} is a link to {os.readlink(e.path)!r}; normcheck "
                              "does not write through links: remove it")


@contextlib.contextmanager
def lock(out):
    """Hold ``out/.lock`` while a run writes into the folder (see the module docstring)."""
    import fcntl

    out = prepare(out)
    path = out / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | _NOFOLLOW, 0o644)
    except OSError as e:
        if path.is_symlink():
            raise invalid("--out", str(out), "a report folder without symbolic links",
                          f"{path} is a link; remove it") from None
        raise invalid("--out", str(out), "a folder normcheck can write",
                      f"{path}: {e.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise invalid("--out", str(out), "a report folder whose .lock is a file",
                          f"remove {path}")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            raise FolderLocked(f"{out}: another run is writing into this folder ({holder}); "
                               "wait for it to finish, or choose another --out",
                               holder=holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, (f"pid {os.getpid()} on {platform.node()} since "
                       f"{datetime.datetime.now().isoformat(timespec='seconds')}: "
                       f"{' '.join(sys.argv)[:300]}\n").encode(), 0)
        try:
            yield out
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def json_text(obj, indent=None) -> str:
    """``obj`` as the report's JSON (:func:`normcheck.metrics.to_json`: inf and NaN as strings,
    numpy values as numbers), one line unless ``indent``."""
    import json

    from normcheck.metrics import to_json

    text = to_json(obj)
    return text if indent else json.dumps(json.loads(text), separators=(",", ":"))


def restore(o):
    """The inverse of :func:`json_text` on parsed JSON: "inf", "-inf" and "nan" back to floats."""
    import math

    if isinstance(o, dict):
        return {k: restore(v) for k, v in o.items()}
    if isinstance(o, list):
        return [restore(v) for v in o]
    if o == "inf":
        return math.inf
    if o == "-inf":
        return -math.inf
    if o == "nan":
        return math.nan
    return o


def write(path, data) -> Path:
    """Write ``data`` (str or bytes) to ``path``: an exclusive temporary file in the same folder,
    then renamed over ``path`` (which replaces a link there rather than following it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def open_append(path):
    """``path`` opened for reading and writing without following a link (a binary file)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | _NOFOLLOW)
    except OSError as e:
        raise invalid("--out", str(Path(path).parent), "a report folder without symbolic links",
                      f"{path}: {e.strerror}") from None
    return os.fdopen(fd, "r+b")
