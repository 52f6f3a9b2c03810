"""The kurtosis margin: its simulated edges have the margin's population excess, and the battery's estimator reads
them (and Brownian walkers of different rates) without the bias of the sample kurtosis."""
import warnings

import numpy as np
import pytest
from scipy import stats as sps

from brownformer.config import DEFAULT_MARGINS
from brownformer.stats.diffusion import edges
from brownformer.stats.diffusion.battery import kurtosis
from brownformer.stats.core.bootstrap import ClusterBootstrap

N_DRAWS = 4_000_000  # t_16's sample kurtosis has sd ~ sqrt(mu_8 / n) ~ 0.03 here (mu_8 ~ 4200)


@pytest.mark.parametrize("side", [0, 1])
def test_simulated_kurtosis_edges_have_the_margin_as_population_excess(side):
    target = DEFAULT_MARGINS["excess_kurtosis"][side]
    x = edges._kurtotic((N_DRAWS,), target, np.random.default_rng(side))
    assert np.var(x) == pytest.approx(1.0, abs=0.01)
    assert sps.kurtosis(x) == pytest.approx(target, abs=0.1)


@pytest.mark.parametrize("process", ["kurtosis_low", "kurtosis_high"])
def test_grouped_edge_increments_keep_the_population_excess(process):
    """Shared and own parts both carry the law; their sum must still have the margin's excess."""
    labels = np.repeat(np.arange(50), 4)
    inc = edges.edge_increments(process, times=np.arange(101.0), labels=labels, d=2, replicates=100,
                                rng=np.random.default_rng(7), rho=0.3, drift="none", margins=DEFAULT_MARGINS)
    target = edges.edge_value(process, DEFAULT_MARGINS)
    assert sps.kurtosis(inc.ravel()) == pytest.approx(target, abs=0.1)


@pytest.mark.parametrize("side", [0, 1])
def test_battery_estimator_reads_the_edge_of_independent_walkers(side):
    """64 independent walkers, common drift removed: the estimate's mean sits at the population excess (the old
    per-step estimate read 0.36 for 0.5: a scale from 64 values shrinks a heavy tail)."""
    target = DEFAULT_MARGINS["excess_kurtosis"][side]
    rng = np.random.default_rng(11 + side)
    N = 64
    e = edges._kurtotic((30, 40, N, 8), target, rng).astype(np.float64)
    e -= e.mean(axis=2, keepdims=True)
    est = kurtosis(e, ClusterBootstrap(np.arange(N), n_resamples=5, rng=0), centred=True).estimate
    assert np.mean(est) == pytest.approx(target, abs=0.08)


def test_gaussian_walkers_of_rates_spread_over_10x_have_no_excess():
    """Each walker Gaussian at its own rate: one step's values over walkers are a scale mixture, which the per-walker
    standardisation undoes (without it the estimate is ~1.5 here)."""
    rng = np.random.default_rng(3)
    N = 64
    rates = np.exp(rng.uniform(0, np.log(10), N))
    e = rng.standard_normal((30, 40, N, 8)) * np.sqrt(rates)[None, None, :, None]
    e -= e.mean(axis=2, keepdims=True)
    est = kurtosis(e, ClusterBootstrap(np.arange(N), n_resamples=5, rng=0), centred=True).estimate
    assert abs(np.mean(est)) < 0.05


@pytest.mark.parametrize("side", [0, 1])
@pytest.mark.parametrize("N,T,d,G", [(200, 200, 1, 200), (128, 54, 8, 8), (64, 20, 4, 16)],
                         ids=["200x200-d1", "8groups-T54-d8", "16groups-T20-d4"])
def test_margin_edges_are_read_where_they_are_at_the_rules_shapes(side, N, T, d, G):
    """Issue 30: at 200 walkers x 200 times the old self-scaled estimator read +-0.5 as 0.42 / -0.47; with
    leave-one-out scales its mean over 40 simulated files sits at the edge, within 2.5 standard errors, at the
    issue's shape and at grouped shapes like the training files'."""
    target = DEFAULT_MARGINS["excess_kurtosis"][side]
    labels = np.repeat(np.arange(G), N // G)
    inc = edges.edge_increments("kurtosis_low" if side == 0 else "kurtosis_high", times=np.arange(float(T)),
                                labels=labels, d=d, replicates=40, rng=np.random.default_rng(1),
                                rho=0.3 if G < N else 0.0, drift="none", margins=DEFAULT_MARGINS).astype(np.float64)
    inc -= inc.mean(axis=2, keepdims=True)
    est = kurtosis(inc, ClusterBootstrap(labels, n_resamples=5, rng=0), centred=True).estimate
    se = np.std(est) / np.sqrt(est.size)
    assert abs(np.mean(est) - target) < max(2.5 * se, 0.02), (np.mean(est), se)


def _loo_reference(a, axes):
    """The leave-one-out scaling of battery.kurtosis's docstring, written out: s^2 = (sum of the set's squares - x^2)
    / (M - 1) over the set's finite values."""
    with np.errstate(all="ignore"):
        r = np.sqrt((np.nansum(a**2, axis=axes, keepdims=True) - a**2)
                    / (np.sum(np.isfinite(a), axis=axes, keepdims=True) - 1))
        return np.where(r > 0, a / r, np.nan)


@pytest.mark.parametrize("case", ["complete", "missing-walker-and-inf", "strided"])
def test_kurtosis_is_its_formula_with_and_without_missing_values(case):
    """The estimator is its formula, to the last bit (leave-one-out scales per walker, step and coordinate; nanmean
    moments; the quadratic solved for kappa) on float32 increments, also with a walker without increments and an
    infinite value (the general path of the sums), and on a transposed view (a trajectory's increments: the memory
    order fixes the order of the sums)."""
    rng = np.random.default_rng(3)
    R, n, N, m = 3, 12, 20, 4
    z = rng.standard_t(8, (R, n, N, m)).astype(np.float32)
    if case == "missing-walker-and-inf":
        z[1, :, 5] = np.nan
        z[2, 3, 7, 1] = np.inf
    if case == "strided":
        z = np.ascontiguousarray(z.transpose(3, 2, 1, 0)).transpose(3, 2, 1, 0).astype(np.float64)
    labels = np.arange(N) // 4
    got = kurtosis(z, ClusterBootstrap(labels, n_resamples=50, rng=0))
    w = _loo_reference(_loo_reference(_loo_reference(z, (1, 3)), (2, 3)), (1, 2))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the walker without increments: an all-NaN slice
        F = np.stack([np.nanmean(w**2, axis=(1, 3)), np.nanmean((w**2) ** 2, axis=(1, 3))], -1)
    c = 1 / (n * m - 1) + 1 / (N * m - 1) + 1 / (N * n - 1)

    def excess(mm):
        g = mm[..., 1] / mm[..., 0] ** 2 - 3.0
        return (-(1 + 5 * c) + np.sqrt(np.maximum((1 + 5 * c) ** 2 - 4 * c * (6 * c - g), 0.0))) / (2 * c) / 1.0

    want = ClusterBootstrap(labels, n_resamples=50, rng=0).estimate(F, excess)
    assert np.isfinite(want.estimate[[0, 2]]).all()  # the infinite value is left out; a NaN walker voids its replicate
    np.testing.assert_array_equal(got.estimate, want.estimate)
    np.testing.assert_array_equal(got.boot.standard_error, want.standard_error)
