"""Claim 4: the proposed optimizer (iterative K-FAC) reaches the target in fewer steps than the baseline.

The rule is stats/time_to_target.py's, the one the optimizer benchmark uses: per model variant,
the ratio of Kaplan-Meier median steps to a fixed target (proposed / baseline) with a bootstrap
interval over seeds; supported when the interval lies below the `time_to_target_steps_ratio` margin
(0.75) and the seconds ratio's below `time_to_target_seconds_ratio` (1.0); not supported when one
lies above; otherwise inconclusive. The proposed optimizer is also compared with every other
optimizer of the grid (Muon included: ratios and log-rank tests in the record's details). The
optimizers come from the report config (`target_optimizer`, `proposed`).

Scope: the model variants whose runs meet the protocol (at least 8 seeds of both optimizers, every
5 steps on the whole validation split, a target). Other variants are reported per model as
inconclusive with the reason and do not enter the pooled verdict; the claim names its scope. Each
decided model's record carries the rule's simulated error rates at its shape
(stats/time_to_target_size.py): size = P(supported) with the true ratio on the margin.

Targets: `report.targets[model]` when the config gives one (from a long tuned run of the target
optimizer, as the protocol asks); otherwise `reference_target` of the mean curve of the target
optimizer's runs in this grid, which the verdict's reason flags (those runs are also compared).
Runs that did not train (stats/training_status.py) are left out and named. Across the model
variants in scope the verdicts pool by the intersection-union rule of claims/common.py; the
claim's test is the one-sided log-rank test (proposed sooner than baseline), its p-value the
largest over those variants.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from brownformer.config import RunSpec
from brownformer.metrics import val_metric
from brownformer.verdicts import INCONCLUSIVE, ClaimRecord, Estimate

from ..batch_stat import to_jsonable
from ..time_to_target import reference_target, time_to_target
from ..rule_history import claim_rule_history
from ..time_to_target_size import log_time_law, rule_error_rates
from .common import did_not_train_record, finite_or_none, pool_runs

__all__ = ["optimizer_claim", "claim4_targets", "TITLE"]

TITLE = "The proposed optimizer reaches the target in fewer steps than the baseline"


def claim4_targets(metrics_by_run: dict[str, pd.DataFrame], report) -> dict[str, tuple[float, str]]:
    """model -> (target value, where it came from): the config's fixed target, else the mean curve of the
    target optimizer's runs (`reference_target`)."""
    specs = {r: RunSpec.parse(r) for r in metrics_by_run}
    out = {}
    for model in sorted({s.model for s in specs.values()}):
        if model in report.targets:
            out[model] = (float(report.targets[model]), "config report.targets")
            continue
        ref = [df for r, df in metrics_by_run.items()
               if specs[r].model == model and specs[r].optimizer == report.target_optimizer]
        if not ref:
            continue
        col = val_metric(ref[0]).column
        mean_curve = pd.concat([df[["step", col]].dropna() for df in ref]).groupby("step", as_index=False).mean()
        try:
            out[model] = (reference_target(mean_curve, metric=col),
                          f"mean curve of the {len(ref)} {report.target_optimizer} run(s) compared here "
                          "(no fixed target in the config)")
        except ValueError:
            continue
    return out


def _rule_rates(res, stats, margin: float) -> dict | None:
    """Simulated verdict rates of the steps rule at this model's shape (None when the protocol is not met)."""
    if not res.protocol_met:
        return None
    runs = res.runs
    base = runs[runs["optimizer"] == res.baseline]
    times = np.where(base["reached"], base["steps"], base["censored_at"]).astype(float)
    mu, sigma = log_time_law(times, base["reached"].to_numpy(bool))
    n = runs.groupby("optimizer")["seed"].nunique()
    pair = runs[runs["optimizer"].isin([res.proposed, res.baseline])]
    rates = rule_error_rates(int(n[res.proposed]), int(n[res.baseline]), mu=mu, sigma=sigma,
                             budget=float(pair["censored_at"].max()), eval_every=float(pair["eval_spacing"].max()),
                             margin=margin, confidence_level=stats.confidence_level, n_resamples=stats.n_resamples,
                             replicates=stats.calibration_replicates, rng=stats.seed)
    return rates.to_dict()


def _model_record(res, source: str, stats, margin: tuple[float, float]) -> ClaimRecord:
    ratio = (res.ratios.get(res.baseline) or {}).get("steps")
    est = (Estimate(f"steps to target, {res.proposed} / {res.baseline} (ratio of Kaplan-Meier medians)",
                    ratio.estimate, tuple(ratio.confidence_interval), ratio.confidence_level) if ratio else None)
    test = res.logrank.get(res.baseline) or {}
    rates = _rule_rates(res, stats, margin[1])
    reason = f"{res.reason}; target {res.metric} {res.target:.4g} from the {source}"
    if rates is not None:
        reason += f"; simulated size of the rule at this shape {rates['size']:.1%}"
    return ClaimRecord("4", TITLE, res.verdict, reason, estimate=est, margin=margin,
                       details={"pvalue": test.get("pvalue"), "rule_error_rates": rates,
                                **to_jsonable(res.to_dict())})


def optimizer_claim(metrics_by_run: dict[str, pd.DataFrame], stats, report, *,
                    excluded: dict[str, str] | None = None) -> ClaimRecord:
    """Claim 4 over the model variants in scope (module docstring).

    Args:
        metrics_by_run: run id -> metrics table (brownformer.train's metrics.parquet).
        stats: StatsConfig (confidence_level, n_resamples, seed, alpha, calibration_replicates,
            margins["time_to_target_*_ratio"]).
        report: ReportConfig (target_optimizer, proposed, targets).
        excluded: run -> reason for runs that did not train; left out and named.

    Returns:
        The claim's ClaimRecord: per_model one record per model variant (in scope or not), per_run the
        runs left out.
    """
    excluded = dict(excluded or {})
    steps_margin = tuple(stats.margins["time_to_target_steps_ratio"])
    seconds_margin = tuple(stats.margins["time_to_target_seconds_ratio"])
    trained = {r: df for r, df in metrics_by_run.items() if r not in excluded}
    targets = claim4_targets(trained, report)
    results = time_to_target(trained, {m: t for m, (t, _) in targets.items()}, stats=stats,
                             report=report) if trained else {}
    per_model = {}
    for model, res in results.items():
        source = targets.get(model, (None, "nowhere: no target"))[1]
        per_model[model] = _model_record(res, source, stats, steps_margin)
    scope = sorted(m for m, res in results.items() if res.protocol_met)
    out_of_scope = sorted(set(results) - set(scope))
    verdict, reason, decider = pool_runs({m: per_model[m] for m in scope}, excluded={}, unit="model variants")
    if not scope:
        verdict = INCONCLUSIVE
        reason = "no model variant meets the protocol (seeds, evaluation spacing, target)"
    reason += f"; scope: {', '.join(scope) or 'none'}"
    if out_of_scope:
        reason += f" (out of scope, protocol not met: {', '.join(out_of_scope)})"
    if excluded:
        reason += f"; left out (did not train): {', '.join(sorted(excluded))}"
    decided = [m for m in scope if per_model[m].estimate is not None]
    pick = decider or (max(decided, key=lambda m: _upper(per_model[m].estimate)) if decided else None)
    pvals = [per_model[m].details.get("pvalue") for m in decided]
    p_iut = max(pvals) if decided and all(p is not None for p in pvals) else None
    return ClaimRecord(
        "4", TITLE, verdict, reason + (f"; deciding model {pick}" if pick else ""),
        estimate=per_model[pick].estimate if pick else None, margin=steps_margin,
        tests=[{"name": f"log-rank, {report.proposed} reaches the target sooner than {report.target_optimizer} "
                        "(one-sided; intersection-union over the model variants in scope: largest p)",
                "statistic": None, "pvalue": finite_or_none(p_iut),
                "rejected": None if p_iut is None else bool(p_iut < stats.alpha)}],
        per_run={r: did_not_train_record("4", TITLE, why) for r, why in sorted(excluded.items())},
        per_model=per_model,
        details={"pvalue": p_iut, "proposed": report.proposed, "target_optimizer": report.target_optimizer,
                 "seconds_margin": list(seconds_margin), "did_not_train": sorted(excluded), "scope": scope,
                 "out_of_scope": out_of_scope, "rule_history": claim_rule_history("4")})


def _upper(est: Estimate) -> float:
    hi = est.confidence_interval[1]
    return math.inf if hi is None or (isinstance(hi, float) and math.isnan(hi)) else hi
