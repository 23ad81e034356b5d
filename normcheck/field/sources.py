"""A release's files for the field: fetched once (normcheck.backends.fetch: confined, the
release file's SHA-256 and every file's checked), kept in the build cache under
``field/<project>-<version>-<sha256[:12]>/``, the release file itself not kept.  Nothing of the
package is built or installed, and nothing of it runs outside the sandbox: its files are read as
the sources of kernels, as a user's are (an ``[op]`` row imports its module in the op's
sandboxed worker, from this folder).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from normcheck.backends import cache, fetch
from normcheck.field.corpus import Source

__all__ = ["root", "fetched", "ready"]

_DONE = ".normcheck-complete"


def root(src: Source) -> Path:
    """Where the release's files live in the cache (fetched or not)."""
    return cache.cache_dir("field") / f"{src.key}-{src.sha256[:12]}"


def ready(src: Source, warn: bool = False) -> bool:
    """Whether every pinned file of the release is in the cache, unchanged (checked on every
    use: the corpus holds each file's SHA-256); ``warn``: say which file changed."""
    r = root(src)
    if not (r / _DONE).is_file():
        return False
    # exactly its pinned files (#65: an unpinned liger_kernel/__init__.py planted in the folder
    # ran when an op row imported its module)
    extra = sorted(str(p.relative_to(r)) for p in r.rglob("*")
                   if (p.is_file() or p.is_symlink()) and p.name != _DONE and
                   str(p.relative_to(r)) not in src.files)
    if extra:
        if warn:
            import sys

            print(f"normcheck: warning: the cache's copy of {src.project} {src.version} ({r}) "
                  f"holds files that are not pinned ({', '.join(extra[:3])}"
                  f"{' ...' if len(extra) > 3 else ''}): the release is fetched again",
                  file=sys.stderr)
        return False
    for name, sha in src.files.items():
        p = r / name
        if not p.is_file() or hashlib.sha256(p.read_bytes()).hexdigest() != sha:
            if warn:
                import sys

                print(f"normcheck: warning: {name} of {src.project} {src.version} in the "
                      f"cache ({r}) is {'gone' if not p.is_file() else 'not the pinned file'}"
                      ": the release is fetched again", file=sys.stderr)
            return False
    return True


def fetched(src: Source, echo=None) -> Path:
    """The folder holding the release's pinned files, fetched first where they are not in the
    cache (``echo`` says so)."""
    r = root(src)
    if ready(src, warn=True):
        return r
    if echo is not None:
        echo(f"fetching {src.file} ({src.project} {src.version}) ...")
    d, archive = fetch.download_file(fetch.FilePin(src.project, src.version, src.file,
                                                   src.sha256), f"{src.project} {src.version}")
    try:
        tmp = r.with_name(r.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        fetch.extract(archive, src.files, tmp)
        (tmp / _DONE).write_text(f"{src.file} {src.sha256}\n")
        shutil.rmtree(r, ignore_errors=True)
        tmp.rename(r)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return r
