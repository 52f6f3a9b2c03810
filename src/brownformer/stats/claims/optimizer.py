"""Claim 4: the proposed optimizer (iterative K-FAC) reaches the target in fewer steps than the baseline.

The rule is stats/time_to_target.py's, the one the optimizer benchmark uses (issue 11): per model
variant, the ratio of median steps to a fixed target (proposed / baseline) with a bootstrap interval
over seeds; supported when the interval lies below the `time_to_target_steps_ratio` margin (0.75)
and the seconds ratio's below `time_to_target_seconds_ratio` (1.0); not supported when one lies
above; otherwise inconclusive, also whenever the protocol is not met (too few seeds, evaluations
too sparse). The optimizers come from the report config (`target_optimizer`, `proposed`).

Targets: `report.targets[model]` when the config gives one (from a long tuned run of the target
optimizer, as the protocol asks); otherwise `reference_target` of the mean curve of the target
optimizer's runs in this grid, which the verdict's reason flags (those runs are also compared).
Runs that did not train (stats/training_status.py) are left out and named. Across model variants
the verdicts pool by the intersection-union rule of claims/common.py.
"""
from __future__ import annotations

import math

import pandas as pd

from brownformer.config import RunSpec
from brownformer.metrics import val_metric
from brownformer.verdicts import ClaimRecord, Estimate

from ..results import to_jsonable
from ..time_to_target import reference_target, time_to_target
from .common import did_not_train_record, equivalence_pvalue, finite_or_none, pool_runs

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


def _model_record(res, source: str, stats, margin: tuple[float, float]) -> ClaimRecord:
    ratio = (res.ratios.get(res.baseline) or {}).get("steps")
    est = (Estimate(f"steps to target, {res.proposed} / {res.baseline} (ratio of medians)", ratio.estimate,
                    tuple(ratio.confidence_interval), ratio.confidence_level) if ratio else None)
    p = None
    if ratio and all(math.isfinite(c) for c in ratio.confidence_interval) and math.isfinite(ratio.estimate):
        from scipy.stats import norm
        lo, hi = ratio.confidence_interval
        se = (hi - lo) / (2 * norm.ppf(0.5 + stats.confidence_level / 2))  # normal approximation from the CI
        p = equivalence_pvalue(ratio.estimate, se, margin)
    reason = f"{res.reason}; target {res.metric} {res.target:.4g} from the {source}"
    return ClaimRecord("4", TITLE, res.verdict, reason, estimate=est, margin=margin,
                       details={"p_value": p, **to_jsonable(res.to_dict())})


def optimizer_claim(metrics_by_run: dict[str, pd.DataFrame], stats, report, *,
                    excluded: dict[str, str] | None = None) -> ClaimRecord:
    """Claim 4 over every model variant (module docstring).

    Args:
        metrics_by_run: run id -> metrics table (brownformer.train's metrics.parquet).
        stats: StatsConfig (confidence_level, n_resamples, seed, alpha, margins["time_to_target_*_ratio"]).
        report: ReportConfig (target_optimizer, proposed, targets).
        excluded: run -> reason for runs that did not train; left out and named.

    Returns:
        The claim's ClaimRecord: per_model one record per model variant, per_run the runs left out.
    """
    excluded = dict(excluded or {})
    steps_margin = tuple(stats.margins["time_to_target_steps_ratio"])
    seconds_margin = tuple(stats.margins["time_to_target_seconds_ratio"])
    trained = {r: df for r, df in metrics_by_run.items() if r not in excluded}
    targets = claim4_targets(trained, report)
    results = time_to_target(trained, {m: t for m, (t, _) in targets.items()}, proposed=report.proposed,
                             baseline=report.target_optimizer, steps_margin=steps_margin[1],
                             seconds_margin=seconds_margin[1], confidence_level=stats.confidence_level,
                             n_resamples=stats.n_resamples, rng=stats.seed) if trained else {}
    per_model = {}
    for model, res in results.items():
        source = targets.get(model, (None, "nowhere: no target"))[1]
        per_model[model] = _model_record(res, source, stats, steps_margin)
    verdict, reason, decider = pool_runs(per_model, excluded={}, unit="model variants")
    if excluded:
        reason += f"; left out (did not train): {', '.join(sorted(excluded))}"
    decided = [m for m, rec in per_model.items() if rec.estimate is not None]
    pick = decider or (max(decided, key=lambda m: per_model[m].estimate.ci[1]) if decided else None)
    pvals = [per_model[m].details.get("p_value") for m in decided]
    p_iut = max(pvals) if decided and all(p is not None for p in pvals) else None
    return ClaimRecord(
        "4", TITLE, verdict, reason + (f"; deciding model {pick}" if pick else ""),
        estimate=per_model[pick].estimate if pick else None, margin=steps_margin,
        tests=[{"name": "steps-ratio equivalence (intersection-union over model variants)", "statistic": None,
                "p_value": finite_or_none(p_iut), "reject": None if p_iut is None else bool(p_iut < stats.alpha)}],
        per_run={r: did_not_train_record("4", TITLE, why) for r, why in sorted(excluded.items())},
        per_model=per_model,
        details={"p_value": p_iut, "proposed": report.proposed, "target_optimizer": report.target_optimizer,
                 "seconds_margin": list(seconds_margin), "did_not_train": sorted(excluded)})
