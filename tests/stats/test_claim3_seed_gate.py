"""Claim 3 with seeds as the unit: a decisive verdict needs a configuration with MIN_SEEDS seeds.

The per-run records are replaced by fixed ones (each run "not supported" with a tiny size bound), so the test
isolates the claim-level rule: the same count of rejecting runs decides when they are seeds of one
configuration, and is "inconclusive" when each run is the only seed of its configuration.
"""
from __future__ import annotations

import pytest

from brownformer.config import StatsConfig
from brownformer.stats.claims import claim3_brownian
from brownformer.stats.claims.details import Claim3RunDetails, RunPooling
from brownformer.stats.core.pooling import MIN_SEEDS
from brownformer.verdicts import NOT_SUPPORTED, ClaimRecord
from brownformer.statsfile import EffectResult

STATS = StatsConfig()


def _rejecting_run(key, run, files, stats, table):
    est = EffectResult.headline("window MSD exponent", 0.5 + 0.01 * int(run.rsplit("s", 1)[1]), (0.4, 0.6), stats.confidence_level)
    return ClaimRecord(claim=key, title="t", verdict=NOT_SUPPORTED, reason="fixed", estimate=est,
                       margin=tuple(stats.margins["msd_exponent"]),
                       details=Claim3RunDetails(
                           files=[], n_brownian=0, n_not_brownian=1, n_files=1,
                           pooling=RunPooling(rule="fixed", file_sizes=[1e-4], k_run=1, size_bound=1e-4,
                                              n_not_brownian=1, pvalue=1e-4),
                           pvalue=1e-4, classifications={}, estimate_se=0.05, estimate_df=10.0, estimate_method="fixed",
                           spread_over_files=est))


@pytest.fixture()
def fixed_runs(monkeypatch):
    monkeypatch.setattr(claim3_brownian, "_run_record", _rejecting_run)


def _files(runs):
    return [{"run": r, "path": "depth/resid.npy", "result": {"kind": "euclidean"}} for r in runs]


def test_one_seed_per_configuration_is_not_decided(fixed_runs):
    runs = [f"model{i}__adamw__s0" for i in range(MIN_SEEDS + 1)]
    claim = claim3_brownian.brownian_family_claim("3a", _files(runs), STATS, calibration=None)
    assert claim.verdict == "inconclusive"
    assert f"no configuration has {MIN_SEEDS} seeds" in claim.reason
    assert claim.seeds.n_seeds == {f"model{i}__adamw": 1 for i in range(MIN_SEEDS + 1)}


def test_seeds_of_one_configuration_decide(fixed_runs):
    runs = [f"vit-pre__adamw__s{i}" for i in range(MIN_SEEDS + 1)]
    claim = claim3_brownian.brownian_family_claim("3a", _files(runs), STATS, calibration=None)
    assert claim.verdict == "not supported", claim.reason
    pool = claim.details.per_configuration["vit-pre__adamw"]
    assert pool["n_seeds"] == MIN_SEEDS + 1 and pool["decidable"]
    lo, hi = pool["confidence_interval"]
    assert lo < pool["estimate"] < hi
