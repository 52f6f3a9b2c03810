"""Estimators of the Brownian battery against simulated processes with known answers."""
import numpy as np
import pytest
from scipy import stats

from brownformer.stats import analyze_trajectory, simulate
from brownformer.stats.battery import hill_estimator
from brownformer.stats.bootstrap import WalkerBootstrap
from brownformer.stats.simulate import spherical_brownian_motion

EXPONENT_TOL = 0.05  # |alpha_hat - alpha| on (T=40, N=256, d=8)
D_REL_TOL = 0.05
HURST_TOL = 0.08


def _test(out, name):
    return next(t for t in out["tests"] if t["name"] == name)


@pytest.fixture(scope="module")
def bm():
    return analyze_trajectory(simulate("brownian", 40, 256, 8, rng=1), kind="euclidean", rng=0, n_resamples=199)


def test_bm_euclidean_exponent_and_D(bm):
    e = bm["msd_exponent"]
    assert abs(e["estimate"] - 1) < EXPONENT_TOL and e["ci"][0] < 1 < e["ci"][1]
    # unit-variance increments per coordinate: MSD = d t = 2 d D t -> D = 1/2
    assert abs(bm["diffusion_coefficient"] / 0.5 - 1) < D_REL_TOL
    assert bm["classification"] == "brownian" and bm["brownian"] is True
    for key in ("kind", "n_times", "n_walkers", "dim", "tests", "classification"):
        assert key in bm


def test_drift_is_removed_but_reported():
    X = simulate("drift", 40, 256, 8, rng=2)
    out = analyze_trajectory(X, kind="euclidean", rng=0, n_resamples=199)
    assert abs(out["msd_exponent"]["estimate"] - 1) < EXPONENT_TOL
    assert _test(out, "drift")["reject"] and out["classification"] == "superdiffusive"


@pytest.mark.parametrize("hurst", [0.3, 0.7])
def test_fbm_exponent_and_hurst(hurst):
    out = analyze_trajectory(simulate(f"fbm_{hurst}", 40, 256, 8, rng=3), kind="euclidean", rng=0, n_resamples=199)
    assert abs(out["msd_exponent"]["estimate"] - 2 * hurst) < 2 * EXPONENT_TOL
    assert abs(_test(out, "hurst")["estimate"] - hurst) < HURST_TOL
    assert out["classification"] == ("subdiffusive" if hurst < 0.5 else "superdiffusive")


@pytest.mark.parametrize("process,expected", [("ou", "mean-reverting"), ("stable_1.5", "heavy-tailed"),
                                              ("correlated", {"correlated", "superdiffusive"})])
def test_alternatives_classified(process, expected):
    out = analyze_trajectory(simulate(process, 40, 256, 8, rng=4), kind="euclidean", rng=0, n_resamples=199)
    assert not out["brownian"]
    assert out["classification"] in (expected if isinstance(expected, set) else {expected})


def test_spherical_bm_recovers_D_and_laws():
    D = 0.01
    U = spherical_brownian_motion(30, 400, 8, diffusion=D, rng=5)
    out = analyze_trajectory(U, kind="sphere", rng=0, n_resamples=199)
    assert abs(out["diffusion_coefficient"] / D - 1) < 2 * D_REL_TOL
    assert abs(out["msd_exponent"]["estimate"] - 1) < EXPONENT_TOL
    assert abs(_test(out, "harmonic_ratio")["estimate"] - 1) < 0.1
    assert out["brownian"]
    g = out["curves"]["gram_offdiagonal"]
    assert len(g) == 30 and abs(g[0]) < 0.05


def test_sphere_uses_nonuniform_times():
    D, times = 0.02, np.array([0, 1, 2, 4, 8, 16], float)
    U = spherical_brownian_motion(6, 400, 8, diffusion=D, rng=6, times=times)
    out = analyze_trajectory(U, kind="sphere", times=times, rng=0, n_resamples=199)
    assert abs(out["diffusion_coefficient"] / D - 1) < 2 * D_REL_TOL


def test_hill_estimator_on_pareto():
    alpha = 1.5
    x = stats.pareto.rvs(alpha, size=200_000, random_state=7)
    assert abs(hill_estimator(x, 2000) - alpha) < 0.1


def test_walker_bootstrap_matches_scipy_percentile():
    x = np.random.default_rng(9).exponential(size=200)
    ours = WalkerBootstrap(200, n_resamples=4000, rng=1).estimate(x, lambda m: m[..., 0])
    ref = stats.bootstrap((x,), np.mean, n_resamples=4000, method="percentile", rng=2).confidence_interval
    assert np.allclose(ours.confidence_interval, (ref.low, ref.high), atol=0.02)


def test_subsampling_and_depth_shape_fast_enough_to_run():
    X = simulate("brownian", 4, 700, 32, kind="sphere", rng=10)
    out = analyze_trajectory(X, kind="sphere", max_walkers=300, rng=0, n_resamples=99)
    assert out["n_walkers"] == 300 and out["n_walkers_total"] == 700


def test_bad_kind_refused():
    with pytest.raises(ValueError, match="kind"):
        analyze_trajectory(np.ones((4, 3, 2)), kind="torus")


def test_supplements_do_not_change_the_battery():
    X = simulate("brownian", 12, 64, 4, rng=11)
    on = analyze_trajectory(X, kind="euclidean", rng=0, n_resamples=49)
    off = analyze_trajectory(X, kind="euclidean", rng=0, n_resamples=49, supplements=False)
    assert on["tests"] == off["tests"] and off["supplements"] == {}
    assert on["supplements"]["arch_variance_ratio"]["n_walkers"] == 16
