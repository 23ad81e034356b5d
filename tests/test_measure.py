"""The compiled measurement (normcheck/measure.cpp) against its numpy version, element by
element and reduction by reduction, on rows that reach every class; and the pieces it rests
on (StreamStats's bins read from the bits, the one-rounding casts, pooled rows)."""

import numpy as np
import pytest

from normcheck import bounds, families, formats, launch, measure, metrics, oracle


def _both(monkeypatch, ref, y, **kw):
    a = measure.measure(ref, y, **kw)
    monkeypatch.setenv("NORMCHECK_MEASURE", "numpy")
    b = measure.measure(ref, y, **kw)
    monkeypatch.delenv("NORMCHECK_MEASURE")
    return a, b


def _planted(fmt, norm="layernorm", cols=1000):
    """Rows of several families with every outcome planted: a few ulps off, ±inf and NaN
    answers, an unwritten element, NaN inputs, and an overflowing row in fp16."""
    F = formats.get(fmt)
    x = np.concatenate([families.generate(f, F, 8, cols, seed=1)
                        for f in ("gaussian", "offset", "tiny", "outlier", "constant")])
    x[3, 5] = np.nan
    g, b = families.weights(F, cols)
    if norm == "layernorm":
        ref = oracle.layernorm(x, g, b)
        E = bounds.sound_bound("layernorm", x.astype(np.float64), g, b)
    else:
        ref = oracle.rmsnorm(x, g)
        E = bounds.sound_bound("rmsnorm", x.astype(np.float64), g)
    yy = ref.rounded.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        yy[1, :10] += F.ulp_array(yy[1, :10]) * 3
        yy[6, 100:140] *= 1.01  # a gaussian row: its bound is finite
        yy[2, 3] = np.inf
        yy[2, 4] = np.nan
        yy[2, 6] = -np.inf
        yy[3, 5] = 0.0           # NaN not propagated
    y = F.cast(yy)
    y[4, 7] = launch.poisoned((1,), F.dtype)[0]
    return ref, y, E


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("with_E", [True, False])
def test_compiled_equals_numpy(monkeypatch, fmt, norm, with_E):
    if measure.library() is None:
        pytest.skip("the compiled measurement could not be built here")
    ref, y, E = _planted(fmt, norm)
    kw = dict(E=E if with_E else None, poison=formats.poison_bits(y.dtype), floor=1.0)
    a, b = _both(monkeypatch, ref, y, **kw)
    for k in measure.ELEMENTS:
        assert np.array_equal(getattr(a, k), getattr(b, k), equal_nan=True), k
    for k in ("n", "max_ulp", "argmax_ulp", "max_scaled", "argmax_scaled", "max_ratio",
              "argmax_ratio", "inf_ulp", "unwritten", "over", "classes", "max_ordinal"):
        assert getattr(a, k) == getattr(b, k), k
    assert np.array_equal(a.hist, b.hist)
    # the sum of finite ulps in another order: equal to the float64 rounding of the orders
    # (at most n·2^-53 relative; 1e-12 is far above it for 40k elements)
    assert a.sum_ulp == pytest.approx(b.sum_ulp, rel=1e-12)
    # the planted outcomes were all seen: the unwritten element, ±inf and NaN answers (3 planted)
    assert a.unwritten == 1 and a.inf_ulp >= 3
    if with_E:
        assert a.over > 0  # the row 6 values 1 % off are far beyond any sound bound


def test_measure_kept_arrays_and_reductions_agree():
    ref, y, E = _planted("fp16")
    full = measure.measure(ref, y, E=E)
    lean = measure.measure(ref, y, E=E, keep=())
    assert lean.ulp is None and lean.ratio is None
    for k in ("max_ulp", "argmax_ulp", "max_ratio", "argmax_ratio", "over", "classes"):
        assert getattr(full, k) == getattr(lean, k)
    u = np.where(np.isnan(full.ulp), np.inf, full.ulp).ravel()
    assert full.argmax_ulp == int(np.argmax(u))
    assert full.argmax_ratio == int(np.argmax(full.ratio))
    # one row measured again gives that row of the batch
    row = measure.measure(measure.Rows(ref, 9, 10), y[9:10], E=E[9:10])
    assert np.array_equal(row.ratio[0], full.ratio[9])


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
def test_ordinal_distance(fmt):
    """Values apart in the format, as metrics.compare counts them: across zero, to ±inf, and
    inf where a NaN meets a number."""
    F = formats.get(fmt)
    x = families.generate("gaussian", F, 3, 64, seed=4)
    g, b = families.weights(F, 64)
    ref = oracle.layernorm(x, g, b)
    y = ref.rounded.copy()
    u = y.view(F.uint)
    u[0, 3] += 7                                  # 7 values up
    y[1, 2] = -y[1, 2]                            # across zero
    ref_c = metrics.compare(ref, y)
    m = measure.measure(ref, y)
    assert m.max_ordinal == float(ref_c.ordinal.max()) >= 7
    assert m.max_bits == pytest.approx(float(ref_c.bits.max()))
    y[2, 5] = np.nan
    assert measure.measure(ref, y).max_ordinal == np.inf
    assert measure.measure(ref, y.astype(np.float64)).max_ordinal is None


def test_first_position_of_a_tied_maximum():
    """numpy's argmax takes the first of equal maxima; so must the threaded, chunked one."""
    F = formats.FP32
    x = families.generate("gaussian", F, 64, 4096, seed=2)  # 2^18 elements: both threads
    g, b = families.weights(F, 4096)
    ref = oracle.layernorm(x, g, b)
    yy = ref.rounded.astype(np.float64)
    for (i, j) in ((50, 7), (3, 4000), (40, 1)):
        yy[i, j] = ref.exact[i, j] + 5 * F.ulp_array(ref.exact[i, j])
    m = measure.measure(ref, F.cast(yy))
    u = m.ulp.ravel()
    assert m.argmax_ulp == int(np.argmax(u))


def test_the_bins_are_read_from_the_bits():
    s = metrics.StreamStats()
    e = s.edges
    assert e[0] == 2.0 ** s.LOW and e[s.BINS_PER_OCTAVE] == 2.0 ** (s.LOW + 1)
    assert e[-1] == 2.0 ** s.HIGH and e[1] == 2.0 ** s.LOW * (1 + 1 / 16)
    rng = np.random.default_rng(0)
    u = np.concatenate([np.abs(rng.standard_normal(20000)) * 10.0 ** rng.uniform(-30, 25, 20000),
                        e, np.nextafter(e, 0), np.nextafter(e, np.inf), [0.0, 1e-300, 1e300]])
    assert np.array_equal(metrics.StreamStats.bins(u, len(e)), np.searchsorted(e, u, "left"))


def test_streamed_p99_is_an_upper_bound_within_a_bin():
    """p99 is the upper edge of its bin: at least the true p99 and at most 1/16 above it."""
    rng = np.random.default_rng(1)
    u = np.abs(rng.standard_normal(100_000)) * 3
    s = metrics.StreamStats()
    for part in np.array_split(u, 7):
        s.add(part)
    true = float(np.percentile(u, 99, method="higher"))
    assert true <= s.stats()[1] <= true * (1 + 1 / 16)


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
def test_fast_casts_round_once(fmt):
    """numpy's float64 -> float32/float16 conversions and the bf16 bit rounding give
    round_array's results, midpoints, subnormals and overflow included."""
    F = formats.get(fmt)
    rng = np.random.default_rng(3)
    lo, hi = {"fp16": (-10, 6), "bf16": (-45, 39), "fp32": (-50, 39)}[fmt]
    v = rng.standard_normal(200_000) * 10.0 ** rng.uniform(lo, hi, 200_000)
    t = F.round_array(v)
    fin = np.isfinite(t)
    nxt = np.nextafter(t[fin].astype(F.dtype), np.array(np.inf, F.dtype)).astype(np.float64)
    mids = ((t[fin] + nxt) / 2)[np.isfinite(nxt)]
    edge = [F.max_finite, F.max_finite * (1 + 2.0 ** -F.precision), F.min_subnormal / 2,
            F.min_subnormal * 0.75, F.min_subnormal * 1.5, np.inf, 0.0, 1e-300, 1e300]
    v = np.concatenate([v, mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf), edge])
    v = np.concatenate([v, -v])
    # fp16 rounds results below 2^-14 on the bits where they are many (as here, ~40 %) and
    # leaves them to numpy where they are few: both ways
    few = np.concatenate([v[np.abs(v) >= 2.0**-14], v[np.abs(v) < 2.0**-14][:64]])
    from normcheck.oracle import fast as oracle_fast

    for w in (v, few):
        a = F.cast(w)
        b = F.round_array(w).astype(F.dtype)
        assert np.array_equal(a.view(F.uint), b.view(F.uint))
        # the compiled cast the rows' generation uses: the same bits
        c = oracle_fast.cast(w, F)
        assert c.dtype == F.dtype and np.array_equal(c.view(F.uint), b.view(F.uint))
    assert np.isnan(F.cast(np.array([np.nan])).astype(np.float64)).all()
    # NaNs as numpy's own conversions store them: quiet, the sign kept (fp16: the top payload
    # bits, never the infinity's pattern)
    nans = np.array([np.nan, -np.nan] * 4096 + [np.frombuffer(np.uint64(0x7FF0000000000001)
                                                               .tobytes(), np.float64)[0]])
    assert np.array_equal(oracle_fast.cast(nans, F).view(F.uint), F.cast(nans).view(F.uint))


def test_pooled_rows_are_seeded_and_varied():
    F = formats.FP16
    a = families.generate("gaussian", F, 16, 512, seed=[1, 2], pooled=True)
    b = families.generate("gaussian", F, 16, 512, seed=[1, 2], pooled=True)
    c = families.generate("gaussian", F, 16, 512, seed=[1, 3], pooled=True)
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    assert not np.array_equal(a, c)
    assert len({r.tobytes() for r in a}) == 16


def test_own_library_builds_are_keyed_by_their_local_headers(tmp_path, monkeypatch):
    """measure.cpp and oracle/fast.cpp share fp_bits.h: a change to the header must rebuild
    them (the cache key holds the text of the headers a source includes beside it)."""
    from normcheck.backends import confine

    monkeypatch.setenv("NORMCHECK_CACHE", str(tmp_path / "cache"))
    (tmp_path / "h.h").write_text("static inline int f() { return 1; }\n")
    src = tmp_path / "lib.cpp"
    src.write_text('#include "h.h"\nextern "C" int g() { return f(); }\n')
    flags = ["-O1", "-fPIC", "-shared"]
    a = confine.build_library(src, "t", "lib", flags, "a test library")
    assert confine.build_library(src, "t", "lib", flags, "a test library") == a
    (tmp_path / "h.h").write_text("static inline int f() { return 2; }\n")
    b = confine.build_library(src, "t", "lib", flags, "a test library")
    assert b != a and b.is_file()


@pytest.mark.parametrize("case", ["layernorm-fp32", "rmsnorm-fp16", "layernorm-bf16",
                                  "add_layernorm-fp32-exact", "add_rmsnorm-fp16-stored",
                                  "add_rmsnorm-fp32-exact"])
def test_bound_formed_in_the_pass_equals_the_array(case):
    """The compiled measurement forming the sound bound row by row (bounds.SoundBound) gives
    what it gives from the bound as an array: every reduction, the same bits, and the rows
    whose bound is inf (a fused fp32 kernel under the exact convention adds h's rounding)."""
    if measure.library() is None:
        pytest.skip("the compiled measurement could not be built here")
    from normcheck import norms

    name, fmt, *conv = case.split("-")
    conv = conv[0] if conv else "exact"
    n, F = norms.get(name), formats.get(fmt)
    cols = 1000
    x = np.concatenate([families.generate(f, F, 5, cols, seed=2)
                        for f in ("gaussian", "offset", "tiny", "outlier", "special")])
    r = families.generate("gaussian", F, len(x), cols, seed=3) if n.fused else None
    g, b = families.weights(F, cols)
    b = b if n.centred else None
    ref = oracle.for_norm(n, x, g, b, residual=r, convention=conv)
    with np.errstate(invalid="ignore", over="ignore"):
        y = F.cast(ref.rounded.astype(np.float64) * (1 + 2.0 ** -6))  # 2-4 bf16 ulps off
    lazy = bounds.SoundBound(n, ref, oracle.normalised_parts(ref, x, r, conv), g, b,
                             convention=conv, storage=F)
    E = bounds.sound_bound_of(n, ref, oracle.normalised_rows(ref, x, r, conv), g, b,
                              convention=conv, storage=F)
    assert np.array_equal(lazy.array(), E, equal_nan=True)
    assert np.array_equal(lazy.rows(3, 7).array(), E[3:7], equal_nan=True)
    kw = dict(poison=formats.poison_bits(y.dtype), floor=1.0)
    a = measure.measure(ref, y, E=lazy, **kw)
    c = measure.measure(ref, y, E=E, **kw)
    for k in measure.ELEMENTS:
        assert np.array_equal(getattr(a, k), getattr(c, k), equal_nan=True), k
    for k in ("max_ulp", "argmax_ulp", "max_ratio", "argmax_ratio", "over", "classes",
              "unbounded_rows"):
        assert getattr(a, k) == getattr(c, k), k
    # the sum of ulps in other blocks: n·2^-53 relative at most, 1e-12 far above it
    assert a.sum_ulp == pytest.approx(c.sum_ulp, rel=1e-12)
    assert np.array_equal(a.hist, c.hist)
    assert c.unbounded_rows == int(np.isinf(E).any(axis=1).sum()) < len(x)
    assert a.over > 0  # 2^-6 relative is beyond the bound somewhere in every format
    if n.centred and F.name == "fp32":
        assert a.unbounded_rows > 0  # fp32 offset rows beyond what a float kernel can promise


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "gemma_rmsnorm"])
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
def test_compiled_sound_bound_equals_numpy(norm, fmt):
    """The compiled bound (measure.cpp, the check's) against bounds.sound_bound in numpy, from
    the rows as stored and as float64 sums: the same terms with the sums in another order, so
    equal to 1e-12 relative (a bound with a 1.5x safety margin; its sums of |x|, x² and |d|
    over a few thousand terms differ by n·2^-53 at most), inf and NaN in the same places; the
    exactness test of the mean's sum (the rows' common grid, from the lowest set bit) the same."""
    if measure.library() is None:
        pytest.skip("the compiled measurement could not be built here")
    F = formats.get(fmt)
    x = np.concatenate([families.generate(f, F, 6, 777, seed=4) for f in
                        ("gaussian", "offset", "constant", "tiny", "outlier", "extremes",
                         "special", "bimodal")])
    x[0, :] = 0.0  # a zero row: no lowest bit
    if fmt == "fp32":  # odd integers (the grid is 1) whose sums are not exact in float, where
        # a grid 8x too coarse would make them so: Σ|x| in [2^24, 2^27) (LayerNorm's mean), Σx²
        # in [2^24, 2^30) (RMSNorm's); checked: a lowest bit 3 too high fails this test
        rng = np.random.default_rng(1)
        x[1, :] = rng.integers(1 << 16, 1 << 17, 777) | 1
        x[2, :] = rng.integers(1, 1500, 777) | 1
    g, b = families.weights(F, 777)
    ref = bounds.sound_bound(norm, x.astype(np.float64), g, b, compiled=False)
    for rows, rows2 in ((x, None), (x.astype(np.float64), None),
                        (x, np.zeros_like(x))):  # stored bits; float64; a float64 sum
        E = bounds.sound_bound(norm, rows, g, b, rows2=rows2)
        assert np.array_equal(np.isinf(E), np.isinf(ref))
        assert np.array_equal(np.isnan(E), np.isnan(ref))
        fin = np.isfinite(ref)
        np.testing.assert_allclose(E[fin], ref[fin], rtol=1e-12, atol=0)
