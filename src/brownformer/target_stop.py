"""Metrics-only runs that stop at claim 4's target (grid blocks with ``stop_at_target: true``).

Claim 4 reads a run's first evaluation at or past ``report.targets[model]`` (stats/time_to_target.py); a
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

__all__ = ["STOPPED", "BUDGET", "on_target", "stopped_at_target", "stopped_runs"]

STOPPED = "stopped_at_target"
BUDGET = "step_budget"


def on_target(row: Mapping, target: float, metric: ValMetric) -> bool:
    """Whether a metrics row is an evaluation at least as good as the target (claim 4's comparison:
    ``times_to_target``'s ``>=`` for accuracy, ``<=`` for bits per character)."""
    value = row.get(metric.column, math.nan)
    return value is not None and not math.isnan(value) and metric.better(float(value), float(target))


def stopped_at_target(metrics: pd.DataFrame) -> bool:
    """Whether one run's metrics table ends at claim 4's target rather than at its budget."""
    return STOPPED in metrics and bool(metrics[STOPPED].fillna(False).astype(bool).any())


def stopped_runs(metrics: pd.DataFrame) -> set[str]:
    """The runs of a stacked metrics table (column ``run``) that stopped at the target."""
    if metrics.empty or STOPPED not in metrics or "run" not in metrics:
        return set()
    flags = metrics[STOPPED].fillna(False).astype(bool)
    return set(metrics.loc[flags, "run"])
