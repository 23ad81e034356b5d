"""A PASS a GPU sanitizer cannot refute (#54): each hazard compute-sanitizer reports -- a race on
shared memory (racecheck), an access past dynamic shared memory or past a static array's size
(memcheck), a launch a GPU refuses, a barrier not every thread reaches alike (synccheck) -- fails
with its kind and its line(s), in several of the forms public kernels write, and each form's
correct twin passes; races are found by happens-before, so the verdict does not depend on the
order the emulation runs warps in (tests/cuda/hazards/)."""

from pathlib import Path

import numpy as np
import pytest

from normcheck import check
from normcheck.backends import get_backend
from normcheck.errors import KernelRace

HERE = Path(__file__).parent / "cuda" / "hazards"
SRC = HERE / "hazards.cu"


def _check(entry=None, spec=None, **kw):
    kw = {"search": 0, "examples": 4, **kw}
    if spec is not None:
        return check.check_kernel(spec=HERE / spec, entry=entry, **kw)
    return check.check_kernel(SRC, entry, "rmsnorm", "fp32", **kw)


def _failure(r, kind):
    found = [f for f in r.failures if f.kind == kind]
    assert r.verdict == "fail" and found, r.render()
    return found[0]


# the racy form, its twin, and the lines of both accesses of the race
RACES = [
    ("reduce_twice_no_barrier", "reduce_twice_barrier", None, "`partial`",
     ("hazards.cu:20", "hazards.cu:18")),
    ("cub_reuse_no_barrier", "cub_reuse_barrier", None, "`temp`", None),
    ("persistent_no_barrier", "persistent_barrier", "persistent.toml", "`acc`",
     ("hazards.cu:88", "hazards.cu:81")),
    ("warp_sync_no_syncwarp", "warp_sync_syncwarp", None, "`red`", None),
]


@pytest.mark.parametrize("racy, twin, spec, array, lines", RACES, ids=[r[0] for r in RACES])
def test_a_race_fails_with_both_lines_and_its_twin_passes(racy, twin, spec, array, lines):
    f = _failure(_check(racy, spec), "race")
    assert array in f.detail and "unordered" in f.detail, f.detail
    assert " reads it at hazards.cu:" in f.detail and " writes it at hazards.cu:" in f.detail
    for ln in lines or ():  # both accesses' lines (which came first is the schedule's)
        assert f" at {ln} " in f.detail, f.detail
    assert f.cause is not None and f.cause.key == "fault_race"
    ok = _check(twin, spec)
    assert ok.verdict in ("pass", "warn") and not [g for g in ok.failures], ok.render()


def test_a_race_is_named_with_its_kind_threads_and_warps():
    f = _failure(_check("reduce_twice_no_barrier"), "race")
    assert "(write-after-read)" in f.detail or "(read-after-write)" in f.detail
    assert "two warps, with no __syncthreads() between them" in f.detail
    f = _failure(_check("warp_sync_no_syncwarp"), "race")
    assert "the same warp, with no __syncwarp" in f.detail, f.detail


@pytest.mark.parametrize("schedule", ["forward", "reverse", "random", "warps"])
def test_the_race_is_found_whatever_order_the_warps_run_in(schedule):
    """By happens-before: the order the emulation runs warps and lanes in changes nothing."""
    k = get_backend("cpu").compile_many(SRC, ["reduce_twice_no_barrier",
                                              "reduce_twice_barrier"])
    rows, cols = 3, 768
    x = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
    args = lambda: [np.zeros_like(x), x, np.ones(cols, np.float32), np.float32(1e-5),  # noqa: E731
                    np.int32(rows), np.int32(cols)]
    for seed in range(3):
        with pytest.raises(KernelRace, match=r"`partial`"):
            k["reduce_twice_no_barrier"]((rows,), (256,), args(), hazards=True,
                                         schedule=schedule, seed=seed)
        k["reduce_twice_barrier"]((rows,), (256,), args(), hazards=True, schedule=schedule,
                                  seed=seed)
    # the plain build, which the long runs use, does not look (the hazard build does)
    k["reduce_twice_no_barrier"]((rows,), (256,), args())


def test_a_write_past_dynamic_shared_memory_fails_at_its_line():
    """The row at smem + ceil4(5 warps) in a buffer of 5 + cols floats: 12 bytes past the
    launch's shared_mem, which the shim's 16 bytes of slack used to hide."""
    r = _check(spec="smem_row.toml")
    f = _failure(r, "out_of_bounds")
    assert "dynamic shared memory" in f.detail and "hazards.cu:234" in f.detail, f.detail
    assert "of 3092 (valid 0..3091)" in f.detail or "(valid 0.." in f.detail
    ok = _check("smem_row_packed", spec="smem_row.toml")
    assert ok.verdict in ("pass", "warn") and not ok.failures, ok.render()


def test_a_static_array_indexed_past_its_size_fails_at_its_line():
    f = _failure(_check("static_too_small"), "out_of_bounds")
    assert "index 4 of an array declared with 4 elements" in f.detail, f.detail
    assert "hazards.cu:150" in f.detail, f.detail
    ok = _check("static_sized")
    assert ok.verdict in ("pass", "warn") and not ok.failures, ok.render()


def test_65k_of_shared_memory_without_the_opt_in_is_refused_as_a_gpu_refuses_it():
    f = _failure(_check(spec="smem_65k.toml", examples=2), "launch_limit")
    assert "too many resources requested for launch" in f.detail
    assert "65568 bytes" in f.detail and "cudaFuncSetAttribute" in f.detail
    assert 'shared_mem = "(8 + cols) * 4"' in f.detail  # the spec's launch, named
    (HERE / "smem_65k_opt_in.toml").write_text(
        (HERE / "smem_65k.toml").read_text().replace(
            'shared_mem = "(8 + cols) * 4"',
            'shared_mem = "(8 + cols) * 4"\nshared_mem_opt_in = "shared_mem"'))
    try:
        ok = _check(spec="smem_65k_opt_in.toml", examples=2)
    finally:
        (HERE / "smem_65k_opt_in.toml").unlink()
    assert ok.verdict in ("pass", "warn") and not ok.failures, ok.render()


def test_a_host_launcher_without_cudaFuncSetAttribute_is_refused_at_its_launch_line(tmp_path):
    f = _failure(_check(spec="host_65k.toml", examples=2), "launch_limit")
    assert "65568 bytes of dynamic shared memory" in f.detail
    assert "launched at hazards.cu:263" in f.detail, f.detail
    spec = tmp_path / "host_ok.toml"
    spec.write_text((HERE / "host_65k.toml").read_text().replace(
        'source = "hazards.cu"', f'source = "{SRC}"').replace('value = "0"', 'value = "1"'))
    ok = check.check_kernel(spec=spec, include=[str(HERE)], search=0, examples=2)
    assert ok.verdict in ("pass", "warn") and not ok.failures, ok.render()


def test_a_block_past_1024_threads_is_refused():
    spec = (HERE / "host_65k.toml").read_text().replace("launch_rms_row", "launch_rms_wide_block")
    (HERE / "wide.toml").write_text(spec.replace("cols = [16384, 16384]", "cols = [64, 64]"))
    try:
        f = _failure(_check(spec="wide.toml", examples=2), "launch_limit")
    finally:
        (HERE / "wide.toml").unlink()
    assert "invalid configuration argument" in f.detail and "block (2048,1,1)" in f.detail


@pytest.mark.parametrize("bad, twin, words", [
    ("branch_barriers", "one_barrier", "two different barriers"),
])
def test_a_barrier_not_every_thread_reaches_alike_fails_with_its_line(bad, twin, words):
    f = _failure(_check(bad), "barrier")
    assert "barrier divergence" in f.detail and words in f.detail, f.detail
    assert "hazards.cu:" in f.detail, f.detail
    ok = _check(twin)
    assert ok.verdict in ("pass", "warn") and not ok.failures, ok.render()


def test_threads_past_the_row_that_return_before_the_barrier_pass_with_a_note():
    """A block wider than the row whose extra threads return before its __syncthreads(): since
    Volta the barrier waits only for threads that have not exited, so on sm_90 it is sound --
    said once with the verdict (#64: it failed as a divergent barrier)."""
    r = _check("early_return_barrier")
    assert r.verdict in ("pass", "warn") and not r.failures, r.render()
    said = [n for n in r.detail.notes if "had not exited" in n]
    assert len(said) == 1 and "hazards.cu:" in said[0], r.detail.notes


def test_a_loop_over_rows_runs_twice_on_the_hazard_build(tmp_path):
    """A grid capped at 65535 blocks loops over rows only past the cap, which the families'
    rows never reach (Apex's cuApplyLayerNorm and its PR #1184): the check runs a narrow case of
    2G + 7 rows whose first blocks each take three rows on the hazard build, and the race
    across the loop is found at its lines; the twin with a barrier at the loop's end passes
    (#66)."""
    r = _check(spec="row_loop.toml")
    f = _failure(r, "race")
    assert f.family == "row_loop" and "hazards.cu:" in f.detail, f.detail
    cov = {d["run"]: d for d in r.detail.coverage}
    assert cov["rows looped twice"]["ran"] and "131,077 rows" in cov["rows looped twice"]["detail"]
    (tmp_path / "hazards.cu").write_text(SRC.read_text())
    (tmp_path / "twin.toml").write_text(
        (HERE / "row_loop.toml").read_text().replace("row_loop_race", "row_loop_barrier"))
    ok = check.check_kernel(spec=tmp_path / "twin.toml", search=0, examples=4)
    assert ok.verdict in ("pass", "warn") and not ok.failures, ok.render()


def test_a_host_launchers_capped_grid_loops_over_rows_on_the_hazard_build(tmp_path):
    """A host launcher's grid is probed, not read: Apex's launcher caps it at 65,535 blocks,
    each looping past the cap -- its first 8 blocks run on 131,077 rows on the hazard build
    and the race across the loop is found at its lines (was "a host launcher (its grid
    unknown)"); the large-index run then walks the capped grid (was: 28,672 elements "never
    written" -- the last blocks of a grid of one block per row, which this launcher never
    launches); the twin with the barrier passes both runs (#66)."""
    r = _check(spec="host_row_loop.toml")
    f = _failure(r, "race")
    assert f.family == "row_loop" and "hazards.cu:3" in f.detail, f.detail
    assert {g.kind for g in r.failures} == {"race"}, r.render()
    cov = {d["run"]: d for d in r.detail.coverage}
    assert cov["rows looped twice"]["ran"] and cov["large index 2^31"]["ran"], cov
    (tmp_path / "hazards.cu").write_text(SRC.read_text())
    (tmp_path / "twin.toml").write_text((HERE / "host_row_loop.toml").read_text().replace(
        "launch_row_loop_race", "launch_row_loop_barrier"))
    ok = check.check_kernel(spec=tmp_path / "twin.toml", search=0, examples=4)
    assert not ok.failures, ok.render()
    cov = {d["run"]: d for d in ok.detail.coverage}
    assert "a grid of 65,535 blocks" in cov["rows looped twice"]["detail"], cov
    note = next(n for n in ok.detail.notes if n.startswith("large-index run"))
    assert "8 blocks of a grid fixed at 65,535 run" in note, note


def test_a_triton_kernels_int32_row_offset_fails_the_large_index_run_at_its_line():
    """The Triton executor maps the large-index run's sparse arrays as the CUDA C path does:
    `tl.program_id(0) * cols` in int32 wraps past 2^31 elements and the access lands below the
    array -- out of bounds at its line, in bounded time and memory; the int64 twin passes."""
    pytest.importorskip("triton")
    src = HERE / "triton_index.py"
    r = check.check_kernel(src, "rms_int32_offset", "rmsnorm", "bf16", search=0, examples=4)
    f = next((f for f in r.failures if f.family == "large_index"), None)
    assert f is not None and f.kind == "out_of_bounds", r.render()
    assert "wrapped to 32 bits" in f.detail and "triton_index.py:" in f.detail, f.detail
    assert {g.family for g in r.failures} == {"large_index"}, r.render()  # only there
    note = next(n for n in r.detail.notes if n.startswith("large-index run"))
    assert "524,295 rows of 4096" in note
    ok = check.check_kernel(src, "rms_int64_offset", "rmsnorm", "bf16", search=0, examples=4)
    assert ok.verdict in ("pass", "warn") and not ok.failures, ok.render()
    big = next(fr for fr in ok.families if fr.family == "large_index")
    assert big.rows == 7 and 0 < big.max_of_bound <= 1


def test_a_program_of_several_rows_gets_the_large_index_run_too(tmp_path):
    """A launcher that packs R rows into a program (grid = ceil(rows / R), R growing with the
    rows: SGLang's tiled RMSNorm) still gets the large-index run: its last 7 programs, 7·R
    rows (was refused: 'a grid that is not one block per row'); the int64 twin passes."""
    pytest.importorskip("triton")
    _, _, ok = _wrap_then_twin(tmp_path, HERE / "triton_tiled.toml", "triton_index.py",
                               "rms_tiled_int32", "rms_tiled_int64",
                               "the last 7 (16 rows each) blocks run")
    big = next(fr for fr in ok.families if fr.family == "large_index")
    assert big.rows == 7 * 16 and 0 < big.max_of_bound <= 1


def test_a_triton_persistent_grid_walks_to_the_large_index_rows(tmp_path):
    """A Triton persistent grid (LMDeploy's RMSNorm: a fixed number of programs looping over
    the rows) gets the large-index run: the program owning the last row walks every row it
    owns, those before the window read as zeros (the executor's Window lets a walk pass), and
    its int32 row offset fails at its line; the int64 twin passes (#66)."""
    pytest.importorskip("triton")
    r, f, ok = _wrap_then_twin(tmp_path, HERE / "triton_persistent.toml", "triton_index.py",
                               "rms_persistent_int32", "rms_persistent_int64",
                               "1 block of a grid fixed at 132 run")
    assert "triton_index.py:" in f.detail, f.detail
    assert {g.family for g in r.failures} == {"large_index"}, r.render()
    big = next(fr for fr in ok.families if fr.family == "large_index")
    assert big.rows == 1 and 0 < big.max_of_bound <= 1


def test_an_unsigned_32_bit_offset_fails_past_2_to_the_32_and_its_twin_passes():
    """blockIdx.x × cols is an unsigned product: right past 2^31 elements (the first large-
    index run passes), wrapped past 2^32 -- the second run's last rows are never written, named
    index_wrap_u32 (a fork of vLLM's RMSNorm shipped this; it passed before); the 64-bit twin
    passes both runs."""
    r = _check("out_offset_u32")
    fams = {fr.family: fr for fr in r.families}
    assert fams["large_index"].verdict == "pass", r.render()
    f = next((f for f in r.failures if f.family == "large_index_u32"), None)
    assert f is not None and r.verdict == "fail", r.render()
    assert r.cause is not None and r.cause.key == "index_wrap_u32", r.render()
    assert "never written" in r.cause
    ok = _check("out_offset_u64")
    assert ok.verdict in ("pass", "warn") and not ok.failures, ok.render()
    assert {"large_index", "large_index_u32"} <= {fr.family for fr in ok.families}


def _wrap_then_twin(tmp_path, spec, source, bad, good, said):
    """``spec``'s kernel ``bad`` fails the large-index run -- out of bounds, "wrapped to 32
    bits", the run's note saying ``said`` -- and its twin ``good`` (the spec with the entry
    swapped, beside a copy of ``source``) passes: (the check, the failure, the twin's check)."""
    r = check.check_kernel(spec=spec, search=0, examples=4)
    f = next((f for f in r.failures if f.family == "large_index"), None)
    assert f is not None and f.kind == "out_of_bounds", r.render()
    assert "wrapped to 32 bits" in f.detail, f.detail
    note = next(n for n in r.detail.notes if n.startswith("large-index run"))
    assert said in note, note
    (tmp_path / source).write_text((HERE / source).read_text())
    twin = tmp_path / "twin.toml"
    twin.write_text(spec.read_text().replace(f'"{bad}"', f'"{good}"'))
    ok = check.check_kernel(spec=twin, search=0, examples=4)
    assert ok.verdict in ("pass", "warn") and not ok.failures, ok.render()
    return r, f, ok


def test_a_persistent_grid_gets_the_large_index_run(tmp_path):
    """A fixed grid walking the rows (132 blocks, one per H100 SM) reaches 2^31 elements only
    through its row loop: the large-index run runs the grid's own blocks that own the last rows,
    each walking every row it owns (was "a grid that is not one block per row"); the `int` row
    offset fails at its line, the size_t twin passes both runs; a grid of 4096 blocks runs 8
    of them, whose last rows are measured (#66)."""
    r, f, ok = _wrap_then_twin(tmp_path, HERE / "persistent_large.toml", "hazards.cu",
                               "persistent_int_offset", "persistent_size_t_offset",
                               "1 block of a grid fixed at 132 run")
    assert "hazards.cu:349" in f.detail, f.detail
    assert {g.family for g in r.failures} == {"large_index"}, r.render()
    twin = (tmp_path / "twin.toml").read_text()
    fams = {fr.family: fr for fr in ok.families}
    for name in ("large_index", "large_index_u32"):  # the last row: written, within the bound
        assert fams[name].rows == 1 and 0 < fams[name].max_of_bound <= 1, ok.render()
    (tmp_path / "wide.toml").write_text(twin.replace("min(rows, 132)", "min(rows, 4096)"))
    ok = check.check_kernel(spec=tmp_path / "wide.toml", search=0, examples=4)
    assert ok.verdict in ("pass", "warn") and not ok.failures, ok.render()
    assert next(fr for fr in ok.families if fr.family == "large_index").rows == 8
    note = next(n for n in ok.detail.notes if n.startswith("large-index run"))
    assert "8 blocks of a grid fixed at 4,096 run" in note, note


def test_an_accuracy_bug_is_not_blamed_on_a_wrap_it_does_not_show():
    """rstd rounded to half, every offset 64 bits: the 2^32 run's error is the same as every
    family's, so its cause is the same (rstd_storage) -- it was blamed on 'an index computed
    in unsigned 32 bits ... wraps past 2^32 elements' (#64); an accuracy failure at 2^31 no
    longer hides the 2^32 run either."""
    r = check.check_kernel(SRC, "rms_rstd_half_u64", "rmsnorm", "fp16", search=0, examples=8)
    fams = {fr.family: fr for fr in r.families}
    assert {"large_index", "large_index_u32"} <= set(fams), r.render()
    assert r.cause.key == "rstd_storage", r.render()
    for name in ("large_index", "large_index_u32"):
        assert fams[name].cause is None or fams[name].cause.key == "rstd_storage", r.render()
    assert "index_wrap_u32" not in r.render()


# -- one hazard, one verdict (#56): the padded pitches follow the launcher, not cols_multiple_of --
EXAMPLES = Path(__file__).parents[1] / "cuda_src" / "examples"


def _without_pitch(tmp_path):
    """The FlashInfer-style example's spec with its pitch contract taken out."""
    for f in ("flashinfer_rms_norm.toml", "flashinfer_rms_norm.cu"):
        (tmp_path / f).write_text((EXAMPLES / f).read_text())
    spec = tmp_path / "flashinfer_rms_norm.toml"
    spec.write_text("\n".join(ln for ln in spec.read_text().splitlines()
                              if not ln.startswith("pitch_")) + "\n")
    return spec


def test_widths_a_multiple_of_8_do_not_narrow_the_pitches(tmp_path, monkeypatch):
    """cols_multiple_of = 8 is about widths: rows are still padded by 1, where a 16-byte load
    of a row faults on a GPU (vLLM's rms_norm was recorded PASS while FlashInfer's, the same
    hazard, FAILed: a spec line narrowed one sweep)."""
    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(spec=_without_pitch(tmp_path), search=0, examples=8)
    assert r.verdict == "fail" and r.cause.key == "fault_misaligned", r.render()
    assert "pitch of cols + 1" in r.cause


def test_a_narrowed_pitch_says_why_or_is_refused(tmp_path, monkeypatch):
    from normcheck.errors import SpecError

    monkeypatch.chdir(tmp_path)
    r = check.check_kernel(spec=EXAMPLES / "flashinfer_rms_norm.toml", search=0, examples=8)
    assert r.verdict == "pass", r.render()
    assert any("as the spec's pitch_multiple_of says: this example's callers" in n
               for n in r.detail.notes), r.detail.notes
    spec = _without_pitch(tmp_path)
    spec.write_text(spec.read_text().replace("cols_multiple_of = 8",
                                             "cols_multiple_of = 8\npitch_multiple_of = 8"))
    with pytest.raises(SpecError, match="pitch_why"):
        check.check_kernel(spec=spec, search=0, examples=8)
