"""Nonparametric bootstrap over independent walkers, shared by every statistic of one analysis.

Walkers are the unit of replication (STATISTICS.md 2.0), and almost every statistic of the
battery is a smooth function g of walker means of per-walker features F_i (shape (N, k)).
Drawing multinomial resampling weights once, W (B, N), makes every bootstrap replicate
g(W F / N) a matrix product, so all statistics share one set of resamples and cost milliseconds.
This is the ordinary percentile bootstrap (Efron & Tibshirani 1993, ch. 13); scipy.stats.bootstrap
with method="percentile" computes the same interval (checked in tests) but re-gathers the
data for every statistic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["WalkerBootstrap", "BootstrapEstimate"]


@dataclass(frozen=True)
class BootstrapEstimate:
    """Point estimate g(mean F) with its percentile interval and bootstrap standard error."""

    estimate: float
    confidence_interval: tuple[float, float]
    standard_error: float
    confidence_level: float
    n: int
    bootstrap_distribution: np.ndarray

    def z(self, null_value: float) -> float:
        """Wald statistic (estimate - null) / bootstrap SE."""
        if not np.isfinite(self.standard_error) or self.standard_error <= 0:
            return np.nan
        return (self.estimate - null_value) / self.standard_error


class WalkerBootstrap:
    """Resampling weights over N walkers, reused for every statistic of one analysis.

    Args:
        n_walkers: N.
        n_resamples: B.
        confidence_level: level of the percentile intervals.
        rng: seed or Generator.
    """

    def __init__(self, n_walkers: int, *, n_resamples: int = 499, confidence_level: float = 0.95, rng=None):
        rng = np.random.default_rng(rng)
        self.n = int(n_walkers)
        self.confidence_level = float(confidence_level)
        # (B, N) multinomial counts / N = weights of each walker in each resample
        self.weights = rng.multinomial(self.n, np.full(self.n, 1.0 / self.n), size=int(n_resamples)) / self.n

    def estimate(self, F: np.ndarray, g) -> BootstrapEstimate:
        """Bootstrap g(mean_i F_i).

        Args:
            F: per-walker features, shape (N,) or (N, k).
            g: maps means of shape (..., k) to a statistic of shape (...); must broadcast over
                leading axes (write it with [..., j] indexing).
        """
        F = np.asarray(F, dtype=float)
        F2 = F.reshape(self.n, -1)
        with np.errstate(all="ignore"):
            point = float(g(F2.mean(axis=0)))
            boot = np.asarray(g(self.weights @ F2), dtype=float)
        finite = boot[np.isfinite(boot)]
        if not np.isfinite(point) or finite.size < 0.9 * boot.size:
            return BootstrapEstimate(point, (np.nan, np.nan), np.nan, self.confidence_level, self.n, boot)
        a = (1 - self.confidence_level) / 2
        lo, hi = np.quantile(finite, [a, 1 - a])
        return BootstrapEstimate(point, (float(lo), float(hi)), float(finite.std(ddof=1)),
                                 self.confidence_level, self.n, boot)
