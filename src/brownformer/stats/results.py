"""Result objects in the shape of scipy.stats results, and JSON helpers.

Every test or estimator in this package returns a frozen dataclass with `statistic`,
`pvalue`, `estimate`, `confidence_interval` (low, high), `confidence_level`, `method` and `n`;
`to_dict()` gives plain floats and lists (NaN -> None) ready for `json.dump`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

__all__ = ["TestResult", "to_jsonable"]


def to_jsonable(obj: Any) -> Any:
    """Recursively convert numpy scalars/arrays, tuples and dataclasses to JSON types; NaN/inf -> None."""
    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        return obj.to_dict()
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [to_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        return x if math.isfinite(x) else None
    return obj


@dataclass(frozen=True)
class TestResult:
    """Outcome of one hypothesis test with its effect size (scipy.stats' shape).

    Attributes:
        name: short identifier used in JSON output (e.g. "variance_ratio").
        statistic: the test statistic (z, chi-square, ...).
        pvalue: p-value under the stated null.
        estimate: the effect size the test is about (e.g. VR(q) itself).
        confidence_interval: (low, high) for `estimate`.
        confidence_level: level of the interval.
        method: a human-readable description including the null distribution.
        n: number of independent units (walkers) the test used.
        null_value: the value of `estimate` under the null.
        extra: anything else worth recording (plain JSON types).
    """

    name: str
    statistic: float
    pvalue: float
    estimate: float = math.nan
    confidence_interval: tuple[float, float] = (math.nan, math.nan)
    confidence_level: float = 0.95
    method: str = ""
    n: int = 0
    null_value: float = math.nan
    extra: dict = field(default_factory=dict)

    def reject(self, alpha: float = 0.05) -> bool:
        """True when the p-value is below `alpha` (False for a NaN p-value)."""
        return bool(np.isfinite(self.pvalue) and self.pvalue < alpha)

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["p_value"] = out["pvalue"]  # the DESIGN.md spelling
        return to_jsonable(out)
