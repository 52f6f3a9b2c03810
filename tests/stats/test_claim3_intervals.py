"""Claim-3 run- and claim-level intervals: a run's mean over dependent files, the claim's mean over independent runs."""
import math

import numpy as np
from scipy import stats as sps

from brownformer.config import StatsConfig
from brownformer.stats.claims.claim3_brownian import _run_estimate
from brownformer.stats.claims.claim_inputs import FileCalibration, TrajectoryFile, view
from brownformer.stats.claims.common import independent_mean_interval
from brownformer.stats.claims.details import WorstCalibration

STATS = StatsConfig()


def test_independent_mean_interval_is_the_normal_interval_with_large_df():
    est, se, df = independent_mean_interval([1.0, 2.0, float("nan")], [0.1, 0.2, 0.3], [1e9, 1e9, 1e9], stats=STATS,
                                            name="x")
    assert est.estimate == 1.5 and math.isclose(se, math.sqrt(0.1 ** 2 + 0.2 ** 2) / 2)  # the NaN run is dropped
    half = sps.norm.ppf(0.5 + STATS.confidence_level / 2) * se
    assert np.allclose(est.confidence_interval, (1.5 - half, 1.5 + half), rtol=1e-6)
    # Welch-Satterthwaite: two runs with equal errors and df pool to twice the df
    assert math.isclose(independent_mean_interval([0, 1], [0.3, 0.3], [4, 4], stats=STATS, name="x")[2], 8.0)
    # a run with an estimate but no error leaves the interval undefined rather than too short
    est, se, _ = independent_mean_interval([0.0, 1.0], [0.1, None], [4, 4], stats=STATS, name="x")
    assert est.estimate == 0.5 and all(math.isnan(c) for c in est.confidence_interval) and math.isnan(se)


def _file(values: np.ndarray) -> TrajectoryFile:
    """A per-file output whose window exponent is the mean over G groups with its t-interval (G - 1 df)."""
    G = values.size
    m, s = values.mean(), values.std(ddof=1) / math.sqrt(G)
    half = sps.t.ppf(0.5 + STATS.confidence_level / 2, G - 1) * s
    eff = {"estimate": m, "confidence_interval": [m - half, m + half]}
    return TrajectoryFile.from_result("run", "file.npy", {"n_groups": G, "effects": {"msd_exponent": dict(eff)},
                                                          "local_slopes": {"effect": eff}})


def test_run_and_claim_intervals_cover_the_mean_over_runs():
    """Runs are independent; a run's 4 files share its 5 groups (replica contrasts), strongly correlated. The claim's
    interval must cover the mean over runs of the files' expected exponents at least at its level."""
    rng = np.random.default_rng(0)
    truth = np.array([[0.5, 0.6, 0.7, 0.8], [1.2, 1.1, 1.0, 0.9], [2.0, 2.2, 2.4, 2.6]])  # run x file
    target, hits, n = truth.mean(), 0, 400
    for _ in range(n):
        runs = []
        for r in range(truth.shape[0]):
            shared = rng.normal(0, 0.2, 5)  # the run's groups move every file together
            files = [_file(truth[r, f] + shared + rng.normal(0, 0.05, 5)) for f in range(truth.shape[1])]
            est, se, df = _run_estimate(files, STATS)
            assert math.isclose(est.estimate, np.mean([f.exponent.estimate for f in files]))
            runs.append((est.estimate, se, df))
        est, _, _ = independent_mean_interval(*zip(*runs), stats=STATS, name="x")
        hits += est.confidence_interval[0] <= target <= est.confidence_interval[1]
    assert hits / n >= STATS.confidence_level - 2 * math.sqrt(0.05 * 0.95 / n)


def _file_cal(size: float, fitted: float | None) -> FileCalibration:
    return view(FileCalibration, {"shape": {"id": f"s{size}"}, "size": size, "size_upper": size + 0.05, "size_se": 0.01,
            "equivalence_power": 1.0, "power": {}, "power_lower": {}, "n_replicates": 40,
            "fitted": None if fitted is None else {"size": fitted, "size_upper": fitted + 0.07}})


def test_claim_calibration_carries_both_nulls_from_its_runs():
    """Files -> run -> claim: the worst size under each null and the count of files with a fitted null survive both
    poolings (the claim level once read only file-level records and reported no fitted null)."""
    from brownformer.stats.claims.claim3_brownian import _worst_calibration
    run_a = _worst_calibration([_file_cal(0.0, 0.0), _file_cal(0.02, 0.03)])
    run_b = _worst_calibration([_file_cal(0.01, None), _file_cal(0.0, 0.01), _file_cal(0.0, 0.0)])
    assert (run_a.size_fitted, run_a.n_fitted, run_a.n_files) == (0.03, 2, 2)
    assert (run_b.size_fitted, run_b.n_fitted, run_b.n_files) == (0.01, 2, 3)
    claim = _worst_calibration([run_a, run_b])
    assert claim.size_idealised == 0.02 and claim.size_fitted == 0.03
    assert (claim.n_fitted, claim.n_files, claim.n_shapes) == (4, 5, 2)
    none = _worst_calibration([_worst_calibration([_file_cal(0.0, None)])])
    assert none.size_fitted is None and (none.n_fitted, none.n_files) == (0, 1)
    # claims.json holds the record key for key, and reads back to it
    assert WorstCalibration.from_dict(claim.to_dict()) == claim
    assert list(claim.to_dict())[:4] == ["shape", "size", "size_upper", "size_se"]


def _seed_records(exponents, within_se: float) -> dict:
    """One configuration's runs (seeds s0, s1, ...): each run's window exponent with its own small SE."""
    from brownformer.statsfile import EffectResult
    from brownformer.verdicts import ClaimRecord
    from brownformer.stats.claims.details import Claim3RunDetails
    recs = {}
    for s, x in enumerate(exponents):
        est = EffectResult.headline("x", float(x), (x - 2 * within_se, x + 2 * within_se), STATS.confidence_level)
        recs[f"vit-pre__adamw__s{s}"] = ClaimRecord(
            "3c", "t", "inconclusive", "", estimate=est,
            details=Claim3RunDetails(files=[], n_brownian=0, n_not_brownian=0, n_files=0, pooling=None, pvalue=None,
                                     classifications={}, estimate_se=within_se, estimate_df=4.0,
                                     estimate_method="", spread_over_files=None))
    return recs


def test_claim_interval_is_over_seeds_and_covers_the_population_mean():
    """Issue 32: seeds are the unit. Each seed's exponent is a draw around the population mean (spread 0.08 between
    seeds) read with a small error of its own (0.01); a replication draws new seeds. The headline interval over 5
    seeds covers the population mean at its level and equals scipy's t-interval over the seeds' values; the runs'
    own errors alone (the interval before, the fallback below MIN_SEEDS seeds) would not cover it."""
    from brownformer.stats.claims.claim3_brownian import _pools_of, _runs_estimate, _seed_estimate
    rng = np.random.default_rng(1)
    mu, hits, hits_runs, n = 0.5, 0, 0, 300
    for _ in range(n):
        x = mu + rng.normal(0, 0.08, 5) + rng.normal(0, 0.01, 5)
        recs = _seed_records(x, 0.01)
        est, se, df, method = _seed_estimate(recs, _pools_of(recs, STATS), STATS, "")
        assert method.startswith("over seeds") and math.isclose(df, 4)
        assert np.allclose(est.confidence_interval,
                           sps.t.interval(STATS.confidence_level, 4, loc=x.mean(), scale=sps.sem(x)))
        hits += est.confidence_interval[0] <= mu <= est.confidence_interval[1]
        runs, _, _ = _runs_estimate(recs, STATS, "x")
        hits_runs += runs.confidence_interval[0] <= mu <= runs.confidence_interval[1]
    band = 2 * math.sqrt(0.05 * 0.95 / n)
    assert hits / n >= STATS.confidence_level - band
    assert hits_runs / n < 0.5  # the runs' own errors miss the spread between seeds


def test_claim_interval_without_enough_seeds_says_it_is_conditional_on_the_runs():
    from brownformer.stats.claims.claim3_brownian import _pools_of, _seed_estimate
    recs = _seed_records([0.4, 0.6], 0.01)  # 2 seeds < MIN_SEEDS
    est, se, _, method = _seed_estimate(recs, _pools_of(recs, STATS), STATS, "")
    assert "runs' own" in est.name and "not an interval over seeds" in method
    assert math.isclose(se, math.sqrt(2 * 0.01 ** 2) / 2)
