"""Descriptive tests of one trajectory, reported beside the verdict but not part of it.

Tails (Hill against matched Gaussian surrogates), D'Agostino's K^2, isotropy of the increments and the
drift test. They describe how a trajectory departs from Brownian motion (the classification); the
verdict uses the key effects of rule.KEY_EFFECTS only. Each takes one trajectory's arrays.
"""
from __future__ import annotations

import functools

import numpy as np

from brownformer.stats.core.batch_stat import EffectResult
from brownformer.statsfile import NoiseCapture, NoiseStats

__all__ = ["hill_estimator", "tail_test", "normality_test", "isotropy_test", "drift_test", "analyze_noise"]


def hill_estimator(x: np.ndarray, k: int, axis: int = -1) -> np.ndarray:
    """Hill (1975) tail index alpha = [k^-1 sum_{i<=k} ln(X_(i) / X_(k+1))]^-1 of |x| (largest order statistics)."""
    a = np.abs(np.asarray(x, dtype=float))
    a = np.moveaxis(a, axis, -1)
    top = -np.sort(-np.partition(a, a.shape[-1] - k - 1, axis=-1)[..., -(k + 1):], axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / np.mean(np.log(top[..., :k] / top[..., k:k + 1]), axis=-1)


@functools.lru_cache(maxsize=64)
def _gaussian_hill_null(n: int, k: int, n_resamples: int) -> np.ndarray:
    """Hill indices of `n_resamples` standard Gaussian samples of size n (fixed seed, cached per shape)."""
    rng = np.random.default_rng(np.random.SeedSequence([n, k, n_resamples, 20210712]))
    out = np.empty(n_resamples)
    for b0 in range(0, n_resamples, 50):  # batches keep memory at 50 n floats
        b1 = min(n_resamples, b0 + 50)
        out[b0:b1] = hill_estimator(rng.standard_normal((b1 - b0, n)), k)
    return out


#: Gaussian surrogates of the Hill tail test: a Monte Carlo null (not a bootstrap), drawn once per shape and cached;
#: 199 puts the smallest attainable p-value at 0.005, enough for a descriptive test that decides nothing
TAIL_SURROGATES = 199


def tail_test(z: np.ndarray, *, confidence_level: float, n_surrogates: int = TAIL_SURROGATES) -> EffectResult:
    """Hill tail index against matched Gaussian surrogates (never against a bare 2).

    Monte Carlo test of H0 Gaussian against heavier tails: p = (1 + #{surrogates <= observed}) / (1 + B)
    (scipy.stats.monte_carlo_test's convention). Effect size: Hill index / surrogate median (1 under
    the null). k = max(10, 2% of n).
    """
    z = np.asarray(z, dtype=float).ravel()
    z = z[np.isfinite(z)]
    if z.size < 30 or np.ptp(z) == 0:
        return EffectResult("tail_index", np.nan, np.nan, method="Hill estimator", n=int(z.size), null_value=1.0,
                          why_undefined=f"{z.size} finite non-constant values are too few")
    k = int(min(max(10, 0.02 * z.size), z.size - 2))
    null = _gaussian_hill_null(z.size, k, int(n_surrogates))
    stat = float(hill_estimator(z, k))
    p = float((1 + np.sum(null <= stat)) / (1 + null.size))
    med = float(np.median(null))
    a = (1 - confidence_level) / 2
    lo, hi = stat / np.quantile(null, [1 - a, a])  # Hill's sampling spread from the surrogates
    return EffectResult("tail_index", stat, p, stat / med, (float(lo), float(hi)), confidence_level,
                      f"Hill estimator (k={k}) vs {n_surrogates} matched Gaussian surrogates, one-sided (heavier tails); "
                      "estimate = Hill / surrogate median", int(z.size), 1.0, extra={"hill": stat, "k": k})


def normality_test(z: np.ndarray) -> EffectResult:
    """D'Agostino-Pearson K^2 (scipy.stats.normaltest) on standardised increments."""
    from scipy import stats
    z = np.asarray(z, dtype=float).ravel()
    z = z[np.isfinite(z)]
    if z.size < 20 or np.ptp(z) == 0:
        return EffectResult("normaltest", np.nan, np.nan, method="D'Agostino-Pearson K^2", n=int(z.size),
                          why_undefined=f"{z.size} finite non-constant values are too few")
    res = stats.normaltest(z)
    return EffectResult("normaltest", float(res.statistic), float(res.pvalue), float(stats.kurtosis(z)),
                      method="D'Agostino-Pearson K^2 (scipy.stats.normaltest), one coordinate per walker; "
                             "estimate = excess kurtosis", n=int(z.size), null_value=0.0)


def isotropy_test(e: np.ndarray, basis: np.ndarray | None = None) -> EffectResult:
    """Sphericity of the increment covariance (John 1971; Ledoit & Wolf 2002) in p dimensions.

    U = (1/p) tr[(C / (tr C / p) - I)^2]; under isotropy (n U - p - 1)/2 -> N(0, 1). `basis` (d, p)
    restricts to a subspace first (LayerNorm's hyperplane: p = d - 1). Effect size: participation
    ratio (sum lambda)^2 / sum lambda^2 / p (1 for isotropic increments).
    """
    from scipy.special import ndtr
    Y = e.reshape(-1, e.shape[-1])
    Y = Y[np.all(np.isfinite(Y), axis=1)]
    if basis is not None:
        Y = Y @ basis
    n, p = Y.shape
    C = np.cov(Y, rowvar=False) if n > 1 else np.zeros((p, p))
    tr = float(np.trace(np.atleast_2d(C)))
    if p < 2 or n <= p or tr <= 0:
        return EffectResult("isotropy", np.nan, np.nan, null_value=1.0, n=n, method="sphericity",
                          why_undefined=f"needs p >= 2 dimensions, n > p increments and nonzero variance (p={p}, n={n})")
    M = C / (tr / p) - np.eye(p)
    U = np.trace(M @ M) / p
    z = (n * U - p - 1.0) / 2.0
    pr = tr**2 / np.sum(np.linalg.eigvalsh(C) ** 2) / p
    return EffectResult("isotropy", float(z), float(ndtr(-z)), float(pr), method=
                      f"John/Ledoit-Wolf sphericity in p={p} dimensions: (n U - p - 1)/2 ~ N(0,1); estimate = "
                      "participation ratio / p", n=n, null_value=1.0)


def drift_test(disp: np.ndarray, labels: np.ndarray, *, rng) -> EffectResult:
    """Hotelling (1931) T^2 test of zero mean displacement over groups of walkers.

    Group means m_g of X_T - X_0 are independent under the null; with G means in p dimensions,
    T^2 = G mbar' S^-1 mbar and (G - p)/(p (G - 1)) T^2 ~ F(p, G - p) (statsmodels' test_mvmean computes the
    same; checked in tests). With p >= G - 1 the means are first projected onto (G - 1) // 2 random
    directions. Effect size: drift fraction |mean disp|^2 / mean |disp|^2.
    """
    from scipy.special import fdtrc  # F survival function
    N, d = disp.shape
    G = int(labels.max()) + 1
    total = float(np.mean(np.sum(disp**2, axis=1)))
    frac = float(np.sum(disp.mean(0) ** 2) / total) if total > 0 else np.nan
    means = np.zeros((G, d))
    np.add.at(means, labels, disp)
    means /= np.bincount(labels, minlength=G)[:, None]
    if d >= G - 1:
        k = (G - 1) // 2
        if k < 1:
            return EffectResult("drift", np.nan, np.nan, frac, n=G, null_value=0.0, method="Hotelling T^2",
                              why_undefined=f"{G} groups are too few for a drift test")
        means = means @ np.linalg.qr(np.random.default_rng(rng).standard_normal((d, k)))[0]
    p = means.shape[1]
    mbar = means.mean(0)
    try:
        t2 = float(G * mbar @ np.linalg.solve(np.atleast_2d(np.cov(means, rowvar=False)), mbar))
        f = (G - p) / (p * (G - 1)) * t2
        pval = float(fdtrc(p, G - p, f))
    except np.linalg.LinAlgError:
        f, pval = np.nan, np.nan  # singular covariance: a constant or degenerate trajectory
    return EffectResult("drift", f, pval, frac, n=G, null_value=0.0, method=f"Hotelling T^2 of mean displacement = 0 "
                      f"over {G} group means in {p} dimensions, F({p}, {G - p}); estimate = drift fraction of the final MSD",
                      why_undefined="" if np.isfinite(pval) else "singular covariance of the group displacements")


def analyze_noise(G, *, confidence_level: float, n_surrogates: int = TAIL_SURROGATES) -> NoiseStats:
    """Tails and Gaussianity of gradient-noise samples G (C, M, p) = (captures, samples, params).

    Per capture: excess kurtosis and D'Agostino K^2 of the standardised coordinates, and the Hill index
    against matched Gaussian surrogates (Simsekli et al. 2019 report heavy tails; others report
    Gaussian noise at large batch).

    Returns:
        statsfile.NoiseStats: one NoiseCapture per capture (only `n` where fewer than 20 coordinates vary).
    """
    G = np.asarray(G, dtype=float)
    if G.ndim != 3 or not np.all(np.isfinite(G)):
        raise ValueError(f"gradient noise must be a finite array (captures, samples, params); got shape {G.shape}")
    rows = []
    for c in range(G.shape[0]):
        g = G[c] - G[c].mean(0)
        sd = g.std(0, ddof=1)
        zz = (g / np.where(sd > 0, sd, 1.0))[:, sd > 0].ravel()
        if zz.size < 20:
            rows.append(NoiseCapture(capture=c, n=int(zz.size)))
            continue
        nt = normality_test(zz)
        rows.append(NoiseCapture(capture=c, n=int(zz.size), excess_kurtosis=nt.estimate,
                                 normaltest_statistic=nt.statistic, normaltest_pvalue=nt.pvalue,
                                 tail_index=tail_test(zz, n_surrogates=n_surrogates, confidence_level=confidence_level)))
    return NoiseStats(kind="gradient_noise", n_captures=int(G.shape[0]), n_samples=int(G.shape[1]),
                      n_params=int(G.shape[2]), per_capture=rows)
