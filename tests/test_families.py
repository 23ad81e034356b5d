"""The rows built to hurt hold what their families promise, whether a recipe makes one row (a
Hypothesis draw) or a whole batch at once (the seeded, vectorised generation)."""

import numpy as np
import pytest

from normcheck import families, formats

COLS = 257


def _rows(fam, F, how):
    if how == "batch":
        return families.generate(fam, F, 24, COLS, seed=[5, 1])
    if how == "pooled":
        return families.generate(fam, F, 24, COLS, seed=[5, 2], pooled=True)
    src = families.NumpySource(np.random.default_rng(5))  # one row per draw, as Hypothesis does
    return np.stack([families.get(fam).row(src, F, COLS) for _ in range(24)])


def _promise(fam, F, x):
    """Whether every row of x (float64) keeps the family's promise; the failing row's index."""
    a = np.abs(x)
    fin = np.isfinite(x)
    for i, row in enumerate(x):
        ar = a[i]
        if fam == "special":
            ok = 1 <= (~fin[i]).sum() <= 3
        elif not fin[i].all():
            ok = False
        elif fam == "constant":
            ok = (row == row[0]).all()
        elif fam == "fp16_large":  # 65504 as the format rounds it (bf16: 65536)
            ok = (ar >= 256).all() and (ar <= F.round_array(np.array(65504.0))).all()
        elif fam == "tiny":  # scale <= 16·min_normal, normals below 8σ
            ok = ar.max() < 128 * F.min_normal and ar.max() > 0
        elif fam == "outlier":  # 1 to 4 massive values among N(0,1) ones (|z| < 8)
            big = ar > 100
            ok = 1 <= big.sum() <= 4 and ar[~big].max() < 8
        elif fam == "bimodal":
            ok = (row[0::2] > 0).all() and (row[1::2] < 0).all()
        elif fam == "extremes":
            ok = (ar >= (256 if F.name == "fp16" else 1.8e19)).all()
        elif fam == "offset":  # μ at least its spread: κ >= 1, and never constant
            ok = abs(row.mean()) >= 0.5 * row.std() and row.std() > 0
        else:  # gaussian, tails
            ok = row.std() > 0
        if not ok:
            return i
    return None


@pytest.mark.parametrize("how", ["batch", "pooled", "row"])
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("fam", sorted(families.FAMILIES))
def test_rows_keep_their_family_promise(fam, fmt, how):
    F = formats.get(fmt)
    x = _rows(fam, F, how)
    assert x.dtype == F.dtype and x.shape == (24, COLS)
    bad = _promise(fam, F, x.astype(np.float64))
    assert bad is None, f"{fam} {fmt} ({how}) row {bad}: {x[bad][:8]}"
    # rows differ from each other (per-row parameters), constant rows included
    assert len({r.tobytes() for r in x}) > 12


def test_a_batch_mixes_the_offset_kinds():
    """offset draws its kind per row: in a batch the [1000, 1001]-style rows (a few distinct
    values, all within 3 ulps of the first), the quantised ones (one common value but for rare
    deviations) and the Gaussian ones (many distinct values) all appear."""
    F = formats.FP32
    x = families.generate("offset", F, 64, 1024, seed=9).astype(np.float64)
    distinct = np.array([len(np.unique(r)) for r in x])
    mode_share = np.array([np.unique(r, return_counts=True)[1].max() / r.size for r in x])
    assert (distinct > 100).any()                                  # gaussian
    assert ((distinct <= 4) & (mode_share < 0.9)).any()            # levels
    assert (mode_share >= 0.9).any()                               # quantised
