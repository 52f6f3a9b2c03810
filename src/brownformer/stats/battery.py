"""Component tests of the Brownian battery, each on prepared arrays, each a TestResult.

Notation: increments e (n, N, d) = (steps, walkers, dims), already drift-removed and divided
by sqrt(dt) so that under the null they are i.i.d. over steps within a walker. Walkers are
independent; tests pool over walkers through walker means, and standard errors come from
the walker-level spread (delta method or the shared WalkerBootstrap). STATISTICS.md 2.b.
"""
from __future__ import annotations

import functools

import numpy as np
from scipy import stats
from statsmodels.stats.multivariate import test_mvmean

from .bootstrap import WalkerBootstrap
from .results import TestResult

__all__ = ["log_slope", "msd_exponent", "lagged_msd", "variance_ratio", "hurst_from_vr", "autocorrelation_test",
           "volatility_test", "gaussianity_test", "hill_estimator", "tail_test", "isotropy_test",
           "drift_test", "default_vr_lag", "p_two_sided", "arch_variance_ratio"]


def p_two_sided(z: float) -> float:
    return float(2 * stats.norm.sf(abs(z))) if np.isfinite(z) else np.nan


def log_slope(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """OLS slope of log y on log x along the last axis (broadcasts over leading axes)."""
    lx = np.log(x)
    ly = np.log(y)
    lxc = lx - lx.mean()
    return ((ly - ly.mean(axis=-1, keepdims=True)) * lxc).sum(axis=-1) / (lxc**2).sum()


def default_vr_lag(n_steps: int) -> int:
    """q for the variance ratio: 8 when there is room (Lo & MacKinlay 1988 use 2..16), at least 2."""
    return int(max(2, min(8, n_steps // 4, n_steps)))


def msd_exponent(sq_disp: np.ndarray, tau: np.ndarray, boot: WalkerBootstrap, *, name="msd_exponent",
                 dim: int = 1) -> tuple[TestResult, TestResult, dict]:
    """MSD exponent and diffusion coefficient from displacements since t_0.

    MSD(tau) = mean_i |X_i(tau) - X_i(0)|^2 = 2 d D tau^a for Brownian motion (a = 1). The
    exponent is the OLS slope of log MSD on log tau over all lags; D is the least-squares fit
    of MSD = 2 d D tau through the origin. H0: a = 1, Wald test with the bootstrap SE.

    Args:
        sq_disp: (N, n) squared displacements per walker and lag.
        tau: (n,) elapsed times.
    """
    est = boot.estimate(sq_disp, lambda m: log_slope(tau, m))
    z = est.z(1.0)
    exp_res = TestResult(name, z, p_two_sided(z), est.estimate, est.confidence_interval, boot.confidence_level,
                         "OLS slope of log MSD on log t; Wald z with walker-bootstrap SE; H0 exponent = 1",
                         boot.n, 1.0)
    dest = boot.estimate(sq_disp, lambda m: (m * tau).sum(axis=-1) / (2 * dim * (tau**2).sum()))
    d_res = TestResult("diffusion_coefficient", np.nan, np.nan, dest.estimate, dest.confidence_interval,
                       boot.confidence_level, "least squares MSD = 2 d D t through the origin", boot.n)
    m = sq_disp.mean(axis=0)
    half = max(2, (len(tau) + 1) // 2)
    curv = {"early_slope": float(log_slope(tau[:half], m[:half])) if half >= 2 else np.nan,
            "late_slope": float(log_slope(tau[half - 1:], m[half - 1:])) if len(tau) - half + 1 >= 2 else np.nan,
            "msd": m.tolist(), "tau": tau.tolist()}
    return exp_res, d_res, curv


def lagged_msd(Y: np.ndarray, times: np.ndarray, q: int) -> np.ndarray:
    """(N,) per-walker time-averaged q-step squared displacement per unit time of levels Y (T, N, d):
    mean_t |Y_{t+q} - Y_t|^2 / (t_{t+q} - t_t), over the T - q overlapping pairs."""
    return np.mean(np.sum((Y[q:] - Y[:-q]) ** 2, -1) / (times[q:] - times[:-q])[:, None], axis=0)


def variance_ratio(num: np.ndarray, den: np.ndarray, boot: WalkerBootstrap, *, q: int) -> TestResult:
    """Lo-MacKinlay variance ratio VR(q) pooled over walkers.

    VR(q) = [sum |X_{t+q} - X_t|^2 / (q dt)] / [sum |X_{t+1} - X_t|^2 / dt] with overlapping
    q-step differences of the drift-removed levels; VR = 1 for Brownian motion, > 1 for
    persistence, < 1 for mean reversion (Lo & MacKinlay 1988; arch.unitroot.VarianceRatio with
    overlap=True, debiased=False computes the same for one series). Wald z with walker-bootstrap SE.

    Args:
        num, den: (N,) per-walker mean normalised q-step and 1-step squared displacements.
    """
    est = boot.estimate(np.stack([num, den], axis=1), lambda m: m[..., 0] / m[..., 1])
    z = est.z(1.0)
    return TestResult("variance_ratio", z, p_two_sided(z), est.estimate, est.confidence_interval,
                      boot.confidence_level, f"Lo-MacKinlay VR(q={q}), overlapping, pooled over walkers; "
                      "Wald z with walker-bootstrap SE; H0 VR = 1", boot.n, 1.0, {"q": q})


def hurst_from_vr(sq_by_lag: np.ndarray, lags: np.ndarray, boot: WalkerBootstrap) -> TestResult:
    """Aggregated-variance Hurst exponent: Var(X_{t+q} - X_t) ~ q^{2H}, so H = slope / 2.

    Args:
        sq_by_lag: (N, L) per-walker mean squared q-step displacement for q in `lags`.
    """
    est = boot.estimate(sq_by_lag, lambda m: 0.5 * log_slope(lags.astype(float), m))
    z = est.z(0.5)
    return TestResult("hurst", z, p_two_sided(z), est.estimate, est.confidence_interval, boot.confidence_level,
                      f"aggregated variance over lags {lags.tolist()}; H0 H = 1/2", boot.n, 0.5)


def _pooled_acf_test(e: np.ndarray, max_lag: int, boot: WalkerBootstrap, name: str, what: str) -> TestResult:
    """Walker-robust portmanteau: rho_k = mean_i c_ik / mean_i v_i, Q = sum_k z_k^2 ~ chi2(h).

    c_ik = mean_t <e_{t,i}, e_{t+k,i}>, v_i = mean_t |e_{t,i}|^2; z_k uses the delta-method
    standard error of the ratio over walkers (a Ljung-Box statistic in which walkers, not time
    points, carry the sampling variability).
    """
    n, N = e.shape[:2]
    e = e.reshape(n, N, -1)
    v = np.einsum("tid,tid->i", e, e) / n
    zs, rhos, cis = [], [], []
    for k in range(1, max_lag + 1):
        c = np.einsum("tid,tid->i", e[:-k], e[k:]) / (n - k)
        rho = c.mean() / v.mean()
        infl = (c - rho * v) / v.mean()
        se = infl.std(ddof=1) / np.sqrt(N)
        rhos.append(rho)
        zs.append(rho / se if se > 0 else np.nan)
        if k == 1:
            cis = boot.estimate(np.stack([c, v], 1), lambda m: m[..., 0] / m[..., 1]).confidence_interval
    Q = float(np.nansum(np.square(zs)))
    h = int(np.isfinite(zs).sum())
    p = float(stats.chi2.sf(Q, h)) if h else np.nan
    return TestResult(name, Q, p, float(rhos[0]), cis, boot.confidence_level,
                      f"walker-robust portmanteau on {what}, lags 1..{max_lag}; Q ~ chi2({h}); estimate = lag-1 autocorrelation",
                      N, 0.0, {"acf": [float(r) for r in rhos], "z": [float(x) for x in zs]})


def autocorrelation_test(e: np.ndarray, boot: WalkerBootstrap, *, max_lag: int) -> TestResult:
    """Independence of increments (Ljung-Box analogue pooled over walkers)."""
    return _pooled_acf_test(e, max_lag, boot, "increment_autocorrelation", "increments")


def volatility_test(e: np.ndarray, boot: WalkerBootstrap, *, max_lag: int) -> TestResult:
    """ARCH effects / volatility clustering (McLeod-Li analogue) on |e_t|^2.

    The squared norms are centred by their cross-sectional mean at each step so that a
    deterministic variance schedule (learning-rate decay) is not mistaken for clustering.
    """
    q = np.einsum("tid,tid->ti", e, e)
    q = q - q.mean(axis=1, keepdims=True)
    return _pooled_acf_test(q[..., None], max_lag, boot, "volatility_clustering", "squared increment norms")


def gaussianity_test(z_indep: np.ndarray, z_all_walker_moments: np.ndarray, boot: WalkerBootstrap) -> TestResult:
    """D'Agostino-Pearson K^2 (scipy.stats.normaltest) with pooled excess kurtosis as effect size.

    Args:
        z_indep: standardised increments that are independent under the null (one coordinate or
            projection per walker, all steps).
        z_all_walker_moments: (N, 2) per-walker means of z^2 and z^4 over all steps and coordinates.
    """
    res = stats.normaltest(z_indep)
    est = boot.estimate(z_all_walker_moments, lambda m: m[..., 1] / m[..., 0] ** 2 - 3.0)
    return TestResult("gaussianity", float(res.statistic), float(res.pvalue), est.estimate,
                      est.confidence_interval, boot.confidence_level,
                      "D'Agostino-Pearson K^2 (scipy.stats.normaltest); estimate = pooled excess kurtosis",
                      int(z_indep.size), 0.0)


def hill_estimator(x: np.ndarray, k: int, axis: int = -1) -> np.ndarray:
    """Hill (1975) tail index alpha = [k^-1 sum_{i<=k} ln(X_(i) / X_(k+1))]^-1 of |x| (largest order statistics)."""
    a = np.abs(np.asarray(x, dtype=float))
    a = np.moveaxis(a, axis, -1)
    top = -np.sort(-np.partition(a, a.shape[-1] - k - 1, axis=-1)[..., -(k + 1):], axis=-1)
    with np.errstate(divide="ignore"):
        return 1.0 / np.mean(np.log(top[..., :k] / top[..., k:k + 1]), axis=-1)


@functools.lru_cache(maxsize=64)
def _gaussian_hill_null(n: int, k: int, n_resamples: int) -> np.ndarray:
    """Hill indices of `n_resamples` standard Gaussian samples of size n (fixed seed, cached).

    The null law of a scale-free statistic depends only on (n, k), so one Monte Carlo null per
    shape serves every analysis of that shape (the calibration runs thousands).
    """
    rng = np.random.default_rng(np.random.SeedSequence([n, k, n_resamples, 20210712]))
    out = np.empty(n_resamples)
    for b0 in range(0, n_resamples, 50):  # batches keep memory at 50 n floats
        b1 = min(n_resamples, b0 + 50)
        out[b0:b1] = hill_estimator(rng.standard_normal((b1 - b0, n)), k)
    return out


def tail_test(z_indep: np.ndarray, *, n_resamples: int = 199, rng=None, confidence_level=0.95) -> TestResult:
    """Hill tail index against matched Gaussian surrogates (never against a bare 2).

    Monte Carlo test of H0: the standardised increments are Gaussian, against a smaller tail
    index (heavier tails): p = (1 + #{surrogates <= observed}) / (1 + B), the convention of
    scipy.stats.monte_carlo_test(alternative="less"); the surrogate null is cached per (n, k).
    Effect size: the ratio of the data's Hill index to the surrogates' median (1 under the null,
    < 1 for heavy tails). k = max(10, 2% of n).
    """
    z = np.asarray(z_indep, dtype=float).ravel()
    k = int(min(max(10, 0.02 * z.size), z.size - 2))
    null = _gaussian_hill_null(z.size, k, int(n_resamples))
    stat = float(hill_estimator(z, k))
    p = float((1 + np.sum(null <= stat)) / (1 + null.size))
    med = float(np.median(null))
    ratio = stat / med
    a = (1 - confidence_level) / 2
    # interval of the ratio from the surrogates' spread (Hill's sampling sd ~ alpha / sqrt(k))
    lo, hi = ratio * med / np.quantile(null, [1 - a, a])
    return TestResult("tail_index", stat, p, ratio, (float(lo), float(hi)), confidence_level,
                      f"Hill estimator (k={k}) vs {n_resamples} matched Gaussian surrogates, one-sided "
                      "(heavier tails); estimate = Hill / surrogate median", int(z.size), 1.0,
                      {"hill": stat, "surrogate_median": med, "k": k})


def isotropy_test(e: np.ndarray) -> TestResult:
    """Sphericity of the increment covariance (John 1971; Ledoit & Wolf 2002).

    U = (1/d) tr[(C / (tr C / d) - I)^2]; under isotropy n U - d -> N(1, 4) as n, d grow.
    One-sided p-value; effect size = participation ratio (sum lambda)^2 / sum lambda^2 divided by d
    (1 for isotropic increments).
    """
    Y = e.reshape(-1, e.shape[-1])
    n, d = Y.shape
    if d < 2:
        return TestResult("isotropy", np.nan, np.nan, 1.0, method="undefined for d = 1", n=n, null_value=1.0)
    C = np.cov(Y, rowvar=False)
    tr = np.trace(C)
    M = C / (tr / d) - np.eye(d)
    U = np.trace(M @ M) / d
    zstat = (n * U - d - 1.0) / 2.0
    lam = np.linalg.eigvalsh(C)
    pr = tr**2 / np.sum(lam**2) / d
    return TestResult("isotropy", float(zstat), float(stats.norm.sf(zstat)), float(pr), method=
                      "John/Ledoit-Wolf sphericity: (n U - d - 1)/2 ~ N(0,1); estimate = participation ratio / d",
                      n=n, null_value=1.0)


def drift_test(disp: np.ndarray, *, rng=None) -> TestResult:
    """Hotelling T^2 test of zero mean displacement X_T - X_0 over walkers (statsmodels test_mvmean).

    With d >= N - 1 the displacements are first projected onto (N - 1) // 2 random directions.
    Effect size: drift fraction |mean disp|^2 / mean |disp|^2 (share of the final MSD due to drift;
    about d/N under the null).
    """
    N, d = disp.shape
    Y = disp
    if d >= N - 1:
        k = max(1, (N - 1) // 2)
        P = np.linalg.qr(np.random.default_rng(rng).standard_normal((d, k)))[0]
        Y = disp @ P
    res = test_mvmean(Y, np.zeros(Y.shape[1]))
    frac = float(np.sum(disp.mean(0) ** 2) / np.mean(np.sum(disp**2, axis=1)))
    return TestResult("drift", float(res.statistic), float(res.pvalue), frac, method=
                      "Hotelling T^2 of mean displacement = 0 (statsmodels test_mvmean, F law); estimate = drift fraction of final MSD",
                      n=N, null_value=0.0)


def arch_variance_ratio(Y: np.ndarray, E: np.ndarray, q: int, *, max_walkers: int = 16, alpha: float = 0.05,
                        rng=None) -> dict:
    """Supplement: arch's Lo-MacKinlay test per walker on the top principal component of the increments.

    For up to `max_walkers` walkers (seeded subsample), the drift-removed levels Y (T, N, d) are projected
    onto the first principal direction of the pooled increments E (n, N, d), and
    arch.unitroot.VarianceRatio(levels, lags=q, trend="c", debiased=True, robust=True, overlap=True)
    is run on each 1-D series. Reported, not used in the classification: one series of T points has
    far less power than the walker-pooled VR.
    """
    from arch.unitroot import VarianceRatio
    from arch.utility.exceptions import InfeasibleTestException
    T, N, d = Y.shape
    flat = E.reshape(-1, d)
    direction = np.linalg.svd(flat - flat.mean(0), full_matrices=False)[2][0] if d > 1 else np.ones(1)
    idx = np.arange(N)
    if N > max_walkers:
        idx = np.sort(np.random.default_rng(rng).choice(N, max_walkers, replace=False))
    vr, pv = [], []
    for i in idx:
        try:
            res = VarianceRatio(Y[:, i] @ direction, lags=q, trend="c", debiased=True, robust=True, overlap=True)
            vr.append(float(res.vr))
            pv.append(float(res.pvalue))
        except (InfeasibleTestException, ValueError, ZeroDivisionError, np.linalg.LinAlgError):
            continue  # too short for q, or a constant series
    if not vr:
        return {"available": False, "reason": f"arch VarianceRatio needs a longer series (T={T}, q={q})"}
    return {"available": True, "q": q, "n_walkers": len(vr), "vr_median": float(np.median(vr)),
            "pvalue_median": float(np.median(pv)), "fraction_reject": float(np.mean(np.asarray(pv) < alpha)),
            "vr": vr, "method": "arch.unitroot.VarianceRatio(trend='c', debiased=True, robust=True, overlap=True) "
                                "per walker on the top principal component of the increments"}
