"""Claim 1's seed rule: its simulated size and power against the t-interval's exact ones.

The rule (a criterion is supported when the t-interval over seeds lies below its margin edge) is a one-sided
t-test at level (1 - confidence_level) / 2, so for normal seeds its size is exactly that, and its power at a true
value mu is a noncentral-t probability (scipy.stats.nct). `seed_rule_calibration` simulates the rule itself at the
data's shape; these tests hold it to those exact values, within the simulation's binomial error.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats as sps

from brownformer.config import StatsConfig
from brownformer.stats.claims.claim1_sphere import seed_rule_calibration
from brownformer.stats.core.pooling import MIN_SEEDS

EDGE = 0.5
MARGINS = {"radius_spread_ratio": (0.0, EDGE)}


def _values_with_sd(n: int, sd: float, seed: int) -> np.ndarray:
    """n values whose sample standard deviation (ddof 1) is exactly `sd` (the simulation draws with the data's own)."""
    x = np.random.default_rng(seed).normal(size=n)
    return 0.1 + sd * (x - x.mean()) / x.std(ddof=1)


def _one_component(n: int, sd: float, seed: int = 0) -> dict:
    vals = _values_with_sd(n, sd, seed)
    return {"radius_spread_ratio": {f"s{i}": np.array([v]) for i, v in enumerate(vals)}}


@pytest.mark.parametrize("n_seeds", [5, 8])
def test_size_is_the_t_intervals_one_sided_level(n_seeds):
    stats = StatsConfig(calibration_replicates=4000)
    cal = seed_rule_calibration(_one_component(n_seeds, 0.05), MARGINS, stats)
    exact = (1 - stats.confidence_level) / 2
    assert cal.shape["n_seeds"] == n_seeds and cal.n_replicates == 4000
    assert abs(cal.size - exact) < 4 * math.sqrt(exact * (1 - exact) / 4000), cal.size


@pytest.mark.parametrize("sd", [0.25, 0.4])
def test_power_at_half_the_edge_is_the_noncentral_t_probability(sd):
    n, stats = 6, StatsConfig(calibration_replicates=4000)
    cal = seed_rule_calibration(_one_component(n, sd), MARGINS, stats)
    t_crit = sps.t.ppf(0.5 + stats.confidence_level / 2, n - 1)
    exact = sps.nct.cdf(-t_crit, n - 1, (0.5 * EDGE - EDGE) / (sd / math.sqrt(n)))
    (power,) = cal.power.values()
    assert 0.05 < exact < 0.95  # a shape where power is neither 0 nor 1: the comparison can fail
    assert abs(power - exact) < 4 * math.sqrt(exact * (1 - exact) / 4000), (power, exact)


def test_a_component_that_does_not_vary_between_seeds_is_exact_and_left_out_of_the_size():
    # an exactly known quantity (a pre-LN block's raw offset is 0 by construction) is read without error: at its edge
    # its point interval sits on the edge, so counting it would give size 1 for a rule that cannot err there
    stats = StatsConfig(calibration_replicates=2000)
    per_seed = {"radius_spread_ratio": _one_component(6, 0.05)["radius_spread_ratio"],
                "offset": {f"s{i}": np.array([0.0]) for i in range(6)}}
    cal = seed_rule_calibration(per_seed, {**MARGINS, "offset": (0.0, 0.25)}, stats)
    assert cal.shape == {"n_seeds": 6, "n_components": 2, "n_exact": 1}
    assert cal.size < 0.05


def test_layers_that_move_together_keep_the_size_of_one():
    # 4 layers, perfectly correlated between seeds: one test in effect, so the largest rate is one test's rate
    stats = StatsConfig(calibration_replicates=4000)
    vals = _values_with_sd(8, 0.05, 1)
    cal = seed_rule_calibration({"radius_spread_ratio": {f"s{i}": np.full(4, v) for i, v in enumerate(vals)}},
                                MARGINS, stats)
    exact = (1 - stats.confidence_level) / 2
    assert abs(cal.size - exact) < 4 * math.sqrt(exact * (1 - exact) / 4000)


def test_too_few_seeds_or_no_spread_is_not_simulated():
    stats = StatsConfig(calibration_replicates=50)
    few = seed_rule_calibration(_one_component(MIN_SEEDS - 1, 0.05), MARGINS, stats)
    flat = seed_rule_calibration({"radius_spread_ratio": {f"s{i}": np.array([0.2]) for i in range(6)}}, MARGINS, stats)
    assert few.size is None and few.n_replicates == 0
    assert flat.size is None


def test_the_simulation_is_deterministic_given_the_stats_seed():
    data = _one_component(6, 0.1)
    a = seed_rule_calibration(data, MARGINS, StatsConfig(calibration_replicates=200))
    b = seed_rule_calibration(data, MARGINS, StatsConfig(calibration_replicates=200))
    assert a == b
