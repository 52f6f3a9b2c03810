"""The one time-to-target rule of claim 4 (the K-FAC optimizer trains faster than AdamW).

Protocol (issue 11, item 4): every run evaluates on the whole validation split every
``max_eval_every`` (5) steps or more often; each model has a *fixed* target, taken once from a
long tuned AdamW run (:func:`reference_target`), never from the runs being compared; each
optimizer has at least ``min_seeds`` (5) seeds. A run's time to target is the step (and the
training wall-clock) of its first evaluation at least as good as the target; a run that never
reaches it has time ``inf`` (censored: slower than any run that does). Per model, the effect is the ratio
of median times, proposed over baseline, in steps and in seconds, with a percentile bootstrap CI that resamples seeds
independently within each optimizer (Efron & Tibshirani 1993, ch. 16, two-sample bootstrap).

Verdict (pre-registered margins, equivalence style): ``supported`` when the upper CI bound of the
steps ratio is ``<= steps_margin`` (0.75) AND that of the seconds ratio is ``<= seconds_margin``
(1.0); ``not supported`` when a lower CI bound lies above its margin (or the proposed optimizer
never reaches the target on most seeds while the baseline does); otherwise ``inconclusive`` (also when
neither reaches it on most seeds: then no ratio of medians exists). A protocol that is not met
(too few seeds, evaluations too sparse, no target) makes the model ``inconclusive`` with a reason.

The bootstrap is written with numpy rather than ``scipy.stats.bootstrap`` because runs that never
reach the target carry ``inf``, which scipy's interval methods turn into NaN; a ratio of medians with
an ``inf`` numerator is a meaningful ``inf`` here, and order statistics (``method="inverted_cdf"``)
keep it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pandas as pd

from brownformer.metrics import METRIC_PREFERENCE, val_metric

__all__ = ["TimeToTargetResult", "RatioEstimate", "reference_target", "time_to_target", "times_to_target"]

#: cumulative seconds inside wall_time that are not training (brownformer.train writes both)
NOT_TRAINING_TIME = ("eval_wall_time", "probe_wall_time")


def reference_target(reference: pd.DataFrame, *, fraction: float = 0.9, metric: str | None = None) -> float:
    """Fixed target of one model from a long tuned AdamW run: ``start + fraction (best - start)``.

    ``start`` is the run's first evaluation (about chance), ``best`` the best value of its
    3-point running median (robust to one lucky evaluation). With ``fraction < 1`` a target sits on
    the steep part of every optimizer's curve rather than on the noisy plateau.

    Args:
        reference: Metrics of the reference run (columns step and the metric).
        fraction: Share of the reference run's improvement the target asks for, in (0, 1].
        metric: Column to use (default: val_accuracy, else val_bpc, else val_loss).

    Returns:
        The target value of ``metric``.

    Raises:
        ValueError: On a fraction outside (0, 1] or a run with fewer than 3 evaluations.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    m = next((m for m in METRIC_PREFERENCE if m.column == metric), None) if metric else val_metric(reference)
    if m is None:
        raise ValueError(f"unknown metric {metric!r}; known: {[m.column for m in METRIC_PREFERENCE]}")
    col, higher = m.column, m.higher_is_better
    curve = reference.dropna(subset=[col]).sort_values("step")[col].to_numpy(float)
    if curve.size < 3:
        raise ValueError(f"reference run has {curve.size} evaluations of {col}; need >= 3")
    smooth = pd.Series(curve).rolling(3, center=True, min_periods=1).median().to_numpy()
    best = smooth.max() if higher else smooth.min()
    return float(curve[0] + fraction * (best - curve[0]))


def times_to_target(df: pd.DataFrame, target: float, *, metric: str, higher_is_better: bool) -> tuple[float, float]:
    """``(steps, seconds)`` at the first evaluation at least as good as ``target``; ``inf`` if never.

    Seconds are training wall-clock: ``wall_time`` minus the cumulative evaluation time
    ``eval_wall_time`` and the cumulative probe-capture time ``probe_wall_time``, each when the
    metrics carry it (evaluating every 5 steps on the whole split, and capturing probes on some runs
    but not others, must not count as training time):
    ``seconds = wall_time - eval_wall_time - probe_wall_time``.
    """
    d = df.dropna(subset=[metric]).sort_values("step")
    hit = d[d[metric] >= target] if higher_is_better else d[d[metric] <= target]
    if hit.empty:
        return np.inf, np.inf
    row = hit.iloc[0]
    seconds = float(row["wall_time"]) if "wall_time" in row and pd.notna(row["wall_time"]) else np.nan
    for not_training in NOT_TRAINING_TIME:
        if not_training in row and pd.notna(row[not_training]):
            seconds -= float(row[not_training])
    return float(row["step"]), seconds


@dataclass(frozen=True)
class RatioEstimate:
    """Ratio of median times (proposed / other) with its percentile bootstrap interval."""

    estimate: float
    confidence_interval: tuple[float, float]
    confidence_level: float
    n: tuple[int, int]

    def to_dict(self) -> dict:
        return {"estimate": self.estimate, "confidence_interval": list(self.confidence_interval),
                "confidence_level": self.confidence_level, "n": list(self.n)}


def _ratio_of_medians(num: np.ndarray, den: np.ndarray, *, confidence_level: float, n_resamples: int,
                    rng: np.random.Generator) -> RatioEstimate:
    """median(num) / median(den), resampling each sample independently.

    Medians, not means: one censored seed (never reaching the target, time ``inf``) makes a mean ``inf``
    for both optimizers alike, so the ratio says nothing; the median is defined while fewer than half
    the seeds are censored.
    """
    with np.errstate(all="ignore"):
        point = float(np.median(num) / np.median(den))
        boot_num = np.median(num[rng.integers(0, num.size, (n_resamples, num.size))], axis=1)
        boot_den = np.median(den[rng.integers(0, den.size, (n_resamples, den.size))], axis=1)
        boot = boot_num / boot_den
    # inf / inf (both never reach the target in a resample): counted against the proposed optimizer
    boot = np.where(np.isnan(boot), np.inf, boot)
    point = np.inf if np.isnan(point) else point  # the same rule for the point estimate
    a = (1 - confidence_level) / 2
    lo, hi = np.quantile(boot, [a, 1 - a], method="inverted_cdf")
    return RatioEstimate(point, (float(lo), float(hi)), confidence_level, (int(num.size), int(den.size)))


@dataclass(frozen=True)
class TimeToTargetResult:
    """Claim-4 outcome for one model: per-run times, ratios to every other optimizer, verdict."""

    model: str
    metric: str
    higher_is_better: bool
    target: float
    proposed: str
    baseline: str
    runs: pd.DataFrame = field(repr=False)  # optimizer, seed, run, steps, seconds, reached, final
    ratios: Mapping[str, Mapping[str, RatioEstimate]]  # other optimizer -> {"steps", "seconds"}
    verdict: str
    reason: str

    def to_dict(self) -> dict:
        runs = self.runs.replace([np.inf], None).to_dict("records")
        return {"model": self.model, "metric": self.metric, "higher_is_better": self.higher_is_better,
                "target": self.target, "proposed": self.proposed, "baseline": self.baseline, "runs": runs,
                "ratios": {o: {u: r.to_dict() for u, r in v.items()} for o, v in self.ratios.items()},
                "verdict": self.verdict, "reason": self.reason}


def _verdict(ratio: Mapping[str, RatioEstimate], never: float, *, steps_margin: float,
             seconds_margin: float, baseline_never: float = 0.0) -> tuple[str, str]:
    steps, seconds = ratio["steps"], ratio["seconds"]
    if never > 0.5 and baseline_never > 0.5:
        # both medians are "never": no ratio exists, and the baseline failing too says the target, not the
        # proposed optimizer, is out of reach at this run length
        return "inconclusive", (f"neither optimizer reaches the target on most seeds (proposed misses on {never:.0%}, "
                                f"baseline on {baseline_never:.0%}): no ratio of medians exists")
    if never > 0.5:
        return "not supported", f"the proposed optimizer never reaches the target on {never:.0%} of seeds"
    if steps.confidence_interval[0] > steps_margin or seconds.confidence_interval[0] > seconds_margin:
        return "not supported", (f"steps ratio CI {steps.confidence_interval} or seconds ratio CI "
                                 f"{seconds.confidence_interval} lies above its margin ({steps_margin}, {seconds_margin})")
    if steps.confidence_interval[1] <= steps_margin and seconds.confidence_interval[1] <= seconds_margin:
        return "supported", (f"steps ratio CI {steps.confidence_interval} <= {steps_margin} and seconds ratio CI "
                             f"{seconds.confidence_interval} <= {seconds_margin}")
    return "inconclusive", (f"steps ratio CI {steps.confidence_interval} (margin {steps_margin}), seconds ratio CI "
                            f"{seconds.confidence_interval} (margin {seconds_margin}) straddle their margins")


def time_to_target(metrics_by_run: Mapping[str, pd.DataFrame], targets: Mapping[str, float], *,
                   proposed: str = "kfac-iterative", baseline: str = "adamw", steps_margin: float = 0.75,
                   seconds_margin: float = 1.0, min_seeds: int = 5, max_eval_every: int = 5,
                   confidence_level: float = 0.95, n_resamples: int = 9999, rng=0) -> dict[str, TimeToTargetResult]:
    """Claim 4 per model under the one time-to-target rule (module docstring).

    Args:
        metrics_by_run: run id ``<model>__<optimizer>__s<seed>`` -> metrics with columns ``step``,
            ``wall_time`` (optional ``eval_wall_time``, ``probe_wall_time``) and val_accuracy | val_bpc | val_loss.
        targets: model -> fixed target value (:func:`reference_target` of a long tuned AdamW run).
        proposed: The optimizer under test.
        baseline: The optimizer the verdict compares against (ratios to all others are reported too).
        steps_margin: Largest steps ratio that counts as faster (0.75: the issue's target).
        seconds_margin: Largest wall-clock ratio that counts as faster (1.0).
        min_seeds: Fewest seeds per optimizer for a verdict other than inconclusive.
        max_eval_every: Widest spacing between evaluations (steps) for a verdict.
        confidence_level: Level of the bootstrap intervals.
        n_resamples: Bootstrap resamples.
        rng: Seed or ``numpy.random.Generator``.

    Returns:
        model -> :class:`TimeToTargetResult` (models without runs of both optimizers included,
        with verdict ``inconclusive``).
    """
    from brownformer.config import RunSpec  # config imports nothing from stats: no cycle

    rng = np.random.default_rng(rng)
    specs = {r: RunSpec.parse(r) for r in metrics_by_run}
    out: dict[str, TimeToTargetResult] = {}
    for model in sorted({s.model for s in specs.values()}):
        runs = {r: df for r, df in sorted(metrics_by_run.items()) if specs[r].model == model}
        m = val_metric(next(iter(runs.values())))
        col, higher = m.column, m.higher_is_better
        target = float(targets.get(model, np.nan))
        rows = []
        for r, df in runs.items():
            steps, seconds = (times_to_target(df, target, metric=col, higher_is_better=higher)
                              if np.isfinite(target) else (np.inf, np.inf))
            final = df[col].dropna()
            evals = df.dropna(subset=[col])["step"].sort_values().to_numpy()
            rows.append({"optimizer": specs[r].optimizer, "seed": specs[r].seed, "run": r, "steps": steps,
                         "seconds": seconds, "reached": bool(np.isfinite(steps)),
                         "final": float(final.iat[-1]) if len(final) else np.nan,
                         "eval_spacing": float(np.diff(evals).max()) if evals.size > 1 else np.inf})
        table = pd.DataFrame(rows)
        ratios: dict[str, dict[str, RatioEstimate]] = {}
        mine = table[table["optimizer"] == proposed]
        for other, g in table.groupby("optimizer", sort=True):
            if other == proposed or mine.empty:
                continue
            ratios[other] = {u: _ratio_of_medians(mine[u].to_numpy(float), g[u].to_numpy(float),
                                                confidence_level=confidence_level, n_resamples=n_resamples, rng=rng)
                             for u in ("steps", "seconds")}
        seeds = table.groupby("optimizer")["seed"].nunique()
        if not np.isfinite(target):
            verdict, reason = "inconclusive", f"no target for model {model!r}"
        elif baseline not in ratios:
            verdict, reason = "inconclusive", f"needs runs of both {proposed!r} and {baseline!r}"
        elif seeds[[proposed, baseline]].min() < min_seeds:
            verdict, reason = "inconclusive", f"fewer than {min_seeds} seeds per optimizer ({seeds.to_dict()})"
        elif table.loc[table["optimizer"].isin([proposed, baseline]), "eval_spacing"].max() > max_eval_every:
            # only the compared pair must meet the protocol: other optimizers of the grid may evaluate less often
            verdict, reason = "inconclusive", f"evaluations more than {max_eval_every} steps apart"
        else:
            base = table[table["optimizer"] == baseline]
            verdict, reason = _verdict(ratios[baseline], 1 - mine["reached"].mean(),
                                       steps_margin=steps_margin, seconds_margin=seconds_margin,
                                       baseline_never=1 - base["reached"].mean())
        out[model] = TimeToTargetResult(model=model, metric=col, higher_is_better=higher, target=target,
                                        proposed=proposed, baseline=baseline, runs=table, ratios=ratios,
                                        verdict=verdict, reason=reason)
    return out
