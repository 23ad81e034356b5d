"""The kinds of check, one registry: forward, quantised output, backward -- and whatever comes.

A kind is a class registered here with :func:`register`; :func:`normcheck.check.run` resolves
the options once (normcheck.check.resolve: the spec loaded, the norm, every role's format, the
target) and hands the :class:`~normcheck.check.resolve.Resolved` to the one kind that claims
it; :func:`normcheck.check.check_callable` hands a bound Python function to the kind that
claims its contract.  A fourth kind is one class::

    @register
    class Mine(Kind):
        name = "mine"
        precedence = 5                  # asked before the kinds with a larger number

        @staticmethod
        def claims(backward, contract):
            return ...

        def check(self, r, o, progress):  # a resolved kernel, its options -> CheckResult
            ...

Nothing else is edited: the command line, the API and replay reach it through :func:`of`.
"""

from __future__ import annotations

__all__ = ["Kind", "register", "of", "KINDS"]

#: The registered kinds, asked in order of precedence.
KINDS: list = []


class Kind:
    """One kind of check: what it claims, how it judges a target and how it checks a resolved
    kernel."""

    name = ""
    precedence = 100

    @staticmethod
    def claims(backward: bool, contract) -> bool:
        """Whether this kind judges a check with these traits (a backward kernel; a
        quantised output's contract, or None)."""
        raise NotImplementedError

    def judge(self, target, setup, runs):
        """The CheckResult of a bound target (normcheck.check.engine.Setup and Runs)."""
        raise NotImplementedError(f"the {self.name} check judges resolved kernels only")

    def check(self, r, o, progress=None):
        """The CheckResult of a resolved kernel ``r`` under options ``o`` (CheckOptions): by
        default its setup and runs handed to :meth:`judge`."""
        from normcheck.check.engine import Runs
        from normcheck.check.resolve import long_run

        runs = Runs(examples=o.examples, search=o.search,
                    long=long_run(o.rows, o.cols, r.spec.cols, r.spec.cols_multiple_of),
                    save=o.save_counterexample, progress=progress)
        return self.judge(r.target, r.setup(o.seed), runs)


def register(cls):
    """Register a kind (a class decorator); a name registered twice is replaced."""
    KINDS[:] = [k for k in KINDS if k.name != cls.name] + [cls]
    KINDS.sort(key=lambda k: k.precedence)
    return cls


def of(backward: bool, contract) -> Kind:
    """The kind that claims a check (an instance)."""
    for k in KINDS:
        if k.claims(backward, contract):
            return k()
    raise LookupError(f"no kind of check claims backward={backward}, contract={contract}")
