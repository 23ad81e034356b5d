"""CI: open a report's index.html in headless Chromium (Debian's package) and check what a reader
sees: the findings are the first section, every plot loads, a sortable table sorts, and the
console holds no error; keep a screenshot of the top of the page beside the report.

    python .ci/browser_check.py REPORT_DIR

The page runs its own self-test when opened with #selftest (normcheck/report/render.py) and
writes the result into <pre id="selftest">; Chromium's --dump-dom prints the page after load.
"""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--enable-logging=stderr", "--v=0"]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    sys.exit("browser check: no chromium on the PATH (apt-get install chromium)")


def run(args, profile):
    return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)


def main(report_dir: str) -> int:
    out = Path(report_dir).resolve()
    page = out / "index.html"
    if not page.is_file():
        sys.exit(f"browser check: {page} does not exist")
    profile = out / ".chromium-profile"
    shutil.rmtree(profile, ignore_errors=True)
    p = run(["--virtual-time-budget=10000", "--dump-dom", page.as_uri() + "#selftest"], profile)
    m = re.search(r'<pre id="selftest">(.*?)</pre>', p.stdout, re.S)
    if not m:
        print(p.stderr[-3000:])
        sys.exit("browser check: the page's self-test did not run (no <pre id=selftest>)")
    res = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")
                     .replace("&lt;", "<").replace("&gt;", ">"))
    console = [ln for ln in p.stderr.splitlines() if "CONSOLE" in ln and
               re.search(r"error|uncaught", ln, re.I)]
    problems = []
    if res.get("first_section") != "findings":
        problems.append(f"the first section is {res.get('first_section')!r}, not the findings")
    bad = [i["alt"] for i in res.get("images", []) if not i["ok"]]
    if not res.get("images"):
        problems.append("the page shows no plot")
    if bad:
        problems.append(f"plots that did not load: {bad}")
    if res.get("sort") is not True:
        problems.append(f"sorting the first table by its first column gave {res.get('sort')}")
    if res.get("errors") or console:
        problems.append(f"console errors: {res.get('errors')} {console}")
    shot = out / "screenshot-top.png"
    run(["--window-size=1280,1000", f"--screenshot={shot}", page.as_uri()], profile)
    shutil.rmtree(profile, ignore_errors=True)
    if not shot.is_file() or shot.stat().st_size < 1000:
        problems.append("no screenshot was taken")
    print(f"browser check of {page}: first section {res.get('first_section')!r}, "
          f"{len(res.get('images', []))} plots loaded, sort {res.get('sort')}, "
          f"{len(res.get('errors', [])) + len(console)} console errors; screenshot {shot}")
    for x in problems:
        print(f"  PROBLEM: {x}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "report"))
