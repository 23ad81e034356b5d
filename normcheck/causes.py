"""Causes: why a kernel is off, as a sentence with a stable key and the kind of evidence behind
it, and the one headline a check reports from the causes its families found.

Every judge (forward, backward, quantised) names its causes with :class:`Cause`; the keys are
listed where each diagnosis lives (``normcheck.check.diagnose.CAUSES``, the backward candidates
of ``normcheck.check.backward``, ``normcheck.quant.diagnose``).
"""

from __future__ import annotations

__all__ = ["Cause", "EVIDENCE", "headline"]

#: Kinds of evidence behind a cause, strongest first: the output changes with values a kernel
#: must not read (undefined), with the order blocks run in (race), a model of the cause that
#: reproduces every element off (exact) or 90 % of them (bit), a formula reproduced within the
#: sound limit (formula), or a statistical signature (stat).
EVIDENCE = ("undefined", "race", "exact", "bit", "formula", "stat")


class Cause(str):
    """A cause as a sentence (what it is, and the evidence), with ``key`` its stable name (e.g.
    "xhat_storage", see the module docstring for where each judge's keys are listed), ``title``
    the sentence without its evidence and ``evidence`` one of :data:`EVIDENCE`: tests and tools
    match the key, people read the text, :func:`headline` ranks by the evidence."""

    def __new__(cls, text: str, key: str, evidence: str = "stat", title: str | None = None):
        if evidence not in EVIDENCE:
            raise ValueError(f"evidence={evidence!r}: one of {EVIDENCE}")
        o = str.__new__(cls, text)
        o.key = key
        o.evidence = evidence
        o.title = title or text
        return o

    def __reduce__(self):
        return (Cause, (str(self), self.key, self.evidence, self.title))

    @property
    def strength(self) -> int:
        """The rank of its evidence (0 strongest)."""
        return EVIDENCE.index(self.evidence)


def headline(found) -> Cause | None:
    """One headline cause from [(family, Cause or None)]: the cause with the strongest evidence
    (undefined values or a race before any accuracy cause, a model reproducing the output
    before a statistical signature), then the one found on the most families.  Where families
    disagree, the headline says which cause on which families; its key stays the leading
    cause's."""
    groups = {}  # key -> [cause with the strongest evidence, [families]]
    for fam, c in found:
        if not c:
            continue
        if not isinstance(c, Cause):
            c = Cause(str(c), "unkeyed")
        g = groups.setdefault(c.key, [c, []])
        if c.strength < g[0].strength:
            g[0] = c
        if fam not in g[1]:
            g[1].append(fam)
    if not groups:
        return None
    order = sorted(groups.values(), key=lambda g: (g[0].strength, -len(g[1])))
    lead, fams = order[0]
    if len(order) == 1:
        return lead
    others = "; ".join(f"{c.title} on {', '.join(f)}" for c, f in order[1:])
    return Cause(f"{lead} -- on {', '.join(fams)}; elsewhere: {others}", lead.key,
                 lead.evidence, lead.title)
