"""Causes: why a kernel is off, as a sentence with a stable key and the kind of evidence behind
it, and the one headline a check reports from the causes its families found.

Every judge (forward, backward, quantised) names its causes with :class:`Cause`; the keys are
listed where each diagnosis lives (``normcheck.check.diagnose.CAUSES``, the backward candidates
of ``normcheck.check.backward``, ``normcheck.quant.diagnose``).
"""

from __future__ import annotations

import re

__all__ = ["Cause", "EVIDENCE", "FAULTS", "MIN_EXPLAINED", "fault", "headline", "unexplained"]

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

    def __new__(cls, text: str, key: str, evidence: str = "stat", title: str | None = None,
                explained: int | None = None, sound: bool = False, shape: bool = False,
                determined: bool = True):
        if evidence not in EVIDENCE:
            raise ValueError(f"evidence={evidence!r}: one of {EVIDENCE}")
        o = str.__new__(cls, text)
        o.key = key
        o.evidence = evidence
        o.title = title or text
        o.explained = explained  # the elements off its model reproduces (a model's cause)
        o.sound = sound  # its own text says a sound kernel does this: it never heads a FAIL
        # the error's shape read off the rows, no model of the arithmetic behind it: it never
        # heads a FAIL either -- an unexplained one says it as what is known (#57)
        o.shape = shape
        # a model's parameters (a block size, a summation order) told apart by the rows: False
        # where another value of them reproduces the same elements (a width-2 row cannot tell
        # 32 threads from 256)
        o.determined = determined
        return o

    def __reduce__(self):
        return (Cause, (str(self), self.key, self.evidence, self.title, self.explained,
                        self.sound, self.shape, self.determined))

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
    first = first_clause(detail)
    return Cause(f"{what}: {first}", f"fault_{kind}", "fault", what)


def first_clause(detail: str) -> str:
    """A detail's first clause: up to its first "; " outside brackets -- never cut inside a
    parenthesis, which loses its end ("(an offset computed in int32 -- tl.program_id(0) *
    stride, say" without "; cast to tl.int64 first)", #68)."""
    depth = 0
    for i, ch in enumerate(detail):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == ";" and depth == 0 and detail[i + 1:i + 2] == " ":
            return detail[:i]
    return detail


#: The fewest elements off a model must reproduce, over all the families that claim it, to name
#: a mechanism in a FAIL's headline: never one element of one (#57: a block reduction valid
#: only in thread 0 was headlined "tail_dropped" from 1 element of 1, a ColossalAI cast "γ
#: applied twice" from one).  Two is enough where the errors are large: the corpus' dropped
#: vector tail fails 3 elements in all, each 10^6 ulp off, and its model lands on all 3.
MIN_EXPLAINED = 2


def _weak(g) -> bool:
    """A model's cause (group [cause, families, explained, counted]) resting on fewer than
    MIN_EXPLAINED elements over its families.  (Not the share of failing families it covers: a
    check diagnoses only some of its failing families, the others stay without a cause.)"""
    c, _fams, explained, counted = g[:4]
    return c.evidence in ("exact", "bit") and counted and explained < MIN_EXPLAINED


def _tier(c) -> int:
    """The rank of a cause's evidence, "exact" and "bit" alike (both a model of the output)."""
    return EVIDENCE.index("bit") if c.evidence == "exact" else c.strength


def headline(found, failing: bool = False) -> Cause | None:
    """One headline cause from [(family, Cause or None)]: the cause with the strongest evidence
    (a fault first: what a kernel computes after reading out of bounds is no evidence; then
    undefined values or a race before any accuracy cause, a model reproducing the output
    before a statistical signature), then the one that explains the most elements off, then the
    one found on the most families.  Where families disagree, the headline says which cause on
    which families; its key stays the leading cause's.  ``failing``: the check fails (``found``
    then lists every failing family, None where it has no cause) -- a cause a sound kernel has
    (``sound``) is no headline of it, and a model resting on fewer than :data:`MIN_EXPLAINED`
    elements in all (``explained``) is said as a guess of :func:`unexplained`, never as the
    diagnosis (None is returned then: the caller says what is known)."""
    groups = {}  # key -> [cause with the strongest evidence, [families], elements explained]
    members = {}  # key -> [its causes]
    for fam, c in found:
        if not c:
            continue
        if not isinstance(c, Cause):
            c = Cause(str(c), "unkeyed")
        if failing and (c.sound or getattr(c, "shape", False)):
            continue
        g = groups.setdefault(c.key, [c, [], 0, True])
        members.setdefault(c.key, []).append(c)
        if fam not in g[1]:
            g[1].append(fam)
        if c.explained is not None:
            g[2] += c.explained
        else:
            g[3] = False  # a cause without a count (a fault, a signature): not weighed so
    if not groups:
        return None
    for key, g in groups.items():
        # the group's sentence: its strongest evidence, then one whose rows told its parameters
        # apart, then the sentence explaining the most elements over its families (a width-2
        # row's 2/2, where 32 threads and 256 coincide, is not the sentence of 28,671/28,672;
        # "divided by 1024 where the row has 768" on six families is not one 4097-wide row's)
        total = {}
        for c in members[key]:
            total[c.title] = total.get(c.title, 0) + (c.explained or 0)
        g[0] = min(members[key], key=lambda c: (
            _tier(c), not getattr(c, "determined", True), -total[c.title], c.strength))
        g.append(failing and _weak(g))
    # a model reproducing every element off and one reproducing 90 % are one tier: among them
    # the one that explains the most elements leads (#57)
    order = sorted(groups.values(), key=lambda g: (g[4], _tier(g[0]), -g[2], g[0].strength,
                                                   -len(g[1])))
    lead, fams, count, _counted, weak = order[0]
    if weak:
        return None
    if len(order) == 1:
        return lead
    others = "; ".join(f"{c.title} on {', '.join(f)}" for c, f, *_ in order[1:])
    return Cause(f"{lead} -- on {', '.join(fams)}; elsewhere: {others}", lead.key,
                 lead.evidence, lead.title, lead.explained, lead.sound, lead.shape,
                 lead.determined)



def unexplained(failures, guesses=()) -> Cause:
    """The headline of a failing check no cause explains: what is known -- the kinds of
    failure, the families, the widths their worst elements lie at, the error's shape where one
    was read off the rows (a ``shape`` cause), the first failure's detail -- and any guess
    resting on too few elements, said as one; key "unexplained"."""
    fams = list(dict.fromkeys(f.family for f in failures))
    kinds = list(dict.fromkeys(str(f.kind) for f in failures))
    widths = sorted({int(w) for f in failures for w in re.findall(r"at width (\d+)", f.detail)})
    first = first_clause(failures[0].detail) if failures else ""
    text = (f"unexplained: no model of a cause reproduces the elements off ({', '.join(kinds)} "
            f"on {', '.join(fams[:6])}{' ...' if len(fams) > 6 else ''}"
            + (f"; worst at width{'s' if len(widths) > 1 else ''} "
               f"{', '.join(map(str, widths[:8]))}" if widths else "") + ")")
    shapes = list(dict.fromkeys(c.title for c in guesses
                                if isinstance(c, Cause) and getattr(c, "shape", False)))
    if shapes:
        text += f"; the error's shape: {'; '.join(shapes)}"
    text += f"; the first: {first[:300]}"
    weak = [c for c in guesses if isinstance(c, Cause) and c.evidence in ("exact", "bit")]
    if weak:
        text += (f"; a guess from {weak[0].explained} element(s) only, not evidence: "
                 f"{weak[0].title}")
    return Cause(text, "unexplained", "stat", "unexplained")
