"""The report's Scaling section: claims against depth and width (brownformer.stats.claims.scaling's tables)."""
from __future__ import annotations

import math

import pandas as pd

from brownformer.report.context import ReportContext
from brownformer.report.markdown import fmt, fmt_ci, md_table
from brownformer.stats.claims.scaling import (SCALING_CLAIMS, STUDY_COMMAND, claim_points, pooled_by_model, series_of,
                                       training_table, trends, verdict_flips)

__all__ = ["scaling_text"]

def _baselines(ctx: ReportContext) -> dict:
    """Chance level of each dataset the study uses (None where its prepared data is missing)."""
    datasets = {ctx.cfg.models[p.model].dataset for p in series_of(ctx.cfg)}
    return {name: ctx.results.chance_baseline(name) for name in datasets}


def _trend_sentence(claim: str, rows: pd.DataFrame, flips: pd.DataFrame, alpha: float) -> str:
    """One sentence per claim: the direction along each series (a trend: rank correlation p < alpha, the config's
    test level) and where the majority verdict flips."""
    parts = []
    for r in rows.itertuples(index=False):
        f = flips[(flips["group"] == r.group) & (flips["series"] == r.series)]
        turned = f[f["flip"]]
        where = ("the verdict flips " + ", ".join(
            f"to {v.verdict} at {v.series} {v.size}" for v in turned.itertuples(index=False))
            if not turned.empty else f"the verdict stays {f['verdict'].iloc[0]}" if len(f) else "no verdicts")
        if not math.isfinite(r.rho):
            why = ("is the same at every size" if r.sizes >= 2 else
                   f"has no trend to estimate ({r.sizes} sizes with an estimate)")
            parts.append(f"{r.group}, {r.series}: {r.name or 'the estimate'} {why}; {where}")
            continue
        sign = "rises" if r.rho > 0 else "falls"
        if not math.isfinite(r.pvalue):  # two sizes: a direction, no test
            trend = f"{sign} from the smallest to the largest {r.series} ({r.sizes} sizes, too few to test)"
        else:
            trend = (f"{sign if r.pvalue < alpha else 'shows no clear trend'} with {r.series} "
                     f"(Spearman rho {fmt(r.rho, 2)}, p {fmt(r.pvalue, 2)})")
        parts.append(f"{r.group}, {r.series}: {r.name or 'the estimate'} {trend}; {where}")
    return f"- **Claim {claim}.** " + ("; ".join(parts) if parts else "no per-run estimates") + "."


def _estimates_table(pooled: pd.DataFrame) -> pd.DataFrame:
    t = pooled.copy()
    t["estimate (CI)"] = [f"{fmt(v)} {fmt_ci(lo, hi)}" if math.isfinite(v) else "n/a"
                          for v, lo, hi in zip(t["value"], t["ci_low"], t["ci_high"])]
    wide = t.pivot_table(index=["group", "series", "size", "optimizer"], columns="claim", values="estimate (CI)",
                         aggfunc="first").reset_index()
    wide.columns = [f"claim {c}" if c in SCALING_CLAIMS else c for c in wide.columns]
    return wide


def scaling_text(ctx: ReportContext) -> str:
    """Markdown of the Scaling section; without a scaling study, how to produce one."""
    if not series_of(ctx.cfg):
        return (f"This config has no scaling study. Run `{STUDY_COMMAND}`: the same workflow over the depth x "
                "width grid that config file lists, writing to its own results and figures folders (its `paths`); "
                "its report has this section filled in.")
    points = claim_points(ctx.cfg, ctx.results.claims)
    train = training_table(ctx.cfg, ctx.results.metrics_by_run(), _baselines(ctx))
    parts = [f"Depth series at d_model = {ctx.cfg.scaling['width']}, width series at "
             f"{ctx.cfg.scaling['depth']} layers. Each point pools a model's seeds per optimizer: the mean of "
             "the per-run estimates, with a CI that adds each run's own uncertainty to the spread between seeds "
             "(brownformer.stats.claims.scaling). A trend is Spearman's rank correlation of the per-run estimates with "
             f"size (called a trend at p < {ctx.cfg.stats.alpha}, the config's test level); a verdict flips where the "
             "majority verdict of a size's runs differs from the previous size's.", ""]
    if points.empty:
        parts.append("Per-run claim estimates: not available (claims.json missing or without per-run records).")
    else:
        tr, flips = trends(points), verdict_flips(points)
        parts += [_trend_sentence(c, tr[tr["claim"] == c], flips[flips["claim"] == c], ctx.cfg.stats.alpha)
                  for c in SCALING_CLAIMS if c in set(tr["claim"])]
        parts += ["", "Key statistic per claim (seed-pooled estimate and CI):", "",
                  md_table(_estimates_table(pooled_by_model(points)))]
    n_plateau, n_runs = int(train["reached_plateau"].sum()), int(train["runs"].sum())
    parts += ["", f"Training status (brownformer.stats.core.training_status): {n_plateau} of {n_runs} runs reached a "
              "plateau (< 1% relative improvement of the validation metric over the last 20% of steps); "
              f"{int(train['did_not_train'].sum())} did not train.", "", md_table(train)]
    return "\n".join(parts)
