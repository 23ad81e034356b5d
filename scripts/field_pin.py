#!/usr/bin/env python3
"""Print the [[source]] block of normcheck/field/corpus.toml for one release file: its SHA-256
(from the registry's simple index, checked once downloaded) and each named member's.

    python scripts/field_pin.py liger-kernel 0.8.5 liger_kernel-0.8.5-py3-none-any.whl \\
        liger_kernel/ops/rms_norm.py liger_kernel/ops/layer_norm.py

Members are paths inside the release (a source distribution's without its top folder); a name
ending in / takes every file beneath it; `--follow DIR` (repeatable) also takes every file a
C/C++ member includes (#include "..." or <...>), transitively, found beside the including file
or beneath DIR.  Downloads confined, as `normcheck field` does."""

import hashlib
import json
import posixpath
import re
import shutil
import sys
import tarfile
import urllib.request
import zipfile

from normcheck.backends import fetch


def _sha(project, filename):
    name = project.lower().replace("_", "-").replace(".", "-")
    req = urllib.request.Request(f"{fetch.INDEX}/{name}/", headers={
        "Accept": "application/vnd.pypi.simple.v1+json"})
    files = json.load(urllib.request.urlopen(req, timeout=60))["files"]
    return next(f["hashes"]["sha256"] for f in files if f["filename"] == filename)


def _members(path):
    if zipfile.is_zipfile(path):
        z = zipfile.ZipFile(path)
        return {i.filename: (lambda i=i: z.read(i)) for i in z.infolist() if not i.is_dir()}
    t = tarfile.open(path)
    out = {}
    for m in t:
        if m.isfile():
            out[m.name.split("/", 1)[1] if "/" in m.name else m.name] = \
                (lambda m=m: t.extractfile(m).read())
    return out


def _follow(every, picked, dirs):
    """Add the files the C/C++ members include, transitively."""
    todo = [m for m in picked if m.endswith((".cu", ".cuh", ".h", ".hpp", ".inl", ".cpp"))]
    # an #include "..." or <...> that names a file of the release (beside the including file
    # or beneath a --follow folder); the others are the system's or the toolkit's
    while todo:
        m = todo.pop()
        text = every[m]().decode("utf-8", "replace")
        for inc in re.findall(r'^\s*#\s*include\s*[<"]([^">]+)[">]', text, re.M):
            for base in [posixpath.dirname(m), *dirs]:
                cand = posixpath.normpath(posixpath.join(base, inc))
                if cand in every:
                    if cand not in picked:
                        picked[cand] = hashlib.sha256(every[cand]()).hexdigest()
                        todo.append(cand)
                    break


def main(project, version, filename, *names):
    dirs = []
    names = list(names)
    while "--follow" in names:
        i = names.index("--follow")
        dirs.append(names[i + 1].rstrip("/"))
        del names[i:i + 2]
    sha = _sha(project, filename)
    d, f = fetch.download_file(fetch.FilePin(project, version, filename, sha), project)
    try:
        every = _members(f)
        picked = {}
        for n in names:
            hits = [m for m in every if m == n or (n.endswith("/") and m.startswith(n))]
            if not hits:
                sys.exit(f"{filename} holds no {n}")
            for m in hits:
                picked[m] = hashlib.sha256(every[m]()).hexdigest()
        if dirs:
            _follow(every, picked, dirs)
        print(f'[[source]]\nproject = "{project}"\nversion = "{version}"\n'
              f'file = "{filename}"\nsha256 = "{sha}"\nhome = ""\n[source.files]')
        for m, h in sorted(picked.items()):
            print(f'"{m}" = "{h}"')
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
