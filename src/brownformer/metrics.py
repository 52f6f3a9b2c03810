"""The one metric accessor: which validation metric a run has and whether higher is better.

A run's metrics table (metrics.parquet, written by `brownformer.train`) has one row per logged step
with columns step, epoch, lr, lr_sum, train_loss, wall_time (seconds since the run started, evaluation
and probe captures included), eval_wall_time and probe_wall_time (the cumulative parts of wall_time
spent in validation and in the probe callbacks: training wall-clock is wall_time minus both), val_loss
and, for an image model, val_accuracy; for a language model val_bpc (bits per character). Every reader
(claims, plots, report) asks this module which column is the run's validation metric instead of
deciding for itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

__all__ = ["ValMetric", "METRIC_PREFERENCE", "val_metric", "val_metric_for_kind", "val_series", "final_value"]


@dataclass(frozen=True)
class ValMetric:
    """A validation metric column and its direction."""
    column: str
    higher_is_better: bool

    def better(self, a: float, b: float) -> bool:
        """True when value a is at least as good as value b."""
        return a >= b if self.higher_is_better else a <= b


#: in order of preference: a classifier is judged by accuracy, a language model by bits per character
METRIC_PREFERENCE = (ValMetric("val_accuracy", True), ValMetric("val_bpc", False), ValMetric("val_loss", False))


def val_metric(metrics: pd.DataFrame) -> ValMetric:
    """The validation metric of one run's metrics table (the first column of METRIC_PREFERENCE with data).

    Raises:
        ValueError: when the table has none of the columns, or only missing values in them.
    """
    for m in METRIC_PREFERENCE:
        if m.column in metrics and metrics[m.column].notna().any():
            return m
    raise ValueError(f"metrics need one of {[m.column for m in METRIC_PREFERENCE]} with values; "
                     f"columns present: {sorted(metrics.columns)}")


def val_metric_for_kind(kind: str) -> ValMetric:
    """The validation metric of a dataset kind ("image" -> accuracy, "text" -> bits per character)."""
    if kind not in ("image", "text"):
        raise ValueError(f"dataset kind must be 'image' or 'text', got {kind!r}")
    return METRIC_PREFERENCE[0] if kind == "image" else METRIC_PREFERENCE[1]


def val_series(metrics: pd.DataFrame, metric: ValMetric | None = None) -> pd.DataFrame:
    """The evaluated rows only, sorted by step: columns step, value (and wall_time when present)."""
    metric = metric or val_metric(metrics)
    cols = ["step", metric.column] + (["wall_time"] if "wall_time" in metrics else [])
    d = metrics.loc[metrics[metric.column].notna(), cols].sort_values("step")
    return d.rename(columns={metric.column: "value"}).reset_index(drop=True)


def final_value(metrics: pd.DataFrame, metric: ValMetric | None = None) -> float:
    """The last evaluated value of the validation metric (NaN when never evaluated)."""
    s = val_series(metrics, metric)
    return float(s["value"].iat[-1]) if len(s) else float("nan")
