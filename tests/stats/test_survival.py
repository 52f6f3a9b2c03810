"""Censored-time statistics (brownformer.stats.survival) against hand-computed examples and scipy."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from brownformer.stats.survival import json_number, km_median, km_median_resampled, logrank_test, median_ratio


def test_km_median_by_hand_with_a_censored_run_in_between():
    # events at 100, 200, 250, a run censored at 150: S(100) = 3/4, S(200) = 3/4 * 1/2 = 3/8 <= 1/2
    assert km_median([100, 150, 200, 250], [True, False, True, True]) == 200
    # 8 runs, censored at the budget: S drops to 4/8 at the 4th event
    t = [40, 10, 30, 20, 400, 400, 400, 400]
    assert km_median(t, [True] * 4 + [False] * 4) == 40
    # 3 events of 8: S stays at 5/8 > 1/2 -> median not reached within the budget
    assert km_median(t, [True] * 3 + [False] * 5) == math.inf


def test_resampled_median_matches_scipy_under_budget_censoring():
    rng = np.random.default_rng(1)
    t = np.array([120, 135, 150, 150, 205, 400, 400, 400], float)
    r = t < 400
    index = rng.integers(0, t.size, (300, t.size))
    fast = km_median_resampled(t, r, index)
    slow = np.array([km_median(t[i], r[i]) for i in index])
    np.testing.assert_array_equal(fast, slow)


def test_logrank_by_hand():
    """x: events at 1 and 3; y: event at 2, censored at 4.

    t=1: n=4 (2 x), O_x=1, E_x=1/2, V=1/4;  t=2: n=3 (1 x), O_x=0, E_x=1/3, V=2/9;
    t=3: n=2 (1 x), O_x=1, E_x=1/2, V=1/4.  Z = (2 - 4/3) / sqrt(13/18).
    """
    z = (2 - 4 / 3) / math.sqrt(1 / 4 + 2 / 9 + 1 / 4)
    res = logrank_test(([1, 3], [True, True]), ([2, 4], [True, False]))
    assert res.statistic == pytest.approx(z)
    assert res.pvalue == pytest.approx(sps.norm.sf(z))  # "greater": x reaches the target sooner


def test_logrank_without_any_event_is_undefined():
    assert logrank_test(([400, 400], [False, False]), ([400], [False])) is None


def test_ratio_infinite_and_undefined_are_spelled_apart():
    fast = ([100] * 8, [True] * 8)
    never = ([400] * 8, [False] * 8)
    assert median_ratio(never, fast, confidence_level=0.95, n_resamples=99, rng=0).to_dict()["estimate"] == "inf"
    assert median_ratio(never, never, confidence_level=0.95, n_resamples=99, rng=0).to_dict()["estimate"] is None
    assert median_ratio(fast, never, confidence_level=0.95, n_resamples=99, rng=0).estimate == 0.0
    assert [json_number(x) for x in (1.5, math.inf, -math.inf, math.nan)] == [1.5, "inf", "-inf", None]


def test_ratio_interval_covers_a_known_scale_ratio():
    """Log-normal times, proposed = 0.6 x baseline: the 95% interval covers 0.6 in most replicates."""
    rng = np.random.default_rng(7)
    cover = 0
    for _ in range(60):
        base = np.exp(rng.normal(math.log(300), 0.15, 8))
        prop = 0.6 * np.exp(rng.normal(math.log(300), 0.15, 8))
        r = median_ratio((prop, np.ones(8, bool)), (base, np.ones(8, bool)), confidence_level=0.95, n_resamples=499,
                         rng=rng)
        cover += r.confidence_interval[0] <= 0.6 <= r.confidence_interval[1]
    assert cover / 60 >= 0.8  # percentile bootstrap of medians with 8 seeds: near nominal, a little under
