"""The bugs no tolerance catches: a forward that is not repeatable, two blocks writing one
element, a row stride ignored or padding written.  Each looks at how a kernel behaves across
launches of the same case, not at how close its values are.

* :func:`repeatability` -- the case run again with the blocks (and warps) in a seeded random
  order (the cpu backend's schedule; a second launch elsewhere), compared bit for bit with the
  first run: a difference is ``nondeterministic``, unless the spec says ``deterministic =
  false`` (float atomics), then it is reported as a spread.
* :func:`overlapping_writes` -- which block writes which element of every output that starts
  as the poison, read from launches of parts of the grid: for each bit k of the linear block
  index, the blocks with that bit 0, then those with it 1 (2·⌈log2 G⌉ partial launches).  Two
  distinct blocks differ in some bit, so an element written by both lands in both halves of
  that bit's split; the writers are then named from the bits (a few more partial launches
  where they differ in several).  ``overlapping_writes`` names the element and both blocks.
  Buffers accumulated into (``fill = "zero"``: atomics) and in-place buffers are exempt, and
  so are specs of several launches (a block of one launch and a block of another writing the
  same element is how they hand work on).
* :func:`padding` -- a spec whose row buffers have a pitch the kernel is told (a ``stride``
  role, or ``stride`` on the argument) runs again with each such row padded by an odd number
  of elements (a multiple of the spec's ``pitch_multiple_of``, 1 unless the launcher refuses
  other pitches -- never ``cols_multiple_of``, which is about widths: a binding that checks
  only the last dimension accepts any pitch; with 1 the rows are no longer 16-byte aligned),
  the padding holding the poison: the outputs must equal the unpadded run's bit for
  bit and the padding must be untouched, else ``stride`` names what the kernel did.

Each returns a :class:`Finding` (the judge makes it a failure of that kind) or None (and what
it measured).
"""

from __future__ import annotations

import numpy as np

from typing import NamedTuple

from normcheck import launch
from normcheck.causes import Cause
from normcheck.errors import KernelError

__all__ = ["repeatability", "overlapping_writes", "padding", "first_difference", "Finding"]


class Finding(NamedTuple):
    """What a hazard check found: a failure's kind, its text and its cause."""

    kind: str
    family: str
    detail: str
    cause: Cause | None = None

#: The roles of forward outputs that start as the poison and are written once.
_WRITTEN_ONCE = ("output", "h", "mean", "rstd")


def _bits(a) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" or a.dtype.itemsize in (2, 4) \
        else a.view(np.uint8)


def first_difference(a, b):
    """(count, index tuple, a value, b value) of the elements whose bits differ (any NaN
    matching any NaN: which NaN's payload an addition keeps depends on its operands' order),
    or None."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return (a.size, (0,), "shape", "shape")
    diff = _bits(a) != _bits(b)
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        with np.errstate(invalid="ignore"):
            af, bf = a.astype(np.float64), b.astype(np.float64)
        diff &= ~(np.isnan(af) & np.isnan(bf))
    if not diff.any():
        return None
    idx = tuple(int(v) for v in np.argwhere(diff)[0])
    return int(diff.sum()), idx, a[idx], b[idx]


def _where(idx) -> str:
    return ", ".join(f"{k} {v}" for k, v in zip(("row", "col"), idx)) if len(idx) == 2 else \
        f"element {idx[0]}"


def _show(v) -> str:
    try:
        return repr(float(v))
    except (TypeError, ValueError):
        return str(v)


def _orders(target) -> bool:
    """Whether the target's backend runs blocks in a chosen order and parts of the grid."""
    return isinstance(target, launch.KernelTarget) and target.capabilities.block_orders


def repeatability(target, case, outs, family, seed, deterministic=True):
    """The case again in another block order (see the module docstring): (Finding or None,
    {role: differing elements})."""
    kw = {"schedule": "random", "seed": int(seed) * 7919 + 1, "workers": 1} \
        if _orders(target) else {}
    try:
        again = target(case, guard="end", **kw)
    except KernelError:
        return None, {}
    spread, first = {}, None
    for role, y in outs.items():
        if role not in again:
            continue
        d = first_difference(y, again[role])
        if d is not None:
            spread[role] = d[0]
            if first is None:
                first = (role, d)
    if first is None or not deterministic:
        return None, spread
    role, (n, idx, a, b) = first
    where = ", ".join(f"{k} {v}" for k, v in zip(("row", "col"), idx)) if len(idx) == 2 else \
        f"element {idx[0]}"
    if _inside_a_block(target, case, outs, seed):
        what = ("a race inside one block: the output depends on the order its warps run in -- "
                "a shared-memory write and a read of it with no barrier between them (a "
                "missing __syncthreads), or warps reading each other's results")
        key = "race_in_block"
    else:
        what = ("the output depends on the order the blocks run in (float atomics, a race "
                "between blocks, or state left from another block)")
        key = "nondeterministic"
    return Finding("nondeterministic", family,
                   f"run again with the blocks in another order, {n}/{np.asarray(outs[role]).size}"
                   f" elements of `{role}` differ (first at {where}: {_show(a)} -> {_show(b)}); "
                   "a kernel whose result may vary says so in its spec: deterministic = false",
                   cause=Cause(f"{what} ({n} elements of `{role}` differ between two orders)",
                               key, "race", what)), spread


def _inside_a_block(target, case, outs, seed) -> bool:
    """Whether the difference is a block's own: the same case with only the warps of each
    block in another order (the blocks in theirs, one at a time) differs from the first run."""
    if not (_orders(target) and getattr(target.capabilities, "warp_orders", False)):
        return False
    try:
        again = target(case, guard="end", schedule="warps", seed=int(seed) * 7919 + 1,
                       workers=1)
    except KernelError:
        return False
    return any(first_difference(y, again[r]) is not None for r, y in outs.items()
               if r in again)


def _grid_blocks(target, case) -> int | None:
    from normcheck import spec as specs

    ln = target.spec.launches
    if len(ln) != 1 or ln[0].host:
        return None
    dims = specs.evaluate_dims(ln[0].grid, case.rows, case.cols, "launch.grid")
    return int(np.prod(dims))


def _once_roles(target) -> list:
    out = []
    for a in target.spec.args:
        if len(a.roles) == 1 and a.roles[0] in _WRITTEN_ONCE and a.fill != "zero":
            out.append(a.roles[0])
    return list(dict.fromkeys(out))


def _written(target, case, mask, value, roles):
    outs = target(case, guard="end", blocks=(mask, value), workers=1)
    return {r: ~launch.unwritten(outs[r]) for r in roles if r in outs}


def overlapping_writes(target, case, family, skipped=None):
    """Two blocks writing one element (see the module docstring): a Finding or None;
    ``skipped``, a list: why the run was not made, appended where it was not."""
    def skip(why):
        if skipped is not None:
            skipped.append(why)

    if not (_orders(target) and target.capabilities.block_subsets):
        return skip("the backend runs no part of a grid alone")
    if target.quant is not None:
        return skip("a quantised kernel's scales are written by every block")
    G = _grid_blocks(target, case)
    roles = _once_roles(target)
    if not G or G < 2:
        return skip("the launch is one block, or several launches")
    if not roles:
        return skip("no output is written once (accumulated, or in place)")
    nbits = int(G - 1).bit_length()
    halves = []  # per bit: ({role: written by blocks with the bit 0}, {... 1})
    try:
        for k in range(nbits):
            halves.append((_written(target, case, 1 << k, 0, roles),
                           _written(target, case, 1 << k, 1 << k, roles)))
    except KernelError:
        # a part of the grid cannot run alone (it waits for the rest): not judged
        return skip("a part of the grid cannot run alone (it waits for the rest)")
    for role in roles:
        both = [h0[role] & h1[role] for h0, h1 in halves if role in h0]
        if not both:
            continue
        any_both = np.logical_or.reduce(both)
        if not any_both.any():
            continue
        idx = tuple(int(v) for v in np.argwhere(any_both)[0])
        # the writers' bits: agreed where one half wrote it, differing where both did
        b1 = 0
        diff_bits = []
        for k, (h0, h1) in enumerate(halves):
            w0, w1 = bool(h0[role][idx]), bool(h1[role][idx])
            if w0 and w1:
                diff_bits.append(k)
            elif w1:
                b1 |= 1 << k
        k0 = diff_bits[0]  # b1 takes 0 there, b2 1; the other differing bits from a launch each
        for k in diff_bits[1:]:
            try:
                w = _written(target, case, (1 << k0) | (1 << k), b1 & ~((1 << k0) | (1 << k)),
                             [role])
            except KernelError:
                break
            if not w[role][idx]:
                b1 |= 1 << k
        b2 = b1
        for k in diff_bits:
            b2 ^= 1 << k
        where = ", ".join(f"{n} {v}" for n, v in zip(("row", "col"), idx)) if len(idx) == 2 \
            else f"element {idx[0]}"
        n = int(any_both.sum())
        what = ("two blocks write the same element: a row stride or grid-stride step that "
                "overlaps rows, or a last block that redoes a row -- on a GPU the writes race")
        return Finding("overlapping_writes", family,
                       f"`{role}` {where} is written by block {_block(b1, target, case)} and by "
                       f"block {_block(b2, target, case)} ({n} elements of `{role}` are written "
                       "by more than one block; found by running parts of the grid alone)",
                       cause=Cause(f"{what} ({n} elements of `{role}`)", "overlapping_writes",
                                   "exact", what))
    return None


def _block(b, target, case) -> str:
    from normcheck import spec as specs

    dims = list(specs.evaluate_dims(target.spec.launches[0].grid, case.rows, case.cols,
                                    "launch.grid")) + [1, 1]
    x, y, z = b % dims[0], (b // dims[0]) % dims[1], b // (dims[0] * dims[1])
    return f"({x},{y},{z})"


def padding(target, case, outs, family, skipped=None):
    """The padded runs (see the module docstring): a Finding or None; ``skipped``, a list: why
    they were not made, appended where they were not."""
    if not isinstance(target, launch.KernelTarget) or not target.strided or case.rows < 2:
        if skipped is not None:
            skipped.append("no row buffer whose pitch normcheck controls (a stride role, or "
                           "a const that is the buffer's pitch)" + "".join(
                               f"; {w}" for w in (getattr(target, "unpadded", None) or
                                                  {}).values()))
        return None
    cols = case.cols
    m = max(1, int(getattr(target.spec, "pitch_multiple_of", 1) or 1))
    for pad in (m, 3 * m):
        try:
            bufs = target(case, guard="end", pad=pad, raw=True)
        except KernelError as e:
            return Finding(e.kind, family, f"with rows padded to a pitch of cols + {pad}: {e}")
        padded = {}
        for key, buf in bufs.items():
            roles = key.split("+")
            if set(roles) & target.strided and buf.ndim == 2 and buf.shape[1] == cols + pad:
                padded[key] = buf
        # the outputs first, padded or not (a padded input read with the wrong step shows in an
        # unpadded output): a kernel that steps rows by cols also lands in the padding, and
        # what it got wrong is the step
        for key, buf in bufs.items():
            exit_role = key.split("+")[-1]
            if exit_role in outs:
                got = buf[:, :cols] if buf.ndim == 2 and np.ndim(outs[exit_role]) == 2 else buf
                if np.shape(got) != np.shape(outs[exit_role]):
                    continue  # a quantised output's codes: read as the unpadded run read them
                f = _stride_differs(
                    family, exit_role, outs[exit_role], got,
                    f"with rows padded to a pitch of cols + {pad} (the padding poisoned),",
                    "the unpadded run", "does not step its rows by the stride it is given (cols "
                    "in its place), or reads the padding", "rows are padded")
                if f is not None:
                    return f
        for key, buf in padded.items():
            pad_region = buf[:, cols:]
            if not launch.unwritten(pad_region).all():
                i, j = (int(v) for v in np.argwhere(~launch.unwritten(pad_region))[0])
                what = "writes into the padding of its rows (past cols, before the next row)"
                return Finding(
                    "stride", family,
                    f"with rows padded to a pitch of cols + {pad} (the padding poisoned), "
                    f"`{key}` row {i}, element {cols + j} (padding) was written: "
                    f"{_show(pad_region[i, j])}",
                    cause=Cause(what, "padding_written", "exact", what))
    return None


def op_padding(target, case, outs, family, skipped=None):
    """An op's padded rows (#66: op rows made none): x (and the residual) handed to the op as
    views of rows padded to a pitch of cols + 1, then + 3 (the padding poisoned), as a user's
    slice of a wider tensor is -- every output must equal the unpadded call's bit for bit,
    else the op's kernels do not step x's rows by its ``stride(0)``, or read the padding.  A
    Finding or None."""
    if not isinstance(target, launch.OpTarget) or case.rows < 2:
        if skipped is not None:
            skipped.append("a case of one row")
        return None
    for pad in (1, 3):
        try:
            again = target.padded(case, pad)
        except KernelError as e:
            if str(e.kind) == "error":  # the op refuses such a tensor (an exception: Liger's
                # X.view(-1, dim)): a launcher's refusal, as a pitch it does not take
                if skipped is not None:
                    skipped.append(f"the op refuses x as a view of padded rows ({e})"[:300])
                return None
            if str(e.kind) == "unwritten":  # the padding's poison read: a step not its stride
                what = "reads the padding of x's rows (steps them by another than x.stride(0))"
                return Finding("stride", family, f"with x given as a view of rows padded to "
                               f"a pitch of cols + {pad}: {e}",
                               cause=Cause(what, "stride_ignored", "exact", what))
            return Finding(e.kind, family, f"with x given at a pitch of cols + {pad}: {e}")
        for role, y in outs.items():
            if role not in again:
                continue
            f = _stride_differs(
                family, role, y, again[role],
                f"with x given as a view of rows padded to a pitch of cols + {pad},",
                "the unpadded call", "does not step x's rows by the stride it is given "
                "(x.stride(0) of a sliced tensor), or reads past the row", "x's rows are padded")
            if f is not None:
                return f
    return None


def _stride_differs(family, role, want, got, given, unpadded, what, once):
    """The stride finding where an output of the padded run differs from ``unpadded``'s."""
    d = first_difference(want, got)
    if d is None:
        return None
    n, idx, a, b = d
    return Finding("stride", family,
                   f"{given} {n}/{np.size(got)} elements of `{role}` differ from {unpadded} "
                   f"(first at {_where(idx)}: {_show(a)} -> {_show(b)})",
                   cause=Cause(f"{what} ({n} elements differ once {once})", "stride_ignored",
                               "exact", what))
