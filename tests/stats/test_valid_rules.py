"""Issue 19's valid rules: degenerate groupings, the Clopper-Pearson gates, margin edges, count pooling, fitted null."""
import json

import numpy as np
import pytest
from scipy import stats as sps

from brownformer.config import DEFAULT_MARGINS
from brownformer.stats.diffusion import edges
from brownformer.io import to_jsonable
from brownformer.stats.diffusion.brownian import trajectory_battery, battery_batch
from brownformer.stats.claims.claim_inputs import FileCalibration, view
from brownformer.stats.claims.claim3_brownian import _trustworthy
from brownformer.stats.diffusion.fitted_null import fit_null, simulate_fitted, storage_precision
from brownformer.stats.core.gates import POWER_GOAL, cp_bounds
from brownformer.stats.core.pooling import (independent_threshold, markov_threshold, poisson_binomial_tail)
from brownformer.stats.diffusion.rule import MIN_GROUPS
from brownformer.stats.diffusion.simulate import simulate, simulate_batch
from brownformer.stats_stage.trajectory_io import load_trajectory

ALPHA = 0.05
EDGE_SLACK = 0.15  # rate of "brownian" at a margin edge with 60 replicates: nominal 5%, ~2.5 SE slack


def test_one_group_is_inconclusive_with_a_reason_and_no_p_values():
    X = np.cumsum(np.random.default_rng(0).standard_normal((40, 64, 8)), 0)
    out = to_jsonable(trajectory_battery(X, kind="euclidean", groups=[0] * 64, n_resamples=99))
    assert out["verdict"] == "inconclusive" and "group" in out["reason"] and str(MIN_GROUPS) in out["reason"]
    keyed = {t["name"]: t for t in out["tests"]}
    for name in ("msd_exponent", "variance_ratio", "increment_autocorrelation", "gaussianity"):
        assert keyed[name]["pvalue"] is None and keyed[name]["rejected"] is False


def test_ou_with_grouped_walkers_is_rejected_with_a_finite_interval():
    X = simulate("ou", 60, 64, 4, rng=1)
    out = to_jsonable(trajectory_battery(X, kind="euclidean", n_inputs=8, n_tokens=8, n_resamples=199))
    lo, hi = out["msd_exponent"]["confidence_interval"]
    assert out["verdict"] == "not brownian" and np.isfinite(lo) and np.isfinite(hi) and hi < 0.9


@pytest.mark.parametrize("k,n", [(0, 40), (46, 50), (380, 400), (17, 30)])
def test_clopper_pearson_bounds_match_the_beta_quantiles(k, n):
    lo, hi = cp_bounds(k, n)
    exp_lo = 0.0 if k == 0 else sps.beta.ppf(0.05, k, n - k + 1)
    exp_hi = 1.0 if k == n else sps.beta.ppf(0.95, k + 1, n - k)
    assert lo == pytest.approx(exp_lo, abs=1e-9) and hi == pytest.approx(exp_hi, abs=1e-9)


def test_power_gate_reads_the_lower_bound_not_the_point_estimate():
    def cal(k, n, **more):  # the calibration at a file's shape, as the claim reads it (claim_inputs.view)
        lo, _ = cp_bounds(k, n)
        return view(FileCalibration, {"size": 0.0, "size_upper": 0.01, "power": {"clock_1.1": k / n},
                                      "power_lower": {"clock_1.1": lo}, **more})

    weak = cal(46, 50)  # point 0.92 > 0.9, but 46 of 50 does not show power above 0.9
    assert weak.power["clock_1.1"] > POWER_GOAL and not _trustworthy(weak, "brownian")[0]
    assert _trustworthy(weak, "not brownian")[0]  # a rejection rests on size only
    assert _trustworthy(cal(390, 400), "brownian")[0]
    big = view(FileCalibration, {"size": 0.05, "size_upper": 0.09, "power": {}, "power_lower": {}})
    assert not _trustworthy(big, "not brownian")[0]  # size gate on the upper bound too
    fitted_bad = {"size": 0.1, "size_upper": 0.2, "n_replicates": 40}
    assert not _trustworthy(cal(390, 400, fitted=fitted_bad), "not brownian")[0]


def _edge_rates(process, kind, n=60, **kw):
    times = np.unique(np.r_[np.round(np.geomspace(1, 300, 14)), np.arange(0, 301, 20)]).astype(float)
    labels = np.repeat(np.arange(12), 4) if kind == "euclidean" else np.repeat(np.arange(10), 4)
    X = simulate_batch(process, times=times, labels=labels, d=8, kind=kind, replicates=n, rng=3,
                       rho=0.2, hyperplane=False, drift="common", **kw)
    bat = battery_batch(X, kind=kind, times=times, labels=labels, margins=DEFAULT_MARGINS, alpha=ALPHA,
                        drift="common" if kind == "euclidean" else "none", hyperplane=False, n_resamples=199, rng=4)
    return np.mean(bat.verdicts == "brownian"), bat.stats


@pytest.mark.parametrize("process,test", [("vr_high", "variance_ratio"), ("vr_low", "variance_ratio"),
                                          ("acf_high", "increment_autocorrelation")])
def test_equivalence_size_at_euclidean_margin_edges_is_near_nominal(process, test):
    rate, st = _edge_rates(process, "euclidean")
    edge = edges.edge_value(process, DEFAULT_MARGINS)
    assert rate <= EDGE_SLACK
    assert np.nanmean(st[test].estimate) == pytest.approx(edge, abs=0.04)  # the process sits at the edge


def test_harmonic_edge_on_the_sphere():
    rate, st = _edge_rates("harmonic_low", "sphere", decay=1.0)
    assert rate <= EDGE_SLACK
    assert np.nanmean(st["harmonic_ratio"].estimate) == pytest.approx(0.9, abs=0.04)
    assert np.nanmean(st["msd_exponent"].estimate) == pytest.approx(1.0, abs=0.06)  # only the ratio moves


def test_poisson_binomial_tail_equals_the_binomial_when_sizes_are_equal():
    for k in range(0, 8):
        assert poisson_binomial_tail([0.07] * 6, k) == pytest.approx(sps.binom.sf(k - 1, 6, 0.07), abs=1e-12)


def test_count_rules_hold_their_size_by_simulation():
    rng = np.random.default_rng(5)
    sizes = rng.uniform(0.0, 0.04, 12)
    k, bound = markov_threshold(sizes, ALPHA)
    assert bound <= ALPHA and sum(sizes) / (k - 1 if k > 1 else 0.5) > ALPHA  # the smallest such k
    # least favourable dependence for Markov: files reject together, P(N >= k) as large as E[N] allows
    u = rng.random(200_000)
    comonotone = (u[:, None] < sizes[None]).sum(1)
    assert np.mean(comonotone >= k) <= bound + 3 * np.sqrt(bound / u.size)
    m, tail = independent_threshold(sizes, ALPHA)
    independent = (rng.random((200_000, sizes.size)) < sizes[None]).sum(1)
    assert np.mean(independent >= m) == pytest.approx(tail, abs=4 * np.sqrt(tail / 200_000) + 1e-4)
    assert tail <= ALPHA


@pytest.mark.parametrize("kind", ["euclidean", "sphere"])
def test_fitted_null_recovers_spread_rates_and_precision(kind):
    rng = np.random.default_rng(6)
    T, N, d = 30, 40, 8
    rates = np.repeat([0.3, 3.0], N // 2)  # 10x spread of diffusion rates
    if kind == "euclidean":
        X = np.cumsum(rng.standard_normal((T, N, d)) * np.sqrt(rates)[None, :, None], 0) + 50.0
        X = X.astype(np.float16).astype(np.float64)
    else:
        X = np.stack([simulate("brownian", T, 1, d, kind="sphere", rng=i)[:, 0] for i in range(N)], 1)
    labels = np.repeat(np.arange(10), 4)
    null = fit_null(X, kind=kind, times=np.arange(T, dtype=float), labels=labels, hyperplane=False, drift="common")
    if kind == "euclidean":
        assert null.storage == "float16"
        ratio = np.median(null.walker_scale[N // 2:]) ** 2 / np.median(null.walker_scale[: N // 2]) ** 2
        assert ratio == pytest.approx(10.0, rel=0.3)
    Y = simulate_fitted(null, replicates=3, rng=7)
    assert Y.shape == (3, T, N, d) and np.all(np.isfinite(Y))
    if kind == "euclidean":
        assert storage_precision(Y[0])[0] == "float16"


def test_user_array_output_records_clock_normalisation_and_missing_calibration(tmp_path):
    rng = np.random.default_rng(8)
    X = 3.0 * simulate("brownian", 12, 16, 5, kind="sphere", rng=9)
    np.save(tmp_path / "a.npy", X)
    (tmp_path / "a.json").write_text(json.dumps({"times": np.cumsum(rng.uniform(1, 2, 12)).tolist()}))
    _, meta = load_trajectory(tmp_path / "a.npy")
    assert meta.time == "times (unnamed clock)"
    out = to_jsonable(trajectory_battery(X, kind="sphere", times=meta.times, n_resamples=49))
    assert out["sphere_normalisation"]["rescaled_to_unit_length"] and "note" in out["sphere_normalisation"]
    assert out["calibration"] is None and out["calibration_note"].startswith("uncalibrated")


def test_calibrate_option_prints_a_cost_first_and_attaches_both_nulls(tmp_path):
    from brownformer.config import StatsConfig
    from brownformer.stats_stage.stages import stats_trajectory
    X = simulate_batch("brownian", times=np.arange(10.0), labels=np.repeat(np.arange(6), 3), d=2, kind="euclidean",
                       replicates=1, rng=0)[0]
    np.save(tmp_path / "x.npy", X)
    (tmp_path / "x.json").write_text(json.dumps({"time": "lr_sum", "times": list(range(10)),
                                                 "groups": np.repeat(np.arange(6), 3).tolist()}))
    said = []
    out = stats_trajectory(tmp_path / "x.npy", tmp_path / "x.out.json", calibrate=True, echo=said.append,
                           stats=StatsConfig(n_resamples=49, calibration_replicates=40))
    assert len(said) == 1 and "at most" in said[0] and " s " in said[0]
    assert out["time"] == "lr_sum" and out["calibration"]["n_replicates"] >= 40
    assert out["fitted_null"]["calibration"]["size_upper"] >= out["fitted_null"]["calibration"]["size"]
    assert out["rule_verdict"] in ("brownian", "not brownian", "inconclusive") and "calibration_note" not in out
