"""Where the large-index run is made: a launch of at least 2^31 (then 2^32) elements of which
only the last blocks run, on SparseRows buffers whose rows before them are pages never touched
(bounded memory; a 32-bit offset that wrapped lands in an inaccessible margin below each array).

The plan is the same for every kernel kind whose launches normcheck makes (forward, fused add,
quantised): one launch or several, each a grid of one block per row or of R rows a block (the
last 7 blocks run), a host launcher probed so, or a *persistent grid* -- a fixed grid walking
the rows, whose blocks owning the last rows run their whole walk.  A judge mixes ``Plan`` in and
says how it makes a probe's case and which rows a launch wrote.
"""

from __future__ import annotations

import numpy as np

from normcheck import launch
from normcheck import spec as specs
from normcheck.check.engine import Failure
from normcheck.check.tolerances import Verdict

__all__ = ["Plan", "run_spans", "LARGE_FAMILIES", "CAUSE_U32", "LARGE_MAX_PER_BLOCK",
           "LARGE_PERSISTENT_ELEMENTS"]

#: The large-index runs' families, by the power of two of elements they pass: 2^31 (a signed
#: 32-bit offset wraps below the array), then, for CUDA C, 2^32 (an unsigned one wraps into it).
LARGE_FAMILIES = {31: "large_index", 32: "large_index_u32"}
#: What the 2^32 run names where it alone fails.
CAUSE_U32 = ("an index computed in unsigned 32 bits (blockIdx.x × cols: an unsigned int "
             "product) wraps past 2^32 elements")

#: The most rows one block may take in the large-index run (a launcher packing rows into a
#: program: SGLang's tiled RMSNorm takes 16); its 7 blocks then run 7 × that many rows.
LARGE_MAX_PER_BLOCK = 64
#: The most elements of a scratch buffer the large-index run allocates (dense: 256 MiB of float)
LARGE_SCRATCH_ELEMENTS = 1 << 26
#: The elements the blocks of a persistent grid's large-index run may walk (~2 s of emulation)
LARGE_PERSISTENT_ELEMENTS = 1 << 25


class Plan:
    """The large-index run's plan, mixed into a judge (``target``, ``seed``, ``cols_range``,
    ``multiple_of``, ``run_target``)."""

    def probe_case(self, rows: int, cols: int, seed):
        """A case of ``rows`` rows of ``cols`` for the host launcher's probe."""
        raise NotImplementedError

    def rows_unwritten(self, outs, case) -> np.ndarray | None:
        """Per row of the probe: True where the launch wrote none of its output."""
        raise NotImplementedError

    def refuses_large(self) -> str | None:
        """Why this kind of check makes no large-index run, or None."""
        return None

    def large_case(self, rows: int, cols: int, seed):
        """The large-index run's case: its last ``rows`` rows."""
        return self.probe_case(rows, cols, seed)

    def judge_large(self, fam: str, case, call: dict):
        """The launch (``run_target(fam, case, **call)``) measured: (a family result with
        ``verdict``, ``failures``, ``cause``; [Failure]; a worst row or None; whether the
        failures show a wrapped offset -- an element never written, or most wholly wrong)."""
        raise NotImplementedError

    def run_large_index(self, span: int = 31):
        """The large-index run: a launch of ``rows`` rows of which only the blocks owning the
        last rows run (the rest of the grid skipped, or a persistent grid's walk) on
        SparseRows buffers -- below each array lie 2^31 elements of inaccessible margin,
        where a row offset computed in 32 bits lands: an out-of-bounds access named at its
        line.  ``span`` 32 (family ``large_index_u32``): past 2^32 elements, where an
        *unsigned* 32-bit offset (blockIdx.x × cols, both unsigned once blockIdx.x enters)
        wraps to an early row of the array -- the last rows then read and write the wrong
        rows (unwritten, or wrong values).  Returns (family result, [Failure], worst or None,
        a note of what it cost), (None, [], None, why not) or None."""
        import resource
        import time

        from normcheck.check import diagnose

        plan, why = self.large_index_plan(span)
        fam = LARGE_FAMILIES[span]
        if plan is None:
            return None if why is None else (None, [], None, f"large-index run not made: {why}")
        rows, cols, first, blocks, what, walk = plan
        t0 = time.perf_counter()
        case = self.large_case(rows - first, cols, [self.seed, 1 << span])
        call = dict(guard="end", large=rows, blocks=blocks, hazards=False)
        if walk:  # a persistent grid's programs read and write the rows before the window
            call["walk"] = True
        fr, fails, worst, wrapped = self.judge_large(fam, case, call)
        for f in fails:
            fr.failures[f.kind] = fr.failures.get(f.kind, 0) + 1
        if span == 31:
            self._held_at_31 = not fails  # what a wrap past 2^32 is told from
        if fails:
            fr.verdict = Verdict.FAIL
            fr.cause = fr.cause or next((f.cause for f in fails if f.cause), None)
            # a wrap past 2^32 only where every row past 2^31 was right: an error the 2^31 run
            # shows too is that error's (a backward's Gemma γ bug, #66), never an offset's
            if span == 32 and wrapped and getattr(self, "_held_at_31", False) and (
                    fr.cause is None or fr.cause.key == "unexplained" or
                    fr.cause.evidence not in ("fault", "undefined", "race")):
                # 2^31 held, 2^32 does not: an unsigned 32-bit offset, measured so
                gone = "never written" if any(f.kind == "unwritten" for f in fails) else "off"
                fr.cause = diagnose.Cause(
                    f"{CAUSE_U32} ({rows:,} rows of {cols}: the last rows' results are "
                    f"{gone} while every row past 2^31 was right -- their offset wrapped to "
                    "an early row of the array)", "index_wrap_u32", "exact", CAUSE_U32)
                for f in fails:
                    if f.cause is None or f.cause.evidence not in ("fault", "undefined"):
                        f.cause = fr.cause
        secs = fr.seconds = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        note = (f"large-index run: {rows:,} rows of {cols} ({rows * cols:,} elements, past "
                f"2^{span}), {what}, measured on rows {first:,}..{rows - 1:,}: {secs:.1f} s, "
                f"normcheck's peak memory {peak:,.0f} MiB")
        return fr, fails, worst, note

    def large_index_plan(self, span: int = 31):
        """((rows, cols, first row, blocks, what runs, walk), None) of the large-index run -- a
        launch of at least 2^``span`` elements (2^31: 2^32 bytes of fp16) whose last blocks run,
        ``walk`` where they walk the rows before theirs (a persistent grid) -- or (None, why
        not; None where the target is no kernel of normcheck's launches)."""
        t = self.target
        caps = getattr(t, "capabilities", None)
        if not isinstance(t, launch.KernelTarget):
            return None, None
        why = self.refuses_large()
        if why is not None:
            return None, why
        if not (caps and caps.sparse_rows and caps.block_subsets):
            return None, (f"the {caps.language if caps else 'callable'} target's backend does "
                          "not map sparse arrays")
        ln = t.spec.launches
        limit = t.spec.max_elements
        if limit is not None and limit < 1 << span:
            return None, (f"the spec says the kernel is launched with at most {limit:,} "
                          "elements (max_elements)")
        lo_c, hi_c = self.cols_range
        m = max(1, self.multiple_of)
        cands = [c for c in (4096, 8192, 2048, 1024, 16384, 512, 256) if lo_c <= c <= hi_c
                 and c % m == 0]
        if not cands:
            return None, "no width of at least 256 the kernel takes"
        cols = cands[0]
        row0 = -(-(1 << span) // cols)  # the row whose offset is 2^span elements
        for a in t.spec.args:  # a dense buffer that grows with the rows: no bounded run
            if a.role == "scratch":
                try:
                    n = specs.evaluate(a.size, row0 + 1, cols, f"scratch {a.name!r}.size")
                except Exception:  # noqa: BLE001 -- its launch says why
                    continue
                if n > LARGE_SCRATCH_ELEMENTS:
                    return None, (f"the scratch buffer {a.name!r} grows with the rows "
                                  f"({n:,} elements at {row0 + 1:,} rows): not held in "
                                  "bounded memory")
        # every launch runs its last blocks only (the same subset of each grid): each launch's
        # grid one block per row (or R rows a block, the same R), a host launcher's probed so
        # (#66: several launches and host launchers got no large-index run)
        pers = set()
        for one in ln:
            if one.host and len(ln) == 1:  # a grid that stops growing: as a persistent one
                G = self._host_cap()
                plan = None if G is None else self._persistent_from(G, row0, cols)
                if isinstance(plan, str):
                    return None, plan
                if plan is not None:
                    return self._expressible(plan)
            per = self._host_rows_per_block(cols) if one.host else \
                self._rows_per_block(one.grid, row0 + 7 * LARGE_MAX_PER_BLOCK, cols)
            if isinstance(per, str) and len(ln) == 1 and not one.host:
                plan = self._persistent_plan(one.grid, row0, cols)
                if isinstance(plan, str):
                    return None, plan
                if plan is not None:  # a fixed grid walking the rows
                    return self._expressible(plan)
            if isinstance(per, str):
                return None, per if len(ln) == 1 else f"{one.entry}: {per}"
            pers.add(per)
        if len(pers) != 1:
            return None, "launches whose grids take different numbers of rows a block"
        per = pers.pop()
        first = -(-row0 // (8 * per)) * (8 * per)  # ... or the next block of an 8th
        rows = first + 7 * per
        for one in ln:
            if one.host:
                continue
            try:
                big = specs.evaluate_dims(one.grid, rows, cols, "launch.grid")
            except Exception:  # noqa: BLE001 -- a grid that does not take these rows
                return None, "a grid that cannot hold these rows"
            if int(np.prod(big)) * per != rows or big[0] * per != rows:
                return None, (f"a grid that is neither one block per row nor {per} rows per "
                              f"block at {rows:,} rows")
            if any(d >= 1 << 31 for d in big[:1]) or any(d > 65535 for d in tuple(big)[1:]):
                return None, "a grid past the GPU's limits at these rows"
        nb = (rows // per - 1).bit_length()
        return self._expressible((rows, cols, first, (((1 << nb) - 1) & ~7, first // per),
                                  f"the last {7 if per == 1 else f'7 ({per} rows each)'} "
                                  "blocks run (the rows before them never touched)", False))

    def _expressible(self, plan):
        """The plan, or why not where the kernel's own launcher cannot call it so."""
        rows, cols = plan[:2]
        why = self.target.inexpressible(rows, cols)
        if why is not None:  # the kernel's own launcher cannot call it so: outside its ABI
            return None, f"outside the kernel's ABI at {rows:,} rows of {cols}: {why}"
        return plan, None

    @staticmethod
    def _persistent_plan(grid: str, row0: int, cols: int):
        """The large-index run of a persistent grid -- a fixed grid of G blocks walking the rows
        (``for (row = blockIdx.x; row < rows; row += gridDim.x)``), G the same at 2^31 and
        2^32 elements -- or None where the grid is not one: the launch's own grid, of which
        8 blocks run (or 1, where 8 would walk past LARGE_PERSISTENT_ELEMENTS), each walking
        every row it owns from its first (the rows before the window are never-written pages:
        zeros) to one of the window's, the last rows, at or past row ``row0``.  Returns
        the plan (rows, cols, first, blocks, what runs, True), a sentence why not, or None."""
        try:
            g1 = tuple(specs.evaluate_dims(grid, row0 + 1, cols, "launch.grid"))
            g2 = tuple(specs.evaluate_dims(grid, 2 * row0 + 1, cols, "launch.grid"))
        except Exception:  # noqa: BLE001 -- a grid that does not take these rows
            return None
        G = int(np.prod(g1))
        if g1 != g2 or g1[0] != G or not 0 < G <= row0 // 2:
            return None
        return Plan._persistent_from(G, row0, cols)

    @staticmethod
    def _persistent_from(G: int, row0: int, cols: int):
        """The persistent plan for a grid of ``G`` blocks (see :meth:`_persistent_plan`)."""
        walk = -(-(row0 + 8 * G) // G) * cols  # the elements one block walks
        if G >= 8 and 8 * walk <= LARGE_PERSISTENT_ELEMENTS:
            n, B = 8, (G - 8) // 8 * 8
        elif walk <= LARGE_PERSISTENT_ELEMENTS:
            n, B = 1, G - 1
        else:
            return (f"a persistent grid of {G:,} blocks: each walks {walk:,} elements to "
                    f"reach 2^31, past the {LARGE_PERSISTENT_ELEMENTS:,} one run emulates in "
                    "bounded time")
        first = row0 + (B - row0) % G  # the first row at or past row0 that block B owns
        nb = (G - 1).bit_length()
        return (first + n, cols, first, (((1 << nb) - 1) & ~(n - 1), B),
                f"{n} block{'s' if n > 1 else ''} of a grid fixed at {G:,} run ("
                + ("those owning the last 8 rows, each" if n > 1 else "the one owning the last "
                   "row,") + f" walking {-(-(first + n) // G):,} rows, those before the last "
                "read as zeros)", True)

    def _host_rows_per_block(self, cols: int):
        """A host launcher's grid, probed: 1 where, run on 16 rows with only the blocks 8..15
        of each of its launches, it writes exactly rows 8..15 of its output (a grid of one
        block per row, as it launches it); else why not, a sentence."""
        if getattr(self, "_host_probe", None) is not None:
            return self._host_probe
        why = "the host launcher's grid is not one block per row (probed at 16 rows)"
        try:
            case = self.probe_case(16, cols, [self.seed, 0x4C])
            outs = self.run_target("large_index", case, guard="end", hazards=False,
                                   blocks=(8, 8))
            mask = None if isinstance(outs, Failure) else self.rows_unwritten(outs, case)
            if mask is not None and mask.shape == (16,) and mask[:8].all() and \
                    not mask[8:].any():
                why = 1
        except Exception:  # noqa: BLE001 -- any trouble: no run, and why
            pass
        self._host_probe = why
        return why

    @staticmethod
    def _rows_per_block(grid: str, rows: int, cols: int):
        """How many rows one block of a 1-D grid takes at about ``rows`` rows: 1 where the
        grid is a block per row at 9 rows and at ``rows``; a power of two up to
        LARGE_MAX_PER_BLOCK where the grid is ceil(rows / R) there (a launcher that packs R
        rows into a program: R may grow with the rows); else why not, a sentence."""
        try:
            small = specs.evaluate_dims(grid, 9, cols, "launch.grid")
            big = specs.evaluate_dims(grid, rows, cols, "launch.grid")
        except Exception:  # noqa: BLE001 -- a grid that does not take these rows
            return "a grid that cannot hold these rows"
        if int(np.prod(big)) != big[0] or big[0] <= 0:
            return "a grid that is not one-dimensional in its rows"
        if tuple(small)[:1] == (9,) and int(np.prod(small)) == 9 and big[0] == rows:
            return 1
        per = -(-rows // big[0])
        if per & (per - 1) or per > LARGE_MAX_PER_BLOCK or -(-rows // per) != big[0]:
            return "a grid that is not one block per row, nor a power of two of rows per block"
        return per

    def _narrow_cols(self):
        """The narrowest of 32 .. 1024 columns the kernel takes (the row loop's runs: many
        rows, few elements), or None."""
        lo, hi = self.cols_range
        m = max(1, self.multiple_of)
        return next((c for c in (32, 64, 128, 256, 1024) if lo <= c <= hi and c % m == 0),
                    None)

    def run_row_loop(self):
        """A block that loops over rows, twice on the hazard build (#66): where the launch's
        grid stops growing with the rows (``min(rows, 65535)``, a persistent grid of a fixed
        size), a narrow case of 2 G + 7 rows -- G the grid's blocks there -- whose first 8
        blocks run (each then takes a second and third row), so a race across the row loop
        (a shared value read in one iteration and written in the next with no barrier between:
        Apex's cuApplyLayerNorm, its PR #1184) is found.  Returns ([Failure], what it ran) or
        (None, why not)."""
        t = self.target
        caps = getattr(t, "capabilities", None)
        if not isinstance(t, launch.KernelTarget) or t.quant is not None:
            return None, "the target is no kernel of normcheck's launches"
        if not (caps and caps.hazards and caps.block_subsets):
            return None, "the backend has no hazard build that runs part of a grid"
        ln = t.spec.launches
        if len(ln) != 1:
            return None, "a spec of several launches (each grid its own)"
        cols = self._narrow_cols()
        if cols is None:
            return None, "no narrow width the kernel takes"
        if ln[0].host:
            return self._host_row_loop(cols)
        try:
            probe = 1 << 20
            g = specs.evaluate_dims(ln[0].grid, probe, cols, "launch.grid")
        except Exception:  # noqa: BLE001 -- a grid that does not take these rows
            return None, "a grid that cannot hold 2^20 rows"
        G = int(np.prod(g))
        if G >= probe or g[0] != G:
            return None, "the grid grows with the rows: no block loops over them"
        rows = 2 * G + 7
        if rows * cols > 1 << 24:
            return None, f"a grid of {G:,} blocks: its second rows are past 2^24 elements"
        case = self.probe_case(rows, cols, [self.seed, 0x52])
        nb = max(G - 1, 1).bit_length()
        outs = self.run_target("row_loop", case, guard="end",
                               blocks=(((1 << nb) - 1) & ~7, 0))
        what = (f"{rows:,} rows of {cols} on a grid of {G:,} blocks, its first 8 run: each "
                "takes rows b, b + G, b + 2G on the hazard build")
        if isinstance(outs, Failure):
            return [outs], what
        return [], what

    def _host_cap(self):
        """The blocks a host launcher's grid stops growing at -- G where blocks 0..7, run on
        2 × 65,535 + 7 narrow rows, wrote rows b, b + G, ... (they looped: Apex's
        ``min(n1, 65535)``, a grid of the SM count) -- or None where they wrote a prefix of
        the rows (its grid grows with them) or the probe could not tell.  Made once a check
        (the row loop's run on the hazard build tells it first, where it is made)."""
        if not hasattr(self, "_cap"):
            cols = self._narrow_cols()
            if cols is not None:
                try:
                    self._loop_probe(cols, hazards=False)
                except Exception:  # noqa: BLE001 -- any trouble: no cap known
                    pass
            self._cap = getattr(self, "_cap", None)
        return self._cap

    def _loop_probe(self, cols: int, hazards: bool = True):
        """A host launcher on 2 × 65,535 + 7 rows of ``cols``, blocks 0..7 of its launch run:
        (case, outputs or a Failure, the rows written or None); sets ``_cap``."""
        rows = 2 * 65535 + 7
        case = self.probe_case(rows, cols, [self.seed, 0x52])
        outs = self.run_target("row_loop", case, guard="end", hazards=hazards,
                               blocks=(((1 << 40) - 1) & ~7, 0))  # blocks 0..7 of any grid
        written = None
        if isinstance(outs, Failure):  # a race, a fault: the plain build's probe may tell
            self.__dict__.pop("_cap", None)
        else:
            self._cap = None
            unw = self.rows_unwritten(outs, case)
            if unw is not None:
                written = np.flatnonzero(~unw)
                later = written[written >= 8]
                if written.size and written[-1] >= written.size and later.size:
                    self._cap = int(later[0])  # block 0's second row: the grid's size
        return case, outs, written

    def _host_row_loop(self, cols: int):
        """The row loop of a host launcher, whose grid normcheck cannot read: its launch on
        2 × 65,535 + 7 rows (past the largest grid a launcher caps at) with only blocks 0..7
        of each of its launches run, on the hazard build -- where those blocks wrote rows past
        a prefix (b, b + G, ...), the grid stopped growing and they looped: the run was the
        row loop's; where they wrote a prefix of rows (a block per row, R rows a block), no
        block loops."""
        case, outs, written = self._loop_probe(cols)
        rows = case.rows
        what = (f"{rows:,} rows of {cols} through the host launcher, blocks 0..7 of its launch "
                "run on the hazard build")
        if isinstance(outs, Failure):
            return [outs], what
        if written is None:
            return None, "the host launcher's output is not one row per row of x (probed)"
        if self._cap is None:  # a prefix: no block looped
            return None, (f"the host launcher's grid grows with the rows (probed at {rows:,} "
                          f"rows: blocks 0..7 wrote rows 0..{max(written.size - 1, 0)} only)")
        return [], what + (f": a grid of {self._cap:,} blocks, they looped over rows up to "
                           f"{int(written[-1]):,}")


#: Why a run is not made after a hang or a sandbox break.
HUNG = "a kernel that hung or broke its sandbox is not launched again"


def run_spans(judge, target, failures: list, cov, fatal=None, hung: str = HUNG):
    """The 2^31 run, then the 2^32 one -- past 2^32 only for CUDA C (an unsigned offset,
    blockIdx.x × cols, is C's; a Triton program id is a signed int32), and only where 2^31
    wrapped nothing.  Adds their failures to ``failures``, their lines to ``cov`` (a
    check.engine.Coverage), their notes to ``judge.notes``; returns [(family result, worst)].
    ``fatal()``: whether nothing may be launched again (default: a hang latched, or a
    failure that ends later runs, engine.ENDS_LATER_RUNS)."""
    from normcheck.check.engine import ENDS_LATER_RUNS

    if fatal is None:
        def fatal():
            return judge.timed_out or any(f.kind in ENDS_LATER_RUNS for f in failures)
    made = []
    for span in (31, 32):
        name = f"large index 2^{span}"
        if span == 32 and not getattr(getattr(target, "capabilities", None),
                                      "unsigned_indices", False):
            cov.add(name, False, "its indices are signed 32-bit at most (a Triton program "
                    "id): they wrap at 2^31, the run above")
            break
        if span == 32 and any(f.family == "large_index" and
                              f.kind not in ("accuracy", "nonfinite", "contract") for f in failures):
            cov.add(name, False, "an index already wrapped at 2^31 (the run above)")
            break  # an index already wrapped at 2^31 (a fault, an unwritten element)
        if fatal():
            cov.add(name, False, hung)
            continue
        large = judge.run_large_index(span)
        if large is None:
            cov.add(name, False, "the target is no kernel of normcheck's launches (a Python "
                    "callable, an op)")
            continue
        fr, f, w, note = large
        if fr is not None or span == 31:  # why not: said once
            judge.notes.append(note)
        if fr is not None:
            made.append((fr, w))
            failures += f
            cov.add(name, True, detail=f"{fr.rows} rows of {fr.cols[0]}")
        else:
            cov.add(name, False, note.split("not made: ", 1)[-1])
    return made
