"""Simulated error rates of claim 4's rule (brownformer.stats.comparison.time_to_target_size)."""
from __future__ import annotations

import math

from brownformer.config import DEFAULT_STATS
import pytest

from brownformer.stats.comparison.time_to_target_size import (MAX_SIZE, MIN_LOG_SD, ComparisonShape, log_time_law,
                                                              rule_error_rates)


def test_size_on_the_margin_is_at_most_five_percent_and_power_is_high_far_from_it():
    margin = DEFAULT_STATS.margins["time_to_target_steps_ratio"][1]
    rates = rule_error_rates(ComparisonShape(8, 8, mu=math.log(300), sigma=0.15, budget=400, eval_every=5,
                                             margin=margin, confidence_level=0.95, replicates=300), rng=3)
    assert rates.size <= MAX_SIZE and rates.size_not_supported <= MAX_SIZE
    assert rates.rates[0.5]["supported"] >= 0.8
    assert rates.rates[1.0]["not supported"] >= 0.5 and rates.rates[1.0]["supported"] == 0


@pytest.mark.parametrize("median", [300, 380, 450], ids=["few-censored", "a-third-censored", "baseline-median-unreached"])
def test_equal_speed_with_censoring_is_never_called_faster_and_the_margin_keeps_its_size(median):
    """The steps rule on simulated runs whose times share one law (equal speed) or sit on the margin, with the
    budget censoring up to most of the baseline's runs: P(supported) <= 5% (the old bootstrap of medians read
    a censored baseline median as a ratio of 0 and reached 15%)."""
    margin = DEFAULT_STATS.margins["time_to_target_steps_ratio"][1]
    rates = rule_error_rates(ComparisonShape(8, 8, mu=math.log(median), sigma=0.3, budget=400, eval_every=5,
                                             margin=margin, confidence_level=0.95, replicates=400),
                             rng=11, ratios=(1.0,))
    assert rates.size <= MAX_SIZE and rates.rates[1.0]["supported"] <= MAX_SIZE / 5


def test_a_truly_twice_as_fast_optimizer_is_supported():
    """Positive control: ratio 0.5 against a margin of 0.75, 8 seeds each, AdamW-like spread."""
    margin = DEFAULT_STATS.margins["time_to_target_steps_ratio"][1]
    rates = rule_error_rates(ComparisonShape(8, 8, mu=math.log(250), sigma=0.15, budget=400, eval_every=5,
                                             margin=margin, confidence_level=0.95, replicates=200),
                             rng=5, ratios=(0.5,))
    assert rates.rates[0.5]["supported"] >= 0.95


def test_log_time_law_reads_the_median_and_floors_the_spread():
    mu, sigma = log_time_law([300] * 8, [True] * 8)
    assert mu == math.log(300) and sigma == MIN_LOG_SD
    mu, _ = log_time_law([100, 400, 400], [True, False, False])  # median not reached: put past the budget
    assert mu > math.log(400)


def test_calibrated_critical_values_hold_the_size_where_the_normal_ones_do_not():
    """A fast baseline (median 60 steps, tight seeds) on a 5-step grid: the normal critical values say "not
    supported" 7% of the time with the true ratio on the margin; the values simulated at the shape hold both error
    rates at the one-sided level (checked on a fresh stream) and keep the power."""
    import math

    from brownformer.stats.comparison.time_to_target_size import calibrated_critical, nominal_critical

    shape = ComparisonShape(n_proposed=8, n_baseline=8, mu=math.log(60), sigma=0.05, budget=400, eval_every=5,
                            margin=0.75, confidence_level=0.95, replicates=400)
    nominal = rule_error_rates(shape, rng=0)
    assert nominal.size_not_supported > MAX_SIZE
    crit = calibrated_critical(shape, rng=[0, 4])
    z = nominal_critical(0.95)
    assert crit[0] >= z[0] and crit[1] <= z[1] and crit[1] < z[1]
    calibrated = rule_error_rates(shape, rng=1, critical=crit)
    assert calibrated.size <= MAX_SIZE and calibrated.size_not_supported <= MAX_SIZE
    assert calibrated.rates[0.5]["supported"] >= 0.9 and calibrated.rates[1.0]["not supported"] >= 0.9
    assert calibrated.critical == crit and nominal.critical == z

