"""The one time-to-target rule of claim 4 (iterative K-FAC trains faster than the best first-order optimizer).

Protocol: every run evaluates on the whole validation split every ``max_eval_every`` (5) steps or
more often; each model has a *fixed* target, taken once from a long tuned run (:func:`reference_target`),
never from the runs being compared; the proposed optimizer and every baseline have at least
``min_seeds`` (:data:`MIN_SEEDS`, 8) seeds, none of them a tuning seed. A run's time to the target is
the step (and the training wall-clock) of its first evaluation whose running median
(brownformer.target_stop.smoothed, the smoothing the target is read on) is at least as good as the
target; a run that never gets there, or that did not train (stats/core/training_status.py), is
right-censored at its budget: censored, never dropped.

Inference for censored times (stats/comparison/survival.py): per optimizer the Kaplan-Meier median steps (a
median not reached is the bound "> budget"); against each baseline the accelerated-failure-time log-rank test,
which scales the proposed times by ``1 / margin`` and asks whether they still reach the target sooner; its
inversion over the ratio gives the interval, and the ratio where its statistic crosses 0 the estimate (proposed /
baseline, a bound when the data cannot bound it), inside that interval. The ratio of medians is kept beside it,
descriptive. Verdict per baseline (pre-registered margins):
``supported`` when the one-sided test at the steps margin (the upper end of
``stats.margins.time_to_target_steps_ratio``) rejects "ratio >= margin" and the seconds test at
``time_to_target_seconds_ratio`` does too, each at level ``(1 - confidence_level) / 2``;
``not supported`` when either rejects "ratio <= margin"; otherwise ``inconclusive``. Across the
baselines (``report.baselines``: AdamW, Muon, SGD) the model's verdict is the intersection-union
one: supported when K-FAC beats every baseline, so the best of them; not supported when some
baseline is at least as fast; the best baseline (smallest KM median) is the one reported as the
comparator. A protocol that is not met (a baseline missing or with too few seeds, evaluations too
sparse, no target) makes the model ``inconclusive`` with a reason. The rule's size at the real shape
is simulated by :func:`brownformer.stats.comparison.time_to_target_size.rule_error_rates` (claims/claim4_optimizer.py
gates the verdict on it).

Seconds are reported as steps x measured step cost (:func:`_ratios`): the seconds ratio is the steps
ratio times the ratio of the optimizers' median training seconds per step (``wall_time`` minus
evaluation and probe time, over the steps), so the runs need not have run side by side; each optimizer's median
seconds to the target (the seconds ratio's ``medians``) is its KM median steps times its own seconds per step.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import ClassVar, Mapping

import numpy as np
import pandas as pd
from scipy import stats as sps

from brownformer.config import ReportConfig, StatsConfig
from brownformer.io import to_jsonable
from brownformer.metrics import METRIC_PREFERENCE, val_metric
from brownformer.statsfile import Decision, Keyed
from brownformer.target_stop import BUDGET, smoothed, stopped_at_target

from brownformer.stats.comparison.survival import (CensoredMedian, MedianRatioResult, km_median_bounded, median_ratio,
                                                  scaled_logrank)

__all__ = ["MIN_SEEDS", "MAX_EVAL_EVERY", "TimeToTargetResult", "ClockRatios", "FinalMetric", "reference_target",
           "level_target", "time_to_target", "times_to_target", "censoring_times", "with_critical_values",
           "deciding_baseline"]

#: cumulative seconds inside wall_time that are not training (brownformer.train writes both)
NOT_TRAINING_TIME = ("eval_wall_time", "probe_wall_time")
#: fewest seeds per compared optimizer for a verdict (issue 18: at least 8 per optimizer)
MIN_SEEDS = 8
#: widest spacing of evaluations (steps) for a verdict: the protocol evaluates the compared runs every 5 steps
MAX_EVAL_EVERY = 5


def _metric(df: pd.DataFrame, metric: str | None):
    m = next((m for m in METRIC_PREFERENCE if m.column == metric), None) if metric else val_metric(df)
    if m is None:
        raise ValueError(f"unknown metric {metric!r}; known: {[m.column for m in METRIC_PREFERENCE]}")
    return m


def reference_target(reference: pd.DataFrame, *, fraction: float = 0.9, metric: str | None = None) -> float:
    """Fixed target of one model from a long tuned run: ``start + fraction (best - start)``.

    ``start`` is the run's first evaluation (about chance), ``best`` the best value of its running
    median (brownformer.target_stop.smoothed, robust to one lucky evaluation; the crossing is read on the
    same smoothing). With ``fraction < 1`` a target sits on the steep part of every optimizer's curve
    rather than on the noisy plateau.

    Raises:
        ValueError: On a fraction outside (0, 1] or a run with fewer than 3 evaluations.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    m = _metric(reference, metric)
    curve = reference.dropna(subset=[m.column]).sort_values("step")[m.column].to_numpy(float)
    if curve.size < 3:
        raise ValueError(f"reference run has {curve.size} evaluations of {m.column}; need >= 3")
    smooth = smoothed(curve).to_numpy()
    best = smooth.max() if m.higher_is_better else smooth.min()
    return float(curve[0] + fraction * (best - curve[0]))


def level_target(main: float, start: float, level: float, main_level: float) -> float:
    """The target at share ``level`` of the improvement whose share ``main_level`` is the target ``main``:
    ``start + (level / main_level) (main - start)`` (:func:`reference_target`'s line through the same start)."""
    return float(start + (level / main_level) * (main - start))


def times_to_target(df: pd.DataFrame, target: float, *, metric: str, higher_is_better: bool) -> tuple[float, float]:
    """``(steps, seconds)`` at the first evaluation whose running median reaches ``target``; ``inf`` if never.

    Seconds are training wall-clock: ``wall_time - eval_wall_time - probe_wall_time``, each when the
    metrics carry it (evaluating every 5 steps on the whole split, and capturing probes on some runs
    but not others, must not count as training time).
    """
    d = df.dropna(subset=[metric]).sort_values("step").reset_index(drop=True)
    s = smoothed(d[metric].to_numpy(float))
    hit = d[(s >= target) if higher_is_better else (s <= target)]
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
class ClockRatios:
    """The proposed optimizer's time-to-target ratio against one other optimizer on both clocks (:func:`_ratios`),
    each with the two optimizers' KM medians on its own clock (steps; training seconds)."""

    steps: MedianRatioResult
    seconds: MedianRatioResult

    def to_dict(self) -> dict:
        return {"steps": self.steps.to_dict(), "seconds": self.seconds.to_dict()}


@dataclass(frozen=True)
class TimeToTargetResult:
    """Claim-4 outcome for one model at one target: per-run times, medians, ratios and verdicts per baseline.

    ``baseline`` is the comparator reported first: the best baseline (smallest KM median steps); the
    verdict is the intersection-union one over every baseline of ``baselines`` (module docstring).
    """

    model: str
    metric: str
    higher_is_better: bool
    target: float
    proposed: str
    baseline: str
    runs: pd.DataFrame = field(repr=False)  # optimizer, seed, run, steps, seconds, reached, final, censored_at, ...
    medians: Mapping[str, CensoredMedian]  # optimizer -> KM median steps ("> budget" when not reached)
    ratios: Mapping[str, ClockRatios]  # other optimizer -> its ratios
    verdict: str
    reason: str
    protocol_met: bool  # target, every baseline, min_seeds each, evaluations close enough
    baselines: tuple[str, ...]  # report.baselines
    verdicts: Mapping[str, Decision]  # baseline -> its verdict and why
    final: Mapping[str, FinalMetric]  # optimizer -> final metric at the budget
    _key: ClassVar[str] = "model"  # in time_to_target's Keyed result

    def to_dict(self) -> dict:
        runs = self.runs.replace([np.inf], None).to_dict("records")
        return {"model": self.model, "metric": self.metric, "higher_is_better": self.higher_is_better,
                "target": self.target, "proposed": self.proposed, "baseline": self.baseline,
                "baselines": list(self.baselines), "runs": runs,
                "km_median_steps": {o: m.to_dict() for o, m in self.medians.items()},
                "ratios": {o: r.to_dict() for o, r in self.ratios.items()},
                "verdicts": {b: d.to_dict() for b, d in self.verdicts.items()},
                "final_at_budget": {o: v.to_dict() for o, v in self.final.items()},
                "verdict": self.verdict, "reason": self.reason, "protocol_met": self.protocol_met}


def _fmt_ci(r: MedianRatioResult) -> str:
    return "[" + ", ".join(f"{c:.3g}" for c in r.confidence_interval) + "]"


def _verdict(ratio: ClockRatios, critical: tuple[float, float] | None = None) -> Decision:
    """One baseline's verdict from the one-sided AFT log-rank tests at the margins (module docstring).

    ``critical``: the steps statistic's ``(faster, slower)`` critical values calibrated at the comparison's shape
    (time_to_target_size.calibrated_critical); None: the normal ones, i.e. the p-values at half the complement
    of the confidence level. The seconds test stays at the normal level."""
    steps, seconds = ratio.steps, ratio.seconds
    level = (1 - steps.confidence_level) / 2
    text = (f"steps ratio (AFT estimate) {steps.text()} CI {_fmt_ci(steps)} (margin {steps.margin:g}, one-sided p "
            f"{steps.pvalue:.3g}), seconds ratio {seconds.text()} CI {_fmt_ci(seconds)} (margin "
            f"{seconds.margin:g}, p {seconds.pvalue:.3g})")
    if critical is None:
        slower, faster = steps.pvalue_slower < level, steps.pvalue < level
        rule = f"p < {level:g}"
    else:
        slower, faster = steps.statistic < critical[1], steps.statistic > critical[0]
        rule = (f"steps statistic {steps.statistic:.3g} against its critical values {critical[0]:.3g} / "
                f"{critical[1]:.3g} simulated at this shape; seconds p < {level:g}")
    if slower or seconds.pvalue_slower < level:
        return Decision("not supported", text + f": at least as slow as a margin allows ({rule})")
    if faster and seconds.pvalue < level:
        return Decision("supported", text + f": faster than both margins ({rule})")
    return Decision("inconclusive", text + ": not decided at the margins")


def with_critical_values(res: "TimeToTargetResult",
                         critical: Mapping[str, tuple[float, float]]) -> "TimeToTargetResult":
    """``res`` decided again with each baseline's steps test at its calibrated critical values (``critical``:
    baseline -> (faster, slower); claims/claim4_optimizer.py simulates them at the comparison's shape). A result
    whose protocol is not met stays as it is."""
    if not res.protocol_met:
        return res
    verdicts = {b: _verdict(res.ratios[b], critical.get(b)) for b in res.verdicts}
    verdict, reason = _pooled(verdicts, res.ratios)
    return dataclasses.replace(res, verdicts=verdicts, verdict=verdict, reason=reason)


def deciding_baseline(verdicts: Mapping[str, Decision], ratios: Mapping[str, ClockRatios]) -> str | None:
    """The baseline a "not supported" names: of those not beaten, the one the steps test finds most clearly
    faster than the proposed optimizer (smallest steps statistic; the rank statistic saturates when the groups
    separate completely, so then the largest steps ratio), so the best baseline when it decides."""
    slower = [b for b in sorted(verdicts) if verdicts[b].verdict == "not supported"]

    def key(b):
        steps = ratios[b].steps if b in ratios else None
        stat = steps.statistic if steps is not None and math.isfinite(steps.statistic) else math.inf
        ratio = steps.estimate if steps is not None and math.isfinite(steps.estimate) else -math.inf
        return round(stat, 9), -ratio, b
    return min(slower, key=key) if slower else None


def _pooled(verdicts: Mapping[str, Decision], ratios: Mapping[str, ClockRatios]) -> tuple[str, str]:
    """Intersection-union over the baselines: supported iff every one is; not supported iff some one is."""
    names = sorted(verdicts)
    b = deciding_baseline(verdicts, ratios)
    if b is not None:
        return "not supported", f"not faster than {b}: {verdicts[b].reason}"
    if all(verdicts[b].verdict == "supported" for b in names):
        return "supported", "; ".join(f"vs {b}: {verdicts[b].reason}" for b in names)
    b = next(b for b in names if verdicts[b].verdict != "supported")
    return "inconclusive", f"vs {b}: {verdicts[b].reason}"


def _run_rows(runs: Mapping[str, pd.DataFrame], specs, target: float, col: str, higher: bool,
              excluded: Mapping[str, str]) -> pd.DataFrame:
    rows = []
    for r, df in runs.items():
        steps, seconds = (times_to_target(df, target, metric=col, higher_is_better=higher)
                          if np.isfinite(target) else (np.inf, np.inf))
        last_step, last_seconds = censoring_times(df, metric=col)
        step_cost = last_seconds / last_step if last_step and np.isfinite(last_seconds) else np.nan
        final = df[col].dropna()
        evals = df.dropna(subset=[col])["step"].sort_values().to_numpy()
        stopped = stopped_at_target(df)
        if stopped:  # censored_at: where it would have been censored; no final value (module docstring)
            last_step, final = float(df[BUDGET].iat[-1]), final.iloc[:0]
        if r in excluded:  # did not train: censored at its budget, whatever its curve touched
            steps, seconds = np.inf, np.inf
        rows.append({"optimizer": specs[r].optimizer, "seed": specs[r].seed, "run": r, "steps": steps,
                     "seconds": seconds, "reached": bool(np.isfinite(steps)), "censored_at": last_step,
                     "censored_seconds": last_seconds, "final": float(final.iat[-1]) if len(final) else np.nan,
                     "step_cost": step_cost,
                     "eval_spacing": float(np.diff(evals).max()) if evals.size > 1 else np.inf, "stopped": stopped,
                     "did_not_train": excluded.get(r)})
    return pd.DataFrame(rows)


def _censored(g: pd.DataFrame, unit: str) -> tuple[np.ndarray, np.ndarray]:
    """(times, reached) of one optimizer's runs in ``unit``; a censored run at its own last time."""
    reached = g["reached"].to_numpy(bool)
    times = g[unit].to_numpy(float)
    last = g["censored_at" if unit == "steps" else "censored_seconds"].to_numpy(float)
    seen = np.concatenate([times[reached], last])
    seen = seen[np.isfinite(seen)]
    # metrics without a wall clock: censored after every time seen (no run of the group is known to be faster)
    last = np.where(np.isfinite(last), last, seen.max() if seen.size else 0.0)
    return np.where(reached, times, last), reached


def _step_cost(g: pd.DataFrame) -> float:
    """One optimizer's measured step cost: the median over its runs of training seconds per step (each run's training
    seconds at its last evaluation over its steps); ``nan`` without a wall clock."""
    cost = float(np.nanmedian(g["step_cost"])) if g["step_cost"].notna().any() else np.nan
    return cost if np.isfinite(cost) and cost > 0 else np.nan


def _in_seconds(m: CensoredMedian, cost: float) -> CensoredMedian:
    """A KM median in steps as training seconds: ``m x cost`` (a bound stays a bound; undefined without a cost)."""
    if not np.isfinite(cost):
        return CensoredMedian(math.nan, None, m.n, m.n_censored)
    return CensoredMedian(m.estimate * cost, m.bound, m.n, m.n_censored)


def _ratios(mine: pd.DataFrame, other: pd.DataFrame, margins: Mapping[str, float], confidence_level: float,
            grid: float) -> ClockRatios:
    """Steps ratio, and seconds as steps x measured step cost (module docstring).

    Seconds ratio = steps ratio x ``c``, ``c = cost_proposed / cost_baseline`` the ratio of the optimizers' step
    costs (:func:`_step_cost`): "seconds ratio <= m" is "steps ratio <= m / c", so the seconds test is the steps test
    at that margin, and its AFT estimate, interval and ratio of KM medians are the steps ones times ``c`` (a bound
    stays a bound on the same side). Its medians are seconds: each optimizer's KM median steps (as the steps record
    reads them, at the middle of their evaluation interval) times its own step cost, so their ratio is the seconds
    ratio of KM medians.
    Per-run wall-clocks of runs that did not run side by side carry the machine's load of the moment; the
    median cost per step over 8 runs does much less."""
    prop, base = _censored(mine, "steps"), _censored(other, "steps")
    steps = median_ratio(prop, base, margin=margins["steps"], confidence_level=confidence_level, grid=grid)
    cost = (_step_cost(mine), _step_cost(other))
    medians = tuple(_in_seconds(m, k) for m, k in zip(steps.medians, cost))
    c = cost[0] / cost[1]
    if not np.isfinite(c):
        nan = float("nan")
        return ClockRatios(steps, dataclasses.replace(
            steps, estimate=nan, bound=None, confidence_interval=(nan, nan), medians=medians,
            margin=margins["seconds"], statistic=nan, pvalue=nan, pvalue_slower=nan, km_median_ratio=nan,
            km_median_ratio_bound=None, method="no wall clock: undefined"))
    z = scaled_logrank(prop, base, margins["seconds"] / c, grid=grid)
    lo, hi = steps.confidence_interval
    seconds = dataclasses.replace(steps, estimate=steps.estimate * c, confidence_interval=(lo * c, hi * c),
                                  medians=medians, km_median_ratio=steps.km_median_ratio * c,
                                  margin=margins["seconds"], statistic=z, pvalue=float(sps.norm.sf(z)),
                                  pvalue_slower=float(sps.norm.cdf(z)),
                                  method=f"steps ratio x step-cost ratio {c:.3g} (median training seconds per step "
                                         f"{cost[0]:.3g} / {cost[1]:.3g}); medians: KM median steps x each one's "
                                         f"seconds per step; test: the steps test at margin "
                                         f"{margins['seconds']:g} / {c:.3g}")
    return ClockRatios(steps, seconds)


@dataclass(frozen=True)
class FinalMetric:
    """The final metric at the fixed budget: its median over the `n` runs that trained their whole budget (None when
    none did; "inf"/"-inf" for an infinity: to_jsonable's infinity="string")."""

    median: float | str | None
    n: int

    def to_dict(self) -> dict:
        return {"median": self.median, "n": self.n}


def _final(g: pd.DataFrame) -> FinalMetric:
    """Final metric at the fixed budget: median over the runs that trained their whole budget."""
    full = g.loc[~g["stopped"], "final"].dropna()
    return FinalMetric(to_jsonable(float(full.median()), infinity="string") if len(full) else None, int(len(full)))


def _protocol(table: pd.DataFrame, target: float, model: str, proposed: str, baselines, min_seeds: int,
              max_eval_every: int) -> str | None:
    """Why the protocol is not met on this model (None: it is)."""
    seeds = table.groupby("optimizer")["seed"].nunique().to_dict()
    if not np.isfinite(target):
        return f"no target for model {model!r}"
    missing = [o for o in (proposed, *baselines) if o not in seeds]
    if missing:
        return f"needs runs of {proposed!r} and every baseline {list(baselines)}; missing {missing}"
    few = {o: seeds[o] for o in (proposed, *baselines) if seeds[o] < min_seeds}
    if few:
        return f"fewer than {min_seeds} seeds per compared optimizer ({few})"
    if table.loc[table["optimizer"].isin([proposed, *baselines]), "eval_spacing"].max() > max_eval_every:
        return f"evaluations more than {max_eval_every} steps apart"
    return None


def time_to_target(metrics_by_run: Mapping[str, pd.DataFrame], targets: Mapping[str, float], *, stats: StatsConfig,
                   report: ReportConfig, min_seeds: int = MIN_SEEDS, max_eval_every: int = MAX_EVAL_EVERY,
                   excluded: Mapping[str, str] | None = None) -> Keyed:
    """Claim 4 per model at one target per model under the one time-to-target rule (module docstring).

    Args:
        metrics_by_run: run id ``<model>__<optimizer>__s<seed>`` -> metrics with columns ``step``,
            ``wall_time`` (optional ``eval_wall_time``, ``probe_wall_time``) and val_accuracy | val_bpc | val_loss.
        targets: model -> fixed target value.
        stats: margins ``time_to_target_steps_ratio`` and ``time_to_target_seconds_ratio`` (upper ends),
            ``confidence_level``.
        report: ``proposed`` and ``baselines`` (the first-order optimizers it must beat).
        min_seeds: Fewest seeds per compared optimizer for a verdict other than inconclusive.
        max_eval_every: Widest spacing between evaluations (steps) for a verdict.
        excluded: run -> reason, for runs that did not train: censored at their budget.

    Returns:
        One :class:`TimeToTargetResult` per model (a statsfile.Keyed tuple: ``result["<model>"]`` finds one).
    """
    from brownformer.config import RunSpec  # config imports nothing from stats: no cycle

    excluded = dict(excluded or {})
    proposed = report.proposed
    margins = {"steps": float(stats.margins["time_to_target_steps_ratio"][1]),
               "seconds": float(stats.margins["time_to_target_seconds_ratio"][1])}
    specs = {r: RunSpec.parse(r) for r in metrics_by_run}
    out: list[TimeToTargetResult] = []
    for model in sorted({s.model for s in specs.values()}):
        runs = {r: df for r, df in sorted(metrics_by_run.items()) if specs[r].model == model}
        m = val_metric(next(iter(runs.values())))
        target = float(targets.get(model, np.nan))
        table = _run_rows(runs, specs, target, m.column, m.higher_is_better, excluded)
        by_opt = {o: g for o, g in table.groupby("optimizer", sort=True)}
        medians = {o: km_median_bounded(*_censored(g, "steps")) for o, g in by_opt.items()}
        # steps are read on the evaluation grid (module docstring of stats/survival.scaled_logrank)
        grid = {"steps": float(table["eval_spacing"].replace(np.inf, np.nan).max())}
        grid["steps"] = grid["steps"] if np.isfinite(grid["steps"]) else 0.0
        ratios = {other: _ratios(by_opt[proposed], g, margins, stats.confidence_level, grid["steps"])
                  for other, g in by_opt.items() if other != proposed and proposed in by_opt}
        baselines = tuple(report.baselines)
        present = [b for b in baselines if b in medians]
        best = min(present, key=lambda b: (medians[b].bound is not None, medians[b].estimate)) if present else ""
        why = _protocol(table, target, model, proposed, baselines, min_seeds, max_eval_every)
        verdicts = {b: _verdict(ratios[b]) for b in present if b in ratios}
        if why is None:
            verdict, reason = _pooled(verdicts, ratios)
        else:
            verdict, reason = "inconclusive", why
        out.append(TimeToTargetResult(model=model, metric=m.column, higher_is_better=m.higher_is_better,
                                        target=target, proposed=proposed, baseline=best, runs=table,
                                        medians=medians, ratios=ratios, verdict=verdict, reason=reason,
                                        protocol_met=why is None, baselines=baselines, verdicts=verdicts,
                                        final={o: _final(g) for o, g in by_opt.items()}))
    return Keyed.of(out)
