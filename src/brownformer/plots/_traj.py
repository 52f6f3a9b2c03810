"""Small descriptive summaries of trajectory arrays for plotting, and test lookups in the per-run statistics.

These only describe the data as drawn (means, norms, displacements); every verdict, fit with a
confidence interval or test comes from the statistics stage's JSON outputs.
"""
from __future__ import annotations

import re

import numpy as np

from brownformer.statsfile import EffectResult

__all__ = ["unit", "mean_cosine_from_start", "gram_offdiagonal", "displacement_msd", "find_test", "capture_number",
           "clock_label"]

#: the sidecar "time" of a trajectory -> what its axis measures
_CLOCKS = {"lr_sq_sum": "clock Σ lr²", "lr_sum": "clock Σ lr", "step": "steps", "layer": "layers",
           "index": "capture index"}


def clock_label(time: str | None, *, since: str = "the first capture") -> str:
    """Axis label of a trajectory's own clock (sidecar "time"), elapsed since `since`."""
    return f"{_CLOCKS.get(time or 'index', str(time))} since {since}"


def capture_number(path: str) -> int:
    m = re.search(r"_c(\d+)", path) or re.search(r"c(\d+)", path)
    return int(m.group(1)) if m else -1


def unit(X: np.ndarray) -> np.ndarray:
    """Rows normalised to unit length (zero rows stay zero)."""
    X = np.asarray(X, dtype=np.float64)
    n = np.linalg.norm(X, axis=-1, keepdims=True)
    return np.divide(X, n, out=np.zeros_like(X), where=n > 0)


def mean_cosine_from_start(X: np.ndarray) -> np.ndarray:
    """E_walkers <u_0, u_t> for t = 0..T-1; X has shape (T, N, d)."""
    U = unit(X)
    return np.einsum("tnd,nd->tn", U, U[0]).mean(axis=1)


def gram_offdiagonal(X: np.ndarray) -> np.ndarray:
    """Mean off-diagonal cosine between walkers at each time; X (T, N, d) -> (T,), NaN for one walker.

    The statistic is the statistics stage's (brownformer.stats.sphere.sphere_distance.gram_offdiagonal, O(T N d));
    this only normalises the rows first, since the figures also draw non-unit arrays.
    """
    # Imported here so that only the figures that need it depend on the statistics package importing.
    from brownformer.stats.sphere.sphere_distance import gram_offdiagonal as unit_gram_offdiagonal

    T, N, _ = np.shape(X)
    return unit_gram_offdiagonal(unit(X)) if N > 1 else np.full(T, np.nan)


def displacement_msd(X: np.ndarray) -> np.ndarray:
    """E_walkers ||x_t - x_0||^2 per dimension, t = 0..T-1; X (T, N, d)."""
    X = np.asarray(X, dtype=np.float64)
    return ((X - X[:1]) ** 2).sum(-1).mean(axis=1) / X.shape[-1]


def find_test(tests: list[EffectResult], pattern: str) -> EffectResult | None:
    """The first test whose name matches `pattern` and whose estimate is finite (None when there is none)."""
    rx = re.compile(pattern)
    return next((t for t in tests if rx.search(t.name) and np.isfinite(t.estimate)), None)
