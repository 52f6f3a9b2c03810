"""Cluster bootstrap over groups of dependent walkers, shared by every statistic of one analysis.

Walkers of one group (the tokens of one probe input) move together, so the unit of replication is
the group (docs/METHODS.md, "Dependence"): resampling draws whole groups with replacement. Almost every statistic
of the battery is a smooth function g of walker means of per-walker features F_i (shape (N, k)); with
group sums S_g = sum_{i in g} F_i and sizes c_g, a resample with multinomial group counts w_g has
walker mean sum_g w_g S_g / sum_g w_g c_g. Drawing W (B, G) once makes every replicate a matrix
product, for one trajectory or for a batch of R simulated ones at once (the calibration).

Intervals. With few groups (8 probe inputs) the percentile cluster bootstrap covers about 85% at a
nominal 95%, so the interval is a t-interval with G - 1 degrees of freedom around the point estimate,
scaled by the bootstrap standard error inflated by sqrt(G / (G - 1)) (the bootstrap variance of a mean
of G units is (G - 1)/G times the unbiased one; the same small-sample correction as CR1 cluster-robust
errors). Its coverage at the real group sizes is checked by simulation (tests/stats/test_rule.py).
Independent walkers are groups of one.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

__all__ = ["ClusterBootstrap", "BootstrapEstimate", "group_labels"]

#: a bootstrap distribution with fewer finite replicates than this share gives no interval
MIN_FINITE_SHARE = 0.9


def group_labels(n_walkers: int, *, groups=None, n_inputs: int | None = None, n_tokens: int | None = None) -> np.ndarray:
    """Group label 0..G-1 of each walker from the sidecar fields (the trajectory contract, docs/ARTIFACTS.md).

    Args:
        n_walkers: N.
        groups: N ints (any labels), or None.
        n_inputs, n_tokens: walker i*n_tokens + t is token t of input i (used when `groups` is None).

    Returns:
        (N,) int labels 0..G-1; without group fields every walker is its own group.

    Raises:
        ValueError: groups of the wrong length, or n_inputs * n_tokens != N.
    """
    if groups is not None:
        g = np.asarray(groups)
        if g.shape != (n_walkers,):
            raise ValueError(f"'groups' has {g.size} entries, expected one per walker (N={n_walkers})")
        return np.unique(g, return_inverse=True)[1].astype(np.int64)
    if n_inputs is not None or n_tokens is not None:
        if not n_inputs or not n_tokens or int(n_inputs) * int(n_tokens) != n_walkers:
            raise ValueError(f"n_inputs={n_inputs} x n_tokens={n_tokens} does not match N={n_walkers} walkers")
        return np.arange(n_walkers, dtype=np.int64) // int(n_tokens)
    return np.arange(n_walkers, dtype=np.int64)


@dataclass(frozen=True)
class BootstrapEstimate:
    """Point estimates g(mean F) of R trajectories with their cluster-bootstrap standard errors.

    Attributes:
        estimate: (R,) point estimates.
        standard_error: (R,) bootstrap standard errors (NaN when the bootstrap is degenerate).
        n_groups: G, the number of resampled groups.
    """

    estimate: np.ndarray
    standard_error: np.ndarray
    n_groups: int

    def interval(self, confidence_level: float) -> tuple[np.ndarray, np.ndarray]:
        """t-interval estimate +- t_{G-1}(1 - a/2) * SE * sqrt(G/(G-1)), a = 1 - confidence_level."""
        from scipy.special import stdtrit  # Student t quantile; scipy.special loads far faster than scipy.stats
        G = self.n_groups
        if G < 3:
            nan = np.full_like(self.estimate, np.nan)
            return nan, nan
        half = stdtrit(G - 1, 0.5 + confidence_level / 2) * self.standard_error * np.sqrt(G / (G - 1))
        return self.estimate - half, self.estimate + half

    def z(self, null_value: float) -> np.ndarray:
        """Wald statistic (estimate - null) / (SE sqrt(G/(G-1))); NaN where the SE is not positive."""
        se = self.standard_error * np.sqrt(self.n_groups / max(self.n_groups - 1, 1))
        with np.errstate(all="ignore"):
            return np.where(se > 0, (self.estimate - null_value) / se, np.nan)

    def pvalue(self, null_value: float) -> np.ndarray:
        """Two-sided p-value of the Wald statistic against Student's t with G - 1 df."""
        from scipy.special import stdtr
        z = self.z(null_value)
        return 2 * stdtr(max(self.n_groups - 1, 1), -np.abs(z))


class ClusterBootstrap:
    """Multinomial resampling weights over G groups, reused for every statistic of one analysis.

    Args:
        labels: (N,) group label 0..G-1 of each walker (`group_labels`).
        n_resamples: B.
        rng: seed or Generator.
    """

    def __init__(self, labels, *, n_resamples: int, rng):
        labels = np.asarray(labels, dtype=np.int64)
        rng = np.random.default_rng(rng)
        self.labels = labels
        self.n_walkers = int(labels.size)
        self.n_groups = int(labels.max()) + 1
        self.sizes = np.bincount(labels, minlength=self.n_groups).astype(float)  # (G,)
        self._onehot = np.zeros((self.n_groups, self.n_walkers))
        self._onehot[labels, np.arange(self.n_walkers)] = 1.0
        # (B, G) group counts of each resample, and the walker count of each resample
        self.weights = rng.multinomial(self.n_groups, np.full(self.n_groups, 1.0 / self.n_groups),
                                       size=int(n_resamples)).astype(float)
        self._walkers = self.weights @ self.sizes  # (B,)

    def group_sums(self, F: np.ndarray) -> np.ndarray:
        """Sums over the walkers of each group: F (R, N, k) -> (R, G, k)."""
        R, N, k = F.shape
        return (self._onehot @ F.transpose(1, 0, 2).reshape(N, R * k)).reshape(self.n_groups, R, k).transpose(1, 0, 2)

    def estimate(self, F: np.ndarray, g) -> BootstrapEstimate:
        """Bootstrap g(mean_i F_i) for each of R trajectories.

        Args:
            F: per-walker features, (R, N, k) (or (N, k) / (N,) for one trajectory).
            g: maps walker means of shape (R, m, k) to statistics (R, m) (m = 1 for the point estimate,
                B for the resamples); write it with [..., j] indexing so it broadcasts.
        """
        F = np.asarray(F, dtype=float)
        if F.ndim == 1:
            F = F[None, :, None]
        elif F.ndim == 2:
            F = F[None]
        S = self.group_sums(F)  # (R, G, k)
        with np.errstate(all="ignore"):
            point = np.asarray(g(S.sum(1, keepdims=True) / self.n_walkers), dtype=float)[:, 0]  # (R,)
            boot = np.asarray(g(np.einsum("bg,rgk->rbk", self.weights, S) / self._walkers[None, :, None]), float)
        finite = np.isfinite(boot)
        # one group: every resample is the sample itself, and a "standard error" of rounding noise would give
        # p-values of 1e-15; no spread between groups is no standard error
        ok = np.isfinite(point) & (finite.mean(1) >= MIN_FINITE_SHARE) & (self.n_groups >= 2)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: handled by `ok`
            se = np.nanstd(np.where(finite, boot, np.nan), axis=1, ddof=1)
        return BootstrapEstimate(point, np.where(ok, se, np.nan), self.n_groups)
