"""Metrics: ULP, ordinal distance, bits, scaled error, classes and summaries."""

import numpy as np

from normcheck import metrics, oracle


def test_metrics_of_a_perturbed_answer():
    x = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    ref = oracle.layernorm(x)
    y = ref.rounded.copy()
    y[0, 1] = np.nextafter(np.nextafter(y[0, 1], np.float32(9)), np.float32(9))  # 2 steps up
    c = metrics.compare(ref, y)
    assert c.ordinal[0, 1] == 2 and c.ordinal[0, 0] == 0
    assert np.isclose(c.bits[0, 1], np.log2(3))
    assert 1.5 <= c.ulp[0, 1] <= 2.5
    s = metrics.summarize(c)
    assert s.worst == (0, 1) and s.max_ulp == c.ulp[0, 1] and s.failures == 0
    assert s.classes["finite"] == 4


def test_classes():
    x = np.array([[1.0, 2.0, np.nan], [1.0, 2.0, 3.0]], np.float16)
    g = np.array([1.0, 1.0, 60000.0], np.float16)
    ref = oracle.layernorm(x, g)  # row 1 col 2: 60000·1.2247 overflows fp16 exactly
    y = ref.rounded.copy()
    y[0, 0] = np.nan          # NaN row answered... with NaN: propagated
    y[0, 1] = 1.0             # NaN row answered by a number
    y[1, 0] = np.inf          # spurious +inf
    y[1, 2] = 65504.0         # missed overflow
    c = metrics.compare(ref, y)
    counts = c.counts()
    assert counts["nan_propagated"] == 2 and counts["nan_not_propagated"] == 1
    assert counts["spurious_pos_inf"] == 1 and counts["missed_overflow"] == 1
    assert counts["finite"] == 1
    s = metrics.summarize(c)
    assert s.max_ulp == np.inf and s.mean_ulp == np.inf and s.failures == 3
    ok = metrics.compare(ref, ref.rounded)
    assert ok.counts()["overflow_ok"] == 1 and metrics.summarize(ok).failures == 0


def test_scaled_error_is_kind_where_beta_cancels():
    x = np.array([[0.0, 1.0]], np.float32)
    g = np.array([1.0, 1.0], np.float32)
    ref = oracle.layernorm(x, g, eps=np.float32(0.75))  # x̂ = ±½
    b = np.array([0.0, np.float32(-0.5 + 2**-20)], np.float32)
    ref = oracle.layernorm(x, g, b, eps=np.float32(0.75))  # y1 = 2^-20: β cancels γx̂
    y = ref.rounded.copy()
    y[0, 1] = 0.0
    c = metrics.compare(ref, y)
    assert c.ulp[0, 1] > 1e6  # harsh in ulp(t)
    assert c.scaled[0, 1] < 1e-4 * c.ulp[0, 1]  # small against max(|γx̂|, |β|)


def test_stream_stats_match_the_whole_array():
    """max and mean exact; p99 within the histogram's stated 2^(1/16) of the exact p99."""
    from normcheck import metrics

    rng = np.random.default_rng(4)
    parts = [np.abs(rng.standard_normal(1000)) * 10.0 ** rng.uniform(-3, 3) for _ in range(7)]
    parts.append(np.zeros(50))
    s = metrics.StreamStats()
    for p in parts:
        s.add(p)
    mx, p99, mean = metrics.ulp_stats(np.concatenate(parts))
    smx, sp99, smean = s.stats()
    assert smx == mx and abs(smean - mean) <= 1e-12 * mean
    assert p99 <= sp99 <= p99 * 2 ** (1 / 16)
    s.add(np.array([np.inf]))
    assert s.stats()[0] == np.inf and s.stats()[2] == np.inf
    assert metrics.StreamStats().stats() == (0.0, 0.0, 0.0)
