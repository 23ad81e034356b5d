"""Causes: why a kernel is off, as a sentence with a stable key and the kind of evidence behind
it, and the one headline a check reports from the causes its families found.

Every judge (forward, backward, quantised) names its causes with :class:`Cause`; the keys are
listed where each diagnosis lives (``normcheck.check.diagnose.CAUSES``, the backward candidates
of ``normcheck.check.backward``, ``normcheck.quant.diagnose``).
"""

from __future__ import annotations

__all__ = ["Cause", "EVIDENCE", "FAULTS", "fault", "headline"]

#: Kinds of evidence behind a cause, strongest first: the kernel faulted -- an access out of
#: bounds or misaligned, a crash, a hang (fault: what it then computed is no evidence of
#: anything); the output changes with values a kernel must not read (undefined), with the order
#: blocks run in (race), a model of the cause that reproduces every element off (exact) or 90 %
#: of them (bit), a formula reproduced within the sound limit (formula), or a statistical
#: signature (stat).
EVIDENCE = ("fault", "undefined", "race", "exact", "bit", "formula", "stat")


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


#: What each fault a launch ends with is, as a cause (the failure's detail says where).
FAULTS = {
    "out_of_bounds": "an access outside an array",
    "misaligned": "a vector access off its alignment (a GPU faults: misaligned address)",
    "crash": "the kernel crashed",
    "stack_overflow": "a stack overflow",
    "deadlock": "a deadlock (threads waiting at barriers that never complete)",
    "timeout": "the kernel never finished",
    "sandbox": "a forbidden system call",
    "race": "a race on shared memory (two threads of a block, unordered by any barrier or warp "
            "collective: compute-sanitizer's racecheck reports it)",
    "barrier": "a divergent barrier (a __syncthreads() not every thread of the block reaches "
               "alike: compute-sanitizer's synccheck reports it)",
    "launch_limit": "a launch a GPU refuses",
}


def fault(kind: str, detail: str) -> Cause | None:
    """The cause of a failure of a fault kind (:data:`FAULTS`), its detail the evidence; None
    for any other kind."""
    what = FAULTS.get(str(kind))
    if what is None:
        return None
    first = detail.split("; ")[0]
    return Cause(f"{what}: {first}", f"fault_{kind}", "fault", what)


def headline(found) -> Cause | None:
    """One headline cause from [(family, Cause or None)]: the cause with the strongest evidence
    (a fault first: what a kernel computes after reading out of bounds is no evidence; then
    undefined values or a race before any accuracy cause, a model reproducing the output
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
