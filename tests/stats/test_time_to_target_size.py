"""Simulated error rates of claim 4's rule (brownformer.stats.time_to_target_size)."""
from __future__ import annotations

import math

from brownformer.config import DEFAULT_STATS
from brownformer.stats.time_to_target_size import MIN_LOG_SD, log_time_law, rule_error_rates


def test_size_on_the_margin_is_at_most_five_percent_and_power_is_high_far_from_it():
    margin = DEFAULT_STATS.margins["time_to_target_steps_ratio"][1]
    rates = rule_error_rates(8, 8, mu=math.log(300), sigma=0.15, budget=400, eval_every=5, margin=margin,
                             confidence_level=0.95, n_resamples=199, replicates=150, rng=3)
    assert rates.size <= 0.05
    assert rates.rates[0.5]["supported"] >= 0.8
    assert rates.rates[1.0]["not supported"] >= 0.5 and rates.rates[1.0]["supported"] == 0


def test_log_time_law_reads_the_median_and_floors_the_spread():
    mu, sigma = log_time_law([300] * 8, [True] * 8)
    assert mu == math.log(300) and sigma == MIN_LOG_SD
    mu, _ = log_time_law([100, 400, 400], [True, False, False])  # median not reached: put past the budget
    assert mu > math.log(400)
