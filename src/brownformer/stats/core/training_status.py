"""Did a run train at all, and had it stopped improving? Rules applied before any claim pools a run.

did not train (any one suffices; the reason names which):
  1. diverged: a non-finite training loss or final validation metric;
  2. classifier at chance: final val accuracy <= chance + margin, where chance is the accuracy of
     always predicting the val split's most frequent class (1/n_classes for balanced data) and the
     margin is 3 binomial standard errors, 3 sqrt(c (1 - c) / n_val), the spread of a chance-level
     classifier's accuracy on n_val examples (calibrated to the split size, not a fixed number);
  3. language model at chance: final val bits per character not below the unigram cross-entropy
     H = -mean_t log2 p(x_t) of the val stream under the train split's add-one unigram law by more
     than 3 standard errors sd(-log2 p(x_t)) / sqrt(n_val) (a model that learnt nothing beyond
     character frequencies reaches H).
Without the prepared data only rule 1 applies (and the status says so).

reached a plateau: the validation metric improved by less than PLATEAU_RELATIVE_GAIN (1%) of its
value over the last PLATEAU_FRACTION (20%) of the logged steps; undefined (None) for a run that
stopped at claim 4's target (brownformer.target_stop), whose curve ends while it still improves.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from brownformer.metrics import val_metric, val_series
from brownformer.target_stop import stopped_at_target

__all__ = ["RULES", "ChanceBaseline", "TrainingStatus", "did_not_train", "reached_plateau",
           "training_status", "PLATEAU_FRACTION", "PLATEAU_RELATIVE_GAIN", "CHANCE_SE_MULTIPLE"]

# The chance levels are read from the prepared data by brownformer.stats_stage.chance_baseline.
#: the rules above, quoted beside every run's status (training_status.json)
RULES = " ".join(__doc__.split())
PLATEAU_FRACTION = 0.2
PLATEAU_RELATIVE_GAIN = 0.01
#: standard errors between chance and "trained": 3 keeps a chance-level run's false "trained" rate ~0.1%
CHANCE_SE_MULTIPLE = 3.0


@dataclass(frozen=True)
class ChanceBaseline:
    """What a model that learnt nothing scores on the val split, and the margin around it.

    Attributes:
        metric: "val_accuracy" or "val_bpc".
        value: chance accuracy, or unigram bits per character.
        margin: CHANCE_SE_MULTIPLE standard errors of that value on the val split.
        description: how value and margin were computed.
    """
    metric: str
    value: float
    margin: float
    description: str


@dataclass(frozen=True)
class TrainingStatus:
    """One run's status: did_not_train with its reason, and whether the val metric had plateaued."""
    did_not_train: bool
    reason: str
    reached_plateau: bool | None
    metric: str | None
    final: float | None
    chance: float | None
    margin: float | None

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def did_not_train(metrics: pd.DataFrame, baseline: ChanceBaseline | None = None) -> tuple[bool, str]:
    """Apply the did-not-train rules (module docstring) to one run's metrics table.

    Returns:
        (flag, reason): the reason says which rule fired, or why the run counts as trained.
    """
    if "train_loss" in metrics and not np.all(np.isfinite(metrics["train_loss"].to_numpy(float))):
        step = metrics.loc[~np.isfinite(metrics["train_loss"].to_numpy(float)), "step"].iat[0]
        return True, f"diverged: non-finite training loss at step {int(step)}"
    try:
        metric = val_metric(metrics)
    except ValueError as exc:
        return True, f"no validation metric: {exc}"
    s = val_series(metrics, metric)
    final = float(s["value"].iat[-1])
    if not math.isfinite(final):
        return True, f"diverged: final {metric.column} is {final}"
    if baseline is None or baseline.metric != metric.column:
        return False, f"finite losses; final {metric.column} {final:.4g} (no chance baseline for {metric.column})"
    if metric.higher_is_better and final <= baseline.value + baseline.margin:
        return True, (f"at chance: final {metric.column} {final:.4g} <= chance {baseline.value:.4g} + margin "
                      f"{baseline.margin:.3g}")
    if not metric.higher_is_better and final >= baseline.value - baseline.margin:
        return True, (f"at chance: final {metric.column} {final:.4g} not below the unigram level "
                      f"{baseline.value:.4g} - margin {baseline.margin:.3g}")
    return False, (f"trained: final {metric.column} {final:.4g} beyond chance {baseline.value:.4g} "
                   f"+- {baseline.margin:.3g}")


def reached_plateau(metrics: pd.DataFrame) -> bool | None:
    """True when the val metric gained < PLATEAU_RELATIVE_GAIN of its value over the last PLATEAU_FRACTION
    of the logged steps; None with fewer than two evaluations in reach or for a run stopped at the target."""
    try:
        metric = val_metric(metrics)
    except ValueError:
        return None
    s = val_series(metrics, metric)
    if len(s) < 2 or stopped_at_target(metrics):
        return None
    start_step = (1 - PLATEAU_FRACTION) * float(s["step"].iat[-1])
    before = s[s["step"] <= start_step]  # the evaluation at (or just before) the window's start
    start = float((before if len(before) else s)["value"].iat[-1])
    final = float(s["value"].iat[-1])
    if not (math.isfinite(start) and math.isfinite(final)) or start == 0:
        return None
    gain = (final - start) if metric.higher_is_better else (start - final)
    return bool(gain / abs(start) < PLATEAU_RELATIVE_GAIN)


def training_status(metrics: pd.DataFrame, baseline: ChanceBaseline | None = None) -> TrainingStatus:
    """did_not_train and reached_plateau of one run, with the numbers behind them."""
    flag, reason = did_not_train(metrics, baseline)
    try:
        metric = val_metric(metrics)
        final = float(val_series(metrics, metric)["value"].iat[-1])
    except (ValueError, IndexError):
        metric, final = None, None
    use = baseline is not None and metric is not None and baseline.metric == metric.column
    return TrainingStatus(flag, reason, reached_plateau(metrics), metric.column if metric else None, final,
                          baseline.value if use else None, baseline.margin if use else None)
