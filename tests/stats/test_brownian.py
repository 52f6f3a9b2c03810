"""Estimators of the Brownian battery against simulated processes with known answers, and bad input."""
import numpy as np
import pytest
from scipy import stats

from brownformer.stats.core.bootstrap import ClusterBootstrap, group_labels
from brownformer.io import to_jsonable
from brownformer.stats.diffusion.brownian import trajectory_battery
from brownformer.stats.diffusion.descriptive import drift_test, hill_estimator
from brownformer.stats.diffusion.simulate import simulate, simulate_batch

EXPONENT_TOL = 0.05  # |alpha_hat - alpha| at (T=40, N=256, d=8)
LOG_TIMES_TOL = 0.1  # issue 10: Brownian motion at log-spaced times gets exponent 1 +- 0.1
D_REL_TOL = 0.05
HURST_TOL = 0.08
LOG_TIMES = np.r_[0.0, np.geomspace(1, 1000, 20)]


def _test(out, name):
    return next(t for t in out["tests"] if t["name"] == name)


@pytest.fixture(scope="module")
def bm():
    return to_jsonable(trajectory_battery(simulate("brownian", 40, 256, 8, rng=1), kind="euclidean", rng=0,
                                          n_resamples=199))


def test_bm_euclidean_exponent_D_and_contract_fields(bm):
    e = bm["msd_exponent"]
    ci = e["confidence_interval"]
    assert abs(e["estimate"] - 1) < EXPONENT_TOL and ci[0] < 1 < ci[1]
    assert e["tost_interval"][0] > ci[0]  # the 90% TOST interval sits inside the 95% one
    # unit-variance increments per coordinate: MSD = d t = 2 d D t -> D = 1/2
    assert abs(bm["diffusion_coefficient"]["estimate"] / 0.5 - 1) < D_REL_TOL
    assert bm["verdict"] == "brownian" and bm["brownian"] is True and bm["classification"] == "brownian"
    for key in ("kind", "n_times", "n_walkers", "dim", "tests", "classification", "verdict", "reason"):
        assert key in bm
    assert {"name", "statistic", "pvalue", "confidence_interval", "rejected"} <= set(bm["tests"][0])


@pytest.mark.parametrize("kind", ["euclidean", "sphere"])
def test_brownian_motion_at_log_spaced_times(kind):
    X = simulate_batch("brownian", times=LOG_TIMES, labels=np.arange(200), d=16, kind=kind, replicates=1, rng=2,
                       decay=0.5)[0]
    out = to_jsonable(trajectory_battery(X, kind=kind, times=LOG_TIMES, n_resamples=99))
    assert abs(out["msd_exponent"]["estimate"] - 1) < LOG_TIMES_TOL


def test_common_drift_is_removed_but_reported():
    out = to_jsonable(trajectory_battery(simulate("drift", 40, 256, 8, rng=2), kind="euclidean", rng=0,
                                         n_resamples=199))
    assert abs(out["msd_exponent"]["estimate"] - 1) < EXPONENT_TOL
    assert _test(out, "drift")["rejected"] and _test(out, "drift")["estimate"] > 0.5


def test_per_walker_drift_leaves_a_brownian_bridge_that_is_corrected():
    """Each walker its own drift (weights' rows): removing it exactly leaves a Brownian bridge, whose MSD
    s^2 t (1 - t/L) the bridge factor turns back into s^2 t."""
    rng = np.random.default_rng(3)
    X = simulate("brownian", 40, 200, 8, rng=3) + rng.normal(0, 2, (1, 200, 8)) * np.arange(40)[:, None, None]
    common = to_jsonable(trajectory_battery(X, kind="euclidean", drift="common", n_resamples=99))
    own = to_jsonable(trajectory_battery(X, kind="euclidean", drift="per_walker", n_resamples=99))
    assert common["msd_exponent"]["estimate"] > 1.5
    assert abs(own["msd_exponent"]["estimate"] - 1) < EXPONENT_TOL and own["verdict"] == "brownian"


@pytest.mark.parametrize("hurst", [0.3, 0.7])
def test_fbm_exponent_and_hurst(hurst):
    out = to_jsonable(trajectory_battery(simulate(f"fbm_{hurst}", 40, 256, 8, rng=3), kind="euclidean", rng=0,
                                         n_resamples=199))
    assert abs(out["msd_exponent"]["estimate"] - 2 * hurst) < 2 * EXPONENT_TOL
    assert abs(_test(out, "hurst")["estimate"] - hurst) < HURST_TOL
    assert out["verdict"] == "not brownian"
    assert out["classification"] == ("subdiffusive" if hurst < 0.5 else "superdiffusive")


@pytest.mark.parametrize("process,expected", [("ou", {"mean-reverting"}), ("stable_1.5", {"heavy-tailed"}),
                                              ("correlated", {"correlated", "superdiffusive"})])
def test_alternatives_classified(process, expected):
    out = to_jsonable(trajectory_battery(simulate(process, 40, 256, 8, rng=4), kind="euclidean", rng=0,
                                         n_resamples=199))
    assert not out["brownian"] and out["classification"] in expected


def test_layernorm_sphere_uses_its_intrinsic_dimension():
    """On S^(d-2) (LayerNorm's hyperplane) E<u_0, u_t> = exp(-(d-2) D t); the ambient d would bias D by 1/(d-2)."""
    d, decay = 8, 1.0
    times = np.arange(30, dtype=float)
    X = simulate_batch("brownian", times=times, labels=np.arange(400), d=d, kind="sphere", replicates=1, rng=5,
                       hyperplane=True, decay=decay)[0]
    out = to_jsonable(trajectory_battery(X, kind="sphere", times=times, n_resamples=99))
    assert out["hyperplane"] and out["span_dimension"] == d - 1
    true_D = decay / (d - 2) / (times[-1] - times[0])
    assert abs(out["diffusion_coefficient"]["estimate"] / true_D - 1) < 2 * D_REL_TOL
    assert abs(_test(out, "harmonic_ratio")["estimate"] - 1) < 0.1 and out["verdict"] == "brownian"
    g = out["curves"]["gram_offdiagonal"]
    assert len(g) == 30 and abs(g[0]) < 0.05


def test_groups_from_sidecar_fields():
    assert group_labels(6, n_inputs=2, n_tokens=3).tolist() == [0, 0, 0, 1, 1, 1]
    assert group_labels(4, groups=[7, 7, 2, 2]).tolist() == [1, 1, 0, 0]
    with pytest.raises(ValueError, match="n_inputs"):
        group_labels(7, n_inputs=2, n_tokens=3)
    out = to_jsonable(trajectory_battery(simulate("brownian", 12, 40, 4, rng=6), kind="euclidean", n_inputs=8,
                                         n_tokens=5,
                                         n_resamples=49))
    assert out["n_groups"] == 8 and all(_test(out, t)["n"] == 8 for t in out["key_effects"])  # groups resampled


def test_cluster_bootstrap_of_singletons_matches_scipy_standard_error():
    x = np.random.default_rng(9).exponential(size=200)
    ours = ClusterBootstrap(np.arange(200), n_resamples=4000, rng=1).estimate(x, lambda m: m[..., 0])
    ref = stats.bootstrap((x,), np.mean, n_resamples=4000, method="percentile", rng=2).standard_error
    assert ours.standard_error[0] == pytest.approx(ref, rel=0.05)


def test_hill_estimator_on_pareto():
    x = stats.pareto.rvs(1.5, size=200_000, random_state=7)
    assert abs(hill_estimator(x, 2000) - 1.5) < 0.1


def test_drift_test_equals_statsmodels_hotelling():
    from statsmodels.stats.multivariate import test_mvmean
    disp = np.random.default_rng(10).normal(0.3, 1, (40, 3))
    ours = drift_test(disp, np.arange(40), rng=0)
    ref = test_mvmean(disp, np.zeros(3))
    assert ours.statistic == pytest.approx(float(ref.statistic)) and ours.pvalue == pytest.approx(float(ref.pvalue))


@pytest.mark.parametrize("make", [
    lambda r: np.ones((12, 16, 3)),  # constant: no increments to test
    lambda r: r.standard_normal((12, 16, 1)).cumsum(0),  # d = 1
    lambda r: np.repeat(r.standard_normal((1, 16, 3)), 12, 0) + 1e-300,  # still constant up to rounding
], ids=["constant", "d1", "constant-rounding"])
def test_degenerate_input_is_inconclusive_or_decided_without_a_crash(make):
    out = to_jsonable(trajectory_battery(make(np.random.default_rng(11)), kind="euclidean", n_resamples=49))
    assert out["verdict"] in ("inconclusive", "not brownian", "brownian") and out["reason"]
    if np.ptp(make(np.random.default_rng(11))) == 0:
        assert out["verdict"] == "inconclusive" and not out["brownian"]


@pytest.mark.parametrize("shape,kind,match", [((12, 3, 4), "euclidean", "4 walkers"), ((2, 16, 4), "euclidean", "3 time"),
                                              ((12, 16, 1), "sphere", "d >= 2"), ((12, 16, 4), "torus", "kind")])
def test_bad_input_refused_with_a_message(shape, kind, match):
    with pytest.raises(ValueError, match=match):
        to_jsonable(trajectory_battery(np.random.default_rng(0).standard_normal(shape), kind=kind))


def test_all_nan_column_refused():
    X = np.random.default_rng(0).standard_normal((6, 8, 3))
    X[..., 1] = np.nan
    with pytest.raises(ValueError, match=r"dimension\(s\) \[1\]"):
        to_jsonable(trajectory_battery(X, kind="euclidean"))


@pytest.mark.parametrize("labels", [np.repeat(np.arange(6), 10), np.tile(np.arange(6), 10),
                                    np.repeat(np.arange(6), [4, 8, 10, 12, 12, 14])],
                         ids=["consecutive-equal", "interleaved", "unequal"])
def test_simulated_increments_have_the_within_group_correlation(labels):
    """Walkers of one group share sqrt(rho) of their noise, whatever the layout of the groups: the increments'
    correlation between two walkers of one group is rho, between groups 0."""
    rho = 0.4
    X = simulate_batch("brownian", times=np.arange(41.0), labels=labels, d=4, kind="euclidean", replicates=50,
                       rng=3, rho=rho)
    inc = np.diff(X, axis=1).transpose(2, 0, 1, 3).reshape(labels.size, -1)  # (N, R T d)
    c = np.corrcoef(inc)
    same = labels[:, None] == labels[None, :]
    off = ~np.eye(labels.size, dtype=bool)
    assert c[same & off].mean() == pytest.approx(rho, abs=0.03)
    assert c[~same].mean() == pytest.approx(0.0, abs=0.03)
