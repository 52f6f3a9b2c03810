"""STYLE.md 7: where scipy, statsmodels or arch compute the same thing, compare on fixed data."""
import numpy as np
import pytest
from scipy import stats

from brownformer.stats.battery import (_pooled_acf_test, arch_variance_ratio, gaussianity_test, hill_estimator,
                                       lagged_msd, variance_ratio)
from brownformer.stats.bootstrap import WalkerBootstrap
from brownformer.stats.sphere import sphere_geometry

EXACT = 1e-10  # the same formula evaluated two ways


def _two_copies(x):
    """One series as two identical walkers (our pooled statistics need N >= 2; copies leave them unchanged)."""
    return np.stack([x, x], axis=1)


def test_variance_ratio_equals_arch_up_to_the_overlap_count():
    """arch divides the sum of the nq - q + 1 overlapping q-differences by nq q; we average them (divide
    by (nq - q + 1) q). Same demeaning (mu = (y_T - y_0)/nq), so ours = arch.vr * nq / (nq - q + 1) exactly."""
    from arch.unitroot import VarianceRatio
    y = np.cumsum(np.random.default_rng(8).standard_normal(400))
    for q in (2, 4, 8):
        inc = np.diff(y) - np.diff(y).mean()
        Y = np.concatenate([[0.0], np.cumsum(inc)])[:, None, None]  # (T, 1, 1) drift-removed levels
        times = np.arange(Y.shape[0], dtype=float)
        num, den = lagged_msd(Y, times, q), lagged_msd(Y, times, 1)  # as _euclidean_part calls it
        ours = variance_ratio(np.r_[num, num], np.r_[den, den], WalkerBootstrap(2, n_resamples=5, rng=0), q=q).estimate
        ref = VarianceRatio(y, lags=q, trend="c", debiased=False, robust=False, overlap=True).vr
        nq = y.size - 1
        assert ours == pytest.approx(ref * nq / (nq - q + 1), rel=EXACT)


def test_pooled_acf_equals_statsmodels_adjusted_acf_and_ljung_box():
    """Ours: rho_k = [sum_t e_t e_{t+k}/(n-k)] / [sum_t e_t^2/n] = statsmodels acf(adjusted=True) on a demeaned
    series; rescaled by (n-k)/n it is the plain acf, and Ljung-Box Q = n(n+2) sum rho_k^2/(n-k) matches."""
    from statsmodels.stats.diagnostic import acorr_ljungbox
    from statsmodels.tsa.stattools import acf
    rng = np.random.default_rng(3)
    x = rng.standard_normal(300)
    x[1:] += 0.3 * x[:-1]  # some autocorrelation to compare
    x -= x.mean()
    h, n = 5, x.size
    res = _pooled_acf_test(_two_copies(x)[..., None], h, WalkerBootstrap(2, n_resamples=5, rng=0), "acf", "x")
    ours = np.array(res.extra["acf"])
    np.testing.assert_allclose(ours, acf(x, adjusted=True, nlags=h, fft=False)[1:], rtol=EXACT)
    k = np.arange(1, h + 1)
    plain = ours * (n - k) / n
    np.testing.assert_allclose(plain, acf(x, nlags=h, fft=False)[1:], rtol=EXACT)
    lb = n * (n + 2) * np.sum(plain**2 / (n - k))
    assert lb == pytest.approx(acorr_ljungbox(x, lags=[h])["lb_stat"].iloc[0], rel=EXACT)


def test_hill_estimator_equals_the_direct_formula_and_recovers_pareto_index():
    alpha, k = 1.5, 2000
    x = stats.pareto.rvs(alpha, size=100_000, random_state=7)
    top = np.sort(x)[::-1]
    direct = 1.0 / np.mean(np.log(top[:k] / top[k]))
    assert hill_estimator(x, k) == pytest.approx(direct, rel=EXACT)
    assert abs(direct - alpha) < 3 * alpha / np.sqrt(k)  # Hill's standard error alpha / sqrt(k)


def test_gaussianity_uses_scipy_normaltest_and_kurtosis():
    z = stats.t.rvs(6, size=2000, random_state=4)
    z = (z - z.mean()) / z.std()
    mom = np.array([[np.mean(z**2), np.mean(z**4)]] * 2)  # one walker's moments, as two copies
    res = gaussianity_test(z, mom, WalkerBootstrap(2, n_resamples=5, rng=0))
    ref = stats.normaltest(z)
    assert res.statistic == pytest.approx(ref.statistic, rel=EXACT) and res.pvalue == pytest.approx(ref.pvalue, rel=EXACT)
    assert res.estimate == pytest.approx(stats.kurtosis(z, fisher=True, bias=True), rel=1e-8)


def test_sphere_geometry_matches_scipy_variation_and_direct_offset():
    rng = np.random.default_rng(5)
    z = rng.standard_normal((1, 200, 6)) * rng.uniform(0.5, 2, 6) + 0.7
    g = sphere_geometry(z, n_resamples=9)
    norms = np.linalg.norm(z[0], axis=-1)
    assert g["per_layer"]["radius_cv"]["estimate"][0] == pytest.approx(stats.variation(norms), rel=1e-8)
    assert g["per_layer"]["mean_offset"]["estimate"][0] == pytest.approx(np.linalg.norm(z[0].mean(0)) / np.sqrt(6),
                                                                         rel=1e-10)


def test_arch_supplement_is_one_arch_call_per_walker():
    from arch.unitroot import VarianceRatio
    rng = np.random.default_rng(6)
    E = rng.standard_normal((30, 4, 3)) * np.array([3.0, 1.0, 0.5])  # top PC ~ first axis
    Y = np.concatenate([np.zeros((1, 4, 3)), np.cumsum(E, 0)])
    out = arch_variance_ratio(Y, E, 4, rng=0)
    direction = np.linalg.svd(E.reshape(-1, 3) - E.reshape(-1, 3).mean(0), full_matrices=False)[2][0]
    ref = [VarianceRatio(Y[:, i] @ direction, lags=4, trend="c", debiased=True, robust=True).vr for i in range(4)]
    assert out["available"] and out["vr"] == pytest.approx(ref, rel=EXACT)
