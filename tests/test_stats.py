"""Intervals cover what they should, and verdicts follow the interval, not a threshold."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ddlstudy.analysis import stats


def test_median_interval_is_order_statistics_with_honest_coverage() -> None:
    three = stats.median_ci([3.0, 1.0, 2.0])
    assert (three.value, three.low, three.high) == (2.0, 1.0, 3.0)
    assert three.coverage == pytest.approx(0.75)          # [min, max] of 3 covers 75 %, not 95 %
    many = stats.median_ci(np.arange(1.0, 21.0))          # n = 20: [x_(6), x_(15)] covers 95.9 %
    assert (many.low, many.high) == (6.0, 15.0) and many.coverage >= 0.95
    assert stats.order_stat_coverage(20, 7) < 0.95        # one step narrower would undercover


def test_median_interval_drops_nan_and_needs_two_repeats() -> None:
    assert stats.median_ci([1.0, math.nan, 3.0]).n == 2
    one = stats.median_ci([5.0])
    assert one.value == 5.0 and math.isnan(one.low) and not one.measured
    assert stats.median_ci([]).n == 0


def test_ratio_interval_excludes_one_only_when_arms_separate() -> None:
    fast, slow = [1.0, 1.1, 0.9, 1.05, 0.95], [2.0, 2.1, 1.9, 2.2, 1.8]
    est = stats.ratio_ci(slow, fast)
    assert est.value == pytest.approx(2.0) and est.low > 1.0
    noisy = stats.ratio_ci([1.0, 3.0, 1.5], [2.0, 1.0, 2.5])
    assert noisy.low < 1.0 < noisy.high
    assert stats.ratio_ci(slow, fast).low == est.low      # fixed seed: same records, same interval


def test_paired_arms_must_align() -> None:
    with pytest.raises(ValueError, match="paired arms differ"):
        stats.ratio_ci([1.0, 2.0], [1.0])
    assert stats.ratio_ci([1.0, 2.0], [1.0], paired=False).n == 1


def test_slope_interval_sign_follows_data() -> None:
    x = [1, 1, 2, 2, 4, 4]
    up = stats.slope_ci(x, [1.0, 1.1, 2.0, 2.1, 4.0, 4.1])
    assert up.value == pytest.approx(1.0, rel=0.05) and up.low > 0
    flat = stats.slope_ci(x, [1.0, 2.0, 2.0, 1.0, 1.5, 1.4])
    assert flat.low < 0 < flat.high
    assert not stats.slope_ci([1, 1], [1.0, 2.0]).measured   # one x level: no slope


@pytest.mark.parametrize(("low", "high", "direction", "expected"), [
    (1.1, 1.5, 1, "agrees"), (1.1, 1.5, -1, "differs"), (0.5, 0.9, 1, "differs"),
    (0.5, 0.9, -1, "agrees"), (0.9, 1.1, 1, "inconclusive"), (1.0, 1.2, 1, "inconclusive"),
    (math.nan, 1.2, 1, "not measured"), (None, None, -1, "not measured"),
])
def test_verdict_only_when_interval_excludes_no_effect(low: float, high: float, direction: int,
                                                        expected: str) -> None:
    assert stats.verdict(low, high, 1.0, direction) == expected


def test_reason_is_computed_from_the_interval() -> None:
    est = stats.ratio_ci([2.0, 2.1, 1.9], [1.0, 1.0, 1.0])
    text = stats.reason(est, 1.0, 1, "ring/PS speed-up")
    assert "ring/PS speed-up = 2" in text and "wholly above 1" in text
    assert "other side" in stats.reason(est, 1.0, -1, "x")
    assert "no usable repeats" in stats.reason(stats.ratio_ci([math.nan], [1.0]), 1.0, 1, "x")


def test_summarize_keeps_spread_and_repeat_count() -> None:
    df = pd.DataFrame({"arm": ["a"] * 3 + ["b"] * 3, "t": [1.0, 2.0, 3.0, 5.0, 5.0, 6.0]})
    out = stats.summarize(df, ["arm"], "t").set_index("arm")
    assert out.loc["a", "t"] == 2.0 and out.loc["a", "t_ci_high"] == 3.0
    assert out.loc["b", "repeats"] == 3


def test_ratio_of_ratios_follows_the_four_arms() -> None:
    est = stats.ratio_of_ratios_ci([30, 31], [10, 10.1], [12, 12.3], [10, 10.2])
    assert est.value == pytest.approx((30.5 / 10.05) / (12.15 / 10.1))
    assert 1 < est.low <= est.value <= est.high
    wide = stats.ratio_of_ratios_ci([18, 30], [10, 10], [15, 35], [10, 10])
    assert wide.low <= 1 <= wide.high
    one = stats.ratio_of_ratios_ci([30], [10], [12], [10])
    assert not one.measured and one.n == 1
