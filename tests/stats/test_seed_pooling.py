"""Seeds as the unit of inference (stats/core/pooling.py seed_pool): the interval over seeds, the minimum, the power,
and what the claims make of it (what is nested inside a seed cannot narrow the interval)."""
import dataclasses
import numpy as np
import pytest
from scipy import stats as sps

from brownformer.config import StatsConfig
from brownformer.stats.claims import sphere_claim
from brownformer.stats.core.pooling import MIN_SEEDS, seed_interval_power, seed_pool
from brownformer.stats.sphere.sphere_distance import tensor_sphere_summary

STATS = StatsConfig(n_resamples=199)


def test_seed_interval_is_students_t_over_seeds():
    x = np.random.default_rng(0).normal(1.0, 0.3, 6)
    pool = seed_pool({f"s{i}": v for i, v in enumerate(x)}, confidence_level=0.95)
    ref = sps.ttest_1samp(x, 0.0).confidence_interval(0.95)
    assert pool.confidence_interval == pytest.approx((ref.low, ref.high), rel=1e-12)
    assert pool.n_seeds == 6 and pool.df == 5 and pool.decidable


def test_seed_interval_covers_the_configuration_mean():
    """Simulated seeds (a configuration's value plus seed-to-seed noise): coverage near the nominal 95%."""
    rng = np.random.default_rng(1)
    hits = [seed_pool(dict(enumerate(rng.normal(0.2, 0.05, 5))), confidence_level=0.95).confidence_interval
            for _ in range(2000)]
    coverage = np.mean([lo <= 0.2 <= hi for lo, hi in hits])
    assert 0.935 <= coverage <= 0.965


def test_fewer_than_the_minimum_does_not_decide():
    pool = seed_pool({"s0": 0.1, "s1": 0.12}, confidence_level=0.95)
    assert MIN_SEEDS > 2 and not pool.decidable
    assert pool.why_undecidable == f"n seeds 2 < minimum {MIN_SEEDS}"
    one = seed_pool({"s0": 0.1, "s1": float("nan")}, confidence_level=0.95)
    assert one.n_seeds == 1 and np.isnan(one.confidence_interval[0])  # a NaN seed is dropped, not counted


@pytest.mark.parametrize("n,true", [(3, 0.3), (5, 0.4), (8, 0.45)])
def test_seed_interval_power_matches_simulation(n, true):
    """The noncentral-t power against the rule applied to simulated seeds."""
    rng = np.random.default_rng(2)
    sd, margin = 0.1, (-np.inf, 0.5)
    sims = [seed_pool(dict(enumerate(rng.normal(true, sd, n))), confidence_level=0.95).confidence_interval[1]
            <= margin[1] for _ in range(4000)]
    assert seed_interval_power(n, sd, true, margin, confidence_level=0.95) == pytest.approx(np.mean(sims), abs=0.025)
    assert seed_interval_power(MIN_SEEDS - 1, sd, true, margin, confidence_level=0.95) == 0.0


def _post_ln_seed(rng, offset, n_inputs):
    """One seed's post-LN capture: a sphere whose centre beta sits `offset` radii from the origin."""
    x = rng.standard_normal((1, n_inputs * 6, 12))
    z = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
    beta = np.full(12, offset)  # |beta| = offset sqrt(12) = offset radii (the radius is sqrt(12))
    files = []
    for tensor, arr in (("ln_raw", z), ("ln_affine", z + beta)):
        s = tensor_sphere_summary(arr, tensor=tensor, z_raw=z, n_inputs=n_inputs, n_tokens=6, n_resamples=199)
        s = dataclasses.replace(s, ln="post", step=100)
        files.append({"path": f"depth/{tensor}_c1.npy", "sphere": s, "capture": 1})
    return files


def test_claim1_interval_includes_seed_to_seed_variation_of_beta():
    """Each seed's offset is exact (narrow within-seed interval), but the seeds differ: the claim's interval is the
    spread over seeds, not the within-seed one, and more probe inputs in one seed give it no more weight."""
    rng = np.random.default_rng(3)
    offsets = [0.15, 0.22, 0.29, 0.19]
    files = []
    for s, (o, n_inputs) in enumerate(zip(offsets, (8, 8, 8, 64))):
        files += [{**f, "run": f"vit-post__adamw__s{s}"} for f in _post_ln_seed(rng, o, n_inputs)]
    rec = sphere_claim(files, STATS)
    crit = rec.per_model["vit-post__adamw"].details.criteria["offset"]
    ref = sps.ttest_1samp(offsets, 0.0).confidence_interval(STATS.confidence_level)
    assert crit.estimate == pytest.approx(np.mean(offsets), rel=1e-6)  # equal weight per seed
    assert crit.confidence_interval == pytest.approx([ref.low, ref.high], rel=1e-6)
    within = rec.per_run["vit-post__adamw__s0"].details.within_seed["offset"].confidence_interval
    assert within[1] - within[0] < 1e-6 < crit.confidence_interval[1] - crit.confidence_interval[0]
    assert crit.verdict == "inconclusive"  # upper bound past 0.25: seed-to-seed variation decides
    assert rec.seeds.n_seeds == {"vit-post__adamw": 4} and "inside each seed" in rec.seeds.nesting


def test_configuration_pools_group_runs_and_replica_sets_by_configuration():
    from brownformer.stats.claims.common import configuration_of, configuration_pools
    values = {"vit-pre__adamw__s0": 1.0, "vit-pre__adamw__s1": 1.2, "vit-pre__adamw__s2__replicas": 0.8,
              "vit-post__sgd__s0": 3.0, "my-model": 2.0}
    pools = {c.configuration: c.pool for c in configuration_pools(values, confidence_level=0.95)}
    assert set(pools) == {"vit-pre__adamw", "vit-post__sgd", "my-model"}
    assert pools["vit-pre__adamw"].n_seeds == 3 and pools["vit-pre__adamw"].estimate == pytest.approx(1.0)
    assert not pools["vit-post__sgd"].decidable and not pools["my-model"].decidable
    assert configuration_of("vit-pre__adamw__s2__replicas") == ("vit-pre__adamw", "s2")


@pytest.mark.parametrize("values, margin, verdict", [
    ([0.10, 0.12, 0.11, 0.09], (-np.inf, 0.5), "supported"),  # the t-interval lies well below the ceiling
    ([0.90, 0.92, 0.91, 0.89], (-np.inf, 0.5), "not supported"),  # entirely above it
    ([0.10, 0.12], (-np.inf, 0.5), "inconclusive"),  # below MIN_SEEDS: never decides
], ids=["inside", "outside", "too-few-seeds"])
def test_seed_verdict_is_a_decision_on_the_t_interval(values, margin, verdict):
    from brownformer.statsfile import Decision
    from brownformer.stats.claims.common import seed_verdict

    pool = seed_pool({f"s{i}": v for i, v in enumerate(values)}, confidence_level=0.95)
    ref = sps.ttest_1samp(values, 0.0).confidence_interval(0.95) if len(values) >= 2 else None
    decision = seed_verdict(pool, margin)
    assert isinstance(decision, Decision) and decision.verdict == verdict
    if len(values) < MIN_SEEDS:
        assert decision.reason == f"n seeds {len(values)} < minimum {MIN_SEEDS}"
    else:  # the verdict read off scipy's t-interval
        assert (ref.high < margin[1]) == (verdict == "supported") and decision.reason == ""
