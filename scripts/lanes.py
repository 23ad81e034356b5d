#!/usr/bin/env python3
"""Write tests/slow.txt, the slow lane, from the timings of a whole run.

    python -m pytest -q -n auto --durations=0 > run.log
    python3 scripts/lanes.py run.log [--over SECONDS] [--out tests/slow.txt]

A test whose setup, call and teardown together took more than ``--over`` seconds (default 2) is
slow, except the quickest test of each module, which stays in the fast lane whatever its time
(conftest.py refuses a module with no fast test).  Prints the measured sums of both lanes: the
fast lane's is its CPU seconds over all workers (``pytest -m "not slow"`` takes about that over
the worker count, plus start-up).
"""

import argparse
import re
import sys
from pathlib import Path

LINE = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(\S.*?)\s*$")


def durations(log: Path) -> dict:
    took = {}
    for ln in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = LINE.match(ln)
        if m:
            took[m.group(3)] = took.get(m.group(3), 0.0) + float(m.group(1))
    return took


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path, help="the output of a pytest run with --durations=0")
    ap.add_argument("--over", type=float, default=2.0, help="seconds above which a test is slow")
    ap.add_argument("--out", type=Path, default=Path(__file__).parents[1] / "tests" / "slow.txt")
    a = ap.parse_args(argv)
    if a.over <= 0:
        print(f"lanes: --over={a.over}: expected a positive number of seconds (e.g. 2)",
              file=sys.stderr)
        return 2
    took = durations(a.log)
    if not took:
        print(f"lanes: {a.log}: no test timings in it; run pytest with --durations=0",
              file=sys.stderr)
        return 2
    quickest = {}
    for t, s in took.items():
        mod = t.split("::", 1)[0]
        if mod not in quickest or s < took[quickest[mod]]:
            quickest[mod] = t
    keep = set(quickest.values())
    slow = sorted(t for t, s in took.items() if s > a.over and t not in keep)
    fast_s = sum(s for t, s in took.items() if t not in slow)
    slow_s = sum(took[t] for t in slow)
    a.out.write_text(
        "# The slow lane: tests that took more than "
        f"{a.over:g} s (setup + call + teardown) in a whole run; written by scripts/lanes.py.\n"
        "# `pytest -m \"not slow\"` runs every other test (conftest.py).\n"
        + "".join(t + "\n" for t in slow), encoding="utf-8")
    print(f"slow lane: {len(slow)} tests, {slow_s:.0f} s measured; fast lane: "
          f"{len(took) - len(slow)} tests, {fast_s:.0f} s measured ({len(keep)} modules); "
          f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
