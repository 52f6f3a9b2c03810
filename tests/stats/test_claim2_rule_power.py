"""Claim 2's rule power per configuration (``claim2_markov.configuration_rule_power``): the Bonferroni bound on the
intersection-union rule holds against a simulation of the rule itself, and a causal configuration, whose
reversibility is undefined by construction, can never be "supported" (power 0)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from brownformer.stats.claims.claim2_markov import CRITERIA, configuration_rule_power
from brownformer.stats.claims.common import seed_verdict
from brownformer.stats.claims.details import ClaimDetails, RuleCalibration, SeedPower
from brownformer.stats.core.pooling import seed_interval_power, seed_pool
from brownformer.verdicts import INCONCLUSIVE, ClaimRecord

CL = 0.95
MARGINS = {"head_isotropy": (0.9, math.inf), "vmf_output_error": (-math.inf, 0.5),
           "reversibility": (-math.inf, 0.1)}
SD = {"head_isotropy": 0.02, "vmf_output_error": 0.09, "reversibility": 0.025}  # seed SDs that leave each power < 1


@dataclass(frozen=True)
class _Config(ClaimDetails):
    causal: bool


def _truth(name: str) -> float:
    _, edge, ideal = CRITERIA[name]
    lo, hi = MARGINS[name]
    return 0.5 * (ideal + (lo if edge == "lower" else hi))  # halfway between the ideal and the margin edge


def _record(n_seeds: int, causal: bool) -> ClaimRecord:
    power = {name: SeedPower(true_value=_truth(name), seed_sd=SD[name], method="noncentral t",
                             power_at_n_seeds={str(n_seeds): seed_interval_power(n_seeds, SD[name], _truth(name),
                                                                                 MARGINS[name], confidence_level=CL)})
             for name in CRITERIA}
    cal = RuleCalibration(shape={"n_seeds": n_seeds}, size=None, size_se=None, power=power, n_replicates=0,
                          method="test")
    return ClaimRecord("2", "test", INCONCLUSIVE, calibration=cal, details=_Config(causal=causal))


@pytest.mark.parametrize("n_seeds", [4, 6])
def test_the_bound_is_below_the_simulated_rate_of_the_rule(n_seeds):
    bound = configuration_rule_power(_record(n_seeds, causal=False))
    assert 0.2 < bound < 0.99  # a case where the bound is informative, not 0 or 1
    rng, reps, passed = np.random.default_rng(n_seeds), 2000, 0
    for _ in range(reps):
        verdicts = [seed_verdict(seed_pool(dict(enumerate(_truth(n) + SD[n] * rng.standard_normal(n_seeds))),
                                           confidence_level=CL), MARGINS[n]).verdict for n in CRITERIA]
        passed += all(v == "supported" for v in verdicts)
    rate = passed / reps
    assert bound <= rate + 4 * math.sqrt(rate * (1 - rate) / reps), (bound, rate)
    # independent criteria: the rule passes with the product of the three powers, which the bound approaches
    product = math.prod(p.power_at_n_seeds[str(n_seeds)] for p in _record(n_seeds, False).calibration.power.values())
    assert abs(rate - product) < 4 * math.sqrt(product * (1 - product) / reps), (rate, product)


def test_a_causal_configuration_can_never_be_supported():
    assert configuration_rule_power(_record(5, causal=True)) == 0.0


def test_an_unknown_criterion_power_leaves_the_rule_power_unknown():
    rec = _record(5, causal=False)
    rec.calibration.power["reversibility"] = SeedPower(true_value=0.05, seed_sd=None, method="noncentral t",
                                                       power_at_n_seeds={"5": None})
    assert configuration_rule_power(rec) is None
