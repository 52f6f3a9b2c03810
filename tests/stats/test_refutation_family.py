"""A claim that holds in every component is refuted ("not supported") by one component outside its margin, so the
refutation is corrected over the claim's family of components (common.seed_verdict's Bonferroni level).

Checked by simulation against the exact family-wise rates: K independent components, each exactly on its margin
edge (the claim true, at its least favourable point), normal seeds. Uncorrected, some component is refuted with
probability 1 - (1 - a)^K (a = 2.5%, the interval's one-sided level): 26% at K = 12. Corrected, at most a.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from brownformer.stats.claims.common import family_interval, seed_verdict
from brownformer.stats.core.pooling import seed_pool

CL = 0.95
A = (1 - CL) / 2  # one-sided level of each component's refutation
EDGE = 0.5
MARGIN = (-math.inf, EDGE)


def _pool(values):
    return seed_pool(dict(enumerate(values)), confidence_level=CL)


def _refutation_rate(K: int, family: int, n_seeds: int = 5, reps: int = 2000, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    refuted = 0
    for _ in range(reps):
        draws = EDGE + 0.1 * rng.standard_normal((K, n_seeds))
        refuted += any(seed_verdict(_pool(row), MARGIN, family=family).verdict == "not supported" for row in draws)
    return refuted / reps


def test_uncorrected_refutation_inflates_with_the_family():
    K, reps = 12, 2000
    exact = 1 - (1 - A) ** K
    rate = _refutation_rate(K, family=1, reps=reps)
    assert abs(rate - exact) < 4 * math.sqrt(exact * (1 - exact) / reps), (rate, exact)


@pytest.mark.parametrize("K", [4, 12])
def test_corrected_refutation_keeps_the_family_wise_level(K):
    reps = 2000
    rate = _refutation_rate(K, family=K, reps=reps, seed=K)
    assert rate <= A + 4 * math.sqrt(A * (1 - A) / reps), rate  # Bonferroni: at most a, whatever the dependence


def test_a_refutation_outside_only_at_95_percent_is_inconclusive_and_says_why():
    # 5 seeds, mean 0.6, SE 0.03: the 95% interval [0.517, 0.683] lies above 0.5, the Bonferroni one over 12 does not
    vals = 0.6 + 0.03 * math.sqrt(5) * np.array([-1.2649, -0.6325, 0.0, 0.6325, 1.2649])  # sample SD 1
    pool = _pool(vals)
    assert pool.confidence_interval[0] > EDGE
    assert family_interval(pool, 12)[0] < EDGE
    alone = seed_verdict(pool, MARGIN)
    family = seed_verdict(pool, MARGIN, family=12)
    assert alone.verdict == "not supported"
    assert family.verdict == "inconclusive" and "12 components" in family.reason


def test_the_family_never_touches_supported_or_a_clear_refutation():
    inside = _pool([0.1, 0.12, 0.09, 0.11, 0.1])
    far = _pool([0.9, 0.92, 0.89, 0.91, 0.9])
    for family in (1, 12, 100):
        assert seed_verdict(inside, MARGIN, family=family).verdict == "supported"
        assert seed_verdict(far, MARGIN, family=family).verdict == "not supported"


def test_family_interval_at_one_component_is_the_pools_own():
    pool = _pool([0.3, 0.5, 0.4, 0.45, 0.35])
    assert np.allclose(family_interval(pool, 1), pool.confidence_interval)


def test_claim2s_family_leaves_out_the_causal_reversibility_that_cannot_refute():
    # reversibility under a causal mask is undefined by construction (inconclusive in every seed), so it is not a
    # component a refutation could come from: 2 configurations x 3 criteria, one causal -> 5 components, not 6
    from brownformer.stats.claims.claim2_markov import CRITERIA, refutation_family
    from brownformer.stats.claims.claim2_seed import SeedValues

    def seeds(causal: bool) -> dict:
        info = SeedValues(causal=causal, fit=None, values={}, why={}, within={}, n_inputs=1)
        return {str(s): (None, info) for s in range(3)}

    assert len(CRITERIA) == 3
    assert refutation_family({"vit-pre": seeds(False), "lm-pre": seeds(True)}) == 5
    assert refutation_family({"vit-pre": seeds(False), "vit-post": seeds(False)}) == 6
    assert refutation_family({"lm-pre": seeds(True)}) == 2
    assert refutation_family({}) == 1
