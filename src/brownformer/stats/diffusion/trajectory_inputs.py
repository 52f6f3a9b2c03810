"""A trajectory array checked (`validate_trajectory`), and the Brownian battery's inputs read from its sidecar.

Pure functions of arrays and sidecar dicts; reading the files is brownformer.stats_stage.trajectory_io.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from brownformer.stats.core.bootstrap import group_labels
from brownformer.stats.core.shapes import select_walkers

__all__ = ["validate_trajectory", "battery_inputs", "BatteryInputs", "analysis_inputs", "KINDS"]

KINDS = ("sphere", "euclidean")


def validate_trajectory(X, *, kind: str, times=None) -> tuple[np.ndarray, np.ndarray]:
    """Check a trajectory array and its time axis; return float64 copies.

    Raises:
        ValueError: wrong ndim, fewer than 3 times or 4 walkers, non-finite values, unknown
            kind, times of the wrong length or not strictly increasing, zero vectors on the sphere.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    X = np.asarray(X)
    if X.ndim != 3:
        raise ValueError(f"trajectory must have shape (T, N, d) = (time, walkers, dims); got ndim={X.ndim}, shape={X.shape}")
    T, N, d = X.shape
    if T < 3:
        raise ValueError(f"trajectory needs at least 3 time points, got T={T}")
    if N < 4:  # cross-sectional standardisation and a bootstrap over walkers need a few of them
        raise ValueError(f"trajectory needs at least 4 walkers, got N={N}")
    if d < 1 or (kind == "sphere" and d < 2):
        raise ValueError(f"trajectory dimension d={d} too small for kind {kind!r} (a sphere needs d >= 2)")
    if not np.issubdtype(X.dtype, np.number) or np.iscomplexobj(X):
        raise ValueError(f"trajectory must be a real numeric array, got dtype {X.dtype}")
    X = X.astype(np.float64)
    bad = ~np.isfinite(X)
    if bad.any():
        cols = np.flatnonzero(bad.all(axis=(0, 1)))
        where = f" (dimension(s) {cols[:5].tolist()} entirely NaN/inf)" if cols.size else ""
        raise ValueError(f"trajectory contains {int(bad.sum())} non-finite values (NaN/inf){where}")
    if kind == "sphere" and (np.linalg.norm(X, axis=-1) == 0).any():
        raise ValueError("sphere trajectory contains zero vectors, which have no direction")
    if times is None:
        times = np.arange(T, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64).ravel()
    if times.shape != (T,):
        raise ValueError(f"times has length {times.size}, expected T={T}")
    if not np.all(np.isfinite(times)) or np.any(np.diff(times) <= 0):
        raise ValueError("times must be finite and strictly increasing")
    return X, times


@dataclass(frozen=True)
class BatteryInputs:
    """What a sidecar tells the battery besides the clock: dependent walkers (`groups`, or `n_inputs` x `n_tokens`),
    whether the vectors lie in LayerNorm's hyperplane (None: detected), and the drift handling."""

    groups: list | None
    n_inputs: int | None
    n_tokens: int | None
    hyperplane: bool | None
    drift: str

    def labels(self, n_walkers: int) -> np.ndarray:
        """(N,) group labels of the walkers (bootstrap.group_labels)."""
        return group_labels(n_walkers, groups=self.groups, n_inputs=self.n_inputs, n_tokens=self.n_tokens)


def battery_inputs(meta: dict, kind: str) -> BatteryInputs:
    """trajectory_battery's inputs from a sidecar: groups, hyperplane and drift handling."""
    clock = meta.get("drift_clock")
    if clock is not None and meta.get("drift", "common") != "none" and clock != meta.get("time"):
        raise ValueError(f"sidecar drift_clock {clock!r} differs from its time clock {meta.get('time')!r}: the battery "
                         "removes a drift linear in the time clock only")
    hyperplane = meta.get("sum_zero")
    if hyperplane is None and kind == "sphere" and meta.get("ln") in ("pre", "post"):
        hyperplane = True  # LayerNorm output before the affine: in the hyperplane sum(z) = 0
    return BatteryInputs(meta.get("groups"), meta.get("n_inputs"), meta.get("n_tokens"), hyperplane,
                         meta.get("drift", "common"))


def analysis_inputs(X: np.ndarray, meta: dict, stats):
    """(walker-selected X, labels, times, BatteryInputs) exactly as trajectory_battery selects them."""
    inputs = battery_inputs(meta, meta["kind"])
    labels = inputs.labels(X.shape[1])
    idx = select_walkers(labels, stats.max_walkers, np.random.default_rng(stats.seed))  # the battery's first draw
    return X[:, idx], np.unique(labels[idx], return_inverse=True)[1], np.asarray(meta["times"], float), inputs
