"""Where scipy, statsmodels or arch compute the same thing, compare on fixed data."""
import numpy as np
import pytest
from scipy import stats

from brownformer.stats.diffusion.battery import autocorrelation, kurtosis, levels, variance_ratio
from brownformer.stats.core.bootstrap import ClusterBootstrap
from brownformer.stats.diffusion.descriptive import hill_estimator, normality_test
from brownformer.stats.sphere.sphere_distance import sphere_geometry

EXACT = 1e-10  # the same formula evaluated two ways


def _copies(x, n=4):
    """One series as n identical walkers, shape (1, T, n, 1): pooled statistics are unchanged by copies."""
    return np.repeat(np.asarray(x, float)[None, :, None, None], n, axis=2)


def test_variance_ratio_equals_arch_up_to_the_overlap_count():
    """arch divides the sum of the nq - q + 1 overlapping q-differences by nq q; we average them. Same
    demeaning (mu = (y_T - y_0)/nq, our per-walker drift with unit spacing), so ours = arch.vr * nq/(nq - q + 1)."""
    from arch.unitroot import VarianceRatio
    y = np.cumsum(np.random.default_rng(8).standard_normal(400))
    times = np.arange(y.size, dtype=float)
    Y, _, _ = levels(_copies(y), times, "per_walker")
    boot = ClusterBootstrap(np.arange(4), n_resamples=5, rng=0)
    ours = variance_ratio(Y, times, lambda dlt: np.ones_like(np.asarray(dlt, float)), boot)
    q = ours.extra["q"]
    ref = VarianceRatio(y, lags=q, trend="c", debiased=False, robust=False, overlap=True).vr
    nq = y.size - 1
    assert ours.estimate[0] == pytest.approx(ref * nq / (nq - q + 1), rel=EXACT)


def test_pooled_acf_equals_statsmodels_adjusted_acf():
    """Ours: rho_k = [sum_t z_t z_{t+k}/(n-k)] / [sum_t z_t^2/n] = statsmodels acf(adjusted=True) on a demeaned series."""
    from statsmodels.tsa.stattools import acf
    x = np.random.default_rng(3).standard_normal(300)
    x[1:] += 0.3 * x[:-1]
    x -= x.mean()
    res = autocorrelation(_copies(x), ClusterBootstrap(np.arange(4), n_resamples=5, rng=0))
    np.testing.assert_allclose(res.extra["acf"][0], acf(x, adjusted=True, nlags=5, fft=False)[1:], rtol=EXACT)


def test_kurtosis_moments_are_scipys_and_normaltest_is_scipys():
    z = stats.t.rvs(6, size=400, random_state=4)
    z -= z.mean()
    # walker i at step t holds z[(t + i) % n]: every walker and every step holds the same values, so each
    # leave-one-out scale maps a value x to x / sqrt((sum of the set's squares - x^2)/(M - 1)) whatever its set, and
    # the pooled m4/m2^2 - 3 is that of scipy's raw moments of z passed through the three maps (M = n, n, n^2, the
    # last set holding every value n times); the estimate is the root of c k^2 + (1 + 5c) k + (6c - g) = 0
    n = z.size
    e = z[(np.arange(n)[:, None] + np.arange(n)[None, :]) % n][None, :, :, None]
    res = kurtosis(e, ClusterBootstrap(np.arange(n) % 10, n_resamples=5, rng=0))
    w = z.copy()
    for M, copies in ((n, 1), (n, 1), (n * n, n)):
        w = w / np.sqrt((copies * np.sum(w**2) - w**2) / (M - 1))
    g = stats.moment(w, order=4, center=0) / stats.moment(w, order=2, center=0) ** 2 - 3  # raw moments: z has mean 0
    c = 2 / (n - 1) + 1 / (n * n - 1)
    ref = (-(1 + 5 * c) + np.sqrt((1 + 5 * c) ** 2 - 4 * c * (6 * c - g))) / (2 * c)
    assert res.estimate[0] == pytest.approx(ref, rel=1e-6)
    z = stats.t.rvs(6, size=2000, random_state=4)
    ref = stats.normaltest(z)
    nt = normality_test(z)
    assert nt.statistic == pytest.approx(ref.statistic, rel=EXACT) and nt.pvalue == pytest.approx(ref.pvalue, rel=EXACT)


def test_hill_estimator_equals_the_direct_formula_and_recovers_pareto_index():
    alpha, k = 1.5, 2000
    x = stats.pareto.rvs(alpha, size=100_000, random_state=7)
    top = np.sort(x)[::-1]
    direct = 1.0 / np.mean(np.log(top[:k] / top[k]))
    assert hill_estimator(x, k) == pytest.approx(direct, rel=EXACT)
    assert abs(direct - alpha) < 3 * alpha / np.sqrt(k)  # Hill's standard error alpha / sqrt(k)


def test_sphere_geometry_matches_scipy_variation_and_direct_offset():
    rng = np.random.default_rng(5)
    z = rng.standard_normal((1, 200, 6)) * rng.uniform(0.5, 2, 6) + 0.7
    g = sphere_geometry(z, n_resamples=9)
    norms = np.linalg.norm(z[0], axis=-1)
    assert g.per_layer.radius_cv.estimate[0] == pytest.approx(stats.variation(norms), rel=1e-8)
    assert g.per_layer.mean_offset.estimate[0] == pytest.approx(np.linalg.norm(z[0].mean(0)) / np.sqrt(6),
                                                                         rel=1e-10)


def test_kurtosis_of_gaussian_walkers_is_centred():
    """The shrinkage added back makes Gaussian increments read 0 at small and large walker counts, with and without
    the common drift removed."""
    for n in (16, 64):
        e = np.random.default_rng(n).standard_normal((1, 1000, n, 8))
        res = kurtosis(e, ClusterBootstrap(np.arange(n), n_resamples=5, rng=0))
        assert abs(res.estimate[0]) < 0.05, n
        centred = e - e.mean(axis=2, keepdims=True)  # common drift removed
        res = kurtosis(centred, ClusterBootstrap(np.arange(n), n_resamples=5, rng=0), centred=True)
        assert abs(res.estimate[0]) < 0.05, n
