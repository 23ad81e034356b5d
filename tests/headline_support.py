"""The headline rule, checked on any check's result: no headline cause contradicts a cause of a
family that has stronger evidence (normcheck.check.diagnose.headline)."""

from normcheck.check.diagnose import EVIDENCE


def assert_headline_agrees(r):
    """The headline names the cause of the strongest evidence among the families' and the
    failures' causes (undefined values, then a race, a model reproducing every element off,
    90 % of them, a formula, a statistical signature); and every cause has its key."""
    causes = [c for c in [f.cause for f in r.families] + [f.cause for f in r.failures] +
              [f.cause for f in r.warnings] if c]
    for c in causes + ([r.cause] if r.cause else []):
        assert getattr(c, "key", None), f"a cause without a key: {c!r}"
        assert getattr(c, "evidence", None) in EVIDENCE, f"a cause without its evidence: {c!r}"
    if not causes:
        assert r.cause is None, r.render()
        return
    strongest = min(EVIDENCE.index(c.evidence) for c in causes)
    keys = {c.key for c in causes if EVIDENCE.index(c.evidence) == strongest}
    assert r.cause is not None and r.cause.key in keys, \
        f"headline {r.cause.key if r.cause else None} against {keys}:\n{r.render()}"
    assert EVIDENCE.index(r.cause.evidence) == strongest
