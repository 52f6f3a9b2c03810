"""The one time-to-target rule of claim 4 (the K-FAC optimizer trains faster than AdamW).

Protocol: every run evaluates on the whole validation split every ``max_eval_every`` (5) steps or
more often; each model has a *fixed* target, taken once from a long tuned AdamW run
(:func:`reference_target`), never from the runs being compared; each optimizer has at least
``min_seeds`` (:data:`MIN_SEEDS`, 8) seeds, none of them a tuning seed. A run's time to the target is
the step (and the training wall-clock) of its first evaluation at least as good as the target; a run
that never reaches it is right-censored at its last evaluation (the budget).

Inference for censored times (stats/survival.py): per optimizer the Kaplan-Meier median steps to the
target; the effect is the ratio of medians, proposed over each other optimizer, in steps and in
training seconds, with a two-sample percentile bootstrap interval over seeds; a log-rank test
(one-sided: the proposed optimizer reaches the target sooner) is reported beside it.

Verdict against the baseline (pre-registered margins): ``supported`` when the upper bound of the steps
ratio's interval is at most the upper end of the margin ``stats.margins.time_to_target_steps_ratio`` and
that of the seconds ratio at most that of ``time_to_target_seconds_ratio`` (the schema's defaults: 0.75 and 1.0);
``not supported`` when a lower bound lies above its margin; otherwise ``inconclusive`` (also
when neither optimizer's median is reached, so no ratio exists). A protocol that is not met (too few
seeds, evaluations too sparse, no target) makes the model ``inconclusive`` with a reason. The rule's
size at the real shape (seeds, censoring, evaluation grid) is simulated by
:func:`brownformer.stats.time_to_target_size.rule_error_rates`.

A run that stopped at the target (brownformer.target_stop) is an event like any other; its
``censored_at`` is its step budget (where it would have been censored), its ``final`` is undefined
(NaN: its last evaluation is the target, not a final value) and ``stopped`` is True.

Training seconds of a censored run: censored at the larger of its own last training time and the
latest time any run of its optimizer reached the target, so censoring is administrative (after every
event) and the median's bootstrap stays vectorised; a run that never gets there counts as slower
than every run that does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pandas as pd

from brownformer.config import ReportConfig, StatsConfig
from brownformer.metrics import METRIC_PREFERENCE, val_metric
from brownformer.target_stop import BUDGET, stopped_at_target

from .survival import MedianRatioResult, json_number, km_median, logrank_test, median_ratio

__all__ = ["MIN_SEEDS", "TimeToTargetResult", "reference_target", "time_to_target", "times_to_target",
           "censoring_times"]

#: cumulative seconds inside wall_time that are not training (brownformer.train writes both)
NOT_TRAINING_TIME = ("eval_wall_time", "probe_wall_time")
#: fewest seeds per compared optimizer for a verdict (issue 18: at least 8 per optimizer)
MIN_SEEDS = 8
#: widest spacing of evaluations (steps) for a verdict: the protocol evaluates the compared pair every 5 steps
MAX_EVAL_EVERY = 5


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
    return float(row["step"]), _training_seconds(row)


def _training_seconds(row) -> float:
    seconds = float(row["wall_time"]) if "wall_time" in row and pd.notna(row["wall_time"]) else np.nan
    for not_training in NOT_TRAINING_TIME:
        if not_training in row and pd.notna(row[not_training]):
            seconds -= float(row[not_training])
    return seconds


def censoring_times(df: pd.DataFrame, *, metric: str) -> tuple[float, float]:
    """``(step, seconds)`` of a run's last evaluation: where a run that never reaches the target is censored."""
    d = df.dropna(subset=[metric]).sort_values("step")
    if d.empty:
        return np.nan, np.nan
    return float(d["step"].iat[-1]), _training_seconds(d.iloc[-1])


@dataclass(frozen=True)
class TimeToTargetResult:
    """Claim-4 outcome for one model: per-run times, KM ratios and log-rank tests against every other optimizer."""

    model: str
    metric: str
    higher_is_better: bool
    target: float
    proposed: str
    baseline: str
    runs: pd.DataFrame = field(repr=False)  # optimizer, seed, run, steps, seconds, reached, final, censored_at
    medians: Mapping[str, float]  # optimizer -> KM median steps (inf: not reached within the budget)
    ratios: Mapping[str, Mapping[str, MedianRatioResult]]  # other optimizer -> {"steps", "seconds"}
    logrank: Mapping[str, Mapping[str, float | None]]  # other optimizer -> {"statistic", "pvalue"}
    verdict: str
    reason: str
    protocol_met: bool = False  # target, both optimizers, min_seeds each, evaluations close enough

    def to_dict(self) -> dict:
        runs = self.runs.replace([np.inf], None).to_dict("records")
        return {"model": self.model, "metric": self.metric, "higher_is_better": self.higher_is_better,
                "target": self.target, "proposed": self.proposed, "baseline": self.baseline, "runs": runs,
                "km_median_steps": {o: json_number(m) for o, m in self.medians.items()},
                "ratios": {o: {u: r.to_dict() for u, r in v.items()} for o, v in self.ratios.items()},
                "logrank": {o: {k: (None if v is None else json_number(v)) for k, v in t.items()}
                            for o, t in self.logrank.items()},
                "verdict": self.verdict, "reason": self.reason, "protocol_met": self.protocol_met}


def _fmt_ci(r: MedianRatioResult) -> str:
    return "[" + ", ".join(f"{c:.3g}" for c in r.confidence_interval) + "]"


def _verdict(ratio: Mapping[str, MedianRatioResult], *, steps_margin: float, seconds_margin: float) -> tuple[str, str]:
    steps, seconds = ratio["steps"], ratio["seconds"]
    if np.isnan(steps.estimate):
        return "inconclusive", ("neither optimizer reaches the target on half its seeds (both Kaplan-Meier medians "
                                "not reached): no ratio of medians exists")
    (s_lo, s_hi), (w_lo, w_hi) = steps.confidence_interval, seconds.confidence_interval
    if s_lo > steps_margin or w_lo > seconds_margin:
        return "not supported", (f"steps ratio CI {_fmt_ci(steps)} or seconds ratio CI {_fmt_ci(seconds)} lies above "
                                 f"its margin ({steps_margin}, {seconds_margin})")
    if s_hi <= steps_margin and w_hi <= seconds_margin:
        return "supported", (f"steps ratio CI {_fmt_ci(steps)} <= {steps_margin} and seconds ratio CI "
                             f"{_fmt_ci(seconds)} <= {seconds_margin}")
    return "inconclusive", (f"steps ratio CI {_fmt_ci(steps)} (margin {steps_margin}), seconds ratio CI "
                            f"{_fmt_ci(seconds)} (margin {seconds_margin}) straddle their margins")


def _run_rows(runs: Mapping[str, pd.DataFrame], specs, target: float, col: str, higher: bool) -> pd.DataFrame:
    rows = []
    for r, df in runs.items():
        steps, seconds = (times_to_target(df, target, metric=col, higher_is_better=higher)
                          if np.isfinite(target) else (np.inf, np.inf))
        last_step, last_seconds = censoring_times(df, metric=col)
        final = df[col].dropna()
        evals = df.dropna(subset=[col])["step"].sort_values().to_numpy()
        stopped = stopped_at_target(df)
        if stopped:  # censored_at: where it would have been censored; no final value (module docstring)
            last_step, final = float(df[BUDGET].iat[-1]), final.iloc[:0]
        rows.append({"optimizer": specs[r].optimizer, "seed": specs[r].seed, "run": r, "steps": steps,
                     "seconds": seconds, "reached": bool(np.isfinite(steps)), "censored_at": last_step,
                     "censored_seconds": last_seconds, "final": float(final.iat[-1]) if len(final) else np.nan,
                     "eval_spacing": float(np.diff(evals).max()) if evals.size > 1 else np.inf, "stopped": stopped})
    return pd.DataFrame(rows)


def _censored(g: pd.DataFrame, unit: str) -> tuple[np.ndarray, np.ndarray]:
    """(times, reached) of one optimizer's runs in ``unit`` (module docstring: seconds censored after every event)."""
    reached = g["reached"].to_numpy(bool)
    if unit == "steps":
        return np.where(reached, g["steps"], g["censored_at"]).astype(float), reached
    events = g.loc[g["reached"], "seconds"].to_numpy(float)
    latest = float(np.nanmax(events)) if events.size else 0.0
    censored = np.maximum(g["censored_seconds"].fillna(0.0).to_numpy(float), latest)
    return np.where(reached, g["seconds"], censored).astype(float), reached


def time_to_target(metrics_by_run: Mapping[str, pd.DataFrame], targets: Mapping[str, float], *, stats: StatsConfig,
                   report: ReportConfig, min_seeds: int = MIN_SEEDS,
                   max_eval_every: int = MAX_EVAL_EVERY) -> dict[str, TimeToTargetResult]:
    """Claim 4 per model under the one time-to-target rule (module docstring).

    Args:
        metrics_by_run: run id ``<model>__<optimizer>__s<seed>`` -> metrics with columns ``step``,
            ``wall_time`` (optional ``eval_wall_time``, ``probe_wall_time``) and val_accuracy | val_bpc | val_loss.
        targets: model -> fixed target value (:func:`reference_target` of a long tuned AdamW run).
        stats: The statistics settings: the margins ``time_to_target_steps_ratio`` (the largest steps ratio
            that counts as faster is its upper end) and ``time_to_target_seconds_ratio`` (wall-clock),
            ``confidence_level`` and ``n_resamples`` of the bootstrap intervals, ``seed``.
        report: The roles: ``proposed`` (the optimizer under test) and ``target_optimizer`` (the one the
            verdict compares against; ratios to all others are reported too).
        min_seeds: Fewest seeds per compared optimizer for a verdict other than inconclusive.
        max_eval_every: Widest spacing between evaluations (steps) for a verdict.

    Returns:
        model -> :class:`TimeToTargetResult` (models without runs of both optimizers included,
        with verdict ``inconclusive``).
    """
    from brownformer.config import RunSpec  # config imports nothing from stats: no cycle

    proposed, baseline = report.proposed, report.target_optimizer
    steps_margin = float(stats.margins["time_to_target_steps_ratio"][1])
    seconds_margin = float(stats.margins["time_to_target_seconds_ratio"][1])
    confidence_level, n_resamples = stats.confidence_level, stats.n_resamples
    rng = np.random.default_rng(stats.seed)
    specs = {r: RunSpec.parse(r) for r in metrics_by_run}
    out: dict[str, TimeToTargetResult] = {}
    for model in sorted({s.model for s in specs.values()}):
        runs = {r: df for r, df in sorted(metrics_by_run.items()) if specs[r].model == model}
        m = val_metric(next(iter(runs.values())))
        col, higher = m.column, m.higher_is_better
        target = float(targets.get(model, np.nan))
        table = _run_rows(runs, specs, target, col, higher)
        by_opt = {o: g for o, g in table.groupby("optimizer", sort=True)}
        medians = {o: km_median(*_censored(g, "steps")) for o, g in by_opt.items()}
        ratios: dict[str, dict[str, MedianRatioResult]] = {}
        logrank: dict[str, dict[str, float | None]] = {}
        mine = by_opt.get(proposed)
        for other, g in by_opt.items():
            if other == proposed or mine is None:
                continue
            ratios[other] = {u: median_ratio(_censored(mine, u), _censored(g, u), confidence_level=confidence_level,
                                             n_resamples=n_resamples, rng=rng) for u in ("steps", "seconds")}
            test = logrank_test(_censored(mine, "steps"), _censored(g, "steps"))
            logrank[other] = {"statistic": None if test is None else float(test.statistic),
                              "pvalue": None if test is None else float(test.pvalue)}
        seeds = table.groupby("optimizer")["seed"].nunique()
        met = False
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
            verdict, reason = _verdict(ratios[baseline], steps_margin=steps_margin, seconds_margin=seconds_margin)
            met = True
        out[model] = TimeToTargetResult(model=model, metric=col, higher_is_better=higher, target=target,
                                        proposed=proposed, baseline=baseline, runs=table, medians=medians,
                                        ratios=ratios, logrank=logrank, verdict=verdict, reason=reason,
                                        protocol_met=met)
    return out
