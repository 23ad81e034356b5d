"""Every error normcheck raises on purpose, under one base class.

Argument errors read ``name=value``, what was expected, and a suggested fix (the layout of
Hypothesis's ``InvalidArgument`` messages).  Kernel failures each have their own type so that a
caller (``check``, ``report``, a property) can name what happened: the run carries on after any of
them.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "FailureKind",
    "FATAL",
    "NormcheckError",
    "InvalidArgument",
    "CompileError",
    "KernelError",
    "KernelCrash",
    "KernelDeadlock",
    "SandboxUnavailable",
    "KernelRace",
    "BarrierDivergence",
    "LaunchRefused",
    "KernelTimeout",
    "OutOfBounds",
    "MisalignedAccess",
    "StackOverflow",
    "SandboxViolation",
    "KernelRaised",
    "BackendUnavailable",
    "Unsupported",
    "SpecError",
    "FolderLocked",
    "Interrupted",
    "invalid",
]


class FailureKind(StrEnum):
    """Every kind of failure a verdict names, one list (a StrEnum: each equals its name as a
    string, in JSON and in comparisons).  Accuracy to amax are measured on the outputs; the
    others end a launch (``KernelError.kind``)."""

    ACCURACY = "accuracy"            # an element beyond the sound bound
    NONFINITE = "nonfinite"          # ±inf or NaN where the exact result is finite (or a number for NaN)
    UNWRITTEN = "unwritten"          # an output element never written (it holds the poison)
    CONTRACT = "contract"            # a quantised value no sound kernel of the contract writes
    SCALE = "scale"                  # quantisation scales outside the contract (or misshapen)
    AMAX = "amax"                    # an amax output outside its sound range
    ROUNDING_BIAS = "rounding_bias"  # a mean signed error no round-to-nearest store gives
    NONDETERMINISTIC = "nondeterministic"  # the output changes with the block order
    OVERLAPPING_WRITES = "overlapping_writes"  # two blocks write one element
    STRIDE = "stride"                # padded rows: the stride ignored, or the padding written
    WARN = "warn"                    # not a failure: a warning (within the bound, well above
                                     # the best built-in order), reported in the same form
    ERROR = "error"                  # a Python callable raised
    CRASH = "crash"
    TIMEOUT = "timeout"
    DEADLOCK = "deadlock"
    OUT_OF_BOUNDS = "out_of_bounds"
    MISALIGNED = "misaligned"
    STACK_OVERFLOW = "stack_overflow"
    SANDBOX = "sandbox"
    RACE = "race"                    # two threads of a block touch one shared byte unordered
    BARRIER = "barrier"              # a __syncthreads() not every thread reaches, or two of them
    LAUNCH_LIMIT = "launch_limit"    # a launch a GPU refuses (shared memory, block or grid size)

    @property
    def fatal(self) -> bool:
        """After this failure the kernel is not launched again in the same phase."""
        return self in FATAL


#: The failures after which a kernel is not launched again in the same phase.
FATAL = frozenset({FailureKind.CRASH, FailureKind.TIMEOUT, FailureKind.DEADLOCK,
                   FailureKind.OUT_OF_BOUNDS, FailureKind.MISALIGNED,
                   FailureKind.STACK_OVERFLOW, FailureKind.SANDBOX, FailureKind.RACE,
                   FailureKind.BARRIER, FailureKind.LAUNCH_LIMIT})


class NormcheckError(Exception):
    """Base class of every error normcheck raises on purpose."""


class InvalidArgument(NormcheckError, ValueError):
    """A bad argument: the message names it, its value, what was expected and the fix."""


class SpecError(NormcheckError, ValueError):
    """A kernel spec (TOML) that cannot be used; the message names the key and the fix."""


class SandboxUnavailable(NormcheckError):
    """The confinement a kernel's code runs under (landlock, seccomp) cannot be applied on this
    machine: normcheck refuses to run untrusted code rather than run it unconfined (exit 2;
    NORMCHECK_SANDBOX=off accepts the risk)."""


class BackendUnavailable(NormcheckError, RuntimeError):
    """The requested backend cannot run here (no PyCUDA, no GPU, not x86-64 ...)."""


class Unsupported(NormcheckError):
    """The kernel reached a construct the backend cannot run (an inline PTX instruction outside
    normcheck's table, a barrier of some warps ...): normcheck cannot judge it -- never the
    kernel's failure, never a pass.  The message names the construct and its line."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a check's later runs: ``result`` holds what was measured before it (a
    CheckResult with ``interrupted`` set) -- shown and saved, never a verdict of pass."""

    def __init__(self, result):
        super().__init__(f"interrupted during {result.interrupted}")
        self.result = result


class FolderLocked(NormcheckError):
    """Another run is writing into this output folder; ``holder`` describes it."""

    def __init__(self, message: str, holder: str = ""):
        super().__init__(message)
        self.holder = holder


class CompileError(NormcheckError):
    """The kernel source did not compile; ``diagnostics`` holds the compiler's messages."""

    def __init__(self, message: str, diagnostics: str = ""):
        from normcheck.escape import quoted  # the compiler echoes the file: untrusted text

        super().__init__(message + ("\n" + quoted(diagnostics) if diagnostics else ""))
        self.diagnostics = diagnostics


class KernelError(NormcheckError):
    """A kernel launch that did not complete normally.  ``kind`` names the failure class used in
    verdicts and JSON (crash, deadlock, timeout, out_of_bounds, misaligned, stack_overflow,
    sandbox, error)."""

    kind = FailureKind.CRASH

    def __init__(self, message: str, **details):
        super().__init__(message)
        self.details = details


class KernelCrash(KernelError):
    """The kernel killed its process (segfault, abort, trap, illegal instruction ...)."""

    kind = FailureKind.CRASH


class KernelDeadlock(KernelError):
    """A barrier or warp collective that some live threads can never reach."""

    kind = FailureKind.DEADLOCK


class KernelRace(KernelError):
    """Two threads of a block touch one byte of shared memory, at least one writing, with no
    barrier or warp-synchronous operation ordering them (racecheck's hazard), whatever order
    the emulation ran them in."""

    kind = FailureKind.RACE


class BarrierDivergence(KernelError):
    """A __syncthreads() that not every thread of the block reaches, or threads waiting at two
    different barriers (synccheck's finding)."""

    kind = FailureKind.BARRIER


class LaunchRefused(KernelError):
    """A launch a GPU refuses before a block runs: dynamic shared memory above what the
    launcher opted in to, or above the architecture's maximum; a block or grid past its
    limits."""

    kind = FailureKind.LAUNCH_LIMIT


class KernelTimeout(KernelError):
    """The launch ran past its time limit (an endless loop, or a spin on a flag never set)."""

    kind = FailureKind.TIMEOUT


class OutOfBounds(KernelError):
    """The kernel touched memory past the end of an argument array (caught by a guard page)."""

    kind = FailureKind.OUT_OF_BOUNDS


class MisalignedAccess(KernelError):
    """A vector access to an address not aligned to its size (a GPU faults on it)."""

    kind = FailureKind.MISALIGNED


class StackOverflow(KernelError):
    """A thread ran past the end of its stack (deep recursion, a large local array)."""

    kind = FailureKind.STACK_OVERFLOW


class SandboxViolation(KernelError):
    """The kernel tried something the sandbox forbids (a new process, the network, a file
    write ...): the message names the system call."""

    kind = FailureKind.SANDBOX


class KernelRaised(KernelError):
    """A Python function under check raised an exception: that is a failure, never a pass."""

    kind = FailureKind.ERROR


def invalid(name: str, value, expected: str, fix: str | None = None) -> InvalidArgument:
    """Build an :class:`InvalidArgument` in the fixed layout ``name=value: expected ...; fix``."""
    shown = _show(value)
    msg = f"{name}={shown}: expected {expected}"
    if fix:
        msg += f". {fix}"
    return InvalidArgument(msg)


def _show(value) -> str:
    try:
        import numpy as np

        if isinstance(value, np.ndarray):
            return f"<array shape={value.shape} dtype={value.dtype}>"
    except ImportError:  # pragma: no cover
        pass
    import os

    if isinstance(value, (str, os.PathLike)):
        # a path or a name: shown whole (its end, the file's name, matters most)
        text = repr(os.fspath(value))
        return text if len(text) <= 300 else text[:100] + "..." + text[-197:]
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
