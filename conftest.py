"""The test lanes, for both suites (tests/ and properties/).

``pytest -m "not slow"`` is the fast lane: every test but those listed in tests/slow.txt (the
tests measured to take more than a couple of seconds; ``scripts/lanes.py`` writes the list from
a ``--durations=0`` log) and those marked ``@pytest.mark.slow`` in their file.  The lane still
touches every test module: a module whose every collected test is slow is refused here, naming
it, so a list written from old timings cannot drop a module from the lane unseen.
"""

from pathlib import Path

import pytest

SLOW_LIST = Path(__file__).parent / "tests" / "slow.txt"


def _slow_ids() -> set:
    if not SLOW_LIST.is_file():
        return set()
    lines = SLOW_LIST.read_text(encoding="utf-8").splitlines()
    return {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: in the slow lane (tests/slow.txt, or marked)")


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect: the lanes are of whole modules
def pytest_collection_modifyitems(config, items):
    slow = _slow_ids()
    by_module = {}
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
        path = item.nodeid.split("::", 1)[0]
        by_module.setdefault(path, []).append(item.get_closest_marker("slow") is None)
    all_slow = sorted(p for p, fast in by_module.items() if not any(fast))
    # a module run alone by its nodeids (pytest tests/x.py::one) is not a lane: only a run of
    # whole modules is held to it
    whole = not any("::" in str(a) for a in config.args)
    if all_slow and whole:
        raise pytest.UsageError(
            f"tests/slow.txt: every test of {', '.join(all_slow)} is in the slow lane, so "
            "`pytest -m \"not slow\"` would never touch it: keep its quickest test out of "
            "tests/slow.txt (scripts/lanes.py does)")
