"""Claim 4: iterative K-FAC reaches the target in fewer steps than the best first-order optimizer.

The rule is stats/comparison/time_to_target.py's: per model variant and per baseline (``report.baselines``:
AdamW, Muon, SGD) the ratio of steps to a fixed target (proposed / baseline) under the accelerated-failure-time
model, tested by the AFT log-rank test at the margins (steps ``time_to_target_steps_ratio``, 0.75; seconds
``time_to_target_seconds_ratio``, 1.0). The estimate reported is that test's point estimate (the ratio where its
statistic crosses 0; a bound "< x" or "> x" when the data cannot bound it), inside its inverted interval; the ratio
of Kaplan-Meier medians is kept beside it as a description. A model is supported only when K-FAC beats every
baseline (so the best one), and the claim only when every model variant of ``report.scope`` is (intersection-union
over baselines and models, claims/common.py). The scope is fixed in the config before evaluation: a model in scope
that misses the protocol (seeds, evaluation spacing, a target, a baseline) is inconclusive and so is the claim.

Critical values: each baseline's steps test rejects at critical values simulated at that comparison's shape
(time_to_target_size.calibrated_critical: the statistic's quantiles with the true ratio on the margin), not at the
normal ones, which were anti-conservative at 8 seeds a side on the evaluation grid.

Size gate: every decisive verdict of a comparison carries the rule's simulated error rates at that
comparison's own shape (stats/comparison/time_to_target_size.py: seeds, censoring, budget, evaluation grid); a
"supported" needs P(supported | ratio on the margin) <= MAX_SIZE (5%) for every baseline, a "not
supported" P(not supported | ratio on the margin) <= MAX_SIZE for the baseline that decides it;
otherwise the model is inconclusive, with the rates in the reason.

Targets: ``report.targets[model]`` is the deciding target, the largest share of ``report.target_levels``
(0.9 of a long tuned run's improvement); the other shares (0.5, 0.75) are reported on the line through
the same start (the median first evaluation of the model's runs, before any optimizer acts). Without a
configured target, ``reference_target`` of the mean curve of the runs of ``report.target_optimizer``
(flagged in the reason). The final metric at the fixed budget is reported per optimizer. Runs that did
not train (stats/core/training_status.py) are censored at their budget, not dropped, and named.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from brownformer.config import RunSpec
from brownformer.metrics import val_metric
from brownformer.verdicts import INCONCLUSIVE, ClaimRecord
from brownformer.statsfile import Decision, EffectResult, Keyed

from brownformer.stats.core.rule_history import claim_rule_history
from brownformer.stats.comparison.time_to_target import (deciding_baseline, level_target, reference_target,
                                                         time_to_target, with_critical_values)
from brownformer.stats.comparison.time_to_target_size import (MAX_SIZE, ComparisonShape, calibrated_critical,
                                                              log_time_law, rule_error_rates)
from .common import finite_or_none, pool_runs
from .comparison_records import RuleErrorSummary, TargetLevel
from .details import Claim4Details, Claim4EstimatedModelDetails, Claim4ModelDetails

__all__ = ["optimizer_claim", "claim4_targets", "claim4_scope", "ModelTarget", "TITLE"]

TITLE = "Iterative K-FAC reaches the target in fewer steps than the best first-order optimizer"
DECISIVE = ("supported", "not supported")
#: the critical values' simulation draws from numpy's stream [stats.seed, CRITICAL_STREAM], independent of the
#: error rates' (stats.seed), so the gate checks the calibrated rule on fresh replicates
CRITICAL_STREAM = 4


@dataclass(frozen=True)
class ModelTarget:
    """A model variant's deciding target of claim 4: its value and where it came from."""
    model: str
    value: float
    source: str


@dataclass(frozen=True)
class CriticalValues:
    """The calibrated ``(faster, slower)`` critical values of the steps statistic against one baseline."""
    baseline: str
    values: tuple[float, float]


def claim4_targets(metrics_by_run: dict[str, pd.DataFrame], report) -> tuple[ModelTarget, ...]:
    """Per model (sorted), its deciding target: the config's fixed target, else the mean curve of the target
    optimizer's runs (`reference_target`); a model with neither has none."""
    specs = {r: RunSpec.parse(r) for r in metrics_by_run}
    out = []
    for model in sorted({s.model for s in specs.values()}):
        if model in report.targets:
            out.append(ModelTarget(model, float(report.targets[model]), "config report.targets"))
            continue
        ref = [df for r, df in metrics_by_run.items()
               if specs[r].model == model and specs[r].optimizer == report.target_optimizer]
        if not ref:
            continue
        col = val_metric(ref[0]).column
        mean_curve = pd.concat([df[["step", col]].dropna() for df in ref]).groupby("step", as_index=False).mean()
        try:
            out.append(ModelTarget(model, reference_target(mean_curve, metric=col, fraction=max(report.target_levels)),
                                   f"mean curve of the {len(ref)} {report.target_optimizer} run(s) compared here "
                                   "(no fixed target in the config)"))
        except ValueError:
            continue
    return tuple(out)


def claim4_scope(metrics_by_run: dict[str, pd.DataFrame], report) -> list[str]:
    """The model variants that decide claim 4: ``report.scope``, else every model with runs of the proposed one."""
    if report.scope:
        return sorted(report.scope)
    return sorted({s.model for s in map(RunSpec.parse, metrics_by_run) if s.optimizer == report.proposed})


def _start(metrics_by_run: dict[str, pd.DataFrame], model: str) -> float:
    """Median first evaluation of a model's runs: the metric before training has moved it."""
    firsts = []
    for r, df in metrics_by_run.items():
        if RunSpec.parse(r).model == model:
            col = val_metric(df).column
            d = df.dropna(subset=[col]).sort_values("step")
            if len(d):
                firsts.append(float(d[col].iat[0]))
    return float(np.median(firsts)) if firsts else math.nan


def _shape(res, baseline: str, stats, margin: float) -> ComparisonShape:
    """The simulated shape of one comparison (module docstring): seeds, the baseline's log-normal law, budget,
    evaluation grid, margin and level."""
    runs = res.runs
    base = runs[runs["optimizer"] == baseline]
    times = np.where(base["reached"], base["steps"], base["censored_at"]).astype(float)
    mu, sigma = log_time_law(times, base["reached"].to_numpy(bool))
    n = runs.groupby("optimizer")["seed"].nunique()
    pair = runs[runs["optimizer"].isin([res.proposed, baseline])]
    return ComparisonShape(n_proposed=int(n[res.proposed]), n_baseline=int(n[baseline]), mu=mu, sigma=sigma,
                           budget=float(pair["censored_at"].max()), eval_every=float(pair["eval_spacing"].max()),
                           margin=margin, confidence_level=stats.confidence_level,
                           replicates=stats.calibration_replicates)


def _critical(res, shapes: dict[str, ComparisonShape], stats) -> tuple[CriticalValues, ...]:
    """The calibrated critical values of the steps statistic (time_to_target_size.calibrated_critical) of each
    baseline the normal ones decide, simulated at its comparison's shape (`shapes`, from :func:`_shape`) on a stream
    of its own (not the error rates' stream). The calibrated values are never less extreme than the normal ones, so
    an undecided baseline stays undecided: it needs no simulation."""
    return tuple(CriticalValues(b, calibrated_critical(shapes[b], rng=[stats.seed, CRITICAL_STREAM]))
                 for b, d in res.verdicts.items() if d.verdict in DECISIVE)


def _error_rate(rates, verdict: str) -> float:
    """The simulated rate of a false `verdict` at the margin."""
    return rates.size if verdict == "supported" else rates.size_not_supported


def _gated(res, rates: dict) -> Decision:
    """The model's Decision after the size gate (module docstring)."""
    verdict, reason = res.verdict, res.reason
    rule = "AFT log-rank at the steps margin, gated on the simulated error rate at the comparison's shape"
    if verdict == "supported":
        over = {b: r.size for b, r in rates.items() if r.size > MAX_SIZE}
    elif verdict == "not supported":
        deciding = deciding_baseline(res.verdicts, res.ratios)  # the baseline the reason names
        over = {deciding: rates[deciding].size_not_supported} if (
            rates[deciding].size_not_supported > MAX_SIZE) else {}
    else:
        return Decision(verdict, reason, rule=rule)
    if over:
        sizes = ", ".join(f"vs {b} {s:.1%}" for b, s in over.items())
        return Decision(INCONCLUSIVE, f"would be {verdict!r}, but the rule's simulated error rate at this shape "
                        f"exceeds {MAX_SIZE:.0%} ({sizes}): {reason}", rule=rule)
    worst = max(_error_rate(r, verdict) for r in rates.values())
    return Decision(verdict, reason + "; simulated error rate at this shape " + ", ".join(
        f"vs {b} {_error_rate(r, verdict):.1%}" for b, r in rates.items()), rule=rule, size=worst)


def _steps_ratio(res, baseline: str | None):
    """The steps ratio (survival.MedianRatioResult) of the proposed optimizer against `baseline`, or None."""
    ratio = res.ratios.get(baseline)
    return ratio.steps if ratio else None


def _estimate(res):
    """The headline estimate (steps ratio against the best baseline: the AFT log-rank point estimate) and its
    MedianRatioResult (None: no ratio)."""
    ratio = _steps_ratio(res, res.baseline)
    if ratio is None:
        return None, None
    name = (f"steps to target, {res.proposed} / {res.baseline} (best first-order baseline; AFT log-rank point "
            f"estimate{', a bound' if ratio.bound else ''})")
    return EffectResult.headline(name, ratio.estimate, tuple(ratio.confidence_interval), ratio.confidence_level), ratio


def _model_record(res, levels: dict, source: str, stats, margin: tuple[float, float], in_scope: bool) -> ClaimRecord:
    shapes = {b: _shape(res, b, stats, margin[1]) for b in res.verdicts} if res.protocol_met else {}
    critical = {c.baseline: c.values for c in _critical(res, shapes, stats)} if res.protocol_met else {}
    res = with_critical_values(res, critical)
    # the verdict rates at the critical values each baseline was decided at (the normal ones where it was undecided)
    rates = ({b: rule_error_rates(shapes[b], rng=stats.seed, critical=critical.get(b)) for b in res.verdicts}
             if res.protocol_met and res.verdict in DECISIVE else None)
    decision = _gated(res, rates) if rates else Decision(res.verdict, res.reason)
    summary = None if rates is None else RuleErrorSummary.of(rates, MAX_SIZE)
    est, ratio = _estimate(res)
    reason = (f"{decision.reason}; target {res.metric} {res.target:.4g} from the {source}; best first-order baseline "
              f"{res.baseline or 'none'}" + ("" if in_scope else "; not in report.scope: reported, not deciding"))
    pvals = [_steps_ratio(res, b) for b in res.baselines]
    p = max(r.pvalue for r in pvals) if pvals and all(r is not None for r in pvals) else None
    # per target share (reported, not deciding): the target, KM medians and every baseline's steps ratio
    shares = {f"{f:g}": TargetLevel.of(r) for f, r in sorted(levels.items())}
    details = (Claim4ModelDetails.of(res, pvalue=p, rule_error_rates=summary, levels=shares) if ratio is None else
               Claim4EstimatedModelDetails.of(res, pvalue=p, rule_error_rates=summary, levels=shares,
                                              estimate_bound=ratio.bound, estimate_text=ratio.text(),
                                              n_censored={o: m.n_censored for o, m in res.medians.items()}))
    return ClaimRecord("4", TITLE, decision.verdict, reason, estimate=est, margin=margin, details=details)


def optimizer_claim(metrics_by_run: dict[str, pd.DataFrame], stats, report, *,
                    excluded: dict[str, str] | None = None) -> ClaimRecord:
    """Claim 4 over the model variants of its scope (module docstring).

    Args:
        metrics_by_run: run id -> metrics table (brownformer.train's metrics.parquet).
        stats: StatsConfig (confidence_level, seed, alpha, calibration_replicates, margins["time_to_target_*"]).
        report: ReportConfig (proposed, baselines, scope, targets, target_levels, target_optimizer).
        excluded: run -> reason for runs that did not train: censored at their budget and named.

    Returns:
        The claim's ClaimRecord: per_model one record per model variant (deciding or not).
    """
    excluded = dict(excluded or {})
    steps_margin = tuple(stats.margins["time_to_target_steps_ratio"])
    seconds_margin = tuple(stats.margins["time_to_target_seconds_ratio"])
    targets = claim4_targets(metrics_by_run, report)
    main = max(report.target_levels)
    by_level: dict[float, Keyed] = {main: time_to_target(metrics_by_run, {t.model: t.value for t in targets},
                                                         stats=stats, report=report, excluded=excluded)
                                    if metrics_by_run else Keyed()}
    for f in report.target_levels:
        if f != main:
            level = {t.model: level_target(t.value, _start(metrics_by_run, t.model), f, main) for t in targets}
            by_level[f] = time_to_target(metrics_by_run, level, stats=stats, report=report, excluded=excluded)
    scope = claim4_scope(metrics_by_run, report)
    sources = {t.model: t.source for t in targets}
    per_model = {}
    for res in by_level[main]:
        model = res.model
        source = sources.get(model, "nowhere: no target")
        per_model[model] = _model_record(res, {f: r[model] for f, r in by_level.items()}, source, stats,
                                         steps_margin, model in scope)
    missing = [m for m in scope if m not in per_model]
    pooled, decider = pool_runs({m: per_model[m] for m in scope if m in per_model}, excluded={},
                                unit="model variants in scope")
    verdict, reason = pooled.verdict, pooled.reason
    if missing or not scope:
        verdict = INCONCLUSIVE
        reason = f"model variant(s) in scope without runs: {', '.join(missing)}" if missing else "empty scope"
    reason += (f"; scope (report.scope, fixed before evaluation): {', '.join(scope) or 'none'}; baselines "
               f"{', '.join(report.baselines)}")
    if report.screened_baselines:
        reason += (f"; screened out at tuning, not evaluated (every tuning run missed the target): "
                   f"{', '.join(report.screened_baselines)}")
    if excluded:
        reason += f"; did not train (censored at the budget): {', '.join(sorted(excluded))}"
    decided = [m for m in scope if m in per_model and per_model[m].estimate is not None]
    pick = decider or (max(decided, key=lambda m: _upper(per_model[m].estimate)) if decided else None)
    pvals = [per_model[m].details.pvalue for m in scope if m in per_model]
    p_iut = max(pvals) if pvals and all(p is not None for p in pvals) and not missing else None
    headline = per_model[pick] if pick else None
    return ClaimRecord(
        "4", TITLE, verdict, reason + (f"; deciding model {pick}" if pick else ""),
        estimate=headline.estimate if headline else None, margin=steps_margin,
        tests=[{"name": f"AFT log-rank at the steps margin, {report.proposed} faster than every baseline "
                        f"({', '.join(report.baselines)}; one-sided; intersection-union over the baselines and the "
                        "model variants in scope: largest p)",
                "statistic": None, "pvalue": finite_or_none(p_iut),
                "rejected": None if p_iut is None else bool(p_iut < (1 - stats.confidence_level) / 2)}],
        per_model=per_model,
        details=Claim4Details(pvalue=p_iut, proposed=report.proposed, baselines=list(report.baselines),
                              target_optimizer=report.target_optimizer, target_levels=list(report.target_levels),
                              seconds_margin=list(seconds_margin), did_not_train=sorted(excluded), scope=scope,
                              estimate_bound=getattr(headline.details, "estimate_bound", None) if headline else None,
                              estimate_text=getattr(headline.details, "estimate_text", None) if headline else None,
                              max_size=MAX_SIZE, rule_history=claim_rule_history("4")))


def _upper(est: EffectResult) -> float:
    hi = est.confidence_interval[1]
    return math.inf if hi is None or (isinstance(hi, float) and math.isnan(hi)) else hi
