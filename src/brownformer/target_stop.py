"""Metrics-only runs that stop at claim 4's target (grid blocks with ``stop_at_target: true``).

Claim 4 reads a run's first evaluation whose smoothed value (:func:`smoothed`, the running median the target
itself is read on) is at or past ``report.targets[model]`` (stats/comparison/time_to_target.py); a
run that only serves that claim needs nothing after it, so it stops there (``ExperimentConfig.stop_target``
says which runs do: every block naming the run asks for it, and no probes). Its metrics say so in two
columns, written on every row of such a run and absent from every other run:

- ``stopped_at_target``: True when the run stopped at the target, False when it never reached it and
  trained its whole budget (then it is an ordinary full run, censored at the budget);
- ``step_budget``: the steps the run would have trained, where claim 4 censors a run that never gets there.

A stopped run's last row is not a final value and its curve ends early: readers that show a final metric,
a total time, a plateau or whole training curves leave stopped runs out (``stopped_at_target``).
"""
from __future__ import annotations

import math
from typing import Mapping

import pandas as pd

from brownformer.metrics import ValMetric

__all__ = ["STOPPED", "BUDGET", "SMOOTHING_WINDOW", "smoothed", "on_target", "on_smoothed_target",
           "stopped_at_target", "stopped_runs"]

STOPPED = "stopped_at_target"
BUDGET = "step_budget"
#: evaluations in claim 4's running median: one lucky evaluation (val SE ~0.02 on 270 images) does not cross
SMOOTHING_WINDOW = 3


def smoothed(values) -> "pd.Series":
    """Trailing running median of the last :data:`SMOOTHING_WINDOW` evaluations (fewer at the start).

    Trailing, so a run can stop on it as it trains; its values are those of a centred window shifted by one
    evaluation, so the best of a curve (where a target is read) is the same either way."""
    return pd.Series(values, dtype=float).rolling(SMOOTHING_WINDOW, min_periods=1).median()


def on_target(row: Mapping, target: float, metric: ValMetric) -> bool:
    """Whether a metrics row is an evaluation at least as good as the target (claim 4's comparison:
    ``times_to_target``'s ``>=`` for accuracy, ``<=`` for bits per character)."""
    value = row.get(metric.column, math.nan)
    return value is not None and not math.isnan(value) and metric.better(float(value), float(target))


def on_smoothed_target(rows, target: float, metric: ValMetric) -> bool:
    """Whether the last evaluation of ``rows`` (metrics rows so far) is on the target after :func:`smoothed`;
    False when the last row is not an evaluation."""
    values = [float(r[metric.column]) for r in rows
              if r.get(metric.column) is not None and not math.isnan(r.get(metric.column, math.nan))]
    last = rows[-1].get(metric.column, math.nan) if rows else math.nan
    if not values or last is None or math.isnan(last):
        return False
    return metric.better(float(smoothed(values).iat[-1]), float(target))


def stopped_at_target(metrics: pd.DataFrame) -> bool:
    """Whether one run's metrics table ends at claim 4's target rather than at its budget."""
    return STOPPED in metrics and bool(metrics[STOPPED].fillna(False).astype(bool).any())


def stopped_runs(metrics: pd.DataFrame) -> set[str]:
    """The runs of a stacked metrics table (column ``run``) that stopped at the target."""
    if metrics.empty or STOPPED not in metrics or "run" not in metrics:
        return set()
    flags = metrics[STOPPED].fillna(False).astype(bool)
    return set(metrics.loc[flags, "run"])
