"""One file from the package registry, as a confined child process runs it (normcheck.backends.
fetch.download_file starts it): ``python -I -B -c BOOT ROOT normcheck.backends.download INDEX
PROJECT VERSION FILENAME OUT LIMIT``.

It asks the registry's simple index (``INDEX/PROJECT/``, PEP 691's JSON or PEP 503's HTML, as
pip does) for the project's files, finds the file of that name, and streams it to OUT, at most
LIMIT bytes -- nothing else: the standard library only, no file of the package opened or run.  Its caller checks the SHA-256 pinned for the
file; this process is trusted with nothing (it runs under landlock, writing only OUT's folder,
with no capabilities and limits on memory, CPU and wall clock).
"""

from __future__ import annotations

import html.parser
import json
import re
import sys
import urllib.parse
import urllib.request

__all__ = ["main"]

_TIMEOUT = 120


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self._href = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data):
        if self._href is not None:
            self.links.append((data.strip(), self._href))
            self._href = None


def _files(index: str, project: str) -> tuple[str, dict]:
    """(the project page's address, {filename: its address}) from the simple index."""
    name = re.sub(r"[-_.]+", "-", project).lower()  # PEP 503's normalised name
    page = f"{index.rstrip('/')}/{urllib.parse.quote(name)}/"
    req = urllib.request.Request(page, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    with urllib.request.urlopen(req, timeout=_TIMEOUT) as r:
        kind = r.headers.get("Content-Type", "")
        body = r.read(64 << 20)
    if "json" in kind:
        return page, {f["filename"]: f["url"] for f in json.loads(body).get("files", [])}
    p = _Links()
    p.feed(body.decode("utf-8", "replace"))
    return page, {text: href for text, href in p.links}


def main(argv) -> int:
    index, project, version, filename, out, limit = argv
    limit = int(limit)
    page, files = _files(index, project)
    if filename not in files:
        print(f"{project} {version}: {index} lists no file {filename}", file=sys.stderr)
        return 3
    url = urllib.parse.urljoin(page, files[filename]).split("#", 1)[0]
    n = 0
    with urllib.request.urlopen(url, timeout=_TIMEOUT) as r, open(out, "wb") as f:
        while True:
            chunk = r.read(1 << 20)
            if not chunk:
                break
            n += len(chunk)
            if n > limit:
                print(f"{filename} is larger than {limit} bytes", file=sys.stderr)
                return 4
            f.write(chunk)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
