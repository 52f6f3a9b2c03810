"""Result objects in the shape of scipy.stats results.

`EffectResult` is one test on one data set (scipy.stats' shape: `statistic`, `pvalue`, `estimate`,
`confidence_interval`, ...); it lives in the per-run statistics contract (brownformer.statsfile) that the
readers share, and is re-exported here. `BatchStat` is one statistic of the battery on R trajectories at once
(the calibration analyses hundreds of simulated trajectories in one call); `BatchStat.result(r, ...)`
turns replicate r into a EffectResult. JSON goes through the one converter, brownformer.io.to_jsonable.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from brownformer.statsfile import EffectResult, EffectExtra

__all__ = ["EffectResult", "BatchStat"]


@dataclass(frozen=True)
class BatchStat:
    """One statistic on R trajectories: cluster-bootstrap estimate (None if undefined) and p-values (R,)."""

    name: str
    boot: Any  # bootstrap.BootstrapEstimate | None
    pvalue: np.ndarray
    null_value: float
    method: str
    why_undefined: str = ""
    statistic: np.ndarray | None = None
    n_points: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def estimate(self) -> np.ndarray:
        return self.boot.estimate if self.boot is not None else np.full(np.shape(self.pvalue), np.nan)

    def interval(self, confidence_level: float) -> tuple[np.ndarray, np.ndarray]:
        if self.boot is None:
            nan = np.full(np.shape(self.pvalue), np.nan)
            return nan, nan
        return self.boot.interval(confidence_level)

    def result(self, r: int, *, confidence_level: float, alpha: float) -> EffectResult:
        """Replicate r as a EffectResult with its confidence_level and (1 - 2 alpha) intervals."""
        lo, hi = self.interval(confidence_level)
        tlo, thi = self.interval(1 - 2 * alpha)
        est = float(self.estimate[r])
        stat = self.statistic[r] if self.statistic is not None else (self.boot.z(self.null_value)[r] if self.boot is not None
                                                                     and np.isfinite(self.null_value) else np.nan)
        why = self.why_undefined or ("" if np.isfinite(est) and np.isfinite(tlo[r]) else
                                     "estimate or bootstrap degenerate (noise floor, constant or too few groups)")
        extra = {k: (v[r] if isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == self.pvalue.shape[0] else v)
                 for k, v in self.extra.items()}
        if self.n_points is not None:
            extra["n_time_points"] = self.n_points
        return EffectResult(self.name, float(stat), float(self.pvalue[r]), est, (float(lo[r]), float(hi[r])),
                          confidence_level, self.method, self.boot.n_groups if self.boot is not None else 0,
                          self.null_value, (float(tlo[r]), float(thi[r])), why, EffectExtra(**extra))
