"""The headline rule, checked on any check's result: no headline cause contradicts a cause of a
family that has stronger evidence (normcheck.check.diagnose.headline)."""

from normcheck.causes import MIN_EXPLAINED
from normcheck.check.diagnose import EVIDENCE


def assert_headline_agrees(r):
    """The headline names the cause of the strongest evidence among the causes of what failed
    (of the warnings and families where nothing failed): undefined values, then a race, a model
    reproducing every element off, 90 % of them, a formula, a statistical signature -- a model
    resting on too few elements set aside (normcheck.causes.headline), "unexplained" where
    nothing is left, never a cause a sound kernel has heading a FAIL; every cause has its key."""
    causes = [c for c in [f.cause for f in r.families] + [f.cause for f in r.failures] +
              [f.cause for f in r.warnings] if c]
    for c in causes + ([r.cause] if r.cause else []):
        assert getattr(c, "key", None), f"a cause without a key: {c!r}"
        assert getattr(c, "evidence", None) in EVIDENCE, f"a cause without its evidence: {c!r}"
    if r.failures:
        assert r.cause is not None, r.render()
        assert not getattr(r.cause, "sound", False), r.render()
        failed = [f.cause for f in r.failures if f.cause and not getattr(f.cause, "sound", False)]
        if r.cause.key == "unexplained" or not failed:
            return  # the warnings' cause, said as one, or what is known (test_headline's units)
        causes = [c for c in failed if not (c.evidence in ("exact", "bit") and
                                            (c.explained or 0) < MIN_EXPLAINED)] or failed
    if not causes:
        assert r.cause is None, r.render()
        return
    def tier(c):  # a model of every element off and of 90 % of them: one tier
        return EVIDENCE.index("bit" if c.evidence == "exact" else c.evidence)

    strongest = min(tier(c) for c in causes)
    keys = {c.key for c in causes if tier(c) == strongest}
    assert r.cause is not None and r.cause.key in keys, \
        f"headline {r.cause.key if r.cause else None} against {keys}:\n{r.render()}"
    assert tier(r.cause) == strongest
